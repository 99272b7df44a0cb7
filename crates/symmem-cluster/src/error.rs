use std::path::PathBuf;

/// Why the emulated cluster could not be built, or a job on it could not run.
/// How to install Slurm and what it needs (Debian / Ubuntu).
pub const SLURM_FIX: &str = "apt-get install slurmctld slurmd slurm-client munge \
                             slurm-wlm-basic-plugins (Debian / Ubuntu)";

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(
        "an emulated cluster needs root (its nodes are namespaces with their own mounts); run \
         as root, e.g. `sudo -E cargo xtask test --nodes 2`, or in CI's root container"
    )]
    NotRoot,
    /// A program the nodes or Slurm need is not installed (the message names its package).
    #[error(transparent)]
    ToolMissing(#[from] symmem_process::ProgramError),
    /// The cluster's own folder could not be made.
    #[error("the emulated cluster needs a folder of its own: {0}")]
    Folder(#[from] symmem_process::TempDirError),
    #[error("a cluster needs 2 to {max} nodes, not {asked}", max = crate::MAX_NODES)]
    NodeCount { asked: usize },
    #[error(
        "node {node} did not start: {detail}. The machine must allow `unshare --uts --mount \
         --ipc` (a container needs --privileged or CAP_SYS_ADMIN)"
    )]
    NodeStart { node: String, detail: String },
    #[error(
        "{} is not visible on the nodes (each has its own /tmp, /run and /dev/shm): put the \
         program elsewhere, e.g. under Cluster::shared_dir()",
        .0.display()
    )]
    HiddenOnNodes(PathBuf),
    /// What Slurm needs that is not a program (the user munge).
    #[error("{what} was not found; install {package}: {fix}", fix = SLURM_FIX)]
    SlurmMissing { what: String, package: &'static str },
    #[error(
        "Slurm already runs on this cluster: use its handle, or drop it before starting another"
    )]
    SlurmRunning,
    #[error(
        "this Slurm has no PMIx plugin (`srun --mpi=list` shows no pmix): install \
         slurm-wlm-basic-plugins (Debian / Ubuntu). It printed:\n{list}"
    )]
    SlurmNoPmix { list: String },
    #[error(
        "{daemon} did not start on {node}; fix what its output and log say (last lines):\n{log}"
    )]
    SlurmDaemon {
        daemon: String,
        node: String,
        log: String,
    },
    #[error(
        "the Slurm nodes were not all idle within {within:?}; sinfo says:\n{sinfo}\nFix what \
         the daemons' logs say (last lines):\n{logs}"
    )]
    SlurmNotReady {
        within: std::time::Duration,
        sinfo: String,
        logs: String,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl ClusterError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| Self::Io { what, source }
    }
}

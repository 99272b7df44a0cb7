//! What the emulated cluster hands a launcher: its hosts, the rsh agent, a wrapper that runs
//! the launcher inside the first node, and a sweep of what a job left on the nodes. Jobs
//! themselves are `symmem-launch`'s ([`symmem_launch::Launcher`]); this crate defines none.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use symmem_launch::{Hosts, LeftBehind, Mpirun, Sweep};
use symmem_process::procfs;

use crate::procs::{self, NodeRef, Process};
use crate::{Cluster, ClusterError, NODE_VIEW};

/// The variables that hold a rank's number under the launchers the cluster runs (Open MPI's
/// `mpirun`, Slurm's `srun`).
const RANK_VARIABLES: [&str; 2] = ["OMPI_COMM_WORLD_RANK", "SLURM_PROCID"];

/// How long [`Cluster::signal_rank`] looks for a rank that is not visible (yet).
const FIND_RANK_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

impl Cluster {
    /// The nodes' host names, in order (`node-a`, `node-b`, ...).
    pub fn hosts(&self) -> Vec<String> {
        self.nodes().iter().map(|n| n.name().to_string()).collect()
    }

    /// The rsh agent as the nodes see it: `agent HOST CMD...` runs CMD on HOST (its name or
    /// address) with the clean environment ssh gives (HOME, USER, LOGNAME, SHELL and
    /// [`SSH_PATH`](crate::SSH_PATH)), nothing of the caller's but the cluster's origin
    /// ([`ORIGIN_VARIABLE`](crate::ORIGIN_VARIABLE)), as sshd adds `SSH_CONNECTION`.
    pub fn agent(&self) -> PathBuf {
        PathBuf::from(format!("{NODE_VIEW}/agent"))
    }

    /// The command prefix that runs a launcher inside the first node: its namespaces
    /// ([`Cluster::enter_words`]), `/` as the working folder, and without the folders named for
    /// this machine's `/run` and `/tmp` (the node has its own).
    pub fn wrapper(&self) -> Vec<OsString> {
        let mut words: Vec<OsString> = self
            .enter_words(self.first_node())
            .into_iter()
            .map(OsString::from)
            .collect();
        words.extend(
            ["env", "-C", "/", "-u", "XDG_RUNTIME_DIR", "-u", "TMPDIR"].map(OsString::from),
        );
        words
    }

    /// A sweep for the launcher: after a job, what still runs on a node gets the grace period
    /// to end by itself, then is killed and reported.
    pub fn sweeper(&self) -> Sweep {
        self.sweeper_sparing(procs::spare_none)
    }

    /// [`Cluster::sweeper`], leaving alone what `spare` names (the daemons of a launcher that
    /// outlive its jobs, such as Slurm's).
    pub(crate) fn sweeper_sparing(&self, spare: procs::Spare) -> Sweep {
        let nodes = self.node_refs();
        Sweep::new(move |grace| {
            let settle = Instant::now() + grace;
            while nodes.iter().any(|n| !n.sweepable(spare).is_empty()) && Instant::now() < settle {
                std::thread::sleep(Duration::from_millis(10));
            }
            procs::sweep_sparing(&nodes, Duration::from_secs(5), spare)
                .into_iter()
                .map(|(node, p)| LeftBehind {
                    node,
                    pid: p.pid as i32,
                    command: p.command,
                })
                .collect()
        })
    }

    /// `mpirun` across every node: the cluster's hosts, agent, wrapper and sweep, over the
    /// cluster's [`Network`](crate::Network) (its interfaces for Open MPI's out-of-band channel).
    pub fn mpirun(&self) -> Mpirun {
        Mpirun {
            program: self.mpirun_path().to_path_buf(),
            rsh_agent: Some(self.agent()),
            wrapper: self.wrapper(),
            args: [
                "--mca",
                "oob_tcp_if_include",
                self.network().mpi_interfaces(),
                "--bind-to",
                "none",
            ]
            .map(OsString::from)
            .to_vec(),
            sweep: Some(self.sweeper()),
            ..Mpirun::new(Hosts::List(self.hosts()))
        }
    }

    /// The process of rank `rank` of the running job and its node: the outermost process on
    /// a node whose environment names that rank.
    pub fn rank_process(&self, rank: usize) -> Option<(String, Process)> {
        let wanted = rank.to_string();
        for node in self.nodes() {
            let procs = self.processes(node);
            let mine: Vec<&Process> = procs
                .iter()
                .filter(|p| {
                    RANK_VARIABLES
                        .iter()
                        .any(|name| procfs::env_var(p.pid as i32, name).as_deref() == Some(&wanted))
                })
                .collect();
            if let Some(top) = mine
                .iter()
                .find(|p| !mine.iter().any(|q| q.pid == p.parent))
            {
                return Some((node.name().to_string(), (*top).clone()));
            }
        }
        None
    }

    /// Sends `signal` to rank `rank` of the running job; returns its node and process.
    ///
    /// A rank is found by its environment, which the kernel shows empty while the process is
    /// in `execve` (the new image's environment is placed after its memory is switched): a
    /// rank that just printed and now execs (`echo started; exec sleep`) is invisible for that
    /// moment. So it is looked for again, every 5 ms, for up to [`FIND_RANK_WITHIN`].
    pub fn signal_rank(
        &self,
        rank: usize,
        signal: nix::sys::signal::Signal,
    ) -> Result<(String, Process), ClusterError> {
        let deadline = std::time::Instant::now() + FIND_RANK_WITHIN;
        let (node, process) = loop {
            if let Some(found) = self.rank_process(rank) {
                break found;
            }
            if std::time::Instant::now() >= deadline {
                return Err(ClusterError::io(format!("finding rank {rank}"))(
                    std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        format!(
                            "no process on any node has it within {FIND_RANK_WITHIN:?} (not \
                             started yet, or already ended)"
                        ),
                    ),
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(process.pid as i32), signal)
            .map_err(|e| ClusterError::io(format!("signalling rank {rank}"))(e.into()))?;
        Ok((node, process))
    }

    /// The temp folder of the cluster (for reports).
    pub fn folder(&self) -> &std::path::Path {
        self.root()
    }

    pub(crate) fn node_refs(&self) -> Vec<NodeRef> {
        self.nodes()
            .iter()
            .map(|n| NodeRef {
                name: n.name().to_string(),
                holder: n.pid(),
                mount_ns: n.mount_namespace().to_string(),
            })
            .collect()
    }
}

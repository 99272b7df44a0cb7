//! Where the matrix runs: this host, the emulated cluster (`--nodes N`), or a real cluster
//! through `--launcher mpirun|srun`. Each gives a [`Launcher`] and the nodes it spans; the
//! driver (`test.rs`) is the same for all.

use anyhow::{Context, bail};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use symmem_cluster::{Cluster, Slurm};
use symmem_launch::{Hosts, Launcher, Mpirun, Srun};

/// The launchers `--launcher` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LauncherKind {
    /// symmem's own launcher, every rank on this host.
    Local,
    /// Open MPI's mpirun, over --hostfile or --host (or the emulated nodes of --nodes).
    Mpirun,
    /// Slurm's srun --mpi=pmix, inside an allocation (salloc, sbatch).
    Srun,
}

/// The options that say where the ranks run.
#[derive(clap::Args, Debug, Default)]
pub struct WhereArgs {
    /// Who starts the ranks [default: local; mpirun with --nodes].
    #[arg(long, value_enum)]
    pub launcher: Option<LauncherKind>,
    /// Run across this many emulated nodes (namespaces of this machine, each with its own
    /// hostname, 127.0.0.x address, /tmp, /run and /dev/shm; needs root), started with Open
    /// MPI's mpirun, or with --launcher srun by Slurm daemons started on the nodes for the run.
    /// --ranks K then means K ranks on each node: --nodes 2 --ranks 1,2,4 runs 2x1, 2x2 and 2x4.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=symmem_cluster::MAX_NODES as i64))]
    pub nodes: u8,
    /// With --launcher mpirun|srun: how many nodes of the real cluster a layout K or nK spans
    /// [default: mpirun: every host given; srun: $SLURM_JOB_NUM_NODES].
    #[arg(short = 'N', long = "node-count", value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub node_count: Option<u16>,
    /// With --launcher mpirun: an Open MPI hostfile (`name slots=N` a line); its hosts are
    /// taken in order.
    #[arg(long, value_name = "FILE", conflicts_with = "host")]
    pub hostfile: Option<PathBuf>,
    /// With --launcher mpirun: the hosts, comma-separated, in order.
    #[arg(long, value_name = "HOST", value_delimiter = ',')]
    pub host: Vec<String>,
    /// Instead of the matrix, end one rank (the last, on the last node) mid-run, at the first
    /// --ranks layout, and check that the job ends within --grace, that the culprit is named
    /// (with its node) and, on emulated nodes, that nothing is left on any node. On emulated
    /// nodes the rank gets kill -9; elsewhere, where this side cannot reach the nodes, it
    /// panics (an injected fault).
    #[arg(long)]
    pub kill_test: bool,
    /// Arguments for mpirun or srun, after `--` (e.g. `-- --partition gpu`).
    #[arg(last = true, value_name = "LAUNCHER ARGS")]
    pub launcher_args: Vec<OsString>,
}

/// Where the ranks run, ready to launch.
pub enum Target<'c> {
    Local,
    /// The emulated cluster (up while the caller holds it) and mpirun or srun across it.
    Emulated(&'c Cluster, Launcher),
    /// A real cluster: the launcher and how many nodes its layouts span.
    Cluster(Launcher, usize),
}

impl WhereArgs {
    /// The launcher asked for, once the options agree with each other.
    fn kind(&self) -> anyhow::Result<LauncherKind> {
        let emulated = self.nodes > 1;
        let kind = self.launcher.unwrap_or(if emulated {
            LauncherKind::Mpirun
        } else {
            LauncherKind::Local
        });
        let real_hosts = self.hostfile.is_some() || !self.host.is_empty();
        if emulated && (real_hosts || self.node_count.is_some()) {
            bail!(
                "--nodes starts emulated nodes; a real cluster's are given with --hostfile, \
                 --host or -N: drop one or the other"
            );
        }
        if kind == LauncherKind::Local && emulated {
            bail!("--nodes runs across emulated nodes: drop --launcher local, or --nodes");
        }
        if kind == LauncherKind::Local
            && (real_hosts || self.node_count.is_some() || !self.launcher_args.is_empty())
        {
            bail!(
                "--hostfile, --host, -N and `-- ARGS` are for a cluster launcher: add \
                 --launcher mpirun or --launcher srun"
            );
        }
        Ok(kind)
    }

    /// Starts the emulated nodes `--nodes N` asks for (none without it). They go down when
    /// the returned cluster drops: hold it while [`WhereArgs::target`]'s target runs.
    pub fn nodes_up(&self) -> anyhow::Result<Option<Cluster>> {
        self.kind()?;
        if self.nodes < 2 {
            return Ok(None);
        }
        Ok(Some(Cluster::up(usize::from(self.nodes))?))
    }

    /// Starts Slurm's daemons on `cluster` when `--launcher srun` asks for them (none
    /// otherwise). They stop when the returned handle drops.
    pub fn slurm_up<'c>(&self, cluster: Option<&'c Cluster>) -> anyhow::Result<Option<Slurm<'c>>> {
        match (cluster, self.kind()?) {
            (Some(cluster), LauncherKind::Srun) => Ok(Some(cluster.slurm()?)),
            _ => Ok(None),
        }
    }

    /// Where the ranks run: this host, the emulated `cluster` (with its `slurm` for srun), or
    /// a real cluster.
    pub fn target<'c>(
        &self,
        cluster: Option<&'c Cluster>,
        slurm: Option<&Slurm<'c>>,
    ) -> anyhow::Result<Target<'c>> {
        match (self.kind()?, cluster) {
            (LauncherKind::Local, _) => Ok(Target::Local),
            (LauncherKind::Mpirun, Some(cluster)) => {
                let mut mpirun = cluster.mpirun();
                mpirun.args.extend(self.launcher_args.iter().cloned());
                Ok(Target::Emulated(cluster, Launcher::Mpirun(mpirun)))
            }
            (LauncherKind::Srun, Some(cluster)) => {
                let slurm =
                    slurm.context("srun on the emulated nodes needs their Slurm: call slurm_up")?;
                let mut srun = slurm.launcher();
                srun.args = self.launcher_args.clone();
                Ok(Target::Emulated(cluster, Launcher::Srun(srun)))
            }
            (LauncherKind::Mpirun, None) => self.mpirun(),
            (LauncherKind::Srun, None) => self.srun(),
        }
    }

    fn mpirun(&self) -> anyhow::Result<Target<'static>> {
        let hosts = match (&self.hostfile, self.host.is_empty()) {
            (Some(file), _) => Hosts::File(file.clone()),
            (None, false) => Hosts::List(self.host.clone()),
            (None, true) => bail!(
                "--launcher mpirun needs the hosts: --hostfile FILE or --host a,b (or --nodes N \
                 for emulated nodes on this machine, as root)"
            ),
        };
        let given = hosts.names()?.len();
        let nodes = self.node_count.map_or(given, usize::from);
        let mut mpirun = Mpirun::new(hosts);
        mpirun.args = self.launcher_args.clone();
        Ok(Target::Cluster(Launcher::Mpirun(mpirun), nodes))
    }

    fn srun(&self) -> anyhow::Result<Target<'static>> {
        if self.hostfile.is_some() || !self.host.is_empty() {
            bail!("srun takes its nodes from the allocation: drop --hostfile and --host");
        }
        let allocated = ["SLURM_JOB_NUM_NODES", "SLURM_NNODES"]
            .iter()
            .find_map(|name| std::env::var(name).ok()?.parse::<usize>().ok());
        let Some(nodes) = self.node_count.map(usize::from).or(allocated) else {
            bail!(
                "--launcher srun needs the number of nodes: give -N, or run inside an \
                 allocation (salloc -N 2, sbatch), which sets SLURM_JOB_NUM_NODES"
            );
        };
        let srun = Srun {
            args: self.launcher_args.clone(),
            ..Srun::default()
        };
        Ok(Target::Cluster(Launcher::Srun(srun), nodes))
    }
}

impl Target<'_> {
    pub fn launcher(&self) -> &Launcher {
        const LOCAL: Launcher = Launcher::Local;
        match self {
            Target::Local => &LOCAL,
            Target::Emulated(_, launcher) | Target::Cluster(launcher, _) => launcher,
        }
    }

    /// How many nodes a layout `K` spans.
    pub fn nodes(&self) -> usize {
        match self {
            Target::Local => 1,
            Target::Emulated(cluster, _) => cluster.nodes().len(),
            Target::Cluster(_, nodes) => *nodes,
        }
    }

    /// What to print before the matrix: the nodes and the launcher.
    pub fn describe(&self) -> Option<String> {
        match self {
            Target::Local => None,
            Target::Emulated(cluster, launcher) => {
                let launcher = match launcher {
                    Launcher::Mpirun(_) => symmem_cluster::launcher_version(),
                    other => other.name().to_string(),
                };
                let names: Vec<String> = cluster
                    .nodes()
                    .iter()
                    .map(|n| format!("{} {}", n.name(), n.address()))
                    .collect();
                Some(format!(
                    "cluster: {} emulated nodes ({})\nlauncher: {}\nengine: {}",
                    names.len(),
                    names.join(", "),
                    launcher,
                    symmem_cluster::engine_version()
                ))
            }
            Target::Cluster(launcher, nodes) => Some(format!(
                "cluster: {nodes} nodes through {}",
                launcher.name()
            )),
        }
    }

    /// `path` (the rank binary, the shim library) as the nodes see it: itself, or on the
    /// emulated nodes a copy in the cluster's shared folder when it lies where each node has
    /// its own folder (a checkout under /tmp, say). A real cluster's nodes are taken to see
    /// the same path (a shared file system), as mpirun and srun do.
    pub fn visible(&self, path: &Path) -> anyhow::Result<PathBuf> {
        let Target::Emulated(cluster, _) = self else {
            return Ok(path.to_path_buf());
        };
        Ok(cluster.visible(path)?)
    }
}

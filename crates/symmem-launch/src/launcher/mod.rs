//! The one seam for starting a job: a [`LaunchSpec`] (program, ranks, [`Layout`]) goes to a
//! [`Launcher`], and a [`RunReport`] comes back, whichever launcher ran it. One file per
//! variant: `local.rs` (this host, symmem's own launcher), `mpirun.rs` (Open MPI), `srun.rs`
//! (Slurm); `external.rs` holds what the two cluster launchers share. A new launcher is one
//! more file and one more arm of [`Launcher`].
//!
//! [`Layout`]: crate::Layout

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::LaunchError;
use crate::report::{LeftBehind, OutputLine, RunReport};
use crate::spec::LaunchSpec;

mod external;
pub(crate) mod local;
mod mpirun;
mod srun;

pub use mpirun::{Hosts, Mpirun, OOB_KEEPALIVE};
pub use srun::Srun;

/// Who starts the ranks.
#[derive(Debug, Clone, Default)]
pub enum Launcher {
    /// symmem's own launcher: every rank on this host ([`launch`](crate::launch)).
    #[default]
    Local,
    /// Open MPI's `mpirun` across hosts.
    Mpirun(Mpirun),
    /// Slurm's `srun --mpi=pmix` inside an allocation.
    Srun(Srun),
}

impl Launcher {
    /// Runs `spec` to the end and reports how it went; `sink` gets every line (a cluster
    /// launcher's own lines too, with no rank), in arrival order, on the calling thread.
    pub fn launch(
        &self,
        spec: &LaunchSpec,
        sink: &mut dyn FnMut(&OutputLine),
    ) -> Result<RunReport, LaunchError> {
        match self {
            Launcher::Local => local::launch(spec, sink),
            Launcher::Mpirun(mpirun) => mpirun.launch(spec, sink),
            Launcher::Srun(srun) => srun.launch(spec, sink),
        }
    }

    /// `local`, `mpirun`, `srun`.
    pub fn name(&self) -> &'static str {
        match self {
            Launcher::Local => "local",
            Launcher::Mpirun(_) => "mpirun",
            Launcher::Srun(_) => "srun",
        }
    }
}

/// What a cluster launcher's caller knows about the nodes and this side does not: after the
/// launcher has ended, it gives what still runs on the nodes up to the given grace period to
/// end by itself, then kills what is left and returns it (the emulated cluster has one; on a
/// real cluster there is none, and the launcher's own report is all there is).
#[derive(Clone)]
pub struct Sweep(Arc<dyn Fn(Duration) -> Vec<LeftBehind> + Send + Sync>);

impl Sweep {
    /// A sweep that runs `f`.
    pub fn new(f: impl Fn(Duration) -> Vec<LeftBehind> + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }

    /// Runs it.
    pub fn run(&self, grace: Duration) -> Vec<LeftBehind> {
        (self.0)(grace)
    }
}

impl fmt::Debug for Sweep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Sweep(..)")
    }
}

/// Refuses what only [`Launcher::Local`] can do: per-rank environment.
fn refuse_rank_env(spec: &LaunchSpec, launcher: &str) -> Result<(), LaunchError> {
    if spec.rank_env.is_empty() {
        return Ok(());
    }
    Err(LaunchError::Layout(format!(
        "{launcher} gives every rank the same environment: drop rank_env, or run on this \
         host (Launcher::Local)"
    )))
}

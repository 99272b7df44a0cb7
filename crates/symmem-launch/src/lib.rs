//! The rank launcher of symmem: starts N processes of one program on this
//! host with torchrun-compatible environment, streams their output, and ends
//! the whole run on the first failure, a timeout or Ctrl-C, leaving no
//! process behind.
//!
//! ```no_run
//! use symmem_launch::{LaunchSpec, launch, print_line};
//!
//! let spec = LaunchSpec::new("target/debug/examples/allreduce", 4);
//! let report = launch(&spec, &mut print_line)?;
//! eprintln!("{report}");
//! std::process::exit(report.exit_code());
//! # Ok::<(), symmem_launch::LaunchError>(())
//! ```
//!
//! # Who failed
//!
//! A rank that stops because ANOTHER rank failed should exit with
//! [`EXIT_PEER_FAILED`] (75), so that the report names the culprit and not a
//! witness. How the launcher ends a run and whom it blames is the failure
//! policy in ARCHITECTURE.md ("Failure policy"), written there once; the
//! outcomes are [`Outcome`]'s variants.
//!
//! # Signals
//!
//! While a run is in progress, SIGINT, SIGTERM and SIGHUP of the calling
//! process stop it ([`Outcome::Interrupted`]); one more during the grace
//! period kills the ranks at once. Outside runs they act as before the first
//! run (see [`launch`]).
//!
//! # Across nodes
//!
//! The same [`LaunchSpec`], with a [`Layout`] across nodes, runs under Open MPI's `mpirun`
//! or Slurm's `srun` through [`Launcher`], and comes back as the same [`RunReport`]; see the
//! `launcher` module. The program only relies on the environment described at [`launch`] or
//! on what mpirun and srun set.

// Its processes' plumbing (signals, groups, what a child runs before exec) is symmem-process's.
#![forbid(unsafe_code)]

mod culprit;
mod error;
mod group;
mod launcher;
mod layout;
mod output;
mod report;
mod spec;
mod watchdog;

pub use error::LaunchError;
pub use launcher::local::{Started, launch, launch_with};
pub use launcher::{Hosts, Launcher, Mpirun, OOB_KEEPALIVE, Srun, Sweep};
pub use layout::Layout;
pub use output::print_line;
pub use report::{
    EXIT_CODES, EXIT_INTERRUPTED, EXIT_PEER_FAILED, EXIT_TIMEOUT, EXIT_USAGE, Ended, Escaped,
    LeftBehind, Lost, Outcome, OutputLine, RankEnd, RankStatus, RunReport, Stream, exit_codes_help,
    signal_name,
};
pub use spec::{DEFAULT_GRACE, DEFAULT_TIMEOUT, LaunchSpec, MAX_RANKS};

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
//! On clusters, run the same program under torchrun, mpirun or srun instead:
//! it only relies on the environment described at [`launch`].

mod error;
mod group;
mod output;
mod report;
mod run;
mod signals;
mod spec;

pub use error::LaunchError;
pub use output::print_line;
pub use report::{
    EXIT_INTERRUPTED, EXIT_TIMEOUT, Ended, Outcome, OutputLine, RankStatus, RunReport, Stream,
    signal_name,
};
pub use run::{Started, launch, launch_with};
pub use spec::{DEFAULT_GRACE, DEFAULT_TIMEOUT, LaunchSpec, MAX_RANKS, RENDEZVOUS_ENV};

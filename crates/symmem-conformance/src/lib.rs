//! The conformance suite: the checks every symmem provider must pass, so one kernel runs
//! unchanged over any provider that fills a peer-bases table.
//!
//! Every rank runs the same checks in the same order (they are collective) and reports one
//! [`CheckResult`] per check as a JSON line; [`Aggregate`] folds the lines of all ranks into
//! one verdict per check. A check fails, passes, or is skipped with a reason.

mod aggregate;
mod checks;
mod fault;
mod result;

pub use aggregate::{Aggregate, CheckVerdict};
pub use checks::{CHECKS, CheckInfo, Extras, SuiteOutcome, Unavailable, run_suite};
pub use fault::{FAULT_ENV, Fault, PlannedFault};
pub use result::{CheckResult, Status};

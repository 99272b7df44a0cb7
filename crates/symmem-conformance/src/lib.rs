//! The conformance suite: the checks every symmem provider must pass, so one kernel runs
//! unchanged over any provider that fills a peer-bases table.
//!
//! Every rank runs the same checks in the same order (they are collective) and reports one
//! [`CheckResult`] per check as a JSON line; [`Aggregate`] folds the lines of all ranks into
//! one verdict per check. A check fails, passes, or is skipped with a reason.
//!
//! [`CHECKS`] is the one table of checks. Any subset runs alone ([`run_checks`],
//! `symmem-conformance --check 7`): the allocations several checks share are made by the suite
//! before the first check that uses them, not by another check.

mod aggregate;
mod checks;
mod fault;
mod host;
mod result;

pub use aggregate::{Aggregate, CheckVerdict};
pub use checks::{
    CHECKS, CheckInfo, Extras, SuiteOutcome, Unavailable, UnknownCheck, check, run_checks,
    run_suite, valid_ids,
};
pub use fault::{AT_START, CONFORMANCE_FAULT, Fault, PlannedFault, at_start};
pub use host::HostExtras;
pub use result::{CheckResult, Status};

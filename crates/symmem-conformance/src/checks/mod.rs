//! The checks. They are collective: every rank runs them in the same order and issues the same
//! collectives whatever its local verification finds, so one rank's failed assertion never
//! leaves the others waiting. Whether a check runs at all is decided from what every rank
//! holds alike (the world size, the provider's [`Topology`](symmem::Topology)), never from
//! what one rank sees (its own reachable peers): a rank alone on its node runs the same
//! collectives as the others.
//!
//! [`CHECKS`] is the one table of them: id, name and the function that runs it. What several
//! checks share (two allocations and their tables) is a `Fixture` that the suite allocates
//! before the first check that uses it, so any one check also runs alone.
//!
//! Its rooms, each depending only on those listed after it:
//! - this file: the table ([`CHECKS`], [`check`]) and the run ([`run_checks`]): each selected
//!   check in table order, the fixture made before the first that uses it, one
//!   [`CheckResult`] each;
//! - `suite`: the checks' bodies, one method of the `Checks` trait each;
//! - `extras`: the further contexts a provider gives the suite ([`Extras`]);
//! - `fixture`: what several checks share, and the data they write;
//! - `verify`: a check's outcome, and the collector of its failed expectations.

mod extras;
mod fixture;
mod suite;
mod verify;

pub use extras::{Extras, Unavailable};

use crate::fault::{self, PlannedFault};
use crate::{CheckResult, Status};
use fixture::Fixture;
use std::time::Instant;
use suite::{Checks, Suite};
use symmem::{Context, Error, TranslatedOps};
use verify::Outcome;

/// One check: its id (reports, the aggregation and docs/gpu-results.md name it by this), its
/// name, and what runs it.
#[derive(Clone, Copy, Debug)]
pub struct CheckInfo {
    pub id: &'static str,
    pub name: &'static str,
    /// Whether the check's subject is a peer on another node (the table entry of an
    /// unreachable peer; the order check of a collective whose ranks span nodes): in a job
    /// across nodes it must pass, and `symmem-matrix` counts a skip there as a failure.
    pub across_nodes: bool,
    run: Run,
}

/// A check's function, by what it needs of the [`Fixture`].
#[derive(Clone, Copy, Debug)]
enum Run {
    /// Needs nothing the checks share.
    Alone(fn(&mut dyn Checks) -> Result<Outcome, Error>),
    /// Reads the fixture (the suite allocates it first if no check has yet).
    Uses(fn(&mut dyn Checks, &Fixture) -> Result<Outcome, Error>),
    /// Frees the fixture (the suite allocates it first if no check has yet).
    Frees(fn(&mut dyn Checks, Fixture) -> Result<Outcome, Error>),
}

/// Every check, in the order the suite runs them.
pub static CHECKS: [CheckInfo; 11] = [
    CheckInfo {
        id: "1",
        name: "local entry is the allocation's base",
        across_nodes: false,
        run: Run::Uses(|s, f| s.local_entry(f)),
    },
    CheckInfo {
        id: "2",
        name: "per-peer offsets equal across allocations",
        across_nodes: false,
        run: Run::Uses(|s, f| s.offsets_equal(f)),
    },
    CheckInfo {
        id: "3",
        name: "one table translates another allocation",
        across_nodes: false,
        run: Run::Uses(|s, f| s.table_translates_other_allocation(f)),
    },
    CheckInfo {
        id: "4",
        name: "store reaches every peer",
        across_nodes: false,
        run: Run::Uses(|s, f| s.store_all_to_all(f)),
    },
    CheckInfo {
        id: "5",
        name: "load from every peer",
        across_nodes: false,
        run: Run::Uses(|s, f| s.load_from_every_peer(f)),
    },
    CheckInfo {
        id: "6",
        name: "copy from peer to peer",
        across_nodes: false,
        run: Run::Uses(|s, f| s.copy_peer_to_peer(f)),
    },
    CheckInfo {
        id: "7",
        name: "atomic add from every rank, exact",
        across_nodes: false,
        run: Run::Uses(|s, f| s.atomic_add(f)),
    },
    CheckInfo {
        id: "8",
        name: "address map of existing buffer",
        across_nodes: false,
        run: Run::Uses(|s, f| s.address_map_of_existing(f)),
    },
    CheckInfo {
        id: "9",
        name: "unreachable peer: base 0, refused",
        across_nodes: true,
        run: Run::Alone(|s| s.unreachable_peers()),
    },
    CheckInfo {
        id: "10a",
        name: "free then allocate again",
        across_nodes: false,
        run: Run::Frees(|s, f| s.free_then_allocate(f)),
    },
    CheckInfo {
        id: "10b",
        name: "out-of-order collective is an error",
        across_nodes: true,
        run: Run::Alone(|s| s.out_of_order()),
    },
];

/// An id that names no check.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown check {id:?}: pick one of the ids {}", valid_ids())]
pub struct UnknownCheck {
    pub id: String,
}

/// The ids of every check, in table order: "1, 2, ..., 10b".
pub fn valid_ids() -> String {
    CHECKS.iter().map(|c| c.id).collect::<Vec<_>>().join(", ")
}

/// The check with id `id`.
pub fn check(id: &str) -> Result<&'static CheckInfo, UnknownCheck> {
    let id = id.trim();
    CHECKS
        .iter()
        .find(|c| c.id == id)
        .ok_or_else(|| UnknownCheck { id: id.into() })
}

/// How the suite ended on this rank.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SuiteOutcome {
    /// Checks that failed on this rank.
    pub failed: usize,
    /// The suite stopped because another rank failed (this rank is a witness).
    pub peer_failed: bool,
}

/// Runs every check on this rank, calling `emit` with each result as soon as it is known.
/// A collective error stops the suite (the remaining checks are not run, which the
/// aggregation counts as failures).
pub fn run_suite<P: TranslatedOps>(
    ctx: &mut Context<P>,
    extras: &mut dyn Extras<P>,
    emit: &mut dyn FnMut(&CheckResult),
) -> Result<SuiteOutcome, String> {
    let all: Vec<&CheckInfo> = CHECKS.iter().collect();
    run_checks(ctx, extras, &all, emit)
}

/// Runs the checks in `selected` on this rank, in table order whatever the order of
/// `selected`, as [`run_suite`] runs them all. Every rank must select the same checks.
///
/// The suite allocates what several checks share (two allocations and their tables) before the
/// first selected check that uses it, within that check (its time, and its failure if the
/// allocation fails), and frees it after the last check if no check freed it; a failure of
/// that free is logged and counted in [`SuiteOutcome::failed`], as no check's result names it.
pub fn run_checks<P: TranslatedOps>(
    ctx: &mut Context<P>,
    extras: &mut dyn Extras<P>,
    selected: &[&CheckInfo],
    emit: &mut dyn FnMut(&CheckResult),
) -> Result<SuiteOutcome, String> {
    let planned = PlannedFault::from_env()?;
    let (rank, world_size, provider) = (ctx.rank(), ctx.world_size(), ctx.provider().kind().name());
    let mut suite = Suite { ctx, extras };
    let mut fixture: Option<Fixture> = None;
    let mut outcome = SuiteOutcome::default();
    let chosen = CHECKS
        .iter()
        .filter(|info| selected.iter().any(|s| s.id == info.id));
    for info in chosen {
        fault::apply(planned.as_ref(), rank, info.id);
        let started = Instant::now();
        let (status, detail, stop) = match run_one(&mut suite, &mut fixture, info.run) {
            Ok(Outcome::Pass) => (Status::Pass, String::new(), false),
            Ok(Outcome::Skip(reason)) => (Status::Skip, reason, false),
            Ok(Outcome::Fail(why)) => (Status::Fail, why, false),
            Ok(Outcome::PeerFailed(why)) => {
                outcome.peer_failed = true;
                (
                    Status::Fail,
                    format!("another rank failed, suite stopped: {why}"),
                    true,
                )
            }
            Err(e) => {
                outcome.peer_failed = e.is_peer_failure();
                (
                    Status::Fail,
                    format!("collective failed, suite stopped: {e}"),
                    true,
                )
            }
        };
        outcome.failed += usize::from(status == Status::Fail);
        emit(&CheckResult {
            check: info.id.into(),
            name: info.name.into(),
            rank,
            world_size,
            provider: provider.into(),
            status,
            detail,
            micros: started.elapsed().as_micros() as u64,
        });
        if stop {
            // Leaked on purpose: freeing is collective and the collectives just failed.
            std::mem::forget(fixture.take());
            return Ok(outcome);
        }
    }
    if let Some(fixture) = fixture.take()
        && let Err(e) = fixture.free(suite.ctx)
    {
        // No check owns this collective: the exit status tells, the log says why.
        tracing::error!("freeing the allocations the checks share failed: {e}");
        outcome.failed += 1;
        outcome.peer_failed = e.is_peer_failure();
    }
    Ok(outcome)
}

/// Runs one check, allocating the fixture first if it uses one and none is left.
fn run_one<P: TranslatedOps>(
    suite: &mut Suite<'_, P>,
    fixture: &mut Option<Fixture>,
    run: Run,
) -> Result<Outcome, Error> {
    let mut take = |ctx: &mut Context<P>| match fixture.take() {
        Some(shared) => Ok(shared),
        None => Fixture::allocate(ctx),
    };
    match run {
        Run::Alone(check) => check(suite),
        Run::Uses(check) => {
            let shared = take(suite.ctx)?;
            let result = check(suite, &shared);
            *fixture = Some(shared);
            result
        }
        Run::Frees(check) => {
            let shared = take(suite.ctx)?;
            check(suite, shared)
        }
    }
}

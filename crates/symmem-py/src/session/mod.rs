//! The one symmem session of a Python process: a [`Context`](symmem::Context) over the host or
//! a GPU provider, and the live allocations with what Python needs about them (on GPU
//! providers, their peer-bases tables are the provider's own device copies).
//!
//! The session lives on a thread of its own, which it never leaves (a GPU runtime's current
//! device is per thread, and the GPU provider is not `Send`); the Python thread that started
//! it sends each call there and waits for the answer in short slices ([`Pending`]), so that a
//! Ctrl-C is taken while a collective waits for the other ranks. Calls from another Python
//! thread, or from a forked child of the process, are refused with a clear error. Nothing here
//! touches Python objects, so collectives run with the GIL released.
//!
//! The hot path (issue 33): what the Python thread only reads (`find`, address maps, whether an
//! export is still live) comes from the index of live allocations, which the session thread
//! keeps current, without a round trip to that thread; the two threads hand a request and its
//! answer over by spinning briefly before they block
//! ([`HANDOFF_SPIN`](handoff::HANDOFF_SPIN)); on GPU providers each allocation's peer-bases
//! table lives at the end of the allocation itself (one upload, no device allocation or free
//! per table); allocate answers as soon as the collective returned and uploads the table
//! afterwards, while Python wraps the tensors ([`Answer`](handoff::Answer), [`settle`]); and
//! the device wait before a free or a barrier is the session thread's, through the shim.
//!
//! Its rooms, each with what it owns and who may touch it from which thread:
//! - this file: the calls the Python thread makes (the only room that knows the other four),
//!   and what they answer ([`Fail`], [`AllocOut`], [`Outstanding`], [`Info`]);
//! - [`handoff`]: the Python thread's end of the session, the session thread, requests and
//!   their answers, poisoning and fork refusal (the statics `HANDLE` and `OWNER_PID`);
//! - [`index`]: what other threads read of the live allocations without a round trip (the
//!   static `INDEX`, and each allocation's tracker);
//! - [`state`]: the session itself, on the session thread only, and what it needs of its
//!   provider;
//! - [`provider`]: the providers: which one starts, how, and what each does for the session.

mod handoff;
mod index;
mod provider;
mod state;

use crate::dlpack::{DLDevice, Keep, TensorSpec};
use crate::dtype;
use handoff::{check_reader, now, refuse_a_fork, start_session_thread};
use handoff::{submit, with_session, with_session_late};
use provider::{AnySession, on_session, start_session};
use state::{FINALIZED, checked_bytes};
use symmem_bootstrap::Meeting;

pub use handoff::{Pending, finish_finalize, finish_init, info, late_failure, settle};
pub use index::{DataRef, Watch};
pub use provider::provider_kind;

/// Why a call failed. The caller, holding the GIL again, raises the matching Python exception.
#[derive(Debug)]
pub enum Fail {
    /// Bad argument value (`ValueError`).
    Value(String),
    /// Bad argument type, e.g. an unsupported dtype (`TypeError`).
    Type(String),
    /// Any other failure (`SymmemError`).
    Symmem(String),
    /// Ranks issued different collectives (`CollectiveMismatchError`).
    Mismatch(String),
    /// Another rank failed; this one only witnessed it (`PeerFailedError`).
    PeerFailed(String),
    /// The provider cannot run here (`UnavailableError`).
    Unavailable(String),
}

impl Fail {
    /// What went wrong, as the exception will say it.
    pub fn message(&self) -> &str {
        match self {
            Fail::Value(m)
            | Fail::Type(m)
            | Fail::Symmem(m)
            | Fail::Mismatch(m)
            | Fail::PeerFailed(m)
            | Fail::Unavailable(m) => m,
        }
    }
}

impl From<symmem::Error> for Fail {
    fn from(e: symmem::Error) -> Self {
        let text = e.to_string();
        match e {
            symmem::Error::ZeroLength { .. } | symmem::Error::SizeOverflow { .. } => {
                Fail::Value(text)
            }
            symmem::Error::CollectiveMismatch(_) => Fail::Mismatch(text),
            symmem::Error::PeerFailed { .. } => Fail::PeerFailed(text),
            _ => Fail::Symmem(text),
        }
    }
}

/// What Python gets for an allocation (or an address map of one).
pub struct AllocOut {
    pub id: u64,
    pub rank: usize,
    pub world_size: usize,
    pub base: u64,
    pub bytes: u64,
    pub bases: Vec<u64>,
    pub direct: Vec<bool>,
    /// The tensor itself (`None` for an address map).
    pub data: Option<(TensorSpec, Keep)>,
    pub table: (TensorSpec, Keep),
}

/// An allocation never freed, as `finalize` and `outstanding` report it.
pub struct Outstanding {
    pub id: u64,
    pub addr: u64,
    pub bytes: u64,
    pub dtype: &'static str,
    pub shape: Vec<i64>,
    pub dropped: bool,
}

/// What `info` reports.
#[derive(Clone)]
pub struct Info {
    pub provider: &'static str,
    pub rank: usize,
    pub world_size: usize,
    pub local_rank: usize,
    pub local_world_size: usize,
    /// Who named the rank: a launcher, or the torch.distributed group it met through.
    pub launcher: String,
    pub device: DLDevice,
    pub finalized: bool,
}

/// What `init` leads to: nothing to do (already running with that provider), or the
/// collective start of the session on its thread.
pub enum Start {
    Running,
    Started(Pending<Info>),
}

/// What `init` starts with besides the provider's name.
#[derive(Default)]
pub struct Options {
    /// The shim library the package carries (its wheel's), used where
    /// [`SHIM_LIB`](symmem::settings::SHIM_LIB) is unset.
    pub shim_lib: Option<std::path::PathBuf>,
    /// A meeting the package ran over a torch.distributed group: the ranks meet through it
    /// instead of the launcher's variables.
    pub meeting: Option<Meeting>,
}

/// Starts the session (collective): the provider starts on the session thread, which is
/// spawned here. [`finish_init`] records the outcome.
pub fn init(requested: Option<String>, options: Options) -> Result<Start, Fail> {
    refuse_a_fork()?;
    let kind = provider_kind(requested)?;
    if let Some(info) = info()? {
        if info.provider == kind.name() {
            return Ok(Start::Running);
        }
        return Err(Fail::Value(format!(
            "symmem already runs the {} provider in this process; it cannot switch to {kind}",
            info.provider
        )));
    }
    start_session_thread()?;
    let pending = submit("init", move |slot| {
        let session = start_session(kind, options)?;
        let info = on_session!(&session, s => s.info());
        *slot = Some(session);
        Ok(info)
    })?;
    Ok(Start::Started(pending))
}

pub fn allocate(shape: Vec<i64>, dtype_name: &str) -> Result<Pending<AllocOut>, Fail> {
    let dtype = dtype::lookup(dtype_name).ok_or_else(|| {
        Fail::Type(format!(
            "dtype {dtype_name} is not supported by symmem; use one of {}",
            dtype::supported_names()
        ))
    })?;
    // Refused before the session is even looked at: bad input never reaches a collective.
    checked_bytes(&shape, dtype)?;
    // Answered as soon as the collective returned; the table's entries are written while the
    // Python thread wraps the tensors, which then waits for them ([`settle`]) before
    // allocate_symmetric returns.
    with_session_late("allocate_symmetric", move |s, answer| {
        on_session!(s, s => match s.allocate(shape, dtype) {
            Ok((out, entries)) => {
                answer.send(Ok(out));
                s.complete_table(entries)
            }
            Err(e) => {
                answer.send(Err(e));
                Ok(())
            }
        })
    })
}

/// `(id, base, bytes)` of the live allocation whose tensor holds `addr`. Not collective: read
/// from the [`index`] on the calling thread.
pub fn find(addr: u64) -> Result<Option<(u64, u64, u64)>, Fail> {
    check_reader()?;
    Ok(index::find(addr))
}

/// The address map of live allocation `id` (no tensor), read from the [`index`].
pub fn address_map(id: u64) -> Result<AllocOut, Fail> {
    if check_reader()? {
        return Err(Fail::Symmem(FINALIZED.into()));
    }
    index::address_map(id)
        .ok_or_else(|| Fail::Value(format!("no live symmetric allocation #{id} on this rank")))
}

/// Whether allocation `id` is live (not freed, session not finalized).
pub fn is_live(id: u64) -> Result<bool, Fail> {
    check_reader()?;
    Ok(index::is_live(id))
}

/// Collective: one allocate + free of `bytes` through the Rust `Context` alone, timed on the
/// session thread: `(allocate ns, free ns)` (benches/alloc_free.py's floor).
pub fn bench_context_pair(bytes: usize) -> Result<Pending<(u64, u64)>, Fail> {
    with_session(
        "_bench_context_pair",
        move |s| on_session!(s, s => s.bench_context_pair(bytes)),
    )
}

/// Collective: frees allocation `id`, waiting for the device first unless `synchronize` is
/// false (the caller waited already).
pub fn free(id: u64, synchronize: bool) -> Result<Pending<()>, Fail> {
    with_session(
        "free",
        move |s| on_session!(s, s => s.free(id, synchronize)),
    )
}

/// How many times the session waited for the device (free's opt-out is tested with it).
pub fn device_waits() -> Result<u64, Fail> {
    now(with_session("_device_waits", |s| {
        Ok(on_session!(s, s => s.device_waits()))
    })?)
}

pub fn barrier() -> Result<Pending<()>, Fail> {
    with_session("barrier", |s| on_session!(s, s => s.barrier()))
}

pub fn outstanding() -> Result<Vec<Outstanding>, Fail> {
    now(with_session("outstanding", |s| {
        Ok(on_session!(s, s => s.outstanding()))
    })?)
}

pub fn finalize() -> Result<Pending<Vec<Outstanding>>, Fail> {
    with_session("finalize", |s| on_session!(s, s => s.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use symmem::ProviderKind;

    #[test]
    fn unknown_providers_and_dtypes_are_refused() {
        assert!(matches!(
            provider_kind(Some("cuda".into())),
            Err(Fail::Value(_))
        ));
        assert_eq!(
            provider_kind(Some(" NVSHMEM ".into())).unwrap(),
            ProviderKind::Nvshmem
        );
        assert!(matches!(allocate(vec![4], "complex32"), Err(Fail::Type(_))));
    }
}

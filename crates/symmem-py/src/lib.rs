//! Python face of symmem: the native module `symmem._native` under the `symmem` package
//! (`python/symmem/__init__.py` holds the public API).
//!
//! `allocate` makes a symmetric allocation (collective) and hands back two DLPack exporters:
//! the tensor itself and its peer-bases table (int64, one entry per rank, on the allocation's
//! device). Consumers (torch, numpy, cupy, ...) wrap them without a copy. Exports never free
//! memory: `free` is collective and explicit, and an allocation whose last tensor is garbage-
//! collected without it is reported, as the Rust API does for a dropped buffer.
//!
//! Built as an abi3 wheel by maturin (`pyproject.toml`), which enables the `extension-module`
//! feature; plain `cargo build` and `cargo test` link against libpython instead.

mod array;
mod dlpack;
mod dtype;
mod exceptions;
mod meeting;
mod session;
mod trace;

use array::{Allocation, SymmetricArray, array, to_allocation};
use dlpack::DLDevice;
use exceptions::{CollectiveMismatchError, PeerFailedError, SymmemError, UnavailableError, raise};
use meeting::{Arrival, arrive};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use session::{Fail, Outstanding};

fn outstanding_dicts<'py>(
    py: Python<'py>,
    records: Vec<Outstanding>,
) -> PyResult<Vec<Bound<'py, PyDict>>> {
    records
        .into_iter()
        .map(|r| {
            let d = PyDict::new(py);
            d.set_item("id", r.id)?;
            d.set_item("address", r.addr)?;
            d.set_item("nbytes", r.bytes)?;
            d.set_item("dtype", r.dtype)?;
            d.set_item("shape", PyTuple::new(py, &r.shape)?)?;
            d.set_item("dropped", r.dropped)?;
            Ok(d)
        })
        .collect()
}

/// `(rank, world_size, local_rank, local_world_size, launcher)` from the launcher's
/// environment; not collective, needs no session.
#[pyfunction]
fn identity() -> PyResult<(usize, usize, usize, usize, String)> {
    let id = symmem_bootstrap::identify().map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok((
        id.rank,
        id.world_size,
        id.local_rank,
        id.local_world_size,
        id.launcher.to_string(),
    ))
}

/// Collective: starts the session with `provider` (else `SYMMEM_PROVIDER`, else host).
/// Returns False when it was already running with that provider. `shim_lib`: the shim library
/// the package carries, used where `SYMMEM_SHIM_LIB` is unset. `arrival` and `cards`: a
/// meeting over a torch.distributed group (every rank's card in rank order), through which the
/// ranks meet instead of the launcher's variables.
#[pyfunction]
#[pyo3(signature = (provider=None, shim_lib=None, arrival=None, cards=None))]
fn init(
    py: Python<'_>,
    provider: Option<String>,
    shim_lib: Option<std::path::PathBuf>,
    arrival: Option<Bound<'_, Arrival>>,
    cards: Option<Vec<Vec<u8>>>,
) -> PyResult<bool> {
    init_logging();
    let meeting = meeting::meeting(arrival, cards)?;
    let options = session::Options { shim_lib, meeting };
    match session::init(provider, options).map_err(raise)? {
        session::Start::Running => Ok(false),
        session::Start::Started(pending) => {
            let answer = match wait(py, pending) {
                Ok(info) => Ok(info),
                Err(Waited::Failed(fail)) => Err(fail),
                Err(Waited::Interrupted(e)) => return Err(e),
            };
            session::finish_init(answer).map_err(raise)
        }
    }
}

/// How long the Python thread waits for the session thread at a time before it checks for
/// signals: a Ctrl-C during a collective raises KeyboardInterrupt within about this.
const SIGNAL_SLICE: std::time::Duration = std::time::Duration::from_millis(20);

/// Why [`wait`] returned no answer.
enum Waited {
    /// The call failed (raised as its exception).
    Failed(Fail),
    /// A signal handler raised (KeyboardInterrupt): the session is poisoned.
    Interrupted(PyErr),
}

/// Waits for a request of the session thread with the GIL released, in slices of
/// [`SIGNAL_SLICE`], running Python's signal handlers between them. When a handler raises
/// (Ctrl-C: KeyboardInterrupt), the request is abandoned: it may still complete on this rank
/// and not on the others, so the session is poisoned (every later call says why) and the
/// exception carries a note saying so.
///
/// The first slice begins with a short spin (`HANDOFF_SPIN`, see [`session::Pending::wait`]): a
/// request that takes microseconds (allocate or free at 1 PE) is answered without a sleep and
/// wake-up.
fn wait<R: Send>(py: Python<'_>, mut pending: session::Pending<R>) -> Result<R, Waited> {
    let mut spin = true;
    loop {
        let first = std::mem::replace(&mut spin, false);
        let (back, answer) = py.detach(move || {
            let answer = pending.wait(first, SIGNAL_SLICE);
            (pending, answer)
        });
        pending = back;
        trace::mark("python: answer taken");
        if let Some(answer) = answer {
            return answer.map_err(Waited::Failed);
        }
        if let Err(e) = py.check_signals() {
            let why = e
                .get_type(py)
                .name()
                .map(|n| n.to_string())
                .unwrap_or_else(|_| "a signal handler raised".into());
            let note = pending.abandon(&why);
            // Python 3.11+: the note shows under the traceback; older ones go without it.
            let _ = e.value(py).call_method1("add_note", (note,));
            return Err(Waited::Interrupted(e));
        }
    }
}

/// [`wait`] with a failure raised as its Python exception.
fn wait_raising<R: Send>(py: Python<'_>, pending: session::Pending<R>) -> PyResult<R> {
    wait(py, pending).map_err(|w| match w {
        Waited::Failed(fail) => raise(fail),
        Waited::Interrupted(e) => e,
    })
}

/// The session (`provider`, `rank`, `world_size`, `device`, `finalized`) or None before init.
#[pyfunction]
fn info(py: Python<'_>) -> PyResult<Option<Bound<'_, PyDict>>> {
    let Some(info) = session::info().map_err(raise)? else {
        return Ok(None);
    };
    let d = PyDict::new(py);
    d.set_item("provider", info.provider)?;
    d.set_item("rank", info.rank)?;
    d.set_item("world_size", info.world_size)?;
    d.set_item("local_rank", info.local_rank)?;
    d.set_item("local_world_size", info.local_world_size)?;
    d.set_item("launcher", info.launcher)?;
    let DLDevice {
        device_type,
        device_id,
    } = info.device;
    d.set_item("device", (device_type, device_id))?;
    d.set_item("finalized", info.finalized)?;
    Ok(Some(d))
}

/// Collective: a symmetric tensor of `shape` and `dtype`, and its allocation (address map and
/// peer-bases table) apart: the allocation's `data` is None, so the package may keep it
/// without keeping the tensor's memory in use.
///
/// It returns before the peer-bases table's entries are on the device: `settle()` waits until
/// they are there (any later call into the extension waits for them too).
#[pyfunction]
fn allocate(
    py: Python<'_>,
    shape: Vec<i64>,
    dtype: String,
) -> PyResult<(Py<SymmetricArray>, Allocation)> {
    let pending = session::allocate(shape, &dtype).map_err(raise)?;
    let mut out = wait_raising(py, pending)?;
    let Some(data) = out.data.take() else {
        return Err(SymmemError::new_err(
            "symmem's session answered an allocation without its tensor (a symmem bug: report it)",
        ));
    };
    let tensor = array(py, data, out.id, "tensor")?;
    let allocation = to_allocation(py, out)?;
    trace::mark("python: objects made");
    Ok((tensor, allocation))
}

/// `(id, base, nbytes)` of the live allocation containing `addr`, or None.
#[pyfunction]
fn find(addr: u64) -> PyResult<Option<(u64, u64, u64)>> {
    session::find(addr).map_err(raise)
}

/// The address map of live allocation `id` (no tensor, a fresh peer-bases exporter).
#[pyfunction]
fn address_map(py: Python<'_>, id: u64) -> PyResult<Allocation> {
    to_allocation(py, session::address_map(id).map_err(raise)?)
}

/// Collective: frees allocation `id`. First it waits for every kernel this process queued on
/// the device (any stream), unless `synchronize` is False: the caller waited already.
#[pyfunction]
#[pyo3(signature = (id, synchronize=true))]
fn free(py: Python<'_>, id: u64, synchronize: bool) -> PyResult<()> {
    wait_raising(py, session::free(id, synchronize).map_err(raise)?)
}

/// Waits for the end of the last call: allocate's peer-bases table is complete on the device
/// after it (kernels on any stream may read it). Any later call waits for it too.
#[pyfunction]
fn settle(py: Python<'_>) -> PyResult<()> {
    let Some(mut pending) = session::settle().map_err(raise)? else {
        return Ok(());
    };
    // Mostly the table is there by now: taken without releasing the GIL.
    let late = match pending.ready() {
        Some(late) => late.map_err(Waited::Failed),
        None => wait(py, pending),
    };
    match late {
        Ok(()) => Ok(()),
        Err(Waited::Failed(late)) => Err(raise(session::late_failure(late))),
        Err(Waited::Interrupted(e)) => Err(e),
    }
}

/// How many times the session waited for the device (for the tests of free's opt-out).
#[pyfunction]
fn _device_waits() -> PyResult<u64> {
    session::device_waits().map_err(raise)
}

/// Collective: one allocate + free of `nbytes` through the Rust `Context` alone, timed on the
/// session thread: `(allocate ns, free ns)`. For benches/alloc_free.py (the floor the Python
/// face is measured against); every rank must call it, as any collective.
#[pyfunction]
fn _bench_context_pair(py: Python<'_>, nbytes: usize) -> PyResult<(u64, u64)> {
    if nbytes == 0 {
        return Err(PyValueError::new_err("nbytes must be at least 1"));
    }
    wait_raising(py, session::bench_context_pair(nbytes).map_err(raise)?)
}

/// Turns the step marks of the profiler on or off (`benches/profile_steps.py --trace`); either
/// way the marks kept so far are dropped.
#[pyfunction]
fn _trace(on: bool) {
    trace::set(on);
}

/// The step marks since the last call, oldest first: `(step, CLOCK_MONOTONIC ns)`, the clock of
/// `time.perf_counter_ns()` on Linux.
#[pyfunction]
fn _trace_take() -> Vec<(&'static str, u64)> {
    trace::take()
}

/// Collective: waits for every rank.
#[pyfunction]
fn barrier(py: Python<'_>) -> PyResult<()> {
    wait_raising(py, session::barrier().map_err(raise)?)
}

/// Allocations not freed yet (`dropped`: no Python object views it any more).
#[pyfunction]
fn outstanding(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    outstanding_dicts(py, session::outstanding().map_err(raise)?)
}

/// Collective: ends the session and returns the allocations that were never freed.
#[pyfunction]
fn finalize(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    let records = wait_raising(py, session::finalize().map_err(raise)?)?;
    session::finish_finalize();
    outstanding_dicts(py, records)
}

/// The element types `allocate` takes.
#[pyfunction]
fn dtypes() -> Vec<&'static str> {
    dtype::DTYPES.iter().map(|d| d.name).collect()
}

/// Rust-side warnings (a tensor collected without free, provider notes) go to stderr; RUST_LOG
/// overrides the filter. The core's own leak warnings are left to the package, whose finalize
/// reports the same allocations with their dtype and shape. A process that already has a
/// subscriber keeps it.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,symmem::context=error"));
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(filter)
        .try_init();
}

#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    init_logging();
    m.add("SymmemError", py.get_type::<SymmemError>())?;
    m.add(
        "CollectiveMismatchError",
        py.get_type::<CollectiveMismatchError>(),
    )?;
    m.add("PeerFailedError", py.get_type::<PeerFailedError>())?;
    m.add("UnavailableError", py.get_type::<UnavailableError>())?;
    m.add_class::<SymmetricArray>()?;
    m.add_class::<Allocation>()?;
    m.add_function(wrap_pyfunction!(identity, m)?)?;
    m.add_function(wrap_pyfunction!(init, m)?)?;
    m.add_function(wrap_pyfunction!(arrive, m)?)?;
    m.add_class::<Arrival>()?;
    m.add_function(wrap_pyfunction!(info, m)?)?;
    m.add_function(wrap_pyfunction!(allocate, m)?)?;
    m.add_function(wrap_pyfunction!(find, m)?)?;
    m.add_function(wrap_pyfunction!(address_map, m)?)?;
    m.add_function(wrap_pyfunction!(free, m)?)?;
    m.add_function(wrap_pyfunction!(settle, m)?)?;
    m.add_function(wrap_pyfunction!(_device_waits, m)?)?;
    m.add_function(wrap_pyfunction!(barrier, m)?)?;
    m.add_function(wrap_pyfunction!(_bench_context_pair, m)?)?;
    m.add_function(wrap_pyfunction!(_trace, m)?)?;
    m.add_function(wrap_pyfunction!(_trace_take, m)?)?;
    m.add_function(wrap_pyfunction!(outstanding, m)?)?;
    m.add_function(wrap_pyfunction!(finalize, m)?)?;
    m.add_function(wrap_pyfunction!(dtypes, m)?)?;
    m.add("EXIT_PEER_FAILED", symmem::EXIT_PEER_FAILED)?;
    m.add("PROVIDER_ENV", symmem::settings::PROVIDER.name)?;
    m.add("KDL_CPU", dlpack::KDL_CPU)?;
    m.add("KDL_CUDA", dlpack::KDL_CUDA)?;
    m.add("KDL_ROCM", dlpack::KDL_ROCM)?;
    Ok(())
}

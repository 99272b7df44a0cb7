//! The one symmem session of a Python process: a [`Context`] over the host or a GPU provider,
//! and the live allocations with what Python needs about them (on GPU providers, their
//! peer-bases tables are the provider's own device copies).
//!
//! The session lives on a thread of its own, which it never leaves (a GPU runtime's current
//! device is per thread, and the GPU provider is not `Send`); the Python thread that started
//! it sends each call there and waits for the answer in short slices ([`Pending`]), so that a
//! Ctrl-C is taken while a collective waits for the other ranks. Calls from another Python
//! thread, or from a forked child of the process, are refused with a clear error. Nothing here
//! touches Python objects, so collectives run with the GIL released.
//!
//! The hot path (issue 33): what the Python thread only reads (`find`, address maps, whether an
//! export is still live) comes from the [`INDEX`] of live allocations, which the session thread
//! keeps current, without a round trip to that thread; the two threads hand a request and its
//! answer over by spinning briefly before they block ([`HANDOFF_SPIN`]); on GPU providers
//! each allocation's peer-bases table lives at the end of the allocation itself (one upload, no
//! device allocation or free per table); allocate answers as soon as the collective returned and
//! uploads the table afterwards, while Python wraps the tensors ([`Answer`], [`settle`]); and the
//! device wait before a free or a barrier is the session thread's, through the shim.

use crate::dlpack::{DLDevice, KDL_CPU, KDL_CUDA, KDL_ROCM, Keep, TensorSpec};
use crate::dtype::{self, DType};
use crate::trace;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::ThreadId;
use std::time::{Duration, Instant};
use symmem::RankIdentity;
use symmem::{
    Context, PeerTable, ProviderKind, SymmetricBuffer, SymmetricProvider, UnknownProvider, settings,
};
use symmem_bootstrap::{Bootstrap, Meeting};
use symmem_gpu::{EnvironmentAccess, GpuConfig, GpuError, GpuProvider};
use symmem_host::{HostConfig, HostProvider};

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

/// Liveness of one allocation as Python sees it: how many Python objects and DLPack exports
/// view it, and whether it was freed. When the last one goes while the allocation is still
/// live, the allocation is reported as dropped (never freed: a free is collective).
pub struct Tracker {
    id: u64,
    rank: usize,
    addr: u64,
    bytes: u64,
    holders: AtomicUsize,
    freed: AtomicBool,
    dropped: AtomicBool,
    /// `finalize` reported it already: stay quiet when its tensors go afterwards.
    reported: AtomicBool,
}

/// One holder of an allocation (a Python object or a DLPack export). Dropped from any thread,
/// with or without the GIL: it only touches atomics and logs.
pub struct DataRef(Arc<Tracker>);

impl DataRef {
    fn new(tracker: &Arc<Tracker>) -> Self {
        tracker.holders.fetch_add(1, Ordering::AcqRel);
        Self(Arc::clone(tracker))
    }

    /// Whether the allocation was freed, or reported by `finalize`: its memory may belong to
    /// another allocation now, so nothing may export it any more.
    pub fn released(&self) -> bool {
        self.0.released()
    }
}

impl Tracker {
    fn released(&self) -> bool {
        self.freed.load(Ordering::Acquire) || self.reported.load(Ordering::Acquire)
    }
}

/// Watches an allocation without holding it (the export of its peer-bases table, which lives
/// inside it): answers whether it was released, with no call into the session.
pub struct Watch(Arc<Tracker>);

impl Watch {
    /// As [`DataRef::released`].
    pub fn released(&self) -> bool {
        self.0.released()
    }
}

impl Clone for DataRef {
    fn clone(&self) -> Self {
        Self::new(&self.0)
    }
}

impl Drop for DataRef {
    fn drop(&mut self) {
        let t = &self.0;
        if t.holders.fetch_sub(1, Ordering::AcqRel) != 1 || t.freed.load(Ordering::Acquire) {
            return;
        }
        t.dropped.store(true, Ordering::Release);
        if !t.reported.load(Ordering::Acquire) {
            tracing::warn!(
                allocation = t.id,
                rank = t.rank,
                addr = format_args!("{:#x}", t.addr),
                bytes = t.bytes,
                "symmetric tensor garbage-collected without symmem.free(): the allocation stays \
                 (free is collective: call symmem.free(tensor) on every rank in the same order); \
                 symmem.finalize() reports it"
            );
        }
    }
}

/// Where a device table starts after the tensor's bytes (int64 entries; 256 keeps it on its
/// own cache lines and aligned for any vector load).
const TABLE_ALIGN: usize = 256;

/// What a session needs of its provider beyond the context: where kernels read a table.
trait Provider: SymmetricProvider {
    /// Bytes to allocate for a tensor of `bytes` on `world` ranks, and where in them the
    /// kernel table goes (`None`: it lives elsewhere); `None` overall when that overflows.
    fn room(bytes: usize, world: usize) -> Option<(usize, Option<usize>)>;

    /// Where the kernel table of a fresh allocation's `table` lives (at `at` when
    /// [`Provider::room`] made room for it); its entries are there after
    /// [`Provider::complete_table`].
    fn kernel_table(&self, table: &PeerTable, at: Option<u64>) -> Result<Table, Fail>;

    /// Writes `table`'s entries to the kernel table at `at` and waits until they are there:
    /// kernels on any stream, and Python, may read them afterwards.
    fn complete_table(&self, table: &PeerTable, at: Option<u64>) -> Result<(), Fail>;

    /// Waits for every kernel this process queued on the provider's device, on any stream:
    /// before a free (no kernel still touches the memory when it is reused) and a barrier
    /// (stores made before it are complete).
    fn device_wait(&self) -> Result<(), Fail>;
}

impl Provider for HostProvider {
    fn room(bytes: usize, _world: usize) -> Option<(usize, Option<usize>)> {
        Some((bytes, None))
    }

    /// Host memory: the table is complete as it is made.
    fn kernel_table(&self, table: &PeerTable, _at: Option<u64>) -> Result<Table, Fail> {
        Ok(Table::Host(table.to_i64().into()))
    }

    fn complete_table(&self, _table: &PeerTable, _at: Option<u64>) -> Result<(), Fail> {
        Ok(())
    }

    /// Host memory: every store was made by the time the call returns.
    fn device_wait(&self) -> Result<(), Fail> {
        Ok(())
    }
}

impl Provider for GpuProvider {
    /// The table goes after the tensor, in the same symmetric allocation: no device allocation
    /// or free of its own (a `cudaMalloc` and a `cudaFree`, which waits for the whole device,
    /// per allocation before), and it goes with the allocation.
    fn room(bytes: usize, world: usize) -> Option<(usize, Option<usize>)> {
        let at = bytes.checked_next_multiple_of(TABLE_ALIGN)?;
        let total = at.checked_add(world.checked_mul(8)?)?;
        (total <= isize::MAX as usize).then_some((total, Some(at)))
    }

    /// The device copy Python gets is its own (Python may write into it; the provider's
    /// launches read the provider's copy).
    fn kernel_table(&self, _table: &PeerTable, at: Option<u64>) -> Result<Table, Fail> {
        Ok(Table::Device {
            addr: device_table_at(at)?,
        })
    }

    /// One upload queued on the shim's stream, then a wait for that stream (a GPU round trip).
    fn complete_table(&self, table: &PeerTable, at: Option<u64>) -> Result<(), Fail> {
        let addr = device_table_at(at)?;
        let bytes: Vec<u8> = table
            .to_i64()
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        self.gpu().write_local(addr, &bytes)?;
        Ok(self.gpu().synchronize()?)
    }

    /// The whole device: torch, cupy and Triton queue on streams of the primary context that
    /// the shim shares, not on the shim's stream.
    fn device_wait(&self) -> Result<(), Fail> {
        self.gpu().device_synchronize().map_err(|e| {
            Fail::Symmem(format!(
                "waiting for this rank's GPU failed: {e}. A kernel queued on it failed (the \
                 framework that queued it names which); the call did nothing on this rank"
            ))
        })
    }
}

/// Where a device table goes: [`Provider::room`] made room for it.
fn device_table_at(at: Option<u64>) -> Result<u64, Fail> {
    at.ok_or_else(|| {
        Fail::Symmem(
            "no room for the peer-bases table in the allocation (a symmem bug: report it)".into(),
        )
    })
}

/// A fresh allocation's table entries, still to be written where its kernel table lives
/// ([`Session::complete_table`]).
struct TableEntries {
    table: PeerTable,
    at: Option<u64>,
}

/// Where an allocation's kernel table lives.
enum Table {
    Host(Arc<[i64]>),
    /// A device copy made for Python, inside the allocation after the tensor.
    Device {
        addr: u64,
    },
}

/// A live allocation as the Python thread reads it (through [`INDEX`]): everything an
/// allocation's or address map's answer holds, made once.
pub struct Entry {
    id: u64,
    rank: usize,
    base: u64,
    bytes: u64,
    bases: Vec<u64>,
    direct: Vec<bool>,
    spec: TensorSpec,
    table: (TensorSpec, Keep),
}

impl Entry {
    /// The answer for this allocation, with the tensor when `data` holds it.
    fn describe(&self, data: Option<DataRef>) -> AllocOut {
        AllocOut {
            id: self.id,
            rank: self.rank,
            world_size: self.bases.len(),
            base: self.base,
            bytes: self.bytes,
            bases: self.bases.clone(),
            direct: self.direct.clone(),
            data: data.map(|d| (self.spec.clone(), Keep::Data(Arc::new(d)))),
            table: self.table.clone(),
        }
    }
}

/// The live allocations with a tensor, by id and by address. The session thread writes it (on
/// allocate, free and finalize); the Python thread reads it without a round trip.
struct Index {
    entries: BTreeMap<u64, Arc<Entry>>,
    /// Allocation id by address.
    by_addr: BTreeMap<u64, u64>,
}

static INDEX: Mutex<Index> = Mutex::new(Index {
    entries: BTreeMap::new(),
    by_addr: BTreeMap::new(),
});

fn index() -> std::sync::MutexGuard<'static, Index> {
    INDEX.lock().unwrap_or_else(|e| e.into_inner())
}

struct Live {
    buffer: SymmetricBuffer<u8>,
    tracker: Arc<Tracker>,
    spec: TensorSpec,
    /// Whether the table was made (and the allocation is in [`INDEX`]).
    indexed: bool,
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

struct Session<P: Provider> {
    ctx: Context<P>,
    device: DLDevice,
    identity: RankIdentity,
    live: BTreeMap<u64, Live>,
    finalized: bool,
    /// How many times the session waited for the device (tests: free's opt-out is honoured).
    device_waits: u64,
}

impl<P: Provider> Session<P> {
    fn new(ctx: Context<P>, device: DLDevice, identity: RankIdentity) -> Self {
        Self {
            ctx,
            device,
            identity,
            live: BTreeMap::new(),
            finalized: false,
            device_waits: 0,
        }
    }

    fn usable(&self) -> Result<(), Fail> {
        if self.finalized {
            return Err(Fail::Symmem(FINALIZED.into()));
        }
        Ok(())
    }

    fn info(&self) -> Info {
        Info {
            provider: self.ctx.provider().kind().name(),
            rank: self.ctx.rank(),
            world_size: self.ctx.world_size(),
            local_rank: self.identity.local_rank,
            local_world_size: self.identity.local_world_size,
            launcher: self.identity.launcher.to_string(),
            device: self.device,
            finalized: self.finalized,
        }
    }

    /// Collective: a new allocation, with its kernel table's place but not yet its entries
    /// ([`Session::complete_table`] writes them).
    fn allocate(
        &mut self,
        shape: Vec<i64>,
        dtype: DType,
    ) -> Result<(AllocOut, TableEntries), Fail> {
        self.usable()?;
        let bytes = checked_bytes(&shape, dtype)?;
        let (total, table_at) = P::room(bytes, self.ctx.world_size())
            .ok_or_else(|| Fail::Value(format!("shape {shape:?} overflows the address space")))?;
        let (buffer, map) = self.ctx.allocate_symmetric_map::<u8>(total)?;
        trace::mark("session: collective and map");
        let (id, base) = (buffer.id(), buffer.addr());
        let tracker = Arc::new(Tracker {
            id,
            rank: self.ctx.rank(),
            addr: base,
            bytes: bytes as u64,
            holders: AtomicUsize::new(0),
            freed: AtomicBool::new(false),
            dropped: AtomicBool::new(false),
            reported: AtomicBool::new(false),
        });
        let at = table_at.map(|at| base + at as u64);
        let spec = TensorSpec {
            data: base,
            shape,
            dtype,
            device: self.device,
        };
        let table = self.ctx.provider().kernel_table(&map.table, at);
        let indexed = table.is_ok();
        self.live.insert(
            id,
            Live {
                buffer,
                tracker: Arc::clone(&tracker),
                spec: spec.clone(),
                indexed,
            },
        );
        // On failure the allocation is live on every rank; it stays tracked (finalize reports
        // it), with no tensor.
        let entry = Entry {
            id,
            rank: self.ctx.rank(),
            base,
            bytes: bytes as u64,
            bases: map.table.bases().to_vec(),
            direct: map.direct().to_vec(),
            table: self.table_spec(table?, map.table.world_size(), &tracker),
            spec,
        };
        let out = entry.describe(Some(DataRef::new(&tracker)));
        let mut index = index();
        index.by_addr.insert(base, id);
        index.entries.insert(id, Arc::new(entry));
        Ok((
            out,
            TableEntries {
                table: map.table,
                at,
            },
        ))
    }

    /// Writes a fresh allocation's table entries and waits until they are there
    /// ([`Provider::complete_table`]).
    fn complete_table(&self, entries: TableEntries) -> Result<(), Fail> {
        let done = self
            .ctx
            .provider()
            .complete_table(&entries.table, entries.at);
        trace::mark("session: table complete");
        done.map_err(|e| {
            Fail::Symmem(format!(
                "the peer-bases table of the allocation just made did not reach the device: {}",
                e.message()
            ))
        })
    }

    /// Waits for every kernel this process queued on the device ([`Provider::device_wait`]).
    fn device_wait(&mut self) -> Result<(), Fail> {
        self.device_waits += 1;
        self.ctx.provider().device_wait()
    }

    /// The peer-bases table as a tensor: int64, one entry per rank.
    fn table_spec(&self, table: Table, world_size: usize, of: &Arc<Tracker>) -> (TensorSpec, Keep) {
        let (data, keep, device) = match table {
            Table::Host(entries) => (
                entries.as_ptr() as u64,
                Keep::HostTable(entries),
                DLDevice {
                    device_type: KDL_CPU,
                    device_id: 0,
                },
            ),
            Table::Device { addr } => (
                addr,
                Keep::DeviceTable(Arc::new(Watch(Arc::clone(of)))),
                self.device,
            ),
        };
        let spec = TensorSpec {
            data,
            shape: vec![world_size as i64],
            dtype: dtype::INT64,
            device,
        };
        (spec, keep)
    }

    /// Collective: frees allocation `id`, first waiting for the device unless the caller
    /// did (`synchronize` false).
    fn free(&mut self, id: u64, synchronize: bool) -> Result<(), Fail> {
        self.usable()?;
        let missing = || {
            Fail::Value(format!(
                "no live symmetric allocation #{id} on this rank (freed already?)"
            ))
        };
        // Misuse is refused before the wait, the wait comes before the collective.
        if !self.live.contains_key(&id) {
            return Err(missing());
        }
        if synchronize {
            self.device_wait()?;
            trace::mark("session: device waited");
        }
        let live = self.live.remove(&id).ok_or_else(missing)?;
        if live.indexed {
            let mut index = index();
            index.by_addr.remove(&live.spec.data);
            index.entries.remove(&id);
        }
        let Live {
            buffer, tracker, ..
        } = live;
        // On failure the context keeps the allocation on its books (finalize reports it). A
        // device table goes with the allocation.
        self.ctx.free(buffer)?;
        trace::mark("session: collective freed");
        tracker.freed.store(true, Ordering::Release);
        Ok(())
    }

    /// Collective: waits for the device (stores of kernels included), then for every rank.
    fn barrier(&mut self) -> Result<(), Fail> {
        self.usable()?;
        self.device_wait()?;
        Ok(self.ctx.barrier()?)
    }

    /// One allocate + free of `bytes` through the Rust `Context` alone (no table for Python,
    /// no index), timed here: the floor the Python face is measured against. Collective.
    fn bench_context_pair(&mut self, bytes: usize) -> Result<(u64, u64), Fail> {
        self.usable()?;
        let start = Instant::now();
        let (buffer, _table) = self.ctx.allocate_symmetric::<u8>(bytes)?;
        let allocated = start.elapsed();
        self.ctx.free(buffer)?;
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Ok((nanos(allocated), nanos(start.elapsed() - allocated)))
    }

    fn outstanding(&self) -> Vec<Outstanding> {
        self.ctx
            .outstanding()
            .into_iter()
            .map(|record| self.outstanding_of(record.id, record.addr, record.bytes))
            .collect()
    }

    fn outstanding_of(&self, id: u64, addr: u64, bytes: u64) -> Outstanding {
        let live = self.live.get(&id);
        Outstanding {
            id,
            addr,
            // The tensor's bytes (a GPU allocation also holds its table).
            bytes: live.map_or(bytes, |l| l.tracker.bytes),
            dtype: live.map_or("uint8", |l| l.spec.dtype.name),
            shape: live.map_or_else(|| vec![bytes as i64], |l| l.spec.shape.clone()),
            dropped: live.is_some_and(|l| l.tracker.dropped.load(Ordering::Acquire)),
        }
    }

    fn finalize(&mut self) -> Result<Vec<Outstanding>, Fail> {
        self.usable()?;
        self.device_wait()?;
        {
            // Nothing may be exported or described any more (tables go with the library).
            let mut index = index();
            index.entries.clear();
            index.by_addr.clear();
        }
        let report = self.ctx.finalize()?;
        self.finalized = true;
        let outstanding = report
            .outstanding
            .iter()
            .map(|r| self.outstanding_of(r.id, r.addr, r.bytes))
            .collect();
        for (_, live) in std::mem::take(&mut self.live) {
            live.tracker.reported.store(true, Ordering::Release);
            // Reported just now by the context; dropping the buffer would warn a second time.
            std::mem::forget(live.buffer);
        }
        Ok(outstanding)
    }
}

const FINALIZED: &str = "symmem.finalize() was called: this process cannot use symmem again (the \
                         GPU libraries initialise once per process); start a new process";

/// The most dimensions a tensor may have: numpy, like other DLPack consumers, takes 64.
const MAX_DIMS: usize = 64;

/// Bytes of a tensor of `shape` and `dtype`, refused before any collective when zero or absurd.
fn checked_bytes(shape: &[i64], dtype: DType) -> Result<usize, Fail> {
    let shown = format!("{shape:?}");
    if shape.is_empty() {
        return Err(Fail::Value(
            "a symmetric tensor needs at least one dimension, e.g. allocate_symmetric(1024)".into(),
        ));
    }
    if shape.len() > MAX_DIMS {
        return Err(Fail::Value(format!(
            "a symmetric tensor has at most {MAX_DIMS} dimensions (DLPack consumers such as numpy \
             take no more), got {}",
            shape.len()
        )));
    }
    if let Some(d) = shape.iter().find(|&&d| d < 0) {
        return Err(Fail::Value(format!(
            "negative dimension {d} in shape {shown}"
        )));
    }
    if shape.contains(&0) {
        return Err(Fail::Value(format!(
            "shape {shown} has no elements: symmetric allocations must have the same non-zero \
             size on every rank"
        )));
    }
    shape
        .iter()
        .try_fold(dtype.itemsize(), |acc, &d| acc.checked_mul(d as usize))
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| {
            Fail::Value(format!(
                "shape {shown} of {} overflows the address space",
                dtype.name
            ))
        })
}

enum AnySession {
    Host(Box<Session<HostProvider>>),
    Gpu(Box<Session<GpuProvider>>),
}

macro_rules! on_session {
    ($session:expr, $s:ident => $body:expr) => {
        match $session {
            AnySession::Host($s) => $body,
            AnySession::Gpu($s) => $body,
        }
    };
}

/// One request to the session thread: runs with the session (`None` before `init` succeeded).
type Job = Box<dyn FnOnce(&mut Option<AnySession>) + Send>;

/// The Python thread's end of the session. The session itself lives on a thread of its own
/// (it never moves: the GPU provider and its current device stay on that thread), which runs
/// one request at a time, so that the Python thread can wait in short slices and take a
/// Ctrl-C (see [`Pending`]).
struct Handle {
    /// The Python thread that started the session: the only one that may use it.
    owner: ThreadId,
    jobs: mpsc::Sender<Job>,
    /// Set once `init` succeeded (`finalized` kept current).
    info: Option<Info>,
    /// Why the session refuses every request: a collective was abandoned mid-way.
    poisoned: Option<String>,
    /// A request was sent and has not answered yet.
    busy: bool,
    /// The end of the last request, which may come after its answer (allocate completes its
    /// table meanwhile); taken by [`settle`], or before the next call.
    settling: Option<mpsc::Receiver<Result<(), Fail>>>,
}

/// Where a request's answer goes. The session thread sends it as soon as it is known; the
/// request may go on afterwards (allocate's table is completed while Python wraps the
/// tensors), and ends with a late outcome that the Python thread takes before its next call.
pub struct Answer<R>(Option<mpsc::Sender<Result<R, Fail>>>);

impl<R> Answer<R> {
    /// Sends the answer (once: later answers are dropped).
    fn send(&mut self, result: Result<R, Fail>) {
        let Some(tx) = self.0.take() else {
            return;
        };
        // Before the answer: the Python thread may call again as soon as it has it.
        if let Some(h) = handle().as_mut() {
            h.busy = false;
        }
        trace::mark("session: answer sent");
        let _ = tx.send(result);
    }
}

static HANDLE: Mutex<Option<Handle>> = Mutex::new(None);
/// How long either end of a hand-over spins for the other before it blocks: the session thread
/// for the next request, the Python thread for the answer. Longer than one allocate + free at
/// 1 PE (about 25 us on an H200) and the Python between two calls; a rank that waits longer
/// (collectives of several PEs take milliseconds) sleeps as before.
pub const HANDOFF_SPIN: Duration = Duration::from_micros(100);

/// Receives from `rx`, spinning at most [`HANDOFF_SPIN`]. `Timeout`: nothing came meanwhile.
fn spin_recv<T>(rx: &mpsc::Receiver<T>) -> Result<T, mpsc::RecvTimeoutError> {
    let start = Instant::now();
    loop {
        match rx.try_recv() {
            Ok(value) => return Ok(value),
            Err(mpsc::TryRecvError::Disconnected) => {
                return Err(mpsc::RecvTimeoutError::Disconnected);
            }
            Err(mpsc::TryRecvError::Empty) if start.elapsed() < HANDOFF_SPIN => {
                // Yields rather than burns: where ranks outnumber cores, the thread that has
                // the work to do (a peer's collective) gets the core.
                std::thread::yield_now();
            }
            Err(mpsc::TryRecvError::Empty) => return Err(mpsc::RecvTimeoutError::Timeout),
        }
    }
}

/// The session thread's next request (spinning briefly, then blocking); `None` when the
/// Python side is gone.
fn next_job(queue: &mpsc::Receiver<Job>) -> Option<Job> {
    match spin_recv(queue) {
        Ok(job) => Some(job),
        Err(mpsc::RecvTimeoutError::Disconnected) => None,
        Err(mpsc::RecvTimeoutError::Timeout) => queue.recv().ok(),
    }
}

/// The process that started the session (0: none). Read without the lock: a forked child
/// must be refused before it touches anything its parent's threads may have held.
static OWNER_PID: AtomicU32 = AtomicU32::new(0);

fn handle() -> std::sync::MutexGuard<'static, Option<Handle>> {
    HANDLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A forked child of the process that started the session gets an error: it shares its
/// parent's control sockets, and its calls would speak for its parent's rank.
fn refuse_a_fork() -> Result<(), Fail> {
    let owner = OWNER_PID.load(Ordering::Acquire);
    let me = std::process::id();
    if owner != 0 && owner != me {
        return Err(Fail::Symmem(format!(
            "symmem was initialised in process {owner}, and this process ({me}) is a fork of \
             it: a fork must not use its parent's session (it would act as the parent's rank \
             towards the other ranks). Use symmem in the parent only, or start workers with \
             multiprocessing's 'spawn' method"
        )));
    }
    Ok(())
}

/// A request sent to the session thread; its answer arrives through [`Pending::wait`].
pub struct Pending<R> {
    answer: mpsc::Receiver<Result<R, Fail>>,
    what: &'static str,
    done: bool,
}

impl<R> Pending<R> {
    /// The answer, if it arrives within `slice`. With `spin`, it is first awaited by spinning
    /// that long (an answer that comes within microseconds is then taken without the sleep and
    /// wake-up of a blocking receive).
    pub fn wait(&mut self, spin: bool, slice: Duration) -> Option<Result<R, Fail>> {
        let polled = if spin {
            spin_recv(&self.answer)
        } else {
            Err(mpsc::RecvTimeoutError::Timeout)
        };
        let answer = match polled.or_else(|_| self.answer.recv_timeout(slice)) {
            Ok(answer) => answer,
            Err(mpsc::RecvTimeoutError::Timeout) => return None,
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(Fail::Symmem(format!(
                "symmem's session thread ended during symmem.{}(); start a new process",
                self.what
            ))),
        };
        self.done = true;
        Some(answer)
    }

    /// The answer if it is there already (no wait, no spin).
    pub fn ready(&mut self) -> Option<Result<R, Fail>> {
        let answer = self.answer.try_recv().ok()?;
        self.done = true;
        Some(answer)
    }

    /// The caller stops waiting (`why`: a KeyboardInterrupt): the request runs on, and
    /// whether it completed on every rank is unknown, so the session refuses everything
    /// afterwards. Returns the message later calls get.
    pub fn abandon(mut self, why: &str) -> String {
        self.done = true;
        poison(format!(
            "symmem.{}() was interrupted ({why}) while it waited for the other ranks: whether \
             it completed on every rank is unknown, so this process's symmem session refuses \
             every later call; end this process (and the job) and start again",
            self.what
        ))
    }
}

impl<R> Drop for Pending<R> {
    fn drop(&mut self) {
        if !self.done {
            poison(format!(
                "symmem.{}() was abandoned while it ran: its outcome is unknown; start a new \
                 process",
                self.what
            ));
        }
    }
}

/// Makes the session refuse every later call with `message` (the first reason stays).
fn poison(message: String) -> String {
    match handle().as_mut() {
        Some(h) => h.poisoned.get_or_insert(message).clone(),
        None => message,
    }
}

/// Waits for the end of the last request unless the Python thread took it ([`settle`]): no
/// call runs, and nothing is read from the index, before allocate's table is complete.
fn settle_previous() -> Result<(), Fail> {
    let done = match handle().as_mut() {
        // A request still to answer (a signal handler calling in) was preceded by this wait.
        Some(h) if !h.busy => h.settling.take(),
        _ => None,
    };
    match done.map(|done| done.recv()) {
        Some(Ok(late)) => late.map_err(late_failure),
        // Nothing left to wait for, or the session thread is gone (the next request says so).
        None | Some(Err(_)) => Ok(()),
    }
}

/// A request's late failure as the Python thread takes it (a table that did not reach the
/// device, whose tensor Python may hold already), with the session poisoned by it.
pub fn late_failure(fail: Fail) -> Fail {
    Fail::Symmem(poison(format!(
        "{}: the device is unusable for this process, so its symmem session refuses every \
         later call; end this process (and the job)",
        fail.message()
    )))
}

/// The end of the last request, for the Python thread to wait on (`None`: taken already).
pub fn settle() -> Result<Option<Pending<()>>, Fail> {
    refuse_a_fork()?;
    let mut guard = handle();
    let h = usable(guard.as_mut())?;
    if h.busy {
        return Ok(None);
    }
    Ok(h.settling.take().map(|answer| Pending {
        answer,
        what: "allocate_symmetric",
        done: false,
    }))
}

/// Sends `f` to the session thread after the checks every call makes (not a fork, the owner
/// thread, not poisoned, not re-entered, and initialised unless `what` is `init`), once the
/// last request has ended. `f` answers through its [`Answer`] and may go on: what it returns
/// is the late outcome ([`settle`]); a request that returns before it answered answers with
/// what it returned.
fn submit_late<R: Send + 'static>(
    what: &'static str,
    f: impl FnOnce(&mut Option<AnySession>, &mut Answer<R>) -> Result<(), Fail> + Send + 'static,
) -> Result<Pending<R>, Fail> {
    refuse_a_fork()?;
    settle_previous()?;
    let mut guard = handle();
    let h = usable(guard.as_mut())?;
    if h.busy {
        return Err(Fail::Symmem(
            "symmem was called again while a call was in progress".into(),
        ));
    }
    if h.info.is_none() && what != "init" {
        return Err(Fail::Symmem("symmem is not initialised".into()));
    }
    let (tx, answer) = mpsc::channel();
    let (done_tx, done) = mpsc::channel();
    let job: Job = Box::new(move |slot| {
        trace::mark("session: request taken");
        let mut reply = Answer(Some(tx));
        let late = f(slot, &mut reply);
        let late = if reply.0.is_some() {
            reply.send(Err(late.err().unwrap_or_else(|| {
                Fail::Symmem(
                    "a symmem request ended without an answer (a symmem bug: report it)".into(),
                )
            })));
            Ok(())
        } else {
            late
        };
        trace::mark("session: request ended");
        let _ = done_tx.send(late);
    });
    trace::mark("python: request sent");
    h.jobs
        .send(job)
        .map_err(|_| Fail::Symmem("symmem's session thread is gone; start a new process".into()))?;
    h.busy = true;
    h.settling = Some(done);
    Ok(Pending {
        answer,
        what,
        done: false,
    })
}

/// [`submit_late`] of a request that ends with its answer.
fn submit<R: Send + 'static>(
    what: &'static str,
    f: impl FnOnce(&mut Option<AnySession>) -> Result<R, Fail> + Send + 'static,
) -> Result<Pending<R>, Fail> {
    submit_late(what, move |slot, answer| {
        answer.send(f(slot));
        Ok(())
    })
}

/// [`submit_late`] of a request that needs the running session.
fn with_session_late<R: Send + 'static>(
    what: &'static str,
    f: impl FnOnce(&mut AnySession, &mut Answer<R>) -> Result<(), Fail> + Send + 'static,
) -> Result<Pending<R>, Fail> {
    submit_late(what, move |slot, answer| match slot.as_mut() {
        Some(session) => f(session, answer),
        None => Err(Fail::Symmem("symmem is not initialised".into())),
    })
}

/// [`submit`] of a request that needs the running session.
fn with_session<R: Send + 'static>(
    what: &'static str,
    f: impl FnOnce(&mut AnySession) -> Result<R, Fail> + Send + 'static,
) -> Result<Pending<R>, Fail> {
    with_session_late(what, move |session, answer| {
        answer.send(f(session));
        Ok(())
    })
}

/// Waits for a request that returns at once (no collective), holding the GIL if the caller
/// does: the session thread never needs it.
fn now<R>(mut pending: Pending<R>) -> Result<R, Fail> {
    pending.done = true;
    pending.answer.recv().unwrap_or_else(|_| {
        Err(Fail::Symmem(format!(
            "symmem's session thread ended during symmem.{}(); start a new process",
            pending.what
        )))
    })
}

/// Which provider `init` starts: the argument, else [`settings::PROVIDER`] (`SYMMEM_PROVIDER`,
/// host when unset).
pub fn provider_kind(requested: Option<String>) -> Result<ProviderKind, Fail> {
    match requested.filter(|name| !name.trim().is_empty()) {
        Some(name) => name.parse().map_err(|e: UnknownProvider| {
            Fail::Value(format!("{e} (argument or {})", settings::PROVIDER.name))
        }),
        None => settings::PROVIDER
            .get()
            .map_err(|e| Fail::Value(e.to_string())),
    }
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
    /// [`SHIM_LIB`](symmem_gpu::SHIM_LIB) is unset.
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
    {
        let mut guard = handle();
        if guard.is_none() {
            let (jobs, queue) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name("symmem-session".into())
                .spawn(move || {
                    let mut session = None;
                    while let Some(job) = next_job(&queue) {
                        job(&mut session);
                    }
                })
                .map_err(|e| Fail::Symmem(format!("cannot start symmem's session thread: {e}")))?;
            *guard = Some(Handle {
                owner: std::thread::current().id(),
                jobs,
                info: None,
                poisoned: None,
                busy: false,
                settling: None,
            });
            OWNER_PID.store(std::process::id(), Ordering::Release);
        }
    }
    let pending = submit("init", move |slot| {
        let session = start_session(kind, options)?;
        let info = on_session!(&session, s => s.info());
        *slot = Some(session);
        Ok(info)
    })?;
    Ok(Start::Started(pending))
}

/// Records what `init`'s request gave: the session's description, or (on failure) nothing,
/// so that `init` may be tried again.
pub fn finish_init(answer: Result<Info, Fail>) -> Result<bool, Fail> {
    let mut guard = handle();
    match answer {
        Ok(info) => {
            if let Some(h) = guard.as_mut() {
                h.info = Some(info);
            }
            Ok(true)
        }
        Err(e) => {
            if guard
                .as_ref()
                .is_some_and(|h| h.info.is_none() && h.poisoned.is_none())
            {
                // Ends the session thread; a later init starts afresh.
                *guard = None;
                OWNER_PID.store(0, Ordering::Release);
            }
            Err(e)
        }
    }
}

fn start_session(kind: ProviderKind, options: Options) -> Result<AnySession, Fail> {
    let Options { shim_lib, meeting } = options;
    let timeout = settings::COLLECTIVE_TIMEOUT
        .get()
        .map_err(|e| Fail::Value(e.to_string()))?;
    // A group's meeting names the rank and opens the control plane here; without one, the
    // provider joins through the launcher's variables.
    let met = match meeting {
        Some(meeting) => {
            let identity = meeting.identity();
            let dir = symmem_bootstrap::default_rendezvous(&identity)
                .map_err(|e| Fail::Symmem(e.to_string()))?;
            let bootstrap = Bootstrap::meet(meeting, &dir, timeout)
                .map_err(|e| symmem::Error::from_provider(kind, e))?;
            Some((identity, dir, bootstrap))
        }
        None => None,
    };
    Ok(match kind {
        ProviderKind::Host => {
            let (identity, provider) = match met {
                Some((identity, _, bootstrap)) => {
                    let heap = settings::HOST_HEAP_SIZE
                        .get()
                        .map_err(|e| Fail::Value(e.to_string()))?;
                    (identity, HostProvider::over(bootstrap, heap))
                }
                None => {
                    let config = HostConfig::from_env().map_err(symmem::Error::from)?;
                    (config.identity.clone(), HostProvider::new(config))
                }
            };
            let provider = provider.map_err(symmem::Error::from)?;
            let cpu = DLDevice {
                device_type: KDL_CPU,
                device_id: 0,
            };
            let session = Session::new(Context::new(provider), cpu, identity);
            AnySession::Host(Box::new(session))
        }
        ProviderKind::Nvshmem | ProviderKind::Rocshmem => {
            let fail = |e| gpu_fail(kind, e);
            // SAFETY: symmem.init()'s documented contract (python/symmem/__init__.py): with a GPU
            // provider it is called before the process starts threads that touch the
            // environment; the Python thread waits for this request meanwhile.
            let access = unsafe { EnvironmentAccess::promise() };
            let (provider, identity) = match met {
                Some((identity, dir, bootstrap)) => {
                    let config = GpuConfig::for_rank(kind, identity.clone(), dir).map_err(fail)?;
                    let config = with_shim(config, shim_lib);
                    (GpuProvider::over(config, bootstrap, access), identity)
                }
                None => {
                    let config = with_shim(GpuConfig::from_env(kind).map_err(fail)?, shim_lib);
                    let identity = config.identity.clone();
                    (GpuProvider::new(config, access), identity)
                }
            };
            let provider = provider.map_err(fail)?;
            let device = DLDevice {
                device_type: match kind {
                    ProviderKind::Rocshmem => KDL_ROCM,
                    _ => KDL_CUDA,
                },
                device_id: provider.device(),
            };
            let session = Session::new(Context::new(provider), device, identity);
            AnySession::Gpu(Box::new(session))
        }
    })
}

/// `config` with the package's own shim library, where the user named none
/// ([`SHIM_LIB`](settings::SHIM_LIB) unset).
fn with_shim(mut config: GpuConfig, shim_lib: Option<std::path::PathBuf>) -> GpuConfig {
    if let (Some(path), None) = (shim_lib, settings::SHIM_LIB.read_path()) {
        config.library = path;
    }
    config
}

/// A GPU provider that cannot start says so as such; every other failure as the core error.
fn gpu_fail(kind: ProviderKind, e: GpuError) -> Fail {
    match e {
        GpuError::Unavailable { .. } => Fail::Unavailable(e.to_string()),
        other => symmem::Error::from_provider(kind, other).into(),
    }
}

/// The running session, or `None` before `init`. Answered by the Python thread's end alone,
/// so it works while the session is poisoned.
pub fn info() -> Result<Option<Info>, Fail> {
    refuse_a_fork()?;
    let guard = handle();
    let Some(h) = guard.as_ref() else {
        return Ok(None);
    };
    if h.info.is_some() && h.owner != std::thread::current().id() {
        return Err(Fail::Symmem(
            "symmem was initialised on another thread: call it from that thread only (the \
             session and the GPU's current device belong to one thread)"
                .into(),
        ));
    }
    Ok(h.info.clone())
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

/// The session's handle, if this thread may use it: started, from its owner thread, not
/// poisoned.
fn usable<H: std::ops::Deref<Target = Handle>>(handle: Option<H>) -> Result<H, Fail> {
    let Some(h) = handle else {
        return Err(Fail::Symmem(
            "symmem is not initialised: call symmem.init() (or allocate) first".into(),
        ));
    };
    if h.owner != std::thread::current().id() {
        return Err(Fail::Symmem(
            "symmem was initialised on another thread: call it from that thread only (the \
             session and the GPU's current device belong to one thread)"
                .into(),
        ));
    }
    if let Some(why) = &h.poisoned {
        return Err(Fail::Symmem(why.clone()));
    }
    Ok(h)
}

/// The checks every call makes (not a fork, initialised, the owner thread, not poisoned), for
/// a call the Python thread answers itself from [`INDEX`]. Returns whether the session was
/// finalized.
fn check_reader() -> Result<bool, Fail> {
    refuse_a_fork()?;
    settle_previous()?;
    let guard = handle();
    let h = usable(guard.as_ref())?;
    match &h.info {
        Some(info) => Ok(info.finalized),
        None => Err(Fail::Symmem("symmem is not initialised".into())),
    }
}

/// `(id, base, bytes)` of the live allocation whose tensor holds `addr`. Not collective: read
/// from [`INDEX`] on the calling thread.
pub fn find(addr: u64) -> Result<Option<(u64, u64, u64)>, Fail> {
    check_reader()?;
    let index = index();
    let Some((_, &id)) = index.by_addr.range(..=addr).next_back() else {
        return Ok(None);
    };
    let entry = &index.entries[&id];
    Ok((addr < entry.base + entry.bytes).then_some((id, entry.base, entry.bytes)))
}

/// The address map of live allocation `id` (no tensor), read from [`INDEX`].
pub fn address_map(id: u64) -> Result<AllocOut, Fail> {
    if check_reader()? {
        return Err(Fail::Symmem(FINALIZED.into()));
    }
    match index().entries.get(&id) {
        Some(entry) => Ok(entry.describe(None)),
        None => Err(Fail::Value(format!(
            "no live symmetric allocation #{id} on this rank"
        ))),
    }
}

/// Whether allocation `id` is live (not freed, session not finalized).
pub fn is_live(id: u64) -> Result<bool, Fail> {
    check_reader()?;
    Ok(index().entries.contains_key(&id))
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
        Ok(on_session!(s, s => s.device_waits))
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

/// `finalize`'s request completed: the session's description says so from now on.
pub fn finish_finalize() {
    if let Some(info) = handle().as_mut().and_then(|h| h.info.as_mut()) {
        info.finalized = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_checked_before_any_collective() {
        let f32 = dtype::lookup("float32").unwrap();
        assert_eq!(checked_bytes(&[2, 3], f32).unwrap(), 24);
        for bad in [
            &[][..],
            &[0][..],
            &[4, 0][..],
            &[-1][..],
            &[i64::MAX, 2][..],
            &[1; 65][..],
        ] {
            assert!(
                matches!(checked_bytes(bad, f32), Err(Fail::Value(_))),
                "{bad:?}"
            );
        }
    }

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

    #[test]
    fn a_gpu_table_goes_after_the_tensor_aligned_and_overflow_is_refused() {
        assert_eq!(GpuProvider::room(4096, 8), Some((4096 + 64, Some(4096))));
        assert_eq!(
            GpuProvider::room(1, 2),
            Some((TABLE_ALIGN + 16, Some(TABLE_ALIGN)))
        );
        assert_eq!(GpuProvider::room(isize::MAX as usize, 1), None);
        assert_eq!(GpuProvider::room(usize::MAX - 3, 1), None);
        assert_eq!(HostProvider::room(24, 8), Some((24, None)));
    }

    #[test]
    fn a_handoff_takes_what_is_sent_and_tells_empty_from_gone() {
        let (tx, rx) = mpsc::channel();
        tx.send(5).unwrap();
        assert_eq!(spin_recv(&rx).unwrap(), 5);
        assert_eq!(spin_recv(&rx), Err(mpsc::RecvTimeoutError::Timeout));
        drop(tx);
        assert_eq!(spin_recv(&rx), Err(mpsc::RecvTimeoutError::Disconnected));
        // Sent from another thread while the receiver spins.
        let (tx, rx) = mpsc::channel();
        let sender = std::thread::spawn(move || tx.send(7).unwrap());
        let got = spin_recv(&rx).or_else(|_| rx.recv_timeout(Duration::from_secs(10)));
        assert_eq!(got.unwrap(), 7);
        sender.join().unwrap();
    }

    #[test]
    fn the_last_holder_reports_a_dropped_allocation_unless_freed() {
        let tracker = Arc::new(Tracker {
            id: 7,
            rank: 0,
            addr: 0x1000,
            bytes: 64,
            holders: AtomicUsize::new(0),
            freed: AtomicBool::new(false),
            dropped: AtomicBool::new(false),
            reported: AtomicBool::new(false),
        });
        let first = DataRef::new(&tracker);
        let second = first.clone();
        drop(first);
        assert!(!tracker.dropped.load(Ordering::Acquire));
        drop(second);
        assert!(tracker.dropped.load(Ordering::Acquire));

        let freed = Arc::new(Tracker {
            id: 8,
            rank: 0,
            addr: 0x2000,
            bytes: 64,
            holders: AtomicUsize::new(0),
            freed: AtomicBool::new(true),
            dropped: AtomicBool::new(false),
            reported: AtomicBool::new(false),
        });
        drop(DataRef::new(&freed));
        assert!(!freed.dropped.load(Ordering::Acquire));
    }
}

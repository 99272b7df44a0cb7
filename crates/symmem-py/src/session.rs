//! The one symmem session of a Python process: a [`Context`] over the host or a GPU provider,
//! and the live allocations with what Python needs about them (on GPU providers, their
//! peer-bases tables are the provider's own device copies).
//!
//! The session lives on the thread that started it (a GPU runtime's current device is per
//! thread, and the GPU provider is not `Send`); every call from another thread is refused with
//! a clear error. Nothing here touches Python objects, so collectives run with the GIL released.

use crate::dlpack::{DLDevice, KDL_CPU, KDL_CUDA, KDL_ROCM, Keep, TensorSpec};
use crate::dtype::{self, DType};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use symmem::{
    Context, PeerTable, ProviderKind, SymmetricBuffer, SymmetricProvider, UnknownProvider, settings,
};
use symmem_gpu::{EnvironmentAccess, ExportedTable, GpuConfig, GpuError, GpuProvider};
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

/// What a session needs of its provider beyond the context: where kernels read a table.
trait Provider: SymmetricProvider {
    /// The kernel table of a fresh allocation's `table`, complete when this returns (kernels
    /// on any stream, and Python, may read it).
    fn kernel_table(&self, table: &PeerTable) -> Result<Table, Fail>;
}

impl Provider for HostProvider {
    fn kernel_table(&self, table: &PeerTable) -> Result<Table, Fail> {
        Ok(Table::Host(table.to_i64().into()))
    }
}

impl Provider for GpuProvider {
    /// A device copy of its own (Python may write into what it is given; the provider's
    /// launches read the provider's copy), complete on return, freed with the allocation.
    fn kernel_table(&self, table: &PeerTable) -> Result<Table, Fail> {
        Ok(Table::Device(Some(self.gpu().export_table(table)?)))
    }
}

/// Where an allocation's kernel table lives.
enum Table {
    Host(Arc<[i64]>),
    /// A device copy made for Python: freed with the allocation, or before the library
    /// is finalised (then `None`).
    Device(Option<ExportedTable>),
    /// The device copy could not be made: the allocation exists but has no tensor.
    Missing,
}

struct Live {
    buffer: SymmetricBuffer<u8>,
    tracker: Arc<Tracker>,
    spec: TensorSpec,
    bases: Vec<u64>,
    direct: Vec<bool>,
    table: Table,
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
pub struct Info {
    pub provider: &'static str,
    pub rank: usize,
    pub world_size: usize,
    pub device: DLDevice,
    pub finalized: bool,
}

struct Session<P: Provider> {
    ctx: Context<P>,
    device: DLDevice,
    live: BTreeMap<u64, Live>,
    /// Allocation id by address.
    by_addr: BTreeMap<u64, u64>,
    finalized: bool,
}

impl<P: Provider> Session<P> {
    fn new(ctx: Context<P>, device: DLDevice) -> Self {
        Self {
            ctx,
            device,
            live: BTreeMap::new(),
            by_addr: BTreeMap::new(),
            finalized: false,
        }
    }

    fn usable(&self) -> Result<(), Fail> {
        if self.finalized {
            return Err(Fail::Symmem(
                "symmem.finalize() was called: this process cannot use symmem again (the GPU \
                 libraries initialise once per process); start a new process"
                    .into(),
            ));
        }
        Ok(())
    }

    fn info(&self) -> Info {
        Info {
            provider: self.ctx.provider().kind().name(),
            rank: self.ctx.rank(),
            world_size: self.ctx.world_size(),
            device: self.device,
            finalized: self.finalized,
        }
    }

    fn allocate(&mut self, shape: Vec<i64>, dtype: DType) -> Result<AllocOut, Fail> {
        self.usable()?;
        let bytes = checked_bytes(&shape, dtype)?;
        let (buffer, map) = self.ctx.allocate_symmetric_map::<u8>(bytes)?;
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
        let (table, failed) = match self.ctx.provider().kernel_table(&map.table) {
            Ok(table) => (table, None),
            Err(e) => (Table::Missing, Some(e)),
        };
        let live = Live {
            buffer,
            tracker,
            spec: TensorSpec {
                data: base,
                shape,
                dtype,
                device: self.device,
            },
            bases: map.table.bases().to_vec(),
            direct: map.direct().to_vec(),
            table,
        };
        self.by_addr.insert(base, id);
        self.live.insert(id, live);
        if let Some(e) = failed {
            // The allocation is live on every rank; it stays tracked (finalize reports it).
            return Err(e);
        }
        let live = &self.live[&id];
        let data = DataRef::new(&live.tracker);
        Ok(self.describe(live, Some(data)))
    }

    fn describe(&self, live: &Live, data: Option<DataRef>) -> AllocOut {
        let world_size = live.bases.len();
        let (table_data, keep, device) = match &live.table {
            Table::Host(entries) => (
                entries.as_ptr() as u64,
                Keep::HostTable(Arc::clone(entries)),
                DLDevice {
                    device_type: KDL_CPU,
                    device_id: 0,
                },
            ),
            Table::Device(Some(copy)) => (copy.addr(), Keep::DeviceTable, self.device),
            Table::Device(None) => unreachable!("tables released by finalize are never described"),
            Table::Missing => unreachable!("allocations without a table are never described"),
        };
        let table = TensorSpec {
            data: table_data,
            shape: vec![world_size as i64],
            dtype: dtype::INT64,
            device,
        };
        AllocOut {
            id: live.tracker.id,
            rank: self.ctx.rank(),
            world_size,
            base: live.spec.data,
            bytes: live.tracker.bytes,
            bases: live.bases.clone(),
            direct: live.direct.clone(),
            data: data.map(|d| (live.spec.clone(), Keep::Data(Arc::new(d)))),
            table: (table, keep),
        }
    }

    fn find(&self, addr: u64) -> Option<(u64, u64, u64)> {
        let (&base, &id) = self.by_addr.range(..=addr).next_back()?;
        let live = &self.live[&id];
        (addr < base + live.tracker.bytes).then_some((id, base, live.tracker.bytes))
    }

    fn address_map(&self, id: u64) -> Result<AllocOut, Fail> {
        self.usable()?;
        match self.live.get(&id) {
            Some(live) if !matches!(live.table, Table::Missing | Table::Device(None)) => {
                Ok(self.describe(live, None))
            }
            _ => Err(Fail::Value(format!(
                "no live symmetric allocation #{id} on this rank"
            ))),
        }
    }

    fn free(&mut self, id: u64) -> Result<(), Fail> {
        self.usable()?;
        let Some(live) = self.live.remove(&id) else {
            return Err(Fail::Value(format!(
                "no live symmetric allocation #{id} on this rank (freed already?)"
            )));
        };
        self.by_addr.remove(&live.spec.data);
        let Live {
            buffer, tracker, ..
        } = live;
        // On failure the context keeps the allocation on its books (finalize reports it). A
        // device table goes with the allocation, in the provider.
        self.ctx.free(buffer)?;
        tracker.freed.store(true, Ordering::Release);
        Ok(())
    }

    fn barrier(&mut self) -> Result<(), Fail> {
        self.usable()?;
        Ok(self.ctx.barrier()?)
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
            bytes,
            dtype: live.map_or("uint8", |l| l.spec.dtype.name),
            shape: live.map_or_else(|| vec![bytes as i64], |l| l.spec.shape.clone()),
            dropped: live.is_some_and(|l| l.tracker.dropped.load(Ordering::Acquire)),
        }
    }

    fn finalize(&mut self) -> Result<Vec<Outstanding>, Fail> {
        self.usable()?;
        // Device tables go before the SHMEM library does (finalize is the end of the session
        // either way: tensors of allocations still live dangle after it, tables as data).
        for live in self.live.values_mut() {
            if let Table::Device(copy) = &mut live.table {
                copy.take();
            }
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
        self.by_addr.clear();
        Ok(outstanding)
    }
}

/// Bytes of a tensor of `shape` and `dtype`, refused before any collective when zero or absurd.
fn checked_bytes(shape: &[i64], dtype: DType) -> Result<usize, Fail> {
    let shown = format!("{shape:?}");
    if shape.is_empty() {
        return Err(Fail::Value(
            "a symmetric tensor needs at least one dimension, e.g. allocate_symmetric(1024)".into(),
        ));
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

thread_local! {
    static SESSION: RefCell<Option<AnySession>> = const { RefCell::new(None) };
}

/// The thread that started the session, if any.
static OWNER: Mutex<Option<ThreadId>> = Mutex::new(None);

fn owner() -> Option<ThreadId> {
    *OWNER.lock().unwrap_or_else(|e| e.into_inner())
}

fn with_session<R>(f: impl FnOnce(&mut AnySession) -> Result<R, Fail>) -> Result<R, Fail> {
    match owner() {
        None => {
            return Err(Fail::Symmem(
                "symmem is not initialised: call symmem.init() (or allocate) first".into(),
            ));
        }
        Some(t) if t != std::thread::current().id() => {
            return Err(Fail::Symmem(
                "symmem was initialised on another thread: call it from that thread only (the \
                 session and the GPU's current device belong to one thread)"
                    .into(),
            ));
        }
        Some(_) => {}
    }
    SESSION.with(|cell| {
        let mut slot = cell.try_borrow_mut().map_err(|_| {
            Fail::Symmem("symmem was called again while a call was in progress".into())
        })?;
        match slot.as_mut() {
            Some(session) => f(session),
            None => Err(Fail::Symmem("symmem is not initialised".into())),
        }
    })
}

/// Which provider `init` starts: the argument, else [`settings::PROVIDER`] (`SYMMEM_PROVIDER`,
/// host when unset).
fn provider_kind(requested: Option<String>) -> Result<ProviderKind, Fail> {
    match requested.filter(|name| !name.trim().is_empty()) {
        Some(name) => name.parse().map_err(|e: UnknownProvider| {
            Fail::Value(format!("{e} (argument or {})", settings::PROVIDER.name))
        }),
        None => settings::PROVIDER
            .get()
            .map_err(|e| Fail::Value(e.to_string())),
    }
}

/// Starts the session (collective). Returns false when it was already running with that
/// provider.
pub fn init(requested: Option<String>) -> Result<bool, Fail> {
    let kind = provider_kind(requested)?;
    if let Some(info) = info()? {
        if info.provider == kind.name() {
            return Ok(false);
        }
        return Err(Fail::Value(format!(
            "symmem already runs the {} provider in this process; it cannot switch to {kind}",
            info.provider
        )));
    }
    if owner().is_some() {
        return Err(Fail::Symmem(
            "symmem was initialised on another thread: call it from that thread only".into(),
        ));
    }
    let session = match kind {
        ProviderKind::Host => {
            let config = HostConfig::from_env().map_err(symmem::Error::from)?;
            let provider = HostProvider::new(config).map_err(symmem::Error::from)?;
            let cpu = DLDevice {
                device_type: KDL_CPU,
                device_id: 0,
            };
            AnySession::Host(Box::new(Session::new(Context::new(provider), cpu)))
        }
        ProviderKind::Nvshmem | ProviderKind::Rocshmem => {
            let fail = |e| gpu_fail(kind, e);
            let config = GpuConfig::from_env(kind).map_err(fail)?;
            // SAFETY: symmem.init()'s documented contract (python/symmem/__init__.py): with a GPU
            // provider it is called before the process starts threads that touch the
            // environment.
            let access = unsafe { EnvironmentAccess::promise() };
            let provider = GpuProvider::new(config, access).map_err(fail)?;
            let device = DLDevice {
                device_type: match kind {
                    ProviderKind::Rocshmem => KDL_ROCM,
                    _ => KDL_CUDA,
                },
                device_id: provider.device(),
            };
            AnySession::Gpu(Box::new(Session::new(Context::new(provider), device)))
        }
    };
    SESSION.with(|cell| *cell.borrow_mut() = Some(session));
    *OWNER.lock().unwrap_or_else(|e| e.into_inner()) = Some(std::thread::current().id());
    Ok(true)
}

/// A GPU provider that cannot start says so as such; every other failure as the core error.
fn gpu_fail(kind: ProviderKind, e: GpuError) -> Fail {
    match e {
        GpuError::Unavailable { .. } => Fail::Unavailable(e.to_string()),
        other => symmem::Error::from_provider(kind, other).into(),
    }
}

/// The running session, or `None` before `init` (on this thread).
pub fn info() -> Result<Option<Info>, Fail> {
    if owner().is_none() {
        return Ok(None);
    }
    with_session(|s| Ok(Some(on_session!(s, s => s.info()))))
}

pub fn allocate(shape: Vec<i64>, dtype_name: &str) -> Result<AllocOut, Fail> {
    let dtype = dtype::lookup(dtype_name).ok_or_else(|| {
        Fail::Type(format!(
            "dtype {dtype_name} is not supported by symmem; use one of {}",
            dtype::supported_names()
        ))
    })?;
    // Refused before the session is even looked at: bad input never reaches a collective.
    checked_bytes(&shape, dtype)?;
    with_session(|s| on_session!(s, s => s.allocate(shape, dtype)))
}

pub fn find(addr: u64) -> Result<Option<(u64, u64, u64)>, Fail> {
    with_session(|s| Ok(on_session!(s, s => s.find(addr))))
}

pub fn address_map(id: u64) -> Result<AllocOut, Fail> {
    with_session(|s| on_session!(s, s => s.address_map(id)))
}

pub fn free(id: u64) -> Result<(), Fail> {
    with_session(|s| on_session!(s, s => s.free(id)))
}

pub fn barrier() -> Result<(), Fail> {
    with_session(|s| on_session!(s, s => s.barrier()))
}

pub fn outstanding() -> Result<Vec<Outstanding>, Fail> {
    with_session(|s| Ok(on_session!(s, s => s.outstanding())))
}

pub fn finalize() -> Result<Vec<Outstanding>, Fail> {
    with_session(|s| on_session!(s, s => s.finalize()))
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

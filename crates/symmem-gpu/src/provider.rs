use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::ffi::{CStr, c_int, c_void};
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};
use std::time::Duration;
use symmem::{
    CollectiveKind, CollectiveOp, ContextId, Error, PeerTable, RankIdentity, SymmetricProvider,
    TranslateError, TranslatedOps,
};
use symmem_bootstrap::{Bootstrap, BootstrapError};
use symmem_shim_sys::{SYMMEM_SHIM_ABI_VERSION, SymmemShim};

/// Which SHMEM library the shim wraps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Nvshmem,
    Rocshmem,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Self::Nvshmem => "nvshmem",
            Self::Rocshmem => "rocshmem",
        }
    }
    /// File name of the shim library for this backend.
    pub fn library_name(self) -> String {
        format!("libsymmem_shim_{}.so", self.name())
    }
    fn library_fix(self) -> &'static str {
        match self {
            Self::Nvshmem => {
                "build it with `cargo xtask build-shim --backend nvshmem` (or set SYMMEM_SHIM_LIB), \
                 and put NVSHMEM's lib folder (libnvshmem_host.so.3) on LD_LIBRARY_PATH"
            }
            Self::Rocshmem => {
                "build rocSHMEM and the shim with `cargo xtask build-rocshmem --arch <gfx>` and \
                 `cargo xtask build-shim --backend rocshmem` (or set SYMMEM_SHIM_LIB), with ROCm's \
                 libraries on LD_LIBRARY_PATH"
            }
        }
    }
}

/// Errors of the GPU providers; each names what to do.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("the {backend} provider is unavailable: {reason}; {fix}")]
    Unavailable {
        backend: &'static str,
        reason: String,
        fix: String,
    },
    #[error(
        "{path} speaks shim ABI {found} ({backend_found}), this build needs ABI {expected} \
         ({backend}); rebuild it with `cargo xtask build-shim --backend {backend}`"
    )]
    WrongLibrary {
        path: PathBuf,
        found: i32,
        expected: i32,
        backend: &'static str,
        backend_found: String,
    },
    #[error("{backend} {call} failed ({status}): {message}")]
    Shim {
        backend: &'static str,
        call: &'static str,
        status: i32,
        message: String,
    },
    #[error("{var}={value:?} is not valid: expected {expected}")]
    InvalidSetting {
        var: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    #[error(transparent)]
    RankEnv(#[from] symmem::RankEnvError),
}

impl GpuError {
    fn into_symmem(self, backend: Backend) -> Error {
        match self {
            GpuError::Bootstrap(b) => b.into_symmem(backend.name()),
            other => Error::provider(backend.name(), other),
        }
    }
}

/// How to start a [`GpuProvider`].
#[derive(Clone, Debug)]
pub struct GpuConfig {
    pub backend: Backend,
    pub library: PathBuf,
    pub identity: RankIdentity,
    pub rendezvous: PathBuf,
    pub timeout: Duration,
    /// Symmetric heap per PE; 0 keeps the library's default.
    pub heap_bytes: u64,
    /// GPU of this process; `None` picks `local_rank % GPUs`.
    pub device: Option<i32>,
}

impl GpuConfig {
    pub fn from_env(backend: Backend) -> Result<Self, GpuError> {
        let identity = RankIdentity::from_env()?;
        let rendezvous = symmem_bootstrap::default_rendezvous(&identity)?;
        let var = |name| {
            std::env::var(name)
                .ok()
                .filter(|v: &String| !v.trim().is_empty())
        };
        let library = match var("SYMMEM_SHIM_LIB") {
            Some(path) => PathBuf::from(path),
            None => std::env::current_exe()
                .ok()
                .and_then(|exe| exe.parent().map(|d| d.join(backend.library_name())))
                .unwrap_or_else(|| PathBuf::from(backend.library_name())),
        };
        let heap_bytes = match var("SYMMEM_GPU_HEAP_SIZE") {
            Some(v) => symmem::parse_bytes(&v).ok_or(GpuError::InvalidSetting {
                var: "SYMMEM_GPU_HEAP_SIZE",
                value: v,
                expected: "a size such as 536870912, 512M or 4G",
            })?,
            None => 0,
        };
        let device = match var("SYMMEM_DEVICE") {
            Some(v) => Some(v.trim().parse().map_err(|_| GpuError::InvalidSetting {
                var: "SYMMEM_DEVICE",
                value: v,
                expected: "a GPU index such as 0",
            })?),
            None => None,
        };
        let timeout = match var("SYMMEM_COLLECTIVE_TIMEOUT") {
            Some(v) => symmem::parse_duration(&v).map_err(|_| GpuError::InvalidSetting {
                var: "SYMMEM_COLLECTIVE_TIMEOUT",
                value: v,
                expected: "a duration such as 60, 60s, 500ms or 2m",
            })?,
            None => Duration::from_secs(120),
        };
        Ok(Self {
            backend,
            library,
            identity,
            rendezvous,
            timeout,
            heap_bytes,
            device,
        })
    }
}

/// A device buffer owned by the provider (tables and staging).
struct DeviceBuffer {
    ptr: u64,
    bytes: usize,
}

/// The device copy of one allocation's table, and the context that built it.
struct DeviceTable {
    buffer: DeviceBuffer,
    context: ContextId,
}

/// NVSHMEM or rocSHMEM through the shim. See the crate docs.
pub struct GpuProvider {
    /// Never unloaded: the SHMEM library under it may still run threads at exit.
    shim: ManuallyDrop<SymmemShim>,
    backend: Backend,
    rank: usize,
    world_size: usize,
    single_node: bool,
    bootstrap: Bootstrap,
    /// Device copy of each allocation's table, by the allocation's local address.
    tables: HashMap<u64, DeviceTable>,
    /// Live symmetric allocations: local address -> bytes (the same on every PE).
    allocations: BTreeMap<u64, u64>,
    staging: RefCell<Option<DeviceBuffer>>,
    finalized: bool,
    /// The GPU runtime's current device is per thread: the provider stays on the thread that
    /// selected it.
    _not_send: PhantomData<*const ()>,
}

impl GpuProvider {
    /// Loads the shim, meets the other ranks and initialises the SHMEM library. Collective.
    pub fn new(config: GpuConfig) -> Result<Self, GpuError> {
        let backend = config.backend;
        let unavailable = |reason: String| GpuError::Unavailable {
            backend: backend.name(),
            reason,
            fix: backend.library_fix().to_string(),
        };
        let no_gpu = |reason: String| GpuError::Unavailable {
            backend: backend.name(),
            reason,
            fix: format!(
                "run on a machine with a GPU and its driver ({})",
                match backend {
                    Backend::Nvshmem =>
                        "NVIDIA, driver new enough for the CUDA the shim was built with",
                    Backend::Rocshmem => "AMD, with /dev/kfd and /dev/dri accessible",
                }
            ),
        };
        if !config.library.is_file() {
            return Err(unavailable(format!(
                "no shim library at {}",
                config.library.display()
            )));
        }
        // SAFETY: loading runs the library's initialisers; the shim is ours and has none that
        // touch process state beyond its GPU runtime.
        let shim = unsafe { SymmemShim::new(&config.library) }
            .map_err(|e| unavailable(format!("loading {}: {e}", config.library.display())))?;
        // SAFETY: plain getters of the loaded shim.
        let (abi, found) = unsafe {
            let name = CStr::from_ptr(shim.symmem_shim_backend())
                .to_string_lossy()
                .into_owned();
            (shim.symmem_shim_abi_version(), name)
        };
        if abi != SYMMEM_SHIM_ABI_VERSION as i32 || found != backend.name() {
            return Err(GpuError::WrongLibrary {
                path: config.library.clone(),
                found: abi,
                expected: SYMMEM_SHIM_ABI_VERSION as i32,
                backend: backend.name(),
                backend_found: found,
            });
        }
        let RankIdentity {
            rank,
            world_size,
            local_rank,
            local_world_size,
            ..
        } = config.identity;
        let bootstrap = Bootstrap::connect(rank, world_size, &config.rendezvous, config.timeout)?;
        let mut this = Self {
            shim: ManuallyDrop::new(shim),
            backend,
            rank,
            world_size,
            single_node: local_world_size == world_size,
            bootstrap,
            tables: HashMap::new(),
            allocations: BTreeMap::new(),
            staging: RefCell::new(None),
            finalized: true, // until init succeeds: nothing to finalize
            _not_send: PhantomData,
        };
        let mut count: c_int = 0;
        // SAFETY: out-pointer to a live local.
        this.check("device_count", unsafe {
            (this.shim.symmem_shim_device_count)(&mut count)
        })
        .map_err(|e| no_gpu(format!("no usable GPU ({e})")))?;
        if count < 1 {
            return Err(no_gpu("this machine has no GPU".into()));
        }
        let device = config
            .device
            .unwrap_or((local_rank % count as usize) as i32);
        // SAFETY: plain call.
        this.check("set_device", unsafe {
            (this.shim.symmem_shim_set_device)(device)
        })?;

        let heap = usize::try_from(config.heap_bytes).unwrap_or(usize::MAX);
        // Before anything that lets the library read its environment (it does so once).
        // SAFETY: plain call; it sets environment variables, and no other thread of ours runs
        // library code yet.
        this.check("configure", unsafe {
            (this.shim.symmem_shim_configure)(heap, c_int::from(this.single_node))
        })?;
        let mut id_size = 0usize;
        // SAFETY: out-pointer to a live local.
        this.check("unique_id_size", unsafe {
            (this.shim.symmem_shim_unique_id_size)(&mut id_size)
        })?;
        let mut id = vec![0u8; id_size];
        if rank == 0 {
            // SAFETY: `id` has the size the shim asked for.
            this.check("get_unique_id", unsafe {
                (this.shim.symmem_shim_get_unique_id)(id.as_mut_ptr(), id.len())
            })?;
        }
        // Rank 0's id reaches every rank through symmem's control plane.
        let op = CollectiveOp {
            seq: 0,
            kind: CollectiveKind::Provider {
                what: format!("{} unique id", backend.name()),
            },
        };
        let gathered = this.bootstrap_exchange(&op, &id)?;
        id.clone_from(&gathered[0]);
        // SAFETY: `id` is the unique id of the right size; the other arguments are plain.
        this.check("init", unsafe {
            (this.shim.symmem_shim_init)(rank as c_int, world_size as c_int, id.as_ptr(), id.len())
        })?;
        this.finalized = false;
        Ok(this)
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    fn bootstrap_exchange(
        &mut self,
        op: &CollectiveOp,
        payload: &[u8],
    ) -> Result<Vec<Vec<u8>>, GpuError> {
        Ok(self.bootstrap.exchange(op, payload, None, 0)?.payloads)
    }

    fn check(&self, call: &'static str, status: c_int) -> Result<(), GpuError> {
        if status == 0 {
            return Ok(());
        }
        // SAFETY: the shim returns a NUL-terminated per-thread buffer.
        let message = unsafe { CStr::from_ptr((self.shim.symmem_shim_last_error)()) }
            .to_string_lossy()
            .into_owned();
        Err(GpuError::Shim {
            backend: self.backend.name(),
            call,
            status,
            message,
        })
    }

    fn ok(&self, call: &'static str, status: c_int) -> Result<(), Error> {
        self.check(call, status)
            .map_err(|e| e.into_symmem(self.backend))
    }

    /// Control-plane barrier carrying `op` (the order check), then nothing else.
    fn agree(&mut self, op: &CollectiveOp) -> Result<(), Error> {
        self.bootstrap
            .barrier(op)
            .map_err(|e| e.into_symmem(self.backend.name()))
    }

    /// The device copy of `table`, which must come from this provider's context.
    fn device_table(&self, table: &PeerTable) -> Result<*const i64, Error> {
        let base = table.bases()[self.rank];
        match self.tables.get(&base) {
            Some(t) if t.context == table.context() => Ok(t.buffer.ptr as *const i64),
            Some(t) => Err(Error::ForeignContext {
                what: "peer table",
                expected: t.context.0,
                found: table.context().0,
            }),
            None => Err(Error::provider(
                self.backend.name(),
                GpuError::Shim {
                    backend: self.backend.name(),
                    call: "table lookup",
                    status: -2,
                    message: format!(
                        "no device table for an allocation at {base:#x}: use a table returned \
                         by this context's allocate (and not freed)"
                    ),
                },
            )),
        }
    }

    /// Checks an operation before any kernel runs: both ends load/store reachable and
    /// `[ptr, ptr + len)` inside one live allocation, aligned to `align`. Peers' copies sit at
    /// the same offsets, so the translated range is inside the peer's copy too: no wild
    /// pointer reaches a kernel, whoever calls.
    fn reach(
        &self,
        table: &PeerTable,
        ptr: u64,
        peers: &[usize],
        len: u64,
        align: u64,
        what: &'static str,
    ) -> Result<(), Error> {
        table.require_direct(self.rank)?;
        for &peer in peers {
            table.require_direct(peer)?;
        }
        self.check_local(ptr, len, align, what)
    }

    /// `[ptr, ptr + len)` lies inside one live allocation of this rank and is aligned.
    fn check_local(&self, ptr: u64, len: u64, align: u64, what: &'static str) -> Result<(), Error> {
        if !ptr.is_multiple_of(align) {
            return Err(TranslateError::Misaligned {
                addr: ptr,
                align,
                what,
            }
            .into());
        }
        let inside = self
            .allocations
            .range(..=ptr)
            .next_back()
            .is_some_and(|(&base, &bytes)| {
                ptr.checked_add(len)
                    .is_some_and(|end| end <= base.saturating_add(bytes))
            });
        if inside {
            Ok(())
        } else {
            Err(TranslateError::OutsideHeap {
                addr: ptr,
                len,
                peer: self.rank,
            }
            .into())
        }
    }

    /// A device scratch buffer of at least `bytes`, reused between operations.
    fn staging(&self, bytes: usize) -> Result<u64, Error> {
        let mut slot = self.staging.borrow_mut();
        if let Some(buf) = slot.as_ref().filter(|b| b.bytes >= bytes) {
            return Ok(buf.ptr);
        }
        if let Some(old) = slot.take() {
            // SAFETY: a buffer this provider allocated and no queued work uses (ops synchronise).
            self.ok("device_free", unsafe {
                (self.shim.symmem_shim_device_free)(old.ptr as *mut c_void)
            })?;
        }
        let size = bytes.max(4096).next_power_of_two();
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: out-pointer to a live local.
        self.ok("device_alloc", unsafe {
            (self.shim.symmem_shim_device_alloc)(size, &mut ptr)
        })?;
        *slot = Some(DeviceBuffer {
            ptr: ptr as u64,
            bytes: size,
        });
        Ok(ptr as u64)
    }

    fn sync(&self) -> Result<(), Error> {
        // SAFETY: plain call.
        self.ok("synchronize", unsafe {
            (self.shim.symmem_shim_synchronize)()
        })
    }
}

/// Measurement hooks for `symmem-gpu-bench`: each queues `reps` launches on the shim's stream
/// and returns the wall time until the stream is drained.
impl GpuProvider {
    fn timed(
        &self,
        reps: u32,
        mut launch: impl FnMut() -> c_int,
        call: &'static str,
    ) -> Result<Duration, Error> {
        self.sync()?;
        let started = std::time::Instant::now();
        for _ in 0..reps {
            self.ok(call, launch())?;
        }
        self.sync()?;
        Ok(started.elapsed())
    }

    /// The translated copy kernel: `bytes` from `src` on `src_pe` to `dst` on `dst_pe`.
    #[allow(clippy::too_many_arguments)] // the kernel's own arguments, plus `reps`
    pub fn time_translated_copy(
        &self,
        table: &PeerTable,
        src: u64,
        src_pe: usize,
        dst: u64,
        dst_pe: usize,
        bytes: u64,
        reps: u32,
    ) -> Result<Duration, Error> {
        self.reach(table, src, &[src_pe], bytes, 1, "copy")?;
        self.reach(table, dst, &[dst_pe], bytes, 1, "copy")?;
        let t = self.device_table(table)?;
        let (n, me) = (self.world_size as c_int, self.rank as c_int);
        // SAFETY: both ranges were checked to lie in live allocations on reachable PEs.
        self.timed(
            reps,
            || unsafe {
                (self.shim.symmem_shim_copy)(
                    t,
                    n,
                    me,
                    src as *const c_void,
                    src_pe as c_int,
                    dst as *mut c_void,
                    dst_pe as c_int,
                    bytes as usize,
                )
            },
            "copy",
        )
    }

    /// The runtime's device-to-device copy of `bytes` (the baseline).
    pub fn time_runtime_copy(
        &self,
        src: u64,
        dst: u64,
        bytes: u64,
        reps: u32,
    ) -> Result<Duration, Error> {
        self.check_local(src, bytes, 1, "copy")?;
        self.check_local(dst, bytes, 1, "copy")?;
        // SAFETY: both ranges were checked to lie in live allocations of this rank.
        self.timed(
            reps,
            || unsafe {
                (self.shim.symmem_shim_copy_device_async)(
                    dst as *mut c_void,
                    src as *const c_void,
                    bytes as usize,
                )
            },
            "copy_device_async",
        )
    }

    /// The fill kernel over `count` u64: translated to `to` through `table`, or plain local
    /// stores when `table` is `None`.
    pub fn time_fill(
        &self,
        table: Option<&PeerTable>,
        dst: u64,
        to: usize,
        count: u64,
        reps: u32,
    ) -> Result<Duration, Error> {
        let len = count.saturating_mul(8);
        let t = match table {
            Some(table) => {
                self.reach(table, dst, &[to], len, 8, "fill")?;
                self.device_table(table)?
            }
            None => {
                self.check_local(dst, len, 8, "fill")?;
                std::ptr::null()
            }
        };
        let (n, me) = (self.world_size as c_int, self.rank as c_int);
        // SAFETY: the range was checked to lie in a live allocation on a reachable PE.
        self.timed(
            reps,
            || unsafe {
                (self.shim.symmem_shim_fill_u64)(
                    t,
                    n,
                    me,
                    to as c_int,
                    dst as *mut u64,
                    7,
                    count as usize,
                )
            },
            "fill_u64",
        )
    }

    /// The library's own collective malloc + free, without symmem's order check or table.
    pub fn raw_malloc_free(&mut self, bytes: u64) -> Result<(), Error> {
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: out-pointer to a live local; freed right away (collective on every rank).
        self.ok("malloc", unsafe {
            (self.shim.symmem_shim_malloc)(bytes as usize, &mut ptr)
        })?;
        // SAFETY: just allocated by the library.
        self.ok("free", unsafe { (self.shim.symmem_shim_free)(ptr) })
    }
}

impl SymmetricProvider for GpuProvider {
    fn name(&self) -> &'static str {
        self.backend.name()
    }
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.world_size
    }
    fn claims_single_node(&self) -> bool {
        self.single_node
    }
    fn checks_collective_order(&self) -> bool {
        true
    }

    fn malloc(&mut self, bytes: u64, op: &CollectiveOp) -> Result<u64, Error> {
        // Every rank agrees on the call before the library's own collective runs.
        self.agree(op)?;
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: out-pointer to a live local.
        self.ok("malloc", unsafe {
            (self.shim.symmem_shim_malloc)(bytes as usize, &mut ptr)
        })?;
        self.allocations.insert(ptr as u64, bytes);
        Ok(ptr as u64)
    }

    fn free(&mut self, addr: u64, op: &CollectiveOp) -> Result<(), Error> {
        self.agree(op)?;
        self.allocations.remove(&addr);
        if let Some(table) = self.tables.remove(&addr) {
            self.sync()?;
            // SAFETY: the table buffer is ours and idle after the synchronisation.
            self.ok("device_free", unsafe {
                (self.shim.symmem_shim_device_free)(table.buffer.ptr as *mut c_void)
            })?;
        }
        // SAFETY: `addr` came from this library's malloc (the context checks ownership).
        self.ok("free", unsafe {
            (self.shim.symmem_shim_free)(addr as *mut c_void)
        })
    }

    fn barrier(&mut self, op: &CollectiveOp) -> Result<(), Error> {
        self.agree(op)?;
        // SAFETY: plain call; it drains the stream so stores are visible to peers after it.
        self.ok("barrier_all", unsafe {
            (self.shim.symmem_shim_barrier_all)()
        })
    }

    fn finalize(&mut self, op: &CollectiveOp) -> Result<(), Error> {
        self.agree(op)?;
        for (_, table) in std::mem::take(&mut self.tables) {
            // SAFETY: ours, and the stream is drained by finalize below before reuse.
            let _ = unsafe { (self.shim.symmem_shim_device_free)(table.buffer.ptr as *mut c_void) };
        }
        if let Some(buf) = self.staging.borrow_mut().take() {
            // SAFETY: ours.
            let _ = unsafe { (self.shim.symmem_shim_device_free)(buf.ptr as *mut c_void) };
        }
        // SAFETY: plain call, collective like this function.
        self.ok("finalize", unsafe { (self.shim.symmem_shim_finalize)() })?;
        self.finalized = true;
        Ok(())
    }

    fn table_ready(&mut self, table: &PeerTable) -> Result<(), Error> {
        let entries = table.to_i64();
        let bytes = std::mem::size_of_val(entries.as_slice());
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: out-pointer to a live local.
        self.ok("device_alloc", unsafe {
            (self.shim.symmem_shim_device_alloc)(bytes, &mut ptr)
        })?;
        // One asynchronous upload on the shim's stream; kernels on that stream see it, and
        // the host buffer may go right away (the runtime stages pageable memory).
        // SAFETY: `entries` is `bytes` long; `ptr` is a fresh device buffer of that size.
        self.ok("copy_to_device_async", unsafe {
            (self.shim.symmem_shim_copy_to_device_async)(ptr, entries.as_ptr().cast(), bytes)
        })?;
        self.tables.insert(
            table.bases()[self.rank],
            DeviceTable {
                buffer: DeviceBuffer {
                    ptr: ptr as u64,
                    bytes,
                },
                context: table.context(),
            },
        );
        Ok(())
    }

    fn ptr(&self, addr: u64, peer: usize) -> Option<u64> {
        let mut out: *mut c_void = std::ptr::null_mut();
        // SAFETY: out-pointer to a live local; the shim checks the PE.
        let status =
            unsafe { (self.shim.symmem_shim_ptr)(addr as *const c_void, peer as c_int, &mut out) };
        (status == 0 && !out.is_null()).then_some(out as u64)
    }
}

impl TranslatedOps for GpuProvider {
    fn store_u64(
        &self,
        table: &PeerTable,
        dst: u64,
        to: usize,
        values: &[u64],
    ) -> Result<(), Error> {
        self.reach(
            table,
            dst,
            &[to],
            std::mem::size_of_val(values) as u64,
            8,
            "u64 store",
        )?;
        let dev_table = self.device_table(table)?;
        let bytes = std::mem::size_of_val(values);
        let staging = self.staging(bytes)?;
        // SAFETY: `values` is `bytes` long; staging holds at least that; the kernel reads the
        // staged values and writes the translated range (validated by the context).
        unsafe {
            self.ok(
                "copy_to_device_async",
                (self.shim.symmem_shim_copy_to_device_async)(
                    staging as *mut c_void,
                    values.as_ptr().cast(),
                    bytes,
                ),
            )?;
            self.ok(
                "store_u64",
                (self.shim.symmem_shim_store_u64)(
                    dev_table,
                    self.world_size as c_int,
                    self.rank as c_int,
                    to as c_int,
                    dst as *mut u64,
                    staging as *const u64,
                    values.len(),
                ),
            )?;
        }
        self.sync()
    }

    fn load_u64(
        &self,
        table: &PeerTable,
        src: u64,
        from: usize,
        out: &mut [u64],
    ) -> Result<(), Error> {
        self.reach(
            table,
            src,
            &[from],
            std::mem::size_of_val(out) as u64,
            8,
            "u64 load",
        )?;
        let dev_table = self.device_table(table)?;
        let bytes = std::mem::size_of_val(out);
        let staging = self.staging(bytes)?;
        // SAFETY: as in `store_u64`; `out` is `bytes` long.
        unsafe {
            self.ok(
                "load_u64",
                (self.shim.symmem_shim_load_u64)(
                    dev_table,
                    self.world_size as c_int,
                    self.rank as c_int,
                    from as c_int,
                    src as *const u64,
                    staging as *mut u64,
                    out.len(),
                ),
            )?;
            self.ok(
                "copy_to_host",
                (self.shim.symmem_shim_copy_to_host)(
                    out.as_mut_ptr().cast(),
                    staging as *const c_void,
                    bytes,
                ),
            )
        }
    }

    fn copy_bytes(
        &self,
        table: &PeerTable,
        src: u64,
        src_rank: usize,
        dst: u64,
        dst_rank: usize,
        bytes: u64,
    ) -> Result<(), Error> {
        self.reach(table, src, &[src_rank], bytes, 1, "copy")?;
        self.reach(table, dst, &[dst_rank], bytes, 1, "copy")?;
        let dev_table = self.device_table(table)?;
        // SAFETY: pointers are symmetric addresses validated by the context; the kernel
        // translates them through the device table.
        self.ok("copy", unsafe {
            (self.shim.symmem_shim_copy)(
                dev_table,
                self.world_size as c_int,
                self.rank as c_int,
                src as *const c_void,
                src_rank as c_int,
                dst as *mut c_void,
                dst_rank as c_int,
                bytes as usize,
            )
        })?;
        self.sync()
    }

    fn atomic_add_u64(
        &self,
        table: &PeerTable,
        dst: u64,
        to: usize,
        value: u64,
    ) -> Result<(), Error> {
        self.reach(table, dst, &[to], 8, 8, "u64 atomic add")?;
        let dev_table = self.device_table(table)?;
        // SAFETY: as in `copy_bytes`.
        self.ok("atomic_add_u64", unsafe {
            (self.shim.symmem_shim_atomic_add_u64)(
                dev_table,
                self.world_size as c_int,
                self.rank as c_int,
                to as c_int,
                dst as *mut u64,
                value,
                1,
            )
        })?;
        self.sync()
    }

    fn read_local(&self, addr: u64, out: &mut [u8]) -> Result<(), Error> {
        self.check_local(addr, out.len() as u64, 1, "read")?;
        // SAFETY: `addr` is this rank's symmetric memory (the context checks the buffer).
        self.ok("copy_to_host", unsafe {
            (self.shim.symmem_shim_copy_to_host)(
                out.as_mut_ptr().cast(),
                addr as *const c_void,
                out.len(),
            )
        })
    }

    fn write_local(&self, addr: u64, data: &[u8]) -> Result<(), Error> {
        self.check_local(addr, data.len() as u64, 1, "write")?;
        // SAFETY: as in `read_local`.
        self.ok("copy_to_device_async", unsafe {
            (self.shim.symmem_shim_copy_to_device_async)(
                addr as *mut c_void,
                data.as_ptr().cast(),
                data.len(),
            )
        })?;
        self.sync()
    }
}

impl Drop for GpuProvider {
    fn drop(&mut self) {
        if !self.finalized {
            // Finalising is collective: a drop (at different times on different ranks) must
            // not start it. The process exit releases the library's resources.
            tracing::warn!(
                backend = self.backend.name(),
                "GPU provider dropped without Context::finalize; the SHMEM library was not finalised"
            );
        }
    }
}

/// Where `cargo xtask build-shim` puts the library for `backend` under `target_dir`.
pub fn default_library(target_dir: &Path, backend: Backend) -> PathBuf {
    target_dir
        .join("shim")
        .join(backend.name())
        .join("lib")
        .join(backend.library_name())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(library: PathBuf) -> GpuConfig {
        GpuConfig {
            backend: Backend::Nvshmem,
            library,
            identity: RankIdentity::from_vars(|_| None).unwrap(),
            rendezvous: std::env::temp_dir(),
            timeout: Duration::from_secs(5),
            heap_bytes: 0,
            device: None,
        }
    }

    #[test]
    fn a_missing_library_is_unavailable_with_the_fix() {
        let err = GpuProvider::new(config("/nonexistent/libsymmem_shim_nvshmem.so".into()))
            .err()
            .expect("no library here");
        let text = err.to_string();
        assert!(matches!(err, GpuError::Unavailable { .. }));
        assert!(text.contains("no shim library at /nonexistent"), "{text}");
        assert!(
            text.contains("cargo xtask build-shim --backend nvshmem"),
            "{text}"
        );
    }

    #[test]
    fn a_library_that_is_not_a_shim_is_unavailable() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("libsymmem_shim_nvshmem.so");
        std::fs::write(&fake, b"not an ELF file").unwrap();
        let text = GpuProvider::new(config(fake))
            .err()
            .expect("not loadable")
            .to_string();
        assert!(
            text.contains("loading") && text.contains("unavailable"),
            "{text}"
        );
    }
}

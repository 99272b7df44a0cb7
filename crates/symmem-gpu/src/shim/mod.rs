//! All of symmem-gpu's FFI, in three layers as cudarc does it:
//!
//! - `symmem_shim_sys` (generated bindings): the raw C ABI;
//! - this module: every call of it, once, as an `unsafe fn` with its `# Safety` contract or as a
//!   safe function where the call has none, each status turned into a [`ShimError`] here;
//! - [`Gpu`] (`gpu.rs`): one provider's symmetric allocations, device tables and launches,
//!   validated so that no launch can reach memory outside a live allocation of a reachable PE.
//!   It is safe to call, and the provider and the bench use nothing else.
//!
//! Device buffers ([`DeviceBuffer`]) free themselves when dropped. Symmetric memory never does:
//! freeing it is collective, so [`Gpu::free`] is an explicit call.

mod buffer;
mod gpu;
mod watchdog;

use std::ffi::{CStr, c_int, c_void};
use std::mem::ManuallyDrop;
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use symmem::ProviderKind;
use symmem_shim_sys as sys;

pub(crate) use buffer::DeviceBuffer;
pub use gpu::{ExportedTable, Gpu, GpuId, Team};

/// The caller's promise that the process environment may be written now, which starting a
/// [`GpuProvider`](crate::GpuProvider) needs: the SHMEM library reads its settings from
/// environment variables once, and the shim sets them (C `setenv`) just before. Writing the
/// environment while another thread reads or writes it is undefined behaviour, in C as for
/// [`std::env::set_var`]; Rust cannot check it, so this token carries the promise to the one
/// place that writes.
#[derive(Debug)]
pub struct EnvironmentAccess {
    _promise: (),
}

impl EnvironmentAccess {
    /// # Safety
    ///
    /// Until the `GpuProvider::new` that takes the token returns, no other thread of this
    /// process reads or writes the environment (`getenv`, `setenv`, `std::env::var`, a child
    /// process being spawned, ...). Calling it in `main` before any other thread starts is
    /// enough.
    pub unsafe fn promise() -> Self {
        Self { _promise: () }
    }

    /// For this crate's unit tests, whose providers fail before anything writes the
    /// environment (no library, not a shim, not a GPU kind).
    #[cfg(test)]
    pub(crate) fn before_configure_in_tests() -> Self {
        Self { _promise: () }
    }
}

/// A failed status of the shim, as the header names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// `SYMMEM_SHIM_ERR_BACKEND`: the SHMEM library reported a failure.
    Backend,
    /// `SYMMEM_SHIM_ERR_INVALID`: an argument was refused.
    Invalid,
    /// `SYMMEM_SHIM_ERR_DEVICE`: the GPU runtime reported a failure.
    Device,
    /// `SYMMEM_SHIM_ERR_STATE`: called in the wrong state (before init, twice, after finalize).
    State,
    /// A status this build does not know (a shim of another ABI would be refused at load).
    Unknown(i32),
}

impl Status {
    /// `None` for `SYMMEM_SHIM_OK`, else the failure `code` stands for.
    pub fn from_code(code: c_int) -> Option<Self> {
        match code {
            sys::symmem_shim_status_SYMMEM_SHIM_OK => None,
            sys::symmem_shim_status_SYMMEM_SHIM_ERR_BACKEND => Some(Self::Backend),
            sys::symmem_shim_status_SYMMEM_SHIM_ERR_INVALID => Some(Self::Invalid),
            sys::symmem_shim_status_SYMMEM_SHIM_ERR_DEVICE => Some(Self::Device),
            sys::symmem_shim_status_SYMMEM_SHIM_ERR_STATE => Some(Self::State),
            other => Some(Self::Unknown(other)),
        }
    }

    /// The status code of the C ABI.
    pub fn code(self) -> i32 {
        match self {
            Self::Backend => sys::symmem_shim_status_SYMMEM_SHIM_ERR_BACKEND,
            Self::Invalid => sys::symmem_shim_status_SYMMEM_SHIM_ERR_INVALID,
            Self::Device => sys::symmem_shim_status_SYMMEM_SHIM_ERR_DEVICE,
            Self::State => sys::symmem_shim_status_SYMMEM_SHIM_ERR_STATE,
            Self::Unknown(code) => code,
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self {
            Self::Backend => "SHMEM library error",
            Self::Invalid => "invalid argument",
            Self::Device => "GPU runtime error",
            Self::State => "wrong state",
            Self::Unknown(_) => "unknown status",
        };
        write!(f, "{what}, status {}", self.code())
    }
}

/// What this layer reports: a shim call that failed, a library it cannot load, or a launch it
/// refused before the shim saw it. The provider turns the load failures into its own errors,
/// with the build to run (`GpuError::Unavailable`, `GpuError::WrongLibrary`).
#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    /// A call returned a failed status: the call, its status and the shim's own description
    /// (`symmem_shim_last_error`), which names the fix where there is one.
    #[error("{backend} {call} failed ({status}): {message}")]
    Call {
        backend: ProviderKind,
        call: &'static str,
        status: Status,
        message: String,
    },
    /// No file where the shim library was expected.
    #[error("no shim library at {}", path.display())]
    NotFound {
        backend: ProviderKind,
        path: PathBuf,
    },
    /// The file is not a loadable shim library (not a library, a symbol missing, ...).
    #[error("loading {}: {reason}", path.display())]
    Load {
        backend: ProviderKind,
        path: PathBuf,
        reason: String,
    },
    /// A shim of another ABI version or for the other backend.
    #[error(
        "{} speaks shim ABI {found} ({backend_found}), this build needs ABI {expected} \
         ({backend})",
        path.display()
    )]
    WrongAbi {
        backend: ProviderKind,
        path: PathBuf,
        found: i32,
        expected: i32,
        backend_found: String,
    },
    #[error(
        "no device table for an allocation at {base:#x}: use a table returned by this \
         context's allocate (and not freed)"
    )]
    NoDeviceTable { backend: ProviderKind, base: u64 },
    #[error(
        "no live symmetric allocation at {addr:#x} in this context: free only what this \
         context's allocate returned, once"
    )]
    NoAllocation { backend: ProviderKind, addr: u64 },
}

impl ShimError {
    /// The provider whose shim reported it.
    pub fn backend(&self) -> ProviderKind {
        match self {
            Self::Call { backend, .. }
            | Self::NotFound { backend, .. }
            | Self::Load { backend, .. }
            | Self::WrongAbi { backend, .. }
            | Self::NoDeviceTable { backend, .. }
            | Self::NoAllocation { backend, .. } => *backend,
        }
    }
}

/// The loaded shim library. Shared (`Rc`) by everything that calls it: providers, their
/// [`Gpu`]s and device buffers. Never unloaded: the SHMEM library under it may still run
/// threads at exit.
pub struct Shim {
    raw: ManuallyDrop<sys::SymmemShim>,
    backend: ProviderKind,
    /// Bounds the library's collectives, once [`watch_collectives`](Self::watch_collectives).
    watchdog: std::cell::OnceCell<watchdog::Watchdog>,
}

impl std::fmt::Debug for Shim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shim")
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

/// The one unique id a SHMEM library's PEs meet with.
pub(crate) struct UniqueId(pub Vec<u8>);

impl Shim {
    /// Loads the shim at `path` and checks that it speaks this build's ABI for `backend`.
    pub(crate) fn load(path: &Path, backend: ProviderKind) -> Result<Rc<Self>, ShimError> {
        if !path.is_file() {
            return Err(ShimError::NotFound {
                backend,
                path: path.to_path_buf(),
            });
        }
        // SAFETY: loading runs the library's initialisers. `path` is the library configured as
        // the symmem shim (`SYMMEM_SHIM_LIB` or the build's output), whose only initialisers are
        // its GPU runtime's; `SymmemShim::new` then resolves every symbol of the header with
        // the header's signatures, and the ABI check below refuses a shim of another version
        // before any other call.
        let raw = unsafe { sys::SymmemShim::new(path) }.map_err(|e| ShimError::Load {
            backend,
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        let this = Self {
            raw: ManuallyDrop::new(raw),
            backend,
            watchdog: std::cell::OnceCell::new(),
        };
        // SAFETY: both take no arguments; `symmem_shim_backend` returns a static
        // NUL-terminated string (every ABI version does).
        let (abi, found) = unsafe {
            let name = CStr::from_ptr(this.raw.symmem_shim_backend())
                .to_string_lossy()
                .into_owned();
            (this.raw.symmem_shim_abi_version(), name)
        };
        let expected = sys::SYMMEM_SHIM_ABI_VERSION as i32;
        if abi != expected || found != backend.name() {
            return Err(ShimError::WrongAbi {
                backend,
                path: path.to_path_buf(),
                found: abi,
                expected,
                backend_found: found,
            });
        }
        Ok(Rc::new(this))
    }

    pub fn backend(&self) -> ProviderKind {
        self.backend
    }

    /// `Ok` for `SYMMEM_SHIM_OK`, else the error with the shim's description.
    fn status(&self, call: &'static str, code: c_int) -> Result<(), ShimError> {
        let Some(status) = Status::from_code(code) else {
            return Ok(());
        };
        // SAFETY: the shim returns a NUL-terminated per-thread buffer, valid until the next
        // call on this thread; it is copied out at once.
        let message = unsafe { CStr::from_ptr(self.raw.symmem_shim_last_error()) }
            .to_string_lossy()
            .into_owned();
        Err(ShimError::Call {
            backend: self.backend,
            call,
            status,
            message,
        })
    }

    // ---- devices ------------------------------------------------------------------------

    pub(crate) fn device_count(&self) -> Result<i32, ShimError> {
        let mut count: c_int = 0;
        // SAFETY: out-pointer to a live local.
        let code = unsafe { self.raw.symmem_shim_device_count(&mut count) };
        self.status("device_count", code).map(|()| count)
    }

    pub(crate) fn set_device(&self, device: i32) -> Result<(), ShimError> {
        // SAFETY: no pointers; the runtime refuses a bad index with a status.
        let code = unsafe { self.raw.symmem_shim_set_device(device) };
        self.status("set_device", code)
    }

    /// PCI bus id of the selected GPU.
    pub(crate) fn device_bus_id(&self) -> Result<String, ShimError> {
        let mut out = [0u8; 64];
        // SAFETY: `out` is a live buffer of the length passed.
        let code = unsafe {
            self.raw
                .symmem_shim_device_bus_id(out.as_mut_ptr().cast(), out.len())
        };
        self.status("device_bus_id", code)?;
        let text = CStr::from_bytes_until_nul(&out).map_or_else(
            |_| String::from_utf8_lossy(&out).into_owned(),
            |c| c.to_string_lossy().into_owned(),
        );
        Ok(text)
    }

    // ---- bootstrap and lifetime ---------------------------------------------------------

    /// From now on, a collective of the library (init, finalize, malloc, free, barrier) that
    /// does not return within `timeout` ends the process naming the call (see `watchdog.rs`).
    /// Call it after [`configure`](Self::configure): it starts a thread.
    pub(crate) fn watch_collectives(&self, timeout: std::time::Duration) {
        self.watchdog
            .get_or_init(|| watchdog::Watchdog::start(self.backend, timeout));
    }

    /// Runs the library's collective `call` under the watchdog, if one watches.
    fn collective(&self, call: &'static str, f: impl FnOnce() -> c_int) -> Result<(), ShimError> {
        let code = match self.watchdog.get() {
            Some(dog) => dog.guard(call, f),
            None => f(),
        };
        self.status(call, code)
    }

    /// Sets the library's environment variables (heap size, interface, no multicast).
    pub(crate) fn configure(
        &self,
        _access: EnvironmentAccess,
        heap_bytes: Option<NonZeroU64>,
        single_node: bool,
    ) -> Result<(), ShimError> {
        // The C ABI's "keep the library's default" is 0, which no Option<NonZeroU64> holds
        // otherwise; a heap beyond the address space saturates (the library refuses it).
        let heap_bytes = heap_bytes.map_or(0, |h| usize::try_from(h.get()).unwrap_or(usize::MAX));
        // SAFETY: no pointers. It writes environment variables: `_access` is the caller's
        // promise (EnvironmentAccess::promise) that no other thread touches the environment.
        let code = unsafe {
            self.raw
                .symmem_shim_configure(heap_bytes, c_int::from(single_node))
        };
        self.status("configure", code)
    }

    /// Rank 0's half: a fresh unique id.
    pub(crate) fn unique_id(&self) -> Result<UniqueId, ShimError> {
        let mut id = vec![0u8; self.unique_id_size()?];
        // SAFETY: `id` is a live buffer of the size the shim asked for.
        let code = unsafe {
            self.raw
                .symmem_shim_get_unique_id(id.as_mut_ptr(), id.len())
        };
        self.status("get_unique_id", code).map(|()| UniqueId(id))
    }

    pub(crate) fn unique_id_size(&self) -> Result<usize, ShimError> {
        let mut size = 0usize;
        // SAFETY: out-pointer to a live local.
        let code = unsafe { self.raw.symmem_shim_unique_id_size(&mut size) };
        self.status("unique_id_size", code).map(|()| size)
    }

    /// Collective: initialises the SHMEM library as PE `rank` of `n_pes`.
    pub(crate) fn init(&self, rank: usize, n_pes: usize, id: &UniqueId) -> Result<(), ShimError> {
        let (rank, n_pes) = (to_c_int(rank), to_c_int(n_pes));
        // SAFETY: `id` is a live buffer of the length passed (the shim checks the size).
        self.collective("init", || unsafe {
            self.raw
                .symmem_shim_init(rank, n_pes, id.0.as_ptr(), id.0.len())
        })
    }

    /// Collective: finalises the SHMEM library. Symmetric addresses are dangling after it: the
    /// provider's lifecycle calls it once, when no [`Gpu`] over this shim has live allocations
    /// (every later launch fails its validation, or the shim's state check).
    pub(crate) fn finalize(&self) -> Result<(), ShimError> {
        // SAFETY: no pointers; a second call is refused by the shim with a status.
        self.collective("finalize", || unsafe { self.raw.symmem_shim_finalize() })
    }

    // ---- symmetric memory (collective) --------------------------------------------------

    /// Collective: `bytes` of symmetric memory; its local address.
    pub(crate) fn malloc(&self, bytes: u64) -> Result<u64, ShimError> {
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: out-pointer to a live local.
        self.collective("malloc", || unsafe {
            self.raw.symmem_shim_malloc(to_usize(bytes), &mut ptr)
        })?;
        Ok(ptr as u64)
    }

    /// Collective: frees a symmetric allocation (after draining the shim's stream).
    ///
    /// # Safety
    /// `addr` is the address [`Shim::malloc`] returned for an allocation not freed since, and
    /// nothing uses it afterwards (no device table or staging refers into it).
    pub(crate) unsafe fn free(&self, addr: u64) -> Result<(), ShimError> {
        // SAFETY: the caller's contract.
        self.collective("free", || unsafe {
            self.raw.symmem_shim_free(addr as *mut c_void)
        })
    }

    /// This process's address of `pe`'s copy of `addr`, or `None` when the library cannot reach
    /// `pe` by load/store.
    ///
    /// # Safety
    /// `addr` lies inside a live symmetric allocation of this library.
    pub(crate) unsafe fn ptr(&self, addr: u64, pe: usize) -> Result<Option<u64>, ShimError> {
        let mut out: *mut c_void = std::ptr::null_mut();
        // SAFETY: out-pointer to a live local; `addr` per the caller's contract; the shim checks
        // the PE.
        let code = unsafe {
            self.raw
                .symmem_shim_ptr(addr as *const c_void, to_c_int(pe), &mut out)
        };
        self.status("ptr", code)
            .map(|()| (!out.is_null()).then_some(out as u64))
    }

    /// Collective: drains the stream, then the library's barrier.
    pub(crate) fn barrier_all(&self) -> Result<(), ShimError> {
        // SAFETY: no pointers.
        self.collective("barrier_all", || unsafe {
            self.raw.symmem_shim_barrier_all()
        })
    }

    // ---- plain device memory and copies -------------------------------------------------

    pub(crate) fn device_alloc(&self, bytes: usize) -> Result<u64, ShimError> {
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: out-pointer to a live local.
        let code = unsafe { self.raw.symmem_shim_device_alloc(bytes, &mut ptr) };
        self.status("device_alloc", code).map(|()| ptr as u64)
    }

    /// # Safety
    /// `ptr` came from [`Shim::device_alloc`], is not freed yet and is not used afterwards (the
    /// runtime's free waits for queued work that uses it).
    pub(crate) unsafe fn device_free(&self, ptr: u64) -> Result<(), ShimError> {
        // SAFETY: the caller's contract.
        let code = unsafe { self.raw.symmem_shim_device_free(ptr as *mut c_void) };
        self.status("device_free", code)
    }

    /// Queues a copy of `src` to device memory at `dst`; `src` may be reused on return.
    ///
    /// # Safety
    /// `[dst, dst + src.len())` is device memory of this process that no running kernel uses.
    pub(crate) unsafe fn copy_to_device_async(
        &self,
        dst: u64,
        src: &[u8],
    ) -> Result<(), ShimError> {
        // SAFETY: `src` is live for its length; `dst` per the caller's contract.
        let code = unsafe {
            self.raw.symmem_shim_copy_to_device_async(
                dst as *mut c_void,
                src.as_ptr().cast(),
                src.len(),
            )
        };
        self.status("copy_to_device_async", code)
    }

    /// Copies device memory at `src` into `dst`, after the work queued before it.
    ///
    /// # Safety
    /// `[src, src + dst.len())` is device memory of this process (or mapped into it).
    pub(crate) unsafe fn copy_to_host(&self, dst: &mut [u8], src: u64) -> Result<(), ShimError> {
        // SAFETY: `dst` is live and writable for its length; `src` per the caller's contract.
        let code = unsafe {
            self.raw.symmem_shim_copy_to_host(
                dst.as_mut_ptr().cast(),
                src as *const c_void,
                dst.len(),
            )
        };
        self.status("copy_to_host", code)
    }

    /// Queues the runtime's device-to-device copy.
    ///
    /// # Safety
    /// `[src, src + bytes)` and `[dst, dst + bytes)` are device memory reachable from this
    /// process's GPU.
    pub(crate) unsafe fn copy_device_async(
        &self,
        dst: u64,
        src: u64,
        bytes: u64,
    ) -> Result<(), ShimError> {
        // SAFETY: the caller's contract.
        let code = unsafe {
            self.raw.symmem_shim_copy_device_async(
                dst as *mut c_void,
                src as *const c_void,
                to_usize(bytes),
            )
        };
        self.status("copy_device_async", code)
    }

    /// Queues the runtime's peer copy into the GPU with PCI bus id `dst_bus_id`.
    ///
    /// # Safety
    /// `[src, src + bytes)` is device memory of this process's GPU; `[dst, dst + bytes)` is this
    /// process's address of memory on the GPU `dst_bus_id` names.
    pub(crate) unsafe fn copy_peer_async(
        &self,
        dst: u64,
        dst_bus_id: &str,
        src: u64,
        bytes: u64,
    ) -> Result<(), ShimError> {
        let bus = std::ffi::CString::new(dst_bus_id).map_err(|_| ShimError::Call {
            backend: self.backend,
            call: "copy_peer_async",
            status: Status::Invalid,
            message: format!("bus id {dst_bus_id:?} holds a NUL byte"),
        })?;
        // SAFETY: `bus` is a live NUL-terminated string; the ranges per the caller's contract.
        let code = unsafe {
            self.raw.symmem_shim_copy_peer_async(
                dst as *mut c_void,
                bus.as_ptr(),
                src as *const c_void,
                to_usize(bytes),
            )
        };
        self.status("copy_peer_async", code)
    }

    /// Waits for everything queued on the shim's stream.
    pub(crate) fn synchronize(&self) -> Result<(), ShimError> {
        // SAFETY: no pointers.
        let code = unsafe { self.raw.symmem_shim_synchronize() };
        self.status("synchronize", code)
    }

    /// Waits for everything this process queued on the selected GPU, on every stream of its
    /// primary context (the frameworks' streams as well as the shim's).
    pub(crate) fn device_synchronize(&self) -> Result<(), ShimError> {
        // SAFETY: no pointers.
        let code = unsafe { self.raw.symmem_shim_device_synchronize() };
        self.status("device_synchronize", code)
    }

    /// Free and total memory of the selected GPU, in bytes (device-wide).
    pub(crate) fn device_memory(&self) -> Result<(u64, u64), ShimError> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: out-pointers to live locals.
        let code = unsafe { self.raw.symmem_shim_device_memory(&mut free, &mut total) };
        self.status("device_memory", code)
            .map(|()| (free as u64, total as u64))
    }

    // ---- device-side timing -------------------------------------------------------------

    pub(crate) fn time_start(&self) -> Result<(), ShimError> {
        // SAFETY: no pointers.
        let code = unsafe { self.raw.symmem_shim_time_start() };
        self.status("time_start", code)
    }

    /// GPU time since [`Shim::time_start`], after waiting for the work queued in between.
    pub(crate) fn time_stop(&self) -> Result<std::time::Duration, ShimError> {
        let mut ms: f32 = 0.0;
        // SAFETY: out-pointer to a live local.
        let code = unsafe { self.raw.symmem_shim_time_stop(&mut ms) };
        self.status("time_stop", code)?;
        Ok(std::time::Duration::from_secs_f64(
            f64::from(ms.max(0.0)) / 1e3,
        ))
    }

    // ---- translated kernels (asynchronous) ----------------------------------------------

    /// # Safety
    /// `team` is valid (see [`Team`]); `[dst, dst + 8 * count)` translated to `to` is device
    /// memory of `to`'s allocation, 8-byte aligned.
    pub(crate) unsafe fn fill_u64(
        &self,
        team: &Team<'_>,
        to: usize,
        dst: u64,
        value: u64,
        count: u64,
    ) -> Result<(), ShimError> {
        // SAFETY: the caller's contract.
        let code = unsafe {
            self.raw.symmem_shim_fill_u64(
                team.raw(),
                to_c_int(to),
                dst as *mut u64,
                value,
                to_usize(count),
            )
        };
        self.status("fill_u64", code)
    }

    /// # Safety
    /// As [`Shim::fill_u64`]; `[values, values + 8 * count)` is device memory of this process.
    pub(crate) unsafe fn store_u64(
        &self,
        team: &Team<'_>,
        to: usize,
        dst: u64,
        values: u64,
        count: usize,
    ) -> Result<(), ShimError> {
        // SAFETY: the caller's contract.
        let code = unsafe {
            self.raw.symmem_shim_store_u64(
                team.raw(),
                to_c_int(to),
                dst as *mut u64,
                values as *const u64,
                count,
            )
        };
        self.status("store_u64", code)
    }

    /// # Safety
    /// `team` is valid; `[src, src + 8 * count)` translated to `src_pe` is device memory of
    /// `src_pe`'s allocation, 8-byte aligned; `[out, out + 8 * count)` is device memory of
    /// this process.
    pub(crate) unsafe fn load_u64(
        &self,
        team: &Team<'_>,
        src_pe: usize,
        src: u64,
        out: u64,
        count: usize,
    ) -> Result<(), ShimError> {
        // SAFETY: the caller's contract.
        let code = unsafe {
            self.raw.symmem_shim_load_u64(
                team.raw(),
                to_c_int(src_pe),
                src as *const u64,
                out as *mut u64,
                count,
            )
        };
        self.status("load_u64", code)
    }

    /// # Safety
    /// `team` is valid; `[src, src + bytes)` translated to `src_pe` and `[dst, dst + bytes)`
    /// translated to `dst_pe` are device memory of those PEs' allocations (with an
    /// untranslated team: as they are, reachable from this process's GPU).
    #[allow(clippy::too_many_arguments)] // the kernel's own arguments
    pub(crate) unsafe fn copy(
        &self,
        team: &Team<'_>,
        src: u64,
        src_pe: usize,
        dst: u64,
        dst_pe: usize,
        bytes: u64,
    ) -> Result<(), ShimError> {
        // SAFETY: the caller's contract.
        let code = unsafe {
            self.raw.symmem_shim_copy(
                team.raw(),
                src as *const c_void,
                to_c_int(src_pe),
                dst as *mut c_void,
                to_c_int(dst_pe),
                to_usize(bytes),
            )
        };
        self.status("copy", code)
    }

    /// # Safety
    /// `team` is valid; the u64 at `dst` translated to `to` is device memory of `to`'s
    /// allocation, 8-byte aligned.
    pub(crate) unsafe fn atomic_add_u64(
        &self,
        team: &Team<'_>,
        to: usize,
        dst: u64,
        value: u64,
    ) -> Result<(), ShimError> {
        // SAFETY: the caller's contract.
        let code = unsafe {
            self.raw
                .symmem_shim_atomic_add_u64(team.raw(), to_c_int(to), dst as *mut u64, value, 1)
        };
        self.status("atomic_add_u64", code)
    }
}

/// PEs and ranks are below `symmem::MAX`-sized jobs; a value past `c_int` is refused by the
/// shim's own range checks (it becomes -1).
fn to_c_int(v: usize) -> c_int {
    c_int::try_from(v).unwrap_or(-1)
}

/// Byte counts were validated against live allocations, which fit the address space.
fn to_usize(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_of_the_header_maps_to_its_name_and_back() {
        assert_eq!(
            Status::from_code(sys::symmem_shim_status_SYMMEM_SHIM_OK),
            None
        );
        for (code, status) in [
            (
                sys::symmem_shim_status_SYMMEM_SHIM_ERR_BACKEND,
                Status::Backend,
            ),
            (
                sys::symmem_shim_status_SYMMEM_SHIM_ERR_INVALID,
                Status::Invalid,
            ),
            (
                sys::symmem_shim_status_SYMMEM_SHIM_ERR_DEVICE,
                Status::Device,
            ),
            (sys::symmem_shim_status_SYMMEM_SHIM_ERR_STATE, Status::State),
        ] {
            assert_eq!(Status::from_code(code), Some(status));
            assert_eq!(status.code(), code);
        }
        assert_eq!(Status::from_code(-99), Some(Status::Unknown(-99)));
        assert_eq!(Status::Unknown(-99).code(), -99);
    }

    #[test]
    fn a_shim_error_names_the_call_the_status_and_the_shims_message() {
        let e = ShimError::Call {
            backend: ProviderKind::Nvshmem,
            call: "malloc",
            status: Status::Backend,
            message: "nvshmem_malloc(8) failed: raise the heap size".into(),
        };
        let text = e.to_string();
        assert!(text.starts_with("nvshmem malloc failed ("), "{text}");
        assert!(text.contains("status -1"), "{text}");
        assert!(text.ends_with("raise the heap size"), "{text}");
        assert!(matches!(
            symmem::Error::from(e),
            symmem::Error::Provider {
                provider: ProviderKind::Nvshmem,
                ..
            }
        ));
    }
}

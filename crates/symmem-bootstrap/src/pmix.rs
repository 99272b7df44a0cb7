//! The PMIx client, as the PMIx engine uses it: one rank's connection to the PMIx server its
//! launcher started (`srun --mpi=pmix`, Open MPI's `mpirun`), and the all-gather every
//! collective rides on: `PMIx_Put` of this rank's contribution under a key of its own,
//! `PMIx_Commit`, `PMIx_Fence` collecting the data (bounded by a wait of our own, the server's
//! timeout attribute not being honoured by every server), then `PMIx_Get` of every rank's key.
//!
//! The library is opened at run time (`symmem-pmix-sys`), once per process; `PMIx_Init` is
//! reference counted by the library, so each engine initialises and finalises its own client.

use crate::BootstrapError;
use std::ffi::{CStr, CString, c_char, c_void};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;
use symmem_pmix_sys as sys;

/// The library, opened once per process (a failure is remembered: it will not change).
fn library() -> Result<&'static sys::Pmix, BootstrapError> {
    static LIBRARY: OnceLock<Result<sys::Pmix, Unavailable>> = OnceLock::new();
    LIBRARY
        .get_or_init(|| open(sys::LIBRARY))
        .as_ref()
        .map_err(Unavailable::error)
}

/// Why the library did not open, kept for every later try.
struct Unavailable {
    cause: String,
    asked: bool,
    container: Option<&'static str>,
}

impl Unavailable {
    fn error(&self) -> BootstrapError {
        BootstrapError::PmixUnavailable {
            cause: self.cause.clone(),
            asked: self.asked,
            container: self.container,
        }
    }
}

fn open(file: &str) -> Result<sys::Pmix, Unavailable> {
    // SAFETY: opening the PMIx client library runs its initialisers, which only set up its own
    // state; every symbol is resolved and typed by the bindings.
    unsafe { sys::Pmix::new(file) }.map_err(|e| Unavailable {
        cause: e.to_string(),
        // Set and not empty (empty counts as unset): PMIx was asked for by name.
        asked: std::env::var_os(symmem::settings::BOOTSTRAP.name).is_some_and(|v| !v.is_empty()),
        container: crate::error::container_engine(),
    })
}

/// This rank's PMIx client; finalised when dropped.
pub(crate) struct Client {
    lib: &'static sys::Pmix,
    me: sys::pmix_proc_t,
}

// SAFETY: the client holds plain data (its process name) and the library's function table;
// the PMIx client library is thread safe (its own progress thread serves every call).
unsafe impl Send for Client {}

impl Client {
    /// Connects to the launcher's PMIx server (`PMIx_Init`).
    pub(crate) fn init() -> Result<Self, BootstrapError> {
        let lib = library()?;
        // SAFETY: pmix_proc_t is plain data (a name array and a number): all zero is valid.
        let mut me: sys::pmix_proc_t = unsafe { std::mem::zeroed() };
        // SAFETY: `me` is a valid out-parameter; no info array is passed.
        let status = unsafe { (lib.PMIx_Init)(&mut me, std::ptr::null_mut(), 0) };
        check(lib, "PMIx_Init", status)?;
        Ok(Self { lib, me })
    }

    /// This process's rank in its PMIx namespace.
    pub(crate) fn rank(&self) -> usize {
        self.me.rank as usize
    }

    fn proc_of(&self, rank: usize) -> sys::pmix_proc_t {
        let mut p = self.me;
        p.rank = rank as sys::pmix_rank_t;
        p
    }

    /// The job's size (`PMIX_JOB_SIZE` of the namespace).
    pub(crate) fn job_size(&self) -> Result<usize, BootstrapError> {
        let wildcard = self.proc_of(sys::PMIX_RANK_WILDCARD as usize);
        self.number(&wildcard, sys::PMIX_JOB_SIZE, "PMIX_JOB_SIZE")
    }

    /// This process's place in its job as the server tells it: rank, job size, local rank
    /// and local size, its namespace naming the job.
    pub(crate) fn identity(&self) -> Result<symmem::RankIdentity, BootstrapError> {
        let wildcard = self.proc_of(sys::PMIX_RANK_WILDCARD as usize);
        let local_size = self.number(&wildcard, sys::PMIX_LOCAL_SIZE, "PMIX_LOCAL_SIZE")?;
        let local_rank = self.number(&self.me, sys::PMIX_LOCAL_RANK, "PMIX_LOCAL_RANK")?;
        // SAFETY: PMIx_Init filled the name with a NUL-terminated string (the array is one
        // longer than the longest name).
        let namespace = unsafe { CStr::from_ptr(self.me.nspace.as_ptr()) }.to_string_lossy();
        symmem::RankIdentity::from_pmix(
            self.rank(),
            self.job_size()?,
            local_rank,
            local_size,
            &namespace,
        )
        .map_err(BootstrapError::from)
    }

    fn number(
        &self,
        proc_: &sys::pmix_proc_t,
        key: &[u8],
        name: &str,
    ) -> Result<usize, BootstrapError> {
        let value = self.get(proc_, key, name)?;
        value
            .number()
            .map(|n| n as usize)
            .ok_or_else(|| BootstrapError::PmixAnswer {
                call: format!("PMIx_Get({name})"),
                what: "a value that is not a number".into(),
            })
    }

    /// The node this rank runs on, as the launcher numbers them (`PMIX_NODEID`); `None` when
    /// the server does not say.
    pub(crate) fn node_id(&self) -> Option<u64> {
        let value = self.get(&self.me, sys::PMIX_NODEID, "PMIX_NODEID").ok()?;
        value.number()
    }

    /// Publishes `bytes` under `key` for every rank of the job and commits it.
    pub(crate) fn put(&self, key: &str, bytes: &[u8]) -> Result<(), BootstrapError> {
        let key = c_key(key)?;
        // SAFETY: pmix_value_t is plain data; all zero is a valid undefined value.
        let mut value: sys::pmix_value_t = unsafe { std::mem::zeroed() };
        value.type_ = sys::PMIX_BYTE_OBJECT as sys::pmix_data_type_t;
        value.data.bo = sys::pmix_byte_object_t {
            bytes: bytes.as_ptr() as *mut c_char,
            size: bytes.len(),
        };
        // SAFETY: PMIx_Put copies the value (documented: the caller keeps ownership); key and
        // value outlive the call.
        let status = unsafe {
            (self.lib.PMIx_Put)(
                sys::PMIX_GLOBAL as sys::pmix_scope_t,
                key.as_ptr(),
                &mut value,
            )
        };
        check(self.lib, "PMIx_Put", status)?;
        // SAFETY: no arguments; pushes what was put to the local server.
        let status = unsafe { (self.lib.PMIx_Commit)() };
        check(self.lib, "PMIx_Commit", status)
    }

    /// Waits for every rank of the namespace at a fence that collects the data put before it;
    /// `Ok(None)` when it did not complete within `wait`.
    pub(crate) fn fence(&self, wait: Duration) -> Result<Option<()>, BootstrapError> {
        let mut infos: [sys::pmix_info_t; 2] =
            // SAFETY: pmix_info_t is plain data; PMIx_Info_load fills both below.
            unsafe { std::mem::zeroed() };
        let collect = true;
        let seconds: i32 = i32::try_from(wait.as_secs().max(1)).unwrap_or(i32::MAX);
        // SAFETY: each info is valid storage, the keys are NUL-terminated, and the data
        // pointers point at values of the named types (bool, int), which PMIx copies.
        let loaded = unsafe {
            [
                (self.lib.PMIx_Info_load)(
                    &mut infos[0],
                    sys::PMIX_COLLECT_DATA.as_ptr().cast(),
                    (&collect as *const bool).cast(),
                    sys::PMIX_BOOL as sys::pmix_data_type_t,
                ),
                (self.lib.PMIx_Info_load)(
                    &mut infos[1],
                    sys::PMIX_TIMEOUT.as_ptr().cast(),
                    (&seconds as *const i32).cast(),
                    sys::PMIX_INT as sys::pmix_data_type_t,
                ),
            ]
        };
        for status in loaded {
            check(self.lib, "PMIx_Info_load", status)?;
        }
        let done = Arc::new(FenceDone::default());
        let cbdata = Arc::into_raw(Arc::clone(&done)) as *mut c_void;
        // The whole namespace: one proc, the wildcard rank.
        let all = self.proc_of(sys::PMIX_RANK_WILDCARD as usize);
        // SAFETY: procs and infos are read during the call (PMIx copies what it keeps);
        // `cbdata` is one strong count of `done`, given to `fence_done`, which takes it back.
        let status = unsafe {
            (self.lib.PMIx_Fence_nb)(
                &all,
                1,
                infos.as_ptr(),
                infos.len(),
                Some(fence_done),
                cbdata,
            )
        };
        if status != sys::PMIX_SUCCESS as sys::pmix_status_t {
            // The callback will not run: take its count back.
            // SAFETY: `cbdata` came from Arc::into_raw above and was not consumed.
            drop(unsafe { Arc::from_raw(cbdata as *const FenceDone) });
            return check(self.lib, "PMIx_Fence_nb", status).map(|()| Some(()));
        }
        let guard = done.status.lock().unwrap_or_else(|e| e.into_inner());
        let (guard, _) = done
            .ready
            .wait_timeout_while(guard, wait, |s| s.is_none())
            .unwrap_or_else(|e| e.into_inner());
        match *guard {
            None => Ok(None),
            Some(s) if s == sys::PMIX_ERR_TIMEOUT => Ok(None),
            Some(s) => check(self.lib, "PMIx_Fence", s).map(|()| Some(())),
        }
    }

    /// The bytes `rank` put under `key` (after a fence that collected them).
    pub(crate) fn get_bytes(&self, rank: usize, key: &str) -> Result<Vec<u8>, BootstrapError> {
        let key_c = c_key(key)?;
        let value = self.get(&self.proc_of(rank), key_c.as_bytes_with_nul(), key)?;
        value.bytes().ok_or_else(|| BootstrapError::PmixAnswer {
            call: format!("PMIx_Get({key}) of rank {rank}"),
            what: "a value that is not bytes".into(),
        })
    }

    fn get(
        &self,
        proc_: &sys::pmix_proc_t,
        key: &[u8],
        name: &str,
    ) -> Result<Value, BootstrapError> {
        let mut out: *mut sys::pmix_value_t = std::ptr::null_mut();
        // SAFETY: `key` is NUL-terminated (a bindings constant or a CString's bytes); `out`
        // receives a value the library allocated, owned by `Value` from here on.
        let status = unsafe {
            (self.lib.PMIx_Get)(proc_, key.as_ptr().cast(), std::ptr::null(), 0, &mut out)
        };
        check(self.lib, "PMIx_Get", status).map_err(|e| match e {
            BootstrapError::Pmix { status, text, .. } => BootstrapError::Pmix {
                call: format!("PMIx_Get({name}) of rank {}", proc_.rank),
                status,
                text,
            },
            other => other,
        })?;
        if out.is_null() {
            return Err(BootstrapError::PmixAnswer {
                call: format!("PMIx_Get({name}) of rank {}", proc_.rank),
                what: "no value".into(),
            });
        }
        Ok(Value {
            lib: self.lib,
            ptr: out,
        })
    }
}

/// The client [`crate::identify`] opened to learn who this process is, kept for the engine
/// (which takes it rather than initialising PMIx again) or for the job's life: a process that
/// initialised PMIx must finalise it before it exits, or Open MPI's launcher ends the job.
static KEPT: Mutex<Option<Client>> = Mutex::new(None);

/// Keeps `client` until [`take_kept`] (see [`KEPT`]).
pub(crate) fn keep(client: Client) {
    *KEPT.lock().unwrap_or_else(|e| e.into_inner()) = Some(client);
}

/// The client [`keep`] kept, if any.
pub(crate) fn take_kept() -> Option<Client> {
    KEPT.lock().unwrap_or_else(|e| e.into_inner()).take()
}

impl Drop for Client {
    fn drop(&mut self) {
        // SAFETY: this client initialised PMIx once; no info array.
        let status = unsafe { (self.lib.PMIx_Finalize)(std::ptr::null(), 0) };
        if status != sys::PMIX_SUCCESS as sys::pmix_status_t {
            tracing::warn!(status = %error_text(self.lib, status), "PMIx_Finalize failed");
        }
    }
}

#[derive(Default)]
struct FenceDone {
    status: Mutex<Option<sys::pmix_status_t>>,
    ready: Condvar,
}

/// PMIx's completion callback of a fence (on its progress thread).
unsafe extern "C" fn fence_done(status: sys::pmix_status_t, cbdata: *mut c_void) {
    // SAFETY: `cbdata` is the strong count `fence` gave with this fence; taken back once.
    let done = unsafe { Arc::from_raw(cbdata as *const FenceDone) };
    *done.status.lock().unwrap_or_else(|e| e.into_inner()) = Some(status);
    done.ready.notify_all();
}

/// A value `PMIx_Get` returned; released (destructed and freed) when dropped.
struct Value {
    lib: &'static sys::Pmix,
    ptr: *mut sys::pmix_value_t,
}

impl Value {
    fn number(&self) -> Option<u64> {
        // SAFETY: `ptr` is a valid value from PMIx_Get; the union member read is the one its
        // type names.
        unsafe {
            let v = &*self.ptr;
            match u32::from(v.type_) {
                sys::PMIX_UINT32 => Some(u64::from(v.data.uint32)),
                sys::PMIX_UINT16 => Some(u64::from(v.data.uint16)),
                sys::PMIX_INT => u64::try_from(v.data.integer).ok(),
                _ => None,
            }
        }
    }

    fn bytes(&self) -> Option<Vec<u8>> {
        // SAFETY: as in `number`; a byte object's `bytes` holds `size` bytes (or is null when
        // empty).
        unsafe {
            let v = &*self.ptr;
            if u32::from(v.type_) != sys::PMIX_BYTE_OBJECT {
                return None;
            }
            let bo = v.data.bo;
            if bo.size == 0 || bo.bytes.is_null() {
                return Some(Vec::new());
            }
            Some(std::slice::from_raw_parts(bo.bytes as *const u8, bo.size).to_vec())
        }
    }
}

impl Drop for Value {
    fn drop(&mut self) {
        // SAFETY: PMIx_Get allocated the value with malloc (PMIX_VALUE_RELEASE's contract):
        // its contents are released by PMIx_Value_destruct, the struct by free.
        unsafe {
            (self.lib.PMIx_Value_destruct)(self.ptr);
            libc::free(self.ptr.cast());
        }
    }
}

fn c_key(key: &str) -> Result<CString, BootstrapError> {
    let bad = || BootstrapError::PmixKey {
        key: key.to_string(),
    };
    if key.len() >= sys::PMIX_MAX_KEYLEN as usize {
        return Err(bad());
    }
    CString::new(key).map_err(|_| bad())
}

fn error_text(lib: &sys::Pmix, status: sys::pmix_status_t) -> String {
    // SAFETY: PMIx_Error_string returns a static string for any status.
    let text = unsafe { (lib.PMIx_Error_string)(status) };
    if text.is_null() {
        return format!("status {status}");
    }
    // SAFETY: non-null, NUL-terminated, static.
    unsafe { CStr::from_ptr(text) }
        .to_string_lossy()
        .into_owned()
}

fn check(lib: &sys::Pmix, call: &str, status: sys::pmix_status_t) -> Result<(), BootstrapError> {
    if status == sys::PMIX_SUCCESS as sys::pmix_status_t {
        return Ok(());
    }
    Err(BootstrapError::Pmix {
        call: call.to_string(),
        status,
        text: error_text(lib, status),
    })
}

/// Whether a failed PMIx call means another process of the job is gone (rather than this one
/// misusing the library).
pub(crate) fn peer_lost(status: i32) -> bool {
    [
        sys::PMIX_ERR_PROC_ABORTED,
        sys::PMIX_ERR_PROC_ABORTED_BY_SIG,
        sys::PMIX_ERR_LOST_CONNECTION,
        sys::PMIX_ERR_UNREACH,
        sys::PMIX_ERR_JOB_TERM_WO_SYNC,
    ]
    .contains(&status)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_missing_library_names_the_package_and_the_way_out() {
        let err = super::open("libpmix-not-here.so.2")
            .err()
            .expect("no such library")
            .error();
        let text = err.to_string();
        assert!(
            matches!(err, crate::BootstrapError::PmixUnavailable { .. }),
            "{text}"
        );
        assert!(
            text.contains("libpmix2") && text.contains("libpmix-not-here.so.2"),
            "{text}"
        );
    }

    /// M11: unsetting SYMMEM_BOOTSTRAP is suggested only where it was set.
    #[test]
    fn unsetting_the_bootstrap_is_suggested_only_where_it_was_set() {
        let name = symmem::settings::BOOTSTRAP.name;
        let text = |asked| {
            crate::BootstrapError::PmixUnavailable {
                cause: "not found".into(),
                asked,
                container: None,
            }
            .to_string()
        };
        assert!(
            text(true).contains(&format!("unset {name}")),
            "{}",
            text(true)
        );
        assert!(!text(false).contains(name), "{}", text(false));
        assert!(
            text(false).ends_with("on every node of the job"),
            "{}",
            text(false)
        );
    }

    /// Inside a container the library belongs in the image: the message says so, and names
    /// the bind a site with its own PMIx would use instead.
    #[test]
    fn inside_a_container_the_image_is_named() {
        let text = crate::BootstrapError::PmixUnavailable {
            cause: "not found".into(),
            asked: false,
            container: Some("an Apptainer container"),
        }
        .to_string();
        assert!(
            text.contains("runs in an Apptainer container")
                && text.contains("in the image")
                && text.contains("bind the host's libpmix.so.2"),
            "{text}"
        );
    }
}

//! The providers a session runs on: which one `init` starts ([`provider_kind`]), how it
//! starts ([`start_session`]: through the launcher's variables, or through a meeting over a
//! torch.distributed group), the session over either ([`AnySession`], `on_session!`), and
//! what each does for the session ([`Provider`]: where an allocation's peer-bases table lives,
//! how the device is waited for).
//!
//! Who touches what: nothing here is shared between threads. [`provider_kind`] is the Python
//! thread's, before any request; everything else runs on the session thread, inside a request.
//! A new provider is a variant of `AnySession`, an arm of `on_session!`, of `start_session`
//! and of `dlpack_device_type`, and a `Provider` impl, all in this file.

use super::state::{Provider, Session, Table};
use super::{Fail, Options};
use crate::dlpack::{DLDevice, KDL_CPU, KDL_CUDA, KDL_ROCM};
use symmem::{Context, PeerTable, ProviderKind, UnknownProvider, settings};
use symmem_bootstrap::Bootstrap;
use symmem_gpu::{EnvironmentAccess, GpuConfig, GpuError, GpuProvider};
use symmem_host::{HostConfig, HostProvider};

/// Where a device table starts after the tensor's bytes (int64 entries; 256 keeps it on its
/// own cache lines and aligned for any vector load).
const TABLE_ALIGN: usize = 256;

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

/// The session over whichever provider `init` started.
pub(super) enum AnySession {
    Host(Box<Session<HostProvider>>),
    Gpu(Box<Session<GpuProvider>>),
}

/// Runs `$body` with `$s` bound to the session, whichever provider it runs on.
macro_rules! on_session {
    ($session:expr, $s:ident => $body:expr) => {
        match $session {
            AnySession::Host($s) => $body,
            AnySession::Gpu($s) => $body,
        }
    };
}
pub(super) use on_session;

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

/// Starts the session over provider `kind` (collective), on the session thread.
pub(super) fn start_session(kind: ProviderKind, options: Options) -> Result<AnySession, Fail> {
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
                device_type: dlpack_device_type(kind),
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
                device_type: dlpack_device_type(kind),
                device_id: provider.device(),
            };
            let session = Session::new(Context::new(provider), device, identity);
            AnySession::Gpu(Box::new(session))
        }
    })
}

/// The DLPack device type of `kind`'s memory: what torch and the others see the tensors on.
fn dlpack_device_type(kind: ProviderKind) -> i32 {
    match kind {
        ProviderKind::Host => KDL_CPU,
        ProviderKind::Nvshmem => KDL_CUDA,
        ProviderKind::Rocshmem => KDL_ROCM,
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
}

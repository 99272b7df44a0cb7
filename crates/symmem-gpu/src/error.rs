//! The GPU providers' errors, each with its fix, and how the shim layer's [`ShimError`]s become
//! them: a shim that cannot be loaded is [`GpuError::Unavailable`] (or
//! [`GpuError::WrongLibrary`]) with the build to run; the rest stays the shim's own.

use crate::lifecycle::LifecycleError;
use crate::shim::ShimError;
use std::path::PathBuf;
use symmem::settings::SHIM_LIB;
use symmem::{Blame, InvalidSetting, ProviderError, ProviderKind};
use symmem_bootstrap::BootstrapError;

/// The library is missing or unusable: `reason`, and how to build it.
fn unavailable(backend: ProviderKind, reason: String) -> GpuError {
    GpuError::Unavailable {
        backend,
        reason,
        fix: library_fix(backend),
    }
}

/// The shim loaded, but there is no GPU it can use: `reason`, and what it needs.
pub(crate) fn no_gpu(backend: ProviderKind, reason: String) -> GpuError {
    GpuError::Unavailable {
        backend,
        reason,
        fix: match backend {
            ProviderKind::Nvshmem => {
                gpu_and_driver("NVIDIA, driver new enough for the CUDA the shim was built with")
            }
            ProviderKind::Rocshmem => gpu_and_driver("AMD, with /dev/kfd and /dev/dri accessible"),
            // Refused as `NotGpu` before anything looks for a GPU.
            ProviderKind::Host => host_needs_no_gpu(),
        },
    }
}

fn gpu_and_driver(which: &str) -> String {
    format!("run on a machine with a GPU and its driver ({which})")
}

fn host_needs_no_gpu() -> String {
    "the host provider needs no GPU and no shim: start it with the symmem-host crate".into()
}

fn library_fix(backend: ProviderKind) -> String {
    match backend {
        ProviderKind::Nvshmem => format!(
            "build it with `cargo xtask build-shim --backend nvshmem` (or set {}), and put \
             NVSHMEM's lib folder (libnvshmem_host.so.3) on LD_LIBRARY_PATH",
            SHIM_LIB.name
        ),
        ProviderKind::Rocshmem => format!(
            "build rocSHMEM and the shim with `cargo xtask build-rocshmem --arch <gfx>` and \
             `cargo xtask build-shim --backend rocshmem` (or set {}), with ROCm's libraries on \
             LD_LIBRARY_PATH",
            SHIM_LIB.name
        ),
        // Refused as `NotGpu` before any library is loaded.
        ProviderKind::Host => host_needs_no_gpu(),
    }
}

/// Errors of the GPU providers; each names what to do.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("the {backend} provider is unavailable: {reason}; {fix}")]
    Unavailable {
        backend: ProviderKind,
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
        backend: ProviderKind,
        backend_found: String,
    },
    /// A failed shim call or a launch the shim layer refused (see [`ShimError`]).
    #[error(transparent)]
    Shim(ShimError),
    #[error(
        "rank {rank} sent start information this build cannot read: run the same symmem \
         build on every rank"
    )]
    BadPeerInfo { rank: usize },
    #[error(transparent)]
    Lifecycle(#[from] LifecycleError),
    #[error(transparent)]
    InvalidSetting(#[from] InvalidSetting),
    #[error(
        "{kind} is not a GPU provider: give the GPU provider {}, or start {kind} with its own \
         crate",
        gpu_choices()
    )]
    NotGpu { kind: ProviderKind },
    #[error(
        "rocSHMEM as `cargo xtask build-rocshmem` builds it is single-node (USE_SINGLE_NODE=ON), \
         but this job spans nodes ({evidence}): run every rank on one node, use nvshmem, or \
         point {} at a shim over a rocSHMEM built for several nodes (USE_SINGLE_NODE=OFF with \
         its MPI or GDA transport)",
        SHIM_LIB.name
    )]
    RocshmemSingleNode { evidence: String },
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    #[error(transparent)]
    RankEnv(#[from] symmem::RankEnvError),
}

impl ProviderError for GpuError {
    fn blame(&self) -> Blame {
        match self {
            Self::Bootstrap(b) => b.blame(),
            // Only ever made from what every rank sent in the finalize exchange.
            Self::Lifecycle(LifecycleError::SiblingsOpen { .. }) => Blame::EveryRank,
            _ => Blame::ThisRank,
        }
    }

    fn into_mismatch(self) -> Result<symmem::CollectiveMismatch, Self> {
        match self {
            Self::Bootstrap(b) => b.into_mismatch().map_err(Self::Bootstrap),
            other => Err(other),
        }
    }
}

/// `nvshmem or rocshmem`, for messages.
fn gpu_choices() -> String {
    let names: Vec<&str> = ProviderKind::GPU.iter().map(|k| k.name()).collect();
    names.join(" or ")
}

impl From<ShimError> for GpuError {
    fn from(e: ShimError) -> Self {
        match e {
            ShimError::NotFound { .. } | ShimError::Load { .. } => {
                unavailable(e.backend(), e.to_string())
            }
            ShimError::WrongAbi {
                backend,
                path,
                found,
                expected,
                backend_found,
            } => Self::WrongLibrary {
                path,
                found,
                expected,
                backend,
                backend_found,
            },
            other => Self::Shim(other),
        }
    }
}

impl From<ShimError> for symmem::Error {
    /// As a symmem error of the provider the shim was loaded for.
    fn from(e: ShimError) -> Self {
        symmem::Error::from_provider(e.backend(), GpuError::from(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn a_shim_that_cannot_load_is_unavailable_with_the_build_to_run() {
        for (e, reason) in [
            (
                ShimError::NotFound {
                    backend: ProviderKind::Rocshmem,
                    path: "/x/libsymmem_shim_rocshmem.so".into(),
                },
                "no shim library at /x/libsymmem_shim_rocshmem.so",
            ),
            (
                ShimError::Load {
                    backend: ProviderKind::Rocshmem,
                    path: "/x/lib.so".into(),
                    reason: "invalid ELF header".into(),
                },
                "loading /x/lib.so: invalid ELF header",
            ),
        ] {
            let e = GpuError::from(e);
            let GpuError::Unavailable {
                backend,
                reason: got,
                fix,
            } = &e
            else {
                panic!("{e:?}");
            };
            assert_eq!(*backend, ProviderKind::Rocshmem);
            assert_eq!(got, reason);
            assert!(
                fix.contains("cargo xtask build-shim --backend rocshmem"),
                "{fix}"
            );
        }
        let e = GpuError::from(ShimError::WrongAbi {
            backend: ProviderKind::Nvshmem,
            path: Path::new("/x/lib.so").into(),
            found: 1,
            expected: 2,
            backend_found: "rocshmem".into(),
        });
        assert!(
            matches!(e, GpuError::WrongLibrary { found: 1, .. }),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .contains("rebuild it with `cargo xtask build-shim --backend nvshmem`"),
            "{e}"
        );
    }

    #[test]
    fn a_refused_launch_is_this_ranks_provider_error_naming_the_fix() {
        let e = symmem::Error::from(ShimError::NoAllocation {
            backend: ProviderKind::Nvshmem,
            addr: 0x1000,
        });
        assert!(
            matches!(
                e,
                symmem::Error::Provider {
                    provider: ProviderKind::Nvshmem,
                    ..
                }
            ),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.starts_with("nvshmem: no live symmetric allocation at 0x1000"),
            "{text}"
        );
        assert!(
            text.contains("free only what this context's allocate returned"),
            "{text}"
        );
    }
}

//! What `build-shim` is asked ([`Args`]) and what it assumes where it is not told: the GPU
//! targets of each backend ([`default_targets`]), an install from its variable ([`from_env`]).

use crate::targets::GpuTargets;
use std::path::{Path, PathBuf};
use symmem::ProviderKind;

/// Build the GPU shim library for one backend.
///
/// NVSHMEM: needs nvcc (CUDA >= 12) and NVSHMEM 3.x (include/, lib/ with libnvshmem_host.so.3
/// and libnvshmem_device.a); no GPU is needed to build. The pip wheels work: at the versions
/// of pins.toml [nvshmem], `source scripts/gpu/nvshmem-sdk.sh` installs them and sets
/// CUDACXX and NVSHMEM_HOME.
/// rocSHMEM: needs ROCm (HIP's clang and CMake packages), CMake >= 3.24, and the install made by
/// `cargo xtask build-rocshmem` (found through ROCSHMEM_HOME). ROCm is --rocm-path, else
/// $ROCM_PATH, else what `hipconfig --rocmpath` says (Debian/Ubuntu: /usr), else /opt/rocm; it
/// reaches CMake as -D definitions only (never export ROCM_PATH=/usr: Debian's clang then
/// looks for its device libraries there and fails).
///
/// The library exports only the functions of symmem_shim.h. It lands in
/// target/shim/<backend>/lib/ where `cargo xtask test --provider <backend>` finds it; its path
/// is the only line on stdout. CMake's output goes to stderr and to
/// target/shim/<backend>/build/symmem-build.log (build-rocshmem's CMake driver and log).
/// A run that fails, its input checks included, leaves no library in lib/ (the previous one is
/// removed first). One run at a time per out folder: a second is refused, naming the first.
///
/// Examples:
///   NVSHMEM_HOME=.../nvidia/nvshmem cargo xtask build-shim --backend nvshmem --nvcc .../bin/nvcc
///   exports=$(cargo xtask build-rocshmem --arch gfx942) && eval "$exports"; cargo xtask build-shim --backend rocshmem --arch gfx942
///   lib=$(cargo xtask build-shim --backend rocshmem --arch gfx942,gfx90a --rocm-path /usr)
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Which SHMEM library to build against (a GPU provider).
    #[arg(long, value_parser = gpu_provider())]
    pub backend: ProviderKind,
    /// GPU architectures, comma-separated: CUDA compute capabilities (default 90) or HIP
    /// targets (default gfx942; each must be one the rocSHMEM install was built for).
    #[arg(long, value_parser = GpuTargets::parse)]
    pub arch: Option<GpuTargets>,
    /// nvcc to use (default: $CUDACXX, else nvcc on PATH, else $CUDA_HOME/bin/nvcc).
    #[arg(long, value_name = "PATH")]
    pub nvcc: Option<PathBuf>,
    /// NVSHMEM install with include/ and lib/ (default: $NVSHMEM_HOME).
    #[arg(long, value_name = "DIR")]
    pub nvshmem_home: Option<PathBuf>,
    /// rocSHMEM install prefix (default: $ROCSHMEM_HOME, as build-rocshmem prints).
    #[arg(long, value_name = "DIR")]
    pub rocshmem_home: Option<PathBuf>,
    /// The ROCm install (default: $ROCM_PATH, else `hipconfig --rocmpath`, else /opt/rocm).
    /// Given to CMake as -DROCM_PATH, -DCMAKE_HIP_COMPILER_ROCM_ROOT and on
    /// -DCMAKE_PREFIX_PATH; never exported to the compilers.
    #[arg(long, value_name = "DIR")]
    pub rocm_path: Option<PathBuf>,
    /// Where to build and install (default: target/shim/<backend>).
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}

/// Parses a GPU provider's name (`--backend`): `--help` lists exactly the providers that have
/// a shim.
fn gpu_provider() -> impl clap::builder::TypedValueParser<Value = ProviderKind> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(ProviderKind::GPU.map(ProviderKind::name))
        .map(|name| ProviderKind::from_name(&name).expect("one of the GPU providers' names"))
}

/// `given`, else the first of `vars` that is set and not empty.
pub(super) fn from_env(given: Option<&Path>, vars: &[&str]) -> Option<PathBuf> {
    given.map(Path::to_path_buf).or_else(|| {
        vars.iter()
            .find_map(|v| std::env::var_os(v).filter(|x| !x.is_empty()))
            .map(PathBuf::from)
    })
}

/// The GPU targets the shim is built for when `--arch` names none (CMakeLists.txt's
/// defaults): 90 for NVSHMEM, gfx942 for rocSHMEM; `None` for the host provider.
pub fn default_targets(backend: ProviderKind) -> Option<GpuTargets> {
    let arch = match backend {
        ProviderKind::Host => return None,
        ProviderKind::Nvshmem => "90",
        ProviderKind::Rocshmem => "gfx942",
    };
    Some(GpuTargets::parse(arch).expect("the default targets parse"))
}

//! `cargo xtask build-shim`: the GPU shim (one C ABI over NVSHMEM or rocSHMEM) as a shared
//! library that carries its own device link, built by CMake through the `cmake` crate.

use crate::project::{project_root, target_dir};
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use symmem_gpu::Backend;

/// Build the GPU shim library for one backend.
///
/// NVSHMEM: needs nvcc (CUDA >= 12) and NVSHMEM 3.x (include/, lib/ with libnvshmem_host.so.3
/// and libnvshmem_device.a); no GPU is needed to build. The pip wheels work:
///   pip install nvidia-cuda-nvcc==13.0.* nvidia-cuda-runtime==13.0.* nvidia-cuda-crt==13.0.*
///               nvidia-cuda-cccl==13.0.* nvidia-nvvm==13.0.* nvidia-nvshmem-cu13==3.4.5
/// rocSHMEM: needs ROCm (hipcc, CMake's HIP support) and the install made by
/// `cargo xtask build-rocshmem` (found through ROCSHMEM_HOME).
///
/// The library lands in target/shim/<backend>/lib/ where `cargo xtask test --provider <backend>`
/// finds it; the path is printed at the end.
///
/// Examples:
///   NVSHMEM_HOME=.../nvidia/nvshmem cargo xtask build-shim --backend nvshmem --nvcc .../bin/nvcc
///   eval "$(cargo xtask build-rocshmem --arch gfx942)"; cargo xtask build-shim --backend rocshmem --arch gfx942
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Which SHMEM library to build against.
    #[arg(long, value_enum)]
    backend: ShimBackend,
    /// GPU architectures: CUDA compute capabilities (default 90) or HIP targets (default gfx942).
    #[arg(long)]
    arch: Option<String>,
    /// nvcc to use (default: $CUDACXX, else nvcc on PATH, else $CUDA_HOME/bin/nvcc).
    #[arg(long, value_name = "PATH")]
    nvcc: Option<PathBuf>,
    /// NVSHMEM install with include/ and lib/ (default: $NVSHMEM_HOME).
    #[arg(long, value_name = "DIR")]
    nvshmem_home: Option<PathBuf>,
    /// rocSHMEM install prefix (default: $ROCSHMEM_HOME, as build-rocshmem prints).
    #[arg(long, value_name = "DIR")]
    rocshmem_home: Option<PathBuf>,
    /// Where to build and install (default: target/shim/<backend>).
    #[arg(long, value_name = "DIR")]
    out_dir: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum ShimBackend {
    Nvshmem,
    Rocshmem,
}

fn from_env(given: Option<&Path>, vars: &[&str]) -> Option<PathBuf> {
    given.map(Path::to_path_buf).or_else(|| {
        vars.iter()
            .find_map(|v| std::env::var_os(v).filter(|x| !x.is_empty()))
            .map(PathBuf::from)
    })
}

fn nvcc(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    let found = from_env(given, &["CUDACXX"])
        .or_else(|| crate::build_rocshmem::which("nvcc"))
        .or_else(|| from_env(None, &["CUDA_HOME", "CUDA_PATH"]).map(|h| h.join("bin/nvcc")));
    match found {
        Some(p) if p.is_file() => Ok(p),
        _ => bail!(
            "nvcc not found: install the CUDA toolkit (or `pip install nvidia-cuda-nvcc==13.0.* \
             nvidia-cuda-runtime==13.0.* nvidia-cuda-crt==13.0.* nvidia-cuda-cccl==13.0.* \
             nvidia-nvvm==13.0.*`) and pass --nvcc or set CUDACXX"
        ),
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let backend = match args.backend {
        ShimBackend::Nvshmem => Backend::Nvshmem,
        ShimBackend::Rocshmem => Backend::Rocshmem,
    };
    let source = project_root().join("crates/symmem-shim-sys/shim");
    let out = std::path::absolute(
        args.out_dir
            .clone()
            .unwrap_or_else(|| target_dir().join("shim").join(backend.name())),
    )?;
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    crate::build_rocshmem::tools_cmake()?;

    // The `cmake` crate is made for build scripts; outside one it needs the target, host,
    // profile and out dir spelled out, and its default C flags are not wanted here.
    let triple = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
    let mut config = cmake::Config::new(&source);
    config
        .out_dir(&out)
        .target(&triple)
        .host(&triple)
        .profile("Release")
        .no_default_flags(true)
        .define("SYMMEM_SHIM_BACKEND", backend.name());
    if crate::build_rocshmem::which("ninja").is_some() {
        config.generator("Ninja");
    }
    if let Some(arch) = &args.arch {
        config.define("SYMMEM_SHIM_ARCHS", arch.replace(',', ";"));
    }
    match backend {
        Backend::Nvshmem => {
            let nvcc = nvcc(args.nvcc.as_deref())?;
            let home = from_env(args.nvshmem_home.as_deref(), &["NVSHMEM_HOME"]).context(
                "NVSHMEM not found: pass --nvshmem-home or set NVSHMEM_HOME to the folder with \
                 include/nvshmem.h and lib/libnvshmem_host.so.3 (pip: nvidia-nvshmem-cu13==3.4.5 \
                 installs it as site-packages/nvidia/nvshmem)",
            )?;
            if !home.join("include/nvshmem.h").is_file() {
                bail!(
                    "{} has no include/nvshmem.h: point --nvshmem-home at an NVSHMEM install",
                    home.display()
                );
            }
            // A toolkit root for CMake: the folder above nvcc's bin/.
            let root = nvcc
                .parent()
                .and_then(Path::parent)
                .unwrap_or(Path::new("/"));
            config
                .define("CMAKE_CUDA_COMPILER", &nvcc)
                .define("CUDAToolkit_ROOT", root)
                .define("NVSHMEM_HOME", &home);
        }
        Backend::Rocshmem => {
            let home = from_env(args.rocshmem_home.as_deref(), &["ROCSHMEM_HOME"]).context(
                "rocSHMEM not found: run `eval \"$(cargo xtask build-rocshmem --arch gfx942)\"` \
                 first, or pass --rocshmem-home",
            )?;
            config.define("CMAKE_PREFIX_PATH", &home);
            if let Some(rocm) = from_env(None, &["ROCM_PATH"]) {
                config.define("CMAKE_HIP_COMPILER_ROCM_ROOT", &rocm);
            }
        }
    }
    eprintln!(
        "building the {} shim from {} ...",
        backend.name(),
        source.display()
    );
    // The crate panics on failure (it is made for build scripts): turn that into an error.
    // It also prints CMake's output and `cargo:` lines on stdout: send them to stderr, so that
    // stdout carries only the library's path (`lib=$(cargo xtask build-shim ...)`).
    let built = with_stdout_on_stderr(|| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| config.build()))
    })?;
    let installed = match built {
        Ok(dir) => dir,
        Err(_) => bail!(
            "building the {} shim failed: see CMake's output above (the build folder is {})",
            backend.name(),
            out.join("build").display()
        ),
    };
    let library = installed.join("lib").join(backend.library_name());
    if !library.is_file() {
        bail!("CMake finished but {} is missing", library.display());
    }
    eprintln!("built {}", library.display());
    println!("{}", library.display());
    Ok(())
}

/// Runs `f` with file descriptor 1 pointing at stderr, restoring it afterwards.
fn with_stdout_on_stderr<T>(f: impl FnOnce() -> T) -> anyhow::Result<T> {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    // SAFETY: dup on the process's own stdout; the copy is restored and closed below.
    let saved = unsafe { libc::dup(1) };
    // SAFETY: points fd 1 at stderr; undone below.
    if saved < 0 || unsafe { libc::dup2(2, 1) } < 0 {
        anyhow::bail!(
            "redirecting CMake's output: {}",
            std::io::Error::last_os_error()
        );
    }
    let result = f();
    let _ = std::io::stdout().flush();
    // SAFETY: as above.
    unsafe {
        libc::dup2(saved, 1);
        libc::close(saved);
    }
    Ok(result)
}

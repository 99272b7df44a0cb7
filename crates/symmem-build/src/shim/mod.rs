//! `cargo xtask build-shim`: the GPU shim (one C ABI over NVSHMEM or rocSHMEM) as a shared
//! library that carries its own device link, built by the xtask's one CMake driver (as
//! build-rocshmem is), with CMake's output on stderr and in the build folder's log.
//!
//! Its rooms, each depending only on those listed after it:
//! - this file: the command (`run`, [`build_library`], [`build_into`]): the out folder, its
//!   lock, the previous install removed, then setup, key, steps and stamp in that order;
//! - `steps`: the CMake steps and what their failures say;
//! - `installed`: an installed shim, read back from its stamp;
//! - `setup`: the inputs checked and the definitions decided, per backend, through
//!   `nvshmem` and `rocshmem` (the SHMEM install each backend links);
//! - `key`: what a build is keyed on, and its stamp;
//! - `args`: the command's arguments and their defaults.

mod args;
mod installed;
mod key;
mod nvshmem;
mod rocshmem;
mod setup;
mod steps;
#[cfg(test)]
mod tests;

pub use args::{Args, default_targets};
pub use installed::{Installed, installed};
pub use key::SHIM_STAMP;
pub use symmem::ProviderKind;

use crate::Workspace;
use crate::cmake;
use crate::lock::OutLock;
use crate::targets::GpuTargets;
use crate::tools;
use anyhow::{Context, bail};
use key::{Key, sources_digest};
use setup::{HOST_HAS_NO_SHIM, Setup, setup};
use std::path::{Path, PathBuf};
use std::time::Instant;
use steps::{build, remove_other_builds, shim_project};
use symmem::format_elapsed;
use xshell::Shell;

/// Where the shim for `backend` is built and installed unless `--out-dir` says otherwise
/// (`<target>/shim/<backend>`; the library lands in its `lib/`).
pub fn default_out(target: &Path, backend: ProviderKind) -> PathBuf {
    target.join("shim").join(backend.name())
}

/// The out folder of a run: `--out-dir`, else the backend's default.
fn out_dir(ws: &Workspace, args: &Args) -> anyhow::Result<PathBuf> {
    if !args.backend.is_gpu() {
        bail!("{HOST_HAS_NO_SHIM}");
    }
    let out = args
        .out_dir
        .clone()
        .unwrap_or_else(|| default_out(&ws.target, args.backend));
    std::path::absolute(&out).with_context(|| format!("resolving {}", out.display()))
}

/// `build-shim`: builds the library and prints its path (the only line on stdout).
pub fn run(sh: &Shell, ws: &Workspace, args: Args) -> anyhow::Result<()> {
    let library = build_library(sh, ws, &args)?;
    println!("{}", library.display());
    Ok(())
}

/// Builds the shim library as `args` say and returns its path.
pub fn build_library(sh: &Shell, ws: &Workspace, args: &Args) -> anyhow::Result<PathBuf> {
    let started = Instant::now();
    let out = out_dir(ws, args)?;
    // Before anything is checked or written there: a second run is refused at once.
    let _lock = OutLock::take(&out, "build-shim")?;
    let library = out
        .join("lib")
        .join(args.backend.shim_library().unwrap_or_default());
    let stamp = out.join(SHIM_STAMP);
    // The library and stamp of a previous install are what this run replaces: removed before
    // anything can fail (a refused input included), so that a failed run never leaves them for
    // `cargo xtask test` to load as if they were its result.
    let removed = remove_previous(&[&stamp, &library])?;
    let built = build_locked(sh, ws, args, out, &library, &stamp);
    if built.is_err() && removed {
        eprintln!(
            "note: the previous {} and its stamp were removed: a failed build-shim leaves no \
             library to load",
            library.display()
        );
    }
    let setup = built?;
    eprintln!(
        "built {} against {} in {}",
        library.display(),
        setup.library.describe,
        format_elapsed(started.elapsed())
    );
    Ok(library)
}

/// Removes the files of `paths` that exist; whether there were any.
fn remove_previous(paths: &[&Path]) -> anyhow::Result<bool> {
    let mut removed = false;
    for previous in paths {
        if previous.exists() {
            std::fs::remove_file(previous)
                .with_context(|| format!("removing {}", previous.display()))?;
            removed = true;
        }
    }
    Ok(removed)
}

/// [`build_library`] once the out folder is locked and rid of the previous install: checks the
/// inputs, builds, installs `library` and writes `stamp`.
fn build_locked(
    sh: &Shell,
    ws: &Workspace,
    args: &Args,
    out: PathBuf,
    library: &Path,
    stamp: &Path,
) -> anyhow::Result<Setup> {
    let setup = setup(sh, ws, args, out)?;
    // The inputs are checked first: their errors are the likelier ones, and need no tools.
    let cmake = tools::cmake(sh)?;
    let generator = tools::generator()?;
    let key = Key::new(
        &cmake,
        generator,
        &setup.defines,
        &setup.library,
        sources_digest(&setup.source)?,
        cmake::configure_environment_of_process(),
    );
    let build_dir = key.build_dir(&setup.out);
    let steps = shim_project(
        &cmake,
        generator,
        &setup.source,
        &build_dir,
        &setup.out,
        &setup.defines,
    )
    .steps();
    build(sh, &setup, &key, &steps)?;
    if !library.is_file() {
        bail!(
            "CMake finished but {} is missing: delete {} and run again",
            library.display(),
            build_dir.display()
        );
    }
    std::fs::write(stamp, key.stamp(&setup.library))
        .with_context(|| format!("writing {}", stamp.display()))?;
    remove_other_builds(&setup.out, &build_dir);
    Ok(setup)
}

/// Builds the `backend` shim from the CMake project `source` into `out` (`out/lib` holds the
/// library), finding the SHMEM library, ROCm and the compilers as `build-shim` does
/// (NVSHMEM_HOME, CUDACXX, ROCSHMEM_HOME, ROCM_PATH, ...); `archs` as `--arch` takes them.
/// For symmem-shim-sys's opt-in build features.
pub fn build_into(
    backend: ProviderKind,
    source: &Path,
    out: &Path,
    archs: Option<&str>,
) -> anyhow::Result<PathBuf> {
    let sh = Shell::new().context("reading the current folder")?;
    let ws = Workspace {
        root: source.to_path_buf(),
        target: out.to_path_buf(),
        shim_source: source.to_path_buf(),
    };
    let args = Args {
        backend,
        arch: archs.map(GpuTargets::parse).transpose()?,
        nvcc: None,
        nvshmem_home: None,
        rocshmem_home: None,
        rocm_path: None,
        out_dir: Some(out.to_path_buf()),
    };
    build_library(&sh, &ws, &args)
}

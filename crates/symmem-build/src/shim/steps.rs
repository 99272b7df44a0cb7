//! The CMake steps of a shim build (configure, build, install in the build folder of its
//! [`Key`]) and what their failures say: a link that misses the SHMEM library's entry points
//! names them and the version the shim needs; any other names the log and the folder to delete.

use super::key::Key;
use super::setup::{HOST_HAS_NO_SHIM, Setup};
use crate::cmake::{self, Step};
use crate::runner::StepError;
use anyhow::Context;
use std::path::Path;
use std::time::Instant;
use symmem::{ProviderKind, format_elapsed};
use xshell::Shell;

/// The shim as a CMake project: built in `build_dir`, installed into `out`.
pub(super) fn shim_project<'a>(
    cmake: &'a Path,
    generator: crate::tools::Generator,
    source: &'a Path,
    build_dir: &'a Path,
    out: &'a Path,
    defines: &'a [(String, String)],
) -> cmake::Project<'a> {
    cmake::Project {
        cmake,
        generator,
        source,
        build_dir,
        install_prefix: out,
        defines,
        jobs: None,
    }
}

/// Runs one CMake step with its output on stderr (stdout carries only the library's path).
fn run_step(driver: &cmake::Driver<'_>, step: Step, command: &[String]) -> Result<(), StepError> {
    let what = match step {
        Step::Configure => "configure",
        Step::Build => "build",
        Step::Install => "install",
    };
    eprintln!("[build-shim] {what}");
    let started = Instant::now();
    driver.run(step, command)?;
    eprintln!(
        "[build-shim] {what}: done in {}",
        format_elapsed(started.elapsed())
    );
    Ok(())
}

/// Removes the build folders of other inputs under `out/build` (each serves only its own
/// inputs; a rebuild takes seconds), saying which.
pub(super) fn remove_other_builds(out: &Path, keep: &Path) {
    let Ok(entries) = std::fs::read_dir(out.join("build")) else {
        return;
    };
    let mut removed = Vec::new();
    for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
        if path == keep {
            continue;
        }
        let gone = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        match gone {
            Ok(()) => removed.push(path.display().to_string()),
            Err(e) => eprintln!("note: could not remove {}: {e}", path.display()),
        }
    }
    if !removed.is_empty() {
        eprintln!(
            "removed the build folders of other inputs: {}",
            removed.join(", ")
        );
    }
}

/// The symbols a failed link step's output says are undefined (GNU ld's "undefined reference
/// to `X'", lld's "undefined symbol: X"), each once, in the order first seen.
pub(super) fn undefined_symbols(output: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    for line in output.lines() {
        let symbol = if let Some((_, rest)) = line.split_once("undefined reference to `") {
            rest.rsplit_once('\'').map_or(rest, |(s, _)| s)
        } else if let Some((_, rest)) = line.split_once("undefined symbol: ") {
            rest
        } else {
            continue;
        };
        let symbol = symbol.trim().to_string();
        if !symbol.is_empty() && !found.contains(&symbol) {
            found.push(symbol);
        }
    }
    found
}

/// The output of the last command in a build log (the driver writes `$ command` before each).
fn last_step_output(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    match text.rfind("\n$ ") {
        Some(at) => text[at + 1..].to_string(),
        None => text,
    }
}

/// The error for a link that failed on symbols the SHMEM install does not define: the shim
/// is linked with --no-undefined, so an install without the API the shim calls (a rocSHMEM
/// older than 3.x) stops here rather than at its first call on a GPU.
fn missing_entry_points(setup: &Setup, symbols: &[String], log: &Path) -> anyhow::Error {
    let shown: Vec<&str> = symbols.iter().take(8).map(String::as_str).collect();
    let more = symbols.len().saturating_sub(shown.len());
    let needs = match setup.backend {
        ProviderKind::Rocshmem => format!(
            "{}. Fix: build the pinned rocSHMEM with `cargo xtask build-rocshmem --arch <arch>` \
             and pass the prefix it prints (--rocshmem-home, or ROCSHMEM_HOME)",
            crate::rocshmem::support::WHY
        ),
        ProviderKind::Nvshmem => "the shim needs NVSHMEM 3.x or newer. Fix: point \
                                  --nvshmem-home (or NVSHMEM_HOME) at an NVSHMEM 3.x install \
                                  (`source scripts/gpu/nvshmem-sdk.sh` fetches the pinned one)"
            .into(),
        // `setup` refuses it before anything is linked.
        ProviderKind::Host => HOST_HAS_NO_SHIM.into(),
    };
    anyhow::anyhow!(
        "linking the {} shim failed: {} does not define {}{} (see {}), which the shim calls: \
         {needs}",
        setup.backend.name(),
        setup.library.describe,
        shown.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        },
        log.display()
    )
}

/// The error for a failed CMake step, naming the log and the folder to delete.
pub(super) fn step_failed(
    setup: &Setup,
    build_dir: &Path,
    what: &str,
    err: StepError,
) -> anyhow::Error {
    let StepError::Failed { status, log, .. } = err else {
        return anyhow::Error::new(err);
    };
    let undefined = undefined_symbols(&last_step_output(&log));
    if !undefined.is_empty() {
        return missing_entry_points(setup, &undefined, &log);
    }
    let mut fix = format!(
        "CMake's messages above (also in {}) say what failed; fix that and run the same \
         command again (delete {} to start over)",
        log.display(),
        build_dir.display()
    );
    if let Some(value) = &setup.rocm_path_exported {
        fix.push_str(&format!(
            ". Note: ROCM_PATH={} is exported; Debian's clang then looks for its device \
             libraries there: unset it and pass --rocm-path instead",
            value.to_string_lossy()
        ));
    }
    anyhow::anyhow!(
        "{what} the {} shim failed ({status}): {fix}",
        setup.backend.name()
    )
}

/// Configures, builds and installs the shim in the build folder of `key`.
pub(super) fn build(
    sh: &Shell,
    setup: &Setup,
    key: &Key,
    steps: &cmake::Steps,
) -> anyhow::Result<()> {
    let build_dir = key.build_dir(&setup.out);
    std::fs::create_dir_all(&build_dir)
        .with_context(|| format!("creating {}", build_dir.display()))?;
    eprintln!(
        "building the {} shim from {} in {} against {} ...",
        setup.backend.name(),
        setup.source.display(),
        build_dir.display(),
        setup.library.describe
    );
    cmake::drop_stale_tree(&build_dir, &setup.source)?;
    let driver = cmake::Driver::new(sh, build_dir.join("symmem-build.log"), true)?;
    let failed = |what: &str, err| step_failed(setup, &build_dir, what, err);
    run_step(&driver, Step::Configure, &steps.configure).map_err(|e| failed("configuring", e))?;
    run_step(&driver, Step::Build, &steps.build).map_err(|e| failed("building", e))?;
    run_step(&driver, Step::Install, &steps.install).map_err(|e| failed("installing", e))?;
    Ok(())
}

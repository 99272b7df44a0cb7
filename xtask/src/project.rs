//! Where the workspace is and how to build its binaries.

use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use symmem_gpu::Backend;

/// The workspace root (xtask lives one level below it).
pub fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask is inside the workspace")
        .to_path_buf()
}

/// Cargo's target folder: `$CARGO_TARGET_DIR`, else `target/` at the root.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| project_root().join("target"))
}

/// Builds binary `bin` of package `package` and returns its path, as cargo reports it.
pub fn build_binary(package: &str, bin: &str) -> anyhow::Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(&cargo)
        .current_dir(project_root())
        .args(["build", "--package", package, "--bin", bin])
        .args(["--message-format", "json-render-diagnostics"])
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {} build", Path::new(&cargo).display()))?;
    if !output.status.success() {
        bail!("building {bin} failed (see the compiler output above)");
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    for line in stdout.lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let is_bin = message["target"]["name"] == bin
            && message["target"]["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "bin"));
        if let (true, Some(exe)) = (is_bin, message["executable"].as_str()) {
            return Ok(PathBuf::from(exe));
        }
    }
    bail!("cargo built {bin} but did not report its executable")
}

/// The shim library for a GPU provider (`--shim-lib`, else `$SYMMEM_SHIM_LIB`, else what
/// `cargo xtask build-shim` built), which must exist: a provider the user named is never
/// quietly skipped.
pub fn shim_library(given: Option<&Path>, backend: Backend) -> anyhow::Result<PathBuf> {
    let path = given
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("SYMMEM_SHIM_LIB").map(PathBuf::from))
        .unwrap_or_else(|| symmem_gpu::default_library(&target_dir(), backend));
    if !path.is_file() {
        bail!(
            "provider {} is unavailable: no shim library at {}. Build it with `cargo xtask \
             build-shim --backend {}` (needs {}), or pass --shim-lib",
            backend.name(),
            path.display(),
            backend.name(),
            match backend {
                Backend::Nvshmem => "nvcc and NVSHMEM",
                Backend::Rocshmem => "ROCm and `cargo xtask build-rocshmem`",
            }
        );
    }
    Ok(std::path::absolute(&path)?)
}

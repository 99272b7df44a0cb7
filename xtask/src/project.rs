//! Where the workspace is and how to build its binaries.

use anyhow::bail;
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
/// `instead` is the flag that gives a built binary, for the error when cargo is missing.
pub fn build_binary(package: &str, bin: &str, instead: &str) -> anyhow::Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    build_binary_with(&cargo, package, bin, instead)
}

fn build_binary_with(
    cargo: &std::ffi::OsStr,
    package: &str,
    bin: &str,
    instead: &str,
) -> anyhow::Result<PathBuf> {
    let output = Command::new(cargo)
        .current_dir(project_root())
        .args(["build", "--package", package, "--bin", bin])
        .args(["--message-format", "json-render-diagnostics"])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|err| build_spawn_error(cargo, bin, instead, err))?;
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

/// Why cargo could not be started to build `bin`, and the way around it: inside an image or
/// a machine with the xtask binary but no cargo, the rank binary can be given directly.
fn build_spawn_error(
    cargo: &std::ffi::OsStr,
    bin: &str,
    instead: &str,
    err: std::io::Error,
) -> anyhow::Error {
    let cargo = Path::new(cargo).display();
    if err.kind() == std::io::ErrorKind::NotFound {
        anyhow::anyhow!(
            "cannot build {bin}: `{cargo}` was not found (is cargo on PATH?). Without cargo, \
             pass a built binary instead: {instead} PATH/{bin}"
        )
    } else {
        anyhow::anyhow!("cannot build {bin}: running `{cargo} build` failed: {err}")
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_cargo_the_error_names_the_flag_that_gives_a_binary() {
        let err = build_binary_with(
            std::ffi::OsStr::new("/nonexistent/cargo"),
            "symmem-conformance",
            "symmem-conformance",
            "--rank-binary",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("`/nonexistent/cargo` was not found")
                && err.contains("--rank-binary PATH/symmem-conformance"),
            "{err}"
        );
        assert!(!err.contains("No such file or directory"), "{err}");
    }
}

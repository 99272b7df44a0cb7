//! Where the workspace is and how to build its binaries.

use anyhow::bail;
use clap::builder::TypedValueParser;
use std::path::{Path, PathBuf};
use symmem::ProviderKind;
use symmem::settings::SHIM_LIB;
use xshell::{Shell, cmd};

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
pub fn build_binary(
    sh: &Shell,
    package: &str,
    bin: &str,
    instead: &str,
) -> anyhow::Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    build_binary_with(sh, &cargo, package, bin, instead)
}

fn build_binary_with(
    sh: &Shell,
    cargo: &std::ffi::OsStr,
    package: &str,
    bin: &str,
    instead: &str,
) -> anyhow::Result<PathBuf> {
    if crate::tools::program(Path::new(cargo)).is_none() {
        bail!(
            "cannot build {bin}: `{}` was not found (is cargo on PATH?). Without cargo, pass a \
             built binary instead: {instead} PATH/{bin}",
            Path::new(cargo).display()
        );
    }
    let _root = sh.push_dir(project_root());
    // Cargo's messages (stderr) show as it builds; its JSON (stdout) is read here.
    let stdout = cmd!(
        sh,
        "{cargo} build --package {package} --bin {bin} --message-format json-render-diagnostics"
    )
    .quiet()
    .read()
    .map_err(|err| {
        anyhow::anyhow!("building {bin} failed (see the compiler output above): {err}")
    })?;
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

/// The GPU providers, `nvshmem and rocshmem`, for messages.
pub fn gpu_providers() -> String {
    let names: Vec<&str> = ProviderKind::GPU.iter().map(|k| k.name()).collect();
    names.join(" and ")
}

/// Parses a GPU provider's name (`--provider`, `--backend` of the GPU commands): `--help`
/// lists exactly the providers that have a shim.
pub fn gpu_provider() -> impl TypedValueParser<Value = ProviderKind> {
    clap::builder::PossibleValuesParser::new(ProviderKind::GPU.map(ProviderKind::name))
        .map(|name| ProviderKind::from_name(&name).expect("one of the GPU providers' names"))
}

/// The shim library for a GPU provider (`--shim-lib`, else `$SYMMEM_SHIM_LIB`, else what
/// `cargo xtask build-shim` built), which must exist: a provider the user named is never
/// quietly skipped.
pub fn shim_library(given: Option<&Path>, backend: ProviderKind) -> anyhow::Result<PathBuf> {
    let Some(built) = symmem_gpu::default_library(&target_dir(), backend) else {
        bail!(
            "provider {backend} has no shim library: only {} do",
            gpu_providers()
        );
    };
    let path = given
        .map(Path::to_path_buf)
        .or_else(|| SHIM_LIB.read_path())
        .unwrap_or(built);
    if !path.is_file() {
        bail!(
            "provider {} is unavailable: no shim library at {}. Build it with `cargo xtask \
             build-shim --backend {}` (needs {}), or pass --shim-lib",
            backend.name(),
            path.display(),
            backend.name(),
            match backend {
                ProviderKind::Rocshmem => "ROCm and `cargo xtask build-rocshmem`",
                _ => "nvcc and NVSHMEM",
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
            &Shell::new().unwrap(),
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

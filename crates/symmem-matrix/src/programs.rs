//! The programs the matrix and the bench run, and the GPU shim they hand to the ranks.

use anyhow::bail;
use std::path::{Path, PathBuf};
use symmem::ProviderKind;
use symmem::settings::SHIM_LIB;

/// One of the toolkit's programs that this one runs.
pub struct Program {
    /// Its file name (`symmem-conformance`).
    pub name: &'static str,
    /// Its package, for the install hint.
    pub package: &'static str,
    /// The flag that names a file instead (`--rank-binary`).
    pub flag: &'static str,
}

pub const RANK: Program = Program {
    name: "symmem-conformance",
    package: "symmem-conformance",
    flag: "--rank-binary",
};

pub const BENCH: Program = Program {
    name: "symmem-gpu-bench",
    package: "symmem-gpu",
    flag: "--bench-binary",
};

impl Program {
    /// `given` (the flag), else the file of this name next to this executable, where
    /// `cargo build` and `cargo install` put the workspace's binaries side by side.
    pub fn locate(&self, given: Option<&Path>) -> anyhow::Result<PathBuf> {
        let exe = std::env::current_exe()?;
        self.locate_beside(given, &exe)
    }

    fn locate_beside(&self, given: Option<&Path>, exe: &Path) -> anyhow::Result<PathBuf> {
        if let Some(path) = given {
            if !path.is_file() {
                bail!(
                    "{} is not a file: {} names a built {}",
                    path.display(),
                    self.flag,
                    self.name
                );
            }
            return Ok(std::path::absolute(path)?);
        }
        let beside = exe.with_file_name(self.name);
        if !beside.is_file() {
            bail!(
                "no {name} next to {exe} (looked for {beside}): install it there (`cargo install \
                 --path crates/{package}`, as symmem-matrix was), pass {flag} PATH, or run \
                 `cargo xtask test` in a checkout, which builds both",
                name = self.name,
                exe = exe.display(),
                beside = beside.display(),
                package = self.package,
                flag = self.flag,
            );
        }
        Ok(beside)
    }
}

/// The GPU providers, `nvshmem and rocshmem`, for messages.
fn gpu_providers() -> String {
    let names: Vec<&str> = ProviderKind::GPU.iter().map(|k| k.name()).collect();
    names.join(" and ")
}

/// What building `backend`'s shim needs, for messages; `None` for a provider without one.
fn shim_needs(backend: ProviderKind) -> Option<&'static str> {
    match backend {
        ProviderKind::Host => None,
        ProviderKind::Nvshmem => Some("nvcc and NVSHMEM"),
        ProviderKind::Rocshmem => Some("ROCm and `cargo xtask build-rocshmem`"),
    }
}

/// The shim library handed to the ranks of a GPU provider: `--shim-lib`, else
/// `$SYMMEM_SHIM_LIB`, else the provider's own default (the library next to the program the
/// ranks run). It must exist: a provider the user named is never quietly skipped.
pub fn shim_library(
    given: Option<&Path>,
    backend: ProviderKind,
    ranks_run: &Path,
) -> anyhow::Result<PathBuf> {
    let (Some(file), Some(needs)) = (backend.shim_library(), shim_needs(backend)) else {
        bail!(
            "provider {backend} has no shim library: only {} do",
            gpu_providers()
        );
    };
    let path = given
        .map(Path::to_path_buf)
        .or_else(|| SHIM_LIB.read_path())
        .unwrap_or_else(|| ranks_run.with_file_name(file));
    if !path.is_file() {
        bail!(
            "provider {} is unavailable: no shim library at {} (from --shim-lib, else {}, else \
             next to {}). Build it with `cargo xtask build-shim --backend {}` (needs {}), \
             which `cargo xtask test` and `cargo xtask bench` then pass on, or pass --shim-lib",
            backend.name(),
            path.display(),
            SHIM_LIB.name,
            ranks_run.display(),
            backend.name(),
            needs
        );
    }
    Ok(std::path::absolute(&path)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_is_found_beside_this_one_or_the_error_says_how_to_get_it() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("symmem-matrix");
        let e = format!("{:#}", RANK.locate_beside(None, &exe).unwrap_err());
        assert!(
            e.contains("no symmem-conformance next to")
                && e.contains("cargo install --path crates/symmem-conformance")
                && e.contains("--rank-binary PATH"),
            "{e}"
        );
        std::fs::write(dir.path().join("symmem-conformance"), "").unwrap();
        assert_eq!(
            RANK.locate_beside(None, &exe).unwrap(),
            dir.path().join("symmem-conformance")
        );
        let e = format!(
            "{:#}",
            BENCH
                .locate_beside(Some(&dir.path().join("missing")), &exe)
                .unwrap_err()
        );
        assert!(e.contains("is not a file: --bench-binary"), "{e}");
    }

    #[test]
    fn the_shim_defaults_to_the_one_beside_the_ranks_program() {
        let dir = tempfile::tempdir().unwrap();
        let rank = dir.path().join("symmem-conformance");
        let shim = dir.path().join("libsymmem_shim_nvshmem.so");
        std::fs::write(&shim, "").unwrap();
        // A given library wins; missing, it is named with the fix.
        let given = dir.path().join("other.so");
        let e = format!(
            "{:#}",
            shim_library(Some(&given), ProviderKind::Nvshmem, &rank).unwrap_err()
        );
        assert!(
            e.contains("provider nvshmem is unavailable: no shim library at")
                && e.contains("other.so")
                && e.contains("cargo xtask build-shim --backend nvshmem"),
            "{e}"
        );
        if SHIM_LIB.read_path().is_none() {
            assert_eq!(
                shim_library(None, ProviderKind::Nvshmem, &rank).unwrap(),
                shim
            );
            let e = format!(
                "{:#}",
                shim_library(None, ProviderKind::Rocshmem, &rank).unwrap_err()
            );
            assert!(e.contains("libsymmem_shim_rocshmem.so"), "{e}");
        }
        let e = format!(
            "{:#}",
            shim_library(None, ProviderKind::Host, &rank).unwrap_err()
        );
        assert!(e.contains("only nvshmem and rocshmem do"), "{e}");
    }
}

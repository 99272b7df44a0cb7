//! Finding git, CMake, Ninja, hipcc and ROCm on this machine; each miss names the fix.

use super::plan::{Generator, Toolchain};
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

const ROCM_FIX: &str = "install ROCm >= 6.2 (https://rocm.docs.amd.com), set ROCM_PATH to it, \
                        or run inside `nix develop .#rocm`";

/// Finds `name` on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

pub fn git() -> anyhow::Result<PathBuf> {
    which("git").context("git not found on PATH: install git (apt-get install git), or build from a local checkout with --source DIR")
}

/// The ROCm install: `--rocm-path`, else `$ROCM_PATH`, else `/opt/rocm`.
pub fn rocm_path(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    let (path, from) = match (given, std::env::var_os("ROCM_PATH")) {
        (Some(p), _) => (p.to_path_buf(), "--rocm-path"),
        (None, Some(p)) if !p.is_empty() => (PathBuf::from(p), "ROCM_PATH"),
        _ => (
            PathBuf::from("/opt/rocm"),
            "the default /opt/rocm (ROCM_PATH is unset)",
        ),
    };
    if !path.is_dir() {
        bail!("no ROCm at {} (from {from}): {ROCM_FIX}", path.display());
    }
    Ok(path)
}

/// The ROCm version: from `.info/version`, else from the installed version header.
pub fn rocm_version(rocm: &Path) -> anyhow::Result<(String, bool)> {
    if let Ok(text) = std::fs::read_to_string(rocm.join(".info/version")) {
        let version: String = text
            .trim()
            .split(|c: char| c == '-' || c.is_whitespace())
            .next()
            .unwrap_or_default()
            .to_string();
        if version.split('.').count() >= 2 {
            return Ok((version, true));
        }
    }
    for header in ["include/rocm-core/rocm_version.h", "include/rocm_version.h"] {
        if let Ok(text) = std::fs::read_to_string(rocm.join(header)) {
            let field = |name: &str| {
                text.lines().find_map(|l| {
                    let rest = l.trim().strip_prefix("#define")?.trim();
                    let value = rest.strip_prefix(name)?;
                    value.trim().parse::<u32>().ok()
                })
            };
            if let (Some(major), Some(minor), Some(patch)) = (
                field("ROCM_VERSION_MAJOR"),
                field("ROCM_VERSION_MINOR"),
                field("ROCM_VERSION_PATCH"),
            ) {
                return Ok((format!("{major}.{minor}.{patch}"), false));
            }
        }
    }
    bail!(
        "cannot tell the ROCm version under {}: neither .info/version nor \
         include/rocm-core/rocm_version.h is there; is ROCM_PATH a ROCm install? {ROCM_FIX}",
        rocm.display()
    )
}

/// hipcc: `--hipcc`, else `$HIPCC`, else `<rocm>/bin/hipcc`, else PATH.
pub fn hipcc(given: Option<&Path>, rocm: &Path) -> anyhow::Result<PathBuf> {
    let candidate = given
        .map(Path::to_path_buf)
        .or_else(|| {
            std::env::var_os("HIPCC")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
        .or_else(|| Some(rocm.join("bin/hipcc")).filter(|p| is_executable(p)))
        .or_else(|| which("hipcc"));
    match candidate {
        Some(p) if is_executable(&p) => Ok(std::path::absolute(&p).unwrap_or(p)),
        Some(p) => bail!(
            "hipcc at {} is not an executable file: {ROCM_FIX}",
            p.display()
        ),
        None => bail!(
            "hipcc not found (looked in {}/bin and on PATH): {ROCM_FIX}",
            rocm.display()
        ),
    }
}

/// CMake >= 3.20 (rocSHMEM's minimum).
pub fn cmake() -> anyhow::Result<PathBuf> {
    let cmake = which("cmake").context(
        "cmake not found on PATH: install CMake >= 3.20 (apt-get install cmake, pip install cmake) \
         or run inside `nix develop`",
    )?;
    let out = Command::new(&cmake)
        .arg("--version")
        .output()
        .context("running cmake --version")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text.split_whitespace().nth(2).unwrap_or_default();
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if (major, minor) < (3, 20) {
        bail!(
            "cmake {version} at {} is too old: rocSHMEM needs >= 3.20 (pip install cmake)",
            cmake.display()
        );
    }
    Ok(cmake)
}

/// Ninja when present, else Make.
pub fn generator() -> anyhow::Result<Generator> {
    if which("ninja").is_some() {
        Ok(Generator::Ninja)
    } else if which("make").is_some() {
        Ok(Generator::Makefiles)
    } else {
        bail!(
            "neither ninja nor make found on PATH: install ninja (apt-get install ninja-build, pip install ninja)"
        )
    }
}

pub fn toolchain(rocm: Option<&Path>, hipcc_path: Option<&Path>) -> anyhow::Result<Toolchain> {
    let rocm_path = rocm_path(rocm)?;
    let (rocm_version, rocm_version_file) = rocm_version(&rocm_path)?;
    Ok(Toolchain {
        hipcc: hipcc(hipcc_path, &rocm_path)?,
        cmake: cmake()?,
        generator: generator()?,
        rocm_path,
        rocm_version,
        rocm_version_file,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rocm_version_from_info_file_or_header() {
        let dir = tempfile::tempdir().unwrap();
        assert!(
            rocm_version(dir.path())
                .unwrap_err()
                .to_string()
                .contains("cannot tell the ROCm version")
        );
        std::fs::create_dir_all(dir.path().join("include/rocm-core")).unwrap();
        std::fs::write(
            dir.path().join("include/rocm-core/rocm_version.h"),
            "#define ROCM_VERSION_MAJOR   7\n#define ROCM_VERSION_MINOR 2\n#define ROCM_VERSION_PATCH 4\n",
        )
        .unwrap();
        assert_eq!(rocm_version(dir.path()).unwrap(), ("7.2.4".into(), false));
        std::fs::create_dir_all(dir.path().join(".info")).unwrap();
        std::fs::write(dir.path().join(".info/version"), "7.2.1-81\n").unwrap();
        assert_eq!(rocm_version(dir.path()).unwrap(), ("7.2.1".into(), true));
    }

    #[test]
    fn missing_rocm_names_the_fix() {
        let e = rocm_path(Some(Path::new("/nonexistent/rocm")))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no ROCm at /nonexistent/rocm (from --rocm-path)")
                && e.contains("ROCM_PATH"),
            "{e}"
        );
    }
}

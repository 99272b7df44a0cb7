//! Which rocSHMEM versions the shim works with, checked before anything is built: a 2.x tree
//! otherwise fails at configure (no rocprim), or builds for minutes and then has no device
//! bitcode, and a 2.x install fails the shim's compile with missing-API errors.

use anyhow::bail;
use std::path::Path;

/// The oldest rocSHMEM major version the shim supports.
pub const OLDEST_MAJOR: u32 = 3;

/// Why older ones cannot work, for the messages.
pub(crate) const WHY: &str = "the shim needs rocSHMEM 3.x or newer: unique-id initialisation \
                   (rocshmem_get_uniqueid, rocshmem_init_attr) and the device bitcode, which \
                   2.x does not have";

/// The major version of `version` (`2.0.0` -> 2), if it starts with a number.
fn major(version: &str) -> Option<u32> {
    version.trim().split('.').next()?.parse().ok()
}

/// Whether `version` is one the shim supports; an unreadable version is not refused here.
pub fn supported(version: &str) -> bool {
    major(version).is_none_or(|m| m >= OLDEST_MAJOR)
}

/// Refuses a rocSHMEM source tree older than 3.x, naming what it found and the fix.
pub fn check_source(version: &str, cmakelists: &Path, fix: &str) -> anyhow::Result<()> {
    if !supported(version) {
        bail!(
            "rocSHMEM {version} (declared in {}) is too old: {WHY} (--allow-source-mismatch \
             cannot change that). Fix: {fix}",
            cmakelists.display()
        );
    }
    Ok(())
}

/// Refuses a rocSHMEM install older than 3.x, naming what it found and the fix.
pub fn check_install(version: &str, home: &Path, found_in: &Path) -> anyhow::Result<()> {
    if !supported(version) {
        bail!(
            "the rocSHMEM install {} is version {version} (from {}): {WHY}. Fix: build the \
             pinned rocSHMEM with `cargo xtask build-rocshmem --arch <arch>` and pass the prefix \
             it prints (--rocshmem-home, or ROCSHMEM_HOME)",
            home.display(),
            found_in.display()
        );
    }
    Ok(())
}

/// The version an install's CMake package declares (`rocshmem-config-version.cmake`:
/// `set(PACKAGE_VERSION "x.y.z")`), for installs without a build-rocshmem stamp.
pub fn package_version(config_version: &str) -> Option<String> {
    config_version.lines().find_map(|l| {
        let rest = l.trim().strip_prefix("set(PACKAGE_VERSION")?;
        let word = rest
            .split(|c: char| c.is_whitespace() || c == ')' || c == '"')
            .find(|w| !w.is_empty())?;
        Some(word.to_string())
    })
}

/// The 3.x entry point whose declaration tells a 3.x install's headers from older ones.
const API_3X: &str = "rocshmem_get_uniqueid";

/// What an install's headers (include/rocshmem/, read recursively) say.
#[derive(Debug, Default, PartialEq, Eq)]
struct Headers {
    /// How many header files were read.
    read: usize,
    /// Whether one declares [`API_3X`].
    declares_3x: bool,
    /// The first that includes mpi.h, as rocSHMEM 2.x's rocshmem.hpp does.
    includes_mpi: Option<std::path::PathBuf>,
}

fn read_headers(dir: &Path) -> Headers {
    let mut headers = Headers::default();
    let mut pending = vec![dir.to_path_buf()];
    // Bounded: an install's header folder holds tens of files.
    while let Some(path) = pending.pop().filter(|_| headers.read < 2000) {
        if path.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&path) {
                pending.extend(entries.flatten().map(|e| e.path()));
            }
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        headers.read += 1;
        headers.declares_3x |= text.contains(API_3X);
        let mpi = text.lines().any(|l| {
            let l = l.trim_start();
            l.starts_with('#')
                && l.contains("include")
                && (l.contains("<mpi.h>") || l.contains("\"mpi.h\""))
        });
        if mpi && headers.includes_mpi.is_none() {
            headers.includes_mpi = Some(path);
        }
    }
    headers
}

/// Refuses an install whose headers lack the 3.x API, whatever its version says (a 3.x stamp
/// over 2.x headers, or no readable version at all), before any compiler runs. `version` says
/// what its version files said, for the message.
pub fn check_install_headers(home: &Path, version: &str) -> anyhow::Result<()> {
    let dir = home.join("include/rocshmem");
    let headers = read_headers(&dir);
    if headers.declares_3x {
        return Ok(());
    }
    let found = if headers.read == 0 {
        format!("it has no headers in {}", dir.display())
    } else {
        let mpi = headers.includes_mpi.map_or_else(String::new, |p| {
            format!("; {} includes mpi.h, as 2.x does", p.display())
        });
        format!(
            "none of its {} headers in {} declares {API_3X}{mpi}",
            headers.read,
            dir.display()
        )
    };
    bail!(
        "the rocSHMEM install {} is not a 3.x install: {found} (its version: {version}): {WHY}. \
         Fix: build the pinned rocSHMEM with `cargo xtask build-rocshmem --arch <arch>` and pass \
         the prefix it prints (--rocshmem-home, or ROCSHMEM_HOME)",
        home.display()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2.x headers (mpi.h, no unique-id API) are refused whatever the version said; 3.x
    /// headers pass; an install without headers is named as such.
    #[test]
    fn headers_without_the_3x_api_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path();
        let e = check_install_headers(home, "3.4.0 (from its stamp)")
            .unwrap_err()
            .to_string();
        assert!(e.contains("it has no headers in"), "{e}");
        let include = home.join("include/rocshmem");
        std::fs::create_dir_all(include.join("detail")).unwrap();
        std::fs::write(
            include.join("rocshmem.hpp"),
            "#pragma once\n#include <mpi.h>\nnamespace rocshmem { void rocshmem_init(); }\n",
        )
        .unwrap();
        let e = check_install_headers(home, "not told (no stamp)")
            .unwrap_err()
            .to_string();
        for part in [
            "is not a 3.x install: none of its 1 headers",
            "declares rocshmem_get_uniqueid",
            "rocshmem.hpp includes mpi.h, as 2.x does",
            "(its version: not told (no stamp))",
            "needs rocSHMEM 3.x or newer",
            "cargo xtask build-rocshmem",
        ] {
            assert!(e.contains(part), "`{part}` not in {e}");
        }
        std::fs::write(
            include.join("detail/uniqueid.hpp"),
            "int rocshmem_get_uniqueid(rocshmem_uniqueid_t *uid);\n",
        )
        .unwrap();
        check_install_headers(home, "3.4.0").unwrap();
    }

    #[test]
    fn only_3_and_newer_are_supported_and_the_error_names_the_fix() {
        assert!(supported("3.0.0") && supported("3.4.0") && supported("4.1"));
        assert!(!supported("2.0.0") && !supported("1.6.3"));
        let e = check_source("2.0.0", Path::new("/src/CMakeLists.txt"), "use the pin")
            .unwrap_err()
            .to_string();
        for part in [
            "rocSHMEM 2.0.0",
            "/src/CMakeLists.txt",
            "3.x",
            "Fix: use the pin",
        ] {
            assert!(e.contains(part), "{part}: {e}");
        }
        let e = check_install(
            "2.0.0",
            Path::new("/p"),
            Path::new("/p/symmem-rocshmem-stamp.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("version 2.0.0") && e.contains("cargo xtask build-rocshmem"));
    }

    #[test]
    fn package_versions_are_read() {
        let text = "set(PACKAGE_VERSION \"2.0.0\")\nif(x)\nendif()\n";
        assert_eq!(package_version(text).as_deref(), Some("2.0.0"));
        assert_eq!(package_version("set(X 1)\n"), None);
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

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

//! The launcher's and the engine's versions, for the header of a run.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `mpirun --version`'s first line (`mpirun (Open MPI) 4.1.4`), or why there is none.
pub fn launcher_version() -> String {
    let Ok(mpirun) = crate::find_mpirun() else {
        return format!("mpirun: not found ({})", crate::OPEN_MPI_FIX);
    };
    match Command::new(&mpirun).arg("--version").output() {
        Ok(out) => String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .map(str::to_string)
            .unwrap_or_else(|| format!("{}: --version printed nothing", mpirun.display())),
        Err(e) => format!("{}: {e}", mpirun.display()),
    }
}

/// The PMIx the machine has (`PMIx 4.2.2 (<header>)`), read from its `pmix_version.h`, or
/// why there is none.
pub fn engine_version() -> String {
    let Some(header) = pmix_version_header() else {
        return format!("PMIx: no pmix_version.h found ({})", crate::OPEN_MPI_FIX);
    };
    let text = std::fs::read_to_string(&header).unwrap_or_default();
    let part = |name: &str| {
        text.lines().find_map(|l| {
            let rest = l.trim().strip_prefix("#define ")?.strip_prefix(name)?;
            Some(rest.trim().trim_end_matches('L').to_string())
        })
    };
    match (
        part("PMIX_VERSION_MAJOR"),
        part("PMIX_VERSION_MINOR"),
        part("PMIX_VERSION_RELEASE"),
    ) {
        (Some(a), Some(b), Some(c)) => format!("PMIx {a}.{b}.{c} ({})", header.display()),
        _ => format!("PMIx: no version in {}", header.display()),
    }
}

/// Debian puts PMIx's headers in `/usr/lib/<triplet>/pmix2/include`; other builds in the
/// standard include folder.
fn pmix_version_header() -> Option<PathBuf> {
    let mut candidates = vec![
        PathBuf::from("/usr/include/pmix_version.h"),
        PathBuf::from("/usr/local/include/pmix_version.h"),
    ];
    if let Ok(entries) = std::fs::read_dir("/usr/lib") {
        for entry in entries.flatten() {
            candidates.push(entry.path().join("pmix2/include/pmix_version.h"));
        }
    }
    candidates.into_iter().find(|p| Path::is_file(p))
}

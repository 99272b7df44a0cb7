//! The rocSHMEM install a rocshmem shim links (one `cargo xtask build-rocshmem` made, see
//! [`crate::rocshmem`]): found from `--rocshmem-home` or `ROCSHMEM_HOME`, checked (version,
//! headers, targets) against its stamp, described and keyed by it; and ROCm, given to CMake as
//! definitions only.

use super::args::{Args, default_targets, from_env};
use super::key::{Library, ROCSHMEM_PREFIX_KEY, ROCSHMEM_STAMP_KEY, file_identity};
use crate::rocm;
use crate::rocshmem::install::{InstallStamp, read_stamp};
use crate::targets::{GpuTargets, TargetId};
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use symmem::ProviderKind;
use xshell::Shell;

/// The folder of `home`'s rocshmem-config.cmake (lib/ or lib64/), if it has one.
fn rocshmem_config_dir(home: &Path) -> Option<PathBuf> {
    ["lib/cmake/rocshmem", "lib64/cmake/rocshmem"]
        .iter()
        .map(|d| home.join(d))
        .find(|d| d.join("rocshmem-config.cmake").is_file())
}

/// Checks that `home` is a rocSHMEM install that CMake can find.
pub(super) fn check_rocshmem_home(home: &Path) -> anyhow::Result<()> {
    if rocshmem_config_dir(home).is_none() {
        bail!(
            "{} is not a rocSHMEM install (no lib/cmake/rocshmem/rocshmem-config.cmake): build \
             one with `cargo xtask build-rocshmem --arch <arch>` and pass the prefix it prints \
             (--rocshmem-home, or ROCSHMEM_HOME)",
            home.display()
        );
    }
    Ok(())
}

/// CMake definitions for the rocSHMEM backend. The ROCm location travels only here: a
/// definition reaches CMake's package lookups and its HIP compiler check, whereas an exported
/// ROCM_PATH also reaches clang, and Debian's clang then looks for its device libraries under
/// it (they are in /usr/lib/llvm-<N>/lib/clang/<N>/amdgcn/bitcode) and fails. rocSHMEM's
/// package folder is given as `rocshmem_DIR` too: CMake keeps a package folder it found in its
/// cache and would not look again when the prefix path changes.
pub(super) fn rocshmem_defines(home: &Path, rocm: Option<&rocm::HipRoot>) -> Vec<(String, String)> {
    let mut prefix_path = home.display().to_string();
    let config_dir = rocshmem_config_dir(home).unwrap_or_else(|| home.join("lib/cmake/rocshmem"));
    let mut defines = vec![("rocshmem_DIR".to_string(), config_dir.display().to_string())];
    if let Some(rocm) = rocm {
        let root = rocm.root.display().to_string();
        prefix_path.push(';');
        prefix_path.push_str(&root);
        defines.push(("ROCM_PATH".into(), root.clone()));
        defines.push(("CMAKE_HIP_COMPILER_ROCM_ROOT".into(), root));
        if let Some(clang) = &rocm.hip_clang {
            defines.push(("CMAKE_HIP_COMPILER".into(), clang.display().to_string()));
        }
    }
    defines.insert(0, ("CMAKE_PREFIX_PATH".into(), prefix_path));
    defines
}

/// The rocSHMEM install in `home`, as its stamp (written by build-rocshmem) describes it.
pub(super) fn rocshmem_library(home: &Path, stamp: Option<&InstallStamp>) -> Library {
    let archive = home.join("lib/librocshmem.a");
    let mut key = vec![
        (ROCSHMEM_PREFIX_KEY.to_string(), home.display().to_string()),
        ("rocshmem.archive".to_string(), file_identity(&archive)),
    ];
    let describe = match stamp {
        Some(stamp) => {
            key.push((ROCSHMEM_STAMP_KEY.into(), stamp.hash.clone()));
            format!(
                "rocSHMEM {} at {} for {} (prefix {}, stamp {})",
                stamp.version,
                &stamp.commit[..stamp.commit.len().min(12)],
                stamp.targets,
                home.display(),
                &stamp.hash[..stamp.hash.len().min(12)]
            )
        }
        None => format!(
            "rocSHMEM at {} (no {}: not made by `cargo xtask build-rocshmem`, so its version, \
             commit and targets are not known)",
            home.display(),
            crate::rocshmem::plan::STAMP
        ),
    };
    Library { describe, key }
}

/// The shim's HIP targets (gfx942 when none are given, as its CMakeLists.txt defaults), each
/// of which the rocSHMEM install must have been built for: its stamp lists them. A device link
/// against an install without that processor fails, or the kernels find no code at run time.
fn check_targets(
    home: &Path,
    asked: Option<&GpuTargets>,
    stamp: Option<&InstallStamp>,
) -> anyhow::Result<()> {
    let default = default_targets(ProviderKind::Rocshmem);
    let asked = match asked.or(default.as_ref()) {
        Some(targets) => targets.hip("the rocshmem shim")?,
        None => &[],
    };
    let Some(stamp) = stamp else {
        return Ok(());
    };
    let built = TargetId::parse_list(&stamp.targets).map_err(|e| {
        anyhow::anyhow!(
            "the stamp of {} lists targets {:?} that do not parse ({e}): rebuild it with `cargo \
             xtask build-rocshmem`",
            home.display(),
            stamp.targets
        )
    })?;
    let missing: Vec<String> = asked
        .iter()
        .filter(|t| !built.iter().any(|b| b.processor == t.processor))
        .map(ToString::to_string)
        .collect();
    if !missing.is_empty() {
        bail!(
            "the rocSHMEM install {} was built for {} only, not for {}: pass --arch with targets \
             it has (e.g. --arch {}), or build rocSHMEM for them (cargo xtask build-rocshmem \
             --arch {}) and pass that prefix",
            home.display(),
            stamp.targets,
            missing.join(","),
            stamp.targets,
            missing.join(",")
        );
    }
    Ok(())
}

/// Refuses an install older than the shim supports: by its stamp's version, else by the
/// version its CMake package declares; then, whatever those said, by its headers (2.x
/// headers under a 3.x stamp, or an install whose version cannot be told).
fn check_rocshmem_version(home: &Path, stamp: Option<&InstallStamp>) -> anyhow::Result<()> {
    use crate::rocshmem::support;
    let said = if let Some(stamp) = stamp {
        let file = home.join(crate::rocshmem::plan::STAMP);
        support::check_install(&stamp.version, home, &file)?;
        format!("{} from {}", stamp.version, file.display())
    } else {
        let dir = rocshmem_config_dir(home).unwrap_or_else(|| home.join("lib/cmake/rocshmem"));
        let file = dir.join("rocshmem-config-version.cmake");
        match std::fs::read_to_string(&file) {
            Err(_) => format!(
                "cannot be told: no {} and no {}",
                home.join(crate::rocshmem::plan::STAMP).display(),
                file.display()
            ),
            Ok(text) => match support::package_version(&text) {
                Some(version) if version.starts_with(|c: char| c.is_ascii_digit()) => {
                    support::check_install(&version, home, &file)?;
                    format!("{version} from {}", file.display())
                }
                Some(version) => format!(
                    "cannot be told: {} says `{version}`, which is not a version",
                    file.display()
                ),
                None => format!("cannot be told: {} sets no PACKAGE_VERSION", file.display()),
            },
        }
    };
    support::check_install_headers(home, &said)
}

pub(super) fn rocshmem_setup(
    sh: &Shell,
    args: &Args,
    defines: &mut Vec<(String, String)>,
) -> anyhow::Result<Library> {
    let home = from_env(args.rocshmem_home.as_deref(), &["ROCSHMEM_HOME"]).with_context(|| {
        format!(
            "rocSHMEM not found (no --rocshmem-home, and ROCSHMEM_HOME is {}): build it first \
             with `exports=$(cargo xtask build-rocshmem --arch gfx942) && eval \"$exports\"`, \
             or pass --rocshmem-home DIR",
            if std::env::var_os("ROCSHMEM_HOME").is_some() {
                "empty"
            } else {
                "unset"
            }
        )
    })?;
    let home = std::path::absolute(&home).unwrap_or(home);
    check_rocshmem_home(&home)?;
    let stamp = read_stamp(&home)?;
    check_rocshmem_version(&home, stamp.as_ref())?;
    check_targets(&home, args.arch.as_ref(), stamp.as_ref())?;
    let library = rocshmem_library(&home, stamp.as_ref());
    let rocm = rocm::hip_root(sh, args.rocm_path.as_deref(), &rocm::Search::from_process())?;
    match &rocm {
        Some(r) => eprintln!(
            "ROCm    {} ({}); HIP clang: {}",
            r.root.display(),
            r.found,
            r.hip_clang
                .as_deref()
                .map_or_else(|| "left to CMake".to_string(), |c| c.display().to_string())
        ),
        None => eprintln!(
            "ROCm    not found (no --rocm-path, $ROCM_PATH, hipconfig or /opt/rocm): left to \
             CMake"
        ),
    }
    defines.extend(rocshmem_defines(&home, rocm.as_ref()));
    Ok(library)
}

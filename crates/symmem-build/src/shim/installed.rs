//! What an installed shim is, read back from the stamp its build wrote ([`installed`]): what
//! `cargo xtask wheel` packages and records.

use super::args::default_targets;
use super::key::{
    NVSHMEM_VERSION_KEY, ROCSHMEM_PREFIX_KEY, ROCSHMEM_STAMP_KEY, SHIM_STAMP, UNKNOWN_VERSION,
};
use crate::cmake;
use crate::rocshmem::install::read_stamp;
use crate::targets::GpuTargets;
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use symmem::ProviderKind;

/// What an installed shim is, as the stamp a build wrote next to its `lib/` says: what
/// `cargo xtask wheel` packages and records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Installed {
    /// The library (`<out>/lib/libsymmem_shim_<backend>.so`).
    pub library: PathBuf,
    pub backend: ProviderKind,
    /// The GPU targets it has code for (given with `--arch`, else [`default_targets`]).
    pub targets: GpuTargets,
    /// The SHMEM library's version: NVSHMEM's header, or the build-rocshmem stamp of the
    /// rocSHMEM install; `None` where the install does not say.
    pub shmem_version: Option<String>,
    /// rocSHMEM's commit, from its build-rocshmem stamp; `None` for NVSHMEM.
    pub shmem_commit: Option<String>,
}

/// The shim that a build with `--out-dir out` installed there, or an error naming the build
/// to run: no stamp, no library, or a rocSHMEM install that changed since.
pub fn installed(out: &Path) -> anyhow::Result<Installed> {
    let path = out.join(SHIM_STAMP);
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "{} holds no shim made by `cargo xtask build-shim` (reading {}): build one with \
             `cargo xtask build-shim --backend <backend> --out-dir {}`",
            out.display(),
            path.display(),
            out.display()
        )
    })?;
    let bad = |why: String| {
        anyhow::anyhow!(
            "{} is not a build-shim stamp ({why}): build the shim again with `cargo xtask \
             build-shim --out-dir {}`",
            path.display(),
            out.display()
        )
    };
    let table: toml::Table = toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let inputs = table.get("inputs").and_then(toml::Value::as_table);
    let input = |name: &str| {
        inputs
            .and_then(|i| i.get(name))
            .and_then(toml::Value::as_str)
    };
    let backend_key = format!("define.{}", cmake::SHIM_BACKEND_DEFINE);
    let backend = input(&backend_key)
        .and_then(ProviderKind::from_name)
        .filter(|b| b.is_gpu())
        .ok_or_else(|| bad(format!("no GPU provider in inputs.{backend_key:?}")))?;
    let targets = match input(&format!("define.{}", cmake::SHIM_ARCHS_DEFINE)) {
        Some(list) => GpuTargets::parse(&list.replace(';', ","))
            .map_err(|e| bad(format!("its targets {list:?}: {e}")))?,
        None => default_targets(backend).expect("a GPU provider has default targets"),
    };
    let library = out
        .join("lib")
        .join(backend.shim_library().unwrap_or_default());
    if !library.is_file() {
        bail!(
            "{} says a {} shim was built there, but {} is missing: build it again with `cargo \
             xtask build-shim --backend {} --out-dir {}`",
            path.display(),
            backend.name(),
            library.display(),
            backend.name(),
            out.display()
        );
    }
    let (shmem_version, shmem_commit) = match backend {
        ProviderKind::Rocshmem => {
            let prefix = input(ROCSHMEM_PREFIX_KEY)
                .ok_or_else(|| bad(format!("no inputs.{ROCSHMEM_PREFIX_KEY:?}")))?;
            match read_stamp(Path::new(prefix))? {
                Some(stamp) if input(ROCSHMEM_STAMP_KEY) != Some(stamp.hash.as_str()) => bail!(
                    "the rocSHMEM install {prefix} changed since the shim in {} was built \
                     against it: build the shim again (cargo xtask build-shim --backend \
                     rocshmem --out-dir {})",
                    out.display(),
                    out.display()
                ),
                Some(stamp) => (Some(stamp.version), Some(stamp.commit)),
                None => (None, None),
            }
        }
        ProviderKind::Nvshmem => (
            input(NVSHMEM_VERSION_KEY)
                .filter(|v| *v != UNKNOWN_VERSION)
                .map(str::to_string),
            None,
        ),
        // Refused above: a stamp names a GPU provider.
        ProviderKind::Host => (None, None),
    };
    Ok(Installed {
        library,
        backend,
        targets,
        shmem_version,
        shmem_commit,
    })
}

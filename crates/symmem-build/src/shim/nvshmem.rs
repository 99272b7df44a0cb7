//! The NVSHMEM install an nvshmem shim links: found from `--nvshmem-home` or `NVSHMEM_HOME`,
//! with nvcc, described and keyed by its version header and libraries.

use super::args::{Args, from_env};
use super::key::{Library, NVSHMEM_VERSION_KEY, UNKNOWN_VERSION, file_identity};
use crate::tools;
use anyhow::{Context, bail};
use std::path::Path;

/// NVSHMEM's version from `include/non_abi/nvshmem_version.h`, when it is there.
fn nvshmem_version(home: &Path) -> Option<String> {
    let text = std::fs::read_to_string(home.join("include/non_abi/nvshmem_version.h")).ok()?;
    let field = |name: &str| {
        text.lines().find_map(|l| {
            let mut words = l.split_whitespace();
            (words.next()? == "#define" && words.next()? == name)
                .then(|| words.next()?.parse::<u32>().ok())
                .flatten()
        })
    };
    let [major, minor, patch] =
        ["MAJOR", "MINOR", "PATCH"].map(|part| field(&format!("NVSHMEM_VENDOR_{part}_VERSION")));
    Some(format!("{}.{}.{}", major?, minor?, patch?))
}

/// The NVSHMEM install in `home`: its version header and the libraries the shim links.
pub(super) fn nvshmem_library(home: &Path) -> Library {
    let version = nvshmem_version(home);
    let mut key = vec![("nvshmem.prefix".to_string(), home.display().to_string())];
    key.push((
        NVSHMEM_VERSION_KEY.into(),
        version.clone().unwrap_or_else(|| UNKNOWN_VERSION.into()),
    ));
    for lib in ["libnvshmem_device.a", "libnvshmem_host.so.3"] {
        key.push((
            format!("nvshmem.{lib}"),
            file_identity(&home.join("lib").join(lib)),
        ));
    }
    Library {
        describe: format!(
            "NVSHMEM {} (prefix {})",
            version
                .as_deref()
                .unwrap_or("of unknown version (no include/non_abi/nvshmem_version.h)"),
            home.display()
        ),
        key,
    }
}

pub(super) fn nvshmem_setup(
    args: &Args,
    defines: &mut Vec<(String, String)>,
) -> anyhow::Result<Library> {
    if let Some(arch) = &args.arch {
        arch.cuda("the nvshmem shim")?;
    }
    let nvcc = tools::nvcc(args.nvcc.as_deref())?;
    let home = from_env(args.nvshmem_home.as_deref(), &["NVSHMEM_HOME"]).context(
        "NVSHMEM not found: pass --nvshmem-home or set NVSHMEM_HOME to the folder with \
         include/nvshmem.h and lib/libnvshmem_host.so.3 (`source scripts/gpu/nvshmem-sdk.sh` \
         installs the pinned wheel, pins.toml [nvshmem], and sets it)",
    )?;
    if !home.join("include/nvshmem.h").is_file() {
        bail!(
            "{} has no include/nvshmem.h: point --nvshmem-home at an NVSHMEM install",
            home.display()
        );
    }
    let home = std::path::absolute(&home).unwrap_or(home);
    // A toolkit root for CMake: the folder above nvcc's bin/.
    let root = nvcc
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("/"))
        .to_path_buf();
    defines.push(("CMAKE_CUDA_COMPILER".into(), nvcc.display().to_string()));
    defines.push(("CUDAToolkit_ROOT".into(), root.display().to_string()));
    defines.push(("NVSHMEM_HOME".into(), home.display().to_string()));
    Ok(nvshmem_library(&home))
}

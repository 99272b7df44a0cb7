//! Finding programs on this machine (git, CMake, Ninja or Make, nvcc) for every command that
//! needs them, through `symmem_process::find_program`; each miss names the fix. ROCm's are
//! found in [`crate::rocm`].

use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use symmem_process::{ProgramError, SearchPath, find_program};
use xshell::{Shell, cmd};

/// How CMake drives the build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Generator {
    Ninja,
    Makefiles,
}

impl Generator {
    pub fn cmake_name(self) -> &'static str {
        match self {
            Self::Ninja => "Ninja",
            Self::Makefiles => "Unix Makefiles",
        }
    }
}

/// `program` on this process's PATH (or at its path, when it has a `/`); `hint` says how to
/// get it when it is not there.
pub fn find(program: impl AsRef<Path>, hint: &str) -> Result<PathBuf, ProgramError> {
    find_program(program, &SearchPath::from_env(), hint)
}

/// `program` as a command line names it: a path when it has a `/`, else a name on PATH; `None`
/// when it is not there, for a caller that words its own message.
pub fn program(program: &Path) -> Option<PathBuf> {
    find(program, "").ok()
}

pub fn git() -> anyhow::Result<PathBuf> {
    Ok(find(
        "git",
        "install git (apt-get install git), or build from a local checkout with --source DIR",
    )?)
}

/// CMake >= 3.20 (rocSHMEM's minimum).
pub fn cmake(sh: &Shell) -> anyhow::Result<PathBuf> {
    let cmake = find(
        "cmake",
        "install CMake >= 3.20 (apt-get install cmake, pip install cmake) or run inside `nix \
         develop`",
    )?;
    let out = cmd!(sh, "{cmake} --version")
        .quiet()
        .ignore_status()
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

/// nvcc: `given` (--nvcc), else `$CUDACXX`, else nvcc on PATH, else `$CUDA_HOME/bin/nvcc`
/// (or `$CUDA_PATH`'s).
pub fn nvcc(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let found = given
        .map(Path::to_path_buf)
        .or_else(|| var("CUDACXX"))
        .or_else(|| program(Path::new("nvcc")))
        .or_else(|| {
            var("CUDA_HOME")
                .or_else(|| var("CUDA_PATH"))
                .map(|h| h.join("bin/nvcc"))
        });
    match found {
        Some(p) if p.is_file() => Ok(std::path::absolute(&p).unwrap_or(p)),
        _ => bail!(
            "nvcc not found: install the CUDA toolkit and pass --nvcc or set CUDACXX (or \
             `source scripts/gpu/nvshmem-sdk.sh`: nvcc and NVSHMEM from PyPI at the versions \
             of pins.toml [nvshmem])"
        ),
    }
}

/// Ninja when present, else Make.
pub fn generator() -> anyhow::Result<Generator> {
    if program(Path::new("ninja")).is_some() {
        Ok(Generator::Ninja)
    } else if program(Path::new("make")).is_some() {
        Ok(Generator::Makefiles)
    } else {
        bail!(
            "neither ninja nor make found on PATH: install ninja (apt-get install ninja-build, pip install ninja)"
        )
    }
}

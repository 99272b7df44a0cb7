//! Where the workspace is and how to build its binaries.

use anyhow::{Context, bail};
use std::ffi::{CString, OsString};
use std::path::{Path, PathBuf};
use symmem::ProviderKind;
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

/// One binary of the workspace.
#[derive(Clone, Copy, Debug)]
pub struct Binary {
    pub package: &'static str,
    pub bin: &'static str,
}

/// The conformance matrix driver (the product).
pub const MATRIX: Binary = Binary {
    package: "symmem-matrix",
    bin: "symmem-matrix",
};
/// The rank binary the matrix starts.
pub const RANK: Binary = Binary {
    package: "symmem-conformance",
    bin: "symmem-conformance",
};
/// The launcher for users' own rank programs.
pub const RUN: Binary = Binary {
    package: "symmem-launch",
    bin: "symmem-run",
};

/// The cargo profile a build uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    Dev,
    /// `[profile.image]` (Cargo.toml): what the images install.
    Image,
}

impl Profile {
    /// Its name for `cargo build --profile`, and its folder under target/.
    pub const fn cargo_name(self) -> &'static str {
        match self {
            Profile::Dev => "dev",
            Profile::Image => "image",
        }
    }
}

/// Builds `binaries` with one cargo run and returns their paths, in order, as cargo reports
/// them.
pub fn build_binaries(sh: &Shell, binaries: &[Binary]) -> anyhow::Result<Vec<PathBuf>> {
    build_binaries_as(sh, binaries, Profile::Dev)
}

/// [`build_binaries`] with the given profile.
pub fn build_binaries_as(
    sh: &Shell,
    binaries: &[Binary],
    profile: Profile,
) -> anyhow::Result<Vec<PathBuf>> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    build_binaries_with(sh, &cargo, binaries, profile)
}

fn build_binaries_with(
    sh: &Shell,
    cargo: &std::ffi::OsStr,
    binaries: &[Binary],
    profile: Profile,
) -> anyhow::Result<Vec<PathBuf>> {
    let names: Vec<&str> = binaries.iter().map(|b| b.bin).collect();
    let names = names.join(" and ");
    if crate::tools::program(Path::new(cargo)).is_none() {
        bail!(
            "cannot build {names}: `{}` was not found (is cargo on PATH?). Without cargo, run \
             the installed programs instead (`symmem-matrix test --help`)",
            Path::new(cargo).display()
        );
    }
    let mut selection = vec!["--profile", profile.cargo_name()];
    for b in binaries {
        selection.extend(["--package", b.package, "--bin", b.bin]);
    }
    let _root = sh.push_dir(project_root());
    // Cargo's messages (stderr) show as it builds; its JSON (stdout) is read here.
    let stdout = cmd!(
        sh,
        "{cargo} build {selection...} --message-format json-render-diagnostics"
    )
    .quiet()
    .read()
    .map_err(|err| {
        anyhow::anyhow!("building {names} failed (see the compiler output above): {err}")
    })?;
    let mut built: Vec<Option<PathBuf>> = vec![None; binaries.len()];
    for line in stdout.lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let is_bin = message["target"]["kind"]
            .as_array()
            .is_some_and(|k| k.iter().any(|k| k == "bin"));
        let at = binaries
            .iter()
            .position(|b| message["target"]["name"] == b.bin);
        if let (true, Some(at), Some(exe)) = (is_bin, at, message["executable"].as_str()) {
            built[at] = Some(PathBuf::from(exe));
        }
    }
    built
        .into_iter()
        .zip(binaries)
        .map(|(path, b)| {
            path.with_context(|| format!("cargo built {} but did not report its executable", b.bin))
        })
        .collect()
}

/// Becomes `program args...` with `env` added to this process's environment (exec(3): the
/// same process, so its terminal, signals and exit code are the program's own). Returns only
/// why it could not.
pub fn exec(program: &Path, args: &[OsString], env: &[(&str, PathBuf)]) -> anyhow::Error {
    let (path, argv, envp) = match exec_parts(program, args, env) {
        Ok(parts) => parts,
        Err(e) => return e,
    };
    match nix::unistd::execve(&path, &argv, &envp) {
        Err(errno) => anyhow::anyhow!("cannot run {}: {errno}", program.display()),
        Ok(never) => match never {},
    }
}

/// [`exec`]'s program, argv and environment as C strings.
fn exec_parts(
    program: &Path,
    args: &[OsString],
    env: &[(&str, PathBuf)],
) -> anyhow::Result<(CString, Vec<CString>, Vec<CString>)> {
    use std::os::unix::ffi::OsStrExt;
    let c_string = |bytes: &[u8]| {
        CString::new(bytes).map_err(|_| {
            anyhow::anyhow!(
                "cannot run {}: {:?} holds a NUL byte, which no argument or environment \
                 variable can: remove it",
                program.display(),
                String::from_utf8_lossy(bytes)
            )
        })
    };
    let path = c_string(program.as_os_str().as_bytes())?;
    let mut argv = vec![path.clone()];
    for arg in args {
        argv.push(c_string(arg.as_bytes())?);
    }
    let inherited = std::env::vars_os().filter(|(name, _)| !env.iter().any(|(n, _)| name == n));
    let added = env
        .iter()
        .map(|(name, value)| (OsString::from(name), value.clone().into_os_string()));
    let mut envp = Vec::new();
    for (name, value) in inherited.chain(added) {
        envp.push(c_string(
            &[name.as_bytes(), b"=", value.as_bytes()].concat(),
        )?);
    }
    Ok((path, argv, envp))
}

/// Where `cargo xtask build-shim --backend BACKEND` builds and installs the shim.
pub fn shim_dir(backend: ProviderKind) -> PathBuf {
    symmem_build::shim::default_out(&target_dir(), backend)
}

/// The library `cargo xtask build-shim` installs for `backend` (in [`shim_dir`]); `None` for
/// the host provider, which has no shim.
pub fn built_shim(backend: ProviderKind) -> Option<PathBuf> {
    let file = backend.shim_library()?;
    Some(shim_dir(backend).join("lib").join(file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_cargo_the_error_names_the_installed_program() {
        let err = build_binaries_with(
            &Shell::new().unwrap(),
            std::ffi::OsStr::new("/nonexistent/cargo"),
            &[Binary {
                package: "symmem-matrix",
                bin: "symmem-matrix",
            }],
            Profile::Dev,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("`/nonexistent/cargo` was not found")
                && err.contains("symmem-matrix test --help"),
            "{err}"
        );
        assert!(!err.contains("No such file or directory"), "{err}");
    }

    #[test]
    fn the_built_shim_is_under_target_shim() {
        let lib = built_shim(ProviderKind::Rocshmem).unwrap();
        assert!(
            lib.ends_with("shim/rocshmem/lib/libsymmem_shim_rocshmem.so"),
            "{}",
            lib.display()
        );
        assert_eq!(built_shim(ProviderKind::Host), None);
    }
}

//! `cargo xtask wheel`: the Python package as one abi3 wheel with a GPU shim inside, so that
//! `pip install` is the whole set-up on a GPU machine.

use crate::project::{project_root, target_dir};
use crate::runner::{self, Output};
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use symmem::ProviderKind;
use symmem_build::shim::{self, Installed};
use symmem_build::targets::GpuTargets;
use xshell::{Shell, cmd};

/// Build the Python wheel with the GPU shim inside: `pip install` it, and symmem's GPU
/// provider needs neither `cargo xtask build-shim` nor SYMMEM_SHIM_LIB.
///
/// The shim is built exactly as `cargo xtask build-shim` builds it (the same flags, below, and
/// the same target/shim/<backend>), or taken from --shim-from. Then maturin (pins.toml
/// [python] maturin, installed in the venv target/py-ci/venv) builds the abi3 wheel (CPython
/// 3.9+) from a staged copy of crates/symmem-py's Python project (target/wheel/<backend>/project;
/// the source tree is not touched) with two files added:
///
///   symmem/_lib/libsymmem_shim_<backend>.so   the shim
///   symmem/_lib/BUILD.json   backend, arch, symmem version and commit, NVSHMEM or rocSHMEM
///                             version (and rocSHMEM's commit)
///
/// Its version carries a local label naming the backend and the GPUs: 0.1.0+nvshmem.sm90,
/// 0.1.0+rocshmem.gfx90a.gfx942 (BUILD.json has the exact targets).
///
/// NVSHMEM: the wheel requires nvidia-nvshmem-cu<N>==<pins.toml [nvshmem] version> (N: the
/// CUDA major of [nvshmem] cuda), and the shim must have been built against that version
/// (`source scripts/gpu/nvshmem-sdk.sh` fetches it); symmem loads its libnvshmem_host.so.3
/// from site-packages at init. rocSHMEM is linked into its shim; the ROCm runtime it needs
/// (libamdhip64, libhsa-runtime64) is the machine's.
///
/// The wheel's path is the only line on stdout; the tools' output goes to stderr and to
/// target/wheel/<backend>/wheel.log. Needs python3 (3.9+, with venv) and PyPI for maturin
/// on the first run, besides what build-shim needs.
///
/// Examples:
///   source scripts/gpu/nvshmem-sdk.sh && cargo xtask wheel --backend nvshmem --release
///   pip install target/wheel/symmem-0.1.0+nvshmem.sm90-cp39-abi3-*.whl   # pulls NVSHMEM
///   whl=$(cargo xtask wheel --backend nvshmem --arch 90,100 --out dist)
///   exports=$(cargo xtask build-rocshmem --arch gfx942) && eval "$exports"
///   cargo xtask wheel --backend rocshmem --arch gfx942 --release
///   cargo xtask wheel --backend rocshmem --shim-from DIR   # a shim built elsewhere (ROCm box)
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
// Its own group name: the flattened build-shim arguments' struct is called Args too.
#[group(id = "wheel")]
pub struct Args {
    /// Package the shim that `cargo xtask build-shim --out-dir DIR` installed in DIR (built
    /// before, or on another machine: a ROCm container, a Debian root) instead of building
    /// one; its stamp says what it is. --backend (and --arch, if given) must match it.
    #[arg(
        long,
        value_name = "DIR",
        conflicts_with_all = ["nvcc", "nvshmem_home", "rocshmem_home", "rocm_path", "out_dir"]
    )]
    shim_from: Option<PathBuf>,
    /// Where the wheel goes (default: target/wheel); one of the same name is replaced.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// An optimised, stripped extension (maturin --release --strip); default: a debug build,
    /// as `maturin build` makes.
    #[arg(long)]
    release: bool,
    // Last: the heading applies to every argument after it.
    #[command(flatten, next_help_heading = "The shim (as `cargo xtask build-shim`)")]
    shim: shim::Args,
}

pub fn run(sh: &Shell, args: Args) -> anyhow::Result<()> {
    let root = project_root();
    let pins = crate::pins::Pins::load(&root.join("pins.toml"))?;
    let built = match &args.shim_from {
        Some(dir) => shim::installed(&std::path::absolute(dir)?)?,
        None => {
            let library = shim::build_library(sh, &crate::build_rocshmem::workspace(), &args.shim)?;
            let out = library
                .parent()
                .and_then(Path::parent)
                .with_context(|| format!("{} is not in <out>/lib/", library.display()))?;
            shim::installed(out)?
        }
    };
    check_shim(&built, args.shim.backend, args.shim.arch.as_ref())?;
    let runtime = match built.backend {
        ProviderKind::Nvshmem => Some(nvshmem_runtime(&built, &pins)?),
        // rocSHMEM is linked into the shim; the host provider has none (`installed` refuses it).
        ProviderKind::Rocshmem | ProviderKind::Host => None,
    };
    let version = package_version(sh, &root)?;
    let commit = checkout_commit(sh, &root);
    let info = BuildInfo::new(&built, &version, commit, runtime.as_ref());
    let work = target_dir().join("wheel").join(built.backend.name());
    let project = stage(sh, &root, &work, &built, &info, runtime.as_ref())?;
    let wheel = maturin(sh, &work, &project, args.release)?;
    let name = wheel
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    let expected = format!("symmem-{}-", info.wheel_version());
    if !name.starts_with(&expected) {
        bail!(
            "maturin made {name}, not a wheel named {expected}*: see {}",
            work.display()
        );
    }
    let out = std::path::absolute(args.out.unwrap_or_else(|| target_dir().join("wheel")))?;
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let dest = out.join(&name);
    std::fs::rename(&wheel, &dest)
        .or_else(|_| std::fs::copy(&wheel, &dest).map(drop))
        .with_context(|| format!("moving {} to {}", wheel.display(), dest.display()))?;
    eprintln!(
        "wheel {} ({}): the {} shim for {}{}",
        dest.display(),
        format_size(&dest),
        built.backend.name(),
        built.targets,
        runtime
            .as_ref()
            .map_or_else(String::new, |r| format!(", requires {}", r.requirement()))
    );
    println!("{}", dest.display());
    Ok(())
}

/// Refuses a shim of another backend or other targets than the command line asks for.
fn check_shim(
    built: &Installed,
    backend: ProviderKind,
    arch: Option<&GpuTargets>,
) -> anyhow::Result<()> {
    if built.backend != backend {
        bail!(
            "{} is a {} shim, not a {} one: pass --backend {} or another --shim-from",
            built.library.display(),
            built.backend.name(),
            backend.name(),
            built.backend.name()
        );
    }
    if let Some(arch) = arch.filter(|a| **a != built.targets) {
        bail!(
            "{} was built for {}, not for {arch}: pass --arch {} or build it for {arch}",
            built.library.display(),
            built.targets,
            built.targets
        );
    }
    Ok(())
}

/// The pip package that brings the SHMEM library a shim loads at run time.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Runtime {
    package: String,
    version: String,
}

impl Runtime {
    fn requirement(&self) -> String {
        format!("{}=={}", self.package, self.version)
    }
}

/// NVSHMEM's pip package at pins.toml's version (named as scripts/gpu/nvshmem-sdk.sh names
/// it: `nvidia-nvshmem-cu<CUDA major>`), which must be the version the shim was built against.
fn nvshmem_runtime(built: &Installed, pins: &crate::pins::Pins) -> anyhow::Result<Runtime> {
    let pin = pins
        .nvshmem
        .as_ref()
        .context("pins.toml has no [nvshmem] table: the NVSHMEM wheel requires its version")?;
    let major = pin.cuda.split('.').next().unwrap_or_default();
    if major.is_empty() || !major.chars().all(|c| c.is_ascii_digit()) {
        bail!(
            "pins.toml [nvshmem] cuda = {:?} does not start with the CUDA major",
            pin.cuda
        );
    }
    let runtime = Runtime {
        package: format!("nvidia-nvshmem-cu{major}"),
        version: pin.version.clone(),
    };
    match &built.shmem_version {
        Some(v) if *v == pin.version => Ok(runtime),
        found => bail!(
            "{} was built against NVSHMEM {}, but the wheel would require {} (pins.toml \
             [nvshmem]): build it against that version (`source scripts/gpu/nvshmem-sdk.sh` \
             fetches it and sets NVSHMEM_HOME), or change the pin",
            built.library.display(),
            found.as_deref().unwrap_or("of unknown version"),
            runtime.requirement()
        ),
    }
}

/// symmem-py's version, as Cargo has it (maturin's own source of it).
fn package_version(sh: &Shell, root: &Path) -> anyhow::Result<String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = root.join("Cargo.toml");
    let text = cmd!(
        sh,
        "{cargo} metadata --no-deps --format-version 1 --manifest-path {manifest}"
    )
    .quiet()
    .read()
    .context("asking cargo for symmem-py's version")?;
    let metadata: serde_json::Value = serde_json::from_str(&text).context("cargo metadata")?;
    metadata["packages"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == "symmem-py"))
        .and_then(|p| p["version"].as_str())
        .map(str::to_string)
        .context("cargo metadata lists no symmem-py package")
}

/// This checkout's commit, `-dirty` when tracked files differ from it; `None` without git.
/// (The commit itself, never `git describe`'s name, which becomes a tag's once tags exist.)
fn checkout_commit(sh: &Shell, root: &Path) -> Option<String> {
    let found = cmd!(sh, "git -C {root} rev-parse HEAD")
        .quiet()
        .ignore_stderr()
        .read();
    match found {
        Ok(commit) => {
            let clean = cmd!(sh, "git -C {root} diff --quiet HEAD --")
                .quiet()
                .ignore_stderr()
                .run()
                .is_ok();
            Some(format!(
                "{}{}",
                commit.trim(),
                if clean { "" } else { "-dirty" }
            ))
        }
        Err(_) => {
            eprintln!(
                "note: {} is not a git checkout: BUILD.json records no commit",
                root.display()
            );
            None
        }
    }
}

/// symmem/_lib/BUILD.json: what the packaged shim is. `symmem._shim` reads `backend`,
/// `library` and the NVSHMEM package and version.
#[derive(serde::Serialize, Debug)]
struct BuildInfo {
    backend: &'static str,
    /// The shim's file name, next to BUILD.json.
    library: String,
    arch: Vec<String>,
    symmem_version: String,
    /// symmem's commit (`-dirty`: with local changes); null outside a git checkout.
    commit: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nvshmem_version: Option<String>,
    /// The pip package whose libnvshmem_host.so.3 the shim loads.
    #[serde(skip_serializing_if = "Option::is_none")]
    nvshmem_package: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rocshmem_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rocshmem_commit: Option<String>,
    /// The local version label (`nvshmem.sm90`).
    #[serde(skip)]
    label: String,
}

impl BuildInfo {
    fn new(
        built: &Installed,
        version: &str,
        commit: Option<String>,
        runtime: Option<&Runtime>,
    ) -> Self {
        let arch = match &built.targets {
            GpuTargets::Cuda(list) => list.iter().map(ToString::to_string).collect(),
            GpuTargets::Hip(list) => list.iter().map(ToString::to_string).collect(),
        };
        // Whose fields the SHMEM library's version and commit go to (NVSHMEM's: the runtime's).
        let rocshmem = match built.backend {
            ProviderKind::Rocshmem => true,
            ProviderKind::Nvshmem | ProviderKind::Host => false,
        };
        Self {
            backend: built.backend.name(),
            library: built.backend.shim_library().unwrap_or_default(),
            arch,
            symmem_version: version.to_string(),
            commit,
            nvshmem_version: runtime.map(|r| r.version.clone()),
            nvshmem_package: runtime.map(|r| r.package.clone()),
            rocshmem_version: built.shmem_version.clone().filter(|_| rocshmem),
            rocshmem_commit: built.shmem_commit.clone().filter(|_| rocshmem),
            label: local_label(built.backend, &built.targets),
        }
    }

    /// The wheel's version: symmem's, with the backend and GPUs as its local label.
    fn wheel_version(&self) -> String {
        format!("{}+{}", self.symmem_version, self.label)
    }
}

/// A PEP 440 local label naming the backend and the GPUs: `nvshmem.sm90.sm100a`,
/// `rocshmem.gfx90a.gfx942` (processors only: target features and -real/-virtual are in
/// BUILD.json).
fn local_label(backend: ProviderKind, targets: &GpuTargets) -> String {
    let mut parts = vec![backend.name().to_string()];
    match targets {
        GpuTargets::Cuda(list) => {
            for arch in list {
                let arch = arch.to_string();
                let number = arch.split('-').next().unwrap_or_default();
                parts.push(format!("sm{number}"));
            }
        }
        GpuTargets::Hip(list) => parts.extend(list.iter().map(|t| t.processor.clone())),
    }
    parts.dedup();
    parts
        .iter()
        .map(|p| {
            p.to_ascii_lowercase()
                .replace(|c: char| !c.is_ascii_alphanumeric(), "")
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// The Python project maturin builds from: crates/symmem-py/pyproject.toml with this wheel's
/// version, dependency and crate, its readme, and its Python sources with the shim added.
/// Returns the project folder (`work/project`, made anew).
fn stage(
    sh: &Shell,
    root: &Path,
    work: &Path,
    built: &Installed,
    info: &BuildInfo,
    runtime: Option<&Runtime>,
) -> anyhow::Result<PathBuf> {
    let crate_dir = root.join("crates/symmem-py");
    let project = work.join("project");
    if project.exists() {
        std::fs::remove_dir_all(&project)
            .with_context(|| format!("removing {}", project.display()))?;
    }
    let text = std::fs::read_to_string(crate_dir.join("pyproject.toml"))
        .with_context(|| format!("reading {}", crate_dir.join("pyproject.toml").display()))?;
    let staged = staged_pyproject(&text, &crate_dir, &info.wheel_version(), runtime)?;
    let python_source = staged.python_source.clone();
    let copy = |from: &Path, to: &Path| -> anyhow::Result<()> {
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::copy(from, to)
            .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
        Ok(())
    };
    if let Some(readme) = &staged.readme {
        copy(&crate_dir.join(readme), &project.join(readme))?;
    }
    // The package's files as the checkout has them (tracked, or new and not ignored): not a
    // build's leftovers such as `maturin develop`'s extension.
    let source = crate_dir.join(&python_source);
    let listed = cmd!(
        sh,
        "git -C {source} ls-files -z --cached --others --exclude-standard -- ."
    )
    .quiet()
    .read()
    .with_context(|| {
        format!(
            "listing the Python sources in {} with git",
            source.display()
        )
    })?;
    for file in listed.split('\0').filter(|f| !f.is_empty()) {
        let from = source.join(file);
        // A tracked file deleted in the working tree is not part of it.
        if from.is_file() {
            copy(&from, &project.join(&python_source).join(file))?;
        }
    }
    let package = project.join(&python_source).join("symmem");
    if !package.join("__init__.py").is_file() {
        bail!(
            "{} has no symmem/__init__.py: is {} symmem's Python project?",
            source.display(),
            crate_dir.display()
        );
    }
    let shim_dir = package.join("_lib");
    copy(&built.library, &shim_dir.join(&info.library))?;
    let json = serde_json::to_string_pretty(info).context("BUILD.json")?;
    std::fs::write(shim_dir.join("BUILD.json"), format!("{json}\n"))
        .with_context(|| format!("writing {}", shim_dir.join("BUILD.json").display()))?;
    std::fs::write(project.join("pyproject.toml"), staged.text)
        .with_context(|| format!("writing {}", project.join("pyproject.toml").display()))?;
    Ok(project)
}

/// The staged pyproject.toml, and the files it names relative to its folder.
struct Staged {
    text: String,
    /// `[project] readme`, when it names a file.
    readme: Option<PathBuf>,
    /// `[tool.maturin] python-source`.
    python_source: PathBuf,
}

/// crates/symmem-py/pyproject.toml for one wheel: a fixed `version` (no longer dynamic),
/// `runtime` added to the dependencies, and maturin pointed at the crate's Cargo.toml.
fn staged_pyproject(
    text: &str,
    crate_dir: &Path,
    version: &str,
    runtime: Option<&Runtime>,
) -> anyhow::Result<Staged> {
    let mut doc: toml::Table = toml::from_str(text).context("parsing pyproject.toml")?;
    let project = doc
        .get_mut("project")
        .and_then(toml::Value::as_table_mut)
        .context("pyproject.toml has no [project] table")?;
    project.insert("version".into(), version.into());
    if let Some(dynamic) = project
        .get_mut("dynamic")
        .and_then(toml::Value::as_array_mut)
    {
        dynamic.retain(|v| v.as_str() != Some("version"));
        if dynamic.is_empty() {
            project.remove("dynamic");
        }
    }
    if let Some(runtime) = runtime {
        let dependencies = project
            .entry("dependencies")
            .or_insert_with(|| toml::Value::Array(vec![]))
            .as_array_mut()
            .context("pyproject.toml's [project] dependencies is not a list")?;
        dependencies.push(runtime.requirement().into());
    }
    let readme = match project.get("readme") {
        None => None,
        Some(toml::Value::String(file)) => Some(PathBuf::from(file)),
        Some(_) => bail!("pyproject.toml's [project] readme is not a file name: stage it here"),
    };
    let maturin = doc
        .get_mut("tool")
        .and_then(|t| t.get_mut("maturin"))
        .and_then(toml::Value::as_table_mut)
        .context("pyproject.toml has no [tool.maturin] table")?;
    let python_source = maturin
        .get("python-source")
        .and_then(toml::Value::as_str)
        .map(PathBuf::from)
        .context("pyproject.toml's [tool.maturin] has no python-source")?;
    let manifest = crate_dir.join("Cargo.toml");
    maturin.insert(
        "manifest-path".into(),
        manifest.display().to_string().into(),
    );
    let body = toml::to_string(&doc).context("writing pyproject.toml")?;
    Ok(Staged {
        text: format!(
            "# Generated by `cargo xtask wheel` from {}: one wheel's version, dependencies \
             and crate.\n{body}",
            crate_dir.join("pyproject.toml").display()
        ),
        readme,
        python_source,
    })
}

/// Builds the wheel from `project` with the pinned maturin (in target/py-ci/venv, made here
/// when missing) and returns it (in `work/dist`, emptied first).
fn maturin(sh: &Shell, work: &Path, project: &Path, release: bool) -> anyhow::Result<PathBuf> {
    let log = work.join("wheel.log");
    let interrupt = symmem_process::SignalGuard::install()?;
    let step = |command: Vec<String>| {
        eprintln!("[wheel] {}", runner::shell_words(&command));
        runner::run(sh, &command, &log, Output::Echo, &interrupt)
    };
    let venv = target_dir().join("py-ci/venv");
    let python = venv.join("bin/python");
    if !python.is_file() {
        let python3 = crate::tools::find(
            "python3",
            "the wheel is built with maturin from PyPI in a venv: install python3 3.9+ with its \
             venv module (Debian: python3-venv)",
        )?;
        step(words([
            python3.as_os_str(),
            "-m".as_ref(),
            "venv".as_ref(),
            venv.as_os_str(),
        ]))?;
    }
    let pins = crate::pins::Pins::load(&project_root().join("pins.toml"))?;
    let range = pins
        .python
        .context("pins.toml has no [python] table: it pins maturin")?
        .maturin;
    step(words([
        python.as_os_str(),
        "-m".as_ref(),
        "pip".as_ref(),
        "install".as_ref(),
        "--quiet".as_ref(),
        "--disable-pip-version-check".as_ref(),
        format!("maturin{range}").as_ref(),
    ]))?;
    let dist = work.join("dist");
    if dist.exists() {
        std::fs::remove_dir_all(&dist).with_context(|| format!("removing {}", dist.display()))?;
    }
    let mut build = words([
        venv.join("bin/maturin").as_os_str(),
        "build".as_ref(),
        "--locked".as_ref(),
        "--interpreter".as_ref(),
        python.as_os_str(),
        "--out".as_ref(),
        dist.as_os_str(),
    ]);
    if release {
        build.extend(["--release".into(), "--strip".into()]);
    }
    let _project = sh.push_dir(project);
    step(build)?;
    let wheels: Vec<PathBuf> = std::fs::read_dir(&dist)
        .with_context(|| format!("reading {}", dist.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "whl"))
        .collect();
    match &wheels[..] {
        [wheel] => Ok(wheel.clone()),
        _ => bail!(
            "maturin left {} wheels in {}, not one: see {}",
            wheels.len(),
            dist.display(),
            log.display()
        ),
    }
}

fn words<const N: usize>(parts: [&std::ffi::OsStr; N]) -> Vec<String> {
    parts
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect()
}

fn format_size(file: &Path) -> String {
    symmem_build::rocshmem::human_bytes(file.metadata().map_or(0, |m| m.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn installed(backend: ProviderKind, arch: &str) -> Installed {
        Installed {
            library: "/out/lib/lib.so".into(),
            backend,
            targets: GpuTargets::parse(arch).unwrap(),
            shmem_version: Some("3.4.0".into()),
            shmem_commit: Some("006ac1".into()),
        }
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    /// --shim-from takes no build flags, and a folder without a build-shim install is refused
    /// naming the build, before any tool runs.
    #[test]
    fn shim_from_takes_an_installed_shim_only() {
        use clap::{CommandFactory as _, Parser as _};
        Cli::command().debug_assert();
        let err = Cli::try_parse_from([
            "wheel",
            "--backend",
            "nvshmem",
            "--shim-from",
            "/x",
            "--nvcc",
            "/y",
        ])
        .err()
        .expect("--shim-from with --nvcc is refused");
        assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict);
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().to_str().unwrap();
        let cli =
            Cli::try_parse_from(["wheel", "--backend", "rocshmem", "--shim-from", from]).unwrap();
        let e = format!("{:#}", run(&Shell::new().unwrap(), cli.args).unwrap_err());
        assert!(
            e.contains("holds no shim made by `cargo xtask build-shim`") && e.contains("--out-dir"),
            "{e}"
        );
    }

    #[test]
    fn the_local_label_names_backend_and_gpus() {
        let label = |backend, arch| local_label(backend, &GpuTargets::parse(arch).unwrap());
        assert_eq!(label(ProviderKind::Nvshmem, "90"), "nvshmem.sm90");
        assert_eq!(
            label(ProviderKind::Nvshmem, "100a,90-real"),
            "nvshmem.sm100a.sm90"
        );
        assert_eq!(label(ProviderKind::Rocshmem, "gfx942"), "rocshmem.gfx942");
        assert_eq!(
            label(ProviderKind::Rocshmem, "gfx942:xnack+,gfx942:xnack-,gfx90a"),
            "rocshmem.gfx90a.gfx942"
        );
    }

    #[test]
    fn build_info_says_what_the_shim_is() {
        let runtime = Runtime {
            package: "nvidia-nvshmem-cu13".into(),
            version: "3.4.5".into(),
        };
        let mut built = installed(ProviderKind::Nvshmem, "90");
        built.shmem_version = Some("3.4.5".into());
        built.shmem_commit = None;
        let info = BuildInfo::new(&built, "0.1.0", Some("abc".into()), Some(&runtime));
        let json: serde_json::Value = serde_json::to_value(&info).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "backend": "nvshmem", "library": "libsymmem_shim_nvshmem.so", "arch": ["90"],
                "symmem_version": "0.1.0", "commit": "abc", "nvshmem_version": "3.4.5",
                "nvshmem_package": "nvidia-nvshmem-cu13"
            })
        );
        assert_eq!(info.wheel_version(), "0.1.0+nvshmem.sm90");
        let built = installed(ProviderKind::Rocshmem, "gfx942:sramecc+");
        let info = BuildInfo::new(&built, "0.1.0", None, None);
        let json: serde_json::Value = serde_json::to_value(&info).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "backend": "rocshmem", "library": "libsymmem_shim_rocshmem.so",
                "arch": ["gfx942:sramecc+"], "symmem_version": "0.1.0", "commit": null,
                "rocshmem_version": "3.4.0", "rocshmem_commit": "006ac1"
            })
        );
    }

    /// The committed pyproject.toml, staged: a fixed version, NVSHMEM's package added to the
    /// dependencies, maturin pointed at the crate; the rest as it was.
    #[test]
    fn the_staged_pyproject_pins_version_dependency_and_crate() {
        let crate_dir = project_root().join("crates/symmem-py");
        let text = std::fs::read_to_string(crate_dir.join("pyproject.toml")).unwrap();
        let runtime = Runtime {
            package: "nvidia-nvshmem-cu13".into(),
            version: "3.4.5".into(),
        };
        let staged =
            staged_pyproject(&text, &crate_dir, "0.1.0+nvshmem.sm90", Some(&runtime)).unwrap();
        let doc: toml::Table = toml::from_str(&staged.text).unwrap();
        let original: toml::Table = toml::from_str(&text).unwrap();
        let project = doc["project"].as_table().unwrap();
        assert_eq!(project["version"].as_str(), Some("0.1.0+nvshmem.sm90"));
        assert!(
            !project
                .get("dynamic")
                .and_then(toml::Value::as_array)
                .is_some_and(|d| d.iter().any(|v| v.as_str() == Some("version")))
        );
        let dependencies = project["dependencies"].as_array().unwrap();
        assert_eq!(
            dependencies.last().and_then(toml::Value::as_str),
            Some("nvidia-nvshmem-cu13==3.4.5")
        );
        assert_eq!(
            dependencies.len(),
            original["project"]["dependencies"]
                .as_array()
                .unwrap()
                .len()
                + 1
        );
        let maturin = doc["tool"]["maturin"].as_table().unwrap();
        assert_eq!(
            maturin["manifest-path"].as_str(),
            Some(crate_dir.join("Cargo.toml").to_str().unwrap())
        );
        for key in ["python-source", "module-name", "bindings", "features"] {
            assert_eq!(maturin[key], original["tool"]["maturin"][key], "{key}");
        }
        assert_eq!(staged.python_source, Path::new("python"));
        assert_eq!(staged.readme.as_deref(), Some(Path::new("README.md")));
        // Without a runtime (rocSHMEM) the dependencies stay as committed.
        let staged = staged_pyproject(&text, &crate_dir, "0.1.0+rocshmem.gfx942", None).unwrap();
        let doc: toml::Table = toml::from_str(&staged.text).unwrap();
        assert_eq!(
            doc["project"]["dependencies"],
            original["project"]["dependencies"]
        );
    }

    #[test]
    fn a_shim_of_another_backend_or_arch_is_refused() {
        let built = installed(ProviderKind::Rocshmem, "gfx942");
        let e = check_shim(&built, ProviderKind::Nvshmem, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a rocshmem shim, not a nvshmem one"), "{e}");
        let other = GpuTargets::parse("gfx90a").unwrap();
        let e = check_shim(&built, ProviderKind::Rocshmem, Some(&other))
            .unwrap_err()
            .to_string();
        assert!(e.contains("built for gfx942, not for gfx90a"), "{e}");
        check_shim(&built, ProviderKind::Rocshmem, None).unwrap();
    }

    #[test]
    fn the_nvshmem_requirement_is_the_pin_and_the_shim_must_match_it() {
        let pins = crate::pins::Pins::load(&project_root().join("pins.toml")).unwrap();
        let pin = pins.nvshmem.clone().unwrap();
        let mut built = installed(ProviderKind::Nvshmem, "90");
        built.shmem_version = Some(pin.version.clone());
        let runtime = nvshmem_runtime(&built, &pins).unwrap();
        let major = pin.cuda.split('.').next().unwrap();
        assert_eq!(
            runtime.requirement(),
            format!("nvidia-nvshmem-cu{major}=={}", pin.version)
        );
        built.shmem_version = Some("0.0.1".into());
        let e = nvshmem_runtime(&built, &pins).unwrap_err().to_string();
        assert!(
            e.contains("built against NVSHMEM 0.0.1") && e.contains("nvshmem-sdk.sh"),
            "{e}"
        );
    }
}

//! `cargo xtask build-shim`: the GPU shim (one C ABI over NVSHMEM or rocSHMEM) as a shared
//! library that carries its own device link, built by the xtask's one CMake driver (as
//! build-rocshmem is), with CMake's output on stderr and in the build folder's log.

use crate::Workspace;
use crate::cmake::{self, Step};
use crate::lock::OutLock;
use crate::rocshmem::install::{InstallStamp, read_stamp};
use crate::runner::StepError;
use crate::targets::{GpuTargets, TargetId};
use crate::{rocm, tools};
use anyhow::{Context, bail};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::time::Instant;
pub use symmem::ProviderKind;
use symmem::format_elapsed;
use xshell::Shell;

/// Build the GPU shim library for one backend.
///
/// NVSHMEM: needs nvcc (CUDA >= 12) and NVSHMEM 3.x (include/, lib/ with libnvshmem_host.so.3
/// and libnvshmem_device.a); no GPU is needed to build. The pip wheels work: at the versions
/// of pins.toml [nvshmem], `source scripts/gpu/nvshmem-sdk.sh` installs them and sets
/// CUDACXX and NVSHMEM_HOME.
/// rocSHMEM: needs ROCm (HIP's clang and CMake packages), CMake >= 3.24, and the install made by
/// `cargo xtask build-rocshmem` (found through ROCSHMEM_HOME). ROCm is --rocm-path, else
/// $ROCM_PATH, else what `hipconfig --rocmpath` says (Debian/Ubuntu: /usr), else /opt/rocm; it
/// reaches CMake as -D definitions only (never export ROCM_PATH=/usr: Debian's clang then
/// looks for its device libraries there and fails).
///
/// The library exports only the functions of symmem_shim.h. It lands in
/// target/shim/<backend>/lib/ where `cargo xtask test --provider <backend>` finds it; its path
/// is the only line on stdout. CMake's output goes to stderr and to
/// target/shim/<backend>/build/symmem-build.log (build-rocshmem's CMake driver and log).
/// A run that fails, its input checks included, leaves no library in lib/ (the previous one is
/// removed first). One run at a time per out folder: a second is refused, naming the first.
///
/// Examples:
///   NVSHMEM_HOME=.../nvidia/nvshmem cargo xtask build-shim --backend nvshmem --nvcc .../bin/nvcc
///   exports=$(cargo xtask build-rocshmem --arch gfx942) && eval "$exports"; cargo xtask build-shim --backend rocshmem --arch gfx942
///   lib=$(cargo xtask build-shim --backend rocshmem --arch gfx942,gfx90a --rocm-path /usr)
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Which SHMEM library to build against (a GPU provider).
    #[arg(long, value_parser = gpu_provider())]
    pub backend: ProviderKind,
    /// GPU architectures, comma-separated: CUDA compute capabilities (default 90) or HIP
    /// targets (default gfx942; each must be one the rocSHMEM install was built for).
    #[arg(long, value_parser = GpuTargets::parse)]
    pub arch: Option<GpuTargets>,
    /// nvcc to use (default: $CUDACXX, else nvcc on PATH, else $CUDA_HOME/bin/nvcc).
    #[arg(long, value_name = "PATH")]
    pub nvcc: Option<PathBuf>,
    /// NVSHMEM install with include/ and lib/ (default: $NVSHMEM_HOME).
    #[arg(long, value_name = "DIR")]
    pub nvshmem_home: Option<PathBuf>,
    /// rocSHMEM install prefix (default: $ROCSHMEM_HOME, as build-rocshmem prints).
    #[arg(long, value_name = "DIR")]
    pub rocshmem_home: Option<PathBuf>,
    /// The ROCm install (default: $ROCM_PATH, else `hipconfig --rocmpath`, else /opt/rocm).
    /// Given to CMake as -DROCM_PATH, -DCMAKE_HIP_COMPILER_ROCM_ROOT and on
    /// -DCMAKE_PREFIX_PATH; never exported to the compilers.
    #[arg(long, value_name = "DIR")]
    pub rocm_path: Option<PathBuf>,
    /// Where to build and install (default: target/shim/<backend>).
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}

/// Parses a GPU provider's name (`--backend`): `--help` lists exactly the providers that have
/// a shim.
fn gpu_provider() -> impl clap::builder::TypedValueParser<Value = ProviderKind> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(ProviderKind::GPU.map(ProviderKind::name))
        .map(|name| ProviderKind::from_name(&name).expect("one of the GPU providers' names"))
}

fn from_env(given: Option<&Path>, vars: &[&str]) -> Option<PathBuf> {
    given.map(Path::to_path_buf).or_else(|| {
        vars.iter()
            .find_map(|v| std::env::var_os(v).filter(|x| !x.is_empty()))
            .map(PathBuf::from)
    })
}

/// The folder of `home`'s rocshmem-config.cmake (lib/ or lib64/), if it has one.
fn rocshmem_config_dir(home: &Path) -> Option<PathBuf> {
    ["lib/cmake/rocshmem", "lib64/cmake/rocshmem"]
        .iter()
        .map(|d| home.join(d))
        .find(|d| d.join("rocshmem-config.cmake").is_file())
}

/// Checks that `home` is a rocSHMEM install that CMake can find.
fn check_rocshmem_home(home: &Path) -> anyhow::Result<()> {
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
fn rocshmem_defines(home: &Path, rocm: Option<&rocm::HipRoot>) -> Vec<(String, String)> {
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

/// The shim as a CMake project: built in `build_dir`, installed into `out`.
fn shim_project<'a>(
    cmake: &'a Path,
    generator: crate::tools::Generator,
    source: &'a Path,
    build_dir: &'a Path,
    out: &'a Path,
    defines: &'a [(String, String)],
) -> cmake::Project<'a> {
    cmake::Project {
        cmake,
        generator,
        source,
        build_dir,
        install_prefix: out,
        defines,
        jobs: None,
    }
}

/// Runs one CMake step with its output on stderr (stdout carries only the library's path).
fn run_step(driver: &cmake::Driver<'_>, step: Step, command: &[String]) -> Result<(), StepError> {
    let what = match step {
        Step::Configure => "configure",
        Step::Build => "build",
        Step::Install => "install",
    };
    eprintln!("[build-shim] {what}");
    let started = Instant::now();
    driver.run(step, command)?;
    eprintln!(
        "[build-shim] {what}: done in {}",
        format_elapsed(started.elapsed())
    );
    Ok(())
}

/// The SHMEM library install a shim build links: what the build reports, and what it keys
/// its build folder on.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Library {
    /// One line for humans: which library, version, commit, targets, prefix.
    describe: String,
    /// What identifies this install (its stamp's hash, or its files' sizes and times).
    key: Vec<(String, String)>,
}

/// Size and modification time of `file`, as a key: a rebuilt library changes them.
fn file_identity(file: &Path) -> String {
    match file.metadata() {
        Ok(m) => {
            let mtime = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            format!("{} bytes, mtime {mtime}", m.len())
        }
        Err(_) => "missing".into(),
    }
}

/// The rocSHMEM install in `home`, as its stamp (written by build-rocshmem) describes it.
fn rocshmem_library(home: &Path, stamp: Option<&InstallStamp>) -> Library {
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
fn nvshmem_library(home: &Path) -> Library {
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

/// The shim's sources, as a key: a digest of every file in the source folder.
fn sources_digest(source: &Path) -> anyhow::Result<String> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(source)
        .with_context(|| format!("reading {}", source.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    names.sort();
    let mut hasher = Sha256::new();
    for path in names {
        let body = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        hasher.update(path.file_name().unwrap_or_default().as_encoded_bytes());
        hasher.update([0]);
        hasher.update(Sha256::digest(&body));
    }
    Ok(hex(&hasher.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Every input of a shim build, and the hash that names its build folder: a build folder (and
/// CMake's cache in it, which remembers where it found rocSHMEM) serves only these inputs.
#[derive(Clone, Debug)]
struct Key {
    inputs: Vec<(String, String)>,
    hash: String,
}

impl Key {
    fn new(
        cmake: &Path,
        generator: crate::tools::Generator,
        defines: &[(String, String)],
        library: &Library,
        sources: String,
        environment: Vec<(String, String)>,
    ) -> Self {
        let mut inputs = vec![
            ("cmake".to_string(), cmake.display().to_string()),
            ("generator".to_string(), generator.cmake_name().to_string()),
            ("sources".to_string(), sources),
        ];
        inputs.extend(
            defines
                .iter()
                .map(|(k, v)| (format!("define.{k}"), v.clone())),
        );
        inputs.extend(library.key.iter().cloned());
        // What CMake reads from the environment only at first configure (HIPFLAGS, CXX, ...):
        // a kept folder would otherwise keep the flags of the run that made it.
        inputs.extend(environment);
        let mut hasher = Sha256::new();
        for (k, v) in &inputs {
            hasher.update(format!("{k}={v}\n"));
        }
        let hash = hex(&hasher.finalize());
        Self { inputs, hash }
    }

    /// The build folder of these inputs, under `out`.
    fn build_dir(&self, out: &Path) -> PathBuf {
        out.join("build").join(&self.hash[..12])
    }

    /// The stamp written next to the installed library (TOML).
    fn stamp(&self, library: &Library) -> String {
        #[derive(serde::Serialize)]
        struct Stamp<'a> {
            hash: &'a str,
            library: &'a str,
            inputs: std::collections::BTreeMap<&'a str, &'a str>,
        }
        let body = toml::to_string(&Stamp {
            hash: &self.hash,
            library: &library.describe,
            inputs: self
                .inputs
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect(),
        })
        .expect("a stamp serialises");
        format!("# Written by `cargo xtask build-shim`: what this shim was built from.\n{body}")
    }
}

/// File next to `lib/` recording what the installed shim was built from.
pub const SHIM_STAMP: &str = "symmem-shim-stamp.toml";

/// Keys of the stamp's `inputs` that [`installed`] reads back.
const NVSHMEM_VERSION_KEY: &str = "nvshmem.version";
const ROCSHMEM_PREFIX_KEY: &str = "rocshmem.prefix";
const ROCSHMEM_STAMP_KEY: &str = "rocshmem.stamp";
/// The stamp's NVSHMEM version when its header does not say.
const UNKNOWN_VERSION: &str = "unknown";

/// The GPU targets the shim is built for when `--arch` names none (CMakeLists.txt's
/// defaults): 90 for NVSHMEM, gfx942 for rocSHMEM; `None` for the host provider.
pub fn default_targets(backend: ProviderKind) -> Option<GpuTargets> {
    let arch = match backend {
        ProviderKind::Host => return None,
        ProviderKind::Nvshmem => "90",
        ProviderKind::Rocshmem => "gfx942",
    };
    Some(GpuTargets::parse(arch).expect("the default targets parse"))
}

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

/// Why `--backend host` is refused.
const HOST_HAS_NO_SHIM: &str = "the host provider has no shim: build-shim takes a GPU provider";

/// What one shim build needs, decided before CMake runs.
struct Setup {
    backend: ProviderKind,
    source: PathBuf,
    out: PathBuf,
    defines: Vec<(String, String)>,
    library: Library,
    /// `$ROCM_PATH` when it is exported (a likely cause of a failure on Debian).
    rocm_path_exported: Option<std::ffi::OsString>,
}

fn nvshmem_setup(args: &Args, defines: &mut Vec<(String, String)>) -> anyhow::Result<Library> {
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

fn rocshmem_setup(
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

/// Where the shim for `backend` is built and installed unless `--out-dir` says otherwise
/// (`<target>/shim/<backend>`; the library lands in its `lib/`).
pub fn default_out(target: &Path, backend: ProviderKind) -> PathBuf {
    target.join("shim").join(backend.name())
}

/// The out folder of a run: `--out-dir`, else the backend's default.
fn out_dir(ws: &Workspace, args: &Args) -> anyhow::Result<PathBuf> {
    if !args.backend.is_gpu() {
        bail!("{HOST_HAS_NO_SHIM}");
    }
    let out = args
        .out_dir
        .clone()
        .unwrap_or_else(|| default_out(&ws.target, args.backend));
    std::path::absolute(&out).with_context(|| format!("resolving {}", out.display()))
}

/// Checks the inputs and decides the defines; no tool runs yet.
fn setup(sh: &Shell, ws: &Workspace, args: &Args, out: PathBuf) -> anyhow::Result<Setup> {
    let backend = args.backend;
    let source = ws.shim_source.clone();
    let mut defines: Vec<(String, String)> = vec![
        ("CMAKE_BUILD_TYPE".into(), "Release".into()),
        (cmake::SHIM_BACKEND_DEFINE.into(), backend.name().into()),
    ];
    if let Some(arch) = &args.arch {
        defines.push((cmake::SHIM_ARCHS_DEFINE.into(), arch.cmake_list()));
    }
    let mut rocm_path_exported = None;
    let library = match backend {
        ProviderKind::Host => bail!("{HOST_HAS_NO_SHIM}"),
        ProviderKind::Nvshmem => nvshmem_setup(args, &mut defines)?,
        ProviderKind::Rocshmem => {
            let library = rocshmem_setup(sh, args, &mut defines)?;
            rocm_path_exported = std::env::var_os("ROCM_PATH").filter(|v| !v.is_empty());
            library
        }
    };
    Ok(Setup {
        backend,
        source,
        out,
        defines,
        library,
        rocm_path_exported,
    })
}

/// Removes the build folders of other inputs under `out/build` (each serves only its own
/// inputs; a rebuild takes seconds), saying which.
fn remove_other_builds(out: &Path, keep: &Path) {
    let Ok(entries) = std::fs::read_dir(out.join("build")) else {
        return;
    };
    let mut removed = Vec::new();
    for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
        if path == keep {
            continue;
        }
        let gone = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        match gone {
            Ok(()) => removed.push(path.display().to_string()),
            Err(e) => eprintln!("note: could not remove {}: {e}", path.display()),
        }
    }
    if !removed.is_empty() {
        eprintln!(
            "removed the build folders of other inputs: {}",
            removed.join(", ")
        );
    }
}

/// The symbols a failed link step's output says are undefined (GNU ld's "undefined reference
/// to `X'", lld's "undefined symbol: X"), each once, in the order first seen.
fn undefined_symbols(output: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    for line in output.lines() {
        let symbol = if let Some((_, rest)) = line.split_once("undefined reference to `") {
            rest.rsplit_once('\'').map_or(rest, |(s, _)| s)
        } else if let Some((_, rest)) = line.split_once("undefined symbol: ") {
            rest
        } else {
            continue;
        };
        let symbol = symbol.trim().to_string();
        if !symbol.is_empty() && !found.contains(&symbol) {
            found.push(symbol);
        }
    }
    found
}

/// The output of the last command in a build log (the driver writes `$ command` before each).
fn last_step_output(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    match text.rfind("\n$ ") {
        Some(at) => text[at + 1..].to_string(),
        None => text,
    }
}

/// The error for a link that failed on symbols the SHMEM install does not define: the shim
/// is linked with --no-undefined, so an install without the API the shim calls (a rocSHMEM
/// older than 3.x) stops here rather than at its first call on a GPU.
fn missing_entry_points(setup: &Setup, symbols: &[String], log: &Path) -> anyhow::Error {
    let shown: Vec<&str> = symbols.iter().take(8).map(String::as_str).collect();
    let more = symbols.len().saturating_sub(shown.len());
    let needs = match setup.backend {
        ProviderKind::Rocshmem => format!(
            "{}. Fix: build the pinned rocSHMEM with `cargo xtask build-rocshmem --arch <arch>` \
             and pass the prefix it prints (--rocshmem-home, or ROCSHMEM_HOME)",
            crate::rocshmem::support::WHY
        ),
        ProviderKind::Nvshmem => "the shim needs NVSHMEM 3.x or newer. Fix: point \
                                  --nvshmem-home (or NVSHMEM_HOME) at an NVSHMEM 3.x install \
                                  (`source scripts/gpu/nvshmem-sdk.sh` fetches the pinned one)"
            .into(),
        // `setup` refuses it before anything is linked.
        ProviderKind::Host => HOST_HAS_NO_SHIM.into(),
    };
    anyhow::anyhow!(
        "linking the {} shim failed: {} does not define {}{} (see {}), which the shim calls: \
         {needs}",
        setup.backend.name(),
        setup.library.describe,
        shown.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        },
        log.display()
    )
}

/// The error for a failed CMake step, naming the log and the folder to delete.
fn step_failed(setup: &Setup, build_dir: &Path, what: &str, err: StepError) -> anyhow::Error {
    let StepError::Failed { status, log, .. } = err else {
        return anyhow::Error::new(err);
    };
    let undefined = undefined_symbols(&last_step_output(&log));
    if !undefined.is_empty() {
        return missing_entry_points(setup, &undefined, &log);
    }
    let mut fix = format!(
        "CMake's messages above (also in {}) say what failed; fix that and run the same \
         command again (delete {} to start over)",
        log.display(),
        build_dir.display()
    );
    if let Some(value) = &setup.rocm_path_exported {
        fix.push_str(&format!(
            ". Note: ROCM_PATH={} is exported; Debian's clang then looks for its device \
             libraries there: unset it and pass --rocm-path instead",
            value.to_string_lossy()
        ));
    }
    anyhow::anyhow!(
        "{what} the {} shim failed ({status}): {fix}",
        setup.backend.name()
    )
}

/// Configures, builds and installs the shim in the build folder of `key`.
fn build(sh: &Shell, setup: &Setup, key: &Key, steps: &cmake::Steps) -> anyhow::Result<()> {
    let build_dir = key.build_dir(&setup.out);
    std::fs::create_dir_all(&build_dir)
        .with_context(|| format!("creating {}", build_dir.display()))?;
    eprintln!(
        "building the {} shim from {} in {} against {} ...",
        setup.backend.name(),
        setup.source.display(),
        build_dir.display(),
        setup.library.describe
    );
    cmake::drop_stale_tree(&build_dir, &setup.source)?;
    let driver = cmake::Driver::new(sh, build_dir.join("symmem-build.log"), true)?;
    let failed = |what: &str, err| step_failed(setup, &build_dir, what, err);
    run_step(&driver, Step::Configure, &steps.configure).map_err(|e| failed("configuring", e))?;
    run_step(&driver, Step::Build, &steps.build).map_err(|e| failed("building", e))?;
    run_step(&driver, Step::Install, &steps.install).map_err(|e| failed("installing", e))?;
    Ok(())
}

/// `build-shim`: builds the library and prints its path (the only line on stdout).
pub fn run(sh: &Shell, ws: &Workspace, args: Args) -> anyhow::Result<()> {
    let library = build_library(sh, ws, &args)?;
    println!("{}", library.display());
    Ok(())
}

/// Builds the shim library as `args` say and returns its path.
pub fn build_library(sh: &Shell, ws: &Workspace, args: &Args) -> anyhow::Result<PathBuf> {
    let started = Instant::now();
    let out = out_dir(ws, args)?;
    // Before anything is checked or written there: a second run is refused at once.
    let _lock = OutLock::take(&out, "build-shim")?;
    let library = out
        .join("lib")
        .join(args.backend.shim_library().unwrap_or_default());
    let stamp = out.join(SHIM_STAMP);
    // The library and stamp of a previous install are what this run replaces: removed before
    // anything can fail (a refused input included), so that a failed run never leaves them for
    // `cargo xtask test` to load as if they were its result.
    let removed = remove_previous(&[&stamp, &library])?;
    let built = build_locked(sh, ws, args, out, &library, &stamp);
    if built.is_err() && removed {
        eprintln!(
            "note: the previous {} and its stamp were removed: a failed build-shim leaves no \
             library to load",
            library.display()
        );
    }
    let setup = built?;
    eprintln!(
        "built {} against {} in {}",
        library.display(),
        setup.library.describe,
        format_elapsed(started.elapsed())
    );
    Ok(library)
}

/// Removes the files of `paths` that exist; whether there were any.
fn remove_previous(paths: &[&Path]) -> anyhow::Result<bool> {
    let mut removed = false;
    for previous in paths {
        if previous.exists() {
            std::fs::remove_file(previous)
                .with_context(|| format!("removing {}", previous.display()))?;
            removed = true;
        }
    }
    Ok(removed)
}

/// [`build_library`] once the out folder is locked and rid of the previous install: checks the
/// inputs, builds, installs `library` and writes `stamp`.
fn build_locked(
    sh: &Shell,
    ws: &Workspace,
    args: &Args,
    out: PathBuf,
    library: &Path,
    stamp: &Path,
) -> anyhow::Result<Setup> {
    let setup = setup(sh, ws, args, out)?;
    // The inputs are checked first: their errors are the likelier ones, and need no tools.
    let cmake = tools::cmake(sh)?;
    let generator = tools::generator()?;
    let key = Key::new(
        &cmake,
        generator,
        &setup.defines,
        &setup.library,
        sources_digest(&setup.source)?,
        cmake::configure_environment_of_process(),
    );
    let build_dir = key.build_dir(&setup.out);
    let steps = shim_project(
        &cmake,
        generator,
        &setup.source,
        &build_dir,
        &setup.out,
        &setup.defines,
    )
    .steps();
    build(sh, &setup, &key, &steps)?;
    if !library.is_file() {
        bail!(
            "CMake finished but {} is missing: delete {} and run again",
            library.display(),
            build_dir.display()
        );
    }
    std::fs::write(stamp, key.stamp(&setup.library))
        .with_context(|| format!("writing {}", stamp.display()))?;
    remove_other_builds(&setup.out, &build_dir);
    Ok(setup)
}

/// Builds the `backend` shim from the CMake project `source` into `out` (`out/lib` holds the
/// library), finding the SHMEM library, ROCm and the compilers as `build-shim` does
/// (NVSHMEM_HOME, CUDACXX, ROCSHMEM_HOME, ROCM_PATH, ...); `archs` as `--arch` takes them.
/// For symmem-shim-sys's opt-in build features.
pub fn build_into(
    backend: ProviderKind,
    source: &Path,
    out: &Path,
    archs: Option<&str>,
) -> anyhow::Result<PathBuf> {
    let sh = Shell::new().context("reading the current folder")?;
    let ws = Workspace {
        root: source.to_path_buf(),
        target: out.to_path_buf(),
        shim_source: source.to_path_buf(),
    };
    let args = Args {
        backend,
        arch: archs.map(GpuTargets::parse).transpose()?,
        nvcc: None,
        nvshmem_home: None,
        rocshmem_home: None,
        rocm_path: None,
        out_dir: Some(out.to_path_buf()),
    };
    build_library(&sh, &ws, &args)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a build's stamp says is read back as it was built: backend, targets (the default
    /// when none were given), NVSHMEM's version; a folder without a stamp or library names
    /// the build to run.
    #[test]
    fn an_installed_shim_is_read_back_from_its_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("nvshmem");
        std::fs::create_dir_all(home.join("include/non_abi")).unwrap();
        std::fs::write(
            home.join("include/non_abi/nvshmem_version.h"),
            "#define NVSHMEM_VENDOR_MAJOR_VERSION 3\n#define NVSHMEM_VENDOR_MINOR_VERSION 4\n\
             #define NVSHMEM_VENDOR_PATCH_VERSION 5\n",
        )
        .unwrap();
        let library = nvshmem_library(&home);
        let out = dir.path().join("out");
        let e = installed(&out).unwrap_err().to_string();
        assert!(e.contains("cargo xtask build-shim --backend"), "{e}");
        let stamp = |defines: &[(String, String)]| {
            let cmake = Path::new("/usr/bin/cmake");
            let generator = crate::tools::Generator::Ninja;
            Key::new(cmake, generator, defines, &library, "d".into(), vec![]).stamp(&library)
        };
        let backend = (
            cmake::SHIM_BACKEND_DEFINE.to_string(),
            "nvshmem".to_string(),
        );
        std::fs::create_dir_all(out.join("lib")).unwrap();
        std::fs::write(out.join(SHIM_STAMP), stamp(std::slice::from_ref(&backend))).unwrap();
        let e = installed(&out).unwrap_err().to_string();
        assert!(e.contains("libsymmem_shim_nvshmem.so is missing"), "{e}");
        std::fs::write(out.join("lib/libsymmem_shim_nvshmem.so"), "").unwrap();
        let found = installed(&out).unwrap();
        assert_eq!(found.backend, ProviderKind::Nvshmem);
        assert_eq!(found.targets.to_string(), "90");
        assert_eq!(found.shmem_version.as_deref(), Some("3.4.5"));
        assert_eq!(found.shmem_commit, None);
        let archs = (cmake::SHIM_ARCHS_DEFINE.to_string(), "90;100a".to_string());
        std::fs::write(out.join(SHIM_STAMP), stamp(&[backend, archs])).unwrap();
        assert_eq!(installed(&out).unwrap().targets.to_string(), "100a,90");
    }

    /// HIPFLAGS (and the rest CMake reads at first configure) is part of the build folder's
    /// key: a kept folder configured with other flags is not reused.
    #[test]
    fn configure_environment_is_part_of_the_key() {
        let library = rocshmem_library(Path::new("/prefix/a"), None);
        let key = |environment: Vec<(String, String)>| {
            let generator = crate::tools::Generator::Ninja;
            let cmake = Path::new("/usr/bin/cmake");
            Key::new(cmake, generator, &[], &library, "d".into(), environment)
        };
        let plain = key(vec![]);
        let flagged = key(vec![("env.HIPFLAGS".into(), "-g".into())]);
        assert_ne!(
            plain.build_dir(Path::new("/o")),
            flagged.build_dir(Path::new("/o"))
        );
        assert!(
            flagged
                .stamp(&library)
                .contains("\"env.HIPFLAGS\" = \"-g\"")
        );
    }

    /// A link that failed on symbols the install lacks names them and the 3.x requirement;
    /// only the last command's output counts (the log keeps earlier runs).
    #[test]
    fn a_link_failing_on_missing_entry_points_names_them_and_3x() {
        let gnu = "/usr/bin/ld: rocshmem_shim.hip.o: in function `symmem_shim_init':\n\
                   rocshmem_shim.hip:(.text+0x4d): undefined reference to \
                   `rocshmem::rocshmem_get_uniqueid(rocshmem::rocshmem_uniqueid_t*)'\n\
                   rocshmem_shim.hip:(.text+0x9a): undefined reference to \
                   `rocshmem::rocshmem_get_uniqueid(rocshmem::rocshmem_uniqueid_t*)'\n";
        let lld = "ld.lld: error: undefined symbol: rocshmem::rocshmem_init_attr(unsigned int, \
                   rocshmem::rocshmem_init_attr_t*)\n>>> referenced by rocshmem_shim.hip\n";
        assert_eq!(
            undefined_symbols(&format!("{gnu}{lld}")),
            [
                "rocshmem::rocshmem_get_uniqueid(rocshmem::rocshmem_uniqueid_t*)",
                "rocshmem::rocshmem_init_attr(unsigned int, rocshmem::rocshmem_init_attr_t*)"
            ]
        );
        assert!(undefined_symbols("error: 'mpi.h' file not found").is_empty());

        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("symmem-build.log");
        std::fs::write(
            &log,
            format!("$ cmake --build old\n{lld}$ cmake --build b\n{gnu}collect2: error\n"),
        )
        .unwrap();
        let setup = Setup {
            backend: ProviderKind::Rocshmem,
            source: "/src".into(),
            out: dir.path().to_path_buf(),
            defines: vec![],
            library: rocshmem_library(Path::new("/prefix/a"), None),
            rocm_path_exported: None,
        };
        let status = std::os::unix::process::ExitStatusExt::from_raw(1 << 8);
        let err = StepError::Failed {
            command: "cmake --build b".into(),
            status,
            log: log.clone(),
            tail: None,
        };
        let e = step_failed(&setup, dir.path(), "building", err).to_string();
        for part in [
            "linking the rocshmem shim failed: rocSHMEM at /prefix/a",
            "does not define rocshmem::rocshmem_get_uniqueid(rocshmem::rocshmem_uniqueid_t*) (see",
            "needs rocSHMEM 3.x or newer",
            "cargo xtask build-rocshmem",
        ] {
            assert!(e.contains(part), "`{part}` not in {e}");
        }
        assert!(
            !e.contains("init_attr(unsigned"),
            "an earlier run's line: {e}"
        );
    }

    fn text<'a>(args: impl Iterator<Item = &'a std::ffi::OsStr>) -> Vec<String> {
        args.map(|a| a.to_string_lossy().into_owned()).collect()
    }

    /// The ROCm location reaches CMake as definitions, and nothing is added to the environment
    /// of CMake (and so of the compilers it runs).
    #[test]
    fn rocm_goes_to_cmake_as_definitions_only() {
        let rocm = rocm::HipRoot {
            root: "/usr".into(),
            found: "from `hipconfig --rocmpath`".into(),
            hip_clang: Some("/usr/lib/llvm-21/bin/clang++".into()),
        };
        let defines = rocshmem_defines(Path::new("/prefix/rocshmem"), Some(&rocm));
        let steps = shim_project(
            Path::new("/usr/bin/cmake"),
            crate::tools::Generator::Ninja,
            Path::new("/src/shim"),
            Path::new("/out/build"),
            Path::new("/out"),
            &defines,
        )
        .steps();
        // As the driver starts them: through the one Shell, which adds no environment.
        let sh = Shell::new().unwrap();
        let [configure, build, install] = [&steps.configure, &steps.build, &steps.install]
            .map(|step| crate::runner::command(&sh, step));
        let args = text(configure.get_args());
        for expected in [
            "-DCMAKE_PREFIX_PATH=/prefix/rocshmem;/usr",
            "-Drocshmem_DIR=/prefix/rocshmem/lib/cmake/rocshmem",
            "-DROCM_PATH=/usr",
            "-DCMAKE_HIP_COMPILER_ROCM_ROOT=/usr",
            "-DCMAKE_HIP_COMPILER=/usr/lib/llvm-21/bin/clang++",
        ] {
            assert!(args.iter().any(|a| a == expected), "{expected}: {args:?}");
        }
        for step in [&configure, &build, &install] {
            assert_eq!(step.get_envs().count(), 0, "{:?}", step.get_envs());
        }
        assert_eq!(
            text(install.get_args()),
            ["--install", "/out/build", "--prefix", "/out"]
        );
        // Without a ROCm found, CMake looks itself: only rocSHMEM's prefix is given.
        let defines = rocshmem_defines(Path::new("/prefix/rocshmem"), None);
        assert_eq!(
            defines,
            [
                ("CMAKE_PREFIX_PATH".to_string(), "/prefix/rocshmem".into()),
                (
                    "rocshmem_DIR".to_string(),
                    "/prefix/rocshmem/lib/cmake/rocshmem".into()
                )
            ]
        );
    }

    #[test]
    fn missing_rocm_and_rocshmem_name_the_fix() {
        let sh = Shell::new().unwrap();
        let search = rocm::Search::from_process();
        let e = rocm::hip_root(&sh, Some(Path::new("/nonexistent/rocm")), &search)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no ROCm at /nonexistent/rocm (from --rocm-path)")
                && e.contains("pass --rocm-path DIR"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let e = check_rocshmem_home(dir.path()).unwrap_err().to_string();
        assert!(e.contains("cargo xtask build-rocshmem"), "{e}");
    }

    #[test]
    fn a_given_rocm_without_hipconfig_uses_its_llvm() {
        let dir = tempfile::tempdir().unwrap();
        let clang = dir.path().join("llvm/bin/clang++");
        std::fs::create_dir_all(clang.parent().unwrap()).unwrap();
        // Looked at, never run: an executable file is what counts as a compiler.
        std::fs::write(&clang, "").unwrap();
        std::fs::set_permissions(&clang, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let found = rocm::hip_root(
            &Shell::new().unwrap(),
            Some(dir.path()),
            &rocm::Search::from_process(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(found.root, dir.path());
        // Not the clang of a hipconfig on PATH, which may belong to another ROCm.
        assert_eq!(found.hip_clang.as_deref(), Some(clang.as_path()));
    }

    /// Found as build-rocshmem finds it: the hipconfig on PATH names the ROCm (Debian's /usr
    /// has no bin/hipconfig of its own here) and, asked again, HIP's clang; with nothing to
    /// find, CMake is left to look.
    #[test]
    fn rocm_found_by_hipconfig_gives_its_clang_and_none_is_left_to_cmake() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("usr");
        let clang = dir.path().join("llvm-21/bin/clang++");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(clang.parent().unwrap()).unwrap();
        // Looked at, never run: an executable file is what counts as a compiler.
        std::fs::write(&clang, "").unwrap();
        std::fs::set_permissions(&clang, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let hipconfig = dir.path().join("bin/hipconfig");
        let body = format!(
            "#!/bin/sh\ncase \"$1\" in\n  --rocmpath) printf %s '{}' ;;\n  \
             --hipclangpath) printf %s '{}' ;;\n  *) exit 2 ;;\nesac\n",
            root.display(),
            clang.parent().unwrap().display()
        );
        symmem_test_support::command::write_script(&hipconfig, &body);
        let sh = Shell::new().unwrap();
        let search = |path: Vec<PathBuf>| rocm::Search {
            rocm_path_env: None,
            hipcc_env: None,
            path: symmem_process::SearchPath::dirs(path),
            default_rocm: dir.path().join("opt/rocm"),
        };
        let found = rocm::hip_root(&sh, None, &search(vec![dir.path().join("bin")]))
            .unwrap()
            .unwrap();
        assert_eq!(
            found,
            rocm::HipRoot {
                root: root.clone(),
                found: format!("from `{} --rocmpath`", hipconfig.display()),
                hip_clang: Some(clang),
            }
        );
        // Where the ROCm has its own llvm/bin, that comes first, as for rocSHMEM's LLVM tools.
        let own = root.join("llvm/bin/clang++");
        std::fs::create_dir_all(own.parent().unwrap()).unwrap();
        std::fs::write(&own, "").unwrap();
        std::fs::set_permissions(&own, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let found = rocm::hip_root(&sh, None, &search(vec![dir.path().join("bin")]))
            .unwrap()
            .unwrap();
        assert_eq!(found.hip_clang, Some(own));
        assert_eq!(rocm::hip_root(&sh, None, &search(vec![])).unwrap(), None);
    }
}

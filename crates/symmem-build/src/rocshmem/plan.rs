//! The build plan: a pure function of the pin, the targets and the tools found, so that it can
//! be printed (`--dry-run`), snapshot-tested, and hashed into the install prefix.

use crate::pins::RocshmemPin;
pub use crate::rocm::{LLVM_TOOLS, LlvmTools, RocmParts, RocmVersion, VersionSource};
use crate::runner::shell_words;
use crate::targets::TargetId;
pub use crate::tools::Generator;
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The tools found on this machine: ROCm's, CMake and the generator.
#[derive(Clone, Debug)]
pub struct Toolchain {
    pub rocm: RocmParts,
    pub cmake: PathBuf,
    pub generator: Generator,
    /// What CMake reads from the environment at first configure (`env.HIPFLAGS`, ...: see
    /// [`crate::cmake::CONFIGURE_ENVIRONMENT`]), the set ones: part of the hash.
    pub environment: Vec<(String, String)>,
}

impl Toolchain {
    /// Stands in for ROCm when none is found, so that `--dry-run` can still show the plan
    /// (pin, fetch, steps, defines) with `<unknown>` where ROCm decides. Never built.
    pub fn unknown(why: String, cmake: PathBuf, generator: Generator) -> Self {
        Self {
            rocm: RocmParts {
                rocm_path: PathBuf::from("<unknown ROCm>"),
                rocm_found: why,
                rocm_version: RocmVersion {
                    version: "<unknown>".into(),
                    source: VersionSource::Unknown,
                },
                hipcc: PathBuf::from("<unknown hipcc>"),
                hipcc_found: "<ROCm>/bin/hipcc, else hipcc on PATH".into(),
                llvm: LlvmTools::Unknown,
            },
            cmake,
            generator,
            environment: crate::cmake::configure_environment_of_process(),
        }
    }

    /// Whether this is [`Toolchain::unknown`].
    pub fn is_unknown(&self) -> bool {
        self.rocm.rocm_version.source == VersionSource::Unknown
    }
}

/// One `--cmake-arg -DNAME[:TYPE]=VALUE`, added to the configure step (and so to the hash).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmakeDefine {
    /// `NAME` or `NAME:TYPE`, as given.
    pub name: String,
    pub value: String,
}

/// Defines the toolkit owns: each has its own flag, or the build depends on it.
const OWNED_DEFINES: &[(&str, &str)] = &[
    (
        "CMAKE_INSTALL_PREFIX",
        "the prefix is content-addressed; use --out-dir",
    ),
    ("GPU_TARGETS", "use --arch"),
    ("ROCM_PATH", "use --rocm-path"),
    ("CMAKE_CXX_COMPILER", "use --hipcc"),
    ("USE_IPC", "symmem needs the IPC backend"),
];

impl CmakeDefine {
    /// Parses `-DNAME=VALUE` or `-DNAME:TYPE=VALUE`.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let usage = "use one --cmake-arg per define, in CMake's -DNAME=VALUE form \
                     (e.g. --cmake-arg -DUSE_THREADS=ON)";
        let Some(rest) = text.strip_prefix("-D") else {
            anyhow::bail!("--cmake-arg {text:?} is not a -DNAME=VALUE define: {usage}");
        };
        let Some((name, value)) = rest.split_once('=') else {
            anyhow::bail!("--cmake-arg {text:?} has no `=VALUE`: {usage}");
        };
        let (var, kind) = name.split_once(':').unwrap_or((name, ""));
        let var_ok = var
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        let kind_ok =
            !name.contains(':') || kind.chars().all(|c| c.is_ascii_uppercase()) && !kind.is_empty();
        if !var_ok || !kind_ok {
            anyhow::bail!(
                "--cmake-arg {text:?}: `{name}` is not a CMake variable name (letters, digits \
                 and _, optionally :TYPE such as :BOOL): {usage}"
            );
        }
        if let Some((_, why)) = OWNED_DEFINES.iter().find(|(owned, _)| *owned == var) {
            anyhow::bail!("--cmake-arg cannot set {var}: {why}");
        }
        Ok(Self {
            name: name.to_string(),
            value: value.to_string(),
        })
    }

    /// The variable's name without its `:TYPE`.
    pub fn var(&self) -> &str {
        self.name
            .split_once(':')
            .map_or(self.name.as_str(), |(v, _)| v)
    }

    /// Refuses a variable given twice (which one wins would be a guess).
    pub fn check_unique(defines: &[Self]) -> anyhow::Result<()> {
        for (i, d) in defines.iter().enumerate() {
            if defines[..i].iter().any(|e| e.var() == d.var()) {
                anyhow::bail!(
                    "--cmake-arg sets {} twice: keep one -D{}=VALUE",
                    d.var(),
                    d.var()
                );
            }
        }
        Ok(())
    }
}

impl std::fmt::Display for CmakeDefine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "-D{}={}", self.name, self.value)
    }
}

/// Where the sources come from.
#[derive(Clone, Debug)]
pub enum Source {
    /// Shallow, sparse fetch of the pinned commit into the out folder.
    Fetch,
    /// A checkout the user gave with `--source`.
    Local {
        root: PathBuf,
        /// Set when the user accepted a checkout that differs from the pin: what it holds
        /// instead (it changes what is built, so it changes the prefix).
        mismatch: Option<Mismatch>,
    },
}

/// What an accepted `--source` checkout holds instead of the pin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The checkout's HEAD: the commit actually built.
    pub head: String,
    /// The version its CMakeLists.txt declares (the pin's version is about another commit).
    pub version: String,
    /// A digest of its local changes (diff against HEAD, untracked files), when it has any.
    pub changes: Option<String>,
}

/// What is really built: the pin, or an accepted mismatching checkout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Built {
    pub version: String,
    pub commit: String,
    pub changes: Option<String>,
    /// The pinned commit when this is not it (or has local changes).
    pub instead_of: Option<String>,
}

impl std::fmt::Display for Built {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "rocSHMEM {} at {}", self.version, self.commit)?;
        if let Some(changes) = &self.changes {
            write!(f, " + local changes {changes}")?;
        }
        if let Some(pin) = &self.instead_of {
            write!(f, " (not the pin {pin})")?;
        }
        Ok(())
    }
}

pub struct PlanInputs<'a> {
    pub pin: &'a RocshmemPin,
    pub targets: &'a [TargetId],
    pub toolchain: &'a Toolchain,
    pub source: Source,
    /// Folder holding sources, build trees and prefixes (`target/rocshmem`).
    pub out_dir: &'a Path,
    pub jobs: usize,
    /// `--cmake-arg` defines; they override the plan's own (except those the toolkit owns).
    pub cmake_args: &'a [CmakeDefine],
}

#[derive(Clone, Debug)]
pub struct Plan {
    /// Hash over every input that changes the install.
    pub hash: String,
    /// What is built (the pin, or the `--source` checkout accepted in its place).
    pub built: Built,
    /// The GPU targets, as `--arch` gave them (sorted, deduplicated).
    pub targets: Vec<TargetId>,
    pub prefix: PathBuf,
    /// Where `cmake --install` writes before verification; renamed to `prefix` on success.
    pub staging: PathBuf,
    pub checkout: PathBuf,
    pub source: Source,
    pub source_dir: PathBuf,
    pub build_dir: PathBuf,
    pub defines: Vec<(String, String)>,
    /// Every input, as recorded in the stamp.
    pub inputs: Vec<(String, String)>,
    pub configure: Vec<String>,
    pub build: Vec<String>,
    pub install: Vec<String>,
    /// How the tools were found, for the plan and the build's first lines.
    pub toolchain_lines: Vec<(&'static str, String)>,
    /// Made over [`Toolchain::unknown`]: only to be shown, never built.
    pub rocm_unknown: bool,
}

/// File in the prefix recording every input of the build.
pub const STAMP: &str = "symmem-rocshmem-stamp.toml";

impl Plan {
    pub fn new(i: &PlanInputs<'_>) -> Self {
        let t = i.toolchain;
        let defines = Self::defines(i);
        let built = Self::built(i);
        let inputs = Self::inputs(i, &built, &defines);
        let mut hasher = Sha256::new();
        for (k, v) in &inputs {
            hasher.update(format!("{k}={v}\n"));
        }
        let hash: String = hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();

        // A plan over an unknown ROCm has no real hash: say so wherever it would appear.
        let short = if t.is_unknown() {
            "<hash>".to_string()
        } else {
            hash[..12].to_string()
        };
        let name = Self::prefix_name(i, &built, &short);
        let prefix = i.out_dir.join("prefix").join(&name);
        let staging = i.out_dir.join("prefix").join(format!(".{name}.partial"));
        let checkout = match &i.source {
            Source::Fetch => i.out_dir.join("src").join(&i.pin.commit),
            Source::Local { root, .. } => root.clone(),
        };
        let source_dir = checkout.join(&i.pin.subdirectory);
        let build_dir = i.out_dir.join("build").join(&short);
        // The header records the final prefix; installing elsewhere first only stages files.
        let mut all_defines = defines.clone();
        all_defines.push(("CMAKE_INSTALL_PREFIX".into(), prefix.display().to_string()));

        let crate::cmake::Steps {
            configure,
            build,
            install,
        } = crate::cmake::Project {
            cmake: &t.cmake,
            generator: t.generator,
            source: &source_dir,
            build_dir: &build_dir,
            install_prefix: &staging,
            defines: &all_defines,
            jobs: Some(i.jobs),
        }
        .steps();
        let toolchain_lines = toolchain_lines(t);
        Self {
            hash,
            built,
            targets: i.targets.to_vec(),
            prefix,
            staging,
            checkout,
            source: i.source.clone(),
            source_dir,
            build_dir,
            defines: all_defines,
            inputs,
            configure,
            build,
            install,
            toolchain_lines,
            rocm_unknown: t.is_unknown(),
        }
    }

    /// The prefix's name: what is built (never the pin when it is not: `+local` marks local
    /// changes), the targets and the short hash.
    fn prefix_name(i: &PlanInputs<'_>, built: &Built, short: &str) -> String {
        format!(
            "rocshmem-{}-{}{}-{}-{}",
            built.version,
            &built.commit[..built.commit.len().min(12)],
            if built.changes.is_some() {
                "+local"
            } else {
                ""
            },
            i.targets
                .iter()
                .map(TargetId::path_safe)
                .collect::<Vec<_>>()
                .join(","),
            short
        )
    }

    /// The CMake defines: the plan's own, then `--cmake-arg` (which override), sorted.
    fn defines(i: &PlanInputs<'_>) -> Vec<(String, String)> {
        let targets: Vec<String> = i.targets.iter().map(ToString::to_string).collect();
        let t = i.toolchain;
        let mut defines: Vec<(String, String)> = vec![
            ("CMAKE_BUILD_TYPE".into(), "Release".into()),
            (
                "CMAKE_CXX_COMPILER".into(),
                t.rocm.hipcc.display().to_string(),
            ),
            ("CMAKE_POSITION_INDEPENDENT_CODE".into(), "ON".into()),
            (
                "CMAKE_PREFIX_PATH".into(),
                t.rocm.rocm_path.display().to_string(),
            ),
            ("GPU_TARGETS".into(), targets.join(";")),
            ("ROCM_PATH".into(), t.rocm.rocm_path.display().to_string()),
            ("USE_GDA".into(), "OFF".into()),
            ("USE_IPC".into(), "ON".into()),
            ("USE_RO".into(), "OFF".into()),
            ("USE_SINGLE_NODE".into(), "ON".into()),
            // rocSHMEM 3.4 links MPI whenever one is installed (AUTO): the install would then
            // depend on the machine, not on these inputs. The shim bootstraps with a unique id
            // and needs no MPI.
            ("USE_EXTERNAL_MPI".into(), "OFF".into()),
            // rocSHMEM 3.4 has no option for its `find_package(amd_smi QUIET)` (pod detection
            // and the vmm_fabric heap, both multi-node); CMake's own switch keeps a machine's
            // amd_smi out of a single-node build.
            ("CMAKE_DISABLE_FIND_PACKAGE_amd_smi".into(), "ON".into()),
        ];
        if t.rocm.rocm_version.needs_explicit() {
            // rocSHMEM's setup reads ${ROCM_PATH}/.info/version and fails without it.
            defines.push((
                "EXPLICIT_ROCM_VERSION".into(),
                t.rocm.rocm_version.version.clone(),
            ));
        }
        if let LlvmTools::FromHipconfig { dir, .. } = &t.rocm.llvm {
            for (var, tool) in LLVM_TOOLS {
                defines.push((var.into(), dir.join(tool).display().to_string()));
            }
        }
        for arg in i.cmake_args {
            defines.retain(|(k, _)| k != arg.var());
            defines.push((arg.name.clone(), arg.value.clone()));
        }
        defines.sort();
        defines
    }

    /// What is built: the pin, or the accepted `--source` checkout in its place.
    fn built(i: &PlanInputs<'_>) -> Built {
        match &i.source {
            Source::Local {
                mismatch: Some(m), ..
            } => Built {
                version: m.version.clone(),
                commit: m.head.clone(),
                changes: m.changes.clone(),
                instead_of: Some(i.pin.commit.clone()),
            },
            _ => Built {
                version: i.pin.version.clone(),
                commit: i.pin.commit.clone(),
                changes: None,
                instead_of: None,
            },
        }
    }

    /// Every input of the install, as hashed and recorded in the stamp.
    fn inputs(
        i: &PlanInputs<'_>,
        built: &Built,
        defines: &[(String, String)],
    ) -> Vec<(String, String)> {
        let targets: Vec<String> = i.targets.iter().map(ToString::to_string).collect();
        let t = i.toolchain;
        let mut inputs: Vec<(String, String)> = vec![
            ("repository".into(), i.pin.repository.clone()),
            ("subdirectory".into(), i.pin.subdirectory.clone()),
            ("commit".into(), built.commit.clone()),
            ("version".into(), built.version.clone()),
            ("targets".into(), targets.join(",")),
            ("rocm_version".into(), t.rocm.rocm_version.version.clone()),
        ];
        if let VersionSource::HipVersionHeader { hip } = &t.rocm.rocm_version.source {
            // The ROCm version is only major.minor here; HIP's build number tells releases
            // of one series apart.
            inputs.push(("hip_version".into(), hip.clone()));
        }
        if let Some(changes) = &built.changes {
            inputs.push(("local_changes".into(), changes.clone()));
        }
        if let Some(pin) = &built.instead_of {
            inputs.push(("pinned_commit".into(), pin.clone()));
        }
        if !i.cmake_args.is_empty() {
            let args: Vec<String> = i.cmake_args.iter().map(ToString::to_string).collect();
            inputs.push(("cmake_args".into(), args.join(" ")));
        }
        inputs.extend(
            defines
                .iter()
                .map(|(k, v)| (format!("define.{k}"), v.clone())),
        );
        inputs.extend(t.environment.iter().cloned());
        inputs
    }

    /// The stamp written into a verified prefix (TOML).
    pub fn stamp(&self) -> String {
        #[derive(serde::Serialize)]
        struct Stamp<'a> {
            hash: &'a str,
            inputs: std::collections::BTreeMap<&'a str, &'a str>,
        }
        let stamp = Stamp {
            hash: &self.hash,
            inputs: self
                .inputs
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect(),
        };
        let body = toml::to_string(&stamp).expect("a stamp serialises");
        format!("# Written by `cargo xtask build-rocshmem`: every input of this install.\n{body}")
    }

    /// The hash recorded in a stamp, if it is one.
    pub fn stamped_hash(stamp: &str) -> Option<String> {
        let value: toml::Table = toml::from_str(stamp).ok()?;
        value.get("hash")?.as_str().map(str::to_string)
    }

    /// The whole plan, for `--dry-run`.
    pub fn render(&self, pin: &RocshmemPin, fetch: &[Vec<String>]) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "{}", self.built);
        let _ = writeln!(out, "  from {} ({})", pin.repository, pin.subdirectory);
        for (what, line) in &self.toolchain_lines {
            let _ = writeln!(out, "{what:<7} {line}");
        }
        if self.rocm_unknown {
            let _ = writeln!(
                out,
                "prefix  <unknown> (under {}; its name hashes what is read from ROCm)",
                self.prefix.parent().unwrap_or(&self.prefix).display()
            );
            let _ = writeln!(out, "hash    <unknown>");
        } else {
            let _ = writeln!(out, "prefix  {}", self.prefix.display());
            let _ = writeln!(out, "hash    {}", self.hash);
        }
        out.push_str("steps\n");
        match &self.source {
            Source::Fetch => {
                for command in fetch {
                    let _ = writeln!(out, "  fetch      {}", shell_words(command));
                }
                let _ = writeln!(
                    out,
                    "  fetch      check HEAD is the pin, move to {} (an existing checkout at the \
                     pin is reused)",
                    self.checkout.display()
                );
            }
            Source::Local { root, mismatch } => {
                let what = if mismatch.is_some() {
                    "local checkout, not the pin: accepted with --allow-source-mismatch"
                } else {
                    "local checkout"
                };
                let _ = writeln!(out, "  source     {} ({what})", root.display());
            }
        }
        let _ = writeln!(out, "  configure  {}", shell_words(&self.configure));
        let _ = writeln!(out, "  build      {}", shell_words(&self.build));
        let _ = writeln!(out, "  install    {}", shell_words(&self.install));
        let _ = writeln!(
            out,
            "  verify     rocshmem-config.cmake, librocshmem.a, USE_IPC in rocshmem_config.h, \
             one device bitcode per target"
        );
        let _ = writeln!(out, "  publish    rename to the prefix, with {STAMP}");
        out.push_str("defines\n");
        for (k, v) in &self.defines {
            let _ = writeln!(out, "  {k}={v}");
        }
        out
    }
}

/// One line per tool: where it is and how it was found.
fn toolchain_lines(t: &Toolchain) -> Vec<(&'static str, String)> {
    let llvm = match &t.rocm.llvm {
        LlvmTools::InRocm(dir) => format!(
            "{} (clang++, llvm-link, opt for the device bitcode; rocSHMEM finds them there)",
            dir.display()
        ),
        LlvmTools::FromHipconfig {
            dir,
            hipconfig,
            why,
        } => format!(
            "{} (from `{} --hipclangpath`, as {why}), passed as LLVM_CLANG, LLVM_LINK, LLVM_OPT",
            dir.display(),
            hipconfig.display()
        ),
        LlvmTools::Given => "LLVM_CLANG, LLVM_LINK, LLVM_OPT given with --cmake-arg".into(),
        LlvmTools::Unknown => "<unknown> (ROCm's llvm/bin, else `hipconfig --hipclangpath`, \
                               then passed as LLVM_CLANG, LLVM_LINK, LLVM_OPT)"
            .into(),
    };
    vec![
        (
            "rocm",
            format!("{} ({})", t.rocm.rocm_path.display(), t.rocm.rocm_found),
        ),
        ("version", t.rocm.rocm_version.describe(&t.rocm.rocm_path)),
        (
            "hipcc",
            format!("{} ({})", t.rocm.hipcc.display(), t.rocm.hipcc_found),
        ),
        ("llvm", llvm),
    ]
}

//! The build plan: a pure function of the pin, the targets and the tools found, so that it can
//! be printed (`--dry-run`), snapshot-tested, and hashed into the install prefix.

use super::arch::TargetId;
use crate::pins::RocshmemPin;
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

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

/// The tools found on this machine.
#[derive(Clone, Debug)]
pub struct Toolchain {
    pub rocm_path: PathBuf,
    pub rocm_version: String,
    /// `${ROCM_PATH}/.info/version` exists, so rocSHMEM reads the version itself.
    pub rocm_version_file: bool,
    pub hipcc: PathBuf,
    pub cmake: PathBuf,
    pub generator: Generator,
}

/// Where the sources come from.
#[derive(Clone, Debug)]
pub enum Source {
    /// Shallow, sparse fetch of the pinned commit into the out folder.
    Fetch,
    /// A checkout the user gave with `--source`.
    Local {
        root: PathBuf,
        /// Set when the user accepted a checkout that differs from the pin: its HEAD and a
        /// digest of its local changes (they change what is built, so they change the prefix).
        mismatch: Option<String>,
    },
}

pub struct PlanInputs<'a> {
    pub pin: &'a RocshmemPin,
    pub targets: &'a [TargetId],
    pub toolchain: &'a Toolchain,
    pub source: Source,
    /// Folder holding sources, build trees and prefixes (`target/rocshmem`).
    pub out_dir: &'a Path,
    pub jobs: usize,
}

#[derive(Clone, Debug)]
pub struct Plan {
    /// Hash over every input that changes the install.
    pub hash: String,
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
}

/// File in the prefix recording every input of the build.
pub const STAMP: &str = "symmem-rocshmem-stamp.toml";

impl Plan {
    pub fn new(i: &PlanInputs<'_>) -> Self {
        let targets: Vec<String> = i.targets.iter().map(ToString::to_string).collect();
        let t = i.toolchain;
        let mut defines: Vec<(String, String)> = vec![
            ("CMAKE_BUILD_TYPE".into(), "Release".into()),
            ("CMAKE_CXX_COMPILER".into(), t.hipcc.display().to_string()),
            ("CMAKE_POSITION_INDEPENDENT_CODE".into(), "ON".into()),
            (
                "CMAKE_PREFIX_PATH".into(),
                t.rocm_path.display().to_string(),
            ),
            ("GPU_TARGETS".into(), targets.join(";")),
            ("ROCM_PATH".into(), t.rocm_path.display().to_string()),
            ("USE_GDA".into(), "OFF".into()),
            ("USE_IPC".into(), "ON".into()),
            ("USE_RO".into(), "OFF".into()),
            ("USE_SINGLE_NODE".into(), "ON".into()),
        ];
        if !t.rocm_version_file {
            // rocSHMEM's setup reads ${ROCM_PATH}/.info/version and fails without it.
            defines.push(("EXPLICIT_ROCM_VERSION".into(), t.rocm_version.clone()));
        }
        defines.sort();

        let mut inputs: Vec<(String, String)> = vec![
            ("repository".into(), i.pin.repository.clone()),
            ("subdirectory".into(), i.pin.subdirectory.clone()),
            ("commit".into(), i.pin.commit.clone()),
            ("version".into(), i.pin.version.clone()),
            ("targets".into(), targets.join(",")),
            ("rocm_version".into(), t.rocm_version.clone()),
        ];
        if let Source::Local {
            mismatch: Some(m), ..
        } = &i.source
        {
            inputs.push(("source_mismatch".into(), m.clone()));
        }
        inputs.extend(
            defines
                .iter()
                .map(|(k, v)| (format!("define.{k}"), v.clone())),
        );
        let mut hasher = Sha256::new();
        for (k, v) in &inputs {
            hasher.update(format!("{k}={v}\n"));
        }
        let hash: String = hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();

        let name = format!(
            "rocshmem-{}-{}-{}-{}",
            i.pin.version,
            &i.pin.commit[..12],
            i.targets
                .iter()
                .map(TargetId::path_safe)
                .collect::<Vec<_>>()
                .join(","),
            &hash[..12]
        );
        let prefix = i.out_dir.join("prefix").join(&name);
        let staging = i.out_dir.join("prefix").join(format!(".{name}.partial"));
        let checkout = match &i.source {
            Source::Fetch => i.out_dir.join("src").join(&i.pin.commit),
            Source::Local { root, .. } => root.clone(),
        };
        let source_dir = checkout.join(&i.pin.subdirectory);
        let build_dir = i.out_dir.join("build").join(&hash[..12]);
        // The header records the final prefix; installing elsewhere first only stages files.
        let mut all_defines = defines.clone();
        all_defines.push(("CMAKE_INSTALL_PREFIX".into(), prefix.display().to_string()));

        let cmake = t.cmake.display().to_string();
        let mut configure = vec![
            cmake.clone(),
            "-S".into(),
            source_dir.display().to_string(),
            "-B".into(),
            build_dir.display().to_string(),
            "-G".into(),
            t.generator.cmake_name().into(),
        ];
        configure.extend(all_defines.iter().map(|(k, v)| format!("-D{k}={v}")));
        let build = vec![
            cmake.clone(),
            "--build".into(),
            build_dir.display().to_string(),
            "--parallel".into(),
            i.jobs.to_string(),
        ];
        let install = vec![
            cmake,
            "--install".into(),
            build_dir.display().to_string(),
            "--prefix".into(),
            staging.display().to_string(),
        ];
        Self {
            hash,
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
        }
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
        let _ = writeln!(out, "rocSHMEM {} at {}", pin.version, pin.commit);
        let _ = writeln!(out, "  from {} ({})", pin.repository, pin.subdirectory);
        let _ = writeln!(out, "prefix  {}", self.prefix.display());
        let _ = writeln!(out, "hash    {}", self.hash);
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
                let _ = writeln!(out, "  source     {} (local checkout)", root.display());
                if let Some(m) = mismatch {
                    let _ = writeln!(out, "             differs from the pin: {m}");
                }
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

/// Shell-style rendering of a command for humans (single quotes where needed).
pub fn shell_words(command: &[String]) -> String {
    command
        .iter()
        .map(|w| {
            if !w.is_empty()
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
            {
                w.clone()
            } else {
                format!("'{}'", w.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

//! What a shim build is keyed on: the SHMEM library it links ([`Library`]), its sources, its
//! tools and definitions ([`Key`], whose hash names the build folder), and the stamp written
//! next to the installed library, with the names of the inputs read back from it.

use anyhow::Context;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// The SHMEM library install a shim build links: what the build reports, and what it keys
/// its build folder on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Library {
    /// One line for humans: which library, version, commit, targets, prefix.
    pub(super) describe: String,
    /// What identifies this install (its stamp's hash, or its files' sizes and times).
    pub(super) key: Vec<(String, String)>,
}

/// Size and modification time of `file`, as a key: a rebuilt library changes them.
pub(super) fn file_identity(file: &Path) -> String {
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

/// The shim's sources, as a key: a digest of every file in the source folder.
pub(super) fn sources_digest(source: &Path) -> anyhow::Result<String> {
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
pub(super) struct Key {
    inputs: Vec<(String, String)>,
    hash: String,
}

impl Key {
    pub(super) fn new(
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
    pub(super) fn build_dir(&self, out: &Path) -> PathBuf {
        out.join("build").join(&self.hash[..12])
    }

    /// The stamp written next to the installed library (TOML).
    pub(super) fn stamp(&self, library: &Library) -> String {
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

/// Keys of the stamp's `inputs` that [`installed`](super::installed) reads back.
pub(super) const NVSHMEM_VERSION_KEY: &str = "nvshmem.version";
pub(super) const ROCSHMEM_PREFIX_KEY: &str = "rocshmem.prefix";
pub(super) const ROCSHMEM_STAMP_KEY: &str = "rocshmem.stamp";
/// The stamp's NVSHMEM version when its header does not say.
pub(super) const UNKNOWN_VERSION: &str = "unknown";

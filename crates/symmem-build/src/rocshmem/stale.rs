//! Build trees and prefixes of other inputs under the out folder (`target/rocshmem`).
//!
//! Every changed input (targets, ROCm, defines, pin) gets a new hash, hence a new prefix, and an
//! interrupted or failed build leaves its build tree (kept so that it resumes): they pile up,
//! each hundreds of MB. Only entries named the way this command names them are considered, and
//! the current plan's are never touched.

use anyhow::Context;
use std::path::{Path, PathBuf};

/// One stale entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub path: PathBuf,
    pub kind: Kind,
    /// Bytes on disk (file sizes, symbolic links not followed).
    pub bytes: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `build/<hash12>`: a build tree left by a failed or interrupted build.
    BuildTree,
    /// `prefix/rocshmem-...`: an install for other inputs.
    Prefix,
    /// `prefix/.rocshmem-....partial`: a staged install that was never published.
    Staging,
}

/// The stale entries under `out_dir`, keeping `keep` (the current plan's build tree, prefix
/// and staging folder).
pub fn find(out_dir: &Path, keep: &[&Path]) -> Vec<Entry> {
    let mut found = Vec::new();
    let mut scan = |dir: PathBuf, classify: &dyn Fn(&str) -> Option<Kind>| {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if !is_dir || keep.iter().any(|k| *k == path) {
                continue;
            }
            if let Some(kind) = classify(&name) {
                found.push(Entry {
                    bytes: size_of(&path),
                    path,
                    kind,
                });
            }
        }
    };
    scan(out_dir.join("build"), &|name| {
        (name.len() == 12 && name.chars().all(|c| c.is_ascii_hexdigit())).then_some(Kind::BuildTree)
    });
    scan(out_dir.join("prefix"), &|name| {
        if name.starts_with(".rocshmem-") && name.ends_with(".partial") {
            Some(Kind::Staging)
        } else if name.starts_with("rocshmem-") {
            Some(Kind::Prefix)
        } else {
            None
        }
    });
    found.sort_by(|a, b| a.path.cmp(&b.path));
    found
}

/// Removes `entries`.
pub fn remove(entries: &[Entry]) -> anyhow::Result<()> {
    for entry in entries {
        std::fs::remove_dir_all(&entry.path).with_context(|| {
            format!(
                "removing {}: check its permissions, or remove it by hand",
                entry.path.display()
            )
        })?;
    }
    Ok(())
}

/// "2 build trees, 1 prefix (1.2 GiB)".
pub fn summary(entries: &[Entry]) -> String {
    let count = |kind: Kind| entries.iter().filter(|e| e.kind == kind).count();
    let plural =
        |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let mut parts = Vec::new();
    let builds = count(Kind::BuildTree);
    if builds > 0 {
        parts.push(plural(builds, "build tree", "build trees"));
    }
    let prefixes = count(Kind::Prefix);
    if prefixes > 0 {
        parts.push(plural(prefixes, "prefix", "prefixes"));
    }
    let staging = count(Kind::Staging);
    if staging > 0 {
        parts.push(plural(
            staging,
            "unpublished install",
            "unpublished installs",
        ));
    }
    let bytes: u64 = entries.iter().map(|e| e.bytes).sum();
    format!("{} ({})", parts.join(", "), human_bytes(bytes))
}

fn size_of(path: &Path) -> u64 {
    let Ok(meta) = path.symlink_metadata() else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(path)
        .map(|entries| entries.flatten().map(|e| size_of(&e.path())).sum())
        .unwrap_or(0)
}

/// A size for people to read: `1.5 KiB`, `3.0 GiB` (binary units, one decimal).
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with(path: &Path, bytes: usize) {
        std::fs::create_dir_all(path).unwrap();
        std::fs::write(path.join("file"), vec![0u8; bytes]).unwrap();
    }

    #[test]
    fn finds_and_removes_only_other_inputs_never_the_current_one() {
        let out = tempfile::tempdir().unwrap();
        let o = out.path();
        let current_build = o.join("build/0123456789ab");
        let current_prefix = o.join("prefix/rocshmem-3.4.0-006ac1aaa8bf-gfx942-0123456789ab");
        let current_staging =
            o.join("prefix/.rocshmem-3.4.0-006ac1aaa8bf-gfx942-0123456789ab.partial");
        for keep in [&current_build, &current_prefix, &current_staging] {
            dir_with(keep, 10);
        }
        dir_with(&o.join("build/aaaaaaaaaaaa"), 2000);
        dir_with(&o.join("build/bbbbbbbbbbbb"), 48);
        dir_with(
            &o.join("prefix/rocshmem-3.4.0-006ac1aaa8bf-gfx90a-cccccccccccc"),
            1000,
        );
        dir_with(
            &o.join("prefix/.rocshmem-3.4.0-006ac1aaa8bf-gfx90a-dddddddddddd.partial"),
            1,
        );
        // Not ours: never touched.
        dir_with(&o.join("build/notes"), 1);
        dir_with(&o.join("prefix/my-own-install"), 1);
        dir_with(&o.join("src/006ac1aaa8bfbf04a77a120cfc54db79095f3219"), 1);
        std::fs::write(o.join("prefix/rocshmem-a-file"), "").unwrap();

        let keep = [
            current_build.as_path(),
            current_prefix.as_path(),
            current_staging.as_path(),
        ];
        let stale = find(o, &keep);
        let names: Vec<(String, Kind)> = stale
            .iter()
            .map(|e| {
                let rel = e.path.strip_prefix(o).unwrap().display().to_string();
                (rel, e.kind)
            })
            .collect();
        assert_eq!(
            names,
            [
                ("build/aaaaaaaaaaaa".to_string(), Kind::BuildTree),
                ("build/bbbbbbbbbbbb".to_string(), Kind::BuildTree),
                (
                    "prefix/.rocshmem-3.4.0-006ac1aaa8bf-gfx90a-dddddddddddd.partial".to_string(),
                    Kind::Staging
                ),
                (
                    "prefix/rocshmem-3.4.0-006ac1aaa8bf-gfx90a-cccccccccccc".to_string(),
                    Kind::Prefix
                ),
            ]
        );
        assert_eq!(
            summary(&stale),
            "2 build trees, 1 prefix, 1 unpublished install (3.0 KiB)"
        );

        remove(&stale).unwrap();
        assert!(find(o, &keep).is_empty());
        for kept in [
            current_build,
            current_prefix,
            current_staging,
            o.join("build/notes"),
            o.join("prefix/my-own-install"),
            o.join("prefix/rocshmem-a-file"),
            o.join("src/006ac1aaa8bfbf04a77a120cfc54db79095f3219"),
        ] {
            assert!(kept.exists(), "{} was removed", kept.display());
        }
    }

    #[test]
    fn nothing_there_is_nothing_stale() {
        let out = tempfile::tempdir().unwrap();
        assert!(find(&out.path().join("missing"), &[]).is_empty());
    }

    #[test]
    fn sizes_read_for_humans() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }
}

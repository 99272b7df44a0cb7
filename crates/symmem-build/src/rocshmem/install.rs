//! Verifying an install and publishing it under its content-addressed prefix.

use super::plan::{Plan, STAMP};
use crate::targets::TargetId;
use anyhow::{Context, bail};
use std::path::Path;

/// Checks that `dir` holds a usable IPC build of rocSHMEM for `targets`.
pub fn verify(dir: &Path, targets: &[TargetId]) -> anyhow::Result<()> {
    let mut problems = Vec::new();
    for file in [
        "lib/cmake/rocshmem/rocshmem-config.cmake",
        "lib/librocshmem.a",
    ] {
        if !dir.join(file).is_file() {
            problems.push(format!("{file} is missing"));
        }
    }
    let header = dir.join("include/rocshmem/rocshmem_config.h");
    match std::fs::read_to_string(&header) {
        Ok(text) if text.lines().any(|l| l.trim() == "#define USE_IPC") => {}
        Ok(_) => problems.push("include/rocshmem/rocshmem_config.h does not enable USE_IPC".into()),
        Err(_) => problems.push("include/rocshmem/rocshmem_config.h is missing".into()),
    }
    let mut processors: Vec<&str> = targets.iter().map(|t| t.processor.as_str()).collect();
    processors.dedup();
    for processor in processors {
        let bc = format!("lib/librocshmem_device_{processor}.bc");
        if !dir.join(&bc).is_file() {
            problems.push(format!("{bc} is missing (device bitcode for {processor})"));
        }
    }
    if !problems.is_empty() {
        bail!(
            "the rocSHMEM install in {} is not valid: {}",
            dir.display(),
            problems.join("; ")
        );
    }
    Ok(())
}

/// What a prefix's stamp says about the install: what `build-shim` reports and keys on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstallStamp {
    /// The hash of every input of the install.
    pub hash: String,
    pub version: String,
    pub commit: String,
    /// The GPU targets it was built for, as `--arch` took them (comma-separated).
    pub targets: String,
}

/// The stamp of the install in `prefix`; `None` when it has none (not made by
/// `cargo xtask build-rocshmem`). A stamp that does not parse is an error naming the file.
pub fn read_stamp(prefix: &Path) -> anyhow::Result<Option<InstallStamp>> {
    let path = prefix.join(STAMP);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let bad = |why: &str| {
        anyhow::anyhow!(
            "{} is not a build-rocshmem stamp ({why}): rebuild the install with `cargo xtask \
             build-rocshmem`",
            path.display()
        )
    };
    let table: toml::Table = toml::from_str(&text).map_err(|e| bad(&e.to_string()))?;
    let hash = table.get("hash").and_then(toml::Value::as_str);
    let inputs = table.get("inputs").and_then(toml::Value::as_table);
    let input = |name: &str| {
        inputs
            .and_then(|i| i.get(name))
            .and_then(toml::Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| bad(&format!("no inputs.{name}")))
    };
    Ok(Some(InstallStamp {
        hash: hash.ok_or_else(|| bad("no hash"))?.to_string(),
        version: input("version")?,
        commit: input("commit")?,
        targets: input("targets")?,
    }))
}

/// True when `plan.prefix` already holds a verified install of exactly this plan.
pub fn up_to_date(plan: &Plan) -> bool {
    std::fs::read_to_string(plan.prefix.join(STAMP))
        .ok()
        .and_then(|s| Plan::stamped_hash(&s))
        .is_some_and(|h| h == plan.hash)
        && verify(&plan.prefix, &plan.targets).is_ok()
}

/// Verifies the staged install, stamps it and moves it to its prefix. On failure the staging
/// folder is removed, so nothing half-built can pass for an install.
pub fn publish(plan: &Plan) -> anyhow::Result<()> {
    let result = (|| {
        verify(&plan.staging, &plan.targets)?;
        std::fs::write(plan.staging.join(STAMP), plan.stamp()).context("writing the stamp")?;
        if plan.prefix.exists() {
            // Not up to date (checked before building): an invalid leftover.
            std::fs::remove_dir_all(&plan.prefix)
                .with_context(|| format!("removing the invalid {}", plan.prefix.display()))?;
        }
        std::fs::rename(&plan.staging, &plan.prefix)
            .with_context(|| format!("moving the install to {}", plan.prefix.display()))
    })();
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&plan.staging);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verification_names_what_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let targets = TargetId::parse_list("gfx942,gfx950:xnack-").unwrap();
        let e = verify(dir.path(), &targets).unwrap_err().to_string();
        for missing in [
            "rocshmem-config.cmake",
            "librocshmem.a",
            "rocshmem_config.h is missing",
            "librocshmem_device_gfx942.bc",
            "librocshmem_device_gfx950.bc",
        ] {
            assert!(e.contains(missing), "{missing}: {e}");
        }
        let p = dir.path();
        std::fs::create_dir_all(p.join("lib/cmake/rocshmem")).unwrap();
        std::fs::create_dir_all(p.join("include/rocshmem")).unwrap();
        std::fs::write(p.join("lib/cmake/rocshmem/rocshmem-config.cmake"), "").unwrap();
        std::fs::write(p.join("lib/librocshmem.a"), "").unwrap();
        std::fs::write(
            p.join("include/rocshmem/rocshmem_config.h"),
            "/* #undef USE_IPC */\n#define USE_RO\n",
        )
        .unwrap();
        std::fs::write(p.join("lib/librocshmem_device_gfx942.bc"), "").unwrap();
        std::fs::write(p.join("lib/librocshmem_device_gfx950.bc"), "").unwrap();
        let e = verify(p, &targets).unwrap_err().to_string();
        assert!(e.contains("does not enable USE_IPC"), "{e}");
        std::fs::write(
            p.join("include/rocshmem/rocshmem_config.h"),
            "#define USE_IPC\n",
        )
        .unwrap();
        verify(p, &targets).unwrap();
    }
}

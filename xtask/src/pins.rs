//! `pins.toml`: the single source of truth for what the toolkit builds against.

use anyhow::{Context, bail};
use serde::Deserialize;
use std::path::Path;

/// The pinned rocSHMEM source.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RocshmemPin {
    pub repository: String,
    pub subdirectory: String,
    pub commit: String,
    pub version: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RustPin {
    pub toolchain: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pins {
    pub rocshmem: RocshmemPin,
    pub rust: RustPin,
}

impl Pins {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the pins file {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("invalid pins file {}", path.display()))
    }

    /// Parses and validates; errors name the offending field.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        // toml's messages name missing and unknown fields with their table.
        let pins: Pins = toml::from_str(text)?;
        pins.validate()?;
        Ok(pins)
    }

    fn validate(&self) -> anyhow::Result<()> {
        let r = &self.rocshmem;
        if r.repository.trim().is_empty() {
            bail!("rocshmem.repository is empty: give the git URL of the rocSHMEM source");
        }
        let sub = Path::new(&r.subdirectory);
        if r.subdirectory.is_empty()
            || sub.is_absolute()
            || sub
                .components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            bail!(
                "rocshmem.subdirectory = {:?} must be a relative path inside the repository \
                 (e.g. \"projects/rocshmem\")",
                r.subdirectory
            );
        }
        if r.commit.len() != 40 || !r.commit.bytes().all(|b| b.is_ascii_hexdigit()) {
            bail!(
                "rocshmem.commit = {:?} must be a full 40-hex commit id, never a branch or tag",
                r.commit
            );
        }
        if !is_version(&r.version) {
            bail!("rocshmem.version = {:?} must look like 3.4.0", r.version);
        }
        if !is_version(&self.rust.toolchain) {
            bail!(
                "rust.toolchain = {:?} must look like 1.95.0",
                self.rust.toolchain
            );
        }
        Ok(())
    }
}

fn is_version(text: &str) -> bool {
    let parts: Vec<&str> = text.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::project::project_root;

    const GOOD: &str = r#"
[rocshmem]
repository = "https://example.org/rocm-systems.git"
subdirectory = "projects/rocshmem"
commit = "006ac1aaa8bfbf04a77a120cfc54db79095f3219"
version = "3.4.0"
[rust]
toolchain = "1.95.0"
"#;

    fn error(text: &str) -> String {
        format!("{:#}", Pins::parse(text).unwrap_err())
    }

    #[test]
    fn the_repository_pins_are_valid_and_match_the_toolchain_file() {
        let pins = Pins::load(&project_root().join("pins.toml")).unwrap();
        let toolchain =
            std::fs::read_to_string(project_root().join("rust-toolchain.toml")).unwrap();
        assert!(
            toolchain.contains(&format!("channel = \"{}\"", pins.rust.toolchain)),
            "rust-toolchain.toml and pins.toml disagree on the Rust toolchain"
        );
    }

    #[test]
    fn errors_name_the_field() {
        assert!(Pins::parse(GOOD).is_ok());
        let e = error(&GOOD.replace("006ac1aaa8bfbf04a77a120cfc54db79095f3219", "main"));
        assert!(e.contains("rocshmem.commit"), "{e}");
        let e = error(&GOOD.replace("3.4.0", "latest"));
        assert!(e.contains("rocshmem.version"), "{e}");
        let e = error(&GOOD.replace("projects/rocshmem", "../x"));
        assert!(e.contains("rocshmem.subdirectory"), "{e}");
        let e = error(&GOOD.replace("https://example.org/rocm-systems.git", " "));
        assert!(e.contains("rocshmem.repository"), "{e}");
        let e = error(&GOOD.replace("version = \"3.4.0\"\n", ""));
        assert!(e.contains("missing field `version`"), "{e}");
        assert!(e.contains("rocshmem"), "{e}");
        let e = error(&GOOD.replace("[rust]\ntoolchain = \"1.95.0\"\n", ""));
        assert!(e.contains("missing field `rust`"), "{e}");
        let e = error(&format!("{GOOD}colour = \"blue\"\n"));
        assert!(e.contains("unknown field `colour`"), "{e}");
    }
}

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

/// What the container images are built from and where they are published.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImagesPin {
    /// The ROCm base image repository, without a tag (the tag is `<rocm>-complete`).
    pub base: String,
    /// The ROCm release of the base image, e.g. `7.2.4`.
    pub rocm: String,
    /// The images' default GPU targets (their `ARCH` build argument).
    pub arch: String,
    /// The registry (host[:port][/path]) CI publishes the images to and `cargo xtask test
    /// --container` pulls from; the xtask checks its form and may override it.
    pub registry: String,
}

impl ImagesPin {
    /// The full base image reference, e.g. `rocm/dev-ubuntu-24.04:7.2.4-complete`.
    pub fn base_image(&self) -> String {
        format!("{}:{}-complete", self.base, self.rocm)
    }
}

/// What the Nix flake's environments provide (the flake reads it through nix/pins.nix).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NixPin {
    /// The ROCm release nixpkgs at the flake's pin packages, e.g. `7.2.3`.
    pub rocm: String,
}

/// The NVSHMEM the NVSHMEM shim is built against and the CUDA wheels that go with it (read by
/// scripts/gpu/nvshmem-sdk.sh; build-shim's messages name the table).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvshmemPin {
    /// The NVSHMEM release, e.g. `3.5.0`.
    pub version: String,
    /// The CUDA wheels' version as pip takes it, e.g. `13.0.*`.
    pub cuda: String,
}

/// The Python build and test tools (read by crates/symmem-py/ci.sh and the GPU bundle script).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PythonPin {
    /// maturin's pip requirement range, e.g. `>=1.9.4,<2` (pyproject.toml repeats it).
    pub maturin: String,
    /// The Triton release, e.g. `3.6.0`.
    pub triton: String,
    /// The torch release crates/symmem-py/ci.sh tests with, e.g. `2.11.0` (read by scripts
    /// only; optional for pins files made before it).
    #[serde(default)]
    pub torch: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pins {
    pub rocshmem: RocshmemPin,
    pub rust: RustPin,
    /// Optional so that a pins file made for `build-rocshmem --pins` alone needs no images.
    #[serde(default)]
    pub images: Option<ImagesPin>,
    /// Optional like `images`: only the flake reads it.
    #[serde(default)]
    pub nix: Option<NixPin>,
    /// Optional: only the NVSHMEM scripts read it.
    #[serde(default)]
    pub nvshmem: Option<NvshmemPin>,
    /// Optional: only the Python scripts read it.
    #[serde(default)]
    pub python: Option<PythonPin>,
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
        if r.repository.trim_start().starts_with('-') {
            bail!(
                "rocshmem.repository = {:?} starts with `-`, which git would read as an option: \
                 give the git URL or path of the rocSHMEM source (e.g. \
                 \"https://github.com/ROCm/rocm-systems.git\", or \"./-dir\" for a local folder \
                 whose name starts with `-`)",
                r.repository
            );
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
        if let Some(images) = &self.images {
            images.validate()?;
        }
        if let Some(n) = &self.nvshmem
            && (!is_version(&n.version) || !is_pip_version(&n.cuda))
        {
            bail!(
                "nvshmem.version = {:?} must be a release like 3.5.0 and nvshmem.cuda = {:?} like \
                 13.0.* (a pip version of the CUDA wheels)",
                n.version,
                n.cuda
            );
        }
        if let Some(p) = &self.python
            && (!is_version(&p.triton) || !p.maturin.starts_with(['>', '=', '~']))
        {
            bail!(
                "python.triton = {:?} must look like 3.6.0 and python.maturin = {:?} like \
                 \">=1.9.4,<2\" (a pip requirement range)",
                p.triton,
                p.maturin
            );
        }
        if let Some(nix) = &self.nix {
            if !is_version(&nix.rocm) {
                bail!(
                    "nix.rocm = {:?} must be a ROCm release like 7.2.3: the one nixpkgs at the \
                     flake's pin packages",
                    nix.rocm
                );
            }
            // The same rule nix/pins.nix applies when the flake is evaluated.
            if let Some(images) = &self.images
                && series(&nix.rocm) != series(&images.rocm)
            {
                bail!(
                    "nix.rocm = {:?} and images.rocm = {:?} are different ROCm series: the Nix \
                     shell and the images may differ in the patch release only",
                    nix.rocm,
                    images.rocm
                );
            }
        }
        Ok(())
    }

    /// The `[images]` table, which the container generator and `--container` need.
    pub fn images(&self) -> anyhow::Result<&ImagesPin> {
        self.images.as_ref().context(
            "the pins file has no [images] table: add one with base, rocm, arch and registry \
             (see the repository's pins.toml)",
        )
    }
}

impl ImagesPin {
    fn validate(&self) -> anyhow::Result<()> {
        if !is_repository(&self.base) {
            bail!(
                "images.base = {:?} must be an image repository without tag or digest, e.g. \
                 \"rocm/dev-ubuntu-24.04\" (the tag comes from images.rocm: <rocm>-complete)",
                self.base
            );
        }
        if !is_version(&self.rocm) {
            bail!(
                "images.rocm = {:?} must be a ROCm release like 7.2.4 (one with a \
                 {}:<release>-complete image)",
                self.rocm,
                self.base
            );
        }
        crate::targets::TargetId::parse_list(&self.arch)
            .with_context(|| format!("images.arch = {:?} is not a GPU target list", self.arch))?;
        Ok(())
    }
}

/// A lowercase image repository name (registry host, path), with no tag, digest or scheme.
fn is_repository(text: &str) -> bool {
    !text.is_empty()
        && !text.starts_with(['/', '.', '-'])
        && !text.ends_with('/')
        && !text.contains("//")
        && text.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'/' | b'-' | b'_')
        })
}

/// `7.2.4` -> `7.2`: the release series.
fn series(version: &str) -> &str {
    version
        .rsplit_once('.')
        .map_or(version, |(series, _)| series)
}

/// `13.0.*` or `13.0.1`: digits and dots, with an optional `.*` at the end.
fn is_pip_version(text: &str) -> bool {
    let fixed = text.strip_suffix(".*").unwrap_or(text);
    !fixed.is_empty()
        && fixed
            .split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
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
    /// The repository's root (this crate is crates/symmem-build).
    fn project_root() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    const GOOD: &str = r#"
[rocshmem]
repository = "https://example.org/rocm-systems.git"
subdirectory = "projects/rocshmem"
commit = "006ac1aaa8bfbf04a77a120cfc54db79095f3219"
version = "3.4.0"
[rust]
toolchain = "1.95.0"
[images]
base = "rocm/dev-ubuntu-24.04"
rocm = "7.2.4"
arch = "gfx942"
registry = "ghcr.io/symmem"
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
        for option in ["--upload-pack=touch /tmp/pwned", "-x", " -x"] {
            let e = error(&GOOD.replace("https://example.org/rocm-systems.git", option));
            assert!(
                e.contains("rocshmem.repository") && e.contains("read as an option"),
                "{option}: {e}"
            );
        }
        let e = error(&GOOD.replace("version = \"3.4.0\"\n", ""));
        assert!(e.contains("missing field `version`"), "{e}");
        assert!(e.contains("rocshmem"), "{e}");
        let e = error(&GOOD.replace("[rust]\ntoolchain = \"1.95.0\"\n", ""));
        assert!(e.contains("missing field `rust`"), "{e}");
        let e = error(&format!("{GOOD}colour = \"blue\"\n"));
        assert!(e.contains("unknown field `colour`"), "{e}");
    }

    #[test]
    fn image_pins_are_checked_and_errors_name_the_field() {
        let pins = Pins::parse(GOOD).unwrap();
        assert_eq!(
            pins.images().unwrap().base_image(),
            "rocm/dev-ubuntu-24.04:7.2.4-complete"
        );
        let cases = [
            (
                "\"rocm/dev-ubuntu-24.04\"",
                "\"rocm/dev-ubuntu-24.04:7.2.4\"",
                "images.base",
            ),
            ("rocm = \"7.2.4\"", "rocm = \"latest\"", "images.rocm"),
            ("arch = \"gfx942\"", "arch = \"gfx9999\"", "images.arch"),
        ];
        for (from, to, field) in cases {
            assert!(GOOD.contains(from), "{from}");
            let e = error(&GOOD.replacen(from, to, 1));
            assert!(e.contains(field), "{from} -> {to}: {e}");
        }
        let e = error(&GOOD.replace("arch = \"gfx942\"\n", ""));
        assert!(e.contains("missing field `arch`"), "{e}");
        // A pins file without the table still serves build-rocshmem; asking for it names the fix.
        let (head, _) = GOOD.split_once("[images]").unwrap();
        let e = format!("{:#}", Pins::parse(head).unwrap().images().unwrap_err());
        assert!(e.contains("no [images] table"), "{e}");
        // The arch error carries build-rocshmem's list of valid targets.
        let e = error(&GOOD.replace("arch = \"gfx942\"", "arch = \"gfx9999\""));
        assert!(e.contains("valid targets"), "{e}");
    }

    #[test]
    fn nix_rocm_may_differ_from_the_images_in_the_patch_release_only() {
        let with_nix = |rocm: &str| format!("{GOOD}[nix]\nrocm = \"{rocm}\"\n");
        let pins = Pins::parse(&with_nix("7.2.3")).unwrap();
        assert_eq!(pins.nix.unwrap().rocm, "7.2.3");
        let e = error(&with_nix("7.1.1"));
        assert!(
            e.contains(
                "nix.rocm = \"7.1.1\" and images.rocm = \"7.2.4\" are different ROCm series"
            ),
            "{e}"
        );
        let e = error(&with_nix("7.2"));
        assert!(
            e.contains("nix.rocm = \"7.2\" must be a ROCm release"),
            "{e}"
        );
    }

    #[test]
    fn nvshmem_and_python_pins_are_checked() {
        let pins = Pins::load(&project_root().join("pins.toml")).unwrap();
        assert!(pins.nvshmem.is_some() && pins.python.is_some());
        let tables = "[nvshmem]\nversion = \"3.5.0\"\ncuda = \"13.0.*\"\n\
                      [python]\nmaturin = \">=1.9.4,<2\"\ntriton = \"3.6.0\"\n";
        assert!(Pins::parse(&format!("{GOOD}{tables}")).is_ok());
        for (from, to, field) in [
            ("\"3.5.0\"", "\"3.5\"", "nvshmem.version"),
            ("\"13.0.*\"", "\"13.*.0\"", "nvshmem.cuda"),
            ("\"3.6.0\"", "\"latest\"", "python.triton"),
            ("\">=1.9.4,<2\"", "\"1.9.4\"", "python.maturin"),
        ] {
            let e = error(&format!("{GOOD}{}", tables.replace(from, to)));
            assert!(e.contains(field), "{from} -> {to}: {e}");
        }
    }

    /// pip's build isolation reads maturin's range from pyproject.toml, which cannot include
    /// pins.toml: the two are kept equal here.
    #[test]
    fn pyproject_requires_the_pinned_maturin() {
        let pins = Pins::load(&project_root().join("pins.toml")).unwrap();
        let maturin = &pins.python.unwrap().maturin;
        let pyproject =
            std::fs::read_to_string(project_root().join("crates/symmem-py/pyproject.toml"))
                .unwrap();
        let line = format!("requires = [\"maturin{maturin}\"]");
        assert!(
            pyproject.lines().any(|l| l.trim() == line),
            "crates/symmem-py/pyproject.toml's [build-system] must say `{line}` (pins.toml \
             [python] maturin): make them equal"
        );
    }

    /// pins.toml as committed says what each environment provides, and they agree.
    #[test]
    fn the_repository_pins_name_the_rocm_of_every_environment() {
        let pins = Pins::load(&project_root().join("pins.toml")).unwrap();
        let images = pins.images().unwrap();
        let nix = pins.nix.as_ref().expect("pins.toml has a [nix] table");
        assert_eq!(series(&nix.rocm), series(&images.rocm));
    }
}

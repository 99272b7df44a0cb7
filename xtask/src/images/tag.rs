//! The image tag: a content hash over every input that goes into the images.
//!
//! Hashed: every file under the [`INPUTS`] (pins, Cargo.lock, rust-toolchain.toml, the xtask
//! and crate sources with the shim's, the generated container files, and the generator, which
//! is xtask source), minus [`EXCLUDES`] (build outputs, Markdown docs). Each file contributes
//! its path relative to the repository root, whether it is executable, and its contents
//! (symbolic links followed, as Apptainer's `cp -L` does); files are sorted by path, so the tag
//! depends neither on where the checkout lives nor on the order the file system lists them.
//! The Docker context and Apptainer's `%files` copy exactly these inputs, and the image builds
//! recompute the tag from what they copied.

use super::model::{INPUTS, excluded};
use anyhow::{Context, bail};
use sha2::{Digest, Sha256};
use std::path::Path;

/// Hex digits of the hash kept in the tag.
pub const TAG_LEN: usize = 16;
/// Bumped when the hashing scheme changes, so that old tags are never reused.
const SCHEME: &str = "symmem-image-tag-v1";

/// The tag of the tree at `root`.
pub fn compute(root: &Path) -> anyhow::Result<String> {
    let files = input_files(root)?;
    let mut hasher = Sha256::new();
    hasher.update(SCHEME.as_bytes());
    hasher.update([0]);
    for relative in &files {
        // Links are followed, as Apptainer's %files copy (cp -L) does.
        let path = root.join(relative);
        let meta =
            std::fs::metadata(&path).with_context(|| format!("reading {}", path.display()))?;
        let contents =
            std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let executable = {
            use std::os::unix::fs::PermissionsExt;
            meta.permissions().mode() & 0o111 != 0
        };
        hasher.update(relative.as_bytes());
        hasher.update(if executable { b"\0exec\0" } else { b"\0file\0" });
        hasher.update((contents.len() as u64).to_le_bytes());
        hasher.update(&contents);
    }
    let digest = hasher.finalize();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    Ok(hex[..TAG_LEN].to_string())
}

/// Every hashed file, relative to `root` with `/` separators, sorted.
pub fn input_files(root: &Path) -> anyhow::Result<Vec<String>> {
    let mut files = Vec::new();
    for input in INPUTS {
        let path = root.join(input);
        if std::fs::metadata(&path).is_err() {
            bail!(
                "image input `{input}` is missing from {}: every entry of INPUTS in \
                 xtask/src/images/model.rs must exist (remove it there if it is gone for good)",
                root.display()
            );
        }
        walk(root, input, &mut files)?;
    }
    files.sort();
    Ok(files)
}

fn walk(root: &Path, relative: &str, files: &mut Vec<String>) -> anyhow::Result<()> {
    if excluded(relative) {
        return Ok(());
    }
    let path = root.join(relative);
    let meta = std::fs::metadata(&path).with_context(|| format!("reading {}", path.display()))?;
    if !meta.is_dir() {
        files.push(relative.to_string());
        return Ok(());
    }
    let entries =
        std::fs::read_dir(&path).with_context(|| format!("listing {}", path.display()))?;
    for entry in entries {
        let entry = entry.with_context(|| format!("listing {}", path.display()))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            bail!(
                "{} has a file name that is not UTF-8: rename it (image inputs must have \
                 portable names)",
                entry.path().display()
            );
        };
        walk(root, &format!("{relative}/{name}"), files)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A minimal tree with one file of every input class, plus docs.
    const TREE: &[(&str, &str)] = &[
        ("pins.toml", "[rocshmem]\ncommit = \"006ac1aa\"\n"),
        (
            "Cargo.toml",
            "[workspace]\nmembers = [\"crates/*\", \"xtask\"]\n",
        ),
        ("Cargo.lock", "version = 4\n"),
        ("rust-toolchain.toml", "[toolchain]\nchannel = \"1.95.0\"\n"),
        (
            ".cargo/config.toml",
            "[alias]\nxtask = \"run -p xtask --\"\n",
        ),
        (
            "containers/Dockerfile",
            "FROM rocm/dev-ubuntu-24.04:7.2.4-complete\n",
        ),
        ("containers/symmem.def", "Bootstrap: docker\n"),
        ("containers/README.md", "# containers\n"),
        ("xtask/src/main.rs", "fn main() {}\n"),
        ("xtask/src/images/render.rs", "// the templates\n"),
        ("crates/symmem/src/lib.rs", "pub fn f() {}\n"),
        ("crates/symmem/README.md", "# symmem\n"),
        (
            "crates/symmem-shim-sys/shim/rocshmem_shim.hip",
            "extern \"C\" int symmem_shim_init();\n",
        ),
        ("README.md", "# symmem\n"),
        ("docs/benchmarks.md", "figures\n"),
        (".github/workflows/ci.yml", "name: ci\n"),
    ];

    fn make_tree(dir: &Path) {
        for (path, contents) in TREE {
            let path = dir.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, contents).unwrap();
        }
    }

    fn tag_after(change: impl FnOnce(&Path)) -> String {
        let dir = tempfile::tempdir().unwrap();
        make_tree(dir.path());
        change(dir.path());
        compute(dir.path()).unwrap()
    }

    fn append(root: &Path, file: &str) {
        let path: PathBuf = root.join(file);
        let mut text = std::fs::read_to_string(&path).unwrap_or_default();
        text.push_str("// changed\n");
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn every_input_class_changes_the_tag() {
        let base = tag_after(|_| {});
        assert_eq!(base.len(), TAG_LEN);
        assert_eq!(base, tag_after(|_| {}), "the tag is deterministic");
        let classes = [
            ("pins", "pins.toml"),
            ("templates (the generator)", "xtask/src/images/render.rs"),
            ("generated Dockerfile", "containers/Dockerfile"),
            ("generated Apptainer definition", "containers/symmem.def"),
            ("Cargo.lock", "Cargo.lock"),
            ("rust-toolchain.toml", "rust-toolchain.toml"),
            ("workspace manifest", "Cargo.toml"),
            ("cargo configuration", ".cargo/config.toml"),
            ("xtask sources", "xtask/src/main.rs"),
            ("crate sources", "crates/symmem/src/lib.rs"),
            (
                "shim sources",
                "crates/symmem-shim-sys/shim/rocshmem_shim.hip",
            ),
            ("a new crate source file", "crates/symmem/src/new.rs"),
        ];
        for (class, file) in classes {
            assert_ne!(
                base,
                tag_after(|root| append(root, file)),
                "changing {class} ({file}) must change the tag"
            );
        }
        // Renaming a file (same contents) and making one executable change it too.
        assert_ne!(
            base,
            tag_after(|root| std::fs::rename(
                root.join("crates/symmem/src/lib.rs"),
                root.join("crates/symmem/src/lib2.rs")
            )
            .unwrap())
        );
        assert_ne!(
            base,
            tag_after(|root| {
                use std::os::unix::fs::PermissionsExt;
                let path = root.join("xtask/src/main.rs");
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
            })
        );
    }

    #[test]
    fn docs_build_outputs_and_files_outside_the_images_keep_the_tag() {
        let base = tag_after(|_| {});
        for file in [
            "README.md",
            "docs/benchmarks.md",
            "crates/symmem/README.md",
            "containers/README.md",
            "docs/new-page.md",
            ".github/workflows/ci.yml",
            "target/debug/build-output",
            "crates/symmem/target/x",
            "xtask/src/main.rs~",
        ] {
            assert_eq!(
                base,
                tag_after(|root| {
                    std::fs::create_dir_all(root.join(file).parent().unwrap()).unwrap();
                    append(root, file)
                }),
                "{file} does not go into the images and must not change the tag"
            );
        }
    }

    #[test]
    fn another_checkout_path_gives_the_same_tag() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let b_deep = b.path().join("some/other/place/symmem");
        make_tree(a.path());
        std::fs::create_dir_all(&b_deep).unwrap();
        // Written in reverse order, so directory listing order differs as well.
        for (path, contents) in TREE.iter().rev() {
            let path = b_deep.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, contents).unwrap();
        }
        assert_eq!(compute(a.path()).unwrap(), compute(&b_deep).unwrap());
    }

    #[test]
    fn a_missing_input_is_an_error_that_names_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        make_tree(dir.path());
        std::fs::remove_file(dir.path().join("Cargo.lock")).unwrap();
        let e = format!("{:#}", compute(dir.path()).unwrap_err());
        assert!(e.contains("image input `Cargo.lock` is missing"), "{e}");
        assert!(e.contains("xtask/src/images/model.rs"), "{e}");
    }

    #[test]
    fn the_repository_has_a_tag() {
        let tag = compute(&crate::project::project_root()).unwrap();
        assert!(tag.bytes().all(|b| b.is_ascii_hexdigit()) && tag.len() == TAG_LEN);
    }
}

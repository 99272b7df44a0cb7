//! The image tag: a content hash over every input that goes into the images.
//!
//! Hashed: every file under the [`INPUTS`] (pins, Cargo.lock, rust-toolchain.toml, the xtask
//! and crate sources with the shim's, the generated container files, and the generator, which
//! is xtask source), minus [`EXCLUDES`](super::model::EXCLUDES) (build outputs, Markdown docs).
//! Each file contributes its path relative to the repository root, whether it is executable,
//! and its contents (symbolic links followed, as Apptainer's `cp -L` does); files are sorted by
//! path, so the tag depends neither on where the checkout lives nor on the order the file
//! system lists them.
//!
//! Which files: in a git checkout, the files git tracks (`git ls-files`, staged ones included)
//! with their contents in the work tree; elsewhere (inside an image build, a Nix build's copy
//! of the sources), every file there. So the tag is the same for every clean checkout of a
//! commit and for the image built from it, and a stray file (`lib.rs.orig`, a scratch file)
//! does not change it. The Docker context (`.dockerignore`) and Apptainer's `%files` copy
//! folders as they are, strays included: the image builds recompute the tag from what they
//! copied (`--expect-tag`), so a build from a tree with strays fails instead of publishing an
//! image whose contents its tag does not describe. [`stray_files`] lists them beforehand.
//!
//! pins.toml must parse: the images are generated from it, so a tag over a broken pins file
//! would name images that cannot be built. An input that cannot be read is an error naming it.

use super::model::{INPUTS, excluded};
use crate::pins::Pins;
use anyhow::{Context, bail};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::path::Path;
use xshell::{Shell, cmd};

/// Hex digits of the hash kept in the tag.
pub const TAG_LEN: usize = 16;
/// Bumped when the hashing scheme changes, so that old tags are never reused. (Hashing tracked
/// files only left the tag of every clean checkout as it was: no bump.)
const SCHEME: &str = "symmem-image-tag-v1";

/// The tag of the tree at `root`.
pub fn compute(sh: &Shell, root: &Path) -> anyhow::Result<String> {
    let pins = root.join("pins.toml");
    Pins::load(&pins).with_context(|| {
        format!(
            "no image tag: the images are generated from {}, so it must be readable and \
             valid; fix it (`git diff pins.toml` shows local edits)",
            pins.display()
        )
    })?;
    let files = input_files(sh, root)?;
    let mut hasher = Sha256::new();
    hasher.update(SCHEME.as_bytes());
    hasher.update([0]);
    for relative in &files {
        let (executable, contents) = read_input(root, relative)?;
        hasher.update(relative.as_bytes());
        hasher.update(if executable { b"\0exec\0" } else { b"\0file\0" });
        hasher.update((contents.len() as u64).to_le_bytes());
        hasher.update(&contents);
    }
    let digest = hasher.finalize();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    Ok(hex[..TAG_LEN].to_string())
}

/// Whether `relative` is executable, and its contents; links are followed, as Apptainer's
/// %files copy (cp -L) does.
fn read_input(root: &Path, relative: &str) -> anyhow::Result<(bool, Vec<u8>)> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let path = root.join(relative);
    let unreadable = |e: std::io::Error| {
        let fix = if e.kind() == std::io::ErrorKind::NotFound {
            if is_git_checkout(root) {
                format!(
                    "git tracks it but it is gone (or a link to nothing): restore it with \
                     `git checkout -- {relative}`, or `git rm` it"
                )
            } else {
                "it is a link to nothing: fix the link or delete it".to_string()
            }
        } else {
            "make it readable (`chmod a+r`), or delete it if it does not belong in the images"
                .to_string()
        };
        anyhow::anyhow!("cannot read image input {} ({e}): {fix}", path.display())
    };
    let meta = std::fs::metadata(&path).map_err(unreadable)?;
    if !meta.is_file() {
        let t = meta.file_type();
        let kind = if t.is_fifo() {
            "a named pipe"
        } else if t.is_socket() {
            "a socket"
        } else if t.is_dir() {
            "a folder (a git submodule?)"
        } else {
            "a device"
        };
        bail!(
            "image input {} is {kind}, not a regular file: the images copy files only; delete \
             it, or move it out of the image inputs",
            path.display()
        );
    }
    let contents = std::fs::read(&path).map_err(unreadable)?;
    Ok((meta.permissions().mode() & 0o111 != 0, contents))
}

/// Whether `root` is a git checkout (a `.git` folder, or the `.git` file of a worktree).
fn is_git_checkout(root: &Path) -> bool {
    std::fs::symlink_metadata(root.join(".git")).is_ok()
}

/// Every hashed file, relative to `root` with `/` separators, sorted.
pub fn input_files(sh: &Shell, root: &Path) -> anyhow::Result<Vec<String>> {
    for input in INPUTS {
        let path = root.join(input);
        if std::fs::symlink_metadata(&path).is_err() {
            bail!(
                "image input `{input}` is missing from {}: every entry of INPUTS in \
                 xtask/src/images/model.rs must exist (remove it there if it is gone for good)",
                root.display()
            );
        }
    }
    if is_git_checkout(root) {
        return tracked_files(sh, root);
    }
    let mut files = Vec::new();
    for input in INPUTS {
        walk(root, input, &mut files)?;
    }
    files.sort();
    Ok(files)
}

/// Files under the inputs that git does not track but that a Docker or Apptainer build from
/// this tree would copy (untracked or ignored, outside [`EXCLUDES`](super::model::EXCLUDES)):
/// such a build fails its tag check. Empty outside a git checkout, where the tag hashes them.
pub fn stray_files(sh: &Shell, root: &Path) -> anyhow::Result<Vec<String>> {
    if !is_git_checkout(root) {
        return Ok(Vec::new());
    }
    let tracked: BTreeSet<String> = tracked_files(sh, root)?.into_iter().collect();
    let mut present = Vec::new();
    for input in INPUTS {
        list_present(root, input, &mut present);
    }
    present.retain(|f| !tracked.contains(f));
    present.sort();
    Ok(present)
}

/// The files git tracks under the inputs (`git ls-files`: committed and staged), minus the
/// exclusions.
fn tracked_files(sh: &Shell, root: &Path) -> anyhow::Result<Vec<String>> {
    let output = cmd!(sh, "git -C {root} ls-files -z --cached -- {INPUTS...}")
        .quiet()
        .ignore_status()
        .output()
        .with_context(|| {
            format!(
                "{} is a git checkout, so the image tag hashes the files git tracks, but git \
                 could not run: install git",
                root.display()
            )
        })?;
    if !output.status.success() {
        bail!(
            "`git ls-files` failed in {} ({}): the image tag hashes the files git tracks; fix \
             the checkout (for \"dubious ownership\": `git config --global --add \
             safe.directory {}`)",
            root.display(),
            String::from_utf8_lossy(&output.stderr).trim(),
            root.display()
        );
    }
    let mut files = Vec::new();
    for raw in output.stdout.split(|&b| b == 0).filter(|p| !p.is_empty()) {
        let Ok(relative) = std::str::from_utf8(raw) else {
            bail!(
                "git tracks {} in {}, a file name that is not UTF-8: rename it (image inputs \
                 must have portable names)",
                String::from_utf8_lossy(raw),
                root.display()
            );
        };
        if !excluded(relative) {
            files.push(relative.to_string());
        }
    }
    files.sort();
    files.dedup();
    Ok(files)
}

fn walk(root: &Path, relative: &str, files: &mut Vec<String>) -> anyhow::Result<()> {
    if excluded(relative) {
        return Ok(());
    }
    let path = root.join(relative);
    let is_dir = match std::fs::metadata(&path) {
        Ok(meta) => meta.is_dir(),
        // Not followable: `read_input` names it and the fix.
        Err(_) => false,
    };
    if !is_dir {
        files.push(relative.to_string());
        return Ok(());
    }
    let entries = std::fs::read_dir(&path).with_context(|| {
        format!(
            "cannot list image input folder {}: make it readable (`chmod a+rx`)",
            path.display()
        )
    })?;
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

/// Like [`walk`], for listing only: never fails, skips what it cannot list.
fn list_present(root: &Path, relative: &str, files: &mut Vec<String>) {
    if excluded(relative) {
        return;
    }
    let path = root.join(relative);
    let Ok(entries) = std::fs::metadata(&path)
        .ok()
        .filter(|m| m.is_dir())
        .map_or(Err(()), |_| std::fs::read_dir(&path).map_err(drop))
    else {
        files.push(relative.to_string());
        return;
    };
    for entry in entries.flatten() {
        if let Some(name) = entry.file_name().to_str() {
            list_present(root, &format!("{relative}/{name}"), files);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh() -> Shell {
        Shell::new().unwrap()
    }
    use std::path::PathBuf;

    /// A minimal tree with one file of every input class, plus docs.
    const TREE: &[(&str, &str)] = &[
        ("pins.toml", crate::images::tests::PINS),
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
        compute(&sh(), dir.path()).unwrap()
    }

    fn append(root: &Path, file: &str) {
        let path: PathBuf = root.join(file);
        let mut text = std::fs::read_to_string(&path).unwrap_or_default();
        // A comment in the file's own syntax: pins.toml must still parse.
        text.push_str(if file.ends_with(".toml") {
            "# changed\n"
        } else {
            "// changed\n"
        });
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
        assert_eq!(
            compute(&sh(), a.path()).unwrap(),
            compute(&sh(), &b_deep).unwrap()
        );
    }

    #[test]
    fn a_missing_input_is_an_error_that_names_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        make_tree(dir.path());
        std::fs::remove_file(dir.path().join("Cargo.lock")).unwrap();
        let e = format!("{:#}", compute(&sh(), dir.path()).unwrap_err());
        assert!(e.contains("image input `Cargo.lock` is missing"), "{e}");
        assert!(e.contains("xtask/src/images/model.rs"), "{e}");
    }

    #[test]
    fn the_repository_has_a_tag() {
        let tag = compute(&sh(), &crate::project::project_root()).unwrap();
        assert!(tag.bytes().all(|b| b.is_ascii_hexdigit()) && tag.len() == TAG_LEN);
    }

    /// `git` in `root`, or `None` (with the reason printed) when git cannot run here.
    fn git(root: &Path, args: &[&str]) -> Option<()> {
        let sh = sh();
        match cmd!(sh, "git -C {root} {args...}")
            .quiet()
            .ignore_status()
            .output()
        {
            Ok(out) if out.status.success() => Some(()),
            Ok(out) => panic!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr)),
            Err(e) => {
                println!("SKIPPED: git cannot run here ({e})");
                None
            }
        }
    }

    /// A git checkout of [`TREE`] with every file tracked (staged; no commit is needed).
    fn checkout() -> Option<tempfile::TempDir> {
        let dir = tempfile::tempdir().unwrap();
        make_tree(dir.path());
        git(dir.path(), &["init", "-q"])?;
        git(dir.path(), &["add", "-A"])?;
        Some(dir)
    }

    #[test]
    fn in_a_git_checkout_untracked_files_keep_the_tag() {
        let Some(dir) = checkout() else { return };
        let root = dir.path();
        let base = compute(&sh(), root).unwrap();
        // As another checkout of the same commit computes it (no .git: the tree as copied).
        let plain = tag_after(|_| {});
        assert_eq!(base, plain, "a clean checkout hashes like the copied tree");
        for stray in [
            "crates/symmem/src/lib.rs.orig",
            "crates/symmem/src/scratch.rs",
            "xtask/notes.txt",
        ] {
            std::fs::write(root.join(stray), "stray\n").unwrap();
            assert_eq!(
                base,
                compute(&sh(), root).unwrap(),
                "untracked {stray} must not change the tag"
            );
        }
        // Tracking one makes it an input; editing a tracked file changes the tag too.
        git(root, &["add", "crates/symmem/src/scratch.rs"]).unwrap();
        let tracked = compute(&sh(), root).unwrap();
        assert_ne!(base, tracked, "a newly tracked file changes the tag");
        append(root, "crates/symmem/src/lib.rs");
        assert_ne!(
            tracked,
            compute(&sh(), root).unwrap(),
            "an edited tracked file counts"
        );
        // The strays are the files a build from this tree would copy beyond the tag's.
        let strays = stray_files(&sh(), root).unwrap();
        assert_eq!(
            strays,
            ["crates/symmem/src/lib.rs.orig", "xtask/notes.txt"],
            "{strays:?}"
        );
    }

    #[test]
    fn outside_a_git_checkout_every_copied_file_counts() {
        // An image build's copy (no .git): a stray file there was copied into the image, so
        // the in-image check must see it and fail against the checkout's tag.
        let base = tag_after(|_| {});
        assert_ne!(
            base,
            tag_after(|root| {
                std::fs::write(root.join("crates/symmem/src/lib.rs.orig"), "stray\n").unwrap()
            })
        );
        let dir = tempfile::tempdir().unwrap();
        make_tree(dir.path());
        assert!(stray_files(&sh(), dir.path()).unwrap().is_empty());
    }

    #[test]
    fn a_tracked_input_missing_from_the_work_tree_is_an_error() {
        let Some(dir) = checkout() else { return };
        std::fs::remove_file(dir.path().join("crates/symmem/src/lib.rs")).unwrap();
        let e = format!("{:#}", compute(&sh(), dir.path()).unwrap_err());
        assert!(e.contains("crates/symmem/src/lib.rs"), "{e}");
        assert!(e.contains("git checkout --"), "{e}");
    }

    #[test]
    fn a_pins_file_that_does_not_parse_is_an_error() {
        for broken in ["[rocshmem\n", "", "[rust]\ntoolchain = \"1.95.0\"\n"] {
            let dir = tempfile::tempdir().unwrap();
            make_tree(dir.path());
            std::fs::write(dir.path().join("pins.toml"), broken).unwrap();
            let e = format!("{:#}", compute(&sh(), dir.path()).unwrap_err());
            assert!(e.contains("pins.toml"), "{e}");
        }
        let dir = tempfile::tempdir().unwrap();
        make_tree(dir.path());
        std::fs::write(dir.path().join("pins.toml"), [0xff, 0xfe, 0x00]).unwrap();
        let e = format!("{:#}", compute(&sh(), dir.path()).unwrap_err());
        assert!(e.contains("pins.toml"), "{e}");
    }

    #[test]
    fn an_input_that_cannot_be_read_is_an_error_naming_it_and_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        make_tree(dir.path());
        let dangling = dir.path().join("crates/symmem/src/gone.rs");
        std::os::unix::fs::symlink("/nonexistent/gone.rs", &dangling).unwrap();
        let e = format!("{:#}", compute(&sh(), dir.path()).unwrap_err());
        assert!(e.contains("cannot read image input"), "{e}");
        assert!(e.contains("crates/symmem/src/gone.rs"), "{e}");
        assert!(e.contains("delete it"), "{e}");
    }

    #[test]
    fn a_special_file_among_the_inputs_is_an_error_not_a_hang() {
        let dir = tempfile::tempdir().unwrap();
        make_tree(dir.path());
        let fifo = dir.path().join("crates/symmem/src/pipe");
        let shell = sh();
        if cmd!(shell, "mkfifo {fifo}").quiet().run().is_err() {
            println!("SKIPPED: mkfifo is not available");
            return;
        }
        let e = format!("{:#}", compute(&sh(), dir.path()).unwrap_err());
        assert!(e.contains("crates/symmem/src/pipe"), "{e}");
        assert!(e.contains("not a regular file"), "{e}");
    }

    /// Marks the copy of this test binary that the test below runs as another user.
    const UNREADABLE_CHILD: symmem::settings::Setting<PathBuf> = symmem::settings::Setting {
        name: "SYMMEM_TAG_TEST_UNREADABLE_ROOT",
        doc: "set by xtask's image-tag test on the copy of itself it runs as another user: the tree to hash, with an input that user cannot read (do not set it)",
        default: "this process is the test itself",
        expected: "a folder path",
        audience: symmem::settings::Audience::Development,
        parse: |text| Some(PathBuf::from(text)),
    };

    #[test]
    #[ignore = "run by `an_input_this_user_cannot_read_is_an_error` as another user"]
    fn compute_as_another_user() {
        let Some(root) = UNREADABLE_CHILD.read_path() else {
            return;
        };
        match compute(&sh(), &root) {
            Ok(tag) => println!("TAG {tag}"),
            Err(e) => println!("ERROR {e:#}"),
        }
    }

    #[test]
    fn an_input_this_user_cannot_read_is_an_error() {
        use std::os::unix::fs::PermissionsExt;
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            println!("SKIPPED: needs root to run the tag as another user");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        make_tree(dir.path());
        let secret = dir.path().join("pins.toml");
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o000)).unwrap();
        let sh = sh();
        let exe = std::env::current_exe().unwrap();
        let test = "images::tag::tests::compute_as_another_user";
        let child = cmd!(sh, "{exe} {test} --exact --include-ignored --nocapture")
            .env(UNREADABLE_CHILD.name, dir.path());
        let out = crate::runner::output_as(child, 65534, 65534).unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("ERROR "), "{text}");
        assert!(text.contains("pins.toml"), "{text}");
        assert!(!text.contains("TAG "), "{text}");
    }
}

//! `cargo xtask codegen`: every generated file of the repository, refreshed or checked in one
//! place: the shim's bindings (bindgen over `symmem_shim.h`), the container files (the
//! images' model over pins.toml) and README's tables (`readme.rs`).

use crate::project::project_root;
use anyhow::{Context, bail};
use std::path::Path;

/// Refresh every generated file, or check that the committed ones are current.
///
/// Generated files, and what each is made from:
///   crates/symmem-shim-sys/src/bindings.rs        bindgen over shim/symmem_shim.h
///   containers/Dockerfile*, containers/*.def,     pins.toml through xtask/src/images
///   .dockerignore
///   README.md, between its codegen markers        the settings registry, the exit codes
///
/// Run it after editing symmem_shim.h, pins.toml or xtask/src/images, and commit what it
/// writes. `--check` writes nothing and fails, with a diff, naming each stale file; `cargo test`
/// runs it (xtask/tests/codegen.rs), and so does CI.
///
/// bindgen needs libclang with clang's builtin headers (apt-get install libclang-dev). Where it
/// cannot be loaded the bindings are skipped with the reason, except under CI (CI set), where
/// that is an error.
///
/// Examples:
///   cargo xtask codegen            # after editing symmem_shim.h or pins.toml
///   cargo xtask codegen --check    # what CI and `cargo test -p xtask` run
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Write nothing; fail, with a diff, naming each committed file that differs from what
    /// its sources generate.
    #[arg(long)]
    check: bool,
}

/// The command that refreshes every generated file.
pub const REFRESH: &str = "cargo xtask codegen";

/// One generated file: where it goes, what it is made from, and its contents.
pub struct Generated {
    /// Relative to the repository root.
    pub path: String,
    /// What it is generated from, for the message when it is stale.
    pub from: &'static str,
    pub contents: String,
}

pub fn run(sh: &xshell::Shell, args: Args) -> anyhow::Result<()> {
    let root = project_root();
    let mut files = Vec::new();
    match bindings::generate(&root)? {
        bindings::Outcome::Generated(file) => files.push(file),
        bindings::Outcome::Skipped(why) => skip(&why)?,
    }
    files.extend(container_files(&root)?);
    files.push(crate::readme::generated(&root)?);
    if args.check {
        return check(&root, &files, REFRESH);
    }
    write(&root, &files)?;
    eprintln!("image tag: {}", crate::images::tag::compute(sh, &root)?);
    Ok(())
}

/// What cannot be generated here: a note outside CI, an error under CI (CI must provide it).
fn skip(why: &str) -> anyhow::Result<()> {
    if std::env::var_os("CI").is_some() {
        bail!("{why}; CI must provide it (.ci/run installs libclang-dev)");
    }
    eprintln!("SKIPPED: {why}");
    Ok(())
}

/// The container files, generated from the pins at `root` through the images' model.
pub fn container_files(root: &Path) -> anyhow::Result<Vec<Generated>> {
    let models = crate::images::load_models(root)?;
    Ok(crate::images::generate(&models)
        .into_iter()
        .map(|(path, contents)| Generated {
            path: path.into(),
            from: "pins.toml and xtask/src/images",
            contents,
        })
        .collect())
}

/// Writes the files that differ from what is there.
pub fn write(root: &Path, files: &[Generated]) -> anyhow::Result<()> {
    for file in files {
        let full = root.join(&file.path);
        if std::fs::read_to_string(&full).ok().as_deref() == Some(file.contents.as_str()) {
            eprintln!("{}: up to date", file.path);
            continue;
        }
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&full, &file.contents)
            .with_context(|| format!("writing {}", full.display()))?;
        eprintln!("{}: written", file.path);
    }
    Ok(())
}

/// Compares the committed files with the generated ones: a unified diff on stdout for each
/// that differs, and an error naming each of them, what it is made from, and `refresh`.
pub fn check(root: &Path, files: &[Generated], refresh: &str) -> anyhow::Result<()> {
    let mut stale = Vec::new();
    for file in files {
        let full = root.join(&file.path);
        let committed = match std::fs::read_to_string(&full) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", full.display())),
        };
        if committed != file.contents {
            let diff = similar::TextDiff::from_lines(&committed, &file.contents);
            print!(
                "{}",
                diff.unified_diff().context_radius(2).header(
                    &format!("{} (committed)", file.path),
                    &format!("{} (generated)", file.path)
                )
            );
            stale.push(file);
        }
    }
    if !stale.is_empty() {
        let paths: Vec<&str> = stale.iter().map(|f| f.path.as_str()).collect();
        let mut sources: Vec<&str> = Vec::new();
        for file in &stale {
            if !sources.contains(&file.from) {
                sources.push(file.from);
            }
        }
        bail!(
            "{} differ{} from what {} generate{} (diff above): run `{refresh}` and commit the \
             result",
            paths.join(", "),
            if paths.len() == 1 { "s" } else { "" },
            sources.join(" and "),
            if sources.len() == 1 { "s" } else { "" },
        );
    }
    eprintln!(
        "generated files are current ({})",
        files
            .iter()
            .map(|f| f.path.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}

/// The shim's bindings: bindgen over `shim/symmem_shim.h`, loading libclang through clang-sys
/// (bindgen's own loader).
pub mod bindings {
    use super::Generated;
    use std::path::{Path, PathBuf};

    /// The crate, relative to the repository root.
    const CRATE: &str = "crates/symmem-shim-sys";

    /// The first lines of the generated file: what it is made from and the command that
    /// makes it.
    const HEADER: &str = "// Generated by bindgen from shim/symmem_shim.h; do not edit.\n\
         // Regenerate: cargo xtask codegen\n\n";

    pub enum Outcome {
        Generated(Generated),
        /// libclang cannot be loaded, or lacks its builtin headers: why, with the fix.
        Skipped(String),
    }

    /// Loads libclang exactly as bindgen will (clang-sys's runtime loader, the same search:
    /// the `LIBCLANG_PATH` variable, `llvm-config --libdir`, the usual library folders, and
    /// only files named like libclang itself, never look-alikes such as
    /// `libclang-cpp.so.14`). Returns the loaded file, or clang-sys's reason why none could
    /// be loaded.
    fn load_libclang() -> Result<PathBuf, String> {
        clang_sys::load()?;
        let library = clang_sys::get_library().ok_or("libclang was loaded, then not in use")?;
        Ok(library.path().to_path_buf())
    }

    pub fn generate(root: &Path) -> anyhow::Result<Outcome> {
        let libclang = match load_libclang() {
            Ok(path) => path,
            Err(why) => {
                return Ok(Outcome::Skipped(format!(
                    "the shim's bindings need libclang (apt-get install libclang-dev): {why}"
                )));
            }
        };
        eprintln!("bindgen uses {}", libclang.display());
        let header = root.join(CRATE).join("shim/symmem_shim.h");
        let result = bindgen::Builder::default()
            .header(header.to_string_lossy())
            .allowlist_function("symmem_shim_.*")
            .allowlist_var("SYMMEM_SHIM_.*")
            .allowlist_type("symmem_shim_.*")
            // A struct that resolves every symbol through libloading: the crate needs no
            // library at build time and reports a missing one when it is opened.
            .dynamic_library_name("SymmemShim")
            .dynamic_link_require_all(true)
            .layout_tests(false)
            .generate();
        let bindings = match result {
            Ok(bindings) => bindings,
            // Clang's own headers come with libclang's -dev package (libclang-common-N-dev),
            // not with the library: a header of ours that is broken is a different diagnostic.
            Err(bindgen::BindgenError::ClangDiagnostic(diag))
                if diag.contains("'stddef.h' file not found") =>
            {
                return Ok(Outcome::Skipped(format!(
                    "{} has no builtin headers (apt-get install libclang-dev): {diag}",
                    libclang.display()
                )));
            }
            Err(err) => anyhow::bail!(
                "bindgen failed on {}: {err}. Fix the header (its diagnostic above), then run \
                 `{}` again",
                header.display(),
                super::REFRESH
            ),
        };
        Ok(Outcome::Generated(Generated {
            path: format!("{CRATE}/src/bindings.rs"),
            from: "shim/symmem_shim.h through bindgen",
            contents: format!("{HEADER}{bindings}"),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, from: &'static str, contents: &str) -> Generated {
        Generated {
            path: path.into(),
            from,
            contents: contents.into(),
        }
    }

    /// `--check` passes on current files and names each stale (or missing) one, what it is
    /// made from, and the command that refreshes it; `write` then makes them current.
    #[test]
    fn check_names_each_stale_file_and_the_refresh_command() {
        let dir = tempfile::tempdir().unwrap();
        let files = [
            file("a/bindings.rs", "the header", "fn a() {}\n"),
            file("containers/Dockerfile", "pins.toml", "FROM x\n"),
            file("current.txt", "pins.toml", "same\n"),
        ];
        std::fs::write(dir.path().join("current.txt"), "same\n").unwrap();
        std::fs::create_dir_all(dir.path().join("a")).unwrap();
        std::fs::write(dir.path().join("a/bindings.rs"), "fn old() {}\n").unwrap();
        let e = format!("{:#}", check(dir.path(), &files, REFRESH).unwrap_err());
        assert!(
            e.starts_with("a/bindings.rs, containers/Dockerfile differ from what")
                && e.contains("the header and pins.toml generate")
                && e.contains("run `cargo xtask codegen` and commit"),
            "{e}"
        );
        assert!(!e.contains("current.txt"), "{e}");
        write(dir.path(), &files).unwrap();
        check(dir.path(), &files, REFRESH).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("containers/Dockerfile")).unwrap(),
            "FROM x\n"
        );
    }

    /// The container files: written, they check clean; an edited and a missing one are named
    /// with what they are made from.
    #[test]
    fn check_passes_on_generated_container_files_and_shows_a_diff_on_drift() {
        let dir = tempfile::tempdir().unwrap();
        let files = container_files(&project_root()).unwrap();
        write(dir.path(), &files).unwrap();
        check(dir.path(), &files, REFRESH).unwrap();
        let dockerfile = dir.path().join("containers/Dockerfile");
        let edited =
            std::fs::read_to_string(&dockerfile)
                .unwrap()
                .replacen("FROM ", "FROM edited/", 1);
        std::fs::write(&dockerfile, edited).unwrap();
        std::fs::remove_file(dir.path().join(".dockerignore")).unwrap();
        let e = format!("{:#}", check(dir.path(), &files, REFRESH).unwrap_err());
        assert!(
            e.contains("containers/Dockerfile, .dockerignore differ"),
            "{e}"
        );
        assert!(
            e.contains("pins.toml and xtask/src/images generate")
                && e.contains("run `cargo xtask codegen`"),
            "{e}"
        );
    }
}

//! `cargo xtask images`: the Docker and Apptainer images, generated from one model fed by
//! pins.toml, and their content-addressed tag.

pub mod model;
mod render;
pub mod tag;

#[cfg(test)]
mod deffile;

use crate::pins::Pins;
use crate::project::project_root;
use anyhow::{Context, bail};
use model::Model;
use std::path::Path;

/// Generate the container files from pins.toml, check them, or print the image tag.
///
/// Writes containers/Dockerfile, containers/symmem.def (Apptainer) and .dockerignore (the
/// Docker build context is the repository root) from one model fed by pins.toml.
///
/// The tag is a hash over every file that goes into the images (pins, Cargo.lock,
/// rust-toolchain.toml, xtask and crate sources with the GPU shim, the container files); docs
/// and build outputs do not count. CI publishes the images under it, and `cargo xtask test
/// --container docker|apptainer` pulls the image for the current tag.
///
/// Examples:
///   cargo xtask images            # regenerate after editing pins.toml or xtask/src/images
///   cargo xtask images --check    # fail, with a diff, when the committed files drifted
///   cargo xtask images --tag
///   cargo xtask images --refs >> "$GITHUB_OUTPUT"
///   cargo xtask images --inputs   # the files the tag hashes
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Write nothing; fail with a diff when the committed files differ from the generated ones.
    #[arg(long, conflicts_with_all = ["tag", "refs"])]
    check: bool,
    /// Print the image tag (a content hash of the image inputs) and nothing else.
    #[arg(long, conflicts_with = "refs")]
    tag: bool,
    /// With --tag: fail unless the tag is this one (an empty value checks nothing). The image
    /// builds use it to prove that what they copied is what the tag was computed over.
    #[arg(long, requires = "tag", value_name = "TAG")]
    expect_tag: Option<String>,
    /// Print `key=value` lines: tag, docker and apptainer image references, the default
    /// arch and the run flags (for $GITHUB_OUTPUT).
    #[arg(long)]
    refs: bool,
    /// Print the files the tag hashes, one per line (to compare with what an image build saw).
    #[arg(long, conflicts_with_all = ["check", "tag", "refs"])]
    inputs: bool,
}

/// The generated files, relative to the repository root, with their contents.
pub fn generate(model: &Model) -> Vec<(&'static str, String)> {
    vec![
        ("containers/Dockerfile", render::dockerfile(model)),
        ("containers/symmem.def", render::apptainer_def(model)),
        (".dockerignore", render::dockerignore()),
    ]
}

pub fn load_model(root: &Path) -> anyhow::Result<Model> {
    Model::new(&Pins::load(&root.join("pins.toml"))?)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let root = project_root();
    if args.inputs {
        for file in tag::input_files(&root)? {
            println!("{file}");
        }
        return Ok(());
    }
    if args.tag {
        let tag = tag::compute(&root)?;
        if let Some(expected) = args.expect_tag.as_deref().filter(|t| !t.is_empty())
            && expected != tag
        {
            bail!(
                "the image inputs here hash to {tag}, but the image is being built as \
                 {expected}: what was copied into the image differs from the checkout the tag \
                 was computed on (uncommitted edits, or files git does not track: `cargo \
                 xtask images --tag` there lists those). Regenerate the container files \
                 (`cargo xtask images`), commit, and build from a clean checkout with \
                 SYMMEM_IMAGE_TAG=\"$(cargo xtask images --tag)\""
            );
        }
        warn_strays(&root)?;
        println!("{tag}");
        return Ok(());
    }
    let model = load_model(&root)?;
    if args.refs {
        let tag = tag::compute(&root)?;
        print!("{}", refs(&model, &tag));
        return Ok(());
    }
    let files = generate(&model);
    if args.check {
        return check(&root, &files);
    }
    for (path, contents) in &files {
        let full = root.join(path);
        if std::fs::read_to_string(&full).ok().as_deref() == Some(contents.as_str()) {
            eprintln!("{path}: up to date");
            continue;
        }
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&full, contents).with_context(|| format!("writing {}", full.display()))?;
        eprintln!("{path}: written");
    }
    eprintln!("image tag: {}", tag::compute(&root)?);
    Ok(())
}

/// Says on stderr which untracked files a Docker or Apptainer build from this tree would copy
/// beyond the tag's inputs (the build's tag check would then fail).
fn warn_strays(root: &Path) -> anyhow::Result<()> {
    let strays = tag::stray_files(root)?;
    if strays.is_empty() {
        return Ok(());
    }
    const SHOWN: usize = 10;
    let mut list = strays
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if strays.len() > SHOWN {
        list.push_str(&format!(" and {} more", strays.len() - SHOWN));
    }
    eprintln!(
        "note: the tag leaves out {} file{} that git does not track, but an image build from \
         this tree would copy {} and fail its tag check: {list}. Delete {}, `git add` {}, or \
         build from a clean checkout",
        strays.len(),
        if strays.len() == 1 { "" } else { "s" },
        if strays.len() == 1 { "it" } else { "them" },
        if strays.len() == 1 { "it" } else { "them" },
        if strays.len() == 1 { "it" } else { "them" },
    );
    Ok(())
}

pub fn refs(model: &Model, tag: &str) -> String {
    format!(
        "tag={tag}\ndocker={}\napptainer={}\narch={}\ndocker-run-flags={}\n\
         apptainer-run-flags={}\n",
        model.docker_image(tag),
        model.apptainer_image(tag),
        model.default_arch(),
        model::DOCKER_RUN_FLAGS.join(" "),
        model::APPTAINER_RUN_FLAGS.join(" "),
    )
}

fn check(root: &Path, files: &[(&str, String)]) -> anyhow::Result<()> {
    let mut drifted = Vec::new();
    for (path, generated) in files {
        let full = root.join(path);
        let committed = match std::fs::read_to_string(&full) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", full.display())),
        };
        if &committed != generated {
            let diff = similar::TextDiff::from_lines(&committed, generated);
            print!(
                "{}",
                diff.unified_diff().context_radius(2).header(
                    &format!("{path} (committed)"),
                    &format!("{path} (generated)")
                )
            );
            drifted.push(*path);
        }
    }
    if !drifted.is_empty() {
        bail!(
            "{} differ{} from what pins.toml and xtask/src/images generate (diff above): run \
             `cargo xtask images` and commit the result",
            drifted.join(", "),
            if drifted.len() == 1 { "s" } else { "" }
        );
    }
    eprintln!(
        "container files match the generator ({})",
        files.iter().map(|(p, _)| *p).collect::<Vec<_>>().join(", ")
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fixed pins, so that the snapshots show the generator's output, not today's pins.
    pub const PINS: &str = r#"
[rocshmem]
repository = "https://github.com/ROCm/rocm-systems.git"
subdirectory = "projects/rocshmem"
commit = "006ac1aaa8bfbf04a77a120cfc54db79095f3219"
version = "3.4.0"
[rust]
toolchain = "1.95.0"
[images]
base = "rocm/dev-ubuntu-24.04"
rocm = "7.2.4"
arch = "gfx942"
docker = "ghcr.io/symmem/symmem-rocm"
apptainer = "oras://ghcr.io/symmem/symmem-rocm-sif"
"#;

    pub fn model() -> Model {
        Model::new(&Pins::parse(PINS).unwrap()).unwrap()
    }

    #[test]
    fn dockerfile_snapshot() {
        insta::assert_snapshot!(render::dockerfile(&model()));
    }

    #[test]
    fn apptainer_def_snapshot() {
        insta::assert_snapshot!(render::apptainer_def(&model()));
    }

    #[test]
    fn dockerignore_snapshot() {
        insta::assert_snapshot!(render::dockerignore());
    }

    #[test]
    fn refs_snapshot() {
        insta::assert_snapshot!(refs(&model(), "0123456789abcdef"));
    }

    #[test]
    fn the_pins_feed_the_files() {
        let other = PINS
            .replace("rocm = \"7.2.4\"", "rocm = \"7.3.0\"")
            .replace("arch = \"gfx942\"", "arch = \"gfx950\"")
            .replace("toolchain = \"1.95.0\"", "toolchain = \"1.96.0\"");
        let model = Model::new(&Pins::parse(&other).unwrap()).unwrap();
        for (path, text) in generate(&model) {
            if path == ".dockerignore" {
                continue;
            }
            assert!(
                text.contains("rocm/dev-ubuntu-24.04:7.3.0-complete"),
                "{path}"
            );
            assert!(text.contains("ARCH=") && text.contains("gfx950"), "{path}");
            assert!(text.contains("--default-toolchain 1.96.0"), "{path}");
            assert!(
                !text.contains("7.2.4") && !text.contains("gfx942"),
                "{path}"
            );
        }
    }

    #[test]
    fn check_passes_on_generated_files_and_shows_a_diff_on_drift() {
        let dir = tempfile::tempdir().unwrap();
        let files = generate(&model());
        for (path, text) in &files {
            let full = dir.path().join(path);
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(full, text).unwrap();
        }
        check(dir.path(), &files).unwrap();
        let dockerfile = dir.path().join("containers/Dockerfile");
        let edited = std::fs::read_to_string(&dockerfile)
            .unwrap()
            .replace("ARG ARCH=\"gfx942\"", "ARG ARCH=\"gfx90a\"");
        std::fs::write(&dockerfile, edited).unwrap();
        std::fs::remove_file(dir.path().join(".dockerignore")).unwrap();
        let e = format!("{:#}", check(dir.path(), &files).unwrap_err());
        assert!(
            e.contains("containers/Dockerfile, .dockerignore differ"),
            "{e}"
        );
        assert!(e.contains("run `cargo xtask images`"), "{e}");
    }

    #[test]
    fn the_committed_files_are_the_generated_ones() {
        let root = project_root();
        let files = generate(&load_model(&root).unwrap());
        check(&root, &files).unwrap();
    }
}

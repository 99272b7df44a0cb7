//! `cargo xtask images`: the images' content-addressed tag and references, and the
//! Debian-base image built here. Their files are generated (by `cargo xtask codegen`) from one
//! model fed by pins.toml.

mod bench;
pub mod engine;
pub mod model;
mod publish;
pub mod pull;
pub mod registry;
mod render;
pub mod tag;

#[cfg(test)]
mod deffile;

use crate::project::{project_root, target_dir};
use anyhow::{Context, bail};
use engine::{Debian, Engine, ImageFormat};
use model::{Base, Model};
use std::path::{Path, PathBuf};
use std::time::Instant;
use xshell::{Cmd, Shell, cmd};

/// The images: their tag, their references, and the Debian-base image built here.
///
/// The container files (containers/Dockerfile*, containers/*.def, .dockerignore) are
/// generated from one model fed by pins.toml by `cargo xtask codegen`, which writes and checks
/// every generated file.
///
/// The tag is a hash over every file that goes into the images (pins, Cargo.lock,
/// rust-toolchain.toml, xtask and crate sources with the GPU shim, the container files); docs
/// and build outputs do not count. CI publishes the images under it, and `cargo xtask test
/// --container docker|apptainer` pulls the image for the current tag.
///
/// Examples:
///   cargo xtask images tag
///   cargo xtask images refs >> "$GITHUB_OUTPUT"
///   cargo xtask images inputs     # the files the tag hashes
///   cargo xtask images base       # the Debian-ROCm base image (.ci/sid-root + docker import)
///   cargo xtask images build      # the Debian-base image, built offline from a staged context
///   cargo xtask images publish --image-base debian --sign-key key.pem   # push under the tag
///   cargo xtask images bench      # the warm matrix bare and in that image, side by side
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    #[command(subcommand)]
    command: Sub,
}

#[derive(clap::Subcommand, Debug)]
enum Sub {
    /// Print the image tag (a content hash of the image inputs) and nothing else.
    Tag {
        /// Fail unless the tag is this one (an empty value checks nothing). The image builds
        /// use it to prove that what they copied is what the tag was computed over.
        #[arg(long, value_name = "TAG")]
        expect_tag: Option<String>,
    },
    /// Print `key=value` lines: tag, docker and apptainer image references, the default
    /// arch and the run flags (for $GITHUB_OUTPUT).
    Refs {
        /// The registry of the references, host[:port][/path] [default:
        /// SYMMEM_IMAGE_REGISTRY, else pins.toml `[images] registry`].
        #[arg(long, value_name = "REGISTRY")]
        registry: Option<String>,
    },
    /// Print the files the tag hashes, one per line (to compare with what an image build saw).
    Inputs,
    /// Make the Debian-ROCm base image: a Debian sid root with `model::DEBIAN_PACKAGES`
    /// (made by `.ci/sid-root rocm`, the one maker of Debian roots, in target/ci/sid-rocm and
    /// reused when its package list matches; needs root or sudo), imported into Docker as
    /// localhost/symmem/debian-rocm:<hash of the package list>. The versions it got are
    /// recorded in a label and in target/images/.
    Base {
        /// The sid root to import (made there when missing or made from another list).
        #[arg(long, value_name = "DIR")]
        root: Option<PathBuf>,
        /// Print the package list (comma-separated, as `.ci/sid-root` takes it) and nothing
        /// else: .ci/real-hipcc makes the same root with it.
        #[arg(long, conflicts_with = "root")]
        packages: bool,
    },
    /// Build the Debian-base image for this checkout's tag with no network: stages the build
    /// context in target/images/debian-context (the tag's input files, this machine's pinned
    /// Rust toolchain, `cargo vendor`ed crates), then `docker build` (or `apptainer build
    /// --fakeroot`, from the base in the Docker engine). Prints each step's time.
    Build {
        /// docker or apptainer (podman: build with docker, then `podman load` the image).
        #[arg(long, value_enum, default_value = "docker")]
        engine: Engine,
        /// Stage the context and print its path; build nothing.
        #[arg(long)]
        context_only: bool,
    },
    // Its help is publish::Args's own doc comment.
    Publish(publish::Args),
    // Its help is bench::Args's own doc comment.
    Bench(bench::Args),
}

/// The generated files, relative to the repository root, with their contents.
pub fn generate(models: &[Model]) -> Vec<(&'static str, String)> {
    let mut files = Vec::new();
    for model in models {
        let (dockerfile, def) = model.base.files();
        files.push((dockerfile, render::dockerfile(model)));
        files.push((def, render::apptainer_def(model)));
    }
    files.push((".dockerignore", render::dockerignore()));
    files
}

pub fn run(sh: &Shell, args: Args) -> anyhow::Result<()> {
    let root = project_root();
    match args.command {
        Sub::Tag { expect_tag } => print_tag(sh, &root, expect_tag.as_deref()),
        Sub::Refs { registry } => {
            let model = Model::load(&root, Base::Amd)?;
            let registry = registry::Registry::choose(registry.as_deref(), &model.registry)?;
            print!("{}", refs(&model, &registry, &tag::compute(sh, &root)?));
            Ok(())
        }
        Sub::Inputs => {
            for file in tag::input_files(sh, &root)? {
                println!("{file}");
            }
            Ok(())
        }
        Sub::Base { packages: true, .. } => {
            println!("{}", model::DEBIAN_PACKAGES.join(","));
            Ok(())
        }
        Sub::Base { root: dir, .. } => make_base(sh, &root, dir),
        Sub::Build {
            engine,
            context_only,
        } => build_debian(sh, &root, engine, context_only),
        Sub::Publish(args) => publish::run(sh, args),
        Sub::Bench(args) => bench::run(sh, args),
    }
}

/// Prints the tag; with `expected` (not empty), fails unless the tag is that one.
fn print_tag(sh: &Shell, root: &Path, expected: Option<&str>) -> anyhow::Result<()> {
    let tag = tag::compute(sh, root)?;
    if let Some(expected) = expected.filter(|t| !t.is_empty())
        && expected != tag
    {
        bail!(
            "the image inputs here hash to {tag}, but the image is being built as \
             {expected}: what was copied into the image differs from the checkout the tag \
             was computed on (uncommitted edits, or files git does not track: `cargo \
             xtask images tag` there lists those). Regenerate the container files \
             (`cargo xtask codegen`), commit, and build from a clean checkout with \
             {}=\"$(cargo xtask images tag)\"",
            model::TAG_ARG
        );
    }
    warn_strays(sh, root)?;
    println!("{tag}");
    Ok(())
}

/// Says on stderr which untracked files a Docker or Apptainer build from this tree would copy
/// beyond the tag's inputs (the build's tag check would then fail).
fn warn_strays(sh: &Shell, root: &Path) -> anyhow::Result<()> {
    let strays = tag::stray_files(sh, root)?;
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

/// `key=value` lines: the tag, each published engine's reference, the default arch, each
/// published engine's run flags.
pub fn refs(model: &Model, registry: &registry::Registry, tag: &str) -> String {
    let mut out = format!("tag={tag}\n");
    for engine in engine::PUBLISHED {
        let reference = registry.reference(engine, model.name, tag);
        out.push_str(&format!("{}={reference}\n", engine.name()));
    }
    out.push_str(&format!(
        "arch={}\n",
        model.default_arch().unwrap_or_default()
    ));
    for engine in engine::PUBLISHED {
        let flags = engine.run_flags(true).join(" ");
        out.push_str(&format!("{}-run-flags={flags}\n", engine.name()));
    }
    out
}

fn seconds(since: Instant) -> String {
    symmem::format_elapsed(since.elapsed())
}

/// Runs a command with the terminal; its failure names it.
fn run_command(cmd: Cmd<'_>) -> anyhow::Result<()> {
    Ok(cmd.quiet().run()?)
}

/// `sudo` in front of a command when not root.
fn privileged<'a>(sh: &'a Shell, program: &str) -> Cmd<'a> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        sh.cmd(program)
    } else {
        cmd!(sh, "sudo {program}")
    }
}

fn docker_has_image(sh: &Shell, image: &str) -> bool {
    let id = "{{.Id}}";
    cmd!(sh, "docker image inspect --format {id} {image}")
        .quiet()
        .ignore_stdout()
        .ignore_stderr()
        .run()
        .is_ok()
}

/// `Package version` of every installed package of a Debian root, from its dpkg status file.
pub fn installed_versions(status: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for stanza in status.split("\n\n") {
        let field = |name: &str| {
            stanza
                .lines()
                .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
        };
        let installed = field("Status:").is_some_and(|s| s.ends_with(" installed"));
        if let (Some(p), Some(v), true) = (field("Package:"), field("Version:"), installed) {
            out.push((p, v));
        }
    }
    out.sort();
    out
}

fn make_base(sh: &Shell, checkout: &Path, root: Option<PathBuf>) -> anyhow::Result<()> {
    let image = model::debian_base_image();
    if docker_has_image(sh, &image) {
        eprintln!("{image}: already in the Docker engine");
        println!("{image}");
        return Ok(());
    }
    // .ci/sid-root takes a root's name (target/ci/sid-NAME) or its path.
    let (name, root) = match root {
        Some(dir) => {
            let dir = std::path::absolute(&dir)
                .with_context(|| format!("the root folder {}", dir.display()))?;
            (dir.clone().into_os_string(), dir)
        }
        None => ("rocm".into(), checkout.join("target/ci/sid-rocm")),
    };
    let list = model::DEBIAN_PACKAGES.join(",");
    let sid_root = checkout.join(".ci/sid-root");
    // Makes the root unless it was made from this list; `true` is the command run inside.
    run_command(cmd!(sh, "{sid_root} {name} {list} -- true")).with_context(|| {
        format!(
            "{} could not make the Debian root {} (its message is above)",
            sid_root.display(),
            root.display()
        )
    })?;
    let status = std::fs::read_to_string(root.join("var/lib/dpkg/status"))
        .with_context(|| format!("{} has no dpkg status", root.display()))?;
    let versions = installed_versions(&status);
    let listed: Vec<String> = versions
        .iter()
        .filter(|(p, _)| model::DEBIAN_PACKAGES.contains(&p.as_str()))
        .map(|(p, v)| format!("{p}={v}"))
        .collect();
    let record = target_dir()
        .join("images")
        .join(format!("debian-rocm-{}.versions", model::debian_base_tag()));
    std::fs::create_dir_all(record.parent().unwrap())?;
    let all: Vec<String> = versions.iter().map(|(p, v)| format!("{p} {v}")).collect();
    std::fs::write(&record, all.join("\n") + "\n")?;
    eprintln!(
        "versions: {} (all {}: {})",
        listed.join(" "),
        all.len(),
        record.display()
    );

    let start = Instant::now();
    let tar = privileged(sh, "tar")
        .arg("-C")
        .arg(&root)
        .args(["--numeric-owner", "-c", "."]);
    let env = "--change=ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    let label = format!(
        "--change=LABEL io.github.symmem.debian-suite={} io.github.symmem.debian-packages=\"{}\"",
        model::DEBIAN_SUITE,
        listed.join(" ")
    );
    let import = cmd!(sh, "docker import {env} {label} - {image}");
    let (tarred, import) = crate::runner::pipe(tar, import)?;
    if !tarred.success() || !import.success() {
        bail!(
            "importing {} as {image} failed (tar: {tarred}, docker import: {import})",
            root.display()
        );
    }
    eprintln!("imported {image} in {}", seconds(start));
    println!("{image}");
    Ok(())
}

/// Hard-links (or copies, across file systems) `from` to `to`, recursively.
fn link_tree(from: &Path, to: &Path) -> anyhow::Result<()> {
    let meta = std::fs::symlink_metadata(from).with_context(|| format!("{}", from.display()))?;
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)?;
    }
    if meta.is_dir() {
        std::fs::create_dir_all(to)?;
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            link_tree(&entry.path(), &to.join(entry.file_name()))?;
        }
    } else if meta.file_type().is_symlink() {
        std::os::unix::fs::symlink(std::fs::read_link(from)?, to)?;
    } else if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to).with_context(|| format!("copying {}", from.display()))?;
    }
    Ok(())
}

/// The pinned toolchain's sysroot and host triple, checked against the pin.
fn pinned_toolchain(
    sh: &Shell,
    checkout: &Path,
    pinned: &str,
) -> anyhow::Result<(PathBuf, String)> {
    // In the checkout, so that its rust-toolchain.toml picks the toolchain.
    let _checkout = sh.push_dir(checkout);
    let output = cmd!(sh, "rustc -vV")
        .quiet()
        .ignore_status()
        .output()
        .context("running rustc")?;
    let text = String::from_utf8_lossy(&output.stdout);
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
            .unwrap_or_default()
    };
    if field("release:") != pinned {
        bail!(
            "the image gets this machine's Rust, but rustc here is {} and pins.toml pins \
             {pinned}: install {pinned} (rustup toolchain install {pinned})",
            field("release:")
        );
    }
    let sysroot = cmd!(sh, "rustc --print sysroot")
        .quiet()
        .ignore_status()
        .output()
        .context("running rustc")?;
    let sysroot = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim());
    Ok((sysroot, field("host:")))
}

/// Stages the Debian image's build context; returns its path.
fn stage_context(sh: &Shell, checkout: &Path, model: &Model) -> anyhow::Result<PathBuf> {
    let images = target_dir().join("images");
    let context = images.join("debian-context");
    if context.exists() {
        std::fs::remove_dir_all(&context)?;
    }
    std::fs::create_dir_all(&context)?;

    let start = Instant::now();
    let (sysroot, host) = pinned_toolchain(sh, checkout, &model.rust_toolchain)?;
    let rust = context.join(model::CONTEXT_RUST);
    for program in ["cargo", "rustc", "rustdoc"] {
        link_tree(
            &sysroot.join("bin").join(program),
            &rust.join("bin").join(program),
        )?;
    }
    for entry in std::fs::read_dir(sysroot.join("lib"))? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().contains(".so") {
            link_tree(&entry.path(), &rust.join("lib").join(entry.file_name()))?;
        }
    }
    let rustlib = Path::new("lib/rustlib").join(&host);
    link_tree(&sysroot.join(&rustlib), &rust.join(&rustlib))?;
    eprintln!(
        "context: Rust {} ({host}) in {}",
        model.rust_toolchain,
        seconds(start)
    );

    // Vendored crates, kept in target/images/vendor for as long as Cargo.lock is the same.
    let start = Instant::now();
    let vendor = images.join("vendor");
    let lock = std::fs::read_to_string(checkout.join("Cargo.lock"))?;
    let stamp = images.join("vendor.Cargo.lock");
    if std::fs::read_to_string(&stamp).ok().as_deref() != Some(lock.as_str()) {
        let _ = std::fs::remove_dir_all(&vendor);
        let _checkout = sh.push_dir(checkout);
        run_command(
            cmd!(
                sh,
                "cargo vendor --locked --versioned-dirs --quiet {vendor}"
            )
            .ignore_stdout(),
        )?;
        std::fs::write(&stamp, &lock)?;
    }
    link_tree(&vendor, &context.join(model::CONTEXT_VENDOR))?;
    eprintln!("context: vendored crates in {}", seconds(start));

    // Exactly the files the tag hashes: the build's tag check then compares like with like.
    let sources = context.join(&model.sources);
    for file in tag::input_files(sh, checkout)? {
        let to = sources.join(&file);
        std::fs::create_dir_all(to.parent().unwrap())?;
        std::fs::copy(checkout.join(&file), &to).with_context(|| format!("copying {file}"))?;
    }
    std::fs::write(context.join("Dockerfile"), render::dockerfile(model))?;
    std::fs::write(context.join("symmem.def"), render::apptainer_def(model))?;
    Ok(context)
}

fn build_debian(
    sh: &Shell,
    checkout: &Path,
    engine: Engine,
    context_only: bool,
) -> anyhow::Result<()> {
    let model = Model::load(checkout, Base::Debian)?;
    let tag = tag::compute(sh, checkout)?;
    let start = Instant::now();
    let context = stage_context(sh, checkout, &model)?;
    eprintln!("staged {} in {}", context.display(), seconds(start));
    if context_only {
        println!("{}", context.display());
        return Ok(());
    }
    if !docker_has_image(sh, &model.base_image) {
        bail!(
            "the base {} is not in the Docker engine: make it with `cargo xtask images base`",
            model.base_image
        );
    }
    let start = Instant::now();
    let spec = engine.spec();
    let flags = match spec.debian {
        Debian::Built { flags } => flags,
        Debian::Loaded { from_docker } => bail!(
            "the Debian base is imported into the Docker engine, so the image is built there: \
             build it with `cargo xtask images build`, then copy it into {}'s store with `{}`",
            spec.title,
            from_docker.replace("{image}", &model.docker_image(&tag))
        ),
    };
    let (args, built) = build_args(engine, flags, &model, &tag);
    let program = engine.name();
    let _context = sh.push_dir(&context);
    run_command(cmd!(sh, "{program} {args...}"))?;
    eprintln!("built {built} in {}", seconds(start));
    println!("{built}");
    Ok(())
}

/// `PROGRAM build` arguments for the Debian image, run from the staged context: the engine's
/// flags for this build, its [`Spec::build_flags`](engine::Spec::build_flags) (for Apptainer:
/// `--writable-tmpfs`, for %test), the tag, then the image and its container file: an OCI
/// image `-t IMAGE .`, a SIF `target/images/NAME-TAG.sif symmem.def`; and what it builds.
fn build_args(engine: Engine, flags: &[&str], model: &Model, tag: &str) -> (Vec<String>, String) {
    let mut args: Vec<String> = ["build"]
        .iter()
        .chain(flags)
        .chain(engine.spec().build_flags)
        .map(|a| a.to_string())
        .collect();
    args.push("--build-arg".into());
    args.push(format!("{}={tag}", model::TAG_ARG));
    let built = match engine.format() {
        ImageFormat::Oci => {
            let image = model.docker_image(tag);
            args.extend(["-t".into(), image.clone(), ".".into()]);
            image
        }
        ImageFormat::Sif => {
            let sif = target_dir().join("images").join(model.sif_name(tag));
            let sif = sif.display().to_string();
            args.extend([sif.clone(), "symmem.def".into()]);
            sif
        }
    };
    (args, built)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pins::Pins;

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
registry = "ghcr.io/symmem"
"#;

    pub fn model() -> Model {
        Model::new(&Pins::parse(PINS).unwrap(), Base::Amd).unwrap()
    }

    pub fn debian() -> Model {
        Model::new(&Pins::parse(PINS).unwrap(), Base::Debian).unwrap()
    }

    #[test]
    fn the_debian_image_never_sets_rocm_path_and_needs_no_network() {
        let model = debian();
        for text in [render::dockerfile(&model), render::apptainer_def(&model)] {
            assert!(!text.contains("ROCM_PATH"), "{text}");
            assert!(!text.contains("/opt/rocm"), "{text}");
            assert!(!text.contains("rustup") && !text.contains("curl"), "{text}");
            assert!(!text.contains("cargo fetch"), "{text}");
            assert!(text.contains("offline = true"), "{text}");
            assert!(text.contains(&model::debian_base_image()), "{text}");
            assert!(
                text.contains("cargo xtask images tag --expect-tag"),
                "{text}"
            );
        }
        assert!(model.base_image.starts_with("localhost/"));
    }

    #[test]
    fn published_bases_are_fully_qualified_for_podman() {
        assert_eq!(
            model().base_image,
            "docker.io/rocm/dev-ubuntu-24.04:7.2.4-complete"
        );
        assert_eq!(
            model::qualified("ubuntu:24.04"),
            "docker.io/library/ubuntu:24.04"
        );
        assert_eq!(model::qualified("ghcr.io/a/b:1"), "ghcr.io/a/b:1");
        assert_eq!(model::qualified("localhost/a/b:1"), "localhost/a/b:1");
    }

    #[test]
    fn the_debian_base_tag_follows_the_package_list() {
        let tag = model::debian_base_tag();
        assert_eq!(tag.len(), 16);
        assert_eq!(tag, model::debian_base_tag());
    }

    #[test]
    fn installed_versions_reads_dpkg_status() {
        let status = "Package: hipcc\nStatus: install ok installed\nVersion: 7.0.2-1\n\n\
                      Package: gone\nStatus: deinstall ok config-files\nVersion: 1\n\n\
                      Package: cmake\nStatus: install ok installed\nVersion: 4.3.0-1\n";
        assert_eq!(
            installed_versions(status),
            [
                ("cmake".to_string(), "4.3.0-1".to_string()),
                ("hipcc".to_string(), "7.0.2-1".to_string())
            ]
        );
    }

    #[test]
    fn the_runscript_takes_the_callers_provider() {
        for model in [model(), debian()] {
            let def = render::apptainer_def(&model);
            let runscript = &def[def.find("%runscript").unwrap()..def.find("%test").unwrap()];
            assert!(
                runscript.contains("exec symmem-matrix test \"$@\""),
                "{runscript}"
            );
            assert!(!runscript.contains("cargo"), "{runscript}");
            // The script itself: a given --provider wins, else the image's default.
            let script = runscript
                .lines()
                .skip(1)
                .collect::<Vec<_>>()
                .join("\n")
                .replace("exec symmem-matrix test", "echo");
            let run = |args: &[&str]| {
                let sh = Shell::new().unwrap();
                let out = cmd!(sh, "sh -c {script} sh {args...}")
                    .quiet()
                    .ignore_status()
                    .output()
                    .unwrap();
                String::from_utf8(out.stdout).unwrap().trim().to_string()
            };
            assert_eq!(
                run(&["--provider", "host", "--ranks", "2"]),
                "--provider host --ranks 2"
            );
            assert_eq!(run(&["--provider=host"]), "--provider=host");
            assert_eq!(
                run(&["--ranks", "8"]),
                format!("--provider {} --ranks 8", model.default_provider)
            );
        }
    }

    #[test]
    fn runs_use_the_installed_programs_and_never_cargo() {
        for model in [model(), debian()] {
            let def = render::apptainer_def(&model);
            let test = &def[def.find("%test").unwrap()..def.find("%labels").unwrap()];
            let one_rank = format!(
                "symmem-matrix test --provider {} --ranks 1",
                model.default_provider
            );
            assert!(test.contains(&one_rank), "{test}");
            assert!(!test.contains("cargo"), "{test}");
            let dockerfile = render::dockerfile(&model);
            let tail = &dockerfile[dockerfile.find("HEALTHCHECK").unwrap()..];
            assert!(!tail.contains("cargo"), "{tail}");
            assert!(
                tail.contains(&format!("CMD {}", render::quoted(&model.test_command()))),
                "{tail}"
            );
            assert!(
                tail.contains("CMD [\"symmem-matrix\", \"test\", \"--provider\""),
                "{tail}"
            );
            // The programs are installed from the workspace build, on PATH.
            for program in model::INSTALLED {
                assert!(
                    dockerfile.contains(&format!("/opt/symmem/target/image/{}", program.bin)),
                    "{program:?}"
                );
                assert!(
                    dockerfile.contains(&format!(
                        "--package {} --bin {}",
                        program.package, program.bin
                    )),
                    "{program:?}"
                );
            }
            assert!(dockerfile.contains("rm -rf /opt/symmem/target/image"));
            assert!(dockerfile.contains("cargo build --locked --profile image "));
            assert!(dockerfile.contains("/usr/local/bin/"), "{dockerfile}");
        }
        // The AMD image's rank binary finds the installed shim through the setting.
        let amd = render::dockerfile(&model());
        assert!(
            amd.contains(&format!(
                "{}=/usr/local/lib/libsymmem_shim_rocshmem.so",
                symmem::settings::SHIM_LIB.name
            )),
            "{amd}"
        );
        let header = &render::apptainer_def(&model());
        let header = &header[..header.find("%arguments").unwrap()];
        assert!(
            header.contains("apptainer build") && header.contains("--writable-tmpfs"),
            "{header}"
        );
        let tag = "0123456789abcdef";
        let tag_arg = format!("{}={tag}", model::TAG_ARG);
        let debian = debian();
        let flags = |engine: Engine| match engine.spec().debian {
            Debian::Built { flags } => flags,
            Debian::Loaded { .. } => panic!("{engine:?} does not build the Debian image"),
        };
        let apptainer = Engine::Apptainer;
        let (args, sif) = build_args(apptainer, flags(apptainer), &debian, tag);
        assert_eq!(
            sif,
            target_dir()
                .join("images")
                .join(debian.sif_name(tag))
                .display()
                .to_string()
        );
        assert_eq!(
            args,
            [
                "build",
                "--force",
                "--fakeroot",
                "--writable-tmpfs",
                "--build-arg",
                &tag_arg,
                &sif,
                "symmem.def"
            ]
        );
        let (args, image) = build_args(Engine::Docker, flags(Engine::Docker), &debian, tag);
        assert_eq!(image, debian.docker_image(tag));
        assert_eq!(args, ["build", "--build-arg", &tag_arg, "-t", &image, "."]);
    }

    #[test]
    fn refs_snapshot() {
        let model = model();
        let registry = registry::Registry::parse(&model.registry, "pins").unwrap();
        insta::assert_snapshot!(refs(&model, &registry, "0123456789abcdef"));
    }

    #[test]
    fn the_pins_feed_the_files() {
        let other = PINS
            .replace("rocm = \"7.2.4\"", "rocm = \"7.3.0\"")
            .replace("arch = \"gfx942\"", "arch = \"gfx950\"")
            .replace("toolchain = \"1.95.0\"", "toolchain = \"1.96.0\"");
        let model = Model::new(&Pins::parse(&other).unwrap(), Base::Amd).unwrap();
        for (path, text) in generate(&[model]) {
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
}

//! `cargo xtask build-rocshmem`: rocSHMEM from the pinned commit, with IPC, for the chosen GPU
//! targets, into a content-addressed prefix under `target/`.

pub(crate) mod arch;
mod install;
mod plan;
mod runner;
mod source;
mod tools;

use arch::TargetId;
pub use tools::which;

/// CMake >= 3.20 present (for other commands that drive CMake).
pub fn tools_cmake() -> anyhow::Result<std::path::PathBuf> {
    tools::cmake()
}
use plan::{Plan, PlanInputs, Source};

use crate::pins::Pins;
use crate::project::{project_root, target_dir};
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Build rocSHMEM (IPC, single node) from the commit pinned in pins.toml.
///
/// The install goes to a content-addressed prefix under target/rocshmem/prefix/, named after
/// the version, commit, targets and a hash of every input; a second identical run does nothing.
/// At the end it prints what to export (ROCSHMEM_HOME, CMAKE_PREFIX_PATH).
///
/// Needs: git (unless --source), CMake >= 3.20, Ninja (or Make), and ROCm with hipcc
/// (ROCM_PATH, default /opt/rocm). Inside `nix develop .#rocm` all of these are present.
///
/// Examples:
///   cargo xtask build-rocshmem --arch gfx942
///   cargo xtask build-rocshmem --arch gfx942,gfx950:sramecc+:xnack- --jobs 16
///   cargo xtask build-rocshmem --arch gfx942 --dry-run
///   export ROCSHMEM_HOME=$(cargo xtask build-rocshmem --arch gfx942 --print-prefix)
///   cargo xtask build-rocshmem --arch gfx942 --source ~/src/rocm-systems   # offline
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// GPU targets, comma-separated: gfx942, gfx950, gfx90a, ... with optional features
    /// (gfx950:sramecc+:xnack-).
    #[arg(long, required = true, value_parser = parse_targets)]
    arch: Targets,
    /// Build from this local checkout of the pinned repository instead of fetching.
    #[arg(long, value_name = "DIR")]
    source: Option<PathBuf>,
    /// Accept a --source checkout at another commit or with local changes (it gets its own
    /// prefix, recorded as differing from the pin).
    #[arg(long, requires = "source")]
    allow_source_mismatch: bool,
    /// Parallel build jobs (default: the number of CPUs).
    #[arg(long, short)]
    jobs: Option<usize>,
    /// Print the whole plan (commands, defines, prefix) and run nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print only the install prefix (for scripts) and build nothing.
    #[arg(long, conflicts_with = "dry_run")]
    print_prefix: bool,
    /// The ROCm install (default: $ROCM_PATH, else /opt/rocm).
    #[arg(long, value_name = "DIR")]
    rocm_path: Option<PathBuf>,
    /// The HIP compiler (default: $HIPCC, else <rocm>/bin/hipcc, else hipcc on PATH).
    #[arg(long, value_name = "PATH")]
    hipcc: Option<PathBuf>,
    /// Pins file (default: pins.toml at the repository root).
    #[arg(long, value_name = "FILE")]
    pins: Option<PathBuf>,
    /// Where sources, build trees and prefixes go (default: target/rocshmem).
    #[arg(long, value_name = "DIR")]
    out_dir: Option<PathBuf>,
}

/// The `--arch` list (a newtype: clap treats a bare `Vec` as repeated values).
#[derive(Clone, Debug)]
struct Targets(Vec<TargetId>);

fn parse_targets(text: &str) -> anyhow::Result<Targets> {
    TargetId::parse_list(text).map(Targets)
}

fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("resolving {}", path.display()))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let started = Instant::now();
    let targets = args.arch.0.clone();
    let pins_path = args
        .pins
        .clone()
        .unwrap_or_else(|| project_root().join("pins.toml"));
    let pin = Pins::load(&pins_path)?.rocshmem;
    let toolchain = tools::toolchain(args.rocm_path.as_deref(), args.hipcc.as_deref())?;
    let out_dir = absolute(
        &args
            .out_dir
            .clone()
            .unwrap_or_else(|| target_dir().join("rocshmem")),
    )?;

    let git = match &args.source {
        None => tools::git()?,
        Some(_) => tools::which("git").unwrap_or_else(|| PathBuf::from("git")),
    };
    let source = match &args.source {
        None => Source::Fetch,
        Some(dir) => {
            let root = absolute(dir)?;
            let state = source::LocalState::read(&git, &root)?;
            let mismatch = match state.mismatch(&pin) {
                None => None,
                Some(why) if args.allow_source_mismatch => Some(state.digest(&git, &root)?)
                    .inspect(|_| {
                        eprintln!(
                            "warning: --source {} differs from the pin ({why}); building it anyway",
                            root.display()
                        );
                    }),
                Some(why) => bail!(
                    "--source {} is not the pinned rocSHMEM: {why}. Check out the pin \
                     (git -C {} checkout {}) and commit or stash local changes, or pass \
                     --allow-source-mismatch to build it anyway under its own prefix",
                    root.display(),
                    root.display(),
                    pin.commit
                ),
            };
            Source::Local { root, mismatch }
        }
    };
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let plan = Plan::new(&PlanInputs {
        pin: &pin,
        targets: &targets,
        toolchain: &toolchain,
        source,
        out_dir: &out_dir,
        jobs,
    });

    if args.print_prefix {
        println!("{}", plan.prefix.display());
        return Ok(());
    }
    let fetch = source::fetch_commands(&git, &pin, &source::partial_dir(&plan.checkout));
    if args.dry_run {
        print!("{}", plan.render(&pin, &fetch));
        return Ok(());
    }
    if install::up_to_date(&plan, &targets) {
        eprintln!(
            "rocSHMEM {} for {} is up to date in {} (nothing to do, {} ms)",
            pin.version,
            targets
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
            plan.prefix.display(),
            started.elapsed().as_millis()
        );
        print_exports(&plan.prefix);
        return Ok(());
    }

    let interrupt = runner::Interrupt::install()?;
    std::fs::create_dir_all(&plan.build_dir)
        .with_context(|| format!("creating {}", plan.build_dir.display()))?;
    let log = plan.build_dir.join("symmem-build.log");
    let step = |n: usize, what: &str| {
        eprintln!("[{n}/5] {what}");
        Instant::now()
    };
    let done = |t: Instant| eprintln!("      done in {:.1} s", t.elapsed().as_secs_f64());

    let t = step(1, "source");
    match &plan.source {
        Source::Fetch => {
            let reused = source::ensure_fetched(&git, &pin, &plan.checkout)?;
            eprintln!(
                "      {} {} at {}",
                if reused {
                    "reusing checkout"
                } else {
                    "fetched"
                },
                plan.checkout.display(),
                &pin.commit[..12]
            );
        }
        Source::Local { root, .. } => eprintln!("      using {}", root.display()),
    }
    if !plan.source_dir.join("CMakeLists.txt").is_file() {
        bail!(
            "{} has no CMakeLists.txt: is rocshmem.subdirectory = {:?} right for this commit?",
            plan.source_dir.display(),
            pin.subdirectory
        );
    }
    done(t);
    let t = step(2, "configure");
    runner::run(&plan.configure, &log, false, &interrupt)?;
    done(t);
    let t = step(3, &format!("build ({jobs} jobs; log: {})", log.display()));
    runner::run(&plan.build, &log, true, &interrupt)?;
    done(t);
    let t = step(4, "install (staging)");
    if plan.staging.exists() {
        std::fs::remove_dir_all(&plan.staging)
            .with_context(|| format!("removing the stale {}", plan.staging.display()))?;
    }
    let installed = runner::run(&plan.install, &log, false, &interrupt);
    if installed.is_err() {
        let _ = std::fs::remove_dir_all(&plan.staging);
    }
    installed?;
    done(t);
    let t = step(5, "verify and publish");
    install::publish(&plan, &targets)?;
    done(t);
    // The build tree only serves a resumed build; the install is complete.
    let _ = std::fs::remove_dir_all(&plan.build_dir);
    eprintln!(
        "rocSHMEM {} installed in {} ({:.1} s)",
        pin.version,
        plan.prefix.display(),
        started.elapsed().as_secs_f64()
    );
    print_exports(&plan.prefix);
    Ok(())
}

fn print_exports(prefix: &Path) {
    println!("export ROCSHMEM_HOME={}", prefix.display());
    println!(
        "export CMAKE_PREFIX_PATH={}${{CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}}",
        prefix.display()
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pins::RocshmemPin;
    use plan::{Generator, Toolchain};

    fn pin() -> RocshmemPin {
        RocshmemPin {
            repository: "https://github.com/ROCm/rocm-systems.git".into(),
            subdirectory: "projects/rocshmem".into(),
            commit: "006ac1aaa8bfbf04a77a120cfc54db79095f3219".into(),
            version: "3.4.0".into(),
        }
    }

    fn toolchain(version_file: bool) -> Toolchain {
        Toolchain {
            rocm_path: "/opt/rocm".into(),
            rocm_version: "7.2.4".into(),
            rocm_version_file: version_file,
            hipcc: "/opt/rocm/bin/hipcc".into(),
            cmake: "/usr/bin/cmake".into(),
            generator: Generator::Ninja,
        }
    }

    fn plan(targets: &str, version_file: bool, source: Source) -> (Plan, String) {
        let pin = pin();
        let targets = TargetId::parse_list(targets).unwrap();
        let toolchain = toolchain(version_file);
        let out = Path::new("/work/target/rocshmem");
        let plan = Plan::new(&PlanInputs {
            pin: &pin,
            targets: &targets,
            toolchain: &toolchain,
            source,
            out_dir: out,
            jobs: 8,
        });
        let fetch = source::fetch_commands(
            Path::new("/usr/bin/git"),
            &pin,
            &source::partial_dir(&plan.checkout),
        );
        let text = plan.render(&pin, &fetch);
        (plan, text)
    }

    #[test]
    fn plan_for_one_target() {
        insta::assert_snapshot!(plan("gfx942", true, Source::Fetch).1);
    }

    #[test]
    fn plan_for_two_targets_without_rocm_version_file() {
        insta::assert_snapshot!(plan("gfx950,gfx942", false, Source::Fetch).1);
    }

    #[test]
    fn plan_for_target_features_from_a_local_checkout() {
        let source = Source::Local {
            root: "/src/rocm-systems".into(),
            mismatch: None,
        };
        insta::assert_snapshot!(plan("gfx950:sramecc+:xnack-,gfx90a", true, source).1);
    }

    #[test]
    fn every_input_changes_the_prefix_and_nothing_else_does() {
        let base = plan("gfx942", true, Source::Fetch).0;
        assert_eq!(base.prefix, plan("gfx942", true, Source::Fetch).0.prefix);
        assert_ne!(
            base.prefix,
            plan("gfx942,gfx950", true, Source::Fetch).0.prefix
        );
        assert_ne!(base.prefix, plan("gfx942", false, Source::Fetch).0.prefix);
        let mismatch = Source::Local {
            root: "/src".into(),
            mismatch: Some("abc + changes 1234".into()),
        };
        assert_ne!(base.prefix, plan("gfx942", true, mismatch).0.prefix);
        // The same pin from a local checkout builds the same thing.
        let local = Source::Local {
            root: "/src".into(),
            mismatch: None,
        };
        assert_eq!(base.prefix, plan("gfx942", true, local).0.prefix);
        // The stamp round-trips its hash.
        assert_eq!(
            Plan::stamped_hash(&base.stamp()).as_deref(),
            Some(base.hash.as_str())
        );
    }
}

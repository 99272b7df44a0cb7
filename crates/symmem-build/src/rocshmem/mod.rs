//! `cargo xtask build-rocshmem`: rocSHMEM from the pinned commit, with IPC, for the chosen GPU
//! targets, into a content-addressed prefix under `target/`.

pub mod install;
pub mod plan;
mod source;
mod stale;

pub use stale::human_bytes;
pub mod support;

use crate::targets::GpuTargets;
use plan::{CmakeDefine, Plan, PlanInputs, Source, Toolchain};

use crate::Workspace;
use crate::cmake::{self, Step};
use crate::lock::OutLock;
use crate::pins::{Pins, RocshmemPin};
use crate::{rocm, tools};
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::time::Instant;
use symmem::format_elapsed;
use xshell::Shell;

/// Build rocSHMEM (IPC, single node) from the commit pinned in pins.toml.
///
/// The install goes to a content-addressed prefix under target/rocshmem/prefix/, named after
/// the version, commit, targets and a hash of every input; a second identical run does nothing.
/// At the end it prints what to export (ROCSHMEM_HOME, CMAKE_PREFIX_PATH). One build at a time
/// per out folder: a second is refused at once, naming the first.
///
/// Needs: git (unless --source), CMake >= 3.20, Ninja (or Make), and ROCm with hipcc. ROCm is
/// --rocm-path, else $ROCM_PATH, else what `hipconfig --rocmpath` says (the hipconfig next to
/// hipcc on PATH: finds Debian's /usr), else /opt/rocm; the plan says which and how. The device
/// bitcode needs clang++, llvm-link and opt from <rocm>/llvm/bin or `hipconfig --hipclangpath`.
/// Inside `nix develop .#rocm` all of these are present.
///
/// Examples:
///   cargo xtask build-rocshmem --arch gfx942
///   cargo xtask build-rocshmem --arch gfx942,gfx950:sramecc+:xnack- --jobs 16
///   cargo xtask build-rocshmem --arch gfx942 --dry-run
///   export ROCSHMEM_HOME=$(cargo xtask build-rocshmem --arch gfx942 --print-prefix)
///   cargo xtask build-rocshmem --arch gfx942 --source ~/src/rocm-systems   # offline
///   cargo xtask build-rocshmem --arch gfx942 --cmake-arg -DUSE_THREADS=ON
///   cargo xtask build-rocshmem --arch gfx942 --clean-stale   # drop other inputs' builds
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// GPU targets, comma-separated: gfx942, gfx950, gfx90a, ... with optional features
    /// (gfx950:sramecc+:xnack-).
    #[arg(long, required = true, value_parser = GpuTargets::parse_hip)]
    pub arch: GpuTargets,
    /// Build from this local checkout of the pinned repository instead of fetching.
    #[arg(long, value_name = "DIR")]
    pub source: Option<PathBuf>,
    /// Accept a --source checkout at another commit or with local changes: its HEAD (and a
    /// digest of its changes) is what the prefix, the messages and the stamp name.
    #[arg(long, requires = "source")]
    pub allow_source_mismatch: bool,
    /// Parallel build jobs (default: the number of CPUs).
    #[arg(long, short)]
    pub jobs: Option<usize>,
    /// Print the whole plan (where each tool was found, commands, defines, prefix) and run
    /// nothing. With --clean-stale: list what it would remove.
    #[arg(long)]
    pub dry_run: bool,
    /// Print only the install prefix (for scripts) and build nothing.
    #[arg(long, conflicts_with = "dry_run")]
    pub print_prefix: bool,
    /// An extra CMake define for rocSHMEM, -DNAME=VALUE or -DNAME:TYPE=VALUE; repeatable.
    /// Overrides the plan's own define of that name, and is part of the hash and the stamp.
    /// GPU_TARGETS, ROCM_PATH, CMAKE_CXX_COMPILER, CMAKE_INSTALL_PREFIX and USE_IPC are
    /// refused: they have their own flags, or symmem depends on them.
    #[arg(
        long = "cmake-arg",
        value_name = "-DNAME=VALUE",
        allow_hyphen_values = true,
        value_parser = CmakeDefine::parse
    )]
    pub cmake_args: Vec<CmakeDefine>,
    /// Remove the build trees and prefixes of other inputs under the out folder (other
    /// targets, ROCm, defines or pins), keeping this plan's; build nothing. Refused while
    /// another build-rocshmem runs in the same out folder.
    #[arg(long, conflicts_with = "print_prefix")]
    pub clean_stale: bool,
    /// The ROCm install (default: $ROCM_PATH, else the ROCm `hipconfig --rocmpath` reports,
    /// else /opt/rocm). Debian/Ubuntu: /usr (found by hipconfig; never export ROCM_PATH there).
    #[arg(long, value_name = "DIR")]
    pub rocm_path: Option<PathBuf>,
    /// The HIP compiler (default: $HIPCC, else <rocm>/bin/hipcc, else hipcc on PATH).
    #[arg(long, value_name = "PATH")]
    pub hipcc: Option<PathBuf>,
    /// Pins file (default: pins.toml at the repository root).
    #[arg(long, value_name = "FILE")]
    pub pins: Option<PathBuf>,
    /// Where sources, build trees and prefixes go (default: target/rocshmem).
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}

/// The tools a rocSHMEM build needs: ROCm's (from the process's environment), CMake and the
/// generator.
fn toolchain(
    sh: &Shell,
    rocm: Option<&Path>,
    hipcc_path: Option<&Path>,
    cmake_args: &[CmakeDefine],
) -> anyhow::Result<Toolchain> {
    let explicit_version = cmake_args
        .iter()
        .find(|d| d.var() == "EXPLICIT_ROCM_VERSION")
        .map(|d| d.value.as_str());
    let given = |var: &str| cmake_args.iter().any(|d| d.var() == var);
    let parts = rocm::rocm_parts(
        sh,
        rocm,
        hipcc_path,
        explicit_version,
        &given,
        &rocm::Search::from_process(),
    )?;
    Ok(Toolchain {
        rocm: parts,
        cmake: tools::cmake(sh)?,
        generator: tools::generator()?,
        environment: cmake::configure_environment_of_process(),
    })
}

fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("resolving {}", path.display()))
}

pub fn run(sh: &Shell, ws: &Workspace, args: Args) -> anyhow::Result<()> {
    let started = Instant::now();
    let (pin, toolchain) = pin_and_toolchain(sh, ws, &args)?;
    let out_dir = absolute(
        &args
            .out_dir
            .clone()
            .unwrap_or_else(|| ws.target.join("rocshmem")),
    )?;
    let git = match &args.source {
        None => tools::git()?,
        Some(_) => tools::program(Path::new("git")).unwrap_or_else(|| PathBuf::from("git")),
    };
    let source = source_of(sh, &args, &pin, &git)?;
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let plan = Plan::new(&PlanInputs {
        pin: &pin,
        targets: args.arch.hip("build-rocshmem")?,
        toolchain: &toolchain,
        source,
        out_dir: &out_dir,
        jobs,
        cmake_args: &args.cmake_args,
    });

    if args.clean_stale {
        // Not while a build uses the trees it would remove.
        let _lock = (!args.dry_run)
            .then(|| OutLock::take(&out_dir, "build-rocshmem"))
            .transpose()?;
        return clean_stale(&out_dir, &plan, args.dry_run);
    }
    if args.print_prefix {
        println!("{}", plan.prefix.display());
        return Ok(());
    }
    if args.dry_run {
        let fetch = source::fetch_commands(&git, &pin, &source::partial_dir(&plan.checkout));
        print!("{}", plan.render(&pin, &fetch));
        return Ok(());
    }
    let up_to_date = || {
        let fresh = install::up_to_date(&plan);
        if fresh {
            eprintln!(
                "{} for {} is up to date in {} (nothing to do, {})",
                plan.built,
                GpuTargets::Hip(plan.targets.clone()),
                plan.prefix.display(),
                format_elapsed(started.elapsed())
            );
            print_exports(&plan.prefix);
        }
        fresh
    };
    // An install that is there needs nothing written: no lock, whatever else runs.
    if up_to_date() {
        return Ok(());
    }
    // Taken before anything is written under the out folder (the fetch, CMake, ninja): a
    // second run there is refused at once, naming the first.
    let _lock = OutLock::take(&out_dir, "build-rocshmem")?;
    // The run that held it may have just installed these very inputs.
    if up_to_date() {
        return Ok(());
    }
    build(sh, &plan, &pin, &git, jobs)?;
    eprintln!(
        "{} installed in {} ({})",
        plan.built,
        plan.prefix.display(),
        format_elapsed(started.elapsed())
    );
    note_stale(&out_dir, &plan);
    print_exports(&plan.prefix);
    Ok(())
}

/// The pin (refused when it names a rocSHMEM the shim does not support) and the tools; for
/// `--dry-run`, a missing ROCm shows as unknown in the plan instead of stopping it.
fn pin_and_toolchain(
    sh: &Shell,
    ws: &Workspace,
    args: &Args,
) -> anyhow::Result<(RocshmemPin, Toolchain)> {
    let pins_path = args
        .pins
        .clone()
        .unwrap_or_else(|| ws.root.join("pins.toml"));
    let pin = Pins::load(&pins_path)?.rocshmem;
    if !support::supported(&pin.version) {
        bail!(
            "{} pins rocSHMEM {}, which the shim does not support (it needs {}.x or newer): pin \
             a rocSHMEM 3.x commit (rocshmem.commit and rocshmem.version)",
            pins_path.display(),
            pin.version,
            support::OLDEST_MAJOR
        );
    }
    CmakeDefine::check_unique(&args.cmake_args)?;
    let toolchain = match toolchain(
        sh,
        args.rocm_path.as_deref(),
        args.hipcc.as_deref(),
        &args.cmake_args,
    ) {
        Ok(toolchain) => toolchain,
        // A plan to review before installing ROCm: everything else is known.
        Err(err) if args.dry_run && !args.clean_stale => {
            eprintln!("warning: {err:#}\nthe plan below shows <unknown> where it depends on ROCm");
            Toolchain::unknown(
                "not found: see the warning above".into(),
                tools::cmake(sh).unwrap_or_else(|_| PathBuf::from("cmake")),
                tools::generator().unwrap_or(plan::Generator::Ninja),
            )
        }
        Err(err) => return Err(err),
    };
    Ok((pin, toolchain))
}

/// Where the sources come from: the pin fetched, or a `--source` checkout, which must be the
/// pin unless `--allow-source-mismatch`, and never a rocSHMEM older than the shim supports.
fn source_of(sh: &Shell, args: &Args, pin: &RocshmemPin, git: &Path) -> anyhow::Result<Source> {
    let Some(dir) = &args.source else {
        return Ok(Source::Fetch);
    };
    let root = absolute(dir)?;
    // A rocSHMEM too old for the shim is the first thing to say: --allow-source-mismatch,
    // which the mismatch below would ask for, cannot make it build.
    check_source_version(&root.join(&pin.subdirectory), pin)?;
    let state = source::LocalState::read(sh, git, &root)?;
    let mismatch = match state.mismatch(pin) {
        None => None,
        Some(why) if args.allow_source_mismatch => {
            let details = state.mismatch_details(sh, git, &root, &pin.subdirectory)?;
            if !args.print_prefix {
                eprintln!(
                    "warning: --source {} differs from the pin ({why}); building it anyway, \
                     under its own prefix",
                    root.display()
                );
            }
            Some(details)
        }
        Some(why) => bail!(
            "--source {} is not the pinned rocSHMEM: {why}. Check out the pin (git -C {} \
             checkout {}) and commit or stash local changes, or pass --allow-source-mismatch to \
             build it anyway under its own prefix",
            root.display(),
            root.display(),
            pin.commit
        ),
    };
    Ok(Source::Local { root, mismatch })
}

/// Step 1: the sources are there (fetched, or the checkout given) and are a rocSHMEM the shim
/// supports.
fn source_step(sh: &Shell, plan: &Plan, pin: &RocshmemPin, git: &Path) -> anyhow::Result<()> {
    match &plan.source {
        Source::Fetch => {
            let reused = source::ensure_fetched(sh, git, pin, &plan.checkout)?;
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
        Source::Local { root, .. } => {
            eprintln!("      using {}: {}", root.display(), plan.built);
        }
    }
    if !plan.source_dir.join("CMakeLists.txt").is_file() {
        bail!(
            "{} has no CMakeLists.txt: is rocshmem.subdirectory = {:?} right for this commit?",
            plan.source_dir.display(),
            pin.subdirectory
        );
    }
    check_source_version(&plan.source_dir, pin)
}

/// Step 4: `cmake --install` into the staging folder (never half into the prefix).
fn install_step(cmake: &cmake::Driver<'_>, plan: &Plan) -> anyhow::Result<()> {
    if plan.staging.exists() {
        std::fs::remove_dir_all(&plan.staging)
            .with_context(|| format!("removing the stale {}", plan.staging.display()))?;
    }
    let installed = cmake.run(Step::Install, &plan.install);
    if installed.is_err() {
        let _ = std::fs::remove_dir_all(&plan.staging);
    }
    Ok(installed?)
}

/// The five steps: source, configure, build, install (staging), verify and publish.
fn build(
    sh: &Shell,
    plan: &Plan,
    pin: &RocshmemPin,
    git: &Path,
    jobs: usize,
) -> anyhow::Result<()> {
    for (what, line) in &plan.toolchain_lines {
        eprintln!("{what:<7} {line}");
    }
    std::fs::create_dir_all(&plan.build_dir)
        .with_context(|| format!("creating {}", plan.build_dir.display()))?;
    let log = plan.build_dir.join("symmem-build.log");
    let cmake = cmake::Driver::new(sh, log.clone(), false)?;
    let step = |n: usize, what: &str| {
        eprintln!("[{n}/5] {what}");
        Instant::now()
    };
    let done = |t: Instant| eprintln!("      done in {}", format_elapsed(t.elapsed()));

    let t = step(1, "source");
    source_step(sh, plan, pin, git)?;
    done(t);
    let t = step(2, "configure");
    cmake::drop_stale_tree(&plan.build_dir, &plan.source_dir)?;
    cmake.run(Step::Configure, &plan.configure)?;
    done(t);
    let t = step(3, &format!("build ({jobs} jobs; log: {})", log.display()));
    cmake.run(Step::Build, &plan.build)?;
    done(t);
    let t = step(4, "install (staging)");
    install_step(&cmake, plan)?;
    done(t);
    let t = step(5, "verify and publish");
    install::publish(plan)?;
    done(t);
    // The build tree only serves a resumed build; the install is complete.
    let _ = std::fs::remove_dir_all(&plan.build_dir);
    Ok(())
}

/// Says what other inputs left under the out folder (`--clean-stale` removes it).
fn note_stale(out_dir: &Path, plan: &Plan) {
    let stale = stale::find(out_dir, &keep(plan));
    if !stale.is_empty() {
        eprintln!(
            "note: {} of other inputs under {}: run this command again with --clean-stale to \
             remove them (this install stays)",
            stale::summary(&stale),
            out_dir.display()
        );
    }
}

/// Refuses a source tree whose CMakeLists.txt declares a rocSHMEM older than the shim
/// supports, before any tool runs on it.
fn check_source_version(source_dir: &Path, pin: &RocshmemPin) -> anyhow::Result<()> {
    let (version, declared_in) = match source::tree_version(source_dir) {
        Ok(found) => found,
        Err(looked_at) => {
            eprintln!(
                "warning: the rocSHMEM version of {} cannot be told (looked at {looked_at}): \
                 building it as it is; the shim needs rocSHMEM {}.x or newer",
                source_dir.display(),
                support::OLDEST_MAJOR
            );
            return Ok(());
        }
    };
    support::check_source(
        &version,
        &declared_in,
        &format!(
            "build the pinned rocSHMEM {} (commit {} of {}): drop --source, or check that \
             commit out in the --source checkout",
            pin.version, pin.commit, pin.repository
        ),
    )
}

/// What `--clean-stale` never removes: this plan's build tree, prefix and staging folder.
fn keep(plan: &Plan) -> [&Path; 3] {
    [&plan.build_dir, &plan.prefix, &plan.staging]
}

/// `--clean-stale`: removes (or with `dry_run`, lists) the other inputs' entries.
fn clean_stale(out_dir: &Path, plan: &Plan, dry_run: bool) -> anyhow::Result<()> {
    let stale = stale::find(out_dir, &keep(plan));
    if stale.is_empty() {
        eprintln!(
            "nothing stale under {} (keeping {})",
            out_dir.display(),
            plan.prefix.display()
        );
        return Ok(());
    }
    for entry in &stale {
        eprintln!(
            "{} {} ({})",
            if dry_run { "would remove" } else { "removing" },
            entry.path.display(),
            stale::human_bytes(entry.bytes)
        );
    }
    if !dry_run {
        stale::remove(&stale)?;
    }
    eprintln!(
        "{} {}; kept {}",
        if dry_run { "would free" } else { "removed" },
        stale::summary(&stale),
        plan.prefix.display()
    );
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
    use crate::targets::TargetId;
    use clap::Parser as _;
    use plan::{Generator, LlvmTools, Mismatch, RocmParts, RocmVersion, VersionSource};

    fn pin() -> RocshmemPin {
        RocshmemPin {
            repository: "https://github.com/ROCm/rocm-systems.git".into(),
            subdirectory: "projects/rocshmem".into(),
            commit: "006ac1aaa8bfbf04a77a120cfc54db79095f3219".into(),
            version: "3.4.0".into(),
        }
    }

    /// AMD's /opt/rocm: `.info/version` (or only rocm_version.h) and llvm/bin.
    fn amd(version_file: bool) -> Toolchain {
        Toolchain {
            rocm: RocmParts {
                rocm_path: "/opt/rocm".into(),
                rocm_found: "from $ROCM_PATH".into(),
                rocm_version: RocmVersion {
                    version: "7.2.4".into(),
                    source: if version_file {
                        VersionSource::InfoFile
                    } else {
                        VersionSource::RocmVersionHeader("include/rocm-core/rocm_version.h".into())
                    },
                },
                hipcc: "/opt/rocm/bin/hipcc".into(),
                hipcc_found: "in the ROCm folder".into(),
                llvm: LlvmTools::InRocm("/opt/rocm/llvm/bin".into()),
            },
            cmake: "/usr/bin/cmake".into(),
            generator: Generator::Ninja,
            environment: vec![],
        }
    }

    /// Debian's /usr: hip_version.h only, HIP's clang in /usr/lib/llvm-21/bin.
    fn debian() -> Toolchain {
        Toolchain {
            rocm: RocmParts {
                rocm_path: "/usr".into(),
                rocm_found: "from `/usr/bin/hipconfig --rocmpath`".into(),
                rocm_version: RocmVersion {
                    version: "6.4.0".into(),
                    source: VersionSource::HipVersionHeader {
                        hip: "6.4.43484".into(),
                    },
                },
                hipcc: "/usr/bin/hipcc".into(),
                hipcc_found: "in the ROCm folder".into(),
                llvm: LlvmTools::FromHipconfig {
                    dir: "/usr/lib/llvm-21/bin".into(),
                    hipconfig: "/usr/bin/hipconfig".into(),
                    why: "/usr has no llvm/bin".into(),
                },
            },
            cmake: "/usr/bin/cmake".into(),
            generator: Generator::Ninja,
            environment: vec![],
        }
    }

    fn plan_with(
        targets: &str,
        toolchain: &Toolchain,
        source: Source,
        cmake_args: &[&str],
    ) -> (Plan, String) {
        let pin = pin();
        let targets = TargetId::parse_list(targets).unwrap();
        let cmake_args: Vec<CmakeDefine> = cmake_args
            .iter()
            .map(|a| CmakeDefine::parse(a).unwrap())
            .collect();
        let out = Path::new("/work/target/rocshmem");
        let plan = Plan::new(&PlanInputs {
            pin: &pin,
            targets: &targets,
            toolchain,
            source,
            out_dir: out,
            jobs: 8,
            cmake_args: &cmake_args,
        });
        let fetch = source::fetch_commands(
            Path::new("/usr/bin/git"),
            &pin,
            &source::partial_dir(&plan.checkout),
        );
        let text = plan.render(&pin, &fetch);
        (plan, text)
    }

    fn plan(targets: &str, version_file: bool, source: Source) -> (Plan, String) {
        plan_with(targets, &amd(version_file), source, &[])
    }

    fn mismatch(head: &str, changes: Option<&str>) -> Source {
        Source::Local {
            root: "/src/rocm-systems".into(),
            mismatch: Some(Mismatch {
                head: head.into(),
                version: "3.5.0".into(),
                changes: changes.map(Into::into),
            }),
        }
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
    fn plan_for_debian_rocm_in_usr() {
        insta::assert_snapshot!(plan_with("gfx942", &debian(), Source::Fetch, &[]).1);
    }

    #[test]
    fn plan_for_an_accepted_checkout_with_local_changes_and_cmake_args() {
        let source = mismatch(
            "1111111111111111111111111111111111111111",
            Some("0123abcd0123abcd"),
        );
        let args = [
            "-DUSE_THREADS=ON",
            "-DCMAKE_BUILD_TYPE:STRING=RelWithDebInfo",
        ];
        insta::assert_snapshot!(plan_with("gfx942", &amd(true), source, &args).1);
    }

    /// rocSHMEM 3.4 links MPI and looks for amd_smi when the machine has them: both are
    /// pinned off, so the install depends on the inputs only.
    #[test]
    fn machine_dependent_lookups_are_pinned_off() {
        for toolchain in [amd(true), debian()] {
            let defines = plan_with("gfx942", &toolchain, Source::Fetch, &[])
                .0
                .defines;
            for (k, v) in [
                ("USE_EXTERNAL_MPI", "OFF"),
                ("CMAKE_DISABLE_FIND_PACKAGE_amd_smi", "ON"),
            ] {
                assert!(
                    defines.contains(&(k.into(), v.into())),
                    "{k}={v} missing: {defines:?}"
                );
            }
        }
    }

    /// Without ${ROCM_PATH}/llvm/bin, rocSHMEM would skip the device bitcode: the tools from
    /// `hipconfig --hipclangpath` are passed (and hashed); with it, nothing is passed.
    #[test]
    fn llvm_tools_are_passed_only_when_rocm_lacks_llvm_bin() {
        let (debian_plan, text) = plan_with("gfx942", &debian(), Source::Fetch, &[]);
        for (k, v) in [
            ("LLVM_CLANG", "/usr/lib/llvm-21/bin/clang++"),
            ("LLVM_LINK", "/usr/lib/llvm-21/bin/llvm-link"),
            ("LLVM_OPT", "/usr/lib/llvm-21/bin/opt"),
            ("EXPLICIT_ROCM_VERSION", "6.4.0"),
        ] {
            assert!(
                debian_plan.defines.contains(&(k.into(), v.into())),
                "{k}={v}: {text}"
            );
        }
        assert!(
            text.contains("rocm    /usr (from `/usr/bin/hipconfig --rocmpath`)"),
            "{text}"
        );
        let amd_plan = plan("gfx942", true, Source::Fetch).0;
        assert!(
            !amd_plan.defines.iter().any(|(k, _)| k.starts_with("LLVM_")),
            "{:?}",
            amd_plan.defines
        );
        // Another clang folder is another build.
        let mut other = debian();
        if let LlvmTools::FromHipconfig { dir, .. } = &mut other.rocm.llvm {
            *dir = "/usr/lib/llvm-20/bin".into();
        }
        assert_ne!(
            debian_plan.hash,
            plan_with("gfx942", &other, Source::Fetch, &[]).0.hash
        );
        // So is another HIP release of the same ROCm series.
        let mut newer = debian();
        newer.rocm.rocm_version.source = VersionSource::HipVersionHeader {
            hip: "6.4.43485".into(),
        };
        assert_ne!(
            debian_plan.hash,
            plan_with("gfx942", &newer, Source::Fetch, &[]).0.hash
        );
    }

    /// What CMake reads from the environment at first configure (HIPFLAGS, CXX, ...) is part
    /// of the hash: a kept tree or an install made with other flags is another build.
    #[test]
    fn configure_environment_is_part_of_the_hash() {
        let (plain, _) = plan_with("gfx942", &amd(true), Source::Fetch, &[]);
        let mut flagged = amd(true);
        flagged.environment = crate::cmake::configure_environment(|name| {
            (name == "HIPFLAGS").then(|| "-g".to_string())
        });
        assert_eq!(flagged.environment, [("env.HIPFLAGS".into(), "-g".into())]);
        let (with_flags, _) = plan_with("gfx942", &flagged, Source::Fetch, &[]);
        assert_ne!(plain.hash, with_flags.hash);
        assert_ne!(plain.build_dir, with_flags.build_dir);
        assert!(
            with_flags.stamp().contains("\"env.HIPFLAGS\" = \"-g\""),
            "{}",
            with_flags.stamp()
        );
        // Set but empty is unset, as CMake reads it.
        assert!(crate::cmake::configure_environment(|_| Some(String::new())).is_empty());
    }

    /// An accepted mismatching checkout is named after what is built: its HEAD, its version,
    /// and "+ local changes" only when it has some.
    #[test]
    fn a_mismatching_checkout_is_named_after_what_is_built() {
        let head = "1111111111111111111111111111111111111111";
        let (clean, text) = plan_with("gfx942", &amd(true), mismatch(head, None), &[]);
        let name = clean
            .prefix
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(
            name.starts_with("rocshmem-3.5.0-111111111111-gfx942-"),
            "{name}"
        );
        assert!(
            !name.contains("006ac1aaa8bf") && !name.contains("+local"),
            "{name}"
        );
        let first = text.lines().next().unwrap();
        assert_eq!(
            first,
            format!("rocSHMEM 3.5.0 at {head} (not the pin {})", pin().commit)
        );
        assert!(!text.contains("changes"), "{text}");
        let stamp = clean.stamp();
        assert!(
            stamp.contains(&format!("commit = \"{head}\""))
                && stamp.contains(&format!("pinned_commit = \"{}\"", pin().commit))
                && !stamp.contains("local_changes"),
            "{stamp}"
        );

        let (changed, text) = plan_with(
            "gfx942",
            &amd(true),
            mismatch(head, Some("0123abcd0123abcd")),
            &[],
        );
        let name = changed
            .prefix
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(
            name.starts_with("rocshmem-3.5.0-111111111111+local-gfx942-"),
            "{name}"
        );
        assert!(text.contains("+ local changes 0123abcd0123abcd"), "{text}");
        assert!(
            changed
                .stamp()
                .contains("local_changes = \"0123abcd0123abcd\"")
        );
        assert_ne!(clean.prefix, changed.prefix);
    }

    #[test]
    fn cmake_args_override_join_the_hash_and_the_stamp() {
        let base = plan("gfx942", true, Source::Fetch).0;
        let (with, text) = plan_with(
            "gfx942",
            &amd(true),
            Source::Fetch,
            &["-DUSE_THREADS=ON", "-DUSE_EXTERNAL_MPI=ON"],
        );
        assert_ne!(base.hash, with.hash);
        assert!(
            with.configure.contains(&"-DUSE_THREADS=ON".to_string()),
            "{text}"
        );
        // The user's value replaces the plan's own, never both on one command line.
        let mpi: Vec<_> = with
            .defines
            .iter()
            .filter(|(k, _)| k == "USE_EXTERNAL_MPI")
            .collect();
        assert_eq!(mpi, [&("USE_EXTERNAL_MPI".to_string(), "ON".to_string())]);
        let stamp = with.stamp();
        assert!(
            stamp.contains("cmake_args = \"-DUSE_THREADS=ON -DUSE_EXTERNAL_MPI=ON\"")
                && stamp.contains("\"define.USE_THREADS\" = \"ON\""),
            "{stamp}"
        );
    }

    /// `--cmake-arg` as the command line takes it: repeatable, -D form only, with the fix.
    #[test]
    fn cmake_arg_flag_is_validated() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let parse = |extra: &[&str]| {
            Cli::try_parse_from(["xtask", "--arch", "gfx942"].iter().chain(extra))
                .map(|c| c.args)
                .map_err(|e| e.to_string())
        };
        let args = parse(&[
            "--cmake-arg",
            "-DUSE_THREADS=ON",
            "--cmake-arg=-DNAME:BOOL=",
        ])
        .unwrap();
        assert_eq!(
            args.cmake_args
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["-DUSE_THREADS=ON", "-DNAME:BOOL="]
        );
        for (bad, says) in [
            ("USE_THREADS=ON", "not a -DNAME=VALUE define"),
            ("-DUSE_THREADS", "has no `=VALUE`"),
            ("-D=ON", "not a CMake variable name"),
            ("-DA B=1", "not a CMake variable name"),
            ("-DX:bool=1", "not a CMake variable name"),
            ("-DGPU_TARGETS=gfx90a", "use --arch"),
            ("-DROCM_PATH=/usr", "use --rocm-path"),
            ("-DUSE_IPC=OFF", "symmem needs the IPC backend"),
            ("-DCMAKE_INSTALL_PREFIX=/x", "--out-dir"),
        ] {
            let e = parse(&["--cmake-arg", bad]).unwrap_err();
            assert!(e.contains(says) && e.contains(bad), "{bad}: {e}");
        }
        let twice = [
            CmakeDefine::parse("-DA=1").unwrap(),
            CmakeDefine::parse("-DA:BOOL=2").unwrap(),
        ];
        let e = CmakeDefine::check_unique(&twice).unwrap_err().to_string();
        assert!(e.contains("sets A twice"), "{e}");
        assert!(parse(&["--clean-stale", "--print-prefix"]).is_err());
        assert!(parse(&["--clean-stale", "--dry-run"]).unwrap().clean_stale);
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
        assert_ne!(
            base.prefix,
            plan("gfx942", true, mismatch(&pin().commit, Some("1234")))
                .0
                .prefix
        );
        assert_ne!(
            base.prefix,
            plan_with("gfx942", &amd(true), Source::Fetch, &["-DUSE_THREADS=ON"])
                .0
                .prefix
        );
        // The same pin from a local checkout builds the same thing, wherever hipcc was found.
        let local = Source::Local {
            root: "/src".into(),
            mismatch: None,
        };
        assert_eq!(base.prefix, plan("gfx942", true, local).0.prefix);
        let mut elsewhere = amd(true);
        elsewhere.rocm.rocm_found = "the default".into();
        elsewhere.rocm.hipcc_found = "on PATH".into();
        assert_eq!(
            base.prefix,
            plan_with("gfx942", &elsewhere, Source::Fetch, &[]).0.prefix
        );
        // The stamp round-trips its hash.
        assert_eq!(
            Plan::stamped_hash(&base.stamp()).as_deref(),
            Some(base.hash.as_str())
        );
    }
}

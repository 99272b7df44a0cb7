//! `cargo xtask test` and `cargo xtask bench`: `symmem-matrix test|bench` (the product,
//! crates/symmem-matrix) from a checkout. Each declares only the flags it acts on itself
//! (clap), builds symmem-matrix and the program it runs, adds what only a checkout knows (the
//! shim `cargo xtask build-shim` built, target/bench/) and becomes `symmem-matrix` with every
//! other argument passed on untouched, so its output and exit code are the matrix's own.
//! `test --container` runs `symmem-matrix test` inside the image instead.
//!
//! Clap hands every argument from the first one it does not know (or after `--`) to the
//! trailing list: the xtask's flags come first. One of them among the passed-on arguments is
//! refused where the xtask would have acted on it ([`Misplaced`]).

use crate::container::{self, Request};
use crate::images::engine::Engine;
use crate::images::model::Base;
use crate::project::{self, Binary, MATRIX, RANK, target_dir};
use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::process::ExitCode;
use symmem::ProviderKind;
use symmem::settings::SHIM_LIB;

const BENCH: Binary = Binary {
    package: "symmem-gpu",
    bin: "symmem-gpu-bench",
};

/// The conformance matrix from this checkout: builds and runs `symmem-matrix test`.
///
/// Builds symmem-matrix and the rank binary (symmem-conformance), then runs `symmem-matrix
/// test` with the flags below that it passes on and every other argument untouched, so its
/// output and exit code are the matrix's own.
///
/// Only the flags below are the xtask's, and they come first. From the first argument it does
/// not know (e.g. --ranks), or after `--`, every argument is symmem-matrix test's, passed on as
/// written: `symmem-matrix test --help` (or `cargo xtask test -- --help`) lists them and the
/// exit codes.
///
/// Examples:
///   cargo xtask test --ranks 8
///   cargo xtask test --provider nvshmem --ranks 1,2   # the shim `cargo xtask build-shim` built
///   cargo xtask test --container docker --image-base debian --provider host --ranks 1,2
///   cargo xtask test -- --container apptainer symmem.sif --launcher srun -N 2 --ranks 2
///       (symmem-matrix test's own --container ENGINE IMAGE: a container per rank)
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct TestArgs {
    /// Run `symmem-matrix test` inside this checkout's image (`cargo xtask images tag`),
    /// pulled when missing, with the ROCm devices for a GPU provider. This is not
    /// symmem-matrix test's `--container ENGINE IMAGE` (a container per rank): give that one
    /// after `--` or after another of its arguments.
    #[arg(long, value_enum, value_name = "ENGINE")]
    container: Option<Engine>,
    /// The image --container runs [default: amd].
    #[arg(long, value_enum, value_name = "BASE", requires = "container")]
    image_base: Option<Base>,
    /// Where --container pulls a missing image from (default: SYMMEM_IMAGE_REGISTRY, else
    /// pins.toml's).
    #[arg(long, value_name = "REGISTRY", requires = "container")]
    registry: Option<String>,
    /// Provider under test, passed on as symmem-matrix test's --provider. For nvshmem or
    /// rocshmem the xtask hands over the shim `cargo xtask build-shim` built as
    /// SYMMEM_SHIM_LIB, unless that is set or --shim-lib given (symmem-matrix test's own
    /// --container passes it into the ranks' containers: there, give --provider after `--`);
    /// with --container it picks the GPU devices [default: host; with --container, the
    /// image's].
    #[arg(long, value_enum)]
    provider: Option<ProviderKind>,
    /// symmem-matrix test's --shim-lib, passed on; with --container, mounted into the
    /// container.
    #[arg(long, value_name = "PATH")]
    shim_lib: Option<PathBuf>,
    /// symmem-matrix test's --rank-binary, passed on (symmem-conformance is then not built);
    /// with --container, mounted into the container.
    #[arg(long, value_name = "PATH")]
    rank_binary: Option<PathBuf>,
    /// symmem-matrix test's arguments (`symmem-matrix test --help`), passed on untouched and
    /// in order: every argument from the first one not listed here, or after `--`.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "MATRIX_ARGS"
    )]
    matrix: Vec<String>,
}

/// The xtask's flags that are also symmem-matrix test's, with the same meaning: among the
/// passed-on arguments they still reach it as written, except with --container, where the
/// xtask must see them to mount their files or pick the devices.
const TEST_FLAGS_THE_MATRIX_SHARES: [&str; 3] = ["provider", "shim-lib", "rank-binary"];

/// The GPU bench from this checkout: builds and runs `symmem-matrix bench`.
///
/// Builds symmem-matrix and symmem-gpu-bench, then runs `symmem-matrix bench` with the flags
/// below that it passes on and every other argument untouched.
///
/// Only the flags below are the xtask's, and they come first. From the first argument it does
/// not know (e.g. --ranks), or after `--`, every argument is symmem-matrix bench's, passed on
/// as written: `symmem-matrix bench --help` (or `cargo xtask bench -- --help`) lists them.
///
/// Example:
///   cargo xtask bench --provider nvshmem              # figures in target/bench/nvshmem.jsonl
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct BenchArgs {
    /// GPU provider to measure, passed on as symmem-matrix bench's --provider. The xtask hands
    /// over the shim `cargo xtask build-shim` built (as SYMMEM_SHIM_LIB, unless that is set)
    /// and chooses --out.
    #[arg(long, value_enum)]
    provider: Option<ProviderKind>,
    /// symmem-matrix bench's --out, passed on [default with --provider:
    /// target/bench/<provider>.jsonl].
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// symmem-matrix bench's --bench-binary, passed on (symmem-gpu-bench is then not built).
    #[arg(long, value_name = "PATH")]
    bench_binary: Option<PathBuf>,
    /// symmem-matrix bench's arguments (`symmem-matrix bench --help`), passed on untouched and
    /// in order: every argument from the first one not listed here, or after `--`.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "MATRIX_ARGS"
    )]
    matrix: Vec<String>,
}

/// A flag of the xtask's own among the arguments it passes on to symmem-matrix: written after
/// the first argument the xtask does not know (or after `--`), where clap hands everything to
/// symmem-matrix, so the xtask never saw it. A usage error (exit code 2).
#[derive(Debug, PartialEq, Eq)]
pub struct Misplaced {
    /// `test` or `bench`.
    pub command: &'static str,
    /// The flag as written, e.g. `--registry` or `--out=x.jsonl`.
    pub flag: String,
    /// The first passed-on argument, which it follows; `None`: it follows `--`.
    pub after: Option<String>,
}

impl fmt::Display for Misplaced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Misplaced {
            command,
            flag,
            after,
        } = self;
        let name = flag.split_once('=').map_or(flag.as_str(), |(name, _)| name);
        let after = match after {
            Some(first) => format!("after `{first}`"),
            None => "after `--`".to_string(),
        };
        write!(
            f,
            "{name} is `cargo xtask {command}`'s own flag, but it comes {after}, from where every \
             argument goes to `symmem-matrix {command}` untouched: give {name} before \
             symmem-matrix {command}'s arguments (`cargo xtask {command} --help` lists the \
             xtask's flags)"
        )
    }
}

impl std::error::Error for Misplaced {}

/// The first of `refused` (long flag names, as clap declares them) among `passed_on`.
fn find_misplaced(
    command: &'static str,
    passed_on: &[String],
    refused: impl Fn(&str) -> bool,
) -> Result<(), Misplaced> {
    let misplaced = passed_on.iter().enumerate().find(|(_, arg)| {
        arg.strip_prefix("--")
            .map(|name| name.split_once('=').map_or(name, |(name, _)| name))
            .is_some_and(|name| !name.is_empty() && refused(name))
    });
    match misplaced {
        None => Ok(()),
        Some((at, flag)) => Err(Misplaced {
            command,
            flag: flag.clone(),
            after: (at > 0).then(|| passed_on[0].clone()),
        }),
    }
}

/// The long names of `A`'s flags, from its clap declaration.
fn long_flags<A: clap::Args>() -> Vec<String> {
    A::augment_args(clap::Command::default())
        .get_arguments()
        .filter_map(|arg| arg.get_long().map(str::to_string))
        .collect()
}

/// What `cargo xtask test|bench` becomes: `symmem-matrix ARGV` with ENV added to its
/// environment, once BINARIES (symmem-matrix first) are built.
#[derive(Debug)]
struct MatrixRun {
    binaries: Vec<Binary>,
    argv: Vec<OsString>,
    env: Vec<(&'static str, PathBuf)>,
}

impl MatrixRun {
    /// `symmem-matrix SUBCOMMAND`, building it and `program` unless a path to one is given.
    fn new(subcommand: &str, program: Binary, given: Option<&PathBuf>) -> Self {
        let mut binaries = vec![MATRIX];
        if given.is_none() {
            binaries.push(program);
        }
        MatrixRun {
            binaries,
            argv: vec![subcommand.into()],
            env: Vec::new(),
        }
    }

    /// Passes `--FLAG VALUE` on when there is a value.
    fn flag(mut self, flag: &str, value: Option<impl Into<OsString>>) -> Self {
        if let Some(value) = value {
            self.argv.extend([flag.into(), value.into()]);
        }
        self
    }

    /// Hands a GPU provider's shim, as `cargo xtask build-shim` built it, to symmem-matrix as
    /// SYMMEM_SHIM_LIB, unless `--shim-lib` was given to the xtask or the variable is already
    /// `set`. An environment variable, not `--shim-lib`: symmem-matrix reads a `--shim-lib`
    /// among the passed-on arguments before it, so one given there wins instead of clashing.
    fn shim(mut self, provider: Option<ProviderKind>, given: bool, set: Option<PathBuf>) -> Self {
        let built = provider
            .filter(|p| p.is_gpu() && !given && set.is_none())
            .and_then(project::built_shim);
        self.env.extend(built.map(|shim| (SHIM_LIB.name, shim)));
        self
    }

    /// The passed-on arguments, last and untouched.
    fn rest(mut self, passed_on: Vec<String>) -> Self {
        self.argv.extend(passed_on.into_iter().map(OsString::from));
        self
    }

    /// Builds the binaries and becomes symmem-matrix; returns only why it could not.
    fn exec(self, sh: &xshell::Shell) -> anyhow::Result<ExitCode> {
        let names: Vec<&str> = self.binaries.iter().map(|b| b.bin).collect();
        eprintln!("building {} ...", names.join(" and "));
        let built = project::build_binaries(sh, &self.binaries)?;
        Err(project::exec(&built[0], &self.argv, &self.env))
    }
}

impl TestArgs {
    /// Refuses a flag of the xtask's among the passed-on arguments where the xtask acts on it:
    /// always `--image-base` and `--registry` (symmem-matrix has neither), with --container
    /// also the flags it shares. `--container` itself there is symmem-matrix test's.
    fn check_placement(&self) -> Result<(), Misplaced> {
        let (owned, in_image) = (long_flags::<Self>(), self.container.is_some());
        find_misplaced("test", &self.matrix, |name| {
            name != "container"
                && owned.iter().any(|f| f == name)
                && (in_image || !TEST_FLAGS_THE_MATRIX_SHARES.contains(&name))
        })
    }

    /// `symmem-matrix test` on this machine, given SYMMEM_SHIM_LIB's value `shim_set`.
    fn matrix_run(self, shim_set: Option<PathBuf>) -> MatrixRun {
        MatrixRun::new("test", RANK, self.rank_binary.as_ref())
            .shim(self.provider, self.shim_lib.is_some(), shim_set)
            .flag("--provider", self.provider.map(ProviderKind::name))
            .flag("--shim-lib", self.shim_lib)
            .flag("--rank-binary", self.rank_binary)
            .rest(self.matrix)
    }
}

impl BenchArgs {
    /// Refuses any flag of the xtask's among the passed-on arguments: it acts on each.
    fn check_placement(&self) -> Result<(), Misplaced> {
        let owned = long_flags::<Self>();
        find_misplaced("bench", &self.matrix, |name| {
            owned.iter().any(|f| f == name)
        })
    }

    /// `symmem-matrix bench`, given SYMMEM_SHIM_LIB's value `shim_set`; figures go to
    /// target/bench/ unless --out says otherwise.
    fn matrix_run(self, shim_set: Option<PathBuf>) -> MatrixRun {
        let out = self.out.or_else(|| {
            self.provider.map(|p| {
                target_dir()
                    .join("bench")
                    .join(format!("{}.jsonl", p.name()))
            })
        });
        MatrixRun::new("bench", BENCH, self.bench_binary.as_ref())
            .shim(self.provider, false, shim_set)
            .flag("--provider", self.provider.map(ProviderKind::name))
            .flag("--out", out)
            .flag("--bench-binary", self.bench_binary)
            .rest(self.matrix)
    }
}

pub fn test(sh: &xshell::Shell, args: TestArgs) -> anyhow::Result<ExitCode> {
    args.check_placement()?;
    let Some(engine) = args.container else {
        return args.matrix_run(SHIM_LIB.read_path()).exec(sh);
    };
    match args.provider {
        Some(ProviderKind::Nvshmem) => anyhow::bail!(
            "--container runs the ROCm images, which have no NVSHMEM: drop --provider"
        ),
        Some(ProviderKind::Host | ProviderKind::Rocshmem) | None => {}
    }
    let request = Request {
        provider: args.provider,
        shim_lib: args.shim_lib,
        rank_binary: args.rank_binary,
        registry: args.registry,
        rest: args.matrix,
    };
    container::run(sh, engine, args.image_base.unwrap_or(Base::Amd), &request)
}

pub fn bench(sh: &xshell::Shell, args: BenchArgs) -> anyhow::Result<ExitCode> {
    args.check_placement()?;
    args.matrix_run(SHIM_LIB.read_path()).exec(sh)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    /// `cargo xtask ARGS` as main parses it.
    fn parse(args: &str) -> Result<crate::Command, clap::Error> {
        let argv = ["cargo xtask"].into_iter().chain(args.split_whitespace());
        crate::Cli::try_parse_from(argv).map(|cli| cli.command)
    }

    fn test_args(args: &str) -> TestArgs {
        match parse(&format!("test {args}")) {
            Ok(crate::Command::Test(args)) => args,
            Ok(_) => unreachable!("`test` parses as another subcommand"),
            Err(e) => panic!("`cargo xtask test {args}`: {e}"),
        }
    }

    fn bench_args(args: &str) -> BenchArgs {
        match parse(&format!("bench {args}")) {
            Ok(crate::Command::Bench(args)) => args,
            Ok(_) => unreachable!("`bench` parses as another subcommand"),
            Err(e) => panic!("`cargo xtask bench {args}`: {e}"),
        }
    }

    /// The argv symmem-matrix gets, as one string.
    fn argv(run: &MatrixRun) -> String {
        let words: Vec<_> = run.argv.iter().map(|a| a.to_str().unwrap()).collect();
        words.join(" ")
    }

    fn built(run: &MatrixRun) -> Vec<&str> {
        run.binaries.iter().map(|b| b.bin).collect()
    }

    #[test]
    fn the_readme_command_passes_its_arguments_on_untouched() {
        let run = test_args("--ranks 8").matrix_run(None);
        assert_eq!(argv(&run), "test --ranks 8");
        assert_eq!(built(&run), ["symmem-matrix", "symmem-conformance"]);
        assert!(run.env.is_empty(), "{:?}", run.env);
    }

    #[test]
    fn passed_on_flags_keep_their_order_values_and_spelling() {
        // Short flags, `=` values, a launcher's own `--` and values that look like flags: all
        // symmem-matrix test's, none read here.
        let line = "--nodes 2 --launcher srun -N 2 --ranks=2,n4 --check 7 --check 10b \
                    --kill-test --timeout 90s -- --partition gpu --provider x";
        let args = test_args(line);
        assert_eq!(args.provider, None);
        args.check_placement().unwrap();
        let run = args.matrix_run(None);
        assert_eq!(
            argv(&run),
            format!(
                "test {}",
                line.split_whitespace().collect::<Vec<_>>().join(" ")
            )
        );
        // A short flag first is passed on too.
        let run = test_args("-N 2 --launcher srun --ranks 2").matrix_run(None);
        assert_eq!(argv(&run), "test -N 2 --launcher srun --ranks 2");
    }

    #[test]
    fn the_xtasks_flags_are_parsed_and_passed_on_before_the_rest() {
        let args = test_args("--provider rocshmem --rank-binary /r --ranks 1 --grace 0");
        assert_eq!(args.provider, Some(ProviderKind::Rocshmem));
        assert_eq!(args.rank_binary, Some(PathBuf::from("/r")));
        assert_eq!(args.matrix, ["--ranks", "1", "--grace", "0"]);
        let run = args.matrix_run(None);
        assert_eq!(
            argv(&run),
            "test --provider rocshmem --rank-binary /r --ranks 1 --grace 0"
        );
        // A given rank binary is not built.
        assert_eq!(built(&run), ["symmem-matrix"]);
        // The built shim goes over as SYMMEM_SHIM_LIB, not as a flag.
        let shim = project::built_shim(ProviderKind::Rocshmem).unwrap();
        assert_eq!(run.env, [(SHIM_LIB.name, shim)]);
    }

    #[test]
    fn the_built_shim_is_handed_over_only_when_nothing_else_names_one() {
        let given = test_args("--provider nvshmem --shim-lib /s.so --ranks 1").matrix_run(None);
        assert_eq!(
            argv(&given),
            "test --provider nvshmem --shim-lib /s.so --ranks 1"
        );
        assert!(given.env.is_empty());
        let set = test_args("--provider nvshmem").matrix_run(Some("/env.so".into()));
        assert!(set.env.is_empty());
        let host = test_args("--provider host --ranks 2").matrix_run(None);
        assert!(host.env.is_empty());
        // A --shim-lib among symmem-matrix's arguments wins over the variable there.
        let late = test_args("--provider nvshmem --ranks 1 --shim-lib /s.so").matrix_run(None);
        assert_eq!(
            argv(&late),
            "test --provider nvshmem --ranks 1 --shim-lib /s.so"
        );
        assert_eq!(late.env.len(), 1);
    }

    #[test]
    fn every_documented_command_line_parses_as_before() {
        // README, .ci/, .github/workflows/, flake.nix, scripts/ and containers/ write these.
        for line in ["--ranks 1,2,4,8", "--provider nvshmem --ranks 1"] {
            assert_eq!(
                argv(&test_args(line).matrix_run(None)),
                format!("test {line}")
            );
        }
        let container = test_args("--container docker --image-base debian --provider host");
        assert_eq!(container.container, Some(Engine::Docker));
        assert_eq!(container.image_base, Some(Base::Debian));
        assert_eq!(container.provider, Some(ProviderKind::Host));
        assert!(container.matrix.is_empty());
        let registry = test_args(
            "--container podman --image-base debian --provider host --registry r:5000/p --ranks 1",
        );
        assert_eq!(registry.registry.as_deref(), Some("r:5000/p"));
        assert_eq!(registry.matrix, ["--ranks", "1"]);
        registry.check_placement().unwrap();
        // The shim after --ranks (scripts/gpu/stub-matrix.sh) and --provider after --nodes
        // (README) reach symmem-matrix test as written, which reads them as the xtask would
        // pass them.
        for line in [
            "--provider nvshmem --ranks 1,2 --shim-lib /s.so --timeout 120s",
            "--nodes 2 --provider nvshmem --shim-lib /s.so --ranks 2",
        ] {
            let args = test_args(line);
            args.check_placement().unwrap();
            assert_eq!(argv(&args.matrix_run(None)), format!("test {line}"));
        }
    }

    #[test]
    fn the_xtasks_flags_after_the_matrixs_arguments_are_refused_where_it_acts_on_them() {
        let e = test_args("--container docker --ranks 1 --registry r")
            .check_placement()
            .unwrap_err();
        assert_eq!(
            e,
            Misplaced {
                command: "test",
                flag: "--registry".into(),
                after: Some("--ranks".into())
            }
        );
        let message = e.to_string();
        assert!(
            message.contains(
                "--registry is `cargo xtask test`'s own flag, but it comes after `--ranks`"
            ) && message.contains("give --registry before symmem-matrix test's arguments"),
            "{message}"
        );
        let e = test_args("-- --image-base=debian")
            .check_placement()
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("--image-base is `cargo xtask test`'s own flag, but it comes after `--`"),
            "{e}"
        );
        // With --container the xtask mounts --shim-lib: it must see it.
        let e = test_args("--container docker --ranks 1 --shim-lib /s.so")
            .check_placement()
            .unwrap_err();
        assert_eq!(e.flag, "--shim-lib");
        // --container there is symmem-matrix test's (a container per rank).
        let product = test_args("-- --container apptainer a.sif --launcher srun");
        assert_eq!(product.container, None);
        product.check_placement().unwrap();
        assert_eq!(
            argv(&product.matrix_run(None)),
            "test --container apptainer a.sif --launcher srun"
        );
        let e = bench_args("--ranks 1 --provider nvshmem")
            .check_placement()
            .unwrap_err();
        assert_eq!((e.command, e.flag.as_str()), ("bench", "--provider"));
    }

    #[test]
    fn the_shared_flags_are_the_xtasks_own() {
        let flags = long_flags::<TestArgs>();
        for name in TEST_FLAGS_THE_MATRIX_SHARES {
            assert!(
                flags.iter().any(|f| f == name),
                "{name} is not in {flags:?}"
            );
        }
    }

    #[test]
    fn the_xtasks_flags_are_checked_by_clap() {
        let error = |line: &str| match parse(line) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("`cargo xtask {line}` parsed"),
        };
        let e = error("test --container lxc");
        assert!(
            e.contains("'lxc'") && e.contains("docker, podman, apptainer"),
            "{e}"
        );
        let e = error("test --provider cuda --ranks 1");
        assert!(e.contains("'cuda'") && e.contains("host"), "{e}");
        let e = error("test --image-base debian --ranks 1");
        assert!(e.contains("--container <ENGINE>"), "{e}");
        let e = error("test --container docker --container podman");
        assert!(e.contains("cannot be used multiple times"), "{e}");
    }

    #[test]
    fn bench_chooses_out_unless_given_and_passes_the_rest_on() {
        let run = bench_args("--provider nvshmem --ranks 1,2").matrix_run(None);
        let out = target_dir().join("bench/nvshmem.jsonl");
        assert_eq!(
            argv(&run),
            format!(
                "bench --provider nvshmem --out {} --ranks 1,2",
                out.display()
            )
        );
        assert_eq!(built(&run), ["symmem-matrix", "symmem-gpu-bench"]);
        assert_eq!(run.env.len(), 1);
        let run = bench_args("--provider nvshmem --out f.jsonl --bench-binary /b -- --shim-lib /s")
            .matrix_run(None);
        assert_eq!(
            argv(&run),
            "bench --provider nvshmem --out f.jsonl --bench-binary /b --shim-lib /s"
        );
        assert_eq!(built(&run), ["symmem-matrix"]);
    }

    #[test]
    fn help_says_what_the_xtask_adds_and_where_the_rest_is_described() {
        let mut cli = crate::Cli::command();
        let mut help = |subcommand| {
            let help = cli
                .find_subcommand_mut(subcommand)
                .unwrap()
                .render_long_help();
            // One line, so that no assertion depends on where clap wraps.
            help.to_string()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        };
        let test = help("test");
        for words in [
            "symmem-matrix test --help",
            "cargo xtask test -- --help",
            "--container <ENGINE>",
            "This is not symmem-matrix test's `--container ENGINE IMAGE` (a container per rank): \
             give that one after `--`",
            "[MATRIX_ARGS]...",
        ] {
            assert!(test.contains(words), "{words:?} not in:\n{test}");
        }
        let bench = help("bench");
        assert!(bench.contains("symmem-matrix bench --help"), "{bench}");
    }
}

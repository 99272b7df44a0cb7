//! `cargo xtask test` and `cargo xtask bench`: aliases of `symmem-matrix test|bench` (the
//! product, crates/symmem-matrix). Each builds symmem-matrix and the program it runs, adds
//! what only a checkout knows (the shim `cargo xtask build-shim` built, target/bench/), and
//! becomes `symmem-matrix` with the same arguments, so its output and exit code are the
//! matrix's own. `test --container` runs `symmem-matrix test` inside the image instead.

use crate::container::{self, Request};
use crate::images::model::{Base, Engine};
use crate::project::{self, Binary, MATRIX, RANK, target_dir};
use clap::ValueEnum;
use std::path::PathBuf;
use std::process::ExitCode;
use symmem::ProviderKind;
use symmem::settings::SHIM_LIB;

const BENCH: Binary = Binary {
    package: "symmem-gpu",
    bin: "symmem-gpu-bench",
};

/// The conformance matrix: builds symmem-matrix and the rank binary, then runs
/// `symmem-matrix test ARGS` (`cargo xtask test --help` shows its options and exit codes).
///
/// With `--container docker|podman|apptainer` (and `--image-base amd|debian`, default amd) it
/// runs `symmem-matrix test ARGS` inside the image for this checkout's tag (`cargo xtask images
/// tag`) instead, pulled when missing from `--registry REGISTRY` (default: SYMMEM_IMAGE_REGISTRY,
/// else pins.toml's), with the ROCm devices for GPU providers.
#[derive(clap::Args, Debug)]
#[command(disable_help_flag = true)]
pub struct TestArgs {
    /// The arguments of `symmem-matrix test`, and --container ENGINE, --image-base BASE,
    /// --registry REGISTRY.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    args: Vec<String>,
}

/// The GPU bench: builds symmem-matrix and symmem-gpu-bench, then runs `symmem-matrix bench
/// ARGS` (`cargo xtask bench --help` shows its options); figures go to target/bench/.
#[derive(clap::Args, Debug)]
#[command(disable_help_flag = true)]
pub struct BenchArgs {
    /// The arguments of `symmem-matrix bench`.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    args: Vec<String>,
}

/// Command-line arguments passed on, of which the alias reads or takes a few.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Passed(pub Vec<String>);

impl Passed {
    /// Where `--flag VALUE` or `--flag=VALUE` is: (index of the flag, its value).
    fn find(&self, flag: &str) -> Result<Option<(usize, usize, String)>, String> {
        let mut found = None;
        for (i, arg) in self.0.iter().enumerate() {
            let hit = if arg == flag {
                let value = self
                    .0
                    .get(i + 1)
                    .ok_or_else(|| format!("{flag} needs a value"))?;
                Some((i, 2, value.clone()))
            } else {
                arg.strip_prefix(flag)
                    .and_then(|rest| rest.strip_prefix('='))
                    .map(|value| (i, 1, value.to_string()))
            };
            if hit.is_some() {
                if found.is_some() {
                    return Err(format!("{flag} is given twice: give it once"));
                }
                found = hit;
            }
        }
        Ok(found)
    }

    /// The value of `flag`, left in place.
    pub fn value(&self, flag: &str) -> Result<Option<String>, String> {
        Ok(self.find(flag)?.map(|(_, _, value)| value))
    }

    /// The value of `flag`, taken out of the arguments.
    pub fn take(&mut self, flag: &str) -> Result<Option<String>, String> {
        let Some((at, len, value)) = self.find(flag)? else {
            return Ok(None);
        };
        self.0.drain(at..at + len);
        Ok(Some(value))
    }

    /// Whether `--help` or `-h` is among them.
    fn help(&self) -> bool {
        self.0.iter().any(|a| a == "--help" || a == "-h")
    }

    /// `--provider`, parsed, if given.
    pub fn provider(&self) -> Result<Option<ProviderKind>, String> {
        self.value("--provider")?
            .map(|name| {
                ProviderKind::from_name(&name).ok_or_else(|| {
                    format!(
                        "invalid value '{name}' for --provider: one of {}",
                        ProviderKind::choices()
                    )
                })
            })
            .transpose()
    }
}

/// A usage error of `cargo xtask SUBCOMMAND`: printed as clap prints its own, exit code 2.
fn usage(subcommand: &str, message: String) -> ! {
    use clap::CommandFactory;
    let mut cli = crate::Cli::command();
    cli.build();
    let mut command = cli.find_subcommand(subcommand).cloned().unwrap_or(cli);
    command
        .error(clap::error::ErrorKind::ValueValidation, message)
        .exit()
}

/// The value, or the error as a usage error of `cargo xtask SUBCOMMAND`.
fn or_usage<T>(subcommand: &str, result: Result<T, String>) -> T {
    result.unwrap_or_else(|message| usage(subcommand, message))
}

/// `value` of `flag` as one of `T`'s names; another is a usage error listing them.
fn value_enum<T: ValueEnum>(flag: &str, value: Option<String>) -> Result<Option<T>, String> {
    value
        .map(|v| {
            T::from_str(&v, false).map_err(|_| {
                let names: Vec<String> = T::value_variants()
                    .iter()
                    .filter_map(|t| t.to_possible_value().map(|p| p.get_name().to_string()))
                    .collect();
                format!(
                    "invalid value '{v}' for {flag}: one of {}",
                    names.join(", ")
                )
            })
        })
        .transpose()
}

pub fn test(sh: &xshell::Shell, args: TestArgs) -> anyhow::Result<ExitCode> {
    let mut args = Passed(args.args);
    let engine = args.take("--container");
    let engine: Option<Engine> =
        or_usage("test", engine.and_then(|v| value_enum("--container", v)));
    let base = args.take("--image-base");
    let base: Option<Base> = or_usage("test", base.and_then(|v| value_enum("--image-base", v)));
    let provider = or_usage("test", args.provider());
    let Some(engine) = engine else {
        if base.is_some() {
            usage(
                "test",
                "--image-base chooses the image of --container: add --container \
                 docker|apptainer, or drop it"
                    .into(),
            );
        }
        return exec_matrix(sh, "test", args, provider, &[MATRIX, RANK], "--rank-binary");
    };
    if provider == Some(ProviderKind::Nvshmem) {
        anyhow::bail!("--container runs the ROCm images, which have no NVSHMEM: drop --provider");
    }
    let mut take_path = |flag| or_usage("test", args.take(flag)).map(PathBuf::from);
    let shim_lib = take_path("--shim-lib");
    let rank_binary = take_path("--rank-binary");
    let registry = or_usage("test", args.take("--registry"));
    or_usage("test", args.take("--provider"));
    let request = Request {
        provider,
        shim_lib,
        rank_binary,
        registry,
        rest: args.0,
    };
    container::run(sh, engine, base.unwrap_or(Base::Amd), &request)
}

pub fn bench(sh: &xshell::Shell, args: BenchArgs) -> anyhow::Result<ExitCode> {
    let mut args = Passed(args.args);
    let provider = or_usage("bench", args.provider());
    if let Some(provider) = provider
        && or_usage("bench", args.value("--out")).is_none()
    {
        let out = target_dir()
            .join("bench")
            .join(format!("{}.jsonl", provider.name()));
        args.0.extend(["--out".into(), out.display().to_string()]);
    }
    exec_matrix(
        sh,
        "bench",
        args,
        provider,
        &[MATRIX, BENCH],
        "--bench-binary",
    )
}

/// Builds symmem-matrix and the program it runs (unless `program_flag` names one), passes
/// the shim `cargo xtask build-shim` built for a GPU provider when none is given, and becomes
/// `symmem-matrix SUBCOMMAND ARGS`.
fn exec_matrix(
    sh: &xshell::Shell,
    subcommand: &str,
    mut args: Passed,
    provider: Option<ProviderKind>,
    binaries: &[Binary],
    program_flag: &str,
) -> anyhow::Result<ExitCode> {
    let given = |flag| or_usage(subcommand, args.value(flag)).is_some();
    let binaries = if given(program_flag) {
        &binaries[..1]
    } else {
        binaries
    };
    let needs_shim = provider.is_some_and(ProviderKind::is_gpu)
        && !given("--shim-lib")
        && SHIM_LIB.read_path().is_none()
        && !args.help();
    if needs_shim && let Some(built) = provider.and_then(project::built_shim) {
        args.0
            .extend(["--shim-lib".into(), built.display().to_string()]);
    }
    let names: Vec<&str> = binaries.iter().map(|b| b.bin).collect();
    eprintln!("building {} ...", names.join(" and "));
    let built = project::build_binaries(sh, binaries)?;
    let mut argv = vec![subcommand.to_string()];
    argv.extend(args.0);
    Err(project::exec(&built[0], &argv))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passed(args: &str) -> Passed {
        Passed(args.split_whitespace().map(String::from).collect())
    }

    #[test]
    fn flags_are_read_in_both_spellings_and_taken_out() {
        let mut args = passed("--ranks 2 --container=docker --provider host --check 7");
        assert_eq!(args.take("--container").unwrap().as_deref(), Some("docker"));
        assert_eq!(args.provider().unwrap(), Some(ProviderKind::Host));
        assert_eq!(args.take("--provider").unwrap().as_deref(), Some("host"));
        assert_eq!(args, passed("--ranks 2 --check 7"));
        assert_eq!(args.take("--image-base").unwrap(), None);
        // Another flag that starts alike is not this one.
        assert_eq!(passed("--providers x").value("--provider").unwrap(), None);
    }

    #[test]
    fn a_flag_twice_or_without_value_and_a_bad_provider_are_refused() {
        assert!(
            passed("--shim-lib a --shim-lib=b")
                .value("--shim-lib")
                .unwrap_err()
                .contains("given twice")
        );
        assert!(
            passed("--ranks 2 --container")
                .take("--container")
                .unwrap_err()
                .contains("--container needs a value")
        );
        let e = passed("--provider cuda").provider().unwrap_err();
        assert!(e.contains("'cuda'") && e.contains("host"), "{e}");
        let e = value_enum::<Engine>("--container", Some("lxc".into())).unwrap_err();
        assert_eq!(
            e,
            "invalid value 'lxc' for --container: one of docker, podman, apptainer"
        );
        assert_eq!(
            value_enum::<Base>("--image-base", Some("debian".into())),
            Ok(Some(Base::Debian))
        );
    }
}

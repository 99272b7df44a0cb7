//! `symmem-run`: start N ranks of a program on this host, like a tiny
//! `torchrun --standalone`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use symmem::{count_ranks, format_duration, parse_duration, parse_timeout, settings};
use symmem_launch::{
    DEFAULT_GRACE, DEFAULT_TIMEOUT, EXIT_CODES, EXIT_USAGE, LaunchError, LaunchSpec, Started,
    exit_codes_help, launch_with, print_line,
};

/// `--help`'s sections before the exit codes.
fn help_before_exit_codes() -> String {
    let rendezvous = settings::RENDEZVOUS.name;
    let run_id = settings::RUN_ID.name;
    format!(
        "\
ENVIRONMENT OF EACH RANK
  RANK, LOCAL_RANK, ROLE_RANK                   0 .. N-1
  WORLD_SIZE, LOCAL_WORLD_SIZE, ROLE_WORLD_SIZE N
  GROUP_RANK=0, GROUP_WORLD_SIZE=1, ROLE_NAME=default,
  TORCHELASTIC_RESTART_COUNT=0, TORCHELASTIC_MAX_RESTARTS=0
  MASTER_ADDR=127.0.0.1
  MASTER_PORT        a TCP port that was free when the run started
  {rendezvous:<18} a fresh private (0700) directory, removed after the run
  {run_id:<18} a random id of the run: processes that carry it belong
                     to the run
  Stdin is /dev/null; each output line is printed as `[rank R] text` on the
  stream it was written to.

FAILURE POLICY (in full: ARCHITECTURE.md, \"Failure policy\")
  The first rank that fails, the timeout or Ctrl-C ends the run. A rank that
  stops because ANOTHER rank failed should exit with status 75, so that it
  is not taken for the culprit. After a failure the launcher waits 200 ms
  (at most the grace period), names the culprit, then sends the ranks'
  process group SIGTERM, and SIGKILL after the grace period (at once on a
  second Ctrl-C). Processes that left the group are found by
  {run_id}, by the output pipes they hold, or as orphans symmem-run adopted
  (it is a child subreaper); if symmem-run itself dies, a watchdog ends the run. A signal
  symmem-run inherited as ignored stays ignored by it; its ranks get each signal's
  default action (run in the background, they still stop). --grace 0 is allowed:
  SIGKILL follows SIGTERM at once, with no 200 ms wait."
    )
}

/// `--help`'s sections after the exit codes.
const HELP_AFTER_EXIT_CODES: &str = "\
CLUSTERS
  symmem-run starts ranks on this host only. On clusters, run the same
  program under torchrun, mpirun or srun instead: it only relies on the
  environment above.

DURATIONS
  90 or 90s (seconds), 500ms, 2m. --timeout must be above 0.";

fn after_help() -> String {
    format!(
        "{}\n\n{}\n\n{HELP_AFTER_EXIT_CODES}",
        help_before_exit_codes(),
        exit_codes_help(EXIT_CODES)
    )
}

/// Start N ranks of PROGRAM on this host, stream their output, and stop all of
/// them on the first failure, the timeout or Ctrl-C.
#[derive(Debug, Parser)]
#[command(name = "symmem-run", version, after_help = after_help())]
struct Cli {
    /// Number of ranks to start (1 to 256).
    #[arg(long, short = 'n')]
    ranks: usize,

    /// Stop all ranks when the run takes longer than this (above 0).
    #[arg(long, default_value = format_duration(DEFAULT_TIMEOUT), value_parser = parse_timeout)]
    timeout: Duration,

    /// Time between SIGTERM and SIGKILL when ranks are stopped (0: SIGKILL right away).
    #[arg(long, default_value = format_duration(DEFAULT_GRACE), value_parser = parse_duration)]
    grace: Duration,

    /// Print only the ranks' output and failures: no start line, no success summary.
    #[arg(long, short = 'q')]
    quiet: bool,

    /// The program every rank runs.
    #[arg(required = true)]
    program: PathBuf,

    /// Arguments for the program.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(err) => {
            say(format_args!("error: {err:#}"));
            // A spec the launcher refuses (e.g. `--ranks 0`) is bad usage, as clap's errors are.
            let usage = err
                .downcast_ref::<LaunchError>()
                .is_some_and(LaunchError::is_usage);
            ExitCode::from(if usage { EXIT_USAGE as u8 } else { 1 })
        }
    }
}

/// Prints `symmem-run: MESSAGE` on stderr. A write error (the reader of a pipe is gone, as
/// after `| head -1`) is ignored: the launcher's own output must not end the run or change
/// its status, and what cannot be read is lost either way.
fn say(message: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "symmem-run: {message}");
}

fn run(cli: &Cli) -> anyhow::Result<i32> {
    // SYMMEM_RENDEZVOUS in our own environment is deliberately not passed
    // on: a stale export would make every run share one directory.
    let spec = LaunchSpec::new(&cli.program, cli.ranks)
        .args(cli.args.iter().cloned())
        .timeout(cli.timeout)
        .grace(cli.grace);
    // Orphans of the ranks come to us instead of init, so that the launcher finds and ends
    // them even when they left the group, cleared their environment and closed their pipes.
    nix::sys::prctl::set_child_subreaper(true)
        .context("could not make symmem-run a child subreaper (PR_SET_CHILD_SUBREAPER)")?;
    let quiet = cli.quiet;
    let report = launch_with(&spec, &mut print_line, &mut |started: &Started<'_>| {
        if !quiet {
            let pids: Vec<String> = started.pids.iter().map(u32::to_string).collect();
            say(format_args!(
                "started {} ({} {}) in {} ms",
                count_ranks(started.pids.len()),
                if pids.len() == 1 { "pid" } else { "pids" },
                pids.join(", "),
                started.spawn_time.as_millis()
            ));
        }
    })
    .with_context(|| format!("could not run `{}`", cli.program.display()))?;
    if !quiet || !report.success() {
        say(format_args!("{report}"));
    }
    Ok(report.exit_code())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_parses_program_and_its_flags() {
        let cli = Cli::try_parse_from([
            "symmem-run",
            "--ranks",
            "4",
            "--timeout",
            "3s",
            "--",
            "/bin/sh",
            "-c",
            "echo --ranks",
        ])
        .expect("parses");
        assert_eq!(cli.ranks, 4);
        assert_eq!(cli.timeout, Duration::from_secs(3));
        assert_eq!(cli.program, PathBuf::from("/bin/sh"));
        assert_eq!(cli.args, ["-c", "echo --ranks"]);
        assert_eq!(cli.grace, DEFAULT_GRACE);
    }

    #[test]
    fn defaults_are_the_library_s() {
        let cli = Cli::try_parse_from(["symmem-run", "-n", "2", "true"]).expect("parses");
        assert_eq!((cli.timeout, cli.grace), (DEFAULT_TIMEOUT, DEFAULT_GRACE));
    }
}

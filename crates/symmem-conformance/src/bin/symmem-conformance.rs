//! One rank of the conformance suite. Start it under a launcher (`cargo xtask test`,
//! `symmem-run`, torchrun, mpirun, srun): it reads its rank from the environment, runs every
//! check (or those named by `--check`) against the chosen provider and prints one JSON line per
//! check on stdout.

use anyhow::Context as _;
use clap::Parser;
use std::ffi::OsStr;
use std::io::{IsTerminal, Write};
use std::sync::OnceLock;
use symmem::settings::PROVIDER;
use symmem::{Context, ProviderKind};
use symmem_conformance::{
    CHECKS, CheckInfo, Extras, HostExtras, SuiteOutcome, Unavailable, run_checks,
};
use symmem_gpu::{EnvironmentAccess, GpuConfig, GpuProvider, Siblings};
use symmem_host::{HostConfig, HostProvider};

/// Runs the symmem conformance checks as one rank of a job.
///
/// Results go to stdout as JSON lines, logs to stderr (RUST_LOG=debug for more; coloured only on
/// a terminal and without NO_COLOR). Exit status:
/// 0 when no check failed, 1 when one did, 75 when this rank stopped because another rank
/// failed (it is a witness, not the culprit), 2 when the suite could not start (a bad
/// command line included).
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Provider to test.
    #[arg(long, value_enum, ignore_case = true, default_value_t = PROVIDER.value, env = PROVIDER.name)]
    provider: ProviderKind,
    /// Run only this check (an id such as 7 or 10a; repeat it, or give a comma list). Every
    /// rank must be given the same checks. Without it, every check runs.
    #[arg(
        long = "check",
        value_name = "ID",
        value_delimiter = ',',
        value_parser = symmem_conformance::check
    )]
    checks: Vec<&'static CheckInfo>,
}

/// The command line, parsed once: [`run_with`] needs the chosen checks whatever the provider.
fn args() -> &'static Args {
    static ARGS: OnceLock<Args> = OnceLock::new();
    ARGS.get_or_init(Args::parse)
}

/// A GPU SHMEM library initialises once per process: further contexts are siblings of the
/// main one (`GpuProvider::siblings`), over the same library, each with its own control plane.
struct GpuExtras {
    siblings: Siblings,
    rank: usize,
}

impl Extras<GpuProvider> for GpuExtras {
    fn context_with_nodes(
        &mut self,
        label: &str,
        node_ids: &[u64],
    ) -> Result<Context<GpuProvider>, Unavailable> {
        self.siblings
            .open(label, node_ids[self.rank])
            .map(Context::new)
            .map_err(|e| Unavailable::opening("a sibling GPU context", &e))
    }
}

/// Whether logs on a stream get ANSI colours: only on a terminal (under a launcher stderr is a
/// pipe, and colour codes would end up in log files), and never with `NO_COLOR` set to anything
/// but the empty string (<https://no-color.org>).
fn colours(is_terminal: bool, no_color: Option<&OsStr>) -> bool {
    is_terminal && no_color.is_none_or(OsStr::is_empty)
}

fn main() -> std::process::ExitCode {
    let ansi = colours(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    match run() {
        Ok(outcome) if outcome.peer_failed => witness_exit(),
        Ok(outcome) if outcome.failed == 0 => std::process::ExitCode::SUCCESS,
        Ok(_) => std::process::ExitCode::from(1),
        // A provider that could not start because another rank did not (it never came, or
        // left): a witness, as a collective's failure is.
        Err(e) if witnessed(&e) => {
            eprintln!("symmem-conformance: {e:#}");
            witness_exit()
        }
        Err(e) => {
            eprintln!("symmem-conformance: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

/// How long a witness waits, its report written, before it exits: ranks that gave up at the
/// same moment (a PMIx fence's timeout, which names no rank) each write their report before
/// the launcher, seeing the first of them exit, ends the others. The launcher names the rank
/// that wrote none (issue 42, R1: a rank killed before its report was named beside the
/// stopped one).
const WITNESS_SETTLE: std::time::Duration = std::time::Duration::from_secs(1);

fn witness_exit() -> std::process::ExitCode {
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    std::thread::sleep(WITNESS_SETTLE);
    std::process::ExitCode::from(symmem::EXIT_PEER_FAILED as u8)
}

/// Whether `e` is a provider's failure to start that blames another rank.
fn witnessed(e: &anyhow::Error) -> bool {
    use symmem::{Blame, ProviderError};
    e.chain().any(|cause| {
        let blame = cause
            .downcast_ref::<symmem_host::HostError>()
            .map(ProviderError::blame)
            .or_else(|| {
                cause
                    .downcast_ref::<symmem_gpu::GpuError>()
                    .map(ProviderError::blame)
            });
        blame == Some(Blame::AnotherRank)
    })
}

fn run() -> anyhow::Result<SuiteOutcome> {
    let args = args();
    // A fault planned at start-up strikes before the provider starts (the launcher's
    // variables name the rank; without them there is no job to fault).
    if let Ok(identity) = symmem::RankIdentity::from_env() {
        symmem_conformance::at_start(identity.rank).map_err(anyhow::Error::msg)?;
    }
    match args.provider {
        ProviderKind::Host => {
            let config = HostConfig::from_env().context("configuring the host provider")?;
            let provider =
                HostProvider::new(config.clone()).context("starting the host provider")?;
            let mut extras = HostExtras { base: config };
            run_with(Context::new(provider), &mut extras)
        }
        kind @ (ProviderKind::Nvshmem | ProviderKind::Rocshmem) => {
            let config = GpuConfig::from_env(kind).context("configuring the GPU provider")?;
            // SAFETY: `run` is called from main before this process starts any other thread.
            let access = unsafe { EnvironmentAccess::promise() };
            let provider = GpuProvider::new(config, access).context("starting the GPU provider")?;
            let mut extras = GpuExtras {
                siblings: provider.siblings(),
                rank: symmem::SymmetricProvider::rank(&provider),
            };
            run_with(Context::new(provider), &mut extras)
        }
    }
}

fn run_with<P: symmem::TranslatedOps>(
    mut ctx: Context<P>,
    extras: &mut dyn Extras<P>,
) -> anyhow::Result<SuiteOutcome> {
    let stdout = std::io::stdout();
    let all: Vec<&CheckInfo> = CHECKS.iter().collect();
    let checks = match args().checks.as_slice() {
        [] => &all[..],
        chosen => chosen,
    };
    let outcome = run_checks(&mut ctx, extras, checks, &mut |result| {
        let mut out = stdout.lock();
        // A closed stdout only loses reports; the exit status still tells.
        let _ = writeln!(out, "{}", result.to_line());
        let _ = out.flush();
    })
    .map_err(anyhow::Error::msg)?;
    if outcome.failed == 0 {
        ctx.finalize().context("finalizing")?;
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_only_on_a_terminal_without_no_color() {
        assert!(colours(true, None));
        assert!(colours(true, Some(OsStr::new(""))));
        assert!(!colours(true, Some(OsStr::new("1"))));
        assert!(!colours(false, None));
        assert!(!colours(false, Some(OsStr::new(""))));
    }
}

//! `symmem-matrix test`: the conformance matrix, every check at every rank count.

use crate::programs::{RANK, shim_library};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use symmem::settings::SHIM_LIB;
use symmem::{ProviderKind, count_ranks, format_duration, parse_duration, parse_timeout};
use symmem_conformance::{Aggregate, CHECKS, CheckInfo, CheckResult, Status};
use symmem_launch::{
    DEFAULT_GRACE, DEFAULT_TIMEOUT, EXIT_INTERRUPTED, LaunchSpec, MAX_RANKS, Outcome, OutputLine,
    RunReport, Stream, exit_codes_help, launch, print_line,
};

/// The exit codes of `symmem-matrix test` (and so of `cargo xtask test`), as its `--help` lists
/// them; `cargo xtask codegen` writes README.md's table from this list.
pub const EXIT_CODES: &[(&str, &str)] = symmem::exit_codes::MATRIX;

/// `--help`'s sections after the exit codes.
const HELP_AFTER_EXIT_CODES: &str = "\
CONTAINERS
  From a checkout, `cargo xtask test --container docker|apptainer [--image-base
  amd|debian] ARGS` runs `symmem-matrix test ARGS` inside the image for the
  checkout's tag; the exit code is that of the run inside the image, or the
  engine's own when the engine fails.

DURATIONS
  90 or 90s (seconds), 500ms, 2m. --timeout must be above 0; --grace 0 sends
  SIGKILL right after SIGTERM.";

fn after_help() -> String {
    format!("{}\n\n{HELP_AFTER_EXIT_CODES}", exit_codes_help(EXIT_CODES))
}

/// Run the conformance suite at several rank counts and print a checks x ranks matrix.
///
/// Each rank count is one launch of the `symmem-conformance` rank binary under symmem's
/// launcher (all ranks on this host). Ranks' own output is shown prefixed with the rank.
/// The exit status is non-zero when any check fails or any run does not finish.
/// From a checkout, `cargo xtask test ARGS` builds both binaries and runs this with ARGS.
///
/// Examples:
///   symmem-matrix test --ranks 8
///   symmem-matrix test --ranks 1,2,4,8 --provider host
///   symmem-matrix test --ranks 2 --check 7,9     # only these checks (ids as in the matrix)
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment, after_help = after_help())]
pub struct TestArgs {
    /// Rank counts to run, comma-separated (each 1..=256).
    #[arg(long, default_value = "1,2,4,8", value_parser = parse_ranks)]
    ranks: RankList,
    /// Provider under test [default: host; in the images, the image's: rocshmem in the AMD
    /// image, host in the Debian one].
    #[arg(long, value_enum)]
    provider: Option<ProviderKind>,
    /// Give up on one run after this long and stop its ranks (e.g. 90s, 2m; above 0).
    #[arg(long, default_value = format_duration(DEFAULT_TIMEOUT), value_parser = parse_timeout)]
    timeout: Duration,
    /// After a failure, how long ranks get between SIGTERM and SIGKILL (0: SIGKILL right away).
    #[arg(long, default_value = format_duration(DEFAULT_GRACE), value_parser = parse_duration)]
    grace: Duration,
    /// The GPU shim library for --provider nvshmem|rocshmem (default: $SYMMEM_SHIM_LIB, else
    /// the one next to the rank binary; `cargo xtask test` passes what `cargo xtask build-shim`
    /// built under target/shim/).
    #[arg(long, value_name = "PATH")]
    shim_lib: Option<PathBuf>,
    /// The symmem-conformance rank binary to run (default: the one next to symmem-matrix, where
    /// `cargo build` and `cargo install` put it).
    #[arg(long, value_name = "PATH")]
    rank_binary: Option<PathBuf>,
    /// Run only these checks (ids as the matrix shows them: 1 .. 10b; repeat the flag or list
    /// them with commas). Each runs alone with the allocations it needs; default: every check.
    #[arg(long = "check", value_name = "ID", value_delimiter = ',', value_parser = parse_check)]
    checks: Vec<&'static CheckInfo>,
    #[command(flatten)]
    nodes: crate::test_nodes::NodeArgs,
}

fn parse_check(id: &str) -> Result<&'static CheckInfo, String> {
    symmem_conformance::check(id).map_err(|e| e.to_string())
}

/// The checks to run, in table order, each once: `chosen`, or all of them when none is.
fn selected(chosen: &[&'static CheckInfo]) -> Vec<&'static CheckInfo> {
    CHECKS
        .iter()
        .filter(|c| chosen.is_empty() || chosen.iter().any(|k| k.id == c.id))
        .collect()
}

#[derive(Clone, Debug)]
pub struct RankList(Vec<usize>);

fn parse_ranks(text: &str) -> Result<RankList, String> {
    let mut ranks = Vec::new();
    for part in text.split(',').map(str::trim) {
        let n: usize = part.parse().map_err(|_| {
            format!("`{part}` is not a rank count; write counts like `8` or `1,2,4,8`")
        })?;
        if n == 0 {
            return Err("a run needs at least 1 rank".into());
        }
        if n > MAX_RANKS {
            return Err(format!(
                "{n} ranks is more than the {MAX_RANKS} one host runs (symmem-launch's limit); \
                 for more, run the rank binary under torchrun, mpirun or srun across nodes"
            ));
        }
        if !ranks.contains(&n) {
            ranks.push(n);
        }
    }
    Ok(RankList(ranks))
}

/// One rank count's run.
struct Run {
    ranks: usize,
    aggregate: Aggregate,
    report: RunReport,
}

pub fn run(args: TestArgs) -> anyhow::Result<ExitCode> {
    let provider = args.provider.unwrap_or(ProviderKind::Host);
    let binary = RANK.locate(args.rank_binary.as_deref())?;
    let shim = if provider.is_gpu() {
        Some(shim_library(args.shim_lib.as_deref(), provider, &binary)?)
    } else {
        None
    };
    let checks = selected(&args.checks);
    if args.nodes.asked() {
        let plan = crate::test_nodes::Plan {
            ranks_per_node: &args.ranks.0,
            provider,
            timeout: args.timeout,
            grace: args.grace,
            checks,
            chosen: !args.checks.is_empty(),
            binary: &binary,
        };
        return crate::test_nodes::run(&args.nodes, &plan);
    }
    let started = Instant::now();
    let mut runs = Vec::new();
    for (i, &ranks) in args.ranks.0.iter().enumerate() {
        let mut progress = Progress::new(
            std::io::stderr(),
            format!("[{}/{}] {}:", i + 1, args.ranks.0.len(), count_ranks(ranks)),
        );
        let mut spec = LaunchSpec::new(&binary, ranks)
            .args(["--provider", provider.name()])
            .timeout(args.timeout)
            .grace(args.grace);
        if !args.checks.is_empty() {
            let ids: Vec<&str> = checks.iter().map(|c| c.id).collect();
            spec = spec.args(["--check".to_string(), ids.join(",")]);
        }
        if let Some(shim) = &shim {
            spec = spec.env(SHIM_LIB.name, shim);
        }
        let run = run_one(spec, ranks, &checks, &mut progress)?;
        let interrupted = matches!(run.report.outcome, Outcome::Interrupted { .. });
        runs.push(run);
        if interrupted {
            eprintln!("interrupted: not running the remaining rank counts");
            break;
        }
    }
    let total = started.elapsed();
    print_matrix(&runs, &checks);
    let count = |s| runs.iter().map(|r| r.aggregate.count(s)).sum::<usize>();
    let runs_failed = runs.iter().filter(|r| !r.report.success()).count();
    println!(
        "{} passed, {} failed, {} skipped",
        count(Status::Pass),
        count(Status::Fail),
        count(Status::Skip)
    );
    let spawned: Duration = runs.iter().map(|r| r.report.spawn_time).sum();
    let rank_total: usize = runs.iter().map(|r| r.ranks).sum();
    println!(
        "matrix time {:.2} s; launcher start cost {:.0} us per rank",
        total.as_secs_f64(),
        spawned.as_secs_f64() * 1e6 / rank_total.max(1) as f64
    );
    if runs
        .iter()
        .any(|r| matches!(r.report.outcome, Outcome::Interrupted { .. }))
    {
        // As symmem-run and a shell after Ctrl-C.
        return Ok(ExitCode::from(EXIT_INTERRUPTED as u8));
    }
    if count(Status::Fail) > 0 || runs_failed > 0 || runs.len() < args.ranks.0.len() {
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// The progress line of one run (`[2/4] 8 ranks: 1 2 3! 4 ... ok (1.20 s)`), which the ranks'
/// own lines interrupt: a rank's line ends the progress line and stands on its own line, and the
/// next check starts the progress line again with its prefix.
struct Progress<W: Write> {
    out: W,
    /// `[2/4] 8 ranks:`.
    prefix: String,
    /// Whether the cursor is in the progress line (something was written since its newline).
    open: bool,
}

impl<W: Write> Progress<W> {
    /// Writes the prefix at once, so the run shows as started.
    fn new(out: W, prefix: String) -> Self {
        let mut progress = Self {
            out,
            prefix,
            open: false,
        };
        progress.resume();
        progress
    }

    fn resume(&mut self) {
        if !self.open {
            let _ = write!(self.out, "{}", self.prefix);
            let _ = self.out.flush();
            self.open = true;
        }
    }

    /// A check every rank has reported; `!` marks a failure.
    fn check(&mut self, id: &str, failed: bool) {
        self.resume();
        let _ = write!(self.out, " {id}{}", if failed { "!" } else { "" });
        let _ = self.out.flush();
    }

    /// Before a line of a rank: ends the progress line, once.
    fn interrupt(&mut self) {
        if self.open {
            let _ = writeln!(self.out);
            self.open = false;
        }
    }

    /// Ends the progress line with the run's verdict.
    fn finish(&mut self, verdict: &str) {
        self.resume();
        let _ = writeln!(self.out, " {verdict}");
        self.open = false;
    }
}

fn run_one(
    spec: LaunchSpec,
    ranks: usize,
    checks: &[&CheckInfo],
    progress: &mut Progress<impl Write>,
) -> anyhow::Result<Run> {
    let mut results: Vec<CheckResult> = Vec::new();
    let mut arrived: BTreeMap<String, usize> = BTreeMap::new();
    let launched = launch(&spec, &mut |line: &OutputLine| {
        if line.stream == Stream::Stdout
            && let Some(result) = CheckResult::parse(&line.text)
        {
            // Progress: a check is done once every rank reported it.
            let n = arrived.entry(result.check.clone()).or_default();
            *n += 1;
            if *n == ranks {
                let all_pass = results
                    .iter()
                    .chain(std::iter::once(&result))
                    .filter(|r| r.check == result.check)
                    .all(|r| r.status != Status::Fail);
                progress.check(&result.check, !all_pass);
            }
            results.push(result);
            return;
        }
        progress.interrupt();
        print_line(line);
    });
    let report = match launched {
        Ok(report) => report,
        Err(e) => {
            progress.interrupt();
            return Err(e.into());
        }
    };
    let aggregate = Aggregate::of(ranks, checks, &results);
    let failed = aggregate.count(Status::Fail);
    if report.success() && failed == 0 {
        progress.finish(&format!("ok ({:.2} s)", report.elapsed.as_secs_f64()));
    } else {
        progress.finish(&format!(
            "FAILED ({:.2} s): {report}",
            report.elapsed.as_secs_f64()
        ));
    }
    Ok(Run {
        ranks,
        aggregate,
        report,
    })
}

fn print_matrix(runs: &[Run], checks: &[&CheckInfo]) {
    const NAME: usize = 44;
    let mut out = String::new();
    out.push_str(&format!("\n{:<4}{:<NAME$}", "", "check"));
    for run in runs {
        out.push_str(&format!("{:>14}", count_ranks(run.ranks)));
    }
    out.push('\n');
    for (i, info) in checks.iter().enumerate() {
        out.push_str(&format!("{:<4}{:<NAME$}", info.id, info.name));
        for run in runs {
            let v = &run.aggregate.verdicts[i];
            let cell = format!("{} {}", v.status, short_time(v.micros));
            out.push_str(&format!("{cell:>14}"));
        }
        out.push('\n');
    }
    out.push_str(&format!("{:<4}{:<NAME$}", "", "run (launch to exit)"));
    for run in runs {
        out.push_str(&format!(
            "{:>14}",
            format!("{:.2} s", run.report.elapsed.as_secs_f64())
        ));
    }
    out.push('\n');
    let mut notes = Vec::new();
    for run in runs {
        if !run.report.success() {
            notes.push(format!(
                "{}: run failed: {}",
                count_ranks(run.ranks),
                run.report
            ));
        }
        for v in &run.aggregate.verdicts {
            if v.status != Status::Pass {
                notes.push(format!(
                    "{}, check {} {}: {}",
                    count_ranks(run.ranks),
                    v.id,
                    v.status,
                    v.detail
                ));
            }
        }
    }
    if !notes.is_empty() {
        out.push('\n');
        for note in notes {
            out.push_str(&format!("  {note}\n"));
        }
    }
    println!("{out}");
}

fn short_time(micros: u64) -> String {
    match micros {
        0..1_000 => format!("{micros}us"),
        1_000..1_000_000 => format!("{}ms", micros / 1_000),
        _ => format!("{:.1}s", micros as f64 / 1e6),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_lines_break_the_progress_line_without_blank_lines() {
        let mut out = Vec::new();
        let mut p = Progress::new(&mut out, "[1/2] 2 ranks:".into());
        // Ranks' lines before the first check, then between checks.
        p.interrupt();
        p.interrupt();
        p.check("1", false);
        p.interrupt();
        p.interrupt();
        p.check("2", true);
        p.check("3", false);
        p.finish("ok (0.10 s)");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "[1/2] 2 ranks:\n[1/2] 2 ranks: 1\n[1/2] 2 ranks: 2! 3 ok (0.10 s)\n"
        );
        // A rank line right before the verdict: the verdict gets its prefix back.
        let mut out = Vec::new();
        let mut p = Progress::new(&mut out, "[1/1] 1 rank:".into());
        p.check("1", false);
        p.interrupt();
        p.finish("FAILED");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "[1/1] 1 rank: 1\n[1/1] 1 rank: FAILED\n"
        );
    }

    #[test]
    fn help_has_the_exit_codes() {
        use clap::CommandFactory;
        #[derive(clap::Parser)]
        struct Wrapper {
            #[command(flatten)]
            args: TestArgs,
        }
        let help = Wrapper::command().render_long_help().to_string();
        assert!(help.contains(&exit_codes_help(EXIT_CODES)), "{help}");
    }

    #[test]
    fn rank_lists() {
        assert_eq!(parse_ranks("1,2,4,8").unwrap().0, vec![1, 2, 4, 8]);
        assert_eq!(parse_ranks(" 8 ").unwrap().0, vec![8]);
        assert_eq!(parse_ranks("2,2,1").unwrap().0, vec![2, 1]);
        assert!(parse_ranks("0").unwrap_err().contains("at least 1 rank"));
        assert!(
            parse_ranks("abc")
                .unwrap_err()
                .contains("`abc` is not a rank count")
        );
        assert!(
            parse_ranks("4,")
                .unwrap_err()
                .contains("is not a rank count")
        );
        assert!(
            parse_ranks("100000")
                .unwrap_err()
                .contains("more than the 256")
        );
    }
}

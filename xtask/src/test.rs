//! `cargo xtask test`: the conformance matrix, every check at every rank count.

use crate::project::{build_binary, shim_library};
use anyhow::bail;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use symmem::parse_duration;
use symmem_conformance::{Aggregate, CHECKS, CheckResult, Status};
use symmem_gpu::Backend;
use symmem_launch::{
    LaunchSpec, MAX_RANKS, Outcome, OutputLine, RunReport, Stream, launch, print_line,
};

/// Run the conformance suite at several rank counts and print a checks x ranks matrix.
///
/// Each rank count is one launch of the `symmem-conformance` rank binary under symmem's
/// launcher (all ranks on this host). Ranks' own output is shown prefixed with the rank.
/// The exit status is non-zero when any check fails or any run does not finish.
///
/// Examples:
///   cargo xtask test --ranks 8
///   cargo xtask test --ranks 1,2,4,8 --provider host
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct TestArgs {
    /// Rank counts to run, comma-separated (each 1..=256).
    #[arg(long, default_value = "1,2,4,8", value_parser = parse_ranks)]
    ranks: RankList,
    /// Provider under test.
    #[arg(long, value_enum, default_value_t = Provider::Host)]
    provider: Provider,
    /// Give up on one run after this long and stop its ranks (e.g. 90s, 2m).
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    timeout: Duration,
    /// After a failure, how long ranks get between SIGTERM and SIGKILL.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    grace: Duration,
    /// Run the rocSHMEM matrix inside the prebuilt image for this checkout's tag (`cargo xtask
    /// images --tag`), pulled when missing, with the ROCm devices. Implies --provider rocshmem.
    #[arg(long, value_enum, value_name = "ENGINE")]
    container: Option<crate::container::Engine>,
    /// The GPU shim library for --provider nvshmem|rocshmem (default: $SYMMEM_SHIM_LIB, else
    /// what `cargo xtask build-shim` built under target/shim/).
    #[arg(long, value_name = "PATH")]
    shim_lib: Option<PathBuf>,
    /// Run this prebuilt symmem-conformance binary instead of building it (for machines
    /// without cargo, e.g. a GPU node that got the binaries copied over).
    #[arg(long, value_name = "PATH")]
    rank_binary: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Provider {
    /// Host shared memory: runs on any Linux machine.
    Host,
    /// NVSHMEM on NVIDIA GPUs.
    Nvshmem,
    /// rocSHMEM on AMD GPUs.
    Rocshmem,
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
    if let Some(engine) = args.container {
        if args.provider == Provider::Nvshmem {
            bail!("--container runs the ROCm images, which have no NVSHMEM: drop --provider");
        }
        return crate::container::run(engine, &args.ranks.0, args.timeout, args.grace);
    }
    let (provider, shim) = match args.provider {
        Provider::Host => ("host", None),
        Provider::Nvshmem => (
            "nvshmem",
            Some(shim_library(args.shim_lib.as_deref(), Backend::Nvshmem)?),
        ),
        Provider::Rocshmem => (
            "rocshmem",
            Some(shim_library(args.shim_lib.as_deref(), Backend::Rocshmem)?),
        ),
    };
    let binary = match &args.rank_binary {
        Some(path) => path.clone(),
        None => {
            eprintln!("building the conformance rank binary ...");
            build_binary("symmem-conformance", "symmem-conformance")?
        }
    };
    let started = Instant::now();
    let mut runs = Vec::new();
    for (i, &ranks) in args.ranks.0.iter().enumerate() {
        eprint!("[{}/{}] {ranks} rank(s): ", i + 1, args.ranks.0.len());
        let mut spec = LaunchSpec::new(&binary, ranks)
            .args(["--provider", provider])
            .timeout(args.timeout)
            .grace(args.grace);
        if let Some(shim) = &shim {
            spec = spec.env("SYMMEM_SHIM_LIB", shim);
        }
        let run = run_one(spec, ranks)?;
        let interrupted = matches!(run.report.outcome, Outcome::Interrupted { .. });
        runs.push(run);
        if interrupted {
            eprintln!("interrupted: not running the remaining rank counts");
            break;
        }
    }
    let total = started.elapsed();
    print_matrix(&runs);
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
    if count(Status::Fail) > 0 || runs_failed > 0 || runs.len() < args.ranks.0.len() {
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn run_one(spec: LaunchSpec, ranks: usize) -> anyhow::Result<Run> {
    let mut results: Vec<CheckResult> = Vec::new();
    let mut arrived: BTreeMap<String, usize> = BTreeMap::new();
    let mut sink = |line: &OutputLine| {
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
                eprint!("{}{} ", result.check, if all_pass { "" } else { "!" });
                let _ = std::io::stderr().flush();
            }
            results.push(result);
            return;
        }
        eprintln!();
        print_line(line);
    };
    let report = launch(&spec, &mut sink)?;
    let aggregate = Aggregate::new(ranks, &results);
    let failed = aggregate.count(Status::Fail);
    if report.success() && failed == 0 {
        eprintln!("ok ({:.2} s)", report.elapsed.as_secs_f64());
    } else {
        eprintln!("FAILED ({:.2} s): {report}", report.elapsed.as_secs_f64());
    }
    Ok(Run {
        ranks,
        aggregate,
        report,
    })
}

fn print_matrix(runs: &[Run]) {
    const NAME: usize = 44;
    let mut out = String::new();
    out.push_str(&format!("\n{:<4}{:<NAME$}", "", "check"));
    for run in runs {
        out.push_str(&format!(
            "{:>14}",
            format!(
                "{} rank{}",
                run.ranks,
                if run.ranks == 1 { "" } else { "s" }
            )
        ));
    }
    out.push('\n');
    for (i, info) in CHECKS.iter().enumerate() {
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
            notes.push(format!("{} ranks: run failed: {}", run.ranks, run.report));
        }
        for v in &run.aggregate.verdicts {
            if v.status != Status::Pass {
                notes.push(format!(
                    "{} ranks, check {} {}: {}",
                    run.ranks, v.id, v.status, v.detail
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

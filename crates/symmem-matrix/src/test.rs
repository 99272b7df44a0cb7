//! `symmem-matrix test`: the conformance matrix, every check at every rank count.

use crate::allocation::{Allocation, salloc_hint};
use crate::container::RankContainer;
use crate::layouts::{RANKS_HELP, RankList, label, parse_ranks};
use crate::plan::Plan;
use crate::programs::{RANK, shim_library};
use crate::target::{Target, WhereArgs};
use crate::world::{NotOneJob, Reported};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use symmem::{ProviderKind, format_duration, parse_duration, parse_timeout};
use symmem_conformance::{Aggregate, CHECKS, CheckInfo, CheckResult, Status};
use symmem_launch::{
    DEFAULT_GRACE, DEFAULT_TIMEOUT, EXIT_INTERRUPTED, LaunchSpec, Launcher, Layout, Outcome,
    OutputLine, RunReport, Stream, exit_codes_help, print_line,
};

/// The exit codes of `symmem-matrix test` (and so of `cargo xtask test`), as its `--help` lists
/// them; `cargo xtask codegen` writes README.md's table from this list.
pub const EXIT_CODES: &[(&str, &str)] = symmem::exit_codes::MATRIX;

/// `--help`'s sections after the exit codes.
const HELP_AFTER_EXIT_CODES: &str = "\
CONTAINERS
  From a checkout, `cargo xtask test --container docker|apptainer [--image-base
  amd|debian] ARGS` runs `symmem-matrix test ARGS` inside the image for the
  checkout's tag (all ranks in one container); the exit code is that of the
  run inside the image, or the engine's own when the engine fails.
  Across nodes, the launcher runs on the host and starts one container per
  rank, as HPC sites run images:
    symmem-matrix test --launcher srun -N 2 --ranks 2,n3 --container apptainer symmem.sif
    symmem-matrix test --launcher mpirun --hostfile hosts --ranks 2x2 --container docker IMAGE
  A layout whose ranks did not meet as one job (a wrapper or container that
  drops the launcher's variables) fails, naming the fix.

ACROSS NODES
  --nodes N runs the matrix across N emulated nodes of this machine (root,
  Open MPI). On a real cluster, without root, the same matrix runs through
  the cluster's launcher, which is how to validate new nodes:
    symmem-matrix test --launcher mpirun --hostfile hosts --ranks 2x1,2x4,3+1
    salloc -N 2 --ntasks-per-node=4 symmem-matrix test --launcher srun --ranks 1,4,n4,n3
    symmem-matrix test --launcher srun -N 2 --ranks 2 -- --partition gpu
  --ranks K is K ranks on each node (srun -N N --ntasks-per-node K), NxK
  the same on N nodes, A+B uneven counts (mpirun --host a:A,b:B; srun cannot
  be told them), nT T ranks in all placed by the launcher (srun -N N -n T,
  Slurm's block distribution, e.g. 3+1). Checks 9 and 10b test peers on
  other nodes: across nodes a skip of theirs is a failure. The rank binary
  (and --shim-lib) must be at the same path on every node.

DURATIONS
  90 or 90s (seconds), 500ms, 2m. --timeout must be above 0; --grace 0 sends
  SIGKILL right after SIGTERM.";

fn after_help() -> String {
    format!("{}\n\n{HELP_AFTER_EXIT_CODES}", exit_codes_help(EXIT_CODES))
}

/// Run the conformance suite at several layouts and print a checks x layouts matrix.
///
/// Each layout is one launch of the `symmem-conformance` rank binary: under symmem's launcher
/// (all ranks on this host), across emulated nodes (--nodes), or under mpirun or srun on a
/// real cluster (--launcher). Ranks' own output is shown prefixed with the rank.
/// The exit status is non-zero when any check fails or any run does not finish.
/// From a checkout, `cargo xtask test ARGS` builds both binaries and runs this with ARGS.
///
/// Examples:
///   symmem-matrix test --ranks 8
///   symmem-matrix test --ranks 1,2,4,8 --provider host
///   symmem-matrix test --ranks 2 --check 7,9     # only these checks (ids as in the matrix)
///   symmem-matrix test --nodes 2 --ranks 1,2,3+1 # emulated nodes: 2x1, 2x2, 3+1
///   symmem-matrix test --launcher srun -N 2 --ranks 2,n4  # a Slurm allocation: 2x2, 4 placed by Slurm
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment, after_help = after_help())]
pub struct TestArgs {
    #[arg(long, default_value = "1,2,4,8", value_parser = parse_ranks, help = RANKS_HELP)]
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
    /// `cargo build` and `cargo install` put it), or a script that runs it with its arguments
    /// (e.g. `apptainer exec IMAGE symmem-conformance "$@"`). A script must pass the launcher's
    /// environment on: a layout whose ranks did not meet as one job of its ranks (a container
    /// that drops the environment runs each rank as a job of 1) fails.
    #[arg(long, value_name = "PATH")]
    rank_binary: Option<PathBuf>,
    /// Run each rank in a container of its own, on its node, from IMAGE's own
    /// symmem-conformance: `apptainer exec IMAGE` (a SIF or reference the nodes see; the host's
    /// environment, network and /tmp, as Apptainer gives by default) or `docker run` (host
    /// network, IPC and /tmp, this user, the launcher's variables passed by name). The launcher
    /// (srun, mpirun) runs here, on the host; ENGINE must be on the nodes' PATH.
    #[arg(
        long,
        num_args = 2,
        value_names = ["ENGINE", "IMAGE"],
        conflicts_with_all = ["rank_binary", "shim_lib"]
    )]
    container: Option<Vec<String>>,
    /// Run only these checks (ids as the matrix shows them: 1 .. 10b; repeat the flag or list
    /// them with commas). Each runs alone with the allocations it needs; default: every check.
    #[arg(long = "check", value_name = "ID", value_delimiter = ',', value_parser = parse_check)]
    checks: Vec<&'static CheckInfo>,
    #[command(flatten)]
    place: WhereArgs,
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

/// One layout's run.
struct Run {
    /// The matrix column: `8 ranks`, `2x2`, `3+1`.
    label: String,
    ranks: usize,
    aggregate: Aggregate,
    report: RunReport,
    /// Why the ranks' results say nothing: they did not meet as the job the layout asked for.
    not_one_job: Option<NotOneJob>,
    /// Whether any rank reported any check (else the job never started).
    started: bool,
}

pub fn run(args: TestArgs) -> anyhow::Result<ExitCode> {
    let provider = args.provider.unwrap_or(ProviderKind::Host);
    let container = args
        .container
        .as_deref()
        .map(RankContainer::parse)
        .transpose()?;
    if container.is_some() && args.place.kill_test {
        anyhow::bail!(
            "--kill-test does not run with --container yet: the kill test signals the rank \
             processes it finds on the nodes, which a container hides behind its engine's; run \
             it with the rank binary on the host"
        );
    }
    let (binary, lead, shim) = match &container {
        // The image's rank binary and the image's own shim.
        Some(container) => {
            let (program, lead) = container.command(provider);
            (program, lead, None)
        }
        None => {
            let binary = RANK.locate(args.rank_binary.as_deref())?;
            let shim = if provider.is_gpu() {
                Some(shim_library(args.shim_lib.as_deref(), provider, &binary)?)
            } else {
                None
            };
            (binary, Vec::new(), shim)
        }
    };
    // Dropped in reverse order: the target, then Slurm's daemons, then the nodes.
    let cluster = args.place.nodes_up()?;
    let slurm = args.place.slurm_up(cluster.as_ref())?;
    let target = args.place.target(cluster.as_ref(), slurm.as_ref())?;
    if matches!(target, Target::Local) {
        refuse_being_a_rank()?;
    }
    if let Some(text) = target.describe() {
        println!("{text}");
    }
    if let Some(slurm) = &slurm {
        println!(
            "slurm: {} (daemons on the emulated nodes)",
            slurm.srun_version()
        );
    }
    if let Some(container) = &container {
        println!(
            "ranks in containers: {} ({:?})",
            container.image, container.engine
        );
    }
    let plan = Plan {
        provider,
        binary: match container {
            Some(_) => binary,
            None => target.visible(&binary)?,
        },
        lead,
        shim: shim.map(|s| target.visible(&s)).transpose()?,
        timeout: args.timeout,
        grace: args.grace,
        checks: selected(&args.checks),
        chosen: !args.checks.is_empty(),
    };
    let layouts = args
        .ranks
        .0
        .iter()
        .map(|entry| entry.layout(target.nodes()))
        .collect::<Result<Vec<_>, String>>()
        .map_err(anyhow::Error::msg)?;
    if let Target::Cluster(Launcher::Srun(srun), _) = &target {
        check_allocation(&layouts, &srun.args)?;
    }
    if args.place.kill_test {
        return crate::kill_test::run(&target, &plan, layouts[0].clone());
    }
    run_matrix(&target, &plan, layouts)
}

/// The matrix on one host starts its own ranks; started itself as one of many tasks (`srun
/// -n 4 apptainer run IMAGE`, whose default command is this), each task would run a whole
/// matrix of its own on its own host and "pass", nothing crossing nodes. Refused, naming the
/// way to run the matrix across nodes.
fn refuse_being_a_rank() -> anyhow::Result<()> {
    let across = "run symmem-matrix once, on the host, with --launcher srun|mpirun (and \
                  --container ENGINE IMAGE to run each rank in the image)";
    match symmem::RankIdentity::from_env() {
        Ok(me)
            if me.world_size > 1
                && let Some(starter) = symmem::rank_starter_ancestor() =>
        {
            anyhow::bail!(
                "symmem-matrix was started as rank {} of {} by {starter}: every task would run a \
                 matrix of its own, on its own host; {across}",
                me.rank,
                me.world_size,
            )
        }
        Err(e @ symmem::RankEnvError::EnvironmentDropped { .. }) => {
            anyhow::bail!("symmem-matrix runs as a task of a launcher ({e}); {across}")
        }
        _ => Ok(()),
    }
}

/// Inside a Slurm allocation, every layout must fit its task slots: refused at once, all in
/// one message with the `salloc` options that fit them, rather than one failed job per layout.
/// `srun --overcommit` (in `launcher_args`) places more tasks than CPUs: nothing to check.
fn check_allocation(
    layouts: &[(usize, Layout)],
    launcher_args: &[std::ffi::OsString],
) -> anyhow::Result<()> {
    if launcher_args
        .iter()
        .any(|a| a == "--overcommit" || a == "-O")
    {
        return Ok(());
    }
    let Some(allocation) = Allocation::from_vars(|name| std::env::var(name).ok()) else {
        return Ok(());
    };
    let refused: Vec<String> = layouts
        .iter()
        .filter_map(|(ranks, layout)| {
            let why = allocation.refuses(*ranks, layout)?;
            Some(format!("{}: {why}", label(*ranks, layout)))
        })
        .collect();
    if refused.is_empty() {
        return Ok(());
    }
    anyhow::bail!(
        "this allocation cannot run every layout asked for:\n  {}\nAllocate for all of them \
         with {}, drop those layouts from --ranks, or pass `-- --overcommit` to srun",
        refused.join("\n  "),
        salloc_hint(layouts)
    )
}

fn run_matrix(
    target: &Target,
    plan: &Plan,
    layouts: Vec<(usize, Layout)>,
) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let asked = layouts.len();
    let mut runs = Vec::new();
    for (i, (ranks, layout)) in layouts.into_iter().enumerate() {
        let label = label(ranks, &layout);
        let mut progress =
            Progress::new(std::io::stderr(), format!("[{}/{asked}] {label}:", i + 1));
        let across = layout.nodes() > 1;
        let spec = plan.spec(ranks, layout);
        let mut run = run_one(target.launcher(), &spec, &plan.checks, &mut progress)?;
        if across {
            require_across_nodes(&mut run.aggregate);
        }
        let interrupted = matches!(run.report.outcome, Outcome::Interrupted { .. });
        runs.push(Run { label, ..run });
        if interrupted {
            eprintln!("interrupted: not running the remaining layouts");
            break;
        }
    }
    let total = started.elapsed();
    print_matrix(&runs, &plan.checks);
    let count = |s| runs.iter().map(|r| r.aggregate.count(s)).sum::<usize>();
    let runs_failed = runs
        .iter()
        .filter(|r| !r.report.success() || r.not_one_job.is_some())
        .count();
    println!(
        "{} passed, {} failed, {} skipped",
        count(Status::Pass),
        count(Status::Fail),
        count(Status::Skip)
    );
    print!("matrix time {:.2} s", total.as_secs_f64());
    if matches!(target, Target::Local) {
        let spawned: Duration = runs.iter().map(|r| r.report.spawn_time).sum();
        let rank_total: usize = runs.iter().map(|r| r.ranks).sum();
        print!(
            "; launcher start cost {:.0} us per rank",
            spawned.as_secs_f64() * 1e6 / rank_total.max(1) as f64
        );
    }
    println!();
    if runs
        .iter()
        .any(|r| matches!(r.report.outcome, Outcome::Interrupted { .. }))
    {
        // As symmem-run and a shell after Ctrl-C.
        return Ok(ExitCode::from(EXIT_INTERRUPTED as u8));
    }
    if count(Status::Fail) > 0 || runs_failed > 0 || runs.len() < asked {
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// A skip of an [`CheckInfo::across_nodes`] check in a run across nodes becomes a failure
/// that says why.
fn require_across_nodes(aggregate: &mut Aggregate) {
    for v in &mut aggregate.verdicts {
        let across = symmem_conformance::check(v.id).is_ok_and(|c| c.across_nodes);
        if across && v.status == Status::Skip {
            v.status = Status::Fail;
            v.detail = format!(
                "skipped across nodes, where it must pass (it tests peers on other nodes): {}",
                v.detail
            );
        }
    }
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

/// Runs `spec` with `launcher`: the progress line as checks complete, the ranks' other lines
/// as they come, the results folded.
fn run_one(
    launcher: &Launcher,
    spec: &LaunchSpec,
    checks: &[&CheckInfo],
    progress: &mut Progress<impl Write>,
) -> anyhow::Result<Run> {
    let ranks = spec.ranks;
    let mut results: Vec<CheckResult> = Vec::new();
    let mut arrived: BTreeMap<String, usize> = BTreeMap::new();
    let mut reported = Reported::default();
    let launched = launcher.launch(spec, &mut |line: &OutputLine| {
        if let Some(launched) = line.rank
            && line.stream == Stream::Stdout
            && let Some(result) = CheckResult::parse(&line.text)
        {
            reported.add(launched, &result);
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
    let mut aggregate = Aggregate::of(ranks, checks, &results);
    let not_one_job = reported.check(ranks, launcher).err();
    if not_one_job.is_some() {
        // The checks ran in other worlds than this layout's: none of their verdicts holds, and
        // the run's one note says why (print_matrix).
        for v in &mut aggregate.verdicts {
            v.status = Status::Fail;
            v.detail = "the ranks did not meet as one job".to_string();
        }
    }
    let failed = aggregate.count(Status::Fail);
    if not_one_job.is_some() {
        progress.finish(&format!(
            "FAILED ({:.2} s): the ranks did not meet as one {}-rank job (see below)",
            report.elapsed.as_secs_f64(),
            ranks
        ));
    } else if report.success() && failed == 0 {
        progress.finish(&format!("ok ({:.2} s)", report.elapsed.as_secs_f64()));
    } else {
        progress.finish(&format!(
            "FAILED ({:.2} s): {report}",
            report.elapsed.as_secs_f64()
        ));
    }
    Ok(Run {
        label: String::new(),
        ranks,
        aggregate,
        report,
        not_one_job,
        started: !results.is_empty(),
    })
}

fn print_matrix(runs: &[Run], checks: &[&CheckInfo]) {
    const NAME: usize = 44;
    let mut out = String::new();
    out.push_str(&format!("\n{:<4}{:<NAME$}", "", "check"));
    for run in runs {
        out.push_str(&format!("{:>14}", run.label));
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
        if let Some(e) = &run.not_one_job {
            // One note for the run, not one per check.
            notes.push(format!("{}: {e}", run.label));
        }
        if !run.report.success() && !run.started {
            // One line: no rank reported anything, so no check has a verdict of its own.
            notes.push(format!(
                "{}: the job did not start (no rank reported a check): {}",
                run.label, run.report
            ));
            continue;
        }
        if !run.report.success() {
            notes.push(format!("{}: run failed: {}", run.label, run.report));
        }
        if run.not_one_job.is_some() {
            continue;
        }
        for v in &run.aggregate.verdicts {
            if v.status != Status::Pass {
                notes.push(format!(
                    "{}, check {} {}: {}",
                    run.label, v.id, v.status, v.detail
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
    fn across_node_checks_come_from_the_table_and_must_pass() {
        let across: Vec<&str> = CHECKS
            .iter()
            .filter(|c| c.across_nodes)
            .map(|c| c.id)
            .collect();
        assert_eq!(across, ["9", "10b"]);
        let nine = symmem_conformance::check("9").unwrap();
        let one = symmem_conformance::check("1").unwrap();
        let skip = |check: &str| {
            serde_json::json!({"check": check, "name": "n", "rank": 0, "world_size": 1,
                "provider": "host", "status": "skip", "detail": "why", "micros": 1})
        };
        let results: Vec<CheckResult> = [skip("9"), skip("1")]
            .iter()
            .map(|v| CheckResult::parse(&v.to_string()).expect("a result line"))
            .collect();
        let mut aggregate = Aggregate::of(1, &[nine, one], &results);
        require_across_nodes(&mut aggregate);
        assert_eq!(aggregate.verdicts[0].status, Status::Fail);
        assert!(aggregate.verdicts[0].detail.ends_with(": why"));
        assert_eq!(aggregate.verdicts[1].status, Status::Skip);
    }

    fn place(args: &[&str]) -> Result<WhereArgs, String> {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Wrapper {
            #[command(flatten)]
            place: WhereArgs,
        }
        Wrapper::try_parse_from(std::iter::once("test").chain(args.iter().copied()))
            .map(|w| w.place)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn where_the_ranks_run() {
        assert!(matches!(
            place(&[]).unwrap().target(None, None),
            Ok(Target::Local)
        ));
        assert!(
            place(&["--nodes", "33"])
                .unwrap_err()
                .contains("33 is not in 1..=32")
        );
        let target = |args: &[&str]| {
            place(args)
                .unwrap()
                .target(None, None)
                .err()
                .unwrap()
                .to_string()
        };
        assert!(target(&["--launcher", "mpirun"]).contains("--hostfile FILE or --host a,b"));
        assert!(target(&["--host", "a"]).contains("add --launcher mpirun"));
        assert!(target(&["--nodes", "2", "--host", "a"]).contains("drop one or the other"));
        assert!(target(&["--nodes", "2", "--launcher", "local"]).contains("drop --launcher local"));
        let mpirun = place(&[
            "--launcher",
            "mpirun",
            "--host",
            "a,b,c",
            "--",
            "--mca",
            "x",
        ])
        .unwrap()
        .target(None, None)
        .unwrap();
        let Target::Cluster(symmem_launch::Launcher::Mpirun(m), 3) = mpirun else {
            panic!("mpirun over 3 hosts");
        };
        assert_eq!(m.args, ["--mca", "x"]);
        let srun = place(&["--launcher", "srun", "-N", "2"])
            .unwrap()
            .target(None, None)
            .unwrap();
        assert!(matches!(
            srun,
            Target::Cluster(symmem_launch::Launcher::Srun(_), 2)
        ));
    }
}

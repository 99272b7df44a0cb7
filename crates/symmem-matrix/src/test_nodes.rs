//! `cargo xtask test --nodes N`: the conformance matrix across an emulated cluster of N nodes
//! on this machine (`symmem-cluster`: namespaces, Open MPI's `mpirun`), and with
//! `--kill-test` the check that a `kill -9` of a rank on the last node ends the whole job.
//!
//! Self-contained: `test.rs` hands over the options it parsed and calls [`run`].

use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use symmem::{ProviderKind, count_ranks};
use symmem_cluster::{Cluster, Job, JobLine, JobOutcome, Stream};
use symmem_conformance::{Aggregate, CHECKS, CONFORMANCE_FAULT, CheckInfo, CheckResult, Status};

/// The options of `cargo xtask test` for a cluster.
#[derive(clap::Args, Debug)]
pub struct NodeArgs {
    /// Run across this many emulated nodes (namespaces of this machine, each with its own
    /// hostname, 127.0.0.x address, /tmp, /run and /dev/shm; started with Open MPI's mpirun;
    /// needs root). --ranks then counts ranks per node: --nodes 2 --ranks 1,2,4 runs 2x1, 2x2
    /// and 2x4.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=symmem_cluster::MAX_NODES as i64))]
    pub nodes: u8,
    /// With --nodes: instead of the matrix, kill -9 the last rank (on the last node) mid-run,
    /// at the first --ranks count, and check that the job ends within --grace, that the
    /// culprit is named and that nothing is left on any node.
    #[arg(long)]
    pub kill_test: bool,
}

impl NodeArgs {
    /// Whether this is a cluster run.
    pub fn asked(&self) -> bool {
        self.nodes > 1 || self.kill_test
    }
}

/// What `cargo xtask test` parsed, for a cluster run.
pub struct Plan<'a> {
    pub ranks_per_node: &'a [usize],
    pub provider: ProviderKind,
    pub timeout: Duration,
    pub grace: Duration,
    pub checks: Vec<&'static CheckInfo>,
    /// Whether --check chose them (then the ranks get `--check`).
    pub chosen: bool,
    pub binary: &'a Path,
}

pub fn run(nodes: &NodeArgs, plan: &Plan) -> anyhow::Result<ExitCode> {
    if nodes.nodes < 2 {
        bail!("--kill-test runs on an emulated cluster: add --nodes 2");
    }
    if plan.provider != ProviderKind::Host {
        bail!(
            "--nodes runs the host provider only (the emulated nodes have no GPUs): drop \
             --provider"
        );
    }
    let cluster = Cluster::up(usize::from(nodes.nodes))?;
    let names: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|n| format!("{} {}", n.name(), n.address()))
        .collect();
    println!("cluster: {} nodes ({})", names.len(), names.join(", "));
    println!("launcher: {}", symmem_cluster::launcher_version());
    println!("engine: {}", symmem_cluster::engine_version());
    let program = visible_program(&cluster, plan.binary)?;
    if nodes.kill_test {
        return kill_test(&cluster, plan, &program);
    }
    matrix(&cluster, plan, &program)
}

/// The rank binary as every node can run it: itself, or a copy in the cluster's shared folder
/// when it lies where each node has its own folder (a checkout under /tmp, say).
fn visible_program(cluster: &Cluster, binary: &Path) -> anyhow::Result<PathBuf> {
    if cluster.on_nodes(binary).is_ok() {
        return Ok(binary.to_path_buf());
    }
    let name = binary
        .file_name()
        .with_context(|| format!("{} names no file", binary.display()))?;
    let staged = cluster.shared_dir().join(name);
    std::fs::copy(binary, &staged).with_context(|| {
        format!(
            "copying {} into the cluster's shared folder {} (the nodes have their own /tmp)",
            binary.display(),
            staged.display()
        )
    })?;
    Ok(staged)
}

/// The checks whose subject is a peer on another node (the table entry of an unreachable
/// peer; the order check of a collective whose ranks span nodes): across nodes they must pass,
/// a skip there is a failure.
pub const ACROSS_NODES: &[&str] = &["9", "10b"];

/// A skip of an [`ACROSS_NODES`] check becomes a failure that says why.
fn require_across_nodes(aggregate: &mut Aggregate) {
    for v in &mut aggregate.verdicts {
        if ACROSS_NODES.contains(&v.id) && v.status == Status::Skip {
            v.status = Status::Fail;
            v.detail = format!(
                "skipped across nodes, where it must pass (it tests peers on other nodes): {}",
                v.detail
            );
        }
    }
}

/// One run of the matrix: ranks per node, the folded results, how mpirun ended.
struct Run {
    per_node: usize,
    aggregate: Aggregate,
    outcome: JobOutcome,
}

fn job(plan: &Plan, program: &Path, per_node: usize) -> Job {
    let mut job = Job::new(program, per_node)
        .args(["--provider", plan.provider.name()])
        .timeout(plan.timeout)
        .grace(plan.grace);
    if plan.chosen {
        let ids: Vec<&str> = plan.checks.iter().map(|c| c.id).collect();
        job = job.args(["--check".to_string(), ids.join(",")]);
    }
    job
}

fn label(nodes: usize, per_node: usize) -> String {
    format!("{nodes}x{per_node}")
}

fn matrix(cluster: &Cluster, plan: &Plan, program: &Path) -> anyhow::Result<ExitCode> {
    let nodes = cluster.nodes().len();
    let started = Instant::now();
    let mut runs = Vec::new();
    for (i, &per_node) in plan.ranks_per_node.iter().enumerate() {
        let world = nodes * per_node;
        eprintln!(
            "[{}/{}] {} ({}):",
            i + 1,
            plan.ranks_per_node.len(),
            label(nodes, per_node),
            count_ranks(world)
        );
        let mut results = Vec::new();
        let outcome = cluster.mpirun(&job(plan, program, per_node), &mut |line: &JobLine| {
            if line.rank.is_some()
                && line.stream == Stream::Stdout
                && let Some(result) = CheckResult::parse(&line.text)
            {
                results.push(result);
                return;
            }
            eprintln!("  {line}");
        })?;
        let mut aggregate = Aggregate::of(world, &plan.checks, &results);
        require_across_nodes(&mut aggregate);
        eprintln!(
            "  {} ({:.2} s)",
            if outcome.success() && aggregate.count(Status::Fail) == 0 {
                "ok".to_string()
            } else {
                format!("FAILED: {outcome}")
            },
            outcome.elapsed.as_secs_f64()
        );
        runs.push(Run {
            per_node,
            aggregate,
            outcome,
        });
    }
    print_matrix(nodes, &runs, &plan.checks);
    let count = |s| runs.iter().map(|r| r.aggregate.count(s)).sum::<usize>();
    println!(
        "{} passed, {} failed, {} skipped",
        count(Status::Pass),
        count(Status::Fail),
        count(Status::Skip)
    );
    println!("matrix time {:.2} s", started.elapsed().as_secs_f64());
    let runs_failed = runs.iter().filter(|r| !r.outcome.success()).count();
    if count(Status::Fail) > 0 || runs_failed > 0 {
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_matrix(nodes: usize, runs: &[Run], checks: &[&CheckInfo]) {
    const NAME: usize = 44;
    let mut out = format!("\n{:<4}{:<NAME$}", "", "check");
    for run in runs {
        out.push_str(&format!("{:>14}", label(nodes, run.per_node)));
    }
    out.push('\n');
    for (i, info) in checks.iter().enumerate() {
        out.push_str(&format!("{:<4}{:<NAME$}", info.id, info.name));
        for run in runs {
            let v = &run.aggregate.verdicts[i];
            out.push_str(&format!(
                "{:>14}",
                format!("{} {}", v.status, micros(v.micros))
            ));
        }
        out.push('\n');
    }
    out.push_str(&format!("{:<4}{:<NAME$}", "", "run (mpirun start to exit)"));
    for run in runs {
        out.push_str(&format!(
            "{:>14}",
            format!("{:.2} s", run.outcome.elapsed.as_secs_f64())
        ));
    }
    out.push_str("\n\n");
    for run in runs {
        let at = label(nodes, run.per_node);
        if !run.outcome.success() {
            out.push_str(&format!("  {at}: run failed: {}\n", run.outcome));
        }
        for v in run
            .aggregate
            .verdicts
            .iter()
            .filter(|v| v.status != Status::Pass)
        {
            out.push_str(&format!(
                "  {at}, check {} {}: {}\n",
                v.id, v.status, v.detail
            ));
        }
    }
    println!("{out}");
}

/// `850us`, `12ms`, `1.5s`.
fn micros(us: u64) -> String {
    if us < 1_000 {
        format!("{us}us")
    } else if us < 1_000_000 {
        format!("{}ms", us / 1_000)
    } else {
        format!("{:.1}s", us as f64 / 1e6)
    }
}

/// The kill test: rank 0 hangs in the second check (an injected fault), so the job is surely
/// mid-run once every rank reported the first; then the last rank, on the last node, gets
/// SIGKILL.
fn kill_test(cluster: &Cluster, plan: &Plan, program: &Path) -> anyhow::Result<ExitCode> {
    let nodes = cluster.nodes().len();
    let per_node = plan.ranks_per_node[0];
    let world = nodes * per_node;
    let victim = world - 1;
    let [first, second, ..] = CHECKS;
    println!(
        "kill test at {} ({}): rank 0 hangs in check {}; rank {victim} gets SIGKILL once every \
         rank reported check {}",
        label(nodes, per_node),
        count_ranks(world),
        second.id,
        first.id
    );
    let job = Job::new(program, per_node)
        .args(["--provider", plan.provider.name()])
        .args(["--check".to_string(), format!("{},{}", first.id, second.id)])
        .env(CONFORMANCE_FAULT.name, format!("hang@0:{}", second.id))
        .timeout(plan.timeout)
        .grace(plan.grace);
    let mut reported = 0;
    let mut killed = None;
    let mut kill_error = None;
    let outcome = cluster.mpirun(&job, &mut |line: &JobLine| {
        println!("  {line}");
        let done = line.rank.is_some()
            && CheckResult::parse(&line.text).is_some_and(|r| r.check == first.id);
        if done {
            reported += 1;
            if reported == world {
                match cluster.signal_rank(victim, libc::SIGKILL) {
                    Ok((node, process)) => {
                        println!("  kill -9 rank {victim}: {process} on {node}");
                        killed = Some((Instant::now(), node));
                    }
                    Err(e) => kill_error = Some(e),
                }
            }
        }
    })?;
    if let Some(e) = kill_error {
        return Err(e).context("killing the rank");
    }
    let mut problems = Vec::new();
    let Some((killed_at, node)) = killed else {
        bail!(
            "the job never got past check {} on every rank, so no rank was killed: {outcome}",
            first.id
        );
    };
    let last = cluster.nodes()[nodes - 1].name().to_string();
    if node != last {
        problems.push(format!("rank {victim} ran on {node}, not on {last}"));
    }
    let took = outcome.ended.saturating_duration_since(killed_at);
    println!(
        "job ended {:.2} s after the kill ({outcome})",
        took.as_secs_f64()
    );
    if outcome.timed_out || took > plan.grace {
        problems.push(format!(
            "the job ended {:.2} s after the kill, over the {:.2} s grace period",
            took.as_secs_f64(),
            plan.grace.as_secs_f64()
        ));
    }
    match &outcome.culprit {
        Some(c) if c.rank == victim && c.node.as_deref() == Some(last.as_str()) => {
            println!("culprit named: {c}")
        }
        other => problems.push(format!(
            "mpirun named {} as the culprit, not rank {victim} on {last}",
            other.as_ref().map_or("nobody".into(), |c| c.to_string())
        )),
    }
    if !outcome.left_behind.is_empty() {
        problems.push(format!("processes left behind: {outcome}"));
    }
    for dir in ["/tmp", "/dev/shm"] {
        for (node, path) in cluster.leftovers(dir, "symmem") {
            problems.push(format!("{path} left on {node}"));
        }
    }
    if problems.is_empty() {
        println!("kill test passed: nothing left on any node");
        return Ok(ExitCode::SUCCESS);
    }
    for p in &problems {
        println!("kill test FAILED: {p}");
    }
    Ok(ExitCode::FAILURE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Wrapper {
        #[command(flatten)]
        nodes: NodeArgs,
    }

    fn parse(args: &[&str]) -> Result<NodeArgs, String> {
        use clap::Parser;
        Wrapper::try_parse_from(std::iter::once("test").chain(args.iter().copied()))
            .map(|w| w.nodes)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn node_options() {
        assert!(!parse(&[]).unwrap().asked());
        assert!(!parse(&["--nodes", "1"]).unwrap().asked());
        assert!(parse(&["--nodes", "2"]).unwrap().asked());
        assert!(parse(&["--kill-test"]).unwrap().asked());
        assert!(
            parse(&["--nodes", "9"])
                .unwrap_err()
                .contains("9 is not in 1..=8")
        );
        assert!(parse(&["--nodes", "0"]).is_err());
        assert_eq!(micros(850), "850us");
        assert_eq!(micros(12_345), "12ms");
        assert_eq!(micros(1_500_000), "1.5s");
    }

    #[test]
    fn across_node_checks_exist_and_must_pass() {
        for id in ACROSS_NODES {
            symmem_conformance::check(id).unwrap();
        }
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
}

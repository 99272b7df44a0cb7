//! `symmem-matrix test --kill-test`: one rank ends mid-run, and the launcher must end the whole
//! job, name that rank (and its node, where the launcher says it) and leave nothing behind.
//! The same [`RunReport`](symmem_launch::RunReport) under every launcher.

use anyhow::{Context, bail};
use nix::sys::signal::Signal;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use symmem::count_ranks;
use symmem::settings::COLLECTIVE_TIMEOUT;
use symmem_cluster::Cluster;
use symmem_conformance::{CHECKS, CONFORMANCE_FAULT, CheckResult};
use symmem_launch::{Ended, Launcher, Layout, Lost, Outcome, OutputLine, RunReport, print_line};

use crate::layouts::label;
use crate::plan::Plan;
use crate::target::Target;

/// Rank `victim` ends once every rank reported the first check. On the emulated nodes it gets
/// `kill -9` (rank 0 hangs in the second check meanwhile, so the job is surely mid-run); on a
/// cluster this side cannot reach, and on one host, it panics in the second check instead.
pub fn run(
    target: &Target,
    plan: &Plan,
    (world, layout): (usize, Layout),
) -> anyhow::Result<ExitCode> {
    let victim = world - 1;
    let [first, second, ..] = CHECKS;
    let cluster = match target {
        Target::Emulated(cluster, _) => Some(*cluster),
        _ => None,
    };
    let (fault, how, expected) = match cluster {
        Some(_) => ("hang@0".to_string(), "gets SIGKILL", Ended::Signaled(9)),
        None => (format!("panic@{victim}"), "panics", Ended::Exited(101)),
    };
    println!(
        "kill test at {} ({}): rank {victim} {how} once every rank reported check {}",
        label(world, &layout),
        count_ranks(world),
        first.id
    );
    let spec = plan
        .bare(world, layout)
        .args(["--check".to_string(), format!("{},{}", first.id, second.id)])
        .env(CONFORMANCE_FAULT.name, format!("{fault}:{}", second.id));
    let (report, mid_run) = launch_and_end(target, &spec, cluster, (victim, Signal::SIGKILL))?;
    let last_node = cluster.map(|c| c.hosts().last().cloned().unwrap_or_default());
    let mut problems = judge(
        &report,
        plan,
        (mid_run, Moment::MidRun),
        victim,
        expected,
        last_node.as_deref(),
    );
    if let Some(cluster) = cluster {
        problems.extend(leftovers(cluster));
        // M6: the same kill during start-up, a few ms after the rank's exec.
        println!("kill test, start-up: rank {victim} gets SIGKILL as soon as its process exists");
        let bare = plan
            .bare(world, spec.layout.clone())
            .args(["--check".to_string(), format!("{},{}", first.id, second.id)]);
        let (report, killed) =
            launch_and_kill_at_start(target, &bare, cluster, (victim, Signal::SIGKILL))?;
        problems.extend(judge(
            &report,
            plan,
            (killed, Moment::StartUp),
            victim,
            expected,
            last_node.as_deref(),
        ));
        problems.extend(leftovers(cluster));
        if let Target::Emulated(_, Launcher::Mpirun(_)) = target {
            problems.extend(launcher_death(target, &spec, cluster, Daemon::Mpirun)?);
            // The last node's orted, its rank `victim` hung outside any collective.
            let hung = bare.clone().env(
                CONFORMANCE_FAULT.name,
                format!("hang@{victim}:{}", second.id),
            );
            problems.extend(launcher_death(target, &hung, cluster, Daemon::Orted)?);
            problems.extend(stopped_rank(target, &bare, cluster, victim)?);
        }
    }
    if problems.is_empty() {
        println!(
            "kill test passed: the job ended at once, culprit named, no rank or symmem file \
             left behind"
        );
        return Ok(ExitCode::SUCCESS);
    }
    for p in &problems {
        println!("kill test FAILED: {p}");
    }
    Ok(ExitCode::FAILURE)
}

/// Runs `spec`, printing its lines; once every rank reported the first check (the job is
/// mid-run: the moment returned), kills rank `victim` on the emulated `cluster` (elsewhere it
/// ends by its injected fault).
fn launch_and_end(
    target: &Target,
    spec: &symmem_launch::LaunchSpec,
    cluster: Option<&Cluster>,
    (victim, signal): (usize, Signal),
) -> anyhow::Result<(RunReport, Instant)> {
    let first = CHECKS[0].id;
    let mut mid_run = None;
    let mut kill_error = None;
    let report = launch_to_mid_run(target, spec, || {
        mid_run = Some(Instant::now());
        if let Some(cluster) = cluster {
            match cluster.signal_rank(victim, signal) {
                Ok((node, process)) => {
                    println!("  {signal} to rank {victim}: {process} on {node}");
                }
                Err(e) => kill_error = Some(e),
            }
        }
    })?;
    if let Some(e) = kill_error {
        return Err(e).context("killing the rank");
    }
    let Some(mid_run) = mid_run else {
        bail!("the job never got past check {first} on every rank, so no rank was ended: {report}");
    };
    Ok((report, mid_run))
}

/// Runs `spec`, printing its lines, and calls `mid_run` once, when every rank has reported
/// the first check (the job is then mid-run).
fn launch_to_mid_run(
    target: &Target,
    spec: &symmem_launch::LaunchSpec,
    mut mid_run: impl FnMut(),
) -> anyhow::Result<RunReport> {
    let first = CHECKS[0].id;
    let mut reported = 0;
    let report = target.launcher().launch(spec, &mut |line: &OutputLine| {
        print_line(line);
        let done =
            line.rank.is_some() && CheckResult::parse(&line.text).is_some_and(|r| r.check == first);
        reported += usize::from(done);
        if done && reported == spec.ranks {
            mid_run();
        }
    })?;
    Ok(report)
}

/// symmem's files left on the nodes (rendezvous folders and sockets, heaps).
fn leftovers(cluster: &Cluster) -> Vec<String> {
    ["/tmp", "/dev/shm"]
        .iter()
        .flat_map(|dir| cluster.leftovers(dir, "symmem"))
        .map(|(node, path)| format!("{path} left on {node}"))
        .collect()
}

/// Runs `spec`, printing its lines, and kills rank `victim` with `kill -9` on the emulated
/// `cluster` as soon as its process exists (looked for every millisecond, for as long as the
/// job runs); returns the report and the moment of the kill.
fn launch_and_kill_at_start(
    target: &Target,
    spec: &symmem_launch::LaunchSpec,
    cluster: &Cluster,
    (victim, signal): (usize, Signal),
) -> anyhow::Result<(RunReport, Instant)> {
    let over = AtomicBool::new(false);
    let (report, killed) = std::thread::scope(|scope| {
        let killer = scope.spawn(|| {
            while !over.load(Ordering::SeqCst) {
                if let Ok((node, process)) = cluster.signal_rank(victim, signal) {
                    return Some((node, process, Instant::now()));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            None
        });
        let report = target.launcher().launch(spec, &mut print_line);
        over.store(true, Ordering::SeqCst);
        (report, killer.join())
    });
    let report = report?;
    let Ok(Some((node, process, at))) = killed else {
        bail!("rank {victim} was never seen on a node, so it was not killed: {report}");
    };
    println!("  {signal} to rank {victim} at its start: {process} on {node}");
    Ok((report, at))
}

/// When the rank was killed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Moment {
    /// Once every rank reported the first check.
    MidRun,
    /// As soon as its process existed: Open MPI 4.1 may then leave the signal unnamed, or hang
    /// in its abort until the launcher's grace period ends it, its daemons left to the sweep.
    StartUp,
}

/// M3: rank `victim` gets SIGSTOP as soon as its process exists (a rank stopped after its
/// part of the last collective is waited for by nobody but its launcher). The others time out
/// in the rendezvous and exit 75; mpirun names the first of them, a witness. The report must
/// name the stopped rank among the ranks that wrote no witness's report, never a witness.
fn stopped_rank(
    target: &Target,
    bare: &symmem_launch::LaunchSpec,
    cluster: &Cluster,
    victim: usize,
) -> anyhow::Result<Vec<String>> {
    println!("kill test, stop: rank {victim} gets SIGSTOP as soon as its process exists");
    // Short, so that the witnesses give up soon (2 s and the PMIx fence's 5 s margin).
    let spec = bare.clone().env(COLLECTIVE_TIMEOUT.name, "2s");
    let (report, _) = launch_and_kill_at_start(target, &spec, cluster, (victim, Signal::SIGSTOP))?;
    println!("job over ({report})");
    let mut problems = Vec::new();
    match &report.outcome {
        Outcome::PeerLost {
            culprits,
            reason: Lost::StillRunning,
            ..
        } if culprits == &[victim] => {}
        _ => problems.push(format!(
            "the stopped rank {victim} was not named alone as the hung rank: {report}"
        )),
    }
    if report
        .left_behind
        .iter()
        .any(|l| l.command.contains("symmem-conformance"))
    {
        problems.push(format!("processes left behind: {report}"));
    }
    problems.extend(leftovers(cluster));
    Ok(problems)
}

/// The launcher's process that [`launcher_death`] kills.
#[derive(Clone, Copy, Debug)]
enum Daemon {
    /// `mpirun`, on the first node.
    Mpirun,
    /// The `orted` of the last node.
    Orted,
}

/// M5: `kill -9` of the launcher's process on a node once every rank reported the first check,
/// a rank of that node hanging in the second (in no collective). Every rank must end by
/// itself, within the grace period the sweep gives them: the hung rank, a child of the dead
/// process, lived on forever.
fn launcher_death(
    target: &Target,
    spec: &symmem_launch::LaunchSpec,
    cluster: &Cluster,
    daemon: Daemon,
) -> anyhow::Result<Vec<String>> {
    let first = CHECKS[0].id;
    println!("kill test, launcher: {daemon:?} gets SIGKILL once every rank reported check {first}");
    let mut killed = None;
    let report = launch_to_mid_run(target, spec, || {
        killed = Some(kill_daemon(cluster, daemon));
    })?;
    let mut problems = Vec::new();
    match killed {
        Some(Ok(process)) => println!("  kill -9 {daemon:?}: {process}"),
        Some(Err(e)) => problems.push(format!("{daemon:?} could not be killed: {e:#}")),
        None => problems.push(format!("the job never got past check {first}: {report}")),
    }
    println!("job over ({report})");
    if !report.left_behind.is_empty() {
        problems.push(format!(
            "ranks outlived their launcher (the sweep ended them): {report}"
        ));
    }
    problems.extend(leftovers(cluster));
    Ok(problems)
}

/// `kill -9` of `daemon` on its node.
fn kill_daemon(cluster: &Cluster, daemon: Daemon) -> anyhow::Result<String> {
    let nodes = cluster.nodes();
    let (node, name) = match daemon {
        Daemon::Mpirun => (nodes.first(), "mpirun"),
        Daemon::Orted => (nodes.last(), "orted"),
    };
    let node = node.context("the cluster has no node")?;
    let process = cluster
        .processes(node)
        .into_iter()
        .find(|p| {
            let program = p.command.split_whitespace().next().unwrap_or_default();
            program.rsplit('/').next() == Some(name)
        })
        .with_context(|| format!("no {name} on {}", node.name()))?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(process.pid as i32),
        Signal::SIGKILL,
    )
    .with_context(|| format!("kill -9 {name}"))?;
    Ok(format!("{process} on {}", node.name()))
}

/// What is wrong with how the job ended.
fn judge(
    report: &RunReport,
    plan: &Plan,
    (killed, moment): (Instant, Moment),
    victim: usize,
    expected: Ended,
    node: Option<&str>,
) -> Vec<String> {
    let mut problems = Vec::new();
    // The launcher returned once the job ended, the nodes were swept and the output drained.
    let took = killed.elapsed();
    println!(
        "job over {:.2} s after the kill ({report})",
        took.as_secs_f64()
    );
    // At start-up: mpirun's abort (up to the grace period), the sweep's wait for its daemons
    // (as long again), then their end.
    let limit = match moment {
        Moment::MidRun => plan.grace,
        Moment::StartUp => plan.grace * 3,
    };
    if took > limit {
        problems.push(format!(
            "the job was over {:.2} s after the kill, past {:.2} s",
            took.as_secs_f64(),
            limit.as_secs_f64()
        ));
    }
    let named = |how| Outcome::RankFailed { rank: victim, how };
    let unnamed = moment == Moment::StartUp && report.outcome == named(Ended::SignaledUnnamed);
    if report.outcome != named(expected) && !unnamed {
        problems.push(format!(
            "rank {victim} was not named as the culprit: {report}"
        ));
    }
    if let Some(node) = node
        && report.culprit_node.as_deref() != Some(node)
    {
        problems.push(format!("the culprit's node was not named {node}: {report}"));
    }
    // A launcher killed in its abort leaves its daemons to the sweep, which ended them; a
    // rank left behind is always a failure. Slurm's step daemon is Slurm's, not the job's
    // (srun returns without it): named, never held against the job.
    let (slurm_own, job_own): (Vec<_>, Vec<_>) = report
        .left_behind
        .iter()
        .partition(|l| symmem_cluster::is_step_daemon(&l.command));
    for l in slurm_own {
        println!(
            "  note: Slurm's step daemon outlived its step, the sweep ended it: pid {} ({}) \
             on {} (its PMIx server can hang in PMIx_server_finalize once a task died in its \
             PMIx start-up: Slurm's and libpmix's, not the job's)",
            l.pid, l.command, l.node
        );
    }
    let program = plan.binary.to_string_lossy();
    let left_ranks = job_own.iter().any(|l| l.command.contains(program.as_ref()));
    if left_ranks || (!job_own.is_empty() && !report.abort_hung) {
        problems.push(format!("processes left behind: {report}"));
    }
    problems
}

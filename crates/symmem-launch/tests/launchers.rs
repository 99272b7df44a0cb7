//! The cluster launchers' runner against stand-in `srun` and `mpirun` scripts: how each is
//! stopped at the timeout, and what the caller's sweep found ends up in the report.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use symmem_launch::{
    EXIT_PEER_FAILED, Ended, Hosts, LaunchSpec, Launcher, Layout, LeftBehind, Lost, Mpirun,
    Outcome, RunReport, Srun, Sweep,
};
use symmem_test_support::command::write_script;
use symmem_test_support::process::group_empty;

fn spec(timeout: Duration, grace: Duration) -> LaunchSpec {
    LaunchSpec::new("/bin/true", 0)
        .layout(Layout::even(2, 1))
        .timeout(timeout)
        .grace(grace)
}

/// A stand-in launcher script `name` with `body`, in a folder that lives as long as the guard.
fn stand_in(name: &str, body: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(name);
    write_script(&path, &format!("#!/bin/sh\n{body}"));
    (dir, path)
}

/// Runs a two-node spec with `launcher`.
fn launch(launcher: &Launcher, timeout: Duration, grace: Duration) -> RunReport {
    launcher
        .launch(&spec(timeout, grace), &mut |_| {})
        .expect("the stand-in runs")
}

fn two_hosts() -> Hosts {
    Hosts::List(vec!["a".into(), "b".into()])
}

/// srun stops its tasks only on a second SIGINT within a second (one only makes it print
/// their states): at the timeout it gets two, and ends by itself before any SIGKILL.
#[test]
fn srun_is_stopped_with_two_interrupts() {
    let (_dir, srun) = stand_in(
        "srun",
        "n=0\n\
         trap 'n=$((n + 1)); echo \"INT $n\" >> \"$0.signals\"; [ $n -ge 2 ] && exit 130' INT\n\
         echo '0: started'\n\
         while :; do sleep 0.01; done\n",
    );
    let log = srun.with_extension("signals");
    let launcher = Launcher::Srun(Srun {
        program: srun,
        ..Srun::default()
    });
    let mut lines = Vec::new();
    let report = launcher
        .launch(
            &spec(Duration::from_secs(1), Duration::from_secs(30)),
            &mut |l| lines.push(l.clone()),
        )
        .expect("the stand-in runs");
    assert!(
        matches!(report.outcome, Outcome::TimedOut { .. }),
        "{report}"
    );
    assert_eq!(lines[0].rank, Some(0), "{lines:?}");
    let seen = std::fs::read_to_string(&log).expect("the stand-in logged its signals");
    assert_eq!(seen, "INT 1\nINT 2\n");
    assert!(group_empty(report.pgid), "srun's group is empty");
}

/// mpirun gets SIGTERM at the timeout, and its whole group SIGKILL after the grace period
/// when it ignores that; then the sweep is asked what the job left on the nodes, and what it
/// found makes the run a failure.
#[test]
fn mpirun_that_ignores_sigterm_is_killed_and_the_sweep_is_reported() {
    let (_dir, mpirun) = stand_in(
        "mpirun",
        "trap '' TERM\necho '[1,1]<stdout>:started'\nsleep 600 &\nwait\n",
    );
    let asked = Arc::new(Mutex::new(Vec::new()));
    let sweep = {
        let asked = Arc::clone(&asked);
        Sweep::new(move |grace| {
            asked.lock().expect("lock").push(grace);
            vec![LeftBehind {
                node: "node-b".into(),
                pid: 4242,
                command: "orted".into(),
            }]
        })
    };
    let launcher = Launcher::Mpirun(Mpirun {
        program: mpirun,
        sweep: Some(sweep),
        ..Mpirun::new(two_hosts())
    });
    let grace = Duration::from_millis(300);
    let report = launch(&launcher, Duration::from_millis(500), grace);
    assert!(
        matches!(report.outcome, Outcome::TimedOut { .. }),
        "{report}"
    );
    assert!(
        group_empty(report.pgid),
        "mpirun's group, its sleep too, is gone"
    );
    assert_eq!(*asked.lock().expect("lock"), [grace]);
    assert!(!report.success() && report.exit_code() != 0);
    assert!(
        report
            .to_string()
            .contains("left behind (killed): pid 4242 (orted) on node-b"),
        "{report}"
    );
}

/// A launcher that fails without naming a rank is reported as such, with its last words.
#[test]
fn a_launcher_failing_on_its_own_is_named_with_what_it_said() {
    let (_dir, srun) = stand_in(
        "srun",
        "echo 'srun: error: Unable to allocate resources: Invalid partition' >&2\nexit 1\n",
    );
    let launcher = Launcher::Srun(Srun {
        program: srun,
        ..Srun::default()
    });
    let report = launch(&launcher, Duration::from_secs(30), Duration::from_secs(1));
    assert!(
        matches!(
            report.outcome,
            Outcome::LauncherFailed {
                launcher: "srun",
                ..
            }
        ),
        "{report}"
    );
    assert_eq!(report.exit_code(), 1);
    assert!(
        report.to_string().ends_with(
            "it said last: srun: error: Unable to allocate resources: Invalid partition"
        ),
        "{report}"
    );
}

/// What a launcher leaves running in its process group on this host when it exits (here a
/// background `sleep`) is killed and reported: the run fails.
#[test]
fn what_the_launcher_leaves_in_its_group_is_killed_and_reported() {
    let (_dir, mpirun) = stand_in(
        "mpirun",
        "sleep 600 &\n\
         n=0\n\
         while [ $n -lt 1000 ] && [ \"$(cat /proc/$!/comm)\" != sleep ]; do n=$((n + 1)); done\n\
         echo '[1,0]<stdout>:done'\nexit 0\n",
    );
    let launcher = Launcher::Mpirun(Mpirun {
        program: mpirun,
        ..Mpirun::new(two_hosts())
    });
    let report = launch(&launcher, Duration::from_secs(30), Duration::from_secs(1));
    assert_eq!(report.outcome, Outcome::Success, "{report}");
    let left: Vec<(&str, &str)> = report
        .left_behind
        .iter()
        .map(|l| (l.node.as_str(), l.command.as_str()))
        .collect();
    assert_eq!(left, [("this host", "sleep")], "{report}");
    assert!(!report.success() && report.exit_code() == 1, "{report}");
    assert!(group_empty(report.pgid), "the sleep is gone");
}

/// R4: srun's helper process may still be ending when srun itself has exited; one that ends
/// by itself within moments is not left behind, and the run passes.
#[test]
fn a_helper_of_the_launcher_that_ends_by_itself_is_not_left_behind() {
    let (_dir, srun) = stand_in(
        "srun",
        "sleep 0.2 &
         n=0
         while [ $n -lt 1000 ] && [ \"$(cat /proc/$!/comm)\" != sleep ]; do n=$((n + 1)); done
         echo '0: done'
exit 0
",
    );
    let launcher = Launcher::Srun(Srun {
        program: srun,
        ..Srun::default()
    });
    let report = launch(&launcher, Duration::from_secs(30), Duration::from_secs(1));
    assert_eq!(report.outcome, Outcome::Success, "{report}");
    assert_eq!(report.left_behind, [], "{report}");
    assert!(report.success(), "{report}");
}

/// Runs a stand-in mpirun of 4 ranks (2 x 2) printing `body`'s output.
fn mpirun_says(body: &str) -> RunReport {
    mpirun_says_within(body, Duration::from_secs(30))
}

/// [`mpirun_says`] with the job's `timeout`.
fn mpirun_says_within(body: &str, timeout: Duration) -> RunReport {
    let (_dir, mpirun) = stand_in("mpirun", body);
    let launcher = Launcher::Mpirun(Mpirun {
        program: mpirun,
        ..Mpirun::new(two_hosts())
    });
    let spec = LaunchSpec::new("/bin/true", 4)
        .layout(Layout::even(2, 2))
        .timeout(timeout)
        .grace(Duration::from_secs(1));
    launcher
        .launch(&spec, &mut |_| {})
        .expect("the stand-in runs")
}

/// A rank stopped after its last collective: the others finish (mpirun's log of states says
/// so) and mpirun waits for it until the timeout. Only that rank is named as still running,
/// with its node, not every rank; what mpirun logs once told to end the job (it calls the
/// ranks it killed ended normally) does not count.
#[test]
fn at_the_timeout_only_the_ranks_mpirun_did_not_see_end_are_still_running() {
    let state = |node: &str, rank: usize, state: &str| {
        format!(
            "echo '[{node}:14800] [[20282,0],0] ACTIVATE PROC [[20282,1],{rank}] STATE {state} \
             AT ../../orte/mca/state/base/state_base_fns.c:640' >&2\n"
        )
    };
    let mut body = String::new();
    for (node, rank) in [("node-a", 0), ("node-a", 1), ("node-b", 2)] {
        body += &state(node, rank, "NORMALLY TERMINATED");
    }
    body += &format!(
        "trap \"{}exit 1\" TERM\nwhile :; do sleep 0.1; done\n",
        state("node-b", 3, "NORMALLY TERMINATED").replace('\n', "; ")
    );
    let report = mpirun_says_within(&body, Duration::from_secs(1));
    assert_eq!(
        report.outcome,
        Outcome::TimedOut {
            still_running: vec![3]
        },
        "{report}"
    );
    assert_eq!(report.culprit_node.as_deref(), Some("b"));
    let text = report.to_string();
    assert!(
        text.contains(
            "rank 3 on b still running (stopped, or hung?) after the other ranks had \
                       finished"
        ),
        "{text}"
    );
}

/// M3: a rank that exits 0 before the others are done is named, with its node, from mpirun's
/// "exiting improperly" report (it was reported as mpirun failing on its own).
#[test]
fn mpirun_names_a_rank_that_exited_improperly() {
    let report = mpirun_says(
        "echo '[1,0]<stdout>:check 5 passed'\n\
         echo 'mpirun has exited due to process rank 3 with PID 2703 on' >&2\n\
         echo 'node node-b exiting improperly. There are three reasons this could occur:' >&2\n\
         exit 1\n",
    );
    assert_eq!(
        report.outcome,
        Outcome::PeerLost {
            culprits: vec![3],
            reason: Lost::ExitedEarly,
            reporters: vec![],
        },
        "{report}"
    );
    assert_eq!(report.culprit_node.as_deref(), Some("node-b"));
    assert_eq!(report.exit_code(), EXIT_PEER_FAILED);
    let text = report.to_string();
    assert!(text.contains("rank 3 on node-b exited early"), "{text}");
}

/// M3: a hung (or SIGSTOPped) rank. Its peers time out and exit 75, and mpirun names the first
/// of them: a witness, never the culprit. The culprit is the rank that wrote no witness's
/// report.
#[test]
fn mpirun_never_names_a_witness_of_a_hung_rank() {
    let timeout = "not every rank reached collective #71 free(allocation #69) within 10s \
                   through PMIx";
    // What symmem-bootstrap writes beside the error: PMIx cannot say which rank hung.
    let witness = "symmem-witness: rank=$r accused= gone=- during=collective #71 free";
    let report = mpirun_says(&format!(
        "for r in 0 1 2; do echo \"[1,$r]<stderr>:rank $r: ERROR: {timeout}\"; \
         echo \"[1,$r]<stderr>:{witness}\"; done\n\
         echo 'mpirun detected that one or more processes exited with non-zero status, thus \
         causing' >&2\n\
         echo 'the job to be terminated. The first process to do so was:' >&2\n\
         echo '  Process name: [[21097,1],1]' >&2\n\
         echo '  Exit code:    75' >&2\n\
         exit 75\n"
    ));
    assert_eq!(
        report.outcome,
        Outcome::PeerLost {
            culprits: vec![3],
            reason: Lost::StillRunning,
            reporters: vec![1, 0, 2],
        },
        "{report}"
    );
    let text = report.to_string();
    assert!(
        text.starts_with("rank 3 on b was still running (hung?)"),
        "{text}"
    );
    // mpirun placed rank 3 on the second host itself (`--host a:2,b:2`).
    assert_eq!(report.culprit_node.as_deref(), Some("b"));
}

/// Every error by which symmem-bootstrap gives up on another rank (the engine's rendezvous, a
/// collective over its own links, a start-up) gives a witness's line, which reads back whole,
/// naming the ranks it waited for: what a cluster launcher's runner reads.
#[test]
fn every_witness_error_gives_a_line_the_runner_reads() {
    use symmem::{CollectiveKind, CollectiveOp};
    use symmem_bootstrap::{BootstrapError, CollectiveFailure};
    let op = CollectiveOp {
        seq: 7,
        kind: CollectiveKind::Barrier,
    };
    let waited = Duration::from_secs(10);
    let node = "node-b".to_string();
    let reports = [
        BootstrapError::EngineTimeout {
            op: op.clone(),
            waited,
        },
        BootstrapError::EnginePeerLost {
            op: op.clone(),
            text: "LOST-CONNECTION".into(),
        },
        CollectiveFailure::NeverArrived {
            op: op.clone(),
            missing: vec![1],
            waited_ms: 10_000,
        }
        .into(),
        CollectiveFailure::PeerGone {
            rank: 1,
            op: op.clone(),
        }
        .into(),
        CollectiveFailure::GoneFromNode {
            rank: 3,
            node: node.clone(),
            op: op.clone(),
        }
        .into(),
        BootstrapError::RootGone { op: op.clone() },
        BootstrapError::RootSilent {
            op: op.clone(),
            waited,
        },
        BootstrapError::LeaderGone {
            leader: 2,
            node: node.clone(),
            op: op.clone(),
        },
        BootstrapError::LeaderSilent {
            leader: 2,
            node,
            op: op.clone(),
            waited,
        },
        BootstrapError::AcceptTimeout {
            missing: vec![3],
            centre: 2,
            path: "/tmp/r/node-1/rank0.sock".into(),
            waited,
        },
        BootstrapError::ConnectTimeout {
            rank: 3,
            centre: 2,
            path: "/tmp/r/node-1/rank0.sock".into(),
            waited,
        },
        BootstrapError::NoWelcome { centre: 2, waited },
        BootstrapError::LeadersMissing {
            missing: vec![2],
            centre: 0,
            addr: "127.0.0.2:5000".parse().expect("an address"),
            waited,
        },
        CollectiveFailure::AboveLost {
            rank: 2,
            node: "node-a".into(),
            op,
        }
        .into(),
        BootstrapError::LeftBeforeWelcome { rank: 3, centre: 2 },
    ];
    let accused: [&[usize]; 15] = [
        &[],
        &[],
        &[1],
        &[1],
        &[3],
        &[],
        &[],
        &[],
        &[],
        &[3],
        &[2],
        &[2],
        &[2],
        &[2],
        &[3],
    ];
    for (report, accused) in reports.iter().zip(accused) {
        let witness = report
            .witness(5)
            .unwrap_or_else(|| panic!("{report} gives no witness"));
        assert_eq!(witness.accused, accused, "{report}");
        let line = format!("[1,5]<stderr>:{}", witness.line());
        assert_eq!(symmem::Witness::parse(&line), Some(witness), "{line}");
    }
    let gone: Vec<_> = reports.iter().filter_map(|r| r.witness(5)?.gone).collect();
    // A leader above lost is no claim that it went away on its own (the launcher may have
    // ended it); a rank gone before its welcome is.
    assert_eq!(
        gone,
        [(1, None), (3, Some("node-b".to_string())), (3, None)]
    );
    // Errors of this rank's own give none.
    assert_eq!(BootstrapError::WorldSizeZero.witness(5), None);
}

/// M6: a rank killed during start-up, and mpirun hanging for good in its abort (Open MPI
/// 4.1.4). Its report never names the rank, so its log of states does; and from the notice
/// that it aborts the job, it has the grace period to end, then its group gets SIGKILL (it
/// waited for the job's timeout before).
#[test]
fn mpirun_hung_in_its_abort_is_ended_and_the_rank_named_from_its_log() {
    let report = mpirun_says(
        "trap '' TERM\n\
         echo '[node-b:14800] [[20282,0],1] ACTIVATE PROC [[20282,1],3] STATE ABORTED BY \
         SIGNAL AT ../../orte/mca/odls/base/odls_base_default_fns.c:1746' >&2\n\
         echo 'Primary job  terminated normally, but 1 process returned' >&2\n\
         echo 'a non-zero exit code. Per user-direction, the job has been aborted.' >&2\n\
         while :; do sleep 1; done\n",
    );
    assert_eq!(
        report.outcome,
        Outcome::RankFailed {
            rank: 3,
            how: Ended::SignaledUnnamed,
        },
        "{report}"
    );
    assert_eq!(report.culprit_node.as_deref(), Some("node-b"));
    assert!(report.abort_hung, "{report}");
    assert!(report.to_string().contains("hung in its abort"), "{report}");
}

//! The launcher against real processes.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use symmem_launch::{
    EXIT_PEER_FAILED, Ended, LaunchError, LaunchSpec, Lost, MAX_RANKS, Outcome, RunReport, Started,
    Stream, launch_with,
};
use symmem_test_support::launch::{
    GRACE, assert_all_gone, assert_ended_within, lines_of, peer_lost_sorted, run, sh,
};
use symmem_test_support::process::gone;

/// Scheduling slack on a loaded 2-core machine.
const MARGIN: Duration = Duration::from_secs(3);

/// Rank 1 of 4 is named for leaving early (status 0) and ranks 0, 2 and 3 as those who reported
/// it (sorted: they race to give up), the run exits 75, nobody had to be stopped, and it ended
/// within [`GRACE`] + [`MARGIN`] leaving nothing behind.
fn assert_rank_1_of_4_named_as_exited_early(report: &RunReport, elapsed: Duration) {
    let (culprits, reason, reporters) = peer_lost_sorted(report);
    assert_eq!(
        (culprits, reason, reporters.as_slice()),
        ([1].as_slice(), Lost::ExitedEarly, [0, 2, 3].as_slice()),
        "{report}"
    );
    assert_eq!(report.exit_code(), EXIT_PEER_FAILED);
    assert!(
        report.ranks.iter().all(|r| !r.stopped),
        "{:?}",
        report.ranks
    );
    assert_ended_within(report, elapsed, GRACE + MARGIN);
}

#[test]
fn every_rank_gets_torchrun_environment_and_a_private_rendezvous() {
    let script = r#"echo "$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR $MASTER_PORT $SYMMEM_RENDEZVOUS"
        test -d "$SYMMEM_RENDEZVOUS" && echo "dir ok""#;
    let spec = sh(script, 4);
    let mut lines = Vec::new();
    let mut seen = None;
    let report = launch_with(
        &spec,
        &mut |line| lines.push(line.clone()),
        &mut |started: &Started<'_>| {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(started.rendezvous)
                .expect("rendezvous exists while ranks run")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o700, "rendezvous must be private");
            assert_eq!(started.pids.len(), 4);
            seen = Some((started.rendezvous.to_path_buf(), started.master_port));
        },
    )
    .expect("launch");
    assert_eq!(report.outcome, Outcome::Success, "{report}");
    assert!(report.success() && report.exit_code() == 0);
    let (dir, port) = seen.expect("on_started was called");
    assert_ne!(port, 0);
    for rank in 0..4 {
        let got = lines_of(&lines, rank);
        let want = format!("{rank} 4 {rank} 4 0 127.0.0.1 {port} {}", dir.display());
        assert_eq!(got, [want.as_str(), "dir ok"], "rank {rank}");
    }
    assert!(
        !dir.exists(),
        "rendezvous {} must be removed",
        dir.display()
    );
    assert_all_gone(&report);
    assert!(
        report.to_string().starts_with("4 ranks succeeded in "),
        "{report}"
    );
}

#[test]
fn caller_rendezvous_is_used_and_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = sh(r#"echo "$SYMMEM_RENDEZVOUS""#, 2).env("SYMMEM_RENDEZVOUS", dir.path());
    let (report, lines, _) = run(&spec);
    assert!(report.expect("launch").success());
    let want = dir.path().display().to_string();
    assert_eq!(lines_of(&lines, 0), [want.as_str()]);
    assert_eq!(lines_of(&lines, 1), [want.as_str()]);
    assert!(dir.path().is_dir(), "the caller's directory must be kept");
}

#[test]
fn extra_env_and_per_rank_env() {
    let mut spec = sh(r#"echo "$COMMON $MINE $MASTER_ADDR""#, 2).env("MASTER_ADDR", "10.0.0.1");
    spec.env.push(("COMMON".into(), "c".into()));
    spec.rank_env = vec![
        vec![("MINE".into(), "zero".into())],
        vec![("MINE".into(), "one".into())],
    ];
    let (report, lines, _) = run(&spec);
    assert!(report.expect("launch").success());
    assert_eq!(lines_of(&lines, 0), ["c zero 10.0.0.1"]);
    assert_eq!(lines_of(&lines, 1), ["c one 10.0.0.1"]);
}

#[test]
fn output_keeps_order_streams_unterminated_lines_and_bad_utf8() {
    let script = r"printf 'a\nb\n'; printf 'oops\n' >&2; printf 'c\n\377x\nno newline'";
    let (report, lines, _) = run(&sh(script, 1));
    assert!(report.expect("launch").success());
    let stdout: Vec<&str> = lines
        .iter()
        .filter(|l| l.stream == Stream::Stdout)
        .map(|l| l.text.as_str())
        .collect();
    assert_eq!(stdout, ["a", "b", "c", "\u{fffd}x", "no newline"]);
    let stderr: Vec<&str> = lines
        .iter()
        .filter(|l| l.stream == Stream::Stderr)
        .map(|l| l.text.as_str())
        .collect();
    assert_eq!(stderr, ["oops"]);
}

#[test]
fn first_failing_rank_stops_the_others() {
    let script = r#"if [ "$RANK" = 2 ]; then echo bye; exit 3; fi; exec sleep 100"#;
    let (report, lines, elapsed) = run(&sh(script, 4));
    let report = report.expect("launch");
    assert_eq!(
        report.outcome,
        Outcome::RankFailed {
            rank: 2,
            how: Ended::Exited(3)
        }
    );
    assert_eq!(report.exit_code(), 3);
    assert_eq!(
        report.to_string(),
        "rank 2 exited with status 3 first; the other ranks were stopped"
    );
    assert!(elapsed < GRACE + MARGIN, "took {elapsed:?}");
    assert_eq!(
        lines_of(&lines, 2),
        ["bye"],
        "output of the culprit is drained"
    );
    for r in report.ranks.iter().filter(|r| r.rank != 2) {
        assert!(r.stopped, "rank {} was stopped", r.rank);
        assert_eq!(r.ended, Some(Ended::Signaled(15)), "rank {}", r.rank);
    }
    assert_all_gone(&report);
}

#[test]
fn peers_that_give_up_first_are_not_blamed() {
    // The peers of rank 2 exit 75 as soon as it announces its end, typically
    // before it is seen to fail: it is still the culprit.
    let script = r#"
        if [ "$RANK" = 2 ]; then touch "$SYMMEM_RENDEZVOUS/bye"; sleep 0.05; exit 3; fi
        while [ ! -e "$SYMMEM_RENDEZVOUS/bye" ]; do sleep 0.01; done
        echo "lost rank 2"; exit 75"#;
    let (report, lines, elapsed) = run(&sh(script, 4));
    let report = report.expect("launch");
    assert_eq!(
        report.outcome,
        Outcome::RankFailed {
            rank: 2,
            how: Ended::Exited(3)
        },
        "{report}"
    );
    assert_eq!(report.exit_code(), 3);
    assert_eq!(
        report.to_string(),
        "rank 2 exited with status 3 first; ranks 0, 1, 3 gave up on a lost peer (status 75)"
    );
    for r in report.ranks.iter().filter(|r| r.rank != 2) {
        assert!(!r.stopped, "rank {} ended on its own", r.rank);
        assert_eq!(r.ended, Some(Ended::Exited(EXIT_PEER_FAILED)));
        assert_eq!(lines_of(&lines, r.rank), ["lost rank 2"]);
    }
    assert_ended_within(&report, elapsed, GRACE + MARGIN);
}

#[test]
fn a_rank_that_exits_0_while_needed_is_named() {
    // Rank 1 leaves with status 0; the others notice only once the launcher
    // has reaped it (a zombie still answers `kill -0`), then exit 75.
    let script = r#"
        if [ "$RANK" = 1 ]; then echo $$ > "$SYMMEM_RENDEZVOUS/pid.tmp";
          mv "$SYMMEM_RENDEZVOUS/pid.tmp" "$SYMMEM_RENDEZVOUS/pid"; exit 0; fi
        while [ ! -e "$SYMMEM_RENDEZVOUS/pid" ]; do sleep 0.01; done
        while kill -0 "$(cat "$SYMMEM_RENDEZVOUS/pid")" 2>/dev/null; do sleep 0.01; done
        exit 75"#;
    let (report, _, elapsed) = run(&sh(script, 4));
    let report = report.expect("launch");
    assert_rank_1_of_4_named_as_exited_early(&report, elapsed);
    let summary = report.to_string();
    assert!(
        summary.starts_with(
            "rank 1 exited early with status 0 while the others still needed it: ranks "
        ),
        "{summary}"
    );
}

#[test]
fn a_departure_seen_after_the_reports_it_caused_is_still_named() {
    // The order of issue 11's race, made certain: rank 1 announces that it
    // leaves, the others exit 75 at once, and rank 1 exits 0 only after the
    // launcher has reaped all of them (a zombie still answers `kill -0`), as
    // a departed rank still tearing down under load does. The launcher sees
    // the reports first and must still name rank 1, never a reporter.
    let script = r#"
        if [ "$RANK" != 1 ]; then
          echo $$ > "$SYMMEM_RENDEZVOUS/pid$RANK.tmp"; mv "$SYMMEM_RENDEZVOUS/pid$RANK.tmp" "$SYMMEM_RENDEZVOUS/pid$RANK"
          while [ ! -e "$SYMMEM_RENDEZVOUS/bye" ]; do sleep 0.01; done
          exit 75
        fi
        for r in 0 2 3; do while [ ! -e "$SYMMEM_RENDEZVOUS/pid$r" ]; do sleep 0.01; done; done
        pids="$(cat "$SYMMEM_RENDEZVOUS/pid0" "$SYMMEM_RENDEZVOUS/pid2" "$SYMMEM_RENDEZVOUS/pid3")"
        touch "$SYMMEM_RENDEZVOUS/bye"
        for pid in $pids; do while kill -0 "$pid" 2>/dev/null; do sleep 0.01; done; done
        exit 0"#;
    let (report, _, elapsed) = run(&sh(script, 4));
    let report = report.expect("launch");
    assert_rank_1_of_4_named_as_exited_early(&report, elapsed);
}

#[test]
fn a_rank_the_others_gave_up_on_is_named_as_hung() {
    // Rank 3 hangs; the others give up at slightly different times.
    let script = r#"
        if [ "$RANK" = 3 ]; then exec sleep 100; fi
        sleep 0.3; exit 75"#;
    let (report, _, elapsed) = run(&sh(script, 4));
    let report = report.expect("launch");
    let (culprits, reason, reporters) = peer_lost_sorted(&report);
    assert_eq!(
        (culprits, reason, reporters.as_slice()),
        ([3].as_slice(), Lost::StillRunning, [0, 1, 2].as_slice()),
        "{report}"
    );
    assert_eq!(report.exit_code(), 75);
    let summary = report.to_string();
    assert!(
        summary.starts_with("rank 3 was still running (hung?) when ranks ")
            && summary.ends_with(" gave up waiting for it (status 75); it was stopped"),
        "{summary}"
    );
    let stopped: Vec<usize> = report
        .ranks
        .iter()
        .filter(|r| r.stopped)
        .map(|r| r.rank)
        .collect();
    assert_eq!(stopped, [3]);
    assert_eq!(report.ranks[3].ended, Some(Ended::Signaled(15)));
    assert_ended_within(&report, elapsed, GRACE + MARGIN);
}

#[test]
fn rank_killed_by_a_signal() {
    let script = r#"if [ "$RANK" = 1 ]; then kill -SEGV $$; fi; exec sleep 100"#;
    let (report, _, elapsed) = run(&sh(script, 3));
    let report = report.expect("launch");
    assert_eq!(
        report.outcome,
        Outcome::RankFailed {
            rank: 1,
            how: Ended::Signaled(11)
        }
    );
    assert_eq!(report.exit_code(), 128 + 11);
    assert!(
        report
            .to_string()
            .starts_with("rank 1 was killed by signal 11 (SIGSEGV) first"),
        "{report}"
    );
    assert_ended_within(&report, elapsed, GRACE + MARGIN);
}

#[test]
fn rank_ignoring_sigterm_gets_sigkill_after_grace() {
    // Rank 1 ignores SIGTERM (the ignore is inherited by `sleep`) and says so
    // through the rendezvous directory; only then does rank 0 fail, so the
    // SIGTERM surely finds the trap in place.
    let script = r#"
        case "$RANK" in
          0) while [ ! -e "$SYMMEM_RENDEZVOUS/ready" ]; do sleep 0.02; done; exit 5 ;;
          1) trap '' TERM; touch "$SYMMEM_RENDEZVOUS/ready"; sleep 100; echo survived ;;
          *) sleep 100 ;;
        esac"#;
    let (report, lines, elapsed) = run(&sh(script, 3));
    let report = report.expect("launch");
    assert_eq!(
        report.outcome,
        Outcome::RankFailed {
            rank: 0,
            how: Ended::Exited(5)
        }
    );
    // It took the grace period: SIGTERM really was ignored...
    assert!(elapsed >= GRACE, "took {elapsed:?}");
    // ...and SIGKILL ended it right after.
    assert!(elapsed < GRACE + MARGIN, "took {elapsed:?}");
    assert_eq!(report.ranks[1].ended, Some(Ended::Signaled(9)));
    assert_eq!(report.ranks[2].ended, Some(Ended::Signaled(15)));
    assert!(lines_of(&lines, 1).is_empty(), "{lines:?}");
    assert_all_gone(&report);
}

#[test]
fn timeout_lists_the_ranks_still_running() {
    let spec = sh("exec sleep 100", 3).timeout(Duration::from_secs(1));
    let (report, _, elapsed) = run(&spec);
    let report = report.expect("launch");
    assert_eq!(
        report.outcome,
        Outcome::TimedOut {
            still_running: vec![0, 1, 2]
        }
    );
    assert_eq!(report.exit_code(), 124);
    assert_eq!(
        report.to_string(),
        "timed out after 1s; ranks still running: 0, 1, 2"
    );
    assert!(elapsed >= Duration::from_secs(1), "took {elapsed:?}");
    assert!(
        elapsed < Duration::from_secs(1) + GRACE + MARGIN,
        "took {elapsed:?}"
    );
    assert_all_gone(&report);
}

#[test]
fn grandchildren_in_the_group_are_killed_too() {
    let script = r#"
        if [ "$RANK" = 0 ]; then
          sleep 100 & echo $!; touch "$SYMMEM_RENDEZVOUS/ready"; wait
        else
          while [ ! -e "$SYMMEM_RENDEZVOUS/ready" ]; do sleep 0.02; done; exit 4
        fi"#;
    let (report, lines, elapsed) = run(&sh(script, 2));
    let report = report.expect("launch");
    assert_eq!(
        report.outcome,
        Outcome::RankFailed {
            rank: 1,
            how: Ended::Exited(4)
        }
    );
    let grandchild: i32 = lines_of(&lines, 0)[0].parse().expect("rank 0 echoes a pid");
    assert!(gone(grandchild), "grandchild {grandchild} survived");
    assert_ended_within(&report, elapsed, GRACE + MARGIN);
}

#[test]
fn background_processes_left_by_successful_ranks_are_stopped() {
    // Each rank exits 0 at once but leaves a `sleep` holding its stdout open.
    let (report, lines, elapsed) = run(&sh("sleep 100 & echo $!", 2));
    let report = report.expect("launch");
    assert_eq!(report.outcome, Outcome::Success, "{report}");
    for rank in 0..2 {
        let pid: i32 = lines_of(&lines, rank)[0].parse().expect("a pid");
        assert!(
            gone(pid),
            "background process {pid} of rank {rank} survived"
        );
    }
    assert_ended_within(&report, elapsed, GRACE + MARGIN);
}

#[test]
fn processes_that_leave_the_group_are_named_and_ended() {
    // Each rank starts a `sleep` in a session of its own, out of the ranks' process group,
    // that keeps the rank's stdout. Rank 1 starts two more: one that let go of the pipes (found
    // by the run id it inherited) and one with an empty environment (found by the pipe).
    // Each prints the pid once `sleep` runs (so `setsid` has happened: it comes before the exec).
    let script = r#"
        running() {
          until [ "$(cat /proc/$1/comm 2>/dev/null)" = sleep ]; do sleep 0.01; done
          echo $1
        }
        setsid sleep 100 & running $!
        if [ "$RANK" = 1 ]; then
          setsid sleep 101 >/dev/null 2>&1 </dev/null & running $!
          env -i setsid sleep 102 & running $!
        fi"#;
    let (report, lines, elapsed) = run(&sh(script, 2));
    let report = report.expect("launch");
    assert_eq!(report.outcome, Outcome::Success, "{report}");
    let mut started: Vec<i32> = (0..2)
        .flat_map(|rank| {
            lines_of(&lines, rank)
                .into_iter()
                .map(|l| l.parse::<i32>().expect("a pid"))
        })
        .collect();
    started.sort_unstable();
    let mut named: Vec<i32> = report.escaped.iter().map(|e| e.pid).collect();
    named.sort_unstable();
    assert_eq!(named, started, "{report}");
    assert!(
        report.escaped.iter().all(|e| e.command == "sleep"),
        "{:?}",
        report.escaped
    );
    for pid in started {
        assert!(gone(pid), "escaped process {pid} survived the run");
    }
    let summary = report.to_string();
    assert!(
        summary.contains("4 processes started by the ranks had left their process group (setsid?) and were ended: pid "),
        "{summary}"
    );
    // They were ended, not waited for: no silent 2 s wait on their pipes.
    assert_eq!(report.output_wait, Duration::ZERO, "{summary}");
    assert_ended_within(&report, elapsed, GRACE + MARGIN);
}

#[test]
fn spawn_time_and_pids_are_reported() {
    let (report, _, _) = run(&sh("exit 0", 8));
    let report = report.expect("launch");
    assert_eq!(report.ranks.len(), 8);
    assert_eq!(report.pgid, report.ranks[0].pid as i32);
    let pids: BTreeSet<u32> = report.ranks.iter().map(|r| r.pid).collect();
    assert_eq!(pids.len(), 8);
    assert!(report.spawn_time <= report.elapsed);
    assert!(
        report
            .ranks
            .iter()
            .all(|r| r.ended == Some(Ended::Exited(0)) && !r.stopped)
    );
}

#[test]
fn ranks_ending_before_sigterm_are_not_marked_stopped() {
    // Rank 0 fails; rank 1 finishes successfully during the settle window,
    // rank 2 is still running and is stopped.
    let script = r#"
        case "$RANK" in
          0) exit 9 ;;
          1) sleep 0.05; exit 0 ;;
          *) exec sleep 100 ;;
        esac"#;
    let (report, _, _) = run(&sh(script, 3));
    let report = report.expect("launch");
    assert_eq!(
        report.outcome,
        Outcome::RankFailed {
            rank: 0,
            how: Ended::Exited(9)
        }
    );
    let stopped: Vec<bool> = report.ranks.iter().map(|r| r.stopped).collect();
    assert_eq!(stopped, [false, false, true], "{:?}", report.ranks);
    assert_eq!(report.ranks[1].ended, Some(Ended::Exited(0)));
    assert_eq!(
        report.to_string(),
        "rank 0 exited with status 9 first; rank 2 was stopped"
    );
}

#[test]
fn bad_input_gives_typed_helpful_errors() {
    let err = run(&sh("true", 0)).0.unwrap_err();
    assert!(matches!(err, LaunchError::NoRanks), "{err}");

    let err = run(&sh("true", MAX_RANKS + 1)).0.unwrap_err();
    assert!(
        matches!(err, LaunchError::TooManyRanks { ranks, max } if ranks == MAX_RANKS + 1 && max == MAX_RANKS)
    );
    assert!(err.to_string().contains("at most 256 ranks"), "{err}");

    let missing = PathBuf::from("/nonexistent/symmem-test-program");
    let err = run(&LaunchSpec::new(&missing, 2)).0.unwrap_err();
    assert!(matches!(err, LaunchError::ProgramNotFound { .. }), "{err}");
    assert!(
        err.to_string().contains("/nonexistent/symmem-test-program"),
        "{err}"
    );
    assert!(err.to_string().contains("build the program"), "{err}");

    let err = run(&LaunchSpec::new("symmem-no-such-program", 2))
        .0
        .unwrap_err();
    assert!(err.to_string().contains("not found in PATH"), "{err}");

    let mut spec = sh("true", 3);
    spec.rank_env = vec![Vec::new(); 2];
    let err = run(&spec).0.unwrap_err();
    assert!(
        matches!(
            err,
            LaunchError::RankEnvMismatch {
                entries: 2,
                ranks: 3
            }
        ),
        "{err}"
    );
}

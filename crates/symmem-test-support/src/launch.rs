//! Runs through `symmem_launch`, and what every test asserts of their reports.

use crate::process::{gone, group_empty, group_members};
use std::path::Path;
use std::time::{Duration, Instant};
use symmem::settings::HOST_HEAP_SIZE;
use symmem_launch::{LaunchError, LaunchSpec, Lost, Outcome, OutputLine, RunReport, launch};

/// A short grace between SIGTERM and SIGKILL, so that tests stay fast.
pub const GRACE: Duration = Duration::from_secs(1);

/// `ranks` ranks of `/bin/sh -c script`, grace [`GRACE`], timeout 10 s.
pub fn sh(script: &str, ranks: usize) -> LaunchSpec {
    LaunchSpec::new("/bin/sh", ranks)
        .args(["-c", script])
        .grace(GRACE)
        .timeout(Duration::from_secs(10))
}

/// `ranks` ranks of a program that runs the host provider: 64 MiB heaps, grace [`GRACE`],
/// timeout 60 s.
pub fn host_ranks(program: impl AsRef<Path>, ranks: usize) -> LaunchSpec {
    LaunchSpec::new(program.as_ref(), ranks)
        .env(HOST_HEAP_SIZE.name, "64M")
        .timeout(Duration::from_secs(60))
        .grace(GRACE)
}

/// The text lines of one rank, in order.
pub fn lines_of(lines: &[OutputLine], rank: usize) -> Vec<&str> {
    lines
        .iter()
        .filter(|l| l.rank == Some(rank))
        .map(|l| l.text.as_str())
        .collect()
}

/// Every line as `[rank N] text` (a launcher's own as it is), one a line: for assertion messages.
pub fn output(lines: &[OutputLine]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// Runs `spec`, collecting every output line; also says how long the launch took.
pub fn run(spec: &LaunchSpec) -> (Result<RunReport, LaunchError>, Vec<OutputLine>, Duration) {
    let mut lines = Vec::new();
    let start = Instant::now();
    let result = launch(spec, &mut |line| lines.push(line.clone()));
    (result, lines, start.elapsed())
}

/// Every rank of `report` is gone, and nothing but zombies is left in its process group.
pub fn assert_all_gone(report: &RunReport) {
    for r in &report.ranks {
        assert!(
            gone(r.pid as i32),
            "rank {} (pid {}) is still alive",
            r.rank,
            r.pid
        );
    }
    assert!(
        group_empty(report.pgid),
        "processes left in group {}: {:?}",
        report.pgid,
        group_members(report.pgid)
    );
}

/// The run took less than `limit` (`elapsed`, as [`run`] measured it), and left nothing behind
/// ([`assert_all_gone`]).
pub fn assert_ended_within(report: &RunReport, elapsed: Duration, limit: Duration) {
    assert!(elapsed < limit, "took {elapsed:?}: {report}");
    assert_all_gone(report);
}

/// The culprits, reason and reporters of a [`Outcome::PeerLost`]; panics on any other outcome.
pub fn peer_lost(report: &RunReport) -> (&[usize], Lost, &[usize]) {
    match &report.outcome {
        Outcome::PeerLost {
            culprits,
            reason,
            reporters,
        } => (culprits, *reason, reporters),
        other => panic!("unexpected outcome {other:?}: {report}"),
    }
}

/// [`peer_lost`], with the reporters sorted (they race to give up).
pub fn peer_lost_sorted(report: &RunReport) -> (&[usize], Lost, Vec<usize>) {
    let (culprits, reason, reporters) = peer_lost(report);
    let mut sorted = reporters.to_vec();
    sorted.sort_unstable();
    (culprits, reason, sorted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_collects_each_ranks_lines_and_leaves_nothing() {
        let (report, lines, elapsed) = run(&sh("echo one $RANK; echo two $RANK", 2));
        let report = report.expect("launch");
        assert!(report.success(), "{report}");
        assert_eq!(lines_of(&lines, 1), ["one 1", "two 1"]);
        let text = output(&lines);
        assert!(text.contains("[rank 0] one 0\n"), "{text}");
        assert!(text.contains("[rank 1] two 1\n"), "{text}");
        assert_ended_within(&report, elapsed, Duration::from_secs(60));
        // A run that succeeded lost no peer.
        let lost = std::panic::catch_unwind(|| {
            peer_lost(&report);
        });
        assert!(lost.is_err(), "peer_lost accepted {:?}", report.outcome);
    }

    #[test]
    fn peer_lost_names_the_rank_the_others_gave_up_on() {
        let (report, _, _) = run(&sh(
            r#"if [ "$RANK" = 2 ]; then exec sleep 100; fi; sleep 0.2; exit 75"#,
            3,
        ));
        let report = report.expect("launch");
        let (culprits, reason, reporters) = peer_lost_sorted(&report);
        assert_eq!(
            (culprits, reason, reporters.as_slice()),
            ([2].as_slice(), Lost::StillRunning, [0, 1].as_slice()),
            "{report}"
        );
        assert_all_gone(&report);
    }
}

//! The cluster launchers' runner against stand-in `srun` and `mpirun` scripts: how each is
//! stopped at the timeout, and what the caller's sweep found ends up in the report.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use symmem_launch::{
    Hosts, LaunchSpec, Launcher, Layout, LeftBehind, Mpirun, Outcome, RunReport, Srun, Sweep,
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

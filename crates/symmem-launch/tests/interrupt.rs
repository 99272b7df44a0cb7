//! Signals to the launcher's own process. Every scenario runs in a child
//! process (this test binary run again) that first sets SIGINT, SIGTERM and
//! SIGHUP to exactly the dispositions the scenario needs: the outcome must
//! not depend on how `cargo test` was started (a shell starts background jobs
//! with SIGINT ignored, `nohup` ignores SIGHUP), and a signal that should end
//! a process must end only the child.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{SigHandler, Signal, kill, signal};
use nix::unistd::Pid;
use symmem_launch::{Outcome, Started, launch_with};

use symmem_test_support::launch::{GRACE, lines_of, run, sh};
use symmem_test_support::process::{gone, group_empty, ignores};

/// Scheduling slack on a loaded 2-core machine.
const MARGIN: Duration = Duration::from_secs(3);

/// The scenario a child runs, and the signals it ignores before it starts.
const MODE_ENV: &str = "SYMMEM_LAUNCH_TEST_MODE";
const IGNORE_ENV: &str = "SYMMEM_LAUNCH_TEST_IGNORE";
/// Exit status of a child that survived its own signal.
const SURVIVED: i32 = 42;

const SIGNALS: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// Runs [`child_entry`] in a fresh process in `mode`, with `ignored` set to
/// SIG_IGN and the other two of SIGINT/SIGTERM/SIGHUP to SIG_DFL.
fn child(mode: &str, ignored: &[Signal]) -> ExitStatus {
    let ignored: Vec<&str> = ignored.iter().map(|s| s.as_str()).collect();
    Command::new(std::env::current_exe().expect("current_exe"))
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(MODE_ENV, mode)
        .env(IGNORE_ENV, ignored.join(","))
        .stdout(Stdio::null())
        .status()
        .expect("run the test binary again")
}

/// Sets the dispositions [`child`] asked for. Runs before any launch in the
/// child, so the launcher sees them as inherited.
fn set_dispositions() {
    let ignored = std::env::var(IGNORE_ENV).unwrap_or_default();
    for s in SIGNALS {
        let handler = if ignored.split(',').any(|name| name == s.as_str()) {
            SigHandler::SigIgn
        } else {
            SigHandler::SigDfl
        };
        // SAFETY: SIG_DFL and SIG_IGN install no handler code.
        unsafe { signal(s, handler) }.expect("set disposition");
    }
}

/// `signal` to this process from another thread, `after` from now, as a
/// terminal's Ctrl-C or a hangup would arrive.
fn signal_self_later(sig: Signal, after: Duration) {
    std::thread::spawn(move || {
        std::thread::sleep(after);
        kill(Pid::from_raw(std::process::id() as i32), sig).expect("kill");
    });
}

/// The body of every child; does nothing when run as an ordinary test.
#[test]
fn child_entry() {
    let Ok(mode) = std::env::var(MODE_ENV) else {
        return;
    };
    set_dispositions();
    match mode.split_once(':') {
        Some(("interrupt", _)) => interrupt_each_signal(),
        Some(("after", name)) => signal_after_launches(name.parse().expect("signal")),
        Some(("ignored", name)) => ignored_during_and_after_a_run(name.parse().expect("signal")),
        _ => panic!("unknown mode {mode}"),
    }
}

/// Each signal stops a run and is reinstalled for the next one.
fn interrupt_each_signal() {
    for sig in SIGNALS {
        let spec = sh("exec sleep 100", 3);
        let mut on_started = |_: &Started<'_>| signal_self_later(sig, Duration::from_millis(50));
        let report = launch_with(&spec, &mut |_| {}, &mut on_started).expect("launch");
        assert_eq!(report.outcome, Outcome::Interrupted { signal: sig as i32 });
        assert_eq!(report.exit_code(), 130);
        assert_eq!(
            report.to_string(),
            format!("interrupted by {}; all ranks stopped", sig.as_str())
        );
        assert!(report.elapsed < GRACE + MARGIN, "took {:?}", report.elapsed);
        assert!(report.ranks.iter().all(|r| r.stopped && gone(r.pid as i32)));
        assert!(group_empty(report.pgid));
    }
    // Between runs the flag is gone: a fresh run is not born interrupted.
    let (report, _, _) = run(&sh("exit 0", 2));
    assert_eq!(report.expect("launch").outcome, Outcome::Success);
}

/// Two launches, then `sig` to itself: exits [`SURVIVED`] if that did not end it.
fn signal_after_launches(sig: Signal) {
    for _ in 0..2 {
        let (report, _, _) = run(&sh("exit 0", 2));
        assert_eq!(report.expect("launch").outcome, Outcome::Success);
    }
    kill(Pid::from_raw(std::process::id() as i32), sig).expect("kill");
    std::thread::sleep(Duration::from_secs(2));
    std::process::exit(SURVIVED);
}

/// `sig` is ignored from the start: it does not stop a run, the process keeps
/// the ignore (a process it starts after the run inherits it) and survives it
/// after the run; the ranks get the default action (issue 42: a child that
/// ignores SIGTERM outlives the launcher's stop, srun ignoring SIGINT never
/// stops its tasks). Exits [`SURVIVED`].
fn ignored_during_and_after_a_run(sig: Signal) {
    // Each rank reports its own SigIgn mask after the signal was sent.
    let spec = sh("sleep 0.4; cat /proc/self/status", 2);
    let mut lines = Vec::new();
    let mut on_started = |_: &Started<'_>| signal_self_later(sig, Duration::from_millis(50));
    let report =
        launch_with(&spec, &mut |l| lines.push(l.clone()), &mut on_started).expect("launch");
    assert_eq!(report.outcome, Outcome::Success, "{report}");
    for rank in 0..2 {
        let status: String = lines_of(&lines, rank).join("\n");
        assert!(
            !ignores(&status, sig as i32),
            "rank {rank} inherited the ignore of {sig}"
        );
    }
    let later = Command::new("cat")
        .arg("/proc/self/status")
        .output()
        .expect("cat");
    assert!(
        ignores(&String::from_utf8_lossy(&later.stdout), sig as i32),
        "a process started after the run lost the ignore of {sig}"
    );
    kill(Pid::from_raw(std::process::id() as i32), sig).expect("kill");
    std::thread::sleep(Duration::from_millis(200));
    std::process::exit(SURVIVED);
}

#[test]
fn signals_to_the_launcher_stop_the_run_and_handlers_are_reinstalled_per_run() {
    let status = child("interrupt:", &[]);
    assert!(status.success(), "{status:?}");
}

#[test]
fn signals_after_a_launch_act_as_before_it() {
    for sig in SIGNALS {
        let status = child(&format!("after:{sig}"), &[]);
        assert_eq!(
            status.signal(),
            Some(sig as i32),
            "{sig} after a launch must end the process by default: {status:?}"
        );
    }
}

#[test]
fn an_inherited_ignore_is_honoured_during_and_after_runs() {
    // SIGHUP as under nohup, SIGINT as in a background job, and SIGTERM.
    for sig in SIGNALS {
        let status = child(&format!("ignored:{sig}"), &[sig]);
        assert_eq!(status.code(), Some(SURVIVED), "{sig} ignored: {status:?}");
    }
    // Only the ignored one is left alone: SIGINT still stops a run when
    // SIGHUP is ignored.
    let status = child("interrupt:", &[]);
    assert!(status.success(), "{status:?}");
}

#[test]
fn symmem_run_under_nohup_survives_a_hangup() {
    // As `nohup symmem-run ...`: SIGHUP ignored when symmem-run starts.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_symmem-run"));
    cmd.args(["--ranks", "2", "--", "/bin/sh", "-c", "sleep 1"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: signal() is async-signal-safe and installs no handler code.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("symmem-run");
    // Once it says the ranks started, its own signal handling is in place.
    let mut stderr = std::io::BufReader::new(child.stderr.take().expect("stderr"));
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stderr, &mut first).expect("read");
    assert!(first.starts_with("symmem-run: started"), "{first}");
    kill(Pid::from_raw(child.id() as i32), Signal::SIGHUP).expect("hangup");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).expect("read");
    let status = child.wait().expect("wait");
    assert!(status.success(), "{status:?}: {first}{rest}");
}

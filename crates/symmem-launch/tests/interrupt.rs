//! Signals to the launcher's own process. Alone in this test binary (its own
//! process) because the signal would interrupt every launch in the process;
//! what happens to signals after a launch is tested in child processes (this
//! test binary run again), since the right outcome there is to die.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{GRACE, MARGIN, gone, group_empty, run, sh};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use symmem_launch::{Outcome, Started, launch_with};

#[test]
fn signals_to_the_launcher_stop_the_run_and_handlers_are_reinstalled_per_run() {
    for signal in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        let spec = sh("exec sleep 100", 3);
        let mut on_started = |_: &Started<'_>| {
            // From another thread, as a terminal's Ctrl-C would arrive.
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                kill(Pid::from_raw(std::process::id() as i32), signal).expect("kill");
            });
        };
        let report = launch_with(&spec, &mut |_| {}, &mut on_started).expect("launch");
        assert_eq!(
            report.outcome,
            Outcome::Interrupted {
                signal: signal as i32
            }
        );
        assert_eq!(report.exit_code(), 130);
        assert_eq!(
            report.to_string(),
            format!("interrupted by {}; all ranks stopped", signal.as_str())
        );
        assert!(report.elapsed < GRACE + MARGIN, "took {:?}", report.elapsed);
        assert!(report.ranks.iter().all(|r| r.stopped && gone(r.pid as i32)));
        assert!(group_empty(report.pgid));
    }
    // Between runs the flag is gone: a fresh run is not born interrupted.
    let (report, _, _) = run(&sh("exit 0", 2));
    assert_eq!(report.expect("launch").outcome, Outcome::Success);
}

/// Tells [`child_launches_then_signals_itself`] what to do.
const CHILD_ENV: &str = "SYMMEM_LAUNCH_TEST_CHILD";
/// Exit status of a child that survived its own signal.
const SURVIVED: i32 = 42;

/// Runs [`child_launches_then_signals_itself`] alone in a fresh process.
fn child(mode: &str) -> std::process::ExitStatus {
    Command::new(std::env::current_exe().expect("current_exe"))
        .args([
            "--exact",
            "child_launches_then_signals_itself",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, mode)
        .stdout(Stdio::null())
        .status()
        .expect("run the test binary again")
}

/// Only does something in the child processes of
/// `signals_after_a_launch_act_as_before_it`: runs a launch (or two), then
/// sends itself a signal, and exits with [`SURVIVED`] if that did not end it.
#[test]
fn child_launches_then_signals_itself() {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (signal, ignore_first) = match mode.as_str() {
        "INT" => (Signal::SIGINT, false),
        "TERM" => (Signal::SIGTERM, false),
        "HUP" => (Signal::SIGHUP, false),
        "HUP-ignored" => (Signal::SIGHUP, true),
        other => panic!("unknown mode {other}"),
    };
    if ignore_first {
        // As under nohup.
        // SAFETY: SIG_IGN installs no handler code.
        unsafe { nix::sys::signal::signal(signal, nix::sys::signal::SigHandler::SigIgn) }
            .expect("ignore");
    }
    for _ in 0..2 {
        let (report, _, _) = run(&sh("exit 0", 2));
        assert_eq!(report.expect("launch").outcome, Outcome::Success);
    }
    kill(Pid::from_raw(std::process::id() as i32), signal).expect("kill");
    std::thread::sleep(Duration::from_secs(2));
    std::process::exit(SURVIVED);
}

#[test]
fn signals_after_a_launch_act_as_before_it() {
    for (mode, signal) in [
        ("INT", Signal::SIGINT),
        ("TERM", Signal::SIGTERM),
        ("HUP", Signal::SIGHUP),
    ] {
        let status = child(mode);
        assert_eq!(
            status.signal(),
            Some(signal as i32),
            "{mode} after a launch must end the process by default: {status:?}"
        );
    }
    let status = child("HUP-ignored");
    assert_eq!(
        status.code(),
        Some(SURVIVED),
        "an ignored SIGHUP stays ignored after a launch: {status:?}"
    );
}

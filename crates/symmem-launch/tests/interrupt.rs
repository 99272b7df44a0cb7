//! Signals to the launcher's own process. Alone in this test binary (its own
//! process) because the signal would interrupt every launch in the process.

mod common;

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

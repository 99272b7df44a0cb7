//! Helpers shared by the integration tests (each test binary uses a subset).
#![allow(dead_code)]

use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{kill, killpg};
use nix::unistd::Pid;
use symmem_launch::{LaunchError, LaunchSpec, OutputLine, RunReport, launch};

/// Short grace so that tests stay fast.
pub const GRACE: Duration = Duration::from_secs(1);
/// Scheduling slack on a loaded 2-core machine.
pub const MARGIN: Duration = Duration::from_secs(3);

/// `ranks` ranks of `/bin/sh -c script`, grace 1 s, timeout 10 s.
pub fn sh(script: &str, ranks: usize) -> LaunchSpec {
    LaunchSpec::new("/bin/sh", ranks)
        .args(["-c", script])
        .grace(GRACE)
        .timeout(Duration::from_secs(10))
}

/// Runs `spec`, collecting every output line.
pub fn run(spec: &LaunchSpec) -> (Result<RunReport, LaunchError>, Vec<OutputLine>, Duration) {
    let mut lines = Vec::new();
    let start = Instant::now();
    let result = launch(spec, &mut |line| lines.push(line.clone()));
    (result, lines, start.elapsed())
}

/// The text lines of one rank, in order.
pub fn lines_of(lines: &[OutputLine], rank: usize) -> Vec<&str> {
    lines
        .iter()
        .filter(|l| l.rank == rank)
        .map(|l| l.text.as_str())
        .collect()
}

/// Whether `pid` is gone. A zombie counts as gone: it holds no resources, and
/// an orphan's zombie is reaped by init, which in a container may never
/// happen.
pub fn gone(pid: i32) -> bool {
    match kill(Pid::from_raw(pid), None) {
        Err(Errno::ESRCH) => true,
        _ => is_zombie(pid),
    }
}

/// Whether nothing but zombies is left in process group `pgid`.
pub fn group_empty(pgid: i32) -> bool {
    if killpg(Pid::from_raw(pgid), None) == Err(Errno::ESRCH) {
        return true;
    }
    let entries = std::fs::read_dir("/proc").expect("read /proc");
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| stat(pid).is_some_and(|(_, pgrp)| pgrp == pgid))
        .all(is_zombie)
}

fn is_zombie(pid: i32) -> bool {
    stat(pid).is_none_or(|(state, _)| matches!(state, 'Z' | 'X'))
}

/// `(state, pgrp)` of a process, `None` if it is gone.
fn stat(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat[stat.rfind(')')? + 1..].split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    fields.next()?;
    Some((state, fields.next()?.parse().ok()?))
}

/// Polls `cond` for up to `limit`.
pub fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

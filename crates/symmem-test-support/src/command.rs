//! Commands the tests start and signal.

use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// `program` with SIGINT, SIGQUIT, SIGTERM and SIGHUP at their defaults whatever this test
/// inherited ([`symmem_process::default_signals`]): a launcher honours signals it inherited as
/// ignored (e.g. SIGINT when `cargo test` runs as a shell background job), and a test that
/// signals it must not depend on how it was started.
pub fn with_default_signals(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new(program);
    symmem_process::default_signals(&mut command);
    command
}

/// Waits for `child` up to `limit`; past it, kills it and panics.
pub fn wait_within(child: &mut Child, limit: Duration) -> ExitStatus {
    wait_or_kill(child, limit).unwrap_or_else(|| panic!("the child did not exit within {limit:?}"))
}

/// Waits for `child` up to `limit`: its status, or `None` once it has been killed (and reaped)
/// past the limit, for a caller that reports what it printed meanwhile.
pub fn wait_or_kill(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The exit codes a `--help` text lists in its `EXIT CODES` section (the first word of each
/// line indented by two spaces, up to the next blank line), in order; with the section itself,
/// for assertion messages. Panics if there is no such section.
pub fn exit_codes_in_help(help: &str) -> (Vec<&str>, &str) {
    let start = help
        .find("\nEXIT CODES\n")
        .unwrap_or_else(|| panic!("no EXIT CODES section in --help:\n{help}"));
    let section = &help[start..];
    let section = &section[..section.find("\n\n").unwrap_or(section.len())];
    let codes = section
        .lines()
        .filter_map(|l| l.strip_prefix("  "))
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    (codes, section)
}

/// Writes `body` to `path` as an executable script (mode 0755), making its folder.
///
/// A child `sh` writes it, not this process: a file this process had open for writing would be
/// inherited by a child that another test thread forks at that moment, and until that child
/// execs, running the script fails with "Text file busy" (ETXTBSY).
pub fn write_script(path: &std::path::Path, body: &str) {
    use std::io::Write as _;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .unwrap_or_else(|e| panic!("creating {}: {e}", parent.display()));
    }
    let mut child = Command::new("sh")
        .args(["-c", "cat > \"$1\" && chmod 755 \"$1\"", "sh"])
        .arg(path)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("starting sh to write a script");
    // A failed write (sh gone before reading) says less than sh's status: that is reported.
    let written = child
        .stdin
        .take()
        .expect("its stdin")
        .write_all(body.as_bytes());
    let status = child.wait().expect("waiting for sh");
    assert!(
        status.success() && written.is_ok(),
        "writing {} failed: sh {status}, the write {written:?}",
        path.display()
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::ignores;

    #[test]
    fn the_child_starts_with_default_dispositions_even_if_ours_ignore() {
        // This process ignores SIGHUP for a moment (nothing else in this test binary minds),
        // as under nohup; the child must not inherit that. SigIgn in its /proc status tells.
        // SAFETY: SIG_IGN installs no handler code.
        let before = unsafe { libc::signal(libc::SIGHUP, libc::SIG_IGN) };
        let out = with_default_signals("/bin/grep")
            .args(["SigIgn", "/proc/self/status"])
            .output();
        // SAFETY: puts back what was there, a disposition and no handler of ours.
        unsafe { libc::signal(libc::SIGHUP, before) };
        let out = out.expect("run grep");
        let status = String::from_utf8_lossy(&out.stdout);
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            assert!(
                !ignores(&status, signal),
                "signal {signal} ignored: {status}"
            );
        }
        // And the check can tell: this process ignores SIGHUP while it asks.
        // SAFETY: as above.
        let before = unsafe { libc::signal(libc::SIGHUP, libc::SIG_IGN) };
        let ours = std::fs::read_to_string("/proc/self/status");
        // SAFETY: as above.
        unsafe { libc::signal(libc::SIGHUP, before) };
        assert!(ignores(&ours.expect("own status"), libc::SIGHUP));
    }

    #[test]
    #[should_panic(expected = "did not exit within")]
    fn a_child_past_the_limit_is_killed_and_fails_the_test() {
        let mut child = Command::new("/bin/sleep")
            .arg("100")
            .spawn()
            .expect("sleep");
        wait_within(&mut child, Duration::from_millis(50));
    }

    #[test]
    fn exit_codes_are_read_from_their_section_only() {
        let help = "Usage: x\n\n  0  not a code here\n\nEXIT CODES\n  0    success\n  75   a peer\n       failed (continued)\n  130  interrupted\n\n  7  after the section\n";
        let (codes, section) = exit_codes_in_help(help);
        assert_eq!(codes, ["0", "75", "130"], "{section}");
        assert!(section.ends_with("130  interrupted"), "{section:?}");
    }

    /// Scripts written while another thread keeps forking run every time. Written by this
    /// process instead (`std::fs::write`), the loop met "Text file busy" in two of three runs.
    #[test]
    fn a_written_script_runs_while_other_threads_fork() {
        let dir = tempfile::tempdir().unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let forker = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    Command::new("true").status().unwrap();
                }
            })
        };
        let started = Instant::now();
        for i in 0..200 {
            if started.elapsed() > Duration::from_secs(20) {
                break;
            }
            let path = dir.path().join(format!("bin/s{i}"));
            write_script(&path, &format!("#!/bin/sh\necho {i}\n"));
            let out = Command::new(&path)
                .output()
                .unwrap_or_else(|e| panic!("run {i}: {e}"));
            assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), i.to_string());
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        forker.join().unwrap();
    }
}

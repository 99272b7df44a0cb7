//! Commands the tests start and signal.

use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// `program` with SIGINT, SIGTERM and SIGHUP at their defaults whatever this test inherited: a
/// launcher honours signals it inherited as ignored (e.g. SIGINT when `cargo test` runs as a
/// shell background job), and a test that signals it must not depend on how it was started.
pub fn with_default_signals(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new(program);
    // SAFETY: between fork and exec only `signal`, which is async-signal-safe, is called.
    unsafe {
        command.pre_exec(|| {
            for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                if libc::signal(signal, libc::SIG_DFL) == libc::SIG_ERR {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    command
}

/// Waits for `child` up to `limit`; past it, kills it and panics.
pub fn wait_within(child: &mut Child, limit: Duration) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("the child did not exit within {limit:?}");
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
}

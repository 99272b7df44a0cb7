//! Whether processes are gone, from `/proc` and `kill(pid, 0)`. A zombie counts as gone: it
//! holds no resources, and an orphan's zombie is reaped by init, which in a container may never
//! happen.

use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;
use std::time::{Duration, Instant};

/// Whether `pid` is gone (or a zombie).
pub fn gone(pid: i32) -> bool {
    match kill(Pid::from_raw(pid), None) {
        Err(Errno::ESRCH) => true,
        _ => is_zombie(pid),
    }
}

/// Whether nothing but zombies is left in process group `pgid`.
pub fn group_empty(pgid: i32) -> bool {
    group_members(pgid).is_empty()
}

/// The live (non-zombie) processes of group `pgid` ([`symmem_process::live_members`]).
pub fn group_members(pgid: i32) -> Vec<i32> {
    symmem_process::live_members(pgid)
}

fn is_zombie(pid: i32) -> bool {
    symmem_process::procfs::gone(pid)
}

/// Whether `signal` is in the `SigIgn` mask of `status`, the text of a `/proc/<pid>/status`.
pub fn ignores(status: &str, signal: i32) -> bool {
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .map(|m| u64::from_str_radix(m.trim(), 16).expect("SigIgn is hex"))
        .expect("SigIgn line");
    mask & (1 << (signal - 1)) != 0
}

/// Polls `cond` every 10 ms for up to `limit`; whether it came true.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_in_its_group_and_a_reaped_child_is_gone() {
        let me = std::process::id() as i32;
        assert!(!gone(me));
        let group = nix::unistd::getpgrp().as_raw();
        assert!(!group_empty(group));
        assert!(group_members(group).contains(&me));
        let mut child = std::process::Command::new("/bin/true")
            .spawn()
            .expect("spawn /bin/true");
        let pid = child.id() as i32;
        child.wait().expect("reap");
        assert!(gone(pid));
    }

    #[test]
    fn an_unreaped_child_is_gone_once_it_is_a_zombie() {
        let mut child = std::process::Command::new("/bin/true")
            .spawn()
            .expect("spawn /bin/true");
        let pid = child.id() as i32;
        // Not waited for: it stays a zombie, which holds nothing.
        assert!(eventually(Duration::from_secs(10), || gone(pid)));
        assert!(
            symmem_process::procfs::stat(pid).is_some_and(|s| s.dead()),
            "not a zombie"
        );
        child.wait().expect("reap");
    }
}

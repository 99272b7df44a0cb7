//! The process group of a run: how ranks are tied to it and to the launcher, and what of the
//! run is still alive in it or escaped it. Signalling a group and naming its live members are
//! `symmem_process`'s.

use std::process::Command;

use symmem_process::default_signals;
use symmem_process::procfs;
pub(crate) use symmem_process::procfs::gone;
pub(crate) use symmem_process::{live_members, signal_group};

/// Puts the command in the run's process group (a new one led by the command itself when
/// `pgid` is 0), with default signal actions ([`default_signals`]), and makes it die with the
/// launcher: the thread running `launch`, which outlives the ranks, starts them.
pub(crate) fn join_group(cmd: &mut Command, pgid: i32) {
    use std::os::unix::process::CommandExt;
    cmd.process_group(pgid);
    symmem_process::die_with_parent(default_signals(cmd));
}

/// Processes of a run that are not in its process group any more (they called `setsid` or
/// `setpgid`): every live process whose environment carries `SYMMEM_RUN_ID=<run_id>`
/// (inherited from a rank), or that holds one of the ranks' output pipes open for writing
/// (`pipes`: `pipe:[inode]` as `/proc/<pid>/fd/*` shows them). Never this process nor its own
/// children: a child this process is starting holds copies of all its descriptors (the read
/// ends of the pipes among them) until it executes its program, and that child may be a rank
/// of another run of this process. Processes of other users cannot be read and are not listed.
pub(crate) fn escaped(run_id: &str, pipes: &[String], pgid: i32) -> Vec<i32> {
    let me = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
    let marker = symmem::settings::RUN_ID.assignment(run_id);
    let mut pids: Vec<i32> = procfs::pids()
        .into_iter()
        .filter(|&pid| pid != me)
        .filter(|&pid| {
            procfs::stat(pid).is_some_and(|s| s.pgrp != pgid && s.ppid != me && !s.dead())
        })
        .filter(|&pid| procfs::carries(pid, marker.as_bytes()) || holds_any(pid, pipes))
        .collect();
    pids.sort_unstable();
    pids
}

/// Orphans of the run that this process adopted: when it is a child subreaper
/// (`PR_SET_CHILD_SUBREAPER`, which `symmem-run` sets), a process the ranks started whose parent
/// exited is re-parented here instead of to init, whatever it did to its group, environment or
/// pipes. These are our children other than `own` (the ranks, the watchdog); zombies among them
/// are reaped here, and the living ones returned. Empty when this process is no subreaper (a
/// library caller: orphans of its other children are none of the run's business).
pub(crate) fn adopted(own: &[i32]) -> Vec<i32> {
    if !nix::sys::prctl::get_child_subreaper().unwrap_or(false) {
        return Vec::new();
    }
    let me = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
    let mut pids = Vec::new();
    for pid in procfs::pids() {
        if own.contains(&pid) {
            continue;
        }
        let Some(stat) = procfs::stat(pid) else {
            continue;
        };
        if stat.ppid != me {
            continue;
        }
        if stat.dead() {
            let _ = nix::sys::wait::waitpid(
                nix::unistd::Pid::from_raw(pid),
                Some(nix::sys::wait::WaitPidFlag::WNOHANG),
            );
        } else {
            pids.push(pid);
        }
    }
    pids.sort_unstable();
    pids
}

/// Whether `pid` holds one of `pipes` open for writing (the ranks' end; the launcher holds
/// the read ends).
fn holds_any(pid: i32, pipes: &[String]) -> bool {
    if pipes.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        let ours = std::fs::read_link(fd.path())
            .is_ok_and(|target| pipes.iter().any(|p| target.as_os_str() == p.as_str()));
        ours && std::fs::read_to_string(format!(
            "/proc/{pid}/fdinfo/{}",
            fd.file_name().to_string_lossy()
        ))
        .is_ok_and(|info| opened_for_writing(&info))
    })
}

/// Whether `/proc/<pid>/fdinfo/<fd>` says the descriptor was opened for writing (its
/// `flags:` are octal; the access mode is the low two bits: 1 write-only, 2 read-write).
fn opened_for_writing(fdinfo: &str) -> bool {
    fdinfo
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
        .is_some_and(|flags| matches!(flags & 0o3, 1 | 2))
}

/// The command name of `pid` (`/proc/<pid>/comm`), or `?` once it is gone.
pub(crate) fn command_name(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim_end().to_string())
        .unwrap_or_else(|_| "?".to_string())
}

/// What `/proc/self/fd/<fd>` names for one of our pipe ends: `pipe:[inode]`, which every
/// process holding either end of that pipe shows too.
pub(crate) fn pipe_id(fd: std::os::fd::RawFd) -> Option<String> {
    let target = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
    let text = target.to_str()?;
    text.starts_with("pipe:").then(|| text.to_string())
}

/// The kernel's `PF_EXITING` task flag: set when a process enters its exit,
/// before it closes its files; it becomes a zombie moments later.
const PF_EXITING: u64 = 0x4;

/// Whether `pid` has begun to exit but is not a zombie yet (its sockets may
/// already be closed, so its peers may already know it left).
pub(crate) fn exiting(pid: u32) -> bool {
    let pid = i32::try_from(pid).unwrap_or(i32::MAX);
    procfs::stat(pid).is_some_and(|s| !s.dead() && s.flags & PF_EXITING != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_descriptors_open_for_writing_count() {
        assert!(opened_for_writing("pos:\t0\nflags:\t01\nmnt_id:\t15\n"));
        assert!(opened_for_writing("pos:\t0\nflags:\t02000002\n"));
        assert!(!opened_for_writing("pos:\t0\nflags:\t02000000\n"));
        assert!(!opened_for_writing("garbage"));
    }

    #[test]
    fn a_running_process_is_not_exiting() {
        assert!(!exiting(std::process::id()));
        // Gone (or never there) is not exiting either.
        assert!(!exiting(u32::MAX));
    }
}

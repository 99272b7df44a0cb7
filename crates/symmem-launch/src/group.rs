//! The process group of a run: how ranks are tied to it and to the launcher,
//! signalling it, and telling whether anything in it is still alive.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use symmem_process::procfs;
pub(crate) use symmem_process::procfs::gone;

/// Puts the command in the run's process group (a new one led by the
/// command itself when `pgid` is 0), with default signal actions
/// ([`default_signals`]), and makes it die with the launcher.
pub(crate) fn join_group(cmd: &mut Command, pgid: i32) {
    cmd.process_group(pgid);
    default_signals(cmd);
    let launcher = std::process::id();
    let die_with_launcher = move || -> io::Result<()> {
        // SAFETY: prctl(PR_SET_PDEATHSIG) only changes an attribute of the
        // calling (child) process and is async-signal-safe, as required
        // between fork and exec.
        let rc = unsafe {
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // If the launcher died between fork and prctl, the death signal will
        // never come: we have been reparented already, so give up now.
        // SAFETY: getppid has no preconditions and is async-signal-safe.
        let parent = unsafe { libc::getppid() };
        if u32::try_from(parent).ok() != Some(launcher) {
            // from_raw_os_error does not allocate (no malloc after fork).
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        Ok(())
    };
    // SAFETY: the closure only calls async-signal-safe functions (prctl,
    // getppid) and does not allocate, so it is sound in the forked child of
    // a multi-threaded process. The death signal is tied to the thread that
    // forks: the thread running `launch`, which outlives the ranks.
    unsafe {
        cmd.pre_exec(die_with_launcher);
    }
}

/// Gives the command's process the default action of every signal a launcher or a shell may
/// have left ignored in this one (a background job of a non-interactive shell starts with
/// SIGINT and SIGQUIT ignored, `nohup` ignores SIGHUP): srun stops its tasks on two SIGINTs,
/// and ranks and launchers end on the SIGTERM this launcher sends, only if they can see them.
/// This launcher itself keeps what it inherited.
pub(crate) fn default_signals(cmd: &mut Command) {
    // SAFETY: between fork and exec only `signal`, which is async-signal-safe, is called, and
    // nothing is allocated.
    unsafe {
        cmd.pre_exec(|| {
            for signal in [libc::SIGINT, libc::SIGQUIT, libc::SIGHUP, libc::SIGTERM] {
                if libc::signal(signal, libc::SIG_DFL) == libc::SIG_ERR {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// Sends `signal` to the whole group. Returns false if the group is gone.
/// Never called with a pgid of 0 or less, which would mean our own group.
pub(crate) fn signal_group(pgid: i32, signal: Signal) -> bool {
    if pgid <= 0 {
        return false;
    }
    !matches!(killpg(Pid::from_raw(pgid), signal), Err(Errno::ESRCH))
}

/// The processes of the group that are still alive (not zombies).
///
/// `killpg(pgid, 0)` alone is not enough: a zombie still counts as a member,
/// and an orphaned grandchild's zombie stays one for as long as init does not
/// reap it (in containers, PID 1 often does not). A zombie has already
/// released its memory and devices, so it is treated as gone.
pub(crate) fn live_members(pgid: i32) -> Vec<i32> {
    if pgid <= 0 {
        return Vec::new();
    }
    match killpg(Pid::from_raw(pgid), None) {
        Err(Errno::ESRCH) => Vec::new(),
        _ => scan_proc(pgid),
    }
}

fn scan_proc(pgid: i32) -> Vec<i32> {
    if !std::path::Path::new("/proc/self").exists() {
        // Without /proc we cannot name the members; report the group leader
        // so that the caller still sees a live group.
        return vec![pgid];
    }
    // The process may vanish between listing and reading: then it is gone.
    let mut pids: Vec<i32> = procfs::pids()
        .into_iter()
        .filter(|&pid| procfs::stat(pid).is_some_and(|s| s.pgrp == pgid && !s.dead()))
        .collect();
    pids.sort_unstable();
    pids
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

    #[test]
    fn our_own_group_is_alive_and_a_bogus_one_is_not() {
        let ours = nix::unistd::getpgrp().as_raw();
        assert!(live_members(ours).contains(&(std::process::id() as i32)));
        assert!(live_members(0).is_empty());
        assert!(!signal_group(0, Signal::SIGTERM));
    }
}

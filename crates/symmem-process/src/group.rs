//! A process group of this process's children: signalling it, telling whether anything in it
//! is still alive, and stopping it (`SIGTERM`, a grace period, then `SIGKILL`).

use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::procfs;

/// Sends `signal` to the whole group `pgid`. Returns false if the group is gone, and for a
/// `pgid` of 0 or less (which would name this process's own group, or every process).
///
/// Signal a group only while something keeps its id from being reused: its leader not reaped
/// yet, or a member known alive.
pub fn signal_group(pgid: i32, signal: Signal) -> bool {
    if pgid <= 0 {
        return false;
    }
    !matches!(killpg(Pid::from_raw(pgid), signal), Err(Errno::ESRCH))
}

/// The processes of group `pgid` that are still alive (not zombies), in order.
///
/// `killpg(pgid, 0)` alone is not enough: a zombie still counts as a member, and an orphaned
/// grandchild's zombie stays one for as long as init does not reap it (in containers, PID 1
/// often does not). A zombie has already released its memory and devices, so it is treated
/// as gone. Without `/proc` the members cannot be named: the leader stands for them.
pub fn live_members(pgid: i32) -> Vec<i32> {
    if pgid <= 0 {
        return Vec::new();
    }
    if let Err(Errno::ESRCH) = killpg(Pid::from_raw(pgid), None) {
        return Vec::new();
    }
    if !std::path::Path::new("/proc/self").exists() {
        return vec![pgid];
    }
    // A process may vanish between listing and reading: then it is gone.
    let mut pids: Vec<i32> = procfs::pids()
        .into_iter()
        .filter(|&pid| procfs::stat(pid).is_some_and(|s| s.pgrp == pgid && !s.dead()))
        .collect();
    pids.sort_unstable();
    pids
}

/// Whether a stop should go on waiting out its grace period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// Go on waiting.
    Wait,
    /// Stop waiting: `SIGKILL` now (the user signalled again: a second Ctrl-C).
    Hurry,
}

/// What [`stop_group`] asks its caller while it stops a group.
pub trait Stopping {
    /// Whether everything being stopped is gone. By default: nothing in the group is alive
    /// ([`live_members`]); a caller that also waits for its own children to be reaped says so
    /// here.
    fn gone(&mut self, pgid: i32) -> bool {
        live_members(pgid).is_empty()
    }

    /// Called once, right before `SIGTERM`, when the group was found alive.
    fn terminating(&mut self) {}

    /// Lets a moment pass, doing the caller's own work meanwhile (reading the children's
    /// output, reaping them); [`Pace::Hurry`] ends the grace period at once.
    fn pause(&mut self) -> Pace;
}

/// Processes of a group outlived its `SIGKILL`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "processes {} of process group {pgid} are still alive after SIGKILL (stuck in the kernel, \
     e.g. in a driver call?); check them with `ps -o pid,stat,wchan,cmd -g {pgid}` and kill \
     them with `kill -KILL -- -{pgid}`",
    list(pids)
)]
pub struct Lingering {
    pub pgid: i32,
    /// Its live members when the stop gave up.
    pub pids: Vec<i32>,
}

fn list(pids: &[i32]) -> String {
    pids.iter()
        .map(i32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Stops group `pgid`: unless it is gone already, `SIGTERM` to all of it, then up to `grace`
/// for it to end; then `SIGKILL`, repeated (a process forking while the first was delivered
/// may have added a member) until it is gone, for at most `settle`. Between steps, `how`
/// pauses and says whether it is over ([`Stopping`]). A `pgid` of 0 or less is nothing to
/// stop.
pub fn stop_group(
    pgid: i32,
    grace: Duration,
    settle: Duration,
    how: &mut impl Stopping,
) -> Result<(), Lingering> {
    if pgid <= 0 {
        return Ok(());
    }
    if !how.gone(pgid) {
        how.terminating();
        signal_group(pgid, Signal::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            let pace = how.pause();
            if how.gone(pgid) {
                return Ok(());
            }
            if pace == Pace::Hurry {
                break;
            }
        }
    }
    let deadline = Instant::now() + settle;
    loop {
        if how.gone(pgid) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Lingering {
                pgid,
                pids: live_members(pgid),
            });
        }
        signal_group(pgid, Signal::SIGKILL);
        how.pause();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    #[test]
    fn our_own_group_is_alive_and_a_bogus_one_is_not() {
        let ours = nix::unistd::getpgrp().as_raw();
        assert!(live_members(ours).contains(&(std::process::id() as i32)));
        assert!(live_members(0).is_empty());
        assert!(!signal_group(0, Signal::SIGTERM));
        assert_eq!(
            stop_group(0, Duration::ZERO, Duration::ZERO, &mut Sleep(0)),
            Ok(())
        );
    }

    /// Pauses 10 ms, counting.
    struct Sleep(usize);

    impl Stopping for Sleep {
        fn pause(&mut self) -> Pace {
            self.0 += 1;
            std::thread::sleep(Duration::from_millis(10));
            Pace::Wait
        }
    }

    /// A group whose leader ignores SIGTERM and whose other member does not: the member ends
    /// on SIGTERM, the leader on the SIGKILL after the grace period; a zombie leader (not
    /// reaped here until the end) counts as gone.
    #[test]
    fn a_group_ends_on_sigterm_or_else_on_sigkill() {
        let mut leader = Command::new("sh")
            .args(["-c", "sleep 60 & trap '' TERM; echo $!; exec sleep 60"])
            .process_group(0)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("sh runs");
        let pgid = leader.id() as i32;
        let mut first = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(leader.stdout.as_mut().unwrap()),
            &mut first,
        )
        .unwrap();
        let member: i32 = first.trim().parse().unwrap();
        let started = Instant::now();
        let mut pauses = Sleep(0);
        let stopped = stop_group(
            pgid,
            Duration::from_millis(300),
            Duration::from_secs(5),
            &mut pauses,
        );
        assert_eq!(stopped, Ok(()));
        assert!(procfs::gone(member) && procfs::gone(pgid));
        // The leader ignored SIGTERM: the grace period ran out before SIGKILL.
        assert!(
            started.elapsed() >= Duration::from_millis(300),
            "{:?}",
            started.elapsed()
        );
        let status = leader.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
        assert!(live_members(pgid).is_empty());
    }
}

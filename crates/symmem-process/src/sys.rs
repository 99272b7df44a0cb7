//! The crate's only `unsafe`, each block with what makes it sound: reading a signal's current
//! action, registering the [`SignalGuard`](crate::SignalGuard)'s action, and what a child
//! runs between `fork` and `exec` (which must neither allocate nor lock: the parent may have
//! other threads).

#![allow(unsafe_code)]

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use signal_hook::SigId;

/// A signal's action as the process has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Disposition {
    Default,
    Ignored,
    /// A handler (the application's, or signal-hook's once registered).
    Handler,
}

/// The current action of `signal`.
pub(crate) fn disposition(signal: i32) -> Disposition {
    // SAFETY: a zeroed sigaction is a valid out-parameter, and sigaction with a null new
    // action only reads the current disposition.
    let current = unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(signal, std::ptr::null(), &mut old) != 0 {
            // Cannot happen for the signals asked about; assume the usual default.
            return Disposition::Default;
        }
        old
    };
    match current.sa_sigaction {
        libc::SIG_DFL => Disposition::Default,
        libc::SIG_IGN => Disposition::Ignored,
        _ => Disposition::Handler,
    }
}

/// What one guard received: the first signal and how many.
#[derive(Default)]
pub(crate) struct Caught {
    pub(crate) first: AtomicUsize,
    pub(crate) count: AtomicUsize,
}

impl Caught {
    /// Records `signal`. Async-signal-safe (atomics only): it runs in the signal handler.
    pub(crate) fn record(&self, signal: usize) {
        let _ = self
            .first
            .compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst);
        self.count.fetch_add(1, Ordering::SeqCst);
    }
}

/// Makes `signal` record itself in `caught` (signal-hook's handler, which chains to a handler
/// the application had), until the returned id is unregistered.
pub(crate) fn record(signal: i32, caught: Arc<Caught>) -> io::Result<SigId> {
    let value = usize::try_from(signal).unwrap_or(usize::MAX);
    let action = move || caught.record(value);
    // SAFETY: the action only performs atomic operations (`Caught::record`) on memory kept
    // alive by its own `Arc`, which is async-signal-safe; it neither allocates nor locks. The
    // `Arc` is dropped with the action, outside the signal handler, when it is unregistered.
    unsafe { signal_hook::low_level::register(signal, action) }
}

/// Gives `cmd`'s process the default action of every signal a launcher or a shell may have
/// left ignored in this one (a background job of a non-interactive shell starts with SIGINT
/// and SIGQUIT ignored, `nohup` ignores SIGHUP): children end on the SIGINT or SIGTERM their
/// parent sends them only if they can see it. This process keeps what it inherited.
pub fn default_signals(cmd: &mut Command) -> &mut Command {
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
        })
    }
}

/// Makes `cmd`'s process get SIGKILL when the thread that starts it ends
/// (`PR_SET_PDEATHSIG`; start it from a thread that outlives it), and refuse to start when
/// this process died between `fork` and that call (it would never get the signal).
pub fn die_with_parent(cmd: &mut Command) -> &mut Command {
    let parent = std::process::id();
    let die_with_parent = move || -> io::Result<()> {
        // SAFETY: prctl(PR_SET_PDEATHSIG) only changes an attribute of the calling (child)
        // process and is async-signal-safe.
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
        // If the parent died between fork and prctl, the death signal will never come: the
        // child has been reparented already, so give up now.
        if nix::unistd::getppid().as_raw() != i32::try_from(parent).unwrap_or(i32::MAX) {
            // from_raw_os_error does not allocate (no malloc after fork).
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        Ok(())
    };
    // SAFETY: the closure only calls async-signal-safe functions (prctl, getppid) and does
    // not allocate, so it is sound in the forked child of a multi-threaded process.
    unsafe { cmd.pre_exec(die_with_parent) }
}

/// Starts `cmd`'s process in a session of its own (`setsid`): the terminal's Ctrl-C does not
/// reach it, and it leads a process group of its own.
pub fn new_session(cmd: &mut Command) -> &mut Command {
    // SAFETY: the closure runs between fork and exec and calls only setsid, which is
    // async-signal-safe, and allocates nothing (nix's Errno is a plain value).
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()
                .map(drop)
                .map_err(|errno| io::Error::from_raw_os_error(errno as i32))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_start_with_default_signals_in_a_session_of_their_own() {
        // The child prints its signal masks and its session id, then its pid.
        let out = new_session(default_signals(Command::new("sh").args([
            "-c",
            "grep SigIgn /proc/self/status; read -r _ _ _ _ _ sid _ < /proc/$$/stat; \
                 echo $sid; echo $$",
        ])))
        .output()
        .expect("sh runs");
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = text.lines().collect();
        assert!(out.status.success() && lines.len() == 3, "{text}");
        let ignored = u64::from_str_radix(lines[0].split_whitespace().nth(1).unwrap(), 16).unwrap();
        for signal in [libc::SIGINT, libc::SIGQUIT, libc::SIGHUP, libc::SIGTERM] {
            assert_eq!(
                ignored & (1 << (signal - 1)),
                0,
                "signal {signal} ignored: {text}"
            );
        }
        assert_eq!(
            lines[1].trim(),
            lines[2].trim(),
            "not a session leader: {text}"
        );
    }

    #[test]
    fn the_current_action_of_a_signal_is_read() {
        // Rust ignores SIGPIPE in every program it starts.
        assert_eq!(disposition(libc::SIGPIPE), Disposition::Ignored);
        assert_eq!(disposition(libc::SIGUSR2), Disposition::Default);
    }
}

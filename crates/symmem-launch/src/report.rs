//! What a run produced: output lines, how each rank ended, the outcome.

use std::fmt;
use std::time::Duration;

/// Which pipe a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stream {
    /// The rank's standard output.
    Stdout,
    /// The rank's standard error.
    Stderr,
}

/// One line written by a rank, without its trailing newline (invalid UTF-8
/// replaced by U+FFFD).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputLine {
    /// The rank that wrote it.
    pub rank: usize,
    /// Which pipe.
    pub stream: Stream,
    /// The text.
    pub text: String,
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ended {
    /// It exited with this status.
    Exited(i32),
    /// It was killed by this signal.
    Signaled(i32),
}

impl Ended {
    /// Whether this is a successful exit (status 0).
    pub fn success(self) -> bool {
        self == Ended::Exited(0)
    }

    /// The shell-style exit code: the status, or 128 + the signal.
    pub fn exit_code(self) -> i32 {
        match self {
            Ended::Exited(code) => code,
            Ended::Signaled(signal) => 128 + signal,
        }
    }
}

impl fmt::Display for Ended {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Ended::Exited(code) => write!(f, "exited with status {code}"),
            Ended::Signaled(signal) => match signal_name(signal) {
                Some(name) => write!(f, "was killed by signal {signal} ({name})"),
                None => write!(f, "was killed by signal {signal}"),
            },
        }
    }
}

/// The name of a signal (`"SIGSEGV"`), if it has one.
pub fn signal_name(signal: i32) -> Option<&'static str> {
    nix::sys::signal::Signal::try_from(signal)
        .ok()
        .map(|s| s.as_str())
}

/// How one rank fared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankStatus {
    /// The rank.
    pub rank: usize,
    /// Its process id.
    pub pid: u32,
    /// How it ended; `None` only if it could not be reaped (then
    /// [`launch`](crate::launch) returns [`LaunchError::Leftover`](crate::LaunchError::Leftover)
    /// instead of a report).
    pub ended: Option<Ended>,
    /// From its start until it was seen to end.
    pub elapsed: Duration,
    /// Whether the launcher stopped it (it was still running when the run
    /// ended because of another rank, the timeout or a signal).
    pub stopped: bool,
}

/// Why a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every rank exited with status 0.
    Success,
    /// This rank was the first to exit non-zero or by a signal; the others
    /// were stopped.
    RankFailed {
        /// The culprit.
        rank: usize,
        /// How it ended.
        how: Ended,
    },
    /// The global timeout elapsed; these ranks were still running.
    TimedOut {
        /// Ranks still running at the timeout.
        still_running: Vec<usize>,
    },
    /// The launcher received this signal (SIGINT, SIGTERM or SIGHUP) and
    /// stopped the ranks.
    Interrupted {
        /// The signal number.
        signal: i32,
    },
}

/// The result of a run that started and was cleaned up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunReport {
    /// Why the run ended.
    pub outcome: Outcome,
    /// Every rank, in rank order.
    pub ranks: Vec<RankStatus>,
    /// From the first spawn until everything was stopped and drained.
    pub elapsed: Duration,
    /// Time to spawn all ranks (per-rank start cost = `spawn_time / ranks`).
    pub spawn_time: Duration,
    /// The process group of the ranks (rank 0's pid).
    pub pgid: i32,
    /// The timeout the run had.
    pub timeout: Duration,
}

/// Exit code for a timed-out run (as `timeout(1)`).
pub const EXIT_TIMEOUT: i32 = 124;
/// Exit code for an interrupted run (as a shell after Ctrl-C).
pub const EXIT_INTERRUPTED: i32 = 130;

impl RunReport {
    /// Whether every rank succeeded.
    pub fn success(&self) -> bool {
        self.outcome == Outcome::Success
    }

    /// The exit code a launcher should end with: 0 on success, the failing
    /// rank's status (128 + signal if it was killed), [`EXIT_TIMEOUT`] (124)
    /// on timeout, [`EXIT_INTERRUPTED`] (130) when interrupted.
    pub fn exit_code(&self) -> i32 {
        match &self.outcome {
            Outcome::Success => 0,
            Outcome::RankFailed { how, .. } => match how.exit_code() {
                // Exit statuses are 8 bits; keep a failure a failure.
                0 => 1,
                code => code,
            },
            Outcome::TimedOut { .. } => EXIT_TIMEOUT,
            Outcome::Interrupted { .. } => EXIT_INTERRUPTED,
        }
    }
}

impl fmt::Display for RunReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.outcome {
            Outcome::Success => {
                let n = self.ranks.len();
                let noun = if n == 1 { "rank" } else { "ranks" };
                write!(f, "{n} {noun} succeeded in {}", secs(self.elapsed))
            }
            Outcome::RankFailed { rank, how } => {
                let stopped: Vec<usize> = self
                    .ranks
                    .iter()
                    .filter(|r| r.stopped && r.rank != *rank)
                    .map(|r| r.rank)
                    .collect();
                let others = self.ranks.len().saturating_sub(1);
                if others == 0 {
                    write!(f, "rank {rank} {how}")
                } else if stopped.is_empty() {
                    write!(f, "rank {rank} {how}; the other ranks had already finished")
                } else if stopped.len() == others {
                    write!(f, "rank {rank} {how} first; the other ranks were stopped")
                } else if let [one] = stopped.as_slice() {
                    write!(f, "rank {rank} {how} first; rank {one} was stopped")
                } else {
                    write!(
                        f,
                        "rank {rank} {how} first; ranks {} were stopped",
                        join(&stopped)
                    )
                }
            }
            Outcome::TimedOut { still_running } => {
                let noun = if still_running.len() == 1 {
                    "rank"
                } else {
                    "ranks"
                };
                write!(
                    f,
                    "timed out after {}; {noun} still running: {}",
                    short(self.timeout),
                    join(still_running)
                )
            }
            Outcome::Interrupted { signal } => {
                let name = signal_name(*signal).unwrap_or("a signal");
                write!(f, "interrupted by {name}; all ranks stopped")
            }
        }
    }
}

fn join(ranks: &[usize]) -> String {
    ranks
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `1.2s`, or `85ms` under a second: elapsed times.
fn secs(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// `3s`, `1.5s`, `500ms`: configured durations, as typed.
fn short(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(outcome: Outcome, stopped: &[usize], n: usize) -> RunReport {
        RunReport {
            outcome,
            ranks: (0..n)
                .map(|rank| RankStatus {
                    rank,
                    pid: 1000 + rank as u32,
                    ended: Some(Ended::Signaled(15)),
                    elapsed: Duration::from_millis(5),
                    stopped: stopped.contains(&rank),
                })
                .collect(),
            elapsed: Duration::from_millis(1234),
            spawn_time: Duration::from_millis(3),
            pgid: 1000,
            timeout: Duration::from_secs(3),
        }
    }

    #[test]
    fn ended_display() {
        assert_eq!(Ended::Exited(3).to_string(), "exited with status 3");
        assert_eq!(
            Ended::Signaled(11).to_string(),
            "was killed by signal 11 (SIGSEGV)"
        );
    }

    #[test]
    fn summaries_name_the_ranks() {
        let failed = Outcome::RankFailed {
            rank: 2,
            how: Ended::Exited(101),
        };
        let r = report(failed.clone(), &[0, 1, 3], 4);
        assert_eq!(
            r.to_string(),
            "rank 2 exited with status 101 first; the other ranks were stopped"
        );
        assert_eq!(r.exit_code(), 101);
        assert_eq!(
            report(failed.clone(), &[1, 3], 4).to_string(),
            "rank 2 exited with status 101 first; ranks 1, 3 were stopped"
        );
        assert_eq!(
            report(failed, &[], 4).to_string(),
            "rank 2 exited with status 101; the other ranks had already finished"
        );
        let r = report(
            Outcome::TimedOut {
                still_running: vec![0, 1, 3],
            },
            &[0, 1, 3],
            4,
        );
        assert_eq!(
            r.to_string(),
            "timed out after 3s; ranks still running: 0, 1, 3"
        );
        assert_eq!(r.exit_code(), 124);
        let r = report(Outcome::Interrupted { signal: 2 }, &[0], 4);
        assert_eq!(r.to_string(), "interrupted by SIGINT; all ranks stopped");
        assert_eq!(r.exit_code(), 130);
        let r = report(Outcome::Success, &[], 4);
        assert_eq!(r.to_string(), "4 ranks succeeded in 1.2s");
        assert_eq!(r.exit_code(), 0);
        let segv = Outcome::RankFailed {
            rank: 0,
            how: Ended::Signaled(11),
        };
        assert_eq!(report(segv, &[], 1).exit_code(), 139);
    }
}

//! What a run produced: output lines, how each rank ended, the outcome.

use std::fmt;
use std::time::Duration;

use symmem::{count_ranks, describe_ranks, format_duration, format_elapsed, rank_list};

/// Which pipe a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stream {
    /// The rank's standard output.
    Stdout,
    /// The rank's standard error.
    Stderr,
}

/// One line written by a rank, or by a cluster launcher itself (`mpirun`, `srun`), without
/// its trailing newline (invalid UTF-8 replaced by U+FFFD).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputLine {
    /// The rank that wrote it; `None` for the launcher's own lines.
    pub rank: Option<usize>,
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
    /// It was killed by a signal its cluster launcher did not name (mpirun's log of its
    /// processes' states says "aborted by signal"; its own report, with the number, never
    /// came: M6).
    SignaledUnnamed,
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
            Ended::SignaledUnnamed => 128,
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
            Ended::SignaledUnnamed => {
                f.write_str("was killed by a signal (the launcher did not say which)")
            }
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
    /// From its start until it was seen to end (the launcher polls every
    /// 10 ms).
    pub elapsed: Duration,
    /// Whether it was still running when the launcher sent `SIGTERM` to the
    /// group (because of another rank, the timeout or a signal). A rank that
    /// ended on its own, even after another rank failed, was not stopped.
    pub stopped: bool,
}

/// How the ranks that exited with [`EXIT_PEER_FAILED`] lost the rank(s) they
/// needed: see [`Outcome::PeerLost`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lost {
    /// The culprits exited with status 0 while the ranks that gave up still
    /// needed them (seen before or after the first report: a departed rank
    /// may finish tearing down after its peers have already exited).
    ExitedEarly,
    /// The culprits were still running when the first rank gave up, and kept
    /// running until the launcher stopped them (hung?).
    StillRunning,
}

/// Why a run ended.
///
/// Which rank is the culprit, and in which order the rules apply (settle
/// window, status 75, ranks that exited early or hung), is the failure policy
/// in ARCHITECTURE.md ("Failure policy"); `culprit.rs` implements it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every rank exited with status 0.
    Success,
    /// This rank failed (exited non-zero or by a signal) and is the culprit:
    /// the earliest failure that was not a peer failure, or the first failure
    /// if no culprit could be found otherwise. The ranks still running after
    /// the settle window were stopped.
    RankFailed {
        /// The culprit.
        rank: usize,
        /// How it ended.
        how: Ended,
    },
    /// Every rank that failed exited with [`EXIT_PEER_FAILED`] (it stopped
    /// because another rank failed), and these are the ranks they lost.
    PeerLost {
        /// The ranks the others lost, in rank order.
        culprits: Vec<usize>,
        /// How they were lost.
        reason: Lost,
        /// The ranks that exited with [`EXIT_PEER_FAILED`], first to end
        /// first (never empty on this host; under a cluster launcher, those it reported and
        /// those whose output holds a witness's report, possibly none).
        reporters: Vec<usize>,
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
    /// A cluster launcher (`mpirun`, `srun`) failed without naming a rank that failed: its
    /// own lines ([`RunReport::launcher_lines`]) say why.
    LauncherFailed {
        /// The launcher's name.
        launcher: &'static str,
        /// How it ended.
        how: Ended,
    },
}

/// The result of a run that started and was cleaned up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunReport {
    /// Why the run ended.
    pub outcome: Outcome,
    /// Every rank, in rank order, on one host; empty under a cluster launcher, which reports
    /// the rank that ended the job (the outcome, [`RunReport::culprit_node`]) and not each
    /// rank's process.
    pub ranks: Vec<RankStatus>,
    /// From the first spawn until everything was stopped and drained.
    pub elapsed: Duration,
    /// Time to spawn all ranks (per-rank start cost = `spawn_time / ranks`); under a cluster
    /// launcher, the time to spawn it.
    pub spawn_time: Duration,
    /// The process group of the ranks (rank 0's pid); under a cluster launcher, the
    /// launcher's own (its pid).
    pub pgid: i32,
    /// The timeout the run had.
    pub timeout: Duration,
    /// Processes the ranks started that had left the ranks' process group (`setsid`) and were
    /// still running when the ranks were done: the launcher ended them.
    pub escaped: Vec<Escaped>,
    /// How long the launcher waited at the end for the ranks' output pipes to close, when
    /// something it could not find (another user's process) still held them; else zero.
    pub output_wait: Duration,
    /// How the watchdog (which ends the run if the launcher dies) ended, when something ended
    /// it during the run (a rank, or another process of the same user); `None` when it guarded
    /// the run to its end.
    pub watchdog_lost: Option<Ended>,
    /// How many ranks the run had.
    pub world: usize,
    /// The node of the culprit of [`Outcome::RankFailed`], when a cluster launcher named it.
    pub culprit_node: Option<String>,
    /// What the caller's sweep found still running on the nodes after a cluster launcher
    /// ended (and killed); always empty for one host, where leftovers are an error
    /// ([`LaunchError::Leftover`](crate::LaunchError::Leftover)). Not empty is a failure.
    pub left_behind: Vec<LeftBehind>,
    /// The cluster launcher's own lines (its reports, not the ranks'), for the culprit and
    /// for messages; empty for one host.
    pub launcher_lines: Vec<String>,
    /// How ranks ended as a cluster launcher reported them, in its order (srun names every
    /// task that failed, mpirun the first); empty for one host, where [`RunReport::ranks`]
    /// says it of every rank.
    pub reported: Vec<RankEnd>,
    /// A cluster launcher that said it was aborting the job and had not ended a grace period
    /// later (Open MPI 4.1 can hang there for good, M6): its process group was killed, and
    /// what it had started on the nodes was left to the caller's sweep.
    pub abort_hung: bool,
}

/// How a cluster launcher reported that one rank ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankEnd {
    /// The rank.
    pub rank: usize,
    /// Its node, when the launcher named it.
    pub node: Option<String>,
    /// How it ended.
    pub how: Ended,
}

/// A process found on a node after the job: see [`RunReport::left_behind`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftBehind {
    /// The node it was on.
    pub node: String,
    /// Its process id (as this machine sees it).
    pub pid: i32,
    /// Its command line.
    pub command: String,
}

impl fmt::Display for LeftBehind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pid {} ({}) on {}", self.pid, self.command, self.node)
    }
}

/// A process of the run found outside the ranks' process group after the ranks ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Escaped {
    /// Its process id.
    pub pid: i32,
    /// Its command name (`/proc/<pid>/comm`).
    pub command: String,
}

/// A rank exits with this status when it stops because ANOTHER rank failed (a
/// peer disconnected, never arrived, or disagreed), so that the launcher can
/// tell the culprit from the ranks that only reported it. It is
/// `EX_TEMPFAIL` of `sysexits.h`; [`RunReport::exit_code`] returns it for
/// [`Outcome::PeerLost`].
pub use symmem::EXIT_PEER_FAILED;

/// Exit code for a timed-out run (as `timeout(1)`).
pub const EXIT_TIMEOUT: i32 = 124;
/// Exit code for an interrupted run (as a shell after Ctrl-C).
pub const EXIT_INTERRUPTED: i32 = 130;
/// Exit code for bad usage: a malformed command line (clap's own errors
/// exit with it too), or a spec that
/// [`LaunchError::is_usage`](crate::LaunchError::is_usage) refuses.
pub const EXIT_USAGE: i32 = 2;

/// The exit codes of `symmem-run`, code and meaning, as its `--help` lists
/// them (rendered by [`exit_codes_help`]); `cargo xtask codegen` writes
/// README.md's table from this list. `S` and `N` stand for a rank's status and signal.
pub const EXIT_CODES: &[(&str, &str)] = symmem::exit_codes::LAUNCHER;

/// An `EXIT CODES` section for a command's `--help`: one code per line, its
/// meaning wrapped at 78 columns.
pub fn exit_codes_help(codes: &[(&str, &str)]) -> String {
    const INDENT: usize = 11;
    const WIDTH: usize = 78;
    let mut out = String::from("EXIT CODES");
    for (code, meaning) in codes {
        let mut line = format!("  {code:<width$}", width = INDENT - 2);
        let mut empty = true;
        for word in meaning.split_whitespace() {
            if !empty && line.len() + 1 + word.len() > WIDTH {
                out.push('\n');
                out.push_str(line.trim_end());
                line = " ".repeat(INDENT);
                empty = true;
            }
            if !empty {
                line.push(' ');
            }
            line.push_str(word);
            empty = false;
        }
        out.push('\n');
        out.push_str(line.trim_end());
    }
    out
}

impl RunReport {
    /// Whether every rank succeeded.
    pub fn success(&self) -> bool {
        self.outcome == Outcome::Success && self.left_behind.is_empty()
    }

    /// The exit code a launcher should end with: 0 on success, the failing
    /// rank's status (128 + signal if it was killed), [`EXIT_PEER_FAILED`]
    /// (75, the status of the ranks that reported the lost peer) when a peer
    /// was lost, [`EXIT_TIMEOUT`] (124) on timeout, [`EXIT_INTERRUPTED`] (130)
    /// when interrupted. Never 0 for a failure.
    pub fn exit_code(&self) -> i32 {
        match &self.outcome {
            Outcome::Success if self.left_behind.is_empty() => 0,
            Outcome::Success => 1,
            Outcome::RankFailed { how, .. } => match how.exit_code() {
                // Exit statuses are 8 bits; keep a failure a failure.
                0 => 1,
                code => code,
            },
            Outcome::PeerLost { .. } => EXIT_PEER_FAILED,
            Outcome::TimedOut { .. } => EXIT_TIMEOUT,
            Outcome::Interrupted { .. } => EXIT_INTERRUPTED,
            Outcome::LauncherFailed { how, .. } => match how.exit_code() {
                0 => 1,
                code => code,
            },
        }
    }

    /// The ranks other than `except` that the launcher stopped.
    fn stopped_except(&self, except: &[usize]) -> Vec<usize> {
        self.ranks
            .iter()
            .filter(|r| r.stopped && !except.contains(&r.rank))
            .map(|r| r.rank)
            .collect()
    }
}

impl fmt::Display for RunReport {
    /// The outcome, then what the launcher had to clean up or wait for.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_outcome(f)?;
        if !self.escaped.is_empty() {
            let list: Vec<String> = self
                .escaped
                .iter()
                .map(|e| format!("{} ({})", e.pid, e.command))
                .collect();
            let (noun, were) = if list.len() == 1 {
                ("process", "was")
            } else {
                ("processes", "were")
            };
            write!(
                f,
                "; {} {noun} started by the ranks had left their process group (setsid?) and \
                 {were} ended: pid {}",
                list.len(),
                list.join(", ")
            )?;
        }
        if let Some(how) = self.watchdog_lost {
            write!(
                f,
                "; the watchdog that ends the run if symmem-run dies {how} during the run (a \
                 rank, or another process of this user, ended it): had symmem-run died too, what \
                 the ranks started and the rendezvous folder would have been left behind"
            )?;
        }
        if self.abort_hung {
            f.write_str(
                "; the launcher hung in its abort for the grace period and was killed (seen with \
                 Open MPI 4.1 after a kill during start-up)",
            )?;
        }
        if !self.left_behind.is_empty() {
            let list: Vec<String> = self.left_behind.iter().map(|l| l.to_string()).collect();
            write!(f, "; left behind (killed): {}", list.join(", "))?;
        }
        if !self.output_wait.is_zero() {
            write!(
                f,
                "; waited {} for the ranks' output: a process the launcher cannot see (another \
                 user's?) still holds their pipes",
                format_elapsed(self.output_wait)
            )?;
        }
        Ok(())
    }
}

impl RunReport {
    fn write_outcome(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.outcome {
            Outcome::Success => write!(
                f,
                "{} succeeded in {}",
                count_ranks(self.world),
                format_elapsed(self.elapsed)
            ),
            Outcome::RankFailed { rank, how } => self.write_rank_failed(f, *rank, *how),
            Outcome::PeerLost {
                culprits,
                reason,
                reporters,
            } => self.write_peer_lost(f, culprits, *reason, reporters),
            Outcome::TimedOut { still_running } => {
                let waited = format_duration(self.timeout);
                match (still_running.as_slice(), &self.culprit_node) {
                    ([], _) => write!(
                        f,
                        "timed out after {waited}; every rank had ended, but the launcher had \
                         not exited"
                    ),
                    ([rank], Some(node)) if self.world > 1 => write!(
                        f,
                        "timed out after {waited}; rank {rank} on {node} still running (stopped, \
                         or hung?) after the other ranks had finished"
                    ),
                    ([rank], None) if self.world > 1 => write!(
                        f,
                        "timed out after {waited}; rank {rank} still running (stopped, or \
                         hung?) after the other ranks had finished"
                    ),
                    _ => {
                        let noun = if still_running.len() == 1 {
                            "rank"
                        } else {
                            "ranks"
                        };
                        write!(
                            f,
                            "timed out after {waited}; {noun} still running: {}",
                            rank_list(still_running)
                        )
                    }
                }
            }
            Outcome::Interrupted { signal } => {
                let name = signal_name(*signal).unwrap_or("a signal");
                write!(f, "interrupted by {name}; all ranks stopped")
            }
            Outcome::LauncherFailed { launcher, how } => {
                write!(f, "{launcher} {how} without naming a failed rank")?;
                match self
                    .launcher_lines
                    .iter()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                {
                    Some(last) => write!(f, "; it said last: {}", last.trim()),
                    None => Ok(()),
                }
            }
        }
    }

    /// The culprit, then every other rank that failed on its own (grouped by how it ended:
    /// those that gave up on a peer, and any other status), then those the launcher stopped.
    fn write_rank_failed(
        &self,
        f: &mut fmt::Formatter<'_>,
        rank: usize,
        how: Ended,
    ) -> fmt::Result {
        write!(f, "rank {rank}")?;
        if let Some(node) = &self.culprit_node {
            write!(f, " on {node}")?;
        }
        write!(f, " {how}")?;
        if how == Ended::Exited(EXIT_PEER_FAILED) {
            f.write_str(" (it gave up on a peer, but no rank was seen failing on its own)")?;
        }
        if self.ranks.is_empty() {
            // A cluster launcher's report: what it said of the others.
            let others = self.reported.iter().filter(|r| r.rank != rank);
            return write_failed(f, &failed_groups(others.map(|r| (r.rank, r.how))));
        }
        let others = self.ranks.len().saturating_sub(1);
        if others == 0 {
            return Ok(());
        }
        // How each other rank that ended on its own failed, in the order first seen.
        let failed = failed_groups(
            self.ranks
                .iter()
                .filter(|r| r.rank != rank && !r.stopped)
                .filter_map(|r| Some((r.rank, r.ended?))),
        );
        let stopped = self.stopped_except(&[rank]);
        let (other, was) = if others == 1 {
            ("rank", "was")
        } else {
            ("ranks", "were")
        };
        if failed.is_empty() && stopped.is_empty() {
            return write!(f, "; the other {other} had already finished");
        }
        f.write_str(" first")?;
        write_failed(f, &failed)?;
        if failed.is_empty() && stopped.len() == others {
            write!(f, "; the other {other} {was} stopped")
        } else {
            write_stopped(f, &stopped)
        }
    }

    fn write_peer_lost(
        &self,
        f: &mut fmt::Formatter<'_>,
        culprits: &[usize],
        reason: Lost,
        reporters: &[usize],
    ) -> fmt::Result {
        let mut who = describe_ranks(culprits);
        if let (Some(node), [_]) = (&self.culprit_node, culprits) {
            who = format!("{who} on {node}");
        }
        let it = if culprits.len() == 1 { "it" } else { "them" };
        let by = describe_ranks(reporters);
        // On one host every reporter exited 75; under a cluster launcher, most are known as
        // witnesses by what they wrote, whatever status the program then chose.
        let how = if self.ranks.is_empty() {
            "as their output says".to_string()
        } else {
            format!("status {EXIT_PEER_FAILED}")
        };
        match reason {
            // A cluster launcher may end the others before any gives up.
            Lost::ExitedEarly if reporters.is_empty() => write!(
                f,
                "{who} exited early with status 0 while the others still needed {it}; the \
                 launcher stopped the others"
            )?,
            Lost::ExitedEarly => write!(
                f,
                "{who} exited early with status 0 while the others still needed {it}: {by} gave \
                 up on {it} ({how})"
            )?,
            Lost::StillRunning => {
                let was = if culprits.len() == 1 { "was" } else { "were" };
                write!(
                    f,
                    "{who} {was} still running (hung?) when {by} gave up waiting for {it} \
                     ({how})"
                )?;
                if culprits
                    .iter()
                    .all(|c| self.ranks.get(*c).is_some_and(|r| r.stopped))
                {
                    let it_was = if culprits.len() == 1 {
                        "it was"
                    } else {
                        "they were"
                    };
                    write!(f, "; {it_was} stopped")?;
                }
            }
        }
        write_stopped(f, &self.stopped_except(culprits))
    }
}

/// The ranks that failed, grouped by how they ended (in the order first seen), those that
/// gave up on a lost peer first.
fn failed_groups(ends: impl Iterator<Item = (usize, Ended)>) -> Vec<(Ended, Vec<usize>)> {
    let mut failed: Vec<(Ended, Vec<usize>)> = Vec::new();
    for (rank, end) in ends.filter(|(_, end)| !end.success()) {
        match failed.iter_mut().find(|(e, _)| *e == end) {
            Some((_, ranks)) => ranks.push(rank),
            None => failed.push((end, vec![rank])),
        }
    }
    failed.sort_by_key(|(end, _)| *end != Ended::Exited(EXIT_PEER_FAILED));
    failed
}

/// `; ranks 0-2 gave up on a lost peer (status 75); rank 4 also exited with status 3`.
fn write_failed(f: &mut fmt::Formatter<'_>, failed: &[(Ended, Vec<usize>)]) -> fmt::Result {
    for (end, ranks) in failed {
        if *end == Ended::Exited(EXIT_PEER_FAILED) {
            write!(
                f,
                "; {} gave up on a lost peer (status {EXIT_PEER_FAILED})",
                describe_ranks(ranks)
            )?;
        } else {
            let also = match end {
                Ended::Exited(code) => format!("also exited with status {code}"),
                Ended::Signaled(_) | Ended::SignaledUnnamed if ranks.len() > 1 => {
                    format!("{end}").replacen("was", "were also", 1)
                }
                Ended::Signaled(_) | Ended::SignaledUnnamed => {
                    format!("{end}").replacen("was", "was also", 1)
                }
            };
            write!(f, "; {} {also}", describe_ranks(ranks))?;
        }
    }
    Ok(())
}

/// `; rank 3 was stopped`, `; ranks 0-2, 5 were stopped`, or nothing.
fn write_stopped(f: &mut fmt::Formatter<'_>, stopped: &[usize]) -> fmt::Result {
    match stopped {
        [] => Ok(()),
        [_] => write!(f, "; {} was stopped", describe_ranks(stopped)),
        _ => write!(f, "; {} were stopped", describe_ranks(stopped)),
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
                    // Stopped ranks die of the launcher's SIGTERM; the others finished.
                    ended: Some(if stopped.contains(&rank) {
                        Ended::Signaled(15)
                    } else {
                        Ended::Exited(0)
                    }),
                    elapsed: Duration::from_millis(5),
                    stopped: stopped.contains(&rank),
                })
                .collect(),
            elapsed: Duration::from_millis(1234),
            spawn_time: Duration::from_millis(3),
            pgid: 1000,
            timeout: Duration::from_secs(3),
            escaped: Vec::new(),
            output_wait: Duration::ZERO,
            watchdog_lost: None,
            world: n,
            culprit_node: None,
            left_behind: Vec::new(),
            launcher_lines: Vec::new(),
            reported: Vec::new(),
            abort_hung: false,
        }
    }

    #[test]
    fn escaped_processes_and_waits_are_told() {
        let mut r = report(Outcome::Success, &[], 2);
        r.escaped = vec![
            Escaped {
                pid: 4242,
                command: "sleep".into(),
            },
            Escaped {
                pid: 4243,
                command: "daemon".into(),
            },
        ];
        assert_eq!(
            r.to_string(),
            "2 ranks succeeded in 1.2s; 2 processes started by the ranks had left their process \
             group (setsid?) and were ended: pid 4242 (sleep), 4243 (daemon)"
        );
        r.escaped.truncate(1);
        r.output_wait = Duration::from_secs(2);
        assert_eq!(
            r.to_string(),
            "2 ranks succeeded in 1.2s; 1 process started by the ranks had left their process \
             group (setsid?) and was ended: pid 4242 (sleep); waited 2.0s for the ranks' \
             output: a process the launcher cannot see (another user's?) still holds their pipes"
        );
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

    #[test]
    fn exit_codes_are_listed_one_per_line_and_wrapped() {
        let help = exit_codes_help(&[("0", "fine"), ("128+N", &"word ".repeat(30))]);
        let lines: Vec<&str> = help.lines().collect();
        assert_eq!(lines[0], "EXIT CODES");
        assert_eq!(lines[1], "  0        fine");
        assert!(lines[2].starts_with("  128+N    word word"), "{help}");
        assert!(lines[3].starts_with("           word"), "{help}");
        assert!(lines.iter().all(|l| l.len() <= 78 && l.trim_end() == *l));
        assert_eq!(help.matches("word").count(), 30);
        // Every code of symmem-run is on a line of its own.
        let help = exit_codes_help(EXIT_CODES);
        for (code, _) in EXIT_CODES {
            assert!(
                help.lines().any(|l| l.starts_with(&format!("  {code} "))),
                "{code}: {help}"
            );
        }
    }

    #[test]
    fn one_rank_is_singular_and_many_are_ranges() {
        let r = report(Outcome::Success, &[], 1);
        assert_eq!(r.to_string(), "1 rank succeeded in 1.2s");
        let failed = Outcome::RankFailed {
            rank: 1,
            how: Ended::Exited(7),
        };
        assert_eq!(
            report(failed.clone(), &[0], 2).to_string(),
            "rank 1 exited with status 7 first; the other rank was stopped"
        );
        assert_eq!(
            report(failed, &[], 2).to_string(),
            "rank 1 exited with status 7; the other rank had already finished"
        );
        let r = report(
            Outcome::TimedOut {
                still_running: vec![5],
            },
            &[5],
            8,
        );
        assert_eq!(
            r.to_string(),
            "timed out after 3s; rank 5 still running (stopped, or hung?) after the other ranks \
             had finished"
        );
        let r = RunReport {
            culprit_node: Some("node-b".into()),
            ..r
        };
        assert!(
            r.to_string().contains("rank 5 on node-b still running"),
            "{r}"
        );
        let r = report(
            Outcome::TimedOut {
                still_running: vec![0],
            },
            &[0],
            1,
        );
        assert_eq!(r.to_string(), "timed out after 3s; rank still running: 0");
        let r = report(
            Outcome::TimedOut {
                still_running: vec![],
            },
            &[],
            2,
        );
        assert!(r.to_string().contains("every rank had ended"), "{r}");
        let all: Vec<usize> = (0..256).collect();
        let r = report(
            Outcome::TimedOut {
                still_running: all.clone(),
            },
            &all,
            256,
        );
        assert_eq!(
            r.to_string(),
            "timed out after 3s; ranks still running: 0-255"
        );
        let failed = Outcome::RankFailed {
            rank: 4,
            how: Ended::Exited(1),
        };
        assert_eq!(
            report(failed, &[0, 1, 2, 3, 7], 8).to_string(),
            "rank 4 exited with status 1 first; ranks 0-3, 7 were stopped"
        );
    }

    /// A report whose ranks ended as given (`None`: stopped by SIGTERM).
    fn ended_as(outcome: Outcome, ends: &[Option<Ended>]) -> RunReport {
        let mut r = report(outcome, &[], ends.len());
        for (status, end) in r.ranks.iter_mut().zip(ends) {
            status.ended = Some(end.unwrap_or(Ended::Signaled(15)));
            status.stopped = end.is_none();
        }
        r
    }

    const PEER: Option<Ended> = Some(Ended::Exited(EXIT_PEER_FAILED));

    /// Issue 24, N3: ranks that failed on their own after the culprit were summed up as
    /// "the other ranks had already finished".
    #[test]
    fn every_failed_rank_is_named_with_its_status() {
        let first = Outcome::RankFailed {
            rank: 0,
            how: Ended::Exited(3),
        };
        let r = ended_as(
            first,
            &[
                Some(Ended::Exited(3)),
                Some(Ended::Exited(1)),
                Some(Ended::Exited(127)),
                Some(Ended::Exited(1)),
                PEER,
                Some(Ended::Exited(0)),
                None,
                Some(Ended::Signaled(11)),
            ],
        );
        assert_eq!(
            r.to_string(),
            "rank 0 exited with status 3 first; rank 4 gave up on a lost peer (status 75); \
             ranks 1, 3 also exited with status 1; rank 2 also exited with status 127; rank 7 \
             was also killed by signal 11 (SIGSEGV); rank 6 was stopped"
        );
        assert_eq!(r.exit_code(), 3);
        let killed = ended_as(
            Outcome::RankFailed {
                rank: 3,
                how: Ended::Signaled(9),
            },
            &[
                Some(Ended::Signaled(15)),
                Some(Ended::Signaled(15)),
                Some(Ended::Signaled(15)),
                Some(Ended::Signaled(9)),
            ],
        );
        assert!(
            killed
                .to_string()
                .ends_with("; ranks 0, 1, 2 were also killed by signal 15 (SIGTERM)"),
            "{killed}"
        );
        let first = Outcome::RankFailed {
            rank: 1,
            how: Ended::Exited(2),
        };
        let r = ended_as(first, &[Some(Ended::Exited(3)), Some(Ended::Exited(2))]);
        assert_eq!(
            r.to_string(),
            "rank 1 exited with status 2 first; rank 0 also exited with status 3"
        );
    }

    #[test]
    fn peer_failures_are_told_apart_from_the_culprit() {
        let panic = Outcome::RankFailed {
            rank: 2,
            how: Ended::Exited(101),
        };
        let r = ended_as(panic.clone(), &[PEER, PEER, Some(Ended::Exited(101)), PEER]);
        assert_eq!(
            r.to_string(),
            "rank 2 exited with status 101 first; ranks 0, 1, 3 gave up on a lost peer \
             (status 75)"
        );
        assert_eq!(r.exit_code(), 101);
        let r = ended_as(panic, &[PEER, None, Some(Ended::Exited(101)), None]);
        assert_eq!(
            r.to_string(),
            "rank 2 exited with status 101 first; rank 0 gave up on a lost peer (status 75); \
             ranks 1, 3 were stopped"
        );

        let early = Outcome::PeerLost {
            culprits: vec![1],
            reason: Lost::ExitedEarly,
            reporters: vec![2, 0, 3],
        };
        let r = ended_as(early, &[PEER, Some(Ended::Exited(0)), PEER, PEER]);
        assert_eq!(
            r.to_string(),
            "rank 1 exited early with status 0 while the others still needed it: ranks 0, 2, 3 \
             gave up on it (status 75)"
        );
        assert_eq!(r.exit_code(), EXIT_PEER_FAILED);

        let hung = Outcome::PeerLost {
            culprits: vec![3],
            reason: Lost::StillRunning,
            reporters: vec![0, 1, 2],
        };
        let r = ended_as(hung, &[PEER, PEER, PEER, None]);
        assert_eq!(
            r.to_string(),
            "rank 3 was still running (hung?) when ranks 0, 1, 2 gave up waiting for it \
             (status 75); it was stopped"
        );
        assert_eq!(r.exit_code(), 75);

        let hung = Outcome::PeerLost {
            culprits: vec![1, 2],
            reason: Lost::StillRunning,
            reporters: vec![0],
        };
        let r = ended_as(hung, &[PEER, None, None]);
        assert_eq!(
            r.to_string(),
            "ranks 1, 2 were still running (hung?) when rank 0 gave up waiting for them \
             (status 75); they were stopped"
        );

        let alone = Outcome::RankFailed {
            rank: 0,
            how: Ended::Exited(EXIT_PEER_FAILED),
        };
        let r = ended_as(alone, &[PEER, PEER]);
        assert_eq!(
            r.to_string(),
            "rank 0 exited with status 75 (it gave up on a peer, but no rank was seen failing \
             on its own) first; rank 1 gave up on a lost peer (status 75)"
        );
        assert_eq!(r.exit_code(), 75);
    }
}

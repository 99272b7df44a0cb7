//! Running a cluster launcher (`mpirun`, `srun`) as one child process: what [`Mpirun`] and
//! [`Srun`] share. The variant builds the command line and says how to read the launcher's
//! output and its report; this file starts it, hands every line to the sink, stops it at the
//! timeout or on a signal, asks the caller's sweep what it left on the nodes, and writes the
//! [`RunReport`].
//!
//! [`Mpirun`]: super::Mpirun
//! [`Srun`]: super::Srun

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::Sweep;
use crate::error::LaunchError;
use crate::group::{command_name, exiting, live_members, signal_group};
use crate::report::{
    EXIT_PEER_FAILED, Ended, LeftBehind, Lost, Outcome, OutputLine, RankEnd, RunReport, Stream,
};
use crate::spec::LaunchSpec;
use crate::watchdog::{Watchdog, new_run_id};
use symmem::Witness;
use symmem::format_duration;
use symmem_process::SignalGuard;

/// How often the launcher is polled (and the longest a line waits).
const POLL: Duration = Duration::from_millis(10);

/// After the launcher ended, how long to wait for the last output.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// Splits a launcher's output into ranks' lines and its own: one per pipe.
pub(crate) trait Tagger: Send {
    /// The lines that `raw` (one line of the launcher's output on `pipe`) completes.
    fn feed(&mut self, raw: &str, pipe: Stream) -> Vec<OutputLine>;
    /// What is left once the output has ended.
    fn finish(&mut self) -> Vec<OutputLine>;
}

/// How a launcher is stopped at the timeout or on a signal; `SIGKILL` to its process group
/// follows after the grace period either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// `SIGTERM` (mpirun forwards it to the ranks, then exits).
    Terminate,
    /// `SIGINT` twice within a second (srun then sends the tasks SIGINT, SIGCONT, SIGTERM and
    /// SIGKILL; one SIGINT alone only makes it print the tasks' states).
    InterruptTwice,
}

/// One run of a cluster launcher, as its variant describes it.
pub(crate) struct Job<'a> {
    /// `mpirun`, `srun`: for messages.
    pub(crate) name: &'static str,
    /// The whole command line: wrapper, launcher, its arguments, the program, its arguments.
    pub(crate) words: Vec<OsString>,
    /// Environment for the launcher itself, before the spec's (which the ranks get).
    pub(crate) env: Vec<(OsString, OsString)>,
    pub(crate) tagger: fn() -> Box<dyn Tagger>,
    /// How ranks ended, as the launcher's own lines and its exit status report it.
    pub(crate) reports: fn(&[String], ExitStatus) -> Vec<RankEnd>,
    /// How many ranks each node runs, in rank order (the lowest of each is its leader), when
    /// the launcher places them so; empty when unknown.
    pub(crate) placed: Vec<usize>,
    /// Those nodes' names, in the same order (where known).
    pub(crate) nodes: Vec<String>,
    /// The launcher's own lines that are kept for `reports` but not handed to the sink (a log
    /// asked for only to name a culprit the launcher's report may leave out).
    pub(crate) quiet: fn(&str) -> bool,
    pub(crate) stop: Stop,
    /// Whether one of the launcher's own lines says it is ending the job because a rank failed
    /// (mpirun: "the job has been aborted"). From then on it has the grace period to exit;
    /// past it, its group gets SIGKILL (Open MPI 4.1 can hang for good in its abort, M6).
    pub(crate) aborting: fn(&str) -> bool,
    pub(crate) sweep: Option<&'a Sweep>,
}

/// Text lines as a launcher's own lines come: for the parsers' tests.
#[cfg(test)]
pub(crate) fn lines(text: &[&str]) -> Vec<String> {
    text.iter().map(|l| l.to_string()).collect()
}

/// The command line of `command`, for messages.
pub(crate) fn shown(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|w| w.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `job` for `spec` to the end; `sink` gets every line, the ranks' and the launcher's.
pub(crate) fn run(
    job: Job<'_>,
    spec: &LaunchSpec,
    sink: &mut dyn FnMut(&OutputLine),
) -> Result<RunReport, LaunchError> {
    spec.check()?;
    super::refuse_rank_env(spec, job.name)?;
    let signals = SignalGuard::install()?;
    let run_id = new_run_id()?;
    let mut watchdog = Watchdog::start(&run_id, None)?;
    let mut command = command(&job, spec, &run_id);
    let shown = shown(&command);
    let start = Instant::now();
    let mut child = command.spawn().map_err(|cause| LaunchError::Launcher {
        command: shown.clone(),
        cause,
    })?;
    let spawn_time = start.elapsed();
    let pgid = i32::try_from(child.id()).unwrap_or(i32::MAX);
    watchdog.guard_group(pgid);
    let (rx, readers) = spawn_readers(&mut child, job.tagger);
    let mut watch = Watch {
        rx,
        sink,
        own: Vec::new(),
        said: Vec::new(),
        witnesses: BTreeSet::new(),
        late: BTreeSet::new(),
        accused: BTreeSet::new(),
        gone: BTreeMap::new(),
        aborting_since: None,
        aborting: job.aborting,
        quiet: job.quiet,
    };
    let ended = watch.until_exit(&mut child, &job, spec, &signals, start);
    let ended = match ended {
        Ok(ended) => ended,
        Err(cause) => {
            signal_group(pgid, Signal::SIGKILL);
            let _ = child.wait();
            return Err(LaunchError::Launcher {
                command: shown,
                cause,
            });
        }
    };
    let mut left_behind = end_group(pgid, ended.killed);
    left_behind.extend(job.sweep.map(|s| s.run(spec.grace)).unwrap_or_default());
    let output_wait = watch.drain();
    for reader in readers {
        if reader.is_finished() {
            let _ = reader.join();
        }
    }
    let watchdog_lost = watchdog.lost().map(ended_as);
    let reported = (job.reports)(&watch.said, ended.status);
    let told = Told {
        reported: &reported,
        witnesses: &watch.witnesses,
        late: &watch.late,
        accused: &watch.accused,
        gone: &watch.gone,
        ranks: spec.ranks,
        placed: &job.placed,
        nodes: &job.nodes,
    };
    // At the timeout: the ranks the launcher had already seen end (status 0) before it was
    // told to end the job are not among those still running.
    let before_stop = &watch.said[..ended.seen_at_stop.min(watch.said.len())];
    let finished: BTreeSet<usize> = (job.reports)(before_stop, ended.status)
        .iter()
        .filter(|r| r.how.success())
        .map(|r| r.rank)
        .collect();
    let (outcome, culprit_node) = outcome(job.name, &ended, &told, &finished);
    Ok(RunReport {
        outcome,
        ranks: Vec::new(),
        elapsed: start.elapsed(),
        spawn_time,
        pgid,
        timeout: spec.timeout,
        escaped: Vec::new(),
        output_wait,
        watchdog_lost,
        world: spec.ranks,
        culprit_node,
        left_behind,
        launcher_lines: watch.own,
        reported,
        abort_hung: ended.abort_hung,
    })
}

/// The launcher's command: its words, its environment then the spec's, the run's id; its own
/// process group (Ctrl-C is ours to handle, and SIGKILL reaches all it started here).
fn command(job: &Job<'_>, spec: &LaunchSpec, run_id: &str) -> Command {
    let (first, rest) = job
        .words
        .split_first()
        .expect("the launcher's name comes first");
    let mut command = Command::new(first);
    command
        .args(rest)
        .envs(job.env.iter().chain(&spec.env).map(|(k, v)| (k, v)))
        .env(symmem::settings::RUN_ID.name, run_id)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    symmem_process::default_signals(&mut command);
    command
}

/// How the launcher ended: its status, and why it was stopped if it was.
struct End {
    status: ExitStatus,
    stopped: Option<Why>,
    /// How many of the launcher's own lines (shown or kept) had come when it was stopped:
    /// what it said of the ranks before being told to end them.
    seen_at_stop: usize,
    /// Whether its group got SIGKILL (it outlived the grace period).
    killed: bool,
    /// Whether that was because it hung in its abort ([`Job::aborting`]).
    abort_hung: bool,
}

#[derive(Clone, Copy)]
enum Why {
    Timeout,
    Signal(i32),
}

/// What the launcher and the ranks' output told of how the ranks ended.
struct Told<'a> {
    /// The ranks' ends the launcher reported.
    reported: &'a [RankEnd],
    /// The ranks that wrote a witness's report.
    witnesses: &'a BTreeSet<usize>,
    /// The ranks whose report says that they themselves never arrived, or came after another
    /// rank's report had waited for them: they were late (a stopped rank, resumed by the
    /// launcher to end it, reads its own verdict or finds the others gone), not witnesses.
    late: &'a BTreeSet<usize>,
    /// The ranks some witness's report says it waited for in vain ([`accused`]).
    accused: &'a BTreeSet<usize>,
    /// Of those, the ones a report says went away (their process ended), with their node
    /// where it says ([`gone`]).
    gone: &'a BTreeMap<usize, Option<String>>,
    /// The world size.
    ranks: usize,
    /// Ranks per node in rank order ([`Job::placed`]); empty when unknown.
    placed: &'a [usize],
    /// Their nodes' names ([`Job::nodes`]); empty when unknown.
    nodes: &'a [String],
}

/// How the job ended, and the culprit's node where known; `finished`: the ranks the launcher
/// said had ended with status 0 before it was stopped at the timeout.
fn outcome(
    launcher: &'static str,
    end: &End,
    told: &Told<'_>,
    finished: &BTreeSet<usize>,
) -> (Outcome, Option<String>) {
    match end.stopped {
        Some(Why::Signal(signal)) => return (Outcome::Interrupted { signal }, None),
        Some(Why::Timeout) => return timed_out(told, finished),
        None => {}
    }
    if end.status.success() {
        return (Outcome::Success, None);
    }
    match blame(told) {
        Some(found) => found,
        None => (
            Outcome::LauncherFailed {
                launcher,
                how: ended_as(end.status),
            },
            None,
        ),
    }
}

/// A job stopped at the timeout: the ranks still running then, all but those the launcher
/// had seen end (mpirun's log of states says; srun says nothing of a task that exits 0),
/// with the node of a lone one where the launcher placed the ranks itself.
fn timed_out(told: &Told<'_>, finished: &BTreeSet<usize>) -> (Outcome, Option<String>) {
    let still_running: Vec<usize> = (0..told.ranks).filter(|r| !finished.contains(r)).collect();
    let node = match still_running.as_slice() {
        [one] => node_of(told, *one),
        _ => None,
    };
    (Outcome::TimedOut { still_running }, node)
}

/// The culprit of a failed job, by the failure policy, from what the launcher reported and
/// what the ranks wrote: a rank that failed on its own; else one the launcher saw leave early
/// (status 0 without finalizing); else, when only witnesses (status 75) were reported, the
/// ranks that wrote no witness's report (hung, stopped, or ended before they could write
/// one): a witness is never the culprit. `None` when nobody can be named.
fn blame(told: &Told<'_>) -> Option<(Outcome, Option<String>)> {
    let witness = Ended::Exited(EXIT_PEER_FAILED);
    // A rank that wrote a witness's report is a witness, whatever it then ended with: srun
    // kills every task once one exited 75, and a program may exit otherwise after a witness's
    // error (symmem-conformance exits 2 when its provider cannot start).
    if let Some(own) = told
        .reported
        .iter()
        .find(|r| r.how != witness && !r.how.success() && !told.witnesses.contains(&r.rank))
    {
        let outcome = Outcome::RankFailed {
            rank: own.rank,
            how: own.how,
        };
        return Some((outcome, own.node.clone()));
    }
    let mut reporters: Vec<usize> = told
        .reported
        .iter()
        .filter(|r| r.how == witness && !told.late.contains(&r.rank))
        .map(|r| r.rank)
        .collect();
    for &rank in told.witnesses {
        if !reporters.contains(&rank) {
            reporters.push(rank);
        }
    }
    if let Some(early) = told.reported.iter().find(|r| r.how.success()) {
        reporters.retain(|&r| r != early.rank);
        let outcome = Outcome::PeerLost {
            culprits: vec![early.rank],
            reason: Lost::ExitedEarly,
            reporters,
        };
        return Some((outcome, early.node.clone()));
    }
    if told.reported.is_empty() {
        return None;
    }
    let silent: Vec<usize> = (0..told.ranks).filter(|r| !reporters.contains(r)).collect();
    // A rank reaches the other nodes through its node's leader only, and waits on it longer
    // than anyone waits on the leader: behind a silent leader, its silence is the leader's.
    let silent: Vec<usize> = silent
        .iter()
        .copied()
        .filter(|&r| leader(told.placed, r).is_none_or(|l| l == r || !silent.contains(&l)))
        .collect();
    if silent.is_empty() {
        return None;
    }
    // The launcher ends every rank once the first witness exits: ranks it ended before they
    // could write their own report are silent too. The ones the reports waited for are.
    let waited_for: Vec<usize> = silent
        .iter()
        .copied()
        .filter(|r| told.accused.contains(r))
        .collect();
    let silent = if waited_for.is_empty() {
        silent
    } else {
        waited_for
    };
    // Gone, by the reports, and not failed, by the launcher (which reports a failed exit or a
    // signal): they exited with status 0 before the others were done (srun says nothing of
    // a task that exits 0).
    if silent.iter().all(|r| told.gone.contains_key(r)) {
        let node = match silent.as_slice() {
            [one] => told.gone[one].clone(),
            _ => None,
        };
        let outcome = Outcome::PeerLost {
            culprits: silent,
            reason: Lost::ExitedEarly,
            reporters,
        };
        return Some((outcome, node));
    }
    // Where the launcher placed the ranks itself, a lone culprit's node is known.
    let node = match silent.as_slice() {
        [one] => node_of(told, *one),
        _ => None,
    };
    let outcome = Outcome::PeerLost {
        culprits: silent,
        reason: Lost::StillRunning,
        reporters,
    };
    Some((outcome, node))
}

/// The node the launcher placed `rank` on, when it says.
fn node_of(told: &Told<'_>, rank: usize) -> Option<String> {
    let (index, _) = placement(told.placed, rank)?;
    told.nodes.get(index).cloned()
}

/// What a rank's line tells the culprit rules.
#[derive(Debug, PartialEq, Eq)]
enum Said {
    /// It was late: its report names itself as the one that never arrived, or came after
    /// another rank's report had waited for it (stopped, then resumed by the launcher to end
    /// it, it finds the others gone).
    Late,
    /// A witness's report ([`Witness`]).
    Witness(Witness),
    Other,
}

/// What `rank`'s line `text` says (a witness's line, [`Witness`]), given the ranks that
/// reported as witnesses so far and those their reports waited for.
fn said(
    rank: usize,
    text: &str,
    witnesses: &BTreeSet<usize>,
    waited_for: &BTreeSet<usize>,
) -> Said {
    let Some(mut witness) = Witness::parse(text) else {
        return Said::Other;
    };
    let names_itself = witness.accused.contains(&rank);
    let came_late = waited_for.contains(&rank) && !witnesses.contains(&rank);
    if names_itself || came_late {
        return Said::Late;
    }
    witness.accused.retain(|&r| r != rank);
    Said::Witness(witness)
}

/// The leader (lowest rank) of `rank`'s node, when the placement is known.
fn leader(placed: &[usize], rank: usize) -> Option<usize> {
    placement(placed, rank).map(|(_, first)| first)
}

/// Where `placed` (ranks per node, in rank order) puts `rank`: its node's index and that
/// node's lowest rank.
fn placement(placed: &[usize], rank: usize) -> Option<(usize, usize)> {
    let mut first = 0;
    for (index, &count) in placed.iter().enumerate() {
        if rank < first + count {
            return Some((index, first));
        }
        first += count;
    }
    None
}

fn ended_as(status: ExitStatus) -> Ended {
    match (status.code(), status.signal()) {
        (Some(code), _) => Ended::Exited(code),
        (None, Some(signal)) => Ended::Signaled(signal),
        (None, None) => Ended::Exited(status.into_raw()),
    }
}

/// Threads that read the launcher's stdout and stderr, tag their lines and send them on.
fn spawn_readers(
    child: &mut Child,
    tagger: fn() -> Box<dyn Tagger>,
) -> (Receiver<OutputLine>, Vec<JoinHandle<()>>) {
    let (tx, rx) = mpsc::channel::<OutputLine>();
    let pipes: [Option<(Box<dyn Read + Send>, Stream)>; 2] = [
        child
            .stdout
            .take()
            .map(|p| (Box::new(p) as Box<dyn Read + Send>, Stream::Stdout)),
        child
            .stderr
            .take()
            .map(|p| (Box::new(p) as Box<dyn Read + Send>, Stream::Stderr)),
    ];
    let readers = pipes
        .into_iter()
        .flatten()
        .map(|(pipe, stream)| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut tags = tagger();
                let mut reader = BufReader::new(pipe);
                let mut buf = Vec::new();
                while matches!(reader.read_until(b'\n', &mut buf), Ok(n) if n > 0) {
                    let raw = String::from_utf8_lossy(&buf);
                    let raw = raw.trim_end_matches(['\n', '\r']);
                    for line in tags.feed(raw, stream) {
                        if tx.send(line).is_err() {
                            return;
                        }
                    }
                    buf.clear();
                }
                for line in tags.finish() {
                    let _ = tx.send(line);
                }
            })
        })
        .collect();
    (rx, readers)
}

/// The lines so far, and where they go.
struct Watch<'s> {
    rx: Receiver<OutputLine>,
    sink: &'s mut dyn FnMut(&OutputLine),
    /// The launcher's own lines.
    own: Vec<String>,
    /// All its own lines, shown or kept from the sink ([`Job::quiet`]), in the order they
    /// came: what [`Job::reports`] reads (the order tells what came before a failure).
    said: Vec<String>,
    /// The ranks that wrote a witness's report (they gave up on a lost peer), in rank order.
    witnesses: BTreeSet<usize>,
    /// The ranks whose report says they themselves never arrived ([`Told::late`]).
    late: BTreeSet<usize>,
    /// The ranks the witnesses' reports waited for ([`Told::accused`]).
    accused: BTreeSet<usize>,
    /// The ranks the witnesses' reports say went away ([`Told::gone`]).
    gone: BTreeMap<usize, Option<String>>,
    /// When the launcher first said it was aborting the job ([`Job::aborting`]).
    aborting_since: Option<Instant>,
    aborting: fn(&str) -> bool,
    quiet: fn(&str) -> bool,
}

impl Watch<'_> {
    fn take(&mut self, line: OutputLine) {
        match line.rank {
            None if (self.quiet)(&line.text) => self.said.push(line.text),
            None => {
                (self.sink)(&line);
                if self.aborting_since.is_none() && (self.aborting)(&line.text) {
                    self.aborting_since = Some(Instant::now());
                }
                self.said.push(line.text.clone());
                self.own.push(line.text);
            }
            Some(rank) => {
                (self.sink)(&line);
                match said(rank, &line.text, &self.witnesses, &self.accused) {
                    Said::Late => {
                        self.late.insert(rank);
                    }
                    Said::Witness(witness) => {
                        self.witnesses.insert(rank);
                        self.accused.extend(witness.accused);
                        if let Some((lost, node)) = witness.gone
                            && lost != rank
                        {
                            let known = self.gone.entry(lost).or_default();
                            if known.is_none() {
                                *known = node;
                            }
                        }
                    }
                    Said::Other => {}
                }
            }
        }
    }

    /// Hands on lines until the launcher exits; stops it at the timeout or on a signal.
    fn until_exit(
        &mut self,
        child: &mut Child,
        job: &Job<'_>,
        spec: &LaunchSpec,
        signals: &SignalGuard,
        start: Instant,
    ) -> std::io::Result<End> {
        let deadline = start.checked_add(spec.timeout);
        let mut stopped: Option<(Why, Instant)> = None;
        let mut seen_at_stop = usize::MAX;
        let mut killed = false;
        let mut abort_hung = false;
        loop {
            while let Ok(line) = self.rx.try_recv() {
                self.take(line);
            }
            if let Some(status) = child.try_wait()? {
                let stopped = stopped.map(|(why, _)| why);
                return Ok(End {
                    status,
                    stopped,
                    seen_at_stop,
                    killed,
                    abort_hung,
                });
            }
            let now = Instant::now();
            let why = match signals.caught() {
                Some(signal) => Some(Why::Signal(signal)),
                None if deadline.is_some_and(|d| now >= d) => Some(Why::Timeout),
                None => None,
            };
            match (stopped, why) {
                (None, Some(why)) => {
                    stop(child.id(), job.stop);
                    stopped = Some((why, now));
                    seen_at_stop = self.said.len();
                }
                (Some((_, at)), _) if now >= at + spec.grace => killed = kill_group(child),
                // Aborting for longer than the grace period: stuck in its abort, which a
                // signal to stop would only restart ("abort is already in progress").
                _ if !killed && self.aborting_since.is_some_and(|at| now >= at + spec.grace) => {
                    killed = kill_group(child);
                    abort_hung = true;
                    let line = OutputLine {
                        rank: None,
                        stream: Stream::Stderr,
                        text: format!(
                            "symmem-launch: {} said it was aborting the job {} ago and is still \
                             running: its process group got SIGKILL",
                            job.name,
                            format_duration(spec.grace)
                        ),
                    };
                    (self.sink)(&line);
                }
                _ => {}
            }
            if let Ok(line) = self.rx.recv_timeout(POLL) {
                self.take(line);
            }
        }
    }

    /// Takes the lines still coming, within [`DRAIN_LIMIT`]; how long it waited when the pipes
    /// stayed open that long (a process left behind still holds them), else zero.
    fn drain(&mut self) -> Duration {
        let start = Instant::now();
        let until = start + DRAIN_LIMIT;
        loop {
            match self
                .rx
                .recv_timeout(until.saturating_duration_since(Instant::now()))
            {
                Ok(line) => self.take(line),
                Err(RecvTimeoutError::Disconnected) => return Duration::ZERO,
                Err(RecvTimeoutError::Timeout) => return start.elapsed(),
            }
        }
    }
}

/// How long what the launcher leaves in its group may take to end by itself ([`end_group`]).
const SETTLE: Duration = Duration::from_millis(500);

/// After the launcher exited: what is still alive in its process group (here, on this host)
/// outlived it; it gets SIGKILL, and is waited for (within [`DRAIN_LIMIT`]) until it is gone
/// or a zombie. Returned as left behind unless the group had SIGKILL already (`killed`: then
/// what is there is only late to die).
fn end_group(pgid: i32, killed: bool) -> Vec<LeftBehind> {
    let mut found: Vec<LeftBehind> = Vec::new();
    // A launcher's own helpers (srun forks one) may still be on their way out when it has
    // exited: they get a moment to end by themselves before anything is called left behind
    // (issue 42, R4: a passing run failed on `srun` "left behind", 1 of 7).
    let settle = Instant::now() + SETTLE;
    while !killed && !live_members(pgid).is_empty() && Instant::now() < settle {
        std::thread::sleep(POLL);
    }
    let until = Instant::now() + DRAIN_LIMIT;
    loop {
        let live = live_members(pgid);
        if live.is_empty() || Instant::now() >= until {
            return found;
        }
        for &pid in &live {
            // One in its exit is not left behind, only late.
            if !killed && !exiting(pid as u32) && !found.iter().any(|l| l.pid == pid) {
                found.push(LeftBehind {
                    node: "this host".into(),
                    pid,
                    command: command_name(pid),
                });
            }
        }
        signal_group(pgid, Signal::SIGKILL);
        std::thread::sleep(POLL);
    }
}

/// SIGKILL to the launcher's process group; true.
fn kill_group(child: &Child) -> bool {
    signal_group(
        i32::try_from(child.id()).unwrap_or(i32::MAX),
        Signal::SIGKILL,
    );
    true
}

fn stop(pid: u32, how: Stop) {
    let pid = Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX));
    match how {
        Stop::Terminate => {
            let _ = kill(pid, Signal::SIGTERM);
        }
        Stop::InterruptTwice => {
            // Apart enough that the first is handled before the second comes (the kernel
            // merges a signal into one still pending), well within srun's one second.
            let _ = kill(pid, Signal::SIGINT);
            std::thread::sleep(Duration::from_millis(300));
            let _ = kill(pid, Signal::SIGINT);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(rank: usize, how: Ended) -> RankEnd {
        RankEnd {
            rank,
            node: Some(format!("n{rank}")),
            how,
        }
    }

    fn named(reported: &[RankEnd], witnesses: &[usize], ranks: usize) -> Option<Outcome> {
        let witnesses = witnesses.iter().copied().collect();
        let told = Told {
            reported,
            witnesses: &witnesses,
            late: &BTreeSet::new(),
            accused: &BTreeSet::new(),
            gone: &BTreeMap::new(),
            ranks,
            placed: &[],
            nodes: &[],
        };
        blame(&told).map(|(outcome, _)| outcome)
    }

    /// M3: node-b's leader (rank 2 of a 2x2 job) stopped. Node-a's ranks said ranks 2 and 3
    /// never arrived; once mpirun resumed the leader to end it, it and rank 3 read the same
    /// verdict, naming themselves: they were late, not witnesses. Rank 3 waited on its
    /// leader only: the leader is the culprit.
    #[test]
    fn a_stopped_leader_is_named_not_the_ranks_behind_it() {
        let peer = Ended::Exited(EXIT_PEER_FAILED);
        let reported = [end(0, peer)];
        let stopped = |witnesses: &[usize], late: &[usize], placed: &[usize]| {
            let witnesses = witnesses.iter().copied().collect();
            let late = late.iter().copied().collect();
            let told = Told {
                reported: &reported,
                witnesses: &witnesses,
                late: &late,
                accused: &BTreeSet::new(),
                gone: &BTreeMap::new(),
                ranks: 4,
                placed,
                nodes: &[],
            };
            blame(&told).map(|(outcome, _)| outcome)
        };
        let leader = Some(Outcome::PeerLost {
            culprits: vec![2],
            reason: Lost::StillRunning,
            reporters: vec![0, 1],
        });
        // Both resumed and read the verdict, only the leader, or neither.
        assert_eq!(stopped(&[0, 1], &[2, 3], &[2, 2]), leader);
        assert_eq!(stopped(&[0, 1], &[2], &[2, 2]), leader);
        assert_eq!(stopped(&[0, 1], &[], &[2, 2]), leader);
        // Without the placement, both are named.
        assert_eq!(
            stopped(&[0, 1], &[2, 3], &[]),
            Some(Outcome::PeerLost {
                culprits: vec![2, 3],
                reason: Lost::StillRunning,
                reporters: vec![0, 1],
            })
        );
        // A rank hung behind a live leader, which said so: that rank alone.
        assert_eq!(
            stopped(&[0, 1, 2], &[], &[2, 2]),
            Some(Outcome::PeerLost {
                culprits: vec![3],
                reason: Lost::StillRunning,
                reporters: vec![0, 1, 2],
            })
        );
        assert_eq!(leader_of_each(&[3, 1]), [0, 0, 0, 3]);
        // Where the launcher named the nodes it placed them on, the culprit's comes with it.
        let witnesses = BTreeSet::from([0, 1]);
        let nodes = ["node-a".to_string(), "node-b".to_string()];
        let told = Told {
            reported: &reported,
            witnesses: &witnesses,
            late: &BTreeSet::new(),
            accused: &BTreeSet::new(),
            gone: &BTreeMap::new(),
            ranks: 4,
            placed: &[2, 2],
            nodes: &nodes,
        };
        assert_eq!(
            blame(&told).and_then(|(_, node)| node).as_deref(),
            Some("node-b")
        );
    }

    fn leader_of_each(placed: &[usize]) -> Vec<usize> {
        (0..placed.iter().sum())
            .map(|r| leader(placed, r).unwrap())
            .collect()
    }

    #[test]
    fn a_witness_is_never_the_culprit_while_another_failed() {
        let peer = Ended::Exited(EXIT_PEER_FAILED);
        let reported = [end(0, peer), end(1, peer), end(3, Ended::Signaled(9))];
        let killed = Outcome::RankFailed {
            rank: 3,
            how: Ended::Signaled(9),
        };
        assert_eq!(named(&reported, &[], 4), Some(killed));
        assert_eq!(named(&[], &[], 4), None);
    }

    /// M3: a hung (or stopped) rank under mpirun. mpirun names the first witness that gave
    /// up (status 75), which is never the culprit: the ranks that wrote no witness's report
    /// are, and the witnesses are the reporters.
    #[test]
    fn only_witnesses_reported_names_the_silent_ranks() {
        let peer = Ended::Exited(EXIT_PEER_FAILED);
        assert_eq!(
            named(&[end(1, peer)], &[0, 1, 2], 4),
            Some(Outcome::PeerLost {
                culprits: vec![3],
                reason: Lost::StillRunning,
                reporters: vec![1, 0, 2],
            })
        );
        // Every rank wrote a witness's report: nobody to name.
        assert_eq!(named(&[end(1, peer)], &[0, 1], 2), None);
    }

    /// M3 under srun: the first witness's exit 75 made srun kill every other task, the hung
    /// one and the witnesses still waiting alike; those that wrote a witness's report are
    /// not the culprit.
    #[test]
    fn a_witness_killed_by_the_launcher_is_not_the_culprit() {
        let peer = Ended::Exited(EXIT_PEER_FAILED);
        let term = Ended::Signaled(15);
        let reported = [end(0, peer), end(1, term), end(2, term), end(3, term)];
        assert_eq!(
            named(&reported, &[0, 1, 3], 4),
            Some(Outcome::RankFailed { rank: 2, how: term })
        );
    }

    /// M3: a rank that left early (mpirun: "exiting improperly") is the culprit, with its node.
    #[test]
    fn a_rank_that_left_early_is_named_with_its_node() {
        let witnesses = BTreeSet::from([0, 1]);
        let told = Told {
            reported: &[end(3, Ended::Exited(0))],
            witnesses: &witnesses,
            late: &BTreeSet::new(),
            accused: &BTreeSet::new(),
            gone: &BTreeMap::new(),
            ranks: 4,
            placed: &[2, 2],
            nodes: &[],
        };
        assert_eq!(
            blame(&told),
            Some((
                Outcome::PeerLost {
                    culprits: vec![3],
                    reason: Lost::ExitedEarly,
                    reporters: vec![0, 1],
                },
                Some("n3".into())
            ))
        );
    }

    /// R1: rank 3 (a leaf of node-b) stopped at start-up. Its leader, rank 2, wrote that rank
    /// 3 never connected to it and exited 75; the launcher then ended ranks 0 and 1 before
    /// they wrote a word, silent as rank 3. Only rank 3, whom the report waited for, is named.
    #[test]
    fn of_the_silent_ranks_the_ones_a_report_waited_for_are_named() {
        let witnesses = BTreeSet::from([2]);
        let accused = BTreeSet::from([3]);
        // What mpirun reports: the first process that failed.
        let reported = [end(2, Ended::Exited(EXIT_PEER_FAILED))];
        let told = Told {
            reported: &reported,
            witnesses: &witnesses,
            late: &BTreeSet::new(),
            accused: &accused,
            gone: &BTreeMap::new(),
            ranks: 4,
            placed: &[2, 2],
            nodes: &[],
        };
        assert_eq!(
            blame(&told).map(|(outcome, _)| outcome),
            Some(Outcome::PeerLost {
                culprits: vec![3],
                reason: Lost::StillRunning,
                reporters: vec![2],
            })
        );
    }

    /// R1, mid-run: rank 3 stopped in a barrier; ranks 0-2 reported that it never arrived.
    /// Resumed by mpirun to end it, rank 3 finds its leader gone and says so: late, not a
    /// witness, so it stays the one the reports waited for.
    #[test]
    fn a_rank_reporting_after_others_waited_for_it_was_late() {
        let mut witnesses = BTreeSet::new();
        let mut waited_for = BTreeSet::new();
        let line = |rank: usize, accused: Vec<usize>| {
            Witness {
                rank,
                accused,
                gone: None,
                during: "collective #7 barrier".into(),
            }
            .line()
        };
        for rank in [0, 1, 2] {
            match said(rank, &line(rank, vec![3]), &witnesses, &waited_for) {
                Said::Witness(witness) => {
                    assert_eq!(witness.accused, [3]);
                    witnesses.insert(rank);
                    waited_for.extend(witness.accused);
                }
                other => panic!("rank {rank}: {other:?}"),
            }
        }
        let leader_gone = line(3, vec![]);
        assert_eq!(said(3, &leader_gone, &witnesses, &waited_for), Said::Late);
        // The same line from a rank nobody waited for is a witness's.
        assert!(matches!(
            said(3, &leader_gone, &BTreeSet::new(), &BTreeSet::new()),
            Said::Witness(Witness { accused, .. }) if accused.is_empty()
        ));
        // A rank whose own line names it as the one that never arrived was late.
        assert_eq!(
            said(3, &line(3, vec![3]), &BTreeSet::new(), &BTreeSet::new()),
            Said::Late
        );
    }

    /// R5: under srun rank 3 exited 0 at check 5 (srun says nothing of that); every witness
    /// said it was lost, on node-b. It exited early, on node-b: not "still running (hung?)".
    #[test]
    fn a_rank_the_reports_say_went_away_exited_early_with_its_node() {
        let witnesses = BTreeSet::from([0, 1, 2]);
        let accused = BTreeSet::from([3]);
        let gone = BTreeMap::from([(3, Some("node-b".to_string()))]);
        let reported = [end(0, Ended::Exited(EXIT_PEER_FAILED))];
        let told = Told {
            reported: &reported,
            witnesses: &witnesses,
            late: &BTreeSet::new(),
            accused: &accused,
            gone: &gone,
            ranks: 4,
            placed: &[2, 2],
            nodes: &[],
        };
        assert_eq!(
            blame(&told),
            Some((
                Outcome::PeerLost {
                    culprits: vec![3],
                    reason: Lost::ExitedEarly,
                    reporters: vec![0, 1, 2],
                },
                Some("node-b".into())
            ))
        );
    }

    /// Only a witness's line is one: the messages' English is for people.
    #[test]
    fn only_witness_lines_are_witness_reports() {
        let english = "rank 0: ERROR: host: not every rank reached collective #71 within 10s";
        for text in [english, "check 5 passed"] {
            assert_eq!(
                said(0, text, &BTreeSet::new(), &BTreeSet::new()),
                Said::Other
            );
        }
        let line = format!("[1,0]<stderr>:{}", Witness::default().line());
        assert!(matches!(
            said(0, &line, &BTreeSet::new(), &BTreeSet::new()),
            Said::Witness(_)
        ));
    }
}

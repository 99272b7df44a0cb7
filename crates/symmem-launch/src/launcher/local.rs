//! One run: spawn the ranks, stream their output, watch them, stop them all,
//! verify nothing is left.

use std::ffi::OsString;
use std::net::{Ipv4Addr, TcpListener};
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use symmem::settings;
use symmem_process::{Pace, SignalGuard};

use crate::culprit::blame;
use crate::error::LaunchError;
use crate::group::{
    adopted, command_name, escaped, exiting, gone, join_group, live_members, pipe_id, signal_group,
};
use crate::output::spawn_reader;
use crate::report::{Ended, Escaped, Outcome, OutputLine, RankStatus, RunReport, Stream};
use crate::spec::LaunchSpec;
use crate::watchdog::{Watchdog, new_run_id};

/// How often children are polled (and the longest a line waits in the channel).
const POLL: Duration = Duration::from_millis(10);

/// After the first failure, how long the other ranks get to end on their own
/// before the group gets `SIGTERM` (at most the grace period): the peers of a
/// failed rank usually fail within milliseconds, and how they end tells who
/// the culprit is.
const SETTLE: Duration = Duration::from_millis(200);

/// Output lines buffered between the reader threads and the sink; when the
/// sink is slower than the ranks, the readers (and then the ranks) wait.
const CHANNEL_LINES: usize = 4096;

/// After `SIGKILL`, how long processes get to disappear before they are
/// reported as leftovers. Only processes stuck in the kernel take this long.
const KILL_SETTLE: Duration = Duration::from_secs(2);

/// After the group is empty, how long to wait for the last output. Pipes stay
/// open only if a process escaped the group (setsid) still holds them; do not
/// hang on it.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// What [`launch_with`] reports once every rank has been spawned, before any
/// output is delivered.
#[derive(Debug, Clone, Copy)]
pub struct Started<'a> {
    /// Process ids, in rank order.
    pub pids: &'a [u32],
    /// The ranks' process group (rank 0's pid).
    pub pgid: i32,
    /// Time to spawn all ranks.
    pub spawn_time: Duration,
    /// The `MASTER_PORT` every rank got.
    pub master_port: u16,
    /// The `SYMMEM_RENDEZVOUS` directory every rank got.
    pub rendezvous: &'a Path,
}

/// Runs `spec` to the end and reports how it went; `sink` gets every output
/// line of every rank, in arrival order, on the calling thread.
///
/// Every rank runs `spec.program` with `spec.args` in one new process group,
/// with stdin on `/dev/null` and this environment (then `spec.env`, then
/// `spec.rank_env[rank]`):
///
/// | variable | value |
/// |---|---|
/// | `RANK`, `LOCAL_RANK`, `ROLE_RANK` | the rank, `0..ranks` |
/// | `WORLD_SIZE`, `LOCAL_WORLD_SIZE`, `ROLE_WORLD_SIZE` | `ranks` |
/// | `GROUP_RANK` / `GROUP_WORLD_SIZE` | `0` / `1` (one host) |
/// | `ROLE_NAME` | `default` |
/// | `TORCHELASTIC_RESTART_COUNT`, `TORCHELASTIC_MAX_RESTARTS` | `0` |
/// | `MASTER_ADDR` | `127.0.0.1` |
/// | `MASTER_PORT` | a TCP port free when the run started |
/// | `SYMMEM_RENDEZVOUS` | a fresh private (0700) directory, removed after the run; unless `spec.env` sets it |
/// | `SYMMEM_RUN_ID` | a random id of this run: what carries it belongs to the run |
///
/// The run ends when every rank exited 0 ([`Outcome::Success`]), when a rank
/// exits non-zero or by a signal, when `spec.timeout` elapses
/// ([`Outcome::TimedOut`]), or when the launcher gets SIGINT, SIGTERM or
/// SIGHUP ([`Outcome::Interrupted`]). How the launcher then stops the ranks
/// and names the culprit ([`Outcome::RankFailed`] or [`Outcome::PeerLost`]) is
/// the failure policy in ARCHITECTURE.md ("Failure policy"). Every rank is
/// reaped and the group verified empty before this returns; processes that
/// left the group are named in [`RunReport::escaped`].
///
/// While this runs, SIGINT, SIGTERM and SIGHUP of the calling process only
/// stop the run; one received while the ranks are in their grace period (a
/// second Ctrl-C) sends them `SIGKILL` at once. Outside runs these signals
/// act as they did before the first run: if they had their default action
/// (terminate the process), it is emulated, since signal-hook's handler stays
/// installed; handlers of the application keep being called. A signal the
/// process ignored before its first run (SIGHUP under `nohup`, SIGINT in a
/// shell's background job) is left ignored, during runs too: it does not stop
/// a run, and the ranks, like any process started later, inherit the ignore.
pub fn launch(
    spec: &LaunchSpec,
    sink: &mut dyn FnMut(&OutputLine),
) -> Result<RunReport, LaunchError> {
    launch_with(spec, sink, &mut |_| {})
}

/// [`launch`], calling `on_started` once all ranks are spawned (e.g. to print
/// their pids).
pub fn launch_with(
    spec: &LaunchSpec,
    sink: &mut dyn FnMut(&OutputLine),
    on_started: &mut dyn FnMut(&Started<'_>),
) -> Result<RunReport, LaunchError> {
    let program = spec.validate()?;
    // Before spawning: a Ctrl-C while ranks start must still stop them.
    let signals = SignalGuard::install()?;
    let master_port = free_port()?;
    let run_id = new_run_id()?;
    // The watchdog owns the directory we make: it removes it when this
    // function returns, however it returns (including unwinding out of
    // `sink`), after the run (declared before it) is cleaned up; and if this
    // process is killed, it removes it itself.
    let (rendezvous, owned_dir) = rendezvous(spec)?;
    let mut watchdog = Watchdog::start(&run_id, owned_dir)?;

    let (tx, rx) = mpsc::sync_channel(CHANNEL_LINES);
    let mut run = Run {
        ranks: Vec::with_capacity(spec.ranks),
        polls: 0,
        pgid: 0,
        run_id: run_id.clone(),
        pipes: Vec::with_capacity(2 * spec.ranks),
        escaped: Vec::new(),
        output_wait: Duration::ZERO,
        watchdog: Some(watchdog.pid()),
        readers: Vec::with_capacity(2 * spec.ranks),
        tx: Some(tx),
        rx,
        sink,
    };
    let start = Instant::now();
    for rank in 0..spec.ranks {
        let mut cmd = command(spec, &program, rank, master_port, &rendezvous);
        cmd.env(settings::RUN_ID.name, &run_id);
        let spawned = run.spawn(rank, &mut cmd);
        if rank == 0 && run.pgid > 0 {
            watchdog.guard_group(run.pgid);
        }
        if let Err(cause) = spawned {
            // Stop whatever already started; a leftover is the worse news.
            let stopped = run.stop(Duration::ZERO, &signals);
            run.drain_rest();
            stopped?;
            return Err(LaunchError::Spawn {
                rank,
                program,
                cause,
            });
        }
    }
    let spawn_time = start.elapsed();
    let pids: Vec<u32> = run.ranks.iter().map(|r| r.pid).collect();
    on_started(&Started {
        pids: &pids,
        pgid: run.pgid,
        spawn_time,
        master_port,
        rendezvous: &rendezvous,
    });

    let watched = run.watch(spec.timeout, spec.grace, &signals, start);
    let stopped = run.stop(spec.grace, &signals);
    run.drain_rest();
    let watchdog_lost = watchdog.lost().map(ended);
    stopped?;
    let outcome = watched?;
    let elapsed = start.elapsed();
    Ok(RunReport {
        outcome,
        ranks: run
            .ranks
            .iter()
            .map(|r| RankStatus {
                rank: r.rank,
                pid: r.pid,
                ended: r.ended,
                elapsed: r.elapsed.unwrap_or_else(|| r.started.elapsed()),
                stopped: r.stopped,
            })
            .collect(),
        elapsed,
        spawn_time,
        pgid: run.pgid,
        timeout: spec.timeout,
        escaped: std::mem::take(&mut run.escaped),
        output_wait: run.output_wait,
        watchdog_lost,
        world: spec.ranks,
        culprit_node: None,
        left_behind: Vec::new(),
        launcher_lines: Vec::new(),
        reported: Vec::new(),
        abort_hung: false,
    })
}

/// Finds a TCP port that is free now; the ranks bind it later (the small race
/// is the same one torchrun has).
fn free_port() -> Result<u16, LaunchError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(LaunchError::Port)?;
    let port = listener.local_addr().map_err(LaunchError::Port)?.port();
    Ok(port)
}

/// The rendezvous directory, and the guard that removes it if we created it.
fn rendezvous(
    spec: &LaunchSpec,
) -> Result<(PathBuf, Option<symmem_process::TempDir>), LaunchError> {
    if let Some(dir) = spec.caller_rendezvous() {
        return Ok((PathBuf::from(dir), None));
    }
    // Private: other users must not plant files where ranks meet.
    let dir = symmem_process::private_dir("symmem-rdzv-").map_err(|e| LaunchError::Rendezvous {
        dir: e.parent,
        cause: e.cause,
    })?;
    // Its path may be of any length: the ranks bind and connect through a descriptor of it
    // (`/proc/self/fd/N/rank0.sock`), never through the path itself.
    Ok((dir.path().to_path_buf(), Some(dir)))
}

fn command(
    spec: &LaunchSpec,
    program: &Path,
    rank: usize,
    master_port: u16,
    rendezvous: &Path,
) -> Command {
    let mut cmd = Command::new(program);
    let ranks = spec.ranks.to_string();
    let rank_s = rank.to_string();
    cmd.args(&spec.args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("RANK", &rank_s)
        .env("LOCAL_RANK", &rank_s)
        .env("ROLE_RANK", &rank_s)
        .env("WORLD_SIZE", &ranks)
        .env("LOCAL_WORLD_SIZE", &ranks)
        .env("ROLE_WORLD_SIZE", &ranks)
        .env("GROUP_RANK", "0")
        .env("GROUP_WORLD_SIZE", "1")
        .env("ROLE_NAME", "default")
        .env("TORCHELASTIC_RESTART_COUNT", "0")
        .env("TORCHELASTIC_MAX_RESTARTS", "0")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", master_port.to_string())
        .env(settings::RENDEZVOUS.name, rendezvous);
    let extra: &[(OsString, OsString)] = spec.rank_env.get(rank).map_or(&[], Vec::as_slice);
    cmd.envs(spec.env.iter().chain(extra).map(|(k, v)| (k, v)));
    cmd
}

struct Rank {
    rank: usize,
    pid: u32,
    child: Child,
    started: Instant,
    ended: Option<Ended>,
    elapsed: Option<Duration>,
    /// The number of the poll ([`Run::reap`] call) that saw it end.
    seen: Option<u64>,
    stopped: bool,
}

struct Run<'s> {
    ranks: Vec<Rank>,
    /// Calls of [`Run::reap`] so far: orders the ends of the ranks.
    polls: u64,
    /// 0 until rank 0 is spawned. Never signal pgid 0: that is our own group.
    pgid: i32,
    /// The run's `SYMMEM_RUN_ID`.
    run_id: String,
    /// The ranks' output pipes as `/proc/*/fd` names them (`pipe:[inode]`).
    pipes: Vec<String>,
    /// Processes of the run found outside the group, and ended.
    escaped: Vec<Escaped>,
    /// How long the final drain waited for pipes held by processes we cannot see.
    output_wait: Duration,
    /// The watchdog's pid: a child of ours that is not one of the run's orphans.
    watchdog: Option<i32>,
    readers: Vec<JoinHandle<()>>,
    /// Kept until the final drain so that `recv_timeout` waits instead of
    /// reporting a disconnect while readers come and go.
    tx: Option<SyncSender<OutputLine>>,
    rx: Receiver<OutputLine>,
    sink: &'s mut dyn FnMut(&OutputLine),
}

impl Run<'_> {
    fn spawn(&mut self, rank: usize, cmd: &mut Command) -> std::io::Result<()> {
        join_group(cmd, self.pgid);
        let mut child = cmd.spawn()?;
        let pid = child.id();
        if self.pgid == 0 {
            self.pgid = i32::try_from(pid).map_err(std::io::Error::other)?;
        }
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        self.pipes.extend(
            [
                stdout.as_ref().map(AsRawFd::as_raw_fd),
                stderr.as_ref().map(AsRawFd::as_raw_fd),
            ]
            .into_iter()
            .flatten()
            .filter_map(pipe_id),
        );
        // Registered before anything else can fail, so that `stop` sees it.
        self.ranks.push(Rank {
            rank,
            pid,
            child,
            started: Instant::now(),
            ended: None,
            elapsed: None,
            seen: None,
            stopped: false,
        });
        let tx = self
            .tx
            .clone()
            .ok_or_else(|| std::io::Error::other("run already drained"))?;
        if let Some(pipe) = stdout {
            let reader = spawn_reader(rank, Stream::Stdout, pipe, tx.clone())?;
            self.readers.push(reader);
        }
        if let Some(pipe) = stderr {
            let reader = spawn_reader(rank, Stream::Stderr, pipe, tx)?;
            self.readers.push(reader);
        }
        Ok(())
    }

    /// Delivers output for `period`, then returns.
    fn pump(&mut self, period: Duration) {
        let until = Instant::now() + period;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            match self.rx.recv_timeout(left) {
                Ok(line) => (self.sink)(&line),
                Err(RecvTimeoutError::Timeout) => return,
                Err(RecvTimeoutError::Disconnected) => {
                    thread::sleep(left);
                    return;
                }
            }
        }
    }

    /// Reaps the ranks that ended, noting in which poll they were seen.
    fn reap(&mut self) -> Result<(), LaunchError> {
        self.polls += 1;
        let poll = self.polls;
        for r in self.ranks.iter_mut().filter(|r| r.ended.is_none()) {
            match r.child.try_wait() {
                Ok(Some(status)) => {
                    r.ended = Some(ended(status));
                    r.elapsed = Some(r.started.elapsed());
                    r.seen = Some(poll);
                }
                Ok(None) => {}
                Err(cause) => {
                    return Err(LaunchError::Wait {
                        rank: r.rank,
                        cause,
                    });
                }
            }
        }
        Ok(())
    }

    fn any_failed(&self) -> bool {
        self.ranks
            .iter()
            .any(|r| r.ended.is_some_and(|how| !how.success()))
    }

    fn all_ended(&self) -> bool {
        self.ranks.iter().all(|r| r.ended.is_some())
    }

    /// Streams output and polls until the run must end, and says why.
    fn watch(
        &mut self,
        timeout: Duration,
        grace: Duration,
        signals: &SignalGuard,
        start: Instant,
    ) -> Result<Outcome, LaunchError> {
        let deadline = start.checked_add(timeout);
        loop {
            self.pump(POLL);
            self.reap()?;
            // A failure is the most useful news, so it is checked first.
            if self.any_failed() {
                self.settle(SETTLE.min(grace), grace, signals)?;
                let ends: Vec<_> = self.ranks.iter().map(|r| r.ended.zip(r.seen)).collect();
                if let Some(outcome) = blame(&ends) {
                    return Ok(outcome);
                }
            }
            if self.all_ended() {
                return Ok(Outcome::Success);
            }
            if let Some(signal) = signals.caught() {
                return Ok(Outcome::Interrupted { signal });
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                let still_running = self
                    .ranks
                    .iter()
                    .filter(|r| r.ended.is_none())
                    .map(|r| r.rank)
                    .collect();
                return Ok(Outcome::TimedOut { still_running });
            }
        }
    }

    /// After a failure: keeps delivering output and reaping for `window`, so
    /// that the ranks that fail because of it end on their own, in an order
    /// that tells who failed first. Cut short when every rank has ended or
    /// the launcher gets a signal. A rank that is in the middle of its exit
    /// when the window closes is waited for, up to `limit` in all: its peers
    /// may have reported it gone before the kernel shows it ended, and it
    /// must not be taken for a rank still running.
    fn settle(
        &mut self,
        window: Duration,
        limit: Duration,
        signals: &SignalGuard,
    ) -> Result<(), LaunchError> {
        let start = Instant::now();
        loop {
            if self.all_ended() || signals.caught().is_some() {
                return Ok(());
            }
            let elapsed = start.elapsed();
            if elapsed >= window && (elapsed >= limit || !self.any_exiting()) {
                return Ok(());
            }
            let left = window.saturating_sub(elapsed);
            self.pump(if left.is_zero() { POLL } else { left.min(POLL) });
            self.reap()?;
        }
    }

    /// Whether a rank not yet reaped has begun to exit.
    fn any_exiting(&self) -> bool {
        self.ranks
            .iter()
            .any(|r| r.ended.is_none() && exiting(r.pid))
    }

    /// Everything reaped and nothing alive left in the group.
    fn all_gone(&mut self) -> bool {
        // Wait errors are reported by `watch`; here a rank that cannot be
        // reaped simply stays "not gone".
        let _ = self.reap();
        self.ranks.iter().all(|r| r.ended.is_some()) && live_members(self.pgid).is_empty()
    }

    /// Stops the group, then what escaped it. In both, a signal to the
    /// launcher during the grace period (a second Ctrl-C) cuts it short.
    fn stop(&mut self, grace: Duration, signals: &SignalGuard) -> Result<(), LaunchError> {
        let group = self.stop_group(grace, signals);
        // Also after a leftover in the group: what escaped it must not outlive the run either.
        let escaped = self.end_escaped(grace, signals);
        group.and(escaped)
    }

    /// Ends the processes of the run that left its group (see [`escaped`]): `SIGTERM`,
    /// `grace`, `SIGKILL`, as for the group, and records them for the report. Found before
    /// the final drain, so that the drain does not wait on the pipes they hold.
    fn end_escaped(&mut self, grace: Duration, signals: &SignalGuard) -> Result<(), LaunchError> {
        if self.pgid <= 0 {
            return Ok(());
        }
        let mut found = self.outside_the_group();
        if found.is_empty() {
            return Ok(());
        }
        self.escaped.extend(found.iter().map(|&pid| Escaped {
            pid,
            command: command_name(pid),
        }));
        let signal = |pids: &[i32], sig: Signal| {
            for &pid in pids {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
            }
        };
        signal(&found, Signal::SIGTERM);
        let signals_before = signals.count();
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && signals.count() == signals_before {
            if found.iter().all(|&pid| gone(pid)) {
                break;
            }
            self.pump(POLL);
        }
        let deadline = Instant::now() + KILL_SETTLE;
        loop {
            found.retain(|&pid| !gone(pid));
            // What they started while being stopped carries the run's id too (or was adopted).
            for pid in self.outside_the_group() {
                if !found.contains(&pid) {
                    self.escaped.push(Escaped {
                        pid,
                        command: command_name(pid),
                    });
                    found.push(pid);
                }
            }
            if found.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(LaunchError::Leftover {
                    pgid: self.pgid,
                    pids: found,
                });
            }
            signal(&found, Signal::SIGKILL);
            self.pump(POLL);
        }
    }

    /// The run's processes outside the ranks' group: found by the run id or the pipes
    /// ([`escaped`]), or adopted as orphans ([`adopted`]).
    fn outside_the_group(&self) -> Vec<i32> {
        let mut own: Vec<i32> = self.ranks.iter().map(|r| r.pid as i32).collect();
        own.extend(self.watchdog);
        let mut found = escaped(&self.run_id, &self.pipes, self.pgid);
        for pid in adopted(&own) {
            if !found.contains(&pid) {
                found.push(pid);
            }
        }
        found
    }

    /// SIGTERM, `grace`, SIGKILL to the ranks' group, reap, verify it is empty. Also when all
    /// ranks are done: background processes they left in the group are part of the run and
    /// must not outlive it.
    fn stop_group(&mut self, grace: Duration, signals: &SignalGuard) -> Result<(), LaunchError> {
        let pgid = self.pgid;
        let mut stop = Stop {
            run: self,
            signals,
            signals_before: 0,
        };
        let stopped = symmem_process::stop_group(pgid, grace, KILL_SETTLE, &mut stop);
        stopped.map_err(|lingering| {
            let mut pids = lingering.pids;
            pids.extend(
                self.ranks
                    .iter()
                    .filter(|r| r.ended.is_none())
                    .filter_map(|r| i32::try_from(r.pid).ok()),
            );
            pids.sort_unstable();
            pids.dedup();
            LaunchError::Leftover { pgid, pids }
        })
    }

    /// Delivers the remaining output and joins the reader threads, within
    /// [`DRAIN_LIMIT`].
    fn drain_rest(&mut self) {
        drop(self.tx.take());
        let start = Instant::now();
        let deadline = start + DRAIN_LIMIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(line) => (self.sink)(&line),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {
                    // Said in the report: the run took this much longer, and why.
                    self.output_wait = start.elapsed();
                    break;
                }
            }
        }
        for reader in self.readers.drain(..) {
            // A reader still blocked on a pipe held open by an escaped
            // process is detached; it ends when that pipe closes.
            if reader.is_finished() {
                let _ = reader.join();
            }
        }
    }
}

/// A run while its group is stopped ([`Run::stop_group`]): gone once every rank is reaped and
/// nothing is alive in the group; the output keeps flowing meanwhile.
struct Stop<'r, 's> {
    run: &'r mut Run<'s>,
    signals: &'r SignalGuard,
    /// Signals received before SIGTERM went out.
    signals_before: usize,
}

impl symmem_process::Stopping for Stop<'_, '_> {
    fn gone(&mut self, _pgid: i32) -> bool {
        self.run.all_gone()
    }

    fn terminating(&mut self) {
        // Reaped again right before SIGTERM (scanning /proc in `all_gone` takes a while):
        // these are the ranks alive as SIGTERM goes out.
        let _ = self.run.reap();
        for r in self.run.ranks.iter_mut().filter(|r| r.ended.is_none()) {
            r.stopped = true;
        }
        self.signals_before = self.signals.count();
    }

    fn pause(&mut self) -> Pace {
        self.run.pump(POLL);
        // A signal since SIGTERM, or a second one in all: the user does not want to wait.
        let count = self.signals.count();
        if count > self.signals_before || count >= 2 {
            Pace::Hurry
        } else {
            Pace::Wait
        }
    }
}

impl Drop for Run<'_> {
    /// Last line of defence (e.g. `sink` panicked): kill and reap, bounded.
    fn drop(&mut self) {
        if self.pgid <= 0 || self.ranks.iter().all(|r| r.ended.is_some()) {
            return;
        }
        signal_group(self.pgid, Signal::SIGKILL);
        let deadline = Instant::now() + KILL_SETTLE;
        while Instant::now() < deadline {
            let _ = self.reap();
            if self.ranks.iter().all(|r| r.ended.is_some()) {
                return;
            }
            thread::sleep(POLL);
        }
    }
}

fn ended(status: ExitStatus) -> Ended {
    match (status.code(), status.signal()) {
        (Some(code), _) => Ended::Exited(code),
        (None, Some(signal)) => Ended::Signaled(signal),
        // try_wait reports only terminations; keep the raw status otherwise.
        (None, None) => Ended::Exited(status.into_raw()),
    }
}

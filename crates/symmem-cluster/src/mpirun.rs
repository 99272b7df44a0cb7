//! Jobs across the nodes with Open MPI's `mpirun`.

use crate::procs::{self, Process};
use crate::{Cluster, ClusterError};
use std::collections::BTreeMap;
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// One program on every node, `ranks_per_node` ranks each (ranks 0 .. K-1 on the first node,
/// K .. 2K-1 on the second, ...).
#[derive(Clone, Debug)]
pub struct Job {
    program: PathBuf,
    args: Vec<String>,
    ranks_per_node: usize,
    env: Vec<(String, String)>,
    timeout: Duration,
    grace: Duration,
}

impl Job {
    pub fn new(program: impl Into<PathBuf>, ranks_per_node: usize) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
            ranks_per_node,
            env: Vec::new(),
            timeout: Duration::from_secs(120),
            grace: Duration::from_secs(5),
        }
    }
    pub fn args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, args: I) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }
    /// An environment variable for every rank (exported with `mpirun -x`).
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }
    /// After this long `mpirun` gets SIGTERM (default 120 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
    /// How long after SIGTERM, or after `mpirun` ended, a process may still run on a node
    /// before it gets SIGKILL and counts as left behind (default 5 s).
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// A line of the job's output: a rank's (`mpirun --tag-output`), or `mpirun`'s own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobLine {
    pub rank: Option<usize>,
    pub stream: Stream,
    pub text: String,
}

/// A tag of `mpirun --tag-output` at the start of `text`: `[1,3]<stdout>:` gives rank 3,
/// its stream and the tag's length.
fn tag_at(text: &str) -> Option<(usize, Stream, usize)> {
    let rest = text.strip_prefix('[')?;
    let (ids, rest) = rest.split_once(']')?;
    let (job, rank) = ids.split_once(',')?;
    if job.is_empty() || !job.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let rank = rank.parse().ok()?;
    let (stream, name) = if rest.starts_with("<stdout>:") {
        (Stream::Stdout, "<stdout>:")
    } else if rest.starts_with("<stderr>:") {
        (Stream::Stderr, "<stderr>:")
    } else {
        return None;
    };
    Some((rank, stream, 1 + ids.len() + 1 + name.len()))
}

/// Puts ranks' lines back together. `mpirun --tag-output` tags each piece a rank wrote, and
/// a line written in several pieces (Rust's unbuffered stderr) reaches mpirun's output as
/// tagged fragments, possibly amid another rank's: `[1,0]<stderr>:a: [1,1]<stderr>:b\n`
/// is rank 1's line `b` and the start of rank 0's next line. A raw line is split at its tags;
/// its end ends the line of its last fragment's rank.
#[derive(Default)]
struct Demux {
    partial: BTreeMap<(usize, Stream), String>,
}

impl Demux {
    /// The lines that `raw` (one line of mpirun's output on `pipe`) completes.
    fn feed(&mut self, raw: &str, pipe: Stream) -> Vec<JobLine> {
        let mut starts: Vec<(usize, usize, Stream, usize)> = Vec::new();
        for (at, _) in raw.match_indices('[') {
            if let Some((rank, stream, len)) = tag_at(&raw[at..]) {
                starts.push((at, rank, stream, len));
            }
        }
        let mut lines = Vec::new();
        let own_end = starts.first().map_or(raw.len(), |s| s.0);
        if starts.is_empty() || own_end > 0 {
            lines.push(JobLine {
                rank: None,
                stream: pipe,
                text: raw[..own_end].to_string(),
            });
        }
        for (i, &(at, rank, stream, len)) in starts.iter().enumerate() {
            let end = starts.get(i + 1).map_or(raw.len(), |next| next.0);
            let buffer = self.partial.entry((rank, stream)).or_default();
            buffer.push_str(&raw[at + len..end]);
            if i + 1 == starts.len() {
                let text = std::mem::take(buffer);
                self.partial.remove(&(rank, stream));
                lines.push(JobLine {
                    rank: Some(rank),
                    stream,
                    text,
                });
            }
        }
        lines
    }

    /// What ranks wrote without ending the line, once the output has ended.
    fn finish(self) -> Vec<JobLine> {
        self.partial
            .into_iter()
            .map(|((rank, stream), text)| JobLine {
                rank: Some(rank),
                stream,
                text,
            })
            .collect()
    }
}

impl fmt::Display for JobLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.rank {
            Some(rank) => write!(f, "[rank {rank}] {}", self.text),
            None => write!(f, "[mpirun] {}", self.text),
        }
    }
}

/// The rank that ended the job, as `mpirun` reported it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Culprit {
    pub rank: usize,
    pub node: Option<String>,
    /// "exited on signal 9 (Killed)", "exit code 2".
    pub how: String,
}

impl fmt::Display for Culprit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rank {}", self.rank)?;
        if let Some(node) = &self.node {
            write!(f, " on {node}")?;
        }
        write!(f, ": {}", self.how)
    }
}

impl Culprit {
    /// Open MPI 4's reports: `mpirun noticed that process rank 3 with PID 0 on node node-b
    /// exited on signal 9 (Killed).`, or `Process name: [[J,1],2]` then `Exit code: 2`.
    pub fn from_mpirun(lines: &[&str]) -> Option<Self> {
        for (i, line) in lines.iter().enumerate() {
            if let Some(rest) = line.split("noticed that process rank ").nth(1) {
                let rank = rest.split_whitespace().next()?.parse().ok()?;
                let node = rest
                    .split(" on node ")
                    .nth(1)
                    .and_then(|r| r.split_whitespace().next())
                    .map(str::to_string);
                let how = rest
                    .split_once(" exited ")
                    .map(|(_, how)| format!("exited {}", how.trim_end_matches('.')))
                    .unwrap_or_else(|| rest.trim().to_string());
                return Some(Self { rank, node, how });
            }
            if let Some(name) = line.trim().strip_prefix("Process name:") {
                let rank = name
                    .trim()
                    .trim_end_matches(']')
                    .rsplit(',')
                    .next()?
                    .parse()
                    .ok()?;
                let code = lines[i + 1..]
                    .iter()
                    .take(3)
                    .find_map(|l| l.trim().strip_prefix("Exit code:"))
                    .map(|c| format!("exit code {}", c.trim()));
                return Some(Self {
                    rank,
                    node: None,
                    how: code.unwrap_or_else(|| "failed".into()),
                });
            }
        }
        None
    }
}

/// How a job ended.
#[derive(Debug)]
pub struct JobOutcome {
    /// `mpirun`'s exit status.
    pub status: ExitStatus,
    pub lines: Vec<JobLine>,
    /// The rank `mpirun` named for ending the job, if one did.
    pub culprit: Option<Culprit>,
    /// Whether the job ran past its timeout and was stopped.
    pub timed_out: bool,
    /// From start to `mpirun`'s exit.
    pub elapsed: Duration,
    /// When `mpirun` was seen to exit.
    pub ended: Instant,
    /// Processes still on a node a grace period after `mpirun` ended: killed, and a failure.
    pub left_behind: Vec<(String, Process)>,
    /// The command line that ran, for reports.
    pub command: String,
}

impl JobOutcome {
    /// Exit 0, in time, nothing left behind.
    pub fn success(&self) -> bool {
        self.status.success() && !self.timed_out && self.left_behind.is_empty()
    }
    /// Rank `rank`'s lines on `stream`.
    pub fn rank_lines(&self, rank: usize, stream: Stream) -> Vec<&str> {
        self.lines
            .iter()
            .filter(|l| l.rank == Some(rank) && l.stream == stream)
            .map(|l| l.text.as_str())
            .collect()
    }
}

impl fmt::Display for JobOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.timed_out {
            write!(f, "timed out and stopped")?;
        } else {
            write!(f, "mpirun {}", self.status)?;
        }
        if let Some(culprit) = &self.culprit {
            write!(f, "; culprit: {culprit}")?;
        }
        if !self.left_behind.is_empty() {
            let left: Vec<String> = self
                .left_behind
                .iter()
                .map(|(node, p)| format!("{p} on {node}"))
                .collect();
            write!(f, "; left behind (killed): {}", left.join(", "))?;
        }
        Ok(())
    }
}

/// The environment variable that holds a rank's number under Open MPI.
const RANK_VARIABLE: &str = "OMPI_COMM_WORLD_RANK";

impl Cluster {
    /// Runs `job` with `mpirun` across every node; `on_line` sees each line as it comes.
    /// Returns once `mpirun` has exited and the nodes are clear (what was not is killed and
    /// listed in [`JobOutcome::left_behind`]).
    pub fn mpirun(
        &self,
        job: &Job,
        on_line: &mut dyn FnMut(&JobLine),
    ) -> Result<JobOutcome, ClusterError> {
        if job.ranks_per_node == 0 {
            return Err(ClusterError::NoRanks);
        }
        let program = self.on_nodes(&job.program)?;
        let words = self.mpirun_words(job, &program);
        let shown = words.join(" ");
        let mut command = self.mpirun_command(job, &words);
        let started = Instant::now();
        let mut child = command
            .spawn()
            .map_err(ClusterError::io(format!("starting {shown}")))?;
        let (rx, readers) = spawn_readers(&mut child);

        let mut lines = Vec::new();
        let deadline = started + job.timeout;
        let (status, timed_out) =
            wait_for_exit(&mut child, &rx, deadline, job.grace, on_line, &mut lines)?;
        let ended = Instant::now();
        let elapsed = ended - started;
        let left_behind = self.settle_and_sweep(job.grace);
        drain_lines(&rx, on_line, &mut lines);
        for reader in readers {
            if reader.is_finished() {
                let _ = reader.join();
            }
        }
        let own: Vec<&str> = lines
            .iter()
            .filter(|l| l.rank.is_none())
            .map(|l| l.text.as_str())
            .collect();
        let culprit = Culprit::from_mpirun(&own);
        Ok(JobOutcome {
            status,
            lines,
            culprit,
            timed_out,
            elapsed,
            ended,
            left_behind,
            command: shown,
        })
    }

    /// The command line of `mpirun` for `job`, whose program is at `program` on the nodes.
    fn mpirun_words(&self, job: &Job, program: &std::path::Path) -> Vec<String> {
        let hosts: Vec<String> = self
            .nodes()
            .iter()
            .map(|n| format!("{}:{}", n.name(), job.ranks_per_node))
            .collect();
        let mut words: Vec<String> = vec![
            self.mpirun_path().to_string_lossy().into_owned(),
            "--mca".into(),
            "plm_rsh_agent".into(),
            self.agent_on_nodes(),
            "--mca".into(),
            "oob_tcp_if_include".into(),
            self.network().mpi_interfaces().into(),
            "--bind-to".into(),
            "none".into(),
            "--tag-output".into(),
            "--host".into(),
            hosts.join(","),
            "-np".into(),
            (job.ranks_per_node * self.nodes().len()).to_string(),
        ];
        for (name, _) in &job.env {
            words.push("-x".into());
            words.push(name.clone());
        }
        words.push(program.to_string_lossy().into_owned());
        words.extend(job.args.iter().cloned());
        words
    }

    /// `words` run inside the first node's namespaces, with the job's environment.
    fn mpirun_command(&self, job: &Job, words: &[String]) -> Command {
        let enter = self.enter_words(self.first_node());
        let mut command = Command::new(&enter[0]);
        command
            .args(&enter[1..])
            .args(words)
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // The nodes have their own /run and /tmp: folders named for the machine's are not
            // there.
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("TMPDIR")
            .envs(job.env.iter().map(|(k, v)| (k, v)));
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            command
                .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
        }
        command
    }

    /// Gives what the ranks and daemons still run the grace period to end by itself, then
    /// kills and returns what is left.
    fn settle_and_sweep(&self, grace: Duration) -> Vec<(String, Process)> {
        let settle = Instant::now() + grace;
        while self.nodes().iter().any(|n| !self.processes(n).is_empty()) && Instant::now() < settle
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.sweep(Duration::from_secs(5))
    }

    /// The process of rank `rank` of the running job and its node: the outermost process on
    /// a node whose environment names that rank.
    pub fn rank_process(&self, rank: usize) -> Option<(String, Process)> {
        let wanted = rank.to_string();
        for node in self.nodes() {
            let procs = self.processes(node);
            let mine: Vec<&Process> = procs
                .iter()
                .filter(|p| procs::env_of(p.pid, RANK_VARIABLE).as_deref() == Some(&wanted))
                .collect();
            if let Some(top) = mine
                .iter()
                .find(|p| !mine.iter().any(|q| q.pid == p.parent))
            {
                return Some((node.name().to_string(), (*top).clone()));
            }
        }
        None
    }

    /// Sends `signal` to rank `rank` of the running job; returns its node and process.
    pub fn signal_rank(
        &self,
        rank: usize,
        signal: libc::c_int,
    ) -> Result<(String, Process), ClusterError> {
        let (node, process) = self.rank_process(rank).ok_or_else(|| {
            ClusterError::io(format!("finding rank {rank}"))(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no process on any node has it (not started yet, or already ended)",
            ))
        })?;
        // SAFETY: kill has no memory preconditions.
        if unsafe { libc::kill(process.pid as libc::pid_t, signal) } != 0 {
            return Err(ClusterError::io(format!("signalling rank {rank}"))(
                std::io::Error::last_os_error(),
            ));
        }
        Ok((node, process))
    }

    /// The temp folder of the cluster (for reports).
    pub fn folder(&self) -> &std::path::Path {
        self.root()
    }
}

/// Hands `line` to `on_line` and keeps it.
fn take_line(line: JobLine, on_line: &mut dyn FnMut(&JobLine), lines: &mut Vec<JobLine>) {
    on_line(&line);
    lines.push(line);
}

/// Threads that read the child's stdout and stderr, put their lines back together and send
/// them on the returned channel.
fn spawn_readers(
    child: &mut std::process::Child,
) -> (mpsc::Receiver<JobLine>, Vec<std::thread::JoinHandle<()>>) {
    let (tx, rx) = mpsc::channel::<JobLine>();
    let readers: Vec<_> = [
        child
            .stdout
            .take()
            .map(|p| (Box::new(p) as Box<dyn Read + Send>, Stream::Stdout)),
        child
            .stderr
            .take()
            .map(|p| (Box::new(p) as Box<dyn Read + Send>, Stream::Stderr)),
    ]
    .into_iter()
    .flatten()
    .map(|(pipe, stream)| {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut demux = Demux::default();
            for raw in BufReader::new(pipe).lines().map_while(Result::ok) {
                for line in demux.feed(&raw, stream) {
                    if tx.send(line).is_err() {
                        return;
                    }
                }
            }
            for line in demux.finish() {
                let _ = tx.send(line);
            }
        })
    })
    .collect();
    drop(tx);
    (rx, readers)
}

/// Takes lines until `child` exits: SIGTERM at `deadline`, SIGKILL `grace` later. Returns its
/// status and whether it timed out.
fn wait_for_exit(
    child: &mut std::process::Child,
    rx: &mpsc::Receiver<JobLine>,
    deadline: Instant,
    grace: Duration,
    on_line: &mut dyn FnMut(&JobLine),
    lines: &mut Vec<JobLine>,
) -> Result<(ExitStatus, bool), ClusterError> {
    let mut timed_out = false;
    let mut term_sent: Option<Instant> = None;
    let status = loop {
        while let Ok(line) = rx.try_recv() {
            take_line(line, on_line, lines);
        }
        if let Some(status) = child
            .try_wait()
            .map_err(ClusterError::io("waiting for mpirun"))?
        {
            break status;
        }
        let now = Instant::now();
        match term_sent {
            None if now >= deadline => {
                timed_out = true;
                // SAFETY: kill has no memory preconditions; the child is not reaped yet.
                unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
                term_sent = Some(now);
            }
            Some(at) if now >= at + grace => {
                let _ = child.kill();
            }
            _ => {}
        }
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(10)) {
            take_line(line, on_line, lines);
        }
    };
    Ok((status, timed_out))
}

/// Takes the lines still coming, for up to 2 s: the pipes close once every process holding
/// them is gone.
fn drain_lines(
    rx: &mpsc::Receiver<JobLine>,
    on_line: &mut dyn FnMut(&JobLine),
    lines: &mut Vec<JobLine>,
) {
    let drain_until = Instant::now() + Duration::from_secs(2);
    while let Ok(line) = rx.recv_timeout(drain_until.saturating_duration_since(Instant::now())) {
        take_line(line, on_line, lines);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(demux: &mut Demux, raw: &str) -> Vec<(Option<usize>, Stream, String)> {
        demux
            .feed(raw, Stream::Stderr)
            .into_iter()
            .map(|l| (l.rank, l.stream, l.text))
            .collect()
    }

    #[test]
    fn tagged_lines() {
        let mut d = Demux::default();
        assert_eq!(
            feed(&mut d, "[1,3]<stdout>:hello [x] [2]<a>"),
            [(Some(3), Stream::Stdout, "hello [x] [2]<a>".into())]
        );
        assert_eq!(
            feed(&mut d, "[1,0]<stderr>:"),
            [(Some(0), Stream::Stderr, "".into())]
        );
        assert_eq!(
            feed(&mut d, "[node-a:123] mpirun said"),
            [(None, Stream::Stderr, "[node-a:123] mpirun said".into())]
        );
    }

    #[test]
    fn fragments_of_a_line_are_put_back_together() {
        let mut d = Demux::default();
        // Rank 0's line starts, rank 1's whole line follows on the same raw line.
        assert_eq!(
            feed(&mut d, "[1,0]<stderr>:prog: [1,1]<stderr>:prog: failed"),
            [(Some(1), Stream::Stderr, "prog: failed".into())]
        );
        // Rank 2's line in pieces, then rank 0's line ends.
        assert_eq!(
            feed(&mut d, "[1,2]<stderr>:a[1,2]<stderr>:: [1,2]<stderr>:b"),
            [(Some(2), Stream::Stderr, "a: b".into())]
        );
        assert_eq!(
            feed(&mut d, "[1,0]<stderr>:failed too"),
            [(Some(0), Stream::Stderr, "prog: failed too".into())]
        );
        // A piece never ended comes out at the end.
        assert!(feed(&mut d, "[1,1]<stdout>:x[1,2]<stderr>:y").len() == 1);
        let rest: Vec<_> = d.finish().into_iter().map(|l| (l.rank, l.text)).collect();
        assert_eq!(rest, [(Some(1), "x".into())]);
    }

    #[test]
    fn culprits_from_open_mpi_reports() {
        let signal = [
            "-----",
            "mpirun noticed that process rank 3 with PID 0 on node node-b exited on signal 9 (Killed).",
        ];
        assert_eq!(
            Culprit::from_mpirun(&signal),
            Some(Culprit {
                rank: 3,
                node: Some("node-b".into()),
                how: "exited on signal 9 (Killed)".into()
            })
        );
        let exit = [
            "mpirun detected that one or more processes exited with non-zero status, thus causing",
            "the job to be terminated. The first process to do so was:",
            "",
            "  Process name: [[21097,1],2]",
            "  Exit code:    2",
        ];
        let c = Culprit::from_mpirun(&exit).unwrap();
        assert_eq!((c.rank, c.how.as_str()), (2, "exit code 2"));
        assert_eq!(c.to_string(), "rank 2: exit code 2");
        assert_eq!(Culprit::from_mpirun(&["all fine"]), None);
    }
}

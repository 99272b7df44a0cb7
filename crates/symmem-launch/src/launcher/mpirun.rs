//! [`Launcher::Mpirun`](crate::Launcher::Mpirun): Open MPI's `mpirun` across hosts, its
//! `--tag-output` lines put back together, and its report of the rank that ended the job.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use super::Sweep;
use super::external::{self, Job, Stop, Tagger};
use crate::error::LaunchError;
use crate::layout::Layout;
use crate::report::{Ended, OutputLine, RankEnd, RunReport, Stream};
use crate::spec::LaunchSpec;

/// Where `mpirun` may put ranks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hosts {
    /// These hosts, in order.
    List(Vec<String>),
    /// The hosts of an Open MPI hostfile (`name [slots=N]` a line, `#` comments), in order.
    File(PathBuf),
}

/// How to run `mpirun`: on a real cluster, a hostfile and nothing else; the emulated cluster
/// adds its rsh agent, a wrapper that enters its first node, and a sweep of its nodes.
#[derive(Debug, Clone)]
pub struct Mpirun {
    /// The `mpirun` program (default: `mpirun` on PATH).
    pub program: PathBuf,
    /// The hosts; layouts take them in order.
    pub hosts: Hosts,
    /// Open MPI's `plm_rsh_agent` (default: its own, ssh).
    pub rsh_agent: Option<PathBuf>,
    /// A command prefix, e.g. `nsenter -t PID -u -m -i --` to run `mpirun` inside a node.
    pub wrapper: Vec<OsString>,
    /// More arguments of `mpirun`, before the program (`--mca btl tcp,self`, ...).
    pub args: Vec<OsString>,
    /// What the caller sweeps from the nodes after the job.
    pub sweep: Option<Sweep>,
}

impl Hosts {
    /// The host names, in order (a hostfile's read now).
    pub fn names(&self) -> Result<Vec<String>, LaunchError> {
        match self {
            Hosts::List(names) => Ok(names.clone()),
            Hosts::File(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    LaunchError::Layout(format!(
                        "cannot read the hostfile {}: {e}; give a readable Open MPI hostfile \
                         (one `name slots=N` a line)",
                        path.display()
                    ))
                })?;
                Ok(hostfile_names(&text))
            }
        }
    }
}

impl Mpirun {
    /// `mpirun` on PATH over `hosts`, without agent, wrapper, arguments or sweep.
    pub fn new(hosts: Hosts) -> Self {
        Self {
            program: PathBuf::from("mpirun"),
            hosts,
            rsh_agent: None,
            wrapper: Vec::new(),
            args: Vec::new(),
            sweep: None,
        }
    }

    pub(crate) fn launch(
        &self,
        spec: &LaunchSpec,
        sink: &mut dyn FnMut(&OutputLine),
    ) -> Result<RunReport, LaunchError> {
        let hosts = self.hosts.names()?;
        let words = self.words(spec, &spec.program, &hosts)?;
        // Open MPI refuses to run as root unless told twice.
        let env = if nix::unistd::geteuid().is_root() {
            ["OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"]
                .map(|name| (OsString::from(name), OsString::from("1")))
                .to_vec()
        } else {
            Vec::new()
        };
        let job = Job {
            name: "mpirun",
            words,
            env,
            tagger: || Box::new(Demux::default()),
            reports,
            // `--host a:N,b:M` and mpirun's default mapping by slot: in rank order.
            placed: spec.layout.counts(spec.ranks),
            nodes: hosts.clone(),
            quiet: state_log,
            stop: Stop::Terminate,
            aborting,
            sweep: self.sweep.as_ref(),
        };
        external::run(job, spec, sink)
    }

    /// The whole command line: wrapper, `mpirun` and its arguments, the program, its arguments.
    fn words(
        &self,
        spec: &LaunchSpec,
        program: &Path,
        hosts: &[String],
    ) -> Result<Vec<OsString>, LaunchError> {
        let counts = spec.layout.counts(spec.ranks);
        if counts.len() > hosts.len() {
            return Err(LaunchError::Layout(format!(
                "the layout {} needs {} hosts but mpirun was given {} ({}): add hosts, or ask \
                 for fewer nodes",
                layout_name(&spec.layout, spec.ranks),
                counts.len(),
                hosts.len(),
                hosts.join(", ")
            )));
        }
        let placed: Vec<String> = hosts
            .iter()
            .zip(&counts)
            .map(|(host, n)| format!("{host}:{n}"))
            .collect();
        let mut words: Vec<OsString> = self.wrapper.clone();
        words.push(self.program.clone().into());
        if let Some(agent) = &self.rsh_agent {
            words.extend(["--mca".into(), "plm_rsh_agent".into(), agent.into()]);
        }
        // The log of its processes' states: it names the rank that ended the job where
        // mpirun's own report leaves it out (a kill during start-up, M6). Kept from the sink.
        words.extend(["--mca".into(), "state_base_verbose".into(), "5".into()]);
        words.extend(keepalive_words(&self.args, |name| {
            std::env::var_os(name).is_some() || spec.env.iter().any(|(k, _)| k == name)
        }));
        words.extend(self.args.iter().cloned());
        words.extend([
            "--tag-output".into(),
            "--host".into(),
            placed.join(",").into(),
        ]);
        words.extend(["-np".into(), spec.ranks.to_string().into()]);
        for (name, _) in &spec.env {
            words.extend(["-x".into(), name.clone()]);
        }
        words.push(program.into());
        words.extend(spec.args.iter().cloned());
        Ok(words)
    }
}

/// Open MPI's keepalive on its out-of-band TCP links (mpirun to each node's `orted`), as
/// `(MCA parameter, value)`: a link idle for 5 s is probed every second, and 3 probes
/// unanswered end it, so that mpirun and every orted learn within about 8 s that a node is
/// gone for good (a lasting partition, a node that died), end their ranks and exit (M5).
/// Open MPI's own defaults (300 s, 20 s, 9 probes) take 8 minutes; until then an orted cut
/// off from mpirun lives on with nothing to tell it that its job is over. The links carry no
/// steady traffic once the ranks run, so a probe costs a few bytes per node every 5 s. A
/// value the user gave (`--mca NAME VALUE` in [`Mpirun::args`], or `OMPI_MCA_NAME` in this
/// process's environment or the spec's) is left as it is.
pub const OOB_KEEPALIVE: [(&str, &str); 3] = [
    ("oob_tcp_keepalive_time", "5"),
    ("oob_tcp_keepalive_intvl", "1"),
    ("oob_tcp_keepalive_probes", "3"),
];

/// `--mca NAME VALUE` for each of [`OOB_KEEPALIVE`] that the user did not set: not named in
/// `args`, and `OMPI_MCA_NAME` not set (`env_set`).
fn keepalive_words(args: &[OsString], env_set: impl Fn(&str) -> bool) -> Vec<OsString> {
    OOB_KEEPALIVE
        .iter()
        .filter(|(name, _)| !args.iter().any(|a| a == *name))
        .filter(|(name, _)| !env_set(&format!("OMPI_MCA_{name}")))
        .flat_map(|&(name, value)| ["--mca", name, value].map(OsString::from))
        .collect()
}

fn layout_name(layout: &Layout, ranks: usize) -> String {
    match layout {
        Layout::Spread { nodes } => format!("{ranks} ranks on {nodes} nodes"),
        other => other.to_string(),
    }
}

/// The host names of an Open MPI hostfile, in order.
fn hostfile_names(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or_default())
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
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

impl Tagger for Demux {
    fn feed(&mut self, raw: &str, pipe: Stream) -> Vec<OutputLine> {
        let mut starts: Vec<(usize, usize, Stream, usize)> = Vec::new();
        for (at, _) in raw.match_indices('[') {
            if let Some((rank, stream, len)) = tag_at(&raw[at..]) {
                starts.push((at, rank, stream, len));
            }
        }
        let mut lines = Vec::new();
        let own_end = starts.first().map_or(raw.len(), |s| s.0);
        if starts.is_empty() || own_end > 0 {
            lines.push(OutputLine {
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
                lines.push(OutputLine {
                    rank: Some(rank),
                    stream,
                    text,
                });
            }
        }
        lines
    }

    fn finish(&mut self) -> Vec<OutputLine> {
        std::mem::take(&mut self.partial)
            .into_iter()
            .map(|((rank, stream), text)| OutputLine {
                rank: Some(rank),
                stream,
                text,
            })
            .collect()
    }
}

/// Whether `line` is Open MPI 4's notice that it is ending the job because a rank failed:
/// `Primary job  terminated normally, but 1 process returned` (a rank's non-zero status or
/// signal), or its report of a rank that exited improperly.
fn aborting(line: &str) -> bool {
    line.contains("terminated normally, but") || line.contains("has exited due to process rank")
}

/// The rank `mpirun` reported ending the job (it names one); where its report names none,
/// the first rank its log of states says failed on a node. Its node from the log of states
/// where the report leaves it out (`Process name: [[J,1],3]` names none). Then every rank
/// that the log says ended normally before any rank failed (M1: it returned early, and the
/// others gave up on it), with status 0.
fn reports(lines: &[String], status: ExitStatus) -> Vec<RankEnd> {
    let mut ends: Vec<RankEnd> = first_report(lines)
        .or_else(|| improper_exit(lines))
        .or_else(|| state_report(lines, status))
        .into_iter()
        .collect();
    for end in &mut ends {
        if end.node.is_none() {
            end.node = node_in_log(lines, end.rank);
        }
    }
    for early in left_early(lines) {
        if !ends.iter().any(|e| e.rank == early.rank) {
            ends.push(early);
        }
    }
    ends
}

/// A line of the log of states about a rank (not a daemon): its node (of the daemon that
/// logged it), the rank, its state and where it was logged.
fn proc_state(line: &str) -> Option<(&str, usize, &str, &str)> {
    let (node, rest) = line.strip_prefix('[')?.split_once(':')?;
    let proc_ = rest.split(" ACTIVATE PROC [[").nth(1)?;
    let (name, rest) = proc_.split_once("] STATE ")?;
    let (job, rank) = name.split_once("],")?;
    if job.ends_with(",0") {
        return None; // a daemon (job family 0), not a rank
    }
    let (state, at) = rest.split_once(" AT ")?;
    Some((node, rank.parse().ok()?, state, at))
}

/// The node of `rank`: that of the daemon that saw its process end (`odls`, its waitpid).
fn node_in_log(lines: &[String], rank: usize) -> Option<String> {
    lines.iter().find_map(|line| {
        let (node, r, _, at) = proc_state(line)?;
        (r == rank && at.contains("/odls/")).then(|| node.to_string())
    })
}

/// The ranks that the log of states says ended normally (`NORMALLY TERMINATED`: status 0,
/// finalized) before it logged any rank failing or killed: they left while the others still
/// ran, as status 0 with the node of the daemon that logged it. After the first failure,
/// mpirun logs the ranks it killed as ended normally too.
fn left_early(lines: &[String]) -> Vec<RankEnd> {
    let mut early: Vec<RankEnd> = Vec::new();
    for (node, rank, state, _) in lines.iter().filter_map(|l| proc_state(l)) {
        let failed = ["NON-ZERO", "ABORTED", "KILLED", "WITHOUT SYNC", "FAIL"];
        if failed.iter().any(|f| state.contains(f)) {
            break;
        }
        if state == "NORMALLY TERMINATED" && !early.iter().any(|e| e.rank == rank) {
            early.push(RankEnd {
                rank,
                node: Some(node.to_string()),
                how: Ended::Exited(0),
            });
        }
    }
    early
}

/// A line of Open MPI's log of states (`--mca state_base_verbose 5`).
fn state_log(line: &str) -> bool {
    line.contains(" ACTIVATE PROC ")
        || line.contains(" ACTIVATE JOB ")
        || line.contains(" state:base:")
}

/// The first rank that the log of states says ended badly, as the daemon that ran it logged
/// it: `[node-b:14800] [[20282,0],1] ACTIVATE PROC [[20282,1],3] STATE ABORTED BY SIGNAL AT
/// ../orte/mca/odls/base/odls_base_default_fns.c:1746`. The log gives no signal or status:
/// mpirun's own exit status carries the first failed rank's (128 + its signal).
fn state_report(lines: &[String], status: ExitStatus) -> Option<RankEnd> {
    lines.iter().find_map(|line| {
        let (node, rank, state, at) = proc_state(line)?;
        if !at.contains("/odls/") {
            return None; // mpirun relaying a daemon's report: the daemon's line names the node
        }
        let code = status.code();
        let how = match state {
            "ABORTED BY SIGNAL" => match code {
                Some(c) if c > 128 => Ended::Signaled(c - 128),
                _ => Ended::SignaledUnnamed,
            },
            "EXITED WITH NON-ZERO STATUS" => Ended::Exited(code.filter(|&c| c != 0)?),
            "TERMINATED WITHOUT SYNC" => Ended::Exited(0),
            _ => return None,
        };
        Some(RankEnd {
            rank,
            node: Some(node.to_string()),
            how,
        })
    })
}

/// Open MPI 4's report of a rank that left without finalizing (it exited 0 early, or never
/// started PMIx), on two lines: `mpirun has exited due to process rank 3 with PID 2703 on` /
/// `node node-b exiting improperly. ...`. The rank ended with status 0, as far as mpirun says.
fn improper_exit(lines: &[String]) -> Option<RankEnd> {
    let text = lines.join(" ");
    let rest = text.split("has exited due to process rank ").nth(1)?;
    let (what, _) = rest.split_once(" exiting improperly")?;
    let rank = what.split_whitespace().next()?.parse().ok()?;
    let node = what
        .split(" node ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .map(str::to_string);
    Some(RankEnd {
        rank,
        node,
        how: Ended::Exited(0),
    })
}

/// Open MPI 4's report of the rank that ended the job: `mpirun noticed that process rank 3
/// with PID 0 on node node-b exited on signal 9 (Killed).`, or `Process name: [[J,1],2]` then
/// `Exit code: 2`.
fn first_report(lines: &[String]) -> Option<RankEnd> {
    for (i, line) in lines.iter().enumerate() {
        if let Some(rest) = line.split("noticed that process rank ").nth(1) {
            let rank = rest.split_whitespace().next()?.parse().ok()?;
            let node = rest
                .split(" on node ")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .map(str::to_string);
            let how = if let Some(signal) = rest.split(" on signal ").nth(1) {
                Ended::Signaled(signal.split_whitespace().next()?.parse().ok()?)
            } else {
                Ended::Exited(
                    rest.split(" status ")
                        .nth(1)?
                        .trim_end_matches('.')
                        .parse()
                        .ok()?,
                )
            };
            return Some(RankEnd { rank, node, how });
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
                .find_map(|l| l.trim().strip_prefix("Exit code:"))?;
            let how = Ended::Exited(code.trim().parse().ok()?);
            return Some(RankEnd {
                rank,
                node: None,
                how,
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launcher::external::lines;
    use std::os::unix::process::ExitStatusExt;

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
        let signal = lines(&[
            "-----",
            "mpirun noticed that process rank 3 with PID 0 on node node-b exited on signal 9 (Killed).",
        ]);
        assert_eq!(
            first_report(&signal),
            Some(RankEnd {
                rank: 3,
                node: Some("node-b".into()),
                how: Ended::Signaled(9),
            })
        );
        let status = lines(&[
            "mpirun noticed that process rank 1 with PID 77 on node a exited with status 4.",
        ]);
        assert_eq!(first_report(&status).map(|n| n.how), Some(Ended::Exited(4)));
        let exit = lines(&[
            "mpirun detected that one or more processes exited with non-zero status, thus causing",
            "the job to be terminated. The first process to do so was:",
            "",
            "  Process name: [[21097,1],2]",
            "  Exit code:    2",
        ]);
        assert_eq!(
            first_report(&exit),
            Some(RankEnd {
                rank: 2,
                node: None,
                how: Ended::Exited(2)
            })
        );
        assert_eq!(first_report(&lines(&["all fine"])), None);
    }

    /// M3: a rank that exits 0 before finalizing is named by mpirun in a report of its own.
    #[test]
    fn a_rank_that_exited_improperly_is_read() {
        let text = lines(&[
            "--------------------------------------------------------------------------",
            "mpirun has exited due to process rank 3 with PID 2703 on",
            "node node-b exiting improperly. There are three reasons this could occur:",
            "",
            "1. this process did not call \"init\" before exiting, but others in",
        ]);
        assert_eq!(
            reports(&text, ExitStatus::from_raw(256)),
            [RankEnd {
                rank: 3,
                node: Some("node-b".into()),
                how: Ended::Exited(0),
            }]
        );
        assert_eq!(
            reports(&lines(&["mpirun has exited"]), ExitStatus::from_raw(256)),
            []
        );
    }

    /// M6: a rank killed during start-up, which mpirun's report leaves out, is named from the
    /// log of states, with the node of the daemon that ran it; the signal comes from mpirun's
    /// status (128 + 9), unnamed when mpirun had to be killed itself.
    #[test]
    fn a_rank_the_report_leaves_out_is_read_from_the_log_of_states() {
        let log = lines(&[
            "[node-a:14774] [[20282,0],0] ACTIVATE PROC [[20282,1],3] STATE RUNNING AT ../plm_base_receive.c:352",
            "[node-b:14800] [[20282,0],1] ACTIVATE PROC [[20282,1],3] STATE IOF COMPLETE AT ../iof/orted/iof_orted_read.c:182",
            "[node-a:14774] [[20282,0],0] ACTIVATE PROC [[20282,1],3] STATE ABORTED BY SIGNAL AT ../../orte/mca/plm/base/plm_base_receive.c:352",
            "[node-b:14800] [[20282,0],1] ACTIVATE PROC [[20282,1],3] STATE ABORTED BY SIGNAL AT ../../orte/mca/odls/base/odls_base_default_fns.c:1746",
            "Primary job  terminated normally, but 1 process returned",
        ]);
        assert!(log.iter().take(4).all(|l| state_log(l)));
        let killed = |status| reports(&log, ExitStatus::from_raw(status));
        let named = |how| RankEnd {
            rank: 3,
            node: Some("node-b".into()),
            how,
        };
        assert_eq!(killed(137 << 8), [named(Ended::Signaled(9))]);
        assert_eq!(killed(9), [named(Ended::SignaledUnnamed)]);
        assert!(aborting(&log[4]));
    }

    /// M5: every job gets the keepalive, but a parameter the user set is theirs.
    #[test]
    fn the_oob_keepalive_is_asked_for_unless_the_user_set_it() {
        let shown = |words: Vec<OsString>| {
            let words: Vec<String> = words.iter().map(|w| w.to_string_lossy().into()).collect();
            words.join(" ")
        };
        assert_eq!(
            shown(keepalive_words(&[], |_| false)),
            "--mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 1 \
             --mca oob_tcp_keepalive_probes 3"
        );
        let args = ["--mca", "oob_tcp_keepalive_time", "60"].map(OsString::from);
        let env = |name: &str| name == "OMPI_MCA_oob_tcp_keepalive_probes";
        assert_eq!(
            shown(keepalive_words(&args, env)),
            "--mca oob_tcp_keepalive_intvl 1"
        );
        // Through the spec's environment, as mpirun would get it.
        let mpirun = Mpirun::new(Hosts::List(vec!["a".into()]));
        let spec = LaunchSpec::new("/bin/true", 1).env("OMPI_MCA_oob_tcp_keepalive_time", "0");
        let words = shown(
            mpirun
                .words(&spec, Path::new("/bin/true"), &["a".into()])
                .unwrap(),
        );
        assert!(!words.contains("--mca oob_tcp_keepalive_time"), "{words}");
        assert!(words.contains("--mca oob_tcp_keepalive_intvl 1"), "{words}");
    }

    /// M1: mpirun names a rank that panicked by its process name only: its node comes from
    /// the log of states.
    #[test]
    fn the_node_of_a_rank_named_without_one_is_read_from_the_log_of_states() {
        let text = lines(&[
            "[node-b:13583] [[17292,0],1] ACTIVATE PROC [[17292,1],3] STATE WAITPID FIRED AT ../../../../../orte/mca/odls/base/odls_base_default_fns.c:1746",
            "[node-a:13568] [[17292,0],0] ACTIVATE PROC [[17292,1],3] STATE EXITED WITH NON-ZERO STATUS AT ../../../../../orte/mca/plm/base/plm_base_receive.c:352",
            "mpirun detected that one or more processes exited with non-zero status, thus causing",
            "the job to be terminated. The first process to do so was:",
            "  Process name: [[17292,1],3]",
            "  Exit code:    101",
        ]);
        assert_eq!(
            reports(&text, ExitStatus::from_raw(101 << 8)),
            [RankEnd {
                rank: 3,
                node: Some("node-b".into()),
                how: Ended::Exited(101),
            }]
        );
    }

    /// M1: a rank that returned early (status 0, finalized) is in the log of states as ended
    /// normally before the others failed; mpirun's report names a witness only. The ranks
    /// mpirun killed afterwards, also logged as ended normally, are not.
    #[test]
    fn a_rank_that_ended_normally_before_the_others_failed_is_reported() {
        let text = lines(&[
            "[node-a:13568] [[17292,0],0] ACTIVATE JOB [17292,1] STATE SENDING LAUNCH MSG AT ../../../../../orte/mca/odls/base/odls_base_default_fns.c:440",
            "[node-b:13583] [[17292,0],1] ACTIVATE PROC [[17292,1],3] STATE IOF COMPLETE AT ../../../../../../orte/mca/iof/orted/iof_orted_read.c:182",
            "[node-b:13583] [[17292,0],1] ACTIVATE PROC [[17292,1],3] STATE WAITPID FIRED AT ../../../../../orte/mca/odls/base/odls_base_default_fns.c:1746",
            "[node-b:13583] [[17292,0],1] ACTIVATE PROC [[17292,1],3] STATE NORMALLY TERMINATED AT ../../../../../../orte/mca/state/orted/state_orted.c:373",
            "[node-a:13568] [[17292,0],0] ACTIVATE PROC [[17292,1],1] STATE EXITED WITH NON-ZERO STATUS AT ../../../../../orte/mca/odls/base/odls_base_default_fns.c:1746",
            "[node-a:13568] [[17292,0],0] ACTIVATE PROC [[17292,1],0] STATE KILLED BY INTERNAL COMMAND AT ../../../../../orte/mca/odls/base/odls_base_default_fns.c:1981",
            "[node-a:13568] [[17292,0],0] ACTIVATE PROC [[17292,1],0] STATE NORMALLY TERMINATED AT ../../../../../../orte/mca/state/base/state_base_fns.c:715",
            "[node-a:13568] [[17292,0],0] ACTIVATE PROC [[17292,0],1] STATE COMMUNICATION FAILURE AT ../../../../../../orte/mca/oob/tcp/oob_tcp_component.c:1086",
            "  Process name: [[17292,1],1]",
            "  Exit code:    75",
        ]);
        assert_eq!(
            reports(&text, ExitStatus::from_raw(75 << 8)),
            [
                RankEnd {
                    rank: 1,
                    node: Some("node-a".into()),
                    how: Ended::Exited(75),
                },
                RankEnd {
                    rank: 3,
                    node: Some("node-b".into()),
                    how: Ended::Exited(0),
                },
            ]
        );
        // Every rank ended normally after the failure: none left early.
        assert_eq!(left_early(&text[4..]), []);
    }

    #[test]
    fn layouts_become_host_slots_and_the_environment_is_exported() {
        let mut mpirun = Mpirun::new(Hosts::List(vec!["a".into(), "b".into()]));
        mpirun.wrapper = vec!["nsenter".into(), "--".into()];
        mpirun.rsh_agent = Some("/run/agent".into());
        let spec = LaunchSpec::new("/bin/true", 0)
            .layout(Layout::PerNode(vec![3, 1]))
            .env("X", "1")
            .args(["--flag"]);
        let words = mpirun
            .words(&spec, Path::new("/bin/true"), &["a".into(), "b".into()])
            .unwrap();
        let words: Vec<String> = words.iter().map(|w| w.to_string_lossy().into()).collect();
        assert_eq!(
            words.join(" "),
            "nsenter -- mpirun --mca plm_rsh_agent /run/agent --mca state_base_verbose 5 \
             --mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 1 \
             --mca oob_tcp_keepalive_probes 3 \
             --tag-output --host a:3,b:1 -np 4 -x X /bin/true --flag"
        );
        let spread = LaunchSpec::new("/bin/true", 3).layout(Layout::Spread { nodes: 2 });
        let words = mpirun
            .words(&spread, Path::new("/bin/true"), &["a".into(), "b".into()])
            .unwrap();
        assert!(words.contains(&"a:2,b:1".into()), "{words:?}");
        let err = mpirun
            .words(&spread, Path::new("/bin/true"), &["a".into()])
            .unwrap_err();
        assert!(err.to_string().contains("needs 2 hosts"), "{err}");
        assert_eq!(
            hostfile_names("# nodes\nn1 slots=4\n\n  n2  # spare\n"),
            ["n1", "n2"]
        );
    }
}

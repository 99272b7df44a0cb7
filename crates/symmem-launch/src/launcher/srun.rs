//! [`Launcher::Srun`](crate::Launcher::Srun): Slurm's `srun --mpi=pmix` inside an allocation,
//! its `--label` lines, and its report of the tasks that failed.
//!
//! `srun` runs with `--kill-on-bad-exit=1`: a task that exits non-zero or is killed ends the
//! whole step at once, as [`Launcher::Local`](crate::Launcher::Local) and `mpirun` end a run
//! on the first failure; without it, the surviving tasks would wait for the lost one until
//! their collective timeout, whatever the cluster's `KillOnBadExit` says.
//!
//! And with `-v`: srun then also says which task ended with status 0, and on which node
//! (`_task_finish: node-b: task 3: Completed`), which it says nowhere else: a task that leaves
//! early with status 0 (before the ranks even meet) is named as such. Those lines and the rest
//! of what `-v` adds are kept from the sink ([`verbose`]).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use super::Sweep;
use super::external::{self, Job, Stop, Tagger};
use crate::error::LaunchError;
use crate::layout::Layout;
use crate::report::{Ended, OutputLine, RankEnd, RunReport, Stream};
use crate::spec::LaunchSpec;

/// How to run `srun`: inside an allocation (`salloc`, `sbatch`), nothing more; the emulated
/// cluster adds a wrapper that enters a node, its `SLURM_CONF`, and a sweep of its nodes.
/// The nodes and tasks come from the spec's [`Layout`]: `nodes x k` is `-N nodes
/// --ntasks-per-node k`, [`Layout::Spread`] is `-N nodes` alone (Slurm places the tasks).
#[derive(Debug, Clone)]
pub struct Srun {
    /// The `srun` program (default: `srun` on PATH).
    pub program: PathBuf,
    /// More arguments of `srun`, before the program (`--partition gpu`, `--gpus-per-task 1`).
    pub args: Vec<OsString>,
    /// A command prefix, e.g. `nsenter -t PID -u -m -i --` to run `srun` inside a node.
    pub wrapper: Vec<OsString>,
    /// Environment for `srun` itself (e.g. `SLURM_CONF`); the ranks get it too, as they get
    /// `srun`'s whole environment (`--export=ALL`, Slurm's default).
    pub env: Vec<(OsString, OsString)>,
    /// What the caller sweeps from the nodes after the job.
    pub sweep: Option<Sweep>,
}

impl Default for Srun {
    fn default() -> Self {
        Self {
            program: PathBuf::from("srun"),
            args: Vec::new(),
            wrapper: Vec::new(),
            env: Vec::new(),
            sweep: None,
        }
    }
}

impl Srun {
    pub(crate) fn launch(
        &self,
        spec: &LaunchSpec,
        sink: &mut dyn FnMut(&OutputLine),
    ) -> Result<RunReport, LaunchError> {
        let job = Job {
            name: "srun",
            words: self.words(spec, &spec.program)?,
            env: self.env.clone(),
            tagger: || Box::new(Labels),
            reports,
            // Slurm may place the ranks otherwise than in order (its distribution).
            placed: Vec::new(),
            nodes: Vec::new(),
            stop: Stop::InterruptTwice,
            // srun ends the step itself on a bad exit (--kill-on-bad-exit), bounded by Slurm.
            aborting: |_| false,
            quiet: verbose,
            sweep: self.sweep.as_ref(),
        };
        external::run(job, spec, sink)
    }

    /// The whole command line: wrapper, `srun` and its arguments, the program, its arguments.
    fn words(&self, spec: &LaunchSpec, program: &Path) -> Result<Vec<OsString>, LaunchError> {
        let placement = match &spec.layout {
            Layout::OneHost => vec!["--nodes=1".to_string()],
            Layout::Spread { nodes } => vec![format!("--nodes={nodes}")],
            layout @ Layout::PerNode(counts) => match layout.per_node() {
                Some(k) => vec![
                    format!("--nodes={}", counts.len()),
                    format!("--ntasks-per-node={k}"),
                ],
                None => {
                    return Err(LaunchError::Layout(format!(
                        "srun cannot be told an uneven layout such as {layout}: ask for the \
                         ranks and nodes alone (Layout::Spread; `--ranks {} --nodes {}` \
                         without --ntasks-per-node) and Slurm's block distribution places them",
                        spec.ranks,
                        counts.len()
                    )));
                }
            },
        };
        let mut words: Vec<OsString> = self.wrapper.clone();
        words.push(self.program.clone().into());
        words.extend(
            ["--mpi=pmix", "--label", "--kill-on-bad-exit=1", "-v"]
                .into_iter()
                .map(OsString::from),
        );
        words.extend(placement.into_iter().map(OsString::from));
        words.push(format!("--ntasks={}", spec.ranks).into());
        words.extend(self.args.iter().cloned());
        words.push(program.into());
        words.extend(spec.args.iter().cloned());
        Ok(words)
    }
}

/// `srun --label` puts `N: ` before each line of task N (padded with spaces to the width of
/// the largest task id); `srun`'s own lines (`srun: error: ...`) have no such prefix.
struct Labels;

impl Tagger for Labels {
    fn feed(&mut self, raw: &str, pipe: Stream) -> Vec<OutputLine> {
        let (rank, text) = match label(raw) {
            Some((rank, text)) => (Some(rank), text),
            None => (None, raw),
        };
        vec![OutputLine {
            rank,
            stream: pipe,
            text: text.to_string(),
        }]
    }

    fn finish(&mut self) -> Vec<OutputLine> {
        Vec::new()
    }
}

/// `" 3: text"` → `(3, "text")`.
fn label(raw: &str) -> Option<(usize, &str)> {
    let (id, text) = raw.trim_start_matches(' ').split_once(':')?;
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((id.parse().ok()?, text.strip_prefix(' ').unwrap_or(text)))
}

/// One `srun: error: NODE: task(s) LIST: HOW` line.
fn task_report(line: &str) -> Option<(String, Vec<usize>, Ended)> {
    let rest = line.trim().strip_prefix("srun: error: ")?;
    let mut parts = rest.splitn(3, ": ");
    let node = parts.next()?.to_string();
    let tasks = parts.next()?;
    let list = tasks
        .strip_prefix("tasks ")
        .or_else(|| tasks.strip_prefix("task "))?;
    let how = slurm_ended(parts.next()?)?;
    Some((node, task_list(list)?, how))
}

/// `0-2,5` → 0, 1, 2, 5.
fn task_list(text: &str) -> Option<Vec<usize>> {
    let mut tasks = Vec::new();
    for part in text.split(',') {
        match part.split_once('-') {
            Some((a, b)) => tasks.extend(a.trim().parse::<usize>().ok()?..=b.trim().parse().ok()?),
            None => tasks.push(part.trim().parse().ok()?),
        }
    }
    Some(tasks)
}

/// `Exited with exit code 2`, or a signal as `strsignal` writes it (`Killed`,
/// `Segmentation fault (core dumped)`).
fn slurm_ended(how: &str) -> Option<Ended> {
    if let Some(code) = how.trim().strip_prefix("Exited with exit code ") {
        return Some(Ended::Exited(code.trim().parse().ok()?));
    }
    const SIGNALS: &[(&str, i32)] = &[
        ("Hangup", 1),
        ("Interrupt", 2),
        ("Quit", 3),
        ("Illegal instruction", 4),
        ("Aborted", 6),
        ("Bus error", 7),
        ("Floating point exception", 8),
        ("Killed", 9),
        ("Segmentation fault", 11),
        ("Terminated", 15),
    ];
    let name = how.trim().trim_end_matches(" (core dumped)");
    SIGNALS
        .iter()
        .find(|(text, _)| *text == name)
        .map(|&(_, signal)| Ended::Signaled(signal))
}

/// What `srun -v` adds to srun's own lines: its options, the job's nodes, each node's launch
/// and each task's start and end. Not for the user's eyes; kept for [`reports`].
fn verbose(line: &str) -> bool {
    let Some(rest) = line.strip_prefix("srun: ") else {
        return false;
    };
    const ADDED: &[&str] = &[
        "defined options",
        "end of defined options",
        "-----",
        "jobid ",
        "launching ",
        "route/",
        "launch/slurm: launch_p_step_launch",
        "launch/slurm: _task_start",
        "launch/slurm: _task_finish",
    ];
    // `ntasks-per-node     : 2`: an option and its value.
    let option = rest.split_once(" : ").is_some_and(|(name, _)| {
        let name = name.trim_end();
        !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'-')
    });
    option || ADDED.iter().any(|a| rest.starts_with(a))
}

/// One `srun: launch/slurm: _task_finish: NODE: task(s) LIST: Completed` line of `srun -v`:
/// tasks that ended with status 0.
fn completed(line: &str) -> Option<(String, Vec<usize>)> {
    let rest = line
        .trim()
        .strip_prefix("srun: launch/slurm: _task_finish: ")?
        .strip_suffix(": Completed")?;
    let (node, tasks) = rest.split_once(": ")?;
    let list = tasks
        .strip_prefix("tasks ")
        .or_else(|| tasks.strip_prefix("task "))?;
    Some((node.to_string(), task_list(list)?))
}

/// Every task `srun` reported ending, in its order: those that failed, and those that ended
/// with status 0 before any failed (after the first failure srun ends the others itself).
fn reports(lines: &[String], _: ExitStatus) -> Vec<RankEnd> {
    let mut ends = Vec::new();
    let mut failed = false;
    for line in lines {
        let (node, tasks, how) = match (task_report(line), completed(line)) {
            (Some(report), _) => {
                failed = true;
                report
            }
            (None, Some((node, tasks))) if !failed => (node, tasks, Ended::Exited(0)),
            _ => continue,
        };
        ends.extend(tasks.into_iter().map(|rank| RankEnd {
            rank,
            node: Some(node.clone()),
            how,
        }));
    }
    ends
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launcher::external::lines;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn labels_name_the_task_and_the_rest_is_srun_s() {
        let mut labels = Labels;
        let parse = |labels: &mut Labels, raw| {
            let line = labels.feed(raw, Stream::Stdout).remove(0);
            (line.rank, line.text)
        };
        assert_eq!(
            parse(&mut labels, "0: hello: x"),
            (Some(0), "hello: x".into())
        );
        assert_eq!(
            parse(&mut labels, " 3: {\"a\": 1}"),
            (Some(3), "{\"a\": 1}".into())
        );
        assert_eq!(parse(&mut labels, "12: "), (Some(12), "".into()));
        assert_eq!(parse(&mut labels, "7:"), (Some(7), "".into()));
        let own = "srun: error: node-b: task 3: Killed";
        assert_eq!(parse(&mut labels, own), (None, own.into()));
        assert_eq!(parse(&mut labels, ": x"), (None, ": x".into()));
    }

    #[test]
    fn every_task_srun_reports_is_read_with_its_node() {
        let ends = |text: &[&str]| -> Vec<(usize, String, Ended)> {
            reports(&lines(text), ExitStatus::from_raw(0))
                .into_iter()
                .map(|r| (r.rank, r.node.unwrap_or_default(), r.how))
                .collect()
        };
        let killed = ends(&[
            "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
            "srun: error: node-a: tasks 0-1,2: Exited with exit code 75",
            "srun: error: node-b: task 3: Killed",
        ]);
        let peer = Ended::Exited(75);
        assert_eq!(
            killed,
            [
                (0, "node-a".into(), peer),
                (1, "node-a".into(), peer),
                (2, "node-a".into(), peer),
                (3, "node-b".into(), Ended::Signaled(9)),
            ]
        );
        let exited = ends(&["srun: error: node-b: task 3: Exited with exit code 2"]);
        assert_eq!(exited, [(3, "node-b".into(), Ended::Exited(2))]);
        let segv = ends(&["srun: error: n7: task 12: Segmentation fault (core dumped)"]);
        assert_eq!(segv, [(12, "n7".into(), Ended::Signaled(11))]);
        assert_eq!(ends(&["srun: error: Unable to allocate resources: x"]), []);
        assert_eq!(task_list("0-2,5"), Some(vec![0, 1, 2, 5]));
    }

    #[test]
    fn layouts_become_nodes_and_tasks() {
        let srun = Srun {
            wrapper: vec!["nsenter".into(), "--".into()],
            args: vec!["--partition=debug".into()],
            ..Srun::default()
        };
        let words = |spec: &LaunchSpec| {
            srun.words(spec, Path::new("/bin/true")).map(|w| {
                w.iter()
                    .map(|w| w.to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
        };
        let even = LaunchSpec::new("/bin/true", 0)
            .layout(Layout::even(2, 2))
            .args(["-x"]);
        assert_eq!(
            words(&even).unwrap(),
            "nsenter -- srun --mpi=pmix --label --kill-on-bad-exit=1 -v --nodes=2 \
             --ntasks-per-node=2 --ntasks=4 --partition=debug /bin/true -x"
        );
        let spread = LaunchSpec::new("/bin/true", 4).layout(Layout::Spread { nodes: 2 });
        let spread = words(&spread).unwrap();
        assert!(spread.contains("--nodes=2 --ntasks=4 "), "{spread}");
        assert!(!spread.contains("ntasks-per-node"), "{spread}");
        let uneven = LaunchSpec::new("/bin/true", 0).layout(Layout::PerNode(vec![3, 1]));
        let err = words(&uneven).unwrap_err().to_string();
        assert!(err.contains("without --ntasks-per-node"), "{err}");
    }

    /// `srun -v` names a task that ended with status 0 and its node; a task that left early
    /// before any failure is read as such, the ones srun ended after a failure are not.
    #[test]
    fn a_task_srun_saw_complete_before_any_failure_is_read_as_status_0() {
        let text = [
            "srun: ntasks-per-node     : 2",
            "srun: launching StepId=1.0 on host node-b, 2 tasks: [2-3]",
            "srun: launch/slurm: _task_finish: Received task exit notification for 1 task of \
             StepId=1.0 (status=0x0000).",
            "srun: launch/slurm: _task_finish: node-b: task 3: Completed",
            "srun: error: node-b: task 2: Exited with exit code 75",
            "srun: launch/slurm: _task_finish: node-a: tasks 0-1: Completed",
        ];
        let ends: Vec<(usize, Option<String>, Ended)> =
            reports(&lines(&text), ExitStatus::from_raw(0))
                .into_iter()
                .map(|r| (r.rank, r.node, r.how))
                .collect();
        assert_eq!(
            ends,
            [
                (3, Some("node-b".into()), Ended::Exited(0)),
                (2, Some("node-b".into()), Ended::Exited(75)),
            ]
        );
        for added in &text[..4] {
            assert!(verbose(added), "{added}");
        }
        for own in [
            "srun: error: node-b: task 2: Exited with exit code 75",
            "srun: launch/slurm: _step_signal: Terminating StepId=1.0",
            "srun: Force Terminated StepId=1.0",
            "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
            "3: a rank's line : with a colon",
        ] {
            assert!(!verbose(own), "{own}");
        }
    }
}

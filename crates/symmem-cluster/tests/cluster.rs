//! The emulated two-node cluster (`symmem-cluster`) with Open MPI's mpirun, run through
//! `symmem-launch`'s `Launcher::Mpirun` as the cluster hands it out: ranks on both nodes,
//! private folders per node, and a `kill -9` of a rank on the second node that ends the whole
//! job, names the culprit with its node and leaves nothing on either node.
//!
//! Needs root and Open MPI (`.ci/cluster` installs it); elsewhere each test prints
//! "SKIPPED: ..." with the reason (a failure under `CI=true`).

mod common;

use nix::sys::signal::Signal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use symmem_cluster::{CI_RUN_VARIABLE, Cluster, ClusterError, ORIGIN_VARIABLE};
use symmem_launch::{Ended, LaunchSpec, Launcher, Layout, Outcome, OutputLine, RunReport, Stream};
use symmem_process::procfs;

/// The grace period of symmem's launcher: a job must be over this long after a kill.
const GRACE: Duration = Duration::from_secs(5);

fn cluster() -> Option<Cluster> {
    common::cluster(2)
}

/// A script in the cluster's shared folder, as the nodes see it.
fn script(cluster: &Cluster, name: &str, body: &str) -> PathBuf {
    let path = cluster.shared_dir().join(name);
    symmem_test_support::command::write_script(&path, &format!("#!/bin/sh\n{body}"));
    cluster.on_nodes(&path).unwrap()
}

use common::{down, snapshot};

/// Runs `spec` with mpirun across the cluster; `on_line` sees each line as it comes.
fn mpirun(
    cluster: &Cluster,
    spec: &LaunchSpec,
    on_line: &mut dyn FnMut(&OutputLine),
) -> (RunReport, Vec<OutputLine>) {
    let mut lines = Vec::new();
    let report = Launcher::Mpirun(cluster.mpirun())
        .launch(spec, &mut |line| {
            on_line(line);
            lines.push(line.clone());
        })
        .unwrap();
    (report, lines)
}

/// Rank `rank`'s lines on `stream`.
fn rank_lines(lines: &[OutputLine], rank: usize, stream: Stream) -> Vec<&str> {
    lines
        .iter()
        .filter(|l| l.rank == Some(rank) && l.stream == stream)
        .map(|l| l.text.as_str())
        .collect()
}

fn show(report: &RunReport, lines: &[OutputLine]) -> String {
    let lines: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    format!("{report}\n{}", lines.join("\n"))
}

/// Runs a 2x2 job whose ranks print their node's name and address; asserts ranks 0-1 are on
/// `node-a` at `addresses[0]` and ranks 2-3 on `node-b` at `addresses[1]`. Returns the lines.
fn ranks_on_both_nodes(cluster: &Cluster, extra: &str, addresses: [&str; 2]) -> Vec<OutputLine> {
    let program = script(
        cluster,
        "where",
        &format!("echo \"$(hostname) $(getent hosts \"$(hostname)\" | cut -d' ' -f1)\"\n{extra}"),
    );
    let spec = LaunchSpec::new(&program, 0)
        .layout(Layout::even(2, 2))
        .timeout(Duration::from_secs(60));
    let (report, lines) = mpirun(cluster, &spec, &mut |_| {});
    assert!(report.success(), "{}", show(&report, &lines));
    for rank in 0..4 {
        let node = if rank < 2 {
            format!("node-a {}", addresses[0])
        } else {
            format!("node-b {}", addresses[1])
        };
        assert_eq!(
            rank_lines(&lines, rank, Stream::Stdout),
            [node.as_str()],
            "{}",
            show(&report, &lines)
        );
    }
    lines
}

#[test]
fn ranks_run_on_both_nodes_each_with_its_own_folders() {
    let Some(cluster) = cluster() else { return };
    let lines = ranks_on_both_nodes(
        &cluster,
        "touch /tmp/mark-$OMPI_COMM_WORLD_RANK /dev/shm/mark-$OMPI_COMM_WORLD_RANK\n\
         echo to-stderr >&2\n",
        ["127.0.0.2", "127.0.0.3"],
    );
    for rank in 0..4 {
        assert_eq!(rank_lines(&lines, rank, Stream::Stderr), ["to-stderr"]);
    }
    // Each node's /tmp and /dev/shm hold its own ranks' files only; this machine's neither.
    for (node, mine) in cluster.nodes().iter().zip([[0, 1], [2, 3]]) {
        for dir in ["/tmp", "/dev/shm"] {
            for rank in 0..4 {
                let seen = node.view(&format!("{dir}/mark-{rank}")).exists();
                assert_eq!(
                    seen,
                    mine.contains(&rank),
                    "{dir}/mark-{rank} on {}",
                    node.name()
                );
            }
        }
    }
    assert!(!Path::new("/tmp/mark-0").exists() && !Path::new("/dev/shm/mark-0").exists());
    // The leftover finder sees what a node keeps in its /tmp, and only there.
    std::fs::write(cluster.nodes()[1].view("/tmp/symmem-probe"), "").unwrap();
    assert_eq!(
        cluster.leftovers("/tmp", "symmem"),
        [("node-b".to_string(), "/tmp/symmem-probe".to_string())]
    );
    down(cluster);
}

#[test]
fn kill_9_of_a_rank_on_node_b_ends_the_job_and_names_it() {
    let Some(cluster) = cluster() else { return };
    let program = script(&cluster, "wait", "echo started\nexec sleep 600\n");
    let spec = LaunchSpec::new(&program, 0)
        .layout(Layout::even(2, 2))
        .timeout(Duration::from_secs(60))
        .grace(GRACE);
    let mut started = 0;
    let mut killed = None;
    let (report, lines) = mpirun(&cluster, &spec, &mut |line| {
        if line.rank.is_some() && line.text == "started" {
            started += 1;
            if started == 4 {
                let victim = cluster.signal_rank(3, Signal::SIGKILL).unwrap();
                killed = Some((Instant::now(), victim));
            }
        }
    });
    // The launch returned once mpirun ended, the nodes were clear and the output drained.
    let (killed_at, (node, process)) =
        killed.unwrap_or_else(|| panic!("{}", show(&report, &lines)));
    assert_eq!(node, "node-b", "rank 3 ran as {process}");
    let took = killed_at.elapsed();
    eprintln!("the job was over {took:?} after the kill; {report}");
    assert!(
        took <= GRACE,
        "the job was over {took:?} after the kill, over the {GRACE:?} grace period\n{}",
        show(&report, &lines)
    );
    assert_eq!(
        report.outcome,
        Outcome::RankFailed {
            rank: 3,
            how: Ended::Signaled(9)
        },
        "{}",
        show(&report, &lines)
    );
    assert_eq!(report.culprit_node.as_deref(), Some("node-b"), "{report}");
    assert!(
        report
            .to_string()
            .starts_with("rank 3 on node-b was killed by signal 9"),
        "{report}"
    );
    assert!(
        report.left_behind.is_empty(),
        "left behind: {:?}",
        report.left_behind
    );
    for node in cluster.nodes() {
        assert_eq!(cluster.processes(node), [], "on {}", node.name());
    }
    assert_eq!(cluster.leftovers("/tmp", "symmem"), []);
    down(cluster);
}

/// A job that outlives its timeout, with ranks that ignore SIGTERM: stopped, and nothing of
/// it is left on the nodes or, after teardown, on this machine.
#[test]
fn a_hung_job_is_stopped_and_leaves_nothing() {
    let Some(cluster) = cluster() else { return };
    let program = script(
        &cluster,
        "hang",
        "trap '' TERM\necho started\nexec sleep 600\n",
    );
    let spec = LaunchSpec::new(&program, 0)
        .layout(Layout::even(2, 1))
        .timeout(Duration::from_secs(3))
        .grace(Duration::from_secs(1));
    let (report, lines) = mpirun(&cluster, &spec, &mut |_| {});
    assert!(
        matches!(report.outcome, Outcome::TimedOut { .. }) && !report.success(),
        "{}",
        show(&report, &lines)
    );
    for node in cluster.nodes() {
        assert_eq!(cluster.processes(node), [], "on {}", node.name());
    }
    down(cluster);
}

#[test]
fn what_the_nodes_cannot_see_or_run_is_refused() {
    assert!(matches!(
        Cluster::up(1),
        Err(ClusterError::NodeCount { asked: 1 })
    ));
    let Some(cluster) = cluster() else { return };
    let err = cluster
        .on_nodes(Path::new("/tmp/some-program"))
        .unwrap_err();
    assert!(
        err.to_string().contains("is not visible on the nodes"),
        "{err}"
    );
    let spec = LaunchSpec::new("/bin/true", 0).layout(Layout::PerNode(vec![1, 0]));
    let err = Launcher::Mpirun(cluster.mpirun())
        .launch(&spec, &mut |_| {})
        .unwrap_err();
    assert!(
        err.is_usage() && err.to_string().contains("at least 1 rank"),
        "{err}"
    );
    down(cluster);
}

/// A program in a folder each node has of its own (a checkout under /tmp) runs through
/// `visible`'s copy in the shared folder; a path the nodes see is left as it is.
#[test]
fn a_program_under_tmp_runs_on_the_nodes_through_a_copy() {
    let Some(cluster) = cluster() else { return };
    assert_eq!(
        cluster.visible(Path::new("/bin/true")).unwrap(),
        Path::new("/bin/true")
    );
    let dir = tempfile::Builder::new()
        .prefix("symmem-hidden-")
        .tempdir_in("/tmp")
        .unwrap();
    let hidden = dir.path().join("hello");
    symmem_test_support::command::write_script(
        &hidden,
        "#!/bin/sh\necho \"hello from $(hostname)\"",
    );
    let seen = cluster.visible(&hidden).unwrap();
    assert_eq!(
        seen,
        cluster
            .on_nodes(&cluster.shared_dir().join("hello"))
            .unwrap()
    );
    let spec = LaunchSpec::new(&seen, 0)
        .layout(Layout::even(2, 1))
        .timeout(Duration::from_secs(60));
    let (report, lines) = mpirun(&cluster, &spec, &mut |_| {});
    assert!(report.success(), "{}", show(&report, &lines));
    assert_eq!(rank_lines(&lines, 0, Stream::Stdout), ["hello from node-a"]);
    assert_eq!(rank_lines(&lines, 1, Stream::Stdout), ["hello from node-b"]);
    down(cluster);
}

/// Set for the copy of this test binary that owns the cluster in
/// `an_owner_killed_with_9_leaves_nothing`.
const OWNER: &str = "CLUSTER_TEST_OWNER";

/// The owner: brings the cluster up, runs a job whose ranks ignore SIGTERM, says where
/// everything is, and waits to be killed.
#[test]
#[ignore = "the owner process of an_owner_killed_with_9_leaves_nothing, which runs it"]
fn owner_of_a_cluster() {
    assert!(
        std::env::var_os(OWNER).is_some(),
        "run by an_owner_killed_with_9_leaves_nothing"
    );
    let cluster = Cluster::up(2).unwrap();
    let program = script(
        &cluster,
        "hang",
        "trap '' TERM\necho started\nexec sleep 600\n",
    );
    let spec = LaunchSpec::new(&program, 0)
        .layout(Layout::even(2, 1))
        .timeout(Duration::from_secs(300));
    let mut started = 0;
    let report = || {
        let ns: Vec<&str> = cluster
            .nodes()
            .iter()
            .map(|n| n.mount_namespace())
            .collect();
        println!("ready {} {}", cluster.folder().display(), ns.join(" "));
    };
    let _ = Launcher::Mpirun(cluster.mpirun()).launch(&spec, &mut |line| {
        if line.rank.is_some() && line.text == "started" {
            started += 1;
            if started == 2 {
                report();
            }
        }
    });
    unreachable!("the job runs until this process is killed");
}

#[test]
fn an_owner_killed_with_9_leaves_nothing() {
    if cluster().is_none() {
        return;
    }
    // The owner prints its line once both ranks run.
    let owner = common::Owner::start("owner_of_a_cluster", OWNER, "1");
    assert_eq!(owner.namespaces.len(), 2, "{:?}", owner.namespaces);
    // Holders, mpirun, orted and both ranks.
    let before = snapshot(&owner.namespaces);
    assert!(before.len() >= 5, "{before:?}");
    owner.kill_and_check(&before);
}

/// Set for a copy of this test binary that only tries `Cluster::up` and prints the error.
const TRY_UP: &str = "CLUSTER_TEST_TRY_UP";

#[test]
#[ignore = "run by what_is_missing_is_named, as another user or with another PATH"]
fn try_up() {
    assert!(
        std::env::var_os(TRY_UP).is_some(),
        "run by what_is_missing_is_named"
    );
    match Cluster::up(2) {
        Ok(cluster) => panic!("the cluster came up: {:?}", cluster.folder()),
        Err(e) => println!("error: {e}"),
    }
}

/// `try_up` in a copy of this binary, first words of the command from `wrapper`.
fn try_up_with(wrapper: &[&str], path: &str) -> String {
    let exe = std::env::current_exe().unwrap();
    let mut command = match wrapper.split_first() {
        Some((first, rest)) => {
            let mut c = std::process::Command::new(first);
            c.args(rest).arg(&exe);
            c
        }
        None => std::process::Command::new(&exe),
    };
    let out = command
        .args(["--exact", "try_up", "--include-ignored", "--nocapture"])
        .env(TRY_UP, "1")
        .env("PATH", path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
fn what_is_missing_is_named() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert!(matches!(Cluster::up(2), Err(ClusterError::NotRoot)));
        eprintln!("SKIPPED (in part): not root, so the missing tools cannot be reached");
        return;
    }
    let Some(setpriv) = ["/usr/bin/setpriv", "/bin/setpriv"]
        .into_iter()
        .find(|p| Path::new(p).exists())
    else {
        eprintln!("SKIPPED: no setpriv (util-linux) to run a copy of this test as another user");
        return;
    };
    let path = std::env::var("PATH").unwrap();
    // Not root: the error says so first, and how to run it.
    let nobody = try_up_with(
        &[setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"],
        &path,
    );
    assert!(
        nobody.contains("error: an emulated cluster needs root"),
        "{nobody}"
    );
    assert!(nobody.contains("sudo"), "{nobody}");
    // Root without util-linux's tools, then without mpirun.
    let none = try_up_with(&[], "/nonexistent");
    assert!(
        none.contains("`unshare` was not found") && none.contains("util-linux"),
        "{none}"
    );
    let dir = tempfile::tempdir().unwrap();
    for tool in ["unshare", "nsenter"] {
        let real = std::env::split_paths(&path)
            .map(|d| d.join(tool))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("{tool} is on PATH (the cluster tests got this far)"));
        std::os::unix::fs::symlink(real, dir.path().join(tool)).unwrap();
    }
    let no_mpirun = try_up_with(&[], &dir.path().to_string_lossy());
    assert!(
        no_mpirun.contains("`mpirun` was not found")
            && no_mpirun.contains("openmpi-bin libopenmpi-dev libpmix-dev"),
        "{no_mpirun}"
    );
}

/// The rsh agent, run inside node-a as mpirun runs it, reaches node-b with what sshd would
/// give the command (HOME, USER, LOGNAME, SHELL, the system PATH) and nothing of the caller's
/// environment: a variable the job does not export with `-x` does not reach node-b.
#[test]
fn the_agent_passes_only_what_ssh_would() {
    let Some(cluster) = cluster() else { return };
    let out = cluster
        .on_node(&cluster.nodes()[0])
        .arg(cluster.agent())
        .args(["node-b", "hostname;", "env"])
        .env("SYMMEM_LEAK_PROBE", "leaked")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("node-b"), "{text}");
    let names: Vec<&str> = lines.filter_map(|l| Some(l.split_once('=')?.0)).collect();
    for given in ["HOME", "USER", "LOGNAME", "SHELL", "PATH"] {
        assert!(
            names.contains(&given),
            "{given} is not set on node-b: {text}"
        );
    }
    // /bin/sh adds PWD (and some shells SHLVL, _); besides the emulator's own variable, as
    // sshd's SSH_CONNECTION, nothing else may come.
    let extra: Vec<&&str> = names
        .iter()
        .filter(|n| {
            ![
                "HOME",
                "USER",
                "LOGNAME",
                "SHELL",
                "PATH",
                "PWD",
                "SHLVL",
                "_",
                ORIGIN_VARIABLE,
            ]
            .contains(n)
        })
        .collect();
    assert!(
        extra.is_empty(),
        "the caller's environment reached node-b: {extra:?}"
    );
    assert!(
        text.contains(&format!("PATH={}\n", symmem_cluster::SSH_PATH)),
        "{text}"
    );
    // It names the cluster, and the owner's CI run when it has one (item 19).
    assert!(
        text.contains(&format!("\n{ORIGIN_VARIABLE}={}\n", cluster.origin())),
        "{text}"
    );
    let name = cluster.folder().file_name().unwrap().to_string_lossy();
    assert!(cluster.origin().starts_with(&format!("cluster={name}")));
    if let Ok(mark) = std::env::var(CI_RUN_VARIABLE) {
        assert!(cluster.origin().ends_with(&format!(" ci-run={mark}")));
    }
    down(cluster);
}

/// Item 19: node-b's `orted`, which the agent starts with ssh's clean environment, still
/// carries the cluster's origin and the owner's CI mark, by which `.ci/cluster` finds one
/// left behind. The test runs itself again as the cluster's owner with a mark of its own.
#[test]
fn node_b_s_orted_carries_the_owner_s_mark() {
    if nix::unistd::geteuid().is_root() && std::env::var_os(MARK_PROBE).is_none() {
        let mark = format!("cluster-test-{}", std::process::id());
        let me = std::env::current_exe().unwrap();
        let out = std::process::Command::new(me)
            .args([
                "--exact",
                "node_b_s_orted_carries_the_owner_s_mark",
                "--nocapture",
            ])
            .env(CI_RUN_VARIABLE, &mark)
            .env(MARK_PROBE, &mark)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{text}");
        if let Some(why) = text.lines().find_map(|l| l.strip_prefix("SKIPPED: ")) {
            return common::skip(why);
        }
        assert!(
            text.contains(&format!("orted on node-b: ci-run={mark}")),
            "{text}"
        );
        return;
    }
    let Some(cluster) = cluster() else { return };
    let program = script(&cluster, "up", "echo up; sleep 3");
    let spec = LaunchSpec::new(&program, 0)
        .layout(Layout::even(2, 1))
        .timeout(Duration::from_secs(60));
    let mut seen = None;
    let (report, lines) = mpirun(&cluster, &spec, &mut |line| {
        if line.rank == Some(1) && line.text == "up" {
            let node_b = &cluster.nodes()[1];
            seen = Some(
                cluster
                    .processes(node_b)
                    .into_iter()
                    .filter(|p| {
                        p.command
                            .split_whitespace()
                            .next()
                            .is_some_and(|c| c.ends_with("orted"))
                    })
                    .map(|p| procfs::env_var(p.pid as i32, ORIGIN_VARIABLE))
                    .collect::<Vec<_>>(),
            );
        }
    });
    assert!(report.success(), "{}", show(&report, &lines));
    let seen = seen.expect("rank 1 said up");
    assert_eq!(seen, [Some(cluster.origin())], "node-b's orted");
    let mark = std::env::var(MARK_PROBE).unwrap_or_default();
    assert!(cluster.origin().ends_with(&format!(" ci-run={mark}")) || mark.is_empty());
    if !mark.is_empty() {
        println!("orted on node-b: ci-run={mark}");
    }
    down(cluster);
}

/// Set in the run of [`node_b_s_orted_carries_the_owner_s_mark`] by itself.
const MARK_PROBE: &str = "SYMMEM_CLUSTER_TEST_MARK";

/// On an isolated network, mpirun's daemons talk over the nodes' own addresses
/// (`oob_tcp_if_include` = their subnet): ranks run on both nodes, each seeing its node's
/// address, and the rsh agent enters the node's network namespace too.
#[test]
fn mpirun_runs_across_an_isolated_network() {
    let cluster = match Cluster::up_with(2, symmem_cluster::Network::Isolated) {
        Ok(cluster) => cluster,
        Err(e @ (ClusterError::NotRoot | ClusterError::ToolMissing { .. })) => {
            return common::skip(e);
        }
        Err(e) => panic!("{e}"),
    };
    ranks_on_both_nodes(&cluster, "", ["198.18.0.2", "198.18.0.3"]);
    down(cluster);
}

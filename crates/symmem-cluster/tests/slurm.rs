//! Debian's Slurm on the emulated nodes (`Cluster::slurm`): `srun --mpi=pmix` places tasks on
//! both nodes (2+2 with `--ntasks-per-node`, Slurm's block 3+1 without), each task is a PMIx
//! client, a `kill -9` of a task on node-b ends the step with srun naming it, a rule on
//! node-b's address cuts it off, and nothing of Slurm or munge is left once it is down, also
//! when its owner is killed with 9.
//!
//! Needs root, util-linux, Slurm and nftables (`.ci/cluster` installs them); elsewhere each
//! test prints "SKIPPED: ..." with the reason (a failure under `CI=true`).

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use symmem_cluster::{Cluster, ClusterError, Network, Slurm};

/// How long one `srun` of these tests may take.
const SRUN_LIMIT: Duration = Duration::from_secs(60);

/// Slurm on `cluster`, or `None` (skipped) when Slurm is not installed.
fn slurm(cluster: &Cluster) -> Option<Slurm<'_>> {
    match cluster.slurm() {
        Ok(slurm) => Some(slurm),
        Err(
            e @ (ClusterError::SlurmMissing { .. }
            | ClusterError::ToolMissing(_)
            | ClusterError::SlurmNoPmix { .. }),
        ) => {
            common::skip(e);
            None
        }
        Err(e) => panic!("{e}"),
    }
}

/// `srun ARGS` inside node-a, its output piped.
fn spawn_srun(slurm: &Slurm, args: &[&str]) -> Child {
    slurm
        .command(slurm.srun())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting srun")
}

/// A thread that reads `pipe` to its end and sends each line.
fn lines_of(pipe: impl Read + Send + 'static, tx: mpsc::Sender<String>) {
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
}

/// `srun ARGS` to its end (at most [`SRUN_LIMIT`]): status, stdout and stderr lines.
fn srun(slurm: &Slurm, args: &[&str]) -> (ExitStatus, Vec<String>, Vec<String>) {
    let mut child = spawn_srun(slurm, args);
    let (out_tx, out) = mpsc::channel();
    let (err_tx, err) = mpsc::channel();
    lines_of(child.stdout.take().unwrap(), out_tx);
    lines_of(child.stderr.take().unwrap(), err_tx);
    let status = symmem_test_support::command::wait_or_kill(&mut child, SRUN_LIMIT);
    let collect = |rx: mpsc::Receiver<String>| rx.iter().collect::<Vec<_>>();
    let (out, err) = (collect(out), collect(err));
    let status = status.unwrap_or_else(|| {
        let state = slurm
            .command("squeue")
            .args(["-h", "-o", "%i %T %R"])
            .output();
        let state = state.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
        panic!(
            "srun {args:?} did not end within {SRUN_LIMIT:?} (killed); squeue: {state:?}; \
             it printed {out:?} {err:?}"
        )
    });
    (status, out, err)
}

/// Which node ran each task: `(task, node)` from lines `TASK NODE ...`, sorted.
fn tasks_on(lines: &[String]) -> Vec<(usize, String)> {
    let mut found: Vec<(usize, String)> = lines
        .iter()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            Some((words.next()?.parse().ok()?, words.next()?.to_string()))
        })
        .collect();
    found.sort();
    found
}

/// Once Slurm is stopped: nothing runs on the nodes and its folders are gone.
fn assert_slurm_gone(cluster: &Cluster) {
    for node in cluster.nodes() {
        let left: Vec<_> = cluster.processes(node);
        assert_eq!(left, [], "on {} after Slurm stopped", node.name());
        assert!(!node.view("/run/munge").exists() && !node.view("/tmp/slurm").exists());
    }
}

#[test]
fn srun_places_tasks_on_both_nodes_as_pmix_clients() {
    let Some(cluster) = common::cluster(2) else {
        return;
    };
    let Some(slurm) = slurm(&cluster) else { return };
    let again = cluster.slurm().map(|_| ()).unwrap_err();
    assert!(matches!(again, ClusterError::SlurmRunning), "{again}");
    for version in [slurm.slurmd_version(), slurm.srun_version()] {
        assert!(version.starts_with("slurm"), "not a version: {version}");
    }
    let report =
        "echo \"$SLURM_PROCID $(hostname) $PMIX_RANK $PMIX_NAMESPACE $SLURM_TASKS_PER_NODE\"";
    let even = [
        "--mpi=pmix",
        "-N2",
        "-n4",
        "--ntasks-per-node=2",
        "sh",
        "-c",
        report,
    ];
    let (status, out, err) = srun(&slurm, &even);
    assert!(status.success(), "{status}: {out:?} {err:?}");
    let node = |n: &str| n.to_string();
    assert_eq!(
        tasks_on(&out),
        [
            (0, node("node-a")),
            (1, node("node-a")),
            (2, node("node-b")),
            (3, node("node-b"))
        ],
        "{out:?}"
    );
    // Every task is a PMIx client of the step's namespace, with its own rank.
    let namespaces: Vec<&str> = out
        .iter()
        .map(|l| l.split(' ').nth(3).unwrap_or(""))
        .collect();
    for line in &out {
        let words: Vec<&str> = line.split(' ').collect();
        assert_eq!(words[2], words[0], "PMIX_RANK is the task's number: {line}");
        assert!(!words[3].is_empty() && words[3] == namespaces[0], "{line}");
        assert_eq!(words[4], "2(x2)", "{line}");
    }
    // Slurm's block distribution: 3 + 1.
    let (status, out, err) = srun(&slurm, &["--mpi=pmix", "-N2", "-n4", "sh", "-c", report]);
    assert!(status.success(), "{status}: {out:?} {err:?}");
    let on_a = tasks_on(&out).iter().filter(|(_, n)| n == "node-a").count();
    assert_eq!((out.len(), on_a), (4, 3), "{out:?}");
    assert!(out.iter().all(|l| l.ends_with(" 3,1")), "{out:?}");
    drop(slurm);
    assert_slurm_gone(&cluster);
    common::down(cluster);
}

/// The outermost process on `node` whose environment has `SLURM_PROCID=task`.
fn task_pid(cluster: &Cluster, node: usize, task: usize) -> Option<u32> {
    let node = &cluster.nodes()[node];
    let procs = cluster.processes(node);
    let environ = |pid: u32| std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    let wanted = format!("SLURM_PROCID={task}");
    let mine: Vec<_> = procs
        .iter()
        .filter(|p| {
            environ(p.pid)
                .split(|&b| b == 0)
                .any(|e| e == wanted.as_bytes())
        })
        .collect();
    mine.iter()
        .find(|p| !mine.iter().any(|q| q.pid == p.parent))
        .map(|p| p.pid)
}

/// Slurm ends the step's other tasks (`sh -c ...`, `sleep`) on every node: waits for that,
/// bounded (KillWait is 5 s), and fails if some still run.
fn assert_tasks_end(cluster: &Cluster) {
    let tasks = || -> Vec<_> {
        cluster
            .nodes()
            .iter()
            .flat_map(|node| cluster.processes(node))
            .filter(|p| p.command.starts_with("sleep") || p.command.starts_with("sh -c"))
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    while !tasks().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(tasks(), [], "tasks of the step left on the nodes");
}

#[test]
fn kill_9_of_a_task_on_node_b_ends_the_step_and_srun_names_it() {
    let Some(cluster) = common::cluster(2) else {
        return;
    };
    let Some(slurm) = slurm(&cluster) else { return };
    // Without --kill-on-bad-exit (and KillOnBadExit in slurm.conf, off as by default) srun
    // waits for the step's other tasks, which here never end by themselves.
    let args = [
        "--mpi=pmix",
        "--kill-on-bad-exit=1",
        "-N2",
        "-n4",
        "--ntasks-per-node=2",
        "sh",
        "-c",
        "echo started; exec sleep 600",
    ];
    let mut child = spawn_srun(&slurm, &args);
    let (out_tx, out) = mpsc::channel();
    let (err_tx, err) = mpsc::channel();
    lines_of(child.stdout.take().unwrap(), out_tx);
    lines_of(child.stderr.take().unwrap(), err_tx);
    let deadline = Instant::now() + SRUN_LIMIT;
    let started = (0..4).all(|_| {
        out.recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .is_ok_and(|l| l == "started")
    });
    assert!(
        started,
        "the four tasks did not all start: {:?}",
        err.try_iter().collect::<Vec<_>>()
    );
    let victim = task_pid(&cluster, 1, 3).expect("task 3 runs on node-b");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(victim as i32),
        nix::sys::signal::SIGKILL,
    )
    .unwrap();
    let status = symmem_test_support::command::wait_within(&mut child, SRUN_LIMIT);
    let err: Vec<String> = err.iter().collect();
    assert!(!status.success(), "{status}: {err:?}");
    assert!(
        err.iter().any(|l| l.contains("node-b: task 3")),
        "srun does not name node-b's task 3: {err:?}"
    );
    assert_tasks_end(&cluster);
    drop(slurm);
    assert_slurm_gone(&cluster);
    common::down(cluster);
}

/// Set for the copy of this test binary that owns the cluster in the owner tests: the
/// cluster's network, `shared` or `isolated`.
const OWNER: &str = "SLURM_TEST_OWNER";

/// The owner: brings up the cluster and Slurm, starts a step, says where everything is (the
/// folder, then the mount namespaces of the nodes and of the fabric, if any) and waits to be
/// killed.
#[test]
#[ignore = "the owner process of the an_owner_killed_with_9_... tests, which run it"]
fn owner_of_a_slurm() {
    let network = match std::env::var(OWNER).as_deref() {
        Ok("shared") => Network::Shared,
        Ok("isolated") => Network::Isolated,
        other => panic!("run by the an_owner_killed_with_9_... tests, not with {other:?}"),
    };
    let cluster = Cluster::up_with(2, network).unwrap();
    let slurm = cluster.slurm().unwrap();
    let mut child = spawn_srun(
        &slurm,
        &["-N2", "-n2", "sh", "-c", "echo started; exec sleep 600"],
    );
    let out = BufReader::new(child.stdout.take().unwrap());
    let started = out
        .lines()
        .map_while(Result::ok)
        .filter(|l| l == "started")
        .take(2)
        .count();
    assert_eq!(started, 2);
    let mut ns = common::namespaces(&cluster);
    if let Some(fabric) = cluster.fabric_pid() {
        let link = std::fs::read_link(format!("/proc/{fabric}/ns/mnt")).unwrap();
        ns.push(link.to_string_lossy().into_owned());
    }
    println!("ready {} {}", cluster.folder().display(), ns.join(" "));
    let _ = child.wait();
    unreachable!("the step runs until this process is killed");
}

/// Runs `owner_of_a_slurm` on `network`, kills it with 9 once its step runs, and checks that
/// the watchdog leaves nothing: no daemon, no holder, no mount, no folder.
fn owner_killed_with_9(network: &str) {
    let Some(cluster) = common::cluster(2) else {
        return;
    };
    if slurm(&cluster).is_none() {
        return;
    }
    drop(cluster);
    let owner = common::Owner::start("owner_of_a_slurm", OWNER, network);
    let before = common::snapshot(&owner.namespaces);
    let running: Vec<String> = before
        .iter()
        .filter_map(|(pid, _)| std::fs::read_to_string(format!("/proc/{pid}/comm")).ok())
        .map(|c| c.trim().to_string())
        .collect();
    for daemon in ["slurmctld", "slurmd", "slurmstepd", "munged"] {
        assert!(
            running.iter().any(|n| n == daemon),
            "no {daemon} in {running:?}"
        );
    }
    owner.kill_and_check(&before);
}

#[test]
fn an_owner_killed_with_9_leaves_no_slurm() {
    owner_killed_with_9("shared");
}

/// The same on an isolated network: the fabric's holder goes too (and with the last process
/// of each network namespace, its veth).
#[test]
fn an_owner_killed_with_9_leaves_no_slurm_nor_fabric() {
    owner_killed_with_9("isolated");
}

/// An nftables table on this machine that makes every new TCP connection to `address`:`port`
/// fail (reset). The port keeps the rule to this test's own daemon: other clusters on this
/// machine have nodes at the same address. Removed on drop.
struct Cut {
    table: String,
}

impl Cut {
    /// `None` (skipped) without `nft`.
    fn off(address: &str, port: u16) -> Option<Self> {
        let table = format!("symmem-cluster-cut-{}", std::process::id());
        let rules = format!(
            "table ip {table} {{\n chain out {{\n type filter hook output priority 0;\n \
             ip daddr {address} tcp dport {port} reject with tcp reset\n }}\n}}\n"
        );
        match std::process::Command::new("nft")
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .spawn()
        {
            Err(e) => {
                common::skip(format!("nft (Debian package nftables) cannot run: {e}"));
                None
            }
            Ok(mut nft) => {
                use std::io::Write;
                nft.stdin
                    .take()
                    .unwrap()
                    .write_all(rules.as_bytes())
                    .unwrap();
                assert!(nft.wait().unwrap().success(), "nft refused {rules}");
                Some(Self { table })
            }
        }
    }
}

impl Drop for Cut {
    fn drop(&mut self) {
        let _ = std::process::Command::new("nft")
            .args(["delete", "table", "ip", &self.table])
            .status();
    }
}

/// Slurm's daemons are reached at their node's own address (`NodeAddr`): a rule that resets
/// connections to node-b's slurmd at 127.0.0.3 stops a step that needs node-b, and srun names
/// it. (On the shared network that is all a rule can cut: what node-b opens leaves from
/// 127.0.0.1; see the isolated network's test for a cut both ways.)
#[test]
fn cutting_node_b_off_by_its_address_stops_steps_that_need_it() {
    let Some(cluster) = common::cluster(2) else {
        return;
    };
    let Some(slurm) = slurm(&cluster) else { return };
    let both = ["-N2", "-n2", "hostname"];
    let (status, out, err) = srun(&slurm, &both);
    assert!(status.success(), "{status}: {out:?} {err:?}");
    // Not before node-b has finished with that job: cut off while `completing`, it would stay
    // so, and the next srun would wait for it forever instead of failing (seen in CI).
    slurm
        .wait_idle()
        .expect("the first job's end on both nodes");
    let node_b = &cluster.nodes()[1];
    let Some(cut) = Cut::off(&node_b.address().to_string(), slurm.slurmd_port(node_b)) else {
        return;
    };
    let (status, out, err) = srun(&slurm, &both);
    assert!(
        !status.success() && err.iter().any(|l| l.contains("failed on node node-b")),
        "{status}: {out:?} {err:?}"
    );
    // Only node-b is named: node-a is still reached at its own address.
    assert!(!err.iter().any(|l| l.contains("node-a")), "{err:?}");
    drop(cut);
    drop(slurm);
    assert_slurm_gone(&cluster);
    common::down(cluster);
}

/// Slurm comes up on the most nodes a cluster has, and a step reaches each of them, which
/// sees its own hostname and address.
#[test]
fn a_step_spans_the_largest_cluster() {
    let Some(cluster) = common::cluster(symmem_cluster::MAX_NODES) else {
        return;
    };
    let Some(slurm) = slurm(&cluster) else { return };
    let n = format!("{}", symmem_cluster::MAX_NODES);
    let report =
        "echo \"$SLURM_PROCID $(hostname) $(getent hosts \"$(hostname)\" | cut -d' ' -f1)\"";
    let (status, out, err) = srun(&slurm, &["-N", &n, "-n", &n, "sh", "-c", report]);
    assert!(status.success(), "{status}: {out:?} {err:?}");
    let mut seen: Vec<(String, String)> = out
        .iter()
        .filter_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            Some((words.get(1)?.to_string(), words.get(2)?.to_string()))
        })
        .collect();
    // Both sorted by name: past node-z the names are two letters (node-aa sorts before
    // node-b), so the cluster's order is not the names' order.
    seen.sort();
    let mut nodes: Vec<(String, String)> = cluster
        .nodes()
        .iter()
        .map(|node| (node.name().to_string(), node.address().to_string()))
        .collect();
    nodes.sort();
    assert_eq!(seen, nodes, "{out:?}");
    drop(slurm);
    assert_slurm_gone(&cluster);
    common::down(cluster);
}

/// On an isolated network (a network namespace per node, linked by a bridge), Slurm and its
/// PMIx steps run across the nodes at their own addresses, and a rule in the fabric that drops
/// node-b's address cuts it off: a step that needs it fails, naming it.
#[test]
fn on_an_isolated_network_a_rule_on_node_b_s_address_cuts_it_off() {
    let cluster = match Cluster::up_with(2, Network::Isolated) {
        Ok(cluster) => cluster,
        Err(e @ (ClusterError::NotRoot | ClusterError::ToolMissing { .. })) => {
            return common::skip(e);
        }
        Err(e) => panic!("{e}"),
    };
    let Some(slurm) = slurm(&cluster) else { return };
    let report =
        "echo \"$SLURM_PROCID $(hostname) $(getent hosts \"$(hostname)\" | cut -d' ' -f1)\"";
    let args = ["--mpi=pmix", "-N2", "-n2", "sh", "-c", report];
    let (status, out, err) = srun(&slurm, &args);
    assert!(status.success(), "{status}: {out:?} {err:?}");
    // As in the shared network's cut: not before node-b has finished with that job.
    slurm
        .wait_idle()
        .expect("the first job's end on both nodes");
    let mut out = out;
    out.sort();
    assert_eq!(out, ["0 node-a 198.18.0.2", "1 node-b 198.18.0.3"]);
    let fabric = cluster
        .fabric_pid()
        .expect("an isolated network has a fabric")
        .to_string();
    let rules = "table bridge cut {\n chain forward {\n type filter hook forward priority 0;\n \
                 ip saddr 198.18.0.3 drop\n ip daddr 198.18.0.3 drop\n }\n}\n";
    let mut nft = std::process::Command::new("nsenter")
        .args(["-t", &fabric, "-n", "--", "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("nsenter nft");
    std::io::Write::write_all(&mut nft.stdin.take().unwrap(), rules.as_bytes()).unwrap();
    assert!(nft.wait().unwrap().success(), "nft refused {rules}");
    let (status, out, err) = srun(&slurm, &args);
    assert!(
        !status.success() && err.iter().any(|l| l.contains("failed on node node-b")),
        "{status}: {out:?} {err:?}"
    );
    drop(slurm);
    assert_slurm_gone(&cluster);
    common::down(cluster);
}

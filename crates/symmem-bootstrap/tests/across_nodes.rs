//! Faults of the control plane across nodes, on the emulated nodes (`symmem-cluster`) under
//! Open MPI's mpirun (`symmem-launch`'s `Launcher::Mpirun`): node-b's leader (its lowest rank)
//! killed with 9 or stopped, the traffic between the nodes dropped, and node-b's last rank
//! panicking or returning early (M1). In each, every other rank ends within its bounded waits,
//! naming the rank it lost (and its node), and nothing is left on the nodes.
//!
//! The ranks are this test binary itself, run as `rank_loop` (an ignored test): each joins
//! with a collective timeout of [`TIMEOUT`], says `ready` after its first barrier, then loops
//! over barriers until one fails, which it prints (`lost: ...`) before exiting 75. With
//! [`FAULT`] set (`panic@RANK` or `return@RANK`), that rank panics, or returns without
//! finishing its barriers (its process exits 0), at barrier [`FAULT_AT`] (M1).
//!
//! Needs root and Open MPI (`.ci/cluster` installs them); elsewhere each test prints
//! "SKIPPED: ..." with the reason (a failure under `CI=true`).

use nix::sys::signal::Signal;
use std::time::{Duration, Instant};
use symmem::{CollectiveKind, CollectiveOp, RankIdentity};
use symmem_bootstrap::{Bootstrap, default_rendezvous};
use symmem_cluster::{Cluster, ClusterError, HostNames, Network};
use symmem_launch::{
    EXIT_PEER_FAILED, Ended, LaunchSpec, Launcher, Layout, Lost, Outcome, OutputLine, RunReport,
};

/// Each rank's collective timeout.
const TIMEOUT: Duration = Duration::from_secs(3);
/// Node-b's leader in a 2x2 job.
const LEADER_B: usize = 2;
/// The last rank of a 2x2 job, on node-b behind its leader.
const LAST_B: usize = 3;
/// The fault `rank_loop` injects: `panic@RANK` or `return@RANK`.
const FAULT: &str = "ACROSS_NODES_FAULT";
/// The barrier at which it strikes (every rank said `ready` after the first).
const FAULT_AT: u64 = 50;
/// Set: each rank returns after this many barriers (a job that passes).
const BARRIERS: &str = "ACROSS_NODES_BARRIERS";

#[test]
#[ignore = "a rank of the tests below, which run it"]
fn rank_loop() {
    let identity = RankIdentity::from_env().expect("started by a launcher");
    let dir = default_rendezvous(&identity).unwrap();
    let started = Instant::now();
    let mut bootstrap = match Bootstrap::join(&identity, 0, &dir, TIMEOUT) {
        Ok(bootstrap) => bootstrap,
        Err(e) => {
            println!(
                "join failed after {} ms: {e}",
                started.elapsed().as_millis()
            );
            std::process::exit(1);
        }
    };
    let fault = std::env::var(FAULT).unwrap_or_default();
    let me = format!("@{}", identity.rank);
    // Bounded: the tests end the job long before this many barriers.
    let barriers = std::env::var(BARRIERS).map_or(1_000_000, |n| n.parse().unwrap());
    for seq in 0..barriers {
        if seq == FAULT_AT && fault.ends_with(&me) {
            match fault.split('@').next() {
                Some("panic") => panic!("rank {} panics at barrier {seq}", identity.rank),
                Some("return") => {
                    println!("returning early at barrier {seq}");
                    return;
                }
                _ => panic!("{FAULT}={fault}: expected panic@RANK or return@RANK"),
            }
        }
        let op = CollectiveOp {
            seq,
            kind: CollectiveKind::Barrier,
        };
        if let Err(e) = bootstrap.barrier(&op) {
            println!("lost: {e}");
            // The launcher ends the job at the first exit and may drop lines still on their
            // way: give the other ranks' reports time to travel first.
            std::thread::sleep(Duration::from_millis(500));
            std::process::exit(75);
        }
        if seq == 0 {
            println!("ready");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn skip(why: impl std::fmt::Display) {
    assert!(
        std::env::var_os("CI").is_none_or(|v| v.is_empty()),
        "under CI this must not skip: {why}"
    );
    eprintln!("SKIPPED: {why}");
}

fn cluster(network: Network) -> Option<Cluster> {
    named_cluster(network, HostNames::Addresses)
}

fn named_cluster(network: Network, host_names: HostNames) -> Option<Cluster> {
    cluster_of(2, network, host_names)
}

fn cluster_of(nodes: usize, network: Network, host_names: HostNames) -> Option<Cluster> {
    match Cluster::up_named(nodes, network, host_names) {
        Ok(cluster) => Some(cluster),
        Err(e @ (ClusterError::NotRoot | ClusterError::ToolMissing { .. })) => {
            skip(e);
            None
        }
        Err(e) => panic!("{e}"),
    }
}

/// Runs the 2x2 job (with `env` exported to the ranks); once every rank said `ready`, `fault`
/// runs once. Every line back.
fn run_job(
    cluster: &Cluster,
    limit: Duration,
    env: &[(&str, &str)],
    fault: &mut dyn FnMut(),
) -> (RunReport, Vec<OutputLine>) {
    let (report, lines, ready) = launch(cluster, limit, env, fault);
    assert_eq!(ready, 4, "{report}\n{}", show(&lines));
    (report, lines)
}

/// [`run_job`], also when the ranks never get ready: how many did.
fn launch(
    cluster: &Cluster,
    limit: Duration,
    env: &[(&str, &str)],
    fault: &mut dyn FnMut(),
) -> (RunReport, Vec<OutputLine>, usize) {
    launch_on(cluster, 2, limit, env, fault)
}

/// [`launch`] with two ranks on each of the cluster's `nodes` nodes.
fn launch_on(
    cluster: &Cluster,
    nodes: usize,
    limit: Duration,
    env: &[(&str, &str)],
    fault: &mut dyn FnMut(),
) -> (RunReport, Vec<OutputLine>, usize) {
    let me = std::env::current_exe().unwrap();
    let ranks = 2 * nodes;
    let mut spec = LaunchSpec::new(cluster.visible(&me).unwrap(), 0)
        .args(["--ignored", "--exact", "rank_loop", "--nocapture"])
        .layout(Layout::even(nodes, 2))
        .timeout(limit);
    for &(name, value) in env {
        spec = spec.env(name, value);
    }
    let mut ready = 0;
    let mut lines = Vec::new();
    let report = Launcher::Mpirun(cluster.mpirun())
        .launch(&spec, &mut |line| {
            if line.rank.is_some() && line.text == "ready" {
                ready += 1;
                if ready == ranks {
                    fault();
                }
            }
            lines.push(line.clone());
        })
        .unwrap();
    (report, lines, ready)
}

fn show(lines: &[OutputLine]) -> String {
    let lines: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    lines.join("\n")
}

/// What node-a's ranks said they lost: at least one of them (the launcher ends the job at
/// the first exit, and may drop the others' last lines), and every line that came says
/// `expected`.
fn node_a_lost(lines: &[OutputLine], expected: &str) {
    witnesses_lost(lines, &[0, 1], expected);
}

/// What `ranks` said they lost, as [`node_a_lost`].
fn witnesses_lost(lines: &[OutputLine], ranks: &[usize], expected: &str) {
    let said: Vec<&OutputLine> = lines
        .iter()
        .filter(|l| l.rank.is_some_and(|r| ranks.contains(&r)) && l.text.starts_with("lost: "))
        .collect();
    assert!(
        !said.is_empty(),
        "ranks {ranks:?} reported no loss:\n{}",
        show(lines)
    );
    for line in said {
        assert!(line.text.contains(expected), "{line}\n{}", show(lines));
    }
}

/// Every rank but `culprit` that the launcher reported ended as a witness (status 75).
fn others_are_witnesses(report: &RunReport, culprit: usize) {
    for end in report.reported.iter().filter(|e| e.rank != culprit) {
        assert_eq!(
            end.how,
            Ended::Exited(EXIT_PEER_FAILED),
            "{end:?}: {report}"
        );
    }
}

/// Nothing of the job on either node, and the nodes go down clean.
fn nothing_left(cluster: Cluster) {
    for node in cluster.nodes() {
        assert_eq!(cluster.processes(node), [], "on {}", node.name());
    }
    for dir in ["/tmp", "/dev/shm"] {
        assert_eq!(cluster.leftovers(dir, "symmem"), [], "in {dir}");
    }
    let teardown = cluster.down();
    assert!(teardown.killed.is_empty(), "{:?}", teardown.killed);
}

#[test]
fn kill_9_of_node_b_s_leader_is_named_with_its_node() {
    let Some(cluster) = cluster(Network::Shared) else {
        return;
    };
    let (report, lines) = run_job(&cluster, Duration::from_secs(60), &[], &mut || {
        let (node, _) = cluster.signal_rank(LEADER_B, Signal::SIGKILL).unwrap();
        assert_eq!(node, "node-b");
    });
    assert!(!report.success(), "{report}");
    node_a_lost(&lines, "rank 2 on node node-b was lost");
    nothing_left(cluster);
}

#[test]
fn sigstop_of_node_b_s_leader_ends_the_job_naming_it() {
    let Some(cluster) = cluster(Network::Shared) else {
        return;
    };
    let (report, lines) = run_job(&cluster, Duration::from_secs(60), &[], &mut || {
        cluster.signal_rank(LEADER_B, Signal::SIGSTOP).unwrap();
    });
    eprintln!("{report}");
    node_a_lost(&lines, "rank 2 never arrived");
    // The report names the stopped leader, and it alone (M3). Rank 3, behind it, hears
    // whatever its leader hands on once the launcher ends the job (mpirun resumes the leader
    // to deliver its signals, and both may then print node-a's verdict, naming themselves):
    // no claim on its lines, but it is not the culprit.
    stopped_leader_b_named_alone(&report, &lines);
    nothing_left(cluster);
}

#[test]
fn dropped_traffic_between_the_nodes_ends_the_job_within_its_waits() {
    if let Err(e) = std::process::Command::new("nft").arg("--version").output() {
        return skip(format!("nft (Debian package nftables) cannot run: {e}"));
    }
    let Some(cluster) = cluster(Network::Isolated) else {
        return;
    };
    // The cut also parts mpirun from node-b's daemon (M5). Open MPI's keepalive on their link
    // (symmem_launch::OOB_KEEPALIVE) tells node-b's orted that mpirun is gone: it ends its
    // ranks and exits by itself. mpirun's own order to end node-b's ranks is never
    // acknowledged (a link with data in flight sends no keepalive), so it hangs in its abort
    // until symmem-launch's abort bound ends it a grace period later.
    let limit = Duration::from_secs(60);
    let mut cut_at = None;
    let (report, lines) = run_job(&cluster, limit, &[], &mut || {
        cut_off_node_b(&cluster);
        cut_at = Some(Instant::now());
    });
    let after_cut = cut_at.expect("the cut was made").elapsed();
    eprintln!("after the cut, the job ended in {after_cut:?}: {report}");
    assert!(!report.success(), "{report}");
    // The job ended by itself, well inside the launcher's limit.
    assert!(
        !matches!(report.outcome, Outcome::TimedOut { .. }),
        "the launcher's limit ended the job: {report}\n{}",
        show(&lines)
    );
    assert!(after_cut < limit / 2, "{after_cut:?}: {report}");
    assert!(report.abort_hung, "{report}");
    // Node-a's ranks name node-b's leader, which never arrived: rank 0 hears from no other
    // rank of node-b (the rule goes with the fabric's network namespace when the cluster is
    // down).
    node_a_lost(&lines, "rank 2 never arrived");
    // Nothing of the job was left on node-b for the launcher's sweep: its orted and ranks
    // ended by themselves.
    assert_eq!(report.left_behind, [], "{report}");
    nothing_left(cluster);
}

/// The report names node-b's leader (rank 2), and it alone, as still running (stopped, or cut
/// off).
fn stopped_leader_b_named_alone(report: &RunReport, lines: &[OutputLine]) {
    match &report.outcome {
        Outcome::PeerLost {
            culprits,
            reason: Lost::StillRunning,
            ..
        } => assert_eq!(culprits, &[LEADER_B], "{report}\n{}", show(lines)),
        _ => panic!("the stopped rank 2 is not named: {report}\n{}", show(lines)),
    }
}

/// Drops every packet to and from node-b (198.18.0.3) on an isolated network's fabric, for
/// good (the rule goes with the fabric's network namespace when the cluster is down).
fn cut_off_node_b(cluster: &Cluster) {
    let fabric = cluster
        .fabric_pid()
        .expect("an isolated network")
        .to_string();
    let rules = "table bridge cut {\n chain forward {\n type filter hook forward priority \
                 0;\n ip saddr 198.18.0.3 drop\n ip daddr 198.18.0.3 drop\n }\n}\n";
    let mut nft = std::process::Command::new("nsenter")
        .args(["-t", &fabric, "-n", "--", "nft", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("nsenter nft");
    std::io::Write::write_all(&mut nft.stdin.take().unwrap(), rules.as_bytes()).unwrap();
    assert!(nft.wait().unwrap().success(), "nft refused {rules}");
}

/// R2: each node's `/etc/hosts` as Debian and Ubuntu install it (its own name on 127.0.1.1),
/// on an isolated network: rank 0's host name resolves to a loopback address node-b cannot
/// reach, so it also listens on its interface's address, which node-b's leader dials.
#[test]
fn a_job_on_nodes_with_debian_hosts_files_passes() {
    let Some(cluster) = named_cluster(Network::Isolated, HostNames::Debian) else {
        return;
    };
    let limit = Duration::from_secs(60);
    let (report, lines) = run_job(&cluster, limit, &[(BARRIERS, "20")], &mut || {});
    assert!(report.success(), "{report}\n{}", show(&lines));
    nothing_left(cluster);
}

/// R2: the same nodes with the loopback named as the interface to use: nothing node-b's
/// leader can reach, said by rank 0 and that leader at once, not after the timeout.
#[test]
fn a_loopback_only_rank_0_fails_at_once_naming_the_hosts_file() {
    let Some(cluster) = named_cluster(Network::Isolated, HostNames::Debian) else {
        return;
    };
    let limit = Duration::from_secs(60);
    let ifname = symmem::settings::SOCKET_IFNAME.name;
    let (report, lines, ready) = launch(&cluster, limit, &[(ifname, "lo")], &mut || {});
    assert_eq!(ready, 0, "{report}\n{}", show(&lines));
    assert!(!report.success(), "{report}");
    // Rank 0 and node-b's leader (the others may be ended first), each within 2 s of its
    // start where the old leader dialled its own loopback for the whole timeout.
    let said: Vec<(usize, u64)> = lines
        .iter()
        .filter_map(|l| {
            let rest = l.text.strip_prefix("join failed after ")?;
            let (ms, why) = rest.split_once(" ms: ")?;
            assert!(
                why.contains("a loopback address no other host reaches"),
                "{l}"
            );
            assert!(why.contains("/etc/hosts"), "{l}");
            Some((l.rank?, ms.parse().ok()?))
        })
        .collect();
    assert!(
        said.iter().any(|&(rank, _)| rank == 0 || rank == LEADER_B),
        "{report}\n{}",
        show(&lines)
    );
    for (rank, ms) in said {
        assert!(
            ms < 2000,
            "rank {rank} failed after {ms} ms: {}",
            show(&lines)
        );
    }
    nothing_left(cluster);
}

/// The 2x2 job on a shared network with rank 3 (node-b, behind its leader) given the fault
/// `kind` (`panic`, `return`); `None` where the cluster is skipped.
fn rank_3_faults(kind: &str) -> Option<(Cluster, RunReport, Vec<OutputLine>)> {
    let cluster = cluster(Network::Shared)?;
    let fault = format!("{kind}@{LAST_B}");
    let (report, lines) = run_job(
        &cluster,
        Duration::from_secs(60),
        &[(FAULT, &fault)],
        &mut || {},
    );
    eprintln!("{report}");
    Some((cluster, report, lines))
}

/// M1: rank 3, on node-b behind its leader, panics mid-run (status 101).
#[test]
fn a_rank_of_node_b_that_panics_is_named_and_the_others_are_witnesses() {
    let Some((cluster, report, lines)) = rank_3_faults("panic") else {
        return;
    };
    assert_eq!(
        report.outcome,
        Outcome::RankFailed {
            rank: LAST_B,
            how: Ended::Exited(101)
        },
        "{report}\n{}",
        show(&lines)
    );
    assert_eq!(report.culprit_node.as_deref(), Some("node-b"), "{report}");
    others_are_witnesses(&report, LAST_B);
    witnesses_lost(&lines, &[0, 1, 2], "rank 3 on node node-b was lost");
    nothing_left(cluster);
}

/// M1: rank 3, on node-b behind its leader, returns without finishing its barriers: its
/// process exits 0 while the others still need it.
#[test]
fn a_rank_of_node_b_that_returns_early_is_named_and_the_others_are_witnesses() {
    let Some((cluster, report, lines)) = rank_3_faults("return") else {
        return;
    };
    match &report.outcome {
        Outcome::PeerLost {
            culprits,
            reason: Lost::ExitedEarly,
            ..
        } => assert_eq!(culprits, &[LAST_B], "{report}"),
        _ => panic!(
            "rank 3 is not named as leaving early: {report}\n{}",
            show(&lines)
        ),
    }
    assert_eq!(report.culprit_node.as_deref(), Some("node-b"), "{report}");
    others_are_witnesses(&report, LAST_B);
    witnesses_lost(&lines, &[0, 1, 2], "rank 3 on node node-b was lost");
    nothing_left(cluster);
}

/// Three nodes of two ranks, their leaders in a chain (fan-out 1): node-a's leader (rank 0)
/// at the root, node-b's (rank 2) in the middle, node-c's (rank 4) below it. Once every rank
/// is ready, `fault` runs once.
fn run_chain(
    barriers: Option<&str>,
    fault: &mut dyn FnMut(&Cluster),
) -> Option<(Cluster, RunReport, Vec<OutputLine>)> {
    run_chain_on(Network::Shared, barriers, fault)
}

/// [`run_chain`] on `network`.
fn run_chain_on(
    network: Network,
    barriers: Option<&str>,
    fault: &mut dyn FnMut(&Cluster),
) -> Option<(Cluster, RunReport, Vec<OutputLine>)> {
    let cluster = cluster_of(3, network, HostNames::Addresses)?;
    let mut env = vec![(symmem::settings::CONTROL_FANOUT.name, "1")];
    if let Some(barriers) = barriers {
        env.push((BARRIERS, barriers));
    }
    let limit = Duration::from_secs(60);
    let (report, lines, ready) = launch_on(&cluster, 3, limit, &env, &mut || fault(&cluster));
    assert_eq!(ready, 6, "{report}\n{}", show(&lines));
    Some((cluster, report, lines))
}

/// Issue 44: the leaders in a tree of three levels (a chain) run a job to its end.
#[test]
fn a_job_whose_leaders_form_a_chain_of_three_nodes_passes() {
    let Some((cluster, report, lines)) = run_chain(Some("200"), &mut |_| {}) else {
        return;
    };
    assert!(report.success(), "{report}\n{}", show(&lines));
    nothing_left(cluster);
}

/// Issue 44: kill -9 of the leader in the middle of the tree (node-b's): the ranks above it
/// name it with its node, and the report names it alone.
#[test]
fn kill_9_of_the_leader_in_the_middle_of_the_tree_is_named() {
    let Some((cluster, report, lines)) = run_chain(None, &mut |cluster| {
        let (node, _) = cluster.signal_rank(LEADER_B, Signal::SIGKILL).unwrap();
        assert_eq!(node, "node-b");
    }) else {
        return;
    };
    assert_eq!(
        report.outcome,
        Outcome::RankFailed {
            rank: LEADER_B,
            how: Ended::Signaled(9)
        },
        "{report}\n{}",
        show(&lines)
    );
    node_a_lost(&lines, "rank 2 on node node-b was lost");
    // Below it, node-c's ranks may name it (their link up closed) or, once mpirun ends the job
    // at rank 2's death, their own leader: no claim on their lines (nodes.rs's threads test
    // checks what the leaders below say).
    nothing_left(cluster);
}

/// Issue 44: node-b, in the middle of the tree, cut off the network for good: the ranks above
/// it name its leader, which never arrived, the report names it alone (never node-c's), and
/// the job ends by itself well inside the launcher's limit.
#[test]
fn a_partition_of_the_node_in_the_middle_of_the_tree_names_its_leader() {
    if let Err(e) = std::process::Command::new("nft").arg("--version").output() {
        return skip(format!("nft (Debian package nftables) cannot run: {e}"));
    }
    let mut cut_at = None;
    let Some((cluster, report, lines)) = run_chain_on(Network::Isolated, None, &mut |cluster| {
        cut_off_node_b(cluster);
        cut_at = Some(Instant::now());
    }) else {
        return;
    };
    let after_cut = cut_at.expect("the cut was made").elapsed();
    eprintln!("after the cut, the job ended in {after_cut:?}: {report}");
    assert!(!report.success(), "{report}");
    assert!(
        !matches!(report.outcome, Outcome::TimedOut { .. }),
        "the launcher's limit ended the job: {report}\n{}",
        show(&lines)
    );
    node_a_lost(&lines, "rank 2 never arrived");
    // The report names the cut-off leader alone. Node-c's ranks, behind it, say nothing that
    // counts: the cut keeps the verdict from them, and mpirun ends them (their leader first)
    // once node-a's ranks exit.
    stopped_leader_b_named_alone(&report, &lines);
    nothing_left(cluster);
}

/// Issue 44: SIGSTOP of the leader in the middle of the tree: named alone, not the leader
/// below it (whose node arrived) nor the ranks behind either.
#[test]
fn sigstop_of_the_leader_in_the_middle_of_the_tree_names_it_alone() {
    let Some((cluster, report, lines)) = run_chain(None, &mut |cluster| {
        cluster.signal_rank(LEADER_B, Signal::SIGSTOP).unwrap();
    }) else {
        return;
    };
    stopped_leader_b_named_alone(&report, &lines);
    node_a_lost(&lines, "rank 2 never arrived");
    nothing_left(cluster);
}

//! `torchrun --nnodes 2` across two emulated nodes: one torchrun per node, its c10d rendezvous
//! at node-a's address, ranks that meet through torch.distributed's group (symmem's Python
//! package, crates/symmem-py/tests/ranks/torch_group.py), with no symmem launcher anywhere.
//!
//! Needs a Python with torch and the symmem wheel installed: `crates/symmem-py/ci.sh` runs it
//! with its venv (`SYMMEM_TEST_PYTHON`), hence `#[ignore]` in a plain `cargo test`.

mod common;

use common::cluster;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;
use symmem_cluster::Cluster;

const PYTHON: &str = "SYMMEM_TEST_PYTHON";

/// The rank script (and the helpers it imports) as the nodes see them: copied into the
/// cluster's shared folder where the checkout is under a folder each node has of its own.
fn script(cluster: &Cluster) -> PathBuf {
    let ranks = Path::new(env!("CARGO_MANIFEST_DIR")).join("../symmem-py/tests/ranks");
    cluster.visible(&ranks.join("common.py")).unwrap();
    cluster.visible(&ranks.join("torch_group.py")).unwrap()
}

/// A port free on node-a's address now (the nodes share this machine's network).
fn free_port(cluster: &Cluster) -> u16 {
    let listener = std::net::TcpListener::bind((cluster.nodes()[0].address(), 0)).unwrap();
    listener.local_addr().unwrap().port()
}

/// One node's torchrun: `nodes` nodes of `per_node` ranks, node-a hosting the rendezvous.
fn torchrun(
    cluster: &Cluster,
    python: &Path,
    node: usize,
    (per_node, port): (usize, u16),
    log: &Path,
) -> Child {
    let nodes = cluster.nodes();
    let endpoint = format!("{}:{port}", nodes[0].address());
    let script = script(cluster);
    let out = std::fs::File::create(log).unwrap();
    let mut command = cluster.on_node(&nodes[node]);
    command
        .arg(python)
        .args(["-m", "torch.distributed.run"])
        .arg(format!("--nnodes={}", nodes.len()))
        .arg(format!("--nproc-per-node={per_node}"))
        .args(["--rdzv-backend=c10d", "--rdzv-id=symmem-torchrun-test"])
        .arg(format!("--rdzv-endpoint={endpoint}"))
        // On one machine every node's address is local: say which node hosts the store.
        .arg(format!("--rdzv-conf=is_host={}", u8::from(node == 0)))
        .args(["--max-restarts=0", "--monitor-interval=0.2"])
        .arg(script)
        .env("PYTHONUNBUFFERED", "1")
        .env("SYMMEM_HOST_HEAP_SIZE", "64M")
        .env_remove("SYMMEM_RENDEZVOUS")
        .env_remove("SYMMEM_NODE_ID")
        .stdout(out.try_clone().unwrap())
        .stderr(out);
    command.spawn().expect("starting torchrun on a node")
}

#[test]
#[ignore = "needs a Python with torch and symmem: crates/symmem-py/ci.sh runs it (SYMMEM_TEST_PYTHON)"]
fn torchrun_across_two_nodes_meets_through_the_group() {
    let python = PathBuf::from(std::env::var_os(PYTHON).unwrap_or_else(|| {
        panic!("{PYTHON} names the Python with torch and symmem installed (crates/symmem-py/ci.sh)")
    }));
    let Some(cluster) = cluster(2) else { return };
    let python = cluster.on_nodes(&python).unwrap_or_else(|e| {
        panic!("{e}: the venv must be where the nodes see it (crates/symmem-py/ci.sh puts it outside /tmp)")
    });
    let logs = tempfile::tempdir().unwrap();
    let per_node = 2;
    let (log_a, log_b) = (
        logs.path().join("node-a.log"),
        logs.path().join("node-b.log"),
    );
    let job = (per_node, free_port(&cluster));
    let mut a = torchrun(&cluster, &python, 0, job, &log_a);
    let mut b = torchrun(&cluster, &python, 1, job, &log_b);
    let limit = Duration::from_secs(180);
    let status_a = symmem_test_support::command::wait_or_kill(&mut a, limit);
    let status_b = symmem_test_support::command::wait_or_kill(&mut b, limit);
    let (out_a, out_b) = (
        std::fs::read_to_string(&log_a).unwrap(),
        std::fs::read_to_string(&log_b).unwrap(),
    );
    let show = format!("--- node-a\n{out_a}\n--- node-b\n{out_b}");
    assert!(
        status_a.is_some_and(|s| s.success()) && status_b.is_some_and(|s| s.success()),
        "node-a {status_a:?}, node-b {status_b:?}\n{show}"
    );
    let passes = |out: &str| -> Vec<String> {
        out.lines()
            .filter(|l| l.contains("PASS torch group meet"))
            .map(|l| {
                l.split(": PASS")
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_string()
            })
            .collect()
    };
    let mut ranks: Vec<String> = passes(&out_a).into_iter().chain(passes(&out_b)).collect();
    ranks.sort();
    let want: Vec<String> = (0..2 * per_node).map(|r| format!("rank {r}/4")).collect();
    assert_eq!(ranks, want, "every rank of both nodes passed\n{show}");
    common::down(cluster);
}

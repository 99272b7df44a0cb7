//! The topology the Unix star gathers at its handshake: every rank's emulated node, the same
//! numbers on every rank, and a rank 0 that gives up before everyone joined named as the
//! culprit on the others (they are witnesses).

use std::path::Path;
use std::time::Duration;
use symmem::{Blame, Engine, ProviderError, Topology};
use symmem_bootstrap::{Bootstrap, BootstrapError};

/// Joins `nodes.len()` ranks in threads, rank `r` on emulated node `nodes[r]`.
fn join_all(dir: &Path, nodes: &[u64], timeout: Duration) -> Vec<Result<Topology, BootstrapError>> {
    std::thread::scope(|scope| {
        let joins: Vec<_> = nodes
            .iter()
            .enumerate()
            .map(|(rank, &node)| {
                scope.spawn(move || {
                    Bootstrap::open(Engine::Unix, rank, nodes.len(), node, dir, timeout)
                        .map(|b| b.topology().clone())
                })
            })
            .collect();
        joins.into_iter().map(|j| j.join().unwrap()).collect()
    })
}

#[test]
fn every_rank_holds_the_same_topology_for_any_layout() {
    let cases: [(&[u64], &[u64]); 4] = [
        (&[5, 5, 5, 9], &[0, 0, 0, 1]),
        (&[9, 5, 5, 5], &[0, 1, 1, 1]),
        (&[0, 0, 1, 1, 2, 2, 3, 3], &[0, 0, 1, 1, 2, 2, 3, 3]),
        (&[4, 0, 4], &[0, 1, 0]),
    ];
    for (emulated, numbered) in cases {
        let dir = tempfile::tempdir().unwrap();
        for topology in join_all(dir.path(), emulated, Duration::from_secs(10)) {
            let topology = topology.unwrap();
            assert_eq!(topology.nodes(), numbered, "{emulated:?}");
            assert!(topology.single_host() && !topology.single_node());
        }
    }
}

#[test]
fn a_rank_0_that_gives_up_is_named_by_the_ranks_that_joined() {
    let dir = tempfile::tempdir().unwrap();
    let timeout = Duration::from_millis(500);
    // Rank 2 of 3 never comes.
    let (root, leaf) = std::thread::scope(|scope| {
        let root = scope.spawn(|| Bootstrap::open(Engine::Unix, 0, 3, 0, dir.path(), timeout));
        let leaf = scope.spawn(|| Bootstrap::open(Engine::Unix, 1, 3, 0, dir.path(), timeout));
        (root.join().unwrap(), leaf.join().unwrap())
    });
    let root = root.err().expect("rank 2 never came");
    assert!(
        matches!(&root, BootstrapError::AcceptTimeout { missing, .. } if missing == &[2]),
        "{root}"
    );
    let leaf = leaf.err().expect("no welcome without rank 2");
    assert!(matches!(leaf, BootstrapError::RootGaveUp), "{leaf}");
    assert_eq!(leaf.blame(), Blame::AnotherRank);
    assert!(leaf.to_string().contains("see rank 0's output"), "{leaf}");
}

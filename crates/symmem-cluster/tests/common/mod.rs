//! What the cluster tests share: bringing nodes up (or skipping), and checking that nothing of
//! a cluster is left once it is down.

#![allow(dead_code)]

use std::path::Path;
use symmem_cluster::{Cluster, ClusterError};

/// Prints "SKIPPED: why", or fails under `CI=true`, where everything the tests need is
/// installed (`.ci/cluster`) and they run as root.
pub fn skip(why: impl std::fmt::Display) {
    assert!(
        std::env::var_os("CI").is_none_or(|v| v.is_empty()),
        "under CI this must not skip: {why}"
    );
    eprintln!("SKIPPED: {why}");
}

/// `nodes` nodes, or `None` (skipped) without root or the tools.
pub fn cluster(nodes: usize) -> Option<Cluster> {
    match Cluster::up(nodes) {
        Ok(cluster) => Some(cluster),
        Err(e @ (ClusterError::NotRoot | ClusterError::ToolMissing { .. })) => {
            skip(e);
            None
        }
        Err(e) => panic!("{e}"),
    }
}

/// State and start time of a process (the one `/proc` reader, `symmem_launch::procfs`).
pub fn state_and_start(pid: u32) -> Option<(char, u64)> {
    symmem_launch::procfs::stat(pid as i32).map(|s| (s.state, s.start_time))
}

/// Every process on the nodes, holders included, as (pid, start time): taken while the
/// nodes are up (their namespaces alive, so their names are theirs alone).
pub fn snapshot(namespaces: &[String]) -> Vec<(u32, u64)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/ns/mnt"))
                .is_ok_and(|l| namespaces.iter().any(|ns| l.to_string_lossy() == *ns))
        })
        .filter_map(|pid| Some((pid, state_and_start(pid)?.1)))
        .collect()
}

/// After the cluster is down: none of the processes it had still runs (a zombie that this
/// machine's init has not reaped yet does not run), no mount of the cluster's folder is on
/// this machine and the folder is removed.
pub fn assert_gone(before: &[(u32, u64)], folder: &Path) {
    assert!(
        !before.is_empty(),
        "the snapshot holds at least the holders"
    );
    let running: Vec<String> = before
        .iter()
        .filter(|(pid, start)| {
            state_and_start(*pid).is_some_and(|(state, now)| now == *start && state != 'Z')
        })
        .map(|(pid, _)| {
            std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                .unwrap_or_default()
                .replace('\0', " ")
        })
        .collect();
    assert!(running.is_empty(), "still running: {running:?}");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let name = folder.to_string_lossy();
    assert!(
        !mounts.contains(name.as_ref()),
        "a mount of {name} is left:\n{mounts}"
    );
    assert!(!folder.exists(), "{} is left", folder.display());
}

pub fn namespaces(cluster: &Cluster) -> Vec<String> {
    cluster
        .nodes()
        .iter()
        .map(|n| n.mount_namespace().to_string())
        .collect()
}

/// Tears `cluster` down: nothing may still run on it then, and nothing of it may be left.
pub fn down(cluster: Cluster) {
    let before = snapshot(&namespaces(&cluster));
    let folder = cluster.folder().to_path_buf();
    let teardown = cluster.down();
    assert!(
        teardown.killed.is_empty(),
        "still running at teardown: {:?}",
        teardown.killed
    );
    assert_gone(&before, &folder);
}

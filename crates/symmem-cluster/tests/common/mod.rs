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

/// State and start time of a process (the one `/proc` reader, `symmem_process::procfs`).
pub fn state_and_start(pid: u32) -> Option<(char, u64)> {
    symmem_process::procfs::stat(pid as i32).map(|s| (s.state, s.start_time))
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

/// A cluster's owner started as a copy of this test binary running the ignored test `test`
/// with `var=value`, which prints `ready FOLDER NS...` once its job runs and then waits to be
/// killed.
pub struct Owner {
    child: std::process::Child,
    /// The cluster's temp folder.
    pub folder: std::path::PathBuf,
    /// Its nodes' mount namespaces.
    pub namespaces: Vec<String>,
}

impl Owner {
    /// Starts the owner and waits for its `ready` line (panics if it ends first).
    pub fn start(test: &str, var: &str, value: &str) -> Self {
        use std::io::BufRead;
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", test, "--include-ignored", "--nocapture"])
            .env(var, value)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        let ready = out
            .lines()
            .map_while(Result::ok)
            .find(|l| l.starts_with("ready "));
        let Some(ready) = ready else {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("the owner never reported its cluster");
        };
        let mut words = ready.split_whitespace().skip(1);
        let folder = std::path::PathBuf::from(words.next().unwrap());
        let namespaces = words.map(str::to_string).collect();
        Self {
            child,
            folder,
            namespaces,
        }
    }

    /// Kills the owner with 9 and checks that its watchdog leaves nothing of what `before`
    /// (a [`snapshot`] of its nodes) held, within a bounded wait.
    pub fn kill_and_check(mut self, before: &[(u32, u64)]) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while self.folder.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert_gone(before, &self.folder);
    }
}

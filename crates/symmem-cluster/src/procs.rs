//! Processes by node (mount namespace), from `/proc` through `symmem_process::procfs`.

use std::fmt;
use std::time::{Duration, Instant};

use symmem_process::procfs;

/// A process seen in `/proc`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Process {
    pub pid: u32,
    pub parent: u32,
    /// Its command line, arguments joined by spaces.
    pub command: String,
}

impl fmt::Display for Process {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pid {} ({})", self.pid, self.command)
    }
}

/// What a sweep needs of a node, owned (a sweep may outlive the borrow of the cluster).
#[derive(Clone, Debug)]
pub(crate) struct NodeRef {
    pub(crate) name: String,
    pub(crate) holder: u32,
    pub(crate) mount_ns: String,
}

/// Which processes of a node a sweep leaves alone (the holders always): none, or the
/// daemons a cluster runs for its launcher (Slurm's).
pub(crate) type Spare = fn(&Process) -> bool;

/// Spares nothing.
pub(crate) fn spare_none(_: &Process) -> bool {
    false
}

impl NodeRef {
    /// Processes in the node's namespaces other than its holder.
    pub(crate) fn processes(&self) -> Vec<Process> {
        in_mount_ns(&self.mount_ns)
            .into_iter()
            .filter(|p| p.pid != self.holder)
            .collect()
    }

    /// [`NodeRef::processes`] but those `spare` names.
    pub(crate) fn sweepable(&self, spare: Spare) -> Vec<Process> {
        let mut procs = self.processes();
        procs.retain(|p| !spare(p));
        procs
    }
}

/// Kills every process on `nodes` but the holders, and waits (at most `within`) until they
/// are gone. Returns them with their node.
pub(crate) fn sweep(nodes: &[NodeRef], within: Duration) -> Vec<(String, Process)> {
    sweep_sparing(nodes, within, spare_none)
}

/// [`sweep`], leaving alone what `spare` names.
pub(crate) fn sweep_sparing(
    nodes: &[NodeRef],
    within: Duration,
    spare: Spare,
) -> Vec<(String, Process)> {
    let mut killed: Vec<(String, Process)> = Vec::new();
    let deadline = Instant::now() + within;
    loop {
        let mut any = false;
        for node in nodes {
            for p in node.sweepable(spare) {
                any = true;
                let pid = nix::unistd::Pid::from_raw(p.pid as i32);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                if !killed.iter().any(|(_, k)| k.pid == p.pid) {
                    killed.push((node.name.clone(), p));
                }
            }
        }
        if !any || Instant::now() >= deadline {
            return killed;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn read(pid: i32) -> Option<Process> {
    let stat = procfs::stat(pid)?;
    Some(Process {
        pid: pid as u32,
        parent: stat.ppid as u32,
        command: procfs::command_line(pid),
    })
}

/// Live processes whose mount namespace is `ns` (as `readlink /proc/PID/ns/mnt` names it).
pub(crate) fn in_mount_ns(ns: &str) -> Vec<Process> {
    procfs::pids()
        .into_iter()
        .filter(|&pid| procfs::mount_namespace(pid).as_deref() == Some(ns))
        .filter(|&pid| !procfs::gone(pid))
        .filter_map(read)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let me = read(std::process::id() as i32).expect("this process is in /proc");
        assert_eq!(me.parent, std::os::unix::process::parent_id());
        assert!(!me.command.is_empty());
        let ns = std::fs::read_link("/proc/self/ns/mnt").unwrap();
        let mine = in_mount_ns(&ns.to_string_lossy());
        assert!(mine.iter().any(|p| p.pid == std::process::id()));
    }
}

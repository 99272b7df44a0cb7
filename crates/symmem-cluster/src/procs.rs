//! Processes by namespace, from `/proc`.

use std::fmt;

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

fn read(pid: u32) -> Option<Process> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
    let after = &stat[stat.rfind(')')? + 1..];
    let parent = after.split_whitespace().nth(1)?.parse().ok()?;
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let command = raw
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    Some(Process {
        pid,
        parent,
        command,
    })
}

fn pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Processes whose mount namespace is `ns` (as `readlink /proc/PID/ns/mnt` names it).
pub(crate) fn in_mount_ns(ns: &str) -> Vec<Process> {
    pids()
        .into_iter()
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/ns/mnt"))
                .is_ok_and(|link| link.as_os_str() == ns)
        })
        .filter_map(read)
        .collect()
}

/// The value of `name` in the environment of `pid`, if it has one.
pub(crate) fn env_of(pid: u32, name: &str) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    raw.split(|&b| b == 0).find_map(|entry| {
        let text = std::str::from_utf8(entry).ok()?;
        let (key, value) = text.split_once('=')?;
        (key == name).then(|| value.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let me = read(std::process::id()).expect("this process is in /proc");
        assert_eq!(me.parent, std::os::unix::process::parent_id());
        assert!(!me.command.is_empty());
        let ns = std::fs::read_link("/proc/self/ns/mnt").unwrap();
        let mine = in_mount_ns(&ns.to_string_lossy());
        assert!(mine.iter().any(|p| p.pid == std::process::id()));
        assert_eq!(
            env_of(std::process::id(), "PATH"),
            std::env::var("PATH").ok()
        );
    }
}

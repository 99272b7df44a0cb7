//! The one reader of `/proc/<pid>/stat` (and of the few other `/proc` files the house reads):
//! the group stop of this crate, the launcher's leftover checks, the emulated cluster's
//! per-node processes and the tests' "is it gone" all ask here, so they agree on what a dead
//! process is.

use std::path::Path;

/// The fields of `/proc/<pid>/stat` the house reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// The state letter (`R`, `S`, `Z`, ...).
    pub state: char,
    /// The parent's pid.
    pub ppid: i32,
    /// The process group.
    pub pgrp: i32,
    /// The kernel's task flags (field 9).
    pub flags: u64,
    /// Start time after boot, in clock ticks (field 22): with the pid, names one process.
    pub start_time: u64,
}

impl Stat {
    /// Whether the process is dead: a zombie (`Z`) or being freed (`X`, `x`). A zombie holds
    /// nothing any more, and an orphan's zombie may never be reaped in a container.
    pub fn dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// `/proc/<pid>/stat`, or `None` once the process is gone.
pub fn stat(pid: i32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Parses the text of a `/proc/<pid>/stat`. The command name is in parentheses and may hold
/// spaces and parentheses, so the fields are split after the last `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let mut fields = text[text.rfind(')')? + 1..].split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    // session, tty_nr, tpgid, then flags.
    let flags = fields.nth(3)?.parse().ok()?;
    // minflt .. starttime: the 13th field after flags.
    let start_time = fields.nth(12)?.parse().ok()?;
    Some(Stat {
        state,
        ppid,
        pgrp,
        flags,
        start_time,
    })
}

/// Whether `pid` is gone or dead (see [`Stat::dead`]).
pub fn gone(pid: i32) -> bool {
    stat(pid).is_none_or(|s| s.dead())
}

/// Every pid in `/proc` now (empty without `/proc`).
pub fn pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The command line of `pid`, its words joined by spaces (empty once it is gone).
pub fn command_line(pid: i32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    raw.split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The value of `name` in the environment of `pid`, if it has one (and it can be read).
pub fn env_var(pid: i32, name: &str) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    raw.split(|&b| b == 0).find_map(|entry| {
        let text = std::str::from_utf8(entry).ok()?;
        let (key, value) = text.split_once('=')?;
        (key == name).then(|| value.to_string())
    })
}

/// Whether `/proc/<pid>/environ` holds exactly the entry `entry` (`NAME=value`).
pub fn carries(pid: i32, entry: &[u8]) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|env| env.split(|&b| b == 0).any(|e| e == entry))
}

/// The mount namespace of `pid` as `readlink /proc/<pid>/ns/mnt` names it (`mnt:[4026...]`).
pub fn mount_namespace(pid: i32) -> Option<String> {
    std::fs::read_link(Path::new("/proc").join(pid.to_string()).join("ns/mnt"))
        .ok()
        .map(|link| link.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_names() {
        let stat = "4242 (a) b (c) S 1 4200 4200 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 777 0";
        let s = parse_stat(stat).expect("parses");
        assert_eq!((s.state, s.ppid, s.pgrp), ('S', 1, 4200));
        assert_eq!((s.flags, s.start_time), (4194560, 777));
        assert!(!s.dead());
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) R 1 2"), None);
    }

    #[test]
    fn reads_this_process() {
        let me = std::process::id() as i32;
        let s = stat(me).expect("this process is in /proc");
        assert_eq!(s.ppid as u32, std::os::unix::process::parent_id());
        assert!(!gone(me) && pids().contains(&me));
        assert!(!command_line(me).is_empty());
        assert_eq!(env_var(me, "PATH"), std::env::var("PATH").ok());
        let ns = std::fs::read_link("/proc/self/ns/mnt").expect("ns");
        assert_eq!(mount_namespace(me), Some(ns.to_string_lossy().into_owned()));
    }
}

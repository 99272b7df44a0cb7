//! The watchdog: what ends the nodes when their owner dies without tearing them down (a
//! `kill -9`, an abort). A shell process in its own session (so the terminal's Ctrl-C does
//! not reach it), reading the nodes' mount namespaces from a pipe that only the owner holds.
//! `clean` on the pipe (a normal teardown) ends it at once; the end of the pipe without it
//! (the owner is gone) makes it kill every process in those namespaces and remove the
//! cluster's folder.

use crate::ClusterError;
use std::io::Write;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};

const SCRIPT: &str = r#"
root=$1
set --
while IFS= read -r line; do
  case "$line" in
    clean) exit 0 ;;
    node\ *) set -- "$@" "${line#node }" ;;
  esac
done
# Whether the holder still lives in its node's namespace.
holds() { [ "$(readlink "/proc/$holder/ns/mnt" 2>/dev/null)" = "$ns" ]; }
# Each line: the node's holder pid and its mount namespace. The holder is killed last: while it
# lives, the namespace does, so its name cannot be reused by anyone else's.
for node in "$@"; do
  holder=${node%% *}
  ns=${node#* }
  n=0
  while [ "$n" -lt 100 ] && holds; do
    found=
    for p in /proc/[0-9]*; do
      pid=${p#/proc/}
      [ "$pid" = "$holder" ] && continue
      if [ "$(readlink "$p/ns/mnt" 2>/dev/null)" = "$ns" ]; then
        kill -9 "$pid" 2>/dev/null
        found=1
      fi
    done
    [ -z "$found" ] && break
    n=$((n + 1))
    sleep 0.05
  done
  holds && kill -9 "$holder" 2>/dev/null
  # A kill -9 lands when the kernel next runs the process: wait (5 s at most) until the holder
  # has left its namespace, so that the root's removal below means every process is gone.
  n=0
  while [ "$n" -lt 100 ] && holds; do
    n=$((n + 1))
    sleep 0.05
  done
done
rm -rf -- "$root"
"#;

#[derive(Debug)]
pub(crate) struct Watchdog {
    child: Child,
    feed: Option<ChildStdin>,
}

impl Watchdog {
    pub(crate) fn start(root: &Path) -> Result<Self, ClusterError> {
        let mut command = Command::new("/bin/sh");
        command
            .args(["-c", SCRIPT, "symmem-cluster-watchdog"])
            .arg(root)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        symmem_process::new_session(&mut command);
        let mut child = command.spawn().map_err(ClusterError::io(
            "starting the cluster's watchdog (/bin/sh)",
        ))?;
        let feed = child.stdin.take();
        Ok(Self { child, feed })
    }

    /// From now on, a death of the owner ends every process in mount namespace `ns`, and
    /// `holder` (whose namespace it is) last.
    pub(crate) fn watch(&mut self, holder: u32, ns: &str) -> Result<(), ClusterError> {
        let feed = self
            .feed
            .as_mut()
            .expect("the watchdog's pipe is open until drop");
        writeln!(feed, "node {holder} {ns}")
            .and_then(|()| feed.flush())
            .map_err(ClusterError::io(
                "telling the cluster's watchdog about a node",
            ))
    }

    /// The owner tore everything down: the watchdog ends without doing anything.
    pub(crate) fn stand_down(&mut self) {
        if let Some(mut feed) = self.feed.take() {
            let _ = writeln!(feed, "clean").and_then(|()| feed.flush());
        }
        let _ = self.child.wait();
    }
}

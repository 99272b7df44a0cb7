//! What ends a run when the launcher cannot: a small `/bin/sh` process started next to the
//! ranks that waits on a pipe from the launcher. If the launcher dies without saying the run is
//! over (even by `kill -9`, when none of its own code runs), the pipe reaches end-of-file and
//! the watchdog kills the ranks' process group and every process that carries the run's id in
//! its environment (so also those that left the group with `setsid`), then removes the
//! rendezvous folder the launcher made. The ranks themselves already die with the launcher
//! (`PR_SET_PDEATHSIG`); their children do not.
//!
//! A shell, not a fork of the launcher: after `fork` a multi-threaded process may only make
//! async-signal-safe calls, and walking `/proc` and removing a folder are not among them.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::LaunchError;

/// `$1` = run id, `$2` = folder to remove ("" for none), `$3` = the name of the variable
/// carrying the run id ([`RUN_ID`](symmem::settings::RUN_ID)). Reads the ranks' process group, then
/// `done`. Ignores the terminal's signals: only the launcher's pipe tells it what to do.
const SCRIPT: &str = r#"
trap '' INT TERM HUP QUIT
IFS= read -r pgid || pgid=
[ "$pgid" = done ] && exit 0
IFS= read -r word || word=
[ "$word" = done ] && exit 0
# The launcher died during the run: end what it started, then its rendezvous folder.
for round in 1 2 3; do
  case $pgid in ''|*[!0-9]*) ;; *) kill -KILL -- "-$pgid" 2>/dev/null ;; esac
  # One grep over every process (not one per process): quick on a busy machine too.
  for environ in $(grep -lsxzF -e "$3=$1" -- /proc/[0-9]*/environ); do
    pid=${environ#/proc/}
    pid=${pid%/environ}
    [ "$pid" = $$ ] || kill -KILL "$pid" 2>/dev/null
  done
  sleep 0.2
done
[ -z "$2" ] || rm -rf -- "$2"
"#;

/// The watchdog of one run; dropping it (or [`Watchdog::disarm`]) first removes the rendezvous
/// folder it guards, then tells it the run ended cleanly.
pub(crate) struct Watchdog {
    child: Child,
    pipe: Option<ChildStdin>,
    folder: Option<symmem_process::TempDir>,
}

impl Watchdog {
    /// Starts the watchdog of run `run_id`, which also owns (and removes) `folder`.
    pub(crate) fn start(
        run_id: &str,
        folder: Option<symmem_process::TempDir>,
    ) -> Result<Self, LaunchError> {
        let path = folder
            .as_ref()
            .map(|d| d.path().as_os_str().to_owned())
            .unwrap_or_default();
        let mut child = Command::new("/bin/sh")
            .args(["-c", SCRIPT, "symmem-watchdog", run_id])
            .arg(path)
            .arg(symmem::settings::RUN_ID.name)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own group: a Ctrl-C to the launcher's group is the launcher's to handle.
            .process_group(0)
            .spawn()
            .map_err(LaunchError::Watchdog)?;
        let pipe = child.stdin.take();
        Ok(Self {
            child,
            pipe,
            folder,
        })
    }

    /// Its process id.
    pub(crate) fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).unwrap_or(i32::MAX)
    }

    /// Tells the watchdog the ranks' process group (once rank 0 runs).
    pub(crate) fn guard_group(&mut self, pgid: i32) {
        if let Some(pipe) = &mut self.pipe {
            // A watchdog that is gone cannot be told; the run goes on without it.
            let _ = writeln!(pipe, "{pgid}");
        }
    }

    /// How the watchdog ended if it is gone although the run has not told it "done" (a rank, or
    /// another process of the same user, ended it): `None` while it still guards the run.
    pub(crate) fn lost(&mut self) -> Option<std::process::ExitStatus> {
        // Told "done" already (disarmed): it ended as it should.
        self.pipe.as_ref()?;
        self.child.try_wait().ok().flatten()
    }

    /// The run is over and cleaned up: remove the folder, then stop the watchdog.
    pub(crate) fn disarm(&mut self) {
        if let Some(folder) = self.folder.take() {
            let _ = folder.close();
        }
        if let Some(mut pipe) = self.pipe.take() {
            let _ = writeln!(pipe, "done");
        }
        // It exits at once on "done"; do not hang on one that cannot.
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.disarm();
    }
}

/// A fresh random id for one run (128 bits from the kernel's generator).
pub(crate) fn new_run_id() -> Result<String, LaunchError> {
    let mut bytes = [0u8; 16];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").map_err(LaunchError::Watchdog)?,
        &mut bytes,
    )
    .map_err(LaunchError::Watchdog)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

//! A rank started by a PMIx launcher ends when that launcher is gone (M5).
//!
//! Its parent is the launcher's process on its node (`mpirun` on the first node, an `orted` or
//! `slurmstepd` on the others). When that process dies (`kill -9`, a crash, a lasting
//! partition that made it give up), nobody can end the rank any more, or read its output,
//! and a rank between collectives (or in none) would live on forever. So once the PMIx engine
//! is open, a thread looks every [`EVERY`] at whether the rank's parent is still the one it
//! was; when it is not, the rank says why on stderr (a terminal or a log may still read it)
//! and exits with [`EXIT_PEER_FAILED`]: something else failed, not this rank.

use std::sync::Once;
use std::time::Duration;
use symmem::EXIT_PEER_FAILED;

/// How often the parent is looked at: a few times a second costs nothing.
const EVERY: Duration = Duration::from_millis(200);

/// Starts the watch (once per process); a rank whose parent is already gone (init adopted
/// it) or that cannot start a thread is not watched.
pub(crate) fn start(rank: usize) {
    static STARTED: Once = Once::new();
    STARTED.call_once(|| {
        let parent = nix::unistd::getppid();
        if parent.as_raw() <= 1 {
            return;
        }
        let name = std::fs::read_to_string(format!("/proc/{parent}/comm"))
            .map(|n| n.trim().to_string())
            .unwrap_or_else(|_| "?".into());
        let watch = move || {
            while nix::unistd::getppid() == parent {
                std::thread::sleep(EVERY);
            }
            gone(rank, parent.as_raw(), &name);
        };
        let _ = std::thread::Builder::new()
            .name("symmem-launcher-watch".into())
            .stack_size(64 * 1024)
            .spawn(watch);
    });
}

/// The launcher is gone: say so, and end.
fn gone(rank: usize, parent: i32, name: &str) -> ! {
    use std::io::Write as _;
    // Its stderr may have been the launcher's pipe: a failed write changes nothing.
    let _ = writeln!(
        std::io::stderr(),
        "symmem: rank {rank}: its launcher's process on this node (pid {parent}, {name}) is \
         gone, so nothing can end this rank or read its output any more: it ends now with \
         status {EXIT_PEER_FAILED}; see the launcher's own log for why it ended"
    );
    std::process::exit(EXIT_PEER_FAILED)
}

//! One run at a time in an out folder, for build-shim and build-rocshmem alike: two runs in one
//! out folder would configure one build tree twice, run two ninja in it, and replace each
//! other's install. The first takes a lock file there (flock) and writes who it is (pid,
//! command, since when); the second is refused at once, naming it. The kernel drops the lock
//! when its holder's process ends, however it ends, so a lock file left by a dead run blocks no
//! one (it is never removed: unlinking a locked file would let two runs lock two files).

use anyhow::{Context, bail};
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use symmem::format_elapsed;

/// An out folder's lock, held by this process until dropped.
#[derive(Debug)]
pub struct OutLock {
    _file: File,
    path: PathBuf,
}

impl OutLock {
    /// The lock file's name for `command`'s runs (`symmem-build-shim.lock`).
    pub fn file_name(command: &str) -> String {
        format!("symmem-{command}.lock")
    }

    /// Takes `out`'s lock for a run of `command` (`build-shim`, `build-rocshmem`), making `out`
    /// if needed; refuses at once if another run holds it, naming that run and the fix. Take
    /// it before anything is written under `out`.
    pub fn take(out: &Path, command: &str) -> anyhow::Result<Self> {
        std::fs::create_dir_all(out).with_context(|| {
            format!(
                "creating {}: pass an --out-dir you can write to",
                out.display()
            )
        })?;
        let path = out.join(Self::file_name(command));
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| {
                format!(
                    "opening {}: pass an --out-dir you can write to",
                    path.display()
                )
            })?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let holder = std::fs::read_to_string(&path).unwrap_or_default();
                bail!(
                    "another {command} is building in {} ({}): wait for it to finish, or pass \
                     another --out-dir",
                    out.display(),
                    describe_holder(&holder)
                );
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| {
                    format!(
                        "locking {}: check that its file system supports flock, or pass \
                         another --out-dir",
                        path.display()
                    )
                });
            }
        }
        let command_line: Vec<String> = std::env::args().collect();
        file.set_len(0)
            .and_then(|()| {
                write!(
                    file,
                    "pid = {}\ncommand = {}\nsince = {}\n",
                    std::process::id(),
                    crate::runner::shell_words(&command_line).replace('\n', " "),
                    now_secs()
                )
            })
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(Self { _file: file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// "pid 123, `xtask build-shim ...`, for 42.0s" from a lock file's text.
fn describe_holder(text: &str) -> String {
    let field = |name: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(" = ")?;
            (k == name).then(|| v.trim().to_string())
        })
    };
    let (Some(pid), Some(command), Some(since)) = (field("pid"), field("command"), field("since"))
    else {
        return "its lock file does not say which".into();
    };
    let now = now_secs();
    let held = now.saturating_sub(since.parse().unwrap_or(now));
    format!(
        "pid {pid}, `{command}`, for {}",
        format_elapsed(Duration::from_secs(held))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A held lock refuses a second taker (another open file, as another process has) with
    /// the holder and the fix; once dropped, or when the file names a run that is gone, it is
    /// free.
    #[test]
    fn a_held_lock_names_its_holder_and_a_released_one_is_free() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let held = OutLock::take(&out, "build-rocshmem").unwrap();
        assert_eq!(held.path(), out.join("symmem-build-rocshmem.lock"));
        let e = OutLock::take(&out, "build-rocshmem")
            .unwrap_err()
            .to_string();
        for part in [
            format!("another build-rocshmem is building in {}", out.display()),
            format!("pid {}, `", std::process::id()),
            "`, for ".into(),
            "wait for it to finish, or pass another --out-dir".into(),
        ] {
            assert!(e.contains(&part), "`{part}` not in {e}");
        }
        // Another command's lock is another file.
        drop(OutLock::take(&out, "build-shim").unwrap());
        drop(held);
        // The file stays, naming the run that held it: it blocks no one.
        let text = std::fs::read_to_string(out.join("symmem-build-rocshmem.lock")).unwrap();
        assert!(
            text.contains(&format!("pid = {}", std::process::id())),
            "{text}"
        );
        OutLock::take(&out, "build-rocshmem").unwrap();
    }

    #[test]
    fn a_lock_file_without_its_fields_says_so() {
        assert_eq!(describe_holder(""), "its lock file does not say which");
        let now = now_secs();
        let text = format!(
            "pid = 7\ncommand = xtask build-shim\nsince = {}\n",
            now - 42
        );
        let said = describe_holder(&text);
        assert!(
            said.starts_with("pid 7, `xtask build-shim`, for 4"),
            "{said}"
        );
    }
}

//! The rocSHMEM source: a shallow, sparse fetch of exactly the pinned commit, or a local
//! checkout checked against the pin.

use crate::pins::RocshmemPin;
use anyhow::{Context, bail};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::process::Command;

/// Where a fetch lands before its HEAD is checked and it moves to `checkout`.
pub fn partial_dir(checkout: &Path) -> std::path::PathBuf {
    let name = checkout
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    checkout.with_file_name(format!(".{name}.partial"))
}

/// The git commands that fetch `pin` into `dest` (run in order).
pub fn fetch_commands(git: &Path, pin: &RocshmemPin, dest: &Path) -> Vec<Vec<String>> {
    let git = git.display().to_string();
    let d = dest.display().to_string();
    let at = |args: &[&str]| -> Vec<String> {
        [git.as_str(), "-C", d.as_str()]
            .iter()
            .chain(args)
            .map(|s| s.to_string())
            .collect()
    };
    vec![
        vec![git.clone(), "init".into(), "--quiet".into(), d.clone()],
        // `--`: whatever the pins say, git takes it as the URL, never as an option.
        at(&["remote", "add", "--", "origin", &pin.repository]),
        // Only the library's folder is checked out (the monorepo is large).
        at(&["sparse-checkout", "set", &pin.subdirectory]),
        at(&[
            "fetch",
            "--quiet",
            "--depth",
            "1",
            "--filter=blob:none",
            "origin",
            &pin.commit,
        ]),
        at(&["checkout", "--quiet", "--detach", "FETCH_HEAD"]),
    ]
}

fn git_out(git: &Path, repo: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(git)
        .arg("-C")
        .arg(repo)
        .args(args)
        .output()
        .with_context(|| format!("running git {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "git {} in {} failed: {}",
            args.join(" "),
            repo.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// What a local checkout holds compared with the pin.
pub struct LocalState {
    pub head: String,
    /// `git status --porcelain` output; empty when clean.
    pub changes: String,
}

impl LocalState {
    pub fn read(git: &Path, root: &Path) -> anyhow::Result<Self> {
        if !root.join(".git").exists() {
            bail!(
                "--source {} is not a git checkout (no .git): clone the pinned repository there",
                root.display()
            );
        }
        Ok(Self {
            head: git_out(git, root, &["rev-parse", "HEAD"])?,
            changes: git_out(
                git,
                root,
                &["status", "--porcelain", "--untracked-files=normal"],
            )?,
        })
    }

    /// Why this checkout is not the pin, if it is not.
    pub fn mismatch(&self, pin: &RocshmemPin) -> Option<String> {
        let mut why = Vec::new();
        if self.head != pin.commit {
            why.push(format!(
                "HEAD is {} but the pin is {}",
                self.head, pin.commit
            ));
        }
        if !self.changes.is_empty() {
            let n = self.changes.lines().count();
            why.push(format!("{n} file(s) with local changes"));
        }
        (!why.is_empty()).then(|| why.join("; "))
    }

    /// A digest of HEAD and the local changes, so that a modified tree gets its own prefix.
    pub fn digest(&self, git: &Path, root: &Path) -> anyhow::Result<String> {
        let diff = git_out(git, root, &["diff", "HEAD"])?;
        let mut h = Sha256::new();
        h.update(&self.head);
        h.update(&self.changes);
        h.update(diff);
        let hex: String = h
            .finalize()
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect();
        Ok(format!("{} + changes {hex}", self.head))
    }
}

/// Makes `checkout` hold exactly the pinned commit, reusing it when it already does.
/// Returns true when it was reused.
pub fn ensure_fetched(git: &Path, pin: &RocshmemPin, checkout: &Path) -> anyhow::Result<bool> {
    if checkout.exists() {
        match LocalState::read(git, checkout) {
            Ok(state) if state.mismatch(pin).is_none() => return Ok(true),
            // Ours to manage: a stale or damaged checkout is fetched again.
            _ => std::fs::remove_dir_all(checkout)
                .with_context(|| format!("removing the stale checkout {}", checkout.display()))?,
        }
    }
    let parent = checkout.parent().expect("checkout has a parent");
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    let partial = partial_dir(checkout);
    if partial.exists() {
        std::fs::remove_dir_all(&partial)
            .with_context(|| format!("removing {}", partial.display()))?;
    }
    for command in fetch_commands(git, pin, &partial) {
        let out = Command::new(&command[0])
            .args(&command[1..])
            .output()
            .with_context(|| format!("running {}", command[0]))?;
        if !out.status.success() {
            let _ = std::fs::remove_dir_all(&partial);
            let stderr = String::from_utf8_lossy(&out.stderr);
            let hint = if command.iter().any(|a| a == "fetch") {
                format!(
                    "\nNo network, or the commit is not in that repository? Check rocshmem.commit in \
                     pins.toml, or build from a local checkout of {} at {} with --source DIR",
                    pin.repository, pin.commit
                )
            } else {
                String::new()
            };
            bail!(
                "`{}` failed: {}{hint}",
                super::plan::shell_words(&command),
                stderr.trim()
            );
        }
    }
    let head = git_out(git, &partial, &["rev-parse", "HEAD"])?;
    if head != pin.commit {
        let _ = std::fs::remove_dir_all(&partial);
        bail!(
            "fetched HEAD {head} is not the pinned commit {}; refusing to build it",
            pin.commit
        );
    }
    std::fs::rename(&partial, checkout)
        .with_context(|| format!("moving the checkout to {}", checkout.display()))?;
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A repository value that looks like an option reaches git as the URL, not as an option
    /// (the pins refuse such values too; this is the second line of defence).
    #[test]
    fn the_repository_is_never_read_as_an_option() {
        let git = Path::new("git");
        if Command::new(git).arg("--version").output().is_err() {
            assert!(
                std::env::var_os("CI").is_none(),
                "this test needs git: CI must install it"
            );
            eprintln!("SKIPPED: needs git");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("checkout");
        let pin = RocshmemPin {
            repository: "--mirror=fetch".into(),
            subdirectory: "projects/rocshmem".into(),
            commit: "006ac1aaa8bfbf04a77a120cfc54db79095f3219".into(),
            version: "3.4.0".into(),
        };
        // `git init`, then `git remote add`.
        for command in &fetch_commands(git, &pin, &dest)[..2] {
            let out = Command::new(&command[0])
                .args(&command[1..])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{command:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert_eq!(
            git_out(git, &dest, &["remote", "get-url", "origin"]).unwrap(),
            "--mirror=fetch"
        );
        // Taken as an option, it would have made origin a mirror.
        assert!(
            git_out(git, &dest, &["config", "--get", "remote.origin.mirror"]).is_err(),
            "--mirror was taken as an option"
        );
    }
}

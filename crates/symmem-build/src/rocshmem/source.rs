//! The rocSHMEM source: a shallow, sparse fetch of exactly the pinned commit, or a local
//! checkout checked against the pin.

use super::plan::Mismatch;
use crate::pins::RocshmemPin;
use anyhow::{Context, bail};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use xshell::{Shell, cmd};

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

fn git_out(sh: &Shell, git: &Path, repo: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = cmd!(sh, "{git} -C {repo} {args...}")
        .quiet()
        .ignore_status()
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
    pub fn read(sh: &Shell, git: &Path, root: &Path) -> anyhow::Result<Self> {
        if !root.join(".git").exists() {
            bail!(
                "--source {} is not a git checkout (no .git): clone the pinned repository there",
                root.display()
            );
        }
        Ok(Self {
            head: git_out(sh, git, root, &["rev-parse", "HEAD"])?,
            changes: git_out(
                sh,
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

    /// What this checkout builds instead of the pin: its HEAD, the version its CMakeLists.txt
    /// declares, and a digest of its local changes when it has any (they change what is
    /// built, so they change the prefix; a clean checkout needs no digest, its HEAD says all).
    pub fn mismatch_details(
        &self,
        sh: &Shell,
        git: &Path,
        root: &Path,
        subdirectory: &str,
    ) -> anyhow::Result<Mismatch> {
        let changes = if self.changes.is_empty() {
            None
        } else {
            let mut h = Sha256::new();
            h.update(&self.changes);
            h.update(git_out(sh, git, root, &["diff", "HEAD", "--binary"])?);
            // `git diff` leaves untracked files out: their contents count too.
            let untracked = git_out(
                sh,
                git,
                root,
                &["ls-files", "--others", "--exclude-standard"],
            )?;
            for file in untracked.lines() {
                h.update(file);
                h.update(std::fs::read(root.join(file)).unwrap_or_default());
            }
            Some(
                h.finalize()
                    .iter()
                    .take(8)
                    .map(|b| format!("{b:02x}"))
                    .collect(),
            )
        };
        let version =
            tree_version(&root.join(subdirectory)).map_or_else(|_| "unknown".into(), |(v, _)| v);
        Ok(Mismatch {
            head: self.head.clone(),
            version,
            changes,
        })
    }
}

/// Whether `word` reads as a version (`2.0.0`, `3.4`).
fn is_version(word: &str) -> bool {
    word.split('.').count() >= 2 && word.split('.').all(|p| p.parse::<u32>().is_ok())
}

/// The arguments of each call of `command` (case-insensitive) in CMake text, across lines.
fn calls<'a>(text: &'a str, command: &str) -> Vec<&'a str> {
    let lower = text.to_ascii_lowercase();
    let pattern = format!("{command}(");
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = lower[from..].find(&pattern) {
        let start = from + at;
        let open = start + pattern.len();
        // A call starts a word: not `my_project(`.
        let starts_word = lower[..start]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
        let close = lower[open..].find(')').map_or(lower.len(), |c| open + c);
        if starts_word {
            found.push(&text[open..close]);
        }
        from = close.max(open);
    }
    found
}

/// The version a rocSHMEM CMakeLists.txt declares, in any of the forms rocSHMEM has used:
/// `set(VERSION_STRING x.y.z)` (3.x), `rocm_setup_version(VERSION x.y.z)` (1.x, 2.0), or
/// `project(... VERSION x.y.z ...)`, a call that may span lines.
pub fn declared_version(cmakelists: &str) -> Option<String> {
    let words = |args: &str| -> Vec<String> {
        args.split(|c: char| c.is_whitespace() || c == '"')
            .filter(|w| !w.is_empty())
            .map(str::to_string)
            .collect()
    };
    for args in calls(cmakelists, "set") {
        let w = words(args);
        if w.first().is_some_and(|n| n == "VERSION_STRING")
            && let Some(v) = w.get(1).filter(|v| is_version(v))
        {
            return Some(v.clone());
        }
    }
    for command in ["rocm_setup_version", "project"] {
        for args in calls(cmakelists, command) {
            let w = words(args);
            let after = w.iter().skip_while(|x| *x != "VERSION").nth(1);
            if let Some(v) = after.filter(|v| is_version(v)) {
                return Some(v.clone());
            }
        }
    }
    None
}

/// The version a rocSHMEM source tree declares and the file that says so: its CMakeLists.txt
/// (see [`declared_version`]), else a `VERSION` file beside it (older trees). `Err` lists
/// what was looked at when neither tells.
pub fn tree_version(source_dir: &Path) -> Result<(String, PathBuf), String> {
    let cmakelists = source_dir.join("CMakeLists.txt");
    if let Some(v) = std::fs::read_to_string(&cmakelists)
        .ok()
        .and_then(|t| declared_version(&t))
    {
        return Ok((v, cmakelists));
    }
    let file = source_dir.join("VERSION");
    if let Some(v) = std::fs::read_to_string(&file).ok().and_then(|t| {
        t.split_whitespace()
            .map(|w| w.trim_start_matches('v'))
            .find(|w| is_version(w))
            .map(str::to_string)
    }) {
        return Ok((v, file));
    }
    Err(format!(
        "{} (set(VERSION_STRING ...), rocm_setup_version(VERSION ...), project(... VERSION \
         ...)) and {}",
        cmakelists.display(),
        file.display()
    ))
}

/// Makes `checkout` hold exactly the pinned commit, reusing it when it already does.
/// Returns true when it was reused.
pub fn ensure_fetched(
    sh: &Shell,
    git: &Path,
    pin: &RocshmemPin,
    checkout: &Path,
) -> anyhow::Result<bool> {
    if checkout.exists() {
        match LocalState::read(sh, git, checkout) {
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
        let out = sh
            .cmd(&command[0])
            .args(&command[1..])
            .quiet()
            .ignore_status()
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
                crate::runner::shell_words(&command),
                stderr.trim()
            );
        }
    }
    let head = git_out(sh, git, &partial, &["rev-parse", "HEAD"])?;
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

    /// git for the tests that run it; `None` (with the reason) where it is missing outside CI.
    fn git_or_skip(sh: &Shell) -> Option<&'static Path> {
        let git = Path::new("git");
        if cmd!(sh, "{git} --version")
            .quiet()
            .ignore_status()
            .output()
            .is_ok()
        {
            return Some(git);
        }
        assert!(
            std::env::var_os("CI").is_none(),
            "this test needs git: CI must install it"
        );
        eprintln!("SKIPPED: needs git (apt-get install git)");
        None
    }

    /// A repository value that looks like an option reaches git as the URL, not as an option
    /// (the pins refuse such values too; this is the second line of defence).
    #[test]
    fn the_repository_is_never_read_as_an_option() {
        let sh = Shell::new().unwrap();
        let Some(git) = git_or_skip(&sh) else {
            return;
        };
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
            let out = sh
                .cmd(&command[0])
                .args(&command[1..])
                .quiet()
                .ignore_status()
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{command:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert_eq!(
            git_out(&sh, git, &dest, &["remote", "get-url", "origin"]).unwrap(),
            "--mirror=fetch"
        );
        // Taken as an option, it would have made origin a mirror.
        assert!(
            git_out(
                &sh,
                git,
                &dest,
                &["config", "--get", "remote.origin.mirror"]
            )
            .is_err(),
            "--mirror was taken as an option"
        );
    }

    #[test]
    fn declared_versions() {
        assert_eq!(
            declared_version("include(x)\nset(VERSION_STRING 3.4.0)\nproject(rocshmem VERSION ${VERSION_STRING} LANGUAGES CXX)\n")
                .as_deref(),
            Some("3.4.0")
        );
        assert_eq!(
            declared_version(
                "project(rocshmem LANGUAGES CXX)\nproject(rocshmem VERSION 3.5.1 LANGUAGES CXX)\n"
            )
            .as_deref(),
            Some("3.5.1")
        );
        assert_eq!(declared_version("project(rocshmem LANGUAGES CXX)\n"), None);
        // rocSHMEM 2.0.0 and 1.6.0 (ROCm/rocSHMEM 3185428, b60a460): ROCm's macro.
        assert_eq!(
            declared_version(
                "include(ROCMSetupVersion)\nrocm_setup_version(VERSION 2.0.0)\n\
                 project(rocshmem CXX)\n"
            )
            .as_deref(),
            Some("2.0.0")
        );
        // A project() call over several lines.
        assert_eq!(
            declared_version("project(\n  rocshmem\n  VERSION 1.6.0\n  LANGUAGES CXX\n)\n")
                .as_deref(),
            Some("1.6.0")
        );
        assert_eq!(
            declared_version("my_project(x VERSION 9.9)\nset(VERSION_STRING ${V})\n"),
            None
        );
    }

    /// Older trees keep their version in a VERSION file; where nothing tells, what was
    /// looked at is said.
    #[test]
    fn a_tree_without_a_declared_version_reads_its_version_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("CMakeLists.txt"),
            "file(READ VERSION V)\nproject(\n  rocshmem\n  VERSION ${V}\n)\n",
        )
        .unwrap();
        let looked = tree_version(dir.path()).unwrap_err();
        assert!(
            looked.contains("CMakeLists.txt") && looked.contains("VERSION"),
            "{looked}"
        );
        std::fs::write(dir.path().join("VERSION"), "1.6.0\n").unwrap();
        assert_eq!(
            tree_version(dir.path()).unwrap(),
            ("1.6.0".to_string(), dir.path().join("VERSION"))
        );
    }

    /// A mismatching checkout is described by its HEAD and version; the changes digest is there
    /// only when it has changes, and it covers untracked files' contents too.
    #[test]
    fn mismatch_details_name_head_and_only_real_changes() {
        let sh = Shell::new().unwrap();
        let Some(git) = git_or_skip(&sh) else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let run = |args: &[&str]| {
            cmd!(sh, "{git} -C {root} {args...}")
                .quiet()
                .env("GIT_AUTHOR_NAME", "fixture")
                .env("GIT_AUTHOR_EMAIL", "fixture@example.org")
                .env("GIT_COMMITTER_NAME", "fixture")
                .env("GIT_COMMITTER_EMAIL", "fixture@example.org")
                .ignore_stdout()
                .run()
                .unwrap_or_else(|e| panic!("git {args:?}: {e}"));
        };
        std::fs::create_dir_all(root.join("projects/rocshmem")).unwrap();
        std::fs::write(
            root.join("projects/rocshmem/CMakeLists.txt"),
            "set(VERSION_STRING 3.5.0)\n",
        )
        .unwrap();
        run(&["init", "--quiet"]);
        run(&["add", "."]);
        run(&["commit", "--quiet", "-m", "fixture"]);
        let details = |root: &Path| {
            LocalState::read(&sh, git, root)
                .unwrap()
                .mismatch_details(&sh, git, root, "projects/rocshmem")
                .unwrap()
        };
        let clean = details(root);
        assert_eq!(
            clean.head,
            git_out(&sh, git, root, &["rev-parse", "HEAD"]).unwrap()
        );
        assert_eq!(clean.version, "3.5.0");
        assert_eq!(clean.changes, None);

        std::fs::write(root.join("projects/rocshmem/new.cpp"), "one\n").unwrap();
        let first = details(root)
            .changes
            .expect("an untracked file is a change");
        std::fs::write(root.join("projects/rocshmem/new.cpp"), "two\n").unwrap();
        let second = details(root).changes.unwrap();
        assert_ne!(
            first, second,
            "an untracked file's contents change the digest"
        );
    }
}

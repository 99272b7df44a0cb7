//! What to launch: [`LaunchSpec`], its defaults and its validation.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use symmem::settings;
use symmem_process::{ProgramError, SearchPath, find_program};

use crate::error::LaunchError;
use crate::layout::Layout;

/// Most ranks one launch starts. All ranks run on this host, each with its own
/// process, pipes and reader threads; beyond a few hundred a cluster launcher
/// (torchrun, mpirun, srun) is the right tool.
pub const MAX_RANKS: usize = 256;

/// Default global timeout of a run.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Default time between `SIGTERM` and `SIGKILL` when the ranks are stopped.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// Everything needed to start one run of `ranks` processes of `program`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchSpec {
    /// Program every rank runs. A bare name (no `/`) is looked up in `PATH`
    /// (the `PATH` of [`LaunchSpec::env`] if it sets one). Under a cluster launcher
    /// ([`Launcher::Mpirun`](crate::Launcher::Mpirun), [`Launcher::Srun`](crate::Launcher::Srun))
    /// it is passed as it is: a path as the nodes see it, or a name on their `PATH`.
    pub program: PathBuf,
    /// Arguments passed to every rank.
    pub args: Vec<OsString>,
    /// Number of ranks, `1..=MAX_RANKS`.
    pub ranks: usize,
    /// Global timeout; when it elapses the remaining ranks are stopped.
    /// [`Duration::MAX`] means no timeout.
    pub timeout: Duration,
    /// How long ranks get between `SIGTERM` and `SIGKILL` when they are stopped.
    pub grace: Duration,
    /// Extra environment for every rank, applied after the launcher's own
    /// variables (so it can override them, e.g. `MASTER_ADDR`).
    pub env: Vec<(OsString, OsString)>,
    /// Per-rank extra environment, applied last: empty, or one entry per rank
    /// ([`Launcher::Local`](crate::Launcher::Local) only).
    pub rank_env: Vec<Vec<(OsString, OsString)>>,
    /// Where the ranks run: [`Layout::OneHost`] unless a cluster launcher places them.
    pub layout: Layout,
}

impl LaunchSpec {
    /// A spec running `program` without arguments on `ranks` ranks, with
    /// [`DEFAULT_TIMEOUT`], [`DEFAULT_GRACE`] and no extra environment.
    pub fn new(program: impl Into<PathBuf>, ranks: usize) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
            ranks,
            timeout: DEFAULT_TIMEOUT,
            grace: DEFAULT_GRACE,
            env: Vec::new(),
            rank_env: Vec::new(),
            layout: Layout::OneHost,
        }
    }

    /// Sets where the ranks run (builder style); a [`Layout::PerNode`] sets the rank count
    /// to its sum too.
    pub fn layout(mut self, layout: Layout) -> Self {
        if let Some(ranks) = layout.ranks() {
            self.ranks = ranks;
        }
        self.layout = layout;
        self
    }

    /// Appends arguments (builder style).
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Adds one variable to the environment of every rank (builder style).
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Sets the global timeout (builder style).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the `SIGTERM` → `SIGKILL` grace period (builder style).
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Checks the spec and resolves the program to the path that will be
    /// executed on this host.
    pub(crate) fn validate(&self) -> Result<PathBuf, LaunchError> {
        self.check()?;
        self.resolve_program()
    }

    /// Checks the counts: ranks, per-rank environment, layout. A cluster launcher checks only
    /// these: its program is a path as the nodes see it, which this host may not.
    pub(crate) fn check(&self) -> Result<(), LaunchError> {
        if self.ranks == 0 {
            return Err(LaunchError::NoRanks);
        }
        if self.ranks > MAX_RANKS {
            return Err(LaunchError::TooManyRanks {
                ranks: self.ranks,
                max: MAX_RANKS,
            });
        }
        if !self.rank_env.is_empty() && self.rank_env.len() != self.ranks {
            return Err(LaunchError::RankEnvMismatch {
                entries: self.rank_env.len(),
                ranks: self.ranks,
            });
        }
        self.layout.check(self.ranks)
    }

    /// The caller's rendezvous directory, if `env` sets one.
    pub(crate) fn caller_rendezvous(&self) -> Option<&OsString> {
        self.env
            .iter()
            .rev()
            .find(|(key, _)| key == settings::RENDEZVOUS.name)
            .map(|(_, value)| value)
    }

    /// Resolves the program up front so that a typo gives a clear error naming the path,
    /// instead of N identical spawn failures. Like execvp: a name containing a slash is a
    /// path, anything else is looked up in the spec's PATH (else this process's).
    fn resolve_program(&self) -> Result<PathBuf, LaunchError> {
        let program = &self.program;
        if program.as_os_str().is_empty() {
            return Err(LaunchError::ProgramNotFound {
                program: program.clone(),
                hint: "the program path is empty".into(),
            });
        }
        let search = self
            .env
            .iter()
            .rev()
            .find(|(key, _)| key == "PATH")
            .map(|(_, value)| SearchPath::new(value))
            .unwrap_or_else(SearchPath::from_env);
        find_program(program, &search, "").map_err(|e| match e {
            ProgramError::NotRunnable { path, reason } => {
                LaunchError::ProgramNotExecutable { path, reason }
            }
            ProgramError::NotFound { searched: None, .. } => LaunchError::ProgramNotFound {
                program: program.clone(),
                hint: "no such file; check the path, or build the program first \
                       (e.g. `cargo build`)"
                    .into(),
            },
            ProgramError::NotFound { .. } => LaunchError::ProgramNotFound {
                program: program.clone(),
                hint: format!(
                    "not found in PATH ({}); give a path such as `./{}` or add its \
                     directory to PATH",
                    search.path().unwrap_or_default().to_string_lossy(),
                    program.display()
                ),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// Issue 24 (N13): a named pipe failed at spawn with "Permission denied", and a script
    /// with a missing interpreter with "No such file or directory" for a file that exists.
    #[test]
    fn pipes_and_scripts_without_their_interpreter_are_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
        let err = LaunchSpec::new(&fifo, 1).resolve_program().unwrap_err();
        assert!(err.is_usage(), "{err}");
        assert!(err.to_string().contains("it is a named pipe"), "{err}");

        let script = dir.path().join("script");
        std::fs::write(&script, "#!/nonexistent/interp -x\necho hi\n").expect("write");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let err = LaunchSpec::new(&script, 1).resolve_program().unwrap_err();
        assert!(err.is_usage(), "{err}");
        assert!(
            err.to_string()
                .contains("interpreter `/nonexistent/interp`, which does not exist"),
            "{err}"
        );
        std::fs::write(&script, "#!/bin/sh\necho hi\n").expect("write");
        assert!(LaunchSpec::new(&script, 1).resolve_program().is_ok());
    }

    #[test]
    fn defaults() {
        let spec = LaunchSpec::new("/bin/true", 2);
        assert_eq!(spec.timeout, DEFAULT_TIMEOUT);
        assert_eq!(spec.grace, DEFAULT_GRACE);
        assert!(spec.env.is_empty() && spec.rank_env.is_empty() && spec.args.is_empty());
    }

    #[test]
    fn bare_names_are_found_in_path() {
        let spec = LaunchSpec::new("sh", 1).env("PATH", "/nonexistent:/bin:/usr/bin");
        let resolved = spec.validate().expect("sh is in /bin or /usr/bin");
        assert!(resolved.ends_with("sh") && resolved.is_absolute());
    }

    #[test]
    fn rank_env_must_match_ranks() {
        let mut spec = LaunchSpec::new("/bin/true", 2);
        spec.rank_env = vec![Vec::new()];
        assert!(matches!(
            spec.validate(),
            Err(LaunchError::RankEnvMismatch {
                entries: 1,
                ranks: 2
            })
        ));
    }

    #[test]
    fn directories_and_plain_files_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = LaunchSpec::new(dir.path(), 1).validate().unwrap_err();
        assert!(
            matches!(err, LaunchError::ProgramNotExecutable { .. }),
            "{err}"
        );
        let file = dir.path().join("script.sh");
        std::fs::write(&file, "echo hi\n").expect("write");
        let err = LaunchSpec::new(&file, 1).validate().unwrap_err();
        assert!(err.to_string().contains("chmod +x"), "{err}");
    }
}

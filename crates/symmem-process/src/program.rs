//! Finding a program the way `execvp` does: a name with a `/` is a path, any other name is
//! looked for in the folders of `PATH`, in order; the first file that can be run wins. When
//! none is found, [`ProgramError`] names the program, where it was looked for and how to get
//! it; when one is there but cannot be run, why.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Where [`find_program`] looks for a name: the folders of a `PATH` value, then any folders
/// added with [`SearchPath::also`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchPath {
    /// The `PATH` value, when the search has one (an empty entry is the current folder).
    path: Option<OsString>,
    also: Vec<PathBuf>,
}

impl SearchPath {
    /// This process's `PATH` (unset: empty).
    pub fn from_env() -> Self {
        Self::new(std::env::var_os("PATH").unwrap_or_default())
    }

    /// The folders of the `PATH` value `path` (`:`-separated).
    pub fn new(path: impl Into<OsString>) -> Self {
        Self {
            path: Some(path.into()),
            also: Vec::new(),
        }
    }

    /// Exactly `dirs`, in order, and no `PATH`.
    pub fn dirs(dirs: impl IntoIterator<Item = PathBuf>) -> Self {
        Self {
            path: None,
            also: dirs.into_iter().collect(),
        }
    }

    /// Also looks in `dirs`, after the others (system folders a `sudo` PATH may lack).
    pub fn also(mut self, dirs: impl IntoIterator<Item = impl Into<PathBuf>>) -> Self {
        self.also.extend(dirs.into_iter().map(Into::into));
        self
    }

    /// The `PATH` value searched, if any.
    pub fn path(&self) -> Option<&OsStr> {
        self.path.as_deref()
    }

    /// The folders, in the order they are searched.
    fn folders(&self) -> impl Iterator<Item = PathBuf> + '_ {
        let path = self.path.iter().flat_map(std::env::split_paths);
        // An empty PATH entry means the current folder.
        path.map(|dir| {
            if dir.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                dir
            }
        })
        .chain(self.also.iter().cloned())
    }
}

impl fmt::Display for SearchPath {
    /// `on PATH (/usr/bin:/bin) nor in /usr/sbin, /sbin`, `in /opt/x/bin`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let also = self
            .also
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        match (&self.path, also.is_empty()) {
            (Some(path), true) => write!(f, "on PATH ({})", path.to_string_lossy()),
            (Some(path), false) => write!(f, "on PATH ({}) nor in {also}", path.to_string_lossy()),
            (None, _) => write!(f, "in {also}"),
        }
    }
}

/// Why [`find_program`] found nothing to run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProgramError {
    /// No file of that name in any folder searched; or, for a path, no file there.
    #[error("`{}` was not found {}; {hint}", program.display(), Searched(searched.as_ref()))]
    NotFound {
        /// The program as given.
        program: PathBuf,
        /// Where a name was looked for; `None` for a path.
        searched: Option<SearchPath>,
        /// How to get it (install it, build it, give its path).
        hint: String,
    },
    /// A file is there but cannot be run.
    #[error("`{}` cannot be executed: {reason}", path.display())]
    NotRunnable {
        /// The file found.
        path: PathBuf,
        /// Why, and what to do.
        reason: String,
    },
}

/// Where a program was looked for, in a sentence ("there" for a path).
struct Searched<'a>(Option<&'a SearchPath>);

impl fmt::Display for Searched<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(search) => search.fmt(f),
            None => f.write_str("(no such file)"),
        }
    }
}

/// The file that runs when `program` is started: a path when it has a `/`, else the first
/// runnable file of that name in `search`'s folders (a file there that cannot be run is
/// skipped, and named only when nothing else is found). `hint` says how to get the program;
/// [`ProgramError::NotFound`] carries it.
pub fn find_program(
    program: impl AsRef<Path>,
    search: &SearchPath,
    hint: impl Into<String>,
) -> Result<PathBuf, ProgramError> {
    let program = program.as_ref();
    let not_found = |searched: Option<&SearchPath>| ProgramError::NotFound {
        program: program.to_path_buf(),
        searched: searched.cloned(),
        hint: hint.into(),
    };
    if program.as_os_str().is_empty() {
        return Err(not_found(None));
    }
    if program.as_os_str().as_encoded_bytes().contains(&b'/') {
        return match runnable(program) {
            Ok(()) => Ok(program.to_path_buf()),
            Err(Problem::Missing) => Err(not_found(None)),
            Err(Problem::NotRunnable(reason)) => Err(ProgramError::NotRunnable {
                path: program.to_path_buf(),
                reason,
            }),
        };
    }
    let mut not_runnable = None;
    for dir in search.folders() {
        let candidate = dir.join(program);
        match runnable(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(Problem::Missing) => {}
            Err(Problem::NotRunnable(reason)) => {
                not_runnable.get_or_insert(ProgramError::NotRunnable {
                    path: candidate,
                    reason,
                });
            }
        }
    }
    Err(not_runnable.unwrap_or_else(|| not_found(Some(search))))
}

/// Whether `path` is a file this process can start (see [`find_program`]'s checks).
pub fn is_executable(path: &Path) -> bool {
    runnable(path).is_ok()
}

enum Problem {
    Missing,
    NotRunnable(String),
}

/// Whether `path` can be started: a file with an execute permission, whose `#!` interpreter
/// (if it is a script) is there.
fn runnable(path: &Path) -> Result<(), Problem> {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Err(Problem::Missing),
        Err(err) => return Err(Problem::NotRunnable(format!("cannot inspect it: {err}"))),
    };
    if meta.is_dir() {
        return Err(Problem::NotRunnable(
            "it is a directory; give the program inside it".into(),
        ));
    }
    if !meta.is_file() {
        use std::os::unix::fs::FileTypeExt;
        let kind = match meta.file_type() {
            t if t.is_fifo() => "a named pipe",
            t if t.is_socket() => "a socket",
            t if t.is_char_device() || t.is_block_device() => "a device",
            _ => "not a regular file",
        };
        return Err(Problem::NotRunnable(format!(
            "it is {kind}, not a program file; give the program's path"
        )));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(Problem::NotRunnable(
            "it has no execute permission; `chmod +x` it, or launch its interpreter \
             (e.g. `/bin/sh script.sh`)"
                .into(),
        ));
    }
    check_interpreter(path)
}

/// A script whose `#!` line names an interpreter that is not there fails to start with "No
/// such file or directory" for a file that exists: name the interpreter instead.
fn check_interpreter(path: &Path) -> Result<(), Problem> {
    let mut head = [0u8; 256];
    let read = std::fs::File::open(path).and_then(|mut f| std::io::Read::read(&mut f, &mut head));
    let Ok(n) = read else {
        return Ok(()); // unreadable but executable: the kernel decides
    };
    let Some(line) = head[..n].strip_prefix(b"#!") else {
        return Ok(());
    };
    let line = line.split(|&b| b == b'\n').next().unwrap_or_default();
    let text = String::from_utf8_lossy(line);
    let Some(interpreter) = text.split_whitespace().next() else {
        return Ok(());
    };
    match std::fs::metadata(interpreter) {
        Ok(meta) if meta.is_file() && meta.permissions().mode() & 0o111 != 0 => Ok(()),
        Ok(_) => Err(Problem::NotRunnable(format!(
            "its `#!` line names the interpreter `{interpreter}`, which is not an executable \
             file; fix the `#!` line or launch the script with its interpreter"
        ))),
        Err(_) => Err(Problem::NotRunnable(format!(
            "its `#!` line names the interpreter `{interpreter}`, which does not exist; install \
             it, fix the `#!` line, or launch the script with its interpreter"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str, mode: u32) {
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn names_are_found_in_order_and_paths_are_taken_as_they_are() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        // In `a` but not runnable: skipped for the one in `b`.
        write(&a.join("tool"), "#!/bin/sh\n", 0o644);
        write(&b.join("tool"), "#!/bin/sh\n", 0o755);
        let search = SearchPath::new(std::env::join_paths([&a, &b]).unwrap());
        assert_eq!(find_program("tool", &search, ""), Ok(b.join("tool")));
        assert_eq!(
            find_program(b.join("tool"), &search, ""),
            Ok(b.join("tool"))
        );
        assert!(is_executable(&b.join("tool")) && !is_executable(&a.join("tool")));
        // Only the one that cannot run: it is named, with why.
        let only_a = SearchPath::dirs([a.clone()]);
        let err = find_program("tool", &only_a, "").unwrap_err();
        assert!(err.to_string().contains("no execute permission"), "{err}");
        assert!(
            err.to_string()
                .starts_with(&format!("`{}`", a.join("tool").display()))
        );
        let sh = find_program("sh", &SearchPath::new("/nonexistent:/bin:/usr/bin"), "");
        assert!(sh.is_ok_and(|p| p.is_absolute() && p.ends_with("sh")));
    }

    /// Issue 24 (N13): a named pipe failed at spawn with "Permission denied", and a script
    /// with a missing interpreter with "No such file or directory" for a file that exists.
    #[test]
    fn pipes_folders_and_scripts_without_their_interpreter_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let why = |path: &Path| match find_program(path, &SearchPath::dirs([]), "") {
            Err(ProgramError::NotRunnable { reason, .. }) => reason,
            other => panic!("{other:?}"),
        };
        assert!(why(&fifo).contains("it is a named pipe"));
        assert!(why(dir.path()).contains("it is a directory"));
        let script = dir.path().join("script");
        write(&script, "#!/nonexistent/interp -x\necho hi\n", 0o755);
        assert!(why(&script).contains("interpreter `/nonexistent/interp`, which does not exist"));
        write(&script, "#!/bin/sh\necho hi\n", 0o755);
        assert!(is_executable(&script));
    }

    #[test]
    fn a_missing_program_is_named_with_where_it_was_looked_for_and_the_fix() {
        let search = SearchPath::new("/nonexistent:/also-not").also(["/usr/sbin", "/sbin"]);
        let err =
            find_program("frobnicate", &search, "install it: apt-get install frob").unwrap_err();
        assert_eq!(
            err.to_string(),
            "`frobnicate` was not found on PATH (/nonexistent:/also-not) nor in /usr/sbin, \
             /sbin; install it: apt-get install frob"
        );
        let err = find_program("/nonexistent/frob", &search, "build it first").unwrap_err();
        assert_eq!(
            err.to_string(),
            "`/nonexistent/frob` was not found (no such file); build it first"
        );
        let err = find_program("x", &SearchPath::dirs(["/opt/x".into()]), "fix").unwrap_err();
        assert_eq!(err.to_string(), "`x` was not found in /opt/x; fix");
    }
}

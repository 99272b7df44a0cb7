//! The rendezvous folder, opened so that no other local user can steer where rank 0 binds its
//! socket or what it removes.
//!
//! The temp folder is shared by every user, and the default rendezvous name derives from the
//! launcher's job id, which anyone can read: another user can create that name first, as a
//! folder of theirs or as a symbolic link into a folder of ours. So:
//!
//! - no folder or link on the way to the rendezvous may belong to another user (root, and in a
//!   user namespace the kernel's overflow uid, excepted: they own the system's folders), nor be
//!   writable by every user without the sticky bit (as /tmp has);
//! - the rendezvous folder itself, and every folder a rank creates for it, is opened with
//!   `O_NOFOLLOW` relative to its parent's descriptor, and must be a folder that we own and that
//!   neither our group nor other users can write;
//! - from then on everything happens relative to that descriptor: the socket is bound and
//!   reached through `/proc/self/fd/N/rank0.sock` (which also frees it from the 107-byte limit
//!   of a socket address), and stale sockets and created folders are removed with `unlinkat`,
//!   so renaming or replacing any folder of the path afterwards changes nothing;
//! - only a socket of ours that nobody listens on is ever removed; any other file in its place
//!   is an error.

use crate::BootstrapError;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{FileStat, Mode, SFlag};
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Component, Path, PathBuf};

use symmem::RENDEZVOUS_SOCKET;

/// Whether a rank may create the folder (rank 0) or only waits for it (the others).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Create {
    Yes,
    No,
}

/// Why a folder could not be opened yet: it is not there (the other ranks wait for rank 0).
pub(crate) enum OpenError {
    Missing,
    Refused(BootstrapError),
}

impl From<BootstrapError> for OpenError {
    fn from(e: BootstrapError) -> Self {
        Self::Refused(e)
    }
}

/// An open, checked rendezvous folder. Dropping it removes the folders this rank created
/// (innermost first, and only while empty).
pub(crate) struct Folder {
    path: PathBuf,
    /// The base (first existing ancestor, by path) then each folder below it, by descriptor.
    fds: Vec<OwnedFd>,
    /// Names below the base, in order; `names[i]` lives in `fds[i]`, is open as `fds[i + 1]`.
    names: Vec<OsString>,
    /// Indexes into `names` of the folders this rank removes on drop while empty: those it
    /// created, and (rank 0) symmem's own `symmem-<uid>` and every folder below it, whoever
    /// created it: two jobs of one name each find the other's folder, and neither would
    /// remove it.
    created: Vec<usize>,
}

impl Folder {
    /// Opens `path` (creating what is missing when `create` is [`Create::Yes`]) after the
    /// checks described in the module docs.
    pub(crate) fn open(path: &Path, create: Create) -> Result<Self, OpenError> {
        let path = std::path::absolute(path).map_err(|e| not_usable(path, e))?;
        if path.file_name().is_none() {
            let cause = std::io::Error::other("it must end in a folder name, not `/` or `..`");
            return Err(not_usable(&path, cause).into());
        }
        check_ancestors(&path)?;
        // A concurrent job of ours may remove a folder it created just as we enter it: start
        // over a few times rather than fail.
        let mut attempts = 0;
        loop {
            match Self::try_open(&path, create) {
                Err(OpenError::Missing) if create == Create::Yes && attempts < 20 => {
                    attempts += 1;
                }
                other => return other,
            }
        }
    }

    fn try_open(path: &Path, create: Create) -> Result<Self, OpenError> {
        // The folders below the first existing ancestor are made (or awaited) here; the
        // rendezvous folder itself is always checked, existing or not.
        let namespace = OsString::from(format!("symmem-{}", nix::unistd::getuid()));
        let mut base = path.to_path_buf();
        let mut names = Vec::new();
        loop {
            let name = base.file_name().map(OsStr::to_os_string);
            // Rank 0 opens the namespace from its parent, so that it can remove it (below).
            let namespace_next = create == Create::Yes && name.as_deref() == Some(&namespace);
            match std::fs::symlink_metadata(&base) {
                Ok(_) if !names.is_empty() && !namespace_next => break,
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(not_usable(&base, e).into());
                }
                _ => {}
            }
            let (Some(name), Some(parent)) = (name, base.parent()) else {
                return Err(not_usable(path, std::io::ErrorKind::NotFound.into()).into());
            };
            names.push(name);
            base = parent.to_path_buf();
        }
        names.reverse();
        // Rank 0 removes every empty folder below `symmem-<uid>` (the derived rendezvous
        // folders' namespace, see `default_rendezvous`), and that namespace itself, as it
        // drops, not only those it created: of two jobs at once, the one that made the
        // namespace may leave first, while the other's folder is still in it.
        let components: Vec<_> = path.components().collect();
        let first = components.len().saturating_sub(names.len());
        let below_namespace = |i: usize| {
            let at = first + i;
            create == Create::Yes
                && components[..=at]
                    .iter()
                    .any(|c| c.as_os_str() == namespace.as_os_str())
        };
        let base_fd = open_fd(None, &base, OFlag::empty()).map_err(|e| match e {
            Errno::ENOENT => OpenError::Missing,
            e => not_usable(&base, e.into()).into(),
        })?;
        let mut folder = Folder {
            path: path.to_path_buf(),
            fds: vec![base_fd],
            names: Vec::new(),
            created: Vec::new(),
        };
        let mut shown = base;
        for name in names {
            shown.push(&name);
            let parent = folder.fds.last().expect("the base is open").as_raw_fd();
            let index = folder.names.len();
            if below_namespace(index) {
                folder.created.push(index);
            }
            if create == Create::Yes {
                match nix::sys::stat::mkdirat(Some(parent), name.as_os_str(), Mode::S_IRWXU) {
                    Ok(()) if !folder.created.contains(&index) => folder.created.push(index),
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(Errno::ENOENT) => return Err(OpenError::Missing),
                    Err(e) => return Err(not_usable(&shown, e.into()).into()),
                }
            }
            let fd = match open_fd(Some(parent), name.as_os_str(), OFlag::O_NOFOLLOW) {
                Ok(fd) => fd,
                Err(Errno::ENOENT) => return Err(OpenError::Missing),
                Err(Errno::ELOOP | Errno::ENOTDIR) => {
                    return Err(describe_non_folder(parent, &name, &shown).into());
                }
                Err(e) => return Err(not_usable(&shown, e.into()).into()),
            };
            let stat =
                nix::sys::stat::fstat(fd.as_raw_fd()).map_err(|e| not_usable(&shown, e.into()))?;
            folder.fds.push(fd);
            folder.names.push(name);
            check_private(&shown, &stat)?;
        }
        Ok(folder)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The socket's path as the rendezvous folder shows it to users.
    pub(crate) fn socket_display(&self) -> PathBuf {
        self.path.join(RENDEZVOUS_SOCKET)
    }

    fn fd(&self) -> RawFd {
        self.fds.last().expect("the folder is open").as_raw_fd()
    }

    /// The socket's address through this process's descriptor of the folder: it names this
    /// very folder whatever happens to its path, and stays far below 107 bytes.
    fn socket_address(&self) -> Result<PathBuf, BootstrapError> {
        let through = PathBuf::from(format!("/proc/self/fd/{}", self.fd()));
        let same = std::fs::metadata(&through).and_then(|seen| {
            use std::os::unix::fs::MetadataExt;
            let own = nix::sys::stat::fstat(self.fd())?;
            Ok(seen.dev() == own.st_dev as u64 && seen.ino() == own.st_ino as u64)
        });
        match same {
            Ok(true) => Ok(through.join(RENDEZVOUS_SOCKET)),
            Ok(false) => Err(BootstrapError::NoProcFd {
                dir: self.path.clone(),
                cause: std::io::Error::other(format!("{} is not this folder", through.display())),
            }),
            Err(cause) => Err(BootstrapError::NoProcFd {
                dir: self.path.clone(),
                cause,
            }),
        }
    }

    /// Connects to rank 0's socket in this folder.
    pub(crate) fn connect(&self) -> Result<std::io::Result<UnixStream>, BootstrapError> {
        Ok(UnixStream::connect(self.socket_address()?))
    }

    /// Binds rank 0's socket here, replacing a stale socket of ours (one nobody listens on).
    pub(crate) fn bind(&self) -> Result<BoundSocket<'_>, BootstrapError> {
        let address = self.socket_address()?;
        let shown = self.socket_display();
        match fstatat_nofollow(self.fd(), OsStr::new(RENDEZVOUS_SOCKET)) {
            Err(Errno::ENOENT) => {}
            Err(e) => return Err(not_usable(&shown, e.into())),
            Ok(stat) => {
                let me = nix::unistd::geteuid().as_raw();
                if kind_of(&stat) != SFlag::S_IFSOCK || stat.st_uid != me {
                    return Err(BootstrapError::RendezvousOccupied {
                        path: shown,
                        what: format!(
                            "{} of uid {} (mode {:04o})",
                            describe_kind(&stat),
                            stat.st_uid,
                            stat.st_mode & 0o7777
                        ),
                    });
                }
                match UnixStream::connect(&address) {
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                        // Left behind by a crashed job: nobody listens any more.
                        unlink_socket(self.fd()).map_err(|e| not_usable(&shown, e.into()))?;
                    }
                    // Someone listens (its backlog may be full): another job's rank 0.
                    Ok(_) => return Err(BootstrapError::RendezvousInUse { path: shown }),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        return Err(BootstrapError::RendezvousInUse { path: shown });
                    }
                    Err(e) => return Err(not_usable(&shown, e)),
                }
            }
        }
        let listener = UnixListener::bind(&address).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AddrInUse {
                BootstrapError::RendezvousInUse {
                    path: shown.clone(),
                }
            } else {
                not_usable(self.path(), e)
            }
        })?;
        let stat = fstatat_nofollow(self.fd(), OsStr::new(RENDEZVOUS_SOCKET)).map_err(|e| {
            let _ = unlink_socket(self.fd());
            not_usable(&shown, e.into())
        })?;
        Ok(BoundSocket {
            folder: self,
            listener,
            identity: (stat.st_dev, stat.st_ino),
        })
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        for &i in self.created.iter().rev() {
            // Only empty folders go; one still in use by a sub-rendezvous stays.
            let _ = nix::unistd::unlinkat(
                Some(self.fds[i].as_raw_fd()),
                self.names[i].as_os_str(),
                nix::unistd::UnlinkatFlags::RemoveDir,
            );
        }
    }
}

/// Rank 0's listening socket; dropping it removes the socket file (if it is still this one).
pub(crate) struct BoundSocket<'a> {
    folder: &'a Folder,
    pub(crate) listener: UnixListener,
    /// Device and inode of the socket file bound, so that only it is ever removed.
    identity: (nix::libc::dev_t, nix::libc::ino_t),
}

impl Drop for BoundSocket<'_> {
    fn drop(&mut self) {
        let fd = self.folder.fd();
        if fstatat_nofollow(fd, OsStr::new(RENDEZVOUS_SOCKET))
            .is_ok_and(|s| (s.st_dev, s.st_ino) == self.identity)
        {
            let _ = unlink_socket(fd);
        }
    }
}

fn unlink_socket(dir: RawFd) -> nix::Result<()> {
    nix::unistd::unlinkat(
        Some(dir),
        RENDEZVOUS_SOCKET,
        nix::unistd::UnlinkatFlags::NoRemoveDir,
    )
}

fn open_fd(
    dir: Option<RawFd>,
    path: &(impl AsRef<OsStr> + ?Sized),
    extra: OFlag,
) -> nix::Result<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | extra;
    let raw = nix::fcntl::openat(dir, path.as_ref(), flags, Mode::empty())?;
    // SAFETY: openat just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

fn fstatat_nofollow(dir: RawFd, name: &OsStr) -> nix::Result<FileStat> {
    nix::sys::stat::fstatat(Some(dir), name, AtFlags::AT_SYMLINK_NOFOLLOW)
}

fn not_usable(dir: &Path, cause: std::io::Error) -> BootstrapError {
    BootstrapError::RendezvousNotWritable {
        dir: dir.to_path_buf(),
        cause,
    }
}

fn kind_of(stat: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT
}

fn describe_kind(stat: &FileStat) -> &'static str {
    match kind_of(stat) {
        SFlag::S_IFREG => "a regular file",
        SFlag::S_IFDIR => "a folder",
        SFlag::S_IFLNK => "a symbolic link",
        SFlag::S_IFSOCK => "a socket",
        SFlag::S_IFIFO => "a named pipe",
        _ => "a device",
    }
}

/// The error for `name` in `parent` that `O_DIRECTORY | O_NOFOLLOW` refused.
fn describe_non_folder(parent: RawFd, name: &OsStr, shown: &Path) -> BootstrapError {
    match fstatat_nofollow(parent, name) {
        Ok(stat) if kind_of(&stat) == SFlag::S_IFLNK => BootstrapError::RendezvousSymlink {
            dir: shown.to_path_buf(),
            target: nix::fcntl::readlinkat(Some(parent), name)
                .map(PathBuf::from)
                .unwrap_or_else(|_| PathBuf::from("?")),
            uid: stat.st_uid,
        },
        Ok(stat) => BootstrapError::RendezvousNotAFolder {
            dir: shown.to_path_buf(),
            what: format!("{} of uid {}", describe_kind(&stat), stat.st_uid),
        },
        Err(e) => not_usable(shown, e.into()),
    }
}

/// Owned by us, and writable by nobody else.
fn check_private(shown: &Path, stat: &FileStat) -> Result<(), BootstrapError> {
    let me = nix::unistd::geteuid().as_raw();
    let mode = stat.st_mode & 0o7777;
    if stat.st_uid != me {
        return Err(BootstrapError::RendezvousForeign {
            path: shown.to_path_buf(),
            what: "the rendezvous folder",
            uid: stat.st_uid,
            mode,
            me,
        });
    }
    if mode & 0o022 != 0 {
        return Err(BootstrapError::RendezvousWritable {
            what: "the rendezvous folder",
            dir: shown.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

/// Refuses a folder or link on the way to `path` that belongs to another user, or a folder
/// every user may write without the sticky bit: they could rename or replace what lies below
/// it. (Folders writable by our group stay allowed: with per-user groups, the default on many
/// distributions, that group is us.)
fn check_ancestors(path: &Path) -> Result<(), BootstrapError> {
    let me = nix::unistd::geteuid().as_raw();
    let system = system_owners();
    let mut prefix = PathBuf::new();
    let mut components = path.components().peekable();
    while let Some(component) = components.next() {
        prefix.push(component);
        if components.peek().is_none() {
            break; // the folder itself gets the stricter check once open
        }
        if matches!(component, Component::CurDir) {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(&prefix) else {
            continue; // missing: rank 0 creates it, and checks it then
        };
        use std::os::unix::fs::MetadataExt;
        let mode = meta.mode() & 0o7777;
        if meta.uid() != me && !system.contains(&meta.uid()) {
            return Err(BootstrapError::RendezvousForeign {
                path: prefix,
                what: if meta.file_type().is_symlink() {
                    "a symbolic link on the way to the rendezvous folder"
                } else {
                    "a folder on the way to the rendezvous folder"
                },
                uid: meta.uid(),
                mode,
                me,
            });
        }
        if meta.is_dir() && mode & 0o002 != 0 && mode & 0o1000 == 0 {
            return Err(BootstrapError::RendezvousWritable {
                what: "a folder on the way to the rendezvous folder",
                dir: prefix,
                mode,
            });
        }
    }
    Ok(())
}

/// Owners trusted for the folders above ours: root, and where this process runs in a user
/// namespace that does not map every uid, the overflow uid that unmapped owners show as.
fn system_owners() -> Vec<u32> {
    let mut owners = vec![0];
    let full_map = std::fs::read("/proc/self/uid_map").is_ok_and(|map| {
        let fields: Vec<&[u8]> = map
            .split(u8::is_ascii_whitespace)
            .filter(|f| !f.is_empty())
            .collect();
        fields == [b"0".as_slice(), b"0", b"4294967295"]
    });
    if !full_map {
        let overflow = std::fs::read_to_string("/proc/sys/kernel/overflowuid")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(65534);
        owners.push(overflow);
    }
    owners
}

//! The handshake: how the ranks of one job meet. Rank 0 checks the rendezvous folder, binds
//! `<folder>/rank0.sock` and accepts every other rank; each other rank connects, sends `Hello`
//! (its rank and world size) and gets `Welcome` or `Reject` with the reason. Both sides read
//! the peer's uid (`SO_PEERCRED`) and refuse another user. Once everyone is in, the socket file
//! is removed; the streams stay open for the [`exchange`](crate::exchange).

use crate::BootstrapError;
use crate::folder::{Create, Folder, OpenError};
use crate::wire::{self, Message, Received, deadline_in};
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use std::io::ErrorKind;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use symmem::{RENDEZVOUS_SOCKET, RankIdentity, settings};

/// The rendezvous folder for this job: [`settings::RENDEZVOUS`] (`$SYMMEM_RENDEZVOUS`), or
/// `symmem-<uid>/<job id>` under `$XDG_RUNTIME_DIR` (else the temp folder), the job id being
/// the launcher's (torchrun's `MASTER_ADDR-MASTER_PORT`, Slurm's job and step, Open MPI's or
/// PMI's namespace).
///
/// The name is derived, not random: the ranks share no secret to derive it from. Anyone can
/// guess it, so [`Bootstrap::connect`] refuses the folder unless the job folder is this user's
/// own and private and nothing on the way (`symmem-<uid>` included) belongs to another user or
/// is writable by everyone: a name taken first by someone else is detected and refused, never
/// used.
pub fn default_rendezvous(identity: &RankIdentity) -> Result<PathBuf, BootstrapError> {
    if let Some(dir) = settings::RENDEZVOUS.read_path() {
        return Ok(dir);
    }
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let user = base.join(format!("symmem-{}", nix::unistd::getuid()));
    match (&identity.job_key, identity.world_size) {
        (Some(key), _) => Ok(user.join(key)),
        (None, 1) => Ok(user.join(format!("singleton-{}", std::process::id()))),
        (None, _) => Err(BootstrapError::NoRendezvous),
    }
}

pub(crate) fn accept_all(
    dir: &Path,
    world_size: usize,
    timeout: Duration,
) -> Result<Vec<UnixStream>, BootstrapError> {
    // Folders this rank creates are removed again once everyone is in (innermost first), as
    // the folder drops.
    let folder = match Folder::open(dir, Create::Yes) {
        Ok(folder) => folder,
        Err(OpenError::Refused(e)) => return Err(e),
        Err(OpenError::Missing) => {
            return Err(BootstrapError::RendezvousNotWritable {
                dir: dir.to_path_buf(),
                cause: ErrorKind::NotFound.into(),
            });
        }
    };
    let path = folder.socket_display();
    // The socket file is only needed until everyone is in; it is removed on every exit path,
    // as `bound` drops (before `folder`).
    let bound = folder.bind()?;
    let listener = &bound.listener;
    listener
        .set_nonblocking(true)
        .map_err(|e| BootstrapError::io("configuring the rendezvous socket", e))?;
    let me = nix::unistd::getuid().as_raw();
    let deadline = deadline_in(timeout);
    let mut slots: Vec<Option<UnixStream>> = (1..world_size).map(|_| None).collect();
    while slots.iter().any(Option::is_none) {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    let missing = (1..world_size).filter(|r| slots[r - 1].is_none()).collect();
                    return Err(BootstrapError::AcceptTimeout {
                        missing,
                        path,
                        waited: timeout,
                    });
                }
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(BootstrapError::io("accepting a rank", e)),
        };
        stream
            .set_nonblocking(false)
            .map_err(|e| BootstrapError::io("configuring a rank's socket", e))?;
        let creds = getsockopt(&stream, PeerCredentials)
            .map_err(|e| BootstrapError::io("reading a peer's credentials", e))?;
        if creds.uid() != me {
            let reason = format!(
                "rank 0 runs as uid {me}, this process as uid {}",
                creds.uid()
            );
            tracing::warn!(
                uid = creds.uid(),
                pid = creds.pid(),
                "refused a rendezvous peer of another user"
            );
            let _ = wire::send(&stream, &Message::Reject { reason }, None);
            continue;
        }
        // A connection that says nothing is not one of ours; it may not hold up the others.
        let hello_deadline = deadline_in(Duration::from_secs(2).min(timeout)).min(deadline);
        let (rank, their_world) = match wire::recv(&stream, hello_deadline) {
            Ok(Received::Frame(Message::Hello { rank, world_size }, None)) => (rank, world_size),
            _ => continue, // not one of ours, or gave up: keep waiting for the real ranks
        };
        let reject = if their_world != world_size {
            Some(format!(
                "rank 0 has a world of {}, you have {their_world}",
                symmem::count_ranks(world_size)
            ))
        } else if rank == 0 || rank >= world_size {
            Some(format!(
                "rank {rank} is not valid in a world of {}",
                symmem::count_ranks(world_size)
            ))
        } else if slots[rank - 1].is_some() {
            Some(format!(
                "rank {rank} already joined; two processes claim the same RANK"
            ))
        } else {
            None
        };
        match reject {
            Some(reason) => {
                tracing::warn!(rank, %reason, "refused a rendezvous peer");
                let _ = wire::send(&stream, &Message::Reject { reason }, None);
            }
            None => {
                wire::send(&stream, &Message::Welcome, None)?;
                slots[rank - 1] = Some(stream);
            }
        }
    }
    Ok(slots.into_iter().flatten().collect())
}

pub(crate) fn connect_root(
    rank: usize,
    world_size: usize,
    dir: &Path,
    timeout: Duration,
) -> Result<UnixStream, BootstrapError> {
    let deadline = deadline_in(timeout);
    let path = dir.join(RENDEZVOUS_SOCKET);
    let stream = loop {
        // Opened anew each time: rank 0 may not have created it yet, or a previous job of
        // the same name may just be removing it.
        let attempt = match Folder::open(dir, Create::No) {
            Ok(folder) => folder.connect()?,
            Err(OpenError::Missing) => Err(ErrorKind::NotFound.into()),
            Err(OpenError::Refused(e)) => return Err(e),
        };
        match attempt {
            Ok(stream) => break stream,
            // Rank 0 has not bound yet, or a stale socket awaits its replacement.
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::ConnectionRefused) => {
                if Instant::now() >= deadline {
                    return Err(BootstrapError::ConnectTimeout {
                        rank,
                        path,
                        waited: timeout,
                    });
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) if e.kind() == ErrorKind::PermissionDenied => {
                return Err(BootstrapError::RendezvousNotWritable {
                    dir: dir.to_path_buf(),
                    cause: e,
                });
            }
            Err(e) => {
                return Err(BootstrapError::io(
                    format!("connecting to {}", path.display()),
                    e,
                ));
            }
        }
    };
    let creds = getsockopt(&stream, PeerCredentials)
        .map_err(|e| BootstrapError::io("reading rank 0's credentials", e))?;
    let me = nix::unistd::getuid().as_raw();
    if creds.uid() != me {
        return Err(BootstrapError::ForeignUid {
            uid: creds.uid(),
            pid: creds.pid(),
            expected: me,
        });
    }
    wire::send(&stream, &Message::Hello { rank, world_size }, None)?;
    match wire::recv(
        &stream,
        deadline.max(Instant::now() + Duration::from_secs(1)),
    )? {
        Received::Frame(Message::Welcome, _) => Ok(stream),
        Received::Frame(Message::Reject { reason }, _) => Err(BootstrapError::Handshake(format!(
            "{reason}; check that every rank of this job runs as the same user with the same \
             world size and distinct ranks"
        ))),
        Received::Frame(other, _) => Err(BootstrapError::Protocol(format!(
            "{other:?} instead of a welcome"
        ))),
        Received::Closed => Err(BootstrapError::Handshake(
            "rank 0 closed the connection without a welcome; see rank 0's output".into(),
        )),
        Received::TimedOut => Err(BootstrapError::Handshake(format!(
            "rank 0 accepted the connection but sent no welcome within {}; is it hung?",
            symmem::format_duration(timeout)
        ))),
    }
}

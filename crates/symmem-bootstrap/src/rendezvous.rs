use crate::folder::{Create, Folder, OpenError};
use crate::wire::{self, Message, Received};
use crate::{BootstrapError, CollectiveFailure};
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use std::io::ErrorKind;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use symmem::{CollectiveMismatch, CollectiveOp, RENDEZVOUS_SOCKET, RankIdentity, settings};

/// Extra wait of the other ranks beyond rank 0's timeout, so rank 0's explanation of a
/// failed collective reaches them before their own timeout fires.
const ANSWER_MARGIN: Duration = Duration::from_secs(5);

/// What one collective gathered from every rank.
#[derive(Debug, Default)]
pub struct Gathered {
    /// Each rank's payload, indexed by rank.
    pub payloads: Vec<Vec<u8>>,
    /// Descriptors sent by ranks of this rank's fd group (never this rank's own), by rank.
    pub fds: Vec<Option<OwnedFd>>,
}

enum Links {
    /// Rank 0: a stream to every other rank, index `rank - 1`.
    Root(Vec<UnixStream>),
    Leaf(UnixStream),
    Alone,
}

/// One rank's end of the control plane.
pub struct Bootstrap {
    rank: usize,
    world_size: usize,
    timeout: Duration,
    links: Links,
}

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

impl Bootstrap {
    /// Joins the job's rendezvous in `dir`: rank 0 waits for every other rank, the others
    /// connect to rank 0; both sides refuse a peer running as another user.
    ///
    /// `dir` (created by rank 0 if missing, removed again once everyone is in if it created
    /// it) must be a folder of this user that no one else can write, reached without a folder
    /// or link of another user on the way; rank 0 binds and the others connect through its
    /// descriptor, so its path may be of any length and cannot be swapped after the check.
    pub fn connect(
        rank: usize,
        world_size: usize,
        dir: &Path,
        timeout: Duration,
    ) -> Result<Self, BootstrapError> {
        if world_size == 0 {
            return Err(BootstrapError::WorldSizeZero);
        }
        if rank >= world_size {
            return Err(BootstrapError::RankOutOfRange { rank, world_size });
        }
        let links = if world_size == 1 {
            Links::Alone
        } else if rank == 0 {
            Links::Root(accept_all(dir, world_size, timeout)?)
        } else {
            Links::Leaf(connect_root(rank, world_size, dir, timeout)?)
        };
        Ok(Self {
            rank,
            world_size,
            timeout,
            links,
        })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }
    pub fn world_size(&self) -> usize {
        self.world_size
    }
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Collective: waits for every rank and checks that all issued `op`.
    pub fn barrier(&mut self, op: &CollectiveOp) -> Result<(), BootstrapError> {
        self.exchange(op, &[], None, 0).map(drop)
    }

    /// Collective all-gather: every rank contributes `payload` (and optionally one descriptor)
    /// under `op`; on agreement every rank receives all payloads, and the descriptors of the
    /// ranks that gave the same `fd_group`.
    pub fn exchange(
        &mut self,
        op: &CollectiveOp,
        payload: &[u8],
        fd: Option<BorrowedFd<'_>>,
        fd_group: u64,
    ) -> Result<Gathered, BootstrapError> {
        match &self.links {
            Links::Alone => Ok(Gathered {
                payloads: vec![payload.to_vec()],
                fds: vec![None],
            }),
            Links::Leaf(root) => leaf_exchange(
                root,
                self.world_size,
                self.timeout,
                op,
                payload,
                fd,
                fd_group,
            ),
            Links::Root(leaves) => root_exchange(leaves, self.timeout, op, payload, fd, fd_group),
        }
    }
}

struct Arrival {
    op: CollectiveOp,
    payload: Vec<u8>,
    fd_group: u64,
    fd: Option<OwnedFd>,
}

/// `now + d`, saturating far in the future instead of overflowing.
pub(crate) fn deadline_in(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

fn root_exchange(
    leaves: &[UnixStream],
    timeout: Duration,
    op: &CollectiveOp,
    payload: &[u8],
    fd: Option<BorrowedFd<'_>>,
    fd_group: u64,
) -> Result<Gathered, BootstrapError> {
    let world_size = leaves.len() + 1;
    let deadline = deadline_in(timeout);
    let mut arrivals: Vec<Option<Arrival>> = (0..world_size).map(|_| None).collect();
    let mut pending: Vec<usize> = (1..world_size).collect();
    let mut failure: Option<CollectiveFailure> = None;
    // Wait on every rank at once, so a rank that dies is noticed at once whoever is late.
    while !pending.is_empty() && failure.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            failure = Some(CollectiveFailure::NeverArrived {
                op: op.clone(),
                missing: pending.clone(),
                waited_ms: timeout.as_millis() as u64,
            });
            break;
        }
        let ready = wait_readable(leaves, &pending, left)?;
        for rank in ready {
            let leaf = &leaves[rank - 1];
            // The frame is under way: it completes quickly or the rank is broken.
            let frame_deadline = deadline_in(left.min(Duration::from_secs(10)));
            let problem = match wire::recv(leaf, frame_deadline) {
                Ok(Received::Frame(
                    Message::Arrive {
                        op,
                        payload,
                        fd_group,
                        has_fd,
                    },
                    fd,
                )) if has_fd == fd.is_some() => {
                    arrivals[rank] = Some(Arrival {
                        op,
                        payload,
                        fd_group,
                        fd,
                    });
                    pending.retain(|&r| r != rank);
                    continue;
                }
                Ok(Received::Frame(other, _)) => format!("sent {other:?} instead of its call"),
                Ok(Received::Closed) => {
                    failure = Some(CollectiveFailure::PeerGone {
                        rank,
                        op: op.clone(),
                    });
                    break;
                }
                Ok(Received::TimedOut) => "stopped in the middle of a message".to_string(),
                Err(e) => e.to_string(),
            };
            failure = Some(CollectiveFailure::Protocol {
                rank,
                op: op.clone(),
                what: problem,
            });
            break;
        }
    }
    if failure.is_none() {
        let ops: Vec<CollectiveOp> = std::iter::once(op.clone())
            .chain(arrivals.iter().skip(1).flatten().map(|a| a.op.clone()))
            .collect();
        failure = CollectiveMismatch::detect(&ops).map(CollectiveFailure::Mismatch);
    }
    if let Some(failure) = failure {
        // Every rank hears the same verdict (a rank that is gone cannot be told).
        for leaf in leaves {
            let _ = wire::send(
                leaf,
                &Message::Fail {
                    failure: failure.clone(),
                },
                None,
            );
        }
        return Err(failure.into());
    }

    let groups: Vec<u64> = std::iter::once(fd_group)
        .chain(arrivals.iter().skip(1).flatten().map(|a| a.fd_group))
        .collect();
    let payloads: Vec<Vec<u8>> = std::iter::once(payload.to_vec())
        .chain(arrivals.iter().skip(1).flatten().map(|a| a.payload.clone()))
        .collect();
    let fd_of = |rank: usize| -> Option<BorrowedFd<'_>> {
        if rank == 0 {
            fd
        } else {
            arrivals[rank]
                .as_ref()
                .and_then(|a| a.fd.as_ref().map(|f| f.as_fd()))
        }
    };
    for (i, leaf) in leaves.iter().enumerate() {
        let rank = i + 1;
        let fd_ranks: Vec<usize> = (0..world_size)
            .filter(|&q| q != rank && groups[q] == groups[rank] && fd_of(q).is_some())
            .collect();
        let release = Message::Release {
            payloads: payloads.clone(),
            fd_ranks: fd_ranks.clone(),
        };
        let sent = wire::send(leaf, &release, None).and_then(|()| {
            fd_ranks
                .iter()
                .try_for_each(|&q| wire::send(leaf, &Message::Fd { rank: q }, fd_of(q)))
        });
        if let Err(e) = sent {
            // That rank vanished after arriving; the others proceed and will see it gone at
            // the next collective.
            tracing::warn!(rank, error = %e, "could not release a rank from collective {op}");
        }
    }
    let fds = arrivals
        .into_iter()
        .enumerate()
        .map(|(rank, a)| {
            a.filter(|_| rank != 0 && groups[rank] == groups[0])
                .and_then(|a| a.fd)
        })
        .collect();
    Ok(Gathered { payloads, fds })
}

/// Ranks among `pending` whose sockets have something to read (or hung up), waiting up to
/// `left`.
fn wait_readable(
    leaves: &[UnixStream],
    pending: &[usize],
    left: Duration,
) -> Result<Vec<usize>, BootstrapError> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let mut fds: Vec<PollFd<'_>> = pending
        .iter()
        .map(|&r| PollFd::new(leaves[r - 1].as_fd(), PollFlags::POLLIN))
        .collect();
    let ms = i32::try_from(left.as_millis().max(1)).unwrap_or(i32::MAX);
    let timeout = PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX);
    match poll(&mut fds, timeout) {
        Ok(_) | Err(nix::errno::Errno::EINTR) => {}
        Err(e) => return Err(BootstrapError::io("waiting for ranks", e)),
    }
    Ok(pending
        .iter()
        .zip(&fds)
        .filter(|(_, f)| f.revents().is_some_and(|r| !r.is_empty()))
        .map(|(&rank, _)| rank)
        .collect())
}

fn leaf_exchange(
    root: &UnixStream,
    world_size: usize,
    timeout: Duration,
    op: &CollectiveOp,
    payload: &[u8],
    fd: Option<BorrowedFd<'_>>,
    fd_group: u64,
) -> Result<Gathered, BootstrapError> {
    let arrive = Message::Arrive {
        op: op.clone(),
        payload: payload.to_vec(),
        fd_group,
        has_fd: fd.is_some(),
    };
    if wire::send(root, &arrive, fd).is_err() {
        return Err(BootstrapError::RootGone { op: op.clone() });
    }
    let deadline = deadline_in(timeout.saturating_add(ANSWER_MARGIN));
    let answer = |deadline| -> Result<(Message, Option<OwnedFd>), BootstrapError> {
        match wire::recv(root, deadline)? {
            Received::Frame(message, fd) => Ok((message, fd)),
            Received::Closed => Err(BootstrapError::RootGone { op: op.clone() }),
            Received::TimedOut => Err(BootstrapError::RootSilent {
                op: op.clone(),
                waited: timeout.saturating_add(ANSWER_MARGIN),
            }),
        }
    };
    match answer(deadline)? {
        (Message::Release { payloads, fd_ranks }, _) if payloads.len() == world_size => {
            let mut fds: Vec<Option<OwnedFd>> = (0..world_size).map(|_| None).collect();
            for expected in fd_ranks {
                match answer(deadline)? {
                    (Message::Fd { rank }, Some(fd)) if rank == expected && rank < world_size => {
                        fds[rank] = Some(fd);
                    }
                    (other, _) => {
                        return Err(BootstrapError::Protocol(format!(
                            "expected the descriptor of rank {expected}, got {other:?}"
                        )));
                    }
                }
            }
            Ok(Gathered { payloads, fds })
        }
        (Message::Fail { failure }, _) => Err(failure.into()),
        (other, _) => Err(BootstrapError::Protocol(format!(
            "expected the answer to collective {op}, got {other:?}"
        ))),
    }
}

fn accept_all(
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

fn connect_root(
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

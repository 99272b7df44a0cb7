//! The handshake: how the ranks of one job meet. Rank 0 checks the rendezvous folder, binds
//! `<folder>/rank0.sock` and accepts every other rank; each other rank connects, sends `Hello`
//! (its rank, world size, job evidence and emulated node) and gets `Reject` with the reason at
//! once, or `Welcome` with every rank's emulated node once every rank is in (the node list
//! rides on the welcome: no message more than a bare handshake). Both sides read the peer's
//! uid (`SO_PEERCRED`) and refuse another user.
//!
//! Two jobs may be given one folder (one `SYMMEM_RENDEZVOUS` exported for both, or launchers'
//! job ids that coincide). Rank 0 welcomes only ranks that show its own world size and job
//! evidence ([`symmem::job_evidence`]: the launcher's job and run ids), so their ranks are
//! never mixed; a rank of the other job gets an error naming both jobs, and so does a second
//! rank 0, which asks the one listening which job it serves. Once everyone is in, the socket file
//! is removed; the streams stay open for the [`exchange`](crate::exchange).

use crate::BootstrapError;
use crate::folder::{Create, Folder, OpenError};
use crate::wire::{self, Message, PROTOCOL, Received, deadline_in};
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use std::io::ErrorKind;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use symmem::settings::{self, RENDEZVOUS};
use symmem::{RENDEZVOUS_SOCKET, RankIdentity};

/// The rendezvous folder for this job: [`settings::RENDEZVOUS`] (`$SYMMEM_RENDEZVOUS`), or
/// `symmem-<uid>/<job id>` under `$XDG_RUNTIME_DIR` (else the temp folder), the job id being
/// the launcher's (torchrun's `MASTER_ADDR-MASTER_PORT`, Slurm's job and step, Open MPI's or
/// PMI's namespace).
///
/// The name is derived, not random (except a group's meeting's, whose job name rank 0 drew at
/// random: [`Meeting::identity`](crate::Meeting::identity)): the ranks share no secret to
/// derive it from. Anyone can
/// guess it, so [`Bootstrap::connect`] refuses the folder unless the job folder is this user's
/// own and private and nothing on the way (`symmem-<uid>` included) belongs to another user or
/// is writable by everyone: a name taken first by someone else is detected and refused, never
/// used.
pub fn default_rendezvous(identity: &RankIdentity) -> Result<PathBuf, BootstrapError> {
    if let Some(dir) = settings::RENDEZVOUS.read_path() {
        return Ok(dir);
    }
    let user = rendezvous_base().join(format!("symmem-{}", nix::unistd::getuid()));
    match (&identity.job_key, identity.world_size) {
        (Some(key), _) => Ok(user.join(key)),
        (None, 1) => Ok(user.join(format!("singleton-{}", std::process::id()))),
        (None, _) => Err(BootstrapError::NoRendezvous),
    }
}

/// The folder the ranks of a node meet below: [`RENDEZVOUS`](settings::RENDEZVOUS) where set,
/// else `$XDG_RUNTIME_DIR`, else the temp folder (`/tmp`).
pub(crate) fn rendezvous_base() -> PathBuf {
    settings::RENDEZVOUS.read_path().unwrap_or_else(|| {
        std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir)
    })
}

/// Which folder [`rendezvous_base`] is, as the kernel tells folders apart (device and inode
/// of it, or of its nearest existing parent): ranks of one host whose answers differ cannot
/// meet there (each container has a /tmp of its own). The path, for messages.
pub(crate) fn rendezvous_base_id() -> (PathBuf, Option<(u64, u64)>) {
    use std::os::unix::fs::MetadataExt;
    let base = rendezvous_base();
    let id = base
        .ancestors()
        .find_map(|dir| std::fs::metadata(dir).ok())
        .map(|m| (m.dev(), m.ino()));
    (base, id)
}

/// This process's job evidence ([`symmem::job_evidence`]), read from its environment.
fn own_job() -> Vec<(String, String)> {
    symmem::job_evidence(|name| std::env::var(name).ok())
}

/// A job as the handshake's errors show it: its world size and its evidence.
fn describe_job(world_size: usize, job: &[(String, String)]) -> String {
    let evidence = if job.is_empty() {
        "no launcher job id".to_string()
    } else {
        job.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    format!("[{}, {evidence}]", symmem::count_ranks(world_size))
}

/// Rank 0's side: every other rank's stream (index `rank - 1`) and every rank's emulated node,
/// rank 0's being `node`.
pub(crate) fn accept_all(
    dir: &Path,
    world_size: usize,
    node: u64,
    timeout: Duration,
) -> Result<(Vec<UnixStream>, Vec<u64>), BootstrapError> {
    let job = own_job();
    // A concurrent job of ours may remove the (empty) folder between our open and our bind:
    // start over a few times rather than fail.
    let mut attempts = 0;
    // Declared before the folder, so dropped after it: a SIGTERM while waiting ends this
    // process only once the folder is gone.
    let term = TermGuard::install();
    loop {
        // Folders this rank creates are removed again once everyone is in (innermost first),
        // as the folder drops.
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
        // The socket file is only needed until everyone is in; it is removed on every exit
        // path, as `bound` drops (before `folder`).
        match folder.bind() {
            Ok(bound) => {
                let streams =
                    accept_on(&bound.listener, &folder, world_size, timeout, &job, &term)?;
                return welcome_all(streams, node);
            }
            Err(BootstrapError::RendezvousNotWritable { cause, .. })
                if cause.kind() == ErrorKind::NotFound && attempts < 20 =>
            {
                attempts += 1;
            }
            Err(BootstrapError::RendezvousInUse { path }) => {
                return Err(ask_who_listens(&folder, world_size, &job)
                    .unwrap_or(BootstrapError::RendezvousInUse { path }));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Another rank 0 listens in our folder: ask it which job it serves, so that the error names
/// both jobs. `None` when it does not say.
fn ask_who_listens(
    folder: &Folder,
    world_size: usize,
    job: &[(String, String)],
) -> Option<BootstrapError> {
    let stream = folder.connect().ok()?.ok()?;
    let hello = Message::Hello {
        rank: 0,
        world_size,
        job: job.to_vec(),
        node: 0,
        protocol: PROTOCOL,
    };
    wire::send(&stream, &hello, None).ok()?;
    match wire::recv(&stream, Instant::now() + Duration::from_secs(2)).ok()? {
        Received::Frame(Message::Reject { reason }, _) => Some(BootstrapError::Handshake(reason)),
        _ => None,
    }
}

/// A rank's `Hello`, as rank 0 received it.
struct PeerHello {
    rank: usize,
    world_size: usize,
    job: Vec<(String, String)>,
    node: u64,
    protocol: u32,
}

/// Once every rank is in: every rank's emulated node, sent to each in its `Welcome`.
fn welcome_all(
    streams: Vec<(UnixStream, u64)>,
    node: u64,
) -> Result<(Vec<UnixStream>, Vec<u64>), BootstrapError> {
    let nodes: Vec<u64> = std::iter::once(node)
        .chain(streams.iter().map(|(_, n)| *n))
        .collect();
    let welcome = Message::Welcome {
        nodes: nodes.clone(),
        protocol: PROTOCOL,
    };
    for (index, (stream, _)) in streams.iter().enumerate() {
        wire::send(stream, &welcome, None).map_err(|e| match e {
            // Its end of the stream closed after its hello: the rank went away (killed, or
            // crashed) while the others were still coming. Name it, as a witness would.
            BootstrapError::Io { cause, .. }
                if matches!(
                    cause.kind(),
                    ErrorKind::BrokenPipe | ErrorKind::ConnectionReset
                ) =>
            {
                BootstrapError::LeftBeforeWelcome {
                    rank: index + 1,
                    centre: 0,
                }
            }
            other => other,
        })?;
    }
    Ok((streams.into_iter().map(|(s, _)| s).collect(), nodes))
}

fn accept_on(
    listener: &UnixListener,
    folder: &Folder,
    world_size: usize,
    timeout: Duration,
    job: &[(String, String)],
    term: &TermGuard,
) -> Result<Vec<(UnixStream, u64)>, BootstrapError> {
    let path = folder.socket_display();
    listener
        .set_nonblocking(true)
        .map_err(|e| BootstrapError::io("configuring the rendezvous socket", e))?;
    let me = nix::unistd::getuid().as_raw();
    let deadline = deadline_in(timeout);
    let ours = describe_job(world_size, job);
    let mut slots: Vec<Option<(UnixStream, u64)>> = (1..world_size).map(|_| None).collect();
    while slots.iter().any(Option::is_none) {
        let Some(stream) = accept_next(listener, deadline, term)? else {
            let missing = (1..world_size).filter(|r| slots[r - 1].is_none()).collect();
            return Err(BootstrapError::AcceptTimeout {
                missing,
                centre: 0,
                path,
                waited: timeout,
            });
        };
        if !same_user(&stream, me)? {
            continue;
        }
        let Some(hello) = read_hello(&stream, deadline, timeout) else {
            continue; // not one of ours, or gave up: keep waiting for the real ranks
        };
        match rejection(folder, world_size, job, &ours, &hello, &slots) {
            Some(reason) => {
                tracing::warn!(rank = hello.rank, %reason, "refused a rendezvous peer");
                let _ = wire::send(&stream, &Message::Reject { reason }, None);
            }
            // A rank of this job on another build: both sides fail at once, naming both.
            None if hello.protocol != PROTOCOL => {
                let error = BootstrapError::ProtocolMismatch {
                    rank: hello.rank,
                    theirs: hello.protocol,
                    this: 0,
                    ours: PROTOCOL,
                };
                let reason = error.to_string();
                let _ = wire::send(&stream, &Message::Reject { reason }, None);
                return Err(error);
            }
            None => slots[hello.rank - 1] = Some((stream, hello.node)),
        }
    }
    Ok(slots.into_iter().flatten().collect())
}

/// The next connection on the (non-blocking) listener; `None` once `deadline` has passed
/// with none waiting.
fn accept_next(
    listener: &UnixListener,
    deadline: Instant,
    term: &TermGuard,
) -> Result<Option<UnixStream>, BootstrapError> {
    loop {
        if term.caught() {
            let cause = std::io::Error::new(ErrorKind::Interrupted, "SIGTERM");
            return Err(BootstrapError::io("waiting for the ranks", cause));
        }
        match listener.accept() {
            Ok((stream, _)) => return Ok(Some(stream)),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Ok(None);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(BootstrapError::io("accepting a rank", e)),
        }
    }
}

/// Makes the stream blocking and checks that its peer runs as uid `me`; a peer of another
/// user is sent a `Reject` and `false` is returned.
fn same_user(stream: &UnixStream, me: u32) -> Result<bool, BootstrapError> {
    stream
        .set_nonblocking(false)
        .map_err(|e| BootstrapError::io("configuring a rank's socket", e))?;
    let creds = getsockopt(stream, PeerCredentials)
        .map_err(|e| BootstrapError::io("reading a peer's credentials", e))?;
    if creds.uid() == me {
        return Ok(true);
    }
    let reason = format!(
        "rank 0 runs as uid {me}, this process as uid {}; run every rank of a job as \
         the same user",
        creds.uid()
    );
    tracing::warn!(
        uid = creds.uid(),
        pid = creds.pid(),
        "refused a rendezvous peer of another user"
    );
    let _ = wire::send(stream, &Message::Reject { reason }, None);
    Ok(false)
}

/// The peer's `Hello`, or `None` when it sends something else or nothing in time.
fn read_hello(stream: &UnixStream, deadline: Instant, timeout: Duration) -> Option<PeerHello> {
    // A connection that says nothing is not one of ours; it may not hold up the others.
    let hello_deadline = deadline_in(Duration::from_secs(2).min(timeout)).min(deadline);
    match wire::recv(stream, hello_deadline) {
        Ok(Received::Frame(
            Message::Hello {
                rank,
                world_size,
                job,
                node,
                protocol,
            },
            None,
        )) => Some(PeerHello {
            rank,
            world_size,
            job,
            node,
            protocol,
        }),
        _ => None,
    }
}

/// Why rank 0 (of job `ours`: `world_size`, `job`) refuses this `Hello`; `None` to welcome it.
fn rejection(
    folder: &Folder,
    world_size: usize,
    job: &[(String, String)],
    ours: &str,
    hello: &PeerHello,
    slots: &[Option<(UnixStream, u64)>],
) -> Option<String> {
    let rank = hello.rank;
    let theirs = describe_job(hello.world_size, &hello.job);
    let shared = format!(
        "two jobs share the rendezvous folder {}: rank 0 there is of job {ours}, this \
         process (rank {rank}) of job {theirs}; give each job its own folder with {}",
        folder.path().display(),
        RENDEZVOUS.name
    );
    if hello.world_size != world_size || hello.job != job {
        Some(shared)
    } else if rank == 0 {
        Some(format!(
            "rank 0 of job {ours} already listens in {}: two processes claim rank 0; \
             either two jobs that carry the same launcher variables share this folder \
             (give each its own {}), or RANK is wrong",
            folder.path().display(),
            RENDEZVOUS.name
        ))
    } else if rank >= world_size {
        Some(format!(
            "rank {rank} is not valid in a world of {}; check the launcher's RANK",
            symmem::count_ranks(world_size)
        ))
    } else if slots[rank - 1].is_some() {
        Some(format!(
            "rank {rank} of job {ours} already joined: two processes claim rank {rank}; \
             either two jobs that carry the same launcher variables share the folder {} \
             (give each its own {}), or RANK is wrong",
            folder.path().display(),
            RENDEZVOUS.name
        ))
    } else {
        None
    }
}

/// A rank's side other than 0: its stream to rank 0 and every rank's emulated node, this
/// rank's being `node`.
pub(crate) fn connect_root(
    rank: usize,
    world_size: usize,
    node: u64,
    dir: &Path,
    timeout: Duration,
) -> Result<(UnixStream, Vec<u64>), BootstrapError> {
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
                        centre: 0,
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
    let hello = Message::Hello {
        rank,
        world_size,
        job: own_job(),
        node,
        protocol: PROTOCOL,
    };
    wire::send(&stream, &hello, None)?;
    // Rank 0 welcomes once every rank is in, or gives up within its own timeout, which
    // started before this rank could connect.
    match wire::recv(
        &stream,
        deadline_in(timeout.saturating_add(Duration::from_secs(1))),
    )? {
        Received::Frame(Message::Welcome { protocol, .. }, _) if protocol != PROTOCOL => {
            Err(BootstrapError::ProtocolMismatch {
                rank: 0,
                theirs: protocol,
                this: rank,
                ours: PROTOCOL,
            })
        }
        Received::Frame(Message::Welcome { nodes, .. }, _) if nodes.len() == world_size => {
            Ok((stream, nodes))
        }
        Received::Frame(Message::Reject { reason }, _) => Err(BootstrapError::Handshake(reason)),
        Received::Frame(other, _) => Err(BootstrapError::Protocol(format!(
            "{other:?} instead of a welcome for {}",
            symmem::count_ranks(world_size)
        ))),
        Received::Closed => Err(BootstrapError::RootGaveUp),
        Received::TimedOut => Err(BootstrapError::NoWelcome {
            centre: 0,
            waited: timeout.saturating_add(Duration::from_secs(1)),
        }),
    }
}

/// Set when SIGTERM came while a [`TermGuard`] was installed.
static TERM_CAUGHT: AtomicBool = AtomicBool::new(false);

extern "C" fn on_term(_: nix::libc::c_int) {
    TERM_CAUGHT.store(true, Ordering::SeqCst);
}

/// While rank 0 waits for the ranks in the folders it holds: a launcher ending the job (mpirun
/// after a peer was killed) sends SIGTERM, which would kill it with its folders left behind
/// (M9). Where SIGTERM's disposition is the default, it is caught instead; the wait ends, the
/// folders go as they drop, and the guard's drop restores the default and raises SIGTERM again,
/// so the process dies of it as it would have. A program's own disposition is left alone.
struct TermGuard {
    installed: bool,
}

impl TermGuard {
    fn install() -> Self {
        let catch = SigAction::new(
            SigHandler::Handler(on_term),
            SaFlags::empty(),
            SigSet::empty(),
        );
        // SAFETY: the handler only stores to an atomic.
        let installed = match unsafe { sigaction(Signal::SIGTERM, &catch) } {
            Ok(previous) if previous.handler() == SigHandler::SigDfl => true,
            Ok(previous) => {
                // SAFETY: puts back the disposition that was there.
                let _ = unsafe { sigaction(Signal::SIGTERM, &previous) };
                false
            }
            Err(_) => false,
        };
        Self { installed }
    }

    fn caught(&self) -> bool {
        self.installed && TERM_CAUGHT.load(Ordering::SeqCst)
    }
}

impl Drop for TermGuard {
    fn drop(&mut self) {
        if !self.installed {
            return;
        }
        let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
        // SAFETY: restores the default disposition, which was there before.
        let _ = unsafe { sigaction(Signal::SIGTERM, &default) };
        if TERM_CAUGHT.load(Ordering::SeqCst) {
            let _ = nix::sys::signal::raise(Signal::SIGTERM);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use symmem::{Blame, ProviderError};

    /// A rank of this job on another build of the control protocol (here 1): rank 0 refuses it
    /// at once naming both versions, and fails itself, instead of waiting for a rank that can
    /// never join.
    #[test]
    fn a_rank_of_another_protocol_is_refused_at_once_naming_both() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        let timeout = Duration::from_secs(10);
        let rank0 = std::thread::spawn(move || accept_all(&path, 2, 0, timeout).map(drop));
        let socket = dir.path().join(RENDEZVOUS_SOCKET);
        let stream = loop {
            match UnixStream::connect(&socket) {
                Ok(stream) => break stream,
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        };
        let hello = Message::Hello {
            rank: 1,
            world_size: 2,
            job: own_job(),
            node: 0,
            protocol: 1,
        };
        wire::send(&stream, &hello, None).unwrap();
        let started = Instant::now();
        let err = rank0.join().unwrap().expect_err("another protocol");
        assert!(started.elapsed() < timeout / 2, "{:?}", started.elapsed());
        let text = err.to_string();
        assert!(
            matches!(
                err,
                BootstrapError::ProtocolMismatch {
                    rank: 1,
                    theirs: 1,
                    ..
                }
            ),
            "{text}"
        );
        assert!(
            text.contains(&format!("protocol 1, rank 0 runs {PROTOCOL}")),
            "{text}"
        );
        match wire::recv(&stream, deadline_in(Duration::from_secs(5))).unwrap() {
            Received::Frame(Message::Reject { reason }, _) => assert_eq!(reason, text),
            _ => panic!("the rank was not told why"),
        }
        let mut rest = Vec::new();
        let _ = (&stream).read_to_end(&mut rest);
    }

    /// A rank that said hello and then went away (killed) while the others were still coming:
    /// the centre names it as gone, a witness's error (no "broken pipe" of its own that would
    /// make the centre the culprit), in job ranks once seen from a node's own star.
    #[test]
    fn a_rank_gone_after_its_hello_is_named_by_the_centre() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        let timeout = Duration::from_secs(10);
        let rank0 = std::thread::spawn(move || accept_all(&path, 3, 0, timeout).map(drop));
        let socket = dir.path().join(RENDEZVOUS_SOCKET);
        let hello = |rank| {
            let stream = loop {
                match UnixStream::connect(&socket) {
                    Ok(stream) => break stream,
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            };
            let hello = Message::Hello {
                rank,
                world_size: 3,
                job: own_job(),
                node: 0,
                protocol: PROTOCOL,
            };
            wire::send(&stream, &hello, None).unwrap();
            stream
        };
        drop(hello(1));
        let _rank2 = hello(2);
        let err = rank0.join().unwrap().expect_err("rank 1 went away");
        assert!(
            matches!(
                err,
                BootstrapError::LeftBeforeWelcome { rank: 1, centre: 0 }
            ),
            "{err}"
        );
        assert_eq!(err.blame(), Blame::AnotherRank, "{err}");
        let witness = err.witness(0).expect("a witness's error");
        assert_eq!(witness.accused, vec![1]);
        assert_eq!(witness.gone, Some((1, None)));
        let on_node = err.on_node(&[4, 5, 6]);
        assert!(
            matches!(
                on_node,
                BootstrapError::LeftBeforeWelcome { rank: 5, centre: 4 }
            ),
            "{on_node}"
        );
        assert!(
            on_node.to_string().starts_with("rank 5 went away"),
            "{on_node}"
        );
    }

    /// The same seen from a rank: a rank 0 of another protocol (here 9) welcomes it, and it
    /// refuses naming both versions.
    #[test]
    fn a_rank_0_of_another_protocol_is_refused_naming_both() {
        let dir = tempfile::tempdir().unwrap();
        let listener = UnixListener::bind(dir.path().join(RENDEZVOUS_SOCKET)).unwrap();
        let rank0 = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let _hello = wire::recv(&stream, deadline_in(Duration::from_secs(5))).unwrap();
            let welcome = Message::Welcome {
                nodes: vec![0, 0],
                protocol: 9,
            };
            wire::send(&stream, &welcome, None).unwrap();
            stream
        });
        let err = connect_root(1, 2, 0, dir.path(), Duration::from_secs(5))
            .map(drop)
            .expect_err("another protocol");
        let text = err.to_string();
        assert!(
            matches!(
                err,
                BootstrapError::ProtocolMismatch {
                    rank: 0,
                    theirs: 9,
                    this: 1,
                    ..
                }
            ),
            "{text}"
        );
        drop(rank0.join().unwrap());
    }
}

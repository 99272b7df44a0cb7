//! The collective exchange: one all-gather per collective over the streams the
//! [handshake](crate::rendezvous) opened. Every rank sends `Arrive` (its `CollectiveOp`, its
//! payload, optionally one descriptor) to rank 0; rank 0 waits for every rank up to the
//! timeout, compares the calls, and answers every rank alike: `Release` with all payloads (then
//! the descriptors of the rank's fd group), or `Fail` with one [`CollectiveFailure`] naming the
//! ranks that never arrived, left, or disagreed.

use crate::calls::Payloads;
use crate::wire::{self, Message, Received, deadline_in};
use crate::{BootstrapError, CollectiveFailure};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};
use symmem::{CollectiveMismatch, CollectiveOp};

/// Extra wait of the other ranks beyond rank 0's timeout, so rank 0's explanation of a
/// failed collective reaches them before their own timeout fires.
pub(crate) const ANSWER_MARGIN: Duration = Duration::from_secs(5);

/// What one collective gathered from every rank.
#[derive(Debug, Default)]
pub struct Gathered {
    /// Each rank's payload, indexed by rank.
    pub payloads: Vec<Vec<u8>>,
    /// Descriptors sent by ranks of this rank's fd group (never this rank's own), by rank.
    pub fds: Vec<Option<OwnedFd>>,
}

pub(crate) struct Arrival {
    pub(crate) op: CollectiveOp,
    pub(crate) payload: Vec<u8>,
    pub(crate) fd_group: u64,
    pub(crate) fd: Option<OwnedFd>,
}

/// Rank 0's side of one collective: gathers every rank's call, compares them, and answers every
/// rank alike (see the module docs).
pub(crate) fn root_exchange(
    leaves: &[UnixStream],
    timeout: Duration,
    op: &CollectiveOp,
    payload: &[u8],
    fd: Option<BorrowedFd<'_>>,
    fd_group: u64,
) -> Result<Gathered, BootstrapError> {
    let verdict = gather(leaves, timeout, op)?.and_then(|arrivals| {
        let ops: Vec<CollectiveOp> = std::iter::once(op.clone())
            .chain(arrivals.iter().skip(1).flatten().map(|a| a.op.clone()))
            .collect();
        match CollectiveMismatch::detect(&ops) {
            Some(mismatch) => Err(CollectiveFailure::Mismatch(mismatch)),
            None => Ok(arrivals),
        }
    });
    match verdict {
        Ok(arrivals) => {
            let payloads: Vec<Vec<u8>> = std::iter::once(payload.to_vec())
                .chain(arrivals.iter().skip(1).flatten().map(|a| a.payload.clone()))
                .collect();
            let ranks: Vec<usize> = (0..leaves.len() + 1).collect();
            let mine = Own { fd, fd_group };
            let payloads = Payloads::compact(payloads);
            Ok(release(leaves, op, &ranks, payloads, arrivals, mine))
        }
        Err(failure) => Err(fail_all(leaves, failure).into()),
    }
}

/// Tells every other rank of the star that the collective failed, as `failure` says (a rank
/// that is gone cannot be told); `failure` back.
pub(crate) fn fail_all(leaves: &[UnixStream], failure: CollectiveFailure) -> CollectiveFailure {
    let message = Message::Fail {
        failure: failure.clone(),
    };
    for leaf in leaves {
        let _ = wire::send(leaf, &message, None);
    }
    failure
}

/// The centre's own share of a collective: its descriptor and fd group.
pub(crate) struct Own<'a> {
    pub(crate) fd: Option<BorrowedFd<'a>>,
    pub(crate) fd_group: u64,
}

/// Waits for every other rank's call until `timeout`: their arrivals by rank (rank 0's slot
/// empty), or the first failure seen.
pub(crate) fn gather(
    leaves: &[UnixStream],
    timeout: Duration,
    op: &CollectiveOp,
) -> Result<Result<Vec<Option<Arrival>>, CollectiveFailure>, BootstrapError> {
    let world_size = leaves.len() + 1;
    let deadline = deadline_in(timeout);
    let mut arrivals: Vec<Option<Arrival>> = (0..world_size).map(|_| None).collect();
    let mut pending: Vec<usize> = (1..world_size).collect();
    // Wait on every rank at once, so a rank that dies is noticed at once whoever is late.
    while !pending.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        // Past the deadline, one look without waiting still takes the calls that came before
        // it: a centre stopped or starved past its deadline must not name ranks that arrived.
        for rank in wait_readable(leaves, &pending, left)? {
            match receive_arrival(&leaves[rank - 1], rank, left, op) {
                Ok(arrival) => {
                    arrivals[rank] = Some(arrival);
                    pending.retain(|&r| r != rank);
                }
                Err(failure) => return Ok(Err(failure)),
            }
        }
        if left.is_zero() && !pending.is_empty() {
            return Ok(Err(CollectiveFailure::NeverArrived {
                op: op.clone(),
                missing: pending,
                waited_ms: timeout.as_millis() as u64,
            }));
        }
    }
    Ok(Ok(arrivals))
}

/// Reads the call of `rank`, whose socket is readable: the frame is under way, so it completes
/// quickly or the rank is broken.
fn receive_arrival(
    leaf: &UnixStream,
    rank: usize,
    left: Duration,
    op: &CollectiveOp,
) -> Result<Arrival, CollectiveFailure> {
    let frame_deadline = deadline_in(left.min(Duration::from_secs(10)));
    let what = match wire::recv(leaf, frame_deadline) {
        Ok(Received::Frame(
            Message::Arrive {
                op,
                payload,
                fd_group,
                has_fd,
            },
            fd,
        )) if has_fd == fd.is_some() => {
            return Ok(Arrival {
                op,
                payload,
                fd_group,
                fd,
            });
        }
        Ok(Received::Frame(other, _)) => format!("sent {other:?} instead of its call"),
        Ok(Received::Closed) => {
            return Err(CollectiveFailure::PeerGone {
                rank,
                op: op.clone(),
            });
        }
        Ok(Received::TimedOut) => "stopped in the middle of a message".to_string(),
        Err(e) => e.to_string(),
    };
    Err(CollectiveFailure::Protocol {
        rank,
        op: op.clone(),
        what,
    })
}

/// Releases every other rank of the star with `payloads` (every rank of the job's, by rank)
/// and the descriptors of its fd group; this rank's share of both. `ranks` maps the star's
/// ranks (0 the centre) to the job's; `arrivals` are by star rank.
pub(crate) fn release(
    leaves: &[UnixStream],
    op: &CollectiveOp,
    ranks: &[usize],
    payloads: Payloads,
    arrivals: Vec<Option<Arrival>>,
    own: Own<'_>,
) -> Gathered {
    let groups: Vec<u64> = std::iter::once(own.fd_group)
        .chain(arrivals.iter().skip(1).flatten().map(|a| a.fd_group))
        .collect();
    let fd_of = |local: usize| -> Option<BorrowedFd<'_>> {
        if local == 0 {
            own.fd
        } else {
            arrivals[local]
                .as_ref()
                .and_then(|a| a.fd.as_ref().map(|f| f.as_fd()))
        }
    };
    for (i, leaf) in leaves.iter().enumerate() {
        let local = i + 1;
        let fd_locals: Vec<usize> = (0..ranks.len())
            .filter(|&q| q != local && groups[q] == groups[local] && fd_of(q).is_some())
            .collect();
        let release = Message::Release {
            payloads: payloads.clone(),
            fd_ranks: fd_locals.iter().map(|&q| ranks[q]).collect(),
        };
        let sent = wire::send(leaf, &release, None).and_then(|()| {
            fd_locals
                .iter()
                .try_for_each(|&q| wire::send(leaf, &Message::Fd { rank: ranks[q] }, fd_of(q)))
        });
        if let Err(e) = sent {
            // That rank vanished after arriving; the others proceed and will see it gone at
            // the next collective.
            let rank = ranks[local];
            tracing::warn!(rank, error = %e, "could not release a rank from collective {op}");
        }
    }
    let mut fds: Vec<Option<OwnedFd>> = (0..payloads.len()).map(|_| None).collect();
    for (local, a) in arrivals.into_iter().enumerate() {
        if local != 0 && groups[local] == groups[0] {
            fds[ranks[local]] = a.and_then(|a| a.fd);
        }
    }
    let payloads = payloads.expand();
    Gathered { payloads, fds }
}

/// Ranks among `pending` whose sockets have something to read (or hung up), waiting up to
/// `left`.
fn wait_readable(
    leaves: &[UnixStream],
    pending: &[usize],
    left: Duration,
) -> Result<Vec<usize>, BootstrapError> {
    let fds: Vec<BorrowedFd<'_>> = pending.iter().map(|&r| leaves[r - 1].as_fd()).collect();
    let ready = poll_readable(&fds, left)?;
    Ok(ready.into_iter().map(|i| pending[i]).collect())
}

/// Indexes of `fds` that have something to read (or hung up), waiting up to `left`.
pub(crate) fn poll_readable(
    fds: &[BorrowedFd<'_>],
    left: Duration,
) -> Result<Vec<usize>, BootstrapError> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let mut polled: Vec<PollFd<'_>> = fds
        .iter()
        .map(|fd| PollFd::new(*fd, PollFlags::POLLIN))
        .collect();
    // Zero only when `left` is: a last look without waiting (a sub-millisecond wait rounds up).
    let ms = match left.as_millis() {
        0 if left.is_zero() => 0,
        ms => ms.max(1),
    };
    let ms = i32::try_from(ms).unwrap_or(i32::MAX);
    let timeout = PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX);
    match poll(&mut polled, timeout) {
        Ok(_) | Err(nix::errno::Errno::EINTR) => {}
        Err(e) => return Err(BootstrapError::io("waiting for ranks", e)),
    }
    Ok(polled
        .iter()
        .enumerate()
        .filter(|(_, f)| f.revents().is_some_and(|r| !r.is_empty()))
        .map(|(i, _)| i)
        .collect())
}

/// A rank's side of one collective: its call to the centre of its star, then the answer,
/// waited for up to `timeout` and `margin` beyond (the centre's own wait, and any beyond it).
#[allow(clippy::too_many_arguments)]
pub(crate) fn leaf_exchange(
    root: &UnixStream,
    world_size: usize,
    timeout: Duration,
    margin: Duration,
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
    let waited = timeout.saturating_add(margin);
    let deadline = deadline_in(waited);
    let answer = |deadline| -> Result<(Message, Option<OwnedFd>), BootstrapError> {
        match wire::recv(root, deadline)? {
            Received::Frame(message, fd) => Ok((message, fd)),
            Received::Closed => Err(BootstrapError::RootGone { op: op.clone() }),
            Received::TimedOut => Err(BootstrapError::RootSilent {
                op: op.clone(),
                waited,
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
            let payloads = payloads.expand();
            Ok(Gathered { payloads, fds })
        }
        (Message::Fail { failure }, _) => Err(failure.into()),
        (other, _) => Err(BootstrapError::Protocol(format!(
            "expected the answer to collective {op}, got {other:?}"
        ))),
    }
}

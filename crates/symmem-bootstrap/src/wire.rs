//! Length-prefixed JSON frames over a Unix stream socket, each optionally carrying one file
//! descriptor (SCM_RIGHTS, attached to the frame's first byte).

use crate::BootstrapError;
use crate::calls::{Calls, Payloads};
use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};
use serde::{Deserialize, Serialize};
use std::io::{IoSlice, IoSliceMut, Read};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};
use symmem::CollectiveOp;

/// The version of symmem's control protocol: the Unix handshake (`Hello`, `Welcome`), the
/// engines' cards and the TCP handshake carry it, and ranks of different versions refuse each
/// other at once, naming both ([`BootstrapError::ProtocolMismatch`]). Raise it with any change
/// to a message's meaning or layout (a build from before it had none: 0).
pub(crate) const PROTOCOL: u32 = 4;

/// Frames bigger than this are a protocol error (payloads are small: ids, sizes).
const MAX_FRAME: usize = 16 << 20;

#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Message {
    Hello {
        rank: usize,
        world_size: usize,
        /// The job this rank belongs to, as its launcher's variables name it
        /// ([`symmem::job_evidence`]): rank 0 welcomes only ranks of its own job.
        job: Vec<(String, String)>,
        /// Its emulated node ([`symmem::settings::NODE_ID`]).
        node: u64,
        /// Its [`PROTOCOL`].
        #[serde(default)]
        protocol: u32,
    },
    /// Sent to every rank once all are in: the emulated node of every rank, by rank.
    Welcome {
        nodes: Vec<u64>,
        /// Rank 0's [`PROTOCOL`].
        #[serde(default)]
        protocol: u32,
    },
    Reject {
        reason: String,
    },
    Arrive {
        op: CollectiveOp,
        payload: Vec<u8>,
        fd_group: u64,
        has_fd: bool,
    },
    Release {
        /// Every rank's payload, by rank.
        payloads: Payloads,
        /// Ranks whose descriptors follow, one `Fd` frame each, in this order.
        fd_ranks: Vec<usize>,
    },
    Fd {
        rank: usize,
    },
    Fail {
        failure: crate::CollectiveFailure,
    },
    /// Across nodes, a node leader to the leader above it over TCP: the calls of every rank
    /// of its node and of the nodes below it, folded, once all arrived (a failure among them
    /// travels as `Fail` instead). Descriptors stay on their node.
    NodeArrive {
        calls: Calls,
    },
}

/// One frame: the body's length (u32 LE), then the message as JSON.
pub(crate) fn encode(message: &Message) -> Result<Vec<u8>, BootstrapError> {
    let body = serde_json::to_vec(message).map_err(|e| BootstrapError::Protocol(e.to_string()))?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// The body length a frame's header announces, refused when over [`MAX_FRAME`].
pub(crate) fn frame_len(header: [u8; 4]) -> Result<usize, BootstrapError> {
    let len = u32::from_le_bytes(header) as usize;
    if len > MAX_FRAME {
        return Err(BootstrapError::Protocol(format!("frame of {len} bytes")));
    }
    Ok(len)
}

pub(crate) fn decode(body: &[u8]) -> Result<Message, BootstrapError> {
    let message: Message =
        serde_json::from_slice(body).map_err(|e| BootstrapError::Protocol(e.to_string()))?;
    // Payloads that are the same on every rank travel once: bound them as they will be held.
    let expanded = match &message {
        Message::Release { payloads, .. } => payloads.expanded_bytes(),
        Message::NodeArrive { calls } => calls.payloads.expanded_bytes(),
        _ => 0,
    };
    if expanded > MAX_FRAME {
        return Err(BootstrapError::Protocol(format!(
            "payloads of {expanded} bytes once expanded (at most {MAX_FRAME})"
        )));
    }
    Ok(message)
}

pub(crate) enum Received {
    Frame(Message, Option<OwnedFd>),
    Closed,
    TimedOut,
}

pub(crate) fn send(
    stream: &UnixStream,
    message: &Message,
    fd: Option<BorrowedFd<'_>>,
) -> Result<(), BootstrapError> {
    let frame = encode(message)?;
    let raw: [RawFd; 1] = [fd.map_or(-1, |f| f.as_raw_fd())];
    let rights = [ControlMessage::ScmRights(&raw)];
    let cmsgs: &[ControlMessage<'_>] = if fd.is_some() { &rights } else { &[] };
    let sent = loop {
        match sendmsg::<()>(
            stream.as_raw_fd(),
            &[IoSlice::new(&frame)],
            cmsgs,
            MsgFlags::MSG_NOSIGNAL,
            None,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => break other,
        }
    }
    .map_err(|e| BootstrapError::io("sending a control message", e))?;
    // A stream socket may take a large frame in pieces; the descriptor went with the first.
    // MSG_NOSIGNAL throughout: a vanished peer is an error here, never a SIGPIPE.
    let mut rest = &frame[sent..];
    while !rest.is_empty() {
        match nix::sys::socket::send(stream.as_raw_fd(), rest, MsgFlags::MSG_NOSIGNAL) {
            Ok(n) => rest = &rest[n..],
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(BootstrapError::io("sending a control message", e)),
        }
    }
    Ok(())
}

/// Receives one frame, waiting until `deadline` at most.
pub(crate) fn recv(stream: &UnixStream, deadline: Instant) -> Result<Received, BootstrapError> {
    let mut header = [0u8; 4];
    let mut fd = None;
    let mut got = 0;
    while got == 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        // Past the deadline, one look without waiting: what came before it still counts (a
        // process stopped or starved past its deadline must not call a peer that answered
        // in time silent).
        let mut flags = MsgFlags::MSG_CMSG_CLOEXEC;
        if left.is_zero() {
            flags |= MsgFlags::MSG_DONTWAIT;
        } else {
            stream
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .map_err(|e| BootstrapError::io("setting a socket timeout", e))?;
        }
        let mut cmsg = nix::cmsg_space!([RawFd; 1]);
        let mut iov = [IoSliceMut::new(&mut header)];
        match recvmsg::<()>(stream.as_raw_fd(), &mut iov, Some(&mut cmsg), flags) {
            Ok(msg) => {
                for c in msg
                    .cmsgs()
                    .map_err(|e| BootstrapError::io("reading ancillary data", e))?
                {
                    if let ControlMessageOwned::ScmRights(fds) = c {
                        for raw in fds {
                            // SAFETY: the kernel just installed this descriptor for us; we are
                            // its only owner.
                            let owned = unsafe { OwnedFd::from_raw_fd(raw) };
                            fd.get_or_insert(owned);
                        }
                    }
                }
                if msg.bytes == 0 {
                    return Ok(Received::Closed);
                }
                got = msg.bytes;
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(nix::errno::Errno::EAGAIN) => return Ok(Received::TimedOut),
            Err(nix::errno::Errno::ECONNRESET) => return Ok(Received::Closed),
            Err(e) => return Err(BootstrapError::io("receiving a control message", e)),
        }
    }
    let mut reader = stream;
    // The rest of the frame follows right away; allow a generous but bounded wait.
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| BootstrapError::io("setting a socket timeout", e))?;
    if got < 4 {
        read_exact(&mut reader, &mut header[got..])?;
    }
    let mut body = vec![0u8; frame_len(header)?];
    read_exact(&mut reader, &mut body)?;
    Ok(Received::Frame(decode(&body)?, fd))
}

fn read_exact(reader: &mut &UnixStream, buf: &mut [u8]) -> Result<(), BootstrapError> {
    reader.read_exact(buf).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => {
            BootstrapError::Protocol("connection closed inside a frame".into())
        }
        _ => BootstrapError::io("receiving a control message", e),
    })
}

/// `now + d`, saturating far in the future instead of overflowing.
pub(crate) fn deadline_in(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

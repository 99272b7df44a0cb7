//! The TCP links between node leaders: how a node leader proves to rank 0 that it belongs to
//! the job, and the authenticated frames of the [`wire`](crate::wire) protocol over TCP.
//!
//! The job secret is 32 random bytes made by rank 0 and carried to every rank by the launcher:
//! inside the PMIx rendezvous data, or in a group's all-gather (torch.distributed). symmem
//! never sends it over these links, but the launcher may carry it between nodes in clear:
//! Open MPI's daemons forward the PMIx data over their own TCP links unencrypted, and
//! torch.distributed's store and gloo neither authenticate nor encrypt. The secret keeps out
//! other users of the nodes (it is never in argv or the environment, and PMIx's store is
//! private to the job's user) and hosts that cannot read the launcher's traffic. Whoever can
//! read that traffic can learn it and join as a leader. Nothing here is encrypted: frames are
//! authenticated, not hidden.
//!
//! Each connection runs a challenge and response over fresh nonces, HMAC-SHA256 keyed by the
//! secret:
//!
//! 1. rank 0 (server) sends `MAGIC`, then its nonce `ns` (32 bytes) as soon as it accepts;
//! 2. the leader (client) answers `MAGIC`, its rank (u64 LE), its nonce `nc` and
//!    `HMAC(secret, "symmem client" ‖ ns ‖ nc ‖ rank)`;
//! 3. rank 0 checks that proof and answers `HMAC(secret, "symmem server" ‖ nc ‖ ns ‖ rank)`,
//!    which the leader checks in turn.
//!
//! A client without the secret gets a random nonce and nothing more: its proof fails, and rank 0
//! closes the connection without a word. A recorded handshake cannot be replayed: rank 0's
//! nonce is fresh for every connection. Each handshake is bounded ([`HANDSHAKE_WAIT`]) and runs
//! on its own thread, so a client that stalls (slow-loris) or sends garbage holds up no one.
//!
//! Both ends then derive the connection's two frame keys ([`FrameKeys`]), one per direction:
//! `HMAC(secret, "symmem frames to rank 0" ‖ ns ‖ nc ‖ rank)` for the leader's frames and
//! `HMAC(secret, "symmem frames to a leader" ‖ ns ‖ nc ‖ rank)` for rank 0's. Every frame after
//! the handshake is `length (u32 LE) ‖ body ‖ tag`, the tag being
//! `HMAC(key, seq ‖ length ‖ body)` (32 bytes), `seq` the frame's number in its direction on
//! this connection (u64 LE, from 0), which each end counts and never sends. A frame that is
//! altered, replayed, reordered, dropped (the next one's number is wrong), sent back to its
//! sender or moved from another connection fails its tag; the [`Link`] then refuses every
//! later frame too, since the stream is out of step for good. An on-path host can still delay,
//! drop or cut the connection: that ends the collective as a lost or silent node does.

use crate::BootstrapError;
use crate::wire::{self, Message, PROTOCOL, Received};
use hmac::{Hmac, Mac};
use nix::errno::Errno;
use nix::sys::socket::{MsgFlags, sendmsg};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::collections::HashMap;
use std::io::{ErrorKind, IoSlice, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// Opens every handshake (both directions), so that a stray client of another protocol is told
/// apart at once. Its seventh byte is the control protocol's version ([`PROTOCOL`]: 2 since
/// frames carry tags, 3 since node leaders form a tree, 4 since calls travel folded), so that a
/// leader of an older build is refused at its handshake, not blamed for forged frames.
const MAGIC: &[u8; 8] = &[b's', b'y', b'm', b'm', b'e', b'm', PROTOCOL as u8, 0];
const NONCE: usize = 32;
/// The length of an HMAC-SHA256: a handshake's proofs, a frame's key and its tag.
pub(crate) const MAC: usize = 32;
/// The longest a client may take over its handshake before rank 0 drops it: a real leader
/// answers within a round trip, and one that misses it connects again.
pub(crate) const HANDSHAKE_WAIT: Duration = Duration::from_millis(500);
/// Handshakes rank 0 runs at once; connections beyond are closed at once.
const MAX_HANDSHAKES: usize = 64;
/// Handshakes rank 0 runs at once for one client address.
const MAX_PER_ADDRESS: usize = 8;
/// How often the accepting thread looks for listeners added and for its end.
const ACCEPT_TICK: Duration = Duration::from_millis(20);

type HmacSha256 = Hmac<Sha256>;

/// The job secret: made by rank 0, carried by the PMIx rendezvous or a group's all-gather
/// (in clear where the launcher's own traffic is), never sent over these links.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Secret([u8; 32]);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    /// 32 bytes from the kernel's random source.
    pub(crate) fn generate() -> Result<Self, BootstrapError> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| BootstrapError::Random(e.to_string()))?;
        Ok(Self(bytes))
    }

    #[cfg(test)]
    pub(crate) fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    fn mac(&self, label: &[u8], first: &[u8], second: &[u8], rank: u64) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("HMAC takes any key length");
        for part in [label, first, second, &rank.to_le_bytes()] {
            mac.update(part);
        }
        mac
    }
}

fn nonce() -> Result<[u8; NONCE], BootstrapError> {
    let mut bytes = [0u8; NONCE];
    getrandom::fill(&mut bytes).map_err(|e| BootstrapError::Random(e.to_string()))?;
    Ok(bytes)
}

/// Labels of a connection's two frame keys: the leader's frames to rank 0, rank 0's to it.
const TO_ROOT: &[u8] = b"symmem frames to rank 0";
const TO_LEADER: &[u8] = b"symmem frames to a leader";

/// The keys of one connection's frames, one per direction, derived at its handshake from the
/// secret, both nonces and the leader's rank (see the module docs).
pub(crate) struct FrameKeys {
    to_root: [u8; MAC],
    to_leader: [u8; MAC],
}

impl FrameKeys {
    fn derive(secret: &Secret, ns: &[u8], nc: &[u8], rank: u64) -> Self {
        let key = |label| {
            secret
                .mac(label, ns, nc, rank)
                .finalize()
                .into_bytes()
                .into()
        };
        Self {
            to_root: key(TO_ROOT),
            to_leader: key(TO_LEADER),
        }
    }

    /// Keys made of `byte`, for tests that build links without the handshake.
    #[cfg(test)]
    pub(crate) fn fixed(byte: u8) -> Self {
        Self {
            to_root: [byte; MAC],
            to_leader: [!byte; MAC],
        }
    }
}

/// Which end of a connection a [`Link`] is.
#[derive(Clone, Copy)]
pub(crate) enum End {
    Root,
    Leader,
}

/// One direction of a link: its key (as a ready HMAC state) and the number of its next frame.
struct Direction {
    mac: HmacSha256,
    seq: AtomicU64,
}

impl Direction {
    fn new(key: &[u8; MAC]) -> Self {
        Self {
            mac: HmacSha256::new_from_slice(key).expect("HMAC takes any key length"),
            seq: AtomicU64::new(0),
        }
    }

    /// The MAC of frame number `seq`, `frame` being its length and body.
    fn tag(&self, seq: u64, frame: &[u8]) -> HmacSha256 {
        let mut mac = self.mac.clone();
        mac.update(&seq.to_le_bytes());
        mac.update(frame);
        mac
    }
}

/// Authenticated frames this process's [`Link`]s sent and received (see [`control_frames`]).
static FRAMES_SENT: AtomicU64 = AtomicU64::new(0);
static FRAMES_RECEIVED: AtomicU64 = AtomicU64::new(0);

/// Counts of the authenticated frames on the TCP links between node leaders that this process
/// sent and received since it started, for benchmarks. The Unix star within a node is not
/// counted, nor are handshakes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ControlFrames {
    /// Frames this process's links sent (each frame once per link it went over).
    pub sent: u64,
    /// Frames this process's links received and found authentic.
    pub received: u64,
}

/// The frames this process's TCP links between node leaders have sent and received so far
/// ([`ControlFrames`]); take the difference of two readings around what is measured.
pub fn control_frames() -> ControlFrames {
    ControlFrames {
        sent: FRAMES_SENT.load(Ordering::Relaxed),
        received: FRAMES_RECEIVED.load(Ordering::Relaxed),
    }
}

/// A TCP link between rank 0 and a node leader, past its handshake: the stream and the keys
/// and counters of its frames in both directions.
pub(crate) struct Link {
    stream: TcpStream,
    /// Boxed: an HMAC state is some hundred bytes, and a [`Link`] rides in enums.
    out: Box<Direction>,
    into: Box<Direction>,
    /// Set once a frame failed its tag: what follows on the stream is out of step for good.
    refused: AtomicBool,
}

impl Link {
    /// `stream` as `end` of a connection whose handshake gave `keys`.
    pub(crate) fn new(stream: TcpStream, keys: &FrameKeys, end: End) -> Self {
        let (out, into) = match end {
            End::Root => (&keys.to_leader, &keys.to_root),
            End::Leader => (&keys.to_root, &keys.to_leader),
        };
        Self {
            stream,
            out: Box::new(Direction::new(out)),
            into: Box::new(Direction::new(into)),
            refused: AtomicBool::new(false),
        }
    }

    /// Sends one frame of the wire protocol.
    pub(crate) fn send(&self, message: &Message) -> Result<(), BootstrapError> {
        self.send_frame(&wire::encode(message)?)
    }

    /// Sends one frame [`wire::encode`] made (once for every leader), tagged for this link.
    pub(crate) fn send_frame(&self, frame: &[u8]) -> Result<(), BootstrapError> {
        let seq = self.out.seq.fetch_add(1, Ordering::Relaxed);
        let tag = self.out.tag(seq, frame).finalize().into_bytes();
        self.stream
            .set_write_timeout(Some(Duration::from_secs(10)))
            .and_then(|()| write_both(&self.stream, frame, &tag))
            .map_err(|e| BootstrapError::io("sending a control message over TCP", e))?;
        FRAMES_SENT.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Receives one frame, waiting until `deadline` for it to start;
    /// [`BootstrapError::FrameUnauthenticated`] when it (or an earlier one) fails its tag.
    pub(crate) fn recv(&self, deadline: Instant) -> Result<Received, BootstrapError> {
        if self.refused.load(Ordering::Relaxed) {
            return Err(BootstrapError::FrameUnauthenticated);
        }
        let mut frame = vec![0u8; 4];
        let first = match first_bytes(&self.stream, &mut frame, deadline)? {
            Ok(first) => first,
            Err(other) => return Ok(other),
        };
        // The rest of the frame follows right away; allow a generous but bounded wait.
        let rest = Instant::now() + Duration::from_secs(10);
        let broken = |what: String| BootstrapError::Protocol(format!("{what} inside a frame"));
        read_all(&self.stream, &mut frame[first..], rest).map_err(broken)?;
        let len = wire::frame_len(frame[..4].try_into().expect("4 bytes"))?;
        frame.resize(4 + len + MAC, 0);
        read_all(&self.stream, &mut frame[4..], rest).map_err(broken)?;
        let (frame, tag) = frame.split_at(4 + len);
        let seq = self.into.seq.load(Ordering::Relaxed);
        if self.into.tag(seq, frame).verify_slice(tag).is_err() {
            self.refused.store(true, Ordering::Relaxed);
            return Err(BootstrapError::FrameUnauthenticated);
        }
        self.into.seq.store(seq + 1, Ordering::Relaxed);
        FRAMES_RECEIVED.fetch_add(1, Ordering::Relaxed);
        Ok(Received::Frame(wire::decode(&frame[4..])?, None))
    }
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("peer", &self.stream.peer_addr().ok())
            .finish_non_exhaustive()
    }
}

impl AsFd for Link {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }
}

/// A listener on `addr` alone (never every interface), on `port` (0: the kernel picks).
pub(crate) fn listen(addr: IpAddr, port: u16) -> Result<TcpListener, BootstrapError> {
    TcpListener::bind((addr, port))
        .map_err(|e| BootstrapError::io(format!("listening on this node's address {addr}"), e))
}

/// Rank 0's listeners, served from the moment the first opens (before the rendezvous) until
/// every leader has proven itself: a thread accepts, and each handshake runs on a thread of
/// its own, at most [`MAX_HANDSHAKES`] at once and [`MAX_PER_ADDRESS`] from one address (a
/// flood from one host leaves room for the others' leaders). Dropping it closes them.
pub(crate) struct Acceptor {
    add: mpsc::Sender<TcpListener>,
    /// In a mutex only to be `Sync` (a Python object holds the arrival).
    proven: Mutex<mpsc::Receiver<(usize, Link)>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Handshakes under way, in all and by the client's address.
#[derive(Default)]
struct InFlight {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
}

impl InFlight {
    /// Takes a slot for a handshake from `addr`, unless the caps are reached.
    fn admit(&mut self, addr: IpAddr) -> bool {
        let from = self.by_address.entry(addr).or_default();
        if self.total >= MAX_HANDSHAKES || *from >= MAX_PER_ADDRESS {
            return false;
        }
        *from += 1;
        self.total += 1;
        true
    }

    fn release(&mut self, addr: IpAddr) {
        self.total -= 1;
        if let Some(from) = self.by_address.get_mut(&addr) {
            *from -= 1;
            if *from == 0 {
                self.by_address.remove(&addr);
            }
        }
    }
}

impl Acceptor {
    /// Serves handshakes on `listener` for `secret` from now on.
    pub(crate) fn start(listener: TcpListener, secret: Secret) -> Result<Self, BootstrapError> {
        listener
            .set_nonblocking(true)
            .map_err(|e| BootstrapError::io("configuring the leaders' listener", e))?;
        let (add, added) = mpsc::channel();
        let (prove, proven) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("symmem-accept".into())
            .spawn(move || serve(vec![listener], &added, &prove, &secret, &stopping))
            .map_err(|e| BootstrapError::io("starting the leaders' listener", e))?;
        Ok(Self {
            add,
            proven: Mutex::new(proven),
            stop,
            thread: Some(thread),
        })
    }

    /// Serves `listener` too (the same secret).
    pub(crate) fn add(&self, listener: TcpListener) -> Result<(), BootstrapError> {
        listener
            .set_nonblocking(true)
            .map_err(|e| BootstrapError::io("configuring the leaders' listener", e))?;
        // The thread runs until `self` is dropped.
        let _ = self.add.send(listener);
        Ok(())
    }

    /// Waits until every rank of `expected` has proven it holds the secret, or `deadline`.
    /// Links in the order of `expected`; the missing ranks otherwise. The listeners close.
    pub(crate) fn leaders(
        self,
        expected: &[usize],
        deadline: Instant,
    ) -> Result<Vec<Link>, Vec<usize>> {
        let mut slots: Vec<Option<Link>> = expected.iter().map(|_| None).collect();
        let proven = self.proven.lock().expect("no panics under it");
        while slots.iter().any(Option::is_none) {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok((rank, link)) = proven.recv_timeout(left) else {
                let missing = (0..expected.len()).filter(|&i| slots[i].is_none());
                return Err(missing.map(|i| expected[i]).collect());
            };
            match expected.iter().position(|&r| r == rank) {
                Some(i) => slots[i] = Some(link),
                None => tracing::warn!(rank, "refused a node leader that is not expected"),
            }
        }
        Ok(slots.into_iter().flatten().collect())
    }
}

impl Drop for Acceptor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The accepting thread: `listeners` (and those `added`) until `stop`.
fn serve(
    mut listeners: Vec<TcpListener>,
    added: &mpsc::Receiver<TcpListener>,
    prove: &mpsc::Sender<(usize, Link)>,
    secret: &Secret,
    stop: &AtomicBool,
) {
    let in_flight = Arc::new(Mutex::new(InFlight::default()));
    while !stop.load(Ordering::Relaxed) {
        listeners.extend(added.try_iter());
        let fds: Vec<_> = listeners.iter().map(AsFd::as_fd).collect();
        let ready = match crate::exchange::poll_readable(&fds, ACCEPT_TICK) {
            Ok(ready) => ready,
            Err(e) => {
                tracing::warn!(error = %e, "the leaders' listener failed");
                return;
            }
        };
        for listener in ready.into_iter().map(|i| &listeners[i]) {
            while let Ok((stream, peer)) = listener.accept() {
                if !in_flight
                    .lock()
                    .expect("no panics under it")
                    .admit(peer.ip())
                {
                    // A flood from one address, or from many: the real leaders retry.
                    continue;
                }
                let (prove, secret, in_flight) = (prove.clone(), secret.clone(), in_flight.clone());
                std::thread::spawn(move || {
                    let proven = serve_handshake(&stream, &secret);
                    in_flight
                        .lock()
                        .expect("no panics under it")
                        .release(peer.ip());
                    match proven {
                        Ok((rank, keys)) => {
                            drop(prove.send((rank, Link::new(stream, &keys, End::Root))));
                        }
                        Err(why) => tracing::warn!(%peer, %why, "refused a TCP peer"),
                    }
                });
            }
        }
    }
}

/// Rank 0's half of one handshake: the client's rank once it proved it holds `secret`, and the
/// connection's frame keys.
fn serve_handshake(stream: &TcpStream, secret: &Secret) -> Result<(usize, FrameKeys), String> {
    let deadline = Instant::now() + HANDSHAKE_WAIT;
    stream.set_nonblocking(false).map_err(|e| e.to_string())?;
    let ns = nonce().map_err(|e| e.to_string())?;
    let mut hello = Vec::with_capacity(MAGIC.len() + NONCE);
    hello.extend_from_slice(MAGIC);
    hello.extend_from_slice(&ns);
    write_all(stream, &hello, deadline)?;
    let mut proof = [0u8; 8 + 8 + NONCE + MAC];
    read_all(stream, &mut proof, deadline)?;
    if &proof[..8] != MAGIC {
        return Err("not a symmem handshake".into());
    }
    let rank = u64::from_le_bytes(proof[8..16].try_into().expect("8 bytes"));
    let nc = &proof[16..16 + NONCE];
    secret
        .mac(b"symmem client", &ns, nc, rank)
        .verify_slice(&proof[16 + NONCE..])
        .map_err(|_| format!("claimed rank {rank} without proving the job secret"))?;
    let answer = secret.mac(b"symmem server", nc, &ns, rank).finalize();
    write_all(stream, &answer.into_bytes(), deadline)?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let keys = FrameKeys::derive(secret, &ns, nc, rank);
    Ok((usize::try_from(rank).map_err(|e| e.to_string())?, keys))
}

/// A node leader's side: connects to rank 0 at `addr` (retrying until it listens) and proves
/// it holds `secret` as rank `rank`; rank 0 proves it in turn. The link, keyed for its frames.
/// A leader below another in a tree connects to that one alike ([`BootstrapError::towards`]
/// names it in the errors).
pub(crate) fn connect_root(
    addr: SocketAddr,
    secret: &Secret,
    rank: usize,
    deadline: Instant,
) -> Result<Link, BootstrapError> {
    let refused = |cause: String| BootstrapError::RootRefused {
        centre: 0,
        addr,
        cause,
    };
    let started = Instant::now();
    // Rank 0 closes connections at once while it is flooded: connect again until its nonce
    // comes (bounded by `deadline`).
    let (stream, hello) = loop {
        let stream = connect(addr, rank, deadline)?;
        let mut hello = [0u8; 8 + NONCE];
        let wait = deadline.min(Instant::now() + HANDSHAKE_WAIT * 2);
        match read_all(&stream, &mut hello, wait) {
            Ok(()) => break (stream, hello),
            // Its kernel took the connection, but it never said a word: stopped or hung (a
            // foreign listener, or one of a flood, closes at once or answers otherwise). A
            // witness's error, naming it.
            Err(e) if Instant::now() >= deadline && e == TIMED_OUT => {
                return Err(BootstrapError::NoWelcome {
                    centre: 0,
                    waited: started.elapsed(),
                });
            }
            Err(e) if Instant::now() >= deadline => return Err(refused(e)),
            Err(_) => std::thread::sleep(jitter(Duration::from_millis(10), rank)),
        }
    };
    let deadline = deadline.min(Instant::now() + HANDSHAKE_WAIT * 2);
    if &hello[..8] != MAGIC {
        return Err(refused("it did not open a symmem handshake".into()));
    }
    let ns = &hello[8..];
    let nc = nonce()?;
    let rank64 = rank as u64;
    let mut proof = Vec::with_capacity(8 + 8 + NONCE + MAC);
    proof.extend_from_slice(MAGIC);
    proof.extend_from_slice(&rank64.to_le_bytes());
    proof.extend_from_slice(&nc);
    proof.extend_from_slice(
        &secret
            .mac(b"symmem client", ns, &nc, rank64)
            .finalize()
            .into_bytes(),
    );
    write_all(&stream, &proof, deadline).map_err(refused)?;
    let mut answer = [0u8; MAC];
    read_all(&stream, &mut answer, deadline)
        .map_err(|e| refused(format!("{e} (it did not accept this node's proof)")))?;
    secret
        .mac(b"symmem server", &nc, ns, rank64)
        .verify_slice(&answer)
        .map_err(|_| refused("it could not prove it holds the job secret".into()))?;
    stream
        .set_nodelay(true)
        .map_err(|e| BootstrapError::io("configuring the link to rank 0", e))?;
    let keys = FrameKeys::derive(secret, ns, &nc, rank64);
    Ok(Link::new(stream, &keys, End::Leader))
}

/// `base` to twice `base`, drawn afresh each call (seeded by the clock and `rank`): leaders
/// that retry a busy or not yet listening leader above them spread out instead of coming back
/// all at once.
fn jitter(base: Duration, rank: usize) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as u64);
    // splitmix64's finaliser: a cheap, well-spread mix of the seed.
    let mut x = nanos ^ (rank as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    let span = base.as_nanos().max(1) as u64;
    base + Duration::from_nanos(x % span)
}

/// A connection to `addr`, retried while nothing listens there yet (until `deadline`).
fn connect(addr: SocketAddr, rank: usize, deadline: Instant) -> Result<TcpStream, BootstrapError> {
    let unreachable = |cause: String| BootstrapError::RootUnreachable {
        centre: 0,
        addr,
        cause,
    };
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(unreachable("no connection in time".into()));
        }
        match TcpStream::connect_timeout(&addr, left) {
            Ok(stream) => return Ok(stream),
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                std::thread::sleep(jitter(Duration::from_millis(5), rank));
            }
            Err(e) => return Err(unreachable(e.to_string())),
        }
    }
}

fn write_all(mut stream: &TcpStream, bytes: &[u8], deadline: Instant) -> Result<(), String> {
    let left = deadline.saturating_duration_since(Instant::now());
    stream
        .set_write_timeout(Some(left.max(Duration::from_millis(1))))
        .map_err(|e| e.to_string())?;
    stream.write_all(bytes).map_err(|e| e.to_string())
}

/// One read of what is already waiting, without waiting (the last look past a deadline):
/// `Ok(0)` when the peer closed, `Err(EAGAIN)` when nothing is there.
fn read_waiting(stream: &TcpStream, buf: &mut [u8]) -> nix::Result<usize> {
    use nix::sys::socket::{MsgFlags, recv};
    loop {
        match recv(stream.as_raw_fd(), buf, MsgFlags::MSG_DONTWAIT) {
            Err(nix::errno::Errno::EINTR) => {}
            other => return other,
        }
    }
}

/// What [`read_all`] says when the peer sent nothing more in time.
const TIMED_OUT: &str = "the peer stalled";

/// Reads `buf` whole by `deadline`, however the peer slices it; past the deadline it still
/// takes what is waiting (a reader stopped past it must not blame the peer).
fn read_all(mut stream: &TcpStream, buf: &mut [u8], deadline: Instant) -> Result<(), String> {
    let mut got = 0;
    while got < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            match read_waiting(stream, &mut buf[got..]) {
                Ok(0) => return Err("the peer closed the connection".into()),
                Ok(n) => got += n,
                Err(nix::errno::Errno::EAGAIN) => return Err(TIMED_OUT.into()),
                Err(e) => return Err(e.to_string()),
            }
            continue;
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|e| e.to_string())?;
        match stream.read(&mut buf[got..]) {
            Ok(0) => return Err("the peer closed the connection".into()),
            Ok(n) => got += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(())
}

/// Writes `first` then `second` whole, in one system call where the socket takes them.
/// MSG_NOSIGNAL, as `TcpStream::write` has it: a vanished peer is an error, never a SIGPIPE
/// (`writev` would raise one).
fn write_both(stream: &TcpStream, first: &[u8], second: &[u8]) -> std::io::Result<()> {
    let mut done = 0;
    while done < first.len() + second.len() {
        let (now, then) = match first.get(done..) {
            Some(rest) if !rest.is_empty() => (rest, second),
            _ => (&second[done - first.len()..], &[][..]),
        };
        let iov = [IoSlice::new(now), IoSlice::new(then)];
        match sendmsg::<()>(stream.as_raw_fd(), &iov, &[], MsgFlags::MSG_NOSIGNAL, None) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Waits until `deadline` for the first bytes of a frame and reads them into `header`: how
/// many, or why none came (closed, timed out).
fn first_bytes(
    mut stream: &TcpStream,
    header: &mut [u8],
    deadline: Instant,
) -> Result<Result<usize, Received>, BootstrapError> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            // Past the deadline, what came before it still counts: a process stopped or
            // starved past its deadline finds its peer's frame waiting, and must not call
            // that peer silent.
            return match read_waiting(stream, header) {
                Ok(0) => Ok(Err(Received::Closed)),
                Ok(n) => Ok(Ok(n)),
                Err(nix::errno::Errno::EAGAIN) => Ok(Err(Received::TimedOut)),
                Err(nix::errno::Errno::ECONNRESET) => Ok(Err(Received::Closed)),
                Err(e) => Err(BootstrapError::io("receiving a control message", e)),
            };
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|e| BootstrapError::io("setting a socket timeout", e))?;
        match stream.read(header) {
            Ok(0) => return Ok(Err(Received::Closed)),
            Ok(n) => return Ok(Ok(n)),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return Ok(Err(Received::Closed)),
            Err(e) => return Err(BootstrapError::io("receiving a control message", e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    fn secret(byte: u8) -> Secret {
        Secret::from_bytes([byte; 32])
    }

    fn soon(seconds: u64) -> Instant {
        Instant::now() + Duration::from_secs(seconds)
    }

    type Accepted = std::thread::JoinHandle<Result<Vec<Link>, Vec<usize>>>;

    /// Rank 0 accepting `expected` on loopback, in a thread: its address and its result.
    fn rank0(secret: Secret, expected: Vec<usize>, deadline: Instant) -> (SocketAddr, Accepted) {
        let listener = listen(LOOPBACK, 0).unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = Acceptor::start(listener, secret).unwrap();
        let handle = std::thread::spawn(move || acceptor.leaders(&expected, deadline));
        (addr, handle)
    }

    /// Reads until the peer closes or resets (or 5 s): everything it sent.
    fn read_to_close(mut stream: &TcpStream) -> Vec<u8> {
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut all = Vec::new();
        let mut buf = [0u8; 256];
        loop {
            match stream.read(&mut buf) {
                Ok(0) => return all,
                Ok(n) => all.extend_from_slice(&buf[..n]),
                // Closed with our garbage unread: the kernel resets instead.
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return all,
                Err(e) => panic!("the peer neither answered nor closed: {e}"),
            }
        }
    }

    /// A client's proof for rank 0's `hello`, made with `secret` as `rank`.
    fn proof(secret: &Secret, hello: &[u8], rank: u64) -> Vec<u8> {
        let nc = [7u8; NONCE];
        let mut proof = MAGIC.to_vec();
        proof.extend_from_slice(&rank.to_le_bytes());
        proof.extend_from_slice(&nc);
        let mac = secret.mac(b"symmem client", &hello[8..], &nc, rank);
        proof.extend_from_slice(&mac.finalize().into_bytes());
        proof
    }

    fn hello_of(stream: &TcpStream) -> Vec<u8> {
        let mut hello = vec![0u8; 8 + NONCE];
        read_all(stream, &mut hello, soon(5)).unwrap();
        hello
    }

    fn reject(reason: &str) -> Message {
        Message::Reject {
            reason: reason.into(),
        }
    }

    /// The reason of the `Reject` frame `got` holds.
    fn reason(got: Result<Received, BootstrapError>) -> String {
        match got {
            Ok(Received::Frame(Message::Reject { reason }, None)) => reason,
            Ok(Received::Frame(other, _)) => panic!("expected a Reject, got {other:?}"),
            Ok(_) => panic!("expected a frame, got a close or a timeout"),
            Err(e) => panic!("expected a frame: {e}"),
        }
    }

    fn refused(got: Result<Received, BootstrapError>) {
        match got {
            Err(BootstrapError::FrameUnauthenticated) => {}
            Ok(Received::Frame(message, _)) => panic!("an unauthentic frame passed: {message:?}"),
            Ok(_) => panic!("expected a refusal, got a close or a timeout"),
            Err(e) => panic!("expected FrameUnauthenticated, got {e}"),
        }
    }

    /// Two connected sockets on loopback.
    fn socket_pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind((LOOPBACK, 0)).unwrap();
        let near = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        (near, listener.accept().unwrap().0)
    }

    /// A man in the middle: a leader's link whose frames it reads off the wire (`tap`), and
    /// rank 0's link, to which it writes whatever it likes (`inject`).
    struct Middle {
        leader: Link,
        tap: TcpStream,
        inject: TcpStream,
        root: Link,
    }

    fn middle(leader_keys: &FrameKeys, root_keys: &FrameKeys) -> Middle {
        let (leader, tap) = socket_pair();
        let (inject, root) = socket_pair();
        Middle {
            leader: Link::new(leader, leader_keys, End::Leader),
            tap,
            inject,
            root: Link::new(root, root_keys, End::Root),
        }
    }

    impl Middle {
        /// The next frame the leader sent, as it went over the wire.
        fn capture(&self) -> Vec<u8> {
            let mut frame = vec![0u8; 4];
            read_all(&self.tap, &mut frame, soon(5)).unwrap();
            let len = u32::from_le_bytes(frame[..4].try_into().unwrap()) as usize;
            frame.resize(4 + len + MAC, 0);
            read_all(&self.tap, &mut frame[4..], soon(5)).unwrap();
            frame
        }

        /// The leader sends `reason`; its frame as it went over the wire.
        fn sent(&self, reason: &str) -> Vec<u8> {
            self.leader.send(&reject(reason)).unwrap();
            self.capture()
        }

        fn deliver(&self, frame: &[u8]) {
            write_all(&self.inject, frame, soon(5)).unwrap();
        }
    }

    #[test]
    fn frames_pass_unchanged_through_a_relay() {
        let middle = middle(&FrameKeys::fixed(1), &FrameKeys::fixed(1));
        for reason in ["a", "b", "c"] {
            middle.deliver(&middle.sent(reason));
            assert_eq!(super::tests::reason(middle.root.recv(soon(5))), reason);
        }
    }

    #[test]
    fn frames_sent_and_received_are_counted() {
        let (a, b) = socket_pair();
        let keys = FrameKeys::fixed(1);
        let (sender, receiver) = (
            Link::new(a, &keys, End::Leader),
            Link::new(b, &keys, End::Root),
        );
        // Other tests' links count in the same process at the same time: only a lower bound.
        let before = control_frames();
        for said in ["a", "b", "c"] {
            sender.send(&reject(said)).unwrap();
        }
        for said in ["a", "b", "c"] {
            assert_eq!(reason(receiver.recv(soon(5))), said);
        }
        let after = control_frames();
        assert!(after.sent - before.sent >= 3, "{before:?} {after:?}");
        assert!(
            after.received - before.received >= 3,
            "{before:?} {after:?}"
        );
    }

    #[test]
    fn frames_larger_than_the_socket_buffers_pass_whole() {
        let (a, b) = socket_pair();
        let keys = FrameKeys::fixed(1);
        let (sender, receiver) = (
            Link::new(a, &keys, End::Leader),
            Link::new(b, &keys, End::Root),
        );
        let big: String = (0..6 << 20)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let sent = big.clone();
        let sending = std::thread::spawn(move || {
            for _ in 0..2 {
                sender.send(&reject(&sent)).unwrap();
            }
        });
        for _ in 0..2 {
            assert!(reason(receiver.recv(soon(10))) == big);
        }
        sending.join().unwrap();
    }

    #[test]
    fn a_frame_altered_in_transit_is_refused_and_so_is_every_later_one() {
        let middle = middle(&FrameKeys::fixed(1), &FrameKeys::fixed(1));
        middle.deliver(&middle.sent("release 1"));
        assert_eq!(reason(middle.root.recv(soon(5))), "release 1");
        // One letter of the body changed, the JSON still valid: "release 2".
        let genuine = middle.sent("release 1");
        let mut frame = genuine.clone();
        let at = frame.windows(9).position(|w| w == b"release 1").unwrap();
        frame[at + 8] = b'2';
        middle.deliver(&frame);
        refused(middle.root.recv(soon(5)));
        // The link is not trusted again: not even with the genuine frame, held back and
        // delivered after the forged one, nor with the leader's next.
        middle.deliver(&genuine);
        refused(middle.root.recv(soon(5)));
        middle.deliver(&middle.sent("release 2"));
        refused(middle.root.recv(soon(5)));
    }

    #[test]
    fn an_altered_tag_is_refused() {
        let middle = middle(&FrameKeys::fixed(1), &FrameKeys::fixed(1));
        let mut frame = middle.sent("release 1");
        *frame.last_mut().unwrap() ^= 1;
        middle.deliver(&frame);
        refused(middle.root.recv(soon(5)));
    }

    #[test]
    fn a_replayed_frame_is_refused() {
        let middle = middle(&FrameKeys::fixed(1), &FrameKeys::fixed(1));
        let first = middle.sent("arrive 1");
        middle.deliver(&first);
        assert_eq!(reason(middle.root.recv(soon(5))), "arrive 1");
        // The same frame again, in place of the leader's second.
        let _second = middle.sent("arrive 2");
        middle.deliver(&first);
        refused(middle.root.recv(soon(5)));
    }

    #[test]
    fn a_dropped_or_reordered_frame_is_refused() {
        let dropped = middle(&FrameKeys::fixed(1), &FrameKeys::fixed(1));
        let _first = dropped.sent("arrive 1");
        dropped.deliver(&dropped.sent("arrive 2"));
        refused(dropped.root.recv(soon(5)));
        let reordered = middle(&FrameKeys::fixed(1), &FrameKeys::fixed(1));
        let first = reordered.sent("arrive 1");
        reordered.deliver(&reordered.sent("arrive 2"));
        reordered.deliver(&first);
        refused(reordered.root.recv(soon(5)));
    }

    #[test]
    fn a_frame_of_another_connection_or_direction_is_refused() {
        // Two connections of one job, one leader rank: the same secret, other nonces.
        let (ns, other_ns, nc) = ([1u8; NONCE], [2u8; NONCE], [3u8; NONCE]);
        let this = FrameKeys::derive(&secret(1), &ns, &nc, 4);
        let other = FrameKeys::derive(&secret(1), &other_ns, &nc, 4);
        let middle = middle(&other, &this);
        middle.deliver(&middle.sent("arrive 1"));
        refused(middle.root.recv(soon(5)));
        // Rank 0's own frame sent back to it (the keys of the two directions differ).
        let (root, tap) = socket_pair();
        let (inject, back) = socket_pair();
        let root = Link::new(root, &this, End::Root);
        root.send(&reject("release 1")).unwrap();
        let mut frame = vec![0u8; 4 + 200];
        let got = (&tap).read(&mut frame).unwrap();
        write_all(&inject, &frame[..got], soon(5)).unwrap();
        refused(Link::new(back, &this, End::Root).recv(soon(5)));
    }

    #[test]
    fn the_listener_binds_the_given_address_only() {
        let listener = listen(LOOPBACK, 0).unwrap();
        assert_eq!(listener.local_addr().unwrap().ip(), LOOPBACK);
    }

    #[test]
    fn leaders_with_the_secret_join_and_rank_0_proves_it_too() {
        let (addr, rank0) = rank0(secret(1), vec![3, 5], soon(10));
        let five = std::thread::spawn(move || connect_root(addr, &secret(1), 5, soon(10)));
        let three = connect_root(addr, &secret(1), 3, soon(10)).unwrap();
        let five = five.join().unwrap().unwrap();
        let links = rank0.join().unwrap().expect("both leaders joined");
        assert_eq!(links.len(), 2);
        // The links are in the order of `expected`: a frame from 5 arrives on the second. Both
        // ends derived the same keys: frames pass both ways, several in a row.
        for round in 0..3 {
            five.send(&reject(&format!("5.{round}"))).unwrap();
            three.send(&reject(&format!("3.{round}"))).unwrap();
            for (link, leader) in links.iter().zip(["3", "5"]) {
                assert_eq!(reason(link.recv(soon(5))), format!("{leader}.{round}"));
                link.send(&reject(&format!("to {leader}.{round}"))).unwrap();
            }
            for (link, leader) in [(&three, "3"), (&five, "5")] {
                assert_eq!(reason(link.recv(soon(5))), format!("to {leader}.{round}"));
            }
        }
    }

    #[test]
    fn the_secret_never_crosses_and_a_false_rank_0_is_refused() {
        let listener = listen(LOOPBACK, 0).unwrap();
        let addr = listener.local_addr().unwrap();
        let the_secret = secret(9);
        let client = std::thread::spawn(move || connect_root(addr, &secret(9), 2, soon(10)));
        let (server, _) = listener.accept().unwrap();
        let mut hello = MAGIC.to_vec();
        hello.extend_from_slice(&[3u8; NONCE]);
        write_all(&server, &hello, soon(5)).unwrap();
        let mut sent = vec![0u8; 8 + 8 + NONCE + MAC];
        read_all(&server, &mut sent, soon(5)).unwrap();
        assert!(
            !sent.windows(32).any(|w| w == the_secret.0),
            "the client sent the secret in the clear"
        );
        // An answer that is no proof: the client refuses this "rank 0".
        write_all(&server, &[0u8; MAC], soon(5)).unwrap();
        let err = client.join().unwrap().expect_err("a false rank 0");
        assert!(matches!(err, BootstrapError::RootRefused { .. }), "{err}");
    }

    /// The leader above stopped after the fence: its kernel takes the connection, but no nonce
    /// ever comes. The leader below names it, a witness's error, not a foreign listener's
    /// refusal of its own.
    #[test]
    fn a_leader_above_that_never_says_hello_is_named_as_silent() {
        let listener = listen(LOOPBACK, 0).unwrap();
        let addr = listener.local_addr().unwrap();
        let err = connect_root(addr, &secret(1), 2, soon(1))
            .map_err(|e| e.towards(6))
            .expect_err("a silent leader above");
        assert!(
            matches!(err, BootstrapError::NoWelcome { centre: 6, .. }),
            "{err}"
        );
        assert_eq!(err.witness(2).map(|w| w.accused), Some(vec![6]));
        drop(listener);
    }

    #[test]
    fn a_wrong_secret_gets_nothing_and_the_real_leader_still_joins() {
        let (addr, rank0) = rank0(secret(1), vec![4], soon(10));
        let err = connect_root(addr, &secret(2), 4, soon(10)).expect_err("wrong secret");
        assert!(matches!(err, BootstrapError::RootRefused { .. }), "{err}");
        // By hand: after rank 0's nonce, a wrong proof is met with silence and a close.
        let raw = TcpStream::connect(addr).unwrap();
        let hello = hello_of(&raw);
        write_all(&raw, &proof(&secret(2), &hello, 4), soon(5)).unwrap();
        assert_eq!(read_to_close(&raw), Vec::<u8>::new());
        connect_root(addr, &secret(1), 4, soon(10)).unwrap();
        assert_eq!(rank0.join().unwrap().unwrap().len(), 1);
    }

    #[test]
    fn a_replayed_handshake_is_refused() {
        let (addr, rank0) = rank0(secret(1), vec![4, 6], soon(10));
        // A genuine handshake of rank 4, recorded.
        let first = TcpStream::connect(addr).unwrap();
        let recorded = proof(&secret(1), &hello_of(&first), 4);
        write_all(&first, &recorded, soon(5)).unwrap();
        let mut answer = [0u8; MAC];
        read_all(&first, &mut answer, soon(5)).expect("rank 0 accepts the genuine proof");
        // The same bytes again on a new connection: rank 0's nonce changed, so they prove
        // nothing.
        let replay = TcpStream::connect(addr).unwrap();
        let _ = hello_of(&replay);
        write_all(&replay, &recorded, soon(5)).unwrap();
        assert_eq!(read_to_close(&replay), Vec::<u8>::new());
        connect_root(addr, &secret(1), 6, soon(10)).unwrap();
        assert_eq!(rank0.join().unwrap().unwrap().len(), 2);
    }

    #[test]
    fn garbage_gets_nothing_and_changes_nothing() {
        let (addr, rank0) = rank0(secret(1), vec![1], soon(10));
        let raw = TcpStream::connect(addr).unwrap();
        let _ = hello_of(&raw);
        let garbage: Vec<u8> = (0..200u32).map(|i| (i * 37 % 251) as u8).collect();
        write_all(&raw, &garbage, soon(5)).unwrap();
        assert_eq!(read_to_close(&raw), Vec::<u8>::new());
        connect_root(addr, &secret(1), 1, soon(10)).unwrap();
        assert_eq!(rank0.join().unwrap().unwrap().len(), 1);
    }

    #[test]
    fn a_slow_loris_does_not_hold_up_the_leaders() {
        // Rank 0 gives the leaders less time than one handshake may take: were the silent
        // connections served one after the other, the leader would miss it.
        let deadline = Instant::now() + HANDSHAKE_WAIT / 2;
        let (addr, rank0) = rank0(secret(1), vec![2], deadline);
        let lorises: Vec<TcpStream> = (0..4)
            .map(|_| {
                let s = TcpStream::connect(addr).unwrap();
                write_all(&s, &MAGIC[..3], soon(5)).unwrap();
                s
            })
            .collect();
        connect_root(addr, &secret(1), 2, soon(10)).unwrap();
        assert_eq!(rank0.join().unwrap().expect("the leader joined").len(), 1);
        // The silent ones got rank 0's nonce and nothing more, and are then dropped.
        for loris in &lorises {
            assert_eq!(read_to_close(loris).len(), 8 + NONCE);
        }
    }

    #[test]
    fn a_flood_from_the_leader_s_own_address_only_delays_it() {
        let (addr, rank0) = rank0(secret(1), vec![2], soon(20));
        let flood: Vec<TcpStream> = (0..MAX_HANDSHAKES + 8)
            .map(|_| TcpStream::connect(addr).unwrap())
            .collect();
        // Rank 0 turns the leader away while the flood holds its address's handshakes; the
        // leader tries again until they time out.
        connect_root(addr, &secret(1), 2, soon(20)).unwrap();
        assert_eq!(rank0.join().unwrap().expect("the leader joined").len(), 1);
        drop(flood);
    }

    /// A TCP connection to `addr` from the loopback address `from` (another "host").
    fn connect_from(from: Ipv4Addr, addr: SocketAddr) -> TcpStream {
        use nix::sys::socket::{AddressFamily, SockFlag, SockType, SockaddrIn, socket};
        let fd = socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        let local = SockaddrIn::from(std::net::SocketAddrV4::new(from, 0));
        nix::sys::socket::bind(fd.as_raw_fd(), &local).unwrap();
        let SocketAddr::V4(to) = addr else {
            panic!("a loopback IPv4 address")
        };
        nix::sys::socket::connect(fd.as_raw_fd(), &SockaddrIn::from(to)).unwrap();
        TcpStream::from(fd)
    }

    /// R6: a flood of silent connections from one address takes only that address's slots:
    /// the leader, from another, is served at once (rank 0 gives it less time than one
    /// handshake may take, so it would miss it were it turned away even once).
    #[test]
    fn a_flood_from_one_address_leaves_the_leaders_room() {
        let deadline = Instant::now() + HANDSHAKE_WAIT / 2;
        let (addr, rank0) = rank0(secret(1), vec![2], deadline);
        let flood: Vec<TcpStream> = (0..MAX_HANDSHAKES + 8)
            .map(|_| connect_from(Ipv4Addr::new(127, 0, 0, 3), addr))
            .collect();
        std::thread::sleep(ACCEPT_TICK * 2);
        connect_root(addr, &secret(1), 2, soon(10)).unwrap();
        assert_eq!(rank0.join().unwrap().expect("the leader joined").len(), 1);
        // Beyond the cap the flood's connections were closed unanswered.
        let unanswered = flood.iter().filter(|s| read_to_close(s).is_empty()).count();
        assert!(
            unanswered >= MAX_HANDSHAKES,
            "{unanswered} closed unanswered"
        );
    }

    /// R6: silent clients are closed within the handshake's wait, well under 2 s.
    #[test]
    fn a_silent_client_is_closed_within_the_handshake_wait() {
        assert!(HANDSHAKE_WAIT <= Duration::from_millis(500));
        let (addr, rank0) = rank0(secret(1), vec![2], soon(10));
        let silent = TcpStream::connect(addr).unwrap();
        let started = Instant::now();
        assert_eq!(read_to_close(&silent).len(), 8 + NONCE);
        let took = started.elapsed();
        assert!(took < Duration::from_millis(1500), "closed after {took:?}");
        connect_root(addr, &secret(1), 2, soon(10)).unwrap();
        rank0.join().unwrap().unwrap();
    }

    /// R6: rank 0 serves handshakes from the moment its listener opens (before the
    /// rendezvous is over): a leader is proven before rank 0 starts waiting for it.
    #[test]
    fn handshakes_are_served_before_rank_0_waits_for_the_leaders() {
        let listener = listen(LOOPBACK, 0).unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = Acceptor::start(listener, secret(1)).unwrap();
        // connect_root returns only once rank 0 answered the proof: nothing waited for it.
        connect_root(addr, &secret(1), 3, soon(10)).unwrap();
        let streams = acceptor.leaders(&[3], soon(5)).expect("proven");
        assert_eq!(streams.len(), 1);
    }

    /// The listener added after the rendezvous (the fallback address) is served too.
    #[test]
    fn a_listener_added_later_is_served() {
        let first = listen(LOOPBACK, 0).unwrap();
        let port = first.local_addr().unwrap().port();
        let acceptor = Acceptor::start(first, secret(1)).unwrap();
        let other = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 4));
        acceptor.add(listen(other, port).unwrap()).unwrap();
        let addr = SocketAddr::new(other, port);
        connect_root(addr, &secret(1), 5, soon(10)).unwrap();
        assert_eq!(acceptor.leaders(&[5], soon(5)).unwrap().len(), 1);
    }

    /// Retries of many leaders spread over [base, 2 base), not all on one instant.
    #[test]
    fn retries_are_spread_over_twice_their_base() {
        let base = Duration::from_millis(5);
        let waits: Vec<Duration> = (0..64).map(|rank| jitter(base, rank)).collect();
        assert!(
            waits.iter().all(|w| *w >= base && *w < base * 2),
            "{waits:?}"
        );
        let mut distinct = waits.clone();
        distinct.sort();
        distinct.dedup();
        assert!(distinct.len() > 32, "{waits:?}");
    }
}

//! The TCP links between node leaders: how a node leader proves to rank 0 that it belongs to
//! the job, and the frames of the [`wire`](crate::wire) protocol over TCP.
//!
//! The job secret is 32 random bytes made by rank 0 and carried to every rank by the PMIx
//! rendezvous, or a group's all-gather (torch.distributed's network, which does not encrypt:
//! the links are then as private as it is); it never crosses one of these TCP links. Each
//! connection runs a challenge and response over fresh nonces, HMAC-SHA256 keyed by the
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

use crate::BootstrapError;
use crate::wire::{self, Message, Received};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// Opens every handshake (both directions), so that a stray client of another protocol is told
/// apart at once.
const MAGIC: &[u8; 8] = b"symmem\x01\x00";
const NONCE: usize = 32;
const MAC: usize = 32;
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

/// The job secret: made by rank 0, carried by the PMIx rendezvous or a group's all-gather,
/// never sent over these links.
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
    proven: Mutex<mpsc::Receiver<(usize, TcpStream)>>,
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
    /// Streams in the order of `expected`; the missing ranks otherwise. The listeners close.
    pub(crate) fn leaders(
        self,
        expected: &[usize],
        deadline: Instant,
    ) -> Result<Vec<TcpStream>, Vec<usize>> {
        let mut slots: Vec<Option<TcpStream>> = expected.iter().map(|_| None).collect();
        let proven = self.proven.lock().expect("no panics under it");
        while slots.iter().any(Option::is_none) {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok((rank, stream)) = proven.recv_timeout(left) else {
                let missing = (0..expected.len()).filter(|&i| slots[i].is_none());
                return Err(missing.map(|i| expected[i]).collect());
            };
            match expected.iter().position(|&r| r == rank) {
                Some(i) => slots[i] = Some(stream),
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
    prove: &mpsc::Sender<(usize, TcpStream)>,
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
                        Ok(rank) => drop(prove.send((rank, stream))),
                        Err(why) => tracing::warn!(%peer, %why, "refused a TCP peer"),
                    }
                });
            }
        }
    }
}

/// Rank 0's half of one handshake: the client's rank once it proved it holds `secret`.
fn serve_handshake(stream: &TcpStream, secret: &Secret) -> Result<usize, String> {
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
    usize::try_from(rank).map_err(|e| e.to_string())
}

/// A node leader's side: connects to rank 0 at `addr` (retrying until it listens) and proves
/// it holds `secret` as rank `rank`; rank 0 proves it in turn.
pub(crate) fn connect_root(
    addr: SocketAddr,
    secret: &Secret,
    rank: usize,
    deadline: Instant,
) -> Result<TcpStream, BootstrapError> {
    let refused = |cause: String| BootstrapError::RootRefused { addr, cause };
    // Rank 0 closes connections at once while it is flooded: connect again until its nonce
    // comes (bounded by `deadline`).
    let (stream, hello) = loop {
        let stream = connect(addr, deadline)?;
        let mut hello = [0u8; 8 + NONCE];
        let wait = deadline.min(Instant::now() + HANDSHAKE_WAIT * 2);
        match read_all(&stream, &mut hello, wait) {
            Ok(()) => break (stream, hello),
            Err(e) if Instant::now() >= deadline => return Err(refused(e)),
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
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
    Ok(stream)
}

/// A connection to `addr`, retried while nothing listens there yet (until `deadline`).
fn connect(addr: SocketAddr, deadline: Instant) -> Result<TcpStream, BootstrapError> {
    let unreachable = |cause: String| BootstrapError::RootUnreachable { addr, cause };
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(unreachable("no connection in time".into()));
        }
        match TcpStream::connect_timeout(&addr, left) {
            Ok(stream) => return Ok(stream),
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                std::thread::sleep(Duration::from_millis(5));
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

/// Reads `buf` whole by `deadline`, however the peer slices it.
fn read_all(mut stream: &TcpStream, buf: &mut [u8], deadline: Instant) -> Result<(), String> {
    let mut got = 0;
    while got < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err("the peer stalled".into());
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

/// Sends one frame of the wire protocol.
pub(crate) fn send(stream: &TcpStream, message: &Message) -> Result<(), BootstrapError> {
    send_frame(stream, &wire::encode(message)?)
}

/// Sends one frame [`wire::encode`] made (once for every leader).
pub(crate) fn send_frame(mut stream: &TcpStream, frame: &[u8]) -> Result<(), BootstrapError> {
    stream
        .set_write_timeout(Some(Duration::from_secs(10)))
        .and_then(|()| stream.write_all(frame))
        .map_err(|e| BootstrapError::io("sending a control message over TCP", e))
}

/// Receives one frame, waiting until `deadline` for it to start.
pub(crate) fn recv(stream: &TcpStream, deadline: Instant) -> Result<Received, BootstrapError> {
    let mut header = [0u8; 4];
    let mut first = 0;
    while first == 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(Received::TimedOut);
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|e| BootstrapError::io("setting a socket timeout", e))?;
        match (&*stream).read(&mut header) {
            Ok(0) => return Ok(Received::Closed),
            Ok(n) => first = n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return Ok(Received::Closed),
            Err(e) => return Err(BootstrapError::io("receiving a control message", e)),
        }
    }
    // The rest of the frame follows right away; allow a generous but bounded wait.
    let rest = Instant::now() + Duration::from_secs(10);
    let broken = |what: String| BootstrapError::Protocol(format!("{what} inside a frame"));
    read_all(stream, &mut header[first..], rest).map_err(broken)?;
    let len = wire::frame_len(header)?;
    let mut body = vec![0u8; len];
    read_all(stream, &mut body, rest).map_err(broken)?;
    Ok(Received::Frame(wire::decode(&body)?, None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::os::fd::AsRawFd;

    const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    fn secret(byte: u8) -> Secret {
        Secret::from_bytes([byte; 32])
    }

    fn soon(seconds: u64) -> Instant {
        Instant::now() + Duration::from_secs(seconds)
    }

    type Accepted = std::thread::JoinHandle<Result<Vec<TcpStream>, Vec<usize>>>;

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
        let streams = rank0.join().unwrap().expect("both leaders joined");
        assert_eq!(streams.len(), 2);
        // The streams are in the order of `expected`: a frame from 5 arrives on the second.
        send(&five, &Message::Reject { reason: "5".into() }).unwrap();
        send(&three, &Message::Reject { reason: "3".into() }).unwrap();
        for (stream, want) in streams.iter().zip(["3", "5"]) {
            match recv(stream, soon(5)).unwrap() {
                Received::Frame(Message::Reject { reason }, None) => assert_eq!(reason, want),
                _ => panic!("expected leader {want}'s frame"),
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
}

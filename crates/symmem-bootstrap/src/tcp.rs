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
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Opens every handshake (both directions), so that a stray client of another protocol is told
/// apart at once.
const MAGIC: &[u8; 8] = b"symmem\x01\x00";
const NONCE: usize = 32;
const MAC: usize = 32;
/// The longest a client may take over its handshake before rank 0 drops it.
pub(crate) const HANDSHAKE_WAIT: Duration = Duration::from_secs(2);
/// Handshakes rank 0 runs at once; connections beyond are closed at once.
const MAX_HANDSHAKES: usize = 64;

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

/// This node's address: its host name as the resolver gives it (`/etc/hosts`, DNS), the first
/// IPv4 address, else the first one. Listeners bind to it alone, never to every interface.
pub(crate) fn node_address() -> Result<IpAddr, BootstrapError> {
    let host = nix::unistd::gethostname()
        .map_err(|e| BootstrapError::io("reading the host name", e))?
        .to_string_lossy()
        .into_owned();
    let fail = |cause: String| BootstrapError::NodeAddress {
        host: host.clone(),
        cause,
    };
    let addrs: Vec<SocketAddr> = (host.as_str(), 0)
        .to_socket_addrs()
        .map_err(|e| fail(e.to_string()))?
        .filter(|a| !a.ip().is_unspecified())
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .map(SocketAddr::ip)
        .ok_or_else(|| fail("it resolves to no address".into()))
}

/// A listener on `addr` alone, on a port the kernel picks.
pub(crate) fn listen(addr: IpAddr) -> Result<TcpListener, BootstrapError> {
    TcpListener::bind((addr, 0))
        .map_err(|e| BootstrapError::io(format!("listening on this node's address {addr}"), e))
}

/// Rank 0's side: accepts on `listener` until every rank of `expected` has proven it holds
/// `secret`, or `deadline`. Streams in the order of `expected`; the missing ranks otherwise.
pub(crate) fn accept_leaders(
    listener: &TcpListener,
    secret: &Secret,
    expected: &[usize],
    deadline: Instant,
) -> Result<Result<Vec<TcpStream>, Vec<usize>>, BootstrapError> {
    listener
        .set_nonblocking(true)
        .map_err(|e| BootstrapError::io("configuring the leaders' listener", e))?;
    let (tx, rx) = mpsc::channel::<(usize, TcpStream)>();
    let mut slots: Vec<Option<TcpStream>> = expected.iter().map(|_| None).collect();
    let running = std::sync::Arc::new(());
    while slots.iter().any(Option::is_none) {
        while let Ok((rank, stream)) = rx.try_recv() {
            match expected.iter().position(|&r| r == rank) {
                Some(i) if slots[i].is_none() => slots[i] = Some(stream),
                _ => tracing::warn!(rank, "refused a node leader that is not expected"),
            }
        }
        if Instant::now() >= deadline {
            let missing = (0..expected.len()).filter(|&i| slots[i].is_none());
            return Ok(Err(missing.map(|i| expected[i]).collect()));
        }
        match listener.accept() {
            // Too many handshakes under way: someone floods us; the real leaders retry.
            Ok(_) if std::sync::Arc::strong_count(&running) > MAX_HANDSHAKES => {}
            Ok((stream, peer)) => {
                let (tx, secret, token) = (tx.clone(), secret.clone(), running.clone());
                std::thread::spawn(move || {
                    let _token = token;
                    match serve_handshake(&stream, &secret) {
                        Ok(rank) => drop(tx.send((rank, stream))),
                        Err(why) => tracing::warn!(%peer, %why, "refused a TCP peer"),
                    }
                });
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                std::thread::sleep(Duration::from_micros(500));
            }
            Err(e) => return Err(BootstrapError::io("accepting a node leader", e)),
        }
    }
    Ok(Ok(slots.into_iter().flatten().collect()))
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
        let listener = listen(LOOPBACK).unwrap();
        let addr = listener.local_addr().unwrap();
        let handle = std::thread::spawn(move || {
            accept_leaders(&listener, &secret, &expected, deadline).unwrap()
        });
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
        let listener = listen(LOOPBACK).unwrap();
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
        let listener = listen(LOOPBACK).unwrap();
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
    fn a_flood_of_silent_connections_only_delays_the_leader() {
        let (addr, rank0) = rank0(secret(1), vec![2], soon(20));
        let flood: Vec<TcpStream> = (0..MAX_HANDSHAKES + 8)
            .map(|_| TcpStream::connect(addr).unwrap())
            .collect();
        // Rank 0 turns the leader away while the flood holds every handshake; the leader
        // tries again until they time out.
        connect_root(addr, &secret(1), 2, soon(20)).unwrap();
        assert_eq!(rank0.join().unwrap().expect("the leader joined").len(), 1);
        drop(flood);
    }
}

//! One collective across nodes, over symmem's own wire protocol: the node leaders in a tree
//! over TCP ([`crate::tree`]: k-ary, rank 0's node at its root; a star around rank 0 where the
//! fan-out covers every node), each leader at the centre of its node's Unix star.
//!
//! - every rank sends `Arrive` to its node leader (its node's lowest rank) over the Unix star;
//! - a node leader gathers its node's calls and those of the leaders below it, folds them into
//!   one [`Calls`] (each distinct call with its ranks, the payloads in rank order, compacted
//!   when equal) and forwards that up in one `NodeArrive` over TCP (or one `Fail`, naming the
//!   rank it lost, when its node or one below failed);
//! - rank 0 gathers its own node and the leaders below it, folds them, and gives the verdict
//!   ([`symmem::CollectiveMismatch`] naming ranks where the calls differ): `Release` with every
//!   rank's payload ([`Payloads`]: a few bytes when they are all the same), or `Fail`, alike to
//!   all; each leader hands the answer on to the leaders below it;
//! - each leader answers its node's ranks, handing on the descriptors of its node (they never
//!   leave it).
//!
//! A failure spreads over the tree from where it is found: a leader tells every link but the
//! one it came from, and its node. Each leader waits for those below it a margin longer per
//! level below ([`NODE_MARGIN`]), so the one nearest a lost or late rank speaks first and
//! names it, never a leader in between. Rank 0's work per collective grows with the fan-out
//! and the number of distinct calls and payloads, not the node count (where payloads differ,
//! as in an all-gather of addresses, it grows with their bytes); a call crosses the tree's
//! levels up and its answer down.
//!
//! Every TCP frame is authenticated ([`tcp::Link`]). One that fails its tag ends the collective
//! with [`CollectiveFailure::Unauthenticated`], naming the lower leader and node of its link:
//! the leader that finds it tells every link and its node at once; a leader that finds the
//! answer from above forged also tells the leader above by a `Fail`, which that one (already
//! released) meets at its next collective.

use crate::calls::{Calls, Malformed, Payloads, Refusal, Runs};
use crate::exchange::{self, Arrival, Own, fail_all, release};
use crate::tcp::Link;
use crate::wire::{Message, Received, deadline_in};
use crate::{BootstrapError, CollectiveFailure, Gathered};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};
use symmem::CollectiveOp;

/// A leader's wait for the leaders below it beyond the collective timeout, per level below
/// it: their own verdicts (which name the late rank) reach it first.
pub(crate) const NODE_MARGIN: Duration = Duration::from_secs(2);
/// A node leader's wait for the answer from above beyond rank 0's wait for the whole tree.
const LEADER_MARGIN: Duration = Duration::from_secs(6);
/// The other ranks' wait for their leader's answer beyond the collective timeout, in a star
/// ([`leaf_margin`] adds a [`NODE_MARGIN`] per level beyond the first).
pub(crate) const LEAF_MARGIN: Duration = Duration::from_secs(8);

/// A node leader right below this one in the tree, as its parent holds it.
pub(crate) struct Leader {
    pub(crate) rank: usize,
    /// Its node's name (host name).
    pub(crate) node: String,
    /// The ranks of its node and of every node below it.
    pub(crate) ranks: Runs,
    pub(crate) link: Link,
}

/// A node leader's link to the leader above it (rank 0 in a star).
pub(crate) struct Uplink {
    pub(crate) link: Link,
    /// That leader's rank and node name.
    pub(crate) rank: usize,
    pub(crate) node: String,
}

/// A node leader's place in the tree ([`crate::tree`]): its links up and down, and how many
/// levels of leaders lie below it and below the root (each waits in proportion).
pub(crate) struct TreeLinks {
    /// `None` at rank 0, the root.
    pub(crate) parent: Option<Uplink>,
    pub(crate) children: Vec<Leader>,
    pub(crate) below: u32,
    pub(crate) levels: u32,
    /// Levels of leaders above this one: 0 at rank 0.
    pub(crate) depth: u32,
}

impl TreeLinks {
    /// How long this leader waits for its children's calls, from the collective's start: the
    /// timeout, and [`NODE_MARGIN`] for each level below it, so that a leader's verdict on a
    /// rank of its own (or on a child of its own) reaches it first.
    fn children_wait(&self, timeout: Duration) -> Duration {
        timeout.saturating_add(NODE_MARGIN * self.below.max(1))
    }

    /// How long a leader waits for the answer from above, from its call's going up: past the
    /// root's wait for the whole tree, by [`LEADER_MARGIN`], and a [`NODE_MARGIN`] more for each
    /// level above it but one. A leader sends up only once the leaders below it have, so without
    /// it those below would give up first and name it when one above it stalls: with the
    /// margin the leader right below the stalled one names it, and its verdict comes down.
    fn answer_wait(&self, timeout: Duration) -> Duration {
        answer_wait(timeout, self.levels, self.depth)
    }
}

/// [`TreeLinks::answer_wait`] of a leader `depth` levels below the root of a tree of `levels`.
fn answer_wait(timeout: Duration, levels: u32, depth: u32) -> Duration {
    timeout
        .saturating_add(NODE_MARGIN * levels.saturating_sub(1))
        .saturating_add(LEADER_MARGIN)
        .saturating_add(NODE_MARGIN * depth.saturating_sub(1))
}

/// How long the ranks other than their node's leader wait for its answer, beyond the
/// collective timeout, on a node `depth` levels below the root of a tree of `levels`: past
/// their leader's wait, by [`LEAF_MARGIN`] less [`LEADER_MARGIN`].
pub(crate) fn leaf_margin(levels: u32, depth: u32) -> Duration {
    LEAF_MARGIN
        .saturating_add(NODE_MARGIN * levels.saturating_sub(1))
        .saturating_add(NODE_MARGIN * depth.saturating_sub(1))
}

/// What a centre of a node's star knows of its node.
pub(crate) struct Node<'a> {
    pub(crate) world_size: usize,
    pub(crate) timeout: Duration,
    /// The ranks of this node, in rank order (index = local rank; this rank first).
    pub(crate) ranks: &'a [usize],
    pub(crate) name: &'a str,
    pub(crate) leaves: &'a [UnixStream],
}

/// One call of this rank to a collective.
pub(crate) struct Call<'a> {
    pub(crate) op: &'a CollectiveOp,
    pub(crate) payload: &'a [u8],
    pub(crate) fd: Option<BorrowedFd<'a>>,
    pub(crate) fd_group: u64,
}

type NodeGathered = (Vec<Option<Arrival>>, Calls);

/// Gathers the calls of this node's ranks (this one's being `call`), failures in job ranks.
fn gather_node(node: &Node<'_>, call: &Call<'_>) -> Result<NodeGathered, BootstrapError> {
    let arrivals = match exchange::gather(node.leaves, node.timeout, call.op)? {
        Ok(arrivals) => arrivals,
        Err(failure) => return Err(globalize(failure, node).into()),
    };
    let mut calls = vec![(node.ranks[0], call.op.clone(), call.payload.to_vec())];
    calls.extend(
        arrivals
            .iter()
            .enumerate()
            .skip(1)
            .filter_map(|(local, a)| {
                let a = a.as_ref()?;
                Some((node.ranks[local], a.op.clone(), a.payload.clone()))
            }),
    );
    let calls = Calls::of(calls).map_err(|bad| malformed(node.ranks[0], call.op, bad))?;
    Ok((arrivals, calls))
}

/// A fold of calls refused at the leader of rank `leader` (its node's ranks are distinct, and
/// each child's calls were checked against its ranks on arrival: a bug, said as such).
fn malformed(leader: usize, op: &CollectiveOp, bad: Malformed) -> CollectiveFailure {
    protocol(leader, op, format!("folded calls it could not: {bad:?}"))
}

/// A failure of the node's star, its local ranks turned into the job's.
fn globalize(failure: CollectiveFailure, node: &Node<'_>) -> CollectiveFailure {
    let job = |local: usize| node.ranks[local];
    match failure {
        CollectiveFailure::NeverArrived {
            op,
            missing,
            waited_ms,
        } => CollectiveFailure::NeverArrived {
            op,
            missing: missing.into_iter().map(job).collect(),
            waited_ms,
        },
        CollectiveFailure::PeerGone { rank, op } => CollectiveFailure::GoneFromNode {
            rank: job(rank),
            node: node.name.to_string(),
            op,
        },
        CollectiveFailure::Protocol { rank, op, what } => CollectiveFailure::Protocol {
            rank: job(rank),
            op,
            what,
        },
        other => other,
    }
}

/// A node leader's side of one collective (see the module docs): its node's calls and those
/// of the leaders below it go up (rank 0, the root, checks them all); the answer comes down
/// and goes on to the leaders below and the node's ranks.
pub(crate) fn tree_collective(
    node: &Node<'_>,
    tree: &TreeLinks,
    call: Call<'_>,
) -> Result<Gathered, BootstrapError> {
    let op = call.op;
    // Counted from the start: the leaders' own deadlines run meanwhile.
    let waited = tree.children_wait(node.timeout);
    let children_deadline = deadline_in(waited);
    let (arrivals, own) = match gather_node(node, &call) {
        Ok(gathered) => gathered,
        Err(BootstrapError::Collective(failure)) => {
            return Err(fail_around(node, tree, From::Here, failure));
        }
        Err(e) => return Err(e),
    };
    let mut parts = vec![own];
    match gather_leaders(&tree.children, children_deadline, waited, op) {
        Ok(below) => parts.extend(below),
        Err((failure, sender)) => {
            return Err(fail_around(node, tree, From::Below(sender), failure));
        }
    }
    let calls = match Calls::fold(parts) {
        Ok(calls) => calls,
        Err(bad) => {
            let failure = malformed(node.ranks[0], op, bad);
            return Err(fail_around(node, tree, From::Here, failure));
        }
    };
    let payloads = match &tree.parent {
        None => match verdict(calls, node.world_size, op) {
            Ok(payloads) => payloads,
            Err(failure) => return Err(fail_around(node, tree, From::Here, failure)),
        },
        Some(up) => match answer(node, tree, up, calls, op) {
            Ok(payloads) => payloads,
            Err((failure, from)) => return Err(fail_around(node, tree, from, failure)),
        },
    };
    let message = Message::Release {
        payloads,
        fd_ranks: Vec::new(),
    };
    let frame = crate::wire::encode(&message)?;
    for child in &tree.children {
        if let Err(e) = child.link.send_frame(&frame) {
            let rank = child.rank;
            tracing::warn!(rank, error = %e, "could not release a node from collective {op}");
        }
    }
    let Message::Release { payloads, .. } = message else {
        unreachable!("built above")
    };
    let own = Own {
        fd: call.fd,
        fd_group: call.fd_group,
    };
    Ok(release(
        node.leaves,
        op,
        node.ranks,
        payloads,
        arrivals,
        own,
    ))
}

/// Rank 0's check of every rank's call: their payloads in rank order, or why not.
fn verdict(
    calls: Calls,
    world_size: usize,
    op: &CollectiveOp,
) -> Result<Payloads, CollectiveFailure> {
    calls.verdict(world_size).map_err(|refusal| match refusal {
        Refusal::Missing(rank) => {
            protocol(rank, op, "its node leader forwarded no call of it".into())
        }
        Refusal::Beyond(rank) => protocol(
            rank,
            op,
            format!("a call came up for it, but the job has {world_size} ranks"),
        ),
        Refusal::Mismatch(mismatch) => CollectiveFailure::Mismatch(mismatch),
        Refusal::Malformed(bad) => malformed(0, op, bad),
    })
}

/// A leader below the root: sends `calls` (its node's and those below it) up, and waits for
/// the answer: every rank's payload, or the failure and where it came from.
fn answer(
    node: &Node<'_>,
    tree: &TreeLinks,
    up: &Uplink,
    calls: Calls,
    op: &CollectiveOp,
) -> Result<Payloads, (CollectiveFailure, From)> {
    // Rank 0 alone is above in a star: its leaders name it gone, as it went (it is the one
    // that gives every verdict, so nothing else ends it first). Further down, see
    // [`CollectiveFailure::AboveLost`].
    let lost = || match up.rank {
        0 => CollectiveFailure::GoneFromNode {
            rank: up.rank,
            node: up.node.clone(),
            op: op.clone(),
        },
        rank => CollectiveFailure::AboveLost {
            rank,
            node: up.node.clone(),
            op: op.clone(),
        },
    };
    if up.link.send(&Message::NodeArrive { calls }).is_err() {
        return Err((lost(), From::Above));
    }
    let waited = tree.answer_wait(node.timeout);
    let failure = match up.link.recv(deadline_in(waited)) {
        Ok(Received::Frame(Message::Release { payloads, .. }, _))
            if payloads.len() == node.world_size =>
        {
            return Ok(payloads);
        }
        Ok(Received::Frame(Message::Fail { failure }, _)) => failure,
        Ok(Received::Frame(other, _)) => protocol(up.rank, op, format!("answered {other:?}")),
        // The leader above released its own node already: it learns of this at its next
        // collective.
        Err(BootstrapError::FrameUnauthenticated) => {
            let failure = CollectiveFailure::Unauthenticated {
                leader: node.ranks[0],
                node: node.name.to_string(),
                op: op.clone(),
            };
            return Err((failure, From::Here));
        }
        Ok(Received::Closed) | Err(_) => lost(),
        Ok(Received::TimedOut) => CollectiveFailure::NeverArrived {
            op: op.clone(),
            missing: vec![up.rank],
            waited_ms: waited.as_millis() as u64,
        },
    };
    Err((failure, From::Above))
}

/// Where a failure that ends a collective at a leader was found.
#[derive(Clone, Copy, PartialEq, Eq)]
enum From {
    /// Here: on this node, by this leader, or rank 0's verdict.
    Here,
    /// Below: a leader below said so (its index among the children), or this one found it
    /// gone or silent (`None`).
    Below(Option<usize>),
    /// Above: the answer from above, or the leader above is gone or silent.
    Above,
}

/// Tells every link of this leader but the one the failure came from, and this node's ranks,
/// that the collective failed: a failure spreads over the whole tree from where it was found.
fn fail_around(
    node: &Node<'_>,
    tree: &TreeLinks,
    from: From,
    failure: CollectiveFailure,
) -> BootstrapError {
    let message = Message::Fail {
        failure: failure.clone(),
    };
    if let (Some(up), false) = (&tree.parent, from == From::Above) {
        let _ = up.link.send(&message);
    }
    for (index, child) in tree.children.iter().enumerate() {
        // The leader that sent it has returned already: a copy would wait on its link and
        // answer its next collective.
        if from != From::Below(Some(index)) {
            let _ = child.link.send(&message);
        }
    }
    fail_all(node.leaves, failure).into()
}

/// Waits for every leader's `NodeArrive` until `deadline` (`waited` from the start): their
/// calls, or the first failure, with the index of the leader that sent it as its `Fail`.
fn gather_leaders(
    leaders: &[Leader],
    deadline: Instant,
    waited: Duration,
    op: &CollectiveOp,
) -> Result<Vec<Calls>, (CollectiveFailure, Option<usize>)> {
    let mut pending: Vec<usize> = (0..leaders.len()).collect();
    let mut calls = Vec::new();
    while !pending.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        // Past the deadline one look without waiting still takes what came before it: a
        // leader stopped or starved past its deadline must not name the leaders below it,
        // whose calls wait in its sockets.
        let fds: Vec<BorrowedFd<'_>> = pending.iter().map(|&i| leaders[i].link.as_fd()).collect();
        let ready = exchange::poll_readable(&fds, left).map_err(|e| {
            let leader = &leaders[pending[0]];
            (protocol(leader.rank, op, e.to_string()), None)
        })?;
        for index in ready.into_iter().map(|i| pending[i]).collect::<Vec<_>>() {
            match receive_node(&leaders[index], op) {
                Ok(below) => calls.push(below),
                Err((failure, said)) => return Err((failure, said.then_some(index))),
            }
            pending.retain(|&i| i != index);
        }
        if left.is_zero() && !pending.is_empty() {
            // A leader that waited in vain for a rank of its own node said so before this
            // deadline (it waits only the timeout): the silent one is the leader itself. The
            // other ranks of its node may have arrived; they are not named.
            let failure = CollectiveFailure::NeverArrived {
                op: op.clone(),
                missing: pending.iter().map(|&i| leaders[i].rank).collect(),
                waited_ms: waited.as_millis() as u64,
            };
            return Err((failure, None));
        }
    }
    Ok(calls)
}

fn protocol(rank: usize, op: &CollectiveOp, what: String) -> CollectiveFailure {
    CollectiveFailure::Protocol {
        rank,
        op: op.clone(),
        what,
    }
}

/// Reads the calls of `leader`'s node and those below it, whose socket is readable; or the
/// failure, and whether the leader said it (its `Fail`) rather than this one found it.
fn receive_node(leader: &Leader, op: &CollectiveOp) -> Result<Calls, (CollectiveFailure, bool)> {
    let gone = || CollectiveFailure::GoneFromNode {
        rank: leader.rank,
        node: leader.node.clone(),
        op: op.clone(),
    };
    let found = match leader.link.recv(deadline_in(Duration::from_secs(10))) {
        Ok(Received::Frame(Message::NodeArrive { calls }, _)) => {
            let what = match calls.ranks() {
                Ok(ranks) if ranks == leader.ranks && calls.payloads.len() == ranks.len() => {
                    return Ok(calls);
                }
                Ok(ranks) if ranks == leader.ranks => format!(
                    "forwarded {} payloads for the calls of {ranks}",
                    calls.payloads.len()
                ),
                Ok(ranks) => format!(
                    "forwarded the calls of {ranks}, not those of {}",
                    leader.ranks
                ),
                Err(bad) => format!("forwarded calls that overlap: {bad:?}"),
            };
            protocol(leader.rank, op, what)
        }
        Ok(Received::Frame(Message::Fail { failure }, _)) => return Err((failure, true)),
        Ok(Received::Frame(other, _)) => protocol(
            leader.rank,
            op,
            format!("sent {other:?} instead of its node's calls"),
        ),
        Ok(Received::Closed) => gone(),
        Ok(Received::TimedOut) => protocol(leader.rank, op, "stopped inside a message".into()),
        Err(BootstrapError::FrameUnauthenticated) => CollectiveFailure::Unauthenticated {
            leader: leader.rank,
            node: leader.node.clone(),
            op: op.clone(),
        },
        Err(_) => gone(),
    };
    Err((found, false))
}

#[cfg(test)]
mod tests {
    //! A job of two nodes in threads: ranks 0, 1 on node-a (rank 0 its leader and the root),
    //! ranks 2, 3 on node-b (rank 2 its leader), linked as the engine links them (the TCP link
    //! on loopback, without the handshake, which `tcp`'s tests cover: fixed frame keys).

    use super::*;
    use crate::exchange::leaf_exchange;
    use crate::tcp::{End, FrameKeys, MAC};
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};
    use symmem::CollectiveKind;

    const TIMEOUT: Duration = Duration::from_secs(5);
    type Outcome = Result<Vec<Vec<u8>>, BootstrapError>;

    fn op(seq: u64) -> CollectiveOp {
        CollectiveOp {
            seq,
            kind: CollectiveKind::Provider {
                what: "test".into(),
            },
        }
    }

    /// What each rank does: its call (`None`: it returns before the collective, closing its
    /// links), repeated for the next `rounds - 1` collectives while it succeeds, and the
    /// direction of the TCP link in which a man in the middle alters the first frame, if any.
    struct Plan {
        ops: [Option<CollectiveOp>; 4],
        rounds: u64,
        tamper: Option<Direction>,
        /// Rank 2, node-b's leader, stops this long (holding its links) before its call.
        leader_stopped: Duration,
    }

    /// `op`, then the `rounds - 1` collectives after it.
    fn calls(op: Option<CollectiveOp>, rounds: u64) -> Result<Vec<CollectiveOp>, BootstrapError> {
        let op = op.ok_or(BootstrapError::WorldSizeZero)?;
        let next = |k| CollectiveOp {
            seq: op.seq + k,
            kind: op.kind.clone(),
        };
        Ok((0..rounds).map(next).collect())
    }

    #[derive(Clone, Copy, PartialEq)]
    enum Direction {
        /// node-b's leader to rank 0 (its `NodeArrive`).
        Up,
        /// Rank 0 to node-b's leader (its `Release`).
        Down,
    }

    fn socket_pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let near = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        (near, listener.accept().unwrap().0)
    }

    /// Copies `from` to `to` until `from` ends; first, when `alter`, changes rank 2's payload
    /// `[2,2,2]` inside the first frame into `[9,2,2]`, keeping its tag.
    fn forward(from: TcpStream, to: TcpStream, alter: bool) {
        std::thread::spawn(move || {
            let mut header = [0u8; 4];
            if alter && (&from).read_exact(&mut header).is_ok() {
                let len = u32::from_le_bytes(header) as usize;
                let mut rest = vec![0u8; len + MAC];
                (&from).read_exact(&mut rest).unwrap();
                let at = rest.windows(7).position(|w| w == b"[2,2,2]");
                rest[at.expect("rank 2's payload in the frame") + 1] = b'9';
                (&to).write_all(&header).unwrap();
                (&to).write_all(&rest).unwrap();
            }
            let _ = std::io::copy(&mut &from, &mut &to);
            let _ = to.shutdown(Shutdown::Write);
        });
    }

    /// The TCP link of node-b's leader and rank 0's, through a relay when `tamper` says so.
    fn tcp_link(tamper: Option<Direction>) -> (Link, Link) {
        let keys = FrameKeys::fixed(7);
        let (up, down) = match tamper {
            None => socket_pair(),
            Some(direction) => {
                let (up, tap) = socket_pair();
                let (inject, down) = socket_pair();
                let (tap2, inject2) = (tap.try_clone().unwrap(), inject.try_clone().unwrap());
                forward(tap, inject, direction == Direction::Up);
                forward(inject2, tap2, direction == Direction::Down);
                (up, down)
            }
        };
        (
            Link::new(up, &keys, End::Leader),
            Link::new(down, &keys, End::Root),
        )
    }

    fn run(plan: Plan) -> Vec<Outcome> {
        let (a_centre, a_leaf) = UnixStream::pair().unwrap();
        let (b_centre, b_leaf) = UnixStream::pair().unwrap();
        let (up, down) = tcp_link(plan.tamper);
        let [op0, op1, op2, op3] = plan.ops;
        let rounds = plan.rounds;
        let payload = |rank: u8| vec![rank; 3];
        let leaf = move |stream: UnixStream, rank: u8, op: Option<CollectiveOp>| {
            std::thread::spawn(move || -> Outcome {
                let mut got = Vec::new();
                for op in calls(op, rounds)? {
                    let payload = payload(rank);
                    let gathered =
                        leaf_exchange(&stream, 4, TIMEOUT, LEAF_MARGIN, &op, &payload, None, 0);
                    got = gathered?.payloads;
                }
                Ok(got)
            })
        };
        let rank1 = leaf(a_leaf, 1, op1);
        let rank3 = leaf(b_leaf, 3, op3);
        let stopped = plan.leader_stopped;
        let rank2 = std::thread::spawn(move || -> Outcome {
            std::thread::sleep(stopped);
            let leaves = [b_centre];
            let node = Node {
                world_size: 4,
                timeout: TIMEOUT,
                ranks: &[2, 3],
                name: "node-b",
                leaves: &leaves,
            };
            let tree = TreeLinks {
                parent: Some(Uplink {
                    link: up,
                    rank: 0,
                    node: "node-a".into(),
                }),
                children: Vec::new(),
                below: 0,
                levels: 1,
                depth: 1,
            };
            let mut got = Vec::new();
            for op in calls(op2, rounds)? {
                let call = Call {
                    op: &op,
                    payload: &payload(2),
                    fd: None,
                    fd_group: 0,
                };
                got = tree_collective(&node, &tree, call)?.payloads;
            }
            Ok(got)
        });
        let rank0 = (|| -> Outcome {
            let leaves = [a_centre];
            let node = Node {
                world_size: 4,
                timeout: TIMEOUT,
                ranks: &[0, 1],
                name: "node-a",
                leaves: &leaves,
            };
            let tree = TreeLinks {
                parent: None,
                children: vec![Leader {
                    rank: 2,
                    node: "node-b".into(),
                    ranks: Runs::of([2, 3]).unwrap(),
                    link: down,
                }],
                below: 1,
                levels: 1,
                depth: 0,
            };
            let mut got = Vec::new();
            for op in calls(op0, rounds)? {
                let call = Call {
                    op: &op,
                    payload: &payload(0),
                    fd: None,
                    fd_group: 0,
                };
                got = tree_collective(&node, &tree, call)?.payloads;
            }
            Ok(got)
        })();
        let mut outcomes = vec![rank0];
        outcomes.extend([rank1, rank2, rank3].map(|t| t.join().unwrap()));
        outcomes
    }

    #[test]
    fn every_rank_gets_every_payload_in_rank_order() {
        let all = Some(op(1));
        let outcomes = run(Plan {
            ops: [all.clone(), all.clone(), all.clone(), all],
            rounds: 1,
            tamper: None,
            leader_stopped: Duration::ZERO,
        });
        let want: Vec<Vec<u8>> = (0..4u8).map(|r| vec![r; 3]).collect();
        for (rank, outcome) in outcomes.into_iter().enumerate() {
            assert_eq!(outcome.unwrap(), want, "rank {rank}");
        }
    }

    #[test]
    fn a_mismatch_on_another_node_is_named_on_every_rank() {
        let (same, other) = (Some(op(1)), Some(op(2)));
        let outcomes = run(Plan {
            ops: [same.clone(), same.clone(), same, other],
            rounds: 1,
            tamper: None,
            leader_stopped: Duration::ZERO,
        });
        for (rank, outcome) in outcomes.into_iter().enumerate() {
            match outcome {
                Err(BootstrapError::Collective(CollectiveFailure::Mismatch(m))) => {
                    assert_eq!(m.issued.len(), 2, "rank {rank}: {m}");
                    assert_eq!(m.issued[1].0, [3], "rank {rank}: {m}");
                }
                other => panic!("rank {rank}: {other:?}"),
            }
        }
    }

    /// M1: a rank that leaves early is the culprit on every rank; the collective does not
    /// complete without it.
    #[test]
    fn a_rank_that_leaves_on_another_node_is_named_with_its_node() {
        let all = Some(op(1));
        let outcomes = run(Plan {
            ops: [all.clone(), all.clone(), all, None],
            rounds: 1,
            tamper: None,
            leader_stopped: Duration::ZERO,
        });
        for (rank, outcome) in outcomes.into_iter().enumerate().take(3) {
            match outcome {
                Err(BootstrapError::Collective(CollectiveFailure::GoneFromNode {
                    rank: 3,
                    node,
                    ..
                })) => {
                    assert_eq!(node, "node-b", "rank {rank}");
                }
                other => panic!("rank {rank}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_lost_node_leader_is_named_with_its_node() {
        let all = Some(op(1));
        let outcomes = run(Plan {
            ops: [all.clone(), all.clone(), None, all],
            rounds: 1,
            tamper: None,
            leader_stopped: Duration::ZERO,
        });
        for (rank, outcome) in outcomes.into_iter().enumerate().take(2) {
            match outcome {
                Err(BootstrapError::Collective(CollectiveFailure::GoneFromNode {
                    rank: 2,
                    node,
                    ..
                })) => {
                    assert_eq!(node, "node-b", "rank {rank}");
                }
                other => panic!("rank {rank}: {other:?}"),
            }
        }
    }

    fn names_the_link(outcome: Outcome, rank: usize) {
        match outcome {
            Err(BootstrapError::Collective(
                failure @ CollectiveFailure::Unauthenticated { leader: 2, .. },
            )) => {
                let text = failure.to_string();
                assert!(
                    text.contains("failed authentication"),
                    "rank {rank}: {text}"
                );
                assert!(text.contains("node node-b"), "rank {rank}: {text}");
                assert!(text.contains("collective #1"), "rank {rank}: {text}");
            }
            other => panic!("rank {rank}: {other:?}"),
        }
    }

    /// R3: a leader's frame altered on the way to rank 0 ends the collective on every rank,
    /// naming the link; no rank gets the altered payload.
    #[test]
    fn a_frame_altered_on_the_way_to_rank_0_fails_every_rank_naming_the_link() {
        let all = Some(op(1));
        let outcomes = run(Plan {
            ops: [all.clone(), all.clone(), all.clone(), all],
            rounds: 1,
            tamper: Some(Direction::Up),
            leader_stopped: Duration::ZERO,
        });
        for (rank, outcome) in outcomes.into_iter().enumerate() {
            names_the_link(outcome, rank);
        }
    }

    /// R3: rank 0's answer altered on the way to a leader fails that leader's node at once,
    /// naming the link; rank 0 had released its own node, which learns at its next collective.
    #[test]
    fn an_answer_altered_on_the_way_to_a_leader_fails_its_node_then_rank_0_s() {
        let all = Some(op(1));
        let outcomes = run(Plan {
            ops: [all.clone(), all.clone(), all.clone(), all],
            rounds: 2,
            tamper: Some(Direction::Down),
            leader_stopped: Duration::ZERO,
        });
        for (rank, outcome) in outcomes.into_iter().enumerate() {
            names_the_link(outcome, rank);
        }
    }

    /// R8: a leader stopped past rank 0's wait is named alone, with the time rank 0 really
    /// waited; rank 3, which arrived at it, is not.
    #[test]
    fn a_stopped_leader_is_named_alone_not_the_rank_behind_it() {
        let all = Some(op(1));
        let outcomes = run(Plan {
            ops: [all.clone(), all.clone(), all.clone(), all],
            rounds: 1,
            tamper: None,
            leader_stopped: TIMEOUT + NODE_MARGIN + Duration::from_millis(1500),
        });
        for (rank, outcome) in outcomes.into_iter().enumerate().take(2) {
            match outcome {
                Err(BootstrapError::Collective(
                    failure @ CollectiveFailure::NeverArrived { .. },
                )) => {
                    let CollectiveFailure::NeverArrived {
                        missing, waited_ms, ..
                    } = &failure
                    else {
                        unreachable!()
                    };
                    assert_eq!(missing, &[2], "rank {rank}: {failure}");
                    let waited = (TIMEOUT + NODE_MARGIN).as_millis() as u64;
                    assert_eq!(*waited_ms, waited, "rank {rank}: {failure}");
                    assert!(failure.to_string().contains("within 7s"), "{failure}");
                }
                other => panic!("rank {rank}: {other:?}"),
            }
        }
    }

    /// A job of `nodes` nodes in threads, two ranks each (node i: leader 2i, rank 2i + 1),
    /// the leaders in a tree of fan-out `fanout` over TCP on loopback. `leaves_out`: ranks that
    /// return before the collective (closing their links); `stopped`: a leader that stops this
    /// long (holding its links) first. Each rank's outcome of `rounds` collectives.
    fn run_tree(
        nodes: usize,
        fanout: usize,
        rounds: u64,
        timeout: Duration,
        leaves_out: &[usize],
        stopped: Option<(usize, Duration)>,
    ) -> Vec<Outcome> {
        let tree = crate::tree::Tree::new(nodes, fanout);
        let world = 2 * nodes;
        // Each node's link up (its end, the parent's end).
        let mut ups: Vec<Option<Link>> = (0..nodes).map(|_| None).collect();
        let mut downs: Vec<Vec<Leader>> = (0..nodes).map(|_| Vec::new()).collect();
        for child in 1..nodes {
            let (near, far) = socket_pair();
            let keys = FrameKeys::fixed(child as u8);
            ups[child] = Some(Link::new(near, &keys, End::Leader));
            let ranks = tree.subtree(child).into_iter();
            let ranks = Runs::of(ranks.flat_map(|n| [2 * n, 2 * n + 1])).unwrap();
            downs[tree.parent(child).unwrap()].push(Leader {
                rank: 2 * child,
                node: format!("node-{child}"),
                ranks,
                link: Link::new(far, &keys, End::Root),
            });
        }
        let payload = |rank: usize| vec![rank as u8; 3];
        let mut threads = Vec::new();
        for (index, (up, children)) in ups.into_iter().zip(downs).enumerate() {
            let (centre, leaf) = UnixStream::pair().unwrap();
            let (leader_rank, leaf_rank) = (2 * index, 2 * index + 1);
            let leaf_out = leaves_out.contains(&leaf_rank);
            let (levels, depth) = (tree.levels(), tree.depth(index));
            threads.push(std::thread::spawn(move || -> Outcome {
                if leaf_out {
                    return Err(BootstrapError::WorldSizeZero);
                }
                let mut got = Vec::new();
                for seq in 1..=rounds {
                    let margin = leaf_margin(levels, depth);
                    let payload = payload(leaf_rank);
                    let gathered =
                        leaf_exchange(&leaf, world, timeout, margin, &op(seq), &payload, None, 0);
                    got = gathered?.payloads;
                }
                Ok(got)
            }));
            let out = leaves_out.contains(&leader_rank);
            let stop = stopped.filter(|(r, _)| *r == leader_rank).map(|(_, d)| d);
            let parent = up.map(|link| {
                let above = tree.parent(index).unwrap();
                Uplink {
                    link,
                    rank: 2 * above,
                    node: format!("node-{above}"),
                }
            });
            let links = TreeLinks {
                parent,
                children,
                below: tree.below(index),
                levels: tree.levels(),
                depth: tree.depth(index),
            };
            threads.push(std::thread::spawn(move || -> Outcome {
                if out {
                    return Err(BootstrapError::WorldSizeZero);
                }
                std::thread::sleep(stop.unwrap_or_default());
                let leaves = [centre];
                let ranks = [leader_rank, leaf_rank];
                let name = format!("node-{index}");
                let node = Node {
                    world_size: world,
                    timeout,
                    ranks: &ranks,
                    name: &name,
                    leaves: &leaves,
                };
                let mut got = Vec::new();
                for seq in 1..=rounds {
                    let call = Call {
                        op: &op(seq),
                        payload: &payload(leader_rank),
                        fd: None,
                        fd_group: 0,
                    };
                    got = tree_collective(&node, &links, call)?.payloads;
                }
                Ok(got)
            }));
        }
        // Threads were started leaf, leader per node: put them in rank order.
        let mut outcomes: Vec<(usize, Outcome)> = threads
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                let rank = 2 * (i / 2) + (1 - i % 2);
                (rank, t.join().unwrap())
            })
            .collect();
        outcomes.sort_by_key(|(rank, _)| *rank);
        outcomes.into_iter().map(|(_, o)| o).collect()
    }

    /// Seven nodes in a binary tree (three levels of leaders): every rank gets every payload,
    /// round after round.
    #[test]
    fn a_tree_of_leaders_gathers_every_payload_in_rank_order() {
        let outcomes = run_tree(7, 2, 3, TIMEOUT, &[], None);
        let want: Vec<Vec<u8>> = (0..14u8).map(|r| vec![r; 3]).collect();
        for (rank, outcome) in outcomes.into_iter().enumerate() {
            assert_eq!(outcome.unwrap(), want, "rank {rank}");
        }
    }

    /// A rank that leaves on a node two levels below rank 0's is named, with its node, on every
    /// other rank: the failure spreads over the whole tree from where it was found.
    #[test]
    fn a_rank_gone_deep_in_the_tree_is_named_on_every_rank() {
        let outcomes = run_tree(7, 2, 1, TIMEOUT, &[11], None);
        for (rank, outcome) in outcomes.into_iter().enumerate() {
            if rank == 11 {
                continue;
            }
            match outcome {
                Err(BootstrapError::Collective(CollectiveFailure::GoneFromNode {
                    rank: 11,
                    node,
                    ..
                })) => assert_eq!(node, "node-5", "rank {rank}"),
                other => panic!("rank {rank}: {other:?}"),
            }
        }
    }

    /// A leader in the middle of the tree (node 1's, rank 2) that is gone is named by the
    /// leaders above it (as gone) and below it (as their leader above, lost), and so by every
    /// rank.
    #[test]
    fn a_lost_leader_in_the_middle_is_named_above_and_below_it() {
        let outcomes = run_tree(7, 2, 1, TIMEOUT, &[2], None);
        for (rank, outcome) in outcomes.into_iter().enumerate() {
            if rank == 2 || rank == 3 {
                // Rank 3 waited on its leader alone: its own error names the leader.
                continue;
            }
            match outcome {
                // Below it (nodes 3 and 4): their link up closed, which says nothing of why.
                Err(BootstrapError::Collective(CollectiveFailure::AboveLost {
                    rank: 2,
                    node,
                    ..
                })) if (6..10).contains(&rank) => assert_eq!(node, "node-1", "rank {rank}"),
                Err(BootstrapError::Collective(CollectiveFailure::GoneFromNode {
                    rank: 2,
                    node,
                    ..
                })) if !(6..10).contains(&rank) => assert_eq!(node, "node-1", "rank {rank}"),
                other => panic!("rank {rank}: {other:?}"),
            }
        }
    }

    /// A leader in the middle of the tree stopped past rank 0's wait is named alone on every
    /// rank: rank 0 gives up on it, and its leaders below learn it from rank 0's verdict once
    /// it goes on, or wait it out themselves naming it.
    #[test]
    fn a_stopped_leader_in_the_middle_is_named_alone() {
        let timeout = Duration::from_secs(1);
        let root_wait = timeout + NODE_MARGIN * 2;
        let stop = root_wait + Duration::from_millis(1500);
        let outcomes = run_tree(7, 2, 1, timeout, &[], Some((2, stop)));
        for (rank, outcome) in outcomes.into_iter().enumerate() {
            match outcome {
                Err(BootstrapError::Collective(CollectiveFailure::NeverArrived {
                    missing,
                    ..
                })) => assert_eq!(missing, [2], "rank {rank}"),
                other => panic!("rank {rank}: {other:?}"),
            }
        }
    }

    /// Rank 0 stopped past its leaders' wait for its answer: the leaders right below it name
    /// it, and those further down learn it from them before their own (longer) wait ends,
    /// never naming their own leader above, which is innocent.
    #[test]
    fn a_stopped_rank_0_is_named_at_every_depth_not_the_leaders_in_between() {
        let timeout = Duration::from_secs(1);
        let first_level = answer_wait(timeout, 2, 1);
        assert!(answer_wait(timeout, 2, 2) >= first_level + NODE_MARGIN);
        let stop = first_level + Duration::from_millis(1500);
        let outcomes = run_tree(7, 2, 1, timeout, &[], Some((0, stop)));
        for (rank, outcome) in outcomes.into_iter().enumerate().skip(2) {
            match outcome {
                Err(BootstrapError::Collective(CollectiveFailure::NeverArrived {
                    missing,
                    ..
                })) => assert_eq!(missing, [0], "rank {rank}"),
                other => panic!("rank {rank}: {other:?}"),
            }
        }
    }

    /// A failure a leader below sent up is passed on to every other link, not back to the
    /// leader that sent it: that one has returned, and a copy would answer its next collective.
    #[test]
    fn a_failure_from_below_is_not_sent_back_to_its_sender() {
        let keys = FrameKeys::fixed(3);
        let ((near0, far0), (near1, far1)) = (socket_pair(), socket_pair());
        let child = |rank: usize, stream: TcpStream| Leader {
            rank,
            node: format!("node-{rank}"),
            ranks: Runs::of([rank]).unwrap(),
            link: Link::new(stream, &keys, End::Root),
        };
        let tree = TreeLinks {
            parent: None,
            children: vec![child(1, far0), child(2, far1)],
            below: 1,
            levels: 1,
            depth: 0,
        };
        let node = Node {
            world_size: 3,
            timeout: TIMEOUT,
            ranks: &[0],
            name: "node-0",
            leaves: &[],
        };
        let failure = CollectiveFailure::PeerGone { rank: 1, op: op(1) };
        drop(fail_around(
            &node,
            &tree,
            From::Below(Some(0)),
            failure.clone(),
        ));
        let (sender, other) = (
            Link::new(near0, &keys, End::Leader),
            Link::new(near1, &keys, End::Leader),
        );
        match other.recv(deadline_in(TIMEOUT)) {
            Ok(Received::Frame(Message::Fail { failure: got }, _)) => assert_eq!(got, failure),
            _ => panic!("the other leader was not told"),
        }
        assert!(
            matches!(
                sender.recv(deadline_in(Duration::from_millis(200))),
                Ok(Received::TimedOut)
            ),
            "the sender got its own failure back"
        );
    }

    /// A leader stopped (SIGSTOP) or starved past its deadline still takes what came before
    /// it: the calls of its node's ranks and of the leaders below it, and a frame on its
    /// link, waiting in its sockets. Naming them silent blamed the leader below a stopped
    /// one (the SIGSTOP test across nodes, 1 run in 5 or so).
    #[test]
    fn what_came_before_a_deadline_counts_however_late_the_leader_looks() {
        // The node's star: rank 1 arrived.
        let (centre, leaf) = UnixStream::pair().unwrap();
        let arrive = Message::Arrive {
            op: op(1),
            payload: vec![1],
            fd_group: 0,
            has_fd: false,
        };
        crate::wire::send(&leaf, &arrive, None).unwrap();
        let leaves = [centre];
        match exchange::gather(&leaves, Duration::ZERO, &op(1)).unwrap() {
            Ok(arrivals) => assert_eq!(arrivals[1].as_ref().unwrap().payload, vec![1]),
            Err(failure) => panic!("named a rank that had arrived: {failure}"),
        }
        // The leader below: its calls came before the deadline, which has passed.
        let keys = FrameKeys::fixed(5);
        let (near, far) = socket_pair();
        let (below, above) = (
            Link::new(near, &keys, End::Leader),
            Link::new(far, &keys, End::Root),
        );
        let calls = Calls::of(vec![(2, op(1), vec![2]), (3, op(1), vec![3])]).unwrap();
        below.send(&Message::NodeArrive { calls }).unwrap();
        let leader = Leader {
            rank: 2,
            node: "node-b".into(),
            ranks: Runs::of([2, 3]).unwrap(),
            link: above,
        };
        let passed = Instant::now();
        std::thread::sleep(Duration::from_millis(20));
        let got = gather_leaders(std::slice::from_ref(&leader), passed, TIMEOUT, &op(1));
        let got = got.unwrap_or_else(|(failure, _)| panic!("named the leader below: {failure}"));
        assert_eq!(got[0].ranks().unwrap(), Runs::of([2, 3]).unwrap());
        // The answer on a link, past the deadline.
        let release = Message::Release {
            payloads: Payloads::compact(vec![vec![]; 4]),
            fd_ranks: Vec::new(),
        };
        leader.link.send(&release).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(matches!(
            below.recv(passed),
            Ok(Received::Frame(Message::Release { .. }, _))
        ));
        // And nothing there: still a timeout, at once.
        let (quiet, _open) = UnixStream::pair().unwrap();
        let start = Instant::now();
        assert!(matches!(
            crate::wire::recv(&quiet, passed),
            Ok(Received::TimedOut)
        ));
        assert!(matches!(below.recv(passed), Ok(Received::TimedOut)));
        assert!(start.elapsed() < Duration::from_secs(1));
    }

    /// A leader below that forwards calls other than its subtree's (a rank of another, one
    /// payload short) is named by its parent with what it sent.
    #[test]
    fn a_leader_below_that_forwards_the_wrong_calls_is_named() {
        let keys = FrameKeys::fixed(6);
        let (near, far) = socket_pair();
        let below = Link::new(near, &keys, End::Leader);
        let leader = Leader {
            rank: 2,
            node: "node-b".into(),
            ranks: Runs::of([2, 3]).unwrap(),
            link: Link::new(far, &keys, End::Root),
        };
        let wrong_ranks = Calls::of(vec![(2, op(1), vec![]), (4, op(1), vec![])]).unwrap();
        let short = Calls {
            issued: vec![(op(1), Runs::of([2, 3]).unwrap())],
            payloads: Payloads::Each(vec![vec![2]]),
        };
        let right = Calls::of(vec![(2, op(1), vec![2]), (3, op(1), vec![3])]).unwrap();
        for calls in [wrong_ranks, short, right] {
            below.send(&Message::NodeArrive { calls }).unwrap();
        }
        let said = |result: Result<Calls, (CollectiveFailure, bool)>| match result {
            Err((CollectiveFailure::Protocol { rank: 2, what, .. }, false)) => what,
            other => panic!("the leader below is not named: {other:?}"),
        };
        let what = said(receive_node(&leader, &op(1)));
        assert!(
            what.contains("ranks 2, 4, not those of ranks 2-3"),
            "{what}"
        );
        let what = said(receive_node(&leader, &op(1)));
        assert!(
            what.contains("1 payloads for the calls of ranks 2-3"),
            "{what}"
        );
        assert!(receive_node(&leader, &op(1)).is_ok());
    }
}

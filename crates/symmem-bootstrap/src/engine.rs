//! The PMIx engine: the same contract as the Unix star (rendezvous, an order-checked
//! all-gather per collective, failures named on every rank) for ranks on any hosts, with the
//! launcher's PMIx server for the rendezvous only.
//!
//! At start-up every rank puts where it runs (its host, emulated node and host name) under
//! `symmem.<engine>.rendezvous`, and rank 0 adds its TCP address (its node's address, on a
//! port the kernel picks) and the job secret it made ([`tcp::Secret`]); one PMIx fence
//! collecting the data carries all of it to every rank. No key is put after that: PMIx keeps
//! every key of a job and resends them all, so a key per collective slows each one down as the
//! job ages (docs/benchmarks.md).
//!
//! Then the ranks of each host meet over their own Unix star (`<rendezvous>/node-<host>`, the
//! host's lowest rank at its centre: its node leader), and every other node's leader connects
//! to rank 0 over TCP, proving it holds the secret ([`tcp`]). Each collective runs over those
//! links ([`nodes`](crate::nodes)): a star of node leaders around rank 0, each at the centre
//! of its node's star.

use crate::bootstrap::StarEnd;
use crate::exchange::root_exchange;
use crate::nodes::{self, Call, LEAF_MARGIN, Leader, Node, Uplink};
use crate::pmix::{Client, peer_lost};
use crate::tcp::{self, Secret};
use crate::wire::deadline_in;
use crate::{Bootstrap, BootstrapError, Gathered};
use serde::{Deserialize, Serialize};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use symmem::{CollectiveKind, CollectiveOp, Topology};

/// Beyond the collective timeout: the fence's own wait, so that the server's timeout (where
/// it honours one) answers first.
const FENCE_MARGIN: Duration = Duration::from_secs(5);

/// How long the rendezvous fence waits for the others: the collective timeout and the margin.
/// Its timeout error says this time, the time it waited (M11: it said the timeout alone).
fn fence_wait(timeout: Duration) -> Duration {
    timeout.saturating_add(FENCE_MARGIN)
}

/// Engines opened in this process so far: each names its keys apart (opening is collective,
/// so every rank counts alike).
static ENGINES: AtomicU64 = AtomicU64::new(0);

/// Where a rank runs, as it tells the others when the engine opens.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Place {
    host: Host,
    /// Its emulated node ([`NODE_ID`](symmem::settings::NODE_ID)).
    emulated: u64,
    /// Its host name, for messages.
    name: String,
    /// Rank 0's only: where the node leaders reach it, and the job secret.
    root: Option<RootContact>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct RootContact {
    addr: SocketAddr,
    secret: Secret,
}

/// A rank's host as the engine tells hosts apart: the launcher's node id where the PMIx server
/// gives one, else the host name's bytes (compared as they are, never hashed, so ranks built
/// by different toolchains agree).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Host {
    NodeId(u64),
    Name(Vec<u8>),
}

impl Host {
    fn of(client: &Client) -> Self {
        match client.node_id() {
            Some(id) => Self::NodeId(id),
            None => Self::Name(
                nix::unistd::gethostname()
                    .map(|name| name.into_encoded_bytes())
                    .unwrap_or_default(),
            ),
        }
    }
}

/// This rank's links across nodes: the node's Unix star, and (a node leader) TCP to rank 0.
enum Up {
    /// Rank 0: every other node's leader.
    Root(Vec<Leader>),
    Leader(Uplink),
    /// Not a node leader, or the only node.
    None,
}

pub(crate) struct PmixLinks {
    /// Kept for the job's life: finalising tells the launcher this rank is done with PMIx.
    _client: Client,
    world_size: usize,
    timeout: Duration,
    /// The ranks of this host, in rank order (index = local rank).
    local_ranks: Vec<usize>,
    /// This node's name (host name).
    node: String,
    star: StarEnd,
    up: Up,
}

impl PmixLinks {
    /// Connects to the PMIx server and meets every rank through one fence (see the module
    /// docs), then the ranks of each host over their own star in `<dir>/node-<host>`, then the
    /// node leaders over TCP.
    pub(crate) fn connect(
        rank: usize,
        world_size: usize,
        node: u64,
        dir: &Path,
        timeout: Duration,
    ) -> Result<(Self, Topology), BootstrapError> {
        let deadline = deadline_in(timeout);
        let client = Client::init()?;
        let (pmix_rank, job_size) = (client.rank(), client.job_size()?);
        if (pmix_rank, job_size) != (rank, world_size) {
            return Err(BootstrapError::PmixDisagrees {
                pmix_rank,
                job_size,
                rank,
                world_size,
            });
        }
        // Its launcher's death ends it, collectives or not (M5).
        crate::launcher_watch::start(rank);
        let (listener, root) = match (rank, world_size) {
            (0, 2..) => open_root()?,
            _ => (None, None),
        };
        let name = host_name();
        let place = Place {
            host: Host::of(&client),
            emulated: node,
            name: name.clone(),
            root,
        };
        let places = rendezvous(&client, world_size, &place, timeout)?;
        let hosts: Vec<&Host> = places.iter().map(|p| &p.host).collect();
        let emulated: Vec<u64> = places.iter().map(|p| p.emulated).collect();
        let topology = Topology::new(&hosts, &emulated);
        let local_ranks: Vec<usize> = (0..world_size)
            .filter(|&r| topology.same_host(r, rank))
            .collect();
        let local_rank = local_ranks
            .iter()
            .position(|&r| r == rank)
            .expect("this rank is on its own host");
        // Named by the host's number, which every rank of the job agrees on.
        let host_number = topology.host(rank);
        let star = Bootstrap::connect(
            local_rank,
            local_ranks.len(),
            &dir.join(format!("node-{host_number}")),
            timeout,
        )?
        .into_star_end();
        let spans_hosts = (0..world_size).any(|r| !topology.same_host(r, 0));
        let up = match (local_rank, listener) {
            (0, Some(listener)) => accept_nodes(&listener, &places, &topology, timeout)?,
            // Rank 0 found no address to listen on, and other hosts need it: say why.
            (0, None) if rank == 0 && spans_hosts => return Err(no_address()),
            (0, None) if !topology.same_host(rank, 0) => connect_up(rank, &places, deadline)?,
            _ => Up::None,
        };
        let links = Self {
            _client: client,
            world_size,
            timeout,
            local_ranks,
            node: name,
            star,
            up,
        };
        Ok((links, topology))
    }

    /// One order-checked all-gather (see [`nodes`](crate::nodes)).
    pub(crate) fn exchange(
        &mut self,
        op: &CollectiveOp,
        payload: &[u8],
        fd: Option<BorrowedFd<'_>>,
        fd_group: u64,
    ) -> Result<Gathered, BootstrapError> {
        let call = Call {
            op,
            payload,
            fd,
            fd_group,
        };
        let leaves: &[_] = match &self.star {
            StarEnd::Leaf(centre) => return self.leaf_exchange(centre, call),
            StarEnd::Centre(leaves) => leaves,
            StarEnd::Alone => &[],
        };
        let node = Node {
            world_size: self.world_size,
            timeout: self.timeout,
            ranks: &self.local_ranks,
            name: &self.node,
            leaves,
        };
        match &self.up {
            Up::Root(leaders) => nodes::root_collective(&node, leaders, call),
            Up::Leader(up) => nodes::leader_collective(&node, up, call),
            // Every rank on this one host: the plain star.
            Up::None if leaves.is_empty() => Ok(Gathered {
                payloads: vec![payload.to_vec()],
                fds: vec![None],
            }),
            Up::None => root_exchange(leaves, self.timeout, op, payload, fd, fd_group),
        }
    }

    /// A rank other than its node's leader: the star's exchange, its errors naming the leader.
    fn leaf_exchange(
        &self,
        centre: &std::os::unix::net::UnixStream,
        call: Call<'_>,
    ) -> Result<Gathered, BootstrapError> {
        let leader = self.local_ranks[0];
        let node = self.node.clone();
        crate::exchange::leaf_exchange(
            centre,
            self.world_size,
            self.timeout,
            LEAF_MARGIN,
            call.op,
            call.payload,
            call.fd,
            call.fd_group,
        )
        .map_err(|e| match e {
            BootstrapError::RootGone { op } => BootstrapError::LeaderGone { leader, node, op },
            BootstrapError::RootSilent { op, waited } => BootstrapError::LeaderSilent {
                leader,
                node,
                op,
                waited,
            },
            other => other,
        })
    }
}

/// Rank 0's listener on its node's address, and what it publishes: that address and a new
/// job secret. With no address (the host name does not resolve), nothing: an error only if
/// the job turns out to span hosts.
fn open_root() -> Result<(Option<TcpListener>, Option<RootContact>), BootstrapError> {
    let addr = match tcp::node_address() {
        Ok(addr) => addr,
        Err(e) => {
            tracing::debug!(error = %e, "no node address: the job must stay on one host");
            return Ok((None, None));
        }
    };
    let listener = tcp::listen(addr)?;
    let addr = listener
        .local_addr()
        .map_err(|e| BootstrapError::io("reading the leaders' listener's address", e))?;
    let contact = RootContact {
        addr,
        secret: Secret::generate()?,
    };
    Ok((Some(listener), Some(contact)))
}

/// Why rank 0 has no address: its host name's resolution, failing again.
fn no_address() -> BootstrapError {
    tcp::node_address()
        .err()
        .unwrap_or_else(|| BootstrapError::NodeAddress {
            host: host_name(),
            cause: "it did not resolve when the job started".into(),
        })
}

fn host_name() -> String {
    nix::unistd::gethostname()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "?".into())
}

/// Rank 0: the leaders of every other host, each proven to hold the secret.
fn accept_nodes(
    listener: &TcpListener,
    places: &[Place],
    topology: &Topology,
    timeout: Duration,
) -> Result<Up, BootstrapError> {
    let deadline = deadline_in(timeout);
    let contact = places[0]
        .root
        .as_ref()
        .expect("rank 0 published its contact");
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for rank in 0..places.len() {
        match groups.iter_mut().find(|g| topology.same_host(g[0], rank)) {
            Some(group) => group.push(rank),
            None => groups.push(vec![rank]),
        }
    }
    groups.retain(|g| !topology.same_host(g[0], 0));
    let expected: Vec<usize> = groups.iter().map(|g| g[0]).collect();
    let streams = match tcp::accept_leaders(listener, &contact.secret, &expected, deadline)? {
        Ok(streams) => streams,
        Err(missing) => {
            return Err(BootstrapError::LeadersMissing {
                missing,
                addr: contact.addr,
                waited: timeout,
            });
        }
    };
    let leaders = groups
        .into_iter()
        .zip(streams)
        .map(|(ranks, stream)| Leader {
            rank: ranks[0],
            node: places[ranks[0]].name.clone(),
            ranks,
            stream,
        })
        .collect();
    Ok(Up::Root(leaders))
}

/// A node leader of another host than rank 0's: its proven link to rank 0.
fn connect_up(
    rank: usize,
    places: &[Place],
    deadline: std::time::Instant,
) -> Result<Up, BootstrapError> {
    let Some(contact) = places[0].root.as_ref() else {
        let host = places[0].name.clone();
        let cause = "rank 0 found no address for it, so it could not listen".to_string();
        return Err(BootstrapError::NodeAddress { host, cause });
    };
    let stream = tcp::connect_root(contact.addr, &contact.secret, rank, deadline)?;
    Ok(Up::Leader(Uplink {
        stream,
        root_node: places[0].name.clone(),
    }))
}

/// The one PMIx all-gather of the job: every rank's [`Place`].
fn rendezvous(
    client: &Client,
    world_size: usize,
    place: &Place,
    timeout: Duration,
) -> Result<Vec<Place>, BootstrapError> {
    let op = CollectiveOp {
        seq: 0,
        kind: CollectiveKind::Provider {
            what: "PMIx rendezvous".into(),
        },
    };
    let key = format!(
        "symmem.{}.rendezvous",
        ENGINES.fetch_add(1, Ordering::Relaxed)
    );
    let bytes = serde_json::to_vec(place).map_err(|e| BootstrapError::Protocol(e.to_string()))?;
    client.put(&key, &bytes)?;
    let waited = fence_wait(timeout);
    match client.fence(waited) {
        Ok(Some(())) => {}
        Ok(None) => {
            return Err(BootstrapError::EngineTimeout { op, waited });
        }
        Err(BootstrapError::Pmix { status, text, .. }) if peer_lost(status) => {
            return Err(BootstrapError::EnginePeerLost { op, text });
        }
        Err(e) => return Err(e),
    }
    (0..world_size)
        .map(|peer| {
            if peer == client.rank() {
                return Ok(place.clone());
            }
            let bytes = client.get_bytes(peer, &key)?;
            serde_json::from_slice::<Place>(&bytes)
                .map_err(|e| BootstrapError::Protocol(format!("rank {peer} sent no place: {e}")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// M11: a fence that timed out after 15 s (a 10 s timeout and the margin) says 15 s, not
    /// "within 10s".
    #[test]
    fn a_timeout_says_how_long_it_waited() {
        let error = BootstrapError::EngineTimeout {
            op: CollectiveOp {
                seq: 71,
                kind: CollectiveKind::Barrier,
            },
            waited: fence_wait(Duration::from_secs(10)),
        };
        let text = error.to_string();
        assert!(text.contains("within 15s through PMIx"), "{text}");
    }
}

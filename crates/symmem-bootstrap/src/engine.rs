//! The engines across hosts: the same contract as the Unix star (rendezvous, an order-checked
//! all-gather per collective, failures named on every rank) for ranks on any hosts. They differ
//! only in how the ranks first meet, one all-gather of every rank's [`Arrival`] card:
//!
//! - PMIx: every rank puts its card under `symmem.<engine>.rendezvous` and one PMIx fence
//!   collecting the data carries all of them to every rank. No key is put after that: PMIx
//!   keeps every key of a job and resends them all, so a key per collective slows each one down
//!   as the job ages (docs/benchmarks.md).
//! - a group ([`Meeting`]): the program ran the all-gather itself (symmem's Python package over
//!   a `torch.distributed` process group) and hands the cards in.
//!
//! A card says where its rank runs (its host, emulated node and host name), rank 0's the job's
//! name (a group's ranks share no launcher job id to name their folders after) and, each
//! rank's that listens for node leaders below it (rank 0's, and where a tree may need it any
//! host's first rank's: [`Arrival::at`]), its TCP address (its node's address, on a port the
//! kernel picks) and the secret it made for its listener ([`tcp::Secret`]).
//!
//! Then the ranks of each host meet over their own Unix star (`<rendezvous>/node-<host>`, the
//! host's lowest rank at its centre: its node leader), and the node leaders form a tree
//! ([`crate::tree`], [`CONTROL_FANOUT`](symmem::settings::CONTROL_FANOUT)): each connects to
//! the leader above it over TCP, proving it holds that leader's secret ([`tcp`]), and takes
//! the links of those below it. Each collective runs over those links
//! ([`nodes`](crate::nodes)), each leader at the centre of its node's star.

use crate::address;
use crate::calls::Runs;
use crate::card::{Arrival, Host, Meeting, Place, may_lead, no_contact};
use crate::exchange::root_exchange;
use crate::nodes::{self, Call, Leader, NODE_MARGIN, Node, TreeLinks, Uplink, leaf_margin};
use crate::pmix::{Client, peer_lost};
use crate::star::{self, StarEnd};
use crate::tcp::{self, Acceptor};
use crate::tree::Tree;
use crate::wire::deadline_in;
use crate::{BootstrapError, Gathered};
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use symmem::Engine;
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

/// This rank's links across nodes: the node's Unix star, and (a node leader) TCP to the
/// leaders above and below it in the tree.
enum Up {
    Tree(TreeLinks),
    /// Not a node leader, or the only node.
    None,
}

/// A rank's links under the PMIx or the group engine.
pub(crate) struct NodeLinks {
    /// PMIx's, kept for the job's life: finalising tells the launcher this rank is done with
    /// PMIx. None under a group.
    _client: Option<Client>,
    engine: Engine,
    world_size: usize,
    timeout: Duration,
    /// The ranks of this host, in rank order (index = local rank).
    local_ranks: Vec<usize>,
    /// This node's name (host name).
    node: String,
    star: StarEnd,
    up: Up,
    /// How long this node's ranks other than its leader wait for it beyond the timeout
    /// ([`leaf_margin`]: it grows with the tree's levels and this node's depth in it).
    leaf_margin: Duration,
}

impl NodeLinks {
    /// Connects to the PMIx server and meets every rank through one fence (see the module
    /// docs), then opens the links ([`open`](Self::open)).
    pub(crate) fn connect(
        rank: usize,
        world_size: usize,
        node: u64,
        dir: &Path,
        timeout: Duration,
    ) -> Result<(Self, Topology), BootstrapError> {
        let deadline = deadline_in(timeout);
        // The client that named this rank, where PMIx did ([`crate::identify`]).
        let client = match crate::pmix::take_kept() {
            Some(client) => client,
            None => Client::init()?,
        };
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
        // PMIx's own local rank: its nodes are the engine's hosts.
        let local_rank = client.identity().ok().map(|identity| identity.local_rank);
        let arrival = Arrival::at(
            rank,
            world_size,
            node,
            Host::of(&client),
            may_lead(local_rank),
        )?;
        let cards = rendezvous(&client, world_size, &arrival.card(), timeout)?;
        let places = arrival.read(&cards)?;
        Self::open(arrival, places, dir, deadline, timeout, Some(client))
    }

    /// The links of a [`Meeting`]: the ranks met already.
    pub(crate) fn meet(
        meeting: Meeting,
        dir: &Path,
        timeout: Duration,
    ) -> Result<(Self, Topology), BootstrapError> {
        let Meeting { arrival, places } = meeting;
        Self::open(arrival, places, dir, deadline_in(timeout), timeout, None)
    }

    /// Opens the links once every rank's place is known: the ranks of each host over their
    /// own star in `<dir>/node-<host>`, then the node leaders over TCP to rank 0 (by
    /// `deadline`).
    fn open(
        arrival: Arrival,
        places: Vec<Place>,
        dir: &Path,
        deadline: std::time::Instant,
        timeout: Duration,
        client: Option<Client>,
    ) -> Result<(Self, Topology), BootstrapError> {
        let Arrival { acceptor, place } = arrival;
        let (rank, world_size) = (place.rank, place.world_size);
        let engine = match client {
            Some(_) => Engine::Pmix,
            None => Engine::Group,
        };
        let hosts: Vec<&Host> = places.iter().map(|p| &p.host).collect();
        let emulated: Vec<u64> = places.iter().map(|p| p.emulated).collect();
        let topology = Topology::new(&hosts, &emulated);
        let local_ranks: Vec<usize> = (0..world_size)
            .filter(|&r| topology.same_host(r, rank))
            .collect();
        check_shared_base(&places, &local_ranks)?;
        let local_rank = local_ranks
            .iter()
            .position(|&r| r == rank)
            .expect("this rank is on its own host");
        // Named by the host's number, which every rank of the job agrees on.
        let host_number = topology.host(rank);
        let (star, _) = star::open(
            local_rank,
            local_ranks.len(),
            0,
            &dir.join(format!("node-{host_number}")),
            timeout,
        )
        .map_err(|e| e.on_node(&local_ranks))?;
        let groups = node_groups(&topology, world_size);
        let tree = Tree::new(groups.len(), places[0].fanout);
        let node_depth = groups
            .iter()
            .position(|g| g.contains(&rank))
            .map_or(0, |index| tree.depth(index));
        let up = match local_rank {
            0 if groups.len() > 1 => {
                let index = groups
                    .iter()
                    .position(|g| g[0] == rank)
                    .expect("a leader leads its node");
                let links = Links {
                    places: &places,
                    groups: &groups,
                    tree,
                    index,
                };
                Up::Tree(links.open(acceptor, deadline, timeout)?)
            }
            _ => Up::None,
        };
        let links = Self {
            _client: client,
            engine,
            world_size,
            timeout,
            local_ranks,
            node: place.name,
            star,
            up,
            leaf_margin: leaf_margin(tree.levels(), node_depth),
        };
        Ok((links, topology))
    }

    /// The engine these links were opened by.
    pub(crate) fn engine(&self) -> Engine {
        self.engine
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
            Up::Tree(tree) => nodes::tree_collective(&node, tree, call),
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
            self.leaf_margin,
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

/// The ranks of one host (`local_ranks`, of `places`) meet in a folder below the same
/// rendezvous base; where two of them see different folders there (each container with its
/// own /tmp) they could never meet: an error at once, the same on every rank of the host,
/// instead of a wait for the collective timeout.
fn check_shared_base(places: &[Place], local_ranks: &[usize]) -> Result<(), BootstrapError> {
    let first = local_ranks[0];
    let Some(other) = local_ranks[1..].iter().copied().find(|&r| {
        places[r].base.as_ref().map(|b| b.1) != places[first].base.as_ref().map(|b| b.1)
    }) else {
        return Ok(());
    };
    let path = |r: usize| {
        places[r]
            .base
            .as_ref()
            .map_or_else(|| "no folder".to_string(), |(p, _)| p.display().to_string())
    };
    let (a, b) = (path(first), path(other));
    Err(BootstrapError::PrivateRendezvous {
        ranks: (first, other),
        host: places[first].name.clone(),
        at: if a == b {
            a
        } else {
            format!("{a} (rank {first}) and {b} (rank {other})")
        },
    })
}

/// The ranks of each host, the hosts in order of their lowest rank (rank 0's first): the
/// nodes of the tree, each led by its first rank.
fn node_groups(topology: &Topology, world_size: usize) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for rank in 0..world_size {
        match groups.iter_mut().find(|g| topology.same_host(g[0], rank)) {
            Some(group) => group.push(rank),
            None => groups.push(vec![rank]),
        }
    }
    groups
}

/// A node leader's view of the tree as it opens its links.
struct Links<'a> {
    places: &'a [Place],
    /// The ranks of each node ([`node_groups`]).
    groups: &'a [Vec<usize>],
    tree: Tree,
    /// This leader's node.
    index: usize,
}

impl Links<'_> {
    fn leader(&self, node: usize) -> usize {
        self.groups[node][0]
    }

    /// Connects up to the leader above (proving the secret it published), then takes the
    /// links of the leaders below as they prove theirs; the listener closes.
    fn open(
        &self,
        acceptor: Option<Acceptor>,
        deadline: std::time::Instant,
        timeout: Duration,
    ) -> Result<TreeLinks, BootstrapError> {
        let me = self.leader(self.index);
        let below: Vec<usize> = self.tree.children(self.index).collect();
        // A leader with leaders below it found no address to listen on: say why, at once.
        let acceptor = match acceptor {
            Some(acceptor) if !below.is_empty() => Some(acceptor),
            None if !below.is_empty() => return Err(no_contact(self.places, me)),
            _ => None,
        };
        let parent = match self.tree.parent(self.index) {
            Some(above) => Some(self.connect_up(self.leader(above), deadline)?),
            None => None,
        };
        let children = match acceptor {
            Some(acceptor) => self.accept_children(acceptor, &below, timeout)?,
            None => Vec::new(),
        };
        Ok(TreeLinks {
            parent,
            children,
            below: self.tree.below(self.index),
            levels: self.tree.levels(),
            depth: self.tree.depth(self.index),
        })
    }

    /// The leaders of the nodes `below` this one, each proven to hold this leader's secret.
    fn accept_children(
        &self,
        acceptor: Acceptor,
        below: &[usize],
        timeout: Duration,
    ) -> Result<Vec<Leader>, BootstrapError> {
        let me = self.leader(self.index);
        // The leaders wait on their own nodes' ranks first: when one of those never comes, the
        // leader's report (naming it) is out before this one gives up on the leader.
        let waited = timeout.saturating_add(NODE_MARGIN);
        let deadline = deadline_in(waited);
        let contact = self.places[me]
            .contact
            .as_ref()
            .expect("a leader that listens published its contact");
        let expected: Vec<usize> = below.iter().map(|&node| self.leader(node)).collect();
        // Leaders that cannot reach this one's loopback address dial the fallback: listen
        // there too.
        let dialled: Vec<SocketAddr> = expected
            .iter()
            .map(|&leader| leader_dials(self.places, me, leader))
            .collect::<Result<_, _>>()?;
        if let Some(&other) = dialled.iter().find(|a| **a != contact.addr) {
            acceptor.add(tcp::listen(other.ip(), other.port())?)?;
        }
        let links = match acceptor.leaders(&expected, deadline) {
            Ok(links) => links,
            Err(missing) => {
                return Err(BootstrapError::LeadersMissing {
                    missing,
                    centre: me,
                    addr: dialled.first().copied().unwrap_or(contact.addr),
                    waited,
                });
            }
        };
        Ok(below
            .iter()
            .zip(links)
            .map(|(&node, link)| {
                let ranks = self
                    .tree
                    .subtree(node)
                    .into_iter()
                    .flat_map(|n| self.groups[n].iter().copied());
                // The groups partition the ranks: none comes twice.
                let ranks = Runs::of(ranks).expect("node groups are disjoint");
                let rank = self.leader(node);
                Leader {
                    rank,
                    node: self.places[rank].name.clone(),
                    ranks,
                    link,
                }
            })
            .collect())
    }

    /// This leader's proven link to the leader `above` it.
    fn connect_up(
        &self,
        above: usize,
        deadline: std::time::Instant,
    ) -> Result<Uplink, BootstrapError> {
        let rank = self.leader(self.index);
        let addr = leader_dials(self.places, above, rank)?;
        let contact = self.places[above]
            .contact
            .as_ref()
            .expect("leader_dials checked it");
        // Another host's leader reaching an address of its own: the name of the leader
        // above resolved to an address that every host claims (a hosts file copied to every
        // host). It would retry until the timeout; say why at once.
        if let Ok(own) = address::node_address()
            && own == addr.ip()
            && !own.is_loopback()
        {
            return Err(BootstrapError::SharedAddress {
                centre: above,
                root_host: self.places[above].name.clone(),
                addr: own,
                host: address::host_name(),
            });
        }
        let link = tcp::connect_root(addr, &contact.secret, rank, deadline)
            .map_err(|e| e.towards(above))?;
        Ok(Uplink {
            link,
            rank: above,
            node: self.places[above].name.clone(),
        })
    }
}

/// The address node leader `leader` dials for the leader `above` it ([`address::dial`]);
/// where it has none, the error both give at once.
fn leader_dials(
    places: &[Place],
    above: usize,
    leader: usize,
) -> Result<SocketAddr, BootstrapError> {
    let Some(contact) = places[above].contact.as_ref() else {
        return Err(no_contact(places, above));
    };
    let (theirs, ours) = (&places[above].loopback, &places[leader].loopback);
    address::dial(
        contact.addr,
        contact.fallback,
        theirs.as_deref(),
        ours.as_deref(),
    )
    .ok_or_else(|| BootstrapError::LoopbackOnly {
        centre: above,
        root_host: places[above].name.clone(),
        addr: contact.addr.ip(),
    })
}

/// The one PMIx all-gather of the job: every rank's card.
fn rendezvous(
    client: &Client,
    world_size: usize,
    card: &[u8],
    timeout: Duration,
) -> Result<Vec<Vec<u8>>, BootstrapError> {
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
    client.put(&key, card)?;
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
        .map(|peer| match peer == client.rank() {
            true => Ok(card.to_vec()),
            false => client.get_bytes(peer, &key).map_err(|e| match e {
                BootstrapError::Pmix { status, .. }
                    if status == symmem_pmix_sys::PMIX_ERR_NOT_FOUND =>
                {
                    BootstrapError::PmixStoreHidden { rank: peer }
                }
                other => other,
            }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Bootstrap;
    use crate::card::Contact;
    use crate::tcp::Secret;
    use crate::wire::PROTOCOL;
    use std::net::{IpAddr, Ipv4Addr};
    use symmem::CollectiveKind;
    use symmem::settings::SOCKET_IFNAME;
    use symmem::{Launcher, RankIdentity};

    fn alone() -> Result<RankIdentity, String> {
        RankIdentity::from_vars(|_| None).map_err(|e| e.to_string())
    }

    fn arrivals(world_size: usize) -> Vec<Arrival> {
        (0..world_size)
            .map(|rank| Arrival::new(rank, world_size, 0, alone()).unwrap())
            .collect()
    }

    fn cards(arrivals: &[Arrival]) -> Vec<Vec<u8>> {
        arrivals.iter().map(Arrival::card).collect()
    }

    fn barrier(seq: u64) -> CollectiveOp {
        CollectiveOp {
            seq,
            kind: CollectiveKind::Barrier,
        }
    }

    /// Every rank of a meeting opens its links on its own thread, as processes would.
    fn meet_all(
        arrivals: Vec<Arrival>,
        cards: &[Vec<u8>],
        dir: &Path,
        timeout: Duration,
    ) -> Vec<Result<Bootstrap, BootstrapError>> {
        std::thread::scope(|scope| {
            let handles: Vec<_> = arrivals
                .into_iter()
                .map(|arrival| {
                    scope.spawn(move || {
                        let meeting = Meeting::new(arrival, cards)?;
                        Bootstrap::meet(meeting, dir, timeout)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn a_meeting_opens_the_links_and_names_the_job_after_rank_0s_card() {
        let dir = tempfile::tempdir().unwrap();
        let arrivals = arrivals(3);
        let cards = cards(&arrivals);
        let identity = Meeting::new(Arrival::new(2, 3, 0, alone()).unwrap(), &cards)
            .unwrap()
            .identity();
        assert_eq!((identity.rank, identity.world_size), (2, 3));
        assert_eq!((identity.local_rank, identity.local_world_size), (2, 3));
        assert_eq!(identity.launcher, Launcher::Group);
        let job = identity.job_key.unwrap();
        assert!(job.starts_with("group-") && job.len() == 6 + 16, "{job}");
        let mut links: Vec<Bootstrap> =
            meet_all(arrivals, &cards, dir.path(), Duration::from_secs(20))
                .into_iter()
                .map(Result::unwrap)
                .collect();
        assert!(links.iter().all(|b| b.engine() == Engine::Group));
        let gathered: Vec<Vec<Vec<u8>>> = std::thread::scope(|scope| {
            let handles: Vec<_> = links
                .iter_mut()
                .map(|b| {
                    scope.spawn(move || {
                        let me = [b.rank() as u8];
                        b.exchange(&barrier(1), &me, None, 0).unwrap().payloads
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(
            gathered.iter().all(|g| g == &[vec![0], vec![1], vec![2]]),
            "{gathered:?}"
        );
    }

    #[test]
    fn cards_out_of_rank_order_or_missing_or_foreign_are_refused() {
        let arrivals = arrivals(2);
        let mut swapped = cards(&arrivals);
        swapped.swap(0, 1);
        let me = Arrival::new(1, 2, 0, alone()).unwrap();
        let err = Meeting::new(me, &swapped).err().unwrap();
        assert!(
            matches!(
                err,
                BootstrapError::CardDisagrees {
                    position: 0,
                    rank: 1,
                    ..
                }
            ),
            "{err}"
        );
        let me = Arrival::new(1, 2, 0, alone()).unwrap();
        let err = Meeting::new(me, &cards(&arrivals)[..1]).err().unwrap();
        assert!(
            matches!(
                err,
                BootstrapError::CardCount {
                    got: 1,
                    world_size: 2
                }
            ),
            "{err}"
        );
        let me = Arrival::new(1, 2, 0, alone()).unwrap();
        let err = Meeting::new(me, &[b"not a card".to_vec(), vec![]])
            .err()
            .unwrap();
        assert!(
            matches!(err, BootstrapError::BadCard { rank: 0, .. }),
            "{err}"
        );
    }

    #[test]
    fn a_launcher_that_disagrees_with_the_group_fails_every_rank() {
        let vars = |name: &str| match name {
            "OMPI_COMM_WORLD_RANK" => Some("0".to_string()),
            "OMPI_COMM_WORLD_SIZE" => Some("2".to_string()),
            _ => None,
        };
        let stale = RankIdentity::from_vars(vars).map_err(|e| e.to_string());
        let arrivals = vec![
            Arrival::new(0, 2, 0, alone()).unwrap(),
            Arrival::new(1, 2, 0, stale).unwrap(),
        ];
        let cards = cards(&arrivals);
        for arrival in arrivals {
            let err = Meeting::new(arrival, &cards).err().unwrap();
            let text = err.to_string();
            assert!(
                matches!(err, BootstrapError::RankRefused { rank: 1, .. }),
                "{text}"
            );
            assert!(
                text.contains("Open MPI's variables say rank 0 of 2"),
                "{text}"
            );
        }
        // Unreadable launcher variables, or a launcher around the group's processes (a Slurm
        // batch step: rank 0 of 1), say nothing of the group's ranks.
        let unreadable = Arrival::new(1, 2, 0, Err("RANK is not a number".into())).unwrap();
        assert_eq!(unreadable.place.refusal, None);
        let batch = |name: &str| match name {
            "SLURM_PROCID" => Some("0".to_string()),
            "SLURM_NTASKS" => Some("1".to_string()),
            _ => None,
        };
        let outer = RankIdentity::from_vars(batch).map_err(|e| e.to_string());
        assert_eq!(Arrival::new(1, 2, 0, outer).unwrap().place.refusal, None);
    }

    /// Rank 0 of two hosts "a" and "b" on this machine, listening on `root` (a loopback
    /// address) with `fallback` beside it, and rank 1 made to look as if it ran on another
    /// loopback (another host, or an isolated network namespace).
    fn loopback_root(root: Ipv4Addr, fallback: Option<Ipv4Addr>) -> [Arrival; 2] {
        let host = |name: &str| Host::Name(name.as_bytes().to_vec());
        let listener = tcp::listen(IpAddr::V4(root), 0).unwrap();
        let addr = listener.local_addr().unwrap();
        let secret = Secret::from_bytes([4; 32]);
        let mut rank0 = Arrival::at(0, 2, 0, host("a"), true).unwrap();
        rank0.place.contact = Some(Contact {
            addr,
            fallback: fallback.map(IpAddr::V4),
            secret: secret.clone(),
        });
        rank0.acceptor = Some(Acceptor::start(listener, secret).unwrap());
        let mut rank1 = Arrival::at(1, 2, 0, host("b"), true).unwrap();
        rank1.place.loopback = Some("another host".into());
        [rank0, rank1]
    }

    /// Opens both ranks' links at once: their results.
    fn meet_both(arrivals: [Arrival; 2]) -> [Result<(), BootstrapError>; 2] {
        let cards: Vec<Vec<u8>> = arrivals.iter().map(Arrival::card).collect();
        let timeout = Duration::from_secs(3);
        let ends = arrivals.map(|arrival| {
            let cards = cards.clone();
            std::thread::spawn(move || {
                let dir = tempfile::tempdir().unwrap();
                let meeting = Meeting::new(arrival, &cards)?;
                NodeLinks::meet(meeting, dir.path(), timeout).map(drop)
            })
        });
        ends.map(|end| end.join().unwrap())
    }

    /// R2: rank 0's host name resolves to a loopback address (Debian's and Ubuntu's
    /// 127.0.1.1) and its host has no other interface: rank 0 and the other host's leader both
    /// fail at once naming /etc/hosts and the setting, instead of the leader dialling its own
    /// loopback until the timeout.
    #[test]
    fn a_loopback_rank_0_with_no_other_interface_fails_at_once_on_both_sides() {
        let started = std::time::Instant::now();
        let ends = meet_both(loopback_root(Ipv4Addr::new(127, 0, 1, 1), None));
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        for (rank, end) in ends.into_iter().enumerate() {
            let err = end.expect_err("no address the leader reaches");
            let text = err.to_string();
            assert!(
                matches!(err, BootstrapError::LoopbackOnly { .. }),
                "rank {rank}: {text}"
            );
            assert!(
                text.contains("/etc/hosts") && text.contains("127.0.1.1"),
                "{text}"
            );
            assert!(text.contains(SOCKET_IFNAME.name), "{text}");
        }
    }

    /// R2: the same with an interface beside the loopback: rank 0 listens there too, on the
    /// same port, and the other host's leader joins through it.
    #[test]
    fn a_loopback_rank_0_is_reached_through_its_interface() {
        let ends = meet_both(loopback_root(
            Ipv4Addr::new(127, 0, 1, 1),
            Some(Ipv4Addr::new(127, 0, 0, 6)),
        ));
        for (rank, end) in ends.into_iter().enumerate() {
            end.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        }
    }

    /// A card of another build's control protocol (here one from before versions: no field,
    /// protocol 0) is refused on every rank at once, naming both versions.
    #[test]
    fn a_card_of_another_protocol_is_refused_naming_both() {
        let arrivals = arrivals(2);
        let mut cards = cards(&arrivals);
        let mut old: serde_json::Value = serde_json::from_slice(&cards[1]).unwrap();
        old.as_object_mut().unwrap().remove("protocol");
        cards[1] = serde_json::to_vec(&old).unwrap();
        let err = Meeting::new(Arrival::new(0, 2, 0, alone()).unwrap(), &cards)
            .err()
            .unwrap();
        let text = err.to_string();
        assert!(
            matches!(
                err,
                BootstrapError::ProtocolMismatch {
                    rank: 1,
                    theirs: 0,
                    this: 0,
                    ..
                }
            ),
            "{text}"
        );
        assert!(
            text.contains(&format!("protocol 0, rank 0 runs {PROTOCOL}")),
            "{text}"
        );
    }

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

//! The cards of the engines across hosts: what each rank tells the others in the one
//! all-gather of a job's first meeting ([`Arrival`], its [`Place`]), rank 0's contact (its
//! listener's address and the job secret) among them, and a program's own meeting of them
//! ([`Meeting`]). [`engine`](crate::engine) opens the links from the cards.

use crate::BootstrapError;
use crate::address;
use crate::pmix::Client;
use crate::tcp::{self, Acceptor, Secret};
use crate::wire::PROTOCOL;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use symmem::settings;
use symmem::{Launcher, RankIdentity};

/// Where a rank runs, as it tells the others when the engine opens: its card.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Place {
    /// Its rank and the world it thinks it is in: checked against the all-gather's order.
    pub(crate) rank: usize,
    pub(crate) world_size: usize,
    pub(crate) host: Host,
    /// Its emulated node ([`NODE_ID`](symmem::settings::NODE_ID)).
    pub(crate) emulated: u64,
    /// Its host name, for messages.
    pub(crate) name: String,
    /// Where the node leaders below it reach it, and the secret they prove: rank 0's (in a
    /// job of two ranks or more), and any rank's that may lead a node of a tree
    /// ([`Arrival::at`]).
    pub(crate) contact: Option<Contact>,
    /// Rank 0's only: the job's name, 16 hex digits of the kernel's random source.
    pub(crate) job: Option<String>,
    /// Where it should listen but has no `contact`: why it could not (its host name does not
    /// resolve, or its address cannot be bound), for the leaders' error.
    #[serde(default)]
    pub(crate) no_contact: Option<String>,
    /// Its [`CONTROL_FANOUT`](symmem::settings::CONTROL_FANOUT): every rank must build the
    /// same tree.
    #[serde(default)]
    pub(crate) fanout: usize,
    /// The provider this rank starts (a group's meeting only): every rank must start the same.
    #[serde(default)]
    pub(crate) provider: Option<String>,
    /// Why this rank cannot go on (a group's meeting only): every rank fails with it, instead
    /// of the others waiting for a rank that left before the links opened.
    #[serde(default)]
    pub(crate) refusal: Option<String>,
    /// The folder its node's ranks meet below, and which folder that is (device, inode):
    /// ranks of one host that see different ones (a private /tmp per container) cannot meet.
    #[serde(default)]
    pub(crate) base: Option<(PathBuf, (u64, u64))>,
    /// Which loopback it reaches ([`address::loopback_domain`]): a leader dials rank 0's
    /// loopback address only from rank 0's own.
    #[serde(default)]
    pub(crate) loopback: Option<String>,
    /// Its build's [`PROTOCOL`]: ranks of different builds refuse each other at once.
    #[serde(default)]
    pub(crate) protocol: u32,
}

impl Place {
    /// Rank `rank` of `world_size` on `host` and emulated node `node`, with nothing else.
    pub(crate) fn bare(rank: usize, world_size: usize, node: u64, host: Host) -> Self {
        Self {
            rank,
            world_size,
            host,
            emulated: node,
            name: address::host_name(),
            contact: None,
            job: None,
            no_contact: None,
            fanout: 0,
            provider: None,
            refusal: None,
            base: match crate::rendezvous::rendezvous_base_id() {
                (path, Some(id)) => Some((path, id)),
                (_, None) => None,
            },
            loopback: address::loopback_domain(),
            protocol: PROTOCOL,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Contact {
    pub(crate) addr: SocketAddr,
    /// Where `addr` is a loopback address: the address it also listens on (same port) for
    /// leaders that do not share its loopback ([`address::dial`]).
    #[serde(default)]
    pub(crate) fallback: Option<IpAddr>,
    pub(crate) secret: Secret,
}

/// A rank's host as the engine tells hosts apart: the launcher's node id where the PMIx server
/// gives one, else the host name's bytes (compared as they are, never hashed, so ranks built
/// by different toolchains agree).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Host {
    NodeId(u64),
    Name(Vec<u8>),
}

impl Host {
    pub(crate) fn of(client: &Client) -> Self {
        match client.node_id() {
            Some(id) => Self::NodeId(id),
            None => Self::named(),
        }
    }

    /// This host by its name and its kernel's boot id: machines that share a host name
    /// (containers, cloned images) are still told apart.
    pub(crate) fn named() -> Self {
        let mut key = nix::unistd::gethostname()
            .map(|name| name.into_encoded_bytes())
            .unwrap_or_default();
        if let Ok(boot) = std::fs::read("/proc/sys/kernel/random/boot_id") {
            key.push(0);
            key.extend(boot.trim_ascii());
        }
        Self::Name(key)
    }
}

/// One rank's arrival at the job's first meeting: its card ([`card`](Self::card)) for the
/// all-gather, and, where it may lead nodes below it (rank 0 of a job of two ranks or more;
/// see [`Arrival::at`]), the listener their leaders will reach. Made before the all-gather, kept until the links open
/// ([`Bootstrap::meet`]).
pub struct Arrival {
    pub(crate) acceptor: Option<Acceptor>,
    pub(crate) place: Place,
}

impl Arrival {
    /// Rank `rank` of `world_size` of a group's meeting, on emulated node `node`
    /// ([`NODE_ID`](symmem::settings::NODE_ID)), its host told by its name. `launcher` is
    /// what the launcher's variables say of this process ([`RankIdentity::from_env`]): where it
    /// names another rank of a world of the group's size (another job's variables), the card
    /// carries the refusal and every rank's [`Meeting::new`] fails with it. A launcher of
    /// another world size is one around the group's processes (a Slurm batch step around
    /// `torch.multiprocessing.spawn`) and says nothing of them; unreadable variables likewise.
    /// Only a rank out of range is an error here (the group never gives one).
    pub fn new(
        rank: usize,
        world_size: usize,
        node: u64,
        launcher: Result<RankIdentity, String>,
    ) -> Result<Self, BootstrapError> {
        // Only a launcher that knows the ranks per node says which rank is a node's first: one
        // that gives no local variables makes every rank local (local rank = rank, one node).
        let launcher_local = launcher
            .as_ref()
            .ok()
            .filter(|l| l.world_size == world_size && l.local_world_size < world_size)
            .map(|l| l.local_rank);
        let may_lead = may_lead(launcher_local);
        let mut arrival = match Self::at(rank, world_size, node, Host::named(), may_lead) {
            Ok(arrival) => arrival,
            Err(e @ (BootstrapError::WorldSizeZero | BootstrapError::RankOutOfRange { .. })) => {
                return Err(e);
            }
            // Said on every rank, not left for the others to wait out.
            Err(other) => {
                let mut place = Place::bare(rank, world_size, node, Host::named());
                place.refusal = Some(other.to_string());
                Self {
                    acceptor: None,
                    place,
                }
            }
        };
        match launcher {
            Ok(launcher) => {
                if let Err(e) = check_launcher(rank, world_size, &launcher) {
                    arrival.refuse(e.to_string());
                }
            }
            Err(e) => tracing::debug!(error = %e, "no launcher identity beside the group"),
        }
        Ok(arrival)
    }

    /// Every rank's [`Meeting::new`] fails with `reason` (the first one given wins).
    pub fn refuse(&mut self, reason: impl Into<String>) {
        self.place.refusal.get_or_insert(reason.into());
    }

    /// The provider this rank starts: [`Meeting::new`] refuses ranks that start different ones.
    pub fn provider(&mut self, name: &str) {
        self.place.provider = Some(name.to_string());
    }

    /// Rank `rank`'s arrival. It listens for the node leaders below it when it may have some:
    /// rank 0 (the root) in a job of two ranks or more, and, where the job may span more
    /// nodes than rank 0 serves alone ([`CONTROL_FANOUT`](settings::CONTROL_FANOUT)), any rank
    /// that `may_lead` a node (its host's first, as far as the launcher says): which ranks lead
    /// which nodes is known only once every card is in, and the leaders below connect then.
    pub(crate) fn at(
        rank: usize,
        world_size: usize,
        node: u64,
        host: Host,
        may_lead: bool,
    ) -> Result<Self, BootstrapError> {
        if world_size == 0 {
            return Err(BootstrapError::WorldSizeZero);
        }
        if rank >= world_size {
            return Err(BootstrapError::RankOutOfRange { rank, world_size });
        }
        let mut place = Place::bare(rank, world_size, node, host);
        place.fanout = settings::CONTROL_FANOUT.get()?;
        if rank == 0 {
            place.job = Some(job_name()?);
        }
        let tree_possible = world_size > place.fanout.saturating_add(1);
        let listens = world_size > 1 && (rank == 0 || (tree_possible && may_lead));
        let mut acceptor = None;
        if listens {
            match open_listener()? {
                Ok((open, contact)) => (acceptor, place.contact) = (Some(open), Some(contact)),
                Err(why) => place.no_contact = Some(why),
            }
        }
        Ok(Self { acceptor, place })
    }

    /// What this rank contributes to the all-gather: every rank's cards, in rank order, go to
    /// [`Meeting::new`].
    pub fn card(&self) -> Vec<u8> {
        serde_json::to_vec(&self.place).expect("a place is plain data")
    }

    /// The places of `cards` (every rank's, in rank order), each checked to be a card of
    /// this job's rank at its position.
    pub(crate) fn read(&self, cards: &[Vec<u8>]) -> Result<Vec<Place>, BootstrapError> {
        let world_size = self.place.world_size;
        if cards.len() != world_size {
            return Err(BootstrapError::CardCount {
                got: cards.len(),
                world_size,
            });
        }
        let places = cards
            .iter()
            .enumerate()
            .map(|(rank, card)| {
                if rank == self.place.rank {
                    return Ok(self.place.clone());
                }
                let place: Place =
                    serde_json::from_slice(card).map_err(|e| BootstrapError::BadCard {
                        rank,
                        cause: e.to_string(),
                    })?;
                if (place.rank, place.world_size) != (rank, world_size) {
                    return Err(BootstrapError::CardDisagrees {
                        position: rank,
                        rank: place.rank,
                        said_world: place.world_size,
                        world_size,
                    });
                }
                Ok(place)
            })
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(rank) = (0..world_size).find(|&r| places[r].protocol != PROTOCOL) {
            return Err(BootstrapError::ProtocolMismatch {
                rank,
                theirs: places[rank].protocol,
                this: self.place.rank,
                ours: PROTOCOL,
            });
        }
        if let Some((rank, reason)) = places
            .iter()
            .enumerate()
            .find_map(|(rank, p)| p.refusal.clone().map(|reason| (rank, reason)))
        {
            return Err(BootstrapError::RankRefused { rank, reason });
        }
        if let Some(rank) = (1..places.len()).find(|&r| places[r].fanout != places[0].fanout) {
            return Err(BootstrapError::FanoutsDisagree {
                rank,
                fanout: places[rank].fanout,
                first: places[0].fanout,
            });
        }
        if let Some(rank) = (1..places.len()).find(|&r| places[r].provider != places[0].provider) {
            return Err(BootstrapError::ProvidersDisagree {
                rank,
                provider: places[rank].provider.clone().unwrap_or_default(),
                first: places[0].provider.clone().unwrap_or_default(),
            });
        }
        if places[0].job.is_none() {
            return Err(BootstrapError::BadCard {
                rank: 0,
                cause: "rank 0's card has no job name".into(),
            });
        }
        Ok(places)
    }
}

/// Whether a rank may lead a node, as far as can be told before the cards are in: its host's
/// first rank by the launcher (`local_rank`, where it gives one), and any rank where the
/// launcher gives none or nodes are emulated ([`NODE_ID`](settings::NODE_ID) set: an emulated
/// node's first rank need not be its host's).
pub(crate) fn may_lead(local_rank: Option<usize>) -> bool {
    let emulated = settings::NODE_ID.read().ok().flatten().is_some();
    emulated || local_rank.is_none_or(|local| local == 0)
}

/// Where a launcher's variables (`launcher`, read from the environment) name another rank of
/// a world of the group's size than the group does (rank `rank` of `world_size`: stale
/// variables of another job): an error naming both. No launcher variables
/// (`torch.multiprocessing.spawn`) and a launcher of another world size (one around the
/// group's processes) agree with any group.
fn check_launcher(
    rank: usize,
    world_size: usize,
    launcher: &RankIdentity,
) -> Result<(), BootstrapError> {
    if matches!(launcher.launcher, Launcher::Singleton | Launcher::Group)
        || launcher.world_size != world_size
        || launcher.rank == rank
    {
        return Ok(());
    }
    Err(BootstrapError::GroupDisagrees {
        rank,
        world_size,
        launcher: launcher.launcher.to_string(),
        launcher_rank: launcher.rank,
        launcher_world: launcher.world_size,
    })
}

/// 8 bytes of the kernel's random source, as 16 hex digits.
pub(crate) fn job_name() -> Result<String, BootstrapError> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| BootstrapError::Random(e.to_string()))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A meeting the program ran itself: this rank's [`Arrival`] and every rank's card, gathered
/// in rank order by an all-gather of the program's (symmem's Python package: a
/// `torch.distributed` process group). It knows the job's shape before any link opens
/// ([`identity`](Self::identity)); [`Bootstrap::meet`] opens the links.
pub struct Meeting {
    pub(crate) arrival: Arrival,
    pub(crate) places: Vec<Place>,
}

impl Meeting {
    /// Checks `cards` (every rank's [`Arrival::card`], in rank order) against `arrival`.
    pub fn new(arrival: Arrival, cards: &[Vec<u8>]) -> Result<Self, BootstrapError> {
        let places = arrival.read(cards)?;
        Ok(Self { arrival, places })
    }

    /// This rank's place in the job as the cards tell it: its local rank and local size
    /// count the ranks of its host, the job's name names its rendezvous folder
    /// ([`default_rendezvous`](crate::default_rendezvous)).
    pub fn identity(&self) -> RankIdentity {
        let me = &self.places[self.arrival.place.rank];
        let local: Vec<usize> = (0..self.places.len())
            .filter(|&r| self.places[r].host == me.host)
            .collect();
        RankIdentity {
            rank: me.rank,
            world_size: me.world_size,
            local_rank: local.iter().position(|&r| r == me.rank).unwrap_or(0),
            local_world_size: local.len(),
            launcher: Launcher::Group,
            job_key: self.places[0]
                .job
                .as_ref()
                .map(|job| format!("group-{job}")),
            nodes: None,
        }
    }
}

/// Rank 0's listener on its node's address ([`address::listen_plan`]), served from now on, and
/// what it publishes: that address (and the fallback beside it) and a new job secret. Where it
/// cannot listen (no address, or it cannot be bound), why: an error only if the job turns out
/// to span hosts.
#[allow(clippy::type_complexity)]
pub(crate) fn open_listener() -> Result<Result<(Acceptor, Contact), String>, BootstrapError> {
    let plan = match address::listen_plan() {
        Ok(plan) => plan,
        Err(e @ BootstrapError::Setting(_)) => return Err(e),
        Err(e) => return Ok(Err(e.to_string())),
    };
    let listener = match tcp::listen(plan.primary, 0) {
        Ok(listener) => listener,
        Err(e) => {
            tracing::debug!(error = %e, "cannot listen: no node leader can connect to this rank");
            return Ok(Err(e.to_string()));
        }
    };
    let addr = listener
        .local_addr()
        .map_err(|e| BootstrapError::io("reading the leaders' listener's address", e))?;
    let secret = Secret::generate()?;
    let contact = Contact {
        addr,
        fallback: plan.fallback,
        secret: secret.clone(),
    };
    Ok(Ok((Acceptor::start(listener, secret)?, contact)))
}

/// Why node leader `rank` (rank 0, or a leader with leaders below it) has no listener, as
/// its card says.
pub(crate) fn no_contact(places: &[Place], rank: usize) -> BootstrapError {
    BootstrapError::NodeAddress {
        host: places[rank].name.clone(),
        cause: places[rank]
            .no_contact
            .clone()
            .unwrap_or_else(|| format!("rank {rank} could not listen on it")),
    }
}

//! [`Bootstrap`]: one rank's end of the control plane. On one host it meets the other ranks
//! over a Unix [`star`](crate::star), across hosts through an [`engine`](crate::engine), then
//! runs each collective through the exchange of [`exchange`](crate::exchange).

use crate::BootstrapError;
use crate::card::Meeting;
use crate::engine::NodeLinks;
use crate::exchange::{ANSWER_MARGIN, Gathered, leaf_exchange, root_exchange};
use crate::star::{self, StarEnd};
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::time::Duration;
use symmem::{CollectiveOp, Engine, RankIdentity, Topology};

enum Links {
    /// The Unix star of the whole job (one host), rank 0 at its centre.
    Star(StarEnd),
    /// The PMIx or the group engine (ranks on any hosts), with its node-local star inside.
    Nodes(Box<NodeLinks>),
}

/// One rank's end of the control plane.
pub struct Bootstrap {
    rank: usize,
    world_size: usize,
    timeout: Duration,
    links: Links,
    topology: Topology,
    /// The PMIx client [`identify`](crate::identify) opened to name this rank, held for the
    /// job's life by a rank of the Unix star (finalised as it drops).
    _pmix: Option<crate::pmix::Client>,
}

impl Bootstrap {
    /// Joins the job's rendezvous in `dir`: rank 0 waits for every other rank, the others
    /// connect to rank 0; both sides refuse a peer running as another user. Every rank is on
    /// one node ([`topology`](Self::topology)).
    ///
    /// `dir` (created by rank 0 if missing, removed again once everyone is in if it created
    /// it) must be a folder of this user that no one else can write, reached without a folder
    /// or link of another user on the way; rank 0 binds and the others connect through its
    /// descriptor, so its path may be of any length and cannot be swapped after the check.
    pub fn connect(
        rank: usize,
        world_size: usize,
        dir: &Path,
        timeout: Duration,
    ) -> Result<Self, BootstrapError> {
        Self::star(rank, world_size, 0, dir, timeout).map_err(|e| witnessed(rank, e))
    }

    /// As [`connect`](Self::connect), this rank on emulated node `node`: the handshake
    /// gathers every rank's, for the [`topology`](Self::topology).
    fn star(
        rank: usize,
        world_size: usize,
        node: u64,
        dir: &Path,
        timeout: Duration,
    ) -> Result<Self, BootstrapError> {
        let (end, nodes) = star::open(rank, world_size, node, dir, timeout)?;
        Ok(Self {
            rank,
            world_size,
            timeout,
            links: Links::Star(end),
            topology: Topology::one_host(&nodes),
            _pmix: None,
        })
    }

    /// Joins the job through the engine [`symmem::choose_engine`] picks from
    /// [`BOOTSTRAP`](symmem::settings::BOOTSTRAP) and the launcher's environment: the Unix
    /// star of [`connect`](Self::connect) on one host, the launcher's PMIx server across
    /// nodes. A job that spans nodes with no engine is refused at once, naming the fix. This
    /// rank is on emulated node `node` ([`NODE_ID`](symmem::settings::NODE_ID)).
    pub fn join(
        identity: &RankIdentity,
        node: u64,
        dir: &Path,
        timeout: Duration,
    ) -> Result<Self, BootstrapError> {
        let get = |name: &str| std::env::var(name).ok();
        let choice = symmem::settings::BOOTSTRAP.get_from(get)?;
        let engine = symmem::choose_engine(choice, identity, get)?;
        tracing::debug!(?engine, %choice, rank = identity.rank, "control plane engine");
        Self::open(
            engine,
            identity.rank,
            identity.world_size,
            node,
            dir,
            timeout,
        )
    }

    /// Joins the job through `engine` (see [`join`](Self::join)).
    pub fn open(
        engine: Engine,
        rank: usize,
        world_size: usize,
        node: u64,
        dir: &Path,
        timeout: Duration,
    ) -> Result<Self, BootstrapError> {
        Self::open_engine(engine, rank, world_size, node, dir, timeout)
            .map_err(|e| witnessed(rank, e))
    }

    fn open_engine(
        engine: Engine,
        rank: usize,
        world_size: usize,
        node: u64,
        dir: &Path,
        timeout: Duration,
    ) -> Result<Self, BootstrapError> {
        match engine {
            Engine::Unix => {
                let mut star = Self::star(rank, world_size, node, dir, timeout)?;
                star._pmix = crate::pmix::take_kept();
                Ok(star)
            }
            Engine::Pmix => {
                if world_size == 0 {
                    return Err(BootstrapError::WorldSizeZero);
                }
                let (links, topology) = NodeLinks::connect(rank, world_size, node, dir, timeout)?;
                Ok(Self::over(links, topology, rank, world_size, timeout))
            }
            Engine::Group => Err(BootstrapError::GroupCannotReopen),
        }
    }

    /// Opens the links of a meeting the program ran itself (a `torch.distributed` group's
    /// all-gather of every rank's card): the ranks of each host over their own star in
    /// `<dir>/node-<host>`, the other hosts' leaders over TCP to rank 0, as under PMIx.
    /// `dir` is the meeting's rendezvous folder
    /// ([`default_rendezvous`](crate::default_rendezvous) of [`Meeting::identity`]).
    pub fn meet(meeting: Meeting, dir: &Path, timeout: Duration) -> Result<Self, BootstrapError> {
        let identity = meeting.identity();
        let (links, topology) =
            NodeLinks::meet(meeting, dir, timeout).map_err(|e| witnessed(identity.rank, e))?;
        Ok(Self::over(
            links,
            topology,
            identity.rank,
            identity.world_size,
            timeout,
        ))
    }

    fn over(
        links: NodeLinks,
        topology: Topology,
        rank: usize,
        world_size: usize,
        timeout: Duration,
    ) -> Self {
        Self {
            rank,
            world_size,
            timeout,
            links: Links::Nodes(Box::new(links)),
            topology,
            _pmix: None,
        }
    }

    /// The engine this rank meets the others through.
    pub fn engine(&self) -> Engine {
        match &self.links {
            Links::Nodes(links) => links.engine(),
            _ => Engine::Unix,
        }
    }

    /// Which node every rank is on: the engine's node (one host on the Unix star; under
    /// PMIx the launcher's node id, else the host name) with the emulated node given at
    /// [`join`](Self::join). The one answer to "same node?" and "one host?".
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    pub fn rank(&self) -> usize {
        self.rank
    }
    pub fn world_size(&self) -> usize {
        self.world_size
    }
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Collective: waits for every rank and checks that all issued `op`.
    pub fn barrier(&mut self, op: &CollectiveOp) -> Result<(), BootstrapError> {
        self.exchange(op, &[], None, 0).map(drop)
    }

    /// Collective all-gather: every rank contributes `payload` (and optionally one descriptor)
    /// under `op`; on agreement every rank receives all payloads, and the descriptors of the
    /// ranks that gave the same `fd_group`.
    pub fn exchange(
        &mut self,
        op: &CollectiveOp,
        payload: &[u8],
        fd: Option<BorrowedFd<'_>>,
        fd_group: u64,
    ) -> Result<Gathered, BootstrapError> {
        let rank = self.rank;
        self.exchange_links(op, payload, fd, fd_group)
            .map_err(|e| witnessed(rank, e))
    }

    fn exchange_links(
        &mut self,
        op: &CollectiveOp,
        payload: &[u8],
        fd: Option<BorrowedFd<'_>>,
        fd_group: u64,
    ) -> Result<Gathered, BootstrapError> {
        match &mut self.links {
            Links::Star(StarEnd::Alone) => Ok(Gathered {
                payloads: vec![payload.to_vec()],
                fds: vec![None],
            }),
            Links::Star(StarEnd::Leaf(root)) => leaf_exchange(
                root,
                self.world_size,
                self.timeout,
                ANSWER_MARGIN,
                op,
                payload,
                fd,
                fd_group,
            ),
            Links::Star(StarEnd::Centre(leaves)) => {
                root_exchange(leaves, self.timeout, op, payload, fd, fd_group)
            }
            Links::Nodes(links) => links.exchange(op, payload, fd, fd_group),
        }
    }
}

/// `error`, after rank `rank` wrote the witness's line it holds, if any, to stderr
/// ([`BootstrapError::witness`]): the launcher reads it, whatever the program then prints.
fn witnessed(rank: usize, error: BootstrapError) -> BootstrapError {
    if let Some(witness) = error.witness(rank) {
        eprintln!("{}", witness.line());
        if matches!(error, BootstrapError::EngineTimeout { .. }) {
            std::thread::sleep(FENCE_SETTLE);
        }
    }
    error
}

/// After its report that the PMIx rendezvous timed out, how long a rank holds the error before
/// returning it (and so its exit). PMIx cannot say which rank never came, so the launcher names
/// the one that wrote no witness's report: the ranks still waiting, whose own fence started a
/// little later (another node's ranks start later), must get to write theirs before the first
/// witness's exit ends the job. Without it a stopped leaf's node leader, still waiting, was
/// sometimes named in the leaf's place (mpirun, SIGSTOP at start-up: 1 run in 20).
const FENCE_SETTLE: Duration = Duration::from_secs(2);

impl Drop for Bootstrap {
    /// Across nodes, a rank that panics keeps its links open until its process ends: closed
    /// while it unwinds, they would let the other ranks give up on it (and exit) before the
    /// launcher sees it end, and the launcher would then name one of them first (M1). Its
    /// process's end closes them, so the others still learn of it at once.
    fn drop(&mut self) {
        if std::thread::panicking() && matches!(self.links, Links::Nodes(_)) {
            std::mem::forget(std::mem::replace(
                &mut self.links,
                Links::Star(StarEnd::Alone),
            ));
        }
    }
}

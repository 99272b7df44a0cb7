use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;
use symmem::settings::{BOOTSTRAP, COLLECTIVE_TIMEOUT, CONTROL_FANOUT, RENDEZVOUS, SOCKET_IFNAME};
use symmem::{
    Blame, CollectiveMismatch, CollectiveOp, ProviderError, count_ranks, describe_ranks,
    format_duration,
};

/// Why a collective failed; rank 0 sends the same failure to every rank.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum CollectiveFailure {
    #[error(transparent)]
    Mismatch(#[from] CollectiveMismatch),
    #[error(
        "{} never arrived at collective {op} within {} (hung, or out of order with \
         the other ranks); raise {} if ranks legitimately take longer",
        describe_ranks(.missing),
        format_duration(std::time::Duration::from_millis(*.waited_ms)),
        COLLECTIVE_TIMEOUT.name
    )]
    NeverArrived {
        op: CollectiveOp,
        missing: Vec<usize>,
        waited_ms: u64,
    },
    #[error(
        "rank {rank} disconnected before collective {op} (it exited or crashed); see its output"
    )]
    PeerGone { rank: usize, op: CollectiveOp },
    #[error(
        "rank {rank} on node {node} was lost during collective {op} (it exited, crashed, or its \
         node or the network to it failed); see its output and the launcher's report"
    )]
    GoneFromNode {
        rank: usize,
        node: String,
        op: CollectiveOp,
    },
    /// Seen by a node leader below another in a tree: the link to the one above closed. Not
    /// a claim that it went away on its own: a leader stopped in the middle of the tree keeps
    /// the others' verdict from the leaders below it, which then see it ended by the launcher.
    /// Its own parent (or rank 0) names how it failed.
    #[error(
        "rank {rank}, the node leader above this node's (on node {node}), was lost during \
         collective {op}: it went away, or the launcher ended it after another rank failed; see \
         the launcher's report"
    )]
    AboveLost {
        rank: usize,
        node: String,
        op: CollectiveOp,
    },
    #[error("rank {rank} broke the control protocol during collective {op}: {what}")]
    Protocol {
        rank: usize,
        op: CollectiveOp,
        what: String,
    },
    #[error(
        "a control frame between rank {leader}, the leader of node {node}, and the node leader \
         above it (rank 0 in a star) failed authentication during collective {op}: it was \
         altered in transit, or does not come from this job, so the collective was stopped. \
         Something on the network between node {node} and the node above it changes or injects \
         TCP traffic: find it (a middlebox, or an attacker), then start the job again"
    )]
    Unauthenticated {
        /// The node leader at the lower end of the link.
        leader: usize,
        node: String,
        op: CollectiveOp,
    },
}

/// Errors of the control plane. Each names what to do.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error(transparent)]
    Collective(#[from] CollectiveFailure),
    #[error(
        "rank 0 disconnected during collective {op} (it exited or crashed); see rank 0's output"
    )]
    RootGone { op: CollectiveOp },
    #[error(
        "rank 0 did not answer collective {op} within {}; it is hung or was stopped (raise \
         {} if ranks legitimately take longer)",
        format_duration(*.waited),
        COLLECTIVE_TIMEOUT.name
    )]
    RootSilent { op: CollectiveOp, waited: Duration },
    #[error(
        "rank {leader}, the leader of node {node}, disconnected during collective {op} (it \
         exited or crashed); see its output"
    )]
    LeaderGone {
        leader: usize,
        node: String,
        op: CollectiveOp,
    },
    #[error(
        "rank {leader}, the leader of node {node}, did not answer collective {op} within {}; it \
         is hung or was stopped (raise {} if ranks legitimately take longer)",
        format_duration(*.waited),
        COLLECTIVE_TIMEOUT.name
    )]
    LeaderSilent {
        leader: usize,
        node: String,
        op: CollectiveOp,
        waited: Duration,
    },
    #[error(
        "cannot find this node's address for the control plane: its host name {host} does not \
         resolve ({cause}); map it to an address the other nodes reach, in /etc/hosts or DNS"
    )]
    NodeAddress { host: String, cause: String },
    #[error(
        "cannot reach rank {centre}'s control socket at {addr} ({cause}); let TCP from this node \
         reach that address (firewall), and make rank {centre}'s host name resolve to an address \
         the other nodes reach"
    )]
    RootUnreachable {
        /// The node leader it dialled: rank 0, or the leader above this one in the tree.
        centre: usize,
        addr: std::net::SocketAddr,
        cause: String,
    },
    #[error(
        "the control socket at {addr} is not rank {centre} of this job, or refused this node \
         ({cause}); is another job's process at that address? Start the job again"
    )]
    RootRefused {
        centre: usize,
        addr: std::net::SocketAddr,
        cause: String,
    },
    #[error(
        "the leaders of other nodes ({}) never reached rank {centre} at {addr} within {}; let \
         TCP from every node reach that address (firewall), and see those ranks' output",
        describe_ranks(.missing), format_duration(*.waited)
    )]
    LeadersMissing {
        missing: Vec<usize>,
        /// The leader they were to reach: rank 0, or theirs in the tree.
        centre: usize,
        addr: std::net::SocketAddr,
        waited: Duration,
    },
    #[error(
        "cannot derive a rendezvous folder: no launcher job id in the environment; set \
         {}=<a folder on this host, the same for every rank of the job>",
        RENDEZVOUS.name
    )]
    NoRendezvous,
    #[error(
        "rendezvous folder {dir} is not usable ({cause}); set {}=<a writable folder you \
         own>",
        RENDEZVOUS.name
    )]
    RendezvousNotWritable { dir: PathBuf, cause: std::io::Error },
    #[error(
        "{path} ({what}) belongs to uid {uid} (mode {mode:04o}), not to this job's uid {me}: its \
         owner could redirect the ranks or replace their socket, so it is refused. Have its \
         owner (or root) remove it if it is stale, or set {}=<a folder only you can write, \
         e.g. `mkdir -m 700 ~/.symmem-rendezvous`>",
        RENDEZVOUS.name
    )]
    RendezvousForeign {
        /// "the rendezvous folder", or what lies on the way to it.
        what: &'static str,
        path: PathBuf,
        uid: u32,
        mode: u32,
        me: u32,
    },
    #[error(
        "{dir} ({what}) is writable by other users (mode {mode:04o}): any of them could replace \
         what the ranks rely on in it, so it is refused. Run `chmod go-w {dir}`, or set {}=<a \
         folder only you can write>",
        RENDEZVOUS.name
    )]
    RendezvousWritable {
        /// "the rendezvous folder", or what lies on the way to it.
        what: &'static str,
        dir: PathBuf,
        mode: u32,
    },
    #[error(
        "rendezvous folder {dir} is a symbolic link (to {target}, owned by uid {uid}): whoever \
         can write the folder it is in could re-point it, so it is refused. Set {}=<the real \
         folder> (if {target} is yours and private, use that)",
        RENDEZVOUS.name
    )]
    RendezvousSymlink {
        dir: PathBuf,
        target: PathBuf,
        uid: u32,
    },
    #[error(
        "rendezvous folder {dir} is {what}, not a folder; remove it, or set {}=<another folder>",
        RENDEZVOUS.name
    )]
    RendezvousNotAFolder { dir: PathBuf, what: String },
    #[error(
        "{path} is {what}, not a socket left by a symmem job, so rank 0 neither removes it nor \
         binds there; remove it yourself if it is stale, or give this job its own folder with \
         {}",
        RENDEZVOUS.name
    )]
    RendezvousOccupied { path: PathBuf, what: String },
    #[error(
        "cannot reach the rendezvous folder {dir} through /proc/self/fd ({cause}): the ranks \
         bind and connect inside the checked folder by its descriptor, which needs /proc; \
         mount it (`mount -t proc proc /proc`)"
    )]
    NoProcFd { dir: PathBuf, cause: std::io::Error },
    #[error(
        "rendezvous {path} is in use by another running job; give this job its own folder \
         with {}",
        RENDEZVOUS.name
    )]
    RendezvousInUse { path: PathBuf },
    #[error(
        "rank {rank} could not reach rank {centre} at {path} within {}; is rank {centre} \
         running, with the same {}?", format_duration(*.waited), RENDEZVOUS.name
    )]
    ConnectTimeout {
        rank: usize,
        /// The rank the star meets around: rank 0, or its node's leader across nodes.
        centre: usize,
        path: PathBuf,
        waited: Duration,
    },
    #[error(
        "{} never connected to rank {centre} at {path} within {}; did every rank start, with \
         the same {} and world size?", describe_ranks(.missing), format_duration(*.waited),
         RENDEZVOUS.name
    )]
    AcceptTimeout {
        missing: Vec<usize>,
        /// The rank the star meets around: rank 0, or its node's leader across nodes.
        centre: usize,
        path: PathBuf,
        waited: Duration,
    },
    #[error(
        "a process of uid {uid} (pid {pid}) joined the rendezvous, but this job runs as uid \
         {expected}; only the job's own user may map its heaps: use a private {} folder",
        RENDEZVOUS.name
    )]
    ForeignUid { uid: u32, pid: i32, expected: u32 },
    #[error(
        "rank {centre} never answered the rendezvous within {}: it accepted this rank's \
         connection but sent no welcome (stopped, or hung); see its output",
        format_duration(*.waited)
    )]
    NoWelcome {
        /// The rank the star meets around: rank 0, or its node's leader across nodes.
        centre: usize,
        waited: Duration,
    },
    #[error(
        "rank {rank} went away during start-up: it joined rank {centre}'s rendezvous, then ended \
         before every rank was in (killed, or crashed?); see its output"
    )]
    LeftBeforeWelcome {
        rank: usize,
        /// The rank the star meets around: rank 0, or its node's leader across nodes.
        centre: usize,
    },
    #[error(
        "rank {rank} has {} {fanout} but rank 0 has {first}: every rank must build the same \
         tree of node leaders; export the same value to every rank",
        CONTROL_FANOUT.name
    )]
    FanoutsDisagree {
        rank: usize,
        fanout: usize,
        first: usize,
    },
    #[error("rendezvous handshake refused: {0}")]
    Handshake(String),
    #[error(
        "rank 0 left the rendezvous before every rank joined (it gave up waiting for some, or it \
         ended): see rank 0's output, which names the ranks that never came"
    )]
    RootGaveUp,
    #[error(
        "rank {rank} is out of range for a world of {}",
        count_ranks(*.world_size)
    )]
    RankOutOfRange { rank: usize, world_size: usize },
    #[error("world size 0: a job has at least one rank")]
    WorldSizeZero,
    #[error("{what}: {cause}")]
    Io { what: String, cause: std::io::Error },
    #[error("malformed control message: {0}; are all ranks running the same symmem build?")]
    Protocol(String),
    #[error(
        "rank {rank} runs symmem's control protocol {theirs}, rank {this} runs {ours}: every \
         rank of a job must run the same symmem build (rebuild the program and give every node \
         the same one)"
    )]
    ProtocolMismatch {
        rank: usize,
        theirs: u32,
        this: usize,
        ours: u32,
    },
    #[error(
        "a control frame over TCP failed authentication: it was altered in transit, or does \
         not come from this job's other end of the link"
    )]
    FrameUnauthenticated,
    #[error("the kernel's random source failed ({0}); symmem needs it for the job's secret")]
    Random(String),
    #[error(
        "the group's all-gather gave {got} cards for a world of {}: every rank of the group \
         must contribute exactly one (symmem.init(group=...) on every rank, the same group)",
        count_ranks(*.world_size)
    )]
    CardCount { got: usize, world_size: usize },
    #[error(
        "rank {rank}'s card from the group's all-gather is not a symmem card ({cause}): every \
         rank must run the same symmem build and contribute its own card"
    )]
    BadCard { rank: usize, cause: String },
    #[error(
        "the card at rank {position} of the group's all-gather is rank {rank} of {said_world}'s, \
         not rank {position} of {world_size}'s: pass the same group on every rank, and the \
         group's own ranks (the default group, not a subgroup)"
    )]
    CardDisagrees {
        position: usize,
        rank: usize,
        said_world: usize,
        world_size: usize,
    },
    #[error(
        "the torch.distributed group says this process is rank {rank} of {world_size}, \
         {launcher}'s variables say rank {launcher_rank} of {launcher_world}: initialise \
         torch.distributed with the launcher's RANK and WORLD_SIZE (the env:// default), or \
         start the processes without that launcher's variables"
    )]
    GroupDisagrees {
        rank: usize,
        world_size: usize,
        launcher: String,
        launcher_rank: usize,
        launcher_world: usize,
    },
    #[error(
        "rank {centre}'s host {root_host} published {addr}, which this host ({host}) resolves its \
         own name to as well, so no other host reaches rank {centre} there: map each host's name \
         to an \
         address the other hosts reach, in /etc/hosts or DNS (Debian and Ubuntu map it to \
         127.0.1.1 in /etc/hosts by default)"
    )]
    SharedAddress {
        centre: usize,
        root_host: String,
        addr: std::net::IpAddr,
        host: String,
    },
    #[error(
        "rank {centre} ({root_host}) listens for the other nodes on {addr}, a loopback address no \
         other \
         host reaches (its host name resolves to it and no other interface is up, or {0} names \
         a loopback interface): map {root_host} to an address the other hosts reach in \
         /etc/hosts or DNS (Debian and Ubuntu write `127.0.1.1 <host name>` there), or set {0} \
         to the interface they reach (such as eth0)",
        SOCKET_IFNAME.name
    )]
    LoopbackOnly {
        centre: usize,
        root_host: String,
        addr: std::net::IpAddr,
    },
    #[error(
        "{}={filter} allows none of this host's interfaces with an address ({}); name one of \
         them, or unset it",
        SOCKET_IFNAME.name, .present.join(", ")
    )]
    NoInterface {
        filter: String,
        present: Vec<String>,
    },
    #[error("rank {rank} cannot join this job: {reason}")]
    RankRefused { rank: usize, reason: String },
    #[error(
        "rank {rank} starts the {provider} provider, rank 0 the {first} one: every rank must \
         start the same (symmem.init(provider) or {} alike on every rank)",
        symmem::settings::PROVIDER.name
    )]
    ProvidersDisagree {
        rank: usize,
        provider: String,
        first: String,
    },
    #[error(
        "these ranks met through a torch.distributed group, which symmem cannot ask for a \
         second meeting: open sibling contexts only under a launcher's engine (symmem-run, \
         srun --mpi=pmix, mpirun)"
    )]
    GroupCannotReopen,
    #[error(transparent)]
    Engine(#[from] symmem::EngineError),
    #[error(transparent)]
    Setting(#[from] symmem::InvalidSetting),
    #[error(
        "the PMIx engine needs the PMIx client library {} ({cause}): {}{}",
        symmem_pmix_sys::LIBRARY, install_hint(*.container), unset_hint(*.asked)
    )]
    PmixUnavailable {
        cause: String,
        /// Whether `SYMMEM_BOOTSTRAP` asked for PMIx (else a job across nodes needs it, and
        /// unsetting the variable would change nothing).
        asked: bool,
        /// The container engine this process runs in, where it runs in one: the library
        /// belongs in the image then, not on the nodes.
        container: Option<&'static str>,
    },
    #[error(transparent)]
    RankEnv(#[from] symmem::RankEnvError),
    #[error(
        "the PMIx fence completed but rank {rank}'s data is not found here: this process most \
         likely cannot see the launcher's PMIx data store, which lies in the node's /tmp (a \
         container with a /tmp of its own: `apptainer --contain`/`--containall`, Docker). Give \
         it the node's /tmp (`--bind /tmp`, `-v /tmp:/tmp`), or set PMIX_MCA_gds=hash for the \
         ranks"
    )]
    PmixStoreHidden { rank: usize },
    #[error(
        "ranks {} and {} run on one host ({host}) but see different folders at {at}, where a \
         node's ranks meet: each has a /tmp of its own (one container per rank: `apptainer \
         --contain`/`--containall`, Docker). Give the containers the host's /tmp \
         (`--bind /tmp`, `-v /tmp:/tmp`), or set {} to a folder every rank of the node sees",
        .ranks.0, .ranks.1, RENDEZVOUS.name
    )]
    PrivateRendezvous {
        ranks: (usize, usize),
        host: String,
        /// The folder, or each rank's where they differ.
        at: String,
    },
    #[error(
        "{call} failed: {text} ({status}); was this process started by a PMIx launcher \
         (`srun --mpi=pmix`, `mpirun`) of a PMIx version this library serves?"
    )]
    Pmix {
        call: String,
        status: i32,
        text: String,
    },
    #[error(
        "{call} answered {what}; is this rank's PMIx client library ({}) of a version its \
         launcher's PMIx server speaks?",
        symmem_pmix_sys::LIBRARY
    )]
    PmixAnswer { call: String, what: String },
    #[error(
        "PMIx key {key:?} is not one PMIx takes (a NUL byte, or {} bytes or more): a bug of \
         symmem's, please report it",
        symmem_pmix_sys::PMIX_MAX_KEYLEN
    )]
    PmixKey { key: String },
    #[error(
        "PMIx says this process is rank {pmix_rank} of {job_size}, the launcher's variables \
         say rank {rank} of {world_size}: start one rank per PMIx process (not a launcher \
         inside another), or set {}=unix",
        BOOTSTRAP.name
    )]
    PmixDisagrees {
        pmix_rank: usize,
        job_size: usize,
        rank: usize,
        world_size: usize,
    },
    #[error(
        "not every rank reached collective {op} within {} through PMIx (hung, or out of order \
         with the other ranks); PMIx does not say which rank: the one whose output shows no such \
         report hung or exited (see the launcher's report); raise {} if ranks legitimately take \
         longer",
        format_duration(*.waited),
        COLLECTIVE_TIMEOUT.name
    )]
    EngineTimeout { op: CollectiveOp, waited: Duration },
    #[error(
        "a rank of this job was lost during collective {op} ({text}, says PMIx); see the \
         launcher's report for which rank failed"
    )]
    EnginePeerLost { op: CollectiveOp, text: String },
}

/// The way out of a missing PMIx library when `SYMMEM_BOOTSTRAP` asked for PMIx.
fn install_hint(container: Option<&str>) -> String {
    match container {
        None => format!("install {}", symmem_pmix_sys::PACKAGES),
        Some(engine) => format!(
            "this process runs in {engine}, whose image lacks it: install {} in the image, \
             or bind the host's {} and the libraries it loads into the container",
            symmem_pmix_sys::PACKAGES,
            symmem_pmix_sys::LIBRARY
        ),
    }
}

/// The container engine this process runs in, told by the file or variable each leaves
/// inside its containers; `None` outside one (or in an engine that leaves neither).
pub(crate) fn container_engine() -> Option<&'static str> {
    if symmem::in_apptainer(&|name: &str| std::env::var(name).ok())
        || std::path::Path::new("/.singularity.d").is_dir()
    {
        Some("an Apptainer container")
    } else if std::path::Path::new("/run/.containerenv").exists() {
        Some("a Podman container")
    } else if std::path::Path::new("/.dockerenv").exists() {
        Some("a Docker container")
    } else {
        None
    }
}

fn unset_hint(asked: bool) -> String {
    if asked {
        format!(
            ", or unset {} to run on one host without it",
            BOOTSTRAP.name
        )
    } else {
        " on every node of the job".to_string()
    }
}

impl BootstrapError {
    /// What rank `rank` witnessed, where this error says it gave up on other ranks (they never
    /// arrived, went away, or never answered; a start-up that timed out): the line launchers
    /// read to tell witnesses from the culprit ([`symmem::Witness`]). `None` for an error of
    /// this rank's own, a mismatch (every rank's), or a forged frame (the network's).
    pub fn witness(&self, rank: usize) -> Option<symmem::Witness> {
        let during = |op: &CollectiveOp| format!("collective {op}");
        let (accused, gone, during) = match self {
            Self::Collective(CollectiveFailure::NeverArrived { op, missing, .. }) => {
                (missing.clone(), None, during(op))
            }
            Self::Collective(CollectiveFailure::PeerGone { rank: lost, op }) => {
                (vec![*lost], Some((*lost, None)), during(op))
            }
            Self::Collective(CollectiveFailure::GoneFromNode {
                rank: lost,
                node,
                op,
            }) => (vec![*lost], Some((*lost, Some(node.clone()))), during(op)),
            Self::Collective(CollectiveFailure::AboveLost { rank: lost, op, .. }) => {
                (vec![*lost], None, during(op))
            }
            Self::Collective(_) => return None,
            Self::RootGone { op }
            | Self::RootSilent { op, .. }
            | Self::LeaderGone { op, .. }
            | Self::LeaderSilent { op, .. }
            | Self::EngineTimeout { op, .. }
            | Self::EnginePeerLost { op, .. } => (Vec::new(), None, during(op)),
            Self::AcceptTimeout { missing, .. } => (missing.clone(), None, "start-up".into()),
            Self::LeftBeforeWelcome { rank: lost, .. } => {
                (vec![*lost], Some((*lost, None)), "start-up".into())
            }
            Self::ConnectTimeout { centre, .. } | Self::NoWelcome { centre, .. } => {
                (vec![*centre], None, "start-up".into())
            }
            Self::LeadersMissing { missing, .. } => (missing.clone(), None, "start-up".into()),
            _ => return None,
        };
        Some(symmem::Witness {
            rank,
            accused,
            gone,
            during,
        })
    }

    /// This error of a node's own star, whose rank `i` is job rank `local_ranks[i]`, in job
    /// ranks: the ranks it names and the centre it waited on (the node's leader).
    pub(crate) fn on_node(self, local_ranks: &[usize]) -> Self {
        let job = |local: usize| local_ranks.get(local).copied().unwrap_or(local);
        match self {
            Self::AcceptTimeout {
                missing,
                path,
                waited,
                ..
            } => Self::AcceptTimeout {
                missing: missing.into_iter().map(job).collect(),
                centre: job(0),
                path,
                waited,
            },
            Self::ConnectTimeout {
                rank, path, waited, ..
            } => Self::ConnectTimeout {
                rank: job(rank),
                centre: job(0),
                path,
                waited,
            },
            Self::LeftBeforeWelcome { rank, .. } => Self::LeftBeforeWelcome {
                rank: job(rank),
                centre: job(0),
            },
            Self::NoWelcome { waited, .. } => Self::NoWelcome {
                centre: job(0),
                waited,
            },
            other => other,
        }
    }

    /// This error of a connection to a node leader, naming `centre` (rank 0, or the leader
    /// above in a tree) as the one dialled.
    pub(crate) fn towards(self, to: usize) -> Self {
        match self {
            Self::RootUnreachable { addr, cause, .. } => Self::RootUnreachable {
                centre: to,
                addr,
                cause,
            },
            Self::RootRefused { addr, cause, .. } => Self::RootRefused {
                centre: to,
                addr,
                cause,
            },
            Self::NoWelcome { waited, .. } => Self::NoWelcome { centre: to, waited },
            other => other,
        }
    }

    pub(crate) fn io(what: impl Into<String>, source: impl Into<std::io::Error>) -> Self {
        Self::Io {
            what: what.into(),
            cause: source.into(),
        }
    }
}

impl ProviderError for BootstrapError {
    fn blame(&self) -> Blame {
        match self {
            // Another rank failed (gone, late, silent); this one only witnessed it.
            Self::Collective(_)
            | Self::RootGone { .. }
            | Self::RootGaveUp
            | Self::RootSilent { .. }
            | Self::LeaderGone { .. }
            | Self::LeaderSilent { .. }
            | Self::LeadersMissing { .. }
            // Start-up: a rank never came to the rendezvous, or its centre never opened it.
            | Self::AcceptTimeout { .. }
            | Self::ConnectTimeout { .. }
            | Self::NoWelcome { .. }
            | Self::LeftBeforeWelcome { .. }
            | Self::EngineTimeout { .. }
            | Self::EnginePeerLost { .. } => Blame::AnotherRank,
            _ => Blame::ThisRank,
        }
    }

    fn into_mismatch(self) -> Result<CollectiveMismatch, Self> {
        match self {
            Self::Collective(CollectiveFailure::Mismatch(m)) => Ok(m),
            other => Err(other),
        }
    }
}

//! The provider: collectives, emulated nodes and the library's lifecycle over [`Gpu`]. All
//! FFI is in `shim`.
#![forbid(unsafe_code)]

use crate::error::{GpuError, no_gpu};
use crate::lifecycle::{Lifecycle, LifecycleError};
use crate::peers::PeerInfo;
use crate::shim::{EnvironmentAccess, Gpu, GpuId, Shim, UniqueId};
use std::num::NonZeroU64;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;
use symmem::settings::{COLLECTIVE_TIMEOUT, DEVICE, GPU_HEAP_SIZE, NODE_ID, SHIM_LIB};
use symmem::{
    CollectiveKind, CollectiveOp, Engine, Error, PeerTable, ProviderKind, RankIdentity,
    SymmetricProvider, Topology, TranslatedOps,
};
use symmem_bootstrap::Bootstrap;

/// `backend` itself when it is a GPU provider, else [`GpuError::NotGpu`].
fn gpu_kind(backend: ProviderKind) -> Result<ProviderKind, GpuError> {
    if backend.is_gpu() {
        Ok(backend)
    } else {
        Err(GpuError::NotGpu { kind: backend })
    }
}

/// How to start a [`GpuProvider`].
#[derive(Clone, Debug)]
pub struct GpuConfig {
    pub backend: ProviderKind,
    pub library: PathBuf,
    pub identity: RankIdentity,
    pub rendezvous: PathBuf,
    pub timeout: Duration,
    /// Symmetric heap per PE; `None` keeps the library's default.
    pub heap_bytes: Option<NonZeroU64>,
    /// GPU of this process; `None` picks `local_rank % GPUs`.
    pub device: Option<i32>,
    /// Emulated node of this rank (`SYMMEM_NODE_ID`): peers on another node are not
    /// load/store reachable, whatever the library could reach.
    pub node_id: u64,
}

impl GpuConfig {
    /// The configuration `backend` starts with in this process's environment (see the
    /// crate docs for the settings it reads).
    pub fn from_env(backend: ProviderKind) -> Result<Self, GpuError> {
        let identity = symmem_bootstrap::identify()?;
        let rendezvous = symmem_bootstrap::default_rendezvous(&identity)?;
        Self::for_rank(backend, identity, rendezvous)
    }

    /// As [`from_env`](Self::from_env), for a rank whose identity and rendezvous the caller
    /// knows (a group's [`Meeting`](symmem_bootstrap::Meeting)): the other settings from the
    /// environment.
    pub fn for_rank(
        backend: ProviderKind,
        identity: RankIdentity,
        rendezvous: PathBuf,
    ) -> Result<Self, GpuError> {
        let backend = gpu_kind(backend)?;
        let library = match SHIM_LIB.read_path() {
            Some(path) => path,
            None => {
                let file = backend.shim_library().unwrap_or_default();
                std::env::current_exe()
                    .ok()
                    .and_then(|exe| exe.parent().map(|d| d.join(&file)))
                    .unwrap_or_else(|| PathBuf::from(file))
            }
        };
        Ok(Self {
            backend,
            library,
            identity,
            rendezvous,
            timeout: COLLECTIVE_TIMEOUT.get()?,
            heap_bytes: GPU_HEAP_SIZE.read()?,
            device: DEVICE.read()?,
            node_id: NODE_ID.get()?,
        })
    }
}

/// Whether a provider initialised the SHMEM library or is a sibling context over it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// Initialised the library; its finalize finalises it.
    Original,
    /// Opened by [`GpuProvider::sibling`]; its finalize leaves the library.
    Sibling,
}

/// Whether `backend` can start a job with this identity across its nodes: rocSHMEM (built
/// single-node) is refused before anything is loaded or initialised, naming the build it
/// would need; NVSHMEM's unique-id bootstrap reaches every host (the id travels through the
/// engine). The launcher's word ([`symmem::spans_nodes`], the rule the engine is chosen by)
/// refuses it before anything is loaded; the joined topology is checked again before init.
pub fn check_nodes(backend: ProviderKind, identity: &RankIdentity) -> Result<(), GpuError> {
    match (backend, symmem::spans_nodes(identity)) {
        (ProviderKind::Rocshmem, Some(evidence)) => Err(GpuError::RocshmemSingleNode { evidence }),
        (ProviderKind::Rocshmem, None) | (ProviderKind::Nvshmem | ProviderKind::Host, _) => Ok(()),
    }
}

/// The joined topology's word on [`check_nodes`]'s question, before the library is
/// initialised: rocSHMEM (built single-node) is refused when the ranks are on several hosts.
fn check_topology(backend: ProviderKind, topology: &Topology) -> Result<(), GpuError> {
    match backend {
        ProviderKind::Rocshmem if !topology.single_host() => Err(GpuError::RocshmemSingleNode {
            evidence: format!(
                "the control plane found its ranks on {} hosts",
                topology.host_count()
            ),
        }),
        ProviderKind::Rocshmem | ProviderKind::Nvshmem | ProviderKind::Host => Ok(()),
    }
}

/// Rank 0's unique id and every rank's GPU bus id, through symmem's control plane (the engine:
/// across hosts too). Collective.
fn start_exchange(
    shim: &Shim,
    bootstrap: &mut Bootstrap,
    backend: ProviderKind,
) -> Result<Vec<PeerInfo>, GpuError> {
    let unique_id = if bootstrap.rank() == 0 {
        shim.unique_id()?.0
    } else {
        Vec::new()
    };
    let mine = PeerInfo {
        bus_id: shim.device_bus_id()?,
        unique_id,
    };
    let op = CollectiveOp {
        seq: 0,
        kind: CollectiveKind::Provider {
            what: format!("{} start", backend.name()),
        },
    };
    let gathered = bootstrap.exchange(&op, &mine.encode(), None, 0)?.payloads;
    gathered
        .iter()
        .enumerate()
        .map(|(peer, bytes)| PeerInfo::decode(bytes).ok_or(GpuError::BadPeerInfo { rank: peer }))
        .collect()
}

/// NVSHMEM or rocSHMEM through the shim. See the crate docs.
///
/// Stays on the thread that made it (it holds `Rc`s): the GPU runtime's current device is per
/// thread.
pub struct GpuProvider {
    gpu: Gpu,
    library: Rc<Library>,
    role: Role,
    /// Its control plane, which also says which node every rank is on (peers on another node
    /// are not reachable).
    bootstrap: Bootstrap,
    /// Where this context's ranks met; its siblings meet in folders under it.
    rendezvous: PathBuf,
    finalized: bool,
}

/// What a provider and its siblings share: the one initialised SHMEM library and this rank's
/// place in the job.
struct Library {
    shim: Rc<Shim>,
    /// Every rank's GPU.
    gpus: Rc<[GpuId]>,
    lifecycle: Lifecycle,
    backend: ProviderKind,
    /// The GPU this process uses (see [`GpuProvider::device`]).
    device: i32,
    rank: usize,
    world_size: usize,
    /// The engine the ranks meet through (siblings meet through the same).
    engine: Engine,
    timeout: Duration,
}

impl GpuProvider {
    /// Loads the shim, meets the other ranks and initialises the SHMEM library. Collective.
    ///
    /// The library reads its settings from the environment, which this writes first: `access`
    /// is the caller's promise that no other thread touches the environment meanwhile (see
    /// [`EnvironmentAccess::promise`]).
    pub fn new(config: GpuConfig, access: EnvironmentAccess) -> Result<Self, GpuError> {
        let backend = gpu_kind(config.backend)?;
        check_nodes(backend, &config.identity)?;
        let shim = Shim::load(&config.library, backend)?;
        let bootstrap = Bootstrap::join(
            &config.identity,
            config.node_id,
            &config.rendezvous,
            config.timeout,
        )?;
        Self::start(config, shim, bootstrap, access)
    }

    /// As [`new`](Self::new), over a control plane the caller opened (e.g. from a
    /// [`Meeting`](symmem_bootstrap::Meeting), whose identity `config` holds). Collective.
    pub fn over(
        config: GpuConfig,
        bootstrap: Bootstrap,
        access: EnvironmentAccess,
    ) -> Result<Self, GpuError> {
        let backend = gpu_kind(config.backend)?;
        check_nodes(backend, &config.identity)?;
        let shim = Shim::load(&config.library, backend)?;
        Self::start(config, shim, bootstrap, access)
    }

    fn start(
        config: GpuConfig,
        shim: Rc<Shim>,
        mut bootstrap: Bootstrap,
        access: EnvironmentAccess,
    ) -> Result<Self, GpuError> {
        let backend = config.backend;
        let local_rank = config.identity.local_rank;
        let (rank, world_size) = (bootstrap.rank(), bootstrap.world_size());
        check_topology(backend, bootstrap.topology())?;
        let engine = bootstrap.engine();
        let count = shim
            .device_count()
            .map_err(|e| no_gpu(backend, format!("no usable GPU ({e})")))?;
        if count < 1 {
            return Err(no_gpu(backend, "this machine has no GPU".into()));
        }
        let device = config
            .device
            .unwrap_or((local_rank % count as usize) as i32);
        shim.set_device(device)?;
        // Before anything that lets the library read its environment (it does so once).
        shim.configure(
            access,
            config.heap_bytes,
            bootstrap.topology().single_host(),
        )?;
        shim.watch_collectives(config.timeout);
        let infos = start_exchange(&shim, &mut bootstrap, backend)?;
        shim.init(rank, world_size, &UniqueId(infos[0].unique_id.clone()))?;
        let topology = bootstrap.topology();
        let gpus: Rc<[GpuId]> = infos
            .into_iter()
            .enumerate()
            .map(|(peer, info)| GpuId {
                host: topology.host(peer),
                bus_id: info.bus_id,
            })
            .collect();
        let library = Library {
            shim,
            gpus,
            lifecycle: Lifecycle::started(),
            backend,
            device,
            rank,
            world_size,
            engine,
            timeout: config.timeout,
        };
        Ok(Self {
            gpu: library.gpu(),
            library: Rc::new(library),
            role: Role::Original,
            bootstrap,
            rendezvous: config.rendezvous,
            finalized: false,
        })
    }

    /// A second context over the one initialised SHMEM library (it initialises once per
    /// process), with this rank on emulated node `node_id`. Collective: every rank calls it
    /// with the same `label`; the sibling meets the others at `<rendezvous>/<label>` with its
    /// own control plane, and has its own tables, allocations and node split. Its symmetric
    /// allocations are still the library's collectives over all PEs. Its finalize leaves the
    /// library; the original's finalize refuses while a sibling is open (finalize or drop them
    /// first).
    pub fn sibling(&self, label: &str, node_id: u64) -> Result<GpuProvider, GpuError> {
        self.siblings().open(label, node_id)
    }

    /// What opens siblings of this provider, without borrowing it (e.g. while a `Context` owns
    /// it). Holding it keeps nothing open.
    pub fn siblings(&self) -> Siblings {
        Siblings {
            library: Rc::clone(&self.library),
            rendezvous: self.rendezvous.clone(),
        }
    }
}

impl Library {
    /// A fresh GPU side over the library: no allocations or tables yet.
    fn gpu(&self) -> Gpu {
        Gpu::new(
            Rc::clone(&self.shim),
            self.rank,
            self.world_size,
            Rc::clone(&self.gpus),
        )
    }
}

/// Opens sibling contexts over one provider's SHMEM library ([`GpuProvider::siblings`]).
pub struct Siblings {
    library: Rc<Library>,
    /// The opening provider's rendezvous: each sibling meets in `<rendezvous>/<label>`.
    rendezvous: PathBuf,
}

impl Siblings {
    /// As [`GpuProvider::sibling`]. Collective.
    pub fn open(&self, label: &str, node_id: u64) -> Result<GpuProvider, GpuError> {
        self.library.lifecycle.open_sibling()?;
        let opened = self.connect(label, node_id);
        if opened.is_err() {
            self.library.lifecycle.close_sibling();
        }
        opened
    }

    fn connect(&self, label: &str, node_id: u64) -> Result<GpuProvider, GpuError> {
        let Library {
            rank,
            world_size,
            timeout,
            engine,
            ..
        } = *self.library;
        let rendezvous = self.rendezvous.join(label);
        // The sibling's own control plane gathers its node split.
        let bootstrap = Bootstrap::open(engine, rank, world_size, node_id, &rendezvous, timeout)?;
        Ok(GpuProvider {
            gpu: self.library.gpu(),
            library: Rc::clone(&self.library),
            role: Role::Sibling,
            bootstrap,
            rendezvous,
            finalized: false,
        })
    }
}

impl GpuProvider {
    pub fn backend(&self) -> ProviderKind {
        self.library.backend
    }

    /// The GPU this process uses, as the runtime numbers the visible devices: the configured
    /// [`GpuConfig::device`], else `local_rank % GPUs` (the one `new` selected; siblings share
    /// it).
    pub fn device(&self) -> i32 {
        self.library.device
    }

    /// Which node every rank is on (the engine's node with `SYMMEM_NODE_ID`, or the
    /// sibling's split).
    pub fn topology(&self) -> &Topology {
        self.bootstrap.topology()
    }

    /// The GPU side: validated launches, device timing and the library's own collectives, for
    /// measurements (`symmem-gpu-bench`). Work queued through it is not synchronised.
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// As [`GpuProvider::gpu`], for the library's raw collective malloc and free (without
    /// symmem's order check or tables).
    pub fn gpu_mut(&mut self) -> &mut Gpu {
        &mut self.gpu
    }

    /// Control-plane barrier carrying `op` (the order check), then nothing else.
    fn agree(&mut self, op: &CollectiveOp) -> Result<(), Error> {
        self.bootstrap
            .barrier(op)
            .map_err(|e| Error::from_provider(self.library.backend, e))
    }
}

impl SymmetricProvider for GpuProvider {
    fn kind(&self) -> ProviderKind {
        self.library.backend
    }
    fn rank(&self) -> usize {
        self.library.rank
    }
    fn world_size(&self) -> usize {
        self.library.world_size
    }
    fn topology(&self) -> &Topology {
        self.bootstrap.topology()
    }
    fn checks_collective_order(&self) -> bool {
        true
    }

    fn malloc(&mut self, bytes: u64, op: &CollectiveOp) -> Result<u64, Error> {
        // Every rank agrees on the call before the library's own collective runs.
        self.agree(op)?;
        self.gpu.malloc(bytes)
    }

    fn free(&mut self, addr: u64, op: &CollectiveOp) -> Result<(), Error> {
        self.agree(op)?;
        self.gpu.free(addr)
    }

    fn barrier(&mut self, op: &CollectiveOp) -> Result<(), Error> {
        self.agree(op)?;
        // It drains the stream so stores are visible to peers after it.
        self.gpu.barrier_all()
    }

    fn finalize(&mut self, op: &CollectiveOp) -> Result<(), Error> {
        match self.role {
            Role::Sibling => self.agree(op)?,
            Role::Original => {
                // Every rank says how many siblings it still has open; if any has one, all
                // refuse alike and the context stays usable (finalize the siblings, then
                // this again).
                let open = self.library.lifecycle.open_siblings() as u64;
                let gathered = self
                    .bootstrap
                    .exchange(op, &open.to_le_bytes(), None, 0)
                    .map_err(|e| Error::from_provider(self.library.backend, e))?;
                let open_anywhere = gathered
                    .payloads
                    .iter()
                    .filter_map(|p| <[u8; 8]>::try_from(p.as_slice()).ok())
                    .map(u64::from_le_bytes)
                    .max()
                    .unwrap_or(open);
                if open_anywhere > 0 {
                    return Err(Error::from_provider(
                        self.library.backend,
                        GpuError::from(LifecycleError::SiblingsOpen {
                            open: open_anywhere as usize,
                        }),
                    ));
                }
            }
        }
        let released = self.gpu.release();
        match self.role {
            Role::Sibling => self.library.lifecycle.close_sibling(),
            Role::Original => {
                self.library.lifecycle.finalizing();
                self.gpu.shim().finalize()?;
            }
        }
        self.finalized = true;
        released
    }

    fn table_ready(&mut self, table: &PeerTable) -> Result<(), Error> {
        self.gpu.table_ready(table)
    }

    fn ptr(&self, addr: u64, peer: usize) -> Option<u64> {
        if !self.bootstrap.topology().same_node(self.library.rank, peer) {
            return None;
        }
        self.gpu.peer_address(addr, peer)
    }
}

impl TranslatedOps for GpuProvider {
    fn store_u64(
        &self,
        table: &PeerTable,
        dst: u64,
        to: usize,
        values: &[u64],
    ) -> Result<(), Error> {
        self.gpu.store_u64(table, dst, to, values)?;
        self.gpu.synchronize()
    }

    fn load_u64(
        &self,
        table: &PeerTable,
        src: u64,
        from: usize,
        out: &mut [u64],
    ) -> Result<(), Error> {
        self.gpu.load_u64(table, src, from, out)
    }

    fn copy_bytes(
        &self,
        table: &PeerTable,
        src: u64,
        src_rank: usize,
        dst: u64,
        dst_rank: usize,
        bytes: u64,
    ) -> Result<(), Error> {
        self.gpu.copy(table, src, src_rank, dst, dst_rank, bytes)?;
        self.gpu.synchronize()
    }

    fn atomic_add_u64(
        &self,
        table: &PeerTable,
        dst: u64,
        to: usize,
        value: u64,
    ) -> Result<(), Error> {
        self.gpu.atomic_add_u64(table, dst, to, value)?;
        self.gpu.synchronize()
    }

    fn read_local(&self, addr: u64, out: &mut [u8]) -> Result<(), Error> {
        self.gpu.read_local(addr, out)
    }

    fn write_local(&self, addr: u64, data: &[u8]) -> Result<(), Error> {
        self.gpu.write_local(addr, data)?;
        self.gpu.synchronize()
    }
}

impl Drop for GpuProvider {
    fn drop(&mut self) {
        if self.finalized {
            return;
        }
        match self.role {
            // Its tables free themselves; the library stays with the original.
            Role::Sibling => self.library.lifecycle.close_sibling(),
            // Finalising is collective: a drop (at different times on different ranks) must
            // not start it. The process exit releases the library's resources.
            Role::Original => tracing::warn!(
                backend = self.library.backend.name(),
                "GPU provider dropped without Context::finalize; the SHMEM library was not finalised"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use symmem::{Blame, ProviderError};
    use symmem_bootstrap::BootstrapError;

    fn config(library: PathBuf) -> GpuConfig {
        GpuConfig {
            backend: ProviderKind::Nvshmem,
            library,
            identity: RankIdentity::from_vars(|_| None).unwrap(),
            rendezvous: std::env::temp_dir(),
            timeout: Duration::from_secs(5),
            heap_bytes: None,
            device: None,
            node_id: 0,
        }
    }

    fn two_nodes() -> RankIdentity {
        let vars = [
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
        ];
        RankIdentity::from_vars(|k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
        .unwrap()
    }

    #[test]
    fn rocshmem_refuses_a_job_across_nodes_before_loading_anything() {
        let single = RankIdentity::from_vars(|_| None).unwrap();
        check_nodes(ProviderKind::Rocshmem, &single).unwrap();
        check_nodes(ProviderKind::Nvshmem, &two_nodes()).unwrap();
        let err = check_nodes(ProviderKind::Rocshmem, &two_nodes()).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("USE_SINGLE_NODE=OFF"), "{text}");
        assert!(text.contains("2 of its 4 ranks"), "{text}");
        // Slurm's node count is evidence too, where no per-node count is given.
        let slurm = [
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_NNODES", "2"),
        ];
        let slurm = RankIdentity::from_vars(|k| {
            slurm
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
        .unwrap();
        assert!(matches!(
            check_nodes(ProviderKind::Rocshmem, &slurm),
            Err(GpuError::RocshmemSingleNode { .. })
        ));

        // Through the provider: refused before the (missing) library is even opened.
        let mut cfg = config("/nonexistent/libsymmem_shim_rocshmem.so".into());
        cfg.backend = ProviderKind::Rocshmem;
        cfg.identity = two_nodes();
        let err = GpuProvider::new(cfg, EnvironmentAccess::before_configure_in_tests())
            .err()
            .expect("refused");
        assert!(matches!(err, GpuError::RocshmemSingleNode { .. }), "{err}");
    }

    /// The joined topology has the last word before init: rocSHMEM across hosts is refused
    /// whatever the launcher said, and emulated nodes on one host are one host.
    #[test]
    fn rocshmem_refuses_a_topology_of_several_hosts() {
        let split_one_host = Topology::one_host(&[0, 0, 1, 1]);
        check_topology(ProviderKind::Rocshmem, &split_one_host).unwrap();
        let two_hosts = Topology::new(&["node-a", "node-a", "node-a", "node-b"], &[0; 4]);
        check_topology(ProviderKind::Nvshmem, &two_hosts).unwrap();
        let err = check_topology(ProviderKind::Rocshmem, &two_hosts).unwrap_err();
        assert!(matches!(err, GpuError::RocshmemSingleNode { .. }), "{err}");
        assert!(err.to_string().contains("on 2 hosts"), "{err}");
    }

    #[test]
    fn a_missing_library_is_unavailable_with_the_fix() {
        let err = GpuProvider::new(
            config("/nonexistent/libsymmem_shim_nvshmem.so".into()),
            EnvironmentAccess::before_configure_in_tests(),
        )
        .err()
        .expect("no library here");
        let text = err.to_string();
        assert!(matches!(err, GpuError::Unavailable { .. }));
        assert!(text.contains("no shim library at /nonexistent"), "{text}");
        assert!(
            text.contains("cargo xtask build-shim --backend nvshmem"),
            "{text}"
        );
    }

    #[test]
    fn the_host_provider_is_refused_with_the_gpu_choices() {
        let err = GpuConfig::from_env(ProviderKind::Host).unwrap_err();
        assert!(
            matches!(
                err,
                GpuError::NotGpu {
                    kind: ProviderKind::Host
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("nvshmem or rocshmem"), "{err}");
        let config = GpuConfig {
            backend: ProviderKind::Host,
            ..config("/nonexistent/libsymmem_shim_nvshmem.so".into())
        };
        let err = GpuProvider::new(config, EnvironmentAccess::before_configure_in_tests())
            .err()
            .expect("not a GPU provider");
        assert!(matches!(err, GpuError::NotGpu { .. }), "{err}");
    }

    #[test]
    fn another_ranks_failure_stays_the_peers_in_the_core_error() {
        let op = CollectiveOp {
            seq: 3,
            kind: CollectiveKind::Barrier,
        };
        let e = GpuError::Bootstrap(BootstrapError::RootGone { op });
        assert_eq!(e.blame(), Blame::AnotherRank);
        assert!(matches!(
            Error::from_provider(ProviderKind::Nvshmem, e),
            Error::PeerFailed { .. }
        ));
        let e = GpuError::BadPeerInfo { rank: 1 };
        assert!(matches!(
            Error::from_provider(ProviderKind::Nvshmem, e),
            Error::Provider {
                provider: ProviderKind::Nvshmem,
                ..
            }
        ));
    }

    #[test]
    fn a_library_that_is_not_a_shim_is_unavailable() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("libsymmem_shim_nvshmem.so");
        std::fs::write(&fake, b"not an ELF file").unwrap();
        let text = GpuProvider::new(config(fake), EnvironmentAccess::before_configure_in_tests())
            .err()
            .expect("not loadable")
            .to_string();
        assert!(
            text.contains("loading") && text.contains("unavailable"),
            "{text}"
        );
    }
}

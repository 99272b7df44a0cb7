use crate::HostError;
use std::path::PathBuf;
use std::time::Duration;
use symmem::{RankIdentity, settings};

/// How to build a [`HostProvider`](crate::HostProvider).
#[derive(Clone, Debug)]
pub struct HostConfig {
    pub identity: RankIdentity,
    /// Folder where the ranks meet; the same for every rank of the job.
    pub rendezvous: PathBuf,
    /// Size of each rank's heap (every rank must use the same).
    pub heap_bytes: u64,
    /// Emulated node of this rank: peers on another node are not mapped.
    pub node_id: u64,
    /// How long a collective waits for the slowest rank.
    pub timeout: Duration,
}

impl HostConfig {
    /// Rank `rank` of `world_size` ranks meeting in `rendezvous`, on node 0, with the default
    /// heap size and collective timeout of the settings' defaults (the caller may change any
    /// field before `HostProvider::new`).
    pub fn for_rank(rank: usize, world_size: usize, rendezvous: impl Into<PathBuf>) -> Self {
        Self {
            identity: RankIdentity {
                rank,
                world_size,
                local_rank: rank,
                local_world_size: world_size,
                launcher: symmem::Launcher::Singleton,
                job_key: None,
                nodes: None,
            },
            rendezvous: rendezvous.into(),
            heap_bytes: settings::HOST_HEAP_SIZE.value,
            node_id: settings::NODE_ID.value,
            timeout: settings::COLLECTIVE_TIMEOUT.value,
        }
    }

    /// Reads who this rank is ([`symmem_bootstrap::identify`]: the launcher's variables, else
    /// its PMIx server) and the host provider's settings
    /// ([`HOST_HEAP_SIZE`](symmem::settings::HOST_HEAP_SIZE),
    /// [`NODE_ID`](symmem::settings::NODE_ID),
    /// [`COLLECTIVE_TIMEOUT`](symmem::settings::COLLECTIVE_TIMEOUT),
    /// [`RENDEZVOUS`](symmem::settings::RENDEZVOUS)) from the environment.
    pub fn from_env() -> Result<Self, HostError> {
        let identity = symmem_bootstrap::identify()?;
        let rendezvous = symmem_bootstrap::default_rendezvous(&identity)?;
        Ok(Self {
            identity,
            rendezvous,
            heap_bytes: settings::HOST_HEAP_SIZE.get()?,
            node_id: settings::NODE_ID.get()?,
            timeout: settings::COLLECTIVE_TIMEOUT.get()?,
        })
    }
}

use crate::HostError;
use std::path::PathBuf;
use std::time::Duration;
use symmem::RankIdentity;

pub const HEAP_SIZE_ENV: &str = "SYMMEM_HOST_HEAP_SIZE";
pub const NODE_ID_ENV: &str = "SYMMEM_NODE_ID";
pub const COLLECTIVE_TIMEOUT_ENV: &str = "SYMMEM_COLLECTIVE_TIMEOUT";
/// Sparse: only touched pages use memory.
pub const DEFAULT_HEAP_BYTES: u64 = 1 << 30;
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

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
    /// heap size and timeout (the caller may change any field before `HostProvider::new`).
    pub fn for_rank(rank: usize, world_size: usize, rendezvous: impl Into<PathBuf>) -> Self {
        Self {
            identity: RankIdentity {
                rank,
                world_size,
                local_rank: rank,
                local_world_size: world_size,
                launcher: symmem::Launcher::Singleton,
                job_key: None,
            },
            rendezvous: rendezvous.into(),
            heap_bytes: DEFAULT_HEAP_BYTES,
            node_id: 0,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Reads the rank variables and the `SYMMEM_*` settings from the environment.
    pub fn from_env() -> Result<Self, HostError> {
        let identity = RankIdentity::from_env()?;
        let rendezvous = symmem_bootstrap::default_rendezvous(&identity)?;
        let var = |name| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let heap_bytes = match var(HEAP_SIZE_ENV) {
            Some(v) => symmem::parse_bytes(&v).ok_or(HostError::InvalidSetting {
                var: HEAP_SIZE_ENV,
                value: v,
                expected: "a size such as 268435456, 512M or 4G",
            })?,
            None => DEFAULT_HEAP_BYTES,
        };
        let node_id = match var(NODE_ID_ENV) {
            Some(v) => v.trim().parse().map_err(|_| HostError::InvalidSetting {
                var: NODE_ID_ENV,
                value: v,
                expected: "a non-negative integer",
            })?,
            None => 0,
        };
        let timeout = match var(COLLECTIVE_TIMEOUT_ENV) {
            Some(v) => symmem::parse_duration(&v)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or(HostError::InvalidSetting {
                    var: COLLECTIVE_TIMEOUT_ENV,
                    value: v,
                    expected: "a duration such as 60, 60s, 500ms or 2m",
                })?,
            None => DEFAULT_TIMEOUT,
        };
        Ok(Self {
            identity,
            rendezvous,
            heap_bytes,
            node_id,
            timeout,
        })
    }
}

//! Who this process is in its job: what the launcher's variables say
//! ([`RankIdentity::from_env`]), or, where none reached it but the PMIx server that started
//! it did (a container that passes only `PMIX_*`), what that server says.

use crate::BootstrapError;
use crate::pmix::{self, Client};
use std::sync::OnceLock;
use symmem::{Launcher, RankIdentity};

/// This process's place in its job. The launcher's variables win; without any, a process a
/// PMIx server started (`PMIX_NAMESPACE` and `PMIX_RANK` set) asks that server for its rank,
/// the job's size and its node's ranks, and the client stays open for the control plane
/// (the engine takes it; a one-host job keeps it for its life). Asked once per process.
pub fn identify() -> Result<RankIdentity, BootstrapError> {
    let from_env = RankIdentity::from_env()?;
    if from_env.launcher != Launcher::Singleton
        || !symmem::pmix_present(&|name: &str| std::env::var(name).ok())
    {
        return Ok(from_env);
    }
    static FROM_PMIX: OnceLock<RankIdentity> = OnceLock::new();
    if let Some(identity) = FROM_PMIX.get() {
        return Ok(identity.clone());
    }
    let client = Client::init()?;
    let identity = client.identity()?;
    tracing::debug!(
        rank = identity.rank,
        world_size = identity.world_size,
        job = ?identity.job_key,
        "no launcher variables: the PMIx server named this rank"
    );
    pmix::keep(client);
    Ok(FROM_PMIX.get_or_init(|| identity).clone())
}

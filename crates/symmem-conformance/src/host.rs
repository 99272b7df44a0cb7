//! The second contexts the suite asks for ([`Extras`]), over the host provider.

use crate::{Extras, Unavailable};
use symmem::Context;
use symmem_host::{HostConfig, HostProvider};

/// Opens further host contexts over the same ranks as `base`, each meeting in its own folder
/// under `base`'s rendezvous folder.
#[derive(Clone, Debug)]
pub struct HostExtras {
    pub base: HostConfig,
}

impl HostExtras {
    /// A host provider over the same ranks, meeting in `<rendezvous>/<label>`, with rank `r` on
    /// emulated node `node_ids[r]`: what [`Extras::context_with_nodes`] wraps in a context.
    pub fn provider_with_nodes(
        &self,
        label: &str,
        node_ids: &[u64],
    ) -> Result<HostProvider, Unavailable> {
        let mut config = self.base.clone();
        config.rendezvous = config.rendezvous.join(label);
        config.node_id = node_ids[config.identity.rank];
        HostProvider::new(config).map_err(|e| Unavailable::opening("a second host context", &e))
    }
}

impl Extras<HostProvider> for HostExtras {
    fn context_with_nodes(
        &mut self,
        label: &str,
        node_ids: &[u64],
    ) -> Result<Context<HostProvider>, Unavailable> {
        self.provider_with_nodes(label, node_ids).map(Context::new)
    }
}

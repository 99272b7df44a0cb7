//! The PMIx engine: the same contract as the Unix star (rendezvous, an order-checked
//! all-gather per collective, failures named on every rank) carried by the launcher's PMIx
//! server, so the ranks may be on any hosts.
//!
//! Each collective is one PMIx all-gather: every rank puts its call (`CollectiveOp`, payload,
//! whether it passes a descriptor) under `symmem.<engine>.<seq>`, fences collecting the data,
//! and reads every rank's. Every rank then compares the same calls and reaches the same
//! verdict by itself, so no rank has to tell the others. What cannot cross hosts, descriptors,
//! travels over a Unix star among the ranks of this node only (local rank 0 at its centre, in
//! `<rendezvous>/node-<id>`), after the PMIx exchange agreed.

use crate::pmix::{Client, peer_lost};
use crate::{Bootstrap, BootstrapError, CollectiveFailure, Gathered};
use serde::{Deserialize, Serialize};
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use symmem::{CollectiveKind, CollectiveMismatch, CollectiveOp};

/// Beyond the collective timeout: the fence's own wait, so that the server's timeout (where
/// it honours one) answers first.
const FENCE_MARGIN: Duration = Duration::from_secs(5);

/// Engines opened in this process so far: each names its keys apart (opening is collective,
/// so every rank counts alike).
static ENGINES: AtomicU64 = AtomicU64::new(0);

/// One rank's call to a collective, as it travels through PMIx.
#[derive(Clone, Serialize, Deserialize)]
struct Call {
    op: CollectiveOp,
    payload: Vec<u8>,
    has_fd: bool,
}

pub(crate) struct PmixLinks {
    client: Client,
    rank: usize,
    world_size: usize,
    timeout: Duration,
    /// Keys of this engine: `symmem.<id>.<seq>`.
    id: u64,
    seq: u64,
    /// The node of every rank, as the engine numbers them.
    nodes: Vec<u64>,
    /// The ranks of this node, in rank order (index = local rank).
    local_ranks: Vec<usize>,
    /// The node-local Unix star, for descriptors.
    local: Box<Bootstrap>,
}

impl PmixLinks {
    pub(crate) fn nodes(&self) -> &[u64] {
        &self.nodes
    }

    /// Connects to the PMIx server and meets every rank: each publishes its node, then the
    /// ranks of each node meet over their own star in `<dir>/node-<id>`.
    pub(crate) fn connect(
        rank: usize,
        world_size: usize,
        dir: &Path,
        timeout: Duration,
    ) -> Result<Self, BootstrapError> {
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
        let node = match client.node_id() {
            Some(id) => id,
            None => host_node(),
        };
        let mut links = Self {
            client,
            rank,
            world_size,
            timeout,
            id: ENGINES.fetch_add(1, Ordering::Relaxed),
            seq: 0,
            nodes: Vec::new(),
            local_ranks: Vec::new(),
            local: Box::new(Bootstrap::alone()),
        };
        let op = CollectiveOp {
            seq: 0,
            kind: CollectiveKind::Provider {
                what: "PMIx rendezvous".into(),
            },
        };
        let payloads = links.all_gather(&op, &node.to_le_bytes(), false)?;
        links.nodes = payloads
            .iter()
            .enumerate()
            .map(|(peer, bytes)| {
                <[u8; 8]>::try_from(bytes.0.as_slice())
                    .map(u64::from_le_bytes)
                    .map_err(|_| BootstrapError::Protocol(format!("rank {peer} sent no node id")))
            })
            .collect::<Result<_, _>>()?;
        links.local_ranks = (0..world_size)
            .filter(|&r| links.nodes[r] == node)
            .collect();
        let local_rank = links
            .local_ranks
            .iter()
            .position(|&r| r == rank)
            .expect("this rank is on its own node");
        links.local = Box::new(Bootstrap::connect(
            local_rank,
            links.local_ranks.len(),
            &dir.join(format!("node-{node}")),
            timeout,
        )?);
        Ok(links)
    }

    /// One order-checked all-gather (see the module docs).
    pub(crate) fn exchange(
        &mut self,
        op: &CollectiveOp,
        payload: &[u8],
        fd: Option<BorrowedFd<'_>>,
        fd_group: u64,
    ) -> Result<Gathered, BootstrapError> {
        let calls = self.all_gather(op, payload, fd.is_some())?;
        let mut fds = (0..self.world_size).map(|_| None).collect::<Vec<_>>();
        // Every rank of this node saw the same calls, so all take this step or none does.
        if self.local_ranks.iter().any(|&r| calls[r].1) {
            let local = self.local.exchange(op, &[], fd, fd_group)?;
            for (index, fd) in local.fds.into_iter().enumerate() {
                fds[self.local_ranks[index]] = fd;
            }
        }
        Ok(Gathered {
            payloads: calls.into_iter().map(|(payload, _)| payload).collect(),
            fds,
        })
    }

    /// Every rank's payload and whether it passes a descriptor, once all issued `op`.
    fn all_gather(
        &mut self,
        op: &CollectiveOp,
        payload: &[u8],
        has_fd: bool,
    ) -> Result<Vec<(Vec<u8>, bool)>, BootstrapError> {
        let (rank, world_size, timeout) = (self.rank, self.world_size, self.timeout);
        self.seq += 1;
        let key = format!("symmem.{}.{}", self.id, self.seq);
        let call = Call {
            op: op.clone(),
            payload: payload.to_vec(),
            has_fd,
        };
        let bytes =
            serde_json::to_vec(&call).map_err(|e| BootstrapError::Protocol(e.to_string()))?;
        self.client.put(&key, &bytes)?;
        match self.client.fence(timeout.saturating_add(FENCE_MARGIN)) {
            Ok(Some(())) => {}
            Ok(None) => {
                return Err(BootstrapError::EngineTimeout {
                    op: op.clone(),
                    waited: timeout,
                });
            }
            Err(BootstrapError::Pmix { status, text, .. }) if peer_lost(status) => {
                return Err(BootstrapError::EnginePeerLost {
                    op: op.clone(),
                    text,
                });
            }
            Err(e) => return Err(e),
        }
        let mut calls = Vec::with_capacity(world_size);
        for peer in 0..world_size {
            let call = if peer == rank {
                call.clone()
            } else {
                let bytes = self.client.get_bytes(peer, &key)?;
                serde_json::from_slice::<Call>(&bytes).map_err(|e| {
                    BootstrapError::Collective(CollectiveFailure::Protocol {
                        rank: peer,
                        op: op.clone(),
                        what: format!("unreadable call through PMIx: {e}"),
                    })
                })?
            };
            calls.push(call);
        }
        let ops: Vec<CollectiveOp> = calls.iter().map(|c| c.op.clone()).collect();
        if let Some(mismatch) = CollectiveMismatch::detect(&ops) {
            return Err(CollectiveFailure::Mismatch(mismatch).into());
        }
        Ok(calls.into_iter().map(|c| (c.payload, c.has_fd)).collect())
    }
}

/// For benches only: `iterations` raw PMIx all-gathers of 8 bytes per rank (put, commit,
/// fence collecting the data, get of every rank), with none of symmem's framing or checks: the
/// engine's own cost, against which [`Bootstrap::exchange`] is measured. Each time is one
/// all-gather as this rank saw it.
#[doc(hidden)]
pub fn raw_pmix_allgather(
    world_size: usize,
    iterations: usize,
    wait: Duration,
) -> Result<Vec<Duration>, BootstrapError> {
    let client = Client::init()?;
    let id = ENGINES.fetch_add(1, Ordering::Relaxed);
    let mut times = Vec::with_capacity(iterations);
    for i in 0..iterations {
        let key = format!("symmem.raw.{id}.{i}");
        let start = std::time::Instant::now();
        client.put(&key, &(i as u64).to_le_bytes())?;
        if client.fence(wait)?.is_none() {
            return Err(BootstrapError::Protocol("raw PMIx fence timed out".into()));
        }
        for peer in 0..world_size {
            if peer != client.rank() {
                std::hint::black_box(client.get_bytes(peer, &key)?);
            }
        }
        times.push(start.elapsed());
    }
    Ok(times)
}

/// This host's node id where the engine gives none: a hash of its name (the same for every
/// rank of the host, different across hosts but for a collision of 64-bit hashes).
fn host_node() -> u64 {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into `buf`.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = if ok { &buf[..len] } else { &[][..] };
    let mut h = DefaultHasher::new();
    name.hash(&mut h);
    h.finish()
}

/// The node of every rank as providers use it: the engine's node and the emulated node
/// ([`NODE_ID`](symmem::settings::NODE_ID)) together. On one engine node the emulated ids are
/// kept as they are (so `SYMMEM_NODE_ID` works as on the Unix star); across engine nodes each
/// distinct pair gets its own number, in order of first appearance.
pub fn node_keys(engine: &[u64], emulated: &[u64]) -> Vec<u64> {
    assert_eq!(engine.len(), emulated.len(), "one node id per rank");
    if engine.windows(2).all(|w| w[0] == w[1]) {
        return emulated.to_vec();
    }
    let mut seen: Vec<(u64, u64)> = Vec::new();
    engine
        .iter()
        .zip(emulated)
        .map(|(&e, &m)| match seen.iter().position(|&p| p == (e, m)) {
            Some(i) => i as u64,
            None => {
                seen.push((e, m));
                (seen.len() - 1) as u64
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::node_keys;

    #[test]
    fn node_keys_keep_emulation_on_one_node_and_split_real_nodes() {
        assert_eq!(node_keys(&[7, 7, 7, 7], &[0, 0, 1, 1]), vec![0, 0, 1, 1]);
        assert_eq!(node_keys(&[0, 0, 1, 1], &[0, 0, 0, 0]), vec![0, 0, 1, 1]);
        // Emulated splits inside real nodes: four distinct nodes.
        assert_eq!(node_keys(&[0, 0, 1, 1], &[0, 1, 0, 1]), vec![0, 1, 2, 3]);
        assert_eq!(node_keys(&[5, 9, 5, 9], &[3, 3, 3, 3]), vec![0, 1, 0, 1]);
    }
}

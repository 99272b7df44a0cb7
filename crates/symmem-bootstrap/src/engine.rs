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
use symmem::{CollectiveKind, CollectiveMismatch, CollectiveOp, Topology};

/// Beyond the collective timeout: the fence's own wait, so that the server's timeout (where
/// it honours one) answers first.
const FENCE_MARGIN: Duration = Duration::from_secs(5);

/// How long a collective's fence waits for the others: the collective timeout and the margin.
/// Its timeout error says this time, the time it waited (M11: it said the timeout alone).
fn fence_wait(timeout: Duration) -> Duration {
    timeout.saturating_add(FENCE_MARGIN)
}

/// Engines opened in this process so far: each names its keys apart (opening is collective,
/// so every rank counts alike).
static ENGINES: AtomicU64 = AtomicU64::new(0);

/// Where a rank runs, as it tells the others when the engine opens.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Place {
    host: Host,
    /// Its emulated node ([`NODE_ID`](symmem::settings::NODE_ID)).
    emulated: u64,
}

/// A rank's host as the engine tells hosts apart: the launcher's node id where the PMIx server
/// gives one, else the host name's bytes (compared as they are, never hashed, so ranks built
/// by different toolchains agree).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Host {
    NodeId(u64),
    Name(Vec<u8>),
}

impl Host {
    fn of(client: &Client) -> Self {
        match client.node_id() {
            Some(id) => Self::NodeId(id),
            None => Self::Name(
                nix::unistd::gethostname()
                    .map(|name| name.into_encoded_bytes())
                    .unwrap_or_default(),
            ),
        }
    }
}

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
    /// The ranks of this host, in rank order (index = local rank).
    local_ranks: Vec<usize>,
    /// The node-local Unix star, for descriptors.
    local: Box<Bootstrap>,
}

impl PmixLinks {
    /// Connects to the PMIx server and meets every rank: each publishes its host and
    /// emulated node `node` (the job's [`Topology`]), then the ranks of each host meet over
    /// their own star in `<dir>/node-<host>`.
    pub(crate) fn connect(
        rank: usize,
        world_size: usize,
        node: u64,
        dir: &Path,
        timeout: Duration,
    ) -> Result<(Self, Topology), BootstrapError> {
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
        // Its launcher's death ends it, collectives or not (M5).
        crate::launcher_watch::start(rank);
        let place = Place {
            host: Host::of(&client),
            emulated: node,
        };
        let mut links = Self {
            client,
            rank,
            world_size,
            timeout,
            id: ENGINES.fetch_add(1, Ordering::Relaxed),
            seq: 0,
            local_ranks: Vec::new(),
            local: Box::new(Bootstrap::alone()),
        };
        let op = CollectiveOp {
            seq: 0,
            kind: CollectiveKind::Provider {
                what: "PMIx rendezvous".into(),
            },
        };
        let bytes =
            serde_json::to_vec(&place).map_err(|e| BootstrapError::Protocol(e.to_string()))?;
        let places = links
            .all_gather(&op, &bytes, false)?
            .iter()
            .enumerate()
            .map(|(peer, (bytes, _))| {
                serde_json::from_slice::<Place>(bytes).map_err(|e| {
                    BootstrapError::Protocol(format!("rank {peer} sent no place: {e}"))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let hosts: Vec<&Host> = places.iter().map(|p| &p.host).collect();
        let emulated: Vec<u64> = places.iter().map(|p| p.emulated).collect();
        let topology = Topology::new(&hosts, &emulated);
        links.local_ranks = (0..world_size)
            .filter(|&r| topology.same_host(r, rank))
            .collect();
        let local_rank = links
            .local_ranks
            .iter()
            .position(|&r| r == rank)
            .expect("this rank is on its own host");
        // Named by the host's number, which every rank of the job agrees on.
        let host_number = topology.host(rank);
        links.local = Box::new(Bootstrap::connect(
            local_rank,
            links.local_ranks.len(),
            &dir.join(format!("node-{host_number}")),
            timeout,
        )?);
        Ok((links, topology))
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
        let waited = fence_wait(timeout);
        match self.client.fence(waited) {
            Ok(Some(())) => {}
            Ok(None) => {
                return Err(BootstrapError::EngineTimeout {
                    op: op.clone(),
                    waited,
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

#[cfg(test)]
mod tests {
    use super::*;

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

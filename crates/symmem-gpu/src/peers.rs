//! What ranks tell each other at start (emulated node, GPU, rank 0's unique id), and which peers
//! an emulated node split hides. Pure functions.

#![forbid(unsafe_code)]

use crate::shim::GpuId;

/// One rank's contribution to the start exchange.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PeerInfo {
    pub node_id: u64,
    pub gpu: GpuId,
    /// The SHMEM library's unique id: rank 0's only, empty elsewhere.
    pub unique_id: Vec<u8>,
}

impl PeerInfo {
    /// `node_id` (8 bytes, little endian), then host and bus id (each a u16 length and the
    /// bytes), then the unique id (the rest).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = self.node_id.to_le_bytes().to_vec();
        for text in [&self.gpu.host, &self.gpu.bus_id] {
            let bytes = &text.as_bytes()[..text.len().min(u16::MAX as usize)];
            out.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
            out.extend_from_slice(bytes);
        }
        out.extend_from_slice(&self.unique_id);
        out
    }

    /// `None` when `bytes` is not what [`PeerInfo::encode`] makes.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        let (node, mut rest) = bytes.split_first_chunk::<8>()?;
        let mut text = || -> Option<String> {
            let (len, tail) = rest.split_first_chunk::<2>()?;
            let len = usize::from(u16::from_le_bytes(*len));
            let (value, tail) = (tail.get(..len)?, tail.get(len..)?);
            rest = tail;
            String::from_utf8(value.to_vec()).ok()
        };
        let host = text()?;
        let bus_id = text()?;
        Some(Self {
            node_id: u64::from_le_bytes(*node),
            gpu: GpuId { host, bus_id },
            unique_id: rest.to_vec(),
        })
    }
}

/// Whether `peer` shares `rank`'s emulated node: a peer on another node is never load/store
/// reachable, whatever the library could reach.
pub(crate) fn same_node(node_ids: &[u64], rank: usize, peer: usize) -> bool {
    match (node_ids.get(rank), node_ids.get(peer)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// This machine's host name, to tell GPUs of different hosts apart ("" when unknown).
pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(unique_id: Vec<u8>) -> PeerInfo {
        PeerInfo {
            node_id: 7,
            gpu: GpuId {
                host: "gpu-host-1".into(),
                bus_id: "0000:3b:00.0".into(),
            },
            unique_id,
        }
    }

    #[test]
    fn peer_info_survives_the_exchange_with_and_without_a_unique_id() {
        for id in [vec![], (0..=255u8).collect::<Vec<_>>()] {
            let sent = info(id);
            assert_eq!(PeerInfo::decode(&sent.encode()), Some(sent));
        }
    }

    #[test]
    fn truncated_peer_info_is_refused() {
        let bytes = info(vec![]).encode();
        for len in 0..bytes.len() {
            assert_eq!(PeerInfo::decode(&bytes[..len]), None, "{len} bytes");
        }
    }

    #[test]
    fn a_split_hides_exactly_the_peers_of_other_nodes() {
        let nodes = [0, 0, 1, 1];
        let reachable: Vec<Vec<bool>> = (0..4)
            .map(|r| (0..4).map(|p| same_node(&nodes, r, p)).collect())
            .collect();
        assert_eq!(
            reachable,
            vec![
                vec![true, true, false, false],
                vec![true, true, false, false],
                vec![false, false, true, true],
                vec![false, false, true, true],
            ]
        );
        assert!(!same_node(&nodes, 0, 4), "a peer outside the job");
    }
}

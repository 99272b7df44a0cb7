//! What ranks tell each other at start (GPU, rank 0's unique id). Which node every rank is on
//! is the control plane's topology, not this exchange's. Pure functions.

#![forbid(unsafe_code)]

use crate::shim::GpuId;

/// One rank's contribution to the start exchange.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PeerInfo {
    pub gpu: GpuId,
    /// The SHMEM library's unique id: rank 0's only, empty elsewhere.
    pub unique_id: Vec<u8>,
}

impl PeerInfo {
    /// Host and bus id (each a u16 length and the bytes), then the unique id (the rest).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
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
        let mut rest = bytes;
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
            gpu: GpuId { host, bus_id },
            unique_id: rest.to_vec(),
        })
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
}

//! What ranks tell each other at start (their GPU's bus id, rank 0's unique id). Which host and
//! node every rank is on is the control plane's topology, not this exchange's. Pure functions.

#![forbid(unsafe_code)]

/// One rank's contribution to the start exchange.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PeerInfo {
    /// Its GPU's PCI bus id (with the topology's host, its [`GpuId`](crate::GpuId)).
    pub bus_id: String,
    /// The SHMEM library's unique id: rank 0's only, empty elsewhere.
    pub unique_id: Vec<u8>,
}

impl PeerInfo {
    /// The bus id (a u16 length and the bytes), then the unique id (the rest).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let text = &self.bus_id;
        let bytes = &text.as_bytes()[..text.len().min(u16::MAX as usize)];
        let mut out = (bytes.len() as u16).to_le_bytes().to_vec();
        out.extend_from_slice(bytes);
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
        let bus_id = text()?;
        Some(Self {
            bus_id,
            unique_id: rest.to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(unique_id: Vec<u8>) -> PeerInfo {
        PeerInfo {
            bus_id: "0000:3b:00.0".into(),
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

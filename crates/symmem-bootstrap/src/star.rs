//! The Unix star of one host: its ranks around the lowest one, met through the handshake of
//! [`rendezvous`](crate::rendezvous). [`Bootstrap`](crate::Bootstrap) runs a whole job over
//! one star; the engines across hosts ([`engine`](crate::engine)) open one per host and link
//! their centres. Both take a rank's end of it from here, so neither builds on the other.

use crate::BootstrapError;
use crate::rendezvous::{accept_all, connect_root};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// A rank's end of a Unix star.
pub(crate) enum StarEnd {
    /// The centre: a stream to every other rank of the star, index `star rank - 1`.
    Centre(Vec<UnixStream>),
    Leaf(UnixStream),
    /// A star of one.
    Alone,
}

/// Opens rank `rank`'s end of a star of `size` ranks meeting in `dir` (this rank on emulated
/// node `node`): its end and every rank's emulated node, in star rank order. The centre (star
/// rank 0) waits for every other rank, the others connect to it; both sides refuse a peer
/// running as another user.
pub(crate) fn open(
    rank: usize,
    size: usize,
    node: u64,
    dir: &Path,
    timeout: Duration,
) -> Result<(StarEnd, Vec<u64>), BootstrapError> {
    if size == 0 {
        return Err(BootstrapError::WorldSizeZero);
    }
    if rank >= size {
        return Err(BootstrapError::RankOutOfRange {
            rank,
            world_size: size,
        });
    }
    Ok(if size == 1 {
        (StarEnd::Alone, vec![node])
    } else if rank == 0 {
        let (leaves, nodes) = accept_all(dir, size, node, timeout)?;
        (StarEnd::Centre(leaves), nodes)
    } else {
        let (centre, nodes) = connect_root(rank, size, node, dir, timeout)?;
        (StarEnd::Leaf(centre), nodes)
    })
}

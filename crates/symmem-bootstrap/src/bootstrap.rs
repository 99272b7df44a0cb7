//! [`Bootstrap`]: one rank's end of the control plane. It meets the other ranks through the
//! handshake of [`rendezvous`](crate::rendezvous), then runs each collective through the
//! exchange of [`exchange`](crate::exchange).

use crate::BootstrapError;
use crate::exchange::{Gathered, leaf_exchange, root_exchange};
use crate::rendezvous::{accept_all, connect_root};
use std::os::fd::BorrowedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;
use symmem::CollectiveOp;

enum Links {
    /// Rank 0: a stream to every other rank, index `rank - 1`.
    Root(Vec<UnixStream>),
    Leaf(UnixStream),
    Alone,
}

/// One rank's end of the control plane.
pub struct Bootstrap {
    rank: usize,
    world_size: usize,
    timeout: Duration,
    links: Links,
}

impl Bootstrap {
    /// Joins the job's rendezvous in `dir`: rank 0 waits for every other rank, the others
    /// connect to rank 0; both sides refuse a peer running as another user.
    ///
    /// `dir` (created by rank 0 if missing, removed again once everyone is in if it created
    /// it) must be a folder of this user that no one else can write, reached without a folder
    /// or link of another user on the way; rank 0 binds and the others connect through its
    /// descriptor, so its path may be of any length and cannot be swapped after the check.
    pub fn connect(
        rank: usize,
        world_size: usize,
        dir: &Path,
        timeout: Duration,
    ) -> Result<Self, BootstrapError> {
        if world_size == 0 {
            return Err(BootstrapError::WorldSizeZero);
        }
        if rank >= world_size {
            return Err(BootstrapError::RankOutOfRange { rank, world_size });
        }
        let links = if world_size == 1 {
            Links::Alone
        } else if rank == 0 {
            Links::Root(accept_all(dir, world_size, timeout)?)
        } else {
            Links::Leaf(connect_root(rank, world_size, dir, timeout)?)
        };
        Ok(Self {
            rank,
            world_size,
            timeout,
            links,
        })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }
    pub fn world_size(&self) -> usize {
        self.world_size
    }
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Collective: waits for every rank and checks that all issued `op`.
    pub fn barrier(&mut self, op: &CollectiveOp) -> Result<(), BootstrapError> {
        self.exchange(op, &[], None, 0).map(drop)
    }

    /// Collective all-gather: every rank contributes `payload` (and optionally one descriptor)
    /// under `op`; on agreement every rank receives all payloads, and the descriptors of the
    /// ranks that gave the same `fd_group`.
    pub fn exchange(
        &mut self,
        op: &CollectiveOp,
        payload: &[u8],
        fd: Option<BorrowedFd<'_>>,
        fd_group: u64,
    ) -> Result<Gathered, BootstrapError> {
        match &self.links {
            Links::Alone => Ok(Gathered {
                payloads: vec![payload.to_vec()],
                fds: vec![None],
            }),
            Links::Leaf(root) => leaf_exchange(
                root,
                self.world_size,
                self.timeout,
                op,
                payload,
                fd,
                fd_group,
            ),
            Links::Root(leaves) => root_exchange(leaves, self.timeout, op, payload, fd, fd_group),
        }
    }
}

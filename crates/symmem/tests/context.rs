//! Context behaviour over an in-process provider that models one rank of a job whose peers'
//! heaps are mapped at other addresses (as the host provider and SHMEM IPC mappings do).

use std::cell::Cell;
use symmem::{
    Blame, CollectiveKind, CollectiveOp, Context, Error, ProviderError, ProviderKind,
    SymmetricProvider, Topology, TranslateError,
};

const HEAP: u64 = 1 << 30;

struct ModelProvider {
    rank: usize,
    world_size: usize,
    unreachable: Vec<usize>,
    topology: Topology,
    next: u64,
    ptr_calls: Cell<usize>,
    ops: Vec<CollectiveOp>,
    /// The next malloc fails: on every rank alike (`Some(true)`), or on this one (`Some(false)`).
    fail_next_malloc: Cell<Option<bool>>,
}

/// The model's failure, seen by every rank alike or by this one only.
#[derive(Debug)]
struct ModelFailure {
    blame: Blame,
}

impl std::fmt::Display for ModelFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("out of model heap")
    }
}

impl std::error::Error for ModelFailure {}

impl ProviderError for ModelFailure {
    fn blame(&self) -> Blame {
        self.blame
    }
}

impl ModelProvider {
    fn new(rank: usize, world_size: usize) -> Self {
        Self {
            rank,
            world_size,
            unreachable: Vec::new(),
            topology: Topology::single(world_size),
            next: 0,
            ptr_calls: Cell::new(0),
            ops: Vec::new(),
            fail_next_malloc: Cell::new(None),
        }
    }
    /// Heaps of different ranks sit at unrelated addresses, in a non-monotonic order.
    fn heap_base(rank: usize) -> u64 {
        0x7f00_0000_0000 - (rank as u64 * 3 + 1) * HEAP * 2
    }
}

impl SymmetricProvider for ModelProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Host
    }
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.world_size
    }
    fn topology(&self) -> &Topology {
        &self.topology
    }
    fn checks_collective_order(&self) -> bool {
        false
    }
    fn malloc(&mut self, bytes: u64, op: &CollectiveOp) -> Result<u64, Error> {
        self.ops.push(op.clone());
        if let Some(every_rank) = self.fail_next_malloc.take() {
            let blame = if every_rank {
                Blame::EveryRank
            } else {
                Blame::ThisRank
            };
            return Err(Error::from_provider(
                ProviderKind::Host,
                ModelFailure { blame },
            ));
        }
        let addr = Self::heap_base(self.rank) + self.next;
        self.next += bytes.div_ceil(256) * 256;
        Ok(addr)
    }
    fn free(&mut self, _addr: u64, op: &CollectiveOp) -> Result<(), Error> {
        self.ops.push(op.clone());
        Ok(())
    }
    fn barrier(&mut self, op: &CollectiveOp) -> Result<(), Error> {
        self.ops.push(op.clone());
        Ok(())
    }
    fn ptr(&self, addr: u64, peer: usize) -> Option<u64> {
        self.ptr_calls.set(self.ptr_calls.get() + 1);
        if self.unreachable.contains(&peer) {
            return None;
        }
        Some(addr - Self::heap_base(self.rank) + Self::heap_base(peer))
    }
}

#[test]
fn local_entry_is_the_base_and_offsets_are_shared() {
    let mut ctx = Context::new(ModelProvider::new(2, 4));
    let (a, ta) = ctx.allocate_symmetric::<u64>(1000).unwrap();
    let (b, tb) = ctx.allocate_symmetric::<u32>(77).unwrap();
    assert_eq!(ta.bases()[2], a.addr());
    assert_eq!(tb.bases()[2], b.addr());
    assert_ne!(a.addr(), b.addr());
    for peer in 0..4 {
        assert_eq!(
            ta.bases()[peer].wrapping_sub(a.addr()),
            tb.bases()[peer].wrapping_sub(b.addr()),
            "peer {peer}"
        );
        assert_eq!(ta.bases()[peer], ModelProvider::heap_base(peer));
    }
    // One sweep of world_size - 1 peers, however many allocations follow.
    let (c, _) = ctx.allocate_symmetric::<u8>(1).unwrap();
    assert_eq!(ctx.ptr_sweeps(), 1);
    assert_eq!(ctx.provider().ptr_calls.get(), 3);
    ctx.free(a).unwrap();
    ctx.free(b).unwrap();
    ctx.free(c).unwrap();
    assert!(ctx.finalize().unwrap().outstanding.is_empty());
}

#[test]
fn address_map_of_existing_buffer_matches_allocation() {
    let mut ctx = Context::new(ModelProvider::new(1, 3));
    let (_first, _) = ctx.allocate_symmetric::<u8>(4096).unwrap();
    let (buf, map) = ctx.allocate_symmetric_map::<f32>(10).unwrap();
    assert_eq!(ctx.symmetric_address_map(&buf).unwrap(), map);
    assert_eq!(map.base, buf.addr());
    assert_eq!(map.bytes, 40);
    assert_eq!(map.local_rank, 1);
    assert_eq!(map.direct(), &[true, true, true]);
}

#[test]
fn unreachable_peer_has_base_zero_and_is_refused() {
    let mut provider = ModelProvider::new(0, 4);
    provider.unreachable = vec![2, 3];
    provider.topology = Topology::one_host(&[0, 0, 1, 1]);
    let mut ctx = Context::new(provider);
    let (buf, map) = ctx.allocate_symmetric_map::<u64>(8).unwrap();
    assert_eq!(map.table.bases()[2], 0);
    assert_eq!(map.direct(), &[true, true, false, false]);
    assert_eq!(
        map.translate(buf.addr(), 0, 3),
        Err(TranslateError::PeerNotDirect { rank: 0, peer: 3 })
    );
    assert!(map.translate(buf.addr(), 0, 1).is_ok());
}

#[test]
fn no_reachable_peer_on_a_single_node_provider_means_no_ipc() {
    let mut provider = ModelProvider::new(0, 2);
    provider.unreachable = vec![1];
    let mut ctx = Context::new(provider);
    let err = ctx.allocate_symmetric::<u8>(16).unwrap_err();
    assert!(
        matches!(err, Error::NoPeerReachable { world_size: 2, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("USE_IPC=ON"), "{err}");
    // The context refuses to go on rather than hand out a table of zeros.
    assert!(matches!(ctx.barrier(), Err(Error::Poisoned { .. })));
}

#[test]
fn bad_sizes_are_typed_errors() {
    let mut ctx = Context::new(ModelProvider::new(0, 1));
    assert!(matches!(
        ctx.allocate_symmetric::<u64>(0),
        Err(Error::ZeroLength { .. })
    ));
    assert!(matches!(
        ctx.allocate_symmetric::<u64>(usize::MAX / 4),
        Err(Error::SizeOverflow { .. })
    ));
    assert!(matches!(
        ctx.allocate_symmetric::<()>(5),
        Err(Error::ZeroLength { .. })
    ));
}

#[test]
fn dropped_buffer_is_not_freed_but_reported() {
    let mut ctx = Context::new(ModelProvider::new(0, 2));
    let (kept, _) = ctx.allocate_symmetric::<u64>(4).unwrap();
    let (dropped, _) = ctx.allocate_symmetric::<u64>(4).unwrap();
    let dropped_id = dropped.id();
    drop(dropped);
    // No free was issued for the dropped buffer: only the two mallocs reached the provider.
    assert_eq!(ctx.provider().ops.len(), 2);
    let outstanding = ctx.outstanding();
    assert_eq!(outstanding.len(), 2);
    assert!(outstanding.iter().any(|r| r.id == dropped_id && r.dropped));
    ctx.free(kept).unwrap();
    let report = ctx.finalize().unwrap();
    assert_eq!(report.outstanding.len(), 1);
    assert_eq!(report.outstanding[0].id, dropped_id);
    assert!(matches!(ctx.barrier(), Err(Error::Finalized)));
}

#[test]
fn collectives_carry_sequence_and_kind() {
    let mut ctx = Context::new(ModelProvider::new(0, 1));
    let (buf, _) = ctx.allocate_symmetric::<u16>(8).unwrap();
    ctx.barrier().unwrap();
    let id = buf.id();
    ctx.free(buf).unwrap();
    let ops = &ctx.provider().ops;
    assert_eq!(ops[0].kind, CollectiveKind::Malloc { bytes: 16 });
    assert_eq!(ops[1].kind, CollectiveKind::Barrier);
    assert_eq!(
        ops[2].kind,
        CollectiveKind::Free {
            allocation: id,
            bytes: 16
        }
    );
    assert_eq!(ops.iter().map(|o| o.seq).collect::<Vec<_>>(), vec![0, 1, 2]);
}

#[test]
fn buffers_and_tables_of_another_context_are_refused() {
    let mut one = Context::new(ModelProvider::new(0, 2));
    let mut two = Context::new(ModelProvider::new(0, 2));
    let (buf, _) = one.allocate_symmetric::<u8>(8).unwrap();
    assert!(matches!(
        two.symmetric_address_map(&buf),
        Err(Error::ForeignContext { .. })
    ));
    let err = two.free(buf).unwrap_err();
    assert!(matches!(err, Error::ForeignContext { .. }));
    // The refused free did not hand the buffer over: it is still tracked by its owner.
    assert_eq!(one.outstanding().len(), 1);
    let (b2, _) = two.allocate_symmetric::<u8>(8).unwrap();
    two.free(b2).unwrap();
}

#[test]
fn a_failure_every_rank_shares_leaves_the_context_usable_any_other_poisons_it() {
    let mut ctx = Context::new(ModelProvider::new(0, 2));
    let (kept, _) = ctx.allocate_symmetric::<u64>(4).unwrap();
    ctx.provider().fail_next_malloc.set(Some(true));
    let err = ctx.allocate_symmetric::<u64>(4).unwrap_err();
    assert!(err.leaves_ranks_in_step(), "{err}");
    assert_eq!(err.to_string(), "host: out of model heap");
    // Still in step: the next collectives go ahead with the following sequence numbers.
    ctx.barrier().unwrap();
    let (again, _) = ctx.allocate_symmetric::<u64>(4).unwrap();
    assert_eq!(again.id(), 3);
    ctx.free(again).unwrap();

    ctx.provider().fail_next_malloc.set(Some(false));
    let err = ctx.allocate_symmetric::<u64>(4).unwrap_err();
    assert!(!err.leaves_ranks_in_step(), "{err}");
    let after = ctx.barrier().unwrap_err();
    assert!(matches!(after, Error::Poisoned { .. }), "{after}");
    assert!(after.to_string().contains("out of model heap"), "{after}");
    std::mem::forget(kept);
}

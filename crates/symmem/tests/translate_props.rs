//! Property tests of table translation.

use proptest::prelude::*;
use symmem::{AddressMap, ContextId, PeerTable, TranslateError};

const WORLD: usize = 8;

/// Distinct, non-zero, page-aligned heap bases for `WORLD` ranks.
fn heap_bases() -> impl Strategy<Value = Vec<u64>> {
    proptest::collection::hash_set(1u64..(1 << 34), WORLD)
        .prop_map(|set| set.into_iter().map(|p| p << 12).collect())
}

fn map(heaps: &[u64], rank: usize, offset: u64, bytes: u64) -> AddressMap {
    let bases = heaps.iter().map(|h| h + offset).collect();
    AddressMap {
        local_rank: rank,
        base: heaps[rank] + offset,
        bytes,
        table: PeerTable::from_parts(ContextId(1), rank, bases),
    }
}

proptest! {
    #[test]
    fn round_trip(heaps in heap_bases(), rank in 0..WORLD, from in 0..WORLD, to in 0..WORLD,
                  offset in 0u64..(1 << 28), bytes in 1u64..(1 << 20), at in 0u64..(1 << 20)) {
        let at = at % bytes;
        let m = map(&heaps, rank, offset, bytes);
        let addr = m.table.bases()[from] + at;
        let there = m.translate(addr, from, to).unwrap();
        prop_assert_eq!(there, m.table.bases()[to] + at);
        prop_assert_eq!(m.translate(there, to, from).unwrap(), addr);
        prop_assert_eq!(m.translate(addr, from, from).unwrap(), addr);
    }

    #[test]
    fn one_table_translates_another_allocations_pointers(
        heaps in heap_bases(), rank in 0..WORLD, to in 0..WORLD,
        off_a in 0u64..(1 << 28), off_b in 0u64..(1 << 28), at in 0u64..4096) {
        let a = map(&heaps, rank, off_a, 4096);
        let b = map(&heaps, rank, off_b, 4096);
        let ptr_in_b = b.base + at;
        // Kernel-style translation through A's table lands where B's own table says.
        prop_assert_eq!(
            a.table.translate(ptr_in_b, rank, to).unwrap(),
            b.table.bases()[to] + at
        );
    }

    #[test]
    fn outside_the_allocation_is_refused(heaps in heap_bases(), rank in 0..WORLD,
        from in 0..WORLD, bytes in 1u64..(1 << 20), past in 0u64..(1 << 20), below in 1u64..4096) {
        let m = map(&heaps, rank, 1 << 20, bytes);
        let base = m.table.bases()[from];
        let over = m.translate(base + bytes + past, from, rank);
        let is_out_of_bounds = matches!(over, Err(TranslateError::OutOfBounds { .. }));
        prop_assert!(is_out_of_bounds);
        let under = m.translate(base - below, from, rank);
        let is_out_of_bounds = matches!(under, Err(TranslateError::OutOfBounds { .. }));
        prop_assert!(is_out_of_bounds);
        prop_assert!(m.translate(base + bytes - 1, from, rank).is_ok());
    }

    #[test]
    fn unreachable_targets_are_refused(heaps in heap_bases(), rank in 0..WORLD, off in 1u64..WORLD as u64) {
        let peer = (rank + off as usize) % WORLD;
        let mut bases: Vec<u64> = heaps.clone();
        bases[peer] = 0;
        let table = PeerTable::from_parts(ContextId(1), rank, bases);
        prop_assert!(!table.direct(peer));
        prop_assert_eq!(
            table.translate(heaps[rank], rank, peer),
            Err(TranslateError::PeerNotDirect { rank, peer })
        );
    }
}

#[test]
fn ranks_out_of_range_are_refused() {
    let table = PeerTable::from_parts(ContextId(1), 0, vec![4096, 8192]);
    assert_eq!(
        table.translate(4096, 0, 2),
        Err(TranslateError::RankOutOfRange {
            rank: 2,
            world_size: 2
        })
    );
}

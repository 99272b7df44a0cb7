//! Four real processes share their heaps: two allocations each, `table[rank] == base`, equal
//! per-peer offsets, a store into every reachable peer read back by that peer, and rank 3 on an
//! emulated other node reported as `direct = false`.
//!
//! The test binary re-executes itself as each rank (the ignored test `rank_process`).

use std::time::Duration;
use symmem::{Context, Error, TranslateError};
use symmem_host::HostProvider;
use symmem_test_support::ranks::{assert_ranks_ok, is_rank_process, run_host_rank_processes};

const WORLD: usize = 4;
const CHILD_ENV: &str = "SYMMEM_HOST_TEST_CHILD";

fn node_of(rank: usize) -> u64 {
    u64::from(rank == WORLD - 1)
}

#[test]
#[ignore = "one rank of `four_processes`, which starts it in a child process"]
fn rank_process() {
    if is_rank_process(CHILD_ENV, "four_processes") {
        rank_main();
    }
}

#[test]
fn four_processes() {
    let exits = run_host_rank_processes(CHILD_ENV, WORLD, Duration::from_secs(60), |rank, cmd| {
        cmd.env("SYMMEM_NODE_ID", node_of(rank).to_string())
            .env("SYMMEM_HOST_HEAP_SIZE", "64M");
    });
    assert_ranks_ok(&exits);
}

fn rank_main() {
    let provider = HostProvider::from_env().expect("host provider");
    let mut ctx = Context::new(provider);
    let rank = ctx.rank();
    let (a, ta) = ctx
        .allocate_symmetric::<u64>(WORLD)
        .expect("first allocation");
    let (b, tb) = ctx
        .allocate_symmetric::<u64>(3 * WORLD)
        .expect("second allocation");
    assert_eq!(ta.bases()[rank], a.addr(), "first table's local entry");
    assert_eq!(tb.bases()[rank], b.addr(), "second table's local entry");
    for peer in 0..WORLD {
        let same_node = node_of(peer) == node_of(rank);
        assert_eq!(ta.direct(peer), same_node, "direct flag of peer {peer}");
        if same_node {
            assert_eq!(
                ta.bases()[peer].wrapping_sub(a.addr()),
                tb.bases()[peer].wrapping_sub(b.addr()),
                "offset of peer {peer}"
            );
        } else {
            assert_eq!(ta.bases()[peer], 0, "base of unreachable peer {peer}");
        }
    }
    // All-to-all scatter: slot `rank` of every reachable peer's copy of `a`.
    for peer in (0..WORLD).filter(|&p| ta.direct(p)) {
        let value = 1000 * rank as u64 + peer as u64;
        ctx.store_u64(&ta, a.addr_of(rank), peer, &[value])
            .expect("store");
    }
    ctx.barrier().expect("barrier");
    let got = ctx.read(&a).expect("read own copy");
    for (writer, &value) in got.iter().enumerate() {
        let expected = if node_of(writer) == node_of(rank) {
            1000 * writer as u64 + rank as u64
        } else {
            0
        };
        assert_eq!(value, expected, "slot written by rank {writer}");
    }
    if rank == WORLD - 1 {
        let err = ctx.store_u64(&ta, a.addr(), 0, &[1]).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Translate(TranslateError::PeerNotDirect { peer: 0, .. })
            ),
            "{err}"
        );
    }
    ctx.free(b).expect("free b");
    ctx.free(a).expect("free a");
    let report = ctx.finalize().expect("finalize");
    assert!(report.outstanding.is_empty());
    println!("rank {rank} ok");
}

//! Running out of symmetric heap is a failure every rank learns together, so it leaves the
//! context usable: three real processes exhaust their heaps, free a buffer, allocate again,
//! pass a barrier and finalize cleanly.
//!
//! The test binary re-executes itself as each rank (the ignored test `rank_process`).

use std::time::Duration;
use symmem::{Context, Error};
use symmem_host::HostProvider;
use symmem_test_support::ranks::{assert_ranks_ok, is_rank_process, run_host_rank_processes};

const WORLD: usize = 3;
const CHILD_ENV: &str = "SYMMEM_HOST_EXHAUSTION_CHILD";
const HEAP: usize = 64 << 10;
const CHUNK: usize = 16 << 10;

#[test]
#[ignore = "one rank of `exhausting_the_heap_leaves_the_context_usable`, started as a child"]
fn rank_process() {
    if is_rank_process(CHILD_ENV, "exhausting_the_heap_leaves_the_context_usable") {
        rank_main();
    }
}

#[test]
fn exhausting_the_heap_leaves_the_context_usable() {
    let exits = run_host_rank_processes(CHILD_ENV, WORLD, Duration::from_secs(60), |_, cmd| {
        cmd.env("SYMMEM_HOST_HEAP_SIZE", HEAP.to_string());
    });
    assert_ranks_ok(&exits);
}

fn rank_main() {
    let provider = HostProvider::from_env().expect("host provider");
    let mut ctx = Context::new(provider);
    let rank = ctx.rank();
    let mut buffers = Vec::new();
    let err = loop {
        match ctx.allocate_symmetric::<u8>(CHUNK) {
            Ok((buffer, _)) => buffers.push(buffer),
            Err(e) => break e,
        }
        assert!(buffers.len() <= HEAP / CHUNK, "allocated past the heap");
    };
    assert_eq!(buffers.len(), HEAP / CHUNK, "the whole heap was handed out");
    let text = err.to_string();
    assert!(!matches!(err, Error::Poisoned { .. }), "{text}");
    assert!(text.contains("heap exhausted"), "{text}");
    assert!(text.contains("free buffers first"), "{text}");
    assert!(
        !err.is_peer_failure(),
        "every rank ran out: none is a witness only: {text}"
    );

    // What the message advises works: free a buffer, and the allocation succeeds.
    let freed = buffers.remove(1);
    let freed_addr = freed.addr();
    ctx.free(freed).expect("free after exhaustion");
    let (again, table) = ctx
        .allocate_symmetric::<u64>(CHUNK / 8)
        .expect("allocation after a free");
    assert_eq!(again.addr(), freed_addr, "the freed block is reused");
    // The heaps are still symmetric: write into the next rank's copy, read it back there.
    let next = (rank + 1) % WORLD;
    ctx.store_u64(&table, again.addr(), next, &[100 + rank as u64])
        .expect("store to a peer");
    ctx.barrier().expect("barrier after exhaustion");
    let from = (rank + WORLD - 1) % WORLD;
    assert_eq!(ctx.read(&again).expect("read")[0], 100 + from as u64);
    // Exhausting it again fails the same way, and still leaves it usable.
    let err = ctx.allocate_symmetric::<u8>(CHUNK).unwrap_err();
    assert!(err.to_string().contains("heap exhausted"), "{err}");
    ctx.free(again).expect("free");
    for buffer in buffers {
        ctx.free(buffer).expect("free");
    }
    let report = ctx.finalize().expect("finalize after exhaustion");
    assert!(report.outstanding.is_empty(), "{:?}", report.outstanding);
    println!("rank {rank} ok");
}

//! Collective semantics of the host provider, with ranks as threads of this process (each
//! with its own heap and socket, exactly as separate processes would have).

use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};
use symmem::{Context, Error, TranslateError};
use symmem_host::{HostConfig, HostProvider};
use symmem_test_support::ranks::{host_config, thread_ranks};

/// How long collectives wait for a rank in these tests.
const TIMEOUT: Duration = Duration::from_secs(10);

fn config(rank: usize, world_size: usize, dir: &Path) -> HostConfig {
    host_config(rank, world_size, dir, TIMEOUT)
}

/// Runs `body` as every rank of a `world_size`-rank job, its settings changed by `tweak`, and
/// returns each rank's result.
fn ranks<T: Send>(
    world_size: usize,
    tweak: impl Fn(&mut HostConfig) + Sync,
    body: impl Fn(Context<HostProvider>) -> T + Sync,
) -> Vec<T> {
    thread_ranks(world_size, TIMEOUT, |mut cfg| {
        tweak(&mut cfg);
        body(Context::new(HostProvider::new(cfg).expect("provider")))
    })
}

#[test]
fn out_of_order_collectives_are_an_error_naming_the_ranks() {
    let results = ranks(
        3,
        |_| {},
        |mut ctx| {
            let (buf, _) = ctx.allocate_symmetric::<u64>(8).unwrap();
            // Rank 1 frees while the others allocate again.
            let outcome = if ctx.rank() == 1 {
                ctx.free(buf).map(drop)
            } else {
                std::mem::forget(buf);
                ctx.allocate_symmetric::<u64>(8)
                    .map(|(b, _)| std::mem::forget(b))
            };
            let err = outcome.unwrap_err();
            // The context is unusable afterwards rather than out of step.
            let after = ctx.barrier().unwrap_err();
            (err, after)
        },
    );
    for (err, after) in results {
        let mismatch = err
            .as_collective_mismatch()
            .unwrap_or_else(|| panic!("{err}"));
        assert_eq!(mismatch.ranks(), vec![0, 1, 2]);
        let text = err.to_string();
        assert!(text.contains("ranks 0, 2 issued #1 malloc(64 B)"), "{text}");
        assert!(
            text.contains("rank 1 issued #1 free(allocation #0, 64 B)"),
            "{text}"
        );
        assert!(matches!(after, Error::Poisoned { .. }), "{after}");
    }
}

#[test]
fn a_rank_that_never_arrives_is_named_after_the_timeout() {
    let started = Instant::now();
    let results = ranks(
        3,
        |cfg| cfg.timeout = Duration::from_millis(300),
        |mut ctx| {
            if ctx.rank() == 2 {
                // Hangs past the others' timeout, then leaves without the barrier.
                thread::sleep(Duration::from_millis(900));
                return None;
            }
            Some(ctx.barrier().unwrap_err().to_string())
        },
    );
    for text in results.into_iter().flatten() {
        assert!(
            text.contains("rank 2 never arrived at collective #0 barrier"),
            "{text}"
        );
    }
    assert!(started.elapsed() < Duration::from_secs(8));
}

#[test]
fn a_rank_that_exits_is_named() {
    let results = ranks(
        2,
        |_| {},
        |mut ctx| {
            if ctx.rank() == 1 {
                drop(ctx);
                return None;
            }
            Some(ctx.barrier().unwrap_err().to_string())
        },
    );
    let text = results[0].as_ref().expect("rank 0 result");
    assert!(
        text.contains("rank 1 disconnected before collective #0 barrier"),
        "{text}"
    );
}

#[test]
fn heap_exhaustion_names_the_heap_size_and_the_fix() {
    let results = ranks(
        2,
        |cfg| cfg.heap_bytes = 64 << 10,
        |mut ctx| {
            let (small, _) = ctx.allocate_symmetric::<u8>(60 << 10).unwrap();
            let err = ctx.allocate_symmetric::<u8>(8 << 10).unwrap_err();
            drop(small);
            err.to_string()
        },
    );
    for text in results {
        assert!(text.contains("heap exhausted"), "{text}");
        assert!(text.contains("65536 B heap"), "{text}");
        assert!(text.contains("SYMMEM_HOST_HEAP_SIZE"), "{text}");
    }
}

#[test]
fn frees_are_reused_identically_on_every_rank() {
    let results = ranks(
        2,
        |_| {},
        |mut ctx| {
            let (a, _) = ctx.allocate_symmetric::<u8>(1000).unwrap();
            let (b, _) = ctx.allocate_symmetric::<u8>(1000).unwrap();
            let a_addr = a.addr();
            ctx.free(a).unwrap();
            let (c, _) = ctx.allocate_symmetric::<u8>(500).unwrap();
            let reused = c.addr() == a_addr;
            let offset = c.addr() - ctx.provider().heap_base();
            ctx.free(b).unwrap();
            ctx.free(c).unwrap();
            assert!(ctx.finalize().unwrap().outstanding.is_empty());
            (reused, offset)
        },
    );
    assert!(results.iter().all(|r| r.0), "freed block reused");
    assert_eq!(results[0].1, results[1].1, "same offsets on both ranks");
}

#[test]
fn emulated_other_node_is_not_mapped_and_refused() {
    let results = ranks(
        2,
        |cfg| cfg.node_id = cfg.identity.rank as u64,
        |mut ctx| {
            let (buf, map) = ctx.allocate_symmetric_map::<u64>(4).unwrap();
            let peer = 1 - ctx.rank();
            let refused = ctx
                .store_u64(&map.table, buf.addr(), peer, &[7])
                .unwrap_err();
            let translate = map.translate(buf.addr(), ctx.rank(), peer).unwrap_err();
            ctx.free(buf).unwrap();
            (
                map.table.bases()[peer],
                map.direct().to_vec(),
                refused,
                translate,
            )
        },
    );
    for (rank, (base, direct, refused, translate)) in results.into_iter().enumerate() {
        assert_eq!(base, 0);
        assert!(direct[rank]);
        assert!(!direct[1 - rank]);
        assert!(
            matches!(
                refused,
                Error::Translate(TranslateError::PeerNotDirect { .. })
            ),
            "{refused}"
        );
        assert!(matches!(translate, TranslateError::PeerNotDirect { .. }));
    }
}

#[test]
fn pointers_outside_the_heap_are_refused() {
    let results = ranks(
        2,
        |_| {},
        |mut ctx| {
            let (buf, table) = ctx.allocate_symmetric::<u64>(4).unwrap();
            let outside = buf.addr() + ctx.provider().heap_bytes();
            let store = ctx
                .store_u64(&table, outside, 1 - ctx.rank(), &[1])
                .unwrap_err();
            let misaligned = ctx
                .atomic_add_u64(&table, buf.addr() + 4, 1 - ctx.rank(), 1)
                .unwrap_err();
            ctx.free(buf).unwrap();
            (store.to_string(), misaligned.to_string())
        },
    );
    for (store, misaligned) in results {
        assert!(
            store.contains("outside that peer's symmetric heap"),
            "{store}"
        );
        assert!(misaligned.contains("not aligned"), "{misaligned}");
    }
}

#[test]
fn atomic_adds_from_every_rank_are_exact() {
    const ADDS: u64 = 500;
    let results = ranks(
        4,
        |_| {},
        |mut ctx| {
            let (counter, table) = ctx.allocate_symmetric::<u64>(1).unwrap();
            ctx.write(&counter, &[0]).unwrap();
            ctx.barrier().unwrap();
            for _ in 0..ADDS {
                for peer in 0..ctx.world_size() {
                    ctx.atomic_add_u64(&table, counter.addr(), peer, 1).unwrap();
                }
            }
            ctx.barrier().unwrap();
            let total = ctx.read(&counter).unwrap()[0];
            ctx.free(counter).unwrap();
            total
        },
    );
    assert!(results.iter().all(|&t| t == 4 * ADDS), "{results:?}");
}

#[test]
fn unusable_rendezvous_folder_is_a_clear_error() {
    let mut cfg = config(0, 2, Path::new("/dev/null/symmem"));
    cfg.timeout = Duration::from_millis(200);
    let err = HostProvider::new(cfg).err().expect("must fail");
    let text = err.to_string();
    assert!(
        text.contains("rendezvous folder /dev/null/symmem is not usable"),
        "{text}"
    );
    assert!(text.contains("SYMMEM_RENDEZVOUS"), "{text}");
}

#[test]
fn a_missing_rank_at_rendezvous_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(0, 3, dir.path());
    cfg.timeout = Duration::from_millis(300);
    let err = HostProvider::new(cfg).err().expect("must fail").to_string();
    assert!(
        err.contains("ranks 1, 2 never connected to rank 0"),
        "{err}"
    );
    // Nothing is left in the folder.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn bad_rank_and_heap_settings_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(2, 2, dir.path());
    let err = HostProvider::new(cfg.clone()).err().unwrap().to_string();
    assert!(
        err.contains("rank 2 is out of range for a world of 2"),
        "{err}"
    );
    cfg.identity.rank = 0;
    cfg.identity.local_world_size = 1;
    let err = HostProvider::new(cfg.clone()).err().unwrap().to_string();
    assert!(
        err.contains("this job spans nodes") && err.contains("1 of its 2 ranks"),
        "{err}"
    );
    cfg.identity.world_size = 1;
    cfg.heap_bytes = 10;
    let err = HostProvider::new(cfg).err().unwrap().to_string();
    assert!(err.contains("too small"), "{err}");
}

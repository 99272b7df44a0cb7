//! Bench of the control plane's engines, run as every rank of a job (not a test):
//!
//! ```sh
//! cargo build --release -p symmem-bootstrap --example engine_bench
//! symmem-run --ranks 8 -- target/release/examples/engine_bench          # Unix star
//! mpirun -np 8 -x SYMMEM_BOOTSTRAP=pmix target/release/examples/engine_bench
//! ```
//!
//! Rank 0 prints one JSON line: the rendezvous (a host provider's start: join plus its heap
//! exchange, slowest rank), one collective allocate + free through a `Context`, one bare
//! `Bootstrap::exchange` of 8 bytes, and (under PMIx) the engine's raw all-gather; medians
//! over the iterations, in microseconds (and the mean of the first and last ten exchanges,
//! which shows how PMIx's cost grows with the keys a job has put).

use std::time::{Duration, Instant};
use symmem::{CollectiveKind, CollectiveOp, Context, Engine, RankIdentity};
use symmem_bootstrap::{Bootstrap, default_rendezvous, raw_pmix_allgather};
use symmem_host::{HostConfig, HostProvider};

const ITERATIONS: usize = 200;

fn median_us(mut times: Vec<Duration>) -> f64 {
    times.sort();
    times[times.len() / 2].as_secs_f64() * 1e6
}

fn main() -> anyhow::Result<()> {
    let identity = RankIdentity::from_env()?;
    let dir = default_rendezvous(&identity)?;
    let start = Instant::now();
    let mut cfg = HostConfig::from_env()?;
    cfg.heap_bytes = 64 << 20;
    let mut ctx = Context::new(HostProvider::new(cfg)?);
    let rendezvous = start.elapsed();

    let mut alloc_free = Vec::with_capacity(ITERATIONS);
    for _ in 0..ITERATIONS {
        let t = Instant::now();
        let (buf, table) = ctx.allocate_symmetric::<u8>(4096)?;
        std::hint::black_box(&table);
        ctx.free(buf)?;
        alloc_free.push(t.elapsed());
    }
    ctx.finalize()?;

    let mut bootstrap = Bootstrap::join(&identity, 0, &dir.join("raw"), Duration::from_secs(60))?;
    let engine = bootstrap.engine();
    // A bare exchange and, under PMIx, the engine's raw all-gather, interleaved: PMIx keeps
    // every key a job put and its all-gathers slow down as they pile up, so both are measured
    // at the same point of that growth.
    let mut exchange = Vec::with_capacity(ITERATIONS);
    let mut raw = Vec::with_capacity(ITERATIONS);
    for seq in 0..ITERATIONS as u64 {
        let op = CollectiveOp {
            seq,
            kind: CollectiveKind::Provider {
                what: "bench".into(),
            },
        };
        let t = Instant::now();
        bootstrap.exchange(&op, &seq.to_le_bytes(), None, 0)?;
        exchange.push(t.elapsed());
        if engine == Engine::Pmix {
            raw.extend(raw_pmix_allgather(
                identity.world_size,
                1,
                Duration::from_secs(60),
            )?);
        }
    }
    // The slowest rank's rendezvous, as every rank sees it.
    let op = CollectiveOp {
        seq: ITERATIONS as u64,
        kind: CollectiveKind::Provider {
            what: "bench rendezvous times".into(),
        },
    };
    let rendezvous_slowest = bootstrap
        .exchange(&op, &(rendezvous.as_micros() as u64).to_le_bytes(), None, 0)?
        .payloads
        .iter()
        .map(|p| u64::from_le_bytes(p.as_slice().try_into().unwrap_or_default()))
        .max()
        .unwrap_or_default();
    drop(bootstrap);
    let exchange_first = exchange[..10].iter().sum::<Duration>() / 10;
    let exchange_last = exchange[ITERATIONS - 10..].iter().sum::<Duration>() / 10;
    let raw = (!raw.is_empty()).then(|| median_us(raw));
    if identity.rank == 0 {
        println!(
            "{}",
            serde_json::json!({
                "engine": format!("{engine:?}"),
                "ranks": identity.world_size,
                "local_ranks": identity.local_world_size,
                "rendezvous_us": rendezvous_slowest,
                "alloc_free_us": median_us(alloc_free),
                "exchange_us": median_us(exchange),
                "exchange_first10_us": exchange_first.as_secs_f64() * 1e6,
                "exchange_last10_us": exchange_last.as_secs_f64() * 1e6,
                "raw_pmix_allgather_us": raw,
            })
        );
    }
    Ok(())
}

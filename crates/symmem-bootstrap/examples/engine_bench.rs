//! Bench of the control plane's engines, run as every rank of a job (not a test):
//!
//! ```sh
//! cargo build --release -p symmem-bootstrap --example engine_bench
//! symmem-run --ranks 8 -- target/release/examples/engine_bench          # Unix star
//! mpirun -np 8 -x SYMMEM_BOOTSTRAP=pmix target/release/examples/engine_bench
//! # on the emulated nodes, as root (mpirun or srun, nodes, ranks per node, collectives):
//! cargo build --release -p symmem-bootstrap --example engine_bench --example engine_bench_nodes
//! target/release/examples/engine_bench_nodes mpirun 2 4 10000
//! ```
//!
//! Through one `Context` (host provider): the rendezvous (its start: join plus its heap
//! exchange, slowest rank), 100 allocate + free, then `ENGINE_BENCH_COLLECTIVES` barriers
//! (default 10,000), then 100 allocate + free again. Rank 0 prints one JSON line: min, median
//! and max of each (microseconds), the median of the first and the last 100 barriers and of
//! each tenth of them, and the
//! resident memory of each rank's parent (the launcher's daemon on its node: mpirun or orted,
//! slurmstepd) before and after the barriers.

use std::time::{Duration, Instant};
use symmem::{CollectiveKind, CollectiveOp, Context};
use symmem_bootstrap::{Bootstrap, default_rendezvous};
use symmem_host::{HostConfig, HostProvider};

const ALLOC_FREE: usize = 100;

/// Min, median and max in microseconds.
fn stats(times: &[Duration]) -> serde_json::Value {
    let mut sorted = times.to_vec();
    sorted.sort();
    let us = |d: Duration| (d.as_secs_f64() * 1e7).round() / 10.0;
    serde_json::json!({
        "min": us(sorted[0]),
        "median": us(sorted[sorted.len() / 2]),
        "max": us(sorted[sorted.len() - 1]),
    })
}

/// This process's parent: its pid, name and resident set (kB), from /proc.
fn parent() -> (u32, String, u64) {
    let ppid = std::os::unix::process::parent_id();
    let status = std::fs::read_to_string(format!("/proc/{ppid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    let rss = field("VmRSS:")
        .trim_end_matches(" kB")
        .parse()
        .unwrap_or_default();
    (ppid, field("Name:"), rss)
}

fn alloc_free(ctx: &mut Context<HostProvider>) -> anyhow::Result<Vec<Duration>> {
    let mut times = Vec::with_capacity(ALLOC_FREE);
    for _ in 0..ALLOC_FREE {
        let t = Instant::now();
        let (buf, table) = ctx.allocate_symmetric::<u8>(4096)?;
        std::hint::black_box(&table);
        ctx.free(buf)?;
        times.push(t.elapsed());
    }
    Ok(times)
}

fn main() -> anyhow::Result<()> {
    let collectives: usize = std::env::var("ENGINE_BENCH_COLLECTIVES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
        .max(200);
    let identity = symmem_bootstrap::identify()?;
    let dir = default_rendezvous(&identity)?;
    let start = Instant::now();
    let mut cfg = HostConfig::from_env()?;
    cfg.heap_bytes = 64 << 20;
    let mut ctx = Context::new(HostProvider::new(cfg)?);
    let rendezvous = start.elapsed();
    let rss_before = parent();

    let alloc_first = alloc_free(&mut ctx)?;
    let mut barriers = Vec::with_capacity(collectives);
    for _ in 0..collectives {
        let t = Instant::now();
        ctx.barrier()?;
        barriers.push(t.elapsed());
    }
    let alloc_last = alloc_free(&mut ctx)?;
    let rss_after = parent();
    ctx.finalize()?;

    // Every rank's rendezvous and parent, gathered over a bootstrap of their own.
    let mut bootstrap =
        Bootstrap::join(&identity, 0, &dir.join("report"), Duration::from_secs(60))?;
    let engine = bootstrap.engine();
    let host = nix::unistd::gethostname()?.to_string_lossy().into_owned();
    let mine = serde_json::json!({
        "rendezvous_us": rendezvous.as_micros() as u64,
        "daemon": [host, rss_before.0, rss_before.1, rss_before.2, rss_after.2],
    });
    let op = CollectiveOp {
        seq: 0,
        kind: CollectiveKind::Provider {
            what: "bench report".into(),
        },
    };
    let all = bootstrap.exchange(&op, &serde_json::to_vec(&mine)?, None, 0)?;
    drop(bootstrap);
    if identity.rank != 0 {
        return Ok(());
    }
    let reports: Vec<serde_json::Value> = all
        .payloads
        .iter()
        .map(|p| serde_json::from_slice(p))
        .collect::<Result<_, _>>()?;
    let rendezvous_slowest = reports
        .iter()
        .filter_map(|r| r["rendezvous_us"].as_u64())
        .max();
    // One line per daemon (ranks of a node share theirs): [host, pid, name, kB before, after].
    let mut daemons: Vec<serde_json::Value> = reports.iter().map(|r| r["daemon"].clone()).collect();
    daemons.sort_by_key(|d| (d[0].to_string(), d[1].as_u64()));
    daemons.dedup_by(|a, b| a[0] == b[0] && a[1] == b[1]);
    let first = stats(&barriers[..100]);
    let last = stats(&barriers[collectives - 100..]);
    let ratio = last["median"].as_f64().unwrap_or(0.0) / first["median"].as_f64().unwrap_or(1.0);
    println!(
        "{}",
        serde_json::json!({
            "engine": format!("{engine:?}"),
            "ranks": identity.world_size,
            "collectives": collectives,
            "rendezvous_us": rendezvous_slowest,
            "alloc_free_first100_us": stats(&alloc_first),
            "alloc_free_after_us": stats(&alloc_last),
            "barrier_us": stats(&barriers),
            "barrier_first100_us": first,
            "barrier_last100_us": last,
            "last_over_first": (ratio * 100.0).round() / 100.0,
            "barrier_median_per_tenth_us": barriers
                .chunks(collectives / 10)
                .map(|c| stats(c)["median"].clone())
                .collect::<Vec<_>>(),
            "daemons_kb": daemons,
        })
    );
    Ok(())
}

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
//!
//! Around the barriers each rank also takes its own CPU time (`getrusage(RUSAGE_SELF)`, user
//! plus system, all its threads) and its count of control frames
//! ([`symmem_bootstrap::control_frames`]: the authenticated TCP frames between node leaders,
//! sent plus received; the Unix star within a node is not counted), each per barrier. The line
//! has rank 0's (`rank0_cpu_us_per_barrier`, `rank0_frames_per_barrier`) and, over the other
//! node leaders (the lowest rank of each other host name), their min, median and max
//! (`leaders_cpu_us_per_barrier`, `leaders_frames_per_barrier`; null on one host). Under the
//! star, rank 0 handles 2 (N - 1) frames per barrier for N nodes and every other leader 2.
//! `all_cpu_us_per_barrier` and `all_frames_per_barrier` sum them over every rank: the work a
//! barrier costs the whole job (on a machine with fewer cores than ranks, what its latency
//! follows).

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

/// This process's CPU time so far, user plus system, all its threads.
fn cpu_time() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage writes a whole `rusage` to the pointer it is given, which points to
    // one; RUSAGE_SELF is a valid `who`, so it cannot fail (checked anyway).
    let status = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    assert_eq!(status, 0, "getrusage(RUSAGE_SELF)");
    // SAFETY: initialised by the successful call above.
    let usage = unsafe { usage.assume_init() };
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// `value` rounded to `places` decimals, for the report.
fn round(value: f64, places: i32) -> f64 {
    let scale = 10f64.powi(places);
    (value * scale).round() / scale
}

/// Min, median and max of `values`, or null when there are none.
fn spread(values: &[f64]) -> serde_json::Value {
    if values.is_empty() {
        return serde_json::Value::Null;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    serde_json::json!({
        "min": sorted[0],
        "median": sorted[sorted.len() / 2],
        "max": sorted[sorted.len() - 1],
    })
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
    let (cpu_before, frames_before) = (cpu_time(), symmem_bootstrap::control_frames());
    for _ in 0..collectives {
        let t = Instant::now();
        ctx.barrier()?;
        barriers.push(t.elapsed());
    }
    let (cpu, frames_after) = (cpu_time() - cpu_before, symmem_bootstrap::control_frames());
    let frames =
        (frames_after.sent - frames_before.sent) + (frames_after.received - frames_before.received);
    let cpu_us_per_barrier = round(cpu.as_secs_f64() * 1e6 / collectives as f64, 2);
    let frames_per_barrier = round(frames as f64 / collectives as f64, 3);
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
        "cpu_us_per_barrier": cpu_us_per_barrier,
        "frames_per_barrier": frames_per_barrier,
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
    // The other node leaders: the first rank (the lowest) of each host name but rank 0's.
    let mut hosts_seen = vec![reports[0]["daemon"][0].clone()];
    let mut leaders = Vec::new();
    for report in &reports[1..] {
        let host = &report["daemon"][0];
        if !hosts_seen.contains(host) {
            hosts_seen.push(host.clone());
            leaders.push(report);
        }
    }
    let of_leaders = |field: &str| {
        let values: Vec<f64> = leaders.iter().filter_map(|r| r[field].as_f64()).collect();
        spread(&values)
    };
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
            "rank0_cpu_us_per_barrier": cpu_us_per_barrier,
            "rank0_frames_per_barrier": frames_per_barrier,
            "leaders_cpu_us_per_barrier": of_leaders("cpu_us_per_barrier"),
            "leaders_frames_per_barrier": of_leaders("frames_per_barrier"),
            "all_cpu_us_per_barrier": round(
                reports
                    .iter()
                    .filter_map(|r| r["cpu_us_per_barrier"].as_f64())
                    .sum::<f64>(),
                2
            ),
            "all_frames_per_barrier": round(
                reports
                    .iter()
                    .filter_map(|r| r["frames_per_barrier"].as_f64())
                    .sum::<f64>(),
                3
            ),
        })
    );
    Ok(())
}

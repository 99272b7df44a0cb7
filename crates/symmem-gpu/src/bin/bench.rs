//! One rank of the GPU bench (`cargo xtask bench --provider nvshmem` starts the ranks).
//! Rank 0 measures and prints one JSON object per figure on stdout; the others only take part
//! in the collectives.
//!
//! - `alloc`: collective allocate + free of 4 KiB through `Context` vs the library's raw
//!   malloc + free, median of the pairs, at any rank count;
//! - with `--copy` (needs >= 2 ranks): the translated copy kernel from rank 0's buffer into
//!   rank 1's, against the runtime's device-to-device copy of the same bytes, 64 MiB .. 4 GiB;
//!   and the translated fill kernel into rank 1 against plain local stores.

use std::time::{Duration, Instant};
use symmem::Context;
use symmem_gpu::{Backend, GpuConfig, GpuProvider};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn emit(value: serde_json::Value) {
    println!("{value}");
}

fn main() {
    if let Err(e) = run() {
        eprintln!("symmem-gpu-bench: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let backend = if args.iter().any(|a| a == "rocshmem") {
        Backend::Rocshmem
    } else {
        Backend::Nvshmem
    };
    let copy = args.iter().any(|a| a == "--copy");
    let mut provider = GpuProvider::new(GpuConfig::from_env(backend)?)?;
    let (rank, world) = (
        symmem::SymmetricProvider::rank(&provider),
        symmem::SymmetricProvider::world_size(&provider),
    );
    const PAIRS: usize = 50;

    // Raw library malloc + free (collective), then the same through Context.
    let mut raw = Vec::with_capacity(PAIRS);
    for _ in 0..PAIRS {
        let t = Instant::now();
        provider.raw_malloc_free(4096)?;
        raw.push(t.elapsed());
    }
    let mut ctx = Context::new(provider);
    let mut via_context = Vec::with_capacity(PAIRS);
    for _ in 0..PAIRS {
        let t = Instant::now();
        let (buf, _table) = ctx.allocate_symmetric::<u8>(4096)?;
        ctx.free(buf)?;
        via_context.push(t.elapsed());
    }
    if rank == 0 {
        emit(serde_json::json!({
            "figure": "alloc_free_4KiB", "ranks": world,
            "raw_us": median(raw).as_secs_f64() * 1e6,
            "context_us": median(via_context).as_secs_f64() * 1e6,
        }));
    }

    if copy && world >= 2 {
        const MAX: usize = 4 << 30;
        let (src, table) = ctx.allocate_symmetric::<u8>(MAX)?;
        let (dst, _) = ctx.allocate_symmetric::<u8>(MAX)?;
        ctx.barrier()?;
        if rank == 0 {
            let p = ctx.provider();
            let mut size = 64usize << 20;
            while size <= MAX {
                let reps = ((16usize << 30) / size).clamp(3, 64) as u32;
                // Warm-up of both paths, then the timed runs.
                p.time_translated_copy(&table, src.addr(), 0, dst.addr(), 1, size as u64, 2)?;
                p.time_runtime_copy(src.addr(), dst.addr(), size as u64, 2)?;
                let kernel = p.time_translated_copy(
                    &table,
                    src.addr(),
                    0,
                    dst.addr(),
                    1,
                    size as u64,
                    reps,
                )?;
                let runtime = p.time_runtime_copy(src.addr(), dst.addr(), size as u64, reps)?;
                let gbps = |d: Duration| size as f64 * reps as f64 / d.as_secs_f64() / 1e9;
                emit(serde_json::json!({
                    "figure": "copy", "bytes": size, "reps": reps,
                    "translated_kernel_gbps": gbps(kernel), "runtime_d2d_gbps": gbps(runtime),
                    "ratio": gbps(kernel) / gbps(runtime),
                }));
                size *= 2;
            }
            let count = (1u64 << 30) / 8;
            p.time_fill(Some(&table), dst.addr(), 1, count, 2)?;
            p.time_fill(None, dst.addr(), 0, count, 2)?;
            let reps = 20;
            let peer = p.time_fill(Some(&table), dst.addr(), 1, count, reps)?;
            let local = p.time_fill(None, dst.addr(), 0, count, reps)?;
            let gbps = |d: Duration| (count * 8) as f64 * reps as f64 / d.as_secs_f64() / 1e9;
            emit(serde_json::json!({
                "figure": "store_1GiB", "translated_to_peer_gbps": gbps(peer),
                "plain_local_gbps": gbps(local), "ratio": gbps(peer) / gbps(local),
            }));
        }
        ctx.barrier()?;
        ctx.free(dst)?;
        ctx.free(src)?;
    }
    ctx.finalize()?;
    Ok(())
}

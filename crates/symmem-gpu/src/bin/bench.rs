//! One rank of the GPU bench (`cargo xtask bench --provider nvshmem` starts the ranks).
//! Rank 0 prints one JSON object per figure on stdout; the others take part in the collectives
//! (and, for the all-to-all, in the measurement).
//!
//! Bandwidths are timed on the GPU (events around the launches on the shim's stream), one
//! timing per repetition, and the median is reported; every path is timed the same way.
//!
//! - `alloc_free_4KiB`: collective allocate + free of 4 KiB through `Context` vs the library's
//!   raw malloc + free, median of the pairs (host clock: it is a host-side call), any rank count;
//! - `all_to_all_store` (>= 2 ranks): every rank stores its 64 MiB chunk into every PE's
//!   buffer through the table (the translated copy kernel, one launch per PE), all ranks at
//!   once; the slowest rank's GPU time gives the aggregate bandwidth;
//! - with `--copy` (needs >= 2 ranks), `copy`: from rank 0's buffer into rank 1's, 64 MiB ..
//!   4 GiB: the translated copy kernel, the same kernel untranslated (null table, the peer's
//!   address translated once on the host), the runtime's peer copy into rank 1, and the
//!   runtime's device-to-device copy on rank 0's GPU; `store_1GiB`: the translated fill kernel
//!   into rank 1 against plain local stores.
//!
//! Every figure carries `gpus` (distinct GPUs the ranks use) and `placement`, "one GPU: peers
//! share it" when there is one, so a machine with a GPU per rank gives link figures as is.

// No unsafe code but the one promise the GPU provider asks of `main` (EnvironmentAccess).
#![deny(unsafe_code)]

use std::time::{Duration, Instant};
use symmem::{Context, Error, ProviderKind, SymmetricProvider};
use symmem_gpu::{EnvironmentAccess, Gpu, GpuConfig, GpuProvider};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The median GPU time of `reps` timings of `queue`, after one untimed warm-up.
fn timed(
    gpu: &Gpu,
    reps: usize,
    queue: impl Fn(&Gpu) -> Result<(), Error>,
) -> Result<Duration, Error> {
    queue(gpu)?;
    gpu.synchronize()?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        times.push(gpu.time(&queue)?);
    }
    Ok(median(times))
}

fn gbps(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64().max(1e-12) / 1e9
}

fn emit(value: serde_json::Value) {
    println!("{value}");
}

/// How the ranks sit on GPUs, for every figure.
fn placement(gpus: usize) -> String {
    if gpus == 1 {
        "one GPU: peers share it".into()
    } else {
        format!("{gpus} GPUs")
    }
}

fn main() {
    if let Err(e) = run() {
        eprintln!("symmem-gpu-bench: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    // The provider named among the arguments, else NVSHMEM.
    let backend = args
        .iter()
        .skip(1)
        .find_map(|a| ProviderKind::from_name(a))
        .unwrap_or(ProviderKind::Nvshmem);
    let copy = args.iter().any(|a| a == "--copy");
    // SAFETY: called from main before this process starts any other thread.
    #[allow(unsafe_code)]
    let access = unsafe { EnvironmentAccess::promise() };
    let mut provider = GpuProvider::new(GpuConfig::from_env(backend)?, access)?;
    let (rank, world) = (provider.rank(), provider.world_size());
    let gpus = provider.gpu().distinct_gpus();
    let where_ = placement(gpus);
    const PAIRS: usize = 50;

    // Raw library malloc + free (collective), then the same through Context.
    let mut raw = Vec::with_capacity(PAIRS);
    for _ in 0..PAIRS {
        let t = Instant::now();
        let gpu = provider.gpu_mut();
        let addr = gpu.malloc(4096)?;
        gpu.free(addr)?;
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
            "figure": "alloc_free_4KiB", "ranks": world, "gpus": gpus, "placement": where_,
            "raw_us": median(raw).as_secs_f64() * 1e6,
            "context_us": median(via_context).as_secs_f64() * 1e6,
        }));
    }

    if world >= 2 && !copy {
        all_to_all(&mut ctx, gpus, &where_)?;
    }

    if copy && world >= 2 {
        const MAX: usize = 4 << 30;
        let (src, table) = ctx.allocate_symmetric::<u8>(MAX)?;
        let (dst, _) = ctx.allocate_symmetric::<u8>(MAX)?;
        ctx.barrier()?;
        if rank == 0 {
            let gpu = ctx.provider().gpu();
            let (s, d) = (src.addr(), dst.addr());
            let mut size = 64u64 << 20;
            while size <= MAX as u64 {
                let reps = ((16u64 << 30) / size).clamp(3, 64) as usize;
                let translated = timed(gpu, reps, |g| g.copy(&table, s, 0, d, 1, size))?;
                let untranslated =
                    timed(gpu, reps, |g| g.copy_untranslated(&table, s, d, 1, size))?;
                // A runtime that refuses the peer copy (of memory the SHMEM library mapped)
                // loses that baseline only: it is reported, the other figures go on.
                let peer_runtime = timed(gpu, reps, |g| g.copy_peer_runtime(&table, s, d, 1, size))
                    .map(|took| gbps(size, took));
                let runtime = timed(gpu, reps, |g| g.copy_runtime(s, d, size))?;
                let (t, u, r) = (
                    gbps(size, translated),
                    gbps(size, untranslated),
                    gbps(size, runtime),
                );
                let mut figure = serde_json::json!({
                    "figure": "copy", "bytes": size, "reps": reps, "timing": "gpu events, median",
                    "gpus": gpus, "placement": where_,
                    "translated_kernel_gbps": t, "untranslated_kernel_gbps": u,
                    "runtime_d2d_gbps": r,
                    "translated_over_runtime": t / r, "untranslated_over_runtime": u / r,
                    "translated_over_untranslated": t / u, "ratio": t / r,
                });
                match peer_runtime {
                    Ok(p) => {
                        figure["runtime_peer_gbps"] = p.into();
                        figure["translated_over_peer_runtime"] = (t / p).into();
                    }
                    Err(e) => figure["runtime_peer_error"] = e.to_string().into(),
                }
                emit(figure);
                size *= 2;
            }
            let count = (1u64 << 30) / 8;
            let reps = 20;
            let peer = timed(gpu, reps, |g| g.fill_u64(Some(&table), d, 1, 7, count))?;
            let local = timed(gpu, reps, |g| g.fill_u64(None, d, 0, 7, count))?;
            let (p, l) = (gbps(count * 8, peer), gbps(count * 8, local));
            emit(serde_json::json!({
                "figure": "store_1GiB", "timing": "gpu events, median", "gpus": gpus,
                "placement": where_, "translated_to_peer_gbps": p, "plain_local_gbps": l,
                "ratio": p / l,
            }));
        }
        ctx.barrier()?;
        ctx.free(dst)?;
        ctx.free(src)?;
    }
    ctx.finalize()?;
    Ok(())
}

/// Every rank copies its chunk into every PE's buffer (at offset `rank * chunk`) through the
/// table, all ranks at once; each rank's GPU time reaches rank 0 through symmetric memory.
fn all_to_all(
    ctx: &mut Context<GpuProvider>,
    gpus: usize,
    where_: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    const CHUNK: u64 = 64 << 20;
    const REPS: usize = 10;
    let (rank, world) = (ctx.rank(), ctx.world_size());
    let (src, _) = ctx.allocate_symmetric::<u8>(CHUNK as usize)?;
    let (dst, table) = ctx.allocate_symmetric::<u8>(CHUNK as usize * world)?;
    let (times, times_table) = ctx.allocate_symmetric::<u64>(world)?;
    let at = dst.addr() + rank as u64 * CHUNK;
    let store_all = |g: &Gpu| -> Result<(), Error> {
        for peer in 0..world {
            g.copy(&table, src.addr(), rank, at, peer, CHUNK)?;
        }
        Ok(())
    };
    let mut slowest = Vec::with_capacity(REPS);
    for rep in 0..=REPS {
        ctx.barrier()?;
        let took = ctx.provider().gpu().time(store_all)?;
        // Rank 0 gathers every rank's time in its copy of `times`.
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        ctx.store_u64(&times_table, times.addr_of(rank), 0, &[ns])?;
        ctx.barrier()?;
        if rank == 0 && rep > 0 {
            let all = ctx.read(&times)?;
            slowest.push(Duration::from_nanos(all.into_iter().max().unwrap_or(0)));
        }
    }
    if rank == 0 {
        let took = median(slowest);
        let total = CHUNK * (world * world) as u64;
        emit(serde_json::json!({
            "figure": "all_to_all_store", "ranks": world, "chunk_bytes": CHUNK, "reps": REPS,
            "timing": "gpu events, slowest rank, median", "gpus": gpus, "placement": where_,
            "aggregate_gbps": gbps(total, took),
            "per_rank_gbps": gbps(CHUNK * world as u64, took),
        }));
    }
    ctx.barrier()?;
    ctx.free(times)?;
    ctx.free(dst)?;
    ctx.free(src)?;
    Ok(())
}

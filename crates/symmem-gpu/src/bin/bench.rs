//! One rank of the GPU bench (`cargo xtask bench --provider nvshmem` starts the ranks).
//! Rank 0 prints one JSON object per figure on stdout; the others take part in the collectives
//! (and, for the all-to-all, in the measurement).
//!
//! Bandwidths are timed on the GPU (events around the launches on the shim's stream), one
//! timing per repetition, and the median is reported; every path is timed the same way.
//!
//! - `alloc_free_4KiB`: collective allocate + free of 4 KiB through `Context` vs the library's
//!   raw malloc + free (through a sibling provider, so the two alternate pair by pair and
//!   drift of the machine reaches both alike), median and minimum of the pairs (host clock: it
//!   is a host-side call), any rank count;
//! - `memory_after_free`: the GPU's free memory (device-wide) before and after a loop of 1 GiB
//!   allocate + free through `Context`, and after finalize (once the other PEs' finalize shows:
//!   the figure is device-wide): what free gives back;
//! - `all_to_all_store` (>= 2 ranks): every rank stores its 64 MiB chunk into every PE's
//!   buffer through the table (the translated copy kernel, one launch per PE), all ranks at
//!   once, repeated so one timing moves 256 GiB in all; the slowest rank's GPU time of each
//!   repetition gives the aggregate, reported as min / median / max over the repetitions, with
//!   the same figure for one pass per timing (the old, unstable timing) beside it;
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
use symmem::{Context, Error, PeerTable, ProviderKind, SymmetricProvider};
use symmem_gpu::{EnvironmentAccess, Gpu, GpuConfig, GpuProvider};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
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
    let provider = GpuProvider::new(GpuConfig::from_env(backend)?, access)?;
    let (rank, world) = (provider.rank(), provider.world_size());
    let gpus = provider.gpu().distinct_gpus();
    let where_ = placement(gpus);
    // The raw library's malloc + free go through a sibling (the same library, no order check,
    // no tables), so they can alternate with Context's.
    let mut raw_side = provider.sibling("bench-raw", provider.topology().node(rank))?;
    let mut ctx = Context::new(provider);
    alloc_free(&mut ctx, raw_side.gpu_mut(), gpus, &where_)?;
    drop(raw_side);

    if !copy {
        memory_after_free(&mut ctx, gpus, &where_)?;
    }
    if world >= 2 && !copy {
        all_to_all(&mut ctx, gpus, &where_)?;
    }

    if copy && world >= 2 {
        copy_figures(&mut ctx, gpus, &where_)?;
    }
    ctx.finalize()?;
    if !copy {
        memory_after_finalize(&ctx, rank, world, gpus, &where_);
    }
    Ok(())
}

/// With `--copy`: rank 0 measures the copies and the 1 GiB store into rank 1 over two
/// symmetric buffers of 4 GiB; every rank takes part in the allocation and the barriers.
fn copy_figures(
    ctx: &mut Context<GpuProvider>,
    gpus: usize,
    where_: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    const MAX: usize = 4 << 30;
    let (src, table) = ctx.allocate_symmetric::<u8>(MAX)?;
    let (dst, _) = ctx.allocate_symmetric::<u8>(MAX)?;
    ctx.barrier()?;
    if ctx.rank() == 0 {
        let gpu = ctx.provider().gpu();
        let (s, d) = (src.addr(), dst.addr());
        let mut size = 64u64 << 20;
        while size <= MAX as u64 {
            copy_figure(gpu, &table, s, d, size, gpus, where_)?;
            size *= 2;
        }
        store_figure(gpu, &table, d, gpus, where_)?;
    }
    ctx.barrier()?;
    ctx.free(dst)?;
    ctx.free(src)?;
    Ok(())
}

/// The `copy` figure for one size: from `s` on rank 0 into `d` on rank 1, the four ways.
fn copy_figure(
    gpu: &Gpu,
    table: &PeerTable,
    s: u64,
    d: u64,
    size: u64,
    gpus: usize,
    where_: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let reps = ((16u64 << 30) / size).clamp(3, 64) as usize;
    let translated = timed(gpu, reps, |g| g.copy(table, s, 0, d, 1, size))?;
    let untranslated = timed(gpu, reps, |g| g.copy_untranslated(table, s, d, 1, size))?;
    // A runtime that refuses the peer copy (of memory the SHMEM library mapped)
    // loses that baseline only: it is reported, the other figures go on.
    let peer_runtime = timed(gpu, reps, |g| g.copy_peer_runtime(table, s, d, 1, size))
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
    Ok(())
}

/// The `store_1GiB` figure: the translated fill kernel into rank 1 against plain local stores.
fn store_figure(
    gpu: &Gpu,
    table: &PeerTable,
    d: u64,
    gpus: usize,
    where_: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let count = (1u64 << 30) / 8;
    let reps = 20;
    let peer = timed(gpu, reps, |g| g.fill_u64(Some(table), d, 1, 7, count))?;
    let local = timed(gpu, reps, |g| g.fill_u64(None, d, 0, 7, count))?;
    let (p, l) = (gbps(count * 8, peer), gbps(count * 8, local));
    emit(serde_json::json!({
        "figure": "store_1GiB", "timing": "gpu events, median", "gpus": gpus,
        "placement": where_, "translated_to_peer_gbps": p, "plain_local_gbps": l,
        "ratio": p / l,
    }));
    Ok(())
}

/// What finalize gave back (the library's heap goes with the library), once the figure
/// settles: it is device-wide, and peers on this GPU finalise at their own pace. Every rank
/// waits for it; rank 0 reports it.
fn memory_after_finalize(
    ctx: &Context<GpuProvider>,
    rank: usize,
    world: usize,
    gpus: usize,
    where_: &str,
) {
    let after = settled_free_memory(ctx.provider().gpu());
    if rank == 0 {
        let mut figure = serde_json::json!({
            "figure": "memory_after_finalize", "ranks": world, "gpus": gpus,
            "placement": where_,
        });
        match after {
            Ok(free) => figure["free_gib"] = gib(free).into(),
            Err(e) => figure["error"] = e.to_string().into(),
        }
        emit(figure);
    }
}

/// The GPU's free memory once it has not risen for 200 ms (at most 5 s of polling).
fn settled_free_memory(gpu: &Gpu) -> Result<u64, Error> {
    let start = Instant::now();
    let mut best = gpu.device_memory()?.0;
    let mut since = Instant::now();
    while since.elapsed() < Duration::from_millis(200) && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
        let free = gpu.device_memory()?.0;
        if free > best {
            best = free;
            since = Instant::now();
        }
    }
    Ok(best)
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// Collective allocate + free of 4 KiB: the library's raw calls (through `raw`, a sibling's
/// GPU side) and `Context`'s alternate pair by pair, which goes first swapped each time, so
/// both see the same machine. With several PEs on one GPU the library's call waits for the
/// GPU's time slices of the other processes and its time falls into a few modes; pairs taken
/// in blocks can land in different modes, pairs side by side cannot.
fn alloc_free(
    ctx: &mut Context<GpuProvider>,
    raw: &mut Gpu,
    gpus: usize,
    where_: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    const PAIRS: usize = 100;
    let raw_pair = |raw: &mut Gpu| -> Result<Duration, Error> {
        let t = Instant::now();
        let addr = raw.malloc(4096)?;
        raw.free(addr)?;
        Ok(t.elapsed())
    };
    let ctx_pair = |ctx: &mut Context<GpuProvider>| -> Result<Duration, Error> {
        let t = Instant::now();
        let (buf, _table) = ctx.allocate_symmetric::<u8>(4096)?;
        ctx.free(buf)?;
        Ok(t.elapsed())
    };
    // Warm-up: the first calls map the heap and load code.
    for _ in 0..3 {
        raw_pair(raw)?;
        ctx_pair(ctx)?;
    }
    let (mut raw_t, mut ctx_t) = (Vec::new(), Vec::new());
    for i in 0..PAIRS {
        if i % 2 == 0 {
            raw_t.push(raw_pair(raw)?);
            ctx_t.push(ctx_pair(ctx)?);
        } else {
            ctx_t.push(ctx_pair(ctx)?);
            raw_t.push(raw_pair(raw)?);
        }
    }
    if ctx.rank() == 0 {
        let (raw_min, ctx_min) = (raw_t.iter().min().copied(), ctx_t.iter().min().copied());
        let (raw_med, ctx_med) = (us(median(raw_t)), us(median(ctx_t)));
        // The goal: within 5 % of the library, or 2 us where that is larger.
        let allowed = (raw_med * 0.05).max(2.0);
        emit(serde_json::json!({
            "figure": "alloc_free_4KiB", "ranks": ctx.world_size(), "gpus": gpus,
            "placement": where_, "pairs": PAIRS,
            "timing": "host clock, median of pairs, raw and Context pair by pair, order alternating",
            "raw_us": raw_med, "context_us": ctx_med,
            "raw_min_us": raw_min.map(us), "context_min_us": ctx_min.map(us),
            "ratio": ctx_med / raw_med, "allowed_us": allowed,
            "within_goal": ctx_med - raw_med <= allowed,
        }));
    }
    Ok(())
}

/// The GPU's free memory before and after a loop of 1 GiB allocate + free through `Context`
/// on every rank. The figure is device-wide: with peers on one GPU it counts all of them.
fn memory_after_free(
    ctx: &mut Context<GpuProvider>,
    gpus: usize,
    where_: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    const BYTES: usize = 1 << 30;
    const LOOPS: usize = 3;
    let world = ctx.world_size();
    ctx.barrier()?;
    let (before, total) = ctx.provider().gpu().device_memory()?;
    ctx.barrier()?;
    let mut failed = None;
    for _ in 0..LOOPS {
        match ctx.allocate_symmetric::<u8>(BYTES) {
            Ok((buf, _)) => ctx.free(buf)?,
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    ctx.barrier()?;
    let (after, _) = ctx.provider().gpu().device_memory()?;
    if ctx.rank() == 0 {
        let mut figure = serde_json::json!({
            "figure": "memory_after_free", "ranks": world, "gpus": gpus, "placement": where_,
            "bytes": BYTES, "loops": LOOPS, "total_gib": gib(total),
            "free_before_gib": gib(before), "free_after_gib": gib(after),
            "kept_gib": gib(before.saturating_sub(after)),
            "kept_per_pe_gib": gib(before.saturating_sub(after)) * gpus as f64 / world as f64,
        });
        if let Some(e) = failed {
            figure["error"] = format!(
                "{e}; the heap must hold 1 GiB: raise {}",
                symmem::settings::GPU_HEAP_SIZE.name
            )
            .into();
        }
        emit(figure);
    }
    Ok(())
}

/// Every rank copies its chunk into every PE's buffer (at offset `rank * chunk`) through the
/// table, all ranks at once; each rank's GPU time reaches rank 0 through symmetric memory.
///
/// Why one pass per timing is not a figure: with several processes on one GPU, the GPU
/// time-slices between them, and one pass (2 PEs: 256 MiB, 0.1 ms) is shorter than a slice, so
/// each rank's events span whatever the other processes ran in between, and the figure moves
/// 2x between runs. Each timing therefore repeats the pass until it moves 256 GiB (over 100 ms,
/// many slices: a slice more or less for one rank is a few %), after a barrier on every rank; the slowest rank's time of each repetition
/// counts, and min / median / max over the repetitions show the spread. The one-pass figure is
/// reported beside it to show the difference.
fn all_to_all(
    ctx: &mut Context<GpuProvider>,
    gpus: usize,
    where_: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    const CHUNK: u64 = 64 << 20;
    const REPS: usize = 12;
    const PER_TIMING: u64 = 256 << 30;
    let (rank, world) = (ctx.rank(), ctx.world_size());
    let (src, _) = ctx.allocate_symmetric::<u8>(CHUNK as usize)?;
    let (dst, table) = ctx.allocate_symmetric::<u8>(CHUNK as usize * world)?;
    let (times, times_table) = ctx.allocate_symmetric::<u64>(world)?;
    let at = dst.addr() + rank as u64 * CHUNK;
    let per_pass = CHUNK * (world * world) as u64;
    let long_passes = (PER_TIMING / per_pass).max(1) as usize;
    for passes in [long_passes, 1] {
        let store_all = |g: &Gpu| -> Result<(), Error> {
            for _ in 0..passes {
                for peer in 0..world {
                    g.copy(&table, src.addr(), rank, at, peer, CHUNK)?;
                }
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
            slowest.sort();
            let total = per_pass * passes as u64;
            let (fast, mid, slow) = (slowest[0], slowest[REPS / 2], slowest[REPS - 1]);
            let spread = slow.as_secs_f64() / fast.as_secs_f64().max(1e-12);
            let mut figure = serde_json::json!({
                "figure": if passes == 1 { "all_to_all_store_one_pass" } else { "all_to_all_store" },
                "ranks": world, "chunk_bytes": CHUNK, "passes": passes, "bytes_per_timing": total,
                "reps": REPS,
                "timing": "gpu events per rank after a barrier, slowest rank per repetition",
                "gpus": gpus, "placement": where_,
                "aggregate_gbps": gbps(total, mid),
                "aggregate_gbps_min": gbps(total, slow),
                "aggregate_gbps_max": gbps(total, fast),
                "per_rank_gbps": gbps(total / world as u64, mid),
                "ms_min": fast.as_secs_f64() * 1e3, "ms_median": mid.as_secs_f64() * 1e3,
                "ms_max": slow.as_secs_f64() * 1e3, "spread": spread,
            });
            if spread > 1.10 {
                figure["note"] = format!(
                    "repetitions differ by {:.0} % (> 10 %): {}",
                    (spread - 1.0) * 100.0,
                    if gpus < world {
                        "the PEs time-slice a shared GPU; timings this short span other \
                         processes' slices"
                    } else {
                        "the GPUs or their links were not quiet"
                    }
                )
                .into();
            }
            emit(figure);
        }
    }
    ctx.barrier()?;
    ctx.free(times)?;
    ctx.free(dst)?;
    ctx.free(src)?;
    Ok(())
}

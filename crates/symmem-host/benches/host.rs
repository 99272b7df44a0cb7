//! `cargo bench -p symmem-host`
//!
//! - `alloc_free/{raw,context}/N`: one collective allocate + free pair on N ranks, through the
//!   provider's raw malloc/free and through `Context::allocate_symmetric` + `free`. Their
//!   difference is what the core adds (table, registry, order bookkeeping). Ranks 1..N are
//!   threads of the bench process, each with its own heap and its own socket to rank 0: the
//!   collective path is the same one separate processes take.
//! - `translate/*`: host-side reference translation, ns per call.
//! - `copy/*`: 64 MiB into a peer's heap through a translated pointer, against memcpy between
//!   two buffers of this process. The peer is a real second process.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};
use symmem::settings::{Audience, Setting};
use symmem::{CollectiveKind, CollectiveOp, Context, SymmetricProvider};
use symmem_host::{HostConfig, HostProvider};

/// Marks the peer process this bench starts for its copy bench.
const BENCH_COPY_PEER: Setting<PathBuf> = Setting {
    name: "SYMMEM_BENCH_COPY_PEER",
    doc: "set by symmem-host's bench on the peer process it starts: the rendezvous folder of its copy bench (do not set it)",
    default: "this process is the bench itself",
    expected: "a folder path",
    audience: Audience::Development,
    parse: |text| Some(PathBuf::from(text)),
};

const COPY_BYTES: usize = 64 << 20;
const ALLOC_BYTES: usize = 4096;

fn config(rank: usize, world_size: usize, dir: &Path, heap_bytes: u64) -> HostConfig {
    let mut cfg = HostConfig::for_rank(rank, world_size, dir);
    cfg.heap_bytes = heap_bytes;
    cfg.timeout = Duration::from_secs(120);
    cfg
}

/// One rank's two ways of allocating: a bare provider and a context (separate rendezvous).
struct RankPair {
    raw: HostProvider,
    seq: u64,
    ctx: Context<HostProvider>,
}

impl RankPair {
    fn open(rank: usize, world: usize, dir: &Path) -> Self {
        let raw = HostProvider::new(config(rank, world, &dir.join("raw"), 256 << 20)).unwrap();
        let ctx = Context::new(
            HostProvider::new(config(rank, world, &dir.join("ctx"), 256 << 20)).unwrap(),
        );
        Self { raw, seq: 1, ctx }
    }

    fn raw_pair(&mut self) {
        let malloc = CollectiveOp {
            seq: self.seq,
            kind: CollectiveKind::Malloc {
                bytes: ALLOC_BYTES as u64,
            },
        };
        let addr = self.raw.malloc(ALLOC_BYTES as u64, &malloc).unwrap();
        let free = CollectiveOp {
            seq: self.seq + 1,
            kind: CollectiveKind::Free {
                allocation: self.seq,
                bytes: ALLOC_BYTES as u64,
            },
        };
        self.raw.free(addr, &free).unwrap();
        self.seq += 2;
    }

    fn context_pair(&mut self) {
        let (buf, table) = self.ctx.allocate_symmetric::<u8>(ALLOC_BYTES).unwrap();
        black_box(&table);
        self.ctx.free(buf).unwrap();
    }
}

enum Command {
    Raw(u64),
    Context(u64),
}

fn alloc_free(c: &mut Criterion) {
    let mut group = c.benchmark_group("alloc_free");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(3));
    for world in [1usize, 2, 4, 8] {
        let dir = tempfile::tempdir().unwrap();
        let (senders, helpers): (Vec<_>, Vec<_>) = (1..world)
            .map(|rank| {
                let (tx, rx) = mpsc::channel::<Command>();
                let dir = dir.path().to_path_buf();
                let helper = thread::spawn(move || {
                    let mut pair = RankPair::open(rank, world, &dir);
                    for command in rx {
                        match command {
                            Command::Raw(n) => (0..n).for_each(|_| pair.raw_pair()),
                            Command::Context(n) => (0..n).for_each(|_| pair.context_pair()),
                        }
                    }
                });
                (tx, helper)
            })
            .unzip();
        let mut me = RankPair::open(0, world, dir.path());
        group.bench_function(BenchmarkId::new("raw", world), |b| {
            b.iter_custom(|iters| {
                senders
                    .iter()
                    .for_each(|tx| tx.send(Command::Raw(iters)).unwrap());
                let start = Instant::now();
                (0..iters).for_each(|_| me.raw_pair());
                start.elapsed()
            })
        });
        group.bench_function(BenchmarkId::new("context", world), |b| {
            b.iter_custom(|iters| {
                senders
                    .iter()
                    .for_each(|tx| tx.send(Command::Context(iters)).unwrap());
                let start = Instant::now();
                (0..iters).for_each(|_| me.context_pair());
                start.elapsed()
            })
        });
        drop(senders);
        helpers.into_iter().for_each(|h| h.join().unwrap());
    }
    group.finish();
}

fn translate(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let mut ctx = Context::new(HostProvider::new(config(0, 1, dir.path(), 1 << 20)).unwrap());
    let (buf, map) = ctx.allocate_symmetric_map::<u64>(1024).unwrap();
    let mut group = c.benchmark_group("translate");
    let addr = buf.addr_of(512);
    group.bench_function("address_map_checked", |b| {
        b.iter(|| {
            map.translate(black_box(addr), black_box(0), black_box(0))
                .unwrap()
        })
    });
    group.bench_function("table_kernel_style", |b| {
        b.iter(|| {
            map.table
                .translate(black_box(addr), black_box(0), black_box(0))
                .unwrap()
        })
    });
    group.finish();
    ctx.free(buf).unwrap();
}

/// The copy peer: maps rank 0's heap, then waits in a barrier until rank 0 is done.
fn copy_peer(dir: PathBuf) {
    let mut ctx = Context::new(HostProvider::new(config(1, 2, &dir, 256 << 20)).unwrap());
    let (buf, _) = ctx.allocate_symmetric::<u8>(COPY_BYTES).unwrap();
    ctx.barrier().unwrap();
    ctx.free(buf).unwrap();
}

fn copy(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let mut peer = std::process::Command::new(std::env::current_exe().unwrap())
        .env(BENCH_COPY_PEER.name, dir.path())
        .spawn()
        .unwrap();
    let mut ctx = Context::new(HostProvider::new(config(0, 2, dir.path(), 256 << 20)).unwrap());
    let (buf, table) = ctx.allocate_symmetric::<u8>(COPY_BYTES).unwrap();
    ctx.write(&buf, &vec![7u8; COPY_BYTES]).unwrap();
    let src = vec![7u8; COPY_BYTES];
    let mut dst = vec![0u8; COPY_BYTES];
    let mut group = c.benchmark_group("copy");
    group
        .sample_size(20)
        .throughput(Throughput::Bytes(COPY_BYTES as u64));
    group.bench_function("memcpy_in_process_64MiB", |b| {
        b.iter(|| dst.copy_from_slice(black_box(&src)))
    });
    group.bench_function("translated_to_peer_process_64MiB", |b| {
        b.iter(|| {
            ctx.copy_bytes(&table, buf.addr(), 0, buf.addr(), 1, COPY_BYTES as u64)
                .unwrap()
        })
    });
    group.finish();
    ctx.barrier().unwrap();
    ctx.free(buf).unwrap();
    assert!(peer.wait().unwrap().success(), "copy peer failed");
}

criterion_group!(benches, alloc_free, translate, copy);

fn main() {
    if let Some(dir) = BENCH_COPY_PEER.read_path() {
        copy_peer(dir);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}

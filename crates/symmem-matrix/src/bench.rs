//! `symmem-matrix bench`: the GPU bench at several rank counts, its ranks started through the
//! job seam ([`Launcher`]) as the matrix's are.

use crate::programs::{BENCH, shim_library};
use anyhow::{Context, bail};
use clap::builder::TypedValueParser;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use symmem::settings::{GPU_HEAP_SIZE, SHIM_LIB};
use symmem::{ProviderKind, count_ranks};
use symmem_launch::{
    EXIT_INTERRUPTED, LaunchSpec, Launcher, Outcome, OutputLine, Stream, print_line,
};

/// Measure a GPU provider: allocate + free latency against the library's raw malloc at each
/// rank count, an all-to-all store through the table at each count of 2 or more, and at 2 ranks
/// the copy into a peer (64 MiB .. 4 GiB) by the translated copy kernel, the same kernel
/// untranslated, the runtime's peer copy and its device-to-device copy, and translated stores
/// into a peer against plain local stores. Bandwidths are GPU-timed (events), medians. The
/// figures say how many GPUs the ranks used ("one GPU: peers share it" when one).
///
/// (The host provider's benches are `cargo bench -p symmem-host`.)
///
/// Examples:
///   cargo xtask bench --provider nvshmem       # from a checkout: builds, then runs this
///   symmem-matrix bench --provider nvshmem --shim-lib ./libsymmem_shim_nvshmem.so
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// GPU provider to measure.
    #[arg(long, value_parser = gpu_provider())]
    provider: ProviderKind,
    /// Rank counts for the allocation latency (each a separate run).
    #[arg(long, default_value = "1,2,4,8", value_delimiter = ',')]
    ranks: Vec<usize>,
    /// The shim library (default: $SYMMEM_SHIM_LIB, else the one next to the bench binary;
    /// `cargo xtask bench` passes what `cargo xtask build-shim` built under target/shim/).
    #[arg(long, value_name = "PATH")]
    shim_lib: Option<PathBuf>,
    /// The symmem-gpu-bench binary to run (default: the one next to symmem-matrix).
    #[arg(long, value_name = "PATH")]
    bench_binary: Option<PathBuf>,
    /// Where to write the figures as JSON lines (default: bench/<backend>.jsonl in the current
    /// folder; `cargo xtask bench` passes target/bench/<backend>.jsonl).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

/// Parses a GPU provider's name: `--help` lists exactly the providers that have a shim.
fn gpu_provider() -> impl TypedValueParser<Value = ProviderKind> {
    clap::builder::PossibleValuesParser::new(ProviderKind::GPU.map(ProviderKind::name))
        .map(|name| ProviderKind::from_name(&name).expect("one of the GPU providers' names"))
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let backend = args.provider;
    if args
        .ranks
        .iter()
        .any(|&r| r == 0 || r > symmem_launch::MAX_RANKS)
    {
        bail!(
            "--ranks takes counts from 1 to {}",
            symmem_launch::MAX_RANKS
        );
    }
    let binary = BENCH.locate(args.bench_binary.as_deref())?;
    let shim = shim_library(args.shim_lib.as_deref(), backend, &binary)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("bench").join(format!("{}.jsonl", backend.name())));
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut figures = Vec::new();
    let mut runs: Vec<(usize, Vec<&str>, &str)> = args
        .ranks
        .iter()
        // The memory figure allocates 1 GiB at once.
        .map(|&r| (r, vec![backend.name()], "2G"))
        .collect();
    // Two 4 GiB buffers per PE for the copy sweep.
    runs.push((2, vec![backend.name(), "--copy"], "9G"));
    // The figures are one host's (its GPUs, peers on the same node): symmem's own launcher
    // starts the ranks there.
    let launcher = Launcher::Local;
    let mut failed = false;
    let mut interrupted = false;
    for (ranks, bench_args, heap) in runs {
        let what = format!("{} {}", count_ranks(ranks), bench_args[1..].join(" "));
        let what = what.trim_end();
        eprintln!("bench: {what}");
        let spec = LaunchSpec::new(&binary, ranks)
            .args(bench_args)
            .env(SHIM_LIB.name, &shim)
            .env(GPU_HEAP_SIZE.name, heap)
            .timeout(std::time::Duration::from_secs(500));
        let report = launcher.launch(&spec, &mut |line: &OutputLine| {
            if line.rank == Some(0) && line.stream == Stream::Stdout && line.text.starts_with('{') {
                eprintln!("  {}", line.text);
                figures.push(line.text.clone());
            } else {
                print_line(line);
            }
        })?;
        if !report.success() {
            eprintln!("bench run with {what} failed: {report}");
            failed = true;
        }
        if matches!(report.outcome, Outcome::Interrupted { .. }) {
            eprintln!("interrupted: not running the remaining benches");
            interrupted = true;
            break;
        }
    }
    let mut file =
        std::fs::File::create(&out).with_context(|| format!("writing {}", out.display()))?;
    for figure in &figures {
        writeln!(file, "{figure}")?;
    }
    eprintln!("{} figures written to {}", figures.len(), out.display());
    Ok(if interrupted {
        // As symmem-run and `symmem-matrix test`.
        ExitCode::from(EXIT_INTERRUPTED as u8)
    } else if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

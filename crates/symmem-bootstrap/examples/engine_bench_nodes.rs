//! Runs `engine_bench` on the emulated nodes (`symmem-cluster`, as root) under mpirun or srun,
//! and prints its line with the machine's load (not a test):
//!
//! ```sh
//! cargo build --release -p symmem-bootstrap --example engine_bench --example engine_bench_nodes
//! target/release/examples/engine_bench_nodes mpirun 2 4 10000   # launcher, nodes, per node, collectives
//! target/release/examples/engine_bench_nodes mpirun 8 1 2000 KEY=VALUE,KEY2=VALUE2
//! ```
//!
//! The optional fifth argument is extra environment for every rank, `KEY=VALUE` pairs separated
//! by commas (a setting that picks the leaders' topology, say), so that one session can run
//! the same bench under different settings.

use anyhow::bail;
use std::time::Duration;
use symmem_cluster::Cluster;
use symmem_launch::{LaunchSpec, Launcher, Layout, Stream};

/// The pairs of `KEY=VALUE,KEY2=VALUE2` (empty: none); a pair without `=` or with an empty
/// key is an error.
fn extra_env(list: &str) -> anyhow::Result<Vec<(&str, &str)>> {
    list.split(',')
        .filter(|pair| !pair.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((key, value)) if !key.is_empty() => Ok((key, value)),
            _ => bail!("{pair:?} is not KEY=VALUE (the fifth argument is KEY=VALUE,KEY2=VALUE2)"),
        })
        .collect()
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (launcher, nodes, per_node, collectives, env) = match args.as_slice() {
        [l, n, p, c] => (l, n, p, c, None),
        [l, n, p, c, env] => (l, n, p, c, Some(env.as_str())),
        _ => bail!(
            "usage: engine_bench_nodes mpirun|srun NODES RANKS_PER_NODE COLLECTIVES \
             [KEY=VALUE,...]"
        ),
    };
    let (nodes, per_node): (usize, usize) = (nodes.parse()?, per_node.parse()?);
    let env = extra_env(env.unwrap_or(""))?;
    let bench = std::env::current_exe()?.with_file_name("engine_bench");
    let cluster = Cluster::up(nodes)?;
    let mut spec = LaunchSpec::new(cluster.visible(&bench)?, 0)
        .layout(Layout::even(nodes, per_node))
        .env("ENGINE_BENCH_COLLECTIVES", collectives)
        .timeout(Duration::from_secs(580));
    for (key, value) in env {
        spec = spec.env(key, value);
    }
    let slurm = match launcher.as_str() {
        "srun" => Some(cluster.slurm()?),
        "mpirun" => None,
        other => bail!("unknown launcher {other}: mpirun or srun"),
    };
    let launcher = match &slurm {
        Some(slurm) => Launcher::Srun(slurm.launcher()),
        None => Launcher::Mpirun(cluster.mpirun()),
    };
    let load = || std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load_before = load();
    let report = launcher.launch(&spec, &mut |line| match (line.rank, line.stream) {
        (Some(0), Stream::Stdout) => println!("{}", line.text),
        _ => eprintln!("{line}"),
    })?;
    println!(
        "load before: {} after: {}",
        load_before.trim(),
        load().trim()
    );
    drop(slurm);
    drop(cluster.down());
    if !report.success() {
        bail!("{report}");
    }
    Ok(())
}

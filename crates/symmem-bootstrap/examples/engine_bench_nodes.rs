//! Runs `engine_bench` on the emulated nodes (`symmem-cluster`, as root) under mpirun or srun,
//! and prints its line with the machine's load (not a test):
//!
//! ```sh
//! cargo build --release -p symmem-bootstrap --example engine_bench --example engine_bench_nodes
//! target/release/examples/engine_bench_nodes mpirun 2 4 10000   # launcher, nodes, per node, collectives
//! ```

use anyhow::bail;
use std::time::Duration;
use symmem_cluster::Cluster;
use symmem_launch::{LaunchSpec, Launcher, Layout, Stream};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [launcher, nodes, per_node, collectives] = args.as_slice() else {
        bail!("usage: engine_bench_nodes mpirun|srun NODES RANKS_PER_NODE COLLECTIVES");
    };
    let (nodes, per_node): (usize, usize) = (nodes.parse()?, per_node.parse()?);
    let bench = std::env::current_exe()?.with_file_name("engine_bench");
    let cluster = Cluster::up(nodes)?;
    let spec = LaunchSpec::new(cluster.visible(&bench)?, 0)
        .layout(Layout::even(nodes, per_node))
        .env("ENGINE_BENCH_COLLECTIVES", collectives)
        .timeout(Duration::from_secs(580));
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

//! The rank binary inside a Slurm allocation, started by hand with the variables each launcher
//! sets (no launcher needed): the innermost launcher's own count decides whether the job spans
//! nodes (M2), and `srun` across nodes without PMIx stops at once, naming `--mpi=pmix`.

use std::process::{Command, Output, Stdio};
use symmem::settings::{BOOTSTRAP, COLLECTIVE_TIMEOUT, RENDEZVOUS};

/// What every shell of a two-node allocation (`salloc -N2`, a batch script) holds.
const TWO_NODE_ALLOCATION: &[(&str, &str)] = &[
    ("SLURM_JOB_ID", "77"),
    ("SLURM_NNODES", "2"),
    ("SLURM_JOB_NUM_NODES", "2"),
    ("SLURM_TASKS_PER_NODE", "2(x2)"),
];

/// The rank binary with `vars` and none of the launchers' variables of this test's own
/// environment, running check 1 only.
fn rank(vars: &[(&str, String)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_symmem-conformance"));
    cmd.args(["--check", "1"])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env(COLLECTIVE_TIMEOUT.name, "20s")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in TWO_NODE_ALLOCATION {
        cmd.env(k, v);
    }
    for (k, v) in vars {
        cmd.env(k, v);
    }
    cmd
}

fn show(out: &Output) -> String {
    format!(
        "{}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// symmem-run's variables for rank `rank` of 2 on this host, meeting in `dir`.
fn symmem_run_rank(rank: usize, dir: &std::path::Path) -> Vec<(&'static str, String)> {
    vec![
        ("RANK", rank.to_string()),
        ("LOCAL_RANK", rank.to_string()),
        ("WORLD_SIZE", "2".into()),
        ("LOCAL_WORLD_SIZE", "2".into()),
        ("TORCHELASTIC_RUN_ID", "alloc-test".into()),
        ("MASTER_ADDR", "127.0.0.1".into()),
        ("MASTER_PORT", "29500".into()),
        (RENDEZVOUS.name, dir.to_string_lossy().into_owned()),
    ]
}

#[test]
fn a_one_host_job_inside_a_two_node_allocation_runs_on_the_unix_star() {
    for bootstrap in ["auto", "unix"] {
        let dir = tempfile::tempdir().unwrap();
        let ranks: Vec<_> = (0..2)
            .map(|r| {
                let mut vars = symmem_run_rank(r, dir.path());
                vars.push((BOOTSTRAP.name, bootstrap.into()));
                rank(&vars).spawn().unwrap()
            })
            .collect();
        for (r, child) in ranks.into_iter().enumerate() {
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "{bootstrap}, rank {r}: {}",
                show(&out)
            );
            assert!(
                String::from_utf8_lossy(&out.stdout).contains("\"status\":\"pass\""),
                "{}",
                show(&out)
            );
        }
    }
}

#[test]
fn srun_across_nodes_without_pmix_stops_at_once_naming_the_option() {
    let dir = tempfile::tempdir().unwrap();
    let vars = [
        ("SLURM_PROCID", "1".to_string()),
        ("SLURM_NTASKS", "2".into()),
        ("SLURM_LOCALID", "0".into()),
        ("SLURM_NODEID", "1".into()),
        ("SLURM_STEP_ID", "0".into()),
        ("SLURM_STEP_NUM_NODES", "2".into()),
        ("SLURM_STEP_TASKS_PER_NODE", "1(x2)".into()),
        (RENDEZVOUS.name, dir.path().to_string_lossy().into_owned()),
    ];
    // Alone, it would wait for rank 0 until the collective timeout if it did not stop first.
    let out = rank(&vars).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(
        stderr.contains("add --mpi=pmix to srun")
            && stderr.contains("Slurm says 1 of its 2 ranks run on this node"),
        "{stderr}"
    );
}

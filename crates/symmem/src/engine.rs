//! Which control-plane engine a job's ranks meet through: symmem's own Unix-socket star (one
//! host) or the PMIx server the launcher started (any number of hosts). [`choose_engine`] is a
//! pure function of the [`BOOTSTRAP`](crate::settings::BOOTSTRAP) setting, the rank identity
//! and the launcher's variables, so every decision it makes is testable without a launcher.

use crate::launcher::{Launcher, in_apptainer, pmix_present};
use crate::rank_env::RankIdentity;
use crate::settings::BOOTSTRAP;

pub use crate::bootstrap_choice::BootstrapChoice;

/// The engine a job's ranks meet through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// symmem's Unix-socket star around rank 0: the ranks of one host.
    Unix,
    /// The launcher's PMIx server (`srun --mpi=pmix`, Open MPI's `mpirun`): any hosts.
    Pmix,
    /// An all-gather the program ran itself (a `torch.distributed` process group, through
    /// symmem's Python package), then symmem's own links: any hosts. Never chosen from the
    /// environment: the program asks for it.
    Group,
}

/// Why no engine can carry this job.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    #[error(
        "this job spans nodes ({evidence}) but its launcher started no PMIx server \
         (PMIX_NAMESPACE and PMIX_RANK are unset), and symmem's own rendezvous reaches one host \
         only: launch it with `srun --mpi=pmix` or Open MPI's `mpirun`, or run every rank on one \
         host; from Python, call torch.distributed.init_process_group before symmem.init and \
         symmem meets the other ranks through it"
    )]
    SpansNodesWithoutEngine { evidence: String },
    #[error(
        "srun started this job across nodes ({evidence}) without a PMIx server (PMIX_NAMESPACE \
         and PMIX_RANK are unset): add --mpi=pmix to srun (`srun --mpi=list` shows whether \
         Slurm's PMIx plugin is installed), or run every rank on one node"
    )]
    SrunWithoutPmix { evidence: String },
    #[error(
        "{}=unix but this job spans nodes ({evidence}): the Unix-socket rendezvous reaches one \
         host only; unset {} (auto) under `srun --mpi=pmix` or `mpirun`, or run every rank on \
         one host",
        BOOTSTRAP.name, BOOTSTRAP.name
    )]
    UnixAcrossNodes { evidence: String },
    #[error(
        "{}=pmix but no PMIx server started this process (PMIX_NAMESPACE and PMIX_RANK are \
         unset): launch it with `srun --mpi=pmix` or Open MPI's `mpirun`, or unset {}",
        BOOTSTRAP.name, BOOTSTRAP.name
    )]
    NoPmixServer,
}

/// What says this job has ranks on more than one node, or `None` when nothing does. Only the
/// launcher that named this rank counts (its local size below its world size, or Slurm's
/// node count of the step): a Slurm allocation around a one-host symmem-run or torchrun job
/// says nothing about that job.
pub fn spans_nodes(identity: &RankIdentity) -> Option<String> {
    if identity.local_world_size < identity.world_size {
        return Some(format!(
            "{} says {} of its {} ranks run on this node",
            identity.launcher, identity.local_world_size, identity.world_size
        ));
    }
    identity
        .nodes
        .filter(|count| count.nodes > 1)
        .map(|count| count.to_string())
}

/// The engine for this rank: `unix` and `pmix` as set (refused where they cannot work);
/// `auto` keeps the Unix star whenever the job fits on one host (PMIx present or not: the
/// single-host path is the same as without PMIx; in an Apptainer container under PMIx, PMIx)
/// and takes PMIx when it spans nodes. A job
/// that spans nodes with no engine is an error at once, never a rendezvous that waits out its
/// timeout for ranks that cannot reach it.
pub fn choose_engine(
    choice: BootstrapChoice,
    identity: &RankIdentity,
    get: impl Fn(&str) -> Option<String>,
) -> Result<Engine, EngineError> {
    let spans = spans_nodes(identity);
    let pmix = pmix_present(&get);
    match (choice, spans, pmix) {
        (BootstrapChoice::Pmix, _, true) => Ok(Engine::Pmix),
        (BootstrapChoice::Pmix, _, false) => Err(EngineError::NoPmixServer),
        (BootstrapChoice::Unix, Some(evidence), _) => {
            Err(EngineError::UnixAcrossNodes { evidence })
        }
        (BootstrapChoice::Unix, None, _) => Ok(Engine::Unix),
        // Apptainer starts a container per rank, which need not share the node's /tmp where
        // the Unix star meets (`--contain`): PMIx's exchange checks that they do and says so
        // at once, where the star would wait out its timeout.
        (BootstrapChoice::Auto, None, true) if identity.world_size > 1 && in_apptainer(&get) => {
            Ok(Engine::Pmix)
        }
        (BootstrapChoice::Auto, None, _) => Ok(Engine::Unix),
        (BootstrapChoice::Auto, Some(_), true) => Ok(Engine::Pmix),
        // Only Slurm's layout gives a node count: srun started these ranks.
        (BootstrapChoice::Auto, Some(evidence), false)
            if identity.launcher == Launcher::Slurm || identity.nodes.is_some() =>
        {
            Err(EngineError::SrunWithoutPmix { evidence })
        }
        (BootstrapChoice::Auto, Some(evidence), false) => {
            Err(EngineError::SpansNodesWithoutEngine { evidence })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn choose(choice: BootstrapChoice, pairs: &[(&str, &str)]) -> Result<Engine, EngineError> {
        let map = env(pairs);
        let get = |k: &str| map.get(k).cloned();
        let identity = RankIdentity::from_vars(get).unwrap();
        choose_engine(choice, &identity, get)
    }

    fn local_size(pairs: &[(&str, &str)]) -> usize {
        let map = env(pairs);
        RankIdentity::from_vars(|k| map.get(k).cloned())
            .unwrap()
            .local_world_size
    }

    const TORCH_TWO_NODES: &[(&str, &str)] = &[
        ("RANK", "5"),
        ("WORLD_SIZE", "8"),
        ("LOCAL_RANK", "1"),
        ("LOCAL_WORLD_SIZE", "4"),
        ("TORCHELASTIC_RUN_ID", "x"),
    ];
    const OMPI_TWO_NODES_PMIX: &[(&str, &str)] = &[
        ("OMPI_COMM_WORLD_RANK", "2"),
        ("OMPI_COMM_WORLD_SIZE", "4"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
        ("PMIX_NAMESPACE", "prterun-a-1@1"),
        ("PMIX_RANK", "2"),
    ];
    const OMPI_ONE_HOST_PMIX: &[(&str, &str)] = &[
        ("OMPI_COMM_WORLD_RANK", "2"),
        ("OMPI_COMM_WORLD_SIZE", "4"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "2"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
        ("PMIX_NAMESPACE", "prterun-a-1@1"),
        ("PMIX_RANK", "2"),
    ];
    const SLURM_TWO_NODES_NO_PMIX: &[(&str, &str)] = &[
        ("SLURM_PROCID", "3"),
        ("SLURM_NTASKS", "4"),
        ("SLURM_LOCALID", "1"),
        ("SLURM_NTASKS_PER_NODE", "2(x2)"),
        ("SLURM_NNODES", "2"),
    ];

    #[test]
    fn auto_keeps_the_unix_star_on_one_host_even_under_pmix() {
        use BootstrapChoice::Auto;
        assert_eq!(choose(Auto, &[]), Ok(Engine::Unix));
        assert_eq!(choose(Auto, OMPI_ONE_HOST_PMIX), Ok(Engine::Unix));
        let torch_one_host = &[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_WORLD_SIZE", "2"),
        ];
        assert_eq!(choose(Auto, torch_one_host), Ok(Engine::Unix));
    }

    /// In Apptainer under a PMIx launcher, one host or not, PMIx: its exchange checks that the
    /// containers share the node's /tmp. Alone, or without PMIx, nothing changes.
    #[test]
    fn auto_takes_pmix_on_one_host_in_apptainer() {
        use BootstrapChoice::Auto;
        let in_apptainer: Vec<(&str, &str)> = OMPI_ONE_HOST_PMIX
            .iter()
            .copied()
            .chain([("APPTAINER_CONTAINER", "/images/x.sif")])
            .collect();
        assert_eq!(choose(Auto, &in_apptainer), Ok(Engine::Pmix));
        assert_eq!(
            choose(BootstrapChoice::Unix, &in_apptainer),
            Ok(Engine::Unix)
        );
        assert_eq!(
            choose(Auto, &[("SINGULARITY_CONTAINER", "/x.sif")]),
            Ok(Engine::Unix)
        );
    }

    #[test]
    fn auto_takes_pmix_across_nodes() {
        assert_eq!(
            choose(BootstrapChoice::Auto, OMPI_TWO_NODES_PMIX),
            Ok(Engine::Pmix)
        );
        let mut slurm = SLURM_TWO_NODES_NO_PMIX.to_vec();
        slurm.extend([("PMIX_NAMESPACE", "slurm.pmix.7.0"), ("PMIX_RANK", "3")]);
        assert_eq!(choose(BootstrapChoice::Auto, &slurm), Ok(Engine::Pmix));
    }

    #[test]
    fn spanning_nodes_without_an_engine_is_refused_naming_the_fix() {
        let e = choose(BootstrapChoice::Auto, TORCH_TWO_NODES).unwrap_err();
        assert_eq!(
            e,
            EngineError::SpansNodesWithoutEngine {
                evidence: "torchrun says 4 of its 8 ranks run on this node".into()
            }
        );
        let text = e.to_string();
        assert!(
            text.contains("srun --mpi=pmix") && text.contains("mpirun"),
            "{text}"
        );
        let mut ompi = OMPI_TWO_NODES_PMIX.to_vec();
        ompi.retain(|(k, _)| !k.starts_with("PMIX_"));
        assert!(matches!(
            choose(BootstrapChoice::Auto, &ompi),
            Err(EngineError::SpansNodesWithoutEngine { .. })
        ));
    }

    #[test]
    fn forced_engines_are_checked() {
        assert_eq!(
            choose(BootstrapChoice::Pmix, OMPI_ONE_HOST_PMIX),
            Ok(Engine::Pmix)
        );
        let e = choose(BootstrapChoice::Pmix, TORCH_TWO_NODES).unwrap_err();
        assert_eq!(e, EngineError::NoPmixServer);
        assert!(
            e.to_string().contains(&format!("{}=pmix", BOOTSTRAP.name)),
            "{e}"
        );
        let e = choose(BootstrapChoice::Unix, OMPI_TWO_NODES_PMIX).unwrap_err();
        assert!(matches!(e, EngineError::UnixAcrossNodes { .. }), "{e}");
        assert_eq!(
            choose(BootstrapChoice::Unix, OMPI_ONE_HOST_PMIX),
            Ok(Engine::Unix)
        );
    }

    /// symmem-run's variables (torchrun's convention) on one host.
    const SYMMEM_RUN_ONE_HOST: &[(&str, &str)] = &[
        ("RANK", "1"),
        ("WORLD_SIZE", "2"),
        ("LOCAL_RANK", "1"),
        ("LOCAL_WORLD_SIZE", "2"),
        ("TORCHELASTIC_RUN_ID", "r1"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", "29500"),
    ];
    /// What every shell of a two-node Slurm allocation holds (`salloc -N2`, a batch script).
    const TWO_NODE_ALLOCATION: &[(&str, &str)] = &[
        ("SLURM_JOB_ID", "77"),
        ("SLURM_NNODES", "2"),
        ("SLURM_JOB_NUM_NODES", "2"),
        ("SLURM_TASKS_PER_NODE", "2(x2)"),
    ];

    fn with(
        base: &[(&'static str, &'static str)],
        more: &[(&'static str, &'static str)],
    ) -> Vec<(&'static str, &'static str)> {
        let mut all = base.to_vec();
        all.extend_from_slice(more);
        all
    }

    /// M2: the innermost launcher's own count wins over the allocation's node count.
    #[test]
    fn a_one_host_job_inside_a_two_node_allocation_runs_on_the_unix_star() {
        let symmem_run = with(TWO_NODE_ALLOCATION, SYMMEM_RUN_ONE_HOST);
        let torchrun_world_of_one = with(
            TWO_NODE_ALLOCATION,
            &[
                ("RANK", "0"),
                ("WORLD_SIZE", "1"),
                ("LOCAL_RANK", "0"),
                ("LOCAL_WORLD_SIZE", "1"),
                ("TORCHELASTIC_RUN_ID", "t"),
            ],
        );
        // `srun -N1 -n2` inside the allocation: the step's own node count is 1.
        let one_node_step = with(
            TWO_NODE_ALLOCATION,
            &[
                ("SLURM_PROCID", "1"),
                ("SLURM_NTASKS", "2"),
                ("SLURM_LOCALID", "1"),
                ("SLURM_NODEID", "0"),
                ("SLURM_STEP_ID", "0"),
                ("SLURM_STEP_NUM_NODES", "1"),
                ("SLURM_STEP_TASKS_PER_NODE", "2"),
            ],
        );
        let singleton = TWO_NODE_ALLOCATION.to_vec();
        for vars in [
            &symmem_run,
            &torchrun_world_of_one,
            &one_node_step,
            &singleton,
        ] {
            for choice in [BootstrapChoice::Auto, BootstrapChoice::Unix] {
                assert_eq!(choose(choice, vars), Ok(Engine::Unix), "{choice} {vars:?}");
            }
        }
    }

    /// `srun -N2 -n4 --mpi=pmix` without `--ntasks-per-node`: Slurm writes the per-node count
    /// as `2(x2)`, which is no number.
    #[test]
    fn slurms_compressed_per_node_count_is_this_nodes_count() {
        let srun = &[
            ("SLURM_JOB_ID", "77"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NODEID", "1"),
            ("SLURM_NNODES", "2"),
            ("SLURM_TASKS_PER_NODE", "2(x2)"),
            ("PMIX_NAMESPACE", "slurm.pmix.77.0"),
            ("PMIX_RANK", "3"),
        ];
        assert_eq!(local_size(srun), 2);
        assert_eq!(choose(BootstrapChoice::Auto, srun), Ok(Engine::Pmix));
        // The step's own count wins over the allocation's.
        let step = with(srun, &[("SLURM_STEP_TASKS_PER_NODE", "2(x2)")]);
        let step: Vec<_> = step
            .into_iter()
            .map(|(k, v)| {
                if k == "SLURM_TASKS_PER_NODE" {
                    (k, "4(x2)")
                } else {
                    (k, v)
                }
            })
            .collect();
        assert_eq!(local_size(&step), 2);
    }

    /// `srun -N2 -n4` with Slurm's default block distribution: 3 ranks on the first node, 1 on
    /// the second; each rank's node count is the entry of its `SLURM_NODEID`.
    #[test]
    fn slurms_uneven_layouts_give_each_node_its_own_count() {
        let rank = |procid: &'static str, nodeid: &'static str, localid: &'static str| {
            vec![
                ("SLURM_PROCID", procid),
                ("SLURM_NTASKS", "4"),
                ("SLURM_LOCALID", localid),
                ("SLURM_NODEID", nodeid),
                ("SLURM_STEP_NUM_NODES", "2"),
                ("SLURM_STEP_TASKS_PER_NODE", "3,1"),
                ("PMIX_NAMESPACE", "slurm.pmix.77.0"),
                ("PMIX_RANK", procid),
            ]
        };
        assert_eq!(local_size(&rank("2", "0", "2")), 3);
        assert_eq!(local_size(&rank("3", "1", "0")), 1);
        assert_eq!(
            choose(BootstrapChoice::Auto, &rank("3", "1", "0")),
            Ok(Engine::Pmix)
        );
        // Four nodes, two forms in one list: 2,2,1,1.
        let mut four = rank("5", "3", "0");
        four.retain(|(k, _)| *k != "SLURM_STEP_TASKS_PER_NODE" && *k != "SLURM_STEP_NUM_NODES");
        four.extend([
            ("SLURM_TASKS_PER_NODE", "2(x2),1(x2)"),
            ("SLURM_NNODES", "4"),
            ("SLURM_NTASKS", "6"),
        ]);
        assert_eq!(local_size(&four), 1);
    }

    /// `srun --mpi=pmi2 -N2`: PMI's rank and size name the task, with no per-node count of
    /// PMI's own; the step's layout says the job spans nodes, and there is no PMIx server.
    #[test]
    fn srun_with_pmi2_across_nodes_is_srun_without_pmix() {
        let pmi2 = &[
            ("PMI_RANK", "1"),
            ("PMI_SIZE", "2"),
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_NODEID", "1"),
            ("SLURM_STEP_NUM_NODES", "2"),
            ("SLURM_STEP_TASKS_PER_NODE", "1(x2)"),
        ];
        assert_eq!(local_size(pmi2), 1);
        let e = choose(BootstrapChoice::Auto, pmi2).unwrap_err();
        assert!(matches!(e, EngineError::SrunWithoutPmix { .. }), "{e}");
        // A PMI launcher in a batch script of a two-node allocation: no step of srun's, so
        // Slurm's counts are the allocation's and say nothing of this job.
        let batch = with(
            TWO_NODE_ALLOCATION,
            &[
                ("PMI_RANK", "0"),
                ("PMI_SIZE", "2"),
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "2"),
            ],
        );
        assert_eq!(choose(BootstrapChoice::Auto, &batch), Ok(Engine::Unix));
    }

    /// `srun -N2` without `--mpi=pmix`: no PMIx server in the ranks' environment. It must stop
    /// at once, naming the option, however Slurm wrote its counts.
    #[test]
    fn srun_across_nodes_without_pmix_names_the_option() {
        let no_local_size = &[
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_NODEID", "1"),
            ("SLURM_NNODES", "2"),
        ];
        for vars in [SLURM_TWO_NODES_NO_PMIX, no_local_size] {
            let e = choose(BootstrapChoice::Auto, vars).unwrap_err();
            let text = e.to_string();
            assert!(text.contains("add --mpi=pmix to srun"), "{text}");
            assert!(text.contains("SLURM_NNODES=2"), "{text}");
        }
    }

    #[test]
    fn choice_names_parse() {
        for c in [
            BootstrapChoice::Auto,
            BootstrapChoice::Unix,
            BootstrapChoice::Pmix,
        ] {
            assert_eq!(BootstrapChoice::from_name(&c.to_string()), Some(c));
        }
        assert_eq!(
            BootstrapChoice::from_name(" PMIx "),
            Some(BootstrapChoice::Pmix)
        );
        assert_eq!(BootstrapChoice::from_name("mpi"), None);
    }
}

//! Which control-plane engine a job's ranks meet through: symmem's own Unix-socket star (one
//! host) or the PMIx server the launcher started (any number of hosts). [`choose_engine`] is a
//! pure function of the [`BOOTSTRAP`](crate::settings::BOOTSTRAP) setting, the rank identity
//! and the launcher's variables, so every decision it makes is testable without a launcher.

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
}

/// Why no engine can carry this job.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    #[error(
        "this job spans nodes ({evidence}) but its launcher started no PMIx server \
         (PMIX_NAMESPACE and PMIX_RANK are unset), and symmem's own rendezvous reaches one host \
         only: launch it with `srun --mpi=pmix` or Open MPI's `mpirun`, or run every rank on one \
         host"
    )]
    SpansNodesWithoutEngine { evidence: String },
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

/// Whether a PMIx server started this process: it sets both variables for each client.
pub fn pmix_present(get: &impl Fn(&str) -> Option<String>) -> bool {
    ["PMIX_NAMESPACE", "PMIX_RANK"]
        .iter()
        .all(|v| get(v).is_some_and(|s| !s.trim().is_empty()))
}

/// What says this job has ranks on more than one node, or `None` when nothing does: fewer
/// ranks on this node than in the job (every launcher's local size), or Slurm's node count of
/// the step (its per-node count may be a form like `4(x2)` that gives no local size).
pub fn spans_nodes(
    identity: &RankIdentity,
    get: &impl Fn(&str) -> Option<String>,
) -> Option<String> {
    if identity.local_world_size < identity.world_size {
        return Some(format!(
            "{} says {} of its {} ranks run on this node",
            identity.launcher, identity.local_world_size, identity.world_size
        ));
    }
    ["SLURM_STEP_NUM_NODES", "SLURM_NNODES"]
        .iter()
        .find_map(|var| {
            let nodes: usize = get(var)?.trim().parse().ok()?;
            (nodes > 1).then(|| format!("{var}={nodes}"))
        })
}

/// The engine for this rank: `unix` and `pmix` as set (refused where they cannot work);
/// `auto` keeps the Unix star whenever the job fits on one host (PMIx present or not: the
/// single-host path is the same as without PMIx) and takes PMIx when it spans nodes. A job
/// that spans nodes with no engine is an error at once, never a rendezvous that waits out its
/// timeout for ranks that cannot reach it.
pub fn choose_engine(
    choice: BootstrapChoice,
    identity: &RankIdentity,
    get: impl Fn(&str) -> Option<String>,
) -> Result<Engine, EngineError> {
    let spans = spans_nodes(identity, &get);
    let pmix = pmix_present(&get);
    match (choice, spans, pmix) {
        (BootstrapChoice::Pmix, _, true) => Ok(Engine::Pmix),
        (BootstrapChoice::Pmix, _, false) => Err(EngineError::NoPmixServer),
        (BootstrapChoice::Unix, Some(evidence), _) => {
            Err(EngineError::UnixAcrossNodes { evidence })
        }
        (BootstrapChoice::Unix, None, _) => Ok(Engine::Unix),
        (BootstrapChoice::Auto, None, _) => Ok(Engine::Unix),
        (BootstrapChoice::Auto, Some(_), true) => Ok(Engine::Pmix),
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
        for (vars, evidence) in [
            (
                TORCH_TWO_NODES,
                "torchrun says 4 of its 8 ranks run on this node",
            ),
            (SLURM_TWO_NODES_NO_PMIX, "SLURM_NNODES=2"),
        ] {
            let e = choose(BootstrapChoice::Auto, vars).unwrap_err();
            assert_eq!(
                e,
                EngineError::SpansNodesWithoutEngine {
                    evidence: evidence.into()
                }
            );
            let text = e.to_string();
            assert!(
                text.contains("srun --mpi=pmix") && text.contains("mpirun"),
                "{text}"
            );
        }
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

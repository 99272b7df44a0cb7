//! Who this process is in the job, read from the environment conventions of existing
//! launchers, so one rank program runs under symmem-run, torchrun, mpirun or srun.

use std::fmt;

/// The launcher whose environment named this rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launcher {
    /// torchrun / symmem-run: `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`.
    Torchrun,
    /// Open MPI: `OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}`.
    OpenMpi,
    /// Slurm: `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`.
    Slurm,
    /// PMI (MPICH/Hydra): `PMI_RANK`, `PMI_SIZE`.
    Pmi,
    /// No launcher variables: a single rank.
    Singleton,
}

impl fmt::Display for Launcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Torchrun => "torchrun",
            Self::OpenMpi => "Open MPI",
            Self::Slurm => "Slurm",
            Self::Pmi => "PMI",
            Self::Singleton => "singleton",
        })
    }
}

/// Problems with the rank variables.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RankEnvError {
    #[error("{var}={value:?} is not a non-negative integer; fix the launcher's environment")]
    NotANumber { var: &'static str, value: String },
    #[error("{var} is set but {missing} is not; a {launcher} job sets both")]
    Missing {
        var: &'static str,
        missing: &'static str,
        launcher: Launcher,
    },
    #[error("{var}=0: a job has at least one rank")]
    WorldSizeZero { var: &'static str },
    #[error("{rank_var}={rank} but {size_var}={world_size}: the rank must be below the world size")]
    RankOutOfRange {
        rank_var: &'static str,
        rank: usize,
        size_var: &'static str,
        world_size: usize,
    },
}

/// This process's place in the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankIdentity {
    pub rank: usize,
    pub world_size: usize,
    pub local_rank: usize,
    pub local_world_size: usize,
    pub launcher: Launcher,
    /// A string that names this job and step, the same for every rank of it, when the
    /// launcher provides one (rendezvous locations derive from it).
    pub job_key: Option<String>,
}

struct Convention {
    launcher: Launcher,
    rank: &'static str,
    size: &'static str,
    local_rank: &'static str,
    local_size: &'static str,
}

const CONVENTIONS: [Convention; 4] = [
    Convention {
        launcher: Launcher::Torchrun,
        rank: "RANK",
        size: "WORLD_SIZE",
        local_rank: "LOCAL_RANK",
        local_size: "LOCAL_WORLD_SIZE",
    },
    Convention {
        launcher: Launcher::OpenMpi,
        rank: "OMPI_COMM_WORLD_RANK",
        size: "OMPI_COMM_WORLD_SIZE",
        local_rank: "OMPI_COMM_WORLD_LOCAL_RANK",
        local_size: "OMPI_COMM_WORLD_LOCAL_SIZE",
    },
    Convention {
        launcher: Launcher::Slurm,
        rank: "SLURM_PROCID",
        size: "SLURM_NTASKS",
        local_rank: "SLURM_LOCALID",
        // Only a plain number here; "4(x2)" forms fall back to the world size on one node.
        local_size: "SLURM_NTASKS_PER_NODE",
    },
    Convention {
        launcher: Launcher::Pmi,
        rank: "PMI_RANK",
        size: "PMI_SIZE",
        local_rank: "MPI_LOCALRANKID",
        local_size: "MPI_LOCALNRANKS",
    },
];

impl RankIdentity {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, RankEnvError> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// Reads rank variables through `get` (the first launcher convention present wins).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Self, RankEnvError> {
        let number = |var: &'static str| -> Result<Option<usize>, RankEnvError> {
            match get(var) {
                None => Ok(None),
                Some(value) => value
                    .trim()
                    .parse()
                    .map(Some)
                    .map_err(|_| RankEnvError::NotANumber { var, value }),
            }
        };
        for c in &CONVENTIONS {
            let Some(rank) = number(c.rank)? else {
                continue;
            };
            let world_size = number(c.size)?.ok_or(RankEnvError::Missing {
                var: c.rank,
                missing: c.size,
                launcher: c.launcher,
            })?;
            if world_size == 0 {
                return Err(RankEnvError::WorldSizeZero { var: c.size });
            }
            if rank >= world_size {
                return Err(RankEnvError::RankOutOfRange {
                    rank_var: c.rank,
                    rank,
                    size_var: c.size,
                    world_size,
                });
            }
            let local_rank = number(c.local_rank)?.unwrap_or(rank);
            // Slurm's per-node count may be "4(x2)": not a number, so not an error.
            let local_world_size = get(c.local_size)
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(world_size);
            if local_world_size == 0 || local_rank >= local_world_size {
                return Err(RankEnvError::RankOutOfRange {
                    rank_var: c.local_rank,
                    rank: local_rank,
                    size_var: c.local_size,
                    world_size: local_world_size,
                });
            }
            return Ok(Self {
                rank,
                world_size,
                local_rank,
                local_world_size,
                launcher: c.launcher,
                job_key: job_key(c.launcher, &get),
            });
        }
        Ok(Self {
            rank: 0,
            world_size: 1,
            local_rank: 0,
            local_world_size: 1,
            launcher: Launcher::Singleton,
            job_key: None,
        })
    }
}

fn job_key(launcher: Launcher, get: &impl Fn(&str) -> Option<String>) -> Option<String> {
    let joined = |vars: &[&str]| -> Option<String> {
        let parts: Option<Vec<String>> = vars.iter().map(|v| get(v)).collect();
        parts.map(|p| p.join("-"))
    };
    let key = match launcher {
        Launcher::Torchrun => joined(&["MASTER_ADDR", "MASTER_PORT"]),
        Launcher::Slurm => joined(&["SLURM_JOB_ID", "SLURM_STEP_ID"]),
        Launcher::OpenMpi => get("OMPI_MCA_ess_base_jobid").or_else(|| get("PMIX_NAMESPACE")),
        Launcher::Pmi => get("PMIX_NAMESPACE").or_else(|| get("PMI_KVSNAME")),
        Launcher::Singleton => None,
    }?;
    // Keep it usable as one path component.
    Some(
        key.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn ident(vars: &[(&str, &str)]) -> Result<RankIdentity, RankEnvError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        RankIdentity::from_vars(|k| map.get(k).cloned())
    }

    #[test]
    fn torchrun() {
        let id = ident(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "2"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "29500"),
        ])
        .unwrap();
        assert_eq!(
            (id.rank, id.world_size, id.local_rank, id.local_world_size),
            (3, 8, 1, 2)
        );
        assert_eq!(id.launcher, Launcher::Torchrun);
        assert_eq!(id.job_key.as_deref(), Some("10.0.0.1-29500"));
    }

    #[test]
    fn open_mpi_slurm_pmi() {
        let id = ident(&[
            ("OMPI_COMM_WORLD_RANK", "2"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "2"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
            ("PMIX_NAMESPACE", "prterun-host-123@1"),
        ])
        .unwrap();
        assert_eq!(
            (id.rank, id.world_size, id.launcher),
            (2, 4, Launcher::OpenMpi)
        );
        assert_eq!(id.job_key.as_deref(), Some("prterun-host-123_1"));

        let id = ident(&[
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NTASKS_PER_NODE", "4(x2)"),
            ("SLURM_JOB_ID", "77"),
            ("SLURM_STEP_ID", "0"),
        ])
        .unwrap();
        assert_eq!((id.rank, id.local_rank, id.local_world_size), (5, 1, 8));
        assert_eq!(id.job_key.as_deref(), Some("77-0"));

        let id = ident(&[("PMI_RANK", "0"), ("PMI_SIZE", "2")]).unwrap();
        assert_eq!((id.rank, id.world_size, id.launcher), (0, 2, Launcher::Pmi));
    }

    #[test]
    fn singleton_without_variables() {
        let id = ident(&[]).unwrap();
        assert_eq!(
            (id.rank, id.world_size, id.launcher),
            (0, 1, Launcher::Singleton)
        );
    }

    #[test]
    fn bad_input_is_a_typed_error() {
        assert_eq!(
            ident(&[("RANK", "4"), ("WORLD_SIZE", "4")]).unwrap_err(),
            RankEnvError::RankOutOfRange {
                rank_var: "RANK",
                rank: 4,
                size_var: "WORLD_SIZE",
                world_size: 4
            }
        );
        assert_eq!(
            ident(&[("RANK", "0"), ("WORLD_SIZE", "0")]).unwrap_err(),
            RankEnvError::WorldSizeZero { var: "WORLD_SIZE" }
        );
        assert!(matches!(
            ident(&[("RANK", "x"), ("WORLD_SIZE", "2")]).unwrap_err(),
            RankEnvError::NotANumber { var: "RANK", .. }
        ));
        assert!(matches!(
            ident(&[("RANK", "0")]).unwrap_err(),
            RankEnvError::Missing {
                missing: "WORLD_SIZE",
                ..
            }
        ));
    }
}

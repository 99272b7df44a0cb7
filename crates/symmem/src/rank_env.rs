//! Who this process is in the job, read from the environment conventions of existing
//! launchers, so one rank program runs under symmem-run, torchrun, mpirun or srun.

use crate::launcher::Launcher;
use crate::settings::{InvalidSetting, RANK_FROM, RUN_ID};
use std::fmt;

/// Problems with the rank variables.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RankEnvError {
    #[error("{var}={value:?} is not a non-negative integer; fix the launcher's environment")]
    NotANumber { var: &'static str, value: String },
    #[error(
        "{var} is set but {missing} is not; a {launcher} job sets both: set {missing} too, or \
         unset {var} if it is stale"
    )]
    Missing {
        var: &'static str,
        missing: &'static str,
        launcher: Launcher,
    },
    #[error("{var}=0: a job has at least one rank")]
    WorldSizeZero { var: &'static str },
    #[error(
        "the launchers' variables disagree on who this process is: {}; {hint} \
         (or set {}=torchrun|openmpi|slurm|pmi to name the launcher that started \
         this process)",
        .found.iter().map(|f| f.to_string()).collect::<Vec<_>>().join(" vs "),
        RANK_FROM.name
    )]
    Conflict {
        /// Every convention present, innermost first.
        found: Vec<Found>,
        /// What most likely happened and what to unset.
        hint: String,
    },
    #[error(
        "{}={} names a launcher whose variables are not set here: give one of torchrun, \
         openmpi, slurm, pmi whose rank and size variables are set, or unset it",
        RANK_FROM.name,
        .launcher.setting_name()
    )]
    BadRankFrom { launcher: Launcher },
    #[error(
        "no launcher variables reached this process, yet it descends from {ancestor} \
         (pid {pid}), which starts a job's ranks: alone it would meet no other rank. A \
         container that drops the environment does this (`apptainer exec --cleanenv` or \
         `--containall`, `docker run` without `-e`): drop that flag, or pass the launcher's \
         variables (SLURM_*, OMPI_*, PMIX_*) into the container"
    )]
    EnvironmentDropped { ancestor: String, pid: u32 },
    #[error(
        "the PMIx server says this process is {what}; a PMIx server gives every process of \
         its job a rank below the job's size: the launcher or its PMIx library is broken"
    )]
    PmixNonsense { what: String },
    #[error(transparent)]
    InvalidSetting(#[from] InvalidSetting),
    #[error("{rank_var}={rank} but {size_var}={world_size}: the rank must be below the world size")]
    RankOutOfRange {
        rank_var: &'static str,
        rank: usize,
        size_var: &'static str,
        world_size: usize,
    },
    #[error(
        "{rank_var}={rank} but {size_var} is unset, so the local world is the whole world of \
         {world_size}: the local rank must be below it; set {size_var} (or fix {rank_var})"
    )]
    LocalRankBeyondWorld {
        rank_var: &'static str,
        rank: usize,
        size_var: &'static str,
        world_size: usize,
    },
}

/// One launcher convention found in the environment: its variables and the values they hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub launcher: Launcher,
    pub rank_var: &'static str,
    pub rank: usize,
    pub size_var: &'static str,
    pub world_size: usize,
}

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}={} {}={} ({})",
            self.rank_var, self.rank, self.size_var, self.world_size, self.launcher
        )
    }
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
    /// The number of nodes the launcher that named this rank says its job (Slurm: its step)
    /// runs on, where it says (only Slurm does; the others give their per-node count).
    pub nodes: Option<NodeCount>,
}

/// A launcher's own count of the nodes of its job: the variable it comes from and its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeCount {
    pub var: &'static str,
    pub nodes: usize,
}

impl fmt::Display for NodeCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.var, self.nodes)
    }
}

struct Convention {
    launcher: Launcher,
    rank: &'static str,
    size: &'static str,
    local_rank: &'static str,
    local_size: &'static str,
}

/// Innermost launcher first. The launcher that started this process sets its variables for each
/// process; launchers around it (a Slurm step around mpirun or torchrun, mpirun around torchrun)
/// left theirs in the environment, the same in every rank. So when several are set, the
/// innermost one says who this process is.
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
        launcher: Launcher::Pmi,
        rank: "PMI_RANK",
        size: "PMI_SIZE",
        local_rank: "MPI_LOCALRANKID",
        local_size: "MPI_LOCALNRANKS",
    },
    Convention {
        launcher: Launcher::Slurm,
        rank: "SLURM_PROCID",
        size: "SLURM_NTASKS",
        local_rank: "SLURM_LOCALID",
        // Named in messages; the count itself is this node's entry of the step's per-node
        // list ([`slurm_layout`]).
        local_size: "SLURM_STEP_TASKS_PER_NODE",
    },
];

impl RankIdentity {
    /// Reads the process environment. A process no launcher variable reached (not even a
    /// PMIx server's) that descends from a launcher's rank starter (srun's job step, mpirun,
    /// Open MPI's orted) is refused ([`RankEnvError::EnvironmentDropped`]): a container or
    /// wrapper dropped its environment, and as a one-rank job it would "pass" alone.
    pub fn from_env() -> Result<Self, RankEnvError> {
        let get = |name: &str| std::env::var(name).ok();
        let identity = Self::from_vars(get)?;
        if identity.launcher == Launcher::Singleton
            && !crate::launcher::pmix_present(&get)
            && let Some((pid, ancestor)) = rank_starter(ancestors())
        {
            return Err(RankEnvError::EnvironmentDropped { ancestor, pid });
        }
        Ok(identity)
    }

    /// This process as the PMIx server that started it tells it (`PMIX_RANK`,
    /// `PMIX_JOB_SIZE`, `PMIX_LOCAL_RANK`, `PMIX_LOCAL_SIZE` of `namespace`), for a process
    /// no launcher variable reached; the namespace names its rendezvous folder.
    pub fn from_pmix(
        rank: usize,
        world_size: usize,
        local_rank: usize,
        local_world_size: usize,
        namespace: &str,
    ) -> Result<Self, RankEnvError> {
        let nonsense = |what: String| Err(RankEnvError::PmixNonsense { what });
        if rank >= world_size {
            return nonsense(format!("rank {rank} of a job of {world_size}"));
        }
        if local_rank >= local_world_size || local_world_size > world_size {
            return nonsense(format!(
                "local rank {local_rank} of {local_world_size} on its node, in a job of \
                 {world_size}"
            ));
        }
        Ok(Self {
            rank,
            world_size,
            local_rank,
            local_world_size,
            launcher: Launcher::Pmix,
            job_key: Some(path_component(&format!("pmix-{namespace}"))),
            nodes: None,
        })
    }

    /// Reads rank variables through `get`. When several launchers' variables are set, the
    /// innermost launcher's win (see [`CONVENTIONS`]), except where they cannot both be right:
    /// torchrun-style `RANK`/`WORLD_SIZE` without torchrun's own `TORCHELASTIC_*` variables
    /// (exported by hand, stale) that disagree with another launcher, or Open MPI and PMI
    /// disagreeing. Those are an error naming every variable, never a guess: a wrong guess runs
    /// the job with duplicate ranks. [`RANK_FROM`] (`SYMMEM_RANK_FROM`) settles it by naming the
    /// launcher.
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
        let mut found: Vec<(&Convention, Found)> = Vec::new();
        for c in &CONVENTIONS {
            let Some(rank) = number(c.rank)? else {
                // A world size alone (a stray `WORLD_SIZE=4`) would run as a singleton without
                // a word. Slurm's batch step sets SLURM_NTASKS for a script that is no task.
                if c.launcher != Launcher::Slurm && get(c.size).is_some() {
                    return Err(RankEnvError::Missing {
                        var: c.size,
                        missing: c.rank,
                        launcher: c.launcher,
                    });
                }
                continue;
            };
            let world_size = number(c.size)?.ok_or(RankEnvError::Missing {
                var: c.rank,
                missing: c.size,
                launcher: c.launcher,
            })?;
            found.push((
                c,
                Found {
                    launcher: c.launcher,
                    rank_var: c.rank,
                    rank,
                    size_var: c.size,
                    world_size,
                },
            ));
        }
        let chosen = match RANK_FROM.read_from(&get)? {
            Some(launcher) => found
                .iter()
                .find(|(c, _)| c.launcher == launcher)
                .ok_or(RankEnvError::BadRankFrom { launcher })?,
            None => {
                check_agreement(&found, &get)?;
                match found.first() {
                    Some(first) => first,
                    None => return Ok(Self::singleton()),
                }
            }
        };
        let (c, f) = chosen;
        let (rank, world_size) = (f.rank, f.world_size);
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
        let local = local_convention(c, f, &found, &get);
        let local_rank = number(local.local_rank)?.unwrap_or(rank);
        let (local_size, nodes) = layout(local, &get);
        let local_world_size = local_world(local, local_rank, local_size, world_size)?;
        Ok(Self {
            rank,
            world_size,
            local_rank,
            local_world_size,
            launcher: c.launcher,
            job_key: job_key(c.launcher, &get),
            nodes,
        })
    }

    fn singleton() -> Self {
        Self {
            rank: 0,
            world_size: 1,
            local_rank: 0,
            local_world_size: 1,
            launcher: Launcher::Singleton,
            job_key: None,
            nodes: None,
        }
    }
}

/// This node's count of ranks: `local_size` as `local`'s variables gave it (the world size
/// when they gave none), checked against `local_rank`.
fn local_world(
    local: &Convention,
    local_rank: usize,
    local_size: Option<usize>,
    world_size: usize,
) -> Result<usize, RankEnvError> {
    let local_world_size = local_size.unwrap_or(world_size);
    if local_size.is_none() && local_rank >= world_size {
        return Err(RankEnvError::LocalRankBeyondWorld {
            rank_var: local.local_rank,
            rank: local_rank,
            size_var: local.local_size,
            world_size,
        });
    }
    if local_world_size == 0 || local_rank >= local_world_size {
        return Err(RankEnvError::RankOutOfRange {
            rank_var: local.local_rank,
            rank: local_rank,
            size_var: local.local_size,
            world_size: local_world_size,
        });
    }
    Ok(local_world_size)
}

/// The launcher convention whose local variables say this rank's place on its node and the
/// job's nodes: the one that named this rank (`chosen`, found as `named`). Only that launcher
/// counts: an allocation's Slurm variables around a one-host symmem-run or torchrun job say
/// nothing about that job. One exception: `srun --mpi=pmi2` (or `pmi`) names its tasks with
/// PMI's rank and size but gives no per-node count; Slurm's step variables, naming the same
/// rank of the same size, then say it (a step's, never an allocation's: a batch script has no
/// `SLURM_STEP_NUM_NODES`).
fn local_convention<'a>(
    chosen: &'a Convention,
    named: &Found,
    found: &[(&'a Convention, Found)],
    get: &impl Fn(&str) -> Option<String>,
) -> &'a Convention {
    if chosen.launcher != Launcher::Pmi
        || get(chosen.local_size).is_some()
        || get("SLURM_STEP_NUM_NODES").is_none()
    {
        return chosen;
    }
    found
        .iter()
        .find(|(c, f)| {
            c.launcher == Launcher::Slurm
                && (f.rank, f.world_size) == (named.rank, named.world_size)
        })
        .map_or(chosen, |(c, _)| *c)
}

/// This node's count of ranks and the job's nodes, as `local`'s variables say them.
fn layout(
    local: &Convention,
    get: &impl Fn(&str) -> Option<String>,
) -> (Option<usize>, Option<NodeCount>) {
    match local.launcher {
        Launcher::Slurm => slurm_layout(get),
        _ => (
            get(local.local_size).and_then(|v| v.trim().parse().ok()),
            None,
        ),
    }
}

/// Slurm's tasks on this rank's node and its nodes, from the step's variables before the
/// allocation's (a one-node step inside a two-node allocation runs on one node). The per-node
/// count is a list such as `3,1` or `2(x2),1`: this node's entry is the one at
/// `SLURM_NODEID`; `--ntasks-per-node` gives one plain number for every node. Either is
/// `None` where Slurm does not say.
fn slurm_layout(get: &impl Fn(&str) -> Option<String>) -> (Option<usize>, Option<NodeCount>) {
    let nodes = ["SLURM_STEP_NUM_NODES", "SLURM_NNODES"]
        .into_iter()
        .find_map(|var| {
            let nodes = get(var)?.trim().parse().ok()?;
            Some(NodeCount { var, nodes })
        });
    let per_node = [
        "SLURM_STEP_TASKS_PER_NODE",
        "SLURM_TASKS_PER_NODE",
        "SLURM_NTASKS_PER_NODE",
    ]
    .into_iter()
    .find_map(|var| expand_tasks_per_node(&get(var)?));
    let node = get("SLURM_NODEID").and_then(|v| v.trim().parse::<usize>().ok());
    let local = per_node.and_then(|counts| match (counts.as_slice(), node) {
        ([only], _) => Some(*only),
        (counts, Some(node)) => counts.get(node).copied(),
        (_, None) => None,
    });
    (local, nodes)
}

/// Slurm's per-node task counts, one entry per node: `2(x2),1` is `[2, 2, 1]`. `None` when
/// the text is not of that form.
pub(crate) fn expand_tasks_per_node(text: &str) -> Option<Vec<usize>> {
    let mut counts = Vec::new();
    for part in text.trim().split(',') {
        let (count, times) = match part.trim().split_once('(') {
            Some((count, rest)) => (count, rest.strip_suffix(')')?.strip_prefix('x')?),
            None => (part, "1"),
        };
        let (count, times): (usize, usize) = (count.trim().parse().ok()?, times.parse().ok()?);
        // A node count beyond any machine is a malformed value, not an allocation.
        if times > 1 << 20 {
            return None;
        }
        counts.extend(std::iter::repeat_n(count, times));
    }
    Some(counts)
}

/// Fails when the conventions present cannot all be right (see [`RankIdentity::from_vars`]).
fn check_agreement(
    found: &[(&Convention, Found)],
    get: &impl Fn(&str) -> Option<String>,
) -> Result<(), RankEnvError> {
    let agree = |a: &Found, b: &Found| (a.rank, a.world_size) == (b.rank, b.world_size);
    let find = |l: Launcher| found.iter().map(|(_, f)| f).find(|f| f.launcher == l);
    let conflict = |hint: String| RankEnvError::Conflict {
        found: found.iter().map(|(_, f)| f.clone()).collect(),
        hint,
    };
    // torchrun (and symmem-run) set these next to RANK; an export by hand does not.
    let torchrun_set = ["TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT"]
        .iter()
        .any(|v| get(v).is_some());
    if let Some(torch) = find(Launcher::Torchrun)
        && !torchrun_set
        && let Some(other) = found.iter().map(|(_, f)| f).find(|f| !agree(torch, f))
    {
        return Err(conflict(format!(
            "RANK and WORLD_SIZE look exported by hand (no TORCHELASTIC_* variables, so torchrun \
             did not set them) and contradict {}: unset RANK and WORLD_SIZE if they are stale",
            other.launcher
        )));
    }
    if let (Some(ompi), Some(pmi)) = (find(Launcher::OpenMpi), find(Launcher::Pmi))
        && !agree(ompi, pmi)
    {
        return Err(conflict(
            "Open MPI and PMI each set their variables for the process they start, so one of \
             them is stale: unset it"
                .to_string(),
        ));
    }
    Ok(())
}

/// Launchers' variables that name one job (or one attempt of it): the same in every rank of a
/// job, different between two jobs running at once. `MASTER_ADDR`/`MASTER_PORT` and the
/// `TORCHELASTIC_*` ids are torchrun's (and symmem-run's), then Slurm's job and step, Open
/// MPI's job id and PMIx namespace, and MPICH's key-value space.
const JOB_VARS: [&str; 9] = [
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "MASTER_ADDR",
    "MASTER_PORT",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "OMPI_MCA_ess_base_jobid",
    "PMIX_NAMESPACE",
    "PMI_KVSNAME",
];

/// What this process can show of the job it belongs to: [`RUN_ID`] (symmem-run's) and each
/// launcher job-id variable that is set, as `(name, value)` in a fixed order. Every rank of one
/// job holds the same evidence, so the rendezvous compares it to keep two jobs that share a
/// rendezvous folder apart. Ranks started by hand with none of these variables hold none: then
/// only the world size tells two jobs apart.
pub fn job_evidence(get: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    std::iter::once(RUN_ID.name)
        .chain(JOB_VARS)
        .filter_map(|var| {
            get(var)
                .filter(|v| !v.trim().is_empty())
                .map(|v| (var.to_string(), v))
        })
        .collect()
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
        Launcher::Pmix | Launcher::Singleton | Launcher::Group => None,
    }?;
    Some(path_component(&key))
}

/// `key` made usable as one path component.
fn path_component(key: &str) -> String {
    key.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The launcher process this one descends from that starts a job's ranks (srun's numbered
/// job step, mpirun, Open MPI's orted, MPICH's proxy), named with its pid: `None` for a
/// process a user, a batch script or an allocation's shell started.
pub fn rank_starter_ancestor() -> Option<String> {
    rank_starter(ancestors()).map(|(pid, name)| format!("{name} (pid {pid})"))
}

/// This process's ancestors, parent first: `(pid, comm, cmdline)` each, read from /proc
/// (at most 64; none where /proc cannot be read).
fn ancestors() -> impl Iterator<Item = (u32, String, String)> {
    let parent = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // `pid (comm) state ppid ...`: comm may hold spaces and parentheses.
        let after = &stat[stat.rfind(')')? + 1..];
        after.split_whitespace().nth(1)?.parse().ok()
    };
    std::iter::successors(parent(std::process::id()), move |&pid| parent(pid))
        .take_while(|&pid| pid > 1)
        .take(64)
        .map(|pid| {
            let read = |file: &str| {
                std::fs::read(format!("/proc/{pid}/{file}"))
                    .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                    .unwrap_or_default()
            };
            (pid, read("comm").trim().to_string(), read("cmdline"))
        })
}

/// The first of `ancestors` (`(pid, comm, cmdline)`, parent first) that starts a job's ranks
/// and gives each its launcher variables: a Slurm job step's `slurmstepd` (not a batch
/// script's, an allocation's shell or its extern step), `mpirun`/`mpiexec`/`orterun`/`prterun`,
/// Open MPI's `orted`/`prted`, MPICH's `hydra_pmi_proxy`. Its pid and how to name it.
fn rank_starter(
    ancestors: impl IntoIterator<Item = (u32, String, String)>,
) -> Option<(u32, String)> {
    const STARTERS: [&str; 7] = [
        "mpirun",
        "mpiexec",
        "orterun",
        "prterun",
        "orted",
        "prted",
        "hydra_pmi_proxy",
    ];
    ancestors.into_iter().find_map(|(pid, comm, cmdline)| {
        if STARTERS.contains(&comm.as_str()) {
            return Some((pid, comm));
        }
        // slurmstepd names itself `slurmstepd: [JOB.STEP]`; a numbered step is srun's.
        let step = cmdline
            .strip_prefix("slurmstepd: [")?
            .split(']')
            .next()?
            .rsplit('.')
            .next()?;
        (comm == "slurmstepd" && step.bytes().all(|b| b.is_ascii_digit()) && !step.is_empty())
            .then(|| (pid, format!("srun's job step ({})", cmdline.trim())))
    })
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

    fn chain(entries: &[(u32, &str, &str)]) -> Vec<(u32, String, String)> {
        entries
            .iter()
            .map(|(pid, comm, cmd)| (*pid, comm.to_string(), cmd.to_string()))
            .collect()
    }

    #[test]
    fn rank_starters_are_srun_steps_and_mpi_launchers_only() {
        let step = chain(&[
            (40, "apptainer", "Apptainer runtime parent"),
            (30, "slurmstepd", "slurmstepd: [17.0] "),
        ]);
        let (pid, name) = rank_starter(step).expect("a job step starts ranks");
        assert_eq!(pid, 30);
        assert!(
            name.contains("srun's job step") && name.contains("[17.0]"),
            "{name}"
        );
        for not_a_step in [
            "slurmstepd: [17.batch]",
            "slurmstepd: [17.extern]",
            "slurmstepd: [17.interactive]",
        ] {
            let chain = chain(&[(9, "bash", "bash job.sh"), (8, "slurmstepd", not_a_step)]);
            assert_eq!(rank_starter(chain), None, "{not_a_step}");
        }
        let orted = chain(&[(5, "sh", "sh -c x"), (4, "orted", "orted -mca ess env")]);
        assert_eq!(rank_starter(orted), Some((4, "orted".to_string())));
        let shell = chain(&[
            (5, "bash", "bash"),
            (4, "sshd", "sshd: me"),
            (3, "systemd", ""),
        ]);
        assert_eq!(rank_starter(shell), None);
    }

    #[test]
    fn pmix_identity_is_checked_and_names_its_folder_by_the_namespace() {
        let id = RankIdentity::from_pmix(2, 4, 0, 2, "slurm.pmix.17.0").unwrap();
        assert_eq!(
            (id.rank, id.world_size, id.local_rank, id.local_world_size),
            (2, 4, 0, 2)
        );
        assert_eq!(id.launcher, Launcher::Pmix);
        assert_eq!(id.job_key.as_deref(), Some("pmix-slurm.pmix.17.0"));
        let odd = RankIdentity::from_pmix(0, 2, 0, 1, "prterun-a/b@1").unwrap();
        assert_eq!(odd.job_key.as_deref(), Some("pmix-prterun-a_b_1"));
        for (rank, size, local, local_size) in [(4, 4, 0, 1), (0, 4, 2, 2), (0, 2, 0, 3)] {
            let err = RankIdentity::from_pmix(rank, size, local, local_size, "n").unwrap_err();
            assert!(matches!(err, RankEnvError::PmixNonsense { .. }), "{err}");
        }
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
            ("SLURM_NODEID", "1"),
            ("SLURM_NTASKS_PER_NODE", "4(x2)"),
            ("SLURM_JOB_ID", "77"),
            ("SLURM_STEP_ID", "0"),
        ])
        .unwrap();
        assert_eq!((id.rank, id.local_rank, id.local_world_size), (5, 1, 4));
        assert_eq!(id.job_key.as_deref(), Some("77-0"));

        let id = ident(&[("PMI_RANK", "0"), ("PMI_SIZE", "2")]).unwrap();
        assert_eq!((id.rank, id.world_size, id.launcher), (0, 2, Launcher::Pmi));
    }

    /// The issue-15 case: a stale `RANK=0 WORLD_SIZE=1` in an Open MPI job of 2 made every
    /// process "rank 0 of 1".
    #[test]
    fn stale_torchrun_variables_that_contradict_a_launcher_are_refused() {
        let err = ident(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
        ])
        .unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, RankEnvError::Conflict { .. }), "{text}");
        for part in [
            "RANK=0 WORLD_SIZE=1 (torchrun)",
            "OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 (Open MPI)",
            "unset RANK and WORLD_SIZE",
            &RANK_FROM.assignment(""),
        ] {
            assert!(text.contains(part), "{part}: {text}");
        }
        // Naming the launcher settles it.
        let id = ident(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            (RANK_FROM.name, "openmpi"),
        ])
        .unwrap();
        assert_eq!(
            (id.rank, id.world_size, id.launcher),
            (1, 2, Launcher::OpenMpi)
        );
        // Agreeing variables are no conflict.
        let id = ident(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
        ])
        .unwrap();
        assert_eq!((id.rank, id.world_size), (1, 2));
    }

    #[test]
    fn nested_launchers_take_the_innermost() {
        // srun around torchrun: torchrun's workers (8) in Slurm's tasks (2).
        let id = ident(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("RANK", "6"),
            ("WORLD_SIZE", "8"),
            ("TORCHELASTIC_RUN_ID", "job"),
        ])
        .unwrap();
        assert_eq!(
            (id.rank, id.world_size, id.launcher),
            (6, 8, Launcher::Torchrun)
        );
        // mpiexec (PMI) or mpirun (Open MPI) in a batch step whose SLURM_PROCID=0 every rank
        // inherited: the MPI launcher's rank, not Slurm's (which made every rank 0).
        let id = ident(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "4"),
            ("PMI_RANK", "3"),
            ("PMI_SIZE", "4"),
        ])
        .unwrap();
        assert_eq!((id.rank, id.launcher), (3, Launcher::Pmi));
        let id = ident(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
            ("OMPI_COMM_WORLD_RANK", "2"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
        ])
        .unwrap();
        assert_eq!((id.rank, id.launcher), (2, Launcher::OpenMpi));
    }

    #[test]
    fn per_process_launchers_that_disagree_are_refused() {
        let err = ident(&[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("PMI_RANK", "0"),
            ("PMI_SIZE", "2"),
        ])
        .unwrap_err()
        .to_string();
        assert!(err.contains("Open MPI and PMI"), "{err}");
        let err = ident(&[
            ("PMI_RANK", "0"),
            ("PMI_SIZE", "2"),
            (RANK_FROM.name, "slurm"),
        ])
        .unwrap_err();
        assert!(matches!(err, RankEnvError::BadRankFrom { .. }), "{err}");
        assert!(err.to_string().contains("=slurm names a launcher"), "{err}");
        // A name that is no launcher is the setting's own error, naming what it takes.
        let err = ident(&[
            ("PMI_RANK", "0"),
            ("PMI_SIZE", "2"),
            (RANK_FROM.name, "mpich"),
        ])
        .unwrap_err();
        let RankEnvError::InvalidSetting(e) = &err else {
            panic!("{err:?}");
        };
        assert_eq!((e.var, e.value.as_str()), (RANK_FROM.name, "mpich"));
        assert!(
            err.to_string().contains("torchrun, openmpi, slurm or pmi"),
            "{err}"
        );
    }

    #[test]
    fn job_evidence_names_the_launchers_job_ids_and_nothing_per_rank() {
        let vars: HashMap<&str, &str> = [
            ("RANK", "1"),
            ("LOCAL_RANK", "1"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29500"),
            ("SLURM_JOB_ID", ""),
            (RUN_ID.name, "r1"),
        ]
        .into_iter()
        .collect();
        let evidence = job_evidence(|k| vars.get(k).map(|v| v.to_string()));
        let pair = |k: &str, v: &str| (k.to_string(), v.to_string());
        assert_eq!(
            evidence,
            [
                pair(RUN_ID.name, "r1"),
                pair("MASTER_ADDR", "127.0.0.1"),
                pair("MASTER_PORT", "29500")
            ]
        );
        assert!(job_evidence(|_| None).is_empty());
    }

    #[test]
    fn slurm_per_node_lists_expand() {
        assert_eq!(expand_tasks_per_node("2(x2),1"), Some(vec![2, 2, 1]));
        assert_eq!(expand_tasks_per_node(" 3,1 "), Some(vec![3, 1]));
        assert_eq!(expand_tasks_per_node("4"), Some(vec![4]));
        for bad in ["", "2(x", "2(2)", "x,1", "2(x2"] {
            assert_eq!(expand_tasks_per_node(bad), None, "{bad}");
        }
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
        // Issue 24 (D4): a world size alone used to run as a singleton.
        let err = ident(&[("WORLD_SIZE", "4")]).unwrap_err();
        assert!(
            matches!(
                err,
                RankEnvError::Missing {
                    var: "WORLD_SIZE",
                    missing: "RANK",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("unset WORLD_SIZE"), "{err}");
        // Issue 24 (D13): the message named LOCAL_WORLD_SIZE=2 although it was unset.
        let err = ident(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "5")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("LOCAL_RANK=5 but LOCAL_WORLD_SIZE is unset") && !err.contains("=2"),
            "{err}"
        );
        assert!(matches!(
            ident(&[("RANK", "0")]).unwrap_err(),
            RankEnvError::Missing {
                missing: "WORLD_SIZE",
                ..
            }
        ));
    }
}

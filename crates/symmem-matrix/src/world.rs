//! Whether the ranks of a run met as the one job its layout asked for. Every result line
//! carries the rank and the world size its rank saw; a rank binary run through a container or
//! wrapper that drops the launcher's variables (`apptainer exec --cleanenv`, `docker run`
//! without `-e`) runs each rank as a job of its own, whose checks would all "pass". Such a run
//! fails as a whole, with one message, whatever its checks said.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use symmem::describe_ranks;
use symmem::settings::{RENDEZVOUS, RUN_ID};
use symmem_conformance::CheckResult;
use symmem_launch::Launcher;

/// Who a rank said it was: its rank in a job of `world_size` ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Identity {
    rank: usize,
    world_size: usize,
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rank {} of a {}-rank job", self.rank, self.world_size)
    }
}

/// The identities the ranks of one run reported, each with the ranks (as the launcher numbers
/// the processes it started) that reported it.
#[derive(Clone, Debug, Default)]
pub struct Reported(BTreeMap<Identity, BTreeSet<usize>>);

impl Reported {
    /// A result line from the process the launcher numbers `launched`.
    pub fn add(&mut self, launched: usize, result: &CheckResult) {
        let identity = Identity {
            rank: result.rank,
            world_size: result.world_size,
        };
        self.0.entry(identity).or_default().insert(launched);
    }

    /// `Ok` when every rank saw the job of `asked` ranks, each as a rank of its own (or sent no
    /// result at all: that a check's verdict tells); otherwise what they saw instead.
    pub fn check(&self, asked: usize, launcher: &Launcher) -> Result<(), NotOneJob> {
        let mut processes = BTreeMap::<usize, usize>::new();
        for launched in self.0.values().flatten() {
            *processes.entry(*launched).or_default() += 1;
        }
        let met = self.0.iter().all(|(identity, launched)| {
            identity.world_size == asked && identity.rank < asked && launched.len() == 1
        }) && processes.values().all(|&n| n == 1);
        if met {
            return Ok(());
        }
        Err(NotOneJob {
            asked,
            reported: self.0.clone(),
            variables: variables(launcher),
        })
    }
}

/// The ranks of a run did not meet as the job its layout asked for: they saw another world
/// size, or several of them the same rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotOneJob {
    asked: usize,
    reported: BTreeMap<Identity, BTreeSet<usize>>,
    /// The launcher's variables that say who a rank is, for the fix.
    variables: String,
}

impl fmt::Display for NotOneJob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let noun = if self.asked == 1 { "rank" } else { "ranks" };
        write!(f, "the layout asked for {} {noun}, but ", self.asked)?;
        let launched: BTreeSet<usize> = self.reported.values().flatten().copied().collect();
        match self.reported.iter().collect::<Vec<_>>().as_slice() {
            [(identity, _)] if launched.len() == 1 => write!(f, "its rank ran as {identity}")?,
            [(identity, _)] => write!(f, "every rank ran as {identity}")?,
            groups => {
                let each: Vec<String> = groups
                    .iter()
                    .map(|(identity, launched)| {
                        let list: Vec<usize> = launched.iter().copied().collect();
                        format!("{} as {identity}", describe_ranks(&list))
                    })
                    .collect();
                write!(
                    f,
                    "they did not each see that job once (by the launcher's numbering: {})",
                    each.join("; ")
                )?;
            }
        }
        write!(
            f,
            ". The launcher's variables did not reach the ranks as it set them: most likely the \
             rank binary runs in a container or wrapper that drops the environment (`apptainer \
             exec --cleanenv` or `--containall`, `docker run` without `-e`). Fix: drop \
             --cleanenv/--containall, or pass the launcher's variables ({}) on: Apptainer \
             passes APPTAINERENV_<NAME> as <NAME>, Docker takes `-e <NAME>` for each",
            self.variables
        )
    }
}

impl std::error::Error for NotOneJob {}

/// The variables through which `launcher` tells a rank who it is and which run it belongs to
/// (symmem-launch's local.rs and external.rs set them).
fn variables(launcher: &Launcher) -> String {
    let own = match launcher {
        Launcher::Local => format!(
            "RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, {}",
            RENDEZVOUS.name
        ),
        Launcher::Mpirun(_) => "OMPI_*, PMIX_*".to_string(),
        Launcher::Srun(_) => "SLURM_*, PMIX_*".to_string(),
    };
    format!("{own}, {}", RUN_ID.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use symmem_conformance::Status;

    fn line(rank: usize, world_size: usize) -> CheckResult {
        CheckResult {
            check: "1".into(),
            name: "n".into(),
            rank,
            world_size,
            provider: "host".into(),
            status: Status::Pass,
            detail: String::new(),
            micros: 1,
        }
    }

    /// The ranks' identities, `(launched, rank, world_size)` each, checked against `asked`.
    fn check(asked: usize, lines: &[(usize, usize, usize)]) -> Result<(), String> {
        let mut reported = Reported::default();
        for &(launched, rank, world_size) in lines {
            reported.add(launched, &line(rank, world_size));
            // A second check's line from the same rank changes nothing.
            reported.add(launched, &line(rank, world_size));
        }
        reported
            .check(asked, &Launcher::Local)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn ranks_that_met_pass_and_missing_ones_are_left_to_the_checks() {
        assert_eq!(
            check(4, &[(0, 0, 4), (1, 1, 4), (2, 2, 4), (3, 3, 4)]),
            Ok(())
        );
        assert_eq!(check(4, &[(0, 0, 4), (2, 2, 4)]), Ok(()));
        assert_eq!(check(1, &[(0, 0, 1)]), Ok(()));
        assert_eq!(check(4, &[]), Ok(()));
    }

    #[test]
    fn ranks_that_ran_alone_fail_with_one_message_and_the_fix() {
        let e = check(4, &[(0, 0, 1), (1, 0, 1), (2, 0, 1), (3, 0, 1)]).unwrap_err();
        assert!(
            e.starts_with(
                "the layout asked for 4 ranks, but every rank ran as rank 0 of a 1-rank job. "
            ),
            "{e}"
        );
        assert!(e.contains("--cleanenv") && e.contains("docker run"), "{e}");
        assert!(
            e.contains("APPTAINERENV_<NAME>") && e.contains("RANK, WORLD_SIZE"),
            "{e}"
        );
        assert!(
            e.contains(RENDEZVOUS.name) && e.contains(RUN_ID.name),
            "{e}"
        );
        let e = check(1, &[(0, 0, 2)]).unwrap_err();
        assert!(
            e.starts_with("the layout asked for 1 rank, but its rank ran as rank 0 of a 2-rank"),
            "{e}"
        );
    }

    #[test]
    fn duplicate_ranks_and_ranks_outside_the_layout_fail() {
        // The right world size, but two processes as rank 0.
        let e = check(2, &[(0, 0, 2), (1, 0, 2)]).unwrap_err();
        assert!(
            e.contains("every rank ran as rank 0 of a 2-rank job"),
            "{e}"
        );
        // A rank beyond the layout.
        let e = check(2, &[(0, 0, 2), (1, 5, 2)]).unwrap_err();
        assert!(
            e.contains(
                "by the launcher's numbering: rank 0 as rank 0 of a 2-rank job; rank 1 as rank 5 \
                 of a 2-rank job"
            ),
            "{e}"
        );
        // Some met, some ran alone.
        let e = check(3, &[(0, 0, 3), (1, 1, 3), (2, 0, 1)]).unwrap_err();
        assert!(e.contains("rank 2 as rank 0 of a 1-rank job"), "{e}");
        // One process that changed its mind.
        assert!(check(3, &[(0, 0, 3), (1, 1, 3), (1, 2, 3)]).is_err());
    }

    #[test]
    fn the_fix_names_each_launchers_variables() {
        assert!(variables(&Launcher::Srun(Default::default())).starts_with("SLURM_*, PMIX_*"));
        let hosts = symmem_launch::Hosts::List(vec!["a".into()]);
        let mpirun = Launcher::Mpirun(symmem_launch::Mpirun::new(hosts));
        assert!(variables(&mpirun).starts_with("OMPI_*, PMIX_*"));
    }
}

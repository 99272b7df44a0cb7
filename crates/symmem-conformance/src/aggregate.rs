use crate::{CHECKS, CheckInfo, CheckResult, Status};
use symmem::describe_ranks;

/// The verdict of one check over all ranks of one run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckVerdict {
    pub id: &'static str,
    pub name: &'static str,
    pub status: Status,
    /// Why it failed or was skipped.
    pub detail: String,
    /// The slowest rank's time.
    pub micros: u64,
}

/// All ranks' results of one run, folded per check.
#[derive(Clone, Debug)]
pub struct Aggregate {
    pub world_size: usize,
    pub verdicts: Vec<CheckVerdict>,
}

impl Aggregate {
    /// Folds `results` of a `world_size`-rank run. A check passes when every rank passed,
    /// is skipped when every rank skipped, and fails otherwise, including when a rank sent no
    /// result (it died, or the suite stopped before the check).
    pub fn new(world_size: usize, results: &[CheckResult]) -> Self {
        let all: Vec<&CheckInfo> = CHECKS.iter().collect();
        Self::of(world_size, &all, results)
    }

    /// Folds `results` as [`Aggregate::new`] does, over the checks in `checks` only (a run of
    /// `symmem-conformance --check ...`): one verdict per check, in the order given.
    pub fn of(world_size: usize, checks: &[&CheckInfo], results: &[CheckResult]) -> Self {
        let verdicts = checks
            .iter()
            .map(|info| {
                let mine: Vec<&CheckResult> =
                    results.iter().filter(|r| r.check == info.id).collect();
                let micros = mine.iter().map(|r| r.micros).max().unwrap_or(0);
                let (status, detail) = verdict(world_size, &mine);
                CheckVerdict {
                    id: info.id,
                    name: info.name,
                    status,
                    detail,
                    micros,
                }
            })
            .collect();
        Self {
            world_size,
            verdicts,
        }
    }

    pub fn count(&self, status: Status) -> usize {
        self.verdicts.iter().filter(|v| v.status == status).count()
    }
}

fn verdict(world_size: usize, results: &[&CheckResult]) -> (Status, String) {
    let ranks_with = |status: Status| -> Vec<usize> {
        let mut r: Vec<usize> = results
            .iter()
            .filter(|r| r.status == status)
            .map(|r| r.rank)
            .collect();
        r.sort_unstable();
        r.dedup();
        r
    };
    let missing: Vec<usize> = (0..world_size)
        .filter(|rank| !results.iter().any(|r| r.rank == *rank))
        .collect();
    if let Some(first) = results
        .iter()
        .filter(|r| r.status == Status::Fail)
        .min_by_key(|r| r.rank)
    {
        let failed = ranks_with(Status::Fail);
        return (
            Status::Fail,
            format!(
                "{} failed; rank {}: {}",
                describe_ranks(&failed),
                first.rank,
                first.detail
            ),
        );
    }
    if !missing.is_empty() {
        return (
            Status::Fail,
            format!(
                "no result from {} (the rank died or its suite stopped earlier)",
                describe_ranks(&missing)
            ),
        );
    }
    let skipped = ranks_with(Status::Skip);
    if skipped.is_empty() {
        return (Status::Pass, String::new());
    }
    let mut reasons: Vec<&str> = results
        .iter()
        .filter(|r| r.status == Status::Skip)
        .map(|r| r.detail.as_str())
        .collect();
    reasons.sort_unstable();
    reasons.dedup();
    if skipped.len() == world_size {
        (Status::Skip, reasons.join("; "))
    } else {
        (
            Status::Fail,
            format!(
                "ranks disagree: {} skipped ({}) while the others passed",
                describe_ranks(&skipped),
                reasons.join("; ")
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(check: &str, rank: usize, status: Status, detail: &str) -> CheckResult {
        CheckResult {
            check: check.into(),
            name: String::new(),
            rank,
            world_size: 2,
            provider: "host".into(),
            status,
            detail: detail.into(),
            micros: 10 * rank as u64 + 5,
        }
    }

    #[test]
    fn folds_per_check() {
        let results = vec![
            result("1", 0, Status::Pass, ""),
            result("1", 1, Status::Pass, ""),
            result("2", 0, Status::Skip, "needs >= 2 ranks"),
            result("2", 1, Status::Skip, "needs >= 2 ranks"),
            result("3", 0, Status::Pass, ""),
            result("3", 1, Status::Fail, "slot 3: got 0"),
            result("4", 0, Status::Pass, ""),
            result("5", 0, Status::Pass, ""),
            result("5", 1, Status::Skip, "why"),
        ];
        let agg = Aggregate::new(2, &results);
        let v = |id: &str| agg.verdicts.iter().find(|v| v.id == id).unwrap().clone();
        assert_eq!(v("1").status, Status::Pass);
        assert_eq!(v("1").micros, 15);
        assert_eq!(
            (v("2").status, v("2").detail.as_str()),
            (Status::Skip, "needs >= 2 ranks")
        );
        assert_eq!(v("3").status, Status::Fail);
        assert!(v("3").detail.contains("rank 1: slot 3: got 0"));
        assert_eq!(v("4").status, Status::Fail);
        assert!(v("4").detail.contains("no result from rank 1"));
        assert_eq!(v("5").status, Status::Fail);
        assert!(v("5").detail.contains("ranks disagree"));
        // Checks nobody reported on fail too.
        assert_eq!(v("10b").status, Status::Fail);
        assert_eq!(agg.count(Status::Pass), 1);
    }

    #[test]
    fn folds_only_the_chosen_checks() {
        let chosen = [crate::check("7").unwrap(), crate::check("3").unwrap()];
        let results = vec![
            result("3", 0, Status::Pass, ""),
            result("3", 1, Status::Pass, ""),
            result("7", 0, Status::Pass, ""),
        ];
        let agg = Aggregate::of(2, &chosen, &results);
        let ids: Vec<&str> = agg.verdicts.iter().map(|v| v.id).collect();
        assert_eq!(ids, ["7", "3"]);
        assert_eq!(agg.verdicts[0].status, Status::Fail);
        assert!(agg.verdicts[0].detail.contains("no result from rank 1"));
        assert_eq!(agg.verdicts[1].status, Status::Pass);
        assert_eq!((agg.count(Status::Pass), agg.count(Status::Fail)), (1, 1));
    }
}

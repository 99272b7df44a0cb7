//! Naming the culprit of a failed run, from how and in which poll each rank
//! ended, by the rules of the failure policy (ARCHITECTURE.md, "Failure policy").

use crate::report::{EXIT_PEER_FAILED, Ended, Lost, Outcome};

/// How one rank stands when the launcher is about to send `SIGTERM`: `None`
/// while it runs, else how it ended and the number of the poll in which the
/// launcher saw it end (polls are numbered in increasing order).
pub(crate) type End = Option<(Ended, u64)>;

/// The outcome of a run in which at least one rank failed, or `None` if no
/// rank failed. `ends` is indexed by rank.
pub(crate) fn blame(ends: &[End]) -> Option<Outcome> {
    let mut failures: Vec<(u64, usize, Ended)> = ends
        .iter()
        .enumerate()
        .filter_map(|(rank, end)| match *end {
            Some((how, poll)) if !how.success() => Some((poll, rank, how)),
            _ => None,
        })
        .collect();
    // Earliest poll first; within one poll the order is unknown: rank order.
    failures.sort_unstable_by_key(|&(poll, rank, _)| (poll, rank));
    let &(_, first_rank, first_how) = failures.first()?;

    // (a) A failure of its own beats every report of a lost peer.
    let peer_failed = Ended::Exited(EXIT_PEER_FAILED);
    if let Some(&(_, rank, how)) = failures.iter().find(|&&(_, _, how)| how != peer_failed) {
        return Some(Outcome::RankFailed { rank, how });
    }
    let reporters: Vec<usize> = failures.iter().map(|&(_, rank, _)| rank).collect();

    // (b) Ranks that left successfully while the others still needed them:
    // every success counts, whenever it was seen. A peer's report follows the
    // departure (it learns of it when the departed rank's sockets close, in
    // the middle of its exit), yet the kernel may show the reporter's end
    // first: under load a departed rank can still be tearing down when its
    // peers have already exited 75. The poll order says nothing here. A rank
    // that had finished all its work cannot have caused a report: the
    // collectives it completed complete for every rank.
    let early: Vec<usize> = ends
        .iter()
        .enumerate()
        .filter(|(_, end)| matches!(end, Some((how, _)) if how.success()))
        .map(|(rank, _)| rank)
        .collect();
    if !early.is_empty() {
        return Some(Outcome::PeerLost {
            culprits: early,
            reason: Lost::ExitedEarly,
            reporters,
        });
    }

    // (c) Ranks that neither finished nor gave up themselves during the
    // settle window: still running when the first rank gave up, and hung
    // since, as far as the launcher can tell.
    let running: Vec<usize> = ends
        .iter()
        .enumerate()
        .filter(|(_, end)| end.is_none())
        .map(|(rank, _)| rank)
        .collect();
    if !running.is_empty() {
        return Some(Outcome::PeerLost {
            culprits: running,
            reason: Lost::StillRunning,
            reporters,
        });
    }

    // (d) Everyone gave up on someone, and no one is left to blame.
    Some(Outcome::RankFailed {
        rank: first_rank,
        how: first_how,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: Ended = Ended::Exited(0);
    const PEER: Ended = Ended::Exited(EXIT_PEER_FAILED);

    #[test]
    fn no_failure_no_culprit() {
        assert_eq!(blame(&[Some((OK, 1)), None]), None);
        assert_eq!(blame(&[]), None);
    }

    #[test]
    fn own_failure_beats_earlier_peer_failures_and_lower_ranks() {
        // Ranks 0 and 1 report the loss in the same poll as rank 2 panics, and
        // rank 3 even before: rank 2 is still the culprit.
        let ends = [
            Some((PEER, 5)),
            Some((PEER, 5)),
            Some((Ended::Exited(101), 5)),
            Some((PEER, 4)),
        ];
        assert_eq!(
            blame(&ends),
            Some(Outcome::RankFailed {
                rank: 2,
                how: Ended::Exited(101)
            })
        );
        // Of two failures of their own, the earlier poll wins, then the lower
        // rank.
        let ends = [
            Some((Ended::Signaled(11), 7)),
            Some((Ended::Exited(3), 6)),
            Some((Ended::Exited(4), 6)),
        ];
        assert_eq!(
            blame(&ends),
            Some(Outcome::RankFailed {
                rank: 1,
                how: Ended::Exited(3)
            })
        );
    }

    #[test]
    fn a_rank_that_left_early_is_named() {
        // Rank 1 exited 0 in the poll before the others gave up.
        let ends = [Some((PEER, 9)), Some((OK, 8)), Some((PEER, 10)), None];
        assert_eq!(
            blame(&ends),
            Some(Outcome::PeerLost {
                culprits: vec![1],
                reason: Lost::ExitedEarly,
                reporters: vec![0, 2],
            })
        );
        // Seen in the same poll as the first report.
        let ends = [Some((PEER, 3)), Some((OK, 3)), None];
        assert_eq!(
            blame(&ends),
            Some(Outcome::PeerLost {
                culprits: vec![1],
                reason: Lost::ExitedEarly,
                reporters: vec![0],
            })
        );
    }

    /// The race of issue 11: the departed rank's exit is seen a poll AFTER
    /// the reports it caused (it was still tearing down). It is still the
    /// one, not the first reporter.
    #[test]
    fn a_departure_seen_after_the_reports_it_caused_is_named() {
        let ends = [
            Some((PEER, 5)),
            Some((OK, 6)),
            Some((PEER, 5)),
            Some((PEER, 6)),
        ];
        assert_eq!(
            blame(&ends),
            Some(Outcome::PeerLost {
                culprits: vec![1],
                reason: Lost::ExitedEarly,
                reporters: vec![0, 2, 3],
            })
        );
        // A departure beats a rank still running: the departure is a fact,
        // "still running" only an absence of news.
        let ends = [Some((PEER, 5)), None, Some((OK, 7))];
        assert_eq!(
            blame(&ends),
            Some(Outcome::PeerLost {
                culprits: vec![2],
                reason: Lost::ExitedEarly,
                reporters: vec![0],
            })
        );
    }

    #[test]
    fn ranks_still_running_are_named_not_the_slower_reporters() {
        // Rank 0 gave up first; ranks 1 and 2 gave up a poll later (they were
        // still running when rank 0 did); rank 3 never did: it is the one.
        let ends = [Some((PEER, 20)), Some((PEER, 21)), Some((PEER, 21)), None];
        assert_eq!(
            blame(&ends),
            Some(Outcome::PeerLost {
                culprits: vec![3],
                reason: Lost::StillRunning,
                reporters: vec![0, 1, 2],
            })
        );
    }

    #[test]
    fn reports_without_anyone_to_blame_name_the_first() {
        let ends = [Some((PEER, 2)), Some((PEER, 1))];
        assert_eq!(
            blame(&ends),
            Some(Outcome::RankFailed { rank: 1, how: PEER })
        );
    }
}

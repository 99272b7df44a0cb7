//! Naming the culprit of a failed run, from how and in which poll each rank
//! ended, by the rules of the failure policy (ARCHITECTURE.md, "Failure policy").

use crate::report::{EXIT_PEER_FAILED, Ended, Lost, Outcome};

/// What symmem writes when a rank gives up on another rank across nodes: the rendezvous fence
/// of the engine (PMIx) timed out or lost a rank, or a collective over symmem's own links found
/// a rank (its node's leader, rank 0) missing, gone or silent. A rank whose output holds one of
/// these is a witness, not the culprit. symmem-bootstrap's `EngineTimeout`, `EnginePeerLost`,
/// `CollectiveFailure::{NeverArrived, PeerGone, GoneFromNode}`, `RootGone`, `RootSilent`,
/// `LeaderGone` and `LeaderSilent` messages, and at start-up `AcceptTimeout`,
/// `ConnectTimeout`, `NoWelcome` and `LeadersMissing`; a test of symmem-launch checks that each still says
/// one.
pub const WITNESS_REPORTS: [&str; 10] = [
    "not every rank reached collective",
    "was lost during collective",
    "never arrived at collective",
    "disconnected before collective",
    "disconnected during collective",
    "did not answer collective",
    "never connected to rank",
    "could not reach rank",
    "never reached rank 0",
    "never answered the rendezvous",
];

/// Whether a rank's line is a witness's report ([`WITNESS_REPORTS`]).
pub(crate) fn is_witness_report(text: &str) -> bool {
    WITNESS_REPORTS.iter().any(|phrase| text.contains(phrase))
}

/// The ranks that a report of a timed-out collective says never arrived: `rank 5 never
/// arrived at collective ...`, `ranks 2, 3 never arrived ...`, `ranks 0-3, 7 never arrived
/// ...` (symmem's `describe_ranks`). `None` for any other line.
pub(crate) fn never_arrived(text: &str) -> Option<Vec<usize>> {
    ranks_before(text, " never arrived at collective")
}

/// The ranks a witness's report names as the ones it waited for in vain: those that never
/// arrived at a collective, never connected to their star's centre, or, at start-up, the
/// centre a rank could not reach and the node leaders that never reached rank 0.
pub(crate) fn accused(text: &str) -> Option<Vec<usize>> {
    if let Some(ranks) = never_arrived(text) {
        return Some(ranks);
    }
    if let Some((rank, _)) = gone(text) {
        return Some(vec![rank]);
    }
    if let Some(ranks) = ranks_before(text, " never connected to rank ") {
        return Some(ranks);
    }
    if let Some(ranks) = ranks_before(text, " never answered the rendezvous") {
        return Some(ranks);
    }
    if let Some((_, after)) = text.split_once("could not reach rank ") {
        let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
        return Some(vec![digits.parse().ok()?]);
    }
    let (_, after) = text.split_once("the leaders of other nodes (")?;
    rank_list(after.split(')').next()?)
}

/// The rank a witness's report says went away (its process ended: it exited or crashed, or
/// its node was cut off), with its node where the report names it: `rank 3 on node node-b was
/// lost during collective ...`, `rank 3 disconnected before collective ...`.
pub(crate) fn gone(text: &str) -> Option<(usize, Option<String>)> {
    if let Some(at) = text.find(" was lost during collective") {
        let before = &text[..at];
        let (head, node) = before.rsplit_once(" on node ")?;
        return match rank_list(&head[head.rfind("rank")?..])?.as_slice() {
            [rank] => Some((*rank, Some(node.to_string()))),
            _ => None,
        };
    }
    match ranks_before(text, " disconnected before collective")?.as_slice() {
        [rank] => Some((*rank, None)),
        _ => None,
    }
}

/// The ranks (`rank 5`, `ranks 2, 3`, `ranks 0-3, 7`: symmem's `describe_ranks`) just before
/// `phrase` in `text`.
fn ranks_before(text: &str, phrase: &str) -> Option<Vec<usize>> {
    let before = &text[..text.find(phrase)?];
    rank_list(&before[before.rfind("rank")?..])
}

/// `rank 5`, `ranks 2, 3` or `ranks 0-3, 7` as ranks.
fn rank_list(text: &str) -> Option<Vec<usize>> {
    let list = text.strip_prefix("rank")?;
    let list = list.strip_prefix("s ").or_else(|| list.strip_prefix(' '))?;
    let mut ranks = Vec::new();
    for part in list.split(", ") {
        match part.split_once('-') {
            Some((first, last)) => ranks.extend(first.parse::<usize>().ok()?..=last.parse().ok()?),
            None => ranks.push(part.parse().ok()?),
        }
    }
    Some(ranks)
}

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
    fn a_rank_that_went_away_is_read_with_its_node() {
        assert_eq!(
            gone(
                "host: rank 3 on node node-b was lost during collective #6 barrier (it exited, \
                 crashed, or its node or the network to it failed)"
            ),
            Some((3, Some("node-b".to_string())))
        );
        assert_eq!(
            gone("host: rank 1 disconnected before collective #2 malloc(8 B) (it exited)"),
            Some((1, None))
        );
        assert_eq!(gone("rank 3 never arrived at collective #2"), None);
        assert_eq!(
            accused("rank 3 on node node-b was lost during collective #6 barrier"),
            Some(vec![3])
        );
    }

    #[test]
    fn the_ranks_a_start_up_report_waited_for_are_read() {
        assert_eq!(
            accused("rank 3 never connected to rank 2 at /tmp/x/node-1/rank0.sock within 10s"),
            Some(vec![3])
        );
        assert_eq!(
            accused("ranks 1, 3 never connected to rank 0 at /tmp/r/rank0.sock within 10s"),
            Some(vec![1, 3])
        );
        assert_eq!(
            accused("rank 3 could not reach rank 2 at /tmp/x/node-1/rank0.sock within 10s"),
            Some(vec![2])
        );
        assert_eq!(
            accused(
                "the leaders of other nodes (ranks 2, 4) never reached rank 0 at 127.0.0.2:5 \
                 within 12s; let TCP ..."
            ),
            Some(vec![2, 4])
        );
        assert_eq!(
            accused("lost: ranks 2-3 never arrived at collective #4 barrier"),
            Some(vec![2, 3])
        );
        assert_eq!(
            accused("rank 2 never answered the rendezvous within 11s: it accepted ..."),
            Some(vec![2])
        );
        assert_eq!(accused("check 5 passed"), None);
    }

    #[test]
    fn the_ranks_that_never_arrived_are_read() {
        let report = |list: &str| {
            format!(
                "lost: {list} never arrived at collective #2 barrier within 3s (hung, or out of \
                 order with the other ranks); raise the collective timeout if ..."
            )
        };
        assert_eq!(never_arrived(&report("rank 5")), Some(vec![5]));
        assert_eq!(never_arrived(&report("ranks 2, 3")), Some(vec![2, 3]));
        assert_eq!(
            never_arrived(&report("ranks 0-3, 7")),
            Some(vec![0, 1, 2, 3, 7])
        );
        assert_eq!(
            never_arrived("rank 2 on node b was lost during collective #2"),
            None
        );
        for missing in [vec![4], vec![1, 2], vec![0, 1, 2, 3, 9]] {
            let text = report(&symmem::describe_ranks(&missing));
            assert_eq!(never_arrived(&text), Some(missing), "{text}");
        }
    }

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

//! What the ranks below a node leader called, in a form whose size follows the number of
//! distinct calls and payloads, not the number of ranks: each leader folds its node's calls
//! and those its children sent up into one [`Calls`], so rank 0 reads k entries per collective
//! (k the tree's fan-out), not one per rank, and the answer it sends down ([`Payloads`]) is a
//! few bytes when every rank gave the same payload (a barrier's, an allocation's: none).
//!
//! Ranks travel as runs ([`Runs`]): a subtree's ranks are a few runs where nodes hold blocks of
//! ranks (one run per level of the tree below a leader), one per rank at worst.

use serde::{Deserialize, Serialize};
use std::fmt;
use symmem::{CollectiveMismatch, CollectiveOp};

/// A set of ranks: sorted, disjoint, non-adjacent runs `[first, end)` (refused otherwise
/// when it comes off the wire).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<(usize, usize)>")]
pub(crate) struct Runs(Vec<(usize, usize)>);

impl TryFrom<Vec<(usize, usize)>> for Runs {
    type Error = String;

    fn try_from(runs: Vec<(usize, usize)>) -> Result<Self, String> {
        let mut end_before = None;
        for &(first, end) in &runs {
            if first >= end || end_before.is_some_and(|before| first <= before) {
                return Err(format!(
                    "rank runs {runs:?} are not sorted, apart and each non-empty"
                ));
            }
            end_before = Some(end);
        }
        Ok(Self(runs))
    }
}

impl Runs {
    /// The ranks of `ranks`, in any order; `Err(rank)` for a rank given twice.
    pub(crate) fn of(ranks: impl IntoIterator<Item = usize>) -> Result<Self, usize> {
        Self::union(ranks.into_iter().map(|r| (r, r + 1)).collect())
    }

    /// Every rank of every set, `Err(rank)` for a rank in two of them.
    pub(crate) fn union_of<'a>(sets: impl IntoIterator<Item = &'a Runs>) -> Result<Self, usize> {
        Self::union(sets.into_iter().flat_map(|s| s.0.iter().copied()).collect())
    }

    fn union(mut runs: Vec<(usize, usize)>) -> Result<Self, usize> {
        runs.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(runs.len());
        for (first, end) in runs.into_iter().filter(|(f, e)| f < e) {
            match merged.last_mut() {
                Some(last) if first < last.1 => return Err(first),
                Some(last) if first == last.1 => last.1 = end,
                _ => merged.push((first, end)),
            }
        }
        Ok(Self(merged))
    }

    pub(crate) fn len(&self) -> usize {
        self.0.iter().map(|(first, end)| end - first).sum()
    }

    /// The lowest rank, if any.
    pub(crate) fn lowest(&self) -> Option<usize> {
        self.0.first().map(|run| run.0)
    }

    /// Every rank, in order.
    pub(crate) fn ranks(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().flat_map(|&(first, end)| first..end)
    }

    /// The lowest rank of `0..count` not in this set.
    pub(crate) fn lowest_missing(&self, count: usize) -> Option<usize> {
        let mut next = 0;
        for &(first, end) in &self.0 {
            if first > next {
                break;
            }
            next = end;
        }
        (next < count).then_some(next)
    }
}

impl fmt::Display for Runs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let runs: Vec<String> = self
            .0
            .iter()
            .map(|&(first, end)| match end - first {
                1 => first.to_string(),
                _ => format!("{first}-{}", end - 1),
            })
            .collect();
        write!(f, "ranks {}", runs.join(", "))
    }
}

/// The payloads of a set of ranks, in rank order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Payloads {
    /// `count` ranks gave this same payload (a barrier's ranks: none).
    Same { count: usize, payload: Vec<u8> },
    /// One per rank.
    Each(Vec<Vec<u8>>),
}

impl Payloads {
    /// `each`, as [`Payloads::Same`] where every payload is the same.
    pub(crate) fn compact(each: Vec<Vec<u8>>) -> Self {
        match each.split_first() {
            Some((first, rest)) if rest.iter().all(|p| p == first) => Self::Same {
                count: each.len(),
                payload: first.clone(),
            },
            _ => Self::Each(each),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Self::Same { count, .. } => *count,
            Self::Each(each) => each.len(),
        }
    }

    /// One payload per rank.
    /// The bytes of every payload once expanded (the wire refuses more than a frame's worth).
    pub(crate) fn expanded_bytes(&self) -> usize {
        match self {
            Self::Same { count, payload } => count.saturating_mul(payload.len()),
            Self::Each(each) => each.iter().map(Vec::len).sum(),
        }
    }

    pub(crate) fn expand(self) -> Vec<Vec<u8>> {
        match self {
            Self::Same { count, payload } => vec![payload; count],
            Self::Each(each) => each,
        }
    }
}

/// The calls of a set of ranks to one collective: each distinct call with the ranks that made
/// it (one entry when they agree), and their payloads in the order of their ranks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Calls {
    pub(crate) issued: Vec<(CollectiveOp, Runs)>,
    pub(crate) payloads: Payloads,
}

/// Two parts of a fold named the same rank, or a part's payloads are not one per rank.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Malformed {
    Twice(usize),
    Payloads {
        ranks: usize,
        payloads: usize,
    },
    /// A call that names no rank.
    Empty(CollectiveOp),
}

/// Why rank 0 refuses the calls of every rank.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The call of this rank (the lowest missing) never came up.
    Missing(usize),
    /// A call came up for this rank, which is not one of the job's.
    Beyond(usize),
    /// The ranks disagree on the collective.
    Mismatch(CollectiveMismatch),
    Malformed(Malformed),
}

impl Calls {
    /// The calls of single ranks: `(rank, op, payload)`, in any order.
    pub(crate) fn of(calls: Vec<(usize, CollectiveOp, Vec<u8>)>) -> Result<Self, Malformed> {
        let parts = calls
            .into_iter()
            .map(|(rank, op, payload)| Self {
                issued: vec![(op, Runs(vec![(rank, rank + 1)]))],
                payloads: Payloads::Each(vec![payload]),
            })
            .collect();
        Self::fold(parts)
    }

    /// Every rank that called, `Err` where the parts of this one overlap or one names none.
    pub(crate) fn ranks(&self) -> Result<Runs, Malformed> {
        if let Some((op, _)) = self.issued.iter().find(|(_, runs)| runs.0.is_empty()) {
            return Err(Malformed::Empty(op.clone()));
        }
        Runs::union_of(self.issued.iter().map(|(_, runs)| runs)).map_err(Malformed::Twice)
    }

    /// One `Calls` for the ranks of all `parts` (disjoint sets of ranks).
    pub(crate) fn fold(parts: Vec<Calls>) -> Result<Self, Malformed> {
        let mut ranked = Vec::with_capacity(parts.len());
        for part in parts {
            let ranks = part.ranks()?;
            if ranks.len() != part.payloads.len() {
                return Err(Malformed::Payloads {
                    ranks: ranks.len(),
                    payloads: part.payloads.len(),
                });
            }
            ranked.push((ranks, part));
        }
        let all =
            Runs::union_of(ranked.iter().map(|(ranks, _)| ranks)).map_err(Malformed::Twice)?;
        let mut issued: Vec<(CollectiveOp, Vec<&Runs>)> = Vec::new();
        for (_, part) in &ranked {
            for (op, runs) in &part.issued {
                match issued.iter_mut().find(|(o, _)| o == op) {
                    Some((_, all)) => all.push(runs),
                    None => issued.push((op.clone(), vec![runs])),
                }
            }
        }
        let mut issued: Vec<(CollectiveOp, Runs)> = issued
            .into_iter()
            .map(|(op, runs)| {
                let runs = Runs::union_of(runs).expect("disjoint: checked above");
                (op, runs)
            })
            .collect();
        issued.sort_by_key(|(_, runs)| runs.lowest());
        let payloads = fold_payloads(ranked, &all);
        Ok(Self { issued, payloads })
    }

    /// Rank 0's verdict on the calls of every rank of a job of `world_size`: every payload in
    /// rank order, or why not.
    pub(crate) fn verdict(self, world_size: usize) -> Result<Payloads, Refusal> {
        let ranks = self.ranks().map_err(Refusal::Malformed)?;
        if let Some(missing) = ranks.lowest_missing(world_size) {
            return Err(Refusal::Missing(missing));
        }
        if let Some(&(first, end)) = ranks.0.last()
            && end > world_size
        {
            return Err(Refusal::Beyond(first.max(world_size)));
        }
        if self.issued.len() > 1 {
            let issued = self
                .issued
                .into_iter()
                .map(|(op, runs)| (runs.ranks().collect(), op))
                .collect();
            return Err(Refusal::Mismatch(CollectiveMismatch { issued }));
        }
        Ok(self.payloads)
    }
}

/// The payloads of every part (each one per rank of its `Runs`, checked by the fold), in the
/// order of `all` their ranks: one `Same` where every part gave the same payload, else one per
/// rank, each moved to its place (found from the runs, no sort: a leader of 8,192 ranks of
/// differing payloads places them in one pass).
fn fold_payloads(parts: Vec<(Runs, Calls)>, all: &Runs) -> Payloads {
    let count = all.len();
    let mut sames = parts.iter().map(|(_, part)| match &part.payloads {
        Payloads::Same { payload, .. } => Some(payload),
        Payloads::Each(each) => match each.split_first() {
            Some((first, rest)) if rest.iter().all(|p| p == first) => Some(first),
            _ => None,
        },
    });
    if let Some(Some(first)) = sames.next()
        && sames.all(|p| p == Some(first))
    {
        return Payloads::Same {
            count,
            payload: first.clone(),
        };
    }
    // Where each run of `all` starts among all the ranks.
    let starts: Vec<usize> = all
        .0
        .iter()
        .scan(0, |at, &(first, end)| {
            let start = *at;
            *at += end - first;
            Some(start)
        })
        .collect();
    let place = |rank: usize| {
        let run = all.0.partition_point(|&(_, end)| end <= rank);
        starts[run] + (rank - all.0[run].0)
    };
    let mut out: Vec<Vec<u8>> = vec![Vec::new(); count];
    for (ranks, part) in parts {
        let mut payloads: Box<dyn Iterator<Item = Vec<u8>>> = match part.payloads {
            Payloads::Same { count, payload } => Box::new(std::iter::repeat_n(payload, count)),
            Payloads::Each(each) => Box::new(each.into_iter()),
        };
        // A part's run lies whole inside one run of `all` (which holds every rank of it).
        for &(first, end) in &ranks.0 {
            let from = place(first);
            for (slot, payload) in out[from..from + (end - first)]
                .iter_mut()
                .zip(&mut payloads)
            {
                *slot = payload;
            }
        }
    }
    Payloads::compact(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use symmem::CollectiveKind;

    fn op(seq: u64) -> CollectiveOp {
        CollectiveOp {
            seq,
            kind: CollectiveKind::Barrier,
        }
    }

    fn singles(ranks: &[usize], seq: u64, payload: impl Fn(usize) -> Vec<u8>) -> Calls {
        Calls::of(ranks.iter().map(|&r| (r, op(seq), payload(r))).collect()).unwrap()
    }

    #[test]
    fn runs_merge_adjacent_ranks_and_refuse_a_rank_twice() {
        let runs = Runs::of([5, 0, 1, 2, 7, 6, 9]).unwrap();
        assert_eq!(runs.0, vec![(0, 3), (5, 8), (9, 10)]);
        assert_eq!(runs.len(), 7);
        assert_eq!(runs.to_string(), "ranks 0-2, 5-7, 9");
        assert_eq!(runs.lowest_missing(10), Some(3));
        assert_eq!(Runs::of(0..4).unwrap().lowest_missing(4), None);
        assert_eq!(Runs::of([1, 2]).unwrap().lowest_missing(3), Some(0));
        assert_eq!(Runs::of([3, 1, 3]), Err(3));
        let (a, b) = (Runs::of([0, 1, 2]).unwrap(), Runs::of([2, 3]).unwrap());
        assert_eq!(Runs::union_of([&a, &b]), Err(2));
    }

    /// A barrier of a thousand ranks folds into one call and one empty payload, whatever
    /// the order and grouping of the parts.
    #[test]
    fn agreeing_ranks_with_one_payload_fold_to_one_entry() {
        let parts: Vec<Calls> = (0..10)
            .rev()
            .map(|block| {
                singles(
                    &(block * 100..block * 100 + 100).collect::<Vec<_>>(),
                    4,
                    |_| vec![],
                )
            })
            .collect();
        let folded = Calls::fold(parts).unwrap();
        assert_eq!(folded.issued, vec![(op(4), Runs::of(0..1000).unwrap())]);
        assert_eq!(
            folded.payloads,
            Payloads::Same {
                count: 1000,
                payload: vec![]
            }
        );
        let frame = serde_json::to_vec(&folded).unwrap();
        assert!(frame.len() < 128, "{}", String::from_utf8_lossy(&frame));
        assert_eq!(
            folded.verdict(1000).unwrap().expand(),
            vec![Vec::<u8>::new(); 1000]
        );
    }

    /// Payloads that differ come out in rank order, across parts that interleave (a tree's
    /// subtrees: nodes 1, 5-8 below node 1, and so on).
    #[test]
    fn differing_payloads_come_out_in_rank_order() {
        let by = |r: usize| vec![r as u8];
        let parts = vec![
            singles(&[4, 5, 9], 2, by),
            singles(&[0, 1], 2, by),
            singles(&[2, 3, 6, 7, 8], 2, by),
        ];
        let inner = Calls::fold(parts).unwrap();
        let outer = Calls::fold(vec![inner, singles(&[10, 11], 2, by)]).unwrap();
        assert_eq!(outer.ranks().unwrap(), Runs::of(0..12).unwrap());
        let want: Vec<Vec<u8>> = (0..12).map(by).collect();
        assert_eq!(outer.verdict(12).unwrap(), Payloads::Each(want));
    }

    /// A part that gave one payload for all its ranks and parts that gave one each fold into
    /// one per rank, in rank order.
    #[test]
    fn a_same_part_among_differing_ones_is_spread_over_its_ranks() {
        let same = Calls {
            issued: vec![(op(3), Runs::of([0, 1, 6]).unwrap())],
            payloads: Payloads::Same {
                count: 3,
                payload: vec![9],
            },
        };
        let each = singles(&[2, 3, 4, 5], 3, |r| vec![r as u8]);
        let folded = Calls::fold(vec![each, same]).unwrap();
        let want: Vec<Vec<u8>> = [9, 9, 2, 3, 4, 5, 9].map(|b| vec![b]).to_vec();
        assert_eq!(folded.payloads, Payloads::Each(want));
    }

    /// Ranks dealt at random over parts, folded in random groups and orders (a tree of any
    /// shape), come out with every payload at its rank.
    #[test]
    fn any_split_and_any_order_of_folds_give_every_payload_at_its_rank() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = |below: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % below as u64) as usize
        };
        for round in 0..200 {
            let world = 1 + next(40);
            let payload = |r: usize| {
                if round % 3 == 0 {
                    vec![7]
                } else {
                    vec![r as u8, 1]
                }
            };
            let mut parts: Vec<Vec<usize>> = (0..1 + next(6)).map(|_| Vec::new()).collect();
            for rank in 0..world {
                let at = next(parts.len());
                parts[at].push(rank);
            }
            let mut calls: Vec<Calls> = parts
                .iter()
                .filter(|ranks| !ranks.is_empty())
                .map(|ranks| singles(ranks, 1, payload))
                .collect();
            while calls.len() > 1 {
                let take = 1 + next(calls.len());
                let mut group = Vec::new();
                for _ in 0..take {
                    group.push(calls.swap_remove(next(calls.len())));
                }
                calls.push(Calls::fold(group).unwrap());
            }
            let all = calls.pop().unwrap().verdict(world).unwrap().expand();
            assert_eq!(
                all,
                (0..world).map(payload).collect::<Vec<_>>(),
                "round {round}"
            );
        }
    }

    /// Ranks that disagree are named in groups by first rank, as every rank's calls side by
    /// side would name them.
    #[test]
    fn disagreeing_ranks_are_named_in_groups() {
        let parts = vec![
            singles(&[0, 1, 4], 7, |_| vec![]),
            singles(&[2, 5], 8, |_| vec![]),
            singles(&[3], 7, |_| vec![]),
        ];
        let want = CollectiveMismatch::detect(&[op(7), op(7), op(8), op(7), op(7), op(8)]);
        let folded = Calls::fold(vec![Calls::fold(parts).unwrap()]).unwrap();
        assert_eq!(folded.verdict(6), Err(Refusal::Mismatch(want.unwrap())));
    }

    /// Runs off the wire keep their invariant, or the frame is refused; a call that names no
    /// rank, or a rank beyond the job, is refused by the fold or the verdict.
    #[test]
    fn runs_and_calls_that_break_their_shape_are_refused() {
        let runs = |json: &str| serde_json::from_str::<Runs>(json);
        assert_eq!(runs("[[0,2],[5,6]]").unwrap().len(), 3);
        for bad in [
            "[[2,2]]",
            "[[3,1]]",
            "[[4,6],[0,2]]",
            "[[0,2],[2,4]]",
            "[[0,3],[1,4]]",
        ] {
            assert!(runs(bad).is_err(), "{bad}");
        }
        let empty = Calls {
            issued: vec![(op(1), Runs::of(0..2).unwrap()), (op(2), Runs::default())],
            payloads: Payloads::Each(vec![vec![]; 2]),
        };
        assert_eq!(Calls::fold(vec![empty]), Err(Malformed::Empty(op(2))));
        let beyond = Calls {
            issued: vec![(op(1), Runs::of([0, 1, 2, 3, 7]).unwrap())],
            payloads: Payloads::Same {
                count: 5,
                payload: vec![],
            },
        };
        assert_eq!(beyond.verdict(4), Err(Refusal::Beyond(7)));
    }

    /// A payload that is the same on a million ranks is a small frame but 64 MiB once held:
    /// the wire refuses it as it would the frame.
    #[test]
    fn payloads_too_big_once_expanded_are_refused_off_the_wire() {
        let release = |count: usize| crate::wire::Message::Release {
            payloads: Payloads::Same {
                count,
                payload: vec![7; 64],
            },
            fd_ranks: vec![],
        };
        let body = |count| serde_json::to_vec(&release(count)).unwrap();
        assert!(crate::wire::decode(&body(1024)).is_ok());
        let err = crate::wire::decode(&body(1 << 20)).unwrap_err();
        assert!(err.to_string().contains("once expanded"), "{err}");
    }

    #[test]
    fn a_rank_missing_or_given_twice_is_refused() {
        let parts = vec![
            singles(&[0, 1], 1, |_| vec![]),
            singles(&[1, 2], 1, |_| vec![]),
        ];
        assert_eq!(Calls::fold(parts), Err(Malformed::Twice(1)));
        let gap = Calls::fold(vec![singles(&[0, 2], 1, |_| vec![])]).unwrap();
        assert_eq!(gap.verdict(3), Err(Refusal::Missing(1)));
        let short = Calls {
            issued: vec![(op(1), Runs::of(0..3).unwrap())],
            payloads: Payloads::Each(vec![vec![]; 2]),
        };
        assert_eq!(
            Calls::fold(vec![short]),
            Err(Malformed::Payloads {
                ranks: 3,
                payloads: 2
            })
        );
    }
}

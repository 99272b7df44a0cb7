//! Descriptions of collective calls, so that providers able to compare them across ranks turn
//! an out-of-order collective into an error instead of a hang.

use crate::ranks::describe_ranks;
use serde::{Deserialize, Serialize};
use std::fmt;

/// What a collective call does; two ranks at the same sequence number must agree on it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CollectiveKind {
    /// Symmetric allocation of `bytes`.
    Malloc { bytes: u64 },
    /// Free of the allocation made at sequence number `allocation`.
    Free { allocation: u64, bytes: u64 },
    /// Plain barrier.
    Barrier,
    /// End of the context.
    Finalize,
    /// A provider's own collective (bootstrap exchanges and the like).
    Provider { what: String },
}

impl fmt::Display for CollectiveKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malloc { bytes } => write!(f, "malloc({bytes} B)"),
            Self::Free { allocation, bytes } => {
                write!(f, "free(allocation #{allocation}, {bytes} B)")
            }
            Self::Barrier => f.write_str("barrier"),
            Self::Finalize => f.write_str("finalize"),
            Self::Provider { what } => write!(f, "{what}"),
        }
    }
}

/// One collective call: its position in this context's sequence and what it does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectiveOp {
    pub seq: u64,
    pub kind: CollectiveKind,
}

impl fmt::Display for CollectiveOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{} {}", self.seq, self.kind)
    }
}

/// Ranks disagreed on a collective call: each group of ranks and what it issued.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{}", describe(.issued))]
pub struct CollectiveMismatch {
    /// (ranks, the call they issued), one entry per distinct call, ordered by first rank.
    pub issued: Vec<(Vec<usize>, CollectiveOp)>,
}

impl CollectiveMismatch {
    /// Groups `calls` (indexed by rank) by what was issued; `None` when every rank agrees.
    pub fn detect(calls: &[CollectiveOp]) -> Option<Self> {
        let mut issued: Vec<(Vec<usize>, CollectiveOp)> = Vec::new();
        for (rank, call) in calls.iter().enumerate() {
            match issued.iter_mut().find(|(_, c)| c == call) {
                Some((ranks, _)) => ranks.push(rank),
                None => issued.push((vec![rank], call.clone())),
            }
        }
        (issued.len() > 1).then_some(Self { issued })
    }

    /// Every rank named in the mismatch.
    pub fn ranks(&self) -> Vec<usize> {
        let mut all: Vec<usize> = self.issued.iter().flat_map(|(r, _)| r.clone()).collect();
        all.sort_unstable();
        all
    }
}

fn describe(issued: &[(Vec<usize>, CollectiveOp)]) -> String {
    let parts: Vec<String> = issued
        .iter()
        .map(|(ranks, op)| format!("{} issued {op}", describe_ranks(ranks)))
        .collect();
    format!(
        "collective calls out of order across ranks: {}; every rank must allocate, free and \
         synchronise symmetric memory in the same order",
        parts.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(seq: u64, kind: CollectiveKind) -> CollectiveOp {
        CollectiveOp { seq, kind }
    }

    #[test]
    fn agreement_is_not_a_mismatch() {
        let calls = vec![op(3, CollectiveKind::Barrier); 4];
        assert_eq!(CollectiveMismatch::detect(&calls), None);
    }

    #[test]
    fn mismatch_names_every_group_of_ranks() {
        let malloc = op(2, CollectiveKind::Malloc { bytes: 64 });
        let free = op(
            2,
            CollectiveKind::Free {
                allocation: 1,
                bytes: 64,
            },
        );
        let calls = vec![malloc.clone(), free.clone(), malloc, free];
        let m = CollectiveMismatch::detect(&calls).expect("mismatch");
        assert_eq!(m.issued.len(), 2);
        assert_eq!(m.issued[0].0, vec![0, 2]);
        assert_eq!(m.issued[1].0, vec![1, 3]);
        let text = m.to_string();
        assert!(text.contains("ranks 0, 2 issued #2 malloc(64 B)"), "{text}");
        assert!(
            text.contains("ranks 1, 3 issued #2 free(allocation #1, 64 B)"),
            "{text}"
        );
        assert_eq!(m.ranks(), vec![0, 1, 2, 3]);
    }

    #[test]
    fn differing_sequence_numbers_are_a_mismatch() {
        let calls = vec![
            op(4, CollectiveKind::Barrier),
            op(5, CollectiveKind::Barrier),
        ];
        assert!(CollectiveMismatch::detect(&calls).is_some());
    }
}

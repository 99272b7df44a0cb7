//! Where the ranks of a run go: [`Layout`].

use std::fmt;

use crate::error::LaunchError;

/// Where the ranks of a [`LaunchSpec`](crate::LaunchSpec) run. Ranks are numbered node by
/// node: with `PerNode(vec![3, 1])` ranks 0-2 run on the first node and rank 3 on the second.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Layout {
    /// Every rank on this host: the layout of [`Launcher::Local`](crate::Launcher::Local).
    #[default]
    OneHost,
    /// `counts[i]` ranks on node `i`: `nodes x k` is `vec![k; nodes]` ([`Layout::even`]);
    /// uneven counts such as 3+1 are written as they are (mpirun `--host a:3,b:1`).
    PerNode(Vec<usize>),
    /// The spec's ranks on this many nodes, placed by the launcher: srun `-N2 -n4` without
    /// `--ntasks-per-node` (Slurm's block distribution, which may give 3+1).
    Spread {
        /// How many nodes.
        nodes: usize,
    },
}

impl Layout {
    /// `nodes x per_node`.
    pub fn even(nodes: usize, per_node: usize) -> Self {
        Layout::PerNode(vec![per_node; nodes])
    }

    /// How many nodes it spans (1 for [`Layout::OneHost`]).
    pub fn nodes(&self) -> usize {
        match self {
            Layout::OneHost => 1,
            Layout::PerNode(counts) => counts.len(),
            Layout::Spread { nodes } => *nodes,
        }
    }

    /// The ranks it places, when it says (not [`Layout::Spread`], whose count is the spec's).
    pub fn ranks(&self) -> Option<usize> {
        match self {
            Layout::PerNode(counts) => Some(counts.iter().sum()),
            Layout::OneHost | Layout::Spread { .. } => None,
        }
    }

    /// The ranks per node when every node has the same count.
    pub fn per_node(&self) -> Option<usize> {
        match self {
            Layout::PerNode(counts) => {
                let first = *counts.first()?;
                counts.iter().all(|&c| c == first).then_some(first)
            }
            Layout::OneHost | Layout::Spread { .. } => None,
        }
    }

    /// The counts per node of `ranks` ranks: given ([`Layout::PerNode`]), all on one node
    /// ([`Layout::OneHost`]), or, for [`Layout::Spread`] when a launcher must write them
    /// out, in blocks: the first nodes get one more when they do not divide evenly (Slurm's
    /// block distribution does not promise this split: it depends on each node's CPUs).
    pub fn counts(&self, ranks: usize) -> Vec<usize> {
        match self {
            Layout::OneHost => vec![ranks],
            Layout::PerNode(counts) => counts.clone(),
            Layout::Spread { nodes } => {
                let nodes = (*nodes).max(1);
                (0..nodes)
                    .map(|i| ranks / nodes + usize::from(i < ranks % nodes))
                    .collect()
            }
        }
    }

    /// Checks that it fits `ranks` ranks.
    pub(crate) fn check(&self, ranks: usize) -> Result<(), LaunchError> {
        match self {
            Layout::OneHost => Ok(()),
            Layout::PerNode(counts) => {
                if counts.is_empty() || counts.contains(&0) {
                    return Err(LaunchError::Layout(format!(
                        "the layout {self} leaves a node without ranks: give every node at \
                         least 1 rank"
                    )));
                }
                if counts.iter().sum::<usize>() != ranks {
                    return Err(LaunchError::Layout(format!(
                        "the layout {self} places {} ranks but the spec asks for {ranks}: set \
                         the layout with LaunchSpec::layout, which sets the ranks too",
                        counts.iter().sum::<usize>()
                    )));
                }
                Ok(())
            }
            Layout::Spread { nodes } if *nodes == 0 || *nodes > ranks => {
                Err(LaunchError::Layout(format!(
                    "{ranks} ranks cannot span {nodes} nodes: ask for at least as many ranks \
                     as nodes, and at least 1 node"
                )))
            }
            Layout::Spread { .. } => Ok(()),
        }
    }
}

impl fmt::Display for Layout {
    /// `one host`, `2x2`, `3+1`, `spread on 2 nodes`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Layout::OneHost => f.write_str("one host"),
            Layout::PerNode(counts) => match self.per_node() {
                Some(k) => write!(f, "{}x{k}", counts.len()),
                None => {
                    let parts: Vec<String> = counts.iter().map(usize::to_string).collect();
                    f.write_str(&parts.join("+"))
                }
            },
            Layout::Spread { nodes } => write!(f, "spread on {nodes} nodes"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_counts_and_checks() {
        assert_eq!(Layout::even(2, 2).to_string(), "2x2");
        assert_eq!(Layout::PerNode(vec![3, 1]).to_string(), "3+1");
        assert_eq!(Layout::Spread { nodes: 2 }.to_string(), "spread on 2 nodes");
        assert_eq!(Layout::Spread { nodes: 2 }.counts(5), [3, 2]);
        assert_eq!(Layout::Spread { nodes: 3 }.counts(3), [1, 1, 1]);
        assert_eq!(Layout::OneHost.counts(4), [4]);
        assert_eq!(Layout::PerNode(vec![3, 1]).ranks(), Some(4));
        assert_eq!(Layout::PerNode(vec![3, 1]).per_node(), None);
        assert!(Layout::PerNode(vec![3, 1]).check(4).is_ok());
        let e = Layout::PerNode(vec![3, 0]).check(3).unwrap_err();
        assert!(
            e.is_usage() && e.to_string().contains("at least 1 rank"),
            "{e}"
        );
        let e = Layout::Spread { nodes: 3 }.check(2).unwrap_err();
        assert!(e.to_string().contains("2 ranks cannot span 3 nodes"), "{e}");
        assert!(Layout::even(2, 2).check(3).is_err());
    }
}

//! `--ranks`: the layouts the matrix runs, one column each.

use symmem::count_ranks;
use symmem_launch::{Layout, MAX_RANKS};

/// One entry of `--ranks`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// `K`: K ranks on one host, or K on each node of a run across nodes.
    PerNode(usize),
    /// `NxK`: K ranks on each of N nodes.
    Grid { nodes: usize, per_node: usize },
    /// `3+1`: these counts, node by node.
    Counts(Vec<usize>),
    /// `nT`: T ranks in all on the nodes, placed by the launcher.
    Total(usize),
}

/// The entries of `--ranks`, each once, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankList(pub Vec<Entry>);

/// What `--help` says of `--ranks`.
pub const RANKS_HELP: &str = "Layouts to run, comma-separated, one matrix column each: K (K \
ranks; across nodes, K on each node), NxK (K on each of N nodes), A+B (A ranks on the first \
node, B on the second: uneven, mpirun only), nT (T ranks in all across the nodes, placed by the \
launcher: srun -N N -n T without --ntasks-per-node, Slurm's block distribution); each number \
1..=256";

pub fn parse_ranks(text: &str) -> Result<RankList, String> {
    let mut entries = Vec::new();
    for part in text.split(',').map(str::trim) {
        let entry = parse_entry(part)?;
        if !entries.contains(&entry) {
            entries.push(entry);
        }
    }
    Ok(RankList(entries))
}

fn parse_entry(part: &str) -> Result<Entry, String> {
    let count = |text: &str| -> Result<usize, String> {
        let n: usize = text.trim().parse().map_err(|_| {
            format!(
                "`{part}` is not a layout; write rank counts like `8` or `1,2,4,8`, or `2x2`, \
                 `3+1`, `n4` across nodes"
            )
        })?;
        if n == 0 {
            return Err(format!(
                "`{part}`: a run needs at least 1 rank on each node"
            ));
        }
        if n > MAX_RANKS {
            return Err(format!(
                "`{part}`: {n} is more than the {MAX_RANKS} ranks a layout counts (one host \
                 runs at most that many: symmem-launch's limit)"
            ));
        }
        Ok(n)
    };
    if let Some(total) = part.strip_prefix('n') {
        return Ok(Entry::Total(count(total)?));
    }
    if let Some((nodes, per_node)) = part.split_once('x') {
        return Ok(Entry::Grid {
            nodes: count(nodes)?,
            per_node: count(per_node)?,
        });
    }
    if part.contains('+') {
        let counts = part.split('+').map(count).collect::<Result<_, _>>()?;
        return Ok(Entry::Counts(counts));
    }
    Ok(Entry::PerNode(count(part)?))
}

impl Entry {
    /// The ranks and their layout on `nodes` nodes (1: this host, or one node of a cluster).
    pub fn layout(&self, nodes: usize) -> Result<(usize, Layout), String> {
        let fits = |wanted: usize| {
            if wanted <= nodes {
                Ok(())
            } else {
                Err(format!(
                    "the layout `{self}` needs {wanted} nodes and this run has {nodes}: add \
                     --nodes {wanted} (emulated nodes), or -N {wanted} with --launcher \
                     mpirun|srun"
                ))
            }
        };
        let placed = |layout: Layout| match layout.nodes() {
            1 => (layout.counts(0).iter().sum::<usize>(), Layout::OneHost),
            _ => (layout.ranks().unwrap_or_default(), layout),
        };
        match self {
            Entry::PerNode(k) => Ok(placed(Layout::even(nodes, *k))),
            Entry::Grid { nodes: n, per_node } => {
                fits(*n)?;
                Ok(placed(Layout::even(*n, *per_node)))
            }
            Entry::Counts(counts) => {
                fits(counts.len())?;
                Ok(placed(Layout::PerNode(counts.clone())))
            }
            Entry::Total(total) if nodes == 1 => Ok((*total, Layout::OneHost)),
            Entry::Total(total) if *total < nodes => Err(format!(
                "`{self}`: {} cannot span {nodes} nodes; ask for at least {nodes}",
                count_ranks(*total)
            )),
            Entry::Total(total) => Ok((*total, Layout::Spread { nodes })),
        }
    }
}

impl std::fmt::Display for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Entry::PerNode(k) => write!(f, "{k}"),
            Entry::Grid { nodes, per_node } => write!(f, "{nodes}x{per_node}"),
            Entry::Counts(counts) => {
                let parts: Vec<String> = counts.iter().map(usize::to_string).collect();
                f.write_str(&parts.join("+"))
            }
            Entry::Total(total) => write!(f, "n{total}"),
        }
    }
}

/// A matrix column's name: `8 ranks` on one host, `2x2`, `3+1`, `4 on 2` across nodes.
pub fn label(ranks: usize, layout: &Layout) -> String {
    match layout {
        Layout::OneHost => count_ranks(ranks),
        Layout::Spread { nodes } => format!("{ranks} on {nodes}"),
        Layout::PerNode(_) => layout.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_parse_and_repeat_once() {
        let list = parse_ranks("1,2x2, 3+1,n4,1").unwrap().0;
        assert_eq!(
            list,
            [
                Entry::PerNode(1),
                Entry::Grid {
                    nodes: 2,
                    per_node: 2
                },
                Entry::Counts(vec![3, 1]),
                Entry::Total(4)
            ]
        );
        assert!(parse_ranks("0").unwrap_err().contains("at least 1 rank"));
        assert!(
            parse_ranks("abc")
                .unwrap_err()
                .contains("`abc` is not a layout")
        );
        assert!(parse_ranks("4,").unwrap_err().contains("is not a layout"));
        assert!(parse_ranks("3+0").unwrap_err().contains("at least 1 rank"));
        assert!(
            parse_ranks("n100000")
                .unwrap_err()
                .contains("more than the 256")
        );
    }

    #[test]
    fn layouts_on_one_host_and_across_nodes() {
        assert_eq!(Entry::PerNode(4).layout(1), Ok((4, Layout::OneHost)));
        assert_eq!(Entry::Total(3).layout(1), Ok((3, Layout::OneHost)));
        assert_eq!(Entry::PerNode(2).layout(2), Ok((4, Layout::even(2, 2))));
        assert_eq!(
            Entry::Counts(vec![3, 1]).layout(2),
            Ok((4, Layout::PerNode(vec![3, 1])))
        );
        assert_eq!(
            Entry::Total(4).layout(2),
            Ok((4, Layout::Spread { nodes: 2 }))
        );
        let e = Entry::Counts(vec![3, 1]).layout(1).unwrap_err();
        assert!(
            e.contains("needs 2 nodes") && e.contains("--nodes 2"),
            "{e}"
        );
        assert!(
            Entry::Total(1)
                .layout(2)
                .unwrap_err()
                .contains("cannot span")
        );
        assert_eq!(label(4, &Layout::PerNode(vec![3, 1])), "3+1");
        assert_eq!(label(4, &Layout::Spread { nodes: 2 }), "4 on 2");
        assert_eq!(label(8, &Layout::OneHost), "8 ranks");
    }
}

//! What a Slurm allocation holds, read before any layout runs: `srun` inside `salloc -N 2`
//! on a `select/cons_tres` cluster (the common setting) may place one task per node, and every
//! layout of more would fail with "More processors requested than permitted" after its
//! start. A layout that cannot fit is refused at once, with the `salloc` options that fit them
//! all.

use symmem_launch::Layout;

/// The CPUs of each node of the allocation (`SLURM_JOB_CPUS_PER_NODE`, e.g. `72(x2),36`) and
/// the CPUs a task takes (`SLURM_CPUS_PER_TASK`, default 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    cpus: Vec<usize>,
    per_task: usize,
    /// The variable as Slurm wrote it, for messages.
    text: String,
}

impl Allocation {
    /// The allocation `get` describes; `None` outside one (srun then makes its own) or where
    /// Slurm's variable cannot be read (nothing is refused on a guess).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Option<Self> {
        let text = get("SLURM_JOB_CPUS_PER_NODE")?;
        let mut cpus = Vec::new();
        for part in text.split(',') {
            let (count, repeat) = match part.split_once("(x") {
                Some((count, rest)) => (count, rest.strip_suffix(')')?.parse().ok()?),
                None => (part, 1),
            };
            let count: usize = count.trim().parse().ok()?;
            cpus.extend(std::iter::repeat_n(count, repeat));
        }
        let per_task = get("SLURM_CPUS_PER_TASK")
            .and_then(|v| v.trim().parse().ok())
            .filter(|&n| n > 0)
            .unwrap_or(1);
        Some(Self {
            cpus,
            per_task,
            text,
        })
    }

    /// Tasks each node can take, most first.
    fn slots(&self) -> Vec<usize> {
        let mut slots: Vec<usize> = self.cpus.iter().map(|c| c / self.per_task).collect();
        slots.sort_unstable_by(|a, b| b.cmp(a));
        slots
    }

    /// Why `ranks` ranks laid out as `layout` cannot run in this allocation, or `None`.
    pub fn refuses(&self, ranks: usize, layout: &Layout) -> Option<String> {
        let slots = self.slots();
        let (nodes, fits) = match layout {
            Layout::OneHost => (1, slots.first().is_some_and(|&s| s >= ranks)),
            Layout::PerNode(counts) => {
                let mut wanted = counts.clone();
                wanted.sort_unstable_by(|a, b| b.cmp(a));
                let fits = wanted.len() <= slots.len()
                    && wanted.iter().zip(&slots).all(|(want, have)| want <= have);
                (counts.len(), fits)
            }
            Layout::Spread { nodes } => (
                *nodes,
                *nodes <= slots.len() && slots[..*nodes].iter().sum::<usize>() >= ranks,
            ),
        };
        (!fits).then(|| {
            let nodes_word = if nodes == 1 { "node" } else { "nodes" };
            format!(
                "{ranks} ranks on {nodes} {nodes_word} need more task slots than this \
                 allocation has (SLURM_JOB_CPUS_PER_NODE={}{})",
                self.text,
                if self.per_task > 1 {
                    format!(", {} CPUs a task", self.per_task)
                } else {
                    String::new()
                }
            )
        })
    }
}

/// The `salloc` options that fit every one of `layouts` (`(ranks, layout)`): the most nodes
/// any spans, and the most tasks any puts on one node.
pub fn salloc_hint(layouts: &[(usize, Layout)]) -> String {
    let nodes = layouts.iter().map(|(_, l)| l.nodes()).max().unwrap_or(1);
    let per_node = layouts
        .iter()
        .map(|(ranks, layout)| match layout {
            Layout::OneHost => *ranks,
            Layout::PerNode(counts) => counts.iter().copied().max().unwrap_or(1),
            Layout::Spread { nodes } => ranks.div_ceil(*nodes),
        })
        .max()
        .unwrap_or(1);
    format!("`salloc -N {nodes} --ntasks-per-node={per_node}` (or `salloc -N {nodes} --exclusive`)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn alloc(vars: &[(&str, &str)]) -> Option<Allocation> {
        let map: HashMap<&str, &str> = vars.iter().copied().collect();
        Allocation::from_vars(|k| map.get(k).map(|v| v.to_string()))
    }

    #[test]
    fn slurms_compressed_counts_are_read() {
        let a = alloc(&[("SLURM_JOB_CPUS_PER_NODE", "72(x2),36")]).unwrap();
        assert_eq!(a.cpus, [72, 72, 36]);
        let a = alloc(&[
            ("SLURM_JOB_CPUS_PER_NODE", "8,4"),
            ("SLURM_CPUS_PER_TASK", "2"),
        ])
        .unwrap();
        assert_eq!(a.slots(), [4, 2]);
        assert_eq!(alloc(&[]), None);
        assert_eq!(alloc(&[("SLURM_JOB_CPUS_PER_NODE", "lots")]), None);
    }

    /// README's example on a cons_tres cluster: `salloc -N2` holds one CPU a node.
    #[test]
    fn one_task_per_node_fits_2x1_only() {
        let a = alloc(&[("SLURM_JOB_CPUS_PER_NODE", "1(x2)")]).unwrap();
        assert_eq!(a.refuses(2, &Layout::even(2, 1)), None);
        let refused = a.refuses(8, &Layout::even(2, 4)).expect("2x4 cannot fit");
        assert!(
            refused.contains("SLURM_JOB_CPUS_PER_NODE=1(x2)"),
            "{refused}"
        );
        assert!(a.refuses(3, &Layout::Spread { nodes: 2 }).is_some());
        assert!(a.refuses(2, &Layout::Spread { nodes: 2 }).is_none());
        assert!(a.refuses(2, &Layout::PerNode(vec![1, 1, 1])).is_some());
    }

    #[test]
    fn uneven_nodes_fit_the_larger_counts_on_the_larger_nodes() {
        let a = alloc(&[("SLURM_JOB_CPUS_PER_NODE", "4,1")]).unwrap();
        assert_eq!(a.refuses(4, &Layout::PerNode(vec![1, 3])), None);
        assert!(a.refuses(4, &Layout::PerNode(vec![2, 2])).is_some());
        assert_eq!(a.refuses(5, &Layout::Spread { nodes: 2 }), None);
    }

    #[test]
    fn the_hint_fits_every_layout() {
        let layouts = [
            (2, Layout::even(2, 1)),
            (8, Layout::even(2, 4)),
            (3, Layout::Spread { nodes: 2 }),
        ];
        assert_eq!(
            salloc_hint(&layouts),
            "`salloc -N 2 --ntasks-per-node=4` (or `salloc -N 2 --exclusive`)"
        );
    }
}

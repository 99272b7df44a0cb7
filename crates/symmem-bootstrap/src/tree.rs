//! The shape of the control plane across nodes: node leaders in a k-ary tree
//! ([`CONTROL_FANOUT`](symmem::settings::CONTROL_FANOUT)), numbered by their lowest rank, rank
//! 0's node at the root. Node `i` (other than 0) hangs below node `(i - 1) / k`; node `i`'s
//! children are `k i + 1 ..= k i + k`. A fan-out at or above the node count less one is a star
//! around rank 0.
//!
//! Pure arithmetic: who links to whom, and how many levels of leaders a node waits through
//! (its deadlines grow with them, so that the leader nearest a failure speaks first).

/// A k-ary tree over `nodes` nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tree {
    pub(crate) nodes: usize,
    pub(crate) fanout: usize,
}

impl Tree {
    pub(crate) fn new(nodes: usize, fanout: usize) -> Self {
        Self {
            nodes,
            fanout: fanout.max(1),
        }
    }

    /// The node above `node`; `None` for the root.
    pub(crate) fn parent(&self, node: usize) -> Option<usize> {
        (node > 0).then(|| (node - 1) / self.fanout)
    }

    /// The nodes right below `node`, in order.
    pub(crate) fn children(&self, node: usize) -> std::ops::Range<usize> {
        let first = node
            .saturating_mul(self.fanout)
            .saturating_add(1)
            .min(self.nodes);
        let end = first.saturating_add(self.fanout).min(self.nodes);
        first..end
    }

    /// `node` and every node below it, in order of their numbers.
    pub(crate) fn subtree(&self, node: usize) -> Vec<usize> {
        let mut all = vec![node];
        let mut next = 0;
        while next < all.len() {
            let below = self.children(all[next]);
            all.extend(below);
            next += 1;
        }
        all.sort_unstable();
        all
    }

    /// Levels of nodes above `node`: 0 for the root.
    pub(crate) fn depth(&self, node: usize) -> u32 {
        let (mut depth, mut at) = (0, node);
        while let Some(up) = self.parent(at) {
            depth += 1;
            at = up;
        }
        depth
    }

    /// Levels of nodes below `node`: 0 for a node without children.
    pub(crate) fn below(&self, node: usize) -> u32 {
        let mut levels = 0;
        let mut first = node;
        // The first child is always the deepest path's start (nodes fill level by level).
        while let Some(child) = self.children(first).next() {
            levels += 1;
            first = child;
        }
        levels
    }

    /// Levels below the root: the links a collective's call crosses on its way up (and its
    /// answer down), 1 for a star, 0 for one node.
    pub(crate) fn levels(&self) -> u32 {
        self.below(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fanout_at_or_above_the_other_nodes_is_a_star() {
        for fanout in [7, 8, 100] {
            let tree = Tree::new(8, fanout);
            assert_eq!(tree.children(0), 1..8);
            assert_eq!(tree.levels(), 1);
            for node in 1..8 {
                assert_eq!(tree.parent(node), Some(0));
                assert!(tree.children(node).is_empty());
                assert_eq!(tree.below(node), 0);
            }
        }
        assert_eq!(Tree::new(1, 8).levels(), 0);
    }

    #[test]
    fn each_node_but_the_root_has_one_parent_that_lists_it() {
        for nodes in 1..70 {
            for fanout in 1..6 {
                let tree = Tree::new(nodes, fanout);
                for node in 1..nodes {
                    let parent = tree.parent(node).unwrap();
                    assert!(parent < node);
                    assert!(
                        tree.children(parent).contains(&node),
                        "{nodes} {fanout} {node}"
                    );
                }
                let counted: usize = (0..nodes).map(|n| tree.children(n).len()).sum();
                assert_eq!(counted, nodes - 1);
                assert_eq!(tree.subtree(0), (0..nodes).collect::<Vec<_>>());
            }
        }
    }

    /// The height of a complete k-ary tree: ceil(log_k(nodes (k - 1) + 1)) - 1 levels below
    /// the root, as counted by walking down.
    #[test]
    fn levels_grow_with_the_log_of_the_nodes() {
        let tree = |nodes| Tree::new(nodes, 8);
        assert_eq!(tree(9).levels(), 1);
        assert_eq!(tree(10).levels(), 2);
        assert_eq!(tree(73).levels(), 2);
        assert_eq!(tree(74).levels(), 3);
        assert_eq!(tree(8192).levels(), 5);
        let two = Tree::new(32, 2);
        assert_eq!(two.levels(), 5);
        assert_eq!(
            two.subtree(1),
            vec![1, 3, 4, 7, 8, 9, 10, 15, 16, 17, 18, 19, 20, 21, 22, 31]
        );
        assert_eq!(two.below(1), 4);
        assert_eq!(two.below(2), 3);
        assert_eq!(two.below(15), 1);
        assert_eq!(two.below(16), 0);
        assert_eq!(
            (two.depth(0), two.depth(1), two.depth(15), two.depth(31)),
            (0, 1, 4, 5)
        );
    }
}

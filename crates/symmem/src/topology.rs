//! Which node every rank of a job is on: the one answer to "same node?" and "one host?" that
//! every provider takes from the control plane (`symmem_bootstrap::Bootstrap::topology`).
//!
//! Two levels: the *host* of a rank is the engine's node (all ranks on one host under the Unix
//! star; under PMIx the launcher's node id, else the host name), and its *node* is its host
//! together with its emulated node ([`NODE_ID`](crate::settings::NODE_ID)), so that ranks of
//! one host can play ranks of different nodes. Both are numbered from 0 in order of first
//! appearance, so every rank holds the same numbers.

/// The node and host of every rank of a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    hosts: Vec<u64>,
    nodes: Vec<u64>,
}

impl Topology {
    /// Ranks on hosts `hosts[r]` (any keys the engine gathered: node ids, host names) and on
    /// emulated nodes `emulated[r]`.
    ///
    /// # Panics
    /// When the two lists are of different lengths (one entry per rank each).
    pub fn new<K: PartialEq>(hosts: &[K], emulated: &[u64]) -> Self {
        assert_eq!(
            hosts.len(),
            emulated.len(),
            "one host and one node per rank"
        );
        let pairs: Vec<(&K, u64)> = hosts.iter().zip(emulated.iter().copied()).collect();
        Self {
            hosts: number(hosts),
            nodes: number(&pairs),
        }
    }

    /// Every rank on one host, rank `r` on emulated node `emulated[r]`.
    pub fn one_host(emulated: &[u64]) -> Self {
        Self::new(&vec![(); emulated.len()], emulated)
    }

    /// A world of `world_size` ranks, all on one node.
    pub fn single(world_size: usize) -> Self {
        Self::one_host(&vec![0; world_size])
    }

    pub fn world_size(&self) -> usize {
        self.nodes.len()
    }

    /// The node of every rank, numbered from 0 in order of first appearance.
    pub fn nodes(&self) -> &[u64] {
        &self.nodes
    }

    /// The node of `rank`.
    ///
    /// # Panics
    /// When `rank` is not a rank of the job.
    pub fn node(&self, rank: usize) -> u64 {
        self.nodes[rank]
    }

    /// The host of `rank`, numbered from 0 in order of first appearance.
    ///
    /// # Panics
    /// When `rank` is not a rank of the job.
    pub fn host(&self, rank: usize) -> u64 {
        self.hosts[rank]
    }

    /// How many hosts the job's ranks run on.
    pub fn host_count(&self) -> usize {
        self.hosts.iter().max().map_or(0, |&h| h as usize + 1)
    }

    /// How many nodes the job's ranks are on.
    pub fn node_count(&self) -> usize {
        self.nodes.iter().max().map_or(0, |&n| n as usize + 1)
    }

    /// The ranks on `rank`'s node, in rank order (`rank` included).
    pub fn ranks_with(&self, rank: usize) -> Vec<usize> {
        (0..self.world_size())
            .filter(|&peer| self.same_node(rank, peer))
            .collect()
    }

    /// Whether `a` and `b` are on one node: only then is one load/store reachable from the
    /// other. A rank outside the job shares no node.
    pub fn same_node(&self, a: usize, b: usize) -> bool {
        matches!((self.nodes.get(a), self.nodes.get(b)), (Some(x), Some(y)) if x == y)
    }

    /// Whether `a` and `b` run on one host (whatever their emulated nodes).
    pub fn same_host(&self, a: usize, b: usize) -> bool {
        matches!((self.hosts.get(a), self.hosts.get(b)), (Some(x), Some(y)) if x == y)
    }

    /// Whether every rank runs on one host: a library may then keep its own traffic on it.
    pub fn single_host(&self) -> bool {
        self.hosts.iter().all(|&h| h == 0)
    }

    /// Whether every rank is on one node, so every peer should be load/store reachable.
    pub fn single_node(&self) -> bool {
        self.nodes.iter().all(|&n| n == 0)
    }
}

/// `keys` numbered from 0 in order of first appearance: equal keys, equal numbers.
fn number<K: PartialEq>(keys: &[K]) -> Vec<u64> {
    let mut seen: Vec<&K> = Vec::new();
    keys.iter()
        .map(|key| match seen.iter().position(|s| *s == key) {
            Some(i) => i as u64,
            None => {
                seen.push(key);
                (seen.len() - 1) as u64
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emulated_nodes_split_one_host() {
        let t = Topology::one_host(&[7, 7, 3, 3]);
        assert_eq!(t.nodes(), [0, 0, 1, 1]);
        assert!(t.single_host() && !t.single_node());
        assert!(t.same_node(0, 1) && !t.same_node(1, 2) && t.same_host(1, 2));
        assert_eq!(t.node_count(), 2);
        assert_eq!(t.ranks_with(3), [2, 3]);
        assert!(!t.same_node(0, 4), "a rank outside the job");
    }

    #[test]
    fn hosts_and_emulated_nodes_combine() {
        let hosts = ["node-a", "node-a", "node-b", "node-b"];
        let t = Topology::new(&hosts, &[0, 0, 0, 0]);
        assert_eq!(t.nodes(), [0, 0, 1, 1]);
        assert!(!t.single_host() && !t.same_host(0, 2));
        // An emulated split inside each host: four nodes.
        let t = Topology::new(&hosts, &[0, 1, 0, 1]);
        assert_eq!(t.nodes(), [0, 1, 2, 3]);
        // Uneven: 3+1, and the lone rank first.
        let t = Topology::new(&["b", "a", "a", "a"], &[0; 4]);
        assert_eq!((t.nodes(), t.node_count()), (&[0, 1, 1, 1][..], 2));
        assert_eq!(t.ranks_with(0), [0]);
    }

    #[test]
    fn one_rank_is_one_node() {
        let t = Topology::single(1);
        assert!(t.single_host() && t.single_node());
        assert_eq!((t.world_size(), t.node_count()), (1, 1));
    }
}

//! The suite must be able to fail: run it over providers that break one promise each and check
//! that exactly the checks guarding that promise fail. Ranks are threads of this process, each
//! with its own host provider (own heap, own socket), as separate processes would have.

use std::collections::BTreeMap;
use std::time::Duration;
use symmem::{
    CollectiveOp, Context, Error, PeerTable, ProviderKind, SymmetricProvider, Topology,
    TranslatedOps,
};
use symmem_conformance::{
    Aggregate, CheckResult, Extras, HostExtras, Status, Unavailable, run_suite,
};
use symmem_host::HostProvider;
use symmem_test_support::ranks::thread_ranks;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Sabotage {
    None,
    /// `ptr` is off by one element for peers: tables point next to the real copy.
    SkewedPtr,
    /// Stores to peers are silently dropped.
    DroppedStores,
    /// Every other atomic add is lost.
    LossyAtomics,
    /// `ptr` is right for the start of the heap but drifts further in: not one linear map.
    NonLinearPtr,
    /// No sabotage: every rank plays a host of its own (as 8 nodes of 1 rank), so no peer is
    /// reachable, in every context the suite opens.
    OwnHosts,
}

struct Sabotaged {
    inner: HostProvider,
    sabotage: Sabotage,
    adds: std::cell::Cell<u64>,
    topology: Topology,
}

impl Sabotaged {
    fn new(inner: HostProvider, sabotage: Sabotage) -> Self {
        let topology = match sabotage {
            Sabotage::OwnHosts => {
                let hosts: Vec<usize> = (0..inner.world_size()).collect();
                Topology::new(&hosts, inner.topology().nodes())
            }
            _ => inner.topology().clone(),
        };
        Self {
            inner,
            sabotage,
            adds: Default::default(),
            topology,
        }
    }
}

impl SymmetricProvider for Sabotaged {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Host
    }
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn world_size(&self) -> usize {
        self.inner.world_size()
    }
    fn topology(&self) -> &Topology {
        &self.topology
    }
    fn checks_collective_order(&self) -> bool {
        self.inner.checks_collective_order()
    }
    fn malloc(&mut self, bytes: u64, op: &CollectiveOp) -> Result<u64, Error> {
        self.inner.malloc(bytes, op)
    }
    fn free(&mut self, addr: u64, op: &CollectiveOp) -> Result<(), Error> {
        self.inner.free(addr, op)
    }
    fn barrier(&mut self, op: &CollectiveOp) -> Result<(), Error> {
        self.inner.barrier(op)
    }
    fn ptr(&self, addr: u64, peer: usize) -> Option<u64> {
        if !self.topology.same_node(self.rank(), peer) {
            return None;
        }
        let p = self.inner.ptr(addr, peer)?;
        let skew = self.sabotage == Sabotage::SkewedPtr && peer != self.rank();
        let drift = self.sabotage == Sabotage::NonLinearPtr
            && peer != self.rank()
            && addr - self.inner.heap_base() >= 1024;
        Some(if skew || drift { p + 8 } else { p })
    }
}

impl TranslatedOps for Sabotaged {
    fn store_u64(&self, t: &PeerTable, dst: u64, to: usize, v: &[u64]) -> Result<(), Error> {
        if self.sabotage == Sabotage::DroppedStores && to != self.rank() {
            return Ok(());
        }
        self.inner.store_u64(t, dst, to, v)
    }
    fn load_u64(&self, t: &PeerTable, src: u64, from: usize, out: &mut [u64]) -> Result<(), Error> {
        self.inner.load_u64(t, src, from, out)
    }
    fn copy_bytes(
        &self,
        t: &PeerTable,
        src: u64,
        src_rank: usize,
        dst: u64,
        dst_rank: usize,
        bytes: u64,
    ) -> Result<(), Error> {
        self.inner
            .copy_bytes(t, src, src_rank, dst, dst_rank, bytes)
    }
    fn atomic_add_u64(&self, t: &PeerTable, dst: u64, to: usize, value: u64) -> Result<(), Error> {
        self.adds.set(self.adds.get() + 1);
        if self.sabotage == Sabotage::LossyAtomics && self.adds.get().is_multiple_of(2) {
            return Ok(());
        }
        self.inner.atomic_add_u64(t, dst, to, value)
    }
    fn read_local(&self, addr: u64, out: &mut [u8]) -> Result<(), Error> {
        self.inner.read_local(addr, out)
    }
    fn write_local(&self, addr: u64, data: &[u8]) -> Result<(), Error> {
        self.inner.write_local(addr, data)
    }
}

struct ThreadExtras {
    host: HostExtras,
    sabotage: Sabotage,
}

impl Extras<Sabotaged> for ThreadExtras {
    fn context_with_nodes(
        &mut self,
        label: &str,
        nodes: &[u64],
    ) -> Result<Context<Sabotaged>, Unavailable> {
        let inner = self.host.provider_with_nodes(label, nodes)?;
        Ok(Context::new(Sabotaged::new(inner, self.sabotage)))
    }
}

/// Runs the whole suite on `world_size` thread-ranks; returns each check's verdict.
fn suite(world_size: usize, sabotage: Sabotage) -> BTreeMap<&'static str, Status> {
    let results: Vec<CheckResult> = thread_ranks(world_size, Duration::from_secs(20), |cfg| {
        let inner = HostProvider::new(cfg.clone()).unwrap();
        let mut ctx = Context::new(Sabotaged::new(inner, sabotage));
        let mut extras = ThreadExtras {
            host: HostExtras { base: cfg },
            sabotage,
        };
        let mut results: Vec<CheckResult> = Vec::new();
        run_suite(&mut ctx, &mut extras, &mut |r| results.push(r.clone())).unwrap();
        results
    })
    .into_iter()
    .flatten()
    .collect();
    Aggregate::new(world_size, &results)
        .verdicts
        .into_iter()
        .map(|v| (v.id, v.status))
        .collect()
}

fn failing(verdicts: &BTreeMap<&'static str, Status>) -> Vec<&'static str> {
    verdicts
        .iter()
        .filter(|(_, s)| **s == Status::Fail)
        .map(|(id, _)| *id)
        .collect()
}

#[test]
fn honest_provider_passes_everything() {
    let v = suite(3, Sabotage::None);
    assert!(failing(&v).is_empty(), "{v:?}");
    assert!(v.values().all(|s| *s == Status::Pass), "{v:?}");
}

#[test]
fn single_rank_skips_what_needs_peers() {
    let v = suite(1, Sabotage::None);
    assert!(failing(&v).is_empty(), "{v:?}");
    for id in ["2", "3", "6", "9", "10b"] {
        assert_eq!(v[id], Status::Skip, "check {id}");
    }
    for id in ["1", "4", "5", "7", "8", "10a"] {
        assert_eq!(v[id], Status::Pass, "check {id}");
    }
}

/// M8: check 9 assumed that its emulated half/half split is the real one, and failed at 4 nodes
/// of 1 rank ("direct flag of rank 1: got false, expected true"). Every layout across nodes
/// must pass checks 9 and 10b, and skip alike what needs ranks sharing a node.
#[test]
fn ranks_on_hosts_of_their_own_pass_the_checks_across_nodes() {
    let v = suite(4, Sabotage::OwnHosts);
    assert!(failing(&v).is_empty(), "{v:?}");
    for id in ["9", "10b", "1", "4", "5", "7", "8", "10a"] {
        assert_eq!(v[id], Status::Pass, "check {id}: {v:?}");
    }
    for id in ["2", "3", "6"] {
        assert_eq!(v[id], Status::Skip, "check {id}: {v:?}");
    }
}

#[test]
fn skewed_ptr_is_caught() {
    let v = suite(2, Sabotage::SkewedPtr);
    let failed = failing(&v);
    // Data lands next to where it should: stores, loads and copies see it.
    for id in ["3", "4", "5", "6"] {
        assert!(failed.contains(&id), "check {id} should fail: {v:?}");
    }
}

#[test]
fn dropped_stores_are_caught() {
    let v = suite(2, Sabotage::DroppedStores);
    assert_eq!(failing(&v), vec!["4"], "{v:?}");
}

#[test]
fn a_ptr_that_is_not_one_linear_map_is_caught() {
    let v = suite(2, Sabotage::NonLinearPtr);
    assert!(failing(&v).contains(&"2"), "{v:?}");
}

#[test]
fn lost_atomics_are_caught() {
    let v = suite(2, Sabotage::LossyAtomics);
    assert_eq!(failing(&v), vec!["7"], "{v:?}");
}

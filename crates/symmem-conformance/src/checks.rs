//! The checks. They are collective: every rank runs them in the same order and issues the same
//! collectives whatever its local verification finds, so one rank's failed assertion never
//! leaves the others waiting. Whether a check runs at all is decided from what every rank
//! holds alike (the world size, the provider's [`Topology`]), never from what one rank sees
//! (its own reachable peers): a rank alone on its node runs the same collectives as the others.
//!
//! [`CHECKS`] is the one table of them: id, name and the function that runs it. What several
//! checks share (two allocations and their tables) is a `Fixture` that the suite allocates
//! before the first check that uses it, so any one check also runs alone.

use crate::fault::{self, PlannedFault};
use crate::{CheckResult, Status};
use std::time::Instant;
use symmem::{Context, Error, PeerTable, SymmetricBuffer, Topology, TranslateError, TranslatedOps};

/// One check: its id (reports, the aggregation and docs/gpu-results.md name it by this), its
/// name, and what runs it.
#[derive(Clone, Copy, Debug)]
pub struct CheckInfo {
    pub id: &'static str,
    pub name: &'static str,
    /// Whether the check's subject is a peer on another node (the table entry of an
    /// unreachable peer; the order check of a collective whose ranks span nodes): in a job
    /// across nodes it must pass, and `symmem-matrix` counts a skip there as a failure.
    pub across_nodes: bool,
    run: Run,
}

/// A check's function, by what it needs of the [`Fixture`].
#[derive(Clone, Copy, Debug)]
enum Run {
    /// Needs nothing the checks share.
    Alone(fn(&mut dyn Checks) -> Result<Outcome, Error>),
    /// Reads the fixture (the suite allocates it first if no check has yet).
    Uses(fn(&mut dyn Checks, &Fixture) -> Result<Outcome, Error>),
    /// Frees the fixture (the suite allocates it first if no check has yet).
    Frees(fn(&mut dyn Checks, Fixture) -> Result<Outcome, Error>),
}

/// Every check, in the order the suite runs them.
pub static CHECKS: [CheckInfo; 11] = [
    CheckInfo {
        id: "1",
        name: "local entry is the allocation's base",
        across_nodes: false,
        run: Run::Uses(|s, f| s.local_entry(f)),
    },
    CheckInfo {
        id: "2",
        name: "per-peer offsets equal across allocations",
        across_nodes: false,
        run: Run::Uses(|s, f| s.offsets_equal(f)),
    },
    CheckInfo {
        id: "3",
        name: "one table translates another allocation",
        across_nodes: false,
        run: Run::Uses(|s, f| s.table_translates_other_allocation(f)),
    },
    CheckInfo {
        id: "4",
        name: "store reaches every peer",
        across_nodes: false,
        run: Run::Uses(|s, f| s.store_all_to_all(f)),
    },
    CheckInfo {
        id: "5",
        name: "load from every peer",
        across_nodes: false,
        run: Run::Uses(|s, f| s.load_from_every_peer(f)),
    },
    CheckInfo {
        id: "6",
        name: "copy from peer to peer",
        across_nodes: false,
        run: Run::Uses(|s, f| s.copy_peer_to_peer(f)),
    },
    CheckInfo {
        id: "7",
        name: "atomic add from every rank, exact",
        across_nodes: false,
        run: Run::Uses(|s, f| s.atomic_add(f)),
    },
    CheckInfo {
        id: "8",
        name: "address map of existing buffer",
        across_nodes: false,
        run: Run::Uses(|s, f| s.address_map_of_existing(f)),
    },
    CheckInfo {
        id: "9",
        name: "unreachable peer: base 0, refused",
        across_nodes: true,
        run: Run::Alone(|s| s.unreachable_peers()),
    },
    CheckInfo {
        id: "10a",
        name: "free then allocate again",
        across_nodes: false,
        run: Run::Frees(|s, f| s.free_then_allocate(f)),
    },
    CheckInfo {
        id: "10b",
        name: "out-of-order collective is an error",
        across_nodes: true,
        run: Run::Alone(|s| s.out_of_order()),
    },
];

/// An id that names no check.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown check {id:?}: pick one of the ids {}", valid_ids())]
pub struct UnknownCheck {
    pub id: String,
}

/// The ids of every check, in table order: "1, 2, ..., 10b".
pub fn valid_ids() -> String {
    CHECKS.iter().map(|c| c.id).collect::<Vec<_>>().join(", ")
}

/// The check with id `id`.
pub fn check(id: &str) -> Result<&'static CheckInfo, UnknownCheck> {
    let id = id.trim();
    CHECKS
        .iter()
        .find(|c| c.id == id)
        .ok_or_else(|| UnknownCheck { id: id.into() })
}

/// Further contexts the suite needs besides the main one.
pub trait Extras<P: TranslatedOps> {
    /// A new context over the same ranks, with rank `r` on emulated node `node_ids[r]`.
    fn context_with_nodes(
        &mut self,
        label: &str,
        node_ids: &[u64],
    ) -> Result<Context<P>, Unavailable>;
}

/// Why [`Extras`] gave no context.
#[derive(Clone, Debug)]
pub enum Unavailable {
    /// The provider cannot do this at all (the check is skipped with this reason).
    Unsupported(String),
    /// It should have worked but failed (the check fails).
    Failed(String),
    /// It failed because another rank did (its opening is collective: a rank never came,
    /// or left): the check fails and the suite stops, this rank a witness.
    PeerFailed(String),
}

impl Unavailable {
    /// A second context that failed to open (`what` says which) with the provider's error
    /// `e`: [`PeerFailed`](Self::PeerFailed) where `e` blames another rank, else
    /// [`Failed`](Self::Failed).
    pub fn opening<E: symmem::ProviderError>(what: &str, e: &E) -> Self {
        let why = format!("opening {what}: {e}");
        match e.blame() {
            symmem::Blame::AnotherRank => Self::PeerFailed(why),
            _ => Self::Failed(why),
        }
    }

    fn outcome(self) -> Outcome {
        match self {
            Self::Unsupported(reason) => Outcome::Skip(reason),
            Self::Failed(why) => Outcome::Fail(why),
            Self::PeerFailed(why) => Outcome::PeerFailed(why),
        }
    }
}

#[derive(Debug)]
enum Outcome {
    Pass,
    Fail(String),
    Skip(String),
    /// Another rank failed; the suite stops.
    PeerFailed(String),
}

/// Collects verification failures without interrupting the collective sequence.
#[derive(Default)]
struct Verify(Vec<String>);

impl Verify {
    fn eq<T: PartialEq + std::fmt::Debug>(
        &mut self,
        what: impl std::fmt::Display,
        got: T,
        want: T,
    ) {
        if got != want {
            self.0
                .push(format!("{what}: got {got:?}, expected {want:?}"));
        }
    }
    fn ok<T>(&mut self, what: impl std::fmt::Display, result: Result<T, Error>) -> Option<T> {
        result.map_err(|e| self.0.push(format!("{what}: {e}"))).ok()
    }
    fn that(&mut self, what: impl std::fmt::Display, condition: bool) {
        if !condition {
            self.0.push(what.to_string());
        }
    }
    fn outcome(self) -> Outcome {
        if self.0.is_empty() {
            Outcome::Pass
        } else {
            // Keep the line readable: the first few problems say enough.
            let more = self.0.len().saturating_sub(3);
            let mut text = self.0.into_iter().take(3).collect::<Vec<_>>().join("; ");
            if more > 0 {
                text.push_str(&format!("; and {more} more"));
            }
            Outcome::Fail(text)
        }
    }
}

fn pattern(rank: usize, i: usize) -> u64 {
    ((rank as u64 + 1) << 32) | i as u64
}

const B_LEN: usize = 128;
const CHUNK: usize = 8;

/// What the checks share: allocations A (a slot per rank, at least 64 words) and B (`B_LEN`
/// words), made by every rank in that order, with their peer-bases tables.
#[derive(Debug)]
struct Fixture {
    a: SymmetricBuffer<u64>,
    ta: PeerTable,
    b: SymmetricBuffer<u64>,
    tb: PeerTable,
}

impl Fixture {
    /// Collective: allocates A, then B.
    fn allocate<P: TranslatedOps>(ctx: &mut Context<P>) -> Result<Self, Error> {
        let (a, ta) = ctx.allocate_symmetric::<u64>(ctx.world_size().max(64))?;
        let (b, tb) = ctx.allocate_symmetric::<u64>(B_LEN)?;
        Ok(Self { a, ta, b, tb })
    }

    /// Collective: frees B, then A.
    fn free<P: TranslatedOps>(self, ctx: &mut Context<P>) -> Result<(), Error> {
        ctx.free(self.b)?;
        ctx.free(self.a)
    }

    /// The ranks this rank reaches by load/store (itself included), as A's table says.
    fn reachable(&self) -> Vec<usize> {
        (0..self.ta.bases().len())
            .filter(|&p| self.ta.direct(p))
            .collect()
    }
}

/// Why a check that needs ranks sharing a node cannot run in this job, if it cannot. The same
/// answer on every rank: a rank alone on its node still runs such a check (it reaches only
/// itself), so that every rank issues the same collectives.
fn needs_node_peers(topology: &Topology) -> Option<Outcome> {
    if topology.world_size() < 2 {
        return Some(Outcome::Skip("needs >= 2 ranks".into()));
    }
    if topology.node_count() == topology.world_size() {
        return Some(Outcome::Skip(
            "no two ranks share a node in this run".into(),
        ));
    }
    None
}

/// The checks over one provider. Object safe, so that [`CHECKS`] holds them once for every
/// provider; [`Suite`] implements them.
trait Checks {
    fn local_entry(&mut self, f: &Fixture) -> Result<Outcome, Error>;
    fn offsets_equal(&mut self, f: &Fixture) -> Result<Outcome, Error>;
    fn table_translates_other_allocation(&mut self, f: &Fixture) -> Result<Outcome, Error>;
    fn store_all_to_all(&mut self, f: &Fixture) -> Result<Outcome, Error>;
    fn load_from_every_peer(&mut self, f: &Fixture) -> Result<Outcome, Error>;
    fn copy_peer_to_peer(&mut self, f: &Fixture) -> Result<Outcome, Error>;
    fn atomic_add(&mut self, f: &Fixture) -> Result<Outcome, Error>;
    fn address_map_of_existing(&mut self, f: &Fixture) -> Result<Outcome, Error>;
    fn unreachable_peers(&mut self) -> Result<Outcome, Error>;
    fn free_then_allocate(&mut self, f: Fixture) -> Result<Outcome, Error>;
    fn out_of_order(&mut self) -> Result<Outcome, Error>;
}

struct Suite<'a, P: TranslatedOps> {
    ctx: &'a mut Context<P>,
    extras: &'a mut dyn Extras<P>,
}

impl<P: TranslatedOps> Suite<'_, P> {
    fn rank(&self) -> usize {
        self.ctx.rank()
    }
    fn world(&self) -> usize {
        self.ctx.world_size()
    }
    /// Which node every rank is on: the same on every rank.
    fn topology(&self) -> &Topology {
        self.ctx.provider().topology()
    }

    /// Writes `pattern(rank, i)` into this rank's B, then synchronises.
    fn fill_b(&mut self, f: &Fixture, v: &mut Verify) -> Result<(), Error> {
        let rank = self.rank();
        let data: Vec<u64> = (0..B_LEN).map(|i| pattern(rank, i)).collect();
        v.ok("writing own B", self.ctx.write(&f.b, &data));
        self.ctx.barrier()
    }
}

impl<P: TranslatedOps> Checks for Suite<'_, P> {
    fn local_entry(&mut self, f: &Fixture) -> Result<Outcome, Error> {
        let mut v = Verify::default();
        v.eq(
            "first table's local entry",
            f.ta.bases()[self.rank()],
            f.a.addr(),
        );
        v.eq(
            "second table's local entry",
            f.tb.bases()[self.rank()],
            f.b.addr(),
        );
        v.that(
            "the two allocations share an address",
            f.a.addr() != f.b.addr(),
        );
        Ok(v.outcome())
    }

    fn offsets_equal(&mut self, f: &Fixture) -> Result<Outcome, Error> {
        if let Some(skip) = needs_node_peers(self.topology()) {
            return Ok(skip);
        }
        let Fixture { a, ta, b, tb } = f;
        let mut v = Verify::default();
        let provider = self.ctx.provider();
        let rank = self.rank();
        // Ask the provider directly, at several points of B: its `ptr` must be one linear map
        // (the tables alone cannot show that, they come from one cached sweep).
        for k in [0, 1, B_LEN / 2, B_LEN - 1] {
            let addr = b.addr_of(k);
            v.eq(
                format!("ptr(B[{k}], own rank)"),
                provider.ptr(addr, rank),
                Some(addr),
            );
            for peer in (0..self.world()).filter(|&p| p != rank) {
                let want = tb.direct(peer).then(|| tb.bases()[peer] + (k * 8) as u64);
                v.eq(
                    format!("ptr(B[{k}], rank {peer})"),
                    provider.ptr(addr, peer),
                    want,
                );
            }
        }
        for peer in 0..self.world() {
            v.eq(
                format!("direct flag of peer {peer}"),
                ta.direct(peer),
                tb.direct(peer),
            );
            if ta.direct(peer) {
                v.eq(
                    format!("offset of peer {peer}"),
                    ta.bases()[peer].wrapping_sub(a.addr()),
                    tb.bases()[peer].wrapping_sub(b.addr()),
                );
            } else {
                v.eq(
                    format!("base of unreachable peer {peer}"),
                    tb.bases()[peer],
                    0,
                );
            }
        }
        Ok(v.outcome())
    }

    fn table_translates_other_allocation(&mut self, f: &Fixture) -> Result<Outcome, Error> {
        if let Some(skip) = needs_node_peers(self.topology()) {
            return Ok(skip);
        }
        let mut v = Verify::default();
        self.fill_b(f, &mut v)?;
        let (rank, reachable) = (self.rank(), f.reachable());
        let src =
            reachable[(reachable.iter().position(|&p| p == rank).unwrap() + 1) % reachable.len()];
        // A's table with B's and A's pointers: Iris's copy(src, dst, from, to, heap_bases).
        let Fixture { a, ta, b, tb } = f;
        let bytes = (CHUNK * 8) as u64;
        v.ok(
            format!("copy from rank {src}'s B through A's table"),
            self.ctx
                .copy_bytes(ta, b.addr(), src, a.addr(), rank, bytes),
        );
        if let Some(got) = v.ok("reading own A", self.ctx.read(a)) {
            let want: Vec<u64> = (0..CHUNK).map(|i| pattern(src, i)).collect();
            v.eq(
                format!("data copied from rank {src}"),
                &got[..CHUNK],
                &want[..],
            );
        }
        // Overlapping ranges in one rank's copy are refused on every provider, and touch
        // nothing: one word forward within own B.
        let overlap = self
            .ctx
            .copy_bytes(tb, b.addr(), rank, b.addr_of(1), rank, bytes);
        v.that(
            format!("an overlapping copy was not refused ({overlap:?})"),
            matches!(
                overlap,
                Err(Error::Translate(TranslateError::OverlappingCopy { .. }))
            ),
        );
        if let Some(got) = v.ok("reading own B", self.ctx.read(b)) {
            let want: Vec<u64> = (0..CHUNK + 1).map(|i| pattern(rank, i)).collect();
            v.eq("own B after the refused copy", &got[..=CHUNK], &want[..]);
        }
        self.ctx.barrier()?;
        Ok(v.outcome())
    }

    fn store_all_to_all(&mut self, f: &Fixture) -> Result<Outcome, Error> {
        let mut v = Verify::default();
        let (rank, world, reachable) = (self.rank(), self.world(), f.reachable());
        let (a, ta) = (&f.a, &f.ta);
        v.ok("zeroing own A", self.ctx.write(a, &vec![0u64; a.len()]));
        self.ctx.barrier()?;
        for &peer in &reachable {
            let value = 1000 * (rank as u64 + 1) + peer as u64;
            v.ok(
                format!("store into rank {peer}"),
                self.ctx.store_u64(ta, a.addr_of(rank), peer, &[value]),
            );
        }
        self.ctx.barrier()?;
        if let Some(got) = v.ok("reading own A", self.ctx.read(a)) {
            for (writer, &slot) in got.iter().enumerate().take(world) {
                let want = if reachable.contains(&writer) {
                    1000 * (writer as u64 + 1) + rank as u64
                } else {
                    0
                };
                v.eq(format!("slot written by rank {writer}"), slot, want);
            }
        }
        Ok(v.outcome())
    }

    fn load_from_every_peer(&mut self, f: &Fixture) -> Result<Outcome, Error> {
        let mut v = Verify::default();
        self.fill_b(f, &mut v)?;
        let (b, tb) = (&f.b, &f.tb);
        for peer in f.reachable() {
            let mut got = vec![0u64; CHUNK];
            let at = b.addr_of(CHUNK);
            if v.ok(
                format!("load from rank {peer}"),
                self.ctx.load_u64(tb, at, peer, &mut got),
            )
            .is_some()
            {
                let want: Vec<u64> = (CHUNK..2 * CHUNK).map(|i| pattern(peer, i)).collect();
                v.eq(format!("data loaded from rank {peer}"), got, want);
            }
        }
        self.ctx.barrier()?;
        Ok(v.outcome())
    }

    fn copy_peer_to_peer(&mut self, f: &Fixture) -> Result<Outcome, Error> {
        if let Some(skip) = needs_node_peers(self.topology()) {
            return Ok(skip);
        }
        if !self.topology().single_node() {
            return Ok(Outcome::Skip("needs every rank on one node".into()));
        }
        let (rank, world) = (self.rank(), self.world());
        let mut v = Verify::default();
        self.fill_b(f, &mut v)?;
        let (c, tc) = self.ctx.allocate_symmetric::<u64>(CHUNK * world)?;
        // Rank r moves CHUNK words of rank r+1's B into slot r of rank r+2's C.
        let (src, dst) = ((rank + 1) % world, (rank + 2) % world);
        v.ok(
            format!("copy from rank {src} to rank {dst}"),
            self.ctx.copy_bytes(
                &tc,
                f.b.addr(),
                src,
                c.addr_of(rank * CHUNK),
                dst,
                (CHUNK * 8) as u64,
            ),
        );
        self.ctx.barrier()?;
        if let Some(got) = v.ok("reading own C", self.ctx.read(&c)) {
            for writer in (0..world).filter(|w| (w + 2) % world == rank) {
                let from = (writer + 1) % world;
                let want: Vec<u64> = (0..CHUNK).map(|i| pattern(from, i)).collect();
                v.eq(
                    format!("slot of rank {writer} (copied from rank {from})"),
                    &got[writer * CHUNK..(writer + 1) * CHUNK],
                    &want[..],
                );
            }
        }
        self.ctx.free(c)?;
        Ok(v.outcome())
    }

    fn atomic_add(&mut self, f: &Fixture) -> Result<Outcome, Error> {
        const ADDS: u64 = 200;
        let mut v = Verify::default();
        let reachable = f.reachable();
        let (counter, table) = self.ctx.allocate_symmetric::<u64>(1)?;
        v.ok("zeroing own counter", self.ctx.write(&counter, &[0]));
        self.ctx.barrier()?;
        for _ in 0..ADDS {
            for &peer in &reachable {
                if v.ok(
                    format!("atomic add into rank {peer}"),
                    self.ctx.atomic_add_u64(&table, counter.addr(), peer, 1),
                )
                .is_none()
                {
                    break;
                }
            }
        }
        self.ctx.barrier()?;
        if let Some(got) = v.ok("reading own counter", self.ctx.read(&counter)) {
            v.eq("counter", got[0], ADDS * reachable.len() as u64);
        }
        self.ctx.free(counter)?;
        Ok(v.outcome())
    }

    fn address_map_of_existing(&mut self, f: &Fixture) -> Result<Outcome, Error> {
        let mut v = Verify::default();
        let (buf, map) = self.ctx.allocate_symmetric_map::<u32>(100)?;
        if let Some(again) = v.ok(
            "address map of the new buffer",
            self.ctx.symmetric_address_map(&buf),
        ) {
            v.eq("address map", &again, &map);
        }
        v.eq("map base", map.base, buf.addr());
        v.eq("map bytes", map.bytes, 400);
        v.eq("map local rank", map.local_rank, self.rank());
        if let Some(map_a) = v.ok("address map of A", self.ctx.symmetric_address_map(&f.a)) {
            v.eq("A's table", &map_a.table, &f.ta);
        }
        self.ctx.free(buf)?;
        Ok(v.outcome())
    }

    fn unreachable_peers(&mut self) -> Result<Outcome, Error> {
        let (rank, world) = (self.rank(), self.world());
        if world < 2 {
            return Ok(Outcome::Skip("needs >= 2 ranks".into()));
        }
        // First half of the ranks on emulated node 0, the rest on node 1, on whatever hosts
        // they run: a peer is reachable when it shares both.
        let nodes: Vec<u64> = (0..world).map(|r| u64::from(r >= world / 2)).collect();
        let hosts = self.topology().clone();
        let mut split = match self.extras.context_with_nodes("split-nodes", &nodes) {
            Ok(ctx) => ctx,
            Err(unavailable) => return Ok(unavailable.outcome()),
        };
        let mut v = Verify::default();
        let (buf, map) = split.allocate_symmetric_map::<u64>(16)?;
        for peer in 0..world {
            let same = nodes[peer] == nodes[rank] && hosts.same_host(peer, rank);
            v.eq(
                format!("direct flag of rank {peer}"),
                map.direct()[peer],
                same,
            );
            if !same {
                v.eq(format!("base of rank {peer}"), map.table.bases()[peer], 0);
                let store = split.store_u64(&map.table, buf.addr(), peer, &[1]);
                v.that(
                    format!("a store into unreachable rank {peer} was not refused ({store:?})"),
                    matches!(
                        store,
                        Err(Error::Translate(TranslateError::PeerNotDirect { .. }))
                    ),
                );
                let translated = map.translate(buf.addr(), rank, peer);
                v.that(
                    format!(
                        "translation to unreachable rank {peer} was not refused ({translated:?})"
                    ),
                    matches!(translated, Err(TranslateError::PeerNotDirect { .. })),
                );
            }
        }
        split.free(buf)?;
        split.finalize()?;
        Ok(v.outcome())
    }

    fn free_then_allocate(&mut self, f: Fixture) -> Result<Outcome, Error> {
        let mut v = Verify::default();
        let a_len = f.a.len();
        f.free(self.ctx)?;
        let (again, table) = self.ctx.allocate_symmetric::<u64>(a_len)?;
        v.eq(
            "local entry after reallocation",
            table.bases()[self.rank()],
            again.addr(),
        );
        let data: Vec<u64> = (0..a_len).map(|i| pattern(self.rank(), i)).collect();
        v.ok("writing the new buffer", self.ctx.write(&again, &data));
        if let Some(got) = v.ok("reading the new buffer", self.ctx.read(&again)) {
            v.eq("data of the new buffer", got, data);
        }
        self.ctx.free(again)?;
        v.eq(
            "allocations outstanding after freeing all",
            self.ctx.outstanding().len(),
            0,
        );
        Ok(v.outcome())
    }

    fn out_of_order(&mut self) -> Result<Outcome, Error> {
        let (rank, world) = (self.rank(), self.world());
        if world < 2 {
            return Ok(Outcome::Skip("needs >= 2 ranks".into()));
        }
        if !self.ctx.provider().checks_collective_order() {
            return Ok(Outcome::Skip(format!(
                "provider {} does not compare collectives across ranks",
                self.ctx.provider().kind()
            )));
        }
        // A fresh context: the mismatch leaves it unusable, by design.
        let mut fresh = match self.extras.context_with_nodes("order", &vec![0; world]) {
            Ok(ctx) => ctx,
            Err(unavailable) => return Ok(unavailable.outcome()),
        };
        let mut v = Verify::default();
        // Even ranks allocate while odd ranks hit a barrier.
        let result = if rank % 2 == 0 {
            fresh
                .allocate_symmetric::<u64>(4)
                .map(|(b, _)| std::mem::forget(b))
        } else {
            fresh.barrier()
        };
        match result {
            // Another rank failed (stopped, gone) before the mismatch could show: a witness,
            // not a check that failed.
            Err(e) if e.is_peer_failure() => return Err(e),
            Err(Error::CollectiveMismatch(m)) => {
                v.eq(
                    "ranks named by the mismatch",
                    m.ranks(),
                    (0..world).collect::<Vec<_>>(),
                );
            }
            other => v.that(
                format!("expected a collective mismatch, got {other:?}"),
                false,
            ),
        }
        v.that(
            "the context still accepts collectives after a mismatch",
            matches!(fresh.barrier(), Err(Error::Poisoned { .. })),
        );
        Ok(v.outcome())
    }
}

/// How the suite ended on this rank.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SuiteOutcome {
    /// Checks that failed on this rank.
    pub failed: usize,
    /// The suite stopped because another rank failed (this rank is a witness).
    pub peer_failed: bool,
}

/// Runs every check on this rank, calling `emit` with each result as soon as it is known.
/// A collective error stops the suite (the remaining checks are not run, which the
/// aggregation counts as failures).
pub fn run_suite<P: TranslatedOps>(
    ctx: &mut Context<P>,
    extras: &mut dyn Extras<P>,
    emit: &mut dyn FnMut(&CheckResult),
) -> Result<SuiteOutcome, String> {
    let all: Vec<&CheckInfo> = CHECKS.iter().collect();
    run_checks(ctx, extras, &all, emit)
}

/// Runs the checks in `selected` on this rank, in table order whatever the order of
/// `selected`, as [`run_suite`] runs them all. Every rank must select the same checks.
///
/// The suite allocates what several checks share (two allocations and their tables) before the
/// first selected check that uses it, within that check (its time, and its failure if the
/// allocation fails), and frees it after the last check if no check freed it; a failure of
/// that free is logged and counted in [`SuiteOutcome::failed`], as no check's result names it.
pub fn run_checks<P: TranslatedOps>(
    ctx: &mut Context<P>,
    extras: &mut dyn Extras<P>,
    selected: &[&CheckInfo],
    emit: &mut dyn FnMut(&CheckResult),
) -> Result<SuiteOutcome, String> {
    let planned = PlannedFault::from_env()?;
    let (rank, world_size, provider) = (ctx.rank(), ctx.world_size(), ctx.provider().kind().name());
    let mut suite = Suite { ctx, extras };
    let mut fixture: Option<Fixture> = None;
    let mut outcome = SuiteOutcome::default();
    let chosen = CHECKS
        .iter()
        .filter(|info| selected.iter().any(|s| s.id == info.id));
    for info in chosen {
        fault::apply(planned.as_ref(), rank, info.id);
        let started = Instant::now();
        let (status, detail, stop) = match run_one(&mut suite, &mut fixture, info.run) {
            Ok(Outcome::Pass) => (Status::Pass, String::new(), false),
            Ok(Outcome::Skip(reason)) => (Status::Skip, reason, false),
            Ok(Outcome::Fail(why)) => (Status::Fail, why, false),
            Ok(Outcome::PeerFailed(why)) => {
                outcome.peer_failed = true;
                (
                    Status::Fail,
                    format!("another rank failed, suite stopped: {why}"),
                    true,
                )
            }
            Err(e) => {
                outcome.peer_failed = e.is_peer_failure();
                (
                    Status::Fail,
                    format!("collective failed, suite stopped: {e}"),
                    true,
                )
            }
        };
        outcome.failed += usize::from(status == Status::Fail);
        emit(&CheckResult {
            check: info.id.into(),
            name: info.name.into(),
            rank,
            world_size,
            provider: provider.into(),
            status,
            detail,
            micros: started.elapsed().as_micros() as u64,
        });
        if stop {
            // Leaked on purpose: freeing is collective and the collectives just failed.
            std::mem::forget(fixture.take());
            return Ok(outcome);
        }
    }
    if let Some(fixture) = fixture.take()
        && let Err(e) = fixture.free(suite.ctx)
    {
        // No check owns this collective: the exit status tells, the log says why.
        tracing::error!("freeing the allocations the checks share failed: {e}");
        outcome.failed += 1;
        outcome.peer_failed = e.is_peer_failure();
    }
    Ok(outcome)
}

/// Runs one check, allocating the fixture first if it uses one and none is left.
fn run_one<P: TranslatedOps>(
    suite: &mut Suite<'_, P>,
    fixture: &mut Option<Fixture>,
    run: Run,
) -> Result<Outcome, Error> {
    let mut take = |ctx: &mut Context<P>| match fixture.take() {
        Some(shared) => Ok(shared),
        None => Fixture::allocate(ctx),
    };
    match run {
        Run::Alone(check) => check(suite),
        Run::Uses(check) => {
            let shared = take(suite.ctx)?;
            let result = check(suite, &shared);
            *fixture = Some(shared);
            result
        }
        Run::Frees(check) => {
            let shared = take(suite.ctx)?;
            check(suite, shared)
        }
    }
}

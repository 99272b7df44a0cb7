//! The checks' bodies: the [`Checks`] trait, one method per check, implemented once for every
//! provider by [`Suite`].

use super::extras::Extras;
use super::fixture::{B_LEN, CHUNK, Fixture, pattern};
use super::verify::{Outcome, Verify};
use symmem::{Context, Error, Topology, TranslateError, TranslatedOps};

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

/// The checks over one provider. Object safe, so that [`CHECKS`](super::CHECKS) holds them
/// once for every provider; [`Suite`] implements them.
pub(super) trait Checks {
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

pub(super) struct Suite<'a, P: TranslatedOps> {
    pub(super) ctx: &'a mut Context<P>,
    pub(super) extras: &'a mut dyn Extras<P>,
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

//! The session itself ([`Session`]): a [`Context`] over the host or a GPU provider, and the
//! live allocations with what Python needs about them; and what a session needs of its
//! provider beyond the context ([`Provider`]: where kernels read an allocation's peer-bases
//! table, and the device wait before a free or a barrier).
//!
//! Who touches what: a `Session` is made on the session thread and never leaves it (a GPU
//! runtime's current device is per thread, and the GPU provider is not `Send`); each of its
//! methods runs there, inside one request ([`handoff`](super::handoff)). It alone writes the
//! [`index`] of live allocations, and only for allocations whose table was made
//! (`Live::indexed`): on allocate, free and finalize (which empties the index before the
//! context ends). It alone marks an allocation's tracker freed or reported.

use super::index::{self, DataRef, Entry, Tracker, Watch};
use super::{AllocOut, Fail, Info, Outstanding};
use crate::dlpack::{DLDevice, KDL_CPU, Keep, TensorSpec};
use crate::dtype::{self, DType};
use crate::trace;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use symmem::{Context, PeerTable, RankIdentity, SymmetricBuffer, SymmetricProvider};

/// What a session needs of its provider beyond the context: where kernels read a table.
pub(super) trait Provider: SymmetricProvider {
    /// Bytes to allocate for a tensor of `bytes` on `world` ranks, and where in them the
    /// kernel table goes (`None`: it lives elsewhere); `None` overall when that overflows.
    fn room(bytes: usize, world: usize) -> Option<(usize, Option<usize>)>;

    /// Where the kernel table of a fresh allocation's `table` lives (at `at` when
    /// [`Provider::room`] made room for it); its entries are there after
    /// [`Provider::complete_table`].
    fn kernel_table(&self, table: &PeerTable, at: Option<u64>) -> Result<Table, Fail>;

    /// Writes `table`'s entries to the kernel table at `at` and waits until they are there:
    /// kernels on any stream, and Python, may read them afterwards.
    fn complete_table(&self, table: &PeerTable, at: Option<u64>) -> Result<(), Fail>;

    /// Waits for every kernel this process queued on the provider's device, on any stream:
    /// before a free (no kernel still touches the memory when it is reused) and a barrier
    /// (stores made before it are complete).
    fn device_wait(&self) -> Result<(), Fail>;
}

/// A fresh allocation's table entries, still to be written where its kernel table lives
/// ([`Session::complete_table`]).
pub(super) struct TableEntries {
    table: PeerTable,
    at: Option<u64>,
}

/// Where an allocation's kernel table lives.
pub(super) enum Table {
    Host(Arc<[i64]>),
    /// A device copy made for Python, inside the allocation after the tensor.
    Device {
        addr: u64,
    },
}

/// A live allocation as the session thread keeps it.
struct Live {
    buffer: SymmetricBuffer<u8>,
    tracker: Arc<Tracker>,
    spec: TensorSpec,
    /// Whether the table was made (and the allocation is in the [`index`]).
    indexed: bool,
}

/// The one session of the process, on the session thread.
pub(super) struct Session<P: Provider> {
    ctx: Context<P>,
    device: DLDevice,
    identity: RankIdentity,
    live: BTreeMap<u64, Live>,
    finalized: bool,
    /// How many times the session waited for the device (tests: free's opt-out is honoured).
    device_waits: u64,
}

impl<P: Provider> Session<P> {
    pub(super) fn new(ctx: Context<P>, device: DLDevice, identity: RankIdentity) -> Self {
        Self {
            ctx,
            device,
            identity,
            live: BTreeMap::new(),
            finalized: false,
            device_waits: 0,
        }
    }

    fn usable(&self) -> Result<(), Fail> {
        if self.finalized {
            return Err(Fail::Symmem(FINALIZED.into()));
        }
        Ok(())
    }

    pub(super) fn info(&self) -> Info {
        Info {
            provider: self.ctx.provider().kind().name(),
            rank: self.ctx.rank(),
            world_size: self.ctx.world_size(),
            local_rank: self.identity.local_rank,
            local_world_size: self.identity.local_world_size,
            launcher: self.identity.launcher.to_string(),
            device: self.device,
            finalized: self.finalized,
        }
    }

    /// Collective: a new allocation, with its kernel table's place but not yet its entries
    /// ([`Session::complete_table`] writes them).
    pub(super) fn allocate(
        &mut self,
        shape: Vec<i64>,
        dtype: DType,
    ) -> Result<(AllocOut, TableEntries), Fail> {
        self.usable()?;
        let bytes = checked_bytes(&shape, dtype)?;
        let (total, table_at) = P::room(bytes, self.ctx.world_size())
            .ok_or_else(|| Fail::Value(format!("shape {shape:?} overflows the address space")))?;
        let (buffer, map) = self.ctx.allocate_symmetric_map::<u8>(total)?;
        trace::mark("session: collective and map");
        let (id, base) = (buffer.id(), buffer.addr());
        let tracker = Tracker::new(id, self.ctx.rank(), base, bytes as u64);
        let at = table_at.map(|at| base + at as u64);
        let spec = TensorSpec {
            data: base,
            shape,
            dtype,
            device: self.device,
        };
        let table = self.ctx.provider().kernel_table(&map.table, at);
        let indexed = table.is_ok();
        self.live.insert(
            id,
            Live {
                buffer,
                tracker: Arc::clone(&tracker),
                spec: spec.clone(),
                indexed,
            },
        );
        // On failure the allocation is live on every rank; it stays tracked (finalize reports
        // it), with no tensor.
        let entry = Entry {
            id,
            rank: self.ctx.rank(),
            base,
            bytes: bytes as u64,
            bases: map.table.bases().to_vec(),
            direct: map.direct().to_vec(),
            table: self.table_spec(table?, map.table.world_size(), &tracker),
            spec,
        };
        let out = entry.describe(Some(DataRef::new(&tracker)));
        index::insert(entry);
        Ok((
            out,
            TableEntries {
                table: map.table,
                at,
            },
        ))
    }

    /// Writes a fresh allocation's table entries and waits until they are there
    /// ([`Provider::complete_table`]).
    pub(super) fn complete_table(&self, entries: TableEntries) -> Result<(), Fail> {
        let done = self
            .ctx
            .provider()
            .complete_table(&entries.table, entries.at);
        trace::mark("session: table complete");
        done.map_err(|e| {
            Fail::Symmem(format!(
                "the peer-bases table of the allocation just made did not reach the device: {}",
                e.message()
            ))
        })
    }

    /// How many times the session waited for the device.
    pub(super) fn device_waits(&self) -> u64 {
        self.device_waits
    }

    /// Waits for every kernel this process queued on the device ([`Provider::device_wait`]).
    fn device_wait(&mut self) -> Result<(), Fail> {
        self.device_waits += 1;
        self.ctx.provider().device_wait()
    }

    /// The peer-bases table as a tensor: int64, one entry per rank.
    fn table_spec(&self, table: Table, world_size: usize, of: &Arc<Tracker>) -> (TensorSpec, Keep) {
        let (data, keep, device) = match table {
            Table::Host(entries) => (
                entries.as_ptr() as u64,
                Keep::HostTable(entries),
                DLDevice {
                    device_type: KDL_CPU,
                    device_id: 0,
                },
            ),
            Table::Device { addr } => (
                addr,
                Keep::DeviceTable(Arc::new(Watch::new(of))),
                self.device,
            ),
        };
        let spec = TensorSpec {
            data,
            shape: vec![world_size as i64],
            dtype: dtype::INT64,
            device,
        };
        (spec, keep)
    }

    /// Collective: frees allocation `id`, first waiting for the device unless the caller
    /// did (`synchronize` false).
    pub(super) fn free(&mut self, id: u64, synchronize: bool) -> Result<(), Fail> {
        self.usable()?;
        let missing = || {
            Fail::Value(format!(
                "no live symmetric allocation #{id} on this rank (freed already?)"
            ))
        };
        // Misuse is refused before the wait, the wait comes before the collective.
        if !self.live.contains_key(&id) {
            return Err(missing());
        }
        if synchronize {
            self.device_wait()?;
            trace::mark("session: device waited");
        }
        let live = self.live.remove(&id).ok_or_else(missing)?;
        if live.indexed {
            index::remove(id, live.spec.data);
        }
        let Live {
            buffer, tracker, ..
        } = live;
        // On failure the context keeps the allocation on its books (finalize reports it). A
        // device table goes with the allocation.
        self.ctx.free(buffer)?;
        trace::mark("session: collective freed");
        tracker.mark_freed();
        Ok(())
    }

    /// Collective: waits for the device (stores of kernels included), then for every rank.
    pub(super) fn barrier(&mut self) -> Result<(), Fail> {
        self.usable()?;
        self.device_wait()?;
        Ok(self.ctx.barrier()?)
    }

    /// One allocate + free of `bytes` through the Rust `Context` alone (no table for Python,
    /// no index), timed here: the floor the Python face is measured against. Collective.
    pub(super) fn bench_context_pair(&mut self, bytes: usize) -> Result<(u64, u64), Fail> {
        self.usable()?;
        let start = Instant::now();
        let (buffer, _table) = self.ctx.allocate_symmetric::<u8>(bytes)?;
        let allocated = start.elapsed();
        self.ctx.free(buffer)?;
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Ok((nanos(allocated), nanos(start.elapsed() - allocated)))
    }

    pub(super) fn outstanding(&self) -> Vec<Outstanding> {
        self.ctx
            .outstanding()
            .into_iter()
            .map(|record| self.outstanding_of(record.id, record.addr, record.bytes))
            .collect()
    }

    fn outstanding_of(&self, id: u64, addr: u64, bytes: u64) -> Outstanding {
        let live = self.live.get(&id);
        Outstanding {
            id,
            addr,
            // The tensor's bytes (a GPU allocation also holds its table).
            bytes: live.map_or(bytes, |l| l.tracker.bytes()),
            dtype: live.map_or("uint8", |l| l.spec.dtype.name),
            shape: live.map_or_else(|| vec![bytes as i64], |l| l.spec.shape.clone()),
            dropped: live.is_some_and(|l| l.tracker.dropped()),
        }
    }

    pub(super) fn finalize(&mut self) -> Result<Vec<Outstanding>, Fail> {
        self.usable()?;
        self.device_wait()?;
        // Nothing may be exported or described any more (tables go with the library).
        index::clear();
        let report = self.ctx.finalize()?;
        self.finalized = true;
        let outstanding = report
            .outstanding
            .iter()
            .map(|r| self.outstanding_of(r.id, r.addr, r.bytes))
            .collect();
        for (_, live) in std::mem::take(&mut self.live) {
            live.tracker.mark_reported();
            // Reported just now by the context; dropping the buffer would warn a second time.
            std::mem::forget(live.buffer);
        }
        Ok(outstanding)
    }
}

/// What every call says once the session was finalized.
pub(super) const FINALIZED: &str = "symmem.finalize() was called: this process cannot use \
                                    symmem again (the GPU libraries initialise once per \
                                    process); start a new process";

/// The most dimensions a tensor may have: numpy, like other DLPack consumers, takes 64.
const MAX_DIMS: usize = 64;

/// Bytes of a tensor of `shape` and `dtype`, refused before any collective when zero or absurd.
pub(super) fn checked_bytes(shape: &[i64], dtype: DType) -> Result<usize, Fail> {
    let shown = format!("{shape:?}");
    if shape.is_empty() {
        return Err(Fail::Value(
            "a symmetric tensor needs at least one dimension, e.g. allocate_symmetric(1024)".into(),
        ));
    }
    if shape.len() > MAX_DIMS {
        return Err(Fail::Value(format!(
            "a symmetric tensor has at most {MAX_DIMS} dimensions (DLPack consumers such as numpy \
             take no more), got {}",
            shape.len()
        )));
    }
    if let Some(d) = shape.iter().find(|&&d| d < 0) {
        return Err(Fail::Value(format!(
            "negative dimension {d} in shape {shown}"
        )));
    }
    if shape.contains(&0) {
        return Err(Fail::Value(format!(
            "shape {shown} has no elements: symmetric allocations must have the same non-zero \
             size on every rank"
        )));
    }
    shape
        .iter()
        .try_fold(dtype.itemsize(), |acc, &d| acc.checked_mul(d as usize))
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| {
            Fail::Value(format!(
                "shape {shown} of {} overflows the address space",
                dtype.name
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_checked_before_any_collective() {
        let f32 = dtype::lookup("float32").unwrap();
        assert_eq!(checked_bytes(&[2, 3], f32).unwrap(), 24);
        for bad in [
            &[][..],
            &[0][..],
            &[4, 0][..],
            &[-1][..],
            &[i64::MAX, 2][..],
            &[1; 65][..],
        ] {
            assert!(
                matches!(checked_bytes(bad, f32), Err(Fail::Value(_))),
                "{bad:?}"
            );
        }
    }
}

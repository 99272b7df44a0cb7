//! Plain device memory (tables, staging) that frees itself.

use super::{Shim, ShimError};
use std::rc::Rc;

/// A buffer of device memory of this process, freed when dropped. Not symmetric memory: that is
/// collective to free and never freed from `Drop`.
pub(crate) struct DeviceBuffer {
    shim: Rc<Shim>,
    ptr: u64,
    bytes: usize,
}

impl DeviceBuffer {
    /// `bytes` (> 0) of device memory on this process's GPU.
    pub(crate) fn new(shim: &Rc<Shim>, bytes: usize) -> Result<Self, ShimError> {
        let ptr = shim.device_alloc(bytes)?;
        Ok(Self {
            shim: Rc::clone(shim),
            ptr,
            bytes,
        })
    }

    /// A new buffer holding `data`, uploaded on the shim's stream (kernels queued after it see
    /// it; `data` may go right away).
    pub(crate) fn with_contents(shim: &Rc<Shim>, data: &[u8]) -> Result<Self, ShimError> {
        let buffer = Self::new(shim, data.len())?;
        buffer.upload(data)?;
        Ok(buffer)
    }

    pub(crate) fn addr(&self) -> u64 {
        self.ptr
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Queues a copy of `data` to the start of the buffer.
    ///
    /// Panics when `data` is longer than the buffer (callers size buffers for their data).
    pub(crate) fn upload(&self, data: &[u8]) -> Result<(), ShimError> {
        assert!(
            data.len() <= self.bytes,
            "upload larger than its device buffer"
        );
        // SAFETY: the buffer is live device memory of at least `data.len()` bytes; kernels that
        // read it are queued on the same stream, after this copy.
        unsafe { self.shim.copy_to_device_async(self.ptr, data) }
    }

    /// Copies the start of the buffer into `out`, after the work queued before.
    ///
    /// Panics when `out` is longer than the buffer.
    pub(crate) fn download(&self, out: &mut [u8]) -> Result<(), ShimError> {
        assert!(
            out.len() <= self.bytes,
            "download larger than its device buffer"
        );
        // SAFETY: the buffer is live device memory of at least `out.len()` bytes.
        unsafe { self.shim.copy_to_host(out, self.ptr) }
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `device_alloc` and this is its only owner; the runtime's free
        // waits for the queued work that may still read it.
        if let Err(e) = unsafe { self.shim.device_free(self.ptr) } {
            tracing::warn!("a device buffer of {} bytes was not freed: {e}", self.bytes);
        }
    }
}

/// Device memory for allocation tables: slots of one size carved from chunks of device memory,
/// so a table costs the runtime no allocation of its own (one per [`TableArena::CHUNK_BYTES`]
/// of tables), and a freed table's slot serves the next one.
///
/// A slot is written only by uploads queued on the shim's stream, so reusing one is ordered
/// after every kernel queued before that read the old table.
pub(crate) struct TableArena {
    shim: Rc<Shim>,
    slot_bytes: usize,
    chunks: Vec<DeviceBuffer>,
    free: Vec<u64>,
}

impl TableArena {
    /// Device memory taken at a time.
    pub(crate) const CHUNK_BYTES: usize = 64 << 10;

    /// An empty arena for tables of `entries` int64 (no device memory until the first slot).
    pub(crate) fn new(shim: &Rc<Shim>, entries: usize) -> Self {
        // 16-byte slots: a table never shares a 16-byte sector with another.
        let slot_bytes = (entries.max(1) * 8).next_multiple_of(16);
        Self {
            shim: Rc::clone(shim),
            slot_bytes,
            chunks: Vec::new(),
            free: Vec::new(),
        }
    }

    pub(crate) fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    /// The device address of a free slot; takes a new chunk when none is left.
    pub(crate) fn take(&mut self) -> Result<u64, ShimError> {
        if let Some(slot) = self.free.pop() {
            return Ok(slot);
        }
        let bytes = Self::CHUNK_BYTES.max(self.slot_bytes);
        let chunk = DeviceBuffer::new(&self.shim, bytes)?;
        let slots = bytes / self.slot_bytes;
        // Handed out from the chunk's start: the last pushed is the first taken.
        self.free.extend(
            (0..slots)
                .rev()
                .map(|i| chunk.addr() + (i * self.slot_bytes) as u64),
        );
        self.chunks.push(chunk);
        Ok(self.free.pop().expect("a chunk holds at least one slot"))
    }

    /// `slot` (from [`TableArena::take`]) serves again.
    pub(crate) fn give_back(&mut self, slot: u64) {
        debug_assert!(!self.free.contains(&slot), "slot given back twice");
        self.free.push(slot);
    }

    /// Frees every chunk (callers drain the stream first and drop the tables).
    pub(crate) fn clear(&mut self) {
        self.free.clear();
        self.chunks.clear();
    }
}

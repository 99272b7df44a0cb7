use std::collections::BTreeMap;

/// Every allocation starts on this boundary (wide enough for any vector load).
pub const ALIGNMENT: u64 = 256;

/// First-fit allocator over offsets of a heap. Deterministic: the same sequence of calls on
/// every rank yields the same offsets, which is what makes the heaps symmetric.
#[derive(Clone, Debug)]
pub struct SymmetricAllocator {
    size: u64,
    /// Free blocks: offset -> length, never adjacent (coalesced).
    free: BTreeMap<u64, u64>,
    /// Live blocks: offset -> length.
    live: BTreeMap<u64, u64>,
}

impl SymmetricAllocator {
    /// An allocator for a heap of `size` bytes (rounded down to the alignment).
    pub fn new(size: u64) -> Self {
        let size = size - size % ALIGNMENT;
        let mut free = BTreeMap::new();
        if size > 0 {
            free.insert(0, size);
        }
        Self {
            size,
            free,
            live: BTreeMap::new(),
        }
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// Reserves `bytes` (rounded up to the alignment); `None` when no free block is big enough.
    pub fn alloc(&mut self, bytes: u64) -> Option<u64> {
        let need = bytes.max(1).checked_next_multiple_of(ALIGNMENT)?;
        let (&offset, &len) = self.free.iter().find(|&(_, &len)| len >= need)?;
        self.free.remove(&offset);
        if len > need {
            self.free.insert(offset + need, len - need);
        }
        self.live.insert(offset, need);
        Some(offset)
    }

    /// Releases the block starting at `offset`; returns its length, or `None` when no live
    /// block starts there.
    pub fn free(&mut self, offset: u64) -> Option<u64> {
        let len = self.live.remove(&offset)?;
        let mut start = offset;
        let mut end = offset + len;
        if let Some((&prev, &prev_len)) = self.free.range(..offset).next_back()
            && prev + prev_len == offset
        {
            self.free.remove(&prev);
            start = prev;
        }
        if let Some(next_len) = self.free.remove(&end) {
            end += next_len;
        }
        self.free.insert(start, end - start);
        Some(len)
    }

    /// Length of the live block at `offset`, if one starts there.
    pub fn live_len(&self, offset: u64) -> Option<u64> {
        self.live.get(&offset).copied()
    }

    pub fn largest_free(&self) -> u64 {
        self.free.values().copied().max().unwrap_or(0)
    }

    pub fn bytes_in_use(&self) -> u64 {
        self.live.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_first_fit_and_reuse() {
        let mut a = SymmetricAllocator::new(4096);
        assert_eq!(a.alloc(1), Some(0));
        assert_eq!(a.alloc(300), Some(256));
        assert_eq!(a.alloc(256), Some(768));
        assert_eq!(a.free(256), Some(512));
        // The freed hole is reused first.
        assert_eq!(a.alloc(100), Some(256));
        assert_eq!(a.alloc(256), Some(512));
        assert_eq!(a.bytes_in_use(), 256 * 4);
    }

    #[test]
    fn coalesces_and_exhausts() {
        let mut a = SymmetricAllocator::new(1024);
        let x = a.alloc(256).unwrap();
        let y = a.alloc(256).unwrap();
        let z = a.alloc(512).unwrap();
        assert_eq!(a.alloc(1), None);
        assert_eq!(a.largest_free(), 0);
        a.free(y).unwrap();
        a.free(x).unwrap();
        a.free(z).unwrap();
        assert_eq!(a.largest_free(), 1024);
        assert_eq!(a.alloc(1024), Some(0));
        assert_eq!(a.free(12345), None);
    }

    #[test]
    fn same_calls_same_offsets() {
        let script = |a: &mut SymmetricAllocator| {
            let mut out = Vec::new();
            let mut live = Vec::new();
            for i in 0..200u64 {
                if i % 3 == 2 {
                    let off = live.remove((i as usize * 7) % live.len());
                    a.free(off).unwrap();
                } else if let Some(off) = a.alloc((i * 97) % 5000 + 1) {
                    live.push(off);
                    out.push(off);
                }
            }
            out
        };
        let (mut a, mut b) = (
            SymmetricAllocator::new(1 << 20),
            SymmetricAllocator::new(1 << 20),
        );
        let seq = script(&mut a);
        assert_eq!(seq, script(&mut b));
        assert!(seq.iter().all(|o| o % ALIGNMENT == 0));
    }
}

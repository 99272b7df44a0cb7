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

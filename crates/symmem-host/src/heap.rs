use crate::HostError;
use nix::sys::mman::{MapFlags, ProtFlags, mmap, munmap};
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, OwnedFd};
use std::ptr::NonNull;

/// A shared mapping of a heap memfd, unmapped on drop.
pub(crate) struct Mapping {
    base: NonNull<std::ffi::c_void>,
    bytes: u64,
}

impl Mapping {
    pub(crate) fn new(fd: impl AsFd, bytes: u64) -> Result<Self, HostError> {
        let len = NonZeroUsize::new(bytes as usize).ok_or(HostError::HeapTooSmall {
            bytes,
            min: crate::ALIGNMENT,
        })?;
        // SAFETY: a fresh shared mapping chosen by the kernel; it aliases no Rust object.
        let base = unsafe {
            mmap(
                None,
                len,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                fd,
                0,
            )
        }
        .map_err(|source| HostError::Os {
            what: "mapping a symmetric heap",
            source,
        })?;
        Ok(Self { base, bytes })
    }

    pub(crate) fn base(&self) -> u64 {
        self.base.as_ptr() as u64
    }

    /// Whether `[addr, addr + len)` lies inside this mapping.
    pub(crate) fn contains(&self, addr: u64, len: u64) -> bool {
        addr >= self.base()
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= self.base() + self.bytes)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: we own this mapping; pointers into it die with the provider.
        let _ = unsafe { munmap(self.base, self.bytes as usize) };
    }
}

/// Creates this rank's heap: an anonymous, sparse memfd with no name in any file system.
pub(crate) fn create_heap(rank: usize, bytes: u64) -> Result<OwnedFd, HostError> {
    let name = std::ffi::CString::new(format!("symmem-heap-rank{rank}")).expect("no NUL");
    let fd = nix::sys::memfd::memfd_create(&name, nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC)
        .map_err(|source| HostError::Os {
            what: "creating the heap memfd",
            source,
        })?;
    nix::unistd::ftruncate(&fd, bytes as i64).map_err(|source| HostError::Os {
        what: "sizing the heap memfd",
        source,
    })?;
    Ok(fd)
}

use crate::HostError;
use nix::sys::mman::{MapFlags, ProtFlags, mmap, munmap};
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
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
        .map_err(|cause| HostError::Os {
            what: "mapping a symmetric heap",
            cause,
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

/// Creates this rank's heap: an anonymous, sparse memfd with no name in any file system, sealed
/// against resizing so that no rank can shrink a heap under the others (SIGBUS).
pub(crate) fn create_heap(rank: usize, bytes: u64) -> Result<OwnedFd, HostError> {
    use nix::sys::memfd::{MemFdCreateFlag, memfd_create};
    let os = |what| move |cause| HostError::Os { what, cause };
    let name = std::ffi::CString::new(format!("symmem-heap-rank{rank}")).expect("no NUL");
    let fd = memfd_create(
        &name,
        MemFdCreateFlag::MFD_CLOEXEC | MemFdCreateFlag::MFD_ALLOW_SEALING,
    )
    .map_err(os("creating the heap memfd"))?;
    nix::unistd::ftruncate(&fd, bytes as i64).map_err(os("sizing the heap memfd"))?;
    let seals = nix::fcntl::SealFlag::F_SEAL_SHRINK
        | nix::fcntl::SealFlag::F_SEAL_GROW
        | nix::fcntl::SealFlag::F_SEAL_SEAL;
    nix::fcntl::fcntl(fd.as_raw_fd(), nix::fcntl::FcntlArg::F_ADD_SEALS(seals))
        .map_err(os("sealing the heap memfd"))?;
    Ok(fd)
}

/// Checks a peer's heap descriptor before mapping it: sealed against shrinking, and at least
/// `bytes` long, so that touching the mapping can never fault.
pub(crate) fn check_peer_heap(fd: &OwnedFd, bytes: u64, peer: usize) -> Result<(), HostError> {
    let size = nix::sys::stat::fstat(fd.as_raw_fd())
        .map_err(|cause| HostError::Os {
            what: "inspecting a peer heap",
            cause,
        })?
        .st_size as u64;
    let seals =
        nix::fcntl::fcntl(fd.as_raw_fd(), nix::fcntl::FcntlArg::F_GET_SEALS).map_err(|cause| {
            HostError::Os {
                what: "reading a peer heap's seals",
                cause,
            }
        })?;
    let sealed = nix::fcntl::SealFlag::from_bits_truncate(seals)
        .contains(nix::fcntl::SealFlag::F_SEAL_SHRINK);
    if size < bytes || !sealed {
        return Err(HostError::BadPeerHeap {
            rank: peer,
            size,
            expected: bytes,
        });
    }
    Ok(())
}

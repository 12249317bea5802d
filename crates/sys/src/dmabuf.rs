//! dma-buf CPU-access bracketing: `DMA_BUF_IOCTL_SYNC`.
//!
//! Contract: `include/uapi/linux/dma-buf.h` and Documentation/driver-api/dma-buf.rst
//! ("CPU Access to DMA Buffer Objects"): a CPU access to an mmap'ed dma-buf must be
//! bracketed by `DMA_BUF_SYNC_START` and `DMA_BUF_SYNC_END` with the same direction flags,
//! so that caches are cleaned/invalidated on non-coherent SoCs (every Rockchip board).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `struct dma_buf_sync { __u64 flags; }` from `include/uapi/linux/dma-buf.h` (8 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DmaBufSync {
    /// `DMA_BUF_SYNC_*` flags.
    pub flags: u64,
}

/// The CPU will read (`DMA_BUF_SYNC_READ`).
pub const DMA_BUF_SYNC_READ: u64 = 1 << 0;
/// The CPU will write (`DMA_BUF_SYNC_WRITE`).
#[allow(clippy::identity_op)] // spelled as in the header: `(2 << 0)`
pub const DMA_BUF_SYNC_WRITE: u64 = 2 << 0;
/// Both (`DMA_BUF_SYNC_RW`).
pub const DMA_BUF_SYNC_RW: u64 = DMA_BUF_SYNC_READ | DMA_BUF_SYNC_WRITE;
/// Access begins (`DMA_BUF_SYNC_START`).
pub const DMA_BUF_SYNC_START: u64 = 0 << 2;
/// Access ends (`DMA_BUF_SYNC_END`).
pub const DMA_BUF_SYNC_END: u64 = 1 << 2;

nix::ioctl_write_ptr!(
    /// `DMA_BUF_IOCTL_SYNC` as nix generates it; [`sync`] is the wrapper to call.
    dma_buf_ioctl_sync_raw,
    b'b',
    0,
    DmaBufSync
);

/// The request number of `DMA_BUF_IOCTL_SYNC`: `_IOW('b', 0, struct dma_buf_sync)`.
pub const DMA_BUF_IOCTL_SYNC: u64 = nix::request_code_write!(b'b', 0, std::mem::size_of::<DmaBufSync>()) as u64;

/// Issues `DMA_BUF_IOCTL_SYNC` with `flags` (a direction plus START or END) on a dma-buf.
///
/// Errors: `ENOTTY` when `fd` is not a dma-buf, `EINVAL` for bad flags, `EINTR`/`EAGAIN`
/// are retried here as the kernel doc asks.
pub fn sync(fd: BorrowedFd<'_>, flags: u64) -> io::Result<()> {
    let arg = DmaBufSync { flags };
    loop {
        // SAFETY: `fd` is a live descriptor for the duration of the call and `arg` is a valid
        // `struct dma_buf_sync` that the kernel only reads.
        match unsafe { dma_buf_ioctl_sync_raw(fd.as_raw_fd(), &arg) } {
            Ok(_) => return Ok(()),
            Err(nix::errno::Errno::EINTR) | Err(nix::errno::Errno::EAGAIN) => continue,
            Err(e) => return Err(io::Error::from(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dma_buf_sync_matches_uapi() {
        // include/uapi/linux/dma-buf.h: struct dma_buf_sync is one __u64;
        // DMA_BUF_IOCTL_SYNC = _IOW(DMA_BUF_BASE 'b', 0, struct dma_buf_sync) = 0x40086200
        // on x86_64 and aarch64 (asm-generic ioctl encoding).
        assert_eq!(std::mem::size_of::<DmaBufSync>(), 8);
        assert_eq!(DMA_BUF_IOCTL_SYNC, 0x4008_6200);
        assert_eq!(DMA_BUF_SYNC_END | DMA_BUF_SYNC_RW, 7);
    }
}

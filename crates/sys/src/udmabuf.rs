//! udmabuf: turning a sealed memfd into a dma-buf (`UDMABUF_CREATE` on `/dev/udmabuf`).
//!
//! Contract: `include/uapi/linux/udmabuf.h`. The memfd must be created with
//! `MFD_ALLOW_SEALING`, sealed with `F_SEAL_SHRINK` (and not `F_SEAL_WRITE`), and the
//! offset and size must be page-aligned; the result is an ordinary dma-buf fd that supports
//! mmap and `DMA_BUF_IOCTL_SYNC`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `struct udmabuf_create` from `include/uapi/linux/udmabuf.h` (24 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct UdmabufCreate {
    /// The memfd to export.
    pub memfd: u32,
    /// `UDMABUF_FLAGS_CLOEXEC`.
    pub flags: u32,
    /// Byte offset into the memfd (page-aligned).
    pub offset: u64,
    /// Bytes to export (page-aligned).
    pub size: u64,
}

/// Close the new dma-buf fd on exec (`UDMABUF_FLAGS_CLOEXEC`).
pub(crate) const UDMABUF_FLAGS_CLOEXEC: u32 = 0x01;

nix::ioctl_write_ptr!(
    /// `UDMABUF_CREATE` as nix generates it; [`create`] is the wrapper to call.
    udmabuf_create_raw,
    b'u',
    0x42,
    UdmabufCreate
);

/// The request number of `UDMABUF_CREATE`: `_IOW('u', 0x42, struct udmabuf_create)`.
pub const UDMABUF_CREATE: u64 = nix::request_code_write!(b'u', 0x42, std::mem::size_of::<UdmabufCreate>()) as u64;

/// Creates a dma-buf over `size` bytes of `memfd` from `offset` via `/dev/udmabuf`
/// (`dev`). Errors: `EINVAL` if the memfd is not sealed against shrinking or is sealed
/// against writes, or offset/size are not page-aligned; `ENOMEM`/`EFBIG` past the module's
/// `size_limit_mb`.
pub fn create(dev: BorrowedFd<'_>, memfd: BorrowedFd<'_>, offset: u64, size: u64) -> io::Result<OwnedFd> {
    let arg = UdmabufCreate { memfd: memfd.as_raw_fd() as u32, flags: UDMABUF_FLAGS_CLOEXEC, offset, size };
    // SAFETY: both fds are live for the call; `arg` is a valid `struct udmabuf_create` that
    // the kernel only reads.
    let fd = unsafe { udmabuf_create_raw(dev.as_raw_fd(), &arg) }.map_err(io::Error::from)?;
    // SAFETY: on success the ioctl returns a new file descriptor that we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udmabuf_create_matches_uapi() {
        // include/uapi/linux/udmabuf.h: __u32 memfd; __u32 flags; __u64 offset; __u64 size;
        // UDMABUF_CREATE = _IOW('u', 0x42, struct udmabuf_create) = 0x40187542.
        assert_eq!(std::mem::size_of::<UdmabufCreate>(), 24);
        assert_eq!(std::mem::offset_of!(UdmabufCreate, offset), 8);
        assert_eq!(UDMABUF_CREATE, 0x4018_7542);
    }
}

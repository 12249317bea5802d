//! Dma-bufs imported into MPP (`mpp_buffer_import`, `MPP_BUFFER_TYPE_EXT_DMA`), cached by
//! inode, each with the binding's own duplicate of the fd: what [`MppJpeg`] (its outputs and
//! dma-buf inputs) and [`Encoder`] (its input frames) hand to the hardware.

use std::collections::HashMap;
use std::ffi::c_int;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use anyhow::{anyhow, bail, Result};

use super::*;

/// (st_dev, st_ino) of an fd: the key a dma-buf is imported under (a dup or a re-received fd
/// of the same buffer finds the same import).
pub(super) fn fd_inode(fd: BorrowedFd<'_>) -> Result<(u64, u64)> {
    let st =
        nix::sys::stat::fstat(fd.as_raw_fd()).map_err(|e| anyhow!("fstat of dma-buf fd {}: {e}", fd.as_raw_fd()))?;
    Ok((st.st_dev, st.st_ino))
}

/// The binding's own duplicate of dma-buf `fd` and the `MppBufferInfo` (type
/// `MPP_BUFFER_TYPE_EXT_DMA`, `size` bytes, user index `index`) that gives MPP the duplicate:
/// MPP keeps EXT_DMA fds as given, so the caller keeps the duplicate open while MPP may use it.
pub(super) fn ext_dma_info(fd: BorrowedFd<'_>, size: usize, index: c_int) -> Result<(OwnedFd, MppBufferInfo)> {
    let own = fd
        .try_clone_to_owned()
        .map_err(|e| anyhow!("duplicating dma-buf fd {} for MPP: {}", fd.as_raw_fd(), crate::errno_words(&e)))?;
    let info = MppBufferInfo {
        type_: MPP_BUFFER_TYPE_EXT_DMA,
        size,
        ptr: std::ptr::null_mut(),
        hnd: std::ptr::null_mut(),
        fd: own.as_raw_fd(),
        index,
    };
    Ok((own, info))
}

/// `mpp_buffer_put` of `buffer` (one reference), a failure logged.
pub(super) fn put_buffer(put: MppBufferPutFn, buffer: MppHandle) {
    // SAFETY: a buffer the caller got or imported and holds one reference of, put once.
    if let Err(e) = check("mpp_buffer_put", unsafe { put(buffer, TAG.as_ptr()) }) {
        log::warn!("{e}");
    }
}

/// One imported dma-buf: the `MppBuffer` (one reference, put when evicted or cleared) and the
/// binding's own duplicate of the fd (MPP keeps `MPP_BUFFER_TYPE_EXT_DMA` fds as given, no
/// dup: `osal/allocator/allocator_ext_dma.c`). The duplicate keeps the dma-buf alive, so its
/// inode cannot be reused by another buffer while it is cached.
struct Imported {
    buffer: MppHandle,
    size: usize,
    /// When it was last handed out ([`Imports::tick`]).
    used: u64,
    _fd: OwnedFd,
}

/// The imports of one MPP context, by inode, at most `max` (beyond it the least recently used
/// is put).
pub(super) struct Imports {
    map: HashMap<(u64, u64), Imported>,
    max: usize,
    tick: u64,
}

impl Imports {
    /// An empty cache of at most `max` (>= 1) imports.
    pub(super) fn new(max: usize) -> Imports {
        Imports { map: HashMap::new(), max: max.max(1), tick: 0 }
    }

    /// Distinct dma-bufs held now.
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    /// The `MppBuffer` of dma-buf `fd` (`size` bytes): `mpp_buffer_import` (NULL group, type
    /// `MPP_BUFFER_TYPE_EXT_DMA`, a duplicate of the fd kept open) on first sight, cached by
    /// inode after (imported again when asked for more bytes than before). `put` is the
    /// library's `mpp_buffer_put_with_caller`, for evicted buffers.
    pub(super) fn get(
        &mut self,
        lib: &Libmpp,
        put: MppBufferPutFn,
        fd: BorrowedFd<'_>,
        size: usize,
    ) -> Result<MppHandle> {
        let key = fd_inode(fd)?;
        self.tick += 1;
        if let Some(i) = self.map.get_mut(&key) {
            if i.size >= size {
                i.used = self.tick;
                return Ok(i.buffer);
            }
        }
        let (own, mut info) = ext_dma_info(fd, size, self.tick as c_int)?;
        let mut buffer: MppHandle = std::ptr::null_mut();
        // SAFETY: NULL group + a buffer out-pointer = `mpp_buffer_import` (mpp_buffer.h);
        // `info` lives for the call (MPP copies it); static C strings.
        check("mpp_buffer_import(EXT_DMA)", unsafe {
            (lib.mpp_buffer_import_with_tag)(std::ptr::null_mut(), &mut info, &mut buffer, TAG.as_ptr(), TAG.as_ptr())
        })?;
        if buffer.is_null() {
            bail!("MPP mpp_buffer_import gave no buffer: the library at {} is broken", lib.path);
        }
        if !self.map.contains_key(&key) && self.map.len() >= self.max {
            let oldest = self.map.iter().min_by_key(|(_, i)| i.used).map(|(k, _)| *k);
            if let Some(old) = oldest.and_then(|k| self.map.remove(&k)) {
                put_buffer(put, old.buffer);
            }
        }
        if let Some(old) = self.map.insert(key, Imported { buffer, size, used: self.tick, _fd: own }) {
            // The same inode, now bigger (cannot happen for a dma-buf, whose size is fixed).
            put_buffer(put, old.buffer);
        }
        Ok(buffer)
    }

    /// `mpp_buffer_put` of every import, then closing the duplicates.
    pub(super) fn clear(&mut self, put: MppBufferPutFn) {
        for (_, i) in self.map.drain() {
            put_buffer(put, i.buffer);
        }
    }
}

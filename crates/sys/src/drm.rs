//! DRM device nodes (`/dev/dri/card*`) through the `drm` crate (pre-generated bindings of
//! `include/uapi/drm/drm.h` and `drm_mode.h`): opening a card, what it can do, and the dumb
//! buffers zcpipe allocates as dma-bufs (`--heap drm`).
//!
//! Contracts: a dumb buffer (`DRM_IOCTL_MODE_CREATE_DUMB`, `struct drm_mode_create_dumb`:
//! width, height and bits per pixel in; GEM handle, pitch and size in bytes out) is a
//! linear, CPU-mappable buffer that every KMS driver with `DRM_CAP_DUMB_BUFFER` makes
//! (Documentation/gpu/drm-kms.rst, "Dumb Buffer Objects"; drivers/gpu/drm/drm_dumb_buffers.c).
//! `DRM_IOCTL_PRIME_HANDLE_TO_FD` exports a GEM handle as a dma-buf fd; with `DRM_RDWR` the
//! fd can be mapped writable by the CPU (Documentation/gpu/drm-mm.rst, "PRIME Buffer
//! Sharing"). The dma-buf holds its own reference to the object, so the GEM handle is closed
//! (`DRM_IOCTL_MODE_DESTROY_DUMB`) as soon as the fd exists. Dumb buffers are not allowed on
//! render nodes (`renderD*`): only primary nodes (`card*`) make them.
//!
//! Opening a primary node makes the opener DRM master when no process is (drm_file.c,
//! `drm_master_open`); an allocator is no display, so [`Card::open`] gives mastership back
//! at once, leaving it to the process that sets modes (`--display`, a compositor).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use drm::control::Device as _;
use drm::Device as _;

/// An open DRM primary node (`/dev/dri/cardN`), read-write.
#[derive(Debug)]
pub struct Card {
    file: File,
    path: PathBuf,
    was_master: bool,
}

impl AsFd for Card {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl drm::Device for Card {}
impl drm::control::Device for Card {}

/// Bits per pixel of zcpipe's dumb buffers: 32, the one depth every driver takes
/// (virtio-gpu refuses any other, drivers/gpu/drm/virtio/virtgpu_gem.c).
pub(crate) const DUMB_BPP: u32 = 32;
/// Width in pixels of zcpipe's dumb buffers: 1024 at 32 bpp makes 4096-byte rows, so rows
/// are whole pages and a buffer of N pages is 1024 x N (drivers that align the pitch, to 64
/// bytes for Rockchip's VOP, add nothing).
pub(crate) const DUMB_WIDTH: u32 = 1024;

/// The width, height and bpp of a dumb buffer of at least `bytes` bytes ([`DUMB_WIDTH`] x
/// whole 4096-byte rows at [`DUMB_BPP`]), or `None` when the height would not fit the
/// kernel's 32-bit size (drm_mode_create_dumb refuses `height * pitch` past `u32::MAX`).
pub(crate) fn dumb_geometry(bytes: u64) -> Option<(u32, u32, u32)> {
    let pitch = u64::from(DUMB_WIDTH * DUMB_BPP / 8);
    let height = bytes.div_ceil(pitch).max(1);
    (height * pitch <= u64::from(u32::MAX)).then_some((DUMB_WIDTH, height as u32, DUMB_BPP))
}

/// The primary nodes in `dir` (normally `/dev/dri`): every `cardN`, in numeric order
/// (`card10` after `card9`); render nodes and anything else are left out.
pub fn card_nodes(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<(u32, PathBuf)> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let n = name.strip_prefix("card")?.parse::<u32>().ok()?;
                    Some((n, e.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v.into_iter().map(|(_, p)| p).collect()
}

impl Card {
    /// Opens `path` read-write (`O_RDWR | O_CLOEXEC`, as libdrm's drmOpen) and drops the DRM
    /// master role if the open gave it (see the module doc). Errors are the open's
    /// (`EACCES`: the node is root's without the udev rules).
    pub fn open(path: &Path) -> io::Result<Card> {
        let file = OpenOptions::new().read(true).write(true).custom_flags(libc::O_CLOEXEC).open(path)?;
        let mut card = Card { file, path: path.to_path_buf(), was_master: false };
        // Fails (EINVAL, or EACCES for a user without CAP_SYS_ADMIN) when this file is not
        // master because another process is: nothing to give back then.
        card.was_master = card.release_master_lock().is_ok();
        Ok(card)
    }

    /// Whether the open made this file DRM master, i.e. no other process held the role
    /// (given back at once by [`Card::open`]): a process that sets modes can take it.
    pub fn was_master(&self) -> bool {
        self.was_master
    }

    /// The node's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The kernel driver's name (`vkms`, `rockchip`, `i915`), from `DRM_IOCTL_VERSION`.
    pub fn driver_name(&self) -> io::Result<String> {
        Ok(self.get_driver()?.name().to_string_lossy().into_owned())
    }

    /// Whether the driver makes dumb buffers (`DRM_CAP_DUMB_BUFFER` is 1).
    pub fn has_dumb_buffers(&self) -> io::Result<bool> {
        Ok(self.get_driver_capability(drm::DriverCapability::DumbBuffer)? == 1)
    }

    /// Allocates a dumb buffer of at least `bytes` bytes ([`dumb_geometry`]) and returns it
    /// as a dma-buf fd (PRIME, `DRM_CLOEXEC | DRM_RDWR`) with the dma-buf's size in bytes
    /// (`lseek(SEEK_END)`, Documentation/driver-api/dma-buf.rst). The GEM handle is closed
    /// before returning, also on error. Errors: `EINVAL` for a size past 4 GiB, `ENOMEM`,
    /// `ENOSYS` from a driver without dumb buffers, or the export's error.
    pub fn dumb_dmabuf(&self, bytes: u64) -> io::Result<(OwnedFd, u64)> {
        let (w, h, bpp) = dumb_geometry(bytes).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        let db = self.create_dumb_buffer((w, h), drm::buffer::DrmFourcc::Xrgb8888, bpp)?;
        let handle = drm::buffer::Buffer::handle(&db);
        let flags = (libc::O_CLOEXEC | libc::O_RDWR) as u32; // DRM_CLOEXEC | DRM_RDWR (drm.h)
        let exported = self.buffer_to_prime_fd(handle, flags);
        if let Err(e) = self.destroy_dumb_buffer(db) {
            log::warn!("{}: DRM_IOCTL_MODE_DESTROY_DUMB after export failed: {e}", self.path.display());
        }
        let fd = exported?;
        let size = nix::unistd::lseek(fd.as_raw_fd(), 0, nix::unistd::Whence::SeekEnd).map_err(io::Error::from)? as u64;
        if size < bytes {
            return Err(io::Error::other(format!("the driver made a {size}-byte dumb buffer for {bytes} bytes")));
        }
        Ok((fd, size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dumb_geometry_covers_the_bytes_in_whole_rows() {
        assert_eq!(dumb_geometry(1), Some((1024, 1, 32)));
        assert_eq!(dumb_geometry(4096), Some((1024, 1, 32)));
        assert_eq!(dumb_geometry(4097), Some((1024, 2, 32)));
        // 1920x1080 NV12: 3110400 bytes = 759.4 rows of 4096.
        assert_eq!(dumb_geometry(1920 * 1080 * 3 / 2), Some((1024, 760, 32)));
        assert_eq!(dumb_geometry(u64::from(u32::MAX) - 4095), Some((1024, 1_048_575, 32)));
        assert_eq!(dumb_geometry(u64::from(u32::MAX)), None);
    }

    #[test]
    fn card_nodes_are_primary_nodes_in_numeric_order() {
        let dir = tempfile::tempdir().unwrap();
        for n in ["card10", "card2", "renderD128", "card0", "cardx", "by-path"] {
            std::fs::write(dir.path().join(n), b"").unwrap();
        }
        let names: Vec<String> =
            card_nodes(dir.path()).iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(names, ["card0", "card2", "card10"]);
        assert!(card_nodes(&dir.path().join("missing")).is_empty());
    }
}

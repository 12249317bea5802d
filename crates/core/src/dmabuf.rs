//! Owned dma-bufs, the allocators that make them, and the only way to touch their bytes.
//!
//! A [`DmaBuf`] is an `OwnedFd` plus its size in bytes. It comes from a dma-buf heap
//! (`/dev/dma_heap/<name>`, `include/uapi/linux/dma-heap.h`), from udmabuf over a sealed
//! memfd (`include/uapi/linux/udmabuf.h`), from a DRM card's dumb buffers exported with PRIME
//! ([`zcpipe_sys::drm`], for kernels with DRM but no dma-buf heap), from a V4L2 driver
//! (VIDIOC_EXPBUF), or, where the kernel has none of these (this x86 host), from a sealed
//! memfd standing in for one.
//! Pools are allocated once at start-up ([`Allocator::allocate_pool`]), never per frame.
//!
//! CPU access goes only through [`CpuAccess`], whose creation issues `DMA_BUF_IOCTL_SYNC`
//! START and whose `Drop` issues END with the same direction; the direction ([`Read`],
//! [`Write`], [`ReadWrite`]) is in its type, so a read guard cannot write. A memfd is not a
//! dma-buf: its guard skips the ioctl and says so once at debug level.

use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use anyhow::{anyhow, bail, Context, Result};
use memmap2::{MmapOptions, MmapRaw};
use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MemFdCreateFlag};

use zcpipe_sys as sys;

/// Where a buffer's memory came from. Decides whether CPU access needs `DMA_BUF_IOCTL_SYNC`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemoryKind {
    /// A dma-buf heap, with its device path (`/dev/dma_heap/system`).
    DmaHeap(PathBuf),
    /// udmabuf over a sealed memfd.
    Udmabuf,
    /// A DRM dumb buffer exported as a dma-buf (PRIME), with its card (`/dev/dri/card0`).
    DrmDumb(PathBuf),
    /// A sealed memfd (not a dma-buf: no sync ioctl; host fallback).
    Memfd,
    /// A dma-buf exported by a driver (VIDIOC_EXPBUF) or received from a peer.
    DmaBuf,
}

impl MemoryKind {
    /// Whether CPU access must be bracketed by `DMA_BUF_IOCTL_SYNC`.
    pub fn needs_sync(&self) -> bool {
        !matches!(self, MemoryKind::Memfd)
    }
}

impl fmt::Display for MemoryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemoryKind::DmaHeap(p) => write!(f, "dma-heap {}", p.display()),
            MemoryKind::Udmabuf => write!(f, "udmabuf"),
            MemoryKind::DrmDumb(p) => write!(f, "drm dumb buffer of {}", p.display()),
            MemoryKind::Memfd => write!(f, "memfd"),
            MemoryKind::DmaBuf => write!(f, "dma-buf"),
        }
    }
}

/// An owned buffer: a dma-buf (or sealed memfd) fd and its size in bytes. Dropping it
/// unmaps and closes the fd. Its bytes are reachable only through [`CpuAccess`] guards.
pub struct DmaBuf {
    fd: OwnedFd,
    size: u64,
    kind: MemoryKind,
    map: OnceLock<MmapRaw>,
}

impl fmt::Debug for DmaBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DmaBuf")
            .field("fd", &self.fd.as_raw_fd())
            .field("size", &self.size)
            .field("kind", &self.kind)
            .finish()
    }
}

impl DmaBuf {
    /// Wraps an fd of `size` bytes. For fds received from a peer use [`DmaBuf::from_peer`],
    /// which checks what the fd really is.
    pub fn new(fd: OwnedFd, size: u64, kind: MemoryKind) -> DmaBuf {
        DmaBuf { fd, size, kind, map: OnceLock::new() }
    }

    /// Adopts an fd received from another process that claims to hold `size` bytes.
    /// The claim is not trusted. The fd must be a dma-buf (its file is on the kernel's
    /// dma-buf pseudo-filesystem, `DMA_BUF_MAGIC`, or an `anon_inode:dmabuf` before Linux
    /// 5.3) or a memfd (a regular file on the kernel's internal tmpfs, seals readable with
    /// `F_GET_SEALS`) carrying `F_SEAL_SHRINK`, so a peer cannot truncate it under our
    /// mapping and kill us with SIGBUS; anything else (a pipe, a directory, a regular file,
    /// which its writer could truncate, a socket) is refused naming what it is. It must be
    /// at least `size` bytes (`lseek(SEEK_END)` gives a dma-buf's size,
    /// Documentation/driver-api/dma-buf.rst).
    pub fn from_peer(fd: OwnedFd, size: u64) -> Result<DmaBuf> {
        let kind = peer_kind(&fd)?;
        let actual = nix::unistd::lseek(fd.as_raw_fd(), 0, nix::unistd::Whence::SeekEnd)
            .map_err(|e| anyhow!("peer's buffer fd: lseek failed: {e}"))? as u64;
        if actual < size {
            bail!("peer's buffer is {actual} bytes but it claimed {size}");
        }
        Ok(DmaBuf::new(fd, size, kind))
    }

    /// Another handle on the same buffer: the fd duplicated (`F_DUPFD_CLOEXEC`, fcntl(2)),
    /// with its own mapping made at first CPU access. For a device that imports a pool a
    /// second time (the scale stage binds one scaler per camera to its one output pool).
    /// Errors if the process is out of fds.
    pub fn try_clone(&self) -> Result<DmaBuf> {
        let fd = self.fd.try_clone().context("duplicating a buffer fd (out of fds? raise `ulimit -n`)")?;
        Ok(DmaBuf::new(fd, self.size, self.kind.clone()))
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// What kind of memory this is.
    pub fn kind(&self) -> &MemoryKind {
        &self.kind
    }

    /// The fd, e.g. to pass with SCM_RIGHTS or to import into a device.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn mapping(&self) -> Result<&MmapRaw> {
        if let Some(m) = self.map.get() {
            return Ok(m);
        }
        let len = usize::try_from(self.size).context("buffer too large to map")?;
        let m = MmapOptions::new()
            .len(len)
            .map_raw(self.fd.as_raw_fd())
            .with_context(|| format!("mmap of a {len}-byte {} buffer", self.kind))?;
        Ok(self.map.get_or_init(|| m))
    }

    /// Begins a CPU read: `DMA_BUF_IOCTL_SYNC(START | READ)`; END on drop.
    pub fn read(&self) -> Result<CpuAccess<'_, Read>> {
        CpuAccess::begin(self)
    }

    /// Begins a CPU write: `DMA_BUF_IOCTL_SYNC(START | WRITE)`; END on drop. Needs `&mut`:
    /// no other guard of this process can see the bytes meanwhile.
    pub fn write(&mut self) -> Result<CpuAccess<'_, Write>> {
        CpuAccess::begin(self)
    }

    /// Begins a CPU write through a shared reference, for pools whose ownership protocol,
    /// not the borrow checker, makes the writer exclusive (a consumer's own copy-mode pool).
    ///
    /// # Safety
    /// No other [`CpuAccess`] guard of this buffer may exist in this process while the
    /// returned one lives.
    pub(crate) unsafe fn write_exclusive(&self) -> Result<CpuAccess<'_, Write>> {
        CpuAccess::begin(self)
    }

    /// Begins a CPU read-modify-write: `DMA_BUF_IOCTL_SYNC(START | RW)`; END on drop.
    pub fn read_write(&mut self) -> Result<CpuAccess<'_, ReadWrite>> {
        CpuAccess::begin(self)
    }
}

/// `statfs(2)` `f_type` of a dma-buf's file (`DMA_BUF_MAGIC`, include/uapi/linux/magic.h).
const DMA_BUF_MAGIC: u64 = 0x444d_4142;

/// What a buffer fd from a peer is: a dma-buf, or a memfd sealed against shrinking; any
/// other fd is an error naming what it is (see [`DmaBuf::from_peer`]).
fn peer_kind(fd: &OwnedFd) -> Result<MemoryKind> {
    use nix::sys::stat::SFlag;
    let st = nix::sys::stat::fstat(fd.as_raw_fd()).map_err(|e| anyhow!("peer's buffer fd: fstat failed: {e}"))?;
    let fs = nix::sys::statfs::fstatfs(fd).map_err(|e| anyhow!("peer's buffer fd: fstatfs failed: {e}"))?;
    let f_type = fs.filesystem_type().0 as u64;
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    if f_type == DMA_BUF_MAGIC || link.starts_with("anon_inode:dmabuf") {
        return Ok(MemoryKind::DmaBuf);
    }
    let fmt = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
    if fmt == SFlag::S_IFREG && f_type == nix::sys::statfs::TMPFS_MAGIC.0 as u64 {
        if let Ok(s) = fcntl(fd.as_raw_fd(), FcntlArg::F_GET_SEALS) {
            if !SealFlag::from_bits_truncate(s).contains(SealFlag::F_SEAL_SHRINK) {
                bail!("peer sent a memfd without F_SEAL_SHRINK; refusing to map memory it could truncate");
            }
            return Ok(MemoryKind::Memfd);
        }
    }
    let name = if link.is_empty() { "unnamed" } else { &link };
    let what = match fmt {
        SFlag::S_IFDIR => format!("a directory ({name})"),
        SFlag::S_IFIFO => format!("a pipe ({name})"),
        SFlag::S_IFSOCK => format!("a socket ({name})"),
        SFlag::S_IFCHR | SFlag::S_IFBLK => format!("a device node ({name})"),
        SFlag::S_IFREG => {
            format!("a regular file ({name}, filesystem type {f_type:#x}) that its writer could truncate")
        }
        _ => format!("an fd of mode {:#o} ({name})", st.st_mode),
    };
    bail!("peer's buffer fd is {what}: neither a dma-buf nor a sealed memfd; refusing to map it")
}

/// A direction of CPU access, as `DMA_BUF_SYNC_*` flags.
pub trait Direction {
    /// `DMA_BUF_SYNC_READ`, `_WRITE` or `_RW`.
    const FLAGS: u64;
    /// For logs.
    const NAME: &'static str;
}
/// CPU reads the buffer.
pub struct Read;
/// CPU writes the buffer.
pub struct Write;
/// CPU reads and writes the buffer.
pub struct ReadWrite;
impl Direction for Read {
    const FLAGS: u64 = sys::dmabuf::DMA_BUF_SYNC_READ;
    const NAME: &'static str = "read";
}
impl Direction for Write {
    const FLAGS: u64 = sys::dmabuf::DMA_BUF_SYNC_WRITE;
    const NAME: &'static str = "write";
}
impl Direction for ReadWrite {
    const FLAGS: u64 = sys::dmabuf::DMA_BUF_SYNC_RW;
    const NAME: &'static str = "read-write";
}

static MEMFD_SYNC_NOTE: AtomicBool = AtomicBool::new(false);

/// CPU accesses begun in this process ([`CpuAccess`] guards made, of any buffer and
/// direction): a stage that never touches a frame's bytes (zero-copy) reports 0.
static CPU_ACCESSES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many CPU accesses ([`DmaBuf::read`], [`DmaBuf::write`], [`DmaBuf::read_write`]
/// guards) this process has begun so far, each one mapping use bracketed by
/// `DMA_BUF_IOCTL_SYNC` START/END (memfds: unsynced). Every stage's final report carries it
/// as `cpu_accesses`.
pub fn cpu_accesses() -> u64 {
    CPU_ACCESSES.load(Ordering::Relaxed)
}

/// A bracketed CPU access to a buffer's bytes. Created by [`DmaBuf::read`],
/// [`DmaBuf::write`] or [`DmaBuf::read_write`]; derefs to the buffer's bytes (`&mut` only
/// for writing directions); ends the access on drop.
pub struct CpuAccess<'a, D: Direction> {
    buf: &'a DmaBuf,
    map: &'a MmapRaw,
    _dir: PhantomData<D>,
}

impl<'a, D: Direction> CpuAccess<'a, D> {
    fn begin(buf: &'a DmaBuf) -> Result<Self> {
        let map = buf.mapping()?;
        CPU_ACCESSES.fetch_add(1, Ordering::Relaxed);
        if buf.kind.needs_sync() {
            sys::dmabuf::sync(buf.fd(), sys::dmabuf::DMA_BUF_SYNC_START | D::FLAGS)
                .with_context(|| format!("DMA_BUF_IOCTL_SYNC START ({}) on a {} buffer", D::NAME, buf.kind))?;
        } else if !MEMFD_SYNC_NOTE.swap(true, Ordering::Relaxed) {
            log::debug!("buffers are memfds, not dma-bufs: CPU access skips DMA_BUF_IOCTL_SYNC");
        }
        Ok(CpuAccess { buf, map, _dir: PhantomData })
    }

    /// The bytes, read-only.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping covers `size` bytes and lives as long as `buf`; no `&mut` to
        // these bytes exists in this process while this guard lives (writing guards need
        // `&mut DmaBuf`). Other processes may write concurrently; zcpipe's ownership
        // protocol (a buffer is lent to one side at a time) is what keeps contents stable.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr(), self.map.len()) }
    }
}

impl<D: Direction> Drop for CpuAccess<'_, D> {
    fn drop(&mut self) {
        if self.buf.kind.needs_sync() {
            if let Err(e) = sys::dmabuf::sync(self.buf.fd(), sys::dmabuf::DMA_BUF_SYNC_END | D::FLAGS) {
                log::warn!("DMA_BUF_IOCTL_SYNC END ({}) failed: {e}", D::NAME);
            }
        }
    }
}

impl<D: Direction> std::ops::Deref for CpuAccess<'_, D> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.bytes()
    }
}

macro_rules! writable {
    ($d:ty) => {
        impl std::ops::DerefMut for CpuAccess<'_, $d> {
            fn deref_mut(&mut self) -> &mut [u8] {
                // SAFETY: a guard of this direction is only made from `&mut DmaBuf`, so it
                // is the only view of these bytes in this process while it lives; the
                // mapping is shared, writable and `len` bytes long.
                unsafe { std::slice::from_raw_parts_mut(self.map.as_mut_ptr(), self.map.len()) }
            }
        }
    };
}
writable!(Write);
writable!(ReadWrite);

/// Which allocator to use (`--heap`; spellings in [`super::config::Choice`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeapChoice {
    /// The first present of system, dma32, cma, udmabuf, drm, memfd.
    Auto,
    /// `/dev/dma_heap/system` (cached, may sit above 4 GiB).
    System,
    /// A heap below 4 GiB: `/dev/dma_heap/system-dma32` (what RGA2 needs on >4 GiB boards).
    Dma32,
    /// A contiguous heap: `/dev/dma_heap/linux,cma`, `cma` or `reserved`.
    Cma,
    /// udmabuf over sealed memfds (`/dev/udmabuf`).
    Udmabuf,
    /// DRM dumb buffers exported as dma-bufs (PRIME) from the first `/dev/dri/card*` that
    /// makes them: kernels with DRM but no dma-buf heap (older Rockchip BSP kernels).
    Drm,
    /// Sealed memfds: not dma-bufs, but shareable the same way (host fallback).
    Memfd,
}

/// The `/dev/dma_heap` names probed for each heap choice, in order.
pub fn heap_names(choice: HeapChoice) -> &'static [&'static str] {
    match choice {
        HeapChoice::System => &["system"],
        HeapChoice::Dma32 => &["system-dma32", "dma32"],
        HeapChoice::Cma => &["linux,cma", "cma", "reserved"],
        _ => &[],
    }
}

/// Lists the dma-buf heaps present under `dir` (normally `/dev/dma_heap`), sorted.
pub fn list_heaps(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// A chosen allocator. All buffers of a pool come from one.
pub enum Allocator {
    /// A dma-buf heap device.
    Heap {
        /// The open heap (DMA_HEAP_IOCTL_ALLOC, linux/dma-heap.h).
        heap: dma_heap::Heap,
        /// Its device node (`/dev/dma_heap/system`).
        path: PathBuf,
    },
    /// `/dev/udmabuf`.
    Udmabuf {
        /// The open `/dev/udmabuf` (UDMABUF_CREATE, linux/udmabuf.h).
        dev: std::fs::File,
    },
    /// A DRM card's dumb buffers, each exported as a dma-buf (PRIME).
    Drm {
        /// The open primary node (DRM_IOCTL_MODE_CREATE_DUMB, DRM_IOCTL_PRIME_HANDLE_TO_FD).
        card: sys::drm::Card,
    },
    /// Sealed memfds.
    Memfd,
}

impl fmt::Debug for Allocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.describe())
    }
}

const PAGE: u64 = 4096;

impl Allocator {
    /// Opens the allocator for `choice`, probing `heap_dir` (normally `/dev/dma_heap`),
    /// `udmabuf_dev` (normally `/dev/udmabuf`) and `dri_dir` (normally `/dev/dri`, see
    /// [`open_drm`]). `Auto` takes the first present of system, dma32, cma, udmabuf, a DRM
    /// card with dumb buffers, memfd, and logs which and why. An explicit choice that is
    /// absent is an error listing what exists and the fix.
    pub fn open(choice: HeapChoice, heap_dir: &Path, udmabuf_dev: &Path, dri_dir: &Path) -> Result<Allocator> {
        let found = list_heaps(heap_dir);
        let found_str = if found.is_empty() { "none".to_string() } else { found.join(", ") };
        let try_heap = |c: HeapChoice| -> Option<Result<Allocator>> {
            heap_names(c).iter().map(|n| heap_dir.join(n)).find(|p| p.exists()).map(|path| {
                dma_heap::Heap::new(dma_heap::HeapKind::Custom(path.clone()))
                    .map(|heap| Allocator::Heap { heap, path: path.clone() })
                    .map_err(|e| anyhow!("cannot open dma-buf heap {}: {e}{}", path.display(), perm_hint(&e)))
            })
        };
        let open_udmabuf = || -> Result<Allocator> {
            let dev = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(udmabuf_dev)
                .map_err(|e| anyhow!("cannot open {}: {e}{}", udmabuf_dev.display(), perm_hint(&e)))?;
            Ok(Allocator::Udmabuf { dev })
        };
        match choice {
            HeapChoice::Auto => {
                for c in [HeapChoice::System, HeapChoice::Dma32, HeapChoice::Cma] {
                    if let Some(r) = try_heap(c) {
                        let a = r?;
                        log::info!("heap: {} (auto: first of system, dma32, cma, udmabuf, drm, memfd; heaps found: {found_str})", a.describe());
                        return Ok(a);
                    }
                }
                if udmabuf_dev.exists() {
                    let a = open_udmabuf()?;
                    log::info!("heap: udmabuf (auto: no system/dma32/cma heap in {}; heaps found: {found_str})", heap_dir.display());
                    return Ok(a);
                }
                match open_drm(dri_dir) {
                    Ok(a) => {
                        log::info!("heap: {} (auto: no dma-buf heap in {} and no {})", a.describe(), heap_dir.display(), udmabuf_dev.display());
                        return Ok(a);
                    }
                    Err(e) => log::debug!("heap auto: no DRM dumb buffers: {e:#}"),
                }
                log::info!(
                    "heap: memfd (auto: no dma-buf heap in {}, no {} and no DRM card with dumb buffers in {}; sealed memfds stand in for dma-bufs)",
                    heap_dir.display(),
                    udmabuf_dev.display(),
                    dri_dir.display()
                );
                Ok(Allocator::Memfd)
            }
            HeapChoice::System | HeapChoice::Dma32 | HeapChoice::Cma => match try_heap(choice) {
                Some(r) => {
                    let a = r?;
                    log::info!("heap: {} (--heap {:?}; heaps found: {found_str})", a.describe(), choice);
                    Ok(a)
                }
                None => bail!(
                    "--heap {}: no {} in {} (heaps found: {found_str}); use --heap auto, or enable the heap in the kernel (CONFIG_DMABUF_HEAPS_{})",
                    format!("{choice:?}").to_lowercase(),
                    heap_names(choice).join(" or "),
                    heap_dir.display(),
                    if choice == HeapChoice::Cma { "CMA" } else { "SYSTEM" }
                ),
            },
            HeapChoice::Udmabuf => {
                if !udmabuf_dev.exists() {
                    bail!("--heap udmabuf: {} does not exist; load the module (modprobe udmabuf) or use --heap auto", udmabuf_dev.display());
                }
                let a = open_udmabuf()?;
                log::info!("heap: udmabuf (--heap udmabuf)");
                Ok(a)
            }
            HeapChoice::Drm => {
                let a = open_drm(dri_dir).context("--heap drm")?;
                log::info!("heap: {} (--heap drm)", a.describe());
                Ok(a)
            }
            HeapChoice::Memfd => {
                log::info!("heap: memfd (--heap memfd): not dma-bufs, devices cannot import them");
                Ok(Allocator::Memfd)
            }
        }
    }

    /// One line for logs: `dma-heap /dev/dma_heap/system`, `udmabuf`, `drm dumb buffers
    /// of /dev/dri/card0 (vkms)`, `memfd`.
    pub fn describe(&self) -> String {
        match self {
            Allocator::Heap { path, .. } => format!("dma-heap {}", path.display()),
            Allocator::Udmabuf { .. } => "udmabuf".into(),
            Allocator::Drm { card } => {
                format!(
                    "drm dumb buffers of {} ({})",
                    card.path().display(),
                    card.driver_name().unwrap_or_else(|e| format!("driver unknown: {e}"))
                )
            }
            Allocator::Memfd => "memfd".into(),
        }
    }

    /// Allocates one buffer of at least `size` bytes (rounded up to 4 KiB pages).
    pub fn allocate(&self, size: u64) -> Result<DmaBuf> {
        let size = size.div_ceil(PAGE).max(1) * PAGE;
        match self {
            Allocator::Heap { heap, path } => {
                let fd = heap
                    .allocate(size as usize)
                    .map_err(|e| anyhow!("allocating {size} bytes from {}: {e}", path.display()))?;
                Ok(DmaBuf::new(fd, size, MemoryKind::DmaHeap(path.clone())))
            }
            Allocator::Udmabuf { dev } => {
                let memfd = sealed_memfd("zcpipe-udmabuf", size, false)?;
                let fd = sys::udmabuf::create(dev.as_fd(), memfd.as_fd(), 0, size).map_err(|e| {
                    anyhow!("UDMABUF_CREATE of {size} bytes: {e} (is the udmabuf size_limit_mb large enough?)")
                })?;
                Ok(DmaBuf::new(fd, size, MemoryKind::Udmabuf))
            }
            Allocator::Drm { card } => {
                let (fd, _) = card.dumb_dmabuf(size).map_err(|e| {
                    anyhow!("a {size}-byte DRM dumb buffer from {} exported as a dma-buf: {e}", card.path().display())
                })?;
                Ok(DmaBuf::new(fd, size, MemoryKind::DrmDumb(card.path().to_path_buf())))
            }
            Allocator::Memfd => Ok(DmaBuf::new(sealed_memfd("zcpipe-buffer", size, true)?, size, MemoryKind::Memfd)),
        }
    }

    /// Preallocates `count` buffers of `size` bytes each, at start-up.
    pub fn allocate_pool(&self, count: usize, size: u64) -> Result<Vec<DmaBuf>> {
        (0..count).map(|i| self.allocate(size).with_context(|| format!("pool buffer {i} of {count}"))).collect()
    }
}

/// What `--heap drm` (and `auto` after udmabuf) opens: the first primary node in `dri_dir`
/// (normally `/dev/dri`; [`sys::drm::card_nodes`], numeric order) that opens read-write and
/// has `DRM_CAP_DUMB_BUFFER`. The error names every card and why it was passed over, and the
/// fix: "no DRM card with dumb buffers in /dev/dri: card0: Permission denied (...); fix: ...".
pub fn open_drm(dri_dir: &Path) -> Result<Allocator> {
    let cards = sys::drm::card_nodes(dri_dir);
    let mut why = vec![];
    let mut denied = false;
    for path in &cards {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        match sys::drm::Card::open(path) {
            Err(e) => {
                denied |= e.kind() == io::ErrorKind::PermissionDenied;
                why.push(format!("{name}: {}", sys::errno_words(&e)));
            }
            Ok(card) => match card.has_dumb_buffers() {
                Ok(true) => return Ok(Allocator::Drm { card }),
                Ok(false) => why.push(format!(
                    "{name} ({}): no dumb buffers (DRM_CAP_DUMB_BUFFER is 0)",
                    card.driver_name().unwrap_or_default()
                )),
                Err(e) => why.push(format!("{name}: DRM_IOCTL_GET_CAP failed: {}", sys::errno_words(&e))),
            },
        }
    }
    let found = if cards.is_empty() {
        if dri_dir.is_dir() {
            "no card* node".to_string()
        } else {
            format!("{} does not exist", dri_dir.display())
        }
    } else {
        why.join("; ")
    };
    let fix = if denied {
        "install udev/99-zcpipe.rules (the zcpipe group may open /dev/dri/card*) and join the zcpipe group, or run as root"
    } else {
        "load the board's display driver (rockchipdrm; vkms on a PC: modprobe vkms), or use --heap auto"
    };
    bail!("no DRM card with dumb buffers in {}: {found}; fix: {fix}", dri_dir.display())
}

fn perm_hint(e: &io::Error) -> &'static str {
    if e.kind() == io::ErrorKind::PermissionDenied {
        " (install udev/99-zcpipe.rules and add yourself to the zcpipe group, or run as root)"
    } else {
        ""
    }
}

/// Creates a memfd of `size` bytes sealed against shrinking (and, with `seal_all`, growing
/// and further sealing). Contract: memfd_create(2), fcntl(2) F_ADD_SEALS. Writes stay
/// allowed: both sides of a ring write, and udmabuf refuses `F_SEAL_WRITE`.
pub fn sealed_memfd(name: &str, size: u64, seal_all: bool) -> Result<OwnedFd> {
    let cname = std::ffi::CString::new(name).map_err(|_| anyhow!("memfd name contains NUL"))?;
    let fd = memfd_create(&cname, MemFdCreateFlag::MFD_CLOEXEC | MemFdCreateFlag::MFD_ALLOW_SEALING)
        .map_err(|e| anyhow!("memfd_create: {e}"))?;
    nix::unistd::ftruncate(&fd, size as i64).map_err(|e| anyhow!("ftruncate memfd to {size} bytes: {e}"))?;
    let mut seals = SealFlag::F_SEAL_SHRINK;
    if seal_all {
        seals |= SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL;
    }
    fcntl(fd.as_raw_fd(), FcntlArg::F_ADD_SEALS(seals)).map_err(|e| anyhow!("sealing memfd: {e}"))?;
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memfd_pool_write_then_read() {
        let a = Allocator::open(
            HeapChoice::Memfd,
            Path::new("/nonexistent"),
            Path::new("/nonexistent"),
            Path::new("/nonexistent"),
        )
        .unwrap();
        let mut pool = a.allocate_pool(3, 5000).unwrap();
        assert_eq!(pool.len(), 3);
        assert_eq!(pool[0].size(), 8192);
        {
            let mut w = pool[1].write().unwrap();
            w[0] = 0xab;
            w[8191] = 0xcd;
        }
        let r = pool[1].read().unwrap();
        assert_eq!((r[0], r[8191], r.len()), (0xab, 0xcd, 8192));
    }

    #[test]
    fn explicit_missing_heap_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let none = Path::new("/nonexistent");
        let e = Allocator::open(HeapChoice::Cma, dir.path(), none, none).unwrap_err().to_string();
        assert!(e.contains("--heap cma") && e.contains("linux,cma") && e.contains("heaps found: none"), "{e}");
        let e = Allocator::open(HeapChoice::Udmabuf, dir.path(), Path::new("/nonexistent/udmabuf"), none)
            .unwrap_err()
            .to_string();
        assert!(e.contains("modprobe udmabuf"), "{e}");
    }

    #[test]
    fn explicit_drm_without_a_card_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let dri = dir.path().join("dri");
        let e =
            format!("{:#}", Allocator::open(HeapChoice::Drm, dir.path(), Path::new("/nonexistent"), &dri).unwrap_err());
        assert_eq!(
            e,
            format!(
                "--heap drm: no DRM card with dumb buffers in {}: {} does not exist; fix: load the board's display driver (rockchipdrm; vkms on a PC: modprobe vkms), or use --heap auto",
                dri.display(),
                dri.display()
            )
        );
        // A card node that is not a DRM device (a regular file here): opened, then the
        // capability query fails, and the error says so per card.
        std::fs::create_dir(&dri).unwrap();
        std::fs::write(dri.join("renderD128"), b"").unwrap();
        let e =
            format!("{:#}", Allocator::open(HeapChoice::Drm, dir.path(), Path::new("/nonexistent"), &dri).unwrap_err());
        assert!(e.ends_with(&format!("in {}: no card* node; fix: load the board's display driver (rockchipdrm; vkms on a PC: modprobe vkms), or use --heap auto", dri.display())), "{e}");
        std::fs::write(dri.join("card0"), b"").unwrap();
        let e =
            format!("{:#}", Allocator::open(HeapChoice::Drm, dir.path(), Path::new("/nonexistent"), &dri).unwrap_err());
        assert!(e.contains(": card0: DRM_IOCTL_GET_CAP failed: "), "{e}");
    }

    #[test]
    fn auto_falls_back_to_memfd() {
        let dir = tempfile::tempdir().unwrap();
        let a = Allocator::open(HeapChoice::Auto, dir.path(), &dir.path().join("udmabuf"), &dir.path().join("dri"))
            .unwrap();
        assert_eq!(a.describe(), "memfd");
    }

    #[test]
    fn auto_tries_drm_after_udmabuf_and_before_memfd() {
        // A dri directory whose only card is not a DRM device: auto passes it over (the
        // capability query fails) and takes memfd; with a udmabuf node present (a plain file
        // opens) it takes udmabuf without looking at the dri directory.
        let dir = tempfile::tempdir().unwrap();
        let dri = dir.path().join("dri");
        std::fs::create_dir(&dri).unwrap();
        std::fs::write(dri.join("card0"), b"").unwrap();
        let a = Allocator::open(HeapChoice::Auto, dir.path(), &dir.path().join("udmabuf"), &dri).unwrap();
        assert_eq!(a.describe(), "memfd");
        std::fs::write(dir.path().join("udmabuf"), b"").unwrap();
        let a = Allocator::open(HeapChoice::Auto, dir.path(), &dir.path().join("udmabuf"), &dri).unwrap();
        assert_eq!(a.describe(), "udmabuf");
    }

    #[test]
    fn peer_memfd_must_be_sealed() {
        let fd = memfd_create(c"unsealed", MemFdCreateFlag::MFD_CLOEXEC).unwrap();
        nix::unistd::ftruncate(&fd, 4096).unwrap();
        let e = DmaBuf::from_peer(fd, 4096).unwrap_err().to_string();
        assert!(e.contains("F_SEAL_SHRINK"), "{e}");
        let ok = DmaBuf::from_peer(sealed_memfd("x", 4096, true).unwrap(), 4096).unwrap();
        assert_eq!(ok.kind(), &MemoryKind::Memfd);
        let e = DmaBuf::from_peer(sealed_memfd("x", 4096, true).unwrap(), 8192).unwrap_err().to_string();
        assert!(e.contains("claimed 8192"), "{e}");
    }

    #[test]
    fn a_peer_fd_that_is_neither_a_dma_buf_nor_a_sealed_memfd_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        // A directory (lseek(SEEK_END) on ext4 says 2^63 - 1 bytes) and a regular file (its
        // writer could truncate it under our mapping) have no seals to read either.
        let d = OwnedFd::from(std::fs::File::open(dir.path()).unwrap());
        let e = DmaBuf::from_peer(d, 4096).unwrap_err().to_string();
        assert!(e.contains("is a directory") && e.contains("neither a dma-buf nor a sealed memfd"), "{e}");
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("f"))
            .unwrap();
        f.set_len(4096).unwrap();
        let e = DmaBuf::from_peer(OwnedFd::from(f), 4096).unwrap_err().to_string();
        assert!(e.contains("is a regular file"), "{e}");
        let (r, _w) = nix::unistd::pipe().unwrap();
        let e = DmaBuf::from_peer(r, 4096).unwrap_err().to_string();
        assert!(e.contains("is a pipe"), "{e}");
    }
}

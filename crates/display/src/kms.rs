//! The KMS side of the display, through the `drm` crate: the card, its connector, mode,
//! CRTC and planes, PRIME imports of the camera's dma-bufs as framebuffers, dumb buffers,
//! atomic commits (legacy `SET_CRTC` / `PAGE_FLIP` where the driver has no atomic
//! modesetting), page-flip events and the writeback connector.
//!
//! Kernel contracts (include/uapi/drm/drm_mode.h, Documentation/gpu/drm-kms.rst): atomic
//! needs `DRM_CLIENT_CAP_ATOMIC` (which gives universal planes: the primary and cursor
//! planes are listed too), writeback connectors `DRM_CLIENT_CAP_WRITEBACK_CONNECTORS` after
//! it; a plane's `type` property is 0 overlay, 1 primary, 2 cursor (`enum drm_plane_type`,
//! include/drm/drm_plane.h); `SRC_*` are 16.16 fixed point, `CRTC_*` integers; a
//! nonblocking commit with `DRM_MODE_PAGE_FLIP_EVENT` sends one event on the card's fd when
//! the new state is on screen, and another commit before it is refused with EBUSY; a
//! framebuffer holds its GEM objects, so the handles from `DRM_IOCTL_PRIME_FD_TO_HANDLE`
//! are closed once it exists; a writeback connector writes the composed output into the
//! framebuffer set as its `WRITEBACK_FB_ID` and signals the sync_file whose fd the kernel
//! writes at `WRITEBACK_OUT_FENCE_PTR` during the commit (drm_writeback.c).

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use drm::buffer::{DrmFourcc, PlanarBuffer};
use drm::control::{
    atomic::AtomicModeReq, connector, crtc, dumbbuffer::DumbBuffer, framebuffer, plane, property, AtomicCommitFlags,
    Device as ControlDevice, FbCmd2Flags, Mode, ModeTypeFlags,
};
use drm::{ClientCapability, Device};

use super::Rect;
use zcpipe_core::dmabuf::{DmaBuf, MemoryKind};
use zcpipe_core::frame::{Fourcc, FrameLayout};

/// An open DRM card node.
pub struct Card(File);

impl AsFd for Card {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}
impl Device for Card {}
impl ControlDevice for Card {}

/// The DRM format of a V4L2 fourcc, where one exists that a plane could scan out with the
/// same bytes (drm_fourcc.h against videodev2.h): XR24 is XRGB8888, RGB24 (bytes R, G, B)
/// is BGR888, BGR24 (B, G, R) is RGB888, NV12 and NV12M are NV12, NV16 and YUYV themselves.
pub(crate) fn drm_format(f: Fourcc) -> Option<DrmFourcc> {
    Some(match f {
        Fourcc::XR24 => DrmFourcc::Xrgb8888,
        Fourcc::RGB24 => DrmFourcc::Bgr888,
        Fourcc::BGR24 => DrmFourcc::Rgb888,
        Fourcc::NV12 | Fourcc::NV12M => DrmFourcc::Nv12,
        Fourcc::NV16 => DrmFourcc::Nv16,
        Fourcc::YUYV => DrmFourcc::Yuyv,
        _ => return None,
    })
}

/// A framebuffer's description for `DRM_IOCTL_MODE_ADDFB2`.
struct Planar {
    size: (u32, u32),
    format: DrmFourcc,
    handles: [Option<drm::buffer::Handle>; 4],
    pitches: [u32; 4],
    offsets: [u32; 4],
}

impl PlanarBuffer for Planar {
    fn size(&self) -> (u32, u32) {
        self.size
    }
    fn format(&self) -> DrmFourcc {
        self.format
    }
    fn modifier(&self) -> Option<drm::buffer::DrmModifier> {
        None
    }
    fn pitches(&self) -> [u32; 4] {
        self.pitches
    }
    fn handles(&self) -> [Option<drm::buffer::Handle>; 4] {
        self.handles
    }
    fn offsets(&self) -> [u32; 4] {
        self.offsets
    }
}

/// A plane's properties by name (`FB_ID`, `CRTC_X`, ...).
type Props = HashMap<String, (property::Handle, u64)>;

/// A plane that can show on the CRTC used.
#[derive(Clone, Debug)]
pub struct PlaneInfo {
    /// Its handle.
    pub handle: plane::Handle,
    /// The formats it scans out (DRM fourccs).
    pub formats: Vec<u32>,
    props: Props,
}

impl PlaneInfo {
    /// Whether it scans out `f`.
    pub fn takes(&self, f: DrmFourcc) -> bool {
        self.formats.contains(&(f as u32))
    }
}

/// A dumb buffer (CPU-written, the driver's memory) with its framebuffer, and its PRIME
/// export: the CPU reaches its bytes only through that dma-buf's sync guard
/// (`DMA_BUF_IOCTL_SYNC` START/END around each access, the mapping made once).
pub struct Dumb {
    db: DumbBuffer,
    buf: DmaBuf,
    /// Its framebuffer.
    pub fb: framebuffer::Handle,
    /// Width, height.
    pub size: (u32, u32),
    /// Bytes per row.
    pub pitch: u32,
}

/// The writeback connector and its framebuffer (the mode's size, XRGB8888).
struct Writeback {
    conn: connector::Handle,
    props: Props,
    target: Dumb,
}

/// One frame's scanout: which framebuffer, the part of it shown, and where.
#[derive(Clone, Copy, Debug)]
pub struct Scanout {
    /// The framebuffer.
    pub fb: framebuffer::Handle,
    /// The source rectangle in it (whole pixels).
    pub src: Rect,
    /// Where on the screen.
    pub dst: Rect,
}

/// The output the display drives: a card, a connected connector, its preferred mode, a
/// CRTC and its planes.
pub struct Output {
    card: Card,
    /// The card's node.
    pub path: PathBuf,
    /// The driver's name (`vkms`).
    pub driver: String,
    /// Atomic modesetting (else legacy).
    pub atomic: bool,
    conn: connector::Handle,
    /// The connector's name (`Virtual-1`).
    pub(crate) connector_name: String,
    /// The mode.
    pub mode: Mode,
    crtc: crtc::Handle,
    /// The primary plane (atomic only).
    pub primary: Option<PlaneInfo>,
    /// An overlay plane that takes ARGB8888 (atomic only).
    pub overlay: Option<PlaneInfo>,
    writeback: Option<Writeback>,
    conn_props: Props,
    crtc_props: Props,
    mode_blob: u64,
    /// Whether the mode is set (the first commit sets it).
    modeset_done: bool,
    /// The driver refused a writeback commit: no more are tried.
    writeback_refused: bool,
}

fn raw<H: Into<u32>>(h: H) -> u64 {
    h.into() as u64
}

impl Output {
    /// The mode's size in pixels.
    pub(crate) fn mode_size(&self) -> (u32, u32) {
        let (w, h) = self.mode.size();
        (w as u32, h as u32)
    }

    /// Whether a writeback connector is there (with `want_writeback` at open).
    pub(crate) fn has_writeback(&self) -> bool {
        self.writeback.is_some()
    }

    fn props<H: drm::control::ResourceHandle>(card: &Card, h: H) -> Result<Props> {
        let set = card.get_properties(h).context("DRM_IOCTL_MODE_OBJ_GETPROPERTIES")?;
        let mut m = HashMap::new();
        for (ph, v) in set.iter() {
            let info = card.get_property(*ph).context("DRM_IOCTL_MODE_GETPROPERTY")?;
            m.insert(info.name().to_string_lossy().into_owned(), (*ph, *v));
        }
        Ok(m)
    }

    /// Opens `path` and finds what to drive: the first connected connector (not a
    /// writeback one) with a mode, its preferred mode (else its first), a CRTC its encoder
    /// can drive, and with atomic modesetting that CRTC's primary plane and an overlay plane
    /// that takes ARGB8888; a writeback connector too when `want_writeback`. Errors, one
    /// line each: the node cannot be opened (permissions: the fix), no connector is
    /// connected, no CRTC or no primary plane fits. With `legacy`, atomic modesetting is
    /// not asked for even where the driver offers it.
    pub fn open(path: &Path, want_writeback: bool, legacy: bool) -> Result<Output> {
        let file = std::fs::OpenOptions::new().read(true).write(true).open(path).map_err(|e| {
            anyhow!("display: cannot open {} ({}); run as a member of the group that owns it (`ls -l {}`, usually `video`), or pass --display none", path.display(), zcpipe_sys::errno_words(&e), path.display())
        })?;
        let card = Card(file);
        // The open made us DRM master unless another process is (drm_file.c,
        // `drm_master_open`; a `--heap drm` allocator gives the role back at once). Asking
        // again is harmless when we are, and says now, not at the first commit, when not.
        let master = card.acquire_master_lock().is_ok();
        let driver = card.get_driver().map(|d| d.name().to_string_lossy().into_owned()).unwrap_or_else(|_| "?".into());
        let atomic = !legacy
            && card.set_client_capability(ClientCapability::UniversalPlanes, true).is_ok()
            && card.set_client_capability(ClientCapability::Atomic, true).is_ok();
        let wb_cap =
            atomic && want_writeback && card.set_client_capability(ClientCapability::WritebackConnectors, true).is_ok();
        let res = card.resource_handles().with_context(|| format!("display: {}{} is not a KMS device (DRM_IOCTL_MODE_GETRESOURCES failed); pass a card that `ls /dev/dri` shows, or --display auto", path.display(), if driver == "?" { String::new() } else { format!(" ({driver})") }))?;
        let mut chosen = None;
        let mut wb_conn = None;
        let mut seen = vec![];
        for &c in res.connectors() {
            let info =
                card.get_connector(c, true).with_context(|| format!("display: {}: connector {c:?}", path.display()))?;
            let name = format!("{}-{}", info.interface().as_str(), info.interface_id());
            if info.interface() == connector::Interface::Writeback {
                wb_conn.get_or_insert(c);
                continue;
            }
            seen.push(format!("{name} {:?}", info.state()).to_lowercase());
            if chosen.is_none() && info.state() == connector::State::Connected && !info.modes().is_empty() {
                chosen = Some((info, name));
            }
        }
        let Some((conn, connector_name)) = chosen else {
            bail!("display: {} ({driver}) has no connected connector with a mode ({}); plug a display in, or pass --display none", path.display(), if seen.is_empty() { "no connectors".into() } else { seen.join(", ") });
        };
        let mode = conn
            .modes()
            .iter()
            .find(|m| m.mode_type().contains(ModeTypeFlags::PREFERRED))
            .copied()
            .unwrap_or(conn.modes()[0]);
        let crtc = conn
            .encoders()
            .iter()
            .filter_map(|e| card.get_encoder(*e).ok())
            .flat_map(|e| res.filter_crtcs(e.possible_crtcs()))
            .next()
            .ok_or_else(|| anyhow!("display: {} ({driver}): no CRTC can drive {connector_name}", path.display()))?;
        let (mut primary, mut overlay) = (None, None);
        if atomic {
            for &p in card.plane_handles().context("DRM_IOCTL_MODE_GETPLANERESOURCES")?.iter() {
                let info = card.get_plane(p)?;
                if !res.filter_crtcs(info.possible_crtcs()).contains(&crtc) {
                    continue;
                }
                let props = Self::props(&card, p)?;
                let kind = props.get("type").map(|v| v.1).unwrap_or(u64::MAX);
                let pi = PlaneInfo { handle: p, formats: info.formats().to_vec(), props };
                match kind {
                    1 if primary.is_none() => primary = Some(pi),
                    0 if overlay.is_none() && pi.takes(DrmFourcc::Argb8888) => overlay = Some(pi),
                    _ => {}
                }
            }
            if primary.is_none() {
                bail!("display: {} ({driver}): no primary plane for the CRTC of {connector_name}", path.display());
            }
        }
        if !master {
            log::warn!("display: {} ({driver}) has another DRM master (a desktop, or another display); its commits will be refused (EACCES) until it lets go: stop it, or run from a text console", path.display());
        }
        let mut out = Output {
            conn_props: if atomic { Self::props(&card, conn.handle())? } else { HashMap::new() },
            crtc_props: if atomic { Self::props(&card, crtc)? } else { HashMap::new() },
            mode_blob: 0,
            card,
            path: path.to_path_buf(),
            driver,
            atomic,
            conn: conn.handle(),
            connector_name,
            mode,
            crtc,
            primary,
            overlay,
            writeback: None,
            modeset_done: false,
            writeback_refused: false,
        };
        if wb_cap {
            if let Some(c) = wb_conn {
                let props = Self::props(&out.card, c)?;
                let target = out.dumb(out.mode_size(), DrmFourcc::Xrgb8888)?;
                out.writeback = Some(Writeback { conn: c, props, target });
            }
        }
        if atomic {
            let blob = out
                .card
                .create_property_blob(&out.mode)
                .context("display: DRM_IOCTL_MODE_CREATEPROPBLOB (the mode)")?;
            out.mode_blob = u64::from(blob);
        }
        Ok(out)
    }

    /// One line about what was found, for the log.
    pub fn describe(&self) -> String {
        let (w, h) = self.mode_size();
        let planes = match (&self.primary, &self.overlay) {
            (Some(p), Some(o)) => {
                format!("primary plane {:?} ({} formats), overlay plane {:?}", p.handle, p.formats.len(), o.handle)
            }
            (Some(p), None) => {
                format!("primary plane {:?} ({} formats), no ARGB8888 overlay plane", p.handle, p.formats.len())
            }
            _ => "legacy modesetting (no atomic): one framebuffer, page flips".into(),
        };
        format!(
            "display: {} ({}): {} {w}x{h}@{}, {}{}",
            self.path.display(),
            self.driver,
            self.connector_name,
            self.mode.vrefresh(),
            planes,
            if self.writeback.is_some() { ", writeback connector" } else { "" }
        )
    }

    /// A dumb buffer of `size` in `format` (32 bits a pixel) with its framebuffer, exported
    /// as a dma-buf for the CPU's guarded access (PRIME, `DRM_CLOEXEC | DRM_RDWR`, drm.h).
    pub fn dumb(&self, size: (u32, u32), format: DrmFourcc) -> Result<Dumb> {
        let db = self
            .card
            .create_dumb_buffer(size, format, 32)
            .with_context(|| format!("display: a {}x{} dumb buffer (DRM_IOCTL_MODE_CREATE_DUMB)", size.0, size.1))?;
        use drm::buffer::Buffer;
        let (pitch, handle) = (db.pitch(), db.handle());
        let fd = match self.card.buffer_to_prime_fd(handle, (libc::O_CLOEXEC | libc::O_RDWR) as u32) {
            Ok(fd) => fd,
            Err(e) => {
                let _ = self.card.destroy_dumb_buffer(db);
                bail!(
                    "display: exporting a dumb buffer for the CPU (DRM_IOCTL_PRIME_HANDLE_TO_FD): {}",
                    zcpipe_sys::errno_words(&e)
                );
            }
        };
        let buf = DmaBuf::new(fd, pitch as u64 * size.1 as u64, MemoryKind::DrmDumb(self.path.clone()));
        let p = Planar {
            size,
            format,
            handles: [Some(handle), None, None, None],
            pitches: [pitch, 0, 0, 0],
            offsets: [0; 4],
        };
        let fb = self
            .card
            .add_planar_framebuffer(&p, FbCmd2Flags::empty())
            .with_context(|| format!("display: a {format} framebuffer on a dumb buffer (DRM_IOCTL_MODE_ADDFB2)"))?;
        Ok(Dumb { db, buf, fb, size, pitch })
    }

    /// Hands `d`'s bytes to `f` inside a write guard of its dma-buf (mapped once; SYNC
    /// START|WRITE before, END after).
    pub(crate) fn with_mapped<T>(&self, d: &mut Dumb, f: impl FnOnce(&mut [u8]) -> T) -> Result<T> {
        let mut g = d.buf.write().context("display: the CPU's access to a dumb buffer")?;
        Ok(f(&mut g))
    }

    /// Frees a dumb buffer and its framebuffer.
    pub(crate) fn free_dumb(&self, d: Dumb) {
        let _ = self.card.destroy_framebuffer(d.fb);
        let _ = self.card.destroy_dumb_buffer(d.db);
    }

    /// Imports one pool buffer (`bufs`, one dma-buf per `fd_index`) as a framebuffer of
    /// `layout` (PRIME fd to handle for each dma-buf, then ADDFB2 with the camera's
    /// format, pitches and offsets). Errors name the format and the ioctl that refused.
    pub fn import(&self, bufs: &[DmaBuf], layout: &FrameLayout) -> Result<framebuffer::Handle> {
        let format = drm_format(layout.fourcc).ok_or_else(|| anyhow!("{} has no DRM format", layout.fourcc))?;
        let mut handles = vec![];
        for (i, b) in bufs.iter().enumerate() {
            let h = self
                .card
                .prime_fd_to_buffer(b.fd())
                .with_context(|| format!("DRM_IOCTL_PRIME_FD_TO_HANDLE of dma-buf {i} ({} bytes)", b.size()))?;
            handles.push(h);
        }
        let mut p = Planar {
            size: (layout.width, layout.height),
            format,
            handles: [None; 4],
            pitches: [0; 4],
            offsets: [0; 4],
        };
        for (i, pl) in layout.planes().iter().enumerate() {
            p.handles[i] = handles.get(pl.fd_index as usize).copied();
            p.pitches[i] = pl.bytesperline;
            p.offsets[i] = pl.offset;
        }
        let fb = self
            .card
            .add_planar_framebuffer(&p, FbCmd2Flags::empty())
            .with_context(|| format!("DRM_IOCTL_MODE_ADDFB2 {format} {}x{}", layout.width, layout.height));
        // The framebuffer holds the GEM objects; the handles go (one per distinct object).
        handles.sort_by_key(|h| u32::from(*h));
        handles.dedup();
        for h in handles {
            let _ = self.card.close_buffer(h);
        }
        fb
    }

    /// Removes a framebuffer.
    pub(crate) fn remove_fb(&self, fb: framebuffer::Handle) {
        let _ = self.card.destroy_framebuffer(fb);
    }

    fn set(req: &mut AtomicModeReq, obj: u64, props: &Props, name: &str, value: u64) -> Result<()> {
        let (h, _) = props.get(name).ok_or_else(|| anyhow!("the driver has no `{name}` property"))?;
        let obj = drm::control::RawResourceHandle::new(obj as u32).ok_or_else(|| anyhow!("object 0"))?;
        req.add_raw_property(obj, *h, value);
        Ok(())
    }

    fn plane_state(req: &mut AtomicModeReq, p: &PlaneInfo, crtc: u64, s: Option<Scanout>) -> Result<()> {
        let obj = raw(p.handle);
        match s {
            Some(s) => {
                Self::set(req, obj, &p.props, "FB_ID", raw(s.fb))?;
                Self::set(req, obj, &p.props, "CRTC_ID", crtc)?;
                for (n, v) in [("SRC_X", s.src.x), ("SRC_Y", s.src.y), ("SRC_W", s.src.w), ("SRC_H", s.src.h)] {
                    Self::set(req, obj, &p.props, n, (v as u64) << 16)?;
                }
                for (n, v) in [("CRTC_X", s.dst.x), ("CRTC_Y", s.dst.y), ("CRTC_W", s.dst.w), ("CRTC_H", s.dst.h)] {
                    Self::set(req, obj, &p.props, n, v as u64)?;
                }
            }
            None => {
                Self::set(req, obj, &p.props, "FB_ID", 0)?;
                Self::set(req, obj, &p.props, "CRTC_ID", 0)?;
            }
        }
        Ok(())
    }

    /// The atomic request showing `main` on the primary plane and `over` on the overlay
    /// plane (`None`: off), with the mode and connector when the mode is not set yet, and
    /// the writeback connector writing into its framebuffer when `fence` is given.
    fn request(&self, main: Scanout, over: Option<Scanout>, fence: Option<&mut i32>) -> Result<AtomicModeReq> {
        self.request_parts(main, over, fence, true, true)
    }

    /// [`Output::request`] with or without the overlay plane's and the writeback
    /// connector's parts (for [`Output::diagnose`]).
    fn request_parts(
        &self,
        main: Scanout,
        over: Option<Scanout>,
        fence: Option<&mut i32>,
        with_overlay: bool,
        with_wb: bool,
    ) -> Result<AtomicModeReq> {
        let mut req = AtomicModeReq::new();
        let crtc = raw(self.crtc);
        if !self.modeset_done {
            Self::set(&mut req, raw(self.conn), &self.conn_props, "CRTC_ID", crtc)?;
            Self::set(&mut req, crtc, &self.crtc_props, "MODE_ID", self.mode_blob)?;
            Self::set(&mut req, crtc, &self.crtc_props, "ACTIVE", 1)?;
        }
        let primary = self.primary.as_ref().ok_or_else(|| anyhow!("no primary plane"))?;
        Self::plane_state(&mut req, primary, crtc, Some(main))?;
        if let Some(o) = self.overlay.as_ref().filter(|_| with_overlay) {
            Self::plane_state(&mut req, o, crtc, over)?;
        }
        // The writeback connector is linked to the CRTC only in a commit that gives it a
        // framebuffer (vkms refuses it linked without one); it stays linked after.
        if let (Some(wb), Some(f)) = (self.writeback.as_ref().filter(|_| with_wb), fence) {
            let c = raw(wb.conn);
            Self::set(&mut req, c, &wb.props, "CRTC_ID", crtc)?;
            Self::set(&mut req, c, &wb.props, "WRITEBACK_FB_ID", raw(wb.target.fb))?;
            Self::set(&mut req, c, &wb.props, "WRITEBACK_OUT_FENCE_PTR", f as *mut i32 as u64)?;
        }
        Ok(req)
    }

    /// After a refused commit: which part the driver refuses, by TEST_ONLY commits of the
    /// state without the overlay plane, without the writeback connector, and without
    /// either; one line for the log.
    pub fn diagnose(&self, main: Scanout, over: Option<Scanout>) -> String {
        let flags = AtomicCommitFlags::TEST_ONLY
            | if self.modeset_done { AtomicCommitFlags::empty() } else { AtomicCommitFlags::ALLOW_MODESET };
        let try_ = |o: bool, w: bool| match self
            .request_parts(main, over, None, o, w)
            .and_then(|r| self.card.atomic_commit(flags, r).map_err(|e| anyhow!(zcpipe_sys::errno_words(&e))))
        {
            Ok(()) => "accepted".to_string(),
            Err(e) => format!("{e:#}"),
        };
        format!(
            "TEST_ONLY of the same state: {}; without the overlay plane: {}; without the writeback connector: {}; with neither: {} (primary {:?} {:?} -> {:?}, mode set: {})",
            try_(true, true),
            try_(false, true),
            try_(true, false),
            try_(false, false),
            main.fb,
            main.src,
            main.dst,
            self.modeset_done
        )
    }

    /// Whether the driver accepts `main` (and `over`) as a state (a TEST_ONLY commit): how
    /// the display learns whether its planes scale, or take a format at a size.
    pub fn test(&self, main: Scanout, over: Option<Scanout>) -> bool {
        if !self.atomic {
            return false;
        }
        let flags = AtomicCommitFlags::TEST_ONLY
            | if self.modeset_done { AtomicCommitFlags::empty() } else { AtomicCommitFlags::ALLOW_MODESET };
        self.request(main, over, None).and_then(|r| self.card.atomic_commit(flags, r).map_err(Into::into)).is_ok()
    }

    /// Shows `main` (and `over`) from the next vblank: a nonblocking atomic commit that
    /// sends a page-flip event (the first one sets the mode, blocking); on legacy
    /// modesetting, `SET_CRTC` the first time and then `PAGE_FLIP` with an event (`main`
    /// must cover the mode there). With `writeback`, the composed output is also written
    /// into the writeback framebuffer: returns its out-fence then (wait for it with
    /// [`Output::writeback_pixels`]).
    pub fn show(&mut self, main: Scanout, over: Option<Scanout>, writeback: bool) -> Result<Option<OwnedFd>> {
        if !self.atomic {
            if !self.modeset_done {
                self.card
                    .set_crtc(self.crtc, Some(main.fb), (0, 0), &[self.conn], Some(self.mode))
                    .context("DRM_IOCTL_MODE_SETCRTC")?;
                self.modeset_done = true;
                // No event for a SET_CRTC: flip to the same framebuffer for one.
            }
            self.card
                .page_flip(self.crtc, main.fb, drm::control::PageFlipFlags::EVENT, None)
                .context("DRM_IOCTL_MODE_PAGE_FLIP")?;
            return Ok(None);
        }
        let mut fence: i32 = -1;
        // A writeback rides on a commit after the mode is set (its own modeset links the
        // writeback connector); one the driver refuses is said once and dropped, and the
        // frame is shown without it.
        let wb = writeback && self.writeback.is_some() && self.modeset_done && !self.writeback_refused;
        let req = self.request(main, over, if wb { Some(&mut fence) } else { None })?;
        // A writeback links its connector to the CRTC: a modeset, blocking.
        let flags =
            if self.modeset_done && !wb { AtomicCommitFlags::NONBLOCK } else { AtomicCommitFlags::ALLOW_MODESET }
                | AtomicCommitFlags::PAGE_FLIP_EVENT;
        if let Err(e) = self.card.atomic_commit(flags, req) {
            if wb {
                let mut dummy: i32 = -1;
                let with_job = self.request_parts(main, over, Some(&mut dummy), true, true).and_then(|r| {
                    self.card
                        .atomic_commit(AtomicCommitFlags::TEST_ONLY | AtomicCommitFlags::ALLOW_MODESET, r)
                        .map_err(|e| anyhow!(zcpipe_sys::errno_words(&e)))
                });
                log::warn!(
                    "display: the writeback commit was refused ({}; TEST_ONLY of it: {}; {}); no more writebacks",
                    zcpipe_sys::errno_words(&e),
                    with_job.map_or_else(|e| format!("{e:#}"), |()| "accepted".into()),
                    self.diagnose(main, over)
                );
                self.writeback_refused = true;
                return self.show(main, over, false);
            }
            if e.raw_os_error() == Some(libc::EACCES) {
                bail!("display: {} refused the commit (EACCES): another process is its DRM master (a desktop, or another display); stop it, or run from a text console", self.path.display());
            }
            bail!("DRM_IOCTL_MODE_ATOMIC: {} ({})", zcpipe_sys::errno_words(&e), self.diagnose(main, over));
        }
        self.modeset_done = true;
        // SAFETY: `fence` is a live, aligned i32 on this stack; the kernel wrote the fence's
        // fd into it during the ioctl through the pointer it was given, which the compiler
        // cannot see: a volatile read takes what is there now.
        let fd = unsafe { std::ptr::read_volatile(&fence) };
        if fd >= 0 {
            // SAFETY: a fresh sync_file fd the kernel installed for us during the commit
            // (drm_writeback.c, `WRITEBACK_OUT_FENCE_PTR`); nothing else owns it.
            return Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }));
        }
        Ok(None)
    }

    /// Waits up to `timeout` for a page-flip event: `true` when one came (the state last
    /// shown is on screen, the one before it is free).
    pub(crate) fn wait_flip(&self, timeout: Duration) -> Result<bool> {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let mut p = [PollFd::new(self.card.as_fd(), PollFlags::POLLIN)];
        match poll(&mut p, PollTimeout::from(timeout.as_millis().min(u16::MAX as u128) as u16)) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => return Ok(false),
            Ok(_) => {}
            Err(e) => bail!("display: poll on {}: {e}", self.path.display()),
        }
        let events = self.card.receive_events().context("display: reading DRM events")?;
        Ok(events.into_iter().any(|e| matches!(e, drm::control::Event::PageFlip(_))))
    }

    /// Waits (up to 1 s) for a writeback's `fence`, then reads the written picture as tight
    /// RGB24 rows (XRGB8888 words read as B, G, R, X).
    pub(crate) fn writeback_pixels(&mut self, fence: OwnedFd) -> Result<Vec<u8>> {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let mut p = [PollFd::new(fence.as_fd(), PollFlags::POLLIN)];
        match poll(&mut p, PollTimeout::from(1000u16)) {
            Ok(1..) => {}
            _ => bail!("display: the writeback did not complete within 1 s (fence fd {})", fence.as_raw_fd()),
        }
        let Some(wb) = self.writeback.as_ref() else { bail!("no writeback connector") };
        let (w, h, pitch) = (wb.target.size.0 as usize, wb.target.size.1 as usize, wb.target.pitch as usize);
        let m = wb.target.buf.read().context("display: reading the writeback buffer")?;
        let mut rgb = Vec::with_capacity(w * h * 3);
        for y in 0..h {
            for px in m[y * pitch..y * pitch + w * 4].chunks_exact(4) {
                rgb.extend_from_slice(&[px[2], px[1], px[0]]);
            }
        }
        drop(m);
        Ok(rgb)
    }

    /// Turns the planes off (a blocking commit; legacy: the CRTC off), so no framebuffer
    /// still read by the display is given back to the camera. Errors are logged.
    pub fn blank(&mut self) {
        if !self.modeset_done {
            return;
        }
        if !self.atomic {
            let _ = self.card.set_crtc(self.crtc, None, (0, 0), &[], None);
            return;
        }
        let mut req = AtomicModeReq::new();
        let crtc = raw(self.crtc);
        let planes: Vec<&PlaneInfo> = self.primary.iter().chain(self.overlay.iter()).collect();
        for p in planes {
            let _ = Self::plane_state(&mut req, p, crtc, None);
        }
        let _ = Self::set(&mut req, raw(self.conn), &self.conn_props, "CRTC_ID", 0);
        if let Some(wb) = &self.writeback {
            let _ = Self::set(&mut req, raw(wb.conn), &wb.props, "CRTC_ID", 0);
        }
        let _ = Self::set(&mut req, crtc, &self.crtc_props, "ACTIVE", 0);
        let _ = Self::set(&mut req, crtc, &self.crtc_props, "MODE_ID", 0);
        if let Err(e) = self.card.atomic_commit(AtomicCommitFlags::ALLOW_MODESET, req) {
            log::warn!("display: turning the output off: {}", zcpipe_sys::errno_words(&e));
        }
        self.modeset_done = false;
    }
}

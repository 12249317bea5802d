//! `--scaler v4l2m2m:/dev/videoN`: a V4L2 memory-to-memory device converts and resizes.
//!
//! The mainline kernel's Rockchip RGA driver (`rockchip-rga`) is such a device, and so is
//! the virtual `vim2m` the VM tests use. The two queues of one open file handle are one
//! conversion context (V4L2 mem2mem interface, `Documentation/userspace-api/media/v4l/
//! dev-mem2mem.rst`):
//! - the **OUTPUT** queue takes the source frames: it imports the capture stage's dma-bufs
//!   (`V4L2_MEMORY_DMABUF`), OUTPUT buffer `i` always being capture buffer `i`;
//! - the **CAPTURE** queue writes the result: it imports the scale stage's own pool, CAPTURE
//!   buffer `j` always being pool buffer `j`.
//!
//! Because a buffer index keeps its dma-buf, the kernel maps each one once (vb2 keeps the
//! attachment while the same fd comes back at the same index, `videobuf2-core.c`
//! `__prepare_dmabuf`), and the CPU never touches a frame.
//!
//! Letterbox, top-left (YOLOX): the CAPTURE format is the resized image (`resized_w x
//! resized_h`) with the model input's `bytesperline`, written at the top-left of the
//! model-input buffer. A device that computes its own `bytesperline` (vim2m: `width * bytes
//! per pixel`) can therefore only letterbox sources wider than the model's aspect ratio (pad
//! rows at the bottom); otherwise [`V4l2M2mScaler::bind_pools`] names the rows it wanted and
//! the ones the device granted.
//!
//! Letterbox, centred (Ultralytics, YOLOv5): the CAPTURE format is the whole model input and
//! the picture goes to the COMPOSE rectangle (`VIDIOC_S_SELECTION`, `V4L2_SEL_TGT_COMPOSE`:
//! `selection-api-intro.rst`, "the part of the capture buffer the picture is written to"),
//! which the mainline `rockchip-rga` driver offers. A driver without it (vim2m) cannot place
//! a picture off the buffer's start, so a centred letterbox that needs padding is refused at
//! start-up, naming the fix (`--letterbox top-left` or `--scaler cpu`). Either way the
//! rows and columns the device never writes are filled with the pad value once, in
//! [`V4l2M2mScaler::bind_pools`], and the channel order is the CAPTURE format (RGB24 or
//! BGR24, if the device gives it).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use zcpipe_core::dmabuf::DmaBuf;
use zcpipe_core::frame::{Fourcc, FrameLayout, Letterbox, LetterboxParams};
use zcpipe_sys::v4l2 as sys;
use zcpipe_sys::v4l2::format_name;
use zcpipe_sys::v4l2::node::{caps_names, m2m_nodes, open_node, other_nodes_hint, query_node, NodeInfo};

use super::Scaler;
use zcpipe_core::pool::{Frame, WriteLoan};

/// How long one conversion may take before the device is declared stuck (vim2m needs 40 ms
/// per frame by default, its `default_transtime`).
const FRAME_TIMEOUT: Duration = Duration::from_secs(2);

/// One open mem2mem node, its queues negotiated and both pools imported.
#[derive(Debug)]
pub struct V4l2M2mScaler {
    file: File,
    node: NodeInfo,
    out_type: u32,
    cap_type: u32,
    /// Source buffer `i`: one fd per V4L2 plane (dups of capture's fds) and its length.
    src: Vec<Vec<(OwnedFd, u32)>>,
    /// Bytes of each OUTPUT plane (`bytesused` to queue).
    src_used: Vec<u32>,
    /// Pool buffer `j`: a dup of its fd and its length.
    dst: Vec<(OwnedFd, u32)>,
    letterbox: LetterboxParams,
    streaming: bool,
    frames: u64,
}

/// "mem2mem nodes here: /dev/video8 (vim2m) (`zcpipe doctor` lists every node)".
fn m2m_hint(except: &Path) -> String {
    other_nodes_hint("mem2mem", &m2m_nodes(), except, "no mem2mem node found here; use --scaler cpu")
}

fn enum_formats(fd: BorrowedFd<'_>, buf_type: u32) -> Vec<Fourcc> {
    let mut v = vec![];
    for index in 0..256 {
        let mut d = sys::FmtDesc { index, type_: buf_type, ..Default::default() };
        if sys::enum_fmt(fd, &mut d).is_err() {
            break;
        }
        v.push(d.fourcc());
    }
    v
}

/// What VIDIOC_S_FMT granted on one queue.
#[derive(Clone, Debug, PartialEq, Eq)]
struct QueueFormat {
    fourcc: Fourcc,
    width: u32,
    height: u32,
    /// `(bytesperline, sizeimage)` per V4L2 plane.
    planes: Vec<(u32, u32)>,
}

impl std::fmt::Display for QueueFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bpl: Vec<String> = self.planes.iter().map(|p| p.0.to_string()).collect();
        write!(f, "{} {}x{} bytesperline {}", format_name(self.fourcc), self.width, self.height, bpl.join("+"))
    }
}

impl V4l2M2mScaler {
    /// Opens `path` and checks that it is a streaming mem2mem device. Errors name the node,
    /// what it is instead, and the mem2mem nodes present.
    pub fn open(path: &Path) -> Result<V4l2M2mScaler> {
        let file = open_node(path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => anyhow!("--scaler v4l2m2m: {} does not exist; {}", path.display(), m2m_hint(path)),
            io::ErrorKind::PermissionDenied => anyhow!(
                "--scaler v4l2m2m: cannot open {}: permission denied; install udev/99-zcpipe.rules and join the zcpipe group, or run as root",
                path.display()
            ),
            _ => anyhow!("--scaler v4l2m2m: cannot open {}: {e}", path.display()),
        })?;
        let node = query_node(file.as_fd(), path).map_err(|e| {
            anyhow!(
                "--scaler v4l2m2m: {} is not a V4L2 device (VIDIOC_QUERYCAP: {e}); {}",
                path.display(),
                m2m_hint(path)
            )
        })?;
        let caps = node.caps;
        let (out_type, cap_type) = if caps & sys::V4L2_CAP_VIDEO_M2M_MPLANE != 0 {
            (sys::V4L2_BUF_TYPE_VIDEO_OUTPUT_MPLANE, sys::V4L2_BUF_TYPE_VIDEO_CAPTURE_MPLANE)
        } else if caps & sys::V4L2_CAP_VIDEO_M2M != 0 {
            (sys::V4L2_BUF_TYPE_VIDEO_OUTPUT, sys::V4L2_BUF_TYPE_VIDEO_CAPTURE)
        } else {
            let what = if node.can_capture() {
                "a capture node (a camera), not a mem2mem device"
            } else {
                "not a mem2mem device"
            };
            bail!("--scaler v4l2m2m: {} is {what} (caps {}); {}", node.label(), caps_names(caps), m2m_hint(path));
        };
        if !node.cap.has_streaming() {
            bail!("--scaler v4l2m2m: {} cannot stream (caps {}); {}", node.label(), caps_names(caps), m2m_hint(path));
        }
        Ok(V4l2M2mScaler {
            file,
            node,
            out_type,
            cap_type,
            src: vec![],
            src_used: vec![],
            dst: vec![],
            letterbox: LetterboxParams::default(),
            streaming: false,
            frames: 0,
        })
    }

    /// The node's path.
    pub fn path(&self) -> PathBuf {
        self.node.path.clone()
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    fn mplane(&self) -> bool {
        sys::is_multiplanar(self.out_type)
    }

    fn busy(&self, what: &str, e: io::Error) -> anyhow::Error {
        if e.raw_os_error() == Some(libc::EBUSY) {
            anyhow!(
                "v4l2m2m: {} is in use ({what}: EBUSY); stop the other user (`fuser {}` names it) or use --scaler cpu",
                self.node.label(),
                self.node.path.display()
            )
        } else {
            anyhow!("v4l2m2m: {what} on {}: {e}", self.node.label())
        }
    }

    /// VIDIOC_S_FMT on `buf_type`; returns what the driver granted.
    fn set_format(
        &self,
        buf_type: u32,
        fourcc: Fourcc,
        width: u32,
        height: u32,
        planes: &[(u32, u32)],
    ) -> Result<QueueFormat> {
        let mut f = sys::Format::request(buf_type, fourcc, width, height, planes);
        let queue = if buf_type == self.cap_type { "CAPTURE" } else { "OUTPUT" };
        sys::s_fmt(self.fd(), &mut f)
            .map_err(|e| self.busy(&format!("VIDIOC_S_FMT {queue} {} {width}x{height}", format_name(fourcc)), e))?;
        let (width, height, fourcc, planes, _) = f.granted();
        Ok(QueueFormat { fourcc, width, height, planes })
    }

    fn reqbufs(&self, buf_type: u32, count: u32) -> Result<u32> {
        let mut r =
            sys::RequestBuffers { count, type_: buf_type, memory: sys::V4L2_MEMORY_DMABUF, ..Default::default() };
        sys::reqbufs(self.fd(), &mut r).map_err(|e| self.busy(&format!("VIDIOC_REQBUFS DMABUF x{count}"), e))?;
        Ok(r.count)
    }

    fn qbuf(&self, buf_type: u32, index: u32, fds: &[(OwnedFd, u32)], used: &[u32]) -> Result<()> {
        let mut b = sys::Buffer::new(buf_type, sys::V4L2_MEMORY_DMABUF, index);
        let mut planes = vec![sys::Plane::default(); if self.mplane() { fds.len() } else { 0 }];
        if self.mplane() {
            for (i, (p, (fd, len))) in planes.iter_mut().zip(fds).enumerate() {
                p.set_fd(fd.as_fd());
                p.length = *len;
                p.bytesused = used.get(i).copied().unwrap_or(0);
            }
        } else {
            b.set_fd(fds[0].0.as_fd());
            b.length = fds[0].1;
            b.bytesused = used.first().copied().unwrap_or(0);
        }
        sys::qbuf(self.fd(), &mut b, &mut planes)
            .map_err(|e| anyhow!("v4l2m2m: VIDIOC_QBUF {index} on {}: {e}", self.node.label()))
    }

    /// DQBUF on `buf_type` (non-blocking): `Some((index, error flag))` or `None` if none is done.
    fn dqbuf(&self, buf_type: u32, nplanes: usize) -> Result<Option<(u32, bool)>> {
        let mut b = sys::Buffer::new(buf_type, sys::V4L2_MEMORY_DMABUF, 0);
        let mut planes = vec![sys::Plane::default(); if self.mplane() { nplanes } else { 0 }];
        match sys::dqbuf(self.fd(), &mut b, &mut planes) {
            Ok(()) => Ok(Some((b.index, b.is_error()))),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => bail!("v4l2m2m: VIDIOC_DQBUF on {}: {e}", self.node.label()),
        }
    }
}

impl Scaler for V4l2M2mScaler {
    fn name(&self) -> String {
        format!("v4l2m2m {}", self.node.label())
    }

    fn binds_pools(&self) -> bool {
        true
    }

    /// [`V4l2M2mScaler::bind_pools`]; a source whose frames change size is refused, naming
    /// the fix: the queue formats of a mem2mem device are fixed per stream.
    fn bind(
        &mut self,
        src: &[Vec<DmaBuf>],
        src_layout: Option<&FrameLayout>,
        dst: &mut [DmaBuf],
        dst_layout: &FrameLayout,
        letterbox: Letterbox,
    ) -> Result<()> {
        let Some(src_layout) = src_layout else {
            bail!(
                "{} needs a source with one fixed format and size (a V4L2 camera: --source v4l2:/dev/videoN); this source changes \
                 size from frame to frame: use --scaler cpu",
                self.name()
            )
        };
        self.bind_pools(src, src_layout, dst, dst_layout, letterbox)
    }

    /// The device reads the source buffer (OUTPUT queue) and writes the output buffer
    /// (CAPTURE queue) in place: no mapping, no sync here.
    fn scale(&mut self, src: &Frame, dst: &mut WriteLoan<'_>) -> Result<LetterboxParams> {
        self.scale_index(src.index(), dst.index())
    }
}

impl V4l2M2mScaler {
    /// Negotiates `src_layout` -> `dst_layout` (its fourcc the channel order) with the
    /// picture placed as `letterbox` says, and imports both pools once (`src[i]`: source
    /// buffer `i`'s dma-bufs; `dst[j]`: output buffer `j`); fills the letterbox area the
    /// device never writes with `letterbox.pad` (through a CPU write guard). A centred
    /// picture needs the COMPOSE selection on the CAPTURE queue: without it, one line
    /// naming the device and the fix.
    pub fn bind_pools(
        &mut self,
        src: &[Vec<DmaBuf>],
        src_layout: &FrameLayout,
        dst: &mut [DmaBuf],
        dst_layout: &FrameLayout,
        letterbox: Letterbox,
    ) -> Result<()> {
        let pad = letterbox.pad;
        let label = self.node.label();
        let (sf, df) = (src_layout.fourcc, dst_layout.fourcc);
        // 1. Can the device do this conversion at all? Name both sides if not.
        let takes = enum_formats(self.fd(), self.out_type);
        let gives = enum_formats(self.fd(), self.cap_type);
        if !takes.contains(&sf) {
            bail!(
                "v4l2m2m: {label} cannot convert capture's {} into the model's {}: its OUTPUT queue (input) takes {}; \
                 capture in one of those (--format {}) or use --scaler cpu",
                format_name(sf),
                format_name(df),
                sys::format_list(&takes, "nothing"),
                takes
                    .iter()
                    .find(|f| crate::stage::ACCEPTED.contains(f))
                    .map(|f| format_name(*f))
                    .unwrap_or_else(|| "RGB24".into())
            );
        }
        if !gives.contains(&df) {
            bail!(
                "v4l2m2m: {label} cannot convert capture's {} into the model's {}: its CAPTURE queue (output) gives {}; use --scaler cpu",
                format_name(sf),
                format_name(df),
                sys::format_list(&gives, "nothing")
            );
        }
        // 2. OUTPUT queue: exactly capture's format, strides and sizes.
        let fd_planes = sf.num_planes().unwrap_or(1); // NV12M: 2 fds; NV12: 1
        let v4l2_planes: Vec<(u32, u32)> = if fd_planes > 1 {
            src_layout.planes().iter().map(|p| (p.bytesperline, p.length)).collect()
        } else {
            vec![(src_layout.planes()[0].bytesperline, src_layout.bytes_needed() as u32)]
        };
        if fd_planes > 1 && !self.mplane() {
            bail!(
                "v4l2m2m: {label} is single-planar and cannot take {} (one dma-buf per plane); capture in {} instead",
                format_name(sf),
                sys::format_list(&takes, "nothing")
            );
        }
        let asked =
            QueueFormat { fourcc: sf, width: src_layout.width, height: src_layout.height, planes: v4l2_planes.clone() };
        let got = self.set_format(self.out_type, sf, src_layout.width, src_layout.height, &v4l2_planes)?;
        let strides_match = got.planes.iter().zip(&asked.planes).all(|(g, a)| g.0 == a.0);
        if got.fourcc != sf
            || got.width != asked.width
            || got.height != asked.height
            || !strides_match
            || got.planes.len() != asked.planes.len()
        {
            bail!("v4l2m2m: {label} cannot read capture's frames: its OUTPUT queue granted {got} for capture's {asked}; capture at a size it takes or use --scaler cpu");
        }
        // 3. CAPTURE queue: the resized image, rows of the model input's bytesperline, or
        //    for a picture off the buffer's start, the whole model input and a COMPOSE
        //    rectangle.
        let lb = letterbox.params(src_layout.width, src_layout.height, dst_layout.width, dst_layout.height);
        let dst_size = dst.iter().map(|d| d.size()).min().unwrap_or(0);
        let (got_c, lb) = match lb.picture() {
            (0, 0, ..) => self.capture_picture(df, src_layout, dst_layout, dst_size, lb)?,
            _ => self.capture_composed(df, src_layout, dst_layout, dst_size, lb)?,
        };
        self.letterbox = lb;
        // 4. Pad once: the device never writes outside the picture.
        for d in dst.iter_mut() {
            let mut w = d.write().context("v4l2m2m: filling the letterbox pad")?;
            w.fill(pad);
        }
        // 5. Import both pools, index for index.
        let n_src = self.reqbufs(self.out_type, src.len() as u32)?;
        let n_dst = self.reqbufs(self.cap_type, dst.len() as u32)?;
        if (n_src as usize) < src.len() || (n_dst as usize) < dst.len() {
            bail!(
                "v4l2m2m: {label} granted {n_src} OUTPUT and {n_dst} CAPTURE buffers for pools of {} and {}",
                src.len(),
                dst.len()
            );
        }
        for (i, bufs) in src.iter().enumerate() {
            let mut v = vec![];
            for b in bufs.iter().take(fd_planes) {
                let fd =
                    b.fd().try_clone_to_owned().with_context(|| format!("v4l2m2m: dup of source buffer {i}'s fd"))?;
                v.push((fd, b.size() as u32));
            }
            if v.len() != fd_planes {
                bail!("v4l2m2m: source buffer {i} has {} dma-bufs, {} needs {fd_planes}", v.len(), format_name(sf));
            }
            self.src.push(v);
        }
        self.src_used = got.planes.iter().map(|p| p.1).collect();
        for (j, d) in dst.iter().enumerate() {
            let fd = d.fd().try_clone_to_owned().with_context(|| format!("v4l2m2m: dup of pool buffer {j}'s fd"))?;
            self.dst.push((fd, d.size() as u32));
        }
        sys::streamon(self.fd(), self.out_type).map_err(|e| self.busy("VIDIOC_STREAMON OUTPUT", e))?;
        self.streaming = true;
        sys::streamon(self.fd(), self.cap_type).map_err(|e| self.busy("VIDIOC_STREAMON CAPTURE", e))?;
        let (px, py, pw, ph) = lb.picture();
        log::info!(
            "v4l2m2m: {label}: OUTPUT {got} imports {} capture buffers ({} dma-bufs), CAPTURE {got_c} imports {} pool buffers; picture {pw}x{ph} at ({px},{py}) ({}); pad {pad} filled once",
            self.src.len(),
            self.src.iter().map(Vec::len).sum::<usize>(),
            self.dst.len(),
            letterbox.placement.describe()
        );
        Ok(())
    }

    /// The CAPTURE queue of a picture at the buffer's start: the resized image with the
    /// model input's rows. Returns what the driver granted and `lb` with the size the device
    /// rounds to (vim2m: even widths).
    fn capture_picture(
        &self,
        df: Fourcc,
        src_layout: &FrameLayout,
        dst_layout: &FrameLayout,
        dst_size: u64,
        mut lb: LetterboxParams,
    ) -> Result<(QueueFormat, LetterboxParams)> {
        let label = self.node.label();
        let dst_bpl = dst_layout.planes()[0].bytesperline;
        let want_size = dst_bpl * lb.resized_h;
        let got_c = self.set_format(self.cap_type, df, lb.resized_w, lb.resized_h, &[(dst_bpl, want_size)])?;
        let asked_c =
            QueueFormat { fourcc: df, width: lb.resized_w, height: lb.resized_h, planes: vec![(dst_bpl, want_size)] };
        let (gbpl, gsize) = got_c.planes[0];
        if got_c.fourcc != df
            || got_c.width == 0
            || got_c.width > dst_layout.width
            || got_c.height == 0
            || got_c.height > dst_layout.height
        {
            bail!(
                "v4l2m2m: {label} cannot write the letterboxed image: its CAPTURE queue granted {got_c} for {asked_c} \
                 (the model input is {}x{}); use --scaler cpu",
                dst_layout.width,
                dst_layout.height
            );
        }
        if gbpl != dst_bpl {
            bail!(
                "v4l2m2m: {label} writes rows of {gbpl} bytes ({got_c}) but the model input's rows are {dst_bpl} bytes \
                 ({}x{} {}): the device cannot letterbox this {}x{} source; capture at a wider aspect ratio or use --scaler cpu",
                dst_layout.width,
                dst_layout.height,
                format_name(df),
                src_layout.width,
                src_layout.height
            );
        }
        if u64::from(gsize) > dst_size {
            bail!("v4l2m2m: {label} wants {gsize}-byte CAPTURE buffers ({got_c}) but the pool's are {dst_size} bytes");
        }
        // The device may round the size (vim2m: even widths); map boxes back with what it wrote.
        if (got_c.width, got_c.height) != (lb.resized_w, lb.resized_h) {
            log::info!(
                "v4l2m2m: {label} resizes to {}x{} (asked {}x{})",
                got_c.width,
                got_c.height,
                lb.resized_w,
                lb.resized_h
            );
            lb.resized_w = got_c.width;
            lb.resized_h = got_c.height;
        }
        Ok((got_c, lb))
    }

    /// The CAPTURE queue of a picture off the buffer's start (a centred letterbox): the
    /// whole model input as the format, the picture as the COMPOSE rectangle. Returns what
    /// the driver granted and `lb` with the rectangle it set; a driver without COMPOSE
    /// (vim2m) is one line naming the fix.
    fn capture_composed(
        &self,
        df: Fourcc,
        src_layout: &FrameLayout,
        dst_layout: &FrameLayout,
        dst_size: u64,
        mut lb: LetterboxParams,
    ) -> Result<(QueueFormat, LetterboxParams)> {
        let label = self.node.label();
        let (dw, dh) = (dst_layout.width, dst_layout.height);
        let dst_bpl = dst_layout.planes()[0].bytesperline;
        let want_size = dst_bpl * dh;
        let got_c = self.set_format(self.cap_type, df, dw, dh, &[(dst_bpl, want_size)])?;
        let asked_c = QueueFormat { fourcc: df, width: dw, height: dh, planes: vec![(dst_bpl, want_size)] };
        let (gbpl, gsize) = got_c.planes[0];
        if got_c.fourcc != df || (got_c.width, got_c.height) != (dw, dh) || gbpl != dst_bpl {
            bail!("v4l2m2m: {label} cannot write the model input: its CAPTURE queue granted {got_c} for {asked_c}; use --scaler cpu");
        }
        if u64::from(gsize) > dst_size {
            bail!("v4l2m2m: {label} wants {gsize}-byte CAPTURE buffers ({got_c}) but the pool's are {dst_size} bytes");
        }
        let (x, y, w, h) = lb.picture();
        let asked = sys::Rect { left: x as i32, top: y as i32, width: w, height: h };
        let got = self.compose(asked).map_err(|e| {
            anyhow!(
                "v4l2m2m: {label} cannot centre the picture: the model wants a centred letterbox ({w}x{h} at ({x},{y}) in {dw}x{dh} \
                 for capture's {}x{}) and the device's CAPTURE queue has no COMPOSE rectangle (VIDIOC_S_SELECTION: {e}); \
                 use --letterbox top-left (the model may score lower) or --scaler cpu",
                src_layout.width,
                src_layout.height
            )
        })?;
        let inside = got.left >= 0
            && got.top >= 0
            && got.width > 0
            && got.height > 0
            && got.left as u64 + got.width as u64 <= dw as u64
            && got.top as u64 + got.height as u64 <= dh as u64;
        if !inside {
            bail!(
                "v4l2m2m: {label} set the COMPOSE rectangle {}x{} at ({},{}) for {w}x{h} at ({x},{y}): it is not inside the {dw}x{dh} model input; use --scaler cpu",
                got.width,
                got.height,
                got.left,
                got.top
            );
        }
        if got != asked {
            // The device may align the rectangle; map boxes back with what it writes.
            log::info!(
                "v4l2m2m: {label} composes {}x{} at ({},{}) (asked {w}x{h} at ({x},{y}))",
                got.width,
                got.height,
                got.left,
                got.top
            );
            lb.place(got.left as u32, got.top as u32, got.width, got.height);
        }
        Ok((got_c, lb))
    }

    /// VIDIOC_S_SELECTION of the CAPTURE queue's COMPOSE target; returns the rectangle the
    /// driver set. The single-planar buffer type first (what drivers take since Linux
    /// 4.13, vidioc-g-selection.rst), then the multi-planar one for an older driver.
    fn compose(&self, r: sys::Rect) -> io::Result<sys::Rect> {
        let mut types = vec![sys::V4L2_BUF_TYPE_VIDEO_CAPTURE];
        if self.cap_type != sys::V4L2_BUF_TYPE_VIDEO_CAPTURE {
            types.push(self.cap_type);
        }
        let mut last = io::Error::from_raw_os_error(libc::EINVAL);
        for type_ in types {
            let mut sel = sys::Selection { type_, target: sys::V4L2_SEL_TGT_COMPOSE, r, ..Default::default() };
            match sys::s_selection(self.fd(), &mut sel) {
                Ok(()) => return Ok(sel.r),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    /// Converts source buffer `src_index` into output buffer `dst_index` (after
    /// [`V4l2M2mScaler::bind_pools`]); returns when the device is done with both. This is
    /// below the pools' loans: the caller must hold both buffers. The scale stage goes
    /// through [`Scaler::scale`], whose `Frame` and `WriteLoan` prove it; tests drive the
    /// device with indices.
    pub fn scale_index(&mut self, src_index: u32, dst_index: u32) -> Result<LetterboxParams> {
        let (si, di) = (src_index as usize, dst_index as usize);
        if si >= self.src.len() || di >= self.dst.len() {
            bail!(
                "v4l2m2m: buffer index out of range (source {si} of {}, pool {di} of {})",
                self.src.len(),
                self.dst.len()
            );
        }
        self.qbuf(self.out_type, src_index, &self.src[si], &self.src_used)?;
        self.qbuf(self.cap_type, dst_index, std::slice::from_ref(&self.dst[di]), &[])?;
        let (mut out_done, mut cap_done) = (false, false);
        let end = Instant::now() + FRAME_TIMEOUT;
        while !(out_done && cap_done) {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!(
                    "v4l2m2m: {} did not finish a frame within {FRAME_TIMEOUT:?} (source buffer {si}, pool buffer {di})",
                    self.node.label()
                );
            }
            let mut p = [PollFd::new(self.fd(), PollFlags::POLLIN | PollFlags::POLLOUT)];
            match poll(&mut p, PollTimeout::from(left.as_millis().min(u16::MAX as u128) as u16)) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => bail!("v4l2m2m: poll on {}: {e}", self.node.label()),
            }
            if !out_done {
                if let Some((i, _)) = self.dqbuf(self.out_type, self.src[si].len())? {
                    if i != src_index {
                        bail!("v4l2m2m: {} returned OUTPUT buffer {i}, expected {src_index}", self.node.label());
                    }
                    out_done = true;
                }
            }
            if !cap_done {
                if let Some((i, err)) = self.dqbuf(self.cap_type, 1)? {
                    if i != dst_index {
                        bail!("v4l2m2m: {} returned CAPTURE buffer {i}, expected {dst_index}", self.node.label());
                    }
                    if err {
                        bail!(
                            "v4l2m2m: {} flagged the converted frame as corrupt (V4L2_BUF_FLAG_ERROR)",
                            self.node.label()
                        );
                    }
                    cap_done = true;
                }
            }
        }
        self.frames += 1;
        Ok(self.letterbox)
    }
}

impl Drop for V4l2M2mScaler {
    fn drop(&mut self) {
        if self.streaming {
            // STREAMOFF returns every queued buffer; REQBUFS 0 drops the dma-buf attachments
            // (dev-mem2mem.rst, vidioc-reqbufs.rst). Closing the file would do both too.
            let _ = sys::streamoff(self.fd(), self.cap_type);
            let _ = sys::streamoff(self.fd(), self.out_type);
        }
        for t in [self.cap_type, self.out_type] {
            let mut r =
                sys::RequestBuffers { count: 0, type_: t, memory: sys::V4L2_MEMORY_DMABUF, ..Default::default() };
            let _ = sys::reqbufs(self.fd(), &mut r);
        }
        log::debug!("v4l2m2m: {} released after {} frames", self.node.label(), self.frames);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_names_the_missing_node_and_the_fallback() {
        let e = V4l2M2mScaler::open(Path::new("/dev/video-zcpipe-absent")).unwrap_err().to_string();
        assert!(e.contains("/dev/video-zcpipe-absent does not exist"), "{e}");
        assert!(e.contains("--scaler cpu") || e.contains("mem2mem nodes here"), "{e}");
    }

    #[test]
    fn open_refuses_a_file_that_is_not_a_v4l2_node() {
        let f = tempfile::NamedTempFile::new().unwrap();
        let e = V4l2M2mScaler::open(f.path()).unwrap_err().to_string();
        assert!(e.contains("is not a V4L2 device"), "{e}");
    }
}

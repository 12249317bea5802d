//! V4L2 capture backend (`--source v4l2[:DEVICE]`): a camera node's buffers are the pool.
//!
//! [`V4l2Capture::open`] checks the node (it must capture and stream, single- or
//! multi-planar), negotiates the format (`--format`, `--size`, `--fps` with
//! `VIDIOC_S_PARM`) and logs what the driver granted. [`V4l2Capture::allocate`] makes the
//! pool in one of two I/O modes ([`CaptureIo`]): `mmap` (REQBUFS MMAP, then `VIDIOC_EXPBUF`
//! per plane: the exported dma-buf fds are the pool) or `dmabuf` (buffers from a dma-buf
//! heap or udmabuf, imported with REQBUFS DMABUF). Frame layouts come from the driver's
//! `bytesperline` and `sizeimage`, never from the width.
//!
//! [`V4l2Capture::next_frame`] is one turn of the capture loop: queue (QBUF) every buffer
//! that every downstream holder has dropped ([`PoolProducer::lend_free_to_device`]: each
//! queued buffer's [`DeviceLoan`] sits in its driver slot), `poll()` with a timeout, DQBUF
//! (the loan is claimed back as a write loan), and publish the frame with the driver's timestamp and sequence number.
//! Sequence gaps are counted as driver drops; `V4L2_BUF_FLAG_ERROR` frames are requeued and
//! counted; `ENODEV` (the camera was unplugged) ends the stream. The caller ends with
//! [`V4l2Capture::stream_off`], which takes back every buffer the driver held.
//!
//! Never: write to a buffer the driver or a consumer holds, or size anything from `width`.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use crate::core::dmabuf::{Allocator, DmaBuf, MemoryKind};
use crate::core::frame::{monotonic_ns, Fourcc, FrameDesc, FrameLayout, PlaneDesc, Stage, MAX_PLANES};
use crate::core::config::Choice;
use crate::core::pool::{DeviceLoan, PoolProducer};
use crate::sys::v4l2 as sys;
pub use crate::sys::v4l2::format_name;
use crate::sys::v4l2::node::{caps_names, capture_nodes, first_capture_node, open_node, query_node, NodeInfo};

/// How capture buffers are made (`--capture-io`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CaptureIo {
    /// The driver allocates (REQBUFS MMAP); each plane is exported with VIDIOC_EXPBUF.
    #[default]
    Mmap,
    /// zcpipe allocates from the dma-buf heap or udmabuf (`--heap`) and the driver imports
    /// them (REQBUFS DMABUF): how capture buffers land in a dma32 or CMA heap.
    Dmabuf,
}

impl crate::core::config::Choice for CaptureIo {
    const ALL: &'static [(Self, &'static str, &'static str)] = &[
        (CaptureIo::Mmap, "mmap", "The driver allocates (REQBUFS MMAP); each plane is exported with VIDIOC_EXPBUF"),
        (
            CaptureIo::Dmabuf,
            "dmabuf",
            "zcpipe allocates from the dma-buf heap or udmabuf (`--heap`) and the driver imports them (REQBUFS DMABUF): how capture buffers land in a dma32 or CMA heap",
        ),
    ];
}

/// Formats zcpipe reads from a camera, in the order it prefers them when `--format` is not
/// given (NV12 first: the scalers and NPUs take it as is).
pub const PREFERRED: [Fourcc; 6] = [Fourcc::NV12, Fourcc::NV12M, Fourcc::NV16, Fourcc::YUYV, Fourcc::RGB24, Fourcc::BGR24];

fn format_list(v: &[Fourcc]) -> String {
    if v.is_empty() {
        return "none".into();
    }
    v.iter().map(|f| format_name(*f)).collect::<Vec<_>>().join(", ")
}

/// What a driver offers, for messages: all of it if short, else the first 12 and a count
/// (vivid offers about 70).
fn offered_list(v: &[Fourcc]) -> String {
    const SHOW: usize = 12;
    if v.len() <= SHOW {
        return format_list(v);
    }
    format!("{}, ... ({} formats)", format_list(&v[..SHOW]), v.len())
}

/// What to open and ask for.
#[derive(Clone, Debug, Default)]
pub struct V4l2Config {
    /// The node (`/dev/video0`); `None`: the first capture node ([`first_capture_node`]).
    pub device: Option<PathBuf>,
    /// Pixel format; `None`: the first of [`PREFERRED`] the driver offers.
    pub format: Option<Fourcc>,
    /// Frame size in pixels; `None`: the driver's current size.
    pub size: Option<(u32, u32)>,
    /// Frame rate to ask for with VIDIOC_S_PARM; `None`: the driver's current rate.
    pub fps: Option<f64>,
    /// Buffers to request (the driver may grant more or fewer).
    pub buffers: usize,
    /// I/O mode.
    pub io: CaptureIo,
}

/// Parses `--size WxH`.
pub fn parse_size(s: &str) -> Result<(u32, u32)> {
    let bad = || anyhow!("--size \"{s}\" is not WxH (e.g. 1280x720)");
    let (w, h) = s.split_once(['x', 'X']).ok_or_else(bad)?;
    let (w, h): (u32, u32) = (w.trim().parse().map_err(|_| bad())?, h.trim().parse().map_err(|_| bad())?);
    if w == 0 || h == 0 || w > 16384 || h > 16384 {
        bail!("--size {s}: width and height must be 1..=16384");
    }
    Ok((w, h))
}

/// Parses `--format NAME` (one of [`PREFERRED`]).
pub fn parse_format(s: &str) -> Result<Fourcc> {
    Fourcc::parse(s)
        .filter(|f| PREFERRED.contains(f))
        .ok_or_else(|| anyhow!("--format \"{s}\" is not one zcpipe reads; use one of {}", format_list(&PREFERRED)))
}

/// "capture nodes here: /dev/video0 (vivid: ...), ...; `zcpipe doctor` lists every node".
fn other_nodes_hint(except: &Path) -> String {
    let v: Vec<String> = capture_nodes().iter().filter(|n| n.path != except).map(|n| n.label()).collect();
    if v.is_empty() {
        "no capture node found here (`zcpipe doctor` lists every node)".into()
    } else {
        format!("capture nodes here: {} (`zcpipe doctor` lists every node)", v.join(", "))
    }
}

// ---------------------------------------------------------------------------------------------
// The capture device
// ---------------------------------------------------------------------------------------------

/// What the driver granted: format, per-plane geometry, frame interval.
#[derive(Clone, Debug, PartialEq)]
pub struct Granted {
    /// Pixel format.
    pub fourcc: Fourcc,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Per V4L2 plane (one buffer each): `(bytesperline, sizeimage)`. One entry unless the
    /// format has a buffer per plane (NV12M).
    pub planes: Vec<(u32, u32)>,
    /// Frame interval in seconds; `0/0` if the driver does not say.
    pub interval: sys::Fract,
}

impl Granted {
    /// Frames per second from the interval (0 if unknown).
    pub fn fps(&self) -> f64 {
        if self.interval.numerator == 0 || self.interval.denominator == 0 {
            0.0
        } else {
            self.interval.denominator as f64 / self.interval.numerator as f64
        }
    }

    /// The frame layout, from bytesperline and sizeimage: single-buffer NV12/NV16 put the
    /// CbCr plane at `bytesperline * height` in the same buffer; NV12M has one buffer per
    /// plane. Errors if sizeimage is too small for what bytesperline implies.
    pub fn layout(&self) -> Result<FrameLayout> {
        let (w, h) = (self.width, self.height);
        let mut planes = [PlaneDesc::default(); MAX_PLANES];
        let num_planes = match self.fourcc {
            Fourcc::NV12 | Fourcc::NV16 => {
                let (bpl, size) = self.planes[0];
                let y_len = bpl as u64 * h as u64;
                let uv_rows = if self.fourcc == Fourcc::NV12 { h.div_ceil(2) } else { h };
                let uv_len = bpl as u64 * uv_rows as u64;
                if y_len + uv_len > size as u64 {
                    bail!("{} {w}x{h}: sizeimage {size} < bytesperline {bpl} x {} rows", self.fourcc, h + uv_rows);
                }
                planes[0] = PlaneDesc { offset: 0, bytesperline: bpl, length: y_len as u32, fd_index: 0 };
                planes[1] = PlaneDesc { offset: y_len as u32, bytesperline: bpl, length: size - y_len as u32, fd_index: 0 };
                2
            }
            Fourcc::NV12M => {
                if self.planes.len() != 2 {
                    bail!("NV12M with {} planes (expected 2)", self.planes.len());
                }
                for (i, &(bpl, size)) in self.planes.iter().enumerate() {
                    planes[i] = PlaneDesc { offset: 0, bytesperline: bpl, length: size, fd_index: i as u32 };
                }
                2
            }
            Fourcc::YUYV | Fourcc::RGB24 | Fourcc::BGR24 => {
                let (bpl, size) = self.planes[0];
                planes[0] = PlaneDesc { offset: 0, bytesperline: bpl, length: size, fd_index: 0 };
                1
            }
            f => bail!("format {} is not one zcpipe reads", format_name(f)),
        };
        let layout = FrameLayout { fourcc: self.fourcc, width: w, height: h, num_planes, planes };
        let sizes: Vec<u64> = self.planes.iter().map(|p| p.1 as u64).collect();
        layout.validate(&sizes).map_err(|e| anyhow!("the granted format does not add up: {e}"))?;
        Ok(layout)
    }

    /// `NV12 640x480, bytesperline 640, sizeimage 460800, 30.00 fps (1/30)`.
    pub fn describe(&self) -> String {
        let bpl: Vec<String> = self.planes.iter().map(|p| p.0.to_string()).collect();
        let size: Vec<String> = self.planes.iter().map(|p| p.1.to_string()).collect();
        let fps = if self.fps() > 0.0 {
            format!("{:.2} fps ({}/{} s)", self.fps(), self.interval.numerator, self.interval.denominator)
        } else {
            "fps unknown".into()
        };
        format!(
            "{} {}x{}, bytesperline {}, sizeimage {}, {fps}",
            format_name(self.fourcc),
            self.width,
            self.height,
            bpl.join("+"),
            size.join("+")
        )
    }
}

/// Counts of what the driver handed back.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct V4l2Stats {
    /// Buffers dequeued (good and flagged).
    pub dequeued: u64,
    /// Frames published downstream.
    pub published: u64,
    /// Frames the driver skipped (gaps in its sequence numbers).
    pub driver_drops: u64,
    /// Buffers the driver flagged `V4L2_BUF_FLAG_ERROR` (requeued, not published).
    pub error_frames: u64,
    /// Buffers queued with QBUF.
    pub queued: u64,
    /// Frames whose timestamp went backwards or was not CLOCK_MONOTONIC.
    pub bad_timestamps: u64,
    /// Frames the driver stamped later than their dequeue (clamped to the dequeue time).
    pub timestamps_ahead: u64,
    /// The most a stamp was ahead of its dequeue, µs.
    pub max_ahead_us: u64,
    /// Buffers whose sequence number repeated or went back (given the next frame number).
    pub sequence_repeats: u64,
    /// Dequeues that left the driver without a queued buffer: a frame arriving before the
    /// next QBUF would be lost for want of a buffer (zcpipe's fault, not the driver's).
    pub driver_starved: u64,
    /// Sequence number of the first buffer dequeued.
    pub first_sequence: Option<u32>,
    /// Sequence number of the last buffer dequeued.
    pub last_sequence: Option<u32>,
}

/// Follows a driver's u32 sequence numbers: gaps are frames the driver dropped.
#[derive(Clone, Copy, Debug, Default)]
pub struct SequenceCounter {
    /// First sequence number seen.
    pub first: Option<u32>,
    /// Last sequence number seen.
    pub last: Option<u32>,
    /// Numbers skipped between consecutive buffers.
    pub drops: u64,
    /// Buffers whose number did not move forward.
    pub repeats: u64,
    ext: u64,
}

impl SequenceCounter {
    /// Records the sequence number of the next buffer; returns a frame number that always
    /// increases: the sequence extended to 64 bits (wraps counted), or, when the driver
    /// repeats a number or goes back, one more than the last (counted in `repeats`).
    pub fn see(&mut self, seq: u32) -> u64 {
        match self.last {
            None => {
                self.first = Some(seq);
                self.ext = seq as u64;
            }
            Some(last) => {
                let step = seq.wrapping_sub(last);
                if step == 0 || step > u32::MAX / 2 {
                    self.repeats += 1;
                    self.ext += 1;
                } else {
                    self.drops += (step - 1) as u64;
                    self.ext += step as u64;
                }
            }
        }
        self.last = Some(seq);
        self.ext
    }
}

/// One buffer back from the driver.
#[derive(Clone, Copy, Debug)]
pub struct Dequeued {
    /// Buffer index.
    pub index: u32,
    /// Driver's sequence number.
    pub sequence: u32,
    /// Capture time, CLOCK_MONOTONIC ns (when the driver says its clock is monotonic).
    pub timestamp_ns: u64,
    /// Whether the timestamp is CLOCK_MONOTONIC.
    pub monotonic: bool,
    /// Bytes of data per plane.
    pub bytesused: [u32; MAX_PLANES],
    /// `V4L2_BUF_FLAG_ERROR`.
    pub error: bool,
}

/// What one turn of the capture loop found.
// One per frame, on the stack: boxing the large variant would allocate per frame.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Next {
    /// A frame was published: its descriptor, and the buffer as the driver returned it
    /// (its own timestamp and sequence number).
    Frame(FrameDesc, Dequeued),
    /// Nothing yet (timeout, a flagged buffer requeued, or every buffer downstream).
    Idle,
    /// The device is gone (ENODEV): end the stream.
    Unplugged,
}

/// The device reported ENODEV.
#[derive(Debug)]
pub struct Unplugged;
impl std::fmt::Display for Unplugged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "camera unplugged (ENODEV)")
    }
}
impl std::error::Error for Unplugged {}

fn is_enodev(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENODEV)
}

/// An open V4L2 capture node with its negotiated format.
pub struct V4l2Capture {
    file: File,
    node: NodeInfo,
    buf_type: u32,
    io: CaptureIo,
    memory: u32,
    granted: Granted,
    layout: FrameLayout,
    /// Buffers allocated by REQBUFS (0 until [`V4l2Capture::allocate`]).
    count: u32,
    /// The loans of the buffers the driver holds (queued, not yet dequeued), by index.
    at_driver: Vec<Option<DeviceLoan>>,
    /// Loans of buffers whose QBUF failed: never with the driver, given back at STREAMOFF.
    not_queued: Vec<DeviceLoan>,
    streaming: bool,
    min_device: usize,
    stats: V4l2Stats,
    last_ts: u64,
    sequence: SequenceCounter,
    warned_clock: bool,
}

impl std::fmt::Debug for V4l2Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("V4l2Capture").field("node", &self.node.label()).field("granted", &self.granted).finish()
    }
}

impl V4l2Capture {
    /// Opens the node `cfg` names (or the first capture node), checks that it captures and
    /// streams, and negotiates format, size and frame rate. Errors are one line naming the
    /// node and the fix: missing node, not a capture node, unsupported format, busy device.
    pub fn open(cfg: &V4l2Config) -> Result<V4l2Capture> {
        let path = match &cfg.device {
            Some(p) => p.clone(),
            None => first_capture_node().map(|n| n.path).ok_or_else(|| {
                anyhow!(
                    "v4l2: no V4L2 capture node found in /dev/video*; connect a camera, load its driver, \
                     or use another --source (`zcpipe doctor` lists the nodes)"
                )
            })?,
        };
        let file = open_node(&path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => anyhow!("v4l2: {} does not exist; {}", path.display(), other_nodes_hint(&path)),
            io::ErrorKind::PermissionDenied => anyhow!(
                "v4l2: cannot open {}: permission denied; add yourself to the video group (or install udev/99-zcpipe.rules), or run as root",
                path.display()
            ),
            _ => anyhow!("v4l2: cannot open {}: {e}", path.display()),
        })?;
        let node = query_node(file.as_fd(), &path).map_err(|e| {
            if e.raw_os_error() == Some(libc::ENOTTY) {
                anyhow!("v4l2: {} is not a V4L2 device (VIDIOC_QUERYCAP: {e}); {}", path.display(), other_nodes_hint(&path))
            } else {
                anyhow!("v4l2: VIDIOC_QUERYCAP on {}: {e}", path.display())
            }
        })?;
        let Some(buf_type) = node.cap.capture_buf_type().filter(|_| !node.cap.is_m2m()) else {
            let what = if node.cap.is_m2m() {
                "a memory-to-memory device (scaler/codec), not a camera"
            } else {
                "not a video capture node"
            };
            bail!("v4l2: {} cannot capture: it is {what} (caps {}); {}", node.label(), caps_names(node.caps), other_nodes_hint(&path));
        };
        if !node.cap.has_streaming() {
            bail!(
                "v4l2: {} cannot stream: its caps are {} and zcpipe needs STREAMING (buffers shared as dma-bufs); {}",
                node.label(),
                caps_names(node.caps),
                other_nodes_hint(&path)
            );
        }
        let memory = match cfg.io {
            CaptureIo::Mmap => sys::V4L2_MEMORY_MMAP,
            CaptureIo::Dmabuf => sys::V4L2_MEMORY_DMABUF,
        };
        let mut cam = V4l2Capture {
            file,
            node,
            buf_type,
            io: cfg.io,
            memory,
            granted: Granted { fourcc: Fourcc::default(), width: 0, height: 0, planes: vec![], interval: sys::Fract::default() },
            layout: FrameLayout::default(),
            count: 0,
            at_driver: vec![],
            not_queued: vec![],
            streaming: false,
            min_device: 1,
            stats: V4l2Stats::default(),
            last_ts: 0,
            sequence: SequenceCounter::default(),
            warned_clock: false,
        };
        cam.negotiate(cfg)?;
        Ok(cam)
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    fn mplane(&self) -> bool {
        sys::is_multiplanar(self.buf_type)
    }

    /// The formats the driver offers on this queue (VIDIOC_ENUM_FMT).
    pub fn offered_formats(&self) -> Vec<Fourcc> {
        let mut v = vec![];
        for index in 0..1024 {
            let mut d = sys::FmtDesc { index, type_: self.buf_type, ..Default::default() };
            if sys::enum_fmt(self.fd(), &mut d).is_err() {
                break;
            }
            v.push(d.fourcc());
        }
        v
    }

    fn busy_error(&self, what: &str) -> anyhow::Error {
        anyhow!(
            "v4l2: {} is in use by another process ({what}: EBUSY); stop the other user (`fuser {}` names it) or pick another node",
            self.node.label(),
            self.node.path.display()
        )
    }

    fn negotiate(&mut self, cfg: &V4l2Config) -> Result<()> {
        let offered = self.offered_formats();
        let readable: Vec<Fourcc> = PREFERRED.iter().copied().filter(|f| offered.contains(f)).collect();
        let fourcc = match cfg.format {
            Some(f) if offered.contains(&f) => f,
            Some(f) => bail!(
                "v4l2: {} does not offer {}; it offers {}, of which zcpipe reads {}: pass one of those with --format",
                self.node.label(),
                format_name(f),
                offered_list(&offered),
                format_list(&readable)
            ),
            None => *readable.first().ok_or_else(|| {
                anyhow!(
                    "v4l2: {} offers {}, none of which zcpipe reads ({})",
                    self.node.label(),
                    offered_list(&offered),
                    format_list(&PREFERRED)
                )
            })?,
        };
        let mut cur = sys::Format::new(self.buf_type);
        sys::g_fmt(self.fd(), &mut cur).with_context(|| format!("v4l2: VIDIOC_G_FMT on {}", self.node.label()))?;
        let (cw, ch) = if self.mplane() {
            let p = cur.pix_mp();
            (p.width, p.height)
        } else {
            (cur.pix().width, cur.pix().height)
        };
        let (w, h) = cfg.size.unwrap_or((cw, ch));
        let mut f = sys::Format::new(self.buf_type);
        if self.mplane() {
            let p = f.pix_mp_mut();
            p.width = w;
            p.height = h;
            p.set_fourcc(fourcc);
            p.field = sys::V4L2_FIELD_NONE;
        } else {
            let p = f.pix_mut();
            p.width = w;
            p.height = h;
            p.set_fourcc(fourcc);
            p.field = sys::V4L2_FIELD_NONE;
        }
        if let Err(e) = sys::s_fmt(self.fd(), &mut f) {
            if e.raw_os_error() == Some(libc::EBUSY) {
                return Err(self.busy_error("VIDIOC_S_FMT"));
            }
            bail!("v4l2: VIDIOC_S_FMT {} {w}x{h} on {}: {e}", format_name(fourcc), self.node.label());
        }
        let (gw, gh, gf, planes, field) = if self.mplane() {
            let p = *f.pix_mp();
            let n = (p.num_planes as usize).clamp(1, sys::VIDEO_MAX_PLANES);
            let planes: Vec<(u32, u32)> = p.plane_fmt[..n].iter().map(|pf| (pf.bytesperline, pf.sizeimage)).collect();
            (p.width, p.height, p.fourcc(), planes, p.field)
        } else {
            let p = *f.pix();
            (p.width, p.height, p.fourcc(), vec![(p.bytesperline, p.sizeimage)], p.field)
        };
        if gf != fourcc {
            bail!(
                "v4l2: {} was asked for {} but set {}; it offers {}, of which zcpipe reads {}: pass one of those with --format",
                self.node.label(),
                format_name(fourcc),
                format_name(gf),
                offered_list(&offered),
                format_list(&readable)
            );
        }
        if field != sys::V4L2_FIELD_NONE && field != sys::V4L2_FIELD_ANY {
            log::warn!("v4l2: {} delivers interlaced frames (field {field}); zcpipe treats them as progressive", self.node.label());
        }
        if let Some((rw, rh)) = cfg.size {
            if (rw, rh) != (gw, gh) {
                log::warn!("v4l2: asked {} for {rw}x{rh}, it granted {gw}x{gh}", self.node.label());
            }
        }
        self.granted = Granted { fourcc: gf, width: gw, height: gh, planes, interval: sys::Fract::default() };
        self.set_rate(cfg.fps)?;
        self.layout = self.granted.layout().with_context(|| format!("v4l2: {}", self.node.label()))?;
        log::info!("v4l2: {} granted {}", self.node.label(), self.granted.describe());
        Ok(())
    }

    fn set_rate(&mut self, fps: Option<f64>) -> Result<()> {
        let mut parm = sys::StreamParm::new(self.buf_type);
        if let Some(fps) = fps {
            if !(fps.is_finite() && fps > 0.0 && fps <= 1000.0) {
                bail!("--fps {fps}: use a frame rate in (0, 1000]");
            }
            // 1/fps as a fraction: 30 -> 1/30, 29.97 -> 1000/29970.
            let tpf = if (fps - fps.round()).abs() < 1e-6 {
                sys::Fract { numerator: 1, denominator: fps.round() as u32 }
            } else {
                sys::Fract { numerator: 1000, denominator: (fps * 1000.0).round() as u32 }
            };
            parm.capture_mut().timeperframe = tpf;
            match sys::s_parm(self.fd(), &mut parm) {
                Ok(()) => {
                    if parm.capture().capability & sys::V4L2_CAP_TIMEPERFRAME == 0 {
                        log::warn!("v4l2: {} cannot set its frame rate (no V4L2_CAP_TIMEPERFRAME); --fps {fps} ignored", self.node.label());
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => return Err(self.busy_error("VIDIOC_S_PARM")),
                Err(e) => log::warn!("v4l2: VIDIOC_S_PARM on {}: {e}; --fps {fps} ignored", self.node.label()),
            }
        }
        let mut parm = sys::StreamParm::new(self.buf_type);
        if sys::g_parm(self.fd(), &mut parm).is_ok() {
            self.granted.interval = parm.capture().timeperframe;
        }
        if let Some(want) = fps {
            let got = self.granted.fps();
            if got > 0.0 && (got - want).abs() / want > 0.01 {
                log::warn!("v4l2: asked {} for {want} fps, it granted {got:.2} fps", self.node.label());
            }
        }
        Ok(())
    }

    /// The node.
    pub fn node(&self) -> &NodeInfo {
        &self.node
    }

    /// What the driver granted.
    pub fn granted(&self) -> &Granted {
        &self.granted
    }

    /// The layout of every frame (from bytesperline and sizeimage).
    pub fn layout(&self) -> FrameLayout {
        self.layout
    }

    /// The I/O mode.
    pub fn io(&self) -> CaptureIo {
        self.io
    }

    /// Counters so far.
    pub fn stats(&self) -> V4l2Stats {
        self.stats
    }

    /// Buffers the driver holds now.
    pub fn at_driver(&self) -> usize {
        self.at_driver.iter().filter(|q| q.is_some()).count()
    }

    /// `v4l2:/dev/video0 (vivid: vivid-000-vid-cap) NV12 640x480 ... mmap`.
    pub fn describe(&self) -> String {
        format!("v4l2:{} {}, {} I/O", self.node.label(), self.granted.describe(), self.io.name())
    }

    /// Makes the pool: REQBUFS for `buffers`, then for `mmap` VIDIOC_EXPBUF of each plane
    /// (read-write) or for `dmabuf` one buffer per plane of `sizeimage` bytes from `alloc`.
    /// Returns `pool[buffer][plane]`, as [`PoolProducer::offer`] takes it.
    pub fn allocate(&mut self, buffers: usize, alloc: Option<&Allocator>) -> Result<Vec<Vec<DmaBuf>>> {
        if self.io == CaptureIo::Dmabuf {
            match alloc {
                None => bail!("--capture-io dmabuf needs an allocator"),
                Some(Allocator::Memfd) => bail!(
                    "--capture-io dmabuf: the allocator is memfd, which a V4L2 driver cannot import; use --heap system|dma32|cma|udmabuf (where present) or --capture-io mmap"
                ),
                Some(_) => {}
            }
        }
        let mut rb = sys::RequestBuffers { count: buffers as u32, type_: self.buf_type, memory: self.memory, ..Default::default() };
        if let Err(e) = sys::reqbufs(self.fd(), &mut rb) {
            if e.raw_os_error() == Some(libc::EBUSY) {
                return Err(self.busy_error("VIDIOC_REQBUFS"));
            }
            if e.raw_os_error() == Some(libc::EINVAL) {
                let other = if self.io == CaptureIo::Mmap { "dmabuf" } else { "mmap" };
                bail!("v4l2: {} refuses {} buffers (VIDIOC_REQBUFS: {e}); try --capture-io {other}", self.node.label(), self.io.name());
            }
            bail!("v4l2: VIDIOC_REQBUFS {} x{buffers} on {}: {e}", self.io.name(), self.node.label());
        }
        if rb.count < 2 {
            bail!("v4l2: {} granted {} buffers; zcpipe needs at least 2", self.node.label(), rb.count);
        }
        if rb.count as usize > 64 {
            bail!("v4l2: {} insists on {} buffers; zcpipe pools hold at most 64", self.node.label(), rb.count);
        }
        if rb.count as usize != buffers {
            log::info!("v4l2: asked {} for {buffers} buffers, it granted {}", self.node.label(), rb.count);
        }
        self.count = rb.count;
        self.at_driver = (0..rb.count).map(|_| None).collect();
        self.min_device = (rb.count as usize / 2).max(1);
        let nplanes = self.granted.planes.len();
        let mut pool = Vec::with_capacity(rb.count as usize);
        for index in 0..rb.count {
            let mut bufs = Vec::with_capacity(nplanes);
            match self.io {
                CaptureIo::Mmap => {
                    let mut b = sys::Buffer::new(self.buf_type, self.memory, index);
                    let mut planes = vec![sys::Plane::default(); nplanes];
                    sys::querybuf(self.fd(), &mut b, &mut planes)
                        .with_context(|| format!("v4l2: VIDIOC_QUERYBUF {index} on {}", self.node.label()))?;
                    let lengths: Vec<u32> = if self.mplane() { planes.iter().map(|p| p.length).collect() } else { vec![b.length] };
                    for (plane, len) in lengths.into_iter().enumerate() {
                        let mut x = sys::ExportBuffer {
                            type_: self.buf_type,
                            index,
                            plane: plane as u32,
                            flags: libc::O_RDWR as u32,
                            ..Default::default()
                        };
                        let fd = sys::expbuf(self.fd(), &mut x).map_err(|e| {
                            anyhow!(
                                "v4l2: VIDIOC_EXPBUF buffer {index} plane {plane} on {}: {e} \
                                 (the driver cannot export dma-bufs; try --capture-io dmabuf)",
                                self.node.label()
                            )
                        })?;
                        bufs.push(DmaBuf::new(fd, len as u64, MemoryKind::DmaBuf));
                    }
                }
                CaptureIo::Dmabuf => {
                    let alloc = alloc.expect("checked above");
                    for (plane, &(_, size)) in self.granted.planes.iter().enumerate() {
                        bufs.push(alloc.allocate(size as u64).with_context(|| format!("capture buffer {index} plane {plane}"))?);
                    }
                }
            }
            let sizes: Vec<u64> = bufs.iter().map(|b| b.size()).collect();
            self.layout
                .validate(&sizes)
                .map_err(|e| anyhow!("v4l2: buffer {index} of {} does not hold a frame: {e}", self.node.label()))?;
            pool.push(bufs);
        }
        Ok(pool)
    }

    /// Hands the buffer of `loan` (its dma-bufs `bufs`) to the driver (VIDIOC_QBUF); the
    /// driver's queue holds the loan until DQBUF or STREAMOFF.
    pub fn queue(&mut self, loan: DeviceLoan, bufs: &[DmaBuf]) -> Result<()> {
        let index = loan.index();
        let mut b = sys::Buffer::new(self.buf_type, self.memory, index);
        let mut planes = vec![sys::Plane::default(); self.granted.planes.len()];
        if self.memory == sys::V4L2_MEMORY_DMABUF {
            if self.mplane() {
                for (p, d) in planes.iter_mut().zip(bufs) {
                    p.set_fd(d.fd());
                    p.length = d.size() as u32;
                }
            } else {
                b.set_fd(bufs[0].fd());
                b.length = bufs[0].size() as u32;
            }
        }
        let slot = self.at_driver.get_mut(index as usize).filter(|s| s.is_none());
        let Some(slot) = slot else {
            self.not_queued.push(loan);
            bail!("v4l2: buffer {index} is not one of the {} buffers of {}, or is queued already", self.count, self.node.label());
        };
        match sys::qbuf(self.file.as_fd(), &mut b, &mut planes) {
            Ok(()) => {
                *slot = Some(loan);
                self.stats.queued += 1;
                Ok(())
            }
            Err(e) => {
                self.not_queued.push(loan);
                if is_enodev(&e) {
                    Err(Unplugged.into())
                } else {
                    Err(anyhow!("v4l2: VIDIOC_QBUF {index} on {}: {e}", self.node.label()))
                }
            }
        }
    }

    /// Queues every buffer no one downstream holds ([`PoolProducer::lend_free_to_device`]).
    pub fn refill(&mut self, prod: &mut PoolProducer) -> Result<()> {
        for loan in prod.lend_free_to_device(self.min_device)? {
            let bufs = prod.buffer_for_import(loan.index());
            self.queue(loan, bufs)?;
        }
        Ok(())
    }

    /// Queues every free buffer and starts streaming (VIDIOC_STREAMON).
    pub fn start(&mut self, prod: &mut PoolProducer) -> Result<()> {
        self.refill(prod)?;
        sys::streamon(self.fd(), self.buf_type).map_err(|e| {
            if e.raw_os_error() == Some(libc::EBUSY) {
                self.busy_error("VIDIOC_STREAMON")
            } else {
                anyhow!("v4l2: VIDIOC_STREAMON on {}: {e}", self.node.label())
            }
        })?;
        self.streaming = true;
        log::info!("v4l2: streaming from {} ({} buffers queued)", self.node.label(), self.at_driver());
        Ok(())
    }

    /// Waits up to `timeout` for a filled buffer (`poll()` POLLIN). `Ok(true)`: try DQBUF.
    pub fn wait(&self, timeout: Duration) -> Result<bool> {
        let ms = timeout.as_millis().min(u16::MAX as u128) as u16;
        let mut p = [PollFd::new(self.fd(), PollFlags::POLLIN)];
        match poll(&mut p, PollTimeout::from(ms)) {
            Ok(0) => Ok(false),
            // POLLERR/POLLHUP: DQBUF says why (ENODEV when unplugged).
            Ok(_) => Ok(true),
            Err(nix::errno::Errno::EINTR) => Ok(false),
            Err(e) => Err(anyhow!("v4l2: poll on {}: {e}", self.node.label())),
        }
    }

    /// Takes one filled buffer back (VIDIOC_DQBUF, non-blocking) with the loan it was
    /// queued with: `Ok(None)` if none is ready; the error [`Unplugged`] on ENODEV.
    pub fn dequeue(&mut self) -> Result<Option<(DeviceLoan, Dequeued)>> {
        let mut b = sys::Buffer::new(self.buf_type, self.memory, 0);
        let mut planes = vec![sys::Plane::default(); self.granted.planes.len()];
        match sys::dqbuf(self.fd(), &mut b, &mut planes) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) if is_enodev(&e) => return Err(Unplugged.into()),
            Err(e) => bail!("v4l2: VIDIOC_DQBUF on {}: {e}", self.node.label()),
        }
        let Some(loan) = self.at_driver.get_mut(b.index as usize).and_then(Option::take) else {
            bail!("v4l2: {} returned buffer {} of {}, which it did not hold", self.node.label(), b.index, self.count);
        };
        self.stats.dequeued += 1;
        let mut bytesused = [0u32; MAX_PLANES];
        if self.mplane() {
            for (u, p) in bytesused.iter_mut().zip(&planes) {
                *u = p.bytesused;
            }
        } else {
            bytesused[0] = b.bytesused;
        }
        Ok(Some((
            loan,
            Dequeued {
            index: b.index,
            sequence: b.sequence,
            timestamp_ns: b.timestamp_ns().max(0) as u64,
            monotonic: b.timestamp_is_monotonic(),
            bytesused,
            error: b.is_error(),
        })))
    }

    /// One turn of the capture loop: queue what came back, wait up to `timeout` for a
    /// frame, dequeue it and publish it into `prod`. A flagged (`V4L2_BUF_FLAG_ERROR`)
    /// buffer is requeued and counted instead.
    pub fn next_frame(&mut self, prod: &mut PoolProducer, stop: &AtomicBool, timeout: Duration) -> Result<Next> {
        match self.refill(prod) {
            Ok(()) => {}
            Err(e) if e.is::<Unplugged>() => return Ok(Next::Unplugged),
            Err(e) => return Err(e),
        }
        if self.at_driver() == 0 {
            // Every buffer is downstream (block policy, or a consumer holding them all):
            // nothing to poll for until one comes back.
            std::thread::sleep(Duration::from_millis(2));
            return Ok(Next::Idle);
        }
        if !self.wait(timeout)? {
            return Ok(Next::Idle);
        }
        let (loan, d) = match self.dequeue() {
            Ok(Some(x)) => x,
            Ok(None) => return Ok(Next::Idle),
            Err(e) if e.is::<Unplugged>() => return Ok(Next::Unplugged),
            Err(e) => return Err(e),
        };
        let loan = prod.claim(loan)?;
        let seq = self.sequence.see(d.sequence);
        self.stats.driver_drops = self.sequence.drops;
        self.stats.sequence_repeats = self.sequence.repeats;
        if self.at_driver() == 0 {
            self.stats.driver_starved += 1;
        }
        self.stats.first_sequence = self.sequence.first;
        self.stats.last_sequence = self.sequence.last;
        if d.error {
            self.stats.error_frames += 1;
            if self.stats.error_frames <= 5 {
                log::warn!("v4l2: {} flagged frame {} as corrupt (V4L2_BUF_FLAG_ERROR); requeued", self.node.label(), d.sequence);
            }
            drop(loan); // back to the pool unpublished: requeued by the next refill
            return Ok(Next::Idle);
        }
        // The driver's timestamp, CLOCK_MONOTONIC. Some drivers stamp a frame's nominal end
        // and deliver it earlier (vivid: up to a frame period ahead of the DQBUF); such a
        // stamp is clamped to the dequeue time, so stage latencies never come out negative.
        let now = monotonic_ns();
        let mut ts = d.timestamp_ns;
        if !d.monotonic || ts == 0 {
            self.stats.bad_timestamps += 1;
            if !self.warned_clock {
                self.warned_clock = true;
                log::warn!("v4l2: {} does not stamp buffers with CLOCK_MONOTONIC; using the dequeue time", self.node.label());
            }
            ts = now;
        } else if ts > now {
            self.stats.timestamps_ahead += 1;
            self.stats.max_ahead_us = self.stats.max_ahead_us.max((ts - now) / 1000);
            if self.stats.timestamps_ahead == 1 {
                log::info!(
                    "v4l2: {} stamps frames ahead of their delivery ({} µs for frame {}); such stamps are clamped to the dequeue time",
                    self.node.label(),
                    (ts - now) / 1000,
                    d.sequence
                );
            }
            ts = now;
        }
        if ts < self.last_ts {
            self.stats.bad_timestamps += 1;
            log::warn!("v4l2: timestamp of frame {} went backwards by {} µs", d.sequence, (self.last_ts - ts) / 1000);
        }
        self.last_ts = ts;
        let mut desc = FrameDesc { seq, timestamp_ns: ts, buffer_index: d.index, layout: self.layout, ..Default::default() };
        desc.stamps[2 * Stage::Capture as usize] = ts;
        desc.stamp_out(Stage::Capture);
        loan.publish(desc, stop)?;
        self.stats.published += 1;
        Ok(Next::Frame(desc, d))
    }

    /// Stops streaming (VIDIOC_STREAMOFF), which returns every buffer the driver held, and
    /// marks them free in `prod`. Returns how many the driver held. ENODEV (unplugged) is
    /// not an error here: the buffers are ours again either way.
    pub fn stream_off(&mut self, prod: &mut PoolProducer) -> Result<usize> {
        let held = self.at_driver();
        if self.streaming {
            self.streaming = false;
            match sys::streamoff(self.fd(), self.buf_type) {
                Ok(()) => {}
                Err(e) if is_enodev(&e) => {}
                Err(e) => log::warn!("v4l2: VIDIOC_STREAMOFF on {}: {e}", self.node.label()),
            }
        }
        prod.device_returned(self.at_driver.iter_mut().filter_map(Option::take).chain(self.not_queued.drain(..)));
        Ok(held)
    }
}

impl Drop for V4l2Capture {
    fn drop(&mut self) {
        if self.streaming {
            let _ = sys::streamoff(self.file.as_fd(), self.buf_type);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn granted(fourcc: Fourcc, w: u32, h: u32, planes: Vec<(u32, u32)>) -> Granted {
        Granted { fourcc, width: w, height: h, planes, interval: sys::Fract { numerator: 1, denominator: 30 } }
    }

    #[test]
    fn nv12_single_buffer_layout_comes_from_bytesperline() {
        // A driver padding rows to 704 bytes and the buffer to 1088 lines' worth.
        let l = granted(Fourcc::NV12, 640, 480, vec![(704, 704 * 1088 * 3 / 2)]).layout().unwrap();
        assert_eq!(l.num_planes, 2);
        assert_eq!(l.planes[0], PlaneDesc { offset: 0, bytesperline: 704, length: 704 * 480, fd_index: 0 });
        assert_eq!(l.planes[1].offset, 704 * 480);
        assert_eq!(l.planes[1].bytesperline, 704);
        assert_eq!(l.planes[1].fd_index, 0);
        assert_eq!(l.planes[1].offset + l.planes[1].length, 704 * 1088 * 3 / 2);
        assert!(granted(Fourcc::NV12, 640, 480, vec![(640, 640 * 480)]).layout().is_err(), "sizeimage too small");
    }

    #[test]
    fn nv12m_has_a_buffer_per_plane_and_packed_formats_one() {
        let l = granted(Fourcc::NV12M, 1280, 720, vec![(1280, 1280 * 720), (1280, 1280 * 360)]).layout().unwrap();
        assert_eq!((l.planes[0].fd_index, l.planes[1].fd_index), (0, 1));
        assert_eq!((l.planes[0].offset, l.planes[1].offset), (0, 0));
        assert_eq!(l.planes[1].length, 1280 * 360);
        let y = granted(Fourcc::YUYV, 640, 480, vec![(1280, 1280 * 480)]).layout().unwrap();
        assert_eq!((y.num_planes, y.planes[0].bytesperline, y.planes[0].length), (1, 1280, 1280 * 480));
        let n16 = granted(Fourcc::NV16, 64, 48, vec![(64, 64 * 48 * 2)]).layout().unwrap();
        assert_eq!((n16.planes[1].offset, n16.planes[1].length), (64 * 48, 64 * 48));
        assert!(granted(Fourcc::RGB24, 64, 48, vec![(100, 100 * 48)]).layout().is_err(), "bytesperline < 3 x width");
    }

    #[test]
    fn granted_describes_what_the_driver_set() {
        let g = granted(Fourcc::NV12M, 640, 480, vec![(640, 307200), (640, 153600)]);
        assert_eq!(g.describe(), "NV12M 640x480, bytesperline 640+640, sizeimage 307200+153600, 30.00 fps (1/30 s)");
        assert_eq!(g.fps(), 30.0);
    }

    #[test]
    fn format_and_size_flags_parse() {
        assert_eq!(parse_format("nv12m").unwrap(), Fourcc::NV12M);
        assert_eq!(parse_format("RGB24").unwrap(), Fourcc::RGB24);
        let e = parse_format("MJPG").unwrap_err().to_string();
        assert!(e.contains("NV12, NV12M, NV16, YUYV, RGB24, BGR24"), "{e}");
        assert_eq!(parse_size("1280x720").unwrap(), (1280, 720));
        assert!(parse_size("1280").is_err() && parse_size("0x5").is_err() && parse_size("ax5").is_err());
    }

    #[test]
    fn sequence_gaps_are_driver_drops() {
        let mut c = SequenceCounter::default();
        let ext: Vec<u64> = [5, 6, 7, 10, 11].into_iter().map(|q| c.see(q)).collect();
        assert_eq!(ext, [5, 6, 7, 10, 11]);
        assert_eq!((c.first, c.last, c.drops), (Some(5), Some(11), 2));
        let mut w = SequenceCounter::default();
        w.see(u32::MAX - 1);
        assert_eq!(w.see(1), u32::MAX as u64 + 2, "wraps extend the sequence");
        assert_eq!(w.drops, 2, "u32::MAX and 0 were skipped");
        let mut r = SequenceCounter::default();
        let ext: Vec<u64> = [0, 0, 1, 3].into_iter().map(|q| r.see(q)).collect();
        assert_eq!(ext, [0, 1, 2, 4], "a repeated number still gives an increasing frame number");
        assert_eq!((r.repeats, r.drops), (1, 1));
    }

    #[test]
    fn missing_node_is_one_clear_line() {
        let cfg = V4l2Config { device: Some("/dev/video-zcpipe-none".into()), buffers: 4, ..Default::default() };
        let e = V4l2Capture::open(&cfg).unwrap_err().to_string();
        assert!(e.contains("/dev/video-zcpipe-none does not exist") && e.contains("zcpipe doctor"), "{e}");
        assert!(!e.contains('\n'), "{e}");
        let cfg = V4l2Config { device: Some("/dev/null".into()), buffers: 4, ..Default::default() };
        let e = V4l2Capture::open(&cfg).unwrap_err().to_string();
        assert!(e.contains("/dev/null is not a V4L2 device"), "{e}");
    }
}

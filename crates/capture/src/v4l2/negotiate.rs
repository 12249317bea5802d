//! Opening a capture node and negotiating with its driver: the node must capture and
//! stream; `--format`, `--size` (VIDIOC_S_FMT) and `--fps` (VIDIOC_S_PARM) are asked for and
//! what the driver granted ([`Granted`]) becomes the frame layout, from `bytesperline` and
//! `sizeimage`.

use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};

use super::{format_name, CaptureIo, SequenceCounter, V4l2Capture, V4l2Stats};
use zcpipe_core::frame::{Fourcc, FrameLayout, PlaneDesc, MAX_PLANES};
use zcpipe_sys::v4l2 as sys;
use zcpipe_sys::v4l2::node::{self, caps_names, capture_nodes, first_capture_node, open_node, query_node};

/// Formats zcpipe reads from a camera, in the order it prefers them when `--format` is not
/// given (NV12 first: the scalers and NPUs take it as is; XR24 last, for a display that
/// scans the camera's buffers out as they are).
pub const PREFERRED: [Fourcc; 7] =
    [Fourcc::NV12, Fourcc::NV12M, Fourcc::NV16, Fourcc::YUYV, Fourcc::RGB24, Fourcc::BGR24, Fourcc::XR24];

/// What a driver offers, for messages: all of it if short, else the first 12 and a count
/// (vivid offers about 70).
fn offered_list(v: &[Fourcc]) -> String {
    const SHOW: usize = 12;
    if v.len() <= SHOW {
        return sys::format_list(v, "none");
    }
    format!("{}, ... ({} formats)", sys::format_list(&v[..SHOW], "none"), v.len())
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

/// Parses `--format NAME` (one of [`PREFERRED`], or `MJPG`/`MJPEG`: a UVC camera's Motion
/// JPEG, decoded into an NV12 pool by [`super::mjpg::MjpgCamera`]).
pub fn parse_format(s: &str) -> Result<Fourcc> {
    if s.eq_ignore_ascii_case("MJPG") || s.eq_ignore_ascii_case("MJPEG") {
        return Ok(Fourcc::MJPG);
    }
    Fourcc::parse(s).filter(|f| PREFERRED.contains(f)).ok_or_else(|| {
        anyhow!(
            "--format \"{s}\" is not one zcpipe reads; use one of {}, or MJPG (decoded by --decoder)",
            sys::format_list(&PREFERRED, "none")
        )
    })
}

/// "capture nodes here: /dev/video0 (vivid: ...), ... (`zcpipe doctor` lists every node)".
fn other_nodes_hint(except: &Path) -> String {
    node::other_nodes_hint("capture", &capture_nodes(), except, "no capture node found here")
}

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
                planes[1] =
                    PlaneDesc { offset: y_len as u32, bytesperline: bpl, length: size - y_len as u32, fd_index: 0 };
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
            Fourcc::YUYV | Fourcc::RGB24 | Fourcc::BGR24 | Fourcc::XR24 => {
                let (bpl, size) = self.planes[0];
                planes[0] = PlaneDesc { offset: 0, bytesperline: bpl, length: size, fd_index: 0 };
                1
            }
            Fourcc::MJPG => {
                // Compressed: one JPEG of up to sizeimage bytes per buffer, no pixel layout
                // (the decoder gives one); not validated as pixels.
                let size = self.planes.first().map_or(0, |p| p.1);
                if size == 0 {
                    bail!("MJPG {w}x{h} with sizeimage 0: the driver gives no buffer size");
                }
                planes[0] = PlaneDesc { offset: 0, bytesperline: 0, length: size, fd_index: 0 };
                return Ok(FrameLayout { fourcc: self.fourcc, width: w, height: h, num_planes: 1, planes });
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
                anyhow!(
                    "v4l2: {} is not a V4L2 device (VIDIOC_QUERYCAP: {e}); {}",
                    path.display(),
                    other_nodes_hint(&path)
                )
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
            bail!(
                "v4l2: {} cannot capture: it is {what} (caps {}); {}",
                node.label(),
                caps_names(node.caps),
                other_nodes_hint(&path)
            );
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
            granted: Granted {
                fourcc: Fourcc::default(),
                width: 0,
                height: 0,
                planes: vec![],
                interval: sys::Fract::default(),
            },
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

    /// The formats the driver offers on this queue (VIDIOC_ENUM_FMT).
    pub(crate) fn offered_formats(&self) -> Vec<Fourcc> {
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
                sys::format_list(&readable, "none")
            ),
            None => *readable.first().ok_or_else(|| {
                anyhow!(
                    "v4l2: {} offers {}, none of which zcpipe reads ({})",
                    self.node.label(),
                    offered_list(&offered),
                    sys::format_list(&PREFERRED, "none")
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
        let mut f = sys::Format::request(self.buf_type, fourcc, w, h, &[]);
        if let Err(e) = sys::s_fmt(self.fd(), &mut f) {
            if e.raw_os_error() == Some(libc::EBUSY) {
                return Err(self.busy_error("VIDIOC_S_FMT"));
            }
            bail!("v4l2: VIDIOC_S_FMT {} {w}x{h} on {}: {e}", format_name(fourcc), self.node.label());
        }
        let (gw, gh, gf, planes, field) = f.granted();
        if gf != fourcc {
            bail!(
                "v4l2: {} was asked for {} but set {}; it offers {}, of which zcpipe reads {}: pass one of those with --format",
                self.node.label(),
                format_name(fourcc),
                format_name(gf),
                offered_list(&offered),
                sys::format_list(&readable, "none")
            );
        }
        if field != sys::V4L2_FIELD_NONE && field != sys::V4L2_FIELD_ANY {
            log::warn!(
                "v4l2: {} delivers interlaced frames (field {field}); zcpipe treats them as progressive",
                self.node.label()
            );
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
                        log::warn!(
                            "v4l2: {} cannot set its frame rate (no V4L2_CAP_TIMEPERFRAME); --fps {fps} ignored",
                            self.node.label()
                        );
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
}

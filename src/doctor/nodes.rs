//! The V4L2 section: every `/dev/video*` node ([`video_nodes`]), its role, queues, formats,
//! frame sizes and rates, and the problems found with it (V4L2 `vidioc-querycap.rst`,
//! `vidioc-enum-fmt.rst`, `vidioc-enum-framesizes.rst`, `vidioc-enum-frameintervals.rst`).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use serde::Serialize;

use super::access::{access_fix, holders};
use super::{FileMode, FormatReport, NodeReport, Problem, QueueReport, SizeReport, Sizes, MAX_SIZES};
use zcpipe_capture::v4l2::PREFERRED;
use zcpipe_sys::fourcc::Fourcc;
use zcpipe_sys::v4l2::node::{caps_names, open_node, probe_node, video_nodes, NodeInfo};
use zcpipe_sys::v4l2::{self as sys, format_name, fourcc_chars};

/// What a V4L2 node is to zcpipe, from its device capabilities (`V4L2_CAP_*`,
/// Documentation/userspace-api/media/v4l/vidioc-querycap.rst).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Single-planar video capture (`V4L2_CAP_VIDEO_CAPTURE`): a camera for `--source`.
    Capture,
    /// Multi-planar video capture (`V4L2_CAP_VIDEO_CAPTURE_MPLANE`): a camera for `--source`.
    CaptureMplane,
    /// Single-planar memory-to-memory device (`V4L2_CAP_VIDEO_M2M`, or capture and output
    /// on one node): a scaler, converter or codec.
    Mem2mem,
    /// Multi-planar memory-to-memory device (`V4L2_CAP_VIDEO_M2M_MPLANE`).
    Mem2memMplane,
    /// Video output only (`V4L2_CAP_VIDEO_OUTPUT[_MPLANE]`): zcpipe does not use it.
    Output,
    /// Metadata capture or output (`V4L2_CAP_META_*`): zcpipe does not use it.
    Metadata,
    /// Anything else (VBI, SDR, touch, ...): zcpipe does not use it.
    Other,
    /// The node could not be opened or queried.
    Unknown,
}

impl Role {
    /// The role of a node with device capabilities `caps`. A node that sets both video
    /// capture and video output is a memory-to-memory device (older m2m drivers say so
    /// instead of `V4L2_CAP_VIDEO_M2M`).
    pub fn from_caps(caps: u32) -> Role {
        let cap_sp = caps & sys::V4L2_CAP_VIDEO_CAPTURE != 0;
        let cap_mp = caps & sys::V4L2_CAP_VIDEO_CAPTURE_MPLANE != 0;
        let out_sp = caps & sys::V4L2_CAP_VIDEO_OUTPUT != 0;
        let out_mp = caps & sys::V4L2_CAP_VIDEO_OUTPUT_MPLANE != 0;
        if caps & sys::V4L2_CAP_VIDEO_M2M_MPLANE != 0 || (cap_mp && out_mp) {
            Role::Mem2memMplane
        } else if caps & sys::V4L2_CAP_VIDEO_M2M != 0 || (cap_sp && out_sp) {
            Role::Mem2mem
        } else if cap_mp {
            Role::CaptureMplane
        } else if cap_sp {
            Role::Capture
        } else if out_sp || out_mp {
            Role::Output
        } else if caps & (sys::V4L2_CAP_META_CAPTURE | sys::V4L2_CAP_META_OUTPUT) != 0 {
            Role::Metadata
        } else {
            Role::Other
        }
    }

    /// The queues doctor lists, as `(name, enum v4l2_buf_type)`: a mem2mem device's OUTPUT
    /// queue (frames go in) then its CAPTURE queue (frames come out).
    pub fn queues(self) -> &'static [(&'static str, u32)] {
        match self {
            Role::Capture => &[("capture", sys::V4L2_BUF_TYPE_VIDEO_CAPTURE)],
            Role::CaptureMplane => &[("capture", sys::V4L2_BUF_TYPE_VIDEO_CAPTURE_MPLANE)],
            Role::Mem2mem => {
                &[("output", sys::V4L2_BUF_TYPE_VIDEO_OUTPUT), ("capture", sys::V4L2_BUF_TYPE_VIDEO_CAPTURE)]
            }
            Role::Mem2memMplane => &[
                ("output", sys::V4L2_BUF_TYPE_VIDEO_OUTPUT_MPLANE),
                ("capture", sys::V4L2_BUF_TYPE_VIDEO_CAPTURE_MPLANE),
            ],
            _ => &[],
        }
    }

    pub(super) fn describe(self) -> &'static str {
        match self {
            Role::Capture => "video capture, single-planar",
            Role::CaptureMplane => "video capture, multi-planar",
            Role::Mem2mem => "mem2mem (scaler, converter or codec), single-planar",
            Role::Mem2memMplane => "mem2mem (scaler, converter or codec), multi-planar",
            Role::Output => "video output: zcpipe does not use it",
            Role::Metadata => "metadata: zcpipe does not use it",
            Role::Other => "not video (VBI, SDR, touch, ...): zcpipe does not use it",
            Role::Unknown => "unknown (not opened)",
        }
    }
}

/// At most this many formats are read per queue (a guard against a looping driver).
const MAX_FORMATS: u32 = 512;

/// At most this many frame intervals are read per size.
const MAX_INTERVALS: u32 = 64;

/// Frame rates are asked for the first this many discrete sizes of a format zcpipe reads.
const RATES_FOR_SIZES: usize = 16;

/// Frames per second of a frame interval in seconds (`None` for 0/x or x/0).
pub(super) fn fps_of(f: sys::Fract) -> Option<f64> {
    (f.numerator != 0 && f.denominator != 0).then(|| f.denominator as f64 / f.numerator as f64)
}

/// `30`, `29.97`, `7.5`.
pub fn fmt_fps(fps: f64) -> String {
    let s = format!("{fps:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn errno_name(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EINVAL) => "EINVAL".into(),
        Some(libc::ENOTTY) => "ENOTTY: not supported by the driver".into(),
        _ => e.to_string(),
    }
}

/// Frame rates of `fourcc` at `w`x`h`, slowest first (a range gives its two ends).
fn frame_rates(fd: BorrowedFd<'_>, fourcc: Fourcc, w: u32, h: u32) -> Vec<f64> {
    let mut v = vec![];
    for index in 0..MAX_INTERVALS {
        let mut q = sys::FrmIvalEnum::new(fourcc, w, h, index);
        if sys::enum_frameintervals(fd, &mut q).is_err() {
            break;
        }
        if q.type_ == sys::V4L2_FRMIVAL_TYPE_DISCRETE {
            v.extend(fps_of(q.discrete()));
        } else {
            // A range: the longest interval is the slowest rate.
            let s = q.stepwise();
            v.extend(fps_of(s.max));
            v.extend(fps_of(s.min));
            break;
        }
    }
    v.sort_by(f64::total_cmp);
    v.dedup();
    v
}

/// The frame sizes of `fourcc`, with frame rates when `rates` (formats zcpipe reads).
fn frame_sizes(fd: BorrowedFd<'_>, fourcc: Fourcc, rates: bool) -> Sizes {
    let mut sizes = vec![];
    let mut truncated = false;
    for index in 0.. {
        let mut q = sys::FrmSizeEnum::new(fourcc, index);
        if let Err(e) = sys::enum_framesizes(fd, &mut q) {
            if index == 0 {
                return Sizes::None { reason: format!("VIDIOC_ENUM_FRAMESIZES: {}", errno_name(&e)) };
            }
            break;
        }
        if q.type_ != sys::V4L2_FRMSIZE_TYPE_DISCRETE {
            let s = q.stepwise();
            return Sizes::Stepwise {
                min: [s.min_width, s.min_height],
                max: [s.max_width, s.max_height],
                step: [s.step_width, s.step_height],
                continuous: q.type_ == sys::V4L2_FRMSIZE_TYPE_CONTINUOUS,
            };
        }
        if sizes.len() == MAX_SIZES {
            truncated = true;
            break;
        }
        let d = q.discrete();
        let fps =
            if rates && sizes.len() < RATES_FOR_SIZES { frame_rates(fd, fourcc, d.width, d.height) } else { vec![] };
        sizes.push(SizeReport { width: d.width, height: d.height, fps });
    }
    Sizes::Discrete { sizes, truncated }
}

/// Every format of queue `buf_type` (VIDIOC_ENUM_FMT until EINVAL,
/// Documentation/userspace-api/media/v4l/vidioc-enum-fmt.rst) with its sizes.
fn queue_formats(file: &File, name: &'static str, buf_type: u32, rates: bool) -> QueueReport {
    let fd = file.as_fd();
    let mut q = QueueReport { queue: name, buf_type, formats: vec![], error: None };
    for index in 0..MAX_FORMATS {
        let mut d = sys::FmtDesc { index, type_: buf_type, ..Default::default() };
        if let Err(e) = sys::enum_fmt(fd, &mut d) {
            if e.raw_os_error() != Some(libc::EINVAL) {
                q.error = Some(format!("VIDIOC_ENUM_FMT: {}", errno_name(&e)));
            }
            break;
        }
        let fourcc = d.fourcc();
        let zcpipe = PREFERRED.contains(&fourcc);
        q.formats.push(FormatReport {
            name: if zcpipe { format_name(fourcc) } else { fourcc_chars(d.pixelformat).trim_end().to_string() },
            fourcc: fourcc_chars(d.pixelformat),
            description: d.description().into_owned(),
            zcpipe,
            compressed: d.flags & sys::V4L2_FMT_FLAG_COMPRESSED != 0,
            emulated: d.flags & sys::V4L2_FMT_FLAG_EMULATED != 0,
            sizes: frame_sizes(fd, fourcc, rates && zcpipe),
        });
    }
    q
}

fn node_problem_for_error(path: &Path, e: &io::Error, file: Option<&FileMode>) -> Problem {
    let about = path.display().to_string();
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => Problem {
            what: format!(
                "{about}: permission denied ({})",
                file.map(FileMode::describe).unwrap_or_else(|| "mode unknown".into())
            ),
            fix: access_fix(path, file),
            about,
        },
        Some(libc::EBUSY) => {
            let h = holders(path, Some(std::process::id()));
            let who = if h.is_empty() {
                "by a process this user cannot see (or one that has since exited)".to_string()
            } else {
                format!("held by {}", h.join(", "))
            };
            Problem {
                what: format!("{about}: busy (EBUSY): its driver allows one user at a time and another process has it open, {who}"),
                fix: format!("stop the other user of {about} (`fuser -v {about}` names it), then run zcpipe doctor again"),
                about,
            }
        }
        Some(libc::ENOTTY) => Problem {
            what: format!("{about}: not a V4L2 device (VIDIOC_QUERYCAP: ENOTTY)"),
            fix: "check which driver created it (`udevadm info {about}`); zcpipe reads V4L2 video nodes only"
                .replace("{about}", &about),
            about,
        },
        _ => Problem {
            what: format!("{about}: cannot open or query it: {e}"),
            fix: "check `dmesg` for its driver's messages; replug the device or reload its driver module".into(),
            about,
        },
    }
}

/// Examines one node; problems go to `problems`.
fn examine_node(path: &Path, problems: &mut Vec<Problem>) -> NodeReport {
    let file = FileMode::of(path);
    let mut r = NodeReport {
        path: path.display().to_string(),
        file: file.clone(),
        error: None,
        driver: String::new(),
        card: String::new(),
        bus_info: String::new(),
        caps: 0,
        caps_names: String::new(),
        role: Role::Unknown,
        streaming: false,
        usage: None,
        queues: vec![],
    };
    let info: NodeInfo = match probe_node(path).and_then(|i| open_node(path).map(|f| (i, f))) {
        Ok((info, f)) => {
            r.role = Role::from_caps(info.caps);
            let rates = matches!(r.role, Role::Capture | Role::CaptureMplane);
            r.queues = r.role.queues().iter().map(|&(name, t)| queue_formats(&f, name, t, rates)).collect();
            info
        }
        Err(e) => {
            r.error = Some(e.to_string());
            problems.push(node_problem_for_error(path, &e, file.as_ref()));
            return r;
        }
    };
    r.driver = info.driver.clone();
    r.card = info.card.clone();
    r.bus_info = info.cap.bus_info().into_owned();
    r.caps = info.caps;
    r.caps_names = caps_names(info.caps);
    r.streaming = info.cap.has_streaming();
    let p = path.display();
    r.usage = match r.role {
        Role::Capture | Role::CaptureMplane if r.streaming => Some(format!("--source v4l2:{p}")),
        Role::Mem2mem | Role::Mem2memMplane if r.streaming => Some(format!("--scaler v4l2m2m:{p}")),
        _ => None,
    };
    if matches!(r.role, Role::Capture | Role::CaptureMplane) {
        if !r.streaming {
            problems.push(Problem {
                what: format!("{}: captures, but only with read(): no streaming I/O (V4L2_CAP_STREAMING)", info.label()),
                fix: "zcpipe needs streaming I/O (MMAP/DMABUF buffers): use another node of this device, or a driver that streams".into(),
                about: r.path.clone(),
            });
        } else if let Some(q) = r.queues.first() {
            if !q.formats.is_empty() && !q.formats.iter().any(|f| f.zcpipe) {
                let offered: Vec<&str> = q.formats.iter().map(|f| f.name.as_str()).collect();
                problems.push(Problem {
                    what: format!(
                        "{}: offers none of the formats zcpipe reads ({}); it offers {}",
                        info.label(),
                        PREFERRED.map(format_name).join(", "),
                        offered.join(", ")
                    ),
                    fix: "use another capture node, or set the device to an uncompressed mode (many webcams offer YUYV beside MJPEG; `v4l2-ctl -d NODE --list-formats-ext` shows them)"
                        .replace("NODE", &r.path),
                    about: r.path.clone(),
                });
            }
        }
    }
    r
}

/// The fix when there is no camera node.
fn no_camera_fix() -> String {
    "connect a camera (USB webcams: the uvcvideo module; on a board: the camera's driver and device-tree overlay, then check `dmesg`); to test without one, load the virtual devices: sudo modprobe vivid (a camera) and sudo modprobe vim2m (a mem2mem scaler); without a camera zcpipe still runs on --source testsrc, image:PATH or video:PATH".into()
}

pub(super) fn nodes_section(problems: &mut Vec<Problem>) -> Vec<NodeReport> {
    let nodes: Vec<NodeReport> = video_nodes().iter().map(|p| examine_node(p, problems)).collect();
    if nodes.is_empty() {
        problems.push(Problem {
            what: "no V4L2 video node: /dev/video* does not exist, so there is no camera and no V4L2 mem2mem scaler"
                .into(),
            fix: no_camera_fix(),
            about: "/dev/video*".into(),
        });
    } else if !nodes.iter().any(|n| matches!(n.role, Role::Capture | Role::CaptureMplane) && n.streaming) {
        // Nodes that failed to open have a problem of their own.
        if nodes.iter().all(|n| n.error.is_none()) {
            problems.push(Problem {
                what: format!(
                    "no capture node among {} video node(s): --source auto falls back to the bundled clip",
                    nodes.len()
                ),
                fix: no_camera_fix(),
                about: "/dev/video*".into(),
            });
        }
    }
    nodes
}

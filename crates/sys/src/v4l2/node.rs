//! V4L2 node probing: which `/dev/video*` nodes exist, what `VIDIOC_QUERYCAP` says of each,
//! and which of them capture or convert. Used by capture (`--source v4l2`), the mem2mem
//! scaler (`--scaler v4l2m2m`) and `zcpipe doctor`, so that all three open and name a node
//! the same way.
//!
//! Contract: V4L2 `open.rst` (nodes are opened read-write, non-blocking) and
//! `vidioc-querycap.rst` (`device_caps`, valid when `V4L2_CAP_DEVICE_CAPS` is set).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::v4l2 as sys;

/// A V4L2 node and what VIDIOC_QUERYCAP says about it.
#[derive(Clone, Debug)]
pub struct NodeInfo {
    /// `/dev/videoN`.
    pub path: PathBuf,
    /// Driver name (`vivid`, `uvcvideo`, `rkisp1`).
    pub driver: String,
    /// Card name.
    pub card: String,
    /// The node's capabilities (`device_caps`).
    pub caps: u32,
    /// The full capability record.
    pub cap: sys::Capability,
}

impl NodeInfo {
    /// It captures video (single- or multi-planar) and streams: zcpipe can use it.
    pub fn can_capture(&self) -> bool {
        self.cap.is_capture() && self.cap.has_streaming()
    }
    /// `/dev/video0 (uvcvideo: HD Webcam)`, or `/dev/video0 (vivid)` when the card is named
    /// like its driver.
    pub fn label(&self) -> String {
        if self.card.is_empty() || self.card == self.driver {
            format!("{} ({})", self.path.display(), self.driver)
        } else {
            format!("{} ({}: {})", self.path.display(), self.driver, self.card)
        }
    }
}

/// The names of the `V4L2_CAP_*` bits set in `caps`, for messages: `VIDEO_M2M|STREAMING`,
/// or the value in hex when no bit has a name here.
pub fn caps_names(caps: u32) -> String {
    const NAMES: [(u32, &str); 14] = [
        (sys::V4L2_CAP_VIDEO_CAPTURE, "VIDEO_CAPTURE"),
        (sys::V4L2_CAP_VIDEO_OUTPUT, "VIDEO_OUTPUT"),
        (sys::V4L2_CAP_VIDEO_OVERLAY, "VIDEO_OVERLAY"),
        (sys::V4L2_CAP_VBI_CAPTURE, "VBI_CAPTURE"),
        (sys::V4L2_CAP_VBI_OUTPUT, "VBI_OUTPUT"),
        (sys::V4L2_CAP_VIDEO_CAPTURE_MPLANE, "VIDEO_CAPTURE_MPLANE"),
        (sys::V4L2_CAP_VIDEO_OUTPUT_MPLANE, "VIDEO_OUTPUT_MPLANE"),
        (sys::V4L2_CAP_VIDEO_M2M_MPLANE, "VIDEO_M2M_MPLANE"),
        (sys::V4L2_CAP_VIDEO_M2M, "VIDEO_M2M"),
        (sys::V4L2_CAP_SDR_CAPTURE, "SDR_CAPTURE"),
        (sys::V4L2_CAP_META_CAPTURE, "META_CAPTURE"),
        (sys::V4L2_CAP_META_OUTPUT, "META_OUTPUT"),
        (sys::V4L2_CAP_READWRITE, "READWRITE"),
        (sys::V4L2_CAP_STREAMING, "STREAMING"),
    ];
    let v: Vec<&str> = NAMES.iter().filter(|(b, _)| caps & b != 0).map(|(_, n)| *n).collect();
    if v.is_empty() {
        format!("{caps:#x}")
    } else {
        v.join("|")
    }
}

/// Opens a V4L2 node read-write, non-blocking, close-on-exec (V4L2 `open.rst`). Errors are
/// open(2)'s (`ENOENT`, `EACCES`, `EBUSY`, ...).
pub fn open_node(path: &Path) -> io::Result<File> {
    OpenOptions::new().read(true).write(true).custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC).open(path)
}

/// VIDIOC_QUERYCAP on an open node; `path` is only recorded. `ENOTTY`: not a V4L2 device.
pub fn query_node(fd: BorrowedFd<'_>, path: &Path) -> io::Result<NodeInfo> {
    let mut cap = sys::Capability::default();
    sys::querycap(fd, &mut cap)?;
    Ok(NodeInfo {
        path: path.to_path_buf(),
        driver: cap.driver().into_owned(),
        card: cap.card().into_owned(),
        caps: cap.caps(),
        cap,
    })
}

/// Opens `path` briefly ([`open_node`]) and queries it ([`query_node`]).
pub fn probe_node(path: &Path) -> io::Result<NodeInfo> {
    let f = open_node(path)?;
    query_node(f.as_fd(), path)
}

/// `/dev/video*` nodes (under the system root, [`crate::board::path`]) in numeric order
/// (none if `/dev` cannot be read).
pub fn video_nodes() -> Vec<PathBuf> {
    let mut v: Vec<(u32, PathBuf)> = std::fs::read_dir(crate::board::path("/dev"))
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let n: u32 = name.strip_prefix("video")?.parse().ok()?;
                    Some((n, e.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v.into_iter().map(|(_, p)| p).collect()
}

/// Every node that can capture and stream, in numeric order (nodes that cannot be opened
/// are skipped).
pub fn capture_nodes() -> Vec<NodeInfo> {
    video_nodes().iter().filter_map(|p| probe_node(p).ok()).filter(NodeInfo::can_capture).collect()
}

/// The first node that can capture and stream (what `--source v4l2` and `auto` use).
pub fn first_capture_node() -> Option<NodeInfo> {
    video_nodes().iter().filter_map(|p| probe_node(p).ok()).find(NodeInfo::can_capture)
}

/// Every mem2mem node that streams, in numeric order (for `--scaler v4l2m2m`'s messages).
pub fn m2m_nodes() -> Vec<NodeInfo> {
    video_nodes()
        .iter()
        .filter_map(|p| probe_node(p).ok())
        .filter(|n| n.cap.is_m2m() && n.cap.has_streaming())
        .collect()
}

/// For error messages: the nodes of `kind` (`"capture"`, `"mem2mem"`) other than `except`
/// that are here (`nodes`), as `"<kind> nodes here: a (drv), b (drv) (`zcpipe doctor` lists
/// every node)"`, or `none_found` (`"no capture node found here"`) and the doctor hint.
pub fn other_nodes_hint(kind: &str, nodes: &[NodeInfo], except: &Path, none_found: &str) -> String {
    let v: Vec<String> = nodes.iter().filter(|n| n.path != except).map(|n| n.label()).collect();
    if v.is_empty() {
        format!("{none_found} (`zcpipe doctor` lists every node)")
    } else {
        format!("{kind} nodes here: {} (`zcpipe doctor` lists every node)", v.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_are_named() {
        assert_eq!(caps_names(sys::V4L2_CAP_VIDEO_M2M | sys::V4L2_CAP_STREAMING), "VIDEO_M2M|STREAMING");
        assert_eq!(
            caps_names(sys::V4L2_CAP_VIDEO_CAPTURE_MPLANE | sys::V4L2_CAP_READWRITE),
            "VIDEO_CAPTURE_MPLANE|READWRITE"
        );
    }
}

//! `--source auto`, and a look at a camera without streaming from it: what `zcpipe run`'s
//! plan shows and decides by (pixel format, size, and whether the camera imports dma-bufs,
//! for `--capture-io dmabuf`).

use std::os::fd::AsFd;
use std::path::Path;

use zcpipe_sys::fourcc::Fourcc;
use zcpipe_sys::v4l2 as sys;
use zcpipe_sys::v4l2::node::{first_capture_node, open_node, query_node, NodeInfo};

use super::spec::{SourceSpec, BUNDLED_CLIP};
use super::v4l2::PREFERRED;

/// What [`choose`] picked.
#[derive(Clone, Debug)]
pub struct SourceChoice {
    /// The source to run (`auto` resolved: a camera's node, or the bundled clip's `video:`).
    pub spec: SourceSpec,
    /// One line: why this source.
    pub reason: String,
    /// For a V4L2 source: what the camera offers (`None` for other sources, or when the
    /// node cannot be opened: the capture stage then reports why).
    pub camera: Option<CameraLook>,
}

/// A camera looked at without streaming: `VIDIOC_QUERYCAP`, `VIDIOC_ENUM_FMT`,
/// `VIDIOC_G_FMT` and `VIDIOC_REQBUFS` with count 0 (Documentation/userspace-api/media/v4l/
/// vidioc-reqbufs.rst: count 0 allocates nothing and reports `V4L2_BUF_CAP_*`). Nothing is
/// set: `VIDIOC_S_FMT` waits for the capture stage.
#[derive(Clone, Debug)]
pub struct CameraLook {
    /// The node, driver and card.
    pub node: NodeInfo,
    /// The format capture will ask for: `--format`, else the first of
    /// [`PREFERRED`] the camera offers (`None`: it offers none of them).
    pub fourcc: Option<Fourcc>,
    /// The size capture will ask for (pixels): `--size`, else the camera's current size.
    pub size: Option<(u32, u32)>,
    /// Whether the camera's queue imports dma-bufs (`V4L2_BUF_CAP_SUPPORTS_DMABUF`).
    pub can_import: bool,
}

impl CameraLook {
    /// Looks at the camera at `path`; `format`/`size` are `--format`/`--size`.
    pub fn look(path: &Path, format: Option<Fourcc>, size: Option<(u32, u32)>) -> std::io::Result<CameraLook> {
        let file = open_node(path)?;
        let node = query_node(file.as_fd(), path)?;
        let buf_type = node.cap.capture_buf_type().unwrap_or(sys::V4L2_BUF_TYPE_VIDEO_CAPTURE);
        let mut offered = Vec::new();
        for index in 0..256 {
            let mut d = sys::FmtDesc { index, type_: buf_type, ..Default::default() };
            if sys::enum_fmt(file.as_fd(), &mut d).is_err() {
                break;
            }
            offered.push(d.fourcc());
        }
        let fourcc = match format {
            Some(f) => Some(f),
            None => PREFERRED.into_iter().find(|f| offered.contains(f)),
        };
        let size = size.or_else(|| {
            let mut cur = sys::Format::new(buf_type);
            sys::g_fmt(file.as_fd(), &mut cur).ok().map(|_| {
                let (w, h, ..) = cur.granted();
                (w, h)
            })
        });
        let mut rb =
            sys::RequestBuffers { count: 0, type_: buf_type, memory: sys::V4L2_MEMORY_DMABUF, ..Default::default() };
        let can_import =
            sys::reqbufs(file.as_fd(), &mut rb).is_ok() && rb.capabilities & sys::V4L2_BUF_CAP_SUPPORTS_DMABUF != 0;
        Ok(CameraLook { node, fourcc, size, can_import })
    }

    /// `NV12 1280x720`: for the plan.
    pub fn format_text(&self) -> String {
        let fourcc = self.fourcc.map_or_else(|| "(no format zcpipe reads)".to_string(), |f| f.to_string());
        let size = self.size.map_or_else(|| "(size unknown)".to_string(), |(w, h)| format!("{w}x{h}"));
        format!("{fourcc} {size}")
    }
}

/// Resolves `--source` and looks at the camera it names ([`CameraLook::look`]), for the
/// plan: [`resolve`], then the look. `format`/`size` are `--format`/`--size`. Never fails: a
/// camera that cannot be looked at has `camera: None`.
pub fn choose(spec: &SourceSpec, format: Option<Fourcc>, size: Option<(u32, u32)>) -> SourceChoice {
    let (spec, reason) = resolve(spec);
    let camera = match &spec {
        SourceSpec::V4l2(Some(p)) => {
            CameraLook::look(p, format, size).map_err(|e| log::debug!("source: looking at {}: {e}", p.display())).ok()
        }
        _ => None,
    };
    SourceChoice { spec, reason, camera }
}

/// Resolves `--source` without opening anything but the nodes' `VIDIOC_QUERYCAP`: `auto` is
/// the first V4L2 capture node that streams, else the bundled clip (`auto` kept); `v4l2`
/// alone is the first capture node. Returns the source and one line saying why.
pub fn resolve(spec: &SourceSpec) -> (SourceSpec, String) {
    match spec {
        SourceSpec::Auto => match first_capture_node() {
            Some(n) => {
                (SourceSpec::V4l2(Some(n.path.clone())), format!("auto: {} is the first V4L2 capture node", n.label()))
            }
            None => (
                SourceSpec::Auto,
                format!("auto: no V4L2 capture node in /dev/video*: the bundled clip {BUNDLED_CLIP}"),
            ),
        },
        SourceSpec::V4l2(None) => match first_capture_node() {
            Some(n) => (
                SourceSpec::V4l2(Some(n.path.clone())),
                format!("--source v4l2: {} is the first V4L2 capture node", n.label()),
            ),
            None => (spec.clone(), "--source v4l2: no V4L2 capture node found (capture will say so)".into()),
        },
        other => (other.clone(), format!("--source {}", other.redacted())),
    }
}

//! Scale stage: converts and letterboxes a capture frame into the model's input.
//!
//! Backends sit behind one trait, [`Scaler`], chosen by [`ScalerKind`] (`--scaler`): `cpu`
//! ([`cpu`]), `rga` ([`rga`], librga loaded at run time), `v4l2m2m` ([`v4l2m2m`]) and `none`
//! ([`NoScaler`]). A backend either maps frames (the CPU reads the source through a read
//! guard and writes the output through a write guard: [`map_frame`]) or binds the pools (its
//! device imports both pools once at start-up and reads and writes the dma-bufs itself);
//! [`Scaler::binds_pools`] says which. Adding a backend is a file here, a [`ScalerKind`]
//! variant (with its `--scaler` spelling in `FromStr` and `Display`) and its arm in
//! [`stage`]'s `open_scaler`.
//!
//! The output comes from the model (negotiated with the infer stage at set-up: size, channel
//! order as the fourcc, [`Letterbox`] placement and pad): for YOLOX-Nano 416x416 BGR24,
//! top-left letterbox, pad 114; for Ultralytics and YOLOv5 models RGB24, centred, pad 114;
//! bilinear. Every backend writes both orders and both placements, or refuses at start-up
//! naming what it cannot do. This folder never imports another stage; its configuration is
//! [`ScaleConfig`].

pub mod auto;
pub mod cpu;
mod motion;
pub mod report;
pub mod rga;
pub mod stage;
pub mod v4l2m2m;

use std::path::PathBuf;

use anyhow::Result;

use zcpipe_core::dmabuf::{DmaBuf, HeapChoice};
use zcpipe_core::frame::{FrameLayout, Letterbox, LetterboxParams};
use zcpipe_core::pool::{Frame, WriteLoan};

/// What the scale stage is asked to do, checked by whoever built it (the command line).
#[derive(Clone, Debug, PartialEq)]
pub struct ScaleConfig {
    /// The backend.
    pub scaler: ScalerKind,
    /// Buffers in the output pool (2..=64).
    pub buffers: usize,
    /// With RGA: the core that runs the jobs.
    pub rga_core: rga::RgaCore,
    /// The cameras' names when there are several (each joined at `capture@NAME.sock`, in
    /// this order: a frame's camera index is its position here); empty for one camera.
    pub cameras: Vec<String>,
    /// Each camera's detection rate, frames per second (`--detect-fps`; 0: every frame), in
    /// the order of `cameras`; one value is every camera's, none: every frame.
    pub detect_fps: Vec<f64>,
    /// Motion gating (`--motion`): `(threshold in luma levels, keep-alive in seconds)`;
    /// `None`: off.
    pub motion: Option<(f32, f64)>,
}

impl ScaleConfig {
    /// Camera `i`'s detection rate (0: every frame).
    pub fn detect_fps(&self, i: usize) -> f64 {
        zcpipe_core::config::per_camera(&self.detect_fps, i, 0.0)
    }
}

/// Scaler backends (`--scaler`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScalerKind {
    /// `auto`: the best present ([`auto::choose`]: RGA, mainline rockchip-rga, CPU).
    Auto,
    /// `cpu`: NV12/NV16/YUYV/RGB/BGR -> RGB or BGR letterbox on the CPU (fast_image_resize + yuv).
    Cpu,
    /// `none`: touch no pixels (pass-through geometry): with `--infer none`, measures
    /// transport alone.
    None,
    /// `rga`: Rockchip RGA through librga's im2d API (loaded at run time).
    Rga,
    /// `v4l2m2m:/dev/videoN`: a V4L2 mem2mem device (mainline rockchip-rga, vim2m): its
    /// OUTPUT queue imports the capture dma-bufs, its CAPTURE queue writes into the scaler's
    /// pool.
    V4l2M2m(PathBuf),
}

impl std::str::FromStr for ScalerKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(ScalerKind::Auto),
            "cpu" => Ok(ScalerKind::Cpu),
            "none" => Ok(ScalerKind::None),
            "rga" => Ok(ScalerKind::Rga),
            "v4l2m2m" | "v4l2m2m:" => {
                Err("v4l2m2m needs its node: --scaler v4l2m2m:/dev/videoN (`zcpipe doctor` lists mem2mem nodes)".into())
            }
            _ => match s.strip_prefix("v4l2m2m:") {
                Some(p) if !p.is_empty() => Ok(ScalerKind::V4l2M2m(PathBuf::from(p))),
                _ => Err(format!("\"{s}\" is not a scaler; use auto, cpu, none, rga or v4l2m2m:/dev/videoN")),
            },
        }
    }
}

impl std::fmt::Display for ScalerKind {
    /// The `--scaler` spelling, which [`std::str::FromStr`] parses back.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScalerKind::Auto => f.write_str("auto"),
            ScalerKind::Cpu => f.write_str("cpu"),
            ScalerKind::None => f.write_str("none"),
            ScalerKind::Rga => f.write_str("rga"),
            ScalerKind::V4l2M2m(p) => write!(f, "v4l2m2m:{}", p.display()),
        }
    }
}

/// A scaler backend: a source frame (any fourcc the backend reads) -> the packed model input
/// (RGB24 or BGR24, the picture where the [`Letterbox`] says, pad around it).
///
/// Life cycle: [`Scaler::bind`] once at start-up, then [`Scaler::scale`] per frame, then
/// drop (which releases whatever the backend imported).
pub trait Scaler: Send {
    /// Backend name (and device) for logs (`cpu scaler`, `v4l2m2m /dev/video8 (vim2m)`, `rga`).
    fn name(&self) -> String;

    /// Whether the backend's device reads and writes the dma-bufs itself (imported at
    /// [`Scaler::bind`]): the stage then never maps a frame, and the only CPU work per frame
    /// is queueing. `false`: the backend maps frames through CPU guards.
    fn binds_pools(&self) -> bool {
        false
    }

    /// The allocator the output pool should come from, given the `--heap` asked for (the
    /// default: that one). RGA says a heap it can reach (dma32 or CMA where RGA2 sees only
    /// the first 4 GiB) and logs why.
    fn output_heap(&self, requested: HeapChoice) -> HeapChoice {
        requested
    }

    /// Negotiates the conversion into `dst_layout` (its fourcc is the channel order) with
    /// the picture placed as `letterbox` says at start-up and, for a device backend,
    /// imports the pools: `src[i]` holds source buffer `i`'s dma-bufs (one per `fd_index`),
    /// `dst[j]` output buffer `j`. `src_layout` is the source's fixed layout, or `None` for a
    /// source whose frames change size from frame to frame (the host's image and video
    /// sources; a camera never does). The letterbox area a device never writes is filled
    /// with `letterbox.pad` here, once. Errors name both sides of a conversion the backend
    /// cannot do (a format, a placement), and the rule broken.
    fn bind(
        &mut self,
        src: &[Vec<DmaBuf>],
        src_layout: Option<&FrameLayout>,
        dst: &mut [DmaBuf],
        dst_layout: &FrameLayout,
        letterbox: Letterbox,
    ) -> Result<()>;

    /// The capture stage restarted and offered a new pool (`src`, `src_layout` as in
    /// [`Scaler::bind`]): a backend that maps frames needs nothing; one whose device
    /// imported the old pool (the default for [`Scaler::binds_pools`]) errors, and the scale
    /// stage then ends and is restarted itself, binding both pools afresh.
    fn rebind_input(&mut self, _src: &[Vec<DmaBuf>], _src_layout: Option<&FrameLayout>) -> Result<()> {
        if self.binds_pools() {
            anyhow::bail!("the {} imported the capture pool at set-up and cannot take the restarted capture stage's pool; the scale stage restarts to bind it", self.name());
        }
        Ok(())
    }

    /// Scales frame `src` into the buffer of `dst`; returns when the backend is done with
    /// both, and how the output maps back to the source (where the picture went: the
    /// infer stage maps boxes back through it).
    fn scale(&mut self, src: &Frame, dst: &mut WriteLoan<'_>) -> Result<LetterboxParams>;
}

pub(crate) use zcpipe_convert::map_frame;

/// `--scaler none`: touches no pixels; forwards each frame's geometry as if letterboxed, so
/// a run measures transport and glue alone (with `--infer none`).
#[derive(Debug, Default)]
pub(crate) struct NoScaler {
    dst: FrameLayout,
    letterbox: Option<Letterbox>,
}

impl Scaler for NoScaler {
    fn name(&self) -> String {
        "none scaler".into()
    }
    fn bind(
        &mut self,
        _src: &[Vec<DmaBuf>],
        _src_layout: Option<&FrameLayout>,
        _dst: &mut [DmaBuf],
        dst_layout: &FrameLayout,
        letterbox: Letterbox,
    ) -> Result<()> {
        self.dst = *dst_layout;
        self.letterbox = Some(letterbox);
        Ok(())
    }
    /// Pass-through: no mapping, no sync, no pixels; geometry only.
    fn scale(&mut self, src: &Frame, _dst: &mut WriteLoan<'_>) -> Result<LetterboxParams> {
        let l = src.desc().layout;
        let lb = self.letterbox.ok_or_else(|| anyhow::anyhow!("none scaler: scale before bind"))?;
        Ok(lb.params(l.width, l.height, self.dst.width, self.dst.height))
    }
}

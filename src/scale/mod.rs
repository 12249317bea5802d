//! Scale stage: converts and letterboxes a capture frame into the model's input.
//!
//! Backends sit behind [`Scaler`] (`cpu` here; `rga` and `v4l2m2m` slot in beside it). The
//! output layout comes from the model (negotiated with the infer stage at set-up): for
//! YOLOX-Nano 416x416 BGR24, top-left letterbox, pad value 114, bilinear.

pub mod cpu;
pub mod rga;
pub mod stage;
pub mod v4l2m2m;

use crate::core::dmabuf::DmaBuf;
use crate::core::frame::{FrameLayout, Fourcc, LetterboxParams};

/// A scaler backend: source frame (any supported fourcc) -> packed model input.
pub trait Scaler: Send {
    /// Backend name for logs (`cpu`, `rga`, ...).
    fn name(&self) -> &'static str;
    /// Checks at start-up that this backend can turn `src` frames into `dst`; the error
    /// names both sides and the rule broken.
    fn check(&self, src: Fourcc, dst: &FrameLayout) -> anyhow::Result<()>;
    /// Scales one frame. `src[i]` is the mapped dma-buf `i` of the source buffer (planes
    /// name theirs with `fd_index`); `dst` is the mapped output buffer, written per
    /// `dst_layout` (rows of `bytesperline` bytes). The letterbox area outside the image is
    /// filled with `pad`. Returns how the output maps back to the source.
    fn scale(
        &mut self,
        src: &[&[u8]],
        src_layout: &FrameLayout,
        dst: &mut [u8],
        dst_layout: &FrameLayout,
        pad: u8,
    ) -> anyhow::Result<LetterboxParams>;
}

/// `--scaler none`: touches no pixels; forwards each frame's geometry as if letterboxed, so
/// a run measures transport and glue alone (with `--infer none`).
#[derive(Debug, Default)]
pub struct NoScaler;

impl Scaler for NoScaler {
    fn name(&self) -> &'static str {
        "none"
    }
    fn check(&self, _src: Fourcc, _dst: &FrameLayout) -> anyhow::Result<()> {
        Ok(())
    }
    fn scale(&mut self, _src: &[&[u8]], src_layout: &FrameLayout, _dst: &mut [u8], dst_layout: &FrameLayout, _pad: u8) -> anyhow::Result<LetterboxParams> {
        Ok(LetterboxParams::top_left(src_layout.width, src_layout.height, dst_layout.width, dst_layout.height))
    }
}

/// A scaler backend whose device reads and writes the dma-bufs itself (V4L2 mem2mem, RGA):
/// the scale stage never maps a frame for it, so the only CPU work per frame is queueing.
///
/// Life cycle: [`DeviceScaler::bind`] once at start-up with both pools (every buffer is
/// imported into the device there, once), then [`DeviceScaler::scale`] per frame by buffer
/// index, then drop (which releases every import).
pub trait DeviceScaler: Send {
    /// Backend name and device for logs (`v4l2m2m /dev/video8 (vim2m)`, `rga`).
    fn name(&self) -> String;
    /// Negotiates `src_layout` -> `dst_layout` with the device and imports the pools:
    /// `src[i]` holds source buffer `i`'s dma-bufs (one per `fd_index`), `dst[j]` output
    /// buffer `j`. The letterbox area the device never writes is filled with `pad` here,
    /// once (through a CPU write guard). Errors name both sides of a conversion the
    /// device cannot do, and the rule broken.
    fn bind(&mut self, src: &[Vec<DmaBuf>], src_layout: &FrameLayout, dst: &mut [DmaBuf], dst_layout: &FrameLayout, pad: u8) -> anyhow::Result<()>;
    /// Converts source buffer `src_index` into output buffer `dst_index`; returns when the
    /// device is done with both. Returns how the output maps back to the source.
    fn scale(&mut self, src_index: u32, dst_index: u32) -> anyhow::Result<LetterboxParams>;

    /// Like [`DeviceScaler::bind`] for a source whose frames change size or format from
    /// frame to frame (the host's image and video sources; a camera never does): imports
    /// the output pool now and each source buffer at its first frame. The default refuses,
    /// naming the fix: devices whose queue formats are fixed per stream (V4L2 mem2mem)
    /// need a fixed-format source.
    fn bind_variable(&mut self, src: &[Vec<DmaBuf>], dst: &mut [DmaBuf], dst_layout: &FrameLayout, pad: u8) -> anyhow::Result<()> {
        let _ = (src, dst, dst_layout, pad);
        anyhow::bail!(
            "{} needs a source with one fixed format and size (a V4L2 camera: --source v4l2:/dev/videoN); this source changes \
             size from frame to frame: use --scaler cpu",
            self.name()
        )
    }

    /// One frame of a variable source (after [`DeviceScaler::bind_variable`]): `src` is the
    /// frame's buffer (index `src_index`) and `src_layout` its geometry; `dst` is output
    /// buffer `dst_index`, writable through a CPU guard for re-padding when the picture
    /// size changes. Returns how the output maps back to the source.
    fn scale_frame(&mut self, src_index: u32, src: &[DmaBuf], src_layout: &FrameLayout, dst_index: u32, dst: &mut DmaBuf) -> anyhow::Result<LetterboxParams> {
        let _ = (src_index, src, src_layout, dst_index, dst);
        anyhow::bail!("{}: scale_frame without bind_variable", self.name())
    }
}

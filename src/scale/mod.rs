//! Scale stage: converts and letterboxes a capture frame into the model's input.
//!
//! Backends sit behind [`Scaler`] (`cpu` here; `rga` and `v4l2m2m` slot in beside it). The
//! output layout comes from the model (negotiated with the infer stage at set-up): for
//! YOLOX-Nano 416x416 BGR24, top-left letterbox, pad value 114, bilinear.

pub mod cpu;
pub mod stage;

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

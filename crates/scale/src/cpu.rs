//! `cpu` scaler: the letterbox of [`zcpipe_convert::letterbox`] behind the [`Scaler`] trait,
//! mapping each frame through its read guards and the output through a write guard.

use zcpipe_convert::letterbox::Letterboxer;
use zcpipe_core::dmabuf::DmaBuf;
use zcpipe_core::frame::{Fourcc, FrameLayout, Letterbox, LetterboxParams};
use zcpipe_core::pool::{Frame, WriteLoan};

pub use zcpipe_convert::letterbox::YOLOX_PAD;

use super::{map_frame, Scaler};

/// CPU scaler: bilinear resize, BT.601 limited YCbCr -> RGB or BGR, top-left or centred
/// letterbox ([`Letterboxer`]).
#[derive(Default)]
pub struct CpuScaler {
    /// The model input and its letterbox, from [`Scaler::bind`].
    dst: Option<(FrameLayout, Letterbox)>,
    inner: Letterboxer,
}

impl CpuScaler {
    /// A scaler with empty scratch buffers (they are sized by the first frame).
    pub fn new() -> CpuScaler {
        CpuScaler::default()
    }

    /// [`Letterboxer::check`].
    pub fn check(&self, src: Fourcc, dst: &FrameLayout) -> anyhow::Result<()> {
        self.inner.check(src, dst)
    }

    /// [`Letterboxer::scale_bytes`].
    pub fn scale_bytes(
        &mut self,
        src: &[&[u8]],
        src_layout: &FrameLayout,
        dst: &mut [u8],
        dst_layout: &FrameLayout,
        letterbox: Letterbox,
    ) -> anyhow::Result<LetterboxParams> {
        self.inner.scale_bytes(src, src_layout, dst, dst_layout, letterbox)
    }
}

impl Scaler for CpuScaler {
    fn name(&self) -> String {
        "cpu scaler".into()
    }

    /// Checks the conversion ([`Letterboxer::check`]); the source's fourcc is NV12 when the
    /// source's layout varies (the host sources write NV12).
    fn bind(
        &mut self,
        _src: &[Vec<DmaBuf>],
        src_layout: Option<&FrameLayout>,
        _dst: &mut [DmaBuf],
        dst_layout: &FrameLayout,
        letterbox: Letterbox,
    ) -> anyhow::Result<()> {
        let src = src_layout.map(|l| l.fourcc).unwrap_or(Fourcc::NV12);
        self.check(src, dst_layout).map_err(|e| anyhow::anyhow!("cpu scaler cannot feed the model: {e:#}"))?;
        self.dst = Some((*dst_layout, letterbox));
        Ok(())
    }

    fn scale(&mut self, src: &Frame, dst: &mut WriteLoan<'_>) -> anyhow::Result<LetterboxParams> {
        let (dl, letterbox) = self.dst.ok_or_else(|| anyhow::anyhow!("cpu scaler: scale before bind"))?;
        let inner = &mut self.inner;
        map_frame(src, dst, |s, sl, d| inner.scale_bytes(s, sl, d, &dl, letterbox))
    }
}

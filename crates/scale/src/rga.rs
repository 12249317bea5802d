//! `--scaler rga`: Rockchip's RGA through librga's im2d API ([`RgaScaler`], in
//! `zcpipe-convert`, where the inference service uses it too) as this stage's [`Scaler`].

use anyhow::Result;

use super::Scaler;
pub use zcpipe_convert::rga::{rga_heap, RgaCore, RgaHeap, RgaJobs, RgaScaler};
use zcpipe_core::dmabuf::{DmaBuf, HeapChoice};
use zcpipe_core::frame::{FrameLayout, Letterbox, LetterboxParams};
use zcpipe_core::pool::{Frame, WriteLoan};

impl Scaler for RgaScaler {
    fn name(&self) -> String {
        self.describe()
    }

    fn binds_pools(&self) -> bool {
        RgaScaler::binds_pools(self)
    }

    fn output_heap(&self, requested: HeapChoice) -> HeapChoice {
        RgaScaler::output_heap(self, requested)
    }

    fn bind(
        &mut self,
        src: &[Vec<DmaBuf>],
        src_layout: Option<&FrameLayout>,
        dst: &mut [DmaBuf],
        dst_layout: &FrameLayout,
        letterbox: Letterbox,
    ) -> Result<()> {
        RgaScaler::bind(self, src, src_layout, dst, dst_layout, letterbox)
    }

    fn scale(&mut self, src: &Frame, dst: &mut WriteLoan<'_>) -> Result<LetterboxParams> {
        RgaScaler::scale(self, src, dst)
    }
}

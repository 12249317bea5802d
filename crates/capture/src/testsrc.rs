//! `testsrc[:WxH[@FPS]]` source: a moving synthetic NV12 pattern, generated in place.
//!
//! Eight vertical colour bars (white, yellow, cyan, green, magenta, red, blue, black, at 75%
//! like SMPTE bars) with a grey box that moves one step per frame, so a frozen pipeline is
//! visible. Bar rows are converted to NV12 once (BT.601 limited range, via the `yuv` crate);
//! [`FrameSource::fill`] copies them row by row into the pool buffer and draws the box. Any
//! size works: odd sizes are padded to even, as [`FrameLayout::nv12`] describes.

use anyhow::bail;
use yuv::{BufferStoreMut, YuvBiPlanarImageMut, YuvConversionMode, YuvRange, YuvStandardMatrix};

use super::image::STRIDE_ALIGN;
use super::spec::MAX_DIMENSION;
use super::{FrameSource, SourceInfo};
use zcpipe_core::frame::FrameLayout;

/// The bar colours, left to right, as RGB at 75% amplitude (191 = 0.75 * 255).
pub const BAR_COLOURS_RGB: [[u8; 3]; 8] =
    [[191, 191, 191], [191, 191, 0], [0, 191, 191], [0, 191, 0], [191, 0, 191], [191, 0, 0], [0, 0, 191], [0, 0, 0]];

/// The moving box's luma and chroma (mid grey, BT.601 limited: Y 126, Cb = Cr = 128).
pub const BOX_YCBCR: [u8; 3] = [126, 128, 128];

/// Synthetic moving pattern of a fixed size.
pub struct TestSource {
    info: SourceInfo,
    layout: FrameLayout,
    /// One luma row of bars, `even(width)` bytes.
    y_row: Vec<u8>,
    /// One CbCr row of bars, `even(width)` bytes.
    uv_row: Vec<u8>,
    frame: u64,
}

impl TestSource {
    /// A `width x height` pattern (pixels, 1..=16384) at `fps` frames per second (or
    /// [`super::spec::FPS_MAX`]).
    pub fn new(width: u32, height: u32, fps: f64) -> anyhow::Result<TestSource> {
        if width == 0 || height == 0 || width > MAX_DIMENSION || height > MAX_DIMENSION {
            bail!("testsrc size {width}x{height} out of range 1..={MAX_DIMENSION}");
        }
        if fps.is_nan() || fps <= 0.0 {
            bail!("testsrc fps {fps} must be positive (or max)");
        }
        let layout = FrameLayout::nv12(width, height, STRIDE_ALIGN);
        let w2 = width.div_ceil(2) as usize * 2;
        // Two RGB rows of bars -> one 2-row NV12 strip, converted once.
        let mut rgb = vec![0u8; w2 * 3 * 2];
        for (x, px) in rgb.chunks_exact_mut(3).enumerate() {
            let bar = (x % w2) * BAR_COLOURS_RGB.len() / w2;
            px.copy_from_slice(&BAR_COLOURS_RGB[bar]);
        }
        let mut y2 = vec![0u8; w2 * 2];
        let mut uv_row = vec![0u8; w2];
        let mut img = YuvBiPlanarImageMut {
            y_plane: BufferStoreMut::Borrowed(&mut y2),
            y_stride: w2 as u32,
            uv_plane: BufferStoreMut::Borrowed(&mut uv_row),
            uv_stride: w2 as u32,
            width: w2 as u32,
            height: 2,
        };
        yuv::rgb_to_yuv_nv12(
            &mut img,
            &rgb,
            (w2 * 3) as u32,
            YuvRange::Limited,
            YuvStandardMatrix::Bt601,
            YuvConversionMode::Balanced,
        )
        .map_err(|e| anyhow::anyhow!("testsrc: RGB to NV12 conversion failed: {e:?}"))?;
        y2.truncate(w2);
        let info = SourceInfo {
            description: format!("testsrc:{width}x{height} NV12 @{}fps", super::spec::fps_name(fps)),
            max_width: width,
            max_height: height,
            fps,
            max_frame_bytes: layout.bytes_needed(),
        };
        Ok(TestSource { info, layout, y_row: y2, uv_row, frame: 0 })
    }

    /// Top-left corner and side, in pixels (all even), of the moving box in frame `n`:
    /// side = even(min(w, h) / 4) (at least 2), moving right 8 pixels per frame and down
    /// 4 per frame, wrapping around.
    pub fn box_rect(&self, n: u64) -> (u32, u32, u32) {
        let (w2, h2) = (self.layout.width.div_ceil(2) * 2, self.layout.height.div_ceil(2) * 2);
        let side = ((w2.min(h2) / 4) & !1).max(2).min(w2.min(h2));
        let span_x = (w2 - side) as u64 + 2;
        let span_y = (h2 - side) as u64 + 2;
        let x = ((n * 8) % span_x) as u32 & !1;
        let y = ((n * 4) % span_y) as u32 & !1;
        (x.min(w2 - side), y.min(h2 - side), side)
    }
}

impl FrameSource for TestSource {
    fn info(&self) -> &SourceInfo {
        &self.info
    }

    /// A pattern: any earlier frame is as good a frame as the next, when unpaced.
    fn reusable(&self) -> bool {
        true
    }

    /// Writes frame number `n` (0, 1, 2, ...) into `dst`; never ends.
    fn fill(&mut self, dst: &mut [u8]) -> anyhow::Result<Option<FrameLayout>> {
        let l = self.layout;
        if (dst.len() as u64) < l.bytes_needed() {
            bail!(
                "testsrc: buffer of {} bytes is too small for a {}x{} NV12 frame ({} bytes)",
                dst.len(),
                l.width,
                l.height,
                l.bytes_needed()
            );
        }
        let bpl = l.planes[0].bytesperline as usize;
        let w2 = self.y_row.len();
        let h2 = l.height.div_ceil(2) as usize * 2;
        let (y_plane, uv_plane) = dst.split_at_mut(l.planes[1].offset as usize);
        for row in y_plane.chunks_exact_mut(bpl).take(h2) {
            row[..w2].copy_from_slice(&self.y_row);
        }
        for row in uv_plane.chunks_exact_mut(bpl).take(h2 / 2) {
            row[..w2].copy_from_slice(&self.uv_row);
        }
        let (bx, by, side) = self.box_rect(self.frame);
        let (bx, by, side) = (bx as usize, by as usize, side as usize);
        for row in y_plane.chunks_exact_mut(bpl).skip(by).take(side) {
            row[bx..bx + side].fill(BOX_YCBCR[0]);
        }
        for row in uv_plane.chunks_exact_mut(bpl).skip(by / 2).take(side / 2) {
            for cbcr in row[bx..bx + side].chunks_exact_mut(2) {
                cbcr.copy_from_slice(&BOX_YCBCR[1..]);
            }
        }
        self.frame += 1;
        Ok(Some(l))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn testsrc_bars_have_bt601_values_and_box_moves() {
        let mut s = TestSource::new(640, 360, 30.0).unwrap();
        assert_eq!(s.info().max_frame_bytes, 640 * 360 * 3 / 2);
        let mut a = vec![0u8; s.info().max_frame_bytes as usize];
        let mut b = a.clone();
        let la = s.fill(&mut a).unwrap().unwrap();
        s.fill(&mut b).unwrap().unwrap();
        la.validate(&[a.len() as u64]).unwrap();
        // Bottom row, centre of each bar: 75% white Y 180, 75% red Y 65 / Cb 100 / Cr 212,
        // black Y 16 (BT.601 limited, +-1 for rounding).
        let y_at = |buf: &[u8], x: usize| buf[359 * 640 + x] as i32;
        let uv_at = |buf: &[u8], x: usize| {
            (buf[640 * 360 + 179 * 640 + x * 2] as i32, buf[640 * 360 + 179 * 640 + x * 2 + 1] as i32)
        };
        assert!((y_at(&a, 40) - 180).abs() <= 1, "white Y {}", y_at(&a, 40));
        assert!((y_at(&a, 5 * 80 + 40) - 65).abs() <= 1, "red Y {}", y_at(&a, 440));
        let (cb, cr) = uv_at(&a, (5 * 80 + 40) / 2);
        assert!((cb - 100).abs() <= 1 && (cr - 212).abs() <= 1, "red CbCr {cb} {cr}");
        assert_eq!(y_at(&a, 7 * 80 + 40), 16);
        // The box moved 8 px right and 4 px down between frames 0 and 1.
        assert_eq!(s.box_rect(0), (0, 0, 90));
        assert_eq!(s.box_rect(1), (8, 4, 90));
        assert_eq!(a[2 * 640 + 2], BOX_YCBCR[0]);
        assert_ne!(b[2 * 640 + 2], BOX_YCBCR[0]);
        assert_eq!(b[6 * 640 + 10], BOX_YCBCR[0]);
        assert_ne!(a, b);
    }

    #[test]
    fn testsrc_any_size_including_odd_and_tiny() {
        for (w, h) in [(1, 1), (3, 5), (451, 301), (1920, 1080)] {
            let mut s = TestSource::new(w, h, 5.0).unwrap();
            let mut buf = vec![0u8; s.info().max_frame_bytes as usize];
            for _ in 0..300 {
                let l = s.fill(&mut buf).unwrap().unwrap();
                assert_eq!((l.width, l.height), (w, h));
                l.validate(&[buf.len() as u64]).unwrap();
            }
        }
        assert!(TestSource::new(0, 10, 5.0).is_err());
        assert!(TestSource::new(10, 10, 0.0).is_err());
        let mut s = TestSource::new(64, 48, 5.0).unwrap();
        assert!(s.fill(&mut [0u8; 100]).is_err());
    }
}

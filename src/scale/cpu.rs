//! `cpu` scaler: any supported capture format -> letterboxed packed BGR24 on the CPU.
//!
//! The contract is YOLOX `preproc` (`yolox/data/data_augment.py`): scale by
//! `r = min(dst_w/src_w, dst_h/src_h)` to `(int(src_w*r), int(src_h*r))` with bilinear
//! interpolation (`cv2.INTER_LINEAR`, here `fast_image_resize`'s
//! `ResizeAlg::Interpolation(FilterType::Bilinear)`, same half-pixel mapping), paste at the
//! top-left, fill the rest with the pad value (114). Source planes are read at their own
//! offset and bytesperline, as the V4L2 pixel-format pages define them (NV12/NV12M,
//! NV16, YUYV, RGB24, BGR24); YCbCr is BT.601 limited range.
//!
//! YCbCr sources are resized per plane (luma as `U8`, interleaved CbCr as `U8x2`, so only
//! model-sized pixels are converted) and then converted to BGR straight into the
//! destination rows by the `yuv` crate. YUYV is converted to BGR at full size first (it has
//! no plane to resize on its own); RGB24/BGR24 are resized as `U8x3` and channel-swapped
//! if needed. Scratch buffers are kept across frames and only grow.

use anyhow::{bail, Context};

use crate::core::dmabuf::DmaBuf;
use crate::core::pool::{Frame, WriteLoan};
use fast_image_resize::images::{TypedCroppedImage, TypedImage, TypedImageRef};
use fast_image_resize::pixels::{U8x2, U8x3, U8};
use fast_image_resize::{FilterType, PixelTrait, ResizeAlg, ResizeOptions, Resizer};
use yuv::{YuvBiPlanarImage, YuvConversionMode, YuvPackedImage, YuvRange, YuvStandardMatrix};

use super::{fill_pad, map_frame, Scaler};
use crate::core::frame::{Fourcc, FrameLayout, LetterboxParams};

/// Source fourccs the CPU scaler reads.
pub const SUPPORTED_SOURCES: [Fourcc; 6] =
    [Fourcc::NV12, Fourcc::NV12M, Fourcc::NV16, Fourcc::YUYV, Fourcc::RGB24, Fourcc::BGR24];

/// The YOLOX letterbox pad value (`preproc`'s `np.ones(...) * 114`).
pub const YOLOX_PAD: u8 = 114;

/// CPU scaler: bilinear resize, BT.601 limited YCbCr -> BGR, top-left letterbox.
#[derive(Default)]
pub struct CpuScaler {
    /// The model input and pad value, from [`Scaler::bind`].
    dst: Option<(FrameLayout, u8)>,
    resizer: Resizer,
    /// Resized luma, `resized_w x resized_h` bytes.
    y: Vec<u8>,
    /// Resized CbCr pairs, `ceil(resized_w/2) x ceil(resized_h/2) x 2` bytes.
    uv: Vec<u8>,
    /// A source plane copied to tight rows, when its bytesperline is not a whole number of
    /// pixels or its last row stops short of a full bytesperline.
    rows: Vec<u8>,
    /// A YUYV frame converted to BGR at full size, `width x height x 3` bytes.
    full: Vec<u8>,
    /// Resized packed RGB/BGR, `resized_w x resized_h x 3` bytes.
    bgr: Vec<u8>,
}

impl CpuScaler {
    /// A scaler with empty scratch buffers (they are sized by the first frame).
    pub fn new() -> CpuScaler {
        CpuScaler::default()
    }
}

/// Bytes of plane `i` of `layout` from its offset to the end of its dma-buf.
fn plane<'a>(src: &[&'a [u8]], layout: &FrameLayout, i: usize) -> anyhow::Result<&'a [u8]> {
    let p = layout.planes[i];
    src.get(p.fd_index as usize)
        .and_then(|b| b.get(p.offset as usize..))
        .with_context(|| format!("plane {i}: fd_index {} / offset {} outside the source buffers", p.fd_index, p.offset))
}

fn resize_options() -> ResizeOptions {
    // use_alpha(false): U8x2 would otherwise be treated as luma+alpha and premultiplied.
    ResizeOptions::new().resize_alg(ResizeAlg::Interpolation(FilterType::Bilinear)).use_alpha(false)
}

/// The `rows` rows of `row` bytes each of a plane whose rows start every `bpl` bytes, as
/// `(bytes, stride)` holding `stride * rows` bytes: the plane itself when it has full rows and
/// `bpl % unit == 0`, else a tight copy in `scratch`.
fn full_rows<'a>(plane: &'a [u8], bpl: usize, row: usize, rows: usize, unit: usize, scratch: &'a mut Vec<u8>) -> anyhow::Result<(&'a [u8], usize)> {
    if bpl < row || rows == 0 || plane.len() < bpl * (rows - 1) + row {
        bail!("plane of {} bytes too small for {rows} rows of {row} bytes at bytesperline {bpl}", plane.len());
    }
    if bpl.is_multiple_of(unit) && plane.len() >= bpl * rows {
        return Ok((&plane[..bpl * rows], bpl));
    }
    scratch.clear();
    for r in 0..rows {
        scratch.extend_from_slice(&plane[r * bpl..r * bpl + row]);
    }
    Ok((scratch.as_slice(), row))
}

/// Resizes a `w x h` plane of `P` pixels whose rows start every `bpl` bytes of `plane`
/// into `out` (packed `dw x dh`), bilinear. Viewed in place when `bpl` is a whole number of
/// pixels; otherwise the rows are first packed into `scratch`.
fn resize_plane<P: PixelTrait>(
    resizer: &mut Resizer,
    plane: &[u8],
    bpl: usize,
    (w, h): (u32, u32),
    scratch: &mut Vec<u8>,
    out: &mut Vec<u8>,
    (dw, dh): (u32, u32),
) -> anyhow::Result<()> {
    let ps = std::mem::size_of::<P>();
    let (bytes, stride) = full_rows(plane, bpl, w as usize * ps, h as usize, ps, scratch)?;
    out.resize(dw as usize * dh as usize * ps, 0);
    let mut dst = TypedImage::<P>::from_buffer(dw, dh, out).context("resize destination")?;
    let full = TypedImageRef::<P>::from_buffer((stride / ps) as u32, h, bytes).context("resize source")?;
    // A cropped view, not a crop box: the resizer must not see the stride padding.
    let view = TypedCroppedImage::from_ref(&full, 0, 0, w, h).context("resize source crop")?;
    resizer.resize_typed(&view, &mut dst, &resize_options()).context("resize")?;
    Ok(())
}

/// Copies the tight `row`-byte rows of `src` into `dst`, whose rows start every `bpl` bytes.
fn copy_rows(src: &[u8], row: usize, dst: &mut [u8], bpl: usize) {
    for (d, s) in dst.chunks_mut(bpl).zip(src.chunks_exact(row)) {
        if let Some(d) = d.get_mut(..row) {
            d.copy_from_slice(s);
        }
    }
}

impl Scaler for CpuScaler {
    fn name(&self) -> String {
        "cpu scaler".into()
    }

    /// Checks the conversion ([`CpuScaler::check`]); the source's fourcc is NV12 when the
    /// source's layout varies (the host sources write NV12).
    fn bind(&mut self, _src: &[Vec<DmaBuf>], src_layout: Option<&FrameLayout>, _dst: &mut [DmaBuf], dst_layout: &FrameLayout, pad: u8) -> anyhow::Result<()> {
        let src = src_layout.map(|l| l.fourcc).unwrap_or(Fourcc::NV12);
        self.check(src, dst_layout).map_err(|e| anyhow::anyhow!("cpu scaler cannot feed the model: {e:#}"))?;
        self.dst = Some((*dst_layout, pad));
        Ok(())
    }

    fn scale(&mut self, src: &Frame, dst: &mut WriteLoan<'_>) -> anyhow::Result<LetterboxParams> {
        let (dl, pad) = self.dst.ok_or_else(|| anyhow::anyhow!("cpu scaler: scale before bind"))?;
        map_frame(src, dst, |s, sl, d| self.scale_bytes(s, sl, d, &dl, pad))
    }
}

impl CpuScaler {
    /// Accepts [`SUPPORTED_SOURCES`] into a one-plane BGR24 destination whose bytesperline
    /// holds `width * 3` bytes.
    pub fn check(&self, src: Fourcc, dst: &FrameLayout) -> anyhow::Result<()> {
        if dst.fourcc != Fourcc::BGR24 {
            bail!("cpu scaler cannot produce {} (model input); it writes BGR24", dst.fourcc);
        }
        if !SUPPORTED_SOURCES.contains(&src) {
            bail!("cpu scaler cannot read {src} (capture output); it reads NV12, NV12M, NV16, YUYV, RGB24 and BGR24");
        }
        if dst.num_planes != 1 || dst.width == 0 || dst.height == 0 {
            bail!("cpu scaler: model input BGR24 {}x{} with {} planes; it needs one plane and a non-empty size", dst.width, dst.height, dst.num_planes);
        }
        if (dst.planes[0].bytesperline as u64) < dst.width as u64 * 3 {
            bail!("cpu scaler: model input bytesperline {} < {} (BGR24 width {} x 3)", dst.planes[0].bytesperline, dst.width * 3, dst.width);
        }
        Ok(())
    }

    /// Scales one mapped frame: `src[i]` is the mapped dma-buf `i` of the source buffer
    /// (planes name theirs with `fd_index`); `dst` is the mapped output buffer, written per
    /// `dst_layout` (rows of `bytesperline` bytes). The letterbox area outside the picture
    /// is filled with `pad`. Returns how the output maps back to the source.
    pub fn scale_bytes(
        &mut self,
        src: &[&[u8]],
        src_layout: &FrameLayout,
        dst: &mut [u8],
        dst_layout: &FrameLayout,
        pad: u8,
    ) -> anyhow::Result<LetterboxParams> {
        let sl = src_layout;
        self.check(sl.fourcc, dst_layout)?;
        let sizes: Vec<u64> = src.iter().map(|b| b.len() as u64).collect();
        sl.validate(&sizes).map_err(|e| anyhow::anyhow!("cpu scaler: source {} frame: {e}", sl.fourcc))?;
        dst_layout.validate(&[dst.len() as u64]).map_err(|e| anyhow::anyhow!("cpu scaler: model input: {e}"))?;

        let lb = LetterboxParams::top_left(sl.width, sl.height, dst_layout.width, dst_layout.height);
        let (w, h) = (sl.width, sl.height);
        let (rw, rh) = (lb.resized_w, lb.resized_h);
        let (dw, dh) = (dst_layout.width as usize, dst_layout.height as usize);
        let dp = dst_layout.planes[0];
        let dbpl = dp.bytesperline;
        let out = &mut dst[dp.offset as usize..dp.offset as usize + dp.length as usize];
        // Exactly the picture rows (rh <= dh, so they fit): the yuv crate walks source and
        // destination with chunks_exact(stride) and takes the remainder as an odd last row.
        let pic = &mut out[..dbpl as usize * rh as usize];
        let err = |e: yuv::YuvError| anyhow::anyhow!("cpu scaler: {} -> BGR24 conversion failed: {e:?}", sl.fourcc);

        match sl.fourcc {
            Fourcc::NV12 | Fourcc::NV12M | Fourcc::NV16 => {
                let (cw, crw, crh) = (w.div_ceil(2), rw.div_ceil(2), rh.div_ceil(2));
                let ch = if sl.fourcc == Fourcc::NV16 { h } else { h.div_ceil(2) };
                let (yp, up) = (plane(src, sl, 0)?, plane(src, sl, 1)?);
                let (ybpl, ubpl) = (sl.planes[0].bytesperline as usize, sl.planes[1].bytesperline as usize);
                resize_plane::<U8>(&mut self.resizer, yp, ybpl, (w, h), &mut self.rows, &mut self.y, (rw, rh))
                    .with_context(|| format!("cpu scaler: {} luma", sl.fourcc))?;
                resize_plane::<U8x2>(&mut self.resizer, up, ubpl, (cw, ch), &mut self.rows, &mut self.uv, (crw, crh))
                    .with_context(|| format!("cpu scaler: {} CbCr", sl.fourcc))?;
                let img = YuvBiPlanarImage { y_plane: &self.y, y_stride: rw, uv_plane: &self.uv, uv_stride: crw * 2, width: rw, height: rh };
                yuv::yuv_nv12_to_bgr(&img, pic, dbpl, YuvRange::Limited, YuvStandardMatrix::Bt601, YuvConversionMode::Balanced)
                    .map_err(err)?;
            }
            Fourcc::YUYV => {
                let yp = plane(src, sl, 0)?;
                let row = w.div_ceil(2) as usize * 4;
                let (bytes, stride) = full_rows(yp, sl.planes[0].bytesperline as usize, row, h as usize, 1, &mut self.rows)
                    .context("cpu scaler: YUYV")?;
                let packed = YuvPackedImage { yuy: bytes, yuy_stride: stride as u32, width: w, height: h };
                self.full.resize(w as usize * h as usize * 3, 0);
                yuv::yuyv422_to_bgr(&packed, &mut self.full, w * 3, YuvRange::Limited, YuvStandardMatrix::Bt601).map_err(err)?;
                resize_plane::<U8x3>(&mut self.resizer, &self.full, w as usize * 3, (w, h), &mut self.rows, &mut self.bgr, (rw, rh))
                    .context("cpu scaler: YUYV")?;
                copy_rows(&self.bgr, rw as usize * 3, pic, dbpl as usize);
            }
            Fourcc::RGB24 | Fourcc::BGR24 => {
                let p = plane(src, sl, 0)?;
                resize_plane::<U8x3>(&mut self.resizer, p, sl.planes[0].bytesperline as usize, (w, h), &mut self.rows, &mut self.bgr, (rw, rh))
                    .with_context(|| format!("cpu scaler: {}", sl.fourcc))?;
                if sl.fourcc == Fourcc::RGB24 {
                    yuv::rgb_to_bgr(&self.bgr, rw * 3, pic, dbpl, rw, rh).map_err(err)?;
                } else {
                    copy_rows(&self.bgr, rw as usize * 3, pic, dbpl as usize);
                }
            }
            other => bail!("cpu scaler cannot read {other}"),
        }
        fill_pad(out, dbpl as usize, (dw, dh), (rw as usize, rh as usize), pad);
        Ok(lb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::image::{decode_rgb8, rgb8_to_nv12};
    use crate::core::frame::{PlaneDesc, MAX_PLANES};
    use std::path::{Path, PathBuf};
    use yuv::{BufferStoreMut, YuvBiPlanarImageMut, YuvChromaSubsampling, YuvPackedImageMut, YuvPlanarImageMut};

    fn data(rel: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(rel)
    }

    /// BT.601 limited-range red: R 255 G 0 B 0 -> Y 81, Cb 90, Cr 240.
    const RED_YCBCR: [u8; 3] = [81, 90, 240];

    fn solid_nv12(w: u32, h: u32, ycbcr: [u8; 3]) -> (FrameLayout, Vec<u8>) {
        let l = FrameLayout::nv12(w, h, 16);
        let mut buf = vec![0u8; l.bytes_needed() as usize];
        let (y, uv) = buf.split_at_mut(l.planes[1].offset as usize);
        y.fill(ycbcr[0]);
        for p in uv.chunks_exact_mut(2) {
            p.copy_from_slice(&ycbcr[1..]);
        }
        (l, buf)
    }

    fn model_input(bpl: u32) -> (FrameLayout, Vec<u8>) {
        let l = FrameLayout::packed24(Fourcc::BGR24, 416, 416, bpl);
        (l, vec![0xEEu8; l.bytes_needed() as usize])
    }

    /// Checks a letterboxed solid-colour output: `bgr` inside the picture (+-tol), exactly
    /// `pad` outside it, and `stride` bytes past width*3 untouched (0xEE).
    fn assert_letterbox(out: &[u8], bpl: usize, (rw, rh): (usize, usize), bgr: [u8; 3], tol: i32, pad: u8) {
        for (y, row) in out.chunks(bpl).take(416).enumerate() {
            for x in 0..416 {
                let px = &row[x * 3..x * 3 + 3];
                if x < rw && y < rh {
                    for c in 0..3 {
                        assert!((px[c] as i32 - bgr[c] as i32).abs() <= tol, "({x},{y}) {px:?} vs {bgr:?}");
                    }
                } else {
                    assert_eq!(px, [pad; 3], "pad at ({x},{y})");
                }
            }
            assert!(row[416 * 3..].iter().all(|&b| b == 0xEE), "stride padding written in row {y}");
        }
    }

    #[test]
    fn scaler_solid_red_768x576_letterboxes_to_416x312() {
        let (sl, src) = solid_nv12(768, 576, RED_YCBCR);
        let (dl, mut dst) = model_input(416 * 3);
        let mut s = CpuScaler::new();
        s.check(sl.fourcc, &dl).unwrap();
        let lb = s.scale_bytes(&[&src], &sl, &mut dst, &dl, YOLOX_PAD).unwrap();
        assert_eq!((lb.resized_w, lb.resized_h, lb.src_w, lb.src_h), (416, 312, 768, 576));
        println!("first pixel {:?}, last picture pixel {:?}", &dst[..3], &dst[(311 * 416 + 415) * 3..][..3]);
        assert_letterbox(&dst, 416 * 3, (416, 312), [0, 0, 255], 2, 114);
    }

    #[test]
    fn scaler_solid_red_451x300_and_stride_424x3() {
        let (sl, src) = solid_nv12(451, 300, RED_YCBCR);
        let (dl, mut dst) = model_input(424 * 3);
        let mut s = CpuScaler::new();
        let lb = s.scale_bytes(&[&src], &sl, &mut dst, &dl, YOLOX_PAD).unwrap();
        // r = min(416/451, 416/300) = 0.9224 -> int(451 r) = 416, int(300 r) = 276
        assert_eq!((lb.resized_w, lb.resized_h), (416, 276));
        assert_letterbox(&dst, 424 * 3, (416, 276), [0, 0, 255], 2, 114);
        // A second frame through the same scratch buffers gives the same bytes.
        let first = dst.clone();
        s.scale_bytes(&[&src], &sl, &mut dst, &dl, YOLOX_PAD).unwrap();
        assert_eq!(first, dst);
    }

    #[test]
    fn scaler_odd_resized_heights() {
        // 640x427 -> 416x277 (odd in f32 and f64 alike); 1280x720 -> 416x233 with today's f32
        // LetterboxParams (YOLOX's float64 gives 234). The yuv crate needs the destination
        // cut to exactly the picture rows for an odd height.
        let mut s = CpuScaler::new();
        for (w, h) in [(640u32, 427u32), (1280, 720)] {
            let (sl, src) = solid_nv12(w, h, RED_YCBCR);
            let (dl, mut dst) = model_input(424 * 3);
            let lb = s.scale_bytes(&[&src], &sl, &mut dst, &dl, 114).unwrap();
            println!("{w}x{h} -> {}x{}", lb.resized_w, lb.resized_h);
            if (w, h) == (640, 427) {
                assert_eq!((lb.resized_w, lb.resized_h), (416, 277));
            }
            let pic = (lb.resized_w as usize, lb.resized_h as usize);
            assert_letterbox(&dst, 424 * 3, pic, [0, 0, 255], 2, 114);
            // Same for the RGB24 path (channel swap into the picture rows).
            let rgb = [255u8, 0, 0].repeat((w * h) as usize);
            let mut pl = [PlaneDesc::default(); MAX_PLANES];
            pl[0] = PlaneDesc { offset: 0, bytesperline: w * 3, length: w * h * 3, fd_index: 0 };
            let rl = FrameLayout { fourcc: Fourcc::RGB24, width: w, height: h, num_planes: 1, planes: pl };
            let (_, mut dst2) = model_input(424 * 3);
            s.scale_bytes(&[&rgb], &rl, &mut dst2, &dl, 114).unwrap();
            assert_letterbox(&dst2, 424 * 3, pic, [0, 0, 255], 0, 114);
        }
    }

    #[test]
    fn scaler_small_source_upscales_and_pads() {
        // 64x48 -> r = 6.5 -> 416x312; the last rows are 114 and the stride padding is kept.
        let (sl, src) = solid_nv12(64, 48, RED_YCBCR);
        let (dl, mut dst) = model_input(424 * 3);
        let lb = CpuScaler::new().scale_bytes(&[&src], &sl, &mut dst, &dl, 114).unwrap();
        assert_eq!((lb.resized_w, lb.resized_h), (416, 312));
        assert_letterbox(&dst, 424 * 3, (416, 312), [0, 0, 255], 2, 114);
    }

    #[test]
    fn scaler_check_names_both_sides() {
        let s = CpuScaler::new();
        let rgb = FrameLayout::packed24(Fourcc::RGB24, 416, 416, 416 * 3);
        let e = s.check(Fourcc::NV12, &rgb).unwrap_err().to_string();
        println!("{e}");
        assert_eq!(e, "cpu scaler cannot produce RGB3 (model input); it writes BGR24");
        let bgr = FrameLayout::packed24(Fourcc::BGR24, 416, 416, 416 * 3);
        let e = s.check(Fourcc::new(b"MJPG"), &bgr).unwrap_err().to_string();
        println!("{e}");
        assert!(e.contains("cannot read MJPG (capture output)") && e.contains("BGR24"), "{e}");
        let narrow = FrameLayout::packed24(Fourcc::BGR24, 416, 416, 416);
        assert!(s.check(Fourcc::NV12, &narrow).is_err());
        for f in SUPPORTED_SOURCES {
            s.check(f, &bgr).unwrap();
        }
    }

    #[test]
    fn scaler_rejects_bad_frames_without_panicking() {
        let mut s = CpuScaler::new();
        let (sl, src) = solid_nv12(64, 48, RED_YCBCR);
        let (dl, mut dst) = model_input(416 * 3);
        // Source buffer too short.
        let e = s.scale_bytes(&[&src[..100]], &sl, &mut dst, &dl, 114).unwrap_err();
        println!("{e}");
        // Missing second buffer for NV12M.
        let mut m = sl;
        m.fourcc = Fourcc::NV12M;
        m.planes[1].fd_index = 1;
        m.planes[1].offset = 0;
        assert!(s.scale_bytes(&[&src], &m, &mut dst, &dl, 114).is_err());
        // Destination too short.
        assert!(s.scale_bytes(&[&src], &sl, &mut dst[..1000], &dl, 114).is_err());
    }

    /// The same RGB picture in every source format, each with its own odd stride.
    fn all_formats(rgb: &[u8], w: u32, h: u32) -> Vec<(FrameLayout, Vec<Vec<u8>>)> {
        let (wu, hu) = (w as usize, h as usize);
        let (cw, ch) = (wu.div_ceil(2), hu.div_ceil(2));
        let mut out = Vec::new();
        let layout = |fourcc, planes: &[PlaneDesc]| {
            let mut p = [PlaneDesc::default(); MAX_PLANES];
            p[..planes.len()].copy_from_slice(planes);
            FrameLayout { fourcc, width: w, height: h, num_planes: planes.len() as u32, planes: p }
        };

        // NV12 as the image source writes it.
        let (l, nv12) = rgb8_to_nv12(rgb, w, h).unwrap();
        out.push((l, vec![nv12.clone()]));

        // NV12M: luma and CbCr in two buffers at odd offsets and a wider stride.
        let (ybpl, off) = (wu + 40, 7usize);
        let mut b0 = vec![0u8; off + ybpl * hu];
        let mut b1 = vec![0u8; off + ybpl * ch];
        for r in 0..hu {
            b0[off + r * ybpl..][..wu].copy_from_slice(&nv12[r * l.planes[0].bytesperline as usize..][..wu]);
        }
        for r in 0..ch {
            b1[off + r * ybpl..][..cw * 2].copy_from_slice(&nv12[l.planes[1].offset as usize + r * l.planes[1].bytesperline as usize..][..cw * 2]);
        }
        let m = layout(Fourcc::NV12M, &[
            PlaneDesc { offset: off as u32, bytesperline: ybpl as u32, length: (ybpl * hu) as u32, fd_index: 0 },
            PlaneDesc { offset: off as u32, bytesperline: ybpl as u32, length: (ybpl * ch) as u32, fd_index: 1 },
        ]);
        out.push((m, vec![b0, b1]));

        // NV16 at bytesperline w + 6 (even, not 16-aligned).
        let bpl = (cw * 2 + 6) as u32;
        let mut nv16 = vec![0u8; bpl as usize * hu * 2];
        let (y, uv) = nv16.split_at_mut(bpl as usize * hu);
        let mut img = YuvBiPlanarImageMut { y_plane: BufferStoreMut::Borrowed(y), y_stride: bpl, uv_plane: BufferStoreMut::Borrowed(uv), uv_stride: bpl, width: w, height: h };
        yuv::rgb_to_yuv_nv16(&mut img, rgb, w * 3, YuvRange::Limited, YuvStandardMatrix::Bt601, YuvConversionMode::Balanced).unwrap();
        let l16 = layout(Fourcc::NV16, &[
            PlaneDesc { offset: 0, bytesperline: bpl, length: bpl * h, fd_index: 0 },
            PlaneDesc { offset: bpl * h, bytesperline: bpl, length: bpl * h, fd_index: 0 },
        ]);
        out.push((l16, vec![nv16]));

        // YUYV at bytesperline 2*even(w) + 10.
        let mut planar = YuvPlanarImageMut::<u8>::alloc(w, h, YuvChromaSubsampling::Yuv422);
        yuv::rgb_to_yuv422(&mut planar, rgb, w * 3, YuvRange::Limited, YuvStandardMatrix::Bt601, YuvConversionMode::Balanced).unwrap();
        let ybpl = (cw * 4 + 10) as u32;
        let mut yuyv = vec![0u8; ybpl as usize * hu];
        let mut packed = YuvPackedImageMut { yuy: BufferStoreMut::Borrowed(&mut yuyv), yuy_stride: ybpl, width: w, height: h };
        yuv::yuv422_to_yuyv422(&mut packed, &planar.to_fixed()).unwrap();
        // The buffer ends right after the last row's pixels (no stride padding after it).
        let len = ybpl * (h - 1) + cw as u32 * 4;
        yuyv.truncate(len as usize);
        out.push((layout(Fourcc::YUYV, &[PlaneDesc { offset: 0, bytesperline: ybpl, length: len, fd_index: 0 }]), vec![yuyv]));

        // RGB24 and BGR24 at bytesperline 3w + 1 (not a whole number of pixels).
        let bpl = w * 3 + 1;
        let mut rgb24 = vec![0u8; (bpl * h) as usize];
        let mut bgr24 = vec![0u8; (bpl * h) as usize];
        for r in 0..hu {
            let s = &rgb[r * wu * 3..][..wu * 3];
            rgb24[r * bpl as usize..][..wu * 3].copy_from_slice(s);
            for (d, p) in bgr24[r * bpl as usize..][..wu * 3].chunks_exact_mut(3).zip(s.chunks_exact(3)) {
                d.copy_from_slice(&[p[2], p[1], p[0]]);
            }
        }
        let pd = [PlaneDesc { offset: 0, bytesperline: bpl, length: bpl * h, fd_index: 0 }];
        out.push((layout(Fourcc::RGB24, &pd), vec![rgb24]));
        out.push((layout(Fourcc::BGR24, &pd), vec![bgr24]));
        out
    }

    fn mean_abs_diff(a: &[u8], b: &[u8]) -> f64 {
        a.iter().zip(b).map(|(&x, &y)| (x as i32 - y as i32).unsigned_abs() as u64).sum::<u64>() as f64 / a.len() as f64
    }

    #[test]
    fn scaler_every_source_format_gives_same_bgr() {
        let img = decode_rgb8(&data("chelsea.png")).unwrap();
        let (w, h) = img.dimensions();
        let (dl, _) = model_input(416 * 3);
        let mut s = CpuScaler::new();
        let mut results = Vec::new();
        for (l, bufs) in all_formats(img.as_raw(), w, h) {
            let mut dst = vec![0u8; dl.bytes_needed() as usize];
            let refs: Vec<&[u8]> = bufs.iter().map(|b| b.as_slice()).collect();
            s.scale_bytes(&refs, &l, &mut dst, &dl, 114).unwrap();
            results.push((l.fourcc, dst));
        }
        let reference = &results.iter().find(|(f, _)| *f == Fourcc::RGB24).unwrap().1;
        for (f, dst) in &results {
            let mad = mean_abs_diff(dst, reference);
            let max = dst.iter().zip(reference).map(|(&a, &b)| (a as i32 - b as i32).abs()).max().unwrap();
            println!("{f} vs RGB24: mean abs diff {mad:.3}, max {max}");
            assert!(mad < 2.0, "{f}: {mad}");
            assert_eq!(&dst[(300 * 416) * 3..], &reference[(300 * 416) * 3..], "{f}: pad rows");
        }
        let bgr = &results.iter().find(|(f, _)| *f == Fourcc::BGR24).unwrap().1;
        assert_eq!(bgr, reference, "RGB24 and BGR24 sources must match exactly");
    }

    fn golden_dog() -> Vec<u8> {
        let p = data("golden/dog_input_u8_nhwc_bgr_416.bin");
        let g = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert_eq!(g.len(), 416 * 416 * 3);
        g
    }

    #[test]
    fn scaler_dog_matches_cv2_letterbox_golden() {
        let golden = golden_dog();
        let img = decode_rgb8(&data("dog.jpg")).unwrap();
        let (w, h) = img.dimensions();
        let (dl, _) = model_input(416 * 3);
        let mut s = CpuScaler::new();

        // image -> NV12 -> scaler (the pipeline's path).
        let mut src = crate::capture::image::ImageSource::open(&data("dog.jpg"), None).unwrap();
        use crate::capture::FrameSource;
        let mut nv12 = vec![0u8; src.info().max_frame_bytes as usize];
        let sl = src.fill(&mut nv12).unwrap().unwrap();
        let mut out = vec![0u8; dl.bytes_needed() as usize];
        let lb = s.scale_bytes(&[&nv12], &sl, &mut out, &dl, YOLOX_PAD).unwrap();
        assert_eq!((lb.resized_w, lb.resized_h), (416, 312));
        let mad_nv12 = mean_abs_diff(&out, &golden);
        let mad_nv12_picture = mean_abs_diff(&out[..416 * 312 * 3], &golden[..416 * 312 * 3]);

        // RGB24 -> scaler (isolates the resize from the YCbCr round trip and JPEG decoder).
        let pd = [PlaneDesc { offset: 0, bytesperline: w * 3, length: w * h * 3, fd_index: 0 }, PlaneDesc::default(), PlaneDesc::default()];
        let rl = FrameLayout { fourcc: Fourcc::RGB24, width: w, height: h, num_planes: 1, planes: pd };
        let mut out_rgb = vec![0u8; dl.bytes_needed() as usize];
        s.scale_bytes(&[img.as_raw()], &rl, &mut out_rgb, &dl, YOLOX_PAD).unwrap();
        let mad_rgb = mean_abs_diff(&out_rgb[..416 * 312 * 3], &golden[..416 * 312 * 3]);

        println!("dog.jpg vs cv2 golden: NV12 path mean abs diff {mad_nv12:.3} (whole input), {mad_nv12_picture:.3} (picture area); RGB24 path {mad_rgb:.3} (picture area)");
        assert_eq!(&out[416 * 312 * 3..], &golden[416 * 312 * 3..], "pad rows are 114 in both");
        assert!(mad_nv12_picture < 6.0, "{mad_nv12_picture}");
        assert!(mad_rgb < 2.0, "{mad_rgb}");
    }
}

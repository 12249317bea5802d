//! The letterbox on the CPU: any supported frame format -> packed RGB24 or BGR24 model input.
//!
//! The contract is the model family's published pre-processing: scale by
//! `r = min(dst_w/src_w, dst_h/src_h)` with bilinear interpolation (`cv2.INTER_LINEAR`,
//! here `fast_image_resize`'s `ResizeAlg::Interpolation(FilterType::Bilinear)`, same
//! half-pixel mapping), and either paste the `(int(src_w*r), int(src_h*r))` picture at the
//! top-left (YOLOX `preproc`, `yolox/data/data_augment.py`) or the
//! `(round(src_w*r), round(src_h*r))` one centred (Ultralytics `LetterBox`, YOLOv5
//! `letterbox`): [`Letterbox::params`]. The rest is the pad value (114), the channel order
//! the destination's fourcc (BGR24 for YOLOX, RGB24 for the others). Source planes are read at their own
//! offset and bytesperline, as the V4L2 pixel-format pages define them (NV12/NV12M,
//! NV16, YUYV, RGB24, BGR24); YCbCr is BT.601 limited range.
//!
//! YCbCr sources are resized per plane (luma as `U8`, interleaved CbCr as `U8x2`, so only
//! model-sized pixels are converted) and then converted to RGB or BGR straight into the
//! destination rows by the `yuv` crate. YUYV is converted at full size first (it has
//! no plane to resize on its own); RGB24/BGR24 are resized as `U8x3` and channel-swapped
//! if the model wants the other order. Scratch buffers are kept across frames and only grow.

use anyhow::{bail, Context};

use crate::fill_pad;
use fast_image_resize::images::{TypedCroppedImage, TypedImage, TypedImageRef};
use fast_image_resize::pixels::{U8x2, U8x3, U8};
use fast_image_resize::{FilterType, PixelTrait, ResizeAlg, ResizeOptions, Resizer};
use yuv::{YuvBiPlanarImage, YuvConversionMode, YuvPackedImage, YuvRange, YuvStandardMatrix};
use zcpipe_core::frame::{Fourcc, FrameLayout, Letterbox, LetterboxParams};

/// Source fourccs the CPU scaler reads.
pub const SUPPORTED_SOURCES: [Fourcc; 7] =
    [Fourcc::NV12, Fourcc::NV12M, Fourcc::NV16, Fourcc::YUYV, Fourcc::RGB24, Fourcc::BGR24, Fourcc::XR24];

/// The YOLOX letterbox pad value (`preproc`'s `np.ones(...) * 114`).
pub const YOLOX_PAD: u8 = 114;

/// CPU scaler: bilinear resize, BT.601 limited YCbCr -> RGB or BGR, top-left or centred
/// letterbox.
#[derive(Default)]
pub struct Letterboxer {
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
    packed: Vec<u8>,
    /// The converted picture in tight rows, when it cannot be written in place.
    pic: Vec<u8>,
}

impl Letterboxer {
    /// A scaler with empty scratch buffers (they are sized by the first frame).
    pub fn new() -> Letterboxer {
        Letterboxer::default()
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
fn full_rows<'a>(
    plane: &'a [u8],
    bpl: usize,
    row: usize,
    rows: usize,
    unit: usize,
    scratch: &'a mut Vec<u8>,
) -> anyhow::Result<(&'a [u8], usize)> {
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

impl Letterboxer {
    /// Accepts [`SUPPORTED_SOURCES`] into a one-plane RGB24 or BGR24 destination whose
    /// bytesperline holds `width * 3` bytes.
    pub fn check(&self, src: Fourcc, dst: &FrameLayout) -> anyhow::Result<()> {
        if dst.fourcc != Fourcc::BGR24 && dst.fourcc != Fourcc::RGB24 {
            bail!("cpu scaler cannot produce {} (model input); it writes RGB24 and BGR24", dst.fourcc);
        }
        if !SUPPORTED_SOURCES.contains(&src) {
            bail!("cpu scaler cannot read {src} (capture output); it reads NV12, NV12M, NV16, YUYV, RGB24, BGR24 and XR24");
        }
        if dst.num_planes != 1 || dst.width == 0 || dst.height == 0 {
            bail!(
                "cpu scaler: model input {} {}x{} with {} planes; it needs one plane and a non-empty size",
                dst.fourcc,
                dst.width,
                dst.height,
                dst.num_planes
            );
        }
        if (dst.planes[0].bytesperline as u64) < dst.width as u64 * 3 {
            bail!(
                "cpu scaler: model input bytesperline {} < {} ({} width {} x 3)",
                dst.planes[0].bytesperline,
                dst.width * 3,
                dst.fourcc,
                dst.width
            );
        }
        Ok(())
    }

    /// Scales one mapped frame: `src[i]` is the mapped dma-buf `i` of the source buffer
    /// (planes name theirs with `fd_index`); `dst` is the mapped output buffer, written per
    /// `dst_layout` (rows of `bytesperline` bytes, its fourcc the channel order: RGB24 or
    /// BGR24), the picture placed as `letterbox` says ([`Letterbox::params`]) and the area
    /// around it filled with `letterbox.pad`. Returns how the output maps back to the source.
    pub fn scale_bytes(
        &mut self,
        src: &[&[u8]],
        src_layout: &FrameLayout,
        dst: &mut [u8],
        dst_layout: &FrameLayout,
        letterbox: Letterbox,
    ) -> anyhow::Result<LetterboxParams> {
        let sl = src_layout;
        self.check(sl.fourcc, dst_layout)?;
        let sizes: Vec<u64> = src.iter().map(|b| b.len() as u64).collect();
        sl.validate(&sizes).map_err(|e| anyhow::anyhow!("cpu scaler: source {} frame: {e}", sl.fourcc))?;
        dst_layout.validate(&[dst.len() as u64]).map_err(|e| anyhow::anyhow!("cpu scaler: model input: {e}"))?;

        let lb = letterbox.params(sl.width, sl.height, dst_layout.width, dst_layout.height);
        let (x, y, rw, rh) = lb.picture();
        let (dw, dh) = (dst_layout.width as usize, dst_layout.height as usize);
        let dp = dst_layout.planes[0];
        let dbpl = dp.bytesperline as usize;
        let out = &mut dst[dp.offset as usize..dp.offset as usize + dp.length as usize];
        // The picture is written in place when exactly its `rh` rows, from its first pixel
        // on, fit in the output (the yuv crate walks source and destination with
        // chunks_exact(stride) and takes the remainder as an odd last row, so it needs the
        // destination cut to exactly the picture rows); a picture that ends on the last row
        // and starts right of column 0 (a pillarbox filling the height) is written into
        // tight rows first and copied.
        let at = y as usize * dbpl + x as usize * 3;
        let in_place = at + dbpl * rh as usize <= out.len();
        let mut tight = std::mem::take(&mut self.pic);
        let (pic, pic_bpl): (&mut [u8], usize) = if in_place {
            (&mut out[at..at + dbpl * rh as usize], dbpl)
        } else {
            tight.resize(rw as usize * 3 * rh as usize, 0);
            (&mut tight[..], rw as usize * 3)
        };
        self.convert(src, sl, dst_layout.fourcc, pic, pic_bpl, (rw, rh))?;
        if !in_place {
            copy_rows(&tight, rw as usize * 3, &mut out[at..], dbpl);
        }
        self.pic = tight;
        fill_pad(out, dbpl, (dw, dh), (x, y, rw, rh), letterbox.pad);
        Ok(lb)
    }

    /// Converts and resizes the source picture (`src`, per `sl`) into `pic` (rows of `pic_bpl`
    /// bytes, `rw` x `rh` pixels) in `dst_fourcc`'s channel order (RGB24 or BGR24).
    fn convert(
        &mut self,
        src: &[&[u8]],
        sl: &FrameLayout,
        dst_fourcc: Fourcc,
        pic: &mut [u8],
        pic_bpl: usize,
        (rw, rh): (u32, u32),
    ) -> anyhow::Result<()> {
        let (w, h) = (sl.width, sl.height);
        let rgb = dst_fourcc == Fourcc::RGB24;
        let err = |e: yuv::YuvError| conversion_failed(sl.fourcc, rgb, e);

        match sl.fourcc {
            Fourcc::NV12 | Fourcc::NV12M | Fourcc::NV16 => {
                self.convert_nv12(src, sl, rgb, pic, pic_bpl, (rw, rh))?;
            }
            Fourcc::YUYV => {
                let yp = plane(src, sl, 0)?;
                let row = w.div_ceil(2) as usize * 4;
                let (bytes, stride) =
                    full_rows(yp, sl.planes[0].bytesperline as usize, row, h as usize, 1, &mut self.rows)
                        .context("cpu scaler: YUYV")?;
                let packed = YuvPackedImage { yuy: bytes, yuy_stride: stride as u32, width: w, height: h };
                self.full.resize(w as usize * h as usize * 3, 0);
                let convert = if rgb { yuv::yuyv422_to_rgb } else { yuv::yuyv422_to_bgr };
                convert(&packed, &mut self.full, w * 3, YuvRange::Limited, YuvStandardMatrix::Bt601).map_err(err)?;
                resize_plane::<U8x3>(
                    &mut self.resizer,
                    &self.full,
                    w as usize * 3,
                    (w, h),
                    &mut self.rows,
                    &mut self.packed,
                    (rw, rh),
                )
                .context("cpu scaler: YUYV")?;
                copy_rows(&self.packed, rw as usize * 3, pic, pic_bpl);
            }
            Fourcc::RGB24 | Fourcc::BGR24 => {
                let p = plane(src, sl, 0)?;
                resize_plane::<U8x3>(
                    &mut self.resizer,
                    p,
                    sl.planes[0].bytesperline as usize,
                    (w, h),
                    &mut self.rows,
                    &mut self.packed,
                    (rw, rh),
                )
                .with_context(|| format!("cpu scaler: {}", sl.fourcc))?;
                if sl.fourcc != dst_fourcc {
                    // The same swap of the first and third byte either way.
                    yuv::rgb_to_bgr(&self.packed, rw * 3, pic, pic_bpl as u32, rw, rh).map_err(err)?;
                } else {
                    copy_rows(&self.packed, rw as usize * 3, pic, pic_bpl);
                }
            }
            Fourcc::XR24 => {
                // B G R X bytes: the X dropped into tight BGR24 rows, then resized as BGR24.
                let p = plane(src, sl, 0)?;
                let bpl = sl.planes[0].bytesperline as usize;
                self.full.resize(w as usize * h as usize * 3, 0);
                for (r, dst) in self.full.chunks_exact_mut(w as usize * 3).enumerate() {
                    let row = p.get(r * bpl..r * bpl + w as usize * 4).ok_or_else(|| {
                        anyhow::anyhow!("cpu scaler: XR24 row {r} past its plane ({} bytes)", p.len())
                    })?;
                    for (d, s) in dst.chunks_exact_mut(3).zip(row.chunks_exact(4)) {
                        d.copy_from_slice(&s[..3]);
                    }
                }
                resize_plane::<U8x3>(
                    &mut self.resizer,
                    &self.full,
                    w as usize * 3,
                    (w, h),
                    &mut self.rows,
                    &mut self.packed,
                    (rw, rh),
                )
                .context("cpu scaler: XR24")?;
                if rgb {
                    yuv::rgb_to_bgr(&self.packed, rw * 3, pic, pic_bpl as u32, rw, rh).map_err(err)?;
                } else {
                    copy_rows(&self.packed, rw as usize * 3, pic, pic_bpl);
                }
            }
            other => bail!("cpu scaler cannot read {other}"),
        }
        Ok(())
    }

    /// [`Self::convert`] for NV12, NV12M and NV16: both planes resized, then converted.
    fn convert_nv12(
        &mut self,
        src: &[&[u8]],
        sl: &FrameLayout,
        rgb: bool,
        pic: &mut [u8],
        pic_bpl: usize,
        (rw, rh): (u32, u32),
    ) -> anyhow::Result<()> {
        let (w, h) = (sl.width, sl.height);
        let err = |e: yuv::YuvError| conversion_failed(sl.fourcc, rgb, e);
        let (cw, crw, crh) = (w.div_ceil(2), rw.div_ceil(2), rh.div_ceil(2));
        let ch = if sl.fourcc == Fourcc::NV16 { h } else { h.div_ceil(2) };
        let (yp, up) = (plane(src, sl, 0)?, plane(src, sl, 1)?);
        let (ybpl, ubpl) = (sl.planes[0].bytesperline as usize, sl.planes[1].bytesperline as usize);
        resize_plane::<U8>(&mut self.resizer, yp, ybpl, (w, h), &mut self.rows, &mut self.y, (rw, rh))
            .with_context(|| format!("cpu scaler: {} luma", sl.fourcc))?;
        resize_plane::<U8x2>(&mut self.resizer, up, ubpl, (cw, ch), &mut self.rows, &mut self.uv, (crw, crh))
            .with_context(|| format!("cpu scaler: {} CbCr", sl.fourcc))?;
        // NV16's chroma, resized to half height, is NV12's.
        let img = YuvBiPlanarImage {
            y_plane: &self.y,
            y_stride: rw,
            uv_plane: &self.uv,
            uv_stride: crw * 2,
            width: rw,
            height: rh,
        };
        let convert = if rgb { yuv::yuv_nv12_to_rgb } else { yuv::yuv_nv12_to_bgr };
        convert(&img, pic, pic_bpl as u32, YuvRange::Limited, YuvStandardMatrix::Bt601, YuvConversionMode::Balanced)
            .map_err(err)?;
        Ok(())
    }
}

/// A failed conversion from `from` to RGB24 (`rgb`) or BGR24, as one line.
fn conversion_failed(from: Fourcc, rgb: bool, e: yuv::YuvError) -> anyhow::Error {
    let order = if rgb { "RGB24" } else { "BGR24" };
    anyhow::anyhow!("cpu scaler: {from} -> {order} conversion failed: {e:?}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use zcpipe_core::frame::{Placement, PlaneDesc, MAX_PLANES};

    const TOP_LEFT: Letterbox = Letterbox::new(Placement::TopLeft, YOLOX_PAD);
    const CENTER: Letterbox = Letterbox::new(Placement::Center, YOLOX_PAD);

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
        let mut s = Letterboxer::new();
        s.check(sl.fourcc, &dl).unwrap();
        let lb = s.scale_bytes(&[&src], &sl, &mut dst, &dl, TOP_LEFT).unwrap();
        assert_eq!((lb.resized_w, lb.resized_h, lb.src_w, lb.src_h), (416, 312, 768, 576));
        println!("first pixel {:?}, last picture pixel {:?}", &dst[..3], &dst[(311 * 416 + 415) * 3..][..3]);
        assert_letterbox(&dst, 416 * 3, (416, 312), [0, 0, 255], 2, 114);
    }

    #[test]
    fn scaler_solid_red_451x300_and_stride_424x3() {
        let (sl, src) = solid_nv12(451, 300, RED_YCBCR);
        let (dl, mut dst) = model_input(424 * 3);
        let mut s = Letterboxer::new();
        let lb = s.scale_bytes(&[&src], &sl, &mut dst, &dl, TOP_LEFT).unwrap();
        // r = min(416/451, 416/300) = 0.9224 -> int(451 r) = 416, int(300 r) = 276
        assert_eq!((lb.resized_w, lb.resized_h), (416, 276));
        assert_letterbox(&dst, 424 * 3, (416, 276), [0, 0, 255], 2, 114);
        // A second frame through the same scratch buffers gives the same bytes.
        let first = dst.clone();
        s.scale_bytes(&[&src], &sl, &mut dst, &dl, TOP_LEFT).unwrap();
        assert_eq!(first, dst);
    }

    #[test]
    fn scaler_odd_resized_heights() {
        // 640x427 -> 416x277 (odd in f32 and f64 alike); 1280x720 -> 416x233 with today's f32
        // LetterboxParams (YOLOX's float64 gives 234). The yuv crate needs the destination
        // cut to exactly the picture rows for an odd height.
        let mut s = Letterboxer::new();
        for (w, h) in [(640u32, 427u32), (1280, 720)] {
            let (sl, src) = solid_nv12(w, h, RED_YCBCR);
            let (dl, mut dst) = model_input(424 * 3);
            let lb = s.scale_bytes(&[&src], &sl, &mut dst, &dl, TOP_LEFT).unwrap();
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
            s.scale_bytes(&[&rgb], &rl, &mut dst2, &dl, TOP_LEFT).unwrap();
            assert_letterbox(&dst2, 424 * 3, pic, [0, 0, 255], 0, 114);
        }
    }

    #[test]
    fn scaler_small_source_upscales_and_pads() {
        // 64x48 -> r = 6.5 -> 416x312; the last rows are 114 and the stride padding is kept.
        let (sl, src) = solid_nv12(64, 48, RED_YCBCR);
        let (dl, mut dst) = model_input(424 * 3);
        let lb = Letterboxer::new().scale_bytes(&[&src], &sl, &mut dst, &dl, TOP_LEFT).unwrap();
        assert_eq!((lb.resized_w, lb.resized_h), (416, 312));
        assert_letterbox(&dst, 424 * 3, (416, 312), [0, 0, 255], 2, 114);
    }

    #[test]
    fn scaler_check_names_both_sides() {
        let s = Letterboxer::new();
        let rgb = FrameLayout::packed24(Fourcc::RGB24, 416, 416, 416 * 3);
        s.check(Fourcc::NV12, &rgb).unwrap();
        let xr24 = FrameLayout::packed24(Fourcc::XR24, 416, 416, 416 * 3);
        let e = s.check(Fourcc::NV12, &xr24).unwrap_err().to_string();
        println!("{e}");
        assert_eq!(e, "cpu scaler cannot produce XR24 (model input); it writes RGB24 and BGR24");
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
        let mut s = Letterboxer::new();
        let (sl, src) = solid_nv12(64, 48, RED_YCBCR);
        let (dl, mut dst) = model_input(416 * 3);
        // Source buffer too short.
        let e = s.scale_bytes(&[&src[..100]], &sl, &mut dst, &dl, TOP_LEFT).unwrap_err();
        println!("{e}");
        // Missing second buffer for NV12M.
        let mut m = sl;
        m.fourcc = Fourcc::NV12M;
        m.planes[1].fd_index = 1;
        m.planes[1].offset = 0;
        assert!(s.scale_bytes(&[&src], &m, &mut dst, &dl, TOP_LEFT).is_err());
        // Destination too short.
        assert!(s.scale_bytes(&[&src], &sl, &mut dst[..1000], &dl, TOP_LEFT).is_err());
    }

    /// A solid red `w x h` frame of `fourcc` (packed rows of `w * bytes per pixel`).
    fn solid_red(fourcc: Fourcc, w: u32, h: u32) -> (FrameLayout, Vec<u8>) {
        let packed = |px: &[u8], bpp: u32| {
            let mut pl = [PlaneDesc::default(); MAX_PLANES];
            pl[0] = PlaneDesc { offset: 0, bytesperline: w * bpp, length: w * h * bpp, fd_index: 0 };
            let bytes = px.repeat((w * h * bpp) as usize / px.len());
            (FrameLayout { fourcc, width: w, height: h, num_planes: 1, planes: pl }, bytes)
        };
        match fourcc {
            Fourcc::NV12 => solid_nv12(w, h, RED_YCBCR),
            Fourcc::YUYV => packed(&[RED_YCBCR[0], RED_YCBCR[1], RED_YCBCR[0], RED_YCBCR[2]], 2),
            Fourcc::RGB24 => packed(&[255, 0, 0], 3),
            Fourcc::BGR24 => packed(&[0, 0, 255], 3),
            Fourcc::XR24 => packed(&[0, 0, 255, 0x77], 4),
            other => panic!("no solid {other}"),
        }
    }

    /// Checks a letterboxed solid-colour output of `dw x dh` pixels in rows of `bpl`
    /// bytes: `px` inside the picture `(x, y, w, h)` (+-tol), exactly `pad` outside it, and
    /// the stride bytes past `dw * 3` untouched (0xEE).
    fn assert_picture(
        out: &[u8],
        bpl: usize,
        (dw, dh): (usize, usize),
        (x0, y0, w, h): (u32, u32, u32, u32),
        px: [u8; 3],
        tol: i32,
        pad: u8,
    ) {
        let (x0, y0, w, h) = (x0 as usize, y0 as usize, w as usize, h as usize);
        for (y, row) in out.chunks(bpl).take(dh).enumerate() {
            for x in 0..dw {
                let got = &row[x * 3..x * 3 + 3];
                if (x0..x0 + w).contains(&x) && (y0..y0 + h).contains(&y) {
                    for c in 0..3 {
                        assert!((got[c] as i32 - px[c] as i32).abs() <= tol, "({x},{y}) {got:?} vs {px:?}");
                    }
                } else {
                    assert_eq!(got, [pad; 3], "pad at ({x},{y})");
                }
            }
            assert!(row[dw * 3..].iter().all(|&b| b == 0xEE), "stride padding written in row {y}");
        }
    }

    #[test]
    fn scaler_writes_both_orders_in_both_placements() {
        // (source size, top-left picture, centred picture): a landscape frame (pad rows), a
        // portrait one (pad columns; centred, the picture fills the height and starts at
        // column 104, so it goes through tight rows), and one of the model's own aspect.
        let cases = [
            ((768u32, 432u32), (0u32, 0u32, 416u32, 233u32), (0u32, 91u32, 416u32, 234u32)),
            ((300, 600), (0, 0, 208, 416), (104, 0, 208, 416)),
            ((832, 832), (0, 0, 416, 416), (0, 0, 416, 416)),
        ];
        let mut s = Letterboxer::new();
        let mut seen = vec![];
        for ((w, h), top_left, centred) in cases {
            for src in [Fourcc::NV12, Fourcc::YUYV, Fourcc::RGB24, Fourcc::BGR24, Fourcc::XR24] {
                let (sl, frame) = solid_red(src, w, h);
                // BT.601 limited YCbCr red comes back within 2 levels; RGB exactly.
                let tol = if src == Fourcc::NV12 || src == Fourcc::YUYV { 2 } else { 0 };
                for (order, red) in [(Fourcc::RGB24, [255u8, 0, 0]), (Fourcc::BGR24, [0, 0, 255])] {
                    for (letterbox, want) in [(TOP_LEFT, top_left), (CENTER, centred)] {
                        let dl = FrameLayout::packed24(order, 416, 416, 424 * 3);
                        let mut dst = vec![0xEEu8; dl.bytes_needed() as usize];
                        let lb = s.scale_bytes(&[&frame], &sl, &mut dst, &dl, letterbox).unwrap();
                        assert_eq!(lb.picture(), want, "{src} {w}x{h} -> {order} {:?}", letterbox.placement);
                        assert_picture(&dst, 424 * 3, (416, 416), want, red, tol, YOLOX_PAD);
                        // Boxes map back through the picture's corners to the frame's.
                        let corners =
                            [want.0 as f32, want.1 as f32, (want.0 + want.2) as f32, (want.1 + want.3) as f32];
                        let back = lb.unmap_box(corners);
                        assert!(
                            back.iter().zip([0.0, 0.0, w as f32, h as f32]).all(|(a, b)| (a - b).abs() <= 2.0),
                            "{back:?} for {w}x{h}"
                        );
                    }
                }
            }
            seen.push(format!("{w}x{h}: top-left {top_left:?}, centred {centred:?}"));
        }
        println!("{}", seen.join("; "));
    }
}

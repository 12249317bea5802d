//! How a frame looks to RGA: a capture or model-input layout as librga's image description
//! (format, width and height strides in pixels, bytes the driver may touch), or why it
//! cannot be one.

use std::ffi::c_int;

use anyhow::{bail, Result};

use zcpipe_core::frame::{Fourcc, FrameLayout, LetterboxParams};
use zcpipe_sys::rga as sys;
use zcpipe_sys::rga::{ImHandleParam, ImRect};

/// How a source frame looks to RGA: one dma-buf, luma (or packed pixels) at offset 0, the
/// CbCr plane (if any) `wstride * hstride` bytes later at the same pitch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Image {
    /// `RK_FORMAT_*`.
    pub(super) format: c_int,
    /// Pixels.
    pub(super) width: u32,
    /// Rows.
    pub(super) height: u32,
    /// Row pitch, pixels.
    pub(super) wstride: u32,
    /// Rows from luma to chroma (the image height for packed formats).
    pub(super) hstride: u32,
    /// Bits per pixel of the first plane (8 for NV12/NV16 luma, 16 YUYV, 24 RGB).
    pub(super) bits: u32,
    /// Whether librga treats it as YUV (the even-size rule).
    pub(super) yuv: bool,
    /// Bytes the driver may touch for this image (what `importbuffer_fd` describes).
    pub(super) bytes: u64,
}

impl Image {
    pub(super) fn handle_param(&self) -> ImHandleParam {
        ImHandleParam { width: self.wstride, height: self.hstride, format: self.format as u32 }
    }
}

/// An NV12 image 64 pixels wide with as many even rows as fit in `size` bytes (96 bytes per
/// row: 64 luma + 32 chroma): `importbuffer_fd` sizes the driver's mapping from it, so a
/// buffer whose frames vary in size is imported once, nearly whole. `None` below 2 rows.
pub(super) fn whole_buffer_image(size: u64) -> Option<Image> {
    let rows = u32::try_from((size / 96) & !1).ok()?.min(i32::MAX as u32 & !1);
    (rows >= 2).then_some(Image {
        format: sys::RK_FORMAT_YCBCR_420_SP,
        width: 64,
        height: rows,
        wstride: 64,
        hstride: rows,
        bits: 8,
        yuv: true,
        bytes: 64 * u64::from(rows) * 3 / 2,
    })
}

/// A job's rectangles: the whole source image, and the letterboxed picture where `lb` puts
/// it in the output (the top-left corner, or centred).
pub(super) fn job_rects(s: &Image, lb: &LetterboxParams) -> (ImRect, ImRect) {
    let (x, y, w, h) = lb.picture();
    (
        ImRect { x: 0, y: 0, width: s.width as c_int, height: s.height as c_int },
        ImRect { x: x as c_int, y: y as c_int, width: w as c_int, height: h as c_int },
    )
}

/// Maps a capture layout to what RGA can read, or says why it cannot.
pub(super) fn source_image(l: &FrameLayout) -> Result<Image> {
    let (format, bytes_pp, yuv, chroma) = match l.fourcc {
        Fourcc::NV12 => (sys::RK_FORMAT_YCBCR_420_SP, 1, true, Some(2)),
        Fourcc::NV16 => (sys::RK_FORMAT_YCBCR_422_SP, 1, true, Some(1)),
        Fourcc::YUYV => (sys::RK_FORMAT_YUYV_422, 2, true, None),
        Fourcc::RGB24 => (sys::RK_FORMAT_RGB_888, 3, false, None),
        Fourcc::BGR24 => (sys::RK_FORMAT_BGR_888, 3, false, None),
        Fourcc::NV12M => bail!(
            "rga scaler cannot read NV12M (capture output): RGA takes a frame as one dma-buf with the CbCr plane right after \
             the luma plane, and NV12M has one dma-buf per plane; capture NV12 (--format NV12) or use --scaler cpu"
        ),
        other => bail!("rga scaler cannot read {other} (capture output); it reads NV12, NV16, YUYV, RGB24 and BGR24"),
    };
    let p0 = l.planes[0];
    if l.num_planes as usize != l.fourcc.num_planes().unwrap_or(0) {
        bail!(
            "rga scaler: {} source with {} planes; {} has {}",
            l.fourcc,
            l.num_planes,
            l.fourcc,
            l.fourcc.num_planes().unwrap_or(0)
        );
    }
    if p0.offset != 0 || p0.fd_index != 0 {
        bail!(
            "rga scaler: the {} source starts at offset {} of dma-buf {}; RGA reads a frame from the start of its one dma-buf \
             (rga_buffer_t has no offset): capture into whole buffers",
            l.fourcc,
            p0.offset,
            p0.fd_index
        );
    }
    let bpl = p0.bytesperline;
    if l.width == 0 || l.height == 0 || bpl == 0 {
        bail!(
            "rga scaler: the {} source is {}x{} with bytesperline {bpl}; it needs a non-empty size",
            l.fourcc,
            l.width,
            l.height
        );
    }
    if !bpl.is_multiple_of(bytes_pp) {
        bail!(
            "rga scaler: the {} source's bytesperline {bpl} is not a whole number of {bytes_pp}-byte pixels; RGA's pitch is in \
             pixels (PITFALLS 9): capture with a bytesperline that is a multiple of {bytes_pp}",
            l.fourcc
        );
    }
    let wstride = bpl / bytes_pp;
    let (hstride, bytes) = match chroma {
        None => (l.height, bpl as u64 * l.height as u64),
        Some(div) => {
            let p1 = l.planes[1];
            if p1.fd_index != 0 || p1.bytesperline != bpl {
                bail!(
                    "rga scaler: the {} source's CbCr plane has bytesperline {} in dma-buf {}; RGA reads it from the luma plane's \
                     dma-buf at the luma pitch ({bpl})",
                    l.fourcc,
                    p1.bytesperline,
                    p1.fd_index
                );
            }
            if !p1.offset.is_multiple_of(bpl) || p1.offset / bpl < l.height {
                bail!(
                    "rga scaler: the {} source's CbCr plane starts at byte {}, not a whole number of {bpl}-byte rows at or past \
                     the {} luma rows; RGA finds it at wstride x hstride (PITFALLS 10)",
                    l.fourcc,
                    p1.offset,
                    l.height
                );
            }
            let hs = p1.offset / bpl;
            (hs, p1.offset as u64 + bpl as u64 * (hs / div) as u64)
        }
    };
    Ok(Image { format, width: l.width, height: l.height, wstride, hstride, bits: bytes_pp * 8, yuv, bytes })
}

/// Maps the model-input layout to what RGA writes (BGR24 or RGB24, one plane at offset 0).
pub(super) fn dest_image(l: &FrameLayout) -> Result<Image> {
    let format = match l.fourcc {
        Fourcc::BGR24 => sys::RK_FORMAT_BGR_888,
        Fourcc::RGB24 => sys::RK_FORMAT_RGB_888,
        other => bail!("rga scaler cannot produce {other} (model input); it writes BGR24 or RGB24"),
    };
    let p = l.planes[0];
    if l.num_planes != 1 || l.width == 0 || l.height == 0 || p.offset != 0 {
        bail!(
            "rga scaler: model input {} {}x{} with {} planes at offset {}; it needs one plane at offset 0 and a non-empty size",
            l.fourcc,
            l.width,
            l.height,
            l.num_planes,
            p.offset
        );
    }
    if !p.bytesperline.is_multiple_of(3) || (p.bytesperline as u64) < l.width as u64 * 3 {
        bail!(
            "rga scaler: model input bytesperline {} must be a multiple of 3 and at least {} ({} x 3); RGA's pitch is in pixels",
            p.bytesperline,
            l.width as u64 * 3,
            l.width
        );
    }
    let wstride = p.bytesperline / 3;
    Ok(Image {
        format,
        width: l.width,
        height: l.height,
        wstride,
        hstride: l.height,
        bits: 24,
        yuv: false,
        bytes: p.bytesperline as u64 * l.height as u64,
    })
}

/// Pixels a pitch must be a multiple of for `bits`-per-pixel rows to start on 16-byte
/// boundaries (librga's `rga_check_align` with RGA3's 16-byte `byte_stride`: lcm / bits).
pub(super) fn stride_align(bits: u32) -> u32 {
    let (a, b) = (bits, 128u32);
    let gcd = {
        let (mut x, mut y) = (a, b);
        while y != 0 {
            (x, y) = (y, x % y);
        }
        x
    };
    (a / gcd * b) / bits
}

//! An `imcheck_t` failure as one error naming the rule the job broke.

use super::image::{stride_align, Image};
use zcpipe_core::frame::{Fourcc, LetterboxParams};
use zcpipe_sys::rga as sys;

/// The largest scale factor either way RGA2 does (librga's `scale_limit`: 16 on RGA2,
/// 8 on RGA3).
const SCALE_LIMIT: f64 = 16.0;
/// RGA3's limit.
const SCALE_LIMIT_RGA3: f64 = 8.0;
/// The largest image side librga accepts (RGA2/RGA3 input resolution 8192x8192).
const MAX_SIDE: u32 = 8192;

/// Names the rule an `imcheck_t` failure broke, from our own reading of librga's checks
/// (`im2d_impl.cpp`: `rga_yuv_legality_check`, `rga_check_align`, `rga_check_limit`,
/// `rga_check_info`), with librga's own status and message at the end.
pub(super) fn diagnose(
    src_fourcc: Fourcc,
    s: &Image,
    dst_fourcc: Fourcc,
    d: &Image,
    lb: &LetterboxParams,
    status: sys::ImStatus,
    librga_msg: &str,
) -> String {
    let why = format!("(librga imcheck_t: {}: {})", sys::status_name(status), librga_msg.trim());
    let (fx, fy) = (lb.resized_w as f64 / s.width as f64, lb.resized_h as f64 / s.height as f64);
    if s.yuv && [s.width, s.height, s.wstride, s.hstride].iter().any(|v| v % 2 != 0) {
        return format!(
            "rga scaler: YUV images need even sizes and offsets: the {src_fourcc} source is {}x{} with width stride {} and height \
             stride {} (librga rga_yuv_legality_check); capture an even size (--size) {why}",
            s.width, s.height, s.wstride, s.hstride
        );
    }
    let sa = stride_align(s.bits);
    if !s.wstride.is_multiple_of(sa) {
        return format!(
            "rga scaler: the {src_fourcc} source's width stride {} px is not a multiple of {sa} ({} bits per pixel: RGA3 reads \
             rows at 16-byte-aligned pitches, so 8-bit YUV needs a width stride that is a multiple of 16; librga rga_check_align, \
             PITFALLS 11); have the camera use a bytesperline that is a multiple of {} bytes (a --size width that is a multiple \
             of 16 usually does) {why}",
            s.wstride,
            s.bits,
            sa * s.bits / 8
        );
    }
    let da = stride_align(d.bits);
    if !d.wstride.is_multiple_of(da) {
        return format!(
            "rga scaler: the model input's width stride {} px ({dst_fourcc}) is not a multiple of {da} (librga rga_check_align); \
             ask for a bytesperline that is a multiple of {} bytes {why}",
            d.wstride,
            da * 3
        );
    }
    let out_of = |lim: f64| [fx, fy].iter().any(|&f| f > lim || f < 1.0 / lim);
    if out_of(SCALE_LIMIT) || (status == sys::IM_STATUS_NOT_SUPPORTED && out_of(SCALE_LIMIT_RGA3)) {
        return format!(
            "rga scaler: scale factor {fx:.4} x {fy:.4} ({}x{} -> {}x{}) is outside RGA's range 1/16..16 (RGA2; RGA3: 1/8..8; \
             librga rga_check_limit); capture a size closer to the model input (--size) {why}",
            s.width, s.height, lb.resized_w, lb.resized_h
        );
    }
    if s.width > MAX_SIDE || s.height > MAX_SIDE || s.width < 2 || s.height < 2 {
        return format!("rga scaler: the {src_fourcc} source is {}x{}; RGA takes 2..={MAX_SIDE} pixels a side (librga rga_check_info) {why}", s.width, s.height);
    }
    format!(
        "rga scaler: librga rejected {src_fourcc} {}x{} (stride {}x{}) -> {dst_fourcc} {}x{} (picture {}x{}) {why}",
        s.width, s.height, s.wstride, s.hstride, d.width, d.height, lb.resized_w, lb.resized_h
    )
}

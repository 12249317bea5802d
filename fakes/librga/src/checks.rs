//! The checks librga makes before a job: rects, formats, alignment (`imcheck_t`), with its
//! error statuses and messages.

use std::ffi::c_int;

use super::*;

/// librga's `rga_apply_rect`: a non-empty rect becomes the image size checked.
fn apply_rect(b: &mut RgaBuffer, r: &ImRect) {
    if r.width > 0 && r.height > 0 {
        b.width = r.width;
        b.height = r.height;
    }
}

fn check_info(name: &str, b: &RgaBuffer, r: &ImRect) -> Result<(), (c_int, String)> {
    if b.width <= 0 || b.height <= 0 || b.format < 0 {
        return Err((
            IM_STATUS_ILLEGAL_PARAM,
            format!(
                "Illegal {name}, the parameter cannot be negative or 0, width = {}, height = {}",
                b.width, b.height
            ),
        ));
    }
    if b.width < 2 || b.height < 2 {
        return Err((IM_STATUS_ILLEGAL_PARAM, format!("Hardware limitation {name}, unsupported operation of images smaller than 2 pixels, width = {}, height = {}", b.width, b.height)));
    }
    if b.wstride < b.width || b.hstride < b.height {
        return Err((
            IM_STATUS_INVALID_PARAM,
            format!("Invaild {name}, Virtual width or height is less than actual width and height, wstride = {}, width = {}, hstride = {}, height = {}", b.wstride, b.width, b.hstride, b.height),
        ));
    }
    if (r.width == 0 && r.height > 0)
        || (r.width > 0 && r.height == 0)
        || r.width < 0
        || r.height < 0
        || r.x < 0
        || r.y < 0
    {
        return Err((IM_STATUS_ILLEGAL_PARAM, format!("Illegal {name} rect, rect[x,y,w,h] = [{}]", rect_str(r))));
    }
    if (r.width > 0 && r.width < 2) || (r.height > 0 && r.height < 2) || (r.x > 0 && r.x < 2) || (r.y > 0 && r.y < 2) {
        return Err((IM_STATUS_INVALID_PARAM, format!("Hardware limitation {name} rect, unsupported operation of images smaller than 2 pixels, rect[x,y,w,h] = [{}]", rect_str(r))));
    }
    if r.width + r.x > b.wstride || r.height + r.y > b.hstride {
        return Err((
            IM_STATUS_INVALID_PARAM,
            format!("Invaild {name} rect, the sum of width and height of rect needs to be less than wstride or hstride, rect[x,y,w,h] = [{}], wstride = {}, hstride = {}", rect_str(r), b.wstride, b.hstride),
        ));
    }
    if b.width > MAX_SIDE || b.height > MAX_SIDE {
        return Err((
            IM_STATUS_NOT_SUPPORTED,
            format!(
                "Unsupported {name} resolution more than {MAX_SIDE}x{MAX_SIDE}, width = {}, height = {}",
                b.width, b.height
            ),
        ));
    }
    Ok(())
}

fn check_format(name: &str, b: &RgaBuffer, r: &ImRect) -> Result<Kind, (c_int, String)> {
    let kind = Kind::from_rk(b.format).ok_or_else(|| {
        (IM_STATUS_NOT_SUPPORTED, format!("{name} unsupported this format, format = {:#x}", b.format))
    })?;
    if kind.yuv() && [b.wstride, b.hstride, b.width, b.height, r.x, r.y, r.width, r.height].iter().any(|v| v % 2 != 0) {
        return Err((
            IM_STATUS_INVALID_PARAM,
            format!(
                "{name}, Error yuv not align to 2, rect[x,y,w,h] = [{}], wstride = {}, hstride = {}, format = {:#x}({})",
                rect_str(r),
                b.wstride,
                b.hstride,
                b.format,
                kind.name()
            ),
        ));
    }
    Ok(kind)
}

fn check_align(name: &str, b: &RgaBuffer, kind: Kind) -> Result<(), (c_int, String)> {
    let bits = kind.bits();
    if (bits * b.wstride as u32).is_multiple_of(BYTE_STRIDE * 8) {
        return Ok(());
    }
    let (mut x, mut y) = (bits, BYTE_STRIDE * 8);
    while y != 0 {
        (x, y) = (y, x % y);
    }
    let align = bits / x * (BYTE_STRIDE * 8) / bits;
    Err((
        IM_STATUS_NOT_SUPPORTED,
        format!("{name} unsupport width stride {}, {} width stride should be {align} aligned!", b.wstride, kind.name()),
    ))
}

/// librga 1.10's `rga_check_external` + `rga_check`, for the features this fake has.
pub(super) fn check(
    src: &RgaBuffer,
    dst: &RgaBuffer,
    pat: &RgaBuffer,
    srect: &ImRect,
    drect: &ImRect,
    usage: c_int,
) -> Result<(Kind, Kind), (c_int, String)> {
    if usage & (IM_COLOR_FILL | IM_ALPHA_BLEND_MASK | IM_HAL_TRANSFORM_MASK) != 0 || pat.is_valid() {
        return Err((
            IM_STATUS_NOT_SUPPORTED,
            format!("zcpipe fake librga: usage {usage:#x} / pat not supported (resize and convert only)"),
        ));
    }
    let mut drect = *drect;
    if usage & IM_CROP != 0 {
        drect.width = srect.width;
        drect.height = srect.height;
    }
    let (mut s, mut d) = (*src, *dst);
    apply_rect(&mut s, srect);
    apply_rect(&mut d, &drect);
    check_info("src", &s, srect)?;
    let sk = check_format("src", &s, srect)?;
    check_align("src", &s, sk)?;
    check_info("dst", &d, &drect)?;
    let dk = check_format("dst", &d, &drect)?;
    check_align("dst", &d, dk)?;
    let (sw, sh, dw, dh) = (s.width as f32, s.height as f32, d.width as f32, d.height as f32);
    if sw / dw > SCALE_LIMIT || sh / dh > SCALE_LIMIT || dw / sw > SCALE_LIMIT || dh / sh > SCALE_LIMIT {
        return Err((
            IM_STATUS_NOT_SUPPORTED,
            format!(
                "Unsupported to scaling more than 1/16 ~ 16 times, src[w,h] = [{}, {}], dst[w,h] = [{}, {}]",
                s.width, s.height, d.width, d.height
            ),
        ));
    }
    if dk.yuv() {
        return Err((IM_STATUS_NOT_SUPPORTED, "zcpipe fake librga: writes RGB formats only".into()));
    }
    if ![0, IM_YUV_TO_RGB_BT601_LIMIT].contains(&dst.color_space_mode) || src.color_space_mode != 0 {
        return Err((
            IM_STATUS_NOT_SUPPORTED,
            format!(
                "zcpipe fake librga: colour space mode {:#x} not supported (BT.601 limited only)",
                dst.color_space_mode
            ),
        ));
    }
    Ok((sk, dk))
}

/// `IM_STATUS imcheck_t(const rga_buffer_t src, const rga_buffer_t dst, const rga_buffer_t
/// pat, const im_rect src_rect, const im_rect dst_rect, const im_rect pat_rect, const int
/// mode_usage)`: `IM_STATUS_NOERROR` when every rule holds.
#[no_mangle]
pub extern "C" fn imcheck_t(
    src: RgaBuffer,
    dst: RgaBuffer,
    pat: RgaBuffer,
    srect: ImRect,
    drect: ImRect,
    _prect: ImRect,
    mode_usage: c_int,
) -> c_int {
    let r = if no_device() {
        Err((IM_STATUS_NO_SESSION, NO_SESSION_MSG.to_string()))
    } else {
        check(&src, &dst, &pat, &srect, &drect, mode_usage)
    };
    let (status, msg) = match r {
        Ok(_) => (IM_STATUS_NOERROR, String::new()),
        Err((s, m)) => (fail(s, m.clone()), m),
    };
    log(format!(
        "imcheck_t src[{}] dst[{}] srect={} drect={} usage={mode_usage:#x} status={status} msg={msg:?}",
        buf_str(&src),
        buf_str(&dst),
        rect_str(&srect),
        rect_str(&drect)
    ));
    status
}

pub(super) const DMA_BUF_IOCTL_SYNC: u64 = 0x4008_6200;
pub(super) const DMA_BUF_SYNC_READ: u64 = 1;
pub(super) const DMA_BUF_SYNC_WRITE: u64 = 2;
pub(super) const DMA_BUF_SYNC_END: u64 = 4;

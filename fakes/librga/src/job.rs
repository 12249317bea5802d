//! The job itself, on the CPU: mapping the dma-bufs between `DMA_BUF_IOCTL_SYNC` calls,
//! bilinear scaling and colour conversion, and `improcess`.

use std::ffi::{c_int, c_void};

use super::*;

/// `DMA_BUF_IOCTL_SYNC`; a memfd answers ENOTTY (not a dma-buf), which is fine here.
fn dma_sync(fd: c_int, flags: u64) -> Result<(), c_int> {
    let arg: u64 = flags;
    loop {
        // SAFETY: `arg` is a valid `struct dma_buf_sync` (one __u64) the kernel only reads.
        let r = unsafe { libc::ioctl(fd, DMA_BUF_IOCTL_SYNC as _, &arg as *const u64) };
        if r == 0 {
            return Ok(());
        }
        match errno() {
            libc::EINTR | libc::EAGAIN => continue,
            libc::ENOTTY => return Ok(()),
            e => return Err(e),
        }
    }
}

/// A shared mapping of an imported buffer, unmapped on drop.
struct Mapping {
    ptr: *mut c_void,
    len: usize,
}

impl Mapping {
    fn new(fd: c_int, len: usize, write: bool) -> Result<Mapping, c_int> {
        let prot = if write { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
        // SAFETY: a fresh shared mapping of `len` bytes of an fd we own; checked below.
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, 0) };
        if ptr == libc::MAP_FAILED {
            return Err(errno());
        }
        Ok(Mapping { ptr, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `new` mapped, once.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

/// Bilinear sample of a `w x h` grid at `(fx, fy)` (grid units, clamped to the edges).
fn bilinear<const N: usize>(w: i32, h: i32, fx: f32, fy: f32, at: impl Fn(i32, i32) -> [f32; N]) -> [f32; N] {
    let fx = fx.clamp(0.0, (w - 1) as f32);
    let fy = fy.clamp(0.0, (h - 1) as f32);
    let (x0, y0) = (fx.floor() as i32, fy.floor() as i32);
    let (x1, y1) = ((x0 + 1).min(w - 1), (y0 + 1).min(h - 1));
    let (ax, ay) = (fx - x0 as f32, fy - y0 as f32);
    let (p00, p10, p01, p11) = (at(x0, y0), at(x1, y0), at(x0, y1), at(x1, y1));
    let mut out = [0f32; N];
    for c in 0..N {
        let top = p00[c] + (p10[c] - p00[c]) * ax;
        let bot = p01[c] + (p11[c] - p01[c]) * ax;
        out[c] = top + (bot - top) * ay;
    }
    out
}

/// BT.601 limited range YCbCr -> R, G, B.
fn ycbcr_to_rgb(y: f32, cb: f32, cr: f32) -> [f32; 3] {
    let (y, cb, cr) = (1.164_383 * (y - 16.0), cb - 128.0, cr - 128.0);
    [y + 1.596_027 * cr, y - 0.391_762 * cb - 0.812_968 * cr, y + 2.017_232 * cb]
}

/// The resize + convert itself: `s` (kind `sk`, pitch `sws` px, `shs` rows to chroma) rect
/// `sr` into `d` (kind `dk`, pitch `dws` px) rect `dr`.
#[allow(clippy::too_many_arguments)]
pub(super) fn convert(
    s: &[u8],
    sk: Kind,
    sws: usize,
    shs: usize,
    sr: ImRect,
    d: &mut [u8],
    dk: Kind,
    dws: usize,
    dr: ImRect,
) {
    let (sx0, sy0, sw, sh) = (sr.x, sr.y, sr.width, sr.height);
    let (kx, ky) = (sw as f32 / dr.width as f32, sh as f32 / dr.height as f32);
    let byte = |i: usize| s.get(i).copied().unwrap_or(0) as f32;
    let chroma_base = sws * shs;
    let dbpp = match dk {
        Kind::Rgba => 4,
        _ => 3,
    };
    for dy in 0..dr.height {
        for dx in 0..dr.width {
            // Source position in rect-relative pixels, half-pixel centres.
            let fx = (dx as f32 + 0.5) * kx - 0.5;
            let fy = (dy as f32 + 0.5) * ky - 0.5;
            let rgb = match sk {
                Kind::Nv12 | Kind::Nv16 | Kind::Yuyv | Kind::Uyvy => {
                    let (ystep, yoff) = match sk {
                        Kind::Yuyv => (2, 0),
                        Kind::Uyvy => (2, 1),
                        _ => (1, 0),
                    };
                    let [y] = bilinear(sw, sh, fx, fy, |x, yy| {
                        [byte(((sy0 + yy) as usize) * sws * ystep + (sx0 + x) as usize * ystep + yoff)]
                    });
                    let (cw, ch) = (sw / 2, if sk == Kind::Nv12 { sh / 2 } else { sh });
                    let cfx = (fx + 0.5) / 2.0 - 0.5;
                    let cfy = if sk == Kind::Nv12 { (fy + 0.5) / 2.0 - 0.5 } else { fy };
                    let (cx0, cy0) = (sx0 as usize / 2, if sk == Kind::Nv12 { sy0 as usize / 2 } else { sy0 as usize });
                    let [cb, cr] = bilinear(cw.max(1), ch.max(1), cfx, cfy, |x, yy| {
                        let (x, yy) = (cx0 + x as usize, cy0 + yy as usize);
                        match sk {
                            Kind::Yuyv => [byte(yy * sws * 2 + x * 4 + 1), byte(yy * sws * 2 + x * 4 + 3)],
                            Kind::Uyvy => [byte(yy * sws * 2 + x * 4), byte(yy * sws * 2 + x * 4 + 2)],
                            _ => [byte(chroma_base + yy * sws + x * 2), byte(chroma_base + yy * sws + x * 2 + 1)],
                        }
                    });
                    ycbcr_to_rgb(y, cb, cr)
                }
                Kind::Rgb | Kind::Bgr | Kind::Rgba => {
                    let bpp = if sk == Kind::Rgba { 4 } else { 3 };
                    let p = bilinear(sw, sh, fx, fy, |x, yy| {
                        let i = ((sy0 + yy) as usize * sws + (sx0 + x) as usize) * bpp;
                        [byte(i), byte(i + 1), byte(i + 2)]
                    });
                    if sk == Kind::Bgr {
                        [p[2], p[1], p[0]]
                    } else {
                        p
                    }
                }
            };
            let [r, g, b] = rgb.map(|v| v.round().clamp(0.0, 255.0) as u8);
            let i = ((dr.y + dy) as usize * dws + (dr.x + dx) as usize) * dbpp;
            if let Some(px) = d.get_mut(i..i + dbpp) {
                match dk {
                    Kind::Bgr => px.copy_from_slice(&[b, g, r]),
                    Kind::Rgba => px.copy_from_slice(&[r, g, b, 255]),
                    _ => px.copy_from_slice(&[r, g, b]),
                }
            }
        }
    }
}

fn process(
    src: &RgaBuffer,
    dst: &RgaBuffer,
    pat: &RgaBuffer,
    srect: ImRect,
    drect: ImRect,
    usage: c_int,
) -> Result<(), (c_int, String)> {
    if no_device() {
        return Err((IM_STATUS_NO_SESSION, NO_SESSION_MSG.into()));
    }
    if usage & IM_ASYNC != 0 {
        return Err((IM_STATUS_NOT_SUPPORTED, "zcpipe fake librga: IM_ASYNC not supported".into()));
    }
    if src.handle == 0 && dst.handle == 0 && !src.vir_addr.is_null() && !dst.vir_addr.is_null() {
        // Virtual addresses (wrapbuffer_virtualaddr_t): what a plain, copying pipeline
        // does; the real librga makes the driver pin those pages per job. zcpipe uses it in
        // --copy-mode only.
        let full = |b: &RgaBuffer, r: ImRect| {
            if r.width > 0 && r.height > 0 {
                r
            } else {
                ImRect { x: 0, y: 0, width: b.width, height: b.height }
            }
        };
        let (srect, drect) = (full(src, srect), full(dst, drect));
        let (sk, dk) = check(src, dst, pat, &srect, &drect, usage)?;
        let sn = sk.image_bytes(src.wstride as u64, src.hstride as u64) as usize;
        let dn = dk.image_bytes(dst.wstride as u64, dst.hstride as u64) as usize;
        // SAFETY: librga's contract for virtual-address images: the caller keeps
        // `wstride x hstride` pixels of the format readable at `src.vir_addr` and writable
        // at `dst.vir_addr` for the duration of this synchronous call, in distinct buffers.
        let s = unsafe { std::slice::from_raw_parts(src.vir_addr as *const u8, sn) };
        // SAFETY: as above, for the destination.
        let d = unsafe { std::slice::from_raw_parts_mut(dst.vir_addr as *mut u8, dn) };
        convert(s, sk, src.wstride as usize, src.hstride as usize, srect, d, dk, dst.wstride as usize, drect);
        return Ok(());
    }
    if src.handle == 0 || dst.handle == 0 {
        return Err((
            IM_STATUS_NOT_SUPPORTED,
            "zcpipe fake librga: imported handles (importbuffer_fd) or two virtual addresses only".into(),
        ));
    }
    if src.handle == dst.handle {
        return Err((IM_STATUS_NOT_SUPPORTED, "zcpipe fake librga: in-place jobs not supported".into()));
    }
    let full = |b: &RgaBuffer, r: ImRect| {
        if r.width > 0 && r.height > 0 {
            r
        } else {
            ImRect { x: 0, y: 0, width: b.width, height: b.height }
        }
    };
    let (srect, drect) = (full(src, srect), full(dst, drect));
    let (sk, dk) = check(src, dst, pat, &srect, &drect, usage)?;
    let (sfd, ssize, dfd, dsize) = {
        let st = state();
        let s =
            st.imports.get(&src.handle).ok_or((IM_STATUS_FAILED, format!("handle[{}] is not imported", src.handle)))?;
        let d =
            st.imports.get(&dst.handle).ok_or((IM_STATUS_FAILED, format!("handle[{}] is not imported", dst.handle)))?;
        (s.fd, s.size, d.fd, d.size)
    };
    for (b, k, size) in [(src, sk, ssize), (dst, dk, dsize)] {
        let need = k.image_bytes(b.wstride as u64, b.hstride as u64);
        if need > size {
            return Err((
                IM_STATUS_FAILED,
                format!("Only get buffer {size} byte from handle[{}], but current required {need} byte", b.handle),
            ));
        }
    }
    let sm = Mapping::new(sfd, ssize as usize, false)
        .map_err(|e| (IM_STATUS_FAILED, format!("mmap of handle[{}]: errno {e}", src.handle)))?;
    let dm = Mapping::new(dfd, dsize as usize, true)
        .map_err(|e| (IM_STATUS_FAILED, format!("mmap of handle[{}]: errno {e}", dst.handle)))?;
    dma_sync(sfd, DMA_BUF_SYNC_READ)
        .map_err(|e| (IM_STATUS_FAILED, format!("DMA_BUF_IOCTL_SYNC START on handle[{}]: errno {e}", src.handle)))?;
    dma_sync(dfd, DMA_BUF_SYNC_WRITE)
        .map_err(|e| (IM_STATUS_FAILED, format!("DMA_BUF_IOCTL_SYNC START on handle[{}]: errno {e}", dst.handle)))?;
    {
        // SAFETY: `sm` maps `ssize` readable bytes and lives through this block; the
        // source and destination are different imports (checked above), so if they are
        // different fds of one memfd the caller broke librga's contract, not memory safety
        // of these plain-byte views.
        let s = unsafe { std::slice::from_raw_parts(sm.ptr as *const u8, sm.len) };
        // SAFETY: `dm` maps `dsize` writable bytes; nothing else in this process views them.
        let d = unsafe { std::slice::from_raw_parts_mut(dm.ptr as *mut u8, dm.len) };
        convert(s, sk, src.wstride as usize, src.hstride as usize, srect, d, dk, dst.wstride as usize, drect);
    }
    let e1 = dma_sync(dfd, DMA_BUF_SYNC_END | DMA_BUF_SYNC_WRITE);
    let e2 = dma_sync(sfd, DMA_BUF_SYNC_END | DMA_BUF_SYNC_READ);
    e1.and(e2).map_err(|e| (IM_STATUS_FAILED, format!("DMA_BUF_IOCTL_SYNC END: errno {e}")))?;
    Ok(())
}

/// `IM_STATUS improcess(rga_buffer_t src, rga_buffer_t dst, rga_buffer_t pat, im_rect srect,
/// im_rect drect, im_rect prect, int usage)`: the C (7-argument) one; synchronous.
#[no_mangle]
pub extern "C" fn improcess(
    src: RgaBuffer,
    dst: RgaBuffer,
    pat: RgaBuffer,
    srect: ImRect,
    drect: ImRect,
    _prect: ImRect,
    usage: c_int,
) -> c_int {
    let (status, msg) = match process(&src, &dst, &pat, srect, drect, usage) {
        Ok(()) => (IM_STATUS_SUCCESS, String::new()),
        Err((s, m)) => (fail(s, m.clone()), m),
    };
    log(format!(
        "improcess src[{}] dst[{}] srect={} drect={} usage={usage:#x} core={:#x} status={status} msg={msg:?}",
        buf_str(&src),
        buf_str(&dst),
        rect_str(&srect),
        rect_str(&drect),
        CORE.with(|c| c.get())
    ));
    status
}

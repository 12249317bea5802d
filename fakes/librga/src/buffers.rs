//! Buffers: `importbuffer_fd` (and the virtual and physical address imports it refuses),
//! `releasebuffer_handle`, and the `wrapbuffer_*_t` constructors of [`RgaBuffer`].

use std::ffi::{c_int, c_void};

use super::*;

/// `rga_buffer_handle_t importbuffer_fd(int fd, im_handle_param_t *param)`.
///
/// # Safety
/// `param` is null or points to a valid `im_handle_param_t`.
#[no_mangle]
pub unsafe extern "C" fn importbuffer_fd(fd: c_int, param: *mut ImHandleParam) -> u32 {
    if param.is_null() {
        log(format!("importbuffer_fd fd={fd} param=null handle=0"));
        fail(IM_STATUS_INVALID_PARAM, "importbuffer_fd: param is NULL".into());
        return 0;
    }
    // SAFETY: non-null and valid per this function's contract; only read.
    let p = unsafe { *param };
    if no_device() {
        log(format!("importbuffer_fd fd={fd} width={} height={} format={:#x} handle=0", p.width, p.height, p.format));
        fail(IM_STATUS_NO_SESSION, NO_SESSION_MSG.into());
        return 0;
    }
    let Some(kind) = Kind::from_rk(p.format as c_int) else {
        log(format!("importbuffer_fd fd={fd} width={} height={} format={:#x} handle=-1", p.width, p.height, p.format));
        fail(IM_STATUS_NOT_SUPPORTED, format!("Invaild format [{:#x}]!", p.format));
        // librga returns IM_STATUS_NOT_SUPPORTED cast to a handle on a bad format.
        return IM_STATUS_NOT_SUPPORTED as u32;
    };
    // SAFETY: F_DUPFD_CLOEXEC on the caller's fd; a bad fd just fails with EBADF.
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if dup < 0 {
        let e = errno();
        log(format!(
            "importbuffer_fd fd={fd} width={} height={} format={:#x} errno={e} handle=0",
            p.width, p.height, p.format
        ));
        fail(IM_STATUS_FAILED, format!("RGA_IOC_IMPORT_BUFFER fail! fd {fd}: errno {e}"));
        return 0;
    }
    if dmabuf_only() && !is_dmabuf(dup) {
        // The RGA driver takes dma-bufs only (rga_dma_buf.c: dma_buf_get fails on a memfd).
        // SAFETY: closing our own duplicate.
        unsafe { libc::close(dup) };
        log(format!(
            "importbuffer_fd fd={fd} width={} height={} format={:#x} not_dmabuf handle=0",
            p.width, p.height, p.format
        ));
        fail(IM_STATUS_FAILED, format!("RGA_IOC_IMPORT_BUFFER fail! fd {fd}: not a dma-buf"));
        return 0;
    }
    let size = fd_size(dup).unwrap_or(0);
    let need = kind.image_bytes(p.width as u64, p.height as u64);
    if need == 0 || need > size {
        // SAFETY: closing our own duplicate.
        unsafe { libc::close(dup) };
        log(format!(
            "importbuffer_fd fd={fd} width={} height={} format={:#x} size={size} need={need} handle=0",
            p.width, p.height, p.format
        ));
        fail(IM_STATUS_FAILED, format!("Only get buffer {size} byte from fd[{fd}], but current required {need} byte"));
        return 0;
    }
    let mut st = state();
    st.last += 1;
    let h = st.last;
    st.imports.insert(h, Import { fd: dup, size });
    drop(st);
    // The inode names the buffer across processes (each process has its own fd numbers):
    // tests match it with the inode the fake librknnrt logs for the memory it reads.
    log(format!(
        "importbuffer_fd fd={fd} ino={} width={} height={} format={:#x} size={size} handle={h}",
        fd_inode(dup),
        p.width,
        p.height,
        p.format
    ));
    h
}

/// `rga_buffer_handle_t importbuffer_virtualaddr(void *va, im_handle_param_t *param)`:
/// logged and refused (zcpipe must never import CPU addresses).
///
/// # Safety
/// Never dereferences its arguments.
#[no_mangle]
pub unsafe extern "C" fn importbuffer_virtualaddr(va: *mut c_void, _param: *mut ImHandleParam) -> u32 {
    log(format!("importbuffer_virtualaddr va={va:p} handle=0"));
    fail(IM_STATUS_NOT_SUPPORTED, "zcpipe fake librga: virtual addresses are not supported".into());
    0
}

/// `rga_buffer_handle_t importbuffer_physicaladdr(uint64_t pa, im_handle_param_t *param)`:
/// logged and refused.
///
/// # Safety
/// Never dereferences its arguments.
#[no_mangle]
pub unsafe extern "C" fn importbuffer_physicaladdr(pa: u64, _param: *mut ImHandleParam) -> u32 {
    log(format!("importbuffer_physicaladdr pa={pa:#x} handle=0"));
    fail(IM_STATUS_NOT_SUPPORTED, "zcpipe fake librga: physical addresses are not supported".into());
    0
}

/// `IM_STATUS releasebuffer_handle(rga_buffer_handle_t handle)`.
#[no_mangle]
pub extern "C" fn releasebuffer_handle(handle: u32) -> c_int {
    let imp = state().imports.remove(&handle);
    match imp {
        Some(i) => {
            // SAFETY: closing our own duplicate, once (it left the table above).
            unsafe { libc::close(i.fd) };
            log(format!("releasebuffer_handle handle={handle} status={IM_STATUS_SUCCESS}"));
            IM_STATUS_SUCCESS
        }
        None => {
            log(format!("releasebuffer_handle handle={handle} status={IM_STATUS_FAILED}"));
            fail(IM_STATUS_FAILED, format!("RGA_IOC_RELEASE_BUFFER fail! handle {handle} is not imported"))
        }
    }
}

pub(super) fn wrap(width: c_int, height: c_int, wstride: c_int, hstride: c_int, format: c_int) -> RgaBuffer {
    let mut b = RgaBuffer::zeroed();
    b.width = width;
    b.height = height;
    b.wstride = if wstride != 0 { wstride } else { width };
    b.hstride = if hstride != 0 { hstride } else { height };
    b.format = format;
    b
}

/// `rga_buffer_t wrapbuffer_handle_t(rga_buffer_handle_t handle, int width, int height, int
/// wstride, int hstride, int format)`.
#[no_mangle]
pub extern "C" fn wrapbuffer_handle_t(
    handle: u32,
    width: c_int,
    height: c_int,
    wstride: c_int,
    hstride: c_int,
    format: c_int,
) -> RgaBuffer {
    let mut b = wrap(width, height, wstride, hstride, format);
    b.handle = handle;
    log(format!("wrapbuffer_handle_t {}", buf_str(&b)));
    b
}

/// `rga_buffer_t wrapbuffer_virtualaddr_t(void* vir_addr, ...)`: logged (zcpipe calls it only
/// in --copy-mode, where RGA is fed CPU memory as a plain pipeline would).
#[no_mangle]
pub extern "C" fn wrapbuffer_virtualaddr_t(
    vir_addr: *mut c_void,
    width: c_int,
    height: c_int,
    wstride: c_int,
    hstride: c_int,
    format: c_int,
) -> RgaBuffer {
    let mut b = wrap(width, height, wstride, hstride, format);
    b.vir_addr = vir_addr;
    log(format!("wrapbuffer_virtualaddr_t {}", buf_str(&b)));
    b
}

/// `rga_buffer_t wrapbuffer_physicaladdr_t(void* phy_addr, ...)`: logged.
#[no_mangle]
pub extern "C" fn wrapbuffer_physicaladdr_t(
    phy_addr: *mut c_void,
    width: c_int,
    height: c_int,
    wstride: c_int,
    hstride: c_int,
    format: c_int,
) -> RgaBuffer {
    let mut b = wrap(width, height, wstride, hstride, format);
    b.phy_addr = phy_addr;
    log(format!("wrapbuffer_physicaladdr_t {}", buf_str(&b)));
    b
}

/// `rga_buffer_t wrapbuffer_fd_t(int fd, ...)`: logged (per-call fd import is what zcpipe
/// avoids).
#[no_mangle]
pub extern "C" fn wrapbuffer_fd_t(
    fd: c_int,
    width: c_int,
    height: c_int,
    wstride: c_int,
    hstride: c_int,
    format: c_int,
) -> RgaBuffer {
    let mut b = wrap(width, height, wstride, hstride, format);
    b.fd = fd;
    log(format!("wrapbuffer_fd_t {}", buf_str(&b)));
    b
}

/// `$ZCPIPE_FAKE_RGA_DMABUF_ONLY=1`: imports refuse what is not a dma-buf, as the driver does.
fn dmabuf_only() -> bool {
    std::env::var_os("ZCPIPE_FAKE_RGA_DMABUF_ONLY").is_some_and(|v| v == "1")
}

/// Whether `fd` is a dma-buf: it answers `DMA_BUF_IOCTL_SYNC` (a memfd answers ENOTTY).
fn is_dmabuf(fd: c_int) -> bool {
    let start: u64 = DMA_BUF_SYNC_READ;
    // SAFETY: `start` is a valid `struct dma_buf_sync` (one __u64) the kernel only reads.
    let r = unsafe { libc::ioctl(fd, DMA_BUF_IOCTL_SYNC as _, &start as *const u64) };
    if r != 0 {
        return false;
    }
    let end: u64 = DMA_BUF_SYNC_READ | DMA_BUF_SYNC_END;
    // SAFETY: as above.
    unsafe { libc::ioctl(fd, DMA_BUF_IOCTL_SYNC as _, &end as *const u64) };
    true
}

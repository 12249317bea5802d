//! A test-only fake of Rockchip's `librga.so`: the im2d C API of librga 1.10.3, done on the CPU.
//!
//! It exports the `extern "C"` symbols zcpipe's binding (`src/sys/rga.rs`) resolves, with the
//! struct layouts and enum values of librga's headers (`include/im2d_type.h`,
//! `im2d_buffer.h`, `im2d_common.h`, `im2d_single.h`, `rga.h`), plus the address-based
//! calls zcpipe must never make (`importbuffer_virtualaddr`, `wrapbuffer_virtualaddr_t`,
//! `wrapbuffer_fd_t`...), so that a call to them shows up in the log:
//!
//! - `importbuffer_fd` keeps its own duplicate of the fd (as the RGA driver keeps a dma-buf
//!   reference) and hands out increasing handles; `releasebuffer_handle` closes it.
//! - `imcheck_t` enforces librga 1.10's rules (`im2d_impl.cpp`: `rga_check_info`,
//!   `rga_check_format` with `rga_yuv_legality_check`, `rga_check_align` with RK3588's
//!   16-byte `byte_stride`, `rga_check_limit` with a 16x scale limit), returning the same
//!   statuses and keeping a message for `imStrError_t`.
//! - `improcess` (sync only) maps the imported fds (source read-only, destination
//!   read-write) between `DMA_BUF_IOCTL_SYNC` START and END (memfds answer ENOTTY, which is
//!   tolerated), and converts NV12/NV16/YUYV/UYVY/RGB888/BGR888 into an RGB888/BGR888/RGBA8888
//!   rectangle with a bilinear resize (half-pixel centres) and BT.601 limited-range YCbCr.
//! - With `$ZCPIPE_FAKE_RGA_NO_DEVICE` set it behaves like librga 1.10.3 on a machine whose
//!   `/dev/rga` cannot be opened: `imcheck_t` answers `IM_STATUS_NO_SESSION`,
//!   `importbuffer_fd` 0, `improcess` `IM_STATUS_NO_SESSION`, and `querystring` crashes (the real one dereferences a null
//!   session; here: abort).
//! - With `$ZCPIPE_FAKE_RGA_DMABUF_ONLY=1`, `importbuffer_fd` refuses an fd that is not a
//!   dma-buf (a memfd), as the RGA driver does: handle 0, `IM_STATUS_FAILED`.
//! - Every call appends one line (`name key=value ...`) to the file named by
//!   `$ZCPIPE_FAKE_RGA_LOG`, opened with O_APPEND and written with one write(2).
//!
//! Struct layouts assume a 64-bit target (x86_64, aarch64), as zcpipe's binding does.

#![allow(non_snake_case)] // imStrError_t: librga's spelling.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CString};
use std::io::Write;
use std::sync::{LazyLock, Mutex};

mod buffers;
mod checks;
mod info;
mod job;

use checks::*;

/// `im_rect`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImRect {
    /// Left, pixels.
    pub x: c_int,
    /// Top, pixels.
    pub y: c_int,
    /// Width, pixels.
    pub width: c_int,
    /// Height, pixels.
    pub height: c_int,
}

/// `im_colorkey_range`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ImColorkeyRange {
    /// Max.
    pub max: c_int,
    /// Min.
    pub min: c_int,
}

/// `im_nn_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ImNn {
    /// Scales and offsets on R, G, B.
    pub v: [c_int; 6],
}

/// `rga_buffer_t` (96 bytes on LP64).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RgaBuffer {
    /// CPU address.
    pub vir_addr: *mut c_void,
    /// Physical address.
    pub phy_addr: *mut c_void,
    /// dma-buf fd.
    pub fd: c_int,
    /// Width, pixels.
    pub width: c_int,
    /// Height, pixels.
    pub height: c_int,
    /// Pitch, pixels.
    pub wstride: c_int,
    /// Rows to the chroma plane.
    pub hstride: c_int,
    /// `RK_FORMAT_*`.
    pub format: c_int,
    /// `IM_COLOR_SPACE_MODE`.
    pub color_space_mode: c_int,
    /// Global alpha.
    pub global_alpha: c_int,
    /// Read mode.
    pub rd_mode: c_int,
    /// Legacy colour.
    pub color: c_int,
    /// Legacy colour key.
    pub colorkey_range: ImColorkeyRange,
    /// Legacy quantisation.
    pub nn: ImNn,
    /// Legacy ROP.
    pub rop_code: c_int,
    /// Imported handle.
    pub handle: u32,
}

impl RgaBuffer {
    fn zeroed() -> RgaBuffer {
        RgaBuffer {
            vir_addr: std::ptr::null_mut(),
            phy_addr: std::ptr::null_mut(),
            fd: 0,
            width: 0,
            height: 0,
            wstride: 0,
            hstride: 0,
            format: 0,
            color_space_mode: 0,
            global_alpha: 0,
            rd_mode: 0,
            color: 0,
            colorkey_range: ImColorkeyRange::default(),
            nn: ImNn::default(),
            rop_code: 0,
            handle: 0,
        }
    }
    fn is_valid(&self) -> bool {
        !self.vir_addr.is_null() || !self.phy_addr.is_null() || self.fd > 0 || self.handle > 0
    }
}

/// `im_handle_param_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ImHandleParam {
    /// Pitch, pixels.
    pub width: u32,
    /// Rows.
    pub height: u32,
    /// `RK_FORMAT_*`.
    pub format: u32,
}

const IM_STATUS_NOERROR: c_int = 2;
const IM_STATUS_SUCCESS: c_int = 1;
const IM_STATUS_NOT_SUPPORTED: c_int = -1;
const IM_STATUS_INVALID_PARAM: c_int = -3;
const IM_STATUS_ILLEGAL_PARAM: c_int = -4;
const IM_STATUS_NO_SESSION: c_int = -6;
const IM_STATUS_FAILED: c_int = 0;

const IM_ALPHA_BLEND_MASK: c_int = 0x1ffc0;
const IM_HAL_TRANSFORM_MASK: c_int = 0x3f;
const IM_CROP: c_int = 1 << 20;
const IM_COLOR_FILL: c_int = 1 << 21;
const IM_ASYNC: c_int = 1 << 26;

const IM_CONFIG_SCHEDULER_CORE: c_int = 0;
const IM_CONFIG_PRIORITY: c_int = 1;
const IM_CONFIG_CHECK: c_int = 2;
const IM_SCHEDULER_MASK: u64 = 0xf;

const IM_YUV_TO_RGB_BT601_LIMIT: c_int = 1;

/// RK3588's merged limits (librga's hw_info_table): 16-byte pitch alignment, 16x scaling,
/// 8192 pixels a side.
const BYTE_STRIDE: u32 = 16;
const SCALE_LIMIT: f32 = 16.0;
const MAX_SIDE: c_int = 8192;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Nv12,
    Nv16,
    Yuyv,
    Uyvy,
    Rgb,
    Bgr,
    Rgba,
}

impl Kind {
    fn from_rk(format: c_int) -> Option<Kind> {
        Some(match format {
            0xa00 => Kind::Nv12,  // RK_FORMAT_YCbCr_420_SP
            0x800 => Kind::Nv16,  // RK_FORMAT_YCbCr_422_SP
            0x1c00 => Kind::Yuyv, // RK_FORMAT_YUYV_422
            0x1e00 => Kind::Uyvy, // RK_FORMAT_UYVY_422
            0x200 => Kind::Rgb,   // RK_FORMAT_RGB_888
            0x700 => Kind::Bgr,   // RK_FORMAT_BGR_888
            0x000 => Kind::Rgba,  // RK_FORMAT_RGBA_8888
            _ => return None,
        })
    }
    fn name(self) -> &'static str {
        match self {
            Kind::Nv12 => "YCbCr420SP",
            Kind::Nv16 => "YCbCr422SP",
            Kind::Yuyv => "YUYV422",
            Kind::Uyvy => "UYVY422",
            Kind::Rgb => "RGB888",
            Kind::Bgr => "BGR888",
            Kind::Rgba => "RGBA8888",
        }
    }
    fn yuv(self) -> bool {
        matches!(self, Kind::Nv12 | Kind::Nv16 | Kind::Yuyv | Kind::Uyvy)
    }
    /// Bits per pixel of the first plane (librga's `get_perPixel_stride_from_format`).
    fn bits(self) -> u32 {
        match self {
            Kind::Nv12 | Kind::Nv16 => 8,
            Kind::Yuyv | Kind::Uyvy => 16,
            Kind::Rgb | Kind::Bgr => 24,
            Kind::Rgba => 32,
        }
    }
    /// Bytes of a `wstride x hstride` image.
    fn image_bytes(self, ws: u64, hs: u64) -> u64 {
        match self {
            Kind::Nv12 => ws * hs * 3 / 2,
            Kind::Nv16 | Kind::Yuyv | Kind::Uyvy => ws * hs * 2,
            Kind::Rgb | Kind::Bgr => ws * hs * 3,
            Kind::Rgba => ws * hs * 4,
        }
    }
}

struct Import {
    /// Our own duplicate of the imported fd.
    fd: c_int,
    /// Its size in bytes.
    size: u64,
}

#[derive(Default)]
struct State {
    last: u32,
    imports: HashMap<u32, Import>,
}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(|| Mutex::new(State::default()));

thread_local! {
    /// librga keeps the last error message per thread (`g_rga_err_str`).
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
    /// Storage behind the strings returned to C (valid until the next call on this thread).
    static RETURNED: RefCell<CString> = RefCell::new(CString::default());
    /// `imconfig(IM_CONFIG_SCHEDULER_CORE)`, per thread like librga's `g_im2d_context`.
    static CORE: Cell<u64> = const { Cell::new(0) };
}

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Appends `line` to `$ZCPIPE_FAKE_RGA_LOG` with one write(2) on an O_APPEND file.
fn log(line: String) {
    let Some(path) = std::env::var_os("ZCPIPE_FAKE_RGA_LOG") else { return };
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = f.write(format!("{line}\n").as_bytes());
    }
}

/// Whether to act as if `/dev/rga` could not be opened (`$ZCPIPE_FAKE_RGA_NO_DEVICE`).
fn no_device() -> bool {
    std::env::var_os("ZCPIPE_FAKE_RGA_NO_DEVICE").is_some()
}

const NO_SESSION_MSG: &str = "failed to open /dev/rga:No such file or directory.";

fn fail(status: c_int, msg: String) -> c_int {
    LAST_ERROR.with(|e| *e.borrow_mut() = msg);
    status
}

fn ret_str(s: String) -> *const c_char {
    let c = CString::new(s.replace('\0', " ")).unwrap_or_default();
    RETURNED.with(|r| {
        *r.borrow_mut() = c;
        r.borrow().as_ptr()
    })
}

fn rect_str(r: &ImRect) -> String {
    format!("{},{},{},{}", r.x, r.y, r.width, r.height)
}

fn buf_str(b: &RgaBuffer) -> String {
    format!(
        "handle={} fd={} va={:p} {}x{} stride={}x{} format={:#x} csc={}",
        b.handle, b.fd, b.vir_addr, b.width, b.height, b.wstride, b.hstride, b.format, b.color_space_mode
    )
}

fn errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The size of an open file: `fstat`'s `st_size` (memfds; dma-bufs since Linux 3.x set the
/// inode size too), else `lseek(SEEK_END)` on a private duplicate.
/// `st_ino` of `fd` (fstat(2)); 0 if fstat fails. dma-bufs and memfds each have their own.
fn fd_inode(fd: c_int) -> u64 {
    // SAFETY: fstat writes one `struct stat` into `st`, which we own; a bad fd fails cleanly.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd, &mut st) } == 0 {
        st.st_ino
    } else {
        0
    }
}

fn fd_size(fd: c_int) -> Option<u64> {
    // SAFETY: `libc::stat` is plain integers, for which all-zero bytes are a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid out-pointer for fstat; `fd` is whatever the caller passed,
    // and fstat on a bad fd just fails with EBADF.
    if unsafe { libc::fstat(fd, &mut st) } == 0 && st.st_size > 0 {
        return Some(st.st_size as u64);
    }
    // SAFETY: lseek on an fd we own (our duplicate); the offset change is ours alone.
    let end = unsafe { libc::lseek(fd, 0, libc::SEEK_END) };
    (end > 0).then_some(end as u64)
}

#[cfg(test)]
mod tests;

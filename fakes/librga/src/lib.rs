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

fn wrap(width: c_int, height: c_int, wstride: c_int, hstride: c_int, format: c_int) -> RgaBuffer {
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
fn check(
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

const DMA_BUF_IOCTL_SYNC: u64 = 0x4008_6200;
const DMA_BUF_SYNC_READ: u64 = 1;
const DMA_BUF_SYNC_WRITE: u64 = 2;
const DMA_BUF_SYNC_END: u64 = 4;

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
fn convert(s: &[u8], sk: Kind, sws: usize, shs: usize, sr: ImRect, d: &mut [u8], dk: Kind, dws: usize, dr: ImRect) {
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

/// `IM_STATUS imsync(int release_fence_fd)`: the fake never hands out fences.
#[no_mangle]
pub extern "C" fn imsync(release_fence_fd: c_int) -> c_int {
    log(format!("imsync fence={release_fence_fd} status={IM_STATUS_ILLEGAL_PARAM}"));
    fail(IM_STATUS_ILLEGAL_PARAM, format!("illegal fence_fd[{release_fence_fd}]"))
}

/// `IM_STATUS imconfig(IM_CONFIG_NAME name, uint64_t value)`, with librga's checks.
#[no_mangle]
pub extern "C" fn imconfig(name: c_int, value: u64) -> c_int {
    let status = match name {
        IM_CONFIG_SCHEDULER_CORE if value & IM_SCHEDULER_MASK != 0 => {
            CORE.with(|c| c.set(value));
            IM_STATUS_SUCCESS
        }
        IM_CONFIG_SCHEDULER_CORE => fail(
            IM_STATUS_ILLEGAL_PARAM,
            format!("It's not legal rga_core[{value:#x}], it needs to be a 'IM_SCHEDULER_CORE'."),
        ),
        IM_CONFIG_PRIORITY if value <= 6 => IM_STATUS_SUCCESS,
        IM_CONFIG_CHECK if value <= 1 => IM_STATUS_SUCCESS,
        IM_CONFIG_PRIORITY | IM_CONFIG_CHECK => {
            fail(IM_STATUS_ILLEGAL_PARAM, format!("It's not legal config value [{value:#x}]"))
        }
        _ => fail(IM_STATUS_NOT_SUPPORTED, "Unsupported config name!".into()),
    };
    log(format!("imconfig name={name} value={value:#x} status={status}"));
    status
}

/// `const char* querystring(int name)`: the fake's identity in librga's format.
#[no_mangle]
pub extern "C" fn querystring(name: c_int) -> *const c_char {
    log(format!("querystring name={name}"));
    if no_device() {
        // librga 1.10.3 dereferences its null session here.
        log("querystring crashed: no /dev/rga session".into());
        std::process::abort();
    }
    let lines = [
        "RGA vendor            : zcpipe fake librga (CPU; not Rockchip)\n",
        "RGA_api version       : v1.10.3_[1]-zcpipe-fake\nRGA version           : FAKE_CPU \n",
        "Max input             : 8192x8192\n",
        "Max output            : 8192x8192\n",
        "Byte stride           : 16 byte\n",
        "Scale limit           : 0.0625 ~ 16\n",
        "Input support format  : RGBA_8888 RGB_888 YUV420_sp_8bit YUV422_sp_8bit YUYV422 \n",
        "output support format : RGBA_8888 RGB_888 \n",
        "RGA feature           : \n",
        "expected performance  : unknown\n",
    ];
    let s = match name {
        0..=9 => lines[name as usize].to_string(),
        10 => lines.concat(),
        _ => "Invalid instruction".to_string(),
    };
    ret_str(s)
}

/// `const char* imStrError_t(IM_STATUS status)`: librga's status text, plus this thread's
/// last error message for failures.
#[no_mangle]
pub extern "C" fn imStrError_t(status: c_int) -> *const c_char {
    log(format!("imStrError_t status={status}"));
    let text = match status {
        IM_STATUS_NOERROR => return ret_str("No errors during operation".into()),
        IM_STATUS_SUCCESS => return ret_str("Run successfully".into()),
        IM_STATUS_NOT_SUPPORTED => "Unsupported function",
        -2 => "Memory overflow",
        IM_STATUS_INVALID_PARAM => "Invalid parameters",
        IM_STATUS_ILLEGAL_PARAM => "Illegal parameters",
        -5 => "Version verification failed",
        IM_STATUS_NO_SESSION => "No session",
        IM_STATUS_FAILED => "Fatal error",
        _ => return ret_str("unkown status".into()),
    };
    let msg = LAST_ERROR.with(|e| std::mem::take(&mut *e.borrow_mut()));
    ret_str(format!("{text}: {msg}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layouts_match_im2d_type_h() {
        assert_eq!(size_of::<RgaBuffer>(), 96);
        assert_eq!(offset_of!(RgaBuffer, fd), 16);
        assert_eq!(offset_of!(RgaBuffer, format), 36);
        assert_eq!(offset_of!(RgaBuffer, colorkey_range), 56);
        assert_eq!(offset_of!(RgaBuffer, handle), 92);
        assert_eq!(size_of::<ImRect>(), 16);
        assert_eq!(size_of::<ImHandleParam>(), 12);
    }

    #[test]
    fn yuv_stride_rule() {
        let b = wrap(640, 480, 650, 480, 0xa00);
        let e = check(
            &b,
            &wrap(416, 312, 416, 416, 0x700),
            &RgaBuffer::zeroed(),
            &ImRect::default(),
            &ImRect { x: 0, y: 0, width: 416, height: 312 },
            0,
        )
        .unwrap_err();
        assert_eq!(e.0, IM_STATUS_NOT_SUPPORTED);
        assert!(e.1.contains("should be 16 aligned"), "{}", e.1);
    }

    #[test]
    fn grey_converts_to_grey() {
        // 4x2 NV12 of Y=126 Cb=Cr=128 -> RGB 128 everywhere.
        let mut s = vec![126u8; 16 * 2 + 16];
        s[32..].fill(128);
        let mut d = vec![0u8; 4 * 2 * 3];
        convert(
            &s,
            Kind::Nv12,
            16,
            2,
            ImRect { x: 0, y: 0, width: 4, height: 2 },
            &mut d,
            Kind::Bgr,
            4,
            ImRect { x: 0, y: 0, width: 4, height: 2 },
        );
        assert!(d.iter().all(|&v| v == 128), "{d:?}");
    }
}

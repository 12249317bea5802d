//! librga's im2d C API (Rockchip RGA 2D accelerator), opened at run time, never linked.
//!
//! Contract: the headers of airockchip/librga v1.10.3 (`include/im2d_type.h`,
//! `im2d_buffer.h`, `im2d_common.h`, `im2d_single.h`, `rga.h`); the layouts used here are
//! unchanged since v1.8.0 (`rga_buffer_t`, `im_rect`, `im_handle_param_t`). Only symbols
//! the headers declare `IM_C_API` / `IM_EXPORT_API` (`extern "C"` for C++ builds) are
//! resolved: the C++ overloads (`importbuffer_fd(int, int)`, the 10-argument `improcess`
//! with default arguments, `imcheck`, `wrapbuffer_handle`) are mangled and unusable from C.
//! The C symbols, checked with `nm -D` on librga 1.10.3's `libs/Linux/gcc-aarch64/librga.so`:
//! `importbuffer_fd(int, im_handle_param_t *)`, `releasebuffer_handle`,
//! `wrapbuffer_handle_t`, `imcheck_t`, the 7-argument `improcess` (no `im_opt_t`, no fences),
//! `imconfig`, `querystring`, `imStrError_t`.
//!
//! Struct layouts are for 64-bit targets (x86_64, aarch64: 8-byte pointers, 4-byte `int`
//! and enums); each is checked by hand-computed sizes and offsets in the tests below.
//!
//! The library path is `$ZCPIPE_LIBRGA` if set, else `librga.so`, then `librga.so.2` (the
//! name Debian/Ubuntu's `librga2` package installs without the `-dev` symlink).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::Path;

use anyhow::{anyhow, bail, Result};

/// `rga_buffer_handle_t` (`im2d_type.h`): a buffer imported into the RGA driver; 0 is none.
pub type RgaBufferHandle = u32;

/// `IM_STATUS` values (`im2d_type.h`): what every im2d call returns, as a C `int`.
pub type ImStatus = c_int;
/// `IM_STATUS_NOERROR`: what `imcheck_t` returns when every rule holds.
pub const IM_STATUS_NOERROR: ImStatus = 2;
/// `IM_STATUS_SUCCESS`: what a job returns when done.
pub const IM_STATUS_SUCCESS: ImStatus = 1;
/// `IM_STATUS_NOT_SUPPORTED` (`-IM_ERROR_NOT_SUPPORTED`): format, alignment or scale the
/// hardware cannot do.
pub const IM_STATUS_NOT_SUPPORTED: ImStatus = -1;
/// `IM_STATUS_OUT_OF_MEMORY`.
pub(crate) const IM_STATUS_OUT_OF_MEMORY: ImStatus = -2;
/// `IM_STATUS_INVALID_PARAM`: e.g. a YUV size or rect that is not even.
pub const IM_STATUS_INVALID_PARAM: ImStatus = -3;
/// `IM_STATUS_ILLEGAL_PARAM`: e.g. a zero or negative size.
pub const IM_STATUS_ILLEGAL_PARAM: ImStatus = -4;
/// `IM_STATUS_ERROR_VERSION`: header and library versions disagree.
pub(crate) const IM_STATUS_ERROR_VERSION: ImStatus = -5;
/// `IM_STATUS_NO_SESSION`: `/dev/rga` could not be opened.
pub const IM_STATUS_NO_SESSION: ImStatus = -6;
/// `IM_STATUS_FAILED` (`-IM_ERROR_FAILED`, which is 0).
pub const IM_STATUS_FAILED: ImStatus = 0;

/// Whether `s` is one of the two success values (`IM_STATUS_SUCCESS`, `IM_STATUS_NOERROR`).
pub fn status_ok(s: ImStatus) -> bool {
    s == IM_STATUS_SUCCESS || s == IM_STATUS_NOERROR
}

/// The `IM_STATUS` enumerator's name, for messages (`IM_STATUS_INVALID_PARAM`).
pub fn status_name(s: ImStatus) -> &'static str {
    match s {
        IM_STATUS_NOERROR => "IM_STATUS_NOERROR",
        IM_STATUS_SUCCESS => "IM_STATUS_SUCCESS",
        IM_STATUS_NOT_SUPPORTED => "IM_STATUS_NOT_SUPPORTED",
        IM_STATUS_OUT_OF_MEMORY => "IM_STATUS_OUT_OF_MEMORY",
        IM_STATUS_INVALID_PARAM => "IM_STATUS_INVALID_PARAM",
        IM_STATUS_ILLEGAL_PARAM => "IM_STATUS_ILLEGAL_PARAM",
        IM_STATUS_ERROR_VERSION => "IM_STATUS_ERROR_VERSION",
        IM_STATUS_NO_SESSION => "IM_STATUS_NO_SESSION",
        IM_STATUS_FAILED => "IM_STATUS_FAILED",
        _ => "unknown IM_STATUS",
    }
}

/// `IM_SYNC` (`IM_USAGE` in `im2d_type.h`, `1 << 19`): the call returns when the job is done.
pub const IM_SYNC: c_int = 1 << 19;
/// `IM_ASYNC` (`1 << 26`): the call returns at once with a fence (not used by zcpipe).
pub const IM_ASYNC: c_int = 1 << 26;
/// `IM_CROP` (`1 << 20`): unused by librga 1.10, listed for the fake.
pub const IM_CROP: c_int = 1 << 20;
/// `IM_COLOR_FILL` (`1 << 21`): `imfill` jobs.
pub const IM_COLOR_FILL: c_int = 1 << 21;

/// `IM_CONFIG_SCHEDULER_CORE` (`IM_CONFIG_NAME`): `imconfig` value is an `IM_SCHEDULER_*` mask.
pub const IM_CONFIG_SCHEDULER_CORE: c_int = 0;
/// `IM_CONFIG_PRIORITY`: `imconfig` value 0..=6.
pub const IM_CONFIG_PRIORITY: c_int = 1;
/// `IM_CONFIG_CHECK`: `imconfig` value 0 or 1.
pub const IM_CONFIG_CHECK: c_int = 2;

/// `IM_SCHEDULER_RGA3_CORE0` (`IM_SCHEDULER_CORE`): RK3588's first RGA3 core.
pub const IM_SCHEDULER_RGA3_CORE0: u64 = 1 << 0;
/// `IM_SCHEDULER_RGA3_CORE1`: RK3588's second RGA3 core.
pub const IM_SCHEDULER_RGA3_CORE1: u64 = 1 << 1;
/// `IM_SCHEDULER_RGA2_CORE0`: the RGA2 core (RK3588, RK3568, RK3566...).
pub const IM_SCHEDULER_RGA2_CORE0: u64 = 1 << 2;
/// `IM_SCHEDULER_RGA2_CORE1`.
pub const IM_SCHEDULER_RGA2_CORE1: u64 = 1 << 3;
/// `IM_SCHEDULER_MASK`: the bits `imconfig(IM_CONFIG_SCHEDULER_CORE, ..)` accepts.
pub const IM_SCHEDULER_MASK: u64 = 0xf;

/// `RGA_VENDOR` (`IM_INFORMATION`): `querystring` name for the vendor line.
pub const RGA_VENDOR: c_int = 0;
/// `RGA_VERSION`: `querystring` name for the API and hardware version lines.
pub const RGA_VERSION: c_int = 1;

/// `IM_COLOR_SPACE_DEFAULT` (`IM_COLOR_SPACE_MODE`).
pub const IM_COLOR_SPACE_DEFAULT: c_int = 0;
/// `IM_YUV_TO_RGB_BT601_LIMIT`: YCbCr -> RGB with BT.601 limited range (what V4L2 cameras
/// send by default and what the CPU scaler uses); set on the destination's
/// `color_space_mode`, as librga's own `imcvtcolor` does.
pub const IM_YUV_TO_RGB_BT601_LIMIT: c_int = 1;

// RK_FORMAT_* (`RgaSURF_FORMAT` in rga.h). Since librga 1.2 the values are shifted left by 8
// bits to tell them from Android HAL_PIXEL_FORMAT_* values; the unshifted ones are legacy.
/// `RK_FORMAT_RGBA_8888`: bytes R, G, B, A.
pub const RK_FORMAT_RGBA_8888: c_int = 0x0 << 8;
/// `RK_FORMAT_RGB_888`: bytes R, G, B (V4L2 `RGB24`).
pub const RK_FORMAT_RGB_888: c_int = 0x2 << 8;
/// `RK_FORMAT_BGR_888`: bytes B, G, R (V4L2 `BGR24`, the YOLOX model input).
pub const RK_FORMAT_BGR_888: c_int = 0x7 << 8;
/// `RK_FORMAT_YCbCr_422_SP`: Y plane, then interleaved Cb,Cr at half width, full height (NV16).
pub const RK_FORMAT_YCBCR_422_SP: c_int = 0x8 << 8;
/// `RK_FORMAT_YCbCr_420_SP`: Y plane, then interleaved Cb,Cr at half width and height
/// (NV12; rga.h's comment on this value says "Cr:Cb" and the one on `YCrCb_420_SP` says
/// "Cb:Cr", swapped: every Rockchip user maps NV12 to this value).
pub const RK_FORMAT_YCBCR_420_SP: c_int = 0xa << 8;
/// `RK_FORMAT_YCrCb_422_SP` (NV61).
pub const RK_FORMAT_YCRCB_422_SP: c_int = 0xc << 8;
/// `RK_FORMAT_YCrCb_420_SP` (NV21).
pub const RK_FORMAT_YCRCB_420_SP: c_int = 0xe << 8;
/// `RK_FORMAT_YUYV_422`: packed Y0 Cb Y1 Cr (V4L2 `YUYV`).
pub const RK_FORMAT_YUYV_422: c_int = 0x1c << 8;
/// `RK_FORMAT_UYVY_422`: packed Cb Y0 Cr Y1 (V4L2 `UYVY`).
pub const RK_FORMAT_UYVY_422: c_int = 0x1e << 8;
/// `RK_FORMAT_UNKNOWN`.
pub const RK_FORMAT_UNKNOWN: c_int = 0x100 << 8;

/// `im_rect` (`im2d_type.h`, 16 bytes): a rectangle in pixels.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImRect {
    /// Left edge, pixels.
    pub x: c_int,
    /// Top edge, pixels.
    pub y: c_int,
    /// Width, pixels (0 with height 0: the whole image).
    pub width: c_int,
    /// Height, pixels.
    pub height: c_int,
}

/// `im_colorkey_range` (`im2d_type.h`, 8 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImColorkeyRange {
    /// Largest colour key value.
    pub max: c_int,
    /// Smallest colour key value.
    pub min: c_int,
}

/// `im_nn_t` (`im2d_type.h`, 24 bytes): per-channel quantisation scale and offset.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImNn {
    /// Scale on R.
    pub scale_r: c_int,
    /// Scale on G.
    pub scale_g: c_int,
    /// Scale on B.
    pub scale_b: c_int,
    /// Offset on R.
    pub offset_r: c_int,
    /// Offset on G.
    pub offset_g: c_int,
    /// Offset on B.
    pub offset_b: c_int,
}

/// `rga_buffer_t` (`im2d_type.h`, 96 bytes on 64-bit): one image as the im2d calls take it.
/// zcpipe fills only `handle` (through `wrapbuffer_handle_t`) and `color_space_mode`: the
/// address fields stay null, so the driver reaches the memory through the imported dma-buf.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RgaBuffer {
    /// `vir_addr`: a CPU address (never used by zcpipe: PITFALLS 14).
    pub vir_addr: *mut c_void,
    /// `phy_addr`: a physical address (never used by zcpipe).
    pub phy_addr: *mut c_void,
    /// `fd`: a dma-buf fd for per-call import (never used by zcpipe: it imports once).
    pub fd: c_int,
    /// Image width, pixels.
    pub width: c_int,
    /// Image height, pixels.
    pub height: c_int,
    /// Row pitch in pixels (not bytes: PITFALLS 9); for YUV the luma pitch.
    pub wstride: c_int,
    /// Rows from the start of the luma plane to the start of the chroma plane.
    pub hstride: c_int,
    /// `RK_FORMAT_*`.
    pub format: c_int,
    /// `IM_COLOR_SPACE_MODE` bits.
    pub color_space_mode: c_int,
    /// `global_alpha` (a union with two `uint16_t` alpha-bit values since 1.9.2).
    pub global_alpha: c_int,
    /// `IM_RD_MODE` (raster, AFBC, tile).
    pub rd_mode: c_int,
    /// Legacy: fill colour.
    pub color: c_int,
    /// Legacy: colour key range.
    pub colorkey_range: ImColorkeyRange,
    /// Legacy: quantisation.
    pub nn: ImNn,
    /// Legacy: ROP code.
    pub rop_code: c_int,
    /// The imported buffer's handle.
    pub handle: RgaBufferHandle,
}

impl Default for RgaBuffer {
    /// The all-zero buffer (`memset(&buf, 0, sizeof(buf))`): what librga takes as "no
    /// buffer" for an unused `pat`.
    fn default() -> Self {
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
}

/// `im_handle_param_t` (`im2d_type.h`, 12 bytes): the image an imported buffer holds, from
/// which the driver computes the bytes it may touch (`width` and `height` are the pitches:
/// wstride in pixels and hstride in rows).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImHandleParam {
    /// Row pitch, pixels.
    pub width: u32,
    /// Rows (hstride).
    pub height: u32,
    /// `RK_FORMAT_*` (shifted value; librga shifts it back for the driver).
    pub format: u32,
}

/// `im_opt_t` of librga 1.10.x (`im2d_type.h`, 312 bytes on 64-bit): the options of the
/// C++-only 10-argument `improcess`. zcpipe calls the C 7-argument `improcess`, which passes
/// none, so only the head is spelled out; `rest` holds `osd_config` (at byte 56),
/// `intr_config`, `interp`, `gauss_config` and `reserve[92]`. Versions 1.8 to 1.10.0 had
/// `reserve[128]` instead of `interp`/`gauss_config` (304 bytes): never pass this struct to
/// a librga of unknown version.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ImOpt {
    /// `version`: `RGA_CURRENT_API_HEADER_VERSION` of the caller's header.
    pub version: u32,
    /// Fill colour.
    pub color: c_int,
    /// Colour key range.
    pub colorkey_range: ImColorkeyRange,
    /// Quantisation.
    pub nn: ImNn,
    /// ROP code.
    pub rop_code: c_int,
    /// Job priority 0..=6.
    pub priority: c_int,
    /// `IM_SCHEDULER_*` core mask for this job.
    pub core: c_int,
    /// `IM_MOSAIC_MODE`.
    pub mosaic_mode: c_int,
    /// The rest of the struct, opaque (8-byte aligned: `im_osd_invert_t` holds `uint64_t`).
    pub rest: [u64; 32],
}

/// `IM_STATUS improcess(rga_buffer_t src, rga_buffer_t dst, rga_buffer_t pat, im_rect srect,
/// im_rect drect, im_rect prect, int usage)` (`im2d_single.h`, the `IM_C_API` one).
pub(crate) type ImprocessFn =
    unsafe extern "C" fn(RgaBuffer, RgaBuffer, RgaBuffer, ImRect, ImRect, ImRect, c_int) -> ImStatus;
/// `IM_STATUS imcheck_t(const rga_buffer_t src, const rga_buffer_t dst, const rga_buffer_t
/// pat, const im_rect src_rect, const im_rect dst_rect, const im_rect pat_rect, const int
/// mode_usage)` (`im2d_common.h`).
pub(crate) type ImcheckFn =
    unsafe extern "C" fn(RgaBuffer, RgaBuffer, RgaBuffer, ImRect, ImRect, ImRect, c_int) -> ImStatus;
/// `rga_buffer_handle_t importbuffer_fd(int fd, im_handle_param_t *param)` (`im2d_buffer.h`).
pub(crate) type ImportbufferFdFn = unsafe extern "C" fn(c_int, *mut ImHandleParam) -> RgaBufferHandle;
/// `IM_STATUS releasebuffer_handle(rga_buffer_handle_t handle)` (`im2d_buffer.h`).
pub(crate) type ReleasebufferHandleFn = unsafe extern "C" fn(RgaBufferHandle) -> ImStatus;
/// `rga_buffer_t wrapbuffer_handle_t(rga_buffer_handle_t handle, int width, int height, int
/// wstride, int hstride, int format)` (`im2d_buffer.h`).
pub(crate) type WrapbufferHandleFn =
    unsafe extern "C" fn(RgaBufferHandle, c_int, c_int, c_int, c_int, c_int) -> RgaBuffer;
/// `rga_buffer_t wrapbuffer_virtualaddr_t(void *vir_addr, int width, int height, int wstride,
/// int hstride, int format)` (`im2d_buffer.h`): an image in CPU memory (`--copy-mode` only).
pub(crate) type WrapbufferVirtualaddrFn =
    unsafe extern "C" fn(*mut std::ffi::c_void, c_int, c_int, c_int, c_int, c_int) -> RgaBuffer;
/// `IM_STATUS imconfig(IM_CONFIG_NAME name, uint64_t value)` (`im2d_common.h`).
pub(crate) type ImconfigFn = unsafe extern "C" fn(c_int, u64) -> ImStatus;
/// `const char* querystring(int name)` (`im2d_common.h`).
pub(crate) type QuerystringFn = unsafe extern "C" fn(c_int) -> *const c_char;
/// `const char* imStrError_t(IM_STATUS status)` (`im2d_common.h`).
pub(crate) type ImStrErrorFn = unsafe extern "C" fn(ImStatus) -> *const c_char;

/// The environment variable naming the librga to open.
pub const LIBRGA_ENV: &str = "ZCPIPE_LIBRGA";

/// The names tried through the loader's search path without [`LIBRGA_ENV`], in order
/// (Debian's librga2 package ships only the versioned one).
pub const LIBRGA_NAMES: [&str; 2] = ["librga.so", "librga.so.2"];

/// librga, opened, with the C entry points zcpipe uses resolved. The library stays loaded
/// as long as this value lives.
pub struct Librga {
    importbuffer_fd: ImportbufferFdFn,
    releasebuffer_handle: ReleasebufferHandleFn,
    wrapbuffer_handle_t: WrapbufferHandleFn,
    wrapbuffer_virtualaddr_t: WrapbufferVirtualaddrFn,
    imcheck_t: ImcheckFn,
    improcess: ImprocessFn,
    imconfig: ImconfigFn,
    querystring: QuerystringFn,
    im_str_error_t: ImStrErrorFn,
    path: String,
    // Last: the function pointers above must not outlive it (fields drop in order, and
    // nothing calls them during drop anyway).
    _lib: libloading::Library,
}

impl std::fmt::Debug for Librga {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Librga").field("path", &self.path).finish()
    }
}

/// Copies a C string librga returned (static or thread-local storage, valid until the next
/// call on this thread) into an owned `String`.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string that stays valid during this call.
unsafe fn owned_c_str(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: non-null and NUL-terminated per this function's contract.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

impl Librga {
    /// Opens librga: `library` if given, else `$ZCPIPE_LIBRGA`, else `librga.so` then
    /// `librga.so.2` (found through the dynamic loader's search path), and resolves every
    /// C symbol zcpipe calls. Errors name what was tried and the fix.
    pub fn open(library: Option<&Path>) -> Result<Librga> {
        // SAFETY: librga's initialisers only set up its logging and a per-thread im2d
        // context (it opens /dev/rga on first use).
        let (source, errors) = match unsafe { super::load_library(library, LIBRGA_ENV, &LIBRGA_NAMES) } {
            Ok((lib, path)) => return Self::resolve(lib, path),
            Err(e) => e,
        };
        if source == super::LibrarySource::Env {
            bail!("cannot load librga named by {LIBRGA_ENV} ({errors}): point {LIBRGA_ENV} at a librga.so (librga >= 1.8) or unset it")
        }
        bail!(
            "cannot load librga ({errors}); install it (Debian/Ubuntu for Rockchip: apt install librga2; \
             or build airockchip/librga) or point {LIBRGA_ENV} at librga.so; or use --scaler cpu"
        )
    }

    fn resolve(lib: libloading::Library, path: String) -> Result<Librga> {
        macro_rules! sym {
            ($name:literal, $ty:ty) => {{
                // SAFETY: the symbol is declared extern "C" by librga's headers with exactly
                // the signature `$ty` spells (see the type's doc); copying the fn pointer out
                // is sound while `lib` lives, which `Librga` guarantees by owning it.
                let s: Result<libloading::Symbol<'_, $ty>, _> = unsafe { lib.get(concat!($name, "\0").as_bytes()) };
                *s.map_err(|e| {
                    anyhow!(
                        "{path} has no C symbol `{}` ({e}); zcpipe needs librga >= 1.8 (the im2d handle API)",
                        $name
                    )
                })?
            }};
        }
        Ok(Librga {
            importbuffer_fd: sym!("importbuffer_fd", ImportbufferFdFn),
            releasebuffer_handle: sym!("releasebuffer_handle", ReleasebufferHandleFn),
            wrapbuffer_handle_t: sym!("wrapbuffer_handle_t", WrapbufferHandleFn),
            wrapbuffer_virtualaddr_t: sym!("wrapbuffer_virtualaddr_t", WrapbufferVirtualaddrFn),
            imcheck_t: sym!("imcheck_t", ImcheckFn),
            improcess: sym!("improcess", ImprocessFn),
            imconfig: sym!("imconfig", ImconfigFn),
            querystring: sym!("querystring", QuerystringFn),
            im_str_error_t: sym!("imStrError_t", ImStrErrorFn),
            path,
            _lib: lib,
        })
    }

    /// What was opened (`librga.so`, or the path given).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// `importbuffer_fd(fd, &param)`: imports a dma-buf into the RGA driver once; the driver
    /// keeps its own reference, so the handle stays valid until
    /// [`Librga::releasebuffer_handle`]. Returns the handle, or `None` when librga returns 0
    /// or a negative status cast to a handle (its own bad-format path).
    pub fn importbuffer_fd(&self, fd: BorrowedFd<'_>, param: ImHandleParam) -> Option<RgaBufferHandle> {
        let mut p = param;
        // SAFETY: `fd` is open for the duration of the call; `p` is a valid
        // im_handle_param_t that librga only reads; the signature matches im2d_buffer.h.
        let h = unsafe { (self.importbuffer_fd)(fd.as_raw_fd(), &mut p) };
        (h != 0 && (h as i32) > 0).then_some(h)
    }

    /// `releasebuffer_handle(handle)`: drops the driver's reference to an imported buffer.
    pub fn releasebuffer_handle(&self, handle: RgaBufferHandle) -> ImStatus {
        // SAFETY: plain integer argument; matches im2d_buffer.h.
        unsafe { (self.releasebuffer_handle)(handle) }
    }

    /// `wrapbuffer_handle_t(handle, width, height, wstride, hstride, format)`: the
    /// `rga_buffer_t` librga builds for an imported buffer (sizes in pixels and rows).
    pub fn wrapbuffer_handle_t(
        &self,
        handle: RgaBufferHandle,
        width: c_int,
        height: c_int,
        wstride: c_int,
        hstride: c_int,
        format: c_int,
    ) -> RgaBuffer {
        // SAFETY: integer arguments; the 96-byte struct comes back through the platform's
        // struct-return convention, which `extern "C"` and `#[repr(C)]` match.
        unsafe { (self.wrapbuffer_handle_t)(handle, width, height, wstride, hstride, format) }
    }

    /// `wrapbuffer_virtualaddr_t(vir_addr, width, height, wstride, hstride, format)`: an
    /// `rga_buffer_t` naming CPU memory; the driver pins those pages per job, as a plain
    /// (copying) pipeline feeds RGA. The pointer is only stored, not dereferenced, here; a
    /// job using the buffer must keep the memory valid until it returns.
    ///
    /// # Safety
    /// A job given the returned buffer reads (source) or writes (destination) `wstride x
    /// hstride` pixels of `format` at `vir_addr`: the caller keeps that memory valid, and
    /// unaliased for a destination, until the job returns.
    pub unsafe fn wrapbuffer_virtualaddr_t(
        &self,
        vir_addr: *mut std::ffi::c_void,
        width: c_int,
        height: c_int,
        wstride: c_int,
        hstride: c_int,
        format: c_int,
    ) -> RgaBuffer {
        // SAFETY: librga only copies the pointer into the returned struct; integer
        // arguments; the struct comes back by the platform's struct-return convention.
        unsafe { (self.wrapbuffer_virtualaddr_t)(vir_addr, width, height, wstride, hstride, format) }
    }

    /// `imcheck_t(src, dst, pat, srect, drect, prect, mode_usage)`: librga's validation of
    /// one job against the hardware's rules; `IM_STATUS_NOERROR` when they hold.
    #[allow(clippy::too_many_arguments)] // librga's C signature, argument for argument.
    pub fn imcheck_t(
        &self,
        src: RgaBuffer,
        dst: RgaBuffer,
        pat: RgaBuffer,
        srect: ImRect,
        drect: ImRect,
        prect: ImRect,
        usage: c_int,
    ) -> ImStatus {
        // SAFETY: all arguments are plain data passed by value; the buffers carry handles
        // (address fields null), which librga does not dereference in its checks.
        unsafe { (self.imcheck_t)(src, dst, pat, srect, drect, prect, usage) }
    }

    /// `improcess(src, dst, pat, srect, drect, prect, usage)`: runs one job (with
    /// [`IM_SYNC`]: returns when the device is done); `IM_STATUS_SUCCESS` on success.
    #[allow(clippy::too_many_arguments)] // librga's C signature, argument for argument.
    pub fn improcess(
        &self,
        src: RgaBuffer,
        dst: RgaBuffer,
        pat: RgaBuffer,
        srect: ImRect,
        drect: ImRect,
        prect: ImRect,
        usage: c_int,
    ) -> ImStatus {
        // SAFETY: plain data by value; the buffers name imported handles that outlive the
        // call (the caller owns them until release); no CPU addresses are passed.
        unsafe { (self.improcess)(src, dst, pat, srect, drect, prect, usage) }
    }

    /// `imconfig(name, value)`. librga keeps the configuration per thread (`__thread
    /// g_im2d_context` in im2d.cpp): call it on the thread that runs the jobs.
    pub fn imconfig(&self, name: c_int, value: u64) -> ImStatus {
        // SAFETY: plain integer arguments; matches im2d_common.h.
        unsafe { (self.imconfig)(name, value) }
    }

    /// `querystring(name)`, copied (e.g. [`RGA_VERSION`]: the API and hardware versions).
    pub fn querystring(&self, name: c_int) -> String {
        // SAFETY: librga returns a pointer into a static std::string or a literal; it is
        // copied at once, before any other librga call on this thread.
        unsafe { owned_c_str((self.querystring)(name)) }
    }

    /// `imStrError_t(status)`, copied: the status text and librga's last error message on
    /// this thread (e.g. which alignment rule a check broke).
    pub fn im_str_error(&self, status: ImStatus) -> String {
        // SAFETY: librga returns a literal or a thread-local buffer; copied at once.
        unsafe { owned_c_str((self.im_str_error_t)(status)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    // Sizes and offsets computed by hand from im2d_type.h (librga 1.10.3) for LP64
    // (x86_64, aarch64): int 4, pointer 8, enum 4.
    #[test]
    fn im_rect_and_handle_param_match_im2d_type_h() {
        assert_eq!(size_of::<ImRect>(), 16);
        assert_eq!(offset_of!(ImRect, height), 12);
        assert_eq!(size_of::<ImHandleParam>(), 12);
        assert_eq!(offset_of!(ImHandleParam, format), 8);
        assert_eq!(size_of::<ImColorkeyRange>(), 8);
        assert_eq!(size_of::<ImNn>(), 24);
    }

    #[test]
    fn rga_buffer_t_matches_im2d_type_h() {
        // vir_addr 0, phy_addr 8, fd 16, width 20, height 24, wstride 28, hstride 32,
        // format 36, color_space_mode 40, global_alpha 44, rd_mode 48, color 52,
        // colorkey_range 56..64, nn 64..88, rop_code 88, handle 92; 96 bytes, 8-aligned.
        assert_eq!(size_of::<RgaBuffer>(), 96);
        assert_eq!(align_of::<RgaBuffer>(), 8);
        assert_eq!(offset_of!(RgaBuffer, fd), 16);
        assert_eq!(offset_of!(RgaBuffer, width), 20);
        assert_eq!(offset_of!(RgaBuffer, wstride), 28);
        assert_eq!(offset_of!(RgaBuffer, hstride), 32);
        assert_eq!(offset_of!(RgaBuffer, format), 36);
        assert_eq!(offset_of!(RgaBuffer, color_space_mode), 40);
        assert_eq!(offset_of!(RgaBuffer, global_alpha), 44);
        assert_eq!(offset_of!(RgaBuffer, rd_mode), 48);
        assert_eq!(offset_of!(RgaBuffer, colorkey_range), 56);
        assert_eq!(offset_of!(RgaBuffer, nn), 64);
        assert_eq!(offset_of!(RgaBuffer, rop_code), 88);
        assert_eq!(offset_of!(RgaBuffer, handle), 92);
    }

    #[test]
    fn im_opt_t_matches_im2d_type_h_1_10() {
        // version 0, color 4, colorkey_range 8, nn 16, rop_code 40, priority 44, core 48,
        // mosaic_mode 52; im_osd_t (104 bytes, 8-aligned) at 56; im_intr_config_t (16) at
        // 160; interp at 176; im_gauss_t (32, 8-aligned) at 184; reserve[92] at 216..308;
        // padded to 312.
        assert_eq!(size_of::<ImOpt>(), 312);
        assert_eq!(align_of::<ImOpt>(), 8);
        assert_eq!(offset_of!(ImOpt, nn), 16);
        assert_eq!(offset_of!(ImOpt, core), 48);
        assert_eq!(offset_of!(ImOpt, rest), 56);
    }

    #[test]
    fn enum_values_match_headers() {
        assert_eq!(RK_FORMAT_YCBCR_420_SP, 0xa00);
        assert_eq!(RK_FORMAT_YCBCR_422_SP, 0x800);
        assert_eq!(RK_FORMAT_YUYV_422, 0x1c00);
        assert_eq!(RK_FORMAT_BGR_888, 0x700);
        assert_eq!(RK_FORMAT_RGB_888, 0x200);
        assert_eq!(IM_SYNC, 0x80000);
        assert_eq!((IM_STATUS_INVALID_PARAM, IM_STATUS_NOT_SUPPORTED, IM_STATUS_FAILED), (-3, -1, 0));
        assert!(status_ok(IM_STATUS_NOERROR) && status_ok(IM_STATUS_SUCCESS) && !status_ok(IM_STATUS_FAILED));
        assert_eq!(IM_SCHEDULER_RGA2_CORE0, 4);
    }

    #[test]
    fn missing_library_is_a_clear_error() {
        let e = Librga::open(Some(Path::new("/nonexistent/librga.so"))).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/librga.so") && e.contains(LIBRGA_ENV), "{e}");
    }
}

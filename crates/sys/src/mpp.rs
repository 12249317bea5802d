//! Rockchip MPP (`librockchip_mpp.so`, the video decoder/encoder library of Rockchip's BSP):
//! our own thin binding of its C API, opened at run time, never linked.
//!
//! Contract: the public headers of rockchip-linux/mpp (`inc/rk_type.h`, `inc/rk_mpi.h`,
//! `inc/rk_mpi_cmd.h`, `inc/mpp_err.h`, `inc/mpp_frame.h`, `inc/mpp_packet.h`,
//! `inc/mpp_buffer.h`; read at commit ee946af0 of 2024-03, the layouts and values used here
//! date from 2018 or earlier). Only what a decoder into zcpipe's own dma-bufs needs is bound:
//! `mpp_create`/`mpp_init`/`mpp_destroy`, the [`MppApi`] table (`decode_put_packet`,
//! `decode_get_frame`, `reset`, `control`), packet and frame accessors, and the external
//! buffer group calls. Several of the header's names are macros over the exported function
//! with caller strings: `mpp_buffer_commit(group, info)` is
//! `mpp_buffer_import_with_tag(group, info, NULL, MODULE_TAG, __FUNCTION__)`,
//! `mpp_buffer_group_get_external(group, type)` is `mpp_buffer_group_get(group, type,
//! MPP_BUFFER_EXTERNAL, MODULE_TAG, __FUNCTION__)`, `mpp_buffer_get_fd(buffer)` is
//! `mpp_buffer_get_fd_with_caller(buffer, __FUNCTION__)`: the exported functions are bound,
//! with zcpipe's tag and caller strings.
//!
//! Struct layouts are checked in this file's tests against sizes worked out by hand from the
//! headers for LP64 (x86_64, aarch64) and ILP32; `make test-aarch64` runs them on aarch64.
//!
//! The library path is `$ZCPIPE_LIBMPP` if set, else `librockchip_mpp.so.1`, then
//! `librockchip_mpp.so` (Debian/Ubuntu for Rockchip ship the versioned name in
//! `librockchip-mpp1`; the plain one comes with `-dev`).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, bail, Result};

/// `MPP_RET` (`mpp_err.h`): what every MPP call returns, a C enum (4 bytes).
pub type MppRet = c_int;
/// `MPP_OK` / `MPP_SUCCESS`.
pub const MPP_OK: MppRet = 0;
/// `MPP_NOK`.
pub const MPP_NOK: MppRet = -1;
/// `MPP_ERR_UNKNOW` (sic): e.g. `mpp_buffer_commit` into a group of another type or mode.
pub const MPP_ERR_UNKNOW: MppRet = -2;
/// `MPP_ERR_NULL_PTR`.
pub const MPP_ERR_NULL_PTR: MppRet = -3;
/// `MPP_ERR_MALLOC`.
pub const MPP_ERR_MALLOC: MppRet = -4;
/// `MPP_ERR_VALUE`: a bad argument (e.g. an output timeout out of range).
pub const MPP_ERR_VALUE: MppRet = -6;
/// `MPP_ERR_TIMEOUT`: `decode_get_frame` found no frame within the output timeout.
pub const MPP_ERR_TIMEOUT: MppRet = -8;
/// `MPP_ERR_INIT` (`MPP_ERR_BASE - 2`): a call before `mpp_init`.
pub const MPP_ERR_INIT: MppRet = -1002;
/// `MPP_ERR_STREAM` (`MPP_ERR_BASE - 4`).
pub const MPP_ERR_STREAM: MppRet = -1004;
/// `MPP_ERR_BUFFER_FULL` (`MPP_ERR_BASE - 12`): `decode_put_packet` refused the packet
/// because the input queue is full; feed it again after taking frames out.
pub const MPP_ERR_BUFFER_FULL: MppRet = -1012;

/// The `MPP_RET` enumerator's name, for messages (`MPP_ERR_BUFFER_FULL`).
pub fn ret_name(r: MppRet) -> &'static str {
    match r {
        MPP_OK => "MPP_OK",
        MPP_NOK => "MPP_NOK",
        MPP_ERR_UNKNOW => "MPP_ERR_UNKNOW",
        MPP_ERR_NULL_PTR => "MPP_ERR_NULL_PTR",
        MPP_ERR_MALLOC => "MPP_ERR_MALLOC",
        -5 => "MPP_ERR_OPEN_FILE",
        MPP_ERR_VALUE => "MPP_ERR_VALUE",
        -7 => "MPP_ERR_READ_BIT",
        MPP_ERR_TIMEOUT => "MPP_ERR_TIMEOUT",
        -9 => "MPP_ERR_PERM",
        -1001 => "MPP_ERR_LIST_STREAM",
        MPP_ERR_INIT => "MPP_ERR_INIT",
        -1003 => "MPP_ERR_VPU_CODEC_INIT",
        MPP_ERR_STREAM => "MPP_ERR_STREAM",
        -1005 => "MPP_ERR_FATAL_THREAD",
        -1006 => "MPP_ERR_NOMEM",
        -1007 => "MPP_ERR_PROTOL",
        -1008 => "MPP_FAIL_SPLIT_FRAME",
        -1009 => "MPP_ERR_VPUHW",
        -1011 => "MPP_EOS_STREAM_REACHED",
        MPP_ERR_BUFFER_FULL => "MPP_ERR_BUFFER_FULL",
        -1013 => "MPP_ERR_DISPLAY_FULL",
        _ => "unknown MPP_RET",
    }
}

/// `MppCtxType` (`rk_type.h`), a C enum.
pub type MppCtxType = c_int;
/// `MPP_CTX_DEC`: a decoder context.
pub const MPP_CTX_DEC: MppCtxType = 0;
/// `MPP_CTX_ENC`: an encoder context.
pub const MPP_CTX_ENC: MppCtxType = 1;

/// `MppCodingType` (`rk_type.h`, "sync with the omx_video.h"), a C enum.
pub type MppCodingType = c_int;
/// `MPP_VIDEO_CodingAVC`: H.264 (8th enumerator from 0).
pub const MPP_VIDEO_CODING_AVC: MppCodingType = 7;
/// `MPP_VIDEO_CodingMJPEG`: Motion JPEG.
pub const MPP_VIDEO_CODING_MJPEG: MppCodingType = 8;
/// `MPP_VIDEO_CodingHEVC`: H.265, `MPP_VIDEO_CodingVC1 = 0x01000000` + 4 (after FLV1,
/// DIVX3, VP6) = 16777220.
pub const MPP_VIDEO_CODING_HEVC: MppCodingType = 0x0100_0004;

/// The codec's name for messages (`H.264`), or `None` for a value zcpipe does not know.
/// `MJPEG` is named, but [`Mpp::decoder`] (the stream API) refuses it: MPP decodes MJPEG
/// only through its task API (`mpp.cpp` gives MJPEG one input task on the advanced thread,
/// which needs each packet to be one whole JPEG in an `MppBuffer` carrying its output frame
/// as `KEY_OUTPUT_FRAME` meta, as `test/mpi_dec_test.c` does): plain packets through
/// `decode_put_packet` are refused with `MPP_ERR_BUFFER_FULL` forever (or silently dropped
/// by newer MPP). [`MppJpeg`] is that task-API decoder.
pub fn coding_name(c: MppCodingType) -> Option<&'static str> {
    match c {
        MPP_VIDEO_CODING_AVC => Some("H.264"),
        MPP_VIDEO_CODING_HEVC => Some("H.265"),
        MPP_VIDEO_CODING_MJPEG => Some("MJPEG"),
        _ => None,
    }
}

/// The one-line error [`Mpp::decoder`] gives for [`MPP_VIDEO_CODING_MJPEG`].
pub const MJPEG_REFUSED: &str = "MPP decodes MJPEG only through its task API (one whole JPEG per packet in an MppBuffer, with an output frame attached to each packet), not through decode_put_packet, which refuses plain MJPEG packets forever (MPP_ERR_BUFFER_FULL): use sys::mpp::MppJpeg (zcpipe's task-API decoder), or decode MJPEG on the CPU";

/// `MpiCmd` (`rk_mpi_cmd.h`), a C enum. The command ids are `module | context | n`, with
/// `CMD_MODULE_MPP = 0x00200000`, `CMD_MODULE_CODEC = 0x00300000`, `CMD_CTX_ID_DEC =
/// 0x00010000`; each enumerator below is its base plus its position after the base.
pub type MpiCmd = c_int;
/// `MPP_SET_INPUT_TIMEOUT`: `MPP_CMD_BASE` (0x200000) + 6 (after ENABLE_DEINTERLACE,
/// SET_INPUT_BLOCK, SET_INTPUT_BLOCK_TIMEOUT, SET_OUTPUT_BLOCK, SET_OUTPUT_BLOCK_TIMEOUT).
/// Parameter: a pointer to the timeout ([`MPP_POLL_NON_BLOCK`], [`MPP_POLL_BLOCK`] or
/// milliseconds up to [`MPP_POLL_MAX`]).
pub const MPP_SET_INPUT_TIMEOUT: MpiCmd = 0x0020_0006;
/// `MPP_SET_OUTPUT_TIMEOUT`: `MPP_CMD_BASE` + 7. Parameter as [`MPP_SET_INPUT_TIMEOUT`]'s:
/// how long `decode_get_frame` waits for a frame.
pub const MPP_SET_OUTPUT_TIMEOUT: MpiCmd = 0x0020_0007;
/// `MPP_DEC_SET_FRAME_INFO`: `MPP_DEC_CMD_BASE` (0x310000) + 1.
pub const MPP_DEC_SET_FRAME_INFO: MpiCmd = 0x0031_0001;
/// `MPP_DEC_SET_EXT_BUF_GROUP`: `MPP_DEC_CMD_BASE` + 2. Parameter: the `MppBufferGroup`
/// itself (not a pointer to it); only after `mpp_init` (before it there is no decoder yet and
/// MPP returns `MPP_NOK`: `mpp.cpp`).
pub const MPP_DEC_SET_EXT_BUF_GROUP: MpiCmd = 0x0031_0002;
/// `MPP_DEC_SET_INFO_CHANGE_READY`: `MPP_DEC_CMD_BASE` + 3, no parameter: the decoder may
/// go on after an info-change frame, into the buffer group now set.
pub const MPP_DEC_SET_INFO_CHANGE_READY: MpiCmd = 0x0031_0003;
/// `MPP_DEC_SET_PRESENT_TIME_ORDER`: `MPP_DEC_CMD_BASE` + 4.
pub const MPP_DEC_SET_PRESENT_TIME_ORDER: MpiCmd = 0x0031_0004;
/// `MPP_DEC_SET_PARSER_SPLIT_MODE`: `MPP_DEC_CMD_BASE` + 5. Parameter: a pointer to an
/// `RK_U32`, 1 = the parser finds frame boundaries itself, so packets may be arbitrary chunks
/// of the stream. "Need to setup before init".
pub const MPP_DEC_SET_PARSER_SPLIT_MODE: MpiCmd = 0x0031_0005;
/// `MPP_DEC_SET_PARSER_FAST_MODE`: `MPP_DEC_CMD_BASE` + 6, before init.
pub const MPP_DEC_SET_PARSER_FAST_MODE: MpiCmd = 0x0031_0006;
/// `MPP_DEC_SET_OUTPUT_FORMAT`: `MPP_DEC_CMD_BASE` + 10.
pub const MPP_DEC_SET_OUTPUT_FORMAT: MpiCmd = 0x0031_000a;
/// `MPP_DEC_SET_DISABLE_ERROR`: `MPP_DEC_CMD_BASE` + 11.
pub const MPP_DEC_SET_DISABLE_ERROR: MpiCmd = 0x0031_000b;
/// `MPP_DEC_SET_IMMEDIATE_OUT`: `MPP_DEC_CMD_BASE` + 12.
pub const MPP_DEC_SET_IMMEDIATE_OUT: MpiCmd = 0x0031_000c;

/// `MppPollType` (`mpp_task.h`) `MPP_POLL_BLOCK`: wait without limit.
pub const MPP_POLL_BLOCK: i64 = -1;
/// `MPP_POLL_NON_BLOCK`: return at once (the decoder's default for both directions).
pub const MPP_POLL_NON_BLOCK: i64 = 0;
/// `MPP_POLL_MAX`: the longest timeout MPP accepts, milliseconds.
pub const MPP_POLL_MAX: i64 = 8000;

/// `MppBufferMode` (`mpp_buffer.h`) `MPP_BUFFER_INTERNAL`: MPP allocates.
pub const MPP_BUFFER_INTERNAL: c_int = 0;
/// `MPP_BUFFER_EXTERNAL`: the user commits buffers it allocated.
pub const MPP_BUFFER_EXTERNAL: c_int = 1;

/// `MppBufferType` (`mpp_buffer.h`), a C enum (the low 16 bits; flags above).
pub type MppBufferType = c_int;
/// `MPP_BUFFER_TYPE_NORMAL`: malloc'd memory.
pub const MPP_BUFFER_TYPE_NORMAL: MppBufferType = 0;
/// `MPP_BUFFER_TYPE_ION`.
pub const MPP_BUFFER_TYPE_ION: MppBufferType = 1;
/// `MPP_BUFFER_TYPE_EXT_DMA` (since 2018): an external dma-buf fd, imported as is (no dup:
/// `osal/allocator/allocator_ext_dma.c`), so the fd must stay open while MPP holds it.
pub const MPP_BUFFER_TYPE_EXT_DMA: MppBufferType = 2;
/// `MPP_BUFFER_TYPE_DRM`: DRM/GEM buffers; an imported fd is dup'ed.
pub const MPP_BUFFER_TYPE_DRM: MppBufferType = 3;
/// `MPP_BUFFER_TYPE_DMA_HEAP`.
pub const MPP_BUFFER_TYPE_DMA_HEAP: MppBufferType = 4;

/// `MppFrameFormat` (`mpp_frame.h`) `MPP_FMT_YUV420SP`: NV12 (Y plane, then interleaved
/// Cb,Cr at half width and height), `MPP_FRAME_FMT_YUV + 0`.
pub const MPP_FMT_YUV420SP: u32 = 0;
/// `MPP_FMT_YUV420SP_10BIT`.
pub const MPP_FMT_YUV420SP_10BIT: u32 = 1;
/// `MPP_FMT_YUV422SP`: NV16.
pub const MPP_FMT_YUV422SP: u32 = 2;
/// `MPP_FRAME_FMT_MASK`: the format bits of a frame's `fmt` (the rest: FBC, HDR flags).
pub const MPP_FRAME_FMT_MASK: u32 = 0x000f_ffff;
/// `MPP_FRAME_FBC_MASK`: nonzero when the frame is AFBC-compressed (never asked for here).
pub const MPP_FRAME_FBC_MASK: u32 = 0x00f0_0000;

/// `MppCtx`, `MppPacket`, `MppFrame`, `MppBuffer`, `MppBufferGroup`, `MppTask` (`rk_type.h`):
/// opaque `void *` handles.
pub type MppHandle = *mut c_void;

/// `MppApi` (`rk_mpi.h`): the function table `mpp_create` hands out, 184 bytes on LP64 (two
/// `RK_U32`, 14 function pointers, `RK_U32 reserv[16]`). zcpipe calls only
/// `decode_put_packet`, `decode_get_frame`, `reset` and `control`; the other entries are
/// kept as untyped pointers to hold the layout.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MppApi {
    /// `sizeof(MppApi)` as the library was built: checked against ours on create.
    pub size: u32,
    /// "mpp api version, generated by Git" (0 in current builds).
    pub version: u32,
    /// `MPP_RET (*decode)(MppCtx, MppPacket, MppFrame *)`.
    pub decode: *const c_void,
    /// `MPP_RET (*decode_put_packet)(MppCtx ctx, MppPacket packet)`: copies the packet's data
    /// into MPP's input queue and returns `MPP_OK`, or `MPP_ERR_BUFFER_FULL` when the queue
    /// is full (the packet is untouched then: feed it again).
    pub decode_put_packet: Option<unsafe extern "C" fn(MppHandle, MppHandle) -> MppRet>,
    /// `MPP_RET (*decode_get_frame)(MppCtx ctx, MppFrame *frame)`: a decoded frame, an
    /// info-change frame, an EOS frame, or NULL when none is ready within the output timeout.
    pub decode_get_frame: Option<unsafe extern "C" fn(MppHandle, *mut MppHandle) -> MppRet>,
    /// `encode`.
    pub encode: *const c_void,
    /// `encode_put_frame`.
    pub encode_put_frame: *const c_void,
    /// `encode_get_packet`.
    pub encode_get_packet: *const c_void,
    /// `isp`.
    pub isp: *const c_void,
    /// `isp_put_frame`.
    pub isp_put_frame: *const c_void,
    /// `isp_get_frame`.
    pub isp_get_frame: *const c_void,
    /// `poll`.
    pub poll: *const c_void,
    /// `dequeue`.
    pub dequeue: *const c_void,
    /// `enqueue`.
    pub enqueue: *const c_void,
    /// `MPP_RET (*reset)(MppCtx ctx)`: drops every queued packet and frame.
    pub reset: Option<unsafe extern "C" fn(MppHandle) -> MppRet>,
    /// `MPP_RET (*control)(MppCtx ctx, MpiCmd cmd, MppParam param)`.
    pub control: Option<unsafe extern "C" fn(MppHandle, MpiCmd, *mut c_void) -> MppRet>,
    /// `RK_U32 reserv[16]`.
    pub reserv: [u32; 16],
}

/// `MppBufferInfo` (`mpp_buffer.h`, 40 bytes on LP64, 24 on ILP32): one buffer to commit
/// into an external group.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MppBufferInfo {
    /// `MppBufferType`: must equal the group's type.
    pub type_: MppBufferType,
    /// Bytes.
    pub size: usize,
    /// CPU address (null for a dma-buf).
    pub ptr: *mut c_void,
    /// Vendor handle (null).
    pub hnd: *mut c_void,
    /// The dma-buf fd.
    pub fd: c_int,
    /// The user's index for the buffer, returned by `mpp_buffer_get_index`.
    pub index: c_int,
}

/// `MPP_RET mpp_create(MppCtx *ctx, MppApi **mpi)` (`rk_mpi.h`).
pub type MppCreateFn = unsafe extern "C" fn(*mut MppHandle, *mut *const MppApi) -> MppRet;
/// `MPP_RET mpp_init(MppCtx ctx, MppCtxType type, MppCodingType coding)` (`rk_mpi.h`).
pub type MppInitFn = unsafe extern "C" fn(MppHandle, MppCtxType, MppCodingType) -> MppRet;
/// `MPP_RET mpp_destroy(MppCtx ctx)` (`rk_mpi.h`).
pub type MppDestroyFn = unsafe extern "C" fn(MppHandle) -> MppRet;
/// `MPP_RET mpp_packet_init(MppPacket *packet, void *data, size_t size)` (`mpp_packet.h`):
/// a packet over the caller's bytes (not copied).
pub type MppPacketInitFn = unsafe extern "C" fn(*mut MppHandle, *mut c_void, usize) -> MppRet;
/// `MPP_RET mpp_packet_deinit(MppPacket *packet)` (`mpp_packet.h`).
pub type MppPacketDeinitFn = unsafe extern "C" fn(*mut MppHandle) -> MppRet;
/// `MPP_RET mpp_packet_set_eos(MppPacket packet)` (`mpp_packet.h`).
pub type MppPacketSetEosFn = unsafe extern "C" fn(MppHandle) -> MppRet;
/// `void mpp_packet_set_pts(MppPacket packet, RK_S64 pts)` (`mpp_packet.h`).
pub type MppPacketSetPtsFn = unsafe extern "C" fn(MppHandle, i64);
/// `RK_U32 mpp_frame_get_*(const MppFrame frame)` (`mpp_frame.h`): width, height,
/// hor_stride, ver_stride, info_change, eos, errinfo, discard.
pub type MppFrameGetU32Fn = unsafe extern "C" fn(MppHandle) -> u32;
/// `MppFrameFormat mpp_frame_get_fmt(MppFrame frame)` (`mpp_frame.h`): a C enum (4 bytes).
pub type MppFrameGetFmtFn = unsafe extern "C" fn(MppHandle) -> u32;
/// `RK_S64 mpp_frame_get_pts(const MppFrame frame)` (`mpp_frame.h`).
pub type MppFrameGetPtsFn = unsafe extern "C" fn(MppHandle) -> i64;
/// `size_t mpp_frame_get_buf_size(const MppFrame frame)` (`mpp_frame.h`).
pub type MppFrameGetBufSizeFn = unsafe extern "C" fn(MppHandle) -> usize;
/// `MppBuffer mpp_frame_get_buffer(const MppFrame frame)` (`mpp_frame.h`).
pub type MppFrameGetBufferFn = unsafe extern "C" fn(MppHandle) -> MppHandle;
/// `MPP_RET mpp_frame_deinit(MppFrame *frame)` (`mpp_frame.h`): frees the frame and drops its
/// reference on its buffer, which goes back to the group.
pub type MppFrameDeinitFn = unsafe extern "C" fn(*mut MppHandle) -> MppRet;
/// `MPP_RET mpp_buffer_group_get(MppBufferGroup *group, MppBufferType type, MppBufferMode
/// mode, const char *tag, const char *caller)` (`mpp_buffer.h`; the
/// `mpp_buffer_group_get_external` macro's target).
pub type MppBufferGroupGetFn =
    unsafe extern "C" fn(*mut MppHandle, MppBufferType, c_int, *const c_char, *const c_char) -> MppRet;
/// `MPP_RET mpp_buffer_import_with_tag(MppBufferGroup group, MppBufferInfo *info, MppBuffer
/// *buffer, const char *tag, const char *caller)` (`mpp_buffer.h`; `mpp_buffer_commit` is
/// this with `buffer` NULL).
pub type MppBufferImportWithTagFn =
    unsafe extern "C" fn(MppHandle, *mut MppBufferInfo, *mut MppHandle, *const c_char, *const c_char) -> MppRet;
/// `int mpp_buffer_get_fd_with_caller(MppBuffer buffer, const char *caller)` and
/// `int mpp_buffer_get_index_with_caller(...)` (`mpp_buffer.h`).
pub type MppBufferGetIntFn = unsafe extern "C" fn(MppHandle, *const c_char) -> c_int;
/// `MPP_RET mpp_buffer_group_put(MppBufferGroup group)` and `mpp_buffer_group_clear`
/// (`mpp_buffer.h`).
pub type MppBufferGroupFn = unsafe extern "C" fn(MppHandle) -> MppRet;
/// `RK_S32 mpp_buffer_group_unused(MppBufferGroup group)` (`mpp_buffer.h`): committed buffers
/// no frame holds, in an external group.
pub type MppBufferGroupUnusedFn = unsafe extern "C" fn(MppHandle) -> i32;
/// `const char *get_mpp_version(void)` (`mpp/inc/mpp_info.h`: not a public header, but
/// `extern "C"` and exported by every build).
pub type GetMppVersionFn = unsafe extern "C" fn() -> *const c_char;

/// The environment variable naming the librockchip_mpp to open.
pub const LIBMPP_ENV: &str = "ZCPIPE_LIBMPP";

/// The names tried through the loader's search path without [`LIBMPP_ENV`], in order.
pub const LIBMPP_NAMES: [&str; 2] = ["librockchip_mpp.so.1", "librockchip_mpp.so"];

/// The tag and caller strings zcpipe passes where MPP's macros pass `MODULE_TAG` and
/// `__FUNCTION__` (MPP only logs them).
const TAG: &CStr = c"zcpipe";

/// librockchip_mpp, opened, with the C entry points zcpipe uses resolved. The library stays
/// loaded as long as this value lives (share it with `Arc`: frames keep it too).
pub struct Libmpp {
    mpp_create: MppCreateFn,
    mpp_init: MppInitFn,
    mpp_destroy: MppDestroyFn,
    mpp_packet_init: MppPacketInitFn,
    mpp_packet_deinit: MppPacketDeinitFn,
    mpp_packet_set_eos: MppPacketSetEosFn,
    mpp_packet_set_pts: MppPacketSetPtsFn,
    frame_width: MppFrameGetU32Fn,
    frame_height: MppFrameGetU32Fn,
    frame_hor_stride: MppFrameGetU32Fn,
    frame_ver_stride: MppFrameGetU32Fn,
    frame_fmt: MppFrameGetFmtFn,
    frame_info_change: MppFrameGetU32Fn,
    frame_eos: MppFrameGetU32Fn,
    frame_errinfo: MppFrameGetU32Fn,
    frame_discard: MppFrameGetU32Fn,
    frame_pts: MppFrameGetPtsFn,
    frame_buf_size: MppFrameGetBufSizeFn,
    frame_buffer: MppFrameGetBufferFn,
    mpp_frame_deinit: MppFrameDeinitFn,
    mpp_buffer_group_get: MppBufferGroupGetFn,
    mpp_buffer_import_with_tag: MppBufferImportWithTagFn,
    buffer_fd: MppBufferGetIntFn,
    buffer_index: MppBufferGetIntFn,
    mpp_buffer_group_clear: MppBufferGroupFn,
    mpp_buffer_group_put: MppBufferGroupFn,
    mpp_buffer_group_unused: MppBufferGroupUnusedFn,
    get_mpp_version: Option<GetMppVersionFn>,
    path: String,
    // Last: the function pointers above must not outlive it.
    _lib: libloading::Library,
}

impl std::fmt::Debug for Libmpp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Libmpp").field("path", &self.path).finish()
    }
}

/// `Err` naming `call` and its `MPP_RET` unless it is `MPP_OK`.
fn check(call: &str, r: MppRet) -> Result<()> {
    if r == MPP_OK {
        return Ok(());
    }
    bail!("MPP {call} failed: {} ({r})", ret_name(r))
}

impl Libmpp {
    /// Opens librockchip_mpp: `library` if given, else `$ZCPIPE_LIBMPP`, else
    /// `librockchip_mpp.so.1` then `librockchip_mpp.so` (through the dynamic loader's search
    /// path), and resolves every symbol zcpipe calls. Errors name what was tried and the fix.
    pub fn open(library: Option<&Path>) -> Result<Libmpp> {
        // SAFETY: librockchip_mpp's initialisers set up its logging and buffer service
        // singletons (devices are opened on mpp_init).
        let (source, errors) = match unsafe { super::load_library(library, LIBMPP_ENV, &LIBMPP_NAMES) } {
            Ok((lib, path)) => return Self::resolve(lib, path),
            Err(e) => e,
        };
        if source == super::LibrarySource::Env {
            bail!("cannot load librockchip_mpp named by {LIBMPP_ENV} ({errors}): point {LIBMPP_ENV} at a librockchip_mpp.so or unset it")
        }
        bail!(
            "cannot load librockchip_mpp ({errors}); install Rockchip's MPP (Debian/Ubuntu for Rockchip: apt install librockchip-mpp1; or build rockchip-linux/mpp) or set {LIBMPP_ENV}=/path/to/librockchip_mpp.so; or decode on the CPU"
        )
    }

    fn resolve(lib: libloading::Library, path: String) -> Result<Libmpp> {
        macro_rules! sym {
            ($name:literal, $ty:ty) => {{
                // SAFETY: the symbol is declared extern "C" by MPP's headers with exactly the
                // signature `$ty` spells (see the type's doc); the fn pointer is copied out and
                // stays valid while `lib` lives, which `Libmpp` guarantees by owning it.
                let s: Result<libloading::Symbol<'_, $ty>, _> = unsafe { lib.get(concat!($name, "\0").as_bytes()) };
                *s.map_err(|e| anyhow!("{path} has no symbol `{}` ({e}): it is not a librockchip_mpp zcpipe can use; install Rockchip's MPP or fix {LIBMPP_ENV}", $name))?
            }};
        }
        // SAFETY: as in `sym!`; an optional symbol.
        let get_mpp_version = unsafe { lib.get::<GetMppVersionFn>(b"get_mpp_version\0") }.ok().map(|s| *s);
        Ok(Libmpp {
            mpp_create: sym!("mpp_create", MppCreateFn),
            mpp_init: sym!("mpp_init", MppInitFn),
            mpp_destroy: sym!("mpp_destroy", MppDestroyFn),
            mpp_packet_init: sym!("mpp_packet_init", MppPacketInitFn),
            mpp_packet_deinit: sym!("mpp_packet_deinit", MppPacketDeinitFn),
            mpp_packet_set_eos: sym!("mpp_packet_set_eos", MppPacketSetEosFn),
            mpp_packet_set_pts: sym!("mpp_packet_set_pts", MppPacketSetPtsFn),
            frame_width: sym!("mpp_frame_get_width", MppFrameGetU32Fn),
            frame_height: sym!("mpp_frame_get_height", MppFrameGetU32Fn),
            frame_hor_stride: sym!("mpp_frame_get_hor_stride", MppFrameGetU32Fn),
            frame_ver_stride: sym!("mpp_frame_get_ver_stride", MppFrameGetU32Fn),
            frame_fmt: sym!("mpp_frame_get_fmt", MppFrameGetFmtFn),
            frame_info_change: sym!("mpp_frame_get_info_change", MppFrameGetU32Fn),
            frame_eos: sym!("mpp_frame_get_eos", MppFrameGetU32Fn),
            frame_errinfo: sym!("mpp_frame_get_errinfo", MppFrameGetU32Fn),
            frame_discard: sym!("mpp_frame_get_discard", MppFrameGetU32Fn),
            frame_pts: sym!("mpp_frame_get_pts", MppFrameGetPtsFn),
            frame_buf_size: sym!("mpp_frame_get_buf_size", MppFrameGetBufSizeFn),
            frame_buffer: sym!("mpp_frame_get_buffer", MppFrameGetBufferFn),
            mpp_frame_deinit: sym!("mpp_frame_deinit", MppFrameDeinitFn),
            mpp_buffer_group_get: sym!("mpp_buffer_group_get", MppBufferGroupGetFn),
            mpp_buffer_import_with_tag: sym!("mpp_buffer_import_with_tag", MppBufferImportWithTagFn),
            buffer_fd: sym!("mpp_buffer_get_fd_with_caller", MppBufferGetIntFn),
            buffer_index: sym!("mpp_buffer_get_index_with_caller", MppBufferGetIntFn),
            mpp_buffer_group_clear: sym!("mpp_buffer_group_clear", MppBufferGroupFn),
            mpp_buffer_group_put: sym!("mpp_buffer_group_put", MppBufferGroupFn),
            mpp_buffer_group_unused: sym!("mpp_buffer_group_unused", MppBufferGroupUnusedFn),
            get_mpp_version,
            path,
            _lib: lib,
        })
    }

    /// `mpp_create`, checked: a context and MPP's `MppApi` table, whose size must be this
    /// binding's (else the context is destroyed and the error names both sizes).
    fn create(&self) -> Result<(MppHandle, *const MppApi)> {
        let mut ctx: MppHandle = std::ptr::null_mut();
        let mut api: *const MppApi = std::ptr::null();
        // SAFETY: two out-pointers to locals; matches rk_mpi.h.
        check("mpp_create", unsafe { (self.mpp_create)(&mut ctx, &mut api) })?;
        if ctx.is_null() || api.is_null() {
            bail!("MPP mpp_create returned no context: the library at {} is broken", self.path);
        }
        // SAFETY: `api` is MPP's static function table, valid while the library is loaded.
        let size = unsafe { (*api).size } as usize;
        if size != std::mem::size_of::<MppApi>() {
            // SAFETY: the context just created, destroyed once; it is not returned.
            unsafe { (self.mpp_destroy)(ctx) };
            bail!(
                "{}'s MppApi is {size} bytes, zcpipe's binding of rk_mpi.h expects {}: an MPP of another ABI; install Rockchip's current MPP or decode on the CPU",
                self.path,
                std::mem::size_of::<MppApi>()
            );
        }
        Ok((ctx, api))
    }

    /// `MppApi::control(ctx, cmd, param)` through table `api`; `name` is the command's name
    /// for the error.
    fn control(&self, api: *const MppApi, ctx: MppHandle, name: &str, cmd: MpiCmd, param: *mut c_void) -> Result<()> {
        // SAFETY: `api` is MPP's static table (size checked by `create`).
        let Some(f) = (unsafe { (*api).control }) else {
            bail!("MPP's MppApi has no control entry: the library at {} is broken", self.path)
        };
        // SAFETY: the live context; `param` points to what `cmd` takes (see each command's
        // doc) and lives for the call.
        check(&format!("control({name})"), unsafe { f(ctx, cmd, param) })
    }

    /// The fields of `frame` (`mpp_frame.h` accessors), with the `fd` and `buffer_index` its
    /// buffer has (negative values dropped).
    ///
    /// # Safety
    /// `frame` is a live `MppFrame` of this library.
    unsafe fn frame_info(&self, frame: MppHandle, fd: Option<RawFd>, buffer_index: Option<i32>) -> FrameInfo {
        // SAFETY: (every accessor) the caller's live frame; the accessors only read it.
        unsafe {
            FrameInfo {
                width: (self.frame_width)(frame),
                height: (self.frame_height)(frame),
                hor_stride: (self.frame_hor_stride)(frame),
                ver_stride: (self.frame_ver_stride)(frame),
                fmt: (self.frame_fmt)(frame),
                info_change: (self.frame_info_change)(frame) != 0,
                eos: (self.frame_eos)(frame) != 0,
                errinfo: (self.frame_errinfo)(frame),
                discard: (self.frame_discard)(frame),
                pts: (self.frame_pts)(frame),
                buf_size: (self.frame_buf_size)(frame),
                fd: fd.filter(|f| *f >= 0),
                buffer_index: buffer_index.filter(|i| *i >= 0),
            }
        }
    }

    /// What was opened (`librockchip_mpp.so.1`, or the path given).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// `get_mpp_version()`, copied (e.g. `7e9b5f8 author: ... date: ...`), when the library
    /// exports it.
    pub fn version(&self) -> Option<String> {
        let f = self.get_mpp_version?;
        // SAFETY: no arguments; MPP returns a pointer to a static NUL-terminated string.
        let p = unsafe { f() };
        // SAFETY: non-null static string (checked for null first).
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }
}

/// How to set up a decoder (`MPP_DEC_SET_PARSER_SPLIT_MODE`, `MPP_SET_OUTPUT_TIMEOUT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecoderOptions {
    /// Parser split mode: packets may be arbitrary chunks of an Annex-B / JPEG stream (set
    /// before `mpp_init`, as the header requires). Off: each packet is one whole frame.
    pub split_mode: bool,
    /// How long `decode_get_frame` waits for a frame: [`MPP_POLL_NON_BLOCK`] (0),
    /// [`MPP_POLL_BLOCK`] (-1) or milliseconds (1..=[`MPP_POLL_MAX`]).
    pub output_timeout_ms: i64,
}

impl Default for DecoderOptions {
    /// Split mode on, non-blocking output.
    fn default() -> Self {
        DecoderOptions { split_mode: true, output_timeout_ms: MPP_POLL_NON_BLOCK }
    }
}

/// What one `decode_get_frame` returned, as plain data (`mpp_frame.h` accessors).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameInfo {
    /// Picture width, pixels.
    pub width: u32,
    /// Picture height, rows.
    pub height: u32,
    /// Row pitch of the luma plane, bytes (= pixels for 8-bit NV12; MPP aligns it to 16 or
    /// more).
    pub hor_stride: u32,
    /// Rows from the start of the luma plane to the start of the chroma plane (e.g. 1088 for
    /// 1080-line H.264).
    pub ver_stride: u32,
    /// `MppFrameFormat` with its flag bits ([`MPP_FMT_YUV420SP`] = NV12).
    pub fmt: u32,
    /// An info-change frame: no picture; the stream's size and strides are new. Set up the
    /// buffers and call [`Mpp::info_change_ready`].
    pub info_change: bool,
    /// The end of the stream. MPP sets it on the last picture, which still has its buffer
    /// (use it: [`FrameInfo::has_picture`] does not look at `eos`), and then usually sends an
    /// empty EOS frame without a buffer; stop after the first frame with `eos`, after using
    /// its picture if it has one.
    pub eos: bool,
    /// Nonzero when the decoder met an error in this frame.
    pub errinfo: u32,
    /// Nonzero when MPP says to drop this frame (e.g. a reference was missing).
    pub discard: u32,
    /// Presentation time as set on the packets (`mpp_packet_set_pts`), in the caller's unit.
    pub pts: i64,
    /// Bytes a buffer must hold for this stream (`mpp_frame_get_buf_size`; on an info-change
    /// frame, the size to allocate each external buffer with).
    pub buf_size: usize,
    /// The dma-buf fd MPP reports for the frame's buffer (the committed fd: the binding's
    /// duplicate of the caller's, open while the [`DecodedFrame`] lives), if it has one.
    pub fd: Option<RawFd>,
    /// The buffer's index in the external group (the `index` given at commit, i.e. the
    /// position in [`Mpp::attach_external_buffers`]'s list), if it has a buffer.
    pub buffer_index: Option<i32>,
}

impl FrameInfo {
    /// Whether this frame carries a picture to use (a buffer, no info change, no error, not
    /// discarded).
    pub fn has_picture(&self) -> bool {
        self.fd.is_some() && !self.info_change && self.errinfo == 0 && self.discard == 0
    }
}

/// One frame from `decode_get_frame`, held from MPP until dropped (or [`DecodedFrame::release`]d):
/// while it lives its buffer is not reused by the decoder, and the external group's fds stay
/// open (it shares them with the [`Mpp`]), so [`FrameInfo::fd`] names the committed dma-buf
/// even after the `Mpp` is dropped. Dropping it calls `mpp_frame_deinit`, which hands the
/// buffer back, then lets go of the fds.
pub struct DecodedFrame {
    frame: MppHandle,
    info: FrameInfo,
    lib: Arc<Libmpp>,
    // Dropped after `Drop::drop` has deinited the frame.
    _fds: Option<Arc<Vec<OwnedFd>>>,
}

// SAFETY: an MppFrame is a heap object MPP's accessors only read, and `mpp_frame_deinit`
// drops the buffer reference under the buffer group's lock (`mpp_buffer_impl.cpp`): it may be
// released on a thread other than the decoding one. `DecodedFrame` is not `Sync` (no `&`
// sharing across threads is needed).
unsafe impl Send for DecodedFrame {}

impl std::fmt::Debug for DecodedFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodedFrame").field("info", &self.info).finish()
    }
}

impl DecodedFrame {
    /// The frame's fields.
    pub fn info(&self) -> &FrameInfo {
        &self.info
    }

    /// `mpp_frame_deinit`: gives the frame (and its buffer) back to MPP now.
    pub fn release(mut self) -> Result<()> {
        self.deinit()
    }

    fn deinit(&mut self) -> Result<()> {
        if self.frame.is_null() {
            return Ok(());
        }
        // SAFETY: `self.frame` is the live MppFrame decode_get_frame returned, deinited once
        // (set to null by MPP and here).
        let r = unsafe { (self.lib.mpp_frame_deinit)(&mut self.frame) };
        self.frame = std::ptr::null_mut();
        check("mpp_frame_deinit", r)
    }
}

impl Drop for DecodedFrame {
    fn drop(&mut self) {
        if let Err(e) = self.deinit() {
            log::warn!("{e}");
        }
    }
}

/// An external buffer group (`MPP_BUFFER_EXTERNAL`, `MPP_BUFFER_TYPE_EXT_DMA`) with its own
/// duplicates of the committed dma-buf fds: MPP keeps the fd numbers it was given (no dup
/// for EXT_DMA), so they stay open until the group is put and every [`DecodedFrame`] with a
/// buffer (each holds the `Arc`) is dropped.
struct ExtGroup {
    group: MppHandle,
    fds: Arc<Vec<OwnedFd>>,
}

/// One MPP decoder context on a loaded library: `mpp_create` + `mpp_init`, packets in,
/// frames out, an external buffer group of the caller's dma-bufs. Dropping it calls
/// `mpp_destroy`, then puts the buffer group, then closes the group's fds (once no
/// [`DecodedFrame`] holding a buffer is left: each keeps them open).
///
/// Buffer count: MPP keeps its reference pictures in the external group's buffers, decodes
/// only while at least one buffer is unused (`mpp_buffer_group_unused` >= 1; >= 3 with
/// deinterlace: `mpp_dec_normal.cpp`), and stops when more than 4 decoded frames wait untaken.
/// So attach at least references (up to 16 for H.264/H.265 streams, typically 3-5) + the
/// frames the consumer holds at once + 1 buffers, or the decoder stalls for good. Rockchip's
/// `test/mpi_dec_test.c` commits 24, ffmpeg-rockchip's `rkmppdec.c` 20-30: commit 24 unless
/// memory is short and the stream's reference count is known.
pub struct Mpp {
    lib: Arc<Libmpp>,
    ctx: MppHandle,
    api: *const MppApi,
    coding: MppCodingType,
    group: Option<ExtGroup>,
}

// SAFETY: one MPP context is used from one thread at a time (`&mut self` or the owner's
// thread); MPP's own threads are internal. Moving the context between threads is what MPP's
// examples do (create on one, decode on another).
unsafe impl Send for Mpp {}

impl std::fmt::Debug for Mpp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mpp").field("lib", &self.lib.path).field("coding", &coding_name(self.coding)).finish()
    }
}

impl Mpp {
    /// A decoder for `coding` ([`MPP_VIDEO_CODING_AVC`] or [`MPP_VIDEO_CODING_HEVC`];
    /// [`MPP_VIDEO_CODING_MJPEG`] is refused with [`MJPEG_REFUSED`]: use [`MppJpeg`]): `mpp_create`, the library's `MppApi` size checked against
    /// this binding's, `MPP_DEC_SET_PARSER_SPLIT_MODE` (before init, as `rk_mpi_cmd.h`
    /// says), `mpp_init(MPP_CTX_DEC, coding)`, `MPP_SET_OUTPUT_TIMEOUT`. Errors name the
    /// call and its `MPP_RET`.
    pub fn decoder(lib: Arc<Libmpp>, coding: MppCodingType, opts: DecoderOptions) -> Result<Mpp> {
        let Some(name) = coding_name(coding) else {
            bail!("MPP coding {coding} is not one zcpipe decodes: use H.264 ({MPP_VIDEO_CODING_AVC}) or H.265 ({MPP_VIDEO_CODING_HEVC})")
        };
        if coding == MPP_VIDEO_CODING_MJPEG {
            bail!("{MJPEG_REFUSED}");
        }
        if !(-1..=MPP_POLL_MAX).contains(&opts.output_timeout_ms) {
            bail!(
                "MPP output timeout {} ms is out of range: use -1 (block), 0 (non-block) or 1..={MPP_POLL_MAX} ms",
                opts.output_timeout_ms
            );
        }
        let (ctx, api) = lib.create()?;
        // From here on `Drop` destroys the context.
        let mpp = Mpp { lib, ctx, api, coding, group: None };
        let mut split: u32 = opts.split_mode.into();
        mpp.control("MPP_DEC_SET_PARSER_SPLIT_MODE", MPP_DEC_SET_PARSER_SPLIT_MODE, (&mut split as *mut u32).cast())?;
        // SAFETY: the live context; plain enum arguments.
        check(&format!("mpp_init(decoder, {name})"), unsafe { (mpp.lib.mpp_init)(mpp.ctx, MPP_CTX_DEC, coding) })?;
        // An RK_S64, as rk_mpi_cmd.h documents; mpp.cpp reads the MppPollType (a 4-byte enum)
        // at the same address, the low half on little-endian targets: the same value.
        let mut timeout: i64 = opts.output_timeout_ms;
        mpp.control("MPP_SET_OUTPUT_TIMEOUT", MPP_SET_OUTPUT_TIMEOUT, (&mut timeout as *mut i64).cast())?;
        Ok(mpp)
    }

    /// The library this context runs on.
    pub fn lib(&self) -> &Arc<Libmpp> {
        &self.lib
    }

    /// `MppApi::control(ctx, cmd, param)`; `name` is the command's name for the error.
    fn control(&self, name: &str, cmd: MpiCmd, param: *mut c_void) -> Result<()> {
        self.lib.control(self.api, self.ctx, name, cmd, param)
    }

    /// `decode_put_packet` of `data` (an arbitrary chunk of the stream in split mode, else
    /// one whole frame) with presentation time `pts`; `eos` marks the end of the stream
    /// (`mpp_packet_set_eos`; `data` may then be empty). Returns `true` when MPP took (copied)
    /// the packet, `false` when its input queue is full (`MPP_ERR_BUFFER_FULL`): take frames
    /// out with [`Mpp::get_frame`] and put the same bytes again.
    pub fn put_packet(&self, data: &[u8], pts: i64, eos: bool) -> Result<bool> {
        let mut pkt: MppHandle = std::ptr::null_mut();
        // SAFETY: the packet only points at `data` (mpp_packet_init does not copy); MPP never
        // writes through a packet on the decode path, and the packet is deinited below, before
        // `data`'s borrow ends. The `*mut` is the header's type, not a write.
        check("mpp_packet_init", unsafe {
            (self.lib.mpp_packet_init)(&mut pkt, data.as_ptr() as *mut c_void, data.len())
        })?;
        let put = (|| {
            // SAFETY: the packet just initialised.
            unsafe { (self.lib.mpp_packet_set_pts)(pkt, pts) };
            if eos {
                // SAFETY: as above.
                check("mpp_packet_set_eos", unsafe { (self.lib.mpp_packet_set_eos)(pkt) })?;
            }
            // SAFETY: `api` is MPP's static table.
            let Some(f) = (unsafe { (*self.api).decode_put_packet }) else {
                bail!("MPP's MppApi has no decode_put_packet entry: the library at {} is broken", self.lib.path)
            };
            // SAFETY: the live context and packet; MPP copies what it accepts.
            match unsafe { f(self.ctx, pkt) } {
                MPP_OK => Ok(true),
                MPP_ERR_BUFFER_FULL => Ok(false),
                r => check("decode_put_packet", r).map(|_| false),
            }
        })();
        // SAFETY: the packet initialised above, deinited once.
        let d = unsafe { (self.lib.mpp_packet_deinit)(&mut pkt) };
        let accepted = put?;
        check("mpp_packet_deinit", d)?;
        Ok(accepted)
    }

    /// `decode_get_frame`: the next frame, an info-change frame or an EOS frame, or `None`
    /// when none is ready within the output timeout (a NULL frame, or `MPP_ERR_TIMEOUT`).
    pub fn get_frame(&self) -> Result<Option<DecodedFrame>> {
        // SAFETY: `api` is MPP's static table.
        let Some(f) = (unsafe { (*self.api).decode_get_frame }) else {
            bail!("MPP's MppApi has no decode_get_frame entry: the library at {} is broken", self.lib.path)
        };
        let mut frame: MppHandle = std::ptr::null_mut();
        // SAFETY: the live context and an out-pointer to a local.
        let r = unsafe { f(self.ctx, &mut frame) };
        if r == MPP_ERR_TIMEOUT {
            return Ok(None);
        }
        check("decode_get_frame", r)?;
        if frame.is_null() {
            return Ok(None);
        }
        let lib = &self.lib;
        // SAFETY: (every accessor below) `frame` is the live MppFrame just returned; the
        // accessors only read it.
        let buffer = unsafe { (lib.frame_buffer)(frame) };
        let (fd, buffer_index) = if buffer.is_null() {
            (None, None)
        } else {
            // SAFETY: the frame's buffer, alive while the frame holds it.
            unsafe { (Some((lib.buffer_fd)(buffer, TAG.as_ptr())), Some((lib.buffer_index)(buffer, TAG.as_ptr()))) }
        };
        // SAFETY: the live frame just returned.
        let info = unsafe { lib.frame_info(frame, fd, buffer_index) };
        let fds = info.fd.and(self.group.as_ref()).map(|g| Arc::clone(&g.fds));
        Ok(Some(DecodedFrame { frame, info, lib: Arc::clone(&self.lib), _fds: fds }))
    }

    /// `control(MPP_DEC_SET_INFO_CHANGE_READY)`: after an info-change frame, once the buffers
    /// are attached, lets the decoder go on.
    pub fn info_change_ready(&self) -> Result<()> {
        self.control("MPP_DEC_SET_INFO_CHANGE_READY", MPP_DEC_SET_INFO_CHANGE_READY, std::ptr::null_mut())
    }

    /// Makes `buffers` (dma-buf fds, each `size` bytes, at least the info-change frame's
    /// `buf_size`) the decoder's frame buffers: `mpp_buffer_group_get` (external,
    /// `MPP_BUFFER_TYPE_EXT_DMA`), one `mpp_buffer_commit` per buffer with `index` = its
    /// position in `buffers`, then `control(MPP_DEC_SET_EXT_BUF_GROUP, group)`. Each fd is
    /// duplicated and the duplicate kept open until the group is put (on drop, after
    /// `mpp_destroy`) and no [`DecodedFrame`] with a buffer is left, so MPP's fds stay valid
    /// however the caller's own are handled. Call it once, after `mpp_init`; a second call is
    /// refused.
    ///
    /// How many: at least the stream's reference pictures + the frames the consumer holds at
    /// once + 1 (see [`Mpp`]); 24 as Rockchip's `mpi_dec_test` commits is the safe choice.
    pub fn attach_external_buffers(&mut self, buffers: &[BorrowedFd<'_>], size: usize) -> Result<()> {
        if self.group.is_some() {
            bail!("MPP external buffers are already attached: zcpipe commits its buffers once per decoder");
        }
        if buffers.is_empty() || size == 0 {
            bail!(
                "MPP external buffer group needs at least one buffer of nonzero size (got {} of {size} bytes)",
                buffers.len()
            );
        }
        let mut group: MppHandle = std::ptr::null_mut();
        // SAFETY: an out-pointer to a local and two static C strings.
        check("mpp_buffer_group_get(external, EXT_DMA)", unsafe {
            (self.lib.mpp_buffer_group_get)(
                &mut group,
                MPP_BUFFER_TYPE_EXT_DMA,
                MPP_BUFFER_EXTERNAL,
                TAG.as_ptr(),
                TAG.as_ptr(),
            )
        })?;
        // From here on the group is put on every path (`ExtGroup` in `self.group` on drop).
        self.group = Some(ExtGroup { group, fds: Arc::new(Vec::with_capacity(buffers.len())) });
        let g = self.group.as_mut().expect("just set");
        for (i, fd) in buffers.iter().enumerate() {
            let own = fd.try_clone_to_owned().map_err(|e| {
                anyhow!("duplicating dma-buf fd {} for MPP: {}", fd.as_raw_fd(), super::errno_words(&e))
            })?;
            let mut info = MppBufferInfo {
                type_: MPP_BUFFER_TYPE_EXT_DMA,
                size,
                ptr: std::ptr::null_mut(),
                hnd: std::ptr::null_mut(),
                fd: own.as_raw_fd(),
                index: i as c_int,
            };
            // No frame exists before the group is set: the Arc is not shared yet.
            Arc::get_mut(&mut g.fds).expect("not shared before the group is set").push(own);
            // SAFETY: the group just got; `info` lives for the call (MPP copies it); NULL
            // buffer out-pointer = commit; static C strings.
            check(&format!("mpp_buffer_commit (buffer {i})"), unsafe {
                (self.lib.mpp_buffer_import_with_tag)(
                    g.group,
                    &mut info,
                    std::ptr::null_mut(),
                    TAG.as_ptr(),
                    TAG.as_ptr(),
                )
            })?;
        }
        let gp = g.group;
        self.control("MPP_DEC_SET_EXT_BUF_GROUP", MPP_DEC_SET_EXT_BUF_GROUP, gp)
    }

    /// The fds MPP was given for the external buffers, by index (duplicates of the caller's).
    pub fn external_fds(&self) -> Vec<BorrowedFd<'_>> {
        self.group.as_ref().map(|g| g.fds.iter().map(|f| f.as_fd()).collect()).unwrap_or_default()
    }

    /// `mpp_buffer_group_unused`: external buffers neither a frame nor the decoder holds now
    /// (the decoder's reference pictures are not counted: they are in use), or `None` before
    /// [`Mpp::attach_external_buffers`]. MPP decodes only while this is at least 1.
    pub fn unused_buffers(&self) -> Option<i32> {
        // SAFETY: the live group.
        self.group.as_ref().map(|g| unsafe { (self.lib.mpp_buffer_group_unused)(g.group) })
    }

    /// `MppApi::reset`: drops every queued packet and frame (e.g. before seeking).
    pub fn reset(&self) -> Result<()> {
        // SAFETY: `api` is MPP's static table.
        let Some(f) = (unsafe { (*self.api).reset }) else {
            bail!("MPP's MppApi has no reset entry: the library at {} is broken", self.lib.path)
        };
        // SAFETY: the live context.
        check("reset", unsafe { f(self.ctx) })
    }

    /// `mpp_destroy`, then `mpp_buffer_group_clear` + `mpp_buffer_group_put` of the external
    /// group, then closing its fds (unless frames still hold them); the first error is
    /// returned (all steps run).
    pub fn destroy(mut self) -> Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<()> {
        let mut first: Result<()> = Ok(());
        if !self.ctx.is_null() {
            // SAFETY: the live context, destroyed once (nulled below).
            first = check("mpp_destroy", unsafe { (self.lib.mpp_destroy)(self.ctx) });
            self.ctx = std::ptr::null_mut();
        }
        if let Some(g) = self.group.take() {
            // SAFETY: the live group; the context that used it is gone.
            let c = check("mpp_buffer_group_clear", unsafe { (self.lib.mpp_buffer_group_clear)(g.group) });
            // SAFETY: as above, put once.
            let p = check("mpp_buffer_group_put", unsafe { (self.lib.mpp_buffer_group_put)(g.group) });
            first = first.and(c).and(p);
            drop(g.fds);
        }
        first
    }
}

impl Drop for Mpp {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            log::warn!("{e}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// MJPEG through MPP's task API (`MppJpeg`).

/// `MppPortType` (`mpp_task.h`) `MPP_PORT_INPUT`: where the user puts packets (decoder).
pub const MPP_PORT_INPUT: c_int = 0;
/// `MPP_PORT_OUTPUT`: where the user takes decoded frames.
pub const MPP_PORT_OUTPUT: c_int = 1;

/// `FOURCC_META(a, b, c, d)` (`mpp_meta.h`): `a << 24 | b << 16 | c << 8 | d`, as `RK_U32`.
pub const fn fourcc_meta(k: &[u8; 4]) -> u32 {
    (k[0] as u32) << 24 | (k[1] as u32) << 16 | (k[2] as u32) << 8 | k[3] as u32
}
/// `MppMetaKey` `KEY_INPUT_PACKET` = `FOURCC_META('i', 'p', 'k', 't')` (`mpp_meta.h`): the
/// packet of an input task.
pub const KEY_INPUT_PACKET: u32 = fourcc_meta(b"ipkt");
/// `KEY_OUTPUT_FRAME` = `FOURCC_META('o', 'f', 'r', 'm')`: the frame (with its buffer) the
/// decoder writes for an input task, and the decoded frame of an output task.
pub const KEY_OUTPUT_FRAME: u32 = fourcc_meta(b"ofrm");

/// `MPP_RET (*poll)(MppCtx ctx, MppPortType type, MppPollType timeout)` (`rk_mpi.h`):
/// `MPP_OK` (0) when the port has a task (`mpi_poll` in `mpp/mpi.cpp` turns
/// `_mpp_port_poll`'s task count into `MPP_OK`), `MPP_NOK` on a timeout (not
/// `MPP_ERR_TIMEOUT`). After `mpp_port_awake` it can return 0 with no task, so the dequeue
/// that follows may still find none (`MPP_NOK`).
pub type MppPollFn = unsafe extern "C" fn(MppHandle, c_int, c_int) -> MppRet;
/// `MPP_RET (*dequeue)(MppCtx ctx, MppPortType type, MppTask *task)` and `(*enqueue)(MppCtx
/// ctx, MppPortType type, MppTask task)` (`rk_mpi.h`; enqueue takes the task by value, the
/// same pointer-sized argument).
pub type MppDequeueFn = unsafe extern "C" fn(MppHandle, c_int, *mut MppHandle) -> MppRet;
/// `enqueue`, see [`MppDequeueFn`].
pub type MppEnqueueFn = unsafe extern "C" fn(MppHandle, c_int, MppHandle) -> MppRet;
/// `MPP_RET mpp_task_meta_set_packet(MppTask, MppMetaKey, MppPacket)` and
/// `mpp_task_meta_set_frame` (`mpp_task.h`; `MppMetaKey` is a C enum).
pub type MppTaskMetaSetFn = unsafe extern "C" fn(MppHandle, u32, MppHandle) -> MppRet;
/// `MPP_RET mpp_task_meta_get_packet(MppTask, MppMetaKey, MppPacket *)` and
/// `mpp_task_meta_get_frame` (`mpp_task.h`): the value is taken out of the task's meta.
pub type MppTaskMetaGetFn = unsafe extern "C" fn(MppHandle, u32, *mut MppHandle) -> MppRet;
/// `MPP_RET mpp_frame_init(MppFrame *frame)` (`mpp_frame.h`).
pub type MppFrameInitFn = unsafe extern "C" fn(*mut MppHandle) -> MppRet;
/// `void mpp_frame_set_buffer(MppFrame frame, MppBuffer buffer)` (`mpp_frame.h`): takes a
/// reference on `buffer` (and puts the one it replaces; `mpp_frame.cpp`).
pub type MppFrameSetBufferFn = unsafe extern "C" fn(MppHandle, MppHandle);
/// `MPP_RET mpp_packet_init_with_buffer(MppPacket *packet, MppBuffer buffer)`
/// (`mpp_packet.h`): a packet over the whole buffer (data = its CPU address, length = its
/// size), holding a reference on it until `mpp_packet_deinit`.
pub type MppPacketInitWithBufferFn = unsafe extern "C" fn(*mut MppHandle, MppHandle) -> MppRet;
/// `void mpp_packet_set_length(MppPacket packet, size_t size)` and `void
/// mpp_packet_set_size(MppPacket packet, size_t size)` (`mpp_packet.h`). A JPEG packet needs
/// both: where the hardware reads the stream in place (`cap_hw_jpg_fix` in
/// `osal/mpp_soc.cpp`: RK356x, RK3588, ...) `jpegd_parse` (`mpp/codec/dec/jpeg/jpegd_parser.c`)
/// takes the stream length from `mpp_packet_get_size`, not the length.
pub type MppPacketSetLengthFn = unsafe extern "C" fn(MppHandle, usize);
/// `MPP_RET mpp_buffer_get_with_tag(MppBufferGroup group, MppBuffer *buffer, size_t size,
/// const char *tag, const char *caller)` (`mpp_buffer.h`, the `mpp_buffer_get` macro's target).
pub type MppBufferGetWithTagFn =
    unsafe extern "C" fn(MppHandle, *mut MppHandle, usize, *const c_char, *const c_char) -> MppRet;
/// `MPP_RET mpp_buffer_put_with_caller(MppBuffer buffer, const char *caller)` (`mpp_buffer_put`).
pub type MppBufferPutFn = unsafe extern "C" fn(MppHandle, *const c_char) -> MppRet;
/// `void *mpp_buffer_get_ptr_with_caller(MppBuffer buffer, const char *caller)`
/// (`mpp_buffer_get_ptr`): the buffer's CPU mapping.
pub type MppBufferGetPtrFn = unsafe extern "C" fn(MppHandle, *const c_char) -> *mut c_void;

/// The task-API entry points [`MppJpeg`] needs beyond [`Libmpp`]'s, resolved from the same
/// library when a JPEG decoder is made (so a library without them still serves H.264/H.265).
#[derive(Clone, Copy)]
struct TaskSyms {
    frame_init: MppFrameInitFn,
    frame_set_buffer: MppFrameSetBufferFn,
    packet_init_with_buffer: MppPacketInitWithBufferFn,
    packet_set_length: MppPacketSetLengthFn,
    packet_set_size: MppPacketSetLengthFn,
    buffer_get: MppBufferGetWithTagFn,
    buffer_put: MppBufferPutFn,
    buffer_ptr: MppBufferGetPtrFn,
    meta_set_packet: MppTaskMetaSetFn,
    meta_set_frame: MppTaskMetaSetFn,
    meta_get_packet: MppTaskMetaGetFn,
    meta_get_frame: MppTaskMetaGetFn,
}

impl TaskSyms {
    fn resolve(lib: &Libmpp) -> Result<TaskSyms> {
        macro_rules! sym {
            ($name:literal, $ty:ty) => {{
                // SAFETY: the symbol is declared extern "C" by MPP's headers with exactly the
                // signature `$ty` spells (see the type's doc); the copied fn pointer is used only
                // while the `Arc<Libmpp>` the decoder holds keeps the library loaded.
                let s: Result<libloading::Symbol<'_, $ty>, _> = unsafe { lib._lib.get(concat!($name, "\0").as_bytes()) };
                *s.map_err(|e| anyhow!("{} has no symbol `{}` ({e}): it cannot decode MJPEG through MPP's task API; install Rockchip's current MPP or use --decoder cpu", lib.path, $name))?
            }};
        }
        Ok(TaskSyms {
            frame_init: sym!("mpp_frame_init", MppFrameInitFn),
            frame_set_buffer: sym!("mpp_frame_set_buffer", MppFrameSetBufferFn),
            packet_init_with_buffer: sym!("mpp_packet_init_with_buffer", MppPacketInitWithBufferFn),
            packet_set_length: sym!("mpp_packet_set_length", MppPacketSetLengthFn),
            packet_set_size: sym!("mpp_packet_set_size", MppPacketSetLengthFn),
            buffer_get: sym!("mpp_buffer_get_with_tag", MppBufferGetWithTagFn),
            buffer_put: sym!("mpp_buffer_put_with_caller", MppBufferPutFn),
            buffer_ptr: sym!("mpp_buffer_get_ptr_with_caller", MppBufferGetPtrFn),
            meta_set_packet: sym!("mpp_task_meta_set_packet", MppTaskMetaSetFn),
            meta_set_frame: sym!("mpp_task_meta_set_frame", MppTaskMetaSetFn),
            meta_get_packet: sym!("mpp_task_meta_get_packet", MppTaskMetaGetFn),
            meta_get_frame: sym!("mpp_task_meta_get_frame", MppTaskMetaGetFn),
        })
    }
}

/// Where the JPEG of one [`MppJpeg::decode`] is.
#[derive(Clone, Copy, Debug)]
pub enum JpegInput<'a> {
    /// Bytes in memory: copied (a CPU copy of compressed data) into the decoder's own input
    /// buffer, an `MppBuffer` of an internal group.
    Bytes(&'a [u8]),
    /// The first `len` bytes of a dma-buf that already holds the JPEG (a V4L2 camera's
    /// EXPBUF buffer, `bytesused`): imported once per buffer (`mpp_buffer_import`, cached by
    /// inode) and read by the hardware in place.
    DmaBuf {
        /// The dma-buf.
        fd: BorrowedFd<'a>,
        /// Its size in bytes.
        size: usize,
        /// Bytes of JPEG at its start.
        len: usize,
    },
}

/// A JPEG's frame header (SOFn, ITU T.81 B.2.2), as [`jpeg_sof`] reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JpegSof {
    /// The SOF marker's second byte: `0xC0` baseline, `0xC1` extended, `0xC2` progressive, ...
    pub marker: u8,
    /// Pixels (X).
    pub width: u32,
    /// Lines (Y; 0, "defined by DNL", is refused by [`jpeg_sof`]).
    pub height: u32,
    /// Components (Nf): 1 grayscale, 3 Y Cb Cr.
    pub components: u8,
    /// (horizontal, vertical) sampling factors of the first three components ((0, 0) where absent).
    pub sampling: [(u8, u8); 3],
}

impl JpegSof {
    /// Whether MPP's JPEG decoder writes it as zcpipe takes it (`jpeg_judge_yuv_mode` in
    /// `mpp/codec/dec/jpeg/jpegd_parser.c`, which compares exact factors): baseline (SOF0, the
    /// only frame header the parser decodes), three components with Cb and Cr at 1x1 and Y at
    /// 2x2 (4:2:0, NV12) or 2x1 (4:2:2, NV12 or NV16). Not: grayscale (MPP_ERR_STREAM for
    /// YUV400 when the output format is YUV420SP: an error frame every time), 4:4:4, 4:4:0
    /// and 4:1:1 (RV1126 and others write them as YUV444SP, 3 bytes a pixel), other factors
    /// (e.g. ffmpeg's 4:2:2 as Y 2x2, chroma 1x2: MPP_ERR_STREAM), nor SOF1..SOF15.
    pub fn mpp_fit(&self) -> bool {
        self.marker == 0xC0
            && self.components == 3
            && self.sampling[1] == (1, 1)
            && self.sampling[2] == (1, 1)
            && matches!(self.sampling[0], (2, 2) | (2, 1))
    }

    /// Bytes MPP may write for it: `align16(width) * align16(height) * 2` (NV16 at 16-aligned
    /// strides; NV12 needs 3/4 of it).
    pub fn mpp_output_bytes(&self) -> u64 {
        self.width.next_multiple_of(16) as u64 * self.height.next_multiple_of(16) as u64 * 2
    }
}

/// The frame header of the JPEG at the start of `jpeg` (which starts with SOI): segments
/// are walked by their lengths up to the first SOFn (`FF C0`..`FF CF` but DHT `C4`, JPG
/// `C8`, DAC `CC`). `None`: no SOI, the bytes end before it, SOS or EOI comes first, or the
/// header is broken (no components, a zero size, shorter than its components).
pub fn jpeg_sof(jpeg: &[u8]) -> Option<JpegSof> {
    if jpeg.get(..2)? != [0xFF, 0xD8] {
        return None;
    }
    let mut i = 2;
    loop {
        while jpeg.get(i) == Some(&0xFF) && jpeg.get(i + 1) == Some(&0xFF) {
            i += 1;
        }
        let (&ff, &m) = (jpeg.get(i)?, jpeg.get(i + 1)?);
        match (ff, m) {
            (0xFF, 0x01 | 0xD0..=0xD7) => {
                i += 2;
                continue;
            }
            (0xFF, 0xD8..=0xDA) => return None,
            (0xFF, _) => {}
            _ => return None,
        }
        let len = u16::from_be_bytes([*jpeg.get(i + 2)?, *jpeg.get(i + 3)?]) as usize;
        if len < 2 {
            return None;
        }
        if (0xC0..=0xCF).contains(&m) && !matches!(m, 0xC4 | 0xC8 | 0xCC) {
            // P, Y (2 bytes), X (2 bytes), Nf, then Nf x (C, H << 4 | V, Tq).
            let seg = jpeg.get(i + 4..i + 2 + len)?;
            let (height, width, nf) = (
                u16::from_be_bytes([*seg.get(1)?, *seg.get(2)?]) as u32,
                u16::from_be_bytes([*seg.get(3)?, *seg.get(4)?]) as u32,
                *seg.get(5)?,
            );
            if nf == 0 || width == 0 || height == 0 || seg.len() < 6 + 3 * nf as usize {
                return None;
            }
            let mut sampling = [(0, 0); 3];
            for (k, s) in sampling.iter_mut().enumerate().take(nf as usize) {
                let hv = seg[6 + 3 * k + 1];
                *s = (hv >> 4, hv & 0x0F);
            }
            return Some(JpegSof { marker: m, width, height, components: nf, sampling });
        }
        i += 2 + len;
    }
}

/// Why [`MppJpeg::decode`] did not give a JPEG to MPP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JpegUnfit {
    /// No usable frame header ([`jpeg_sof`]): corrupt; skip it.
    NoFrameHeader,
    /// Bigger than the output buffer (MPP only logs "required buffer size ... larger than
    /// input buffer size" in `mpp_dec_advanced_thread` and decodes anyway: the hardware would
    /// write past it) or than the source's largest picture: skip it.
    TooBig {
        /// The header's picture size.
        width: u32,
        /// As above.
        height: u32,
        /// [`JpegSof::mpp_output_bytes`].
        need: u64,
        /// The output buffer's size.
        have: u64,
    },
    /// A JPEG MPP does not write as NV12/NV16 ([`JpegSof::mpp_fit`]): decode it on the CPU.
    CpuOnly(JpegSof),
}

impl std::fmt::Display for JpegUnfit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JpegUnfit::NoFrameHeader => write!(f, "no usable frame header (SOF) before the scan"),
            JpegUnfit::TooBig { width, height, need, have } => write!(f, "a {width}x{height} JPEG needs {need} bytes of output and the source's largest picture is smaller or the buffer has {have}"),
            JpegUnfit::CpuOnly(s) => write!(f, "SOF {:#04x} with {} components sampled {:?}: MPP would not write it as NV12/NV16", s.marker, s.components, &s.sampling[..(s.components as usize).min(3)]),
        }
    }
}

/// What one JPEG decoded into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JpegOutcome {
    /// A picture in the output buffer: `width` x `height` pixels, luma rows `hor_stride`
    /// bytes apart, chroma at `hor_stride * ver_stride` (`fmt`: [`MPP_FMT_YUV420SP`] NV12 or
    /// [`MPP_FMT_YUV422SP`] NV16).
    Picture(FrameInfo),
    /// The decoder flagged the frame (`errinfo` nonzero: a corrupt or truncated JPEG):
    /// nothing usable in the buffer; skip the frame.
    Corrupt {
        /// `mpp_frame_get_errinfo`.
        errinfo: u32,
    },
    /// Not given to MPP (its header says why); the output buffer is untouched.
    Unfit(JpegUnfit),
}

/// Runs `f` on the first `len` bytes of dma-buf `fd`, mapped read-only and bracketed by
/// `DMA_BUF_IOCTL_SYNC` READ START/END (a memfd answers ENOTTY: no sync needed).
fn with_dmabuf_bytes<R>(fd: BorrowedFd<'_>, len: usize, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
    use super::dmabuf::{sync, DMA_BUF_SYNC_END, DMA_BUF_SYNC_READ, DMA_BUF_SYNC_START};
    // SAFETY: a fresh read-only shared mapping of `len` bytes of a live fd (the caller says the
    // buffer holds at least `len`); nothing in this process writes it while mapped.
    let map = unsafe { memmap2::MmapOptions::new().len(len).map(fd.as_raw_fd()) }.map_err(|e| {
        anyhow!("mapping {len} bytes of JPEG dma-buf fd {}: {}", fd.as_raw_fd(), super::errno_words(&e))
    })?;
    let bracket = |flags: u64| match sync(fd, flags) {
        Err(e) if e.raw_os_error() != Some(libc::ENOTTY) => {
            Err(anyhow!("DMA_BUF_IOCTL_SYNC on JPEG dma-buf fd {}: {}", fd.as_raw_fd(), super::errno_words(&e)))
        }
        _ => Ok(()),
    };
    bracket(DMA_BUF_SYNC_START | DMA_BUF_SYNC_READ)?;
    let r = f(&map);
    bracket(DMA_BUF_SYNC_END | DMA_BUF_SYNC_READ)?;
    Ok(r)
}

/// One imported dma-buf: the `MppBuffer` (one reference, put on drop of the decoder) and the
/// binding's own duplicate of the fd (MPP keeps `MPP_BUFFER_TYPE_EXT_DMA` fds as given).
struct Imported {
    buffer: MppHandle,
    size: usize,
    _fd: OwnedFd,
}

/// An MPP MJPEG decoder on the task API (the "advanced" path of Rockchip's
/// `test/mpi_dec_test.c`; `mpp_dec_advanced_thread` in `mpp/codec/mpp_dec_normal.cpp`): one
/// whole JPEG per packet, the packet backed by an `MppBuffer`, and each packet's output frame
/// attached by the caller with its own buffer, so MPP writes the picture where the caller
/// says (here: a capture pool dma-buf, imported once and cached by inode).
///
/// Per JPEG ([`MppJpeg::decode`]): `poll`/`dequeue` an input task, `mpp_task_meta_set_packet
/// (KEY_INPUT_PACKET)` + `mpp_task_meta_set_frame(KEY_OUTPUT_FRAME)`, `enqueue`; `poll`/
/// `dequeue` the output task, `mpp_task_meta_get_frame(KEY_OUTPUT_FRAME)`, `enqueue` it back;
/// `poll`/`dequeue` the input task again, take its packet back and deinit it, `enqueue` the
/// empty task (MPP's decoder thread hands it straight back: "input empty task back to mpp to
/// maintain task status"). Every poll is bounded by the timeout given at creation, so a
/// decoder that never answers is an error, not a hang. The packet's size and length are both
/// the JPEG's length (the hardware reads `size` bytes: [`MppPacketSetLengthFn`]).
///
/// Before MPP sees a JPEG its frame header is read ([`jpeg_sof`]; from a dma-buf input
/// through a read-only mapping): MPP does not refuse an output buffer that is too small
/// (`mpp_dec_advanced_thread` only logs "required buffer size ... larger than input buffer
/// size" and decodes: the hardware would write past it), so a JPEG that needs more than
/// `align16(w) * align16(h) * 2` bytes of output ([`JpegSof::mpp_output_bytes`]) or is larger
/// than the caller's `max` never reaches it ([`JpegUnfit::TooBig`]), and one MPP would not
/// write as NV12/NV16 goes back to the caller for the CPU ([`JpegUnfit::CpuOnly`]).
///
/// Output format: `MPP_DEC_SET_OUTPUT_FORMAT` asks for [`MPP_FMT_YUV420SP`] (NV12); MPP may
/// still give [`MPP_FMT_YUV422SP`] (NV16) for a 4:2:2 JPEG on chips without that conversion:
/// the outcome says which.
///
/// A failure after the input task was enqueued (e.g. the output poll timed out) leaves MPP's
/// decoder thread possibly still writing that packet's frame (`mpp_hal_hw_wait`): the packet
/// and frame are kept, not deinited, and the decoder is out of service (every later
/// [`MppJpeg::decode`] fails in one line; [`MppJpeg::poisoned`]). Dropping it calls
/// `mpp_destroy` first (which joins MPP's threads), then deinits such a frame and packet,
/// then puts every imported buffer, the input buffer and the internal group.
pub struct MppJpeg {
    lib: Arc<Libmpp>,
    syms: TaskSyms,
    ctx: MppHandle,
    api: *const MppApi,
    timeout_ms: i64,
    /// The internal group the input buffer comes from.
    group: MppHandle,
    /// The input buffer (JPEG bytes are copied into it) and its size.
    input: Option<(MppHandle, usize)>,
    /// Imported dma-bufs by (st_dev, st_ino): pool buffers (outputs) and camera buffers (inputs).
    imported: std::collections::HashMap<(u64, u64), Imported>,
    decoded: u64,
    /// Why the decoder is out of service (a failure after an input task was enqueued).
    poisoned: Option<String>,
    /// (packet, frame) of such a failure: MPP may still use them until `mpp_destroy`.
    stranded: Vec<(MppHandle, MppHandle)>,
}

// SAFETY: as for `Mpp`: one context used from one thread at a time (`&mut self`); MPP's
// own threads are internal, and its buffers are reference counted under its own locks.
unsafe impl Send for MppJpeg {}

impl std::fmt::Debug for MppJpeg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MppJpeg")
            .field("lib", &self.lib.path)
            .field("imported", &self.imported.len())
            .field("decoded", &self.decoded)
            .finish()
    }
}

/// (st_dev, st_ino) of an fd: the key a dma-buf is imported under (a dup or a re-received fd
/// of the same buffer finds the same import).
fn fd_inode(fd: BorrowedFd<'_>) -> Result<(u64, u64)> {
    let st =
        nix::sys::stat::fstat(fd.as_raw_fd()).map_err(|e| anyhow!("fstat of dma-buf fd {}: {e}", fd.as_raw_fd()))?;
    Ok((st.st_dev, st.st_ino))
}

impl MppJpeg {
    /// An MJPEG decoder: the task-API symbols resolved, `mpp_create` (the `MppApi` size
    /// checked), `mpp_init(MPP_CTX_DEC, MPP_VIDEO_CodingMJPEG)`,
    /// `control(MPP_DEC_SET_OUTPUT_FORMAT, MPP_FMT_YUV420SP)`, and an internal buffer group
    /// (`mpp_buffer_group_get(MPP_BUFFER_TYPE_DRM, MPP_BUFFER_INTERNAL)`) for the input.
    /// `timeout_ms` (1..=[`MPP_POLL_MAX`]) bounds every poll. Errors name the call and its
    /// `MPP_RET`.
    pub fn new(lib: Arc<Libmpp>, timeout_ms: i64) -> Result<MppJpeg> {
        if !(1..=MPP_POLL_MAX).contains(&timeout_ms) {
            bail!("MPP MJPEG poll timeout {timeout_ms} ms is out of range 1..={MPP_POLL_MAX} ms (a bounded wait: never block)");
        }
        let syms = TaskSyms::resolve(&lib)?;
        let (ctx, api) = lib.create()?;
        // From here on `Drop` destroys the context.
        let mut d = MppJpeg {
            lib,
            syms,
            ctx,
            api,
            timeout_ms,
            group: std::ptr::null_mut(),
            input: None,
            imported: Default::default(),
            decoded: 0,
            poisoned: None,
            stranded: Vec::new(),
        };
        for (name, entry) in [
            ("poll", d.api_ptr(|a| a.poll)),
            ("dequeue", d.api_ptr(|a| a.dequeue)),
            ("enqueue", d.api_ptr(|a| a.enqueue)),
        ] {
            if entry.is_null() {
                bail!("MPP's MppApi has no {name} entry: the library at {} cannot decode MJPEG", d.lib.path);
            }
        }
        // SAFETY: the live context; plain enum arguments.
        check("mpp_init(decoder, MJPEG)", unsafe { (d.lib.mpp_init)(d.ctx, MPP_CTX_DEC, MPP_VIDEO_CODING_MJPEG) })?;
        let mut fmt: u32 = MPP_FMT_YUV420SP;
        d.control("MPP_DEC_SET_OUTPUT_FORMAT(YUV420SP)", MPP_DEC_SET_OUTPUT_FORMAT, (&mut fmt as *mut u32).cast())?;
        let mut group: MppHandle = std::ptr::null_mut();
        // SAFETY: an out-pointer to a local and two static C strings.
        check("mpp_buffer_group_get(internal, DRM)", unsafe {
            (d.lib.mpp_buffer_group_get)(
                &mut group,
                MPP_BUFFER_TYPE_DRM,
                MPP_BUFFER_INTERNAL,
                TAG.as_ptr(),
                TAG.as_ptr(),
            )
        })?;
        d.group = group;
        Ok(d)
    }

    /// The library this decoder runs on.
    pub fn lib(&self) -> &Arc<Libmpp> {
        &self.lib
    }

    /// Pictures decoded so far (corrupt ones not counted).
    pub fn decoded(&self) -> u64 {
        self.decoded
    }

    /// Distinct dma-bufs imported so far (outputs and dma-buf inputs).
    pub fn imported(&self) -> usize {
        self.imported.len()
    }

    /// Why the decoder is out of service (see [`MppJpeg`]), or `None`.
    pub fn poisoned(&self) -> Option<&str> {
        self.poisoned.as_deref()
    }

    fn api_ptr(&self, f: impl FnOnce(&MppApi) -> *const c_void) -> *const c_void {
        // SAFETY: `api` is MPP's static table (size checked on create).
        f(unsafe { &*self.api })
    }

    fn control(&self, name: &str, cmd: MpiCmd, param: *mut c_void) -> Result<()> {
        self.lib.control(self.api, self.ctx, name, cmd, param)
    }

    /// `poll(port, timeout)` then `dequeue(port)`: a task, or an error naming the port and
    /// the `MPP_RET` (`MPP_NOK` from poll: a timeout). A dequeue that finds no task after a
    /// successful poll (`MPP_NOK`: MPP's port was woken without one) polls again with the
    /// time left, until `timeout_ms` after the first poll.
    fn take_task(&self, port: c_int) -> Result<MppHandle> {
        let name = if port == MPP_PORT_INPUT { "input" } else { "output" };
        // SAFETY: the entries were checked non-null on create; rk_mpi.h's signatures are
        // `MppPollFn`/`MppDequeueFn` (a C enum is a c_int), and the table is MPP's static one.
        let (poll, dequeue) = unsafe {
            (
                std::mem::transmute::<*const c_void, MppPollFn>((*self.api).poll),
                std::mem::transmute::<*const c_void, MppDequeueFn>((*self.api).dequeue),
            )
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(self.timeout_ms as u64);
        loop {
            let left = deadline
                .saturating_duration_since(std::time::Instant::now())
                .as_millis()
                .clamp(1, self.timeout_ms as u128) as c_int;
            // SAFETY: the live context; the timeout is in 1..=MPP_POLL_MAX (checked on create).
            let r = unsafe { poll(self.ctx, port, left) };
            if r < 0 {
                bail!(
                    "MPP poll({name} port, {} ms) failed: {} ({r}): the MJPEG decoder did not answer in time",
                    self.timeout_ms,
                    ret_name(r)
                );
            }
            let mut task: MppHandle = std::ptr::null_mut();
            // SAFETY: the live context and an out-pointer to a local.
            let d = unsafe { dequeue(self.ctx, port, &mut task) };
            if d == MPP_OK && !task.is_null() {
                return Ok(task);
            }
            if d != MPP_NOK && d != MPP_OK {
                check(&format!("dequeue({name} port)"), d)?;
            }
            if std::time::Instant::now() >= deadline {
                bail!("MPP dequeue({name} port) found no task within {} ms though poll said ready: the MJPEG decoder did not answer in time", self.timeout_ms);
            }
        }
    }

    fn give_task(&self, port: c_int, task: MppHandle) -> Result<()> {
        let name = if port == MPP_PORT_INPUT { "input" } else { "output" };
        // SAFETY: checked non-null on create; rk_mpi.h's enqueue is `MppEnqueueFn`.
        let enqueue = unsafe { std::mem::transmute::<*const c_void, MppEnqueueFn>((*self.api).enqueue) };
        // SAFETY: the live context and a task dequeued from this port.
        check(&format!("enqueue({name} port)"), unsafe { enqueue(self.ctx, port, task) })
    }

    /// The `MppBuffer` of dma-buf `fd` (`size` bytes): `mpp_buffer_import` (type
    /// `MPP_BUFFER_TYPE_EXT_DMA`, a duplicate of the fd kept open) on first sight, cached by
    /// inode after.
    fn import(&mut self, fd: BorrowedFd<'_>, size: usize) -> Result<MppHandle> {
        let key = fd_inode(fd)?;
        if let Some(i) = self.imported.get(&key) {
            if i.size >= size {
                return Ok(i.buffer);
            }
        }
        let own = fd
            .try_clone_to_owned()
            .map_err(|e| anyhow!("duplicating dma-buf fd {} for MPP: {}", fd.as_raw_fd(), super::errno_words(&e)))?;
        let mut info = MppBufferInfo {
            type_: MPP_BUFFER_TYPE_EXT_DMA,
            size,
            ptr: std::ptr::null_mut(),
            hnd: std::ptr::null_mut(),
            fd: own.as_raw_fd(),
            index: self.imported.len() as c_int,
        };
        let mut buffer: MppHandle = std::ptr::null_mut();
        // SAFETY: NULL group + a buffer out-pointer = `mpp_buffer_import` (mpp_buffer.h);
        // `info` lives for the call (MPP copies it); static C strings.
        check("mpp_buffer_import(EXT_DMA)", unsafe {
            (self.lib.mpp_buffer_import_with_tag)(
                std::ptr::null_mut(),
                &mut info,
                &mut buffer,
                TAG.as_ptr(),
                TAG.as_ptr(),
            )
        })?;
        if buffer.is_null() {
            bail!("MPP mpp_buffer_import gave no buffer: the library at {} is broken", self.lib.path);
        }
        if let Some(old) = self.imported.insert(key, Imported { buffer, size, _fd: own }) {
            // The same inode, now bigger (cannot happen for a dma-buf, whose size is fixed).
            self.put(old.buffer);
        }
        Ok(buffer)
    }

    fn put(&self, buffer: MppHandle) {
        // SAFETY: a buffer this decoder got or imported, put once.
        if let Err(e) = check("mpp_buffer_put", unsafe { (self.syms.buffer_put)(buffer, TAG.as_ptr()) }) {
            log::warn!("{e}");
        }
    }

    /// The input buffer, at least `len` bytes (a new one, 64 KiB-rounded, when it is smaller),
    /// with `jpeg` copied to its start.
    fn input_with(&mut self, jpeg: &[u8]) -> Result<MppHandle> {
        let need = jpeg.len();
        if self.input.is_none_or(|(_, size)| size < need) {
            if let Some((b, _)) = self.input.take() {
                self.put(b);
            }
            let size = need.div_ceil(64 << 10) * (64 << 10);
            let mut b: MppHandle = std::ptr::null_mut();
            // SAFETY: the live internal group, an out-pointer to a local, static C strings.
            check(&format!("mpp_buffer_get({size} bytes)"), unsafe {
                (self.syms.buffer_get)(self.group, &mut b, size, TAG.as_ptr(), TAG.as_ptr())
            })?;
            self.input = Some((b, size));
        }
        let (b, _) = self.input.expect("just set");
        // SAFETY: a live buffer of this decoder's internal group (CPU-mapped by MPP).
        let p = unsafe { (self.syms.buffer_ptr)(b, TAG.as_ptr()) };
        if p.is_null() {
            bail!("MPP mpp_buffer_get_ptr gave no CPU address for the MJPEG input buffer");
        }
        // SAFETY: `p` maps at least `size` >= `need` bytes of the buffer MPP allocated, which
        // nothing else touches now (the decoder is idle between JPEGs).
        unsafe { std::ptr::copy_nonoverlapping(jpeg.as_ptr(), p.cast::<u8>(), need) };
        Ok(b)
    }

    /// Decodes one whole JPEG from `input` into dma-buf `output` (`output_size` bytes, e.g. a
    /// capture pool buffer: imported once, cached), as described on [`MppJpeg`]; `max`
    /// (width, height) bounds the picture ([`JpegUnfit::TooBig`] beyond it). Errors are one
    /// line (the MPP call and its `MPP_RET`); one after the input task was enqueued puts the
    /// decoder out of service ([`MppJpeg::poisoned`]): later calls fail at once.
    pub fn decode(
        &mut self,
        input: JpegInput<'_>,
        output: BorrowedFd<'_>,
        output_size: usize,
        max: (u32, u32),
    ) -> Result<JpegOutcome> {
        if let Some(why) = &self.poisoned {
            bail!("MPP's JPEG decoder is out of service since an earlier failure ({why}): decode on the CPU (--decoder cpu)");
        }
        let len = match input {
            JpegInput::Bytes(b) => b.len(),
            JpegInput::DmaBuf { size, len, .. } => len.min(size),
        };
        if len == 0 {
            bail!("an empty JPEG cannot be decoded (0 bytes)");
        }
        let sof = match input {
            JpegInput::Bytes(b) => jpeg_sof(b),
            JpegInput::DmaBuf { fd, .. } => with_dmabuf_bytes(fd, len, jpeg_sof)?,
        };
        let Some(sof) = sof else { return Ok(JpegOutcome::Unfit(JpegUnfit::NoFrameHeader)) };
        if sof.width > max.0 || sof.height > max.1 || sof.mpp_output_bytes() > output_size as u64 {
            return Ok(JpegOutcome::Unfit(JpegUnfit::TooBig {
                width: sof.width,
                height: sof.height,
                need: sof.mpp_output_bytes(),
                have: output_size as u64,
            }));
        }
        if !sof.mpp_fit() {
            return Ok(JpegOutcome::Unfit(JpegUnfit::CpuOnly(sof)));
        }
        let in_buf = match input {
            JpegInput::Bytes(b) => self.input_with(b)?,
            JpegInput::DmaBuf { fd, size, .. } => self.import(fd, size)?,
        };
        let out_buf = self.import(output, output_size)?;
        let s = self.syms;
        let mut pkt: MppHandle = std::ptr::null_mut();
        // SAFETY: an out-pointer to a local and a live buffer (the packet takes a reference).
        check("mpp_packet_init_with_buffer", unsafe { (s.packet_init_with_buffer)(&mut pkt, in_buf) })?;
        let mut frame: MppHandle = std::ptr::null_mut();
        let mut enqueued = false;
        let result = (|| {
            // SAFETY: the packet just made; length first, so that it never exceeds the size.
            unsafe { (s.packet_set_length)(pkt, len) };
            // SAFETY: as above (the hardware reads `size` bytes: see MppPacketSetLengthFn).
            unsafe { (s.packet_set_size)(pkt, len) };
            // SAFETY: an out-pointer to a local.
            check("mpp_frame_init", unsafe { (s.frame_init)(&mut frame) })?;
            // SAFETY: the frame just made and a live imported buffer (the frame takes a reference).
            unsafe { (s.frame_set_buffer)(frame, out_buf) };
            let task = self.take_task(MPP_PORT_INPUT)?;
            // SAFETY: a task dequeued from the input port; the packet and frame are live.
            check("mpp_task_meta_set_packet(KEY_INPUT_PACKET)", unsafe {
                (s.meta_set_packet)(task, KEY_INPUT_PACKET, pkt)
            })?;
            // SAFETY: as above.
            check("mpp_task_meta_set_frame(KEY_OUTPUT_FRAME)", unsafe {
                (s.meta_set_frame)(task, KEY_OUTPUT_FRAME, frame)
            })?;
            // From here MPP may hold the packet and write the frame, whatever enqueue returns.
            enqueued = true;
            self.give_task(MPP_PORT_INPUT, task)?;
            let task = self.take_task(MPP_PORT_OUTPUT)?;
            let mut out: MppHandle = std::ptr::null_mut();
            // SAFETY: a task dequeued from the output port and an out-pointer to a local.
            let got = check("mpp_task_meta_get_frame(KEY_OUTPUT_FRAME)", unsafe {
                (s.meta_get_frame)(task, KEY_OUTPUT_FRAME, &mut out)
            });
            self.give_task(MPP_PORT_OUTPUT, task)?;
            got?;
            if out != frame {
                bail!(
                    "MPP returned another frame than the one attached to the JPEG: the library at {} is broken",
                    self.lib.path
                );
            }
            // The input task comes back with the packet: take it, enqueue the empty task.
            let task = self.take_task(MPP_PORT_INPUT)?;
            let mut back: MppHandle = std::ptr::null_mut();
            // SAFETY: a task dequeued from the input port and an out-pointer to a local.
            let got = check("mpp_task_meta_get_packet(KEY_INPUT_PACKET)", unsafe {
                (s.meta_get_packet)(task, KEY_INPUT_PACKET, &mut back)
            });
            self.give_task(MPP_PORT_INPUT, task)?;
            got?;
            // SAFETY: the live frame attached above.
            let info = unsafe { self.lib.frame_info(frame, Some(output.as_raw_fd()), None) };
            if info.errinfo != 0 || info.discard != 0 {
                return Ok(JpegOutcome::Corrupt { errinfo: info.errinfo.max(info.discard) });
            }
            self.decoded += 1;
            Ok(JpegOutcome::Picture(info))
        })();
        if let (Err(e), true) = (&result, enqueued) {
            // MPP's decoder thread may still read the packet and write the frame: keep both
            // until mpp_destroy has joined it (teardown).
            let why = format!("{e:#}");
            self.stranded.push((pkt, frame));
            let msg = format!("{why}; MPP's JPEG decoder is now out of service (its frame is freed after mpp_destroy)");
            self.poisoned = Some(why);
            bail!("{msg}");
        }
        if !frame.is_null() {
            // SAFETY: the frame made above, deinited once (drops its buffer reference).
            let r = unsafe { (self.lib.mpp_frame_deinit)(&mut frame) };
            if let Err(e) = check("mpp_frame_deinit", r) {
                log::warn!("{e}");
            }
        }
        // SAFETY: the packet made above, deinited once (drops its buffer reference).
        let d = unsafe { (self.lib.mpp_packet_deinit)(&mut pkt) };
        let outcome = result?;
        check("mpp_packet_deinit", d)?;
        Ok(outcome)
    }

    fn teardown(&mut self) -> Result<()> {
        let mut first: Result<()> = Ok(());
        if !self.ctx.is_null() {
            // SAFETY: the live context, destroyed once (nulled below); it joins MPP's threads,
            // so nothing of MPP uses a stranded packet or frame after it.
            first = check("mpp_destroy", unsafe { (self.lib.mpp_destroy)(self.ctx) });
            self.ctx = std::ptr::null_mut();
        }
        for (mut pkt, mut frame) in std::mem::take(&mut self.stranded) {
            if !frame.is_null() {
                // SAFETY: a frame of a failed decode, never deinited, MPP's threads gone.
                first = first.and(check("mpp_frame_deinit", unsafe { (self.lib.mpp_frame_deinit)(&mut frame) }));
            }
            // SAFETY: as above, its packet.
            first = first.and(check("mpp_packet_deinit", unsafe { (self.lib.mpp_packet_deinit)(&mut pkt) }));
        }
        for (_, i) in std::mem::take(&mut self.imported) {
            self.put(i.buffer);
        }
        if let Some((b, _)) = self.input.take() {
            self.put(b);
        }
        if !self.group.is_null() {
            // SAFETY: the live internal group, put once (its buffers were put above).
            first = first.and(check("mpp_buffer_group_put", unsafe { (self.lib.mpp_buffer_group_put)(self.group) }));
            self.group = std::ptr::null_mut();
        }
        first
    }

    /// `mpp_destroy`, then `mpp_frame_deinit`/`mpp_packet_deinit` of a failed decode's frame
    /// and packet, then `mpp_buffer_put` of every imported buffer and of the input buffer, then
    /// `mpp_buffer_group_put`; the first error is returned (all steps run).
    pub fn destroy(mut self) -> Result<()> {
        self.teardown()
    }
}

impl Drop for MppJpeg {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            log::warn!("{e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    // Sizes worked out by hand from rk_mpi.h and mpp_buffer.h: LP64 (x86_64, aarch64) has
    // 8-byte pointers and size_t; ILP32 (armv7) 4-byte; enums and RK_U32 are 4 bytes.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn mpp_api_matches_rk_mpi_h() {
        // size 0, version 4, 14 function pointers at 8..120, reserv[16] at 120..184.
        assert_eq!(size_of::<MppApi>(), 184);
        assert_eq!(align_of::<MppApi>(), 8);
        assert_eq!(offset_of!(MppApi, decode), 8);
        assert_eq!(offset_of!(MppApi, decode_put_packet), 16);
        assert_eq!(offset_of!(MppApi, decode_get_frame), 24);
        assert_eq!(offset_of!(MppApi, poll), 80);
        assert_eq!(offset_of!(MppApi, reset), 104);
        assert_eq!(offset_of!(MppApi, control), 112);
        assert_eq!(offset_of!(MppApi, reserv), 120);
    }

    #[test]
    #[cfg(target_pointer_width = "32")]
    fn mpp_api_matches_rk_mpi_h() {
        assert_eq!(size_of::<MppApi>(), 128);
        assert_eq!(offset_of!(MppApi, control), 60);
        assert_eq!(offset_of!(MppApi, reserv), 64);
    }

    #[test]
    #[cfg(target_pointer_width = "64")]
    fn mpp_buffer_info_matches_mpp_buffer_h() {
        // type 0, (pad), size 8, ptr 16, hnd 24, fd 32, index 36; 40 bytes, 8-aligned.
        assert_eq!(size_of::<MppBufferInfo>(), 40);
        assert_eq!(align_of::<MppBufferInfo>(), 8);
        assert_eq!(
            (offset_of!(MppBufferInfo, size), offset_of!(MppBufferInfo, ptr), offset_of!(MppBufferInfo, hnd)),
            (8, 16, 24)
        );
        assert_eq!((offset_of!(MppBufferInfo, fd), offset_of!(MppBufferInfo, index)), (32, 36));
    }

    #[test]
    #[cfg(target_pointer_width = "32")]
    fn mpp_buffer_info_matches_mpp_buffer_h() {
        assert_eq!(size_of::<MppBufferInfo>(), 24);
        assert_eq!((offset_of!(MppBufferInfo, fd), offset_of!(MppBufferInfo, index)), (16, 20));
    }

    #[test]
    fn enum_values_match_headers() {
        assert_eq!((MPP_VIDEO_CODING_AVC, MPP_VIDEO_CODING_MJPEG, MPP_VIDEO_CODING_HEVC), (7, 8, 16777220));
        assert_eq!((MPP_SET_INPUT_TIMEOUT, MPP_SET_OUTPUT_TIMEOUT), (0x200006, 0x200007));
        assert_eq!(
            (MPP_DEC_SET_EXT_BUF_GROUP, MPP_DEC_SET_INFO_CHANGE_READY, MPP_DEC_SET_PARSER_SPLIT_MODE),
            (0x310002, 0x310003, 0x310005)
        );
        assert_eq!((MPP_DEC_SET_OUTPUT_FORMAT, MPP_DEC_SET_IMMEDIATE_OUT), (0x31000a, 0x31000c));
        assert_eq!(
            (MPP_BUFFER_TYPE_ION, MPP_BUFFER_TYPE_EXT_DMA, MPP_BUFFER_TYPE_DRM, MPP_BUFFER_EXTERNAL),
            (1, 2, 3, 1)
        );
        assert_eq!((MPP_ERR_BUFFER_FULL, MPP_ERR_TIMEOUT, MPP_ERR_INIT), (-1012, -8, -1002));
        assert_eq!(ret_name(MPP_ERR_BUFFER_FULL), "MPP_ERR_BUFFER_FULL");
        assert_eq!(coding_name(MPP_VIDEO_CODING_HEVC), Some("H.265"));
    }

    #[test]
    fn task_api_values_match_mpp_task_h_and_mpp_meta_h() {
        // FOURCC_META('i','p','k','t') and ('o','f','r','m'), worked out by hand.
        assert_eq!((KEY_INPUT_PACKET, KEY_OUTPUT_FRAME), (0x6970_6b74, 0x6f66_726d));
        assert_eq!((MPP_PORT_INPUT, MPP_PORT_OUTPUT), (0, 1));
        assert_eq!((MPP_FMT_YUV420SP, MPP_FMT_YUV422SP, MPP_BUFFER_INTERNAL), (0, 2, 0));
        // poll/dequeue/enqueue keep their places in MppApi (after isp_get_frame).
        #[cfg(target_pointer_width = "64")]
        assert_eq!((offset_of!(MppApi, poll), offset_of!(MppApi, dequeue), offset_of!(MppApi, enqueue)), (80, 88, 96));
        #[cfg(target_pointer_width = "32")]
        assert_eq!((offset_of!(MppApi, poll), offset_of!(MppApi, dequeue), offset_of!(MppApi, enqueue)), (44, 48, 52));
        assert!(MJPEG_REFUSED.contains("MppJpeg") && !MJPEG_REFUSED.contains('\n'));
    }

    #[test]
    fn jpeg_sof_reads_size_and_sampling_past_other_segments() {
        // SOI, APP0 (len 4), fill FF, SOF0 (len 17): 8-bit, 1080 lines, 1920 px, 3 components.
        let sof = |y: u8, nf: u8| {
            let mut v = vec![
                0xFF,
                0xD8,
                0xFF,
                0xE0,
                0x00,
                0x04,
                9,
                9,
                0xFF,
                0xFF,
                0xC0,
                0x00,
                8 + 3 * nf,
                8,
                0x04,
                0x38,
                0x07,
                0x80,
                nf,
            ];
            for k in 0..nf {
                v.extend([k + 1, if k == 0 { y } else { 0x11 }, 0]);
            }
            v.extend([0xFF, 0xDA, 0x00, 0x02]);
            v
        };
        let s = jpeg_sof(&sof(0x22, 3)).unwrap();
        assert_eq!(
            (s.marker, s.width, s.height, s.components, s.sampling),
            (0xC0, 1920, 1080, 3, [(2, 2), (1, 1), (1, 1)])
        );
        assert!(s.mpp_fit());
        assert_eq!(s.mpp_output_bytes(), 1920 * 1088 * 2);
        assert!(jpeg_sof(&sof(0x21, 3)).unwrap().mpp_fit(), "4:2:2");
        for (y, nf) in [(0x11, 3), (0x12, 3), (0x41, 3), (0x11, 1), (0x44, 3)] {
            assert!(!jpeg_sof(&sof(y, nf)).unwrap().mpp_fit(), "Y {y:#x}, {nf} components: the CPU's");
        }
        // No components, cut short, or SOS first: no frame header.
        assert_eq!(jpeg_sof(&sof(0x22, 0)), None);
        assert_eq!(jpeg_sof(&sof(0x22, 3)[..20]), None);
        assert_eq!(jpeg_sof(&[0xFF, 0xD8, 0xFF, 0xDA, 0x00, 0x02]), None);
    }

    #[test]
    fn missing_library_is_a_clear_error() {
        let e = Libmpp::open(Some(Path::new("/nonexistent/librockchip_mpp.so"))).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/librockchip_mpp.so") && e.contains(LIBMPP_ENV), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }
}

//! MPP's C ABI as the headers define it: return codes, context and coding types, control
//! commands, buffer and frame format values, the `MppApi` table and `MppBufferInfo` layouts,
//! and the signatures of the exported functions zcpipe binds.

use std::ffi::{c_char, c_int, c_void};

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
pub(crate) fn ret_name(r: MppRet) -> &'static str {
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
pub(crate) fn coding_name(c: MppCodingType) -> Option<&'static str> {
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

/// `MPP_ENC_SET_CFG`: `MPP_ENC_CMD_BASE` (`CMD_MODULE_CODEC | CMD_CTX_ID_ENC` = 0x320000)
/// plus 1. Parameter: the `MppEncCfg` itself (from `mpp_enc_cfg_init`, filled with
/// `mpp_enc_cfg_set_*`); MPP applies the fields set, after `mpp_init`.
pub const MPP_ENC_SET_CFG: MpiCmd = 0x0032_0001;
/// `MPP_ENC_GET_CFG`: `MPP_ENC_CMD_BASE` + 2 (the encoder's current configuration into an
/// `MppEncCfg`; not called by zcpipe, named for the fake and the header check).
pub const MPP_ENC_GET_CFG: MpiCmd = 0x0032_0002;
/// `MPP_ENC_SET_IDR_FRAME`: `MPP_ENC_CMD_BASE` + 9 (after SET/GET_CFG and the deprecated
/// SET/GET_PREP_CFG, RC_CFG, CODEC_CFG), no parameter: "next frame will be encoded as intra
/// frame".
pub const MPP_ENC_SET_IDR_FRAME: MpiCmd = 0x0032_0009;
/// `MPP_ENC_SET_HEADER_MODE`: `MPP_ENC_CFG_MISC` (`CMD_MODULE_CODEC | CMD_CTX_ID_ENC |
/// CMD_ENC_CFG_MISC` = 0x328000) + 1. Parameter: a pointer to an `MppEncHeaderMode`.
pub const MPP_ENC_SET_HEADER_MODE: MpiCmd = 0x0032_8001;

/// `MppEncHeaderMode` (`rk_venc_cmd.h`), a C enum: `MPP_ENC_HEADER_MODE_DEFAULT`, SPS/PPS on
/// the first frame only.
pub const MPP_ENC_HEADER_MODE_DEFAULT: c_int = 0;
/// `MPP_ENC_HEADER_MODE_EACH_IDR`: SPS/PPS before every IDR picture, in the IDR's packet
/// (`mpp/codec/mpp_enc_impl.cpp` adds them when `hdr_mode` is this and the frame is intra).
pub const MPP_ENC_HEADER_MODE_EACH_IDR: c_int = 1;

/// `MppEncRcMode` (`rk_venc_rc.h`), a C enum: `MPP_ENC_RC_MODE_VBR`.
pub const MPP_ENC_RC_MODE_VBR: i32 = 0;
/// `MPP_ENC_RC_MODE_CBR`: constant bit rate, between `rc:bps_min` and `rc:bps_max`.
pub const MPP_ENC_RC_MODE_CBR: i32 = 1;
/// `MPP_ENC_RC_MODE_FIXQP`.
pub const MPP_ENC_RC_MODE_FIXQP: i32 = 2;
/// `MPP_ENC_RC_MODE_AVBR`.
pub const MPP_ENC_RC_MODE_AVBR: i32 = 3;

/// `MppPollType` (`mpp_task.h`) `MPP_POLL_BLOCK`: wait without limit.
pub const MPP_POLL_BLOCK: i64 = -1;
/// `MPP_POLL_NON_BLOCK`: return at once (the decoder's default for both directions).
pub(crate) const MPP_POLL_NON_BLOCK: i64 = 0;
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
/// `RK_U32`, 14 function pointers, `RK_U32 reserv[16]`). The entries zcpipe's stream
/// decoder and encoder call are typed; the task API's (`poll`, `dequeue`, `enqueue`: see
/// `task.rs`) and the unused ones are kept as untyped pointers to hold the layout.
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
    /// `MPP_RET (*encode_put_frame)(MppCtx ctx, MppFrame frame)`: hands a frame to the
    /// encoder. With the encoder's default input timeout (`MPP_POLL_BLOCK`, `mpp.cpp`) it
    /// returns once the encoder has given the input task back, i.e. after the frame was read.
    pub encode_put_frame: Option<unsafe extern "C" fn(MppHandle, MppHandle) -> MppRet>,
    /// `MPP_RET (*encode_get_packet)(MppCtx ctx, MppPacket *packet)`: the next encoded packet
    /// (the caller's to `mpp_packet_deinit`), or NULL with `MPP_OK` when none came within the
    /// output timeout.
    pub encode_get_packet: Option<unsafe extern "C" fn(MppHandle, *mut MppHandle) -> MppRet>,
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
pub(crate) type MppPacketSetEosFn = unsafe extern "C" fn(MppHandle) -> MppRet;
/// `void mpp_packet_set_pts(MppPacket packet, RK_S64 pts)` (`mpp_packet.h`).
pub(crate) type MppPacketSetPtsFn = unsafe extern "C" fn(MppHandle, i64);
/// `RK_U32 mpp_frame_get_*(const MppFrame frame)` (`mpp_frame.h`): width, height,
/// hor_stride, ver_stride, info_change, eos, errinfo, discard.
pub type MppFrameGetU32Fn = unsafe extern "C" fn(MppHandle) -> u32;
/// `MppFrameFormat mpp_frame_get_fmt(MppFrame frame)` (`mpp_frame.h`): a C enum (4 bytes).
pub(crate) type MppFrameGetFmtFn = unsafe extern "C" fn(MppHandle) -> u32;
/// `RK_S64 mpp_frame_get_pts(const MppFrame frame)` (`mpp_frame.h`).
pub(crate) type MppFrameGetPtsFn = unsafe extern "C" fn(MppHandle) -> i64;
/// `size_t mpp_frame_get_buf_size(const MppFrame frame)` (`mpp_frame.h`).
pub(crate) type MppFrameGetBufSizeFn = unsafe extern "C" fn(MppHandle) -> usize;
/// `MppBuffer mpp_frame_get_buffer(const MppFrame frame)` (`mpp_frame.h`).
pub(crate) type MppFrameGetBufferFn = unsafe extern "C" fn(MppHandle) -> MppHandle;
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
pub(crate) type MppBufferGetIntFn = unsafe extern "C" fn(MppHandle, *const c_char) -> c_int;
/// `MPP_RET mpp_buffer_group_put(MppBufferGroup group)` and `mpp_buffer_group_clear`
/// (`mpp_buffer.h`).
pub type MppBufferGroupFn = unsafe extern "C" fn(MppHandle) -> MppRet;
/// `RK_S32 mpp_buffer_group_unused(MppBufferGroup group)` (`mpp_buffer.h`): committed buffers
/// no frame holds, in an external group.
pub(crate) type MppBufferGroupUnusedFn = unsafe extern "C" fn(MppHandle) -> i32;
/// `const char *get_mpp_version(void)` (`mpp/inc/mpp_info.h`: not a public header, but
/// `extern "C"` and exported by every build).
pub(crate) type GetMppVersionFn = unsafe extern "C" fn() -> *const c_char;

// ---------------------------------------------------------------------------------------
// The H.264 encoder (`Encoder`): `rk_venc_cfg.h`, the frame setters and packet getters.

/// `MppMetaKey` `KEY_OUTPUT_INTRA` = `FOURCC_META('o', 'i', 'd', 'r')` (`mpp_meta.h`, "output
/// intra frame indicator"): an `RK_S32` in an encoded packet's meta, nonzero when the picture
/// is intra (`mpp/codec/mpp_enc_impl.cpp` sets it on every H.264/H.265 packet).
pub const KEY_OUTPUT_INTRA: u32 = super::fourcc_meta(b"oidr");

/// `MPP_RET mpp_enc_cfg_init(MppEncCfg *cfg)` (`rk_venc_cfg.h`; `MppEncCfg` is a `void *`).
pub type MppEncCfgInitFn = unsafe extern "C" fn(*mut MppHandle) -> MppRet;
/// `MPP_RET mpp_enc_cfg_deinit(MppEncCfg cfg)` (`rk_venc_cfg.h`).
pub type MppEncCfgDeinitFn = unsafe extern "C" fn(MppHandle) -> MppRet;
/// `MPP_RET mpp_enc_cfg_set_s32(MppEncCfg cfg, const char *name, RK_S32 val)`
/// (`rk_venc_cfg.h`): `MPP_NOK` for a name MPP does not know (or of another size).
pub type MppEncCfgSetS32Fn = unsafe extern "C" fn(MppHandle, *const c_char, i32) -> MppRet;
/// `MPP_RET mpp_enc_cfg_set_u32(MppEncCfg cfg, const char *name, RK_U32 val)` (`rk_venc_cfg.h`).
pub type MppEncCfgSetU32Fn = unsafe extern "C" fn(MppHandle, *const c_char, u32) -> MppRet;
/// `void mpp_frame_set_width(MppFrame frame, RK_U32 width)` and `_height`, `_hor_stride`,
/// `_ver_stride`, `_eos` (`mpp_frame.h`); also `mpp_frame_set_fmt(MppFrame, MppFrameFormat)`,
/// whose C enum is the same 4-byte argument.
pub type MppFrameSetU32Fn = unsafe extern "C" fn(MppHandle, u32);
/// `void mpp_frame_set_pts(MppFrame frame, RK_S64 pts)` (`mpp_frame.h`).
pub type MppFrameSetPtsFn = unsafe extern "C" fn(MppHandle, i64);
/// `void *mpp_packet_get_pos(const MppPacket packet)` (`mpp_packet.h`): where the packet's
/// bytes start.
pub type MppPacketGetPosFn = unsafe extern "C" fn(MppHandle) -> *mut c_void;
/// `size_t mpp_packet_get_length(const MppPacket packet)` (`mpp_packet.h`): bytes from `pos`.
pub type MppPacketGetLengthFn = unsafe extern "C" fn(MppHandle) -> usize;
/// `RK_S64 mpp_packet_get_pts(const MppPacket packet)` (`mpp_packet.h`): the encoder copies
/// the frame's pts.
pub type MppPacketGetPtsFn = unsafe extern "C" fn(MppHandle) -> i64;
/// `RK_S32 mpp_packet_has_meta(const MppPacket packet)` (`mpp_packet.h`).
pub type MppPacketHasMetaFn = unsafe extern "C" fn(MppHandle) -> i32;
/// `MppMeta mpp_packet_get_meta(const MppPacket packet)` (`mpp_packet.h`; `MppMeta` is a
/// `void *`, owned by the packet).
pub type MppPacketGetMetaFn = unsafe extern "C" fn(MppHandle) -> MppHandle;
/// `MPP_RET mpp_meta_get_s32(MppMeta meta, MppMetaKey key, RK_S32 *val)` (`mpp_meta.h`):
/// `MPP_NOK` when the key is not set.
pub type MppMetaGetS32Fn = unsafe extern "C" fn(MppHandle, u32, *mut i32) -> MppRet;

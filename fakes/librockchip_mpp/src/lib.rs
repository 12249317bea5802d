//! A test-only fake of Rockchip's `librockchip_mpp.so`: the MPP decoder and H.264 encoder C
//! API, decoding and encoding on the CPU with `ffmpeg` child processes.
//!
//! It exports the symbols zcpipe's binding (`crates/sys/src/mpp/`) resolves, with the layouts
//! and values of MPP's headers (`inc/rk_mpi.h`, `rk_mpi_cmd.h`, `rk_type.h`, `mpp_err.h`,
//! `mpp_frame.h`, `mpp_packet.h`, `mpp_buffer.h`, `mpp_meta.h`, `rk_venc_cfg.h`,
//! `rk_venc_cmd.h`), and enforces the rules of MPP that bite its users.
//!
//! The encoder ([`encode`]): `mpp_init(MPP_CTX_ENC, MPP_VIDEO_CodingAVC)`, the
//! `mpp_enc_cfg_*` configuration (unknown entries refused as MPP does) checked at
//! `MPP_ENC_SET_CFG` (sizes, strides, NV12, fps: `violation what=cfg-...`),
//! `MPP_ENC_SET_HEADER_MODE`, `MPP_ENC_SET_IDR_FRAME` (ffmpeg restarted, so the next picture
//! is an IDR), and `encode_put_frame` reading the frame's imported dma-buf (mmap between
//! `DMA_BUF_IOCTL_SYNC` START and END) as NV12 at its strides, cropped, into `ffmpeg -f
//! rawvideo -pix_fmt nv12 ... -c:v libx264 -preset ultrafast -tune zerolatency -bf 0 -g GOP
//! -x264-params repeat-headers=1:aud=1 ... -f mpjpeg pipe:1` (each encoded access unit
//! framed by its length, so a frame's packet is there as soon as it is encoded; its AUD is
//! stripped). `encode_get_packet` gives exactly one packet per frame, in order, blocking until
//! ffmpeg wrote it: Annex B, the frame's pts, `KEY_OUTPUT_INTRA` meta set when it holds an
//! IDR slice. A frame without a buffer, or an EOS frame, flushes.
//!
//! The decoder's rules:
//!
//! - `decode_put_packet` copies the packet into an input queue of 4 packets (the size is
//!   `$ZCPIPE_FAKE_MPP_INPUT_SLOTS` if set) and returns `MPP_ERR_BUFFER_FULL` when it is
//!   full (an EOS packet is always taken, as MPP reserves a task for it); the queue is handed
//!   to the decoder at each `decode_get_frame`, so a caller that only puts packets is refused
//!   after 4 and must take frames out, then put the same packet again.
//! - Before the first picture, and before the first picture of another size, `decode_get_frame` returns an info-change frame (width, height,
//!   `hor_stride` and `ver_stride` aligned to 16, NV12, `buf_size` = hor x ver x 3/2), and
//!   produces pictures only after `MPP_DEC_SET_EXT_BUF_GROUP` (an external group) and
//!   `MPP_DEC_SET_INFO_CHANGE_READY`, each into one of the group's committed buffers. The
//!   fake has no internal buffers: without a group it produces no picture.
//! - A buffer is not reused while a frame using it has not been released (`mpp_frame_deinit`)
//!   nor while the decoder keeps it as a reference picture: the last 3 decoded pictures'
//!   buffers (`$ZCPIPE_FAKE_MPP_REFS` to change) stay the decoder's, as MPP's DPB keeps
//!   references in the external group's buffers. A buffer is free only when no frame holds it
//!   and it is not a reference; with no free buffer `decode_get_frame` returns no frame (and
//!   logs `reason=no-free-buffer` with the counts), as MPP decodes only when
//!   `mpp_buffer_group_unused` >= 1. `mpp_buffer_group_unused` excludes references. The
//!   references are let go at the EOS frame (MPP flushes its DPB), on `reset` and on
//!   `mpp_destroy`.
//! - Before writing a buffer the fake checks with fstat that its fd still refers to the
//!   committed inode (EXT_DMA buffers are not dup'ed by MPP: the user must keep them open);
//!   when not, it logs `violation what=buffer-fd-not-committed-inode` and skips the buffer.
//!   Committing the same inode twice, clearing or putting a group whose buffers frames still
//!   hold, and setting the split mode after init are violations too.
//! - `mpp_destroy` logs how many frames and buffers were never released.
//! - MJPEG: `mpp_init` succeeds (MPP runs MJPEG on its task thread with one input task), but
//!   every `decode_put_packet` returns `MPP_ERR_BUFFER_FULL` (logged with
//!   `reason=mjpeg-needs-task-api`): real MPP needs each MJPEG packet in an `MppBuffer` with
//!   an output frame attached (`KEY_OUTPUT_FRAME`), which plain packets never have. The task
//!   API (`poll`/`dequeue`/`enqueue`, task meta, `mpp_buffer_import`/`get`/`put`) decodes
//!   MJPEG with zune-jpeg: see [`task`].
//!
//! - End of stream as MPP: the last picture has `eos` 1 and its buffer, then an empty EOS
//!   frame (no buffer) follows.
//!
//! Pixels are real: `mpp_init` spawns `ffmpeg -f h264|hevc -i pipe:0 -autoscale 0 -vf
//! showinfo -f rawvideo -pix_fmt yuv420p pipe:1`; a thread writes the packets to its stdin,
//! another reads the I420 pictures, each of the size showinfo printed for it on stderr (no
//! ffprobe and no environment variable needed; `-autoscale 0` keeps a picture at its own size
//! when the stream's size changes mid-stream, and the fake then sends a new info-change frame
//! and no picture until `MPP_DEC_SET_INFO_CHANGE_READY`, as MPP does), and each frame is
//! written into the committed dma-buf (mmap of the fd,
//! between `DMA_BUF_IOCTL_SYNC` START and END; memfds answer ENOTTY, which is tolerated) as
//! NV12 at `hor_stride` x `ver_stride`. A frame's pts is its output index (packets are
//! arbitrary chunks, so the fake cannot pair them with frames). When ffmpeg fails (a stream
//! it cannot read), `decode_get_frame` returns no frame from then on, as real MPP gives none
//! (not even an EOS frame) for junk: a caller must bound its wait itself. The fake logs
//! ffmpeg's message once (`decoder-error=`). `$ZCPIPE_FAKE_MPP_FFMPEG` names another ffmpeg.
//!
//! Every call appends one line (`pid=N name key=value ... tid=T`) to the file named by
//! `$ZCPIPE_FAKE_MPP_LOG`, written with one write(2) on an O_APPEND file.
//!
//! Handles (`MppCtx`, `MppPacket`, `MppFrame`, `MppBuffer`, `MppBufferGroup`) are looked up
//! in registries before use, so a stale or foreign handle is logged, not dereferenced.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::io::Write;
use std::sync::{Mutex, MutexGuard};

mod buffers;
mod contexts;
mod decode;
mod enc_cfg;
mod encode;
mod frames;
mod mpi;
mod packets;
mod task;

use buffers::*;
use contexts::*;
use decode::*;
use enc_cfg::*;
use frames::*;
use mpi::*;
use packets::*;

type MppRet = c_int;
const MPP_OK: MppRet = 0;
const MPP_NOK: MppRet = -1;
const MPP_ERR_UNKNOW: MppRet = -2;
const MPP_ERR_NULL_PTR: MppRet = -3;
const MPP_ERR_MALLOC: MppRet = -4;
const MPP_ERR_VALUE: MppRet = -6;
const MPP_ERR_TIMEOUT: MppRet = -8;
const MPP_ERR_INIT: MppRet = -1002;
const MPP_ERR_BUFFER_FULL: MppRet = -1012;

const MPP_CTX_DEC: c_int = 0;
const MPP_CTX_ENC: c_int = 1;
const CODING_AVC: c_int = 7;
const CODING_MJPEG: c_int = 8;
const CODING_HEVC: c_int = 0x0100_0004;

// MpiCmd values (rk_mpi_cmd.h): base | position after the base.
const MPP_SET_INPUT_TIMEOUT: c_int = 0x0020_0006;
const MPP_SET_OUTPUT_TIMEOUT: c_int = 0x0020_0007;
const MPP_DEC_SET_EXT_BUF_GROUP: c_int = 0x0031_0002;
const MPP_DEC_SET_INFO_CHANGE_READY: c_int = 0x0031_0003;
const MPP_DEC_SET_PARSER_SPLIT_MODE: c_int = 0x0031_0005;
const MPP_DEC_SET_PARSER_FAST_MODE: c_int = 0x0031_0006;
const MPP_DEC_SET_OUTPUT_FORMAT: c_int = 0x0031_000a;
const MPP_DEC_SET_DISABLE_ERROR: c_int = 0x0031_000b;
const MPP_DEC_SET_IMMEDIATE_OUT: c_int = 0x0031_000c;
const MPP_ENC_SET_CFG: c_int = 0x0032_0001;
const MPP_ENC_GET_CFG: c_int = 0x0032_0002;
const MPP_ENC_SET_IDR_FRAME: c_int = 0x0032_0009;
const MPP_ENC_SET_HEADER_MODE: c_int = 0x0032_8001;
/// `MPP_ENC_HEADER_MODE_DEFAULT` (rk_venc_cmd.h): SPS/PPS on the first picture only.
const MPP_ENC_HEADER_MODE_DEFAULT: i32 = 0;
/// `FOURCC_META('o','i','d','r')` (mpp_meta.h): an encoded packet's intra flag.
const KEY_OUTPUT_INTRA: u32 = 0x6f69_6472;

const MPP_POLL_MAX: i32 = 8000;
const MPP_BUFFER_EXTERNAL: c_int = 1;
const MPP_BUFFER_TYPE_ION: c_int = 1;
const MPP_BUFFER_TYPE_EXT_DMA: c_int = 2;
const MPP_BUFFER_TYPE_DRM: c_int = 3;
const MPP_BUFFER_TYPE_DMA_HEAP: c_int = 4;
const MPP_FMT_YUV420SP: u32 = 0;

/// Decoded pictures read ahead from ffmpeg before it is made to wait.
const RAW_AHEAD: usize = 2;

/// `DMA_BUF_IOCTL_SYNC` (`_IOW('b', 0, struct dma_buf_sync)`, linux/dma-buf.h).
const DMA_BUF_IOCTL_SYNC: libc::c_ulong = 0x4008_6200;
const DMA_BUF_SYNC_WRITE: u64 = 2;
const DMA_BUF_SYNC_END: u64 = 4;

type Opaque = *mut c_void;

/// `MppApi` (rk_mpi.h, 184 bytes on LP64). The entries the fake does not implement point at
/// [`unsupported`], which logs and returns `MPP_NOK` (extra arguments are harmless in the C
/// calling conventions of x86_64 and aarch64).
#[repr(C)]
pub struct MppApi {
    /// `sizeof(MppApi)`.
    pub size: u32,
    /// 0, as MPP's builds report.
    pub version: u32,
    /// `decode`.
    pub decode: unsafe extern "C" fn() -> MppRet,
    /// `decode_put_packet`.
    pub decode_put_packet: unsafe extern "C" fn(Opaque, Opaque) -> MppRet,
    /// `decode_get_frame`.
    pub decode_get_frame: unsafe extern "C" fn(Opaque, *mut Opaque) -> MppRet,
    /// `encode`.
    pub encode: unsafe extern "C" fn() -> MppRet,
    /// `encode_put_frame(ctx, MppFrame)` (the encoder: [`encode`]).
    pub encode_put_frame: unsafe extern "C" fn(Opaque, Opaque) -> MppRet,
    /// `encode_get_packet(ctx, MppPacket *)`.
    pub encode_get_packet: unsafe extern "C" fn(Opaque, *mut Opaque) -> MppRet,
    /// `isp`, `isp_put_frame`, `isp_get_frame`.
    pub unsupported: [unsafe extern "C" fn() -> MppRet; 3],
    /// `poll(ctx, MppPortType, MppPollType)` (the task API: [`task`]).
    pub poll: unsafe extern "C" fn(Opaque, c_int, c_int) -> MppRet,
    /// `dequeue(ctx, MppPortType, MppTask *)`.
    pub dequeue: unsafe extern "C" fn(Opaque, c_int, *mut Opaque) -> MppRet,
    /// `enqueue(ctx, MppPortType, MppTask)`.
    pub enqueue: unsafe extern "C" fn(Opaque, c_int, Opaque) -> MppRet,
    /// `reset`.
    pub reset: unsafe extern "C" fn(Opaque) -> MppRet,
    /// `control`.
    pub control: unsafe extern "C" fn(Opaque, c_int, Opaque) -> MppRet,
    /// `reserv[16]`.
    pub reserv: [u32; 16],
}

/// `MppBufferInfo` (mpp_buffer.h, 40 bytes on LP64).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MppBufferInfo {
    /// `MppBufferType`.
    pub type_: c_int,
    /// Bytes.
    pub size: usize,
    /// CPU address.
    pub ptr: *mut c_void,
    /// Vendor handle.
    pub hnd: *mut c_void,
    /// dma-buf fd.
    pub fd: c_int,
    /// The user's index.
    pub index: c_int,
}

static API: MppApi = MppApi {
    size: std::mem::size_of::<MppApi>() as u32,
    version: 0,
    decode: unsupported,
    decode_put_packet: mpi_decode_put_packet,
    decode_get_frame: mpi_decode_get_frame,
    encode: unsupported,
    encode_put_frame: encode::mpi_encode_put_frame,
    encode_get_packet: encode::mpi_encode_get_packet,
    unsupported: [unsupported; 3],
    poll: task::mpi_poll,
    dequeue: task::mpi_dequeue,
    enqueue: task::mpi_enqueue,
    reset: mpi_reset,
    control: mpi_control,
    reserv: [0; 16],
};

fn tid() -> i32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() }
}

/// Appends `pid=N {line} tid=T` to `$ZCPIPE_FAKE_MPP_LOG` with one write(2) on an O_APPEND file.
fn log(line: String) {
    let Some(path) = std::env::var_os("ZCPIPE_FAKE_MPP_LOG").filter(|p| !p.is_empty()) else { return };
    let text = format!("pid={} {line} tid={}\n", std::process::id(), tid());
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = f.write_all(text.as_bytes());
    }
}

fn violation(what: &str, detail: String) {
    log(format!("violation what={what} {detail}"));
}

/// A C string argument for the log (`-` for NULL, spaces replaced).
fn c_str(p: *const c_char) -> String {
    if p.is_null() {
        return "-".into();
    }
    // SAFETY: MPP's callers pass NUL-terminated strings (tags and `__FUNCTION__`).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().replace(' ', "_")
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// (st_dev, st_ino) of an open fd, or why not.
fn inode(fd: c_int) -> Result<(u64, u64), String> {
    // SAFETY: an all-zero `stat` is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid out-pointer; a bad fd makes fstat fail with EBADF.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(std::io::Error::last_os_error().to_string().replace(' ', "_"));
    }
    Ok((st.st_dev, st.st_ino))
}

fn align16(v: u32) -> u32 {
    v.div_ceil(16) * 16
}

#[cfg(test)]
mod tests;

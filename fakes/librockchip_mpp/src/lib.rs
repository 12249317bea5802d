//! A test-only fake of Rockchip's `librockchip_mpp.so`: the MPP decoder C API, decoding on
//! the CPU with an `ffmpeg` child process.
//!
//! It exports the symbols zcpipe's binding (`src/sys/mpp.rs`) resolves, with the layouts and
//! values of MPP's headers (`inc/rk_mpi.h`, `rk_mpi_cmd.h`, `rk_type.h`, `mpp_err.h`,
//! `mpp_frame.h`, `mpp_packet.h`, `mpp_buffer.h`), and enforces the rules of MPP that bite
//! its users:
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

use std::collections::{HashMap, VecDeque};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, LazyLock, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod task;

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
    /// `encode`, `encode_put_frame`, `encode_get_packet`, `isp`, `isp_put_frame`,
    /// `isp_get_frame`.
    pub unsupported: [unsafe extern "C" fn() -> MppRet; 6],
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
    unsupported: [unsupported; 6],
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

// ---------------------------------------------------------------------------------------
// Buffers and groups.

/// One committed buffer. Its handle (`MppBuffer`) is the address of this value, which the
/// [`BUFFERS`] registry keeps alive for the life of the process.
struct Buffer {
    group: u64,
    index: c_int,
    fd: c_int,
    size: usize,
    inode: (u64, u64),
    /// Frames holding this buffer (not yet `mpp_frame_deinit`ed).
    holders: AtomicU32,
    /// 1 while a decoder keeps this buffer as a reference picture.
    refs: AtomicU32,
    /// Set when the fd no longer refers to the committed inode: never written again.
    dead: AtomicU32,
    /// References of an imported or internal-group buffer (`mpp_buffer_import`,
    /// `mpp_buffer_get`, frames and packets holding it); 0 for committed buffers.
    refcount: AtomicU32,
    /// The CPU memory of an internal-group buffer (`libc::calloc`, freed at the last put),
    /// as an address; 0 for fd-backed buffers.
    mem: usize,
}

struct Group {
    id: u64,
    type_: c_int,
    mode: c_int,
    buffers: Mutex<Vec<Arc<Buffer>>>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);
static GROUPS: LazyLock<Mutex<HashMap<usize, Arc<Group>>>> = LazyLock::new(Default::default);
static BUFFERS: LazyLock<Mutex<HashMap<usize, Arc<Buffer>>>> = LazyLock::new(Default::default);

fn group(handle: Opaque) -> Option<Arc<Group>> {
    lock(&GROUPS).get(&(handle as usize)).cloned()
}

fn buffer(handle: Opaque) -> Option<Arc<Buffer>> {
    lock(&BUFFERS).get(&(handle as usize)).cloned()
}

impl Buffer {
    /// Neither a frame nor a decoder reference holds it.
    fn unused(&self) -> bool {
        self.holders.load(Ordering::SeqCst) == 0 && self.refs.load(Ordering::SeqCst) == 0
    }
}

fn held(g: &Group) -> usize {
    lock(&g.buffers).iter().filter(|b| !b.unused()).count()
}

/// `MPP_RET mpp_buffer_group_get(MppBufferGroup *group, MppBufferType type, MppBufferMode
/// mode, const char *tag, const char *caller)`.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_buffer_group_get(
    out: *mut Opaque,
    type_: c_int,
    mode: c_int,
    tag: *const c_char,
    caller: *const c_char,
) -> MppRet {
    if out.is_null() {
        log(format!("mpp_buffer_group_get ret={MPP_ERR_NULL_PTR} reason=null-group-pointer"));
        return MPP_ERR_NULL_PTR;
    }
    let id = NEXT_ID.fetch_add(1, Ordering::SeqCst);
    let g = Arc::new(Group { id, type_: type_ & 0xffff, mode, buffers: Mutex::new(Vec::new()) });
    let handle = Arc::as_ptr(&g) as Opaque;
    lock(&GROUPS).insert(handle as usize, g);
    // SAFETY: non-null out-pointer from the caller.
    unsafe { *out = handle };
    log(format!(
        "mpp_buffer_group_get group={id} type={type_} mode={mode} tag={} caller={} ret=0",
        c_str(tag),
        c_str(caller)
    ));
    MPP_OK
}

/// `MPP_RET mpp_buffer_import_with_tag(MppBufferGroup group, MppBufferInfo *info, MppBuffer
/// *buffer, const char *tag, const char *caller)`: with `buffer` NULL this is
/// `mpp_buffer_commit`, the only form the fake implements.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_buffer_import_with_tag(
    grp: Opaque,
    info: *mut MppBufferInfo,
    out: *mut Opaque,
    tag: *const c_char,
    caller: *const c_char,
) -> MppRet {
    let who = format!("tag={} caller={}", c_str(tag), c_str(caller));
    if info.is_null() {
        log(format!("mpp_buffer_commit ret={MPP_ERR_NULL_PTR} reason=null-info {who}"));
        return MPP_ERR_NULL_PTR;
    }
    // SAFETY: non-null; the caller passes a valid MppBufferInfo.
    let info = unsafe { *info };
    if grp.is_null() && !out.is_null() {
        // mpp_buffer_import: a buffer of MPP's misc group, got (one reference).
        return task::import(&info, out, &who);
    }
    let Some(g) = group(grp) else {
        log(format!("mpp_buffer_commit ret={MPP_NOK} reason=unknown-group {who}"));
        return MPP_NOK;
    };
    if !out.is_null() {
        log(format!(
            "mpp_buffer_import group={} ret={MPP_NOK} reason=import-into-a-group-not-implemented-by-the-fake {who}",
            g.id
        ));
        return MPP_NOK;
    }
    if g.type_ != info.type_ || g.mode != MPP_BUFFER_EXTERNAL {
        log(format!("mpp_buffer_commit group={} ret={MPP_ERR_UNKNOW} reason=type-or-mode group_type={} info_type={} mode={} {who}", g.id, g.type_, info.type_, g.mode));
        return MPP_ERR_UNKNOW;
    }
    if info.fd < 0 || info.size == 0 || !info.ptr.is_null() {
        log(format!("mpp_buffer_commit group={} ret={MPP_ERR_VALUE} fd={} size={} {who}", g.id, info.fd, info.size));
        return MPP_ERR_VALUE;
    }
    let ino = match inode(info.fd) {
        Ok(i) => i,
        Err(e) => {
            violation("commit-bad-fd", format!("group={} fd={} error={e}", g.id, info.fd));
            return MPP_ERR_VALUE;
        }
    };
    let mut bufs = lock(&g.buffers);
    if bufs.iter().any(|b| b.inode == ino) {
        violation("committed-twice", format!("group={} fd={} ino={}", g.id, info.fd, ino.1));
    }
    let b = Arc::new(Buffer {
        group: g.id,
        index: info.index,
        fd: info.fd,
        size: info.size,
        inode: ino,
        holders: AtomicU32::new(0),
        refs: AtomicU32::new(0),
        dead: AtomicU32::new(0),
        refcount: AtomicU32::new(0),
        mem: 0,
    });
    lock(&BUFFERS).insert(Arc::as_ptr(&b) as usize, Arc::clone(&b));
    bufs.push(b);
    log(format!(
        "mpp_buffer_commit group={} index={} fd={} size={} ino={} ret=0 {who}",
        g.id, info.index, info.fd, info.size, ino.1
    ));
    MPP_OK
}

/// `int mpp_buffer_get_fd_with_caller(MppBuffer buffer, const char *caller)`: the committed fd.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_buffer_get_fd_with_caller(buf: Opaque, caller: *const c_char) -> c_int {
    let fd = buffer(buf).map_or(-1, |b| b.fd);
    log(format!("mpp_buffer_get_fd fd={fd} caller={}", c_str(caller)));
    fd
}

/// `int mpp_buffer_get_index_with_caller(MppBuffer buffer, const char *caller)`: the
/// committed `index`.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_buffer_get_index_with_caller(buf: Opaque, caller: *const c_char) -> c_int {
    let index = buffer(buf).map_or(-1, |b| b.index);
    log(format!("mpp_buffer_get_index index={index} caller={}", c_str(caller)));
    index
}

/// `size_t mpp_buffer_get_size_with_caller(MppBuffer buffer, const char *caller)`.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_buffer_get_size_with_caller(buf: Opaque, caller: *const c_char) -> usize {
    let size = buffer(buf).map_or(0, |b| b.size);
    log(format!("mpp_buffer_get_size size={size} caller={}", c_str(caller)));
    size
}

/// `RK_S32 mpp_buffer_group_unused(MppBufferGroup group)`: buffers neither a frame nor a
/// decoder reference holds.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_buffer_group_unused(grp: Opaque) -> i32 {
    let Some(g) = group(grp) else {
        log("mpp_buffer_group_unused ret=-1 reason=unknown-group".into());
        return MPP_NOK;
    };
    let n = lock(&g.buffers).iter().filter(|b| b.unused()).count() as i32;
    log(format!("mpp_buffer_group_unused group={} unused={n}", g.id));
    n
}

/// `MPP_RET mpp_buffer_group_clear(MppBufferGroup group)`: forgets the committed buffers
/// nothing holds.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_buffer_group_clear(grp: Opaque) -> MppRet {
    let Some(g) = group(grp) else {
        log(format!("mpp_buffer_group_clear ret={MPP_NOK} reason=unknown-group"));
        return MPP_NOK;
    };
    let h = held(&g);
    if h > 0 {
        violation("group-clear-while-held", format!("group={} held={h}", g.id));
    }
    // The buffers frames still hold stay (as MPP frees them only when released).
    let mut bufs = lock(&g.buffers);
    let before = bufs.len();
    bufs.retain(|b| !b.unused());
    log(format!("mpp_buffer_group_clear group={} cleared={} held={h} ret=0", g.id, before - bufs.len()));
    MPP_OK
}

/// `MPP_RET mpp_buffer_group_put(MppBufferGroup group)`: destroys the group.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_buffer_group_put(grp: Opaque) -> MppRet {
    let Some(g) = lock(&GROUPS).remove(&(grp as usize)) else {
        log(format!("mpp_buffer_group_put ret={MPP_NOK} reason=unknown-group"));
        return MPP_NOK;
    };
    let h = held(&g);
    if h > 0 {
        violation("group-put-while-held", format!("group={} held={h}", g.id));
    }
    // An internal group's buffers still referenced (mpp_buffer_get without its put).
    let live = lock(&g.buffers).iter().filter(|b| b.mem != 0 && b.refcount.load(Ordering::SeqCst) > 0).count();
    // Every task-API buffer (imported or got) still referenced, in any group.
    let all_live = lock(&BUFFERS).values().filter(|b| b.refcount.load(Ordering::SeqCst) > 0).count();
    log(format!(
        "mpp_buffer_group_put group={} buffers={} held={h} live={live} all_live={all_live} ret=0",
        g.id,
        lock(&g.buffers).len()
    ));
    MPP_OK
}

// ---------------------------------------------------------------------------------------
// Packets.

struct Packet {
    data: *const u8,
    size: usize,
    length: usize,
    pts: i64,
    eos: bool,
    /// The buffer of `mpp_packet_init_with_buffer` (one reference, put at deinit).
    buffer: Option<Arc<Buffer>>,
}

// SAFETY: the registry only stores the caller's pointer; it is read on the caller's thread
// inside decode_put_packet.
unsafe impl Send for Packet {}

static PACKETS: LazyLock<Mutex<HashMap<usize, Box<Packet>>>> = LazyLock::new(Default::default);

/// `MPP_RET mpp_packet_init(MppPacket *packet, void *data, size_t size)`: wraps the caller's
/// bytes (not copied).
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_packet_init(out: *mut Opaque, data: *mut c_void, size: usize) -> MppRet {
    if out.is_null() || (data.is_null() && size > 0) {
        log(format!("mpp_packet_init size={size} ret={MPP_ERR_NULL_PTR}"));
        return MPP_ERR_NULL_PTR;
    }
    hand_out(
        &PACKETS,
        Box::new(Packet { data: data as *const u8, size, length: size, pts: 0, eos: false, buffer: None }),
        out,
    );
    log(format!("mpp_packet_init size={size} ret=0"));
    MPP_OK
}

/// `MPP_RET mpp_packet_deinit(MppPacket *packet)`.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_packet_deinit(p: *mut Opaque) -> MppRet {
    if p.is_null() {
        return MPP_ERR_NULL_PTR;
    }
    // SAFETY: non-null pointer to the caller's handle.
    let h = unsafe { *p };
    if task::on_hardware(h as usize) {
        violation("packet-freed-while-hardware-reads", "at=mpp_packet_deinit".into());
    }
    let found = lock(&PACKETS).remove(&(h as usize));
    if let Some(b) = found.as_ref().and_then(|p| p.buffer.as_ref()) {
        task::put(b, "mpp_packet_deinit");
    }
    let found = found.is_some();
    log(format!("mpp_packet_deinit known={}", u8::from(found)));
    // SAFETY: as above.
    unsafe { *p = std::ptr::null_mut() };
    if found {
        MPP_OK
    } else {
        MPP_ERR_NULL_PTR
    }
}

/// Keeps `v` in registry `reg` under its address, which becomes the caller's handle
/// (`*out`, when `out` is not null).
fn hand_out<T>(reg: &Mutex<HashMap<usize, Box<T>>>, v: Box<T>, out: *mut Opaque) {
    let handle = &*v as *const T as Opaque;
    lock(reg).insert(handle as usize, v);
    if !out.is_null() {
        // SAFETY: a non-null out-pointer from the caller of an MPP function that writes one.
        unsafe { *out = handle };
    }
}

fn with_packet<R>(h: Opaque, f: impl FnOnce(&mut Packet) -> R) -> Option<R> {
    lock(&PACKETS).get_mut(&(h as usize)).map(|p| f(p))
}

/// `MPP_RET mpp_packet_set_eos(MppPacket packet)`.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_packet_set_eos(p: Opaque) -> MppRet {
    let ok = with_packet(p, |p| p.eos = true).is_some();
    log(format!("mpp_packet_set_eos known={}", u8::from(ok)));
    if ok {
        MPP_OK
    } else {
        MPP_ERR_NULL_PTR
    }
}

/// `void mpp_packet_set_pts(MppPacket packet, RK_S64 pts)`.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_packet_set_pts(p: Opaque, pts: i64) {
    let ok = with_packet(p, |p| p.pts = pts).is_some();
    log(format!("mpp_packet_set_pts pts={pts} known={}", u8::from(ok)));
}

/// `size_t mpp_packet_get_length(const MppPacket packet)`: 0 once MPP took the packet.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_packet_get_length(p: Opaque) -> usize {
    let n = with_packet(p, |p| p.length).unwrap_or(0);
    log(format!("mpp_packet_get_length length={n}"));
    n
}

// ---------------------------------------------------------------------------------------
// Frames.

#[derive(Clone)]
struct Frame {
    ctx: u64,
    seq: u64,
    width: u32,
    height: u32,
    hor_stride: u32,
    ver_stride: u32,
    fmt: u32,
    info_change: u32,
    eos: u32,
    errinfo: u32,
    pts: i64,
    buf_size: usize,
    buffer: Option<Arc<Buffer>>,
    /// The buffer a user frame (`mpp_frame_init`, the task API) was given with
    /// `mpp_frame_set_buffer`: one reference, put when replaced or at deinit.
    attached: Option<Arc<Buffer>>,
    notify: Weak<Shared>,
}

static FRAMES: LazyLock<Mutex<HashMap<usize, Box<Frame>>>> = LazyLock::new(Default::default);

fn frame_field<R: std::fmt::Display>(name: &str, f: Opaque, get: impl FnOnce(&Frame) -> R, none: R) -> R {
    let (v, seq) = match lock(&FRAMES).get(&(f as usize)) {
        Some(fr) => (get(fr), fr.seq.to_string()),
        None => (none, "unknown".into()),
    };
    log(format!("{name} frame={seq} value={v}"));
    v
}

macro_rules! frame_getter {
    ($name:ident, $ty:ty, $get:expr, $none:expr) => {
        #[doc = concat!("`", stringify!($name), "(const MppFrame frame)` (mpp_frame.h).")]
        ///
        /// # Safety
        /// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
        /// handles are looked up in the fake's registries, never dereferenced.
        #[no_mangle]
        pub unsafe extern "C" fn $name(f: Opaque) -> $ty {
            frame_field(stringify!($name), f, $get, $none)
        }
    };
}

frame_getter!(mpp_frame_get_width, u32, |f| f.width, 0);
frame_getter!(mpp_frame_get_height, u32, |f| f.height, 0);
frame_getter!(mpp_frame_get_hor_stride, u32, |f| f.hor_stride, 0);
frame_getter!(mpp_frame_get_ver_stride, u32, |f| f.ver_stride, 0);
frame_getter!(mpp_frame_get_fmt, u32, |f| f.fmt, 0);
frame_getter!(mpp_frame_get_info_change, u32, |f| f.info_change, 0);
frame_getter!(mpp_frame_get_eos, u32, |f| f.eos, 0);
frame_getter!(mpp_frame_get_errinfo, u32, |f| f.errinfo, 0);
frame_getter!(mpp_frame_get_discard, u32, |_| 0, 0);
frame_getter!(mpp_frame_get_pts, i64, |f| f.pts, 0);
frame_getter!(mpp_frame_get_buf_size, usize, |f| f.buf_size, 0);

/// `MppBuffer mpp_frame_get_buffer(const MppFrame frame)`.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_frame_get_buffer(f: Opaque) -> Opaque {
    let (p, what) = match lock(&FRAMES).get(&(f as usize)) {
        Some(fr) => {
            let b = fr.buffer.as_ref().or(fr.attached.as_ref());
            (
                b.map_or(std::ptr::null_mut(), |b| Arc::as_ptr(b) as Opaque),
                format!("frame={} index={}", fr.seq, b.map_or(-1, |b| b.index)),
            )
        }
        None => (std::ptr::null_mut(), "frame=unknown".into()),
    };
    log(format!("mpp_frame_get_buffer {what}"));
    p
}

/// `MPP_RET mpp_frame_deinit(MppFrame *frame)`: frees the frame; its buffer may be reused.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_frame_deinit(p: *mut Opaque) -> MppRet {
    if p.is_null() {
        return MPP_ERR_NULL_PTR;
    }
    // SAFETY: non-null pointer to the caller's handle.
    let h = unsafe { *p };
    if task::on_hardware(h as usize) {
        violation("frame-freed-while-hardware-writes", "at=mpp_frame_deinit".into());
    }
    let Some(fr) = lock(&FRAMES).remove(&(h as usize)) else {
        violation("frame-deinit-unknown", "frame=unknown".into());
        return MPP_ERR_NULL_PTR;
    };
    if let Some(b) = &fr.buffer {
        b.holders.fetch_sub(1, Ordering::SeqCst);
    }
    if let Some(b) = &fr.attached {
        task::put(b, "mpp_frame_deinit");
    }
    log(format!(
        "mpp_frame_deinit ctx={} frame={} index={}",
        fr.ctx,
        fr.seq,
        fr.buffer.as_ref().map_or(-1, |b| b.index)
    ));
    if let Some(s) = fr.notify.upgrade() {
        let _g = lock(&s.st);
        s.cv.notify_all();
    }
    // SAFETY: as above.
    unsafe { *p = std::ptr::null_mut() };
    MPP_OK
}

// ---------------------------------------------------------------------------------------
// Contexts.

#[derive(Default)]
struct State {
    inited: bool,
    coding: c_int,
    split: u32,
    out_timeout: i32,
    input_slots: usize,
    input: VecDeque<Vec<u8>>,
    eos_put: bool,
    writer: Option<mpsc::Sender<Vec<u8>>>,
    /// The picture size of the stream now (the last info change's).
    size: Option<(u32, u32)>,
    info_change_sent: bool,
    group: Option<Arc<Group>>,
    ready: bool,
    /// Decoded I420 pictures with their size, oldest first.
    raw: VecDeque<((u32, u32), Vec<u8>)>,
    reader_done: bool,
    decoder_error: Option<String>,
    eos_sent: bool,
    frames_out: u64,
    next_buffer: usize,
    /// The decoder's reference pictures' buffers, oldest first, at most `max_refs`.
    refs: VecDeque<Arc<Buffer>>,
    max_refs: usize,
    destroyed: bool,
}

struct Shared {
    st: Mutex<State>,
    cv: Condvar,
}

struct Ctx {
    id: u64,
    shared: Arc<Shared>,
    child: Mutex<Option<Child>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

static CTXS: LazyLock<Mutex<HashMap<usize, Arc<Ctx>>>> = LazyLock::new(Default::default);

fn ctx(h: Opaque) -> Option<Arc<Ctx>> {
    lock(&CTXS).get(&(h as usize)).cloned()
}

/// `MPP_RET mpp_create(MppCtx *ctx, MppApi **mpi)`.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_create(out: *mut Opaque, mpi: *mut *const MppApi) -> MppRet {
    if out.is_null() || mpi.is_null() {
        log(format!("mpp_create ret={MPP_ERR_NULL_PTR}"));
        return MPP_ERR_NULL_PTR;
    }
    let slots =
        std::env::var("ZCPIPE_FAKE_MPP_INPUT_SLOTS").ok().and_then(|v| v.parse().ok()).filter(|n| *n > 0).unwrap_or(4);
    let max_refs = std::env::var("ZCPIPE_FAKE_MPP_REFS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    let c = Arc::new(Ctx {
        id: NEXT_ID.fetch_add(1, Ordering::SeqCst),
        shared: Arc::new(Shared {
            st: Mutex::new(State { input_slots: slots, max_refs, ..State::default() }),
            cv: Condvar::new(),
        }),
        child: Mutex::new(None),
        threads: Mutex::new(Vec::new()),
    });
    let h = Arc::as_ptr(&c) as Opaque;
    log(format!("mpp_create ctx={} input_slots={slots} refs={max_refs} ret=0", c.id));
    lock(&CTXS).insert(h as usize, c);
    // SAFETY: non-null out-pointers.
    unsafe {
        *out = h;
        *mpi = &API;
    }
    MPP_OK
}

/// `MPP_RET mpp_init(MppCtx ctx, MppCtxType type, MppCodingType coding)`: starts the ffmpeg
/// decoder for `coding`.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_init(h: Opaque, type_: c_int, coding: c_int) -> MppRet {
    let Some(c) = ctx(h) else {
        log(format!("mpp_init ret={MPP_ERR_NULL_PTR} reason=unknown-ctx"));
        return MPP_ERR_NULL_PTR;
    };
    let demuxer = match coding {
        CODING_AVC => "h264",
        CODING_HEVC => "hevc",
        CODING_MJPEG => "mjpeg",
        _ => "",
    };
    let mut st = lock(&c.shared.st);
    if st.inited || type_ != MPP_CTX_DEC || demuxer.is_empty() {
        log(format!("mpp_init ctx={} type={type_} coding={coding} ret={MPP_NOK} reason=already-inited-or-not-a-decoder-the-fake-has", c.id));
        return MPP_NOK;
    }
    if coding == CODING_MJPEG {
        // MPP's MJPEG decoder runs on the task (advanced) thread with one input task: init
        // succeeds, plain packets never get in (see mpi_decode_put_packet); the task API
        // decodes ([`task`]). No ffmpeg: zune-jpeg in-process.
        st.inited = true;
        st.coding = coding;
        task::init_ports(c.id);
        log(format!("mpp_init ctx={} type={type_} coding={coding} split={} task_api=1 ret=0", c.id, st.split));
        return MPP_OK;
    }
    let spawned = Command::new(std::env::var("ZCPIPE_FAKE_MPP_FFMPEG").unwrap_or_else(|_| "ffmpeg".into()))
        // `-autoscale 0`: a picture keeps its own size when the stream's changes (ffmpeg would
        // scale it to the first size); `showinfo` says each picture's size on stderr.
        // No probing ahead (`-probesize 32 -analyzeduration 0`; not `-fflags nobuffer`, which
        // drops the packets read while probing): a picture comes out once its packets (and,
        // with B-frames, those it waits for) are in, as from MPP, so a live stream's timing
        // under the fake is the stream's, not ffmpeg's start-up buffering.
        .args([
            "-hide_banner",
            "-nostats",
            "-loglevel",
            "info",
            "-probesize",
            "32",
            "-analyzeduration",
            "0",
            "-f",
            demuxer,
            "-i",
            "pipe:0",
        ])
        .args([
            "-autoscale",
            "0",
            "-vf",
            "showinfo",
            "-f",
            "rawvideo",
            "-pix_fmt",
            "yuv420p",
            "-flush_packets",
            "1",
            "pipe:1",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(ch) => ch,
        Err(e) => {
            log(format!(
                "mpp_init ctx={} coding={coding} ret={MPP_ERR_INIT} reason=ffmpeg-not-started error={}",
                c.id,
                e.to_string().replace(' ', "_")
            ));
            return MPP_ERR_INIT;
        }
    };
    let (stdin, stdout, stderr) =
        (child.stdin.take().expect("piped"), child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    let mut threads = lock(&c.threads);
    threads.push(std::thread::spawn(move || write_packets(stdin, rx)));
    let shared = Arc::clone(&c.shared);
    // ffmpeg's messages, read apart from its pictures so that neither pipe can fill and stall
    // it: each picture's size (showinfo's `s:WxH`) goes to the picture reader, in order; the
    // other lines are kept for the error message.
    let (sizes_tx, sizes) = mpsc::channel::<(u32, u32)>();
    let errors = std::thread::spawn(move || {
        let mut kept = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("Parsed_showinfo") {
                let size = line
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("s:"))
                    .and_then(|v| v.split_once('x'))
                    .and_then(|(w, h)| Some((w.parse().ok()?, h.parse().ok()?)));
                if let Some(size) = size {
                    let _ = sizes_tx.send(size);
                }
            } else if !line.starts_with(' ')
                && !line.starts_with("Input #")
                && !line.starts_with("Output #")
                && !line.starts_with("Stream mapping")
                && !line.contains("@ 0x")
            {
                kept.push(line);
            }
        }
        kept.join(" ").trim().replace([' '], "_")
    });
    threads.push(std::thread::spawn(move || read_frames(stdout, sizes, shared, errors)));
    *lock(&c.child) = Some(child);
    st.inited = true;
    st.coding = coding;
    st.writer = Some(tx);
    log(format!("mpp_init ctx={} type={type_} coding={coding} split={} ret=0", c.id, st.split));
    MPP_OK
}

/// The writer thread: packets to ffmpeg's stdin until the channel closes (EOS or destroy).
fn write_packets(mut stdin: std::process::ChildStdin, rx: mpsc::Receiver<Vec<u8>>) {
    for p in rx {
        if stdin.write_all(&p).is_err() {
            break;
        }
    }
}

/// The reader thread: one I420 picture at a time from ffmpeg's raw output, its size from
/// `sizes` (showinfo's line for it, sent by the stderr reader), at most [`RAW_AHEAD`] ahead
/// of the caller.
fn read_frames(
    stdout: std::process::ChildStdout,
    sizes: mpsc::Receiver<(u32, u32)>,
    shared: Arc<Shared>,
    errors: JoinHandle<String>,
) {
    let mut r = BufReader::new(stdout);
    let result = (|| -> Result<(), String> {
        let mut first = true;
        loop {
            {
                let mut st = lock(&shared.st);
                while st.raw.len() >= RAW_AHEAD && !st.destroyed {
                    st = shared.cv.wait(st).unwrap_or_else(|e| e.into_inner());
                }
                if st.destroyed {
                    return Ok(());
                }
            }
            // The size line comes before the picture's bytes (the filter runs before the
            // encoder); no line: ffmpeg is done.
            let Ok((w, h)) = sizes.recv() else {
                return if first { Err("no-output".into()) } else { Ok(()) };
            };
            first = false;
            let frame_bytes = (w * h + 2 * w.div_ceil(2) * h.div_ceil(2)) as usize;
            let mut pic = vec![0u8; frame_bytes];
            r.read_exact(&mut pic).map_err(|e| format!("short-picture:{e}"))?;
            let mut st = lock(&shared.st);
            st.raw.push_back(((w, h), pic));
            shared.cv.notify_all();
        }
    })();
    // ffmpeg has closed its stdout: it is exiting (or killed by mpp_destroy), and its stderr
    // thread ends with it.
    let errors = errors.join().unwrap_or_default();
    let mut st = lock(&shared.st);
    if let Err(e) = result {
        st.decoder_error = Some(format!("{e} ffmpeg={errors}"));
    }
    st.reader_done = true;
    shared.cv.notify_all();
}

/// Whether `b`'s fd still refers to the inode committed (MPP keeps EXT_DMA fd numbers as
/// given: a closed or reused fd number is the user's bug); else what it refers to now (an
/// inode number or the fstat error).
fn still_committed(b: &Buffer) -> Result<(), String> {
    match inode(b.fd) {
        Ok(ino) if ino == b.inode => Ok(()),
        Ok(ino) => Err(ino.1.to_string()),
        Err(e) => Err(e),
    }
}

/// Writes one I420 picture (`w` x `h`) into `b` as NV12 at `hor` x `ver`.
fn write_nv12(b: &Buffer, pic: &[u8], w: u32, h: u32, hor: u32, ver: u32) -> Result<(), String> {
    let (w, h, hor, ver) = (w as usize, h as usize, hor as usize, ver as usize);
    let need = hor * ver * 3 / 2;
    if b.size < need {
        return Err(format!("buffer-too-small size={} need={need}", b.size));
    }
    // SAFETY: a fresh shared mapping of `b.size` bytes of the committed fd (checked alive by
    // the caller); unmapped below.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), b.size, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, b.fd, 0)
    };
    if p == libc::MAP_FAILED {
        return Err(format!("mmap-failed:{}", std::io::Error::last_os_error().to_string().replace(' ', "_")));
    }
    let sync = |flags: u64| {
        let s = [flags];
        // SAFETY: DMA_BUF_IOCTL_SYNC reads one u64; memfds answer ENOTTY, ignored.
        unsafe { libc::ioctl(b.fd, DMA_BUF_IOCTL_SYNC, s.as_ptr()) };
    };
    sync(DMA_BUF_SYNC_WRITE);
    // SAFETY: the mapping is `b.size` >= `need` bytes, writable, and nothing else in this
    // process aliases it during the copy.
    let dst = unsafe { std::slice::from_raw_parts_mut(p as *mut u8, b.size) };
    let (cw, ch) = (w.div_ceil(2), h.div_ceil(2));
    let (y, rest) = pic.split_at(w * h);
    let (u, v) = rest.split_at(cw * ch);
    for row in 0..h {
        dst[row * hor..row * hor + w].copy_from_slice(&y[row * w..row * w + w]);
    }
    let uv = &mut dst[hor * ver..];
    for row in 0..ch {
        for x in 0..cw {
            uv[row * hor + 2 * x] = u[row * cw + x];
            uv[row * hor + 2 * x + 1] = v[row * cw + x];
        }
    }
    sync(DMA_BUF_SYNC_WRITE | DMA_BUF_SYNC_END);
    // SAFETY: the mapping made above.
    unsafe { libc::munmap(p, b.size) };
    Ok(())
}

/// Lets go of the decoder's reference pictures (a DPB flush).
fn drop_refs(st: &mut State) {
    for b in st.refs.drain(..) {
        b.refs.store(0, Ordering::SeqCst);
    }
}

enum Step {
    Frame(Frame),
    Wait,
}

/// One attempt at producing a frame, under the context's lock.
fn next_frame(c: &Ctx, st: &mut State) -> Step {
    let new_frame = |st: &State, seq: u64| {
        Frame { pts: seq as i64, ..Frame::empty(c.id, seq, Arc::downgrade(&c.shared)) }.sized(st.size)
    };
    // The next picture has another size (or is the first): an info change first, and no
    // picture until the caller says it is ready again (MPP_DEC_SET_INFO_CHANGE_READY).
    if let Some(&(size, _)) = st.raw.front() {
        if st.size != Some(size) {
            st.size = Some(size);
            st.info_change_sent = false;
            st.ready = false;
        }
    }
    if let (Some(_), false) = (st.size, st.info_change_sent) {
        st.info_change_sent = true;
        let mut f = new_frame(st, 0);
        f.info_change = 1;
        return Step::Frame(f);
    }
    if st.info_change_sent && st.ready && !st.raw.is_empty() {
        // After the EOS packet, whether this is the last picture is known only once the reader
        // has either another picture or ffmpeg's end of output.
        if st.eos_put && !st.reader_done && st.raw.len() == 1 {
            return Step::Wait;
        }
        let last = st.eos_put && st.reader_done && st.raw.len() == 1;
        let Some(g) = st.group.clone() else { return Step::Wait };
        let bufs = lock(&g.buffers).clone();
        let (w, h) = st.size.expect("info change sent");
        let (hor, ver) = (align16(w), align16(h));
        let n = bufs.len();
        for k in 0..n {
            let i = (st.next_buffer + k) % n;
            let b = &bufs[i];
            if !b.unused() || b.dead.load(Ordering::SeqCst) > 0 {
                continue;
            }
            if let Err(now) = still_committed(b) {
                b.dead.store(1, Ordering::SeqCst);
                violation(
                    "buffer-fd-not-committed-inode",
                    format!(
                        "ctx={} group={} index={} fd={} committed_ino={} now={now}",
                        c.id, b.group, b.index, b.fd, b.inode.1
                    ),
                );
                continue;
            }
            let (_, pic) = st.raw.front().expect("not empty");
            if let Err(e) = write_nv12(b, pic, w, h, hor, ver) {
                b.dead.store(1, Ordering::SeqCst);
                violation("buffer-unwritable", format!("ctx={} index={} fd={} {e}", c.id, b.index, b.fd));
                continue;
            }
            st.raw.pop_front();
            c.shared.cv.notify_all();
            b.holders.fetch_add(1, Ordering::SeqCst);
            // The new picture becomes a reference; the oldest beyond `max_refs` is let go.
            b.refs.store(1, Ordering::SeqCst);
            st.refs.push_back(Arc::clone(b));
            while st.refs.len() > st.max_refs {
                let old = st.refs.pop_front().expect("not empty");
                old.refs.store(0, Ordering::SeqCst);
            }
            st.next_buffer = i + 1;
            st.frames_out += 1;
            let mut f = new_frame(st, st.frames_out);
            f.buffer = Some(Arc::clone(b));
            // As MPP: the last picture carries eos=1 (and its buffer); an empty EOS frame follows.
            f.eos = u32::from(last);
            return Step::Frame(f);
        }
        let held_by_frames = bufs.iter().filter(|b| b.holders.load(Ordering::SeqCst) > 0).count();
        log(format!("decode_get_frame ctx={} frame=null reason=no-free-buffer buffers={n} references={} held_by_frames={held_by_frames} pending={}", c.id, st.refs.len(), st.raw.len()));
        return Step::Wait;
    }
    if st.reader_done && st.raw.is_empty() && !st.eos_sent && (st.eos_put || st.decoder_error.is_some()) {
        st.eos_sent = true;
        drop_refs(st);
        if let Some(e) = &st.decoder_error {
            // Real MPP gives no frame at all for a stream its parser cannot read (not even an
            // EOS frame): nor does the fake. It says why, once.
            log(format!("decode_get_frame ctx={} frame=null decoder-error={e}", c.id));
            return Step::Wait;
        }
        let mut f = new_frame(st, st.frames_out + 1);
        f.eos = 1;
        return Step::Frame(f);
    }
    Step::Wait
}

impl Frame {
    /// A frame of context `ctx` (0: a user frame of `mpp_frame_init`) with no picture yet.
    fn empty(ctx: u64, seq: u64, notify: Weak<Shared>) -> Frame {
        Frame {
            ctx,
            seq,
            width: 0,
            height: 0,
            hor_stride: 0,
            ver_stride: 0,
            fmt: MPP_FMT_YUV420SP,
            info_change: 0,
            eos: 0,
            errinfo: 0,
            pts: 0,
            buf_size: 0,
            buffer: None,
            attached: None,
            notify,
        }
    }

    fn sized(mut self, size: Option<(u32, u32)>) -> Frame {
        if let Some((w, h)) = size {
            (self.width, self.height, self.hor_stride, self.ver_stride) = (w, h, align16(w), align16(h));
            self.buf_size = (align16(w) * align16(h) * 3 / 2) as usize;
        }
        self
    }
}

/// `MppApi::decode_put_packet`: copies the packet into the input queue, or
/// `MPP_ERR_BUFFER_FULL` when the queue is full.
unsafe extern "C" fn mpi_decode_put_packet(h: Opaque, pkt: Opaque) -> MppRet {
    let Some(c) = ctx(h) else {
        log(format!("decode_put_packet ret={MPP_ERR_NULL_PTR} reason=unknown-ctx"));
        return MPP_ERR_NULL_PTR;
    };
    let mut st = lock(&c.shared.st);
    if !st.inited {
        log(format!("decode_put_packet ctx={} ret={MPP_ERR_INIT}", c.id));
        return MPP_ERR_INIT;
    }
    let mut packets = lock(&PACKETS);
    let Some(p) = packets.get_mut(&(pkt as usize)) else {
        log(format!("decode_put_packet ctx={} ret={MPP_ERR_NULL_PTR} reason=unknown-packet", c.id));
        return MPP_ERR_NULL_PTR;
    };
    if st.coding == CODING_MJPEG {
        // Real MPP: the MJPEG decoder's single input task waits for a packet backed by an
        // MppBuffer with an output frame (KEY_OUTPUT_FRAME meta); a plain packet never fills
        // it, so decode_put_packet reports a full queue forever.
        log(format!(
            "decode_put_packet ctx={} size={} ret={MPP_ERR_BUFFER_FULL} reason=mjpeg-needs-task-api",
            c.id, p.length
        ));
        return MPP_ERR_BUFFER_FULL;
    }
    if st.eos_put {
        violation("packet-after-eos", format!("ctx={} size={}", c.id, p.length));
    }
    if st.input.len() >= st.input_slots && !p.eos {
        log(format!(
            "decode_put_packet ctx={} size={} queued={} ret={MPP_ERR_BUFFER_FULL}",
            c.id,
            p.length,
            st.input.len()
        ));
        return MPP_ERR_BUFFER_FULL;
    }
    let bytes = if p.length == 0 {
        Vec::new()
    } else {
        // SAFETY: mpp_packet_init's caller keeps `size` bytes at `data` alive while the
        // packet lives; `length` <= `size`.
        unsafe { std::slice::from_raw_parts(p.data.add(p.size - p.length), p.length) }.to_vec()
    };
    let n = bytes.len();
    if !bytes.is_empty() {
        st.input.push_back(bytes);
    }
    st.eos_put |= p.eos;
    p.length = 0;
    log(format!(
        "decode_put_packet ctx={} size={n} pts={} eos={} queued={} ret=0",
        c.id,
        p.pts,
        u8::from(p.eos),
        st.input.len()
    ));
    c.shared.cv.notify_all();
    MPP_OK
}

/// `MppApi::decode_get_frame`: hands the queued packets to the decoder, then returns the
/// info-change frame, a picture, the EOS frame, or NULL (after the output timeout:
/// `MPP_ERR_TIMEOUT`).
unsafe extern "C" fn mpi_decode_get_frame(h: Opaque, out: *mut Opaque) -> MppRet {
    if out.is_null() {
        return MPP_ERR_NULL_PTR;
    }
    // SAFETY: non-null out-pointer.
    unsafe { *out = std::ptr::null_mut() };
    let Some(c) = ctx(h) else {
        log(format!("decode_get_frame ret={MPP_ERR_NULL_PTR} reason=unknown-ctx"));
        return MPP_ERR_NULL_PTR;
    };
    let mut st = lock(&c.shared.st);
    if !st.inited {
        log(format!("decode_get_frame ctx={} ret={MPP_ERR_INIT}", c.id));
        return MPP_ERR_INIT;
    }
    while let Some(p) = st.input.pop_front() {
        if let Some(w) = &st.writer {
            let _ = w.send(p);
        }
    }
    if st.eos_put {
        // Closing the channel closes ffmpeg's stdin once the writer has sent everything.
        st.writer = None;
    }
    let deadline = (st.out_timeout > 0).then(|| Instant::now() + Duration::from_millis(st.out_timeout as u64));
    loop {
        match next_frame(&c, &mut st) {
            Step::Frame(f) => {
                log(format!(
                    "decode_get_frame ctx={} frame={} info_change={} eos={} errinfo={} width={} height={} hor_stride={} ver_stride={} index={} ret=0",
                    c.id,
                    f.seq,
                    f.info_change,
                    f.eos,
                    f.errinfo,
                    f.width,
                    f.height,
                    f.hor_stride,
                    f.ver_stride,
                    f.buffer.as_ref().map_or(-1, |b| b.index)
                ));
                let b = Box::new(f);
                let handle = &*b as *const Frame as Opaque;
                lock(&FRAMES).insert(handle as usize, b);
                // SAFETY: non-null out-pointer.
                unsafe { *out = handle };
                return MPP_OK;
            }
            Step::Wait => {}
        }
        st = match (st.out_timeout, deadline) {
            (0, _) => break,
            (_, Some(d)) => {
                let now = Instant::now();
                if now >= d {
                    log(format!("decode_get_frame ctx={} frame=null ret={MPP_ERR_TIMEOUT}", c.id));
                    return MPP_ERR_TIMEOUT;
                }
                c.shared.cv.wait_timeout(st, d - now).unwrap_or_else(|e| e.into_inner()).0
            }
            (_, None) => c.shared.cv.wait(st).unwrap_or_else(|e| e.into_inner()),
        };
    }
    log(format!("decode_get_frame ctx={} frame=null ret=0", c.id));
    MPP_OK
}

fn cmd_name(cmd: c_int) -> &'static str {
    match cmd {
        MPP_SET_INPUT_TIMEOUT => "MPP_SET_INPUT_TIMEOUT",
        MPP_SET_OUTPUT_TIMEOUT => "MPP_SET_OUTPUT_TIMEOUT",
        MPP_DEC_SET_EXT_BUF_GROUP => "MPP_DEC_SET_EXT_BUF_GROUP",
        MPP_DEC_SET_INFO_CHANGE_READY => "MPP_DEC_SET_INFO_CHANGE_READY",
        MPP_DEC_SET_PARSER_SPLIT_MODE => "MPP_DEC_SET_PARSER_SPLIT_MODE",
        MPP_DEC_SET_PARSER_FAST_MODE => "MPP_DEC_SET_PARSER_FAST_MODE",
        MPP_DEC_SET_OUTPUT_FORMAT => "MPP_DEC_SET_OUTPUT_FORMAT",
        MPP_DEC_SET_DISABLE_ERROR => "MPP_DEC_SET_DISABLE_ERROR",
        MPP_DEC_SET_IMMEDIATE_OUT => "MPP_DEC_SET_IMMEDIATE_OUT",
        _ => "unknown",
    }
}

/// `MppApi::control`.
unsafe extern "C" fn mpi_control(h: Opaque, cmd: c_int, param: Opaque) -> MppRet {
    let Some(c) = ctx(h) else {
        log(format!("control cmd={cmd:#x} ret={MPP_ERR_NULL_PTR} reason=unknown-ctx"));
        return MPP_ERR_NULL_PTR;
    };
    let mut st = lock(&c.shared.st);
    let name = cmd_name(cmd);
    let read_u32 = |p: Opaque| {
        if p.is_null() {
            0
        } else {
            // SAFETY: the commands that take a value take a pointer to a 4-byte integer
            // (RK_U32, or MppPollType read from the RK_S64 rk_mpi_cmd.h documents).
            unsafe { *(p as *const u32) }
        }
    };
    let (ret, detail) = match cmd {
        MPP_DEC_SET_PARSER_SPLIT_MODE => {
            if st.inited {
                violation("split-mode-after-init", format!("ctx={}", c.id));
            }
            st.split = read_u32(param);
            (MPP_OK, format!("value={}", st.split))
        }
        MPP_SET_OUTPUT_TIMEOUT | MPP_SET_INPUT_TIMEOUT => {
            let t = read_u32(param) as i32;
            if !(-1..=MPP_POLL_MAX).contains(&t) {
                (MPP_ERR_VALUE, format!("value={t}"))
            } else {
                if cmd == MPP_SET_OUTPUT_TIMEOUT {
                    st.out_timeout = t;
                }
                (MPP_OK, format!("value={t}"))
            }
        }
        MPP_DEC_SET_EXT_BUF_GROUP => {
            if !st.inited {
                // Real MPP (mpp.cpp): before mpp_init the decoder does not exist; MPP_NOK.
                violation("ext-buf-group-before-init", format!("ctx={}", c.id));
                (MPP_NOK, "reason=before-init".into())
            } else if param.is_null() {
                st.group = None;
                (MPP_OK, "group=internal".into())
            } else {
                match group(param) {
                    Some(g)
                        if matches!(
                            g.type_,
                            MPP_BUFFER_TYPE_ION
                                | MPP_BUFFER_TYPE_EXT_DMA
                                | MPP_BUFFER_TYPE_DRM
                                | MPP_BUFFER_TYPE_DMA_HEAP
                        ) && g.mode == MPP_BUFFER_EXTERNAL =>
                    {
                        let d = format!("group={} buffers={}", g.id, lock(&g.buffers).len());
                        st.group = Some(g);
                        (MPP_OK, d)
                    }
                    Some(g) => (MPP_ERR_VALUE, format!("group={} type={} mode={}", g.id, g.type_, g.mode)),
                    None => (MPP_ERR_NULL_PTR, "group=unknown".into()),
                }
            }
        }
        MPP_DEC_SET_INFO_CHANGE_READY => {
            if !st.info_change_sent {
                violation("info-change-ready-without-info-change", format!("ctx={}", c.id));
            }
            if st.group.is_none() {
                violation(
                    "info-change-ready-without-group",
                    format!("ctx={} (the fake has no internal buffers)", c.id),
                );
            }
            st.ready = st.info_change_sent && st.group.is_some();
            (MPP_OK, format!("ready={}", u8::from(st.ready)))
        }
        // The fake writes NV12 whatever is asked (as a chip that converts 4:2:2 JPEGs does);
        // it only checks that a YUV format is asked for.
        MPP_DEC_SET_OUTPUT_FORMAT => {
            let f = read_u32(param);
            if !st.inited {
                // Real MPP (mpp.cpp): no decoder before mpp_init to take it; MPP_NOK.
                violation("output-format-before-init", format!("ctx={}", c.id));
                (MPP_NOK, format!("value={f} reason=before-init"))
            } else {
                (if f < 0x10000 { MPP_OK } else { MPP_ERR_VALUE }, format!("value={f}"))
            }
        }
        MPP_DEC_SET_PARSER_FAST_MODE | MPP_DEC_SET_DISABLE_ERROR | MPP_DEC_SET_IMMEDIATE_OUT => {
            (MPP_OK, format!("value={}", read_u32(param)))
        }
        _ => (MPP_NOK, "unsupported=1".into()),
    };
    log(format!("control ctx={} cmd={name} ({cmd:#x}) {detail} ret={ret}", c.id));
    c.shared.cv.notify_all();
    ret
}

/// `MppApi::reset`: drops the queued packets, the pictures not yet returned and the
/// references (the ffmpeg child goes on: the fake does not restart its decoder).
unsafe extern "C" fn mpi_reset(h: Opaque) -> MppRet {
    let Some(c) = ctx(h) else { return MPP_ERR_NULL_PTR };
    let mut st = lock(&c.shared.st);
    let (p, r) = (st.input.len(), st.raw.len());
    st.input.clear();
    st.raw.clear();
    drop_refs(&mut st);
    c.shared.cv.notify_all();
    log(format!("reset ctx={} dropped_packets={p} dropped_pictures={r} ret=0", c.id));
    MPP_OK
}

/// The unimplemented `MppApi` entries.
unsafe extern "C" fn unsupported() -> MppRet {
    log(format!("unsupported-mpi-call ret={MPP_NOK}"));
    MPP_NOK
}

/// `MPP_RET mpp_destroy(MppCtx ctx)`: stops the decoder; logs the frames and buffers never
/// released.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_destroy(h: Opaque) -> MppRet {
    let Some(c) = lock(&CTXS).remove(&(h as usize)) else {
        log(format!("mpp_destroy ret={MPP_ERR_NULL_PTR} reason=unknown-ctx"));
        return MPP_ERR_NULL_PTR;
    };
    let (frames_out, group) = {
        let mut st = lock(&c.shared.st);
        st.destroyed = true;
        st.writer = None;
        drop_refs(&mut st);
        c.shared.cv.notify_all();
        (st.frames_out, st.group.take())
    };
    if let Some(mut ch) = lock(&c.child).take() {
        let _ = ch.kill();
        let _ = ch.wait();
    }
    for t in std::mem::take(&mut *lock(&c.threads)) {
        let _ = t.join();
    }
    let tasks = task::destroy(c.id);
    let unreleased = lock(&FRAMES).values().filter(|f| f.ctx == c.id && f.buffer.is_some()).count();
    let held_buffers = group.as_deref().map_or(0, held);
    log(format!("mpp_destroy ctx={} frames_out={frames_out} unreleased_frames={unreleased} buffers_held={held_buffers}{tasks} ret=0", c.id));
    MPP_OK
}

/// `const char *get_mpp_version(void)` (mpp/inc/mpp_info.h, exported by MPP builds).
#[no_mangle]
pub extern "C" fn get_mpp_version() -> *const c_char {
    log("get_mpp_version".into());
    c"zcpipe fake librockchip_mpp 0.1.0 (ffmpeg decoder)".as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    #[test]
    fn layouts_match_rk_mpi_h_and_mpp_buffer_h() {
        // Worked out by hand from the headers for LP64, as zcpipe's src/sys/mpp.rs tests do.
        assert_eq!(size_of::<MppApi>(), 184);
        assert_eq!(align_of::<MppApi>(), 8);
        assert_eq!((offset_of!(MppApi, decode_put_packet), offset_of!(MppApi, decode_get_frame)), (16, 24));
        assert_eq!(
            (offset_of!(MppApi, reset), offset_of!(MppApi, control), offset_of!(MppApi, reserv)),
            (104, 112, 120)
        );
        assert_eq!((offset_of!(MppApi, poll), offset_of!(MppApi, dequeue), offset_of!(MppApi, enqueue)), (80, 88, 96));
        assert_eq!(size_of::<MppBufferInfo>(), 40);
        assert_eq!((offset_of!(MppBufferInfo, fd), offset_of!(MppBufferInfo, index)), (32, 36));
        assert_eq!(API.size, 184);
    }

    #[test]
    fn ext_buf_group_before_init_is_refused_as_mpp_does() {
        let (mut ctx, mut api, mut grp): (Opaque, *const MppApi, Opaque) =
            (std::ptr::null_mut(), std::ptr::null(), std::ptr::null_mut());
        // SAFETY: out-pointers to locals; the handles come from the fake's own registries.
        unsafe {
            assert_eq!(mpp_create(&mut ctx, &mut api), MPP_OK);
            assert_eq!(
                mpp_buffer_group_get(
                    &mut grp,
                    MPP_BUFFER_TYPE_EXT_DMA,
                    MPP_BUFFER_EXTERNAL,
                    c"t".as_ptr(),
                    c"t".as_ptr()
                ),
                MPP_OK
            );
            assert_eq!(((*api).control)(ctx, MPP_DEC_SET_EXT_BUF_GROUP, grp), MPP_NOK);
            assert_eq!(mpp_destroy(ctx), MPP_OK);
            assert_eq!(mpp_buffer_group_put(grp), MPP_OK);
        }
    }

    fn memfd(size: usize) -> c_int {
        // SAFETY: a plain memfd_create call with a static name.
        let fd = unsafe { libc::memfd_create(c"t".as_ptr(), 0) };
        assert!(fd >= 0);
        // SAFETY: our own fd.
        assert_eq!(unsafe { libc::ftruncate(fd, size as i64) }, 0);
        fd
    }

    fn committed(fd: c_int, size: usize) -> Buffer {
        Buffer {
            group: 0,
            index: 0,
            fd,
            size,
            inode: inode(fd).unwrap(),
            holders: AtomicU32::new(0),
            refs: AtomicU32::new(0),
            dead: AtomicU32::new(0),
            refcount: AtomicU32::new(0),
            mem: 0,
        }
    }

    #[test]
    fn a_closed_or_reused_fd_number_is_caught() {
        let (a, other) = (memfd(64), memfd(64));
        let b = committed(a, 64);
        assert_eq!(still_committed(&b), Ok(()));
        // The fd number now names another file (what a user closing and reopening gets).
        // SAFETY: our own fds.
        assert_eq!(unsafe { libc::dup2(other, a) }, a);
        assert_eq!(still_committed(&b), Err(inode(other).unwrap().1.to_string()));
        // SAFETY: our own fds, closed once.
        unsafe { libc::close(a) };
        assert!(still_committed(&b).unwrap_err().contains("Bad_file_descriptor"), "{:?}", still_committed(&b));
        // SAFETY: as above.
        unsafe { libc::close(other) };
    }

    #[test]
    fn nv12_layout_pads_rows_and_places_chroma_at_ver_stride() {
        // A 4x2 I420 picture into an 16x16 NV12 buffer (a memfd).
        let size = 16 * 16 * 3 / 2;
        let fd = memfd(size);
        let b = committed(fd, size);
        let pic = [1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 20, 21];
        write_nv12(&b, &pic, 4, 2, 16, 16).unwrap();
        let mut got = vec![0u8; size];
        // SAFETY: reading into our own buffer from our own fd.
        assert_eq!(unsafe { libc::pread(fd, got.as_mut_ptr().cast(), size, 0) }, size as isize);
        assert_eq!(&got[0..4], &[1, 2, 3, 4]);
        assert_eq!(&got[16..20], &[5, 6, 7, 8]);
        assert_eq!(&got[256..260], &[10, 20, 11, 21]);
        // SAFETY: our own fd, closed once.
        unsafe { libc::close(fd) };
    }
}

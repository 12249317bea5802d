//! MPP's task API, as the MJPEG decoder uses it (`test/mpi_dec_test.c`'s "advanced" path,
//! `mpp_dec_advanced_thread` in `mpp/codec/mpp_dec_normal.cpp`), with real pixels.
//!
//! - An MJPEG context has one input task (MPP gives MJPEG one) and its two ports:
//!   `poll`/`dequeue` on `MPP_PORT_INPUT` hand the task to the user, who sets
//!   `KEY_INPUT_PACKET` (a packet made with `mpp_packet_init_with_buffer`) and
//!   `KEY_OUTPUT_FRAME` (a frame from `mpp_frame_init` with `mpp_frame_set_buffer`) and
//!   `enqueue`s it. The fake decodes at once: the JPEG (the packet buffer's first `length`
//!   bytes: an internal-group buffer's memory, or an imported dma-buf mapped read-only) with
//!   zune-jpeg, written as NV12 (full-range JFIF samples, as MPP's hardware writes them) at
//!   `hor_stride = align16(width)`, `ver_stride = align16(height)` into the frame's buffer
//!   (an imported dma-buf: mmap of its fd between `DMA_BUF_IOCTL_SYNC` START and END). The
//!   frame then sits on the output port (`poll`/`dequeue`, `mpp_task_meta_get_frame`,
//!   `enqueue` back), and the input task returns to the input port with its packet (the user
//!   takes it with `mpp_task_meta_get_packet` and enqueues the empty task, which comes
//!   straight back, as MPP's decoder thread does).
//! - The stream the hardware reads is the packet buffer's first `size` bytes (real MPP's
//!   `jpegd_parse` takes `mpp_packet_get_size` where the hardware reads the stream in place,
//!   `cap_hw_jpg_fix`), not `length`: a packet whose size was left at the whole buffer feeds
//!   the bytes after the JPEG too (the log's `size=` shows it).
//! - Rules: a task without a packet buffer or without a frame buffer gives an error frame
//!   (`errinfo=1`, and a `violation what=output-frame-without-buffer` line for the latter,
//!   where real MPP would write nowhere); a JPEG zune-jpeg cannot decode (corrupt or
//!   truncated: strict mode) gives `errinfo=1`, and so does a grayscale one (real MPP's
//!   `jpeg_judge_yuv_mode` gives MPP_ERR_STREAM for YUV400 with a YUV420SP output); an output
//!   buffer smaller than `hor_stride * ver_stride * 3/2` is a `violation
//!   what=output-buffer-too-small` (real MPP only logs and lets the hardware write past it;
//!   the fake writes nothing and gives `errinfo=1`). A poll that finds a task returns
//!   `MPP_OK` (0) and one that finds none `MPP_NOK` at once (as `mpi_poll`; the fake decodes
//!   synchronously, so nothing can come later); with `MPP_POLL_BLOCK` it is also a
//!   `violation what=poll-would-block-forever`, where real MPP would hang. Task meta keys
//!   must fit their type (`ipkt`/`opkt` packets, `ifrm`/`ofrm` frames; else `MPP_NOK`, as
//!   `get_index_of_key`). There is one output task: while the user holds it (or it waits on
//!   the output port) the next input task waits undecoded, as MPP's decoder thread blocks.
//! - `ZCPIPE_FAKE_MPP_JPEG_HANG=N` (read at `mpp_init`): the N-th JPEG stays "on the
//!   hardware" (no output, polls time out) until `mpp_destroy`; deiniting its frame or
//!   packet before then is a `violation what=frame-freed-while-hardware-writes` (or
//!   `packet-freed-while-hardware-reads`), the use-after-free real MPP would suffer.
//! - Buffers of the task API are reference counted as MPP's: `mpp_buffer_import` (NULL
//!   group, a buffer out-pointer) and `mpp_buffer_get` give one reference, a packet or frame
//!   holding a buffer one more, `mpp_buffer_put` drops one. `mpp_destroy` logs the task-API
//!   buffers, user frames and packets still alive and tasks the user still holds.
//!
//! Every call logs one line, the decode with the `ino=` of the buffer written.

use std::collections::{HashMap, VecDeque};
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use super::{
    align16, buffer, c_str, ctx, inode, lock, log, still_committed, violation, write_nv12, Buffer, Frame, Opaque,
    FRAMES, PACKETS,
};
use super::{
    MppBufferInfo, MppRet, BUFFERS, CODING_MJPEG, DMA_BUF_IOCTL_SYNC, DMA_BUF_SYNC_END, MPP_ERR_NULL_PTR,
    MPP_ERR_VALUE, MPP_FMT_YUV420SP, MPP_NOK, MPP_OK,
};

const MPP_PORT_INPUT: c_int = 0;
const MPP_PORT_OUTPUT: c_int = 1;
/// `FOURCC_META('i','p','k','t')` and `('o','f','r','m')` (mpp_meta.h).
const KEY_INPUT_PACKET: u32 = 0x6970_6b74;
const KEY_OUTPUT_FRAME: u32 = 0x6f66_726d;
/// `FOURCC_META('o','p','k','t')` and `('i','f','r','m')`: the other packet and frame keys.
const KEY_OUTPUT_PACKET: u32 = 0x6f70_6b74;
const KEY_INPUT_FRAME: u32 = 0x6966_726d;
const MPP_BUFFER_INTERNAL: c_int = 0;
const DMA_BUF_SYNC_READ: u64 = 1;

struct Task {
    ctx: u64,
    id: u64,
    meta: HashMap<u32, usize>,
}

#[derive(Default)]
struct Ports {
    input: VecDeque<usize>,
    output: VecDeque<usize>,
    /// Output tasks free for the decoder (MPP has one).
    out_free: usize,
    /// Input tasks enqueued with a job while no output task was free.
    waiting: VecDeque<usize>,
    jpegs: u64,
    corrupt: u64,
    /// `ZCPIPE_FAKE_MPP_JPEG_HANG`: the JPEG number that never comes off the hardware.
    hang_at: u64,
    /// That job's (packet, frame) handles, until `mpp_destroy`.
    on_hardware: Option<(usize, usize)>,
}

static TASKS: LazyLock<Mutex<HashMap<usize, Box<Task>>>> = LazyLock::new(Default::default);
static PORTS: LazyLock<Mutex<HashMap<u64, Ports>>> = LazyLock::new(Default::default);
static NEXT_TASK: AtomicU64 = AtomicU64::new(1);
static NEXT_USER_FRAME: AtomicU64 = AtomicU64::new(1_000_000);

fn new_task(ctx: u64) -> usize {
    let t = Box::new(Task { ctx, id: NEXT_TASK.fetch_add(1, Ordering::SeqCst), meta: HashMap::new() });
    let h = &*t as *const Task as usize;
    lock(&TASKS).insert(h, t);
    h
}

/// At `mpp_init` of an MJPEG context: its one input task, on the input port.
pub(crate) fn init_ports(ctx: u64) {
    let t = new_task(ctx);
    let hang_at = std::env::var("ZCPIPE_FAKE_MPP_JPEG_HANG").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    lock(&PORTS).insert(ctx, Ports { input: VecDeque::from([t]), out_free: 1, hang_at, ..Ports::default() });
}

/// Whether packet or frame handle `h` belongs to a job still on the (fake) hardware.
pub(crate) fn on_hardware(h: usize) -> bool {
    lock(&PORTS).values().any(|p| p.on_hardware.is_some_and(|(pk, fr)| pk == h || fr == h))
}

/// At `mpp_destroy`: forgets the context's tasks; returns the log fields (empty for a
/// context without the task API).
pub(crate) fn destroy(ctx: u64) -> String {
    let Some(p) = lock(&PORTS).remove(&ctx) else { return String::new() };
    // The hardware finishes the hung job now (MPP's thread is joined): its frame and packet
    // must still be alive.
    let hung = p.on_hardware.map(|(pk, fr)| {
        if !lock(&FRAMES).contains_key(&fr) {
            violation("frame-freed-while-hardware-writes", format!("ctx={ctx} at=mpp_destroy"));
        }
        if !lock(&PACKETS).contains_key(&pk) {
            violation("packet-freed-while-hardware-reads", format!("ctx={ctx} at=mpp_destroy"));
        }
    });
    let mut tasks = lock(&TASKS);
    // Tasks in MPP's hands: on the ports, waiting for the output task, or on the hardware.
    let queued = p.input.len() + p.output.len() + p.waiting.len() + usize::from(p.on_hardware.is_some());
    let user_tasks = tasks.values().filter(|t| t.ctx == ctx).count() - queued;
    tasks.retain(|_, t| t.ctx != ctx);
    let live_buffers = lock(&BUFFERS).values().filter(|b| b.refcount.load(Ordering::SeqCst) > 0).count();
    let live_frames = lock(&FRAMES).values().filter(|f| f.attached.is_some()).count();
    let live_packets = lock(&PACKETS).values().filter(|p| p.buffer.is_some()).count();
    format!(" jpegs={} corrupt={} hung={} live_buffers={live_buffers} live_frames={live_frames} live_packets={live_packets} user_tasks={user_tasks}", p.jpegs, p.corrupt, u8::from(hung.is_some()))
}

fn register(b: Buffer) -> Arc<Buffer> {
    let b = Arc::new(b);
    lock(&BUFFERS).insert(Arc::as_ptr(&b) as usize, Arc::clone(&b));
    b
}

/// Drops one reference of a task-API buffer (`who` for the log); at the last the buffer is
/// forgotten (its memory freed, for an internal one).
pub(crate) fn put(b: &Arc<Buffer>, who: &str) {
    let before = b.refcount.fetch_sub(1, Ordering::SeqCst);
    if before == 0 {
        b.refcount.store(0, Ordering::SeqCst);
        violation("buffer-put-without-reference", format!("by={who} fd={} size={}", b.fd, b.size));
        return;
    }
    if before == 1 {
        lock(&BUFFERS).remove(&(Arc::as_ptr(b) as usize));
        if b.mem != 0 {
            // SAFETY: the calloc'ed memory of this internal buffer, freed once (the last reference).
            unsafe { libc::free(b.mem as *mut c_void) };
        }
    }
}

/// `mpp_buffer_import` (`mpp_buffer_import_with_tag` with a NULL group and a buffer
/// out-pointer): one reference to a buffer over the caller's fd (EXT_DMA: not dup'ed).
pub(crate) fn import(info: &MppBufferInfo, out: *mut Opaque, who: &str) -> MppRet {
    if info.fd < 0 || info.size == 0 {
        log(format!("mpp_buffer_import fd={} size={} ret={MPP_ERR_VALUE} {who}", info.fd, info.size));
        return MPP_ERR_VALUE;
    }
    let ino = match inode(info.fd) {
        Ok(i) => i,
        Err(e) => {
            violation("import-bad-fd", format!("fd={} error={e}", info.fd));
            return MPP_ERR_VALUE;
        }
    };
    let b = register(Buffer {
        group: 0,
        index: info.index,
        fd: info.fd,
        size: info.size,
        inode: ino,
        holders: AtomicU32::new(0),
        refs: AtomicU32::new(0),
        dead: AtomicU32::new(0),
        refcount: AtomicU32::new(1),
        mem: 0,
    });
    // SAFETY: non-null out-pointer from the caller.
    unsafe { *out = Arc::as_ptr(&b) as Opaque };
    log(format!("mpp_buffer_import type={} fd={} size={} ino={} ret=0 {who}", info.type_, info.fd, info.size, ino.1));
    MPP_OK
}

/// `MPP_RET mpp_buffer_get_with_tag(MppBufferGroup group, MppBuffer *buffer, size_t size,
/// const char *tag, const char *caller)`: a new buffer of an internal group (CPU memory).
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_buffer_get_with_tag(
    grp: Opaque,
    out: *mut Opaque,
    size: usize,
    tag: *const c_char,
    caller: *const c_char,
) -> MppRet {
    let who = format!("tag={} caller={}", c_str(tag), c_str(caller));
    let Some(g) = super::group(grp) else {
        log(format!("mpp_buffer_get ret={MPP_NOK} reason=unknown-group {who}"));
        return MPP_NOK;
    };
    if out.is_null() || size == 0 {
        log(format!(
            "mpp_buffer_get group={} size={size} ret={} reason=bad-argument {who}",
            g.id,
            super::MPP_ERR_UNKNOW
        ));
        return super::MPP_ERR_UNKNOW;
    }
    if g.mode != MPP_BUFFER_INTERNAL {
        log(format!("mpp_buffer_get group={} ret={MPP_NOK} reason=external-group-has-no-allocator {who}", g.id));
        return MPP_NOK;
    }
    // SAFETY: a plain allocation, freed at the last put.
    let mem = unsafe { libc::calloc(size, 1) } as usize;
    if mem == 0 {
        return super::MPP_ERR_MALLOC;
    }
    let b = register(Buffer {
        group: g.id,
        index: -1,
        fd: -1,
        size,
        inode: (0, 0),
        holders: AtomicU32::new(0),
        refs: AtomicU32::new(0),
        dead: AtomicU32::new(0),
        refcount: AtomicU32::new(1),
        mem,
    });
    lock(&g.buffers).push(Arc::clone(&b));
    // SAFETY: non-null out-pointer.
    unsafe { *out = Arc::as_ptr(&b) as Opaque };
    log(format!("mpp_buffer_get group={} size={size} ret=0 {who}", g.id));
    MPP_OK
}

/// `MPP_RET mpp_buffer_put_with_caller(MppBuffer buffer, const char *caller)`.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_buffer_put_with_caller(buf: Opaque, caller: *const c_char) -> MppRet {
    let Some(b) = buffer(buf) else {
        violation("buffer-put-unknown", format!("caller={}", c_str(caller)));
        return MPP_ERR_NULL_PTR;
    };
    put(&b, "mpp_buffer_put");
    log(format!(
        "mpp_buffer_put fd={} ino={} refs={} caller={} ret=0",
        b.fd,
        b.inode.1,
        b.refcount.load(Ordering::SeqCst),
        c_str(caller)
    ));
    MPP_OK
}

/// `void *mpp_buffer_get_ptr_with_caller(MppBuffer buffer, const char *caller)`: an
/// internal buffer's memory (NULL for a dma-buf: the fake maps those only to decode).
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_buffer_get_ptr_with_caller(buf: Opaque, caller: *const c_char) -> *mut c_void {
    let p = buffer(buf).map_or(0, |b| b.mem);
    log(format!("mpp_buffer_get_ptr mapped={} caller={}", u8::from(p != 0), c_str(caller)));
    p as *mut c_void
}

/// `MPP_RET mpp_packet_init_with_buffer(MppPacket *packet, MppBuffer buffer)`: a packet
/// over the whole buffer (length = its size), holding a reference.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_packet_init_with_buffer(out: *mut Opaque, buf: Opaque) -> MppRet {
    let Some(b) = buffer(buf).filter(|_| !out.is_null()) else {
        log(format!("mpp_packet_init_with_buffer ret={MPP_ERR_NULL_PTR}"));
        return MPP_ERR_NULL_PTR;
    };
    b.refcount.fetch_add(1, Ordering::SeqCst);
    super::hand_out(
        &PACKETS,
        Box::new(super::Packet {
            data: b.mem as *const u8,
            size: b.size,
            length: b.size,
            pts: 0,
            eos: false,
            buffer: Some(Arc::clone(&b)),
            owned: Vec::new(),
            meta: 0,
        }),
        out,
    );
    log(format!("mpp_packet_init_with_buffer size={} fd={} ret=0", b.size, b.fd));
    MPP_OK
}

/// `void mpp_packet_set_length(MppPacket packet, size_t size)`.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_packet_set_length(p: Opaque, length: usize) {
    let r = super::with_packet(p, |p| {
        let ok = length <= p.size;
        if ok {
            p.length = length;
        }
        (ok, p.size)
    });
    match r {
        Some((true, _)) => log(format!("mpp_packet_set_length length={length}")),
        Some((false, size)) => violation("packet-length-past-size", format!("length={length} size={size}")),
        None => violation("packet-set-length-unknown", format!("length={length}")),
    }
}

/// `void mpp_packet_set_size(MppPacket packet, size_t size)`: the stream size the JPEG
/// hardware reads (see the module doc); past the packet's buffer is a violation.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_packet_set_size(p: Opaque, size: usize) {
    let r = super::with_packet(p, |p| {
        let room = p.buffer.as_ref().map_or(usize::MAX, |b| b.size);
        if size <= room {
            p.size = size;
        }
        (size <= room, room)
    });
    match r {
        Some((true, _)) => log(format!("mpp_packet_set_size size={size}")),
        Some((false, room)) => violation("packet-size-past-buffer", format!("size={size} buffer={room}")),
        None => violation("packet-set-size-unknown", format!("size={size}")),
    }
}

/// `MPP_RET mpp_frame_init(MppFrame *frame)`: an empty user frame.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_frame_init(out: *mut Opaque) -> MppRet {
    if out.is_null() {
        return MPP_ERR_NULL_PTR;
    }
    let seq = NEXT_USER_FRAME.fetch_add(1, Ordering::SeqCst);
    let f = Box::new(Frame::empty(0, seq, std::sync::Weak::new()));
    super::hand_out(&FRAMES, f, out);
    log(format!("mpp_frame_init frame={seq} ret=0"));
    MPP_OK
}

/// `void mpp_frame_set_buffer(MppFrame frame, MppBuffer buffer)`: takes a reference on the
/// new buffer, puts the old one.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_frame_set_buffer(f: Opaque, buf: Opaque) {
    let new = buffer(buf);
    let mut frames = lock(&FRAMES);
    let Some(fr) = frames.get_mut(&(f as usize)) else {
        violation("frame-set-buffer-unknown-frame", String::new());
        return;
    };
    if let Some(b) = &new {
        b.refcount.fetch_add(1, Ordering::SeqCst);
    }
    let old = std::mem::replace(&mut fr.attached, new.clone());
    let seq = fr.seq;
    drop(frames);
    if let Some(o) = old {
        put(&o, "mpp_frame_set_buffer");
    }
    log(format!("mpp_frame_set_buffer frame={seq} ino={}", new.map_or(0, |b| b.inode.1)));
}

/// Whether `key` holds a value of type `what` (`packet`, `frame`), as MPP's meta key table.
fn key_fits(key: u32, what: &str) -> bool {
    match what {
        "packet" => matches!(key, KEY_INPUT_PACKET | KEY_OUTPUT_PACKET),
        _ => matches!(key, KEY_INPUT_FRAME | KEY_OUTPUT_FRAME),
    }
}

fn set_meta(t: Opaque, key: u32, v: Opaque, what: &str) -> MppRet {
    if !key_fits(key, what) {
        log(format!("mpp_task_meta_set_{what} key={key:#x} ret={MPP_NOK} reason=unknown-key-type-pair"));
        return MPP_NOK;
    }
    let mut tasks = lock(&TASKS);
    let Some(task) = tasks.get_mut(&(t as usize)) else {
        violation("task-meta-unknown-task", format!("call=mpp_task_meta_set_{what}"));
        return MPP_ERR_NULL_PTR;
    };
    task.meta.insert(key, v as usize);
    log(format!("mpp_task_meta_set_{what} task={} key={key:#x} ret=0", task.id));
    MPP_OK
}

fn get_meta(t: Opaque, key: u32, out: *mut Opaque, what: &str) -> MppRet {
    if out.is_null() {
        return MPP_ERR_NULL_PTR;
    }
    if !key_fits(key, what) {
        log(format!("mpp_task_meta_get_{what} key={key:#x} ret={MPP_NOK} reason=unknown-key-type-pair"));
        return MPP_NOK;
    }
    let mut tasks = lock(&TASKS);
    let Some(task) = tasks.get_mut(&(t as usize)) else {
        violation("task-meta-unknown-task", format!("call=mpp_task_meta_get_{what}"));
        return MPP_ERR_NULL_PTR;
    };
    // As MPP's meta: a get takes the value out.
    let v = task.meta.remove(&key);
    // SAFETY: non-null out-pointer.
    unsafe { *out = v.unwrap_or(0) as Opaque };
    let ret = if v.is_some() { MPP_OK } else { MPP_NOK };
    log(format!("mpp_task_meta_get_{what} task={} key={key:#x} found={} ret={ret}", task.id, u8::from(v.is_some())));
    ret
}

/// `MPP_RET mpp_task_meta_set_packet(MppTask task, MppMetaKey key, MppPacket packet)`.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_task_meta_set_packet(t: Opaque, key: u32, p: Opaque) -> MppRet {
    set_meta(t, key, p, "packet")
}

/// `MPP_RET mpp_task_meta_set_frame(MppTask task, MppMetaKey key, MppFrame frame)`.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_task_meta_set_frame(t: Opaque, key: u32, f: Opaque) -> MppRet {
    set_meta(t, key, f, "frame")
}

/// `MPP_RET mpp_task_meta_get_packet(MppTask task, MppMetaKey key, MppPacket *packet)`.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_task_meta_get_packet(t: Opaque, key: u32, out: *mut Opaque) -> MppRet {
    get_meta(t, key, out, "packet")
}

/// `MPP_RET mpp_task_meta_get_frame(MppTask task, MppMetaKey key, MppFrame *frame)`.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_task_meta_get_frame(t: Opaque, key: u32, out: *mut Opaque) -> MppRet {
    get_meta(t, key, out, "frame")
}

fn port_name(port: c_int) -> &'static str {
    match port {
        MPP_PORT_INPUT => "input",
        MPP_PORT_OUTPUT => "output",
        _ => "unknown",
    }
}

/// The MJPEG context behind handle `h`, or the log line's reason.
fn mjpeg_ctx(h: Opaque, call: &str) -> Result<u64, MppRet> {
    let Some(c) = ctx(h) else {
        log(format!("{call} ret={MPP_ERR_NULL_PTR} reason=unknown-ctx"));
        return Err(MPP_ERR_NULL_PTR);
    };
    let coding = lock(&c.shared.st).coding;
    if coding != CODING_MJPEG || !lock(&PORTS).contains_key(&c.id) {
        log(format!("{call} ctx={} ret={MPP_NOK} reason=task-api-only-for-mjpeg-in-the-fake", c.id));
        return Err(MPP_NOK);
    }
    Ok(c.id)
}

/// `MppApi::poll(ctx, port, timeout)`: `MPP_OK` when `port` has a task, else `MPP_NOK` at
/// once (see the module doc).
pub(crate) unsafe extern "C" fn mpi_poll(h: Opaque, port: c_int, timeout: c_int) -> MppRet {
    let c = match mjpeg_ctx(h, "poll") {
        Ok(c) => c,
        Err(r) => return r,
    };
    let ports = lock(&PORTS);
    let p = &ports[&c];
    let n = match port {
        MPP_PORT_INPUT => p.input.len(),
        MPP_PORT_OUTPUT => p.output.len(),
        _ => {
            log(format!("poll ctx={c} port={port} ret={MPP_ERR_VALUE}"));
            return MPP_ERR_VALUE;
        }
    };
    if n > 0 {
        log(format!("poll ctx={c} port={} timeout={timeout} ready={n} ret={MPP_OK}", port_name(port)));
        return MPP_OK;
    }
    if timeout < 0 {
        violation("poll-would-block-forever", format!("ctx={c} port={}", port_name(port)));
    }
    log(format!("poll ctx={c} port={} timeout={timeout} ready=0 ret={MPP_NOK}", port_name(port)));
    MPP_NOK
}

/// `MppApi::dequeue(ctx, port, &task)`.
pub(crate) unsafe extern "C" fn mpi_dequeue(h: Opaque, port: c_int, out: *mut Opaque) -> MppRet {
    let c = match mjpeg_ctx(h, "dequeue") {
        Ok(c) => c,
        Err(r) => return r,
    };
    if out.is_null() {
        return MPP_ERR_NULL_PTR;
    }
    let mut ports = lock(&PORTS);
    let p = ports.get_mut(&c).expect("checked");
    let t = match port {
        MPP_PORT_INPUT => p.input.pop_front(),
        MPP_PORT_OUTPUT => p.output.pop_front(),
        _ => None,
    };
    // SAFETY: non-null out-pointer.
    unsafe { *out = t.unwrap_or(0) as Opaque };
    let id = t.and_then(|t| lock(&TASKS).get(&t).map(|t| t.id)).unwrap_or(0);
    let ret = if t.is_some() { MPP_OK } else { MPP_NOK };
    log(format!("dequeue ctx={c} port={} task={id} ret={ret}", port_name(port)));
    ret
}

/// `MppApi::enqueue(ctx, port, task)`: on the input port a task with a packet and a frame
/// is decoded at once (its frame goes to the output port, the task back to the input port
/// with its packet); an empty one comes straight back. On the output port the task is done.
pub(crate) unsafe extern "C" fn mpi_enqueue(h: Opaque, port: c_int, t: Opaque) -> MppRet {
    let c = match mjpeg_ctx(h, "enqueue") {
        Ok(c) => c,
        Err(r) => return r,
    };
    let (id, meta) = match lock(&TASKS).get(&(t as usize)) {
        Some(task) if task.ctx == c => (task.id, task.meta.clone()),
        _ => {
            violation("enqueue-unknown-task", format!("ctx={c} port={}", port_name(port)));
            return MPP_ERR_NULL_PTR;
        }
    };
    match port {
        MPP_PORT_OUTPUT => {
            lock(&TASKS).remove(&(t as usize));
            log(format!("enqueue ctx={c} port=output task={id} ret=0"));
            // The output task is free again: a job that waited for it runs now.
            let next = {
                let mut ports = lock(&PORTS);
                let p = ports.get_mut(&c).expect("checked");
                p.out_free += 1;
                p.waiting.pop_front()
            };
            if let Some(w) = next {
                run_job(c, w);
            }
            MPP_OK
        }
        MPP_PORT_INPUT => {
            let (pkt, frm) = (meta.get(&KEY_INPUT_PACKET).copied(), meta.get(&KEY_OUTPUT_FRAME).copied());
            let job = pkt.is_some() && frm.is_some();
            let wait = job && {
                let mut ports = lock(&PORTS);
                let p = ports.get_mut(&c).expect("checked");
                let wait = p.out_free == 0;
                if wait {
                    p.waiting.push_back(t as usize);
                }
                wait
            };
            log(format!(
                "enqueue ctx={c} port=input task={id} packet={} frame={} waits_for_output_task={} ret=0",
                u8::from(pkt.is_some()),
                u8::from(frm.is_some()),
                u8::from(wait)
            ));
            if !job {
                lock(&PORTS).get_mut(&c).expect("checked").input.push_back(t as usize);
            } else if !wait {
                run_job(c, t as usize);
            }
            MPP_OK
        }
        _ => MPP_ERR_VALUE,
    }
}

/// Input task `t` (with a packet and a frame) on the decoder, which has a free output task:
/// decoded, its frame on the output port, the task back on the input port with its packet;
/// or, for the `ZCPIPE_FAKE_MPP_JPEG_HANG` JPEG, left on the hardware.
fn run_job(c: u64, t: usize) {
    let meta = lock(&TASKS).get(&t).map(|t| t.meta.clone()).unwrap_or_default();
    let (Some(&pkt), Some(&frm)) = (meta.get(&KEY_INPUT_PACKET), meta.get(&KEY_OUTPUT_FRAME)) else { return };
    {
        let mut ports = lock(&PORTS);
        let p = ports.get_mut(&c).expect("checked");
        p.out_free -= 1;
        if p.hang_at != 0 && p.jpegs + 1 == p.hang_at {
            p.jpegs += 1;
            p.on_hardware = Some((pkt, frm));
            let n = p.jpegs;
            drop(ports);
            log(format!("task_decode ctx={c} jpeg={n} hung=1"));
            return;
        }
    }
    decode(c, pkt, frm);
    if let Some(task) = lock(&TASKS).get_mut(&t) {
        task.meta.remove(&KEY_OUTPUT_FRAME);
    }
    let out = new_task(c);
    if let Some(o) = lock(&TASKS).get_mut(&out) {
        o.meta.insert(KEY_OUTPUT_FRAME, frm);
    }
    let mut ports = lock(&PORTS);
    let p = ports.get_mut(&c).expect("checked");
    p.output.push_back(out);
    p.input.push_back(t);
}

/// One JPEG: from packet `pkt`'s buffer into frame `frm`'s buffer, as the module doc says.
fn decode(c: u64, pkt: usize, frm: usize) {
    let n = {
        let mut ports = lock(&PORTS);
        let p = ports.get_mut(&c).expect("checked");
        p.jpegs += 1;
        p.jpegs
    };
    // The hardware reads `size` bytes (see the module doc), whatever the length says.
    let (in_buf, length) = lock(&PACKETS).get(&pkt).map_or((None, 0), |p| (p.buffer.clone(), p.size));
    let out_buf = lock(&FRAMES).get(&frm).and_then(|f| f.attached.clone());
    let result: Result<(u32, u32), String> = (|| {
        let in_buf = in_buf.ok_or("packet-without-buffer")?;
        let Some(out) = out_buf.as_ref() else {
            violation("output-frame-without-buffer", format!("ctx={c} jpeg={n}"));
            return Err("output-frame-without-buffer".into());
        };
        let jpeg = read_buffer(&in_buf, length)?;
        let (w, h, pic) = decode_jpeg(&jpeg)?;
        let (hor, ver) = (align16(w), align16(h));
        let need = (hor * ver * 3 / 2) as usize;
        if out.size < need {
            violation("output-buffer-too-small", format!("ctx={c} jpeg={n} size={} need={need}", out.size));
            return Err(format!("buffer-too-small size={} need={need}", out.size));
        }
        if let Err(now) = still_committed(out) {
            violation(
                "buffer-fd-not-imported-inode",
                format!("ctx={c} fd={} imported_ino={} now={now}", out.fd, out.inode.1),
            );
            return Err("buffer-fd-not-imported-inode".into());
        }
        write_nv12(out, &pic, w, h, hor, ver)?;
        Ok((w, h))
    })();
    let ino = out_buf.as_ref().map_or(0, |b| b.inode.1);
    let mut frames = lock(&FRAMES);
    let Some(f) = frames.get_mut(&frm) else { return };
    match result {
        Ok((w, h)) => {
            (f.width, f.height, f.hor_stride, f.ver_stride, f.fmt, f.errinfo) =
                (w, h, align16(w), align16(h), MPP_FMT_YUV420SP, 0);
            f.buf_size = (align16(w) * align16(h) * 3 / 2) as usize;
            log(format!("task_decode ctx={c} jpeg={n} frame={} ino={ino} size={length} width={w} height={h} hor_stride={} ver_stride={} errinfo=0", f.seq, f.hor_stride, f.ver_stride));
        }
        Err(why) => {
            f.errinfo = 1;
            lock(&PORTS).get_mut(&c).expect("checked").corrupt += 1;
            log(format!(
                "task_decode ctx={c} jpeg={n} frame={} ino={ino} size={length} errinfo=1 reason={}",
                f.seq,
                why.replace(' ', "_")
            ));
        }
    }
}

/// The first `length` bytes of a buffer (a packet's, or an encoder's input frame's): an
/// internal buffer's memory, or a dma-buf mapped read-only between `DMA_BUF_IOCTL_SYNC`
/// START and END.
pub(crate) fn read_buffer(b: &Buffer, length: usize) -> Result<Vec<u8>, String> {
    if length > b.size {
        return Err(format!("packet-length-past-buffer length={length} size={}", b.size));
    }
    if b.mem != 0 {
        // SAFETY: the internal buffer's `size` bytes, alive while the packet holds it.
        return Ok(unsafe { std::slice::from_raw_parts(b.mem as *const u8, length) }.to_vec());
    }
    // SAFETY: a fresh read-only shared mapping of the imported fd, unmapped below.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), b.size, libc::PROT_READ, libc::MAP_SHARED, b.fd, 0) };
    if p == libc::MAP_FAILED {
        return Err(format!("mmap-failed:{}", std::io::Error::last_os_error().to_string().replace(' ', "_")));
    }
    let sync = |flags: u64| {
        let s = [flags];
        // SAFETY: DMA_BUF_IOCTL_SYNC reads one u64; memfds answer ENOTTY, ignored.
        unsafe { libc::ioctl(b.fd, DMA_BUF_IOCTL_SYNC, s.as_ptr()) };
    };
    sync(DMA_BUF_SYNC_READ);
    // SAFETY: the mapping holds `size` >= `length` readable bytes.
    let v = unsafe { std::slice::from_raw_parts(p as *const u8, length) }.to_vec();
    sync(DMA_BUF_SYNC_READ | DMA_BUF_SYNC_END);
    // SAFETY: the mapping made above.
    unsafe { libc::munmap(p, b.size) };
    Ok(v)
}

/// Decodes a JPEG (zune-jpeg, strict: a truncated or corrupt stream is an error) into an
/// I420 picture of its full-range samples: (width, height, Y then Cb then Cr, chroma
/// averaged over 2x2 blocks). A grayscale JPEG is refused as MPP refuses YUV400 with a
/// YUV420SP output (`yuv400-with-yuv420sp-output`).
pub(crate) fn decode_jpeg(jpeg: &[u8]) -> Result<(u32, u32, Vec<u8>), String> {
    use zune_jpeg::zune_core::bytestream::ZCursor;
    use zune_jpeg::zune_core::colorspace::ColorSpace;
    use zune_jpeg::zune_core::options::DecoderOptions;
    let opts = DecoderOptions::default().set_strict_mode(true).jpeg_set_out_colorspace(ColorSpace::YCbCr);
    let mut d = zune_jpeg::JpegDecoder::new_with_options(ZCursor::new(jpeg), opts);
    d.decode_headers().map_err(|e| format!("jpeg:{e:?}").replace(' ', "_"))?;
    if d.info().is_some_and(|i| i.components == 1) {
        return Err("yuv400-with-yuv420sp-output".into());
    }
    let px = d.decode().map_err(|e| format!("jpeg:{e:?}").replace(' ', "_"))?;
    let info = d.info().ok_or("jpeg:no-info")?;
    let (w, h) = (info.width as usize, info.height as usize);
    let comps = d.output_colorspace().map_or(3, |c| c.num_components());
    if w == 0 || h == 0 || px.len() < w * h * comps {
        return Err(format!("jpeg:short-output:{}", px.len()));
    }
    let (cw, ch) = (w.div_ceil(2), h.div_ceil(2));
    let mut pic = vec![128u8; w * h + 2 * cw * ch];
    for i in 0..w * h {
        pic[i] = px[i * comps];
    }
    if comps >= 3 {
        let (u, v) = pic[w * h..].split_at_mut(cw * ch);
        for cy in 0..ch {
            for cx in 0..cw {
                let (mut su, mut sv, mut k) = (0u32, 0u32, 0u32);
                for y in 2 * cy..(2 * cy + 2).min(h) {
                    for x in 2 * cx..(2 * cx + 2).min(w) {
                        let p = (y * w + x) * comps;
                        (su, sv, k) = (su + px[p + 1] as u32, sv + px[p + 2] as u32, k + 1);
                    }
                }
                u[cy * cw + cx] = ((su + k / 2) / k) as u8;
                v[cy * cw + cx] = ((sv + k / 2) / k) as u8;
            }
        }
    }
    Ok((w as u32, h as u32, pic))
}

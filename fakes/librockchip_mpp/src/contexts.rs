//! Contexts: `mpp_create`, `mpp_init` (which spawns the ffmpeg decoder, or sets up an
//! encoder: [`encode`]), `mpp_destroy`, the context state, and `get_mpp_version`.

use std::collections::{HashMap, VecDeque};
use std::ffi::{c_char, c_int};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Condvar, LazyLock, Mutex};
use std::thread::JoinHandle;

use super::*;

// ---------------------------------------------------------------------------------------
// Contexts.

#[derive(Default)]
pub(super) struct State {
    pub(super) inited: bool,
    pub(super) coding: c_int,
    pub(super) split: u32,
    pub(super) out_timeout: i32,
    pub(super) input_slots: usize,
    pub(super) input: VecDeque<Vec<u8>>,
    pub(super) eos_put: bool,
    pub(super) writer: Option<mpsc::Sender<Vec<u8>>>,
    /// The picture size of the stream now (the last info change's).
    pub(super) size: Option<(u32, u32)>,
    pub(super) info_change_sent: bool,
    pub(super) group: Option<Arc<Group>>,
    pub(super) ready: bool,
    /// Decoded I420 pictures with their size, oldest first.
    pub(super) raw: VecDeque<((u32, u32), Vec<u8>)>,
    pub(super) reader_done: bool,
    pub(super) decoder_error: Option<String>,
    pub(super) eos_sent: bool,
    pub(super) frames_out: u64,
    pub(super) next_buffer: usize,
    /// The decoder's reference pictures' buffers, oldest first, at most `max_refs`.
    pub(super) refs: VecDeque<Arc<Buffer>>,
    pub(super) max_refs: usize,
    pub(super) destroyed: bool,
}

pub(super) struct Shared {
    pub(super) st: Mutex<State>,
    pub(super) cv: Condvar,
}

pub(super) struct Ctx {
    pub(super) id: u64,
    pub(super) shared: Arc<Shared>,
    child: Mutex<Option<Child>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

static CTXS: LazyLock<Mutex<HashMap<usize, Arc<Ctx>>>> = LazyLock::new(Default::default);

pub(super) fn ctx(h: Opaque) -> Option<Arc<Ctx>> {
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
    if type_ == MPP_CTX_ENC && !st.inited && coding == CODING_AVC {
        // The encoder starts ffmpeg with its first frame, once MPP_ENC_SET_CFG said the size.
        st.inited = true;
        st.coding = coding;
        encode::init(c.id);
        log(format!("mpp_init ctx={} type={type_} coding={coding} encoder=1 ret=0", c.id));
        return MPP_OK;
    }
    if st.inited || type_ != MPP_CTX_DEC || demuxer.is_empty() {
        log(format!("mpp_init ctx={} type={type_} coding={coding} ret={MPP_NOK} reason=already-inited-or-not-a-decoder-or-encoder-the-fake-has", c.id));
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
    let tasks = task::destroy(c.id) + &encode::destroy(c.id);
    let unreleased = lock(&FRAMES).values().filter(|f| f.ctx == c.id && f.buffer.is_some()).count();
    let held_buffers = group.as_deref().map_or(0, held);
    log(format!("mpp_destroy ctx={} frames_out={frames_out} unreleased_frames={unreleased} buffers_held={held_buffers}{tasks} ret=0", c.id));
    MPP_OK
}

/// `const char *get_mpp_version(void)` (mpp/inc/mpp_info.h, exported by MPP builds).
#[no_mangle]
pub extern "C" fn get_mpp_version() -> *const c_char {
    log("get_mpp_version".into());
    c"zcpipe fake librockchip_mpp 0.1.0 (ffmpeg decoder and encoder)".as_ptr()
}

//! The H.264 encoder: the encoder's `control` commands, and
//! `encode_put_frame` / `encode_get_packet` over an ffmpeg (libx264) child.
//!
//! - The configuration (`mpp_enc_cfg_*`) is kept by [`super::enc_cfg`].
//! - `control(MPP_ENC_SET_CFG, cfg)` merges the entries set over the encoder's and checks
//!   them: width and height > 0, `hor_stride` >= width, `ver_stride` >= height, format NV12
//!   (`MPP_FMT_YUV420SP`), input fps > 0, `codec:type` H.264; each failure is a `violation
//!   what=cfg-...` line and `MPP_NOK`. A new size after frames were encoded is refused
//!   (`unsupported=reconfig`). `MPP_ENC_GET_CFG` copies the encoder's entries into a cfg,
//!   `MPP_ENC_SET_HEADER_MODE` takes 0 (SPS/PPS on the first picture only: the fake strips
//!   them from later ones) or 1 (before every IDR), `MPP_ENC_SET_IDR_FRAME` makes the next
//!   frame an IDR picture.
//! - `encode_put_frame` reads the frame's buffer (an imported dma-buf mapped read-only
//!   between `DMA_BUF_IOCTL_SYNC` START and END, ENOTTY from a memfd tolerated; or an internal
//!   buffer's memory): NV12 at the frame's `hor_stride` x `ver_stride`, cropped to width x
//!   height, written to ffmpeg's stdin. A frame whose size or strides differ from the
//!   configuration's, a buffer smaller than `hor_stride * ver_stride * 3/2`, or a buffer fd
//!   no longer on the imported inode is a violation (`MPP_ERR_VALUE` for the last two). A
//!   frame without a buffer, or with `eos`, flushes: ffmpeg's stdin is closed and an empty
//!   packet with `eos` follows the last picture's (which carries `eos` when the EOS frame had
//!   a buffer).
//! - ffmpeg: `ffmpeg -f rawvideo -pix_fmt nv12 -video_size WxH -framerate N/D -i pipe:0
//!   -c:v libx264 -preset ultrafast -tune zerolatency -bf 0 -g GOP -sc_threshold 0` with the
//!   rate control (`-b:v`/`-maxrate`/`-bufsize` from `rc:bps_*`, `-qp` for FIXQP) and
//!   `-x264-params repeat-headers=1:aud=1:cabac=..:8x8dct=..:level=..` (CABAC and the 8x8
//!   transform from `h264:profile`, so profile 100 gives a High-profile stream), written as
//!   `-f mpjpeg pipe:1` with `-flush_packets 1`. The multipart framing (`Content-length`
//!   before each encoded packet) is why: raw `-f h264` output shows where an access unit ends
//!   only when the next one's AUD arrives, a frame late, whereas MPP gives each frame's packet
//!   as soon as it is encoded. Each part is one access unit starting with its AUD (type 9),
//!   which the fake strips (MPP writes none). `-sc_threshold 0`: IDR pictures exactly every
//!   GOP frames, as MPP's GOP.
//! - A forced IDR (`MPP_ENC_SET_IDR_FRAME`) restarts ffmpeg before the next frame (the old
//!   child's packets are all read first): x264 under ffmpeg has no run-time keyframe request,
//!   and a fresh encoder starts with an IDR picture with SPS and PPS, so the stream stays one
//!   valid stream (the restart is logged, `restart=idr`).
//! - `encode_get_packet` returns the next frame's packet (one frame in, one packet out, in
//!   order), blocking until ffmpeg has written it (up to 30 s, then `MPP_NOK` with
//!   `reason=ffmpeg-timeout`, or at once `reason=ffmpeg-ended` with ffmpeg's message): its
//!   bytes (Annex B, 4-byte start codes), the frame's pts, and `KEY_OUTPUT_INTRA` in its meta
//!   (1 when it holds an IDR slice, NAL type 5). With no frame waiting it returns NULL and
//!   `MPP_OK` after the output timeout (at once by default, as MPP's encoder); with a blocking
//!   output timeout that would hang real MPP it is a `violation what=get-packet-would-block-forever`
//!   and `MPP_NOK`.

use std::collections::{HashMap, VecDeque};
use std::ffi::c_int;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Condvar, LazyLock, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::*;

// ---------------------------------------------------------------------------------------
// Encoder contexts.

/// What ffmpeg is started with, from the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Settings {
    width: u32,
    height: u32,
    hor_stride: u32,
    ver_stride: u32,
    fps: (i32, i32),
    gop: i32,
    rc_mode: i32,
    bps: (i32, i32),
    qp: i32,
    profile: i32,
    level: i32,
}

impl Settings {
    /// The settings of entries `v`, or the violation (`what`, detail) that forbids them.
    fn from_cfg(v: &HashMap<&'static str, i32>) -> Result<Settings, (&'static str, String)> {
        let g = |k: &str| v.get(k).copied().unwrap_or(0);
        let (w, h, hor, ver) = (g("prep:width"), g("prep:height"), g("prep:hor_stride"), g("prep:ver_stride"));
        if w <= 0 || h <= 0 {
            return Err(("cfg-size", format!("width={w} height={h}")));
        }
        if hor < w || ver < h {
            return Err(("cfg-stride-below-size", format!("width={w} height={h} hor_stride={hor} ver_stride={ver}")));
        }
        if g("prep:format") as u32 != MPP_FMT_YUV420SP {
            return Err(("cfg-format-not-nv12", format!("format={}", g("prep:format"))));
        }
        let fps = (g("rc:fps_in_num"), g("rc:fps_in_denom").max(1));
        if fps.0 <= 0 {
            return Err(("cfg-fps", format!("fps_in_num={}", fps.0)));
        }
        if v.get("codec:type").is_some_and(|t| *t != CODING_AVC) {
            return Err(("cfg-codec-not-h264", format!("type={}", g("codec:type"))));
        }
        let bps = (g("rc:bps_target"), g("rc:bps_max").max(g("rc:bps_target")));
        let qp = if g("rc:qp_init") > 0 { g("rc:qp_init") } else { 26 };
        Ok(Settings {
            width: w as u32,
            height: h as u32,
            hor_stride: hor as u32,
            ver_stride: ver as u32,
            fps,
            gop: g("rc:gop"),
            rc_mode: g("rc:mode"),
            bps,
            qp,
            profile: v.get("h264:profile").copied().unwrap_or(100),
            level: g("h264:level"),
        })
    }

    /// ffmpeg's arguments for these settings (see the module's documentation).
    fn ffmpeg_args(&self) -> Vec<String> {
        let mut a: Vec<String> = ["-hide_banner", "-nostats", "-loglevel", "error", "-probesize", "32"]
            .into_iter()
            .map(String::from)
            .collect();
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        a.extend(s(&["-analyzeduration", "0", "-f", "rawvideo", "-pix_fmt", "nv12", "-video_size"]));
        a.push(format!("{}x{}", self.width, self.height));
        a.extend(s(&["-framerate", &format!("{}/{}", self.fps.0, self.fps.1), "-i", "pipe:0"]));
        a.extend(s(&["-c:v", "libx264", "-preset", "ultrafast", "-tune", "zerolatency", "-bf", "0"]));
        let gop = if self.gop > 0 { self.gop.to_string() } else { "100000".into() };
        a.extend(s(&["-g", &gop, "-sc_threshold", "0", "-fps_mode", "passthrough"]));
        if self.rc_mode == 2 {
            a.extend(s(&["-qp", &self.qp.to_string()]));
        } else if self.bps.0 > 0 {
            let (t, m) = (self.bps.0.to_string(), self.bps.1.to_string());
            a.extend(s(&["-b:v", &t, "-maxrate", &m, "-bufsize", &m]));
        }
        let (cabac, dct8) = (u8::from(self.profile >= 77), u8::from(self.profile >= 100));
        let mut x264 = format!("repeat-headers=1:aud=1:cabac={cabac}:8x8dct={dct8}");
        if self.level > 0 {
            x264 += &format!(":level={}", self.level);
        }
        a.extend(s(&["-x264-params", &x264, "-flush_packets", "1", "-f", "mpjpeg", "pipe:1"]));
        a
    }
}

/// A frame put whose packet is not taken yet.
struct Pending {
    pts: i64,
    /// A picture was written to ffmpeg for it (else: an EOS frame without a buffer).
    picture: bool,
    eos: bool,
}

#[derive(Default)]
struct EncState {
    /// The configuration entries applied so far, and what they make.
    values: HashMap<&'static str, i32>,
    settings: Option<Settings>,
    header_mode: i32,
    idr_pending: bool,
    pending: VecDeque<Pending>,
    /// Access units read from ffmpeg, oldest first (all segments, in order).
    units: VecDeque<Vec<u8>>,
    /// Set before the fake closes ffmpeg's stdin itself (a restart, EOS, destroy).
    closing: bool,
    /// ffmpeg ended on its own: why.
    error: Option<String>,
    frames_in: u64,
    packets_out: u64,
    restarts: u64,
}

/// One ffmpeg child and the threads reading it.
struct Segment {
    child: Child,
    stdin: Option<ChildStdin>,
    reader: JoinHandle<()>,
    frames: u64,
}

struct Enc {
    st: Mutex<EncState>,
    cv: Condvar,
    /// The running ffmpeg; locked only by the thread putting frames (and destroy), never
    /// while `st` is held, so the reader thread always gets `st`.
    seg: Mutex<Option<Segment>>,
}

static ENCODERS: LazyLock<Mutex<HashMap<u64, Arc<Enc>>>> = LazyLock::new(Default::default);

fn encoder(ctx: u64) -> Option<Arc<Enc>> {
    lock(&ENCODERS).get(&ctx).cloned()
}

/// At `mpp_init(MPP_CTX_ENC, AVC)`: the context's encoder state (ffmpeg starts with the first
/// frame, once the configuration is known).
pub(super) fn init(ctx: u64) {
    let e = Arc::new(Enc { st: Mutex::new(EncState::default()), cv: Condvar::new(), seg: Mutex::new(None) });
    lock(&ENCODERS).insert(ctx, e);
}

/// At `mpp_destroy`: stops ffmpeg; returns the log fields (empty for a decoder).
pub(super) fn destroy(ctx: u64) -> String {
    let Some(e) = lock(&ENCODERS).remove(&ctx) else { return String::new() };
    lock(&e.st).closing = true;
    if let Some(mut s) = lock(&e.seg).take() {
        drop(s.stdin.take());
        let _ = s.child.kill();
        let _ = s.child.wait();
        let _ = s.reader.join();
    }
    let st = lock(&e.st);
    format!(
        " frames_in={} packets_out={} packets_not_taken={} restarts={}",
        st.frames_in,
        st.packets_out,
        st.pending.len(),
        st.restarts
    )
}

/// `control` of an encoder command on context `ctx`: (MPP_RET, log detail).
pub(super) fn control(ctx: u64, cmd: c_int, param: Opaque) -> (MppRet, String) {
    let Some(e) = encoder(ctx) else { return (MPP_NOK, "reason=not-an-encoder".into()) };
    let mut st = lock(&e.st);
    match cmd {
        MPP_ENC_SET_CFG => {
            let Some(cfg) = lock(&CFGS).get(&(param as usize)).map(|c| c.values.clone()) else {
                return (MPP_ERR_NULL_PTR, "reason=unknown-cfg".into());
            };
            let mut merged = st.values.clone();
            merged.extend(cfg.iter().map(|(k, v)| (*k, *v)));
            match Settings::from_cfg(&merged) {
                Err((what, detail)) => {
                    violation(what, format!("ctx={ctx} {detail}"));
                    (MPP_NOK, format!("entries={} {detail}", cfg.len()))
                }
                Ok(s) if st.frames_in > 0 && st.settings.as_ref().is_some_and(|o| *o != s) => {
                    (MPP_NOK, "unsupported=reconfig".into())
                }
                Ok(s) => {
                    let d = format!("entries={} width={} height={} hor_stride={} ver_stride={} fps={}/{} gop={} rc_mode={} bps={} profile={} level={}", cfg.len(), s.width, s.height, s.hor_stride, s.ver_stride, s.fps.0, s.fps.1, s.gop, s.rc_mode, s.bps.0, s.profile, s.level);
                    st.values = merged;
                    st.settings = Some(s);
                    (MPP_OK, d)
                }
            }
        }
        MPP_ENC_GET_CFG => match lock(&CFGS).get_mut(&(param as usize)) {
            Some(c) => {
                c.values = st.values.clone();
                (MPP_OK, format!("entries={}", c.values.len()))
            }
            None => (MPP_ERR_NULL_PTR, "reason=unknown-cfg".into()),
        },
        MPP_ENC_SET_HEADER_MODE => {
            // SAFETY: the command takes a pointer to an MppEncHeaderMode (a 4-byte enum).
            let mode = (!param.is_null()).then(|| unsafe { *(param as *const i32) });
            match mode {
                Some(m @ 0..=1) => {
                    st.header_mode = m;
                    (MPP_OK, format!("value={m}"))
                }
                m => (MPP_NOK, format!("value={m:?}")),
            }
        }
        MPP_ENC_SET_IDR_FRAME => {
            st.idr_pending = true;
            (MPP_OK, "idr=next".into())
        }
        _ => (MPP_NOK, "unsupported=1".into()),
    }
}

// ---------------------------------------------------------------------------------------
// Frames in, packets out.

/// The picture of frame `f` as ffmpeg takes it (NV12 cropped to `s`'s size), read from its
/// buffer; `Err((MPP_RET, reason))` when the buffer cannot be read.
fn picture(ctx: u64, f: &Frame, b: &Buffer, s: &Settings) -> Result<Vec<u8>, (MppRet, String)> {
    let (w, h) = (s.width as usize, s.height as usize);
    let (hor, ver) = (f.hor_stride as usize, f.ver_stride as usize);
    if (f.width, f.height, f.hor_stride, f.ver_stride, f.fmt)
        != (s.width, s.height, s.hor_stride, s.ver_stride, MPP_FMT_YUV420SP)
    {
        violation(
            "frame-differs-from-cfg",
            format!(
                "ctx={ctx} frame={} width={} height={} hor_stride={hor} ver_stride={ver} fmt={} cfg={}x{}/{}x{}",
                f.seq, f.width, f.height, f.fmt, s.width, s.height, s.hor_stride, s.ver_stride
            ),
        );
        if hor < w || ver < h {
            return Err((MPP_ERR_VALUE, "frame-strides-below-cfg-size".into()));
        }
    }
    let need = hor * ver * 3 / 2;
    if b.size < need {
        violation("frame-buffer-too-small", format!("ctx={ctx} frame={} size={} need={need}", f.seq, b.size));
        return Err((MPP_ERR_VALUE, "frame-buffer-too-small".into()));
    }
    if b.mem == 0 {
        if let Err(now) = still_committed(b) {
            violation(
                "frame-buffer-fd-not-imported-inode",
                format!("ctx={ctx} fd={} imported_ino={} now={now}", b.fd, b.inode.1),
            );
            return Err((MPP_ERR_VALUE, "frame-buffer-fd-not-imported-inode".into()));
        }
    }
    let src = task::read_buffer(b, need).map_err(|e| (MPP_ERR_VALUE, e))?;
    Ok(crop_nv12(&src, w, h, hor, ver))
}

/// NV12 at `hor` x `ver` cropped to `w` x `h` (chroma rows of `w` rounded up to even bytes).
pub(super) fn crop_nv12(src: &[u8], w: usize, h: usize, hor: usize, ver: usize) -> Vec<u8> {
    let (cw, ch) = (w.div_ceil(2) * 2, h.div_ceil(2));
    let mut out = Vec::with_capacity(w * h + cw * ch);
    for row in 0..h {
        out.extend_from_slice(&src[row * hor..row * hor + w]);
    }
    for row in 0..ch {
        let at = hor * ver + row * hor;
        out.extend_from_slice(&src[at..at + cw]);
    }
    out
}

/// `MppApi::encode_put_frame`: the frame's picture to ffmpeg (see the module's
/// documentation), or a flush.
pub(super) unsafe extern "C" fn mpi_encode_put_frame(h: Opaque, frame: Opaque) -> MppRet {
    let Some(c) = ctx(h) else {
        log(format!("encode_put_frame ret={MPP_ERR_NULL_PTR} reason=unknown-ctx"));
        return MPP_ERR_NULL_PTR;
    };
    let Some(e) = encoder(c.id) else {
        let r = if lock(&c.shared.st).inited { MPP_NOK } else { MPP_ERR_INIT };
        log(format!("encode_put_frame ctx={} ret={r} reason=not-an-inited-encoder", c.id));
        return r;
    };
    let Some(f) = lock(&FRAMES).get(&(frame as usize)).map(|f| (**f).clone()) else {
        violation("put-frame-unknown-frame", format!("ctx={}", c.id));
        return MPP_ERR_NULL_PTR;
    };
    let (settings, idr) = {
        let mut st = lock(&e.st);
        (st.settings.clone(), std::mem::take(&mut st.idr_pending))
    };
    let Some(s) = settings else {
        violation("put-frame-before-set-cfg", format!("ctx={}", c.id));
        return MPP_NOK;
    };
    let pic = match f.attached.as_deref().map(|b| picture(c.id, &f, b, &s)) {
        Some(Err((r, why))) => {
            log(format!("encode_put_frame ctx={} frame={} ret={r} reason={why}", c.id, f.seq));
            return r;
        }
        Some(Ok(p)) => Some(p),
        None => None,
    };
    let flush = f.eos != 0 || pic.is_none();
    let mut seg = lock(&e.seg);
    let mut restart = false;
    if let Some(pic) = &pic {
        restart = idr && seg.as_ref().is_some_and(|g| g.frames > 0);
        if restart {
            finish(&e, seg.take());
            lock(&e.st).restarts += 1;
        }
        if seg.is_none() {
            match spawn(&e, &s) {
                Ok(g) => *seg = Some(g),
                Err(why) => {
                    log(format!(
                        "encode_put_frame ctx={} frame={} ret={MPP_ERR_INIT} reason=ffmpeg-not-started error={why}",
                        c.id, f.seq
                    ));
                    return MPP_ERR_INIT;
                }
            }
        }
        let g = seg.as_mut().expect("just started");
        {
            let mut st = lock(&e.st);
            st.pending.push_back(Pending { pts: f.pts, picture: true, eos: f.eos != 0 });
            st.frames_in += 1;
            e.cv.notify_all();
        }
        g.frames += 1;
        if let Err(err) = g.stdin.as_mut().map_or(Ok(()), |i| i.write_all(pic)) {
            // ffmpeg is gone: its reader says why, and encode_get_packet reports it.
            log(format!(
                "encode_put_frame ctx={} frame={} stdin-error={}",
                c.id,
                f.seq,
                err.to_string().replace(' ', "_")
            ));
        }
    }
    if flush {
        finish(&e, seg.take());
        if pic.is_none() {
            let mut st = lock(&e.st);
            st.pending.push_back(Pending { pts: f.pts, picture: false, eos: true });
            e.cv.notify_all();
        }
    }
    let ino = f.attached.as_ref().map_or(0, |b| b.inode.1);
    log(format!(
        "encode_put_frame ctx={} frame={} pts={} width={} height={} hor_stride={} ver_stride={} ino={ino} bytes={} idr_forced={} restart={} eos={} flush={} ret=0",
        c.id, f.seq, f.pts, f.width, f.height, f.hor_stride, f.ver_stride, pic.as_ref().map_or(0, Vec::len), u8::from(idr), if restart { "idr" } else { "0" }, f.eos, u8::from(flush)
    ));
    MPP_OK
}

/// Starts ffmpeg for settings `s`, with the thread that reads its access units into `e`.
fn spawn(e: &Arc<Enc>, s: &Settings) -> Result<Segment, String> {
    let bin = std::env::var("ZCPIPE_FAKE_MPP_FFMPEG").unwrap_or_else(|_| "ffmpeg".into());
    let mut child = Command::new(&bin)
        .args(s.ffmpeg_args())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| format!("{bin}:{err}").replace(' ', "_"))?;
    let (stdin, stdout, stderr) =
        (child.stdin.take().expect("piped"), child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    let errors = std::thread::spawn(move || {
        let lines: Vec<String> = BufReader::new(stderr).lines().map_while(Result::ok).collect();
        lines.join(" ").trim().replace(' ', "_")
    });
    let enc = Arc::clone(e);
    let reader = std::thread::spawn(move || read_units(stdout, enc, errors));
    lock(&e.st).closing = false;
    Ok(Segment { child, stdin: Some(stdin), reader, frames: 0 })
}

/// Ends ffmpeg `seg` (if any): its stdin closed, every access unit it still writes read,
/// the child reaped.
fn finish(e: &Enc, seg: Option<Segment>) {
    let Some(mut g) = seg else { return };
    lock(&e.st).closing = true;
    drop(g.stdin.take());
    let _ = g.reader.join();
    let _ = g.child.wait();
}

/// One part of ffmpeg's mpjpeg output (`--ffmpeg`, `Content-type`, `Content-length: N`, an
/// empty line, N bytes): the N bytes, or `None` at the end of the output.
pub(super) fn read_part(r: &mut impl BufRead) -> Result<Option<Vec<u8>>, String> {
    let mut len: Option<usize> = None;
    loop {
        let mut line = Vec::new();
        if r.read_until(b'\n', &mut line).map_err(|e| e.to_string())? == 0 {
            return Ok(None);
        }
        let line = String::from_utf8_lossy(&line);
        let line = line.trim_end();
        if let Some(v) = line.strip_prefix("Content-length:") {
            len = Some(v.trim().parse().map_err(|_| format!("bad-part-length:{v}"))?);
        } else if let (true, Some(n)) = (line.is_empty(), len) {
            let mut unit = vec![0u8; n];
            r.read_exact(&mut unit).map_err(|e| format!("short-part:{e}"))?;
            return Ok(Some(unit));
        }
    }
}

/// The reader thread: ffmpeg's access units into `e.units` until its output ends; an end
/// the fake did not cause (ffmpeg failed) is kept as the encoder's error, with ffmpeg's
/// messages.
fn read_units(stdout: std::process::ChildStdout, e: Arc<Enc>, errors: JoinHandle<String>) {
    let mut r = BufReader::new(stdout);
    let end = loop {
        match read_part(&mut r) {
            Ok(Some(unit)) => {
                lock(&e.st).units.push_back(unit);
                e.cv.notify_all();
            }
            Ok(None) => break "ended".to_string(),
            Err(why) => break why.replace(' ', "_"),
        }
    };
    let errors = errors.join().unwrap_or_default();
    let mut st = lock(&e.st);
    if !st.closing {
        st.error = Some(format!("{end} ffmpeg={errors}"));
    }
    e.cv.notify_all();
}

/// The NAL units of Annex-B `data` (without their start codes and trailing zero bytes).
pub(super) fn nal_units(data: &[u8]) -> Vec<&[u8]> {
    let starts: Vec<usize> =
        (0..data.len().saturating_sub(2)).filter(|&i| data[i..i + 3] == [0, 0, 1]).map(|i| i + 3).collect();
    let mut out = Vec::new();
    for (k, &s) in starts.iter().enumerate() {
        let mut end = starts.get(k + 1).map_or(data.len(), |n| n - 3);
        while end > s && data[end - 1] == 0 {
            end -= 1;
        }
        if end > s {
            out.push(&data[s..end]);
        }
    }
    out
}

/// The packet MPP would give for ffmpeg's access unit `raw`: its NAL units with 4-byte start
/// codes, without the AUD (type 9), and without SPS/PPS (7, 8) when `strip_headers`; with
/// whether `raw` started with an AUD and whether it holds an IDR slice (type 5).
pub(super) fn access_unit(raw: &[u8], strip_headers: bool) -> (Vec<u8>, bool, bool) {
    let nals = nal_units(raw);
    let aud = nals.first().is_some_and(|n| n[0] & 0x1f == 9);
    let mut out = Vec::with_capacity(raw.len());
    let mut idr = false;
    for n in nals {
        let t = n[0] & 0x1f;
        if t == 9 || (strip_headers && (t == 7 || t == 8)) {
            continue;
        }
        idr |= t == 5;
        out.extend_from_slice(&[0, 0, 0, 1]);
        out.extend_from_slice(n);
    }
    (out, aud, idr)
}

/// `MppApi::encode_get_packet`: the next frame's packet (see the module's documentation).
pub(super) unsafe extern "C" fn mpi_encode_get_packet(h: Opaque, out: *mut Opaque) -> MppRet {
    if out.is_null() {
        return MPP_ERR_NULL_PTR;
    }
    // SAFETY: non-null out-pointer.
    unsafe { *out = std::ptr::null_mut() };
    let Some(c) = ctx(h) else {
        log(format!("encode_get_packet ret={MPP_ERR_NULL_PTR} reason=unknown-ctx"));
        return MPP_ERR_NULL_PTR;
    };
    let timeout = lock(&c.shared.st).out_timeout;
    let Some(e) = encoder(c.id) else {
        log(format!("encode_get_packet ctx={} ret={MPP_NOK} reason=not-an-inited-encoder", c.id));
        return MPP_NOK;
    };
    let mut st = lock(&e.st);
    if st.pending.is_empty() {
        if timeout < 0 {
            violation("get-packet-would-block-forever", format!("ctx={} (no frame put)", c.id));
            return MPP_NOK;
        }
        let deadline = Instant::now() + Duration::from_millis(timeout as u64);
        while st.pending.is_empty() && Instant::now() < deadline {
            st = e.cv.wait_timeout(st, deadline - Instant::now()).unwrap_or_else(|p| p.into_inner()).0;
        }
        if st.pending.is_empty() {
            log(format!("encode_get_packet ctx={} packet=null ret=0", c.id));
            return MPP_OK;
        }
    }
    if st.pending.front().is_some_and(|p| p.picture) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while st.units.is_empty() {
            let (now, reason) = (Instant::now(), st.error.clone());
            if reason.is_some() || now >= deadline {
                let why = reason.map_or("ffmpeg-timeout".into(), |r| format!("ffmpeg-ended error={r}"));
                log(format!("encode_get_packet ctx={} ret={MPP_NOK} reason={why}", c.id));
                return MPP_NOK;
            }
            st = e.cv.wait_timeout(st, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
        }
    }
    let p = st.pending.pop_front().expect("not empty");
    let raw = if p.picture { st.units.pop_front().expect("not empty") } else { Vec::new() };
    let (au, aud, idr) = access_unit(&raw, st.header_mode == MPP_ENC_HEADER_MODE_DEFAULT && st.packets_out > 0);
    st.packets_out += 1;
    let n = st.packets_out;
    drop(st);
    let len = au.len();
    let meta = new_meta(HashMap::from([(KEY_OUTPUT_INTRA, i32::from(idr))]));
    let mut b = Box::new(Packet {
        data: std::ptr::null(),
        size: len,
        length: len,
        pts: p.pts,
        eos: p.eos,
        buffer: None,
        owned: au,
        meta,
    });
    b.data = b.owned.as_ptr();
    hand_out(&PACKETS, b, out);
    log(format!(
        "encode_get_packet ctx={} packet={n} pts={} size={len} intra={} eos={} aud={} ret=0",
        c.id,
        p.pts,
        u8::from(idr),
        u8::from(p.eos),
        u8::from(aud)
    ));
    MPP_OK
}

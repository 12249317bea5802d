//! A raw camera recorded: its frames encoded to H.264 by an encoder that is a tap of the
//! camera's own pool (`CaptureConfig::record` on a V4L2 camera, a test pattern, an image, a
//! Motion JPEG camera or video).
//!
//! The encoder joins the capture stage's pool as any tap does
//! ([`zcpipe_core::tap::TapClient`], its own one-slot drop-oldest ring): it sees the newest
//! frame, holds one at most, and a slow encoder or disk drops its own frames, never the
//! pipeline's. On a board it is MPP's H.264 encoder reading the pool's dma-buf in place
//! ([`mpp`]; `--encoder`, [`EncoderChoice`]). Elsewhere it is the CPU: an ffmpeg child (`libx264`, `ultrafast`,
//! `zerolatency`, no B pictures, a keyframe every [`GOP_SECONDS`]) reads the frames, packed
//! tight, on its stdin, stamped with the time they reached it (so a frame the tap dropped
//! leaves its gap in the clip's timeline), and writes MPEG-TS on its fd 3 to the same reader
//! a compressed camera's packets go through ([`super::record::Recording::tee`]): for the
//! recorder, an encoded raw camera is one more H.264 stream.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;

use zcpipe_core::frame::{Fourcc, FrameLayout};
use zcpipe_core::tap::{frame_to_packed, TapClient};
use zcpipe_core::ts::Codec;

use zcpipe_core::config::Choice;
use zcpipe_sys::mpp::Libmpp;

use super::ffmpeg::Child;
use super::record::{Recording, Tee, TEE_ARGS};

mod mpp;

/// Who encodes a raw camera's frames for the recorder (`--encoder`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EncoderChoice {
    /// MPP when its library loads and `/dev/mpp_service` exists, else the CPU.
    #[default]
    Auto,
    /// Rockchip MPP's H.264 encoder, reading the pool's dma-bufs in place.
    Mpp,
    /// ffmpeg's libx264 on the CPU.
    Cpu,
}

impl Choice for EncoderChoice {
    const ALL: &'static [(Self, &'static str, &'static str)] = &[
        (EncoderChoice::Auto, "auto", "MPP when librockchip_mpp loads and /dev/mpp_service exists, else the CPU"),
        (
            EncoderChoice::Mpp,
            "mpp",
            "Rockchip MPP's H.264 encoder reads the capture pool's dma-buf in place, no CPU copy",
        ),
        (EncoderChoice::Cpu, "cpu", "ffmpeg's libx264 on the CPU, from a copy of each frame"),
    ];
}

/// The MPP library `choice` asks for (`None`: the CPU), and the reason in a few words.
/// Errors: `mpp` asked for and librockchip_mpp does not load.
pub fn resolve(choice: EncoderChoice) -> anyhow::Result<(Option<Arc<Libmpp>>, String)> {
    let service = zcpipe_sys::board::path(super::decoder::MPP_SERVICE);
    match choice {
        EncoderChoice::Cpu => Ok((None, "--encoder cpu".into())),
        EncoderChoice::Mpp => {
            let lib = Libmpp::open(None).map_err(|e| {
                // The library's own advice ends with decoding's alternative: encoding's instead.
                let why = format!("{e:#}");
                let why = why.strip_suffix("; or decode on the CPU").unwrap_or(&why);
                anyhow::anyhow!("--encoder mpp: {why}; or pass --encoder cpu to encode on the CPU")
            })?;
            let why = format!("--encoder mpp: {} loads", lib.path());
            Ok((Some(Arc::new(lib)), why))
        }
        EncoderChoice::Auto if !service.exists() => Ok((None, "auto: not a Rockchip BSP kernel".into())),
        EncoderChoice::Auto => match Libmpp::open(None) {
            Ok(lib) => {
                let why = format!("auto: {} loads", lib.path());
                Ok((Some(Arc::new(lib)), why))
            }
            Err(e) => Ok((None, format!("auto: librockchip_mpp does not load ({e:#})"))),
        },
    }
}

/// The tap's name on the capture stage's socket.
pub const TAP_NAME: &str = "recorder";

/// Seconds between two keyframes: a clip starts at a keyframe, so at most this much more
/// pre-roll than asked.
pub const GOP_SECONDS: f64 = 2.0;

/// How long the encoder may take to write its last frames at the end.
const FINISH_WAIT: Duration = Duration::from_secs(5);

/// After the encoder failed, how long before it is started again.
const RETRY_AFTER: Duration = Duration::from_secs(10);

/// A raw camera's encoder: a thread tapping the capture pool, stopped and joined on drop
/// (the encoder writes its last frames first).
pub(crate) struct EncoderTap {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EncoderTap {
    /// Starts the encoder of `record`'s camera on the pool served at `socket`, its stream to
    /// `record`; `fps` is the camera's nominal rate (the encoder's rate control).
    /// `choice` says who encodes. Errors: `--encoder mpp` and MPP does not load, no thread.
    pub(crate) fn start(
        record: Arc<Recording>,
        socket: PathBuf,
        fps: f64,
        choice: EncoderChoice,
    ) -> anyhow::Result<EncoderTap> {
        let (mpp, why) = resolve(choice)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let who = if mpp.is_some() { "by MPP's encoder in place" } else { "on the CPU (ffmpeg, libx264)" };
        let thread = std::thread::Builder::new()
            .name("record-encode".into())
            .spawn(move || {
                let tap = TapClient::new(socket, TAP_NAME, "capture");
                let enc = Encoding {
                    tap,
                    camera: record.camera().to_string(),
                    record,
                    fps,
                    mpp,
                    encoder: None,
                    failed_at: None,
                    said: None,
                    mpp_refused: None,
                };
                enc.run(&flag)
            })
            .context("starting the camera's encoder thread")?;
        log::info!("recording: this camera's frames are encoded to H.264 {who} from a tap of its pool ({why})");
        Ok(EncoderTap { stop, thread: Some(thread) })
    }
}

impl Drop for EncoderTap {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The encoder thread's state.
struct Encoding {
    tap: TapClient,
    record: Arc<Recording>,
    camera: String,
    fps: f64,
    /// MPP, when it encodes (else the CPU).
    mpp: Option<Arc<Libmpp>>,
    encoder: Option<Backend>,
    /// When the encoder last failed (it is started again [`RETRY_AFTER`] later).
    failed_at: Option<Instant>,
    /// The last problem said (said once until another one comes).
    said: Option<String>,
    /// Frames of this format and size MPP failed on: the CPU encodes them.
    mpp_refused: Option<(Fourcc, u32, u32)>,
}

impl Encoding {
    fn run(mut self, stop: &AtomicBool) {
        let mut packed = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let frame = match self.tap.next(Duration::from_millis(100)) {
                Ok(Some(f)) => f,
                Ok(None) => {
                    // The pool is this process's own: once it ended its stream, the stage
                    // is ending. A hang-up mid-run (a tap too slow in copy mode, a broken
                    // ring) is joined again.
                    if self.tap.counters().ends > 0 {
                        break;
                    }
                    continue;
                }
                Err(e) => {
                    self.say(format!("its pool: {e:#}; joining it again"));
                    continue;
                }
            };
            let layout = frame.desc().layout;
            if !self.ready_for(&layout) {
                continue;
            }
            let done = match self.encoder.as_mut() {
                // MPP reads the frame in place: it goes back once the access unit is out.
                Some(Backend::Mpp(m)) => m.encode(&frame).map_err(|e| format!("MPP's encoder: {e:#}")),
                // The frame goes back to the pool as soon as its pixels are copied.
                Some(Backend::Cpu(c)) => {
                    let packed_ok = frame_to_packed(&frame, &mut packed);
                    drop(frame);
                    packed_ok.map_err(|e| format!("{e:#}")).and_then(|_| c.write(&packed))
                }
                None => Ok(()),
            };
            if let Err(why) = done {
                // MPP that failed leaves these frames to the CPU at once; the CPU that
                // failed is tried again after a while.
                match self.encoder.take() {
                    Some(Backend::Mpp(m)) => self.mpp_refused = Some(m.key),
                    _ => self.failed_at = Some(Instant::now()),
                }
                self.say(why);
            }
        }
        self.end_stream();
    }

    /// Ends the encoder's stream, if one runs: ffmpeg writes its last frames (MPP's encoder
    /// has none waiting: one frame in, one access unit out).
    fn end_stream(&mut self) {
        if let Some(Backend::Cpu(e)) = self.encoder.take() {
            e.finish(&self.camera);
        }
    }

    /// Says `what` once (until something else is said), as the reason frames are not
    /// recorded.
    fn say(&mut self, what: String) {
        if self.said.as_deref() != Some(what.as_str()) {
            log::warn!("camera {}: not recording its frames: {what}", self.camera);
            self.said = Some(what);
        }
    }

    /// Whether an encoder for frames of `layout` runs, starting one if needed: a frame of
    /// another format or size ends the encoder's stream and starts another (a clip does
    /// not cross it). MPP encodes what it takes; the CPU the rest.
    fn ready_for(&mut self, layout: &FrameLayout) -> bool {
        let key = (layout.fourcc, layout.width, layout.height);
        if let Some(old) = self.encoder.as_ref().map(Backend::key).filter(|k| *k != key) {
            self.end_stream();
            log::info!(
                "camera {}: its frames went from {} {}x{} to {} {}x{}: a new encoded stream starts",
                self.camera,
                old.0,
                old.1,
                old.2,
                layout.fourcc,
                layout.width,
                layout.height
            );
        }
        if self.encoder.is_some() {
            return true;
        }
        if self.failed_at.is_some_and(|t| t.elapsed() < RETRY_AFTER) {
            return false;
        }
        // A tap in copy mode gets copies in memfds, which MPP cannot import.
        let copies = self.tap.copy_mode() == Some(true);
        if let Some(lib) = self.mpp.as_ref().filter(|_| !copies && self.mpp_refused != Some(key)) {
            match mpp::MppEncoder::start(lib, &self.record, layout, self.fps) {
                Ok(m) => {
                    self.encoder = Some(Backend::Mpp(m));
                    return true;
                }
                Err(e) => log::warn!("camera {}: MPP cannot encode these frames ({e:#}); the CPU does", self.camera),
            }
        }
        match CpuEncoder::start(&self.record, key, self.fps) {
            Ok(e) => {
                self.encoder = Some(Backend::Cpu(e));
                self.failed_at = None;
                true
            }
            Err(e) => {
                self.failed_at = Some(Instant::now());
                self.say(format!("{e:#}"));
                false
            }
        }
    }
}

/// The encoder running.
enum Backend {
    Mpp(mpp::MppEncoder),
    Cpu(CpuEncoder),
}

impl Backend {
    fn key(&self) -> (Fourcc, u32, u32) {
        match self {
            Backend::Mpp(m) => m.key,
            Backend::Cpu(c) => c.key,
        }
    }
}

/// The ffmpeg `-pix_fmt` of frames of `fourcc` packed by [`frame_to_packed`].
pub(crate) fn pix_fmt(fourcc: Fourcc) -> Option<&'static str> {
    Some(match fourcc {
        Fourcc::NV12 | Fourcc::NV12M => "nv12",
        Fourcc::NV16 => "nv16",
        Fourcc::YUYV => "yuyv422",
        Fourcc::RGB24 => "rgb24",
        Fourcc::BGR24 => "bgr24",
        Fourcc::XR24 => "bgr0",
        _ => return None,
    })
}

/// ffmpeg's arguments for frames of `key` at `fps`: raw frames in on stdin, H.264 (4:2:0,
/// which every browser plays) in MPEG-TS out on fd 3 ([`TEE_ARGS`]).
pub(crate) fn encoder_args(key: (Fourcc, u32, u32), fps: f64) -> anyhow::Result<Vec<String>> {
    let (fourcc, w, h) = key;
    let pix = pix_fmt(fourcc).with_context(|| format!("{fourcc} frames cannot be encoded"))?;
    let fps = if fps.is_finite() && fps > 0.0 && fps <= 1000.0 { fps } else { 30.0 };
    let gop = ((fps * GOP_SECONDS).round() as u32).max(1);
    let mut args: Vec<String> = [
        "-hide_banner",
        "-nostats",
        "-loglevel",
        "error",
        "-f",
        "rawvideo",
        "-pix_fmt",
        pix,
        "-video_size",
        &format!("{w}x{h}"),
        "-framerate",
        &format!("{fps:.3}"),
        // Each frame stamped when it reached ffmpeg: a frame the tap dropped is a gap in
        // time, not a clip played faster.
        "-use_wallclock_as_timestamps",
        "1",
        "-i",
        "pipe:0",
        "-map",
        "0:v:0",
        "-c:v",
        "libx264",
        "-preset",
        "ultrafast",
        "-tune",
        "zerolatency",
        "-bf",
        "0",
        "-g",
        &gop.to_string(),
        "-pix_fmt",
        "yuv420p",
        "-fps_mode",
        "passthrough",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // The tee's output options without its `-map 0:v:0 -c:v copy`: the stream is the
    // encoder's, mapped and coded above.
    args.extend(TEE_ARGS[4..].iter().map(|s| s.to_string()));
    Ok(args)
}

/// One ffmpeg encoder for frames of one format and size.
struct CpuEncoder {
    key: (Fourcc, u32, u32),
    child: Child,
    stdin: Option<std::process::ChildStdin>,
    tee: Option<Tee>,
}

impl CpuEncoder {
    fn start(record: &Recording, key: (Fourcc, u32, u32), fps: f64) -> anyhow::Result<CpuEncoder> {
        let args = encoder_args(key, fps)?;
        let (write, tee) = record.tee(Codec::H264, key.1, key.2)?;
        let (child, stdin) = Child::spawn_encoder("ffmpeg", &args, write)?;
        Ok(CpuEncoder { key, child, stdin: Some(stdin), tee: Some(tee) })
    }

    /// Writes one packed frame. Errors: the encoder stopped (with its last words).
    fn write(&mut self, packed: &[u8]) -> Result<(), String> {
        let r = self.stdin.as_mut().map_or(Ok(()), |s| s.write_all(packed));
        r.map_err(|e| {
            format!(
                "the encoder (ffmpeg) stopped: {e}; it said: {}",
                super::ffmpeg::last_line(&self.child.stderr_tail())
            )
        })
    }

    /// Closes the encoder's input and gives it [`FINISH_WAIT`] to write its last frames,
    /// then the reader of its stream ends.
    fn finish(mut self, camera: &str) {
        drop(self.stdin.take());
        let until = Instant::now() + FINISH_WAIT;
        loop {
            match self.child.try_wait() {
                Ok(Some(s)) if !s.success() => {
                    log::warn!(
                        "camera {camera}: the encoder (ffmpeg) ended with {s}: {}",
                        super::ffmpeg::last_line(&self.child.stderr_tail())
                    );
                    break;
                }
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() >= until => {
                    log::warn!("camera {camera}: the encoder (ffmpeg) did not finish in {FINISH_WAIT:?}: stopped");
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        drop(self.child);
        drop(self.tee.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_encoder_reads_packed_frames_and_writes_the_tee_s_mpeg_ts() {
        let a = encoder_args((Fourcc::YUYV, 640, 480), 25.0).unwrap();
        let s = a.join(" ");
        assert!(s.contains("-f rawvideo -pix_fmt yuyv422 -video_size 640x480 -framerate 25.000"), "{s}");
        assert!(s.contains("-map 0:v:0 -c:v libx264"), "{s}");
        assert!(s.contains("-g 50 -pix_fmt yuv420p"), "{s}");
        assert!(s.ends_with("-f mpegts -y pipe:3"), "{s}");
        assert_eq!(TEE_ARGS[..4], ["-map", "0:v:0", "-c:v", "copy"]);
        assert_eq!(a.iter().filter(|x| *x == "-c:v").count(), 1);
        // A rate that makes no sense encodes at 30; a fourcc without a raw format is named.
        assert!(encoder_args((Fourcc::NV12, 2, 2), f64::INFINITY).unwrap().join(" ").contains("-g 60 "));
        let e = encoder_args((Fourcc::MJPG, 2, 2), 30.0).unwrap_err().to_string();
        assert!(e.contains("MJPG frames cannot be encoded"), "{e}");
    }
}

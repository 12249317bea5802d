//! The camera's encoded stream for the run's recorder (`zcpipe stage record`), when its
//! camera is recorded (`CaptureConfig::record`).
//!
//! A compressed source (a `video:` file or a network stream in H.264 or H.265) is already
//! demuxed by the ffmpeg child that decodes it; that child also writes the stream's packets
//! untouched (`-map 0:v:0 -c:v copy -f mpegts pipe:3`, [`TEE_ARGS`]) to a pipe, its fd 3.
//! A thread of this process reads the pipe, cuts it into access units
//! ([`zcpipe_core::ts::TsSplitter`]), stamps each with its arrival (CLOCK_MONOTONIC, the
//! clock of the frames and so of the tracker's events) and queues it for the recorder
//! ([`zcpipe_core::packets::Sender`], bounded in bytes, dropping its oldest): the decoder
//! and the frame loop never wait for the recorder or its disk. No frame is decoded or
//! encoded for a clip.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::Context;

use zcpipe_core::packets::{Sender, SenderCounters, StreamHello, Unit, VERSION};
use zcpipe_core::ts::{Codec, TsSplitter};

/// The bytes of a camera's stream queued for the recorder at most (a few seconds of a
/// 1080p camera; the recorder's own pre-roll holds the rest).
pub const QUEUE_BYTES: usize = 32 << 20;

/// ffmpeg's second output: the first video stream's packets as they came, in MPEG-TS on fd
/// 3, written out packet by packet (no muxing delay, no buffering).
pub const TEE_ARGS: [&str; 14] = [
    "-map",
    "0:v:0",
    "-c:v",
    "copy",
    "-muxdelay",
    "0",
    "-muxpreload",
    "0",
    "-flush_packets",
    "1",
    "-f",
    "mpegts",
    "-y",
    "pipe:3",
];

/// A camera's link to the recorder: one per capture stage, for every stream it opens.
pub struct Recording {
    camera: String,
    sender: Arc<Sender>,
    /// A stream of a codec no clip holds was said.
    said_codec: std::sync::atomic::AtomicBool,
}

impl Recording {
    /// The link of camera `camera` to the recorder at `socket` (its thread connects, and
    /// connects again, by itself). Error: the thread cannot start.
    pub fn new(socket: PathBuf, camera: &str) -> anyhow::Result<Recording> {
        let sender = Sender::new(socket, QUEUE_BYTES).context("starting the recorder's sender thread")?;
        Ok(Recording { camera: camera.to_string(), sender: Arc::new(sender), said_codec: Default::default() })
    }

    /// A pipe for the ffmpeg child of a stream of `codec` at `width` x `height`: the end
    /// the child writes ([`super::ffmpeg::Child::spawn_teed`]) and the reader of the other
    /// end, which ends at the child's exit.
    pub fn tee(&self, codec: Codec, width: u32, height: u32) -> anyhow::Result<(OwnedFd, Tee)> {
        let (read, write) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).context("a pipe for the camera's encoded stream")?;
        let hello = self.hello(codec, width, height);
        let sender = self.sender.clone();
        let thread = std::thread::Builder::new()
            .name("record-tee".into())
            .spawn(move || read_units(std::fs::File::from(read), &sender, hello))
            .context("starting the reader of the camera's encoded stream")?;
        Ok((write, Tee { thread: Some(thread) }))
    }

    /// A stream this process encodes itself (MPP's encoder, [`super::encode`]): its hello
    /// and program `tables`; its units follow through [`Recording::unit`].
    pub(crate) fn announce(&self, codec: Codec, width: u32, height: u32, tables: Vec<u8>) {
        self.sender.stream(self.hello(codec, width, height), tables);
    }

    /// One access unit of the stream [`Recording::announce`] began.
    pub(crate) fn unit(&self, u: Unit) {
        self.sender.unit(u);
    }

    /// The hello of this camera's stream of `codec` at `width` x `height`.
    fn hello(&self, codec: Codec, width: u32, height: u32) -> StreamHello {
        StreamHello { version: VERSION, camera: self.camera.clone(), codec, width, height }
    }

    /// The camera's name for the recorder.
    pub fn camera(&self) -> &str {
        &self.camera
    }

    /// What was sent and dropped so far.
    pub fn counters(&self) -> SenderCounters {
        self.sender.counters()
    }
}

/// The pipe and its reader for a stream of camera `shown` that `probe` describes, when it
/// is recorded (`record`) and its codec goes into a clip as it is (H.264, H.265); a stream
/// of another codec is said once and not recorded.
pub(crate) fn tee_for(
    record: Option<&Recording>,
    shown: &str,
    probe: &super::ffmpeg::VideoProbe,
) -> anyhow::Result<Option<(OwnedFd, Tee)>> {
    let Some(r) = record else { return Ok(None) };
    match probe.codec {
        Some(c) => r.tee(c, probe.width, probe.height).map(Some),
        None => {
            if !r.said_codec.swap(true, std::sync::atomic::Ordering::Relaxed) {
                log::warn!("camera {shown}: its stream is neither H.264 nor H.265: it is not recorded (a clip holds the camera's own packets, never re-encoded ones)");
            }
            Ok(None)
        }
    }
}

/// The reader of one ffmpeg child's encoded stream; joined on drop (after the child ended,
/// which closes the pipe).
pub struct Tee {
    thread: Option<JoinHandle<()>>,
}

impl Drop for Tee {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads `pipe` to its end: the stream's tables announce it (`hello`), then each access
/// unit is queued with its arrival time.
fn read_units(mut pipe: std::fs::File, sender: &Sender, hello: StreamHello) {
    let mut ts = TsSplitter::new();
    let mut buf = vec![0u8; 64 << 10];
    let mut units = vec![];
    let mut announced = false;
    loop {
        let n = match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                log::warn!(
                    "camera {}: reading its encoded stream: {e}; the recording of this stream stops",
                    hello.camera
                );
                break;
            }
        };
        let now = zcpipe_core::frame::monotonic_ns();
        ts.push(&buf[..n], &mut units);
        for au in units.drain(..) {
            if !announced {
                let Some(tables) = ts.tables() else { continue };
                let codec = ts.codec().unwrap_or(hello.codec);
                sender.stream(StreamHello { codec, ..hello.clone() }, tables);
                announced = true;
            }
            sender.unit(Unit { bytes: au.bytes, mono_ns: now, pts: au.pts, key: au.key, gap: false });
        }
    }
    if let Some(au) = ts.finish().filter(|_| announced) {
        let now = zcpipe_core::frame::monotonic_ns();
        sender.unit(Unit { bytes: au.bytes, mono_ns: now, pts: au.pts, key: au.key, gap: false });
    }
    let c = ts.counters;
    if c.bad_packets + c.resync_bytes + c.oversized > 0 {
        log::warn!(
            "camera {}: its encoded stream had {} bad TS packets, {} bytes out of sync, {} access units too big to keep",
            hello.camera,
            c.bad_packets,
            c.resync_bytes,
            c.oversized
        );
    }
}

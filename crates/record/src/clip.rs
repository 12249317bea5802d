//! One clip being written: an ffmpeg child remuxes the camera's TS packets (`-c copy`) into
//! fragmented MP4, a fragment at each keyframe and at least every second
//! ([`FFMPEG_ARGS`]), so a file cut short plays up to its last whole fragment.
//!
//! The recorder's loop never waits for the disk: [`ClipWriter::unit`] hands a unit (shared
//! with the pre-roll, not copied) to the clip's own thread through a bounded queue
//! ([`QUEUE_UNITS`]); a unit that does not fit (ffmpeg or the disk too slow) is dropped,
//! counted, and so is everything up to the next keyframe (a picture whose references are
//! gone would only show garbage). The thread writes the stream's tables, then the units, to
//! ffmpeg's stdin; [`ClipWriter::finish`] closes it and waits for ffmpeg.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context;

use zcpipe_core::packets::Unit;

use crate::tail::Tail;

/// Units waiting for a clip's thread at most (tens of seconds of video).
pub const QUEUE_UNITS: usize = 1024;

/// How long [`ClipWriter::finish`] waits for ffmpeg to write the last fragment.
pub const FINISH_WAIT: Duration = Duration::from_secs(10);

/// ffmpeg's remux, the output path after: TS in on stdin, fragmented MP4 out, no decoding,
/// timestamps starting at 0.
pub const FFMPEG_ARGS: [&str; 22] = [
    "-hide_banner",
    "-nostats",
    "-loglevel",
    "error",
    "-f",
    "mpegts",
    "-i",
    "pipe:0",
    "-map",
    "0:v:0",
    "-c",
    "copy",
    "-avoid_negative_ts",
    "make_zero",
    "-movflags",
    "+frag_keyframe+empty_moov+default_base_moof",
    "-frag_duration",
    "1000000",
    "-f",
    "mp4",
    "-y",
    "-nostdin",
];

/// How a clip's writing ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// ffmpeg exited 0 after it read every unit.
    pub ok: bool,
    /// The disk (or the file system's quota) is full.
    pub disk_full: bool,
    /// ffmpeg's last words, for the log (empty when it said nothing).
    pub said: String,
}

/// A clip closed on a thread of its own (ffmpeg finishing the file must not hold the
/// recorder's loop): what the loop then writes into the index.
#[derive(Debug)]
pub struct Done {
    /// The camera.
    pub camera: String,
    /// Its row.
    pub id: i64,
    /// Its file, relative to the record folder.
    pub rel: String,
    /// Its start, Unix ms.
    pub start_ms: i64,
    /// Its first and last units' arrival, CLOCK_MONOTONIC ns.
    pub span_ns: (u64, u64),
    /// Units it dropped.
    pub dropped: u64,
    /// Its tracks, labels and zones.
    pub meta: zcpipe_clips::ClipMeta,
    /// An event clip or a continuous segment.
    pub kind: zcpipe_clips::Kind,
    /// An event clip's thumbnail: the second into the clip it shows (`None`: none made).
    pub thumb_at_s: Option<f64>,
    /// Why it was cut short, if it was.
    pub cut: Option<String>,
    /// How ffmpeg ended.
    pub outcome: Outcome,
    /// Its file's size.
    pub bytes: u64,
}

/// One clip being written (see the module's documentation).
pub struct ClipWriter {
    tx: Option<SyncSender<Arc<Unit>>>,
    thread: Option<JoinHandle<Outcome>>,
    /// Units dropped (the queue full).
    pub dropped: u64,
    /// Dropping until the next keyframe.
    skipping: bool,
    /// The units after the last point where the clip may end complete.
    tail: Tail,
    /// Units handed over.
    pub units: u64,
    /// The newest unit's arrival, CLOCK_MONOTONIC ns.
    pub last_ns: u64,
    /// The first unit's arrival.
    pub first_ns: u64,
    path: PathBuf,
}

impl ClipWriter {
    /// Starts writing `path` with the stream's `tables` (PAT and PMT) first, then the
    /// pre-roll's `units` (handed to the clip's thread whole, never through the bounded
    /// queue). Errors: ffmpeg cannot start (missing: the fix named).
    pub fn start(path: &Path, tables: Vec<u8>, units: Vec<Arc<Unit>>) -> anyhow::Result<ClipWriter> {
        let mut child = Command::new("ffmpeg")
            .args(FFMPEG_ARGS)
            .arg(path)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    anyhow::anyhow!("record: ffmpeg not found in PATH: install ffmpeg (apt-get install ffmpeg)")
                } else {
                    anyhow::anyhow!("record: cannot run ffmpeg: {e}")
                }
            })?;
        let (tx, rx) = sync_channel::<Arc<Unit>>(QUEUE_UNITS);
        let (first_ns, last_ns) = (units.first().map_or(0, |u| u.mono_ns), units.last().map_or(0, |u| u.mono_ns));
        // The pre-roll's last group may still wait for its B pictures: it stays in the tail.
        let mut held = Tail::default();
        let preroll: Vec<Arc<Unit>> = units.into_iter().flat_map(|u| held.push(u)).collect();
        let n = preroll.len() as u64;
        let mut stdin = child.stdin.take().context("ffmpeg's stdin")?;
        let tail = Arc::new(Mutex::new(Vec::new()));
        let drain = child.stderr.take().map(|mut err| {
            let tail = tail.clone();
            std::thread::spawn(move || {
                let mut chunk = [0u8; 1024];
                while let Ok(n) = err.read(&mut chunk) {
                    if n == 0 {
                        break;
                    }
                    let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
                    t.extend_from_slice(&chunk[..n]);
                    let excess = t.len().saturating_sub(4096);
                    t.drain(..excess);
                }
            })
        });
        let thread = std::thread::Builder::new()
            .name("record-clip".into())
            .spawn(move || {
                let wrote = stdin.write_all(&tables).is_ok()
                    && preroll.iter().all(|u| stdin.write_all(&u.bytes).is_ok())
                    && feed(&rx, &mut stdin);
                drop(stdin);
                drop(rx);
                let status = wait_for(&mut child, FINISH_WAIT);
                if let Some(d) = drain {
                    let _ = d.join();
                }
                let said = String::from_utf8_lossy(&tail.lock().unwrap_or_else(|p| p.into_inner())).trim().to_string();
                let disk_full = said.contains("No space left on device") || said.contains("Disk quota exceeded");
                Outcome { ok: wrote && status == Some(0), disk_full, said }
            })
            .context("starting a clip's thread")?;
        Ok(ClipWriter {
            tx: Some(tx),
            thread: Some(thread),
            dropped: 0,
            skipping: false,
            tail: held,
            units: n,
            last_ns,
            first_ns,
            path: path.to_path_buf(),
        })
    }

    /// Hands over the next unit (never waits). After a gap (units the capture stage
    /// dropped) the clip skips to the next keyframe, as after a unit of its own it dropped.
    /// A unit goes to ffmpeg once the pictures shown before it are all there ([`Tail`]).
    pub fn unit(&mut self, u: Arc<Unit>) {
        if self.first_ns == 0 {
            self.first_ns = u.mono_ns;
        }
        self.last_ns = u.mono_ns;
        if u.gap && !u.key {
            self.skip();
        }
        if self.skipping {
            if !u.key {
                self.dropped += 1;
                return;
            }
            self.skipping = false;
        }
        for w in self.tail.push(u) {
            self.send(w);
        }
    }

    /// Whether the clip, ended before `u`, ends with every picture it shows.
    pub fn boundary(&self, u: &Unit) -> bool {
        self.tail.boundary(u)
    }

    /// The clip ends here, before a unit that starts a new group: what is held goes in.
    pub fn seal(&mut self) {
        for w in self.tail.release() {
            self.send(w);
        }
    }

    fn send(&mut self, w: Arc<Unit>) {
        if self.skipping {
            self.dropped += 1;
            return;
        }
        let Some(tx) = &self.tx else { return };
        match tx.try_send(w) {
            Ok(()) => self.units += 1,
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.dropped += 1;
                self.skip();
            }
        }
    }

    /// Drops until the next keyframe, and what is held (it continued what was lost).
    fn skip(&mut self) {
        self.skipping = true;
        self.dropped += self.tail.clear();
    }

    /// Whether the clip's ffmpeg is gone already (it failed: the disk, the stream).
    pub fn failed(&self) -> bool {
        self.thread.as_ref().is_some_and(JoinHandle::is_finished)
    }

    /// Ends the clip: what was queued is written, ffmpeg finishes the file (within
    /// [`FINISH_WAIT`], else it is killed); returns how it went and the file's size.
    pub fn finish(mut self) -> (Outcome, u64) {
        // No unit after the held ones: they go in if no picture between is missing. The
        // thread is the closer's own: it may wait for room.
        if let Some(tx) = self.tx.take() {
            for w in self.tail.finish() {
                if self.skipping || tx.send(w).is_err() {
                    break;
                }
                self.units += 1;
            }
        }
        let outcome = self.thread.take().and_then(|t| t.join().ok()).unwrap_or(Outcome {
            ok: false,
            disk_full: false,
            said: "the clip's thread panicked".into(),
        });
        let bytes = std::fs::metadata(&self.path).map_or(0, |m| m.len());
        (outcome, bytes)
    }
}

/// Writes each unit from `rx` to ffmpeg until the writer hangs up; `false` if ffmpeg stopped
/// reading (it died: the disk, a stream it refused).
fn feed(rx: &Receiver<Arc<Unit>>, stdin: &mut impl Write) -> bool {
    while let Ok(u) = rx.recv() {
        if stdin.write_all(&u.bytes).is_err() {
            return false;
        }
    }
    true
}

/// `child`'s exit code within `wait` (killed after it); `None` if killed or by a signal.
fn wait_for(child: &mut std::process::Child, wait: Duration) -> Option<i32> {
    let t = std::time::Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(st)) => return st.code(),
            Ok(None) if t.elapsed() < wait => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// The width of a clip's thumbnail, pixels (its height keeps the picture's aspect).
pub const THUMB_WIDTH: u32 = 320;

/// How long making a thumbnail may take.
const THUMB_WAIT: Duration = Duration::from_secs(10);

/// A thumbnail of the finished clip `clip`: its picture `at_s` seconds in (the moment of the
/// event), [`THUMB_WIDTH`] wide, as `clip` with the extension `jpg` (the web view's
/// `/clips/<id>.jpg`). ffmpeg decodes from the keyframe before it: a few pictures, once per
/// clip, on the clip's closing thread. Errors: ffmpeg's last words.
pub fn thumbnail(clip: &Path, at_s: f64) -> Result<(), String> {
    let out = clip.with_extension("jpg");
    let mut child = Command::new("ffmpeg")
        .args(["-hide_banner", "-nostdin", "-loglevel", "error", "-ss", &format!("{:.3}", at_s.max(0.0)), "-i"])
        .arg(clip)
        .args(["-frames:v", "1", "-vf", &format!("scale={THUMB_WIDTH}:-2"), "-q:v", "5", "-y"])
        .arg(&out)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("ffmpeg: {e}"))?;
    match wait_for(&mut child, THUMB_WAIT) {
        Some(0) if out.exists() => Ok(()),
        code => {
            let _ = std::fs::remove_file(&out);
            Err(format!("ffmpeg made no thumbnail of {} (exit {code:?})", clip.display()))
        }
    }
}

/// Bytes free for this user on the file system of `dir` (statvfs(3)); `None` if unknown.
pub fn free_bytes(dir: &Path) -> Option<u64> {
    let st = nix::sys::statvfs::statvfs(dir).ok()?;
    Some(st.blocks_available() as u64 * st.fragment_size() as u64)
}

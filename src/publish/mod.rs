//! Publish stage: detections to any number of local clients as JSON lines on a Unix socket.
//!
//! Owns the detections socket and its clients. Sends never block the pipeline: a line that
//! does not fit in a client's socket buffer is skipped for that client and counted (a line
//! already half-sent is finished first, so the stream stays line-aligned), and a client
//! that has taken nothing for 5 s is disconnected. At the end every client gets a final
//! `{"end": true, ...}` line, then EOF.
//!
//! One line per frame (extra fields may follow in later versions):
//! `{"seq": u64, "timestamp_ns": u64, "width": u32, "height": u32,
//!   "latency_us": {"capture": f64, "scale": f64, "infer": f64, "publish": f64, "total": f64},
//!   "detections": [{"class_id": u32, "label": str, "score": f32, "box": [x1, y1, x2, y2]}]}`
//! with `timestamp_ns` the capture time (CLOCK_MONOTONIC) and boxes in source-frame pixels.

pub mod stage;
pub mod watch;

/// What the publish stage is asked to do (built by the command line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublishConfig {
    /// The detections socket to bind (`--publish`, else the instance's default:
    /// [`crate::core::config::default_detections_socket`]).
    pub socket: PathBuf,
    /// What to print on stdout per frame.
    pub print: PrintMode,
}

/// How publish prints frames on its stdout (`--print`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrintMode {
    /// Nothing on stdout.
    None,
    /// One readable line per frame.
    Human,
    /// The JSON lines clients get.
    Json,
}

impl crate::core::config::Choice for PrintMode {
    const ALL: &'static [(Self, &'static str, &'static str)] =
        &[(PrintMode::None, "none", "Nothing on stdout"), (PrintMode::Human, "human", "One readable line per frame"), (PrintMode::Json, "json", "The JSON lines clients get")];
}

use std::io::{ErrorKind, Read as _, Write as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytemuck::{Pod, Zeroable};
use serde::{Deserialize, Serialize};

use crate::core::frame::StageStamps;

/// Most detections carried per frame.
pub const MAX_DETECTIONS: usize = 100;

/// One detection in plain data: class, score, box in source-frame pixels.
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable, Default)]
#[repr(C)]
pub struct DetectionRecord {
    /// Class index into the label list.
    pub class_id: u32,
    /// Score in 0..1 (objectness x class probability for YOLOX).
    pub score: f32,
    /// `[x1, y1, x2, y2]` in source-frame pixels, clamped to the frame.
    pub bbox: [f32; 4],
}

/// A frame's detections: the ring slot from infer to publish (2,496 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct DetectionsDesc {
    /// Frame sequence number.
    pub seq: u64,
    /// Capture time, CLOCK_MONOTONIC ns.
    pub timestamp_ns: u64,
    /// Per-stage stamps carried from the frame.
    pub stamps: StageStamps,
    /// Source frame width in pixels.
    pub width: u32,
    /// Source frame height in pixels.
    pub height: u32,
    /// Valid entries of `dets`.
    pub count: u32,
    /// Reserved (0).
    pub flags: u32,
    /// Detections, best first.
    pub dets: [DetectionRecord; MAX_DETECTIONS],
}

impl Default for DetectionsDesc {
    fn default() -> Self {
        Zeroable::zeroed()
    }
}

impl DetectionsDesc {
    /// Checks a slot from the infer stage: count in range, finite scores in 0..=1, finite
    /// boxes inside the frame, plausible size.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.count as usize > MAX_DETECTIONS {
            return Err(format!("detection count {} > {MAX_DETECTIONS}", self.count));
        }
        if self.width == 0 || self.height == 0 || self.width > 16384 || self.height > 16384 {
            return Err(format!("frame size {}x{} out of range", self.width, self.height));
        }
        for d in &self.dets[..self.count as usize] {
            if !(0.0..=1.0).contains(&d.score) || d.bbox.iter().any(|v| !v.is_finite()) {
                return Err(format!("detection with score {} box {:?} is not valid", d.score, d.bbox));
            }
        }
        Ok(())
    }
}

/// One detection as published.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct DetectionJson {
    /// Class index.
    pub class_id: u32,
    /// Class label (`class_N` if the label list has no entry).
    pub label: String,
    /// Score in 0..1.
    pub score: f32,
    /// `[x1, y1, x2, y2]` in source-frame pixels.
    #[serde(rename = "box")]
    pub bbox: [f32; 4],
}

/// Per-stage and end-to-end latency of a frame, µs.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct LatencyJson {
    /// Capture: from the capture timestamp to the frame entering the ring.
    pub capture: f64,
    /// Scale, including its wait in the capture ring.
    pub scale: f64,
    /// Infer, including its wait in the scale ring.
    pub infer: f64,
    /// Publish, including its wait in the infer ring.
    pub publish: f64,
    /// Capture timestamp to published.
    pub total: f64,
}

/// One published line.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FrameJson {
    /// Frame sequence number.
    pub seq: u64,
    /// Capture time, CLOCK_MONOTONIC ns.
    pub timestamp_ns: u64,
    /// Source frame width, pixels.
    pub width: u32,
    /// Source frame height, pixels.
    pub height: u32,
    /// Latencies, µs.
    pub latency_us: LatencyJson,
    /// Detections, best first.
    pub detections: Vec<DetectionJson>,
}

struct Client {
    stream: UnixStream,
    pending: Vec<u8>,
    last_progress: Instant,
    starved_since: Option<Instant>,
    sent: u64,
    skipped: u64,
}

/// Counters of the detections server.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct ServerStats {
    /// Clients connected now.
    pub clients: usize,
    /// Clients accepted so far.
    pub accepted: u64,
    /// Clients disconnected for taking nothing for the timeout.
    pub disconnected_slow: u64,
    /// Lines skipped because a client's socket buffer was full (all clients).
    pub skipped: u64,
    /// Lines fully handed to clients (all clients).
    pub sent: u64,
}

/// The detections socket and its clients.
pub struct DetectionServer {
    listener: UnixListener,
    path: PathBuf,
    clients: Vec<Client>,
    stats: ServerStats,
    slow_timeout: Duration,
}

impl DetectionServer {
    /// Binds `path` (SOCK_STREAM). A stale socket file is replaced; a live one is an error.
    pub fn bind(path: &Path) -> Result<DetectionServer> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // Only zcpipe's own runtime directory is created; elsewhere a missing folder is
            // the user's typo, not something to create.
            if dir.starts_with(crate::core::config::runtime_base()) {
                std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            } else if !dir.is_dir() {
                bail!("--publish {}: folder {} does not exist", path.display(), dir.display());
            }
        }
        crate::core::link::remove_stale_socket(path, |p| UnixStream::connect(p).ok().map(|_| ()))
            .map_err(|e| anyhow::anyhow!("{e}, or pass another --publish path"))?;
        let listener = UnixListener::bind(path).with_context(|| format!("binding detections socket {}", path.display()))?;
        listener.set_nonblocking(true)?;
        Ok(DetectionServer { listener, path: path.to_path_buf(), clients: vec![], stats: ServerStats::default(), slow_timeout: Duration::from_secs(5) })
    }

    /// Changes the slow-client timeout (5 s by default).
    pub fn set_slow_timeout(&mut self, t: Duration) {
        self.slow_timeout = t;
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Accepts waiting clients and drops ones that hung up.
    pub fn service(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((s, _)) => {
                    if s.set_nonblocking(true).is_ok() {
                        log::info!("client {} connected", self.stats.accepted);
                        self.stats.accepted += 1;
                        self.clients.push(Client { stream: s, pending: vec![], last_progress: Instant::now(), starved_since: None, sent: 0, skipped: 0 });
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => {
                    log::warn!("accept on {}: {e}", self.path.display());
                    break;
                }
            }
        }
        let mut buf = [0u8; 256];
        self.clients.retain_mut(|c| loop {
            match c.stream.read(&mut buf) {
                Ok(0) => return false,
                Ok(_) => continue, // clients have nothing to say; discard
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(_) => return false,
            }
        });
        self.stats.clients = self.clients.len();
    }

    /// Sends one line (must end in `\n`) to every client without blocking.
    pub fn broadcast(&mut self, line: &[u8]) {
        let now = Instant::now();
        let timeout = self.slow_timeout;
        let stats = &mut self.stats;
        self.clients.retain_mut(|c| {
            // Finish a half-sent line first so the stream stays line-aligned.
            if !c.pending.is_empty() {
                match c.stream.write(&c.pending) {
                    Ok(n) => {
                        c.pending.drain(..n);
                        if n > 0 {
                            c.last_progress = now;
                        }
                        if c.pending.is_empty() {
                            c.sent += 1;
                            stats.sent += 1;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(_) => return false,
                }
            }
            if c.pending.is_empty() {
                match c.stream.write(line) {
                    Ok(n) if n == line.len() => {
                        c.sent += 1;
                        stats.sent += 1;
                        c.last_progress = now;
                        c.starved_since = None;
                        return true;
                    }
                    Ok(n) => {
                        c.pending.extend_from_slice(&line[n..]);
                        c.last_progress = now;
                        return true;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(_) => return false,
                }
            }
            c.skipped += 1;
            stats.skipped += 1;
            let since = *c.starved_since.get_or_insert(c.last_progress);
            if now.duration_since(since) > timeout && now.duration_since(c.last_progress) > timeout {
                log::warn!("client took nothing for {:?} ({} lines skipped): disconnecting it", timeout, c.skipped);
                stats.disconnected_slow += 1;
                return false;
            }
            true
        });
        self.stats.clients = self.clients.len();
    }

    /// Tells every client the stream ended (one final line) and closes them.
    pub fn close_all(&mut self, reason: &str, frames: u64) {
        let line = format!("{}\n", serde_json::json!({"end": true, "reason": reason, "frames": frames}));
        for c in &mut self.clients {
            let _ = c.stream.set_nonblocking(false);
            let _ = c.stream.set_write_timeout(Some(Duration::from_millis(200)));
            if !c.pending.is_empty() {
                let _ = c.stream.write_all(&c.pending);
            }
            let _ = c.stream.write_all(line.as_bytes());
            let _ = c.stream.shutdown(std::net::Shutdown::Both);
        }
        self.clients.clear();
        self.stats.clients = 0;
    }

    /// Counters.
    pub fn stats(&self) -> ServerStats {
        self.stats
    }
}

impl Drop for DetectionServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;

    #[test]
    fn detections_desc_is_plain_and_validated() {
        assert_eq!(std::mem::size_of::<DetectionsDesc>(), 2496);
        let mut d = DetectionsDesc { width: 640, height: 480, count: 1, ..Default::default() };
        d.dets[0] = DetectionRecord { class_id: 0, score: 0.9, bbox: [1.0, 2.0, 3.0, 4.0] };
        assert!(d.validate().is_ok());
        d.count = 101;
        assert!(d.validate().is_err());
        d.count = 1;
        d.dets[0].score = f32::NAN;
        assert!(d.validate().is_err());
    }

    #[test]
    fn slow_client_is_skipped_then_disconnected_fast_one_gets_all() {
        let dir = tempfile::tempdir().unwrap();
        let mut srv = DetectionServer::bind(&dir.path().join("d.sock")).unwrap();
        srv.set_slow_timeout(Duration::from_millis(300));
        let fast = UnixStream::connect(srv.path()).unwrap();
        let slow = UnixStream::connect(srv.path()).unwrap();
        srv.service();
        assert_eq!(srv.stats().clients, 2);
        let reader = std::thread::spawn(move || std::io::BufReader::new(fast).lines().map_while(|l| l.ok()).count());
        let line = format!("{}\n", "x".repeat(4000)); // the slow client fills its ~200 KB buffer in ~250 ms
        let start = Instant::now();
        let mut n = 0u64;
        while start.elapsed() < Duration::from_millis(1200) {
            srv.broadcast(line.as_bytes());
            n += 1;
            std::thread::sleep(Duration::from_millis(5));
        }
        let st = srv.stats();
        assert_eq!(st.disconnected_slow, 1, "{st:?}");
        assert!(st.skipped > 0);
        srv.close_all("test", n);
        let got = reader.join().unwrap() as u64;
        assert_eq!(got, n + 1, "the reading client got every line and the end line");
        drop(slow);
    }
}

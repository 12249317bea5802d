//! Pixels for the web view and snapshots: one tap ([`zcpipe_core::tap::TapClient`]) per
//! camera on its capture stage's pool, joined only while someone wants that camera's
//! pixels, and a frame converted to RGB24 (read through the read guard) at most
//! `max_fps` times a second. Each camera's newest converted frame is kept for readers.
//!
//! Costs, counted: while joined, a tap wakes this process once per captured frame (7-20 µs)
//! and reads nothing; a conversion reads one frame (3,110,400 bytes for 1080p NV12) and
//! writes `width * height * 3`. With nobody watching, the tap leaves after
//! [`IDLE_LEAVE`] and costs nothing.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use zcpipe_core::tap::{frame_to_rgb, TapClient};

/// How long a camera's tap stays joined after the last request for its pixels.
pub(crate) const IDLE_LEAVE: Duration = Duration::from_secs(10);

/// One camera's frame as RGB24, tight rows (`width * 3` bytes each).
#[derive(Clone, Debug)]
pub struct RgbFrame {
    /// The frame's capture sequence number.
    pub seq: u64,
    /// Its capture time, CLOCK_MONOTONIC ns.
    pub timestamp_ns: u64,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// The pixels, `width * height * 3` bytes.
    pub rgb: Arc<Vec<u8>>,
}

/// Counters of one camera's pixels, for the stage's report and `/api/stats`.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct PixelCounters {
    /// The tap is joined now.
    pub joined: bool,
    /// Times the tap joined.
    pub joins: u64,
    /// Frames the tap received (each a wake-up, no pixels read).
    pub(crate) frames_seen: u64,
    /// Frames converted to RGB24 (each a read of the frame through the read guard).
    pub frames_read: u64,
    /// Conversions that failed (an unsupported fourcc; said once in the log).
    pub errors: u64,
}

struct Slot {
    /// The capture stage's name (`capture@door`).
    upstream: String,
    latest: Mutex<Option<RgbFrame>>,
    /// Until when (ms since `epoch`) someone wants this camera's pixels.
    wanted_until_ms: AtomicU64,
    counters: Mutex<PixelCounters>,
}

/// The pixels of every camera of a run (see the module's documentation).
pub struct Pixels {
    epoch: Instant,
    /// One per camera, by camera index (a camera added while the stage runs gets the next).
    slots: RwLock<Vec<Arc<Slot>>>,
    stop: Arc<AtomicBool>,
    period: Duration,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Where a camera added while the stage runs has its capture stage's socket.
    data: Option<zcpipe_core::config::DataPath>,
}

impl Pixels {
    /// Starts one thread per camera: `cameras[i]` is (the capture stage's name for
    /// messages, its listening socket). `max_fps`: conversions per second per camera, at
    /// most (> 0).
    pub fn start(cameras: Vec<(String, PathBuf)>, max_fps: f64) -> Pixels {
        let p = Pixels {
            epoch: Instant::now(),
            slots: RwLock::default(),
            stop: Arc::new(AtomicBool::new(false)),
            period: Duration::from_secs_f64(1.0 / max_fps.max(0.01)),
            threads: Mutex::default(),
            data: None,
        };
        for (upstream, socket) in cameras {
            p.add(upstream, socket);
        }
        p
    }

    /// These pixels are those of the run on data path `data` (a camera added later is
    /// found there).
    pub fn for_run(mut self, data: zcpipe_core::config::DataPath) -> Pixels {
        self.data = Some(data);
        self
    }

    /// Camera `camera` joined the run (after the others): its tap, at its capture stage's
    /// socket. Once only: the web view and the snapshots share these pixels and both ask.
    pub fn add_camera(&self, camera: &str) {
        let Some(data) = &self.data else { return };
        let stage = zcpipe_core::id::StageId::camera(camera);
        let upstream = stage.to_string();
        if self.slots.read().unwrap_or_else(|p| p.into_inner()).iter().any(|s| s.upstream == upstream) {
            return;
        }
        self.add(upstream, data.socket(&stage));
    }

    /// Capture stage `camera`'s name (`capture@door`), for what a picture says.
    pub fn upstream(&self, camera: usize) -> Option<String> {
        self.slot(camera).map(|s| s.upstream.clone())
    }

    /// The next camera: `upstream` (its capture stage's name, for messages) listening at
    /// `socket`; its thread joins the tap when someone wants its pixels.
    fn add(&self, upstream: String, socket: PathBuf) {
        let slot = Arc::new(Slot {
            upstream: upstream.clone(),
            latest: Mutex::new(None),
            wanted_until_ms: AtomicU64::new(0),
            counters: Mutex::new(PixelCounters::default()),
        });
        self.slots.write().unwrap_or_else(|p| p.into_inner()).push(slot.clone());
        let (stop, epoch, period) = (self.stop.clone(), self.epoch, self.period);
        let name = upstream.clone();
        let t = std::thread::Builder::new()
            .name(format!("view-{upstream}"))
            .spawn(move || camera_loop(&upstream, socket, &slot, &stop, epoch, period));
        match t {
            Ok(t) => self.threads.lock().unwrap_or_else(|p| p.into_inner()).push(t),
            Err(e) => log::warn!("web view: no thread for the pixels of {name}: {e}"),
        }
    }

    fn slot(&self, camera: usize) -> Option<Arc<Slot>> {
        self.slots.read().unwrap_or_else(|p| p.into_inner()).get(camera).cloned()
    }

    /// Someone wants camera `camera`'s pixels (a view or a snapshot): its tap joins if it
    /// is not joined, and stays for [`IDLE_LEAVE`] after the last call.
    pub fn want(&self, camera: usize) {
        if let Some(s) = self.slot(camera) {
            let until = (self.epoch.elapsed() + IDLE_LEAVE).as_millis() as u64;
            s.wanted_until_ms.fetch_max(until, Ordering::Relaxed);
        }
    }

    /// Camera `camera`'s newest converted frame, if one is newer than `newer_than` (a
    /// sequence number; `None`: any).
    pub fn latest(&self, camera: usize, newer_than: Option<u64>) -> Option<RgbFrame> {
        let s = self.slot(camera)?;
        let f = s.latest.lock().unwrap_or_else(|p| p.into_inner()).clone()?;
        (newer_than.is_none_or(|n| f.seq > n)).then_some(f)
    }

    /// Counters of camera `camera`.
    pub fn counters(&self, camera: usize) -> PixelCounters {
        self.slot(camera).map(|s| *s.counters.lock().unwrap_or_else(|p| p.into_inner())).unwrap_or_default()
    }

    /// Stops the threads (each within its 200 ms wait).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.get_mut().unwrap_or_else(|p| p.into_inner()).drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Pixels {
    fn drop(&mut self) {
        self.stop();
    }
}

fn camera_loop(upstream: &str, socket: PathBuf, slot: &Slot, stop: &AtomicBool, epoch: Instant, period: Duration) {
    let mut tap: Option<TapClient> = None;
    let mut last_read: Option<Instant> = None;
    let mut rgb = Vec::new();
    let mut said_error = false;
    while !stop.load(Ordering::Relaxed) {
        let wanted = slot.wanted_until_ms.load(Ordering::Relaxed) > epoch.elapsed().as_millis() as u64;
        if !wanted {
            if let Some(t) = tap.take() {
                log::debug!(
                    "web view: nobody watches {upstream}; its tap leaves ({} frames seen)",
                    t.counters().frames
                );
                slot.counters.lock().unwrap_or_else(|p| p.into_inner()).joined = false;
            }
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        let t = tap.get_or_insert_with(|| TapClient::new(socket.clone(), "view", upstream));
        let got = t.next(Duration::from_millis(200));
        let tc = t.counters();
        {
            let mut c = slot.counters.lock().unwrap_or_else(|p| p.into_inner());
            c.joined = tc.joined;
            c.joins = c.joins.max(tc.joins);
        }
        let frame = match got {
            Ok(Some(f)) => f,
            Ok(None) => continue,
            Err(e) => {
                log::warn!("web view: {e:#}");
                continue;
            }
        };
        slot.counters.lock().unwrap_or_else(|p| p.into_inner()).frames_seen += 1;
        if last_read.is_some_and(|t| t.elapsed() < period) {
            // Not due: the frame goes back unread.
            continue;
        }
        last_read = Some(Instant::now());
        let d = *frame.desc();
        let converted = frame_to_rgb(&frame, &mut rgb);
        // The buffer goes home before anything else is done with the pixels.
        drop(frame);
        match converted {
            Ok((w, h)) => {
                let f = RgbFrame {
                    seq: d.seq,
                    timestamp_ns: d.timestamp_ns,
                    width: w,
                    height: h,
                    rgb: Arc::new(std::mem::take(&mut rgb)),
                };
                *slot.latest.lock().unwrap_or_else(|p| p.into_inner()) = Some(f);
                slot.counters.lock().unwrap_or_else(|p| p.into_inner()).frames_read += 1;
            }
            Err(e) => {
                slot.counters.lock().unwrap_or_else(|p| p.into_inner()).errors += 1;
                if !said_error {
                    log::warn!("web view: {upstream}'s frames cannot be shown: {e:#}");
                    said_error = true;
                }
            }
        }
    }
}

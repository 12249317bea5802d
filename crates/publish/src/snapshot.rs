//! Snapshots: JPEG pictures of a camera with its detections drawn, written to a folder
//! every `--snapshot-every` seconds and on each new tracked object (the tracker's `new`
//! events), keeping the newest `--snapshot-keep` per camera.
//!
//! An [`Output`] of the publish stage: [`Output::line`] only notes the camera's latest
//! frame line and queues a request (bounded: a request beyond [`QUEUE`] is dropped and
//! counted); the pictures are taken on the output's own thread, from the pixels of the
//! camera's tap ([`super::pixels::Pixels`], the same the web view uses), drawn with the web
//! view's drawing ([`super::http::draw`]) and encoded as JPEG. A disk that is full or a
//! folder that cannot be written is a warning (the first, then every 100th) and a count;
//! the pipeline never waits for the disk.
//!
//! With MQTT on, each picture is also the camera's latest snapshot for Home Assistant (an
//! `image` entity; [`super::output::PictureSink`]), whether the disk took it or not, and a
//! picture of a new object is announced on the camera's events topic with a stable id.
//!
//! Files: `DIR/CAMERA/UNIX_MS-WHY.jpg` (`WHY`: `every`, or `new-LABEL-ID`), written to a
//! temporary name and renamed, so a reader never sees half a file. File names sort by time.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

use super::http::{draw, render};
use super::output::{NewObject, Output, Picture};
use super::pixels::Pixels;
use super::schema::{EndJson, FrameJson, SocketLine};

/// Requests waiting for the snapshot thread, at most; more are dropped (counted).
pub(crate) const QUEUE: usize = 16;

/// How long a snapshot waits for its camera's pixels (a tap joining, a frame converted)
/// before it is written without them is not done: it is skipped and counted.
pub(crate) const PIXEL_WAIT: Duration = Duration::from_secs(2);

/// What `--snapshot-dir`, `--snapshot-every`, `--snapshot-keep` and `--snapshot-on` ask.
#[derive(Clone, Debug, PartialEq)]
pub struct SnapshotConfig {
    /// The folder (created if missing, with its camera subfolders).
    pub dir: PathBuf,
    /// A picture of each camera this often (`None`: only on events).
    pub every: Option<Duration>,
    /// A picture on each tracker `new` event (a new object).
    pub on_new: bool,
    /// Pictures kept per camera; the oldest are removed (1 to 100000).
    pub keep: usize,
}

/// Counters, for the stage's report.
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct SnapshotCounters {
    /// Pictures written.
    pub written: u64,
    /// Requests skipped because no pixels came within [`PIXEL_WAIT`].
    pub no_pixels: u64,
    /// Requests dropped because [`QUEUE`] were waiting.
    pub dropped: u64,
    /// Writes that failed (a full disk, a folder that cannot be written).
    pub failed: u64,
    /// Old pictures removed to keep `--snapshot-keep`.
    pub removed: u64,
}

impl SnapshotCounters {
    /// Its line of the end-of-run summary: none (the pictures are the output's account).
    pub fn summary_line(&self) -> Option<String> {
        None
    }
}

struct Request {
    camera: usize,
    /// The camera's name (its folder).
    name: String,
    /// The new object it is for (`None`: one of `--snapshot-every`).
    new: Option<NewObject>,
}

impl Request {
    /// Why it was taken, as its file name says: `every`, or `new-LABEL-ID`.
    fn why(&self) -> String {
        self.new.as_ref().map_or_else(|| "every".into(), |n| format!("new-{}-{}", n.label, n.track_id))
    }
}

/// The snapshot output (see the module's documentation).
pub struct Snapshots {
    cameras: Vec<String>,
    every: Option<Duration>,
    on_new: bool,
    last: Vec<Option<Instant>>,
    latest: Arc<Mutex<Vec<Option<FrameJson>>>>,
    tx: Option<SyncSender<Request>>,
    counters: Arc<Mutex<SnapshotCounters>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// What the worker draws under the boxes, shared with it.
    shapes: draw::LiveShapes,
    /// The pixels the worker reads (a camera added joins them).
    pixels: Arc<Pixels>,
    /// `--snapshot-dir`.
    dir: PathBuf,
}

impl Snapshots {
    /// Starts the output for `cameras` (the run's names, in order) with pixels from
    /// `pixels`. Errors: the folder cannot be created (named, with the fix).
    pub fn start(
        cfg: &SnapshotConfig,
        cameras: &[String],
        shapes: draw::LiveShapes,
        pixels: Arc<Pixels>,
        sink: Option<super::output::PictureSink>,
    ) -> Result<Snapshots> {
        for c in cameras {
            let d = cfg.dir.join(c);
            std::fs::create_dir_all(&d).with_context(|| {
                format!("--snapshot-dir: cannot create {}: pick a folder this user can write", d.display())
            })?;
        }
        let (tx, rx) = sync_channel(QUEUE);
        let latest = Arc::new(Mutex::new(vec![None; cameras.len()]));
        let counters = Arc::new(Mutex::new(SnapshotCounters::default()));
        let (l, c, px) = (latest.clone(), counters.clone(), pixels.clone());
        let place = Place { dir: cfg.dir.clone(), keep: cfg.keep, shapes: shapes.clone(), sink };
        let thread = std::thread::Builder::new()
            .name("snapshots".into())
            .spawn(move || worker(rx, &place, &px, &l, &c))
            .context("starting the snapshot thread")?;
        log::info!(
            "snapshots in {}: {}{}, newest {} per camera",
            cfg.dir.display(),
            cfg.every.map_or_else(String::new, |e| format!("every {:.1} s", e.as_secs_f64())),
            if cfg.on_new {
                if cfg.every.is_some() {
                    " and on each new object"
                } else {
                    "on each new object"
                }
            } else {
                ""
            },
            cfg.keep
        );
        Ok(Snapshots {
            cameras: cameras.to_vec(),
            every: cfg.every,
            on_new: cfg.on_new,
            last: vec![None; cameras.len()],
            latest,
            tx: Some(tx),
            counters,
            thread: Some(thread),
            shapes,
            pixels,
            dir: cfg.dir.clone(),
        })
    }

    fn request(&mut self, camera: usize, new: Option<NewObject>) {
        let Some(tx) = &self.tx else { return };
        let name = self.cameras[camera].clone();
        match tx.try_send(Request { camera, name, new }) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.counters.lock().unwrap_or_else(|p| p.into_inner()).dropped += 1
            }
        }
    }
}

impl Output for Snapshots {
    fn name(&self) -> &'static str {
        "snapshots"
    }

    fn shapes(&mut self, shapes: &[draw::Shapes]) {
        *self.shapes.write().unwrap_or_else(|p| p.into_inner()) = shapes.to_vec();
    }

    fn camera_added(&mut self, camera: &str) {
        let d = self.dir.join(camera);
        if let Err(e) = std::fs::create_dir_all(&d) {
            log::warn!("snapshots of camera {camera}: cannot create {}: {e}; it gets none", d.display());
        }
        self.pixels.add_camera(camera);
        self.cameras.push(camera.to_string());
        self.last.push(None);
        self.latest.lock().unwrap_or_else(|p| p.into_inner()).push(None);
    }

    fn line(&mut self, line: &SocketLine) {
        match line {
            SocketLine::Frame(f) => {
                let Some(cam) =
                    self.cameras.iter().position(|c| *c == f.camera).or((self.cameras.len() == 1).then_some(0))
                else {
                    return;
                };
                self.latest.lock().unwrap_or_else(|p| p.into_inner())[cam] = Some(f.clone());
            }
            SocketLine::Event(e) if self.on_new && e.event == "new" => {
                if let Some(cam) =
                    self.cameras.iter().position(|c| *c == e.camera).or((self.cameras.len() == 1).then_some(0))
                {
                    // Its time as the MQTT bridge gives the event (the same stamp reads the
                    // same), so the picture's notice names the event's id.
                    let time_ms = crate::mqtt::wall_ms(e.timestamp_ns);
                    self.request(cam, Some(NewObject { track_id: e.track_id, label: e.label.clone(), time_ms }));
                }
            }
            _ => {}
        }
    }

    fn tick(&mut self) {
        let Some(every) = self.every else { return };
        let have: Vec<bool> =
            self.latest.lock().unwrap_or_else(|p| p.into_inner()).iter().map(Option::is_some).collect();
        for (cam, &sent) in have.iter().enumerate() {
            // Only cameras that sent a frame: a camera that is away gets no pictures.
            if sent && self.last[cam].is_none_or(|t| t.elapsed() >= every) {
                self.last[cam] = Some(Instant::now());
                self.request(cam, None);
            }
        }
    }

    fn report(&self) -> crate::report::OutputReport {
        crate::report::OutputReport::Snapshots(*self.counters.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn close(&mut self, _end: &EndJson) {
        // The requests queued are taken (each within PIXEL_WAIT), then the thread ends.
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn unix_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis())
}

/// Where the worker writes, and what it draws besides the boxes.
struct Place {
    /// `--snapshot-dir`: a folder per camera in it.
    dir: PathBuf,
    /// `--snapshot-keep`.
    keep: usize,
    /// Each camera's masks, zones and lines, drawn on its snapshots.
    shapes: draw::LiveShapes,
    /// Who else gets each picture (the MQTT bridge), written to disk or not.
    sink: Option<super::output::PictureSink>,
}

fn worker(
    rx: Receiver<Request>,
    place: &Place,
    pixels: &Pixels,
    latest: &Mutex<Vec<Option<FrameJson>>>,
    counters: &Mutex<SnapshotCounters>,
) {
    let count = |f: &dyn Fn(&mut SnapshotCounters)| f(&mut counters.lock().unwrap_or_else(|p| p.into_inner()));
    // The kind of the last failed write's error.
    let mut last_kind = None;
    while let Ok(req) = rx.recv() {
        let cam = req.camera;
        // Pixels newer than the request: the tap joins if nobody watches this camera.
        let since = latest.lock().unwrap_or_else(|p| p.into_inner())[cam].as_ref().map(|f| f.seq);
        let t0 = Instant::now();
        let frame = loop {
            pixels.want(cam);
            if let Some(f) = pixels.latest(cam, since.map(|s| s.saturating_sub(1))) {
                break Some(f);
            }
            if t0.elapsed() > PIXEL_WAIT {
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let Some(px) = frame else {
            count(&|c| c.no_pixels += 1);
            log::debug!("snapshot of {}: no pixels within {PIXEL_WAIT:?}", req.name);
            continue;
        };
        let mut rgb = (*px.rgb).clone();
        let f = latest.lock().unwrap_or_else(|p| p.into_inner())[cam].clone();
        let mut canvas = draw::Canvas::rgb24(&mut rgb, px.width, px.height);
        if let Some(s) = place.shapes.read().unwrap_or_else(|p| p.into_inner()).get(cam) {
            draw::shapes(&mut canvas, s, f.as_ref());
        }
        if let Some(f) = f {
            draw::detections(&mut canvas, &f);
        }
        let written = render::jpeg(&rgb, px.width, px.height).and_then(|jpeg| {
            let folder = place.dir.join(&req.name);
            let name = format!("{:013}-{}.jpg", unix_ms(), req.why());
            let tmp = folder.join(format!(".{name}.tmp"));
            let res = std::fs::write(&tmp, &jpeg).and_then(|()| std::fs::rename(&tmp, folder.join(&name)));
            if res.is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
            // Handed on whether the disk took it or not.
            if let Some(sink) = &place.sink {
                let file = res.is_ok().then_some(name.as_str());
                sink(&Picture { camera: &req.name, jpeg: &jpeg, of_new: req.new.as_ref(), file });
            }
            res.with_context(|| format!("writing snapshot {}", folder.join(&name).display()))
        });
        match written {
            Ok(()) => {
                last_kind = None;
                count(&|c| c.written += 1);
                let removed = prune(&place.dir.join(&req.name), place.keep);
                count(&|c| c.removed += removed);
            }
            Err(e) => {
                let failed = {
                    let mut c = counters.lock().unwrap_or_else(|p| p.into_inner());
                    c.failed += 1;
                    c.failed
                };
                // A new kind of failure (a full disk, then one made read-only) is said too.
                let kind = e.downcast_ref::<std::io::Error>().map(std::io::Error::kind);
                let new_kind = std::mem::replace(&mut last_kind, kind) != kind;
                if failed == 1 || new_kind || failed.is_multiple_of(100) {
                    log::warn!("{e:#} ({failed} failed so far; the pipeline goes on without snapshots until the folder can be written again: free space, or check the folder and its mount)");
                }
            }
        }
    }
}

/// Whether `name` is a snapshot's file name: 13 digits (Unix ms), `-`, then `every.jpg` or
/// `new-...jpg`. Nothing else in the folder is counted or removed.
fn is_snapshot_name(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() > 14
        && b[..13].iter().all(u8::is_ascii_digit)
        && b[13] == b'-'
        && name.ends_with(".jpg")
        && (name[14..] == *"every.jpg" || name[14..].starts_with("new-"))
}

/// Removes the oldest snapshots ([`is_snapshot_name`]) of `folder` beyond the newest `keep`
/// (names sort by time); any other file is left alone. Returns how many were removed.
fn prune(folder: &Path, keep: usize) -> u64 {
    let Ok(rd) = std::fs::read_dir(folder) else { return 0 };
    let mut names: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| is_snapshot_name(&n.to_string_lossy())))
        .collect();
    if names.len() <= keep {
        return 0;
    }
    names.sort();
    let extra = names.len() - keep;
    names.into_iter().take(extra).filter(|p| std::fs::remove_file(p).is_ok()).count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prune_keeps_the_newest_by_name() {
        let d = tempfile::tempdir().unwrap();
        for ms in [3, 1, 2, 5, 4] {
            std::fs::write(d.path().join(format!("{ms:013}-every.jpg")), b"x").unwrap();
        }
        std::fs::write(d.path().join("notes.txt"), b"x").unwrap();
        // The user's own pictures are neither counted nor removed.
        std::fs::write(d.path().join("0001-holiday.jpg"), b"x").unwrap();
        std::fs::write(d.path().join("zzz-mine.jpg"), b"x").unwrap();
        std::fs::write(d.path().join("0000000000000-new-person-1.jpg"), b"x").unwrap();
        assert_eq!(prune(d.path(), 2), 4);
        let mut left: Vec<String> = std::fs::read_dir(d.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            ["0000000000004-every.jpg", "0000000000005-every.jpg", "0001-holiday.jpg", "notes.txt", "zzz-mine.jpg"]
        );
        assert_eq!(prune(d.path(), 2), 0);
    }
}

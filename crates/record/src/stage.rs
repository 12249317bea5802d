//! The record stage process (module docs of [`super`]): its inputs come from threads
//! ([`super::inputs`]); its loop keeps each camera's pre-roll, follows the tracker's events,
//! opens and closes clips, and keeps the index and the disk in step.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zcpipe_core::metrics::{open_fd_count, Facts, StageReport};
use zcpipe_core::packets::{Message, StreamHello, Unit};
use zcpipe_core::stage::{Drained, StageCtx, Turn, IDLE_WAIT};

use super::clip::{free_bytes, ClipWriter, Done};
use super::index::{
    file_name, unix_ms, CameraStats, ClipMeta, Closed, Index, Kind, NewClip, Scope, State as ClipState,
};
use super::inputs::{self, InFlight, Input};
use super::plan::{Action, Filters, Planner};
use super::preroll::PreRoll;
use super::report::{CameraRecord, RecordFacts, RecordReport};
use super::RecordConfig;

mod segments;

/// Below this many free bytes no clip starts (and recording pauses as for a full disk).
pub const MIN_FREE: u64 = 256 << 10;
/// A file of this size (`DIR/.reserve`) holds room for the index: removed when the disk
/// fills, so the clip cut short is still marked in the index; made again when recording
/// resumes.
pub const RESERVE: u64 = 256 << 10;
const RESERVE_FILE: &str = ".reserve";
/// How often a paused recorder looks for room again.
const ROOM_CHECK: Duration = Duration::from_secs(2);
/// How often retention runs besides after each clip.
const RETAIN_EVERY: Duration = Duration::from_secs(60);
/// How often each camera's counters go into the index (when they changed).
const STATS_EVERY: Duration = Duration::from_secs(5);
/// The longest clip: a clip whose objects stay in view longer (a parked car) goes on in a
/// new file.
pub const MAX_CLIP: Duration = Duration::from_secs(30 * 60);
/// A clip due to end closes this long after its end even when no more units came (a camera
/// gone quiet), so it never stays open.
const LATE: Duration = Duration::from_secs(1);
/// How long the end waits for the clips being closed.
const CLOSE_WAIT: Duration = Duration::from_secs(20);
/// How long after the detections' end line the recorder waits for the cameras' last units.
const END_WAIT: Duration = Duration::from_secs(10);

struct OpenClip {
    writer: ClipWriter,
    id: i64,
    rel: String,
    start_ms: i64,
    kind: Kind,
    /// An event clip: when its first event happened (its thumbnail's moment), CLOCK_MONOTONIC ns.
    event_ns: Option<u64>,
}

struct Camera {
    name: String,
    conn: Option<u64>,
    hello: Option<StreamHello>,
    tables: Option<Vec<u8>>,
    preroll: PreRoll,
    planner: Planner,
    clip: Option<OpenClip>,
    /// The continuous recording's segment being written (`--record-continuous`).
    segment: Option<OpenClip>,
    /// A clip asked for (its start) waiting for the stream's first keyframe.
    pending: Option<u64>,
    facts: CameraRecord,
}

struct State {
    cfg: RecordConfig,
    index: Index,
    cameras: BTreeMap<String, Camera>,
    conns: HashMap<u64, String>,
    rx: Receiver<Input>,
    /// For the closer threads to post their clips' ends.
    tx: SyncSender<Input>,
    /// The bytes of packet messages the readers sent and the loop has not taken.
    inflight: InFlight,
    /// Clips being closed on their threads.
    closing: usize,
    stop: Arc<AtomicBool>,
    report: RecordReport,
    /// Recording stopped (the disk full) since; looked at every [`ROOM_CHECK`].
    paused: Option<Instant>,
    last_retain: Instant,
    /// When each camera's counters were last written to the index, and what they were.
    last_stats: (Instant, Vec<CameraStats>),
    /// The detections socket's end line came: the run ends once every camera's stream has
    /// ended too (its last units are still on their way), or after [`END_WAIT`].
    ended: Option<Instant>,
    start: Instant,
}

/// Runs the record stage until the detections socket's end line, the stop flag, or an
/// error of set-up (one line: the folder cannot be written, the socket is taken).
pub fn run(cfg: RecordConfig, ctx: StageCtx) -> zcpipe_core::Result<i32> {
    let start = Instant::now();
    std::fs::create_dir_all(&cfg.dir).map_err(|e| {
        anyhow::anyhow!(
            "--record-dir {}: cannot create it ({}): pick a folder this user can write",
            cfg.dir.display(),
            e
        )
    })?;
    if !cfg.dir.is_dir() {
        return Err(
            anyhow::anyhow!("--record-dir {}: exists and is not a folder; pick a folder", cfg.dir.display()).into()
        );
    }
    let (index, opened) = Index::open(&cfg.dir)
        .map_err(|e| anyhow::anyhow!("--record-dir {}: {e:#}; pick a folder this user can write", cfg.dir.display()))?;
    if opened.found > 0 {
        log::warn!(
            "record: the index of {} was missing: {} clips found in the folder are indexed again (incomplete: their times are their files' names)",
            cfg.dir.display(),
            opened.found
        );
    }
    if opened.interrupted > 0 {
        log::info!(
            "record: {} clips a recorder that stopped left unfinished are marked incomplete (their files play up to their last fragment)",
            opened.interrupted
        );
    }
    let (tx, rx) = std::sync::mpsc::sync_channel(inputs::CHANNEL);
    let stop = Arc::new(AtomicBool::new(false));
    let socket = zcpipe_core::packets::socket_path(&ctx.data.run_dir);
    let inflight = InFlight::default();
    inputs::listen(&socket, tx.clone(), stop.clone(), inflight.clone())?;
    inputs::events(cfg.detections.clone(), tx.clone(), stop.clone()).map_err(anyhow::Error::from)?;
    let filters = Filters { labels: cfg.labels.clone(), zones: cfg.zones.clone() };
    for (camera, r) in &cfg.cameras {
        log::info!("record: camera {camera}: rules of its own: {}", serde_json::to_string(r).unwrap_or_default());
    }
    log::info!(
        "record: clips of tracked objects into {} ({} s before, {} s after{}{}); cameras send their streams to {}",
        cfg.dir.display(),
        cfg.pre.as_secs_f64(),
        cfg.post.as_secs_f64(),
        filters.labels.as_ref().map_or(String::new(), |l| format!(", labels {}", join(l))),
        filters.zones.as_ref().map_or(String::new(), |z| format!(", zones {}", join(z))),
        socket.display()
    );
    let fds_setup = open_fd_count();
    ctx.ready(start);
    let report = RecordReport { dir: cfg.dir.display().to_string(), ..Default::default() };
    let mut st = State {
        cfg,
        index,
        cameras: BTreeMap::new(),
        conns: HashMap::new(),
        rx,
        tx,
        inflight,
        closing: 0,
        stop,
        report,
        paused: None,
        last_retain: Instant::now(),
        last_stats: (Instant::now(), vec![]),
        ended: None,
        start,
    };
    st.retain();
    st.reserve(true);
    let ended = ctx.run_loop(&mut st, |st| ctx.reporter.send(&st.stage_report(&ctx, false, vec![])), |st| st.turn());
    st.write_stats();
    let what = format!("{} clips", st.report.clips);
    ctx.close(
        &mut st,
        ended,
        what,
        fds_setup,
        |st, _| st.drain(),
        |st, extras| ctx.reporter.send(&st.stage_report(&ctx, true, extras)),
    )
}

fn join(s: &std::collections::BTreeSet<String>) -> String {
    s.iter().cloned().collect::<Vec<_>>().join(",")
}

/// The Unix time (ms) of CLOCK_MONOTONIC time `mono_ns`.
fn wall_ms(mono_ns: u64) -> i64 {
    let age_ns = zcpipe_core::frame::monotonic_ns().saturating_sub(mono_ns);
    unix_ms() - (age_ns / 1_000_000) as i64
}

impl State {
    /// Writes each camera's counters into the index when they changed (the publish stage
    /// shows them in `/metrics`); a failure (a full disk) is only logged at debug level: the
    /// next write says the same.
    fn write_stats(&mut self) {
        let now: Vec<CameraStats> = self
            .cameras
            .values()
            .map(|c| CameraStats {
                camera: c.name.clone(),
                units: c.facts.units,
                gaps: c.facts.gaps,
                drops: c.facts.clip_drops,
            })
            .collect();
        if now != self.last_stats.1 {
            if let Err(e) = self.index.put_camera_stats(&now) {
                log::debug!("record: writing the cameras' counters into the index: {e:#}");
            }
        }
        self.last_stats = (Instant::now(), now);
    }

    fn turn(&mut self) -> zcpipe_core::Result<Turn> {
        match self.rx.recv_timeout(IDLE_WAIT) {
            Ok(i) => {
                self.input(i);
                // What else is waiting, without waiting (bounded, so the loop reports).
                for _ in 0..1024 {
                    match self.rx.try_recv() {
                        Ok(i) => self.input(i),
                        Err(_) => break,
                    }
                }
            }
            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {}
        }
        self.check_writers();
        self.check_ends();
        self.check_segments(zcpipe_core::frame::monotonic_ns());
        if self.paused.is_some_and(|p| p.elapsed() >= ROOM_CHECK) {
            self.look_for_room();
        }
        if self.last_retain.elapsed() >= RETAIN_EVERY {
            self.retain();
        }
        if self.last_stats.0.elapsed() >= STATS_EVERY {
            self.write_stats();
        }
        // The end line comes before the cameras' last units do: those still on their way
        // end their clips.
        let streaming = self.cameras.values().any(|c| c.conn.is_some());
        Ok(match self.ended {
            Some(t) if !streaming || t.elapsed() >= END_WAIT => Turn::End("end of stream"),
            _ => Turn::Next,
        })
    }

    fn camera(&mut self, name: &str) -> &mut Camera {
        let cfg = &self.cfg;
        // The camera's rules are looked up once, when it first shows up (this runs per unit).
        self.cameras.entry(name.to_string()).or_insert_with(|| Camera {
            name: name.to_string(),
            conn: None,
            hello: None,
            tables: None,
            preroll: PreRoll::new(cfg.buffer_bytes),
            planner: {
                let (pre, post) = cfg.pre_post(name);
                Planner::new(pre, post)
            },
            clip: None,
            segment: None,
            pending: None,
            facts: CameraRecord::default(),
        })
    }

    fn input(&mut self, i: Input) {
        match i {
            Input::Packet(conn, m) => {
                self.inflight.done(inputs::size(&m));
                if let Message::Hello(h) = m {
                    return self.hello(conn, h);
                }
                // Only the camera's current stream: a connection a newer one replaced may
                // still have messages on their way.
                let Some(name) = self.conns.get(&conn).cloned().filter(|n| self.cameras[n].conn == Some(conn)) else {
                    return;
                };
                match m {
                    Message::Tables(t) => self.camera(&name).tables = Some(t),
                    Message::Unit(u) => self.unit(&name, u),
                    Message::Hello(_) => {}
                }
            }
            Input::Closed(done) => self.closed(*done),
            Input::Gone(conn, why) => {
                let Some(name) = self.conns.remove(&conn) else { return };
                let cam = self.camera(&name);
                if cam.conn == Some(conn) {
                    cam.conn = None;
                    cam.facts.connected = false;
                    log::info!("record: camera {name}: its stream ended ({why})");
                    if cam.clip.is_some() {
                        self.close(&name, None);
                    }
                    self.close_segment(&name, None);
                }
            }
            Input::Event(e) => {
                self.report.events += 1;
                let name = e.camera.clone();
                let filters = self.cfg.filters(&name);
                let action = self.camera(&name).planner.event(&e, &filters);
                if let Some(Action::Open { from_ns }) = action {
                    self.open(&name, from_ns);
                }
            }
            Input::End => self.ended = self.ended.or(Some(Instant::now())),
        }
    }

    /// A camera's (new) stream: a clip open on the old one closes; if its tracks go on, the
    /// next clip starts at the new stream's first keyframe.
    fn hello(&mut self, conn: u64, h: StreamHello) {
        let name = h.camera.clone();
        // The name becomes a folder: only a camera name zcpipe accepts (never `..`, `/`).
        if let Err(e) = zcpipe_core::config::check_camera_name(&name) {
            log::warn!("record: a stream named {name:?} is refused ({e:#}); it is not recorded");
            self.conns.remove(&conn);
            return;
        }
        self.conns.insert(conn, name.clone());
        let cam = self.camera(&name);
        let changed =
            cam.hello.as_ref().filter(|old| (old.codec, old.width, old.height) != (h.codec, h.width, h.height));
        if let Some(old) = changed {
            log::info!(
                "record: camera {name}: the stream is now {} {}x{} (was {} {}x{}): a clip open goes on in a new file",
                h.codec.name(),
                h.width,
                h.height,
                old.codec.name(),
                old.width,
                old.height
            );
        }
        cam.conn = Some(conn);
        cam.facts.connected = true;
        cam.hello = Some(h);
        cam.tables = None;
        cam.preroll.clear();
        self.close_segment(&name, None);
        let cam = self.camera(&name);
        if cam.clip.is_some() {
            self.close(&name, Some("the camera's stream restarted"));
            let cam = self.camera(&name);
            if cam.planner.resume() {
                cam.pending = Some(0);
            }
        }
    }

    /// Closes the clips whose end came with no unit after it (a camera gone quiet), and
    /// those over [`MAX_CLIP`], which go on in a new file while their objects stay.
    fn check_ends(&mut self) {
        let now = zcpipe_core::frame::monotonic_ns();
        let late = LATE.as_nanos() as u64;
        let names: Vec<String> = self.cameras.keys().cloned().collect();
        for name in names {
            let cam = &self.cameras[&name];
            let Some(c) = &cam.clip else { continue };
            if cam.planner.due(now.saturating_sub(late)) {
                self.close(&name, None);
            } else if now.saturating_sub(c.writer.first_ns) > MAX_CLIP.as_nanos() as u64 {
                self.close(&name, None);
                let cam = self.camera(&name);
                if cam.planner.resume() {
                    cam.pending = Some(now);
                }
            }
        }
    }

    fn unit(&mut self, name: &str, u: Unit) {
        let u = Arc::new(u);
        let cam = self.camera(name);
        cam.facts.units += 1;
        cam.facts.gaps += u.gap as u64;
        cam.preroll.push(u.clone());
        cam.facts.preroll_bytes = cam.preroll.bytes() as u64;
        self.segment_unit(name, &u);
        // A clip past its end closes before the first unit that starts a new group of
        // pictures: it ends with every picture it shows (B pictures come after the P
        // picture they are shown before).
        let cam = self.camera(name);
        if let Some(c) = cam.clip.as_mut().filter(|c| cam.planner.due(u.mono_ns) && c.writer.boundary(&u)) {
            c.writer.seal();
            self.close(name, None);
        }
        let cam = self.camera(name);
        if let Some(c) = cam.clip.as_mut() {
            c.writer.unit(u);
        } else if let Some(from) = cam.pending.filter(|_| !cam.preroll.is_empty()) {
            cam.pending = None;
            self.open(name, from);
        }
    }

    /// Opens camera `name`'s clip from `from_ns` (keyframe-aligned by the pre-roll).
    fn open(&mut self, name: &str, from_ns: u64) {
        if self.paused.is_some() {
            self.report.missed += 1;
            return;
        }
        let cam = self.camera(name);
        let (Some(hello), Some(tables)) = (cam.hello.clone(), cam.tables.clone()) else {
            cam.pending = Some(from_ns);
            return;
        };
        let (units, reached) = cam.preroll.since(from_ns);
        let Some(first) = units.first() else {
            cam.pending = Some(from_ns);
            return;
        };
        if !reached && from_ns > 0 {
            log::info!(
                "record: camera {name}: the clip starts at the oldest keyframe held, {:.1} s after the asked start (no keyframe in the pre-roll before it)",
                first.mono_ns.saturating_sub(from_ns) as f64 / 1e9
            );
        }
        let pre = self.cfg.pre_post(name).0.as_nanos() as u64;
        if let Some(mut c) = self.start_file(name, &hello, tables, units, Kind::Event) {
            c.event_ns = Some(from_ns.saturating_add(pre));
            let cam = self.camera(name);
            cam.clip = Some(c);
            cam.facts.clips += 1;
            self.report.clips += 1;
            self.report.open += 1;
        }
    }

    /// Starts a file of camera `name` (stream `hello`, its `tables`) with `units` (from a
    /// keyframe): its row in the index, its ffmpeg. `None` (said, counted as missed): the
    /// disk is full, the folder or the index refused.
    fn start_file(
        &mut self,
        name: &str,
        hello: &StreamHello,
        tables: Vec<u8>,
        units: Vec<Arc<Unit>>,
        kind: Kind,
    ) -> Option<OpenClip> {
        let dir = self.cfg.dir.clone();
        if free_bytes(&dir).is_some_and(|f| f < MIN_FREE) {
            self.disk_full(&format!("less than {} KiB free", MIN_FREE >> 10));
            self.report.missed += 1;
            return None;
        }
        let start_ms = wall_ms(units.first()?.mono_ns);
        // Segments apart from the event clips: `CAMERA/segments/START.mp4`.
        let folder = if kind == Kind::Segment { format!("{name}/segments") } else { name.to_string() };
        if let Err(e) = std::fs::create_dir_all(dir.join(&folder)) {
            log::warn!("record: camera {name}: cannot make {}: {e}; no clip", dir.join(&folder).display());
            return None;
        }
        let (codec, size) = (hello.codec.name(), (hello.width, hello.height));
        // Named by its start; a name taken (two clips in one ms, a row whose file never
        // came) gets the time now after it.
        let mut rel = format!("{folder}/{}", file_name(start_ms));
        let mut id = None;
        for _ in 0..2 {
            if dir.join(&rel).exists() {
                rel = format!("{folder}/{}-{}.mp4", file_name(start_ms).trim_end_matches(".mp4"), unix_ms());
            }
            match self.index.open_clip(&NewClip { camera: name, start_ms, path: &rel, codec, size, kind }) {
                Ok(i) => {
                    id = Some(i);
                    break;
                }
                Err(zcpipe_clips::OpenError::NameTaken(_)) => {
                    rel = format!("{folder}/{}-{}.mp4", file_name(start_ms).trim_end_matches(".mp4"), unix_ms());
                }
                Err(e) => {
                    self.disk_full(&format!("{e}"));
                    break;
                }
            }
        }
        let Some(id) = id else {
            self.report.missed += 1;
            return None;
        };
        match ClipWriter::start(&dir.join(&rel), tables, units) {
            Ok(writer) => Some(OpenClip { writer, id, rel, start_ms, kind, event_ns: None }),
            Err(e) => {
                log::warn!("{e:#}; camera {name} is not recorded");
                let _ = self.index.close_clip(id, &incomplete(start_ms, &format!("{e:#}")));
                None
            }
        }
    }

    /// Closes camera `name`'s clip (`cut`: why it is cut short, else the outcome says): its
    /// ffmpeg finishes the file on a thread of its own, which posts [`Input::Closed`].
    fn close(&mut self, name: &str, cut: Option<&str>) {
        let cam = self.camera(name);
        let meta = cam.planner.closed();
        let Some(c) = cam.clip.take() else { return };
        self.finish_file(name, c, meta, cut);
    }

    /// Finishes file `c` of camera `name` (with `meta`; `cut`: why it is cut short) on a
    /// thread of its own, which posts [`Input::Closed`].
    fn finish_file(&mut self, name: &str, c: OpenClip, meta: ClipMeta, cut: Option<&str>) {
        let done = Done {
            camera: name.to_string(),
            id: c.id,
            rel: c.rel,
            start_ms: c.start_ms,
            span_ns: (c.writer.first_ns, c.writer.last_ns),
            dropped: c.writer.dropped,
            meta,
            kind: c.kind,
            thumb_at_s: c.event_ns.map(|e| e.saturating_sub(c.writer.first_ns) as f64 / 1e9),
            cut: cut.map(String::from),
            outcome: crate::clip::Outcome { ok: false, disk_full: false, said: String::new() },
            bytes: 0,
        };
        let (writer, tx, file) = (c.writer, self.tx.clone(), self.cfg.dir.join(&done.rel));
        self.closing += 1;
        let spawned = std::thread::Builder::new().name("record-close".into()).spawn(move || {
            let (outcome, bytes) = writer.finish();
            if let Some(at) = done.thumb_at_s.filter(|_| bytes > 0) {
                if let Err(e) = crate::clip::thumbnail(&file, at) {
                    log::debug!("record: {e}");
                }
            }
            let _ = tx.send(Input::Closed(Box::new(Done { outcome, bytes, ..done })));
        });
        if spawned.is_err() {
            self.closing -= 1;
            log::warn!("record: no thread to close camera {name}'s clip; it stays marked recording");
        }
    }

    /// A clip's ffmpeg finished: its row, the counters, one line.
    fn closed(&mut self, d: Done) {
        self.closing = self.closing.saturating_sub(1);
        let (outcome, bytes) = (&d.outcome, d.bytes);
        let cam = self.camera(&d.camera);
        cam.facts.clip_drops += d.dropped;
        cam.facts.bytes += bytes;
        let reason = d.cut.clone().or_else(|| {
            (!outcome.ok).then(|| {
                if outcome.disk_full {
                    "the disk is full".to_string()
                } else {
                    format!(
                        "ffmpeg stopped: {}",
                        if outcome.said.is_empty() { "(it said nothing)" } else { &outcome.said }
                    )
                }
            })
        });
        if outcome.disk_full {
            // Before the index is written: the reserve makes its room.
            self.disk_full("a clip could not be written");
        }
        let state = if reason.is_none() { ClipState::Complete } else { ClipState::Incomplete };
        let end_ms = d.start_ms + (d.span_ns.1.saturating_sub(d.span_ns.0) / 1_000_000) as i64;
        let tracks: Vec<String> = d.meta.tracks.iter().map(|t| format!("#{t}")).collect();
        let labels = join(&d.meta.labels);
        let row = Closed { end_ms, state, reason: reason.clone(), bytes, meta: d.meta };
        if let Err(e) = self.index.close_clip(d.id, &row) {
            log::warn!("record: the index could not record the end of {}: {e:#}", d.rel);
        }
        self.report.open = self.report.open.saturating_sub(1);
        self.report.bytes += bytes;
        match (d.kind, state) {
            (Kind::Segment, _) => {}
            (_, ClipState::Complete) => self.report.complete += 1,
            _ => self.report.incomplete += 1,
        }
        let what = if tracks.is_empty() { String::new() } else { format!("{labels} {}, ", tracks.join(" ")) };
        log::info!(
            "record: camera {}: {} {} ({:.1} s, {what}{:.1} MB{}{})",
            d.camera,
            if d.kind == Kind::Segment { "segment" } else { "clip" },
            d.rel,
            (end_ms - d.start_ms) as f64 / 1000.0,
            bytes as f64 / 1e6,
            if d.dropped > 0 { format!(", {} units dropped", d.dropped) } else { String::new() },
            reason.as_ref().map_or(String::new(), |r| format!("; incomplete: {r}"))
        );
        self.retain();
    }

    /// Closes the clips whose ffmpeg stopped (the disk, a stream it refused).
    fn check_writers(&mut self) {
        let failed: Vec<String> = self
            .cameras
            .values()
            .filter(|c| c.clip.as_ref().is_some_and(|c| c.writer.failed()))
            .map(|c| c.name.clone())
            .collect();
        for name in failed {
            self.close(&name, None);
        }
    }

    /// Makes (`true`) or removes the index's reserve of room.
    fn reserve(&self, make: bool) {
        let path = self.cfg.dir.join(RESERVE_FILE);
        if !make {
            let _ = std::fs::remove_file(&path);
            return;
        }
        if let Err(e) = std::fs::write(&path, vec![0u8; RESERVE as usize]) {
            let _ = std::fs::remove_file(&path);
            log::debug!("record: no reserve of room for the index ({e})");
        }
    }

    fn disk_full(&mut self, why: &str) {
        // The reserve goes first: the index then has room to say what happened.
        self.reserve(false);
        if self.paused.is_none() {
            self.report.disk_full += 1;
            log::warn!(
                "record: {}: the disk is full ({why}); recording stops until there is room again (detection and every other output go on)",
                self.cfg.dir.display()
            );
        }
        self.paused = Some(Instant::now());
    }

    fn look_for_room(&mut self) {
        self.retain();
        if free_bytes(&self.cfg.dir).is_some_and(|f| f >= RESERVE + 2 * MIN_FREE) {
            log::info!("record: {}: there is room on the disk again; recording resumes", self.cfg.dir.display());
            self.paused = None;
            self.reserve(true);
        } else {
            self.paused = Some(Instant::now());
        }
    }

    /// Removes clips past `--record-keep` and beyond `--record-max-size`.
    fn retain(&mut self) {
        self.last_retain = Instant::now();
        let before = |days: f64| Some(unix_ms() - (days * 86_400_000.0) as i64);
        // Cameras with an age of their own follow it; the others the run's. The run's size
        // bound is every clip's together; a camera's own bound, its clips'.
        let own_age: Vec<String> =
            self.cfg.cameras.iter().filter(|(_, r)| r.keep_days.is_some()).map(|(c, _)| c.clone()).collect();
        let mut passes: Vec<(Scope, Option<i64>, Option<u64>)> = vec![];
        if let Some(k) = self.cfg.keep {
            passes.push((Scope::AllBut(&own_age), before(k.as_secs_f64() / 86_400.0), None));
        }
        if let Some(m) = self.cfg.max_bytes {
            passes.push((Scope::All, None, Some(m)));
        }
        for (camera, r) in &self.cfg.cameras {
            if r.keep_days.is_some() || r.max_gb.is_some() {
                passes.push((Scope::Camera(camera), r.keep_days.and_then(before), r.max_gb.map(|g| (g * 1e9) as u64)));
            }
        }
        for (scope, before, max) in passes {
            match self.index.retain(scope, before, max) {
                Ok((0, _)) => {}
                Ok((n, bytes)) => {
                    self.report.removed += n;
                    self.report.removed_bytes += bytes;
                    log::info!("record: {n} old clips removed ({:.1} MB)", bytes as f64 / 1e6);
                }
                Err(e) => log::warn!("record: retention: {e:#}"),
            }
        }
    }

    /// At the end: the threads stop, every open clip closes with what it has.
    fn drain(&mut self) -> Drained {
        self.stop.store(true, Ordering::Relaxed);
        let open: Vec<String> = self.cameras.values().filter(|c| c.clip.is_some()).map(|c| c.name.clone()).collect();
        for name in &open {
            self.close(name, None);
        }
        let names: Vec<String> = self.cameras.keys().cloned().collect();
        for name in &names {
            self.close_segment(name, None);
        }
        // Each clip's end into the index (its ffmpeg finishing), for at most CLOSE_WAIT.
        let t = Instant::now();
        while self.closing > 0 && t.elapsed() < CLOSE_WAIT {
            if let Ok(Input::Closed(d)) = self.rx.recv_timeout(IDLE_WAIT) {
                self.closed(*d);
            }
        }
        Drained {
            said: format!("{} clips open at the end closed; ", open.len()),
            extras: vec![("clips_closed_at_end", open.len().into())],
            result: Ok(()),
        }
    }

    fn stage_report(&self, ctx: &StageCtx, final_report: bool, extras: impl Into<Facts>) -> StageReport {
        let mut report = self.report.clone();
        report.cameras = self.cameras.iter().map(|(n, c)| (n.clone(), c.facts.clone())).collect();
        let mut facts: Facts = extras.into();
        facts.put(&RecordFacts { record: Some(report) });
        // Its "frames" are the access units it took (the summary's CPU per frame).
        let units = self.cameras.values().map(|c| c.facts.units).sum();
        StageReport { frames_in: units, ..ctx.report(self.start, final_report, facts) }
    }
}

/// The close of a clip that never got going.
fn incomplete(start_ms: i64, why: &str) -> Closed {
    Closed {
        end_ms: start_ms,
        state: ClipState::Incomplete,
        reason: Some(why.to_string()),
        bytes: 0,
        meta: Default::default(),
    }
}

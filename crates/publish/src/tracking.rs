//! The publish stage's tracking: one tracker per camera (its zones, lines, loitering times,
//! calibration), the masks and filters in front of it, the events it gives as lines, and
//! what it counted for the stage's report.

use std::collections::BTreeMap;
use std::time::Instant;

use super::schema::{CrossingsJson, DroppedJson, EventJson, FrameJson};
use super::track::filter::{Dropped, Gate};
use super::track::{EventKind, Observation, Scene, TrackEvent, Tracker, TrackerKind, Zone};
use super::TrackConfig;

/// The tracking of every camera: one [`Tracker`] each, made at the camera's first frame
/// (when its frame size is known, so its zones can be checked against it), and the events
/// counted by kind for the stage's report.
pub struct Tracking {
    cfg: TrackConfig,
    cameras: Vec<String>,
    trackers: Vec<Option<Tracker>>,
    /// Per camera: when its last frame arrived here, and whether its frame interval was
    /// found longer than the keep-alive (said once).
    arrived: Vec<Option<Instant>>,
    slow_said: Vec<bool>,
    /// Per camera: its next frame follows a gap a notice explained ([`Tracking::gap`]).
    after_gap: Vec<bool>,
    /// Where the next id of each camera is kept for a restarted publish stage
    /// (`publish.track-ids` in the run directory; `None`: not kept).
    ids_file: Option<std::path::PathBuf>,
    /// Events sent, by kind (in the order of [`EVENT_KINDS`]).
    counts: [u64; EVENT_KINDS.len()],
    /// Per camera: its masks and filters, checked against its frame and the model's labels
    /// at its first frame (`None` until then).
    gates: Vec<Option<Gate>>,
    /// Detections dropped by a mask, and by a filter.
    masked: u64,
    filtered: u64,
    /// The model's labels, as the last frame gave them (for the report's crossings).
    labels: Vec<String>,
    /// Per camera: its picture's size, from its first frame (a zone changed while the
    /// stage runs is checked against it).
    sizes: Vec<Option<(u32, u32)>>,
}

mod live;

/// How long past the keep-alive a camera's tracks wait for its next frame before they end
/// without one ([`Tracking::expire`]): frames in flight, and a stage after capture being
/// restarted (whose lost frames do not count: [`Tracker::pause`]), must not end tracks.
pub(crate) const IDLE_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// The file in the run directory where the publish stage keeps each camera's next track id
/// (JSON `{"camera": next_id}`), so that a restarted publish stage does not hand out ids
/// again; removed when the stage ends normally.
pub const TRACK_IDS_FILE: &str = "publish.track-ids";

/// Beside it, each camera's line crossings so far (JSON `{"camera": [{"line", "class_id",
/// "in", "out"}]}`), so that a restarted publish stage's counters go on from there (Home
/// Assistant's `total_increasing` sensors and Prometheus counters must not go back);
/// removed when the stage ends normally.
pub const LINE_COUNTS_FILE: &str = "publish.line-counts";

/// One line's crossings by one class, as kept in [`LINE_COUNTS_FILE`].
#[derive(serde::Serialize, serde::Deserialize)]
struct KeptCount {
    line: String,
    class_id: u32,
    #[serde(rename = "in")]
    into: u64,
    out: u64,
}

const EVENT_KINDS: [EventKind; 7] = [
    EventKind::New,
    EventKind::EnteredZone,
    EventKind::LeftZone,
    EventKind::Stationary,
    EventKind::End,
    EventKind::CrossedLine,
    EventKind::Loitering,
];

impl Tracking {
    /// Tracking for `cameras` (in the run's order) as `cfg` says.
    pub fn new(cfg: TrackConfig, cameras: &[String]) -> Tracking {
        Tracking {
            trackers: cameras.iter().map(|_| None).collect(),
            arrived: vec![None; cameras.len()],
            slow_said: vec![false; cameras.len()],
            after_gap: vec![false; cameras.len()],
            cameras: cameras.to_vec(),
            ids_file: None,
            gates: vec![None; cameras.len()],
            cfg,
            counts: [0; EVENT_KINDS.len()],
            masked: 0,
            filtered: 0,
            labels: vec![],
            sizes: vec![None; cameras.len()],
        }
    }

    /// Keeps each camera's next id in `file` (read back when a restarted stage starts, so
    /// ids go on from there).
    pub(crate) fn keep_ids_in(mut self, file: std::path::PathBuf) -> Tracking {
        self.ids_file = Some(file);
        self
    }

    /// The next id of camera `cam` kept by an earlier publish stage of this run, if any.
    fn kept_id(&self, cam: usize) -> Option<u64> {
        let text = std::fs::read_to_string(self.ids_file.as_ref()?).ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        v.get(&self.cameras[cam])?.as_u64()
    }

    /// Writes every camera's next id to the ids file (through a temporary file and a rename).
    fn keep_ids(&self) {
        let Some(f) = &self.ids_file else { return };
        let ids: serde_json::Map<String, serde_json::Value> = self
            .cameras
            .iter()
            .zip(&self.trackers)
            .filter_map(|(c, t)| Some((c.clone(), t.as_ref()?.next_id().into())))
            .collect();
        let tmp = f.with_extension("track-ids.tmp");
        if let Err(e) =
            std::fs::write(&tmp, serde_json::Value::Object(ids).to_string()).and_then(|()| std::fs::rename(&tmp, f))
        {
            log::warn!("keeping the next track ids in {}: {e}", f.display());
        }
    }

    /// Removes the ids file and the line counts (the stage ends normally: the next run
    /// starts from 1, its counters from 0).
    pub(crate) fn forget_ids(&self) {
        if let Some(f) = &self.ids_file {
            let _ = std::fs::remove_file(f);
            let _ = std::fs::remove_file(f.with_file_name(LINE_COUNTS_FILE));
        }
    }

    /// Every camera's line crossings, to [`LINE_COUNTS_FILE`] (through a temporary file
    /// and a rename).
    fn keep_counts(&self) {
        let Some(f) = self.ids_file.as_ref().map(|f| f.with_file_name(LINE_COUNTS_FILE)) else { return };
        let all: BTreeMap<&str, Vec<KeptCount>> = self
            .cameras
            .iter()
            .zip(&self.trackers)
            .filter_map(|(c, t)| {
                let t = t.as_ref()?;
                let kept = t.line_counts().iter().map(|k| KeptCount {
                    line: t.lines()[k.line].name.clone(),
                    class_id: k.class_id,
                    into: k.counts[0],
                    out: k.counts[1],
                });
                Some((c.as_str(), kept.collect()))
            })
            .collect();
        let tmp = f.with_extension("line-counts.tmp");
        let text = serde_json::to_string(&all).unwrap_or_default();
        if let Err(e) = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &f)) {
            log::warn!("keeping the line counts in {}: {e}", f.display());
        }
    }

    /// Camera `cam`'s line counts kept by an earlier publish stage of this run, for
    /// `lines` (by name).
    fn kept_counts(&self, cam: usize, lines: &[crate::track::Line]) -> Vec<crate::track::LineCount> {
        let Some(f) = self.ids_file.as_ref().map(|f| f.with_file_name(LINE_COUNTS_FILE)) else { return vec![] };
        let Ok(text) = std::fs::read_to_string(f) else { return vec![] };
        let mut all: BTreeMap<String, Vec<KeptCount>> = serde_json::from_str(&text).unwrap_or_default();
        let kept = all.remove(&self.cameras[cam]).unwrap_or_default();
        kept.into_iter()
            .filter_map(|k| {
                let line = lines.iter().position(|l| l.name == k.line)?;
                Some(crate::track::LineCount { line, class_id: k.class_id, counts: [k.into, k.out] })
            })
            .collect()
    }

    /// The frames of camera `cam` up to the one captured at `t_ns` were lost by a stage after
    /// capture that restarted: the gap does not count against its tracks' keep-alive.
    pub fn pause(&mut self, cam: usize, t_ns: u64) {
        if let Some(Some(t)) = self.trackers.get_mut(cam) {
            t.pause(t_ns);
        }
    }

    /// Camera `cam`'s next frame comes after a gap a notice explained (a restart or a
    /// reconnect): the advice about frames further apart than the keep-alive is not for it.
    pub fn gap(&mut self, cam: usize) {
        if let Some(g) = self.after_gap.get_mut(cam) {
            *g = true;
        }
    }

    /// Whether a mask or filter dropped a detection yet.
    pub fn dropped_any(&self) -> bool {
        self.masked + self.filtered > 0
    }

    /// Whether a tracker runs at all (`--tracker` is not `none`).
    pub fn on(&self) -> bool {
        self.cfg.params.kind != TrackerKind::None
    }

    /// Drops the detections of frame `f` of camera `cam` that its masks or filters refuse
    /// (counted). Its first frame checks them: a mask outside the frame, a filter of a label
    /// the model does not have, is left out with one line.
    fn gate(&mut self, cam: usize, f: &mut FrameJson, labels: &[String]) {
        let Some(slot) = self.gates.get_mut(cam) else { return };
        let gate = slot.get_or_insert_with(|| {
            let camera = &self.cameras[cam];
            let mut g = self.cfg.gates.get(cam).cloned().unwrap_or_default();
            if let Err(e) = g.check_inside(camera, f.width, f.height) {
                log::error!("{e:#}: the camera's masks are left out");
                g.masks.clear();
            }
            if !labels.is_empty() {
                for line in g.keep_known_labels(camera, labels) {
                    log::warn!("{line}");
                }
            }
            g
        });
        if gate.is_empty() {
            return;
        }
        let (mut masked, mut filtered) = (0, 0);
        f.detections.retain(|d| match gate.judge(&d.label, d.score, &d.bbox) {
            None => true,
            Some(Dropped::Masked) => {
                masked += 1;
                false
            }
            Some(Dropped::Filtered) => {
                filtered += 1;
                false
            }
        });
        self.masked += masked as u64;
        self.filtered += filtered as u64;
        if masked + filtered > 0 {
            f.dropped = Some(DroppedJson { masked, filtered });
        }
    }

    /// Camera `cam`'s tracker, made at its first frame (`f`): its zones, lines and
    /// calibration checked against the frame's size (one outside it is left out with one
    /// error line), its ids going on from `kept`.
    fn make_tracker(&self, cam: usize, f: &FrameJson, kept: Option<u64>) -> Tracker {
        let camera = &self.cameras[cam];
        let (w, h) = (f.width, f.height);
        let zones: Vec<Zone> = self.cfg.zones.get(cam).cloned().unwrap_or_default();
        let loiter = self.cfg.loiter_ns.get(cam).cloned().unwrap_or_default();
        let (zones, loiter_ns): (Vec<Zone>, Vec<Option<u64>>) = zones
            .into_iter()
            .zip(loiter.into_iter().chain(std::iter::repeat(None)))
            .filter(|(z, _)| match z.check_inside(camera, w, h) {
                Ok(()) => true,
                Err(e) => {
                    log::error!("{e:#}: zone {} is left out", z.name);
                    false
                }
            })
            .unzip();
        let lines = self.cfg.lines.get(cam).cloned().unwrap_or_default();
        let lines: Vec<crate::track::Line> = lines
            .into_iter()
            .filter(|l| match l.check_inside(camera, w, h) {
                Ok(()) => true,
                Err(e) => {
                    log::error!("{e:#}: line {} is left out", l.name);
                    false
                }
            })
            .collect();
        let calibration =
            self.cfg.calibrations.get(cam).cloned().flatten().and_then(|c| match c.check_inside(camera, w, h) {
                Ok(()) => Some(c.calibration()),
                Err(e) => {
                    log::error!("{e:#}: camera {camera} gives no speeds");
                    None
                }
            });
        let counts = self.kept_counts(cam, &lines);
        if !counts.is_empty() {
            log::info!("camera {camera}: line counts go on from those the publish stage before this one kept");
        }
        let scene = Scene { zones, loiter_ns, lines, calibration };
        Tracker::with_scene(self.cfg.params.clone(), scene).first_id(kept.unwrap_or(1)).restore_line_counts(counts)
    }

    /// Tracks the detections of frame `f` of camera index `cam` (captured at `t_ns`), after
    /// its masks and filters dropped theirs: sets each detection's `track_id` (and speed),
    /// the frame's `zones` and `lines`, and returns the frame's events as lines. The
    /// camera's first frame makes its tracker ([`Tracking::make_tracker`]).
    pub fn frame(&mut self, cam: usize, t_ns: u64, f: &mut FrameJson, labels: &[String]) -> Vec<EventJson> {
        self.gate(cam, f, labels);
        if self.labels.len() != labels.len() {
            self.labels = labels.to_vec();
        }
        if !self.on() || cam >= self.trackers.len() {
            return vec![];
        }
        let kept = if self.trackers[cam].is_none() { self.kept_id(cam) } else { None };
        if let Some(id) = kept {
            log::info!(
                "camera {}: track ids go on from {id} (kept by the publish stage before this one)",
                self.cameras[cam]
            );
        }
        self.arrived[cam] = Some(Instant::now());
        if self.trackers[cam].is_none() {
            self.sizes[cam] = Some((f.width, f.height));
            self.trackers[cam] = Some(self.make_tracker(cam, f, kept));
        }
        let Some(tracker) = self.trackers[cam].as_mut() else { return vec![] };
        let interval = tracker.last_frame_ns().map(|l| t_ns.saturating_sub(l));
        let explained = std::mem::take(&mut self.after_gap[cam]);
        if let Some(i) = interval.filter(|&i| i > self.cfg.params.keepalive_ns && !self.slow_said[cam] && !explained) {
            self.slow_said[cam] = true;
            log::warn!(
                "camera {}: {:.2} s between frames, more than --track-keepalive {:.2} s: a track missed in one frame ends; raise --track-keepalive to a few frame intervals",
                self.cameras[cam],
                i as f64 / 1e9,
                self.cfg.params.keepalive_ns as f64 / 1e9
            );
        }
        let next_id = tracker.next_id();
        let obs: Vec<Observation> =
            f.detections.iter().map(|d| Observation { class_id: d.class_id, score: d.score, bbox: d.bbox }).collect();
        let mut events = vec![];
        let ids = tracker.update(t_ns, &obs, &mut events);
        for (d, id) in f.detections.iter_mut().zip(ids) {
            d.track_id = id;
            d.speed_kmh = id.and_then(|id| tracker.speed_kmh(id)).map(|v| (v * 10.0).round() / 10.0);
        }
        if !tracker.zones().is_empty() {
            let mut zones: BTreeMap<String, BTreeMap<String, u32>> =
                tracker.zones().iter().map(|z| (z.name.clone(), BTreeMap::new())).collect();
            for (z, class, n) in tracker.zone_counts() {
                zones
                    .entry(tracker.zones()[z].name.clone())
                    .or_default()
                    .insert(zcpipe_core::schema::label_of(labels, class), n);
            }
            f.zones = Some(zones);
        }
        if !tracker.lines().is_empty() {
            let mut lines: BTreeMap<String, BTreeMap<String, CrossingsJson>> =
                tracker.lines().iter().map(|l| (l.name.clone(), BTreeMap::new())).collect();
            for c in tracker.line_counts() {
                let label = zcpipe_core::schema::label_of(labels, c.class_id);
                lines
                    .entry(tracker.lines()[c.line].name.clone())
                    .or_default()
                    .insert(label, CrossingsJson { into: c.counts[0], out: c.counts[1] });
            }
            f.lines = Some(lines);
        }
        if tracker.next_id() != next_id {
            self.keep_ids();
        }
        if events.iter().any(|e| e.kind == EventKind::CrossedLine) {
            self.keep_counts();
        }
        self.lines(cam, events, labels, Some(f.seq))
    }

    /// For each camera whose frames stopped coming (none for the keep-alive plus
    /// [`IDLE_GRACE`]): ends its tracks unseen for longer than the keep-alive, by its last
    /// frame's capture time plus the time since that frame arrived. Their events as lines.
    pub fn expire(&mut self, labels: &[String]) -> Vec<EventJson> {
        let keepalive = std::time::Duration::from_nanos(self.cfg.params.keepalive_ns);
        let mut out = vec![];
        for cam in 0..self.trackers.len() {
            let Some(since) = self.arrived[cam].map(|a| a.elapsed()).filter(|e| *e > keepalive + IDLE_GRACE) else {
                continue;
            };
            let mut events = vec![];
            if let Some(t) = &mut self.trackers[cam] {
                let now = t.last_frame_ns().unwrap_or(0).saturating_add(since.as_nanos() as u64);
                t.expire(now, &mut events);
            }
            out.extend(self.lines(cam, events, labels, None));
        }
        out
    }

    /// The stream ended: every track ends; their events as lines.
    pub fn finish(&mut self, now_ns: u64, labels: &[String]) -> Vec<EventJson> {
        let mut out = vec![];
        for cam in 0..self.trackers.len() {
            let mut events = vec![];
            if let Some(t) = &mut self.trackers[cam] {
                t.finish(now_ns, &mut events);
            }
            out.extend(self.lines(cam, events, labels, None));
        }
        out
    }

    /// Camera `cam`'s `events` as lines; `seq`: the frame they happened in, if a frame brought them.
    fn lines(&mut self, cam: usize, events: Vec<TrackEvent>, labels: &[String], seq: Option<u64>) -> Vec<EventJson> {
        let zones = self.trackers[cam].as_ref().map(|t| t.zones()).unwrap_or_default();
        let lines = self.trackers[cam].as_ref().map(|t| t.lines()).unwrap_or_default();
        events
            .into_iter()
            .map(|e| {
                self.counts[EVENT_KINDS.iter().position(|k| *k == e.kind).unwrap_or(0)] += 1;
                EventJson {
                    event: e.kind.name().into(),
                    camera: self.cameras[cam].clone(),
                    track_id: e.track_id,
                    label: zcpipe_core::schema::label_of(labels, e.class_id),
                    class_id: e.class_id,
                    score: (e.best_score * 1000.0).round() / 1000.0,
                    zone: e.zone.and_then(|z| zones.get(z)).map(|z| z.name.clone()),
                    first_seen_ns: e.first_seen_ns,
                    last_seen_ns: e.last_seen_ns,
                    timestamp_ns: e.at_ns,
                    seq,
                    bbox: e.bbox.map(|v| (v * 10.0).round() / 10.0),
                    line: e.line.and_then(|(l, _)| lines.get(l)).map(|l| l.name.clone()),
                    direction: e.line.map(|(_, d)| d),
                    duration_s: e.duration_ns.map(|ns| (ns as f64 / 1e6).round() / 1e3),
                    speed_kmh: e.speed_kmh.map(|v| (v * 10.0).round() / 10.0),
                }
            })
            .collect()
    }

    /// The report's `tracking`: the tracker, events sent by kind, tracks live now.
    pub fn report(&self) -> TrackingReport {
        TrackingReport {
            tracker: zcpipe_core::config::Choice::name(self.cfg.params.kind).to_string(),
            events: EVENT_KINDS.iter().zip(self.counts).map(|(k, n)| (k.name().to_string(), n)).collect(),
            live_tracks: self.trackers.iter().flatten().map(|t| t.live()).sum(),
            masked: self.masked,
            filtered: self.filtered,
            crossings: self.crossings(),
        }
    }

    /// Every camera's crossings so far: camera, line, label, counts.
    fn crossings(&self) -> BTreeMap<String, BTreeMap<String, BTreeMap<String, CrossingsJson>>> {
        let mut out: BTreeMap<String, BTreeMap<String, BTreeMap<String, CrossingsJson>>> = BTreeMap::new();
        for (camera, t) in self.cameras.iter().zip(&self.trackers) {
            let Some(t) = t.as_ref().filter(|t| !t.lines().is_empty()) else { continue };
            let cam = out.entry(camera.clone()).or_default();
            for l in t.lines() {
                cam.entry(l.name.clone()).or_default();
            }
            for c in t.line_counts() {
                let label = zcpipe_core::schema::label_of(&self.labels, c.class_id);
                cam.entry(t.lines()[c.line].name.clone())
                    .or_default()
                    .insert(label, CrossingsJson { into: c.counts[0], out: c.counts[1] });
            }
        }
        out
    }
}

/// Tracking's part of the publish stage's report (`tracking`).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
#[serde(default)]
pub struct TrackingReport {
    /// The tracker (`--tracker`).
    pub tracker: String,
    /// Events sent, by kind (`new`, `end`, `entered_zone`, `left_zone`, `stationary`).
    pub events: BTreeMap<String, u64>,
    /// Tracks live now.
    pub live_tracks: usize,
    /// Detections dropped before tracking by a mask.
    pub masked: u64,
    /// Detections dropped before tracking by their label's filter.
    pub filtered: u64,
    /// Each camera's lines' crossings by label: camera, line, label.
    pub crossings: BTreeMap<String, BTreeMap<String, BTreeMap<String, CrossingsJson>>>,
}

impl TrackingReport {
    /// Its lines of the end-of-run summary: the tracking line, then one per line of a
    /// camera: `  line cam0/door: 3 in, 2 out (person 3 in, 1 out; car 0 in, 1 out)`.
    pub fn summary_line(&self) -> String {
        let n = |k: &str| self.events.get(k).copied().unwrap_or(0);
        if self.tracker == "none" {
            return format!("  dropped before tracking: {} masked, {} filtered", self.masked, self.filtered);
        }
        let mut s = format!(
            "  tracking: {}: {} tracks confirmed, {} ended; zones: {} entries, {} exits; {} stationary",
            self.tracker,
            n("new"),
            n("end"),
            n("entered_zone"),
            n("left_zone"),
            n("stationary")
        );
        if n("loitering") > 0 {
            s += &format!("; {} loitering", n("loitering"));
        }
        if self.masked + self.filtered > 0 {
            s += &format!("; dropped before tracking: {} masked, {} filtered", self.masked, self.filtered);
        }
        for (camera, lines) in &self.crossings {
            for (line, labels) in lines {
                let sum = labels.values().fold((0, 0), |a, c| (a.0 + c.into, a.1 + c.out));
                let per: Vec<String> =
                    labels.iter().map(|(l, c)| format!("{l} {} in, {} out", c.into, c.out)).collect();
                s += &format!("\n  line {camera}/{line}: {} in, {} out", sum.0, sum.1);
                if !per.is_empty() {
                    s += &format!(" ({})", per.join("; "));
                }
            }
        }
        s
    }
}

/// One readable line for an event, with the local time it happened (its capture time on
/// this machine's clock) and its frame: `event new: person #3 (0.91) at 14:03:07.412, frame 41`,
/// `event entered_zone door: person #3 (0.91) at ...`, `event crossed_line exit out: ...`,
/// `event loitering gate after 30.0 s: ...`, with the speed when there is one.
pub fn human_event(e: &EventJson) -> String {
    let zone = e.zone.as_ref().map(|z| format!(" {z}")).unwrap_or_default();
    let line = e.line.as_ref().map(|l| format!(" {l}")).unwrap_or_default();
    let dir = e.direction.map(|d| format!(" {}", d.name())).unwrap_or_default();
    let stayed = e.duration_s.map(|d| format!(" after {d:.1} s")).unwrap_or_default();
    let speed = e.speed_kmh.map(|v| format!(", {v:.1} km/h")).unwrap_or_default();
    let frame = e.seq.map(|s| format!(", frame {s}")).unwrap_or_default();
    format!(
        "event {}{zone}{line}{dir}{stayed}: {} #{} ({:.2}) at {}{frame}{speed}",
        e.event,
        e.label,
        e.track_id,
        e.score,
        local_time(crate::mqtt::wall_ms(e.timestamp_ns), &jiff::tz::TimeZone::system())
    )
}

/// The time `unix_ms` (Unix time, ms: [`crate::mqtt::wall_ms`] of a capture time) as
/// `HH:MM:SS.mmm` in time zone `tz`.
fn local_time(unix_ms: u64, tz: &jiff::tz::TimeZone) -> String {
    let at =
        jiff::Timestamp::from_millisecond(unix_ms.min(i64::MAX as u64) as i64).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    at.to_zoned_datetime(tz.clone()).strftime("%H:%M:%S%.3f").to_string()
}

#[cfg(test)]
mod time_tests {
    use super::*;
    use zcpipe_core::frame::monotonic_ns;

    /// Frames of a person walking down through `door=0,200,400,200` (10 fps from `t0`).
    fn walk(t: &mut Tracking, t0: u64) -> Vec<EventJson> {
        let labels = vec!["person".to_string()];
        let mut events = vec![];
        for i in 0..12u64 {
            let y = 150.0 + 10.0 * i as f32;
            let d = zcpipe_core::schema::DetectionJson {
                label: "person".into(),
                score: 0.9,
                bbox: [80.0, y - 100.0, 120.0, y],
                ..Default::default()
            };
            let mut f = FrameJson {
                camera: "cam0".into(),
                seq: i,
                width: 400,
                height: 400,
                detections: vec![d],
                ..Default::default()
            };
            events.extend(t.frame(0, t0 + i * 100_000_000, &mut f, &labels));
        }
        events
    }

    #[test]
    fn a_restarted_publish_stage_counts_on_from_the_kept_line_counts() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = TrackConfig {
            zones: vec![vec![]],
            lines: vec![vec![crate::track::LineSpec::parse("door=0,200,400,200").unwrap().line]],
            ..TrackConfig::default()
        };
        let cams = ["cam0".to_string()];
        let mut first = Tracking::new(cfg.clone(), &cams).keep_ids_in(dir.path().join(TRACK_IDS_FILE));
        assert_eq!(walk(&mut first, 0).iter().filter(|e| e.event == "crossed_line").count(), 1);
        // The stage dies (no forget_ids): the next one goes on from 1.
        let mut second = Tracking::new(cfg, &cams).keep_ids_in(dir.path().join(TRACK_IDS_FILE));
        walk(&mut second, 10_000_000_000);
        let r = second.report();
        assert_eq!(r.crossings["cam0"]["door"]["person"], CrossingsJson { into: 2, out: 0 });
        second.forget_ids();
        assert!(!dir.path().join(LINE_COUNTS_FILE).exists());
    }

    #[test]
    fn a_crossing_and_a_loitering_read_as_lines() {
        let e = EventJson {
            event: "crossed_line".into(),
            track_id: 1,
            label: "person".into(),
            score: 0.9,
            line: Some("exit".into()),
            direction: Some(zcpipe_core::schema::Direction::Out),
            speed_kmh: Some(4.84),
            seq: Some(191),
            ..Default::default()
        };
        let s = human_event(&e);
        assert!(
            s.starts_with("event crossed_line exit out: person #1 (0.90) at ") && s.ends_with(", frame 191, 4.8 km/h"),
            "{s}"
        );
        let l = EventJson {
            event: "loitering".into(),
            zone: Some("gate".into()),
            line: None,
            direction: None,
            duration_s: Some(30.04),
            ..e
        };
        assert!(human_event(&l).starts_with("event loitering gate after 30.0 s: person #1"), "{}", human_event(&l));
    }

    #[test]
    fn an_events_monotonic_time_is_its_wall_clock_time() {
        let at: jiff::Timestamp = "2026-12-06T14:03:07.412Z".parse().unwrap();
        let ms = at.as_millisecond() as u64;
        let utc = jiff::tz::TimeZone::UTC;
        assert_eq!(local_time(ms, &utc), "14:03:07.412");
        let berlin = jiff::tz::TimeZone::get("Europe/Berlin").unwrap_or(utc.clone());
        assert!(local_time(ms, &berlin).ends_with(":03:07.412"));
        // A capture time after "now" (another clock's read) is now, never a panic.
        let future = crate::mqtt::wall_ms(monotonic_ns() + 10_000_000_000);
        assert!(future <= crate::mqtt::unix_ms() + 1, "{future}");
        assert_eq!(local_time(u64::MAX, &utc), local_time(i64::MAX as u64, &utc));
    }
}

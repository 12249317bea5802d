//! Multi-object tracking: detections become tracked objects with stable ids, and tracks
//! become events (`new`, `entered_zone`, `left_zone`, `loitering`, `crossed_line`,
//! `stationary`, `end`). What a track means for a camera's zones, loitering times, lines
//! and ground calibration is [`analytics`] over [`geom`], [`line`], [`speed`]; masks and
//! label filters in front of the tracker are [`filter`].
//!
//! One [`Tracker`] per camera, fed that camera's frames in order. Three trackers share one
//! skeleton (tracks, the IoU assignment of [`assign::match_iou`], confirmation, zones,
//! events) and differ in their motion model and association:
//! - `iou` (Bochinski et al. 2017, "High-Speed Tracking-by-Detection Without Using Image
//!   Information"): no motion model; a track is matched to a detection of its class by the
//!   IoU of its last box (>= 0.5), detections scoring below `high_score` are ignored;
//! - `sort` (Bewley et al. 2016, "Simple Online and Realtime Tracking"): the Kalman filter
//!   of [`kalman`] predicts each box; one association of the predicted boxes with the
//!   detections scoring `high_score` or more (IoU >= 0.3);
//! - `bytetrack` (Zhang et al. 2022, "ByteTrack: Multi-Object Tracking by Associating Every
//!   Detection Box", Algorithm 1): the same filter; first the confirmed tracks (seen or lost)
//!   against the high-score detections (IoU >= 0.2), then the tracks seen last frame and
//!   still unmatched against the low-score ones (IoU >= 0.5: an occluded person's weak box
//!   keeps the track), then the unconfirmed tracks against the high-score detections left
//!   (IoU >= 0.3); a new track starts from a high-score detection scoring `high_score + 0.1`
//!   (capped at 0.95).
//!
//! Every association is per class (a detection of another class never matches). A new
//! track is tentative until it has been matched in `confirm_frames` frames in a row; a
//! tentative track that misses a frame is dropped. A confirmed track gets the next id of
//! its camera (1, 2, ...) and a `new` event; when unseen it is lost, keeps its id and is
//! found again by the first association; unseen for longer than `keepalive_ns` it ends
//! (`end`). Times are the frames' capture timestamps (CLOCK_MONOTONIC ns).

mod analytics;
pub mod assign;
pub mod eval;
pub mod filter;
pub mod geom;
pub mod kalman;
pub mod line;
mod rescene;
pub mod speed;
pub mod zone;

use kalman::Kalman;
pub use line::{Direction, Line, LineSpec};
use zcpipe_core::detections::iou;
pub use zone::{Zone, ZoneSpec};

/// Which tracker (`--tracker`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrackerKind {
    /// ByteTrack: Kalman filter, high- then low-score association.
    ByteTrack,
    /// SORT: Kalman filter, one association of high-score detections.
    Sort,
    /// IoU tracker: last box, no motion model.
    Iou,
    /// No tracking: detections carry no `track_id`, no events.
    None,
}

impl zcpipe_core::config::Choice for TrackerKind {
    const ALL: &'static [(Self, &'static str, &'static str)] = &[
        (TrackerKind::ByteTrack, "bytetrack", "Kalman filter; high-score then low-score detections (ByteTrack)"),
        (TrackerKind::Sort, "sort", "Kalman filter; high-score detections (SORT)"),
        (TrackerKind::Iou, "iou", "IoU with the last box, no motion model"),
        (TrackerKind::None, "none", "No tracking: no track_id, no events"),
    ];
}

/// A tracker's parameters (`zcpipe run --help`, docs/src/user/tracking.md gives the defaults).
#[derive(Clone, Debug, PartialEq)]
pub struct TrackParams {
    /// The tracker.
    pub kind: TrackerKind,
    /// Frames in a row a new track must be matched in before it is confirmed (1..=100; default 3).
    pub confirm_frames: u32,
    /// A confirmed track unseen for longer than this ends, ns (default 1 s).
    pub keepalive_ns: u64,
    /// A confirmed track whose box centre stays within `stationary_move` of where it was
    /// for this long is stationary, ns (default 10 s).
    pub stationary_ns: u64,
    /// How far a box's centre may move and still count as staying, as a fraction of the
    /// box's diagonal (default 0.02).
    pub stationary_move: f32,
    /// Detections scoring this or more are high-score (0..=1, default 0.5): the only ones
    /// `iou` and `sort` use, ByteTrack's first association; new tracks need 0.1 more in
    /// ByteTrack (at most 0.95, at least this). Lower ones (down to the detector's `--score-threshold`) are ByteTrack's
    /// second association.
    pub high_score: f32,
}

impl Default for TrackParams {
    fn default() -> TrackParams {
        TrackParams {
            kind: TrackerKind::ByteTrack,
            confirm_frames: 3,
            keepalive_ns: 1_000_000_000,
            stationary_ns: 10_000_000_000,
            stationary_move: 0.02,
            high_score: 0.5,
        }
    }
}

/// One detection given to [`Tracker::update`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Observation {
    /// Class index.
    pub class_id: u32,
    /// Score, 0..=1.
    pub score: f32,
    /// `[x1, y1, x2, y2]`, source pixels.
    pub bbox: [f32; 4],
}

/// What happened to a track.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// The track was confirmed: it has its id from now on.
    New,
    /// Its box's bottom centre went into a zone (or was in it when the track was confirmed).
    EnteredZone,
    /// Its box's bottom centre left a zone (or the track ended inside it).
    LeftZone,
    /// Its centre has stayed within `stationary_move` for `stationary_ns`.
    Stationary,
    /// Unseen for longer than `keepalive_ns`, or the stream ended.
    End,
    /// Its reference point crossed a line (with the direction).
    CrossedLine,
    /// It has been in a zone with a loitering time for that long (once per visit).
    Loitering,
}

impl EventKind {
    /// The name on the socket: `new`, `entered_zone`, `left_zone`, `stationary`, `end`.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::New => "new",
            EventKind::EnteredZone => "entered_zone",
            EventKind::LeftZone => "left_zone",
            EventKind::Stationary => "stationary",
            EventKind::End => "end",
            EventKind::CrossedLine => "crossed_line",
            EventKind::Loitering => "loitering",
        }
    }
}

/// One event of a track.
#[derive(Clone, Debug, PartialEq)]
pub struct TrackEvent {
    /// What happened.
    pub kind: EventKind,
    /// The track's id (per camera, from 1).
    pub track_id: u64,
    /// Its class.
    pub class_id: u32,
    /// The best score of its detections so far.
    pub best_score: f32,
    /// For `entered_zone`, `left_zone` and `loitering`: the zone's index in the camera's zones.
    pub zone: Option<usize>,
    /// For `crossed_line`: the line's index in the camera's lines, and the direction.
    pub line: Option<(usize, Direction)>,
    /// For `left_zone` and `loitering`: how long it has been in the zone, ns.
    pub duration_ns: Option<u64>,
    /// Its ground speed now, km/h (a camera with a calibration).
    pub speed_kmh: Option<f32>,
    /// When it was first and last seen (capture time, ns).
    pub first_seen_ns: u64,
    /// When it was last matched to a detection, ns.
    pub last_seen_ns: u64,
    /// The box of its last detection, `[x1, y1, x2, y2]` pixels.
    pub bbox: [f32; 4],
    /// When it happened: the frame's capture time, or the clock's time when a track ends
    /// because no frame came ([`Tracker::expire`]), ns.
    pub at_ns: u64,
}

#[derive(Clone, Debug)]
struct Track {
    /// 0 while tentative.
    id: u64,
    class_id: u32,
    /// Matched in this many frames in a row (tentative tracks only).
    hits: u32,
    kf: Option<Kalman>,
    /// The box associations use: the filter's prediction, else the last detection.
    bbox: [f32; 4],
    /// The box of its last detection (what events report).
    det_box: [f32; 4],
    /// Time not counted against the keep-alive since it was last seen, ns: frames the
    /// pipeline lost while a stage after capture restarted ([`Tracker::pause`]).
    held_ns: u64,
    first_seen_ns: u64,
    last_seen_ns: u64,
    best_score: f32,
    /// Not matched in the last frame.
    lost: bool,
    /// The zones it is in (bit i: zone i).
    zones: u64,
    /// Where its centre was when it last moved, and since when.
    anchor: (f32, f32),
    anchor_ns: u64,
    stationary: bool,
    /// The box of its first detection (where its lines start from when it is confirmed).
    first_box: [f32; 4],
    /// Where it stands with each line of the camera.
    lines: Vec<line::LineState>,
    /// When it entered each zone it is in, ns (index: the zone).
    zone_since: Vec<u64>,
    /// The zones it has loitered in this visit (bit i: zone i).
    loitered: u64,
    /// Its ground positions (a camera with a calibration), and its speed now.
    odometer: speed::Odometer,
    speed_kmh: Option<f32>,
}

impl Track {
    fn confirmed(&self) -> bool {
        self.id != 0
    }

    fn event(&self, kind: EventKind, zone: Option<usize>, at_ns: u64) -> TrackEvent {
        TrackEvent {
            kind,
            track_id: self.id,
            class_id: self.class_id,
            best_score: self.best_score,
            zone,
            line: None,
            duration_ns: None,
            speed_kmh: self.speed_kmh,
            first_seen_ns: self.first_seen_ns,
            last_seen_ns: self.last_seen_ns,
            bbox: self.det_box,
            at_ns,
        }
    }

    /// Unseen for longer than `keepalive_ns` at `now_ns` (time held by a pause not counted).
    fn expired(&self, now_ns: u64, keepalive_ns: u64) -> bool {
        now_ns.saturating_sub(self.last_seen_ns).saturating_sub(self.held_ns) > keepalive_ns
    }
}

/// What a camera's tracker watches besides its tracks' ids.
#[derive(Clone, Debug, Default)]
pub struct Scene {
    /// Its zones (at most 64).
    pub zones: Vec<Zone>,
    /// Each zone's loitering time, ns (`None`: not watched); as long as `zones` or shorter.
    pub loiter_ns: Vec<Option<u64>>,
    /// Its lines.
    pub lines: Vec<Line>,
    /// Its ground calibration, for speeds.
    pub calibration: Option<speed::Calibration>,
}

/// Crossings of one line by one class: `[in, out]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineCount {
    /// The line's index in the camera's lines.
    pub line: usize,
    /// The class.
    pub class_id: u32,
    /// Crossings in, out.
    pub counts: [u64; 2],
}

/// The tracker of one camera: its tracks, its zones, its next id.
pub struct Tracker {
    params: TrackParams,
    zones: Vec<Zone>,
    scene: Scene,
    /// Crossings so far, by line then class.
    line_counts: Vec<LineCount>,
    tracks: Vec<Track>,
    next_id: u64,
    /// The capture time of the last frame, ns.
    last_frame_ns: Option<u64>,
}

impl Tracker {
    /// A tracker with `params` for a camera with `zones` (at most [`zone::MAX_ZONES`]; more
    /// are ignored).
    pub fn new(params: TrackParams, zones: Vec<Zone>) -> Tracker {
        Tracker::with_scene(params, Scene { zones, ..Scene::default() })
    }

    /// A tracker with `params` for a camera with `scene` (at most [`zone::MAX_ZONES`] zones
    /// and [`line::MAX_LINES`] lines; more are ignored).
    pub fn with_scene(params: TrackParams, mut scene: Scene) -> Tracker {
        scene.zones.truncate(zone::MAX_ZONES);
        scene.lines.truncate(line::MAX_LINES);
        scene.loiter_ns.resize(scene.zones.len(), None);
        let zones = std::mem::take(&mut scene.zones);
        Tracker { params, zones, scene, line_counts: vec![], tracks: vec![], next_id: 1, last_frame_ns: None }
    }

    /// Ids from `first` on (a restarted publish stage goes on from where the last one got,
    /// so ids never repeat within a run).
    pub fn first_id(mut self, first: u64) -> Tracker {
        self.next_id = first.max(1);
        self
    }

    /// The id the next confirmed track gets.
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    /// The capture time of the last frame given to [`Tracker::update`], ns.
    pub fn last_frame_ns(&self) -> Option<u64> {
        self.last_frame_ns
    }

    /// The time from the last frame to `t_ns` does not count against any track's keep-alive:
    /// the frames between were lost by the pipeline (a stage after capture restarted), not
    /// looked at and found empty.
    pub fn pause(&mut self, t_ns: u64) {
        let gap = self.last_frame_ns.map_or(0, |l| t_ns.saturating_sub(l));
        for t in &mut self.tracks {
            t.held_ns = t.held_ns.saturating_add(gap);
        }
    }

    /// The camera's zones.
    pub fn zones(&self) -> &[Zone] {
        &self.zones
    }

    /// The camera's lines.
    pub fn lines(&self) -> &[Line] {
        &self.scene.lines
    }

    /// Crossings so far, by line then class (only pairs that crossed).
    pub fn line_counts(&self) -> &[LineCount] {
        &self.line_counts
    }

    /// Counts kept by an earlier tracker of this camera go on from there (a restarted
    /// publish stage: its counters must not go back). Pairs of a line it does not have, or
    /// counted twice, are left out.
    pub fn restore_line_counts(mut self, counts: impl IntoIterator<Item = LineCount>) -> Tracker {
        for c in counts {
            let known = c.line < self.scene.lines.len();
            if known && !self.line_counts.iter().any(|k| (k.line, k.class_id) == (c.line, c.class_id)) {
                let at = self.line_counts.partition_point(|k| (k.line, k.class_id) < (c.line, c.class_id));
                self.line_counts.insert(at, c);
            }
        }
        self
    }

    /// Track `id`'s ground speed now, km/h (a camera with a calibration, a track seen long
    /// enough).
    pub fn speed_kmh(&self, id: u64) -> Option<f32> {
        self.tracks.iter().find(|t| t.id == id).and_then(|t| t.speed_kmh)
    }

    /// Confirmed tracks now, seen or lost.
    pub fn live(&self) -> usize {
        self.tracks.iter().filter(|t| t.confirmed()).count()
    }

    /// For each zone, the confirmed tracks in it now (seen or lost, not ended), by class:
    /// `(zone index, class, count)` for every non-zero count, in zone then class order. A
    /// count is the zone's `entered_zone` events less its `left_zone` events.
    pub fn zone_counts(&self) -> Vec<(usize, u32, u32)> {
        let mut out: Vec<(usize, u32, u32)> = vec![];
        for z in 0..self.zones.len() {
            let mut classes: Vec<u32> =
                self.tracks.iter().filter(|t| t.confirmed() && t.zones & (1 << z) != 0).map(|t| t.class_id).collect();
            classes.sort_unstable();
            for c in classes {
                match out.last_mut() {
                    Some(last) if last.0 == z && last.1 == c => last.2 += 1,
                    _ => out.push((z, c, 1)),
                }
            }
        }
        out
    }

    /// One frame captured at `t_ns` with detections `dets`: returns each detection's track
    /// id (`None`: not part of a confirmed track), and appends what happened to `events`
    /// (in order: the ends of tracks unseen for longer than the keep-alive by this frame's
    /// time, confirmations and their zones, zone crossings, stationary, then the ends of
    /// tracks this frame left unseen for longer than the keep-alive).
    pub fn update(&mut self, t_ns: u64, dets: &[Observation], events: &mut Vec<TrackEvent>) -> Vec<Option<u64>> {
        let p = self.params.clone();
        let mut det_track: Vec<Option<usize>> = vec![None; dets.len()];
        if p.kind == TrackerKind::None {
            return vec![None; dets.len()];
        }
        // A track unseen for longer than the keep-alive by this frame's time has ended, even if
        // the object is back in it (the camera was away): it is not matched again.
        self.expire(t_ns, events);
        self.predict();
        let high: Vec<usize> = (0..dets.len()).filter(|&i| dets[i].score >= p.high_score).collect();
        let low: Vec<usize> = (0..dets.len()).filter(|&i| dets[i].score < p.high_score).collect();
        let matched = self.associate(&p, dets, &high, &low, &mut det_track);
        self.apply_matches(t_ns, dets, &det_track);
        // Unmatched: a tentative track is dropped, a confirmed one is lost.
        let mut keep = matched.clone();
        for (i, t) in self.tracks.iter_mut().enumerate() {
            if !matched[i] {
                t.lost = true;
                keep[i] = t.confirmed();
            }
        }
        self.start_tracks(&p, t_ns, dets, &high, &mut det_track, &mut keep);
        self.observe(&p, t_ns, dets, &det_track, events);
        let ids: Vec<Option<u64>> =
            det_track.iter().map(|t| t.map(|t| self.tracks[t].id).filter(|&id| id != 0)).collect();
        let mut i = 0;
        self.tracks.retain(|_| {
            i += 1;
            keep[i - 1]
        });
        self.last_frame_ns = Some(t_ns);
        self.expire(t_ns, events);
        ids
    }

    /// Moves every track's box to where its motion model expects it in this frame.
    fn predict(&mut self) {
        for t in &mut self.tracks {
            if let Some(kf) = &mut t.kf {
                kf.predict(t.lost);
                t.bbox = kf.bbox();
            }
        }
    }

    /// Matches the tracks to the detections, by the tracker's rounds (ByteTrack: confirmed
    /// tracks to high-score detections, then the ones left to low-score ones, then tentative
    /// tracks; SORT and IoU: one round). Sets each matched detection's track in `det_track`;
    /// returns which tracks were matched.
    fn associate(
        &self,
        p: &TrackParams,
        dets: &[Observation],
        high: &[usize],
        low: &[usize],
        det_track: &mut Vec<Option<usize>>,
    ) -> Vec<bool> {
        let mut matched = vec![false; self.tracks.len()];
        // One association: these tracks against these detections, pairs of one class with IoU >= min.
        let associate = |tracks: &[Track],
                         ts: Vec<usize>,
                         ds: &[usize],
                         min: f32,
                         matched: &mut Vec<bool>,
                         det_track: &mut Vec<Option<usize>>| {
            let ds: Vec<usize> = ds.iter().copied().filter(|&d| det_track[d].is_none()).collect();
            for (r, c) in assign::match_iou(ts.len(), ds.len(), min, |r, c| {
                let (t, d) = (&tracks[ts[r]], &dets[ds[c]]);
                if t.class_id == d.class_id {
                    iou(&t.bbox, &d.bbox)
                } else {
                    0.0
                }
            }) {
                matched[ts[r]] = true;
                det_track[ds[c]] = Some(ts[r]);
            }
        };
        match p.kind {
            TrackerKind::ByteTrack => {
                let confirmed: Vec<usize> = (0..self.tracks.len()).filter(|&i| self.tracks[i].confirmed()).collect();
                associate(&self.tracks, confirmed, high, 0.2, &mut matched, det_track);
                let seen_left: Vec<usize> = (0..self.tracks.len())
                    .filter(|&i| self.tracks[i].confirmed() && !self.tracks[i].lost && !matched[i])
                    .collect();
                associate(&self.tracks, seen_left, low, 0.5, &mut matched, det_track);
                let tentative: Vec<usize> = (0..self.tracks.len()).filter(|&i| !self.tracks[i].confirmed()).collect();
                associate(&self.tracks, tentative, high, 0.3, &mut matched, det_track);
            }
            TrackerKind::Sort | TrackerKind::Iou => {
                let min = if p.kind == TrackerKind::Sort { 0.3 } else { 0.5 };
                associate(&self.tracks, (0..self.tracks.len()).collect(), high, min, &mut matched, det_track);
            }
            TrackerKind::None => {}
        }
        matched
    }

    /// Updates the matched tracks with their detections.
    fn apply_matches(&mut self, t_ns: u64, dets: &[Observation], det_track: &[Option<usize>]) {
        // Update the matched tracks with their detections.
        for (d, t) in det_track.iter().enumerate() {
            let Some(t) = *t else { continue };
            let (tr, det) = (&mut self.tracks[t], &dets[d]);
            match &mut tr.kf {
                Some(kf) => {
                    kf.update(det.bbox);
                    tr.bbox = kf.bbox();
                }
                None => tr.bbox = det.bbox,
            }
            tr.det_box = det.bbox;
            tr.held_ns = 0;
            tr.last_seen_ns = t_ns;
            tr.best_score = tr.best_score.max(det.score);
            tr.lost = false;
            if !tr.confirmed() {
                tr.hits += 1;
            }
        }
    }

    /// Starts a tentative track for each high-score detection left (ByteTrack: above a
    /// higher bar), each kept, and sets it as its detection's track.
    fn start_tracks(
        &mut self,
        p: &TrackParams,
        t_ns: u64,
        dets: &[Observation],
        high: &[usize],
        det_track: &mut [Option<usize>],
        keep: &mut Vec<bool>,
    ) {
        // New tracks from the high-score detections left.
        let start = if p.kind == TrackerKind::ByteTrack {
            (p.high_score + 0.1).min(0.95).max(p.high_score)
        } else {
            p.high_score
        };
        let mut new_of_det: Vec<(usize, usize)> = vec![];
        for &d in high {
            if det_track[d].is_none() && dets[d].score >= start {
                let det = &dets[d];
                let kf = (p.kind != TrackerKind::Iou).then(|| Kalman::new(det.bbox));
                let c = centre(&det.bbox);
                new_of_det.push((d, self.tracks.len()));
                self.tracks.push(Track {
                    id: 0,
                    class_id: det.class_id,
                    hits: 1,
                    kf,
                    bbox: det.bbox,
                    det_box: det.bbox,
                    held_ns: 0,
                    first_seen_ns: t_ns,
                    last_seen_ns: t_ns,
                    best_score: det.score,
                    lost: false,
                    zones: 0,
                    anchor: c,
                    anchor_ns: t_ns,
                    stationary: false,
                    first_box: det.bbox,
                    lines: vec![line::LineState::default(); self.scene.lines.len()],
                    zone_since: vec![0; self.zones.len()],
                    loitered: 0,
                    odometer: speed::Odometer::default(),
                    speed_kmh: None,
                });
                keep.push(true);
            }
        }
        for (d, t) in new_of_det {
            det_track[d] = Some(t);
        }
    }

    /// Confirmations, zones and stationary, for the tracks seen in this frame: their events.
    fn observe(
        &mut self,
        p: &TrackParams,
        t_ns: u64,
        dets: &[Observation],
        det_track: &[Option<usize>],
        events: &mut Vec<TrackEvent>,
    ) {
        // Confirmations, zones and stationary, for the tracks seen in this frame.
        for (d, t) in det_track.iter().enumerate() {
            let Some(t) = *t else { continue };
            let tr = &mut self.tracks[t];
            let confirmed_now = !tr.confirmed();
            if confirmed_now {
                if tr.hits < p.confirm_frames {
                    continue;
                }
                tr.id = self.next_id;
                self.next_id += 1;
                tr.anchor = centre(&tr.bbox);
                tr.anchor_ns = t_ns;
                events.push(tr.event(EventKind::New, None, t_ns));
            }
            // Zones, loitering, lines and speed by the detection's own box: where the feet were seen.
            let mut seen = analytics::Seen { zones: &self.zones, scene: &self.scene, counts: &mut self.line_counts };
            seen.observe(tr, t_ns, &dets[d].bbox, confirmed_now, events);
            let c = centre(&tr.bbox);
            let diag = ((tr.bbox[2] - tr.bbox[0]).powi(2) + (tr.bbox[3] - tr.bbox[1]).powi(2)).sqrt();
            if ((c.0 - tr.anchor.0).powi(2) + (c.1 - tr.anchor.1).powi(2)).sqrt() > p.stationary_move * diag {
                tr.anchor = c;
                tr.anchor_ns = t_ns;
                tr.stationary = false;
            } else if !tr.stationary && t_ns.saturating_sub(tr.anchor_ns) >= p.stationary_ns {
                tr.stationary = true;
                events.push(tr.event(EventKind::Stationary, None, t_ns));
            }
        }
    }

    /// Ends the confirmed tracks unseen for longer than the keep-alive at `now_ns` (a
    /// frame's capture time, or CLOCK_MONOTONIC now when no frame comes): each gets a
    /// `left_zone` for every zone it was in, then `end`.
    pub fn expire(&mut self, now_ns: u64, events: &mut Vec<TrackEvent>) {
        let keepalive = self.params.keepalive_ns;
        self.end_where(now_ns, events, |t| t.confirmed() && t.expired(now_ns, keepalive));
    }

    /// The stream ended: every confirmed track ends now (`left_zone`s, then `end`).
    pub fn finish(&mut self, now_ns: u64, events: &mut Vec<TrackEvent>) {
        self.end_where(now_ns, events, |_| true);
    }

    fn end_where(&mut self, now_ns: u64, events: &mut Vec<TrackEvent>, ends: impl Fn(&Track) -> bool) {
        self.tracks.retain(|t| {
            if !ends(t) {
                return true;
            }
            if t.confirmed() {
                for z in 0..self.zones.len() {
                    if t.zones & (1 << z) != 0 {
                        let mut e = t.event(EventKind::LeftZone, Some(z), now_ns);
                        e.duration_ns = Some(now_ns.saturating_sub(t.zone_since[z]));
                        events.push(e);
                    }
                }
                events.push(t.event(EventKind::End, None, now_ns));
            }
            false
        });
    }
}

fn centre(b: &[f32; 4]) -> (f32, f32) {
    ((b[0] + b[2]) / 2.0, (b[1] + b[3]) / 2.0)
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_scene;

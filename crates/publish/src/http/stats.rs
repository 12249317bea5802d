//! What the web view knows of the stream, from the lines the publish stage hands it: per
//! camera its latest frame line, frames, fps, drops, latency histograms; restarts per stage.
//! Updated on the frame loop ([`Stats::line`], a few µs, no I/O), read by the server's
//! threads under the same lock (they copy out and do their slow work after letting go).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use zcpipe_core::metrics::{LatencySet, SERIES};
use zcpipe_core::schema::{FrameJson, SocketLine};

/// Upper bounds of the latency histograms' buckets in `/metrics`, seconds (`le`; `+Inf`
/// follows): 0.5 ms to 10 s, about three per decade.
pub(crate) const LATENCY_BUCKETS_S: [f64; 14] =
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// How many of a camera's latest frame arrivals its fps is taken over.
pub(crate) const FPS_WINDOW: usize = 30;

/// A camera whose last frame came longer ago than this has an fps of 0.
pub(crate) const FPS_STALE: std::time::Duration = std::time::Duration::from_secs(2);

/// One Prometheus histogram: counts per bucket of [`LATENCY_BUCKETS_S`] (not cumulative;
/// the last is `+Inf`), the sum of the values (seconds) and their count.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Buckets {
    /// Values per bucket: `counts[i]` fell in `(LATENCY_BUCKETS_S[i - 1], LATENCY_BUCKETS_S[i]]`;
    /// the last entry counts those above every bound.
    pub counts: [u64; LATENCY_BUCKETS_S.len() + 1],
    /// Sum of the values, seconds.
    pub sum: f64,
    /// Values recorded.
    pub count: u64,
}

impl Buckets {
    /// Records `v` seconds.
    pub fn record(&mut self, v: f64) {
        let i = LATENCY_BUCKETS_S.iter().position(|b| v <= *b).unwrap_or(LATENCY_BUCKETS_S.len());
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
    }
}

/// One camera as the view knows it.
pub struct CameraStats {
    /// Its name (the frame lines' `camera`).
    pub name: String,
    /// Frame lines seen.
    pub frames: u64,
    /// Frames that never reached publish: the gaps in the capture sequence numbers its frame
    /// lines carry (dropped by a drop-oldest ring, skipped for a newer frame, lost in a
    /// restart after capture). A sequence that goes back (a restarted capture stage starts
    /// again) counts nothing.
    pub drops: u64,
    /// Frames passed over on purpose (the frame lines' `skipped`: by detection rate, for
    /// age, for a newer frame): part of the sequence gaps, not counted in `drops`.
    pub skipped: zcpipe_core::schema::SkippedJson,
    /// The last sequence number seen.
    pub last_seq: Option<u64>,
    /// Its latest frame line.
    pub latest: Option<Arc<FrameJson>>,
    /// Event lines seen.
    pub events: u64,
    /// Detections dropped before tracking: by a mask, by a filter (the frame lines' `dropped`).
    pub masked: u64,
    /// See `masked`.
    pub filtered: u64,
    /// When its last [`FPS_WINDOW`] frame lines arrived.
    arrivals: VecDeque<Instant>,
    /// Latencies for the percentiles of `/api/stats`, µs, per series ([`SERIES`]).
    pub latency: LatencySet,
    /// Latencies for `/metrics`, per series ([`SERIES`]).
    pub buckets: [Buckets; 5],
    /// Its frames' waits for an NPU engine, for `/metrics`.
    pub npu_wait: Buckets,
}

impl CameraStats {
    fn new(name: &str) -> CameraStats {
        CameraStats {
            name: name.to_string(),
            frames: 0,
            drops: 0,
            skipped: Default::default(),
            last_seq: None,
            latest: None,
            events: 0,
            masked: 0,
            filtered: 0,
            arrivals: VecDeque::new(),
            latency: LatencySet::default(),
            buckets: Default::default(),
            npu_wait: Buckets::default(),
        }
    }

    /// Frames per second over its last [`FPS_WINDOW`] arrivals (`(n - 1) / span`); 0 with
    /// fewer than two or when the last came more than [`FPS_STALE`] ago.
    pub fn fps(&self) -> f64 {
        match (self.arrivals.front(), self.arrivals.back()) {
            (Some(a), Some(b)) if self.arrivals.len() >= 2 && b.elapsed() <= FPS_STALE => {
                let span = b.duration_since(*a).as_secs_f64();
                if span > 0.0 {
                    (self.arrivals.len() - 1) as f64 / span
                } else {
                    0.0
                }
            }
            _ => 0.0,
        }
    }
}

/// The stages a `notice` line can name, in pipeline order (`/metrics` shows each, 0 or not).
pub(crate) const STAGES: [&str; 4] = ["capture", "scale", "infer", "publish"];

/// Everything the view knows of the stream.
pub struct Stats {
    /// The run's cameras, in its order (a frame of a camera not in the list is added).
    pub cameras: Vec<CameraStats>,
    /// Restarts seen in notice lines, per stage ([`STAGES`] and any other a notice names).
    pub restarts: BTreeMap<String, u64>,
    /// Frames the notices said were lost while a stage was away (their sum; these are also
    /// gaps in the sequence numbers, except for a capture stage that starts counting again).
    pub(crate) frames_lost_in_restarts: u64,
    /// Changes made to the running pipeline (`config_changed` notices).
    pub config_changes: u64,
    /// Lines seen (frames, events, notices).
    pub lines: u64,
    /// Bumped with every frame line: what a stream waiting for a new frame waits on.
    pub generation: u64,
    /// Whether the stream ended (the end line was seen).
    pub ended: bool,
    /// Each NPU core's busy time so far, µs, from the latest frame line.
    pub npu_busy_us: [u64; 4],
}

impl Stats {
    /// Nothing seen yet, for `cameras`.
    pub fn new(cameras: &[String]) -> Stats {
        Stats {
            cameras: cameras.iter().map(|c| CameraStats::new(c)).collect(),
            restarts: STAGES.iter().map(|s| (s.to_string(), 0)).collect(),
            frames_lost_in_restarts: 0,
            config_changes: 0,
            lines: 0,
            generation: 0,
            ended: false,
            npu_busy_us: [0; 4],
        }
    }

    /// The index of camera `name`, added when it is new.
    fn camera(&mut self, name: &str) -> usize {
        match self.cameras.iter().position(|c| c.name == name) {
            Some(i) => i,
            None => {
                self.cameras.push(CameraStats::new(name));
                self.cameras.len() - 1
            }
        }
    }

    /// Camera `name` joined the run (after the others).
    pub fn add_camera(&mut self, name: &str) {
        self.camera(name);
    }

    /// The index of camera `name`, if the view knows it.
    pub fn find(&self, name: &str) -> Option<usize> {
        self.cameras.iter().position(|c| c.name == name)
    }

    /// Takes one line into account (`frame` is the frame line itself, shared with whoever
    /// reads it later).
    pub fn line(&mut self, line: &SocketLine) {
        self.lines += 1;
        match line {
            SocketLine::Frame(f) => {
                let i = self.camera(&f.camera);
                let c = &mut self.cameras[i];
                c.frames += 1;
                let skipped = f.skipped.unwrap_or_default();
                if let Some(last) = c.last_seq.filter(|l| f.seq > *l) {
                    c.drops += (f.seq - last - 1).saturating_sub(skipped.total());
                }
                c.skipped.rate += skipped.rate;
                c.skipped.still += skipped.still;
                c.skipped.age += skipped.age;
                c.skipped.newer += skipped.newer;
                let dropped = f.dropped.unwrap_or_default();
                c.masked += dropped.masked as u64;
                c.filtered += dropped.filtered as u64;
                c.last_seq = Some(f.seq);
                if c.arrivals.len() == FPS_WINDOW {
                    c.arrivals.pop_front();
                }
                c.arrivals.push_back(Instant::now());
                let l = &f.latency_us;
                let us = [l.capture, l.scale, l.infer, l.publish, l.total];
                c.latency.record(&us.map(|v| (v > 0.0).then_some(v)));
                for (b, v) in c.buckets.iter_mut().zip(us) {
                    if v > 0.0 {
                        b.record(v / 1e6);
                    }
                }
                c.npu_wait.record(f.npu.wait_us as f64 / 1e6);
                // The infer process's totals so far (a restarted one starts again from 0: a
                // counter reset, as Prometheus expects).
                self.npu_busy_us = f.npu.busy_us;
                let c = &mut self.cameras[i];
                c.latest = Some(Arc::new(f.clone()));
                self.generation += 1;
            }
            SocketLine::Event(e) => {
                let i = self.camera(&e.camera);
                self.cameras[i].events += 1;
            }
            SocketLine::Notice(n) if n.event == "config_changed" => self.config_changes += 1,
            SocketLine::Notice(n) => {
                *self.restarts.entry(n.stage.clone()).or_default() += 1;
                self.frames_lost_in_restarts += n.frames_lost;
            }
            SocketLine::End(_) => self.ended = true,
            // Clips are counted from the record folder's index (`/metrics`).
            SocketLine::Clip(_) => {}
        }
    }

    /// `/api/stats` without the server's own counters: per camera frames, fps, drops, the
    /// latest frame's seq, size and detection count, latency percentiles (µs) per series;
    /// restarts per stage.
    pub fn json(&self) -> serde_json::Value {
        let cams: serde_json::Map<String, serde_json::Value> = self
            .cameras
            .iter()
            .map(|c| {
                let latest = c.latest.as_ref();
                let v = serde_json::json!({
                    "frames": c.frames,
                    "fps": (c.fps() * 10.0).round() / 10.0,
                    "drops": c.drops,
                    "skipped": c.skipped,
                    "events": c.events,
                    "last_seq": c.last_seq,
                    "width": latest.map(|f| f.width),
                    "height": latest.map(|f| f.height),
                    "detections": latest.map(|f| f.detections.len()),
                    "latency_us": c.latency.summary(),
                });
                (c.name.clone(), v)
            })
            .collect();
        serde_json::json!({
            "cameras": cams,
            "camera_order": self.cameras.iter().map(|c| c.name.clone()).collect::<Vec<_>>(),
            "restarts": self.restarts,
            "frames_lost_in_restarts": self.frames_lost_in_restarts,
            "config_changes": self.config_changes,
            "lines": self.lines,
            "ended": self.ended,
            "latency_series": SERIES,
        })
    }
}

/// Lines for the web view's tests.
#[cfg(test)]
pub(crate) mod tests_support {
    use zcpipe_core::schema::{FrameJson, LatencyJson, SocketLine};

    /// A 64x48 frame line of `camera` with no detections and these latencies (µs; infer
    /// missing).
    pub(crate) fn frame(camera: &str, seq: u64, total_us: f64) -> SocketLine {
        SocketLine::Frame(FrameJson {
            camera: camera.into(),
            seq,
            timestamp_ns: seq * 100_000_000,
            width: 64,
            height: 48,
            latency_us: LatencyJson { capture: 100.0, scale: 2000.0, infer: 0.0, publish: 50.0, total: total_us },
            detections: vec![],
            zones: None,
            skipped: None,
            npu: Default::default(),
            ..Default::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::frame;
    use super::*;
    use zcpipe_core::schema::NoticeJson;

    #[test]
    fn drops_are_sequence_gaps_and_restarts_come_from_notices() {
        let mut s = Stats::new(&["cam0".into()]);
        for seq in [0, 1, 2, 5, 6, 10] {
            s.line(&frame("cam0", seq, 3000.0));
        }
        s.line(&frame("door", 7, 3000.0));
        // A capture stage that started again counts no drop.
        s.line(&frame("cam0", 0, 3000.0));
        s.line(&SocketLine::Notice(NoticeJson {
            stage: "infer".into(),
            camera: String::new(),
            event: "restarted".into(),
            frames_lost: 4,
            seq: 1,
            gap_s: None,
            change: None,
        }));
        let c = &s.cameras[0];
        assert_eq!((c.frames, c.drops, c.last_seq), (7, 2 + 3, Some(0)));
        assert_eq!(s.cameras[1].name, "door", "a camera not in the list is added");
        assert_eq!((s.restarts["infer"], s.restarts["capture"], s.frames_lost_in_restarts), (1, 0, 4));
        // Latencies: 3 ms total is in the (2.5 ms, 5 ms] bucket; a missing stamp (0) is not recorded.
        assert_eq!(c.buckets[4].counts[3], 7);
        assert_eq!(c.buckets[2].count, 0);
        assert!((c.buckets[4].sum - 0.021).abs() < 1e-9);
        let j = s.json();
        assert_eq!(j["cameras"]["cam0"]["drops"], 5);
        assert_eq!(j["cameras"]["cam0"]["latency_us"]["total"]["count"], 7);
        assert_eq!(j["restarts"]["infer"], 1);
    }

    #[test]
    fn a_value_on_a_bound_is_in_that_bucket() {
        let mut b = Buckets::default();
        b.record(0.0005);
        b.record(10.0);
        b.record(11.0);
        assert_eq!((b.counts[0], b.counts[13], b.counts[14], b.count), (1, 1, 1, 3));
    }
}

//! The detections socket's schema: every line a client gets, defined once.
//!
//! Each line is one JSON object ending in `\n`, with a `"type"` field naming its kind:
//! - `"frame"`: one per published frame ([`FrameJson`]):
//!   `{"type": "frame", "camera": str, "seq": u64, "timestamp_ns": u64, "width": u32, "height": u32,
//!   "latency_us": {"capture": f64, "scale": f64, "infer": f64, "publish": f64, "total": f64},
//!   "detections": [{"class_id": u32, "label": str, "score": f32, "box": [x1, y1, x2, y2], "track_id": u64,
//!   "speed_kmh": f32}], "zones": {zone: {label: count}}, "lines": {line: {label: {"in": u64, "out": u64}}},
//!   "dropped": {"masked": u32, "filtered": u32}, "skipped": {"rate": u64, "still": u64, "age": u64, "newer": u64}}`
//!   with `timestamp_ns` the capture time (CLOCK_MONOTONIC) and boxes in source-frame pixels;
//!   `track_id` only on a detection that is part of a confirmed track (never with
//!   `--tracker none`), `zones` only for a camera with zones (each zone's tracked objects
//!   by label; `{}` for an empty zone), `lines` only for a camera with lines (each line's
//!   crossings by label since the run started), `speed_kmh` only with a calibration,
//!   `dropped` only when a mask or filter dropped detections of the frame, `skipped` only after frames of the camera were passed
//!   over on purpose since its previous line (by `--detect-fps`, `--motion`, `--max-age`, or for a newer
//!   frame: [`SkippedJson`]), so a gap in `seq` that it covers is not a drop;
//! - `"event"`: something happened to a tracked object ([`EventJson`]), after the frame line
//!   of the frame it happened in: `{"type": "event", "event": "new" | "entered_zone" |
//!   "left_zone" | "loitering" | "crossed_line" | "stationary" | "end", "camera": str,
//!   "track_id": u64, "label": str, "class_id": u32, "score": f32, "zone": str | null,
//!   "line": str, "direction": "in" | "out", "duration_s": f64, "speed_kmh": f32 (each only
//!   where it applies), "first_seen_ns": u64,
//!   "last_seen_ns": u64, "timestamp_ns": u64, "seq": u64 (left out without a frame),
//!   "box": [x1, y1, x2, y2]}` (see
//!   the zcpipe-track crate for when each happens);
//! - `"notice"`: a stage of the pipeline died and came back ([`NoticeJson`]), before the
//!   first frame after it: `{"type": "notice", "stage": str, "camera": str, "event": "restarted"
//!   | "reconnected", "frames_lost": u64, "seq": u64, "gap_s": f64}` (`seq`: the frame that follows; `frames_lost`: see
//!   [`crate::frame::RestartMark`]); or the running pipeline was changed (`zcpipe ctl`, a
//!   reload: [`crate::control`]): `"event": "config_changed"` with `"change": str` (in words),
//!   `"stage": "run"`, `frames_lost` and `seq` 0;
//! - `"end"`: the last line before EOF ([`EndJson`]):
//!   `{"type": "end", "end": true, "frames": u64, "reason": str}`.
//!
//! The publish stage writes these to its clients and (`--print json`, `zcpipe run --json`)
//! to stdout; `zcpipe watch` and the display read them back with the same types. Readers ignore fields they
//! do not know, so fields may be added; a new kind of line is a new [`SocketLine`] variant.

use std::collections::BTreeMap;

use serde::{de::Error as _, Deserialize, Deserializer, Serialize};

/// One line of the detections socket, tagged by its `"type"` field.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SocketLine {
    /// `"type": "frame"`: one frame's detections.
    Frame(FrameJson),
    /// `"type": "notice"`: a stage restarted; the stream goes on.
    Notice(NoticeJson),
    /// `"type": "event"`: a tracked object's event.
    Event(EventJson),
    /// `"type": "end"`: the stream ended; EOF follows.
    End(EndJson),
    /// `"type": "clip"`: the recorder closed a clip (with `--record-dir`).
    Clip(ClipJson),
}

impl SocketLine {
    /// The line as sent: compact JSON and a final `\n`.
    ///
    /// Errors only if serde_json fails to serialise it (it holds no map with non-string
    /// keys, so it does not).
    pub fn to_line(&self) -> serde_json::Result<String> {
        let mut line = serde_json::to_string(self)?;
        line.push('\n');
        Ok(line)
    }

    /// Reads one line as a reader should: by its `"type"`; a line without one comes from a
    /// zcpipe from before the field existed (a publisher not yet upgraded), whose end line
    /// is the one with `"end": true` and whose other lines are frames. Errors on anything
    /// else (not JSON, an unknown type, missing fields).
    pub fn parse(line: &str) -> serde_json::Result<SocketLine> {
        let mut v: serde_json::Value = serde_json::from_str(line)?;
        if let Some(o) = v.as_object_mut().filter(|o| !o.contains_key("type")) {
            let kind = if o.get("end") == Some(&serde_json::Value::Bool(true)) { "end" } else { "frame" };
            o.insert("type".into(), kind.into());
        }
        serde_json::from_value(v)
    }
}

/// One detection as published.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct DetectionJson {
    /// Class index.
    pub class_id: u32,
    /// Class label (`class_N` if the label list has no entry).
    pub label: String,
    /// Score in 0..1.
    #[serde(deserialize_with = "f32_in_range")]
    pub score: f32,
    /// `[x1, y1, x2, y2]` in source-frame pixels.
    #[serde(rename = "box", deserialize_with = "f32x4_in_range")]
    pub bbox: [f32; 4],
    /// The confirmed track this detection belongs to (ids per camera, from 1); absent with
    /// `--tracker none` and on detections of no confirmed track.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub track_id: Option<u64>,
    /// Its track's ground speed, km/h: only on a camera with a `--calibration`, for a track
    /// seen long enough to have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed_kmh: Option<f32>,
}

/// A line crossing's direction: along the line from its first point to its last as drawn
/// on the screen, `in` is from its left-hand side to its right-hand side, `out` back.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// From the line's left-hand side to its right-hand side.
    In,
    /// From its right-hand side to its left-hand side.
    Out,
}

impl Direction {
    /// `in` or `out`.
    pub fn name(self) -> &'static str {
        match self {
            Direction::In => "in",
            Direction::Out => "out",
        }
    }
}

/// Detections of a frame dropped before tracking.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(default)]
pub struct DroppedJson {
    /// By a mask (their box's bottom centre in it).
    pub masked: u32,
    /// By their label's filter (area, score, ratio).
    pub filtered: u32,
}

/// A line's crossings by one label, since the run started.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct CrossingsJson {
    /// Crossings `in`.
    #[serde(rename = "in")]
    pub into: u64,
    /// Crossings `out`.
    pub out: u64,
}

/// Reads an `f32` from a JSON number, refusing one beyond `f32`'s range: serde would read it
/// as infinity, which serde_json writes back as `null`, so the line would not read back.
fn f32_in_range<'de, D: Deserializer<'de>>(d: D) -> Result<f32, D::Error> {
    let v = f64::deserialize(d)?;
    let f = v as f32;
    if f.is_finite() {
        Ok(f)
    } else {
        Err(D::Error::custom(format!("{v:?} is out of range for f32")))
    }
}

/// [`f32_in_range`] for each of four numbers.
fn f32x4_in_range<'de, D: Deserializer<'de>>(d: D) -> Result<[f32; 4], D::Error> {
    let v = <[f64; 4]>::deserialize(d)?;
    match v.map(|x| x as f32) {
        f if f.iter().all(|x| x.is_finite()) => Ok(f),
        _ => Err(D::Error::custom(format!("{v:?} is out of range for f32"))),
    }
}

/// Per-stage and end-to-end latency of a frame, µs, rounded to 0.1 µs (0 where a stamp is
/// missing).
///
/// A line cannot carry the time it takes to send itself: its `publish` (and so `total`) ends
/// when the publish stage builds the line, before serialising and sending it. The publish
/// stage's latency histograms (its stage report, the run summary) end once the line was
/// handed to every client and printed.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct LatencyJson {
    /// Capture: from the capture timestamp to the frame entering the ring.
    pub capture: f64,
    /// Scale, including its wait in the capture ring.
    pub scale: f64,
    /// Infer, including its wait in the scale ring.
    pub infer: f64,
    /// Publish, including its wait in the infer ring, up to building this line.
    pub publish: f64,
    /// Capture timestamp to building this line: the sum of the four above (before rounding).
    pub total: f64,
}

/// The `"frame"` line: one frame's detections.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct FrameJson {
    /// The camera the frame came from: its name in `zcpipe run --source NAME=...` (`cam0`,
    /// `cam1`, ... for unnamed ones). Empty from a publisher older than the field.
    #[serde(default)]
    pub camera: String,
    /// Frame sequence number (per camera: each camera's capture counts its own frames).
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
    /// For a camera with zones: each zone's confirmed tracks now (seen, or lost for less
    /// than the keep-alive), by label; absent for a camera without zones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zones: Option<BTreeMap<String, BTreeMap<String, u32>>>,
    /// For a camera with lines: each line's crossings by label since the run started
    /// (`{}` for a line nothing crossed yet); absent for a camera without lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lines: Option<BTreeMap<String, BTreeMap<String, CrossingsJson>>>,
    /// Detections of this frame dropped before tracking by a `--mask` or a `--filter`
    /// (absent when none was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped: Option<DroppedJson>,
    /// Frames of this camera passed over since its previous line, by cause (absent when
    /// none was): with `--detect-fps` the sequence numbers have gaps that are not drops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<SkippedJson>,
    /// The NPU's numbers for this frame, for the publish process's own outputs (`/metrics`);
    /// never sent to clients.
    #[serde(skip)]
    pub npu: NpuFacts,
}

/// The label of class `class` (`class_N` if the list has no entry).
pub fn label_of(labels: &[String], class: u32) -> String {
    labels.get(class as usize).cloned().unwrap_or_else(|| format!("class_{class}"))
}

impl FrameJson {
    /// The line of one frame's record `d` of camera `camera` (`lat`: the latencies of its
    /// stamps, µs, capture, scale, infer, publish and total; see [`LatencyJson`] for where
    /// the publish latency ends): scores rounded to 0.001 and boxes to 0.1 pixel, as every
    /// output prints them (the publish stage's lines, the inference service's answers).
    pub fn of_record(
        d: &crate::detections::DetectionsDesc,
        camera: &str,
        labels: &[String],
        lat: &[Option<f64>; 5],
    ) -> FrameJson {
        let r = |v: Option<f64>| (v.unwrap_or(0.0) * 10.0).round() / 10.0;
        FrameJson {
            camera: camera.to_string(),
            seq: d.seq,
            timestamp_ns: d.timestamp_ns,
            width: d.width,
            height: d.height,
            latency_us: LatencyJson {
                capture: r(lat[0]),
                scale: r(lat[1]),
                infer: r(lat[2]),
                publish: r(lat[3]),
                total: r(lat[4]),
            },
            detections: d.dets[..(d.count as usize).min(d.dets.len())]
                .iter()
                .map(|x| DetectionJson {
                    class_id: x.class_id,
                    label: label_of(labels, x.class_id),
                    score: (x.score * 1000.0).round() / 1000.0,
                    bbox: x.bbox.map(|v| (v * 10.0).round() / 10.0),
                    track_id: None,
                    ..Default::default()
                })
                .collect(),
            zones: None,
            skipped: SkippedJson::of(&d.skipped),
            npu: NpuFacts { wait_us: d.skipped.wait_us, busy_us: d.npu_busy_us },
            ..Default::default()
        }
    }
}

/// What a frame line knows of the NPU inside the publish process ([`FrameJson::npu`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NpuFacts {
    /// This frame's wait for an engine, µs.
    pub wait_us: u32,
    /// Each NPU core's busy time so far, µs (core k at index k).
    pub busy_us: [u64; 4],
}

/// A frame line's `"skipped"` object: frames of its camera passed over since its previous line.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct SkippedJson {
    /// By the camera's detection rate (`--detect-fps`).
    pub rate: u64,
    /// As still (`--motion`: the picture did not change since the last frame inferred).
    pub still: u64,
    /// Older than `--max-age` when the NPU was free.
    pub age: u64,
    /// Replaced by a newer frame of the camera while waiting for the NPU.
    pub newer: u64,
}

impl SkippedJson {
    /// The object for a record's counts (`None`: nothing was passed over).
    pub fn of(s: &crate::detections::Skipped) -> Option<SkippedJson> {
        (s.total() > 0).then_some(SkippedJson {
            rate: s.rate.into(),
            still: s.still.into(),
            age: s.age.into(),
            newer: s.newer.into(),
        })
    }

    /// Frames passed over in all.
    pub fn total(&self) -> u64 {
        self.rate + self.still + self.age + self.newer
    }
}

/// The `"event"` line: something happened to a tracked object (the zcpipe-track crate says when).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct EventJson {
    /// `new` (the track was confirmed), `entered_zone`, `left_zone`, `loitering`,
    /// `crossed_line`, `stationary`, `end` (unseen for longer than the keep-alive, or the
    /// stream ended).
    pub event: String,
    /// The camera (as in the frame lines).
    pub camera: String,
    /// The track (per camera, from 1; the `track_id` of its detections).
    pub track_id: u64,
    /// Its label.
    pub label: String,
    /// Its class index.
    pub class_id: u32,
    /// The best score of its detections so far, 0..1.
    #[serde(deserialize_with = "f32_in_range")]
    pub score: f32,
    /// The zone, for `entered_zone`, `left_zone` and `loitering`; `null` otherwise.
    #[serde(default)]
    pub zone: Option<String>,
    /// The line, for `crossed_line`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<String>,
    /// The direction, for `crossed_line`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,
    /// For `left_zone` and `loitering`: how long the track has been in the zone, seconds
    /// (capture time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    /// Its ground speed, km/h (a camera with a `--calibration`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed_kmh: Option<f32>,
    /// When the track was first seen (capture time, CLOCK_MONOTONIC ns).
    pub first_seen_ns: u64,
    /// When it was last seen, ns.
    pub last_seen_ns: u64,
    /// When this happened: the capture time of the frame it happened in, or (an `end` when
    /// no frame came) the clock's time, ns.
    pub timestamp_ns: u64,
    /// The frame it happened in (its `seq`); left out for an `end` no frame brought (the
    /// camera went quiet, or the stream ended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// Its last box, `[x1, y1, x2, y2]` source pixels.
    #[serde(rename = "box", deserialize_with = "f32x4_in_range")]
    pub bbox: [f32; 4],
}

/// The `"notice"` line: a stage of the pipeline died and was restarted, or a network
/// camera's stream dropped and came back, and the stream goes on; sent before the first
/// frame after it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct NoticeJson {
    /// The stage that restarted (`capture`, `scale`, `infer`, `publish`); `capture` for a
    /// reconnect.
    pub stage: String,
    /// With several cameras, for a capture restart or a reconnect: the camera (its frame
    /// follows); empty (left out) for a stage that serves every camera.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub camera: String,
    /// What happened: `restarted` (the stage's process died and a new one took over) or
    /// `reconnected` (the capture stage's network source came back; nothing restarted).
    pub event: String,
    /// Frames lost while it was gone (counted by its upstream neighbour: dropped while no
    /// consumer was there, and those it held when it died; for capture, the frames the
    /// source did not make while it was down, at its nominal rate).
    pub frames_lost: u64,
    /// The sequence number of the frame that follows.
    pub seq: u64,
    /// Seconds between the camera's last frame before and the one that follows (left out
    /// when the camera had no frame before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gap_s: Option<f64>,
    /// With `event` `config_changed`: what changed, in words (`camera door: zone in
    /// replaced`); left out otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<String>,
}

/// The `"clip"` line: the recorder (`zcpipe stage record`) closed a clip, read from its index
/// by the publish stage within about a second.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ClipJson {
    /// The camera.
    pub camera: String,
    /// The clip's id in the record folder's index (the web view's `/clips/<id>.mp4`).
    pub id: i64,
    /// Its first picture, Unix ms.
    pub start_ms: i64,
    /// Its last picture, Unix ms.
    pub end_ms: i64,
    /// It was written whole; `false`: it is cut short (`reason` says why) and plays up to
    /// its last whole fragment.
    pub complete: bool,
    /// Why it is incomplete (left out when complete).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Its tracks' labels.
    pub labels: Vec<String>,
    /// Its tracks' ids (as in the event lines).
    pub tracks: Vec<u64>,
    /// The zones its tracks entered.
    pub zones: Vec<String>,
    /// The file's size, bytes.
    pub bytes: u64,
    /// The file on the recording machine (the record folder joined with the index's path).
    pub path: String,
    /// Its address in the web view (`/clips/<id>.mp4`, below the web view's own address),
    /// when the publish stage serves the web view; left out otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Its thumbnail in the web view (`/clips/<id>.jpg`: its picture at the event), when the
    /// recorder made one and the publish stage serves the web view; left out otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thumbnail: Option<String>,
}

/// The `"end"` line: the stream ended (the source ended, a signal, or a stage hung up).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct EndJson {
    /// Always `true` (the end line's mark before lines had a `type`).
    pub end: bool,
    /// Frames published.
    pub frames: u64,
    /// Why the stream ended, as the publish stage logs it (`end of stream`, `signal`, or
    /// the error, e.g. `infer stage hung up`).
    pub reason: String,
}

/// Follows the detections socket at `path` for as long as the publish stage runs, and
/// again after it restarts (connecting as [`connect_retrying`] does, 100 ms doubling to
/// 2 s): each line read goes to `on_line`, which returns `false` to stop following. Ends
/// then, or when `stop` is set (looked at every 200 ms while the socket is quiet). What the
/// display and the recorder read the tracker's lines with.
pub fn follow_lines(
    path: &std::path::Path,
    stop: &std::sync::atomic::AtomicBool,
    mut on_line: impl FnMut(&str) -> bool,
) {
    use std::io::BufRead;
    let (first, max) = (std::time::Duration::from_millis(100), std::time::Duration::from_secs(2));
    while let Some(s) = connect_retrying(path, None, first, max, stop) {
        // A read timeout, so the stop flag is looked at while the stream is quiet.
        let _ = s.set_read_timeout(Some(std::time::Duration::from_millis(200)));
        let mut r = std::io::BufReader::new(s);
        let mut line = String::new();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            match r.read_line(&mut line) {
                Ok(0) => break,
                Ok(_) => {
                    if !on_line(&line) {
                        return;
                    }
                    line.clear();
                }
                // A timeout keeps what was read of a line so far.
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(_) => break,
            }
        }
    }
}

/// Connects to a detections socket at `path`, at once and then again after back-off
/// (`first`, doubling up to `max`), until it connects, `within` has passed since the call
/// (`None`: no limit) or `stop` is set; `None` then. What every reader does when the
/// publish stage is not up yet or died and is being restarted (`zcpipe watch`, the display).
pub fn connect_retrying(
    path: &std::path::Path,
    within: Option<std::time::Duration>,
    first: std::time::Duration,
    max: std::time::Duration,
    stop: &std::sync::atomic::AtomicBool,
) -> Option<std::os::unix::net::UnixStream> {
    let t = std::time::Instant::now();
    let mut delay = first;
    loop {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        if let Ok(s) = std::os::unix::net::UnixStream::connect(path) {
            return Some(s);
        }
        let left = within.map(|w| w.saturating_sub(t.elapsed()));
        if left == Some(std::time::Duration::ZERO) {
            return None;
        }
        std::thread::sleep(left.map_or(delay, |l| l.min(delay)));
        delay = (delay * 2).min(max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_has_its_type_and_reads_back() {
        let f = FrameJson {
            camera: "front".into(),
            seq: 3,
            timestamp_ns: 7,
            width: 640,
            height: 480,
            latency_us: LatencyJson { capture: 1.0, scale: 2.0, infer: 3.0, publish: 4.0, total: 10.0 },
            detections: vec![DetectionJson {
                class_id: 0,
                label: "person".into(),
                score: 0.5,
                bbox: [1.0, 2.0, 3.0, 4.0],
                track_id: None,
                ..Default::default()
            }],
            zones: None,
            skipped: None,
            npu: Default::default(),
            ..Default::default()
        };
        let frame = SocketLine::Frame(f).to_line().unwrap();
        assert_eq!(
            frame,
            concat!(
                "{\"type\":\"frame\",\"camera\":\"front\",\"seq\":3,\"timestamp_ns\":7,\"width\":640,\"height\":480,",
                "\"latency_us\":{\"capture\":1.0,\"scale\":2.0,\"infer\":3.0,\"publish\":4.0,\"total\":10.0},",
                "\"detections\":[{\"class_id\":0,\"label\":\"person\",\"score\":0.5,\"box\":[1.0,2.0,3.0,4.0]}]}\n"
            )
        );
        let end = SocketLine::End(EndJson { end: true, frames: 5, reason: "end of stream".into() }).to_line().unwrap();
        assert_eq!(end, "{\"type\":\"end\",\"end\":true,\"frames\":5,\"reason\":\"end of stream\"}\n");
        let notice = SocketLine::Notice(NoticeJson {
            stage: "infer".into(),
            camera: String::new(),
            event: "restarted".into(),
            frames_lost: 12,
            seq: 99,
            gap_s: None,
            change: None,
        })
        .to_line()
        .unwrap();
        assert_eq!(
            notice,
            "{\"type\":\"notice\",\"stage\":\"infer\",\"event\":\"restarted\",\"frames_lost\":12,\"seq\":99}\n"
        );
        for line in [&frame, &end, &notice] {
            let back: SocketLine = serde_json::from_str(line).unwrap();
            assert_eq!(back.to_line().unwrap(), *line, "reads back to the same line");
        }
        // Readers ignore fields added later; a line without a known type is refused.
        let extra = end.replace("\"end\":true", "\"end\":true,\"later\":1");
        assert!(matches!(serde_json::from_str(&extra).unwrap(), SocketLine::End(EndJson { frames: 5, .. })));
        assert!(serde_json::from_str::<SocketLine>("{\"end\":true,\"frames\":5,\"reason\":\"x\"}").is_err());
        assert!(serde_json::from_str::<SocketLine>("{\"type\":\"other\"}").is_err());
    }

    #[test]
    fn tracked_lines_carry_ids_zones_and_events() {
        let det = DetectionJson {
            class_id: 0,
            label: "person".into(),
            score: 0.9,
            bbox: [1.0, 2.0, 3.0, 4.0],
            track_id: Some(7),
            ..Default::default()
        };
        let zones = BTreeMap::from([
            ("door".to_string(), BTreeMap::from([("person".to_string(), 1)])),
            ("gate".to_string(), BTreeMap::new()),
        ]);
        let f = FrameJson {
            camera: "cam0".into(),
            seq: 1,
            timestamp_ns: 2,
            width: 8,
            height: 6,
            latency_us: LatencyJson::default(),
            detections: vec![det],
            zones: Some(zones),
            skipped: None,
            npu: Default::default(),
            ..Default::default()
        };
        let line = SocketLine::Frame(f).to_line().unwrap();
        assert!(
            line.contains(
                "\"box\":[1.0,2.0,3.0,4.0],\"track_id\":7}],\"zones\":{\"door\":{\"person\":1},\"gate\":{}}}"
            ),
            "{line}"
        );
        assert_eq!(SocketLine::parse(&line).unwrap().to_line().unwrap(), line);
        let e = EventJson {
            event: "entered_zone".into(),
            camera: "front".into(),
            track_id: 7,
            label: "person".into(),
            class_id: 0,
            score: 0.91,
            zone: Some("door".into()),
            first_seen_ns: 10,
            last_seen_ns: 20,
            timestamp_ns: 20,
            seq: Some(41),
            bbox: [1.0, 2.0, 3.0, 4.0],
            ..Default::default()
        };
        let line = SocketLine::Event(e.clone()).to_line().unwrap();
        assert_eq!(
            line,
            "{\"type\":\"event\",\"event\":\"entered_zone\",\"camera\":\"front\",\"track_id\":7,\"label\":\"person\",\"class_id\":0,\"score\":0.91,\
             \"zone\":\"door\",\"first_seen_ns\":10,\"last_seen_ns\":20,\"timestamp_ns\":20,\"seq\":41,\"box\":[1.0,2.0,3.0,4.0]}\n"
        );
        assert_eq!(SocketLine::parse(&line).unwrap(), SocketLine::Event(e.clone()));
        let end = SocketLine::Event(EventJson { event: "end".into(), zone: None, seq: None, ..e }).to_line().unwrap();
        assert!(end.contains("\"zone\":null") && !end.contains("\"seq\""), "a zone-less event says so: {end}");
    }

    #[test]
    fn lines_from_before_the_type_field_are_still_read() {
        let old_end = "{\"end\":true,\"frames\":5,\"reason\":\"signal\"}";
        assert_eq!(
            SocketLine::parse(old_end).unwrap(),
            SocketLine::End(EndJson { end: true, frames: 5, reason: "signal".into() })
        );
        let old_frame = "{\"seq\":1,\"timestamp_ns\":2,\"width\":3,\"height\":4,\"latency_us\":{\"capture\":0.0,\"scale\":0.0,\"infer\":0.0,\"publish\":0.0,\"total\":0.0},\"detections\":[]}";
        assert!(matches!(SocketLine::parse(old_frame).unwrap(), SocketLine::Frame(FrameJson { seq: 1, width: 3, .. })));
        let new = SocketLine::End(EndJson { end: true, frames: 1, reason: "x".into() });
        assert_eq!(SocketLine::parse(&new.to_line().unwrap()).unwrap(), new);
        assert!(SocketLine::parse("{\"type\":\"other\"}").is_err());
        assert!(SocketLine::parse("not json").is_err());
        assert!(SocketLine::parse("{\"seq\":1}").is_err(), "a frame without its fields");
    }

    /// Regression (fuzz/ watch_lines): serde_json's default float parser is sometimes one ulp
    /// off, so a latency did not read back as written (4.5555555555555546e103 came back
    /// 4.555555555555555e103).
    #[test]
    fn floats_read_back_exactly() {
        let latency_us = LatencyJson {
            capture: 1.0,
            scale: 240.0,
            infer: 3.0,
            publish: 4.5555555555555546e103,
            total: 1.0715660391465826e-75,
        };
        let line = SocketLine::Frame(FrameJson {
            camera: "cam0".into(),
            seq: 4,
            timestamp_ns: 7,
            width: 640,
            height: 480,
            latency_us,
            detections: vec![],
            zones: None,
            skipped: None,
            npu: Default::default(),
            ..Default::default()
        });
        assert_eq!(SocketLine::parse(&line.to_line().unwrap()).unwrap(), line);
    }

    /// Regression (fuzz/ watch_lines): a box coordinate or score beyond f32's range was read
    /// as infinity, which writes back as `null`: the line read, but not what it wrote back.
    #[test]
    fn a_number_beyond_f32_is_refused() {
        let det = |score: &str, x1: &str| {
            format!("{{\"type\":\"frame\",\"seq\":3,\"timestamp_ns\":7,\"width\":640,\"height\":485,\"latency_us\":{{\"capture\":0.8,\"scale\":2.0,\"infer\":3.0,\"publish\":4.0,\"total\":10.0}},\"detections\":[{{\"class_id\":0,\"label\":\"person\",\"score\":{score},\"box\":[{x1},2.0,3.0,4.0]}}]}}")
        };
        let SocketLine::Frame(f) = SocketLine::parse(&det("0.5", "3.4028235e38")).unwrap() else {
            panic!("a frame line")
        };
        assert_eq!((f.detections[0].score, f.detections[0].bbox[0]), (0.5, f32::MAX), "f32::MAX itself is in range");
        let e = SocketLine::parse(&det("0.5", &format!("{}1.0", "7".repeat(120)))).unwrap_err().to_string();
        assert!(e.starts_with("[7.777777777777777e120, 2.0, 3.0, 4.0] is out of range for f32"), "{e}");
        let e = SocketLine::parse(&det("1e39", "1.0")).unwrap_err().to_string();
        assert!(e.starts_with("1e39 is out of range for f32"), "{e}");
    }
}

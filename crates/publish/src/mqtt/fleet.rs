//! What a board says for a fleet view (`zcpipe fleet`): the board's id, each event's stable
//! id, and the board's retained status. Versioned ([`WIRE_VERSION`]): a reader refuses a
//! message of a version it does not know, by its `v`.
//!
//! - Every message on `P/<camera>/events` (a tracker's event, a closed clip, the notice of a
//!   snapshot of a new object: [`snapshot_notice`]) carries `v`,
//!   `board` and `event_id`: the same event always has the same id ([`event_id`]: board,
//!   camera, track, kind and time), so a consumer drops the copies QoS 1 redelivers, or a
//!   bridge sends again after a cut, by the id alone.
//! - `P/status` ([`BoardStatus`], retained): the board's version, uptime, cameras and their
//!   state and counts, NPU use, last event; sent with every stats message. `P/available` is
//!   its last will (`offline`, retained).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::bridge::MqttReport;
use super::{level, MqttConfig, Msg};
use crate::output::Picture;
use crate::schema::ClipJson;

/// The version of the fleet's messages (`v`).
pub const WIRE_VERSION: u32 = 1;

/// The longest board id.
pub const MAX_BOARD_ID: usize = 64;

/// A board id that cannot be one, in one line with the fix.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BoardIdError {
    /// Empty, too long, or with a character other than ASCII letters, digits, `-` and `_`.
    #[error("--board-id {0:?}: use 1 to {MAX_BOARD_ID} ASCII letters, digits, - and _ (it is a topic level and part of every event id)")]
    Invalid(String),
}

/// Checks a board id given by the user: 1 to [`MAX_BOARD_ID`] of `[A-Za-z0-9_-]`.
pub fn check_board_id(id: &str) -> Result<String, BoardIdError> {
    let ok = !id.is_empty()
        && id.len() <= MAX_BOARD_ID
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(id.to_string())
    } else {
        Err(BoardIdError::Invalid(id.to_string()))
    }
}

/// The default board id from a machine id's text (`/etc/machine-id`: 32 hex digits): its
/// ASCII letters and digits, lower case, the first 12 (48 bits: a clash in a fleet of a
/// hundred boards is a chance of one in 10^10, and the fleet view reports one anyway).
/// `None` for a text without any.
pub fn board_id_from_machine_id(text: &str) -> Option<String> {
    let id: String =
        text.chars().filter(|c| c.is_ascii_alphanumeric()).map(|c| c.to_ascii_lowercase()).take(12).collect();
    (!id.is_empty()).then_some(id)
}

/// A board id made of any text (a host name, when there is no machine id): every character
/// but ASCII letters, digits, `-` and `_` made `_`, at most [`MAX_BOARD_ID`]; `board` for an
/// empty text.
pub fn board_id_of(text: &str) -> String {
    let id: String = super::ha_id(text.trim()).chars().take(MAX_BOARD_ID).collect();
    if id.is_empty() {
        "board".into()
    } else {
        id
    }
}

/// The stable id of an event: `board/camera/track/kind/time_ms`, the camera made one topic
/// level ([`level`]) and `kind` the event's name, with its zone or line after a `:` when it
/// has one (a track entering two zones in one frame makes two events, two ids). Two
/// messages with one id are one event.
pub fn event_id(board: &str, camera: &str, track: u64, kind: &str, place: Option<&str>, time_ms: u64) -> String {
    match place {
        Some(p) => format!("{board}/{}/{track}/{kind}:{}/{time_ms}", level(camera), level(p)),
        None => format!("{board}/{}/{track}/{kind}/{time_ms}", level(camera)),
    }
}

/// The id of clip `clip` (number `id` in its recorder's index, ending at `end_ms`):
/// `board/camera/clip/<id>/<end_ms>`.
pub fn clip_event_id(board: &str, clip: &ClipJson) -> String {
    format!("{board}/{}/clip/{}/{}", level(&clip.camera), clip.id, clip.end_ms)
}

/// The notice of a snapshot taken for a new object, on its camera's events topic
/// (`"event": "snapshot"`), sent right after the picture itself (the retained
/// `P/<camera>/snapshot`, which it is until the next).
#[derive(Serialize)]
struct SnapshotNotice<'a> {
    event: &'static str,
    camera: &'a str,
    track_id: u64,
    label: &'a str,
    /// The `new` event's id: the picture is of that object.
    of_event: String,
    /// Its file in the camera's folder of the board's `--snapshot-dir` (`None`: the disk did
    /// not take it).
    file: Option<&'a str>,
    /// The picture's size.
    bytes: usize,
    time_ms: u64,
    v: u32,
    board: &'a str,
    event_id: String,
}

/// The notice of `pic` (a picture of a new object; `None` for one of `--snapshot-every`,
/// which only refreshes the camera's image).
pub(crate) fn snapshot_notice(cfg: &MqttConfig, pic: &Picture<'_>) -> Option<Msg> {
    let new = pic.of_new?;
    let board = cfg.board.as_str();
    let n = SnapshotNotice {
        event: "snapshot",
        camera: pic.camera,
        track_id: new.track_id,
        label: &new.label,
        of_event: event_id(board, pic.camera, new.track_id, "new", None, new.time_ms),
        file: pic.file,
        bytes: pic.jpeg.len(),
        time_ms: new.time_ms,
        v: WIRE_VERSION,
        board,
        // `board/camera/track/snapshot/time_ms` at the `new` event's time: one picture per
        // new object, so one id.
        event_id: event_id(board, pic.camera, new.track_id, "snapshot", None, new.time_ms),
    };
    Some(Msg {
        topic: cfg.camera_topic(pic.camera, "events"),
        payload: serde_json::to_vec(&n).unwrap_or_default(),
        retain: false,
    })
}

/// A line as an events message: its own fields (flattened, numbers exactly as on the
/// socket) plus the fleet's.
#[derive(Serialize)]
pub(crate) struct Stamped<'a, T: Serialize> {
    #[serde(flatten)]
    pub line: &'a T,
    /// `clip` for a clip (an event line has its own `event`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<&'static str>,
    pub time_ms: u64,
    pub v: u32,
    pub board: &'a str,
    pub event_id: String,
}

/// An events message as the fleet view reads it (the fields it shows; the others are
/// ignored). A tracker's event has `track_id` and `label`; a clip has `id` (its number),
/// `url` and `labels`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct EventMsg {
    /// [`WIRE_VERSION`].
    pub v: u32,
    /// The stable id ([`event_id`], [`clip_event_id`]).
    pub event_id: String,
    /// The board that sent it.
    pub board: String,
    /// Its camera.
    pub camera: String,
    /// `new`, `entered_zone`, ..., `end`, `clip`, or `snapshot`.
    pub event: String,
    /// When it happened (a clip: its end), Unix ms.
    pub time_ms: u64,
    /// The track (a tracker's event).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub track_id: Option<u64>,
    /// The track's label (a tracker's event).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The zone (zone events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// The line (`crossed_line`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<String>,
    /// The clip's address in the board's web view (a clip).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The clip's thumbnail in the board's web view (a clip).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thumbnail: Option<String>,
}

/// How a camera is doing, as its board's status says.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum CameraState {
    /// Frames came since the last status.
    Streaming,
    /// No frame since the last status.
    Quiet,
}

/// One camera in a board's status.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct CameraStatus {
    /// Streaming or quiet (`None` from a board that saw no frame of it yet).
    pub state: Option<CameraState>,
    /// Frames per second since the last status.
    pub fps: f64,
    /// Frames so far.
    pub frames: u64,
    /// Events sent so far (a tracker's and clips).
    pub events: u64,
    /// Mean infer latency of its frames since the last status, ms (the wait for the NPU
    /// included).
    pub infer_ms: f64,
    /// Each label's count now (live tracks, or the latest frame's detections).
    pub counts: BTreeMap<String, u32>,
}

/// A board's status on `P/status`, retained: everything a fleet view shows of the board
/// but its events, so a fleet view started later rebuilds its picture from the broker.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct BoardStatus {
    /// [`WIRE_VERSION`].
    pub v: u32,
    /// The board's id.
    pub board: String,
    /// This publish process's run of the board: two sessions at once under one id are two
    /// boards with one id.
    pub session: String,
    /// zcpipe's version.
    pub version: String,
    /// The board's topic prefix (`P`).
    pub prefix: String,
    /// When this session started, Unix ms.
    pub started_ms: u64,
    /// When this status was sent, Unix ms.
    pub time_ms: u64,
    /// Seconds since the session started.
    pub uptime_s: u64,
    /// Seconds between two statuses (a fleet view takes a board silent for three as gone).
    pub every_s: u64,
    /// The cameras by name.
    pub cameras: BTreeMap<String, CameraStatus>,
    /// Each NPU core's busy share since the last status, percent (empty: no NPU).
    pub npu_busy_pct: Vec<f64>,
    /// The last event's time, Unix ms.
    pub last_event_ms: Option<u64>,
    /// The board's own web view, as the fleet reaches it (`--board-url`).
    pub web: Option<String>,
    /// The MQTT bridge's counters.
    pub mqtt: MqttReport,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mqtt::tests::cfg;
    use crate::mqtt::{Out, Translator};
    use crate::output::NewObject;
    use crate::schema::{EventJson, SocketLine};

    fn event(kind: &str, track: u64, zone: Option<&str>, ns: u64) -> SocketLine {
        SocketLine::Event(EventJson {
            event: kind.into(),
            camera: "front door".into(),
            track_id: track,
            label: "person".into(),
            score: 0.8,
            zone: zone.map(Into::into),
            timestamp_ns: ns,
            ..Default::default()
        })
    }

    fn read(t: &mut Translator, line: &SocketLine) -> (String, EventMsg) {
        let mut out = vec![];
        t.line(line, |ns| ns / 1_000_000, &mut out);
        let Some(Out::Once(m)) = out.first() else { panic!("{out:?}") };
        (m.text().into_owned(), serde_json::from_slice(&m.payload).unwrap())
    }

    /// A snapshot of a new object is announced after its picture, naming the `new` event's
    /// id; a picture of `--snapshot-every` only refreshes the image.
    #[test]
    fn a_snapshot_of_a_new_object_names_its_event() {
        let c = cfg();
        let mut t = Translator::new(c.clone());
        let (_, new) = read(&mut t, &event("new", 7, None, 5_000_000_123));
        let object = NewObject { track_id: 7, label: "person".into(), time_ms: new.time_ms };
        let jpeg = [0xffu8, 0xd8, 0xff, 0xd9];
        let pic = Picture { camera: "front door", jpeg: &jpeg, of_new: Some(&object), file: Some("x.jpg") };
        let m = snapshot_notice(&c, &pic).unwrap();
        assert_eq!((m.topic.as_str(), m.retain), ("zcpipe/front_door/events", false));
        let v: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
        assert_eq!(v["of_event"], new.event_id.as_str());
        assert_eq!(v["event_id"], "box1/front_door/7/snapshot/5000");
        assert_eq!(
            (v["file"].as_str(), v["bytes"].as_u64(), v["label"].as_str()),
            (Some("x.jpg"), Some(4), Some("person"))
        );
        // The fleet view reads it as an event of its own.
        let e: EventMsg = serde_json::from_slice(&m.payload).unwrap();
        assert_eq!((e.event.as_str(), e.track_id, e.time_ms), ("snapshot", Some(7), 5000));
        // Not written to disk: no file, the notice all the same.
        let unwritten = snapshot_notice(&c, &Picture { file: None, ..pic }).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&unwritten.payload).unwrap();
        assert!(v["file"].is_null(), "{v}");
        assert!(snapshot_notice(&c, &Picture { of_new: None, ..pic }).is_none());
    }

    #[test]
    fn one_monotonic_stamp_is_one_wall_time() {
        let ns = zcpipe_core::frame::monotonic_ns();
        let first = crate::mqtt::wall_ms(ns);
        assert!(first > 1_700_000_000_000, "{first}");
        assert_eq!((0..20).map(|_| crate::mqtt::wall_ms(ns)).collect::<Vec<_>>(), vec![first; 20]);
    }

    #[test]
    fn an_event_has_the_same_id_each_time_it_is_made_and_another_event_another() {
        let mut t = Translator::new(cfg());
        let (text, e) = read(&mut t, &event("entered_zone", 7, Some("porch"), 5_000_000_123));
        assert_eq!(e.event_id, "box1/front_door/7/entered_zone:porch/5000");
        assert_eq!((e.v, e.board.as_str(), e.camera.as_str(), e.time_ms), (WIRE_VERSION, "box1", "front door", 5000));
        assert_eq!((e.track_id, e.label.as_deref(), e.zone.as_deref()), (Some(7), Some("person"), Some("porch")));
        // A second translator (a publish stage started again) makes the same id of the same event.
        let (again, e2) = read(&mut Translator::new(cfg()), &event("entered_zone", 7, Some("porch"), 5_000_000_123));
        assert_eq!((again, e2.event_id), (text, e.event_id.clone()));
        // The same track entering another zone in the same frame, or another kind, another track: other ids.
        let others = [
            event("entered_zone", 7, Some("gate"), 5_000_000_123),
            event("left_zone", 7, Some("porch"), 5_000_000_123),
            event("entered_zone", 8, Some("porch"), 5_000_000_123),
            event("entered_zone", 7, Some("porch"), 6_000_000_000),
        ];
        let ids: std::collections::BTreeSet<String> =
            others.iter().map(|l| read(&mut t, l).1.event_id).chain([e.event_id]).collect();
        assert_eq!(ids.len(), 5, "{ids:?}");
    }

    #[test]
    fn board_ids_are_checked_and_the_machine_id_gives_a_short_one() {
        assert_eq!(check_board_id("barn-2_b").unwrap(), "barn-2_b");
        for bad in ["", "a/b", "a b", "x+", &"x".repeat(65)] {
            let e = check_board_id(bad).unwrap_err();
            assert!(e.to_string().starts_with(&format!("--board-id {bad:?}: use 1 to 64")), "{e}");
        }
        let id = board_id_from_machine_id("0A1b2c3d4e5f60718293a4b5c6d7e8f9\n").unwrap();
        assert_eq!(id, "0a1b2c3d4e5f");
        assert_eq!(board_id_from_machine_id("\n"), None);
        assert_eq!((board_id_of("rock 5b.lan\n"), board_id_of("")), ("rock_5b_lan".into(), "board".into()));
        assert!(check_board_id(&board_id_of(&"é".repeat(100))).is_ok());
    }

    #[test]
    fn the_status_counts_frames_events_and_the_npu_and_is_retained() {
        let mut t = Translator::new(cfg()).counting_tracks(true);
        let mut out = vec![];
        for (seq, busy) in [(1u64, 1_000u64), (2, 3_000)] {
            let mut f = crate::schema::FrameJson { camera: "front door".into(), seq, ..Default::default() };
            f.latency_us.infer = 4_000.0;
            f.npu.busy_us = [busy, busy / 2, 0, 0];
            t.line(&SocketLine::Frame(f), |ns| ns, &mut out);
        }
        read(&mut t, &event("new", 7, None, 9_000_000));
        let m = t.status(MqttReport { sent: 5, ..Default::default() });
        assert_eq!((m.topic.as_str(), m.retain), ("zcpipe/status", true));
        let s: BoardStatus = serde_json::from_slice(&m.payload).unwrap();
        assert_eq!((s.v, s.board.as_str(), s.prefix.as_str(), s.every_s), (WIRE_VERSION, "box1", "zcpipe", 10));
        assert_eq!(s.session, format!("{}-{}", std::process::id(), s.started_ms));
        let c = &s.cameras["front door"];
        assert_eq!((c.state, c.frames, c.events, c.infer_ms), (Some(CameraState::Streaming), 2, 1, 4.0));
        assert_eq!((s.last_event_ms, s.mqtt.sent, s.npu_busy_pct.len()), (Some(9), 5, 2));
        assert!(s.npu_busy_pct[0] > 0.0, "{:?}", s.npu_busy_pct);
        // No frame since: quiet, 0 fps.
        let s: BoardStatus = serde_json::from_slice(&t.status(MqttReport::default()).payload).unwrap();
        let c = &s.cameras["front door"];
        assert_eq!((c.state, c.fps, c.frames), (Some(CameraState::Quiet), 0.0, 2));
        assert_eq!(s.npu_busy_pct, [0.0, 0.0]);
    }
}

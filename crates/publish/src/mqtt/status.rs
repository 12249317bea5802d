//! The board's retained status (`P/status`, [`BoardStatus`]): what the translator tallies
//! between two status messages, and the message.

use std::time::Instant;

use super::bridge::MqttReport;
use super::fleet::{BoardStatus, CameraState, CameraStatus, WIRE_VERSION};
use super::{unix_ms, Msg, Translator};
use crate::schema::FrameJson;

/// One camera's tally since the last status.
#[derive(Debug, Default)]
pub(super) struct CameraTally {
    /// Frames at the last status.
    frames_at_status: u64,
    /// Infer latency summed over the frames since the last status, µs, and their number.
    infer_us: f64,
    infer_frames: u64,
    /// Events sent so far.
    events: u64,
}

impl CameraTally {
    /// A frame of the camera.
    pub(super) fn frame(&mut self, f: &FrameJson) {
        self.infer_us += f.latency_us.infer;
        self.infer_frames += 1;
    }
}

/// The board's tally: its session, the NPU's busy time at the last status.
#[derive(Debug)]
pub(super) struct BoardTally {
    session: String,
    started: Instant,
    started_ms: u64,
    last_status: Instant,
    /// Each NPU core's busy time at the last status, and the newest seen, µs.
    npu_at_status: [u64; 4],
    npu_now: [u64; 4],
    last_event_ms: Option<u64>,
}

impl BoardTally {
    /// A new session (this process, started now): `<pid>-<start in Unix ms>`.
    pub(super) fn new() -> BoardTally {
        let started_ms = unix_ms();
        BoardTally {
            session: format!("{}-{started_ms}", std::process::id()),
            started: Instant::now(),
            started_ms,
            last_status: Instant::now(),
            npu_at_status: [0; 4],
            npu_now: [0; 4],
            last_event_ms: None,
        }
    }

    /// A frame: the NPU's busy times it carries (each core's, so far).
    pub(super) fn frame(&mut self, f: &FrameJson) {
        for (now, &b) in self.npu_now.iter_mut().zip(&f.npu.busy_us) {
            *now = (*now).max(b);
        }
    }
}

impl Translator {
    /// An event (or a clip) of camera `camera` at `time_ms` was sent.
    pub(super) fn counted_event(&mut self, camera: &str, time_ms: u64) {
        // A camera's first line is a frame: an event of a camera never seen is not counted
        // (and does not make its entry, which would skip its discovery configs).
        if let Some(c) = self.cameras.get_mut(camera) {
            c.status.events += 1;
        }
        self.board.last_event_ms = Some(self.board.last_event_ms.unwrap_or(0).max(time_ms));
    }

    /// The board's status now (retained on `P/status`), `bridge` its MQTT counters; starts
    /// the next tally.
    pub fn status(&mut self, bridge: super::bridge::MqttReport) -> Msg {
        let s = self.status_now(bridge);
        Msg { topic: self.cfg.status_topic(), payload: serde_json::to_vec(&s).unwrap_or_default(), retain: true }
    }

    fn status_now(&mut self, mqtt: MqttReport) -> BoardStatus {
        let b = &mut self.board;
        let secs = b.last_status.elapsed().as_secs_f64().max(1e-3);
        b.last_status = Instant::now();
        let npu_busy_pct = if b.npu_now.iter().all(|&n| n == 0) {
            vec![]
        } else {
            let cores = b.npu_now.iter().rposition(|&n| n > 0).map_or(0, |i| i + 1);
            (0..cores)
                .map(|k| {
                    let busy = b.npu_now[k].saturating_sub(b.npu_at_status[k]) as f64 / 1e6;
                    (busy / secs * 1000.0).round().min(1000.0) / 10.0
                })
                .collect()
        };
        b.npu_at_status = b.npu_now;
        let cameras = self
            .cameras
            .iter_mut()
            .map(|(name, c)| {
                let t = &mut c.status;
                let fresh = c.frames - t.frames_at_status;
                let st = CameraStatus {
                    state: (c.frames > 0).then_some(if fresh > 0 {
                        CameraState::Streaming
                    } else {
                        CameraState::Quiet
                    }),
                    fps: (fresh as f64 / secs * 10.0).round() / 10.0,
                    frames: c.frames,
                    events: t.events,
                    infer_ms: if t.infer_frames > 0 {
                        (t.infer_us / t.infer_frames as f64).round() / 1000.0
                    } else {
                        0.0
                    },
                    counts: c.counts.clone(),
                };
                (t.frames_at_status, t.infer_us, t.infer_frames) = (c.frames, 0.0, 0);
                (name.clone(), st)
            })
            .collect();
        BoardStatus {
            v: WIRE_VERSION,
            board: self.cfg.board.clone(),
            session: b.session.clone(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            prefix: self.cfg.topic_prefix.clone(),
            started_ms: b.started_ms,
            time_ms: unix_ms(),
            uptime_s: b.started.elapsed().as_secs(),
            every_s: self.cfg.stats_every.as_secs(),
            cameras,
            npu_busy_pct,
            last_event_ms: b.last_event_ms,
            web: self.cfg.board_url.clone(),
            mqtt,
        }
    }
}

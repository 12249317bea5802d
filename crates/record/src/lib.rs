//! Stage 6 (optional): the recorder. Event clips of each camera, made of the camera's own
//! encoded packets (H.264 or H.265, as the camera or the file sent them, never decoded or
//! re-encoded; a raw camera's frames encoded by its capture stage). Each camera may have
//! rules of its own ([`CameraRules`]).
//!
//! A capture stage whose camera is recorded sends its stream's access units here
//! ([`zcpipe_core::packets`]: the units ffmpeg's `-c:v copy` output carries, each stamped
//! with its arrival on CLOCK_MONOTONIC). The recorder keeps each camera's newest seconds in
//! a pre-roll buffer bounded in bytes ([`preroll`]), reads the tracker's events from the
//! publish stage's detections socket, and decides from them when a clip starts and ends
//! ([`plan`]: `--record-pre` seconds before a tracked object is first seen, `--record-post`
//! after the last one's track ended, overlapping events one clip). A clip begins at the
//! last keyframe at or before its start and is remuxed by an ffmpeg child into fragmented
//! MP4 (`-c copy`, a fragment per keyframe: a file cut short by a crash plays up to its last
//! fragment; [`clip`]). Each clip is a row of an SQLite index (`DIR/index.sqlite3`,
//! [`zcpipe_clips`]), written when the clip opens (`recording`) and when it closes (`complete`,
//! or `incomplete` with the reason); old clips go by age and total size ([`zcpipe_clips::Index::retain`]).
//! When an event clip closes, its thumbnail (its picture at the event) is made beside it
//! ([`clip::thumbnail`]). With `--record-continuous`, each camera's whole stream is also
//! kept in segments from keyframe to keyframe (`stage/segments.rs`).
//!
//! Why a process of its own: a disk that is full, slow or gone is the recorder's failure,
//! never detection's. The capture stages queue their units for it (bounded, drop-oldest)
//! and never wait; the recorder is a pure consumer, restarted alone when it dies.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub mod clip;
/// The index of clips (its own crate: the web view reads it too).
pub use zcpipe_clips as index;
mod inputs;
pub mod plan;
pub mod preroll;
pub mod report;
pub mod stage;
mod tail;

/// What the record stage is asked to do (`--record-dir` and the `--record-*` flags),
/// checked by the command line.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordConfig {
    /// The folder of clips (`DIR/CAMERA/...mp4`) and of the index (`DIR/index.sqlite3`).
    pub dir: PathBuf,
    /// How long before a tracked object was first seen a clip starts.
    pub pre: Duration,
    /// How long after the last recorded track ended a clip ends.
    pub post: Duration,
    /// Only tracks of these labels start a clip (`None`: every label).
    pub labels: Option<BTreeSet<String>>,
    /// Only tracks entering one of these zones start a clip (`None`: no zone needed).
    pub zones: Option<BTreeSet<String>>,
    /// Clips older than this are removed (`None`: kept).
    pub keep: Option<Duration>,
    /// The most bytes all clips may take; the oldest go first (`None`: no bound).
    pub max_bytes: Option<u64>,
    /// Each camera's pre-roll buffer, bytes at most.
    pub buffer_bytes: usize,
    /// The publish stage's detections socket (the tracker's events).
    pub detections: PathBuf,
    /// Continuous segments of this length besides the event clips (`--record-continuous`;
    /// `None`: event clips only).
    pub continuous: Option<Duration>,
    /// Cameras with rules of their own (options given after their `--source`), which
    /// replace the ones above for them.
    pub cameras: BTreeMap<String, CameraRules>,
}

/// One camera's own recording rules, in place of the run's (`zcpipe run --source door=...
/// --record-pre 2 --record-labels person`). They travel from `zcpipe run` to the record
/// stage as JSON (`zcpipe stage record --record-cameras '{"door":{...}}'`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CameraRules {
    /// Seconds before a tracked object was first seen (0 to 60).
    pub pre_s: f64,
    /// Seconds after the last one left (0 to 300).
    pub post_s: f64,
    /// Only these labels (`None`: every label).
    #[serde(default)]
    pub labels: Option<BTreeSet<String>>,
    /// Only tracks entering one of these zones (`None`: no zone needed).
    #[serde(default)]
    pub zones: Option<BTreeSet<String>>,
    /// The camera's clips older than this many days are removed (`None`: the run's rule).
    #[serde(default)]
    pub keep_days: Option<f64>,
    /// The camera's clips take at most this many GB (`None`: only the run's bound).
    #[serde(default)]
    pub max_gb: Option<f64>,
    /// Continuous segments of this many seconds besides the event clips (`None`: none).
    #[serde(default)]
    pub continuous_s: Option<f64>,
}

impl CameraRules {
    /// Checks the values as the command line does; the error names the camera.
    pub fn check(&self, camera: &str) -> anyhow::Result<()> {
        let bad = |what: &str| anyhow::anyhow!("camera {camera}: {what}");
        if !(0.0..=60.0).contains(&self.pre_s) {
            return Err(bad(&format!("--record-pre {}: expected seconds from 0 to 60", self.pre_s)));
        }
        if !(0.0..=300.0).contains(&self.post_s) {
            return Err(bad(&format!("--record-post {}: expected seconds from 0 to 300", self.post_s)));
        }
        if self.keep_days.is_some_and(|d| !(0.01..=3650.0).contains(&d)) {
            return Err(bad("--record-keep-days: expected days from 0.01 to 3650"));
        }
        if self.max_gb.is_some_and(|g| !(0.0001..=100_000.0).contains(&g)) {
            return Err(bad("--record-max-gb: expected GB from 0.0001 to 100000"));
        }
        if self.continuous_s.is_some_and(|c| !(CONTINUOUS_MIN_S..=CONTINUOUS_MAX_S).contains(&c)) {
            return Err(bad(&format!(
                "--record-continuous: expected seconds from {CONTINUOUS_MIN_S} to {CONTINUOUS_MAX_S}"
            )));
        }
        Ok(())
    }
}

impl RecordConfig {
    /// Camera `camera`'s pre-roll and post-roll.
    pub fn pre_post(&self, camera: &str) -> (Duration, Duration) {
        match self.cameras.get(camera) {
            Some(r) => (Duration::from_secs_f64(r.pre_s), Duration::from_secs_f64(r.post_s)),
            None => (self.pre, self.post),
        }
    }

    /// Camera `camera`'s continuous segments' length (`None`: none).
    pub fn continuous(&self, camera: &str) -> Option<Duration> {
        match self.cameras.get(camera) {
            Some(r) => r.continuous_s.map(Duration::from_secs_f64),
            None => self.continuous,
        }
    }

    /// Which of camera `camera`'s events record.
    pub fn filters(&self, camera: &str) -> plan::Filters {
        match self.cameras.get(camera) {
            Some(r) => plan::Filters { labels: r.labels.clone(), zones: r.zones.clone() },
            None => plan::Filters { labels: self.labels.clone(), zones: self.zones.clone() },
        }
    }
}

/// The shortest `--record-continuous` segment, seconds.
pub const CONTINUOUS_MIN_S: f64 = 5.0;
/// The longest `--record-continuous` segment, seconds.
pub const CONTINUOUS_MAX_S: f64 = 3600.0;

/// The default `--record-pre` and `--record-post`.
pub const DEFAULT_PRE_POST: Duration = Duration::from_secs(5);

/// Each camera's default pre-roll bound, bytes: 64 MiB holds about two minutes of a 4 Mbit/s
/// 1080p camera, so a pre-roll of seconds reaches its keyframe before it.
pub const DEFAULT_BUFFER_BYTES: usize = 64 << 20;

//! Stage 6 (optional): the recorder. Event clips of each camera, made of the camera's own
//! encoded packets (H.264 or H.265, as the camera or the file sent them), never decoded or
//! re-encoded.
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
//!
//! Why a process of its own: a disk that is full, slow or gone is the recorder's failure,
//! never detection's. The capture stages queue their units for it (bounded, drop-oldest)
//! and never wait; the recorder is a pure consumer, restarted alone when it dies.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

pub mod clip;
/// The index of clips (its own crate: the web view reads it too).
pub use zcpipe_clips as index;
mod inputs;
pub mod plan;
pub mod preroll;
pub mod report;
pub mod stage;

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
}

/// The default `--record-pre` and `--record-post`.
pub const DEFAULT_PRE_POST: Duration = Duration::from_secs(5);

/// Each camera's default pre-roll bound, bytes: 64 MiB holds about two minutes of a 4 Mbit/s
/// 1080p camera, so a pre-roll of seconds reaches its keyframe before it.
pub const DEFAULT_BUFFER_BYTES: usize = 64 << 20;

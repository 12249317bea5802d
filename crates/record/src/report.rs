//! The record stage's report, typed: its part of the report's `extra` (`record`), written by
//! the stage and read back by `zcpipe run` for its summary line.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One camera's recording.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CameraRecord {
    /// Its capture stage is connected now.
    pub connected: bool,
    /// Clips opened.
    pub clips: u64,
    /// Bytes of its closed clips.
    pub bytes: u64,
    /// Access units received.
    pub units: u64,
    /// Units the capture stage said it dropped before they came (gaps).
    pub gaps: u64,
    /// Units a clip dropped (ffmpeg or the disk too slow).
    pub clip_drops: u64,
    /// Pre-roll bytes held now.
    pub preroll_bytes: u64,
}

/// What the recorder did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RecordReport {
    /// The record folder.
    pub dir: String,
    /// Clips opened.
    pub clips: u64,
    /// Continuous segments opened (`--record-continuous`).
    pub segments: u64,
    /// Clips closed complete.
    pub complete: u64,
    /// Clips closed incomplete (the disk, ffmpeg, a stream cut).
    pub incomplete: u64,
    /// Clips being written now.
    pub open: u64,
    /// Bytes of the clips closed.
    pub bytes: u64,
    /// Clips removed by retention, and their bytes.
    pub removed: u64,
    /// Their bytes.
    pub removed_bytes: u64,
    /// Times recording stopped because the disk was full.
    pub disk_full: u64,
    /// Clips not started while the disk was full.
    pub missed: u64,
    /// Events read from the detections socket.
    pub events: u64,
    /// Each camera's.
    pub cameras: BTreeMap<String, CameraRecord>,
}

/// The record stage's facts in its report (`extra`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RecordFacts {
    /// What it recorded (`None` in a report from before set-up).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<RecordReport>,
}

impl RecordFacts {
    /// Its line of the end-of-run summary.
    pub fn summary_line(&self) -> Option<String> {
        let r = self.record.as_ref()?;
        let mut s = format!(
            "  record: {}: {} clips ({} complete, {} incomplete), {:.1} MB",
            r.dir,
            r.clips,
            r.complete,
            r.incomplete,
            r.bytes as f64 / 1e6
        );
        if r.segments > 0 {
            s += &format!("; {} continuous segments", r.segments);
        }
        if r.removed > 0 {
            s += &format!("; {} old clips removed ({:.1} MB)", r.removed, r.removed_bytes as f64 / 1e6);
        }
        if r.disk_full > 0 {
            s += &format!("; the disk was full {} times, {} clips missed", r.disk_full, r.missed);
        }
        Some(s)
    }
}

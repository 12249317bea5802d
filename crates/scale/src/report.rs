//! The scale stage's report, typed: its per-camera numbers (a run with several cameras),
//! written by the stage and read back by `zcpipe run` for each camera's drops.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One camera's numbers in the scale stage's report.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct CameraFacts {
    /// Frames taken from its ring.
    pub frames_in: u64,
    /// Frames of it scaled and handed on.
    pub frames_out: u64,
    /// Frames passed over for a newer one of the same camera.
    pub skipped_for_newer: u64,
    /// Frames passed over by its detection rate (`--detect-fps`), never scaled.
    pub skipped_rate: u64,
    /// Frames passed over as still (`--motion`), never scaled.
    pub skipped_still: u64,
    /// The motion check's mean cost per frame checked, µs (`None`: `--motion` off).
    pub motion_us: Option<f64>,
    /// Frames dropped in its input ring (drop-oldest).
    pub(crate) ring_dropped: u64,
    /// Frames of it dropped after the scale stage.
    pub dropped_downstream: u64,
    /// Whether its capture stage is joined now.
    pub joined: bool,
    /// Whether its stream ended.
    pub ended: bool,
}

/// The scale stage's own facts in its report (`extra`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ScaleFacts {
    /// Frames passed over by the cameras' detection rates (`--detect-fps`), all cameras.
    pub skipped_rate: u64,
    /// Frames passed over as still (`--motion`), all cameras.
    pub skipped_still: u64,
    /// The motion check's mean cost per frame checked, µs, the most of any camera (`None`: off).
    pub motion_us: Option<f64>,
    /// Each camera's numbers, by name (several cameras only).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub cameras: BTreeMap<String, CameraFacts>,
}

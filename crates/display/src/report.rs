//! The display sink's report, typed: its part of the report's `extra` (`display`), written by
//! the stage and read back by `zcpipe run` for its summary line.

use serde::{Deserialize, Serialize};
use zcpipe_core::tap::TapCounters;

use super::stage::DisplayCounters;

/// What the display showed, and how.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct DisplayReport {
    /// The DRM card (`/dev/dri/card0`).
    pub card: String,
    /// Its driver's name.
    pub driver: String,
    /// The connector used.
    pub connector: String,
    /// The mode, `WxH`.
    pub mode: String,
    /// Whether commits are atomic.
    pub atomic: bool,
    /// How frames reach the screen (`zero-copy scanout`, `CPU composition (...)`).
    pub way: String,
    /// Frames shown per second, first to last.
    pub fps_shown: Option<f64>,
    /// Capture's frame rate as the display saw it.
    pub fps_captured: Option<f64>,
    /// Its counters.
    pub counters: DisplayCounters,
    /// Its tap's counters.
    pub tap: TapCounters,
}

/// The display's facts in its report (`extra`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct DisplayFacts {
    /// What it showed (`None` in a report from before set-up).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub display: Option<DisplayReport>,
}

impl DisplayFacts {
    /// Its line of the end-of-run summary, if it reported what it showed.
    pub fn summary_line(&self) -> Option<String> {
        let d = self.display.as_ref()?;
        let rate = |f: Option<f64>| f.map(|f| format!("{f:.1}")).unwrap_or_else(|| "-".into());
        Some(format!(
            "  display: {} {}: {}; shown {} frames at {} fps (captured at {} fps), skipped {}, {} buffers imported",
            d.card,
            d.mode,
            d.way,
            d.counters.shown,
            rate(d.fps_shown),
            rate(d.fps_captured),
            d.counters.skipped,
            d.counters.imports
        ))
    }
}

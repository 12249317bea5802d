//! `zcpipe watch`'s command line, turned into [`WatchConfig`].

use std::path::PathBuf;

use clap::Args;

use zcpipe_publish::watch::WatchConfig;

/// `zcpipe watch`.
#[derive(Args, Debug, Clone)]
pub struct WatchArgs {
    /// Detections socket (default: the one `zcpipe run --instance <--instance>` uses).
    pub path: Option<PathBuf>,
    /// Watch this instance's default socket (`detections-<instance>.sock`; `default`:
    /// `detections.sock`).
    #[arg(long, default_value = "default")]
    pub instance: String,
    /// Print raw JSON lines.
    #[arg(long)]
    pub json: bool,
    /// Exit after this many frames (events with --events; at least 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    /// When the socket closes without an end line (the publish stage died), keep trying to
    /// reconnect for this many seconds (0 to 3600) before giving up.
    #[arg(long, default_value_t = zcpipe_publish::watch::RECONNECT_FOR.as_secs(), value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub reconnect_for: u64,
    /// Only this camera's frames (its name in `zcpipe run --source NAME=...`; unnamed
    /// cameras are cam0, cam1, ...).
    #[arg(long, value_parser = camera_name)]
    pub camera: Option<String>,
    /// Only the tracker's events (new, entered_zone, left_zone, loitering, crossed_line,
    /// stationary, end), the
    /// recorded clips as they close (with --record-dir: the clip's file) and restart
    /// notices, not the frames; --count then counts events.
    #[arg(long)]
    pub events: bool,
}

/// `--camera`: a valid camera name ([`zcpipe_core::config::check_camera_name`]).
fn camera_name(s: &str) -> Result<String, String> {
    zcpipe_core::config::check_camera_name(s).map(|()| s.to_string()).map_err(|e| format!("{e:#}"))
}

impl From<WatchArgs> for WatchConfig {
    fn from(a: WatchArgs) -> WatchConfig {
        WatchConfig {
            path: a.path,
            instance: a.instance,
            json: a.json,
            count: a.count,
            camera: a.camera,
            events: a.events,
            reconnect_for: std::time::Duration::from_secs(a.reconnect_for),
        }
    }
}

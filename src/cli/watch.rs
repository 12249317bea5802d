//! `zcpipe watch`'s command line, turned into [`WatchConfig`].

use std::path::PathBuf;

use clap::Args;

use crate::publish::watch::WatchConfig;

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
    /// Exit after this many frames (at least 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
}

impl From<WatchArgs> for WatchConfig {
    fn from(a: WatchArgs) -> WatchConfig {
        WatchConfig { path: a.path, instance: a.instance, json: a.json, count: a.count }
    }
}

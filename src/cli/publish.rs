//! `--publish` and `--print`, and their checked form, [`zcpipe_publish::PublishConfig`].

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use zcpipe_core::config::default_detections_socket;
use zcpipe_publish::{PrintMode, PublishConfig};

use super::common::choice;
use super::http::HttpArgs;
use super::mqtt::MqttArgs;
use super::snapshot::SnapshotArgs;
use super::track::TrackArgs;

/// Publish options.
#[derive(Args, Debug, Clone)]
pub struct PublishArgs {
    /// Detections socket (default $XDG_RUNTIME_DIR/zcpipe/detections.sock, /run/zcpipe/... for root; detections-<instance>.sock for an --instance other than default).
    #[arg(long)]
    pub publish: Option<PathBuf>,
    /// What to print on stdout per frame.
    #[arg(long, value_parser = choice::<PrintMode>(), default_value = "none")]
    pub print: PrintMode,
    /// Group whose members may connect to the detections socket (mode 660). Default: the
    /// zcpipe group when it exists, else only this user.
    #[arg(long)]
    pub socket_group: Option<String>,
    /// The cameras' names, comma-separated, in the run's order: each JSON line's
    /// `"camera"`. `zcpipe run` sets it from its `--source NAME=...` (default cam0).
    #[arg(long, value_delimiter = ',', default_value = "cam0")]
    pub cameras: Vec<String>,
    #[command(flatten)]
    pub track: TrackArgs,
    #[command(flatten)]
    pub http: HttpArgs,
    #[command(flatten)]
    pub snapshot: SnapshotArgs,
    #[command(flatten)]
    pub mqtt: MqttArgs,
}

impl PublishArgs {
    /// The configuration of instance `instance`: the socket is `--publish`, else the
    /// instance's default. Errors: the tracking options' ([`TrackArgs::config`]), the web
    /// view's ([`HttpArgs::config`]), the snapshots' ([`SnapshotArgs::config`]), the MQTT
    /// options' ([`MqttArgs::config`]).
    pub fn config(&self, instance: &str) -> Result<PublishConfig> {
        Ok(PublishConfig {
            socket: self.socket(instance),
            print: self.print,
            socket_group: self.socket_group.clone(),
            cameras: self.cameras.clone(),
            track: self.track.config(&self.cameras)?,
            http: self.http.config()?,
            snapshots: self.snapshot.config(self.track.tracker != zcpipe_track::TrackerKind::None)?,
            mqtt: self.mqtt.config(instance)?,
            clips: self.http.clips.clone(),
        })
    }

    /// The detections socket of instance `instance`: `--publish`, else the instance's default.
    pub fn socket(&self, instance: &str) -> PathBuf {
        self.publish.clone().unwrap_or_else(|| default_detections_socket(instance))
    }
}

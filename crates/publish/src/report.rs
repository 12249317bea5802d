//! The publish stage's report, typed: what it puts in its report's `extra` (the detections
//! server's counters, each camera's numbers, and one report per output) and the summary
//! lines each part writes for itself. `zcpipe run` reads the stage's facts back as
//! [`PublishFacts`] and prints [`PublishFacts::summary_lines`]: it knows none of the outputs
//! by name.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use zcpipe_core::metrics::{FrameSpan, LatencySummary};

use super::http::HttpReport;
use super::mqtt::bridge::MqttReport;
use super::snapshot::SnapshotCounters;
use super::tracking::TrackingReport;
use super::ServerStats;

/// One camera's numbers in the publish stage's report (a run with several cameras).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct CameraFacts {
    /// Frames of this camera published.
    pub frames: u64,
    /// When they went out.
    pub out_span: FrameSpan,
    /// Their latencies, by series ([`zcpipe_core::metrics::SERIES`]).
    pub latency: BTreeMap<String, LatencySummary>,
}

/// The report of one output of the publish stage, put under its name.
#[derive(Clone, Debug)]
pub enum OutputReport {
    /// The web view (`http`).
    Http(HttpReport),
    /// The MQTT bridge (`mqtt`).
    Mqtt(MqttReport),
    /// Snapshots (`snapshots`).
    Snapshots(SnapshotCounters),
}

/// The publish stage's own facts (its report's `extra`, beside the common ones).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PublishFacts {
    /// The detections server's counters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerStats>,
    /// Each camera's numbers, by name (several cameras only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cameras: Option<BTreeMap<String, CameraFacts>>,
    /// Tracking (`--track`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracking: Option<TrackingReport>,
    /// The web view.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpReport>,
    /// The MQTT bridge.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mqtt: Option<MqttReport>,
    /// Snapshots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshots: Option<SnapshotCounters>,
}

impl PublishFacts {
    /// Files an output's report under its name.
    pub fn add(&mut self, r: OutputReport) {
        match r {
            OutputReport::Http(h) => self.http = Some(h),
            OutputReport::Mqtt(m) => self.mqtt = Some(m),
            OutputReport::Snapshots(s) => self.snapshots = Some(s),
        }
    }

    /// The end-of-run summary's lines of the stage's parts, each written by its part: the
    /// detections server's clients, the web view, tracking, the MQTT bridge.
    pub fn summary_lines(&self) -> Vec<String> {
        [
            self.server.as_ref().map(ServerStats::summary_line),
            self.http.as_ref().map(HttpReport::summary_line),
            self.tracking.as_ref().map(TrackingReport::summary_line),
            self.mqtt.as_ref().map(MqttReport::summary_line),
            self.snapshots.as_ref().and_then(SnapshotCounters::summary_line),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

//! `zcpipe run`: the supervisor. [`run`] starts the stage processes, turns its loop
//! ([`supervisor`]) until every one has ended, and says the summary ([`summary`]).

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use zcpipe_core::config::DataPath;
use zcpipe_core::frame::Stage;
use zcpipe_core::id::StageId;
use zcpipe_core::metrics::StageReport;

use zcpipe_capture::report::ReconnectFacts;
use zcpipe_display::report::DisplayFacts;
use zcpipe_infer::report::InferFacts;
use zcpipe_publish::report::PublishFacts;
use zcpipe_scale::report::ScaleFacts;

/// What `zcpipe run` prints at the end (also written as JSON with `--summary-json`, which
/// `zcpipe compare` reads back as this type).
#[derive(Debug, Serialize, Deserialize)]
pub struct RunSummary {
    /// Wall time of the run, seconds.
    pub elapsed_s: f64,
    /// Exit code of each stage process.
    pub exit_codes: BTreeMap<StageId, i32>,
    /// Last report of each stage.
    pub stages: BTreeMap<StageId, StageReport>,
    /// Times each stage was restarted after it died (stages never restarted are left out).
    #[serde(default)]
    pub restarts: BTreeMap<StageId, u32>,
    /// With several cameras: each camera's totals ([`CameraSummary`]), by name. Empty (and
    /// left out of the JSON) for one camera, whose numbers are the stages'.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cameras: BTreeMap<String, CameraSummary>,
    /// The cameras' names in the order given (the text summary's rows).
    #[serde(skip)]
    pub camera_order: Vec<String>,
}

/// One camera's numbers at the end of a run with several cameras.
#[derive(Debug, Serialize, Deserialize, Default, Clone, PartialEq)]
pub struct CameraSummary {
    /// Frames its capture stage produced (its last process's count).
    pub captured: u64,
    /// Frames dropped in its ring to the scale stage (drop-oldest), plus frames the scale
    /// stage passed over for a newer one of the same camera.
    pub dropped: u64,
    /// Frames of this camera published.
    pub published: u64,
    /// Capture rate, frames per second, first to last frame (`None`: fewer than 2 frames).
    pub fps_captured: Option<f64>,
    /// Publish rate of this camera's frames, frames per second.
    pub fps_published: Option<f64>,
    /// Capture timestamp to published line, µs: median.
    pub latency_p50_us: Option<f64>,
    /// Capture timestamp to published line, µs: 99th percentile.
    pub latency_p99_us: Option<f64>,
    /// Times its capture stage was restarted.
    pub restarts: u32,
    /// Frames of it the NPU ran.
    #[serde(default)]
    pub inferred: u64,
    /// Frames passed over by its detection rate (`--detect-fps`).
    #[serde(default)]
    pub skipped_rate: u64,
    /// Frames passed over as still (`--motion`).
    #[serde(default)]
    pub skipped_still: u64,
    /// Frames dropped for waiting longer than `--max-age` for the NPU.
    #[serde(default)]
    pub skipped_age: u64,
    /// Frames replaced, while waiting for the NPU, by a newer frame of the camera.
    #[serde(default)]
    pub skipped_newer: u64,
}

/// What the processes of a stage that were restarted had counted before they died: their
/// last reports' frames, summed per stage name, so a camera's totals cover the whole run.
#[derive(Debug, Default)]
pub struct Carried {
    /// Frames out of the earlier processes, by stage process.
    frames: BTreeMap<StageId, u64>,
    /// Frames each camera had published through earlier publish processes, by camera.
    published: BTreeMap<String, u64>,
}

impl Carried {
    /// Takes in report `r`: when it comes from a new process of its stage, the previous
    /// process's last report (in `latest`) is added to the totals.
    pub fn absorb(&mut self, latest: &BTreeMap<StageId, StageReport>, r: &StageReport) {
        let Some(prev) = latest.get(&r.stage).filter(|p| p.pid != r.pid) else { return };
        *self.frames.entry(r.stage.clone()).or_default() += prev.frames_out;
        if r.stage.is(Stage::Publish) {
            for (name, c) in prev.extra.view::<PublishFacts>().cameras.unwrap_or_default() {
                *self.published.entry(name).or_default() += c.frames;
            }
        }
    }

    /// Frames out of `stage`'s earlier processes.
    pub fn frames(&self, stage: &StageId) -> u64 {
        self.frames.get(stage).copied().unwrap_or(0)
    }

    /// Frames of `camera` published by earlier publish processes.
    pub fn published(&self, camera: &str) -> u64 {
        self.published.get(camera).copied().unwrap_or(0)
    }
}

/// Frames of camera `n` dropped so far, as its last reports count them: its ring's
/// drop-oldest drops, and the frames the scale stage passed over for a newer one or that
/// were dropped after the scale stage.
fn camera_dropped(latest: &BTreeMap<StageId, StageReport>, n: &str) -> u64 {
    let ring = latest.get(&StageId::camera(n)).and_then(|r| r.output_ring).map_or(0, |c| c.dropped);
    let (scale, _) = camera_lines(latest, n);
    ring + scale.skipped_for_newer + scale.dropped_downstream
}

/// Camera `n`'s lines in the scale and the infer stage's last reports (each `None` until
/// that stage reported the camera).
fn camera_lines(
    latest: &BTreeMap<StageId, StageReport>,
    n: &str,
) -> (zcpipe_scale::report::CameraFacts, Option<zcpipe_infer::report::CameraSched>) {
    let scale =
        of(latest, Stage::Scale).and_then(|r| r.extra.view::<ScaleFacts>().cameras.remove(n)).unwrap_or_default();
    let sched = of(latest, Stage::Infer).and_then(|r| r.extra.view::<InferFacts>().cameras.remove(n));
    (scale, sched)
}

/// Each camera's [`CameraSummary`] from the last reports (`latest`, by stage name) of a run
/// with cameras `names` (more than one; their capture stages report as `capture@NAME`).
pub fn camera_summaries(
    names: &[String],
    latest: &BTreeMap<StageId, StageReport>,
    restarts: &BTreeMap<StageId, u32>,
    carried: &Carried,
) -> BTreeMap<String, CameraSummary> {
    let publish_cams =
        of(latest, Stage::Publish).and_then(|r| r.extra.view::<PublishFacts>().cameras).unwrap_or_default();
    names
        .iter()
        .map(|n| {
            let stage = StageId::camera(n);
            let cap = latest.get(&stage);
            let pc = publish_cams.get(n);
            let total = pc.and_then(|c| c.latency.get("total"));
            let (scale, sched) = camera_lines(latest, n);
            let sched = sched.unwrap_or_default();
            let summary = CameraSummary {
                captured: carried.frames(&stage) + cap.map(|r| r.frames_out).unwrap_or(0),
                dropped: camera_dropped(latest, n),
                published: carried.published(n) + pc.map_or(0, |c| c.frames),
                fps_captured: cap.and_then(fps),
                fps_published: pc.and_then(|c| c.out_span.fps()),
                latency_p50_us: total.map(|t| t.p50_us),
                latency_p99_us: total.map(|t| t.p99_us),
                restarts: restarts.get(&stage).copied().unwrap_or(0),
                inferred: sched.counts.inferred,
                skipped_rate: scale.skipped_rate,
                skipped_still: scale.skipped_still,
                skipped_age: sched.counts.expired,
                skipped_newer: sched.counts.replaced,
            };
            (n.clone(), summary)
        })
        .collect()
}

/// A checked `zcpipe run`: built by the command line, which has checked every stage's
/// options as the stage would.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// The data path every stage shares (run directory, stats interval, ...).
    pub data: DataPath,
    /// Each stage process and its arguments after `zcpipe stage <role>`, in start order;
    /// the supervisor adds `--report-fd`.
    pub stage_flags: Vec<(StageId, Vec<String>)>,
    /// The detections socket the publish stage binds (removed if left behind).
    pub publish_socket: std::path::PathBuf,
    /// `--summary-json`: where to write the run summary as JSON too.
    pub summary_json: Option<std::path::PathBuf>,
    /// What the run uses and why (printed before the stages start).
    pub plan: crate::plan::Plan,
    /// When a stage that died is restarted.
    pub restart: super::RestartPolicy,
    /// The cameras: name and source (credentials redacted), in order; one for a single camera.
    pub cameras: Vec<(String, String)>,
    /// The cameras as the stages after capture take them live: name, detection rate and
    /// weight, in order.
    pub live_cameras: Vec<zcpipe_core::control::LiveCamera>,
    /// The group whose members may change the run through its control socket besides its
    /// user (`--socket-group`, else the `zcpipe` group where the run may use it).
    pub control_group: Option<nix::unistd::Group>,
    /// Secrets the stages get in their environment, never on their command lines (which
    /// every local user reads in `/proc/PID/cmdline`; a process's environment only its own
    /// user, proc(5)): (variable, value), e.g. the MQTT password, the web view's token.
    pub secret_env: Vec<(String, String)>,
}

/// How a running pipeline is changed, the command line's side: it holds the run's options,
/// turns each request into a whole new run checked as the command line checks one, and
/// keeps it once the supervisor applied it.
pub trait Reconfigure {
    /// The run after `request` (a change of options, or a reload), and the change in words.
    /// Error: the answer that refuses it (nothing is changed).
    fn change(
        &mut self,
        request: &zcpipe_core::control::Request,
    ) -> std::result::Result<(RunConfig, String), zcpipe_core::control::Reply>;
    /// The change [`Reconfigure::change`] returned last was applied: it is the run's now.
    fn commit(&mut self);
    /// Each camera's zones, lines and loitering times now (`camera`: that one).
    fn scene(
        &self,
        camera: Option<&str>,
    ) -> std::result::Result<Vec<zcpipe_core::control::CameraScene>, zcpipe_core::control::Reply>;
    /// Each camera's zones, lines and loitering times after the change returned last.
    fn next_scene(&self) -> Vec<zcpipe_core::control::CameraScene>;
}

/// Runs the pipeline; returns the exit code (0 if every stage ended cleanly). With `live`,
/// it takes changes while it runs: on its control socket, and a reload when `reload` is set
/// (SIGHUP).
pub fn run(a: RunConfig, live: Option<Box<dyn Reconfigure>>, stop: &AtomicBool, reload: &AtomicBool) -> Result<i32> {
    let run_dir = &a.data.run_dir;
    zcpipe_core::config::private_dir(run_dir)?;
    if let Some(live) = procs::live_socket_in(run_dir) {
        anyhow::bail!(
            "{} is in use by a running zcpipe ({}); stop it, or choose another --instance or --run-dir",
            run_dir.display(),
            live.display()
        );
    }
    let mut sup = supervisor::Supervisor::start(a, live)?;
    while sup.turn(stop, reload) {}
    sup.finish()
}

/// The longest wait before restarting the capture stage of one camera of several (a camera
/// that is gone is retried this often at most).
pub const CAMERA_BACKOFF_MAX: Duration = Duration::from_secs(30);

mod control;
mod procs;
mod summary;
mod supervisor;
pub use summary::summary_text;
use summary::{fps, of};

#[cfg(test)]
mod tests {
    use super::summary::StatsLines;
    use super::*;
    use std::time::{Duration, Instant};
    use zcpipe_core::metrics::FrameSpan;

    fn id(stage: &str) -> StageId {
        stage.parse().unwrap()
    }

    fn report(stage: &str, frames: u64, first_s: f64, last_s: f64) -> StageReport {
        StageReport {
            stage: id(stage),
            frames_out: frames,
            out_span: Some(FrameSpan { frames, first_s, last_s }),
            ..Default::default()
        }
    }

    fn ago(s: u64) -> Option<Instant> {
        Instant::now().checked_sub(Duration::from_secs(s))
    }

    /// A stats line waits until every live stage has reported since the last one, never
    /// repeats stale counts, gives rates since the previous line, and does not wait for
    /// ever on a stuck stage.
    #[test]
    fn stats_lines_wait_for_fresh_reports_and_rate_the_interval() {
        let every = Duration::from_secs(10);
        let ids = ["capture", "scale", "infer", "publish"].map(id);
        let live: Vec<&StageId> = ids.iter().collect();
        let mut latest = BTreeMap::new();
        for (s, n) in [("capture", 31), ("scale", 31), ("infer", 31), ("publish", 31)] {
            latest.insert(id(s), report(s, n, 0.5, 1.5));
        }
        let mut st = StatsLines::default();
        st.fresh.extend([id("capture"), id("scale")]);
        assert_eq!(
            st.due(every, &live, &latest, &[], &Carried::default()),
            None,
            "infer and publish have not reported yet"
        );
        st.fresh.extend(ids.iter().cloned());
        let line = st.due(every, &live, &latest, &[], &Carried::default()).expect("all fresh");
        assert!(line.contains("capture 31 frames 30.0 fps | published 31 frames 30.0 fps"), "{line}");
        assert_eq!(st.due(every, &live, &latest, &[], &Carried::default()), None, "an interval has not passed");
        st.last = ago(12);
        assert_eq!(st.due(every, &live, &latest, &[], &Carried::default()), None, "nothing new: no stale repeat");
        // 15 more frames in the next second at capture, 5 at publish.
        latest.insert(id("capture"), report("capture", 46, 0.5, 2.5));
        latest.insert(id("publish"), report("publish", 36, 0.5, 2.5));
        st.fresh.extend(ids.iter().cloned());
        let line = st.due(every, &live, &latest, &[], &Carried::default()).expect("all fresh again");
        assert!(line.contains("capture 46 frames 15.0 fps | published 36 frames 5.0 fps"), "{line}");
        // A stuck stage: after two intervals, one fresh report is enough.
        st.last = ago(12);
        st.fresh.insert(id("capture"));
        assert_eq!(st.due(every, &live, &latest, &[], &Carried::default()), None);
        st.last = ago(21);
        let line = st.due(every, &live, &latest, &[], &Carried::default()).expect("two intervals passed");
        assert!(line.contains("capture 46 frames - fps"), "no new capture frame since: {line}");
    }
}

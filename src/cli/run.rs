//! `zcpipe run`: its options, and the command line of each stage the supervisor starts.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::supervise::run::RunConfig;
use zcpipe_core::frame::Stage;
use zcpipe_core::id::{Role, StageId};

use super::capture::CaptureArgs;
use super::common::PipelineArgs;
use super::display::RunDisplayArgs;
use super::http::HttpArgs;
use super::mqtt::MqttArgs;
use super::publish::PublishArgs;
use super::record::RecordArgs;
use super::snapshot::SnapshotArgs;
use super::track::TrackArgs;

/// `zcpipe run`: the plan (printed; with `--dry-run`, only printed), then the run.
pub fn run(a: &RunArgs, stop: &'static std::sync::atomic::AtomicBool) -> Result<i32> {
    let cfg = a.config()?;
    if a.dry_run {
        let mut text = if a.json { serde_json::to_string(&cfg.plan)? + "\n" } else { cfg.plan.text() };
        if !a.json && cfg.cameras.len() > 1 {
            for (name, source) in &cfg.cameras {
                text += &format!("camera {name}: {source} (its own capture stage, {})\n", StageId::camera(name));
            }
        }
        super::print_out(&text);
        return Ok(0);
    }
    for line in cfg.plan.text().lines() {
        log::info!("{line}");
    }
    if cfg.cameras.len() > 1 {
        for (name, source) in &cfg.cameras {
            log::info!("camera {name}: {source} (its own capture stage, {})", StageId::camera(name));
        }
    }
    // A run started by `zcpipe compare` (its options in a memfd) cannot read them again.
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let live: Option<Box<dyn crate::supervise::run::Reconfigure>> =
        match argv.iter().any(|x| x.to_str().is_some_and(|s| s.starts_with("--args-fd="))) {
            true => None,
            false => Some(Box::new(super::live::Live::new(a.clone(), argv, super::config::process_env()))),
        };
    crate::supervise::run::run(cfg, live, stop, &super::signals::RELOAD)
}

/// `zcpipe run`.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    /// The configuration file (TOML; docs/src/user/config.md): its keys are these flags,
    /// below the command line and the ZCPIPE_* variables. Default: /etc/zcpipe/zcpipe.toml when
    /// it exists, or $ZCPIPE_CONFIG; `none`: no file.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Detections socket (default $XDG_RUNTIME_DIR/zcpipe/detections.sock, /run/zcpipe/... for root; detections-<instance>.sock for an --instance other than default).
    #[arg(long)]
    pub publish: Option<PathBuf>,
    /// Group whose members may connect to the detections socket (mode 660) and change the run
    /// with zcpipe ctl (its control socket). Default: the zcpipe group when it exists, else
    /// only this user.
    #[arg(long)]
    pub socket_group: Option<String>,
    /// Print the JSON lines on stdout instead of readable lines (logs, stats, summary stay on stderr).
    #[arg(long)]
    pub json: bool,
    /// Print nothing per frame (stats and summary only).
    #[arg(long, conflicts_with = "json")]
    pub no_print: bool,
    /// Also write the run summary as JSON to this file.
    #[arg(long)]
    pub summary_json: Option<PathBuf>,
    /// Print the plan (what `auto` chose on this machine, and why; with --json as one JSON
    /// object) and exit 0 without starting any stage.
    #[arg(long)]
    pub dry_run: bool,
    /// A stage that dies after set-up is restarted alone (the others keep running) at most
    /// this many times within --restart-window; one more death stops the run. 0: a dying
    /// stage stops the run at once (0 to 1000).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub restart_max: u32,
    /// The window, in seconds, --restart-max counts restarts over (1 to 86400).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub restart_window: u64,
    /// Seconds a restarted stage must run for its back-off (100 ms doubling to 5 s) to start
    /// again from 100 ms (1 to 86400).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub restart_reset: u64,
    /// A stage set up that sends no report (a heartbeat every second) for this many seconds
    /// is hung (stopped, deadlocked): it is killed and restarted. 0: no watchdog (0 to 3600).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub watchdog: u64,
    #[command(flatten)]
    pub track: TrackArgs,
    #[command(flatten)]
    pub http: HttpArgs,
    #[command(flatten)]
    pub snapshot: SnapshotArgs,
    #[command(flatten)]
    pub mqtt: MqttArgs,
    #[command(flatten)]
    pub display: RunDisplayArgs,
    #[command(flatten)]
    pub record: RecordArgs,
}

impl RunArgs {
    /// The checked run: every stage's options are checked as the stage would (so a bad
    /// value is one line from here, not a failure inside a child), and each stage's command
    /// line (`zcpipe stage <name> ...`) is written from the same options.
    pub fn config(&self) -> Result<RunConfig> {
        let data = self.pipeline.check()?;
        if let Some(dir) =
            self.summary_json.as_deref().and_then(|p| p.parent()).filter(|d| !d.as_os_str().is_empty() && !d.is_dir())
        {
            anyhow::bail!("--summary-json: folder {} does not exist; create it or pass another path", dir.display());
        }
        let cams = self.pipeline.cams()?;
        let names: Vec<String> = cams.iter().map(|(n, _)| n.clone()).collect();
        let several = cams.len() > 1;
        let publish = PublishArgs {
            publish: self.publish.clone(),
            print: zcpipe_publish::PrintMode::None,
            socket_group: self.socket_group.clone(),
            cameras: names.clone(),
            track: self.track.clone(),
            http: self.http.clone(),
            snapshot: self.snapshot.clone(),
            mqtt: self.mqtt.clone(),
        };
        zcpipe_publish::socket_group(self.socket_group.as_deref())?;
        // The tracking, web view, snapshot and MQTT options checked here as the publish stage
        // will: one line each (the web view's address was checked free before: `cli::main`).
        publish.config(&data.instance)?;
        let socket = publish.socket(&data.instance);
        let tracking = self.track.tracker != zcpipe_track::TrackerKind::None;
        let zone_names: Vec<String> = self.track.zones.iter().map(|z| z.zone.name.clone()).collect();
        let own = if self.pipeline.cameras.is_empty() {
            vec![vec![]; names.len()]
        } else {
            super::cameras::record_flags(&self.pipeline.cameras)
        };
        let recording = self.record.per_camera(&names, &own)?;
        recording.args.config_with(&socket, tracking, &zone_names, recording.rules.clone())?;
        // The plan is the first camera's; every other camera's `auto` is resolved by the same rule.
        let first = self.pipeline.for_camera(&cams[0].1);
        let mut plan = first.plan(socket.clone())?;
        let lanes = first.lanes(&plan);
        let resolved = first.resolved(&plan);
        let mut captures = vec![resolved.capture.clone()];
        for (name, c) in &cams[1..] {
            let p = self.pipeline.for_camera(c);
            let theirs = p.plan(socket.clone())?;
            captures.push(p.resolved(&theirs).capture);
            // The plan names every camera's source (`plan: front: ... + door: ... -> ...`).
            plan.sources.extend(
                theirs.sources.into_iter().map(|st| crate::plan::Step { what: format!("{name}: {}", st.what), ..st }),
            );
        }
        if several {
            plan.sources[0].what = format!("{}: {}", names[0], plan.sources[0].what);
        }
        self.describe_outputs(&mut plan, &data.instance);
        // The data path of the resolved options (the heap the plan chose).
        let data = zcpipe_core::config::DataPath { heap: resolved.common.heap, ..data };
        let common = resolved.common.flags(&data);
        let mut stage_flags: Vec<(StageId, Vec<String>)> = vec![];
        let display_card = self.display_card(&mut plan);
        self.capture_flags(&mut stage_flags, &common, &names, &captures, display_card.is_some(), &recording.recorded);
        let resolved =
            PipelineArgs { cameras: self.pipeline.cameras.clone(), ..resolved }.with_cameras(&names, lanes)?;
        self.stage_flags(&mut stage_flags, &common, &names, &resolved, recording.args.record_dir.as_deref());
        if let Some(card) = &display_card {
            self.display_stage(&mut stage_flags, &mut plan, card, &common, &names, &socket);
        }
        record_stage(&recording, &names, &mut stage_flags, &mut plan, &common, &socket);
        let cameras: Vec<(String, String)> = names
            .iter()
            .zip(&captures)
            .map(|(n, c)| (n.clone(), zcpipe_capture::spec::redact_url(&c.source)))
            .collect();
        let live_cameras = names
            .iter()
            .enumerate()
            .map(|(i, name)| zcpipe_core::control::LiveCamera {
                name: name.clone(),
                detect_fps: zcpipe_core::config::per_camera(&resolved.scale.detect_fps, i, 0.0),
                weight: zcpipe_core::config::per_camera(&resolved.infer.weight, i, 1.0),
            })
            .collect();
        let restart = self.restart_policy();
        Ok(RunConfig {
            publish_socket: socket,
            data,
            stage_flags,
            summary_json: self.summary_json.clone(),
            plan,
            restart,
            cameras,
            live_cameras,
            control_group: self.control_group()?,
            secret_env: [self.mqtt.secret_env(), self.http.secret_env()].concat(),
        })
    }

    /// The plan's outputs beyond the socket: the socket's step says what the lines carry (the
    /// tracker and the zones), then the web view, the snapshots and MQTT.
    fn describe_outputs(&self, plan: &mut crate::plan::Plan, instance: &str) {
        // The socket's step says what the lines carry: the tracker and the zones.
        if let Some(out) = plan.outputs.first_mut() {
            out.what = format!("{} ({})", out.what, self.track.describe());
        }
        if let Some(what) = self.http.describe() {
            let why = if self.http.http_allow_remote {
                "--http with --http-allow-remote"
            } else {
                "--http (this machine only)"
            };
            plan.outputs.push(crate::plan::Step { what, why: why.into() });
        }
        if let Some(what) = self.snapshot.describe(self.track.tracker != zcpipe_track::TrackerKind::None) {
            plan.outputs.push(crate::plan::Step { what, why: "--snapshot-dir".into() });
        }
        if let Some(what) = self.mqtt.describe() {
            let why = match self.mqtt.mqtt_no_discovery {
                false => format!(
                    "--mqtt: detections, counts, events and stats under {}/, Home Assistant discovery under {}/",
                    self.mqtt.topic_prefix(instance),
                    self.mqtt.mqtt_discovery_prefix
                ),
                true => {
                    format!("--mqtt: detections, counts, events and stats under {}/", self.mqtt.topic_prefix(instance))
                }
            };
            plan.outputs.push(crate::plan::Step { what, why });
        }
    }

    /// The display's card, or `None` with a step in the plan saying why there is none.
    fn display_card(&self, plan: &mut crate::plan::Plan) -> Option<PathBuf> {
        // The display (a fifth, optional process) on the first camera: its card now, or one
        // line why there is none (the pipeline runs without it).
        match &self.display.display {
            zcpipe_display::DisplayTarget::None => None,
            t => match zcpipe_display::resolve_card(t) {
                Ok(card) => Some(card),
                Err(e) => {
                    log::warn!("{e:#}; the pipeline runs without a display");
                    plan.outputs
                        .push(crate::plan::Step { what: "no display".into(), why: format!("--display {t}: {e:#}") });
                    None
                }
            },
        }
    }

    /// Each camera's capture stage command line: the common flags and the camera's own.
    fn capture_flags(
        &self,
        stage_flags: &mut Vec<(StageId, Vec<String>)>,
        common: &[String],
        names: &[String],
        captures: &[CaptureArgs],
        display: bool,
        recorded: &[bool],
    ) {
        let several = names.len() > 1;
        for (k, (name, cap)) in names.iter().zip(captures).enumerate() {
            let mut v = common.to_vec();
            let mut cap = cap.clone();
            if k == 0 && display {
                // The display's tap holds up to 2 buffers (on screen, and queued for the
                // next flip): the pool gets them on top, so the pipeline keeps its own.
                cap.buffers = (cap.buffers + zcpipe_display::stage::DISPLAY_HOLD).min(64);
            }
            let record = recorded.get(k).copied().unwrap_or(false);
            if record {
                // The recorder's tap (a raw camera's encoder reading a frame) holds a buffer.
                cap.buffers = (cap.buffers + 1).min(64);
            }
            v.extend(cap.flags());
            if several {
                v.push(format!("--camera={name}"));
            }
            if record {
                // The recorder knows the camera by the name its events carry.
                v.push("--record".into());
                v.push(format!("--record-camera={name}"));
            }
            stage_flags.push((StageId::capture(several.then_some(name.as_str())), v));
        }
    }

    /// The scale, infer and publish stages' command lines.
    fn stage_flags(
        &self,
        stage_flags: &mut Vec<(StageId, Vec<String>)>,
        common: &[String],
        names: &[String],
        p: &PipelineArgs,
        record_dir: Option<&std::path::Path>,
    ) {
        let print = if self.json {
            "json"
        } else if self.no_print {
            "none"
        } else {
            "human"
        };
        for stage in [Stage::Scale, Stage::Infer, Stage::Publish] {
            let mut v = common.to_vec();
            v.extend(match stage {
                Stage::Scale => p.scale.flags(),
                Stage::Infer => p.infer.flags(),
                _ => {
                    let mut v: Vec<String> =
                        self.publish.iter().map(|p| format!("--publish={}", p.display())).collect();
                    v.push(format!("--print={print}"));
                    v.extend(self.socket_group.iter().map(|g| format!("--socket-group={g}")));
                    v.push(format!("--cameras={}", names.join(",")));
                    v.extend(self.track.flags());
                    v.extend(self.http.flags());
                    // The recorder's clips are announced, and listed and played in the web view.
                    if let Some(dir) = self.http.clips.as_deref().or(record_dir) {
                        v.push(format!("--clips={}", dir.display()));
                    }
                    // /metrics asks the inference service where the infer stage puts it.
                    if let (Some(p), true, None) =
                        (&p.infer.serve_socket, self.http.http.is_some(), &self.http.service_socket)
                    {
                        v.push(format!("--service-socket={}", p.display()));
                    }
                    v.extend(self.snapshot.flags());
                    v.extend(self.mqtt.flags());
                    v
                }
            });
            stage_flags.push((stage.into(), v));
        }
    }

    /// The display stage's command line on the first camera, and its step in the plan.
    fn display_stage(
        &self,
        stage_flags: &mut Vec<(StageId, Vec<String>)>,
        plan: &mut crate::plan::Plan,
        card: &std::path::Path,
        common: &[String],
        names: &[String],
        socket: &std::path::Path,
    ) {
        let several = names.len() > 1;
        let mut v = common.to_vec();
        v.push(format!("--display={}", card.display()));
        v.extend(self.display.flags());
        if several {
            v.push(format!("--camera={}", names[0]));
        }
        v.push(format!("--detections={}", socket.display()));
        v.extend(self.track.display_flags_of(&names[0]));
        stage_flags.push((Role::Display.into(), v));
        let why = if self.pipeline.common.copy_mode {
            "--display (--copy-mode: a CPU copy of each frame, as a plain viewer)"
        } else {
            "--display (the camera's buffers scanned out where a plane takes them, else composed by the CPU; the stage says which)"
        };
        plan.outputs.push(crate::plan::Step {
            what: format!("display on {} (camera {})", card.display(), names[0]),
            why: why.into(),
        });
    }

    /// The group whose members may change the run besides its user: `--socket-group`, or the
    /// `zcpipe` group by default, except for a run as root: who may change a run may have it
    /// read any file as a source and write where `--record-dir` points, as its user, so a root
    /// run gives that to a group only when told to (and says so when it binds the socket).
    fn control_group(&self) -> Result<Option<nix::unistd::Group>> {
        let root = nix::unistd::geteuid().is_root();
        Ok(match (&self.socket_group, root) {
            (None, true) => None,
            (name, _) => zcpipe_publish::socket_group(name.as_deref())?,
        })
    }

    /// `--restart-max`, `--restart-window`, `--restart-reset` and `--watchdog`.
    fn restart_policy(&self) -> crate::supervise::RestartPolicy {
        crate::supervise::RestartPolicy {
            max: self.restart_max,
            window: std::time::Duration::from_secs(self.restart_window),
            reset_after: std::time::Duration::from_secs(self.restart_reset),
            watchdog: (self.watchdog > 0).then(|| std::time::Duration::from_secs(self.watchdog)),
        }
    }
}

/// The record stage's command line (with `--record-dir`), and its step in the plan: which
/// cameras are recorded when not all are, and those with rules of their own.
fn record_stage(
    r: &super::record::Recording,
    names: &[String],
    stage_flags: &mut Vec<(StageId, Vec<String>)>,
    plan: &mut crate::plan::Plan,
    common: &[String],
    socket: &std::path::Path,
) {
    let Some(what) = r.describe(names) else { return };
    let mut v = common.to_vec();
    v.extend(r.stage_flags());
    v.push(format!("--detections={}", socket.display()));
    stage_flags.push((Role::Record.into(), v));
    plan.outputs.push(crate::plan::Step {
        what,
        why: "--record-dir (compressed cameras' own H.264/H.265 packets remuxed, never re-encoded; raw cameras encoded, by MPP on a board, else on the CPU; a process of its own)"
            .into(),
    });
}

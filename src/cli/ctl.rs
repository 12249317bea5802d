//! `zcpipe ctl`: changes a running `zcpipe run` through its control socket
//! (`control.sock` in its run directory): cameras added, removed and restarted, zones, lines
//! and loitering times set, settings changed, the configuration file read again. Each
//! command is one request and one answer ([`zcpipe_core::control`]); `--json` prints the
//! answer as it came, for scripts.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

use zcpipe_core::control::{self, CameraRun, Refusal, Reply, Request, Setting, ShapeKind};

/// `zcpipe ctl`.
#[derive(Args, Debug, Clone)]
pub struct CtlArgs {
    /// The run to change: the `--instance` it was started with.
    #[arg(long, default_value = "default")]
    pub instance: String,
    /// The run's directory, when it was started with `--run-dir`.
    #[arg(long, value_name = "DIR")]
    pub run_dir: Option<PathBuf>,
    /// Print the run's answer as JSON (one line), for scripts.
    #[arg(long)]
    pub json: bool,
    /// What to do.
    #[command(subcommand)]
    pub what: CtlCmd,
}

/// What `zcpipe ctl` does.
#[derive(Subcommand, Debug, Clone)]
pub enum CtlCmd {
    /// The cameras and their state; `add`, `remove` or `restart` one.
    Cameras {
        /// Nothing: list them.
        #[command(subcommand)]
        op: Option<CameraOp>,
    },
    /// A camera's zones (`zones`: every camera's zones, lines and loitering times).
    Zones {
        /// Nothing: list them.
        #[command(subcommand)]
        op: Option<ShapeOp>,
    },
    /// A camera's lines.
    Lines {
        /// Nothing: list them.
        #[command(subcommand)]
        op: Option<ShapeOp>,
    },
    /// A camera's loitering times (`set CAMERA ZONE=SECONDS`).
    Loiter {
        /// Nothing: list them.
        #[command(subcommand)]
        op: Option<ShapeOp>,
    },
    /// Changes a setting: `zcpipe ctl set score-threshold 0.5`, `zcpipe ctl set --camera back detect-fps 5`.
    Set {
        /// The camera, for a setting that is per camera (detect-fps).
        #[arg(long)]
        camera: Option<String>,
        /// The setting.
        setting: SettingName,
        /// Its new value (on/off for mqtt).
        value: String,
    },
    /// Reads the configuration file again and applies the difference (as `systemctl reload`
    /// and SIGHUP to `zcpipe run` do).
    Reload,
}

/// `zcpipe ctl cameras ...`.
#[derive(Subcommand, Debug, Clone)]
pub enum CameraOp {
    /// Adds a camera: `NAME=SOURCE`, then its own options (`--fps=10`, `--detect-fps=5`, ...).
    Add {
        /// `NAME=SOURCE`, as `--source` takes it.
        camera: String,
        /// The camera's own options, each `--key=value`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        options: Vec<String>,
    },
    /// Removes a camera: its tracks end, its capture stage stops (the others go on).
    Remove {
        /// The camera.
        camera: String,
    },
    /// Restarts a camera's capture stage.
    Restart {
        /// The camera.
        camera: String,
    },
    /// Lists them (the default).
    List,
}

/// `zcpipe ctl zones|lines|loiter ...`.
#[derive(Subcommand, Debug, Clone)]
pub enum ShapeOp {
    /// Lists them (of one camera, or every camera's).
    List {
        /// One camera.
        camera: Option<String>,
    },
    /// Adds one, or replaces the one of its name (`zones set cam0 door=100,100,400,100,400,300`,
    /// `lines set cam0 exit=600,200,600,432`, `loiter set cam0 door=10`).
    Set {
        /// The camera.
        camera: String,
        /// As its flag takes it, without the camera.
        spec: String,
    },
    /// Removes one (a zone takes its loitering time with it).
    Remove {
        /// The camera.
        camera: String,
        /// Its name.
        name: String,
    },
}

/// The settings `zcpipe ctl set` changes.
#[derive(ValueEnum, Debug, Clone, Copy)]
pub enum SettingName {
    /// --score-threshold (0 to 1).
    ScoreThreshold,
    /// --nms-iou.
    NmsIou,
    /// --detect-fps, per camera with --camera.
    DetectFps,
    /// --track-high (0.05 to 0.95).
    TrackHigh,
    /// --track-keepalive, seconds (0.05 to 3600).
    TrackKeepalive,
    /// MQTT on or off.
    Mqtt,
    /// --snapshot-every, seconds (0: at events only).
    SnapshotEvery,
}

impl CtlArgs {
    /// Sends the request and prints the answer; the exit code (0 done, 1 refused).
    pub fn run(self) -> anyhow::Result<i32> {
        // A command ctl cannot read is exit 2, as a bad flag is.
        let request = match self.request() {
            Ok(r) => r,
            Err(e) => {
                eprintln!("zcpipe ctl: error: {e:#}");
                return Ok(2);
            }
        };
        let size = serde_json::to_vec(&control::Ask { version: control::VERSION, request: request.clone() })?.len();
        if size > control::MAX_MESSAGE {
            eprintln!(
                "zcpipe ctl: error: the request is {size} bytes, over the {} a request may have: give fewer points",
                control::MAX_MESSAGE
            );
            return Ok(2);
        }
        let dir = zcpipe_core::config::run_dir(&self.instance, self.run_dir.as_deref());
        let path = dir.join(control::SOCKET);
        let which = match &self.run_dir {
            Some(d) => format!("the `zcpipe run --run-dir {}`", d.display()),
            None => format!("`zcpipe run --instance {}`", self.instance),
        };
        let reply = control::call(&path, request, control::ANSWER_WAIT).map_err(|e| {
            anyhow::anyhow!("cannot reach the run at {} ({e:#}): is {which} running, as this user?", path.display())
        })?;
        let text = if self.json { serde_json::to_string(&reply)? + "\n" } else { human(&reply) };
        super::print_out(&text);
        Ok(if matches!(reply, Reply::Refused { .. }) { 1 } else { 0 })
    }

    fn request(&self) -> anyhow::Result<Request> {
        let shape = |kind: ShapeKind, op: &Option<ShapeOp>| match op.clone().unwrap_or(ShapeOp::List { camera: None }) {
            ShapeOp::List { camera } => Request::Scene { camera },
            ShapeOp::Set { camera, spec } => Request::SetShape { camera, kind, spec },
            ShapeOp::Remove { camera, name } => Request::RemoveShape { camera, kind, name },
        };
        Ok(match &self.what {
            CtlCmd::Cameras { op: None | Some(CameraOp::List) } => Request::Cameras,
            CtlCmd::Cameras { op: Some(CameraOp::Add { camera, options }) } => {
                let (name, source) = super::cameras::split_name(camera)?;
                let name = name.ok_or_else(|| anyhow::anyhow!("cameras add {camera:.40}: give NAME=SOURCE"))?;
                Request::AddCamera { camera: name, source, options: options.clone() }
            }
            CtlCmd::Cameras { op: Some(CameraOp::Remove { camera }) } => {
                Request::RemoveCamera { camera: camera.clone() }
            }
            CtlCmd::Cameras { op: Some(CameraOp::Restart { camera }) } => {
                Request::RestartCamera { camera: camera.clone() }
            }
            CtlCmd::Zones { op } => shape(ShapeKind::Zone, op),
            CtlCmd::Lines { op } => shape(ShapeKind::Line, op),
            CtlCmd::Loiter { op } => shape(ShapeKind::Loiter, op),
            CtlCmd::Set { camera, setting, value } => {
                Request::Set { camera: camera.clone(), setting: setting.with(value)? }
            }
            CtlCmd::Reload => Request::Reload,
        })
    }
}

impl SettingName {
    fn with(self, value: &str) -> anyhow::Result<Setting> {
        let name = self.to_possible_value().map(|p| p.get_name().to_string()).unwrap_or_default();
        let num = |v: &str| -> anyhow::Result<f64> {
            v.trim()
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .ok_or_else(|| anyhow::anyhow!("set {name} {v:.40}: not a number"))
        };
        Ok(match self {
            SettingName::ScoreThreshold => Setting::ScoreThreshold(num(value)? as f32),
            SettingName::NmsIou => Setting::NmsIou(num(value)? as f32),
            SettingName::DetectFps => Setting::DetectFps(num(value)?),
            SettingName::TrackHigh => Setting::TrackHigh(num(value)? as f32),
            SettingName::TrackKeepalive => Setting::TrackKeepalive(num(value)?),
            SettingName::SnapshotEvery => Setting::SnapshotEvery(num(value)?),
            SettingName::Mqtt => Setting::Mqtt(match value {
                "on" | "true" | "1" => true,
                "off" | "false" | "0" => false,
                v => anyhow::bail!("set mqtt {v:.40}: say on or off"),
            }),
        })
    }
}

/// The answer in words.
fn human(reply: &Reply) -> String {
    match reply {
        Reply::Done { change, restarted, started, stopped } => {
            let mut s = format!("done: {change}");
            let how = [("restarted", restarted), ("started", started), ("stopped", stopped)];
            let parts: Vec<String> =
                how.iter().filter(|(_, v)| !v.is_empty()).map(|(w, v)| format!("{w} {}", v.join(", "))).collect();
            s += &match parts.is_empty() {
                true => " (applied live, nothing restarted)".to_string(),
                false => format!(" ({})", parts.join("; ")),
            };
            s + "\n"
        }
        Reply::Unchanged => "unchanged: that is how the run is already\n".to_string(),
        Reply::Cameras { cameras } => cameras
            .iter()
            .map(|c| {
                let state = match c.state {
                    CameraRun::Streaming => "streaming",
                    CameraRun::Starting => "starting",
                    CameraRun::Reconnecting => "reconnecting",
                    CameraRun::Stopped => "stopped",
                };
                let pid = c.pid.map(|p| format!(" pid {p}")).unwrap_or_default();
                format!("{}  {state}{pid}  {} frames  {} restarts  {}\n", c.name, c.frames, c.restarts, c.source)
            })
            .collect(),
        Reply::Scene { cameras } => cameras
            .iter()
            .map(|c| {
                let mut s = format!("{}:\n", c.camera);
                for (what, v) in [("zone", &c.zones), ("line", &c.lines), ("loiter", &c.loiter)] {
                    for x in v {
                        s += &format!("  {what} {x}\n");
                    }
                }
                if c.zones.is_empty() && c.lines.is_empty() && c.loiter.is_empty() {
                    s += "  (no zones, lines or loitering times)\n";
                }
                s
            })
            .collect(),
        Reply::Refused { error, message } => {
            let why = match error {
                Refusal::Busy => "busy",
                Refusal::Failed => "failed",
                _ => "refused",
            };
            format!("{why}: {message}\n")
        }
    }
}

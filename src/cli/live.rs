//! Changing a running `zcpipe run`, the command line's side: the run's options as parsed
//! ([`RunArgs`]), each control request turned into new options and checked exactly as the
//! command line checks them ([`RunArgs::config`]), and a reload that reads the configuration
//! file again under the run's own command line. The supervisor applies what comes out
//! ([`crate::supervise::run::Reconfigure`]).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;

use clap::Parser as _;
use zcpipe_core::control::{CameraScene, Refusal, Reply, Request, Setting, ShapeKind};
use zcpipe_track::zone::LoiterSpec;
use zcpipe_track::{LineSpec, ZoneSpec};

use super::cameras::{CameraGroup, PER_CAMERA, PER_CAMERA_RECORD, PER_CAMERA_SCHED};
use super::run::RunArgs;
use super::scene::Given;
use crate::supervise::run::{Reconfigure, RunConfig};

/// A running `zcpipe run`'s options and how to read them again.
pub struct Live {
    /// The options the run has now.
    args: RunArgs,
    /// The options of the change last made, until it is applied ([`Reconfigure::commit`]).
    next: Option<RunArgs>,
    /// The run's own command line and environment, and the default configuration file: a
    /// reload parses them again.
    argv: Vec<OsString>,
    env: BTreeMap<String, String>,
    default_file: PathBuf,
    /// The MQTT broker while MQTT is switched off.
    mqtt_off: Option<String>,
}

fn refused(error: Refusal, message: impl Into<String>) -> Reply {
    Reply::Refused { error, message: message.into() }
}

fn invalid(message: impl Into<String>) -> Reply {
    refused(Refusal::Invalid, message)
}

impl Live {
    /// The run of `args`, started from `argv` (the whole command line) with `env`.
    pub fn new(args: RunArgs, argv: Vec<OsString>, env: BTreeMap<String, String>) -> Live {
        Live { args, next: None, argv, env, default_file: PathBuf::from(super::config::DEFAULT_PATH), mqtt_off: None }
    }

    /// The options after `request`, and the change in words.
    fn edit(&self, request: &Request) -> Result<(RunArgs, String), Reply> {
        let mut a = self.args.clone();
        let names = camera_names(&self.args);
        let change = match request {
            Request::AddCamera { camera, source, options } => add_camera(&mut a, &names, camera, source, options)?,
            Request::SetShape { camera, kind, spec } => {
                known(&names, camera)?;
                set_shape(&mut a, &names, camera, *kind, spec)?
            }
            Request::RemoveShape { camera, kind, name } => {
                known(&names, camera)?;
                remove_shape(&mut a, &names, camera, *kind, name)?
            }
            Request::Set { camera, setting } => {
                if let Some(c) = camera {
                    known(&names, c)?;
                }
                set(&mut a, &names, camera.as_deref(), setting, &self.mqtt_off)?
            }
            _ => return Err(invalid("not a change of the run's options")),
        };
        Ok((a, change))
    }
}

impl Reconfigure for Live {
    fn change(&mut self, request: &Request) -> Result<(RunConfig, String), Reply> {
        let (args, change) = match request {
            Request::Reload => {
                let (a, layered) = super::config::parse_run(self.argv.clone(), &self.env, &self.default_file)
                    .map_err(|e| invalid(format!("reload: {e}")))?;
                // A value the file gives that the run refuses: the file's line named.
                a.config().map_err(|e| invalid(format!("reload: {}", layered.locate(&format!("{e:#}")))))?;
                let what = reloaded(&self.args, &a);
                (a, what)
            }
            r => self.edit(r)?,
        };
        let cfg = args.config().map_err(|e| invalid(format!("{e:#}")))?;
        if cfg.data.run_dir != self.run_dir() {
            return Err(invalid("reload: the run directory (--instance, --run-dir) cannot change while the run goes on; restart zcpipe run for it"));
        }
        self.next = Some(args);
        Ok((cfg, change))
    }

    fn commit(&mut self) {
        if let Some(a) = self.next.take() {
            if a.mqtt.mqtt.is_some() {
                self.mqtt_off = None;
            } else if self.args.mqtt.mqtt.is_some() {
                self.mqtt_off = self.args.mqtt.mqtt.clone();
            }
            self.args = a;
        }
    }

    fn next_scene(&self) -> Vec<CameraScene> {
        let a = self.next.as_ref().unwrap_or(&self.args);
        camera_names(a).iter().map(|n| scene_of(a, n)).collect()
    }

    fn scene(&self, camera: Option<&str>) -> Result<Vec<CameraScene>, Reply> {
        let names = camera_names(&self.args);
        if let Some(c) = camera {
            known(&names, c)?;
        }
        Ok(names.iter().filter(|n| camera.is_none_or(|c| c == *n)).map(|n| scene_of(&self.args, n)).collect())
    }
}

impl Live {
    fn run_dir(&self) -> PathBuf {
        self.args.pipeline.check().map(|d| d.run_dir).unwrap_or_default()
    }
}

/// `camera`, if it is one of `names`.
fn known(names: &[String], camera: &str) -> Result<(), Reply> {
    match names.iter().any(|n| n == camera) {
        true => Ok(()),
        false => Err(refused(
            Refusal::UnknownCamera,
            format!("no camera {camera} in this run (it has {}); `zcpipe ctl cameras` lists them", names.join(", ")),
        )),
    }
}

/// The cameras of `a`, in the run's order (none if its camera options do not read).
fn camera_names(a: &RunArgs) -> Vec<String> {
    a.pipeline.cams().map(|c| c.into_iter().map(|(n, _)| n).collect()).unwrap_or_default()
}

/// Camera `camera`'s zones, lines and loitering times, each as its flag without the camera.
pub fn scene_of(a: &RunArgs, camera: &str) -> CameraScene {
    let strip = |flag: &str, f: String| f.strip_prefix(flag).map(str::to_string).unwrap_or(f);
    let own = |text: &str, cam: Option<&str>| match cam {
        None => Some(text.to_string()),
        Some(c) if c == camera => Some(text.strip_prefix(&format!("{c}:")).unwrap_or(text).to_string()),
        Some(_) => None,
    };
    CameraScene {
        camera: camera.to_string(),
        zones: a.track.zone_flags_of(camera).into_iter().map(|f| strip("--zone=", f)).collect(),
        lines: a.track.scene.lines.iter().filter_map(|g| own(&g.text, g.spec.camera.as_deref())).collect(),
        loiter: a.track.scene.loiter.iter().filter_map(|g| own(&g.text, g.spec.camera.as_deref())).collect(),
    }
}

/// The name before `=` in a shape's text (`door=1,2,...`: `door`).
fn name_of(spec: &str) -> &str {
    spec.split_once('=').map_or(spec, |(n, _)| n)
}

/// Refuses a spec that names a camera: the request names it.
fn no_camera(kind: ShapeKind, spec: &str) -> Result<(), Reply> {
    match name_of(spec).contains(':') {
        true => {
            Err(invalid(format!("{} {spec:.60}: give it without a camera (the request names the camera)", kind.flag())))
        }
        false => Ok(()),
    }
}

/// A list of shapes of one kind where every item naming `name` for every camera is split
/// into one per camera other than `camera`, and `camera`'s own one of that name left out:
/// what is left is every other camera's as before.
fn without<T: Clone>(
    items: &[T],
    names: &[String],
    camera: &str,
    name: &str,
    item_name: impl Fn(&T) -> &str,
    item_camera: impl Fn(&T) -> Option<&str>,
    for_camera: impl Fn(&T, &str) -> Result<T, Reply>,
) -> Result<(Vec<T>, bool), Reply> {
    let mut out = vec![];
    let mut had = false;
    for it in items {
        if item_name(it) != name {
            out.push(it.clone());
            continue;
        }
        match item_camera(it) {
            Some(c) if c == camera => had = true,
            Some(_) => out.push(it.clone()),
            None => {
                had = true;
                for n in names.iter().filter(|n| *n != camera) {
                    out.push(for_camera(it, n)?);
                }
            }
        }
    }
    Ok((out, had))
}

/// `--line` or `--loiter` text `text` given for camera `camera` only.
fn given_for<T>(flag: &str, text: &str, camera: &str, parse: fn(&str) -> anyhow::Result<T>) -> Result<Given<T>, Reply> {
    let bare = match text.split_once(':') {
        Some((c, rest)) if !c.contains('=') => rest,
        _ => text,
    };
    let t = format!("{camera}:{bare}");
    let spec = parse(&t).map_err(|e| invalid(format!("{flag}: {e:#}")))?;
    Ok(Given { text: t, spec })
}

fn set_shape(a: &mut RunArgs, names: &[String], camera: &str, kind: ShapeKind, spec: &str) -> Result<String, Reply> {
    no_camera(kind, spec)?;
    let name = name_of(spec).to_string();
    let had = remove_named(a, names, camera, kind, &name)?;
    match kind {
        ShapeKind::Zone => {
            let z = ZoneSpec::parse(&format!("{camera}:{spec}")).map_err(|e| invalid(format!("{e:#}")))?;
            a.track.zones.push(z);
        }
        ShapeKind::Line => a.track.scene.lines.push(given_for("--line", spec, camera, LineSpec::parse)?),
        ShapeKind::Loiter => a.track.scene.loiter.push(given_for("--loiter", spec, camera, LoiterSpec::parse)?),
    }
    let what = if had { "replaced" } else { "added" };
    Ok(format!("camera {camera}: {} {name} {what}", noun(kind)))
}

fn noun(kind: ShapeKind) -> &'static str {
    match kind {
        ShapeKind::Zone => "zone",
        ShapeKind::Line => "line",
        ShapeKind::Loiter => "loitering time of zone",
    }
}

/// Removes camera `camera`'s shape `name` of `kind` (for a zone, its loitering time too);
/// whether it had one.
fn remove_named(a: &mut RunArgs, names: &[String], camera: &str, kind: ShapeKind, name: &str) -> Result<bool, Reply> {
    let loiter = |a: &mut RunArgs| -> Result<bool, Reply> {
        let (v, had) = without(
            &a.track.scene.loiter,
            names,
            camera,
            name,
            |g| g.spec.zone.as_str(),
            |g| g.spec.camera.as_deref(),
            |g, n| given_for("--loiter", &g.text, n, LoiterSpec::parse),
        )?;
        a.track.scene.loiter = v;
        Ok(had)
    };
    match kind {
        ShapeKind::Zone => {
            let (v, had) = without(
                &a.track.zones,
                names,
                camera,
                name,
                |z| z.zone.name.as_str(),
                |z| z.camera.as_deref(),
                |z, n| Ok(ZoneSpec { camera: Some(n.to_string()), zone: z.zone.clone() }),
            )?;
            a.track.zones = v;
            loiter(a)?;
            Ok(had)
        }
        ShapeKind::Line => {
            let (v, had) = without(
                &a.track.scene.lines,
                names,
                camera,
                name,
                |g| g.spec.line.name.as_str(),
                |g| g.spec.camera.as_deref(),
                |g, n| given_for("--line", &g.text, n, LineSpec::parse),
            )?;
            a.track.scene.lines = v;
            Ok(had)
        }
        ShapeKind::Loiter => loiter(a),
    }
}

fn remove_shape(a: &mut RunArgs, names: &[String], camera: &str, kind: ShapeKind, name: &str) -> Result<String, Reply> {
    match remove_named(a, names, camera, kind, name)? {
        true => Ok(format!("camera {camera}: {} {name} removed", noun(kind))),
        false => Err(refused(
            Refusal::UnknownName,
            format!("camera {camera} has no {} {name}; `zcpipe ctl zones list {camera}` lists them", noun(kind)),
        )),
    }
}

/// The run's single camera as a named group of its own, so another can be added beside it.
fn as_groups(a: &mut RunArgs) {
    if a.pipeline.cameras.is_empty() {
        let source = a.pipeline.capture.source.clone();
        a.pipeline.cameras.push(CameraGroup { name: Some("cam0".into()), source, flags: vec![] });
    }
}

fn add_camera(
    a: &mut RunArgs,
    names: &[String],
    camera: &str,
    source: &str,
    options: &[String],
) -> Result<String, Reply> {
    zcpipe_core::config::check_camera_name(camera).map_err(|e| invalid(format!("{e:#}")))?;
    if names.iter().any(|n| n == camera) {
        return Err(refused(
            Refusal::Duplicate,
            format!("camera {camera} exists already; remove it first or pick another name"),
        ));
    }
    let cams = a.pipeline.cams().map_err(|e| invalid(format!("{e:#}")))?;
    // A device, file or stream feeds one camera; a test pattern may be drawn twice.
    if let Some((n, _)) = cams.iter().find(|(_, c)| c.source == source && !source.starts_with("testsrc")) {
        return Err(invalid(format!(
            "camera {camera}: its source is camera {n}'s already; one source feeds one camera"
        )));
    }
    let allowed: Vec<&str> = PER_CAMERA.iter().chain(&PER_CAMERA_SCHED).chain(&PER_CAMERA_RECORD).copied().collect();
    for o in options {
        let key = o.split_once('=').map_or(o.as_str(), |(k, _)| k);
        if !allowed.contains(&key) {
            return Err(invalid(format!(
                "camera {camera}: option {key:.40} is not a per-camera option (those are {})",
                allowed.join(", ")
            )));
        }
    }
    as_groups(a);
    a.pipeline.cameras.push(CameraGroup {
        name: Some(camera.to_string()),
        source: source.to_string(),
        flags: options.to_vec(),
    });
    Ok(format!("camera {camera} added"))
}

fn set(
    a: &mut RunArgs,
    names: &[String],
    camera: Option<&str>,
    setting: &Setting,
    mqtt_off: &Option<String>,
) -> Result<String, Reply> {
    let per_run = |flag: &str| match camera {
        Some(c) => Err(invalid(format!("{flag} is the run's, not camera {c}'s: leave the camera out"))),
        None => Ok(()),
    };
    let flag = setting.flag();
    // The value as `zcpipe run`'s own parser reads it: the same ranges, the same one line.
    let read = |value: String, extra: &[String]| -> Result<RunArgs, Reply> {
        let mut argv = vec!["zcpipe".to_string(), "run".to_string(), format!("{flag}={value}")];
        argv.extend(extra.iter().cloned());
        match super::Cli::try_parse_from(argv) {
            Ok(super::Cli { cmd: super::Command::Run(r), .. }) => Ok(*r),
            Ok(_) => Err(invalid(format!("{flag}: not a setting of zcpipe run"))),
            Err(e) => Err(invalid(super::config::clap_line(&e))),
        }
    };
    match *setting {
        Setting::ScoreThreshold(v) => {
            per_run(flag)?;
            a.pipeline.infer.score_threshold = read(v.to_string(), &[])?.pipeline.infer.score_threshold;
        }
        Setting::NmsIou(v) => {
            per_run(flag)?;
            a.pipeline.infer.nms_iou = read(v.to_string(), &[])?.pipeline.infer.nms_iou;
        }
        Setting::TrackHigh(v) => {
            per_run(flag)?;
            a.track.track_high = read(v.to_string(), &[])?.track.track_high;
        }
        Setting::TrackKeepalive(v) => {
            per_run(flag)?;
            a.track.track_keepalive = read(v.to_string(), &[])?.track.track_keepalive;
        }
        Setting::SnapshotEvery(v) => {
            per_run(flag)?;
            let Some(dir) = a.snapshot.snapshot_dir.clone() else {
                return Err(invalid("--snapshot-every needs --snapshot-dir, which this run was not started with"));
            };
            a.snapshot.snapshot_every = match v == 0.0 {
                true => None,
                false => read(v.to_string(), &[format!("--snapshot-dir={}", dir.display())])?.snapshot.snapshot_every,
            };
        }
        Setting::Mqtt(on) => {
            per_run(flag)?;
            match (on, a.mqtt.mqtt.is_some()) {
                (true, false) => {
                    a.mqtt.mqtt = Some(mqtt_off.clone().ok_or_else(|| {
                        invalid("this run has no MQTT broker to switch on: give --mqtt URL in the configuration file and reload")
                    })?)
                }
                (false, true) => a.mqtt.mqtt = None,
                _ => {}
            }
        }
        Setting::DetectFps(v) => match camera {
            None => a.pipeline.scale.detect_fps = vec![v],
            Some(c) => {
                as_groups(a);
                let i = names.iter().position(|n| n == c).unwrap_or(0);
                let g = &mut a.pipeline.cameras[i];
                g.flags.retain(|f| !f.starts_with("--detect-fps="));
                g.flags.push(format!("--detect-fps={v}"));
            }
        },
    }
    let on = match setting {
        Setting::Mqtt(on) => if *on { "on" } else { "off" }.to_string(),
        Setting::ScoreThreshold(v) | Setting::NmsIou(v) | Setting::TrackHigh(v) => v.to_string(),
        Setting::DetectFps(v) | Setting::TrackKeepalive(v) | Setting::SnapshotEvery(v) => v.to_string(),
    };
    Ok(match camera {
        Some(c) => format!("camera {c}: {flag} {on}"),
        None => format!("{flag} {on}"),
    })
}

/// A reload in words: `the configuration file read again`, then what it changed (cameras,
/// each camera's zones, lines and loitering times by name, the settings `zcpipe ctl set`
/// changes).
fn reloaded(old: &RunArgs, new: &RunArgs) -> String {
    let (was, now) = (camera_names(old), camera_names(new));
    let mut parts = vec![];
    let added: Vec<&String> = now.iter().filter(|n| !was.contains(n)).collect();
    let gone: Vec<&String> = was.iter().filter(|n| !now.contains(n)).collect();
    for (what, v) in [("added", added), ("removed", gone)] {
        if !v.is_empty() {
            parts.push(format!("cameras {} {what}", v.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")));
        }
    }
    for cam in now.iter().filter(|n| was.contains(n)) {
        let (a, b) = (scene_of(old, cam), scene_of(new, cam));
        let mut own = vec![];
        for (kind, x, y) in
            [("zone", &a.zones, &b.zones), ("line", &a.lines, &b.lines), ("loitering time", &a.loiter, &b.loiter)]
        {
            let by_name = |v: &Vec<String>| -> Vec<(String, String)> {
                v.iter().map(|t| (name_of(t).to_string(), t.clone())).collect()
            };
            let (x, y) = (by_name(x), by_name(y));
            for (n, t) in &y {
                match x.iter().find(|(m, _)| m == n) {
                    None => own.push(format!("{kind} {n} added")),
                    Some((_, u)) if u != t => own.push(format!("{kind} {n} replaced")),
                    Some(_) => {}
                }
            }
            own.extend(
                x.iter().filter(|(m, _)| !y.iter().any(|(n, _)| n == m)).map(|(m, _)| format!("{kind} {m} removed")),
            );
        }
        if !own.is_empty() {
            parts.push(format!("camera {cam}: {}", own.join(", ")));
        }
    }
    let settings = [
        (
            "--score-threshold",
            old.pipeline.infer.score_threshold.to_string(),
            new.pipeline.infer.score_threshold.to_string(),
        ),
        ("--nms-iou", old.pipeline.infer.nms_iou.to_string(), new.pipeline.infer.nms_iou.to_string()),
        ("--track-high", old.track.track_high.to_string(), new.track.track_high.to_string()),
        ("--track-keepalive", old.track.track_keepalive.to_string(), new.track.track_keepalive.to_string()),
        (
            "--detect-fps",
            format!("{:?}", old.pipeline.scale.detect_fps),
            format!("{:?}", new.pipeline.scale.detect_fps),
        ),
        ("--mqtt", on(old.mqtt.mqtt.is_some()), on(new.mqtt.mqtt.is_some())),
        (
            "--snapshot-every",
            format!("{:?}", old.snapshot.snapshot_every),
            format!("{:?}", new.snapshot.snapshot_every),
        ),
    ];
    parts.extend(settings.into_iter().filter(|(_, a, b)| a != b).map(|(f, a, b)| format!("{f} {a} -> {b}")));
    match parts.is_empty() {
        true => "the configuration file read again".to_string(),
        false => format!("the configuration file read again: {}", parts.join("; ")),
    }
}

fn on(b: bool) -> String {
    if b { "on" } else { "off" }.to_string()
}

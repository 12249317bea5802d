//! Changes to a running pipeline, applied by the supervisor between two turns of its loop:
//! the control socket's requests ([`super::super::control`]) and SIGHUP's reload.
//!
//! A change of options is checked whole by the command line's side first
//! ([`Reconfigure::change`]: a new [`RunConfig`]); then each stage process's options are
//! compared with its new ones. A stage whose options did not change is left alone; the
//! publish stage, when only its zones, lines and loitering times changed, takes them live
//! (its tracks go on); any other stage whose options changed is restarted alone with its
//! new ones, as after a crash (its neighbours wait and it re-joins); a camera new to the run
//! gets its capture stage started. A camera removed on request keeps its place in the run
//! (every other camera keeps its index), its capture stage stopped for good.

use std::collections::BTreeMap;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};

use zcpipe_core::control::{self, CameraRun, CameraState, Refusal, Reply, Request, StageRequest};
use zcpipe_core::frame::Stage;
use zcpipe_core::id::StageId;

use super::super::procs::{spawn, Proc, REPORT_FD};
use super::super::RunConfig;
use super::Supervisor;

/// How long the publish stage has to take a live change.
const STAGE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a publish stage restarted by a change lives on: its web view answers the
/// request (`POST /api/control`) that restarted it.
const ANSWER_GRACE: Duration = Duration::from_millis(500);

/// The flags the publish stage takes live.
const LIVE_FLAGS: [&str; 3] = ["--zone=", "--line=", "--loiter="];

fn refused(error: Refusal, message: impl Into<String>) -> Reply {
    Reply::Refused { error, message: message.into() }
}

/// The flags the scale, infer and publish stages take live with the cameras
/// ([`StageRequest::Cameras`]): the cameras' list, rates and weights (a camera added after
/// the others; the scale stage's pool keeps the size it was made with until it restarts).
const CAMERA_FLAGS: [&str; 4] = ["--cameras=", "--detect-fps=", "--weight=", "--scale-buffers="];

/// Whether `old` and `new` differ only in flags starting with one of `live`.
fn differ_only_in(old: &[String], new: &[String], live: &[&str]) -> bool {
    let rest = |v: &[String]| -> Vec<String> {
        v.iter().filter(|f| !live.iter().any(|l| f.starts_with(l))).cloned().collect()
    };
    rest(old) == rest(new)
}

/// A stage's options without the report fd the supervisor adds.
fn without_report_fd(args: &[String]) -> Vec<String> {
    args.iter().filter(|a| !a.starts_with("--report-fd=")).cloned().collect()
}

impl Supervisor {
    /// Answers the control requests waiting, one at a time in the order they came.
    pub(in crate::supervise::run) fn serve_control(&mut self) {
        let waiting: Vec<_> = match &self.control {
            Some(c) => std::iter::from_fn(|| c.next()).collect(),
            None => return,
        };
        for p in waiting {
            log::debug!("control: a request from pid {}", p.peer_pid);
            let reply = self.handle(p.request);
            let _ = p.answer.send(reply);
        }
    }

    /// The reload SIGHUP asked for.
    pub(in crate::supervise::run) fn reload_on_signal(&mut self) {
        match self.handle(Request::Reload) {
            Reply::Refused { message, .. } => log::error!("reload refused, the run goes on as it was: {message}"),
            Reply::Unchanged => log::info!("reload: the configuration file changes nothing"),
            _ => {}
        }
    }

    /// What `request` gives.
    fn handle(&mut self, request: Request) -> Reply {
        match request {
            Request::Cameras => return Reply::Cameras { cameras: self.camera_states() },
            Request::Scene { camera } => {
                return match self.live.as_ref().map(|l| l.scene(camera.as_deref())) {
                    Some(Ok(cameras)) => Reply::Scene { cameras },
                    Some(Err(r)) => r,
                    None => refused(Refusal::Busy, "this run takes no changes"),
                }
            }
            _ => {}
        }
        if self.stopping() {
            return refused(Refusal::Busy, "the run is stopping");
        }
        let reply = match request {
            Request::RestartCamera { camera } => self.restart_camera(&camera),
            Request::RemoveCamera { camera } => self.remove_camera(&camera),
            Request::AddCamera { camera, source, .. } if self.removed.contains(&camera) => {
                self.add_back(&camera, &source)
            }
            r => self.change(r),
        };
        if let Reply::Done { change, restarted, started, stopped } = &reply {
            let list = |what: &str, v: &[String]| {
                if v.is_empty() {
                    String::new()
                } else {
                    format!("; {what} {}", v.join(", "))
                }
            };
            log::info!(
                "changed: {change}{}{}{}",
                list("restarted", restarted),
                list("started", started),
                list("stopped", stopped)
            );
        }
        reply
    }

    /// A change of the run's options: checked, then applied ([`Supervisor::apply`]).
    fn change(&mut self, request: Request) -> Reply {
        let Some(live) = self.live.as_mut() else { return refused(Refusal::Busy, "this run takes no changes") };
        let (cfg, change) = match live.change(&request) {
            Ok(c) => c,
            Err(r) => return r,
        };
        let mut reply = self.apply(cfg, change.clone());
        if matches!(reply, Reply::Done { .. } | Reply::Unchanged) {
            if let Some(l) = self.live.as_mut() {
                l.commit();
            }
        }
        // A reload goes back to what the file says: a camera removed here that the file
        // has runs again.
        if request == Request::Reload {
            let back: Vec<String> =
                self.removed.iter().filter(|c| self.a.cameras.iter().any(|(n, _)| n == *c)).cloned().collect();
            for c in back {
                let Ok(id) = self.start_removed(&c) else { continue };
                if let Reply::Done { started, .. } = &mut reply {
                    started.push(id);
                } else {
                    reply =
                        Reply::Done { change: change.clone(), restarted: vec![], started: vec![id], stopped: vec![] };
                }
            }
        }
        reply
    }

    /// The capture stage process of camera `name`.
    fn capture_of(&self, name: &str) -> Option<usize> {
        let several = self.a.cameras.len() > 1;
        let id = StageId::capture(several.then_some(name));
        self.procs.iter().position(|p| p.id == id)
    }

    fn camera_states(&self) -> Vec<CameraState> {
        self.a
            .cameras
            .iter()
            .map(|(name, source)| {
                let p = self.capture_of(name).map(|i| &self.procs[i]);
                let state = match p {
                    _ if self.removed.contains(name) => CameraRun::Stopped,
                    Some(p) if p.status.is_none() && p.up_since.is_some() => CameraRun::Streaming,
                    Some(p) if p.status.is_none() => CameraRun::Starting,
                    Some(p) if p.restart_at.is_some() => CameraRun::Reconnecting,
                    _ => CameraRun::Stopped,
                };
                CameraState {
                    name: name.clone(),
                    source: source.clone(),
                    state,
                    pid: p.filter(|p| p.status.is_none()).map(|p| p.child.id() as i32),
                    restarts: p.map_or(0, |p| p.restarted),
                    frames: p.and_then(|p| self.latest.get(&p.id)).map_or(0, |r| r.frames_out),
                }
            })
            .collect()
    }

    fn was_removed(&self, camera: &str) -> Reply {
        let source = self.a.cameras.iter().find(|(n, _)| n == camera).map(|(_, s)| s.as_str()).unwrap_or("SOURCE");
        refused(
            Refusal::UnknownCamera,
            format!("camera {camera} was removed; add it back with `zcpipe ctl cameras add {camera}={source}`"),
        )
    }

    fn unknown_camera(&self, camera: &str) -> Reply {
        let names: Vec<&str> = self.a.cameras.iter().map(|(n, _)| n.as_str()).collect();
        refused(
            Refusal::UnknownCamera,
            format!("no camera {camera} in this run (it has {}); `zcpipe ctl cameras` lists them", names.join(", ")),
        )
    }

    fn restart_camera(&mut self, camera: &str) -> Reply {
        if self.removed.contains(camera) {
            return self.was_removed(camera);
        }
        let Some(i) = self.capture_of(camera) else { return self.unknown_camera(camera) };
        let p = &mut self.procs[i];
        p.restart_on_request();
        let id = p.id.to_string();
        self.announce(camera, &format!("camera {camera} restarted on request"));
        Reply::Done {
            change: format!("camera {camera} restarted"),
            restarted: vec![id],
            started: vec![],
            stopped: vec![],
        }
    }

    fn remove_camera(&mut self, camera: &str) -> Reply {
        if self.removed.contains(camera) {
            return self.was_removed(camera);
        }
        let Some(i) = self.capture_of(camera) else { return self.unknown_camera(camera) };
        if self.a.cameras.len() - self.removed.len() <= 1 {
            return refused(Refusal::Invalid, format!("camera {camera} is the run's last: stop the run instead"));
        }
        self.removed.insert(camera.to_string());
        let p = &mut self.procs[i];
        p.restart_at = None;
        p.retired = true;
        if p.status.is_none() {
            // Killed, not stopped: the scale stage keeps the camera's place (a stream that
            // ended would be over for good there), so it can be added back.
            let _ = p.child.kill();
        }
        let id = p.id.to_string();
        if let Err(e) = self.tell("publish", StageRequest::CameraRemoved { camera: camera.to_string() }) {
            log::warn!(
                "the publish stage was not told that camera {camera} is gone ({e}); its tracks end on their own"
            );
        }
        self.announce(camera, &format!("camera {camera} removed"));
        Reply::Done {
            change: format!("camera {camera} removed"),
            restarted: vec![],
            started: vec![],
            stopped: vec![id],
        }
    }

    /// A camera removed earlier, added back with the source it had.
    fn add_back(&mut self, camera: &str, source: &str) -> Reply {
        let had = self.a.cameras.iter().find(|(n, _)| n == camera).map(|(_, s)| s.clone()).unwrap_or_default();
        let given = zcpipe_capture::spec::redact_url(source);
        if given != had {
            return refused(
                Refusal::Duplicate,
                format!("camera {camera} was removed from this run with source {had}: add it back with that source, or under another name"),
            );
        }
        match self.start_removed(camera) {
            Ok(id) => {
                self.announce(camera, &format!("camera {camera} added back"));
                let change = format!("camera {camera} added back");
                Reply::Done { change, restarted: vec![], started: vec![id], stopped: vec![] }
            }
            Err(r) => r,
        }
    }

    /// Starts removed camera `camera`'s capture stage again; its id.
    fn start_removed(&mut self, camera: &str) -> Result<String, Reply> {
        let Some(i) = self.capture_of(camera) else { return Err(self.unknown_camera(camera)) };
        if self.procs[i].status.is_none() {
            return Err(refused(Refusal::Busy, format!("camera {camera} is still stopping; try again in a moment")));
        }
        self.removed.remove(camera);
        let p = &mut self.procs[i];
        p.retired = false;
        p.restart_on_request();
        Ok(p.id.to_string())
    }

    /// Applies run `new` (checked): see the module's documentation.
    fn apply(&mut self, new: RunConfig, change: String) -> Reply {
        let old: BTreeMap<StageId, Vec<String>> = self.a.stage_flags.iter().cloned().collect();
        if old == new.stage_flags.iter().cloned().collect() {
            return Reply::Unchanged;
        }
        let (live, told) = match self.take_live(&old, &new, &change) {
            Ok(l) => l,
            Err(r) => return r,
        };
        let publish: StageId = Stage::Publish.into();
        let (mut restarted, mut started, mut stopped) = (vec![], vec![], vec![]);
        let several = new.cameras.len() > 1;
        for (id, flags) in &new.stage_flags {
            let mut args = flags.clone();
            args.push(format!("--report-fd={REPORT_FD}"));
            match self.procs.iter().position(|p| p.id == *id) {
                None => match self.report_w.as_ref().map(|w| spawn(&self.exe, id, args.clone(), &self.a.secret_env, w))
                {
                    Some(Ok(child)) => {
                        let forever = several && id.is(Stage::Capture);
                        let mut p = Proc::new(id.clone(), child, args, forever);
                        p.added = true;
                        self.procs.push(p);
                        started.push(id.to_string());
                    }
                    Some(Err(e)) => log::error!("could not start the {id} stage: {e:#}"),
                    None => {}
                },
                Some(i) => {
                    let camera = id.camera.clone().unwrap_or_default();
                    let p = &mut self.procs[i];
                    p.forever = several && id.is(Stage::Capture);
                    // A stage stopped by an earlier change (a camera a reload dropped) that
                    // is back in the run: started again.
                    if p.retired && !self.removed.contains(&camera) {
                        p.retired = false;
                        p.args = args;
                        p.restart_on_request();
                        started.push(id.to_string());
                        continue;
                    }
                    if without_report_fd(&p.args) == *flags {
                        continue;
                    }
                    // Restarted later (a crash), it starts with the new options.
                    p.args = args;
                    if live.contains(id) || self.removed.contains(&camera) {
                        continue;
                    }
                    match *id == publish {
                        // Its web view may be serving this very request: the answer goes first.
                        true => p.restart_on_request_in(ANSWER_GRACE),
                        false => p.restart_on_request(),
                    }
                    restarted.push(id.to_string());
                }
            }
        }
        for p in self.procs.iter_mut().filter(|p| !new.stage_flags.iter().any(|(id, _)| *id == p.id)) {
            if p.retired {
                continue;
            }
            p.retired = true;
            p.restart_at = None;
            if p.status.is_none() {
                let _ = kill(p.pid(), Signal::SIGTERM);
                let _ = kill(p.pid(), Signal::SIGCONT);
            }
            stopped.push(p.id.to_string());
        }
        self.a = new;
        // A camera removed with zcpipe ctl that the run no longer has (a reload dropped it)
        // is not the run's any more: its name is free.
        let names: Vec<String> = self.a.cameras.iter().map(|(n, _)| n.clone()).collect();
        self.removed.retain(|c| names.contains(c));
        match restarted.iter().any(|r| *r == publish.to_string()) {
            // The publish stage that would say it is being replaced: its successor will.
            true => self.untold.push(change.clone()),
            false if !told => self.announce("", &change),
            false => {}
        }
        Reply::Done { change, restarted, started, stopped }
    }

    /// Hands the stages after capture what they take live from run `new`: the publish
    /// stage its zones, lines and loitering times, and the scale, infer and publish stages
    /// the cameras (a camera added, a camera's rate or weight) when nothing else of theirs
    /// changed. The stages that took it all (none of them is restarted), and whether the
    /// publish stage was handed the change in words (it tells the clients). A scene the
    /// publish stage refuses refuses the whole change (nothing is changed); a stage that
    /// cannot take the cameras is restarted with them instead.
    fn take_live(
        &self,
        old: &BTreeMap<StageId, Vec<String>>,
        new: &RunConfig,
        change: &str,
    ) -> Result<(Vec<StageId>, bool), Reply> {
        let publish: StageId = Stage::Publish.into();
        let flags_of = |id: &StageId| new.stage_flags.iter().find(|(i, _)| i == id).map(|(_, f)| f);
        let had: Vec<&str> = self.a.live_cameras.iter().map(|c| c.name.as_str()).collect();
        // What the publish stage takes live: its scene and the cameras.
        let publish_takes: Vec<&str> = LIVE_FLAGS.iter().chain(&CAMERA_FLAGS).copied().collect();
        // The scene of the cameras the publish stage has, first: refused, nothing changed.
        let (mut scene_new, mut scene_changed) = (vec![], false);
        if let (Some(o), Some(n)) = (old.get(&publish), flags_of(&publish)) {
            scene_changed = differ_only_in(o, n, &publish_takes) && !differ_only_in(o, n, &CAMERA_FLAGS);
            if scene_changed {
                let all = self.live.as_ref().map(|l| l.next_scene()).unwrap_or_default();
                let (known, added): (Vec<_>, Vec<_>) = all.into_iter().partition(|s| had.contains(&s.camera.as_str()));
                scene_new = added;
                let r = StageRequest::Scene { cameras: known, change: change.to_string() };
                if let Err(e) = self.tell("publish", r) {
                    let e = format!("the publish stage did not take the change ({e}); nothing was changed");
                    return Err(refused(Refusal::Failed, e));
                }
            }
        }
        let cameras_changed = self.a.live_cameras != new.live_cameras;
        let mut live = vec![];
        // Downstream first: a camera's first frame finds its name there.
        for stage in [Stage::Publish, Stage::Infer, Stage::Scale] {
            let id: StageId = stage.into();
            let (Some(o), Some(n)) = (old.get(&id), flags_of(&id)) else { continue };
            let takes: &[&str] = if stage == Stage::Publish { &publish_takes } else { &CAMERA_FLAGS };
            if o == n || !differ_only_in(o, n, takes) {
                continue;
            }
            if cameras_changed && !differ_only_in(o, n, &LIVE_FLAGS) {
                let r = StageRequest::Cameras { cameras: new.live_cameras.clone() };
                if let Err(e) = self.tell(stage.name(), r) {
                    log::warn!(
                        "the {} stage did not take the cameras live ({e}); it is restarted with them",
                        stage.name()
                    );
                    continue;
                }
            }
            live.push(id);
        }
        // The scene of the cameras new to the publish stage (their pictures' size is not
        // known yet: nothing to refuse).
        if live.contains(&publish) && scene_changed && !scene_new.is_empty() {
            let r = StageRequest::Scene { cameras: scene_new, change: change.to_string() };
            if let Err(e) = self.tell("publish", r) {
                log::warn!("the publish stage did not take the new cameras' zones and lines ({e})");
            }
        }
        Ok((live, scene_changed))
    }

    /// Tells the clients the changes that restarted the publish stage, once its successor is
    /// set up (its first report).
    pub(in crate::supervise::run) fn tell_untold(&mut self) {
        if self.untold.is_empty() {
            return;
        }
        let publish: StageId = Stage::Publish.into();
        // Its successor: the one to be killed for the change is not.
        let up = |p: &Proc| p.status.is_none() && p.up_since.is_some() && !p.planned;
        if !self.procs.iter().any(|p| p.id == publish && up(p)) {
            return;
        }
        for change in std::mem::take(&mut self.untold) {
            self.announce("", &change);
        }
    }

    /// Tells the clients of the detections socket about `change` (through the publish stage).
    fn announce(&self, camera: &str, change: &str) {
        let r = StageRequest::Announce { camera: camera.to_string(), change: change.to_string() };
        if let Err(e) = self.tell("publish", r) {
            log::info!("the detections socket's clients were not told ({e})");
        }
    }

    /// Sends `request` to stage `stage` and waits for its answer.
    fn tell(&self, stage: &str, request: StageRequest) -> Result<(), String> {
        control::tell_stage(&self.a.data.run_dir, stage, request, STAGE_TIMEOUT)
    }
}

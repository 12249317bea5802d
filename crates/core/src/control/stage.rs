//! What `zcpipe run` tells a running stage of a change it takes without a restart: the
//! scale, infer and publish stages each listen on [`stage_socket`] in the run directory
//! (mode 0600 in the 0700 run directory; a peer of another uid, root aside, is refused),
//! looked at once per turn of their frame loop without blocking. One [`StageAsk`] in, one
//! [`StageAnswer`] out, then the connection closes.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Result;
use nix::poll::PollTimeout;
use serde::{Deserialize, Serialize};

use super::{accept_channel, CameraScene, Channel, VERSION};

/// What `zcpipe run` tells a stage, with [`VERSION`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageAsk {
    /// [`VERSION`].
    pub version: u32,
    /// What to do.
    pub request: StageRequest,
}

/// A change a stage applies live.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum StageRequest {
    /// The publish stage: these cameras' zones, lines and loitering times from now on (the
    /// others' stay); the tracks go on, each keeping what it had in a zone or line of the
    /// same name.
    Scene {
        /// Each camera's whole scene.
        cameras: Vec<CameraScene>,
        /// The change in words, for the notice.
        change: String,
    },
    /// The publish stage: announce a change applied elsewhere (a camera added, a stage
    /// restarted for a new setting) to the clients, and count it.
    Announce {
        /// The camera it is about (empty: the run).
        camera: String,
        /// The change in words.
        change: String,
    },
    /// The publish stage: the camera was removed; its tracks end now and its outputs say
    /// it is gone.
    CameraRemoved {
        /// The camera.
        camera: String,
    },
    /// The scale, infer and publish stages: the run's cameras from now on, by camera index.
    /// The cameras a stage has keep their places (a removed camera keeps its place too);
    /// the ones past them are new, joined when their capture stage is up. Each camera's
    /// rate and weight apply from the next frame.
    Cameras {
        /// Every camera, in the run's order.
        cameras: Vec<LiveCamera>,
    },
}

/// A camera of a running pipeline, as the stages after capture take it live.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LiveCamera {
    /// Its name.
    pub name: String,
    /// Frames a second the scale stage passes on (`--detect-fps`; 0: every frame).
    pub detect_fps: f64,
    /// Its share of the NPU (`--weight`).
    pub weight: f64,
}

impl LiveCamera {
    /// Checks `new` against the cameras a stage has (`have`, by index): each keeps its
    /// place, at most [`crate::frame::MAX_CAMERAS`] in all, no name twice. `Ok`: the
    /// indexes of the cameras new to the stage.
    pub fn added(have: &[String], new: &[LiveCamera]) -> std::result::Result<std::ops::Range<usize>, String> {
        if new.len() > crate::frame::MAX_CAMERAS {
            return Err(format!("{} cameras: a run has at most {}", new.len(), crate::frame::MAX_CAMERAS));
        }
        if let Some((i, (h, n))) = have.iter().zip(new).enumerate().find(|(_, (h, n))| **h != n.name) {
            return Err(format!("camera {i} is {h} here, not {}: the cameras must keep their places", n.name));
        }
        if new.len() < have.len() {
            return Err(format!(
                "{} cameras here, {} asked: a camera keeps its place when removed",
                have.len(),
                new.len()
            ));
        }
        for (i, c) in new.iter().enumerate() {
            if new[..i].iter().any(|o| o.name == c.name) {
                return Err(format!("camera {} twice", c.name));
            }
        }
        Ok(have.len()..new.len())
    }
}

/// A stage's answer: `Ok(())` applied, `Err(message)` refused (nothing applied).
pub type StageAnswer = std::result::Result<(), String>;

/// The control socket of stage `stage` (`scale`, `infer`, `publish`) in the run directory.
pub fn stage_socket(stage: &str) -> String {
    format!("{stage}-control.sock")
}

/// How long the supervisor has to send its request once connected.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);
/// Requests taken per turn at most (a flood costs a bounded amount).
const PER_TURN: usize = 4;

/// A stage's listening control socket; its file goes when this is dropped.
pub struct StageControl {
    fd: OwnedFd,
    path: PathBuf,
    stage: &'static str,
    /// Looked at no more often than this ([`StageControl::at_most_every`]), last then.
    every: Duration,
    looked: Instant,
}

impl StageControl {
    /// Binds stage `stage`'s socket in `run_dir` (mode 0600; a file left there by a killed
    /// stage is replaced).
    pub fn bind(run_dir: &Path, stage: &'static str) -> Result<StageControl> {
        let path = run_dir.join(stage_socket(stage));
        let fd = super::listen_at(&path, true, 4)?;
        Ok(StageControl { fd, path, stage, every: Duration::ZERO, looked: Instant::now() })
    }

    /// [`StageControl::poll`] looks at the socket (a poll(2)) at most every `every`, for a
    /// stage that turns once per frame and has no need of a change sooner.
    pub fn at_most_every(mut self, every: Duration) -> StageControl {
        self.every = every;
        self
    }

    /// The requests waiting now (at most [`PER_TURN`]; none when the last look was under
    /// [`StageControl::at_most_every`] ago), each with the channel its answer goes on
    /// ([`reply`]). A request that cannot be read is answered here.
    pub fn poll(&mut self) -> Vec<(Channel, StageRequest)> {
        let mut out = vec![];
        if self.looked.elapsed() < self.every {
            return out;
        }
        self.looked = Instant::now();
        for _ in 0..PER_TURN {
            let Some(ch) = accept_channel(&self.fd, PollTimeout::ZERO, REQUEST_TIMEOUT) else { break };
            if !ch.peer_allowed() {
                log::warn!(
                    "refused a control connection on {} from pid {} of uid {}: not this run's user",
                    self.path.display(),
                    ch.peer_pid,
                    ch.peer_uid
                );
                continue;
            }
            let Ok(Some(bytes)) = ch.recv_bytes() else { continue };
            match serde_json::from_slice::<StageAsk>(&bytes) {
                Ok(a) if a.version == VERSION => out.push((ch, a.request)),
                Ok(a) => reply(
                    &ch,
                    Err(format!(
                        "a change of version {}; this {} stage reads {VERSION} (a different build)",
                        a.version, self.stage
                    )),
                ),
                Err(e) => reply(&ch, Err(format!("not a change: {e}"))),
            }
        }
        out
    }
}

impl Drop for StageControl {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Answers the supervisor on `ch`.
pub fn reply(ch: &Channel, a: StageAnswer) {
    if let Err(e) = ch.send(&a) {
        log::info!("could not answer the supervisor's change: {e:#}");
    }
}

/// Sends `request` to stage `stage` of the run in `run_dir` and waits up to `timeout` for
/// its answer. `Err`: one line, the stage's refusal or why it could not be asked.
pub fn tell_stage(run_dir: &Path, stage: &str, request: StageRequest, timeout: Duration) -> StageAnswer {
    let path = run_dir.join(stage_socket(stage));
    let ch = Channel::connect(&path, timeout).map_err(|e| format!("{e:#}"))?;
    ch.send(&StageAsk { version: VERSION, request }).map_err(|e| format!("{e:#}"))?;
    let bytes = ch
        .recv_bytes()
        .map_err(|e| format!("{e:#}"))?
        .ok_or_else(|| format!("the {stage} stage hung up without an answer"))?;
    serde_json::from_slice::<StageAnswer>(&bytes).map_err(|e| format!("its answer: {e}"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cams(names: &[&str]) -> Vec<LiveCamera> {
        names.iter().map(|n| LiveCamera { name: n.to_string(), detect_fps: 0.0, weight: 1.0 }).collect()
    }

    #[test]
    fn cameras_keep_their_places_and_the_new_ones_follow() {
        let have = ["door".to_string(), "yard".to_string()];
        assert_eq!(LiveCamera::added(&have, &cams(&["door", "yard", "gate"])), Ok(2..3));
        assert_eq!(LiveCamera::added(&have, &cams(&["door", "yard"])), Ok(2..2));
        assert_eq!(
            LiveCamera::added(&have, &cams(&["yard", "door", "gate"])),
            Err("camera 0 is door here, not yard: the cameras must keep their places".into())
        );
        assert_eq!(
            LiveCamera::added(&have, &cams(&["door"])),
            Err("2 cameras here, 1 asked: a camera keeps its place when removed".into())
        );
        assert_eq!(LiveCamera::added(&have, &cams(&["door", "yard", "door"])), Err("camera door twice".into()));
        let many: Vec<String> = (0..17).map(|i| format!("c{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(LiveCamera::added(&[], &cams(&many)), Err("17 cameras: a run has at most 16".into()));
    }

    #[test]
    fn a_stage_answers_its_supervisor_and_refuses_another_version() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = StageControl::bind(dir.path(), "scale").unwrap();
        assert!(dir.path().join("scale-control.sock").exists());
        let d = dir.path().to_path_buf();
        let asker = std::thread::spawn(move || {
            tell_stage(&d, "scale", StageRequest::Cameras { cameras: cams(&["a", "b"]) }, Duration::from_secs(5))
        });
        let got = loop {
            if let Some(r) = c.poll().pop() {
                break r;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(got.1, StageRequest::Cameras { cameras: cams(&["a", "b"]) });
        reply(&got.0, Err("no".into()));
        assert_eq!(asker.join().unwrap(), Err("no".into()));
        let ch = Channel::connect(&dir.path().join("scale-control.sock"), Duration::from_secs(5)).unwrap();
        ch.send(&serde_json::json!({"version": 9, "request": {"op": "cameras", "cameras": []}})).unwrap();
        assert!(c.poll().is_empty());
        let a: StageAnswer = serde_json::from_slice(&ch.recv_bytes().unwrap().unwrap()).unwrap();
        assert_eq!(a, Err("a change of version 9; this scale stage reads 1 (a different build)".into()));
        drop(c);
        assert!(!dir.path().join("scale-control.sock").exists(), "the socket goes with the stage");
    }
}

//! The changes the scale stage takes while it runs ([`StageRequest::Cameras`] from its
//! supervisor): a camera added to the run is joined when its capture stage is up, as a
//! camera slow to open is at set-up, with a scaler of its own bound to the output pool
//! through the pool's second handles; a camera's detection rate changes from its next
//! frame. The other cameras' frames go on meanwhile.

use std::time::Duration;

use zcpipe_core::control::{reply, LiveCamera, StageRequest};
use zcpipe_core::frame::Stage;
use zcpipe_core::id::StageId;
use zcpipe_core::pool::Upstream;
use zcpipe_core::rate::RateGate;

use super::{capture_hello, open_scaler, Camera, ScaleStage};

/// How often the control socket is looked at (a poll(2) each time).
pub(super) const CONTROL_EVERY: Duration = Duration::from_millis(100);

impl ScaleStage<'_> {
    /// Takes the supervisor's changes waiting (the socket is looked at every
    /// [`CONTROL_EVERY`]).
    pub(super) fn serve_control(&mut self) {
        let Some(c) = self.control.as_mut() else { return };
        for (ch, request) in c.poll() {
            let answer = match request {
                StageRequest::Cameras { cameras } => self.take_cameras(&cameras),
                other => Err(format!("the scale stage takes only the cameras live, not {other:?}")),
            };
            reply(&ch, answer);
        }
    }

    /// The run's cameras from now on: the ones past the stage's own are joined when their
    /// capture stage is up; each camera's detection rate is its new one. Nothing changes on
    /// error (one line why).
    fn take_cameras(&mut self, new: &[LiveCamera]) -> Result<(), String> {
        if self.cfg.cameras.is_empty() {
            return Err("this scale stage serves one unnamed camera; it is restarted for more".into());
        }
        let have: Vec<String> = self.cams.iter().map(|c| c.name.clone()).collect();
        let added = LiveCamera::added(&have, new)?;
        if !added.is_empty() && self.pool.dst_handles.is_empty() {
            return Err("this scale stage's output pool has no second handles to bind a new camera's scaler".into());
        }
        // Every scaler opened first: a device that cannot be opened changes nothing.
        let copy_mode = self.ctx.data.copy_mode;
        let scalers = added
            .clone()
            .map(|_| open_scaler(self.cfg, copy_mode).map_err(|e| format!("{e:#}")))
            .collect::<Result<Vec<_>, String>>()?;
        let n = new.len();
        for (i, (cam, c)) in self.cams.iter_mut().zip(new).enumerate() {
            if cam.detect_fps != c.detect_fps {
                log::info!(
                    "camera {}: detection rate {} -> {}",
                    cam.name,
                    fps_words(cam.detect_fps),
                    fps_words(c.detect_fps)
                );
                cam.detect_fps = c.detect_fps;
                cam.gate = RateGate::with_phase(c.detect_fps, i as f64 / n as f64);
            }
        }
        let data = &self.ctx.data;
        for (i, scaler) in added.zip(scalers) {
            let c = &new[i];
            let path = data.socket(&StageId::camera(&c.name));
            let input =
                Upstream::pending(path, Stage::Capture, capture_hello(self.ctx), data.wait, data.spin, copy_mode);
            let mut cam = Camera::new(c.name.clone(), input, self.cfg, c.detect_fps, (i, n));
            cam.scaler = Some(scaler);
            log::info!("camera {} added: joined when its capture stage is up", c.name);
            self.cams.push(cam);
        }
        Ok(())
    }
}

/// A detection rate in words.
fn fps_words(fps: f64) -> String {
    if fps > 0.0 {
        format!("{fps} fps")
    } else {
        "every frame".into()
    }
}

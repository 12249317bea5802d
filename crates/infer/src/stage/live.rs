//! The changes the infer stage takes while it runs ([`StageRequest::Cameras`] from its
//! supervisor): the scheduler learns a camera added to the run (its name and its weight,
//! from its first frame) and the cameras' new weights. The frames waiting stay.

use std::cell::RefCell;
use std::path::Path;
use std::time::Duration;

use zcpipe_core::control::{reply, Channel, LiveCamera, StageControl, StageRequest};

use super::Work;
use crate::sched::Scheduler;

/// How often the control socket is looked at (a poll(2) each time).
const CONTROL_EVERY: Duration = Duration::from_millis(100);

/// The infer stage's control socket, looked at from its frame loop.
pub(super) struct Control(RefCell<Option<StageControl>>);

impl Control {
    /// Binds the socket in `run_dir`; without it (logged) the stage runs without live changes.
    pub(super) fn bind(run_dir: &Path) -> Control {
        let socket = StageControl::bind(run_dir, "infer")
            .map(|c| c.at_most_every(CONTROL_EVERY))
            .map_err(|e| log::warn!("no live changes for this infer stage: {e:#}"))
            .ok();
        Control(RefCell::new(socket))
    }

    /// The requests waiting, when the socket is due a look ([`CONTROL_EVERY`]) and any came.
    pub(super) fn due(&self) -> Option<Vec<(Channel, StageRequest)>> {
        let asked = self.0.borrow_mut().as_mut()?.poll();
        (!asked.is_empty()).then_some(asked)
    }

    /// Applies `asked` to the scheduler and answers each.
    pub(super) fn answer(&self, asked: Vec<(Channel, StageRequest)>, sched: &mut Scheduler<Work>) {
        for (ch, request) in asked {
            let answer = match request {
                StageRequest::Cameras { cameras } => take_cameras(sched, &cameras),
                other => Err(format!("the infer stage takes only the cameras live, not {other:?}")),
            };
            reply(&ch, answer);
        }
    }

    /// [`Control::due`] then [`Control::answer`].
    pub(super) fn serve(&self, sched: &mut Scheduler<Work>) {
        if let Some(asked) = self.due() {
            self.answer(asked, sched);
        }
    }
}

/// The run's cameras from now on, for the scheduler (nothing changes on error).
fn take_cameras(sched: &mut Scheduler<Work>, cameras: &[LiveCamera]) -> Result<(), String> {
    if sched.cameras().is_empty() {
        return Err("this infer stage serves one unnamed camera; it is restarted for more".into());
    }
    for i in LiveCamera::added(sched.cameras(), cameras)? {
        log::info!("camera {} added (weight {})", cameras[i].name, cameras[i].weight);
    }
    sched.set_cameras(cameras.iter().map(|c| c.name.clone()).collect(), cameras.iter().map(|c| c.weight).collect());
    Ok(())
}

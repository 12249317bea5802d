//! Each camera's zones, lines and loitering times changed while the stage runs (the
//! supervisor's [`zcpipe_core::control::StageRequest::Scene`]): read with the flags' own
//! readers, checked against the camera's picture, applied all together or not at all; the
//! tracks go on ([`crate::track::Tracker::set_scene`]).

use zcpipe_core::control::CameraScene;

use super::super::track::line::{self, LineSpec};
use super::super::track::zone::{self, LoiterSpec, ZoneSpec};
use super::super::track::{Line, Scene, Zone};
use super::Tracking;

/// One camera's new scene, read and checked.
struct NewScene {
    cam: usize,
    zones: Vec<Zone>,
    loiter_ns: Vec<Option<u64>>,
    lines: Vec<Line>,
}

/// Each of `texts` read by `parse`; the first error as one line.
fn read<T>(texts: &[String], parse: fn(&str) -> anyhow::Result<T>) -> Result<Vec<T>, String> {
    texts.iter().map(|t| parse(t).map_err(|e| format!("{e:#}"))).collect()
}

impl Tracking {
    /// The tracking configuration now (with the changes made while the stage runs).
    pub(crate) fn config(&self) -> &super::super::TrackConfig {
        &self.cfg
    }

    /// Gives the cameras of `scenes` their new zones, lines and loitering times (the others
    /// keep theirs); the cameras whose scene changed. Error (nothing changed): one line
    /// naming the camera and what is wrong with it.
    pub(crate) fn set_scenes(&mut self, scenes: &[CameraScene]) -> Result<Vec<String>, String> {
        let mut new = vec![];
        for s in scenes {
            let cam = self
                .cameras
                .iter()
                .position(|c| *c == s.camera)
                .ok_or_else(|| format!("no camera {} in the publish stage", s.camera))?;
            let one = [s.camera.clone()];
            let err = |e: anyhow::Error| format!("{e:#}");
            let zones = zone::per_camera(&read(&s.zones, ZoneSpec::parse)?, &one).map_err(err)?.remove(0);
            let loiter: Vec<LoiterSpec> = read(&s.loiter, LoiterSpec::parse)?;
            let loiter_ns =
                zone::loiter_per_camera(&loiter, &one, std::slice::from_ref(&zones)).map_err(err)?.remove(0);
            let lines = line::per_camera(&read(&s.lines, LineSpec::parse)?, &one).map_err(err)?.remove(0);
            if let Some((w, h)) = self.sizes.get(cam).copied().flatten() {
                for z in &zones {
                    z.check_inside(&s.camera, w, h).map_err(err)?;
                }
                for l in &lines {
                    l.check_inside(&s.camera, w, h).map_err(err)?;
                }
            }
            let same = self.cfg.zones.get(cam) == Some(&zones)
                && self.cfg.lines.get(cam) == Some(&lines)
                && self.cfg.loiter_ns.get(cam).is_some_and(|l| {
                    l.iter().copied().chain(std::iter::repeat(None)).take(zones.len()).eq(loiter_ns.iter().copied())
                });
            if !same {
                new.push(NewScene { cam, zones, loiter_ns, lines });
            }
        }
        let n = self.cameras.len();
        self.cfg.zones.resize(n, vec![]);
        self.cfg.loiter_ns.resize(n, vec![]);
        self.cfg.lines.resize(n, vec![]);
        let mut changed = vec![];
        for s in new {
            self.cfg.zones[s.cam] = s.zones.clone();
            self.cfg.loiter_ns[s.cam] = s.loiter_ns.clone();
            self.cfg.lines[s.cam] = s.lines.clone();
            if let Some(t) = self.trackers[s.cam].as_mut() {
                t.set_scene(Scene { zones: s.zones, loiter_ns: s.loiter_ns, lines: s.lines, calibration: None });
            }
            changed.push(self.cameras[s.cam].clone());
        }
        Ok(changed)
    }

    /// Camera `name` joins the run, after the cameras there: tracked from its first frame,
    /// with no zones or lines until a scene gives it some.
    pub(crate) fn add_camera(&mut self, name: &str) {
        self.cameras.push(name.to_string());
        self.trackers.push(None);
        self.arrived.push(None);
        self.slow_said.push(false);
        self.after_gap.push(false);
        self.gates.push(None);
        self.sizes.push(None);
    }

    /// Camera `camera` was removed from the run: its tracks end now (their `end` events).
    pub(crate) fn end_camera(
        &mut self,
        camera: &str,
        now_ns: u64,
        labels: &[String],
    ) -> Vec<zcpipe_core::schema::EventJson> {
        let Some(cam) = self.cameras.iter().position(|c| c == camera) else { return vec![] };
        let Some(t) = self.trackers[cam].as_mut() else { return vec![] };
        let mut events = vec![];
        t.finish(now_ns, &mut events);
        self.lines(cam, events, labels, None)
    }
}

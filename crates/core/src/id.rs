//! Which process of a run is speaking: [`Role`] (a pipeline [`Stage`], the display sink or
//! the recorder) and [`StageId`] (the role, and the camera for one capture stage of several).
//!
//! A stage process is named by its [`StageId`] in its reports, its socket's file name, its
//! log lines and the run summary. On the wire and in JSON the id is the text users see
//! (`capture`, `capture@front`, `display`), so the report schema and `--summary-json` keep
//! their strings; in the code it is a type, matched by variant.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::frame::Stage;

/// What a process of a run is: one of the four pipeline stages, or a sink, a pure consumer
/// whose failure never stops the run: the display (`zcpipe stage display`) or the recorder
/// (`zcpipe stage record`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// A pipeline stage.
    Stage(Stage),
    /// The display sink.
    Display,
    /// The recorder (event clips).
    Record,
}

impl Role {
    /// Every role, in start order.
    pub const ALL: [Role; 6] = [
        Role::Stage(Stage::Capture),
        Role::Stage(Stage::Scale),
        Role::Stage(Stage::Infer),
        Role::Stage(Stage::Publish),
        Role::Display,
        Role::Record,
    ];

    /// The word after `zcpipe stage`: `capture`, `scale`, `infer`, `publish`, `display`,
    /// `record`.
    pub fn name(self) -> &'static str {
        match self {
            Role::Stage(s) => s.name(),
            Role::Display => "display",
            Role::Record => "record",
        }
    }

    /// Whether it is a sink (the display, the recorder): its death never stops the run.
    pub fn is_sink(self) -> bool {
        matches!(self, Role::Display | Role::Record)
    }

    /// The role named `name` (as [`Role::name`] spells it).
    pub fn from_name(name: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.name() == name)
    }
}

impl From<Stage> for Role {
    fn from(s: Stage) -> Role {
        Role::Stage(s)
    }
}

/// One stage process of a run: its role and, for the capture stage of one camera of
/// several, the camera's name. Shown (and serialized) as `capture`, `capture@front`,
/// `scale`, ..., `display`; ordered as that text is, so maps keyed by it list stages as
/// they always did.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct StageId {
    /// What the process does.
    pub role: Role,
    /// The camera of a capture stage of several (`None`: a single camera, or another role).
    pub camera: Option<String>,
}

impl StageId {
    /// The process of `role` (one camera, or not a capture stage).
    pub const fn of(role: Role) -> StageId {
        StageId { role, camera: None }
    }

    /// The capture stage of camera `name`, one of several (`capture@name`).
    pub fn camera(name: &str) -> StageId {
        StageId { role: Role::Stage(Stage::Capture), camera: Some(name.to_string()) }
    }

    /// The capture stage of `camera` when it is one of several, else the single camera's
    /// (`capture`).
    pub fn capture(camera: Option<&str>) -> StageId {
        camera.map_or(StageId::of(Role::Stage(Stage::Capture)), StageId::camera)
    }

    /// The capture stages of a run with `cameras`, in their order: `capture` for one camera,
    /// `capture@NAME` for each of several.
    pub fn captures(cameras: &[String]) -> Vec<StageId> {
        let several = cameras.len() > 1;
        cameras.iter().map(|c| StageId::capture(several.then_some(c.as_str()))).collect()
    }

    /// Whether this is `stage` (any camera's, for capture).
    pub fn is(&self, stage: Stage) -> bool {
        self.role == Role::Stage(stage)
    }
}

impl From<Stage> for StageId {
    fn from(s: Stage) -> StageId {
        StageId::of(Role::Stage(s))
    }
}

impl From<Role> for StageId {
    fn from(r: Role) -> StageId {
        StageId::of(r)
    }
}

impl Default for StageId {
    /// The capture stage: what a report that names no stage was (a default for tests and
    /// for [`crate::metrics::StageReport::default`]).
    fn default() -> StageId {
        StageId::of(Role::Stage(Stage::Capture))
    }
}

impl fmt::Display for StageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.camera {
            Some(c) => write!(f, "{}@{c}", self.role.name()),
            None => f.write_str(self.role.name()),
        }
    }
}

/// A text that names no stage process, with the text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` names no stage (capture, capture@CAMERA, scale, infer, publish, display or record)")]
pub struct UnknownStage(pub String);

impl FromStr for StageId {
    type Err = UnknownStage;

    fn from_str(s: &str) -> Result<StageId, UnknownStage> {
        let unknown = || UnknownStage(s.to_string());
        match s.split_once('@') {
            Some(("capture", cam)) if crate::config::check_camera_name(cam).is_ok() => Ok(StageId::camera(cam)),
            Some(_) => Err(unknown()),
            None => Role::from_name(s).map(StageId::of).ok_or_else(unknown),
        }
    }
}

impl TryFrom<String> for StageId {
    type Error = UnknownStage;

    fn try_from(s: String) -> Result<StageId, UnknownStage> {
        s.parse()
    }
}

impl From<StageId> for String {
    fn from(id: StageId) -> String {
        id.to_string()
    }
}

impl Ord for StageId {
    fn cmp(&self, other: &StageId) -> std::cmp::Ordering {
        // As the text compares: `capture` < `capture@a` < `display` < `infer` < ...
        (self.role.name(), &self.camera).cmp(&(other.role.name(), &other.camera))
    }
}

impl PartialOrd for StageId {
    fn partial_cmp(&self, other: &StageId) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_read_and_print_as_their_text_and_sort_as_it_does() {
        let texts = ["capture", "capture@front", "capture@yard", "display", "infer", "publish", "scale"];
        let ids: Vec<StageId> = texts.iter().map(|t| t.parse().unwrap()).collect();
        assert_eq!(ids.iter().map(|i| i.to_string()).collect::<Vec<_>>(), texts);
        let mut sorted = ids.clone();
        sorted.reverse();
        sorted.sort();
        assert_eq!(sorted, ids, "ordered as the text is");
        assert_eq!(ids[1], StageId::camera("front"));
        assert!(ids[1].is(Stage::Capture) && ids[1] != ids[0] && !ids[3].is(Stage::Capture));
        assert_eq!(StageId::capture(None), ids[0]);
        let names = ["front".to_string(), "yard".to_string()];
        assert_eq!(StageId::captures(&names), ids[1..3]);
        assert_eq!(StageId::captures(&names[..1]), [ids[0].clone()], "one camera is `capture`");
        assert_eq!(serde_json::to_string(&ids[1]).unwrap(), "\"capture@front\"");
        assert_eq!(serde_json::from_str::<StageId>("\"infer\"").unwrap(), StageId::from(Stage::Infer));
        for bad in ["", "bench", "scale@front", "capture@", "capture@Front", "capture@a/b"] {
            assert_eq!(bad.parse::<StageId>(), Err(UnknownStage(bad.to_string())), "{bad}");
        }
        assert!(serde_json::from_str::<StageId>("\"tap\"").is_err());
    }
}

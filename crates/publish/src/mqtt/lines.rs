//! A camera's line crossings on MQTT: `P/<camera>/lines/<line>/<label>/in` and `.../out`,
//! each the count since the run started as text, sent when it changes (retained with
//! `--mqtt-retain`), and a Home Assistant sensor for each (`total_increasing`), announced
//! when the label first crosses the line (`H/sensor/<node>/<camera>_L_<line>_L_<label>_<in|out>`).

use std::collections::BTreeMap;

use super::{level, MqttConfig, Msg, Out};
use crate::schema::{CrossingsJson, Direction};

/// What was last sent of one camera's lines: (line, label) to counts.
pub(crate) type Sent = BTreeMap<(String, String), CrossingsJson>;

impl MqttConfig {
    /// `P/<camera>/lines/<line>/<label>/<direction>`.
    pub(crate) fn line_topic(&self, camera: &str, line: &str, label: &str, dir: Direction) -> String {
        format!("{}/{}/lines/{}/{}/{}", self.topic_prefix, level(camera), level(line), level(label), dir.name())
    }

    /// The discovery config of the sensor counting `label` crossing camera `camera`'s line
    /// `line` in direction `dir`. `None` without discovery.
    pub(crate) fn line_discovery(&self, camera: &str, line: &str, label: &str, dir: Direction) -> Option<Msg> {
        let fields = serde_json::json!({
            "name": format!("{line} {label} {}", dir.name()),
            "state_topic": self.line_topic(camera, line, label, dir),
            "state_class": "total_increasing",
            "unit_of_measurement": label,
            "icon": if dir == Direction::In { "mdi:login" } else { "mdi:logout" },
        });
        // Camera and line names are lower case: `_L_` cannot occur in them, so no two
        // cameras' lines share an id (`front` + `door_main` against `front_door` + `main`).
        let object = format!("{}_L_{}_L_{}_{}", level(camera), level(line), level(label), dir.name());
        self.discovery("sensor", camera, &object, &object, fields)
    }
}

/// Camera `camera`'s crossings are `now` (a frame line's `lines`): a state message for each
/// count that changed (with its sensor's discovery the first time), remembered in `sent`.
pub(crate) fn crossings_changed(
    cfg: &MqttConfig,
    camera: &str,
    sent: &mut Sent,
    now: &BTreeMap<String, BTreeMap<String, CrossingsJson>>,
    out: &mut Vec<Out>,
) {
    for (line, labels) in now {
        for (label, c) in labels {
            let key = (line.clone(), label.clone());
            let before = sent.get(&key).copied();
            for (dir, n, was) in
                [(Direction::In, c.into, before.map(|b| b.into)), (Direction::Out, c.out, before.map(|b| b.out))]
            {
                if was == Some(n) {
                    continue;
                }
                if before.is_none() {
                    out.extend(cfg.line_discovery(camera, line, label, dir).map(Out::Announce));
                }
                out.push(Out::State(Msg {
                    topic: cfg.line_topic(camera, line, label, dir),
                    payload: n.to_string().into_bytes(),
                    retain: cfg.retain,
                }));
            }
            sent.insert(key, *c);
        }
    }
}

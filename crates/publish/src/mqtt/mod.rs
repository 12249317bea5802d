//! The MQTT bridge: what the detections socket carries, to an MQTT broker, in the shape of
//! Frigate's topics, with Home Assistant's MQTT discovery.
//!
//! Topics (`P` = `--mqtt-topic-prefix`, default `zcpipe`; `H` = `--mqtt-discovery-prefix`,
//! default `homeassistant`):
//! - `P/available`: `online` when connected, `offline` at a clean end and as the last will
//!   (the broker sends it when the connection dies without a DISCONNECT); retained.
//! - `P/<camera>/detections`: one JSON message per frame with detections: the frame line's
//!   fields (without `type`) plus `time_ms`, the capture time as Unix time in ms.
//! - `P/<camera>/<label>`: the number of `label` in the camera's latest frame, as text, sent
//!   when it changes (so a label that leaves the picture is sent as `0`); retained with
//!   `--mqtt-retain`.
//! - `P/<camera>/lines/<line>/<label>/in` and `.../out`: a line's crossings by label since
//!   the run started, as text, sent when they change; retained with `--mqtt-retain`.
//! - `P/<camera>/events`: the tracker's events (the event line's fields plus `time_ms`), and
//!   each recorded clip once it closed (`"event": "clip"`, the clip line's fields: id, URL,
//!   path, start, end, labels, tracks, plus `time_ms`, its end); each also with `v`, `board`
//!   and its stable `event_id` ([`fleet`]).
//! - `P/status`: the board's status ([`fleet::BoardStatus`]), with every stats message;
//!   retained. With `--board-id`, `P` is `zcpipe/<board id>` unless given.
//! - `P/stats`: every `--mqtt-stats-interval` s and at the end: each camera's fps, frames and
//!   detection messages, and the bridge's counters; retained with `--mqtt-retain`.
//! - `H/binary_sensor/<node>/<camera>_<label>/config`: an occupancy binary sensor per camera
//!   and label (announced when the label is first seen on the camera), and
//!   `H/sensor/<node>/<camera>_fps/config`: an fps sensor per camera (at its first frame),
//!   `H/sensor/<node>/<camera>_L_<line>_L_<label>_<in|out>/config`: a crossings counter per
//!   line, label and direction (when the label first crosses the line);
//!   retained (<https://www.home-assistant.io/integrations/mqtt/#mqtt-discovery>).
//!
//! The bridge never slows the pipeline: [`bridge::MqttOutput::line`] builds the messages and
//! pushes them onto a bounded queue ([`DropOldest`]: the oldest message goes when it is
//! full, counted), and its own threads do the network (rumqttc's event loop), reconnecting
//! with back-off. Discovery configs, `online` and the latest counts are sent again after
//! every reconnection, so a broker that restarted without persistence gets them back.

pub mod bridge;
mod clock;
pub mod fleet;
mod lines;
mod status;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub(crate) use clock::{unix_ms, wall_ms};

use anyhow::{bail, Result};

use zcpipe_core::secret::{redact_password, Secret};

use super::schema::{ClipJson, EventJson, FrameJson, SocketLine};

/// A broker address: `mqtt://[user[:password]@]host[:port]` or `mqtts://...` (`--mqtt`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerUrl {
    /// `mqtts://`: TLS (rustls), else plain TCP.
    pub(crate) tls: bool,
    /// Host name or IP address (an IPv6 address without its brackets).
    pub host: String,
    /// TCP port (default 1883, 8883 for `mqtts://`).
    pub port: u16,
    /// User name (percent-decoded), if any.
    pub user: Option<String>,
    /// Password (percent-decoded), if any; never displayed.
    pub password: Option<Secret>,
}

/// The forms `--mqtt` accepts, quoted in its errors.
pub(crate) const BROKER_FORMS: &str =
    "mqtt://[user[:password]@]host[:port] or mqtts://... (default port 1883, 8883 for mqtts)";

impl BrokerUrl {
    /// Parses `--mqtt`'s value. Errors (one line, the password masked): another scheme, no
    /// host, a bad port, a path or query, a bad percent escape.
    pub fn parse(text: &str) -> Result<BrokerUrl> {
        let shown = redact_password(text);
        let bad = |why: &str| anyhow::anyhow!("--mqtt {shown}: {why}; expected {BROKER_FORMS}");
        let (scheme, rest) = text.split_once("://").ok_or_else(|| bad("no scheme"))?;
        let tls = match scheme.to_ascii_lowercase().as_str() {
            "mqtt" | "tcp" => false,
            "mqtts" | "ssl" => true,
            _ => return Err(bad(&format!("scheme {scheme}:// is not MQTT"))),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        let (userinfo, hostport) = match rest.rfind('@') {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        };
        if hostport.contains(['/', '?', '#']) {
            return Err(bad("a path, query or fragment means nothing here: give the host and port only"));
        }
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or_else(|| bad("an IPv6 address without its closing ]"))?;
            (h, after.strip_prefix(':'))
        } else {
            match hostport.split_once(':') {
                Some((_, p)) if p.contains(':') => return Err(bad("put an IPv6 address in [ ] (mqtt://[::1]:1883)")),
                Some((h, p)) => (h, Some(p)),
                None => (hostport, None),
            }
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        if !host.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._:%".contains(&b)) {
            return Err(bad(&format!(
                "host {host:?} is not a host name or an IP address (put an IPv6 address in [ ])"
            )));
        }
        let port = match port {
            None => {
                if tls {
                    8883
                } else {
                    1883
                }
            }
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n > 0 => n,
                _ => return Err(bad(&format!("port {p:?} is not 1 to 65535"))),
            },
        };
        let (user, password) = match userinfo {
            None => (None, None),
            Some(u) => {
                let (user, pass) = match u.split_once(':') {
                    Some((a, b)) => (a, Some(b)),
                    None => (u, None),
                };
                let user = percent_decode(user).map_err(|e| bad(&format!("user name: {e}")))?;
                let pass = pass.map(percent_decode).transpose().map_err(|e| bad(&format!("password: {e}")))?;
                (Some(user).filter(|u| !u.is_empty()), pass.map(Secret::new))
            }
        };
        if password.is_some() && user.is_none() {
            return Err(bad("a password without a user name"));
        }
        Ok(BrokerUrl { tls, host: host.to_string(), port, user, password })
    }

    /// The URL as an argument (`--mqtt=` of the publish stage): with the password only when
    /// `with_password` (user and password percent-encoded back).
    pub fn to_arg(&self, with_password: bool) -> String {
        let user = match (&self.user, &self.password) {
            (Some(u), Some(p)) if with_password => format!("{}:{}@", percent_encode(u), percent_encode(p.expose())),
            (Some(u), _) => format!("{}@", percent_encode(u)),
            _ => String::new(),
        };
        format!("{}://{user}{}:{}", if self.tls { "mqtts" } else { "mqtt" }, self.host_for_url(), self.port)
    }

    /// `host:port` as in a URL (an IPv6 address in brackets).
    fn host_for_url(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        }
    }

    /// The broker without credentials: `mqtt://host:1883`.
    pub fn address(&self) -> String {
        format!("{}://{}:{}", if self.tls { "mqtts" } else { "mqtt" }, self.host_for_url(), self.port)
    }

    /// For the plan and logs: `mqtt://host:1883 (user alice, password ***)`, `mqtt://host:1883`.
    pub fn describe(&self) -> String {
        match (&self.user, &self.password) {
            (Some(u), Some(_)) => format!("{} (user {u}, password ***)", self.address()),
            (Some(u), None) => format!("{} (user {u})", self.address()),
            _ => self.address(),
        }
    }
}

/// RFC 3986 percent-decoding of a URL's user name or password. Error: a `%` not followed by
/// two hex digits, or bytes that are not UTF-8 (the messages never quote the text).
fn percent_decode(s: &str) -> Result<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            match hex {
                Some(v) => out.push(v),
                None => bail!("a % not followed by two hex digits (write % as %25)"),
            }
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| anyhow::anyhow!("percent escapes that are not UTF-8"))
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// What the MQTT bridge is asked to do (`--mqtt` and the `--mqtt-*` flags).
#[derive(Clone, Debug, PartialEq)]
pub struct MqttConfig {
    /// The broker.
    pub broker: BrokerUrl,
    /// The MQTT client id (`--mqtt-client-id`, default `zcpipe-<hostname>`, plus
    /// `-<instance>` for an instance other than default). Also the Home Assistant node id.
    pub client_id: String,
    /// The first level(s) of every topic but discovery's (`--mqtt-topic-prefix`, `zcpipe`).
    pub topic_prefix: String,
    /// Home Assistant's discovery prefix (`--mqtt-discovery-prefix`, `homeassistant`);
    /// `None`: no discovery (`--mqtt-no-discovery`).
    pub discovery_prefix: Option<String>,
    /// QoS of every message, 0, 1 or 2 (`--mqtt-qos`), but detections'.
    pub qos: u8,
    /// QoS of the detections messages (`--mqtt-detections-qos`, default `--mqtt-qos`): 0 keeps
    /// them out of a bridge's queue while its uplink is down, where events wait at QoS 1.
    pub detections_qos: u8,
    /// Retain the count topics and `stats` (`--mqtt-retain`); `available` and discovery
    /// configs are always retained, detections and events never.
    pub retain: bool,
    /// The most messages queued while the broker is slow or away (`--mqtt-queue`); more
    /// drop the oldest.
    pub queue: usize,
    /// How often `P/stats` is sent (`--mqtt-stats-interval`).
    pub stats_every: Duration,
    /// A PEM file of CA certificates trusted for `mqtts://` besides the built-in roots
    /// (`--mqtt-ca`).
    pub ca_file: Option<PathBuf>,
    /// The board's id (`--board-id`, else from the machine id): in every event id and the
    /// status ([`fleet`]).
    pub board: String,
    /// The board's web view as a fleet view reaches it (`--board-url`), in the status.
    pub board_url: Option<String>,
}

/// Checks a topic prefix (`--mqtt-topic-prefix`, `--mqtt-discovery-prefix`): one or more
/// levels, no wildcards, no empty level. Error: one line naming the flag.
pub fn check_prefix(flag: &str, p: &str) -> Result<()> {
    if p.is_empty() || p.split('/').any(|l| l.is_empty()) || p.contains(['+', '#', '\0']) || p.starts_with('$') {
        bail!("{flag} {p:?}: give topic levels separated by / without + or # or an empty level (e.g. zcpipe or home/zcpipe)");
    }
    Ok(())
}

/// One topic level made of `s`: `/`, `+`, `#`, NUL and white space become `_` (a label like
/// `traffic light` becomes `traffic_light`).
pub fn level(s: &str) -> String {
    s.chars()
        .map(|c| if c == '/' || c == '+' || c == '#' || c == '\0' || c.is_whitespace() { '_' } else { c })
        .collect()
}

/// One message to the broker.
#[derive(Clone, Debug, PartialEq)]
pub struct Msg {
    /// Its topic.
    pub topic: String,
    /// Its payload: UTF-8 text or JSON, or a picture's bytes (a snapshot's JPEG).
    pub payload: Vec<u8>,
    /// Whether the broker keeps it for later subscribers.
    pub retain: bool,
}

impl Msg {
    /// The payload as text (a picture's bytes shown lossily).
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.payload)
    }
}

impl MqttConfig {
    /// `P/available`.
    pub fn availability_topic(&self) -> String {
        format!("{}/available", self.topic_prefix)
    }
    /// `P/<camera>/<leaf>` (`detections`, `events`, or a label).
    pub(crate) fn camera_topic(&self, camera: &str, leaf: &str) -> String {
        format!("{}/{}/{}", self.topic_prefix, level(camera), level(leaf))
    }
    /// `P/<camera>/available`: `online` from the camera's first frame, `offline` once it is
    /// removed from the run (retained).
    pub(crate) fn camera_availability(&self, camera: &str, online: bool) -> Msg {
        let payload = if online { "online" } else { "offline" };
        Msg { topic: self.camera_topic(camera, "available"), payload: payload.as_bytes().to_vec(), retain: true }
    }
    /// `P/stats`.
    pub(crate) fn stats_topic(&self) -> String {
        format!("{}/stats", self.topic_prefix)
    }
    /// `P/status` (retained: [`fleet::BoardStatus`]).
    pub fn status_topic(&self) -> String {
        format!("{}/status", self.topic_prefix)
    }

    /// Home Assistant's node id: the client id with every character but ASCII letters,
    /// digits, `_` and `-` made `_` (HA's discovery topics allow only those, and ignore a
    /// config under any other without a word).
    pub fn node_id(&self) -> String {
        ha_id(&self.client_id)
    }

    /// The `device` of camera `camera` in its discovery configs: one Home Assistant device per
    /// camera and client id.
    fn device(&self, camera: &str) -> serde_json::Value {
        serde_json::json!({
            "identifiers": [format!("{}_{}", level(&self.client_id), level(camera))],
            "name": format!("zcpipe {camera}"),
            "manufacturer": "zcpipe",
            "model": "camera -> NPU pipeline",
            "sw_version": env!("CARGO_PKG_VERSION"),
        })
    }

    /// A discovery config of `component` (`sensor`, `binary_sensor`, `event`, `image`) for camera
    /// `camera` at `<prefix>/<component>/<node id>/<object>/config` (`object` made of
    /// `[a-zA-Z0-9_-]`), its entity named by `id` (its unique id and default entity id):
    /// `fields` with the ids, availability, device and origin every config carries. `None`
    /// without discovery.
    fn discovery(
        &self,
        component: &str,
        camera: &str,
        object: &str,
        id: &str,
        mut fields: serde_json::Value,
    ) -> Option<Msg> {
        let h = self.discovery_prefix.as_ref()?;
        let availability = [self.availability_topic(), self.camera_topic(camera, "available")].map(|topic| {
            serde_json::json!({"topic": topic, "payload_available": "online", "payload_not_available": "offline"})
        });
        let node = self.node_id();
        let object = ha_id(object);
        let id = ha_id(id);
        let common = serde_json::json!({
            "unique_id": format!("{}_{id}", level(&self.client_id)),
            // HA 2025.10 replaced `object_id` with this (`object_id` is gone in 2026.4).
            "default_entity_id": format!("{component}.zcpipe_{}", id.to_lowercase().replace('-', "_")),
            // Available while the run is up and the camera is part of it.
            "availability": availability,
            "availability_mode": "all",
            "device": self.device(camera),
            "origin": {
                "name": "zcpipe",
                "sw_version": env!("CARGO_PKG_VERSION"),
            },
        });
        if let (Some(f), serde_json::Value::Object(c)) = (fields.as_object_mut(), common) {
            f.extend(c);
        }
        Some(Msg {
            topic: format!("{h}/{component}/{node}/{object}/config"),
            payload: fields.to_string().into_bytes(),
            retain: true,
        })
    }

    /// The discovery config of camera `camera`'s event entity: one Home Assistant event per
    /// tracker event (`new`, `entered_zone`, ...) on its events topic, with the label, track
    /// and zone as attributes, one per recorded clip (`clip`, with its id, URL and labels)
    /// and one per snapshot of a new object (`snapshot`, with its file). `None` without
    /// discovery.
    pub(crate) fn events_discovery(&self, camera: &str) -> Option<Msg> {
        let fields = serde_json::json!({
            "name": "events",
            "state_topic": self.camera_topic(camera, "events"),
            "event_types": ["new", "entered_zone", "left_zone", "loitering", "crossed_line", "stationary", "end", "clip", "snapshot"],
            "value_template": "{{ {'event_type': value_json.event, 'label': value_json.get('label'), 'track_id': value_json.get('track_id'), 'zone': value_json.get('zone'), 'line': value_json.get('line'), 'direction': value_json.get('direction'), 'duration_s': value_json.get('duration_s'), 'speed_kmh': value_json.get('speed_kmh'), 'clip_id': value_json.get('id'), 'url': value_json.get('url'), 'thumbnail': value_json.get('thumbnail'), 'labels': value_json.get('labels'), 'file': value_json.get('file')} | to_json }}",
        });
        let object = format!("{}_events", level(camera));
        self.discovery("event", camera, &object, &object, fields)
    }

    /// The discovery config of camera `camera`'s occupancy binary sensor for `label`: ON
    /// while the label's count topic is above 0. `None` without discovery.
    pub(crate) fn occupancy_discovery(&self, camera: &str, label: &str) -> Option<Msg> {
        let fields = serde_json::json!({
            "name": format!("{label} occupancy"),
            "device_class": "occupancy",
            "state_topic": self.camera_topic(camera, label),
            "value_template": "{{ 'ON' if (value | int(0)) > 0 else 'OFF' }}",
            "payload_on": "ON",
            "payload_off": "OFF",
        });
        let object = format!("{}_{}", level(camera), level(label));
        self.discovery("binary_sensor", camera, &object, &format!("{object}_occupancy"), fields)
    }

    /// The discovery config of camera `camera`'s image entity: its latest snapshot, the JPEG
    /// itself on `P/<camera>/snapshot` (retained, so HA shows it after a restart).
    /// `None` without discovery.
    pub(crate) fn snapshot_discovery(&self, camera: &str) -> Option<Msg> {
        let fields = serde_json::json!({
            "name": "snapshot",
            "image_topic": self.camera_topic(camera, "snapshot"),
            "content_type": "image/jpeg",
        });
        let object = format!("{}_snapshot", level(camera));
        self.discovery("image", camera, &object, &object, fields)
    }

    /// Camera `camera`'s latest snapshot (`jpeg`): its image entity's discovery config the
    /// first time (`first`), then the picture as the retained state of `P/<camera>/snapshot`
    /// (a newer picture replaces one still queued).
    pub(crate) fn snapshot_msgs(&self, camera: &str, jpeg: Vec<u8>, first: bool) -> Vec<Out> {
        let mut out = vec![];
        if first {
            out.extend(self.snapshot_discovery(camera).map(Out::Announce));
        }
        out.push(Out::State(Msg { topic: self.camera_topic(camera, "snapshot"), payload: jpeg, retain: true }));
        out
    }

    /// The discovery config of camera `camera`'s fps sensor (from `P/stats`). `None` without
    /// discovery.
    pub(crate) fn fps_discovery(&self, camera: &str) -> Option<Msg> {
        let fields = serde_json::json!({
            "name": "fps",
            "state_topic": self.stats_topic(),
            "value_template": format!("{{{{ value_json.cameras['{camera}'].fps }}}}"),
            "unit_of_measurement": "fps",
            "state_class": "measurement",
        });
        let object = format!("{}_fps", level(camera));
        self.discovery("sensor", camera, &object, &object, fields)
    }
}

/// Camera `camera`'s counts are `now` (labels not in it: 0): a state message for each label
/// whose count changed (and its occupancy sensor's discovery the first time), remembered in
/// `cam`.
fn counts_changed(
    cfg: &MqttConfig,
    camera: &str,
    cam: &mut CameraState,
    now: &BTreeMap<String, u32>,
    out: &mut Vec<Out>,
) {
    let labels: BTreeSet<String> = cam.counts.keys().chain(now.keys()).cloned().collect();
    for label in labels {
        let n = now.get(&label).copied().unwrap_or(0);
        match cam.counts.get(&label) {
            Some(&last) if last == n => continue,
            Some(_) => {}
            None => out.extend(cfg.occupancy_discovery(camera, &label).map(Out::Announce)),
        }
        out.push(Out::State(Msg {
            topic: cfg.camera_topic(camera, &label),
            payload: n.to_string().into_bytes(),
            retain: cfg.retain,
        }));
        cam.counts.insert(label, n);
    }
}

/// `s` as a Home Assistant discovery id (a node or object id): ASCII letters, digits, `_`
/// and `-` kept, anything else `_`.
pub fn ha_id(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
}

/// A bounded FIFO that drops its oldest element to make room, and counts what it dropped.
#[derive(Debug)]
pub struct DropOldest<T> {
    items: VecDeque<T>,
    cap: usize,
    dropped: u64,
}

impl<T> DropOldest<T> {
    /// An empty queue holding at most `cap` (at least 1) elements.
    pub fn new(cap: usize) -> DropOldest<T> {
        DropOldest { items: VecDeque::new(), cap: cap.max(1), dropped: 0 }
    }
    /// Adds `item` at the back; when full, the front (oldest) element is dropped first.
    pub fn push(&mut self, item: T) {
        if self.items.len() >= self.cap {
            self.items.pop_front();
            self.dropped += 1;
        }
        self.items.push_back(item);
    }
    /// Takes the oldest element.
    pub fn pop(&mut self) -> Option<T> {
        self.items.pop_front()
    }
    /// Puts back an element just taken (it goes first again; when full it is the one dropped).
    pub(crate) fn unpop(&mut self, item: T) {
        if self.items.len() >= self.cap {
            self.dropped += 1;
            return;
        }
        self.items.push_front(item);
    }
    /// Elements waiting.
    pub fn len(&self) -> usize {
        self.items.len()
    }
    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    /// Elements dropped so far to make room.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
    /// Removes the waiting elements `f` says are stale (not counted as dropped).
    pub fn remove_if(&mut self, f: impl Fn(&T) -> bool) {
        self.items.retain(|i| !f(i));
    }
}

/// Where a message built from a line goes.
#[derive(Clone, Debug, PartialEq)]
pub enum Out {
    /// Sent once, in order with the others (events, stats): queued.
    Once(Msg),
    /// A frame's detections: queued as [`Out::Once`], sent at the detections' QoS.
    Detections(Msg),
    /// A state (a count): queued, and also kept as its topic's latest value, sent again
    /// after every reconnection.
    State(Msg),
    /// A discovery config: kept and sent after every connection (not queued: it is never
    /// dropped).
    Announce(Msg),
}

/// Per camera: what the bridge last sent and counted.
#[derive(Debug, Default)]
struct CameraState {
    /// The last count sent per label (labels seen at least once).
    counts: BTreeMap<String, u32>,
    /// With a tracker: the confirmed tracks alive now (from `new` to `end`), by id, with
    /// their label.
    live: BTreeMap<u64, String>,
    /// Frames seen, and frames with detections (detection messages made).
    frames: u64,
    detection_msgs: u64,
    /// Frames at the last stats message, for its fps.
    frames_at_stats: u64,
    /// The line crossings last sent.
    crossings: lines::Sent,
    /// What the board's status counts ([`status`]).
    status: status::CameraTally,
}

/// Every count of camera `camera` above 0 to 0, each a state message.
fn zero_counts(cfg: &MqttConfig, camera: &str, cam: &mut CameraState, out: &mut Vec<Out>) {
    for (label, n) in &mut cam.counts {
        if *n > 0 {
            *n = 0;
            out.push(Out::State(Msg {
                topic: cfg.camera_topic(camera, label),
                payload: b"0".to_vec(),
                retain: cfg.retain,
            }));
        }
    }
}

/// Turns socket lines into MQTT messages (on the publish stage's frame loop: no I/O).
#[derive(Debug)]
pub(crate) struct Translator {
    cfg: MqttConfig,
    cameras: BTreeMap<String, CameraState>,
    last_stats: Instant,
    /// Counts are live confirmed tracks (a tracker runs), not a frame's detections.
    tracks: bool,
    /// The board's status between two messages ([`status`]).
    board: status::BoardTally,
}

/// A line's fields plus `time_ms`, as compact JSON. Serialised straight from the line (not
/// through a `serde_json::Value`, which would widen its f32 scores and boxes to f64 digits),
/// so the numbers read exactly as on the socket.
fn with_time<T: serde::Serialize>(line: &T, time_ms: u64) -> String {
    #[derive(serde::Serialize)]
    struct WithTime<'a, T: serde::Serialize> {
        #[serde(flatten)]
        line: &'a T,
        time_ms: u64,
    }
    serde_json::to_string(&WithTime { line, time_ms }).unwrap_or_default()
}

/// An events message: the line's fields, `time_ms` and the fleet's `v`, `board` and
/// `event_id` ([`fleet::Stamped`]), as compact JSON.
fn stamped<T: serde::Serialize>(
    line: &T,
    event: Option<&'static str>,
    time_ms: u64,
    board: &str,
    id: String,
) -> Vec<u8> {
    let m = fleet::Stamped { line, event, time_ms, v: fleet::WIRE_VERSION, board, event_id: id };
    serde_json::to_vec(&m).unwrap_or_default()
}

impl Translator {
    /// A translator for `cfg`.
    pub fn new(cfg: MqttConfig) -> Translator {
        Translator {
            cfg,
            cameras: BTreeMap::new(),
            last_stats: Instant::now(),
            tracks: false,
            board: status::BoardTally::new(),
        }
    }

    /// Counts from tracks (`tracks`: a tracker runs): a label's count is its confirmed tracks
    /// alive now, from the track's `new` event to its `end`, so a detection missed in one
    /// frame (which the tracker's keep-alive bridges) never turns a sensor off. Without a
    /// tracker, a frame's detections.
    pub fn counting_tracks(mut self, tracks: bool) -> Translator {
        self.tracks = tracks;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &MqttConfig {
        &self.cfg
    }

    /// The messages of one socket line, appended to `out`. `wall` is the Unix time (ms) of
    /// the line's `timestamp_ns` ([`wall_ms`]; a parameter so tests give fixed times).
    pub fn line(&mut self, line: &SocketLine, wall: impl Fn(u64) -> u64, out: &mut Vec<Out>) {
        match line {
            SocketLine::Frame(f) => self.frame(f, wall(f.timestamp_ns), out),
            SocketLine::Event(e) => self.event(e, wall(e.timestamp_ns), out),
            SocketLine::Clip(c) => self.clip(c, out),
            SocketLine::Notice(_) | SocketLine::End(_) => {}
        }
    }

    /// A closed clip, on its camera's events topic as an event of type `clip` (Home
    /// Assistant's event entity gets its id and URL): the clip line's fields plus `event`
    /// and `time_ms` (its end).
    fn clip(&mut self, c: &ClipJson, out: &mut Vec<Out>) {
        let end = c.end_ms.max(0) as u64;
        let id = fleet::clip_event_id(&self.cfg.board, c);
        self.counted_event(&c.camera, end);
        out.push(Out::Once(Msg {
            topic: self.cfg.camera_topic(&c.camera, "events"),
            payload: stamped(c, Some("clip"), end, &self.cfg.board, id),
            retain: false,
        }));
    }

    fn frame(&mut self, f: &FrameJson, time_ms: u64, out: &mut Vec<Out>) {
        let cfg = &self.cfg;
        let first = !self.cameras.contains_key(&f.camera);
        let cam = self.cameras.entry(f.camera.clone()).or_default();
        if first {
            out.extend(cfg.fps_discovery(&f.camera).map(Out::Announce));
            out.extend(cfg.events_discovery(&f.camera).map(Out::Announce));
            out.push(Out::State(cfg.camera_availability(&f.camera, true)));
        }
        cam.frames += 1;
        cam.status.frame(f);
        self.board.frame(f);
        if !f.detections.is_empty() {
            cam.detection_msgs += 1;
            out.push(Out::Detections(Msg {
                topic: cfg.camera_topic(&f.camera, "detections"),
                payload: with_time(f, time_ms).into_bytes(),
                retain: false,
            }));
        }
        if let Some(now) = &f.lines {
            lines::crossings_changed(cfg, &f.camera, &mut cam.crossings, now, out);
        }
        if self.tracks {
            return;
        }
        let mut now: BTreeMap<String, u32> = BTreeMap::new();
        for d in &f.detections {
            *now.entry(d.label.clone()).or_default() += 1;
        }
        counts_changed(cfg, &f.camera, cam, &now, out);
    }

    /// The stream ended: every count above 0 goes to 0 (so a retained count does not keep
    /// a Home Assistant occupancy sensor on after the run; the next run starts from 0).
    pub fn end(&mut self, out: &mut Vec<Out>) {
        for (camera, cam) in &mut self.cameras {
            zero_counts(&self.cfg, camera, cam, out);
        }
    }

    /// Camera `camera` was removed from the run: its counts go to 0 and its entities
    /// unavailable (`P/<camera>/available` `offline`, retained) until it is added back.
    pub fn camera_removed(&mut self, camera: &str, out: &mut Vec<Out>) {
        let Some(mut cam) = self.cameras.remove(camera) else { return };
        zero_counts(&self.cfg, camera, &mut cam, out);
        out.push(Out::State(self.cfg.camera_availability(camera, false)));
    }

    fn event(&mut self, e: &EventJson, time_ms: u64, out: &mut Vec<Out>) {
        let place = e.zone.as_deref().or(e.line.as_deref());
        let id = fleet::event_id(&self.cfg.board, &e.camera, e.track_id, &e.event, place, time_ms);
        self.counted_event(&e.camera, time_ms);
        out.push(Out::Once(Msg {
            topic: self.cfg.camera_topic(&e.camera, "events"),
            payload: stamped(e, None, time_ms, &self.cfg.board, id),
            retain: false,
        }));
        if !self.tracks || !matches!(e.event.as_str(), "new" | "end") {
            return;
        }
        // A camera's first line is a frame; an event of a camera the bridge does not know
        // (removed from the run) makes no entry, which would skip its discovery and
        // availability when it is back.
        let Some(cam) = self.cameras.get_mut(&e.camera) else { return };
        if e.event == "new" {
            cam.live.insert(e.track_id, e.label.clone());
        } else {
            cam.live.remove(&e.track_id);
        }
        let mut now: BTreeMap<String, u32> = BTreeMap::new();
        for label in cam.live.values() {
            *now.entry(label.clone()).or_default() += 1;
        }
        counts_changed(&self.cfg, &e.camera, cam, &now, out);
    }

    /// Whether the next stats message is due (`--mqtt-stats-interval` since the last).
    pub(crate) fn stats_due(&self) -> bool {
        self.last_stats.elapsed() >= self.cfg.stats_every
    }

    /// The `P/stats` message: each camera's fps since the last one, frames and detection
    /// messages, and `bridge` (the bridge's counters, as its report).
    pub fn stats(&mut self, bridge: serde_json::Value) -> Msg {
        let secs = self.last_stats.elapsed().as_secs_f64().max(1e-3);
        self.last_stats = Instant::now();
        let cams: serde_json::Map<String, serde_json::Value> = self
            .cameras
            .iter_mut()
            .map(|(name, c)| {
                let fps = ((c.frames - c.frames_at_stats) as f64 / secs * 10.0).round() / 10.0;
                c.frames_at_stats = c.frames;
                (
                    name.clone(),
                    serde_json::json!({"fps": fps, "frames": c.frames, "detection_messages": c.detection_msgs}),
                )
            })
            .collect();
        let payload = serde_json::json!({"time_ms": unix_ms(), "cameras": cams, "mqtt": bridge});
        Msg { topic: self.cfg.stats_topic(), payload: payload.to_string().into_bytes(), retain: self.cfg.retain }
    }
}

#[cfg(test)]
mod tests;

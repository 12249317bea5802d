use super::*;
use zcpipe_core::schema::{DetectionJson, LatencyJson};

pub(super) fn cfg() -> MqttConfig {
    MqttConfig {
        broker: BrokerUrl::parse("mqtt://alice:s3cret@broker.lan").unwrap(),
        client_id: "zcpipe-box".into(),
        topic_prefix: "zcpipe".into(),
        discovery_prefix: Some("homeassistant".into()),
        qos: 0,
        detections_qos: 0,
        retain: true,
        queue: 10,
        stats_every: Duration::from_secs(10),
        ca_file: None,
        board: "box1".into(),
        board_url: None,
    }
}

fn det(label: &str) -> DetectionJson {
    DetectionJson {
        class_id: if label == "person" { 0 } else { 9 },
        label: label.into(),
        score: 0.9,
        bbox: [1.0, 2.0, 3.0, 4.0],
        track_id: None,
        ..Default::default()
    }
}

fn frame(camera: &str, seq: u64, labels: &[&str]) -> SocketLine {
    SocketLine::Frame(FrameJson {
        camera: camera.into(),
        seq,
        timestamp_ns: 5_000_000 + seq,
        width: 768,
        height: 432,
        latency_us: LatencyJson::default(),
        detections: labels.iter().map(|l| det(l)).collect(),
        zones: None,
        skipped: None,
        npu: Default::default(),
        ..Default::default()
    })
}

#[test]
fn broker_urls_parse_with_defaults_escapes_and_ipv6() {
    let b = BrokerUrl::parse("mqtt://broker.lan").unwrap();
    assert_eq!(
        (b.tls, b.host.as_str(), b.port, b.user.clone(), b.password.clone()),
        (false, "broker.lan", 1883, None, None)
    );
    let b = BrokerUrl::parse("mqtts://u%20x:p%3Aw%40rd@10.0.0.2:8884/").unwrap();
    assert_eq!((b.tls, b.host.as_str(), b.port, b.user.as_deref()), (true, "10.0.0.2", 8884, Some("u x")));
    assert_eq!(b.password.as_ref().unwrap().expose(), "p:w@rd");
    assert_eq!(b.to_arg(true), "mqtts://u%20x:p%3Aw%40rd@10.0.0.2:8884");
    assert_eq!(b.to_arg(false), "mqtts://u%20x@10.0.0.2:8884");
    assert_eq!(BrokerUrl::parse(&b.to_arg(true)).unwrap(), b, "reads back");
    assert_eq!(b.describe(), "mqtts://10.0.0.2:8884 (user u x, password ***)");
    assert_eq!(BrokerUrl::parse("mqtts://h").unwrap().port, 8883);
    let v6 = BrokerUrl::parse("mqtt://[::1]:1884").unwrap();
    assert_eq!((v6.host.as_str(), v6.port, v6.address()), ("::1", 1884, "mqtt://[::1]:1884".to_string()));
    // A password with an unescaped @: the last @ ends the user information.
    assert_eq!(BrokerUrl::parse("mqtt://bob:a@b@h").unwrap().password.unwrap().expose(), "a@b");
    for (bad, says) in [
        ("broker:1883", "no scheme"),
        ("http://h", "scheme http:// is not MQTT"),
        ("mqtt://", "no host"),
        ("mqtt://u:pw@", "no host"),
        ("mqtt://h:0", "port \"0\" is not 1 to 65535"),
        ("mqtt://h:x", "port \"x\" is not 1 to 65535"),
        ("mqtt://h/topic", "a path, query or fragment"),
        ("mqtt://h?x=1", "a path, query or fragment"),
        ("mqtt://::1", "put an IPv6 address in [ ]"),
        ("mqtt://h st", "is not a host name"),
        ("mqtt://[::1", "without its closing ]"),
        ("mqtt://u:p%zz@h", "password: a % not followed by two hex digits"),
        ("mqtt://:secretpw@h", "a password without a user name"),
    ] {
        let e = format!("{:#}", BrokerUrl::parse(bad).unwrap_err());
        assert!(e.contains(says), "{bad}: {e}");
        assert!(!e.contains("secretpw") && !e.contains('\n'), "{e}");
        assert!(e.ends_with(BROKER_FORMS), "{e}");
    }
    let e = format!("{:#}", BrokerUrl::parse("mqtt://u:secretpw@h:70000").unwrap_err());
    assert!(e.starts_with("--mqtt mqtt://u:***@h:70000: port"), "{e}");
}

#[test]
fn topics_and_levels() {
    let c = cfg();
    assert_eq!(c.availability_topic(), "zcpipe/available");
    assert_eq!(c.camera_topic("front", "detections"), "zcpipe/front/detections");
    assert_eq!(c.camera_topic("front", "traffic light"), "zcpipe/front/traffic_light");
    assert_eq!(c.camera_topic("front", "a/b+c#d"), "zcpipe/front/a_b_c_d");
    assert_eq!(c.stats_topic(), "zcpipe/stats");
    assert!(check_prefix("--p", "home/zcpipe").is_ok());
    for bad in ["", "/x", "x/", "a//b", "a/+", "#", "$SYS"] {
        assert!(check_prefix("--p", bad).is_err(), "{bad:?}");
    }
}

#[test]
fn drop_oldest_keeps_the_newest_and_counts() {
    let mut q = DropOldest::new(3);
    for i in 0..5 {
        q.push(i);
    }
    assert_eq!((q.len(), q.dropped()), (3, 2));
    assert_eq!(q.pop(), Some(2), "0 and 1 went");
    q.unpop(2);
    assert_eq!(q.len(), 3);
    q.unpop(1); // full: the one put back is the one dropped
    assert_eq!((q.len(), q.dropped()), (3, 3));
    assert_eq!([q.pop(), q.pop(), q.pop(), q.pop()], [Some(2), Some(3), Some(4), None]);
    assert!(q.is_empty());
    assert_eq!(DropOldest::<u8>::new(0).cap, 1, "at least one");
}

#[test]
fn discovery_payloads_name_topics_availability_and_device() {
    let c = cfg();
    let m = c.occupancy_discovery("front", "traffic light").unwrap();
    assert_eq!(m.topic, "homeassistant/binary_sensor/zcpipe-box/front_traffic_light/config");
    assert!(m.retain);
    let v: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
    assert_eq!(v["unique_id"], "zcpipe-box_front_traffic_light_occupancy");
    assert_eq!(v["state_topic"], "zcpipe/front/traffic_light");
    assert_eq!(v["device_class"], "occupancy");
    assert_eq!(
        v["availability"],
        serde_json::json!([
            {"topic": "zcpipe/available", "payload_available": "online", "payload_not_available": "offline"},
            {"topic": "zcpipe/front/available", "payload_available": "online", "payload_not_available": "offline"},
        ]),
        "the run and the camera both up"
    );
    assert_eq!(v["availability_mode"], "all");
    assert_eq!(v["device"]["identifiers"][0], "zcpipe-box_front");
    assert_eq!(v["device"]["name"], "zcpipe front");
    assert_eq!(v["value_template"], "{{ 'ON' if (value | int(0)) > 0 else 'OFF' }}");
    let f = c.fps_discovery("front").unwrap();
    assert_eq!(f.topic, "homeassistant/sensor/zcpipe-box/front_fps/config");
    let v: serde_json::Value = serde_json::from_slice(&f.payload).unwrap();
    assert_eq!(
        (v["state_topic"].as_str(), v["value_template"].as_str()),
        (Some("zcpipe/stats"), Some("{{ value_json.cameras['front'].fps }}"))
    );
    assert_eq!(v["unique_id"], "zcpipe-box_front_fps");
    let none = MqttConfig { discovery_prefix: None, ..c };
    assert_eq!((none.occupancy_discovery("front", "person"), none.fps_discovery("front")), (None, None));
}

#[test]
fn frames_become_detections_counts_that_go_to_zero_and_announcements() {
    let mut t = Translator::new(cfg());
    let mut out = vec![];
    let wall = |ns: u64| ns / 1_000_000 + 1_700_000_000_000;
    t.line(&frame("front", 1, &["person", "person", "dog"]), wall, &mut out);
    let topics: Vec<(&str, &str)> = out
        .iter()
        .map(|o| match o {
            Out::Once(m) => ("once", m.topic.as_str()),
            Out::Detections(m) => ("detections", m.topic.as_str()),
            Out::State(m) => ("state", m.topic.as_str()),
            Out::Announce(m) => ("announce", m.topic.as_str()),
        })
        .collect();
    assert_eq!(
        topics,
        [
            ("announce", "homeassistant/sensor/zcpipe-box/front_fps/config"),
            ("announce", "homeassistant/event/zcpipe-box/front_events/config"),
            ("state", "zcpipe/front/available"),
            ("detections", "zcpipe/front/detections"),
            ("announce", "homeassistant/binary_sensor/zcpipe-box/front_dog/config"),
            ("state", "zcpipe/front/dog"),
            ("announce", "homeassistant/binary_sensor/zcpipe-box/front_person/config"),
            ("state", "zcpipe/front/person"),
        ]
    );
    let Out::Detections(d) = &out[3] else { panic!() };
    let v: serde_json::Value = serde_json::from_slice(&d.payload).unwrap();
    assert_eq!(
        (v["camera"].as_str(), v["seq"].as_u64(), v["time_ms"].as_u64()),
        (Some("front"), Some(1), Some(1_700_000_000_005))
    );
    assert_eq!(v["detections"].as_array().unwrap().len(), 3);
    assert!(v.get("type").is_none() && !d.retain);
    assert!(d.text().contains("\"score\":0.9,\"box\":[1.0,2.0,3.0,4.0]"), "f32 as on the socket: {}", d.text());
    let Out::State(p) = &out[7] else { panic!() };
    assert_eq!((&*p.text(), p.retain), ("2", true));
    // The same counts: nothing but the detections. Then the dog leaves: 0 for dog.
    out.clear();
    t.line(&frame("front", 2, &["dog", "person", "person"]), wall, &mut out);
    assert_eq!(out.len(), 1, "{out:?}");
    out.clear();
    t.line(&frame("front", 3, &["person"]), wall, &mut out);
    let states: Vec<(String, String)> = out
        .iter()
        .filter_map(|o| if let Out::State(m) = o { Some((m.topic.clone(), m.text().into_owned())) } else { None })
        .collect();
    assert_eq!(
        states,
        [("zcpipe/front/dog".to_string(), "0".to_string()), ("zcpipe/front/person".to_string(), "1".to_string())]
    );
    // An empty frame: no detections message, every label to 0.
    out.clear();
    t.line(&frame("front", 4, &[]), wall, &mut out);
    let all: Vec<(String, String)> = out
        .iter()
        .map(|o| if let Out::State(m) = o { (m.topic.clone(), m.text().into_owned()) } else { panic!("{o:?}") })
        .collect();
    assert_eq!(all, [("zcpipe/front/person".to_string(), "0".to_string())]);
    // Stats: per camera frames and detection messages.
    let s = t.stats(serde_json::json!({"sent": 1}));
    let v: serde_json::Value = serde_json::from_slice(&s.payload).unwrap();
    assert_eq!(
        (v["cameras"]["front"]["frames"].as_u64(), v["cameras"]["front"]["detection_messages"].as_u64()),
        (Some(4), Some(3))
    );
    assert!(v["cameras"]["front"]["fps"].as_f64().unwrap() > 0.0);
    assert_eq!((s.topic.as_str(), v["mqtt"]["sent"].as_u64()), ("zcpipe/stats", Some(1)));
}

#[test]
fn events_go_to_the_events_topic_with_wall_time() {
    let mut t = Translator::new(cfg());
    let e = EventJson {
        event: "new".into(),
        camera: "door".into(),
        track_id: 3,
        label: "person".into(),
        class_id: 0,
        score: 0.8,
        zone: None,
        first_seen_ns: 1,
        last_seen_ns: 2,
        timestamp_ns: 2_000_000,
        seq: Some(5),
        bbox: [1.0, 2.0, 3.0, 4.0],
        ..Default::default()
    };
    let mut out = vec![];
    t.line(&SocketLine::Event(e), |ns| ns / 1_000_000, &mut out);
    let [Out::Once(m)] = &out[..] else { panic!("{out:?}") };
    assert_eq!(m.topic, "zcpipe/door/events");
    let v: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
    assert_eq!((v["event"].as_str(), v["track_id"].as_u64(), v["time_ms"].as_u64()), (Some("new"), Some(3), Some(2)));
}

#[test]
fn a_closed_clip_is_an_event_of_type_clip_with_its_id_and_url() {
    let mut t = Translator::new(cfg());
    let c = zcpipe_core::schema::ClipJson {
        camera: "door".into(),
        id: 42,
        start_ms: 1_000,
        end_ms: 9_000,
        complete: true,
        reason: None,
        labels: vec!["person".into()],
        tracks: vec![3],
        zones: vec![],
        bytes: 12_345,
        path: "/var/lib/zcpipe/clips/door/x.mp4".into(),
        url: Some("/clips/42.mp4".into()),
        thumbnail: Some("/clips/42.jpg".into()),
    };
    let mut out = vec![];
    t.line(&SocketLine::Clip(c), |ns| ns, &mut out);
    let [Out::Once(m)] = &out[..] else { panic!("{out:?}") };
    assert_eq!(m.topic, "zcpipe/door/events");
    let v: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
    assert_eq!(
        (v["event"].as_str(), v["id"].as_i64(), v["url"].as_str(), v["time_ms"].as_i64()),
        (Some("clip"), Some(42), Some("/clips/42.mp4"), Some(9_000))
    );
    // Its stable id for a fleet: the clip's own `id` stays its number.
    assert_eq!(
        (v["v"].as_u64(), v["board"].as_str(), v["event_id"].as_str()),
        (Some(1), Some("box1"), Some("box1/door/clip/42/9000"))
    );
    // Home Assistant's event entity knows the type and passes the id and URL on.
    let d = cfg().events_discovery("door").unwrap();
    let d: serde_json::Value = serde_json::from_slice(&d.payload).unwrap();
    assert!(d["event_types"].as_array().unwrap().iter().any(|t| t == "clip"), "{d}");
    let template = d["value_template"].as_str().unwrap();
    assert!(template.contains("'clip_id': value_json.get('id')") && template.contains("'url': value_json.get('url')"));
}

#[test]
fn wall_time_of_a_monotonic_stamp_is_now_less_its_age() {
    let now = zcpipe_core::frame::monotonic_ns();
    let w = wall_ms(now.saturating_sub(2_000_000_000));
    let u = unix_ms();
    assert!(u - w >= 2000 && u - w < 3000, "{u} - {w}");
}

/// Home Assistant's rules for an MQTT discovery message, as its documentation states them
/// (MQTT integration, "MQTT Discovery": https://www.home-assistant.io/integrations/mqtt/#mqtt-discovery,
/// read for Home Assistant 2026.11; the entity pages for binary_sensor, sensor and event):
/// the topic is `<discovery_prefix>/<component>/[<node_id>/]<object_id>/config` with node and
/// object ids of `[a-zA-Z0-9_-]`; `object_id` in the payload is deprecated since 2025.10 and
/// removed in 2026.4, `default_entity_id` (`<component>.<object id>`, lower case) takes its
/// place; each component has its own options (others are an error for HA's schema); an
/// `origin` names who published it. Returns every rule the message breaks.
fn ha_discovery_violations(m: &Msg) -> Vec<String> {
    const COMMON: &[&str] =
        &["name", "unique_id", "default_entity_id", "availability", "availability_mode", "device", "origin"];
    const STATE: &[&str] = &["state_topic", "value_template"];
    let (own, needs): (&[&str], &str) = match m.topic.split('/').nth(1) {
        Some("binary_sensor") => (&["device_class", "payload_on", "payload_off"], "state_topic"),
        Some("sensor") => (&["device_class", "unit_of_measurement", "state_class"], "state_topic"),
        Some("event") => (&["device_class", "event_types"], "state_topic"),
        // https://www.home-assistant.io/integrations/image.mqtt/: `image_topic` (the picture's
        // bytes) or `url_topic`, never both, and no state topic.
        Some("image") => (&["image_topic", "content_type", "image_encoding"], "image_topic"),
        other => return vec![format!("component {other:?} is not one zcpipe announces")],
    };
    let own: Vec<&str> = own.iter().chain(if needs == "state_topic" { STATE } else { &[] }).copied().collect();
    let mut bad = vec![];
    let id_ok = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    let parts: Vec<&str> = m.topic.split('/').collect();
    if parts.len() != 5 || parts[4] != "config" || !id_ok(parts[2]) || !id_ok(parts[3]) {
        bad.push(format!(
            "topic {} is not <prefix>/<component>/<node_id>/<object_id>/config with ids of [a-zA-Z0-9_-]",
            m.topic
        ));
    }
    if !m.retain {
        bad.push("not retained".into());
    }
    let v: serde_json::Value = match serde_json::from_slice(&m.payload) {
        Ok(v) => v,
        Err(e) => return vec![format!("payload is not JSON: {e}")],
    };
    let Some(o) = v.as_object() else { return vec!["payload is not an object".into()] };
    for k in o.keys() {
        if !COMMON.contains(&k.as_str()) && !own.contains(&k.as_str()) {
            bad.push(format!("option {k} is not one of {}'s", parts[1]));
        }
    }
    for k in ["unique_id", "default_entity_id", needs, "availability", "device", "origin"] {
        if !o.contains_key(k) {
            bad.push(format!("{k} missing"));
        }
    }
    let entity = o.get("default_entity_id").and_then(|e| e.as_str()).unwrap_or("");
    let slug_ok = entity
        .strip_prefix(&format!("{}.", parts[1]))
        .is_some_and(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'));
    if !slug_ok {
        bad.push(format!("default_entity_id {entity:?} is not {}.<lower-case object id>", parts[1]));
    }
    if v["device"]["identifiers"].as_array().is_none_or(|a| a.is_empty()) || !v["device"]["name"].is_string() {
        bad.push("device without identifiers or name".into());
    }
    if !v["origin"]["name"].is_string() {
        bad.push("origin without name".into());
    }
    if parts[1] == "event"
        && v["event_types"].as_array().is_none_or(|a| a.is_empty() || !a.iter().all(|t| t.is_string()))
    {
        bad.push("an event entity without event_types".into());
    }
    bad
}

#[test]
fn every_discovery_message_follows_home_assistants_rules() {
    // A client id HA's topics do not allow (a hostname with a dot) and a label with a space.
    let c = MqttConfig { client_id: "Rock.5B".into(), ..cfg() };
    assert_eq!(c.node_id(), "Rock_5B");
    let mut t = Translator::new(c);
    let mut out = vec![];
    let wall = |ns: u64| ns / 1_000_000;
    t.line(&frame("Front-Door", 1, &["person", "traffic light"]), wall, &mut out);
    let announced: Vec<&Msg> =
        out.iter().filter_map(|o| if let Out::Announce(m) = o { Some(m) } else { None }).collect();
    assert_eq!(announced.len(), 4, "fps, events and two occupancy sensors: {announced:?}");
    for m in &announced {
        assert_eq!(ha_discovery_violations(m), Vec::<String>::new(), "{} {}", m.topic, m.text());
        assert!(!m.text().contains("\"object_id\""), "the deprecated object_id: {}", m.text());
    }
    let topics: Vec<&str> = announced.iter().map(|m| m.topic.as_str()).collect();
    assert!(topics.contains(&"homeassistant/binary_sensor/Rock_5B/Front-Door_traffic_light/config"), "{topics:?}");
    let occupancy: serde_json::Value = serde_json::from_slice(&announced[2].payload).unwrap();
    assert_eq!(occupancy["default_entity_id"], "binary_sensor.zcpipe_front_door_person_occupancy");
    // The rules catch what HA would ignore or refuse.
    let broken = Msg {
        topic: "homeassistant/sensor/Rock.5B/x/config".into(),
        payload: br#"{"object_id":"x","state_topic":"t"}"#.to_vec(),
        retain: true,
    };
    let v = ha_discovery_violations(&broken);
    assert!(v.iter().any(|e| e.starts_with("topic")) && v.iter().any(|e| e.contains("object_id")), "{v:?}");
    let image_with_state = Msg {
        topic: "homeassistant/image/n/x/config".into(),
        payload: br#"{"state_topic":"t","unique_id":"u"}"#.to_vec(),
        retain: true,
    };
    let v = ha_discovery_violations(&image_with_state);
    assert!(v.iter().any(|e| e.contains("state_topic")) && v.iter().any(|e| e == "image_topic missing"), "{v:?}");
}

#[test]
fn a_snapshot_is_an_image_entity_whose_picture_is_retained() {
    let c = MqttConfig { client_id: "Rock.5B".into(), ..cfg() };
    let jpeg = vec![0xff, 0xd8, 0xff, 0xe0, 0, 0x10, b'J', b'F', 0xff, 0xd9];
    let first = c.snapshot_msgs("Front-Door", jpeg.clone(), true);
    let Out::Announce(d) = &first[0] else { panic!("{first:?}") };
    assert_eq!(d.topic, "homeassistant/image/Rock_5B/Front-Door_snapshot/config");
    assert_eq!(ha_discovery_violations(d), Vec::<String>::new(), "{}", d.text());
    let v: serde_json::Value = serde_json::from_slice(&d.payload).unwrap();
    assert_eq!(
        (v["image_topic"].as_str(), v["content_type"].as_str(), v["default_entity_id"].as_str()),
        (Some("zcpipe/Front-Door/snapshot"), Some("image/jpeg"), Some("image.zcpipe_front_door_snapshot"))
    );
    // The picture is the retained state of its topic, its bytes untouched.
    let Out::State(p) = &first[1] else { panic!("{first:?}") };
    assert_eq!((p.topic.as_str(), &p.payload, p.retain), ("zcpipe/Front-Door/snapshot", &jpeg, true));
    assert_eq!(first.len(), 2);
    // Later pictures: the state alone.
    let later = c.snapshot_msgs("Front-Door", jpeg.clone(), false);
    assert!(matches!(&later[..], [Out::State(m)] if m.payload == jpeg), "{later:?}");
    // Without discovery, no entity but the picture all the same.
    let c = MqttConfig { discovery_prefix: None, ..cfg() };
    assert!(matches!(&c.snapshot_msgs("cam0", jpeg, true)[..], [Out::State(_)]));
}

/// An event line of camera `front`.
fn event(kind: &str, track_id: u64, label: &str) -> SocketLine {
    SocketLine::Event(EventJson {
        event: kind.into(),
        camera: "front".into(),
        track_id,
        label: label.into(),
        class_id: 0,
        score: 0.8,
        zone: None,
        first_seen_ns: 1,
        last_seen_ns: 2,
        timestamp_ns: 3,
        seq: Some(1),
        bbox: [1.0, 2.0, 3.0, 4.0],
        ..Default::default()
    })
}

#[test]
fn with_a_tracker_occupancy_is_live_tracks_not_a_frames_detections() {
    let mut t = Translator::new(cfg()).counting_tracks(true);
    let wall = |ns: u64| ns / 1_000_000;
    let states = |out: &[Out]| -> Vec<(String, String)> {
        out.iter()
            .filter_map(|o| if let Out::State(m) = o { Some((m.topic.clone(), m.text().into_owned())) } else { None })
            .collect()
    };
    let mut out = vec![];
    // Detected before its track is confirmed, then missed, then seen again: no count yet.
    for labels in [&["person"][..], &[], &["person"]] {
        t.line(&frame("front", 1, labels), wall, &mut out);
    }
    assert_eq!(states(&out), [("zcpipe/front/available".to_string(), "online".to_string())], "no count, the camera up");
    out.clear();
    t.line(&event("new", 1, "person"), wall, &mut out);
    assert_eq!(states(&out), [("zcpipe/front/person".to_string(), "1".to_string())]);
    assert!(out.iter().any(|o| matches!(o, Out::Announce(m) if m.topic.ends_with("/front_person/config"))));
    // A second person, frames that miss both, a zone event: counts follow the tracks only.
    out.clear();
    t.line(&event("new", 2, "person"), wall, &mut out);
    for _ in 0..5 {
        t.line(&frame("front", 2, &[]), wall, &mut out);
    }
    t.line(&event("entered_zone", 2, "person"), wall, &mut out);
    assert_eq!(states(&out), [("zcpipe/front/person".to_string(), "2".to_string())]);
    out.clear();
    t.line(&event("end", 1, "person"), wall, &mut out);
    t.line(&event("end", 2, "person"), wall, &mut out);
    assert_eq!(
        states(&out),
        [("zcpipe/front/person".to_string(), "1".to_string()), ("zcpipe/front/person".to_string(), "0".to_string())],
        "one on/off per presence"
    );
}

#[test]
fn a_queued_state_keeps_only_its_newest_value() {
    let mut q = DropOldest::new(10);
    let m =
        |topic: &str, payload: &str| Msg { topic: topic.into(), payload: payload.as_bytes().to_vec(), retain: true };
    q.push(m("zcpipe/front/person", "1"));
    q.push(m("zcpipe/front/detections", "{}"));
    // What the bridge does with a new state while the broker is away.
    let newer = m("zcpipe/front/person", "0");
    q.remove_if(|x| x.topic == newer.topic);
    q.push(newer);
    let left: Vec<(String, String)> =
        std::iter::from_fn(|| q.pop()).map(|x| (x.topic.clone(), x.text().into_owned())).collect();
    assert_eq!(
        left,
        [
            ("zcpipe/front/detections".to_string(), "{}".to_string()),
            ("zcpipe/front/person".to_string(), "0".to_string())
        ]
    );
    assert_eq!(q.dropped(), 0, "a replaced state is not a drop");
}

#[test]
fn line_crossings_are_counters_with_a_sensor_each() {
    use zcpipe_core::schema::CrossingsJson;
    let mut t = Translator::new(cfg()).counting_tracks(true);
    let with = |seq: u64, out_n: u64| {
        let SocketLine::Frame(mut f) = frame("front", seq, &[]) else { unreachable!() };
        f.lines =
            Some([("exit".to_string(), [("person".to_string(), CrossingsJson { into: 0, out: out_n })].into())].into());
        SocketLine::Frame(f)
    };
    let mut out = vec![];
    t.line(&with(0, 1), |_| 7, &mut out);
    let states: Vec<(String, String)> = out
        .iter()
        .filter_map(|o| match o {
            Out::State(m) => Some((m.topic.clone(), String::from_utf8_lossy(&m.payload).to_string())),
            _ => None,
        })
        .collect();
    assert_eq!(
        states,
        [
            ("zcpipe/front/available".to_string(), "online".to_string()),
            ("zcpipe/front/lines/exit/person/in".to_string(), "0".to_string()),
            ("zcpipe/front/lines/exit/person/out".to_string(), "1".to_string())
        ]
    );
    let sensor = out
        .iter()
        .find_map(|o| match o {
            Out::Announce(m) if m.topic == "homeassistant/sensor/zcpipe-box/front_L_exit_L_person_out/config" => {
                Some(serde_json::from_slice::<serde_json::Value>(&m.payload).unwrap())
            }
            _ => None,
        })
        .expect("a sensor for exits");
    assert_eq!(sensor["state_topic"], "zcpipe/front/lines/exit/person/out");
    assert_eq!(sensor["state_class"], "total_increasing");
    // The same counts again: nothing; one more out: that counter only, no new sensor.
    let mut out = vec![];
    t.line(&with(1, 1), |_| 8, &mut out);
    assert!(!out.iter().any(|o| matches!(o, Out::State(_) | Out::Announce(_))), "{out:?}");
    t.line(&with(2, 2), |_| 9, &mut out);
    let states: Vec<&Out> = out.iter().filter(|o| matches!(o, Out::State(_) | Out::Announce(_))).collect();
    assert!(
        matches!(states[..], [Out::State(m)] if m.topic.ends_with("/out") && m.payload == b"2" && m.retain),
        "{states:?}"
    );
}

#[test]
fn a_camera_removed_goes_unavailable_with_its_counts_at_zero_and_comes_back() {
    let mut t = Translator::new(cfg()).counting_tracks(true);
    let wall = |ns: u64| ns / 1_000_000;
    let mut out = vec![];
    t.line(&frame("front", 1, &["person"]), wall, &mut out);
    t.line(&event("new", 1, "person"), wall, &mut out);
    out.clear();
    t.camera_removed("front", &mut out);
    let states: Vec<(String, String, bool)> = out
        .iter()
        .map(|o| match o {
            Out::State(m) => (m.topic.clone(), m.text().into_owned(), m.retain),
            other => panic!("only states: {other:?}"),
        })
        .collect();
    assert_eq!(
        states,
        [
            ("zcpipe/front/person".to_string(), "0".to_string(), true),
            ("zcpipe/front/available".to_string(), "offline".to_string(), true)
        ]
    );
    out.clear();
    t.camera_removed("nosuch", &mut out);
    assert!(out.is_empty(), "a camera never seen: nothing");
    // Its last track's end, sent after: on its events topic, nothing remembered of it.
    t.line(&event("end", 1, "person"), wall, &mut out);
    assert!(out.iter().all(|o| matches!(o, Out::Once(m) if m.topic == "zcpipe/front/events")), "{out:?}");
    out.clear();
    t.line(&frame("front", 2, &[]), wall, &mut out);
    assert!(
        out.iter().any(|o| matches!(o, Out::State(m) if m.topic == "zcpipe/front/available" && m.text() == "online")),
        "back: online again"
    );
}

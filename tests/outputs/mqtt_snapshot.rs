//! Snapshots over MQTT against a real broker (as in [`crate::mqtt`]): each picture is the
//! camera's Home Assistant image, and each picture of a new object is announced with the id
//! of its `new` event.

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{wait_for, zcpipe_run};
use serde_json::Value;

use crate::mqtt::{have_mosquitto, retained, summary, Broker, Sub};

/// With snapshots on, each picture is also the camera's Home Assistant `image` entity: its
/// discovery config, and the JPEG itself retained on `P/<camera>/snapshot`, byte for byte the
/// newest file in the snapshot folder.
#[test]
fn each_snapshot_is_the_cameras_image_in_home_assistant() {
    if !have_mosquitto() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let b = Broker::start(dir.path(), None);
    let snaps = dir.path().join("snaps");
    let sub = Sub::start_on(&b, None, &["zcpipe-mqtt-snap/cam0/events"]);
    let out = zcpipe_run(dir.path())
        .args(["--instance", "mqtt-snap", "--no-print", "--frames", "90", "--fps", "max", "--ring-policy", "block"])
        .args(["--snapshot-dir", snaps.to_str().unwrap(), "--snapshot-every", "1"])
        .args(["--mqtt", &b.url(), "--mqtt-client-id", "zc-test"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let mut files: Vec<PathBuf> = std::fs::read_dir(snaps.join("cam0")).unwrap().flatten().map(|e| e.path()).collect();
    files.sort();
    let newest = files.last().unwrap_or_else(|| panic!("no snapshot written: {stderr}"));
    let picture = retained(&b, "zcpipe-mqtt-snap/cam0/snapshot");
    assert_eq!(picture, std::fs::read(newest).unwrap(), "the retained picture is {}", newest.display());
    let img = image::load_from_memory_with_format(&picture, image::ImageFormat::Jpeg).unwrap();
    assert_eq!((img.width(), img.height()), (768, 432));

    let config: Value =
        serde_json::from_slice(&retained(&b, "homeassistant/image/zc-test/cam0_snapshot/config")).unwrap();
    assert_eq!(
        (config["image_topic"].as_str(), config["content_type"].as_str(), config["unique_id"].as_str()),
        (Some("zcpipe-mqtt-snap/cam0/snapshot"), Some("image/jpeg"), Some("zc-test_cam0_snapshot")),
        "{config}"
    );
    assert!(config.get("state_topic").is_none(), "{config}");

    let s = summary(dir.path());
    let (m, written) =
        (&s["stages"]["publish"]["extra"]["mqtt"], &s["stages"]["publish"]["extra"]["snapshots"]["written"]);
    assert_eq!(m["pictures"], *written, "every snapshot written went to the broker too: {m}");
    assert_eq!((m["pictures_too_big"].as_u64(), m["dropped"].as_u64()), (Some(0), Some(0)), "{m}");
    assert!(stderr.contains("snapshots for Home Assistant"), "{stderr}");
    let notices = snapshot_notices(&sub, &snaps.join("cam0"), &files);
    println!(
        "EVIDENCE mqtt image: {} snapshots, the newest {} bytes retained; {notices} notices of new objects, each naming its new event",
        written,
        picture.len()
    );
}

/// Every picture of a new object (`UNIX_MS-new-LABEL-ID.jpg` in `folder`) was announced on the
/// events topic, once, naming its `new` event's id and its file; returns how many.
fn snapshot_notices(sub: &Sub, folder: &Path, files: &[PathBuf]) -> usize {
    let new_files: BTreeSet<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .filter(|n| n[14..].starts_with("new-"))
        .collect();
    let topic = "zcpipe-mqtt-snap/cam0/events";
    // The run has ended; a wait for the subscriber to read its last messages, not a speed goal.
    wait_for(Duration::from_secs(10), || {
        sub.payloads(topic).iter().filter(|p| p.contains(r#""event":"snapshot""#)).count() >= new_files.len()
    });
    let events: Vec<Value> = sub.payloads(topic).iter().map(|p| serde_json::from_str(p).unwrap()).collect();
    let new_ids: BTreeSet<&str> =
        events.iter().filter(|e| e["event"] == "new").map(|e| e["event_id"].as_str().unwrap()).collect();
    let notices: Vec<&Value> = events.iter().filter(|e| e["event"] == "snapshot").collect();
    assert!(!new_ids.is_empty(), "the clip makes new objects: {events:?}");
    let mut named = BTreeSet::new();
    for n in &notices {
        let of = n["of_event"].as_str().unwrap();
        assert!(new_ids.contains(of), "{n} names no new event of {new_ids:?}");
        assert_eq!(n["event_id"].as_str().unwrap(), of.replace("/new/", "/snapshot/"), "{n}");
        let file = n["file"].as_str().unwrap();
        assert!(folder.join(file).is_file(), "{n}");
        assert!(file.ends_with(&format!("-{}.jpg", n["track_id"])), "{n}");
        assert!(named.insert(file.to_string()), "one notice per picture: {n}");
    }
    assert_eq!(named, new_files, "every picture of a new object, and only those, announced");
    notices.len()
}

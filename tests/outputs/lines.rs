//! A line's crossings end to end: the bundled clip's first person walks out through a line
//! at x = 600 (drawn top to bottom, so walking right is `out`); the count reaches the frame
//! lines, the event, the summary, `/metrics` of the web view and MQTT (a real mosquitto),
//! with its Home Assistant sensor. Masks and filters drop detections, counted.

use std::time::Duration;

use serde_json::Value;

use crate::common::{wait_for, zcpipe_run};
use crate::http::{get, parse_prometheus, sample};
use crate::mqtt::{free_port, have_mosquitto, Broker, Sub};

#[test]
fn a_lines_count_reaches_the_socket_metrics_and_mqtt() {
    if !have_mosquitto() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let b = Broker::start(dir.path(), None);
    let sub = Sub::start(&b, None);
    let port = free_port();
    let child = zcpipe_run(dir.path())
        .args(["--instance", "lines-e2e", "--frames", "250", "--fps", "max", "--ring-policy", "block", "--json"])
        .args(["--line", "exit=600,200,600,432", "--http", &format!("127.0.0.1:{port}")])
        .args(["--mqtt", &b.url(), "--mqtt-client-id", "zc-lines"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // /metrics while the run goes on: the crossing appears there (about frame 191).
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let series = [("camera", "cam0"), ("line", "exit"), ("label", "person"), ("direction", "out")];
    let mut metric = None;
    wait_for(Duration::from_secs(120), || {
        let Ok(s) = std::net::TcpStream::connect(addr) else { return false };
        drop(s);
        let (code, _, text) = get(addr, "/metrics");
        let samples = parse_prometheus(&String::from_utf8_lossy(&text));
        let has = code == 200 && samples.iter().any(|s| s.0 == "zcpipe_line_crossings_total");
        if has {
            metric = Some(sample(&samples, "zcpipe_line_crossings_total", &series));
        }
        metric == Some(1.0)
    });
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(metric, Some(1.0), "the crossing on /metrics: {stderr}");
    let lines: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let crossed: Vec<&Value> = lines.iter().filter(|v| v["event"] == "crossed_line").collect();
    assert_eq!(crossed.len(), 1, "{crossed:?}");
    let e = crossed[0];
    assert_eq!(
        (&e["line"], &e["direction"], &e["label"], &e["track_id"]),
        (&"exit".into(), &"out".into(), &"person".into(), &1.into())
    );
    // Hand-made truth: the first person's feet cross x = 600 at frame 190 (seq 190, MOT 191);
    // the tracker counts once the point is past the band, within a few frames.
    let seq = e["seq"].as_u64().unwrap();
    assert!((190..=194).contains(&seq), "crossed at frame {seq}");
    let last = lines.iter().rev().find(|v| v["type"] == "frame").unwrap();
    assert_eq!(last["lines"], serde_json::json!({"exit": {"person": {"in": 0, "out": 1}}}));
    assert!(stderr.contains("  line cam0/exit: 0 in, 1 out (person 0 in, 1 out)"), "{stderr}");
    // MQTT: the counters (retained) and the sensor.
    let topic = "zcpipe-lines-e2e/cam0/lines/exit/person/out";
    assert!(
        wait_for(Duration::from_secs(10), || sub.payloads(topic).last().is_some_and(|p| p == "1")),
        "{:?}",
        sub.msgs()
    );
    assert_eq!(sub.payloads("zcpipe-lines-e2e/cam0/lines/exit/person/in"), ["0"]);
    let config: Vec<Value> = sub
        .payloads("homeassistant/sensor/zc-lines/cam0_L_exit_L_person_out/config")
        .iter()
        .map(|p| serde_json::from_str(p).unwrap())
        .collect();
    assert!(
        config.first().is_some_and(|c| c["state_topic"] == topic && c["state_class"] == "total_increasing"),
        "{config:?}"
    );
    println!("EVIDENCE lines: person #1 crossed exit out at frame {seq}; /metrics {metric:?}; MQTT {topic} = 1");
}

#[test]
fn masks_and_filters_drop_detections_before_tracking_counted() {
    let dir = tempfile::tempdir().unwrap();
    // The whole picture masked for 30 frames: nothing reaches the tracker.
    let out = zcpipe_run(dir.path())
        .args(["--instance", "mask-all", "--frames", "120", "--fps", "max", "--ring-policy", "block", "--json"])
        .args(["--mask", "0,0,768,0,768,432,0,432", "--filter", "persn:min_score=0.9"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let masked: u64 = lines.iter().filter_map(|v| v["dropped"]["masked"].as_u64()).sum();
    assert!(masked > 10, "the clip's person masked: {masked}");
    assert!(lines.iter().filter(|v| v["type"] == "frame").all(|v| v["detections"].as_array().unwrap().is_empty()));
    assert!(!lines.iter().any(|v| v["type"] == "event"), "no track");
    // The filter of a label the model lacks: left out, said once.
    let said: Vec<&str> = stderr.lines().filter(|l| l.contains("--filter persn")).collect();
    assert_eq!(said.len(), 1, "{stderr}");
    assert!(
        said[0].contains("camera cam0's model has no label \"persn\"") && said[0].contains("the filter is left out")
    );
    assert!(stderr.contains(&format!("dropped before tracking: {masked} masked, 0 filtered")), "{stderr}");
    // A filter that keeps only big people: the bundled clip's person (about 200x400) passes
    // min_area 20000, not 200000.
    for (min, kept) in [("20000", true), ("200000", false)] {
        let out = zcpipe_run(dir.path())
            .args(["--instance", "filter-area", "--frames", "120", "--fps", "max", "--ring-policy", "block", "--json"])
            .args(["--filter", &format!("person:min_area={min}")])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let people =
            text.lines().filter(|l| l.contains("\"type\":\"frame\"") && l.contains("\"label\":\"person\"")).count();
        assert_eq!(people > 10, kept, "min_area={min}: {people} frames with a person");
    }
}

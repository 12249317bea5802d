//! `zcpipe fleet` against a real broker (no namespaces: in `make test`): bad input is one
//! line each in its log and nothing stops, two boards with one id are found, refused
//! credentials are one line without the password, and the Prometheus configuration lists the
//! boards from their retained status.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;

use crate::common::{wait_for, zcpipe};
use crate::fleet::{fleet_api, Bg};
use crate::mqtt::{free_port, have_mosquitto, Broker};

fn port_of(b: &Broker) -> String {
    b.url().rsplit(':').next().unwrap().to_string()
}

fn publish(b: &Broker, topic: &str, payload: &str, retain: bool) {
    let mut c = Command::new("mosquitto_pub");
    c.args(["-h", "127.0.0.1", "-p", &port_of(b), "-q", "1", "-t", topic, "-m", payload]);
    if retain {
        c.arg("-r");
    }
    assert!(c.status().unwrap().success(), "mosquitto_pub {topic}");
}

fn status(board: &str, session: &str, web: Option<&str>) -> String {
    json!({"v": 1, "board": board, "session": session, "version": "0.1.0", "prefix": format!("zcpipe/{board}"),
        "started_ms": 1, "time_ms": 2, "uptime_s": 1, "every_s": 60, "cameras": {"cam0": {"state": "streaming", "fps": 5.0,
        "frames": 10, "events": 0, "infer_ms": 1.0, "counts": {}}}, "npu_busy_pct": [], "last_event_ms": null, "web": web,
        "mqtt": {}})
    .to_string()
}

fn log_of(dir: &std::path::Path) -> String {
    std::fs::read_to_string(dir.join("fleet.log")).unwrap_or_default()
}

#[test]
fn bad_input_is_one_line_each_and_the_fleet_view_goes_on() {
    if !have_mosquitto() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let b = Broker::start(dir.path(), None);
    let http = free_port();
    let mut f = zcpipe();
    f.args(["fleet", "--broker", &b.url(), "--http", &format!("127.0.0.1:{http}")]);
    let mut fleet = Bg::spawn(f, &dir.path().join("fleet.log"));
    assert!(
        wait_for(Duration::from_secs(30), || log_of(dir.path()).contains("connected to")),
        "{}",
        log_of(dir.path())
    );
    publish(&b, "zcpipe/bx/status", "{not json", false);
    publish(&b, "zcpipe/bx/status", &json!({"v": 9, "board": "bx"}).to_string(), false);
    publish(
        &b,
        "zcpipe/b1/cam0/events",
        &json!({"v": 1, "board": "b2", "event_id": "x", "camera": "cam0", "event": "new", "time_ms": 1}).to_string(),
        false,
    );
    publish(&b, "zcpipe/b1/available", "maybe", false);
    for s in ["s1", "s2", "s1", "s2"] {
        publish(&b, "zcpipe/twin/status", &status("twin", s, None), false);
    }
    publish(&b, "zcpipe/ok/status", &status("ok", "s", Some("http://10.0.0.9:8080/")), true);
    assert!(
        wait_for(Duration::from_secs(30), || {
            let a = fleet_api(http);
            a["boards"].as_array().is_some_and(|b| b.iter().any(|b| b["id"] == "ok")) && a["clashes"] == 1
        }),
        "{}",
        fleet_api(http)
    );
    let log = log_of(dir.path());
    for (line, n) in [
        ("zcpipe/bx/status: not a zcpipe status (key must be a string", 1),
        ("zcpipe/bx/status: message version 9, this fleet view reads version 1: not taken", 1),
        ("zcpipe/b1/cam0/events: says board \"b2\", which is not the board of its topic", 1),
        ("zcpipe/b1/available: \"maybe\" is not online or offline: not taken", 1),
        ("two boards use the id twin (sessions s2 and s1 both publish): give each board its own --board-id", 1),
    ] {
        assert_eq!(log.matches(line).count(), n, "{line}: {log}");
    }
    let a = fleet_api(http);
    assert_eq!(a["rejected"], json!({"malformed": 2, "version": 1, "wrong_board": 1}), "{a}");
    assert_eq!(a["boards"].as_array().unwrap().len(), 2, "ok and twin only: {a}");
    // The Prometheus configuration from the retained status (a second client of the broker).
    let out = zcpipe().args(["fleet", "--broker", &b.url(), "--prometheus-config", "--wait", "2"]).output().unwrap();
    let yaml = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        yaml.contains("      - targets: [\"10.0.0.9:8080\"]\n        labels:\n          board: \"ok\"\n"),
        "{yaml}"
    );
    assert!(fleet.0.try_wait().unwrap().is_none(), "the fleet view still runs: {log}");
    assert!(fleet.stop(), "it ends cleanly on SIGTERM: {}", log_of(dir.path()));
}

#[test]
fn refused_credentials_are_one_line_without_the_password() {
    if !have_mosquitto() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let b = Broker::start(dir.path(), Some(("fleet", "right-one")));
    let mut f = zcpipe();
    f.args([
        "fleet",
        "--broker",
        &b.url().replace("mqtt://", "mqtt://fleet@"),
        "--http",
        &format!("127.0.0.1:{}", free_port()),
    ])
    .env("ZCPIPE_MQTT_PASSWORD", "hunter2-wrong")
    .stdout(Stdio::null());
    let mut fleet = Bg::spawn(f, &dir.path().join("fleet.log"));
    let says = "refused the credentials of user fleet: fix the user in --broker and the password in $ZCPIPE_MQTT_PASSWORD; retrying";
    assert!(wait_for(Duration::from_secs(30), || log_of(dir.path()).contains(says)), "{}", log_of(dir.path()));
    std::thread::sleep(Duration::from_secs(3));
    let log = log_of(dir.path());
    assert_eq!(log.matches(says).count(), 1, "said once while it retries: {log}");
    assert!(!log.contains("hunter2"), "{log}");
    assert!(fleet.stop(), "{log}");
}

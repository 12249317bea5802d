//! The MQTT bridge against a real broker: each test starts its own mosquitto (the Debian
//! package, installed by scripts/setup-test.sh) on a free port of 127.0.0.1 with a config in its
//! own temp dir, subscribes with `mosquitto_sub`, and runs zcpipe with `--mqtt`. Skipped
//! (said on stderr) only where mosquitto is not installed.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{stage_pid, wait_for, zcpipe_run};
use serde_json::Value;

/// Whether mosquitto and its clients are installed; says so when not.
pub(crate) fn have_mosquitto() -> bool {
    let ok = ["mosquitto", "mosquitto_sub", "mosquitto_pub", "mosquitto_passwd"].iter().all(|b| {
        std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).chain([PathBuf::from("/usr/sbin")]).any(|d| d.join(b).is_file()))
    });
    if !ok {
        eprintln!("SKIPPED: mosquitto or mosquitto-clients not installed (scripts/setup-test.sh installs them)");
    }
    ok
}

/// `mosquitto` wherever it is (Debian puts it in /usr/sbin, not on a user's PATH).
pub(crate) fn mosquitto_bin() -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join("mosquitto")).find(|f| f.is_file()))
        .unwrap_or_else(|| PathBuf::from("/usr/sbin/mosquitto"))
}

/// A port nobody listens on now.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A mosquitto of this test (killed on drop).
pub(crate) struct Broker {
    child: Option<Child>,
    port: u16,
    conf: PathBuf,
    log: PathBuf,
}

impl Broker {
    /// Starts mosquitto on a free port with a config in `dir`; with `user`, only that user
    /// with that password may connect.
    pub(crate) fn start(dir: &Path, user: Option<(&str, &str)>) -> Broker {
        let port = free_port();
        let conf = dir.join("mosquitto.conf");
        let mut text = format!("listener {port} 127.0.0.1\npersistence false\nlog_dest stderr\n");
        // As root, mosquitto would otherwise switch to the user `mosquitto`, who cannot read this temp dir.
        if nix::unistd::geteuid().is_root() {
            text += "user root\n";
        }
        match user {
            Some((u, p)) => {
                let pw = dir.join("passwords");
                let st = Command::new("mosquitto_passwd").arg("-b").arg("-c").arg(&pw).args([u, p]).status().unwrap();
                assert!(st.success(), "mosquitto_passwd: {st}");
                text += &format!("allow_anonymous false\npassword_file {}\n", pw.display());
            }
            None => text += "allow_anonymous true\n",
        }
        std::fs::write(&conf, text).unwrap();
        let mut b = Broker { child: None, port, conf, log: dir.join("mosquitto.log") };
        b.restart();
        b
    }

    /// Starts it (again) on its port.
    fn restart(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        self.child = Some(
            Command::new(mosquitto_bin())
                .arg("-c")
                .arg(&self.conf)
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap(),
        );
        let port = self.port;
        assert!(
            wait_for(Duration::from_secs(10), || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()),
            "mosquitto did not listen on {port}: {}",
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
    }

    /// Stops it (SIGKILL) and waits for it.
    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("mqtt://127.0.0.1:{}", self.port)
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What a `mosquitto_sub -v` printed: each message's topic and payload, with when it came.
pub(crate) type Gathered = Arc<Mutex<Vec<(std::time::Instant, String, String)>>>;

/// Reads `out`, a `mosquitto_sub -v`'s output, on a thread of its own.
pub(crate) fn gather(out: std::process::ChildStdout) -> Gathered {
    let got: Gathered = Arc::new(Mutex::new(vec![]));
    let g = got.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(|l| l.ok()) {
            let (t, p) = line.split_once(' ').unwrap_or((line.as_str(), ""));
            g.lock().unwrap().push((std::time::Instant::now(), t.to_string(), p.to_string()));
        }
    });
    got
}

/// A `mosquitto_sub` on every topic (it reconnects and subscribes again by itself), its
/// messages gathered as `(topic, payload)` by a thread.
pub(crate) struct Sub {
    child: Child,
    got: Gathered,
}

impl Sub {
    /// Subscribes to `#` on `b` (as `user`), and waits until a probe message comes through.
    pub(crate) fn start(b: &Broker, user: Option<(&str, &str)>) -> Sub {
        Sub::start_on(b, user, &["#"])
    }

    /// Subscribes to `topics` (and the probe's) on `b`, as [`Sub::start`]. Messages are
    /// read as lines of text: a subscriber that gets pictures names the topics it wants.
    pub(crate) fn start_on(b: &Broker, user: Option<(&str, &str)>, topics: &[&str]) -> Sub {
        let auth: Vec<String> =
            user.map(|(u, p)| vec!["-u".into(), u.into(), "-P".into(), p.into()]).unwrap_or_default();
        let mut child = Command::new("mosquitto_sub")
            .args(["-h", "127.0.0.1", "-p", &b.port.to_string(), "-v"])
            .args(topics.iter().chain((!topics.contains(&"#")).then_some(&"probe")).flat_map(|t| ["-t", t]))
            .args(&auth)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let got = gather(child.stdout.take().unwrap());
        let s = Sub { child, got };
        // A readiness wait, not a speed goal: generous for a loaded machine.
        let ready = wait_for(Duration::from_secs(30), || {
            let _ = Command::new("mosquitto_pub")
                .args(["-h", "127.0.0.1", "-p", &b.port.to_string(), "-t", "probe", "-m", "x"])
                .args(&auth)
                .status();
            s.seen("probe", |_| true)
        });
        assert!(ready, "mosquitto_sub got no probe");
        s
    }

    /// The messages so far, without the probes.
    pub(crate) fn msgs(&self) -> Vec<(String, String)> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, t, _)| t != "probe")
            .map(|(_, t, p)| (t.clone(), p.clone()))
            .collect()
    }

    /// Whether a message on `topic` whose payload passes `f` came.
    fn seen(&self, topic: &str, f: impl Fn(&str) -> bool) -> bool {
        self.got.lock().unwrap().iter().any(|(_, t, p)| t == topic && f(p))
    }

    /// The payloads of `topic`, in order.
    pub(crate) fn payloads(&self, topic: &str) -> Vec<String> {
        self.msgs().into_iter().filter(|(t, _)| t == topic).map(|(_, p)| p).collect()
    }
}

impl Drop for Sub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `zcpipe run` in the background: its stderr gathered by a thread, line by line.
struct Running {
    child: Child,
    err: Arc<Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    fn start(dir: &Path, args: &[&str]) -> Running {
        let mut child = zcpipe_run(dir).args(args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        let pipe = child.stderr.take().unwrap();
        let err = Arc::new(Mutex::new(String::new()));
        let e = err.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(|l| l.ok()) {
                let mut s = e.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        Running { child, err, reader: Some(reader) }
    }

    fn stderr(&self) -> String {
        self.err.lock().unwrap().clone()
    }

    /// Stops the run (SIGINT); its stderr. It must end well.
    fn stop(mut self) -> String {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), nix::sys::signal::Signal::SIGINT)
            .unwrap();
        let st = self.child.wait().unwrap();
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
        let err = self.stderr();
        assert!(st.success(), "{st}: {err}");
        err
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub(crate) fn summary(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap()
}

/// A live source without a model: frames flow at once and never end.
const TESTSRC: [&str; 6] = ["--source", "testsrc:320x240@30", "--infer", "none", "--stats-interval", "0"];

/// (a) The bundled clip, 40 frames: the topics, the detections' schema, one detections message
/// per frame line with detections on the socket, the counts as the tracks give them (one rise
/// and one fall per track), discovery configs, events, stats, availability.
#[test]
fn a_run_publishes_detections_counts_events_and_discovery() {
    if !have_mosquitto() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let b = Broker::start(dir.path(), None);
    let sub = Sub::start(&b, None);
    let out = zcpipe_run(dir.path())
        .args([
            "--instance",
            "mqtt-run",
            "--frames",
            "40",
            "--fps",
            "max",
            "--ring-policy",
            "block",
            "--scaler",
            "cpu",
            "--json",
            "--score-threshold",
            "0.2",
            "--track-high",
            "0.1",
        ])
        .args(["--mqtt", &b.url(), "--mqtt-client-id", "zc-test", "--mqtt-stats-interval", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // The clean end's `offline` is the last message: everything before it has come.
    assert!(
        wait_for(Duration::from_secs(10), || sub
            .payloads("zcpipe-mqtt-run/available")
            .last()
            .is_some_and(|p| p == "offline")),
        "no offline at the end: {:?}",
        sub.msgs()
    );
    let msgs = sub.msgs();
    // The socket's lines (`--json` prints the lines the socket's clients get).
    let lines: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let frames: Vec<&Value> = lines.iter().filter(|v| v["type"] == "frame").collect();
    assert_eq!(frames.len(), 40);
    let with_dets: Vec<u64> = frames
        .iter()
        .filter(|f| !f["detections"].as_array().unwrap().is_empty())
        .map(|f| f["seq"].as_u64().unwrap())
        .collect();
    assert!(!with_dets.is_empty(), "the clip has detections at 0.2");

    // Detections: one message per frame with detections, the frame's fields and time_ms.
    let dets: Vec<Value> =
        sub.payloads("zcpipe-mqtt-run/cam0/detections").iter().map(|p| serde_json::from_str(p).unwrap()).collect();
    assert_eq!(
        dets.iter().map(|d| d["seq"].as_u64().unwrap()).collect::<Vec<_>>(),
        with_dets,
        "one detections message per frame line with detections"
    );
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    for (d, f) in dets.iter().zip(frames.iter().filter(|f| !f["detections"].as_array().unwrap().is_empty())) {
        assert_eq!(d["camera"], "cam0");
        assert_eq!((d["width"].as_u64(), d["height"].as_u64()), (Some(768), Some(432)));
        assert_eq!(d["timestamp_ns"], f["timestamp_ns"]);
        assert_eq!(d["detections"], f["detections"], "the same detections as the socket's line");
        let t = d["time_ms"].as_u64().unwrap();
        assert!(t <= now_ms && t + 600_000 > now_ms, "time_ms {t} is the capture's wall-clock time (now {now_ms})");
        for x in d["detections"].as_array().unwrap() {
            assert!(
                x["class_id"].is_u64()
                    && x["label"].is_string()
                    && x["score"].is_f64()
                    && x["box"].as_array().unwrap().len() == 4,
                "{x}"
            );
        }
        assert!(d.get("type").is_none(), "{d}");
    }

    // Counts: for every label, its live confirmed tracks (0 when the last one ends).
    let expected = check_counts(&lines, &sub);

    // Discovery: an occupancy binary sensor per label seen, an fps sensor for the camera.
    check_discovery(&sub, &expected, &msgs);

    // Events: the tracker's, as on the socket.
    let events: Vec<&Value> = lines.iter().filter(|v| v["type"] == "event").collect();
    assert!(!events.is_empty(), "the tv (0.26) is a confirmed track with --track-high 0.1: new, then end");
    let mq: Vec<Value> =
        sub.payloads("zcpipe-mqtt-run/cam0/events").iter().map(|p| serde_json::from_str(p).unwrap()).collect();
    assert_eq!(mq.len(), events.len());
    for (m, e) in mq.iter().zip(&events) {
        assert_eq!((&m["event"], &m["track_id"], &m["label"]), (&e["event"], &e["track_id"], &e["label"]));
        assert!(m["time_ms"].is_u64());
        // Its stable id: board (the machine id's, without --board-id), camera, track, kind, time.
        let board = m["board"].as_str().unwrap();
        let id = format!("{board}/cam0/{}/{}/{}", e["track_id"], e["event"].as_str().unwrap(), m["time_ms"]);
        assert_eq!((m["v"].as_u64(), m["event_id"].as_str()), (Some(1), Some(id.as_str())), "{m}");
    }

    // Stats (the last at the end: every frame), availability, and nothing else.
    check_stats_and_topics(&sub, &expected, &msgs, with_dets.len());

    // The report and the summary line count what the broker got.
    let m = &summary(dir.path())["stages"]["publish"]["extra"]["mqtt"];
    assert_eq!(m["sent"].as_u64().unwrap() as usize, msgs.len(), "{m}");
    assert_eq!(
        (m["dropped"].as_u64(), m["reconnects"].as_u64(), m["connected"].as_bool()),
        (Some(0), Some(0), Some(true)),
        "{m}"
    );
    let line = format!("  mqtt: {}: {} messages sent, 0 dropped", b.url(), msgs.len());
    assert!(stderr.contains(&line), "{line}: {stderr}");
    assert!(
        stderr.contains(&format!(
            "-> {} (bytetrack tracks) + mqtt {}",
            dir.path().join("detections.sock").display(),
            b.url()
        )),
        "the plan names the broker: {stderr}"
    );
}

/// The count topics of a run whose socket lines are `lines`, a tracker on: a label's count
/// is its confirmed tracks alive, so it changes only at a track's `new` and `end` events,
/// never because one frame missed a detection: every track is one rise and one fall. Returns
/// the changes by label.
fn check_counts(lines: &[Value], sub: &Sub) -> BTreeMap<String, Vec<String>> {
    let mut expected: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut live: BTreeMap<String, u32> = BTreeMap::new();
    let mut tracks: BTreeMap<String, u32> = BTreeMap::new();
    for e in lines.iter().filter(|v| v["type"] == "event") {
        let label = e["label"].as_str().unwrap().replace(' ', "_");
        let n = live.entry(label.clone()).or_default();
        match e["event"].as_str().unwrap() {
            "new" => {
                *n += 1;
                *tracks.entry(label.clone()).or_default() += 1;
            }
            "end" => *n -= 1,
            _ => continue,
        }
        expected.entry(label).or_default().push(n.to_string());
    }
    assert!(live.values().all(|n| *n == 0), "every track ended with the stream: {live:?}");
    for (label, changes) in &expected {
        assert_eq!(&sub.payloads(&format!("zcpipe-mqtt-run/cam0/{label}")), changes, "count topic of {label}");
        assert_eq!(changes.len() as u32, 2 * tracks[label], "{label}: one rise and one fall per track: {changes:?}");
    }
    expected
}

/// The discovery configs: an occupancy binary sensor per label of `expected`, an fps sensor
/// for the camera.
fn check_discovery(sub: &Sub, expected: &BTreeMap<String, Vec<String>>, msgs: &[(String, String)]) {
    for label in expected.keys() {
        let topic = format!("homeassistant/binary_sensor/zc-test/cam0_{label}/config");
        let p = sub.payloads(&topic);
        assert_eq!(p.len(), 1, "{topic}: {msgs:?}");
        let v: Value = serde_json::from_str(&p[0]).unwrap();
        assert_eq!(v["unique_id"], format!("zc-test_cam0_{label}_occupancy"));
        assert_eq!(v["state_topic"], format!("zcpipe-mqtt-run/cam0/{label}"));
        assert_eq!(
            (v["availability"][0]["topic"].as_str(), v["availability"][1]["topic"].as_str()),
            (Some("zcpipe-mqtt-run/available"), Some("zcpipe-mqtt-run/cam0/available")),
            "available while the run is up and the camera part of it"
        );
        assert_eq!(v["availability_mode"], "all");
        assert_eq!(v["device_class"], "occupancy");
        assert_eq!(v["device"]["identifiers"][0], "zc-test_cam0");
        assert_eq!(v["device"]["manufacturer"], "zcpipe");
    }
    let fps: Value = serde_json::from_str(&sub.payloads("homeassistant/sensor/zc-test/cam0_fps/config")[0]).unwrap();
    assert_eq!(
        (fps["state_topic"].as_str(), fps["unique_id"].as_str()),
        (Some("zcpipe-mqtt-run/stats"), Some("zc-test_cam0_fps"))
    );
    assert_eq!(fps["value_template"], "{{ value_json.cameras['cam0'].fps }}");
    assert_eq!(sub.payloads("zcpipe-mqtt-run/cam0/available"), ["online"], "the camera is up from its first frame");
}

/// The last stats message, availability, and no topic but the known ones.
fn check_stats_and_topics(
    sub: &Sub,
    expected: &BTreeMap<String, Vec<String>>,
    msgs: &[(String, String)],
    with_dets: usize,
) {
    let stats: Value = serde_json::from_str(sub.payloads("zcpipe-mqtt-run/stats").last().unwrap()).unwrap();
    assert_eq!(stats["cameras"]["cam0"]["frames"], 40);
    assert_eq!(stats["cameras"]["cam0"]["detection_messages"].as_u64().unwrap() as usize, with_dets);
    assert_eq!(sub.payloads("zcpipe-mqtt-run/available"), ["online", "offline"]);
    // The board's status (retained, the last at the end): the same frames, and its events.
    let status: Value = serde_json::from_str(sub.payloads("zcpipe-mqtt-run/status").last().unwrap()).unwrap();
    assert_eq!((status["v"].as_u64(), &status["cameras"]["cam0"]["frames"]), (Some(1), &Value::from(40)));
    assert_eq!(
        status["cameras"]["cam0"]["events"].as_u64().unwrap() as usize,
        sub.payloads("zcpipe-mqtt-run/cam0/events").len()
    );
    let topics: BTreeSet<String> = msgs.iter().map(|(t, _)| t.clone()).collect();
    let mut known: BTreeSet<String> = [
        "zcpipe-mqtt-run/available",
        "zcpipe-mqtt-run/stats",
        "zcpipe-mqtt-run/status",
        "zcpipe-mqtt-run/cam0/available",
        "zcpipe-mqtt-run/cam0/detections",
        "zcpipe-mqtt-run/cam0/events",
        "homeassistant/sensor/zc-test/cam0_fps/config",
        "homeassistant/event/zc-test/cam0_events/config",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for l in expected.keys() {
        known.insert(format!("zcpipe-mqtt-run/cam0/{l}"));
        known.insert(format!("homeassistant/binary_sensor/zc-test/cam0_{l}/config"));
    }
    assert_eq!(topics, known);
    // As Home Assistant reads discovery today: default_entity_id, never object_id.
    for (t, p) in msgs.iter().filter(|(t, _)| t.starts_with("homeassistant/")) {
        assert!(p.contains("\"default_entity_id\":") && !p.contains("\"object_id\""), "{t}: {p}");
    }
}

/// (b) The last will: the publish stage killed with SIGKILL says nothing, and the broker
/// sends `offline` for it; the restarted stage says `online` again.
#[test]
fn a_killed_publish_stage_leaves_its_last_will() {
    if !have_mosquitto() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let b = Broker::start(dir.path(), None);
    let sub = Sub::start(&b, None);
    let run = Running::start(
        dir.path(),
        &[&TESTSRC[..], &["--instance", "mqtt-will", "--mqtt", &b.url(), "--mqtt-topic-prefix", "zcpipe"]].concat(),
    );
    assert!(
        wait_for(Duration::from_secs(60), || sub.seen("zcpipe/available", |p| p == "online")),
        "never online: {}",
        run.stderr()
    );
    // The bridge connects during the publish stage's set-up; a stage killed before its set-up
    // is done stops the run instead of being restarted, so wait until it is set up.
    assert!(
        wait_for(Duration::from_secs(60), || run.stderr().contains("zcpipe publish: publishing")),
        "publish never set up: {}",
        run.stderr()
    );
    let pid = stage_pid(dir.path(), "publish").unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    assert!(
        wait_for(Duration::from_secs(30), || sub
            .payloads("zcpipe/available")
            .starts_with(&["online".to_string(), "offline".to_string()])),
        "no last will: {:?}",
        sub.payloads("zcpipe/available")
    );
    assert!(
        wait_for(Duration::from_secs(30), || sub.payloads("zcpipe/available").len() >= 3),
        "the restarted stage: {}",
        run.stderr()
    );
    let err = run.stop();
    assert!(
        wait_for(Duration::from_secs(10), || sub.payloads("zcpipe/available")
            == ["online", "offline", "online", "offline"]),
        "{:?}: {err}",
        sub.payloads("zcpipe/available")
    );
}

/// (c) The broker stops mid-run and comes back on the same port: the pipeline goes on, the
/// bridge reconnects, and what it could not keep (a queue of 2) is counted as dropped.
#[test]
fn the_bridge_outlives_a_broker_restart_and_counts_what_it_dropped() {
    if !have_mosquitto() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut b = Broker::start(dir.path(), None);
    let sub = Sub::start(&b, None);
    let run = Running::start(
        dir.path(),
        &[
            &TESTSRC[..],
            &[
                "--instance",
                "mqtt-restart",
                "--mqtt",
                &b.url(),
                "--mqtt-topic-prefix",
                "zcpipe",
                "--mqtt-queue",
                "2",
                "--mqtt-stats-interval",
                "1",
            ],
        ]
        .concat(),
    );
    assert!(wait_for(Duration::from_secs(60), || sub.seen("zcpipe/stats", |_| true)), "no stats: {}", run.stderr());
    b.stop();
    assert!(
        wait_for(Duration::from_secs(30), || run.stderr().contains("mqtt: lost the connection to")),
        "{}",
        run.stderr()
    );
    // Stats every second into a queue of 2: a few seconds away drop some.
    std::thread::sleep(Duration::from_secs(4));
    b.restart();
    assert!(
        wait_for(Duration::from_secs(30), || run.stderr().contains("mqtt: connected to")
            && run.stderr().contains(" again after ")),
        "{}",
        run.stderr()
    );
    let before = sub.payloads("zcpipe/stats").len();
    assert!(
        wait_for(Duration::from_secs(30), || sub.payloads("zcpipe/stats").len() > before + 1),
        "stats after the restart: {:?}",
        sub.msgs()
    );
    assert!(run.child.id() > 0 && stage_pid(dir.path(), "publish").is_some(), "the pipeline still runs");
    let err = run.stop();
    let m = &summary(dir.path())["stages"]["publish"]["extra"]["mqtt"];
    let dropped = m["dropped"].as_u64().unwrap();
    assert!(dropped > 0 && m["reconnects"].as_u64().unwrap() >= 1, "{m}");
    assert!(
        err.contains(&format!("  mqtt: {}: ", b.url()))
            && err.contains(&format!("{dropped} dropped (queue full while the broker was slow or away)")),
        "{err}"
    );
    let last: Value = serde_json::from_str(sub.payloads("zcpipe/stats").last().unwrap()).unwrap();
    assert_eq!(last["mqtt"]["dropped"].as_u64(), Some(dropped), "the last stats say what was dropped: {last}");
    assert_eq!(sub.payloads("zcpipe/available").last().map(String::as_str), Some("offline"));
}

/// (d) Credentials the broker refuses: one clear line, retried, frames flow, and the
/// password is in no output.
#[test]
fn refused_credentials_are_one_line_and_never_shown() {
    if !have_mosquitto() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let b = Broker::start(dir.path(), Some(("zc", "right-pass")));
    let url = format!("mqtt://zc:Wr0ngPa55@127.0.0.1:{}", b.port);
    let out = zcpipe_run(dir.path())
        .args([
            "--source",
            "testsrc:320x240@10",
            "--infer",
            "none",
            "--frames",
            "30",
            "--json",
            "--instance",
            "mqtt-creds",
            "--mqtt",
            &url,
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{err}");
    every_frame_accounted(dir.path(), &stdout, 30);
    let said: Vec<&str> = err.lines().filter(|l| l.contains("refused the credentials")).collect();
    assert_eq!(said.len(), 1, "one line, however many retries: {err}");
    assert!(
        said[0].contains(&format!(
            "mqtt: the broker mqtt://127.0.0.1:{} (user zc, password ***) refused the credentials of user zc",
            b.port
        )),
        "{err}"
    );
    let m = &summary(dir.path())["stages"]["publish"]["extra"]["mqtt"];
    assert!(m["errors"].as_u64().unwrap() >= 2, "it kept retrying: {m}");
    let summary_text = std::fs::read_to_string(dir.path().join("summary.json")).unwrap();
    for text in [&*err, &*stdout, &summary_text, &std::fs::read_to_string(&b.log).unwrap()] {
        assert!(!text.contains("Wr0ngPa55"), "the password shows: {text}");
    }
    assert!(err.contains("not connected when the stream ended"), "{err}");
}

/// (e) No broker at start: the run completes, and the bridge says it cannot reach it.
#[test]
fn an_unreachable_broker_does_not_stop_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("mqtt://127.0.0.1:{}", free_port());
    let out = zcpipe_run(dir.path())
        .args([
            "--source",
            "testsrc:320x240@30",
            "--infer",
            "none",
            "--frames",
            "20",
            "--json",
            "--instance",
            "mqtt-away",
            "--mqtt",
            &url,
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains(&format!("mqtt: cannot reach the broker {url} (I/O: Connection refused")), "{err}");
    assert!(err.contains("the pipeline goes on"), "{err}");
    assert!(err.contains("frames: captured 20, scaled 20, "), "{err}");
    every_frame_accounted(dir.path(), &String::from_utf8_lossy(&out.stdout), 20);
    assert!(
        err.contains(&format!("  mqtt: {url}: 0 messages sent")) && err.contains("not connected when the stream ended"),
        "{err}"
    );
}

/// Every one of the `captured` frames of a `--json` run in `dir` is in `stdout` as a frame
/// line, or counted where it was passed over: in a later line's `skipped` (a live source is
/// paced, so on a busy machine the scheduler may pass over a frame a newer one replaced) or
/// as a ring's drop (drop-oldest) in the summary. That is the policy, not a loss. Returns the
/// frame lines.
fn every_frame_accounted(dir: &Path, stdout: &str, captured: u64) -> u64 {
    let frames: Vec<Value> =
        stdout.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).filter(|v| v["type"] == "frame").collect();
    let skipped: u64 = frames
        .iter()
        .map(|f| ["rate", "still", "age", "newer"].iter().map(|k| f["skipped"][k].as_u64().unwrap_or(0)).sum::<u64>())
        .sum();
    let stages = &summary(dir)["stages"];
    let dropped: u64 =
        ["capture", "scale", "infer"].iter().map(|s| stages[s]["output_ring"]["dropped"].as_u64().unwrap()).sum();
    let lines = frames.len() as u64;
    assert!(lines >= captured / 2, "the pipeline runs: {lines} frame lines of {captured}");
    assert_eq!(lines + skipped + dropped, captured, "{lines} frame lines, {skipped} passed over, {dropped} dropped");
    lines
}

/// The retained message of `topic` on broker `b` (what Home Assistant gets when it
/// subscribes): its payload's bytes, as `mosquitto_sub` writes them.
pub(crate) fn retained(b: &Broker, topic: &str) -> Vec<u8> {
    let out = Command::new("mosquitto_sub")
        .args(["-h", "127.0.0.1", "-p", &b.port.to_string(), "-t", topic, "-C", "1", "-N", "-W", "10"])
        .output()
        .unwrap();
    assert!(out.status.success(), "no retained message on {topic}: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// A camera removed from a running pipeline (`zcpipe ctl cameras remove`) goes unavailable
/// in Home Assistant: `P/<camera>/available` is `offline` (retained) while the other camera
/// stays `online`; added back, it is `online` again. Nothing else restarts.
#[test]
fn a_camera_removed_while_running_goes_unavailable_and_comes_back() {
    if !have_mosquitto() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let b = Broker::start(dir.path(), None);
    let sub = Sub::start(&b, None);
    let two = ["--source", "a=testsrc:320x240@10", "--source", "b=testsrc:320x240@10", "--infer", "none"];
    let run = Running::start(dir.path(), &[&two[..], &["--instance", "mqtt-ctl", "--mqtt", &b.url()]].concat());
    let up = |cam: &str| format!("zcpipe-mqtt-ctl/{cam}/available");
    assert!(
        wait_for(Duration::from_secs(60), || sub.seen(&up("a"), |p| p == "online")
            && sub.seen(&up("b"), |p| p == "online")),
        "the cameras never online: {}",
        run.stderr()
    );
    let publish = stage_pid(dir.path(), "publish");
    let ctl = |args: &[&str]| {
        let out = common::zcpipe().args(["ctl", "--run-dir"]).arg(dir.path().join("run")).args(args).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    assert_eq!(ctl(&["cameras", "remove", "b"]), (Some(0), "done: camera b removed (stopped capture@b)".into()));
    assert!(
        wait_for(Duration::from_secs(10), || sub.payloads(&up("b")) == ["online", "offline"]),
        "{:?}",
        sub.payloads(&up("b"))
    );
    assert_eq!(retained(&b, &up("b")), b"offline", "what Home Assistant finds when it subscribes");
    assert_eq!(retained(&b, &up("a")), b"online", "the other camera stays available");
    assert_eq!(ctl(&["cameras", "add", "b=testsrc:320x240@10"]).0, Some(0));
    assert!(
        wait_for(Duration::from_secs(30), || sub.payloads(&up("b")) == ["online", "offline", "online"]),
        "{:?}",
        sub.payloads(&up("b"))
    );
    assert_eq!(stage_pid(dir.path(), "publish"), publish, "the publish stage took it all live");
    run.stop();
}

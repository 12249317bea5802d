//! Several cameras in one run: `--source` given more than once (named or not, each with its
//! own options), one capture stage per camera, one scale, infer and publish stage for all.
//! Every camera's frames arrive, in order, carrying the camera's name and size; the summary
//! has a section per camera; a camera that stops or dies does not stall the others.

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixStream;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{assert_no_orphans, camera_pid, stage_pid, wait_for, zcpipe, zcpipe_run, Reap};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

#[test]
fn three_cameras_each_get_their_own_results_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let out = zcpipe_run(dir.path())
        .args([
            "--instance",
            "multicam-three",
            "--frames",
            "24",
            "--scaler",
            "cpu",
            "--infer",
            "none",
            "--json",
            "--stats-interval",
            "0.5",
        ])
        .args(["--fps", "20"]) // every camera's, unless its own says otherwise
        .args(["--source", "front=testsrc:320x240"])
        .args(["--source", "door=testsrc:640x360", "--fps", "40"])
        .args(["--source", "testsrc:160x120"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let mut per: BTreeMap<String, Vec<(u64, u64, u64)>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        if v["type"] == "frame" {
            per.entry(v["camera"].as_str().unwrap().to_string()).or_default().push((
                v["seq"].as_u64().unwrap(),
                v["width"].as_u64().unwrap(),
                v["height"].as_u64().unwrap(),
            ));
        }
    }
    assert_eq!(per.keys().collect::<Vec<_>>(), ["cam2", "door", "front"], "{stderr}");
    for (cam, size) in [("front", (320, 240)), ("door", (640, 360)), ("cam2", (160, 120))] {
        let frames = &per[cam];
        assert!(
            frames.iter().all(|f| (f.1, f.2) == size),
            "{cam}: each line carries the camera's own size: {frames:?}"
        );
        assert!(frames.windows(2).all(|w| w[0].0 < w[1].0), "{cam}: frames in order: {frames:?}");
        assert!(!frames.is_empty() && frames.len() <= 24, "{cam}: {} frames", frames.len());
    }
    let s: Value = serde_json::from_slice(&std::fs::read(dir.path().join("summary.json")).unwrap()).unwrap();
    for cam in ["front", "door", "cam2"] {
        let c = &s["cameras"][cam];
        assert_eq!(c["captured"], 24, "{cam}: {c}");
        assert_eq!(
            c["published"].as_u64().unwrap() as usize,
            per[cam].len(),
            "{cam}: the summary counts what was published: {c}"
        );
        assert!(c["latency_p50_us"].as_f64().unwrap() > 0.0, "{cam}: {c}");
        assert_eq!(s["stages"][format!("capture@{cam}")]["frames_out"], 24);
        assert_eq!(s["exit_codes"][format!("capture@{cam}")], 0);
    }
    for stage in ["scale", "infer", "publish"] {
        assert_eq!(s["exit_codes"][stage], 0, "{stage}");
    }
    assert!(
        stderr.contains("camera          captured  dropped  published"),
        "the summary's per-camera table: {stderr}"
    );
    assert!(stderr.contains("| cameras: "), "the stats line is per camera: {stderr}");
    assert_no_orphans(dir.path());
}

/// Sixteen cameras: each stage's report carries every camera (several KiB, more than the
/// 4 KiB a pipe keeps whole in one write), and every report reaches the supervisor whole:
/// the summary has each camera's counts, and nothing was unreadable.
#[test]
fn sixteen_cameras_report_whole() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = zcpipe_run(dir.path());
    cmd.args(["--instance", "multicam-16", "--frames", "10", "--scaler", "cpu", "--infer", "none", "--no-print"])
        .args(["--stats-interval", "0.5", "--fps", "10", "--ring-policy", "block"]);
    for i in 0..16 {
        cmd.args(["--source", &format!("c{i:02}=testsrc:160x120")]);
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("unparsable stage report"), "{stderr}");
    let s: Value = serde_json::from_slice(&std::fs::read(dir.path().join("summary.json")).unwrap()).unwrap();
    for i in 0..16 {
        let c = &s["cameras"][format!("c{i:02}")];
        assert_eq!((c["captured"].as_u64(), c["published"].as_u64()), (Some(10), Some(10)), "c{i:02}: {c}");
    }
    let sizes = ["scale", "infer", "publish"].map(|st| s["stages"][st].to_string().len());
    assert!(sizes.iter().any(|&n| n > 4096), "a report past a pipe's 4 KiB: {sizes:?}");
    println!(
        "EVIDENCE 16 cameras: every camera's 10 frames counted; the scale, infer and publish reports {sizes:?} bytes"
    );
}

/// What a detections client saw, per camera: frame lines with when they came.
#[derive(Default)]
struct Seen(Vec<(Instant, String)>);

fn client(path: std::path::PathBuf, seen: Arc<Mutex<Seen>>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let s = loop {
            match UnixStream::connect(&path) {
                Ok(s) => break s,
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        for line in BufReader::new(s).lines() {
            let Ok(line) = line else { break };
            let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            if v["type"] == "frame" {
                seen.lock().unwrap().0.push((Instant::now(), v["camera"].as_str().unwrap_or("").to_string()));
            }
            if v["type"] == "end" {
                return;
            }
        }
    })
}

fn frames_after(seen: &Mutex<Seen>, cam: &str, t: Instant) -> usize {
    seen.lock().unwrap().0.iter().filter(|(at, c)| *at > t && c == cam).count()
}

/// A run of two 320x240 test-pattern cameras `a` and `b` (`cmd`: `zcpipe run` in its folder
/// with the run's own flags), watched by a detections client; returns once both flow.
struct TwoCameras {
    run: Reap,
    seen: Arc<Mutex<Seen>>,
    client: std::thread::JoinHandle<()>,
}

impl TwoCameras {
    fn start(dir: &std::path::Path, mut cmd: std::process::Command) -> TwoCameras {
        let run = Reap(
            cmd.args(["--infer", "none", "--no-print", "--watchdog", "0"])
                .args(["--source", "a=testsrc:320x240@30", "--source", "b=testsrc:320x240@30"])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let seen = Arc::new(Mutex::new(Seen::default()));
        let client = client(dir.join("detections.sock"), seen.clone());
        let t0 = Instant::now();
        assert!(
            wait_for(Duration::from_secs(30), || frames_after(&seen, "a", t0) > 10
                && frames_after(&seen, "b", t0) > 10),
            "both cameras flow"
        );
        TwoCameras { run, seen, client }
    }

    /// Stops the run as Ctrl-C does; its stderr, once it exited 0.
    fn stop(mut self) -> String {
        kill(Pid::from_raw(self.run.0.id() as i32), Signal::SIGINT).unwrap();
        let status = self.run.0.wait().unwrap();
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut self.run.0.stderr.take().unwrap(), &mut stderr).unwrap();
        assert!(status.success(), "{stderr}");
        self.client.join().unwrap();
        stderr
    }
}

/// A camera whose capture stage is stopped (SIGSTOP, as a hung camera driver or a frozen
/// network read would be) does not stall the other; killed, it is restarted alone, and the
/// other camera's capture stage keeps its pid.
#[test]
fn a_stopped_or_killed_camera_does_not_stall_the_other() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = zcpipe_run(dir.path());
    cmd.args(["--instance", "multicam-stall", "--scaler", "cpu"]);
    let two = TwoCameras::start(dir.path(), cmd);
    let seen = two.seen.clone();
    let (a, b) = (camera_pid(dir.path(), "a").unwrap(), camera_pid(dir.path(), "b").unwrap());

    kill(Pid::from_raw(b), Signal::SIGSTOP).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let stopped = Instant::now();
    assert!(
        wait_for(Duration::from_secs(10), || frames_after(&seen, "a", stopped) >= 30),
        "camera a goes on while b is stopped"
    );
    assert_eq!(frames_after(&seen, "b", stopped), 0, "nothing from the stopped camera");
    kill(Pid::from_raw(b), Signal::SIGCONT).unwrap();
    let resumed = Instant::now();
    assert!(wait_for(Duration::from_secs(10), || frames_after(&seen, "b", resumed) >= 10), "camera b comes back");

    kill(Pid::from_raw(b), Signal::SIGKILL).unwrap();
    let killed = Instant::now();
    assert!(
        wait_for(Duration::from_secs(10), || frames_after(&seen, "a", killed) >= 30),
        "camera a goes on while b restarts"
    );
    assert!(
        wait_for(Duration::from_secs(20), || frames_after(&seen, "b", killed) >= 10),
        "camera b restarted and flows again"
    );
    assert_eq!(camera_pid(dir.path(), "a"), Some(a), "camera a's capture stage kept its pid");
    assert_ne!(camera_pid(dir.path(), "b"), Some(b));
    assert!(stage_pid(dir.path(), "scale").is_some());

    two.stop();
    let s: Value = serde_json::from_slice(&std::fs::read(dir.path().join("summary.json")).unwrap()).unwrap();
    assert_eq!(s["restarts"]["capture@b"], 1, "{}", s["restarts"]);
    assert_eq!(s["cameras"]["b"]["restarts"], 1);
    assert!(s["restarts"].get("capture@a").is_none() && s["restarts"].get("scale").is_none(), "{}", s["restarts"]);
    assert_no_orphans(dir.path());
}

/// Bad camera lists are one clear line each, before anything starts.
#[test]
fn bad_camera_lists_are_one_line_each() {
    let many: Vec<String> = (0..17).flat_map(|i| ["--source".to_string(), format!("testsrc:{}x16", 16 + i)]).collect();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--source".into(), "a=testsrc".into(), "--source".into(), "a=testsrc:64x48".into()],
            "camera name \"a\" is given twice",
        ),
        (
            vec!["--source".into(), "a=image:x.png".into(), "--source".into(), "b=image:x.png".into()],
            "--source image:x.png is given twice (cameras a and b)",
        ),
        (vec!["--source".into(), "Front=testsrc".into(), "--source".into(), "testsrc".into()], "camera name \"Front\""),
        (vec!["--source".into(), "a+b=testsrc".into()], "no /, +, #, spaces or capitals"),
        (
            vec![
                "--source".into(),
                "a=testsrc".into(),
                "--source".into(),
                "b=testsrc".into(),
                "--fps".into(),
                "fast".into(),
            ],
            "camera b (--source testsrc)",
        ),
        (many, "one pipeline serves at most 16"),
    ];
    for (args, want) in cases {
        let out = zcpipe().args(["run", "--dry-run"]).args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: accepted");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().filter(|l| l.contains("error")).count(), 1, "{args:?}: one line: {stderr}");
    }
    // The dry run of a good list names each camera's capture stage.
    let out = zcpipe()
        .args([
            "run",
            "--dry-run",
            "--infer",
            "none",
            "--source",
            "front=testsrc",
            "--source",
            "image:tests/data/a=b.png",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("camera front: testsrc") && stdout.contains("camera cam1: image:tests/data/a=b.png"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// With a device scaler (RGA, here its ABI fake), each camera has its own scaler: each
/// camera's pool is imported once and the output pool once per camera, however the frames
/// of the two cameras alternate; when a camera's capture stage restarts, a fresh scaler
/// imports its new pool (and the output pool) and the scale stage keeps its pid.
#[test]
fn rga_imports_each_cameras_pool_once_and_a_restarted_cameras_again() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("rga.log");
    let mut cmd = zcpipe_run(dir.path());
    cmd.env("ZCPIPE_LIBRGA", common::fake_librga()).env("ZCPIPE_FAKE_RGA_LOG", &log);
    cmd.args(["--instance", "multicam-rga", "--scaler", "rga", "--heap", "memfd"]);
    let two = TwoCameras::start(dir.path(), cmd);
    let seen = two.seen.clone();
    let scale = stage_pid(dir.path(), "scale").unwrap();
    kill(Pid::from_raw(camera_pid(dir.path(), "b").unwrap()), Signal::SIGKILL).unwrap();
    let killed = Instant::now();
    assert!(
        wait_for(Duration::from_secs(20), || frames_after(&seen, "b", killed) >= 10),
        "camera b restarted and flows again"
    );
    assert_eq!(stage_pid(dir.path(), "scale"), Some(scale), "the scale stage bound the new pool without a restart");
    let stderr = two.stop();
    // Imports by buffer (the fake logs each dma-buf's inode).
    let text = std::fs::read_to_string(&log).unwrap();
    let mut imports: BTreeMap<String, usize> = BTreeMap::new();
    for l in text.lines().filter(|l| l.starts_with("importbuffer_fd ") && !l.ends_with("handle=0")) {
        let ino = l.split(' ').find_map(|f| f.strip_prefix("ino=")).unwrap().to_string();
        *imports.entry(ino).or_default() += 1;
    }
    let mut counts: Vec<usize> = imports.values().copied().collect();
    counts.sort();
    // 4 + 4 + 4 capture buffers (a, b, b restarted) once each; 6 output buffers (`zcpipe run`'s
    // pool for one engine and two cameras: one running, one waiting and one scaled meanwhile
    // per camera, one being written) three times each (a's scaler, b's first, b's fresh one).
    assert_eq!(counts, [vec![1; 12], vec![3; 6]].concat(), "{imports:?}\n{stderr}");
    assert!(stderr.contains("camera b: its capture stage came back; a fresh"), "{stderr}");
    assert_no_orphans(dir.path());
}

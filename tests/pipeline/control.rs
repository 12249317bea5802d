//! Changing a running pipeline (`zcpipe ctl`, SIGHUP): a run of two cameras (the bundled
//! clip and a test pattern) is changed while a detections client watches; each change says
//! what it restarted, and the stages it did not name keep their pids.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{assert_no_orphans, camera_pid, stage_pid, wait_for, zcpipe, zcpipe_run, Reap};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

/// The lines a detections client saw, with when; it connects again when the socket closes
/// (a restarted publish stage) until the end line.
type Lines = Arc<Mutex<Vec<(Instant, Value)>>>;

fn client(path: PathBuf, seen: Lines) -> std::thread::JoinHandle<()> {
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    common::reconnecting_client(path, done, move |t, v| seen.lock().unwrap().push((t, v)), || {})
}

fn count(seen: &Lines, since: Instant, f: impl Fn(&Value) -> bool) -> usize {
    seen.lock().unwrap().iter().filter(|(t, v)| *t > since && f(v)).count()
}

fn frames(seen: &Lines, since: Instant, cam: &str) -> usize {
    count(seen, since, |v| v["type"] == "frame" && v["camera"] == cam)
}

/// `zcpipe ctl --run-dir RUN ARGS`: exit code, stdout, stderr.
fn ctl(run: &Path, args: &[&str]) -> (i32, String, String) {
    let out = zcpipe().args(["ctl", "--run-dir"]).arg(run).args(args).output().unwrap();
    let s = |b: &[u8]| String::from_utf8_lossy(b).trim().to_string();
    (out.status.code().unwrap_or(-1), s(&out.stdout), s(&out.stderr))
}

/// The pids of the scale, infer and publish stages.
fn pids(dir: &Path) -> [Option<i32>; 3] {
    ["scale", "infer", "publish"].map(|s| stage_pid(dir, s))
}

/// A run under change: its folder, its detections client's lines, and the pids it started with.
struct Run<'a> {
    d: &'a Path,
    run_dir: PathBuf,
    seen: Lines,
    door: i32,
    yard: i32,
    scale: Option<i32>,
    infer: Option<i32>,
    publish: Option<i32>,
    /// The web view's port.
    http: u16,
}

#[test]
fn a_running_pipeline_is_changed_without_restarting_what_did_not_change() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let run_dir = d.join("run");
    let cfg = d.join("zcpipe.toml");
    let clip = common::root().join("tests/data/one-by-one-person-detection.mp4");
    let file = |yard_zone: &str| {
        format!(
            "scaler = \"cpu\"\n[camera.door]\nsource = \"video:{}\"\n[camera.yard]\nsource = \"testsrc:320x240@10\"\n{yard_zone}",
            clip.display()
        )
    };
    std::fs::write(&cfg, file("")).unwrap();
    let mut cmd = zcpipe_run(d);
    let http = crate::rtsp::free_port();
    cmd.args(["--instance", "ctl-e2e", "--no-print", "--watchdog", "0", "--http", &format!("127.0.0.1:{http}")]);
    cmd.arg("--config").arg(&cfg);
    let mut run = Reap(cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap());
    let seen: Lines = Arc::default();
    let watcher = client(d.join("detections.sock"), seen.clone());
    let t0 = Instant::now();
    assert!(
        wait_for(Duration::from_secs(60), || frames(&seen, t0, "door") > 5 && frames(&seen, t0, "yard") > 5),
        "both cameras flow"
    );
    let (door, yard) = (camera_pid(d, "door").unwrap(), camera_pid(d, "yard").unwrap());
    let [scale, infer, publish] = pids(d);

    let r = Run { d, run_dir: run_dir.clone(), seen: seen.clone(), door, yard, scale, infer, publish, http };
    cameras_listed(&r);
    shapes_change_live(&r);
    bad_changes_change_nothing(&r);
    let r = Run { yard: restarts_are_the_changed_stages_alone(&r), infer: stage_pid(d, "infer"), ..r };
    rates_change_live(&r);
    reloaded_on_sighup(&r, &cfg, &file("zone = [\"gate=0,0,100,0,100,100,0,100\"]\n"), run.0.id() as i32);
    another_user_is_refused(&r);
    removed_and_added(&r);
    kill(Pid::from_raw(run.0.id() as i32), Signal::SIGINT).unwrap();
    let status = run.0.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut run.0.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{stderr}");
    watcher.join().unwrap();
    for want in ["changed: camera door: zone whole added", "changed: --score-threshold 0.5; restarted infer"] {
        assert_eq!(stderr.matches(want).count(), 1, "the log says each change once: {want}\n{stderr}");
    }
    if nix::unistd::geteuid().is_root() {
        assert!(stderr.contains("control: refused pid") && stderr.contains("of uid 65534"), "{stderr}");
    }
    println!(
        "EVIDENCE control: {} config_changed notices; door's capture pid {door} throughout; infer {infer:?} -> {:?} for the threshold",
        count(&seen, t0, |v| v["event"] == "config_changed"),
        "restarted"
    );
    assert_no_orphans(d);
}

fn cameras_listed(r: &Run) {
    // The cameras and their state.
    let (code, out, err) = ctl(&r.run_dir, &["--json", "cameras"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["result"], "cameras");
    let states: Vec<(&str, &str)> = v["cameras"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["state"].as_str().unwrap()))
        .collect();
    assert_eq!(states, [("door", "streaming"), ("yard", "streaming")]);
    assert_eq!(v["cameras"][0]["pid"], r.door);
}

fn shapes_change_live(r: &Run) {
    // A zone over the whole picture, live: the next person enters it; nothing restarted.
    let t_zone = Instant::now();
    let (code, out, err) = ctl(&r.run_dir, &["zones", "set", "door", "whole=0,0,768,0,768,432,0,432"]);
    assert_eq!(
        (code, out.as_str()),
        (0, "done: camera door: zone whole added (applied live, nothing restarted)"),
        "{err}"
    );
    assert!(
        wait_for(Duration::from_secs(5), || count(&r.seen, t_zone, |v| v["event"] == "config_changed"
            && v["change"] == "camera door: zone whole added"
            && v["camera"] == "door")
            == 1),
        "the clients are told"
    );
    assert!(
        wait_for(Duration::from_secs(5), || count(&r.seen, t_zone, |v| v["type"] == "frame"
            && v["camera"] == "door"
            && v["zones"].get("whole").is_some())
            > 0),
        "door's frame lines carry the new zone"
    );
    // A line, live too.
    let (code, out, _) = ctl(&r.run_dir, &["lines", "set", "door", "exit=600,200,600,432"]);
    assert_eq!((code, out.as_str()), (0, "done: camera door: line exit added (applied live, nothing restarted)"));
    let t_line = Instant::now();
    assert!(wait_for(Duration::from_secs(5), || count(&r.seen, t_line, |v| v["type"] == "frame"
        && v["camera"] == "door"
        && v["lines"].get("exit").is_some())
        > 0));
    let (code, out, _) = ctl(&r.run_dir, &["zones", "list", "door"]);
    assert_eq!((code, out.as_str()), (0, "door:\n  zone whole=0,0,768,0,768,432,0,432\n  line exit=600,200,600,432"));
    assert_eq!(pids(r.d), [r.scale, r.infer, r.publish], "a live change restarts nothing");
    assert_eq!((camera_pid(r.d, "door"), camera_pid(r.d, "yard")), (Some(r.door), Some(r.yard)));
}

fn bad_changes_change_nothing(r: &Run) {
    // Bad changes: one line each, nothing changed.
    for (args, want) in [
        (&["zones", "set", "door", "bad=1,2"][..], "refused: --zone door:bad=1,2: 1 point(s)"),
        (&["zones", "set", "nope", "z=0,0,9,0,9,9"], "refused: no camera nope in this run (it has door, yard)"),
        (&["zones", "remove", "door", "nosuch"], "refused: camera door has no zone nosuch"),
        (&["zones", "set", "door", "far=0,0,9000,0,9000,9,0,9"], "failed: the publish stage did not take the change"),
        (&["set", "score-threshold", "7"], "refused: --score-threshold 7"),
        (&["set", "track-keepalive", "99999999"], "refused: invalid value '99999999' for '--track-keepalive"),
        (&["set", "track-high", "1"], "refused: invalid value '1' for '--track-high"),
        (&["cameras", "add", "door=testsrc"], "refused: camera door exists already"),
        (&["cameras", "add", "x=/dev/video99"], "refused: camera x: bad source \"/dev/video99\": unknown source kind"),
        (
            &["cameras", "add", "back=testsrc:320x240@10", "--fps=9", "--bogus=1"],
            "refused: camera back: option --bogus",
        ),
    ] {
        let (code, out, _) = ctl(&r.run_dir, args);
        assert_eq!(code, 1, "{args:?}: {out}");
        assert!(out.starts_with(want) && out.lines().count() == 1, "{args:?}: {out}");
    }
    // A source already in use (door's clip): refused, naming both cameras.
    let clip = common::root().join("tests/data/one-by-one-person-detection.mp4");
    let (code, out, _) = ctl(&r.run_dir, &["cameras", "add", &format!("twin=video:{}", clip.display())]);
    assert_eq!(
        (code, out.as_str()),
        (1, "refused: camera twin: its source is camera door's already; one source feeds one camera")
    );
    let (_, out, _) = ctl(&r.run_dir, &["zones", "list", "door"]);
    assert!(out.contains("zone whole=") && !out.contains("far") && !out.contains("bad"), "{out}");
    // Two clients at once: each change is applied whole, one after the other.
    let two: Vec<_> = ["left=0,0,300,0,300,432,0,432", "right=400,0,768,0,768,432,400,432"]
        .map(|z| {
            let run = r.run_dir.clone();
            std::thread::spawn(move || ctl(&run, &["zones", "set", "door", z]).0)
        })
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    assert_eq!(two, [0, 0]);
    let (_, out, _) = ctl(&r.run_dir, &["zones", "list", "door"]);
    assert!(out.contains("zone left=") && out.contains("zone right="), "{out}");
    every_client_served_is_answered_busy_when_full(r);
}

/// Eight clients that say nothing hold every place the run serves at once: the next is
/// answered `busy` (not left with a hang-up), and once they leave, served.
fn every_client_served_is_answered_busy_when_full(r: &Run) {
    use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
    let addr = UnixAddr::new(&r.run_dir.join("control.sock")).unwrap();
    let idle: Vec<_> = (0..8)
        .map(|_| {
            let fd = socket(AddressFamily::Unix, SockType::SeqPacket, SockFlag::SOCK_CLOEXEC, None).unwrap();
            connect(std::os::fd::AsRawFd::as_raw_fd(&fd), &addr).unwrap();
            fd
        })
        .collect();
    // The run takes them in within its 200 ms turn; each then waits for its request.
    let mut answers = vec![];
    let full = wait_for(Duration::from_secs(20), || {
        let (code, out, err) = ctl(&r.run_dir, &["cameras"]);
        answers.push(format!("{code} {out} {err}"));
        code == 1 && out == "busy: 8 control clients are being served; try again"
    });
    assert!(full, "{answers:?}");
    assert!(!answers.iter().any(|a| a.contains("hung up")), "{answers:?}");
    drop(idle);
    assert!(wait_for(Duration::from_secs(20), || ctl(&r.run_dir, &["cameras"]).0 == 0), "served again");
}

/// The infer stage restarted for a setting, camera yard on request: its new pid.
fn restarts_are_the_changed_stages_alone(r: &Run) -> i32 {
    // A setting of the infer stage: it alone restarts; the cameras and publish keep theirs.
    let (code, out, _) = ctl(&r.run_dir, &["set", "score-threshold", "0.5"]);
    assert_eq!((code, out.as_str()), (0, "done: --score-threshold 0.5 (restarted infer)"));
    let t_infer = Instant::now();
    assert!(wait_for(Duration::from_secs(30), || frames(&r.seen, t_infer, "door") > 5
        && frames(&r.seen, t_infer, "yard") > 5));
    assert_ne!(stage_pid(r.d, "infer"), r.infer);
    // Its effect: no detection under the new threshold from the new infer stage's first frame on.
    let notice = |v: &Value| v["type"] == "notice" && v["stage"] == "infer" && v["event"] == "restarted";
    assert!(wait_for(Duration::from_secs(10), || count(&r.seen, t_infer, notice) > 0), "the restart is noticed");
    let t_infer = r.seen.lock().unwrap().iter().find(|(t, v)| *t > t_infer && notice(v)).unwrap().0;
    std::thread::sleep(Duration::from_secs(2));
    let low = count(&r.seen, t_infer, |v| {
        v["type"] == "frame"
            && v["detections"].as_array().is_some_and(|d| d.iter().any(|d| d["score"].as_f64() < Some(0.5)))
    });
    let scored =
        count(&r.seen, t_infer, |v| v["type"] == "frame" && v["detections"].as_array().is_some_and(|d| !d.is_empty()));
    assert_eq!(low, 0, "{scored} frames with detections after the change, none under 0.5");
    assert_eq!((stage_pid(r.d, "scale"), stage_pid(r.d, "publish")), (r.scale, r.publish));
    assert_eq!((camera_pid(r.d, "door"), camera_pid(r.d, "yard")), (Some(r.door), Some(r.yard)));

    // One camera restarted: the other keeps its pid and its frames.
    let (code, out, _) = ctl(&r.run_dir, &["cameras", "restart", "yard"]);
    assert_eq!((code, out.as_str()), (0, "done: camera yard restarted (restarted capture@yard)"));
    let t_restart = Instant::now();
    assert!(wait_for(Duration::from_secs(30), || frames(&r.seen, t_restart, "yard") > 5));
    assert_ne!(camera_pid(r.d, "yard"), Some(r.yard));
    assert_eq!(camera_pid(r.d, "door"), Some(r.door));

    camera_pid(r.d, "yard").unwrap()
}

/// A camera's detection rate and weight change live: no stage restarts, and the scale
/// stage passes on at most that rate of the camera's frames from then on.
fn rates_change_live(r: &Run) {
    let (code, out, _) = ctl(&r.run_dir, &["set", "--camera", "yard", "detect-fps", "2"]);
    assert_eq!((code, out.as_str()), (0, "done: camera yard: --detect-fps 2 (applied live, nothing restarted)"));
    std::thread::sleep(Duration::from_secs(1));
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs(5));
    let (yard, door) = (frames(&r.seen, t, "yard"), frames(&r.seen, t, "door"));
    assert!((8..=11).contains(&yard), "yard at 2 fps: {yard} frames in 5 s (door: {door})");
    println!("EVIDENCE control: --detect-fps 2 for yard, live: {yard} of its frame lines in 5 s (door's {door}); no stage restarted");
    assert_eq!(pids(r.d), [r.scale, r.infer, r.publish], "a rate is taken live");
    let (code, out, _) = ctl(&r.run_dir, &["set", "--camera", "yard", "detect-fps", "0"]);
    assert_eq!((code, out.as_str()), (0, "done: camera yard: --detect-fps 0 (applied live, nothing restarted)"));
    let t = Instant::now();
    assert!(wait_for(Duration::from_secs(20), || frames(&r.seen, t, "yard") > 15), "every frame again");
    assert_eq!(pids(r.d), [r.scale, r.infer, r.publish]);
    assert_eq!((camera_pid(r.d, "door"), camera_pid(r.d, "yard")), (Some(r.door), Some(r.yard)));
}

fn reloaded_on_sighup(r: &Run, cfg: &Path, text: &str, pid: i32) {
    // A file with a value the run refuses: one line naming the file's line, nothing applied.
    std::fs::write(cfg, format!("score-threshold = 7\n{text}")).unwrap();
    let (code, out, _) = ctl(&r.run_dir, &["reload"]);
    let want = format!("refused: reload: {}:1: --score-threshold 7: use a value in 0..=1", cfg.display());
    assert_eq!((code, out.as_str()), (1, want.as_str()));
    let (_, zones, _) = ctl(&r.run_dir, &["zones", "list", "door"]);
    assert!(zones.contains("zone whole="), "nothing applied: {zones}");
    // The configuration file changed and read again on SIGHUP: yard's zone from the file,
    // door's zone and line (made with ctl, not in the file) gone, the threshold back.
    std::fs::write(cfg, text).unwrap();
    let t_reload = Instant::now();
    kill(Pid::from_raw(pid), Signal::SIGHUP).unwrap();
    assert!(
        wait_for(Duration::from_secs(30), || count(&r.seen, t_reload, |v| {
            v["event"] == "config_changed"
            // left and right were set by two clients at once: in either order.
            && ["left removed, zone right", "right removed, zone left"].iter().any(|lr| v["change"]
                == format!("the configuration file read again: camera door: zone whole removed, zone {lr} removed, line exit removed; camera yard: zone gate added; --score-threshold 0.5 -> 0.3").as_str())
        }) >= 1),
        "the reload is announced with what it changed: {:?}",
        r.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, v)| *t > t_reload && v["event"] == "config_changed")
            .map(|(_, v)| v["change"].clone())
            .collect::<Vec<_>>()
    );
    let (_, out, _) = ctl(&r.run_dir, &["zones"]);
    assert_eq!(out, "door:\n  (no zones, lines or loitering times)\nyard:\n  zone gate=0,0,100,0,100,100,0,100");
    assert!(wait_for(Duration::from_secs(30), || frames(&r.seen, Instant::now() - Duration::from_secs(1), "yard") > 0
        && count(&r.seen, t_reload, |v| v["type"] == "frame"
            && v["camera"] == "yard"
            && v["zones"].get("gate").is_some())
            > 0));
    assert_eq!(camera_pid(r.d, "door"), Some(r.door), "the reload left door's capture stage alone");
    assert_eq!(stage_pid(r.d, "publish"), r.publish, "and publish");
}

fn another_user_is_refused(r: &Run) {
    // Another user is refused, even with the socket opened to everyone.
    if nix::unistd::geteuid().is_root() {
        use std::os::unix::fs::PermissionsExt;
        use std::os::unix::process::CommandExt;
        let open = |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
        open(&r.run_dir, 0o755);
        open(&r.run_dir.join("control.sock"), 0o666);
        let out =
            zcpipe().args(["ctl", "--run-dir"]).arg(&r.run_dir).arg("cameras").uid(65534).gid(65534).output().unwrap();
        open(&r.run_dir, 0o700);
        let err = String::from_utf8_lossy(&out.stderr);
        let runs = !err.contains("Permission denied") || err.contains("control.sock");
        if runs {
            assert_eq!(out.status.code(), Some(1), "{err}");
            // Closed unanswered: the send or the wait for an answer fails, as it happens.
            assert!(err.starts_with("zcpipe ctl: error: cannot reach the run at "), "{err}");
        }
    }
}

fn removed_and_added(r: &Run) {
    // The reload restarted the infer stage (its threshold): its pid from now on.
    let infer = stage_pid(r.d, "infer");
    // A camera removed: its capture stage stops for good, its tracks end; door goes on.
    let (code, out, _) = ctl(&r.run_dir, &["cameras", "remove", "yard"]);
    assert_eq!((code, out.as_str()), (0, "done: camera yard removed (stopped capture@yard)"));
    assert!(wait_for(Duration::from_secs(10), || camera_pid(r.d, "yard").is_none()));
    // Its last frames drain through the stages after capture; then none comes.
    std::thread::sleep(Duration::from_secs(2));
    let t_removed = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(frames(&r.seen, t_removed, "yard"), 0);
    assert!(frames(&r.seen, t_removed, "door") > 5);
    let (_, out, _) = ctl(&r.run_dir, &["--json", "cameras"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["cameras"][1]["state"], "stopped");
    assert_eq!((camera_pid(r.d, "door"), stage_pid(r.d, "publish")), (Some(r.door), r.publish));
    let (code, out, _) = ctl(&r.run_dir, &["cameras", "restart", "yard"]);
    assert_eq!(
        (code, out.as_str()),
        (1, "refused: camera yard was removed; add it back with `zcpipe ctl cameras add yard=testsrc:320x240@10`")
    );
    // Added back with its source: its frames come again, nothing else restarted.
    let (code, out, _) = ctl(&r.run_dir, &["cameras", "add", "yard=testsrc:320x240@10"]);
    assert_eq!((code, out.as_str()), (0, "done: camera yard added back (started capture@yard)"));
    let t_back = Instant::now();
    assert!(wait_for(Duration::from_secs(30), || frames(&r.seen, t_back, "yard") > 5), "yard streams again");
    assert_eq!((camera_pid(r.d, "door"), stage_pid(r.d, "publish")), (Some(r.door), r.publish));

    // A camera whose source is not there: retried as a camera that went away, the others go on.
    let (code, out, _) = ctl(&r.run_dir, &["cameras", "add", "gone=video:/nonexistent.mp4"]);
    assert_eq!((code, out.as_str()), (0, "done: camera gone added (started capture@gone)"));
    std::thread::sleep(Duration::from_secs(3));
    let t_gone = Instant::now();
    assert!(
        wait_for(Duration::from_secs(20), || frames(&r.seen, t_gone, "door") > 5
            && frames(&r.seen, t_gone, "yard") > 5),
        "the others go on"
    );
    let (_, out, _) = ctl(&r.run_dir, &["--json", "cameras"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let gone = v["cameras"].as_array().unwrap().iter().find(|c| c["name"] == "gone").unwrap().clone();
    assert!(gone["state"] == "reconnecting" || gone["state"] == "starting", "{gone}");
    let (code, out, _) = ctl(&r.run_dir, &["cameras", "remove", "gone"]);
    assert_eq!((code, out.as_str()), (0, "done: camera gone removed (stopped capture@gone)"));

    // An RTSP camera added (the real RTSP server): its capture stage starts and joins the
    // running scale stage, its frames and detections come; the stages after capture and
    // the other cameras' capture stages keep their pids; then it is removed again.
    if let Some(why) = crate::rtsp::gst_missing() {
        println!("skipped the RTSP camera: {why}");
        return;
    }
    let port = crate::rtsp::free_port();
    let _server = crate::rtsp::Server::start(port, &common::root().join(crate::rtsp::CLIP));
    let url = format!("back=rtsp://127.0.0.1:{port}/cam");
    let (code, out, err) = ctl(&r.run_dir, &["cameras", "add", &url, "--fps=10"]);
    assert_eq!(code, 0, "{out} {err}");
    assert_eq!(out, "done: camera back added (started capture@back)");
    let t_added = Instant::now();
    let detected = |v: &Value| {
        v["type"] == "frame" && v["camera"] == "back" && v["detections"].as_array().is_some_and(|d| !d.is_empty())
    };
    assert!(
        wait_for(Duration::from_secs(60), || frames(&r.seen, t_added, "back") > 5
            && count(&r.seen, t_added, detected) > 0),
        "the RTSP camera's frames and detections come"
    );
    assert_eq!(camera_pid(r.d, "door"), Some(r.door), "the other camera's capture stage kept its pid");
    assert_eq!(pids(r.d), [r.scale, infer, r.publish], "no stage after capture restarted for the new camera");
    let restarted = |v: &Value| v["type"] == "notice" && v["event"] == "restarted";
    assert_eq!(count(&r.seen, t_added, restarted), 0, "no restart noticed");
    // The web view shows it: in its cameras, and its picture (the camera's pixels).
    let web = std::net::SocketAddr::from(([127, 0, 0, 1], r.http));
    let (status, _, body) = common::http_get(web, "/api/stats");
    let stats: Value =
        serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&body)));
    assert_eq!((status, stats["camera_order"].clone()), (200, serde_json::json!(["door", "yard", "gone", "back"])));
    let (status, _, jpeg) = common::http_get(web, "/snapshot/back.jpg");
    assert_eq!((status, &jpeg[..3]), (200, &[0xff, 0xd8, 0xff][..]), "a JPEG of back's pixels");
    // What adding a camera cost the other camera: the longest wait between two of its
    // frame lines around the change.
    let door: Vec<Instant> = r
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(t, v)| *t + Duration::from_secs(2) > t_added && v["type"] == "frame" && v["camera"] == "door")
        .map(|(t, _)| *t)
        .collect();
    let gap = door.windows(2).map(|w| w[1] - w[0]).max().unwrap_or_default();
    println!(
        "EVIDENCE control: adding an RTSP camera held camera door's frame lines for at most {} ms",
        gap.as_millis()
    );
    let (code, out, _) = ctl(&r.run_dir, &["cameras", "remove", "back"]);
    assert_eq!((code, out.as_str()), (0, "done: camera back removed (stopped capture@back)"));
    assert!(wait_for(Duration::from_secs(10), || camera_pid(r.d, "back").is_none()));

    // A reload goes back to the file: the cameras added with ctl leave the run (the stages
    // after capture restart once, the cameras' places change); one of them added again
    // streams, and the file's cameras can still be removed.
    let (code, out, _) = ctl(&r.run_dir, &["reload"]);
    assert!(code == 0 && out.contains("cameras gone, back removed"), "{out}");
    let t_reload = Instant::now();
    assert!(wait_for(Duration::from_secs(30), || frames(&r.seen, t_reload, "door") > 5), "the restarted stages are up");
    let (code, out, _) = ctl(&r.run_dir, &["cameras", "add", &url, "--fps=10"]);
    assert_eq!((code, out.as_str()), (0, "done: camera back added (started capture@back)"), "{out}");
    let t_again = Instant::now();
    assert!(wait_for(Duration::from_secs(60), || frames(&r.seen, t_again, "back") > 5), "back streams again");
    let (_, out, _) = ctl(&r.run_dir, &["--json", "cameras"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = v["cameras"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["door", "yard", "back"]);
    let (code, out, _) = ctl(&r.run_dir, &["cameras", "remove", "yard"]);
    assert_eq!((code, out.as_str()), (0, "done: camera yard removed (stopped capture@yard)"));
}

/// A member of the run's group (`--socket-group`) may change the run; a user outside it may
/// not, and is logged.
#[test]
fn the_runs_group_may_change_it_and_no_one_else() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    if !nix::unistd::geteuid().is_root() {
        println!("skipped: acting as another user needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Other users pass through the test's folder (never write): the run directory is the gate.
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o711)).unwrap();
    let mut cmd = zcpipe_run(d);
    cmd.args(["--instance", "ctl-group", "--source", "testsrc:320x240@10", "--infer", "none", "--no-print"]);
    cmd.args(["--socket-group", "nogroup"]);
    let mut run = Reap(cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap());
    let sock = d.join("run/control.sock");
    assert!(wait_for(Duration::from_secs(30), || sock.exists()
        && camera_pid(d, "cam0").or(stage_pid(d, "capture")).is_some()));
    let mode = |p: &Path| std::os::unix::fs::MetadataExt::mode(&std::fs::metadata(p).unwrap()) & 0o777;
    assert_eq!((mode(&d.join("run")), mode(&sock)), (0o710, 0o660), "the group passes through and may connect");
    let as_user = |gid: u32| {
        let out = zcpipe().args(["ctl", "--run-dir"]).arg(d.join("run")).arg("cameras").uid(65534).gid(gid).output();
        let out = out.unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, out, err) = as_user(65534);
    assert_eq!(code, Some(0), "a member of nogroup: {out} {err}");
    assert!(out.starts_with("cam0") && out.contains("streaming"), "{out}");
    let (code, _, err) = as_user(65533);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("cannot reach the run") || err.contains("Permission denied"), "{err}");
    kill(Pid::from_raw(run.0.id() as i32), Signal::SIGINT).unwrap();
    let status = run.0.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut run.0.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{stderr}");
    println!("EVIDENCE control: uid 65534 in group nogroup answered, outside it refused: {code:?}");
}

//! Network cameras against a real RTSP server: GStreamer's gst-rtsp-server
//! (`scripts/rtsp_server.py`, run by Debian's `/usr/bin/python3`) streaming the bundled
//! H.264 clip on 127.0.0.1, started and killed by each test.
//!
//! (a) detections arrive from the stream; (b) the server killed and started again mid-run:
//! capture reconnects and counts the gap, no stage restarts; (d) the stream comes back at
//! other sizes: re-negotiated (a smaller one goes on at its size, a larger one is scaled to
//! the pool's), no buffer lost; (e) an unreachable camera with credentials: one line, the
//! password nowhere.
//!
//! Every test skips, saying why, when the GStreamer packages are missing
//! (`scripts/setup-test.sh` installs them; `make test` and CI run it).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common;
use common::{
    assert_no_orphans, fake_librga, fake_librknnrt, fake_librockchip_mpp, log_field, root, stage_pid, wait_for, zcpipe,
    zcpipe_run,
};

pub(crate) const CLIP: &str = "tests/data/one-by-one-person-detection.mp4";

/// Whether `/usr/bin/python3` has GStreamer's RTSP server and the elements the server
/// script uses; if not, why (the tests skip then).
pub(crate) fn gst_missing() -> Option<String> {
    let check = r#"import sys, gi
gi.require_version("Gst", "1.0"); gi.require_version("GstRtspServer", "1.0")
from gi.repository import Gst, GstRtspServer
Gst.init(None)
missing = [e for e in ("qtdemux", "h264parse", "rtph264pay") if Gst.ElementFactory.find(e) is None]
sys.exit("missing GStreamer elements: " + ", ".join(missing) if missing else 0)"#;
    match Command::new("/usr/bin/python3").args(["-c", check]).output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(String::from_utf8_lossy(&o.stderr).lines().last().unwrap_or("").to_string()),
        Err(e) => Some(format!("/usr/bin/python3: {e}")),
    }
}

/// Skips the test (returns from it) when the GStreamer packages are missing.
macro_rules! need_gst {
    () => {
        if let Some(why) = gst_missing() {
            eprintln!(
                "SKIP: no GStreamer RTSP server for /usr/bin/python3 ({why}); run scripts/setup-test.sh (apt-get install python3-gi \
                 gir1.2-gst-rtsp-server-1.0 gstreamer1.0-plugins-good gstreamer1.0-plugins-bad)"
            );
            return;
        }
    };
}

/// A free TCP port on 127.0.0.1 (bound, then let go).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A running `scripts/rtsp_server.py`; killed (SIGKILL, by its pid) and reaped on drop.
pub(crate) struct Server {
    child: Child,
}

impl Server {
    /// Starts the server on `port` at `/cam` serving `file` and waits for its `ready` line;
    /// retries while the port is still held by a server just killed.
    pub(crate) fn start(port: u16, file: &Path) -> Server {
        Server::start_as(port, file, None)
    }

    /// As [`Server::start`], requiring RTSP basic authentication as `(user, password)`.
    fn start_as(port: u16, file: &Path, auth: Option<(&str, &str)>) -> Server {
        let t = Instant::now();
        loop {
            let mut c = Command::new("/usr/bin/python3");
            c.arg(root().join("scripts/rtsp_server.py"))
                .args(["--port", &port.to_string(), "--mount", "/cam", "--file"])
                .arg(file);
            if let Some((user, password)) = auth {
                c.args(["--user", user]).env("RTSP_SERVER_PASSWORD", password);
            }
            let mut child = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
            let mut line = String::new();
            BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
            if line.starts_with("ready ") {
                return Server { child };
            }
            let _ = child.wait();
            let mut err = String::new();
            let _ = std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err);
            assert!(t.elapsed() < Duration::from_secs(30), "rtsp_server.py did not start on port {port}: {line}{err}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Kills the server (SIGKILL by pid) and reaps it.
    fn kill(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A `zcpipe run` in the background: its JSON lines on stdout collected by a thread, its
/// stderr read to the end by another; SIGKILLed on drop if still running.
pub(crate) struct Run {
    child: Child,
    lines: Arc<Mutex<Vec<Value>>>,
    out: Option<std::thread::JoinHandle<()>>,
    err: Option<std::thread::JoinHandle<String>>,
}

impl Run {
    pub(crate) fn start(dir: &Path, args: &[&str]) -> Run {
        Run::spawn(zcpipe_run(dir).args(args))
    }

    /// Starts `cmd` (a [`zcpipe_run`] with its flags and environment).
    fn spawn(cmd: &mut Command) -> Run {
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take().unwrap();
        let l = lines.clone();
        let out = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    l.lock().unwrap().push(v);
                }
            }
        });
        let mut stderr = child.stderr.take().unwrap();
        let err = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
            s
        });
        Run { child, lines, out: Some(out), err: Some(err) }
    }

    fn frames(&self) -> usize {
        self.lines.lock().unwrap().iter().filter(|v| v["type"] == "frame").count()
    }

    /// Waits up to `limit` for `n` frame lines in all; whether they came.
    fn wait_frames(&self, n: usize, limit: Duration) -> bool {
        wait_for(limit, || self.frames() >= n)
    }

    /// Ends the run with SIGINT and returns its exit status, stderr and JSON lines.
    fn stop(mut self) -> (std::process::ExitStatus, String, Vec<Value>) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), nix::sys::signal::Signal::SIGINT)
            .unwrap();
        self.finish()
    }

    /// Waits for the run to end by itself.
    pub(crate) fn finish(&mut self) -> (std::process::ExitStatus, String, Vec<Value>) {
        let status = self.child.wait().unwrap();
        self.out.take().unwrap().join().unwrap();
        let err = self.err.take().unwrap().join().unwrap();
        (status, err, self.lines.lock().unwrap().clone())
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if self.err.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn summary(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap()
}

/// Makes `name` in `dir`: 30 s of the bundled clip at `size` (`WxH`), H.264 with a key frame
/// every second (libx264; `None` if this ffmpeg has no H.264 encoder).
fn clip_at(dir: &Path, name: &str, size: &str) -> Option<PathBuf> {
    let enc = Command::new("ffmpeg").args(["-hide_banner", "-encoders"]).output().unwrap();
    if !String::from_utf8_lossy(&enc.stdout).contains("libx264") {
        return None;
    }
    let out = dir.join(name);
    let st = Command::new("ffmpeg")
        .args(["-nostdin", "-loglevel", "error", "-y", "-t", "30", "-i"])
        .arg(root().join(CLIP))
        .args([
            "-vf",
            &format!("scale={}", size.replace('x', ":")),
            "-c:v",
            "libx264",
            "-g",
            "10",
            "-pix_fmt",
            "yuv420p",
            "-an",
        ])
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success(), "ffmpeg could not make {name}");
    Some(out)
}

/// (a) `zcpipe run --source rtsp://...` with the ONNX detector: frames arrive from the
/// stream, at its size, and the clip's person is found (they walk in after about 6 s: 100
/// frames at the clip's 10 fps).
#[cfg(feature = "onnx")]
#[test]
fn detections_arrive_from_an_rtsp_camera() {
    need_gst!();
    let port = free_port();
    let _server = Server::start(port, &root().join(CLIP));
    let dir = tempfile::tempdir().unwrap();
    let url = format!("rtsp://127.0.0.1:{port}/cam");
    let mut run = Run::start(
        dir.path(),
        &["--source", &url, "--frames", "100", "--infer", "onnx", "--json", "--stats-interval", "0"],
    );
    let (status, err, lines) = run.finish();
    assert!(status.success(), "{status}: {err}");
    assert_no_orphans(dir.path());
    let frames: Vec<&Value> = lines.iter().filter(|v| v["type"] == "frame").collect();
    assert!(frames.len() >= 50, "{} frame lines of 100 captured: {err}", frames.len());
    for f in &frames {
        assert_eq!((f["width"].as_u64(), f["height"].as_u64()), (Some(768), Some(432)), "{f}");
    }
    let persons: Vec<f64> = frames
        .iter()
        .flat_map(|f| f["detections"].as_array().unwrap().iter())
        .filter(|d| d["label"] == "person")
        .map(|d| d["score"].as_f64().unwrap())
        .collect();
    let best = persons.iter().copied().fold(0.0, f64::max);
    eprintln!(
        "EVIDENCE rtsp: {} frames from rtsp://127.0.0.1:{port}/cam, {} person detections, best score {best:.3}",
        frames.len(),
        persons.len()
    );
    assert!(best >= 0.5, "no person with score >= 0.5 in {} frames: {persons:?}", frames.len());
    let s = summary(dir.path());
    let cap = &s["stages"]["capture"]["extra"];
    assert_eq!(cap["url"], url.as_str(), "{cap}");
    assert_eq!((cap["stream_width"].as_u64(), cap["stream_height"].as_u64()), (Some(768), Some(432)), "{cap}");
    assert_eq!(cap["rtsp_transport"], "tcp", "{cap}");
    assert_eq!(cap["reconnects"], 0, "{cap}");
    assert_eq!(cap["buffers_still_out"], 0, "{cap}");
}

/// (b) The server is killed (SIGKILL) and started again on the same port mid-run: capture
/// says so once, reconnects, counts the gap (reconnects, seconds, frames lost) in the
/// summary, the first frame after it carries a notice for the clients; no stage restarted
/// and every stage kept its pid; the run ends 0.
#[test]
fn capture_reconnects_when_the_server_comes_back() {
    need_gst!();
    let port = free_port();
    let server = Server::start(port, &root().join(CLIP));
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = format!("rtsp://127.0.0.1:{port}/cam");
    let run = Run::start(d, &["--source", &url, "--infer", "none", "--json", "--stats-interval", "0"]);
    assert!(run.wait_frames(10, Duration::from_secs(60)), "no frames from the RTSP server");
    // A client on the detections socket sees the notice.
    let mut watch = zcpipe()
        .arg("watch")
        .arg(d.join("detections.sock"))
        .args(["--json", "--reconnect-for", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let watch_out = watch.stdout.take().unwrap();
    let notices = Arc::new(Mutex::new(Vec::<Value>::new()));
    let n = notices.clone();
    let watch_reader = std::thread::spawn(move || {
        for line in BufReader::new(watch_out).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                if v["type"] == "notice" {
                    n.lock().unwrap().push(v);
                }
            }
        }
    });
    let stages = ["capture", "scale", "infer", "publish"];
    let pids: Vec<i32> = stages.iter().map(|s| stage_pid(d, s).unwrap_or_else(|| panic!("no {s} stage"))).collect();
    std::thread::sleep(Duration::from_millis(500));
    server.kill();
    let before = run.frames();
    std::thread::sleep(Duration::from_secs(3));
    // Still up: every stage, with its pid, while the camera is away.
    for (s, p) in stages.iter().zip(&pids) {
        assert_eq!(stage_pid(d, s), Some(*p), "{s} kept its pid while the camera was away");
    }
    let _server = Server::start(port, &root().join(CLIP));
    assert!(
        run.wait_frames(before + 10, Duration::from_secs(90)),
        "no frames after the server came back ({before} before)"
    );
    assert!(
        wait_for(Duration::from_secs(10), || !notices.lock().unwrap().is_empty()),
        "no restart notice reached the client"
    );
    for (s, p) in stages.iter().zip(&pids) {
        assert_eq!(stage_pid(d, s), Some(*p), "{s} kept its pid through the reconnect");
    }
    let (status, err, lines) = run.stop();
    let _ = watch.kill();
    let _ = watch.wait();
    watch_reader.join().unwrap();
    assert!(status.success(), "{status}: {err}");
    assert!(err.contains("  reconnects: the camera 1 time(s), "), "the summary says the camera reconnected: {err}");
    assert_no_orphans(d);
    let s = summary(d);
    assert_eq!(s["restarts"], serde_json::json!({}), "no stage restarted: {}", s["restarts"]);
    let cap = &s["stages"]["capture"]["extra"];
    assert!(cap["reconnects"].as_u64().unwrap() >= 1, "{cap}");
    assert!(cap["stream_drops"].as_u64().unwrap() >= 1, "{cap}");
    let gap = cap["gap_s"].as_f64().unwrap();
    assert!(gap >= 3.0, "the gap spans the 3 s the server was away: {cap}");
    let lost = cap["frames_lost"].as_u64().unwrap();
    assert!(
        lost as f64 >= (gap * 10.0).floor() - 2.0 && lost as f64 <= gap * 10.0 + 1.0,
        "frames lost at the clip's 10 fps over {gap} s: {cap}"
    );
    assert_eq!(cap["buffers_still_out"], 0, "{cap}");
    let drops: Vec<&str> = err.lines().filter(|l| l.contains("stream dropped")).collect();
    assert_eq!(drops.len(), 1, "one warning for the drop:\n{err}");
    assert!(err.contains("back after"), "{err}");
    // Said as it happened: the server went away (not a decoder's last warning), the camera
    // reconnected (nothing restarted), and no advice to raise the tracker's keep-alive.
    assert!(
        drops[0].contains("(the server closed the stream after")
            || drops[0].contains("(the connection was reset after"),
        "{}",
        drops[0]
    );
    assert!(err.contains(" reconnected after ") && !err.contains("raise --track-keepalive"), "{err}");
    let notice = notices.lock().unwrap()[0].clone();
    assert_eq!(
        (notice["stage"].as_str(), notice["event"].as_str(), notice["frames_lost"].as_u64()),
        (Some("capture"), Some("reconnected"), Some(lost)),
        "one gap, its loss in the notice: {notice}"
    );
    assert!(notice["gap_s"].as_f64().is_some_and(|g| g >= 3.0), "the gap in the notice: {notice}");
    let frames = lines.iter().filter(|v| v["type"] == "frame").count();
    for l in err.lines().filter(|l| l.contains("camera rtsp://")) {
        eprintln!("EVIDENCE rtsp reconnect log: {l}");
    }
    eprintln!("EVIDENCE rtsp reconnect: server killed and restarted; {frames} frames in all, gap {gap:.1} s, {lost} frames lost, reconnects {}, no stage restarted", cap["reconnects"]);
}

/// (d) The camera comes back at another size (the server restarted with other files at the
/// same URL): a smaller stream goes on at its own size, a larger one is scaled by ffmpeg to
/// the pool's; each said once, no stage restarts, no buffer lost.
#[test]
fn a_stream_that_changes_size_is_renegotiated() {
    need_gst!();
    let tmp = tempfile::tempdir().unwrap();
    let (Some(small), Some(large)) =
        (clip_at(tmp.path(), "small.mp4", "384x216"), clip_at(tmp.path(), "large.mp4", "1280x720"))
    else {
        eprintln!("SKIP: this ffmpeg has no libx264 to make the clips of other sizes");
        return;
    };
    let port = free_port();
    let mut server = Server::start(port, &root().join(CLIP));
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = format!("rtsp://127.0.0.1:{port}/cam");
    let run = Run::start(d, &["--source", &url, "--infer", "none", "--json", "--stats-interval", "0"]);
    assert!(run.wait_frames(5, Duration::from_secs(60)), "no frames from the RTSP server");
    let pids: Vec<i32> = ["capture", "scale", "infer", "publish"].iter().map(|s| stage_pid(d, s).unwrap()).collect();
    for (clip, want) in [(&small, (384, 216)), (&large, (768, 432))] {
        server.kill();
        let before = run.frames();
        server = Server::start(port, clip);
        // Five frames at the size this clip comes at, after the restart.
        let at_size = || {
            let l = run.lines.lock().unwrap();
            l.iter()
                .filter(|v| v["type"] == "frame")
                .skip(before)
                .filter(|v| (v["width"].as_u64(), v["height"].as_u64()) == (Some(want.0), Some(want.1)))
                .count()
        };
        assert!(
            wait_for(Duration::from_secs(90), || at_size() >= 5),
            "no {}x{} frames from {}",
            want.0,
            want.1,
            clip.display()
        );
    }
    for (s, p) in ["capture", "scale", "infer", "publish"].iter().zip(&pids) {
        assert_eq!(stage_pid(d, s), Some(*p), "{s} kept its pid through the size changes");
    }
    let (status, err, lines) = run.stop();
    drop(server);
    assert!(status.success(), "{status}: {err}");
    assert_no_orphans(d);
    let sizes: Vec<(u64, u64)> = lines
        .iter()
        .filter(|v| v["type"] == "frame")
        .map(|v| (v["width"].as_u64().unwrap(), v["height"].as_u64().unwrap()))
        .collect();
    let mut runs: Vec<(u64, u64)> = sizes.clone();
    runs.dedup();
    assert_eq!(
        runs,
        [(768, 432), (384, 216), (768, 432)],
        "frames at the first size, the smaller stream's own, then the larger scaled to the pool's:\n{err}"
    );
    let s = summary(d);
    assert_eq!(s["restarts"], serde_json::json!({}), "{}", s["restarts"]);
    let cap = &s["stages"]["capture"]["extra"];
    assert_eq!(cap["size_changes"], 2, "{cap}");
    assert_eq!((cap["stream_width"].as_u64(), cap["stream_height"].as_u64()), (Some(1280), Some(720)), "{cap}");
    assert_eq!((cap["pool_width"].as_u64(), cap["pool_height"].as_u64()), (Some(768), Some(432)), "{cap}");
    assert_eq!(cap["buffers_still_out"], 0, "no buffer lost: {cap}");
    assert!(err.contains("the stream is now 384x216 (was 768x432): re-negotiated"), "{err}");
    assert!(
        err.contains("the stream is 1280x720, larger than the pool's 768x432 buffers: ffmpeg scales it to 768x432"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    eprintln!("EVIDENCE rtsp size change: 768x432 -> 384x216 (own size) -> 1280x720 (scaled to 768x432); {} frames, no restart", sizes.len());
}

/// (e) An unreachable camera whose URL has a password: the run fails within seconds with
/// one error line naming the URL redacted, and the password is nowhere in its output (nor
/// in the plan of `--dry-run`).
#[test]
fn an_unreachable_camera_fails_in_one_line_without_its_password() {
    // Needs ffmpeg only: nothing listens on port 1.
    let dir = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let out = zcpipe_run(dir.path())
        .args(["--source", "rtsp://user:secret@127.0.0.1:1/x", "--infer", "none"])
        .output()
        .unwrap();
    let took = t.elapsed();
    assert_no_orphans(dir.path());
    let (o, e) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "{e}");
    assert!(!e.contains("panicked"), "{e}");
    assert!(!o.contains("secret") && !e.contains("secret"), "the password leaked:\n{o}\n{e}");
    let errors: Vec<&str> = e.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(errors.len(), 1, "one error line:\n{e}");
    assert!(errors[0].contains("rtsp://user:***@127.0.0.1:1/x"), "{}", errors[0]);
    assert!(
        errors[0].contains(": the camera refused the connection; check the URL"),
        "the reason, named: {}",
        errors[0]
    );
    eprintln!("EVIDENCE rtsp bad input ({:.1} s): {}", took.as_secs_f64(), errors[0]);
    // The plan shows the source redacted too.
    let plan = zcpipe()
        .args(["run", "--dry-run", "--infer", "none", "--source", "rtsp://user:secret@127.0.0.1:1/x"])
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&plan.stdout), String::from_utf8_lossy(&plan.stderr));
    assert!(text.contains("rtsp://user:***@127.0.0.1:1/x") && !text.contains("secret"), "{text}");
}

/// A camera that requires a password, its URL given in the environment (as from a 0600
/// environment file): frames flow, and while they do no process's command line holds the
/// password, as another user sees them with `ps -eo args` (uid 65534 when the tests run as
/// root): not `zcpipe run`'s, not the capture stage's, not ffmpeg's. A wrong password is
/// one line with the server's 401, the password masked.
#[test]
fn an_authenticated_camera_streams_and_no_command_line_holds_its_password() {
    need_gst!();
    const PASSWORD: &str = "Pw-7f3a9c-secret";
    let port = free_port();
    let _server = Server::start_as(port, &root().join(CLIP), Some(("viewer", PASSWORD)));
    let dir = tempfile::tempdir().unwrap();
    let url = format!("rtsp://viewer:{PASSWORD}@127.0.0.1:{port}/cam");
    let mut cmd = zcpipe_run(dir.path());
    cmd.env("ZCPIPE_SOURCE", &url).args(["--infer", "none", "--frames", "200", "--json", "--stats-interval", "0"]);
    let run = Run::spawn(&mut cmd);
    assert!(run.wait_frames(20, Duration::from_secs(60)), "no frames from the authenticated camera");
    let mut ps = Command::new("ps");
    ps.args(["-eo", "args"]);
    let other = nix::unistd::geteuid().is_root();
    if other {
        std::os::unix::process::CommandExt::uid(&mut ps, 65534);
    }
    let seen = String::from_utf8_lossy(&ps.output().unwrap().stdout).into_owned();
    let (_, err, lines) = run.stop();
    let ours: Vec<&str> =
        seen.lines().filter(|l| l.contains(&*dir.path().to_string_lossy()) || l.starts_with("ffmpeg")).collect();
    assert!(ours.iter().any(|l| l.contains(" stage capture ")), "the capture stage is not in ps:\n{seen}");
    assert!(ours.iter().any(|l| l.starts_with("ffmpeg") && l.contains("-i pipe:0")), "no ffmpeg in ps:\n{seen}");
    assert!(!seen.contains(PASSWORD) && !seen.contains("viewer:"), "a command line holds the password:\n{seen}");
    assert!(!err.contains(PASSWORD), "{err}");
    assert!(lines.iter().filter(|v| v["type"] == "frame").count() >= 20);
    eprintln!(
        "EVIDENCE rtsp auth: {} frames; ps -eo args as {}: {} zcpipe/ffmpeg lines, the password in none, e.g. {:?}",
        lines.iter().filter(|v| v["type"] == "frame").count(),
        if other { "uid 65534" } else { "the same user" },
        ours.len(),
        ours.iter().find(|l| l.starts_with("ffmpeg") && l.contains("-i pipe:0")).unwrap_or(&"")
    );
    // The wrong password: the server's answer in one line, the password not in it.
    let wrong = format!("rtsp://viewer:Wrong-9b2d@127.0.0.1:{port}/cam");
    let out = zcpipe_run(dir.path()).env("ZCPIPE_SOURCE", &wrong).args(["--infer", "none"]).output().unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && !e.contains("Wrong-9b2d"), "{e}");
    let errors: Vec<&str> = e.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(errors.len(), 1, "{e}");
    assert!(
        errors[0].contains("rtsp://viewer:***@127.0.0.1")
            && errors[0].contains(": the camera refused the credentials (401);"),
        "{}",
        errors[0]
    );
    eprintln!("EVIDENCE rtsp wrong password: {}", errors[0]);
}

/// `--wait-for-camera`: the run starts without the camera (no error, every stage up, none
/// restarted by the watchdog while capture waits), and frames flow once the server is there.
#[test]
fn wait_for_camera_starts_without_it_and_connects_later() {
    need_gst!();
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = format!("rtsp://127.0.0.1:{port}/cam");
    let run = Run::start(
        d,
        &[
            "--source",
            &url,
            "--wait-for-camera",
            "--size",
            "768x432",
            "--infer",
            "none",
            "--json",
            "--stats-interval",
            "0",
        ],
    );
    assert!(
        wait_for(Duration::from_secs(60), || stage_pid(d, "publish").is_some()),
        "the pipeline did not start without its camera"
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(run.frames(), 0);
    let _server = Server::start(port, &root().join(CLIP));
    assert!(run.wait_frames(5, Duration::from_secs(90)), "no frames once the camera was there");
    let (status, err, lines) = run.stop();
    assert!(status.success(), "{status}: {err}");
    assert_no_orphans(d);
    assert!(err.contains("is not reachable yet") && err.contains("--wait-for-camera"), "{err}");
    assert!(lines.iter().filter(|v| v["type"] == "frame").all(|v| v["width"] == 768 && v["height"] == 432));
    let s = summary(d);
    assert_eq!(s["restarts"], serde_json::json!({}), "{}", s["restarts"]);
    let cap = &s["stages"]["capture"]["extra"];
    assert!(cap["failed_attempts"].as_u64().unwrap() >= 1, "{cap}");
    assert_eq!(cap["reconnects"], 0, "the first connection is no reconnect: {cap}");
}

/// Frame lines of `camera` in `lines`.
fn frames_of(lines: &Arc<Mutex<Vec<Value>>>, camera: &str) -> usize {
    lines.lock().unwrap().iter().filter(|v| v["type"] == "frame" && v["camera"] == camera).count()
}

/// (c) Two RTSP cameras (one server process each) and a test pattern in one pipeline:
/// results arrive for all three, each line with its camera's name and size; the server of
/// one camera paused by SIGSTOP stops nothing else (the other two keep coming), and that
/// camera comes back after SIGCONT; no stage restarted.
#[test]
fn two_rtsp_cameras_and_a_test_pattern_share_one_pipeline() {
    need_gst!();
    let (p1, p2) = (free_port(), free_port());
    let front = Server::start(p1, &root().join(CLIP));
    let _door = Server::start(p2, &root().join(CLIP));
    let dir = tempfile::tempdir().unwrap();
    let (u1, u2) = (format!("front=rtsp://127.0.0.1:{p1}/cam"), format!("door=rtsp://127.0.0.1:{p2}/cam"));
    let run = Run::start(
        dir.path(),
        &[
            "--source",
            &u1,
            "--source",
            &u2,
            "--source",
            "desk=testsrc:320x240@10",
            "--infer",
            "none",
            "--scaler",
            "cpu",
            "--json",
            "--stats-interval",
            "0",
        ],
    );
    let all = |n: usize| ["front", "door", "desk"].iter().all(|c| frames_of(&run.lines, c) >= n);
    assert!(
        wait_for(Duration::from_secs(60), || all(10)),
        "all three cameras flow: {:?}",
        ["front", "door", "desk"].map(|c| frames_of(&run.lines, c))
    );

    let pid = nix::unistd::Pid::from_raw(front.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let paused = Instant::now();
    std::thread::sleep(Duration::from_millis(500));
    let before = ["front", "door", "desk"].map(|c| frames_of(&run.lines, c));
    let others_go_on = wait_for(Duration::from_secs(20), || {
        frames_of(&run.lines, "door") >= before[1] + 20 && frames_of(&run.lines, "desk") >= before[2] + 20
    });
    let front_while_paused = frames_of(&run.lines, "front") - before[0];
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    let paused = paused.elapsed().as_secs_f64();
    assert!(
        others_go_on,
        "door and desk go on while front's server is paused: {before:?} -> {:?}",
        ["front", "door", "desk"].map(|c| frames_of(&run.lines, c))
    );
    assert!(
        front_while_paused <= 3,
        "{front_while_paused} front frames while its server was paused (at most what was in flight)"
    );
    let resumed = frames_of(&run.lines, "front");
    assert!(
        wait_for(Duration::from_secs(60), || frames_of(&run.lines, "front") >= resumed + 10),
        "front comes back after SIGCONT"
    );

    let (status, err, lines) = run.stop();
    assert!(status.success(), "{status}: {err}");
    assert_no_orphans(dir.path());
    for f in lines.iter().filter(|v| v["type"] == "frame") {
        let size = (f["width"].as_u64().unwrap(), f["height"].as_u64().unwrap());
        let want = if f["camera"] == "desk" { (320, 240) } else { (768, 432) };
        assert_eq!(size, want, "{f}");
    }
    let s = summary(dir.path());
    assert_eq!(s["restarts"], serde_json::json!({}), "no stage restarted: {}", s["restarts"]);
    for c in ["front", "door", "desk"] {
        assert!(s["cameras"][c]["published"].as_u64().unwrap() >= 10, "{c}: {}", s["cameras"][c]);
    }
    eprintln!(
        "EVIDENCE rtsp x2 + testsrc: published front {}, door {}, desk {}; front's server paused {paused:.1} s, {front_while_paused} front frames meanwhile",
        s["cameras"]["front"]["published"], s["cameras"]["door"]["published"], s["cameras"]["desk"]["published"]
    );
}

/// (f) An RTSP camera decoded by (the fake) MPP, scaled by (the fake) RGA and detected by
/// (the fake) RKNN, with the server killed and started again mid-run: the stream's pictures
/// land in the 24 capture buffers committed to MPP once, RGA imports each of them once, no
/// CPU touches a decoded picture, the drop is one warning and a reconnect (the decoder is
/// reset, not re-created, and no stage restarts), and every MPP frame is released at the end.
#[test]
fn an_rtsp_camera_decoded_by_mpp_reaches_rga_and_rknn_and_survives_a_drop() {
    need_gst!();
    let port = free_port();
    let server = Server::start(port, &root().join(CLIP));
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = format!("rtsp://127.0.0.1:{port}/cam");
    let mut c = zcpipe_run(d);
    c.env("ZCPIPE_LIBMPP", fake_librockchip_mpp())
        .env("ZCPIPE_FAKE_MPP_LOG", d.join("mpp.log"))
        .env("ZCPIPE_LIBRGA", fake_librga())
        .env("ZCPIPE_FAKE_RGA_LOG", d.join("rga.log"))
        .env("ZCPIPE_LIBRKNNRT", fake_librknnrt())
        .env("ZCPIPE_FAKE_RKNN_LOG", d.join("rknn.log"))
        .env("ZCPIPE_FAKE_RKNN_ONNX", root().join("models/yolox_nano.onnx"));
    // `--fps 5` of the clip's 10: MPP decodes every picture, about half are published.
    let args = [
        "--source",
        &url,
        "--decoder",
        "mpp",
        "--fps",
        "5",
        "--scaler",
        "rga",
        "--infer",
        "rknn",
        "--model",
        "models/yolox_nano_416_rk3588.rknn",
        "--json",
        "--stats-interval",
        "0",
    ];
    let run = Run::spawn(c.args(args));
    assert!(run.wait_frames(10, Duration::from_secs(60)), "no frames from the RTSP server through MPP");
    let stages = ["capture", "scale", "infer", "publish"];
    let pids: Vec<i32> = stages.iter().map(|s| stage_pid(d, s).unwrap_or_else(|| panic!("no {s} stage"))).collect();
    server.kill();
    let before = run.frames();
    std::thread::sleep(Duration::from_secs(2));
    let _server = Server::start(port, &root().join(CLIP));
    assert!(
        run.wait_frames(before + 10, Duration::from_secs(90)),
        "no frames after the server came back ({before} before)"
    );
    for (s, p) in stages.iter().zip(&pids) {
        assert_eq!(stage_pid(d, s), Some(*p), "{s} kept its pid through the reconnect");
    }
    let (status, err, lines) = run.stop();
    assert!(status.success(), "{status}: {err}");
    assert_no_orphans(d);
    assert!(err.contains("decoder: --decoder mpp:") && err.contains("decoded by MPP, live, tcp"), "{err}");
    let s = summary(d);
    assert_eq!(s["restarts"], serde_json::json!({}), "no stage restarted: {}", s["restarts"]);
    let cap = &s["stages"]["capture"]["extra"];
    assert_eq!(
        (cap["decoder"].as_str(), cap["codec"].as_str(), cap["width"].as_u64(), cap["height"].as_u64()),
        (Some("mpp"), Some("h264"), Some(768), Some(432)),
        "{cap}"
    );
    assert!(cap["reconnects"].as_u64().unwrap() >= 1 && cap["stream_drops"].as_u64().unwrap() >= 1, "{cap}");
    assert_eq!(
        (cap["cpu_accesses"].as_u64(), cap["frames_held"].as_u64(), cap["buffers_still_out"].as_u64()),
        (Some(0), Some(0), Some(0)),
        "{cap}"
    );
    let (published, skipped) = (cap["pictures"].as_u64().unwrap(), cap["rate_dropped"].as_u64().unwrap());
    assert!(skipped * 2 >= published, "--fps 5 of a 10 fps stream drops about as many pictures as it publishes: {cap}");
    let mpp = std::fs::read_to_string(d.join("mpp.log")).unwrap();
    let rga = std::fs::read_to_string(d.join("rga.log")).unwrap();
    let call = |log: &str, name: &str| {
        log.lines()
            .filter(|l| l.split(' ').find(|w| !w.starts_with("pid=")) == Some(name))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let commits: std::collections::BTreeSet<String> =
        call(&mpp, "mpp_buffer_commit").iter().map(|l| log_field(l, "ino").to_string()).collect();
    assert_eq!(commits.len(), 24, "{mpp}");
    let imported: Vec<String> = call(&rga, "importbuffer_fd")
        .iter()
        .map(|l| log_field(l, "ino").to_string())
        .filter(|i| commits.contains(i))
        .collect();
    assert_eq!(imported.len(), 24, "RGA imports each capture buffer once, across the reconnect too: {imported:?}");
    assert!(!call(&mpp, "reset").is_empty(), "the decoder was reset at the drop: {mpp}");
    assert!(call(&mpp, "mpp_destroy").iter().any(|l| l.contains(" unreleased_frames=0 buffers_held=0")), "{mpp}");
    assert!(!mpp.contains("violation"), "{mpp}");
    let frames = lines.iter().filter(|v| v["type"] == "frame").count();
    eprintln!(
        "EVIDENCE rtsp mpp: {frames} frames from {url} decoded by MPP into 24 committed buffers, each imported by RGA once; server killed and restarted: reconnects {}, no stage restarted; capture cpu_accesses 0",
        cap["reconnects"]
    );
}

//! The whole multi-process pipeline, run as a user runs it: `zcpipe run ...`.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;
use zcpipe::core::frame::monotonic_ns;

use crate::common;
use common::{assert_no_orphans, root, stage_pid, zcpipe, zcpipe_run};

fn data(p: &str) -> PathBuf {
    root().join(p)
}

/// Runs `zcpipe run` with everything it leaves in `dir`, then checks nothing is left.
fn run(dir: &Path, args: &[&str]) -> Output {
    let out = zcpipe_run(dir).args(args).output().unwrap();
    assert_no_orphans(dir);
    out
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

fn iou(a: &[f64], b: &[f64]) -> f64 {
    let iw = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
    let ih = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let inter = iw * ih;
    inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)
}

/// Checks the frame lines of one run (in the order published, read after the run ended at
/// `ended_ns`, CLOCK_MONOTONIC): their keys, and their latencies (each rounded to 0.1 µs)
/// against what they are by construction: `total` is the sum of the four stages (so all
/// five come from one set of stamps, none missing); scale, infer and publish each include a
/// hand-off from another process through a ring, so are above 0 (capture may round to 0: a
/// host source stamps its frames just before handing them on); a line was built
/// (`timestamp_ns + total`) after the line before it and before the run ended. Returns the
/// largest `publish` and `total`, µs.
fn check_frame_lines(frames: &[Value], ended_ns: u64) -> (f64, f64) {
    let mut built_before = 0.0f64;
    let (mut publish, mut total) = (0.0f64, 0.0f64);
    for f in frames {
        assert_eq!(f["type"], "frame", "{f}");
        // `skipped` only after frames the scheduler passed over (a newer one came first).
        let keys: Vec<&str> = f.as_object().unwrap().keys().map(|k| k.as_str()).filter(|k| *k != "skipped").collect();
        assert_eq!(
            keys,
            ["camera", "detections", "height", "latency_us", "seq", "timestamp_ns", "type", "width"],
            "{f}"
        );
        assert_eq!(f["camera"], "cam0", "one unnamed camera: {f}");
        let keys: Vec<&str> = f["latency_us"].as_object().unwrap().keys().map(|k| k.as_str()).collect();
        assert_eq!(keys, ["capture", "infer", "publish", "scale", "total"], "{f}");
        let l = |k: &str| f["latency_us"][k].as_f64().unwrap_or_else(|| panic!("latency_us.{k} in {f}"));
        assert!(l("capture") >= 0.0, "{f}");
        for k in ["scale", "infer", "publish"] {
            assert!(l(k) > 0.0, "latency_us.{k} of a stage behind a ring: {f}");
        }
        let sum = l("capture") + l("scale") + l("infer") + l("publish");
        assert!(
            (l("total") - sum).abs() <= 0.25 + 1e-6,
            "total {} is the stages' sum {sum} (5 roundings of 0.05 µs): {f}",
            l("total")
        );
        let built = f["timestamp_ns"].as_u64().unwrap() as f64 + l("total") * 1000.0;
        assert!(built >= built_before - 100.0, "lines are built in the order they are published: {f}");
        assert!(built <= ended_ns as f64 + 50.0, "a line was built before the run ended: {f}");
        built_before = built;
        publish = publish.max(l("publish"));
        total = total.max(l("total"));
    }
    (publish, total)
}

/// Reference detections with score >= 0.5 from ../shared/data/PROVENANCE.md (onnxruntime,
/// cv2 INTER_LINEAR), in the image source's (sorted) order.
/// One photo: file name, width, height, and its detections as (label, score, box).
type Reference = (&'static str, u32, u32, Vec<(&'static str, f64, [f64; 4])>);

fn references() -> Vec<Reference> {
    vec![
        ("astronaut.png", 512, 512, vec![("person", 0.926, [11., 20., 369., 507.])]),
        ("chelsea.png", 451, 300, vec![("cat", 0.621, [-13., -16., 449., 300.])]),
        (
            "coffee.png",
            600,
            400,
            vec![("cup", 0.898, [162., 16., 421., 295.]), ("dining table", 0.738, [0., 0., 598., 398.])],
        ),
        (
            "dog.jpg",
            768,
            576,
            vec![
                ("dog", 0.855, [133., 207., 326., 543.]),
                ("bicycle", 0.803, [52., 137., 572., 424.]),
                ("car", 0.798, [466., 78., 692., 171.]),
            ],
        ),
        (
            "person.jpg",
            640,
            424,
            vec![
                ("person", 0.881, [188., 97., 276., 371.]),
                ("dog", 0.872, [62., 263., 200., 348.]),
                ("horse", 0.871, [404., 138., 602., 343.]),
            ],
        ),
        ("rocket.jpg", 640, 427, vec![]),
    ]
}

#[cfg(feature = "onnx")]
#[test]
fn detects_reference_objects_in_the_shipped_photos() {
    let dir = tempfile::tempdir().unwrap();
    let photos = dir.path().join("photos");
    std::fs::create_dir(&photos).unwrap();
    for (name, ..) in references() {
        std::fs::copy(data(&format!("tests/data/{name}")), photos.join(name)).unwrap();
    }
    let out = run(
        dir.path(),
        &[
            "--source",
            &format!("image:{}", photos.display()),
            "--frames",
            "6",
            "--ring-policy",
            "block",
            "--json",
            "--stats-interval",
            "0",
        ],
    );
    let ended = monotonic_ns();
    assert!(out.status.success(), "{}", stderr(&out));
    let frames: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["type"] == "frame")
        .collect();
    assert_eq!(frames.len(), 6, "one line per photo");
    let (line_publish, line_total) = check_frame_lines(&frames, ended);
    for (i, (name, w, h, refs)) in references().into_iter().enumerate() {
        let f = &frames[i];
        assert_eq!(f["seq"], i as u64);
        assert_eq!((f["width"].as_u64().unwrap() as u32, f["height"].as_u64().unwrap() as u32), (w, h), "{name}");
        let dets = f["detections"].as_array().unwrap();
        if refs.is_empty() {
            assert!(dets.is_empty(), "{name}: expected nothing, got {dets:?}");
            eprintln!("EVIDENCE photos: {name}: no detection (reference: none)");
        }
        for (label, score, bx) in refs {
            let best = dets
                .iter()
                .filter(|d| d["label"] == label)
                .map(|d| {
                    let b: Vec<f64> = d["box"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
                    (iou(&b, &bx), d["score"].as_f64().unwrap())
                })
                .max_by(|a, b| a.0.total_cmp(&b.0));
            let (io, s) = best.unwrap_or_else(|| panic!("{name}: no {label} in {dets:?}"));
            assert!(io >= 0.7, "{name}: {label} IoU {io:.3} < 0.7");
            assert!((s - score).abs() <= 0.1, "{name}: {label} score {s:.3} vs reference {score}");
            eprintln!(
                "EVIDENCE photos: {name} {label} score {s:.3} (reference {score}), IoU {io:.3} with the reference box"
            );
        }
    }
    let summary: Value = serde_json::from_slice(&std::fs::read(dir.path().join("summary.json")).unwrap()).unwrap();
    for (stage, ring) in [("capture", 6), ("scale", 6), ("infer", 6)] {
        let r = &summary["stages"][stage]["output_ring"];
        assert_eq!(r["produced"], ring, "{stage}: {r}");
        assert_eq!(r["consumed"], ring, "{stage}: {r}");
        assert_eq!(r["dropped"], 0, "{stage}: block policy drops nothing");
    }
    assert_eq!(summary["stages"]["publish"]["latency"]["total"]["count"], 6);
    // The stage's histograms span the line's send too, so hold at least what a line carries
    // (they record whole µs, rounded: 0.5 µs; the line 0.05 µs).
    for (k, line_max) in [("publish", line_publish), ("total", line_total)] {
        let max = summary["stages"]["publish"]["latency"][k]["max_us"].as_f64().unwrap();
        assert!(max + 0.55 >= line_max, "{k}: histogram max {max} µs < a line's {line_max} µs");
    }
    assert!(stderr(&out).contains("zcpipe summary"), "{}", stderr(&out));
}

#[test]
fn transport_only_run_counters_add_up() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        dir.path(),
        &["--source", "testsrc:640x480@200", "--frames", "60", "--infer", "none", "--json", "--stats-interval", "0.5"],
    );
    let ended = monotonic_ns();
    assert!(out.status.success(), "{}", stderr(&out));
    let s: Value = serde_json::from_slice(&std::fs::read(dir.path().join("summary.json")).unwrap()).unwrap();
    let st = &s["stages"];
    assert_eq!(st["capture"]["frames_out"], 60);
    let lines = String::from_utf8_lossy(&out.stdout).lines().count() as u64;
    let mut upstream_out = 60;
    for stage in ["capture", "scale", "infer"] {
        let r = &st[stage]["output_ring"];
        let g = |k: &str| r[k].as_u64().unwrap();
        // The NPU scheduler's skips: a frame replaced by a newer one of its camera while it
        // waited (video), or past --max-age, is not inferred, and counted there.
        let sched = &st[stage]["extra"]["cameras"]["cam0"];
        let skipped = ["replaced", "expired"].iter().map(|k| sched[*k].as_u64().unwrap_or(0)).sum::<u64>();
        assert_eq!(g("produced") + skipped, upstream_out, "{stage}: {r} {sched}");
        assert_eq!(g("produced"), g("consumed") + g("dropped") + g("rejected") + g("in_flight"), "{stage}: {r}");
        assert_eq!(g("in_flight"), 0);
        upstream_out = g("consumed");
    }
    assert_eq!(st["publish"]["frames_out"].as_u64().unwrap(), upstream_out);
    assert_eq!(lines, upstream_out, "one JSON line per published frame");
    let frames: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    check_frame_lines(&frames, ended);
    for stage in ["capture", "scale", "infer", "publish"] {
        let e = &st[stage]["extra"];
        assert_eq!(e["open_fds_setup"], e["open_fds_exit"], "{stage} leaks no fd: {e}");
    }
    assert_eq!(st["capture"]["extra"]["buffers_still_out"], 0);
    assert_eq!(st["capture"]["pool"]["outstanding"], 0);
}

/// `--fps max` (here in the source's own spelling, `testsrc:...@max`) with the block policy:
/// every frame goes through every stage as fast as they take it, the pattern is rendered
/// once per pool buffer (the capture stage's CPU does not grow with the frame count), and
/// the counters and fds add up. Speed is for `benches/throughput.sh`, not asserted here.
#[test]
fn unpaced_source_pushes_every_frame_through_under_block() {
    let dir = tempfile::tempdir().unwrap();
    let n = 3000u64;
    let out = run(
        dir.path(),
        &[
            "--source",
            "testsrc:1920x1080@max",
            "--frames",
            &n.to_string(),
            "--scaler",
            "none",
            "--infer",
            "none",
            "--ring-policy",
            "block",
            "--no-print",
            "--stats-interval",
            "0",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let s: Value = serde_json::from_slice(&std::fs::read(dir.path().join("summary.json")).unwrap()).unwrap();
    let st = &s["stages"];
    for stage in ["capture", "scale", "infer"] {
        let r = &st[stage]["output_ring"];
        assert_eq!(
            (r["produced"].as_u64(), r["consumed"].as_u64(), r["dropped"].as_u64()),
            (Some(n), Some(n), Some(0)),
            "{stage}: {r}"
        );
    }
    assert_eq!(st["publish"]["frames_out"], n);
    for stage in ["capture", "scale", "infer", "publish"] {
        let e = &st[stage]["extra"];
        assert_eq!(e["open_fds_setup"], e["open_fds_exit"], "{stage} leaks no fd: {e}");
    }
    let fps = st["publish"]["out_span"]["frames"].as_f64().unwrap()
        / (st["publish"]["out_span"]["last_s"].as_f64().unwrap()
            - st["publish"]["out_span"]["first_s"].as_f64().unwrap());
    eprintln!("EVIDENCE throughput: {n} 1080p frames through four stages unpaced at {fps:.0} fps (transport only; a test run, not a benchmark)");
}

/// Each bad input: non-zero exit, one clear error line naming the thing, no panic.
fn expect_clean_failure(args: &[&str], needles: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), args);
    let err = stderr(&out);
    assert!(!out.status.success(), "{args:?} should fail: {err}");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(lines.len(), 1, "{args:?}: want exactly one error line, got:\n{err}");
    for n in needles {
        assert!(lines[0].contains(n), "{args:?}: error line lacks {n:?}: {}", lines[0]);
    }
}

#[test]
fn missing_source_path_is_one_clear_error() {
    expect_clean_failure(&["--source", "image:/nonexistent/photo.jpg", "--infer", "none"], &["/nonexistent/photo.jpg"]);
    expect_clean_failure(&["--source", "video:/nonexistent/clip.mp4", "--infer", "none"], &["/nonexistent/clip.mp4"]);
    expect_clean_failure(
        &["--source", "v4l2:/dev/video0", "--fps", "max", "--infer", "none"],
        &["--fps max", "host sources"],
    );
    expect_clean_failure(&["--source", "testsrc", "--fps", "fast", "--infer", "none"], &["fast", "or max"]);
}

#[test]
fn unreadable_image_is_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("broken.png");
    std::fs::write(&bad, b"this is not a png").unwrap();
    expect_clean_failure(&["--source", &format!("image:{}", bad.display()), "--infer", "none"], &["broken.png"]);
}

#[cfg(feature = "onnx")]
#[test]
fn truncated_model_is_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("truncated.onnx");
    std::fs::write(&bad, &std::fs::read(data("models/yolox_nano.onnx")).unwrap()[..100_000]).unwrap();
    expect_clean_failure(&["--source", "testsrc", "--model", bad.to_str().unwrap()], &["truncated.onnx", "truncated"]);
}

#[cfg(feature = "onnx")]
#[test]
fn model_with_the_wrong_input_is_one_clear_error() {
    let m = data("tests/data/multiple_input_demo_source.onnx");
    expect_clean_failure(
        &["--source", "testsrc", "--model", m.to_str().unwrap()],
        &["multiple_input_demo_source.onnx", "2 inputs"],
    );
}

#[cfg(feature = "onnx")]
#[test]
fn labels_that_do_not_fit_the_model_are_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let labels = dir.path().join("five.txt");
    std::fs::write(&labels, "a\nb\nc\nd\ne\n").unwrap();
    expect_clean_failure(
        &["--source", "testsrc", "--labels", labels.to_str().unwrap()],
        &["five.txt", "has 5 names", "80 classes", "coco80.txt"],
    );
}

#[test]
fn unknown_backend_is_one_clear_error() {
    expect_clean_failure(&["--source", "testsrc", "--infer", "tensorrt"], &["tensorrt", "onnx", "none"]);
    expect_clean_failure(&["--source", "webcam:0", "--infer", "none"], &["webcam:0"]);
}

#[test]
fn bad_flag_value_is_rejected_by_the_parser() {
    let out = zcpipe().args(["run", "--scaler", "gpu"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("gpu") && err.contains("cpu"), "{err}");
}

#[test]
fn watch_without_a_publisher_says_how_to_fix() {
    let out = zcpipe().args(["watch", "/nonexistent/d.sock"]).output().unwrap();
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("/nonexistent/d.sock") && err.contains("zcpipe run"), "{err}");
}

#[test]
fn a_regular_file_where_a_socket_goes_is_never_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let keep = dir.path().join("keep.txt");
    std::fs::write(&keep, b"important").unwrap();
    let out = zcpipe()
        .args(["run", "--source", "testsrc", "--infer", "none", "--frames", "3", "--publish"])
        .arg(&keep)
        .arg("--run-dir")
        .arg(dir.path().join("run"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("keep.txt exists and is not a socket"), "{}", stderr(&out));
    assert_eq!(std::fs::read(&keep).unwrap(), b"important");
}

#[test]
fn a_second_run_on_a_busy_run_dir_is_refused_and_harms_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("run");
    let mut first = zcpipe()
        .args([
            "run",
            "--source",
            "testsrc:64x48@20",
            "--infer",
            "none",
            "--no-print",
            "--stats-interval",
            "0",
            "--run-dir",
        ])
        .arg(&run_dir)
        .arg("--publish")
        .arg(dir.path().join("a.sock"))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    while !run_dir.join("capture.sock").exists() && t.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = zcpipe()
        .args(["run", "--source", "testsrc", "--infer", "none", "--frames", "3", "--run-dir"])
        .arg(&run_dir)
        .arg("--publish")
        .arg(dir.path().join("b.sock"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("in use by a running zcpipe"), "{}", stderr(&out));
    assert!(run_dir.join("capture.sock").exists(), "the first run's sockets are untouched");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(first.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    assert!(first.wait().unwrap().success(), "the first run ends cleanly on SIGINT");
    assert!(!run_dir.exists());
}

#[test]
fn negative_values_are_refused_before_anything_starts() {
    let odd: [&[&str]; 9] = [
        &["--fps=-5"],
        &["--fps", "-5"],
        &["--fps", "1e-30"],
        &["--score-threshold=-1"],
        &["--stats-interval=-1"],
        &["--stats-interval", "1e20"],
        &["--connect-timeout", "1e20"],
        &["--size", "320x240"],
        &["--instance", "../x"],
    ];
    for args in odd {
        let dir = tempfile::tempdir().unwrap();
        let out = run(dir.path(), &[&["--source", "testsrc", "--infer", "none"][..], args].concat());
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{args:?}: one line, got {err}");
        assert!(err.starts_with("zcpipe: error:"), "{err}");
    }
}

/// `kill -9` of the infer stage mid-run with `--restart-max 0` (no restart: tests/faults/faults.rs
/// has the restarts): the run stops the others, which still send their final reports, so
/// the summary counts what was published before it, and the client gets its end line.
#[test]
fn a_killed_stage_leaves_the_final_reports_of_its_neighbours() {
    use std::io::{BufRead as _, BufReader, Read as _};
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    use crate::common::Reap;

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let args = [
        "--source",
        "testsrc:320x240@30",
        "--infer",
        "none",
        "--no-print",
        "--stats-interval",
        "0",
        "--frames",
        "600",
        "--restart-max",
        "0",
    ];
    let mut run = Reap(zcpipe_run(d).args(args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap());
    let mut pipe = run.0.stderr.take().unwrap();
    let stderr_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = pipe.read_to_string(&mut s);
        s
    });
    // A client that got a few frames: publish has published some.
    let t = Instant::now();
    let client = loop {
        if let Ok(s) = std::os::unix::net::UnixStream::connect(d.join("detections.sock")) {
            break s;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "no detections socket after 60 s");
        std::thread::sleep(Duration::from_millis(20));
    };
    client.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut lines = BufReader::new(client).lines();
    for _ in 0..5 {
        let l = lines.next().expect("the stream ended before 5 frames").unwrap();
        assert!(l.contains("\"seq\""), "a frame: {l}");
        assert!(l.starts_with("{\"type\":\"frame\","), "a frame line says so first: {l}");
    }
    let infer = stage_pid(d, "infer").expect("the infer stage of this run is running");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(infer), nix::sys::signal::Signal::SIGKILL).unwrap();
    // The client still gets an end line: the run was stopped.
    let end = lines.map(|l| l.unwrap()).last().expect("an end line");
    let end: Value = serde_json::from_str(&end).unwrap();
    assert_eq!(end["end"], true, "{end}");
    assert_eq!(end["type"], "end", "{end}");
    let keys: Vec<&str> = end.as_object().unwrap().keys().map(|k| k.as_str()).collect();
    assert_eq!(keys, ["end", "frames", "reason", "type"], "{end}");
    assert!(["signal", "end of stream"].contains(&end["reason"].as_str().unwrap_or_default()), "{end}");

    let status = run.0.wait().unwrap();
    let err = stderr_reader.join().unwrap();
    assert!(!status.success(), "{err}");
    assert!(
        err.contains("the infer stage was killed by signal 9 (SIGKILL); stopped the others (--restart-max 0)"),
        "{err}"
    );
    assert!(err.contains("no final report from: infer "), "the summary names the stage that sent none: {err}");
    let s: Value = serde_json::from_slice(&std::fs::read(d.join("summary.json")).unwrap()).unwrap();
    // Its neighbours no longer exit on the hang-up (they wait for a restart); the run
    // stopped every stage with SIGTERM, and each ended cleanly on it (or on the end of
    // stream from its upstream, if that came first).
    assert_eq!(
        (s["exit_codes"]["scale"].as_i64(), s["exit_codes"]["publish"].as_i64()),
        (Some(0), Some(0)),
        "{}",
        s["exit_codes"]
    );
    for stage in ["scale", "publish"] {
        let r = &s["stages"][stage];
        assert_eq!(r["final_report"], true, "{stage}: {r}");
        let reason = r["extra"]["end_reason"].as_str().unwrap_or_default();
        assert!(["signal", "end of stream"].contains(&reason), "{stage}: {r}");
    }
    let publish = &s["stages"]["publish"];
    let published = publish["frames_out"].as_u64().unwrap();
    assert!(published > 0, "{publish}");
    assert_eq!(publish["out_span"]["frames"].as_u64(), Some(published), "{publish}");
    assert_eq!(end["frames"].as_u64(), Some(published), "{end}");
    assert_no_orphans(d);
}

/// A stage started alone whose downstream never comes gives up after `--connect-timeout`
/// with one line naming the stage it waited for, and leaves no socket behind.
#[test]
fn a_stage_alone_gives_up_after_the_connect_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("run");
    let out = zcpipe().args(["stage", "scale", "--connect-timeout", "1", "--run-dir"]).arg(&run_dir).output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(errors.len(), 1, "{err}");
    assert!(
        errors[0].contains("no infer stage connected")
            && errors[0].contains("--connect-timeout")
            && errors[0].contains("zcpipe stage infer"),
        "{err}"
    );
    assert!(!run_dir.join("scale.sock").exists(), "socket left behind");
}

/// Who may connect: a run directory other users can write in is refused (one line, the
/// fix); the stage sockets are the owner's only (0600); the detections socket belongs to
/// `--socket-group` (0660); a group that does not exist is one line.
#[test]
fn sockets_are_private_and_shared_only_with_the_socket_group() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    // A run directory made beforehand, writable by everyone (as /tmp/zcpipe-<uid> could be).
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("run");
    std::fs::create_dir(&run_dir).unwrap();
    std::fs::set_permissions(&run_dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let out =
        zcpipe_run(dir.path()).args(["--source", "testsrc", "--infer", "none", "--frames", "1"]).output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
    assert!(errors.len() == 1 && errors[0].contains("has mode 1777") && errors[0].contains("chmod 700"), "{err}");

    // Unknown group.
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        dir.path(),
        &["--source", "testsrc", "--infer", "none", "--frames", "1", "--socket-group", "no-such-group-zcpipe"],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.lines().filter(|l| l.contains("error")).count() == 1
            && err.contains("--socket-group no-such-group-zcpipe: no such group"),
        "{err}"
    );

    // The sockets of a running pipeline.
    let me = nix::unistd::Group::from_gid(nix::unistd::getegid()).unwrap().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut child = zcpipe_run(dir.path())
        .args([
            "--source",
            "testsrc:64x48@30",
            "--infer",
            "none",
            "--scaler",
            "none",
            "--frames",
            "90",
            "--no-print",
            "--socket-group",
            &me.name,
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (sock, capture) = (dir.path().join("detections.sock"), dir.path().join("run/capture.sock"));
    let mut seen = None;
    for _ in 0..200 {
        if let (Ok(d), Ok(c), Ok(r)) =
            (std::fs::metadata(&sock), std::fs::metadata(&capture), std::fs::metadata(dir.path().join("run")))
        {
            seen = Some((d.mode() & 0o777, d.gid(), c.mode() & 0o777, r.mode() & 0o777));
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let status = child.wait().unwrap();
    assert!(status.success());
    assert_no_orphans(dir.path());
    let (sock_mode, sock_gid, stage_mode, run_mode) = seen.expect("sockets appeared");
    assert_eq!((sock_mode, sock_gid), (0o660, me.gid.as_raw()), "detections socket");
    // The group passes through the run directory to the control socket (0660), never to a
    // stage's socket (0600).
    assert_eq!((stage_mode, run_mode), (0o600, 0o710), "stage socket and run directory");
}

/// A full disk for `--summary-json` (`/dev/full`: every write fails with ENOSPC): the text
/// summary is printed first, then one error line naming the flag, the path and the fix; a
/// folder that does not exist is refused before anything starts.
#[test]
fn a_summary_that_cannot_be_written_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let base = [
        "run",
        "--source",
        "testsrc:64x48@30",
        "--infer",
        "none",
        "--frames",
        "3",
        "--no-print",
        "--stats-interval",
        "0",
    ];
    let out = zcpipe()
        .args(base)
        .arg("--run-dir")
        .arg(dir.path().join("run"))
        .arg("--publish")
        .arg(dir.path().join("d.sock"))
        .args(["--summary-json", "/dev/full"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(errors, ["zcpipe: error: --summary-json /dev/full: cannot write the run summary (No space left on device); free space or pass a path you can write (the summary above is complete)"], "{err}");
    assert!(err.contains("zcpipe summary ("), "the text summary comes first: {err}");

    let out = zcpipe()
        .args(base)
        .arg("--run-dir")
        .arg(dir.path().join("run"))
        .args(["--summary-json", "/nonexistent/dir/s.json"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(
        err.trim_end(),
        "zcpipe: error: --summary-json: folder /nonexistent/dir does not exist; create it or pass another path"
    );
}

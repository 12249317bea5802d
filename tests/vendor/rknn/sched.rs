//! The NPU scheduler end to end: `zcpipe run` with several test-pattern cameras on the fake
//! librknnrt in its timing mode (`ZCPIPE_FAKE_RKNN_RUN_US`: each run holds its core that long,
//! no model runs), and `--motion` on still and changing pictures. The counters are read
//! from the summary JSON and from the frame lines, and must add up: every frame captured is
//! inferred, skipped on purpose (by rate, as still, for age, for a newer one) or dropped.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{data, photo_dir, run, Run};

/// Each camera's frame lines' sequence numbers and the `skipped` totals they carry.
fn lines_by_camera(r: &Run) -> BTreeMap<String, Vec<(u64, u64)>> {
    let mut m: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    for f in r.frames() {
        let skipped: u64 = f["skipped"].as_object().map_or(0, |o| o.values().map(|v| v.as_u64().unwrap()).sum());
        m.entry(f["camera"].as_str().unwrap().to_string()).or_default().push((f["seq"].as_u64().unwrap(), skipped));
    }
    m
}

fn cameras(n: usize) -> Vec<String> {
    (0..n).flat_map(|i| ["--source".to_string(), format!("c{i}=testsrc:160x120@30")]).collect()
}

fn rknn_args<'a>(extra: &'a [&'a str]) -> Vec<&'a str> {
    let mut v = vec!["--scaler", "cpu", "--infer", "rknn", "--model", "models/yolox_nano_416_rk3588.rknn", "--json"];
    v.extend_from_slice(extra);
    v
}

/// `--detect-fps` given for all and one camera's own: each camera's frames go on at its rate
/// (counted on capture stamps), the rest are skipped by rate before scaling, and the frame
/// lines say so: every gap in a camera's sequence numbers is covered by its `skipped`.
#[test]
fn detect_fps_thins_each_camera_to_its_rate_and_the_gaps_are_accounted_for() {
    let dir = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = vec!["--detect-fps".into(), "10".into()];
    args.extend(cameras(3));
    // The last camera at its own rate.
    args.extend(
        ["--detect-fps", "5", "--frames", "90", "--npu-cores", "0,1,2", "--ring-policy", "block"].map(String::from),
    );
    let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
    all.extend(rknn_args(&[]));
    let r = run(dir.path(), &all, &[("ZCPIPE_FAKE_RKNN_RUN_US", "13600")]);
    let err = r.stderr();
    assert!(r.out.status.success(), "{err}");
    let s = r.summary.as_ref().unwrap();
    let sched = &s["stages"]["infer"]["extra"]["cameras"];
    let scale = &s["stages"]["scale"]["extra"]["cameras"];
    // 90 frames at 30 fps span 2.97 s: 10 fps passes the first frame and then one each time
    // the next is due (every 100 ms, half an interval early allowed), 31 in all; 5 fps 16.
    // One less where a paced frame came late.
    for (cam, want) in [("c0", 31), ("c1", 31), ("c2", 16)] {
        let inferred = sched[cam]["inferred"].as_u64().unwrap();
        let skipped = scale[cam]["skipped_rate"].as_u64().unwrap();
        assert!((want - 1..=want).contains(&inferred), "{cam}: {inferred} inferred, want {want}: {sched}");
        assert_eq!(inferred + skipped, 90, "{cam}: every frame inferred or skipped by rate: {scale}");
        assert_eq!(s["cameras"][cam]["dropped"], 0, "{cam}: {}", s["cameras"]);
        assert_eq!(s["cameras"][cam]["skipped_rate"], skipped);
    }
    // The frame lines: each gap is exactly the frames skipped before the line.
    let lines = lines_by_camera(&r);
    for (cam, seqs) in &lines {
        for w in seqs.windows(2) {
            assert_eq!(w[1].0 - w[0].0 - 1, w[1].1, "{cam}: gap before seq {} not covered by its skipped", w[1].0);
        }
    }
    assert!(err.contains("scheduler") && err.contains("engines: core 0"), "{err}");
    println!(
        "EVIDENCE detect-fps: inferred {} / {} / {} of 90 frames (10, 10, 5 fps); every sequence gap covered by the lines' skipped",
        sched["c0"]["inferred"], sched["c1"]["inferred"], sched["c2"]["inferred"]
    );
}

/// One core at 100 ms a frame, two cameras of weights 2 and 1, each sending 30 fps: the NPU
/// runs about twice as many of the first; nothing waits past `--max-age` (frames that would
/// are dropped and counted), and every frame is accounted for.
#[test]
fn weights_share_a_slow_npu_and_old_frames_are_dropped_not_inferred_late() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--source",
        "heavy=testsrc:160x120@30",
        "--weight",
        "2",
        "--source",
        "light=testsrc:160x120@30",
        "--frames",
        "90",
        "--npu-cores",
        "0",
        "--max-age",
        "0.15",
    ];
    let mut all: Vec<&str> = args.to_vec();
    all.extend(rknn_args(&[]));
    let r = run(dir.path(), &all, &[("ZCPIPE_FAKE_RKNN_RUN_US", "100000"), ("ZCPIPE_FAKE_RKNN_CORES", "1")]);
    let err = r.stderr();
    assert!(r.out.status.success(), "{err}");
    let s = r.summary.as_ref().unwrap();
    let sched = &s["stages"]["infer"]["extra"]["cameras"];
    let n = |cam: &str, k: &str| sched[cam][k].as_u64().unwrap();
    let (h, l) = (n("heavy", "inferred"), n("light", "inferred"));
    // 3 s at 10 runs a second: about 20 and 10.
    assert!(h + l >= 20 && h as f64 >= 1.5 * l as f64 && h as f64 <= 2.5 * l as f64, "heavy {h}, light {l}: {sched}");
    for cam in ["heavy", "light"] {
        assert_eq!(
            n(cam, "admitted"),
            n(cam, "inferred") + n(cam, "replaced") + n(cam, "expired"),
            "{cam}: every frame taken in is run, replaced or expired: {sched}"
        );
        let wait_p99 = sched[cam]["wait_p99_us"].as_f64().unwrap();
        assert!(wait_p99 <= 150_000.0 * 1.001, "{cam}: a frame waited {wait_p99} µs, past --max-age 0.15 s");
    }
    assert!(n("heavy", "replaced") + n("light", "replaced") > 0, "frames waiting behind a newer one: {sched}");
    let busy = s["stages"]["infer"]["extra"]["cores"][0]["busy"].as_f64().unwrap();
    assert!(busy > 0.5, "the one core was kept busy: {busy}");
    println!("EVIDENCE weights: heavy (2) {h}, light (1) {l} inferred; core busy {busy:.2}; {sched}");
}

/// `--motion`: a still picture goes on once and then once per keep-alive; pictures that
/// change every frame all go on. Counted as `still`, covered in the frame lines.
#[test]
fn motion_gating_passes_changes_and_a_keepalive_of_a_still_picture() {
    let dir = tempfile::tempdir().unwrap();
    let still = format!("still=image:{}", data("tests/data/dog.jpg").display());
    let photos = format!("moving={}", photo_dir(dir.path()));
    let args = [
        "--fps",
        "30",
        "--source",
        &still,
        "--source",
        &photos,
        "--ring-policy",
        "block",
        "--frames",
        "60",
        "--motion",
        "--motion-keepalive",
        "1",
        "--scaler",
        "cpu",
        "--infer",
        "none",
        "--json",
    ];
    let r = run(dir.path(), &args, &[]);
    let err = r.stderr();
    assert!(r.out.status.success(), "{err}");
    let s = r.summary.as_ref().unwrap();
    let scale = &s["stages"]["scale"]["extra"];
    let sched = &s["stages"]["infer"]["extra"]["cameras"];
    // 60 frames at 30 fps: the first, then one a second.
    let still_inferred = sched["still"]["inferred"].as_u64().unwrap();
    assert!((2..=3).contains(&still_inferred), "{sched}");
    assert_eq!(scale["cameras"]["still"]["skipped_still"].as_u64().unwrap() + still_inferred, 60, "{scale}");
    assert_eq!(sched["moving"]["inferred"], 60, "three photos in turn: every frame changes: {sched}");
    assert_eq!(scale["cameras"]["moving"]["skipped_still"], 0);
    let us = scale["motion_us"].as_f64().unwrap();
    assert!(us > 0.0, "{scale}");
    for (cam, seqs) in lines_by_camera(&r) {
        for w in seqs.windows(2) {
            assert_eq!(w[1].0 - w[0].0 - 1, w[1].1, "{cam}: gap before seq {} not covered", w[1].0);
        }
    }
    let v: Value = scale.clone();
    println!(
        "EVIDENCE motion: still camera {still_inferred} of 60 inferred, moving 60 of 60; check {us:.1} µs/frame; {v}"
    );
}

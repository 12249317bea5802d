use super::*;

/// |score difference| allowed between zcpipe's pipeline and the reference (measured
/// at most 0.014 over the six runs; the JSON line rounds scores to 0.001).
pub const SCORE_TOL: f32 = 0.02;
/// IoU required between paired boxes, in image pixels (measured at least 0.983).
pub const MIN_IOU: f32 = 0.95;

fn pipelines() -> &'static [Value] {
    manifest()["pipelines"].as_array().unwrap()
}

fn pipeline(name: &str) -> &'static Value {
    pipelines().iter().find(|p| p["name"] == name).unwrap_or_else(|| panic!("no pipeline {name} in the manifest"))
}

/// `zcpipe run` of pipeline case `p` (one frame of its PNG through the image source,
/// `scaler` (`cpu`, or `rga`: the ABI fake of librga) and the onnx backend, with its
/// `--channel-order` and `--letterbox` if it has them): the frame's detections in image
/// pixels, and the run's stderr.
fn run(p: &Value, scaler: &str) -> (Vec<Detection>, String) {
    let case = cases().iter().find(|c| c["name"] == p["case"]).unwrap();
    let (t, nms) = thresholds();
    let dir = tempfile::tempdir().unwrap();
    let image = models().join(p["image"].as_str().unwrap());
    let model = models().join(case["model"].as_str().unwrap());
    let mut cmd = common::zcpipe_run(dir.path());
    cmd.args(["--source", &format!("image:{}", image.display()), "--frames", "1", "--ring-policy", "block"])
        .args(["--scaler", scaler, "--infer", "onnx", "--model", &model.display().to_string()])
        .args(["--score-threshold", &t.to_string(), "--nms-iou", &nms.to_string(), "--json", "--stats-interval", "0"]);
    if let Some(o) = p["channel_order"].as_str() {
        cmd.args(["--channel-order", o]);
    }
    if let Some(l) = p["placement"].as_str() {
        cmd.args(["--letterbox", l]);
    }
    if let Some((w, h)) = input_size(case) {
        cmd.args(["--input-size", &format!("{w}x{h}")]);
    }
    if scaler == "rga" {
        cmd.env("ZCPIPE_LIBRGA", common::fake_librga()).env("ZCPIPE_FAKE_RGA_LOG", dir.path().join("rga.log"));
    }
    let out = cmd.output().unwrap();
    common::assert_no_orphans(dir.path());
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{}: zcpipe run failed:\n{stderr}", p["name"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().next().unwrap_or_else(|| panic!("{}: no frame line:\n{stderr}", p["name"]));
    let frame: Value = serde_json::from_str(line).unwrap();
    assert_eq!(
        (frame["width"].as_u64(), frame["height"].as_u64()),
        (p["width"].as_u64(), p["height"].as_u64()),
        "{frame}"
    );
    let dets = frame["detections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let b = d["box"].as_array().unwrap();
            Detection {
                class_id: d["class_id"].as_u64().unwrap() as u32,
                score: d["score"].as_f64().unwrap() as f32,
                bbox: [0, 1, 2, 3].map(|i| b[i].as_f64().unwrap() as f32),
            }
        })
        .collect();
    (dets, stderr)
}

/// A pipeline entry's reference detections (one list, in image pixels).
fn reference_of(p: &Value) -> Vec<RefDet> {
    reference(&serde_json::json!({ "reference": { "pipeline": p["reference"] } }), "pipeline")
}

#[test]
fn each_family_through_the_whole_pipeline_matches_its_reference() {
    let (t, _) = thresholds();
    let mut lines = Vec::new();
    for p in pipelines() {
        let name = p["name"].as_str().unwrap();
        let (got, stderr) = run(p, "cpu");
        let want = reference_of(p);
        let paired = same(&got, &want, t, SCORE_TOL, MIN_IOU).unwrap_or_else(|e| panic!("{name}: {e}\n{stderr}"));
        assert!(paired.n >= 10, "{name}: only {} detections paired", paired.n);
        // The pre-processing the infer stage asked for, and what the scale stage wrote.
        let (order, placement) = (p["reference_order"].as_str().unwrap(), p["reference_placement"].as_str().unwrap());
        let pre = format!(
            "pre-processing: {}, {} letterbox",
            order.to_uppercase(),
            if placement == "center" { "centred" } else { "top-left" }
        );
        assert!(stderr.contains(&pre), "{name}: no `{pre}` line:\n{stderr}");
        let fourcc = if order == "rgb" { "RGB3" } else { "BGR3" };
        let scale_line = stderr
            .lines()
            .find(|l| l.contains("cpu scaler ->"))
            .unwrap_or_else(|| panic!("{name}: no scaler line:\n{stderr}"));
        assert!(scale_line.contains(fourcc), "{name}: {scale_line}");
        assert!(!stderr.contains("lower scores"), "{name}: {stderr}");
        let case = cases().iter().find(|c| c["name"] == p["case"]).unwrap();
        if case["dynamic"] == true {
            let size = format!(
                "is dynamic; running it at {}x{}, batch 1 (as --input-size asks)",
                case["width"], case["height"]
            );
            assert!(stderr.contains(&size), "{name}: no `{size}` line:\n{stderr}");
        }
        lines.push(format!(
            "{name} ({} {order} {placement}): {}",
            p["case"].as_str().unwrap(),
            paired.summary(got.len(), want.len())
        ));
    }
    eprintln!("{}", lines.join("\n"));
}

/// The test is sensitive to what it checks: the yolov8 image fed BGR with a top-left
/// letterbox (as the scalers did before the pre-processing was negotiated) gives
/// detections the family's own reference (RGB, centred) does not match.
#[test]
fn the_wrong_preprocessing_does_not_match_the_familys_reference() {
    let (t, _) = thresholds();
    let wrong = pipeline("pipe_yolov8_640_bgr_top_left");
    let right = pipeline("pipe_yolov8_640");
    assert_eq!(
        wrong["image"].as_str().map(|i| std::fs::read(models().join(i)).unwrap()),
        right["image"].as_str().map(|i| std::fs::read(models().join(i)).unwrap()),
        "the same image"
    );
    let (got, _) = run(wrong, "cpu");
    let e = same(&got, &reference_of(right), t, SCORE_TOL, MIN_IOU)
        .expect_err("BGR/top-left detections must not match the RGB/centred reference");
    eprintln!("pipe_yolov8_640 fed BGR, top-left, against its RGB, centred reference: {e}");
}

/// `zcpipe run` with `args` (and `--stats-interval 0`) in its own folder: exit code and
/// stderr.
fn run_args(args: &[&str]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = common::zcpipe_run(dir.path()).args(["--stats-interval", "0"]).args(args).output().unwrap();
    common::assert_no_orphans(dir.path());
    (out.status.code(), String::from_utf8_lossy(&out.stderr).to_string())
}

/// `--input-size` that is not a size, or not in multiples of 32, is one line before
/// anything starts; one that a model's fixed input disagrees with is one error line
/// from the infer stage naming both sizes; `--infer none` takes it as its size.
#[test]
fn input_size_errors_are_one_line_and_none_takes_the_size() {
    for (bad, want) in [
        (
            "650",
            "zcpipe: error: --input-size 650: 650 is not a multiple of 32 (the largest YOLO stride): use 640 or 672",
        ),
        ("64Ox480", "zcpipe: error: --input-size \"64Ox480\" is not WxH or N: use e.g. 640x384, or 640 for 640x640"),
        ("8192", "zcpipe: error: --input-size 8192: a side of 8192 is outside 32..=4096: use e.g. 640 or 640x384"),
    ] {
        let (code, err) = run_args(&["--source", "testsrc", "--infer", "none", "--frames", "1", "--input-size", bad]);
        assert_eq!((code, err.trim_end()), (Some(1), want));
    }

    let case = cases().iter().find(|c| c["name"] == "yolov8_640_c80").unwrap();
    let model = models().join(case["model"].as_str().unwrap());
    let p = pipelines().iter().find(|p| p["case"] == case["name"]).unwrap();
    let image = format!("image:{}", models().join(p["image"].as_str().unwrap()).display());
    let args = [
        "--source",
        &image,
        "--frames",
        "1",
        "--scaler",
        "cpu",
        "--infer",
        "onnx",
        "--model",
        &model.display().to_string(),
    ];
    let (code, err) = run_args(&[&args[..], &["--input-size", "320"]].concat());
    assert_ne!(code, Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(errors.len(), 1, "one error line:\n{err}");
    assert!(
        errors[0].contains(&format!(
            "--input-size 320x320 does not match the fixed input 640x640 of model {}: leave --input-size out",
            model.display()
        )),
        "{}",
        errors[0]
    );
    // Its own size is fine.
    let (code, err) = run_args(&[&args[..], &["--input-size", "640x640"]].concat());
    assert_eq!(code, Some(0), "{err}");

    let (code, err) = run_args(&[
        "--source",
        "testsrc",
        "--scaler",
        "cpu",
        "--infer",
        "none",
        "--frames",
        "1",
        "--input-size",
        "320x256",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("frames are scaled to 320x256 (--input-size)"), "{err}");
    assert!(err.lines().any(|l| l.contains("cpu scaler ->") && l.contains("320x256")), "{err}");
}

/// The RGA backend (through the ABI fake of librga) gives each family its letterbox
/// too: YOLOX BGR top-left, YOLOv8 RGB centred (the job's destination rectangle).
#[test]
fn the_rga_scaler_feeds_each_family_its_preprocessing() {
    let (t, _) = thresholds();
    for name in ["pipe_yolox_416", "pipe_yolov8_640"] {
        let p = pipeline(name);
        let (got, stderr) = run(p, "rga");
        let rga = stderr
            .lines()
            .find(|l| l.contains("rga (") && l.contains("letterbox"))
            .unwrap_or_else(|| panic!("{name}: no rga line:\n{stderr}"));
        let paired = same(&got, &reference_of(p), t, SCORE_TOL, MIN_IOU)
            .unwrap_or_else(|e| panic!("{name} through rga: {e}\n{stderr}"));
        eprintln!(
            "{name} through rga: {} paired, max |score difference| {:.4}, min IoU {:.4}; {rga}",
            paired.n, paired.max_score_diff, paired.min_iou
        );
    }
}

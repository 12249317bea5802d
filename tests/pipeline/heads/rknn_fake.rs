use super::*;
use std::sync::{Arc, Mutex};
use zcpipe::core::dmabuf::Allocator;
use zcpipe::core::frame::{Fourcc, FrameLayout};
use zcpipe::infer::rknn::{output_info, RknnDetector};
use zcpipe::infer::{Detector, DetectorOptions};
use zcpipe::sys::rknn::Rknn;

/// The fake takes its model and output type from the environment at `rknn_init` and reads
/// its other variables on every call: one detector at a time in this process.
static FAKE: Mutex<()> = Mutex::new(());

/// The fake, opened once in this process (so it keeps the models it loaded).
fn runtime() -> Arc<Rknn> {
    static RT: OnceLock<Arc<Rknn>> = OnceLock::new();
    RT.get_or_init(|| Arc::new(Rknn::open_path(common::fake_librknnrt().into(), true).unwrap())).clone()
}

/// A stand-in `.rknn` for `name` in `dir`, with what zcpipe checks before the runtime
/// sees it (the `RKNN` header, rknn-toolkit2's trailer naming the platform: this board's
/// SoC, else rk3588, so that the platform check passes without moving the system root
/// of a process whose other tests start `zcpipe run`); the fake ignores its bytes.
fn stand_in(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(format!("{name}.rknn"));
    let soc = zcpipe::sys::board::socs().into_iter().next().unwrap_or_else(|| "rk3588".into());
    let mut bytes = b"RKNN".to_vec();
    bytes.resize(64, 0);
    bytes.extend_from_slice(format!(r#"{{"target_platform":["{soc}"]}}"#).as_bytes());
    std::fs::write(&path, bytes).unwrap();
    path
}

/// zcpipe's detections of `case` through the fake with `ZCPIPE_FAKE_RKNN_OUTPUT=fake`,
/// after checking what zcpipe read of the model: the input (size, the family's channel
/// order, rows of W * 3 bytes), the head, and the outputs as the runtime reports the
/// manifest's in `set`'s type ([`rknn_attr`]).
fn detect(case: &Value, fake: &str, set: &str) -> Vec<Detection> {
    let name = case["name"].as_str().unwrap();
    let (w, h) = (case["width"].as_u64().unwrap() as u32, case["height"].as_u64().unwrap() as u32);
    let dir = tempfile::tempdir().unwrap();
    let _one = FAKE.lock().unwrap_or_else(|p| p.into_inner());
    std::env::set_var("ZCPIPE_FAKE_RKNN_ONNX", models().join(case["model"].as_str().unwrap()));
    std::env::set_var("ZCPIPE_FAKE_RKNN_OUTPUT", fake);
    for k in [
        "ZCPIPE_FAKE_RKNN_W_STRIDE",
        "ZCPIPE_FAKE_RKNN_CORES",
        "ZCPIPE_FAKE_RKNN_LOG",
        "ZCPIPE_FAKE_RKNN_DMABUF_ONLY",
        "ZCPIPE_FAKE_RKNN_RUN_BARRIER",
        "ZCPIPE_FAKE_RKNN_FAIL_RUN",
        "ZCPIPE_FAKE_RKNN_RUN_US",
    ] {
        std::env::remove_var(k);
    }
    let (t, nms) = thresholds();
    let opts = DetectorOptions {
        model: stand_in(dir.path(), name),
        score_threshold: t,
        nms_iou: nms,
        anchors: anchors(case),
        ..Default::default()
    };
    let mut det = RknnDetector::open_with(runtime(), &opts).unwrap_or_else(|e| panic!("{name} {fake}: {e:#}"));
    let n = case["outputs"].as_array().unwrap().len();
    let want: Vec<_> = (0..n).map(|i| output_info(&rknn_attr(case, i, set, false)).unwrap()).collect();
    assert_eq!(det.outputs(), &want[..], "{name} {fake}");
    assert_eq!(det.head().unwrap().kind().to_string(), case["layout"].as_str().unwrap(), "{name}");
    let fourcc = if case["channel_order"] == "rgb" { Fourcc::RGB24 } else { Fourcc::BGR24 };
    let spec = det.input_spec();
    assert_eq!(
        (spec.width, spec.height, spec.fourcc, spec.bytesperline, spec.name.as_str()),
        (w, h, fourcc, w * 3, "images"),
        "{name}"
    );
    // The test image is in the family's channel order, as the scaler writes it.
    let input = std::fs::read(models().join(case["input"].as_str().unwrap())).unwrap();
    let layout = FrameLayout::packed24(fourcc, w, h, w * 3);
    let mut buf = Allocator::Memfd.allocate(input.len() as u64).unwrap();
    buf.write().unwrap()[..input.len()].copy_from_slice(&input);
    assert!(det.bind_pool(&[&buf]).unwrap(), "{name}: the fake imports a memfd");
    let bound = det.detect_index(0, &layout).unwrap_or_else(|e| panic!("{name} {fake}: {e:#}"));
    let copied = det.detect(&input, &layout).unwrap_or_else(|e| panic!("{name} {fake} (rknn_inputs_set): {e:#}"));
    assert_eq!(bound, copied, "{name} {fake}: the NPU read the same bytes bound as copied");
    drop(det);
    // Other tests of this process start `zcpipe run`, which inherits the environment.
    for k in ["ZCPIPE_FAKE_RKNN_ONNX", "ZCPIPE_FAKE_RKNN_OUTPUT"] {
        std::env::remove_var(k);
    }
    bound
}

/// Every case of a fixed input size through the fake with `fake` outputs against the
/// reference's `set`: the same detections within `score_tol` and `min_iou` ([`same`]).
/// The dynamic-input cases are left out: a `.rknn` has a fixed input size (the toolkit
/// converts at one), and the fixed twin of their model is a case.
fn every_case_matches_the_reference(fake: &str, set: &str, score_tol: f32, min_iou: f32) {
    let (t, _) = thresholds();
    let mut lines = Vec::new();
    for case in cases().iter().filter(|c| c["dynamic"] != true) {
        let name = case["name"].as_str().unwrap();
        let got = detect(case, fake, set);
        let want = reference(case, set);
        // Only flat exports in int8 find nothing: one scale for pixel boxes and scores
        // leaves no score step over the threshold (the reference agrees).
        let flat = matches!(case["layout"].as_str(), Some("yolov5" | "yolov8"));
        assert!(!want.is_empty() || (fake == "int8" && flat), "{name} {set}: the reference has no detections");
        let paired = same(&got, &want, t, score_tol, min_iou)
            .unwrap_or_else(|e| panic!("{name} through the fake librknnrt, {fake} outputs: {e}"));
        lines.push(format!("{name} {fake}: {}", paired.summary(got.len(), want.len())));
    }
    eprintln!("{}", lines.join("\n"));
}

#[test]
fn fp32_outputs_match_the_reference_for_every_layout() {
    every_case_matches_the_reference("fp32", "f32", 0.01, 0.98);
}

#[test]
fn fp16_outputs_match_the_reference_for_every_layout() {
    every_case_matches_the_reference("fp16", "f16", 0.01, 0.98);
}

/// int8 with the float bounds: the fake quantises with the scale and zero point the
/// reference's int8 set was made with, so only a value tract and onnxruntime round to
/// different steps could differ (measured: every pair within 1e-4, IoU 1.0000).
#[test]
fn int8_outputs_match_the_reference_for_every_layout() {
    every_case_matches_the_reference("int8", "i8", 0.01, 0.98);
}

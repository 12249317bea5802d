//! The forms users export, through the onnx backend: `make_test_models.py` makes them from a
//! case's float32 model (the case's `exports`) and runs them with onnxruntime on the case's
//! test image.
//!
//! - `half`: the whole model in float16, input, weights and outputs, as Ultralytics
//!   `half=True` exports it. zcpipe feeds the input as float16 and tract computes in float16,
//!   where onnxruntime's CPU computes most operators in float32 between float16 tensors, so
//!   their outputs differ by a few float16 steps of the values inside the graph (measured: a
//!   score by 0.001, a box term in pixels by 0.5, a DFL distance's step times the stride).
//!   zcpipe's detections are the reference decoder's of tract's outputs (|score difference|
//!   <= 0.01, IoU >= 0.98), and its candidates (before NMS) are those of onnxruntime's run
//!   of the same float16 model, and those of the float32 model, within the head tests'
//!   float16 bounds (`F16_SCORE`, `F16_IOU`), each paired with the one of its class it
//!   overlaps most, both ways. (Detections after NMS are not compared across runs: the test
//!   images' squares make many neighbouring cells score within a float16 step of each other,
//!   and NMS keeps either box of such a pair; so do onnxruntime's own float16 and float32
//!   runs.)
//! - `qdyn`: onnxruntime's `quantize_dynamic` of the float32 model (`DynamicQuantizeLinear`,
//!   `ConvInteger` with int8 weights). tract does the integer arithmetic as onnxruntime
//!   does: outputs within [`QDYN_TOL`] of onnxruntime's, and the same detections as the
//!   reference decoder's of onnxruntime's outputs (|score difference| <= 0.01, IoU >= 0.98).

use super::onnx::{open, reference_of_outputs, tract_outputs, Output};
use super::*;
use zcpipe::core::frame::{Fourcc, FrameLayout};
use zcpipe::infer::onnx::OnnxDetector;
use zcpipe::infer::Detector;

/// tract against onnxruntime on a `quantize_dynamic` model: the largest |difference| of an
/// output value, box terms in pixels included (measured: 1e-4, float32 rounding of the
/// float parts; the integer parts are equal).
const QDYN_TOL: f32 = 1e-3;

/// The cases with export form `form`, and its model.
fn with_export(form: &str) -> Vec<(&'static Value, &'static str)> {
    let found: Vec<_> = cases().iter().filter_map(|c| c["exports"][form].as_str().map(|m| (c, m))).collect();
    assert!(!found.is_empty(), "make_test_models.py made no {form} model");
    found
}

/// `case`'s test image and its layout (the family's channel order, as the scaler writes it).
fn image(case: &Value) -> (Vec<u8>, FrameLayout) {
    let (w, h) = (case["width"].as_u64().unwrap() as u32, case["height"].as_u64().unwrap() as u32);
    let fourcc = match case["channel_order"].as_str().unwrap() {
        "rgb" => Fourcc::RGB24,
        _ => Fourcc::BGR24,
    };
    let input = std::fs::read(models().join(case["input"].as_str().unwrap())).unwrap();
    (input, FrameLayout::packed24(fourcc, w, h, w * 3))
}

/// Opens `case`'s export `model` and checks what zcpipe read of it: the float32 model's
/// input size, channel order, head, classes and class names.
fn open_export(case: &Value, model: &str) -> OnnxDetector {
    let name = case["name"].as_str().unwrap();
    let det = open(case, model, HeadKind::Auto).unwrap_or_else(|e| panic!("{name} ({model}): {e:#}"));
    let (_, layout) = image(case);
    let spec = det.input_spec();
    assert_eq!((spec.width, spec.height, spec.fourcc), (layout.width, layout.height, layout.fourcc), "{model}");
    assert_eq!(det.head().unwrap().kind().to_string(), case["layout"].as_str().unwrap(), "{model}");
    assert_eq!(det.classes(), Some(case["classes"].as_u64().unwrap() as usize), "{model}");
    let names: Option<Vec<String>> =
        case["names"].as_array().map(|a| a.iter().map(|n| n.as_str().unwrap().to_string()).collect());
    assert_eq!(det.labels(), names, "{model}");
    det
}

/// onnxruntime's outputs of `case`'s export `form` (the manifest's).
fn onnxruntime_outputs(case: &Value, form: &str) -> Vec<Output> {
    let n = case["outputs"].as_array().unwrap().len();
    (0..n)
        .map(|i| {
            let file = case["outputs"][i][form].as_str().unwrap();
            let (shape, values) = read_npy(&models().join(file)).unwrap();
            let values = match values {
                NpyData::F32(v) => v,
                NpyData::F16(v) => v.iter().map(|x| x.to_f32()).collect(),
                _ => panic!("{file} is not float"),
            };
            (shape, values)
        })
        .collect()
}

/// The largest |difference| between `got` and `want`, value by value (their shapes equal).
fn max_difference(got: &[Output], want: &[Output]) -> f32 {
    let mut max = 0.0f32;
    for ((shape, got), (want_shape, want)) in got.iter().zip(want) {
        assert_eq!(shape, want_shape);
        max = got.iter().zip(want).fold(max, |m, (a, b)| m.max((a - b).abs()));
    }
    max
}

/// How close the candidates `b` come to those of `a` scoring at least `t + MARGIN`: each
/// paired with the candidate of its class in `b` it overlaps most; returns how many were
/// paired, the largest |score difference| and the smallest IoU of a pair.
fn closeness(a: &[RefDet], b: &[RefDet], t: f32) -> Paired {
    let mut p = Paired { min_iou: 1.0, ..Paired::default() };
    for (c, s, bx) in a.iter().filter(|d| d.1 >= t + MARGIN) {
        let best = b.iter().filter(|d| d.0 == *c).max_by(|x, y| iou(bx, &x.2).total_cmp(&iou(bx, &y.2)));
        let (s2, b2) = best.map(|d| (d.1, d.2)).unwrap_or((0.0, [0.0; 4]));
        p.n += 1;
        p.max_score_diff = p.max_score_diff.max((s - s2).abs());
        p.min_iou = p.min_iou.min(iou(bx, &b2));
    }
    p
}

/// Checks [`closeness`] both ways is within the float16 bounds; returns the worse way.
fn close_both_ways(a: &[RefDet], b: &[RefDet], what: &str) -> Paired {
    let t = thresholds().0;
    let (ab, ba) = (closeness(a, b, t), closeness(b, a, t));
    for p in [&ab, &ba] {
        assert!(p.n > 0 && p.max_score_diff <= F16_SCORE && p.min_iou >= F16_IOU, "{what}: {p:?}");
    }
    Paired {
        n: ab.n.min(ba.n),
        max_score_diff: ab.max_score_diff.max(ba.max_score_diff),
        min_iou: ab.min_iou.min(ba.min_iou),
    }
}

/// The candidates (before NMS) `det`'s head finds in `outs`.
fn candidates(det: &OnnxDetector, outs: &[Output]) -> Vec<RefDet> {
    let tensors: Vec<TensorRef<'_>> = outs.iter().map(|(_, v)| TensorRef::F32(v)).collect();
    let mut c = heads::Candidates::default();
    det.head().unwrap().decode(&tensors, thresholds().0, &mut c);
    assert_eq!(c.nonfinite, 0);
    c.dets.iter().map(|d| (d.class_id, d.score, d.bbox)).collect()
}

#[test]
fn a_float16_export_runs_in_float16_and_finds_what_float32_finds() {
    let (t, _) = thresholds();
    for (case, model) in with_export("half") {
        let name = case["name"].as_str().unwrap();
        let mut det = open_export(case, model);
        assert!(det.outputs().iter().all(|o| o.dtype == heads::Dtype::F16), "{model}: {:?}", det.outputs());
        let (input, layout) = image(case);
        let outs = tract_outputs(&det, &input, &layout);
        let got = det.detect(&input, &layout).unwrap();
        let want = reference_of_outputs(case, (layout.width, layout.height), &outs);
        let paired = same(&got, &want, t, 0.01, 0.98).unwrap_or_else(|e| panic!("{model}: {e}"));
        let ort = onnxruntime_outputs(case, "half");
        let halves = candidates(&det, &outs);
        let vs_ort = close_both_ways(&halves, &candidates(&det, &ort), &format!("{model}: tract vs onnxruntime"));
        let vs_f32 = close_both_ways(&halves, &rknn_candidates(case, "f32"), &format!("{model} vs float32"));
        eprintln!(
            "{name} ({model}): {}; outputs within {:.4} of onnxruntime's; candidates scoring >= {:.2} vs onnxruntime's: {} paired, max |score difference| {:.4}, min IoU {:.4}; vs float32's: {} paired, {:.4}, {:.4}",
            paired.summary(got.len(), want.len()),
            max_difference(&outs, &ort),
            t + MARGIN,
            vs_ort.n,
            vs_ort.max_score_diff,
            vs_ort.min_iou,
            vs_f32.n,
            vs_f32.max_score_diff,
            vs_f32.min_iou
        );
    }
}

#[test]
fn a_dynamically_quantized_export_finds_what_onnxruntime_finds() {
    let (t, _) = thresholds();
    for (case, model) in with_export("qdyn") {
        let name = case["name"].as_str().unwrap();
        let mut det = open_export(case, model);
        let (input, layout) = image(case);
        let outs = tract_outputs(&det, &input, &layout);
        let diff = max_difference(&outs, &onnxruntime_outputs(case, "qdyn"));
        assert!(diff <= QDYN_TOL, "{model}: tract's outputs differ from onnxruntime's by up to {diff}");
        let got = det.detect(&input, &layout).unwrap();
        let want = reference(case, "qdyn");
        let paired = same(&got, &want, t, 0.01, 0.98).unwrap_or_else(|e| panic!("{model}: {e}"));
        eprintln!(
            "{name} ({model}): outputs within {diff:.6} of onnxruntime's; {}",
            paired.summary(got.len(), want.len())
        );
    }
}

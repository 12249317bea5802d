//! zcpipe's detection heads against an independent reference, for every layout it decodes.
//!
//! `scripts/models/make_test_models.py` (run here with the set-up's venv,
//! `build/py-venv`, when `build/test-models/` is missing or older than the scripts) builds
//! small ONNX models with exactly each layout (YOLOX, YOLOX split, YOLOv5, YOLOv5 split with
//! default and custom anchors, YOLOv8, YOLOv8 split with and without the score sum; input
//! sizes 320, 416, 640 and 640x384; 2 to 80 classes; and a YOLOv8 with a dynamic input, as
//! Ultralytics `dynamic=True` exports it, run at the default 640x640 and at `--input-size`
//! 320x256) whose outputs depend on the pixels of a
//! test image, runs them with onnxruntime, and decodes their outputs with a numpy reference
//! written from the families' published post-processing (`scripts/models/reference.py`), in
//! float32, float16 and int8 (per-tensor affine, calibrated on the output itself).
//!
//! Here zcpipe decodes the same outputs:
//! - through the `onnx` backend (tract runs the model on the test image; needs the `onnx`
//!   feature), for the float32 models and the float16-output ones; and the forms users
//!   export, a wholly float16 model (float16 input too: Ultralytics `half=True`) and
//!   onnxruntime `quantize_dynamic` ones, against onnxruntime's runs of the same models
//!   (`mod exports`);
//! - along the `rknn` backend's path: output attributes as `RKNN_QUERY_OUTPUT_ATTR` reports
//!   them (`rknn::output_info`), the head `heads::select` recognises, the outputs' raw bytes
//!   as `rknn_outputs_get` hands them over (`TensorRef::from_bytes`), in float32, float16
//!   and int8 (and a channels-last int8 map, as RV1106 outputs are);
//! - through the `rknn` backend itself on the ABI fake of librknnrt (`mod rknn_fake`), for
//!   the fixed-size models (a `.rknn` has a fixed input): the fake runs the case's ONNX
//!   model with tract on the test image zcpipe binds (a memfd imported as the NPU's input,
//!   and the same bytes through `rknn_inputs_set`), reports the model's input size and
//!   outputs, and hands the outputs over as float32, float16 or int8 (each output's scale
//!   and zero point the manifest's: the model carries them in its metadata, with the
//!   input's divisor).
//!
//! And the whole pipeline, once per family (`zcpipe run` on a PNG through the image source,
//! the CPU scaler and the onnx backend: `mod pipeline`), against the reference of the same
//! model on the same image letterboxed the family's way in numpy
//! (`scripts/models/preprocess.py`: YOLOX top-left, BGR, raw; Ultralytics and YOLOv5
//! centred, RGB, /255), boxes mapped back to the image; and with `--channel-order` and
//! `--letterbox` overriding the family's, against the reference fed the same way.
//!
//! Bounds: against the reference of the same values, the same detections (same count and
//! classes), |score difference| <= 0.01 and IoU >= 0.98; through the librknnrt fake too,
//! int8 included (tract's outputs, quantised with the reference's scale and zero point;
//! measured: float32 and int8 scores equal to 1e-4 and IoU 1.0000, float16 within one
//! step, 0.0004 and IoU 0.997). int8 and float16 against float32 (a looser check, for the
//! layouts whose int8 form is what rknn_model_zoo ships: the split heads and YOLOX): every
//! float32 candidate scoring at least [`MARGIN`] over the threshold has an int8 / float16
//! candidate of its class with |score difference| <= [`INT8_SCORE`] / [`F16_SCORE`] and
//! IoU >= [`INT8_IOU`] / [`F16_IOU`], and the other way round. Whole pipeline: the same
//! detections with |score difference| <= [`pipeline::SCORE_TOL`] and IoU >=
//! [`pipeline::MIN_IOU`] in image pixels (the capture's NV12 round trip and the scaler's
//! resize, which widens its filter when it shrinks where OpenCV's INTER_LINEAR samples
//! 2 x 2, move edge cells' features a little).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;
use zcpipe::infer::heads::npy::{read_npy, NpyData};
use zcpipe::infer::heads::{self, load_anchors, Anchors, Decoder, HeadKind, TensorRef};
use zcpipe::infer::nms::iou;
use zcpipe::infer::Detection;
use zcpipe::sys::rknn::{self as sys, RknnTensorAttr};

use crate::common;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `build/test-models/`, made (or remade, when a script is newer) once per test run.
fn models() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = root().join("build/test-models");
        let manifest = dir.join("manifest.json");
        let scripts = ["make_test_models.py", "reference.py", "preprocess.py"].map(|s| root().join("scripts/models").join(s));
        let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        let stale = match mtime(&manifest) {
            None => true,
            Some(made) => scripts.iter().any(|s| mtime(s).is_some_and(|t| t > made)),
        };
        if stale {
            let python = root().join("build/py-venv/bin/python");
            assert!(
                python.exists(),
                "{} is missing: run scripts/setup-test.sh (it makes the venv with the pinned onnx and onnxruntime of scripts/models/requirements.txt)",
                python.display()
            );
            let out = std::process::Command::new(&python)
                .arg(&scripts[0])
                .arg("--out")
                .arg(&dir)
                .output()
                .expect("run make_test_models.py");
            assert!(out.status.success(), "make_test_models.py failed:\n{}", String::from_utf8_lossy(&out.stderr));
            eprint!("{}", String::from_utf8_lossy(&out.stdout));
        }
        dir
    })
}

fn manifest() -> &'static Value {
    static M: OnceLock<Value> = OnceLock::new();
    M.get_or_init(|| serde_json::from_str(&std::fs::read_to_string(models().join("manifest.json")).unwrap()).unwrap())
}

fn cases() -> &'static [Value] {
    manifest()["cases"].as_array().unwrap()
}

fn thresholds() -> (f32, f32) {
    let m = manifest();
    (m["score_threshold"].as_f64().unwrap() as f32, m["nms_iou"].as_f64().unwrap() as f32)
}

/// One reference detection: (class, score, box).
type RefDet = (u32, f32, [f32; 4]);

fn reference(case: &Value, set: &str) -> Vec<RefDet> {
    case["reference"][set]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let b = d["box"].as_array().unwrap();
            (
                d["class_id"].as_u64().unwrap() as u32,
                d["score"].as_f64().unwrap() as f32,
                [0, 1, 2, 3].map(|i| b[i].as_f64().unwrap() as f32),
            )
        })
        .collect()
}

/// The `--input-size` a case's model is given (`None`: the model's own, or 640x640 for a
/// dynamic one).
fn input_size(case: &Value) -> Option<(u32, u32)> {
    case["input_size"].as_array().map(|s| (s[0].as_u64().unwrap() as u32, s[1].as_u64().unwrap() as u32))
}

fn anchors(case: &Value) -> Option<Anchors> {
    case["anchors"].as_str().map(|f| load_anchors(&models().join(f)).unwrap())
}

/// How two lists of detections were paired by [`same`].
#[derive(Debug, Default)]
struct Paired {
    /// Pairs made.
    n: usize,
    /// The largest |score difference| of a pair.
    max_score_diff: f32,
    /// The smallest IoU of a pair.
    min_iou: f32,
}

impl Paired {
    /// `G detections, N paired with the reference's W, max |score difference| .., min IoU ..`
    /// for `got` detections against the reference's `want`.
    fn summary(&self, got: usize, want: usize) -> String {
        format!(
            "{got} detections, {} paired with the reference's {want}, max |score difference| {:.4}, min IoU {:.4}",
            self.n, self.max_score_diff, self.min_iou
        )
    }
}

/// The same detections: each reference detection (best first) paired with the unpaired
/// detection of its class that overlaps it most, with IoU >= `min_iou` and |score
/// difference| <= `score_tol`, and no detection left unpaired; only detections scoring
/// within `score_tol` of the threshold `t` may go unpaired on either side (rounding puts
/// them on either side of it). Returns how many were paired, and how close; the error names
/// the first detection that is not.
fn same(got: &[Detection], want: &[RefDet], t: f32, score_tol: f32, min_iou: f32) -> Result<Paired, String> {
    let mut used = vec![false; got.len()];
    let mut paired = Paired { min_iou: 1.0, ..Paired::default() };
    for (i, (c, s, b)) in want.iter().enumerate() {
        let best = (0..got.len())
            .filter(|&j| !used[j] && got[j].class_id == *c)
            .max_by(|&x, &y| iou(&got[x].bbox, b).total_cmp(&iou(&got[y].bbox, b)));
        let fits = |j: usize| iou(&got[j].bbox, b) >= min_iou && (got[j].score - s).abs() <= score_tol;
        match best {
            Some(j) if fits(j) => {
                used[j] = true;
                paired.n += 1;
                paired.max_score_diff = paired.max_score_diff.max((got[j].score - s).abs());
                paired.min_iou = paired.min_iou.min(iou(&got[j].bbox, b));
            }
            _ if *s <= t + score_tol => {}
            Some(j) => {
                return Err(format!(
                    "reference detection {i} (class {c}, {s:.4}, {b:?}) vs {:?}: IoU {:.4}, score difference {:.4} ({} detections, the reference has {})",
                    got[j],
                    iou(&got[j].bbox, b),
                    (got[j].score - s).abs(),
                    got.len(),
                    want.len()
                ))
            }
            None => return Err(format!("reference detection {i} (class {c}, {s:.4}, {b:?}) has no detection of its class")),
        }
    }
    if let Some(j) = (0..got.len()).find(|&j| !used[j] && got[j].score > t + score_tol) {
        return Err(format!(
            "{:?} is not in the reference ({} detections, the reference has {})",
            got[j],
            got.len(),
            want.len()
        ));
    }
    Ok(paired)
}

/// How far over the threshold a candidate must score for [`covered`] to expect it in the
/// other type (a candidate nearer the threshold may fall under it).
const MARGIN: f32 = 0.05;
/// float16 against float32, per candidate: the score bound, the IoU bound (a decoded box in
/// pixels near 640 moves by up to 0.25 px in float16, which costs a small box a few % of IoU).
const F16_SCORE: f32 = 0.01;
const F16_IOU: f32 = 0.9;
/// int8 against float32, per candidate: the score bound, the IoU bound.
const INT8_SCORE: f32 = 0.05;
const INT8_IOU: f32 = 0.9;

/// The candidate-level check between types: every candidate of `a` scoring at least
/// `t + MARGIN` has one of its class in `b` with IoU >= `min_iou` and |score difference|
/// <= `score_tol`. Returns how many were checked.
fn covered(a: &[RefDet], b: &[RefDet], t: f32, score_tol: f32, min_iou: f32) -> Result<usize, String> {
    let mut n = 0;
    for (c, s, bx) in a.iter().filter(|d| d.1 >= t + MARGIN) {
        let ok = b.iter().any(|(c2, s2, b2)| c2 == c && iou(bx, b2) >= min_iou && (s - s2).abs() <= score_tol);
        if !ok {
            let near = b.iter().filter(|d| d.0 == *c).map(|d| (iou(bx, &d.2), d.1)).max_by(|x, y| x.0.total_cmp(&y.0));
            return Err(format!("class {c} {s:.4} {bx:?} has no match (nearest IoU and score: {near:?})"));
        }
        n += 1;
    }
    Ok(n)
}

/// An output attribute as librknnrt reports it for output `i` of `case` in `set`'s type
/// (`channels_last`: an NHWC map, dims `[1, H, W, C]`).
fn rknn_attr(case: &Value, i: usize, set: &str, channels_last: bool) -> RknnTensorAttr {
    let o = &case["outputs"][i];
    let mut dims: Vec<u32> = o["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as u32).collect();
    let fmt = match dims.len() {
        4 if channels_last => {
            dims = vec![dims[0], dims[2], dims[3], dims[1]];
            sys::RKNN_TENSOR_NHWC
        }
        4 => sys::RKNN_TENSOR_NCHW,
        _ => sys::RKNN_TENSOR_UNDEFINED,
    };
    let (type_, qnt_type) = match set {
        "f32" => (sys::RKNN_TENSOR_FLOAT32, sys::RKNN_TENSOR_QNT_NONE),
        "f16" => (sys::RKNN_TENSOR_FLOAT16, sys::RKNN_TENSOR_QNT_NONE),
        _ => (sys::RKNN_TENSOR_INT8, sys::RKNN_TENSOR_QNT_AFFINE_ASYMMETRIC),
    };
    let mut a = RknnTensorAttr {
        index: i as u32,
        n_dims: dims.len() as u32,
        fmt,
        type_,
        qnt_type,
        zp: o["zp"].as_i64().unwrap() as i32,
        scale: o["scale"].as_f64().unwrap() as f32,
        ..Default::default()
    };
    a.dims[..dims.len()].copy_from_slice(&dims);
    let name = format!("output{i}");
    a.name[..name.len()].copy_from_slice(name.as_bytes());
    a
}

/// Output `i` of `case` in `set`'s type as the runtime's bytes, in 4-byte words (as the
/// rknn backend keeps them); `channels_last` moves the channels of a map last.
fn rknn_bytes(case: &Value, i: usize, set: &str, channels_last: bool) -> (Vec<u32>, usize) {
    let (shape, data) = read_npy(&models().join(case["outputs"][i][set].as_str().unwrap())).unwrap();
    let mut bytes: Vec<u8> = match &data {
        NpyData::F32(v) => bytemuck::cast_slice(v).to_vec(),
        NpyData::F16(v) => bytemuck::cast_slice(v).to_vec(),
        NpyData::I8(v) => bytemuck::cast_slice(v).to_vec(),
        NpyData::U8(v) => v.clone(),
    };
    if channels_last && shape.len() == 4 {
        let (c, hw) = (shape[1], shape[2] * shape[3]);
        let size = bytes.len() / (c * hw);
        let mut t = vec![0u8; bytes.len()];
        for ch in 0..c {
            for k in 0..hw {
                let (from, to) = ((ch * hw + k) * size, (k * c + ch) * size);
                t[to..to + size].copy_from_slice(&bytes[from..from + size]);
            }
        }
        bytes = t;
    }
    let mut words = vec![0u32; bytes.len().div_ceil(4)];
    bytemuck::cast_slice_mut::<u32, u8>(&mut words)[..bytes.len()].copy_from_slice(&bytes);
    (words, bytes.len())
}

/// Decodes `case`'s outputs in `set`'s type the way the rknn backend does.
fn rknn_decode(case: &Value, set: &str, channels_last: bool) -> (HeadKind, Vec<Detection>) {
    let n = case["outputs"].as_array().unwrap().len();
    let infos: Vec<_> =
        (0..n).map(|i| zcpipe::infer::rknn::output_info(&rknn_attr(case, i, set, channels_last)).unwrap()).collect();
    let anchors = anchors(case);
    let m = heads::Model {
        width: case["width"].as_u64().unwrap() as u32,
        height: case["height"].as_u64().unwrap() as u32,
        outputs: &infos,
        anchors: anchors.as_ref(),
    };
    let head = heads::select(HeadKind::Auto, &m).unwrap();
    let kind = head.kind();
    let (t, nms) = thresholds();
    let dec = Decoder::new(head, infos.clone(), t, nms);
    let raw: Vec<(Vec<u32>, usize)> = (0..n).map(|i| rknn_bytes(case, i, set, channels_last)).collect();
    let tensors: Vec<TensorRef<'_>> = raw
        .iter()
        .zip(&infos)
        .map(|((w, len), info)| TensorRef::from_bytes(&bytemuck::cast_slice::<u32, u8>(w)[..*len], info.dtype).unwrap())
        .collect();
    (kind, dec.decode(&tensors).unwrap())
}

#[test]
fn rknn_path_matches_the_reference_for_every_layout_and_type() {
    let (t, _) = thresholds();
    let mut lines = Vec::new();
    for case in cases() {
        let name = case["name"].as_str().unwrap();
        let layout = case["layout"].as_str().unwrap();
        for set in ["f32", "f16", "i8"] {
            let (kind, got) = rknn_decode(case, set, false);
            assert_eq!(kind.to_string(), layout, "{name}");
            let want = reference(case, set);
            let paired = same(&got, &want, t, 0.01, 0.98).unwrap_or_else(|e| panic!("{name} {set}: {e}"));
            lines.push(format!(
                "{name} {set}: {} detections, {} paired with the reference's {}",
                got.len(),
                paired.n,
                want.len()
            ));
        }
        if layout.ends_with("-split") {
            let (_, got) = rknn_decode(case, "i8", true);
            same(&got, &reference(case, "i8"), t, 0.01, 0.98)
                .unwrap_or_else(|e| panic!("{name} i8 channels last: {e}"));
        }
    }
    eprintln!("{}", lines.join("\n"));
}

/// The candidates (before NMS) of `case`'s outputs in `set`'s type, decoded as the rknn
/// backend does.
fn rknn_candidates(case: &Value, set: &str) -> Vec<RefDet> {
    let n = case["outputs"].as_array().unwrap().len();
    let infos: Vec<_> =
        (0..n).map(|i| zcpipe::infer::rknn::output_info(&rknn_attr(case, i, set, false)).unwrap()).collect();
    let anchors = anchors(case);
    let m = heads::Model {
        width: case["width"].as_u64().unwrap() as u32,
        height: case["height"].as_u64().unwrap() as u32,
        outputs: &infos,
        anchors: anchors.as_ref(),
    };
    let head = heads::select(HeadKind::Auto, &m).unwrap();
    let raw: Vec<(Vec<u32>, usize)> = (0..n).map(|i| rknn_bytes(case, i, set, false)).collect();
    let tensors: Vec<TensorRef<'_>> = raw
        .iter()
        .zip(&infos)
        .map(|((w, len), info)| TensorRef::from_bytes(&bytemuck::cast_slice::<u32, u8>(w)[..*len], info.dtype).unwrap())
        .collect();
    let mut c = heads::Candidates::default();
    head.decode(&tensors, thresholds().0, &mut c);
    assert_eq!(c.nonfinite, 0);
    c.dets.iter().map(|d| (d.class_id, d.score, d.bbox)).collect()
}

#[test]
fn int8_and_float16_stay_close_to_float32() {
    let (t, _) = thresholds();
    for case in cases() {
        let name = case["name"].as_str().unwrap();
        let layout = case["layout"].as_str().unwrap();
        let f32s = rknn_candidates(case, "f32");
        // Decoded pixel boxes and scores in one int8 tensor lose the scores (one step is
        // several pixels): such exports keep float outputs, hence the zoo's split heads.
        let sets: &[(&str, f32, f32)] = if layout == "yolov5" || layout == "yolov8" {
            &[("f16", F16_SCORE, F16_IOU)]
        } else {
            &[("f16", F16_SCORE, F16_IOU), ("i8", INT8_SCORE, INT8_IOU)]
        };
        for &(set, score_tol, min_iou) in sets {
            let got = rknn_candidates(case, set);
            let n = covered(&f32s, &got, t, score_tol, min_iou).unwrap_or_else(|e| panic!("{name} {set} vs f32: {e}"));
            let m = covered(&got, &f32s, t, score_tol, min_iou).unwrap_or_else(|e| panic!("{name} f32 vs {set}: {e}"));
            eprintln!(
                "{name} {set}: {n} float32 candidates scoring >= {:.2} found in {set}, {m} the other way",
                t + MARGIN
            );
        }
    }
}

#[cfg(feature = "onnx")]
mod onnx {
    use super::*;
    use zcpipe::core::frame::{Fourcc, FrameLayout};
    use zcpipe::infer::onnx::OnnxDetector;
    use zcpipe::infer::{Detector, DetectorOptions};

    pub(super) fn open(case: &Value, model: &str, head: HeadKind) -> anyhow::Result<OnnxDetector> {
        let (t, nms) = thresholds();
        let opts = DetectorOptions {
            model: models().join(model),
            score_threshold: t,
            nms_iou: nms,
            head,
            anchors: anchors(case),
            input_size: input_size(case),
            ..Default::default()
        };
        OnnxDetector::open(&opts)
    }

    pub(super) fn case(name: &str) -> &'static Value {
        cases().iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("no case {name} in the manifest"))
    }

    /// The dynamic-input model (input `[batch,3,height,width]`) runs at 640x640 when no
    /// `--input-size` is given, and then finds exactly what its fixed-size twin (the same
    /// weights exported at 640x640) finds on the twin's test image; at `--input-size`
    /// 320x256 its output is `[1,84,1680]` (the reference comparison at that size is in
    /// `onnx_backend_matches_the_reference_for_every_layout`). The fixed twin refuses
    /// another `--input-size` and takes its own.
    #[test]
    fn a_dynamic_input_runs_at_640_or_the_input_size_and_a_fixed_one_refuses_another() {
        let dynamic = case("yolov8_dynamic_640_c80");
        let twin = case(dynamic["twin"].as_str().unwrap());
        assert_eq!((dynamic["dynamic"].as_bool(), input_size(dynamic)), (Some(true), None));
        let mut det = open(dynamic, dynamic["model"].as_str().unwrap(), HeadKind::Auto).unwrap();
        let spec = det.input_spec().clone();
        assert_eq!((spec.width, spec.height, spec.fourcc), (640, 640, Fourcc::RGB24));
        assert_eq!(det.outputs()[0].shape, vec![1, 84, 8400]);
        let mut fixed = open(twin, twin["model"].as_str().unwrap(), HeadKind::Auto).unwrap();
        let input = std::fs::read(models().join(twin["input"].as_str().unwrap())).unwrap();
        let layout = FrameLayout::packed24(Fourcc::RGB24, 640, 640, 640 * 3);
        let (got, want) = (det.detect(&input, &layout).unwrap(), fixed.detect(&input, &layout).unwrap());
        assert!(got.len() >= 100, "{} detections", got.len());
        assert_eq!(got, want, "the dynamic model at 640x640 and its fixed twin");
        same(&got, &reference(twin, "f32"), thresholds().0, 0.01, 0.98).unwrap();
        eprintln!(
            "{}: {} detections at 640x640 by default, as its fixed twin {}",
            dynamic["name"].as_str().unwrap(),
            got.len(),
            twin["name"].as_str().unwrap()
        );

        let small = case("yolov8_dynamic_320x256_c80");
        assert_eq!(input_size(small), Some((320, 256)));
        let det = open(small, small["model"].as_str().unwrap(), HeadKind::Auto).unwrap();
        let spec = det.input_spec();
        assert_eq!((spec.width, spec.height), (320, 256));
        // 40x32 + 20x16 + 10x8 cells.
        assert_eq!(det.outputs()[0].shape, vec![1, 84, 1680]);

        let model = twin["model"].as_str().unwrap();
        let err = format!("{:#}", open(small, model, HeadKind::Auto).unwrap_err());
        assert_eq!(
            err,
            format!(
                "--input-size 320x256 does not match the fixed input 640x640 of model {}: leave --input-size out (it sizes models whose input is dynamic) or use a model made for 320x256",
                models().join(model).display()
            )
        );
        let own = serde_json::json!({ "input_size": [640, 640] });
        let det = open(&own, model, HeadKind::Auto).unwrap();
        assert_eq!((det.input_spec().width, det.input_spec().height), (640, 640));
    }

    #[test]
    fn onnx_backend_matches_the_reference_for_every_layout() {
        for case in cases() {
            let name = case["name"].as_str().unwrap();
            let (w, h) = (case["width"].as_u64().unwrap() as u32, case["height"].as_u64().unwrap() as u32);
            let input = std::fs::read(models().join(case["input"].as_str().unwrap())).unwrap();
            // The test image is in the family's channel order, as the scaler writes it.
            let fourcc = match case["channel_order"].as_str().unwrap() {
                "rgb" => Fourcc::RGB24,
                _ => Fourcc::BGR24,
            };
            let layout = FrameLayout::packed24(fourcc, w, h, w * 3);
            let mut variants = vec![(case["model"].as_str().unwrap(), "f32")];
            if let Some(m) = case["model_f16"].as_str() {
                variants.push((m, "f16"));
            }
            for (model, set) in variants {
                let mut det = open(case, model, HeadKind::Auto).unwrap_or_else(|e| panic!("{name}: {e:#}"));
                let head = det.head().unwrap();
                assert_eq!(head.kind().to_string(), case["layout"].as_str().unwrap(), "{name}");
                let described = head.describe();
                assert_eq!(det.classes(), Some(case["classes"].as_u64().unwrap() as usize), "{name}");
                let names: Option<Vec<String>> =
                    case["names"].as_array().map(|a| a.iter().map(|n| n.as_str().unwrap().to_string()).collect());
                assert_eq!(det.labels(), names, "{name}");
                assert_eq!(
                    (det.input_spec().width, det.input_spec().height, det.input_spec().fourcc),
                    (w, h, fourcc),
                    "{name}"
                );
                let got = det.detect(&input, &layout).unwrap();
                // float32: onnxruntime's outputs decoded by the reference; float16: tract's
                // own outputs, shown to be onnxruntime's within one float16 step.
                let want = if set == "f16" {
                    reference_of_tract_f16(case, &det, &input, &layout)
                } else {
                    reference(case, set)
                };
                let paired =
                    same(&got, &want, thresholds().0, 0.01, 0.98).unwrap_or_else(|e| panic!("{name} ({model}): {e}"));
                eprintln!(
                    "{name} ({model}, {described}): {} detections, {} paired with the reference's {}",
                    got.len(),
                    paired.n,
                    want.len()
                );
            }
        }
    }

    /// `data` as an `.npy` file of `descr` (`<f2`, `<f4`) and `shape`.
    fn write_npy(path: &Path, descr: &str, shape: &[usize], data: &[u8]) {
        let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({},), }}", dims.join(", "));
        while !(10 + header.len() + 1).is_multiple_of(64) {
            header.push(' ');
        }
        header.push('\n');
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend_from_slice(data);
        std::fs::write(path, bytes).unwrap();
    }

    /// One output of a model: its shape and its values as float32 (exactly, from float16).
    pub(super) type Output = (Vec<usize>, Vec<f32>);

    /// tract's raw outputs of `det` on `input`, a packed frame in `layout` (converted to NCHW
    /// with the head's normalisation, as `detect` does).
    pub(super) fn tract_outputs(det: &OnnxDetector, input: &[u8], layout: &FrameLayout) -> Vec<Output> {
        let (w, h) = (layout.width as usize, layout.height as usize);
        let factor = det.head().unwrap().preprocess().normalise.factor();
        let mut nchw = vec![0.0f32; 3 * w * h];
        zcpipe::infer::onnx::packed_to_nchw_f32(input, layout, factor, &mut nchw).unwrap();
        let outs = det.run_outputs(nchw).unwrap();
        outs.iter()
            .zip(det.outputs())
            .map(|(o, info)| {
                let view = o.try_as_plain_ram().unwrap();
                let values = match info.dtype {
                    heads::Dtype::F16 => view.as_slice::<half::f16>().unwrap().iter().map(|v| v.to_f32()).collect(),
                    _ => view.as_slice::<f32>().unwrap().to_vec(),
                };
                (o.shape().to_vec(), values)
            })
            .collect()
    }

    /// For a float16 model: checks tract's outputs of `det` on `input` are onnxruntime's or
    /// one float16 step from them (2^-10 of the value, 1e-6 near zero), element by element,
    /// and returns the reference decoder's detections of tract's own outputs. (A step, 0.0005
    /// near 1, is more than neighbouring cells' scores differ by, so NMS on onnxruntime's
    /// values may keep the other box of a pair of near-equal ones.)
    fn reference_of_tract_f16(case: &Value, det: &OnnxDetector, input: &[u8], layout: &FrameLayout) -> Vec<RefDet> {
        let outs = tract_outputs(det, input, layout);
        let mut off = 0;
        for (i, (_, got)) in outs.iter().enumerate() {
            let (_, want) = read_npy(&models().join(case["outputs"][i]["f16"].as_str().unwrap())).unwrap();
            let NpyData::F16(want) = want else { panic!("{} is not float16", case["outputs"][i]["f16"]) };
            for (&a, b) in got.iter().zip(&want) {
                let b = b.to_f32();
                assert!(
                    (a - b).abs() <= (b.abs() / 1024.0).max(1e-6),
                    "{}: tract {a} vs onnxruntime {b}",
                    case["name"]
                );
                off += (a != b) as usize;
            }
        }
        eprintln!("{}: {off} float16 output values of tract differ from onnxruntime's by one step", case["name"]);
        reference_of_outputs(case, (layout.width, layout.height), &outs)
    }

    /// The reference decoder's (`reference.py`) detections of `outs`, outputs of `case`'s
    /// model run at `size` (written as float32: the decoder reads every type as float32).
    pub(super) fn reference_of_outputs(case: &Value, size: (u32, u32), outs: &[Output]) -> Vec<RefDet> {
        let dir = tempfile::tempdir().unwrap();
        let mut files = Vec::new();
        for (i, (shape, values)) in outs.iter().enumerate() {
            let file = dir.path().join(format!("out{i}.npy"));
            write_npy(&file, "<f4", shape, bytemuck::cast_slice(values));
            files.push(file);
        }
        let (w, h) = size;
        let (t, nms) = thresholds();
        let mut cmd = std::process::Command::new(root().join("build/py-venv/bin/python"));
        cmd.arg(root().join("scripts/models/reference.py"))
            .args(["--layout", case["layout"].as_str().unwrap(), "--width", &w.to_string(), "--height", &h.to_string()])
            .args(["--threshold", &t.to_string(), "--nms", &nms.to_string()]);
        if let Some(a) = case["anchors"].as_str() {
            cmd.arg("--anchors").arg(models().join(a));
        }
        let out = cmd.args(&files).output().unwrap();
        assert!(out.status.success(), "reference.py: {}", String::from_utf8_lossy(&out.stderr));
        let dets: Value = serde_json::from_slice(&out.stdout).unwrap();
        reference(&serde_json::json!({ "reference": { "tract": dets } }), "tract")
    }

    #[test]
    fn a_head_that_does_not_fit_is_one_line_naming_the_model() {
        let case = cases().iter().find(|c| c["layout"] == "yolov8").unwrap();
        let model = case["model"].as_str().unwrap();
        let err = format!("{:#}", open(case, model, HeadKind::Yolox).unwrap_err());
        assert!(!err.contains('\n'), "{err}");
        assert!(
            err.contains(model)
                && err.contains("--head yolox does not fit the model's outputs (output0 [1,84,8400] float32)"),
            "{err}"
        );
    }
}

/// The whole pipeline, one run per family (and two with the family's pre-processing
/// overridden), against the reference of the same model on the same image.
#[cfg(feature = "onnx")]
mod pipeline;

/// The forms users export (a float16 model, a dynamically quantized one) through the onnx
/// backend, against onnxruntime's outputs of the same models and the float32 model's.
#[cfg(feature = "onnx")]
mod exports;

/// zcpipe's rknn backend on the ABI fake of librknnrt (`fakes/librknnrt`), for every case and
/// output type: the fake runs the case's ONNX model with tract on the bytes zcpipe binds (the
/// case's input in a memfd imported with `rknn_create_mem_from_fd`, and the same bytes
/// through `rknn_inputs_set`), reports the model's input size and outputs, and hands the
/// outputs over in float32, float16 or int8 (each output's scale and zero point the
/// manifest's, from the model's `rknn_fake_quant` metadata; the input divided by its
/// `rknn_fake_std`, as a .rknn's mean/std would); zcpipe decodes them.
mod rknn_fake;

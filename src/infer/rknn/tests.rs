use std::path::{Path, PathBuf};

use super::*;
use crate::core::frame::LetterboxParams;
use crate::infer::nms::nms_per_class;
use crate::infer::yolox::read_npy_f32;

fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/golden").join(name)
}

#[test]
fn shipped_models_name_their_platform() {
    for (file, want) in [("yolox_nano_416_rk3588.rknn", "rk3588"), ("yolox_nano_416_rk3566_rk3568.rknn", "rk3566"), ("yolox_nano_416_rk3576.rknn", "rk3576")] {
        let bytes = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("models").join(file)).unwrap();
        assert_eq!(&bytes[..4], b"RKNN");
        assert_eq!(model_target_platforms(&bytes), vec![want.to_string()], "{file}");
    }
    assert!(model_target_platforms(b"RKNN no json here").is_empty());
}

#[test]
fn compatible_strings_and_platforms() {
    let dt = b"radxa,rock-5b\0rockchip,rk3588\0";
    assert_eq!(compatible_socs(dt), vec!["rk3588"]);
    assert_eq!(compatible_socs(b"xunlong,orangepi-5\0rockchip,rk3588s\0"), vec!["rk3588s"]);
    assert_eq!(compatible_socs(b"rockchip,rk3566-evb\0rockchip,rk3566\0"), vec!["rk3566"]);
    assert!(compatible_socs(b"raspberrypi,5-model-b\0brcm,bcm2712\0").is_empty());
    assert!(platform_runs_on("rk3588", "rk3588s"));
    assert!(platform_runs_on("rk3566", "rk3568"));
    assert!(!platform_runs_on("rk3588", "rk3566"));
    assert!(!platform_runs_on("rk3576", "rk3588"));
}

#[test]
fn npu_cores_parse() {
    assert_eq!(parse_npu_cores("0,1,2").unwrap(), vec![0, 1, 2]);
    assert_eq!(parse_npu_cores("2").unwrap(), vec![2]);
    assert!(parse_npu_cores("0,3").unwrap_err().contains("core 3 does not exist"));
    assert!(parse_npu_cores("1,1").unwrap_err().contains("twice"));
    assert!(parse_npu_cores("a").unwrap_err().contains("not a core number"));
    assert!(parse_npu_cores("").is_err());
}

#[test]
fn outputs_convert_in_every_supported_type() {
    let v = [0.0f32, 0.5, -1.25, 3.0];
    let mut out = Vec::new();
    let f32q = OutputQuant { type_: sys::RKNN_TENSOR_FLOAT32, qnt_type: 0, zp: 0, scale: 1.0, fl: 0 };
    let raw: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    output_to_f32(&raw, 4, &f32q, &mut out).unwrap();
    assert_eq!(out, v);
    let f16q = OutputQuant { type_: sys::RKNN_TENSOR_FLOAT16, ..f32q };
    // 0x3800 = 0.5, 0xBD00 = -1.25, 0x4200 = 3.0 (IEEE 754 binary16).
    let raw = [0x00, 0x00, 0x00, 0x38, 0x00, 0xBD, 0x00, 0x42];
    output_to_f32(&raw, 4, &f16q, &mut out).unwrap();
    assert_eq!(out, v);
    let i8q = OutputQuant { type_: sys::RKNN_TENSOR_INT8, qnt_type: sys::RKNN_TENSOR_QNT_AFFINE_ASYMMETRIC, zp: -31, scale: 0.0229, fl: 0 };
    // (q - zp) * scale: -31 -> 0, -9 -> 22 * 0.0229 = 0.5038, -128 -> -97 * 0.0229, 127 -> 158 * 0.0229.
    output_to_f32(&[(-31i8) as u8, (-9i8) as u8, 0x80, 0x7F], 4, &i8q, &mut out).unwrap();
    let want = [0.0, 22.0 * 0.0229, -97.0 * 0.0229, 158.0 * 0.0229];
    for (a, b) in out.iter().zip(want) {
        assert!((a - b).abs() < 1e-6, "{out:?}");
    }
    let dfp = OutputQuant { type_: sys::RKNN_TENSOR_INT8, qnt_type: sys::RKNN_TENSOR_QNT_DFP, zp: 0, scale: 1.0, fl: 2 };
    output_to_f32(&[(-6i8) as u8, 5], 2, &dfp, &mut out).unwrap();
    assert_eq!(out, vec![-1.5, 1.25]);
    let u8q = OutputQuant { type_: sys::RKNN_TENSOR_UINT8, qnt_type: sys::RKNN_TENSOR_QNT_AFFINE_ASYMMETRIC, zp: 128, scale: 0.5, fl: 0 };
    output_to_f32(&[128, 130, 0], 3, &u8q, &mut out).unwrap();
    assert_eq!(out, vec![0.0, 1.0, -64.0]);
    let err = output_to_f32(&[0; 7], 4, &f16q, &mut out).unwrap_err().to_string();
    assert!(err.contains("7 bytes") && err.contains("FP16"), "{err}");
    let bad = OutputQuant { type_: sys::RKNN_TENSOR_INT64, ..f32q };
    assert!(output_to_f32(&[0; 8], 1, &bad, &mut out).unwrap_err().to_string().contains("INT64"));
}

/// The golden simulator output, as the NPU would hand it over in `q`'s type, decoded by
/// our conversion and YOLOX decode; returns the detections unmapped to source pixels.
fn golden_through(stem: &str, q: &OutputQuant) -> (Vec<Detection>, LetterboxParams) {
    let (shape, f) = read_npy_f32(&golden(&format!("{stem}_sim_output.npy"))).unwrap();
    assert_eq!(shape, vec![1, 3549, 85]);
    let raw: Vec<u8> = match q.type_ {
        sys::RKNN_TENSOR_FLOAT16 => f.iter().flat_map(|&v| half::f16::from_f32(v).to_bits().to_le_bytes()).collect(),
        sys::RKNN_TENSOR_INT8 => f.iter().map(|&v| ((v / q.scale).round() as i32 + q.zp).clamp(-128, 127) as i8 as u8).collect(),
        _ => f.iter().flat_map(|v| v.to_le_bytes()).collect(),
    };
    let mut out = Vec::new();
    output_to_f32(&raw, 3549 * 85, q, &mut out).unwrap();
    let dets = nms_per_class(yolox::decode_yolox(&out, 3549, 85, 416, 416, 0.3).unwrap(), 0.45);
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(golden(&format!("{stem}_sim_detections.json"))).unwrap()).unwrap();
    let hw = json["image_hw"].as_array().unwrap();
    let lb = LetterboxParams::top_left(hw[1].as_u64().unwrap() as u32, hw[0].as_u64().unwrap() as u32, 416, 416);
    (dets, lb)
}

fn golden_dets(stem: &str) -> Vec<(u32, f32, [f32; 4])> {
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(golden(&format!("{stem}_sim_detections.json"))).unwrap()).unwrap();
    json["detections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let b = d["box_xyxy_clamped"].as_array().unwrap();
            (d["class_id"].as_u64().unwrap() as u32, d["score"].as_f64().unwrap() as f32, [0, 1, 2, 3].map(|i| b[i].as_f64().unwrap() as f32))
        })
        .collect()
}

#[test]
fn golden_float16_output_decodes_to_the_golden_detections() {
    // The shipped .rknn models output float16 (models/PROVENANCE.md); the goldens are the
    // simulator's output widened to float32, so narrowing them back is exact for every
    // value the simulator produced and the detections must be the golden ones.
    let q = OutputQuant { type_: sys::RKNN_TENSOR_FLOAT16, qnt_type: sys::RKNN_TENSOR_QNT_NONE, zp: 0, scale: 1.0, fl: 0 };
    for stem in ["dog", "astronaut"] {
        let (dets, lb) = golden_through(stem, &q);
        let want = golden_dets(stem);
        assert_eq!(dets.len(), want.len(), "{stem}: {dets:?}");
        for (d, (class_id, score, bx)) in dets.iter().zip(&want) {
            assert_eq!(d.class_id, *class_id, "{stem}");
            assert!((d.score - score).abs() < 1e-3, "{stem}: {} vs {score}", d.score);
            let m = lb.unmap_box(d.bbox);
            for k in 0..4 {
                assert!((m[k] - bx[k]).abs() <= 0.5, "{stem}: {m:?} vs {bx:?}");
            }
        }
    }
}

#[test]
fn golden_output_quantised_to_int8_keeps_the_detections() {
    // A w8a8 output (scale 0.0229, zero point -31, as a plain int8 YOLOX-Nano build
    // reports): every value moves by at most half a step (0.0115), so the golden objects
    // stay, scores within 0.03 and boxes within IoU 0.9.
    let q = OutputQuant { type_: sys::RKNN_TENSOR_INT8, qnt_type: sys::RKNN_TENSOR_QNT_AFFINE_ASYMMETRIC, zp: -31, scale: 0.0229, fl: 0 };
    for stem in ["dog", "astronaut"] {
        let (dets, lb) = golden_through(stem, &q);
        let want = golden_dets(stem);
        assert_eq!(dets.iter().map(|d| d.class_id).collect::<Vec<_>>(), want.iter().map(|w| w.0).collect::<Vec<_>>(), "{stem}: {dets:?}");
        for (d, (_, score, bx)) in dets.iter().zip(&want) {
            assert!((d.score - score).abs() < 0.03, "{stem}: {} vs {score}", d.score);
            let m = lb.unmap_box(d.bbox);
            assert!(crate::infer::nms::iou(&m, bx) > 0.9, "{stem}: {m:?} vs {bx:?}");
        }
    }
}

#[test]
fn non_rknn_file_is_refused_before_any_library() {
    let opts = DetectorOptions { model: Path::new(env!("CARGO_MANIFEST_DIR")).join("models/yolox_nano.onnx"), ..Default::default() };
    let err = RknnDetector::open(&opts).unwrap_err().to_string();
    assert!(err.contains("yolox_nano.onnx is not an RKNN model") && err.contains("--infer onnx"), "{err}");
    let opts = DetectorOptions { model: "/nonexistent/m.rknn".into(), ..Default::default() };
    let err = RknnDetector::open(&opts).unwrap_err().to_string();
    assert!(err.contains("/nonexistent/m.rknn") && err.contains("--model"), "{err}");
}

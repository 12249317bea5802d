use std::path::PathBuf;

use super::*;
use crate::heads::npy::read_npy_f32;
use zcpipe_core::frame::LetterboxParams;
use zcpipe_sys::rknn::RknnTensorAttr;

fn golden(name: &str) -> PathBuf {
    zcpipe_core::data::source_root().join("tests/data/golden").join(name)
}

#[test]
fn shipped_models_name_their_platform() {
    for (file, want) in [
        ("yolox_nano_416_rk3588.rknn", "rk3588"),
        ("yolox_nano_416_rk3566_rk3568.rknn", "rk3566"),
        ("yolox_nano_416_rk3576.rknn", "rk3576"),
    ] {
        let bytes = std::fs::read(zcpipe_core::data::source_root().join("models").join(file)).unwrap();
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

/// An output attribute as `RKNN_QUERY_OUTPUT_ATTR` fills it.
fn attr(dims: &[u32], fmt: u32, type_: u32, qnt_type: u32, zp: i32, scale: f32, fl: i8) -> RknnTensorAttr {
    let mut a = RknnTensorAttr { n_dims: dims.len() as u32, fmt, type_, qnt_type, zp, scale, fl, ..Default::default() };
    a.dims[..dims.len()].copy_from_slice(dims);
    a.name[..6].copy_from_slice(b"output");
    a
}

#[test]
fn outputs_are_described_in_every_supported_type() {
    use crate::heads::{Dtype, Quant, TensorRef};
    let none = sys::RKNN_TENSOR_QNT_NONE;
    let f32o =
        output_info(&attr(&[1, 3549, 85], sys::RKNN_TENSOR_UNDEFINED, sys::RKNN_TENSOR_FLOAT32, none, 0, 1.0, 0))
            .unwrap();
    assert_eq!((f32o.shape.as_slice(), f32o.dtype, f32o.channels_last), (&[1usize, 3549, 85][..], Dtype::F32, false));
    let f16o =
        output_info(&attr(&[1, 3549, 85], sys::RKNN_TENSOR_UNDEFINED, sys::RKNN_TENSOR_FLOAT16, none, 0, 1.0, 0))
            .unwrap();
    assert_eq!(f16o.dtype, Dtype::F16);
    let affine = sys::RKNN_TENSOR_QNT_AFFINE_ASYMMETRIC;
    let i8o =
        output_info(&attr(&[1, 64, 80, 80], sys::RKNN_TENSOR_NCHW, sys::RKNN_TENSOR_INT8, affine, -31, 0.0229, 0))
            .unwrap();
    assert_eq!(i8o.dtype, Dtype::I8(Quant { zp: -31, scale: 0.0229 }));
    // (q - zp) * scale: -31 -> 0, -9 -> 22 * 0.0229, -128 -> -97 * 0.0229, 127 -> 158 * 0.0229.
    let raw = [(-31i8) as u8, (-9i8) as u8, 0x80, 0x7F];
    let got = TensorRef::from_bytes(&raw, i8o.dtype).unwrap().to_f32_vec();
    let want = [0.0, 22.0 * 0.0229, -97.0 * 0.0229, 158.0 * 0.0229];
    for (a, b) in got.iter().zip(want) {
        assert!((a - b).abs() < 1e-6, "{got:?}");
    }
    // An NHWC map keeps its logical [1, C, H, W] shape and is marked channels-last.
    let nhwc =
        output_info(&attr(&[1, 80, 80, 64], sys::RKNN_TENSOR_NHWC, sys::RKNN_TENSOR_INT8, affine, 0, 0.5, 0)).unwrap();
    assert_eq!((nhwc.shape.as_slice(), nhwc.channels_last), (&[1usize, 64, 80, 80][..], true));
    // DFP: q / 2^fl.
    let dfp = output_info(&attr(
        &[1, 2],
        sys::RKNN_TENSOR_UNDEFINED,
        sys::RKNN_TENSOR_INT8,
        sys::RKNN_TENSOR_QNT_DFP,
        0,
        1.0,
        2,
    ))
    .unwrap();
    assert_eq!(TensorRef::from_bytes(&[(-6i8) as u8, 5], dfp.dtype).unwrap().to_f32_vec(), vec![-1.5, 1.25]);
    let u8o =
        output_info(&attr(&[1, 3], sys::RKNN_TENSOR_UNDEFINED, sys::RKNN_TENSOR_UINT8, affine, 128, 0.5, 0)).unwrap();
    assert_eq!(TensorRef::from_bytes(&[128, 130, 0], u8o.dtype).unwrap().to_f32_vec(), vec![0.0, 1.0, -64.0]);
    let err = output_info(&attr(&[1, 3], sys::RKNN_TENSOR_UNDEFINED, sys::RKNN_TENSOR_INT64, none, 0, 1.0, 0))
        .unwrap_err()
        .to_string();
    assert!(err.contains("output type INT64 is not supported"), "{err}");
    let err =
        output_info(&attr(&[1, 3], sys::RKNN_TENSOR_UNDEFINED, sys::RKNN_TENSOR_INT8, affine, 0, 0.0, 0)).unwrap_err();
    assert!(format!("{err:#}").contains("scale 0 is not a positive number"), "{err:#}");
}

/// The golden simulator output, as the NPU would hand it over in the type `a` describes,
/// decoded in that type by the head `output_info` and `heads::select` pick; returns the
/// detections and the letterbox to unmap them to source pixels.
fn golden_through(stem: &str, a: &RknnTensorAttr) -> (Vec<Detection>, LetterboxParams) {
    use crate::heads::{self, Decoder, HeadKind, TensorRef};
    let (shape, f) = read_npy_f32(&golden(&format!("{stem}_sim_output.npy"))).unwrap();
    assert_eq!(shape, vec![1, 3549, 85]);
    let raw: Vec<u8> = match a.type_ {
        sys::RKNN_TENSOR_FLOAT16 => f.iter().flat_map(|&v| half::f16::from_f32(v).to_bits().to_le_bytes()).collect(),
        sys::RKNN_TENSOR_INT8 => {
            f.iter().map(|&v| ((v / a.scale).round() as i32 + a.zp).clamp(-128, 127) as i8 as u8).collect()
        }
        _ => f.iter().flat_map(|v| v.to_le_bytes()).collect(),
    };
    // In 4-byte words, as the context keeps them, so a float32 view is aligned.
    let mut words = vec![0u32; raw.len().div_ceil(4)];
    bytemuck::cast_slice_mut::<u32, u8>(&mut words)[..raw.len()].copy_from_slice(&raw);
    let info = output_info(a).unwrap();
    let outs = vec![info.clone()];
    let m = heads::Model { width: 416, height: 416, outputs: &outs, anchors: None };
    let dec = Decoder::new(heads::select(HeadKind::Auto, &m).unwrap(), outs, 0.3, 0.45);
    assert_eq!(dec.head().kind(), HeadKind::Yolox);
    let t = TensorRef::from_bytes(&bytemuck::cast_slice::<u32, u8>(&words)[..raw.len()], info.dtype).unwrap();
    let dets = dec.decode(&[t]).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(golden(&format!("{stem}_sim_detections.json"))).unwrap())
            .unwrap();
    let hw = json["image_hw"].as_array().unwrap();
    let lb = LetterboxParams::top_left(hw[1].as_u64().unwrap() as u32, hw[0].as_u64().unwrap() as u32, 416, 416);
    (dets, lb)
}

fn golden_dets(stem: &str) -> Vec<(u32, f32, [f32; 4])> {
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(golden(&format!("{stem}_sim_detections.json"))).unwrap())
            .unwrap();
    json["detections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let b = d["box_xyxy_clamped"].as_array().unwrap();
            (
                d["class_id"].as_u64().unwrap() as u32,
                d["score"].as_f64().unwrap() as f32,
                [0, 1, 2, 3].map(|i| b[i].as_f64().unwrap() as f32),
            )
        })
        .collect()
}

#[test]
fn golden_float16_output_decodes_to_the_golden_detections() {
    // The shipped .rknn models output float16 (models/PROVENANCE.md); the goldens are the
    // simulator's output widened to float32, so narrowing them back is exact for every
    // value the simulator produced and the detections must be the golden ones.
    let a = attr(
        &[1, 3549, 85],
        sys::RKNN_TENSOR_UNDEFINED,
        sys::RKNN_TENSOR_FLOAT16,
        sys::RKNN_TENSOR_QNT_NONE,
        0,
        1.0,
        0,
    );
    for stem in ["dog", "astronaut"] {
        let (dets, lb) = golden_through(stem, &a);
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
    let a = attr(
        &[1, 3549, 85],
        sys::RKNN_TENSOR_UNDEFINED,
        sys::RKNN_TENSOR_INT8,
        sys::RKNN_TENSOR_QNT_AFFINE_ASYMMETRIC,
        -31,
        0.0229,
        0,
    );
    for stem in ["dog", "astronaut"] {
        let (dets, lb) = golden_through(stem, &a);
        let want = golden_dets(stem);
        assert_eq!(
            dets.iter().map(|d| d.class_id).collect::<Vec<_>>(),
            want.iter().map(|w| w.0).collect::<Vec<_>>(),
            "{stem}: {dets:?}"
        );
        for (d, (_, score, bx)) in dets.iter().zip(&want) {
            assert!((d.score - score).abs() < 0.03, "{stem}: {} vs {score}", d.score);
            let m = lb.unmap_box(d.bbox);
            assert!(crate::nms::iou(&m, bx) > 0.9, "{stem}: {m:?} vs {bx:?}");
        }
    }
}

#[test]
fn non_rknn_file_is_refused_before_any_library() {
    let opts = DetectorOptions {
        model: zcpipe_core::data::source_root().join("models/yolox_nano.onnx"),
        ..Default::default()
    };
    let err = RknnDetector::open(&opts).unwrap_err().to_string();
    assert!(err.contains("yolox_nano.onnx is not an RKNN model") && err.contains("--infer onnx"), "{err}");
    let opts = DetectorOptions { model: "/nonexistent/m.rknn".into(), ..Default::default() };
    let err = RknnDetector::open(&opts).unwrap_err().to_string();
    assert!(err.contains("/nonexistent/m.rknn") && err.contains("--model"), "{err}");
}

//! Decoding cost per frame of each model head (`cargo bench --bench heads`): the time
//! `heads::Decoder::decode` takes (thresholding, box decoding, per-class NMS) on one
//! frame's outputs, float32 against int8, for every layout of the test models.
//!
//! The outputs are those `scripts/models/make_test_models.py` saved for its test image
//! (`build/test-models/`, made by `cargo test --release --test pipeline heads::` or by running the
//! script with `build/py-venv/bin/python`), the int8 ones quantised per tensor as the RKNN
//! runtime hands them over. Those images are busy (dozens of coloured squares), so a frame
//! has more candidates than a typical camera frame: an upper side of the cost.
//!
//! Prints a markdown table: per case and type, the median and minimum µs per decode over
//! `ZCPIPE_BENCH_ROUNDS` rounds (default 15) of enough decodes to last about 50 ms.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use zcpipe::infer::heads::npy::{read_npy, NpyData};
use zcpipe::infer::heads::{self, load_anchors, Decoder, Dtype, HeadKind, OutputInfo, Quant, TensorRef};

fn main() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("build/test-models");
    let manifest: Value = match std::fs::read(dir.join("manifest.json")) {
        Ok(b) => serde_json::from_slice(&b).expect("manifest.json is JSON"),
        Err(e) => {
            eprintln!(
                "heads bench: {}: {e}; make the test models first: cargo test --release --test pipeline heads:: \
                 (or build/py-venv/bin/python scripts/models/make_test_models.py --out build/test-models)",
                dir.join("manifest.json").display()
            );
            std::process::exit(1);
        }
    };
    let rounds: usize = std::env::var("ZCPIPE_BENCH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(15);
    let t = manifest["score_threshold"].as_f64().unwrap() as f32;
    let nms = manifest["nms_iou"].as_f64().unwrap() as f32;
    println!("| case | head | input | outputs | detections f32 / int8 | f32 µs/frame (min) | int8 µs/frame (min) | int8 / f32 |");
    println!("|---|---|---|---|---|--:|--:|--:|");
    for case in manifest["cases"].as_array().unwrap() {
        let (f32_cost, f32_n, kind) = measure(&dir, case, "f32", t, nms, rounds);
        let (i8_cost, i8_n, _) = measure(&dir, case, "i8", t, nms, rounds);
        println!(
            "| {} | {kind} | {}x{} | {} | {f32_n} / {i8_n} | {:.1} ({:.1}) | {:.1} ({:.1}) | {:.2}x |",
            case["name"].as_str().unwrap(),
            case["width"],
            case["height"],
            case["outputs"].as_array().unwrap().len(),
            f32_cost.0,
            f32_cost.1,
            i8_cost.0,
            i8_cost.1,
            i8_cost.0 / f32_cost.0
        );
    }
}

/// Decodes `case`'s `set` outputs repeatedly: ((median, min) µs per decode, detections,
/// the head the outputs were recognised as).
fn measure(dir: &Path, case: &Value, set: &str, t: f32, nms: f32, rounds: usize) -> ((f64, f64), usize, HeadKind) {
    let outs = case["outputs"].as_array().unwrap();
    let data: Vec<(Vec<usize>, NpyData)> =
        outs.iter().map(|o| read_npy(&dir.join(o[set].as_str().unwrap())).unwrap()).collect();
    let quant = |o: &Value| Quant { zp: o["zp"].as_i64().unwrap() as i32, scale: o["scale"].as_f64().unwrap() as f32 };
    let infos: Vec<OutputInfo> = outs
        .iter()
        .zip(&data)
        .map(|(o, (shape, d))| {
            let dtype = match d {
                NpyData::F32(_) => Dtype::F32,
                NpyData::F16(_) => Dtype::F16,
                NpyData::I8(_) => Dtype::I8(quant(o)),
                NpyData::U8(_) => Dtype::U8(quant(o)),
            };
            OutputInfo::new(o["name"].as_str().unwrap_or("output"), shape, dtype)
        })
        .collect();
    let tensors: Vec<TensorRef<'_>> = outs
        .iter()
        .zip(&data)
        .map(|(o, (_, d))| match d {
            NpyData::F32(v) => TensorRef::F32(v),
            NpyData::F16(v) => TensorRef::F16(v),
            NpyData::I8(v) => TensorRef::I8(v, quant(o)),
            NpyData::U8(v) => TensorRef::U8(v, quant(o)),
        })
        .collect();
    let anchors = case["anchors"].as_str().map(|f| load_anchors(&dir.join(f)).unwrap());
    let model = heads::Model {
        width: case["width"].as_u64().unwrap() as u32,
        height: case["height"].as_u64().unwrap() as u32,
        outputs: &infos,
        anchors: anchors.as_ref(),
    };
    let head = heads::select(HeadKind::Auto, &model).unwrap();
    let kind = head.kind();
    let dec = Decoder::new(head, infos.clone(), t, nms);
    let n = dec.decode(&tensors).unwrap().len();
    // Decodes per round: about 50 ms' worth.
    let once = {
        let s = Instant::now();
        std::hint::black_box(dec.decode(&tensors).unwrap());
        s.elapsed().max(Duration::from_micros(1))
    };
    let per_round = (Duration::from_millis(50).as_secs_f64() / once.as_secs_f64()).clamp(1.0, 100_000.0) as usize;
    let mut us: Vec<f64> = (0..rounds)
        .map(|_| {
            let s = Instant::now();
            for _ in 0..per_round {
                std::hint::black_box(dec.decode(std::hint::black_box(&tensors)).unwrap());
            }
            s.elapsed().as_secs_f64() * 1e6 / per_round as f64
        })
        .collect();
    us.sort_by(f64::total_cmp);
    ((us[us.len() / 2], us[0]), n, kind)
}

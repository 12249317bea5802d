//! YOLOX (anchor-free, strides 8/16/32): one concatenated output `[1, N, 5 + C]`
//! (`--head yolox`, the bundled YOLOX-Nano) or rknn_model_zoo's three per-stride maps
//! `[1, 5 + C, H, W]` (`--head yolox-split`).
//!
//! The contract is `models/PROVENANCE.md` ("Tensors", "Decoding") and YOLOX
//! `demo_postprocess` / `multiclass_nms_class_aware` in `yolox/utils/demo_utils.py`; the
//! split form is the same head before the concatenation (rknn_model_zoo
//! `examples/yolox/cpp/postprocess.cc`). Per anchor, attributes `[tx, ty, tw, th, obj,
//! cls_0 .. cls_C-1]`, `obj` and `cls` already through a sigmoid and the box terms raw.
//! The flat output has `N = sum over s of (H/s) * (W/s)` rows (integer division, as
//! `demo_postprocess`; 3549 for 416x416), levels in stride order, each level's grid
//! row-major (`index = gy * (W/s) + gx`).
//!
//! For a cell `(gx, gy)` of stride `s`: `cx = (tx + gx) * s`, `cy = (ty + gy) * s`,
//! `w = exp(tw) * s`, `h = exp(th) * s`, box `[cx - w/2, cy - h/2, cx + w/2, cy + h/2]`;
//! and for **every** class `c` with `obj * cls[c] > threshold` one candidate with that
//! score (YOLOX `multiclass_nms_class_aware`: one cell can yield both `car` and `truck`;
//! the model zoo's C demo keeps only the best class, which gives the same boxes unless two
//! classes of one cell pass).

use super::tensor::{passes, with_elems, Elem, Plane, View};
use super::{finite_box, map_dims, map_stride, Candidates, Head, HeadKind, Model, Preprocess, TensorRef, STRIDES};
use crate::Detection;

/// Number of output rows YOLOX has for a `input_w x input_h` input: the sum of
/// `(input_h / s) * (input_w / s)` (integer division, as YOLOX `demo_postprocess`) over
/// [`STRIDES`]. 416x416 gives 52*52 + 26*26 + 13*13 = 3549.
pub(crate) fn grid_rows(input_w: u32, input_h: u32) -> usize {
    STRIDES.iter().map(|&s| (input_w / s) as usize * (input_h / s) as usize).sum()
}

/// One stride level: which output holds it, where its anchors are, its grid and stride.
#[derive(Clone, Debug)]
struct Level {
    output: usize,
    plane: Plane,
    gw: usize,
    gh: usize,
    stride: f32,
}

/// The YOLOX head, flat or split.
#[derive(Debug)]
pub(crate) struct YoloxHead {
    kind: HeadKind,
    levels: Vec<Level>,
    classes: usize,
}

/// `--head yolox`: one `[1, N, 5 + C]` output with `N = grid_rows(w, h)`.
pub(super) fn fit_flat(m: &Model<'_>) -> Result<Box<dyn Head>, String> {
    let rows = grid_rows(m.width, m.height);
    let need = format!("yolox needs one output [1,{rows},5+C] (C >= 1) for a {}x{} input", m.width, m.height);
    let [o] = m.outputs else { return Err(need) };
    let cols = match *o.shape.as_slice() {
        [1, n, k] if n == rows && k >= 6 => k,
        _ => return Err(need),
    };
    let mut levels = Vec::new();
    let mut row = 0;
    for &s in &STRIDES {
        let (gw, gh) = ((m.width / s) as usize, (m.height / s) as usize);
        levels.push(Level {
            output: 0,
            plane: Plane { base: row * cols, anchor: cols, attr: 1 },
            gw,
            gh,
            stride: s as f32,
        });
        row += gw * gh;
    }
    Ok(Box::new(YoloxHead { kind: HeadKind::Yolox, levels, classes: cols - 5 }))
}

/// `--head yolox-split`: three `[1, 5 + C, H, W]` maps, one per stride.
pub(super) fn fit_split(m: &Model<'_>) -> Result<Box<dyn Head>, String> {
    let need = "yolox-split needs 3 outputs [1,5+C,H,W] (C >= 1), one per stride of the input";
    if m.outputs.len() != 3 {
        return Err(need.into());
    }
    let mut levels = Vec::new();
    let mut classes = None;
    for (i, o) in m.outputs.iter().enumerate() {
        let Some((c, h, w)) = map_dims(o).filter(|d| d.0 >= 6) else {
            return Err(need.into());
        };
        if *classes.get_or_insert(c - 5) != c - 5 {
            return Err(format!("{need}: the outputs have different channel counts"));
        }
        let Some(s) = map_stride(m.width, m.height, w, h) else {
            return Err(format!(
                "{need}: output {} is a {w}x{h} grid, which no stride of a {}x{} input gives",
                o.name, m.width, m.height
            ));
        };
        levels.push(Level { output: i, plane: Plane::of_map(o, 0), gw: w, gh: h, stride: s as f32 });
    }
    Ok(Box::new(YoloxHead { kind: HeadKind::YoloxSplit, levels, classes: classes.unwrap_or(0) }))
}

impl Head for YoloxHead {
    fn kind(&self) -> HeadKind {
        self.kind
    }

    fn classes(&self) -> usize {
        self.classes
    }

    fn preprocess(&self) -> Preprocess {
        Preprocess::YOLOX
    }

    fn describe(&self) -> String {
        let grids: Vec<String> = self.levels.iter().map(|l| format!("{}x{}", l.gw, l.gh)).collect();
        let strides: Vec<String> = self.levels.iter().map(|l| l.stride.to_string()).collect();
        format!("{}: grids {} (strides {}), {} classes", self.kind, grids.join("/"), strides.join("/"), self.classes)
    }

    fn decode(&self, outputs: &[TensorRef<'_>], t: f32, out: &mut Candidates) {
        for lv in &self.levels {
            with_elems!(&outputs[lv.output], |d, q| decode_level(
                &View { d, q, p: lv.plane },
                lv,
                self.classes,
                t,
                out
            ));
        }
    }
}

/// Decodes one level (see the module documentation).
fn decode_level<E: Elem>(v: &View<'_, E>, lv: &Level, classes: usize, t: f32, out: &mut Candidates) {
    let q = v.q;
    let obj_floor = E::key_above(t, q);
    for gy in 0..lv.gh {
        for gx in 0..lv.gw {
            let k = gy * lv.gw + gx;
            let o = v.at(k, 4);
            if !passes(o.key(), obj_floor) {
                // cls <= 1, so no class of a cell with obj <= t passes.
                out.nonfinite += !E::finite(o.key()) as u64;
                continue;
            }
            let obj = o.value(q);
            if !obj.is_finite() {
                out.nonfinite += 1;
                continue;
            }
            // obj * cls > t  <=>  cls > t / obj (obj > t >= 0): compared on raw elements.
            let cls_floor = E::key_above(t / obj, q);
            let first = out.dets.len();
            let mut bad = false;
            for c in 0..classes {
                let e = v.at(k, 5 + c);
                if !E::finite(e.key()) {
                    bad = true;
                    break;
                }
                if passes(e.key(), cls_floor) {
                    let score = obj * e.value(q);
                    if score > t {
                        bad |= !score.is_finite();
                        out.dets.push(Detection { class_id: c as u32, score, bbox: [0.0; 4] });
                    }
                }
            }
            if !bad && out.dets.len() == first {
                continue;
            }
            let s = lv.stride;
            let cx = (v.value(k, 0) + gx as f32) * s;
            let cy = (v.value(k, 1) + gy as f32) * s;
            let w = v.value(k, 2).exp() * s;
            let h = v.value(k, 3).exp() * s;
            let b = [cx - w / 2.0, cy - h / 2.0, cx + w / 2.0, cy + h / 2.0];
            if bad || !finite_box(&b) {
                out.dets.truncate(first);
                out.nonfinite += 1;
                continue;
            }
            for det in &mut out.dets[first..] {
                det.bbox = b;
            }
        }
    }
}

#[cfg(test)]
mod tests {

    use super::super::npy::read_npy_f32;
    use super::super::{select, Decoder, Dtype, OutputInfo, Quant};
    use super::*;
    use zcpipe_core::frame::LetterboxParams;

    fn golden(name: &str) -> std::path::PathBuf {
        zcpipe_core::data::source_root().join("tests/data/golden").join(name)
    }

    /// A YOLOX decoder for one float32 `[1, rows, cols]` output of a `w x h` input.
    fn decoder(rows: usize, cols: usize, w: u32, h: u32, t: f32, nms: f32) -> Decoder {
        let outs = vec![OutputInfo::new("output", &[1, rows, cols], Dtype::F32)];
        let m = Model { width: w, height: h, outputs: &outs, anchors: None };
        Decoder::new(select(HeadKind::Yolox, &m).unwrap(), outs, t, nms)
    }

    /// Candidates before NMS, as the head gives them.
    fn candidates(out: &[f32], rows: usize, cols: usize, w: u32, h: u32, t: f32) -> Candidates {
        let outs = vec![OutputInfo::new("output", &[1, rows, cols], Dtype::F32)];
        let m = Model { width: w, height: h, outputs: &outs, anchors: None };
        let head = select(HeadKind::Yolox, &m).unwrap();
        let mut c = Candidates::default();
        head.decode(&[TensorRef::F32(out)], t, &mut c);
        c
    }

    /// (class_id, score, box_xyxy unclamped, box_xyxy_clamped) of one golden JSON detection.
    type GoldenDet = (u32, f32, [f32; 4], [f32; 4]);

    /// The `key` array of a golden JSON file, plus its image size (w, h).
    fn golden_json(name: &str, key: &str) -> ((u32, u32), Vec<GoldenDet>) {
        let text = std::fs::read_to_string(golden(name)).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let hw = v["image_hw"].as_array().unwrap();
        let size = (hw[1].as_u64().unwrap() as u32, hw[0].as_u64().unwrap() as u32);
        let b4 = |b: &serde_json::Value| -> [f32; 4] {
            let a = b.as_array().unwrap();
            [0, 1, 2, 3].map(|i| a[i].as_f64().unwrap() as f32)
        };
        let dets = v[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                (
                    d["class_id"].as_u64().unwrap() as u32,
                    d["score"].as_f64().unwrap() as f32,
                    b4(&d["box_xyxy"]),
                    b4(&d["box_xyxy_clamped"]),
                )
            })
            .collect();
        (size, dets)
    }

    /// Decodes `<stem>_sim_output.npy` with score 0.3 / NMS 0.45 and checks it against the
    /// `detections` of `<stem>_sim_detections.json`: same classes in the same order, scores
    /// within 1e-3 (the JSON rounds to 4 decimals), boxes within 0.5 px (the JSON rounds to
    /// 0.1 px) both unclamped (`box / r`) and clamped (`LetterboxParams::unmap_box`).
    fn check_golden(stem: &str) -> Vec<Detection> {
        let (shape, out) = read_npy_f32(&golden(&format!("{stem}_sim_output.npy"))).unwrap();
        assert_eq!(shape, vec![1, 3549, 85]);
        let dets = decoder(shape[1], shape[2], 416, 416, 0.3, 0.45).decode(&[TensorRef::F32(&out)]).unwrap();
        let ((w, h), want) = golden_json(&format!("{stem}_sim_detections.json"), "detections");
        let lb = LetterboxParams::top_left(w, h, 416, 416);
        assert_eq!(dets.len(), want.len(), "{stem}: got {dets:?}");
        for (d, (class_id, score, unclamped, clamped)) in dets.iter().zip(&want) {
            assert_eq!(d.class_id, *class_id, "{stem}: {d:?}");
            assert!((d.score - score).abs() < 1e-3, "{stem}: score {} vs golden {score}", d.score);
            let raw = d.bbox.map(|v| v / lb.scale);
            let mapped = lb.unmap_box(d.bbox);
            for i in 0..4 {
                assert!((raw[i] - unclamped[i]).abs() <= 0.5, "{stem}: box {raw:?} vs golden {unclamped:?}");
                assert!((mapped[i] - clamped[i]).abs() <= 0.5, "{stem}: box {mapped:?} vs golden {clamped:?}");
            }
        }
        dets
    }

    #[test]
    fn golden_dog_decodes_exactly() {
        let dets = check_golden("dog");
        // dog 0.8532, car 0.8123, bicycle 0.805; the borderline truck (0.306 on ONNX) is absent.
        assert_eq!(dets.iter().map(|d| d.class_id).collect::<Vec<_>>(), vec![16, 2, 1]);
    }

    #[test]
    fn golden_astronaut_decodes_exactly() {
        let dets = check_golden("astronaut");
        assert_eq!(dets.len(), 1);
        assert_eq!(dets[0].class_id, 0);
        assert!((dets[0].score - 0.9216).abs() < 1e-3);
    }

    #[test]
    fn golden_decisions_do_not_depend_on_iou_convention() {
        // YOLOX's numpy nms adds 1 px to widths/heights; ours does not. Show that no pair of
        // same-class candidates in the goldens sits where the two conventions disagree at 0.45.
        let plus1 = |a: &[f32; 4], b: &[f32; 4]| {
            let iw = (a[2].min(b[2]) - a[0].max(b[0]) + 1.0).max(0.0);
            let ih = (a[3].min(b[3]) - a[1].max(b[1]) + 1.0).max(0.0);
            let area = |r: &[f32; 4]| (r[2] - r[0] + 1.0) * (r[3] - r[1] + 1.0);
            iw * ih / (area(a) + area(b) - iw * ih)
        };
        for stem in ["dog", "astronaut"] {
            let (shape, out) = read_npy_f32(&golden(&format!("{stem}_sim_output.npy"))).unwrap();
            let ((w, h), _) = golden_json(&format!("{stem}_sim_detections.json"), "detections");
            let lb = LetterboxParams::top_left(w, h, 416, 416);
            let cands = candidates(&out, shape[1], shape[2], 416, 416, 0.3).dets;
            assert!(cands.len() > 3, "{stem}: only {} candidates", cands.len());
            for (i, a) in cands.iter().enumerate() {
                for b in &cands[i + 1..] {
                    if a.class_id != b.class_id {
                        continue;
                    }
                    let ours = crate::nms::iou(&a.bbox, &b.bbox);
                    // YOLOX runs NMS on original-image boxes.
                    let theirs = plus1(&a.bbox.map(|v| v / lb.scale), &b.bbox.map(|v| v / lb.scale));
                    assert_eq!(ours > 0.45, theirs > 0.45, "{stem}: {a:?} {b:?} iou {ours} vs {theirs}");
                }
            }
        }
    }

    #[test]
    fn golden_cells_have_one_class_over_threshold() {
        // YOLOX's class-aware NMS keeps every class over the threshold in a cell; keeping only
        // the best class per cell would give the same goldens, because no cell has two.
        for stem in ["dog", "astronaut"] {
            let (_, out) = read_npy_f32(&golden(&format!("{stem}_sim_output.npy"))).unwrap();
            let (mut cells, mut multi) = (0, 0);
            for r in out.chunks_exact(85) {
                let n = r[5..].iter().filter(|&&c| r[4] * c > 0.3).count();
                cells += (n > 0) as usize;
                multi += (n > 1) as usize;
            }
            assert!(cells > 0 && multi == 0, "{stem}: {cells} cells over 0.3, {multi} with several classes");
        }
    }

    /// A 64x64 input: 8*8 + 4*4 + 2*2 = 84 rows; 2 classes -> 7 columns; the stride 16
    /// cell (gx=1, gy=2) is row 64 + 2*4 + 1 = 73.
    fn hand_made() -> Vec<f32> {
        let mut out = vec![0.0f32; 84 * 7];
        let r = 73 * 7;
        out[r..r + 7].copy_from_slice(&[0.5, 0.25, 0.0, 2f32.ln(), 0.90625, 0.5, 0.8125]);
        out
    }

    #[test]
    fn decode_one_hand_made_cell() {
        assert_eq!(grid_rows(64, 64), 84);
        assert_eq!(grid_rows(416, 416), 3549);
        let out = hand_made();
        let dets = candidates(&out, 84, 7, 64, 64, 0.3).dets;
        // cx = (0.5 + 1) * 16 = 24, cy = (0.25 + 2) * 16 = 36, w = 16, h = 32.
        // Both classes pass: 0.90625 * 0.5 = 0.453125 and 0.90625 * 0.8125 = 0.736328125.
        assert_eq!(dets.len(), 2);
        assert_eq!(dets[0].class_id, 0);
        assert!((dets[0].score - 0.453125).abs() < 1e-6);
        assert!((dets[1].score - 0.90625 * 0.8125).abs() < 1e-6);
        for d in &dets {
            for (got, want) in d.bbox.iter().zip([16.0, 20.0, 32.0, 52.0]) {
                assert!((got - want).abs() < 1e-4, "{:?}", d.bbox);
            }
        }
        // Class 0 falls under a 0.5 threshold; class 1 stays.
        let dets = candidates(&out, 84, 7, 64, 64, 0.5).dets;
        assert_eq!(dets.iter().map(|d| d.class_id).collect::<Vec<_>>(), vec![1]);
    }

    #[test]
    fn the_same_cell_as_int8_and_as_split_maps() {
        let out = hand_made();
        let want = candidates(&out, 84, 7, 64, 64, 0.3).dets;
        // int8, scale 1/64: every value above is a multiple of 1/64 but ln 2, which moves
        // by at most 1/128 (h = exp(th) * 16 by at most 0.13 px), so the scores are exact.
        let q = Quant { zp: -10, scale: 1.0 / 64.0 };
        let i8s: Vec<i8> = out.iter().map(|v| ((v / q.scale).round() as i32 + q.zp) as i8).collect();
        let outs = vec![OutputInfo::new("output", &[1, 84, 7], Dtype::I8(q))];
        let m = Model { width: 64, height: 64, outputs: &outs, anchors: None };
        let mut c = Candidates::default();
        select(HeadKind::Yolox, &m).unwrap().decode(&[TensorRef::I8(&i8s, q)], 0.3, &mut c);
        assert_eq!(c.dets.len(), 2);
        for (a, b) in c.dets.iter().zip(&want) {
            assert_eq!(a.class_id, b.class_id);
            assert!((a.score - b.score).abs() < 1e-6, "{a:?} {b:?}");
            assert!(a.bbox.iter().zip(b.bbox).all(|(x, y)| (x - y).abs() < 0.2), "{a:?} {b:?}");
        }
        // The same head as three [1, 7, H, W] maps (NCHW), and channels last.
        let mut maps: Vec<Vec<f32>> = Vec::new();
        let mut row = 0;
        for g in [8usize, 4, 2] {
            let mut m = vec![0.0f32; 7 * g * g];
            for k in 0..g * g {
                for a in 0..7 {
                    m[a * g * g + k] = out[(row + k) * 7 + a];
                }
            }
            row += g * g;
            maps.push(m);
        }
        for channels_last in [false, true] {
            let tensors: Vec<Vec<f32>> = if channels_last {
                maps.iter()
                    .zip([8usize, 4, 2])
                    .map(|(m, g)| (0..m.len()).map(|i| m[(i % 7) * g * g + i / 7]).collect())
                    .collect()
            } else {
                maps.clone()
            };
            let outs: Vec<OutputInfo> = [8usize, 4, 2]
                .iter()
                .map(|&g| OutputInfo { channels_last, ..OutputInfo::new(format!("p{g}"), &[1, 7, g, g], Dtype::F32) })
                .collect();
            let m = Model { width: 64, height: 64, outputs: &outs, anchors: None };
            let head = select(HeadKind::Auto, &m).unwrap();
            assert_eq!(head.kind(), HeadKind::YoloxSplit);
            let refs: Vec<TensorRef<'_>> = tensors.iter().map(|t| TensorRef::F32(t)).collect();
            let mut c = Candidates::default();
            head.decode(&refs, 0.3, &mut c);
            assert_eq!(c.dets, want, "channels_last {channels_last}");
        }
    }

    #[test]
    fn non_finite_cells_are_skipped_and_counted() {
        let mut out = hand_made();
        // A NaN objectness elsewhere, an infinite box term in the detecting cell.
        out[3 * 7 + 4] = f32::NAN;
        let c = candidates(&out, 84, 7, 64, 64, 0.3);
        assert_eq!((c.dets.len(), c.nonfinite), (2, 1));
        out[73 * 7 + 2] = f32::INFINITY;
        let c = candidates(&out, 84, 7, 64, 64, 0.3);
        assert_eq!((c.dets.len(), c.nonfinite), (0, 2));
        // A NaN class score of a passing cell: the whole cell is skipped.
        let mut out = hand_made();
        out[73 * 7 + 6] = f32::NAN;
        let c = candidates(&out, 84, 7, 64, 64, 0.3);
        assert_eq!((c.dets.len(), c.nonfinite), (0, 1));
        // And the decoder adds them up over frames.
        let dec = decoder(84, 7, 64, 64, 0.3, 0.45);
        dec.decode(&[TensorRef::F32(&out)]).unwrap();
        dec.decode(&[TensorRef::F32(&out)]).unwrap();
        assert_eq!(dec.nonfinite(), 2);
    }

    #[test]
    fn decode_rejects_wrong_shapes() {
        let outs = vec![OutputInfo::new("output", &[1, 84, 7], Dtype::F32)];
        let m = Model { width: 96, height: 64, outputs: &outs, anchors: None };
        let err = select(HeadKind::Yolox, &m).unwrap_err().to_string();
        assert!(err.contains("[1,84,7]") && err.contains("96x64") && err.contains("[1,126,5+C]"), "{err}");
        let outs = vec![OutputInfo::new("output", &[1, 84, 5], Dtype::F32)];
        let m = Model { width: 64, height: 64, outputs: &outs, anchors: None };
        assert!(select(HeadKind::Yolox, &m).is_err());
        // A frame whose output does not match what was announced is an error, not a panic.
        let dec = decoder(84, 7, 64, 64, 0.3, 0.45);
        let out = vec![0.0f32; 84 * 7];
        let err = dec.decode(&[TensorRef::F32(&out[1..])]).unwrap_err().to_string();
        assert!(err.contains("587 float32 elements") && err.contains("[1,84,7] float32"), "{err}");
        assert!(dec.decode(&[]).is_err());
    }
}

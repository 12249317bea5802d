//! Ultralytics YOLOv8 and YOLO11 (anchor-free, no objectness, strides 8/16/32).
//!
//! - `--head yolov8`, the stock ONNX export (`yolo export format=onnx`): one output
//!   `[1, 4 + C, N]` (`N` grid cells; 8400 for 640x640), anchor `k`'s attributes at
//!   `attr * N + k`: `[cx, cy, w, h]` **decoded** in model-input pixels (the DFL and
//!   `dist2bbox` run inside the graph), then the `C` class scores after a sigmoid.
//! - `--head yolov8-split`, rknn_model_zoo's export (`airockchip/ultralytics_yolov8`,
//!   `examples/yolov8/cpp/postprocess.cc`): per stride, in this order, a box map
//!   `[1, 4 * R, H, W]` (`R = 16` DFL bins: a distribution over the distances, in strides,
//!   from the cell centre to the left, top, right and bottom sides), a score map
//!   `[1, C, H, W]` after the sigmoid, and optionally a score-sum map `[1, 1, H, W]`
//!   (the class scores summed, clipped to 1): 6 or 9 outputs. For cell `(gx, gy)` of
//!   stride `s`: each side's distance is the expectation `sum_i i * softmax(bins)_i`;
//!   `x1 = (gx + 0.5 - l) * s`, `y1 = (gy + 0.5 - t) * s`, `x2 = (gx + 0.5 + r) * s`,
//!   `y2 = (gy + 0.5 + b) * s` (Ultralytics `DFL` + `dist2bbox`).
//!
//! Scores: the best class `c` of an anchor, kept when `cls[c] > threshold` (Ultralytics
//! `non_max_suppression` with `multi_label=False`). With a score-sum map, a cell whose sum
//! is under the threshold is skipped before its classes are read (no class of it can pass),
//! as the model zoo's demo does; that skip is the only place where quantisation can drop a
//! borderline candidate a full scan would keep.

use super::tensor::{best_class, under, with_elems, Elem, Plane, View};
use super::{
    finite_box, grid_cells_ceil, map_dims, map_stride, Candidates, Head, HeadKind, Model, OutputInfo, Preprocess,
    TensorRef,
};
use crate::Detection;

/// One stride of the split head: its outputs (box, scores, optional sum) and grid.
#[derive(Clone, Debug)]
struct Level {
    box_out: usize,
    box_plane: Plane,
    cls_out: usize,
    cls_plane: Plane,
    sum: Option<(usize, Plane)>,
    gw: usize,
    gh: usize,
    stride: f32,
}

/// The YOLOv8 / YOLO11 head: decoded (`levels` empty) or split.
#[derive(Debug)]
pub(crate) struct Yolov8Head {
    kind: HeadKind,
    classes: usize,
    /// Flat: anchors (`N`).
    anchors: usize,
    /// Split: DFL bins per side and the levels.
    bins: usize,
    levels: Vec<Level>,
}

/// `--head yolov8`: one `[1, 4 + C, N]` output.
pub(super) fn fit_flat(m: &Model<'_>) -> Result<Box<dyn Head>, String> {
    let n = grid_cells_ceil(m.width, m.height);
    let need = format!("yolov8 needs one output [1,4+C,{n}] (C >= 1) for a {}x{} input", m.width, m.height);
    let [o] = m.outputs else { return Err(need) };
    match *o.shape.as_slice() {
        [1, k, a] if a == n && k >= 5 => {
            Ok(Box::new(Yolov8Head { kind: HeadKind::Yolov8, classes: k - 4, anchors: n, bins: 0, levels: Vec::new() }))
        }
        _ => Err(need),
    }
}

/// `--head yolov8-split`: per stride a box, a score and an optional sum map.
pub(super) fn fit_split(m: &Model<'_>) -> Result<Box<dyn Head>, String> {
    let n = m.outputs.len();
    let need = "yolov8-split needs 6 or 9 outputs: per stride, in order, [1,4*R,H,W] DFL box, [1,C,H,W] scores and optionally [1,1,H,W] score sum";
    if n != 6 && n != 9 {
        return Err(need.into());
    }
    let per = n / 3;
    let mut levels = Vec::new();
    let (mut classes, mut bins) = (None, None);
    for (g, group) in m.outputs.chunks(per).enumerate() {
        let dims: Vec<(usize, usize, usize)> = group.iter().filter_map(map_dims).collect();
        if dims.len() != per {
            return Err(need.into());
        }
        let (bc, h, w) = dims[0];
        if bc % 4 != 0 || dims.iter().any(|d| (d.1, d.2) != (h, w)) {
            return Err(format!("{need}: outputs {} are not one stride's box, scores and sum", names(group)));
        }
        if per == 3 && dims[2].0 != 1 {
            return Err(format!("{need}: output {} is not a [1,1,H,W] score sum", group[2].name));
        }
        if *bins.get_or_insert(bc / 4) != bc / 4 || *classes.get_or_insert(dims[1].0) != dims[1].0 {
            return Err(format!("{need}: the strides have different box or score channel counts"));
        }
        let Some(s) = map_stride(m.width, m.height, w, h) else {
            return Err(format!(
                "{need}: outputs {} are a {w}x{h} grid, which no stride of a {}x{} input gives",
                names(group),
                m.width,
                m.height
            ));
        };
        let at = g * per;
        levels.push(Level {
            box_out: at,
            box_plane: Plane::of_map(&group[0], 0),
            cls_out: at + 1,
            cls_plane: Plane::of_map(&group[1], 0),
            sum: (per == 3).then(|| (at + 2, Plane::of_map(&group[2], 0))),
            gw: w,
            gh: h,
            stride: s as f32,
        });
    }
    Ok(Box::new(Yolov8Head {
        kind: HeadKind::Yolov8Split,
        classes: classes.unwrap_or(0),
        anchors: 0,
        bins: bins.unwrap_or(0),
        levels,
    }))
}

fn names(group: &[OutputInfo]) -> String {
    group.iter().map(|o| o.name.as_str()).collect::<Vec<_>>().join(", ")
}

impl Head for Yolov8Head {
    fn kind(&self) -> HeadKind {
        self.kind
    }

    fn classes(&self) -> usize {
        self.classes
    }

    fn preprocess(&self) -> Preprocess {
        Preprocess::ULTRALYTICS
    }

    fn describe(&self) -> String {
        if self.levels.is_empty() {
            return format!("{}: {} decoded boxes, {} classes", self.kind, self.anchors, self.classes);
        }
        let grids: Vec<String> = self.levels.iter().map(|l| format!("{}x{}", l.gw, l.gh)).collect();
        let strides: Vec<String> = self.levels.iter().map(|l| l.stride.to_string()).collect();
        let sum = if self.levels.iter().all(|l| l.sum.is_some()) { ", score sum" } else { "" };
        format!(
            "{}: grids {} (strides {}), DFL {} bins{sum}, {} classes",
            self.kind,
            grids.join("/"),
            strides.join("/"),
            self.bins,
            self.classes
        )
    }

    fn decode(&self, outputs: &[TensorRef<'_>], t: f32, out: &mut Candidates) {
        if self.levels.is_empty() {
            let p = Plane { base: 0, anchor: 1, attr: self.anchors };
            with_elems!(&outputs[0], |d, q| decode_flat(&View { d, q, p }, self.anchors, self.classes, t, out));
            return;
        }
        let mut cells = Vec::new();
        let mut found = Vec::new();
        let mut dfl = vec![0.0f32; 4 * self.bins];
        for lv in &self.levels {
            let hw = lv.gw * lv.gh;
            cells.clear();
            found.clear();
            match lv.sum {
                Some((i, p)) => with_elems!(&outputs[i], |d, q| sum_pass(&View { d, q, p }, hw, t, &mut cells, out)),
                None => cells.extend(0..hw),
            }
            let p = lv.cls_plane;
            with_elems!(&outputs[lv.cls_out], |d, q| class_pass(
                &View { d, q, p },
                &cells,
                self.classes,
                t,
                &mut found,
                out
            ));
            let p = lv.box_plane;
            with_elems!(&outputs[lv.box_out], |d, q| box_pass(&View { d, q, p }, lv, self.bins, &found, &mut dfl, out));
        }
    }
}

/// Decoded `[1, 4 + C, N]`.
fn decode_flat<E: Elem>(v: &View<'_, E>, n: usize, classes: usize, t: f32, out: &mut Candidates) {
    let floor = E::key_above(t, v.q);
    for k in 0..n {
        let mut bad = false;
        let best = best_class(v, k, 4, classes, floor, &mut bad);
        if bad {
            out.nonfinite += 1;
            continue;
        }
        let Some((c, _)) = best else { continue };
        let score = v.value(k, 4 + c);
        let [cx, cy, w, h] = [0, 1, 2, 3].map(|a| v.value(k, a));
        let b = [cx - w / 2.0, cy - h / 2.0, cx + w / 2.0, cy + h / 2.0];
        if !finite_box(&b) {
            out.nonfinite += 1;
        } else if score > t {
            out.dets.push(Detection { class_id: c as u32, score, bbox: b });
        }
    }
}

/// The cells whose score sum is not under `t` (quantised compare); counts non-finite sums.
fn sum_pass<E: Elem>(v: &View<'_, E>, hw: usize, t: f32, cells: &mut Vec<usize>, out: &mut Candidates) {
    let below = E::key_below(t, v.q);
    for k in 0..hw {
        let key = v.at(k, 0).key();
        if !E::finite(key) {
            out.nonfinite += 1;
        } else if !under(key, below) {
            cells.push(k);
        }
    }
}

/// The best class over `t` of each of `cells`: `(cell, class, score)`.
fn class_pass<E: Elem>(
    v: &View<'_, E>,
    cells: &[usize],
    classes: usize,
    t: f32,
    found: &mut Vec<(usize, usize, f32)>,
    out: &mut Candidates,
) {
    let floor = E::key_above(t, v.q);
    for &k in cells {
        let mut bad = false;
        let best = best_class(v, k, 0, classes, floor, &mut bad);
        if bad {
            out.nonfinite += 1;
            continue;
        }
        if let Some((c, _)) = best {
            let score = v.value(k, c);
            if score > t {
                found.push((k, c, score));
            }
        }
    }
}

/// The DFL boxes of the found cells.
fn box_pass<E: Elem>(
    v: &View<'_, E>,
    lv: &Level,
    bins: usize,
    found: &[(usize, usize, f32)],
    dfl: &mut [f32],
    out: &mut Candidates,
) {
    for &(k, c, score) in found {
        for (a, x) in dfl.iter_mut().enumerate() {
            *x = v.value(k, a);
        }
        let [l, tp, r, b] = [0, 1, 2, 3].map(|side| expectation(&dfl[side * bins..(side + 1) * bins]));
        let (gx, gy) = ((k % lv.gw) as f32 + 0.5, (k / lv.gw) as f32 + 0.5);
        let s = lv.stride;
        let bbox = [(gx - l) * s, (gy - tp) * s, (gx + r) * s, (gy + b) * s];
        if finite_box(&bbox) {
            out.dets.push(Detection { class_id: c as u32, score, bbox });
        } else {
            out.nonfinite += 1;
        }
    }
}

/// `sum_i i * softmax(bins)_i` (softmax shifted by the maximum; NaN if any bin is).
fn expectation(bins: &[f32]) -> f32 {
    let m = bins.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let (mut sum, mut acc) = (0.0f32, 0.0f32);
    for (i, &v) in bins.iter().enumerate() {
        let e = (v - m).exp();
        sum += e;
        acc += e * i as f32;
    }
    if bins.iter().any(|v| !v.is_finite()) {
        return f32::NAN;
    }
    acc / sum
}

#[cfg(test)]
mod tests {
    use super::super::{select, Dtype, Quant};
    use super::*;

    #[test]
    fn dfl_expectation() {
        // One-hot-ish bins: the expectation is the index.
        let mut bins = [-30.0f32; 16];
        bins[5] = 30.0;
        assert!((expectation(&bins) - 5.0).abs() < 1e-4);
        // Equal bins: the mean index, 7.5.
        assert!((expectation(&[0.0; 16]) - 7.5).abs() < 1e-5);
        // Two equal peaks at 2 and 4: 3.
        let mut bins = [-50.0f32; 16];
        bins[2] = 10.0;
        bins[4] = 10.0;
        assert!((expectation(&bins) - 3.0).abs() < 1e-4);
        bins[7] = f32::NAN;
        assert!(expectation(&bins).is_nan());
    }

    #[test]
    fn decoded_transposed_output() {
        // 64x64: 84 anchors, 2 classes: [1, 6, 84].
        let n = 84;
        let mut out = vec![0.0f32; 6 * n];
        let k = 70;
        for (a, v) in [40.0f32, 24.0, 10.0, 6.0, 0.2, 0.7].iter().enumerate() {
            out[a * n + k] = *v;
        }
        out[5 * n + 3] = f32::NAN;
        let outs = vec![OutputInfo::new("output0", &[1, 6, n], Dtype::F32)];
        let m = Model { width: 64, height: 64, outputs: &outs, anchors: None };
        let head = select(HeadKind::Auto, &m).unwrap();
        assert_eq!((head.kind(), head.classes()), (HeadKind::Yolov8, 2));
        let mut c = Candidates::default();
        head.decode(&[TensorRef::F32(&out)], 0.25, &mut c);
        assert_eq!(c.dets, vec![Detection { class_id: 1, score: 0.7, bbox: [35.0, 21.0, 45.0, 27.0] }]);
        assert_eq!(c.nonfinite, 1);
    }

    /// A 64x64 input, 3 classes, 4 bins per side: maps [1,16,g,g], [1,3,g,g], [1,1,g,g].
    fn split_maps(sum: bool) -> (Vec<OutputInfo>, Vec<Vec<f32>>) {
        let mut outs = Vec::new();
        let mut maps = Vec::new();
        for g in [8usize, 4, 2] {
            outs.push(OutputInfo::new(format!("box{g}"), &[1, 16, g, g], Dtype::F32));
            outs.push(OutputInfo::new(format!("cls{g}"), &[1, 3, g, g], Dtype::F32));
            maps.push(vec![-20.0f32; 16 * g * g]);
            maps.push(vec![0.01f32; 3 * g * g]);
            if sum {
                outs.push(OutputInfo::new(format!("sum{g}"), &[1, 1, g, g], Dtype::F32));
                maps.push(vec![0.03f32; g * g]);
            }
        }
        let per = if sum { 3 } else { 2 };
        // Stride 16 (second group), cell (gx 2, gy 1) = k 6: class 2 at 0.8; sides 1, 2, 3, 0.
        let (hw, k) = (16, 6);
        maps[per + 1][2 * hw + k] = 0.8;
        if sum {
            maps[per + 2][k] = 0.82;
        }
        for (side, bin) in [1usize, 2, 3, 0].iter().enumerate() {
            maps[per][(side * 4 + bin) * hw + k] = 20.0;
        }
        (outs, maps)
    }

    #[test]
    fn split_dfl_boxes_with_and_without_the_score_sum() {
        for sum in [true, false] {
            let (outs, maps) = split_maps(sum);
            let m = Model { width: 64, height: 64, outputs: &outs, anchors: None };
            let head = select(HeadKind::Auto, &m).unwrap();
            assert_eq!((head.kind(), head.classes()), (HeadKind::Yolov8Split, 3), "sum {sum}");
            let refs: Vec<TensorRef<'_>> = maps.iter().map(|t| TensorRef::F32(t)).collect();
            let mut c = Candidates::default();
            head.decode(&refs, 0.25, &mut c);
            assert_eq!(c.dets.len(), 1, "{:?}", c.dets);
            let d = c.dets[0];
            assert_eq!((d.class_id, d.score), (2, 0.8));
            // centre (2.5, 1.5) * 16 = (40, 24); l 1, t 2, r 3, b 0 strides.
            let want = [24.0, -8.0, 88.0, 24.0];
            assert!(d.bbox.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-3), "{:?}", d.bbox);
        }
    }

    #[test]
    fn score_sum_skips_cells_in_the_quantised_domain() {
        let (outs, maps) = split_maps(true);
        // int8, one scale for every map: 1/100 for scores and sums, 1/4 for boxes.
        let qs = Quant { zp: -100, scale: 0.01 };
        let qb = Quant { zp: 0, scale: 0.25 };
        let quant: Vec<(Vec<i8>, Quant)> = maps
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let q = if i % 3 == 0 { qb } else { qs };
                (m.iter().map(|v| ((v / q.scale).round() as i32 + q.zp).clamp(-128, 127) as i8).collect(), q)
            })
            .collect();
        let outs: Vec<OutputInfo> =
            outs.iter().zip(&quant).map(|(o, (_, q))| OutputInfo { dtype: Dtype::I8(*q), ..o.clone() }).collect();
        let m = Model { width: 64, height: 64, outputs: &outs, anchors: None };
        let head = select(HeadKind::Auto, &m).unwrap();
        let refs: Vec<TensorRef<'_>> = quant.iter().map(|(d, q)| TensorRef::I8(d, *q)).collect();
        let mut c = Candidates::default();
        head.decode(&refs, 0.25, &mut c);
        assert_eq!(c.dets.len(), 1, "{:?}", c.dets);
        assert_eq!(c.dets[0].class_id, 2);
        assert!((c.dets[0].score - 0.8).abs() < 1e-6);
        assert!(
            c.dets[0].bbox.iter().zip([24.0, -8.0, 88.0, 24.0]).all(|(a, b)| (a - b).abs() < 1e-3),
            "{:?}",
            c.dets[0].bbox
        );
        // With the cell's sum lowered under the threshold, the cell is skipped although its
        // class score is not (the sum is the early exit the model zoo uses).
        let mut quant = quant;
        quant[5].0[6] = (0.2f32 / qs.scale) as i8 + qs.zp as i8;
        let refs: Vec<TensorRef<'_>> = quant.iter().map(|(d, q)| TensorRef::I8(d, *q)).collect();
        let mut c = Candidates::default();
        head.decode(&refs, 0.25, &mut c);
        assert!(c.dets.is_empty(), "{:?}", c.dets);
    }

    #[test]
    fn split_shapes_that_do_not_fit() {
        let (mut outs, _) = split_maps(true);
        outs[2].shape = vec![1, 2, 8, 8];
        let m = Model { width: 64, height: 64, outputs: &outs, anchors: None };
        let err = select(HeadKind::Yolov8Split, &m).unwrap_err().to_string();
        assert!(err.contains("sum8 is not a [1,1,H,W] score sum"), "{err}");
        let (mut outs, _) = split_maps(false);
        outs[1].shape = vec![1, 3, 4, 4];
        let m = Model { width: 64, height: 64, outputs: &outs, anchors: None };
        let err = select(HeadKind::Yolov8Split, &m).unwrap_err().to_string();
        assert!(err.contains("box8, cls8 are not one stride's box"), "{err}");
    }
}

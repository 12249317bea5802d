//! YOLOv5 (and YOLOv7, whose export has the same output): anchor-based, three anchors per
//! cell at strides 8/16/32.
//!
//! - `--head yolov5`, the stock ONNX export (`export.py`, `Detect` with the grid and anchors
//!   inside the graph): one output `[1, 3N, 5 + C]` (`N` grid cells; 25200 for 640x640),
//!   attributes `[cx, cy, w, h, obj, cls_0 .. cls_C-1]` with the box **decoded** in
//!   model-input pixels and `obj`, `cls` after a sigmoid. Told apart from YOLOX's
//!   `[1, N, 5 + C]` by the row count.
//! - `--head yolov5-split`, rknn_model_zoo's export (`examples/yolov5`): the `Detect` layer
//!   stops after the sigmoid, one `[1, 3 * (5 + C), H, W]` map per stride, anchor `a`'s
//!   attributes at channels `a * (5 + C) ..`. For a cell `(gx, gy)` of stride `s` and anchor
//!   `(aw, ah)` in pixels: `cx = (2 * x - 0.5 + gx) * s`, `cy = (2 * y - 0.5 + gy) * s`,
//!   `w = (2 * w')^2 * aw`, `h = (2 * h')^2 * ah` (YOLOv5 `Detect.forward`; the model zoo's
//!   `postprocess.cc`). Anchors: [`Anchors::MODEL_ZOO`] (YOLOv5's defaults) or `--anchors FILE`.
//!
//! Scores follow YOLOv5's `non_max_suppression` with its defaults: a cell with `obj <=
//! threshold` is dropped first, then its best class `c` gives `score = obj * cls[c]`, kept
//! when `> threshold` (one candidate per anchor, `multi_label=False`).

use std::path::Path;

use anyhow::{bail, Context, Result};

use super::tensor::{best_class, passes, with_elems, Elem, Plane, View};
use super::{
    finite_box, grid_cells_ceil, map_dims, map_stride, Candidates, Head, HeadKind, Model, Preprocess, TensorRef,
};
use crate::Detection;

/// Anchor boxes in model-input pixels: three levels (strides 8, 16, 32, smallest first),
/// three `(w, h)` anchors each.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Anchors(pub [[[f32; 2]; 3]; 3]);

impl Anchors {
    /// YOLOv5's default anchors (`models/yolov5s.yaml`), which rknn_model_zoo's YOLOv5 demo
    /// uses too (`anchors_yolov5.txt`).
    pub(crate) const MODEL_ZOO: Anchors = Anchors([
        [[10.0, 13.0], [16.0, 30.0], [33.0, 23.0]],
        [[30.0, 61.0], [62.0, 45.0], [59.0, 119.0]],
        [[116.0, 90.0], [156.0, 198.0], [373.0, 326.0]],
    ]);

    /// Parses 18 numbers (`w h` of 3 anchors for each of 3 strides, smallest stride first)
    /// separated by white space, commas or brackets, as rknn_model_zoo's
    /// `anchors_yolov5.txt` (one per line) or a YOLOv5 yaml's `anchors:` rows. `#` starts
    /// a comment.
    pub fn parse(text: &str) -> Result<Anchors> {
        let mut v = Vec::new();
        for line in text.lines().map(|l| l.split('#').next().unwrap_or("")) {
            for word in line.split(|c: char| c.is_whitespace() || ",[]".contains(c)).filter(|w| !w.is_empty()) {
                let x: f32 = word.parse().with_context(|| format!("`{word}` is not a number"))?;
                if !(x.is_finite() && x > 0.0) {
                    bail!("anchor size {word} is not a positive number");
                }
                v.push(x);
            }
        }
        if v.len() != 18 {
            bail!("{} numbers found, 18 needed (w h of 3 anchors for each of strides 8, 16, 32)", v.len());
        }
        let mut a = [[[0.0; 2]; 3]; 3];
        for (i, x) in v.into_iter().enumerate() {
            a[i / 6][(i / 2) % 3][i % 2] = x;
        }
        Ok(Anchors(a))
    }
}

/// Reads `--anchors FILE` ([`Anchors::parse`]); the error names the file and the format.
pub fn load_anchors(path: &Path) -> Result<Anchors> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "cannot read anchors file {}: pass a text file with the 18 anchor sizes of a YOLOv5 model",
            path.display()
        )
    })?;
    Anchors::parse(&text).with_context(|| format!("anchors file {}", path.display()))
}

/// One stride level and anchor of the split head.
#[derive(Clone, Debug)]
struct Level {
    output: usize,
    plane: Plane,
    gw: usize,
    gh: usize,
    stride: f32,
    anchor: [f32; 2],
}

/// The YOLOv5 head: decoded rows (`rows > 0`) or split maps (`levels`).
#[derive(Debug)]
pub(crate) struct Yolov5Head {
    kind: HeadKind,
    classes: usize,
    /// Flat: number of rows (anchors) and attributes per row.
    rows: usize,
    cols: usize,
    /// Split: one entry per (stride, anchor).
    levels: Vec<Level>,
    anchors: Option<Anchors>,
}

/// `--head yolov5`: one `[1, 3N, 5 + C]` output.
pub(super) fn fit_flat(m: &Model<'_>) -> Result<Box<dyn Head>, String> {
    let rows = 3 * grid_cells_ceil(m.width, m.height);
    let need = format!(
        "yolov5 needs one output [1,{rows},5+C] (C >= 1, 3 anchors per cell) for a {}x{} input",
        m.width, m.height
    );
    let [o] = m.outputs else { return Err(need) };
    match *o.shape.as_slice() {
        [1, n, k] if n == rows && k >= 6 => Ok(Box::new(Yolov5Head {
            kind: HeadKind::Yolov5,
            classes: k - 5,
            rows,
            cols: k,
            levels: Vec::new(),
            anchors: None,
        })),
        _ => Err(need),
    }
}

/// `--head yolov5-split`: three `[1, 3 * (5 + C), H, W]` maps.
pub(super) fn fit_split(m: &Model<'_>) -> Result<Box<dyn Head>, String> {
    let need = "yolov5-split needs 3 outputs [1,3*(5+C),H,W] (C >= 1), one per stride of the input";
    if m.outputs.len() != 3 {
        return Err(need.into());
    }
    let mut maps = Vec::new();
    let mut per = None;
    for (i, o) in m.outputs.iter().enumerate() {
        let Some((c, h, w)) = map_dims(o).filter(|d| d.0 % 3 == 0 && d.0 / 3 >= 6) else {
            return Err(need.into());
        };
        if *per.get_or_insert(c / 3) != c / 3 {
            return Err(format!("{need}: the outputs have different channel counts"));
        }
        let Some(s) = map_stride(m.width, m.height, w, h) else {
            return Err(format!(
                "{need}: output {} is a {w}x{h} grid, which no stride of a {}x{} input gives",
                o.name, m.width, m.height
            ));
        };
        maps.push((i, o, w, h, s));
    }
    // Anchors go by stride, smallest first, whatever the output order.
    let mut by_stride: Vec<u32> = maps.iter().map(|m| m.4).collect();
    by_stride.sort_unstable();
    by_stride.dedup();
    if by_stride.len() != 3 {
        return Err(format!("{need}: two outputs have the same stride"));
    }
    let anchors = *m.anchors.unwrap_or(&Anchors::MODEL_ZOO);
    let per = per.unwrap_or(6);
    let mut levels = Vec::new();
    for (i, o, w, h, s) in maps {
        let rank = by_stride.iter().position(|&x| x == s).unwrap_or(0);
        for (a, anchor) in anchors.0[rank].iter().enumerate() {
            levels.push(Level {
                output: i,
                plane: Plane::of_map(o, a * per),
                gw: w,
                gh: h,
                stride: s as f32,
                anchor: *anchor,
            });
        }
    }
    Ok(Box::new(Yolov5Head {
        kind: HeadKind::Yolov5Split,
        classes: per - 5,
        rows: 0,
        cols: 0,
        levels,
        anchors: Some(anchors),
    }))
}

impl Head for Yolov5Head {
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
        match self.anchors {
            None => format!("{}: {} decoded boxes, {} classes", self.kind, self.rows, self.classes),
            Some(a) => {
                let grids: Vec<String> = self.levels.iter().step_by(3).map(|l| format!("{}x{}", l.gw, l.gh)).collect();
                let strides: Vec<String> = self.levels.iter().step_by(3).map(|l| l.stride.to_string()).collect();
                let sizes: Vec<String> = a.0.iter().flatten().map(|[w, h]| format!("{w}x{h}")).collect();
                format!(
                    "{}: grids {} (strides {}), 3 anchors per cell ({}), {} classes",
                    self.kind,
                    grids.join("/"),
                    strides.join("/"),
                    sizes.join(" "),
                    self.classes
                )
            }
        }
    }

    fn decode(&self, outputs: &[TensorRef<'_>], t: f32, out: &mut Candidates) {
        if self.levels.is_empty() {
            let p = Plane { base: 0, anchor: self.cols, attr: 1 };
            with_elems!(&outputs[0], |d, q| decode_rows(&View { d, q, p }, self.rows, self.cols - 5, t, out));
        } else {
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
}

/// The objectness of anchor `k` if it passes `obj_floor` and is finite; counts a
/// non-finite one.
#[inline]
fn objectness<E: Elem>(v: &View<'_, E>, k: usize, obj_floor: E::Key, out: &mut Candidates) -> Option<f32> {
    let o = v.at(k, 4);
    if !passes(o.key(), obj_floor) {
        out.nonfinite += !E::finite(o.key()) as u64;
        return None;
    }
    let obj = o.value(v.q);
    if !obj.is_finite() {
        out.nonfinite += 1;
        return None;
    }
    Some(obj)
}

/// The best class of anchor `k` with `obj * cls > t`: `(class, score)`; counts an anchor
/// with a non-finite class score.
#[inline]
fn scored<E: Elem>(
    v: &View<'_, E>,
    k: usize,
    obj: f32,
    classes: usize,
    t: f32,
    out: &mut Candidates,
) -> Option<(usize, f32)> {
    let mut bad = false;
    let best = best_class(v, k, 5, classes, E::key_above(t / obj, v.q), &mut bad);
    if bad {
        out.nonfinite += 1;
        return None;
    }
    let (c, _) = best?;
    let score = obj * v.value(k, 5 + c);
    (score > t).then_some((c, score))
}

/// Decoded rows `[cx, cy, w, h, obj, cls..]` (the stock export).
fn decode_rows<E: Elem>(v: &View<'_, E>, rows: usize, classes: usize, t: f32, out: &mut Candidates) {
    let obj_floor = E::key_above(t, v.q);
    for k in 0..rows {
        let Some(obj) = objectness(v, k, obj_floor, out) else {
            continue;
        };
        let Some((c, score)) = scored(v, k, obj, classes, t, out) else {
            continue;
        };
        let [cx, cy, w, h] = [0, 1, 2, 3].map(|a| v.value(k, a));
        push(out, c, score, [cx - w / 2.0, cy - h / 2.0, cx + w / 2.0, cy + h / 2.0]);
    }
}

/// One stride and anchor of the split head (sigmoid outputs, decoded here).
fn decode_level<E: Elem>(v: &View<'_, E>, lv: &Level, classes: usize, t: f32, out: &mut Candidates) {
    let obj_floor = E::key_above(t, v.q);
    let s = lv.stride;
    for gy in 0..lv.gh {
        for gx in 0..lv.gw {
            let k = gy * lv.gw + gx;
            let Some(obj) = objectness(v, k, obj_floor, out) else {
                continue;
            };
            let Some((c, score)) = scored(v, k, obj, classes, t, out) else {
                continue;
            };
            let [x, y, w, h] = [0, 1, 2, 3].map(|a| v.value(k, a));
            let cx = (x * 2.0 - 0.5 + gx as f32) * s;
            let cy = (y * 2.0 - 0.5 + gy as f32) * s;
            let bw = (w * 2.0).powi(2) * lv.anchor[0];
            let bh = (h * 2.0).powi(2) * lv.anchor[1];
            push(out, c, score, [cx - bw / 2.0, cy - bh / 2.0, cx + bw / 2.0, cy + bh / 2.0]);
        }
    }
}

/// Pushes a candidate, or counts it when its box is not finite.
#[inline]
fn push(out: &mut Candidates, c: usize, score: f32, bbox: [f32; 4]) {
    if finite_box(&bbox) {
        out.dets.push(Detection { class_id: c as u32, score, bbox });
    } else {
        out.nonfinite += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::super::{select, Dtype, OutputInfo};
    use super::*;

    #[test]
    fn anchors_parse_from_the_model_zoo_file_and_yaml_rows() {
        let zoo = "10.0\n13.0\n16.0\n30.0\n33.0\n23.0\n30.0\n61.0\n62.0\n45.0\n59.0\n119.0\n116.0\n90.0\n156.0\n198.0\n373.0\n326.0\n";
        assert_eq!(Anchors::parse(zoo).unwrap(), Anchors::MODEL_ZOO);
        let yaml = "# P3/8\n[10,13, 16,30, 33,23]\n[30,61, 62,45, 59,119]  # P4/16\n[116,90, 156,198, 373,326]\n";
        assert_eq!(Anchors::parse(yaml).unwrap(), Anchors::MODEL_ZOO);
        let err = Anchors::parse("10 13 16").unwrap_err().to_string();
        assert!(err.contains("3 numbers found, 18 needed"), "{err}");
        assert!(Anchors::parse(&zoo.replace("33.0", "x")).unwrap_err().to_string().contains("`x` is not a number"));
        assert!(Anchors::parse(&zoo.replace("33.0", "-3")).is_err());
        let err = load_anchors(Path::new("/nonexistent/anchors.txt")).unwrap_err().to_string();
        assert!(err.contains("/nonexistent/anchors.txt"), "{err}");
    }

    #[test]
    fn decoded_rows() {
        // 64x64: 3 * 84 = 252 rows, 2 classes.
        let mut out = vec![0.0f32; 252 * 7];
        out[10 * 7..11 * 7].copy_from_slice(&[20.0, 30.0, 8.0, 16.0, 0.8, 0.25, 0.75]);
        // obj passes, best class 0.8 * 0.75 = 0.6; a row whose obj is under the threshold.
        out[11 * 7..12 * 7].copy_from_slice(&[20.0, 30.0, 8.0, 16.0, 0.29, 1.0, 1.0]);
        let outs = vec![OutputInfo::new("output0", &[1, 252, 7], Dtype::F32)];
        let m = Model { width: 64, height: 64, outputs: &outs, anchors: None };
        let head = select(HeadKind::Auto, &m).unwrap();
        assert_eq!((head.kind(), head.classes()), (HeadKind::Yolov5, 2));
        let mut c = Candidates::default();
        head.decode(&[TensorRef::F32(&out)], 0.3, &mut c);
        assert_eq!(c.dets, vec![Detection { class_id: 1, score: 0.6, bbox: [16.0, 22.0, 24.0, 38.0] }]);
        // 0.6 is not above 0.6.
        let mut c = Candidates::default();
        head.decode(&[TensorRef::F32(&out)], 0.6, &mut c);
        assert!(c.dets.is_empty());
    }

    #[test]
    fn split_maps_with_anchors() {
        // 64x64 input, 1 class: maps [1, 18, 8, 8], [1, 18, 4, 4], [1, 18, 2, 2].
        let maps: Vec<Vec<f32>> = [8usize, 4, 2].iter().map(|g| vec![0.0f32; 18 * g * g]).collect();
        let mut maps = maps;
        // Stride 16 map, anchor 2 (channels 12..18), cell (gx 3, gy 1) = k 7.
        let (hw, k) = (16, 7);
        for (a, v) in [0.75f32, 0.25, 0.5, 0.25, 0.9, 0.5].iter().enumerate() {
            maps[1][(12 + a) * hw + k] = *v;
        }
        let outs: Vec<OutputInfo> =
            [8usize, 4, 2].iter().map(|&g| OutputInfo::new(format!("o{g}"), &[1, 18, g, g], Dtype::F32)).collect();
        let custom = Anchors::parse(&(1..=18).map(|i| (i * 2).to_string()).collect::<Vec<_>>().join(" ")).unwrap();
        for (anchors, aw, ah) in [(None, 59.0, 119.0), (Some(&custom), 22.0, 24.0)] {
            let m = Model { width: 64, height: 64, outputs: &outs, anchors };
            let head = select(HeadKind::Yolov5Split, &m).unwrap();
            assert_eq!(head.classes(), 1);
            let refs: Vec<TensorRef<'_>> = maps.iter().map(|t| TensorRef::F32(t)).collect();
            let mut c = Candidates::default();
            head.decode(&refs, 0.3, &mut c);
            // cx = (1.5 - 0.5 + 3) * 16 = 64, cy = (0.5 - 0.5 + 1) * 16 = 16,
            // w = (2 * 0.5)^2 * aw, h = (2 * 0.25)^2 * ah; score 0.9 * 0.5.
            let (w, h) = (aw, 0.25 * ah);
            assert_eq!(
                c.dets,
                vec![Detection {
                    class_id: 0,
                    score: 0.45,
                    bbox: [64.0 - w / 2.0, 16.0 - h / 2.0, 64.0 + w / 2.0, 16.0 + h / 2.0]
                }]
            );
        }
    }
}

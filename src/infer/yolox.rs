//! YOLOX output decoding (anchor-free, strides 8/16/32), shared by every backend.
//!
//! The contract is `models/PROVENANCE.md` ("Tensors", "Decoding") and YOLOX
//! `demo_postprocess` / `multiclass_nms_class_aware` in `yolox/utils/demo_utils.py`. The
//! output is float32 `[1, N, 5 + C]`: `N = sum over s in {8, 16, 32} of (H/s) * (W/s)`
//! rows (3549 for 416x416), stride levels in that order, each level's grid row-major
//! (`index = gy * (W/s) + gx`); columns `[tx, ty, tw, th, obj, cls_0 .. cls_C-1]` with `obj`
//! and `cls` already through a sigmoid and the box terms raw.

use std::path::Path;

use anyhow::{bail, ensure, Context};

use super::Detection;

/// YOLOX head strides, in output row order.
pub const STRIDES: [u32; 3] = [8, 16, 32];

/// Number of output rows YOLOX has for a `input_w x input_h` input: the sum of
/// `(input_h / s) * (input_w / s)` (integer division, as YOLOX `demo_postprocess`) over
/// [`STRIDES`]. 416x416 gives 52*52 + 26*26 + 13*13 = 3549.
pub fn grid_rows(input_w: u32, input_h: u32) -> usize {
    STRIDES.iter().map(|&s| (input_w / s) as usize * (input_h / s) as usize).sum()
}

/// Decodes a raw YOLOX output into detections, before NMS.
///
/// `output` is the row-major float32 tensor `[1, rows, cols]` (`cols = 5 + classes`) for a
/// `input_w x input_h` model input. For each row at grid cell `(gx, gy)` of stride `s`:
/// `cx = (tx + gx) * s`, `cy = (ty + gy) * s`, `w = exp(tw) * s`, `h = exp(th) * s`, box
/// `[cx - w/2, cy - h/2, cx + w/2, cy + h/2]` in model-input pixels; and for **every** class
/// `c` with `obj * cls[c] > score_threshold` one [`Detection`] with that score (YOLOX
/// `multiclass_nms_class_aware`: one cell can yield, say, both `car` and `truck`).
///
/// Errors if `output.len() != rows * cols`, `cols < 6`, or `rows` is not
/// [`grid_rows`]`(input_w, input_h)` (a model exported for another input size or head).
pub fn decode_yolox(
    output: &[f32],
    rows: usize,
    cols: usize,
    input_w: u32,
    input_h: u32,
    score_threshold: f32,
) -> anyhow::Result<Vec<Detection>> {
    ensure!(cols >= 6, "YOLOX output has {cols} columns; it needs [tx, ty, tw, th, obj] and at least one class score");
    ensure!(
        output.len() == rows * cols,
        "YOLOX output holds {} values, not rows {} x cols {} = {}",
        output.len(),
        rows,
        cols,
        rows * cols
    );
    let expected = grid_rows(input_w, input_h);
    ensure!(
        rows == expected,
        "YOLOX output has {rows} rows but a {input_w}x{input_h} input with strides 8/16/32 gives {expected}: the model was exported for another input size"
    );
    let mut dets = Vec::new();
    let mut chunks = output.chunks_exact(cols);
    for &s in &STRIDES {
        let (gw, gh) = (input_w / s, input_h / s);
        let sf = s as f32;
        for gy in 0..gh {
            for gx in 0..gw {
                // `rows == grid_rows()` was checked, so every cell has its row.
                let Some(row) = chunks.next() else { bail!("YOLOX output ended early") };
                let obj = row[4];
                // cls <= 1 after the sigmoid, so a cell with obj <= threshold has no class
                // above it; the check below still decides per class.
                if obj.is_nan() || obj <= score_threshold {
                    continue;
                }
                let mut bbox = None;
                for (c, &cls) in row[5..].iter().enumerate() {
                    let score = obj * cls;
                    if score > score_threshold {
                        let b = *bbox.get_or_insert_with(|| {
                            let cx = (row[0] + gx as f32) * sf;
                            let cy = (row[1] + gy as f32) * sf;
                            let w = row[2].exp() * sf;
                            let h = row[3].exp() * sf;
                            [cx - w / 2.0, cy - h / 2.0, cx + w / 2.0, cy + h / 2.0]
                        });
                        dets.push(Detection { class_id: c as u32, score, bbox: b });
                    }
                }
            }
        }
    }
    Ok(dets)
}

/// Reads a numpy `.npy` file of little-endian float32 (`descr '<f4'`, C order; format
/// versions 1.0, 2.0 and 3.0) and returns `(shape, values)`. Used for the raw output goldens
/// in `tests/data/golden/*_sim_output.npy` (float32 `[1, 3549, 85]`).
pub fn read_npy_f32(path: &Path) -> anyhow::Result<(Vec<usize>, Vec<f32>)> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    parse_npy_f32(&bytes).with_context(|| format!("{} is not a float32 .npy file", path.display()))
}

/// Parses the bytes of a `.npy` file as in [`read_npy_f32`].
pub fn parse_npy_f32(bytes: &[u8]) -> anyhow::Result<(Vec<usize>, Vec<f32>)> {
    ensure!(bytes.len() >= 10 && &bytes[..6] == b"\x93NUMPY", "no .npy magic");
    let (header_len, header_start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 => {
            ensure!(bytes.len() >= 12, "truncated .npy header");
            (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12)
        }
        v => bail!("unsupported .npy version {v}"),
    };
    let data_start = header_start + header_len;
    ensure!(bytes.len() >= data_start, "truncated .npy header");
    let header = std::str::from_utf8(&bytes[header_start..data_start]).context(".npy header is not text")?;
    let field = |key: &str| -> anyhow::Result<&str> {
        let pat = format!("'{key}':");
        let at = header.find(&pat).with_context(|| format!(".npy header has no {key}: {header}"))?;
        Ok(header[at + pat.len()..].trim_start())
    };
    ensure!(field("descr")?.starts_with("'<f4'"), ".npy dtype is not little-endian float32: {}", header.trim());
    ensure!(field("fortran_order")?.starts_with("False"), ".npy array is in Fortran order");
    let shape_text = field("shape")?;
    ensure!(shape_text.starts_with('('), ".npy shape is not a tuple: {}", header.trim());
    let close = shape_text.find(')').context(".npy shape tuple is not closed")?;
    let shape = shape_text[1..close]
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| d.parse::<usize>().with_context(|| format!(".npy shape entry `{d}` is not a number")))
        .collect::<anyhow::Result<Vec<usize>>>()?;
    let count: usize = shape.iter().product();
    let data = &bytes[data_start..];
    ensure!(data.len() == count * 4, ".npy shape {:?} needs {} bytes of data, file has {}", shape, count * 4, data.len());
    let values = data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    Ok((shape, values))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::frame::LetterboxParams;
    use crate::infer::nms::nms_per_class;

    fn golden(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/golden").join(name)
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
        let dets = nms_per_class(decode_yolox(&out, shape[1], shape[2], 416, 416, 0.3).unwrap(), 0.45);
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
            let cands = decode_yolox(&out, shape[1], shape[2], 416, 416, 0.3).unwrap();
            assert!(cands.len() > 3, "{stem}: only {} candidates", cands.len());
            for (i, a) in cands.iter().enumerate() {
                for b in &cands[i + 1..] {
                    if a.class_id != b.class_id {
                        continue;
                    }
                    let ours = super::super::nms::iou(&a.bbox, &b.bbox);
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

    #[test]
    fn decode_one_hand_made_cell() {
        // 64x64 input: 8*8 + 4*4 + 2*2 = 84 rows; 2 classes -> 7 columns.
        assert_eq!(grid_rows(64, 64), 84);
        assert_eq!(grid_rows(416, 416), 3549);
        let mut out = vec![0.0f32; 84 * 7];
        // Stride 16 level starts at row 64; cell (gx=1, gy=2) is row 64 + 2*4 + 1 = 73.
        let r = 73 * 7;
        out[r..r + 7].copy_from_slice(&[0.5, 0.25, 0.0, 2f32.ln(), 0.9, 0.5, 0.8]);
        let dets = decode_yolox(&out, 84, 7, 64, 64, 0.3).unwrap();
        // cx = (0.5 + 1) * 16 = 24, cy = (0.25 + 2) * 16 = 36, w = 16, h = 32.
        // Both classes pass: 0.9*0.5 = 0.45 and 0.9*0.8 = 0.72.
        assert_eq!(dets.len(), 2);
        assert_eq!(dets[0].class_id, 0);
        assert!((dets[0].score - 0.45).abs() < 1e-6);
        assert!((dets[1].score - 0.72).abs() < 1e-6);
        for d in &dets {
            for (got, want) in d.bbox.iter().zip([16.0, 20.0, 32.0, 52.0]) {
                assert!((got - want).abs() < 1e-4, "{:?}", d.bbox);
            }
        }
        // Class 0 falls under a 0.5 threshold; class 1 stays.
        let dets = decode_yolox(&out, 84, 7, 64, 64, 0.5).unwrap();
        assert_eq!(dets.iter().map(|d| d.class_id).collect::<Vec<_>>(), vec![1]);
    }

    #[test]
    fn decode_rejects_wrong_shapes() {
        let out = vec![0.0f32; 84 * 7];
        let err = decode_yolox(&out, 84, 7, 96, 64, 0.3).unwrap_err().to_string();
        assert!(err.contains("84 rows") && err.contains("96x64") && err.contains("126"), "{err}");
        assert!(decode_yolox(&out[1..], 84, 7, 64, 64, 0.3).is_err());
        assert!(decode_yolox(&out, 84 * 7 / 5, 5, 64, 64, 0.3).is_err());
    }

    #[test]
    fn npy_parser_checks_its_input() {
        let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
        let mut pad = header.to_string();
        while !(10 + pad.len() + 1).is_multiple_of(64) {
            pad.push(' ');
        }
        pad.push('\n');
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend_from_slice(&(pad.len() as u16).to_le_bytes());
        bytes.extend_from_slice(pad.as_bytes());
        for v in [1.0f32, 2.0, 3.0, -4.0, 0.5, 6.0] {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        let (shape, values) = parse_npy_f32(&bytes).unwrap();
        assert_eq!(shape, vec![2, 3]);
        assert_eq!(values, vec![1.0, 2.0, 3.0, -4.0, 0.5, 6.0]);
        assert!(parse_npy_f32(&bytes[..bytes.len() - 1]).is_err());
        assert!(parse_npy_f32(&bytes.iter().map(|&b| if b == b'4' { b'8' } else { b }).collect::<Vec<_>>()).is_err());
        assert!(parse_npy_f32(b"not numpy").is_err());
        let err = read_npy_f32(Path::new("/nonexistent/x.npy")).unwrap_err().to_string();
        assert!(err.contains("/nonexistent/x.npy"), "{err}");
    }
}

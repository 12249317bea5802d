//! The `replay` backend (`--infer replay:FILE.jsonl`): detections read from a file instead of
//! computed, for demos, for a display or an integration tried without a model, and for test
//! machines with no inference engine (the VM guest).
//!
//! The file is JSON lines, the shape the detections socket sends (`zcpipe run --json >
//! FILE.jsonl` records one): each `"type": "frame"` line (or a line with no `"type"`) is
//! one frame's detections, `{"seq": u64, "width": u32, "height": u32, "detections":
//! [{"class_id": u32, "label": str, "score": f32, "box": [x1, y1, x2, y2]}]}`, boxes in
//! source-frame pixels. Only `detections` is required; `label` and `score` are optional
//! (`score` 1.0). Other lines (events, notices, the end line) and blank lines are skipped.
//!
//! Which line a frame gets: each frame line has a key, its `seq` if it has one, else its
//! position among the frame lines (0 first). The frame with sequence number `s` gets the line
//! whose key is `s mod (largest key + 1)`, so a recording plays back in step with the frames
//! it was made from and loops after its end; a frame whose key no line has gets no
//! detections. Boxes are scaled from the line's `width x height` (when given) to the frame
//! the camera sends now, then placed in the model input through the frame's letterbox, so
//! that the infer stage maps them back to exactly the boxes of the file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use super::{heads, Detection, Detector, DetectorKind, FrameLayout, InputSpec, NoDetector};
use zcpipe_core::frame::FrameDesc;

/// One detection of a replay line.
#[derive(Clone, Debug, Deserialize, PartialEq)]
struct ReplayDetection {
    class_id: u32,
    #[serde(default)]
    label: Option<String>,
    #[serde(default = "one")]
    score: f32,
    #[serde(rename = "box")]
    bbox: [f32; 4],
}

fn one() -> f32 {
    1.0
}

/// One line of a replay file, as read (fields a frame line has that replay does not use are
/// ignored).
#[derive(Debug, Deserialize)]
struct ReplayLine {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    seq: Option<u64>,
    #[serde(default)]
    width: Option<u32>,
    #[serde(default)]
    height: Option<u32>,
    #[serde(default)]
    detections: Option<Vec<ReplayDetection>>,
}

/// One frame's detections from the file: boxes in the recorded frame's pixels, and that
/// frame's size when the line gives it.
#[derive(Clone, Debug, PartialEq)]
struct ReplayFrame {
    size: Option<(u32, u32)>,
    dets: Vec<ReplayDetection>,
}

/// A replay file, read and checked: the frame lines by key, and the class names the lines carry.
#[derive(Debug)]
pub(crate) struct ReplayFile {
    path: PathBuf,
    frames: HashMap<u64, ReplayFrame>,
    /// Largest key + 1: the loop length in frames.
    period: u64,
    /// Class names by class id (`class_N` where no line names one); empty if no line has a label.
    labels: Vec<String>,
}

impl ReplayFile {
    /// Reads `path`. Errors name the file, the line (1-based) and the fix: a file that cannot
    /// be read, a line that is not JSON or whose detections are malformed, a box that is not
    /// finite or whose corners are out of order, a zero width or height, the same key twice,
    /// and a file with no frame line.
    pub fn load(path: &Path) -> Result<ReplayFile> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read replay file {}: pass --infer replay:FILE.jsonl with a file of detection lines (`zcpipe run --json > FILE.jsonl` records one)", path.display()))?;
        Self::parse(path, &text)
    }

    fn parse(path: &Path, text: &str) -> Result<ReplayFile> {
        let mut frames = HashMap::new();
        let mut names: Vec<Option<String>> = Vec::new();
        let mut position = 0u64;
        for (i, line) in text.lines().enumerate() {
            let at = || format!("replay file {} line {}", path.display(), i + 1);
            if line.trim().is_empty() {
                continue;
            }
            let l: ReplayLine = serde_json::from_str(line).with_context(|| format!("{}: not a detections line ({{\"seq\": N, \"detections\": [{{\"class_id\": N, \"score\": S, \"box\": [x1, y1, x2, y2]}}]}})", at()))?;
            if l.kind.as_deref().is_some_and(|k| k != "frame") {
                continue; // events, notices, the end line
            }
            let Some(dets) = l.detections else {
                if l.kind.is_some() {
                    bail!("{}: a frame line without `detections`", at());
                }
                continue; // an old end line ({"end": true, ...})
            };
            let size = match (l.width, l.height) {
                (Some(0), _) | (_, Some(0)) => bail!("{}: width and height must be above 0", at()),
                (Some(w), Some(h)) => Some((w, h)),
                _ => None,
            };
            for d in &dets {
                let b = d.bbox;
                if !b.iter().all(|v| v.is_finite()) || b[2] < b[0] || b[3] < b[1] || !d.score.is_finite() {
                    bail!(
                        "{}: box {:?} (score {}) is not [x1, y1, x2, y2] with x1 <= x2, y1 <= y2 and finite values",
                        at(),
                        b,
                        d.score
                    );
                }
                if let Some(label) = &d.label {
                    let c = d.class_id as usize;
                    if c >= 100_000 {
                        bail!("{}: class_id {c} is too large (at most 99999)", at());
                    }
                    if names.len() <= c {
                        names.resize(c + 1, None);
                    }
                    names[c].get_or_insert_with(|| label.clone());
                }
            }
            let key = l.seq.unwrap_or(position);
            position += 1;
            if frames.insert(key, ReplayFrame { size, dets }).is_some() {
                bail!("{}: a second line for frame {key}: each seq may appear once", at());
            }
        }
        let Some(&last) = frames.keys().max() else {
            bail!("replay file {} has no frame lines: record one with `zcpipe run --json > FILE.jsonl`, or write lines like {{\"detections\": [{{\"class_id\": 0, \"label\": \"person\", \"score\": 0.9, \"box\": [10, 20, 110, 220]}}]}}", path.display());
        };
        let labels = if names.iter().any(Option::is_some) {
            names.into_iter().enumerate().map(|(i, n)| n.unwrap_or_else(|| format!("class_{i}"))).collect()
        } else {
            Vec::new()
        };
        Ok(ReplayFile { path: path.to_path_buf(), frames, period: last + 1, labels })
    }

    /// Frame lines in the file.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// The loop length in frames (largest key + 1).
    #[cfg(test)]
    pub fn period(&self) -> u64 {
        self.period
    }

    /// Frame `seq`'s detections in source-frame pixels of a `src_w x src_h` frame (boxes
    /// scaled from the line's own size when it gives one), with `score > threshold`.
    fn source_boxes(&self, seq: u64, src_w: u32, src_h: u32, threshold: f32) -> Vec<(u32, f32, [f32; 4])> {
        let Some(f) = self.frames.get(&(seq % self.period)) else { return Vec::new() };
        let (sx, sy) = match f.size {
            Some((w, h)) if src_w > 0 && src_h > 0 => (src_w as f32 / w as f32, src_h as f32 / h as f32),
            _ => (1.0, 1.0),
        };
        f.dets
            .iter()
            .filter(|d| d.score > threshold)
            .map(|d| (d.class_id, d.score, [d.bbox[0] * sx, d.bbox[1] * sy, d.bbox[2] * sx, d.bbox[3] * sy]))
            .collect()
    }
}

/// The `replay` detector: the `none` backend's input (so the scale stage runs as with a model)
/// and the file's detections, placed in model-input pixels through each frame's letterbox.
#[derive(Debug)]
pub(crate) struct ReplayDetector {
    file: ReplayFile,
    input: NoDetector,
    threshold: f32,
    /// The frame told by [`Detector::before_frame`]: `(seq, letterbox)`.
    current: Option<FrameDesc>,
}

impl ReplayDetector {
    /// Loads `path` ([`ReplayFile::load`]'s errors); frames are asked for as `--infer none`
    /// asks (`pre`, `size`); detections scoring `<= threshold` are left out.
    pub fn open(
        path: &Path,
        pre: heads::Preprocess,
        size: Option<(u32, u32)>,
        threshold: f32,
    ) -> Result<ReplayDetector> {
        let file = ReplayFile::load(path)?;
        log::info!(
            "replay: {} frame lines from {}, looping every {} frames",
            file.len(),
            file.path.display(),
            file.period
        );
        Ok(ReplayDetector { file, input: NoDetector::with(pre).sized(size), threshold, current: None })
    }
}

impl Detector for ReplayDetector {
    fn kind(&self) -> DetectorKind {
        DetectorKind::Replay
    }
    fn input_spec(&self) -> &InputSpec {
        self.input.input_spec()
    }
    fn labels(&self) -> Option<Vec<String>> {
        (!self.file.labels.is_empty()).then(|| self.file.labels.clone())
    }
    fn before_frame(&mut self, desc: &FrameDesc) {
        self.current = Some(*desc);
    }
    /// The file's detections for the frame [`Detector::before_frame`] named (none if it named
    /// none), in model-input pixels: `source * scale + pad`. Reads no pixels.
    fn detect(&mut self, input: &[u8], layout: &FrameLayout) -> Result<Vec<Detection>> {
        self.input.input_spec().check_frame(input.len(), layout)?;
        let Some(d) = self.current.take() else { return Ok(Vec::new()) };
        let lb = d.letterbox;
        let mut dets: Vec<Detection> = self
            .file
            .source_boxes(d.seq, lb.src_w, lb.src_h, self.threshold)
            .into_iter()
            .map(|(class_id, score, b)| Detection {
                class_id,
                score,
                bbox: [
                    b[0] * lb.scale + lb.pad_x,
                    b[1] * lb.scale + lb.pad_y,
                    b[2] * lb.scale + lb.pad_x,
                    b[3] * lb.scale + lb.pad_y,
                ],
            })
            .collect();
        dets.sort_by(|a, b| b.score.total_cmp(&a.score));
        Ok(dets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zcpipe_core::frame::{Fourcc, LetterboxParams};

    fn file(text: &str) -> Result<ReplayFile> {
        ReplayFile::parse(Path::new("rec.jsonl"), text)
    }

    #[test]
    fn keys_are_seq_or_position_and_playback_loops() {
        let f = file("{\"type\":\"frame\",\"seq\":0,\"detections\":[{\"class_id\":0,\"label\":\"person\",\"score\":0.9,\"box\":[1,2,3,4]}]}\n{\"type\":\"event\",\"event\":\"new\"}\n\n{\"type\":\"frame\",\"seq\":2,\"detections\":[{\"class_id\":2,\"label\":\"car\",\"score\":0.5,\"box\":[5,6,7,8]}]}\n{\"type\":\"end\",\"end\":true,\"frames\":3,\"reason\":\"x\"}\n").unwrap();
        assert_eq!((f.len(), f.period()), (2, 3));
        assert_eq!(f.labels, ["person", "class_1", "car"]);
        assert_eq!(f.source_boxes(0, 0, 0, 0.0), [(0, 0.9, [1.0, 2.0, 3.0, 4.0])]);
        assert!(f.source_boxes(1, 0, 0, 0.0).is_empty(), "no line for seq 1");
        assert_eq!(f.source_boxes(5, 0, 0, 0.0), [(2, 0.5, [5.0, 6.0, 7.0, 8.0])], "5 mod 3 = 2");
        assert!(f.source_boxes(5, 0, 0, 0.5).is_empty(), "score 0.5 is not above 0.5");
        // Hand-written lines without seq: their positions; labels and scores optional.
        let f = file("{\"detections\":[{\"class_id\":1,\"box\":[0,0,1,1]}]}\n{\"detections\":[]}\n").unwrap();
        assert_eq!((f.len(), f.period()), (2, 2));
        assert!(f.labels.is_empty());
        assert_eq!(f.source_boxes(2, 0, 0, 0.3), [(1, 1.0, [0.0, 0.0, 1.0, 1.0])]);
        assert!(f.source_boxes(3, 0, 0, 0.3).is_empty());
    }

    #[test]
    fn boxes_scale_to_the_frame_and_round_trip_through_the_letterbox() {
        let f = file("{\"seq\":0,\"width\":640,\"height\":360,\"detections\":[{\"class_id\":0,\"score\":0.8,\"box\":[64,36,320,180]}]}\n").unwrap();
        assert_eq!(f.source_boxes(0, 1280, 720, 0.3), [(0, 0.8, [128.0, 72.0, 640.0, 360.0])]);
        let mut det = ReplayDetector { file: f, input: NoDetector::new(), threshold: 0.3, current: None };
        let lb = LetterboxParams::top_left(1280, 720, 416, 416);
        let layout = FrameLayout::packed24(Fourcc::BGR24, 416, 416, 416 * 3);
        let input = vec![0u8; 416 * 416 * 3];
        assert!(det.detect(&input, &layout).unwrap().is_empty(), "no frame named: nothing");
        // One line (period 1): every frame gets it.
        det.before_frame(&FrameDesc { seq: 3, letterbox: lb, ..Default::default() });
        let got = det.detect(&input, &layout).unwrap();
        assert_eq!(got.len(), 1);
        let back = lb.unmap_box(got[0].bbox);
        for (a, b) in back.iter().zip([128.0, 72.0, 640.0, 360.0]) {
            assert!((a - b).abs() < 0.01, "{back:?}");
        }
        // A wrong input layout is still an error, as for --infer none.
        det.before_frame(&FrameDesc { seq: 0, letterbox: lb, ..Default::default() });
        assert!(det.detect(&input, &FrameLayout::packed24(Fourcc::BGR24, 320, 320, 320 * 3)).is_err());
    }

    #[test]
    fn bad_files_name_the_line_and_the_fix() {
        let e = |t: &str| format!("{:#}", file(t).unwrap_err());
        assert!(e("").contains("has no frame lines"), "{}", e(""));
        assert!(e("{\"detections\":[]}\nnot json\n").contains("rec.jsonl line 2: not a detections line"));
        assert!(e("{\"detections\":[{\"class_id\":0,\"box\":[5,0,1,1]}]}").contains("line 1: box [5.0, 0.0, 1.0, 1.0]"));
        assert!(e("{\"detections\":[{\"class_id\":0,\"box\":[0,0,1]}]}").contains("line 1"));
        assert!(e("{\"seq\":1,\"detections\":[]}\n{\"seq\":1,\"detections\":[]}")
            .contains("line 2: a second line for frame 1"));
        assert!(e("{\"type\":\"frame\",\"seq\":1}").contains("a frame line without `detections`"));
        assert!(e("{\"width\":0,\"height\":5,\"detections\":[]}").contains("width and height must be above 0"));
        let missing = format!("{:#}", ReplayFile::load(Path::new("/nonexistent/rec.jsonl")).unwrap_err());
        assert!(
            missing.contains("cannot read replay file /nonexistent/rec.jsonl") && missing.contains("zcpipe run --json"),
            "{missing}"
        );
    }
}

//! Model heads: turning a detector's raw outputs into boxes, one module per model family,
//! shared by every backend (`onnx` with tract, `rknn` with librknnrt).
//!
//! A backend describes its outputs once ([`OutputInfo`]: name, shape, element type and
//! quantisation), [`select`] recognises the layout from those shapes and the model's input
//! size (or takes the one `--head` names, [`HeadKind`]) and returns a [`Head`]; a
//! [`Decoder`] then runs it on every frame's outputs ([`TensorRef`], each in its own type)
//! with the score threshold and per-class NMS. Boxes come out in **model-input pixels**;
//! mapping them back to the source frame is the letterbox's job, as before.
//!
//! The layouts (`C` classes, `N` grid cells over strides 8, 16 and 32 for the input size:
//! 3549 for 416x416, 8400 for 640x640, 5040 for 640x384):
//!
//! | `--head` | outputs | family module |
//! |---|---|---|
//! | `yolox` | one `[1, N, 5+C]`, raw box terms, obj and classes after sigmoid | [`yolox`] |
//! | `yolox-split` | 3 x `[1, 5+C, H, W]` (rknn_model_zoo) | [`yolox`] |
//! | `yolov5` | one `[1, 3N, 5+C]`, decoded `cx, cy, w, h` (YOLOv5 and YOLOv7 exports) | [`yolov5`] |
//! | `yolov5-split` | 3 x `[1, 3*(5+C), H, W]` after sigmoid, anchors (rknn_model_zoo) | [`yolov5`] |
//! | `yolov8` | one `[1, 4+C, N]`, decoded `cx, cy, w, h`, no objectness (Ultralytics YOLOv8 and YOLO11) | [`yolov8`] |
//! | `yolov8-split` | 6 or 9 x (`[1, 4*16, H, W]` DFL box, `[1, C, H, W]` scores, optional `[1, 1, H, W]` score sum) | [`yolov8`] |
//!
//! Every decoder thresholds raw elements ([`tensor::Elem`]): an int8 output is compared in
//! its quantised domain and only the candidates are dequantised, as rknn_model_zoo's C
//! post-processing does. A NaN or infinite value read for an anchor skips that anchor; the
//! skips are counted ([`Decoder::nonfinite`]) and never become a box.
//!
//! What a family expects of its input pixels (channel order, letterbox placement, pad,
//! normalisation) is [`Head::preprocess`]: the infer stage asks the scale stage for the
//! order, placement and pad (`--channel-order` and `--letterbox` override them), and the
//! ONNX backend applies the normalisation.

pub mod npy;
pub mod tensor;
pub mod yolov5;
pub mod yolov8;
pub mod yolox;

use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{bail, Result};

pub use tensor::{Dtype, OutputInfo, Quant, TensorRef};
pub use yolov5::{load_anchors, Anchors};

use super::nms::nms_per_class;
use super::Detection;
use zcpipe_core::config::Choice;
use zcpipe_core::frame::{Fourcc, Letterbox};

/// The detection strides of every family here, in the order their levels appear.
pub(crate) const STRIDES: [u32; 3] = [8, 16, 32];

/// Which head decodes a model's outputs (`--head`). `Auto` recognises it from the output
/// shapes ([`select`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadKind {
    /// Recognise the layout from the output shapes.
    Auto,
    /// YOLOX, one `[1, N, 5+C]` output with raw box terms.
    Yolox,
    /// YOLOX as rknn_model_zoo exports it: 3 x `[1, 5+C, H, W]`.
    YoloxSplit,
    /// YOLOv5 / YOLOv7 stock export: one `[1, 3N, 5+C]` output with decoded boxes.
    Yolov5,
    /// YOLOv5 as rknn_model_zoo exports it: 3 x `[1, 3*(5+C), H, W]`, anchors.
    Yolov5Split,
    /// Ultralytics YOLOv8 / YOLO11 stock export: one `[1, 4+C, N]` output.
    Yolov8,
    /// YOLOv8 / YOLO11 as rknn_model_zoo exports them: DFL box, scores, optional score sum
    /// per stride (6 or 9 outputs).
    Yolov8Split,
}

impl Choice for HeadKind {
    const ALL: &'static [(Self, &'static str, &'static str)] = &[
        (HeadKind::Auto, "auto", "recognise the layout from the model's output shapes"),
        (HeadKind::Yolox, "yolox", "YOLOX, one output [1,N,5+C] with raw box terms"),
        (HeadKind::YoloxSplit, "yolox-split", "YOLOX from rknn_model_zoo: 3 outputs [1,5+C,H,W]"),
        (HeadKind::Yolov5, "yolov5", "YOLOv5/YOLOv7 export: one output [1,3N,5+C] with decoded boxes"),
        (HeadKind::Yolov5Split, "yolov5-split", "YOLOv5 from rknn_model_zoo: 3 outputs [1,3*(5+C),H,W] and anchors"),
        (HeadKind::Yolov8, "yolov8", "Ultralytics YOLOv8/YOLO11 export: one output [1,4+C,N]"),
        (
            HeadKind::Yolov8Split,
            "yolov8-split",
            "YOLOv8/YOLO11 from rknn_model_zoo: DFL box, scores, optional score sum per stride",
        ),
    ];
}

/// Other spellings `--head` accepts for the same heads.
const ALIASES: &[(&str, HeadKind)] = &[
    ("yolov7", HeadKind::Yolov5),
    ("yolo11", HeadKind::Yolov8),
    ("yolov11", HeadKind::Yolov8),
    ("yolo11-split", HeadKind::Yolov8Split),
    ("yolov11-split", HeadKind::Yolov8Split),
];

impl std::str::FromStr for HeadKind {
    type Err = anyhow::Error;
    /// Parses a head name (or an alias: `yolov7`, `yolo11`, `yolo11-split`); the error
    /// lists the valid ones.
    fn from_str(s: &str) -> Result<HeadKind> {
        if let Some(k) = HeadKind::from_name(s) {
            return Ok(k);
        }
        if let Some((_, k)) = ALIASES.iter().find(|(n, _)| *n == s) {
            return Ok(*k);
        }
        let names: Vec<&str> = HeadKind::ALL.iter().map(|(_, n, _)| *n).collect();
        bail!("unknown head `{s}`: valid heads are {} (yolov7 = yolov5, yolo11 = yolov8)", names.join(", "))
    }
}

impl std::fmt::Display for HeadKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Channel order of the model's input image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChannelOrder {
    /// Blue, green, red (OpenCV's order; YOLOX).
    Bgr,
    /// Red, green, blue (Ultralytics, YOLOv5).
    Rgb,
}

impl ChannelOrder {
    /// The packed format a scaler writes for this order (`RGB24`, `BGR24`).
    pub fn fourcc(self) -> Fourcc {
        match self {
            ChannelOrder::Bgr => Fourcc::BGR24,
            ChannelOrder::Rgb => Fourcc::RGB24,
        }
    }
}

impl Choice for ChannelOrder {
    const ALL: &'static [(Self, &'static str, &'static str)] = &[
        (ChannelOrder::Rgb, "rgb", "red, green, blue (Ultralytics, YOLOv5)"),
        (ChannelOrder::Bgr, "bgr", "blue, green, red (YOLOX, OpenCV's order)"),
    ];
}

pub use zcpipe_core::frame::Placement;

/// How pixel bytes become the model's input values, where the backend does it (ONNX; an
/// RKNN model has its normalisation built in).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Normalise {
    /// Raw 0..255 values (YOLOX 0.1.1+ checkpoints).
    Raw,
    /// 0..1: each byte divided by 255 (Ultralytics, YOLOv5).
    Unit,
}

impl Normalise {
    /// The factor each byte is multiplied by.
    pub fn factor(self) -> f32 {
        match self {
            Normalise::Raw => 1.0,
            Normalise::Unit => 1.0 / 255.0,
        }
    }
}

/// What a family's published pre-processing does to a frame before the model: the scaler
/// gives the model its channel order, placement and pad (negotiated at set-up through the
/// infer stage's hello), the backend applies the normalisation. `--channel-order` and
/// `--letterbox` override the first two ([`Preprocess::with`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Preprocess {
    /// Channel order of the input image.
    pub channel_order: ChannelOrder,
    /// Letterbox placement.
    pub placement: Placement,
    /// Letterbox pad value (114 for all the families here).
    pub pad: u8,
    /// Byte to input value.
    pub normalise: Normalise,
}

impl Preprocess {
    /// YOLOX `preproc`: BGR, top-left, pad 114, raw 0..255.
    pub const YOLOX: Preprocess = Preprocess {
        channel_order: ChannelOrder::Bgr,
        placement: Placement::TopLeft,
        pad: 114,
        normalise: Normalise::Raw,
    };
    /// Ultralytics and YOLOv5 `letterbox`: RGB, centred, pad 114, /255.
    pub(crate) const ULTRALYTICS: Preprocess = Preprocess {
        channel_order: ChannelOrder::Rgb,
        placement: Placement::Center,
        pad: 114,
        normalise: Normalise::Unit,
    };

    /// This pre-processing with the channel order and placement the user chose instead
    /// (`--channel-order`, `--letterbox`), where given.
    pub fn with(self, channel_order: Option<ChannelOrder>, placement: Option<Placement>) -> Preprocess {
        Preprocess {
            channel_order: channel_order.unwrap_or(self.channel_order),
            placement: placement.unwrap_or(self.placement),
            ..self
        }
    }

    /// What the scaler is asked for: placement and pad.
    pub fn letterbox(&self) -> Letterbox {
        Letterbox::new(self.placement, self.pad)
    }

    /// One line for logs: `RGB, centred letterbox, pad 114, /255`.
    pub fn describe(&self) -> String {
        let order = match self.channel_order {
            ChannelOrder::Rgb => "RGB",
            ChannelOrder::Bgr => "BGR",
        };
        let norm = match self.normalise {
            Normalise::Raw => "raw 0..255",
            Normalise::Unit => "/255",
        };
        format!("{order}, {} letterbox, pad {}, {norm}", self.placement.describe(), self.pad)
    }
}

/// Candidate detections of one frame before NMS, and how many anchors were skipped for a
/// NaN or infinite value.
#[derive(Debug, Default)]
pub struct Candidates {
    /// Boxes in model-input pixels with `score > threshold`.
    pub dets: Vec<Detection>,
    /// Anchors skipped because a value read for them (score, objectness, box term) or the
    /// box made from them was not finite.
    pub nonfinite: u64,
}

/// One output layout's decoder, made by [`select`] for a model's outputs and input size.
pub trait Head: Send + Sync + std::fmt::Debug {
    /// Which layout this is (never `Auto`).
    fn kind(&self) -> HeadKind;
    /// Number of classes the model scores.
    fn classes(&self) -> usize;
    /// The family's published pre-processing.
    fn preprocess(&self) -> Preprocess;
    /// One line for the start-up log (`yolox: 3 levels 52x52/26x26/13x13, 80 classes`).
    fn describe(&self) -> String;
    /// Decodes one frame's outputs (in the order of the [`OutputInfo`] list the head was
    /// made from, already checked against it by [`Decoder::decode`]) into `out`: every
    /// candidate with `score > score_threshold`, box `[x1, y1, x2, y2]` in model-input
    /// pixels, before NMS.
    fn decode(&self, outputs: &[TensorRef<'_>], score_threshold: f32, out: &mut Candidates);
}

/// A [`Head`] with its thresholds, run on every frame: checks the outputs against what the
/// backend announced, decodes, applies per-class NMS, and counts the anchors skipped for a
/// NaN or infinite value (shared by every lane of a backend).
#[derive(Debug)]
pub struct Decoder {
    head: Box<dyn Head>,
    outputs: Vec<OutputInfo>,
    score_threshold: f32,
    nms_iou: f32,
    nonfinite: AtomicU64,
}

impl Decoder {
    /// A decoder for `head`, made from `outputs`; keeps detections scoring above
    /// `score_threshold` and suppresses, within a class, boxes overlapping a better one by
    /// IoU above `nms_iou`.
    pub fn new(head: Box<dyn Head>, outputs: Vec<OutputInfo>, score_threshold: f32, nms_iou: f32) -> Decoder {
        Decoder { head, outputs, score_threshold, nms_iou, nonfinite: AtomicU64::new(0) }
    }

    /// The head.
    pub fn head(&self) -> &dyn Head {
        &*self.head
    }

    /// The outputs the head was made from.
    pub fn outputs(&self) -> &[OutputInfo] {
        &self.outputs
    }

    /// Anchors skipped so far for a NaN or infinite value.
    pub fn nonfinite(&self) -> u64 {
        self.nonfinite.load(Ordering::Relaxed)
    }

    /// Decodes one frame: detections in model-input pixels with `score > score_threshold`,
    /// after per-class NMS, best first. Errors (one line) when the outputs do not match
    /// what the backend announced at start-up (count, element type, length).
    pub fn decode(&self, outputs: &[TensorRef<'_>]) -> Result<Vec<Detection>> {
        if outputs.len() != self.outputs.len() {
            bail!("the model gave {} outputs, {} were announced", outputs.len(), self.outputs.len());
        }
        for (t, info) in outputs.iter().zip(&self.outputs) {
            t.check(info)?;
        }
        let mut c = Candidates::default();
        self.head.decode(outputs, self.score_threshold, &mut c);
        if c.nonfinite > 0 {
            let before = self.nonfinite.fetch_add(c.nonfinite, Ordering::Relaxed);
            if before == 0 {
                log::warn!(
                    "{}: {} anchor(s) of this frame had NaN or infinite outputs and were skipped (counted in the final report as nonfinite_skipped)",
                    self.head.kind(),
                    c.nonfinite
                );
            }
        }
        Ok(nms_per_class(c.dets, self.nms_iou))
    }
}

/// What [`select`] is given: the model input size in pixels, the outputs, and the anchors
/// for `yolov5-split` (`None`: rknn_model_zoo's defaults, [`Anchors::MODEL_ZOO`]).
#[derive(Clone, Copy, Debug)]
pub struct Model<'a> {
    /// Input width in pixels.
    pub width: u32,
    /// Input height in pixels.
    pub height: u32,
    /// The outputs, in the model's order.
    pub outputs: &'a [OutputInfo],
    /// Anchors for `yolov5-split`.
    pub anchors: Option<&'a Anchors>,
}

/// The layouts [`select`] tries for `auto`, in order: the first that fits wins.
const AUTO_ORDER: [HeadKind; 6] = [
    HeadKind::Yolox,
    HeadKind::Yolov5,
    HeadKind::Yolov8,
    HeadKind::Yolov8Split,
    HeadKind::Yolov5Split,
    HeadKind::YoloxSplit,
];

/// Fits one layout: the head, or why the outputs are not that layout.
fn fit(kind: HeadKind, m: &Model<'_>) -> Result<Box<dyn Head>, String> {
    match kind {
        HeadKind::Auto => Err("auto is not a layout".into()),
        HeadKind::Yolox => yolox::fit_flat(m),
        HeadKind::YoloxSplit => yolox::fit_split(m),
        HeadKind::Yolov5 => yolov5::fit_flat(m),
        HeadKind::Yolov5Split => yolov5::fit_split(m),
        HeadKind::Yolov8 => yolov8::fit_flat(m),
        HeadKind::Yolov8Split => yolov8::fit_split(m),
    }
}

/// The outputs as one text: `output [1,3549,85] float32, 286 [1,255,80,80] int8 (...)`.
pub(crate) fn outputs_text(outputs: &[OutputInfo]) -> String {
    outputs.iter().map(|o| format!("{} {}", o.name, o.shape_text())).collect::<Vec<_>>().join(", ")
}

/// Grid cells over [`STRIDES`] for a `w x h` input, sides rounded up (a stride-2
/// convolution with padding 1 gives `ceil(side / 2)`): 8400 for 640x640, 5040 for 640x384.
pub(crate) fn grid_cells_ceil(w: u32, h: u32) -> usize {
    STRIDES.iter().map(|&s| w.div_ceil(s) as usize * h.div_ceil(s) as usize).sum()
}

/// The head for `m`'s outputs: the layout `kind` names, or for [`HeadKind::Auto`] the first
/// of yolox, yolov5, yolov8, yolov8-split, yolov5-split, yolox-split that fits (shapes that
/// fit two, e.g. three `[1,18,H,W]` outputs, take the first and say so in a warning).
/// Errors, on one line: `--head` that does not fit (with the reason), or an unknown layout
/// (the shapes found and the layouts known).
pub fn select(kind: HeadKind, m: &Model<'_>) -> Result<Box<dyn Head>> {
    let outputs = normalise_flat(m.outputs);
    let m = Model { outputs: &outputs, ..*m };
    if kind != HeadKind::Auto {
        return fit(kind, &m).map_err(|why| {
            anyhow::anyhow!("--head {kind} does not fit the model's outputs ({}): {why}", outputs_text(m.outputs))
        });
    }
    let mut fits = AUTO_ORDER.iter().filter_map(|&k| fit(k, &m).ok());
    let Some(head) = fits.next() else {
        let n = yolox::grid_rows(m.width, m.height);
        let n8 = grid_cells_ceil(m.width, m.height);
        bail!(
            "output layout not recognised for a {}x{} input: outputs {}; zcpipe knows yolox [1,{n},5+C], yolov5 [1,{},5+C], yolov8 [1,4+C,{n8}], \
             yolov8-split (6 or 9 outputs, per stride [1,64,H,W] DFL box, [1,C,H,W] scores, optional [1,1,H,W] score sum), \
             yolov5-split (3 outputs [1,3*(5+C),H,W]) and yolox-split (3 outputs [1,5+C,H,W]), at strides 8/16/32: \
             export the model in one of these layouts, or name one with --head",
            m.width,
            m.height,
            outputs_text(m.outputs),
            3 * grid_cells_ceil(m.width, m.height),
        );
    };
    let others: Vec<String> = fits.map(|h| h.kind().to_string()).collect();
    if !others.is_empty() {
        log::warn!(
            "the outputs ({}) fit {} and also {}: decoding as {}; pass --head to choose",
            outputs_text(m.outputs),
            head.kind(),
            others.join(", "),
            head.kind()
        );
    }
    Ok(head)
}

/// A single output written as `[N, K]` or `[1, N, K, 1]` (some RKNN conversions) is the
/// flat `[1, N, K]`; anything else is left as it is.
fn normalise_flat(outputs: &[OutputInfo]) -> Vec<OutputInfo> {
    let mut v = outputs.to_vec();
    if let [o] = v.as_mut_slice() {
        match *o.shape.as_slice() {
            [n, k] => o.shape = vec![1, n, k],
            [1, n, k, 1] if !o.channels_last => o.shape = vec![1, n, k],
            _ => {}
        }
    }
    v
}

/// The stride of a `gw x gh` map over a `w x h` input: `s` in [`STRIDES`]-like powers of
/// two with `gw = ceil(w / s)` and `gh = ceil(h / s)`, else `None`.
pub(crate) fn map_stride(w: u32, h: u32, gw: usize, gh: usize) -> Option<u32> {
    (0..8).map(|p| 1u32 << p).find(|&s| w.div_ceil(s) as usize == gw && h.div_ceil(s) as usize == gh)
}

/// Shapes of a 4-D `[1, C, H, W]` output, `None` for anything else.
pub(crate) fn map_dims(o: &OutputInfo) -> Option<(usize, usize, usize)> {
    match *o.shape.as_slice() {
        [1, c, h, w] if c > 0 && h > 0 && w > 0 => Some((c, h, w)),
        _ => None,
    }
}

/// Whether a box's four numbers are finite.
#[inline]
pub(crate) fn finite_box(b: &[f32; 4]) -> bool {
    b.iter().all(|v| v.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32_out(shape: &[usize]) -> OutputInfo {
        OutputInfo::new("out", shape, Dtype::F32)
    }

    fn model(w: u32, h: u32, outputs: &[OutputInfo]) -> Model<'_> {
        Model { width: w, height: h, outputs, anchors: None }
    }

    #[test]
    fn head_names_and_aliases_parse() {
        for (_, name, _) in HeadKind::ALL {
            assert_eq!(name.parse::<HeadKind>().unwrap().to_string(), *name);
        }
        assert_eq!("yolov7".parse::<HeadKind>().unwrap(), HeadKind::Yolov5);
        assert_eq!("yolo11".parse::<HeadKind>().unwrap(), HeadKind::Yolov8);
        assert_eq!("yolo11-split".parse::<HeadKind>().unwrap(), HeadKind::Yolov8Split);
        let err = "yolov9".parse::<HeadKind>().unwrap_err().to_string();
        assert!(err.starts_with("unknown head `yolov9`: valid heads are auto, yolox, yolox-split"), "{err}");
    }

    #[test]
    fn grid_counts() {
        assert_eq!(yolox::grid_rows(416, 416), 3549);
        assert_eq!(grid_cells_ceil(640, 640), 8400);
        assert_eq!(grid_cells_ceil(640, 384), 5040);
        assert_eq!(grid_cells_ceil(320, 320), 2100);
        assert_eq!(map_stride(640, 384, 80, 48), Some(8));
        assert_eq!(map_stride(640, 384, 20, 12), Some(32));
        assert_eq!(map_stride(640, 384, 20, 20), None);
    }

    #[test]
    fn auto_recognises_every_layout() {
        let cases: Vec<(u32, u32, Vec<OutputInfo>, HeadKind, usize)> = vec![
            (416, 416, vec![f32_out(&[1, 3549, 85])], HeadKind::Yolox, 80),
            (640, 640, vec![f32_out(&[1, 25200, 85])], HeadKind::Yolov5, 80),
            (640, 384, vec![f32_out(&[1, 15120, 8])], HeadKind::Yolov5, 3),
            (640, 640, vec![f32_out(&[1, 84, 8400])], HeadKind::Yolov8, 80),
            (640, 384, vec![f32_out(&[1, 6, 5040])], HeadKind::Yolov8, 2),
            (
                640,
                640,
                [80, 40, 20]
                    .iter()
                    .flat_map(|&g| [f32_out(&[1, 64, g, g]), f32_out(&[1, 80, g, g]), f32_out(&[1, 1, g, g])])
                    .collect(),
                HeadKind::Yolov8Split,
                80,
            ),
            (
                640,
                384,
                [(80, 48), (40, 24), (20, 12)]
                    .iter()
                    .flat_map(|&(w, h)| [f32_out(&[1, 64, h, w]), f32_out(&[1, 5, h, w])])
                    .collect(),
                HeadKind::Yolov8Split,
                5,
            ),
            (640, 640, [80, 40, 20].iter().map(|&g| f32_out(&[1, 255, g, g])).collect(), HeadKind::Yolov5Split, 80),
            (416, 416, [52, 26, 13].iter().map(|&g| f32_out(&[1, 85, g, g])).collect(), HeadKind::YoloxSplit, 80),
            // [N, K] and [1, N, K, 1] are read as [1, N, K].
            (416, 416, vec![f32_out(&[3549, 85])], HeadKind::Yolox, 80),
            (416, 416, vec![f32_out(&[1, 3549, 85, 1])], HeadKind::Yolox, 80),
        ];
        for (w, h, outs, kind, classes) in cases {
            let head = select(HeadKind::Auto, &model(w, h, &outs)).unwrap();
            assert_eq!((head.kind(), head.classes()), (kind, classes), "{}", outputs_text(&outs));
            // And the same head when named.
            assert_eq!(select(kind, &model(w, h, &outs)).unwrap().kind(), kind);
        }
    }

    #[test]
    fn unknown_layout_lists_shapes_and_layouts_on_one_line() {
        let outs = vec![f32_out(&[1, 1000]), OutputInfo::new("boxes", &[1, 100, 4], Dtype::F16)];
        let err = select(HeadKind::Auto, &model(416, 416, &outs)).unwrap_err().to_string();
        assert!(!err.contains('\n'), "{err}");
        assert!(err.starts_with("output layout not recognised for a 416x416 input: outputs out [1,1000] float32, boxes [1,100,4] float16;"), "{err}");
        for known in [
            "yolox [1,3549,5+C]",
            "yolov5 [1,10647,5+C]",
            "yolov8 [1,4+C,3549]",
            "yolov8-split",
            "yolov5-split",
            "yolox-split",
            "--head",
        ] {
            assert!(err.contains(known), "{known}: {err}");
        }
        // A YOLOX output for another input size is not recognised either.
        let outs = vec![f32_out(&[1, 8400, 85])];
        let err = select(HeadKind::Auto, &model(416, 416, &outs)).unwrap_err().to_string();
        assert!(err.contains("out [1,8400,85] float32"), "{err}");
    }

    #[test]
    fn named_head_that_does_not_fit_says_why() {
        let outs = vec![f32_out(&[1, 3549, 85])];
        let err = select(HeadKind::Yolov8, &model(416, 416, &outs)).unwrap_err().to_string();
        assert!(err.starts_with("--head yolov8 does not fit the model's outputs (out [1,3549,85] float32): "), "{err}");
        assert!(err.contains("[1,4+C,3549]"), "{err}");
        let err = select(HeadKind::Yolov8Split, &model(416, 416, &outs)).unwrap_err().to_string();
        assert!(err.contains("6 or 9 outputs"), "{err}");
    }

    #[test]
    fn ambiguous_split_shapes_take_yolov5() {
        // 18 channels: YOLOv5 with 1 class (3 x 6) or YOLOX with 13 classes (5 + 13).
        let outs: Vec<OutputInfo> = [52, 26, 13].iter().map(|&g| f32_out(&[1, 18, g, g])).collect();
        let head = select(HeadKind::Auto, &model(416, 416, &outs)).unwrap();
        assert_eq!((head.kind(), head.classes()), (HeadKind::Yolov5Split, 1));
        let head = select(HeadKind::YoloxSplit, &model(416, 416, &outs)).unwrap();
        assert_eq!((head.kind(), head.classes()), (HeadKind::YoloxSplit, 13));
    }
}

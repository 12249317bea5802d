//! Infer stage: runs an object detector on the scaled model input and returns boxes.
//!
//! What it does: takes one packed RGB24 or BGR24 frame in the model's input size, written
//! by the scale stage as the model's family wants it ([`heads::Preprocess`]: channel order,
//! letterbox placement and pad, asked for at set-up, `--channel-order` and `--letterbox`
//! overriding the family's defaults), runs the chosen backend, decodes the model's
//! outputs with the head of its family ([`heads`]: YOLOX, YOLOv5/v7, YOLOv8/YOLO11, flat or
//! split per stride as rknn_model_zoo exports them, recognised from the output shapes or
//! named with `--head`) and applies per-class NMS ([`nms`]). Boxes leave this stage in
//! model-input pixels; mapping them back to the source frame is [`LetterboxParams::unmap_box`]'s
//! job, done by whoever holds the letterbox parameters. Class names come from the model,
//! `--labels` or COCO 80 ([`labels`]).
//!
//! What it owns: the model (loaded and checked once at start-up: a wrong model is an error
//! naming the file, what was found and the fix, never garbage at frame 1), the backend's
//! scratch tensors, and the model contract in [`InputSpec`] that the scale stage negotiates
//! against.
//!
//! What it must never do: write to the input frame (it is lent read-only), resize or
//! colour-convert (that is the scaler's job; a backend only changes element type and
//! layout, e.g. uint8 NHWC -> float32 NCHW, and scale, e.g. /255 for the families that
//! want it), or panic on a bad model or a bad descriptor.
//!
//! Backends sit behind one trait, [`Detector`], chosen by [`DetectorKind`] (`--infer`) in
//! [`open_detector`]: `onnx` (tract, CPU, behind the `onnx` cargo feature), `rknn` (Rockchip
//! NPU through `librknnrt.so` loaded at run time, reading the scaler's dma-bufs in place:
//! [`rknn`]), `replay` (detections read from a file: [`replay`]), `none` (no inference, to
//! measure transport), `auto`. The stage process is
//! [`stage`]; its configuration is [`InferConfig`]; it never imports another stage. The model contract (tensor shapes, preprocessing, decoding, reference detections)
//! is in `models/PROVENANCE.md`.
//!
//! [`LetterboxParams::unmap_box`]: zcpipe_core::frame::LetterboxParams::unmap_box

pub mod auto;
pub mod heads;
pub mod labels;
pub mod nms;
#[cfg(feature = "onnx")]
pub mod onnx;
pub mod replay;
pub mod report;
pub mod rknn;
pub mod sched;
pub mod service;
pub mod stage;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};

use zcpipe_core::config::Choice;
use zcpipe_core::dmabuf::DmaBuf;
use zcpipe_core::frame::{Fourcc, FrameDesc, FrameLayout, Letterbox, Placement};
use zcpipe_core::pool::Frame;

/// One detected object.
///
/// `bbox` is `[x1, y1, x2, y2]` in **model-input pixels** (e.g. 0..416 for YOLOX-Nano),
/// before any letterbox unmapping and unclamped (boxes may extend past the input edge).
/// `score` is in 0..1, as the model's family defines it ([`heads`]: `obj * cls[class_id]`
/// for YOLOX and YOLOv5, `cls[class_id]` for YOLOv8). `class_id` indexes the label list
/// (COCO: 0 = person, 1 = bicycle, 2 = car, ...).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Detection {
    /// Class index into the label list, 0-based, in model output order.
    pub class_id: u32,
    /// Confidence, 0..1 (`obj * cls[class_id]`, or `cls[class_id]` without objectness).
    pub score: f32,
    /// `[x1, y1, x2, y2]` in model-input pixels (not unmapped, not clamped).
    pub bbox: [f32; 4],
}

/// Memory layout of an image tensor: `N, H, W, C` (pixels interleaved, as V4L2/RGA write
/// them) or `N, C, H, W` (planar, as ONNX vision models take them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorLayout {
    /// Batch, height, width, channels: one packed row of `width * C` values per line.
    Nhwc,
    /// Batch, channels, height, width: one `height * width` plane per channel.
    Nchw,
}

/// What a detector wants fed: the frame the scale stage must produce.
///
/// The scaler always writes packed rows (`fourcc`, `width x height`, NHWC in memory) with
/// the picture placed and padded as `letterbox` says; `layout` says what the model's own
/// input tensor is, and any conversion between the two (element type, NHWC -> NCHW,
/// normalisation) is the backend's job. For YOLOX-Nano: 416x416 `BGR24`, top-left, pad
/// 114, tensor `images` float32 `[1, 3, 416, 416]` NCHW with raw 0..255 values
/// (`models/PROVENANCE.md`, "Preprocessing"); for an Ultralytics export: `RGB24`, centred,
/// pad 114, values /255.
#[derive(Clone, Debug, PartialEq)]
pub struct InputSpec {
    /// Model input width in pixels.
    pub width: u32,
    /// Model input height in pixels.
    pub height: u32,
    /// Channel order the model expects, as a packed fourcc (`BGR24` for YOLOX, `RGB24` for
    /// YOLOv5 and Ultralytics: [`heads::ChannelOrder::fourcc`]).
    pub fourcc: Fourcc,
    /// Where the scaler puts the picture and the pad value around it.
    pub letterbox: Letterbox,
    /// Layout of the model's input tensor.
    pub layout: TensorLayout,
    /// Name of the model's input tensor (`images` for YOLOX), for messages.
    pub name: String,
    /// Exact row stride in bytes the backend needs the scaler to write (0 = any): an NPU
    /// reading the buffer in place needs its own `w_stride * 3` (RKNN:
    /// `RKNN_QUERY_NATIVE_INPUT_ATTR`), sent to the scale stage as `WantedInput::bytesperline`.
    pub bytesperline: u32,
}

impl InputSpec {
    /// Checks that `layout` describes a frame this spec accepts and that it fits in
    /// `input_len` bytes: same fourcc and size, one plane whose `bytesperline` is at least
    /// `3 * width`, and `offset + bytesperline * (height - 1) + 3 * width <= input_len`.
    /// The error names both sides.
    pub(crate) fn check_frame(&self, input_len: usize, layout: &FrameLayout) -> anyhow::Result<()> {
        if layout.fourcc != self.fourcc || layout.width != self.width || layout.height != self.height {
            bail!(
                "infer input is {} {}x{} but the model `{}` wants {} {}x{}: set the scaler output to the model input",
                layout.fourcc,
                layout.width,
                layout.height,
                self.name,
                self.fourcc,
                self.width,
                self.height
            );
        }
        let plane = layout.planes().first().context("infer input layout has no planes")?;
        let row = self.width as u64 * 3;
        if (plane.bytesperline as u64) < row {
            bail!(
                "infer input bytesperline {} < {} bytes per row of {} {}x{}",
                plane.bytesperline,
                row,
                self.fourcc,
                self.width,
                self.height
            );
        }
        let end = plane.offset as u64 + plane.bytesperline as u64 * (self.height as u64 - 1) + row;
        if end > input_len as u64 {
            bail!(
                "infer input buffer is {} bytes but its layout (offset {}, bytesperline {}, {} rows) needs {}",
                input_len,
                plane.offset,
                plane.bytesperline,
                self.height,
                end
            );
        }
        Ok(())
    }
}

/// An inference backend. Opened once at start-up with [`open_detector`]; then called once
/// per frame from the infer stage's thread, or, for a backend with several independent
/// engines (RKNN with `--npu-cores`), through its [`Detector::lanes`], one thread each.
pub trait Detector: Send {
    /// Which backend this is (its name for logs and stats: `onnx`, `none`, ...).
    fn kind(&self) -> DetectorKind;
    /// The frame this detector wants; the scale stage is set up from it.
    fn input_spec(&self) -> &InputSpec;
    /// How many classes the model scores, if it has a model.
    fn classes(&self) -> Option<usize> {
        None
    }
    /// The class names the model carries (an Ultralytics ONNX export's `names` metadata),
    /// class 0 first; `None` when it carries none.
    fn labels(&self) -> Option<Vec<String>> {
        None
    }
    /// The head decoding the model's outputs (its layout, classes and the pre-processing
    /// its family expects), if it has a model.
    fn head(&self) -> Option<&dyn heads::Head> {
        None
    }
    /// Anchors skipped so far because an output value was NaN or infinite ([`heads`]).
    fn nonfinite_skipped(&self) -> u64 {
        0
    }
    /// Told each frame's descriptor (its seq and letterbox) just before the frame is run
    /// through [`Detector::detect`] or [`Detector::detect_bound`] on the stage's thread. The
    /// `replay` backend picks its detections by it; the default ignores it.
    fn before_frame(&mut self, desc: &FrameDesc) {
        let _ = desc;
    }
    /// Runs one frame. `input` is the whole mapped buffer; `layout` is a packed `BGR24`
    /// layout matching [`Detector::input_spec`] (rows of `planes[0].bytesperline` bytes,
    /// possibly more than `3 * width`, starting at `planes[0].offset`). Returns detections
    /// in model-input pixels with `score > score_threshold`, after per-class NMS, sorted by
    /// score, highest first.
    fn detect(&mut self, input: &[u8], layout: &FrameLayout) -> anyhow::Result<Vec<Detection>>;

    /// Zero-copy set-up, called once after the infer stage has joined the scale stage's
    /// pool: a backend whose device reads dma-bufs in place imports `bufs` (one per pool
    /// buffer, index = `FrameDesc::buffer_index`) and returns `true`; from then on every
    /// frame goes to [`Detector::detect_bound`] and the stage never maps it. The default
    /// imports nothing and returns `false` (frames go to [`Detector::detect`]).
    fn bind_pool(&mut self, bufs: &[&DmaBuf]) -> anyhow::Result<bool> {
        let _ = bufs;
        Ok(false)
    }

    /// Runs `frame`, whose buffer was imported by [`Detector::bind_pool`] (its layout must
    /// match [`Detector::input_spec`], including its `bytesperline`). Same result contract as
    /// [`Detector::detect`].
    fn detect_bound(&mut self, frame: &Frame) -> anyhow::Result<Vec<Detection>> {
        bail!(
            "the {} backend reads frames through the CPU; buffer {} was not imported (bind_pool returned false)",
            self.kind(),
            frame.index()
        )
    }

    /// Runs the model input held in `buf` (laid out as `layout`, which must match
    /// [`Detector::input_spec`] as for [`Detector::detect_bound`]), a buffer the caller keeps
    /// for many runs (the inference service's model input): a backend whose device reads
    /// dma-bufs in place imports it at its first run and reads it there. `Ok(None)`: this
    /// backend reads CPU memory only, or cannot import `buf`; the caller maps it and calls
    /// [`Detector::detect`].
    fn detect_in(&mut self, buf: &DmaBuf, layout: &FrameLayout) -> anyhow::Result<Option<Vec<Detection>>> {
        let _ = (buf, layout);
        Ok(None)
    }

    /// The backend's independent engines, one lane each, for running frames concurrently
    /// (RKNN: one context per `--npu-cores` entry). Called once, after
    /// [`Detector::bind_pool`]; the lanes borrow the detector, which releases the engines
    /// when it is dropped, after them. The infer stage runs each lane on a thread of its
    /// own when there are two or more. The default is `None`: one engine, every frame
    /// through [`Detector::detect`] / [`Detector::detect_bound`] on the stage's thread.
    fn lanes(&mut self) -> Option<Vec<Box<dyn DetectorLane + '_>>> {
        None
    }

    /// When the device ran the last frame (start, end), where the backend times the
    /// device's run apart from its own decoding (RKNN: `rknn_run`); `None`: the whole
    /// `detect` call is the engine's busy time.
    fn last_run(&self) -> Option<(Instant, Instant)> {
        None
    }
}

/// One engine of a [`Detector`] (e.g. one RKNN context), lent to one worker thread by
/// [`Detector::lanes`]. Same contracts as [`Detector::detect`] and
/// [`Detector::detect_bound`] (the pool binding is the detector's, made before the lanes
/// were taken). A lane is used by one thread at a time (`&mut self`), so an engine that
/// must not run two frames at once (an RKNN context) never does.
pub trait DetectorLane: Send {
    /// The engine, for logs and errors (`RKNN context 2 on NPU core 1`).
    fn describe(&self) -> String;
    /// Runs one frame read through the CPU, as [`Detector::detect`].
    fn detect(&mut self, input: &[u8], layout: &FrameLayout) -> anyhow::Result<Vec<Detection>>;
    /// Runs `frame`, whose buffer the detector imported, as [`Detector::detect_bound`].
    fn detect_bound(&mut self, frame: &Frame) -> anyhow::Result<Vec<Detection>>;
    /// Runs the model input in a buffer its caller keeps, as [`Detector::detect_in`].
    fn detect_in(&mut self, buf: &DmaBuf, layout: &FrameLayout) -> anyhow::Result<Option<Vec<Detection>>> {
        let _ = (buf, layout);
        Ok(None)
    }
    /// The NPU core the engine is pinned to (`None`: the runtime's choice, or the CPU).
    fn core(&self) -> Option<u32> {
        None
    }
    /// As [`Detector::last_run`].
    fn last_run(&self) -> Option<(Instant, Instant)> {
        None
    }
    /// As [`Detector::before_frame`] (a camera's frame is next).
    fn before_frame(&mut self, _desc: &FrameDesc) {}
}

/// The whole of a one-engine detector as a lane, so the stage's lanes loop runs it on a
/// worker thread like any engine (with the inference service on: its clients' requests
/// wake the engine at once, not at the frame loop's next turn).
pub(crate) struct OneLane<'a>(pub(crate) &'a mut dyn Detector);

impl DetectorLane for OneLane<'_> {
    fn describe(&self) -> String {
        format!("the {} engine", self.0.kind())
    }
    fn detect(&mut self, input: &[u8], layout: &FrameLayout) -> anyhow::Result<Vec<Detection>> {
        self.0.detect(input, layout)
    }
    fn detect_bound(&mut self, frame: &Frame) -> anyhow::Result<Vec<Detection>> {
        self.0.detect_bound(frame)
    }
    fn detect_in(&mut self, buf: &DmaBuf, layout: &FrameLayout) -> anyhow::Result<Option<Vec<Detection>>> {
        self.0.detect_in(buf, layout)
    }
    fn last_run(&self) -> Option<(Instant, Instant)> {
        self.0.last_run()
    }
    fn before_frame(&mut self, desc: &FrameDesc) {
        self.0.before_frame(desc)
    }
}

/// Start-up options shared by every backend.
#[derive(Clone, Debug, PartialEq)]
pub struct DetectorOptions {
    /// Model file (`models/yolox_nano.onnx` by default).
    pub model: PathBuf,
    /// Keep detections with `obj * cls > score_threshold` (YOLOX demo default 0.3).
    pub score_threshold: f32,
    /// Per-class NMS suppresses a box whose IoU with a higher-scored box of the same class
    /// is `> nms_iou` (YOLOX demo default 0.45).
    pub nms_iou: f32,
    /// `rknn` only: NPU cores to run on, one context each (`--npu-cores`); empty = one
    /// context, the runtime's choice.
    pub npu_cores: Vec<u32>,
    /// `rknn` only: contexts per NPU core (`--npu-contexts-per-core`, 1..=4): while one
    /// context's frame runs, the next frame is already queued on the core by another.
    pub contexts_per_core: u32,
    /// The output layout (`--head`; `Auto` recognises it from the output shapes).
    pub head: heads::HeadKind,
    /// Anchors for `yolov5-split` (`--anchors`; `None`: rknn_model_zoo's defaults).
    pub anchors: Option<heads::Anchors>,
    /// `--channel-order`: the order the model is fed instead of its family's (`None`: the
    /// family's, [`heads::Preprocess`]).
    pub channel_order: Option<heads::ChannelOrder>,
    /// `--letterbox`: the placement instead of the family's (`None`: the family's).
    pub placement: Option<Placement>,
    /// `--input-size`: `(width, height)` of the model input where the model leaves it open
    /// (an ONNX model with a dynamic input; `None`: [`DEFAULT_DYNAMIC_SIZE`]); a model with
    /// a fixed input must be given its own size or none ([`DetectorOptions::check_fixed_input`]).
    pub input_size: Option<(u32, u32)>,
}

/// The input size of an ONNX model with a dynamic input when `--input-size` is not given:
/// Ultralytics' default `imgsz` (640).
#[cfg_attr(not(feature = "onnx"), allow(dead_code))] // the ONNX backend's
pub(crate) const DEFAULT_DYNAMIC_SIZE: (u32, u32) = (640, 640);

impl DetectorOptions {
    /// The pre-processing a model decoded by `head` is fed with: its family's, with the
    /// channel order and placement these options override.
    pub fn preprocess(&self, head: &dyn heads::Head) -> heads::Preprocess {
        head.preprocess().with(self.channel_order, self.placement)
    }

    /// Checks `--input-size` against a model whose input is fixed at `width x height`
    /// (`model`: its path): none given, or the same size. The error names both sizes.
    pub(crate) fn check_fixed_input(&self, model: &std::path::Path, width: u32, height: u32) -> anyhow::Result<()> {
        match self.input_size {
            Some((w, h)) if (w, h) != (width, height) => bail!(
                "--input-size {w}x{h} does not match the fixed input {width}x{height} of model {}: leave --input-size out (it sizes models whose input is dynamic) or use a model made for {w}x{h}",
                model.display()
            ),
            _ => Ok(()),
        }
    }
}

impl Default for DetectorOptions {
    fn default() -> Self {
        DetectorOptions {
            model: PathBuf::from("models/yolox_nano.onnx"),
            score_threshold: 0.3,
            nms_iou: 0.45,
            npu_cores: Vec::new(),
            contexts_per_core: 1,
            head: heads::HeadKind::Auto,
            anchors: None,
            channel_order: None,
            placement: None,
            input_size: None,
        }
    }
}

/// What the infer stage is asked to do, checked by whoever built it (the command line).
#[derive(Clone, Debug, PartialEq)]
pub struct InferConfig {
    /// The backend.
    pub backend: DetectorKind,
    /// Model file as given (resolved against the bundled data at start-up).
    pub model: PathBuf,
    /// Label file as given, one class name per line (`None`: the model's own names, else
    /// COCO 80 for an 80-class model: [`labels::resolve_labels`]).
    pub labels: Option<PathBuf>,
    /// Keep detections scoring above this (0..=1).
    pub score_threshold: f32,
    /// Per-class NMS IoU threshold (0..=1).
    pub nms_iou: f32,
    /// `rknn`: NPU cores, one context each (empty: one context, the runtime's choice).
    pub npu_cores: Vec<u32>,
    /// `--head`: the output layout, or `Auto`.
    pub head: heads::HeadKind,
    /// `--anchors`: a file of YOLOv5 anchors for `yolov5-split` (read at start-up).
    pub anchors: Option<PathBuf>,
    /// `--channel-order`: instead of the model family's (`None`: the family's).
    pub channel_order: Option<heads::ChannelOrder>,
    /// `--letterbox`: instead of the model family's placement (`None`: the family's).
    pub placement: Option<Placement>,
    /// `--input-size`: `(width, height)`, sides multiples of 32 (`None`: the model's own, or
    /// 640x640 for a dynamic one).
    pub input_size: Option<(u32, u32)>,
    /// `rknn`: contexts per NPU core (`--npu-contexts-per-core`).
    pub contexts_per_core: u32,
    /// The scheduler's cameras, weights and age limit.
    pub sched: sched::SchedConfig,
    /// The inference service for other local processes (`None`: `--no-serve`).
    pub service: Option<service::ServiceConfig>,
}

/// Detector backends (`--infer`). Adding one is a file in this folder, a variant here and
/// its arm in [`open_detector`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DetectorKind {
    /// The best this board has ([`auto::choose`]): `rknn` for a `.rknn` model, `onnx` for an
    /// `.onnx`; with no model given, rknn with the bundled model for this SoC when librknnrt
    /// loads, else YOLOX-Nano on the CPU.
    Auto,
    /// tract on the CPU (cargo feature `onnx`).
    Onnx,
    /// The Rockchip NPU through librknnrt (loaded at run time).
    Rknn,
    /// No inference: measures transport.
    None,
    /// Detections read from a file (`--infer replay:FILE.jsonl`; the file is
    /// [`InferConfig::model`]): [`replay`].
    Replay,
}

impl Choice for DetectorKind {
    const ALL: &'static [(Self, &'static str, &'static str)] = &[
        (DetectorKind::Auto, "auto", "rknn for a .rknn model, onnx for an .onnx; no model given: rknn with the bundled model for this SoC when librknnrt loads, else onnx"),
        (DetectorKind::Onnx, "onnx", "tract on the CPU"),
        (DetectorKind::Rknn, "rknn", "the Rockchip NPU through librknnrt"),
        (DetectorKind::None, "none", "no inference: measure transport"),
        (DetectorKind::Replay, "replay", "detections read from a file: --infer replay:FILE.jsonl (lines as `zcpipe run --json` prints them)"),
    ];
}

impl std::str::FromStr for DetectorKind {
    type Err = anyhow::Error;
    /// Parses a backend name; the error lists the valid ones.
    fn from_str(s: &str) -> anyhow::Result<DetectorKind> {
        DetectorKind::from_name(s).ok_or_else(|| {
            let names: Vec<&str> = DetectorKind::ALL
                .iter()
                .map(|(k, n, _)| if *k == DetectorKind::Replay { "replay:FILE.jsonl" } else { *n })
                .collect();
            anyhow::anyhow!("unknown inference backend `{s}`: valid backends are {}", names.join(", "))
        })
    }
}

impl std::fmt::Display for DetectorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Opens a detector backend: `onnx` (tract on the CPU; needs the `onnx` cargo feature),
/// `rknn` (librknnrt.so, see [`rknn`]), `none` (no inference, see [`NoDetector`]) or `auto`
/// (`rknn` when `opts.model` ends in `.rknn` and librknnrt loads; `onnx` if zcpipe was
/// built with it and `opts.model` ends in `.onnx`; else an error). The model is loaded and
/// checked here, once; errors name the model path and the fix.
pub(crate) fn open_detector(kind: DetectorKind, opts: &DetectorOptions) -> anyhow::Result<Box<dyn Detector>> {
    match kind {
        DetectorKind::None => Ok(Box::new(
            NoDetector::with(heads::Preprocess::YOLOX.with(opts.channel_order, opts.placement)).sized(opts.input_size),
        )),
        DetectorKind::Onnx => open_onnx(opts),
        DetectorKind::Rknn => Ok(Box::new(rknn::RknnDetector::open(opts)?)),
        DetectorKind::Replay => Ok(Box::new(replay::ReplayDetector::open(
            &opts.model,
            heads::Preprocess::YOLOX.with(opts.channel_order, opts.placement),
            opts.input_size,
            opts.score_threshold,
        )?)),
        DetectorKind::Auto => {
            let has_ext = |x: &str| opts.model.extension().is_some_and(|e| e.eq_ignore_ascii_case(x));
            if has_ext("rknn") {
                return rknn::RknnDetector::open(opts).map(|d| Box::new(d) as Box<dyn Detector>).map_err(|e| {
                    anyhow::anyhow!("--infer auto: model {} needs the rknn backend: {e:#}", opts.model.display())
                });
            }
            if !has_ext("onnx") {
                bail!(
                    "--infer auto: no backend for model {} (.onnx and .rknn models are supported): pass a model such as models/yolox_nano.onnx, or use --infer none",
                    opts.model.display()
                );
            }
            if !cfg!(feature = "onnx") {
                bail!(
                    "--infer auto: model {} is ONNX but zcpipe was built without the `onnx` feature: rebuild with `--features onnx` or use `--infer none`",
                    opts.model.display()
                );
            }
            open_onnx(opts)
        }
    }
}

#[cfg(feature = "onnx")]
fn open_onnx(opts: &DetectorOptions) -> anyhow::Result<Box<dyn Detector>> {
    Ok(Box::new(onnx::OnnxDetector::open(opts)?))
}

#[cfg(not(feature = "onnx"))]
fn open_onnx(_opts: &DetectorOptions) -> anyhow::Result<Box<dyn Detector>> {
    bail!("zcpipe was built without the `onnx` feature: rebuild with `--features onnx` or use `--infer none`")
}

/// The `none` backend: accepts YOLOX-Nano's input (416x416 `BGR24` with a top-left
/// letterbox, tensor `images`; `--channel-order` and `--letterbox` change the order and
/// placement, `--input-size` the size) so the scale stage and transport run exactly as
/// with a model, checks each frame's layout against the buffer, reads no pixels and
/// returns no detections. Used to measure transport alone.
#[derive(Debug)]
pub struct NoDetector {
    spec: InputSpec,
}

impl NoDetector {
    /// A `none` detector with YOLOX-Nano's input spec (416x416 BGR24 top-left, pad 114,
    /// NHWC as written).
    pub fn new() -> Self {
        NoDetector::with(heads::Preprocess::YOLOX)
    }

    /// A `none` detector of YOLOX-Nano's size fed as `pre` says (order, placement, pad).
    pub fn with(pre: heads::Preprocess) -> Self {
        NoDetector {
            spec: InputSpec {
                width: 416,
                height: 416,
                fourcc: pre.channel_order.fourcc(),
                letterbox: pre.letterbox(),
                layout: TensorLayout::Nhwc,
                name: "images".to_string(),
                bytesperline: 0,
            },
        }
    }

    /// This detector taking `size` (`(width, height)`, `--input-size`) instead of
    /// YOLOX-Nano's 416x416; `None` keeps it.
    pub fn sized(mut self, size: Option<(u32, u32)>) -> Self {
        if let Some((w, h)) = size {
            (self.spec.width, self.spec.height) = (w, h);
        }
        self
    }
}

impl Default for NoDetector {
    fn default() -> Self {
        Self::new()
    }
}

impl Detector for NoDetector {
    fn kind(&self) -> DetectorKind {
        DetectorKind::None
    }
    fn input_spec(&self) -> &InputSpec {
        &self.spec
    }
    fn detect(&mut self, input: &[u8], layout: &FrameLayout) -> anyhow::Result<Vec<Detection>> {
        self.spec.check_frame(input.len(), layout)?;
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_detector_checks_layout_and_returns_nothing() {
        let mut d = open_detector(DetectorKind::None, &DetectorOptions::default()).unwrap();
        assert_eq!(d.kind().to_string(), "none");
        let spec = d.input_spec().clone();
        assert_eq!((spec.width, spec.height, spec.fourcc, spec.layout), (416, 416, Fourcc::BGR24, TensorLayout::Nhwc));
        // bytesperline 1280 > 416*3 = 1248: padded rows are fine.
        let layout = FrameLayout::packed24(Fourcc::BGR24, 416, 416, 1280);
        let buf = vec![114u8; 1280 * 416];
        assert_eq!(d.detect(&buf, &layout).unwrap(), Vec::new());
        // The last row only needs 1248 bytes.
        assert!(d.detect(&buf[..1280 * 415 + 1248], &layout).is_ok());
        let err = d.detect(&buf[..1280 * 415 + 1247], &layout).unwrap_err().to_string();
        assert!(err.contains("needs 532448"), "{err}");
        let wrong = FrameLayout::packed24(Fourcc::RGB24, 416, 416, 1248);
        let err = d.detect(&buf, &wrong).unwrap_err().to_string();
        assert!(err.contains("RGB3 416x416") && err.contains("BGR3 416x416"), "{err}");
        let short_bpl = FrameLayout::packed24(Fourcc::BGR24, 416, 416, 1200);
        assert!(d.detect(&buf, &short_bpl).is_err());
    }

    #[test]
    fn unknown_kind_lists_valid_ones() {
        let err = "rknnn".parse::<DetectorKind>().err().unwrap().to_string();
        assert_eq!(
            err,
            "unknown inference backend `rknnn`: valid backends are auto, onnx, rknn, none, replay:FILE.jsonl"
        );
    }

    #[test]
    fn auto_rejects_unknown_model_kinds() {
        let opts = DetectorOptions { model: "models/yolox_nano.tflite".into(), ..Default::default() };
        let err = open_detector(DetectorKind::Auto, &opts).err().unwrap().to_string();
        assert!(err.contains("yolox_nano.tflite") && err.contains("--infer none"), "{err}");
    }

    #[test]
    fn auto_sends_rknn_models_to_the_rknn_backend() {
        // A model that is not an RKNN file is refused by the rknn backend before it looks
        // for librknnrt, so this holds with or without a runtime installed.
        let (_dir, fake) = zcpipe_core::testing::file_with("fake.rknn", b"not a model");
        let opts = DetectorOptions { model: fake, ..Default::default() };
        let err = open_detector(DetectorKind::Auto, &opts).err().unwrap().to_string();
        assert!(err.starts_with("--infer auto: model") && err.contains("fake.rknn is not an RKNN model"), "{err}");
    }

    #[cfg(not(feature = "onnx"))]
    #[test]
    fn onnx_without_feature_says_how_to_fix() {
        let err = open_detector(DetectorKind::Onnx, &DetectorOptions::default()).err().unwrap().to_string();
        assert_eq!(
            err,
            "zcpipe was built without the `onnx` feature: rebuild with `--features onnx` or use `--infer none`"
        );
    }
}

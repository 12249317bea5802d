//! `--infer`, `--model`, `--labels`, `--head`, `--anchors`, `--channel-order`,
//! `--letterbox`, the thresholds, `--npu-cores` and `--input-size`, and their checked form,
//! [`zcpipe_infer::InferConfig`].

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use zcpipe_core::config::{check_camera_list, Choice};
use zcpipe_core::frame::Placement;
use zcpipe_infer::auto::{self, InferChoice};
use zcpipe_infer::heads::{ChannelOrder, HeadKind};
use zcpipe_infer::rknn::parse_npu_cores;
use zcpipe_infer::sched::SchedConfig;
use zcpipe_infer::service::{ServiceConfig, ServiceScaler};
use zcpipe_infer::{DetectorKind, InferConfig};

use super::common::{check_per_camera, choice, join};

/// Infer options.
#[derive(Args, Debug, Clone)]
pub struct InferArgs {
    /// Detector backend: auto, onnx (tract on the CPU), rknn (the Rockchip NPU), none (no
    /// inference: measure transport), or replay:FILE.jsonl (detections read from a file of
    /// detection lines, as `zcpipe run --json` prints them: for demos and machines without a model).
    #[arg(long, default_value = "auto")]
    pub infer: String,
    /// Model file (.onnx or .rknn). Default: with --infer auto, the bundled .rknn for this SoC
    /// when librknnrt loads (models/yolox_nano_416_<soc>.rknn), else models/yolox_nano.onnx.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Class labels, one per line, class 0 first. Default: the model's own names (Ultralytics
    /// ONNX exports carry them), else the 80 COCO names for an 80-class model.
    #[arg(long)]
    pub labels: Option<PathBuf>,
    /// Output layout of the model: auto (recognised from the output shapes), yolox,
    /// yolox-split, yolov5 (also YOLOv7), yolov5-split, yolov8 (also YOLO11), yolov8-split.
    #[arg(long, default_value = "auto", value_parser = check_head)]
    pub head: String,
    /// yolov5-split: a file of the 18 anchor sizes (w h, 3 per stride, stride 8 first).
    /// Default: rknn_model_zoo's (YOLOv5's defaults).
    #[arg(long)]
    pub anchors: Option<PathBuf>,
    /// Channel order the scaler writes for the model. Default: the model family's (YOLOX:
    /// bgr; YOLOv5, YOLOv8, YOLO11: rgb).
    #[arg(long, value_parser = choice::<ChannelOrder>())]
    pub channel_order: Option<ChannelOrder>,
    /// Where the scaler puts the picture in the model input. Default: the model family's
    /// (YOLOX: top-left; YOLOv5, YOLOv8, YOLO11: center).
    #[arg(long, value_parser = choice::<Placement>())]
    pub letterbox: Option<Placement>,
    /// Keep detections scoring above this.
    #[arg(long, default_value_t = 0.3, allow_negative_numbers = true)]
    pub score_threshold: f32,
    /// Per-class NMS IoU threshold.
    #[arg(long, default_value_t = 0.45, allow_negative_numbers = true)]
    pub nms_iou: f32,
    /// rknn: NPU cores to run on, one context each, a free one taking the next frame (e.g. 0,1,2), or auto:
    /// every core of the SoC (RK3588: 0,1,2; RK3576: 0,1; one-core SoCs: one context).
    #[arg(long, value_parser = check_npu_cores, default_value = "auto")]
    pub npu_cores: String,
    /// Model input size, WxH or N (square), multiples of 32 up to 4096: for an ONNX model
    /// whose input size is dynamic (Ultralytics dynamic=True; default 640x640 there). A
    /// model with a fixed input (every .rknn) takes only its own size. With --infer none:
    /// the size frames are scaled to (default 416x416).
    #[arg(long)]
    pub input_size: Option<String>,
    /// rknn: contexts per NPU core (1..=4), sharing the one loaded model: while one
    /// context's frame runs, another's waits on the core, so the core never idles between
    /// frames.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    pub npu_contexts_per_core: u32,
    /// A camera's share of the NPU when frames of several cameras wait for it: a camera of
    /// weight 2 is run twice as often as one of weight 1 (default 1). With `zcpipe run`,
    /// given after a camera's --source, that camera's; a comma list gives each camera of
    /// --cameras its own.
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true)]
    pub weight: Vec<f64>,
    /// Seconds a frame may wait for the NPU: a frame older than this (since its capture)
    /// when a core frees up is dropped, counted, never inferred late (0: no limit;
    /// --ring-policy block runs every frame whatever its age).
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub max_age: f64,
    /// Several cameras: their names, comma-separated, in the scale stage's order (for the
    /// scheduler's per-camera numbers). `zcpipe run` sets it.
    #[arg(long, value_delimiter = ',')]
    pub cameras: Vec<String>,
    /// The inference service for other local processes (`zcpipe detect`, the Python client):
    /// off with this flag.
    #[arg(long)]
    pub no_serve: bool,
    /// Where the inference service listens. Default: npu.sock in the run directory.
    #[arg(long)]
    pub serve_socket: Option<PathBuf>,
    /// Members of zcpipe's group may use the inference service too (the socket is made
    /// mode 0660; its directory must let them reach it: --serve-socket in a directory of
    /// mode 0750). Default: only zcpipe's own user (and root).
    #[arg(long)]
    pub serve_group: bool,
    /// Most clients of the inference service connected at once (1..=64).
    #[arg(long, default_value_t = 16, allow_negative_numbers = true)]
    pub serve_clients: i64,
    /// Most buffers one client may register (1..=1024).
    #[arg(long, default_value_t = 32, allow_negative_numbers = true)]
    pub serve_buffers: i64,
    /// Most `request` requests of one client waiting at once; one more is answered
    /// `busy` (1..=64).
    #[arg(long, default_value_t = 4, allow_negative_numbers = true)]
    pub serve_queue: i64,
    /// Each client's share of the NPU, as a camera's --weight.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub serve_weight: f64,
    /// What letterboxes a client's buffer into the model's input: RGA on a board (a
    /// client's dma-buf converted in place), else the CPU.
    #[arg(long, value_parser = choice::<ServiceScaler>(), default_value = "auto")]
    pub serve_scaler: ServiceScaler,
}

/// The highest `--weight` taken.
const MAX_WEIGHT: f64 = 1000.0;
/// The most contexts per NPU core (go-rknnlite's pools use 2 or 3).
const MAX_CONTEXTS_PER_CORE: u32 = 4;

/// `--head`: checked by the parser, kept as written (it is passed on as is).
fn check_head(s: &str) -> Result<String, String> {
    s.parse::<HeadKind>().map(|_| s.to_string()).map_err(|e| e.to_string())
}

/// `--npu-cores`: checked by the parser, kept as written (it is passed on as is).
fn check_npu_cores(s: &str) -> Result<String, String> {
    if s == "auto" {
        return Ok(s.into());
    }
    parse_npu_cores(s).map(|_| s.to_string())
}

impl InferArgs {
    /// The checked configuration: thresholds in 0..=1, a known backend, NPU cores that
    /// exist, an input size in multiples of 32.
    pub fn config(&self) -> Result<InferConfig> {
        for (name, v) in [("--score-threshold", self.score_threshold), ("--nms-iou", self.nms_iou)] {
            if !(0.0..=1.0).contains(&v) {
                anyhow::bail!("{name} {v}: use a value in 0..=1");
            }
        }
        let input_size = self.input_size.as_deref().map(parse_input_size).transpose()?;
        let choice = self.choice()?;
        if !(1..=MAX_CONTEXTS_PER_CORE).contains(&self.npu_contexts_per_core) {
            anyhow::bail!(
                "--npu-contexts-per-core {}: use 1..={MAX_CONTEXTS_PER_CORE} (1 is the default; 2 keeps a core fed)",
                self.npu_contexts_per_core
            );
        }
        if !self.max_age.is_finite() || !(0.0..=3600.0).contains(&self.max_age) {
            anyhow::bail!("--max-age {}: use seconds in 0..=3600 (0: no limit)", self.max_age);
        }
        let weights = check_per_camera("--weight", &self.weight, self.cameras.len(), MAX_WEIGHT, true)?;
        if weights.contains(&0.0) {
            anyhow::bail!("--weight 0: a camera's weight must be above 0 (use --detect-fps to run a camera less)");
        }
        let sched = SchedConfig {
            cameras: check_camera_list("--cameras", &self.cameras)?,
            weights,
            max_age: (self.max_age > 0.0).then(|| std::time::Duration::from_secs_f64(self.max_age)),
        };
        let service = self.service()?;
        Ok(InferConfig {
            service,
            backend: choice.backend,
            model: choice.model,
            labels: self.labels.clone(),
            head: self.head.parse()?,
            anchors: self.anchors.clone(),
            channel_order: self.channel_order,
            placement: self.letterbox,
            score_threshold: self.score_threshold,
            nms_iou: self.nms_iou,
            npu_cores: choice.npu_cores,
            input_size,
            contexts_per_core: self.npu_contexts_per_core,
            sched,
        })
    }

    /// The inference service's settings (`None`: `--no-serve`). Without `--serve-socket`
    /// the socket's path is empty here: the stage puts it in its run directory.
    fn service(&self) -> Result<Option<ServiceConfig>> {
        let range = |flag: &str, v: i64, max: i64| -> Result<usize> {
            if !(1..=max).contains(&v) {
                anyhow::bail!("{flag} {v}: use 1..={max}");
            }
            Ok(v as usize)
        };
        let max_clients = range("--serve-clients", self.serve_clients, 64)?;
        let max_buffers = range("--serve-buffers", self.serve_buffers, 1024)?;
        let queue = range("--serve-queue", self.serve_queue, 64)?;
        if !(self.serve_weight.is_finite() && self.serve_weight > 0.0 && self.serve_weight <= MAX_WEIGHT) {
            anyhow::bail!("--serve-weight {}: use a weight above 0 up to {MAX_WEIGHT}", self.serve_weight);
        }
        if self.no_serve {
            return Ok(None);
        }
        let socket = self.serve_socket.clone().unwrap_or_default();
        if let Some(p) = &self.serve_socket {
            if !p.is_absolute() || p.file_name().is_none() {
                anyhow::bail!("--serve-socket {}: use an absolute path to a socket file", p.display());
            }
        }
        let mut c = ServiceConfig::at(socket);
        c.group = self.serve_group;
        (c.max_clients, c.max_buffers, c.queue, c.weight) = (max_clients, max_buffers, queue, self.serve_weight);
        c.scaler = self.serve_scaler;
        Ok(Some(c))
    }

    /// `--infer`, `--model` and `--npu-cores` resolved on this board ([`auto::choose`]: the
    /// backend and model `auto` means here, every NPU core of the SoC).
    pub fn choice(&self) -> Result<InferChoice> {
        if let Some(file) = self.infer.strip_prefix("replay:") {
            if file.is_empty() {
                anyhow::bail!("--infer replay: needs a file: --infer replay:FILE.jsonl");
            }
            if let Some(m) = &self.model {
                anyhow::bail!("--infer replay:{file} reads its detections from {file}; --model {} is for the other backends: drop one", m.display());
            }
            return auto::choose(DetectorKind::Replay, Some(std::path::Path::new(file)), None);
        }
        let backend: DetectorKind = self.infer.parse()?;
        // `--infer replay --model FILE` is the same as `--infer replay:FILE` (the form stage
        // processes are started with).
        if backend == DetectorKind::Replay && self.model.is_none() {
            anyhow::bail!(
                "--infer replay needs a file: --infer replay:FILE.jsonl (lines as `zcpipe run --json` prints them)"
            );
        }
        let cores = match self.npu_cores.as_str() {
            "auto" => None,
            s => Some(parse_npu_cores(s).map_err(anyhow::Error::msg)?),
        };
        auto::choose(backend, self.model.as_deref(), cores.as_deref())
    }

    /// These options as `--key=value` flags (see [`super::capture::CaptureArgs::flags`]).
    pub fn flags(&self) -> Vec<String> {
        let mut v = vec![
            format!("--infer={}", self.infer),
            format!("--head={}", self.head),
            format!("--score-threshold={}", self.score_threshold),
            format!("--nms-iou={}", self.nms_iou),
        ];
        v.extend(self.model.as_ref().map(|m| format!("--model={}", m.display())));
        v.push(format!("--npu-cores={}", self.npu_cores));
        v.extend(self.labels.as_ref().map(|l| format!("--labels={}", l.display())));
        v.extend(self.anchors.as_ref().map(|a| format!("--anchors={}", a.display())));
        v.extend(self.channel_order.map(|o| format!("--channel-order={}", o.name())));
        v.extend(self.letterbox.map(|p| format!("--letterbox={}", p.name())));
        v.extend(self.input_size.as_ref().map(|s| format!("--input-size={s}")));
        v.push(format!("--npu-contexts-per-core={}", self.npu_contexts_per_core));
        v.push(format!("--max-age={}", self.max_age));
        if !self.weight.is_empty() {
            v.push(format!("--weight={}", join(&self.weight)));
        }
        if !self.cameras.is_empty() {
            v.push(format!("--cameras={}", self.cameras.join(",")));
        }
        if self.no_serve {
            v.push("--no-serve".into());
        }
        v.extend(self.serve_socket.as_ref().map(|p| format!("--serve-socket={}", p.display())));
        if self.serve_group {
            v.push("--serve-group".into());
        }
        v.push(format!("--serve-clients={}", self.serve_clients));
        v.push(format!("--serve-buffers={}", self.serve_buffers));
        v.push(format!("--serve-queue={}", self.serve_queue));
        v.push(format!("--serve-weight={}", self.serve_weight));
        v.push(format!("--serve-scaler={}", self.serve_scaler.name()));
        v
    }
}

/// The largest stride of the YOLO heads zcpipe decodes: a model input side must be a
/// multiple of it, so every stride's grid has whole cells.
const INPUT_STRIDE: u32 = 32;
/// The largest `--input-size` side accepted.
const MAX_INPUT_SIDE: u32 = 4096;

/// Parses `--input-size`: `WxH` or `N` (N x N), each side a multiple of 32 in 32..=4096.
/// Returns `(width, height)`; the error is one line naming the flag, the value and the fix.
fn parse_input_size(s: &str) -> Result<(u32, u32)> {
    let side = |v: &str| v.trim().parse::<u32>().ok();
    let (w, h) = match s.split_once(['x', 'X']) {
        Some((w, h)) => (side(w), side(h)),
        None => (side(s), side(s)),
    };
    let (Some(w), Some(h)) = (w, h) else {
        anyhow::bail!("--input-size {s:?} is not WxH or N: use e.g. 640x384, or 640 for 640x640");
    };
    for v in [w, h] {
        if !(INPUT_STRIDE..=MAX_INPUT_SIDE).contains(&v) {
            anyhow::bail!(
                "--input-size {s}: a side of {v} is outside {INPUT_STRIDE}..={MAX_INPUT_SIDE}: use e.g. 640 or 640x384"
            );
        }
        if v % INPUT_STRIDE != 0 {
            let down = v / INPUT_STRIDE * INPUT_STRIDE;
            anyhow::bail!(
                "--input-size {s}: {v} is not a multiple of {INPUT_STRIDE} (the largest YOLO stride): use {down} or {}",
                down + INPUT_STRIDE
            );
        }
    }
    Ok((w, h))
}

#[cfg(test)]
mod tests {
    use super::super::{Cli, Command};
    use super::*;

    #[test]
    fn input_size_is_wxh_or_n_in_multiples_of_32() {
        assert_eq!(parse_input_size("640").unwrap(), (640, 640));
        assert_eq!(parse_input_size("320x256").unwrap(), (320, 256));
        assert_eq!(parse_input_size("4096X32").unwrap(), (4096, 32));
        let err = |s: &str| parse_input_size(s).unwrap_err().to_string();
        for bad in ["", "x", "640x", "x640", "-640", "640x384x2", "6 4 0", "big"] {
            assert_eq!(err(bad), format!("--input-size {bad:?} is not WxH or N: use e.g. 640x384, or 640 for 640x640"));
        }
        assert_eq!(
            err("650x640"),
            "--input-size 650x640: 650 is not a multiple of 32 (the largest YOLO stride): use 640 or 672"
        );
        assert_eq!(
            err("320x100"),
            "--input-size 320x100: 100 is not a multiple of 32 (the largest YOLO stride): use 96 or 128"
        );
        assert_eq!(err("0"), "--input-size 0: a side of 0 is outside 32..=4096: use e.g. 640 or 640x384");
        assert_eq!(
            err("640x4128"),
            "--input-size 640x4128: a side of 4128 is outside 32..=4096: use e.g. 640 or 640x384"
        );
    }

    #[test]
    fn input_size_is_checked_carried_and_passed_on() {
        use clap::Parser;
        let Command::Run(r) = Cli::parse_from(["zcpipe", "run", "--input-size", "320x256"]).cmd else {
            panic!("not run")
        };
        assert_eq!(r.pipeline.infer.config().unwrap().input_size, Some((320, 256)));
        assert!(r.pipeline.infer.flags().contains(&"--input-size=320x256".to_string()));
        let Command::Run(r) = Cli::parse_from(["zcpipe", "run"]).cmd else { panic!("not run") };
        assert_eq!(r.pipeline.infer.config().unwrap().input_size, None);
        assert!(!r.pipeline.infer.flags().iter().any(|f| f.starts_with("--input-size")));
        let Command::Run(r) = Cli::parse_from(["zcpipe", "run", "--input-size=641"]).cmd else { panic!("not run") };
        let err = r.pipeline.check().unwrap_err().to_string();
        assert!(err.starts_with("--input-size 641: 641 is not a multiple of 32"), "{err}");
    }
}

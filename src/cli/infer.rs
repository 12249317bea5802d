//! `--infer`, `--model`, `--labels`, `--head`, `--anchors`, `--channel-order`,
//! `--letterbox`, the thresholds and `--npu-cores`, and their checked form,
//! [`crate::infer::InferConfig`].

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::core::config::Choice;
use crate::core::frame::Placement;
use crate::infer::heads::{ChannelOrder, HeadKind};
use crate::infer::rknn::parse_npu_cores;
use crate::infer::auto::{self, InferChoice};
use crate::infer::{DetectorKind, InferConfig};

use super::common::choice;

/// Infer options.
#[derive(Args, Debug, Clone)]
pub struct InferArgs {
    /// Detector backend: auto, onnx (tract on the CPU), none (no inference: measure transport).
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
    /// rknn: NPU cores to run on, one context each, frames round-robin (e.g. 0,1,2), or auto:
    /// every core of the SoC (RK3588: 0,1,2; RK3576: 0,1; one-core SoCs: one context).
    #[arg(long, value_parser = check_npu_cores, default_value = "auto")]
    pub npu_cores: String,
}

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
    /// The checked configuration: thresholds in 0..=1, a known backend, NPU cores that exist.
    pub fn config(&self) -> Result<InferConfig> {
        for (name, v) in [("--score-threshold", self.score_threshold), ("--nms-iou", self.nms_iou)] {
            if !(0.0..=1.0).contains(&v) {
                anyhow::bail!("{name} {v}: use a value in 0..=1");
            }
        }
        let choice = self.choice()?;
        Ok(InferConfig {
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
        })
    }

    /// `--infer`, `--model` and `--npu-cores` resolved on this board ([`auto::choose`]: the
    /// backend and model `auto` means here, every NPU core of the SoC).
    pub fn choice(&self) -> Result<InferChoice> {
        let backend: DetectorKind = self.infer.parse()?;
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
        v
    }
}

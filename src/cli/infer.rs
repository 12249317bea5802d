//! `--infer`, `--model`, `--labels`, the thresholds and `--npu-cores`, and their checked
//! form, [`crate::infer::InferConfig`].

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::infer::rknn::parse_npu_cores;
use crate::infer::{DetectorKind, InferConfig};

/// Infer options.
#[derive(Args, Debug, Clone)]
pub struct InferArgs {
    /// Detector backend: auto, onnx (tract on the CPU), none (no inference: measure transport).
    #[arg(long, default_value = "auto")]
    pub infer: String,
    /// Model file.
    #[arg(long, default_value = "models/yolox_nano.onnx")]
    pub model: PathBuf,
    /// Class labels, one per line.
    #[arg(long, default_value = "models/coco80.txt")]
    pub labels: PathBuf,
    /// Keep detections scoring above this.
    #[arg(long, default_value_t = 0.3, allow_negative_numbers = true)]
    pub score_threshold: f32,
    /// Per-class NMS IoU threshold.
    #[arg(long, default_value_t = 0.45, allow_negative_numbers = true)]
    pub nms_iou: f32,
    /// rknn: NPU cores to run on, one context each, frames round-robin (e.g. 0,1,2 on
    /// RK3588). Default: one context, the runtime's choice.
    #[arg(long, value_parser = check_npu_cores)]
    pub npu_cores: Option<String>,
}

/// `--npu-cores`: checked by the parser, kept as written (it is passed on as is).
fn check_npu_cores(s: &str) -> Result<String, String> {
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
        let backend: DetectorKind = self.infer.parse()?;
        let npu_cores = match &self.npu_cores {
            Some(s) => parse_npu_cores(s).map_err(anyhow::Error::msg)?,
            None => Vec::new(),
        };
        Ok(InferConfig {
            backend,
            model: self.model.clone(),
            labels: self.labels.clone(),
            score_threshold: self.score_threshold,
            nms_iou: self.nms_iou,
            npu_cores,
        })
    }

    /// These options as `--key=value` flags (see [`super::capture::CaptureArgs::flags`]).
    pub fn flags(&self) -> Vec<String> {
        let mut v = vec![
            format!("--infer={}", self.infer),
            format!("--model={}", self.model.display()),
            format!("--labels={}", self.labels.display()),
            format!("--score-threshold={}", self.score_threshold),
            format!("--nms-iou={}", self.nms_iou),
        ];
        v.extend(self.npu_cores.as_ref().map(|c| format!("--npu-cores={c}")));
        v
    }
}

//! `--scaler`, `--scale-buffers` and `--rga-core`, and their checked form,
//! [`zcpipe_scale::ScaleConfig`].

use anyhow::Result;
use clap::Args;

use zcpipe_core::config::{check_camera_list, Choice};
use zcpipe_scale::rga::RgaCore;
use zcpipe_scale::{ScaleConfig, ScalerKind};

use super::common::{check_buffers, choice};

/// Scale options.
#[derive(Args, Debug, Clone)]
pub struct ScaleArgs {
    /// Scaler backend: auto, cpu, none (pass-through), rga, or v4l2m2m:/dev/videoN.
    #[arg(long, default_value = "auto")]
    pub scaler: ScalerKind,
    /// Buffers in the scaler's output pool. Default 3; `zcpipe run` makes it one more than
    /// the NPU cores when rknn runs on several (so every core has a frame).
    #[arg(long)]
    pub scale_buffers: Option<usize>,
    /// With --scaler rga: pin jobs to one RGA core (auto lets the driver pick; jobs hopping
    /// between cores jitter by 2-4 px, and RGA2 reaches only the first 4 GiB).
    #[arg(long, value_parser = choice::<RgaCore>(), default_value = "auto")]
    pub rga_core: RgaCore,
    /// Several cameras: their names, comma-separated (`front,door`); the scale stage joins
    /// each one's capture stage at `capture@NAME.sock` and takes their frames in turn.
    /// Empty (default): one camera, at `capture.sock`. `zcpipe run` sets it.
    #[arg(long, value_delimiter = ',')]
    pub cameras: Vec<String>,
}

impl ScaleArgs {
    /// The checked configuration: the output pool has 2..=64 buffers.
    pub fn config(&self) -> Result<ScaleConfig> {
        Ok(ScaleConfig {
            scaler: self.scaler.clone(),
            buffers: check_buffers("--scale-buffers", self.scale_buffers.unwrap_or(3), 3)?,
            rga_core: self.rga_core,
            cameras: check_camera_list("--cameras", &self.cameras)?,
        })
    }

    /// These options as `--key=value` flags (see [`super::capture::CaptureArgs::flags`]).
    pub fn flags(&self) -> Vec<String> {
        let mut v = vec![
            format!("--scaler={}", self.scaler),
            format!("--scale-buffers={}", self.scale_buffers.unwrap_or(3)),
            format!("--rga-core={}", self.rga_core.name()),
        ];
        if !self.cameras.is_empty() {
            v.push(format!("--cameras={}", self.cameras.join(",")));
        }
        v
    }
}

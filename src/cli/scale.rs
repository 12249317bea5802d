//! `--scaler`, `--scale-buffers` and `--rga-core`, and their checked form,
//! [`zcpipe_scale::ScaleConfig`].

use anyhow::Result;
use clap::Args;

use zcpipe_core::config::{check_camera_list, Choice};
use zcpipe_scale::rga::RgaCore;
use zcpipe_scale::{ScaleConfig, ScalerKind};

use super::common::{check_buffers, check_per_camera, choice, join};

/// The highest `--detect-fps` taken (a camera faster than this is inferred at every frame with 0).
const MAX_DETECT_FPS: f64 = 240.0;

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
    /// Detection rate: frames per second of each camera that go on to the NPU (0: every
    /// frame, the default). The others are never scaled or inferred, while the display and
    /// the web view still get every frame. With `zcpipe run`, given after a camera's
    /// --source, that camera's; a comma list gives each camera of --cameras its own.
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true)]
    pub detect_fps: Vec<f64>,
    /// Motion gating: a frame whose picture did not change since the last frame of its
    /// camera that went on to the NPU is passed over (a 32x18 luma thumbnail compared; see
    /// --motion-threshold), one every --motion-keepalive seconds still goes on.
    #[arg(long)]
    pub motion: bool,
    /// With --motion: the mean change of the thumbnail's luma (0..255) that counts as motion.
    #[arg(long, default_value_t = 2.0, allow_negative_numbers = true)]
    pub motion_threshold: f32,
    /// With --motion: seconds after which a still camera's frame goes on anyway, so its
    /// tracks stay alive (below --track-keepalive).
    #[arg(long, default_value_t = 0.5, allow_negative_numbers = true)]
    pub motion_keepalive: f64,
}

impl ScaleArgs {
    /// The checked configuration: the output pool has 2..=64 buffers.
    pub fn config(&self) -> Result<ScaleConfig> {
        Ok(ScaleConfig {
            scaler: self.scaler.clone(),
            buffers: check_buffers("--scale-buffers", self.scale_buffers.unwrap_or(3), 3)?,
            rga_core: self.rga_core,
            cameras: check_camera_list("--cameras", &self.cameras)?,
            detect_fps: check_per_camera("--detect-fps", &self.detect_fps, self.cameras.len(), MAX_DETECT_FPS, false)?,
            motion: self.motion()?,
        })
    }

    /// `--motion` with its threshold and keep-alive, checked.
    fn motion(&self) -> Result<Option<(f32, f64)>> {
        if !self.motion_threshold.is_finite() || !(0.0..=255.0).contains(&self.motion_threshold) {
            anyhow::bail!(
                "--motion-threshold {}: use luma levels in 0..=255 (2 is a good start)",
                self.motion_threshold
            );
        }
        if !self.motion_keepalive.is_finite() || !(0.0..=3600.0).contains(&self.motion_keepalive) {
            anyhow::bail!("--motion-keepalive {}: use seconds in 0..=3600", self.motion_keepalive);
        }
        Ok(self.motion.then_some((self.motion_threshold, self.motion_keepalive)))
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
        if !self.detect_fps.is_empty() {
            v.push(format!("--detect-fps={}", join(&self.detect_fps)));
        }
        if self.motion {
            v.push("--motion".into());
            v.push(format!("--motion-threshold={}", self.motion_threshold));
            v.push(format!("--motion-keepalive={}", self.motion_keepalive));
        }
        v
    }
}

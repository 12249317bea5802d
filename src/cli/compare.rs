//! `zcpipe compare`: its options, and the flags each round's `zcpipe run` gets.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;

use crate::compare::CompareConfig;
use zcpipe_core::config::DataPath;

use super::common::PipelineArgs;

/// `zcpipe compare`.
#[derive(Args, Debug, Clone)]
pub struct CompareArgs {
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    /// Rounds of A (zero-copy) then B (copy mode).
    #[arg(long, default_value_t = 2)]
    pub rounds: u32,
    /// Print the comparison as JSON on stdout instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also draw per-stage latency and the latency distribution of both modes (SVG).
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Each round shows the camera on a display too (`--display auto`): the comparison
    /// then has the display's rows (zero-copy scanout vs a CPU copy composed, as a plain
    /// viewer would).
    #[command(flatten)]
    pub display: super::display::RunDisplayArgs,
}

impl CompareArgs {
    /// The checked configuration: 1..=50 rounds, a `--report` whose folder exists (a report
    /// that cannot be written fails now, not after every round has run), and the flags of
    /// each round's `zcpipe run`.
    pub fn config(&self) -> Result<CompareConfig> {
        let data = self.pipeline.check()?;
        if self.rounds == 0 || self.rounds > 50 {
            bail!("--rounds {}: use 1..=50", self.rounds);
        }
        if let Some(dir) = self.report.as_ref().and_then(|p| p.parent()).filter(|d| !d.as_os_str().is_empty()) {
            if !dir.is_dir() {
                bail!(
                    "--report {}: folder {} does not exist",
                    self.report.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
                    dir.display()
                );
            }
        }
        Ok(CompareConfig {
            run_flags: self.run_flags(&data),
            rounds: self.rounds,
            json: self.json,
            report: self.report.clone(),
            copy_mode_given: self.pipeline.common.copy_mode,
        })
    }

    /// The flags of each round's `zcpipe run`: every pipeline option the user gave compare
    /// (each round adds `--copy-mode` or not itself), the data path's from `data` (checked
    /// already), and 150 frames unless `--frames` says.
    fn run_flags(&self, data: &DataPath) -> Vec<String> {
        let p = &self.pipeline;
        let mut v = data.flags();
        v.retain(|f| f != "--copy-mode");
        if p.cameras.is_empty() {
            v.extend(p.capture.flags());
        } else {
            // Several cameras: the shared options, then each `--source` with its own.
            v.extend(p.capture.flags().into_iter().filter(|f| !f.starts_with("--source=")));
            for g in &p.cameras {
                v.push(format!(
                    "--source={}{}",
                    g.name.as_ref().map(|n| format!("{n}=")).unwrap_or_default(),
                    g.source
                ));
                v.extend(g.flags.iter().cloned());
            }
        }
        if p.capture.frames.is_none() {
            v.push("--frames=150".into());
        }
        v.extend(p.scale.flags());
        v.extend(p.infer.flags());
        if self.display.display != zcpipe_display::DisplayTarget::None {
            v.push(format!("--display={}", self.display.display));
            v.extend(self.display.flags());
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::super::{Cli, Command};

    /// Every pipeline option given to compare reaches each round's `zcpipe run`, and parses
    /// back there to the same values.
    #[test]
    fn every_pipeline_option_reaches_each_round() {
        let given = [
            "--source=v4l2:/dev/video4",
            "--fps=15",
            "--buffers=6",
            "--format=NV12M",
            "--size=640x480",
            "--capture-io=dmabuf",
            "--scaler=rga",
            "--scale-buffers=4",
            "--rga-core=rga2-core0",
            "--infer=rknn",
            "--model=models/yolox_nano_416_rk3588.rknn",
            "--labels=l.txt",
            "--head=yolov5-split",
            "--anchors=a.txt",
            "--channel-order=bgr",
            "--letterbox=top-left",
            "--score-threshold=0.4",
            "--nms-iou=0.5",
            "--npu-cores=0,1",
            "--input-size=640x384",
            "--ring-policy=block",
            "--wait=spin",
            "--heap=dma32",
        ];
        let Command::Compare(a) = Cli::parse_from(["zcpipe", "compare"].into_iter().chain(given)).cmd else {
            panic!("not compare")
        };
        let flags = a.run_flags(&a.pipeline.check().unwrap());
        for g in given {
            assert!(flags.iter().any(|f| f == g), "{g} is not passed on: {flags:?}");
        }
        assert!(flags.iter().any(|f| f == "--frames=150"), "{flags:?}");
        assert!(!flags.iter().any(|f| f.starts_with("--display")), "no display unless asked: {flags:?}");
        let Command::Run(r) = Cli::parse_from(["zcpipe".to_string(), "run".into()].into_iter().chain(flags)).cmd else {
            panic!("not run")
        };
        let mut capture = a.pipeline.capture.clone();
        capture.frames = Some(150);
        assert_eq!(format!("{:?}", r.pipeline.capture), format!("{capture:?}"));
        assert_eq!(format!("{:?}", r.pipeline.scale), format!("{:?}", a.pipeline.scale));
        assert_eq!(format!("{:?}", r.pipeline.infer), format!("{:?}", a.pipeline.infer));
        assert_eq!(r.pipeline.common.data_path().unwrap().flags(), a.pipeline.common.data_path().unwrap().flags());
    }

    /// `--display` given to compare reaches each round's `zcpipe run` (with its options).
    #[test]
    fn a_display_reaches_each_round() {
        let Command::Compare(a) =
            Cli::parse_from(["zcpipe", "compare", "--display", "/dev/dri/card0", "--display-compose"]).cmd
        else {
            panic!("not compare")
        };
        let flags = a.run_flags(&a.pipeline.check().unwrap());
        let Command::Run(r) =
            Cli::parse_from(["zcpipe".to_string(), "run".into()].into_iter().chain(flags.clone())).cmd
        else {
            panic!("not run")
        };
        assert_eq!(r.display.display.to_string(), "/dev/dri/card0", "{flags:?}");
        assert!(r.display.display_compose, "{flags:?}");
    }
}

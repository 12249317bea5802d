//! `zcpipe eval track`: a recorded detections stream through a tracker, as MOTChallenge
//! results ([`zcpipe_track::eval`]).

use std::io::{BufReader, BufWriter, Write as _};
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use super::track::TrackArgs;

/// `zcpipe eval`.
#[derive(Args, Debug)]
pub struct EvalArgs {
    #[command(subcommand)]
    pub what: EvalCmd,
}

/// What to evaluate.
#[derive(Subcommand, Debug)]
pub enum EvalCmd {
    /// Track a recorded detections stream (`zcpipe run --json --tracker none > FILE`) and
    /// write the tracks as MOTChallenge results (`frame,id,x,y,w,h,score,-1,-1,-1`, frame =
    /// seq + 1) for scoring against a ground truth (benches/track_eval.py).
    Track(EvalTrackArgs),
}

/// `zcpipe eval track`.
#[derive(Args, Debug)]
pub struct EvalTrackArgs {
    /// The recorded JSON lines (`-`: stdin).
    #[arg(long)]
    pub detections: PathBuf,
    /// Where to write the results (`-`: stdout).
    #[arg(long, default_value = "-")]
    pub mot: PathBuf,
    /// Only detections with these labels are tracked (comma-separated; default all).
    #[arg(long, value_delimiter = ',')]
    pub labels: Vec<String>,
    /// Only this camera's frames (default: the first camera in the file).
    #[arg(long)]
    pub camera: Option<String>,
    /// Frame times from the sequence number at this rate (the clip's frames per second)
    /// instead of the recorded capture times (which, for a clip decoded faster than its
    /// rate, are closer together than the scene's); 0.01 to 1000.
    #[arg(long, allow_negative_numbers = true)]
    pub fps: Option<f64>,
    /// Where to write the crossings of the `--line`s, one JSON line each: `{"frame": seq + 1,
    /// "track_id", "line", "direction": "in" | "out", "label"}`.
    #[arg(long, value_name = "FILE")]
    pub crossings: Option<PathBuf>,
    #[command(flatten)]
    pub track: TrackArgs,
}

impl EvalArgs {
    /// Runs it; prints what was counted on stderr. Errors: a file that cannot be read or
    /// written (named), a bad line ([`zcpipe_track::eval::replay`]).
    pub fn run(&self) -> Result<i32> {
        let EvalCmd::Track(a) = &self.what;
        if let Some(f) = a.fps.filter(|f| !(0.01..=1000.0).contains(f)) {
            anyhow::bail!("--fps {f}: expected the clip's frames per second, 0.01 to 1000");
        }
        if !a.track.zones.is_empty() {
            anyhow::bail!("--zone: eval track writes tracks, not zone events; leave --zone out");
        }
        let scene = &a.track.scene;
        if !(scene.loiter.is_empty()
            && scene.masks.is_empty()
            && scene.filters.is_empty()
            && scene.calibrations.is_empty())
        {
            anyhow::bail!(
                "eval track takes --line (with --crossings); leave --loiter, --mask, --filter and --calibration out"
            );
        }
        if a.crossings.is_some() == scene.lines.is_empty() {
            anyhow::bail!("--line and --crossings go together: the crossings of the lines are written to the file");
        }
        if let Some(l) = scene.lines.iter().find(|l| l.spec.camera.is_some()) {
            anyhow::bail!("--line {}: eval track replays one camera; leave the camera out", l.text);
        }
        if a.track.tracker == zcpipe_track::TrackerKind::None {
            anyhow::bail!("--tracker none tracks nothing: pick bytetrack, sort or iou");
        }
        let r = zcpipe_track::eval::Replay {
            params: a.track.params(),
            labels: a.labels.clone(),
            camera: a.camera.clone(),
            fps: a.fps,
            lines: scene.lines.iter().map(|l| l.spec.line.clone()).collect(),
        };
        let input: Box<dyn std::io::BufRead> = if a.detections.as_os_str() == "-" {
            Box::new(BufReader::new(std::io::stdin()))
        } else {
            Box::new(BufReader::new(
                std::fs::File::open(&a.detections)
                    .with_context(|| format!("--detections {}", a.detections.display()))?,
            ))
        };
        let mut out: Box<dyn std::io::Write> = if a.mot.as_os_str() == "-" {
            Box::new(BufWriter::new(std::io::stdout()))
        } else {
            Box::new(BufWriter::new(
                std::fs::File::create(&a.mot).with_context(|| format!("--mot {}", a.mot.display()))?,
            ))
        };
        let done = zcpipe_track::eval::replay(input, &mut out, &r)
            .with_context(|| format!("--detections {}", a.detections.display()))
            .and_then(|st| {
                out.flush().with_context(|| format!("--mot {}", a.mot.display()))?;
                Ok(st)
            });
        let st = match done {
            Ok(st) => st,
            Err(e) => {
                // No half-written results file left behind to be scored; only a regular file
                // goes (never `--mot /dev/null`).
                if a.mot.as_os_str() != "-" && std::fs::symlink_metadata(&a.mot).is_ok_and(|m| m.is_file()) {
                    let _ = std::fs::remove_file(&a.mot);
                }
                return Err(e);
            }
        };
        if let Some(path) = &a.crossings {
            let mut text = String::new();
            for c in &st.crossings {
                text += &serde_json::to_string(c)?;
                text.push('\n');
            }
            std::fs::write(path, text).with_context(|| format!("--crossings {}", path.display()))?;
        }
        eprintln!(
            "{} frames, {} detections tracked, {} tracks confirmed, {} result lines{}",
            st.frames,
            st.detections,
            st.tracks,
            st.boxes,
            if a.crossings.is_some() { format!(", {} crossings", st.crossings.len()) } else { String::new() }
        );
        Ok(0)
    }
}

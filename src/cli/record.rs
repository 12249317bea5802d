//! `--record-dir` and the `--record-*` flags (`zcpipe run`, `zcpipe stage record`), and
//! their checked form, [`zcpipe_record::RecordConfig`].

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args;

use zcpipe_record::RecordConfig;

/// Recording options.
#[derive(Args, Debug, Clone)]
pub struct RecordArgs {
    /// Record event clips into this folder (DIR/CAMERA/START.mp4, and the index
    /// DIR/index.sqlite3): a network camera's or video file's own H.264 or H.265 packets,
    /// remuxed into fragmented MP4 without re-encoding (a raw camera's frames are encoded to
    /// H.264 on the CPU), from --record-pre seconds before a tracked object was first seen
    /// to --record-post seconds after the last one left. A sixth process, `zcpipe stage
    /// record`; a full disk stops recording, never detection.
    #[arg(long, value_name = "DIR")]
    pub record_dir: Option<PathBuf>,
    /// Seconds of video kept before the event (0 to 60; the clip starts at the keyframe at
    /// or before it).
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0, value_parser = pre_post)]
    pub record_pre: f64,
    /// Seconds of video kept after the last tracked object left (0 to 300).
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0, value_parser = post)]
    pub record_post: f64,
    /// Only objects of these labels start a clip (comma-separated, e.g. person,car).
    #[arg(long, value_name = "LABELS", value_delimiter = ',')]
    pub record_labels: Vec<String>,
    /// Only objects entering one of these zones (--zone) start a clip (comma-separated).
    #[arg(long, value_name = "ZONES", value_delimiter = ',')]
    pub record_zones: Vec<String>,
    /// Clips older than this many days are removed (0.01 to 3650).
    #[arg(long, value_name = "DAYS", value_parser = days)]
    pub record_keep_days: Option<f64>,
    /// All clips together take at most this many GB (10^9 bytes); the oldest are removed
    /// first (0.0001 to 100000).
    #[arg(long, value_name = "GB", value_parser = gigabytes)]
    pub record_max_gb: Option<f64>,
    /// Each camera's pre-roll buffer in the recorder, MiB (1 to 4096): it must hold the
    /// pre-roll and the keyframe before it.
    #[arg(long, value_name = "MIB", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub record_buffer_mb: u32,
}

/// A number of `unit` from `lo` to `hi`, or the one-line reason.
fn ranged(s: &str, lo: f64, hi: f64, unit: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (lo..=hi).contains(&v) => Ok(v),
        _ => Err(format!("{s}: expected {unit} from {lo} to {hi}")),
    }
}

fn pre_post(s: &str) -> Result<f64, String> {
    ranged(s, 0.0, 60.0, "seconds")
}

fn post(s: &str) -> Result<f64, String> {
    ranged(s, 0.0, 300.0, "seconds")
}

fn days(s: &str) -> Result<f64, String> {
    ranged(s, 0.01, 3650.0, "days")
}

fn gigabytes(s: &str) -> Result<f64, String> {
    ranged(s, 0.0001, 100_000.0, "GB")
}

impl RecordArgs {
    /// The checked configuration (`None` without `--record-dir`), reading the tracker's
    /// events at `detections`. Errors (one line): a path that is not a folder; a filter
    /// that could never match (a zone no camera has, labels or zones without a tracker).
    pub fn config(&self, detections: &Path, tracking: bool, zones: &[String]) -> Result<Option<RecordConfig>> {
        let Some(dir) = &self.record_dir else {
            if !self.record_labels.is_empty() || !self.record_zones.is_empty() {
                bail!("--record-labels and --record-zones choose what --record-dir records: add --record-dir DIR");
            }
            return Ok(None);
        };
        if dir.exists() && !dir.is_dir() {
            bail!(
                "--record-dir {}: exists and is not a folder; pick a folder (it is created if missing)",
                dir.display()
            );
        }
        if !tracking {
            bail!(
                "--record-dir {}: clips follow tracked objects: leave --tracker at bytetrack (or sort, iou)",
                dir.display()
            );
        }
        if let Some(z) = self.record_zones.iter().find(|z| !zones.contains(z)) {
            bail!("--record-zones {z}: no camera has a zone of that name (--zone {z}=x1,y1,...)");
        }
        let set = |v: &[String]| (!v.is_empty()).then(|| v.iter().cloned().collect::<BTreeSet<String>>());
        Ok(Some(RecordConfig {
            dir: dir.clone(),
            pre: Duration::from_secs_f64(self.record_pre),
            post: Duration::from_secs_f64(self.record_post),
            labels: set(&self.record_labels),
            zones: set(&self.record_zones),
            keep: self.record_keep_days.map(|d| Duration::from_secs_f64(d * 86400.0)),
            max_bytes: self.record_max_gb.map(|g| (g * 1e9) as u64),
            buffer_bytes: self.record_buffer_mb as usize * (1 << 20),
            detections: detections.to_path_buf(),
        }))
    }

    /// For the plan: `clips in DIR (5 s before, 5 s after; person,car; keep 30 days)`.
    pub fn describe(&self) -> Option<String> {
        let dir = self.record_dir.as_ref()?;
        let mut what = vec![format!("{} s before, {} s after", self.record_pre, self.record_post)];
        if !self.record_labels.is_empty() {
            what.push(format!("labels {}", self.record_labels.join(",")));
        }
        if !self.record_zones.is_empty() {
            what.push(format!("zones {}", self.record_zones.join(",")));
        }
        if let Some(d) = self.record_keep_days {
            what.push(format!("kept {d} days"));
        }
        if let Some(g) = self.record_max_gb {
            what.push(format!("at most {g} GB"));
        }
        Some(format!("clips in {} ({})", dir.display(), what.join("; ")))
    }

    /// The same options as flags, for the record stage's command line.
    pub fn flags(&self) -> Vec<String> {
        let Some(dir) = &self.record_dir else { return vec![] };
        let mut v = vec![
            format!("--record-dir={}", dir.display()),
            format!("--record-pre={}", self.record_pre),
            format!("--record-post={}", self.record_post),
            format!("--record-buffer-mb={}", self.record_buffer_mb),
        ];
        if !self.record_labels.is_empty() {
            v.push(format!("--record-labels={}", self.record_labels.join(",")));
        }
        if !self.record_zones.is_empty() {
            v.push(format!("--record-zones={}", self.record_zones.join(",")));
        }
        v.extend(self.record_keep_days.map(|d| format!("--record-keep-days={d}")));
        v.extend(self.record_max_gb.map(|g| format!("--record-max-gb={g}")));
        v
    }
}

/// `zcpipe stage record`.
#[derive(Args, Debug, Clone)]
pub struct RecordStageArgs {
    #[command(flatten)]
    pub record: RecordArgs,
    /// The detections socket whose tracker events start and end clips (default: the
    /// instance's).
    #[arg(long)]
    pub detections: Option<PathBuf>,
}

impl RecordStageArgs {
    /// The checked configuration: `--record-dir` is needed here.
    pub fn config(&self, instance: &str) -> Result<RecordConfig> {
        let detections =
            self.detections.clone().unwrap_or_else(|| zcpipe_core::config::default_detections_socket(instance));
        // The zones are the publish stage's: a stage started alone trusts its flags.
        let zones: Vec<String> = self.record.record_zones.clone();
        match self.record.config(&detections, true, &zones)? {
            Some(c) => Ok(c),
            None => bail!("zcpipe stage record needs --record-dir DIR"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        r: RecordArgs,
    }

    #[test]
    fn flags_read_back_and_bad_values_are_one_line() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("clips");
        let a = T::parse_from([
            "t",
            "--record-dir",
            dir.to_str().unwrap(),
            "--record-pre",
            "3",
            "--record-labels",
            "person,car",
            "--record-zones",
            "door",
            "--record-keep-days",
            "7",
            "--record-max-gb",
            "1.5",
        ])
        .r;
        let sock = Path::new("/run/x/detections.sock");
        let zones = ["door".to_string()];
        let back = T::parse_from(std::iter::once("t".to_string()).chain(a.flags())).r;
        assert_eq!(back.config(sock, true, &zones).unwrap(), a.config(sock, true, &zones).unwrap());
        let c = a.config(sock, true, &zones).unwrap().unwrap();
        assert_eq!((c.pre, c.post), (Duration::from_secs(3), Duration::from_secs(5)));
        assert_eq!(c.labels.unwrap().into_iter().collect::<Vec<_>>(), ["car", "person"]);
        assert_eq!((c.keep, c.max_bytes), (Some(Duration::from_secs(7 * 86400)), Some(1_500_000_000)));
        let e = a.config(sock, true, &[]).unwrap_err().to_string();
        assert!(e.starts_with("--record-zones door: no camera has a zone"), "{e}");
        let e = a.config(sock, false, &zones).unwrap_err().to_string();
        assert!(e.contains("clips follow tracked objects"), "{e}");
        for bad in [&["--record-pre", "61"][..], &["--record-post", "-1"], &["--record-max-gb", "0"]] {
            assert!(T::try_parse_from(std::iter::once("t").chain(bad.iter().copied())).is_err(), "{bad:?}");
        }
        let e = T::parse_from(["t", "--record-labels", "person"]).r.config(sock, true, &[]).unwrap_err().to_string();
        assert!(e.contains("add --record-dir DIR"), "{e}");
        std::fs::write(d.path().join("file"), b"x").unwrap();
        let e = T::parse_from(["t", "--record-dir", d.path().join("file").to_str().unwrap()])
            .r
            .config(sock, true, &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("exists and is not a folder"), "{e}");
    }
}

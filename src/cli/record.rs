//! `--record-dir` and the `--record-*` flags (`zcpipe run`, `zcpipe stage record`), and
//! their checked form, [`zcpipe_record::RecordConfig`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Result};
use clap::{Args, Parser};

use zcpipe_record::{CameraRules, RecordConfig};

/// The run's recording, camera by camera ([`RecordArgs::per_camera`]).
#[derive(Clone, Debug)]
pub struct Recording {
    /// The recording options with the run's folder (given once, or after a camera's
    /// `--source`).
    pub args: RecordArgs,
    /// Per camera, in the run's order: whether it is recorded.
    pub recorded: Vec<bool>,
    /// The cameras with rules of their own.
    pub rules: BTreeMap<String, CameraRules>,
}

/// The parts of the plan's words for recording rules: `5 s before, 5 s after` (`pre_post`),
/// `labels person,car`, `zones door` (`lists`, in their order; empty: none), `kept 14 days`,
/// `at most 50 GB`, `continuous in 60 s segments` (`extra`: keep days, max GB, segment s).
fn rules_text(pre_post: (f64, f64), lists: [&[String]; 2], extra: [Option<f64>; 3]) -> Vec<String> {
    let mut what = vec![format!("{} s before, {} s after", pre_post.0, pre_post.1)];
    for (name, l) in ["labels", "zones"].into_iter().zip(lists).filter(|(_, l)| !l.is_empty()) {
        what.push(format!("{name} {}", l.join(",")));
    }
    let [keep, max, continuous] = extra;
    what.extend(keep.map(|d| format!("kept {d} days")));
    what.extend(max.map(|g| format!("at most {g} GB")));
    what.extend(continuous.map(|c| format!("continuous in {c} s segments")));
    what
}

impl Recording {
    /// For the plan: the run's rules (`clips in DIR (...)`), the cameras recorded when not
    /// all are (`of door`), and each camera's own rules (`; door: 2 s before, ...`); `None`
    /// without recording.
    pub fn describe(&self, names: &[String]) -> Option<String> {
        let mut what = self.args.describe()?;
        if self.recorded.iter().any(|x| !x) {
            let of: Vec<&str> =
                names.iter().zip(&self.recorded).filter(|(_, x)| **x).map(|(n, _)| n.as_str()).collect();
            what += &format!(" of {}", of.join(", "));
        }
        for (camera, r) in &self.rules {
            let set = |s: &Option<BTreeSet<String>>| s.iter().flatten().cloned().collect::<Vec<String>>();
            let lists = [&set(&r.labels)[..], &set(&r.zones)[..]];
            let text = rules_text((r.pre_s, r.post_s), lists, [r.keep_days, r.max_gb, r.continuous_s]);
            what += &format!("; {camera}: {}", text.join(", "));
        }
        Some(what)
    }

    /// The record stage's flags: the options, and the cameras' own rules as JSON.
    pub fn stage_flags(&self) -> Vec<String> {
        let mut v = self.args.flags();
        if !self.rules.is_empty() {
            v.push(format!("--record-cameras={}", serde_json::to_string(&self.rules).unwrap_or_default()));
        }
        v
    }
}

/// One camera's recording options: the run's with its own on top.
#[derive(Parser, Debug)]
#[command(no_binary_name = true, args_override_self = true)]
struct OneCamera {
    #[command(flatten)]
    record: RecordArgs,
}

/// Recording options.
#[derive(Args, Debug, Clone)]
pub struct RecordArgs {
    /// Record event clips into this folder (DIR/CAMERA/START.mp4, and the index
    /// DIR/index.sqlite3): a network camera's or video file's own H.264 or H.265 packets,
    /// remuxed into fragmented MP4 without re-encoding (a raw camera's frames are encoded to
    /// H.264: by MPP on a board, else on the CPU; --encoder), from --record-pre seconds before a tracked object was first seen
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
    /// Record continuously too: the whole stream in segments of about this many seconds
    /// (5 to 3600), each from a keyframe (DIR/CAMERA/segments/START.mp4), besides the event
    /// clips; retention removes them with the clips, oldest first.
    #[arg(long, value_name = "S", value_parser = continuous)]
    pub record_continuous: Option<f64>,
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

/// Whether this user can make `dir` and write into it (checked before anything starts: a
/// recorder that cannot would only warn, and the cameras would encode for nothing).
fn writable(dir: &Path) -> Result<()> {
    let fail = |e: std::io::Error| {
        anyhow::anyhow!("--record-dir {}: cannot write there ({e}); pick a folder this user can write", dir.display())
    };
    std::fs::create_dir_all(dir).map_err(fail)?;
    let probe = dir.join(format!(".zcpipe-write-test-{}", std::process::id()));
    std::fs::OpenOptions::new().write(true).create_new(true).open(&probe).map_err(fail)?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

fn continuous(s: &str) -> Result<f64, String> {
    ranged(s, zcpipe_record::CONTINUOUS_MIN_S, zcpipe_record::CONTINUOUS_MAX_S, "seconds")
}

fn gigabytes(s: &str) -> Result<f64, String> {
    ranged(s, 0.0001, 100_000.0, "GB")
}

impl RecordArgs {
    /// The checked configuration (`None` without `--record-dir`), reading the tracker's
    /// events at `detections`. Errors (one line): a path that is not a folder; a filter
    /// that could never match (a zone no camera has, labels or zones without a tracker).
    pub fn config(&self, detections: &Path, tracking: bool, zones: &[String]) -> Result<Option<RecordConfig>> {
        self.config_with(detections, tracking, zones, BTreeMap::new())
    }

    /// [`RecordArgs::config`] with the cameras' own rules (`cameras`), whose zones are
    /// checked too.
    pub fn config_with(
        &self,
        detections: &Path,
        tracking: bool,
        zones: &[String],
        cameras: BTreeMap<String, CameraRules>,
    ) -> Result<Option<RecordConfig>> {
        for (camera, r) in &cameras {
            if let Some(z) = r.zones.iter().flatten().find(|z| !zones.contains(z)) {
                bail!("camera {camera}: --record-zones {z}: no camera has a zone of that name (--zone {z}=x1,y1,...)");
            }
        }
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
        writable(dir)?;
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
            continuous: self.record_continuous.map(Duration::from_secs_f64),
            cameras,
        }))
    }

    /// For the plan: `clips in DIR (5 s before, 5 s after; person,car; keep 30 days)`.
    pub fn describe(&self) -> Option<String> {
        let dir = self.record_dir.as_ref()?;
        let lists = [&self.record_labels[..], &self.record_zones[..]];
        let extra = [self.record_keep_days, self.record_max_gb, self.record_continuous];
        let what = rules_text((self.record_pre, self.record_post), lists, extra);
        Some(format!("clips in {} ({})", dir.display(), what.join("; ")))
    }

    /// Each camera's recording: `own[i]` are the recording options given after camera
    /// `names[i]`'s `--source` (`--key=value`). A camera is recorded when `--record-dir`
    /// is given once (every camera) or after its `--source`; one folder serves the run. A
    /// camera with options of its own gets [`CameraRules`]. Errors (one line naming the
    /// camera): two folders, a bad value, rules without a folder.
    pub fn per_camera(&self, names: &[String], own: &[Vec<String>]) -> Result<Recording> {
        let mut args = self.clone();
        let mut recorded = vec![self.record_dir.is_some(); names.len()];
        let mut rules = BTreeMap::new();
        let shared = self.all_flags();
        for (i, name) in names.iter().enumerate() {
            let Some(flags) = own.get(i).filter(|f| !f.is_empty()) else { continue };
            // A list the camera gives (labels, zones) replaces the run's: clap would add to it.
            let gives = |key: &str| flags.iter().any(|f| f.starts_with(key));
            let lists = ["--record-labels=", "--record-zones="];
            let argv =
                shared.iter().filter(|f| !lists.iter().any(|k| f.starts_with(k) && gives(k))).chain(flags.iter());
            let one = OneCamera::try_parse_from(argv).map_err(|e| {
                let first = e.to_string().lines().next().unwrap_or_default().trim_start_matches("error: ").to_string();
                anyhow::anyhow!("camera {name}: {first}")
            })?;
            let r = one.record;
            if let Some(dir) = &r.record_dir {
                match &args.record_dir {
                    Some(d) if d != dir => bail!(
                        "camera {name}: --record-dir {}: the run records into {} already; one folder serves every camera (give --record-dir once)",
                        dir.display(),
                        d.display()
                    ),
                    _ => args.record_dir = Some(dir.clone()),
                }
                recorded[i] = true;
            } else if !recorded[i] {
                bail!("camera {name}: {} chooses how a recorded camera records: add --record-dir DIR (after its --source, or once for every camera)", flags[0].split('=').next().unwrap_or(""));
            }
            if flags.iter().any(|f| !f.starts_with("--record-dir=")) {
                let set = |v: &[String]| (!v.is_empty()).then(|| v.iter().cloned().collect::<BTreeSet<String>>());
                let cam = CameraRules {
                    pre_s: r.record_pre,
                    post_s: r.record_post,
                    labels: set(&r.record_labels),
                    zones: set(&r.record_zones),
                    keep_days: r.record_keep_days,
                    max_gb: r.record_max_gb,
                    continuous_s: r.record_continuous,
                };
                cam.check(name)?;
                rules.insert(name.clone(), cam);
            }
        }
        Ok(Recording { args, recorded, rules })
    }

    /// Every option given, as flags (the folder too), for a camera's own to go on top of.
    fn all_flags(&self) -> Vec<String> {
        let mut v = vec![
            format!("--record-pre={}", self.record_pre),
            format!("--record-post={}", self.record_post),
            format!("--record-buffer-mb={}", self.record_buffer_mb),
        ];
        v.extend(self.record_dir.as_ref().map(|d| format!("--record-dir={}", d.display())));
        if !self.record_labels.is_empty() {
            v.push(format!("--record-labels={}", self.record_labels.join(",")));
        }
        if !self.record_zones.is_empty() {
            v.push(format!("--record-zones={}", self.record_zones.join(",")));
        }
        v.extend(self.record_keep_days.map(|d| format!("--record-keep-days={d}")));
        v.extend(self.record_max_gb.map(|g| format!("--record-max-gb={g}")));
        v.extend(self.record_continuous.map(|c| format!("--record-continuous={c}")));
        v
    }

    /// The same options as flags, for the record stage's command line (none without
    /// `--record-dir`).
    pub fn flags(&self) -> Vec<String> {
        if self.record_dir.is_none() {
            return vec![];
        }
        self.all_flags()
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
    /// Cameras with rules of their own, as JSON: `{"door":{"pre_s":2,"post_s":10,
    /// "labels":["person"],"zones":null,"keep_days":7,"max_gb":null}}` (what `zcpipe run`
    /// passes for the options given after a camera's --source).
    #[arg(long, value_name = "JSON")]
    pub record_cameras: Option<String>,
}

impl RecordStageArgs {
    /// The checked configuration: `--record-dir` is needed here.
    pub fn config(&self, instance: &str) -> Result<RecordConfig> {
        let detections =
            self.detections.clone().unwrap_or_else(|| zcpipe_core::config::default_detections_socket(instance));
        // The zones are the publish stage's: a stage started alone trusts its flags.
        let cameras: BTreeMap<String, CameraRules> = match &self.record_cameras {
            Some(j) => serde_json::from_str(j).map_err(|e| {
                anyhow::anyhow!("--record-cameras: {e}; expected {{\"CAMERA\":{{\"pre_s\":5,\"post_s\":5,...}}}}")
            })?,
            None => BTreeMap::new(),
        };
        for (camera, r) in &cameras {
            r.check(camera)?;
        }
        let mut zones: Vec<String> = self.record.record_zones.clone();
        zones.extend(cameras.values().flat_map(|r| r.zones.iter().flatten().cloned()));
        match self.record.config_with(&detections, true, &zones, cameras)? {
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

    #[test]
    fn options_after_a_source_record_that_camera_with_its_own_rules() {
        let names: Vec<String> = ["door", "yard", "lawn"].iter().map(|s| s.to_string()).collect();
        let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<String>>();
        let shared = T::parse_from(["t", "--record-post", "7", "--record-labels", "car"]).r;
        let r = shared
            .per_camera(
                &names,
                &[
                    own(&["--record-dir=/clips", "--record-pre=2", "--record-labels=person"]),
                    own(&[]),
                    own(&["--record-dir=/clips"]),
                ],
            )
            .unwrap();
        assert_eq!(r.recorded, [true, false, true]);
        assert_eq!(r.args.record_dir.as_deref(), Some(Path::new("/clips")));
        let door = &r.rules["door"];
        assert_eq!((door.pre_s, door.post_s), (2.0, 7.0), "its own pre, the run's post");
        assert_eq!(door.labels, Some(["person".to_string()].into()), "its labels replace the run's");
        assert!(!r.rules.contains_key("lawn"), "a folder alone is no rule of its own");
        let flags = r.stage_flags();
        assert!(flags.iter().any(|f| f.starts_with("--record-cameras={\"door\":{\"pre_s\":2.0")), "{flags:?}");
        // Given once, every camera is recorded.
        let all = T::parse_from(["t", "--record-dir", "/clips"]).r.per_camera(&names, &[own(&[]), own(&[]), own(&[])]);
        assert_eq!(all.unwrap().recorded, [true, true, true]);
        let err = |o: Vec<Vec<String>>| shared.per_camera(&names, &o).unwrap_err().to_string();
        let e = err(vec![own(&["--record-dir=/a"]), own(&["--record-dir=/b"]), own(&[])]);
        assert!(e.starts_with("camera yard: --record-dir /b: the run records into /a already"), "{e}");
        let e = err(vec![own(&[]), own(&["--record-pre=3"]), own(&[])]);
        assert!(e.starts_with("camera yard: --record-pre chooses how a recorded camera records"), "{e}");
        let e = err(vec![own(&["--record-dir=/a", "--record-pre=99"]), own(&[]), own(&[])]);
        assert!(e.starts_with("camera door: ") && e.contains("99"), "{e}");
    }
}

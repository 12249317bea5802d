//! Several cameras on one command line: `--source` given more than once, each optionally
//! named (`--source front=rtsp://... --source door=v4l2:/dev/video0`), with the per-camera
//! options (`--fps`, `--size`, `--format`, `--capture-io`) placed before the first
//! `--source` (for every camera) or after a `--source` (for that camera only).
//!
//! clap reads options without their order, so the command line of `zcpipe run` and
//! `zcpipe compare` is split first ([`split`]): each `--source` and the per-camera options
//! after it become a [`CameraGroup`]; the rest is parsed by clap as before. Each camera's
//! capture options are then the shared ones with its group's on top ([`camera_args`]).

use std::ffi::OsString;

use anyhow::{bail, Result};
use clap::Parser;

use zcpipe_core::config::check_camera_name;

use super::capture::CaptureArgs;

/// The options that may differ per camera: each takes one value.
pub const PER_CAMERA: [&str; 4] = ["--fps", "--size", "--format", "--capture-io"];

/// The per-camera options that are the NPU scheduler's, not the capture stage's: given after
/// a `--source`, they reach the scale stage (`--detect-fps`) and the infer stage
/// (`--weight`) as one value per camera ([`sched_values`]).
pub const PER_CAMERA_SCHED: [&str; 2] = ["--detect-fps", "--weight"];

/// The per-camera options that are the recorder's: given after a `--source`, they record
/// that camera (`--record-dir`) or give it rules of its own ([`record_flags`]).
pub const PER_CAMERA_RECORD: [&str; 8] = [
    "--record-dir",
    "--record-continuous",
    "--record-pre",
    "--record-post",
    "--record-labels",
    "--record-zones",
    "--record-keep-days",
    "--record-max-gb",
];

/// The keys a configuration file's `[camera.NAME]` section takes besides `source` and
/// `zone`: the capture options and the recorder's ([`PER_CAMERA`], [`PER_CAMERA_RECORD`]).
pub fn section_keys() -> Vec<&'static str> {
    PER_CAMERA.iter().chain(&PER_CAMERA_RECORD).map(|f| f.trim_start_matches("--")).collect()
}

/// Whether a group's `--key=value` flag is one of [`PER_CAMERA_SCHED`].
fn is_sched(flag: &str) -> bool {
    flag.split_once('=').is_some_and(|(k, _)| PER_CAMERA_SCHED.contains(&k))
}

/// Whether a group's `--key=value` flag is one of [`PER_CAMERA_RECORD`].
fn is_record(flag: &str) -> bool {
    flag.split_once('=').is_some_and(|(k, _)| PER_CAMERA_RECORD.contains(&k))
}

/// Each camera's recording options given after its `--source`, as `--key=value` (one list
/// per group, in order).
pub fn record_flags(groups: &[CameraGroup]) -> Vec<Vec<String>> {
    groups.iter().map(|g| g.flags.iter().filter(|f| is_record(f)).cloned().collect()).collect()
}

/// Each camera's value of scheduler option `key` (`--detect-fps`, `--weight`) given after
/// its `--source` (`None`: not given there; the last one counts). Errors name the camera.
pub fn sched_values(groups: &[CameraGroup], key: &str) -> Result<Vec<Option<f64>>> {
    groups
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let v = g.flags.iter().rev().find_map(|f| f.split_once('=').filter(|(k, _)| *k == key).map(|(_, v)| v));
            v.map(|v| {
                v.trim().parse::<f64>().map_err(|_| {
                    let name = g.name.clone().unwrap_or_else(|| format!("cam{i}"));
                    anyhow::anyhow!("camera {name}: {key} {v:?} is not a number")
                })
            })
            .transpose()
        })
        .collect()
}

/// One `--source` of the command line and the per-camera options that followed it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CameraGroup {
    /// The name given as `NAME=` before the source, if any.
    pub name: Option<String>,
    /// The source text after the name (`rtsp://...`, `testsrc:640x480`).
    pub source: String,
    /// The per-camera options that followed it, as `--key=value`.
    pub flags: Vec<String>,
}

/// Splits `NAME=` off a source text when no `:` precedes the first `=` (every source form
/// that may hold an `=` starts with its kind and a `:`): `front=rtsp://h/x` is camera
/// `front`; `image:/p/a=b.png` and `rtsp://h/x?a=b` have no name. The name must be valid
/// ([`check_camera_name`]): `Front=...`, `my cam=...`, `a/b=...` are errors naming it.
pub fn split_name(text: &str) -> Result<(Option<String>, String)> {
    let Some((head, rest)) = text.split_once('=') else { return Ok((None, text.to_string())) };
    // Every source form with an `=` in it has a `:` before it (`image:/p/a=b.png`, a URL).
    if head.contains(':') {
        return Ok((None, text.to_string()));
    }
    check_camera_name(head).map_err(|e| anyhow::anyhow!("--source {text}: {e:#}"))?;
    if rest.is_empty() {
        bail!("--source {text}: camera {head} has no source after '='");
    }
    Ok((Some(head.to_string()), rest.to_string()))
}

/// Splits the arguments of `zcpipe run` or `zcpipe compare` (the whole command line,
/// program name first): returns the command line without its `--source`s (and without the
/// per-camera options that follow the first `--source`), and the cameras in order. Any
/// other command line, or one without `--source`, comes back unchanged with no groups.
/// Errors: a `--source` or per-camera option without its value, a bad `NAME=`.
pub fn split(args: Vec<OsString>) -> Result<(Vec<OsString>, Vec<CameraGroup>)> {
    let Some(cmd) = args.iter().skip(1).position(|a| a == "run" || a == "compare").map(|i| i + 1) else {
        return Ok((args, vec![]));
    };
    // Only the subcommand's own arguments, and only up to a `--` (none takes positionals).
    if !args[cmd + 1..].iter().any(|a| a == "--source" || a.to_str().is_some_and(|s| s.starts_with("--source="))) {
        return Ok((args, vec![]));
    }
    let mut out: Vec<OsString> = args[..=cmd].to_vec();
    let mut groups: Vec<CameraGroup> = vec![];
    let mut it = args[cmd + 1..].iter().peekable();
    while let Some(a) = it.next() {
        let Some(s) = a.to_str() else {
            out.push(a.clone());
            continue;
        };
        let (key, inline) = match s.split_once('=') {
            Some((k, v)) if k.starts_with("--") => (k, Some(v.to_string())),
            _ => (s, None),
        };
        let is_source = key == "--source";
        // A per-camera option belongs to the camera before it; before the first, to all.
        // (`compare` records nothing: a recording option stays where clap refuses it.)
        let recording = PER_CAMERA_RECORD.contains(&key) && args[cmd] == "run";
        let for_a_camera =
            (PER_CAMERA.contains(&key) || PER_CAMERA_SCHED.contains(&key) || recording) && !groups.is_empty();
        if !is_source && !for_a_camera {
            out.push(a.clone());
            continue;
        }
        let value = match inline {
            Some(v) => v,
            None => match it.next().and_then(|v| v.to_str()) {
                Some(v) => v.to_string(),
                None => bail!("{key} needs a value"),
            },
        };
        if is_source {
            let (name, source) = split_name(&value)?;
            groups.push(CameraGroup { name, source, flags: vec![] });
        } else if let Some(g) = groups.last_mut() {
            g.flags.push(format!("{key}={value}"));
        }
    }
    Ok((out, groups))
}

/// Only the capture options, parsed from one camera's flags.
#[derive(Parser, Debug)]
#[command(no_binary_name = true, args_override_self = true)]
struct OneCamera {
    #[command(flatten)]
    capture: CaptureArgs,
}

/// Each camera's name and capture options: `shared` (the options given once, which every
/// camera starts from) with the camera's source and its own options on top. No groups:
/// one camera, `shared` as it is, named `cam0`. Unnamed cameras are `camN` by position.
/// Errors name the camera: an option that does not parse, a repeated name, a source given
/// twice (a device or stream opened twice; test patterns may repeat), more cameras than
/// [`zcpipe_core::frame::MAX_CAMERAS`].
pub fn camera_args(shared: &CaptureArgs, groups: &[CameraGroup]) -> Result<Vec<(String, CaptureArgs)>> {
    if groups.is_empty() {
        return Ok(vec![("cam0".to_string(), shared.clone())]);
    }
    let base: Vec<String> =
        shared.flags().into_iter().filter(|f| !f.starts_with("--source=") && !f.starts_with("--camera=")).collect();
    let mut cams: Vec<(String, CaptureArgs)> = Vec::with_capacity(groups.len());
    for (i, g) in groups.iter().enumerate() {
        let name = g.name.clone().unwrap_or_else(|| format!("cam{i}"));
        let own = g.flags.iter().filter(|f| !is_sched(f) && !is_record(f)).cloned();
        let argv = base.iter().cloned().chain([format!("--source={}", g.source)]).chain(own);
        let one = OneCamera::try_parse_from(argv).map_err(|e| {
            let first = e.to_string().lines().next().unwrap_or_default().trim_start_matches("error: ").to_string();
            anyhow::anyhow!("camera {name} (--source {}): {first}", g.source)
        })?;
        let mut capture = one.capture;
        // Options given once for every camera that apply to network cameras only
        // (`--rtsp-transport`, `--wait-for-camera`) are left out for the others.
        if let Ok(spec) = capture.source.parse::<zcpipe_capture::spec::SourceSpec>().map_err(drop).and_then(|s| {
            if groups.len() > 1 {
                Ok(s)
            } else {
                Err(())
            }
        }) {
            let rtsp =
                matches!(&spec, zcpipe_capture::spec::SourceSpec::Network(u) if zcpipe_capture::network::is_rtsp(u));
            if !spec.is_network() {
                capture.wait_for_camera = false;
            }
            if !rtsp {
                capture.rtsp_transport = None;
            }
            // `--decoder` given once applies to the compressed sources (files, streams, MJPEG
            // cameras); a test pattern or still images have none.
            if matches!(
                spec,
                zcpipe_capture::spec::SourceSpec::Image(_) | zcpipe_capture::spec::SourceSpec::TestSrc { .. }
            ) {
                capture.decoder = None;
            }
        }
        cams.push((name, capture));
    }
    let names: Vec<String> = cams.iter().map(|(n, _)| n.clone()).collect();
    for (i, g) in groups.iter().enumerate().filter(|(_, g)| g.name.is_none()) {
        if let Some(j) = groups.iter().position(|o| o.name.as_deref() == Some(names[i].as_str())) {
            bail!("--source: camera {} (--source {}) is unnamed, so it is called {}, the name camera {} was given; name it (--source NAME={})", i + 1, g.source, names[i], j + 1, g.source);
        }
    }
    zcpipe_core::config::check_camera_list("--source", &names)?;
    let same = |a: &str| -> String {
        // The same file or device under another spelling (a relative path, a symlink).
        for kind in ["image:", "video:", "v4l2:"] {
            if let Some(real) = a.strip_prefix(kind).and_then(|p| std::fs::canonicalize(p).ok()) {
                return format!("{kind}{}", real.display());
            }
        }
        a.to_string()
    };
    for (i, (name, a)) in cams.iter().enumerate() {
        if a.source.starts_with("testsrc") {
            continue;
        }
        if let Some((other, _)) = cams[..i].iter().find(|(_, b)| same(&b.source) == same(&a.source)) {
            bail!(
                "--source {} is given twice (cameras {other} and {name}); a device or stream is opened by one capture stage: give it once",
                zcpipe_capture::spec::redact_url(&a.source)
            );
        }
    }
    Ok(cams)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn names_are_a_prefix_only_before_a_source() {
        assert_eq!(split_name("front=rtsp://h/x").unwrap(), (Some("front".into()), "rtsp://h/x".into()));
        assert_eq!(split_name("image:/p/a=b.png").unwrap(), (None, "image:/p/a=b.png".into()));
        assert_eq!(split_name("rtsp://u:p@h/x?a=b").unwrap(), (None, "rtsp://u:p@h/x?a=b".into()));
        assert_eq!(split_name("testsrc").unwrap(), (None, "testsrc".into()));
        assert_eq!(
            split_name("door_2-b=v4l2:/dev/video0").unwrap(),
            (Some("door_2-b".into()), "v4l2:/dev/video0".into())
        );
        for bad in [
            "Front=testsrc",
            "my cam=testsrc",
            "a+b=testsrc",
            "a#=testsrc",
            "a/b=testsrc",
            "x=",
            &format!("{}=testsrc", "a".repeat(33)),
        ] {
            let e = split_name(bad).expect_err(bad).to_string();
            assert!(e.contains("camera name") || e.contains("no source"), "{bad}: {e}");
        }
    }

    #[test]
    fn per_camera_options_follow_their_source_and_the_rest_stays() {
        let (rest, groups) = split(os(&[
            "zcpipe",
            "-v",
            "run",
            "--fps",
            "10",
            "--frames=5",
            "--source",
            "front=testsrc:64x48",
            "--fps=5",
            "--size",
            "640x480",
            "--source=testsrc",
            "--scaler",
            "cpu",
            "--capture-io=dmabuf",
        ]))
        .unwrap();
        assert_eq!(rest, os(&["zcpipe", "-v", "run", "--fps", "10", "--frames=5", "--scaler", "cpu"]));
        assert_eq!(
            groups,
            vec![
                CameraGroup {
                    name: Some("front".into()),
                    source: "testsrc:64x48".into(),
                    flags: vec!["--fps=5".into(), "--size=640x480".into()]
                },
                CameraGroup { name: None, source: "testsrc".into(), flags: vec!["--capture-io=dmabuf".into()] },
            ]
        );
        // No --source, another command: unchanged.
        let plain = os(&["zcpipe", "run", "--fps", "10"]);
        assert_eq!(split(plain.clone()).unwrap(), (plain, vec![]));
        let watch = os(&["zcpipe", "watch", "--camera", "front"]);
        assert_eq!(split(watch.clone()).unwrap(), (watch, vec![]));
        assert!(split(os(&["zcpipe", "run", "--source"])).unwrap_err().to_string().contains("--source needs a value"));
    }

    #[test]
    fn each_camera_gets_the_shared_options_and_its_own() {
        let shared = OneCamera::try_parse_from(["--fps=10", "--frames=7"]).unwrap().capture;
        let (_, groups) =
            split(os(&["zcpipe", "run", "--source", "a=testsrc:64x48", "--fps", "5", "--source", "testsrc:32x32"]))
                .unwrap();
        let cams = camera_args(&shared, &groups).unwrap();
        assert_eq!(
            cams.iter().map(|(n, a)| (n.as_str(), a.source.as_str(), a.fps, a.frames)).collect::<Vec<_>>(),
            vec![("a", "testsrc:64x48", Some(5.0), Some(7)), ("cam1", "testsrc:32x32", Some(10.0), Some(7)),]
        );
        let (_, twice) =
            split(os(&["zcpipe", "run", "--source", "a=video:x.mp4", "--source", "b=video:x.mp4"])).unwrap();
        let e = camera_args(&shared, &twice).unwrap_err().to_string();
        assert!(e.contains("given twice (cameras a and b)"), "{e}");
        // The same file under two spellings.
        let root = env!("CARGO_MANIFEST_DIR");
        let (_, twice) = split(os(&[
            "zcpipe",
            "run",
            "--source",
            &format!("a=image:{root}/tests/data/dog.jpg"),
            "--source",
            &format!("b=image:{root}/tests/../tests/data/dog.jpg"),
        ]))
        .unwrap();
        let e = camera_args(&shared, &twice).unwrap_err().to_string();
        assert!(e.contains("(cameras a and b)"), "{e}");
        // An unnamed camera whose default name another camera was given.
        let (_, clash) =
            split(os(&["zcpipe", "run", "--source", "cam1=testsrc", "--source", "testsrc:64x48"])).unwrap();
        let e = camera_args(&shared, &clash).unwrap_err().to_string();
        assert!(e.contains("camera 2 (--source testsrc:64x48) is unnamed, so it is called cam1"), "{e}");
        let (_, same) = split(os(&["zcpipe", "run", "--source", "a=testsrc", "--source", "a=testsrc:64x48"])).unwrap();
        let e = camera_args(&shared, &same).unwrap_err().to_string();
        assert!(e.contains("\"a\" is given twice"), "{e}");
        let (_, bad) = split(os(&["zcpipe", "run", "--source", "a=testsrc", "--fps", "fast"])).unwrap();
        let e = camera_args(&shared, &bad).unwrap_err().to_string();
        assert!(e.starts_with("camera a (--source testsrc): "), "{e}");
    }

    /// `--detect-fps` and `--weight` after a `--source` are that camera's: kept out of its
    /// capture options, read back per camera, a bad value named with its camera.
    #[test]
    fn scheduler_options_after_a_source_are_that_cameras() {
        let args =
            ["zcpipe", "run", "--detect-fps", "5", "--source", "a=testsrc", "--weight", "2", "--source", "b=testsrc"];
        let (rest, groups) = split(os(&args)).unwrap();
        assert_eq!(rest, os(&["zcpipe", "run", "--detect-fps", "5"]), "the one for all stays for clap");
        assert_eq!(groups[0].flags, vec!["--weight=2".to_string()]);
        assert_eq!(sched_values(&groups, "--weight").unwrap(), vec![Some(2.0), None]);
        assert_eq!(sched_values(&groups, "--detect-fps").unwrap(), vec![None, None]);
        let shared = OneCamera::try_parse_from(Vec::<String>::new()).unwrap().capture;
        assert_eq!(camera_args(&shared, &groups).unwrap().len(), 2, "not a capture option, not refused as one");
        let (_, bad) = split(os(&["zcpipe", "run", "--source", "a=testsrc", "--detect-fps", "fast"])).unwrap();
        assert_eq!(
            sched_values(&bad, "--detect-fps").unwrap_err().to_string(),
            "camera a: --detect-fps \"fast\" is not a number"
        );
    }
}

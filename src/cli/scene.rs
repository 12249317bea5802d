//! `--line`, `--loiter`, `--mask`, `--filter` and `--calibration`: what a camera's tracks
//! are measured against and what never reaches the tracker (part of [`super::track::TrackArgs`]).

use anyhow::{bail, Result};
use clap::Args;

use zcpipe_track::filter::{FilterSpec, MaskSpec};
use zcpipe_track::speed::CalibrationSpec;
use zcpipe_track::zone::LoiterSpec;
use zcpipe_track::LineSpec;

/// A value as given and as read: the text goes back on a stage's command line as it was.
#[derive(Clone, Debug, PartialEq)]
pub struct Given<T> {
    /// As given.
    pub text: String,
    /// As read.
    pub spec: T,
}

/// A flag's parser whose error is its reader's line alone (which names the item): clap's
/// own ("invalid value '...'") would quote a value of a thousand points whole.
#[derive(Clone)]
pub(crate) struct Read<T>(pub(crate) &'static str, pub(crate) fn(&str) -> Result<T>);

impl<T: Clone + Send + Sync + 'static> clap::builder::TypedValueParser for Read<T> {
    type Value = Given<T>;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _: Option<&clap::Arg>,
        v: &std::ffi::OsStr,
    ) -> Result<Given<T>, clap::Error> {
        let line =
            |msg: String| clap::Error::raw(clap::error::ErrorKind::ValueValidation, format!("{msg}\n")).with_cmd(cmd);
        let s = v.to_str().ok_or_else(|| line(format!("{}: the value is not UTF-8 text", self.0)))?;
        let spec = (self.1)(s).map_err(|e| line(format!("{e:#}")))?;
        Ok(Given { text: s.to_string(), spec })
    }
}

/// Lines, loitering, masks, filters and calibrations.
#[derive(Args, Debug, Clone, Default)]
pub struct SceneArgs {
    /// A line counted when tracked objects cross it: `NAME=x1,y1,x2,y2[,...]` (a polyline,
    /// source pixels), `CAMERA:NAME=...` for one camera of several; after the points,
    /// `point=bottom|center|top` (the box's point that crosses; default its bottom centre)
    /// and `band=PX` (how far past the line a point must be to count; default 5% of the
    /// box's height). Along the line from its first point, crossing from its left-hand side
    /// to its right-hand side is `in`. Repeat for more lines.
    #[arg(long = "line", value_name = "[CAMERA:]NAME=x1,y1,x2,y2,...", value_parser = Read("--line", LineSpec::parse))]
    pub lines: Vec<Given<LineSpec>>,
    /// A `loitering` event when a tracked object stays in zone ZONE (a `--zone`) for
    /// SECONDS, once per visit: `ZONE=SECONDS`, `CAMERA:ZONE=SECONDS` for one camera.
    #[arg(long = "loiter", value_name = "[CAMERA:]ZONE=SECONDS", value_parser = Read("--loiter", LoiterSpec::parse))]
    pub loiter: Vec<Given<LoiterSpec>>,
    /// A mask: detections whose box's bottom centre lies in this polygon are dropped before
    /// tracking (counted): `x1,y1,x2,y2,x3,y3,...` source pixels, `CAMERA:x1,...` for one
    /// camera. Repeat for more masks.
    #[arg(long = "mask", value_name = "[CAMERA:]x1,y1,...", value_parser = Read("--mask", MaskSpec::parse))]
    pub masks: Vec<Given<MaskSpec>>,
    /// Limits for one label's detections, the others dropped before tracking (counted):
    /// `LABEL:key=value,...` with keys min_area, max_area (box area, px²), min_score,
    /// min_ratio, max_ratio (box width over height); `CAMERA:LABEL:...` for one camera
    /// (replacing, there, a filter of the label for every camera).
    #[arg(long = "filter", value_name = "[CAMERA:]LABEL:key=value,...", value_parser = Read("--filter", FilterSpec::parse))]
    pub filters: Vec<Given<FilterSpec>>,
    /// Ground speeds (km/h, in events and frame lines) from four picture points at the
    /// corners of a rectangle on the ground, in order round it, and its sides in metres
    /// (first to second point, second to third): `x1,y1,x2,y2,x3,y3,x4,y4=WIDTH,LENGTH`,
    /// `CAMERA:...` for one camera.
    #[arg(long = "calibration", value_name = "[CAMERA:]x1,y1,...,x4,y4=W,L", value_parser = Read("--calibration", CalibrationSpec::parse))]
    pub calibrations: Vec<Given<CalibrationSpec>>,
}

impl SceneArgs {
    /// The options that need a tracker, if any is given (for `--tracker none`'s refusal).
    pub fn needing_a_tracker(&self) -> Option<&'static str> {
        [
            (!self.lines.is_empty(), "--line"),
            (!self.loiter.is_empty(), "--loiter"),
            (!self.calibrations.is_empty(), "--calibration"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
    }

    /// Each camera's calibration: one naming a camera is its own, one naming none every
    /// camera's. Errors (one line): a camera not in the run, two for one camera.
    pub fn calibrations(&self, cameras: &[String]) -> Result<Vec<Option<CalibrationSpec>>> {
        let mut out: Vec<Option<CalibrationSpec>> = vec![None; cameras.len()];
        let mut own = vec![false; cameras.len()];
        for general in [true, false] {
            for c in self.calibrations.iter().filter(|c| c.spec.camera.is_none() == general) {
                for i in zcpipe_track::zone::targets("--calibration", &c.text, c.spec.camera.as_deref(), cameras)? {
                    if (general && out[i].is_some()) || own[i] {
                        bail!(
                            "--calibration {}: camera {} has a calibration already; give one per camera",
                            c.text,
                            cameras[i]
                        );
                    }
                    own[i] = !general;
                    out[i] = Some(c.spec.clone());
                }
            }
        }
        Ok(out)
    }

    /// The same options as flags, for a stage's command line.
    pub fn flags(&self) -> Vec<String> {
        fn each<'a, T>(flag: &'static str, v: &'a [Given<T>]) -> impl Iterator<Item = String> + 'a {
            v.iter().map(move |g| format!("--{flag}={}", g.text))
        }
        each("line", &self.lines)
            .chain(each("loiter", &self.loiter))
            .chain(each("mask", &self.masks))
            .chain(each("filter", &self.filters))
            .chain(each("calibration", &self.calibrations))
            .collect()
    }

    /// The `--line` and `--mask` flags of the lines and masks camera `camera` has (those
    /// naming it or no camera), as given but without the camera: what the display stage
    /// showing it draws.
    pub fn shape_flags_of(&self, camera: &str) -> Vec<String> {
        fn of<'a, T>(
            flag: &'static str,
            v: &'a [Given<T>],
            cam: impl Fn(&T) -> Option<&str> + 'a,
            camera: &'a str,
        ) -> impl Iterator<Item = String> + 'a {
            v.iter().filter_map(move |g| match cam(&g.spec) {
                None => Some(format!("--{flag}={}", g.text)),
                // The text starts with `CAMERA:` when the spec names a camera.
                Some(c) if c == camera => {
                    Some(format!("--{flag}={}", g.text.strip_prefix(&format!("{c}:")).unwrap_or(&g.text)))
                }
                Some(_) => None,
            })
        }
        of("line", &self.lines, |s: &LineSpec| s.camera.as_deref(), camera)
            .chain(of("mask", &self.masks, |s: &MaskSpec| s.camera.as_deref(), camera))
            .collect()
    }

    /// For the plan: `lines door, front:gate; loitering gate 30 s; 2 masks; filters person`.
    pub fn describe(&self) -> Vec<String> {
        let cam = |c: &Option<String>| c.as_ref().map(|c| format!("{c}:")).unwrap_or_default();
        let mut out = vec![];
        if !self.lines.is_empty() {
            let l: Vec<String> =
                self.lines.iter().map(|g| format!("{}{}", cam(&g.spec.camera), g.spec.line.name)).collect();
            out.push(format!("lines {}", l.join(", ")));
        }
        if !self.loiter.is_empty() {
            let l: Vec<String> = self
                .loiter
                .iter()
                .map(|g| format!("{}{} {} s", cam(&g.spec.camera), g.spec.zone, g.spec.after_ns as f64 / 1e9))
                .collect();
            out.push(format!("loitering {}", l.join(", ")));
        }
        if !self.masks.is_empty() {
            out.push(format!("{} mask{}", self.masks.len(), if self.masks.len() == 1 { "" } else { "s" }));
        }
        if !self.filters.is_empty() {
            let l: Vec<String> =
                self.filters.iter().map(|g| format!("{}{}", cam(&g.spec.camera), g.spec.filter.label)).collect();
            out.push(format!("filters {}", l.join(", ")));
        }
        if !self.calibrations.is_empty() {
            out.push("speeds".into());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct S {
        #[command(flatten)]
        s: SceneArgs,
    }

    #[test]
    fn options_read_back_from_their_flags() {
        let a = S::parse_from([
            "s",
            "--line",
            "front:door=0,200,400,200,point=center",
            "--loiter",
            "gate=30",
            "--mask",
            "0,0,50,0,50,50",
            "--filter",
            "person:min_score=0.6",
            "--calibration",
            "back:0,0,100,0,100,100,0,100=4,20",
        ])
        .s;
        let back = S::parse_from(std::iter::once("s".to_string()).chain(a.flags())).s;
        assert_eq!(back.flags(), a.flags());
        assert_eq!(back.lines[0].spec, a.lines[0].spec);
        assert_eq!(a.describe(), ["lines front:door", "loitering gate 30 s", "1 mask", "filters person", "speeds"]);
        let cams = ["front".to_string(), "back".to_string()];
        let c = a.calibrations(&cams).unwrap();
        assert!(c[0].is_none() && c[1].is_some());
    }

    #[test]
    fn bad_values_are_the_readers_line() {
        for (flag, bad, says) in [
            ("--line", "door=5,5", "--line door=5,5: 1 point(s); a line needs at least two"),
            ("--loiter", "gate=forever", "--loiter gate=forever: \"forever\" is not a time in seconds"),
            ("--mask", "0,0,1,1", "--mask 0,0,1,1: 2 point(s); a mask needs at least three"),
            ("--filter", "person:min_score=0.9,max_size=3", "unknown key `max_size`"),
            ("--calibration", "0,0,1,0,2,0,0,1=3,4", "collinear"),
        ] {
            let e = S::try_parse_from(["s", flag, bad]).err().unwrap().to_string();
            assert!(e.contains(says), "{flag} {bad}: {e}");
        }
        let twice =
            S::parse_from(["s", "--calibration", "0,0,9,0,9,9,0,9=1,1", "--calibration", "0,0,8,0,8,8,0,8=1,1"]).s;
        let e = format!("{:#}", twice.calibrations(&["cam0".into()]).unwrap_err());
        assert!(e.contains("camera cam0 has a calibration already"), "{e}");
        let own =
            S::parse_from(["s", "--calibration", "0,0,9,0,9,9,0,9=1,1", "--calibration", "b:0,0,8,0,8,8,0,8=2,2"]).s;
        let c = own.calibrations(&["a".into(), "b".into()]).unwrap();
        assert_eq!((c[0].as_ref().unwrap().size_m, c[1].as_ref().unwrap().size_m), ((1.0, 1.0), (2.0, 2.0)));
    }
}

//! `--tracker`, `--zone` and the tracker's parameters (`zcpipe run`, `zcpipe stage publish`,
//! `zcpipe eval track`), and their checked form, [`zcpipe_publish::TrackConfig`].

use anyhow::{bail, Result};
use clap::Args;

use zcpipe_publish::TrackConfig;
use zcpipe_track::{zone, TrackParams, TrackerKind, ZoneSpec};

use super::common::choice;
use super::scene::SceneArgs;

/// Tracking options.
#[derive(Args, Debug, Clone)]
pub struct TrackArgs {
    /// Multi-object tracker: each detection of a confirmed track gets a `track_id`, and
    /// tracks give events (new, entered_zone, left_zone, stationary, end) on the detections
    /// socket. none: no ids, no events.
    #[arg(long, value_parser = choice::<TrackerKind>(), default_value = "bytetrack")]
    pub tracker: TrackerKind,
    /// A zone: a named polygon in source pixels, `NAME=x1,y1,x2,y2,x3,y3,...` (at least three
    /// points), `CAMERA:NAME=...` for one camera of several (without CAMERA: every camera).
    /// A tracked object is in a zone when its box's bottom centre is. Repeat for more zones.
    #[arg(long = "zone", value_name = "[CAMERA:]NAME=x1,y1,...", value_parser = ParseZone)]
    pub zones: Vec<ZoneSpec>,
    /// Frames in a row a new track must be seen in before it is confirmed (gets its id and a
    /// `new` event), 1 to 100.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub track_confirm: u32,
    /// Seconds a confirmed track may go unseen before it ends (`end` event), 0.05 to 3600.
    #[arg(long, default_value_t = 1.0, value_parser = seconds, allow_negative_numbers = true)]
    pub track_keepalive: f64,
    /// Seconds a track must stay in place to be `stationary`, 0.05 to 3600.
    #[arg(long, default_value_t = 10.0, value_parser = seconds, allow_negative_numbers = true)]
    pub stationary_after: f64,
    /// How far a track's box centre may move and still stay in place, as a fraction of its
    /// box's diagonal (0 to 1).
    #[arg(long, default_value_t = 0.02, value_parser = fraction, allow_negative_numbers = true)]
    pub stationary_move: f32,
    /// Detections scoring this or more are high-score: the only ones the iou and sort
    /// trackers use, and ByteTrack's first association (its new tracks need 0.1 more);
    /// ByteTrack's second association takes the lower ones down to --score-threshold (0.05 to 0.95).
    #[arg(long, default_value_t = 0.5, value_parser = high_score, allow_negative_numbers = true)]
    pub track_high: f32,
    #[command(flatten)]
    pub scene: SceneArgs,
}

/// `--zone`'s parser: its error is [`ZoneSpec::parse`]'s line alone, which names the zone;
/// clap's own ("invalid value '...'") would quote the whole value, a zone of a thousand
/// points included.
#[derive(Clone)]
pub(crate) struct ParseZone;

impl clap::builder::TypedValueParser for ParseZone {
    type Value = ZoneSpec;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _: Option<&clap::Arg>,
        v: &std::ffi::OsStr,
    ) -> Result<ZoneSpec, clap::Error> {
        let line =
            |msg: String| clap::Error::raw(clap::error::ErrorKind::ValueValidation, format!("{msg}\n")).with_cmd(cmd);
        let s = v.to_str().ok_or_else(|| line("--zone: the value is not UTF-8 text".into()))?;
        ZoneSpec::parse(s).map_err(|e| line(format!("{e:#}")))
    }
}

fn seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.05..=3600.0).contains(&v) => Ok(v),
        _ => Err(format!("{s}: expected seconds from 0.05 to 3600")),
    }
}

fn high_score(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(v) if (0.05..=0.95).contains(&v) => Ok(v),
        _ => Err(format!("{s}: expected a score from 0.05 to 0.95 (a detection above it must be possible)")),
    }
}

fn fraction(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("{s}: expected a number from 0 to 1")),
    }
}

impl TrackArgs {
    /// The tracker's parameters.
    pub fn params(&self) -> TrackParams {
        TrackParams {
            kind: self.tracker,
            confirm_frames: self.track_confirm,
            keepalive_ns: (self.track_keepalive * 1e9) as u64,
            stationary_ns: (self.stationary_after * 1e9) as u64,
            stationary_move: self.stationary_move,
            high_score: self.track_high,
        }
    }

    /// The checked configuration for `cameras` (in the run's order): each camera's zones.
    /// Errors (one line): zones with `--tracker none`, a zone for a camera not in the run, a
    /// zone named twice for one camera.
    pub fn config(&self, cameras: &[String]) -> Result<TrackConfig> {
        if self.tracker == TrackerKind::None && !self.zones.is_empty() {
            bail!("--zone needs a tracker (zones count tracked objects): leave --tracker at bytetrack, or drop --zone");
        }
        if let Some(flag) = self.scene.needing_a_tracker().filter(|_| self.tracker == TrackerKind::None) {
            bail!("{flag} needs a tracker (it measures tracked objects): leave --tracker at bytetrack, or drop {flag}");
        }
        let zones = zone::per_camera(&self.zones, cameras)?;
        let s = &self.scene;
        let loiter: Vec<_> = s.loiter.iter().map(|g| g.spec.clone()).collect();
        let lines: Vec<_> = s.lines.iter().map(|g| g.spec.clone()).collect();
        let masks: Vec<_> = s.masks.iter().map(|g| g.spec.clone()).collect();
        let filters: Vec<_> = s.filters.iter().map(|g| g.spec.clone()).collect();
        Ok(TrackConfig {
            params: self.params(),
            loiter_ns: zone::loiter_per_camera(&loiter, cameras, &zones)?,
            zones,
            lines: zcpipe_track::line::per_camera(&lines, cameras)?,
            gates: zcpipe_track::filter::per_camera(&masks, &filters, cameras)?,
            calibrations: s.calibrations(cameras)?,
        })
    }

    /// For the plan: `bytetrack tracks, zones door, front:gate` or `no tracking`.
    pub fn describe(&self) -> String {
        if self.tracker == TrackerKind::None {
            return "no tracking".into();
        }
        let mut s = format!("{} tracks", zcpipe_core::config::Choice::name(self.tracker));
        if !self.zones.is_empty() {
            let z: Vec<String> = self
                .zones
                .iter()
                .map(|z| format!("{}{}", z.camera.as_ref().map(|c| format!("{c}:")).unwrap_or_default(), z.zone.name))
                .collect();
            s += &format!(", zones {}", z.join(", "));
        }
        for part in self.scene.describe() {
            s += &format!(", {part}");
        }
        s
    }

    /// The same options as flags, for a stage's command line.
    pub fn flags(&self) -> Vec<String> {
        let name = zcpipe_core::config::Choice::name(self.tracker);
        let mut v = vec![
            format!("--tracker={name}"),
            format!("--track-confirm={}", self.track_confirm),
            format!("--track-keepalive={}", self.track_keepalive),
            format!("--stationary-after={}", self.stationary_after),
            format!("--stationary-move={}", self.stationary_move),
            format!("--track-high={}", self.track_high),
        ];
        v.extend(self.zones.iter().map(|z| zone_flag(z.camera.as_deref(), &z.zone)));
        v.extend(self.scene.flags());
        v
    }

    /// The `--zone` flags of the zones camera `camera` has (those naming it or no camera),
    /// without the camera: what the display stage showing it draws.
    pub fn zone_flags_of(&self, camera: &str) -> Vec<String> {
        self.zones
            .iter()
            .filter(|z| z.camera.as_deref().is_none_or(|c| c == camera))
            .map(|z| zone_flag(None, &z.zone))
            .collect()
    }

    /// The `--zone`, `--line` and `--mask` flags of camera `camera` ([`TrackArgs::zone_flags_of`],
    /// [`SceneArgs::shape_flags_of`]): everything the display stage showing it draws under
    /// the boxes.
    pub fn display_flags_of(&self, camera: &str) -> Vec<String> {
        let mut v = self.zone_flags_of(camera);
        v.extend(self.scene.shape_flags_of(camera));
        v
    }
}

/// `--zone=[CAMERA:]NAME=x1,y1,...` for `zone` (coordinates as Rust prints an f32: they read
/// back as the same numbers).
pub(crate) fn zone_flag(camera: Option<&str>, zone: &zcpipe_track::Zone) -> String {
    let pts: Vec<String> = zone.points.iter().map(|(x, y)| format!("{x},{y}")).collect();
    format!("--zone={}{}={}", camera.map(|c| format!("{c}:")).unwrap_or_default(), zone.name, pts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        t: TrackArgs,
    }

    #[test]
    fn defaults_flags_and_bad_values() {
        let a = T::parse_from(["t"]).t;
        assert_eq!(a.params(), TrackParams::default());
        let a = T::parse_from([
            "t",
            "--tracker",
            "sort",
            "--zone",
            "front:door=1,2,30,4,5,60.5",
            "--track-keepalive",
            "2.5",
            "--track-confirm",
            "1",
        ])
        .t;
        let back = T::parse_from(std::iter::once("t".to_string()).chain(a.flags())).t;
        assert_eq!(
            (back.params(), back.zones.clone()),
            (a.params(), a.zones.clone()),
            "flags read back the same: {:?}",
            a.flags()
        );
        let c = a.config(&["front".into(), "back".into()]).unwrap();
        assert_eq!((c.zones[0].len(), c.zones[1].len()), (1, 0));
        for bad in [
            &["--tracker", "deepsort"][..],
            &["--zone", "door=1,2,3,4"],
            &["--track-keepalive", "0"],
            &["--stationary-move", "2"],
            &["--track-confirm", "0"],
            &["--track-high", "0.99"],
        ] {
            assert!(T::try_parse_from(std::iter::once(&"t").chain(bad)).is_err(), "{bad:?}");
        }
        let e = T::try_parse_from(["t", "--zone", "door=1,2"]).err().unwrap().to_string();
        assert!(e.contains("1 point(s); a zone needs at least three"), "{e}");
        let e = T::try_parse_from(["t", "--track-keepalive", "-1"]).err().unwrap().to_string();
        assert!(
            e.contains("-1: expected seconds from 0.05 to 3600"),
            "a negative number is a bad value, not a flag: {e}"
        );
        let none = T::parse_from(["t", "--tracker", "none", "--zone", "door=0,0,9,0,9,9"]).t;
        assert!(format!("{:#}", none.config(&["cam0".into()]).unwrap_err()).starts_with("--zone needs a tracker"));
    }
}

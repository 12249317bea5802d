//! What never reaches the tracker: masks (`--mask [CAMERA:]x1,y1,...`, polygons where a
//! detection whose box's bottom centre lies is dropped: the tree that moves, the parked
//! cars) and per-label filters (`--filter [CAMERA:]LABEL:min_area=...,max_area=...,
//! min_score=...,min_ratio=...,max_ratio=...`: a detection of that label outside the limits
//! is dropped). A camera's own filter of a label replaces the one given for every camera.

use anyhow::{bail, Result};

use crate::geom::{polygon_contains, Point, RefPoint, Shape, ShapeRules};

/// The most masks one camera may have.
pub const MAX_MASKS: usize = 64;

pub(crate) const MASK: ShapeRules = ShapeRules {
    flag: "--mask",
    noun: "mask",
    shape: "polygon",
    named: false,
    min_points: 3,
    example: "0,0,300,0,300,120,0,120",
    keys: &[],
};

/// A `--mask` as written: the camera it names (`None`: every camera) and its polygon.
#[derive(Clone, Debug, PartialEq)]
pub struct MaskSpec {
    /// `CAMERA:` before the points, if given.
    pub camera: Option<String>,
    /// The polygon, source pixels.
    pub points: Vec<Point>,
}

impl MaskSpec {
    /// Reads `[CAMERA:]x1,y1,x2,y2,x3,y3[,...]`. Errors: one line, as zones.
    pub fn parse(text: &str) -> Result<MaskSpec> {
        let s = Shape::parse(text, &MASK)?;
        s.check_area(&MASK)?;
        Ok(MaskSpec { camera: s.camera, points: s.points })
    }
}

/// The keys a filter takes.
const KEYS: [&str; 5] = ["min_area", "max_area", "min_score", "min_ratio", "max_ratio"];

/// One label's limits; `None`: no limit.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelFilter {
    /// The label it applies to.
    pub label: String,
    /// The box's area, px².
    pub min_area: Option<f32>,
    /// The box's area, px².
    pub max_area: Option<f32>,
    /// The detection's score.
    pub min_score: Option<f32>,
    /// The box's width over its height.
    pub min_ratio: Option<f32>,
    /// The box's width over its height.
    pub max_ratio: Option<f32>,
}

/// A `--filter` as written.
#[derive(Clone, Debug, PartialEq)]
pub struct FilterSpec {
    /// `CAMERA:` before the label, if given.
    pub camera: Option<String>,
    /// The filter.
    pub filter: LabelFilter,
}

impl FilterSpec {
    /// Reads `[CAMERA:]LABEL:key=value[,key=value...]`. Errors (one line naming the filter
    /// and the fix): no label or no keys, an unknown or repeated key, a value out of its
    /// range, a minimum above its maximum.
    pub fn parse(text: &str) -> Result<FilterSpec> {
        let parts: Vec<&str> = text.splitn(3, ':').collect();
        let (camera, label, keys) = match parts[..] {
            [c, l, k] => (Some(c), l, k),
            [l, k] => (None, l, k),
            _ => bail!("--filter {text}: expected LABEL:key=value,... (e.g. --filter person:min_area=2000,min_score=0.6; CAMERA:LABEL:... for one camera)"),
        };
        if let Some(c) = camera {
            zcpipe_core::config::check_camera_name(c).map_err(|e| anyhow::anyhow!("--filter {text}: {e:#}"))?;
        }
        if label.trim().is_empty() || label.len() > 64 {
            bail!("--filter {text}: no label before the ':' (the model's label, e.g. person)");
        }
        let mut f = LabelFilter { label: label.trim().to_string(), ..LabelFilter::default() };
        let mut seen = vec![];
        for item in keys.split(',') {
            let Some((k, v)) = item.trim().split_once('=') else {
                bail!("--filter {text}: {item:?} is not key=value (keys: {})", KEYS.join(", "));
            };
            if !KEYS.contains(&k) {
                bail!("--filter {text}: unknown key `{k}` (keys: {})", KEYS.join(", "));
            }
            if seen.contains(&k) {
                bail!("--filter {text}: `{k}` is given twice");
            }
            seen.push(k);
            let (lo, hi) = match k {
                "min_score" => (0.0, 1.0),
                "min_ratio" | "max_ratio" => (0.001, 1000.0),
                _ => (0.0, 16384.0 * 16384.0),
            };
            let value = match v.trim().parse::<f32>() {
                Ok(x) if (lo..=hi).contains(&x) => x,
                _ => bail!("--filter {text}: {k}={v}: expected a number from {lo} to {hi}"),
            };
            *match k {
                "min_area" => &mut f.min_area,
                "max_area" => &mut f.max_area,
                "min_score" => &mut f.min_score,
                "min_ratio" => &mut f.min_ratio,
                _ => &mut f.max_ratio,
            } = Some(value);
        }
        if f.max_area == Some(0.0) {
            bail!("--filter {text}: max_area=0: no box has no area, so nothing would pass");
        }
        for (what, lo, hi) in [("area", f.min_area, f.max_area), ("ratio", f.min_ratio, f.max_ratio)] {
            if let (Some(lo), Some(hi)) = (lo, hi) {
                if lo > hi {
                    bail!("--filter {text}: min_{what}={lo} is above max_{what}={hi}; nothing would pass");
                }
            }
        }
        Ok(FilterSpec { camera: camera.map(String::from), filter: f })
    }
}

/// Why a detection was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dropped {
    /// Its reference point lies in a mask.
    Masked,
    /// Its label's filter refused it.
    Filtered,
}

/// One camera's masks and filters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gate {
    /// The masks' polygons.
    pub masks: Vec<Vec<Point>>,
    /// The filters, one per label at most.
    pub filters: Vec<LabelFilter>,
}

impl Gate {
    /// Whether nothing is dropped.
    pub fn is_empty(&self) -> bool {
        self.masks.is_empty() && self.filters.is_empty()
    }

    /// Whether a detection of `label` scoring `score` with box `b` is dropped, and why.
    pub fn judge(&self, label: &str, score: f32, b: &[f32; 4]) -> Option<Dropped> {
        let (x, y) = RefPoint::Bottom.of(b);
        if self.masks.iter().any(|m| polygon_contains(m, x, y)) {
            return Some(Dropped::Masked);
        }
        let f = self.filters.iter().find(|f| f.label == label)?;
        let (w, h) = (b[2] - b[0], b[3] - b[1]);
        let (area, ratio) = (w * h, if h > 0.0 { w / h } else { f32::INFINITY });
        let below = |v: f32, lim: Option<f32>| lim.is_some_and(|l| v < l);
        let above = |v: f32, lim: Option<f32>| lim.is_some_and(|l| v > l);
        (below(area, f.min_area)
            || above(area, f.max_area)
            || below(score, f.min_score)
            || below(ratio, f.min_ratio)
            || above(ratio, f.max_ratio))
        .then_some(Dropped::Filtered)
    }

    /// Leaves out (returned, one line each) the filters of labels not in `labels` (the
    /// model's), for camera `camera`.
    pub fn keep_known_labels(&mut self, camera: &str, labels: &[String]) -> Vec<String> {
        let mut out = vec![];
        self.filters.retain(|f| {
            let known = labels.contains(&f.label);
            if !known {
                let some: Vec<&str> = labels.iter().take(8).map(String::as_str).collect();
                out.push(format!(
                    "--filter {}: camera {camera}'s model has no label {:?} (its labels: {}{}); the filter is left out",
                    f.label,
                    f.label,
                    some.join(", "),
                    if labels.len() > 8 { ", ..." } else { "" }
                ));
            }
            known
        });
        out
    }

    /// Errors (one line) when a mask's point lies outside camera `camera`'s frame.
    pub fn check_inside(&self, camera: &str, width: u32, height: u32) -> Result<()> {
        for m in &self.masks {
            crate::geom::check_inside(m, "--mask", camera, width, height)?;
        }
        Ok(())
    }
}

/// Each camera's gate from the specs: a mask naming a camera goes to it, one naming none to
/// every camera; a filter naming a camera replaces, for it, the one of the same label given
/// for every camera. Errors (one line): a camera not in `cameras`, a label filtered twice
/// for one camera, more than [`MAX_MASKS`] masks.
pub fn per_camera(masks: &[MaskSpec], filters: &[FilterSpec], cameras: &[String]) -> Result<Vec<Gate>> {
    let mut out = vec![Gate::default(); cameras.len()];
    let index = |flag: &str, c: &Option<String>| {
        crate::zone::targets(flag, &format!("{}:...", c.as_deref().unwrap_or_default()), c.as_deref(), cameras)
    };
    for m in masks {
        for i in index("--mask", &m.camera)? {
            if out[i].masks.len() == MAX_MASKS {
                bail!("--mask: camera {} has {MAX_MASKS} masks, the most it may have", cameras[i]);
            }
            out[i].masks.push(m.points.clone());
        }
    }
    // Every camera's filters first, then each camera's own over them.
    let mut own_seen: Vec<(usize, &str)> = vec![];
    for own in [false, true] {
        for f in filters.iter().filter(|f| f.camera.is_some() == own) {
            let label = f.filter.label.as_str();
            for i in index("--filter", &f.camera)? {
                let at = out[i].filters.iter().position(|g| g.label == label);
                match at {
                    Some(k) if own && !own_seen.contains(&(i, label)) => out[i].filters[k] = f.filter.clone(),
                    Some(_) => bail!(
                        "--filter {label}: camera {} already has a filter for {label}; give one filter per label (its keys in one)",
                        cameras[i]
                    ),
                    None => out[i].filters.push(f.filter.clone()),
                }
                if own {
                    own_seen.push((i, label));
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cams() -> Vec<String> {
        vec!["front".into(), "back".into()]
    }

    #[test]
    fn masks_drop_by_the_bottom_centre() {
        let m = MaskSpec::parse("0,0,100,0,100,100,0,100").unwrap();
        let g = &per_camera(&[m], &[], &["cam0".into()]).unwrap()[0];
        // Feet at (50, 90): inside; feet at (50, 150) with the head inside: kept.
        assert_eq!(g.judge("person", 0.9, &[40.0, 10.0, 60.0, 90.0]), Some(Dropped::Masked));
        assert_eq!(g.judge("person", 0.9, &[40.0, 50.0, 60.0, 150.0]), None);
        let e = format!("{:#}", MaskSpec::parse("0,0,5,5,10,10").unwrap_err());
        assert!(e.starts_with("--mask 0,0,5,5,10,10: the polygon encloses no area"), "{e}");
        let e = format!("{:#}", g.check_inside("cam0", 80, 200).unwrap_err());
        assert_eq!(e, "--mask: point (100, 0) is outside camera cam0's 80x200 frame; points are source pixels");
    }

    #[test]
    fn filters_keep_what_is_inside_their_limits() {
        let f =
            FilterSpec::parse("person:min_area=2000,max_area=20000,min_score=0.6,min_ratio=0.2,max_ratio=1").unwrap();
        let g = &per_camera(&[], &[f], &["cam0".into()]).unwrap()[0];
        let b = [0.0, 0.0, 40.0, 100.0]; // 4000 px², ratio 0.4
        assert_eq!(g.judge("person", 0.7, &b), None);
        assert_eq!(g.judge("person", 0.5, &b), Some(Dropped::Filtered), "score");
        assert_eq!(g.judge("person", 0.7, &[0.0, 0.0, 10.0, 100.0]), Some(Dropped::Filtered), "area 1000");
        assert_eq!(g.judge("person", 0.7, &[0.0, 0.0, 150.0, 140.0]), Some(Dropped::Filtered), "area 21000");
        assert_eq!(g.judge("person", 0.7, &[0.0, 0.0, 120.0, 100.0]), Some(Dropped::Filtered), "ratio 1.2");
        assert_eq!(g.judge("car", 0.1, &[0.0, 0.0, 1.0, 1.0]), None, "another label");
    }

    #[test]
    fn a_cameras_own_filter_replaces_the_general_one() {
        let fs: Vec<FilterSpec> = ["car:min_area=5000", "back:car:min_area=100", "front:person:min_score=0.8"]
            .iter()
            .map(|s| FilterSpec::parse(s).unwrap())
            .collect();
        let g = per_camera(&[], &fs, &cams()).unwrap();
        assert_eq!(
            g[0].filters.iter().map(|f| (f.label.as_str(), f.min_area)).collect::<Vec<_>>(),
            [("car", Some(5000.0)), ("person", None)]
        );
        assert_eq!(g[1].filters, [LabelFilter { label: "car".into(), min_area: Some(100.0), ..Default::default() }]);
        let twice: Vec<FilterSpec> =
            ["car:min_area=1", "car:max_area=9"].iter().map(|s| FilterSpec::parse(s).unwrap()).collect();
        assert!(format!("{:#}", per_camera(&[], &twice, &cams()).unwrap_err())
            .contains("camera front already has a filter for car"));
        let side = [FilterSpec::parse("side:car:min_area=1").unwrap()];
        assert!(format!("{:#}", per_camera(&[], &side, &cams()).unwrap_err()).contains("no camera named side"));
    }

    #[test]
    fn bad_filters_are_one_line_each() {
        for (bad, says) in [
            ("person", "expected LABEL:key=value"),
            ("person:min_area", "\"min_area\" is not key=value"),
            ("person:min_size=3", "unknown key `min_size` (keys: min_area, max_area, min_score, min_ratio, max_ratio)"),
            ("person:min_score=2", "min_score=2: expected a number from 0 to 1"),
            ("person:min_area=500,max_area=100", "min_area=500 is above max_area=100; nothing would pass"),
            ("person:min_score=0.5,min_score=0.6", "`min_score` is given twice"),
            (":min_score=0.5", "no label before the ':'"),
        ] {
            let e = format!("{:#}", FilterSpec::parse(bad).unwrap_err());
            assert!(e.starts_with(&format!("--filter {bad}: ")) && e.contains(says) && !e.contains('\n'), "{bad}: {e}");
        }
    }

    #[test]
    fn a_filter_of_a_label_the_model_lacks_is_left_out_with_a_line() {
        let mut g = per_camera(&[], &[FilterSpec::parse("persn:min_score=0.5").unwrap()], &["cam0".into()]).unwrap();
        let said = g[0].keep_known_labels("cam0", &["person".into(), "car".into()]);
        assert_eq!(said, [
            "--filter persn: camera cam0's model has no label \"persn\" (its labels: person, car); the filter is left out"
        ]);
        assert!(g[0].filters.is_empty());
    }
}

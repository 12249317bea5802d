//! Lines: named polylines in a camera's source pixels (`--line
//! [CAMERA:]NAME=x1,y1,x2,y2[,...][,point=bottom|center|top][,band=PX]`), counted when a
//! tracked object crosses them, by direction.
//!
//! Direction: walk along the line from its first point to its last as it is drawn on the
//! screen; `in` is a crossing from the left-hand side to the right-hand side, `out` the
//! other way. A line drawn left to right counts an object moving down the picture as `in`:
//!
//! ```text
//!        out ^
//!   P1 ------|------> P2      (left-hand side above, right-hand side below)
//!            v in
//! ```
//!
//! A track's reference point (its box's bottom centre unless `point=` says otherwise) has a
//! side only when it is farther from the line than the band (`band=PX`; by default 5% of its
//! box's height, at least 2 px): jitter on the line changes nothing. A crossing is counted
//! when the point is out of the band on the other side and the move from where it last was
//! out of the band on the first side crosses the line (an object walking round the line's
//! end changes sides without crossing it). A track that is lost over the line and found on
//! the other side has crossed it; one seen crossing before it was confirmed crosses at its
//! confirmation.

use anyhow::{bail, Result};

use crate::geom::{crosses_polyline, polyline_side, Point, RefPoint, Shape, ShapeRules};

/// The most lines one camera may have.
pub const MAX_LINES: usize = 64;

/// The default band, as a fraction of the track's box height.
pub const BAND_OF_HEIGHT: f32 = 0.05;

/// The smallest default band, pixels.
pub const MIN_BAND: f32 = 2.0;

pub(crate) const RULES: ShapeRules = ShapeRules {
    flag: "--line",
    noun: "line",
    shape: "polyline",
    named: true,
    min_points: 2,
    example: "door=100,300,500,300",
    keys: &["point", "band"],
};

/// A crossing's direction (see the module's documentation): the detections socket's own.
pub use zcpipe_core::schema::Direction;

/// One line.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    /// `[a-z0-9_-]{1,32}`, unique within its camera.
    pub name: String,
    /// Its points, at least two, source pixels.
    pub points: Vec<Point>,
    /// Which point of a box crosses it.
    pub point: RefPoint,
    /// The band, pixels (`None`: [`BAND_OF_HEIGHT`] of the box's height).
    pub band: Option<f32>,
}

/// A `--line` as written: the camera it names (`None`: every camera) and the line.
#[derive(Clone, Debug, PartialEq)]
pub struct LineSpec {
    /// `CAMERA:` before the name, if given.
    pub camera: Option<String>,
    /// The line.
    pub line: Line,
}

impl LineSpec {
    /// Reads a `--line`. Errors (one line naming the line and the fix): as zones, plus
    /// fewer than two points, a polyline whose points are all the same, a bad `point=` or
    /// `band=`.
    pub fn parse(text: &str) -> Result<LineSpec> {
        let s = Shape::parse(text, &RULES)?;
        let point = s.ref_point(&RULES)?;
        let band = match s.options.iter().rev().find(|(k, _)| k == "band") {
            None => None,
            Some((_, v)) => match v.parse::<f32>() {
                Ok(b) if (0.0..=1000.0).contains(&b) => Some(b),
                _ => bail!("--line {}: band={v}: expected pixels from 0 to 1000", s.shown),
            },
        };
        let length: f32 =
            s.points.windows(2).map(|w| ((w[1].0 - w[0].0).powi(2) + (w[1].1 - w[0].1).powi(2)).sqrt()).sum();
        if length < 1.0 {
            bail!("--line {}: the line has no length (its points are the same); give two distinct points", s.shown);
        }
        Ok(LineSpec { camera: s.camera, line: Line { name: s.name, points: s.points, point, band } })
    }
}

/// Where a track stands with one line.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LineState {
    /// `-1` left, `1` right, `0` not known yet.
    side: i8,
    /// Where its point last was out of the band.
    at: Point,
}

impl Line {
    /// The band for a box `b`.
    fn band_for(&self, b: &[f32; 4]) -> f32 {
        self.band.unwrap_or_else(|| (BAND_OF_HEIGHT * (b[3] - b[1])).max(MIN_BAND))
    }

    /// A track whose box is now `b`: updates its `state`; the direction if it crossed.
    pub fn step(&self, state: &mut LineState, b: &[f32; 4]) -> Option<Direction> {
        let p = self.point.of(b);
        let (distance, side) = polyline_side(&self.points, p);
        if distance <= self.band_for(b) || side == 0 {
            return None;
        }
        let before = std::mem::replace(state, LineState { side, at: p });
        if before.side == 0 || before.side == side || !crosses_polyline(&self.points, before.at, p) {
            return None;
        }
        Some(if side > 0 { Direction::In } else { Direction::Out })
    }

    /// Errors (one line) when a point lies outside camera `camera`'s frame.
    pub fn check_inside(&self, camera: &str, width: u32, height: u32) -> Result<()> {
        crate::geom::check_inside(&self.points, &format!("--line {}", self.name), camera, width, height)
    }
}

/// Each camera's lines from the specs (as [`crate::zone::per_camera`] does zones).
pub fn per_camera(specs: &[LineSpec], cameras: &[String]) -> Result<Vec<Vec<Line>>> {
    let named: Vec<(Option<String>, String, Line)> =
        specs.iter().map(|s| (s.camera.clone(), s.line.name.clone(), s.line.clone())).collect();
    crate::zone::spread("--line", "line", named, cameras, MAX_LINES)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str) -> Line {
        LineSpec::parse(text).unwrap().line
    }

    /// A 40x100 box whose bottom centre is at `(x, y)`.
    fn feet(x: f32, y: f32) -> [f32; 4] {
        [x - 20.0, y - 100.0, x + 20.0, y]
    }

    fn walk(l: &Line, path: &[(f32, f32)]) -> Vec<(usize, &'static str)> {
        let mut st = LineState::default();
        path.iter().enumerate().filter_map(|(i, &(x, y))| l.step(&mut st, &feet(x, y)).map(|d| (i, d.name()))).collect()
    }

    #[test]
    fn a_walk_down_across_a_line_drawn_left_to_right_is_in_and_back_up_is_out() {
        let l = line("door=0,200,400,200");
        // Band: 5 px (5% of 100). Down through the line, then back up.
        let path = [(100.0, 150.0), (100.0, 190.0), (100.0, 210.0), (100.0, 250.0), (100.0, 205.0), (100.0, 180.0)];
        assert_eq!(walk(&l, &path), vec![(2, "in"), (5, "out")]);
        // Drawn the other way, the same walk counts the other way.
        assert_eq!(walk(&line("door=400,200,0,200"), &path), vec![(2, "out"), (5, "in")]);
    }

    #[test]
    fn jitter_on_the_line_is_not_a_crossing() {
        let l = line("door=0,200,400,200");
        // Up and down across the line by 4 px, inside the 5 px band, for a while.
        let mut path = vec![(100.0, 150.0)];
        path.extend((0..20).map(|i| (100.0, if i % 2 == 0 { 196.0 } else { 204.0 })));
        path.push((100.0, 150.0));
        assert_eq!(walk(&l, &path), vec![]);
        // With band=0 the same jitter is ten crossings each way.
        let bare = line("door=0,200,400,200,band=0");
        assert_eq!(walk(&bare, &path).len(), 20);
    }

    #[test]
    fn a_point_on_the_line_has_no_side() {
        let l = line("door=0,200,400,200,band=0");
        let path = [(100.0, 150.0), (100.0, 200.0), (100.0, 200.0), (100.0, 150.0)];
        assert_eq!(walk(&l, &path), vec![]);
        let across = [(100.0, 150.0), (100.0, 200.0), (100.0, 260.0)];
        assert_eq!(walk(&l, &across), vec![(2, "in")]);
    }

    #[test]
    fn round_the_end_of_a_line_is_not_a_crossing() {
        let l = line("door=0,200,400,200");
        let path = [(380.0, 150.0), (450.0, 150.0), (450.0, 250.0), (380.0, 250.0)];
        assert_eq!(walk(&l, &path), vec![]);
    }

    #[test]
    fn a_polyline_counts_each_leg() {
        // An L: along the top, then down the right side.
        let l = line("fence=0,100,300,100,300,400");
        assert_eq!(walk(&l, &[(150.0, 50.0), (150.0, 150.0)]), vec![(1, "in")]);
        // Through the downward leg from inside the L (its right: walking down the picture,
        // the right hand points to smaller x) to outside.
        assert_eq!(walk(&l, &[(250.0, 300.0), (350.0, 300.0)]), vec![(1, "out")]);
        // Inside the L the point is on the right of both legs: nearer one, then the other.
        assert_eq!(walk(&l, &[(150.0, 150.0), (250.0, 350.0)]), vec![]);
    }

    #[test]
    fn an_occlusion_across_the_line_is_a_crossing_when_found_again() {
        let l = line("door=0,200,400,200");
        // Seen above, unseen for a while (no steps), found far below.
        assert_eq!(walk(&l, &[(100.0, 120.0), (110.0, 140.0), (160.0, 320.0)]), vec![(2, "in")]);
    }

    #[test]
    fn the_reference_point_is_selectable() {
        let top = line("door=0,200,400,200,point=top");
        // Feet cross at 200 → 260, but the top (feet - 100) stays above the line.
        assert_eq!(walk(&top, &[(100.0, 180.0), (100.0, 260.0)]), vec![]);
        assert_eq!(walk(&top, &[(100.0, 260.0), (100.0, 330.0)]), vec![(1, "in")]);
    }

    #[test]
    fn bad_lines_are_one_line_each() {
        for (bad, says) in [
            ("door=5,5", "1 point(s); a line needs at least two"),
            ("door=5,5,5,5", "the line has no length"),
            ("door=5,5,9,9,band=-1", "band=-1: expected pixels from 0 to 1000"),
            ("door=5,5,9,9,point=feet", "point=feet: expected bottom, center or top"),
        ] {
            let e = format!("{:#}", LineSpec::parse(bad).unwrap_err());
            assert!(e.starts_with(&format!("--line {bad}: ")) && e.contains(says), "{bad}: {e}");
        }
        let l = line("door=0,200,900,200");
        let e = format!("{:#}", l.check_inside("cam0", 768, 432).unwrap_err());
        assert_eq!(e, "--line door: point (900, 200) is outside camera cam0's 768x432 frame; points are source pixels");
    }
}

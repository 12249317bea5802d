//! Ground speed from a calibration (`--calibration [CAMERA:]x1,y1,x2,y2,x3,y3,x4,y4=W,L`):
//! four image points at the corners of a rectangle on the ground, in order round it, whose
//! sides measure `W` metres (from the first point to the second) and `L` metres (from the
//! second to the third). The plane homography that takes those corners to `(0, 0)`, `(W, 0)`,
//! `(W, L)`, `(0, L)` takes any reference point on the ground to metres; a track's speed is
//! the ground distance its bottom centre covered over the last second, in km/h.
//!
//! The homography is the direct linear transform of Hartley and Zisserman ("Multiple View
//! Geometry", 2nd ed., section 4.1) with `h33 = 1`: eight equations for eight unknowns,
//! solved by Gaussian elimination with partial pivoting.

use std::collections::VecDeque;

use anyhow::{bail, Result};

use crate::geom::{cross, Point};

/// Speed is measured over about this long, ns.
pub const WINDOW_NS: u64 = 1_000_000_000;

/// No speed before a track has been seen for this long, ns (a few frames of jitter are not
/// a speed).
pub const MIN_SPAN_NS: u64 = 300_000_000;

/// A `--calibration` as written.
#[derive(Clone, Debug, PartialEq)]
pub struct CalibrationSpec {
    /// `CAMERA:` before the points, if given.
    pub camera: Option<String>,
    /// The rectangle's corners in the picture, in order round it.
    pub points: [Point; 4],
    /// Its sides, metres: first to second point, second to third.
    pub size_m: (f64, f64),
}

impl CalibrationSpec {
    /// Reads `[CAMERA:]x1,y1,x2,y2,x3,y3,x4,y4=WIDTH,LENGTH`. Errors (one line naming the
    /// calibration and the fix): not eight coordinates and two lengths, three points on one
    /// line, corners not in order round the rectangle.
    pub fn parse(text: &str) -> Result<CalibrationSpec> {
        let usage = "expected x1,y1,x2,y2,x3,y3,x4,y4=WIDTH,LENGTH (four corners of a rectangle on the ground, in order, and its sides in metres)";
        let Some((head, size)) = text.split_once('=') else { bail!("--calibration {text}: {usage}") };
        let (camera, coords) = match head.rsplit_once(':') {
            Some((c, rest)) => {
                zcpipe_core::config::check_camera_name(c)
                    .map_err(|e| anyhow::anyhow!("--calibration {text}: {e:#}"))?;
                (Some(c.to_string()), rest)
            }
            None => (None, head),
        };
        let nums: Vec<f32> =
            coords.split(',').filter_map(|v| v.trim().parse().ok()).filter(|v: &f32| v.is_finite()).collect();
        let sides: Vec<f64> = size.split(',').filter_map(|v| v.trim().parse().ok()).collect();
        if nums.len() != 8 || coords.split(',').count() != 8 || sides.len() != 2 || size.split(',').count() != 2 {
            bail!("--calibration {text}: {usage}");
        }
        if !sides.iter().all(|s| (0.01..=10_000.0).contains(s)) {
            bail!("--calibration {text}: the sides must be metres from 0.01 to 10000");
        }
        let p: [Point; 4] = [(nums[0], nums[1]), (nums[2], nums[3]), (nums[4], nums[5]), (nums[6], nums[7])];
        // Each corner turns the same way, and no three points are on one line.
        let turns: Vec<f32> = (0..4).map(|i| cross(p[i], p[(i + 1) % 4], p[(i + 2) % 4])).collect();
        let span = p.iter().map(|a| a.0.abs().max(a.1.abs())).fold(1.0f32, f32::max);
        if turns.iter().any(|t| t.abs() < 1e-3 * span * span) {
            bail!("--calibration {text}: three of the points are on one line (collinear); give the four corners of a rectangle on the ground");
        }
        if !(turns.iter().all(|t| *t > 0.0) || turns.iter().all(|t| *t < 0.0)) {
            bail!("--calibration {text}: the points do not go round the rectangle in order (the outline crosses itself or bends in); give its corners one after the other");
        }
        Ok(CalibrationSpec { camera, points: p, size_m: (sides[0], sides[1]) })
    }

    /// The homography it describes.
    pub fn calibration(&self) -> Calibration {
        let (w, l) = self.size_m;
        let ground = [(0.0, 0.0), (w, 0.0), (w, l), (0.0, l)];
        let mut a = [[0.0f64; 9]; 8];
        for (k, (&(x, y), &(u, v))) in self.points.iter().zip(&ground).enumerate() {
            let (x, y) = (x as f64, y as f64);
            a[2 * k] = [x, y, 1.0, 0.0, 0.0, 0.0, -x * u, -y * u, u];
            a[2 * k + 1] = [0.0, 0.0, 0.0, x, y, 1.0, -x * v, -y * v, v];
        }
        let h = solve(a);
        let mut c = Calibration { h: [h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7], 1.0] };
        // The ground's side of the horizon is where the corners are: there w > 0.
        let (x, y) = (self.points[0].0 as f64, self.points[0].1 as f64);
        if c.h[6] * x + c.h[7] * y + c.h[8] < 0.0 {
            c.h.iter_mut().for_each(|v| *v = -*v);
        }
        c
    }

    /// Errors (one line) when a point lies outside camera `camera`'s frame.
    pub fn check_inside(&self, camera: &str, width: u32, height: u32) -> Result<()> {
        crate::geom::check_inside(&self.points, "--calibration", camera, width, height)
    }
}

/// Solves the 8x8 system whose augmented rows are `a` (Gaussian elimination, partial
/// pivoting). The parser's checks (no three corners on a line) keep it regular.
fn solve(mut a: [[f64; 9]; 8]) -> [f64; 8] {
    for col in 0..8 {
        let pivot = (col..8).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs())).unwrap_or(col);
        a.swap(col, pivot);
        let d = a[col][col];
        if d.abs() < 1e-12 {
            continue;
        }
        let pivot_row = a[col];
        for (row, r) in a.iter_mut().enumerate() {
            if row != col {
                let f = r[col] / d;
                for (x, p) in r.iter_mut().zip(pivot_row).skip(col) {
                    *x -= f * p;
                }
            }
        }
    }
    std::array::from_fn(|i| if a[i][i].abs() < 1e-12 { 0.0 } else { a[i][8] / a[i][i] })
}

/// Image to ground: a plane homography, row-major, `h33 = 1`.
#[derive(Clone, Debug, PartialEq)]
pub struct Calibration {
    h: [f64; 9],
}

impl Calibration {
    /// The ground point of image point `p`, metres; `None` above the horizon.
    pub fn ground(&self, p: Point) -> Option<(f64, f64)> {
        let (x, y) = (p.0 as f64, p.1 as f64);
        let h = &self.h;
        let w = h[6] * x + h[7] * y + h[8];
        (w > 1e-9).then(|| ((h[0] * x + h[1] * y + h[2]) / w, (h[3] * x + h[4] * y + h[5]) / w))
    }
}

/// A track's ground positions over the last [`WINDOW_NS`].
#[derive(Clone, Debug, Default)]
pub struct Odometer {
    seen: VecDeque<(u64, f64, f64)>,
}

impl Odometer {
    /// Its point at `t_ns` is `g` (metres); returns its speed now, km/h (`None` until it has
    /// been seen over [`MIN_SPAN_NS`]).
    pub fn update(&mut self, t_ns: u64, g: (f64, f64)) -> Option<f32> {
        self.seen.push_back((t_ns, g.0, g.1));
        while self.seen.len() > 2 && self.seen.get(1).is_some_and(|s| t_ns.saturating_sub(s.0) >= WINDOW_NS) {
            self.seen.pop_front();
        }
        let &(t0, x0, y0) = self.seen.front()?;
        let dt = t_ns.saturating_sub(t0);
        (dt >= MIN_SPAN_NS).then(|| ((g.0 - x0).hypot(g.1 - y0) / (dt as f64 / 1e9) * 3.6) as f32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: (f64, f64), b: (f64, f64)) -> bool {
        (a.0 - b.0).abs() < 1e-6 && (a.1 - b.1).abs() < 1e-6
    }

    #[test]
    fn corners_go_to_the_rectangle_and_the_diagonals_meet_at_its_centre() {
        // A road seen in perspective: 4 m wide, 20 m long; near edge at the bottom.
        let c = CalibrationSpec::parse("300,200,500,200,700,400,100,400=4,20").unwrap().calibration();
        for (p, g) in [
            ((300.0, 200.0), (0.0, 0.0)),
            ((500.0, 200.0), (4.0, 0.0)),
            ((700.0, 400.0), (4.0, 20.0)),
            ((100.0, 400.0), (0.0, 20.0)),
        ] {
            assert!(close(c.ground(p).unwrap(), g), "{p:?}: {:?}", c.ground(p));
        }
        // The diagonals of the picture's trapezoid meet at (400, 250): the rectangle's centre.
        assert!(close(c.ground((400.0, 250.0)).unwrap(), (2.0, 10.0)));
        // Above the horizon there is no ground.
        assert_eq!(c.ground((400.0, 0.0)), None);
    }

    #[test]
    fn speed_over_the_last_second() {
        // A top-down camera: 100 px = 1 m.
        let c = CalibrationSpec::parse("cam0:0,0,100,0,100,100,0,100=1,1").unwrap();
        assert_eq!(c.camera.as_deref(), Some("cam0"));
        let c = c.calibration();
        let mut o = Odometer::default();
        let mut last = None;
        // 1.5 m/s (5.4 km/h): 15 px a frame at 10 fps.
        for f in 0..30u64 {
            last = o.update(f * 100_000_000, c.ground((15.0 * f as f32, 50.0)).unwrap());
            if f < 3 {
                assert_eq!(last, None, "frame {f}");
            }
        }
        assert!((last.unwrap() - 5.4).abs() < 1e-3, "{last:?}");
    }

    #[test]
    fn bad_calibrations_are_one_line_each() {
        for (bad, says) in [
            ("0,0,10,0,10,10=4,20", "expected x1,y1"),
            ("0,0,10,0,10,10,0,10", "expected x1,y1"),
            ("0,0,10,0,10,10,0,10=4", "expected x1,y1"),
            ("0,0,10,0,10,10,0,10=0,5", "the sides must be metres"),
            ("0,0,10,0,20,0,0,10=4,20", "three of the points are on one line (collinear)"),
            ("0,0,10,10,10,0,0,10=4,20", "do not go round the rectangle in order"),
        ] {
            let e = format!("{:#}", CalibrationSpec::parse(bad).unwrap_err());
            assert!(e.starts_with(&format!("--calibration {bad}: ")) && e.contains(says), "{bad}: {e}");
        }
    }
}

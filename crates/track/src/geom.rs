//! Plane geometry in a camera's source pixels, shared by zones, lines and masks: where a
//! box's reference point is, whether a point is inside a polygon, how far it is from a
//! polyline and on which side, whether a move crosses it; and the one parser of their
//! `[CAMERA:]NAME=x1,y1,...` flags.

use anyhow::{bail, Result};

/// A point, source pixels.
pub type Point = (f32, f32);

/// The largest coordinate a zone, line or mask may have, pixels (the largest frame side
/// zcpipe takes).
pub const MAX_COORD: f32 = 16384.0;

/// The most points a polygon or polyline may have: one drawn by hand has tens, and every
/// track of every frame is tested against it.
pub const MAX_POINTS: usize = 1000;

/// Which point of a box stands for the object (a zone's, a line's or a mask's test).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RefPoint {
    /// The bottom centre, `((x1 + x2) / 2, y2)`: where a standing person's feet are.
    #[default]
    Bottom,
    /// The box's centre (a camera looking straight down).
    Center,
    /// The top centre, `((x1 + x2) / 2, y1)`.
    Top,
}

impl RefPoint {
    /// The point of box `b` (`[x1, y1, x2, y2]`).
    pub fn of(self, b: &[f32; 4]) -> Point {
        let x = (b[0] + b[2]) / 2.0;
        match self {
            RefPoint::Bottom => (x, b[3]),
            RefPoint::Center => (x, (b[1] + b[3]) / 2.0),
            RefPoint::Top => (x, b[1]),
        }
    }

    /// Its name in a flag: `bottom`, `center`, `top`.
    pub fn name(self) -> &'static str {
        match self {
            RefPoint::Bottom => "bottom",
            RefPoint::Center => "center",
            RefPoint::Top => "top",
        }
    }

    fn parse(s: &str) -> Option<RefPoint> {
        [RefPoint::Bottom, RefPoint::Center, RefPoint::Top].into_iter().find(|p| p.name() == s)
    }
}

/// Whether `(x, y)` is inside the polygon `points` (even-odd rule) or on an edge (within
/// 0.01 px): a box clamped to the frame's bottom row has its feet on the edge of a zone
/// drawn to it.
pub fn polygon_contains(points: &[Point], x: f32, y: f32) -> bool {
    let n = points.len();
    if (0..n).any(|i| segment_distance2(points[i], points[(i + 1) % n], (x, y)) <= 1e-4) {
        return true;
    }
    let mut inside = false;
    for i in 0..n {
        let (xi, yi) = points[i];
        let (xj, yj) = points[(i + n - 1) % n];
        if (yi > y) != (yj > y) && x < (xj - xi) * (y - yi) / (yj - yi) + xi {
            inside = !inside;
        }
    }
    inside
}

/// The squared distance from `p` to the segment `a`-`b`.
fn segment_distance2(a: Point, b: Point, p: Point) -> f32 {
    let (dx, dy) = (b.0 - a.0, b.1 - a.1);
    let len2 = dx * dx + dy * dy;
    let t = if len2 > 0.0 { (((p.0 - a.0) * dx + (p.1 - a.1) * dy) / len2).clamp(0.0, 1.0) } else { 0.0 };
    let (qx, qy) = (a.0 + t * dx - p.0, a.1 + t * dy - p.1);
    qx * qx + qy * qy
}

/// How far `p` is from the outline of polygon `points` (its closed edges).
pub fn polygon_distance(points: &[Point], p: Point) -> f32 {
    let n = points.len();
    (0..n).map(|i| segment_distance2(points[i], points[(i + 1) % n], p)).fold(f32::INFINITY, f32::min).sqrt()
}

/// `(b - a) x (p - a)`: positive when `p` is on the right of `a`->`b` as seen on screen
/// (image y grows downward), negative on its left, 0 on its line.
pub fn cross(a: Point, b: Point, p: Point) -> f32 {
    (b.0 - a.0) * (p.1 - a.1) - (b.1 - a.1) * (p.0 - a.0)
}

/// How far `p` is from the polyline `points`, and on which side of its nearest segment:
/// `1` right, `-1` left, `0` on it.
pub fn polyline_side(points: &[Point], p: Point) -> (f32, i8) {
    let mut best = (f32::INFINITY, 0i8);
    for w in points.windows(2) {
        let d2 = segment_distance2(w[0], w[1], p);
        if d2 < best.0 {
            let c = cross(w[0], w[1], p);
            best = (
                d2,
                if c > 0.0 {
                    1
                } else if c < 0.0 {
                    -1
                } else {
                    0
                },
            );
        }
    }
    (best.0.sqrt(), best.1)
}

/// Whether the move from `a` to `b` crosses the polyline `points` (touching counts).
pub fn crosses_polyline(points: &[Point], a: Point, b: Point) -> bool {
    points.windows(2).any(|w| segments_meet(w[0], w[1], a, b))
}

/// Whether segments `p1`-`p2` and `q1`-`q2` have a point in common.
fn segments_meet(p1: Point, p2: Point, q1: Point, q2: Point) -> bool {
    let (d1, d2) = (cross(q1, q2, p1), cross(q1, q2, p2));
    let (d3, d4) = (cross(p1, p2, q1), cross(p1, p2, q2));
    if ((d1 > 0.0 && d2 < 0.0) || (d1 < 0.0 && d2 > 0.0)) && ((d3 > 0.0 && d4 < 0.0) || (d3 < 0.0 && d4 > 0.0)) {
        return true;
    }
    let on = |a: Point, b: Point, p: Point| segment_distance2(a, b, p) <= 1e-6;
    on(q1, q2, p1) || on(q1, q2, p2) || on(p1, p2, q1) || on(p1, p2, q2)
}

/// Twice the signed area of polygon `points` (the shoelace formula).
pub fn area2(points: &[Point]) -> f32 {
    (0..points.len())
        .map(|i| {
            let ((ax, ay), (bx, by)) = (points[i], points[(i + 1) % points.len()]);
            ax * by - bx * ay
        })
        .sum()
}

/// A flag's value as written: `[CAMERA:]NAME=x1,y1,...[,key=value...]` (or, without a
/// name, `[CAMERA:]x1,y1,...`).
#[derive(Clone, Debug, PartialEq)]
pub struct Shape {
    /// `CAMERA:` before the name, if given.
    pub camera: Option<String>,
    /// The name (empty for an unnamed shape).
    pub name: String,
    /// The points.
    pub points: Vec<Point>,
    /// `key=value` items after the points, in order.
    pub options: Vec<(String, String)>,
    /// How the value is named in messages: as written, or its head when it is long.
    pub shown: String,
}

/// How a [`Shape`] is read: the flag it comes from, whether it is named, its fewest
/// points, and the keys it may carry after them.
pub struct ShapeRules {
    /// `--zone`, `--line`, `--mask`.
    pub flag: &'static str,
    /// `zone`, `line`, `mask`, in messages.
    pub noun: &'static str,
    /// `polygon` or `polyline`, in messages.
    pub shape: &'static str,
    /// `NAME=` before the points.
    pub named: bool,
    /// Fewest points.
    pub min_points: usize,
    /// What a correct value looks like, for the messages.
    pub example: &'static str,
    /// Keys allowed after the points.
    pub keys: &'static [&'static str],
}

/// Checks a name: `[a-z0-9_-]{1,32}` (it becomes a JSON key, a metric label and an MQTT
/// topic level).
pub fn check_name(name: &str, rules: &ShapeRules, shown: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > 32
        || !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    {
        bail!(
            "{} {shown}: the {} name {name:?} must be 1 to 32 of a-z, 0-9, '_' and '-' (e.g. {} {})",
            rules.flag,
            rules.noun,
            rules.flag,
            rules.example
        );
    }
    Ok(())
}

impl Shape {
    /// Reads `text` by `rules`. Errors (one line naming the flag, the value and the fix):
    /// too many points (counted before anything is allocated), a bad camera or name, a
    /// number that is not a pixel coordinate, an odd count, too few points, an unknown key.
    pub fn parse(text: &str, rules: &ShapeRules) -> Result<Shape> {
        let flag = rules.flag;
        let shown = match (rules.named, text.split_once('='), text.split_once(',')) {
            (true, Some((head, _)), _) if text.len() > 120 => format!("{head}=... ({} bytes)", text.len()),
            (false, _, Some((head, _))) if text.len() > 120 => format!("{head},... ({} bytes)", text.len()),
            _ => text.to_string(),
        };
        let numbers = text.bytes().filter(|&b| b == b',').count() + 1;
        if numbers > 2 * MAX_POINTS + rules.keys.len() {
            bail!(
                "{flag} {shown}: {} points; a {} has at most {MAX_POINTS} (simplify the {})",
                numbers / 2,
                rules.noun,
                rules.shape
            );
        }
        let (head, coords) = if rules.named {
            match text.split_once('=') {
                Some(hc) => hc,
                None => bail!(
                    "{flag} {shown}: expected NAME=x1,y1,x2,y2,... (source pixels, e.g. {flag} {}; CAMERA:NAME=... for one camera of several)",
                    rules.example
                ),
            }
        } else {
            match text.rsplit_once(':') {
                Some((cam, rest)) => (cam, rest),
                None => ("", text),
            }
        };
        let (camera, name) = if rules.named {
            match head.split_once(':') {
                Some((c, n)) => (Some(c), n),
                None => (None, head),
            }
        } else {
            ((!head.is_empty()).then_some(head), "")
        };
        if let Some(c) = camera {
            zcpipe_core::config::check_camera_name(c).map_err(|e| anyhow::anyhow!("{flag} {shown}: {e:#}"))?;
        }
        if rules.named {
            check_name(name, rules, &shown)?;
        }
        let mut nums = vec![];
        let mut options = vec![];
        for item in coords.split(',') {
            let item = item.trim();
            if let Some((k, v)) = item.split_once('=') {
                if options.iter().any(|(o, _): &(String, String)| o == k) {
                    bail!("{flag} {shown}: `{k}` is given twice");
                }
                if !rules.keys.contains(&k) {
                    let keys = if rules.keys.is_empty() { "none".to_string() } else { rules.keys.join(", ") };
                    bail!("{flag} {shown}: unknown key `{k}` (keys after the points: {keys})");
                }
                options.push((k.to_string(), v.to_string()));
                continue;
            }
            if !options.is_empty() {
                bail!("{flag} {shown}: {item:?} after the keys; the points come first");
            }
            match item.parse::<f32>() {
                Ok(v) if (0.0..=MAX_COORD).contains(&v) => nums.push(v),
                _ => bail!("{flag} {shown}: {item:?} is not a pixel coordinate (a number from 0 to {MAX_COORD})"),
            }
        }
        if !nums.len().is_multiple_of(2) {
            bail!("{flag} {shown}: {} numbers; a {} is x,y pairs", nums.len(), rules.noun);
        }
        if nums.len() < 2 * rules.min_points {
            let least = ["none", "one", "two", "three"].get(rules.min_points).copied().unwrap_or("more");
            bail!(
                "{flag} {shown}: {} point(s); a {} needs at least {least} ({})",
                nums.len() / 2,
                rules.noun,
                rules.example
            );
        }
        let points = nums.chunks(2).map(|p| (p[0], p[1])).collect();
        Ok(Shape { camera: camera.map(String::from), name: name.to_string(), points, options, shown })
    }

    /// Refuses a polygon that encloses no area.
    pub fn check_area(&self, rules: &ShapeRules) -> Result<()> {
        if area2(&self.points).abs() < 1.0 {
            bail!(
                "{} {}: the polygon encloses no area (its points are on one line or the same); give its corners in order",
                rules.flag,
                self.shown
            );
        }
        Ok(())
    }

    /// The `point=` option: [`RefPoint`] (default bottom).
    pub fn ref_point(&self, rules: &ShapeRules) -> Result<RefPoint> {
        match self.options.iter().rev().find(|(k, _)| k == "point") {
            None => Ok(RefPoint::Bottom),
            Some((_, v)) => RefPoint::parse(v).ok_or_else(|| {
                anyhow::anyhow!("{} {}: point={v}: expected bottom, center or top", rules.flag, self.shown)
            }),
        }
    }
}

/// An error (one line) when a point of `points` lies outside camera `camera`'s `width` x
/// `height` frame; `what` names the item (`--zone door`).
pub fn check_inside(points: &[Point], what: &str, camera: &str, width: u32, height: u32) -> Result<()> {
    if let Some(&(x, y)) = points.iter().find(|&&(x, y)| x > width as f32 || y > height as f32) {
        bail!("{what}: point ({x}, {y}) is outside camera {camera}'s {width}x{height} frame; points are source pixels");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sides_distances_and_crossings() {
        // A horizontal line drawn left to right: below it (y larger) is its right.
        let line = [(0.0, 100.0), (200.0, 100.0)];
        assert_eq!(polyline_side(&line, (50.0, 130.0)), (30.0, 1));
        assert_eq!(polyline_side(&line, (50.0, 90.0)), (10.0, -1));
        assert_eq!(polyline_side(&line, (50.0, 100.0)), (0.0, 0));
        // Beyond its end: the distance is to the end point.
        assert_eq!(polyline_side(&line, (203.0, 104.0)).0, 5.0);
        assert!(crosses_polyline(&line, (50.0, 90.0), (60.0, 110.0)));
        assert!(!crosses_polyline(&line, (250.0, 90.0), (260.0, 110.0)), "around its end");
        assert!(crosses_polyline(&line, (50.0, 90.0), (50.0, 100.0)), "touching");
        // A polyline with a bend: the nearest segment decides.
        let bent = [(0.0, 0.0), (100.0, 0.0), (100.0, 100.0)];
        // Walking down the picture, the right hand points to smaller x.
        assert_eq!(polyline_side(&bent, (90.0, 50.0)).1, 1, "right of the downward leg");
        assert_eq!(polyline_side(&bent, (50.0, -10.0)).1, -1, "left of the first leg");
        assert!(crosses_polyline(&bent, (90.0, 50.0), (110.0, 50.0)));
    }

    #[test]
    fn reference_points_of_a_box() {
        let b = [10.0, 20.0, 30.0, 60.0];
        assert_eq!(RefPoint::Bottom.of(&b), (20.0, 60.0));
        assert_eq!(RefPoint::Center.of(&b), (20.0, 40.0));
        assert_eq!(RefPoint::Top.of(&b), (20.0, 20.0));
    }

    // The flags' own rules.
    use crate::filter::MASK;
    use crate::line::RULES as LINE;

    #[test]
    fn shapes_parse_with_their_keys_and_refuse_in_one_line() {
        let s = Shape::parse("front:door=1,2,3,4,point=center,band=5", &LINE).unwrap();
        assert_eq!((s.camera.as_deref(), s.name.as_str(), s.points.len()), (Some("front"), "door", 2));
        assert_eq!(s.ref_point(&LINE).unwrap(), RefPoint::Center);
        assert_eq!(s.options[1], ("band".to_string(), "5".to_string()));
        let m = Shape::parse("yard:0,0,10,0,10,10", &MASK).unwrap();
        assert_eq!((m.camera.as_deref(), m.points.len()), (Some("yard"), 3));
        assert_eq!(Shape::parse("0,0,10,0,10,10", &MASK).unwrap().camera, None);
        for (rules, bad, says) in [
            (&LINE, "door=1,2", "1 point(s); a line needs at least two"),
            (&LINE, "door=1,2,3,4,color=red", "unknown key `color` (keys after the points: point, band)"),
            (&LINE, "door=1,2,point=top,3,4", "after the keys"),
            (&LINE, "Door=1,2,3,4", "the line name \"Door\" must be"),
            (&LINE, "door", "expected NAME=x1,y1,x2,y2,... (source pixels, e.g. --line door=100,300,500,300;"),
            (&MASK, "0,0,10,0,10", "5 numbers; a mask is x,y pairs"),
            (&MASK, "0,0,10,0,10,x", "\"x\" is not a pixel coordinate"),
            (&MASK, "0,0,10,0,10,10,point=top", "unknown key `point` (keys after the points: none)"),
        ] {
            let e = format!("{:#}", Shape::parse(bad, rules).unwrap_err());
            assert!(e.contains(says) && !e.contains('\n'), "{bad}: {e}");
        }
        let e = format!("{:#}", Shape::parse("door=1,2,3,4,point=left", &LINE).unwrap().ref_point(&LINE).unwrap_err());
        assert_eq!(e, "--line door=1,2,3,4,point=left: point=left: expected bottom, center or top");
    }
}

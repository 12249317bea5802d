//! Zones: named polygons in a camera's source pixels (`--zone [CAMERA:]NAME=x1,y1,x2,y2,...`).
//!
//! A tracked object is in a zone when its box's bottom centre, `((x1 + x2) / 2, y2)`, is
//! inside the polygon (where a standing person's feet are, as people counted at a door
//! are). Inside is the even-odd rule; a point on an edge is inside.

use anyhow::{bail, Result};

/// The most zones one camera may have (a track keeps the zones it is in as a bit set).
pub(crate) const MAX_ZONES: usize = 64;

/// The largest coordinate a zone may have, pixels (the largest frame side zcpipe takes).
pub(crate) const MAX_COORD: f32 = 16384.0;

/// One zone: its name and its polygon, vertices in order, source pixels.
#[derive(Clone, Debug, PartialEq)]
pub struct Zone {
    /// `[a-z0-9_-]{1,32}`, unique within its camera.
    pub name: String,
    /// The vertices `(x, y)`, pixels, at least three.
    pub points: Vec<(f32, f32)>,
}

/// A `--zone` as written: the camera it names (`None`: the only camera, or every camera),
/// and the zone.
#[derive(Clone, Debug, PartialEq)]
pub struct ZoneSpec {
    /// `CAMERA:` before the name, if given.
    pub camera: Option<String>,
    /// The zone.
    pub zone: Zone,
}

/// Checks a zone's name: `[a-z0-9_-]{1,32}` (it becomes a JSON key and, later, an MQTT topic).
fn check_name(name: &str, text: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > 32
        || !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    {
        bail!("--zone {text}: the zone name {name:?} must be 1 to 32 of a-z, 0-9, '_' and '-' (e.g. --zone door=100,200,400,200,400,430,100,430)");
    }
    Ok(())
}

/// The most points a zone may have: a polygon drawn by hand has tens, and every track of
/// every frame is tested against it.
const MAX_POINTS: usize = 1000;

/// Whether `text` holds at most [`MAX_POINTS`] pairs of numbers, counted before anything is
/// parsed or allocated; else one line naming the zone (`shown`).
fn check_points(text: &str, shown: &str) -> Result<()> {
    let numbers = text.bytes().filter(|&b| b == b',').count() + 1;
    if numbers > 2 * MAX_POINTS {
        bail!("--zone {shown}: {} points; a zone has at most {MAX_POINTS} (simplify the polygon)", numbers / 2);
    }
    Ok(())
}

impl ZoneSpec {
    /// Reads `[CAMERA:]NAME=x1,y1,x2,y2,x3,y3[,...]`. Errors (one line naming the flag and
    /// the fix): no `=`, a bad name, an odd count of numbers, fewer than three points, a
    /// number that is not a finite, non-negative pixel coordinate.
    pub fn parse(text: &str) -> Result<ZoneSpec> {
        // A long zone is named by its head in messages, not quoted whole.
        let shown = match text.split_once('=') {
            Some((head, _)) if text.len() > 120 => format!("{head}=... ({} bytes)", text.len()),
            _ => text.to_string(),
        };
        check_points(text, &shown)?;
        let Some((head, coords)) = text.split_once('=') else {
            bail!("--zone {shown}: expected NAME=x1,y1,x2,y2,x3,y3,... (source pixels; CAMERA:NAME=... for one camera of several)");
        };
        let (camera, name) = match head.split_once(':') {
            Some((c, n)) => {
                zcpipe_core::config::check_camera_name(c).map_err(|e| anyhow::anyhow!("--zone {shown}: {e:#}"))?;
                (Some(c.to_string()), n)
            }
            None => (None, head),
        };
        check_name(name, &shown)?;
        let nums: Vec<f32> = coords
            .split(',')
            .map(|s| match s.trim().parse::<f32>() {
                Ok(v) if (0.0..=MAX_COORD).contains(&v) => Ok(v),
                _ => bail!("--zone {shown}: {s:?} is not a pixel coordinate (a number from 0 to {MAX_COORD})"),
            })
            .collect::<Result<_>>()?;
        if !nums.len().is_multiple_of(2) {
            bail!("--zone {shown}: {} numbers; a zone is x,y pairs", nums.len());
        }
        if nums.len() < 6 {
            bail!("--zone {shown}: {} point(s); a zone needs at least three (x1,y1,x2,y2,x3,y3)", nums.len() / 2);
        }
        let points: Vec<(f32, f32)> = nums.chunks(2).map(|p| (p[0], p[1])).collect();
        // Twice the signed area (the shoelace formula): a zone must enclose something.
        let area2: f32 = (0..points.len())
            .map(|i| {
                let ((ax, ay), (bx, by)) = (points[i], points[(i + 1) % points.len()]);
                ax * by - bx * ay
            })
            .sum();
        if area2.abs() < 1.0 {
            bail!("--zone {shown}: the polygon encloses no area (its points are on one line or the same); give its corners in order");
        }
        Ok(ZoneSpec { camera, zone: Zone { name: name.to_string(), points } })
    }
}

/// Each camera's zones from the `--zone` specs: a spec naming a camera goes to it; one
/// naming none goes to every camera. Errors: a camera not in `cameras`, a zone named
/// twice for one camera, more than [`MAX_ZONES`] for one camera.
pub fn per_camera(specs: &[ZoneSpec], cameras: &[String]) -> Result<Vec<Vec<Zone>>> {
    let mut out: Vec<Vec<Zone>> = vec![vec![]; cameras.len()];
    for s in specs {
        let targets: Vec<usize> = match &s.camera {
            Some(c) => match cameras.iter().position(|n| n == c) {
                Some(i) => vec![i],
                None => bail!("--zone {c}:{}: no camera named {c} (cameras: {})", s.zone.name, cameras.join(", ")),
            },
            None => (0..cameras.len()).collect(),
        };
        for i in targets {
            if out[i].iter().any(|z| z.name == s.zone.name) {
                bail!(
                    "--zone {}: camera {} already has a zone named {}; give each zone its own name",
                    s.zone.name,
                    cameras[i],
                    s.zone.name
                );
            }
            if out[i].len() == MAX_ZONES {
                bail!("--zone {}: camera {} has {MAX_ZONES} zones, the most it may have", s.zone.name, cameras[i]);
            }
            out[i].push(s.zone.clone());
        }
    }
    Ok(out)
}

impl Zone {
    /// Whether `(x, y)` is inside (even-odd rule) or on an edge (within 0.01 px): a box
    /// clamped to the frame's bottom row has its feet on the edge of a zone drawn to it.
    pub fn contains(&self, x: f32, y: f32) -> bool {
        let n = self.points.len();
        let on_edge = (0..n).any(|i| {
            let ((ax, ay), (bx, by)) = (self.points[i], self.points[(i + 1) % n]);
            let (dx, dy) = (bx - ax, by - ay);
            let len2 = dx * dx + dy * dy;
            let t = if len2 > 0.0 { (((x - ax) * dx + (y - ay) * dy) / len2).clamp(0.0, 1.0) } else { 0.0 };
            let (px, py) = (ax + t * dx - x, ay + t * dy - y);
            px * px + py * py <= 1e-4
        });
        if on_edge {
            return true;
        }
        let mut inside = false;
        for i in 0..n {
            let (xi, yi) = self.points[i];
            let (xj, yj) = self.points[(i + n - 1) % n];
            if (yi > y) != (yj > y) && x < (xj - xi) * (y - yi) / (yj - yi) + xi {
                inside = !inside;
            }
        }
        inside
    }

    /// Errors (one line) when a vertex lies outside a `width` x `height` frame of camera
    /// `camera`: x must be <= width and y <= height.
    pub fn check_inside(&self, camera: &str, width: u32, height: u32) -> Result<()> {
        if let Some(&(x, y)) = self.points.iter().find(|&&(x, y)| x > width as f32 || y > height as f32) {
            bail!("--zone {}: point ({x}, {y}) is outside camera {camera}'s {width}x{height} frame; zone points are source pixels", self.name);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses_with_one_line() {
        let z = ZoneSpec::parse("door=100,200,400,200,400,430").unwrap();
        assert_eq!(
            z,
            ZoneSpec {
                camera: None,
                zone: Zone { name: "door".into(), points: vec![(100.0, 200.0), (400.0, 200.0), (400.0, 430.0)] }
            }
        );
        assert_eq!(ZoneSpec::parse("front:door=0,0,1,0,1,1").unwrap().camera.as_deref(), Some("front"));
        for (bad, says) in [
            ("door", "expected NAME=x1,y1"),
            ("door=1,2,3,4", "2 point(s); a zone needs at least three"),
            ("door=1,2,3,4,5", "5 numbers; a zone is x,y pairs"),
            ("door=1,2,3,x,5,6", "\"x\" is not a pixel coordinate"),
            ("door=1,2,3,-4,5,6", "\"-4\" is not a pixel coordinate"),
            ("door=1,2,3,1e39,5,6", "\"1e39\" is not a pixel coordinate (a number from 0 to 16384)"),
            ("door=0,0,0,0,0,0", "encloses no area"),
            ("door=0,0,5,5,10,10", "encloses no area"),
            ("Door=1,2,3,4,5,6", "zone name \"Door\" must be"),
            ("=1,2,3,4,5,6", "zone name \"\" must be"),
            ("My Cam:door=1,2,3,4,5,6", "--zone My Cam:door=1,2,3,4,5,6:"),
        ] {
            let e = format!("{:#}", ZoneSpec::parse(bad).unwrap_err());
            assert!(e.contains(says) && !e.contains('\n'), "{bad}: {e}");
        }
    }

    #[test]
    fn a_zone_of_too_many_points_is_one_short_line() {
        let coords: Vec<String> = (0..10_000).map(|i| format!("{},{}", i % 100, i / 100)).collect();
        let e = ZoneSpec::parse(&format!("cam0:door={}", coords.join(","))).unwrap_err().to_string();
        assert!(e.starts_with("--zone cam0:door=... ("), "{e}");
        assert!(e.ends_with(": 10000 points; a zone has at most 1000 (simplify the polygon)"), "{e}");
        assert!(e.len() < 160, "{e}");
        let square = [(0, 0), (999, 0), (999, 999), (0, 999)];
        let ok: Vec<String> =
            (0..MAX_POINTS).map(|i| format!("{},{}", square[i % 4].0, square[i % 4].1 + i / 4)).collect();
        assert!(ZoneSpec::parse(&format!("z={}", ok.join(","))).is_ok());
    }

    #[test]
    fn zones_go_to_their_cameras_once() {
        let cams = vec!["front".to_string(), "back".to_string()];
        let specs: Vec<ZoneSpec> =
            ["door=0,0,9,0,9,9", "front:gate=0,0,5,0,5,5"].iter().map(|s| ZoneSpec::parse(s).unwrap()).collect();
        let z = per_camera(&specs, &cams).unwrap();
        assert_eq!(z[0].iter().map(|z| z.name.as_str()).collect::<Vec<_>>(), ["door", "gate"]);
        assert_eq!(z[1].iter().map(|z| z.name.as_str()).collect::<Vec<_>>(), ["door"]);
        let twice: Vec<ZoneSpec> =
            ["door=0,0,9,0,9,9", "front:door=0,0,5,0,5,5"].iter().map(|s| ZoneSpec::parse(s).unwrap()).collect();
        assert!(format!("{:#}", per_camera(&twice, &cams).unwrap_err())
            .contains("camera front already has a zone named door"));
        let unknown = [ZoneSpec::parse("side:door=0,0,9,0,9,9").unwrap()];
        assert!(format!("{:#}", per_camera(&unknown, &cams).unwrap_err())
            .contains("no camera named side (cameras: front, back)"));
    }

    #[test]
    fn inside_is_the_even_odd_rule_and_points_must_be_in_the_frame() {
        // An L shape: the notch is outside.
        let l = Zone {
            name: "l".into(),
            points: vec![(0.0, 0.0), (10.0, 0.0), (10.0, 4.0), (4.0, 4.0), (4.0, 10.0), (0.0, 10.0)],
        };
        assert!(l.contains(2.0, 2.0) && l.contains(8.0, 2.0) && l.contains(2.0, 8.0));
        assert!(!l.contains(8.0, 8.0) && !l.contains(-1.0, 2.0) && !l.contains(2.0, 11.0));
        // Edges and corners are inside: feet clamped to the frame's last row are in a zone drawn to it.
        assert!(
            l.contains(2.0, 10.0)
                && l.contains(10.0, 2.0)
                && l.contains(0.0, 0.0)
                && l.contains(4.0, 7.0)
                && l.contains(7.0, 4.0)
        );
        assert!(l.check_inside("cam0", 10, 10).is_ok());
        let e = format!("{:#}", l.check_inside("cam0", 8, 10).unwrap_err());
        assert_eq!(e, "--zone l: point (10, 0) is outside camera cam0's 8x10 frame; zone points are source pixels");
    }
}

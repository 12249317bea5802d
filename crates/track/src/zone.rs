//! Zones: named polygons in a camera's source pixels (`--zone [CAMERA:]NAME=x1,y1,x2,y2,...`).
//!
//! A tracked object is in a zone when its box's bottom centre, `((x1 + x2) / 2, y2)`, is
//! inside the polygon (where a standing person's feet are, as people counted at a door
//! are). Inside is the even-odd rule; a point on an edge is inside.

use anyhow::{bail, Result};

use crate::geom::{polygon_contains, Shape, ShapeRules};

/// The most zones one camera may have (a track keeps the zones it is in as a bit set).
pub(crate) const MAX_ZONES: usize = 64;

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

const RULES: ShapeRules = ShapeRules {
    flag: "--zone",
    noun: "zone",
    shape: "polygon",
    named: true,
    min_points: 3,
    example: "door=100,200,400,200,400,430,100,430",
    keys: &[],
};

const LOITER: ShapeRules = ShapeRules {
    flag: "--loiter",
    noun: "zone",
    shape: "polygon",
    named: true,
    min_points: 0,
    example: "gate=30",
    keys: &[],
};

impl ZoneSpec {
    /// Reads `[CAMERA:]NAME=x1,y1,x2,y2,x3,y3[,...]`. Errors (one line naming the flag and
    /// the fix): no `=`, a bad name, an odd count of numbers, fewer than three points, a
    /// number that is not a finite, non-negative pixel coordinate, a polygon of no area.
    pub fn parse(text: &str) -> Result<ZoneSpec> {
        let s = Shape::parse(text, &RULES)?;
        s.check_area(&RULES)?;
        Ok(ZoneSpec { camera: s.camera, zone: Zone { name: s.name, points: s.points } })
    }
}

/// Each camera's zones from the `--zone` specs: a spec naming a camera goes to it; one
/// naming none goes to every camera. Errors: a camera not in `cameras`, a zone named
/// twice for one camera, more than [`MAX_ZONES`] for one camera.
pub fn per_camera(specs: &[ZoneSpec], cameras: &[String]) -> Result<Vec<Vec<Zone>>> {
    let named = specs.iter().map(|s| (s.camera.clone(), s.zone.name.clone(), s.zone.clone())).collect();
    spread("--zone", "zone", named, cameras, MAX_ZONES)
}

/// The cameras an item naming `camera` applies to: that one, or every camera for none.
/// Error (one line): `{flag} {what}: no camera named ... (cameras: ...)`.
pub fn targets(flag: &str, what: &str, camera: Option<&str>, cameras: &[String]) -> Result<Vec<usize>> {
    match camera {
        Some(c) => match cameras.iter().position(|n| n == c) {
            Some(i) => Ok(vec![i]),
            None => bail!("{flag} {what}: no camera named {c} (cameras: {})", cameras.join(", ")),
        },
        None => Ok((0..cameras.len()).collect()),
    }
}

/// Named items (`(camera, name, item)`) to their cameras: one naming a camera goes to it,
/// one naming none to every camera. Errors (one line, naming `flag`): a camera not in
/// `cameras`, a name given twice for one camera, more than `max` for one camera.
pub(crate) fn spread<T: Clone>(
    flag: &str,
    noun: &str,
    named: Vec<(Option<String>, String, T)>,
    cameras: &[String],
    max: usize,
) -> Result<Vec<Vec<T>>> {
    let mut out: Vec<Vec<(String, T)>> = vec![vec![]; cameras.len()];
    for (camera, name, item) in named {
        let what = format!("{}:{name}", camera.as_deref().unwrap_or_default());
        for i in targets(flag, &what, camera.as_deref(), cameras)? {
            if out[i].iter().any(|(n, _)| *n == name) {
                bail!(
                    "{flag} {name}: camera {} already has a {noun} named {name}; give each {noun} its own name",
                    cameras[i]
                );
            }
            if out[i].len() == max {
                bail!("{flag} {name}: camera {} has {max} {noun}s, the most it may have", cameras[i]);
            }
            out[i].push((name.clone(), item.clone()));
        }
    }
    Ok(out.into_iter().map(|v| v.into_iter().map(|(_, t)| t).collect()).collect())
}

impl Zone {
    /// Whether `(x, y)` is inside (even-odd rule) or on an edge (within 0.01 px): a box
    /// clamped to the frame's bottom row has its feet on the edge of a zone drawn to it.
    pub fn contains(&self, x: f32, y: f32) -> bool {
        polygon_contains(&self.points, x, y)
    }

    /// Errors (one line) when a vertex lies outside a `width` x `height` frame of camera
    /// `camera`: x must be <= width and y <= height.
    pub fn check_inside(&self, camera: &str, width: u32, height: u32) -> Result<()> {
        crate::geom::check_inside(&self.points, &format!("--zone {}", self.name), camera, width, height)
    }
}

/// A `--loiter [CAMERA:]ZONE=SECONDS`: a track in the zone that long is loitering.
#[derive(Clone, Debug, PartialEq)]
pub struct LoiterSpec {
    /// `CAMERA:` before the zone, if given.
    pub camera: Option<String>,
    /// The zone's name.
    pub zone: String,
    /// How long, ns (capture time).
    pub after_ns: u64,
}

impl LoiterSpec {
    /// Reads `[CAMERA:]ZONE=SECONDS` (0.1 to 86400 s). Errors: one line naming the item.
    pub fn parse(text: &str) -> Result<LoiterSpec> {
        let Some((head, secs)) = text.split_once('=') else {
            bail!("--loiter {text}: expected ZONE=SECONDS (e.g. --loiter gate=30; CAMERA:ZONE=... for one camera)");
        };
        let (camera, zone) = match head.split_once(':') {
            Some((c, z)) => {
                zcpipe_core::config::check_camera_name(c).map_err(|e| anyhow::anyhow!("--loiter {text}: {e:#}"))?;
                (Some(c.to_string()), z)
            }
            None => (None, head),
        };
        crate::geom::check_name(zone, &LOITER, text)?;
        let after_ns = match secs.trim().parse::<f64>() {
            Ok(v) if (0.1..=86400.0).contains(&v) => (v * 1e9) as u64,
            _ => bail!("--loiter {text}: {secs:?} is not a time in seconds from 0.1 to 86400"),
        };
        Ok(LoiterSpec { camera, zone: zone.to_string(), after_ns })
    }
}

/// Each camera's loitering time per zone (`None`: not watched), in the order of its
/// `zones`: one naming a camera is that camera's, one naming none every camera's, and a
/// camera's own replaces, for it, the one for every camera. Errors (one line): a camera not
/// in `cameras`, a zone the camera does not have, a zone given twice.
pub fn loiter_per_camera(
    specs: &[LoiterSpec],
    cameras: &[String],
    zones: &[Vec<Zone>],
) -> Result<Vec<Vec<Option<u64>>>> {
    let mut out: Vec<Vec<Option<u64>>> = zones.iter().map(|z| vec![None; z.len()]).collect();
    let mut own: Vec<Vec<bool>> = zones.iter().map(|z| vec![false; z.len()]).collect();
    for mine in [false, true] {
        for s in specs.iter().filter(|s| s.camera.is_some() == mine) {
            let what = format!("{}:{}", s.camera.as_deref().unwrap_or_default(), s.zone);
            for c in targets("--loiter", &what, s.camera.as_deref(), cameras)? {
                let Some(z) = zones[c].iter().position(|z| z.name == s.zone) else {
                    let have: Vec<&str> = zones[c].iter().map(|z| z.name.as_str()).collect();
                    bail!(
                        "--loiter {}: camera {} has no zone named {} (its zones: {}); add it with --zone",
                        s.zone,
                        cameras[c],
                        s.zone,
                        if have.is_empty() { "none".to_string() } else { have.join(", ") }
                    );
                };
                if (!mine && out[c][z].is_some()) || own[c][z] {
                    bail!(
                        "--loiter {}: camera {} has a loitering time for zone {} already; give one",
                        s.zone,
                        cameras[c],
                        s.zone
                    );
                }
                out[c][z] = Some(s.after_ns);
                own[c][z] = mine;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geom::MAX_POINTS;

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
    fn a_cameras_own_loitering_time_replaces_the_general_one() {
        let cams = vec!["front".to_string(), "back".to_string()];
        let gate = Zone { name: "gate".into(), points: vec![(0.0, 0.0), (9.0, 0.0), (9.0, 9.0)] };
        let zones = vec![vec![gate.clone()], vec![gate]];
        let specs: Vec<LoiterSpec> =
            ["gate=30", "front:gate=5"].iter().map(|s| LoiterSpec::parse(s).unwrap()).collect();
        let t = loiter_per_camera(&specs, &cams, &zones).unwrap();
        assert_eq!(t, vec![vec![Some(5_000_000_000)], vec![Some(30_000_000_000)]]);
        let twice: Vec<LoiterSpec> = ["gate=30", "gate=5"].iter().map(|s| LoiterSpec::parse(s).unwrap()).collect();
        let e = format!("{:#}", loiter_per_camera(&twice, &cams, &zones).unwrap_err());
        assert_eq!(e, "--loiter gate: camera front has a loitering time for zone gate already; give one");
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
        assert_eq!(e, "--zone l: point (10, 0) is outside camera cam0's 8x10 frame; points are source pixels");
    }
}

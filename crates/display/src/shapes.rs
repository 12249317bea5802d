//! The camera's masks, zones and lines on the screen: their points where the picture puts
//! them ([`super::box_on_screen`]), their tags with the counts of the newest frame line, and
//! their drawing under the boxes (as the web view draws them: [`zcpipe_core::draw`]).

use zcpipe_core::draw::Canvas;

use super::detections::Latest;
use super::{box_on_screen, DisplayConfig, Rect};

/// A zone or a line as drawn: its points on the screen and its tag.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Tagged {
    /// Screen pixels.
    pub(crate) points: Vec<(f32, f32)>,
    /// Its name and counts.
    pub(crate) text: String,
}

/// A camera's shapes on the screen.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct OnScreen {
    /// Masks' polygons.
    pub(crate) masks: Vec<Vec<(f32, f32)>>,
    /// Zones, tagged with what is in them (`door: person 1`).
    pub(crate) zones: Vec<Tagged>,
    /// Lines, tagged with their crossings (`door: in 3 out 2`).
    pub(crate) lines: Vec<Tagged>,
}

impl OnScreen {
    /// `cfg`'s masks, zones and lines (source pixels: `latest`'s frame, else `frame`) on the
    /// screen with the picture at `pic`, zones and lines tagged with their names and
    /// `latest`'s counts.
    pub(crate) fn of(cfg: &DisplayConfig, latest: Option<&Latest>, frame: (u32, u32), pic: Rect) -> OnScreen {
        let f = latest.map(|l| l.frame).filter(|f| f.0 > 0 && f.1 > 0).unwrap_or(frame);
        let place = |pts: &[(f32, f32)]| -> Vec<(f32, f32)> {
            pts.iter()
                .map(|&(x, y)| {
                    let [sx, sy, ..] = box_on_screen([x, y, x, y], f, pic);
                    (sx, sy)
                })
                .collect()
        };
        let zones = cfg
            .zones
            .iter()
            .map(|z| {
                let counts = latest.and_then(|l| l.zones.as_ref()).and_then(|zs| zs.get(&z.name));
                Tagged { points: place(&z.points), text: zcpipe_core::draw::zone_text(&z.name, counts) }
            })
            .collect();
        let lines = cfg
            .lines
            .iter()
            .map(|l| {
                let counts = latest.and_then(|x| x.crossings.as_ref()).and_then(|ls| ls.get(&l.name));
                Tagged { points: place(&l.points), text: zcpipe_core::draw::line_text(&l.name, counts) }
            })
            .collect();
        OnScreen { masks: cfg.masks.iter().map(|m| place(m)).collect(), zones, lines }
    }

    /// Draws them on `c`: masks, then zones, then lines (the boxes go on top after).
    pub(crate) fn draw(&self, c: &mut Canvas<'_>) {
        for m in &self.masks {
            c.mask(m);
        }
        for z in &self.zones {
            c.zone(&z.points, &z.text);
        }
        for l in &self.lines {
            c.crossing_line(&l.points, &l.text);
        }
    }

    /// For a writeback's sidecar: `"zones"` and `"lines"` (`[{"text", "points"}]`) and
    /// `"masks"` (`[[[x, y], ...]]`), screen pixels.
    pub(crate) fn meta(&self) -> [(&'static str, serde_json::Value); 3] {
        let tagged = |v: &[Tagged]| -> serde_json::Value {
            v.iter().map(|t| serde_json::json!({"text": t.text, "points": t.points})).collect()
        };
        [("zones", tagged(&self.zones)), ("lines", tagged(&self.lines)), ("masks", serde_json::json!(self.masks))]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zcpipe_core::draw::{LINE_COLOUR, MASK_COLOUR};

    fn config() -> DisplayConfig {
        DisplayConfig {
            target: super::super::DisplayTarget::None,
            upstream: zcpipe_core::id::StageId::capture(None),
            camera: String::new(),
            detections: None,
            writeback: None,
            writeback_frames: 0,
            force_compose: false,
            legacy: false,
            frames: None,
            zones: vec![zcpipe_track::Zone {
                name: "door".into(),
                points: vec![(100.0, 50.0), (300.0, 50.0), (300.0, 250.0)],
            }],
            lines: vec![zcpipe_track::Line {
                name: "walk".into(),
                // Drawn right to left: walking along it, the right-hand side (in) is up.
                points: vec![(600.0, 400.0), (400.0, 400.0)],
                point: Default::default(),
                band: None,
            }],
            masks: vec![vec![(20.0, 300.0), (200.0, 300.0), (200.0, 460.0), (20.0, 460.0)]],
        }
    }

    /// ARGB8888 little-endian (B, G, R, A) of an opaque colour.
    fn argb(c: [u8; 3]) -> [u8; 4] {
        [c[2], c[1], c[0], 255]
    }

    /// Zones, lines and masks on the screen: their points where the picture puts them,
    /// tags with the counts, and their colours on an ARGB overlay (the line's arrow on its
    /// `in` side), clear elsewhere.
    #[test]
    fn shapes_go_where_the_picture_is_with_their_counts() {
        let cfg = config();
        let mut latest = Latest { frame: (640, 480), ..Default::default() };
        latest.zones = Some([("door".to_string(), [("person".to_string(), 2u32)].into())].into());
        let c = zcpipe_core::schema::CrossingsJson { into: 1, out: 4 };
        latest.crossings = Some([("walk".to_string(), [("car".to_string(), c)].into())].into());
        // A 640x480 frame shown at 2x from (10, 20).
        let pic = Rect { x: 10, y: 20, w: 1280, h: 960 };
        let on = OnScreen::of(&cfg, Some(&latest), (1, 1), pic);
        assert_eq!(on.zones[0].points, [(210.0, 120.0), (610.0, 120.0), (610.0, 520.0)]);
        assert_eq!(on.zones[0].text, "door: person 2");
        assert_eq!(on.lines[0].points, [(1210.0, 820.0), (810.0, 820.0)]);
        assert_eq!(on.lines[0].text, "walk: in 1 out 4");
        assert_eq!(on.masks[0][2], (410.0, 940.0));
        let (w, h) = (1300usize, 1000usize);
        let mut bytes = vec![0u8; w * h * 4];
        on.draw(&mut Canvas::argb8888(&mut bytes, w * 4, w as u32, h as u32));
        let at = |x: usize, y: usize| -> [u8; 4] { bytes[(y * w + x) * 4..][..4].try_into().unwrap() };
        assert_eq!(at(610, 300), [0, 176, 255, 255], "the zone's right edge, amber");
        assert_eq!(at(500, 300), [0, 0, 0, 0], "inside: clear, the camera shows through");
        assert_eq!(at(1000, 820), argb(LINE_COLOUR), "on the line");
        assert_eq!(at(1010, 808), argb(LINE_COLOUR), "its arrow from the middle (1010, 820) up: in");
        assert_eq!(at(1010, 832), [0, 0, 0, 0], "the mirror pixel below: out");
        assert_eq!(at(410, 700), argb(MASK_COLOUR), "the mask's right edge");
        assert_eq!(at(200, 700), argb(MASK_COLOUR), "a hatch line inside (x + y = 900)");
        assert_eq!(at(201, 700), [0, 0, 0, 0], "between hatch lines: clear");
        assert_eq!(at(450, 700), [0, 0, 0, 0], "outside the mask");
        // Without counts, the names alone; the sidecar has all three.
        let bare = OnScreen::of(&cfg, None, (640, 480), pic);
        assert_eq!((bare.zones[0].text.as_str(), bare.lines[0].text.as_str()), ("door", "walk"));
        let meta = serde_json::Value::Object(on.meta().into_iter().map(|(k, v)| (k.to_string(), v)).collect());
        assert_eq!(meta["lines"][0]["text"], "walk: in 1 out 4");
        assert_eq!(meta["lines"][0]["points"][1], serde_json::json!([810.0, 820.0]));
        assert_eq!(meta["masks"][0][0], serde_json::json!([50.0, 620.0]));
        assert_eq!(meta["zones"][0]["text"], "door: person 2");
    }
}

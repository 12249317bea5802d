//! The web view's and snapshots' drawing: a frame's detections on an RGB24 picture, with
//! the look every view shares ([`zcpipe_core::draw`]: boxes in their class's colour, tags
//! above them; under them the camera's masks, zones and lines, [`Shapes`]), and the dark
//! canvas shown when a camera has no pixels.
//!
//! Pictures are tight RGB24 rows (`width * 3` bytes a row); everything outside the picture is
//! clipped, so boxes partly or wholly outside it (they are clamped by infer, but a view frame
//! may be smaller) draw what fits and never panic.

pub use zcpipe_core::draw::{class_colour, label_text, text_size, Canvas, Drawn, BOX_THICKNESS, PALETTE, TEXT_SCALE};
use zcpipe_core::schema::FrameJson;

/// The grey of the canvas drawn when there are no pixels (RGB).
pub(crate) const CANVAS: [u8; 3] = [24, 24, 24];

/// Draws every detection of `f` on `canvas`: boxes first, then their tags (so a tag is never
/// hidden under another box's outline). Boxes are in `f`'s frame pixels; a canvas of another
/// size (a view frame scaled by its provider) gets them scaled to it.
pub fn detections(canvas: &mut Canvas<'_>, f: &FrameJson) {
    let sx = if f.width > 0 { canvas.width as f32 / f.width as f32 } else { 1.0 };
    let sy = if f.height > 0 { canvas.height as f32 / f.height as f32 } else { 1.0 };
    let dets: Vec<Drawn> = f
        .detections
        .iter()
        .map(|d| Drawn {
            bbox: [d.bbox[0] * sx, d.bbox[1] * sy, d.bbox[2] * sx, d.bbox[3] * sy],
            class_id: d.class_id,
            label: d.label.clone(),
            score: d.score,
            track_id: d.track_id,
        })
        .collect();
    canvas.detections(&dets);
}

/// What is drawn under one camera's boxes: its masks, zones and lines, in source pixels.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Shapes {
    /// Its zones (`--zone`).
    pub zones: Vec<zcpipe_track::Zone>,
    /// Its lines (`--line`).
    pub lines: Vec<zcpipe_track::Line>,
    /// Its masks' polygons (`--mask`).
    pub masks: Vec<Vec<(f32, f32)>>,
}

/// Each camera's shapes as the drawers share them: replaced whole when a camera's zones or
/// lines change while the stage runs.
pub type LiveShapes = std::sync::Arc<std::sync::RwLock<Vec<Shapes>>>;

impl Shapes {
    /// Each camera's shapes from the tracking configuration (as long as its longest list: a
    /// camera past the end of it has none).
    pub fn per_camera(track: &crate::TrackConfig) -> Vec<Shapes> {
        let n = track.zones.len().max(track.lines.len()).max(track.gates.len());
        (0..n)
            .map(|i| Shapes {
                zones: track.zones.get(i).cloned().unwrap_or_default(),
                lines: track.lines.get(i).cloned().unwrap_or_default(),
                masks: track.gates.get(i).map(|g| g.masks.clone()).unwrap_or_default(),
            })
            .collect()
    }
}

/// The factors from `f`'s frame pixels to the canvas's (1 without a frame, or for a side of 0).
fn scale(canvas: &Canvas<'_>, f: Option<&FrameJson>) -> (f32, f32) {
    let (fw, fh) = f.map_or((canvas.width, canvas.height), |f| (f.width, f.height));
    let sx = if fw > 0 { canvas.width as f32 / fw as f32 } else { 1.0 };
    let sy = if fh > 0 { canvas.height as f32 / fh as f32 } else { 1.0 };
    (sx, sy)
}

/// Draws a camera's `shapes` (in `f`'s frame pixels, scaled to the canvas as boxes are):
/// masks first, then zones, then lines, all before the boxes go on top ([`detections`]).
pub fn shapes(canvas: &mut Canvas<'_>, shapes: &Shapes, f: Option<&FrameJson>) {
    masks(canvas, &shapes.masks, f);
    zones(canvas, &shapes.zones, f);
    lines(canvas, &shapes.lines, f);
}

/// Draws camera's `zones` (their polygons in `f`'s frame pixels, scaled to the canvas as
/// boxes are) with each one's name and, from `f`'s `zones`, its counts (`door: person 1`).
pub fn zones(canvas: &mut Canvas<'_>, zones: &[zcpipe_track::Zone], f: Option<&FrameJson>) {
    let (sx, sy) = scale(canvas, f);
    for z in zones {
        let pts: Vec<(f32, f32)> = z.points.iter().map(|&(x, y)| (x * sx, y * sy)).collect();
        let counts = f.and_then(|f| f.zones.as_ref()).and_then(|zs| zs.get(&z.name));
        canvas.zone(&pts, &zcpipe_core::draw::zone_text(&z.name, counts));
    }
}

/// Draws camera's `lines` (their polylines in `f`'s frame pixels, scaled as zones are), each
/// with its arrow to its `in` side, its name and, from `f`'s `lines`, its crossings (`door:
/// in 3 out 2`).
pub fn lines(canvas: &mut Canvas<'_>, lines: &[zcpipe_track::Line], f: Option<&FrameJson>) {
    let (sx, sy) = scale(canvas, f);
    for l in lines {
        let pts: Vec<(f32, f32)> = l.points.iter().map(|&(x, y)| (x * sx, y * sy)).collect();
        let counts = f.and_then(|f| f.lines.as_ref()).and_then(|ls| ls.get(&l.name));
        canvas.crossing_line(&pts, &zcpipe_core::draw::line_text(&l.name, counts));
    }
}

/// Draws camera's `masks` (polygons in `f`'s frame pixels, scaled as zones are): outlined
/// and hatched in dark grey.
pub fn masks(canvas: &mut Canvas<'_>, masks: &[Vec<(f32, f32)>], f: Option<&FrameJson>) {
    let (sx, sy) = scale(canvas, f);
    for m in masks {
        let pts: Vec<(f32, f32)> = m.iter().map(|&(x, y)| (x * sx, y * sy)).collect();
        canvas.mask(&pts);
    }
}

/// A dark canvas of `width` x `height` with `note` written at its bottom-left corner: what the
/// view shows when it has no pixels for a camera (the boxes are drawn on it all the same).
pub fn blank(width: u32, height: u32, note: &str) -> Vec<u8> {
    let mut rgb = [CANVAS].repeat(width as usize * height as usize).concat();
    let mut c = Canvas::rgb24(&mut rgb, width, height);
    c.text(6, height as i64 - 8 * TEXT_SCALE as i64 - 6, note, [200, 200, 200]);
    rgb
}

#[cfg(test)]
mod tests {
    use super::*;
    use zcpipe_core::schema::{DetectionJson, LatencyJson};

    fn px(rgb: &[u8], w: u32, x: u32, y: u32) -> [u8; 3] {
        let i = ((y * w + x) * 3) as usize;
        [rgb[i], rgb[i + 1], rgb[i + 2]]
    }

    fn frame(dets: Vec<DetectionJson>) -> FrameJson {
        FrameJson {
            camera: "cam0".into(),
            seq: 1,
            timestamp_ns: 1,
            width: 200,
            height: 100,
            latency_us: LatencyJson::default(),
            detections: dets,
            zones: None,
            skipped: None,
            npu: Default::default(),
            ..Default::default()
        }
    }

    #[test]
    fn a_box_edge_has_its_class_colour_and_its_inside_is_untouched() {
        let mut rgb = blank(200, 100, "");
        let det = |class_id, bbox| DetectionJson {
            class_id,
            label: "person".into(),
            score: 0.891,
            bbox,
            track_id: Some(3),
            ..Default::default()
        };
        let mut c = Canvas::rgb24(&mut rgb, 200, 100);
        detections(&mut c, &frame(vec![det(0, [20.0, 40.0, 80.0, 90.0]), det(2, [120.0, 30.0, 190.0, 99.0])]));
        // Every pixel of each edge's three rows/columns, on the left and right edges and the bottom.
        for t in 0..3 {
            for y in 42..90 {
                assert_eq!(px(&rgb, 200, 20 + t, y), [0, 255, 0], "left edge at ({}, {y})", 20 + t);
                assert_eq!(px(&rgb, 200, 79 - t, y), [0, 255, 0], "right edge at ({}, {y})", 79 - t);
            }
            for x in 20..80 {
                assert_eq!(px(&rgb, 200, x, 89 - t), [0, 255, 0], "bottom edge at ({x}, {})", 89 - t);
            }
            assert_eq!(px(&rgb, 200, 120 + t, 60), [0, 255, 255], "class 2 is cyan");
        }
        assert_eq!(px(&rgb, 200, 23, 60), CANVAS, "the outline is 3 px thick");
        assert_eq!(px(&rgb, 200, 50, 70), CANVAS, "inside the box");
        assert_eq!(px(&rgb, 200, 19, 60), CANVAS, "outside the box");
        // The tag sits above the box (40 - 16 - 2 = 22 .. 40) and has black text on green.
        let tag: Vec<[u8; 3]> =
            (22..40).flat_map(|y| (20..60).map(move |x| (x, y))).map(|(x, y)| px(&rgb, 200, x, y)).collect();
        assert!(tag.contains(&[0, 255, 0]) && tag.contains(&[0, 0, 0]), "a green tag with black text");
        assert_eq!(label_text("person", 0.891, Some(3)), "person 0.89 #3");
        assert_eq!(label_text("car", 0.5, None), "car 0.50");
    }

    #[test]
    fn boxes_outside_the_picture_and_odd_values_are_clipped() {
        let mut rgb = blank(50, 40, "no pixels");
        let mut c = Canvas::rgb24(&mut rgb, 50, 40);
        c.outline([-30.0, -30.0, 500.0, 500.0], 3, [255, 0, 0]);
        c.outline([f32::NAN, 1.0, f32::INFINITY, 2.0], 3, [255, 0, 0]);
        c.tag(45, 35, "a label running off the picture", [0, 255, 0]);
        c.text(-100, -100, "é", [1, 2, 3]);
        assert_eq!(rgb.len(), 50 * 40 * 3);
        // A tag at the right edge moves left to fit.
        let mut wide = blank(200, 100, "");
        let mut c = Canvas::rgb24(&mut wide, 200, 100);
        detections(
            &mut c,
            &frame(vec![DetectionJson {
                class_id: 0,
                label: "person".into(),
                score: 0.5,
                bbox: [180.0, 50.0, 199.0, 90.0],
                track_id: None,
                ..Default::default()
            }]),
        );
        let (w, _) = text_size("person 0.50");
        assert_eq!(px(&wide, 200, (200 - w - 4) as u32, 40), [0, 255, 0], "the tag ends at the right edge");
        // A canvas of another size gets the boxes scaled: 200x100 boxes on 100x50.
        let mut small = blank(100, 50, "");
        let mut c = Canvas::rgb24(&mut small, 100, 50);
        detections(
            &mut c,
            &frame(vec![DetectionJson {
                class_id: 8,
                label: "x".into(),
                score: 0.5,
                bbox: [20.0, 40.0, 80.0, 90.0],
                track_id: None,
                ..Default::default()
            }]),
        );
        assert_eq!(px(&small, 100, 10, 30), [0, 255, 0], "left edge at x 10, class 8 wraps to green");
        assert_eq!(px(&small, 100, 9, 30), CANVAS);
    }

    /// A camera's masks, zones and lines, in frame pixels, on a canvas of half the frame's
    /// size: each where the scale puts it, in its colour, the line's arrow on its `in` side.
    #[test]
    fn shapes_are_scaled_to_the_canvas_in_their_colours() {
        use zcpipe_core::draw::{LINE_COLOUR, MASK_COLOUR, ZONE_COLOUR};
        let track = crate::TrackConfig {
            zones: vec![vec![zcpipe_track::Zone {
                name: "z".into(),
                points: vec![(20.0, 20.0), (100.0, 20.0), (100.0, 60.0), (20.0, 60.0)],
            }]],
            lines: vec![
                vec![zcpipe_track::Line {
                    name: "l".into(),
                    // Drawn bottom to top: walking along it, the right-hand side (in) is right.
                    points: vec![(300.0, 180.0), (300.0, 20.0)],
                    point: Default::default(),
                    band: None,
                }],
                vec![],
            ],
            gates: vec![zcpipe_track::filter::Gate {
                masks: vec![vec![(20.0, 120.0), (180.0, 120.0), (180.0, 190.0), (20.0, 190.0)]],
                filters: vec![],
            }],
            ..Default::default()
        };
        let all = Shapes::per_camera(&track);
        assert_eq!(all.len(), 2, "as many as the longest list");
        assert_eq!((all[1].lines.len(), all[1].zones.len(), all[1].masks.len()), (0, 0, 0));
        let (w, h) = (200u32, 100u32);
        let mut rgb = blank(w, h, "");
        let mut f = frame(vec![]);
        (f.width, f.height) = (400, 200);
        shapes(&mut Canvas::rgb24(&mut rgb, w, h), &all[0], Some(&f));
        assert_eq!(px(&rgb, w, 50, 10), ZONE_COLOUR, "the zone's top edge, (100, 20) / 2");
        assert_eq!(px(&rgb, w, 150, 70), LINE_COLOUR, "the line at x 150");
        assert_eq!(px(&rgb, w, 162, 50), LINE_COLOUR, "its arrow, right of its middle: in");
        assert_eq!(px(&rgb, w, 138, 50), CANVAS, "the mirror pixel left of it: out");
        assert_eq!(px(&rgb, w, 50, 95), MASK_COLOUR, "the mask's bottom edge, 190 / 2");
        assert_eq!(px(&rgb, w, 89, 80), MASK_COLOUR, "the mask's right edge, 180 / 2");
        assert_eq!(px(&rgb, w, 40, 70), MASK_COLOUR, "a hatch line inside (x + y = 110)");
        assert_eq!(px(&rgb, w, 41, 70), CANVAS, "between hatch lines");
        assert_eq!(px(&rgb, w, 100, 70), CANVAS, "past the mask's edge, on a hatch line's x + y");
        // Without a frame line: the canvas's own pixels, names alone.
        let mut rgb = blank(w, h, "");
        shapes(&mut Canvas::rgb24(&mut rgb, w, h), &all[0], None);
        assert_eq!(px(&rgb, w, 100, 20), ZONE_COLOUR, "the zone's top edge at frame scale");
    }

    #[test]
    fn the_no_pixels_note_is_written() {
        let rgb = blank(300, 40, "no pixels");
        assert!(rgb.chunks_exact(3).any(|p| p == [200, 200, 200]));
        assert!(rgb.chunks_exact(3).filter(|p| *p == CANVAS).count() > 300 * 30);
    }
}

//! Drawing a frame's detections on an RGB24 picture for the web view: a box outline in its
//! class's colour ([`PALETTE`]), [`BOX_THICKNESS`] pixels thick, inside the box's edges, and
//! a label tag (`person 0.89 #3`) in black on the class's colour above the box (inside it when
//! the box touches the top). Text is the public-domain 8x8 bitmap font of the `font8x8` crate,
//! drawn at twice its size.
//!
//! Pictures are tight RGB24 rows (`width * 3` bytes a row); everything outside the picture is
//! clipped, so boxes partly or wholly outside it (they are clamped by infer, but a view frame
//! may be smaller) draw what fits and never panic.

use crate::publish::schema::FrameJson;

/// The box and tag colour of each class: class id modulo the palette's length. Pure, bright
/// colours, so a box stays visible on a camera picture and a test can find its edge
/// (class 0, COCO's `person`: pure green; 1 `bicycle`: magenta; 2 `car`: cyan; 3
/// `motorcycle`: yellow; 4 `airplane`: orange; 5 `bus`: azure; 6 `train`: red; 7 `truck`:
/// violet; 8 again green, and so on).
pub const PALETTE: [[u8; 3]; 8] = [[0, 255, 0], [255, 0, 255], [0, 255, 255], [255, 255, 0], [255, 128, 0], [0, 128, 255], [255, 0, 0], [128, 0, 255]];

/// Thickness of a box outline, pixels (drawn inside the box).
pub const BOX_THICKNESS: u32 = 3;

/// Text is the 8x8 font drawn at this many pixels per font pixel (16 px high).
pub const TEXT_SCALE: u32 = 2;

/// The grey of the canvas drawn when there are no pixels (RGB).
pub const CANVAS: [u8; 3] = [24, 24, 24];

/// The colour of class `class_id` ([`PALETTE`]).
pub fn class_colour(class_id: u32) -> [u8; 3] {
    PALETTE[class_id as usize % PALETTE.len()]
}

/// A tight RGB24 picture being drawn on.
pub struct Canvas<'a> {
    /// `width * height * 3` bytes, rows top to bottom.
    pub rgb: &'a mut [u8],
    /// Width, pixels.
    pub width: u32,
    /// Height, pixels.
    pub height: u32,
}

impl Canvas<'_> {
    /// Fills the rectangle from (`x0`, `y0`) to (`x1`, `y1`) (exclusive; any values, clipped to
    /// the picture) with `c`.
    pub fn fill(&mut self, x0: i64, y0: i64, x1: i64, y1: i64, c: [u8; 3]) {
        let (w, h) = (self.width as i64, self.height as i64);
        let (x0, x1, y0, y1) = (x0.clamp(0, w), x1.clamp(0, w), y0.clamp(0, h), y1.clamp(0, h));
        if self.rgb.len() < (w * h * 3) as usize {
            return;
        }
        for y in y0..y1 {
            let row = (y * w * 3) as usize;
            for px in self.rgb[row + (x0 * 3) as usize..row + (x1 * 3) as usize].chunks_exact_mut(3) {
                px.copy_from_slice(&c);
            }
        }
    }

    /// The outline of box `[x1, y1, x2, y2]` (pixels, as the frame lines carry them),
    /// `thickness` pixels wide inside its edges, in `c`.
    pub fn outline(&mut self, b: [f32; 4], thickness: u32, c: [u8; 3]) {
        let [x1, y1, x2, y2] = b.map(|v| if v.is_finite() { v.round() as i64 } else { 0 });
        let t = thickness as i64;
        self.fill(x1, y1, x2, (y1 + t).min(y2), c);
        self.fill(x1, (y2 - t).max(y1), x2, y2, c);
        self.fill(x1, y1, (x1 + t).min(x2), y2, c);
        self.fill((x2 - t).max(x1), y1, x2, y2, c);
    }

    /// `text` (ASCII; anything else draws as `?`) with its top-left corner at (`x`, `y`), in
    /// `c`, [`TEXT_SCALE`] times the 8x8 font.
    pub fn text(&mut self, x: i64, y: i64, text: &str, c: [u8; 3]) {
        let s = TEXT_SCALE as i64;
        for (i, ch) in text.chars().enumerate() {
            let glyph = font8x8::legacy::BASIC_LEGACY[if ch.is_ascii() { ch as usize } else { b'?' as usize }];
            let gx = x + i as i64 * 8 * s;
            for (row, bits) in glyph.iter().enumerate() {
                for col in 0..8 {
                    // Bit 0 is the leftmost pixel of the row.
                    if bits >> col & 1 == 1 {
                        let (px, py) = (gx + col * s, y + row as i64 * s);
                        self.fill(px, py, px + s, py + s, c);
                    }
                }
            }
        }
    }

    /// A tag: `text` in black on a rectangle of `c` with its top-left corner at (`x`, `y`).
    pub fn tag(&mut self, x: i64, y: i64, text: &str, c: [u8; 3]) {
        let (w, h) = text_size(text);
        self.fill(x, y, x + w + 4, y + h + 2, c);
        self.text(x + 2, y + 1, text, [0, 0, 0]);
    }
}

/// Width and height in pixels of `text` drawn by [`Canvas::text`].
pub fn text_size(text: &str) -> (i64, i64) {
    (text.chars().count() as i64 * 8 * TEXT_SCALE as i64, 8 * TEXT_SCALE as i64)
}

/// A detection's label as drawn: `person 0.89 #3` (the track id when it has one).
pub fn label_text(label: &str, score: f32, track_id: Option<u64>) -> String {
    match track_id {
        Some(id) => format!("{label} {score:.2} #{id}"),
        None => format!("{label} {score:.2}"),
    }
}

/// Draws every detection of `f` on `canvas`: boxes first, then their tags (so a tag is never
/// hidden under another box's outline). Boxes are in `f`'s frame pixels; a canvas of another
/// size (a view frame scaled by its provider) gets them scaled to it.
pub fn detections(canvas: &mut Canvas<'_>, f: &FrameJson) {
    let sx = if f.width > 0 { canvas.width as f32 / f.width as f32 } else { 1.0 };
    let sy = if f.height > 0 { canvas.height as f32 / f.height as f32 } else { 1.0 };
    let scaled = |b: [f32; 4]| [b[0] * sx, b[1] * sy, b[2] * sx, b[3] * sy];
    for d in &f.detections {
        canvas.outline(scaled(d.bbox), BOX_THICKNESS, class_colour(d.class_id));
    }
    for d in &f.detections {
        let b = scaled(d.bbox);
        let text = label_text(&d.label, d.score, d.track_id);
        let (w, h) = text_size(&text);
        let (x, y) = (b[0].round() as i64, b[1].round() as i64);
        // Above the box when it fits, else inside its top edge; moved left to fit the picture.
        let y = if y - h - 2 >= 0 { y - h - 2 } else { y };
        let x = x.min(canvas.width as i64 - w - 4).max(0);
        canvas.tag(x, y, &text, class_colour(d.class_id));
    }
}

/// A dark canvas of `width` x `height` with `note` written at its bottom-left corner: what the
/// view shows when it has no pixels for a camera (the boxes are drawn on it all the same).
pub fn blank(width: u32, height: u32, note: &str) -> Vec<u8> {
    let mut rgb = [CANVAS].repeat(width as usize * height as usize).concat();
    let mut c = Canvas { rgb: &mut rgb, width, height };
    c.text(6, height as i64 - 8 * TEXT_SCALE as i64 - 6, note, [200, 200, 200]);
    rgb
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::schema::{DetectionJson, LatencyJson};

    fn px(rgb: &[u8], w: u32, x: u32, y: u32) -> [u8; 3] {
        let i = ((y * w + x) * 3) as usize;
        [rgb[i], rgb[i + 1], rgb[i + 2]]
    }

    fn frame(dets: Vec<DetectionJson>) -> FrameJson {
        FrameJson { camera: "cam0".into(), seq: 1, timestamp_ns: 1, width: 200, height: 100, latency_us: LatencyJson::default(), detections: dets, zones: None }
    }

    #[test]
    fn a_box_edge_has_its_class_colour_and_its_inside_is_untouched() {
        let mut rgb = blank(200, 100, "");
        let det = |class_id, bbox| DetectionJson { class_id, label: "person".into(), score: 0.891, bbox, track_id: Some(3) };
        let mut c = Canvas { rgb: &mut rgb, width: 200, height: 100 };
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
        let tag: Vec<[u8; 3]> = (22..40).flat_map(|y| (20..60).map(move |x| (x, y))).map(|(x, y)| px(&rgb, 200, x, y)).collect();
        assert!(tag.contains(&[0, 255, 0]) && tag.contains(&[0, 0, 0]), "a green tag with black text");
        assert_eq!(label_text("person", 0.891, Some(3)), "person 0.89 #3");
        assert_eq!(label_text("car", 0.5, None), "car 0.50");
    }

    #[test]
    fn boxes_outside_the_picture_and_odd_values_are_clipped() {
        let mut rgb = blank(50, 40, "no pixels");
        let mut c = Canvas { rgb: &mut rgb, width: 50, height: 40 };
        c.outline([-30.0, -30.0, 500.0, 500.0], 3, [255, 0, 0]);
        c.outline([f32::NAN, 1.0, f32::INFINITY, 2.0], 3, [255, 0, 0]);
        c.tag(45, 35, "a label running off the picture", [0, 255, 0]);
        c.text(-100, -100, "é", [1, 2, 3]);
        assert_eq!(rgb.len(), 50 * 40 * 3);
        // A tag at the right edge moves left to fit.
        let mut wide = blank(200, 100, "");
        let mut c = Canvas { rgb: &mut wide, width: 200, height: 100 };
        detections(&mut c, &frame(vec![DetectionJson { class_id: 0, label: "person".into(), score: 0.5, bbox: [180.0, 50.0, 199.0, 90.0], track_id: None }]));
        let (w, _) = text_size("person 0.50");
        assert_eq!(px(&wide, 200, (200 - w - 4) as u32, 40), [0, 255, 0], "the tag ends at the right edge");
        // A canvas of another size gets the boxes scaled: 200x100 boxes on 100x50.
        let mut small = blank(100, 50, "");
        let mut c = Canvas { rgb: &mut small, width: 100, height: 50 };
        detections(&mut c, &frame(vec![DetectionJson { class_id: 8, label: "x".into(), score: 0.5, bbox: [20.0, 40.0, 80.0, 90.0], track_id: None }]));
        assert_eq!(px(&small, 100, 10, 30), [0, 255, 0], "left edge at x 10, class 8 wraps to green");
        assert_eq!(px(&small, 100, 9, 30), CANVAS);
    }

    #[test]
    fn the_no_pixels_note_is_written() {
        let rgb = blank(300, 40, "no pixels");
        assert!(rgb.chunks_exact(3).any(|p| p == [200, 200, 200]));
        assert!(rgb.chunks_exact(3).filter(|p| *p == CANVAS).count() > 300 * 30);
    }
}

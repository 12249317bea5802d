//! Drawing detections on a picture, the one look every view of zcpipe shares (the web view
//! and snapshots on RGB24, the display's ARGB8888 overlay plane and its XRGB8888 CPU
//! composition): a box outline in its class's colour ([`PALETTE`]), [`BOX_THICKNESS`]
//! pixels thick, inside the box's edges, and a tag (`person 0.89 #3`) in black on the
//! class's colour above the box (inside its top edge when the box touches the top; moved
//! left to stay on the picture). Text is the public-domain 8x8 bitmap font of the
//! `font8x8` crate, drawn [`TEXT_SCALE`] times its size. Under the boxes, a camera's masks
//! (a dark grey outline, hatched: [`Canvas::mask`]), zones (an amber outline and a tag:
//! [`Canvas::zone`]) and lines (a pale blue polyline with an arrow to its `in` side and a
//! tag: [`Canvas::crossing_line`]).
//!
//! A [`Canvas`] is rows of `pitch` bytes in one of two layouts ([`Layout`]): tight or padded
//! RGB24 (R, G, B), or 32-bit DRM words `[31:0] A:R:G:B` little-endian (drm_fourcc.h
//! `DRM_FORMAT_ARGB8888` / `XRGB8888`: in memory B, G, R, A), drawn opaque (alpha 0xff; a
//! plane's default `pixel blend mode` is pre-multiplied, drm_blend.c, so opaque pixels
//! cover and 0 is clear). Everything outside the picture is clipped: boxes partly or wholly
//! outside it, or NaN, draw what fits and never panic.

/// The box and tag colour of each class: class id modulo the palette's length. Pure, bright
/// colours, so a box stays visible on a camera picture and a test can find its edge
/// (class 0, COCO's `person`: pure green; 1 `bicycle`: magenta; 2 `car`: cyan; 3
/// `motorcycle`: yellow; 4 `airplane`: orange; 5 `bus`: azure; 6 `train`: red; 7 `truck`:
/// violet; 8 again green, and so on).
pub const PALETTE: [[u8; 3]; 8] = [
    [0, 255, 0],
    [255, 0, 255],
    [0, 255, 255],
    [255, 255, 0],
    [255, 128, 0],
    [0, 128, 255],
    [255, 0, 0],
    [128, 0, 255],
];

/// Thickness of a box outline, pixels (drawn inside the box).
pub const BOX_THICKNESS: u32 = 3;

/// Text is the 8x8 font drawn at this many pixels per font pixel (16 px high).
pub const TEXT_SCALE: u32 = 2;

/// The colour of class `class_id` ([`PALETTE`]).
pub fn class_colour(class_id: u32) -> [u8; 3] {
    PALETTE[class_id as usize % PALETTE.len()]
}

/// How a canvas's pixels are laid out in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// 3 bytes a pixel: R, G, B.
    Rgb24,
    /// 4 bytes a pixel, DRM's ARGB8888 / XRGB8888 word little-endian: B, G, R, A.
    Argb8888,
}

impl Layout {
    /// Bytes a pixel.
    pub(crate) fn bytes_per_pixel(self) -> usize {
        match self {
            Layout::Rgb24 => 3,
            Layout::Argb8888 => 4,
        }
    }

    /// `c` (R, G, B) as this layout's bytes, opaque; the first [`Layout::bytes_per_pixel`]
    /// count.
    pub fn pixel(self, c: [u8; 3]) -> [u8; 4] {
        match self {
            Layout::Rgb24 => [c[0], c[1], c[2], 0],
            Layout::Argb8888 => [c[2], c[1], c[0], 0xff],
        }
    }
}

/// One detection to draw: its box in the canvas's pixels, its class, label, score and
/// track id.
#[derive(Clone, Debug, PartialEq)]
pub struct Drawn {
    /// `[x1, y1, x2, y2]`, canvas pixels.
    pub bbox: [f32; 4],
    /// Class index (its colour).
    pub class_id: u32,
    /// Label.
    pub label: String,
    /// Score in 0..1.
    pub score: f32,
    /// Confirmed track id, if any.
    pub track_id: Option<u64>,
}

/// A picture being drawn on: `height` rows of `pitch` bytes, `width` pixels each in
/// `layout`. Bytes past `width` pixels in a row (stride padding) are never written; a
/// `bytes` too short for a row stops the drawing there.
pub struct Canvas<'a> {
    /// The bytes (a frame, a mapped dumb buffer).
    pub bytes: &'a mut [u8],
    /// Bytes per row.
    pub pitch: usize,
    /// Width, pixels.
    pub width: u32,
    /// Height, pixels.
    pub height: u32,
    /// The pixel layout.
    pub layout: Layout,
}

impl<'a> Canvas<'a> {
    /// A tight RGB24 picture (`width * 3` bytes a row).
    pub fn rgb24(rgb: &'a mut [u8], width: u32, height: u32) -> Canvas<'a> {
        Canvas { bytes: rgb, pitch: width as usize * 3, width, height, layout: Layout::Rgb24 }
    }

    /// A 32-bit DRM picture (ARGB8888 or XRGB8888) of `pitch` bytes a row.
    pub fn argb8888(bytes: &'a mut [u8], pitch: usize, width: u32, height: u32) -> Canvas<'a> {
        Canvas { bytes, pitch, width, height, layout: Layout::Argb8888 }
    }
}

impl Canvas<'_> {
    /// Fills the rectangle from (`x0`, `y0`) to (`x1`, `y1`) (exclusive; any values, clipped
    /// to the picture) with the pixel bytes `px` (the first bytes-per-pixel of them).
    pub(crate) fn fill_bytes(&mut self, x0: i64, y0: i64, x1: i64, y1: i64, px: [u8; 4]) {
        let (w, h) = (self.width as i64, self.height as i64);
        let (x0, x1, y0, y1) = (x0.clamp(0, w), x1.clamp(0, w), y0.clamp(0, h), y1.clamp(0, h));
        let bpp = self.layout.bytes_per_pixel();
        for y in y0..y1 {
            let row = y as usize * self.pitch;
            let Some(r) = self.bytes.get_mut(row + x0 as usize * bpp..row + x1 as usize * bpp) else { return };
            for p in r.chunks_exact_mut(bpp) {
                p.copy_from_slice(&px[..bpp]);
            }
        }
    }

    /// Fills the rectangle (as [`Canvas::fill_bytes`]) with the opaque colour `c` (R, G, B).
    pub fn fill(&mut self, x0: i64, y0: i64, x1: i64, y1: i64, c: [u8; 3]) {
        self.fill_bytes(x0, y0, x1, y1, self.layout.pixel(c));
    }

    /// Sets every pixel to 0: clear on an ARGB8888 overlay, black on RGB24.
    pub fn clear(&mut self) {
        self.fill_bytes(0, 0, self.width as i64, self.height as i64, [0; 4]);
    }

    /// The outline of box `[x1, y1, x2, y2]` (pixels), `thickness` pixels wide inside its
    /// edges, in `c`.
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

    /// A line from `a` to `b` (pixels; non-finite ends draw nothing), `thickness` pixels
    /// wide, in `c`: a square of that size at each step along the longer axis.
    pub fn line(&mut self, a: (f32, f32), b: (f32, f32), thickness: u32, c: [u8; 3]) {
        if ![a.0, a.1, b.0, b.1].iter().all(|v| v.is_finite()) || self.width == 0 || self.height == 0 {
            return;
        }
        let (dx, dy) = (b.0 - a.0, b.1 - a.1);
        // At most the picture's diagonal in steps, however far outside the ends lie.
        let limit = (self.width + self.height) as f32 * 2.0;
        let steps = dx.abs().max(dy.abs()).ceil().clamp(1.0, limit) as i64;
        let (t, h) = (thickness as i64, thickness as i64 / 2);
        for i in 0..=steps {
            let f = i as f32 / steps as f32;
            let (x, y) = ((a.0 + dx * f).round() as i64, (a.1 + dy * f).round() as i64);
            let (x0, y0) = (x.saturating_sub(h), y.saturating_sub(h));
            self.fill(x0, y0, x0.saturating_add(t), y0.saturating_add(t), c);
        }
    }

    /// A zone: its polygon `points` (pixels) closed and outlined in [`ZONE_COLOUR`], and a tag
    /// with `text` (its name and counts) at its first vertex.
    pub fn zone(&mut self, points: &[(f32, f32)], text: &str) {
        for (i, &a) in points.iter().enumerate() {
            self.line(a, points[(i + 1) % points.len()], ZONE_THICKNESS, ZONE_COLOUR);
        }
        if let Some(&(x, y)) = points.first().filter(|p| p.0.is_finite() && p.1.is_finite()) {
            let (w, h) = text_size(text);
            let x = (x.round() as i64).min(self.width as i64 - w - 4).max(0);
            let y = (y.round() as i64).min(self.height as i64 - h - 2).max(0);
            self.tag(x, y, text, ZONE_COLOUR);
        }
    }

    /// A counted line: its polyline `points` (pixels) in [`LINE_COLOUR`], [`LINE_THICKNESS`]
    /// wide; at the middle of its longest segment an arrow [`ARROW_LENGTH`] long pointing to
    /// its `in` side (the right-hand side walking from its first point to its last, image y
    /// down: the side where `(b - a) x (p - a) > 0` for the segment `a`-`b`), and a tag with
    /// `text` (its name and crossings, [`line_text`]) just past the arrow's tip, moved to
    /// stay on the picture. Points that are not finite draw nothing of their segments; a
    /// line with no segment of 1 px or more has no arrow and no tag.
    pub fn crossing_line(&mut self, points: &[(f32, f32)], text: &str) {
        for w in points.windows(2) {
            self.line(w[0], w[1], LINE_THICKNESS, LINE_COLOUR);
        }
        let Some((mid, (ux, uy))) = longest_segment(points) else { return };
        // The right-hand normal of the segment's direction (ux, uy), y down: (-uy, ux).
        let (nx, ny) = (-uy, ux);
        let tip = (mid.0 + nx * ARROW_LENGTH, mid.1 + ny * ARROW_LENGTH);
        self.line(mid, tip, LINE_THICKNESS, LINE_COLOUR);
        let head = ARROW_LENGTH * 0.4;
        for side in [-1.0, 1.0] {
            let end = (tip.0 - (nx - side * ux) * head, tip.1 - (ny - side * uy) * head);
            self.line(tip, end, LINE_THICKNESS, LINE_COLOUR);
        }
        // The tag's centre past the tip, far enough along the normal for its nearest edge to
        // clear the tip by 4 px.
        let (w, h) = text_size(text);
        let (tw, th) = ((w + 4) as f32, (h + 2) as f32);
        let reach = 4.0 + (nx.abs() * tw + ny.abs() * th) / 2.0;
        let (cx, cy) = (tip.0 + nx * reach - tw / 2.0, tip.1 + ny * reach - th / 2.0);
        let x = (cx.round() as i64).min(self.width as i64 - tw as i64).max(0);
        let y = (cy.round() as i64).min(self.height as i64 - th as i64).max(0);
        self.tag(x, y, text, LINE_COLOUR);
    }

    /// A mask: its polygon `points` (pixels) closed and outlined in [`MASK_COLOUR`], and
    /// hatched inside with 1 px diagonal lines [`MASK_HATCH`] pixels apart (what the tracker
    /// never sees shows through between them). The hatch costs a pass over the polygon's
    /// edges per hatch line and the hatch's own pixels, never a pass over the picture; a
    /// polygon with a point that is not finite gets its outline only.
    pub fn mask(&mut self, points: &[(f32, f32)]) {
        for (i, &a) in points.iter().enumerate() {
            self.line(a, points[(i + 1) % points.len()], ZONE_THICKNESS, MASK_COLOUR);
        }
        if points.len() < 3 || !points.iter().all(|p| p.0.is_finite() && p.1.is_finite()) {
            return;
        }
        // Lines x + y = c, c a multiple of the spacing (the hatch stays put as the polygon
        // moves), only where they cross the picture.
        let s: Vec<f32> = points.iter().map(|p| p.0 + p.1).collect();
        let lo = s.iter().copied().fold(f32::INFINITY, f32::min).max(0.0);
        let hi = s.iter().copied().fold(f32::NEG_INFINITY, f32::max).min(self.width as f32 + self.height as f32);
        let step = MASK_HATCH as f32;
        let mut c = (lo / step).ceil() * step;
        let mut xs: Vec<f32> = Vec::with_capacity(8);
        while c <= hi {
            // Where the line meets each edge (by x), paired in order: inside between (even-odd).
            xs.clear();
            for i in 0..points.len() {
                let j = (i + 1) % points.len();
                let (da, db) = (s[i] - c, s[j] - c);
                if (da > 0.0) != (db > 0.0) {
                    let t = da / (da - db);
                    xs.push(points[i].0 + (points[j].0 - points[i].0) * t);
                }
            }
            xs.sort_by(f32::total_cmp);
            // The part of the line on the picture: x in c - height ..= c and 0 ..= width.
            let (x_lo, x_hi) = ((c - self.height as f32).max(0.0), c.min(self.width as f32));
            for p in xs.chunks_exact(2) {
                let (a, b) = (p[0].max(x_lo), p[1].min(x_hi));
                if a <= b {
                    self.line((a, c - a), (b, c - b), 1, MASK_COLOUR);
                }
            }
            c += step;
        }
    }

    /// Draws `dets`: boxes first, then their tags (so a tag is never hidden under another
    /// box's outline); a tag sits above its box when it fits, else inside its top edge, and
    /// moves left to fit the picture.
    pub fn detections(&mut self, dets: &[Drawn]) {
        for d in dets {
            self.outline(d.bbox, BOX_THICKNESS, class_colour(d.class_id));
        }
        for d in dets {
            let text = label_text(&d.label, d.score, d.track_id);
            let (w, h) = text_size(&text);
            let (x, y) = (d.bbox[0].round() as i64, d.bbox[1].round() as i64);
            let y = if y - h - 2 >= 0 { y - h - 2 } else { y };
            let x = x.min(self.width as i64 - w - 4).max(0);
            self.tag(x, y, &text, class_colour(d.class_id));
        }
    }
}

/// The colour of zones, their own (no class has it): amber.
pub const ZONE_COLOUR: [u8; 3] = [255, 176, 0];

/// A zone's outline width, pixels (a mask's too).
pub const ZONE_THICKNESS: u32 = 2;

/// The colour of lines, their own (no class has it, nor zones): a pale sky blue, paler
/// than the cyan of class 2 and the azure of class 5.
pub const LINE_COLOUR: [u8; 3] = [128, 224, 255];

/// A line's width, pixels (as a zone's outline).
pub const LINE_THICKNESS: u32 = ZONE_THICKNESS;

/// How far a line's direction arrow reaches from the line, pixels.
pub const ARROW_LENGTH: f32 = 20.0;

/// The colour of masks: a dark grey (what the tracker never sees is shaded, not lit).
pub const MASK_COLOUR: [u8; 3] = [56, 56, 56];

/// The distance between a mask's hatch lines along each axis, pixels.
pub const MASK_HATCH: u32 = 10;

/// The middle of the longest segment of `points` of at least 1 px (finite ends), and its
/// unit direction.
fn longest_segment(points: &[(f32, f32)]) -> Option<((f32, f32), (f32, f32))> {
    points
        .windows(2)
        .map(|w| (w[0], w[1], ((w[1].0 - w[0].0).powi(2) + (w[1].1 - w[0].1).powi(2)).sqrt()))
        .filter(|&(_, _, len)| len.is_finite() && len >= 1.0)
        .max_by(|a, b| a.2.total_cmp(&b.2))
        .map(|(a, b, len)| (((a.0 + b.0) / 2.0, (a.1 + b.1) / 2.0), ((b.0 - a.0) / len, (b.1 - a.1) / len)))
}

/// Width and height in pixels of `text` drawn by [`Canvas::text`].
pub fn text_size(text: &str) -> (i64, i64) {
    (text.chars().count() as i64 * 8 * TEXT_SCALE as i64, 8 * TEXT_SCALE as i64)
}

/// A zone's tag as drawn: its name, and its tracked objects by label when any are in it
/// (`door: person 1, car 2`).
pub fn zone_text(name: &str, counts: Option<&std::collections::BTreeMap<String, u32>>) -> String {
    let in_it: Vec<String> =
        counts.into_iter().flatten().filter(|(_, n)| **n > 0).map(|(l, n)| format!("{l} {n}")).collect();
    if in_it.is_empty() {
        name.to_string()
    } else {
        format!("{name}: {}", in_it.join(", "))
    }
}

/// A line's tag as drawn: its name, and when its crossings are known (`counts`, the frame
/// line's for it) their totals over every label, `door: in 3 out 2`.
pub fn line_text(
    name: &str,
    counts: Option<&std::collections::BTreeMap<String, crate::schema::CrossingsJson>>,
) -> String {
    match counts {
        None => name.to_string(),
        Some(c) => {
            let (i, o) = c.values().fold((0u64, 0u64), |(i, o), x| (i.saturating_add(x.into), o.saturating_add(x.out)));
            format!("{name}: in {i} out {o}")
        }
    }
}

/// A detection's tag as drawn: `person 0.89 #3` (the track id when it has one).
pub fn label_text(label: &str, score: f32, track_id: Option<u64>) -> String {
    match track_id {
        Some(id) => format!("{label} {score:.2} #{id}"),
        None => format!("{label} {score:.2}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn word(bytes: &[u8], pitch: usize, x: usize, y: usize) -> u32 {
        u32::from_le_bytes(bytes[y * pitch + x * 4..y * pitch + x * 4 + 4].try_into().unwrap())
    }

    #[test]
    fn an_argb_box_is_an_opaque_outline_in_its_class_colour_on_a_clear_overlay() {
        let (w, h, pitch) = (64u32, 48u32, 64 * 4 + 16);
        let mut bytes = vec![0xAAu8; pitch * h as usize];
        let mut c = Canvas::argb8888(&mut bytes, pitch, w, h);
        c.clear();
        c.outline([10.0, 20.0, 40.0, 44.0], BOX_THICKNESS, class_colour(0));
        // In memory B, G, R, A: pure green, opaque.
        assert_eq!(word(&bytes, pitch, 10, 20), 0xff00ff00);
        assert_eq!(&bytes[20 * pitch + 40..20 * pitch + 44], &[0, 255, 0, 255]);
        assert_eq!(word(&bytes, pitch, 12, 30), 0xff00ff00, "left edge, 3 px thick");
        assert_eq!(word(&bytes, pitch, 13, 30), 0, "inside the box: clear");
        assert_eq!(word(&bytes, pitch, 39, 43), 0xff00ff00, "bottom-right corner inside the box");
        assert_eq!(word(&bytes, pitch, 40, 44), 0, "the box's right and bottom edges are exclusive");
        // The stride padding past the picture is untouched.
        assert!(bytes.chunks(pitch).all(|r| r[w as usize * 4..].iter().all(|&b| b == 0xAA)));
        // Red is R in bits 23..16: B, G, R, A in memory.
        assert_eq!(Layout::Argb8888.pixel([255, 0, 0]), [0, 0, 255, 255]);
        assert_eq!(Layout::Rgb24.pixel([255, 0, 0])[..3], [255, 0, 0]);
    }

    #[test]
    fn tags_sit_above_boxes_or_inside_at_the_top_and_everything_clips() {
        let (w, h, pitch) = (200u32, 100u32, 800);
        let mut bytes = vec![0u8; pitch * h as usize];
        let mut c = Canvas::argb8888(&mut bytes, pitch, w, h);
        let d =
            |b: [f32; 4], id: u32| Drawn { bbox: b, class_id: id, label: "car".into(), score: 0.5, track_id: Some(7) };
        assert_eq!(label_text("car", 0.5, Some(7)), "car 0.50 #7");
        assert_eq!(label_text("car", 0.5, None), "car 0.50");
        c.detections(&[
            d([20.0, 40.0, 100.0, 90.0], 2),
            d([150.0, 0.0, 260.0, 120.0], 1),
            d([f32::NAN, -5.0, 1e9, 3.0], 3),
        ]);
        let opaque = |c: [u8; 3]| u32::from_le_bytes(Layout::Argb8888.pixel(c));
        // The first tag (cyan) is above its box: rows 22..40; the second (magenta) inside its top edge, moved left to fit.
        assert_eq!(word(&bytes, pitch, 20, 22), opaque([0, 255, 255]));
        let (tw, th) = text_size("car 0.50 #7");
        assert_eq!(200 - tw - 4, 20);
        // (The third box, all outside or NaN, draws its tag at the top left over rows 0..17: the second's shows right of it.)
        assert_eq!(word(&bytes, pitch, 199, th as usize - 1), opaque([255, 0, 255]));
    }

    #[test]
    fn a_zone_is_an_amber_outline_with_its_tag_and_odd_points_never_panic() {
        let (w, h) = (64u32, 48u32);
        let mut rgb = vec![0u8; (w * h * 3) as usize];
        let mut c = Canvas::rgb24(&mut rgb, w, h);
        c.zone(&[(10.0, 30.0), (50.0, 30.0), (50.0, 45.0), (10.0, 45.0)], "d");
        let px = |x: u32, y: u32| -> [u8; 3] {
            let i = ((y * w + x) * 3) as usize;
            [rgb[i], rgb[i + 1], rgb[i + 2]]
        };
        assert_eq!(px(30, 45), ZONE_COLOUR, "the bottom edge");
        assert_eq!(px(50, 38), ZONE_COLOUR, "the right edge");
        assert_eq!(px(30, 38), [0, 0, 0], "inside is untouched");
        assert_eq!(px(12, 31), ZONE_COLOUR, "the tag at the first vertex");
        let mut c = Canvas::rgb24(&mut rgb, w, h);
        c.zone(&[(-1e9, 5.0), (f32::NAN, 1.0), (1e9, 1e9)], "far");
        c.line((0.0, 0.0), (f32::INFINITY, 3.0), 2, [1, 2, 3]);
        c.line((-f32::MAX, 0.0), (f32::MAX, 3.0), 2, [1, 2, 3]);
        Canvas::rgb24(&mut [], 0, 0).zone(&[(0.0, 0.0), (1.0, 1.0), (0.0, 1.0)], "empty");
    }

    /// Tight RGB24 pixel (x, y) of a `w`-wide picture.
    fn rgb(bytes: &[u8], w: u32, x: u32, y: u32) -> [u8; 3] {
        let i = ((y * w + x) * 3) as usize;
        [bytes[i], bytes[i + 1], bytes[i + 2]]
    }

    #[test]
    fn a_line_is_its_polyline_with_an_arrow_to_its_in_side_and_its_tag() {
        let (w, h) = (100u32, 80u32);
        let mut px = vec![0u8; (w * h * 3) as usize];
        // Drawn left to right: walking along it, the right-hand side (in) is below.
        Canvas::rgb24(&mut px, w, h).crossing_line(&[(10.0, 40.0), (90.0, 40.0)], "d");
        assert_eq!(rgb(&px, w, 20, 40), LINE_COLOUR, "on the line");
        assert_eq!(rgb(&px, w, 20, 42), [0, 0, 0], "2 px wide");
        assert_eq!(rgb(&px, w, 50, 52), LINE_COLOUR, "the arrow at the middle, below: in");
        assert_eq!(rgb(&px, w, 50, 28), [0, 0, 0], "nothing above: out");
        // The arrow's head at its tip (50, 60), its barbs going back up to either side.
        assert_eq!(rgb(&px, w, 46, 56), LINE_COLOUR, "a barb");
        assert_eq!(rgb(&px, w, 54, 56), LINE_COLOUR, "the other barb");
        // The tag ("d", 20x18) past the tip, moved up to stay on the picture: rows 62..80.
        assert_eq!(rgb(&px, w, 41, 79), LINE_COLOUR, "the tag's bottom-left corner");
        assert_eq!(rgb(&px, w, 39, 79), [0, 0, 0], "left of the tag");
        // Drawn top to bottom on a polyline whose longest segment is the vertical one: in is left.
        let mut px = vec![0u8; (w * h * 3) as usize];
        Canvas::rgb24(&mut px, w, h).crossing_line(&[(50.0, 10.0), (50.0, 70.0), (60.0, 70.0)], "d");
        assert_eq!(rgb(&px, w, 38, 40), LINE_COLOUR, "the arrow, left: in");
        assert_eq!(rgb(&px, w, 62, 40), [0, 0, 0], "the mirror pixel, right: out");
        assert_eq!(rgb(&px, w, 58, 70), LINE_COLOUR, "the polyline's last segment");
        // Segments under 1 px, a single point, points that are not finite: no arrow, no tag, no panic.
        let mut c = Canvas::rgb24(&mut px, w, h);
        c.crossing_line(&[(5.0, 5.0), (5.2, 5.0)], "short");
        c.crossing_line(&[(5.0, 5.0)], "one");
        c.crossing_line(&[(f32::NAN, 5.0), (1e9, -1e9), (-f32::MAX, f32::MAX)], "odd");
        Canvas::rgb24(&mut [], 0, 0).crossing_line(&[(0.0, 0.0), (10.0, 0.0)], "empty");
    }

    #[test]
    fn a_line_tag_sums_its_crossings_over_labels() {
        use crate::schema::CrossingsJson;
        let c = std::collections::BTreeMap::from([
            ("person".to_string(), CrossingsJson { into: 2, out: 1 }),
            ("car".to_string(), CrossingsJson { into: 1, out: 1 }),
        ]);
        assert_eq!(line_text("door", Some(&c)), "door: in 3 out 2");
        assert_eq!(line_text("door", Some(&Default::default())), "door: in 0 out 0");
        assert_eq!(line_text("door", None), "door");
    }

    #[test]
    fn a_mask_is_a_grey_outline_hatched_inside_only() {
        let (w, h) = (64u32, 64u32);
        let mut px = vec![0u8; (w * h * 3) as usize];
        Canvas::rgb24(&mut px, w, h).mask(&[(10.0, 10.0), (50.0, 10.0), (50.0, 50.0), (10.0, 50.0)]);
        assert_eq!(rgb(&px, w, 30, 10), MASK_COLOUR, "the top edge");
        assert_eq!(rgb(&px, w, 50, 33), MASK_COLOUR, "the right edge");
        // Hatch lines x + y = 10 k inside; the pixels between them untouched.
        assert_eq!(rgb(&px, w, 25, 25), MASK_COLOUR, "a hatch line inside (x + y = 50)");
        assert_eq!(rgb(&px, w, 40, 30), MASK_COLOUR, "another (x + y = 70)");
        assert_eq!(rgb(&px, w, 26, 25), [0, 0, 0], "between hatch lines");
        assert_eq!(rgb(&px, w, 30, 35), [0, 0, 0], "between hatch lines");
        assert_eq!(rgb(&px, w, 5, 5), [0, 0, 0], "outside, on a hatch line's x + y");
        assert_eq!(rgb(&px, w, 57, 53), [0, 0, 0], "outside, on a hatch line's x + y");
        let inside = (12..49).flat_map(|y| (12..49).map(move |x| (x, y)));
        let hatched = inside.filter(|&(x, y)| rgb(&px, w, x, y) == MASK_COLOUR).count();
        assert!((100..300).contains(&hatched), "about a tenth of the inside is hatch: {hatched} of 1369");
        // A mask partly off the picture, huge, not finite, or too short: what fits, no panic.
        let mut c = Canvas::rgb24(&mut px, w, h);
        c.mask(&[(-1e9, -1e9), (1e9, -1e9), (1e9, 1e9)]);
        c.mask(&[(0.0, 0.0), (f32::NAN, 3.0), (9.0, 9.0)]);
        c.mask(&[(0.0, 0.0), (9.0, 9.0)]);
        c.mask(&[]);
        Canvas::rgb24(&mut [], 0, 0).mask(&[(0.0, 0.0), (10.0, 0.0), (0.0, 10.0)]);
    }

    #[test]
    fn an_rgb24_canvas_too_short_for_its_size_draws_what_fits() {
        let mut rgb = vec![7u8; 10 * 3 * 2];
        let mut c = Canvas::rgb24(&mut rgb, 10, 5);
        c.outline([0.0, 0.0, 10.0, 5.0], 1, [1, 2, 3]);
        c.text(-100, -100, "é", [1, 2, 3]);
        assert_eq!(&rgb[..3], &[1, 2, 3]);
        assert_eq!(&rgb[30..33], &[1, 2, 3], "row 1, x 0: the left edge");
        assert_eq!(&rgb[33..36], &[7, 7, 7], "row 1, x 1: inside");
    }
}

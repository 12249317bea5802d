//! The view's pictures: a camera's latest frame line drawn ([`super::draw`]) on its latest
//! pixels ([`crate::view::ViewSource`]) or, without pixels, on a dark canvas of the
//! frame's size, encoded as JPEG. At most one encoding per camera per `1 / --view-fps`
//! seconds, whatever the number of clients: a request within that time gets the last one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use super::draw;
use crate::view::{ViewFrame, ViewSource};
use zcpipe_core::frame::MAX_CAMERAS;
use zcpipe_core::schema::FrameJson;

/// JPEG quality of the view's pictures (1..=100).
pub(crate) const JPEG_QUALITY: u8 = 80;

/// The largest picture the view draws, pixels (a frame line claiming more is refused).
pub(crate) const MAX_PIXELS: u64 = 8192 * 8192;

/// One encoded picture.
#[derive(Debug)]
pub struct Picture {
    /// The frame line whose boxes are drawn (`None`: no frame yet, a placeholder).
    pub(crate) det_seq: Option<u64>,
    /// The seq of the pixels under them (`None`: no pixels, the dark canvas).
    pub(crate) pixel_seq: Option<u64>,
    /// Width and height, pixels.
    pub width: u32,
    /// Height, pixels.
    pub height: u32,
    /// When it was encoded.
    pub at: Instant,
    /// The JPEG file.
    pub jpeg: Vec<u8>,
}

#[derive(Default)]
struct Slot {
    pixels: Option<ViewFrame>,
    picture: Option<Arc<Picture>>,
}

/// Draws and encodes each camera's pictures, keeping the last one of each.
pub(crate) struct Renderer {
    source: Mutex<Box<dyn ViewSource>>,
    slots: Vec<Mutex<Slot>>,
    /// JPEGs encoded per camera (outside the slots' locks: the stage's report reads them on
    /// the frame loop while a picture may be encoding).
    encoded: Vec<AtomicU64>,
    period: Duration,
    /// Each camera's masks, zones and lines, drawn under the boxes.
    shapes: draw::LiveShapes,
}

/// Encodes tight RGB24 rows as a JPEG of quality [`JPEG_QUALITY`].
pub fn jpeg(rgb: &[u8], width: u32, height: u32) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(rgb.len() / 8);
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, JPEG_QUALITY).encode(
        rgb,
        width,
        height,
        image::ExtendedColorType::Rgb8,
    )?;
    Ok(out)
}

impl Renderer {
    /// A renderer taking pixels from `source`, encoding each camera at most `fps` times a
    /// second (room for every camera a run may have, cameras added while it runs too).
    pub fn new(source: Box<dyn ViewSource>, fps: f64) -> Renderer {
        Renderer {
            source: Mutex::new(source),
            slots: (0..MAX_CAMERAS).map(|_| Mutex::default()).collect(),
            encoded: (0..MAX_CAMERAS).map(|_| AtomicU64::new(0)).collect(),
            period: Duration::from_secs_f64(1.0 / fps),
            shapes: draw::LiveShapes::default(),
        }
    }

    /// Each camera's shapes from now on (a camera's zones or lines changed while the stage runs).
    pub(crate) fn set_shapes(&self, shapes: Vec<draw::Shapes>) {
        *self.shapes.write().unwrap_or_else(|p| p.into_inner()) = shapes;
    }

    /// Draws each camera's `shapes` (masks, zones and lines; in camera order) on its pictures.
    pub fn with_shapes(mut self, shapes: draw::LiveShapes) -> Renderer {
        self.shapes = shapes;
        self
    }

    /// The shortest time between two encodings of one camera.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// Camera `camera` joined the run: its pixels from now on.
    pub(crate) fn add_camera(&self, camera: &str) {
        self.source.lock().unwrap_or_else(|p| p.into_inner()).add_camera(camera);
    }

    /// Why camera `cam` has no pixels now, if it has none.
    pub fn unavailable(&self, cam: usize) -> Option<String> {
        self.source.lock().unwrap_or_else(|p| p.into_inner()).unavailable(cam)
    }

    /// JPEGs encoded for camera `cam` so far.
    pub fn encoded(&self, cam: usize) -> u64 {
        self.encoded.get(cam).map_or(0, |n| n.load(Ordering::Relaxed))
    }

    /// Camera `cam`'s picture with the boxes of `frame` (its latest frame line; `None`
    /// before the first, a placeholder): the last one encoded if that was less than the
    /// period ago (or is of this very frame line and pixels), else a new one. Errors: a
    /// camera index out of range, a frame too large, the encoder's.
    pub fn picture(&self, cam: usize, name: &str, frame: Option<&FrameJson>) -> Result<Arc<Picture>> {
        let Some(slot) = self.slots.get(cam) else { bail!("no camera {cam}") };
        let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = &slot.picture {
            // A placeholder is not reused once a frame line is there, nor a frame's picture
            // for a placeholder.
            let same_kind = p.det_seq.is_some() == frame.is_some();
            if (same_kind && p.at.elapsed() < self.period)
                || (p.det_seq.is_some()
                    && p.det_seq == frame.map(|f| f.seq)
                    && p.pixel_seq.is_none()
                    && self.unavailable(cam).is_some())
            {
                return Ok(p.clone());
            }
        }
        // Pixels only now that a picture is wanted, and only other ones than those held: told
        // apart by capture time (CLOCK_MONOTONIC, which a restarted capture stage goes on
        // with), not by seq (which it starts again from 0).
        let held = slot.pixels.as_ref().map(|p| p.timestamp_ns);
        let got = self
            .source
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .latest(cam, None)
            .filter(|f| Some(f.timestamp_ns) != held);
        match got {
            Some(f) if f.is_whole() => slot.pixels = Some(f),
            Some(f) => log::warn!("camera {name}: the view's frame {} is {}x{} with {} bytes, not RGB24 of that size; keeping the last good one", f.seq, f.width, f.height, f.rgb.len()),
            None => {}
        }
        let (width, height) = match (&slot.pixels, frame) {
            (Some(p), _) => (p.width, p.height),
            (None, Some(f)) => (f.width, f.height),
            (None, None) => (640, 360),
        };
        if width == 0 || height == 0 || width as u64 * height as u64 > MAX_PIXELS {
            bail!("camera {name}: a {width}x{height} frame is no picture the view can draw");
        }
        let mut rgb = match &slot.pixels {
            Some(p) => p.rgb.to_vec(),
            None => {
                let why = self.unavailable(cam).unwrap_or_else(|| "no pixels yet".into());
                let note = if frame.is_none() {
                    format!("{name}: waiting for the first frame; {why}")
                } else {
                    format!("{name}: {why}")
                };
                draw::blank(width, height, &note)
            }
        };
        let mut canvas = draw::Canvas::rgb24(&mut rgb, width, height);
        if let Some(s) = self.shapes.read().unwrap_or_else(|p| p.into_inner()).get(cam) {
            draw::shapes(&mut canvas, s, frame);
        }
        if let Some(f) = frame {
            draw::detections(&mut canvas, f);
        }
        let jpeg = jpeg(&rgb, width, height)?;
        self.encoded[cam].fetch_add(1, Ordering::Relaxed);
        let p = Arc::new(Picture {
            det_seq: frame.map(|f| f.seq),
            pixel_seq: slot.pixels.as_ref().map(|p| p.seq),
            width,
            height,
            at: Instant::now(),
            jpeg,
        });
        slot.picture = Some(p.clone());
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::NoPixels;
    use zcpipe_core::schema::{DetectionJson, LatencyJson};

    /// A source with one fixed grey frame, counting its calls.
    struct Grey(Arc<std::sync::atomic::AtomicU64>);
    impl ViewSource for Grey {
        fn latest(&mut self, _camera: usize, newer_than: Option<u64>) -> Option<ViewFrame> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            (newer_than.is_none()).then(|| ViewFrame {
                seq: 4,
                timestamp_ns: 1,
                width: 160,
                height: 120,
                rgb: Arc::new(vec![128; 160 * 120 * 3]),
            })
        }
        fn unavailable(&self, _camera: usize) -> Option<String> {
            None
        }
    }

    fn frame(seq: u64) -> FrameJson {
        let d = DetectionJson {
            class_id: 0,
            label: "person".into(),
            score: 0.9,
            bbox: [40.0, 40.0, 200.0, 200.0],
            track_id: None,
            ..Default::default()
        };
        FrameJson {
            camera: "cam0".into(),
            seq,
            timestamp_ns: 1,
            width: 320,
            height: 240,
            latency_us: LatencyJson::default(),
            detections: vec![d],
            zones: None,
            skipped: None,
            npu: Default::default(),
            ..Default::default()
        }
    }

    fn decode(p: &Picture) -> image::RgbImage {
        image::load_from_memory_with_format(&p.jpeg, image::ImageFormat::Jpeg).unwrap().to_rgb8()
    }

    #[test]
    fn without_pixels_the_boxes_go_on_a_canvas_of_the_frame_size() {
        let r = Renderer::new(Box::new(NoPixels), 1000.0);
        let p = r.picture(0, "cam0", Some(&frame(7))).unwrap();
        assert_eq!((p.width, p.height, p.det_seq, p.pixel_seq), (320, 240, Some(7), None));
        let img = decode(&p);
        assert_eq!(img.dimensions(), (320, 240));
        let g = img.get_pixel(41, 120).0;
        assert!(g[1] > 200 && g[0] < 60 && g[2] < 60, "the left edge is green after JPEG: {g:?}");
        assert!(r.picture(MAX_CAMERAS, "cam16", None).is_err(), "past the cameras a run may have");
        // Nothing new (same frame line, no pixels to come): the same picture, not encoded again.
        std::thread::sleep(Duration::from_millis(2));
        let again = r.picture(0, "cam0", Some(&frame(7))).unwrap();
        assert!(Arc::ptr_eq(&p, &again));
        assert_eq!(r.encoded(0), 1);
    }

    #[test]
    fn zones_are_drawn_in_their_colour_with_their_counts_scaled_as_boxes() {
        let door = crate::track::Zone {
            name: "door".into(),
            points: vec![(220.0, 20.0), (300.0, 20.0), (300.0, 220.0), (220.0, 220.0)],
        };
        let shapes = draw::Shapes { zones: vec![door], ..Default::default() };
        let r = Renderer::new(Box::new(Grey(Arc::default())), 1000.0)
            .with_shapes(std::sync::Arc::new(std::sync::RwLock::new(vec![shapes])));
        let mut f = frame(3);
        f.detections.clear();
        f.zones = Some([("door".to_string(), [("person".to_string(), 1)].into())].into());
        let img = decode(&r.picture(0, "cam0", Some(&f)).unwrap());
        // The pixels are half the frame's size: the zone's right edge (x 300) is at 150.
        let amber = |p: [u8; 3]| p[0] > 200 && (130..220).contains(&p[1]) && p[2] < 80;
        let edge = img.get_pixel(150, 60).0;
        assert!(amber(edge), "the zone's edge is amber after JPEG: {edge:?}");
        let inside = img.get_pixel(130, 80).0;
        assert!(inside.iter().all(|v| v.abs_diff(128) < 8), "inside the zone, the camera's pixels: {inside:?}");
        // Its tag ("door: person 1") at the first vertex, (110, 10) scaled, moved left to fit.
        let tag = (0..160).filter(|&x| amber(img.get_pixel(x, 12).0)).count();
        assert!(tag > 20, "the tag's band: {tag} amber pixels");
    }

    #[test]
    fn lines_and_masks_are_drawn_scaled_as_boxes_with_the_lines_counts() {
        use zcpipe_core::schema::CrossingsJson;
        // A line drawn left to right at y 40 (in: below), a mask lower down; frame pixels.
        let door = crate::track::Line {
            name: "door".into(),
            points: vec![(40.0, 40.0), (280.0, 40.0)],
            point: Default::default(),
            band: None,
        };
        let mask = vec![(20.0, 140.0), (140.0, 140.0), (140.0, 220.0), (20.0, 220.0)];
        let shapes = draw::Shapes { lines: vec![door], masks: vec![mask], ..Default::default() };
        let r = Renderer::new(Box::new(Grey(Arc::default())), 1000.0)
            .with_shapes(std::sync::Arc::new(std::sync::RwLock::new(vec![shapes])));
        let mut f = frame(3);
        f.detections.clear();
        f.lines =
            Some([("door".to_string(), [("person".to_string(), CrossingsJson { into: 3, out: 2 })].into())].into());
        let img = decode(&r.picture(0, "cam0", Some(&f)).unwrap());
        // Half the frame's size: the line at y 20 from x 20 to 140, its arrow (20 px on the
        // picture) from (80, 20) down to (80, 40).
        let pale = |p: [u8; 3]| p[2] > 190 && p[1] > 170 && p[2] > p[0].saturating_add(30);
        let grey = |p: [u8; 3]| p.iter().all(|v| v.abs_diff(128) < 10);
        let on = img.get_pixel(40, 20).0;
        assert!(pale(on), "the line is pale blue after JPEG: {on:?}");
        let into = img.get_pixel(80, 26).0;
        assert!(pale(into), "the arrow below the line (in): {into:?}");
        let out = img.get_pixel(80, 14).0;
        assert!(grey(out), "nothing above it (out): {out:?}");
        // Its tag ("door: in 3 out 2") past the arrow's tip, rows 44..62, as wide as the picture.
        let tag = (0..160).filter(|&x| pale(img.get_pixel(x, 46).0)).count();
        assert!(tag > 40, "the tag's band: {tag} pale pixels");
        // The mask: (10, 70) to (70, 110), outlined in dark grey, hatched inside, nothing outside.
        let edge = img.get_pixel(40, 110).0;
        assert!(edge.iter().all(|v| *v < 90), "the mask's bottom edge is dark: {edge:?}");
        // A block of 52 x 32 pixels: a tenth of them on hatch lines inside the mask.
        let dark = |x0: u32, y0: u32| {
            (y0..y0 + 32)
                .flat_map(|y| (x0..x0 + 52).map(move |x| (x, y)))
                .filter(|&(x, y)| img.get_pixel(x, y).0[1] < 108)
                .count()
        };
        let (inside, beside) = (dark(14, 74), dark(96, 74));
        assert!(
            (80..400).contains(&inside) && beside == 0,
            "hatched inside the mask only: {inside} dark pixels inside, {beside} beside"
        );
    }

    #[test]
    fn pixels_are_read_only_when_a_picture_is_due() {
        let calls = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let r = Renderer::new(Box::new(Grey(calls.clone())), 0.5);
        let p = r.picture(0, "cam0", Some(&frame(1))).unwrap();
        assert_eq!((p.width, p.height, p.pixel_seq), (160, 120, Some(4)), "the pixels' size; boxes scaled to it");
        let img = decode(&p);
        let g = img.get_pixel(21, 50).0;
        assert!(g[1] > 200 && g[0] < 60, "the box edge scaled by 1/2: {g:?}");
        let inside = img.get_pixel(60, 60).0;
        assert!(inside.iter().all(|v| v.abs_diff(128) < 8), "the camera's pixels inside: {inside:?}");
        for seq in 2..10 {
            r.picture(0, "cam0", Some(&frame(seq))).unwrap();
        }
        assert_eq!(
            (calls.load(std::sync::atomic::Ordering::Relaxed), r.encoded(0)),
            (1, 1),
            "within the period: the last picture, no pixel read"
        );
    }
}

//! The display's boxes: a client of the publish stage's detections socket, as `zcpipe
//! watch` is, reading its lines with the socket's own types ([`zcpipe_core::schema`]:
//! frame lines with boxes in source-frame pixels; other lines are skipped). A thread
//! reads the socket, joins it again when the publish stage restarts (100 ms doubling to
//! 2 s), and keeps the newest frame's detections of the camera shown, with a generation
//! that changes only when they do (the overlay is redrawn then).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use zcpipe_core::schema::{CrossingsJson, DetectionJson, SocketLine};

/// The newest detections of the camera shown.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Latest {
    /// Changes whenever `dets`, the zones' or lines' counts or the frame size do (0: none yet).
    pub generation: u64,
    /// The frame size the boxes are in.
    pub frame: (u32, u32),
    /// The detections.
    pub dets: Vec<DetectionJson>,
    /// Each zone's tracked objects by label (frame lines of a camera with zones).
    pub zones: Option<BTreeMap<String, BTreeMap<String, u32>>>,
    /// Each line's crossings by label (frame lines of a camera with lines).
    pub crossings: Option<BTreeMap<String, BTreeMap<String, CrossingsJson>>>,
    /// Frame lines read (of this camera).
    pub lines: u64,
}

impl Latest {
    /// Takes one socket line: a frame line of `camera` (any camera when `camera` is empty)
    /// replaces the detections, and moves the generation if they changed. Other lines and
    /// lines that do not parse are ignored. Returns whether it was a frame line taken.
    pub(crate) fn take_line(&mut self, line: &str, camera: &str) -> bool {
        let Ok(SocketLine::Frame(l)) = SocketLine::parse(line) else { return false };
        if !camera.is_empty() && l.camera != camera {
            return false;
        }
        self.lines += 1;
        let frame = (l.width, l.height);
        if l.detections != self.dets
            || frame != self.frame
            || l.zones != self.zones
            || l.lines != self.crossings
            || self.generation == 0
        {
            self.dets = l.detections;
            self.frame = frame;
            self.zones = l.zones;
            self.crossings = l.lines;
            self.generation += 1;
        }
        true
    }
}

/// The reader thread's shared state.
pub struct Detections {
    latest: Arc<Mutex<Latest>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Detections {
    /// Starts reading `socket` for `camera`'s frame lines.
    pub fn start(socket: PathBuf, camera: String) -> Detections {
        let latest = Arc::new(Mutex::new(Latest::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (l, s) = (latest.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("detections".into())
            .spawn(move || read_loop(&socket, &camera, &l, &s))
            .ok();
        Detections { latest, stop, thread }
    }

    /// The newest detections.
    pub fn latest(&self) -> Latest {
        self.latest.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The generation now (cheap: no copy).
    pub fn generation(&self) -> u64 {
        self.latest.lock().unwrap_or_else(|p| p.into_inner()).generation
    }
}

impl Drop for Detections {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn read_loop(socket: &std::path::Path, camera: &str, latest: &Mutex<Latest>, stop: &AtomicBool) {
    log::info!("display: boxes from {} (they appear once the publish stage is up)", socket.display());
    zcpipe_core::schema::follow_lines(socket, stop, |line| {
        latest.lock().unwrap_or_else(|p| p.into_inner()).take_line(line, camera);
        true
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_lines_of_the_camera_move_the_generation_only_when_boxes_change() {
        let mut l = Latest::default();
        let line = r#"{"type":"frame","camera":"","seq":1,"timestamp_ns":5,"width":640,"height":480,"latency_us":{"capture":0,"scale":0,"infer":0,"publish":0,"total":0},"detections":[{"class_id":0,"label":"person","score":0.9,"box":[100,50,300,250]}]}"#;
        assert!(l.take_line(line, ""));
        assert_eq!((l.generation, l.frame, l.dets.len()), (1, (640, 480), 1));
        assert_eq!(l.dets[0].bbox, [100.0, 50.0, 300.0, 250.0]);
        // The same boxes again: no redraw.
        assert!(l.take_line(&line.replace("\"seq\":1", "\"seq\":2"), ""));
        assert_eq!((l.generation, l.lines), (1, 2));
        // Another camera's line, a notice, garbage: ignored.
        assert!(!l.take_line(&line.replace("\"camera\":\"\"", "\"camera\":\"door\""), "front"));
        assert!(!l.take_line(r#"{"type":"notice","stage":"infer"}"#, ""));
        assert!(!l.take_line("not json", ""));
        // No boxes any more: a change.
        let no_box = line.replace(r#"{"class_id":0,"label":"person","score":0.9,"box":[100,50,300,250]}"#, "");
        assert!(l.take_line(&no_box, ""));
        assert_eq!((l.generation, l.dets.len()), (2, 0));
        // A line's crossings moved, the boxes the same: a change (the tag's counts).
        let crossed =
            no_box.replace(r#","detections""#, r#","lines":{"door":{"person":{"in":1,"out":0}}},"detections""#);
        assert!(l.take_line(&crossed, ""));
        assert_eq!(l.generation, 3);
        assert_eq!(l.crossings.as_ref().unwrap()["door"]["person"], CrossingsJson { into: 1, out: 0 });
    }
}

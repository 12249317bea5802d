//! Other ways out for what the detections socket carries: the MQTT bridge, the web view,
//! snapshots. Each is an [`Output`] of the publish stage; the stage hands every line it
//! sends to its clients to every output too, in the same order.

use super::report::{OutputReport, PublishFacts};
use super::schema::{EndJson, SocketLine};

/// One way out of the publish stage besides the detections socket.
///
/// The stage calls [`Output::line`] on its frame loop, once per line (a frame, then its
/// events; a restart notice), so an output must never block there: it queues (bounded,
/// dropping the oldest and counting) and does its slow work (network, disk, encoding) on its
/// own thread. Errors inside an output are its own to log and count: the pipeline goes on.
pub trait Output {
    /// A short name for logs and the stage's report (`mqtt`, `http`, `snapshots`).
    fn name(&self) -> &'static str;
    /// One line, as the socket's clients get it. Must return in microseconds.
    fn line(&mut self, line: &SocketLine);
    /// Called on every turn of the stage's loop (also when no frame came, at least once per
    /// [`zcpipe_core::stage::IDLE_WAIT`]): for outputs that act by the clock.
    fn tick(&mut self) {}
    /// Counters for the stage's report (its `extra` under [`Output::name`]).
    fn report(&self) -> OutputReport;
    /// Each camera's masks, zones and lines changed while the stage runs: what is drawn
    /// from now on (the outputs that draw them keep them).
    fn shapes(&mut self, _shapes: &[crate::http::draw::Shapes]) {}
    /// Camera `camera` joined the run while the stage runs (the next camera index); its
    /// lines follow.
    fn camera_added(&mut self, _camera: &str) {}
    /// Camera `camera` was removed from the run (its place stays; its tracks ended).
    fn camera_removed(&mut self, _camera: &str) {}
    /// The stream ended (`end` is the end line clients get): flush within a bounded time
    /// and stop the output's threads.
    fn close(&mut self, end: &EndJson);
}

/// Where one output hands another a picture it took: the snapshot output gives the MQTT
/// bridge each snapshot for Home Assistant's image entity (and, for a new object, its
/// notice). Called on the giver's own thread; must not block.
pub type PictureSink = Box<dyn Fn(&Picture<'_>) + Send>;

/// A picture the snapshot output took.
#[derive(Clone, Copy, Debug)]
pub struct Picture<'a> {
    /// Its camera's name.
    pub camera: &'a str,
    /// The JPEG.
    pub jpeg: &'a [u8],
    /// The tracker's `new` event it was taken for; `None` for one of `--snapshot-every`.
    pub of_new: Option<&'a NewObject>,
    /// Its file name in the camera's folder of `--snapshot-dir`; `None` when the disk did not
    /// take it.
    pub file: Option<&'a str>,
}

/// A tracker's `new` event, as a snapshot taken for it names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewObject {
    /// The track.
    pub track_id: u64,
    /// Its label.
    pub label: String,
    /// The event's time, Unix ms (as its MQTT message says: the same id follows from it).
    pub time_ms: u64,
}

/// Every output of a run, called in order.
#[derive(Default)]
pub struct Outputs(pub Vec<Box<dyn Output>>);

impl Outputs {
    /// Hands `line` to every output.
    pub fn line(&mut self, line: &SocketLine) {
        for o in &mut self.0 {
            o.line(line);
        }
    }
    /// One clock turn for every output.
    pub fn tick(&mut self) {
        for o in &mut self.0 {
            o.tick();
        }
    }
    /// Each camera's new masks, zones and lines, for every output that draws them.
    pub fn shapes(&mut self, shapes: &[crate::http::draw::Shapes]) {
        for o in &mut self.0 {
            o.shapes(shapes);
        }
    }
    /// Camera `camera` joined the run, for every output.
    pub fn camera_added(&mut self, camera: &str) {
        for o in &mut self.0 {
            o.camera_added(camera);
        }
    }
    /// Camera `camera` left the run, for every output.
    pub fn camera_removed(&mut self, camera: &str) {
        for o in &mut self.0 {
            o.camera_removed(camera);
        }
    }
    /// Each output's counters, for the stage's report.
    pub fn report(&self, facts: &mut PublishFacts) {
        for o in &self.0 {
            facts.add(o.report());
        }
    }
    /// Ends every output, the last opened first: an output may feed one opened before it
    /// (the snapshots' last pictures go to the MQTT bridge), never one after it.
    pub fn close(&mut self, end: &EndJson) {
        for o in self.0.iter_mut().rev() {
            o.close(end);
        }
    }
}

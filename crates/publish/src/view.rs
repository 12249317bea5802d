//! Pixels for the web view: the seam between the publish stage's outputs that show frames
//! (the web view's MJPEG streams and snapshots) and whatever brings them the camera's
//! pixels (a second consumer of each capture pool).
//!
//! The web view asks for a frame only when a client wants a picture (an MJPEG client
//! connected, or a snapshot request), at most `--view-fps` times a second per camera, so a
//! provider reads a capture buffer (through its `CpuAccess` read guard) only then, never per
//! frame. [`TapPixels`] is that provider: [`super::pixels::Pixels`], a tap on each camera's
//! capture pool. While a camera's tap is not joined the view draws the boxes on a dark
//! canvas of the frame's size and says why there are no pixels ([`ViewSource::unavailable`];
//! the tests' `NoPixels` is a source that never has any).

use std::sync::Arc;

use zcpipe_core::id::StageId;

use super::pixels::Pixels;

/// One camera frame for the view: tight RGB24 rows, already converted by the provider.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ViewFrame {
    /// The capture sequence number of the frame (the frame lines' `seq`, per camera).
    pub seq: u64,
    /// Its capture time, CLOCK_MONOTONIC ns (the frame lines' `timestamp_ns`).
    pub timestamp_ns: u64,
    /// Width, pixels.
    pub width: u32,
    /// Height, pixels.
    pub height: u32,
    /// `width * height * 3` bytes: R, G, B per pixel, rows top to bottom, no padding
    /// (shared with the provider, which keeps its newest frame for other readers).
    pub rgb: Arc<Vec<u8>>,
}

impl ViewFrame {
    /// Whether `rgb` holds exactly `width * height` RGB24 pixels (the view refuses and logs
    /// a frame that does not, and goes on with its last good one).
    pub(crate) fn is_whole(&self) -> bool {
        self.rgb.len() as u64 == self.width as u64 * self.height as u64 * 3 && self.width > 0 && self.height > 0
    }
}

/// Where the view's pixels come from. Implemented by the capture-pool fan-out; called from
/// the view's own threads (one call at a time: the view holds it behind a mutex), never from
/// the frame loop, so a call may take milliseconds (a guard, a colour conversion) but should
/// not wait for a frame to come.
pub(crate) trait ViewSource: Send {
    /// The newest frame of camera `camera` (its index in
    /// [`super::PublishConfig::cameras`]) whose sequence number is above `newer_than`
    /// (`None`: any frame), as RGB24. `None`: nothing newer than that (the view keeps drawing
    /// on the frame it got last), or no pixels at all ([`ViewSource::unavailable`] says why).
    /// The detections drawn on it are the camera's latest frame line's, so the picture may
    /// be a frame or two ahead of its boxes (the view says which seq each has).
    fn latest(&mut self, camera: usize, newer_than: Option<u64>) -> Option<ViewFrame>;

    /// Why camera `camera` has no pixels now, in a few words written on its picture (`no
    /// pixels (fan-out not connected)`, `capture@door not reachable`); `None` when it has.
    fn unavailable(&self, camera: usize) -> Option<String>;

    /// Camera `camera` joined the run (the next camera index): its pixels from now on.
    fn add_camera(&mut self, _camera: &str) {}
}

/// The words on a picture drawn without pixels while no provider is connected.
#[cfg(test)]
pub(crate) const NO_PIXELS: &str = "no pixels (fan-out not connected)";

/// The capture pools' taps as the view's source: asking for a camera's frame keeps its tap
/// joined ([`Pixels::want`]: it leaves 10 s after the last ask), so pixels are read only
/// while someone watches.
pub(crate) struct TapPixels {
    pixels: std::sync::Arc<Pixels>,
}

impl TapPixels {
    /// The view's source over `pixels` (shared with the snapshots), the taps of the run's
    /// cameras ([`pixels`]).
    pub fn new(pixels: std::sync::Arc<Pixels>) -> TapPixels {
        TapPixels { pixels }
    }
}

/// Conversions a second per camera for snapshots when no web view sets `--view-fps`.
pub(crate) const SNAPSHOT_FPS: f64 = 5.0;

/// The taps on `cfg`'s cameras' capture stages in data path `data` (each at its listening
/// socket), converting at most `max_fps` frames a second per camera: one [`Pixels`] for the
/// web view and the snapshots.
pub fn pixels(
    cfg: &super::PublishConfig,
    data: &zcpipe_core::config::DataPath,
    max_fps: f64,
) -> std::sync::Arc<Pixels> {
    std::sync::Arc::new(
        Pixels::start(
            StageId::captures(&cfg.cameras).into_iter().map(|s| (s.to_string(), data.socket(&s))).collect(),
            max_fps,
        )
        .for_run(data.clone()),
    )
}

impl ViewSource for TapPixels {
    fn add_camera(&mut self, camera: &str) {
        self.pixels.add_camera(camera);
    }

    fn latest(&mut self, camera: usize, newer_than: Option<u64>) -> Option<ViewFrame> {
        self.pixels.want(camera);
        let f = self.pixels.latest(camera, newer_than)?;
        Some(ViewFrame { seq: f.seq, timestamp_ns: f.timestamp_ns, width: f.width, height: f.height, rgb: f.rgb })
    }

    fn unavailable(&self, camera: usize) -> Option<String> {
        if self.pixels.latest(camera, None).is_some() {
            return None;
        }
        let stage = self.pixels.upstream(camera).unwrap_or_default();
        let c = self.pixels.counters(camera);
        Some(if c.errors > 0 {
            format!("no pixels: {stage}'s frames cannot be shown (see the log)")
        } else if c.joined {
            format!("waiting for pixels from {stage}")
        } else if c.joins > 0 {
            format!("no pixels: {stage} went away (rejoining)")
        } else {
            format!("no pixels: {stage} not reached yet")
        })
    }
}

/// A view source that never has a frame (tests: the view without a capture pool).
#[cfg(test)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct NoPixels;

#[cfg(test)]
impl ViewSource for NoPixels {
    fn latest(&mut self, _camera: usize, _newer_than: Option<u64>) -> Option<ViewFrame> {
        None
    }

    fn unavailable(&self, _camera: usize) -> Option<String> {
        Some(NO_PIXELS.to_string())
    }
}

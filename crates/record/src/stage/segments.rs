//! Continuous recording (`--record-continuous S`): besides its event clips, a camera's whole
//! stream in segments of about `S` seconds (`DIR/CAMERA/segments/START.mp4`, rows of kind
//! `segment` in the index). A segment starts at a keyframe and closes at the first keyframe
//! at or after `S` seconds, where the next one starts, so no picture falls between two
//! segments; the segments of a camera whose stream restarted or went quiet close with what
//! they have. Retention removes them with the clips, oldest first.

use std::sync::Arc;

use zcpipe_clips::{ClipMeta, Kind};
use zcpipe_core::packets::Unit;

use super::State;

/// A segment whose camera sent nothing for this long closes (its camera went quiet).
const QUIET_NS: u64 = 10_000_000_000;

impl State {
    /// Unit `u` of camera `name`, for its segments (nothing without continuous recording).
    pub(super) fn segment_unit(&mut self, name: &str, u: &Arc<Unit>) {
        let Some(len) = self.cfg.continuous(name) else { return };
        let len_ns = len.as_nanos() as u64;
        let cam = self.camera(name);
        if let Some(seg) = cam.segment.as_mut() {
            // A keyframe due at the length that came a little early still ends the segment.
            let due = len_ns.saturating_sub(len_ns / 20);
            if !(u.key && u.mono_ns.saturating_sub(seg.writer.first_ns) >= due) {
                seg.writer.unit(u.clone());
                return;
            }
            // A keyframe starts a new group: what the segment holds is complete.
            seg.writer.seal();
            self.close_segment(name, None);
        }
        if u.key && self.paused.is_none() {
            let cam = self.camera(name);
            let (Some(hello), Some(tables)) = (cam.hello.clone(), cam.tables.clone()) else { return };
            if let Some(c) = self.start_file(name, &hello, tables, vec![u.clone()], Kind::Segment) {
                self.camera(name).segment = Some(c);
                self.report.segments += 1;
                self.report.open += 1;
            }
        }
    }

    /// Closes camera `name`'s segment (`cut`: why it is cut short).
    pub(super) fn close_segment(&mut self, name: &str, cut: Option<&str>) {
        if let Some(c) = self.camera(name).segment.take() {
            self.finish_file(name, c, ClipMeta::default(), cut);
        }
    }

    /// Closes the segments whose camera sent nothing for [`QUIET_NS`], and those whose
    /// ffmpeg stopped.
    pub(super) fn check_segments(&mut self, now_ns: u64) {
        let ended: Vec<String> = self
            .cameras
            .values()
            .filter(|c| {
                c.segment
                    .as_ref()
                    .is_some_and(|s| s.writer.failed() || now_ns.saturating_sub(s.writer.last_ns) > QUIET_NS)
            })
            .map(|c| c.name.clone())
            .collect();
        for name in ended {
            self.close_segment(&name, None);
        }
    }
}

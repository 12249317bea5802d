//! A client's request on its way to an engine, and how an engine runs it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use zcpipe_core::detections::{DetectionRecord, DetectionsDesc, MAX_DETECTIONS};
use zcpipe_core::frame::monotonic_ns;
use zcpipe_core::schema::FrameJson;
use zcpipe_core::service::{DropReason, Kind, Reply, VERSION};

use super::conn::{ClientBuf, ClientState};
use super::scratch::Scratch;
use super::Service;
use crate::{DetectorLane, InputSpec};

/// One request of a client, waiting in the scheduler or running. Dropping it (answered or
/// not) gives its place in the client's `request` queue back.
pub(crate) struct ClientJob {
    client: Arc<ClientState>,
    buffer: Arc<ClientBuf>,
    index: u32,
    seq: u64,
    kind: Kind,
    /// When it came, CLOCK_MONOTONIC ns (its "capture" stamp: `--max-age` counts from it).
    pub(crate) ts_ns: u64,
    /// Its client's scheduler source.
    pub(crate) source: usize,
}

impl ClientJob {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        client: Arc<ClientState>,
        buffer: Arc<ClientBuf>,
        index: u32,
        seq: u64,
        kind: Kind,
        ts_ns: u64,
        source: usize,
    ) -> ClientJob {
        if kind == Kind::Request {
            client.requests.fetch_add(1, Ordering::Relaxed);
        }
        ClientJob { client, buffer, index, seq, kind, ts_ns, source }
    }

    /// A video job: newest wins, `--max-age` applies.
    pub(crate) fn is_video(&self) -> bool {
        self.kind == Kind::Video
    }

    /// Answers that the job was not run.
    pub(crate) fn drop_with(self, reason: DropReason) {
        let t = self.client.totals();
        let counter = match reason {
            DropReason::Newer => &t.dropped_newer,
            DropReason::Age => &t.dropped_age,
            DropReason::Stopping => &t.dropped_stopping,
            DropReason::Rate => return self.answer(reason),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.answer(reason);
    }

    fn answer(self, reason: DropReason) {
        self.client.reply(&Reply::Dropped { v: VERSION, buffer: self.index, seq: self.seq, reason });
    }

    /// Runs the job on `lane`: the buffer read under its guard (an encoded picture decoded to
    /// NV12 first), letterboxed into `scratch`'s model input, the engine run, the answer
    /// sent. Returns when the engine ran (for its busy time); a buffer that cannot be made
    /// into the model's input is refused to its client (`Ok(None)`), while an engine's
    /// failure is the stage's (`Err`).
    pub(crate) fn run(
        self,
        lane: &mut (dyn DetectorLane + '_),
        scratch: &mut Scratch,
        spec: &InputSpec,
        service: &Service,
    ) -> anyhow::Result<Option<(Instant, Instant)>> {
        if self.client.gone.load(Ordering::Relaxed) {
            return Ok(None); // nobody to answer: the engine's time goes to others
        }
        let t0 = Instant::now();
        let input_layout = scratch.prepare(spec);
        let (lb, at) = match scratch.bring(&self.buffer, &input_layout, spec, service.rga, &service.totals) {
            Ok(x) => x,
            Err(e) => {
                let reason = format!("the picture in buffer {} cannot be used: {e:#}", self.index);
                self.client.reply(&Reply::Refused { v: VERSION, seq: Some(self.seq), reason, fatal: false });
                return Ok(None);
            }
        };
        let t1 = Instant::now();
        let dets = scratch.run(lane, at, &input_layout)?;
        let (start, end) = lane.last_run().filter(|r| r.0 >= t1).unwrap_or((t1, Instant::now()));
        let mut dd = DetectionsDesc {
            seq: self.seq,
            timestamp_ns: self.ts_ns,
            width: lb.src_w,
            height: lb.src_h,
            ..Default::default()
        };
        for (slot, x) in dd.dets.iter_mut().zip(dets.iter().take(MAX_DETECTIONS)) {
            *slot = DetectionRecord { class_id: x.class_id, score: x.score, bbox: lb.unmap_box(x.bbox) };
        }
        dd.count = dets.len().min(MAX_DETECTIONS) as u32;
        let us = |a: Instant, b: Instant| Some(b.saturating_duration_since(a).as_secs_f64() * 1e6);
        let total = (monotonic_ns().saturating_sub(self.ts_ns)) as f64 / 1e3;
        // capture: its wait for an engine; scale: the letterbox; infer: the engine.
        let waited = (total - t0.elapsed().as_secs_f64() * 1e6).max(0.0);
        let lat = [Some(waited), us(t0, t1), us(t1, Instant::now()), None, Some(total)];
        let frame = FrameJson::of_record(&dd, &self.client.name(), &service.model.labels, &lat);
        if self.client.reply(&Reply::Frame { v: VERSION, buffer: self.index, frame }) {
            service.totals.answered.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Some((start, end)))
    }
}

impl Drop for ClientJob {
    fn drop(&mut self) {
        if self.kind == Kind::Request {
            self.client.requests.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

//! The infer stage's process: load the model (failing fast on a bad one), ask the scale
//! stage for exactly the model's input, then detect on every frame and hand detections
//! (boxes mapped back to source-frame pixels) to the publish stage, in frame order.
//!
//! One engine (the ONNX, `none` and single-context RKNN backends) runs every frame on the
//! stage's thread (`run_single`). A detector with several engines (RKNN with
//! `--npu-cores`: one context per core, [`Detector::lanes`]) gets one worker thread per
//! engine, frames dispatched round-robin and results re-ordered by arrival
//! (`run_lanes`), so the cores work at the same time.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::{mpsc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::Context;
use zcpipe_core::{fail, Result};

use zcpipe_core::channel::Sender;
use zcpipe_core::data::resolve_data_path;
use zcpipe_core::detections::{DetectionRecord, DetectionsDesc, MAX_DETECTIONS};
use zcpipe_core::frame::{FrameDesc, RestartMark, Stage};
use zcpipe_core::link::{accept_hello, Conn, ControlMsg, Listener, WantedInput};
use zcpipe_core::metrics::{open_fd_count, Facts, FrameSpan, StageReport};
use zcpipe_core::pool::{offer_items, Frame, Upstream};
use zcpipe_core::ring::{RingCounters, RingPolicy};
use zcpipe_core::stage::{
    incoming, upstream_facts, Downstream, Drained, Incoming, StageCtx, Turn, DRAIN_TIMEOUT, IDLE_WAIT,
};

use super::heads::{load_anchors, HeadKind};
use super::labels::{resolve_labels, LabelSource};
use super::{open_detector, Detection, Detector, DetectorKind, DetectorLane, DetectorOptions, InferConfig, InputSpec};

/// Runs the infer stage with `cfg` (checked by the command line) until the scale stage
/// ends the stream, the stop flag is set or a neighbour hangs up; returns the exit code.
pub fn run(cfg: InferConfig, ctx: StageCtx<'_>) -> Result<i32> {
    let (model, mut det) = open_model(&cfg)?;
    let labels = load_labels(&cfg, &model, &*det)?;
    let spec = det.input_spec().clone();
    let no_detector = det.kind() == DetectorKind::None;
    describe_model(&cfg, &model, &*det, &spec, no_detector);

    let Joined { listener, down, input, bound } = join_chain(&ctx, &spec, &mut *det)?;
    let what = if no_detector {
        "frames without detections (--infer none)".to_string()
    } else {
        format!("{} detections", det.kind())
    };
    let out = Out::offer(down, 8, ctx.data.ring_policy, what, labels)?;
    let fds_setup = open_fd_count();
    ctx.ready(Instant::now());
    log::info!(
        "serving publish (pid {}); open fds after set-up: {fds_setup}",
        out.tx.as_ref().map_or(0, |t| t.conn().peer_pid)
    );
    let input = RefCell::new(input);
    let down = RefCell::new(Downstream::new(listener));

    let start = Instant::now();
    // Frames out are the span's frames: `span.tick` counts each record sent.
    let report = |ring: RingCounters, n_in: u64, span: FrameSpan, final_report: bool, mut extra: Facts| {
        // Each is borrowed by a frame loop only within a turn, never across a report.
        if let Ok(i) = input.try_borrow() {
            extra.extend(upstream_facts(&i));
        }
        if let Ok(d) = down.try_borrow() {
            extra.extend(d.facts());
        }
        let copy_in = input.try_borrow().ok().and_then(|i| i.current().and_then(|c| c.copy_counters()));
        ctx.reporter.send(&StageReport {
            frames_in: n_in,
            frames_out: span.frames,
            output_ring: Some(ring),
            copy_in,
            out_span: Some(span),
            ..ctx.report(start, final_report, extra)
        })
    };
    let io = Io { ctx: &ctx, input: &input, down: &down, spec: &spec, bound, stop: ctx.stop, start, report: &report };
    // Both loops end here however they end (end, signal, hang-up, error), so the final
    // report goes out every time; then the error, if any, ends the stage.
    let end = {
        let lanes = det.lanes();
        match lanes {
            Some(lanes) if lanes.len() > 1 => run_lanes(&io, lanes, out),
            other => {
                drop(other);
                run_single(&io, &mut *det, out)
            }
        }
    };
    let LoopEnd { ended, out, n_in, span } = end;
    let nonfinite = det.nonfinite_skipped();
    ctx.close(
        &mut (),
        ended,
        format!("{n_in} frames"),
        fds_setup,
        |_, end| {
            // Only a clean end is an end of stream downstream (as PoolProducer::end): after
            // an error publish sees us hang up.
            if end.clean {
                finish_publish(&out);
            }
            Drained {
                extras: vec![("device_reads_in_place", bound.into()), ("nonfinite_skipped", nonfinite.into())],
                ..Drained::nothing()
            }
        },
        |_, extras| report(out.counters(), n_in, span, true, extras),
    )
}

/// The set-up's first step: loads the model `cfg` names (its anchors too) and opens the
/// detector, warning about flags its backend or head ignores; returns the model's path
/// and the detector.
fn open_model(cfg: &InferConfig) -> Result<(std::path::PathBuf, Box<dyn Detector>)> {
    let model = resolve_data_path(&cfg.model);
    let anchors = cfg.anchors.as_deref().map(|p| load_anchors(&resolve_data_path(p))).transpose()?;
    let opts = DetectorOptions {
        model: model.clone(),
        score_threshold: cfg.score_threshold,
        nms_iou: cfg.nms_iou,
        npu_cores: cfg.npu_cores.clone(),
        head: cfg.head,
        anchors,
        channel_order: cfg.channel_order,
        placement: cfg.placement,
        input_size: cfg.input_size,
    };
    let det = open_detector(cfg.backend, &opts)?;
    if !opts.npu_cores.is_empty() && det.kind() != DetectorKind::Rknn {
        log::warn!("--npu-cores is for the rknn backend; the {} backend ignores it", det.kind());
    }
    if cfg.anchors.is_some() && det.head().is_some_and(|h| h.kind() != HeadKind::Yolov5Split) {
        log::warn!(
            "--anchors is for the yolov5-split head; the {} head ignores it",
            det.head().map_or(HeadKind::Auto, |h| h.kind())
        );
    }
    Ok((model, det))
}

/// The class labels: the model's own, `--labels`, or the built-in COCO list
/// ([`resolve_labels`]); says which.
fn load_labels(cfg: &InferConfig, model: &std::path::Path, det: &dyn Detector) -> Result<Vec<String>> {
    let label_file = cfg.labels.as_deref().map(resolve_data_path);
    let (labels, source) = resolve_labels(model, det.classes(), det.labels(), label_file.as_deref())?;
    log::info!(
        "labels: {} classes from {}",
        labels.len(),
        match source {
            LabelSource::Model => "the model's metadata".to_string(),
            LabelSource::File => label_file.as_deref().map_or_else(String::new, |p| p.display().to_string()),
            LabelSource::Coco80 => "the built-in COCO list".to_string(),
        }
    );
    Ok(labels)
}

/// Says what the stage will do with each frame: the detector and the input its model wants
/// (`spec`), or, with no detector, the frames it publishes bare; then the pre-processing.
fn describe_model(cfg: &InferConfig, model: &std::path::Path, det: &dyn Detector, spec: &InputSpec, no_detector: bool) {
    let lb = spec.letterbox;
    if no_detector {
        log::info!(
            "no detector (--infer none): frames are scaled to {}x{} ({}) {} with a {} letterbox and published without detections",
            spec.width,
            spec.height,
            if cfg.input_size.is_some() { "--input-size" } else { "YOLOX-Nano's input size" },
            spec.fourcc,
            lb.placement.describe()
        );
    } else {
        log::info!(
            "{} detector, model {} wants {}x{} {}, {} letterbox, pad {}",
            det.kind(),
            model.display(),
            spec.width,
            spec.height,
            spec.fourcc,
            lb.placement.describe(),
            lb.pad
        );
    }
    if let Some(head) = det.head() {
        let family = head.preprocess();
        let given = family.with(cfg.channel_order, cfg.placement);
        if given != family {
            log::info!(
                "pre-processing: {} as --channel-order/--letterbox ask; {} models are trained with {}",
                given.describe(),
                head.kind(),
                family.describe()
            );
        } else {
            log::info!("pre-processing: {} ({}'s own)", family.describe(), head.kind());
        }
    }
}

/// The stage's place in the chain once set up: see [`join_chain`].
struct Joined {
    /// The listening socket a restarted publish stage joins again on.
    listener: Listener,
    /// The publish stage's connection (its hello taken).
    down: Conn,
    /// The scale stage's hop.
    input: Upstream,
    /// Whether the detector imported the scale stage's pool (reads frames in place).
    bound: bool,
}

/// The set-up's last step: binds the stage's socket and waits for the publish stage, joins
/// the scale stage asking for exactly the model's input (`spec`), then lets the detector
/// import the scale stage's pool unless in copy mode.
fn join_chain(ctx: &StageCtx<'_>, spec: &InputSpec, det: &mut dyn Detector) -> Result<Joined> {
    let lb = spec.letterbox;
    let mut listener = Listener::bind(&ctx.data.socket(&ctx.id))?;
    // Downstream first: frames start flowing only once the whole chain is connected.
    let (down, _) = accept_hello(&mut listener, ctx.stop, ctx.data.connect_timeout, "publish")?;
    // An NPU reading the buffer in place needs its own row stride (spec.bytesperline); the
    // channel order is the fourcc, the placement and pad are the family's (or the flags').
    let want = WantedInput {
        width: spec.width,
        height: spec.height,
        fourcc: spec.fourcc.0,
        stride_align: 1,
        bytesperline: spec.bytesperline,
        pad: lb.pad,
        placement: lb.placement,
    };
    let hello =
        ControlMsg::Hello { stage: "infer".into(), accept: vec![spec.fourcc.0], want: Some(want), wait: ctx.data.wait };
    let input = Upstream::join(
        ctx.data.socket(&Stage::Scale.into()),
        Stage::Scale,
        hello,
        ctx.data.wait,
        ctx.data.spin,
        ctx.stop,
        ctx.data.connect_timeout,
    )?;
    let Some(first) = input.current() else { fail!("the scale stage hung up while we joined it") };
    log::info!("joined scale: {} ({} buffers, {})", first.offer.description, first.buffers().len(), first.offer.memory);
    // Zero-copy backends import the pool once; copy mode stays a plain pipeline (CPU reads).
    let bound = !ctx.data.copy_mode && bind(det, first)?;
    Ok(Joined { listener, down, input, bound })
}

/// Ends the detections hop after a clean end: tells publish the stream ended, then waits
/// (up to [`DRAIN_TIMEOUT`]) for it to take what is queued and hang up.
fn finish_publish(out: &Out) {
    if let Some(tx) = &out.tx {
        tx.finish();
        // Publish takes what is queued, then hangs up (at once if it is gone already).
        let t = Instant::now();
        while !tx.conn().peer_gone() && t.elapsed() < DRAIN_TIMEOUT {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// What both frame loops read: the stage's context (its loop skeleton), the scale stage's
/// pool, the model's input, whether the detector imported the pool (frames go to
/// `detect_bound`, never mapped), the stop flag, when the stage's main loop started (for
/// [`FrameSpan::tick`]) and the stats report (output ring counters, frames in, frames out).
struct Io<'a> {
    ctx: &'a StageCtx<'a>,
    /// The scale stage's hop (joined again if scale restarts).
    input: &'a RefCell<Upstream>,
    /// The listening socket a restarted publish stage joins again on.
    down: &'a RefCell<Downstream>,
    spec: &'a InputSpec,
    bound: bool,
    stop: &'a AtomicBool,
    start: Instant,
    #[allow(clippy::type_complexity)]
    report: &'a dyn Fn(RingCounters, u64, FrameSpan, bool, Facts),
}

/// How a frame loop ended: why (or the error that ended it), the detections sender (to
/// finish), frames in, and the frames out (how many, and when they went).
struct LoopEnd {
    ended: Result<&'static str>,
    out: Out,
    n_in: u64,
    span: FrameSpan,
}

/// Waits up to `timeout` for the next frame. A scale stage that restarted is joined again
/// ([`Upstream`]); its new pool is given to `rebind` (the detector imports it) before the
/// first frame from it. At end of stream, a publish stage gone for good (`out_gone`) is a
/// hang-up naming it.
fn next_frame(
    io: &Io<'_>,
    timeout: Duration,
    out_gone: impl FnOnce() -> bool,
    rebind: impl FnOnce(&zcpipe_core::pool::PoolConsumer) -> Result<()>,
) -> Result<Incoming<Frame>> {
    let mut input = io.input.borrow_mut();
    let joins = input.joins();
    let r = input.recv(timeout)?;
    if input.joins() != joins {
        if let Some(c) = input.current().filter(|_| io.bound) {
            rebind(c)?;
        }
    }
    incoming(r, "scale", "publish", out_gone)
}

/// Imports the scale stage's pool into the detector (RKNN: rknn_create_mem_from_fd per
/// buffer); whether the detector reads frames in place from now on.
fn bind(det: &mut dyn Detector, pool: &zcpipe_core::pool::PoolConsumer) -> Result<bool> {
    if pool.buffers().iter().any(|b| b.len() != 1) {
        return Ok(false);
    }
    let bufs: Vec<&zcpipe_core::dmabuf::DmaBuf> = pool.buffers().iter().map(|b| &b[0]).collect();
    Ok(det.bind_pool(&bufs)?)
}

/// The detections hop to the publish stage, kept when publish dies: records are dropped
/// (counted) while it is away, and a restarted publish stage that connects again gets a
/// fresh ring with the same labels; the first record it gets carries a [`RestartMark`].
struct Out {
    /// `None` while publish is away.
    tx: Option<Sender<DetectionsDesc>>,
    capacity: u32,
    policy: RingPolicy,
    what: String,
    labels: Vec<String>,
    /// Counters of the rings before the current one, and the records dropped while away.
    carried: RingCounters,
    /// When publish hung up, and the records dropped since.
    away: Option<(Instant, u64)>,
    mark: Option<RestartMark>,
}

impl Out {
    /// Offers the hop on `conn` ([`offer_items`]).
    fn offer(conn: Conn, capacity: u32, policy: RingPolicy, what: String, labels: Vec<String>) -> Result<Out> {
        let tx = offer_items(conn, capacity, policy, what.clone(), labels.clone())?;
        Ok(Out {
            tx: Some(tx),
            capacity,
            policy,
            what,
            labels,
            carried: RingCounters::default(),
            away: None,
            mark: None,
        })
    }

    /// A publish stage joined again on `conn`.
    fn reoffer(&mut self, conn: Conn) -> anyhow::Result<()> {
        let Some((since, lost)) = self.away else { fail!("the detections hop still has its publish stage") };
        let peer = conn.peer();
        self.tx = Some(offer_items(conn, self.capacity, self.policy, self.what.clone(), self.labels.clone())?);
        self.away = None;
        self.mark = Some(RestartMark { stage: Stage::Publish, lost: lost.min(u32::MAX as u64) as u32 });
        log::info!("the publish stage ({peer}) joined again after {:.1} s: a fresh detections ring; {lost} records lost meanwhile", since.elapsed().as_secs_f64());
        Ok(())
    }

    /// The live publish stage's pid, after a look at whether it hung up.
    fn live_consumer(&mut self) -> Option<i32> {
        if self.tx.as_ref().is_some_and(|t| t.conn().peer_gone()) {
            self.go_away(&zcpipe_core::Error::peer_gone("the publish stage hung up"));
        }
        self.tx.as_ref().map(|t| t.conn().peer_pid)
    }

    fn go_away(&mut self, why: &zcpipe_core::Error) {
        if let Some(tx) = self.tx.take() {
            let held = tx.counters().in_flight;
            self.carried = self.carried.then(RingCounters { in_flight: 0, ..tx.counters() });
            self.away = Some((Instant::now(), held));
            log::warn!("{why:#}: detections are dropped until it joins again");
        }
    }

    /// Counters over every ring, and the records dropped while publish was away.
    fn counters(&self) -> RingCounters {
        self.carried.then(self.tx.as_ref().map(|t| t.counters()).unwrap_or_default())
    }

    /// Sends a record (with the restart notice, if one is due); while publish is away it is
    /// dropped and counted.
    fn send(&mut self, mut dd: DetectionsDesc, stop: &AtomicBool) -> Result<()> {
        if let Some(m) = self.mark {
            dd.flags = m.mark(dd.flags);
        }
        if let Some(tx) = &mut self.tx {
            match tx.send(dd, stop) {
                Ok(sent) => {
                    // A record dropped from the ring hands its notice to the next one.
                    self.mark = match sent {
                        zcpipe_core::channel::Sent::Dropped(d) => RestartMark::from_flags(d.flags),
                        zcpipe_core::channel::Sent::Queued => None,
                    };
                    return Ok(());
                }
                Err(e @ zcpipe_core::Error::PeerGone { .. }) => self.go_away(&e),
                Err(e) => return Err(e),
            }
        }
        self.carried.produced += 1;
        self.carried.dropped += 1;
        if let Some((_, lost)) = &mut self.away {
            *lost += 1;
        }
        Ok(())
    }
}

/// Serves a publish stage that connects again (see [`Downstream::serve`]).
fn serve_publish(io: &Io<'_>, out: &mut Out) {
    io.down.borrow_mut().serve(out, |o, _hello| o.live_consumer(), |o, conn, _hello| o.reoffer(conn));
}

/// Stamps a received frame's arrival and checks it is the model's input.
fn arrived(frame: &Frame, spec: &InputSpec) -> Result<FrameDesc> {
    let mut d = *frame.desc();
    d.stamp_in(Stage::Infer);
    let l = d.layout;
    if l.fourcc != spec.fourcc || l.width != spec.width || l.height != spec.height {
        fail!(
            "scale sent a {}x{} {} frame; the model needs {}x{} {}",
            l.width,
            l.height,
            l.fourcc,
            spec.width,
            spec.height,
            spec.fourcc
        );
    }
    Ok(d)
}

/// The detections record of frame `d`: boxes mapped back to source-frame pixels (at most
/// [`MAX_DETECTIONS`]), stamps carried over; the infer hand-off stamp is set by [`send`].
fn record(d: &FrameDesc, dets: &[Detection]) -> DetectionsDesc {
    let lb = d.letterbox;
    let mut dd = DetectionsDesc {
        seq: d.seq,
        timestamp_ns: d.timestamp_ns,
        stamps: d.stamps,
        width: lb.src_w,
        height: lb.src_h,
        flags: d.flags,
        ..Default::default()
    };
    for (slot, x) in dd.dets.iter_mut().zip(dets.iter().take(MAX_DETECTIONS)) {
        *slot = DetectionRecord { class_id: x.class_id, score: x.score, bbox: lb.unmap_box(x.bbox) };
    }
    dd.count = dets.len().min(MAX_DETECTIONS) as u32;
    dd
}

/// Stamps the hand-off (CLOCK_MONOTONIC, ns) and sends a record to the publish stage.
fn send(out: &mut Out, mut dd: DetectionsDesc, stop: &AtomicBool) -> Result<()> {
    dd.stamps[2 * Stage::Infer as usize + 1] = zcpipe_core::frame::monotonic_ns();
    out.send(dd, stop)
}

/// One engine: every frame is detected on this thread, then published.
fn run_single(io: &Io<'_>, det: &mut dyn Detector, out: Out) -> LoopEnd {
    let mut st = (out, 0u64, FrameSpan::default());
    let ended = io.ctx.run_loop(
        &mut st,
        |(out, n_in, span)| (io.report)(out.counters(), *n_in, *span, false, Facts::default()),
        |(out, n_in, span)| {
            serve_publish(io, out);
            let frame = match next_frame(io, IDLE_WAIT, || false, |c| bind(det, c).map(drop))? {
                Incoming::Item(f) => f,
                Incoming::Eos => return Ok(Turn::End("end of stream")),
                Incoming::Idle => return Ok(Turn::Next),
            };
            *n_in += 1;
            let d = arrived(&frame, io.spec)?;
            det.before_frame(&d);
            let dets = if io.bound {
                // The device reads the buffer in place: no CPU mapping, no sync ioctl here.
                det.detect_bound(&frame).with_context(|| format!("inference on frame {}", d.seq))?
            } else {
                let g = frame.read()?;
                det.detect(g[0].bytes(), &d.layout).with_context(|| format!("inference on frame {}", d.seq))?
            };
            drop(frame); // the scale buffer goes back before we publish
            send(out, record(&d, &dets), io.stop)?;
            span.tick(io.start);
            Ok(Turn::Next)
        },
    );
    let (out, n_in, span) = st;
    LoopEnd { ended, out, n_in, span }
}

/// Frames one lane may hold: the one its engine runs and one queued behind it, so the
/// engine starts its next frame without waiting for the dispatcher.
const FRAMES_PER_LANE: usize = 2;

/// How long the dispatcher waits for a frame while lanes hold frames. A frame's loan goes
/// back through the scale ring's consumer, which is locked while the dispatcher waits in
/// it (`PoolConsumer::recv`), so a lane that finished waits at most this long to return
/// its buffer; with no frame in flight the dispatcher waits [`IDLE_WAIT`].
const BUSY_WAIT: Duration = Duration::from_millis(1);

/// A frame on its way to a lane.
struct Job {
    /// Dispatch number: results are published in this order (the order frames came in).
    n: u64,
    /// The loan: dropped by the lane as soon as its engine is done with the frame.
    frame: Frame,
    /// The descriptor, stamped on arrival.
    desc: FrameDesc,
}

/// What the dispatcher and the lanes share, under one mutex.
struct Shared {
    out: Out,
    /// Records of dispatched frames not yet published, from dispatch number `next_pub` on;
    /// `None` until that frame's lane is done: the reorder buffer (at most
    /// `FRAMES_PER_LANE * lanes` long).
    pending: VecDeque<Option<DetectionsDesc>>,
    /// Dispatch number of `pending[0]`.
    next_pub: u64,
    /// Frames each lane holds (running or queued).
    held: Vec<usize>,
    /// The records published: how many, and when they went out.
    span: FrameSpan,
    /// When the stage's main loop started.
    start: Instant,
    /// The first error of a lane (or of publishing); it ends the stage.
    error: Option<zcpipe_core::Error>,
}

impl Shared {
    /// Stores the record of dispatch number `n` and publishes every record now at the head
    /// of the order.
    fn done(&mut self, n: u64, dd: DetectionsDesc, stop: &AtomicBool) -> Result<()> {
        let slot = n.checked_sub(self.next_pub).and_then(|k| self.pending.get_mut(k as usize));
        *slot.with_context(|| {
            format!("result for dispatch number {n}, which is not pending (next to publish: {})", self.next_pub)
        })? = Some(dd);
        while self.pending.front().is_some_and(Option::is_some) {
            let Some(Some(dd)) = self.pending.pop_front() else { break };
            self.next_pub += 1;
            send(&mut self.out, dd, stop)?;
            self.span.tick(self.start);
        }
        Ok(())
    }

    fn fail(&mut self, e: zcpipe_core::Error) {
        if self.error.is_none() {
            self.error = Some(e);
        }
    }
}

fn lock(m: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Several engines (RKNN contexts on their own NPU cores): one worker thread per lane.
///
/// This thread receives frames and dispatches them round-robin, frame `k` to lane
/// `k % lanes`; it takes a frame from the ring only when that lane holds fewer than
/// [`FRAMES_PER_LANE`] frames and the lanes together hold fewer than the scale pool's
/// buffers minus one, so the scaler always has a buffer to write and, under drop-oldest,
/// the ring (not this stage) decides which frames are skipped. Each lane runs its frame,
/// drops the loan at once (the buffer goes back to the scaler) and stores the record in the
/// reorder buffer; whichever lane completes the head of the order publishes it and every
/// record behind it that is ready, so records leave in frame order. On stop or end of
/// stream the dispatcher stops taking frames, the lanes finish what they hold (published
/// as usual) and are joined. The first lane error stops the dispatch; queued frames are
/// given back unrun and the stage ends with that error.
fn run_lanes(io: &Io<'_>, lanes: Vec<Box<dyn DetectorLane + '_>>, out: Out) -> LoopEnd {
    let n = lanes.len();
    let pool = io.input.borrow().current().map_or(1, |c| c.buffers().len());
    let cap = (n * FRAMES_PER_LANE).min(pool.saturating_sub(1)).max(1);
    let names: Vec<String> = lanes.iter().map(|l| l.describe()).collect();
    log::info!(
        "{n} lanes on worker threads ({}), frames dispatched round-robin, detections published in frame order; up to {cap} frames in flight ({pool} scaler buffers, one kept for the scaler{})",
        names.join(", "),
        if cap < n { format!(": --scale-buffers {} lets every lane run at once", n + 1) } else { String::new() }
    );
    let shared = Mutex::new(Shared {
        out,
        pending: VecDeque::new(),
        next_pub: 0,
        held: vec![0; n],
        span: FrameSpan::default(),
        start: io.start,
        error: None,
    });
    let cv = Condvar::new();
    let (bound, stop) = (io.bound, io.stop);
    let mut n_in = 0u64;
    let dispatched = std::thread::scope(|scope| -> Result<&'static str> {
        let mut txs = Vec::with_capacity(n);
        for (i, mut lane) in lanes.into_iter().enumerate() {
            let (tx, rx) = mpsc::channel::<Job>();
            let (shared, cv) = (&shared, &cv);
            std::thread::Builder::new()
                .name(format!("infer-lane-{i}"))
                .spawn_scoped(scope, move || lane_loop(&mut *lane, i, rx, shared, cv, bound, stop))
                .with_context(|| format!("cannot start the worker thread of {}", names[i]))?;
            txs.push(tx);
        }
        dispatch(io, &txs, &shared, &cv, cap, &mut n_in)
        // `txs` drops here: each lane finishes what it holds and returns; the scope joins.
    });
    let s = shared.into_inner().unwrap_or_else(|p| p.into_inner());
    // A lane's error is the cause: the dispatcher only stopped because of it.
    let ended = match s.error {
        Some(e) => Err(e),
        None => dispatched,
    };
    LoopEnd { ended, out: s.out, n_in, span: s.span }
}

/// The dispatcher of [`run_lanes`]: returns why it stopped; counts the frames that came in
/// in `n_in`.
fn dispatch(
    io: &Io<'_>,
    txs: &[mpsc::Sender<Job>],
    shared: &Mutex<Shared>,
    cv: &Condvar,
    cap: usize,
    n_in: &mut u64,
) -> Result<&'static str> {
    let mut st = (n_in, 0u64);
    io.ctx.run_loop(
        &mut st,
        |(n_in, _)| {
            let s = lock(shared);
            (io.report)(s.out.counters(), **n_in, s.span, false, Facts::default())
        },
        |(n_in, next)| {
            let lane = (*next % txs.len() as u64) as usize;
            serve_publish(io, &mut lock(shared).out);
            let busy = {
                let s = lock(shared);
                if s.error.is_some() {
                    return Ok(Turn::End("a lane failed"));
                }
                let held: usize = s.held.iter().sum();
                if s.held[lane] >= FRAMES_PER_LANE || held >= cap {
                    // Frames wait in the ring (and drop there under drop-oldest) until a lane
                    // gives one back.
                    drop(cv.wait_timeout(s, IDLE_WAIT));
                    return Ok(Turn::Next);
                }
                held > 0
            };
            let wait = if busy { BUSY_WAIT } else { IDLE_WAIT };
            // The lanes imported the old pool and borrow the detector while they run: a
            // restarted scale stage's pool needs a restarted infer stage to bind it.
            let rebind = |_: &zcpipe_core::pool::PoolConsumer| -> Result<()> {
                fail!("the scale stage restarted with a new pool, which the NPU lanes cannot import while they run; the infer stage restarts to bind it")
            };
            let frame = match next_frame(io, wait, || false, rebind)? {
                Incoming::Item(f) => f,
                Incoming::Eos => return Ok(Turn::End("end of stream")),
                Incoming::Idle => return Ok(Turn::Next),
            };
            **n_in += 1;
            let desc = arrived(&frame, io.spec)?;
            {
                let mut s = lock(shared);
                s.pending.push_back(None);
                s.held[lane] += 1;
            }
            if txs[lane].send(Job { n: *next, frame, desc }).is_err() {
                fail!("the worker thread of infer lane {lane} is gone");
            }
            *next += 1;
            Ok(Turn::Next)
        },
    )
}

/// A lane's worker: runs each frame it is given on its engine, gives the loan back, then
/// files the record (see [`run_lanes`]). Returns when the dispatcher drops its sender.
#[allow(clippy::too_many_arguments)]
fn lane_loop(
    lane: &mut (dyn DetectorLane + '_),
    i: usize,
    jobs: mpsc::Receiver<Job>,
    shared: &Mutex<Shared>,
    cv: &Condvar,
    bound: bool,
    stop: &AtomicBool,
) {
    for Job { n, frame, desc } in jobs {
        let failed = lock(shared).error.is_some();
        let result = (!failed).then(|| {
            if bound {
                lane.detect_bound(&frame)
            } else {
                frame.read().and_then(|g| lane.detect(g[0].bytes(), &desc.layout))
            }
        });
        drop(frame); // the scale buffer goes back as soon as the engine is done with it
        let mut s = lock(shared);
        s.held[i] -= 1;
        match result {
            None => {} // another lane failed: the frame is given back unrun
            Some(Ok(dets)) => {
                if let Err(e) = s.done(n, record(&desc, &dets), stop) {
                    s.fail(e);
                }
            }
            Some(Err(e)) => s.fail(e.context(format!("inference on frame {} ({})", desc.seq, lane.describe())).into()),
        }
        drop(s);
        cv.notify_all();
    }
}

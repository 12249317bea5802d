//! The infer stage's process: load the model (failing fast on a bad one), ask the scale
//! stage for exactly the model's input, then detect on the frames the scheduler picks
//! ([`crate::sched`]: `--max-age`, `--weight`, fair share between cameras) and hand
//! detections (boxes mapped back to source-frame pixels) to the publish stage, each camera's
//! in frame order.
//!
//! One engine (the ONNX, `none` and single-context RKNN backends) runs the frames on the
//! stage's thread (`single`). A detector with several engines (RKNN with `--npu-cores` and
//! `--npu-contexts-per-core`: contexts sharing one model, [`Detector::lanes`]) gets one
//! worker thread per engine, each taking the frame the scheduler picks when it is free,
//! results re-ordered by pick (`lanes`), so the cores work at the same time.

use std::cell::RefCell;
use std::sync::atomic::AtomicBool;

use std::time::{Duration, Instant};

use zcpipe_core::{fail, Result};

use zcpipe_core::channel::Sender;
use zcpipe_core::data::resolve_data_path;
use zcpipe_core::detections::{DetectionRecord, DetectionsDesc, Skipped, MAX_DETECTIONS};
use zcpipe_core::frame::{camera_of, monotonic_ns, FrameDesc, RestartMark, Stage, MAX_CAMERAS};
use zcpipe_core::link::{accept_hello, Conn, ControlMsg, Listener, WantedInput};
use zcpipe_core::metrics::{open_fd_count, Facts, FrameSpan, StageReport};
use zcpipe_core::pool::{offer_items, Frame, Upstream};
use zcpipe_core::ring::{RingCounters, RingPolicy};
use zcpipe_core::stage::{incoming, upstream_facts, Downstream, Drained, Incoming, StageCtx, DRAIN_TIMEOUT};

use super::heads::{load_anchors, HeadKind};
use super::labels::{resolve_labels, LabelSource};
use super::report::{BusyMeter, InferFacts};
use super::sched::Scheduler;
use super::service::{ClientJob, Model, Service};
use super::{open_detector, Detection, Detector, DetectorKind, DetectorOptions, InferConfig, InputSpec, OneLane};

/// Runs the infer stage with `cfg` (checked by the command line) until the scale stage
/// ends the stream, the stop flag is set or a neighbour hangs up; returns the exit code.
pub fn run(cfg: InferConfig, ctx: StageCtx<'_>) -> Result<i32> {
    let (model, mut det) = open_model(&cfg)?;
    let labels = load_labels(&cfg, &model, &*det)?;
    let spec = det.input_spec().clone();
    let no_detector = det.kind() == DetectorKind::None;
    describe_model(&cfg, &model, &*det, &spec, no_detector);

    let (listener, down) = accept_publish(&ctx)?;
    let what = if no_detector {
        "frames without detections (--infer none)".to_string()
    } else {
        format!("{} detections", det.kind())
    };
    let model_info = Model {
        input: [spec.width, spec.height],
        detector: det.kind().to_string(),
        labels: std::sync::Arc::new(labels.clone()),
    };
    let out = Out::offer(down, 8, ctx.data.ring_policy, what, labels)?;
    // Bound before the stage says it is ready: a client that sees the pipeline up finds it.
    let service = cfg.service.clone().map(|c| Service::bind(c, model_info)).transpose()?;
    // Without it the stage runs as before, only without live changes.
    let control = live::Control::bind(&ctx.data.run_dir);
    // Last: scale's frames flow from here on, so nothing else may be left to set up (a
    // frame that waited for it would be replaced by a newer one).
    let (input, bound) = join_scale(&ctx, &spec, &mut *det)?;
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
    let io = Io {
        ctx: &ctx,
        input: &input,
        down: &down,
        spec: &spec,
        bound,
        stop: ctx.stop,
        start,
        report: &report,
        sched: &cfg.sched,
        contexts_per_core: cfg.contexts_per_core,
        cpu0_us: zcpipe_core::metrics::cpu_us(),
        service: service.as_ref(),
        control: &control,
    };
    // Both loops end here however they end (end, signal, hang-up, error), so the final
    // report goes out every time; then the error, if any, ends the stage.
    let end = {
        // With the service on, even one engine runs on a lane's thread: a client's request
        // wakes it at once, where the one-engine loop would see it at its next turn.
        let serving = io.service.is_some();
        let lanes = det.lanes();
        match lanes {
            Some(lanes) if lanes.len() > 1 || (serving && lanes.len() == 1) => run_lanes(&io, lanes, out),
            other => {
                drop(other);
                if serving {
                    run_lanes(&io, vec![Box::new(OneLane(&mut *det))], out)
                } else {
                    run_single(&io, &mut *det, out)
                }
            }
        }
    };
    let LoopEnd { ended, out, n_in, span, facts } = end;
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
        |_, mut extras| {
            extras.extend_from(facts);
            report(out.counters(), n_in, span, true, extras)
        },
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
        contexts_per_core: cfg.contexts_per_core,
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

/// The set-up's first link: binds the stage's socket and waits for the publish stage
/// (downstream first: frames start flowing only once the whole chain is connected); returns
/// the listener a restarted publish stage joins again on, and publish's connection.
fn accept_publish(ctx: &StageCtx<'_>) -> Result<(Listener, Conn)> {
    let mut listener = Listener::bind(&ctx.data.socket(&ctx.id))?;
    let (down, _) = accept_hello(&mut listener, ctx.stop, ctx.data.connect_timeout, "publish")?;
    Ok((listener, down))
}

/// The set-up's last step: joins the scale stage asking for exactly the model's input
/// (`spec`), then lets the detector import the scale stage's pool unless in copy mode;
/// returns the hop and whether the detector imported the pool (reads frames in place).
fn join_scale(ctx: &StageCtx<'_>, spec: &InputSpec, det: &mut dyn Detector) -> Result<(Upstream, bool)> {
    let lb = spec.letterbox;
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
    Ok((input, bound))
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
    /// The scheduler's settings.
    sched: &'a super::sched::SchedConfig,
    /// Engines per NPU core (for the report).
    contexts_per_core: u32,
    /// The process's CPU time (user + system, µs) when the frame loop began.
    cpu0_us: u64,
    /// The inference service, when on.
    service: Option<&'a Service>,
    /// Where the supervisor hands over the changes taken live.
    control: &'a live::Control,
}

/// How a frame loop ended: why (or the error that ended it), the detections sender (to
/// finish), frames in, and the frames out (how many, and when they went).
struct LoopEnd {
    ended: Result<&'static str>,
    out: Out,
    n_in: u64,
    span: FrameSpan,
    /// The scheduler's and the cores' numbers at the end ([`InferFacts`]).
    facts: Facts,
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
        self.mark = Some(RestartMark::restart(Stage::Publish, lost));
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
/// [`MAX_DETECTIONS`]), stamps carried over, the frames of its camera passed over before it
/// (`skipped`), the NPU cores' busy time so far; the infer hand-off stamp is set by [`send`].
fn record(d: &FrameDesc, dets: &[Detection], skipped: Skipped, npu_busy_us: [u64; 4]) -> DetectionsDesc {
    let lb = d.letterbox;
    let mut dd = DetectionsDesc {
        seq: d.seq,
        timestamp_ns: d.timestamp_ns,
        stamps: d.stamps,
        width: lb.src_w,
        height: lb.src_h,
        flags: d.flags,
        skipped,
        npu_busy_us,
        ..Default::default()
    };
    for (slot, x) in dd.dets.iter_mut().zip(dets.iter().take(MAX_DETECTIONS)) {
        *slot = DetectionRecord { class_id: x.class_id, score: x.score, bbox: lb.unmap_box(x.bbox) };
    }
    dd.count = dets.len().min(MAX_DETECTIONS) as u32;
    dd
}

/// Each camera's frames passed over since its last record (the scheduler's drops, with the
/// rate skips they carried), added to its next record so that publish can tell a sequence
/// gap that is a skip from a drop.
struct Carry([Skipped; MAX_CAMERAS]);

impl Carry {
    fn new() -> Carry {
        Carry([Skipped::default(); MAX_CAMERAS])
    }

    fn at(&mut self, j: &Job) -> &mut Skipped {
        &mut self.0[camera_of(j.desc.flags) % MAX_CAMERAS]
    }

    /// `j` was replaced by a newer frame of its camera.
    fn replaced(&mut self, j: &Job) {
        let c = self.carried(j);
        c.newer = c.newer.saturating_add(1);
    }

    /// `j`'s own skips (rate, still), carried to its camera's next record.
    fn carried(&mut self, j: &Job) -> &mut Skipped {
        let (rate, still) = (j.desc.skipped_rate, j.desc.skipped_still);
        let c = self.at(j);
        c.rate = c.rate.saturating_add(rate);
        c.still = c.still.saturating_add(still);
        c
    }

    /// `j` waited past `--max-age`.
    fn expired(&mut self, j: &Job) {
        let c = self.carried(j);
        c.age = c.age.saturating_add(1);
    }

    /// What record `j` carries: its camera's carried counts and its own, and its wait.
    fn take(&mut self, j: &Job, waited: Duration) -> Skipped {
        self.carried(j);
        let c = std::mem::take(self.at(j));
        Skipped { wait_us: waited.as_micros().min(u32::MAX as u128) as u32, ..c }
    }
}

/// What waits for an engine: a camera's frame, or a request of a service client. Not boxed:
/// a camera's frame is the common case and costs no allocation on its way through.
#[allow(clippy::large_enum_variant)]
enum Work {
    Frame(Job),
    Client(ClientJob),
}

/// The first scheduler source of the service's clients (cameras come first).
const CLIENT_BASE: usize = MAX_CAMERAS;

/// The frames waiting for an engine: the scheduler, and what each camera passed over since
/// its last record. Both frame loops go through it, so what a frame's record carries is
/// decided in one place.
struct Queue {
    sched: Scheduler<Work>,
    carry: Carry,
}

impl Queue {
    fn new(io: &Io<'_>) -> Queue {
        Queue { sched: Scheduler::new(io.sched.clone(), newest_wins(io)), carry: Carry::new() }
    }

    /// Takes in `jobs`, taken from the ring at `now_ns`; returns the frames they replaced (a
    /// newer frame of the same camera came), for the caller to give back outside any lock.
    fn admit(&mut self, jobs: Vec<Job>, now_ns: u64) -> Vec<Work> {
        let mut replaced = Vec::new();
        for j in jobs {
            let ts = j.desc.timestamp_ns;
            if let Some(old) = self.sched.admit(camera_of(j.desc.flags), Work::Frame(j), ts, now_ns) {
                if let Work::Frame(f) = &old {
                    self.carry.replaced(f);
                }
                replaced.push(old);
            }
        }
        replaced
    }

    /// Takes in a client's job; returns the older video job of that client it replaced.
    fn admit_client(&mut self, job: ClientJob) -> Option<ClientJob> {
        let (source, ts, video) = (job.source, job.ts_ns, job.is_video());
        match self.sched.admit_as(source, Work::Client(job), ts, monotonic_ns(), video) {
            Some(Work::Client(old)) => Some(old),
            _ => None,
        }
    }

    /// The frame to run now with the skips its record carries (`None`: nothing waits), and
    /// the frames dropped for `--max-age`, for the caller to give back outside any lock.
    fn pick(&mut self) -> (Option<(Work, Skipped)>, Vec<Work>) {
        let mut expired = Vec::new();
        let picked = self.sched.pick(monotonic_ns(), &mut expired);
        for old in &expired {
            if let Work::Frame(f) = old {
                self.carry.expired(f);
            }
        }
        let picked = picked.map(|p| {
            let skipped = match &p.item {
                Work::Frame(f) => self.carry.take(f, p.waited),
                Work::Client(_) => Skipped::default(),
            };
            (p.item, skipped)
        });
        (picked, expired)
    }
}

/// Stamps the hand-off (CLOCK_MONOTONIC, ns) and sends a record to the publish stage.
fn send(out: &mut Out, mut dd: DetectionsDesc, stop: &AtomicBool) -> Result<()> {
    dd.stamps[2 * Stage::Infer as usize + 1] = monotonic_ns();
    out.send(dd, stop)
}

/// A frame on its way to an engine: the loan and its descriptor, stamped on arrival.
struct Job {
    frame: Frame,
    desc: FrameDesc,
}

/// Takes frames from the scale ring, up to `room`: the first within `wait`, the rest that are
/// already there. Returns them and whether the stream ended. A scale stage that restarted
/// is joined again and its new pool given to `rebind` before its first frame.
fn take_frames(
    io: &Io<'_>,
    room: usize,
    wait: Duration,
    rebind: &mut dyn FnMut(&zcpipe_core::pool::PoolConsumer) -> Result<()>,
) -> Result<(Vec<Job>, bool)> {
    let mut jobs = Vec::new();
    let mut timeout = wait;
    while jobs.len() < room {
        match next_frame(io, timeout, || false, |c| rebind(c))? {
            Incoming::Item(frame) => {
                let desc = arrived(&frame, io.spec)?;
                jobs.push(Job { frame, desc });
            }
            Incoming::Eos => return Ok((jobs, true)),
            Incoming::Idle => break,
        }
        timeout = Duration::ZERO;
    }
    Ok((jobs, false))
}

/// The infer stage's facts for its report: the scheduler's cameras, the cores' busy time, and
/// the process's CPU per frame run since its frame loop began (`io.cpu0_us`).
fn infer_facts<T>(sched: &Scheduler<T>, meter: &BusyMeter, io: &Io<'_>) -> Facts {
    let inferred = sched.totals().inferred;
    let cpu = zcpipe_core::metrics::cpu_us().saturating_sub(io.cpu0_us);
    let (wait_p50_us, wait_p99_us) = sched.wait_all();
    let mut f = Facts::default();
    f.put(&InferFacts {
        cameras: sched.facts(),
        cores: meter.lines(),
        contexts_per_core: io.contexts_per_core,
        cpu_us_per_frame: (inferred > 0).then(|| cpu as f64 / inferred as f64),
        wait_p50_us,
        wait_p99_us,
        service: io.service.map(|s| s.stats(&sched.client_facts())),
    });
    f
}

/// Gives back what the scheduler let go (replaced, expired, drained): a frame's loan goes
/// back to the scale stage, a client's job is answered `dropped` with `why`.
fn release(items: Vec<Work>, why: zcpipe_core::service::DropReason) {
    for w in items {
        if let Work::Client(j) = w {
            j.drop_with(why);
        }
    }
}

/// Whether the scheduler drops old frames (video) or runs every one in order (`block`).
fn newest_wins(io: &Io<'_>) -> bool {
    io.ctx.data.ring_policy == RingPolicy::DropOldest
}

/// How many frames to take from the scale ring now, with `held` frames waiting or running
/// and `cap` the most the stage may hold. Video takes every frame there (up to a bound per
/// turn): each replaces its camera's waiting one, whose buffer goes back at once, so what
/// the stage holds stays one frame per camera and one per engine, and the choice of which
/// frames to skip is the scheduler's, never the ring's (a ring that drops its oldest would
/// drop the camera the scaler serves first, again and again). `block` waits in the ring
/// beyond `cap`.
fn room(io: &Io<'_>, held: usize, cap: usize) -> usize {
    /// Frames taken per turn at most under video.
    const TAKE_AT_ONCE: usize = 64;
    if newest_wins(io) {
        TAKE_AT_ONCE
    } else {
        cap.saturating_sub(held)
    }
}

mod lanes;
mod live;
mod single;
use lanes::run_lanes;
use single::run_single;

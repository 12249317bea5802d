//! The capture stage's process: open the source, preallocate the pool, serve it to the
//! scale stage, then produce paced frames into it until the source ends, `--frames` is
//! reached, or a signal arrives. A live source (a network stream) is not paced: the loop
//! waits for its frames (at most [`IDLE_WAIT`] per turn), stamps each at its arrival, and
//! goes on while it reconnects.
//!
//! A V4L2 camera (`run_v4l2`) takes a path of its own: the driver fills the pool (its
//! buffers exported with EXPBUF, or imported dma-bufs), paces the stream and stamps the
//! frames; the loop queues each buffer back once every downstream holder has dropped it.
//! Both paths run on the stage skeleton ([`zcpipe_core::stage`]): one loop, one ending, one
//! final report.

use std::time::{Duration, Instant};
use zcpipe_sys::board;

use zcpipe_core::{fail, Result};

use zcpipe_core::config::Choice;
use zcpipe_core::dmabuf::{Allocator, DmaBuf, HeapChoice};
use zcpipe_core::frame::{monotonic_ns, Fourcc, FrameDesc, FrameLayout, RestartMark, Stage};
use zcpipe_core::link::{accept_hello, Conn, ControlMsg, Listener};
use zcpipe_core::metrics::{open_fd_count, Facts, FrameSpan};
use zcpipe_core::pool::{ring_capacity, HopSpec, PoolProducer};
use zcpipe_core::ring::RingPolicy;
use zcpipe_core::stage::{drain_pool, serve_pool, Downstream, Drained, Extras, StageCtx, Turn, IDLE_WAIT};

use super::decoder::{self, Decoder};
use super::mpp::{MppCapture, MppInput, MppNext, MppOptions, MIN_BUFFERS};
use super::network::{NetworkOptions, NetworkSource};
use super::spec::{open_source, SourceSpec, FPS_MAX};
use super::v4l2::{self, CaptureIo, Granted, Next, V4l2Capture, V4l2Config};
use super::CaptureConfig;

/// Runs the capture stage with `cfg` (checked by the command line) until the source ends,
/// `cfg.frames` is reached, the stop flag is set or the scale stage hangs up; returns the
/// exit code.
pub fn run(cfg: CaptureConfig, ctx: StageCtx<'_>) -> Result<i32> {
    // `auto`: the first V4L2 capture node if there is one, else the bundled clip.
    let spec = match cfg.source {
        SourceSpec::Auto => {
            // The stage opens the camera itself next: no look before.
            let (spec, reason) = super::auto::resolve(&cfg.source);
            log::info!("source {reason}");
            spec
        }
        ref s => s.clone(),
    };
    if let SourceSpec::V4l2(device) = &spec {
        if cfg.fps == Some(FPS_MAX) {
            fail!("--fps max is for host sources (testsrc, image:, video:); the V4L2 camera found for --source auto paces itself: pass a number");
        }
        // MJPG: the camera's compressed buffers stay private; its decoded frames fill an NV12
        // pool through the host-source loop (v4l2::mjpg).
        if cfg.format != Some(Fourcc::MJPG) {
            return run_v4l2(&cfg, ctx, device.clone());
        }
    }
    // An MJPEG video: whole JPEGs decoded by MPP or zune-jpeg (capture::mjpeg), through the
    // host-source loop.
    let mjpeg = super::mjpeg::open_if_mjpeg(&spec, cfg.fps, cfg.decoder)?;
    if mjpeg.is_none() {
        let (decoder, why) = decoder::settle(cfg.decoder.unwrap_or_default(), &spec, cfg.wait_for_camera, None)?;
        if !why.is_empty() {
            log::info!("decoder: {why}");
        }
        if let Decoder::Mpp(lib) = decoder {
            return run_mpp(&cfg, ctx, &spec, lib);
        }
    }
    let record = recording(&cfg, &ctx)?;
    // A raw source's frames are encoded for the recorder; a compressed one's packets go as
    // they are.
    // (`auto` here is the bundled clip: a video file.)
    let encode = mjpeg.is_some() || !matches!(spec, SourceSpec::Video(_) | SourceSpec::Network(_) | SourceSpec::Auto);
    let source = match (mjpeg, &spec) {
        (Some(s), _) => s,
        (None, SourceSpec::Network(url)) => {
            let opts = NetworkOptions {
                transport: cfg.rtsp_transport.unwrap_or_default(),
                wait_for_camera: cfg.wait_for_camera,
                size: cfg.size,
                fps: cfg.fps,
            };
            Box::new(NetworkSource::open(url, &opts, ctx.stop, record.clone())?) as Box<dyn super::FrameSource>
        }
        (None, SourceSpec::V4l2(device)) => Box::new(super::v4l2::mjpg::MjpgCamera::open(&cfg, device.clone())?),
        (None, _) => open_source(&spec, cfg.fps, record.as_deref())?,
    };
    run_host(&cfg, ctx, source, record, encode)
}

/// The camera's link to the run's recorder, when it is recorded (`cfg.record`).
fn recording(cfg: &CaptureConfig, ctx: &StageCtx<'_>) -> Result<Option<std::sync::Arc<super::record::Recording>>> {
    if !cfg.record {
        return Ok(None);
    }
    let socket = zcpipe_core::packets::socket_path(&ctx.data.run_dir);
    let camera = cfg.record_camera.clone().unwrap_or_else(|| camera_name(ctx));
    Ok(Some(std::sync::Arc::new(super::record::Recording::new(socket, &camera)?)))
}

/// The camera's name (`cam0` for a single unnamed camera).
fn camera_name(ctx: &StageCtx<'_>) -> String {
    ctx.id.camera.clone().unwrap_or_else(|| "cam0".into())
}

/// A raw camera's encoder for the recorder (a tap of the pool served on the stage's
/// socket), when the camera is recorded.
fn start_encoder(
    ctx: &StageCtx<'_>,
    record: Option<&std::sync::Arc<super::record::Recording>>,
    fps: f64,
    choice: super::encode::EncoderChoice,
) -> Result<Option<super::encode::EncoderTap>> {
    let Some(r) = record else { return Ok(None) };
    let tap = super::encode::EncoderTap::start(r.clone(), ctx.data.socket(&ctx.id), fps, choice)?;
    Ok(Some(tap))
}

/// The capture stage on a host source (test pattern, image, video file, network stream, a
/// decoded MJPG camera): size the pool from the source, offer it to scale, then run the
/// frame loop ([`HostLoop`]), paced or as a live source sends; at the end drain and report.
fn run_host(
    cfg: &CaptureConfig,
    ctx: StageCtx<'_>,
    mut source: Box<dyn super::FrameSource>,
    record: Option<std::sync::Arc<super::record::Recording>>,
    encode: bool,
) -> Result<i32> {
    let info = source.info().clone();
    let live = source.live();
    let fps = cfg.fps.unwrap_or(info.fps);
    super::spec::check_fps(fps)?;
    if fps == FPS_MAX && ctx.data.ring_policy == RingPolicy::DropOldest && !ctx.data.copy_mode {
        log::warn!("--fps max with --ring-policy drop-oldest: capture outruns the pipeline and drops most frames; add --ring-policy block to push every frame through as fast as the stages take them");
    }
    let alloc = open_heap(ctx.data.heap)?;
    let pool = alloc.allocate_pool(cfg.buffers, info.max_frame_bytes)?;
    log::info!(
        "{} at {} fps; pool: {} x {} bytes from {}",
        info.description,
        if fps == FPS_MAX {
            "max (unpaced)".to_string()
        } else if live {
            format!("its own pace (live; nominal {fps:.2})")
        } else {
            format!("{fps:.2}")
        },
        pool.len(),
        pool[0].size(),
        alloc.describe()
    );
    let n_bufs = pool.len();
    let (prod, down, fds_setup) = serve_host_pool(&ctx, pool, &alloc, fps, &info.description)?;
    let encoder = if encode {
        start_encoder(&ctx, record.as_ref(), if fps == FPS_MAX { 30.0 } else { fps }, cfg.encoder)?
    } else {
        None
    };
    ctx.ready(Instant::now());

    // Unpaced (`--fps max`): no period; a reusable source fills each buffer once.
    let period = if fps == FPS_MAX { Duration::ZERO } else { Duration::from_secs_f64(1.0 / fps) };
    let reuse = fps == FPS_MAX && source.reusable();
    let start = Instant::now();
    let mut st = HostLoop {
        down,
        prod,
        source: &mut *source,
        frames: cfg.frames,
        live,
        reuse,
        period,
        filled: vec![None; n_bufs],
        start,
        due: start,
        seq: 0,
        span: FrameSpan::default(),
        record,
    };
    let ended = ctx.run_loop(&mut st, |st| st.report(&ctx, false, st.facts().into()), |st| st.turn(&ctx));
    let seq = st.seq;
    let code = ctx.close(
        &mut st,
        ended,
        format!("{seq} frames"),
        fds_setup,
        // A dead scale stage frees what it held: the drain returns at once then.
        |st, end| drain_pool(&mut st.prod, end.clean, "").0,
        |st, mut extras| {
            extras.extend(st.facts());
            st.report(&ctx, true, extras)
        },
    );
    // The encoder writes its last frames for the recorder after the pool's end, and after
    // the listener closed (a tap joining then is refused, never left waiting).
    drop(st);
    drop(encoder);
    code
}

/// The refusal line of a scale stage that does not take the host sources' NV12.
fn nv12_refusal(stage: &str, accept: &[Fourcc]) -> String {
    let names: Vec<String> = accept.iter().map(Fourcc::to_string).collect();
    format!("capture produces NV12 but {stage} accepts only {}", names.join(", "))
}

/// The host-source set-up's last step: binds the stage's socket, waits for the scale stage
/// ([`accept_scale`]), offers it `pool` (allocated by `alloc`) and serves it; returns the
/// producer, the listener a restarted scale stage joins again on, and the open fds after
/// set-up.
fn serve_host_pool(
    ctx: &StageCtx<'_>,
    pool: Vec<DmaBuf>,
    alloc: &Allocator,
    fps: f64,
    description: &str,
) -> Result<(PoolProducer, Downstream, usize)> {
    let mut listener = Listener::bind(&ctx.data.socket(&ctx.id))?;
    let conn = accept_scale(&mut listener, ctx, Fourcc::NV12, nv12_refusal)?;
    let n_bufs = pool.len();
    let capacity = ring_capacity(ctx.data.ring_policy, n_bufs);
    let mut prod = PoolProducer::offer(
        conn,
        pool.into_iter().map(|b| vec![b]).collect(),
        HopSpec {
            policy: ctx.data.ring_policy,
            capacity,
            memory: alloc.describe(),
            layout: None,
            fps: if fps == FPS_MAX { 0.0 } else { fps },
            description: description.to_string(),
            copy_mode: ctx.data.copy_mode,
        },
    )?;
    prod.keep_serving();
    let down = Downstream::new(listener);
    let fds_setup = open_fd_count();
    log::info!("serving scale (pid {}); open fds after set-up: {fds_setup}", prod.consumer_pid().unwrap_or(0));
    Ok((prod, down, fds_setup))
}

/// The host-source frame loop's state: the output hop, the source, the pacing schedule and
/// the frames produced so far.
struct HostLoop<'s> {
    /// The listening socket a restarted scale stage joins again on.
    down: Downstream,
    /// The pool offered to scale.
    prod: PoolProducer,
    /// Where the frames come from.
    source: &'s mut dyn super::FrameSource,
    /// `--frames`: stop after this many.
    frames: Option<u64>,
    /// A live source: not paced, its frames are waited for.
    live: bool,
    /// A reusable source at `--fps max`: each buffer is filled once, then sent as it is.
    reuse: bool,
    /// The pacing period (zero when unpaced).
    period: Duration,
    /// The layout each buffer was last filled with (for `reuse`).
    filled: Vec<Option<FrameLayout>>,
    /// When the frame loop started.
    start: Instant,
    /// When the next frame is due (paced sources).
    due: Instant,
    /// Frames published so far (the next frame's sequence number).
    seq: u64,
    /// When the frames out went.
    span: FrameSpan,
    /// The camera's link to the recorder, when it is recorded.
    record: Option<std::sync::Arc<super::record::Recording>>,
}

impl HostLoop<'_> {
    /// The facts of a periodic report: the downstream listener's, the source's, and what
    /// went to the recorder.
    fn facts(&self) -> Extras {
        let mut extra = self.down.facts();
        extra.extend(self.source.facts());
        if let Some(r) = &self.record {
            extra.push(("record", serde_json::to_value(r.counters()).unwrap_or_default()));
        }
        extra
    }

    /// Sends a report (the final one if `final_report`) with `extra`.
    fn report(&self, ctx: &StageCtx<'_>, final_report: bool, extra: Facts) {
        ctx.reporter.send(&ctx.producer_report(
            self.start,
            final_report,
            extra,
            &self.prod,
            (self.seq, self.seq),
            self.span,
        ));
    }

    /// One turn of the loop: serve a returning scale stage, wait for the frame's turn, fill
    /// a buffer from the source and hand it off.
    fn turn(&mut self, ctx: &StageCtx<'_>) -> Result<Turn> {
        if self.frames.is_some_and(|n| self.seq >= n) {
            return Ok(Turn::End("frame limit"));
        }
        serve_pool(&mut self.down, &mut self.prod, Stage::Scale, |h| scale_accepts(h, Fourcc::NV12, nv12_refusal));
        if !self.frame_due()? {
            return Ok(Turn::Next);
        }
        // Within IDLE_WAIT: a consumer that holds every buffer must not stop the
        // loop's turns (its heartbeat), and loses its lease after LEASE_TIMEOUT.
        let Some(mut loan) = self.prod.acquire_within(ctx.stop, Some(IDLE_WAIT))? else {
            return Ok(if ctx.stopped() { Turn::End("signal") } else { Turn::Next });
        };
        let i = loan.index() as usize;
        let layout = match self.filled.get(i).copied().flatten() {
            // Sent before and not written since: no CPU access, so no dma-buf sync.
            Some(l) if self.reuse => Some(l),
            _ => {
                let l = self.source.fill_buffer(&mut loan.buffers_mut()[0])?;
                if let Some(slot) = self.filled.get_mut(i) {
                    *slot = l;
                }
                l
            }
        };
        // At the end of the source (or, live, when the stream just dropped) the loan
        // is dropped unpublished: the buffer goes back.
        let Some(layout) = layout else {
            return Ok(if self.live { Turn::Next } else { Turn::End("end of source") });
        };
        // Live: the frame's arrival (it was read as it came).
        let ts = monotonic_ns();
        let mut desc = FrameDesc { seq: self.seq, timestamp_ns: ts, layout, ..Default::default() };
        desc.stamps[2 * Stage::Capture as usize] = ts;
        if let Some(lost) = self.source.take_gap() {
            // The stream came back: the first frame tells the clients what the gap cost.
            desc.flags = RestartMark::reconnect(lost).mark(desc.flags);
        }
        self.seq += 1;
        ctx.hand_off(loan, desc, Stage::Capture, &mut self.span, self.start)
    }

    /// Whether a frame is due this turn: a live source's next frame arrived (waited for at
    /// most [`IDLE_WAIT`]), or a paced source's schedule reached it (else it sleeps towards
    /// it, at most [`IDLE_WAIT`]).
    fn frame_due(&mut self) -> Result<bool> {
        if self.live {
            // Frames come when the camera sends them; meanwhile the source
            // reconnects if it must. Never longer than IDLE_WAIT per turn.
            return Ok(self.source.wait_frame(IDLE_WAIT)?);
        }
        // Pace: frame n is due at start + n * period; a late frame resets the
        // schedule. The sleep watches the scale stage's hang-up too (no second
        // syscall per frame for it: the ring's own check is rate-limited).
        let now = Instant::now();
        if self.due > now {
            self.prod.pace((self.due - now).min(IDLE_WAIT))?;
            return Ok(false);
        }
        self.due = if now - self.due > self.period { now + self.period } else { self.due + self.period };
        Ok(true)
    }
}

/// Opens the allocator `--heap` names (dma-buf heaps under `/dev/dma_heap`, `/dev/udmabuf`,
/// DRM dumb buffers of a `/dev/dri/card*`).
fn open_heap(heap: HeapChoice) -> Result<Allocator> {
    Ok(Allocator::open(heap, &board::path("/dev/dma_heap"), &board::path("/dev/udmabuf"), &board::path("/dev/dri"))?)
}

/// Waits for the scale stage's hello on `listener` and checks it accepts `fourcc`
/// ([`scale_accepts`]); if not, tells it why and fails with that.
fn accept_scale(
    listener: &mut Listener,
    ctx: &StageCtx<'_>,
    fourcc: Fourcc,
    refusal: impl FnOnce(&str, &[Fourcc]) -> String,
) -> Result<Conn> {
    let (conn, hello) = accept_hello(listener, ctx.stop, ctx.data.connect_timeout, "scale")?;
    Ok(zcpipe_core::stage::check_hello(conn, &hello, |h| scale_accepts(h, fourcc, refusal))?)
}

/// Whether a hello accepts `fourcc` (an empty list accepts any); if not, the refusal line
/// `refusal(its stage name, the formats it accepts)`.
fn scale_accepts(
    hello: &ControlMsg,
    fourcc: Fourcc,
    refusal: impl FnOnce(&str, &[Fourcc]) -> String,
) -> std::result::Result<(), String> {
    let ControlMsg::Hello { stage, accept, .. } = hello else {
        return Err("expected a hello from the scale stage".into());
    };
    if !accept.is_empty() && !accept.contains(&fourcc.0) {
        let accept: Vec<Fourcc> = accept.iter().map(|f| Fourcc(*f)).collect();
        return Err(refusal(stage, &accept));
    }
    Ok(())
}

/// The capture stage on a V4L2 camera: open and negotiate, make the pool (MMAP + EXPBUF or
/// imported dma-bufs), offer it to scale, stream until `--frames`, a signal, or the camera
/// is unplugged; then drain, STREAMOFF, and report.
fn run_v4l2(cfg: &CaptureConfig, ctx: StageCtx<'_>, device: Option<std::path::PathBuf>) -> Result<i32> {
    let (mut cam, alloc) = open_camera(cfg, ctx.data.heap, device)?;
    let pool = cam.allocate(cfg.buffers, alloc.as_ref())?;
    let memory = match &alloc {
        Some(a) => format!("{} imported by {} (V4L2_MEMORY_DMABUF)", a.describe(), cam.node().driver),
        None => format!("{} buffers exported with VIDIOC_EXPBUF (V4L2_MEMORY_MMAP)", cam.node().driver),
    };
    let n_bufs = pool.len();
    let n_fds: usize = pool.iter().map(|b| b.len()).sum();
    let sizes: Vec<String> = pool[0].iter().map(|b| b.size().to_string()).collect();
    log::info!(
        "{}; pool: {n_bufs} buffers ({n_fds} dma-buf fds of {} bytes): {memory}",
        cam.describe(),
        sizes.join("+")
    );
    let (prod, down, fds_setup) = serve_camera_pool(&ctx, &mut cam, pool, &memory)?;
    let record = recording(cfg, &ctx)?;
    let fps = Some(cam.granted().fps()).filter(|f| *f > 0.0).or(cfg.fps).unwrap_or(30.0);
    let encoder = start_encoder(&ctx, record.as_ref(), fps, cfg.encoder)?;
    ctx.ready(Instant::now());

    let start = Instant::now();
    let granted = cam.granted().clone();
    let fourcc = cam.layout().fourcc;
    let label = cam.node().label();
    let mut st = CameraLoop {
        down,
        prod,
        cam: &mut cam,
        frames: cfg.frames,
        fourcc,
        granted,
        label,
        n_bufs,
        n_fds,
        start,
        span: FrameSpan::default(),
    };
    // Every way out of the loop (end, signal, unplug, hang-up, error) goes through the
    // STREAMOFF and the final report.
    let ended = ctx.run_loop(&mut st, |st| st.report(&ctx, false, st.down.facts().into()), |st| st.turn(&ctx));
    let s = st.cam.stats();
    let frames = format!(
        "{} frames ({} dequeued, {} dropped by the driver, {} flagged corrupt)",
        s.published, s.dequeued, s.driver_drops, s.error_frames
    );
    let code = ctx.close(
        &mut st,
        ended,
        frames,
        fds_setup,
        |st, end| st.drain(end.clean),
        |st, mut extras| {
            extras.extend(st.down.facts());
            if let Some(r) = &record {
                extras.push(("record", serde_json::to_value(r.counters()).unwrap_or_default()));
            }
            st.report(&ctx, true, extras)
        },
    );
    drop(st);
    drop(encoder);
    code
}

/// The V4L2 set-up's first step: opens and negotiates the camera, then the allocator of
/// `--heap` when the driver imports dma-bufs (`--capture-io dmabuf`).
fn open_camera(
    cfg: &CaptureConfig,
    heap: HeapChoice,
    device: Option<std::path::PathBuf>,
) -> Result<(V4l2Capture, Option<Allocator>)> {
    let io = cfg.capture_io.unwrap_or_default();
    let v4l2_cfg = V4l2Config { device, format: cfg.format, size: cfg.size, fps: cfg.fps, buffers: cfg.buffers, io };
    let cam = V4l2Capture::open(&v4l2_cfg)?;
    let alloc = match io {
        CaptureIo::Dmabuf => Some(open_heap(heap)?),
        CaptureIo::Mmap => {
            if heap != HeapChoice::Auto {
                // The driver allocates: only check that an explicit --heap exists (for the
                // stages downstream), so a wrong one fails here, at once, in one line.
                open_heap(heap)?;
            }
            None
        }
    };
    Ok((cam, alloc))
}

/// The refusal line of a scale stage that does not take what the camera `label` captures
/// (`fourcc`).
fn v4l2_refusal(label: &str, fourcc: Fourcc, stage: &str, accept: &[Fourcc]) -> String {
    let names: Vec<String> = accept.iter().map(|f| v4l2::format_name(*f)).collect();
    format!(
        "{label} captures {} but {stage} accepts only {}; pass --format with one of those",
        v4l2::format_name(fourcc),
        names.join(", ")
    )
}

/// The V4L2 set-up's last step: binds the stage's socket, waits for the scale stage
/// ([`accept_scale`]), offers it the camera's `pool` (described by `memory`), serves it and
/// starts streaming; returns the producer, the listener a restarted scale stage joins again
/// on, and the open fds after set-up.
fn serve_camera_pool(
    ctx: &StageCtx<'_>,
    cam: &mut V4l2Capture,
    pool: Vec<Vec<DmaBuf>>,
    memory: &str,
) -> Result<(PoolProducer, Downstream, usize)> {
    let layout = cam.layout();
    let fps = cam.granted().fps();
    let n_bufs = pool.len();
    let n_fds: usize = pool.iter().map(|b| b.len()).sum();

    let mut listener = Listener::bind(&ctx.data.socket(&ctx.id))?;
    let label = cam.node().label();
    let refusal = |stage: &str, accept: &[Fourcc]| v4l2_refusal(&label, layout.fourcc, stage, accept);
    let conn = accept_scale(&mut listener, ctx, layout.fourcc, refusal)?;
    let mut prod = PoolProducer::offer(
        conn,
        pool,
        HopSpec {
            policy: ctx.data.ring_policy,
            capacity: ring_capacity(ctx.data.ring_policy, n_bufs),
            memory: memory.to_string(),
            layout: Some(layout),
            fps,
            description: cam.describe(),
            copy_mode: ctx.data.copy_mode,
        },
    )?;
    prod.keep_serving();
    let down = Downstream::new(listener);
    let fds_setup = open_fd_count();
    log::info!(
        "serving scale (pid {}): passed {n_fds} dma-buf fds of {n_bufs} buffers once; open fds after set-up: {fds_setup}",
        prod.consumer_pid().unwrap_or(0)
    );
    cam.start(&mut prod)?;
    Ok((prod, down, fds_setup))
}

/// The V4L2 frame loop's state: the output hop, the camera, and what its reports say.
struct CameraLoop<'c> {
    /// The listening socket a restarted scale stage joins again on.
    down: Downstream,
    /// The camera's pool, offered to scale.
    prod: PoolProducer,
    /// The streaming camera.
    cam: &'c mut V4l2Capture,
    /// `--frames`: stop after this many.
    frames: Option<u64>,
    /// The format the camera captures (what scale must accept).
    fourcc: Fourcc,
    /// The format, size and rate the driver granted.
    granted: Granted,
    /// The camera's name in refusal lines.
    label: String,
    /// Buffers in the pool.
    n_bufs: usize,
    /// dma-buf fds passed for the pool (one per plane of each buffer).
    n_fds: usize,
    /// When the frame loop started.
    start: Instant,
    /// When the frames out went.
    span: FrameSpan,
}

impl CameraLoop<'_> {
    /// One turn of the loop: serve a returning scale stage, then take the driver's next
    /// frame (published by the camera), if any within [`IDLE_WAIT`].
    fn turn(&mut self, ctx: &StageCtx<'_>) -> Result<Turn> {
        if self.frames.is_some_and(|n| self.cam.stats().published >= n) {
            return Ok(Turn::End("frame limit"));
        }
        // A scale stage that hung up is seen here too while the camera is idle (a
        // producer under drop-oldest never waits for its consumer).
        let (label, fourcc) = (&self.label, self.fourcc);
        let refusal = |stage: &str, accept: &[Fourcc]| v4l2_refusal(label, fourcc, stage, accept);
        serve_pool(&mut self.down, &mut self.prod, Stage::Scale, |h| scale_accepts(h, fourcc, refusal));
        match self.cam.next_frame(&mut self.prod, ctx.stop, IDLE_WAIT) {
            Ok(Next::Frame(..)) => self.span.tick(self.start),
            Ok(Next::Idle) => {}
            Ok(Next::Unplugged) => {
                log::warn!(
                    "camera unplugged: {} went away (ENODEV); ending the stream",
                    self.cam.node().path.display()
                );
                return Ok(Turn::End("camera unplugged"));
            }
            Err(_) if ctx.stopped() => return Ok(Turn::End("signal")),
            Err(e) => return Err(e.into()),
        }
        Ok(Turn::Next)
    }

    /// Sends a report (the final one if `final_report`) with `extra`, then the camera's
    /// facts ([`CameraLoop::facts`]).
    fn report(&self, ctx: &StageCtx<'_>, final_report: bool, mut extra: Facts) {
        let s = self.cam.stats();
        extra.extend(self.facts());
        ctx.reporter.send(&ctx.producer_report(
            self.start,
            final_report,
            extra,
            &self.prod,
            (s.dequeued, s.published),
            self.span,
        ));
    }

    /// What the camera says in every report: its node, the granted format and its counters.
    fn facts(&self) -> Extras {
        let (cam, g) = (&*self.cam, &self.granted);
        let s = cam.stats();
        vec![
            ("device", cam.node().path.display().to_string().into()),
            ("driver", cam.node().driver.clone().into()),
            ("format", v4l2::format_name(g.fourcc).into()),
            ("width", g.width.into()),
            ("height", g.height.into()),
            ("bytesperline", g.planes.iter().map(|p| p.0).collect::<Vec<_>>().into()),
            ("sizeimage", g.planes.iter().map(|p| p.1).collect::<Vec<_>>().into()),
            ("fps_granted", g.fps().into()),
            ("capture_io", cam.io().name().into()),
            ("buffers", self.n_bufs.into()),
            ("dmabuf_fds", self.n_fds.into()),
            ("dequeued", s.dequeued.into()),
            ("driver_drops", s.driver_drops.into()),
            ("error_frames", s.error_frames.into()),
            ("bad_timestamps", s.bad_timestamps.into()),
            ("timestamps_ahead", s.timestamps_ahead.into()),
            ("sequence_repeats", s.sequence_repeats.into()),
            ("driver_starved", s.driver_starved.into()),
            ("first_sequence", s.first_sequence.into()),
            ("last_sequence", s.last_sequence.into()),
        ]
    }

    /// The end: drains the pool (after a clean end), then STREAMOFF.
    fn drain(&mut self, clean: bool) -> Drained {
        let n_bufs = self.n_bufs;
        // A dead scale stage frees what it held: the drain returns at once then.
        // STREAMOFF is tried even after a failed drain, so the driver gives its buffers back.
        let (mut d, still_out) = drain_pool(&mut self.prod, clean, ", before STREAMOFF");
        let streamed_off = self.cam.stream_off(&mut self.prod);
        let held = streamed_off.as_ref().copied().unwrap_or(0);
        let home = n_bufs - still_out;
        d.said.push_str(&format!("STREAMOFF took back the {held} the driver held: {home}/{n_bufs} buffers home; "));
        d.extras.extend([("buffers_held_by_driver_at_streamoff", held.into()), ("buffers_home", home.into())]);
        d.result = d.result.and(streamed_off.map(|_| ()));
        d
    }
}

/// The set-up's first step for `--decoder mpp`: what MPP opens (a file or a network stream),
/// refusing any other source and `--fps max`.
fn mpp_input(cfg: &CaptureConfig, spec: &SourceSpec) -> Result<MppInput> {
    let input = match spec {
        SourceSpec::Video(p) => MppInput::File(p.clone()),
        SourceSpec::Network(u) => MppInput::Network(u.clone()),
        other => fail!("--decoder mpp decodes video: files and network streams, not {}", other.redacted()),
    };
    if cfg.fps == Some(FPS_MAX) {
        fail!(
            "--fps max with --decoder mpp: a decoded stream is paced at its own rate; pass a number or leave --fps out"
        );
    }
    Ok(input)
}

/// The capture stage on an H.264/H.265 file or network stream decoded by MPP
/// ([`super::mpp`]): open and probe, size the pool from MPP's info change, commit it as
/// MPP's external buffer group, offer it to scale, then publish each decoded picture in the
/// buffer MPP wrote, paced for a file, as it comes for a live stream; at the end drain,
/// release every frame to MPP and destroy the decoder.
fn run_mpp(
    cfg: &CaptureConfig,
    ctx: StageCtx<'_>,
    spec: &SourceSpec,
    lib: std::sync::Arc<zcpipe_sys::mpp::Libmpp>,
) -> Result<i32> {
    let input = mpp_input(cfg, spec)?;
    let opts = MppOptions { transport: cfg.rtsp_transport.unwrap_or_default(), size: cfg.size };
    let record = recording(cfg, &ctx)?;
    let mut cap = MppCapture::open(input, lib, &opts, cfg.fps, ctx.stop, record)?;
    let live = cap.live();
    let fps = cap.fps();
    let alloc = open_heap(ctx.data.heap)?;
    let n_bufs = cfg.buffers.clamp(MIN_BUFFERS, 64);
    if n_bufs != cfg.buffers {
        log::info!("pool: {n_bufs} buffers, not --buffers {}: MPP keeps up to 16 reference pictures in the pool's buffers, so it has at least {MIN_BUFFERS}", cfg.buffers);
    }
    let pool = alloc.allocate_pool(n_bufs, cap.pool_bytes())?;
    {
        let fds: Vec<_> = pool.iter().map(|b| b.fd()).collect();
        cap.attach(&fds)?;
    }
    let memory = format!("{} committed once as MPP's external buffer group", alloc.describe());
    log::info!("{}; pool: {n_bufs} x {} bytes from {memory}", cap.describe(), pool[0].size());
    let mut listener = Listener::bind(&ctx.data.socket(&ctx.id))?;
    let refusal = |stage: &str, accept: &[Fourcc]| {
        let names: Vec<String> = accept.iter().map(Fourcc::to_string).collect();
        format!("MPP decodes to NV12 but {stage} accepts only {}", names.join(", "))
    };
    let conn = accept_scale(&mut listener, &ctx, Fourcc::NV12, refusal)?;
    let mut prod = PoolProducer::offer(
        conn,
        pool.into_iter().map(|b| vec![b]).collect(),
        HopSpec {
            policy: ctx.data.ring_policy,
            capacity: ring_capacity(ctx.data.ring_policy, n_bufs),
            memory,
            layout: None,
            fps,
            description: cap.describe(),
            copy_mode: ctx.data.copy_mode,
        },
    )?;
    prod.keep_serving();
    let mut down = Downstream::new(listener);
    let fds_setup = open_fd_count();
    log::info!("serving scale (pid {}): passed the {n_bufs} dma-bufs MPP decodes into once; open fds after set-up: {fds_setup}", prod.consumer_pid().unwrap_or(0));
    ctx.ready(Instant::now());

    let start = Instant::now();
    let period = Duration::from_secs_f64(1.0 / fps);
    let mut due = start;
    let mut span = FrameSpan::default();
    let report = |prod: &PoolProducer, cap: &MppCapture, span: FrameSpan, final_report: bool, mut extra: Facts| {
        let n = cap.stats().pictures;
        extra.extend(cap.facts());
        ctx.reporter.send(&ctx.producer_report(start, final_report, extra, prod, (n, n), span))
    };
    let ended = {
        let mut state = (&mut prod, &mut cap, &mut span, &mut down);
        ctx.run_loop(
            &mut state,
            |(prod, cap, span, down)| report(prod, cap, **span, false, down.facts().into()),
            |(prod, cap, span, down)| {
                if cfg.frames.is_some_and(|n| cap.stats().pictures >= n) {
                    return Ok(Turn::End("frame limit"));
                }
                serve_pool(down, prod, Stage::Scale, |h| scale_accepts(h, Fourcc::NV12, refusal));
                let now = Instant::now();
                if !live && due > now {
                    // A file: picture n is due at start + n * period (a late one resets it).
                    prod.pace((due - now).min(IDLE_WAIT))?;
                    return Ok(Turn::Next);
                }
                match cap.next_frame(prod, ctx.stop, IDLE_WAIT) {
                    Ok(MppNext::Frame(_)) => {
                        span.tick(start);
                        due = if now.saturating_duration_since(due) > period { now + period } else { due + period };
                    }
                    Ok(MppNext::Idle) => {}
                    Ok(MppNext::End(why)) => return Ok(Turn::End(why)),
                    Err(_) if ctx.stopped() => return Ok(Turn::End("signal")),
                    Err(e) => return Err(e.into()),
                }
                Ok(Turn::Next)
            },
        )
    };
    let s = cap.stats();
    let frames = format!(
        "{} pictures decoded by MPP ({} flagged and dropped, {} re-negotiated sizes)",
        s.pictures, s.error_frames, s.info_changes
    );
    ctx.close(
        &mut (&mut prod, &mut cap),
        ended,
        frames,
        fds_setup,
        |(prod, cap), end| {
            // A dead scale stage frees what it held: the drain returns at once then. Every
            // frame still held goes back to MPP after the drain, before the decoder goes.
            let (mut d, _) = drain_pool(prod, end.clean, ", before releasing MPP's frames");
            let released = cap.finish(prod).unwrap_or(0);
            d.said.push_str(&format!("{released} frames released to MPP at the end; "));
            d.extras.push(("frames_released_at_end", released.into()));
            d
        },
        |(prod, cap), mut extras| {
            extras.extend(down.facts());
            report(prod, cap, span, true, extras)
        },
    )
}

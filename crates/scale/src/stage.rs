//! The scale stage's process: join capture's pool, learn the model input from the infer
//! stage (size, channel order as the fourcc, letterbox placement and pad), preallocate the
//! output pool, then letterbox every frame into it.

use std::time::{Duration, Instant};
use zcpipe_sys::board;

use anyhow::Context;
use zcpipe_core::{fail, Result};

use zcpipe_core::channel::{wait_any, Recv, Waitable};
use zcpipe_core::config::Choice;
use zcpipe_core::control::StageControl;
use zcpipe_core::copy::CopyCounters;
use zcpipe_core::dmabuf::{Allocator, DmaBuf};
use zcpipe_core::frame::{with_camera, Fourcc, FrameDesc, FrameLayout, Letterbox, Stage};
use zcpipe_core::link::{accept_hello, Conn, ControlMsg, Listener, WantedInput};
use zcpipe_core::metrics::{open_fd_count, Facts, FrameSpan, StageReport};
use zcpipe_core::pool::{ring_capacity, Frame, HopSpec, PoolProducer, Upstream};
use zcpipe_core::rate::RateGate;
use zcpipe_core::ring::{OwnCounts, RingPolicy};
use zcpipe_core::stage::{drain_pool, incoming, serve_pool, Downstream, Incoming, StageCtx, Turn, IDLE_WAIT};

use super::auto;
use super::cpu::CpuScaler;
use super::motion::MotionGate;
use super::report::{CameraFacts, ScaleFacts};
use super::rga::{RgaCore, RgaScaler};
use super::v4l2m2m::V4l2M2mScaler;
use super::{NoScaler, ScaleConfig, Scaler, ScalerKind};

/// Source formats the scale stage accepts from capture (a backend that cannot read one
/// refuses it at bind, naming it: XR24 is read by the CPU scaler only).
pub(crate) const ACCEPTED: [Fourcc; 7] =
    [Fourcc::NV12, Fourcc::NV12M, Fourcc::NV16, Fourcc::YUYV, Fourcc::RGB24, Fourcc::BGR24, Fourcc::XR24];

/// Opens the backend `cfg.scaler` names. A device backend opens its node now, so a wrong
/// node fails before any set-up. In copy mode RGA is fed CPU memory (virtual addresses),
/// as a plain pipeline does.
fn open_scaler(cfg: &ScaleConfig, copy_mode: bool) -> Result<Box<dyn Scaler>> {
    let choice = auto::choose(&cfg.scaler, cfg.rga_core)?;
    if cfg.scaler == ScalerKind::Auto || cfg.rga_core == RgaCore::Auto && choice.kind == ScalerKind::Rga {
        log::info!("scaler {}: {}", choice.kind, choice.reason);
    }
    Ok(match &choice.kind {
        ScalerKind::V4l2M2m(path) => Box::new(V4l2M2mScaler::open(path)?),
        ScalerKind::Rga => {
            let mut rga = RgaScaler::open(None, choice.rga_core)?;
            if copy_mode {
                rga.use_virtual_addresses();
            }
            Box::new(rga)
        }
        ScalerKind::None => Box::new(NoScaler::default()),
        ScalerKind::Auto | ScalerKind::Cpu => Box::new(CpuScaler::new()),
    })
}

/// One camera's input: its hop from its capture stage, and the scaler bound to its pool
/// (each camera has its own, so a device imports each pool once and never re-binds when
/// the frames of two cameras alternate).
struct Camera {
    /// The camera's name (`cam0`, `front`), for logs and the report.
    name: String,
    input: Upstream,
    /// Bound to the current pool of `input` once it joined.
    scaler: Option<Box<dyn Scaler>>,
    /// `input.joins()` when `scaler` was bound.
    bound_joins: u64,
    /// A device scaler's source layout: every frame must have it.
    fixed_layout: Option<zcpipe_core::frame::FrameLayout>,
    /// Frames taken from this camera (scaled, or passed over for a newer one).
    frames_in: u64,
    /// Frames passed over because a newer one of the same camera was already waiting
    /// (the scale stage takes the newest of each camera in turn).
    skipped: u64,
    /// Frames of this camera handed on.
    frames_out: u64,
    /// Its detection rate (`--detect-fps`, 0: every frame), and the gate that keeps it:
    /// frames it passes over are never scaled.
    detect_fps: f64,
    gate: Option<RateGate>,
    /// Frames passed over by the rate gate (their buffer went straight back).
    skipped_rate: u64,
    /// Of those, the ones since the last frame handed on (it carries them downstream).
    rate_since: u32,
    /// Its motion gate (`--motion`): still frames are never scaled.
    motion: Option<MotionGate>,
    /// Frames passed over as still, in all and since the last frame handed on.
    skipped_still: u64,
    still_since: u32,
    /// The camera's stream ended (its capture stage sent the end of stream).
    ended: bool,
}

impl Camera {
    /// Camera `name` on `input`, at detection rate `detect_fps`; `(i, n)`: its index of the
    /// `n` cameras (the cameras' rate gates take turns over the interval).
    fn new(name: String, input: Upstream, cfg: &ScaleConfig, detect_fps: f64, (i, n): (usize, usize)) -> Camera {
        Camera {
            name,
            input,
            scaler: None,
            bound_joins: 0,
            fixed_layout: None,
            frames_in: 0,
            skipped: 0,
            frames_out: 0,
            detect_fps,
            gate: RateGate::with_phase(detect_fps, i as f64 / n.max(1) as f64),
            skipped_rate: 0,
            rate_since: 0,
            motion: cfg.motion.map(|(t, k)| MotionGate::new(t, k)),
            skipped_still: 0,
            still_since: 0,
            ended: false,
        }
    }

    /// Binds a newly joined (or re-joined) pool: the first time with `bind` (the output pool
    /// as well); returns whether this was the camera's first join. After a restart of its capture stage, a scaler that imported the old pool
    /// (a device) is replaced by a fresh one from `reopen`, bound like the first (`dst` holds
    /// second handles on the output pool); without `reopen`, [`Scaler::rebind_input`].
    fn bind_if_joined(
        &mut self,
        dst: &mut [zcpipe_core::dmabuf::DmaBuf],
        dst_layout: &zcpipe_core::frame::FrameLayout,
        letterbox: Letterbox,
        reopen: Option<&dyn Fn() -> Result<Box<dyn Scaler>>>,
    ) -> Result<bool> {
        let Some(c) = self.input.current() else { return Ok(false) };
        if self.input.joins() == self.bound_joins {
            return Ok(false);
        }
        let first = self.bound_joins == 0;
        let scaler = self.scaler.as_mut().context("no scaler for a camera")?;
        let fresh = match reopen {
            Some(open) if self.bound_joins > 0 && scaler.binds_pools() => {
                *scaler = open()?;
                log::info!(
                    "camera {}: its capture stage came back; a fresh {} imports its new pool",
                    self.name,
                    scaler.name()
                );
                true
            }
            _ => self.bound_joins == 0,
        };
        if fresh {
            scaler
                .bind(c.buffers(), c.offer.layout.as_ref(), dst, dst_layout, letterbox)
                .with_context(|| format!("camera {}", self.name))?;
        } else {
            scaler.rebind_input(c.buffers(), c.offer.layout.as_ref())?;
        }
        self.fixed_layout = c.offer.layout.filter(|_| scaler.binds_pools());
        self.bound_joins = self.input.joins();
        Ok(first)
    }

    /// The newest frame waiting on this camera's hop, `frame` if none is newer: the frames
    /// passed over go back (counted as skipped).
    fn newest(&mut self, mut frame: Frame) -> Result<Frame> {
        loop {
            match self.input.recv(Duration::ZERO)? {
                Recv::Item(newer) => {
                    self.frames_in += 1;
                    self.skipped += 1;
                    frame = newer;
                }
                // The end of this camera's stream, right behind its last frame
                // (in copy mode a message, read once): the frame is scaled now.
                Recv::Eos => {
                    self.ended = true;
                    log::info!("camera {}: end of stream ({} frames)", self.name, self.frames_in);
                    break;
                }
                _ => break,
            }
        }
        Ok(frame)
    }

    /// This camera's line in the report's `cameras` object; `downstream`: its frames the
    /// output hop dropped (the infer stage too slow for them, drop-oldest).
    fn facts(&self, downstream: u64) -> CameraFacts {
        let c = self.input.counters();
        CameraFacts {
            frames_in: self.frames_in,
            frames_out: self.frames_out,
            skipped_for_newer: self.skipped,
            skipped_rate: self.skipped_rate,
            skipped_still: self.skipped_still,
            motion_us: self.motion.as_ref().and_then(MotionGate::mean_us),
            ring_dropped: c.dropped,
            dropped_downstream: downstream,
            joined: !self.input.is_away(),
            ended: self.ended,
        }
    }
}

/// The sockets of the cameras' capture stages: `capture.sock` for a single unnamed one
/// (`cameras` empty), else `capture@NAME.sock` each.
pub(crate) fn capture_sockets(
    data: &zcpipe_core::config::DataPath,
    cameras: &[String],
) -> Vec<(String, std::path::PathBuf)> {
    if cameras.is_empty() {
        return vec![("cam0".to_string(), data.socket(&Stage::Capture.into()))];
    }
    cameras.iter().map(|n| (n.clone(), data.socket(&zcpipe_core::id::StageId::camera(n)))).collect()
}

/// Runs the scale stage with `cfg` (checked by the command line) until capture ends the
/// stream (every camera's, with several), the stop flag is set or a neighbour hangs up;
/// returns the exit code.
///
/// With several cameras (`cfg.cameras`), each has its own capture stage, pool and
/// drop-oldest ring; the stage takes the newest frame of each camera in turn
/// (round-robin), sleeps on all their doorbells at once ([`zcpipe_core::channel::wait_any`])
/// and writes the camera's index into each frame's flags
/// ([`zcpipe_core::frame::with_camera`]). A camera whose stage is away (restarting, or not
/// up yet) is skipped: the others go on.
pub fn run(cfg: ScaleConfig, ctx: StageCtx<'_>) -> Result<i32> {
    let mut stage = ScaleStage::set_up(&cfg, &ctx)?;
    let ended = ctx.run_loop(&mut stage, |s| s.report(false, s.down.facts().into()), ScaleStage::turn);
    stage.close(ended)
}

/// Accepts the infer stage on `listener`: its connection and the input it wants.
fn accept_infer(listener: &mut Listener, ctx: &StageCtx<'_>) -> Result<(Conn, WantedInput)> {
    let (down, msg) = accept_hello(listener, ctx.stop, ctx.data.connect_timeout, "infer")?;
    let want = match msg {
        ControlMsg::Hello { want: Some(w), .. } => w,
        other => fail!("the infer stage must say which input it wants; it sent {other:?}"),
    };
    Ok((down, want))
}

/// What the scale stage says when it joins a capture stage.
fn capture_hello(ctx: &StageCtx<'_>) -> ControlMsg {
    ControlMsg::Hello {
        stage: "scale".into(),
        accept: ACCEPTED.iter().map(|f| f.0).collect(),
        want: None,
        wait: ctx.data.wait,
    }
}

/// Joins the cameras' capture stages on `sockets` (the first now, the others when they are
/// up) and gives each camera its scaler, taken from `scalers` in the same order.
fn join_cameras(
    sockets: Vec<(String, std::path::PathBuf)>,
    scalers: &mut Vec<Box<dyn Scaler>>,
    cfg: &ScaleConfig,
    ctx: &StageCtx<'_>,
) -> Result<Vec<Camera>> {
    let hello = capture_hello(ctx);
    let mut cams: Vec<Camera> = Vec::with_capacity(sockets.len());
    let n = sockets.len().max(1);
    for (i, (name, path)) in sockets.into_iter().enumerate() {
        let input = if i == 0 {
            // The first camera is joined as a single one always was: its set-up is this one's.
            Upstream::join(
                path,
                Stage::Capture,
                hello.clone(),
                ctx.data.wait,
                ctx.data.spin,
                ctx.stop,
                ctx.data.connect_timeout,
            )?
        } else {
            // The others join when their capture stage is up (a camera may be slow to
            // open, or waiting for the network): none waits for another.
            Upstream::pending(path, Stage::Capture, hello.clone(), ctx.data.wait, ctx.data.spin, ctx.data.copy_mode)
        };
        cams.push(Camera::new(name, input, cfg, cfg.detect_fps(i), (i, n)));
    }
    for (cam, scaler) in cams.iter_mut().zip(scalers.drain(..)) {
        cam.scaler = Some(scaler);
    }
    Ok(cams)
}

/// A restarted infer stage must want what the pool was made for (`want`): `Err` says why not.
fn check_want(want: &WantedInput, h: &ControlMsg) -> std::result::Result<(), String> {
    match h {
        ControlMsg::Hello { want: Some(w), .. } if *w == *want => Ok(()),
        ControlMsg::Hello { want: other, .. } => Err(format!(
            "this scale stage's pool holds {}x{} {} for the model it was started with; the infer stage now wants {other:?}: restart the scale stage too",
            want.width,
            want.height,
            Fourcc(want.fourcc)
        )),
        _ => Err("expected a hello from the infer stage".into()),
    }
}

/// The output pool the infer stage reads: the model input's layout and letterbox, the
/// buffers offered on the infer stage's connection, and what the scalers bind them through.
/// Its fields drop in this order (the producer before the second handles and the allocator),
/// as when they were locals of one function.
struct OutputPool {
    /// The producer side of the hop to the infer stage, holding the pool's buffers.
    prod: PoolProducer,
    /// Second handles on the pool's buffers (with several cameras or a device scaler), empty
    /// otherwise.
    dst_handles: Vec<DmaBuf>,
    /// The allocator the pool came from: open (with its fds) until the stage ends.
    _alloc: Allocator,
    /// The layout of every output frame (the model input).
    dst: FrameLayout,
    /// Where the scaled picture sits in the output frame, and its pad.
    letterbox: Letterbox,
    /// Whether a device scaler whose camera's capture stage restarted can be replaced by a
    /// fresh one (bound through `dst_handles`).
    can_reopen: bool,
}

impl OutputPool {
    /// Makes the pool `want` asks for, binds the first camera's scaler to it and offers it to
    /// the infer stage on `down` (refused there, naming why, if it cannot be made or bound).
    fn offer(
        cfg: &ScaleConfig,
        ctx: &StageCtx<'_>,
        down: Conn,
        want: &WantedInput,
        cams: &mut [Camera],
        fps: f64,
    ) -> Result<OutputPool> {
        let letterbox = Letterbox::new(want.placement, want.pad);
        let dst = match want.layout() {
            Ok(l) => l,
            Err(e) => {
                let error = format!("the infer stage asked for an input the scale stage cannot make: {e:#}");
                down.send(&ControlMsg::Refuse { error: error.clone() }, &[])?;
                fail!("{error}");
            }
        };
        let bpl = dst.planes[0].bytesperline;
        let heap = cams[0].scaler.as_ref().map(|s| s.output_heap(ctx.data.heap)).unwrap_or(ctx.data.heap);
        let alloc = Allocator::open(
            heap,
            &board::path("/dev/dma_heap"),
            &board::path("/dev/udmabuf"),
            &board::path("/dev/dri"),
        )?;
        let mut pool = alloc.allocate_pool(cfg.buffers, dst.bytes_needed())?;
        // A device imports both pools once here; the frames never meet the CPU after this.
        // Host sources change size per frame (no fixed layout): buffers are imported at first use.
        if let Err(e) = cams[0].bind_if_joined(&mut pool, &dst, letterbox, None).map(|_| ()) {
            let error = format!("{e:#}");
            down.send(&ControlMsg::Refuse { error: error.clone() }, &[])?;
            fail!("{error}");
        }
        // With several cameras, each later camera's scaler binds the output pool when its camera
        // joins, and a device scaler whose camera's capture stage restarted is replaced by a
        // fresh one bound the same way: through these second handles on the same buffers.
        let binds = cams.iter().any(|c| c.scaler.as_ref().is_some_and(|s| s.binds_pools()));
        let dst_handles = if cams.len() > 1 || binds {
            pool.iter().map(|b| b.try_clone()).collect::<anyhow::Result<Vec<_>>>()?
        } else {
            vec![]
        };
        let can_reopen = !dst_handles.is_empty();
        let mut prod = PoolProducer::offer(
            down,
            pool.into_iter().map(|b| vec![b]).collect(),
            HopSpec {
                policy: ctx.data.ring_policy,
                capacity: ring_capacity(ctx.data.ring_policy, cfg.buffers),
                memory: alloc.describe(),
                layout: Some(dst),
                fps,
                description: format!(
                    "{}x{} {} {} letterbox, pad {}, bytesperline {}",
                    dst.width,
                    dst.height,
                    dst.fourcc,
                    want.placement.describe(),
                    want.pad,
                    bpl
                ),
                copy_mode: ctx.data.copy_mode,
            },
        )?;
        prod.keep_serving();
        Ok(OutputPool { prod, dst_handles, _alloc: alloc, dst, letterbox, can_reopen })
    }
}

/// The scale stage once set up, and its frame loop's state. Its fields drop in this order
/// (a frame kept for the next turn, the infer stage's listener, the output pool, then the
/// cameras), as when they were locals of one function.
struct ScaleStage<'s> {
    /// A frame taken while no output buffer was free (the infer stage holds them all): kept
    /// for the next turn, so the loop still turns (and reports) while it waits.
    pending: Option<(usize, Frame, FrameDesc)>,
    /// The scale stage's socket, where a restarted infer stage joins the pool again.
    down: Downstream,
    /// The pool the frames are scaled into.
    pool: OutputPool,
    /// Every camera's input and scaler.
    cams: Vec<Camera>,
    /// The stage's settings (a fresh scaler is opened from them).
    cfg: &'s ScaleConfig,
    /// The stage's context: stop flag, reporter, data-path settings.
    ctx: &'s StageCtx<'s>,
    /// The input the infer stage asked for (the pool was made for it).
    want: WantedInput,
    /// Open fds after set-up (a camera that joins later counts in it).
    fds_setup: usize,
    /// When the frame loop started.
    start: Instant,
    /// The frames handed on and when.
    span: FrameSpan,
    /// The camera to look at first in the next turn (round-robin).
    next: usize,
    /// Where the supervisor hands over the changes taken live ([`live`]).
    control: Option<StageControl>,
}

mod live;

impl<'s> ScaleStage<'s> {
    /// Set-up: opens every camera's scaler, connects the infer stage (downstream) and learns
    /// what it wants, joins the cameras' capture stages, offers the output pool, then tells
    /// the supervisor the stage is ready.
    fn set_up(cfg: &'s ScaleConfig, ctx: &'s StageCtx<'s>) -> Result<ScaleStage<'s>> {
        if cfg.rga_core != RgaCore::Auto && cfg.scaler != ScalerKind::Rga {
            log::warn!("--rga-core {} is for --scaler rga; the {} scaler ignores it", cfg.rga_core.name(), cfg.scaler);
        }
        let sockets = capture_sockets(&ctx.data, &cfg.cameras);
        // One scaler per camera, each opened now so that a wrong node fails before any set-up.
        let mut scalers = sockets.iter().map(|_| open_scaler(cfg, ctx.data.copy_mode)).collect::<Result<Vec<_>>>()?;
        let mut listener = Listener::bind(&ctx.data.socket(&ctx.id))?;
        // Downstream first: frames start flowing only once the whole chain is connected.
        let (down, want) = accept_infer(&mut listener, ctx)?;
        let mut cams = join_cameras(sockets, &mut scalers, cfg, ctx)?;
        let Some(first) = cams[0].input.current() else { fail!("the capture stage hung up while we joined it") };
        log::info!(
            "joined capture: {} ({} buffers, {})",
            first.offer.description,
            first.buffers().len(),
            first.offer.memory
        );
        let fps = first.offer.fps;
        let pool = OutputPool::offer(cfg, ctx, down, &want, &mut cams, fps)?;
        let down = Downstream::new(listener);
        // Without it the stage runs as before, only without live changes.
        let control = StageControl::bind(&ctx.data.run_dir, "scale")
            .map(|c| c.at_most_every(live::CONTROL_EVERY))
            .map_err(|e| log::warn!("no live changes for this scale stage: {e:#}"))
            .ok();
        let fds_setup = open_fd_count();
        ctx.ready(Instant::now());
        log::info!(
            "{} -> {}x{} {}, {} letterbox, pad {}; {} camera{}; open fds after set-up: {fds_setup}",
            cams[0].scaler.as_ref().map(|s| s.name()).unwrap_or_default(),
            pool.dst.width,
            pool.dst.height,
            pool.dst.fourcc,
            want.placement.describe(),
            want.pad,
            cams.len(),
            if cams.len() == 1 { "" } else { "s" }
        );
        Ok(ScaleStage {
            pending: None,
            down,
            pool,
            cams,
            cfg,
            ctx,
            want,
            fds_setup,
            start: Instant::now(),
            span: FrameSpan::default(),
            next: 0,
            control,
        })
    }

    /// One turn of the frame loop: serves an infer stage that (re)joins, then scales the frame
    /// kept from the last turn, or else the newest frame of the first camera (round-robin)
    /// that has one; with several cameras and nothing from any, sleeps on all of them.
    fn turn(&mut self) -> Result<Turn> {
        self.serve_control();
        let want = &self.want;
        serve_pool(&mut self.down, &mut self.pool.prod, Stage::Infer, |h| check_want(want, h));
        if let Some((i, frame, desc)) = self.pending.take() {
            return self.scale_into(i, frame, desc);
        }
        let n = self.cams.len();
        if self.cams.iter().all(|c| c.ended) {
            return Ok(Turn::End("end of stream"));
        }
        for k in 0..n {
            let i = (self.next + k) % n;
            if self.cams[i].ended {
                continue;
            }
            if let Some(turn) = self.look_at(i)? {
                return Ok(turn);
            }
        }
        if n > 1 {
            // Nothing from any camera: sleep on every joined one's doorbell; one that
            // is away is tried again soon (its re-join back-off is 10 to 50 ms).
            let waiters: Vec<&dyn Waitable> =
                self.cams.iter().filter(|c| !c.ended).filter_map(|c| c.input.waitable()).collect();
            let away = self.cams.iter().any(|c| !c.ended && c.input.is_away());
            wait_any(&waiters, if away { REJOIN_POLL } else { IDLE_WAIT })?;
        }
        Ok(Turn::Next)
    }

    /// Looks at camera `i`: binds its pool if its capture stage (re)joined, then takes its
    /// newest frame and scales it (`Some`: how the turn ends), or notes the end of its stream.
    /// `None`: nothing from this camera, the turn goes on to the next.
    fn look_at(&mut self, i: usize) -> Result<Option<Turn>> {
        let n = self.cams.len();
        // A single camera sleeps on its own hop; several are looked at without a
        // wait, then slept on together at the end of the turn.
        let r = self.cams[i].input.recv(if n == 1 { IDLE_WAIT } else { Duration::ZERO })?;
        // The capture stage (re)joined: its pool, bound as at set-up.
        self.bind_joined(i)?;
        let mut frame = match incoming(r, "capture", "infer", || self.pool.prod.consumer_gone())? {
            Incoming::Item(f) => f,
            Incoming::Eos => {
                self.cams[i].ended = true;
                if n > 1 {
                    log::info!("camera {}: end of stream ({} frames)", self.cams[i].name, self.cams[i].frames_in);
                }
                if self.cams.iter().all(|c| c.ended) {
                    return Ok(Some(Turn::End("end of stream")));
                }
                return Ok(None);
            }
            Incoming::Idle => return Ok(None),
        };
        let cam = &mut self.cams[i];
        cam.frames_in += 1;
        // The newest frame of this camera: older ones waiting behind it go back
        // (video; `--ring-policy block` asks for every frame, in order).
        if n > 1 && self.ctx.data.ring_policy == RingPolicy::DropOldest {
            frame = cam.newest(frame)?;
        }
        self.next = i + 1;
        // Over the camera's detection rate: the NPU will not see it, so it is not scaled.
        if cam.gate.as_mut().is_some_and(|g| !g.admit(frame.desc().timestamp_ns)) {
            cam.skipped_rate += 1;
            cam.rate_since = cam.rate_since.saturating_add(1);
            return Ok(None);
        }
        // No change since the last frame that went on (and no keep-alive due): not scaled.
        if let Some(m) = cam.motion.as_mut() {
            if !m.admit(&frame)? {
                cam.skipped_still += 1;
                cam.still_since = cam.still_since.saturating_add(1);
                return Ok(None);
            }
        }
        let mut desc = FrameDesc { layout: self.pool.dst, ..*frame.desc() };
        desc.skipped_rate = std::mem::take(&mut cam.rate_since);
        desc.skipped_still = std::mem::take(&mut cam.still_since);
        desc.flags = with_camera(desc.flags, i);
        desc.stamp_in(Stage::Scale);
        if let Some(l) = cam.fixed_layout.filter(|l| *l != frame.desc().layout) {
            fail!("camera {}: capture changed its frame layout mid-stream ({l:?} -> {:?}); a device scaler is bound to the first", cam.name, frame.desc().layout);
        }
        self.scale_into(i, frame, desc).map(Some)
    }

    /// Binds camera `i`'s pool if its capture stage (re)joined since the last look
    /// ([`Camera::bind_if_joined`], with a fresh device scaler when one can be bound).
    fn bind_joined(&mut self, i: usize) -> Result<()> {
        let (cfg, ctx) = (self.cfg, self.ctx);
        let reopen = || open_scaler(cfg, ctx.data.copy_mode);
        let pool = &mut self.pool;
        let reopen = pool.can_reopen.then_some(&reopen as &dyn Fn() -> Result<Box<dyn Scaler>>);
        if self.cams[i].bind_if_joined(&mut pool.dst_handles, &pool.dst, pool.letterbox, reopen)? {
            // A camera that joined after set-up: its pool's fds are part of it.
            let fds_setup = open_fd_count();
            self.fds_setup = fds_setup;
            log::info!("camera {} joined; open fds now {fds_setup}", self.cams[i].name);
        }
        Ok(())
    }

    /// Scales `frame` of camera `i` into a buffer of the output pool and hands it on; with no
    /// buffer free within IDLE_WAIT the frame waits in `pending` for the next turn.
    fn scale_into(&mut self, i: usize, frame: Frame, desc: FrameDesc) -> Result<Turn> {
        let ctx = self.ctx;
        let Some(mut loan) = self.pool.prod.acquire_within(ctx.stop, Some(IDLE_WAIT))? else {
            if ctx.stopped() {
                return Ok(Turn::End("signal"));
            }
            self.pending = Some((i, frame, desc));
            return Ok(Turn::Next);
        };
        let cam = &mut self.cams[i];
        let scaler = cam.scaler.as_mut().context("no scaler for a camera")?;
        let mut desc = desc;
        desc.letterbox = scaler
            .scale(&frame, &mut loan)
            .with_context(|| format!("scaling frame {} of camera {}", frame.desc().seq, cam.name))?;
        drop(frame); // the capture buffer goes back now, before we queue ours
        cam.frames_out += 1;
        ctx.hand_off(loan, desc, Stage::Scale, &mut self.span, self.start)
    }

    /// Sends a report (`final_report`: the last) with `extra` and the cameras' counters:
    /// summed, and each camera's line with several.
    fn report(&self, final_report: bool, mut extra: Facts) {
        let (out, cams, ctx) = (&self.pool.prod, &self.cams, self.ctx);
        let (refused, own) = cams.iter().fold((0, OwnCounts::default()), |(r, o), c| {
            let own = c.input.own_counts();
            (
                r + c.input.refused(),
                OwnCounts { consumed: o.consumed + own.consumed, rejected: o.rejected + own.rejected },
            )
        });
        extra.extend([
            ("upstream_refused", refused.into()),
            ("input_taken", own.consumed.into()),
            ("input_rejected", own.rejected.into()),
        ]);
        let skipped_rate = cams.iter().map(|c| c.skipped_rate).sum();
        let skipped_still = cams.iter().map(|c| c.skipped_still).sum();
        let motion_us = cams.iter().filter_map(|c| c.motion.as_ref().and_then(MotionGate::mean_us)).reduce(f64::max);
        let cameras = if cams.len() > 1 {
            let down = out.dropped_per_camera();
            cams.iter().enumerate().map(|(i, c)| (c.name.clone(), c.facts(down[i % down.len()]))).collect()
        } else {
            Default::default()
        };
        extra.put(&ScaleFacts { skipped_rate, skipped_still, motion_us, cameras });
        let copy_in =
            cams.iter().filter_map(|c| c.input.current().and_then(|c| c.copy_counters())).reduce(CopyCounters::plus);
        let n_in = cams.iter().map(|c| c.frames_in).sum();
        // Frames out are the span's frames: `span.tick` counts each one published.
        ctx.reporter.send(&StageReport {
            copy_in,
            ..ctx.producer_report(self.start, final_report, extra, out, (n_in, self.span.frames), self.span)
        })
    }

    /// Ends the stage after its frame loop (which `ended` so): drains the output pool and
    /// sends the final report.
    fn close(mut self, ended: Result<&'static str>) -> Result<i32> {
        let n_in: u64 = self.cams.iter().map(|c| c.frames_in).sum();
        let (ctx, fds_setup) = (self.ctx, self.fds_setup);
        ctx.close(
            &mut self,
            ended,
            format!("{n_in} frames"),
            fds_setup,
            // A dead infer stage frees what it held: the drain returns at once then.
            |s, end| drain_pool(&mut s.pool.prod, end.clean, "").0,
            |s, mut extras| {
                extras.extend(s.down.facts());
                s.report(true, extras)
            },
        )
    }
}

/// How long a scale stage with a camera away sleeps at most before trying it again.
const REJOIN_POLL: Duration = Duration::from_millis(20);

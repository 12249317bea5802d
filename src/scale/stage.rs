//! The scale stage's process: join capture's pool, learn the model input from the infer
//! stage (size, channel order as the fourcc, letterbox placement and pad), preallocate the
//! output pool, then letterbox every frame into it.

use crate::sys::board;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::core::config::Choice;
use crate::core::dmabuf::Allocator;
use crate::core::frame::{Fourcc, FrameDesc, Letterbox, Stage};
use crate::core::link::{accept_hello, ControlMsg, Listener};
use crate::core::pool::{ring_capacity, HopSpec, PoolProducer, Upstream};
use crate::metrics::{open_fd_count, FrameSpan, StageReport};
use crate::stage::{drain_pool, incoming, serve_pool, upstream_facts, Downstream, Extras, Incoming, StageCtx, Turn, IDLE_WAIT};

use super::auto;
use super::cpu::CpuScaler;
use super::rga::{RgaCore, RgaScaler};
use super::v4l2m2m::V4l2M2mScaler;
use super::{NoScaler, ScaleConfig, Scaler, ScalerKind};

/// Source formats the scale stage accepts from capture.
pub const ACCEPTED: [Fourcc; 6] = [Fourcc::NV12, Fourcc::NV12M, Fourcc::NV16, Fourcc::YUYV, Fourcc::RGB24, Fourcc::BGR24];

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

/// Runs the scale stage with `cfg` (checked by the command line) until capture ends the
/// stream, the stop flag is set or a neighbour hangs up; returns the exit code.
pub fn run(cfg: ScaleConfig, ctx: StageCtx<'_>) -> Result<i32> {
    if cfg.rga_core != RgaCore::Auto && cfg.scaler != ScalerKind::Rga {
        log::warn!("--rga-core {} is for --scaler rga; the {} scaler ignores it", cfg.rga_core.name(), cfg.scaler);
    }
    let mut scaler = open_scaler(&cfg, ctx.data.copy_mode)?;
    let mut listener = Listener::bind(&ctx.data.socket("scale"))?;
    // Downstream first: frames start flowing only once the whole chain is connected.
    let (down, msg) = accept_hello(&mut listener, ctx.stop, ctx.data.connect_timeout, "infer")?;
    let want = match msg {
        ControlMsg::Hello { want: Some(w), .. } => w,
        other => bail!("the infer stage must say which input it wants; it sent {other:?}"),
    };
    let hello = ControlMsg::Hello { stage: "scale".into(), accept: ACCEPTED.iter().map(|f| f.0).collect(), want: None, wait: ctx.data.wait };
    let mut input = Upstream::join(ctx.data.socket("capture"), Stage::Capture, hello, ctx.data.wait, ctx.data.spin, ctx.stop, ctx.data.connect_timeout)?;
    let Some(first) = input.current() else { bail!("the capture stage hung up while we joined it") };
    log::info!("joined capture: {} ({} buffers, {})", first.offer.description, first.buffers().len(), first.offer.memory);

    let letterbox = Letterbox::new(want.placement, want.pad);
    let dst = match want.layout() {
        Ok(l) => l,
        Err(e) => {
            let error = format!("the infer stage asked for an input the scale stage cannot make: {e:#}");
            down.send(&ControlMsg::Refuse { error: error.clone() }, &[])?;
            bail!("{error}");
        }
    };
    let bpl = dst.planes[0].bytesperline;
    let heap = scaler.output_heap(ctx.data.heap);
    let alloc = Allocator::open(heap, &board::path("/dev/dma_heap"), &board::path("/dev/udmabuf"))?;
    let mut pool = alloc.allocate_pool(cfg.buffers, dst.bytes_needed())?;
    // A device imports both pools once here; the frames never meet the CPU after this.
    // Host sources change size per frame (no fixed layout): buffers are imported at first use.
    if let Err(e) = scaler.bind(first.buffers(), first.offer.layout.as_ref(), &mut pool, &dst, letterbox) {
        let error = format!("{e:#}");
        down.send(&ControlMsg::Refuse { error: error.clone() }, &[])?;
        bail!("{error}");
    }
    let mut out = PoolProducer::offer(
        down,
        pool.into_iter().map(|b| vec![b]).collect(),
        HopSpec {
            policy: ctx.data.ring_policy,
            capacity: ring_capacity(ctx.data.ring_policy, cfg.buffers),
            memory: alloc.describe(),
            layout: Some(dst),
            fps: first.offer.fps,
            description: format!("{}x{} {} {} letterbox, pad {}, bytesperline {}", dst.width, dst.height, dst.fourcc, want.placement.describe(), want.pad, bpl),
            copy_mode: ctx.data.copy_mode,
        },
    )?;
    out.keep_serving();
    let mut down = Downstream::new(listener);
    // A restarted infer stage must want what the pool was made for.
    let want_check = |h: &ControlMsg| match h {
        ControlMsg::Hello { want: Some(w), .. } if *w == want => Ok(()),
        ControlMsg::Hello { want: other, .. } => Err(format!(
            "this scale stage's pool holds {}x{} {} for the model it was started with; the infer stage now wants {other:?}: restart the scale stage too",
            want.width,
            want.height,
            Fourcc(want.fourcc)
        )),
        _ => Err("expected a hello from the infer stage".into()),
    };
    let fds_setup = open_fd_count();
    ctx.ready(Instant::now());
    log::info!(
        "{} -> {}x{} {}, {} letterbox, pad {}; open fds after set-up: {fds_setup}",
        scaler.name(),
        dst.width,
        dst.height,
        dst.fourcc,
        want.placement.describe(),
        want.pad
    );

    let start = Instant::now();
    let mut n_in = 0u64;
    let mut span = FrameSpan::default();
    // Frames out are the span's frames: `span.tick` counts each one published.
    let report = |out: &PoolProducer, input: &Upstream, n_in: u64, span: FrameSpan, final_report: bool, mut extra: Extras| {
        extra.extend(upstream_facts(input));
        let copy_in = input.current().and_then(|c| c.copy_counters());
        ctx.reporter.send(&StageReport { copy_in, ..ctx.producer_report(start, final_report, extra, out, (n_in, span.frames), span) })
    };
    let mut fixed_layout = first.offer.layout.filter(|_| scaler.binds_pools());
    let mut bound_joins = input.joins();
    // A frame taken while no output buffer was free (the infer stage holds them all): kept
    // for the next turn, so the loop still turns (and reports) while it waits.
    let mut pending: Option<(crate::core::pool::Frame, FrameDesc)> = None;
    // Scales `frame` into a buffer of `out` and hands it on; with no buffer free within
    // IDLE_WAIT the frame waits in `pending` for the next turn.
    let scale_into = |scaler: &mut dyn Scaler, out: &mut PoolProducer, frame: crate::core::pool::Frame, desc: FrameDesc, span: &mut FrameSpan, pending: &mut Option<(crate::core::pool::Frame, FrameDesc)>| -> Result<Turn> {
        let Some(mut loan) = out.acquire_within(ctx.stop, Some(IDLE_WAIT))? else {
            if ctx.stopped() {
                return Ok(Turn::End("signal"));
            }
            *pending = Some((frame, desc));
            return Ok(Turn::Next);
        };
        let mut desc = desc;
        desc.letterbox = scaler.scale(&frame, &mut loan).with_context(|| format!("scaling frame {}", frame.desc().seq))?;
        drop(frame); // the capture buffer goes back now, before we queue ours
        ctx.hand_off(loan, desc, Stage::Scale, span, start)
    };
    let ended = {
        let mut state = (&mut out, &mut input, &mut n_in, &mut span, &mut down);
        ctx.run_loop(
            &mut state,
            |(out, input, n_in, span, down)| report(out, input, **n_in, **span, false, down.facts()),
            |(out, input, n_in, span, down)| {
                serve_pool(down, out, Stage::Infer, want_check);
                if let Some((frame, desc)) = pending.take() {
                    return scale_into(&mut *scaler, out, frame, desc, span, &mut pending);
                }
                let r = input.recv(IDLE_WAIT)?;
                if input.joins() != bound_joins {
                    // The capture stage restarted: its new pool, bound as at set-up.
                    if let Some(c) = input.current() {
                        scaler.rebind_input(c.buffers(), c.offer.layout.as_ref())?;
                        fixed_layout = c.offer.layout.filter(|_| scaler.binds_pools());
                    }
                    bound_joins = input.joins();
                }
                let frame = match incoming(r, "capture", "infer", || out.consumer_gone())? {
                    Incoming::Item(f) => f,
                    Incoming::Eos => return Ok(Turn::End("end of stream")),
                    Incoming::Idle => return Ok(Turn::Next),
                };
                **n_in += 1;
                let mut desc = FrameDesc { layout: dst, ..*frame.desc() };
                desc.stamp_in(Stage::Scale);
                if let Some(l) = fixed_layout.filter(|l| *l != frame.desc().layout) {
                    bail!("capture changed its frame layout mid-stream ({l:?} -> {:?}); a device scaler is bound to the first", frame.desc().layout);
                }
                scale_into(&mut *scaler, out, frame, desc, span, &mut pending)
            },
        )
    };
    ctx.close(
        &mut out,
        ended,
        format!("{n_in} frames"),
        fds_setup,
        // A dead infer stage frees what it held: the drain returns at once then.
        |out, end| drain_pool(out, end.clean, "").0,
        |out, mut extras| {
            extras.extend(down.facts());
            report(out, &input, n_in, span, true, extras)
        },
    )
}

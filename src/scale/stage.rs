//! The scale stage's process: join capture's pool, learn the model input from the infer
//! stage, preallocate the output pool, then letterbox every frame into it.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::capture::stage::{ending, peer_gone};
use crate::cli::{CommonArgs, PeerGone, ScaleArgs, ScalerKind};
use crate::core::channel::Recv;
use crate::core::dmabuf::Allocator;
use crate::core::frame::{align_up, Fourcc, FrameDesc, FrameLayout, Stage};
use crate::core::link::{accept_hello, Conn, ControlMsg, Listener};
use crate::core::pool::{HopSpec, PoolConsumer, PoolProducer};
use crate::metrics::{open_fd_count, FrameSpan, Reporter, StageReport};
use crate::supervise::STOP;

use super::cpu::CpuScaler;
use super::rga::{rga_heap, RgaScaler};
use super::v4l2m2m::V4l2M2mScaler;
use super::{DeviceScaler, Scaler};

/// Source formats the scale stage accepts from capture.
pub const ACCEPTED: [Fourcc; 6] = [Fourcc::NV12, Fourcc::NV12M, Fourcc::NV16, Fourcc::YUYV, Fourcc::RGB24, Fourcc::BGR24];

/// Runs the scale stage; returns the exit code.
pub fn run(common: CommonArgs, args: ScaleArgs) -> Result<i32> {
    let stop = &STOP;
    let reporter = Reporter::new(common.report_fd);
    if args.rga_core != crate::scale::rga::RgaCore::Auto && args.scaler != ScalerKind::Rga {
        log::warn!("--rga-core {} is for --scaler rga; the {} scaler ignores it", args.rga_core.flag(), args.scaler);
    }
    // A device backend opens its node now, so a wrong node fails before any set-up.
    let mut device: Option<Box<dyn DeviceScaler>> = match &args.scaler {
        ScalerKind::V4l2M2m(path) => Some(Box::new(V4l2M2mScaler::open(path)?)),
        // Copy mode feeds RGA CPU memory (virtual addresses) below, as a plain pipeline does.
        ScalerKind::Rga if !common.copy_mode => Some(Box::new(RgaScaler::open(None, args.rga_core)?)),
        _ => None,
    };
    let mut scaler: Box<dyn Scaler> = match args.scaler {
        ScalerKind::None => Box::new(super::NoScaler),
        ScalerKind::Rga if common.copy_mode => {
            log::info!("copy mode: RGA reads and writes CPU memory through virtual addresses (wrapbuffer_virtualaddr_t), nothing imported");
            Box::new(RgaScaler::open(None, args.rga_core)?)
        }
        _ => Box::new(CpuScaler::new()),
    };
    if args.scale_buffers < 2 || args.scale_buffers > 64 {
        bail!("--scale-buffers {}: use 2..=64", args.scale_buffers);
    }
    let run_dir = common.run_dir();
    let listener = Listener::bind(&run_dir.join("scale.sock"))?;
    // Downstream first: frames start flowing only once the whole chain is connected.
    let (down, msg) = accept_hello(&listener, stop, common.connect_timeout(), "infer")?;
    let want = match msg {
        ControlMsg::Hello { want: Some(w), .. } => w,
        other => bail!("the infer stage must say which input it wants; it sent {other:?}"),
    };
    let up = Conn::connect_retry(&run_dir.join("capture.sock"), "capture stage", stop, common.connect_timeout())?;
    let hello = ControlMsg::Hello { stage: "scale".into(), accept: ACCEPTED.iter().map(|f| f.0).collect(), want: None, wait: common.wait };
    let input = PoolConsumer::join(up, &hello, common.wait, "capture")?;
    log::info!("joined capture: {} ({} buffers, {})", input.offer.description, input.buffers().len(), input.offer.memory);

    let dst_fourcc = Fourcc(want.fourcc);
    let bpl = if want.bytesperline != 0 { want.bytesperline } else { align_up(want.width * 3, want.stride_align.max(1).next_power_of_two()) };
    let dst = FrameLayout::packed24(dst_fourcc, want.width, want.height, bpl);
    let src_layout = input.offer.layout.unwrap_or_default();
    let src_fourcc = input.offer.layout.map(|l| l.fourcc).unwrap_or(Fourcc::NV12);
    if device.is_none() {
        if let Err(e) = scaler.check(src_fourcc, &dst) {
            let error = format!("{} scaler cannot feed the model: {e:#}", scaler.name());
            down.send(&ControlMsg::Refuse { error: error.clone() }, &[])?;
            bail!("{error}");
        }
    }
    let heap = if args.scaler == ScalerKind::Rga {
        // RGA2 reaches only the first 4 GiB: prefer a dma32 or CMA heap for what it writes.
        let h = rga_heap(common.heap, Path::new("/dev/dma_heap"));
        log::info!("rga: output pool heap: {}", h.reason);
        h.choice
    } else {
        common.heap
    };
    let alloc = Allocator::open(heap, Path::new("/dev/dma_heap"), Path::new("/dev/udmabuf"))?;
    let mut pool = alloc.allocate_pool(args.scale_buffers, dst.bytes_needed())?;
    if let Some(d) = device.as_mut() {
        // Imports both pools into the device once; the frames never meet the CPU here.
        let bound = match input.offer.layout {
            Some(l) => d.bind(input.buffers(), &l, &mut pool, &dst, want.pad),
            // Host sources change size per frame: buffers are imported at first use.
            None => d.bind_variable(input.buffers(), &mut pool, &dst, want.pad),
        };
        if let Err(e) = bound {
            let error = format!("{e:#}");
            down.send(&ControlMsg::Refuse { error: error.clone() }, &[])?;
            bail!("{error}");
        }
    }
    let scaler_name = device.as_ref().map(|d| d.name()).unwrap_or_else(|| format!("{} scaler", scaler.name()));
    let mut out = PoolProducer::offer(
        down,
        pool.into_iter().map(|b| vec![b]).collect(),
        HopSpec {
            policy: common.ring_policy,
            capacity: (args.scale_buffers as u32 - 1).max(1),
            memory: alloc.describe(),
            layout: Some(dst),
            fps: input.offer.fps,
            description: format!("{}x{} {} letterbox, bytesperline {}", dst.width, dst.height, dst.fourcc, bpl),
            copy_mode: common.copy_mode,
        },
    )?;
    let fds_setup = open_fd_count();
    log::info!("{scaler_name} -> {}x{} {} (pad {}); open fds after set-up: {fds_setup}", dst.width, dst.height, dst.fourcc, want.pad);

    let start = Instant::now();
    let mut n_in = 0u64;
    let mut last_report = Instant::now();
    let stats_every = common.stats_interval();
    let mut span = FrameSpan::default();
    // Frames out are the span's frames: `span.tick` counts each one published.
    let report = |out: &PoolProducer, n_in: u64, span: FrameSpan, final_report: bool, extra: Vec<(&str, serde_json::Value)>| {
        reporter.send(&StageReport {
            stage: "scale".into(),
            pid: std::process::id(),
            final_report,
            elapsed_s: start.elapsed().as_secs_f64(),
            frames_in: n_in,
            frames_out: span.frames,
            output_ring: Some(out.counters()),
            pool: Some(out.stats()),
            copy_out: out.copy_counters(),
            copy_in: input.copy_counters(),
            extra: extra.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            out_span: Some(span),
            ..Default::default()
        })
    };
    // Every way out of the loop (end, signal, hang-up, error) goes through the final report.
    let mut body = || -> Result<&'static str> {
        Ok(loop {
            if stop.load(Ordering::Relaxed) {
                break "signal";
            }
            if stats_every.is_some_and(|e| last_report.elapsed() >= e) {
                report(&out, n_in, span, false, vec![]);
                last_report = Instant::now();
            }
            let frame = match input.recv(Duration::from_millis(100))? {
                Recv::Item(f) => f,
                Recv::Eos => {
                    // A consumer already gone cannot drain: its death ended the stream (the
                    // supervisor stops every stage when one dies), so name it.
                    if out.conn().peer_gone() {
                        return Err(PeerGone("infer stage hung up".into()).into());
                    }
                    break "end of stream";
                }
                Recv::Hangup => return Err(PeerGone("capture stage hung up".into()).into()),
                Recv::Idle => {
                    if out.conn().peer_gone() {
                        return Err(PeerGone("infer stage hung up".into()).into());
                    }
                    continue;
                }
            };
            n_in += 1;
            let mut desc = FrameDesc { buffer_index: 0, layout: dst, ..frame.desc };
            desc.stamp_in(Stage::Scale);
            let Some(idx) = out.acquire(stop).map_err(peer_gone)? else { break "signal" };
            desc.buffer_index = idx;
            desc.letterbox = if let Some(d) = device.as_mut() {
                // The device reads capture's buffer and writes ours; no mapping, no sync here.
                if input.offer.layout.is_some() {
                    if frame.desc.layout != src_layout {
                        bail!("capture changed its frame layout mid-stream ({:?} -> {:?}); a device scaler is bound to the first", src_layout, frame.desc.layout);
                    }
                    d.scale(frame.desc.buffer_index, idx).with_context(|| format!("scaling frame {}", frame.desc.seq))?
                } else {
                    let dst_buf = &mut out.buffer_mut(idx)[0];
                    d.scale_frame(frame.desc.buffer_index, frame.buffers(), &frame.desc.layout, idx, dst_buf).with_context(|| format!("scaling frame {}", frame.desc.seq))?
                }
            } else if args.scaler == ScalerKind::None {
                // Pass-through: no mapping, no sync, no pixels; geometry only.
                scaler.scale(&[], &frame.desc.layout, &mut [], &dst, want.pad)?
            } else {
                let src = frame.read()?;
                let srcs: Vec<&[u8]> = src.iter().map(|g| g.bytes()).collect();
                let mut d = out.buffer_mut(idx)[0].write()?;
                scaler.scale(&srcs, &frame.desc.layout, &mut d, &dst, want.pad).with_context(|| format!("scaling frame {}", frame.desc.seq))?
            };
            drop(frame); // the capture buffer goes back now, before we queue ours
            desc.stamp_out(Stage::Scale);
            out.publish(desc, stop).map_err(peer_gone)?;
            span.tick(start);
        })
    };
    let ended = body();
    let (end_reason, level) = ending(&ended);
    log::log!(level, "{end_reason} after {n_in} frames; draining");
    // A dead infer stage frees what it held: the drain returns at once then.
    let ((returned, still_out), drained) = out.end(ended.is_ok(), Duration::from_secs(5));
    let fds_exit = open_fd_count();
    log::log!(level, "{returned} buffers came back after end of stream, {still_out} still out; open fds before exit: {fds_exit} (after set-up: {fds_setup})");
    report(
        &out,
        n_in,
        span,
        true,
        vec![("open_fds_setup", fds_setup.into()), ("open_fds_exit", fds_exit.into()), ("end_reason", end_reason.into())],
    );
    ended?;
    drained?;
    Ok(0)
}

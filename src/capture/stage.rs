//! The capture stage's process: open the source, preallocate the pool, serve it to the
//! scale stage, then produce paced frames into it until the source ends, `--frames` is
//! reached, or a signal arrives.
//!
//! A V4L2 camera ([`run_v4l2`]) takes a path of its own: the driver fills the pool (its
//! buffers exported with EXPBUF, or imported dma-bufs), paces the stream and stamps the
//! frames; the loop queues each buffer back once every downstream holder has dropped it.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::cli::{CaptureArgs, CommonArgs, PeerGone};
use crate::core::dmabuf::Allocator;
use crate::core::frame::{monotonic_ns, Fourcc, FrameDesc, Stage};
use crate::core::link::{accept_hello, ControlMsg, Listener};
use crate::core::pool::{HopSpec, PoolProducer};
use crate::metrics::{open_fd_count, FrameSpan, Reporter, StageReport};
use crate::sys::v4l2::node::first_capture_node;
use crate::supervise::STOP;

use super::spec::{open_source, SourceSpec};
use super::v4l2::{self, CaptureIo, Next, V4l2Capture, V4l2Config};

/// Runs the capture stage; returns the exit code.
pub fn run(common: CommonArgs, args: CaptureArgs) -> Result<i32> {
    let stop = &STOP;
    let reporter = Reporter::new(common.report_fd);
    let spec: SourceSpec = args.source.parse()?;
    // `auto`: the first V4L2 capture node if there is one, else the bundled clip.
    let spec = match spec {
        SourceSpec::Auto => match first_capture_node() {
            Some(n) => {
                log::info!("source auto: V4L2 capture node {}", n.label());
                SourceSpec::V4l2(Some(n.path))
            }
            None => {
                log::info!("source auto: no V4L2 capture node; playing the bundled clip");
                SourceSpec::Auto
            }
        },
        s => s,
    };
    if let SourceSpec::V4l2(device) = spec {
        return run_v4l2(common, args, device);
    }
    super::spec::check_v4l2_only_flags(&spec, args.format.is_some(), args.size.is_some(), args.capture_io.is_some())?;
    let mut source = open_source(&spec, args.fps)?;
    let info = source.info().clone();
    let fps = args.fps.unwrap_or(info.fps);
    super::spec::check_fps(fps)?;
    if args.buffers < 2 || args.buffers > 64 {
        anyhow::bail!("--buffers {}: use 2..=64 (4 is a good default)", args.buffers);
    }
    let alloc = Allocator::open(common.heap, Path::new("/dev/dma_heap"), Path::new("/dev/udmabuf"))?;
    let pool = alloc.allocate_pool(args.buffers, info.max_frame_bytes)?;
    log::info!(
        "{} at {fps:.2} fps; pool: {} x {} bytes from {}",
        info.description,
        pool.len(),
        pool[0].size(),
        alloc.describe()
    );
    let listener = Listener::bind(&common.run_dir().join("capture.sock"))?;
    let (conn, hello) = accept_hello(&listener, stop, common.connect_timeout(), "scale")?;
    let nv12 = Fourcc::NV12;
    if let ControlMsg::Hello { stage, accept, .. } = &hello {
        if !accept.is_empty() && !accept.contains(&nv12.0) {
            let names: Vec<String> = accept.iter().map(|f| Fourcc(*f).to_string()).collect();
            let error = format!("capture produces NV12 but {stage} accepts only {}", names.join(", "));
            conn.send(&ControlMsg::Refuse { error: error.clone() }, &[])?;
            anyhow::bail!("{error}");
        }
    } else {
        anyhow::bail!("expected a hello from the scale stage, got {hello:?}");
    }
    let capacity = (pool.len() as u32 - 1).max(1);
    let mut prod = PoolProducer::offer(
        conn,
        pool.into_iter().map(|b| vec![b]).collect(),
        HopSpec {
            policy: common.ring_policy,
            capacity,
            memory: alloc.describe(),
            layout: None,
            fps,
            description: info.description.clone(),
            copy_mode: common.copy_mode,
        },
    )?;
    let fds_setup = open_fd_count();
    log::info!("serving scale (pid {}); open fds after set-up: {fds_setup}", prod.conn().peer_pid);

    let period = Duration::from_secs_f64(1.0 / fps);
    let start = Instant::now();
    let mut due = start;
    let mut seq = 0u64;
    let mut last_report = Instant::now();
    let stats_every = common.stats_interval();
    let mut span = FrameSpan::default();
    let report = |prod: &PoolProducer, seq: u64, span: FrameSpan, final_report: bool, extra: Vec<(&str, serde_json::Value)>| {
        reporter.send(&capture_report(prod, start, span, final_report, (seq, seq), extra))
    };
    // Every way out of the loop (end, signal, hang-up, error) goes through the final report.
    let mut body = || -> Result<&'static str> {
        Ok(loop {
            if stop.load(Ordering::Relaxed) {
                break "signal";
            }
            if args.frames.is_some_and(|n| seq >= n) {
                break "frame limit";
            }
            if prod.conn().peer_gone() {
                return Err(PeerGone("scale stage hung up".into()).into());
            }
            // Pace: frame n is due at start + n * period; a late frame resets the schedule.
            let now = Instant::now();
            if due > now {
                std::thread::sleep((due - now).min(Duration::from_millis(100)));
                continue;
            }
            due = if now - due > period { now + period } else { due + period };
            let Some(idx) = prod.acquire(stop).map_err(peer_gone)? else { break "signal" };
            let layout = {
                let mut buf = prod.buffer_mut(idx)[0].write()?;
                source.fill(&mut buf)?
            };
            let Some(layout) = layout else {
                prod.abandon(idx);
                break "end of source";
            };
            let ts = monotonic_ns();
            let mut desc = FrameDesc { seq, timestamp_ns: ts, buffer_index: idx, layout, ..Default::default() };
            desc.stamps[2 * Stage::Capture as usize] = ts;
            desc.stamp_out(Stage::Capture);
            prod.publish(desc, stop).map_err(peer_gone)?;
            seq += 1;
            span.tick(start);
            if stats_every.is_some_and(|e| last_report.elapsed() >= e) {
                report(&prod, seq, span, false, vec![]);
                last_report = Instant::now();
            }
        })
    };
    let ended = body();
    let (end_reason, level) = ending(&ended);
    log::log!(level, "{end_reason} after {seq} frames; draining");
    // A dead scale stage frees what it held: the drain returns at once then.
    let ((returned, still_out), drained) = prod.end(ended.is_ok(), Duration::from_secs(5));
    let fds_exit = open_fd_count();
    log::log!(level, "{returned} buffers came back after end of stream, {still_out} still out; open fds before exit: {fds_exit} (after set-up: {fds_setup})");
    report(&prod, seq, span, true, end_extras(returned, still_out, fds_setup, fds_exit, &end_reason));
    ended?;
    drained?;
    Ok(0)
}

/// The capture stage on a V4L2 camera: open and negotiate, make the pool (MMAP + EXPBUF or
/// imported dma-bufs), offer it to scale, stream until `--frames`, a signal, or the camera
/// is unplugged; then drain, STREAMOFF, and report.
fn run_v4l2(common: CommonArgs, args: CaptureArgs, device: Option<std::path::PathBuf>) -> Result<i32> {
    let stop = &STOP;
    let reporter = Reporter::new(common.report_fd);
    if args.buffers < 2 || args.buffers > 64 {
        anyhow::bail!("--buffers {}: use 2..=64 (4 is a good default)", args.buffers);
    }
    let io = args.capture_io.unwrap_or_default();
    let cfg = V4l2Config {
        device,
        format: args.format.as_deref().map(v4l2::parse_format).transpose()?,
        size: args.size.as_deref().map(v4l2::parse_size).transpose()?,
        fps: args.fps,
        buffers: args.buffers,
        io,
    };
    let mut cam = V4l2Capture::open(&cfg)?;
    let alloc = match io {
        CaptureIo::Dmabuf => Some(Allocator::open(common.heap, Path::new("/dev/dma_heap"), Path::new("/dev/udmabuf"))?),
        CaptureIo::Mmap => {
            if common.heap != crate::core::dmabuf::HeapChoice::Auto {
                // The driver allocates: only check that an explicit --heap exists (for the
                // stages downstream), so a wrong one fails here, at once, in one line.
                Allocator::open(common.heap, Path::new("/dev/dma_heap"), Path::new("/dev/udmabuf"))?;
            }
            None
        }
    };
    let pool = cam.allocate(args.buffers, alloc.as_ref())?;
    let memory = match &alloc {
        Some(a) => format!("{} imported by {} (V4L2_MEMORY_DMABUF)", a.describe(), cam.node().driver),
        None => format!("{} buffers exported with VIDIOC_EXPBUF (V4L2_MEMORY_MMAP)", cam.node().driver),
    };
    let n_bufs = pool.len();
    let n_fds: usize = pool.iter().map(|b| b.len()).sum();
    let sizes: Vec<String> = pool[0].iter().map(|b| b.size().to_string()).collect();
    log::info!("{}; pool: {n_bufs} buffers ({n_fds} dma-buf fds of {} bytes): {memory}", cam.describe(), sizes.join("+"));
    let layout = cam.layout();
    let fps = cam.granted().fps();

    let listener = Listener::bind(&common.run_dir().join("capture.sock"))?;
    let (conn, hello) = accept_hello(&listener, stop, common.connect_timeout(), "scale")?;
    if let ControlMsg::Hello { stage, accept, .. } = &hello {
        if !accept.is_empty() && !accept.contains(&layout.fourcc.0) {
            let names: Vec<String> = accept.iter().map(|f| v4l2::format_name(Fourcc(*f))).collect();
            let error = format!(
                "{} captures {} but {stage} accepts only {}; pass --format with one of those",
                cam.node().label(),
                v4l2::format_name(layout.fourcc),
                names.join(", ")
            );
            conn.send(&ControlMsg::Refuse { error: error.clone() }, &[])?;
            anyhow::bail!("{error}");
        }
    } else {
        anyhow::bail!("expected a hello from the scale stage, got {hello:?}");
    }
    let mut prod = PoolProducer::offer(
        conn,
        pool,
        HopSpec {
            policy: common.ring_policy,
            capacity: (n_bufs as u32 - 1).max(1),
            memory: memory.clone(),
            layout: Some(layout),
            fps,
            description: cam.describe(),
            copy_mode: common.copy_mode,
        },
    )?;
    let fds_setup = open_fd_count();
    log::info!(
        "serving scale (pid {}): passed {n_fds} dma-buf fds of {n_bufs} buffers once; open fds after set-up: {fds_setup}",
        prod.conn().peer_pid
    );
    cam.start(&mut prod)?;

    let start = Instant::now();
    let mut last_report = Instant::now();
    let stats_every = common.stats_interval();
    let g = cam.granted().clone();
    let facts = move |cam: &V4l2Capture| -> Vec<(&'static str, serde_json::Value)> {
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
            ("buffers", n_bufs.into()),
            ("dmabuf_fds", n_fds.into()),
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
    };
    let mut span = FrameSpan::default();
    let report = |prod: &PoolProducer, cam: &V4l2Capture, span: FrameSpan, final_report: bool, mut extra: Vec<(&str, serde_json::Value)>| {
        let s = cam.stats();
        extra.extend(facts(cam));
        reporter.send(&capture_report(prod, start, span, final_report, (s.dequeued, s.published), extra))
    };
    // Every way out of the loop (end, signal, unplug, hang-up, error) goes through the
    // STREAMOFF and the final report.
    let mut body = || -> Result<&'static str> {
        Ok(loop {
            if stop.load(Ordering::Relaxed) {
                break "signal";
            }
            if args.frames.is_some_and(|n| cam.stats().published >= n) {
                break "frame limit";
            }
            if prod.conn().peer_gone() {
                return Err(PeerGone("scale stage hung up".into()).into());
            }
            match cam.next_frame(&mut prod, stop, Duration::from_millis(100)) {
                Ok(Next::Frame(..)) => span.tick(start),
                Ok(Next::Idle) => {}
                Ok(Next::Unplugged) => {
                    log::warn!("camera unplugged: {} went away (ENODEV); ending the stream", cam.node().path.display());
                    break "camera unplugged";
                }
                Err(_) if stop.load(Ordering::Relaxed) => break "signal",
                Err(e) => return Err(peer_gone(e)),
            }
            if stats_every.is_some_and(|e| last_report.elapsed() >= e) {
                report(&prod, &cam, span, false, vec![]);
                last_report = Instant::now();
            }
        })
    };
    let ended = body();
    let (end_reason, level) = ending(&ended);
    let s = cam.stats();
    log::log!(
        level,
        "{end_reason} after {} frames ({} dequeued, {} dropped by the driver, {} flagged corrupt); draining",
        s.published,
        s.dequeued,
        s.driver_drops,
        s.error_frames
    );
    // A dead scale stage frees what it held: the drain returns at once then. STREAMOFF is
    // tried even after a failed drain, so the driver gives its buffers back.
    let ((returned, still_out), drained) = prod.end(ended.is_ok(), Duration::from_secs(5));
    let streamed_off = cam.stream_off(&mut prod);
    let held = streamed_off.as_ref().copied().unwrap_or(0);
    let home = n_bufs - still_out;
    let fds_exit = open_fd_count();
    log::log!(
        level,
        "{returned} buffers came back after end of stream, {still_out} still out, before STREAMOFF; STREAMOFF took back the {held} the driver held: {home}/{n_bufs} buffers home; open fds before exit: {fds_exit} (after set-up: {fds_setup})"
    );
    let mut extra = end_extras(returned, still_out, fds_setup, fds_exit, &end_reason);
    extra.extend([("buffers_held_by_driver_at_streamoff", held.into()), ("buffers_home", home.into())]);
    report(&prod, &cam, span, true, extra);
    ended?;
    drained?;
    streamed_off?;
    Ok(0)
}

/// The final report's facts every capture loop gives: buffers that came back after end of
/// stream and those still out, open fds after set-up and before exit, why it ended.
fn end_extras(returned: usize, still_out: usize, fds_setup: usize, fds_exit: usize, end_reason: &str) -> Vec<(&'static str, serde_json::Value)> {
    vec![
        ("buffers_returned_at_end", returned.into()),
        ("buffers_still_out", still_out.into()),
        ("open_fds_setup", fds_setup.into()),
        ("open_fds_exit", fds_exit.into()),
        ("end_reason", end_reason.into()),
    ]
}

/// Turns a "downstream hung up" error into [`PeerGone`] so it is reported quietly.
pub fn peer_gone(e: anyhow::Error) -> anyhow::Error {
    if e.to_string().contains("hung up") {
        PeerGone(e.to_string()).into()
    } else {
        e
    }
}

/// How a stage's frame loop ended, for its final report's `end_reason` and its closing log
/// lines: the loop's own reason ("end of stream", "signal", ...) logged at info, or the
/// error that ended it ("infer stage hung up", ...) logged at debug only, since the error
/// itself is reported on its own (quietly if a neighbour hung up).
pub fn ending(ended: &Result<&'static str>) -> (String, log::Level) {
    match ended {
        Ok(reason) => (reason.to_string(), log::Level::Info),
        Err(e) => (format!("{e:#}"), log::Level::Debug),
    }
}

/// Capture's report to the supervisor (both loops): `frames` is (frames in, frames out),
/// i.e. (frames the source gave, frames offered to scale); `span` is when the frames out
/// went; `extra` adds source facts.
fn capture_report(
    prod: &PoolProducer,
    start: Instant,
    span: FrameSpan,
    final_report: bool,
    frames: (u64, u64),
    extra: Vec<(&str, serde_json::Value)>,
) -> StageReport {
    StageReport {
        stage: "capture".into(),
        pid: std::process::id(),
        final_report,
        elapsed_s: start.elapsed().as_secs_f64(),
        frames_in: frames.0,
        frames_out: frames.1,
        output_ring: Some(prod.counters()),
        pool: Some(prod.stats()),
        copy_out: prod.copy_counters(),
        extra: extra.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        out_span: Some(span),
        ..Default::default()
    }
}

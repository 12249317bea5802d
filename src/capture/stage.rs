//! The capture stage's process: open the source, preallocate the pool, serve it to the
//! scale stage, then produce paced frames into it until the source ends, `--frames` is
//! reached, or a signal arrives.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::cli::{CaptureArgs, CommonArgs, PeerGone};
use crate::core::dmabuf::Allocator;
use crate::core::frame::{monotonic_ns, Fourcc, FrameDesc, Stage};
use crate::core::link::{ControlMsg, Listener};
use crate::core::pool::{HopSpec, PoolProducer};
use crate::metrics::{open_fd_count, Reporter, StageReport};
use crate::supervise::STOP;

use super::spec::{open_source, SourceSpec};

/// Runs the capture stage; returns the exit code.
pub fn run(common: CommonArgs, args: CaptureArgs) -> Result<i32> {
    let stop = &STOP;
    let reporter = Reporter::new(common.report_fd);
    let spec: SourceSpec = args.source.parse()?;
    let mut source = open_source(&spec, args.fps)?;
    let info = source.info().clone();
    let fps = args.fps.unwrap_or(info.fps);
    if !(fps > 0.0 && fps.is_finite()) {
        anyhow::bail!("--fps {fps} is not a positive frame rate");
    }
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
    let conn = listener.accept(stop)?;
    let (hello, _) = conn.recv().context("reading the scale stage's hello")?;
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
    let report = |prod: &PoolProducer, seq: u64, final_report: bool, extra: Vec<(&str, serde_json::Value)>| {
        reporter.send(&StageReport {
            stage: "capture".into(),
            pid: std::process::id(),
            final_report,
            elapsed_s: start.elapsed().as_secs_f64(),
            frames_in: seq,
            frames_out: seq,
            output_ring: Some(prod.counters()),
            pool: Some(prod.stats()),
            extra: extra.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            ..Default::default()
        })
    };
    let end_reason = loop {
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
        if stats_every.is_some_and(|e| last_report.elapsed() >= e) {
            report(&prod, seq, false, vec![]);
            last_report = Instant::now();
        }
    };
    log::info!("{end_reason} after {seq} frames; draining");
    let (returned, still_out) = prod.finish(Duration::from_secs(5))?;
    let fds_exit = open_fd_count();
    log::info!("{returned} buffers came back after end of stream, {still_out} still out; open fds before exit: {fds_exit} (after set-up: {fds_setup})");
    report(
        &prod,
        seq,
        true,
        vec![
            ("buffers_returned_at_end", returned.into()),
            ("buffers_still_out", still_out.into()),
            ("open_fds_setup", fds_setup.into()),
            ("open_fds_exit", fds_exit.into()),
            ("end_reason", end_reason.into()),
        ],
    );
    Ok(0)
}

/// Turns a "downstream hung up" error into [`PeerGone`] so it is reported quietly.
pub fn peer_gone(e: anyhow::Error) -> anyhow::Error {
    if e.to_string().contains("hung up") {
        PeerGone(e.to_string()).into()
    } else {
        e
    }
}

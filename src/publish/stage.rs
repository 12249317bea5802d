//! The publish stage's process: join the infer stage's detections ring, then turn each
//! frame's detections into one JSON line for every client (and optionally stdout), keeping
//! latency histograms of every stage.

use std::io::Write as _;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use crate::capture::stage::ending;
use crate::cli::{CommonArgs, PeerGone, PrintMode, PublishArgs};
use crate::core::channel::Recv;
use crate::core::detections::DetectionsDesc;
use crate::core::frame::{monotonic_ns, Stage};
use crate::core::link::{Conn, ControlMsg, Listener};
use crate::core::pool::join;
use crate::metrics::{latencies_us, open_fd_count, FrameSpan, LatencySet, Reporter, StageReport};
use crate::supervise::STOP;

use super::schema::{DetectionJson, FrameJson, LatencyJson, SocketLine};
use super::{default_socket_path, DetectionServer};

/// Builds the published object of one frame (`lat`: [`latencies_us`] of its stamps; see
/// [`LatencyJson`] for where the line's publish latency ends).
pub fn frame_json(d: &DetectionsDesc, labels: &[String], lat: &[Option<f64>; 5]) -> FrameJson {
    let r = |v: Option<f64>| (v.unwrap_or(0.0) * 10.0).round() / 10.0;
    FrameJson {
        seq: d.seq,
        timestamp_ns: d.timestamp_ns,
        width: d.width,
        height: d.height,
        latency_us: LatencyJson { capture: r(lat[0]), scale: r(lat[1]), infer: r(lat[2]), publish: r(lat[3]), total: r(lat[4]) },
        detections: d.dets[..d.count as usize]
            .iter()
            .map(|x| DetectionJson {
                class_id: x.class_id,
                label: labels.get(x.class_id as usize).cloned().unwrap_or_else(|| format!("class_{}", x.class_id)),
                score: (x.score * 1000.0).round() / 1000.0,
                bbox: x.bbox.map(|v| (v * 10.0).round() / 10.0),
            })
            .collect(),
    }
}

/// One readable line for a frame: `frame 12 (768x432, 72.1 ms): person 0.91 [188,97,276,371]`.
pub fn human_line(f: &FrameJson) -> String {
    let dets: Vec<String> = f
        .detections
        .iter()
        .map(|d| format!("{} {:.2} [{:.0},{:.0},{:.0},{:.0}]", d.label, d.score, d.bbox[0], d.bbox[1], d.bbox[2], d.bbox[3]))
        .collect();
    format!(
        "frame {} ({}x{}, {:.1} ms): {}",
        f.seq,
        f.width,
        f.height,
        f.latency_us.total / 1000.0,
        if dets.is_empty() { "nothing".to_string() } else { dets.join(", ") }
    )
}

/// Runs the publish stage; returns the exit code.
pub fn run(common: CommonArgs, args: PublishArgs) -> Result<i32> {
    let stop = &STOP;
    let reporter = Reporter::new(common.report_fd);
    let run_dir = common.run_dir();
    let _listener = Listener::bind(&run_dir.join("publish.sock"))?;
    let path = args.publish.clone().unwrap_or_else(|| default_socket_path(&common.instance));
    let mut server = DetectionServer::bind(&path)?;
    let up = Conn::connect_retry(&run_dir.join("infer.sock"), "infer stage", stop, common.connect_timeout())?;
    let hello = ControlMsg::Hello { stage: "publish".into(), accept: vec![], want: None, wait: common.wait };
    let (offer, mut rx, bufs) = join::<DetectionsDesc>(up, &hello, common.wait, "infer")?;
    if !bufs.is_empty() {
        bail!("infer offered {} buffers; the detections hop carries none", bufs.len());
    }
    let labels = offer.labels;
    let fds_setup = open_fd_count();
    log::info!("publishing {} on {}; open fds after set-up: {fds_setup}", offer.description, path.display());

    let start = Instant::now();
    let mut lat = LatencySet::default();
    let mut n_in = 0u64;
    let mut last_report = Instant::now();
    let stats_every = common.stats_interval();
    let stdout = std::io::stdout();
    let mut span = FrameSpan::default();
    // Frames out are the span's frames: `span.tick` counts each one handed out.
    let report = |server: &DetectionServer, lat: &LatencySet, n_in: u64, span: FrameSpan, final_report: bool, extra: Vec<(&str, serde_json::Value)>| {
        let mut extra: std::collections::BTreeMap<String, serde_json::Value> = extra.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        extra.insert("server".into(), serde_json::to_value(server.stats()).unwrap_or_default());
        reporter.send(&StageReport {
            stage: "publish".into(),
            pid: std::process::id(),
            final_report,
            elapsed_s: start.elapsed().as_secs_f64(),
            frames_in: n_in,
            frames_out: span.frames,
            latency: lat.summary(),
            extra,
            out_span: Some(span),
            ..Default::default()
        })
    };
    let validate = |d: &DetectionsDesc| d.validate();
    // Every way out of the loop (end, signal, hang-up, error) goes through the final report.
    let mut body = || -> Result<&'static str> {
        Ok(loop {
            if stop.load(Ordering::Relaxed) {
                break "signal";
            }
            server.service();
            if stats_every.is_some_and(|e| last_report.elapsed() >= e) {
                report(&server, &lat, n_in, span, false, vec![]);
                last_report = Instant::now();
            }
            let mut d = match rx.recv(&validate, &mut |_, _| {}, Duration::from_millis(100))? {
                Recv::Item(d) => d,
                Recv::Eos => break "end of stream",
                Recv::Hangup => return Err(PeerGone("infer stage hung up".into()).into()),
                Recv::Idle => continue,
            };
            n_in += 1;
            d.stamps[2 * Stage::Publish as usize] = monotonic_ns();
            // The line carries the latencies up to now, when it is built: it cannot carry
            // the time it takes to serialise and send itself (LatencyJson).
            d.stamps[2 * Stage::Publish as usize + 1] = monotonic_ns();
            let f = frame_json(&d, &labels, &latencies_us(d.timestamp_ns, &d.stamps));
            let human = (args.print == PrintMode::Human).then(|| human_line(&f));
            let line = SocketLine::Frame(f).to_line()?;
            server.broadcast(line.as_bytes());
            match args.print {
                PrintMode::None => {}
                PrintMode::Json => {
                    let _ = stdout.lock().write_all(line.as_bytes());
                }
                PrintMode::Human => {
                    if let Some(h) = &human {
                        let _ = writeln!(stdout.lock(), "{h}");
                    }
                }
            }
            // The histograms get the stage's whole span: taken off the ring to the line
            // handed to every client and printed.
            d.stamps[2 * Stage::Publish as usize + 1] = monotonic_ns();
            lat.record(&latencies_us(d.timestamp_ns, &d.stamps));
            span.tick(start);
        })
    };
    let ended = body();
    let (end_reason, level) = ending(&ended);
    log::log!(level, "{end_reason} after {n_in} frames");
    server.close_all(&end_reason, span.frames);
    let fds_exit = open_fd_count();
    drop(rx);
    log::log!(level, "open fds before exit: {fds_exit} (after set-up: {fds_setup})");
    let extra = vec![("open_fds_setup", fds_setup.into()), ("open_fds_exit", fds_exit.into()), ("end_reason", end_reason.into())];
    report(&server, &lat, n_in, span, true, extra);
    ended?;
    Ok(0)
}

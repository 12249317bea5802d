//! The infer stage's process: load the model (failing fast on a bad one), ask the scale
//! stage for exactly the model's input, then detect on every frame and hand detections
//! (boxes mapped back to source-frame pixels) to the publish stage.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::capture::spec::find_data_file;
use crate::capture::stage::peer_gone;
use crate::cli::{CommonArgs, InferArgs, PeerGone};
use crate::core::channel::{Recv, Sender};
use crate::core::frame::{Fourcc, Stage};
use crate::core::link::{accept_hello, Conn, ControlMsg, Listener, WantedInput};
use crate::core::pool::{offer_items, PoolConsumer};
use crate::metrics::{open_fd_count, Reporter, StageReport};
use crate::publish::{DetectionRecord, DetectionsDesc, MAX_DETECTIONS};
use crate::supervise::STOP;

use super::{load_labels, open_detector, DetectorOptions};

/// Letterbox fill value of YOLOX's `preproc` (yolox/data/data_augment.py).
pub const YOLOX_PAD: u8 = 114;

/// Resolves a data path given on the command line: as given if it exists, else the bundled
/// file of that relative name (next to the binary or in the source tree).
pub fn resolve_data_path(p: &Path) -> PathBuf {
    if p.exists() || p.is_absolute() {
        return p.to_path_buf();
    }
    p.to_str().and_then(find_data_file).unwrap_or_else(|| p.to_path_buf())
}

/// Runs the infer stage; returns the exit code.
pub fn run(common: CommonArgs, args: InferArgs) -> Result<i32> {
    let stop = &STOP;
    let reporter = Reporter::new(common.report_fd);
    let model = resolve_data_path(&args.model);
    if !(0.0..=1.0).contains(&args.score_threshold) || !(0.0..=1.0).contains(&args.nms_iou) {
        bail!("--score-threshold and --nms-iou must be in 0..=1 (got {} and {})", args.score_threshold, args.nms_iou);
    }
    let npu_cores = match &args.npu_cores {
        Some(s) => super::rknn::parse_npu_cores(s).map_err(anyhow::Error::msg)?,
        None => Vec::new(),
    };
    let opts = DetectorOptions { model: model.clone(), score_threshold: args.score_threshold, nms_iou: args.nms_iou, npu_cores };
    let mut det = open_detector(&args.infer, &opts)?;
    if !opts.npu_cores.is_empty() && det.name() != "rknn" {
        log::warn!("--npu-cores is for the rknn backend; the {} backend ignores it", det.name());
    }
    let labels = load_labels(&resolve_data_path(&args.labels))?;
    let spec = det.input_spec().clone();
    log::info!("{} detector, model {} wants {}x{} {}", det.name(), model.display(), spec.width, spec.height, spec.fourcc);

    let run_dir = common.run_dir();
    let listener = Listener::bind(&run_dir.join("infer.sock"))?;
    // Downstream first: frames start flowing only once the whole chain is connected.
    let (down, _) = accept_hello(&listener, stop)?;
    let up = Conn::connect_retry(&run_dir.join("scale.sock"), "scale stage", stop, common.connect_timeout())?;
    // An NPU reading the buffer in place needs its own row stride (spec.bytesperline).
    let want = WantedInput { width: spec.width, height: spec.height, fourcc: spec.fourcc.0, stride_align: 1, bytesperline: spec.bytesperline, pad: YOLOX_PAD };
    let hello = ControlMsg::Hello { stage: "infer".into(), accept: vec![Fourcc::BGR24.0], want: Some(want), wait: common.wait };
    let input = PoolConsumer::join(up, &hello, common.wait, "scale")?;
    log::info!("joined scale: {} ({} buffers, {})", input.offer.description, input.buffers().len(), input.offer.memory);
    // Zero-copy backends import the pool once; copy mode stays a plain pipeline (CPU reads).
    let bound = if common.copy_mode || input.buffers().iter().any(|b| b.len() != 1) {
        false
    } else {
        let bufs: Vec<&crate::core::dmabuf::DmaBuf> = input.buffers().iter().map(|b| &b[0]).collect();
        det.bind_pool(&bufs)?
    };

    let mut out: Sender<DetectionsDesc> = offer_items(down, 8, common.ring_policy, format!("{} detections", det.name()), labels)?;
    let fds_setup = open_fd_count();
    log::info!("serving publish (pid {}); open fds after set-up: {fds_setup}", out.conn().peer_pid);

    let start = Instant::now();
    let (mut n_in, mut n_out) = (0u64, 0u64);
    let mut last_report = Instant::now();
    let stats_every = common.stats_interval();
    let report = |out: &Sender<DetectionsDesc>, n_in: u64, n_out: u64, final_report: bool, extra: Vec<(&str, serde_json::Value)>| {
        reporter.send(&StageReport {
            stage: "infer".into(),
            pid: std::process::id(),
            final_report,
            elapsed_s: start.elapsed().as_secs_f64(),
            frames_in: n_in,
            frames_out: n_out,
            output_ring: Some(out.counters()),
            copy_in: input.copy_counters(),
            extra: extra.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            ..Default::default()
        })
    };
    let end_reason = loop {
        if stop.load(Ordering::Relaxed) {
            break "signal";
        }
        if stats_every.is_some_and(|e| last_report.elapsed() >= e) {
            report(&out, n_in, n_out, false, vec![]);
            last_report = Instant::now();
        }
        let frame = match input.recv(Duration::from_millis(100))? {
            Recv::Item(f) => f,
            Recv::Eos => break "end of stream",
            Recv::Hangup => return Err(PeerGone("scale stage hung up".into()).into()),
            Recv::Idle => {
                if out.conn().peer_gone() {
                    return Err(PeerGone("publish stage hung up".into()).into());
                }
                continue;
            }
        };
        n_in += 1;
        let mut d = frame.desc;
        d.stamp_in(Stage::Infer);
        let l = d.layout;
        if l.fourcc != spec.fourcc || l.width != spec.width || l.height != spec.height {
            bail!("scale sent a {}x{} {} frame; the model needs {}x{} {}", l.width, l.height, l.fourcc, spec.width, spec.height, spec.fourcc);
        }
        let dets = if bound {
            // The device reads the buffer in place: no CPU mapping, no sync ioctl here.
            det.detect_bound(d.buffer_index, &l).with_context(|| format!("inference on frame {}", d.seq))?
        } else {
            let g = frame.read()?;
            det.detect(g[0].bytes(), &l).with_context(|| format!("inference on frame {}", d.seq))?
        };
        drop(frame); // the scale buffer goes back before we publish
        let lb = d.letterbox;
        let mut dd = DetectionsDesc { seq: d.seq, timestamp_ns: d.timestamp_ns, stamps: d.stamps, width: lb.src_w, height: lb.src_h, ..Default::default() };
        for (slot, x) in dd.dets.iter_mut().zip(dets.iter().take(MAX_DETECTIONS)) {
            *slot = DetectionRecord { class_id: x.class_id, score: x.score, bbox: lb.unmap_box(x.bbox) };
        }
        dd.count = dets.len().min(MAX_DETECTIONS) as u32;
        dd.stamps[2 * Stage::Infer as usize] = d.stamps[2 * Stage::Infer as usize];
        dd.stamps[2 * Stage::Infer as usize + 1] = crate::core::frame::monotonic_ns();
        out.send(dd, stop).map_err(peer_gone)?;
        n_out += 1;
    };
    log::info!("{end_reason} after {n_in} frames; draining");
    out.finish();
    let t = Instant::now();
    while !out.conn().peer_gone() && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let fds_exit = open_fd_count();
    log::info!("open fds before exit: {fds_exit} (after set-up: {fds_setup})");
    report(&out, n_in, n_out, true, vec![("open_fds_setup", fds_setup.into()), ("open_fds_exit", fds_exit.into()), ("device_reads_in_place", bound.into())]);
    Ok(0)
}

//! The `rknn` backend in the whole multi-process pipeline, against the ABI fake of
//! librknnrt.so (`fakes/librknnrt`): the fake runs `models/yolox_nano.onnx` with tract on the
//! bytes it reads from the dma-buf zcpipe bound, and logs every call, so these tests check
//! both the detections and the zero-copy contract (what was imported, when, and released).
//!
//! The fake is built by `make test` before `cargo test`; the first test to need it also
//! brings it up to date with `cargo build --release --locked --lib -p zcpipe -p zcpipe-fake-librknnrt`
//! (built next to zcpipe's library, its dependencies get zcpipe's features, so tract is
//! compiled once for both).
//!
//! The two tests comparing with the `onnx` backend need zcpipe's `onnx` feature (default).

#![cfg_attr(not(feature = "onnx"), allow(dead_code))]

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;

use serde_json::Value;

use crate::common;
use common::{assert_no_orphans, fake_librga, fake_librknnrt, root, zcpipe, zcpipe_run};

mod in_process;
mod sched;
mod service;

fn data(p: &str) -> PathBuf {
    root().join(p)
}

struct Run {
    out: Output,
    summary: Option<Value>,
    /// The fake's call log, one entry per line: (name, key -> value).
    calls: Vec<(String, HashMap<String, String>)>,
}

impl Run {
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).to_string()
    }
    /// The frame lines printed (not the tracker's event lines).
    fn frames(&self) -> Vec<Value> {
        String::from_utf8_lossy(&self.out.stdout)
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|v| v["type"] == "frame")
            .collect()
    }
    fn named(&self, name: &str) -> Vec<&HashMap<String, String>> {
        self.calls.iter().filter(|(n, _)| n == name).map(|(_, kv)| kv).collect()
    }
}

/// A fake system root (`$ZCPIPE_TEST_ROOT`) whose device tree names `soc` (as
/// /proc/device-tree/compatible does) and has nothing else (no /dev nodes, no heaps).
fn board_root(dir: &Path, soc: &str) -> PathBuf {
    let root = dir.join(format!("root-{soc}"));
    std::fs::create_dir_all(root.join("proc/device-tree")).unwrap();
    std::fs::write(root.join("proc/device-tree/compatible"), format!("vendor,board\0rockchip,{soc}\0")).unwrap();
    root
}

/// Runs `zcpipe run` in its own directory with the fake librknnrt and `env`; reads the
/// summary and the fake's log. The board is an RK3588 unless `env` says otherwise. An rknn
/// run without `--npu-cores` gets `--npu-cores 0` (one context: `auto` would take all three
/// cores of the RK3588, which the tests of `--npu-cores` ask for by name).
fn run(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let log = dir.join("rknn.log");
    let mut c = zcpipe_run(dir);
    c.env("ZCPIPE_LIBRKNNRT", fake_librknnrt())
        .env("ZCPIPE_FAKE_RKNN_ONNX", data("models/yolox_nano.onnx"))
        .env("ZCPIPE_FAKE_RKNN_LOG", &log)
        .env("ZCPIPE_TEST_ROOT", board_root(dir, "rk3588"))
        .env_remove("ZCPIPE_FAKE_RKNN_W_STRIDE")
        .env_remove("ZCPIPE_FAKE_RKNN_OUTPUT")
        .env_remove("ZCPIPE_FAKE_RKNN_CORES")
        .env_remove("ZCPIPE_FAKE_RKNN_RUN_US");
    for (k, v) in env {
        c.env(k, v);
    }
    if args.iter().any(|a| a.contains("rknn")) && !args.contains(&"--npu-cores") {
        c.arg("--npu-cores=0");
    }
    let out = c.args(["--stats-interval", "0"]).args(args).output().unwrap();
    assert_no_orphans(dir);
    let summary = std::fs::read(dir.join("summary.json")).ok().map(|b| serde_json::from_slice(&b).unwrap());
    let calls = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let mut words = l.split_whitespace();
            let pid = words.next().unwrap_or_default();
            assert!(pid.starts_with("pid="), "log line without pid: {l}");
            let name = words.next().unwrap_or_default().to_string();
            let kv = words.filter_map(|w| w.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect();
            (name, kv)
        })
        .collect();
    Run { out, summary, calls }
}

const PHOTOS: [&str; 3] = ["dog.jpg", "astronaut.png", "person.jpg"];

fn photo_dir(dir: &Path) -> String {
    let photos = dir.join("photos");
    std::fs::create_dir(&photos).unwrap();
    for name in PHOTOS {
        std::fs::copy(data(&format!("tests/data/{name}")), photos.join(name)).unwrap();
    }
    format!("image:{}", photos.display())
}

/// 6 frames (each photo twice) through `--scaler cpu` with 3 scaler buffers, so every
/// buffer carries two frames.
const FRAMES: usize = 6;

fn pipeline_args<'a>(source: &'a str, infer: &'a str, model: &'a str) -> Vec<&'a str> {
    vec![
        "--source",
        source,
        "--infer",
        infer,
        "--model",
        model,
        "--scaler",
        "cpu",
        "--scale-buffers",
        "3",
        "--frames",
        "6",
        "--ring-policy",
        "block",
        "--json",
    ]
}

/// (label, score, box) of one published frame.
fn dets(frame: &Value) -> Vec<(String, f64, Vec<f64>)> {
    frame["detections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["label"].as_str().unwrap().to_string(),
                d["score"].as_f64().unwrap(),
                d["box"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect(),
            )
        })
        .collect()
}

fn iou(a: &[f64], b: &[f64]) -> f64 {
    let iw = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
    let ih = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let inter = iw * ih;
    inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)
}

/// The ONNX backend's frames for the same photos, computed once.
fn onnx_frames() -> &'static Vec<Value> {
    static F: OnceLock<Vec<Value>> = OnceLock::new();
    F.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let src = photo_dir(dir.path());
        let r = run(dir.path(), &pipeline_args(&src, "onnx", "models/yolox_nano.onnx"), &[]);
        assert!(r.out.status.success(), "{}", r.stderr());
        let f = r.frames();
        assert_eq!(f.len(), FRAMES);
        f
    })
}

/// Every ONNX detection scoring `min_score` or more has an RKNN detection of the same label
/// with |score difference| <= `dscore` and IoU >= `min_iou`, and vice versa.
fn assert_same_detections(rknn: &[Value], min_score: f64, dscore: f64, min_iou: f64) {
    let onnx = onnx_frames();
    assert_eq!(rknn.len(), onnx.len());
    for (i, (r, o)) in rknn.iter().zip(onnx).enumerate() {
        assert_eq!(
            (r["seq"].as_u64(), r["width"].as_u64(), r["height"].as_u64()),
            (o["seq"].as_u64(), o["width"].as_u64(), o["height"].as_u64())
        );
        let (rd, od) = (dets(r), dets(o));
        for (a, b, what) in [(&od, &rd, "rknn lacks onnx's"), (&rd, &od, "onnx lacks rknn's")] {
            for (label, score, bx) in a.iter().filter(|d| d.1 >= min_score) {
                let best = b.iter().filter(|d| &d.0 == label).max_by(|x, y| iou(&x.2, bx).total_cmp(&iou(&y.2, bx)));
                let (_, s, b2) =
                    best.unwrap_or_else(|| panic!("frame {i}: {what} {label} {score}: rknn {rd:?} onnx {od:?}"));
                assert!(
                    (s - score).abs() <= dscore,
                    "frame {i} {label}: score {s} vs {score} (rknn {rd:?} onnx {od:?})"
                );
                assert!(iou(b2, bx) >= min_iou, "frame {i} {label}: IoU {} (rknn {rd:?} onnx {od:?})", iou(b2, bx));
            }
        }
    }
}

/// The zero-copy contract as the fake saw it: one context; each scaler buffer imported
/// once (distinct fds and buffers); one rknn_set_io_mem per frame naming an imported mem as
/// uint8 NHWC, pass_through 0, with the stride asked for; no rknn_inputs_set; every mem
/// destroyed, then the context. Returns the imported mem ids.
fn assert_zero_copy_contract(r: &Run, buffers: usize, frames: usize, w_stride: u32) -> BTreeSet<String> {
    let names: Vec<&str> = r.calls.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(r.named("rknn_init").len(), 1, "{names:?}");
    let ctx = r.named("rknn_init")[0]["ctx"].clone();
    let created = r.named("rknn_create_mem_from_fd");
    assert_eq!(created.len(), buffers, "one import per scaler buffer: {names:?}");
    let fds: BTreeSet<&str> = created.iter().map(|m| m["fd"].as_str()).collect();
    let inodes: BTreeSet<&str> = created.iter().map(|m| m["ino"].as_str()).collect();
    assert_eq!((fds.len(), inodes.len()), (buffers, buffers), "distinct fds and buffers: {created:?}");
    let size_with_stride = (w_stride * 416 * 3).to_string();
    for m in &created {
        assert_eq!(
            (m["ctx"].as_str(), m["size"].as_str(), m["offset"].as_str()),
            (ctx.as_str(), size_with_stride.as_str(), "0"),
            "{m:?}"
        );
    }
    let mems: BTreeSet<String> = created.iter().map(|m| m["mem"].clone()).collect();
    // Every import happens before the first frame.
    let first_io = names.iter().position(|n| *n == "rknn_set_io_mem").expect("no rknn_set_io_mem");
    assert!(names.iter().rposition(|n| *n == "rknn_create_mem_from_fd").unwrap() < first_io, "{names:?}");
    let io = r.named("rknn_set_io_mem");
    assert_eq!(io.len(), frames, "one rknn_set_io_mem per frame: {names:?}");
    for s in &io {
        assert!(mems.contains(&s["mem"]), "set_io_mem of a mem never imported: {s:?}");
        assert_eq!(
            (s["type"].as_str(), s["fmt"].as_str(), s["pass_through"].as_str()),
            ("3", "1", "0"),
            "UINT8 NHWC converted: {s:?}"
        );
        assert_eq!(s["w_stride"], w_stride.to_string());
    }
    // Each buffer carried frames (the scaler cycles through its pool).
    let used: BTreeSet<String> = io.iter().map(|s| s["mem"].clone()).collect();
    assert_eq!(used, mems, "every imported buffer was used");
    let runs = r.named("rknn_run");
    assert_eq!(runs.len(), frames);
    assert!(runs.iter().all(|x| x["input"] == "mem"), "every run read the bound dma-buf: {runs:?}");
    assert!(r.named("rknn_inputs_set").is_empty(), "no CPU copy in zero-copy mode: {names:?}");
    assert_eq!(r.named("rknn_outputs_get").len(), frames);
    assert_eq!(r.named("rknn_outputs_release").len(), frames);
    let destroyed: Vec<String> = r.named("rknn_destroy_mem").iter().map(|m| m["mem"].clone()).collect();
    assert_eq!(destroyed.iter().cloned().collect::<BTreeSet<_>>(), mems, "every mem destroyed");
    assert_eq!(destroyed.len(), mems.len(), "each mem destroyed once");
    let d = r.named("rknn_destroy");
    assert_eq!(d.len(), 1);
    assert_eq!((d[0]["ctx"].as_str(), d[0]["live_mems"].as_str()), (ctx.as_str(), "0"));
    assert_eq!(names.last(), Some(&"rknn_destroy"), "the context goes last: {names:?}");
    mems
}

#[cfg(feature = "onnx")]
#[test]
fn rknn_pipeline_matches_onnx_and_keeps_the_zero_copy_contract() {
    let dir = tempfile::tempdir().unwrap();
    let src = photo_dir(dir.path());
    let r = run(dir.path(), &pipeline_args(&src, "rknn", "models/yolox_nano_416_rk3588.rknn"), &[]);
    let err = r.stderr();
    assert!(r.out.status.success(), "{err}");
    assert!(err.contains("api fake 2.3.2 (zcpipe), driver fake 0.9.8") && err.contains("built for rk3588"), "{err}");
    let frames = r.frames();
    assert_eq!(frames.len(), FRAMES);
    // float16 output of the same network on the same bytes: the ONNX path's detections.
    assert_same_detections(&frames, 0.3, 0.01, 0.98);
    // And the photos' reference objects (models/PROVENANCE.md) are there.
    // The image source plays the directory sorted: astronaut, dog, person, astronaut, ...
    let labels: Vec<Vec<String>> = frames
        .iter()
        .map(|f| {
            let mut l: Vec<String> = dets(f).into_iter().filter(|d| d.1 >= 0.5).map(|d| d.0).collect();
            l.sort();
            l
        })
        .collect();
    assert_eq!(labels[0], ["person"]);
    assert_eq!(labels[1], ["bicycle", "car", "dog"]);
    assert_eq!(labels[2], ["dog", "horse", "person"]);
    assert_eq!(labels[3..], labels[..3]);
    assert_zero_copy_contract(&r, 3, FRAMES, 416);
    let s = r.summary.as_ref().unwrap();
    assert_eq!(s["stages"]["infer"]["frames_out"], FRAMES as u64);
    assert_eq!(s["stages"]["infer"]["extra"]["device_reads_in_place"], true);
    assert_eq!(s["stages"]["scale"]["output_ring"]["consumed"], FRAMES as u64);
}

#[cfg(feature = "onnx")]
#[test]
fn a_wider_npu_stride_and_an_int8_output_still_match() {
    let dir = tempfile::tempdir().unwrap();
    let src = photo_dir(dir.path());
    let env = [("ZCPIPE_FAKE_RKNN_W_STRIDE", "424"), ("ZCPIPE_FAKE_RKNN_OUTPUT", "int8")];
    let r = run(dir.path(), &pipeline_args(&src, "rknn", "models/yolox_nano_416_rk3588.rknn"), &env);
    let err = r.stderr();
    assert!(r.out.status.success(), "{err}");
    // The NPU's output attribute as zcpipe logged it.
    assert!(err.contains("INT8 zp -31 scale 0.0229"), "{err}");
    // The scaler wrote rows of w_stride * 3 = 1272 bytes (the infer stage refuses frames
    // whose bytesperline is not the NPU's, and the fake reads rows 1272 bytes apart): the
    // detections below only match if both sides honoured the stride.
    let frames = r.frames();
    // int8 steps of 0.0229 move scores by about one step: the tolerances of the simulator
    // goldens (models/PROVENANCE.md: |dscore| <= 0.05, IoU >= 0.85) for objects over 0.5.
    assert_same_detections(&frames, 0.5, 0.05, 0.85);
    assert_zero_copy_contract(&r, 3, FRAMES, 424);
}

/// The contexts of a run in the order zcpipe made them: the one `rknn_init` made, then
/// its duplicates (lane `i` of the infer stage runs context `i`).
fn contexts(r: &Run) -> Vec<String> {
    let mut c: Vec<String> = r.named("rknn_init").iter().map(|m| m["ctx"].clone()).collect();
    c.extend(r.named("rknn_dup_context").iter().map(|m| m["new_ctx"].clone()));
    c
}

/// Runs of one context that began while a run of another context was in progress (from
/// the fake's `rknn_run` / `rknn_run_end` lines, in the order they were written).
fn overlapping_runs(r: &Run) -> usize {
    let mut open: BTreeSet<String> = BTreeSet::new();
    let mut overlaps = 0;
    for (name, kv) in &r.calls {
        match name.as_str() {
            "rknn_run" => {
                if open.iter().any(|c| *c != kv["ctx"]) {
                    overlaps += 1;
                }
                open.insert(kv["ctx"].clone());
            }
            "rknn_run_end" => {
                open.remove(&kv["ctx"]);
            }
            _ => {}
        }
    }
    overlaps
}

/// `--npu-cores 0,1,2`: one context per core, each run on a thread of its own, a free
/// context taking the next frame, the contexts at work at the same time, detections published in frame order
/// and identical to one context's. The fake holds the first run until two runs are in
/// progress (`ZCPIPE_FAKE_RKNN_RUN_BARRIER=2`, 5 s timeout): a zcpipe that ran one frame at
/// a time would log `rknn_run_barrier_timeout` and no overlap, whatever the timing.
#[test]
fn npu_cores_run_one_context_per_core_concurrently_in_frame_order() {
    // One context: frames run one after another, so the fake's runs are in frame order and
    // tell which input (photo) frame k is.
    let dir = tempfile::tempdir().unwrap();
    let src = photo_dir(dir.path());
    let single = run(dir.path(), &pipeline_args(&src, "rknn", "models/yolox_nano_416_rk3588.rknn"), &[]);
    assert!(single.out.status.success(), "{}", single.stderr());
    let single_frames = single.frames();
    assert_eq!(single_frames.len(), FRAMES);
    let input_of_frame: Vec<String> = single.named("rknn_run").iter().map(|m| m["input_hash"].clone()).collect();
    assert_eq!(input_of_frame.len(), FRAMES);
    assert_eq!(
        input_of_frame[..3].iter().collect::<BTreeSet<_>>().len(),
        3,
        "three different photos: {input_of_frame:?}"
    );
    assert_eq!(input_of_frame[..3], input_of_frame[3..], "the photos play twice in the same order");

    let dir = tempfile::tempdir().unwrap();
    let src = photo_dir(dir.path());
    let mut args = pipeline_args(&src, "rknn", "models/yolox_nano_416_rk3588.rknn");
    args.extend(["--npu-cores", "0,1,2"]);
    let r = run(dir.path(), &args, &[("ZCPIPE_FAKE_RKNN_RUN_BARRIER", "2")]);
    let err = r.stderr();
    assert!(r.out.status.success(), "{err}");
    assert!(err.contains("RKNN: 3 context(s) sharing one model, 1 on each of NPU core(s) [0, 1, 2]"), "{err}");
    let ctxs = contexts(&r);
    assert_eq!(ctxs.len(), 3, "{ctxs:?}");
    let masks: Vec<(&str, &str)> =
        r.named("rknn_set_core_mask").iter().map(|m| (m["ctx"].as_str(), m["mask"].as_str())).collect();
    assert_eq!(masks, [(ctxs[0].as_str(), "1"), (ctxs[1].as_str(), "2"), (ctxs[2].as_str(), "4")]);
    // Each context imports the 3 scaler buffers once.
    let created = r.named("rknn_create_mem_from_fd");
    assert_eq!(created.len(), 9);
    for c in &ctxs {
        assert_eq!(created.iter().filter(|m| &m["ctx"] == c).count(), 3, "{created:?}");
    }

    // Concurrency: no barrier timeout, and runs of different contexts overlapped.
    let names: Vec<&str> = r.calls.iter().map(|(n, _)| n.as_str()).collect();
    assert!(
        r.named("rknn_run_barrier_timeout").is_empty(),
        "the fake waited 5 s for a second run in progress: {names:?}"
    );
    assert!(r.named("rknn_run_concurrent_use").is_empty(), "a context was used by two threads at once: {names:?}");
    let overlaps = overlapping_runs(&r);
    assert!(overlaps >= 1, "no run began while another context's run was in progress: {names:?}");
    let runs = r.named("rknn_run");
    let ends = r.named("rknn_run_end");
    assert_eq!((runs.len(), ends.len()), (FRAMES, FRAMES));
    assert!(ends.iter().all(|e| e["code"] == "0"), "{ends:?}");
    // One worker thread per context: each context's runs on one thread (a context a free
    // neighbour always beat to the next frame has none), no thread shared by two contexts,
    // none of them the one that loaded the model.
    let tids: Vec<BTreeSet<&str>> =
        ctxs.iter().map(|c| runs.iter().filter(|m| &m["ctx"] == c).map(|m| m["tid"].as_str()).collect()).collect();
    assert!(tids.iter().all(|t| t.len() <= 1), "a context ran on several threads: {tids:?}");
    let lane_tids: BTreeSet<&str> = tids.iter().flatten().copied().collect();
    let working = tids.iter().filter(|t| !t.is_empty()).count();
    assert!(working >= 2, "{tids:?}");
    assert_eq!(lane_tids.len(), working, "two contexts shared a thread: {tids:?}");
    assert!(!lane_tids.contains(r.named("rknn_init")[0]["tid"].as_str()), "runs on the stage's own thread: {tids:?}");
    // Any free context takes the next frame: every frame ran exactly once, on some context.
    let mut ran: Vec<&str> = runs.iter().map(|m| m["input_hash"].as_str()).collect();
    let mut want: Vec<&str> = input_of_frame.iter().map(String::as_str).collect();
    ran.sort_unstable();
    want.sort_unstable();
    assert_eq!(ran, want, "each frame's input ran once");
    let per_ctx: Vec<usize> = ctxs.iter().map(|c| runs.iter().filter(|m| &m["ctx"] == c).count()).collect();
    assert!(per_ctx.iter().filter(|&&k| k > 0).count() >= 2, "runs per context {per_ctx:?}");

    // Published in frame order, with one context's detections.
    let frames = r.frames();
    let seqs: Vec<u64> = frames.iter().map(|f| f["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs.len(), FRAMES);
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "seq not strictly increasing: {seqs:?}");
    for (k, (f, g)) in frames.iter().zip(&single_frames).enumerate() {
        assert_eq!((&f["seq"], &f["detections"]), (&g["seq"], &g["detections"]), "frame {k}");
    }
    let s = r.summary.as_ref().unwrap();
    let infer = &s["stages"]["infer"];
    assert_eq!(infer["frames_out"], FRAMES as u64);
    assert_eq!(infer["extra"]["device_reads_in_place"], true);
    assert_eq!(infer["extra"]["open_fds_setup"], infer["extra"]["open_fds_exit"], "fds leaked: {infer}");

    // Teardown: every mem, then the duplicates, the original context last, none holding mems.
    assert_eq!(r.named("rknn_destroy_mem").len(), 9);
    let destroyed: Vec<&str> = r.named("rknn_destroy").iter().map(|d| d["ctx"].as_str()).collect();
    assert_eq!(destroyed, [ctxs[2].as_str(), ctxs[1].as_str(), ctxs[0].as_str()]);
    assert!(r.named("rknn_destroy").iter().all(|d| d["live_mems"] == "0"));
    assert!(
        names.iter().rposition(|n| *n == "rknn_destroy_mem").unwrap()
            < names.iter().position(|n| *n == "rknn_destroy").unwrap(),
        "{names:?}"
    );
    println!(
        "EVIDENCE npu-cores: {FRAMES} frames on contexts {ctxs:?} (masks 1, 2, 4), each on its own thread {tids:?}; {overlaps} run(s) began while another context's run was in progress (barrier 2, no timeout); runs per context {per_ctx:?}, each frame run once; published seqs {seqs:?}, detections equal to the one-context run; fds {} -> {}",
        infer["extra"]["open_fds_setup"], infer["extra"]["open_fds_exit"]
    );

    // A single-core NPU refuses core 1: a warning, one context with the runtime's choice,
    // every frame on one thread (the one engine's lane: the inference service is on).
    let dir = tempfile::tempdir().unwrap();
    let src = photo_dir(dir.path());
    let mut args = pipeline_args(&src, "rknn", "models/yolox_nano_416_rk3588.rknn");
    args.extend(["--npu-cores", "0,1,2"]);
    let r = run(dir.path(), &args, &[("ZCPIPE_FAKE_RKNN_CORES", "1")]);
    let err = r.stderr();
    assert!(r.out.status.success(), "{err}");
    assert!(err.contains("RKNN_ERR_PARAM_INVALID") && err.contains("RKNN_NPU_CORE_AUTO"), "{err}");
    assert_eq!(r.frames().len(), FRAMES);
    assert_eq!(r.named("rknn_destroy").len(), 2, "the duplicate is destroyed at once, the main context at exit");
    assert_eq!(r.named("rknn_create_mem_from_fd").len(), 3);
    assert!(r.named("rknn_set_io_mem").iter().all(|m| m["ctx"] == "1"));
    let run_tids: BTreeSet<&String> = r.named("rknn_run").iter().map(|m| &m["tid"]).collect();
    assert_eq!(run_tids.len(), 1, "one context runs on one thread: {run_tids:?}");
}

/// A context failing mid-stream (the fake's third run returns RKNN_ERR_TIMEOUT) ends the
/// infer stage with one error line naming the frame and the context; no panic, no hang,
/// what was published is in order, and every mem and context is released.
#[test]
fn a_failing_npu_context_ends_the_stage_with_one_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let src = photo_dir(dir.path());
    let mut args = pipeline_args(&src, "rknn", "models/yolox_nano_416_rk3588.rknn");
    args.extend(["--npu-cores", "0,1,2"]);
    let r = run(dir.path(), &args, &[("ZCPIPE_FAKE_RKNN_FAIL_RUN", "3")]);
    let line = one_error_line(&r, &["inference on frame", "on NPU core", "rknn_run failed", "RKNN_ERR_TIMEOUT"]);
    let failed = r
        .named("rknn_run_end")
        .iter()
        .filter(|e| e["code"] != "0")
        .map(|e| (e["ctx"].clone(), e["code"].clone()))
        .collect::<Vec<_>>();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].1, "-2");
    assert!(line.contains(&format!("RKNN context {} on NPU core", failed[0].0)), "{line}");
    let seqs: Vec<u64> = r.frames().iter().filter_map(|f| f["seq"].as_u64()).collect();
    assert!(seqs.len() < FRAMES && seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert_eq!(r.named("rknn_destroy_mem").len(), r.named("rknn_create_mem_from_fd").len());
    assert_eq!(r.named("rknn_destroy").len(), 3);
    assert!(r.named("rknn_destroy").iter().all(|d| d["live_mems"] == "0"));
}

#[test]
fn a_bad_npu_core_list_is_refused_by_the_parser() {
    let out = zcpipe().args(["run", "--npu-cores", "0,3"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("core 3 does not exist"), "{err}");
}

/// A failed run: non-zero exit, exactly one error line holding every needle, no panic.
fn one_error_line(r: &Run, needles: &[&str]) -> String {
    let err = r.stderr();
    assert!(!r.out.status.success(), "should fail: {err}");
    assert!(!err.contains("panicked"), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(lines.len(), 1, "want exactly one error line, got:\n{err}");
    for n in needles {
        assert!(lines[0].contains(n), "error line lacks {n:?}: {}", lines[0]);
    }
    lines[0].to_string()
}

#[test]
fn a_model_for_another_soc_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let rk3566 = board_root(dir.path(), "rk3566");
    let env = [("ZCPIPE_TEST_ROOT", rk3566.to_str().unwrap())];
    let args =
        ["--source", "testsrc", "--infer", "rknn", "--model", "models/yolox_nano_416_rk3588.rknn", "--frames", "1"];
    let r = run(dir.path(), &args, &env);
    one_error_line(
        &r,
        &[
            "yolox_nano_416_rk3588.rknn is built for rk3588 but this board is rk3566",
            "use models/yolox_nano_416_rk3566_rk3568.rknn",
        ],
    );
    assert!(r.named("rknn_init").is_empty(), "refused before the runtime loads it");

    // The RK3566/RK3568 model runs on an RK3568.
    let dir = tempfile::tempdir().unwrap();
    let rk3568 = board_root(dir.path(), "rk3568");
    let args = [
        "--source",
        "testsrc",
        "--infer",
        "rknn",
        "--model",
        "models/yolox_nano_416_rk3566_rk3568.rknn",
        "--frames",
        "1",
    ];
    let r = run(dir.path(), &args, &[("ZCPIPE_TEST_ROOT", rk3568.to_str().unwrap())]);
    assert!(r.out.status.success(), "{}", r.stderr());
    assert!(r.stderr().contains("built for rk3566"), "{}", r.stderr());
    assert_eq!(r.named("rknn_run").len(), 1);
}

/// An .rknn's input size is fixed when it is converted: `--input-size` other than it is one
/// error line naming both sizes; its own is fine.
#[test]
fn an_input_size_other_than_the_models_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--source",
        "testsrc",
        "--infer",
        "rknn",
        "--model",
        "models/yolox_nano_416_rk3588.rknn",
        "--frames",
        "1",
        "--input-size",
    ];
    let r = run(dir.path(), &[&args[..], &["640"]].concat(), &[]);
    one_error_line(
        &r,
        &[
            "--input-size 640x640 does not match the fixed input 416x416 of model",
            "yolox_nano_416_rk3588.rknn: leave --input-size out",
        ],
    );
    assert!(r.named("rknn_run").is_empty(), "refused before the first frame");

    let dir = tempfile::tempdir().unwrap();
    let r = run(dir.path(), &[&args[..], &["416x416"]].concat(), &[]);
    assert!(r.out.status.success(), "{}", r.stderr());
    assert_eq!(r.named("rknn_run").len(), 1);
}

#[test]
fn a_missing_runtime_is_one_line_naming_the_variable_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let args =
        ["--source", "testsrc", "--infer", "rknn", "--model", "models/yolox_nano_416_rk3588.rknn", "--frames", "1"];
    let r = run(dir.path(), &args, &[("ZCPIPE_LIBRKNNRT", "/nonexistent/librknnrt.so")]);
    one_error_line(
        &r,
        &[
            "cannot load the RKNN runtime /nonexistent/librknnrt.so",
            "ZCPIPE_LIBRKNNRT",
            "librknnrt.so (RKNPU2 runtime 2.x)",
        ],
    );

    // Without the variable zcpipe asks the loader for librknnrt.so (absent on hosts).
    if zcpipe::sys::rknn::Rknn::open_path("librknnrt.so".into(), false).is_err() {
        let dir = tempfile::tempdir().unwrap();
        let r = run(dir.path(), &args, &[("ZCPIPE_LIBRKNNRT", "")]);
        one_error_line(
            &r,
            &["librknnrt.so", "install Rockchip's RKNPU2 runtime", "ZCPIPE_LIBRKNNRT=/path/to/librknnrt.so"],
        );
    }
}

#[test]
fn a_pool_the_npu_cannot_import_falls_back_to_rknn_inputs_set() {
    // On this host the pools are memfds; a runtime that imports dma-bufs only refuses them.
    let dir = tempfile::tempdir().unwrap();
    let src = format!("image:{}", data("tests/data/astronaut.png").display());
    let args = [
        "--source",
        &src,
        "--infer",
        "rknn",
        "--model",
        "models/yolox_nano_416_rk3588.rknn",
        "--frames",
        "2",
        "--ring-policy",
        "block",
        "--json",
    ];
    let r = run(dir.path(), &args, &[("ZCPIPE_FAKE_RKNN_DMABUF_ONLY", "1")]);
    let err = r.stderr();
    assert!(r.out.status.success(), "{err}");
    assert!(err.contains("rknn_create_mem_from_fd failed") && err.contains("falling back to rknn_inputs_set"), "{err}");
    let created = r.named("rknn_create_mem_from_fd");
    assert_eq!(created.len(), 1, "the first refusal stops the import: {created:?}");
    assert_eq!(created[0]["mem"], "null");
    assert!(r.named("rknn_set_io_mem").is_empty() && r.named("rknn_destroy_mem").is_empty());
    assert_eq!(r.named("rknn_inputs_set").len(), 2);
    assert_eq!(dets(&r.frames()[0]).iter().map(|d| d.0.as_str()).collect::<Vec<_>>(), ["person"]);
}

#[test]
fn copy_mode_feeds_the_npu_through_rknn_inputs_set() {
    // --copy-mode is the plain pipeline: the infer stage maps the frame and the runtime
    // copies it in; nothing is imported.
    let dir = tempfile::tempdir().unwrap();
    let src = format!("image:{}", data("tests/data/astronaut.png").display());
    let args = [
        "--source",
        &src,
        "--infer",
        "rknn",
        "--model",
        "models/yolox_nano_416_rk3588.rknn",
        "--frames",
        "2",
        "--ring-policy",
        "block",
        "--json",
        "--copy-mode",
    ];
    let r = run(dir.path(), &args, &[]);
    assert!(r.out.status.success(), "{}", r.stderr());
    assert!(r.named("rknn_create_mem_from_fd").is_empty() && r.named("rknn_set_io_mem").is_empty());
    assert_eq!(r.named("rknn_inputs_set").len(), 2);
    assert!(r.named("rknn_run").iter().all(|x| x["input"] == "copy"));
    assert_eq!(r.summary.as_ref().unwrap()["stages"]["infer"]["extra"]["device_reads_in_place"], false);
    let f = r.frames();
    assert_eq!(dets(&f[0]).iter().map(|d| d.0.as_str()).collect::<Vec<_>>(), ["person"]);
}

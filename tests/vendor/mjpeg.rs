//! MJPEG decoding (`src/capture/mjpeg.rs`, `MppJpeg` in `src/sys/mpp.rs`) against the ABI
//! fakes: an MJPEG clip made at test time from the bundled clip (ffmpeg `-c:v mjpeg`, an
//! AVI, nothing committed) runs the whole pipeline `--decoder mpp --scaler rga --infer
//! rknn`, and the fakes' call logs show MPP writing each JPEG into a capture pool buffer
//! that RGA imported once and read for the same frame, no CPU access in capture, every MPP
//! buffer released, and detections equal to `--decoder cpu` (zune-jpeg). `--copy-mode`
//! with MPP, a truncated and a corrupt JPEG in the stream (counted skips, the run goes on),
//! and the binding itself (a JPEG read from a dma-buf, as a V4L2 MJPG camera's EXPBUF
//! buffer would be, with the packet's size the JPEG's length; an output buffer too small
//! never reaching MPP; grayscale and 4:4:4 JPEGs going to the CPU; a decode that times out
//! after MPP took the JPEG keeping its frame until after `mpp_destroy`) are tested too.

#![cfg(feature = "onnx")]

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, MutexGuard, OnceLock};

use serde_json::Value;
use zcpipe::capture::decoder::Decoder;
use zcpipe::capture::mjpeg::{decode_cpu, mpp_buffer_bytes, mpp_layout, JpegSplitter, MjpegDecoder, MjpegInput, Piece};
use zcpipe::core::dmabuf::{Allocator, HeapChoice};
use zcpipe::sys::mpp::{jpeg_sof, JpegInput, JpegOutcome, JpegUnfit, Libmpp, MppJpeg};

use crate::common;
use common::{assert_no_orphans, fake_librga, fake_librknnrt, fake_librockchip_mpp, log_field, root, zcpipe_run};

const FRAMES: usize = 6;

fn ffmpeg(args: &[&str]) {
    let out = Command::new("ffmpeg")
        .args(["-hide_banner", "-loglevel", "error", "-y"])
        .args(args)
        .output()
        .expect("running ffmpeg (install it: apt install ffmpeg)");
    assert!(out.status.success(), "ffmpeg {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// The first `FRAMES` frames of the bundled clip as MJPEG in an AVI, and the same JPEGs one
/// by one; made once per test process.
fn clip() -> &'static (PathBuf, Vec<Vec<u8>>) {
    static CLIP: OnceLock<(PathBuf, Vec<Vec<u8>>)> = OnceLock::new();
    CLIP.get_or_init(|| {
        let dir = Box::leak(Box::new(tempfile::tempdir().unwrap()));
        let avi = dir.path().join("clip.avi");
        let src = root().join("tests/data/one-by-one-person-detection.mp4");
        ffmpeg(&[
            "-i",
            src.to_str().unwrap(),
            "-frames:v",
            &FRAMES.to_string(),
            "-an",
            "-c:v",
            "mjpeg",
            "-q:v",
            "3",
            avi.to_str().unwrap(),
        ]);
        let raw = dir.path().join("clip.mjpeg");
        ffmpeg(&["-i", avi.to_str().unwrap(), "-c:v", "copy", "-f", "mjpeg", raw.to_str().unwrap()]);
        let mut s = JpegSplitter::new(std::fs::File::open(&raw).unwrap());
        let mut jpegs = Vec::new();
        while let Some(p) = s.next_jpeg().unwrap() {
            let Piece::Whole(j) = p else { panic!("ffmpeg wrote a truncated JPEG") };
            jpegs.push(j);
        }
        assert_eq!(jpegs.len(), FRAMES);
        (avi, jpegs)
    })
}

struct Run {
    out: Output,
    frames: Vec<Value>,
    capture: Value,
    mpp: String,
    rga: String,
}

impl Run {
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }
    /// The MPP fake's lines of call `name`.
    fn mpp_calls(&self, name: &str) -> Vec<&str> {
        self.mpp.lines().filter(|l| l.split(' ').nth(1) == Some(name)).collect()
    }
    fn rga_calls(&self, name: &str) -> Vec<&str> {
        self.rga.lines().filter(|l| l.split(' ').next() == Some(name)).collect()
    }
}

/// `zcpipe run --source video:SOURCE --decoder DECODER --scaler rga --infer rknn` on the
/// fakes (an RK3588 board root), every frame pushed through (`--ring-policy block`).
fn run(source: &Path, decoder: &str, extra: &[&str]) -> Run {
    run_on(source, decoder, extra, false)
}

/// [`run`] on a board root that has `/dev/mpp_service` (what `--decoder auto` looks for)
/// when `mpp_service`.
fn run_on(source: &Path, decoder: &str, extra: &[&str], mpp_service: bool) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let board = d.join("root");
    std::fs::create_dir_all(board.join("proc/device-tree")).unwrap();
    std::fs::write(board.join("proc/device-tree/compatible"), "vendor,board\0rockchip,rk3588\0").unwrap();
    if mpp_service {
        std::fs::create_dir_all(board.join("dev")).unwrap();
        std::fs::write(board.join("dev/mpp_service"), "").unwrap();
    }
    let (mpp_log, rga_log) = (d.join("mpp.log"), d.join("rga.log"));
    let src = format!("video:{}", source.display());
    let out = zcpipe_run(d)
        .env("ZCPIPE_LIBMPP", fake_librockchip_mpp())
        .env("ZCPIPE_FAKE_MPP_LOG", &mpp_log)
        .env("ZCPIPE_LIBRGA", fake_librga())
        .env("ZCPIPE_FAKE_RGA_LOG", &rga_log)
        .env("ZCPIPE_LIBRKNNRT", fake_librknnrt())
        .env("ZCPIPE_FAKE_RKNN_LOG", d.join("rknn.log"))
        .env("ZCPIPE_FAKE_RKNN_ONNX", root().join("models/yolox_nano.onnx"))
        .env("ZCPIPE_TEST_ROOT", &board)
        .env_remove("ZCPIPE_FAKE_MPP_JPEG_HANG")
        .args(["--source", &src, "--decoder", decoder, "--ring-policy", "block", "--json", "--stats-interval", "0"])
        .args(["--scaler", "rga", "--infer", "rknn", "--model", "models/yolox_nano_416_rk3588.rknn"])
        .args(extra)
        .output()
        .unwrap();
    assert_no_orphans(d);
    let frames = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "frame")
        .collect();
    let capture = std::fs::read(d.join("summary.json"))
        .ok()
        .and_then(|s| serde_json::from_slice::<Value>(&s).ok())
        .map(|s| s["stages"]["capture"].clone())
        .unwrap_or(Value::Null);
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    Run { frames, capture, mpp: read(&mpp_log), rga: read(&rga_log), out }
}

/// The same clip decoded on the CPU (zune-jpeg), run once.
fn cpu_run() -> &'static Run {
    static R: OnceLock<Run> = OnceLock::new();
    R.get_or_init(|| {
        let r = run(&clip().0, "cpu", &[]);
        assert!(r.out.status.success(), "{}", r.stderr());
        assert_eq!(r.frames.len(), FRAMES, "{}", r.stderr());
        assert_eq!(r.capture["extra"]["decoder"], "cpu");
        assert!(r.mpp.is_empty(), "--decoder cpu never opens MPP: {}", r.mpp);
        r
    })
}

fn iou(a: &[f64], b: &[f64]) -> f64 {
    let iw = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
    let ih = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let inter = iw * ih;
    inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)
}

/// Every detection of one run has one of the same label in the other, frame by frame,
/// with |score difference| <= 0.02 and IoU >= 0.9; returns how many were compared.
fn assert_same_detections(a: &[Value], b: &[Value]) -> usize {
    assert_eq!(a.len(), b.len());
    let dets = |f: &Value| -> Vec<(String, f64, Vec<f64>)> {
        f["detections"]
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
    };
    let mut n = 0;
    for (i, (fa, fb)) in a.iter().zip(b).enumerate() {
        let (da, db) = (dets(fa), dets(fb));
        assert_eq!(da.len(), db.len(), "frame {i}: {da:?} vs {db:?}");
        for (label, score, bx) in &da {
            let best = db
                .iter()
                .filter(|d| &d.0 == label)
                .max_by(|x, y| iou(&x.2, bx).total_cmp(&iou(&y.2, bx)))
                .unwrap_or_else(|| panic!("frame {i}: no {label} in {db:?}"));
            assert!(
                (best.1 - score).abs() <= 0.02 && iou(&best.2, bx) >= 0.9,
                "frame {i} {label}: {score} {bx:?} vs {best:?}"
            );
            n += 1;
        }
    }
    n
}

/// The MPP fake's end: every frame and packet released and no task kept by `mpp_destroy`,
/// every task-API buffer by the last call (`mpp_buffer_group_put`), no rule broken.
fn assert_mpp_released_everything(r: &Run) {
    assert_mpp_log_released_everything(&r.mpp);
}

fn assert_mpp_log_released_everything(log: &str) {
    let calls = |name: &str| log.lines().filter(|l| l.split(' ').nth(1) == Some(name)).collect::<Vec<_>>();
    let destroy = calls("mpp_destroy");
    assert_eq!(destroy.len(), 1, "{log}");
    for k in ["live_frames", "live_packets", "user_tasks"] {
        assert_eq!(log_field(destroy[0], k), "0", "{k}: {}", destroy[0]);
    }
    let group_put = calls("mpp_buffer_group_put");
    assert_eq!(group_put.len(), 1, "{log}");
    assert_eq!((log_field(group_put[0], "live"), log_field(group_put[0], "all_live")), ("0", "0"), "{}", group_put[0]);
    assert!(log.lines().last().is_some_and(|l| l.contains(" mpp_buffer_group_put ")), "the group is put last: {log}");
    assert!(calls("violation").is_empty(), "{log}");
}

#[test]
fn mpp_writes_each_jpeg_into_the_pool_buffer_rga_reads_in_place() {
    let r = run(&clip().0, "mpp", &[]);
    let stderr = r.stderr();
    assert!(r.out.status.success(), "{stderr}");
    assert!(stderr.contains("decoder mpp for MJPEG video:"), "{stderr}");
    assert_eq!(r.frames.len(), FRAMES, "{stderr}");
    let extra = &r.capture["extra"];
    assert_eq!(
        (extra["decoder"].as_str(), extra["jpegs"].as_u64(), extra["corrupt_jpegs"].as_u64()),
        (Some("mpp"), Some(FRAMES as u64), Some(0)),
        "{extra}"
    );
    // No CPU guard in capture: MPP wrote every pool buffer itself.
    assert_eq!(extra["cpu_accesses"].as_u64(), Some(0), "{extra}");

    // MPP: one import per pool buffer; the inode written for JPEG k, in order.
    let imports: Vec<&str> = r.mpp_calls("mpp_buffer_import").iter().map(|l| log_field(l, "ino")).collect();
    let mut distinct = imports.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), imports.len(), "each pool buffer imported once: {imports:?}");
    assert_eq!(extra["mpp_imported_buffers"].as_u64(), Some(imports.len() as u64));
    let decodes = r.mpp_calls("task_decode");
    assert_eq!(decodes.len(), FRAMES, "{}", r.mpp);
    let written: Vec<&str> = decodes.iter().map(|l| log_field(l, "ino")).collect();
    for l in &decodes {
        assert_eq!(
            (
                log_field(l, "errinfo"),
                log_field(l, "width"),
                log_field(l, "height"),
                log_field(l, "hor_stride"),
                log_field(l, "ver_stride")
            ),
            ("0", "768", "432", "768", "432"),
            "{l}"
        );
    }

    // RGA: each pool buffer (the inodes MPP imported) imported once; frame k read from the
    // inode MPP wrote for JPEG k.
    let handles: HashMap<&str, &str> =
        r.rga_calls("importbuffer_fd").iter().map(|l| (log_field(l, "handle"), log_field(l, "ino"))).collect();
    let rga_inos: Vec<&str> =
        r.rga_calls("importbuffer_fd").iter().map(|l| log_field(l, "ino")).filter(|i| imports.contains(i)).collect();
    let mut rga_distinct = rga_inos.clone();
    rga_distinct.sort();
    rga_distinct.dedup();
    assert_eq!(
        (rga_inos.len(), rga_distinct),
        (imports.len(), distinct.clone()),
        "RGA imports each decoded buffer once: {}",
        r.rga
    );
    let read: Vec<&str> = r
        .rga_calls("improcess")
        .iter()
        .map(|l| handles[l.split("src[handle=").nth(1).unwrap().split(' ').next().unwrap()])
        .collect();
    assert_eq!(read, written, "the inode RGA read for frame k is the one MPP wrote for JPEG k");
    assert_mpp_released_everything(&r);

    let n = assert_same_detections(&r.frames, &cpu_run().frames);
    assert!(n >= FRAMES, "the clip has objects to compare ({n})");
    println!("EVIDENCE mjpeg mpp: {FRAMES} JPEGs into {} pool buffers (inodes {distinct:?}), RGA read {read:?}, capture cpu_accesses 0, {n} detections equal to --decoder cpu", imports.len());
}

#[test]
fn copy_mode_with_the_mpp_decoder_copies_but_decodes_the_same() {
    let r = run(&clip().0, "mpp", &["--copy-mode"]);
    let stderr = r.stderr();
    assert!(r.out.status.success(), "{stderr}");
    assert_eq!(r.frames.len(), FRAMES, "{stderr}");
    assert_eq!(r.mpp_calls("task_decode").len(), FRAMES);
    assert!(r.rga_calls("importbuffer_fd").is_empty(), "copy mode hands RGA virtual addresses: {}", r.rga);
    assert_eq!(r.rga_calls("improcess").len(), FRAMES);
    assert_mpp_released_everything(&r);
    assert_same_detections(&r.frames, &cpu_run().frames);
}

#[test]
fn a_truncated_and_a_corrupt_jpeg_are_counted_skips_and_the_run_goes_on() {
    // JPEGs 0, 1, the first half of 2 (no EOI), 3, 4 with 0 components in its SOF, 5.
    let jpegs = &clip().1;
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.mjpeg");
    let mut corrupt = jpegs[4].clone();
    let sof = corrupt.windows(2).position(|w| w == [0xFF, 0xC0]).expect("a baseline SOF0");
    corrupt[sof + 9] = 0;
    let mut f = std::fs::File::create(&bad).unwrap();
    for part in [&jpegs[0][..], &jpegs[1], &jpegs[2][..jpegs[2].len() / 2], &jpegs[3], &corrupt, &jpegs[5]] {
        f.write_all(part).unwrap();
    }
    drop(f);
    for decoder in ["mpp", "cpu"] {
        let r = run(&bad, decoder, &[]);
        let stderr = r.stderr();
        assert!(r.out.status.success(), "{decoder}: {stderr}");
        assert_eq!(r.frames.len(), FRAMES - 2, "{decoder}: {stderr}");
        let extra = &r.capture["extra"];
        assert_eq!(
            (extra["jpegs"].as_u64(), extra["corrupt_jpegs"].as_u64()),
            (Some(FRAMES as u64), Some(2)),
            "{decoder}: {extra}"
        );
        assert!(
            stderr.contains("JPEG 3 skipped")
                && stderr.contains("JPEG 5 skipped")
                && stderr.contains("2 of 6 JPEGs were corrupt and skipped"),
            "{decoder}: {stderr}"
        );
        if decoder == "mpp" {
            // The truncated JPEG reaches MPP (an error frame); the one without components
            // never does (its frame header is read first).
            let decodes = r.mpp_calls("task_decode");
            let errs: Vec<&str> = decodes.iter().copied().filter(|l| log_field(l, "errinfo") == "1").collect();
            assert_eq!((decodes.len(), errs.len()), (FRAMES - 1, 1), "{}", r.mpp);
            assert!(stderr.contains("JPEG 5 skipped: no usable frame header"), "{stderr}");
            assert_mpp_released_everything(&r);
        }
    }
}

/// The binding alone: a JPEG read in place from a dma-buf (as a V4L2 MJPG camera's EXPBUF
/// buffer would be) and from bytes, into memfd pool buffers imported once each; the pixels
/// equal zcpipe's CPU decode; a too small output buffer is an error frame.
/// The in-process fake for one binding test at a time: the fake reads its log path from the
/// environment at each call (the other tests run zcpipe as a child with its own).
fn binding_session() -> (MutexGuard<'static, ()>, Arc<Libmpp>, tempfile::NamedTempFile, Allocator) {
    // The turn is shared with mpp_fake's tests, which open the same fake in this process.
    let guard = common::FAKE_MPP_IN_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    let lib = Arc::new(Libmpp::open(Some(fake_librockchip_mpp())).unwrap());
    let log = tempfile::NamedTempFile::new().unwrap();
    std::env::set_var("ZCPIPE_FAKE_MPP_LOG", log.path());
    let alloc = Allocator::open(
        HeapChoice::Memfd,
        Path::new("/nonexistent"),
        Path::new("/nonexistent"),
        Path::new("/nonexistent"),
    )
    .unwrap();
    (guard, lib, log, alloc)
}

fn log_lines(log: &tempfile::NamedTempFile, call: &str) -> Vec<String> {
    std::fs::read_to_string(log.path())
        .unwrap()
        .lines()
        .filter(|l| l.split(' ').nth(1) == Some(call))
        .map(String::from)
        .collect()
}

#[test]
fn mpp_jpeg_decodes_from_a_dmabuf_and_from_bytes_like_the_cpu() {
    let (_one, lib, log, alloc) = binding_session();
    let jpeg = &clip().1[0];
    let pool = alloc.allocate_pool(2, mpp_buffer_bytes(768, 432)).unwrap();
    let mut camera = alloc.allocate(jpeg.len() as u64 + 4096).unwrap();
    camera.write().unwrap()[..jpeg.len()].copy_from_slice(jpeg);
    let mut cpu = vec![0u8; pool[0].size() as usize];
    let cpu_l = decode_cpu(jpeg, &mut cpu, &mut Vec::new(), (768, 432)).unwrap();

    let mut d = MppJpeg::new(Arc::clone(&lib), 500).unwrap();
    for round in 0..2 {
        for (i, out) in pool.iter().enumerate() {
            let input = if i == 0 {
                JpegInput::DmaBuf { fd: camera.fd(), size: camera.size() as usize, len: jpeg.len() }
            } else {
                JpegInput::Bytes(jpeg)
            };
            let JpegOutcome::Picture(info) = d.decode(input, out.fd(), out.size() as usize, (768, 432)).unwrap() else {
                panic!("round {round} buffer {i}: an error frame")
            };
            let l = mpp_layout(&info).unwrap();
            assert_eq!(l, cpu_l, "768 is 16-aligned: MPP's strides are the CPU path's");
            let got = out.read().unwrap();
            let n = l.bytes_needed() as usize;
            assert!(got[..n] == cpu[..n], "round {round} buffer {i}: MPP's NV12 differs from the CPU decode");
        }
    }
    assert_eq!((d.decoded(), d.imported()), (4, 3), "two pool buffers and the camera buffer, each imported once");
    // The stream MPP's hardware reads is the packet's size: the JPEG's length, not the
    // camera buffer's size nor the 64 KiB-rounded input buffer's.
    let decodes = log_lines(&log, "task_decode");
    assert_eq!(decodes.len(), 4);
    for l in &decodes {
        assert_eq!(log_field(l, "size"), jpeg.len().to_string(), "{l}");
    }
    // An output buffer smaller than MPP may write (MPP would not refuse it): never given to
    // MPP; nor a JPEG larger than the source's size.
    let small = alloc.allocate(768 * 432).unwrap();
    let too_big =
        JpegOutcome::Unfit(JpegUnfit::TooBig { width: 768, height: 432, need: 768 * 432 * 2, have: 768 * 432 });
    assert_eq!(d.decode(JpegInput::Bytes(jpeg), small.fd(), small.size() as usize, (768, 432)).unwrap(), too_big);
    let JpegOutcome::Unfit(JpegUnfit::TooBig { .. }) =
        d.decode(JpegInput::Bytes(jpeg), pool[0].fd(), pool[0].size() as usize, (640, 432)).unwrap()
    else {
        panic!("wider than the source")
    };
    assert_eq!(log_lines(&log, "task_decode").len(), 4, "neither reached MPP");
    d.destroy().unwrap();
    assert_mpp_log_released_everything(&std::fs::read_to_string(log.path()).unwrap());
}

/// One frame of the clip as a JPEG of pixel format `pix_fmt` (ffmpeg's mjpeg encoder).
fn jpeg_of(pix_fmt: &str) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("one.jpg");
    ffmpeg(&[
        "-i",
        clip().0.to_str().unwrap(),
        "-frames:v",
        "1",
        "-c:v",
        "mjpeg",
        "-pix_fmt",
        pix_fmt,
        "-strict",
        "-1",
        out.to_str().unwrap(),
    ]);
    std::fs::read(out).unwrap()
}

#[test]
fn grayscale_444_and_ffmpegs_422_jpegs_go_to_the_cpu_and_420_to_mpp() {
    let (_one, lib, log, alloc) = binding_session();
    let mut out = alloc.allocate(mpp_buffer_bytes(768, 432)).unwrap();
    let mut d = MjpegDecoder::new(&Decoder::Mpp(Arc::clone(&lib))).unwrap();
    // ffmpeg writes 4:2:2 as Y 2x2, chroma 1x2, which MPP's parser refuses (it takes 2x1, 1x1).
    for (pix_fmt, mpp) in [("yuvj422p", false), ("yuvj444p", false), ("gray", false), ("yuvj420p", true)] {
        let jpeg = jpeg_of(pix_fmt);
        let sof = jpeg_sof(&jpeg).unwrap();
        assert_eq!((sof.width, sof.height, sof.mpp_fit()), (768, 432, mpp), "{pix_fmt}: {sof:?}");
        let before = log_lines(&log, "task_decode").len();
        let l = d
            .decode(MjpegInput::Bytes(&jpeg), &mut out, (768, 432))
            .unwrap()
            .unwrap_or_else(|e| panic!("{pix_fmt}: {e}"));
        assert_eq!((l.width, l.height), (768, 432), "{pix_fmt}");
        assert_eq!(log_lines(&log, "task_decode").len() - before, usize::from(mpp), "{pix_fmt}: MPP decoded it: {mpp}");
        // The picture is the CPU decode's, whoever made it.
        let mut cpu = vec![0u8; out.size() as usize];
        let cl = decode_cpu(&jpeg, &mut cpu, &mut Vec::new(), (768, 432)).unwrap();
        let got = out.read().unwrap();
        assert!(
            got[..cl.planes[1].offset as usize] == cpu[..cl.planes[1].offset as usize],
            "{pix_fmt}: luma differs from the CPU decode"
        );
    }
    let facts: HashMap<&str, String> = d.facts().into_iter().map(|(k, v)| (k, v.to_string())).collect();
    assert_eq!(facts["mpp_cpu_fallbacks"], "3", "{facts:?}");
    drop(d);
    assert_mpp_log_released_everything(&std::fs::read_to_string(log.path()).unwrap());
}

#[test]
fn a_decode_that_times_out_after_mpp_took_the_jpeg_frees_its_frame_only_after_mpp_destroy() {
    let (_one, lib, log, alloc) = binding_session();
    let jpeg = &clip().1[0];
    let out = alloc.allocate(mpp_buffer_bytes(768, 432)).unwrap();
    // The fake keeps JPEG 2 "on the hardware": no output task comes, polls time out.
    std::env::set_var("ZCPIPE_FAKE_MPP_JPEG_HANG", "2");
    let d = MppJpeg::new(Arc::clone(&lib), 20);
    std::env::remove_var("ZCPIPE_FAKE_MPP_JPEG_HANG");
    let mut d = d.unwrap();
    let size = out.size() as usize;
    assert!(matches!(d.decode(JpegInput::Bytes(jpeg), out.fd(), size, (768, 432)).unwrap(), JpegOutcome::Picture(_)));
    let e = format!("{:#}", d.decode(JpegInput::Bytes(jpeg), out.fd(), size, (768, 432)).unwrap_err());
    assert!(
        e.contains("poll(output port, 20 ms) failed: MPP_NOK") && e.contains("out of service") && !e.contains('\n'),
        "{e}"
    );
    assert!(d.poisoned().is_some());
    let e = format!("{:#}", d.decode(JpegInput::Bytes(jpeg), out.fd(), size, (768, 432)).unwrap_err());
    assert!(e.starts_with("MPP's JPEG decoder is out of service since an earlier failure") && !e.contains('\n'), "{e}");
    d.destroy().unwrap();
    let text = std::fs::read_to_string(log.path()).unwrap();
    // mpp_destroy (the hardware finishes) comes before the stranded frame's deinit; no violation.
    let lines: Vec<&str> = text.lines().collect();
    let at = |pat: &str| lines.iter().rposition(|l| l.contains(pat)).unwrap_or_else(|| panic!("no {pat}: {text}"));
    assert!(at(" mpp_destroy ") < at(" mpp_frame_deinit "), "{text}");
    let destroy = lines[at(" mpp_destroy ")];
    assert_eq!(log_field(destroy, "hung"), "1", "{destroy}");
    // At mpp_destroy the stranded frame and packet are still alive (the hardware's); after
    // it, everything is released and no rule was broken.
    assert_eq!(
        (log_field(destroy, "live_frames"), log_field(destroy, "live_packets"), log_field(destroy, "user_tasks")),
        ("1", "1", "0"),
        "{destroy}"
    );
    assert_eq!(log_lines(&log, "task_decode").len(), 2);
    let put = lines.last().unwrap();
    assert!(put.contains(" mpp_buffer_group_put ") && log_field(put, "all_live") == "0", "{text}");
    assert!(log_lines(&log, "violation").is_empty(), "{text}");
}

#[test]
fn decoder_auto_takes_mpp_where_the_service_node_exists_else_the_cpu() {
    for (service, want) in [(true, "mpp"), (false, "cpu")] {
        let r = run_on(&clip().0, "auto", &["--frames", "2"], service);
        let stderr = r.stderr();
        assert!(r.out.status.success(), "{stderr}");
        assert_eq!((r.frames.len(), r.capture["extra"]["decoder"].as_str()), (2, Some(want)), "{stderr}");
        assert!(stderr.contains(&format!("decoder {want} for MJPEG video:")) && stderr.contains("auto:"), "{stderr}");
        assert_eq!(r.mpp_calls("task_decode").len(), if service { 2 } else { 0 }, "{}", r.mpp);
    }
}

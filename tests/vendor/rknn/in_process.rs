//! The fake opened in this test process, and a run whose librga writes what the NPU reads.

use super::*;

/// The fake opened in this test process (the env it reads is set once, to its defaults:
/// w_stride 416, float16 output, no call log).
fn in_process_runtime() -> std::sync::Arc<zcpipe::sys::rknn::Rknn> {
    static ENV: OnceLock<()> = OnceLock::new();
    ENV.get_or_init(|| {
        std::env::set_var("ZCPIPE_FAKE_RKNN_ONNX", data("models/yolox_nano.onnx"));
        for k in [
            "ZCPIPE_FAKE_RKNN_W_STRIDE",
            "ZCPIPE_FAKE_RKNN_OUTPUT",
            "ZCPIPE_FAKE_RKNN_CORES",
            "ZCPIPE_FAKE_RKNN_LOG",
            "ZCPIPE_FAKE_RKNN_RUN_US",
        ] {
            std::env::remove_var(k);
        }
    });
    std::sync::Arc::new(zcpipe::sys::rknn::Rknn::open_path(fake_librknnrt().into(), true).unwrap())
}

#[test]
fn bound_and_copied_frames_give_the_onnx_reference_and_a_wrong_stride_is_refused() {
    use zcpipe::core::dmabuf::Allocator;
    use zcpipe::core::frame::{Fourcc, FrameLayout, LetterboxParams};
    use zcpipe::infer::rknn::RknnDetector;
    use zcpipe::infer::{Detector, DetectorOptions};

    let opts = DetectorOptions { model: data("models/yolox_nano_416_rk3588.rknn"), ..Default::default() };
    let mut det = RknnDetector::open_with(in_process_runtime(), &opts).unwrap();
    let spec = det.input_spec().clone();
    assert_eq!((spec.width, spec.height, spec.bytesperline, spec.name.as_str()), (416, 416, 1248, "images"));
    assert_eq!(det.outputs()[0].shape, vec![1, 3549, 85]);

    // The exact letterboxed dog the goldens were made from (tests/data/golden/PROVENANCE.md).
    let input = std::fs::read(data("tests/data/golden/dog_input_u8_nhwc_bgr_416.bin")).unwrap();
    let layout = FrameLayout::packed24(Fourcc::BGR24, 416, 416, 1248);
    let copied = det.detect(&input, &layout).unwrap();

    let mut buf = Allocator::Memfd.allocate(input.len() as u64).unwrap();
    buf.write().unwrap()[..input.len()].copy_from_slice(&input);
    let small = Allocator::Memfd.allocate(4096).unwrap();
    let err = det.bind_pool(&[&buf, &small]).unwrap_err().to_string();
    assert!(err.contains("scaler buffer 1 is 4096 bytes but the NPU reads 519168"), "{err}");
    assert!(det.bind_pool(&[&buf]).unwrap());
    let bound = det.detect_index(0, &layout).unwrap();
    assert_eq!(bound, copied, "the NPU read the same bytes through the dma-buf as through the copy");

    // onnxruntime's reference on this input (dog_sim_detections.json, onnx_reference_detections):
    // dog 0.8551, bicycle 0.8026, car 0.7982, in source pixels.
    let lb = LetterboxParams::top_left(768, 576, 416, 416);
    let want = [
        (16, 0.8551, [132.8, 206.6, 325.7, 543.1]),
        (1, 0.8026, [51.7, 137.2, 572.3, 423.6]),
        (2, 0.7982, [466.3, 78.4, 692.5, 171.3]),
    ];
    for (d, (class_id, score, bx)) in bound.iter().zip(want) {
        assert_eq!(d.class_id, class_id, "{bound:?}");
        assert!((d.score as f64 - score).abs() < 0.005, "{bound:?}");
        let m = lb.unmap_box(d.bbox);
        for k in 0..4 {
            assert!((m[k] as f64 - bx[k]).abs() < 1.0, "{m:?} vs {bx:?}");
        }
    }

    let wide = FrameLayout::packed24(Fourcc::BGR24, 416, 416, 1280);
    let err = det.detect_index(0, &wide).unwrap_err().to_string();
    assert!(err.contains("rows of 1280 bytes") && err.contains("rows of 1248 (w_stride 416)"), "{err}");
    let err = det.detect_index(1, &layout).unwrap_err().to_string();
    assert!(err.contains("buffer index 1 was not imported"), "{err}");
}

/// `key=value` of a fake librga log line (`improcess src[handle=3 ...] dst[handle=9 ...]`
/// names the source first, then the destination).
fn rga_field<'a>(line: &'a str, key: &str, nth: usize) -> &'a str {
    let pat = format!("{key}=");
    let at = line.match_indices(&pat).nth(nth).unwrap_or_else(|| panic!("no {key}= #{nth} in {line}")).0 + pat.len();
    line[at..].split([' ', ']']).next().unwrap()
}

/// The board path on the host: `--scaler rga --infer rknn` against both fakes, every stage
/// its own process. RGA writes each frame into a scaler pool buffer it imported once; the
/// NPU reads that same buffer (same inode, in another process) through the memory it
/// imported once; no stage copies or maps a frame on the way.
#[cfg(feature = "onnx")]
#[test]
fn rga_writes_the_buffer_the_npu_reads_and_detections_match_onnx() {
    let rga = fake_librga();
    let dir = tempfile::tempdir().unwrap();
    let src = photo_dir(dir.path());
    let rga_log = dir.path().join("rga.log");
    let mut args = pipeline_args(&src, "rknn", "models/yolox_nano_416_rk3588.rknn");
    let at = args.iter().position(|a| *a == "cpu").unwrap();
    args[at] = "rga";
    args.extend(["--buffers", "4"]);
    let r = run(
        dir.path(),
        &args,
        &[("ZCPIPE_LIBRGA", rga.to_str().unwrap()), ("ZCPIPE_FAKE_RGA_LOG", rga_log.to_str().unwrap())],
    );
    assert!(r.out.status.success(), "{}", r.stderr());
    let frames = r.frames();
    assert_eq!(frames.len(), FRAMES);
    // The fake RGA converts with its own (nearest/bilinear) resampler, not the CPU scaler's:
    // PROVENANCE's tolerance for an on-board scaler.
    assert_same_detections(&frames, 0.5, 0.05, 0.85);
    let mems = assert_zero_copy_contract(&r, 3, FRAMES, 416);

    let log = std::fs::read_to_string(&rga_log).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    let named = |n: &str| -> Vec<&str> { lines.iter().copied().filter(|l| l.split(' ').next() == Some(n)).collect() };
    // Imports by fd, once per buffer at start-up: the 3 scaler buffers and the 4 capture
    // buffers (whole: the photos differ in size, each frame's geometry rides on the handle).
    // Never a CPU address.
    let imports: Vec<(&str, &str)> = named("importbuffer_fd")
        .iter()
        .filter(|l| !l.ends_with("handle=0"))
        .map(|l| (rga_field(l, "handle", 0), rga_field(l, "ino", 0)))
        .collect();
    let ino_of: HashMap<&str, &str> = imports.iter().copied().collect();
    let buffers: BTreeSet<&str> = ino_of.values().copied().collect();
    assert_eq!(buffers.len(), 4 + 3, "the 4 capture and 3 scaler buffers, each a distinct buffer: {log}");
    assert_eq!(imports.len(), 4 + 3, "every pool buffer imported once: {log}");
    let first_job = lines.iter().position(|l| l.starts_with("improcess")).unwrap();
    assert!(
        lines.iter().rposition(|l| l.starts_with("importbuffer_fd")).unwrap() < first_job,
        "all imports before the first frame: {log}"
    );
    for bad in ["importbuffer_virtualaddr", "importbuffer_physicaladdr", "wrapbuffer_virtualaddr"] {
        assert!(named(bad).is_empty(), "{bad} in zero-copy mode: {log}");
    }
    // One improcess per frame, from an imported source into an imported destination.
    let jobs = named("improcess");
    assert_eq!(jobs.len(), FRAMES, "{log}");
    let written: Vec<&str> = jobs
        .iter()
        .map(|l| {
            assert!(l.contains(" status=1 "), "IM_STATUS_SUCCESS (1): {l}");
            assert!(ino_of.contains_key(rga_field(l, "handle", 0)), "source not imported: {l}");
            ino_of[rga_field(l, "handle", 1)]
        })
        .collect();
    // Frame k: the buffer RGA wrote is the buffer the NPU read (block policy: same order).
    let mem_ino: HashMap<&str, &str> =
        r.named("rknn_create_mem_from_fd").iter().map(|m| (m["mem"].as_str(), m["ino"].as_str())).collect();
    let read: Vec<&str> = r.named("rknn_set_io_mem").iter().map(|s| mem_ino[s["mem"].as_str()]).collect();
    assert_eq!(written, read, "frame by frame, the inode RGA wrote is the inode the NPU read");
    assert_eq!(read.iter().collect::<BTreeSet<_>>().len(), mems.len(), "all 3 scaler buffers carried frames");
    // Every handle released.
    let released: BTreeSet<&str> = named("releasebuffer_handle")
        .iter()
        .filter(|l| l.ends_with("status=1"))
        .map(|l| rga_field(l, "handle", 0))
        .collect();
    assert_eq!(released, ino_of.keys().copied().collect::<BTreeSet<_>>(), "every RGA handle released: {log}");
    let s = r.summary.as_ref().unwrap();
    assert_eq!(s["stages"]["infer"]["extra"]["device_reads_in_place"], true, "{s}");
    println!(
        "EVIDENCE rga+rknn: {} frames; RGA: {} imports of 7 buffers (4 capture, 3 scaler) before the first frame, {} improcess, every handle released; RKNN imported {} mems once, {} rknn_set_io_mem, 0 rknn_inputs_set; frame-by-frame inodes RGA wrote == inodes NPU read: {:?}",
        FRAMES,
        imports.len(),
        jobs.len(),
        mems.len(),
        read.len(),
        read
    );
}

/// A model cut short (here its first 100,000 bytes: the header survives, the toolkit's
/// trailer does not) is refused before the runtime sees it.
#[test]
fn a_truncated_model_is_refused_before_the_runtime_loads_it() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("trunc.rknn");
    let bytes = std::fs::read(data("models/yolox_nano_416_rk3588.rknn")).unwrap();
    std::fs::write(&m, &bytes[..100_000]).unwrap();
    let r = run(
        dir.path(),
        &["--source", "testsrc", "--frames", "2", "--infer", "rknn", "--model", m.to_str().unwrap()],
        &[],
    );
    let line = one_error_line(&r, &["trunc.rknn (100000 bytes) has no rknn-toolkit2 metadata", "make rknn-models"]);
    assert!(r.named("rknn_init").is_empty(), "refused before rknn_init: {line}");
}

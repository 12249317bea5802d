//! `--copy-mode` with the vendor backends, against the ABI fakes (`fakes/`): RGA is fed CPU
//! memory through virtual addresses and RKNN through `rknn_inputs_set`, as a plain pipeline
//! would, so `zcpipe compare` on a board measures zero-copy against that. The zero-copy
//! side of the same backends is tested in tests/vendor/rknn.rs and tests/vendor/rga.rs.

#![cfg(feature = "onnx")]

use serde_json::Value;

use crate::common;
use common::{assert_no_orphans, fake_librga, fake_librknnrt, root, zcpipe_run};

#[test]
fn copy_mode_feeds_rga_virtual_addresses_and_rknn_inputs_set() {
    let (rga, rknn) = (fake_librga(), fake_librknnrt());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A fake system root whose device tree names an RK3588 (the model's platform).
    let board = d.join("root");
    std::fs::create_dir_all(board.join("proc/device-tree")).unwrap();
    std::fs::write(board.join("proc/device-tree/compatible"), "vendor,board\0rockchip,rk3588\0").unwrap();
    let (rga_log, rknn_log) = (d.join("rga.log"), d.join("rknn.log"));
    let out = zcpipe_run(d)
        .env("ZCPIPE_LIBRGA", rga)
        .env("ZCPIPE_FAKE_RGA_LOG", &rga_log)
        .env("ZCPIPE_LIBRKNNRT", rknn)
        .env("ZCPIPE_FAKE_RKNN_LOG", &rknn_log)
        .env("ZCPIPE_FAKE_RKNN_ONNX", root().join("models/yolox_nano.onnx"))
        .env("ZCPIPE_TEST_ROOT", &board)
        .args([
            "--copy-mode",
            "--source",
            "image:tests/data/dog.jpg",
            "--frames",
            "4",
            "--ring-policy",
            "block",
            "--json",
            "--stats-interval",
            "0",
        ])
        .args(["--scaler", "rga", "--infer", "rknn", "--model", "models/yolox_nano_416_rk3588.rknn"])
        .output()
        .unwrap();
    assert_no_orphans(d);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("copy mode: RGA reads and writes CPU memory through virtual addresses"), "{stderr}");
    // The frame lines (the tracker's event lines come between them: a still image's objects are confirmed at frame 3).
    let frames: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["type"] == "frame")
        .collect();
    assert_eq!(frames.len(), 4);
    for f in &frames {
        let dog = f["detections"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["label"] == "dog")
            .unwrap_or_else(|| panic!("no dog: {f}"));
        assert!((dog["score"].as_f64().unwrap() - 0.855).abs() <= 0.05, "{dog}");
    }

    let rga_text = std::fs::read_to_string(&rga_log).unwrap();
    let rga_calls = |n: &str| rga_text.lines().filter(|l| l.split(' ').next() == Some(n)).count();
    assert_eq!(rga_calls("importbuffer_fd"), 0, "copy mode imports nothing: {rga_text}");
    assert_eq!(rga_calls("improcess"), 4, "{rga_text}");
    assert_eq!(rga_calls("wrapbuffer_virtualaddr_t"), 8, "a source and a destination address per frame: {rga_text}");
    for l in rga_text.lines().filter(|l| l.starts_with("improcess")) {
        assert!(
            l.contains("src[handle=0 ")
                && l.contains("dst[handle=0 ")
                && !l.contains("va=0x0 ")
                && l.contains(" status=1 "),
            "{l}"
        );
    }

    let rknn_text = std::fs::read_to_string(&rknn_log).unwrap();
    let rknn_calls = |n: &str| rknn_text.lines().filter(|l| l.split_whitespace().nth(1) == Some(n)).count();
    assert_eq!(rknn_calls("rknn_inputs_set"), 4, "the NPU is fed by a CPU copy per frame: {rknn_text}");
    assert_eq!((rknn_calls("rknn_create_mem_from_fd"), rknn_calls("rknn_set_io_mem")), (0, 0), "{rknn_text}");

    let s: Value = serde_json::from_slice(&std::fs::read(d.join("summary.json")).unwrap()).unwrap();
    // The scale -> infer hop copied each 416x416x3 model input out of the scaler's buffer and
    // into the infer stage's own (2 x 519,168 bytes per frame).
    let (out_c, in_c) = (&s["stages"]["scale"]["copy_out"], &s["stages"]["infer"]["copy_in"]);
    assert_eq!((out_c["frames"].as_u64(), in_c["frames"].as_u64()), (Some(4), Some(4)), "{out_c} {in_c}");
    assert_eq!(
        out_c["copied_bytes"].as_u64().unwrap() + in_c["copied_bytes"].as_u64().unwrap(),
        2 * 4 * 519_168,
        "{out_c} {in_c}"
    );
    println!(
        "EVIDENCE copy mode with the fakes: RGA 0 imports, 4 improcess on 8 virtual addresses; RKNN 4 rknn_inputs_set, 0 rknn_create_mem_from_fd; dog {:.3}",
        frames[0]["detections"].as_array().unwrap().iter().find(|x| x["label"] == "dog").unwrap()["score"].as_f64().unwrap()
    );
}

//! The inference service on the NPU: a client's request runs on the contexts the cameras use
//! (the fake librknnrt running the ONNX model), with the one loaded model: one `rknn_init`,
//! `rknn_dup_context` for every other context, however many clients come.

use std::io::Read;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use super::{board_root, data};
use crate::common::{fake_librknnrt, wait_for, zcpipe, zcpipe_run, Reap};

#[test]
fn service_clients_share_the_loaded_model_and_its_contexts() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("rknn.log");
    let image = data("tests/data/person.jpg");
    let mut child = zcpipe_run(dir.path())
        .env("ZCPIPE_LIBRKNNRT", fake_librknnrt())
        .env("ZCPIPE_FAKE_RKNN_ONNX", data("models/yolox_nano.onnx"))
        .env("ZCPIPE_FAKE_RKNN_LOG", &log)
        .env("ZCPIPE_TEST_ROOT", board_root(dir.path(), "rk3588"))
        .args(["--source", &format!("image:{}", image.display()), "--fps", "5", "--scaler", "cpu"])
        .args(["--infer", "rknn", "--model", "models/yolox_nano_416_rk3588.rknn", "--npu-cores", "0,1,2"])
        .args(["--npu-contexts-per-core", "2", "--json", "--stats-interval", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            r.read_to_string(&mut s).unwrap();
            s
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let mut child = Reap(child);
    let run_dir = dir.path().join("run");
    let sock = run_dir.join("npu.sock");
    assert!(wait_for(Duration::from_secs(120), || sock.exists()), "no service at {}", sock.display());

    let mut answers = vec![];
    for _ in 0..3 {
        let d = zcpipe().args(["detect", "--run-dir"]).arg(&run_dir).arg("--image").arg(&image).output().unwrap();
        assert!(d.status.success(), "{}", String::from_utf8_lossy(&d.stderr));
        answers.push(serde_json::from_slice::<Value>(&d.stdout).unwrap());
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.0.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    assert!(child.0.wait().unwrap().success(), "{}", err.join().unwrap());
    let stdout = out.join().unwrap();
    let camera: Vec<Value> =
        stdout.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).filter(|v| v["type"] == "frame").collect();
    assert!(!camera.is_empty());
    for a in &answers {
        assert_eq!(a["detections"], camera[0]["detections"], "a client's detections are the camera's for the picture");
        assert!(a["detections"].as_array().unwrap().len() >= 3, "{a}");
    }
    let calls = std::fs::read_to_string(&log).unwrap();
    let count = |name: &str| calls.lines().filter(|l| l.split_whitespace().nth(1) == Some(name)).count();
    assert_eq!(count("rknn_init"), 1, "one model load for the cameras and every client");
    assert_eq!(count("rknn_dup_context"), 5, "3 cores x 2 contexts share it");
    assert_eq!(count("rknn_run"), camera.len() + answers.len(), "every run is a camera's frame or a client's request");
    println!(
        "EVIDENCE service on the NPU: 1 rknn_init, 5 rknn_dup_context, {} runs ({} camera frames, {} client requests on the same contexts)",
        count("rknn_run"),
        camera.len(),
        answers.len()
    );
}

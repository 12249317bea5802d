//! The inference service on the NPU: a client's request runs on the contexts the cameras use
//! (the fake librknnrt running the ONNX model), with the one loaded model: one `rknn_init`,
//! `rknn_dup_context` for every other context, however many clients come; with RGA (the fake
//! librga), a client's frame is imported once and converted into a model input the NPU reads
//! in place.

use std::collections::HashMap;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use super::{board_root, data};
use crate::common::{fake_librga, fake_librknnrt, nv12_memfd, wait_for, zcpipe, zcpipe_run, Reap};
use zcpipe::core::service::client::Client;
use zcpipe::core::service::ServiceStats;

#[test]
fn service_clients_share_the_loaded_model_and_its_contexts() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("rknn.log");
    let image = data("tests/data/person.jpg");
    let args = ["--scaler", "cpu", "--npu-cores", "0,1,2", "--npu-contexts-per-core", "2"];
    let s = serve(dir.path(), &image, &args, &[]);
    let run_dir = s.run_dir.clone();

    let mut answers = vec![];
    for _ in 0..3 {
        let d = zcpipe().args(["detect", "--run-dir"]).arg(&run_dir).arg("--image").arg(&image).output().unwrap();
        assert!(d.status.success(), "{}", String::from_utf8_lossy(&d.stderr));
        answers.push(serde_json::from_slice::<Value>(&d.stdout).unwrap());
    }
    let (camera, _) = s.stop();
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

/// A pipeline with the fake librknnrt (and `env`) whose camera shows `image`, serving
/// clients; returns once the service's socket is there.
struct Served {
    child: Reap,
    out: std::thread::JoinHandle<String>,
    err: std::thread::JoinHandle<String>,
    run_dir: std::path::PathBuf,
}

fn serve(dir: &Path, image: &Path, args: &[&str], env: &[(&str, &Path)]) -> Served {
    let mut c = zcpipe_run(dir);
    c.env("ZCPIPE_LIBRKNNRT", fake_librknnrt())
        .env("ZCPIPE_FAKE_RKNN_ONNX", data("models/yolox_nano.onnx"))
        .env("ZCPIPE_FAKE_RKNN_LOG", dir.join("rknn.log"))
        .env("ZCPIPE_TEST_ROOT", board_root(dir, "rk3588"))
        .args(["--source", &format!("image:{}", image.display()), "--fps", "5"])
        .args(["--infer", "rknn", "--model", "models/yolox_nano_416_rk3588.rknn"])
        .args(["--json", "--stats-interval", "0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c.spawn().unwrap();
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            r.read_to_string(&mut s).unwrap();
            s
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let child = Reap(child);
    let run_dir = dir.join("run");
    let sock = run_dir.join("npu.sock");
    assert!(wait_for(Duration::from_secs(120), || sock.exists()), "no service at {}", sock.display());
    Served { child, out, err, run_dir }
}

impl Served {
    /// Stops the run (SIGINT); its frame lines and its log.
    fn stop(mut self) -> (Vec<Value>, String) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.0.id() as i32), nix::sys::signal::Signal::SIGINT)
            .unwrap();
        let ok = self.child.0.wait().unwrap().success();
        let err = self.err.join().unwrap();
        assert!(ok, "{err}");
        let frames = self
            .out
            .join()
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|v| v["type"] == "frame")
            .collect();
        (frames, err)
    }
}

/// The fake libraries' log lines named `name`: each line's `key=value` pairs.
fn calls(log: &Path, name: &str) -> Vec<HashMap<String, String>> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut t = l.split_whitespace().skip_while(|w| *w != name);
            t.next()?;
            Some(t.filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect())
        })
        .collect()
}

/// A client's JPEG (`zcpipe detect`) and raw NV12 frame (the Rust client) through the
/// service, and the service's numbers.
fn ask(s: &Served, image: &Path) -> (Value, Value, ServiceStats, u64) {
    let d = zcpipe().args(["detect", "--run-dir"]).arg(&s.run_dir).arg("--image").arg(image).output().unwrap();
    assert!(d.status.success(), "{}", String::from_utf8_lossy(&d.stderr));
    let jpeg: Value = serde_json::from_slice(&d.stdout).unwrap();
    let sock = s.run_dir.join("npu.sock");
    let mut c = Client::connect(&sock, "raw").unwrap();
    let (fd, spec) = nv12_memfd(image);
    let ino = nix::sys::stat::fstat(fd.as_raw_fd()).unwrap().st_ino;
    let i = c.register(&[(&fd, spec)]).unwrap();
    let line = zcpipe::core::schema::SocketLine::Frame(c.detect(i).unwrap()).to_line().unwrap();
    let raw: Value = serde_json::from_str(line.trim()).unwrap();
    let st = Client::connect(&sock, "asker").unwrap().stats().unwrap();
    (jpeg, raw, st, ino)
}

#[test]
fn service_clients_go_through_rga_into_an_input_the_npu_reads_in_place() {
    let image = data("tests/data/person.jpg");
    // RGA imports what it is given (as the driver does a dma-buf; the host has no heaps, so
    // the buffers here are memfds): a client's frame and the service's model input are
    // imported once, and the NPU reads the input in place.
    let dir = tempfile::tempdir().unwrap();
    let (rga_log, rknn_log) = (dir.path().join("rga.log"), dir.path().join("rknn.log"));
    let s = serve(
        dir.path(),
        &image,
        &["--scaler", "rga", "--serve-scaler", "rga"],
        &[("ZCPIPE_LIBRGA", fake_librga()), ("ZCPIPE_FAKE_RGA_LOG", &rga_log)],
    );
    let (jpeg, raw, st, ino) = ask(&s, &image);
    let (camera, err) = s.stop();
    assert!(!camera.is_empty());
    assert_eq!(jpeg["detections"], camera[0]["detections"], "a JPEG through RGA by address: the camera's detections");
    assert_eq!(raw["detections"], camera[0]["detections"], "a raw frame through RGA in place: the camera's detections");
    assert!(camera[0]["detections"].as_array().unwrap().len() >= 3, "{}", camera[0]);
    assert_eq!(st.scaler, "rga");
    assert_eq!((st.rga_in_place, st.rga_by_address, st.cpu_letterbox), (1, 1, 0), "{st:?}");
    assert!(err.contains("clients' pictures letterboxed (rga): 1 by RGA in place (dma-buf to the NPU), 1 by RGA by address, 0 on the CPU"), "{err}");
    let imports = calls(&rga_log, "importbuffer_fd");
    assert!(imports.iter().any(|c| c["ino"] == ino.to_string()), "the client's frame imported into RGA");
    let input =
        calls(&rknn_log, "rknn_create_mem_from_fd").pop().expect("the service's model input imported into the NPU");
    assert!(imports.iter().any(|c| c.get("ino") == input.get("ino")), "the same buffer imported into RGA: {input:?}");
    assert!(
        calls(&rknn_log, "rknn_set_io_mem").iter().any(|c| c["mem"] == input["mem"]),
        "and bound as the NPU's input"
    );
    assert_eq!(calls(&rknn_log, "rknn_inputs_set").len(), 1, "only the JPEG's input is copied to the NPU");
    assert!(!calls(&rga_log, "wrapbuffer_virtualaddr_t").is_empty(), "the decoded JPEG goes to RGA by address");

    // An RGA that takes dma-buf only (as the driver): memfds go by address.
    let dir2 = tempfile::tempdir().unwrap();
    let rga_log = dir2.path().join("rga.log");
    let only = Path::new("1");
    let s = serve(
        dir2.path(),
        &image,
        &["--scaler", "cpu", "--serve-scaler", "rga"],
        &[
            ("ZCPIPE_LIBRGA", fake_librga()),
            ("ZCPIPE_FAKE_RGA_LOG", &rga_log),
            ("ZCPIPE_FAKE_RGA_DMABUF_ONLY", only),
            ("ZCPIPE_FAKE_RKNN_DMABUF_ONLY", only),
        ],
    );
    let (jpeg2, raw2, st, _) = ask(&s, &image);
    s.stop();
    assert_eq!((st.rga_in_place, st.rga_by_address, st.cpu_letterbox), (0, 2, 0), "{st:?}");
    assert_eq!((&jpeg2["detections"], &raw2["detections"]), (&jpeg["detections"], &raw["detections"]));
    let imports = calls(&rga_log, "importbuffer_fd");
    assert!(imports.iter().all(|c| c["handle"] == "0"), "nothing imported: {imports:?}");
    println!(
        "EVIDENCE service through RGA: {} detections; in place: client frame ino {ino} imported into RGA, model input ino {} imported into RGA and the NPU (mem {}); dma-buf-only RGA: 2 by address",
        camera[0]["detections"].as_array().unwrap().len(),
        input["ino"],
        input["mem"]
    );
}

//! The inference service gives a client the detections the pipeline gives a camera: `zcpipe
//! detect`, the Python client and a raw NV12 buffer through the Rust client all print, for
//! a picture, the frame line `zcpipe run --source image:FILE --json` prints.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use zcpipe::core::service::client::Client;

use crate::common::{nv12_memfd, root, wait_for, zcpipe, zcpipe_run, Reap};

/// The frame line's picture size and detections (the parts that must be equal).
fn detections(line: &str) -> (u64, u64, Value) {
    let v: Value = serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(v["type"], "frame", "{line}");
    (v["width"].as_u64().unwrap(), v["height"].as_u64().unwrap(), v["detections"].clone())
}

#[test]
fn clients_get_the_detections_the_pipeline_prints() {
    let image = root().join("tests/data/person.jpg");
    let dir = tempfile::tempdir().unwrap();
    for sub in ["once", "serve"] {
        std::fs::create_dir(dir.path().join(sub)).unwrap();
    }
    // The pipeline's own line for the picture.
    let once = zcpipe_run(&dir.path().join("once"))
        .args(["--source", &format!("image:{}", image.display()), "--frames", "1", "--json", "--stats-interval", "0"])
        .output()
        .unwrap();
    assert!(once.status.success(), "{}", String::from_utf8_lossy(&once.stderr));
    let stdout = String::from_utf8_lossy(&once.stdout);
    let want = detections(stdout.lines().find(|l| l.contains("\"type\":\"frame\"")).unwrap());
    assert!(want.2.as_array().unwrap().len() >= 3, "person, dog, horse: {want:?}");

    // A pipeline that keeps running, serving, with its web view (for /metrics).
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let run_dir = dir.path().join("serve/run");
    let serving = zcpipe_run(&dir.path().join("serve"))
        .args(["--instance", "svc-test", "--source", &format!("image:{}", image.display()), "--fps", "5"])
        .args(["--stats-interval", "0", "--http", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut serving = Reap(serving);
    let sock = run_dir.join("npu.sock");
    assert!(wait_for(Duration::from_secs(120), || sock.exists()), "no service at {}", sock.display());

    let detect_run = || {
        let args = ["detect", "--instance", "svc-test", "--run-dir"];
        zcpipe().args(args).arg(&run_dir).arg("--image").arg(&image).output().unwrap()
    };
    let detect = detect_run();
    assert!(detect.status.success(), "{}", String::from_utf8_lossy(&detect.stderr));
    assert_eq!(detections(&String::from_utf8_lossy(&detect.stdout)), want, "zcpipe detect");

    let py = std::process::Command::new("python3")
        .arg(root().join("clients/python/zcpipe_client.py"))
        .args(["--instance", "svc-test", "--run-dir"])
        .arg(&run_dir)
        .arg(&image)
        .output()
        .unwrap();
    assert!(py.status.success(), "{}", String::from_utf8_lossy(&py.stderr));
    assert_eq!(detections(&String::from_utf8_lossy(&py.stdout)), want, "the Python client");

    // A raw NV12 buffer, as a camera's frame would be: the same boxes.
    let mut c = Client::connect(&sock, "raw").unwrap();
    let (fd, spec) = nv12_memfd(&image);
    let i = c.register(&[(&fd, spec)]).unwrap();
    let f = c.detect(i).unwrap();
    let line = zcpipe::core::schema::SocketLine::Frame(f).to_line().unwrap();
    assert_eq!(detections(&line), want, "a raw NV12 buffer");
    // Its numbers, asked on the socket and shown by /metrics while it is connected.
    let st = Client::connect(&sock, "asker").unwrap().stats().unwrap();
    assert_eq!(st.connections, 4, "{st:?}");
    assert_eq!(st.answered, 3, "{st:?}");
    let me = st.per_client.iter().find(|(n, _)| n.starts_with("raw pid ")).expect("the raw client's line").1;
    assert_eq!((me.inferred, me.buffers, me.busy), (1, 1, 0), "{me:?}");
    let metrics = {
        use std::io::{Read, Write};
        let mut t = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        t.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut body = String::new();
        t.read_to_string(&mut body).unwrap();
        body
    };
    let pid = std::process::id();
    for l in [
        format!("zcpipe_service_requests_total{{client=\"raw pid {pid}\",result=\"inferred\"}} 1"),
        "zcpipe_service_clients 1".to_string(),
    ] {
        assert!(metrics.lines().any(|x| x == l), "{l} in:\n{metrics}");
    }
    drop(c);

    nix::sys::signal::kill(nix::unistd::Pid::from_raw(serving.0.id() as i32), nix::sys::signal::Signal::SIGINT)
        .unwrap();
    assert!(serving.0.wait().unwrap().success());
    assert!(!sock.exists(), "the service's socket is removed at the end");

    // No pipeline: one line naming the socket and the fix.
    let none = detect_run();
    let err = String::from_utf8_lossy(&none.stderr);
    assert_eq!(none.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("no inference service at {}", sock.display())) && err.contains("start `zcpipe run`"),
        "{err}"
    );
}

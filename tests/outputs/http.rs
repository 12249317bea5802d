//! The web view end to end: the bundled clip through the four stages at 10 fps with
//! `--http 127.0.0.1:0` (the port the publish stage chose is read from its log line), then,
//! while it runs, what a browser and Prometheus would ask: the page, the stats, the SSE
//! detections (the socket's very lines, as `--json` prints them), the Prometheus text
//! (parsed strictly here: `promtool` comes in a 96 MB package), a snapshot (a JPEG of the
//! frame's size: the clip's pixels from the capture pool's tap, the boxes in their class
//! colours), the MJPEG stream. Then the bad
//! addresses: a port in use and a remote address without `--http-allow-remote`, one line
//! each and exit code 2.

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use common::{wait_for, zcpipe, zcpipe_run, Reap};
use serde_json::Value;

pub(crate) use common::{http_get as get, http_request as request};

pub(crate) fn get_json(addr: SocketAddr, path: &str) -> Value {
    let (code, h, body) = get(addr, path);
    assert_eq!((code, h["content-type"].as_str()), (200, "application/json"), "{path}");
    serde_json::from_slice(&body).unwrap()
}

/// A series' labels but `le`, in order (a histogram's buckets grouped by series).
type Labels = Vec<(String, String)>;

/// One sample of the Prometheus text: metric name, labels, value.
pub(crate) type Sample = (String, BTreeMap<String, String>, f64);

/// Parses Prometheus text format 0.0.4 strictly: `# HELP` and `# TYPE` once per family
/// before its samples, a family's samples together, names and label names of the allowed
/// characters, label values with only `\\`, `\"`, `\n` escapes, numeric values; each
/// histogram's buckets per label set in increasing `le`, cumulative, the last `+Inf` and
/// equal to its `_count`, with its `_sum`. Panics naming the line otherwise.
pub(crate) fn parse_prometheus(text: &str) -> Vec<Sample> {
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.chars()
                .enumerate()
                .all(|(i, c)| c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit()))
    };
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut helped: Vec<String> = vec![];
    let mut finished: Vec<String> = vec![];
    let mut current: Option<String> = None;
    let mut samples: Vec<Sample> = vec![];
    assert!(text.ends_with('\n'), "the text ends with a newline");
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap();
            assert!(name_ok(name) && !helped.contains(&name.to_string()), "HELP once per family: {line}");
            helped.push(name.into());
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind), "{line}");
            assert!(types.insert(name.into(), kind.into()).is_none(), "TYPE once per family: {line}");
            if let Some(c) = current.replace(name.into()) {
                finished.push(c);
            }
            continue;
        }
        assert!(!line.starts_with('#') && !line.is_empty(), "unexpected line {line:?}");
        let (name, rest) = line.split_at(line.find(['{', ' ']).unwrap_or_else(|| panic!("no value: {line}")));
        assert!(name_ok(name), "metric name: {line}");
        let mut labels = BTreeMap::new();
        let value = if let Some(body) = rest.strip_prefix('{') {
            let mut chars = body.chars().peekable();
            loop {
                let lname: String = std::iter::from_fn(|| chars.next_if(|c| *c != '=')).collect();
                assert!(name_ok(&lname) && chars.next() == Some('=') && chars.next() == Some('"'), "label: {line}");
                let mut v = String::new();
                loop {
                    match chars.next().unwrap_or_else(|| panic!("unterminated label value: {line}")) {
                        '\\' => match chars.next() {
                            Some('\\') => v.push('\\'),
                            Some('"') => v.push('"'),
                            Some('n') => v.push('\n'),
                            e => panic!("bad escape {e:?}: {line}"),
                        },
                        '"' => break,
                        c => v.push(c),
                    }
                }
                assert!(labels.insert(lname, v).is_none(), "label twice: {line}");
                match chars.next() {
                    Some(',') => continue,
                    Some('}') => break,
                    c => panic!("after a label {c:?}: {line}"),
                }
            }
            let rest: String = chars.collect();
            rest.strip_prefix(' ').unwrap_or_else(|| panic!("one space before the value: {line}")).to_string()
        } else {
            rest[1..].to_string()
        };
        let value: f64 = match value.as_str() {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("value: {line}")),
        };
        let family = types
            .keys()
            .find(|f| {
                name == f.as_str()
                    || (types[*f] == "histogram"
                        && ["_bucket", "_sum", "_count"].iter().any(|s| name.strip_prefix(f.as_str()) == Some(s)))
            })
            .unwrap_or_else(|| panic!("sample before its TYPE: {line}"));
        assert_eq!(Some(family), current.as_ref(), "a family's samples together: {line}");
        assert!(!finished.contains(family));
        samples.push((name.into(), labels, value));
    }
    // Histograms: per label set, buckets cumulative in increasing le, +Inf == _count.
    for (family, _) in types.iter().filter(|(_, k)| *k == "histogram") {
        let mut series: BTreeMap<Labels, Vec<(f64, f64)>> = BTreeMap::new();
        for (n, l, v) in samples.iter().filter(|s| s.0 == format!("{family}_bucket")) {
            let le: f64 = match l["le"].as_str() {
                "+Inf" => f64::INFINITY,
                x => x.parse().unwrap(),
            };
            let key: Vec<(String, String)> =
                l.iter().filter(|(k, _)| *k != "le").map(|(k, v)| (k.clone(), v.clone())).collect();
            series.entry(key).or_default().push((le, *v));
            assert!(n.ends_with("_bucket"));
        }
        assert!(!series.is_empty(), "{family} has buckets");
        for (key, buckets) in &series {
            assert!(
                buckets.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
                "{family}{key:?}: increasing le, cumulative: {buckets:?}"
            );
            assert_eq!(buckets.last().unwrap().0, f64::INFINITY, "{family}{key:?} ends with +Inf");
            let find = |suffix: &str| {
                samples
                    .iter()
                    .find(|s| {
                        s.0 == format!("{family}{suffix}")
                            && s.1.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<Vec<_>>() == *key
                    })
                    .map(|s| s.2)
            };
            assert_eq!(find("_count"), Some(buckets.last().unwrap().1), "{family}{key:?}: +Inf bucket is the count");
            assert!(find("_sum").is_some(), "{family}{key:?} has its sum");
        }
    }
    samples
}

pub(crate) fn sample(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .find(|s| {
            s.0 == name
                && labels.iter().all(|(k, v)| s.1.get(*k).map(|x| x.as_str()) == Some(*v))
                && s.1.len() == labels.len()
        })
        .unwrap_or_else(|| panic!("{name}{labels:?} missing"))
        .2
}

#[test]
fn the_prometheus_check_refuses_bad_text() {
    let good = "# HELP a_total x\n# TYPE a_total counter\na_total{c=\"x\\\"y\"} 3\n";
    assert_eq!(parse_prometheus(good)[0].1["c"], "x\"y");
    for bad in [
        "a_total 3\n",                                                                             // no TYPE
        "# TYPE a counter\na{c=\"x} 3\n",                                                          // unterminated
        "# TYPE a counter\na{c=\"\\t\"} 3\n",                                                      // bad escape
        "# TYPE a counter\na 3x\n",                                                                // not a number
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\nh_sum 1\n", // not cumulative
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_count 2\nh_sum 1\n",                          // no +Inf
        "# TYPE a counter\n# TYPE b counter\nb 1\na 1\n", // a family's samples apart
    ] {
        assert!(std::panic::catch_unwind(|| parse_prometheus(bad)).is_err(), "accepted: {bad}");
    }
}

/// Reads one MJPEG part: its JPEG.
fn mjpeg_part(r: &mut BufReader<TcpStream>, boundary: &str) -> Vec<u8> {
    let mut l = String::new();
    while l.trim_end().is_empty() {
        l.clear();
        r.read_line(&mut l).unwrap();
    }
    assert_eq!(l.trim_end(), format!("--{boundary}"));
    let mut len = None;
    loop {
        let mut h = String::new();
        r.read_line(&mut h).unwrap();
        let h = h.trim_end().to_string();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':').unwrap();
        match k.to_ascii_lowercase().as_str() {
            "content-length" => len = Some(v.trim().parse::<usize>().unwrap()),
            "content-type" => assert_eq!(v.trim(), "image/jpeg"),
            _ => {}
        }
    }
    let mut jpeg = vec![0; len.expect("a Content-Length per part")];
    r.read_exact(&mut jpeg).unwrap();
    jpeg
}

#[test]
fn the_web_view_serves_the_running_pipeline() {
    let dir = tempfile::tempdir().unwrap();
    let view = View::start(dir.path());
    let addr = view.addr;
    view.the_page();
    view.the_stats();
    view.the_metrics();
    let snap = view.a_snapshot();
    view.the_mjpeg_stream();
    view.a_huge_body_is_refused();
    let ended = view.stop();
    ended.the_events_are_the_socket_lines();
    ended.the_snapshot_has_its_boxes(&snap);
    let (err, line) = (&ended.err, format!("  web view: http://{addr}/: "));
    assert!(err.contains(&line), "the summary's web view line ({line}): {err}");
    common::assert_no_orphans(dir.path());
}

/// The run of [`the_web_view_serves_the_running_pipeline`] while it serves: the process,
/// its directory, the web view's address, the readers of its stderr and its stdout and of
/// an SSE client that connected at the start, and the data lines that client got so far.
struct View {
    run: Reap,
    dir: PathBuf,
    addr: SocketAddr,
    stderr_reader: JoinHandle<String>,
    stdout_reader: JoinHandle<Vec<String>>,
    sse_reader: JoinHandle<(Vec<String>, String)>,
    seen: Arc<Mutex<Vec<String>>>,
}

/// The snapshot [`View::a_snapshot`] chose: the seq of the frame it names, and its picture.
struct Snapshot {
    seq: u64,
    img: image::RgbImage,
}

/// The run once stopped: its stderr, its stdout's lines, the SSE client's data lines and
/// the raw stream.
struct Ended {
    err: String,
    lines: Vec<String>,
    sse: Vec<String>,
    raw: String,
}

/// The web view's address, read from the run's log (the port the publish stage chose), and
/// the thread that keeps the whole log for the end.
pub(crate) fn web_view_address(run: &mut Reap) -> (SocketAddr, JoinHandle<String>) {
    let (addr_tx, addr_rx) = std::sync::mpsc::channel::<SocketAddr>();
    let stderr = run.0.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for l in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
            if let Some(rest) = l.split("web view on http://").nth(1) {
                let _ = addr_tx.send(rest.split('/').next().unwrap().parse().unwrap());
            }
            all += &l;
            all.push('\n');
        }
        all
    });
    let addr = addr_rx.recv_timeout(Duration::from_secs(120)).expect("the publish stage logs the web view's address");
    (addr, reader)
}

impl View {
    /// Starts the run in `dir`, reads the web view's address from its log, and connects
    /// the SSE client.
    fn start(dir: &Path) -> View {
        let child = zcpipe_run(dir)
            .args([
                "--instance",
                "http-view",
                "--http",
                "127.0.0.1:0",
                "--fps",
                "10",
                "--scaler",
                "cpu",
                "--json",
                "--score-threshold",
                "0.2",
                "--stats-interval",
                "0",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut run = Reap(child);
        let (addr, stderr_reader) = web_view_address(&mut run);
        let stdout = run.0.stdout.take().unwrap();
        let stdout_reader =
            std::thread::spawn(move || BufReader::new(stdout).lines().map_while(|l| l.ok()).collect::<Vec<String>>());
        assert!(addr.ip().is_loopback() && addr.port() != 0, "{addr}");

        // SSE from the start: every line from now on.
        let (code, h, mut events) = request(addr, "/api/detections");
        assert_eq!((code, h["content-type"].as_str()), (200, "text/event-stream"));
        // What the SSE client has got so far, for the snapshot's frame line.
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let seen_w = seen.clone();
        let sse_reader = std::thread::spawn(move || {
            let mut data = vec![];
            let mut raw = String::new();
            for l in (&mut events).lines().map_while(|l| l.ok()) {
                raw += &l;
                raw.push('\n');
                if let Some(d) = l.strip_prefix("data: ") {
                    data.push(d.to_string());
                    seen_w.lock().unwrap().push(d.to_string());
                    if d.starts_with("{\"type\":\"end\"") {
                        break;
                    }
                }
            }
            (data, raw)
        });
        View { run, dir: dir.to_path_buf(), addr, stderr_reader, stdout_reader, sse_reader, seen }
    }

    /// The page: the camera's picture, its stream, the API.
    fn the_page(&self) {
        let addr = self.addr;
        let (code, h, page) = get(addr, "/");
        let page = String::from_utf8(page).unwrap();
        assert_eq!((code, h["content-type"].as_str()), (200, "text/html; charset=utf-8"));
        assert!(
            page.contains("<img id=\"img-cam0\" src=\"/stream/cam0.mjpg\" alt=\"camera cam0\">")
                && page.contains("new EventSource(\"/api/detections\")")
                && page.contains("fetch(\"/api/stats\")"),
            "{page}"
        );
    }

    /// Stats once frames flow (with detections: the clip's first frames have a tv at 0.26).
    fn the_stats(&self) {
        let addr = self.addr;
        assert!(
            wait_for(Duration::from_secs(120), || get_json(addr, "/api/stats")["cameras"]["cam0"]["frames"]
                .as_u64()
                .unwrap()
                >= 10),
            "frames flow"
        );
        let st = get_json(addr, "/api/stats");
        let cam = &st["cameras"]["cam0"];
        assert_eq!((cam["width"].as_u64(), cam["height"].as_u64()), (Some(768), Some(432)), "{st}");
        assert!(cam["fps"].as_f64().unwrap() > 0.0 && cam["fps"].as_f64().unwrap() < 30.0, "{st}");
        assert!(cam["drops"].as_u64().is_some() && cam["latency_us"]["total"]["count"].as_u64().unwrap() >= 10, "{st}");
        assert!(cam["latency_us"]["infer"]["p50_us"].as_f64().unwrap() > 0.0, "{st}");
        assert_eq!(st["restarts"], serde_json::json!({"capture": 0, "scale": 0, "infer": 0, "publish": 0}));
        assert_eq!(st["server"]["clients"]["sse"], 1, "our event stream: {st}");
        assert_eq!(st["server"]["url"], format!("http://{addr}/"));
    }

    /// /metrics: strict text format, and its counts agree with each other.
    fn the_metrics(&self) {
        let addr = self.addr;
        let (code, h, text) = get(addr, "/metrics");
        assert_eq!((code, h["content-type"].as_str()), (200, "text/plain; version=0.0.4; charset=utf-8"));
        let m = parse_prometheus(&String::from_utf8(text).unwrap());
        let frames = sample(&m, "zcpipe_frames_total", &[("camera", "cam0")]);
        assert!(frames >= 10.0);
        assert_eq!(
            sample(&m, "zcpipe_latency_seconds_count", &[("stage", "total"), ("camera", "cam0")]),
            frames,
            "every frame's total latency is counted"
        );
        assert_eq!(sample(&m, "zcpipe_latency_seconds_count", &[("stage", "infer"), ("camera", "cam0")]), frames);
        assert!(sample(&m, "zcpipe_dropped_frames_total", &[("camera", "cam0")]) >= 0.0);
        for stage in ["capture", "scale", "infer", "publish"] {
            assert_eq!(sample(&m, "zcpipe_stage_restarts_total", &[("stage", stage)]), 0.0);
        }
        assert_eq!(sample(&m, "zcpipe_http_clients", &[("kind", "sse")]), 1.0);
    }

    /// A snapshot: a JPEG of the frame's size, the boxes of the frame line it names drawn in
    /// their class colours on the camera's pixels (the boxes are checked once the run ended,
    /// against its stdout: [`Ended::the_snapshot_has_its_boxes`]).
    fn a_snapshot(&self) -> Snapshot {
        let (addr, seen) = (self.addr, &self.seen);
        // The capture pool's tap joins when a picture is first wanted; the first snapshot
        // waits for its pixels, so even the run's first one is the camera's picture, never
        // the dark canvas (asked once the pipeline runs: the SSE client has a frame line).
        assert!(wait_for(Duration::from_secs(60), || seen
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("\"type\":\"frame\""))));
        let (code, h, first) = get(addr, "/snapshot/cam0.jpg");
        assert_eq!(code, 200, "the first snapshot: {h:?}");
        assert!(h.contains_key("x-zcpipe-pixel-seq") && !h.contains_key("x-zcpipe-no-pixels"), "{h:?}");
        let img = image::load_from_memory_with_format(&first, image::ImageFormat::Jpeg).unwrap().to_rgb8();
        let dark = img.pixels().filter(|p| p.0.iter().all(|v| v.abs_diff(24) < 10)).count();
        assert!(dark * 2 < 768 * 432, "the first snapshot has the clip's pixels: {dark} dark pixels");
        // Wanted for the boxes: one of a frame line with detections.
        let mut snap = None;
        let got_pixels = wait_for(Duration::from_secs(60), || {
            let (code, h, jpeg) = get(addr, "/snapshot/cam0.jpg");
            assert_eq!((code, h["content-type"].as_str()), (200, "image/jpeg"));
            let seq: u64 = h["x-zcpipe-seq"].parse().unwrap();
            let frame = seen
                .lock()
                .unwrap()
                .iter()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .find(|v| v["type"] == "frame" && v["seq"] == seq);
            let wanted = h.contains_key("x-zcpipe-pixel-seq")
                && frame.as_ref().is_some_and(|f| !f["detections"].as_array().unwrap().is_empty());
            snap = Some((h, jpeg));
            wanted
        });
        assert!(got_pixels, "the view gets the camera's pixels: {:?}", get_json(addr, "/api/stats")["server"]);
        let (h, jpeg) = snap.unwrap();
        let img = image::load_from_memory_with_format(&jpeg, image::ImageFormat::Jpeg).unwrap().to_rgb8();
        assert_eq!(img.dimensions(), (768, 432));
        let seq: u64 = h["x-zcpipe-seq"].parse().unwrap();
        let dark = img.pixels().filter(|p| p.0.iter().all(|v| v.abs_diff(24) < 10)).count();
        assert!(dark * 2 < 768 * 432, "the clip's pixels, not the dark canvas: {dark} dark pixels");
        assert!(get_json(addr, "/api/stats")["server"]["no_pixels"]["cam0"].is_null(), "pixels now");
        Snapshot { seq, img }
    }

    /// The MJPEG stream: two parts, each a JPEG of the frame's size; and a camera that is not
    /// there.
    fn the_mjpeg_stream(&self) {
        let addr = self.addr;
        let (code, h, mut mj) = request(addr, "/stream/cam0.mjpg");
        let boundary = h["content-type"].strip_prefix("multipart/x-mixed-replace; boundary=").unwrap().to_string();
        assert_eq!(code, 200);
        for _ in 0..2 {
            let part = mjpeg_part(&mut mj, &boundary);
            let pic = image::load_from_memory_with_format(&part, image::ImageFormat::Jpeg).unwrap();
            assert_eq!((pic.width(), pic.height()), (768, 432));
        }
        drop(mj);
        let (code, _, body) = get(addr, "/snapshot/nope.jpg");
        assert_eq!((code, String::from_utf8_lossy(&body).trim()), (404, "no camera nope.jpg; cameras: cam0"));
    }

    /// A request declaring a 100 GB body: answered 413 without a byte of it read, and the
    /// stage serves on, never restarted.
    fn a_huge_body_is_refused(&self) {
        let (addr, dir) = (self.addr, self.dir.as_path());
        let publish_pid = common::stage_pid(dir, "publish");
        let mut evil = TcpStream::connect(addr).unwrap();
        evil.write_all(b"GET /api/stats HTTP/1.1\r\nHost: localhost\r\nContent-Length: 99999999999\r\n\r\n").unwrap();
        assert_eq!(status_of(&mut evil), 413);
        let st = get_json(addr, "/api/stats");
        assert_eq!(
            (st["cameras"]["cam0"]["width"].as_u64(), st["server"]["refused_bodies"].as_u64()),
            (Some(768), Some(1)),
            "the view serves on: {st}"
        );
        assert_eq!(common::stage_pid(dir, "publish"), publish_pid, "the publish stage was not restarted");
        drop(evil);
    }

    /// Stops the run (SIGINT): it exits 0, and the event stream ends with the end line.
    fn stop(self) -> Ended {
        let View { mut run, stderr_reader, stdout_reader, sse_reader, .. } = self;
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(run.0.id() as i32), nix::sys::signal::Signal::SIGINT)
            .unwrap();
        let status = run.0.wait().unwrap();
        let err = stderr_reader.join().unwrap();
        assert!(status.success(), "{status}: {err}");
        let lines = stdout_reader.join().unwrap();
        let (sse, raw) = sse_reader.join().unwrap();
        Ended { err, lines, sse, raw }
    }
}

impl Ended {
    /// The event stream: the SSE preamble, then the socket's lines, the last the end line.
    fn the_events_are_the_socket_lines(&self) {
        let Ended { lines, sse, raw, .. } = self;
        assert!(raw.starts_with("retry: 2000\n\ndata: {"), "{}", &raw[..raw.len().min(300)]);
        assert!(sse.last().unwrap().starts_with("{\"type\":\"end\""), "the stream's last event is the end line");
        // The events are the socket's lines, in order, none missing: a run of --json's stdout.
        let body = &sse[..sse.len() - 1];
        let first = lines.iter().position(|l| *l == body[0]).expect("the first event is a line of the run");
        assert_eq!(&lines[first..first + body.len()], body, "the SSE lines are the socket's lines in order");
        assert!(body.iter().filter(|l| l.starts_with("{\"type\":\"frame\"")).count() >= 10);
    }

    /// The snapshot's boxes: each detection's left edge, half-way down, in its class colour.
    fn the_snapshot_has_its_boxes(&self, snap: &Snapshot) {
        let (lines, seq, img) = (&self.lines, snap.seq, &snap.img);
        let frame: Value = lines
            .iter()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|v| v["type"] == "frame" && v["seq"] == seq)
            .expect("the snapshot's frame line");
        let palette = [
            [0u8, 255, 0],
            [255, 0, 255],
            [0, 255, 255],
            [255, 255, 0],
            [255, 128, 0],
            [0, 128, 255],
            [255, 0, 0],
            [128, 0, 255],
        ];
        let dets = frame["detections"].as_array().unwrap();
        assert!(!dets.is_empty(), "the snapshot's frame has detections (--score-threshold 0.2): {frame}");
        let mut matched = 0;
        for d in dets {
            let b: Vec<f64> = d["box"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
            let want = palette[d["class_id"].as_u64().unwrap() as usize % 8];
            let px = img.get_pixel((b[0].round() as u32 + 1).min(767), ((b[1] + b[3]) / 2.0) as u32).0;
            let close = px.iter().zip(want).all(|(a, b)| a.abs_diff(b) <= 60);
            eprintln!("{} at {:?}: {px:?} (want {want:?})", d["label"], &b);
            matched += close as usize;
        }
        assert!(matched >= 1 && matched * 2 >= dets.len(), "most box edges have their class colour");
    }
}

#[test]
fn a_port_in_use_is_one_line_and_exit_code_2() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = taken.local_addr().unwrap().to_string();
    let out = zcpipe().args(["run", "--dry-run", "--http", &a]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(
        err,
        format!("zcpipe: error: --http {a}: address in use (another zcpipe or web server?): pick another port\n")
    );
    // The publish stage alone, at its start: the same line (its own tag).
    let dir = tempfile::tempdir().unwrap();
    let out = zcpipe()
        .args(["stage", "publish", "--instance", "http-taken", "--http", &a])
        .arg("--run-dir")
        .arg(dir.path().join("run"))
        .arg("--publish")
        .arg(dir.path().join("d.sock"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.ends_with(&format!(
            "zcpipe publish: error: --http {a}: address in use (another zcpipe or web server?): pick another port\n"
        )),
        "{err}"
    );
    assert!(!err.contains("panicked"));
}

#[test]
fn a_remote_address_needs_allow_remote_and_is_logged() {
    let out = zcpipe().args(["run", "--dry-run", "--http", "0.0.0.0:0"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("--http 0.0.0.0:0: not a loopback address")
            && err.contains("add --http-allow-remote if that is meant, or use 127.0.0.1:0"),
        "{err}"
    );
    let out = zcpipe().args(["run", "--dry-run", "--http", "0.0.0.0:0", "--http-allow-remote"]).output().unwrap();
    assert!(out.status.success());
    let plan = String::from_utf8_lossy(&out.stdout);
    assert!(
        plan.contains(
            " + web view http://0.0.0.0:0/ (pictures at most 5 a second per camera, reachable from other machines)"
        ),
        "{plan}"
    );
    for bad in [&["--http", "host.example:80"][..], &["--view-fps", "100"], &["--http-allow-remote"]] {
        let out = zcpipe().args(["run", "--dry-run"]).args(bad).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
    }
    // A run with it: the publish stage says the view is reachable from other machines.
    let dir = tempfile::tempdir().unwrap();
    let out = zcpipe_run(dir.path())
        .args([
            "--instance",
            "http-remote",
            "--source",
            "testsrc:320x240@30",
            "--infer",
            "none",
            "--frames",
            "5",
            "--no-print",
            "--http",
            "0.0.0.0:0",
            "--http-allow-remote",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let said: Vec<&str> =
        err.lines().filter(|l| l.contains("reachable from other machines (--http-allow-remote)")).collect();
    assert_eq!(said.len(), 1, "{err}");
    assert!(said[0].starts_with("zcpipe publish: warn: web view on http://0.0.0.0:"), "{err}");
}

/// The status code of the answer on `s` (0: none, the connection closed or reset).
pub(crate) fn status_of(s: &mut TcpStream) -> u16 {
    let mut head = [0u8; 12];
    match s.read_exact(&mut head) {
        Ok(()) => String::from_utf8_lossy(&head[9..12]).parse().unwrap_or(0),
        Err(_) => 0,
    }
}

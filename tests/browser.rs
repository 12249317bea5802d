//! The web view in a real browser (`make test-browser`; ignored by `make test`, it needs
//! Debian's `chromium`): a run on the bundled clip with `--http`, the page opened in
//! headless Chromium, its screenshot checked: the page loaded, the camera's picture is
//! there (a photo, not the dark "no pixels" canvas), and the boxes are drawn where the
//! detections say (the person colour sampled along a reported box's edges, with a tolerance
//! that survives JPEG and the page's scaling).
//!
//! Chromium as root needs `--no-sandbox`; a page with an endless MJPEG stream never
//! finishes loading, so `--timeout` ends the load after 4 s and the screenshot is taken
//! then. The page writes each picture's place (`data-rect`) into the DOM, read with
//! `--dump-dom` from a second run of the same size. The frame line whose boxes the
//! screenshot shows is one of the last ones read from the detections socket: the test
//! takes the best match.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use serde_json::Value;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn chromium() -> Option<String> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find(|c| Command::new(c).arg("--version").output().is_ok_and(|o| o.status.success()))
        .map(|c| c.to_string())
}

/// Headless Chromium on `url` at 1000x700 with `what` (`--screenshot=...` or
/// `--dump-dom`): its stdout.
fn chrome(bin: &str, url: &str, what: &str, profile: &Path) -> String {
    let out = Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--window-size=1000,700",
            "--timeout=4000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(what)
        .arg(url)
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "chromium {what} {url}: {}", out.status);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The value of attribute `attr` of the element with id `id` in `dom`.
fn attr(dom: &str, id: &str, attr: &str) -> Option<String> {
    let at = dom.find(&format!("id=\"{id}\""))?;
    let start = dom[..at].rfind('<')?;
    let end = at + dom[at..].find('>')?;
    let tag = &dom[start..end];
    let k = tag.find(&format!("{attr}=\""))? + attr.len() + 2;
    Some(tag[k..k + tag[k..].find('"')?].replace("&quot;", "\""))
}

#[test]
#[ignore = "needs chromium: make test-browser"]
fn the_web_view_shows_the_camera_with_its_boxes_in_a_real_browser() {
    let bin = chromium().expect("chromium is not installed: make setup installs it (Debian's chromium package)");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut run = zcpipe_run(dir.path())
        .args([
            "--instance",
            "browser",
            "--no-print",
            "--http",
            &format!("127.0.0.1:{port}"),
            "--view-fps",
            "10",
            "--frames",
            "3000",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Every frame line, by seq, from the detections socket.
    let lines: Arc<Mutex<BTreeMap<u64, Value>>> = Arc::default();
    let sock = dir.path().join("detections.sock");
    assert!(wait_for(Duration::from_secs(120), || sock.exists()), "the detections socket appears");
    let reader = {
        let (lines, sock) = (lines.clone(), sock.clone());
        std::thread::spawn(move || {
            let s = UnixStream::connect(&sock).unwrap();
            for l in BufReader::new(s).lines() {
                let Ok(l) = l else { break };
                let v: Value = serde_json::from_str(&l).unwrap();
                if v["type"] == "end" {
                    break;
                }
                if v["type"] == "frame" {
                    lines.lock().unwrap().insert(v["seq"].as_u64().unwrap(), v);
                }
            }
        })
    };
    // Until the clip shows a person (it starts with one in view).
    assert!(
        wait_for(Duration::from_secs(120), || lines
            .lock()
            .unwrap()
            .values()
            .rev()
            .take(5)
            .filter(|f| f["detections"].as_array().is_some_and(|d| d.iter().any(|d| d["label"] == "person")))
            .count()
            >= 3),
        "frames with a person detected"
    );
    // Pixels flow to the view: a snapshot has the camera's pixels under its boxes (the tap
    // joins at the first picture wanted, as when a browser opens the page).
    assert!(
        wait_for(Duration::from_secs(30), || {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            std::io::Write::write_all(&mut s, b"GET /snapshot/cam0.jpg HTTP/1.0\r\n\r\n").unwrap();
            let mut head = vec![];
            std::io::Read::read_to_end(&mut s, &mut head).unwrap();
            String::from_utf8_lossy(&head[..head.len().min(2048)]).to_ascii_lowercase().contains("x-zcpipe-pixel-seq")
        }),
        "the web view gets the camera's pixels"
    );
    let url = format!("http://127.0.0.1:{port}/");
    let profile = dir.path().join("chromium");
    let dom = chrome(&bin, &url, "--dump-dom", &profile);
    assert!(dom.contains("zcpipe live view"), "the page loaded: {}", &dom[..dom.len().min(400)]);
    let shot = dir.path().join("web-view.png");
    chrome(&bin, &url, &format!("--screenshot={}", shot.display()), &profile);
    let img = image::open(&shot).unwrap().to_rgb8();
    assert_eq!(img.dimensions(), (1000, 700));
    // Where the camera's picture is on the page (the page's own getBoundingClientRect).
    let rect: Vec<f64> =
        serde_json::from_str(&attr(&dom, "img-cam0", "data-rect").expect("the picture's data-rect")).unwrap();
    let (x0, y0, w, h) = (rect[0], rect[1], rect[2], rect[3]);
    assert!(w > 100.0 && h > 50.0, "the picture is on the page: {rect:?}");
    // The camera's picture: a photo's spread of values, not the dark canvas of no pixels.
    let px = |x: f64, y: f64| {
        *img.get_pixel((x0 + x).round().clamp(0.0, 999.0) as u32, (y0 + y).round().clamp(0.0, 699.0) as u32)
    };
    let mut lum = vec![];
    for j in 0..20 {
        for i in 0..20 {
            let p = px(w * (i as f64 + 0.5) / 20.0, h * (j as f64 + 0.5) / 20.0);
            lum.push(p[0] as f64 * 0.299 + p[1] as f64 * 0.587 + p[2] as f64 * 0.114);
        }
    }
    let mean = lum.iter().sum::<f64>() / lum.len() as f64;
    let sd = (lum.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / lum.len() as f64).sqrt();
    assert!(sd > 20.0 && mean > 40.0, "the camera's picture, not a blank canvas: mean {mean:.0}, sd {sd:.0}");
    // The boxes: a recent frame line's person boxes' edges are green in the screenshot.
    let frames = lines.lock().unwrap().clone();
    let (best, moved) = check_boxes(&img, (x0, y0, w, h), &frames);
    eprintln!(
        "browser: picture at {rect:?}; frame {} matched {:.2} (moved: {moved:.2}); luminance mean {mean:.0} sd {sd:.0}",
        best.1, best.0
    );
    std::fs::create_dir_all(root().join("target/browser")).unwrap();
    std::fs::copy(&shot, root().join("target/browser/web-view.png")).unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(run.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let st = run.wait().unwrap();
    assert!(st.success(), "{st}");
    reader.join().unwrap();
    assert_no_orphans(dir.path());
}

/// The person boxes of the recent frame line that matches the screenshot `img` best, whose
/// camera picture is at `(x0, y0, w, h)`, have green edges (the person colour, 0,255,0),
/// and the same boxes moved beside themselves do not. Returns the best (share, seq) and the
/// moved boxes' share.
fn check_boxes(
    img: &image::RgbImage,
    (x0, y0, w, h): (f64, f64, f64, f64),
    frames: &BTreeMap<u64, Value>,
) -> ((f64, u64), f64) {
    let px = |x: f64, y: f64| {
        *img.get_pixel((x0 + x).round().clamp(0.0, 999.0) as u32, (y0 + y).round().clamp(0.0, 699.0) as u32)
    };
    // The boxes: a recent frame line's person boxes' edges are green (the person colour,
    // 0,255,0) in the screenshot, scaled to the picture.
    let green = |p: image::Rgb<u8>| p[1] > 170 && p[0] < 110 && p[2] < 110;
    let (fw, fh) = {
        let f = frames.values().next().unwrap();
        (f["width"].as_f64().unwrap(), f["height"].as_f64().unwrap())
    };
    let (sx, sy) = (w / fw, h / fh);
    // The share of points along `boxes`' edges (each moved right by `shift` of its width)
    // that are green within 2 px (3-px lines, JPEG, the page's scaling).
    let score = |boxes: &[[f64; 4]], shift: f64| {
        let (mut hit, mut all) = (0u32, 0u32);
        for b in boxes {
            let dx = (b[2] - b[0]) * shift;
            let b = [b[0] + dx, b[1], b[2] + dx, b[3]];
            for k in 0..40 {
                let t = (k as f64 + 0.5) / 40.0;
                let (x, y) = (b[0] + (b[2] - b[0]) * t, b[1] + (b[3] - b[1]) * t);
                for (ex, ey) in [(x, b[1]), (x, b[3]), (b[0], y), (b[2], y)] {
                    all += 1;
                    let near = (-2..=2)
                        .any(|d| green(px(ex * sx + d as f64, ey * sy)) || green(px(ex * sx, ey * sy + d as f64)));
                    hit += near as u32;
                }
            }
        }
        hit as f64 / all.max(1) as f64
    };
    // The best-matching recent frame line (the screenshot shows one of the last frames).
    let mut best = (0.0, 0u64, vec![]);
    for (seq, f) in frames.iter().rev().take(200) {
        let boxes: Vec<[f64; 4]> = f["detections"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["label"] == "person")
            .map(|d| {
                let b = d["box"].as_array().unwrap();
                [b[0].as_f64().unwrap(), b[1].as_f64().unwrap(), b[2].as_f64().unwrap(), b[3].as_f64().unwrap()]
            })
            .collect();
        let share = score(&boxes, 0.0);
        if !boxes.is_empty() && share > best.0 {
            best = (share, *seq, boxes);
        }
    }
    assert!(
        best.0 > 0.8,
        "the person boxes of a recent frame line are drawn where they are reported: best {:.2} (frame {})",
        best.0,
        best.1
    );
    // The colour test tells drawn boxes from the picture: the same boxes moved left by one
    // and a half widths (clear of the box and of its tag, which runs right from its corner)
    // match far worse.
    let moved = score(&best.2, -1.5);
    assert!(
        moved < 0.2,
        "boxes moved beside themselves still match {moved:.2}: the colour test finds green where no box is"
    );
    ((best.0, best.1), moved)
}

/// `zcpipe compare`'s chart in a real browser (`make test-browser`): every text of the SVG
/// (captions, axis names and ticks, the stages under their bars, the legend) is there, none
/// is empty, and no two overlap as Chromium lays them out.
#[test]
#[ignore = "needs chromium: make test-browser"]
fn the_compare_chart_reads_in_a_real_browser() {
    let bin = chromium().expect("chromium is not installed: make setup-test installs it (Debian's chromium package)");
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("chart.svg");
    compare_one_round(dir.path(), "320x240@30", 30, &svg);
    // The chart inline in a page whose script writes each text's box into the DOM.
    let script = "const out = []; for (const t of document.querySelectorAll('svg text')) { \
                  const r = t.getBoundingClientRect(); out.push([t.textContent.trim(), r.left, r.top, r.width, r.height]); } \
                  document.getElementById('boxes').textContent = JSON.stringify(out);";
    let page = dir.path().join("chart.html");
    let html = format!(
        "<!doctype html><html><body style=\"margin:0\">{}<pre id=\"boxes\"></pre><script>{script}</script></body></html>",
        std::fs::read_to_string(&svg).unwrap()
    );
    std::fs::write(&page, html).unwrap();
    let dom = chrome(&bin, &format!("file://{}", page.display()), "--dump-dom", &dir.path().join("chromium"));
    let start = dom.find("<pre id=\"boxes\">").expect("the page's script ran") + "<pre id=\"boxes\">".len();
    let json = dom[start..start + dom[start..].find("</pre>").unwrap()].replace("&quot;", "\"").replace("&amp;", "&");
    let texts: Vec<(String, f64, f64, f64, f64)> = serde_json::from_str(&json).unwrap();
    let words: Vec<&str> = texts.iter().map(|t| t.0.as_str()).collect();
    for want in
        ["capture", "scale", "infer", "publish", "total", "p50", "p99", "zero-copy", "copy mode", "latency (µs)"]
    {
        assert!(words.contains(&want), "no {want:?} among the chart's texts: {words:?}");
    }
    for (t, _, _, w, h) in &texts {
        assert!(!t.is_empty() && *w > 0.0 && *h > 0.0, "an empty or invisible text in the chart: {texts:?}");
    }
    for (i, a) in texts.iter().enumerate() {
        for b in &texts[i + 1..] {
            let dx = (a.1 + a.3).min(b.1 + b.3) - a.1.max(b.1);
            let dy = (a.2 + a.4).min(b.2 + b.4) - a.2.max(b.2);
            assert!(dx <= 1.0 || dy <= 1.0, "{:?} and {:?} overlap ({dx:.1} x {dy:.1} px)", a.0, b.0);
        }
    }
    eprintln!("EVIDENCE compare chart: {} texts, none empty, none overlapping: {words:?}", texts.len());
}

/// `GET path` with a `Range` header (when given) from the web view at `port`: status,
/// headers (names lower-case), body.
fn get_range(port: u16, path: &str, range: Option<&str>) -> (u16, BTreeMap<String, String>, Vec<u8>) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let range = range.map(|r| format!("Range: {r}\r\n")).unwrap_or_default();
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n{range}\r\n").unwrap();
    let mut all = vec![];
    s.read_to_end(&mut all).unwrap();
    let split = all.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head");
    let head = String::from_utf8_lossy(&all[..split]).into_owned();
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers, all[split + 4..].to_vec())
}

/// A recorded clip in the web view: listed at `/api/clips`, served in byte ranges, and
/// played by a real browser's `<video>` from the web view (its time advances, its picture
/// has the clip's size).
#[test]
#[ignore = "needs chromium: make test-browser"]
fn a_recorded_clip_plays_from_the_web_view_in_a_real_browser() {
    let bin = chromium().expect("chromium is not installed: make setup-test installs it (Debian's chromium package)");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let clips = dir.path().join("clips");
    let run = zcpipe_run(dir.path())
        .args(["--instance", "browser-clips", "--no-print", "--http", &format!("127.0.0.1:{port}"), "--frames", "600"])
        .args(["--record-dir", clips.to_str().unwrap(), "--record-pre", "1", "--record-post", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _run = Reap(run);
    // Person 1 leaves the bundled clip after 19.5 s: their clip closes a second later.
    let mut clip = Value::Null;
    let listed = wait_for(Duration::from_secs(120), || {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            return false;
        }
        let (code, _, body) = get_range(port, "/api/clips", None);
        let list: Value = if code == 200 { serde_json::from_slice(&body).unwrap_or_default() } else { Value::Null };
        if let Some(c) = list.as_array().and_then(|a| a.iter().find(|c| c["state"] == "complete")) {
            clip = c.clone();
        }
        !clip.is_null()
    });
    assert!(listed, "no complete clip listed at /api/clips");
    let url = clip["url"].as_str().unwrap().to_string();
    let thumb = clip["thumbnail"].as_str().unwrap().to_string();
    assert_eq!((clip["camera"].as_str(), clip["labels"][0].as_str()), (Some("cam0"), Some("person")), "{clip}");
    let (code, _, page) = get_range(port, "/", None);
    let page = String::from_utf8_lossy(&page);
    assert!(code == 200 && page.contains("id=\"clips-section\"") && page.contains("const CLIPS = true;"), "{page}");
    // A byte range: 206 with its Content-Range; the file starts with its ftyp box.
    let (code, h, body) = get_range(port, &url, Some("bytes=0-99"));
    let len = clip["bytes"].as_u64().unwrap();
    assert_eq!((code, h.get("content-range").cloned(), body.len()), (206, Some(format!("bytes 0-99/{len}")), 100));
    assert_eq!(&body[4..8], b"ftyp");
    let (code, h, _) = get_range(port, &url, Some(&format!("bytes={len}-")));
    assert_eq!((code, h.get("content-range").cloned()), (416, Some(format!("bytes */{len}"))));
    // The browser plays it from the web view (virtual time: the 2.5 s pass at once).
    let html = format!(
        "<!doctype html><html><body><video id=\"v\" src=\"http://127.0.0.1:{port}{url}\" muted playsinline></video><img id=\"i\" src=\"http://127.0.0.1:{port}{thumb}\"><pre id=\"out\">none</pre>\
         <script>const v = document.getElementById('v'); v.play().catch(e => document.getElementById('out').textContent = 'play: ' + e);\
         setTimeout(() => document.getElementById('out').textContent = JSON.stringify({{t: v.currentTime, ready: v.readyState, w: v.videoWidth, h: v.videoHeight, error: v.error && v.error.code, tw: document.getElementById('i').naturalWidth, th: document.getElementById('i').naturalHeight}}), 2500);</script></body></html>"
    );
    let file = dir.path().join("play.html");
    std::fs::write(&file, html).unwrap();
    let out = Command::new(&bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--autoplay-policy=no-user-gesture-required",
        ])
        .args(["--virtual-time-budget=6000", "--dump-dom"])
        .arg(format!("--user-data-dir={}", dir.path().join("chromium").display()))
        .arg(format!("file://{}", file.display()))
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout);
    let start = dom.find("<pre id=\"out\">").expect("the page loaded") + "<pre id=\"out\">".len();
    let text = dom[start..start + dom[start..].find("</pre>").unwrap()].replace("&quot;", "\"");
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("the video did not report: {text}"));
    assert!(v["t"].as_f64().unwrap() >= 1.0, "the video's time advanced: {v}");
    assert_eq!((v["w"].as_u64(), v["h"].as_u64(), &v["error"]), (Some(768), Some(432), &Value::Null), "{v}");
    // Its thumbnail, the picture at the event, 320 wide with the clip's aspect.
    assert_eq!((v["tw"].as_u64(), v["th"].as_u64()), (Some(320), Some(180)), "{v}");
    eprintln!(
        "EVIDENCE clip in a real browser: {url} ({len} bytes) played to {} s, {}x{}; thumbnail {thumb} {}x{}",
        v["t"], v["w"], v["h"], v["tw"], v["th"]
    );
}

//! The web view output's own tests (the server under load: tests/outputs).

use super::*;

#[test]
fn a_slow_event_client_loses_its_oldest_lines_counted() {
    let http = HttpConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        allow_remote: false,
        view_fps: 5.0,
        service: None,
        max_connections: DEFAULT_MAX_CONNECTIONS,
        clips: None,
        token: None,
    };
    let cfg = PublishConfig {
        socket: "/nonexistent/d.sock".into(),
        print: crate::PrintMode::None,
        socket_group: None,
        cameras: vec!["cam0".into()],
        track: crate::TrackConfig { zones: vec![vec![]], ..Default::default() },
        http: Some(http.clone()),
        snapshots: None,
        mqtt: None,
        clips: None,
    };
    let mut out =
        HttpOutput::start(&cfg, &http, Box::new(crate::view::NoPixels), std::path::Path::new("/nonexistent")).unwrap();
    assert!(out.addr().port() != 0, "the port chosen is known");
    // A client that takes nothing: its queue only.
    let slow = Arc::new(SseClient { queue: Mutex::new(VecDeque::new()), ready: Condvar::new() });
    lock(&out.shared.sse).push(slow.clone());
    for seq in 0..SSE_QUEUE as u64 + 8 {
        out.line(&stats::tests_support::frame("cam0", seq, 1000.0));
    }
    let q = lock(&slow.queue);
    assert_eq!((q.len(), out.shared.sse_dropped.load(Ordering::Relaxed)), (SSE_QUEUE, 8));
    assert!(q[0].starts_with("{\"type\":\"frame\",\"camera\":\"cam0\",\"seq\":8,"), "the oldest went: {}", q[0]);
    assert!(!q[0].ends_with('\n'), "a line without its newline (the event frames it)");
    drop(q);
    assert_eq!(out.counters().sse_dropped, 8);
    assert_eq!(lock(&out.shared.stats).cameras[0].frames, SSE_QUEUE as u64 + 8, "every line counted");
    out.close(&EndJson { end: true, frames: 520, reason: "test".into() });
    assert!(lock(&slow.queue).back().unwrap().starts_with("{\"type\":\"end\""), "the end line is the last");
}

#[test]
fn sse_framing() {
    assert_eq!(sse_event("{\"type\":\"frame\"}"), "data: {\"type\":\"frame\"}\n\n");
    assert_eq!(sse_event("a\nb\r\nc"), "data: a\ndata: b\ndata: c\n\n", "each line its own data line");
}

#[test]
fn a_remote_address_needs_the_flag_and_a_taken_port_is_named() {
    let cfg = |a: &str, allow| HttpConfig {
        addr: a.parse().unwrap(),
        allow_remote: allow,
        view_fps: 5.0,
        service: None,
        max_connections: DEFAULT_MAX_CONNECTIONS,
        clips: None,
        token: None,
    };
    let e = check_remote(&cfg("0.0.0.0:8080", false)).unwrap_err().to_string();
    assert!(e.starts_with("--http 0.0.0.0:8080: not a loopback address") && e.contains("--http-allow-remote"), "{e}");
    assert!(check_remote(&cfg("0.0.0.0:8080", true)).is_ok());
    assert!(check_remote(&cfg("[::1]:8080", false)).is_ok());
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let e = bind(&cfg(&taken.local_addr().unwrap().to_string(), false)).unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "--http {}: address in use (another zcpipe or web server?): pick another port",
            taken.local_addr().unwrap()
        )
    );
}

#[test]
fn the_page_has_an_escaped_figure_per_camera() {
    let p = page(&["cam0".into(), "a<b".into()], 5.0, false);
    assert!(p.contains("<img id=\"img-cam0\" src=\"/stream/cam0.mjpg\""), "{p}");
    assert!(p.contains("data-camera=\"a&lt;b\"") && !p.contains("a<b"));
    assert!(!p.contains("<!--CAMERAS-->") && !p.contains("__VIEW_FPS__"));
}

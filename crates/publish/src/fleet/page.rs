//! The fleet view's HTTP side: the page (`/`), `/api/fleet` and `/metrics`, served by hyper
//! on a one-thread tokio runtime of its own (the web view's stack), bounded: at most
//! [`MAX_CONNECTIONS`] at once (more wait in the kernel's backlog), a request head within
//! [`HEAD_TIMEOUT`] in at most 16 KiB, one request per connection, the answer taken within
//! [`WRITE_TIMEOUT`]; no request body is read. And the Prometheus scrape configuration of
//! the boards ([`scrape_config`]).

use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::Semaphore;

use super::state::{Board, Fleet};
use super::{lock, Shared};

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 64;
/// How long a client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a client may take to read the answer.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Events shown on the page.
const PAGE_EVENTS: usize = 50;

type Body = crate::http::ViewBody;

/// Serves `shared` on `listener` from a runtime of its own (dropping it ends the server).
pub(crate) fn serve(shared: Shared, listener: std::net::TcpListener) -> std::io::Result<tokio::runtime::Runtime> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("fleet-http")
        .enable_io()
        .enable_time()
        .build()?;
    listener.set_nonblocking(true)?;
    let listener = {
        let _guard = rt.enter();
        tokio::net::TcpListener::from_std(listener)?
    };
    rt.spawn(async move {
        let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        loop {
            let Ok(permit) = permits.clone().acquire_owned().await else { return };
            let tcp = match listener.accept().await {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    log::warn!("accepting a connection: {e}; going on");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let s = shared.clone();
            tokio::spawn(async move {
                let service = service_fn(move |rq| {
                    let s = s.clone();
                    async move { Ok::<_, Infallible>(answer(&s, &rq)) }
                });
                let conn = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEAD_TIMEOUT)
                    .max_buf_size(16 * 1024)
                    .keep_alive(false)
                    .serve_connection(TokioIo::new(tcp), service);
                let _ = tokio::time::timeout(HEAD_TIMEOUT + WRITE_TIMEOUT, conn).await;
                drop(permit);
            });
        }
    });
    Ok(rt)
}

fn reply(status: u16, kind: &str, body: Vec<u8>) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", kind)
        .header("cache-control", "no-store")
        .body(Body::Whole(Some(Bytes::from(body))))
        .unwrap_or_else(|_| Response::new(Body::Whole(None)))
}

fn answer(s: &Shared, rq: &Request<Incoming>) -> Response<Body> {
    if rq.method() != Method::GET && rq.method() != Method::HEAD {
        return reply(405, "text/plain", b"only GET\n".to_vec());
    }
    let now = Instant::now();
    let f = lock(s);
    match rq.uri().path() {
        "/" | "/index.html" => reply(200, "text/html; charset=utf-8", html(&f, now).into_bytes()),
        "/api/fleet" => reply(200, "application/json", api(&f, now).to_string().into_bytes()),
        "/metrics" => reply(200, "text/plain; version=0.0.4", metrics(&f, now).into_bytes()),
        _ => reply(404, "text/plain", b"not here: try /, /api/fleet or /metrics\n".to_vec()),
    }
}

/// `/api/fleet`: each board (its status, `online`, counters) and the recent events, newest
/// first.
pub fn api(f: &Fleet, now: Instant) -> serde_json::Value {
    let boards: Vec<serde_json::Value> = f
        .boards()
        .values()
        .map(|b| {
            let mut v = serde_json::to_value(b).unwrap_or_default();
            if let Some(o) = v.as_object_mut() {
                o.insert("online".into(), b.online(now).into());
            }
            v
        })
        .collect();
    let events: Vec<&crate::mqtt::fleet::EventMsg> = f.recent().iter().rev().collect();
    serde_json::json!({
        "boards": boards,
        "online": f.boards().values().filter(|b| b.online(now)).count(),
        "events": events,
        "rejected": f.rejected,
        "clashes": f.clashes,
    })
}

/// Text for HTML.
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '&' => o.push_str("&amp;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// A board's web view address, only when it is http(s) (the page links to it).
fn web_of(b: &Board) -> Option<&str> {
    let w = b.status.as_ref()?.web.as_deref()?;
    (w.starts_with("http://") || w.starts_with("https://")).then_some(w.trim_end_matches('/'))
}

fn board_html(o: &mut String, b: &Board, now: Instant) {
    let online = b.online(now);
    let _ = write!(
        o,
        "<section class=\"board\" id=\"board-{id}\" data-board=\"{id}\" data-online=\"{online}\"><h2>{id} <span class=\"{cls}\">{word}</span>{clash}</h2>",
        id = esc(&b.id),
        cls = if online { "on" } else { "off" },
        word = if online { "online" } else { "offline" },
        clash = if b.clash { " <span class=\"off\">id used by two boards</span>" } else { "" },
    );
    if let Some(w) = web_of(b) {
        let _ = write!(o, "<p><a href=\"{w}/\">its web view</a></p>", w = esc(w));
    }
    let _ = write!(o, "<p>{} events, {} copies dropped", b.events, b.duplicates);
    if let Some(s) = &b.status {
        let npu: Vec<String> = s.npu_busy_pct.iter().map(|p| format!("{p:.0}%")).collect();
        let _ = write!(
            o,
            "; zcpipe {}, up {} s, NPU {}, MQTT {} sent / {} dropped",
            esc(&s.version),
            s.uptime_s,
            if npu.is_empty() { "-".into() } else { npu.join(" ") },
            s.mqtt.sent,
            s.mqtt.dropped
        );
    }
    o.push_str(
        "</p><table><tr><th>camera</th><th>state</th><th>fps</th><th>infer ms</th><th>events</th><th>now</th></tr>",
    );
    for (name, c) in b.status.iter().flat_map(|s| &s.cameras) {
        let counts: Vec<String> =
            c.counts.iter().filter(|(_, n)| **n > 0).map(|(l, n)| format!("{} {n}", esc(l))).collect();
        let state = match c.state {
            Some(crate::mqtt::fleet::CameraState::Streaming) => "streaming",
            Some(crate::mqtt::fleet::CameraState::Quiet) => "quiet",
            None => "-",
        };
        let _ = write!(
            o,
            "<tr data-camera=\"{n}\"><td>{n}</td><td>{state}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td><td>{}</td></tr>",
            c.fps,
            c.infer_ms,
            c.events,
            counts.join(", "),
            n = esc(name)
        );
    }
    o.push_str("</table></section>\n");
}

/// The page: every board, then the latest events (refreshes itself every 2 s).
pub fn html(f: &Fleet, now: Instant) -> String {
    let mut o = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"2\"><title>zcpipe fleet</title><style>body{font-family:sans-serif;margin:1em}.board{border:1px solid #999;padding:.5em;margin:.5em 0}.on{color:#080}.off{color:#b00}table{border-collapse:collapse}td,th{padding:0 .6em;text-align:left}</style></head><body>",
    );
    let online = f.boards().values().filter(|b| b.online(now)).count();
    let _ = writeln!(
        o,
        "<h1>zcpipe fleet: <span id=\"online\">{online}</span> of <span id=\"boards\">{}</span> boards online</h1>",
        f.boards().len()
    );
    for b in f.boards().values() {
        board_html(&mut o, b, now);
    }
    o.push_str("<h2>Latest events</h2><table id=\"events\"><tr><th>time (UTC)</th><th>board</th><th>camera</th><th>event</th><th>label</th><th>track</th><th></th></tr>");
    for e in f.recent().iter().rev().take(PAGE_EVENTS) {
        let web = f.boards().get(&e.board).and_then(web_of);
        let link = match (web, &e.url) {
            (Some(w), Some(u)) if u.starts_with('/') => {
                // A clip: its thumbnail (its picture at the event) when the recorder made one.
                let thumb = match &e.thumbnail {
                    Some(t) if t.starts_with('/') => {
                        format!("<img src=\"{}{}\" height=\"48\" alt=\"\"> ", esc(w), esc(t))
                    }
                    _ => String::new(),
                };
                format!("{thumb}<a href=\"{}{}\">clip</a>", esc(w), esc(u))
            }
            (Some(w), _) => format!("<a href=\"{}/snapshot/{}.jpg\">snapshot</a>", esc(w), esc(&e.camera)),
            _ => String::new(),
        };
        let t = jiff::Timestamp::from_millisecond(e.time_ms as i64)
            .map(|t| t.strftime("%H:%M:%S").to_string())
            .unwrap_or_default();
        let _ = write!(
            o,
            "<tr class=\"event\"><td>{t}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{link}</td></tr>",
            esc(&e.board),
            esc(&e.camera),
            esc(&e.event),
            esc(e.label.as_deref().or(e.zone.as_deref()).unwrap_or("")),
            e.track_id.map(|t| t.to_string()).unwrap_or_default(),
        );
    }
    o.push_str("</table></body></html>\n");
    o
}

/// A label value for Prometheus' text format.
fn lv(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// A metric family's `# HELP` and `# TYPE` lines.
fn family(o: &mut String, name: &str, kind: &str, help: &str) {
    let _ = write!(o, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
}

/// `/metrics`: the fleet's numbers in Prometheus' text format.
pub fn metrics(f: &Fleet, now: Instant) -> String {
    let mut o = String::new();
    family(&mut o, "zcpipe_fleet_boards", "gauge", "Boards the fleet view knows.");
    let _ = writeln!(o, "zcpipe_fleet_boards {}", f.boards().len());
    family(&mut o, "zcpipe_fleet_board_online", "gauge", "1 while the board is online.");
    for b in f.boards().values() {
        let _ = writeln!(o, "zcpipe_fleet_board_online{{board=\"{}\"}} {}", lv(&b.id), u8::from(b.online(now)));
    }
    family(&mut o, "zcpipe_fleet_events_total", "counter", "Events taken, each id once.");
    for b in f.boards().values() {
        let _ = writeln!(o, "zcpipe_fleet_events_total{{board=\"{}\"}} {}", lv(&b.id), b.events);
    }
    family(
        &mut o,
        "zcpipe_fleet_duplicates_total",
        "counter",
        "Copies of events already taken (QoS 1 redelivery), dropped.",
    );
    for b in f.boards().values() {
        let _ = writeln!(o, "zcpipe_fleet_duplicates_total{{board=\"{}\"}} {}", lv(&b.id), b.duplicates);
    }
    family(&mut o, "zcpipe_fleet_camera_fps", "gauge", "A camera's frames per second, from its board's status.");
    for b in f.boards().values() {
        for (c, s) in b.status.iter().flat_map(|s| &s.cameras) {
            let _ = writeln!(o, "zcpipe_fleet_camera_fps{{board=\"{}\",camera=\"{}\"}} {}", lv(&b.id), lv(c), s.fps);
        }
    }
    family(
        &mut o,
        "zcpipe_fleet_camera_objects",
        "gauge",
        "A camera's objects of a label now, from its board's status.",
    );
    for b in f.boards().values() {
        for (c, s) in b.status.iter().flat_map(|s| &s.cameras) {
            for (l, n) in &s.counts {
                let _ = writeln!(
                    o,
                    "zcpipe_fleet_camera_objects{{board=\"{}\",camera=\"{}\",label=\"{}\"}} {n}",
                    lv(&b.id),
                    lv(c),
                    lv(l)
                );
            }
        }
    }
    family(
        &mut o,
        "zcpipe_fleet_board_mqtt_dropped",
        "gauge",
        "Messages a board's MQTT bridge dropped (its queue full), from its status.",
    );
    for b in f.boards().values() {
        if let Some(s) = &b.status {
            let _ = writeln!(o, "zcpipe_fleet_board_mqtt_dropped{{board=\"{}\"}} {}", lv(&b.id), s.mqtt.dropped);
        }
    }
    family(&mut o, "zcpipe_fleet_rejected_total", "counter", "Messages not taken, by reason.");
    for (r, n) in &f.rejected {
        let _ = writeln!(o, "zcpipe_fleet_rejected_total{{reason=\"{r}\"}} {n}");
    }
    family(&mut o, "zcpipe_fleet_id_clashes_total", "counter", "Board ids found used by two boards.");
    let _ = writeln!(o, "zcpipe_fleet_id_clashes_total {}", f.clashes);
    o
}

/// A Prometheus scrape configuration (YAML) with one target per board whose status names
/// its web view (`--board-url`), labelled with the board's id.
pub fn scrape_config(f: &Fleet) -> String {
    let mut o = String::from("# Written by zcpipe fleet --prometheus-config: each board's web view /metrics.\nscrape_configs:\n  - job_name: zcpipe\n    metrics_path: /metrics\n    static_configs:\n");
    let mut none = vec![];
    for b in f.boards().values() {
        let target = web_of(b).and_then(|w| {
            let rest = w.split_once("://")?.1;
            Some(rest.split('/').next()?.to_string())
        });
        match target {
            Some(t) => {
                let _ = write!(
                    o,
                    "      - targets: [\"{}\"]\n        labels:\n          board: \"{}\"\n",
                    lv(&t),
                    lv(&b.id)
                );
            }
            None => none.push(b.id.clone()),
        }
    }
    if !none.is_empty() {
        let _ = writeln!(o, "# Boards without --board-url (no web view to scrape): {}", none.join(", "));
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::state::Limits;
    use crate::mqtt::fleet::{BoardStatus, CameraState, CameraStatus, WIRE_VERSION};

    fn fleet(now: Instant) -> Fleet {
        let mut f = Fleet::new(Limits::default());
        for (b, web) in [("b1", Some("http://10.0.0.5:8080/")), ("b<2>", None), ("b3", Some("javascript:x"))] {
            let cam = CameraStatus {
                state: Some(CameraState::Streaming),
                fps: 12.5,
                counts: [("person".to_string(), 2), ("dog".to_string(), 0)].into(),
                ..Default::default()
            };
            let s = BoardStatus {
                v: WIRE_VERSION,
                board: b.into(),
                session: "s".into(),
                every_s: 10,
                cameras: [("door".to_string(), cam)].into(),
                web: web.map(Into::into),
                ..Default::default()
            };
            // b<2> is not a board id: refused.
            let _ = f.status(&format!("zcpipe/{b}/status"), Some(b), &serde_json::to_vec(&s).unwrap(), now);
        }
        let e = serde_json::json!({"v": 1, "event_id": "b1/door/4/new/1000", "board": "b1", "camera": "door",
            "event": "new", "time_ms": 1000, "track_id": 4, "label": "person"});
        f.event("zcpipe/b1/door/events", Some("b1"), e.to_string().as_bytes()).unwrap();
        f.event("zcpipe/b1/door/events", Some("b1"), e.to_string().as_bytes()).unwrap();
        let clip = serde_json::json!({"v": 1, "event_id": "b1/door/clip/7/900", "board": "b1", "camera": "door",
            "event": "clip", "time_ms": 900, "id": 7, "url": "/clips/7.mp4", "thumbnail": "/clips/7.jpg"});
        f.event("zcpipe/b1/door/events", Some("b1"), clip.to_string().as_bytes()).unwrap();
        f
    }

    #[test]
    fn the_page_the_api_and_metrics_show_each_board() {
        let now = Instant::now();
        let f = fleet(now);
        let h = html(&f, now);
        assert!(h.contains("<span id=\"online\">2</span> of <span id=\"boards\">2</span> boards online"), "{h}");
        assert!(h.contains("data-board=\"b1\" data-online=\"true\""), "{h}");
        assert!(h.contains("<a href=\"http://10.0.0.5:8080/\">its web view</a>"), "{h}");
        assert!(!h.contains("javascript:"), "only http(s) links: {h}");
        assert!(h.contains("<td>clip</td><td></td><td></td><td><img src=\"http://10.0.0.5:8080/clips/7.jpg\" height=\"48\" alt=\"\"> <a href=\"http://10.0.0.5:8080/clips/7.mp4\">clip</a>"), "{h}");
        assert!(h.contains("<td>door</td><td>streaming</td><td>12.5</td>") && h.contains("<td>person 2</td>"), "{h}");
        assert!(h.contains("<td>b1</td><td>door</td><td>new</td><td>person</td><td>4</td><td><a href=\"http://10.0.0.5:8080/snapshot/door.jpg\">snapshot</a>"), "{h}");
        let a = api(&f, now + Duration::from_secs(31));
        assert_eq!(
            (a["online"].as_u64(), a["boards"][0]["online"].as_bool()),
            (Some(0), Some(false)),
            "stale after 3 periods"
        );
        assert_eq!((a["boards"][0]["events"].as_u64(), a["boards"][0]["duplicates"].as_u64()), (Some(2), Some(1)));
        assert_eq!(a["rejected"]["wrong_board"].as_u64(), Some(1));
        let m = metrics(&f, now);
        for line in [
            "zcpipe_fleet_boards 2",
            "zcpipe_fleet_board_online{board=\"b1\"} 1",
            "zcpipe_fleet_events_total{board=\"b1\"} 2",
            "zcpipe_fleet_duplicates_total{board=\"b1\"} 1",
            "zcpipe_fleet_camera_fps{board=\"b1\",camera=\"door\"} 12.5",
            "zcpipe_fleet_camera_objects{board=\"b1\",camera=\"door\",label=\"person\"} 2",
            "zcpipe_fleet_rejected_total{reason=\"wrong_board\"} 1",
        ] {
            assert!(m.lines().any(|l| l == line), "{line}: {m}");
        }
        let y = scrape_config(&f);
        assert!(y.contains("      - targets: [\"10.0.0.5:8080\"]\n        labels:\n          board: \"b1\"\n"), "{y}");
        assert!(y.contains("# Boards without --board-url (no web view to scrape): b3"), "{y}");
    }
}

//! The live web view (`--http ADDR`), an [`Output`] of the publish stage: an HTTP/1.1
//! server (hyper, on a small tokio runtime of its own: [`server`]) that outlasts hostile
//! clients, never on the stage's frame loop.
//!
//! Endpoints (GET and HEAD):
//! - `/`: a page with each camera's picture (its MJPEG stream), fps and drops (polled from
//!   `/api/stats`) and the latest detections and events (from `/api/detections`);
//! - `/stream/<camera>.mjpg`: `multipart/x-mixed-replace` JPEGs of the camera's latest frame
//!   line drawn on its pixels ([`render`]), a part per new frame line, at most `--view-fps`;
//! - `/snapshot/<camera>.jpg`: one such JPEG;
//! - `/api/detections`: server-sent events, `data: <the JSON line>` for every line the
//!   detections socket carries (frames, events, notices, the end line);
//! - `/api/stats`: JSON, per camera frames, fps, drops, latency percentiles; restarts;
//!   the server's clients ([`stats::Stats::json`]);
//! - `/metrics`: Prometheus text format 0.0.4 ([`metrics`]);
//! - `POST /api/control`, only with a token (`--http-token-file`, `$ZCPIPE_HTTP_TOKEN`): the
//!   run's control API over HTTP, behind `Authorization: Bearer` ([`control`]).
//!
//! The frame loop's [`Output::line`] only updates [`stats::Stats`] under a lock held for
//! microseconds and pushes the line into each SSE client's bounded queue (dropping the
//! oldest, counted). Requests are routed on the runtime's blocking threads; each SSE or MJPEG
//! client gets a thread of its own (at most [`MAX_STREAMS`]) writing into its connection
//! through a bounded channel. JPEGs are encoded on those threads, only while someone wants
//! a picture. The server's own bounds (connections, timeouts, head size, no bodies) are
//! [`server`]'s.
//!
//! It binds to a loopback address unless `--http-allow-remote` is given (then the address
//! is logged as reachable from other machines): the view shows the cameras to whoever
//! reaches it; only changing the run needs the token.

mod clips;
mod control;
pub mod draw;
pub mod metrics;
pub mod render;
mod server;
/// A whole or streamed response body (the fleet view answers with it too).
pub(crate) use server::ViewBody;
pub mod stats;

use std::collections::VecDeque;
use std::io::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use anyhow::Result;

use super::output::Output;
use super::schema::{EndJson, SocketLine};
use super::view::ViewSource;
use super::PublishConfig;

/// What `--http`, `--http-allow-remote` and `--view-fps` ask for.
#[derive(Clone, Debug, PartialEq)]
pub struct HttpConfig {
    /// The address to listen on (port 0: any free port, logged and reported).
    pub addr: SocketAddr,
    /// Whether a non-loopback address is allowed (`--http-allow-remote`).
    pub allow_remote: bool,
    /// The most JPEGs encoded per camera per second (`--view-fps`, 0.1 to 30).
    pub view_fps: f64,
    /// The inference service whose numbers `/metrics` shows (asked at each scrape; `None`
    /// or nothing listening: none shown).
    pub service: Option<std::path::PathBuf>,
    /// The most connections at once (`--http-max-connections`); one more waits in the
    /// kernel's backlog.
    pub max_connections: usize,
    /// The record folder whose clips the page lists and plays (`--http-clips`; `None`: no
    /// clips).
    pub clips: Option<std::path::PathBuf>,
    /// The bearer token of `POST /api/control` (`--http-token-file`, `$ZCPIPE_HTTP_TOKEN`;
    /// `None`: no such route, 404).
    pub token: Option<zcpipe_core::secret::Secret>,
}

/// The fewest characters a token of `POST /api/control` may have.
pub const MIN_TOKEN_CHARS: usize = 16;

/// `--http-max-connections`' default: well under the usual soft limit of 1,024 fds.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;

/// An address the web view cannot use, said in one line with its fix (`zcpipe` exits 2,
/// as for any bad argument).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct AddrError(pub String);

/// Refuses a non-loopback address without `--http-allow-remote`.
pub fn check_remote(cfg: &HttpConfig) -> std::result::Result<(), AddrError> {
    if cfg.addr.ip().is_loopback() || cfg.allow_remote {
        return Ok(());
    }
    Err(AddrError(format!(
        "--http {}: not a loopback address, so other machines could watch the cameras (the view has no login): add --http-allow-remote if that is meant, or use 127.0.0.1:{}",
        cfg.addr,
        cfg.addr.port()
    )))
}

/// Listens on `cfg.addr` (after [`check_remote`]). Errors, one line each with the fix: the
/// address in use, not this machine's, a privileged port, anything else bind(2) says.
pub fn bind(cfg: &HttpConfig) -> std::result::Result<TcpListener, AddrError> {
    check_remote(cfg)?;
    let a = cfg.addr;
    TcpListener::bind(a).map_err(|e| {
        AddrError(match e.kind() {
            std::io::ErrorKind::AddrInUse => format!("--http {a}: address in use (another zcpipe or web server?): pick another port"),
            std::io::ErrorKind::AddrNotAvailable => format!("--http {a}: no interface of this machine has address {}: use 127.0.0.1 (this machine only) or one of its addresses (ip -brief address)", a.ip()),
            std::io::ErrorKind::PermissionDenied => format!("--http {a}: ports below 1024 need root or CAP_NET_BIND_SERVICE: pick a port from 1024 up, such as 8080"),
            _ => format!("--http {a}: cannot listen there: {e}"),
        })
    })
}

/// The most SSE and MJPEG clients at once (one thread each); one more is answered 503.
pub(crate) const MAX_STREAMS: u64 = 32;

/// Lines an SSE client's queue holds; one more drops its oldest (counted).
pub(crate) const SSE_QUEUE: usize = 512;

/// An idle SSE stream sends a comment this often (finding a client that went away).
pub(crate) const SSE_KEEPALIVE: Duration = Duration::from_secs(5);

/// The most [`HttpOutput`]'s close waits for its streams to send their last bytes.
pub(crate) const CLOSE_BUDGET: Duration = Duration::from_millis(500);

/// The MJPEG part boundary.
const BOUNDARY: &str = "zcpipeframe";

/// The page, with `<!--CAMERAS-->` and `__VIEW_FPS__` filled in per request.
const PAGE: &str = include_str!("page.html");

/// One SSE client's queue of lines.
struct SseClient {
    queue: Mutex<VecDeque<Arc<str>>>,
    ready: Condvar,
}

/// What the frame loop and the server's threads share.
struct Shared {
    stats: Mutex<Stats>,
    /// Notified with every frame line, and at the end.
    frame_ready: Condvar,
    sse: Mutex<Vec<Arc<SseClient>>>,
    renderer: render::Renderer,
    /// The cameras' names by camera index (cameras added while the stage runs too).
    cameras: RwLock<Vec<String>>,
    addr: SocketAddr,
    max_connections: usize,
    view_fps: f64,
    /// The inference service to ask for its numbers at `/metrics`.
    service: Option<std::path::PathBuf>,
    /// The record folder of the clips served.
    clips: Option<std::path::PathBuf>,
    stop: AtomicBool,
    requests: AtomicU64,
    /// Connections accepted.
    connections: AtomicU64,
    /// accept(2) failures (EMFILE: the process is out of fds), waited out.
    accept_errors: AtomicU64,
    /// Connections closed without a request to make room at the connection limit.
    evicted: AtomicU64,
    /// Requests refused for a body (declared over [`MAX_BODY`], or chunked).
    huge_bodies: AtomicU64,
    /// `POST /api/control`, with a token.
    control: Option<control::Control>,
    sse_clients: AtomicU64,
    mjpeg_clients: AtomicU64,
    sse_dropped: AtomicU64,
}

use stats::Stats;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The web view as an output of the publish stage.
pub(crate) struct HttpOutput {
    shared: Arc<Shared>,
    /// The server's runtime (taken at close).
    rt: Option<tokio::runtime::Runtime>,
}

impl HttpOutput {
    /// Listens as `http` says ([`bind`]) and starts the server; pictures take their
    /// pixels from `pixels`; `POST /api/control` (with a token) asks the run whose run
    /// directory is `run_dir`. The address is logged (the port chosen, for port 0), as a
    /// warning when it is reachable from other machines. Errors: [`bind`]'s.
    pub fn start(
        cfg: &PublishConfig,
        http: &HttpConfig,
        pixels: Box<dyn ViewSource>,
        run_dir: &std::path::Path,
    ) -> Result<HttpOutput> {
        let listener = bind(http)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            stats: Mutex::new(Stats::new(&cfg.cameras)),
            frame_ready: Condvar::new(),
            sse: Mutex::new(vec![]),
            renderer: render::Renderer::new(pixels, http.view_fps)
                .with_shapes(std::sync::Arc::new(std::sync::RwLock::new(draw::Shapes::per_camera(&cfg.track)))),
            cameras: RwLock::new(cfg.cameras.clone()),
            addr,
            max_connections: http.max_connections.max(1),
            view_fps: http.view_fps,
            service: http.service.clone(),
            clips: http.clips.clone(),
            stop: AtomicBool::new(false),
            requests: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            accept_errors: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            huge_bodies: AtomicU64::new(0),
            control: http.token.clone().map(|t| control::Control::new(t, run_dir)),
            sse_clients: AtomicU64::new(0),
            mjpeg_clients: AtomicU64::new(0),
            sse_dropped: AtomicU64::new(0),
        });
        let rt = server::start(shared.clone(), listener)
            .map_err(|e| anyhow::anyhow!("--http {addr}: starting the server: {e}"))?;
        let control = if http.token.is_some() { "; POST /api/control with the token" } else { "" };
        if addr.ip().is_loopback() {
            log::info!("web view on http://{addr}/ (this machine only; /api/detections, /api/stats, /metrics, /snapshot/<camera>.jpg{control}; at most {} JPEGs a second per camera)", http.view_fps);
        } else {
            let change = if http.token.is_some() { ", and whoever has the token may change the run" } else { "" };
            log::warn!("web view on http://{addr}/, reachable from other machines (--http-allow-remote): whoever reaches this port sees the cameras and detections{change}; at most {} JPEGs a second per camera", http.view_fps);
        }
        Ok(HttpOutput { shared, rt: Some(rt) })
    }

    /// The address it listens on (the port chosen, for port 0).
    #[cfg(test)]
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }
}

/// The web view's counters, for the stage's report (`http`).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
#[serde(default)]
pub struct HttpReport {
    /// Where it listens, `http://ADDR/`.
    pub url: String,
    /// Requests served.
    pub requests: u64,
    /// Event-stream clients now.
    pub(crate) sse_clients: u64,
    /// MJPEG-stream clients now.
    pub(crate) mjpeg_clients: u64,
    /// Detection lines dropped for slow event clients.
    pub(crate) sse_dropped: u64,
    /// Pictures encoded, by camera.
    pub jpegs: std::collections::BTreeMap<String, u64>,
}

impl HttpReport {
    /// Its line of the end-of-run summary.
    pub fn summary_line(&self) -> String {
        format!(
            "  web view: {}: {} requests, {} pictures encoded, {} detection lines dropped for slow event clients",
            self.url,
            self.requests,
            self.jpegs.values().sum::<u64>(),
            self.sse_dropped
        )
    }
}

impl HttpOutput {
    /// Its counters now.
    fn counters(&self) -> HttpReport {
        let s = &self.shared;
        HttpReport {
            url: format!("http://{}/", s.addr),
            requests: s.requests.load(Ordering::Relaxed),
            sse_clients: s.sse_clients.load(Ordering::Relaxed),
            mjpeg_clients: s.mjpeg_clients.load(Ordering::Relaxed),
            sse_dropped: s.sse_dropped.load(Ordering::Relaxed),
            jpegs: s.names().into_iter().enumerate().map(|(i, c)| (c, s.renderer.encoded(i))).collect(),
        }
    }
}

impl Output for HttpOutput {
    fn name(&self) -> &'static str {
        "http"
    }

    fn shapes(&mut self, shapes: &[draw::Shapes]) {
        self.shared.renderer.set_shapes(shapes.to_vec());
    }

    fn camera_added(&mut self, camera: &str) {
        let s = &self.shared;
        s.cameras.write().unwrap_or_else(|p| p.into_inner()).push(camera.to_string());
        lock(&s.stats).add_camera(camera);
        s.renderer.add_camera(camera);
    }

    fn line(&mut self, line: &SocketLine) {
        lock(&self.shared.stats).line(line);
        if matches!(line, SocketLine::Frame(_)) {
            self.shared.frame_ready.notify_all();
        }
        let clients = lock(&self.shared.sse);
        if clients.is_empty() {
            return;
        }
        let Ok(text) = line.to_line() else { return };
        let text: Arc<str> = Arc::from(text.trim_end());
        for c in clients.iter() {
            let mut q = lock(&c.queue);
            if q.len() >= SSE_QUEUE {
                q.pop_front();
                self.shared.sse_dropped.fetch_add(1, Ordering::Relaxed);
            }
            q.push_back(text.clone());
            c.ready.notify_one();
        }
    }

    fn report(&self) -> crate::report::OutputReport {
        crate::report::OutputReport::Http(self.counters())
    }

    fn close(&mut self, end: &EndJson) {
        self.line(&SocketLine::End(end.clone()));
        let s = &self.shared;
        s.stop.store(true, Ordering::SeqCst);
        s.frame_ready.notify_all();
        for c in lock(&s.sse).iter() {
            c.ready.notify_all();
        }
        // Streams send what they hold (the end line) and end; ones stuck writing to a client
        // that reads nothing are left behind after the budget (the process exits).
        let deadline = Instant::now() + CLOSE_BUDGET;
        while Instant::now() < deadline
            && s.sse_clients.load(Ordering::SeqCst) + s.mjpeg_clients.load(Ordering::SeqCst) > 0
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(CLOSE_BUDGET);
        }
    }
}

impl Drop for HttpOutput {
    /// A stage that ends without [`Output::close`] (an error in its set-up) stops the
    /// threads too.
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.frame_ready.notify_all();
        for c in lock(&self.shared.sse).iter() {
            c.ready.notify_all();
        }
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// A response as the router makes it: whole (`body`), or a stream's channel.
struct Reply {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
    stream: Option<server::StreamBody>,
}

impl Reply {
    /// `status` with `body` of `content_type`, not to be cached.
    fn new(status: u16, content_type: &str, body: Vec<u8>) -> Reply {
        let headers = vec![("Content-Type", content_type.to_string()), ("Cache-Control", "no-cache".to_string())];
        Reply { status, headers, body, stream: None }
    }

    /// Plain text.
    fn text(status: u16, body: String) -> Reply {
        Reply::new(status, "text/plain; charset=utf-8", body.into_bytes())
    }

    /// One more header.
    fn header(mut self, name: &'static str, value: &str) -> Reply {
        self.headers.push((name, value.to_string()));
        self
    }
}

/// `&`, `<`, `>`, `"` and `'` as HTML entities.
pub(crate) fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&#39;")
}

/// The page for `cameras`: a figure per camera with its stream (and, with `clips`, the
/// recorded clips' list and player).
pub fn page(cameras: &[String], view_fps: f64, clips: bool) -> String {
    let figs: String = cameras
        .iter()
        .map(|c| {
            let c = html_escape(c);
            format!("<figure class=\"cam\" data-camera=\"{c}\"><img id=\"img-{c}\" src=\"/stream/{c}.mjpg\" alt=\"camera {c}\"><figcaption><b>{c}</b> <span class=\"fps\">-</span> fps, <span class=\"drops\">-</span> dropped, <span class=\"frames\">-</span> frames <a href=\"/snapshot/{c}.jpg\">snapshot</a> <span class=\"size\"></span> <span class=\"xy\"></span></figcaption></figure>\n")
        })
        .collect();
    PAGE.replace("<!--CAMERAS-->", &figs)
        .replace("__VIEW_FPS__", &format!("{view_fps}"))
        .replace("__CLIPS__", if clips { "true" } else { "false" })
}

/// One server-sent event carrying `data` (each of its lines a `data:` line; a blank line
/// ends the event), as the HTML standard's "Server-sent events" section frames them.
pub(crate) fn sse_event(data: &str) -> String {
    let mut o = String::with_capacity(data.len() + 8);
    for l in data.split('\n') {
        o.push_str("data: ");
        o.push_str(l.strip_suffix('\r').unwrap_or(l));
        o.push('\n');
    }
    o.push('\n');
    o
}

/// The camera named by `rest` with its `suffix` (`cam0.jpg`), as an index.
fn camera_of(s: &Shared, rest: &str, suffix: &str) -> Option<usize> {
    let name = rest.strip_suffix(suffix)?;
    s.names().iter().position(|c| c == name)
}

/// The largest request body (bytes) the view lets a request declare; it reads none.
pub(crate) const MAX_BODY: usize = 64 * 1024;

impl Shared {
    /// The cameras' names, by camera index.
    fn names(&self) -> Vec<String> {
        self.cameras.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Camera `cam`'s name.
    fn name(&self, cam: usize) -> String {
        self.cameras.read().unwrap_or_else(|p| p.into_inner()).get(cam).cloned().unwrap_or_default()
    }

    /// A request that came with a body (over [`MAX_BODY`], or chunked): counted, logged
    /// (the 1st, 2nd, 4th, 8th... time); its connection is closed.
    fn refused_body(&self, declared: Option<u64>) {
        let n = self.huge_bodies.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            let what = declared.map_or_else(|| "a chunked body".to_string(), |b| format!("a body of {b} bytes"));
            log::warn!("web view: a request declared {what} (the view reads none, but a control request's of at most {MAX_BODY} bytes with a Content-Length): answered 413 ({n} so far)");
        }
    }
}

/// Routes a GET (or HEAD: `head`) of `path` (a clip's byte `range`); runs on a blocking
/// thread.
fn route(s: &Arc<Shared>, path: &str, head: bool, range: Option<&str>) -> Reply {
    let not_a_camera = |what: &str| format!("no camera {what}; cameras: {}\n", s.names().join(", "));
    match (path, &s.clips) {
        ("/api/clips", Some(dir)) => return clips::list(dir),
        (p, Some(dir)) if p.starts_with("/clips/") => return clips::file(dir, &p["/clips/".len()..], range, head),
        _ => {}
    }
    match path {
        "/" | "/index.html" => {
            Reply::new(200, "text/html; charset=utf-8", page(&s.names(), s.view_fps, s.clips.is_some()).into_bytes())
        }
        "/api/stats" => Reply::new(200, "application/json", stats_json(s).to_string().into_bytes()),
        "/metrics" => {
            let mut body = metrics::render(&lock(&s.stats), &server_counts(s));
            if let Some(st) = s.service.as_deref().and_then(service_stats) {
                metrics::service(&mut body, &st);
            }
            if let Some(dir) = &s.clips {
                // No index yet (the recorder has not started): no recording families.
                let _ = zcpipe_clips::Index::open_read(dir).and_then(|ix| metrics::recording(&mut body, &ix));
            }
            Reply::new(200, metrics::CONTENT_TYPE, body.into_bytes())
        }
        "/api/detections" => stream(s, Stream::Sse, head),
        p if p.starts_with("/snapshot/") => match camera_of(s, &p["/snapshot/".len()..], ".jpg") {
            Some(cam) => snapshot(s, cam),
            None => Reply::text(404, not_a_camera(&p["/snapshot/".len()..])),
        },
        p if p.starts_with("/stream/") => match camera_of(s, &p["/stream/".len()..], ".mjpg") {
            Some(cam) => stream(s, Stream::Mjpeg(cam), head),
            None => Reply::text(404, not_a_camera(&p["/stream/".len()..])),
        },
        _ => not_found(path),
    }
}

/// The answer to a path the view does not serve.
fn not_found(path: &str) -> Reply {
    Reply::text(404, format!("not found: {path}; the web view serves /, /api/detections, /api/stats, /metrics, /snapshot/<camera>.jpg, /stream/<camera>.mjpg\n"))
}

/// How long a snapshot waits for a camera's first picture (a frame line and pixels) before
/// it answers without one: a snapshot asked just after the start gets the camera's pixels.
const FIRST_PICTURE_WAIT: Duration = Duration::from_secs(2);

/// `/snapshot/<camera>.jpg`: the latest frame line's boxes on its pixels. Before the
/// camera's first picture it waits up to [`FIRST_PICTURE_WAIT`]; a camera still without one
/// then gets 503: the text "no frame yet" before any frame line, else the dark placeholder
/// JPEG with the reason in `X-Zcpipe-No-Pixels`.
fn snapshot(s: &Shared, cam: usize) -> Reply {
    let deadline = Instant::now() + FIRST_PICTURE_WAIT;
    loop {
        let frame = lock(&s.stats).cameras[cam].latest.clone();
        let p = match s.renderer.picture(cam, &s.name(cam), frame.as_deref()) {
            Ok(p) => p,
            Err(e) => return Reply::text(500, format!("{e:#}\n")),
        };
        let whole = frame.is_some() && p.pixel_seq.is_some();
        if !whole && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        if frame.is_none() {
            return Reply::text(
                503,
                format!("camera {}: no frame yet; try again when the pipeline runs\n", s.name(cam)),
            );
        }
        // Which frame line's boxes are drawn, and on which pixels.
        let status = if whole { 200 } else { 503 };
        let mut r = Reply::new(status, "image/jpeg", p.jpeg.to_vec())
            .header("X-Zcpipe-Seq", &p.det_seq.unwrap_or(0).to_string());
        match p.pixel_seq {
            Some(px) => r = r.header("X-Zcpipe-Pixel-Seq", &px.to_string()),
            None => {
                let why = s.renderer.unavailable(cam).unwrap_or_else(|| "no pixels".into());
                r = r.header("X-Zcpipe-No-Pixels", &why);
            }
        }
        return r;
    }
}

/// The inference service's numbers, asked on its socket (at most 200 ms; `None` if it is off
/// or does not answer: `/metrics` goes on without them).
fn service_stats(path: &std::path::Path) -> Option<zcpipe_core::service::ServiceStats> {
    use zcpipe_core::service::client::Client;
    let mut c = Client::connect_within(path, "metrics", 0.0, Duration::from_millis(200)).ok()?;
    c.stats().ok()
}

fn server_counts(s: &Shared) -> metrics::ServerCounts {
    metrics::ServerCounts {
        sse_clients: s.sse_clients.load(Ordering::Relaxed),
        mjpeg_clients: s.mjpeg_clients.load(Ordering::Relaxed),
        sse_dropped: s.sse_dropped.load(Ordering::Relaxed),
        requests: s.requests.load(Ordering::Relaxed),
    }
}

/// `/api/stats`: the stream's ([`Stats::json`]) and the server's.
fn stats_json(s: &Shared) -> serde_json::Value {
    let mut v = lock(&s.stats).json();
    let c = server_counts(s);
    let pixels: serde_json::Map<String, serde_json::Value> = s
        .names()
        .into_iter()
        .enumerate()
        .map(|(i, n)| (n, s.renderer.unavailable(i).map_or(serde_json::Value::Null, Into::into)))
        .collect();
    v["server"] = serde_json::json!({
        "url": format!("http://{}/", s.addr),
        "clients": {"sse": c.sse_clients, "mjpeg": c.mjpeg_clients},
        "requests": c.requests,
        "sse_dropped": c.sse_dropped,
        "refused_bodies": s.huge_bodies.load(Ordering::Relaxed),
        "connections": s.connections.load(Ordering::Relaxed),
        "accept_errors": s.accept_errors.load(Ordering::Relaxed),
        "evicted_idle": s.evicted.load(Ordering::Relaxed),
        "control_requests": s.control.as_ref().map_or(0, |c| c.changed.load(Ordering::Relaxed)),
        "control_refused": s.control.as_ref().map_or(0, |c| c.refused.load(Ordering::Relaxed)),
        "max_connections": s.max_connections,
        "view_fps": s.view_fps,
        "no_pixels": pixels,
    });
    v
}

enum Stream {
    Sse,
    Mjpeg(usize),
}

/// Hands a streaming client to a thread of its own, writing into its connection (503
/// beyond [`MAX_STREAMS`]); a HEAD gets the head alone.
fn stream(s: &Arc<Shared>, kind: Stream, head: bool) -> Reply {
    let content_type = match kind {
        Stream::Sse => "text/event-stream".to_string(),
        Stream::Mjpeg(_) => format!("multipart/x-mixed-replace; boundary={BOUNDARY}"),
    };
    let mut reply = Reply::new(200, &content_type, vec![]).header("X-Accel-Buffering", "no");
    reply.headers[1].1 = "no-cache, no-store".into();
    if head {
        return reply;
    }
    let counter = match kind {
        Stream::Sse => &s.sse_clients,
        Stream::Mjpeg(_) => &s.mjpeg_clients,
    };
    if s.sse_clients.load(Ordering::SeqCst) + s.mjpeg_clients.load(Ordering::SeqCst) >= MAX_STREAMS {
        return Reply::text(503, format!("the web view serves at most {MAX_STREAMS} streams at once; close one\n"));
    }
    counter.fetch_add(1, Ordering::SeqCst);
    let (w, rx) = server::channel();
    let s2 = s.clone();
    let spawned = std::thread::Builder::new().name("http-stream".into()).spawn(move || {
        let s = s2;
        let r = match kind {
            Stream::Sse => sse(&s, w),
            Stream::Mjpeg(cam) => mjpeg(&s, w, cam),
        };
        if let Err(e) = r {
            log::debug!("web view: a stream ended: {e}");
        }
        match kind {
            Stream::Sse => s.sse_clients.fetch_sub(1, Ordering::SeqCst),
            Stream::Mjpeg(_) => s.mjpeg_clients.fetch_sub(1, Ordering::SeqCst),
        };
    });
    match spawned {
        Ok(_) => {
            reply.stream = Some(rx);
            reply
        }
        Err(e) => {
            counter.fetch_sub(1, Ordering::SeqCst);
            log::warn!("web view: no thread for a stream: {e}");
            Reply::text(503, "the web view cannot start a stream now; try again\n".into())
        }
    }
}

/// `/api/detections`: every line from now on as an event, until the end line, the output
/// closes or the client goes.
fn sse(s: &Arc<Shared>, mut w: server::ChunkWriter) -> std::io::Result<()> {
    let me = Arc::new(SseClient { queue: Mutex::new(VecDeque::new()), ready: Condvar::new() });
    lock(&s.sse).push(me.clone());
    let r = (|| {
        w.write_all(b"retry: 2000\n\n")?;
        w.flush()?;
        loop {
            let batch: Vec<Arc<str>> = {
                let mut q = lock(&me.queue);
                if q.is_empty() && !s.stop.load(Ordering::SeqCst) {
                    q = me.ready.wait_timeout(q, SSE_KEEPALIVE).unwrap_or_else(|p| p.into_inner()).0;
                }
                q.drain(..).collect()
            };
            if batch.is_empty() {
                if s.stop.load(Ordering::SeqCst) {
                    return Ok(());
                }
                w.write_all(b": keep-alive\n\n")?;
            }
            let mut end = false;
            for l in &batch {
                w.write_all(sse_event(l).as_bytes())?;
                end |= l.starts_with("{\"type\":\"end\"");
            }
            w.flush()?;
            if end {
                return Ok(());
            }
        }
    })();
    lock(&s.sse).retain(|c| !Arc::ptr_eq(c, &me));
    r
}

/// `/stream/<camera>.mjpg`: a JPEG part per new frame line of camera `cam` (the first
/// at once, a placeholder before any frame), at most `--view-fps` a second.
fn mjpeg(s: &Arc<Shared>, mut w: server::ChunkWriter, cam: usize) -> std::io::Result<()> {
    let period = s.renderer.period();
    let mut sent: Option<(Option<u64>, Instant)> = None;
    loop {
        if let Some((_, at)) = sent {
            let next = at + period;
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            }
        }
        // Wait for a frame line this client has not seen (1 s at a time, for the stop flag).
        let frame = {
            let mut st = lock(&s.stats);
            loop {
                if s.stop.load(Ordering::SeqCst) {
                    return Ok(());
                }
                let latest = st.cameras[cam].latest.clone();
                if sent.is_none() || latest.as_ref().map(|f| f.seq) != sent.and_then(|x| x.0) {
                    break latest;
                }
                st = s.frame_ready.wait_timeout(st, Duration::from_secs(1)).unwrap_or_else(|p| p.into_inner()).0;
            }
        };
        let pic = match s.renderer.picture(cam, &s.name(cam), frame.as_deref()) {
            Ok(p) => p,
            Err(e) => {
                log::warn!("web view: {e:#}");
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
        };
        write!(w, "--{BOUNDARY}\r\nContent-Type: image/jpeg\r\nContent-Length: {}\r\n\r\n", pic.jpeg.len())?;
        w.write_all(&pic.jpeg)?;
        w.write_all(b"\r\n")?;
        w.flush()?;
        sent = Some((frame.map(|f| f.seq), Instant::now()));
    }
}

#[cfg(test)]
mod tests;

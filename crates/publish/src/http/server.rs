//! The web view's HTTP/1.1 server: hyper on a small tokio runtime of its own, built to
//! outlast its clients.
//!
//! - **The accept loop never ends while the stage runs.** An error from accept(2) (EMFILE
//!   when the process is out of fds, ENFILE, ENOMEM) is counted, logged at its first time
//!   and at powers of two, and waited out (100 ms); the loop goes on.
//! - **At most `--http-max-connections` connections at once**: at the limit, the
//!   connection that has waited longest without sending a request is closed to make room
//!   (so idle connections cannot keep clients out); with none idle, a new one waits for a
//!   place.
//! - **A connection is bounded in time and memory**: its request head must arrive within
//!   [`HEAD_TIMEOUT`], in at most [`MAX_HEAD`] bytes (hyper's buffer; more is answered 431),
//!   it serves one request (no keep-alive: an idle connection cannot hold a permit), and a
//!   whole response must be taken within [`WRITE_TIMEOUT`] (the run's answer to a control
//!   request is waited for first, within the route's own bound). No request body is read but
//!   `POST /api/control`'s ([`super::control`]: a `Content-Length` of at most
//!   [`super::MAX_BODY`], within 5 s, with the token); one declared over
//!   [`super::MAX_BODY`], or chunked, is answered 413 and the connection closed.
//! - **Work that blocks runs on blocking threads** (at most [`BLOCKING_THREADS`]): encoding
//!   a snapshot, asking the inference service. Streams (event and MJPEG clients) keep their
//!   own thread each, as before, writing through a bounded channel ([`ChunkWriter`]) that the
//!   connection drains as the client reads; a client that takes nothing for [`STREAM_STALL`]
//!   loses its stream (and its place among the streams).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};

use super::{Reply, Shared};

/// How long a client may take to send its request head.
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a client may take to read a whole (not streamed) response.
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// The most bytes of a request head (hyper's read buffer; its smallest setting is 8 KiB).
pub(crate) const MAX_HEAD: usize = 16 * 1024;

/// Threads for work that blocks (a snapshot's JPEG, the service's numbers, a control
/// request).
pub(crate) const BLOCKING_THREADS: usize = 4;

/// Connections the kernel may queue for accept(2).
const ACCEPT_QUEUE: i32 = 1024;

/// Chunks a stream may have on its way to its client before its thread waits.
const STREAM_CHUNKS: usize = 4;

/// Starts the runtime and the accept loop on `listener`; the runtime (dropped by the
/// caller) ends them.
pub(crate) fn start(s: Arc<Shared>, listener: std::net::TcpListener) -> io::Result<tokio::runtime::Runtime> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(BLOCKING_THREADS)
        .thread_name("http")
        .enable_io()
        .enable_time()
        .build()?;
    // A deep accept queue (listen(2) again: Linux takes the new backlog, capped by
    // net.core.somaxconn): a flood of connections then waits there instead of making the
    // kernel drop new SYNs, which a client would only retry a second later.
    nix::sys::socket::listen(
        &listener,
        nix::sys::socket::Backlog::new(ACCEPT_QUEUE).unwrap_or(nix::sys::socket::Backlog::MAXCONN),
    )
    .map_err(io::Error::from)?;
    listener.set_nonblocking(true)?;
    let listener = {
        let _guard = rt.enter();
        tokio::net::TcpListener::from_std(listener)?
    };
    rt.spawn(accept_loop(s, listener));
    Ok(rt)
}

/// Connections that have not sent a request yet, oldest first: at the connection limit the
/// oldest makes room for a new one, so idle connections cannot keep clients out.
#[derive(Default)]
struct Waiting {
    next: std::sync::atomic::AtomicU64,
    queue: Mutex<VecDeque<(u64, Arc<Notify>)>>,
}

impl Waiting {
    fn add(&self) -> (u64, Arc<Notify>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let kill = Arc::new(Notify::new());
        lock(&self.queue).push_back((id, kill.clone()));
        (id, kill)
    }

    fn remove(&self, id: u64) {
        lock(&self.queue).retain(|(i, _)| *i != id);
    }

    /// Closes the connection that has waited longest for its request; false if none waits.
    fn evict_oldest(&self) -> bool {
        let oldest = lock(&self.queue).pop_front();
        oldest.map(|(_, kill)| kill.notify_one()).is_some()
    }
}

async fn accept_loop(s: Arc<Shared>, listener: tokio::net::TcpListener) {
    let permits = Arc::new(Semaphore::new(s.max_connections));
    let waiting = Arc::new(Waiting::default());
    loop {
        let (tcp, peer) = loop {
            match listener.accept().await {
                Ok(accepted) => break accepted,
                Err(e) => {
                    let n = s.accept_errors.fetch_add(1, Ordering::Relaxed) + 1;
                    if n.is_power_of_two() {
                        log::warn!(
                            "web view: accepting a connection: {e} ({n} so far); waiting and going on (the process has {} fds at most: raise LimitNOFILE, or lower --http-max-connections)",
                            nofile_limit()
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        let permit = match permits.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                // At the limit: the connection idle longest makes room; with none idle (every
                // one busy or streaming) this one waits for a place.
                if waiting.evict_oldest() {
                    s.evicted.fetch_add(1, Ordering::Relaxed);
                }
                let Ok(p) = permits.clone().acquire_owned().await else { return };
                p
            }
        };
        s.connections.fetch_add(1, Ordering::Relaxed);
        // Registered before its task runs, so the next accept can already evict it.
        let (id, kill) = waiting.add();
        tokio::spawn(serve(s.clone(), (tcp, peer), permit, waiting.clone(), (id, kill)));
    }
}

/// One connection: one request, its head in time, its whole response taken in time (a
/// stream's as long as its stream lasts); closed early when it is the oldest without a
/// request at the connection limit.
async fn serve(
    s: Arc<Shared>,
    (tcp, peer): (tokio::net::TcpStream, std::net::SocketAddr),
    _permit: OwnedSemaphorePermit,
    waiting: Arc<Waiting>,
    (id, kill): (u64, Arc<Notify>),
) {
    let stream: StreamSlot = Arc::new(Mutex::new(None));
    let (slot, w) = (stream.clone(), waiting.clone());
    let service = service_fn(move |rq| {
        w.remove(id);
        handle(s.clone(), rq, slot.clone(), peer.ip().to_canonical())
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(MAX_HEAD)
        .keep_alive(false)
        .serve_connection(TokioIo::new(tcp), service);
    let mut conn = std::pin::pin!(conn);
    let streaming = || lock(&stream).as_ref().is_some_and(|alive| alive.load(Ordering::Relaxed));
    let served = async {
        loop {
            match tokio::time::timeout(WRITE_TIMEOUT, conn.as_mut()).await {
                Ok(Err(e)) => return log::debug!("web view: a connection ended: {e}"),
                Ok(Ok(())) => return,
                Err(_) if streaming() => continue,
                Err(_) => return log::debug!("web view: a client took over {WRITE_TIMEOUT:?}: closed"),
            }
        }
    };
    tokio::select! {
        () = served => {}
        () = kill.notified() => log::debug!("web view: the connection idle longest was closed to make room"),
    }
    waiting.remove(id);
}

/// A connection's stream, when its answer is one: `true` while the stream's thread writes
/// (or while a control request waits for the run's answer).
type StreamSlot = Arc<Mutex<Option<Arc<AtomicBool>>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The soft limit on fds (`RLIMIT_NOFILE`), for the accept error's line.
fn nofile_limit() -> String {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or_else(|_| "?".to_string(), |(soft, _)| soft.to_string())
}

/// One request from `peer`: refused (a method other than GET and HEAD, a body), or routed
/// on a blocking thread; `/api/control` is [`super::control`]'s (404 without a token).
async fn handle(
    s: Arc<Shared>,
    rq: Request<Incoming>,
    stream: StreamSlot,
    peer: std::net::IpAddr,
) -> Result<Response<ViewBody>, Infallible> {
    s.requests.fetch_add(1, Ordering::Relaxed);
    if let Some(host) = foreign_host(&s, &rq) {
        let r = Reply::text(403, format!("the web view answers to this machine's names only, not Host {host:?} (a web page's DNS rebinding); open it as http://{}/\n", s.addr));
        return Ok(whole(r));
    }
    if rq.uri().path() == super::control::PATH {
        let Some(c) = &s.control else { return Ok(whole(super::not_found(super::control::PATH))) };
        // The run may take longer to answer than a whole response's budget: meanwhile the
        // connection waits as a stream's does (what the route awaits is bounded on its own).
        let asking = Arc::new(AtomicBool::new(true));
        *lock(&stream) = Some(asking.clone());
        let reply = super::control::serve(&s, c, rq, peer).await;
        asking.store(false, Ordering::Relaxed);
        return Ok(whole(reply));
    }
    let head = rq.method() == Method::HEAD;
    if !(head || rq.method() == Method::GET) {
        return Ok(whole(
            Reply::text(405, "the web view takes GET and HEAD only\n".into()).header("Allow", "GET, HEAD"),
        ));
    }
    let declared = rq.headers().get(hyper::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let chunked = rq.headers().contains_key(hyper::header::TRANSFER_ENCODING);
    if chunked || declared.is_some_and(|n| n > super::MAX_BODY as u64) {
        s.refused_body(declared);
        let r = Reply::text(413, "the web view takes no request body\n".into()).header("Connection", "close");
        return Ok(whole(r));
    }
    let path = rq.uri().path().to_string();
    // A clip's byte range (a `<video>` seeking); the header's size is bounded by MAX_HEAD.
    let range = rq.headers().get(hyper::header::RANGE).and_then(|v| v.to_str().ok()).map(String::from);
    let s2 = s.clone();
    let reply = match tokio::task::spawn_blocking(move || super::route(&s2, &path, head, range.as_deref())).await {
        Ok(r) => r,
        Err(e) => Reply::text(500, format!("the web view failed on this request: {e}\n")),
    };
    Ok(match reply.stream {
        Some((rx, alive)) if !head => {
            *lock(&stream) = Some(alive);
            response(reply.status, &reply.headers, ViewBody::Stream(rx))
        }
        _ => whole(reply),
    })
}

/// On a loopback address, the `Host` a request names when it is not this machine's
/// (`localhost`, a loopback address): a page elsewhere whose name was pointed at 127.0.0.1
/// (DNS rebinding) must not read the cameras. `None`: fine (or no `Host`, as HTTP/1.0 may).
fn foreign_host(s: &Shared, rq: &Request<Incoming>) -> Option<String> {
    if !s.addr.ip().is_loopback() {
        return None;
    }
    let host = rq.headers().get(hyper::header::HOST)?.to_str().unwrap_or("?");
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    let local =
        name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    (!local).then(|| host.to_string())
}

/// A whole response from `reply`.
fn whole(reply: Reply) -> Response<ViewBody> {
    response(reply.status, &reply.headers, ViewBody::Whole(Some(Bytes::from(reply.body))))
}

/// `body` with `status` and `headers` (a header value that is not one is left out).
fn response(status: u16, headers: &[(&'static str, String)], body: ViewBody) -> Response<ViewBody> {
    let mut r = Response::new(body);
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    for (k, v) in headers {
        if let Ok(v) = hyper::header::HeaderValue::from_str(v) {
            r.headers_mut().insert(*k, v);
        }
    }
    r
}

/// A response body: whole, or a stream's chunks as its thread writes them.
pub(crate) enum ViewBody {
    Whole(Option<Bytes>),
    Stream(mpsc::Receiver<Bytes>),
}

impl Body for ViewBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            ViewBody::Whole(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            ViewBody::Stream(rx) => rx.poll_recv(cx).map(|c| c.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, ViewBody::Whole(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ViewBody::Whole(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            ViewBody::Stream(_) => SizeHint::default(),
        }
    }
}

/// A stream's writer, for its thread: each flush sends what was written as one chunk,
/// waiting while [`STREAM_CHUNKS`] are on their way; an error once the client is gone, or
/// when it has taken nothing for [`STREAM_STALL`] (its place goes to another client).
pub(crate) struct ChunkWriter {
    tx: mpsc::Sender<Bytes>,
    buf: Vec<u8>,
    /// Set while this writer lives (its connection is then a stream's).
    alive: Arc<AtomicBool>,
}

/// How long a stream waits for its client to take a chunk before it ends.
pub(crate) const STREAM_STALL: Duration = Duration::from_secs(10);

/// A stream's body, and whether its writer still lives.
pub(crate) type StreamBody = (mpsc::Receiver<Bytes>, Arc<AtomicBool>);

/// A writer for a stream's thread and the body its connection sends.
pub(crate) fn channel() -> (ChunkWriter, StreamBody) {
    let (tx, rx) = mpsc::channel(STREAM_CHUNKS);
    let alive = Arc::new(AtomicBool::new(true));
    (ChunkWriter { tx, buf: Vec::new(), alive: alive.clone() }, (rx, alive))
}

impl io::Write for ChunkWriter {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let mut chunk = Bytes::from(std::mem::take(&mut self.buf));
        // Polled, not awaited: the thread needs no runtime (which may be gone at the end).
        let deadline = std::time::Instant::now() + STREAM_STALL;
        loop {
            match self.tx.try_send(chunk) {
                Ok(()) => return Ok(()),
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    return Err(io::Error::new(io::ErrorKind::BrokenPipe, "the client went away"))
                }
                Err(mpsc::error::TrySendError::Full(c)) if std::time::Instant::now() < deadline => {
                    chunk = c;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(mpsc::error::TrySendError::Full(_)) => {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "the client took nothing for 10 s"))
                }
            }
        }
    }
}

impl Drop for ChunkWriter {
    fn drop(&mut self) {
        self.alive.store(false, Ordering::Relaxed);
    }
}

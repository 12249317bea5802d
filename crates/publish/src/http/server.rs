//! The web view's HTTP/1.1 server: hyper on a small tokio runtime of its own, built to
//! outlast its clients.
//!
//! - **The accept loop never ends while the stage runs.** An error from accept(2) (EMFILE
//!   when the process is out of fds, ENFILE, ENOMEM) is counted, logged at its first time
//!   and at powers of two, and waited out (100 ms); the loop goes on.
//! - **At most `--http-max-connections` connections at once**: the loop takes a permit
//!   before it accepts, so one more waits in the kernel's backlog and costs no fd here.
//! - **A connection is bounded in time and memory**: its request head must arrive within
//!   [`HEAD_TIMEOUT`], in at most [`MAX_HEAD`] bytes (hyper's buffer; more is answered 431),
//!   it serves one request (no keep-alive: an idle connection cannot hold a permit), and a
//!   whole response must be taken within [`WRITE_TIMEOUT`]. No request body is read: one
//!   declared over [`super::MAX_BODY`] is answered 413 and the connection closed.
//! - **Work that blocks runs on blocking threads** (at most [`BLOCKING_THREADS`]): encoding
//!   a snapshot, asking the inference service. Streams (event and MJPEG clients) keep their
//!   own thread each, as before, writing through a bounded channel ([`ChunkWriter`]) that the
//!   connection drains as the client reads.

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::{mpsc, Semaphore};

use super::{Reply, Shared};

/// How long a client may take to send its request head.
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a client may take to read a whole (not streamed) response.
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// The most bytes of a request head (hyper's read buffer; its smallest setting is 8 KiB).
pub(crate) const MAX_HEAD: usize = 16 * 1024;

/// Threads for work that blocks (a snapshot's JPEG, the service's numbers).
pub(crate) const BLOCKING_THREADS: usize = 4;

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
    listener.set_nonblocking(true)?;
    let listener = {
        let _guard = rt.enter();
        tokio::net::TcpListener::from_std(listener)?
    };
    rt.spawn(accept_loop(s, listener));
    Ok(rt)
}

async fn accept_loop(s: Arc<Shared>, listener: tokio::net::TcpListener) {
    let permits = Arc::new(Semaphore::new(s.max_connections));
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else { return };
        let tcp = loop {
            match listener.accept().await {
                Ok((tcp, _)) => break tcp,
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
        s.connections.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(serve(s.clone(), tcp, permit));
    }
}

/// One connection: one request, its head in time, its whole response taken in time (a
/// stream's as long as its client reads).
async fn serve(s: Arc<Shared>, tcp: tokio::net::TcpStream, _permit: tokio::sync::OwnedSemaphorePermit) {
    let streamed = Arc::new(AtomicBool::new(false));
    let flag = streamed.clone();
    let service = service_fn(move |rq| handle(s.clone(), rq, flag.clone()));
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(MAX_HEAD)
        .keep_alive(false)
        .serve_connection(TokioIo::new(tcp), service);
    let mut conn = std::pin::pin!(conn);
    loop {
        match tokio::time::timeout(WRITE_TIMEOUT, conn.as_mut()).await {
            Ok(Err(e)) => return log::debug!("web view: a connection ended: {e}"),
            Ok(Ok(())) => return,
            Err(_) if streamed.load(Ordering::Relaxed) => continue,
            Err(_) => return log::debug!("web view: a client took over {WRITE_TIMEOUT:?}: closed"),
        }
    }
}

/// The soft limit on fds (`RLIMIT_NOFILE`), for the accept error's line.
fn nofile_limit() -> String {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or_else(|_| "?".to_string(), |(soft, _)| soft.to_string())
}

/// One request: refused (a method other than GET and HEAD, a body), or routed on a
/// blocking thread.
async fn handle(
    s: Arc<Shared>,
    rq: Request<Incoming>,
    streamed: Arc<AtomicBool>,
) -> Result<Response<ViewBody>, Infallible> {
    s.requests.fetch_add(1, Ordering::Relaxed);
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
    let s2 = s.clone();
    let reply = match tokio::task::spawn_blocking(move || super::route(&s2, &path, head)).await {
        Ok(r) => r,
        Err(e) => Reply::text(500, format!("the web view failed on this request: {e}\n")),
    };
    Ok(match reply.stream {
        Some(rx) if !head => {
            streamed.store(true, Ordering::Relaxed);
            let mut r = Response::new(ViewBody::Stream(rx));
            *r.status_mut() = hyper::StatusCode::from_u16(reply.status).unwrap_or(hyper::StatusCode::OK);
            set_headers(&mut r, &reply.headers);
            r
        }
        _ => whole(reply),
    })
}

/// A whole response from `reply`.
fn whole(reply: Reply) -> Response<ViewBody> {
    let mut r = Response::new(ViewBody::Whole(Some(Bytes::from(reply.body))));
    *r.status_mut() = hyper::StatusCode::from_u16(reply.status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    set_headers(&mut r, &reply.headers);
    r
}

fn set_headers(r: &mut Response<ViewBody>, headers: &[(&'static str, String)]) {
    for (k, v) in headers {
        if let Ok(v) = hyper::header::HeaderValue::from_str(v) {
            r.headers_mut().insert(*k, v);
        }
    }
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
/// waiting while [`STREAM_CHUNKS`] are on their way; an error once the client is gone.
pub(crate) struct ChunkWriter {
    tx: mpsc::Sender<Bytes>,
    buf: Vec<u8>,
}

/// A writer for a stream's thread and the body its connection sends.
pub(crate) fn channel() -> (ChunkWriter, mpsc::Receiver<Bytes>) {
    let (tx, rx) = mpsc::channel(STREAM_CHUNKS);
    (ChunkWriter { tx, buf: Vec::new() }, rx)
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
        let chunk = Bytes::from(std::mem::take(&mut self.buf));
        self.tx.blocking_send(chunk).map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the client went away"))
    }
}

//! `POST /api/control`: the run's control API ([`zcpipe_core::control`]) over HTTP, for
//! whoever holds the token (`--http-token-file`, `$ZCPIPE_HTTP_TOKEN`). Without a token the
//! route does not exist (404, as any unknown path).
//!
//! A request must say `Authorization: Bearer <token>` (compared in constant time) and carry
//! an [`zcpipe_core::control::Ask`] as its body, exactly the JSON `zcpipe ctl` sends on the
//! run's control socket, with a `Content-Length` of at most [`super::MAX_BODY`] bytes,
//! checked before anything is read. The publish stage reads the body (within
//! [`BODY_TIMEOUT`]), checks it as the socket does ([`control::parse_ask`]: a malformed one
//! gets the socket's refusal) and asks the run on its control socket, on one of the server's
//! blocking threads (at most [`MAX_CALLS`] at once, so pictures and stats keep theirs); the
//! run's [`control::Answer`] comes back as it is, with status 200, refusals too. A run that
//! cannot be reached is 502 with a one-line JSON error.
//!
//! Wrong tokens are rate-limited per client address: more than [`MAX_FAILURES`] wrong or
//! missing tokens within [`WINDOW`] (from the first) and every request from that address is
//! 429 until the window ends, without looking at its token; logged once per window with the
//! address's count, never with the token given.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper::body::{Body as _, Incoming};
use hyper::{Method, Request};
use tokio::sync::Semaphore;
use zcpipe_core::control::{self, Answer, Refusal};
use zcpipe_core::secret::Secret;

use super::{lock, Reply, Shared, MAX_BODY};

/// The route's path.
pub(crate) const PATH: &str = "/api/control";

/// Wrong or missing tokens an address may send within [`WINDOW`]; one more is 429.
pub(crate) const MAX_FAILURES: u32 = 5;

/// The window wrong tokens are counted over, from the first.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);

/// Addresses whose wrong tokens are counted at once; a new one past that replaces the
/// address whose window began first.
const MAX_ADDRESSES: usize = 4096;

/// How long a client may take to send the body it declared.
const BODY_TIMEOUT: Duration = Duration::from_secs(5);

/// Requests asked of the run at once (each holds one of the server's blocking threads).
const MAX_CALLS: usize = 2;

/// The route's state: the token, where the run listens, the wrong tokens per address.
pub(crate) struct Control {
    token: Secret,
    /// The run's control socket.
    socket: PathBuf,
    strikes: Mutex<HashMap<IpAddr, Strikes>>,
    calls: Arc<Semaphore>,
    /// Requests refused for their token (401, and 429 while an address is held off).
    pub(crate) refused: AtomicU64,
    /// Requests the run applied (`done`).
    pub(crate) changed: AtomicU64,
}

/// An address's wrong or missing tokens.
struct Strikes {
    /// When its window began (its first wrong token in it).
    since: Instant,
    /// Wrong tokens, then requests held off, within the window.
    in_window: u32,
    /// Requests refused for their token since it was first counted.
    total: u64,
}

impl Control {
    /// The route asking the run whose run directory is `run_dir`, for holders of `token`.
    pub(crate) fn new(token: Secret, run_dir: &Path) -> Control {
        Control {
            token,
            socket: run_dir.join(control::SOCKET),
            strikes: Mutex::new(HashMap::new()),
            calls: Arc::new(Semaphore::new(MAX_CALLS)),
            refused: AtomicU64::new(0),
            changed: AtomicU64::new(0),
        }
    }

    /// Whether `header` is `Bearer <the token>` (the scheme in any case); the comparison
    /// takes the same time wherever the token given differs.
    fn authorized(&self, header: Option<&hyper::header::HeaderValue>) -> bool {
        let Some(v) = header.map(|h| h.as_bytes()) else { return false };
        let Some(space) = v.iter().position(|b| *b == b' ') else { return false };
        let (scheme, given) = v.split_at(space);
        scheme.eq_ignore_ascii_case(b"Bearer") && same_secret(given.trim_ascii(), self.token.expose().as_bytes())
    }

    /// While `ip` is held off: the time left (the request is counted, its token not looked at).
    fn held_off(&self, ip: IpAddr, now: Instant) -> Option<Duration> {
        let mut m = lock(&self.strikes);
        let s = m.get_mut(&ip)?;
        let left = WINDOW.checked_sub(now.duration_since(s.since)).filter(|l| !l.is_zero())?;
        if s.in_window <= MAX_FAILURES {
            return None;
        }
        s.in_window = s.in_window.saturating_add(1);
        s.total += 1;
        Some(left)
    }

    /// Counts a wrong or missing token from `ip`: the time it is held off from now on, when
    /// this one was one too many (logged, with the address's count).
    fn strike(&self, ip: IpAddr, now: Instant) -> Option<Duration> {
        let mut m = lock(&self.strikes);
        if !m.contains_key(&ip) && m.len() >= MAX_ADDRESSES {
            m.retain(|_, s| now.duration_since(s.since) < WINDOW);
            if m.len() >= MAX_ADDRESSES {
                if let Some(oldest) = m.iter().min_by_key(|(_, s)| s.since).map(|(a, _)| *a) {
                    m.remove(&oldest);
                }
            }
        }
        let s = m.entry(ip).or_insert(Strikes { since: now, in_window: 0, total: 0 });
        if now.duration_since(s.since) >= WINDOW {
            (s.since, s.in_window) = (now, 0);
        }
        s.in_window += 1;
        s.total += 1;
        if s.in_window <= MAX_FAILURES {
            return None;
        }
        let left = WINDOW.saturating_sub(now.duration_since(s.since));
        log::warn!(
            "web view: {} wrong or missing tokens for {PATH} from {ip} within {} s: its requests are answered 429 for {} s ({} refused from it so far)",
            s.in_window,
            WINDOW.as_secs(),
            left.as_secs_f64().ceil(),
            s.total
        );
        Some(left)
    }
}

/// `given == token`, in a time that depends on the token's length alone.
fn same_secret(given: &[u8], token: &[u8]) -> bool {
    let mut diff = u8::from(given.len() != token.len());
    for (i, t) in token.iter().enumerate() {
        diff |= t ^ given.get(i).copied().unwrap_or(0);
    }
    std::hint::black_box(diff) == 0
}

/// A one-line JSON error.
fn error(status: u16, message: &str) -> Reply {
    Reply::new(status, "application/json", format!("{}\n", serde_json::json!({ "error": message })).into_bytes())
}

/// The run's answer (or one in its form), status 200.
fn answer(reply: control::Reply) -> Reply {
    let body = serde_json::to_vec(&Answer { version: control::VERSION, reply }).unwrap_or_default();
    Reply::new(200, "application/json", body)
}

/// 429 for `left` more.
fn held(left: Duration) -> Reply {
    let secs = (left.as_secs_f64().ceil() as u64).max(1);
    error(429, &format!("too many wrong tokens from this address: try again in {secs} s"))
        .header("Retry-After", &secs.to_string())
}

/// `POST /api/control` from `ip`: see the module's documentation.
pub(crate) async fn serve(s: &Shared, c: &Control, rq: Request<Incoming>, ip: IpAddr) -> Reply {
    if rq.method() != Method::POST {
        return error(405, &format!("{PATH} takes POST only")).header("Allow", "POST");
    }
    let declared =
        rq.headers().get(hyper::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    if rq.headers().contains_key(hyper::header::TRANSFER_ENCODING) || declared.is_some_and(|n| n > MAX_BODY as u64) {
        s.refused_body(declared);
        return error(413, &format!("a control request has at most {MAX_BODY} bytes, with a Content-Length"))
            .header("Connection", "close");
    }
    let Some(len) = declared else {
        return error(411, &format!("a control request needs a Content-Length (at most {MAX_BODY} bytes)"));
    };
    let now = Instant::now();
    if let Some(left) = c.held_off(ip, now) {
        c.refused.fetch_add(1, Ordering::Relaxed);
        return held(left);
    }
    if !c.authorized(rq.headers().get(hyper::header::AUTHORIZATION)) {
        c.refused.fetch_add(1, Ordering::Relaxed);
        return match c.strike(ip, now) {
            Some(left) => held(left),
            None => error(401, "no valid token: send Authorization: Bearer TOKEN, the token of --http-token-file or $ZCPIPE_HTTP_TOKEN")
                .header("WWW-Authenticate", "Bearer"),
        };
    }
    let bytes = match read_body(rq.into_body(), len as usize).await {
        Ok(b) => b,
        Err(e) => return error(400, &e),
    };
    let request = match control::parse_ask(&bytes) {
        Ok(r) => r,
        Err(refusal) => return answer(refusal),
    };
    // As it goes to the run: what the control socket takes at most.
    let size = serde_json::to_vec(&control::Ask { version: control::VERSION, request: request.clone() })
        .map_or(0, |v| v.len());
    if size > control::MAX_MESSAGE {
        return error(
            413,
            &format!("a control request of {size} bytes is over the {} bytes the run reads", control::MAX_MESSAGE),
        );
    }
    let Ok(permit) = c.calls.clone().try_acquire_owned() else {
        return answer(control::Reply::Refused {
            error: Refusal::Busy,
            message: format!("{MAX_CALLS} control requests over HTTP are being applied; try again"),
        });
    };
    let op = serde_json::to_value(&request).ok().and_then(|v| v["op"].as_str().map(String::from)).unwrap_or_default();
    let socket = c.socket.clone();
    let called = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        // The connection waits meanwhile ([`super::server`]).
        control::call(&socket, request, control::ANSWER_WAIT)
    })
    .await;
    match called {
        Ok(Ok(reply)) => {
            if matches!(reply, control::Reply::Done { .. }) {
                let n = c.changed.fetch_add(1, Ordering::Relaxed) + 1;
                log::info!("web view: {op} from {ip} applied (changes over HTTP so far: {n})");
            }
            answer(reply)
        }
        Ok(Err(e)) => error(
            502,
            &format!("the run's control socket did not answer: {e:#}; is zcpipe run running with this run directory?"),
        ),
        Err(e) => error(500, &format!("the web view failed on this request: {e}")),
    }
}

/// The body of `len` bytes the request declared, within [`BODY_TIMEOUT`].
async fn read_body(mut body: Incoming, len: usize) -> Result<Vec<u8>, String> {
    let mut buf = Vec::with_capacity(len.min(MAX_BODY));
    let read = async {
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            let frame = frame.map_err(|e| format!("reading the request's body: {e}"))?;
            if let Ok(data) = frame.into_data() {
                if buf.len() + data.len() > len.min(MAX_BODY) {
                    return Err("the body is longer than its Content-Length".to_string());
                }
                buf.extend_from_slice(&data);
            }
        }
        Ok(())
    };
    match tokio::time::timeout(BODY_TIMEOUT, read).await {
        Ok(Ok(())) => Ok(buf),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(format!("the body did not come within {} s", BODY_TIMEOUT.as_secs())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole_and_wrong_ones_hold_an_address_off_for_the_window() {
        let c = Control::new(Secret::new("0123456789abcdef"), Path::new("/run/x"));
        let h = |v: &str| hyper::header::HeaderValue::from_str(v).unwrap();
        assert!(c.authorized(Some(&h("Bearer 0123456789abcdef"))));
        assert!(c.authorized(Some(&h("bearer  0123456789abcdef "))));
        for wrong in ["Bearer 0123456789abcdeF", "Bearer 0123456789abcde", "Bearer 0123456789abcdef0", "Basic x", ""] {
            assert!(!c.authorized(Some(&h(wrong))), "{wrong}");
        }
        assert!(!c.authorized(None));
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.5".parse().unwrap(), "10.0.0.6".parse().unwrap());
        let t0 = Instant::now();
        for _ in 0..MAX_FAILURES {
            assert_eq!((c.held_off(a, t0), c.strike(a, t0)), (None, None));
        }
        assert_eq!(c.strike(a, t0 + Duration::from_secs(10)), Some(Duration::from_secs(50)), "the 6th: held off");
        assert_eq!(c.held_off(a, t0 + Duration::from_secs(59)), Some(Duration::from_secs(1)));
        assert_eq!(c.held_off(b, t0 + Duration::from_secs(59)), None, "another address is not");
        assert_eq!(c.held_off(a, t0 + WINDOW), None, "the window ended");
        assert_eq!(c.strike(a, t0 + WINDOW), None, "a new window");
        assert_eq!(lock(&c.strikes)[&a].total, 8);
    }
}

//! Network streams (`rtsp://`, `rtsps://`, `http(s)://`, anything ffmpeg opens by URL): a
//! live source that reconnects.
//!
//! At open, `ffprobe` reads the stream's size and rate (with the same transport and an I/O
//! timeout of [`IO_TIMEOUT`], so a dead host fails in seconds); then ffmpeg decodes it to
//! packed NV12 on its stdout, as for `video:` ([`super::ffmpeg`]), with low-latency input
//! options (`-fflags nobuffer -flags low_delay`, a 1 s analysis), RTSP over TCP unless
//! `--rtsp-transport udp`. The stage does not pace it: [`FrameSource::wait_frame`] polls
//! ffmpeg's stdout for at most the stage's idle wait, and the capture timestamp is the
//! frame's arrival.
//!
//! When the stream drops (ffmpeg exits, a frame is cut short, or nothing arrives for
//! [`IO_TIMEOUT`] plus [`STALL_GRACE`]) one warning is logged and the source reconnects by
//! itself with back-off ([`BACKOFF_FIRST`] doubling to [`BACKOFF_MAX`], reset by a frame),
//! each attempt a fresh ffprobe then ffmpeg, never blocking the stage loop: it keeps
//! reporting and obeys its stop flag. The gap is counted (reconnects, stream drops, seconds,
//! frames lost at the nominal rate) in [`FrameSource::facts`], and the first frame after it
//! carries the frames lost ([`FrameSource::take_gap`]).
//!
//! The pool is sized once, at open, for the stream's size then (or `--size WxH`; 1920x1080
//! when `--wait-for-camera` starts without a camera). A stream whose size changes (a
//! re-configured camera, seen at a reconnect's probe) is re-negotiated, never refused: a
//! size that fits the pool's buffers goes on at its own size (each frame's layout carries
//! it); a larger one is scaled down by ffmpeg to fit, keeping its aspect ratio. Either way
//! one line says so.
//!
//! The URL, which may hold a password or a token, is never on ffmpeg's or ffprobe's command
//! line (every local user can read those in /proc): they read it from a concat list on
//! their stdin ([`net_input`]). Every message shows it redacted ([`redact_url`]) and quotes
//! the tools' stderr scrubbed ([`scrub_secrets`]).

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::ffmpeg::{parse_probe, read_packed_nv12, Child, FrameRead, VideoProbe, PROBE_ARGS};
use super::image::STRIDE_ALIGN;
use super::spec::{redact_url, scrub_secrets};
use super::{FrameSource, SourceInfo};
use zcpipe_core::config::Choice;
use zcpipe_core::frame::FrameLayout;
use zcpipe_core::stage::Extras;

/// ffmpeg's and ffprobe's socket I/O timeout: a dead host or a silent stream fails after it.
pub(crate) const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Added to [`IO_TIMEOUT`] before the source itself gives up on a tool: a probe that has not
/// answered, or a stream that sent no frame, is killed then.
pub(crate) const STALL_GRACE: Duration = Duration::from_secs(3);
/// The first wait before a reconnect attempt.
pub const BACKOFF_FIRST: Duration = Duration::from_secs(1);
/// The longest wait between reconnect attempts (the wait doubles up to it).
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// The pool's frame size when `--wait-for-camera` starts without the camera and no `--size`.
pub(crate) const WAIT_DEFAULT_SIZE: (u32, u32) = (1920, 1080);
/// How long a frame, once its first bytes arrived, may take to arrive whole.
const FRAME_READ_LIMIT: Duration = Duration::from_secs(2);

/// `--rtsp-transport`: how RTSP carries the media.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RtspTransport {
    /// Interleaved in the RTSP TCP connection (no loss, passes NAT and firewalls).
    #[default]
    Tcp,
    /// RTP over UDP (lower latency on a clean LAN; loses packets under load).
    Udp,
}

impl Choice for RtspTransport {
    const ALL: &'static [(Self, &'static str, &'static str)] = &[
        (RtspTransport::Tcp, "tcp", "RTP interleaved in the RTSP TCP connection (default): no loss, passes firewalls"),
        (RtspTransport::Udp, "udp", "RTP over UDP: lower latency on a clean network, loses packets under load"),
    ];
}

/// How to open a network stream (from the capture options).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct NetworkOptions {
    /// RTSP transport (`rtsp://`, `rtsps://` only).
    pub transport: RtspTransport,
    /// Start without the camera and wait for it (`--wait-for-camera`), instead of failing.
    pub wait_for_camera: bool,
    /// The pool's frame size, width x height in pixels (`--size`); default: the stream's.
    pub size: Option<(u32, u32)>,
    /// `--fps`: ffmpeg's fps filter converts the stream to this rate.
    pub fps: Option<f64>,
}

/// Whether `url` is RTSP (takes `-rtsp_transport` and the RTSP `-timeout`).
pub fn is_rtsp(url: &str) -> bool {
    let l = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    l.starts_with("rtsp://") || l.starts_with("rtsps://")
}

/// A network input as ffmpeg and ffprobe get it: the URL, which may hold a password or a
/// token, never in their command line (every local user can read a process's arguments in
/// /proc). They read a one-entry concat list on stdin ([`Child::spawn_fed`]) naming the URL
/// with its input options; the command line has only [`NetInput::args`].
pub(crate) struct NetInput {
    /// The options before and including `-i pipe:0`: low latency (no input buffering,
    /// low-delay decoding, a 1 s / 500 kB analysis), the protocols a network stream may use,
    /// and the concat list on stdin.
    pub args: Vec<String>,
    /// The list (`ffconcat version 1.0`, the URL quoted, then its options: the RTSP
    /// transport and socket timeout in µs, or the protocol read/write timeout for other
    /// schemes, and the low-latency input options again for the stream itself).
    pub list: String,
}

/// The protocols ffmpeg may open for a network stream: the list on stdin (`pipe`), RTSP's
/// and HTTP's transports; never `file`.
const NET_PROTOCOLS: &str = "pipe,tcp,udp,rtp,srtp,tls,http,https,httpproxy,crypto,data";

/// How ffmpeg and ffprobe open `url` with `transport` without it in their arguments.
pub(crate) fn net_input(url: &str, transport: RtspTransport) -> NetInput {
    let us = IO_TIMEOUT.as_micros().to_string();
    let mut args: Vec<String> = LOW_LATENCY.iter().map(|s| s.to_string()).collect();
    args.extend(["-protocol_whitelist", NET_PROTOCOLS, "-f", "concat", "-safe", "0", "-i", "pipe:0"].map(String::from));
    let mut options: Vec<(&str, &str)> = vec![];
    if is_rtsp(url) {
        options.extend([("rtsp_transport", transport.name()), ("timeout", us.as_str())]);
    } else {
        options.push(("rw_timeout", us.as_str()));
    }
    options.extend(LOW_LATENCY_FORMAT);
    let mut list = format!("ffconcat version 1.0\nfile {}\n", concat_quote(url));
    for (k, v) in options {
        list.push_str(&format!("option {k} {v}\n"));
    }
    NetInput { args, list }
}

/// `s` as one token of a concat list: in single quotes, a quote in it written `'\''`.
fn concat_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// ffmpeg's low-latency input options.
const LOW_LATENCY: [&str; 8] =
    ["-fflags", "nobuffer", "-flags", "low_delay", "-probesize", "500000", "-analyzeduration", "1000000"];

/// The stream's own low-latency options (those of [`LOW_LATENCY`] that its demuxer takes).
const LOW_LATENCY_FORMAT: [(&str, &str); 3] =
    [("fflags", "nobuffer"), ("probesize", "500000"), ("analyzeduration", "1000000")];

/// The ffmpeg filter that makes every output frame exactly `out` pixels (padded to even
/// sizes), whatever the input is: scaled to fit keeping its aspect ratio, then padded
/// (centred). For an input of size `out` both steps pass the frame through; the size is
/// pinned so that a stream changing size inside one connection cannot change the frame
/// size under the reader. An fps filter first if `fps` is given.
fn filter(out: (u32, u32), fps: Option<f64>) -> String {
    let mut f = Vec::new();
    if let Some(fps) = fps {
        f.push(format!("fps={fps}"));
    }
    let (w, h) = out;
    f.push(format!("scale={w}:{h}:force_original_aspect_ratio=decrease"));
    f.push(format!("pad={}:{}:(ow-iw)/2:(oh-ih)/2", w.div_ceil(2) * 2, h.div_ceil(2) * 2));
    f.join(",")
}

/// The size frames of a `stream`-sized stream go out at, given the pool's `pool` size: the
/// stream's own if it fits, else scaled down to fit keeping the aspect ratio (even sizes,
/// at least 2x2).
pub fn fit(stream: (u32, u32), pool: (u32, u32)) -> (u32, u32) {
    if stream.0 <= pool.0 && stream.1 <= pool.1 {
        return stream;
    }
    let s = (pool.0 as f64 / stream.0 as f64).min(pool.1 as f64 / stream.1 as f64);
    let even = |v: f64, max: u32| ((v.round() as u32).min(max) & !1).max(2);
    (even(stream.0 as f64 * s, pool.0), even(stream.1 as f64 * s, pool.1))
}

/// Where the connection is.
enum State {
    /// Waiting for `at` before the next attempt.
    Down { at: Instant },
    /// ffprobe is looking at the stream.
    Probing { probe: Child, since: Instant },
    /// ffmpeg is decoding; frames go out at `out` pixels. `tee` reads its copy of the
    /// encoded stream for the recorder (declared after `ffmpeg`: dropped after it ended).
    Streaming { ffmpeg: Child, out: FrameLayout, since: Instant, _tee: Option<super::record::Tee> },
}

/// The counters a network source reports.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct NetStats {
    /// Frames delivered.
    pub frames: u64,
    /// Times the stream came back after it dropped.
    pub reconnects: u64,
    /// Times the stream dropped (ffmpeg ended, a frame was cut short, or it went silent).
    pub drops: u64,
    /// Connection attempts that failed (probe or stream start).
    pub failed_attempts: u64,
    /// Frames lost in the gaps, estimated from the nominal rate.
    pub frames_lost: u64,
    /// Seconds without frames in the gaps (last frame before to first frame after).
    pub gap_s: f64,
    /// Times the stream came back at another size.
    pub size_changes: u64,
}

/// A network stream decoded by ffmpeg, reconnected when it drops.
pub(crate) struct NetworkSource {
    info: SourceInfo,
    url: String,
    shown: String,
    opts: NetworkOptions,
    /// The pool's frame size (what every frame must fit).
    pool: (u32, u32),
    /// The stream's size at the last probe (`None` before the first).
    stream: Option<(u32, u32)>,
    /// Frames per second at the last probe (or `--fps`), for the frames-lost estimate.
    fps: f64,
    state: State,
    backoff: Duration,
    /// When the last frame arrived.
    last_frame: Option<Instant>,
    /// The stream dropped at this instant, after its last frame at `.1`; closed by the next frame.
    gap: Option<(Instant, Option<Instant>)>,
    /// Frames lost in the gap the last frame closed, until taken.
    pending_gap: Option<u64>,
    stats: NetStats,
    /// The link to the run's recorder, when this camera is recorded.
    record: Option<std::sync::Arc<super::record::Recording>>,
}

impl NetworkSource {
    /// Probes `url` and starts ffmpeg on it. A stream that cannot be opened is an error
    /// naming the URL (redacted) and ffprobe's reason, unless `opts.wait_for_camera`: then
    /// the source starts without it (pool sized by `opts.size` or [`WAIT_DEFAULT_SIZE`]) and
    /// connects when it can. Returns early with an error if `stop` is set while probing.
    /// `record`: the camera's link to the recorder (each stream's packets go to it too).
    pub fn open(
        url: &str,
        opts: &NetworkOptions,
        stop: &AtomicBool,
        record: Option<std::sync::Arc<super::record::Recording>>,
    ) -> anyhow::Result<NetworkSource> {
        let shown = redact_url(url);
        let mut probe = spawn_probe(url, opts.transport)?;
        let since = Instant::now();
        let first = loop {
            match finish_probe(&mut probe, url, since)? {
                Some(r) => break r,
                None if stop.load(Ordering::Relaxed) => bail!("camera {shown}: stopped while connecting"),
                None => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        drop(probe);
        let (pool, stream) = match &first {
            Ok(p) => (opts.size.unwrap_or((p.width, p.height)), Some((p.width, p.height))),
            Err(why) if !opts.wait_for_camera => {
                bail!("cannot open camera {shown}: {why}; check the URL, the credentials and that the camera is reachable (or pass --wait-for-camera to wait for it)")
            }
            Err(why) => {
                let pool = opts.size.unwrap_or(WAIT_DEFAULT_SIZE);
                log::warn!(
                    "camera {shown} is not reachable yet ({why}); waiting for it (--wait-for-camera), retrying every {}..{} s; \
                     pool sized for {}x{}{}",
                    BACKOFF_FIRST.as_secs(),
                    BACKOFF_MAX.as_secs(),
                    pool.0,
                    pool.1,
                    if opts.size.is_some() { " (--size)" } else { " (pass --size WxH for the camera's size); a larger stream is scaled down to it" }
                );
                (pool, None)
            }
        };
        let fps = opts.fps.or(first.as_ref().ok().map(|p| p.fps).filter(|f| *f > 0.0));
        let layout = FrameLayout::nv12(pool.0, pool.1, STRIDE_ALIGN);
        let transport = if is_rtsp(url) { format!(", {}", opts.transport.name()) } else { String::new() };
        let info = SourceInfo {
            description: format!("{shown} {}x{} NV12 (live{transport})", pool.0, pool.1),
            max_width: pool.0,
            max_height: pool.1,
            fps: fps.unwrap_or(30.0),
            max_frame_bytes: layout.bytes_needed(),
        };
        let mut s = NetworkSource {
            info,
            url: url.to_string(),
            shown,
            opts: opts.clone(),
            pool,
            stream: None,
            fps: fps.unwrap_or(0.0),
            state: State::Down { at: Instant::now() + BACKOFF_FIRST },
            backoff: BACKOFF_FIRST,
            last_frame: None,
            gap: None,
            pending_gap: None,
            stats: NetStats::default(),
            record,
        };
        if let (Ok(p), Some(_)) = (first, stream) {
            s.start_stream(p)?;
        }
        Ok(s)
    }

    /// The counters so far.
    #[cfg(test)]
    pub fn stats(&self) -> NetStats {
        self.stats
    }

    /// Whether ffmpeg is streaming now.
    pub fn connected(&self) -> bool {
        matches!(self.state, State::Streaming { .. })
    }

    /// Starts ffmpeg on a probed stream: the output size fits the pool ([`fit`]); a size
    /// other than the last probe's is logged (re-negotiated).
    fn start_stream(&mut self, p: VideoProbe) -> anyhow::Result<()> {
        let size = (p.width, p.height);
        let out = fit(size, self.pool);
        match self.stream {
            Some(old) if old != size => {
                self.stats.size_changes += 1;
                if out == size {
                    log::info!(
                        "camera {}: the stream is now {}x{} (was {}x{}): re-negotiated, frames go on at the new size (it fits the pool's {}x{} buffers)",
                        self.shown, size.0, size.1, old.0, old.1, self.pool.0, self.pool.1
                    );
                }
            }
            _ => {}
        }
        if out != size && self.stream != Some(size) {
            log::info!(
                "camera {}: the stream is {}x{}, larger than the pool's {}x{} buffers: ffmpeg scales it to {}x{} (keeping its aspect ratio)",
                self.shown, size.0, size.1, self.pool.0, self.pool.1, out.0, out.1
            );
        }
        self.stream = Some(size);
        if self.opts.fps.is_none() && p.fps > 0.0 {
            self.fps = p.fps;
        }
        let mut args: Vec<String> = ["-nostdin", "-loglevel", "error"].iter().map(|s| s.to_string()).collect();
        let input = net_input(&self.url, self.opts.transport);
        args.extend(input.args);
        args.extend(["-an", "-f", "rawvideo", "-pix_fmt", "nv12", "-vf"].iter().map(|s| s.to_string()));
        args.push(filter(out, self.opts.fps));
        args.push("pipe:1".into());
        let (fd, tee) = match super::record::tee_for(self.record.as_deref(), &self.shown, &p)? {
            Some((fd, tee)) => {
                args.extend(super::record::TEE_ARGS.iter().map(|s| s.to_string()));
                (Some(fd), Some(tee))
            }
            None => (None, None),
        };
        let ffmpeg = Child::spawn_teed("ffmpeg", &args, Some(input.list.as_bytes()), fd)?;
        let out = FrameLayout::nv12(out.0, out.1, STRIDE_ALIGN);
        self.state = State::Streaming { ffmpeg, out, since: Instant::now(), _tee: tee };
        Ok(())
    }

    /// The stream dropped (`why`, scrubbed of secrets): one warning, then reconnect after
    /// the back-off. The gap starts at the last frame.
    fn dropped(&mut self, why: &str) {
        self.stats.drops += 1;
        let now = Instant::now();
        if self.gap.is_none() {
            self.gap = Some((now, self.last_frame));
        }
        log::warn!(
            "camera {}: stream dropped ({}); reconnecting (back-off {}..{} s, the pipeline stays up)",
            self.shown,
            scrub_secrets(why, &self.url),
            self.backoff.as_secs(),
            BACKOFF_MAX.as_secs()
        );
        self.state = State::Down { at: now + self.backoff };
    }

    /// The stream started at `since` ended (`why`): a drop if it delivered a frame, else a
    /// failed attempt (the back-off grows).
    fn stream_lost(&mut self, why: &str, since: Instant) {
        if self.last_frame.is_some_and(|l| l >= since) {
            self.dropped(why);
        } else {
            self.attempt_failed(why);
        }
    }

    /// A connection attempt failed: wait longer before the next one.
    fn attempt_failed(&mut self, why: &str) {
        self.stats.failed_attempts += 1;
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
        log::info!(
            "camera {}: not back yet ({}); next attempt in {} s",
            self.shown,
            scrub_secrets(why, &self.url),
            self.backoff.as_secs()
        );
        self.state = State::Down { at: Instant::now() + self.backoff };
    }

    /// A whole frame arrived: closes a gap (counted, announced, and handed to the next
    /// [`FrameSource::take_gap`]) and resets the back-off.
    fn got_frame(&mut self) {
        let now = Instant::now();
        self.stats.frames += 1;
        self.backoff = BACKOFF_FIRST;
        if let Some((dropped_at, last)) = self.gap.take() {
            let gap = now - last.unwrap_or(dropped_at);
            let lost =
                if self.fps > 0.0 { ((gap.as_secs_f64() * self.fps).round() as u64).saturating_sub(1) } else { 0 };
            self.stats.reconnects += 1;
            self.stats.gap_s += gap.as_secs_f64();
            self.stats.frames_lost += lost;
            self.pending_gap = Some(lost);
            log::info!(
                "camera {}: back after {:.1} s without frames; ~{lost} frames lost{} (reconnect {})",
                self.shown,
                gap.as_secs_f64(),
                if self.fps > 0.0 { format!(" at {:.1} fps", self.fps) } else { " (rate unknown)".into() },
                self.stats.reconnects
            );
        }
        self.last_frame = Some(now);
    }
}

/// What ended a stream that had been up `secs`, in words: named from ffmpeg's last lines
/// (`tail`) where they say (refused, timed out, reset, credentials, no such stream, bad
/// data), else from how its output ended (`why`: the end of its output is the server
/// closing the stream). ffmpeg's own lines follow only where they are the reason (a
/// decoder's warnings before the server closed the stream are not).
fn drop_cause(why: &str, secs: f64, status: &str, tail: &str) -> String {
    let t = tail.to_ascii_lowercase();
    let (cause, say_tail) = match named_cause(tail) {
        Some(c) => (c, false),
        None if why == "the stream ended" => ("the server closed the stream", false),
        None if ["invalid data", "error while decoding", "decode_slice", "corrupt"].iter().any(|w| t.contains(w)) => {
            ("a decoder error", true)
        }
        None => (why, true),
    };
    let detail = if say_tail && !tail.is_empty() { format!(": {tail}") } else { String::new() };
    format!("{cause} after {secs:.1} s (ffmpeg {status}){detail}")
}

/// What ffmpeg's last lines (`tail`) say went wrong with the connection, in words, if they
/// name it: refused, timed out, reset, credentials refused, no such stream.
fn named_cause(tail: &str) -> Option<&'static str> {
    let t = tail.to_ascii_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| t.contains(w));
    // Whole phrases only: ffmpeg's packet-loss lines hold numbers like 401 and 1404.
    if has(&["connection refused"]) {
        Some("the camera refused the connection")
    } else if has(&["timed out"]) {
        Some("the connection timed out")
    } else if has(&["connection reset", "broken pipe"]) {
        Some("the connection was reset")
    } else if has(&["401 unauthorized", "server returned 401"]) {
        Some("the camera refused the credentials (401)")
    } else if has(&["404 not found", "server returned 404"]) {
        Some("the camera has no such stream (404)")
    } else if has(&["protocol not found"]) {
        Some("ffmpeg does not know the URL's scheme (a typo in rtsp://?)")
    } else {
        None
    }
}

/// The last `n` of the ` | `-joined lines of a stderr tail ([`Child::stderr_tail`]), each
/// without ffmpeg's `[context @ 0xADDRESS] ` prefix, and without what the concat list on
/// stdin ([`net_input`]) adds: its name (`pipe:0: `) and its "Impossible to open" line.
fn last_lines(tail: &str, n: usize) -> String {
    let v: Vec<&str> = tail
        .split(" | ")
        .map(|l| match (l.strip_prefix('['), l.find("] ")) {
            (Some(inner), Some(end)) if inner[..end - 1].contains(" @ 0x") => &l[end + 2..],
            _ => l,
        })
        .filter(|l| !l.starts_with("Impossible to open '"))
        .map(|l| l.strip_prefix("pipe:0: ").unwrap_or(l))
        .collect();
    v[v.len().saturating_sub(n)..].join(" | ")
}

/// Starts ffprobe on `url` ([`PROBE_ARGS`], its [`net_input`] with `transport`).
fn spawn_probe(url: &str, transport: RtspTransport) -> anyhow::Result<Child> {
    let mut args: Vec<String> = PROBE_ARGS.iter().map(|s| s.to_string()).collect();
    let input = net_input(url, transport);
    args.extend(input.args);
    Child::spawn_fed("ffprobe", &args, Some(input.list.as_bytes()))
}

/// Whether the probe started at `since` finished: `None` while it runs (killed, and an
/// `Err` reason, once it ran [`IO_TIMEOUT`] + [`STALL_GRACE`]); then the stream's size and
/// rate, or why not (one line, secrets scrubbed).
fn finish_probe(probe: &mut Child, url: &str, since: Instant) -> anyhow::Result<Option<Result<VideoProbe, String>>> {
    let Some(status) = probe.try_wait()? else {
        if since.elapsed() > IO_TIMEOUT + STALL_GRACE {
            probe.kill();
            return Ok(Some(Err(format!("no answer within {} s", (IO_TIMEOUT + STALL_GRACE).as_secs()))));
        }
        return Ok(None);
    };
    let out = probe.read_stdout();
    if !status.success() {
        let tail = scrub_secrets(&last_lines(&probe.stderr_tail(), 3), url);
        return Ok(Some(Err(match named_cause(&tail) {
            Some(cause) => cause.to_string(),
            None => format!("ffprobe failed ({status}): {tail}"),
        })));
    }
    Ok(Some(parse_probe(&out).map_err(|why| scrub_secrets(&why, url))))
}

/// A reader of a child's stdout that waits at most until `deadline` for each read (poll(2)
/// first), so a stalled writer cannot hold the stage loop.
struct DeadlineReader<'a> {
    inner: &'a mut std::process::ChildStdout,
    deadline: Instant,
}

impl std::io::Read for DeadlineReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if !readable(self.inner, left)? {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the rest of the frame did not arrive"));
        }
        self.inner.read(buf)
    }
}

/// Whether `fd` is readable (data, or end of file) within `wait` (also for the MPP
/// demuxer's pipe, [`super::mpp`]).
pub(super) fn readable(fd: &impl AsFd, wait: Duration) -> std::io::Result<bool> {
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    let ms = PollTimeout::try_from(wait.as_millis().min(i32::MAX as u128) as i32).unwrap_or(PollTimeout::MAX);
    match poll(&mut fds, ms) {
        Ok(0) => Ok(false),
        Ok(_) => Ok(true),
        Err(nix::errno::Errno::EINTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

impl FrameSource for NetworkSource {
    fn info(&self) -> &SourceInfo {
        &self.info
    }

    /// Live: frames arrive when the camera sends them.
    fn live(&self) -> bool {
        true
    }

    /// Drives the connection for at most about `timeout`: polls ffmpeg's stdout while
    /// streaming (a stream silent past [`IO_TIMEOUT`] + [`STALL_GRACE`] is dropped), checks
    /// a running probe, or starts the next attempt when its back-off is over. `true`: a
    /// frame is arriving, [`FrameSource::fill`] reads it.
    fn wait_frame(&mut self, timeout: Duration) -> anyhow::Result<bool> {
        match &mut self.state {
            State::Streaming { ffmpeg, since, .. } => {
                let Some(stdout) = ffmpeg.stdout() else { return Ok(false) };
                if readable(stdout, timeout)? {
                    return Ok(true);
                }
                let since = *since;
                let quiet = self.last_frame.map_or(since, |l| l.max(since));
                if quiet.elapsed() > IO_TIMEOUT + STALL_GRACE {
                    ffmpeg.kill();
                    self.stream_lost(&format!("no frame for {} s", quiet.elapsed().as_secs()), since);
                }
                Ok(false)
            }
            State::Probing { probe, since } => {
                let since = *since;
                match finish_probe(probe, &self.url, since)? {
                    None => std::thread::sleep(timeout.min(Duration::from_millis(20))),
                    Some(Ok(p)) => self.start_stream(p)?,
                    Some(Err(why)) => self.attempt_failed(&why),
                }
                Ok(false)
            }
            State::Down { at } => {
                let now = Instant::now();
                if now < *at {
                    std::thread::sleep(timeout.min(*at - now));
                    return Ok(false);
                }
                self.state = State::Probing { probe: spawn_probe(&self.url, self.opts.transport)?, since: now };
                Ok(false)
            }
        }
    }

    /// Reads the frame [`FrameSource::wait_frame`] saw arriving into `dst`. `Ok(None)`: no
    /// frame now (not streaming, or the stream just dropped: logged, reconnecting); a live
    /// source never ends by itself.
    fn fill(&mut self, dst: &mut [u8]) -> anyhow::Result<Option<FrameLayout>> {
        let State::Streaming { ffmpeg, out, since, .. } = &mut self.state else { return Ok(None) };
        let l = *out;
        let need = l.bytes_needed() as usize;
        if dst.len() < need {
            bail!(
                "camera {}: buffer of {} bytes is too small for a {}x{} NV12 frame ({need} bytes)",
                self.shown,
                dst.len(),
                l.width,
                l.height
            );
        }
        let Some(stdout) = ffmpeg.stdout() else { return Ok(None) };
        let mut r = DeadlineReader { inner: stdout, deadline: Instant::now() + FRAME_READ_LIMIT };
        let res = read_packed_nv12(&mut r, dst, &l);
        let why = match res {
            Ok(FrameRead::Full) => {
                self.got_frame();
                return Ok(Some(l));
            }
            Ok(FrameRead::Eof) => "the stream ended".to_string(),
            Ok(FrameRead::Short { got, expected }) => format!("a frame cut short at {got} of {expected} bytes"),
            Err(e) => format!("reading ffmpeg's output: {e}"),
        };
        let since = *since;
        ffmpeg.close_stdout();
        // ffmpeg ends by itself after its stdout closed or its input ended; one that does
        // not within a moment is killed.
        let t = Instant::now();
        let status = loop {
            match ffmpeg.try_wait()? {
                Some(st) => break st.to_string(),
                None if t.elapsed() > Duration::from_millis(300) => {
                    ffmpeg.kill();
                    break "killed".to_string();
                }
                None => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        let tail = last_lines(&ffmpeg.stderr_tail(), 3);
        self.stream_lost(&drop_cause(&why, since.elapsed().as_secs_f64(), &status, &tail), since);
        Ok(None)
    }

    fn take_gap(&mut self) -> Option<u64> {
        self.pending_gap.take()
    }

    fn facts(&self) -> Extras {
        let s = self.stats;
        let (sw, sh) = self.stream.unwrap_or((0, 0));
        let gaps =
            crate::report::ReconnectFacts { reconnects: s.reconnects, frames_lost: s.frames_lost, gap_s: s.gap_s };
        let mut f = vec![
            ("url", self.shown.clone().into()),
            ("live", true.into()),
            (
                "rtsp_transport",
                if is_rtsp(&self.url) { self.opts.transport.name().into() } else { serde_json::Value::Null },
            ),
            ("connected", self.connected().into()),
            ("stream_width", sw.into()),
            ("stream_height", sh.into()),
            ("pool_width", self.pool.0.into()),
            ("pool_height", self.pool.1.into()),
            ("nominal_fps", self.fps.into()),
            ("stream_drops", s.drops.into()),
            ("failed_attempts", s.failed_attempts.into()),
            ("size_changes", s.size_changes.into()),
        ];
        f.extend(gaps.pairs());
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_keeps_a_stream_that_fits_and_scales_a_larger_one_down() {
        assert_eq!(fit((768, 432), (768, 432)), (768, 432));
        assert_eq!(fit((640, 360), (768, 432)), (640, 360));
        assert_eq!(fit((1280, 720), (768, 432)), (768, 432));
        assert_eq!(fit((1920, 1080), (640, 480)), (640, 360));
        assert_eq!(fit((1000, 3000), (768, 432)), (144, 432));
        assert_eq!(fit((16384, 2), (64, 48)), (64, 2));
    }

    #[test]
    fn a_network_input_keeps_the_url_out_of_the_arguments() {
        let i = net_input("rtsp://u:pa'ss@h/x", RtspTransport::Tcp);
        assert!(!i.args.iter().any(|a| a.contains("pa") || a.contains("h/x")), "{:?}", i.args);
        assert_eq!(i.args[..4], ["-fflags", "nobuffer", "-flags", "low_delay"]);
        assert_eq!(i.args[i.args.len() - 6..], ["-f", "concat", "-safe", "0", "-i", "pipe:0"]);
        assert_eq!(
            i.list,
            "ffconcat version 1.0\nfile 'rtsp://u:pa'\\''ss@h/x'\noption rtsp_transport tcp\noption timeout 5000000\n\
             option fflags nobuffer\noption probesize 500000\noption analyzeduration 1000000\n"
        );
        assert!(net_input("RTSPS://h/x", RtspTransport::Udp).list.contains("option rtsp_transport udp\n"));
        let http = net_input("http://h/x", RtspTransport::Tcp).list;
        assert!(http.contains("option rw_timeout 5000000\n") && !http.contains("rtsp"), "{http}");
    }

    #[test]
    fn a_drop_is_named_for_what_happened() {
        let closed = drop_cause("the stream ended", 12.34, "exit status: 0", "co located POCs unavailable");
        assert_eq!(closed, "the server closed the stream after 12.3 s (ffmpeg exit status: 0)");
        let refused = drop_cause("the stream ended", 0.5, "exit status: 1", "rtsp://cam: Connection refused");
        assert_eq!(refused, "the camera refused the connection after 0.5 s (ffmpeg exit status: 1)");
        let reset = drop_cause("reading ffmpeg's output: x", 3.0, "killed", "Connection reset by peer");
        assert!(reset.starts_with("the connection was reset after 3.0 s"), "{reset}");
        let bad = drop_cause(
            "a frame cut short at 5 of 10 bytes",
            1.0,
            "exit status: 1",
            "Invalid data found when processing input",
        );
        assert_eq!(
            bad,
            "a decoder error after 1.0 s (ffmpeg exit status: 1): Invalid data found when processing input"
        );
        // Packet-loss lines with 401 or 404 in their numbers are not a cause.
        let lossy =
            drop_cause("the stream ended", 9.0, "exit status: 0", "RTP: missed 401 packets | concealing 1404 DC");
        assert_eq!(lossy, "the server closed the stream after 9.0 s (ffmpeg exit status: 0)");
        let other = drop_cause("a frame cut short at 5 of 10 bytes", 1.0, "killed", "");
        assert_eq!(other, "a frame cut short at 5 of 10 bytes after 1.0 s (ffmpeg killed)");
    }

    #[test]
    fn last_lines_drops_ffmpeg_context_prefixes() {
        let t = "a | [tcp @ 0x55] Connection to tcp://h:1 failed: Connection refused | [x] y | rtsp://h:1/x: Connection refused";
        assert_eq!(
            last_lines(t, 3),
            "Connection to tcp://h:1 failed: Connection refused | [x] y | rtsp://h:1/x: Connection refused"
        );
        assert_eq!(last_lines("(no stderr)", 3), "(no stderr)");
        let t = "[rtsp @ 0x5] method DESCRIBE failed: 401 Unauthorized | [concat @ 0x6] Impossible to open 'rtsp://u:p@h/x' | pipe:0: Server returned 401 Unauthorized (authorization failed)";
        assert_eq!(
            last_lines(t, 3),
            "method DESCRIBE failed: 401 Unauthorized | Server returned 401 Unauthorized (authorization failed)"
        );
    }

    #[test]
    fn filter_pins_the_output_size() {
        assert_eq!(
            filter((768, 432), None),
            "scale=768:432:force_original_aspect_ratio=decrease,pad=768:432:(ow-iw)/2:(oh-ih)/2"
        );
        assert_eq!(
            filter((75, 45), Some(5.0)),
            "fps=5,scale=75:45:force_original_aspect_ratio=decrease,pad=76:46:(ow-iw)/2:(oh-ih)/2"
        );
    }

    /// An unreachable camera: one line naming the URL without its password, and the reason
    /// ffprobe gave, in words, within a few seconds (port 1 on 127.0.0.1 refuses at once).
    #[test]
    fn unreachable_camera_is_one_line_without_the_password() {
        let stop = AtomicBool::new(false);
        let url = "rtsp://user:secret@127.0.0.1:1/x";
        let e = NetworkSource::open(url, &NetworkOptions::default(), &stop, None).err().expect("unreachable");
        let msg = format!("{e:#}");
        println!("{msg}");
        assert!(msg.contains("rtsp://user:***@127.0.0.1:1/x: the camera refused the connection;"), "{msg}");
        assert!(!msg.contains("secret") && !msg.contains('\n'), "{msg}");
    }

    /// `--wait-for-camera`: no error; the source waits (down), retrying with back-off and
    /// counting the failed attempts, and each wait returns within its timeout.
    #[test]
    fn wait_for_camera_starts_down_and_retries() {
        let stop = AtomicBool::new(false);
        let opts = NetworkOptions { wait_for_camera: true, size: Some((64, 48)), ..Default::default() };
        let mut s = NetworkSource::open("rtsp://u:pw@127.0.0.1:1/x", &opts, &stop, None).unwrap();
        assert_eq!((s.info().max_width, s.info().max_height), (64, 48));
        assert!(!s.info().description.contains("pw@"), "{}", s.info().description);
        let mut buf = vec![0u8; s.info().max_frame_bytes as usize];
        let t = Instant::now();
        while s.stats().failed_attempts < 2 && t.elapsed() < Duration::from_secs(20) {
            let t0 = Instant::now();
            assert!(!s.wait_frame(Duration::from_millis(100)).unwrap());
            assert!(t0.elapsed() < Duration::from_secs(1), "one wait took {:?}", t0.elapsed());
            assert!(s.fill(&mut buf).unwrap().is_none());
        }
        assert_eq!(s.stats().failed_attempts, 2);
        assert_eq!(s.backoff, Duration::from_secs(4));
        let facts =
            serde_json::to_string(&s.facts().into_iter().collect::<std::collections::BTreeMap<_, _>>()).unwrap();
        assert!(facts.contains("rtsp://u:***@127.0.0.1:1/x") && !facts.contains("pw@"), "{facts}");
    }
}

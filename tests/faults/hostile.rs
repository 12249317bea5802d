//! Hostile peers on the control and data paths (issue 11): this test program plays an
//! impostor against the real stage processes (`zcpipe stage <name>`, started one by one in a
//! private run directory), one case at a time, and checks that each is refused with a log
//! line naming the peer (pid, uid) and the reason, that the stages it did not kill keep
//! their pids and frames keep reaching a detections client, and that the refusals are
//! counted exactly in the stages' reports.
//!
//! - As a consumer, on a producing stage's socket while its consumer is served: garbage, an
//!   oversized and a truncated message, an offer (with fds of the wrong kind) instead of a
//!   hello, a valid hello, silence, a flood of connections.
//! - As an upstream, on the socket of a stage that died, to the consumer that re-joins it:
//!   garbage, oversized, truncated, a hello instead of an offer, an fd count that does not
//!   match, an absurd ring geometry, absurd buffer sizes, a pipe or a directory where a
//!   memfd, an eventfd or a dma-buf belongs, a memfd without seals and a regular file that
//!   it then shrinks, a copy-mode offer; then a valid offer followed by descriptors with
//!   out-of-range indices, planes past the buffer, absurd sizes, and corrupt ring indices.
//! - As a consumer that joined for real: return tokens for buffers it never got, then
//!   corrupt ring indices (the producer hangs up on it and serves the next one).
//! - As the infer stage, to the publish stage that re-joins it (the detections hop).
//!
//! `a_foreign_user_is_refused_by_so_peercred` runs the pipeline as uid 65534 and connects
//! from uid 65533 (root only; skipped otherwise).

use crate::common;

use common::wait_for;

use std::io::{BufRead, BufReader};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use zcpipe::core::channel::Doorbell;
use zcpipe::core::detections::DetectionsDesc;
use zcpipe::core::dmabuf::sealed_memfd;
use zcpipe::core::fdpass;
use zcpipe::core::frame::{Fourcc, FrameDesc, FrameLayout};
use zcpipe::core::link::{Conn, ControlMsg, Listener, Offer, Payload, PeerGone, WaitMode, WantedInput};
use zcpipe::core::pool::join;
use zcpipe::core::ring::{RingConsumer, RingGeometry, RingPolicy, RingProducer};
use zcpipe::infer::{Detector, NoDetector};

static NEVER: AtomicBool = AtomicBool::new(false);

/// How long any one expected thing may take before the test fails (generous: the host is
/// shared; nothing is timed, only waited for).
const PATIENCE: Duration = Duration::from_secs(20);

/// Word indices of a ring's header (`src/core/ring.rs`: `W_HEAD`, `W_TAIL`), for the cases
/// that scribble on them through [`RingConsumer::scribble_word`].
const W_HEAD: usize = 8;
const W_TAIL: usize = 16;

/// Bytes of one 320x240 NV12 frame (testsrc:320x240): the buffers an impostor offers.
const BUF: u64 = 320 * 240 * 3 / 2;

/// One stage process started alone, its stderr kept line by line. Killed (SIGKILL, this
/// process's own child) if the test fails half-way.
struct StageProc {
    name: &'static str,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    status: Option<ExitStatus>,
}

impl StageProc {
    /// `zcpipe stage NAME --run-dir DIR/run --stats-interval 0 ARGS` (reports every second,
    /// the heartbeat, as `report {json}` debug lines), as `uid` (and its gid) if given.
    fn start(dir: &Path, name: &'static str, args: &[&str], uid: Option<u32>) -> StageProc {
        let mut c = common::zcpipe();
        c.args(["stage", name, "--run-dir"])
            .arg(dir.join("run"))
            .args(["--stats-interval", "0"])
            .args(args)
            .env("RUST_LOG", "zcpipe=info,zcpipe_core::metrics=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(u) = uid {
            c.uid(u).gid(u);
        }
        let mut child = c.spawn().unwrap_or_else(|e| panic!("starting the {name} stage: {e}"));
        let err = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(vec![]));
        let l = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                l.lock().unwrap().push(line);
            }
        });
        StageProc { name, child, lines, status: None }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Whether it still runs (a stage that took SIGBUS, panicked or exited does not).
    fn alive(&mut self) -> bool {
        if self.status.is_none() {
            self.status = self.child.try_wait().unwrap();
        }
        self.status.is_none()
    }

    /// Its log, without the report lines.
    fn log(&self) -> String {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| !l.contains(": debug: report {"))
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Waits for a log line holding every one of `parts`, and returns it. Fails at once if
    /// the stage died.
    fn expect(&mut self, parts: &[&str]) -> String {
        let t = Instant::now();
        loop {
            if let Some(l) = self.lines.lock().unwrap().iter().find(|l| parts.iter().all(|p| l.contains(p))) {
                return l.clone();
            }
            assert!(
                self.alive(),
                "the {} stage died ({:?}) before saying {parts:?}:\n{}",
                self.name,
                self.status,
                self.log()
            );
            assert!(
                t.elapsed() < PATIENCE,
                "the {} stage did not say {parts:?} within {PATIENCE:?}:\n{}",
                self.name,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Lines holding `part`.
    fn count(&self, part: &str) -> usize {
        self.lines.lock().unwrap().iter().filter(|l| l.contains(part)).count()
    }

    /// Its reports so far (`report {json}` debug lines), oldest first.
    fn reports(&self) -> Vec<Value> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| l.split_once(": debug: report ").and_then(|(_, j)| serde_json::from_str(j).ok()))
            .collect()
    }

    /// Waits until its latest report satisfies `f`, and returns that report.
    fn report_where(&mut self, what: &str, f: impl Fn(&Value) -> bool) -> Value {
        let ok = wait_for(PATIENCE, || self.reports().last().is_some_and(&f));
        let last = self.reports().last().cloned().unwrap_or(Value::Null);
        assert!(ok, "the {} stage never reported {what}; last report: {last}\n{}", self.name, self.log());
        last
    }

    fn signal(&self, s: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), s).unwrap();
    }

    /// Waits for it to exit (after the stream ended) and returns its status and final report.
    fn finish(&mut self) -> (ExitStatus, Value) {
        let ok = wait_for(Duration::from_secs(30), || !self.alive());
        assert!(ok, "the {} stage did not exit:\n{}", self.name, self.log());
        // The reader thread takes the last lines after the pipe closes.
        wait_for(Duration::from_secs(5), || self.reports().last().is_some_and(|r| r["final_report"] == true));
        let last = self
            .reports()
            .into_iter()
            .rfind(|r| r["final_report"] == true)
            .unwrap_or_else(|| panic!("no final report from {}:\n{}", self.name, self.log()));
        (self.status.unwrap(), last)
    }
}

impl Drop for StageProc {
    fn drop(&mut self) {
        if self.alive() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A detections client: every line with when it came.
fn client(path: PathBuf) -> Arc<Mutex<Vec<(Instant, Value)>>> {
    let seen = Arc::new(Mutex::new(vec![]));
    let s = seen.clone();
    std::thread::spawn(move || {
        let t = Instant::now();
        let sock = loop {
            match UnixStream::connect(&path) {
                Ok(c) => break c,
                Err(_) if t.elapsed() < Duration::from_secs(120) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => panic!("detections socket {}: {e}", path.display()),
            }
        };
        for line in BufReader::new(sock).lines() {
            let Ok(line) = line else { break };
            s.lock().unwrap().push((Instant::now(), serde_json::from_str(&line).unwrap_or(Value::Null)));
        }
    });
    seen
}

/// Waits for a frame line after `t` (the pipeline runs end to end).
fn frames_flow(seen: &Mutex<Vec<(Instant, Value)>>, t: Instant, what: &str) {
    let ok = wait_for(Duration::from_secs(60), || {
        seen.lock().unwrap().iter().any(|(at, v)| *at > t && v["type"] == "frame")
    });
    assert!(ok, "no frame reached the client {what}");
}

/// The refusal lines the test saw, printed at the end (`--nocapture` shows them).
#[derive(Default)]
struct Said(Vec<(String, String)>);

impl Said {
    fn note(&mut self, case: &str, line: String) {
        self.0.push((case.to_string(), line));
    }
}

impl Drop for Said {
    fn drop(&mut self) {
        for (case, line) in &self.0 {
            println!("hostile: {case:<44} {line}");
        }
    }
}

/// A connection to a stage's socket that must end closed by the stage: reads (up to
/// PATIENCE) until end of file and returns what came before it.
fn closed_by_peer(c: &Conn) -> Vec<ControlMsg> {
    c.set_recv_timeout(Some(PATIENCE)).unwrap();
    let mut got = vec![];
    loop {
        match c.recv() {
            Ok((m, _)) => got.push(m),
            Err(e) if PeerGone::is_in(&e) => return got,
            Err(e) => panic!("the stage did not close the connection: {e:#}"),
        }
    }
}

fn connect(path: &Path) -> Conn {
    Conn::try_connect(path).unwrap().unwrap_or_else(|| panic!("nothing listens on {}", path.display()))
}

fn hello(stage: &str, want: Option<WantedInput>) -> ControlMsg {
    ControlMsg::Hello { stage: stage.into(), accept: vec![], want, wait: WaitMode::Eventfd }
}

/// What the infer stage (`--infer none`) asks the scale stage for.
fn infer_none_wants() -> WantedInput {
    let d = NoDetector::new();
    let s = d.input_spec();
    WantedInput {
        width: s.width,
        height: s.height,
        fourcc: s.fourcc.0,
        stride_align: 1,
        bytesperline: s.bytesperline,
        pad: s.letterbox.pad,
        placement: s.letterbox.placement,
    }
}

/// The fds of a well-formed frame hop: a ring, two doorbells, two sealed memfds of [`BUF`].
struct Hop {
    ring: RingProducer<FrameDesc>,
    bell: Doorbell,
    back: Doorbell,
    bufs: Vec<OwnedFd>,
}

impl Hop {
    fn new() -> Hop {
        Hop {
            ring: RingProducer::create(3, 4).unwrap(),
            bell: Doorbell::new().unwrap(),
            back: Doorbell::new().unwrap(),
            bufs: (0..2).map(|_| sealed_memfd("impostor", BUF, true).unwrap()).collect(),
        }
    }

    /// An offer of this hop (its ring's geometry, `buffers` as claimed).
    fn offer(&self, buffers: Vec<Vec<u64>>) -> Offer {
        frames_offer(self.ring.geometry(), buffers)
    }

    /// Every fd, in offer order.
    fn fds(&self) -> Vec<BorrowedFd<'_>> {
        let mut v = vec![self.ring.fd().as_fd(), self.bell.as_fd(), self.back.as_fd()];
        v.extend(self.bufs.iter().map(|b| b.as_fd()));
        v
    }
}

fn frames_offer(ring: RingGeometry, buffers: Vec<Vec<u64>>) -> Offer {
    Offer {
        payload: Payload::Frames,
        ring,
        policy: RingPolicy::DropOldest,
        buffers,
        memory: "memfd".into(),
        layout: None,
        fps: 30.0,
        description: "an impostor's frames".into(),
        labels: vec![],
        copy_mode: false,
        max_frame_bytes: 0,
    }
}

fn offer_msg(o: Offer) -> ControlMsg {
    ControlMsg::Offer(o)
}

fn pipe() -> (OwnedFd, OwnedFd) {
    nix::unistd::pipe().unwrap()
}

fn dir_fd(d: &Path) -> OwnedFd {
    OwnedFd::from(std::fs::File::open(d).unwrap())
}

/// A memfd of `size` bytes that can be shrunk (no seals at all).
fn unsealed_memfd(size: u64) -> OwnedFd {
    let fd = nix::sys::memfd::memfd_create(c"unsealed", nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC).unwrap();
    nix::unistd::ftruncate(&fd, size as i64).unwrap();
    fd
}

/// Sends a raw packet of `bytes` (no size check: the point is to exceed it).
fn send_raw(c: &Conn, bytes: &[u8]) {
    let n = nix::sys::socket::send(c.as_fd().as_raw_fd(), bytes, nix::sys::socket::MsgFlags::empty()).unwrap();
    assert_eq!(n, bytes.len());
}

/// An NV12 320x240 descriptor of buffer 0, changed by `f`.
fn desc(seq: u64, f: impl FnOnce(&mut FrameDesc)) -> FrameDesc {
    let mut d = FrameDesc { seq, layout: FrameLayout::nv12(320, 240, 1), ..Default::default() };
    f(&mut d);
    d
}

#[test]
fn hostile_peers_are_refused_and_the_pipeline_runs_on() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let run = d.join("run");
    let det = d.join("detections.sock");
    let me = std::process::id();
    let uid = nix::unistd::geteuid().as_raw();
    let peer = format!("pid {me} uid {uid}");
    let peer = peer.as_str();
    let mut said = Said::default();
    let source = ["--source", "testsrc:320x240@30"];
    let mut capture = StageProc::start(d, "capture", &source, None);
    let mut scale = StageProc::start(d, "scale", &[], None);
    let mut infer = StageProc::start(d, "infer", &["--infer", "none"], None);
    let mut publish = StageProc::start(d, "publish", &["--publish", det.to_str().unwrap()], None);
    let seen = client(det.clone());
    frames_flow(&seen, Instant::now(), "at start");
    let (scale_pid, publish_pid) = (scale.pid(), publish.pid());

    // ---- A. An impostor consumer on capture.sock while scale is served. ----
    let sock = run.join("capture.sock");
    let so_far = |k: u32| format!("({k} so far): {peer}: ");
    // Garbage.
    let c = connect(&sock);
    fdpass::send(c.as_fd(), b"\xff\xfe this is not json {", &[]).unwrap();
    said.note("consumer: garbage", capture.expect(&[&so_far(1), "malformed control message from pid"]));
    assert!(closed_by_peer(&c).is_empty());
    // Oversized: 100 KiB in one packet (the limit is 64 KiB).
    let c = connect(&sock);
    send_raw(&c, &vec![b'{'; 100 * 1024]);
    said.note("consumer: oversized", capture.expect(&[&so_far(2), "payload truncated (MSG_TRUNC): over 65536 bytes"]));
    assert!(closed_by_peer(&c).is_empty());
    // Truncated: the first half of a valid hello.
    let c = connect(&sock);
    let h = serde_json::to_vec(&hello("scale", None)).unwrap();
    fdpass::send(c.as_fd(), &h[..h.len() / 2], &[]).unwrap();
    said.note(
        "consumer: truncated hello",
        capture.expect(&[&so_far(3), "malformed control message", "EOF while parsing"]),
    );
    assert!(closed_by_peer(&c).is_empty());
    // Another kind of message, with fds of the wrong kind (a pipe, a directory).
    let c = connect(&sock);
    let (r, _w) = pipe();
    let hop = Hop::new();
    c.send(&offer_msg(hop.offer(vec![])), &[r.as_fd(), dir_fd(d).as_fd()]).unwrap();
    said.note(
        "consumer: an offer with a pipe and a dir",
        capture.expect(&[&so_far(4), "sent an offer instead of a hello (with 2 fds, closed)"]),
    );
    assert!(closed_by_peer(&c).is_empty());
    // A valid hello while the hop serves scale: told why, and closed.
    let c = connect(&sock);
    c.send(&hello("scale", None), &[]).unwrap();
    let why = format!("this hop already serves pid {scale_pid}");
    said.note("consumer: a second scale stage", capture.expect(&[&so_far(5), &why]));
    let got = closed_by_peer(&c);
    assert!(matches!(&got[..], [ControlMsg::Refuse { error }] if *error == why), "{got:?}");
    // Silence.
    let c = connect(&sock);
    said.note("consumer: silence", capture.expect(&[&so_far(6), "no hello within 1s"]));
    assert!(closed_by_peer(&c).is_empty());
    // A flood: 12 silent connections at once (8 may wait for a hello at a time).
    let flood: Vec<Conn> = (0..12).map(|_| connect(&sock)).collect();
    said.note("consumer: flood (last of 12)", capture.expect(&[&so_far(18)]));
    for c in &flood {
        assert!(closed_by_peer(c).is_empty());
    }
    let full = capture.count("connections already wait to say hello");
    let silent = capture.count("no hello within 1s");
    assert_eq!(full + silent, 4 + 1 + 8, "the flood: {full} refused at once, {silent} timed out");
    assert!(full >= 1, "12 connections at once, 8 may wait: some are refused at once");
    said.note("consumer: flood (one refused at once)", capture.expect(&["8 connections already wait to say hello"]));
    // The other producing stages refuse a second consumer the same way.
    let c = connect(&run.join("scale.sock"));
    c.send(&hello("infer", Some(infer_none_wants())), &[]).unwrap();
    said.note(
        "consumer: a second infer stage",
        scale.expect(&["(1 so far)", peer, &format!("this hop already serves pid {}", infer.pid())]),
    );
    assert_eq!(closed_by_peer(&c).len(), 1);
    let c = connect(&run.join("infer.sock"));
    c.send(&hello("publish", None), &[]).unwrap();
    said.note(
        "consumer: a second publish stage",
        infer.expect(&["(1 so far)", peer, &format!("this hop already serves pid {publish_pid}")]),
    );
    assert_eq!(closed_by_peer(&c).len(), 1);
    frames_flow(&seen, Instant::now(), "after the impostor consumers");
    let r = capture.report_where("18 refusals", |r| r["extra"]["refused"].as_u64() >= Some(18));
    assert_eq!(r["extra"]["refused"], 18, "capture counted every refusal once: {r}");
    let r = infer.report_where("1 refusal", |r| r["extra"]["refused"].as_u64() >= Some(1));
    assert_eq!(r["extra"]["refused"], 1, "{r}");

    // ---- B. An impostor upstream: capture dies, and the impostor answers scale. ----
    let capture_pid = capture.pid();
    capture.signal(nix::sys::signal::Signal::SIGKILL);
    assert!(wait_for(PATIENCE, || !capture.alive()));
    scale.expect(&[&format!("the capture stage (pid {capture_pid}) hung up")]);
    let imp = Listener::bind(&sock).unwrap();
    let mut case = 0u32;
    // Serves the next re-join of scale with `answer`, and waits for scale to refuse it.
    let mut serve = |name: &str, answer: &dyn Fn(&Conn), reason: &[&str], scale: &mut StageProc, said: &mut Said| {
        case += 1;
        let c = imp.accept_until(&NEVER, Some(Instant::now() + PATIENCE)).unwrap();
        assert_eq!(c.peer_pid, scale_pid, "scale re-joins");
        c.set_recv_timeout(Some(PATIENCE)).unwrap();
        assert!(matches!(c.recv().unwrap().0, ControlMsg::Hello { ref stage, .. } if stage == "scale"));
        answer(&c);
        // A re-join may have reached the dying capture stage's socket before it closed (its
        // pid, ECONNRESET): also a refusal, counted before ours. It came before scale
        // connected here, so its line is logged by the time ours is.
        let tail = format!("{peer}: ");
        let mut parts = vec![tail.as_str()];
        parts.extend_from_slice(reason);
        let line = scale.expect(&parts);
        let dead = format!("pid {capture_pid} uid");
        let early = scale
            .lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains("refused what answered as the capture stage") && l.contains(&dead))
            .count();
        let head = format!(
            "refused what answered as the capture stage on {} ({} so far): {peer}: ",
            sock.display(),
            case as usize + early
        );
        assert!(line.contains(&head), "{line}: expected {head}");
        said.note(name, line);
        // Kept open until refused, so that what is refused is the answer, not a hang-up.
        drop(c);
    };
    serve(
        "upstream: garbage",
        &|c| fdpass::send(c.as_fd(), b"\x00\x01 garbage", &[]).unwrap(),
        &["malformed control message from pid"],
        &mut scale,
        &mut said,
    );
    serve("upstream: oversized", &|c| send_raw(c, &vec![b'['; 100 * 1024]), &["(MSG_TRUNC)"], &mut scale, &mut said);
    serve(
        "upstream: truncated offer (with its fds)",
        &|c| {
            let hop = Hop::new();
            let o = serde_json::to_vec(&offer_msg(hop.offer(vec![vec![BUF]; 2]))).unwrap();
            fdpass::send(c.as_fd(), &o[..o.len() / 2], &hop.fds()).unwrap();
        },
        &["malformed control message", "EOF while parsing"],
        &mut scale,
        &mut said,
    );
    serve(
        "upstream: a hello instead of an offer",
        &|c| c.send(&hello("capture", None), &[]).unwrap(),
        &["capture sent a hello instead of an offer (with 0 fds, closed)"],
        &mut scale,
        &mut said,
    );
    serve(
        "upstream: fewer fds than offered",
        &|c| {
            let hop = Hop::new();
            c.send(&offer_msg(hop.offer(vec![vec![BUF]; 2])), &hop.fds()[..3]).unwrap();
        },
        &["capture sent 3 fds, its offer needs 5"],
        &mut scale,
        &mut said,
    );
    serve(
        "upstream: absurd ring geometry",
        &|c| {
            let hop = Hop::new();
            let geo = RingGeometry { capacity: u32::MAX, ..hop.ring.geometry() };
            c.send(&offer_msg(frames_offer(geo, vec![vec![BUF]; 2])), &hop.fds()).unwrap();
        },
        &["capture ring geometry out of range"],
        &mut scale,
        &mut said,
    );
    serve(
        "upstream: absurd buffer sizes",
        &|c| {
            let hop = Hop::new();
            c.send(&offer_msg(hop.offer(vec![vec![1 << 62]; 2])), &hop.fds()).unwrap();
        },
        &["capture's buffer 0", "peer's buffer is 115200 bytes but it claimed 4611686018427387904"],
        &mut scale,
        &mut said,
    );
    serve(
        "upstream: a pipe as the ring",
        &|c| {
            let hop = Hop::new();
            let (r, _w) = pipe();
            let mut fds = hop.fds();
            fds[0] = r.as_fd();
            c.send(&offer_msg(hop.offer(vec![vec![BUF]; 2])), &fds).unwrap();
        },
        &["mapping capture's ring", "ring fd is not a sealed memfd"],
        &mut scale,
        &mut said,
    );
    let dir_text = d.display().to_string();
    serve(
        "upstream: a directory as the doorbell",
        &|c| {
            let hop = Hop::new();
            let dfd = dir_fd(d);
            let mut fds = hop.fds();
            fds[1] = dfd.as_fd();
            c.send(&offer_msg(hop.offer(vec![vec![BUF]; 2])), &fds).unwrap();
        },
        &["capture's doorbell", "the doorbell fd is not an eventfd", &dir_text],
        &mut scale,
        &mut said,
    );
    serve(
        "upstream: a pipe as a buffer",
        &|c| {
            let hop = Hop::new();
            let (r, _w) = pipe();
            let mut fds = hop.fds();
            fds[3] = r.as_fd();
            c.send(&offer_msg(hop.offer(vec![vec![BUF]; 2])), &fds).unwrap();
        },
        &["capture's buffer 0", "peer's buffer fd is a pipe (pipe:[", "neither a dma-buf nor a sealed memfd"],
        &mut scale,
        &mut said,
    );
    serve(
        "upstream: a directory as a buffer",
        &|c| {
            let hop = Hop::new();
            let dfd = dir_fd(d);
            let mut fds = hop.fds();
            fds[4] = dfd.as_fd();
            c.send(&offer_msg(hop.offer(vec![vec![BUF]; 2])), &fds).unwrap();
        },
        &[
            "capture's buffer 1",
            &format!("peer's buffer fd is a directory ({dir_text}): neither a dma-buf nor a sealed memfd"),
        ],
        &mut scale,
        &mut said,
    );
    serve(
        "upstream: an unsealed memfd, then shrunk",
        &|c| {
            let hop = Hop::new();
            let m = unsealed_memfd(BUF);
            let mut fds = hop.fds();
            fds[3] = m.as_fd();
            c.send(&offer_msg(hop.offer(vec![vec![BUF]; 2])), &fds).unwrap();
            nix::unistd::ftruncate(&m, 0).unwrap();
        },
        &["capture's buffer 0", "peer sent a memfd without F_SEAL_SHRINK"],
        &mut scale,
        &mut said,
    );
    serve(
        "upstream: an unsealed ring memfd, then shrunk",
        &|c| {
            let hop = Hop::new();
            let m = unsealed_memfd(hop.ring.geometry().shm_bytes());
            let mut fds = hop.fds();
            fds[0] = m.as_fd();
            c.send(&offer_msg(hop.offer(vec![vec![BUF]; 2])), &fds).unwrap();
            nix::unistd::ftruncate(&m, 0).unwrap();
        },
        &["mapping capture's ring", "ring memfd is not sealed against shrinking"],
        &mut scale,
        &mut said,
    );
    serve(
        "upstream: a regular file as a buffer, then shrunk",
        &|c| {
            let hop = Hop::new();
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(d.join("buffer"))
                .unwrap();
            f.set_len(BUF).unwrap();
            let mut fds = hop.fds();
            fds[3] = f.as_fd();
            c.send(&offer_msg(hop.offer(vec![vec![BUF]; 2])), &fds).unwrap();
            f.set_len(0).unwrap();
        },
        &[
            "capture's buffer 0",
            "peer's buffer fd is a regular file (",
            "that its writer could truncate: neither a dma-buf nor a sealed memfd",
        ],
        &mut scale,
        &mut said,
    );
    serve(
        "upstream: a copy-mode offer (a dir as its socket)",
        &|c| {
            let dfd = dir_fd(d);
            let o = Offer {
                copy_mode: true,
                max_frame_bytes: 1 << 40,
                ..frames_offer(RingGeometry { capacity: 1, slot_bytes: 8, ret_capacity: 1 }, vec![])
            };
            c.send(&offer_msg(o), &[dfd.as_fd()]).unwrap();
        },
        &["capture offered a --copy-mode hop; this stage joined a zero-copy one at set-up"],
        &mut scale,
        &mut said,
    );
    const REFUSED_OFFERS: u32 = 15;
    assert_eq!(case, REFUSED_OFFERS);
    // A valid offer, then descriptors that must each be rejected.
    let c = imp.accept_until(&NEVER, Some(Instant::now() + PATIENCE)).unwrap();
    assert_eq!(c.peer_pid, scale_pid);
    c.set_recv_timeout(Some(PATIENCE)).unwrap();
    c.recv().unwrap();
    let mut hop = Hop::new();
    c.send(&offer_msg(hop.offer(vec![vec![BUF]; 2])), &hop.fds()).unwrap();
    said.note("upstream: a valid offer (joined)", scale.expect(&[&format!("joined the capture stage again ({peer})")]));
    let hostile: [(&str, FrameDesc, &str); 8] = [
        ("an index out of range", desc(0, |d| d.buffer_index = 2), "buffer index 2 out of 2"),
        ("the largest index", desc(1, |d| d.buffer_index = u32::MAX), "buffer index 4294967295 out of 2"),
        (
            "a plane past the buffer",
            desc(2, |d| d.layout.planes[1].offset = 100_000),
            "plane 1: offset 100000 + length 38400 past buffer size 115200",
        ),
        ("an absurd width", desc(3, |d| d.layout.width = 1 << 20), "frame size 1048576x240 out of range"),
        (
            "absurd row and plane lengths",
            desc(4, |d| {
                d.layout.planes[0].bytesperline = u32::MAX;
                d.layout.planes[0].length = u32::MAX;
            }),
            "plane 0: length 4294967295 too small for 240 rows of 4294967295 bytes",
        ),
        ("an unknown fourcc", desc(5, |d| d.layout.fourcc = Fourcc(u32::from_le_bytes(*b"ZZZZ"))), "unknown fourcc"),
        ("200 planes", desc(6, |d| d.layout.num_planes = 200), "NV12 needs 2 planes, descriptor says 200"),
        (
            "a plane in a fd the buffer lacks",
            desc(7, |d| d.layout.planes[0].fd_index = 3),
            "plane 0: fd_index 3 but buffer has 1 fds",
        ),
    ];
    for (k, (name, dd, reason)) in hostile.iter().enumerate() {
        hop.ring.push(*dd, true).unwrap();
        hop.bell.ring();
        let line = scale.expect(&[&format!("rejected a slot from upstream {peer} ({} so far): {reason}", k + 1)]);
        said.note(&format!("descriptor: {name}"), line);
    }
    // Ring indices no producer could write: tail a million slots past head.
    let spy = RingConsumer::<FrameDesc>::attach(hop.ring.fd().try_clone().unwrap(), hop.ring.geometry()).unwrap();
    spy.scribble_word(W_TAIL, 1 << 40);
    hop.bell.ring();
    said.note("descriptor: corrupt ring indices", scale.expect(&[&format!("rejected a slot from upstream {peer} (9 so far): ring indices corrupt: head 8, tail 1099511627776, capacity 3")]));
    assert_eq!(hop.ring.counters().rejected, 9, "scale counted each rejection in the shared counters too");
    drop((spy, hop, c));
    scale.expect(&[&format!("the capture stage (pid {me}) hung up")]);
    drop(imp);
    // The real capture stage comes back; scale re-joins it and frames flow again.
    let mut capture = StageProc::start(d, "capture", &source, None);
    scale.expect(&[&format!("joined the capture stage again (pid {} uid {uid})", capture.pid())]);
    frames_flow(&seen, Instant::now(), "after the impostor upstream");
    for s in [&mut scale, &mut infer, &mut publish] {
        assert!(s.alive(), "the {} stage died:\n{}", s.name, s.log());
    }

    // ---- C. An impostor consumer of scale that joins for real: infer dies first. ----
    let infer_pid = infer.pid();
    infer.signal(nix::sys::signal::Signal::SIGKILL);
    assert!(wait_for(PATIENCE, || !infer.alive()));
    scale.expect(&[&format!("downstream (pid {infer_pid}) hung up")]);
    let ssock = run.join("scale.sock");
    let c = connect(&ssock);
    c.send(&hello("infer", None), &[]).unwrap();
    said.note(
        "consumer: a hello wanting another input",
        scale.expect(&["(2 so far)", peer, "could not serve it", "the infer stage now wants None"]),
    );
    assert!(matches!(&closed_by_peer(&c)[..], [ControlMsg::Refuse { .. }]));
    let c = connect(&ssock);
    let (_, mut rx, _bufs) =
        join::<FrameDesc>(c, &hello("infer", Some(infer_none_wants())), WaitMode::Eventfd, "scale").unwrap();
    scale.expect(&[&format!("the infer stage ({peer}) joined again")]);
    let tokens = [(1u64 << 32) | 1000, 0xdead_beef << 32, u64::MAX];
    for (k, t) in tokens.iter().enumerate() {
        rx.push_return(*t).unwrap();
        let line = scale.expect(&[&format!(
            "the consumer ({peer}) returned token {t:#x} for a buffer it does not hold; ignored ({} so far)",
            k + 1
        )]);
        said.note("consumer: a return token it was never lent", line);
    }
    rx.ring_for_tests().scribble_word(W_HEAD, 7_777_777);
    said.note(
        "consumer: corrupt ring head",
        scale.expect(&[&format!("dropped the consumer ({peer}): consumer corrupted the ring: head 7777777")]),
    );
    assert!(wait_for(PATIENCE, || rx.conn().peer_gone()), "scale hung up on the consumer that corrupted its ring");
    drop(rx);

    // ---- D. An impostor infer stage, to the publish stage that re-joins it. ----
    publish.expect(&[&format!("the infer stage (pid {infer_pid}) hung up")]);
    let isock = run.join("infer.sock");
    let imp = Listener::bind(&isock).unwrap();
    let accept_publish = || {
        let c = imp.accept_until(&NEVER, Some(Instant::now() + PATIENCE)).unwrap();
        assert_eq!(c.peer_pid, publish_pid);
        c.set_recv_timeout(Some(PATIENCE)).unwrap();
        c.recv().unwrap();
        c
    };
    let head =
        |k: u32| format!("refused what answered as the infer stage on {} ({k} so far): {peer}: ", isock.display());
    let c = accept_publish();
    fdpass::send(c.as_fd(), b"}{", &[]).unwrap();
    said.note("upstream of publish: garbage", publish.expect(&[&head(1), "malformed control message"]));
    drop(c);
    let det_ring = RingProducer::<DetectionsDesc>::create(8, 2).unwrap();
    let (bell, back) = (Doorbell::new().unwrap(), Doorbell::new().unwrap());
    let labels = zcpipe::infer::labels::coco80();
    let det_offer = Offer {
        payload: Payload::Detections,
        memory: "none".into(),
        fps: 0.0,
        labels,
        ..frames_offer(det_ring.geometry(), vec![])
    };
    let c = accept_publish();
    let (r, _w) = pipe();
    c.send(&offer_msg(det_offer.clone()), &[r.as_fd(), bell.as_fd(), back.as_fd()]).unwrap();
    said.note(
        "upstream of publish: a pipe as the ring",
        publish.expect(&[&head(2), "mapping infer's ring", "ring fd is not a sealed memfd"]),
    );
    drop(c);
    let c = accept_publish();
    let mut det_ring = det_ring;
    c.send(&offer_msg(det_offer), &[det_ring.fd().as_fd(), bell.as_fd(), back.as_fd()]).unwrap();
    said.note(
        "upstream of publish: a valid offer (joined)",
        publish.expect(&[&format!("joined the infer stage again ({peer})")]),
    );
    let ok = DetectionsDesc { width: 320, height: 240, ..Default::default() };
    let mut nan = ok;
    nan.count = 1;
    nan.dets[0].score = f32::NAN;
    let bad: [(&str, DetectionsDesc, &str); 3] = [
        ("a detection count past the slot", DetectionsDesc { count: 1000, ..ok }, "detection count 1000 > 100"),
        ("a frame of size 0", DetectionsDesc { width: 0, ..ok }, "frame size 0x240 out of range"),
        ("a NaN score", nan, "detection with score NaN"),
    ];
    for (k, (name, dd, reason)) in bad.iter().enumerate() {
        det_ring.push(*dd, true).unwrap();
        bell.ring();
        said.note(
            &format!("detections: {name}"),
            publish.expect(&[&format!("rejected a slot from upstream {peer} ({} so far): {reason}", k + 1)]),
        );
    }
    drop((c, det_ring, bell, back));
    publish.expect(&[&format!("the infer stage (pid {me}) hung up")]);
    drop(imp);
    // The real infer stage comes back: publish and scale serve and re-join it.
    let mut infer = StageProc::start(d, "infer", &["--infer", "none"], None);
    frames_flow(&seen, Instant::now(), "after the impostor consumer and the impostor infer stage");

    // ---- The end: capture ends the stream; every stage drains, reports and exits 0. ----
    for s in [&mut capture, &mut scale, &mut infer, &mut publish] {
        assert!(s.alive(), "the {} stage died:\n{}", s.name, s.log());
    }
    assert_eq!((scale.pid(), publish.pid()), (scale_pid, publish_pid), "scale and publish were never restarted");
    capture.signal(nix::sys::signal::Signal::SIGINT);
    let mut reports = vec![];
    for s in [&mut capture, &mut scale, &mut infer, &mut publish] {
        let (status, report) = s.finish();
        assert_eq!(status.code(), Some(0), "the {} stage: {status}\n{}", s.name, s.log());
        reports.push(report);
    }
    let [_, scale_r, _, publish_r] = &reports[..] else { unreachable!() };
    let x = &scale_r["extra"];
    // Scale refused the second infer stage and the one wanting another input; refused 15
    // offers; rejected 9 descriptors (its own count); took every frame it scaled.
    assert_eq!(x["refused"], 2, "{scale_r}");
    assert_eq!(x["upstream_refused"], REFUSED_OFFERS, "{scale_r}");
    assert_eq!(x["input_rejected"], 9, "{scale_r}");
    assert_eq!(x["input_taken"], scale_r["frames_in"], "{scale_r}");
    assert_eq!(scale_r["pool"]["bad_returns"], tokens.len(), "{scale_r}");
    assert_eq!(scale_r["pool"]["consumers_dropped"], 1, "{scale_r}");
    assert_eq!(scale_r["pool"]["consumers_lost"], 2, "infer #1 died, the impostor was dropped: {scale_r}");
    assert_eq!(x["buffers_still_out"], 0, "{scale_r}");
    let x = &publish_r["extra"];
    assert_eq!(x["upstream_refused"], 2, "{publish_r}");
    assert_eq!(x["input_rejected"], 3, "{publish_r}");
    // Publish sent every line it made to the client, which got each one.
    let lines = seen.lock().unwrap().iter().filter(|(_, v)| v["type"] == "frame" || v["type"] == "notice").count();
    assert_eq!(x["server"]["skipped"], 0, "{publish_r}");
    assert_eq!(x["server"]["sent"], lines, "{publish_r}");
    assert!(seen.lock().unwrap().iter().any(|(_, v)| v["type"] == "end"), "the client got the end line");
    assert_eq!(publish_r["frames_in"], publish_r["frames_out"], "{publish_r}");
}

/// The environment variable that makes [`a_foreign_user_is_refused_by_so_peercred`] the
/// connector it starts as another user: connect to this socket path, say hello, and wait
/// until the stage closes the connection.
const CONNECTOR: &str = "ZCPIPE_HOSTILE_CONNECTOR";

/// The connector's side, run as the foreign user (as this test binary, re-executed): a raw
/// connection (zcpipe's own `Conn` would refuse the stage, another user), a hello, and a
/// read until the stage closes it. Prints `connector pid N closed: true`.
fn connector(path: &str) {
    use nix::sys::socket::{connect, recv, socket, AddressFamily, MsgFlags, SockFlag, SockType, UnixAddr};
    let fd = socket(AddressFamily::Unix, SockType::SeqPacket, SockFlag::SOCK_CLOEXEC, None).unwrap();
    connect(fd.as_raw_fd(), &UnixAddr::new(path).unwrap()).unwrap();
    // The stage may refuse (close) before the hello goes out: EPIPE then, and EOF below.
    let _ = fdpass::send(fd.as_fd(), &serde_json::to_vec(&hello("scale", None)).unwrap(), &[]);
    let tv = nix::sys::time::TimeVal::new(20, 0);
    nix::sys::socket::setsockopt(&fd, nix::sys::socket::sockopt::ReceiveTimeout, &tv).unwrap();
    let mut buf = [0u8; 4096];
    // Closed with our hello unread: ECONNRESET rather than end of file.
    let closed =
        matches!(recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()), Ok(0) | Err(nix::errno::Errno::ECONNRESET));
    println!("connector pid {} closed: {closed}", std::process::id());
}

/// SO_PEERCRED's uid check (`Conn::from_fd`): the pipeline runs as uid 65534; a process of
/// uid 65533 connects to the capture stage's socket, at set-up (before scale came) and
/// while it runs; each connection is refused with a line naming its pid and uid, the stage
/// keeps running and counts both (with a silent and a garbage connection at set-up). Root may connect to any stage by design, hence a third
/// uid. The socket (0600) and its run directory (0700) would stop uid 65533 at connect(2)
/// already: to reach the second layer, the test loosens them after the stage bound the
/// socket (a misconfiguration it simulates), as nothing else gives another user a
/// connection whose SO_PEERCRED is its own. Root only (setuid); skipped otherwise.
#[test]
fn a_foreign_user_is_refused_by_so_peercred() {
    if let Ok(path) = std::env::var(CONNECTOR) {
        return connector(&path);
    }
    if !nix::unistd::geteuid().is_root() {
        println!("skipped: a_foreign_user_is_refused_by_so_peercred runs processes as uids 65534 and 65533, which needs root");
        return;
    }
    const STAGES_UID: u32 = 65534;
    const FOREIGN_UID: u32 = 65533;
    use std::os::unix::fs::PermissionsExt;
    let chmod = |p: &Path, mode: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    chmod(d, 0o711);
    let run = d.join("run");
    std::fs::create_dir(&run).unwrap();
    std::os::unix::fs::chown(&run, Some(STAGES_UID), Some(STAGES_UID)).unwrap();
    chmod(&run, 0o700);
    // Both users must be able to run the binaries (a checkout under a private home cannot).
    let bin = env!("CARGO_BIN_EXE_zcpipe");
    let me = std::env::current_exe().unwrap();
    for (uid, exe, arg) in [(STAGES_UID, Path::new(bin), "--version"), (FOREIGN_UID, me.as_path(), "--list")] {
        let runs = std::process::Command::new(exe)
            .arg(arg)
            .uid(uid)
            .gid(uid)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !runs.is_ok_and(|s| s.success()) {
            println!("skipped: uid {uid} cannot run {} (its folders are private); check out the repository where other users can read it", exe.display());
            return;
        }
    }
    let sock = run.join("capture.sock");
    let foreigner = |what: &str| -> i32 {
        let out = std::process::Command::new(&me)
            .args(["--exact", "a_foreign_user_is_refused_by_so_peercred", "--nocapture", "--test-threads=1"])
            .env(CONNECTOR, &sock)
            .uid(FOREIGN_UID)
            .gid(FOREIGN_UID)
            .output()
            .unwrap();
        let out = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        // The harness prints the test's name first, on the same line.
        let at = out.find("connector pid ").unwrap_or_else(|| panic!("the connector ({what}) said: {out}"));
        let line = out[at..].lines().next().unwrap();
        assert!(line.ends_with("closed: true"), "the stage closed the connection ({what}): {line}");
        line["connector pid ".len()..].split(' ').next().unwrap().parse().unwrap()
    };
    let mut said = Said::default();
    let det = run.join("detections.sock");
    let source = ["--source", "testsrc:320x240@30"];
    let mut capture = StageProc::start(d, "capture", &source, Some(STAGES_UID));
    // Bound, made 0600 and listening (then it says so).
    capture.expect(&["waiting for the scale stage to connect on"]);
    // The simulated misconfiguration: the run directory searchable and the socket writable by all.
    chmod(&run, 0o711);
    chmod(&sock, 0o666);
    // At set-up (no scale stage yet), root's connections first, as anyone's could be:
    // silence and garbage are refused, not waited on for ever nor fatal.
    let root = format!("pid {} uid 0", std::process::id());
    let c = connect(&sock);
    said.note("consumer at set-up: silence", capture.expect(&["(1 so far)", &root, "no hello within 1s"]));
    assert!(closed_by_peer(&c).is_empty());
    let c = connect(&sock);
    fdpass::send(c.as_fd(), b"\x00garbage", &[]).unwrap();
    said.note("consumer at set-up: garbage", capture.expect(&["(2 so far)", &root, "malformed control message"]));
    assert!(closed_by_peer(&c).is_empty());
    let why = |pid: i32| {
        format!("peer pid {pid} runs as uid {FOREIGN_UID}, we run as uid {STAGES_UID}: refusing to share buffers across users")
    };
    let pid = foreigner("at set-up");
    said.note("another user, at set-up", capture.expect(&["(3 so far)", &why(pid)]));
    let mut stages = vec![];
    for (name, args) in
        [("scale", vec![]), ("infer", vec!["--infer", "none"]), ("publish", vec!["--publish", det.to_str().unwrap()])]
    {
        stages.push(StageProc::start(d, name, &args, Some(STAGES_UID)));
    }
    let seen = client(det.clone());
    frames_flow(&seen, Instant::now(), "from the pipeline of uid 65534");
    let pid = foreigner("while running");
    said.note("another user, while running", capture.expect(&["(4 so far)", &why(pid)]));
    frames_flow(&seen, Instant::now(), "after the foreign connections");
    capture.signal(nix::sys::signal::Signal::SIGINT);
    let (status, r) = capture.finish();
    assert_eq!(status.code(), Some(0), "{}", capture.log());
    assert_eq!(r["extra"]["refused"], 4, "{r}");
    for s in &mut stages {
        let (status, _) = s.finish();
        assert_eq!(status.code(), Some(0), "the {} stage: {}", s.name, s.log());
    }
}

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
use zcpipe::core::link::{Conn, ControlMsg, Listener, Offer, Payload, WaitMode, WantedInput};
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
            Err(zcpipe::core::Error::PeerGone { .. }) => return got,
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

mod peers;

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
            .args(["--exact", "hostile::a_foreign_user_is_refused_by_so_peercred", "--nocapture", "--test-threads=1"])
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

/// A socket where another user could replace it is refused before anything starts, with
/// exit code 2 and one line naming the directory: `--publish` and `--run-dir` in a directory
/// others can write (not sticky), or that another user owns. (A sticky one such as `/tmp`
/// is fine: every test's temporary directory is in it.)
#[test]
fn socket_places_another_user_could_change_are_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut cases = vec![
        (
            vec!["--publish".to_string(), open.join("d.sock").display().to_string()],
            format!("--publish {}/d.sock: directory {} has mode 777", open.display(), open.display()),
        ),
        (
            vec!["--run-dir".to_string(), open.join("run").display().to_string()],
            format!("--run-dir {}/run: directory {} has mode 777", open.display(), open.display()),
        ),
    ];
    cases.push((
        vec!["--publish".to_string(), dir.path().join("missing/d.sock").display().to_string()],
        format!("directory {}/missing does not exist", dir.path().display()),
    ));
    if nix::unistd::geteuid().is_root() {
        let theirs = dir.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        cases.push((
            vec!["--publish".to_string(), theirs.join("d.sock").display().to_string()],
            format!("directory {} belongs to uid 65534", theirs.display()),
        ));
    }
    for (args, want) in cases {
        let out = common::zcpipe()
            .args(["run", "--source", "testsrc:320x240@5", "--infer", "none", "--stats-interval", "0"])
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(&want) && err.trim().lines().count() == 1, "{args:?}: {err}");
        println!("EVIDENCE {}", err.trim());
    }
    assert_eq!(std::fs::read_dir(&open).unwrap().count(), 0, "nothing was made there");
}

/// Set in the child that runs a pipeline for [`a_png_bomb_is_refused_before_it_is_decoded`]:
/// it waits for it and prints the largest resident size of its processes.
const RSS_WRAPPER: &str = "ZCPIPE_TEST_RSS_OF";

/// A real PNG bomb (30000x30000 grey, 875 KB of compressed zeros, 900 MB decoded, as
/// another user could drop in a watched folder) is refused by its header: one line, and
/// no process of the run grows past 100 MB.
#[test]
fn a_png_bomb_is_refused_before_it_is_decoded() {
    if let Ok(args) = std::env::var(RSS_WRAPPER) {
        // The wrapper: its children are the run's processes alone.
        let args: Vec<String> = serde_json::from_str(&args).unwrap();
        let out = common::zcpipe().args(&args).output().unwrap();
        let max_kib = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN).unwrap().max_rss();
        println!("rss-wrapper code={:?} max_rss_kib={max_kib}", out.status.code());
        println!("rss-wrapper stderr={}", serde_json::to_string(&String::from_utf8_lossy(&out.stderr)).unwrap());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bomb = dir.path().join("bomb.png");
    let script = r#"
import sys, zlib, struct
W = H = 30000
def chunk(t, d): return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
c = zlib.compressobj(9)
row = b"\0" * (W + 1)
data = b"".join(c.compress(row) for _ in range(H)) + c.flush()
open(sys.argv[1], "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", W, H, 8, 0, 0, 0, 0)) + chunk(b"IDAT", data) + chunk(b"IEND", b""))
"#;
    let made = std::process::Command::new("python3").args(["-c", script]).arg(&bomb).status().unwrap();
    assert!(made.success());
    let size = std::fs::metadata(&bomb).unwrap().len();
    let d = dir.path().display();
    let args = serde_json::to_string(&[
        "run".to_string(),
        format!("--run-dir={d}/run"),
        format!("--publish={d}/d.sock"),
        format!("--source=image:{}", bomb.display()),
        "--infer=none".into(),
        "--stats-interval=0".into(),
    ])
    .unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "hostile::a_png_bomb_is_refused_before_it_is_decoded", "--nocapture", "--test-threads=1"])
        .env(RSS_WRAPPER, args)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    let field = |k: &str| {
        let rest = said.split(k).nth(1).and_then(|r| r.lines().next()).unwrap_or_else(|| panic!("{k} in {said}"));
        if k == "stderr=" {
            rest
        } else {
            rest.split(' ').next().unwrap()
        }
    };
    let max_kib: u64 = field("max_rss_kib=").parse().unwrap();
    let stderr: String = serde_json::from_str(field("stderr=")).unwrap();
    assert_eq!(field("code="), "Some(1)", "{stderr}");
    assert!(
        stderr.contains("the picture is over the decoder's limits (16384 pixels a side, 512 MiB decoded)"),
        "{stderr}"
    );
    assert!(max_kib < 100 * 1024, "a process of the run reached {max_kib} KiB");
    println!("EVIDENCE a {size}-byte PNG of 30000x30000 refused by its header; the run's largest process peaked at {max_kib} KiB");
}

/// A zone of a thousand points (the most a zone may have) reaches the publish stage, which
/// gets its options through a sealed memfd rather than its command line (where one
/// argument is limited to 128 KiB and every local user reads it); a zone of ten thousand is
/// refused before anything starts: exit 2, one line naming the zone (not quoting its 100
/// KB), no socket left behind.
#[test]
fn a_huge_zone_is_one_line_and_the_largest_allowed_one_runs() {
    // Whole pixels: ten thousand points stay under the 128 KiB one argument may have.
    let circle = |n: usize| -> String {
        let p: Vec<String> = (0..n)
            .map(|i| {
                let a = i as f64 * std::f64::consts::TAU / n as f64;
                format!("{:.0},{:.0}", 200.0 + 150.0 * a.cos(), 200.0 + 150.0 * a.sin())
            })
            .collect();
        p.join(",")
    };
    let dir = tempfile::tempdir().unwrap();
    let big = format!("door={}", circle(10_000));
    let out = common::zcpipe_run(dir.path())
        .args(["--source", "testsrc", "--infer", "none", "--frames", "5", "--zone", &big])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(
        err.lines().next().unwrap_or(""),
        format!(
            "zcpipe: error: --zone door=... ({} bytes): 10000 points; a zone has at most 1000 (simplify the polygon)",
            big.len()
        )
    );
    assert!(err.len() < 300, "the zone quoted whole: {} bytes of stderr", err.len());
    assert!(!dir.path().join("run").exists() && !dir.path().join("detections.sock").exists());
    let most = format!("door={}", circle(1_000));
    let out = common::zcpipe_run(dir.path())
        .args(["--source", "testsrc", "--infer", "none", "--frames", "5", "--stats-interval", "0", "--zone", &most])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // The zone reached publish (its tracking line counts zone entries), and frames flowed.
    assert!(err.contains("(bytetrack tracks, zones door)") && err.contains("; zones: 0 entries, 0 exits"), "{err}");
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("summary.json")).unwrap()).unwrap();
    let frames = s["stages"]["publish"]["frames_in"].as_u64().unwrap_or(0);
    assert!((1..=5).contains(&frames), "{s}");
    println!(
        "EVIDENCE huge zone: {} bytes refused in one line; {} bytes (1000 points) reached publish, {frames} frames",
        big.len(),
        most.len()
    );
}

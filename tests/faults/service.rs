//! The inference service against hostile and crashing clients: every bad message is refused
//! with one line, bounded, and leaks nothing; the pipeline's camera and the other clients go
//! on. `make test-service-crashes` runs the kill -9 test 1,000 times
//! (`ZCPIPE_SERVICE_CRASHES`; 20 here).

use std::io::{BufRead, BufReader};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
use serde_json::{json, Value};
use zcpipe::core::dmabuf::sealed_memfd;
use zcpipe::core::fdpass;
use zcpipe::core::service::client::{memfd_with, Client, ClientError};
use zcpipe::core::service::BufferSpec;

use crate::common::{root, stage_pid, wait_for, zcpipe_run};

/// A running pipeline, its stderr read as it comes (a pipe nobody reads would stall it).
/// Dropped unstopped (a failed assertion), it is killed, so no test leaves a pipeline behind.
struct Run {
    child: Option<Child>,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A pipeline (testsrc, no model) serving on `dir/run/npu.sock`, with `extra` flags.
fn start(dir: &Path, extra: &[&str]) -> (Run, PathBuf) {
    let mut child = zcpipe_run(dir)
        .args(["--source", "testsrc", "--fps", "15", "--infer", "none", "--stats-interval", "0"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let sock = extra
        .iter()
        .position(|a| *a == "--serve-socket")
        .map(|i| PathBuf::from(extra[i + 1]))
        .unwrap_or_else(|| dir.join("run/npu.sock"));
    let mut err = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut err, &mut s).unwrap();
        s
    });
    assert!(wait_for(Duration::from_secs(60), || sock.exists()), "no service socket at {}", sock.display());
    (Run { child: Some(child), stderr: Some(stderr) }, sock)
}

/// Stops the run (SIGINT) and returns its stderr and summary.
fn stop(mut run: Run, dir: &Path) -> (String, Value) {
    let (mut child, stderr) = (run.child.take().unwrap(), run.stderr.take().unwrap());
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let status = child.wait().unwrap();
    let err = stderr.join().unwrap();
    assert!(status.success(), "zcpipe run failed: {err}");
    let summary: Value = serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap();
    (err, summary)
}

fn raw(sock: &Path) -> OwnedFd {
    let fd = socket(AddressFamily::Unix, SockType::SeqPacket, SockFlag::SOCK_CLOEXEC, None).unwrap();
    connect(fd.as_raw_fd(), &UnixAddr::new(sock).unwrap()).unwrap();
    let tv = nix::sys::time::TimeVal::new(10, 0);
    nix::sys::socket::setsockopt(&fd, nix::sys::socket::sockopt::ReceiveTimeout, &tv).unwrap();
    fd
}

fn say(fd: &OwnedFd, msg: &Value, fds: &[&OwnedFd]) {
    let fds: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
    fdpass::send(fd.as_fd(), msg.to_string().as_bytes(), &fds).unwrap();
}

/// The next message, or `None` at EOF.
fn hear(fd: &OwnedFd) -> Option<Value> {
    fdpass::recv(fd.as_fd()).unwrap().map(|(p, _)| serde_json::from_slice(&p).unwrap())
}

fn hello(fd: &OwnedFd, name: &str) {
    say(fd, &json!({"type": "hello", "v": 1, "name": name}), &[]);
    assert_eq!(hear(fd).unwrap()["type"], "welcome");
}

fn nv12() -> Value {
    serde_json::to_value(BufferSpec::nv12(64, 48)).unwrap()
}

fn register(fd: &OwnedFd, spec: &Value, buf: &OwnedFd) -> Value {
    say(fd, &json!({"type": "register", "v": 1, "buffers": [spec]}), &[buf]);
    hear(fd).unwrap()
}

/// Asserts the next message refuses, fatally or not, with `needle` in its reason.
fn refused(m: Option<Value>, needle: &str, fatal: bool) {
    let m = m.expect("an answer, not EOF");
    assert_eq!(m["type"], "refused", "{m}");
    assert!(m["reason"].as_str().unwrap().contains(needle), "{m}");
    assert_eq!(m["fatal"], fatal, "{m}");
}

fn fd_count(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// What each open fd of `pid` is (for a failure's message).
fn fd_targets(pid: i32) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return Vec::new() };
    dir.flatten().filter_map(|e| std::fs::read_link(e.path()).ok()).map(|t| t.display().to_string()).collect()
}

/// The infer stage's open fds once it is set up: its service socket is bound before it joins
/// the scale stage and starts its lanes, so a count taken when the socket appears can be short
/// by the ring, pool and control fds that follow. One request answered means the lanes run;
/// then the count must hold still for a second (the warm-up client's hang-up seen).
fn settled_fd_count(sock: &Path, infer: i32) -> usize {
    let mut warm = Client::connect(sock, "warm-up").unwrap();
    let spec = BufferSpec::nv12(64, 48);
    let fd = memfd_with(&vec![128u8; spec.size as usize]).unwrap();
    let i = warm.register(&[(&fd, spec)]).unwrap();
    warm.detect(i).unwrap();
    drop(warm);
    let mut last = fd_count(infer);
    let t = std::time::Instant::now();
    while t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_secs(1));
        let now = fd_count(infer);
        if now == last {
            return now;
        }
        last = now;
    }
    panic!("the infer stage's fd count never settled: {last}");
}

/// A bad fd, layout, index, version or packet is refused with one line; a refused buffer
/// leaves the connection usable; a broken protocol ends it.
fn bad_messages(sock: &Path) {
    let c = raw(sock);
    hello(&c, "hostile");
    let (r, _w) = nix::unistd::pipe().unwrap();
    refused(Some(register(&c, &nv12(), &r)), "neither a dma-buf nor a sealed memfd", false);
    let size = BufferSpec::nv12(64, 48).size;
    let unsealed = nix::sys::memfd::memfd_create(c"x", nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC).unwrap();
    nix::unistd::ftruncate(&unsealed, size as i64).unwrap();
    refused(Some(register(&c, &nv12(), &unsealed)), "without F_SEAL_SHRINK", false);
    let small = sealed_memfd("small", size - 1, true).unwrap();
    refused(Some(register(&c, &nv12(), &small)), "but it claimed", false);
    say(&c, &json!({"type": "detect", "v": 1, "kind": "request", "buffer": 0, "seq": 7}), &[]);
    let m = hear(&c).unwrap();
    refused(Some(m.clone()), "buffer 0 was never registered", false);
    assert_eq!(m["seq"], 7);
    // Still usable: a good buffer registers as index 0.
    let good = sealed_memfd("good", size, true).unwrap();
    assert_eq!(register(&c, &nv12(), &good)["type"], "registered");
    // A stride that does not fit ends the connection.
    let narrow = json!({"format": "nv12", "width": 64, "height": 48, "size": size,
        "planes": [{"offset": 0, "bytesperline": 32}, {"offset": 3072, "bytesperline": 64}]});
    say(&c, &json!({"type": "register", "v": 1, "buffers": [narrow]}), &[&good]);
    refused(hear(&c), "bytesperline 32 < 64", true);
    assert!(hear(&c).is_none(), "the service hangs up after a fatal refusal");

    for (what, packet, needle) in [
        ("not JSON", b"hello".to_vec(), "not a message of the zcpipe inference service protocol"),
        ("another version", br#"{"type":"hello","v":2}"#.to_vec(), "protocol version 2"),
        ("oversized", vec![b' '; 70_000], "truncated"),
    ] {
        let c = raw(sock);
        // The raw call: fdpass refuses to send over 64 KiB itself.
        nix::sys::socket::send(c.as_raw_fd(), &packet, nix::sys::socket::MsgFlags::empty()).unwrap();
        refused(hear(&c), needle, true);
        assert!(hear(&c).is_none(), "{what}: the service hangs up");
    }
    let c = raw(sock);
    say(&c, &json!({"type": "detect", "v": 1, "kind": "video", "buffer": 0, "seq": 0}), &[]);
    refused(hear(&c), "say hello first", true);
}

/// A client registering 10,000 buffers gets `--serve-buffers` of them; the rest are refused,
/// logged once; its fds go when it leaves.
fn buffer_hoarder(sock: &Path, infer: i32) -> usize {
    let before = fd_count(infer);
    let c = raw(sock);
    hello(&c, "hoarder");
    let buf = sealed_memfd("b", BufferSpec::nv12(64, 48).size, true).unwrap();
    let mut ok = 0;
    for _ in 0..10_000 {
        let m = register(&c, &nv12(), &buf);
        if m["type"] == "registered" {
            ok += 1;
        } else {
            refused(Some(m), "the service keeps at most 8 per client", false);
        }
    }
    assert_eq!(ok, 8);
    assert!(fd_count(infer) >= before + 8);
    drop(c);
    assert!(
        wait_for(Duration::from_secs(5), || fd_count(infer) <= before),
        "{} fds after, {before} before",
        fd_count(infer)
    );
    ok
}

/// A flood of `request`s: each gets exactly one answer, detections or `busy`.
fn flood(sock: &Path) {
    let c = raw(sock);
    hello(&c, "flood");
    let buf = memfd_with(&vec![128u8; BufferSpec::nv12(64, 48).size as usize]).unwrap();
    assert_eq!(register(&c, &nv12(), &buf)["type"], "registered");
    for seq in 0..200 {
        say(&c, &json!({"type": "detect", "v": 1, "kind": "request", "buffer": 0, "seq": seq}), &[]);
    }
    let (mut frames, mut busy) = (0, 0);
    for _ in 0..200 {
        match hear(&c).unwrap()["type"].as_str().unwrap() {
            "frame" => frames += 1,
            "busy" => busy += 1,
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!(frames + busy, 200);
    assert!(busy > 0 && frames > 0, "{frames} frames, {busy} busy");
}

#[test]
fn hostile_clients_are_refused_and_the_others_served() {
    let dir = tempfile::tempdir().unwrap();
    let (child, sock) = start(dir.path(), &["--serve-buffers", "8", "--serve-queue", "2"]);
    let infer = stage_pid(dir.path(), "infer").expect("the infer stage runs");
    let fds0 = settled_fd_count(&sock, infer);
    eprintln!("the infer stage's fds at the start: {:?}", fd_targets(infer));
    let t = std::time::Instant::now();
    // A client that never reads its answers, sending video as fast as it can.
    let mute = raw(&sock);
    hello(&mute, "mute");
    let buf = memfd_with(&vec![128u8; BufferSpec::nv12(64, 48).size as usize]).unwrap();
    assert_eq!(register(&mute, &nv12(), &buf)["type"], "registered");
    let flooder = std::thread::spawn(move || {
        for seq in 0..5_000 {
            let m = json!({"type": "detect", "v": 1, "kind": "video", "buffer": 0, "seq": seq});
            nix::sys::socket::send(mute.as_raw_fd(), m.to_string().as_bytes(), nix::sys::socket::MsgFlags::empty())
                .unwrap();
        }
        mute
    });
    bad_messages(&sock);
    buffer_hoarder(&sock, infer);
    flood(&sock);
    // Meanwhile a well-behaved client is served.
    let mut good = Client::connect(&sock, "good").unwrap();
    let spec = BufferSpec::nv12(64, 48);
    let fd = memfd_with(&vec![128u8; spec.size as usize]).unwrap();
    let i = good.register(&[(&fd, spec)]).unwrap();
    let f = good.detect(i).unwrap();
    assert_eq!((f.width, f.height, f.camera.as_str().split(' ').next()), (64, 48, Some("good")));
    assert!(matches!(good.detect(99), Err(ClientError::Refused(r)) if r.contains("buffer 99 was never registered")));
    let st = Client::connect(&sock, "asker").unwrap().stats().unwrap();
    let mine = &st.per_client.iter().find(|(n, _)| n.starts_with("good pid ")).unwrap().1;
    assert_eq!((mine.inferred, mine.refused, mine.buffers), (1, 1, 1), "{mine:?}");
    let mute = &st.per_client.iter().find(|(n, _)| n.starts_with("mute pid ")).unwrap().1;
    assert!(mute.answers_lost > 0 && mute.newer > 0, "{mute:?}");
    drop(good);
    drop(flooder.join().unwrap());
    // A wait for the service to see the clients' hang-ups, not a speed goal: generous for a
    // loaded machine.
    assert!(
        wait_for(Duration::from_secs(30), || fd_count(infer) <= fds0),
        "{} fds, {fds0} at the start: {:?}",
        fd_count(infer),
        fd_targets(infer)
    );
    // Long enough for a stall to show in the frame count.
    std::thread::sleep(Duration::from_secs(3).saturating_sub(t.elapsed()));
    let secs = t.elapsed().as_secs_f64();
    let (err, summary) = stop(child, dir.path());
    let svc = &summary["stages"]["infer"]["extra"]["service"];
    assert!(svc["answers_lost"].as_u64().unwrap() > 0, "the mute client lost answers: {svc}");
    assert!(svc["busy"].as_u64().unwrap() > 0, "{svc}");
    assert_eq!(svc["refused_peers"], 0, "{svc}");
    let published = summary["stages"]["publish"]["frames_out"].as_u64().unwrap();
    assert!(published as f64 >= 0.8 * 15.0 * secs, "the camera stalled: {published} frames in {secs:.1} s at 15 fps");
    let hoarder: Vec<&str> = err.lines().filter(|l| l.contains("client hoarder") && l.contains("refused")).collect();
    assert_eq!(hoarder.len(), 1, "one line for 9,992 refusals: {hoarder:?}");
    assert!(err.contains("client mute pid"), "{err}");
    assert!(err.contains("does not read its answers"), "{err}");
    assert!(err.contains("inference service at "), "the summary's line: {err}");
}

/// The socket a test opens to another user (as a careless chmod would): the peer check
/// still refuses them (root only: it runs the client as `nobody`).
#[test]
fn another_user_is_refused_by_the_peer_check() {
    // The system's python3 (a user's pyenv shim under /root is out of nobody's reach).
    let python = Path::new("/usr/bin/python3");
    if !nix::unistd::geteuid().is_root()
        || Command::new("setpriv").arg("--version").output().is_err()
        || !python.exists()
    {
        eprintln!("skipped: needs root, setpriv and /usr/bin/python3 to run a client as another user");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    let mode = |p: &Path, m: u32| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    };
    mode(dir.path(), 0o755);
    mode(&open, 0o755);
    let sock = open.join("npu.sock");
    let (child, sock) = start(dir.path(), &["--serve-socket", sock.to_str().unwrap()]);
    mode(&sock, 0o666);
    let script = open.join("zcpipe_client.py");
    std::fs::copy(root().join("clients/python/zcpipe_client.py"), &script).unwrap();
    let image = open.join("person.jpg");
    std::fs::copy(root().join("tests/data/person.jpg"), &image).unwrap();
    mode(&image, 0o644);
    mode(&script, 0o644);
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(python)
        .arg(&script)
        .arg("--socket")
        .arg(&sock)
        .arg(&image)
        .output()
        .unwrap();
    let client_err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{client_err}");
    assert!(client_err.contains("refused pid") && client_err.contains("uid 65534"), "{client_err}");
    let (err, summary) = stop(child, dir.path());
    assert_eq!(summary["stages"]["infer"]["extra"]["service"]["refused_peers"], 1);
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("refused pid")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("uid 65534: only uid 0"), "{}", lines[0]);
}

/// Clients killed (SIGKILL) with requests in flight, one after another: the service leaks no
/// fd and no buffer, and the camera never stalls.
#[test]
fn crashing_clients_leak_nothing() {
    let crashes: usize = std::env::var("ZCPIPE_SERVICE_CRASHES").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    let dir = tempfile::tempdir().unwrap();
    let (child, sock) = start(dir.path(), &[]);
    let infer = stage_pid(dir.path(), "infer").expect("the infer stage runs");
    let fds0 = settled_fd_count(&sock, infer);
    let program = format!(
        "import sys, time; sys.path.insert(0, {:?}); import zcpipe_client as z\n\
         c = z.Client.connect(path={:?}, name='crash')\n\
         b = c.register_image(open({:?}, 'rb').read())\n\
         for _ in range(3): c.submit(b, 'video')\n\
         c.submit(b, 'request')\n\
         print('sent', flush=True)\n\
         time.sleep(60)\n",
        root().join("clients/python").display(),
        sock.display(),
        root().join("tests/data/person.jpg").display()
    );
    let t = std::time::Instant::now();
    for k in 0..crashes {
        let mut c = Command::new("python3").args(["-c", &program]).stdout(Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(c.stdout.take().unwrap()).read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "sent", "client {k}");
        c.kill().unwrap();
        c.wait().unwrap();
    }
    let secs = t.elapsed().as_secs_f64();
    // The requests the dead clients left are inferred first (on a busy machine, with the
    // other tests, that takes a while); then their buffers and sockets are gone.
    assert!(
        wait_for(Duration::from_secs(60), || fd_count(infer) <= fds0),
        "{} fds after {crashes} crashes, {fds0} before",
        fd_count(infer)
    );
    let fds_after = fd_count(infer);
    let (_err, summary) = stop(child, dir.path());
    let svc = &summary["stages"]["infer"]["extra"]["service"];
    // And the warm-up client's.
    assert_eq!(svc["connections"], crashes as u64 + 1, "{svc}");
    assert_eq!(svc["clients"], 0, "{svc}");
    assert_eq!(svc["buffers"], 0, "{svc}");
    let published = summary["stages"]["publish"]["frames_out"].as_u64().unwrap() as f64;
    assert!(published >= 0.8 * 15.0 * secs, "the camera stalled: {published} frames in {secs:.1} s at 15 fps");
    eprintln!(
        "EVIDENCE {crashes} clients killed with requests in flight in {secs:.1} s: infer fds {fds0} before, {fds_after} after; \
         {} connections, {} clients and {} buffers left; {published} camera frames published ({:.1} fps of 15)",
        svc["connections"],
        svc["clients"],
        svc["buffers"],
        published / secs
    );
}

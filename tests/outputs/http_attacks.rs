//! Another local user's attacks on the web view: connection floods past the connection
//! limit and past the process's fd limit, declared huge bodies, a huge header, a foreign
//! `Host`. After each the view answers, the publish process is back to its fds and threads,
//! and a client of the detections socket is served throughout.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use common::{wait_for, zcpipe_run, Reap};

use super::http::{get, get_json, status_of, web_view_address};

/// `/proc/PID/fd` entries, threads and resident memory (KiB) of a process.
fn usage(pid: i32) -> (usize, u64, u64) {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (fds, field("Threads:"), field("VmRSS:"))
}

/// Another local user's attacks on the web view, with the run's fds limited to 256 (fewer
/// than the 300 connections the view takes here): more idle connections than the process
/// has fds, requests declaring a 100 GB body, a 64 MiB header. After each, the view
/// answers, the publish process is back to its fds and threads, its memory stayed bounded,
/// and a client of the detections socket kept receiving.
#[test]
fn a_local_attacker_cannot_stop_the_web_view() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = zcpipe_run(dir.path());
    cmd.args(["--source", "testsrc:320x240@10", "--infer", "none", "--http", "127.0.0.1:0", "--stats-interval", "0"])
        .args(["--http-max-connections", "300"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe; the closure touches nothing of the parent.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, 256, 256)
                .map_err(std::io::Error::from)
        });
    }
    let mut run = Reap(cmd.spawn().unwrap());
    let (addr, err) = web_view_address(&mut run);
    let pid = common::stage_pid(dir.path(), "publish").expect("the publish stage");
    // A detections client from the start, counting its lines.
    let lines = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sock = std::os::unix::net::UnixStream::connect(dir.path().join("detections.sock")).unwrap();
    let counted = lines.clone();
    let reader = std::thread::spawn(move || {
        for _ in BufReader::new(sock).lines().map_while(|l| l.ok()) {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    // The baseline once the client is served and the server has answered (its threads up).
    assert!(wait_for(Duration::from_secs(20), || lines.load(std::sync::atomic::Ordering::Relaxed) > 0));
    assert_eq!(get(addr, "/api/stats").0, 200);
    let (fds0, threads0, rss0) = usage(pid);
    // The test's own fd limit must fit the flood.
    let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard.min(4096), hard).unwrap();
    let served = |what: &str| {
        let t = std::time::Instant::now();
        let st = get_json(addr, "/api/stats");
        println!("EVIDENCE web view after {what}: /api/stats in {:?}, server {}", t.elapsed(), st["server"]);
        st
    };
    let back_to_start = |what: &str| {
        let ok = wait_for(Duration::from_secs(20), || {
            let (fds, threads, _) = usage(pid);
            fds <= fds0 + 4 && threads <= threads0 + 4
        });
        let now = usage(pid);
        assert!(ok, "{what}: publish at {now:?} fds, threads, RSS KiB; it started at {:?}", (fds0, threads0, rss0));
        now
    };

    // 1. More idle connections than the process has fds (256, fewer than the 300
    // connections the view takes here): accept(2) fails with EMFILE, is waited out, and the
    // view serves again once they close.
    let idle: Vec<TcpStream> =
        (0..400).filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_millis(50)).ok()).collect();
    std::thread::sleep(Duration::from_secs(1));
    let held = usage(pid).0;
    drop(idle);
    back_to_start("idle connections");
    let st = served("400 idle connections");
    assert!(st["server"]["accept_errors"].as_u64().unwrap() > 0, "the flood ran the process out of fds: {st}");
    assert!(held >= 240, "the view held {held} fds at the flood's height");

    // 2. Requests declaring a 100 GB body: 413 each, the connection closed, nothing kept.
    for _ in 0..300 {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /api/stats HTTP/1.1\r\nHost: localhost\r\nContent-Length: 99999999999\r\n\r\n").unwrap();
        assert_eq!(status_of(&mut s), 413);
    }
    back_to_start("huge bodies");
    let st = served("300 requests declaring a 100 GB body");
    assert_eq!(st["server"]["refused_bodies"].as_u64(), Some(300), "{st}");

    // 3. A 64 MiB header line: refused after the first 16 KiB (431), the rest never read.
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nX-Big: ").unwrap();
    let chunk = vec![b'a'; 1 << 20];
    let sent = (0..64).take_while(|_| s.write_all(&chunk).is_ok()).count();
    let code = status_of(&mut s);
    assert!(sent < 64, "the server stopped reading the header ({sent} MiB taken, answer {code})");
    drop(s);
    let (_, _, rss) = back_to_start("a huge header");
    served("a 64 MiB header");
    assert!(rss < rss0 + 16 * 1024, "publish RSS {rss} KiB, {rss0} KiB at the start");

    // The detections client was served throughout, and the run ends cleanly.
    let before = lines.load(std::sync::atomic::Ordering::Relaxed);
    assert!(wait_for(Duration::from_secs(20), || lines.load(std::sync::atomic::Ordering::Relaxed) > before + 5));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(run.0.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let status = run.0.wait().unwrap();
    let err = err.join().unwrap();
    assert!(status.success(), "{status}: {err}");
    reader.join().unwrap();
    assert!(err.contains("web view: accepting a connection: "), "the EMFILE was logged: {err}");
    println!(
        "EVIDENCE attacks survived: {} detection lines meanwhile; publish fds {fds0} -> {held} at the flood -> back; RSS {rss0} -> {rss} KiB",
        lines.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// At the connection limit (16 here) the connection idle longest makes room, so 200 idle
/// connections do not keep a client out; a page elsewhere whose name points at 127.0.0.1
/// (DNS rebinding) is refused.
#[test]
fn idle_connections_make_room_and_foreign_hosts_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut run = Reap(
        zcpipe_run(dir.path())
            .args(["--source", "testsrc:320x240@10", "--infer", "none", "--stats-interval", "0"])
            .args(["--http", "127.0.0.1:0", "--http-max-connections", "16"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let (addr, err) = web_view_address(&mut run);
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /api/stats HTTP/1.1\r\nHost: attacker.example\r\n\r\n").unwrap();
    assert_eq!(status_of(&mut s), 403);
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(format!("GET /api/stats HTTP/1.1\r\nHost: localhost:{}\r\n\r\n", addr.port()).as_bytes()).unwrap();
    assert_eq!(status_of(&mut s), 200);
    let idle: Vec<TcpStream> =
        (0..200).filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_millis(50)).ok()).collect();
    let t = std::time::Instant::now();
    let st = get_json(addr, "/api/stats");
    println!(
        "EVIDENCE during {} idle connections: /api/stats in {:?}, server {}",
        idle.len(),
        t.elapsed(),
        st["server"]
    );
    assert!(st["server"]["evicted_idle"].as_u64().unwrap() > 0, "idle connections made room: {st}");
    drop(idle);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(run.0.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let status = run.0.wait().unwrap();
    let err = err.join().unwrap();
    assert!(status.success(), "{status}: {err}");
}

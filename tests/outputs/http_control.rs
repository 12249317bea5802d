//! The web view's `POST /api/control` end to end: a run of a test pattern with `--http` and
//! `--http-token-file` (mode 0600), spoken to over raw TCP: no token and a wrong token are
//! 401, the right one lists the camera and sets a zone that the next frame lines on the
//! detections socket carry; six wrong tokens from one address hold it off (429, the right
//! token too) while another address is still served; a declared 100 KB body is 413 before
//! anything is read, a GET is 405, a foreign `Host` 403. A run without a token has no such
//! route (404), and a token file other users may read is one line and exit code 2.

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{stage_pid, wait_for, zcpipe_run, Reap};
use serde_json::{json, Value};

use super::http::{get_json, web_view_address};

pub(crate) const TOKEN: &str = "Zk3vQ9-control-token-for-tests";

/// A response: status, headers (names lower-case), body.
pub(crate) type Response = (u16, BTreeMap<String, String>, String);

/// A TCP connection to `to` from local address `from` (another loopback address is another
/// client to the rate limit).
fn connect_from(from: Ipv4Addr, to: SocketAddr) -> TcpStream {
    use std::os::fd::{FromRawFd, OwnedFd};
    let SocketAddr::V4(to) = to else { panic!("an IPv4 web view") };
    let sin = |ip: Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(ip).to_be() },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: socket(2) with constant arguments; its result is checked and owned below.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    assert!(raw >= 0, "socket: {}", std::io::Error::last_os_error());
    // SAFETY: socket(2) just returned this descriptor; nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let (here, there) = (sin(from, 0), sin(*to.ip(), to.port()));
    // SAFETY: `here` is a sockaddr_in of `len` bytes that outlives the call.
    let bound = unsafe { libc::bind(fd.as_raw_fd(), (&here as *const libc::sockaddr_in).cast(), len) };
    assert_eq!(bound, 0, "bind {from}: {}", std::io::Error::last_os_error());
    // SAFETY: `there` is a sockaddr_in of `len` bytes that outlives the call.
    let connected = unsafe { libc::connect(fd.as_raw_fd(), (&there as *const libc::sockaddr_in).cast(), len) };
    assert_eq!(connected, 0, "connect {to}: {}", std::io::Error::last_os_error());
    TcpStream::from(fd)
}

/// Sends `head` (and `body`) from `from` and reads the whole response.
pub(crate) fn send(addr: SocketAddr, from: Ipv4Addr, head: &str, body: &str) -> Response {
    let mut s = connect_from(from, addr);
    // A guard against a test hanging forever, not a timed assertion.
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(format!("{head}Host: {addr}\r\n\r\n{body}").as_bytes()).unwrap();
    let mut raw = vec![];
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("a response: {text:?}"));
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers, body.to_string())
}

/// `POST /api/control` of `body` from `from`, with `Authorization: Bearer <token>` if any.
pub(crate) fn post(addr: SocketAddr, from: Ipv4Addr, token: Option<&str>, body: &str) -> Response {
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let head = format!(
        "POST /api/control HTTP/1.1\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    send(addr, from, &head, body)
}

/// The JSON body of a 200.
fn answer(r: &Response) -> Value {
    assert_eq!((r.0, r.1.get("content-type").map(String::as_str)), (200, Some("application/json")), "{r:?}");
    serde_json::from_str(&r.2).unwrap()
}

pub(crate) const LOCAL: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
const OTHER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const CAMERAS: &str = r#"{"version":1,"request":{"op":"cameras"}}"#;

pub(crate) fn run_with(dir: &std::path::Path, extra: &[&str]) -> Reap {
    let mut cmd = zcpipe_run(dir);
    cmd.args(["--source", "testsrc:320x240@10", "--infer", "none", "--stats-interval", "0"])
        .args(["--http", "127.0.0.1:0"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    Reap(cmd.spawn().unwrap())
}

#[test]
fn the_run_is_changed_over_http_with_the_token_only() {
    let t0 = Instant::now();
    let (dir, bare) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut run = run_with(dir.path(), &["--instance", "http-ctl", "--http-token-file", token_file.to_str().unwrap()]);
    let mut without = run_with(bare.path(), &["--instance", "http-ctl-bare"]);
    let (addr, err) = web_view_address(&mut run);
    // The detections client, its frame lines with when they came.
    let seen: Arc<Mutex<Vec<(Instant, Value)>>> = Arc::default();
    let mut sock = None;
    assert!(wait_for(Duration::from_secs(20), || {
        sock = std::os::unix::net::UnixStream::connect(dir.path().join("detections.sock")).ok();
        sock.is_some()
    }));
    let sock = sock.unwrap();
    let lines = seen.clone();
    let reader = std::thread::spawn(move || {
        for l in BufReader::new(sock).lines().map_while(|l| l.ok()) {
            lines.lock().unwrap().push((Instant::now(), serde_json::from_str(&l).unwrap()));
        }
    });
    assert!(wait_for(Duration::from_secs(20), || seen.lock().unwrap().iter().any(|(_, v)| v["type"] == "frame")));

    // No token, a wrong one: 401 with the challenge.
    for token in [None, Some("Zk3vQ9-control-token-for-test")] {
        let (code, h, body) = post(addr, LOCAL, token, CAMERAS);
        assert_eq!((code, h.get("www-authenticate").map(String::as_str)), (401, Some("Bearer")), "{token:?}: {body}");
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap(),
            json!({"error": "no valid token: send Authorization: Bearer TOKEN, the token of --http-token-file or $ZCPIPE_HTTP_TOKEN"})
        );
    }
    // The right one: the camera, streaming.
    let v = answer(&post(addr, LOCAL, Some(TOKEN), CAMERAS));
    let capture = stage_pid(dir.path(), "capture").expect("the capture stage");
    let publish = stage_pid(dir.path(), "publish");
    let cam = &v["reply"]["cameras"][0];
    assert_eq!((&v["version"], &v["reply"]["result"]), (&json!(1), &json!("cameras")), "{v}");
    assert_eq!(
        (&cam["name"], &cam["state"], &cam["pid"], &cam["restarts"]),
        (&json!("cam0"), &json!("streaming"), &json!(capture), &json!(0))
    );
    // A zone, live: done, and the next frame lines carry it.
    let set = r#"{"version":1,"request":{"op":"set_shape","camera":"cam0","kind":"zone","spec":"whole=0,0,320,0,320,240,0,240"}}"#;
    let t_zone = Instant::now();
    assert_eq!(
        answer(&post(addr, LOCAL, Some(TOKEN), set)),
        json!({"version": 1, "reply": {"result": "done", "change": "camera cam0: zone whole added", "restarted": [], "started": [], "stopped": []}})
    );
    let zoned = || {
        let s = seen.lock().unwrap();
        let after: Vec<&Value> =
            s.iter().filter(|(t, v)| *t > t_zone && v["type"] == "frame").map(|(_, v)| v).collect();
        after.len() >= 3 && after[after.len() - 3..].iter().all(|v| v["zones"] == json!({"whole": {}}))
    };
    assert!(wait_for(Duration::from_secs(5), zoned), "the frame lines carry the zone");
    // A malformed request: the socket's own refusal, 200.
    let bad = answer(&post(addr, LOCAL, Some(TOKEN), r#"{"version":1,"request":{"op":"drop_tables"}}"#));
    assert_eq!((&bad["reply"]["result"], &bad["reply"]["error"]), (&json!("refused"), &json!("malformed")), "{bad}");

    // Six wrong tokens from another address: the sixth is 429, and the right token then too.
    let codes: Vec<u16> = (0..6).map(|_| post(addr, OTHER, Some("not-the-token-at-all"), CAMERAS).0).collect();
    assert_eq!(codes, [401, 401, 401, 401, 401, 429]);
    let (code, h, body) = post(addr, OTHER, Some(TOKEN), CAMERAS);
    let retry: u64 = h["retry-after"].parse().unwrap();
    assert_eq!(code, 429, "{body}");
    assert!((1..=60).contains(&retry), "Retry-After {retry}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"error": format!("too many wrong tokens from this address: try again in {retry} s")})
    );
    assert_eq!(
        answer(&post(addr, LOCAL, Some(TOKEN), CAMERAS))["reply"]["result"],
        "cameras",
        "another address is served"
    );

    // The limits: a 100 KB body refused before it is read, GET, a foreign Host.
    let head = format!("POST /api/control HTTP/1.1\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 102400\r\n");
    assert_eq!(send(addr, LOCAL, &head, "").0, 413);
    let (code, h, _) = send(addr, LOCAL, "GET /api/control HTTP/1.1\r\n", "");
    assert_eq!((code, h.get("allow").map(String::as_str)), (405, Some("POST")));
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "POST /api/control HTTP/1.1\r\nHost: attacker.example\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}\r\n\r\n{CAMERAS}", CAMERAS.len()).unwrap();
    assert_eq!(super::http::status_of(&mut s), 403);

    // The counters: 2 + 6 + 1 refused for their token, 1 change.
    let st = get_json(addr, "/api/stats");
    assert_eq!(
        (&st["server"]["control_refused"], &st["server"]["control_requests"]),
        (&json!(9), &json!(1)),
        "{}",
        st["server"]
    );
    assert_eq!(st["server"]["refused_bodies"], 1);

    // A request within the view's 64 KiB but over what the run's socket takes (60 KiB): 413.
    let big = format!(
        r#"{{"version":1,"request":{{"op":"set_shape","camera":"cam0","kind":"zone","spec":"z={}"}}}}"#,
        "1,".repeat(31_000)
    );
    let (code, _, body) = post(addr, LOCAL, Some(TOKEN), &big);
    assert_eq!(code, 413, "{body}");
    assert!(body.contains("over the 61440 bytes the run reads"), "{body}");

    // A change that restarts the publish stage (the web view's own process) is answered
    // before the stage goes; its successor serves the detections socket again.
    let high = r#"{"version":1,"request":{"op":"set","setting":{"name":"track-high","value":0.6}}}"#;
    let v = answer(&post(addr, LOCAL, Some(TOKEN), high));
    assert_eq!((&v["reply"]["result"], &v["reply"]["restarted"]), (&json!("done"), &json!(["publish"])), "{v}");
    assert!(
        wait_for(Duration::from_secs(20), || stage_pid(dir.path(), "publish").is_some_and(|p| Some(p) != publish)),
        "the publish stage restarted"
    );

    // Without a token there is no such route.
    let (bare_addr, bare_err) = web_view_address(&mut without);
    let (code, _, body) = post(bare_addr, LOCAL, Some(TOKEN), CAMERAS);
    assert_eq!(code, 404, "{body}");
    assert!(body.starts_with("not found: /api/control; the web view serves /, "), "{body}");

    // The token is on no command line and in no log line.
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        assert!(!String::from_utf8_lossy(&cmd).contains(TOKEN), "the token in {}'s command line", e.path().display());
    }
    let mut logs = vec![];
    for (mut r, err) in [(run, err), (without, bare_err)] {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(r.0.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
        let status = r.0.wait().unwrap();
        let err = err.join().unwrap();
        assert!(status.success(), "{status}: {err}");
        assert!(!err.contains(TOKEN), "the token in the log: {err}");
        logs.push(err);
    }
    let held = "web view: 6 wrong or missing tokens for /api/control from 127.0.0.2 within 60 s: its requests are answered 429 for ";
    assert_eq!(logs[0].matches(held).count(), 1, "logged once: {}", logs[0]);
    assert!(logs[0].contains(" s (6 refused from it so far)\n"), "{}", logs[0]);
    reader.join().unwrap();
    println!("EVIDENCE /api/control: 401, 401, 200 cameras, 200 done (zone in the frame lines), 429 after 6 wrong, 413, 405, 403, 404 without a token, in {:?}", t0.elapsed());
}

/// A token file other users may read is refused before anything starts: one line, exit 2.
#[test]
fn a_token_file_others_may_read_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("token");
    std::fs::write(&f, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = zcpipe_run(dir.path())
        .args(["--source", "testsrc:320x240@10", "--infer", "none", "--http", "127.0.0.1:0", "--http-token-file"])
        .arg(&f)
        .output()
        .unwrap();
    let p = f.display();
    assert_eq!(
        (out.status.code(), String::from_utf8_lossy(&out.stderr).as_ref()),
        (
            Some(2),
            format!(
                "zcpipe: error: --http-token-file {p}: other users may read or change it (mode 0644): chmod 600 {p}\n"
            )
            .as_str()
        )
    );
}

//! Shared by the integration tests: the zcpipe binary under test as a user runs it, with
//! everything a run leaves (run directory, detections socket, summary) in one temp folder,
//! and the ABI fakes of the vendor libraries (`fakes/librga`, `fakes/librknnrt`,
//! `fakes/librockchip_mpp`), each built once per test process, in the same profile as the
//! zcpipe binary under test, and found next to it.

#![allow(dead_code)] // each test file uses part of this

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// The package's folder (where `models/` and `tests/data/` are).
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The variables that tests set in their own process for a fake opened there (the fakes
/// read them at each call). Tests of several former files share a process now, so a child
/// never inherits them: a test sets what its child needs with `Command::env`.
pub const IN_PROCESS_FAKE_ENV: &[&str] = &[
    "ZCPIPE_LIBMPP",
    "ZCPIPE_FAKE_MPP_LOG",
    "ZCPIPE_FAKE_MPP_JPEG_HANG",
    "ZCPIPE_FAKE_RGA_LOG",
    "ZCPIPE_FAKE_RGA_NO_DEVICE",
    "ZCPIPE_FAKE_RKNN_ONNX",
    "ZCPIPE_FAKE_RKNN_OUTPUT",
    "ZCPIPE_FAKE_RKNN_RUN_US",
];

/// The zcpipe binary under test, run in the package folder, with the caller's `RUST_LOG`
/// removed (so its log lines are the default ones), no backtraces, and none of
/// [`IN_PROCESS_FAKE_ENV`] inherited.
pub fn zcpipe() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_zcpipe"));
    c.current_dir(root()).env("RUST_BACKTRACE", "0").env_remove("RUST_LOG");
    for k in IN_PROCESS_FAKE_ENV {
        c.env_remove(k);
    }
    c
}

/// The turn of the in-process fake librockchip_mpp: it reads `ZCPIPE_FAKE_MPP_LOG` (and its
/// other knobs) from this process's environment at each call, and tests of more than one
/// module open it, so each sets the variables it wants while holding this.
pub static FAKE_MPP_IN_PROCESS: Mutex<()> = Mutex::new(());

/// `zcpipe run` with its run directory (`dir/run`), detections socket
/// (`dir/detections.sock`) and summary (`dir/summary.json`) in `dir`; add the run's flags.
pub fn zcpipe_run(dir: &Path) -> Command {
    let mut c = zcpipe();
    c.arg("run")
        .arg("--run-dir")
        .arg(dir.join("run"))
        .arg("--publish")
        .arg(dir.join("detections.sock"))
        .arg("--summary-json")
        .arg(dir.join("summary.json"));
    c
}

/// After a [`zcpipe_run`] in `dir` has exited: no process still has `dir` on its command
/// line, and neither the run directory nor the detections socket is left behind.
pub fn assert_no_orphans(dir: &Path) {
    let needle = dir.to_string_lossy().to_string();
    let me = std::process::id().to_string();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if !name.chars().all(|c| c.is_ascii_digit()) || name == me {
            continue;
        }
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            assert!(!cmd.contains(&needle), "orphan process {name}: {cmd}");
        }
    }
    assert!(!dir.join("run").exists(), "run directory left behind");
    assert!(!dir.join("detections.sock").exists(), "detections socket left behind");
}

/// The pid of the `zcpipe stage <stage>` process of the run in `dir` (its command line
/// names `dir`), if one runs (a zombie does not count).
pub fn stage_pid(dir: &Path, stage: &str) -> Option<i32> {
    let needle = dir.to_string_lossy().to_string();
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
        let args: Vec<String> = cmd.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        let is_stage = args.windows(2).any(|w| w[0] == "stage" && w[1] == stage);
        let zombie = std::fs::read_to_string(e.path().join("stat"))
            .is_ok_and(|s| s.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z')));
        (is_stage && !zombie && args.iter().any(|a| a.contains(&needle))).then_some(pid)
    })
}

/// The pid of camera `name`'s `zcpipe stage capture --camera NAME` process of the run in
/// `dir` (one camera of several), if one runs (a zombie does not count).
pub fn camera_pid(dir: &Path, name: &str) -> Option<i32> {
    let needle = dir.to_string_lossy().to_string();
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmd = String::from_utf8_lossy(&std::fs::read(e.path().join("cmdline")).ok()?).replace('\0', " ");
        let zombie = std::fs::read_to_string(e.path().join("stat"))
            .is_ok_and(|s| s.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z')));
        (cmd.contains(" stage capture ")
            && cmd.contains(&format!("--camera={name} "))
            && cmd.contains(&needle)
            && !zombie)
            .then_some(pid)
    })
}

/// A detections client on `path` that connects again (as `zcpipe watch` does) whenever the
/// socket closes, until the end line or `done`: each line goes to `line` with when it came,
/// and each close before the end to `closed`.
pub fn reconnecting_client(
    path: PathBuf,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    mut line: impl FnMut(std::time::Instant, serde_json::Value) + Send + 'static,
    mut closed: impl FnMut() + Send + 'static,
) -> std::thread::JoinHandle<()> {
    use std::io::BufRead;
    std::thread::spawn(move || {
        while !done.load(std::sync::atomic::Ordering::Relaxed) {
            let Ok(s) = std::os::unix::net::UnixStream::connect(&path) else {
                std::thread::sleep(std::time::Duration::from_millis(20));
                continue;
            };
            for l in std::io::BufReader::new(s).lines() {
                let Ok(l) = l else { break };
                let v: serde_json::Value = serde_json::from_str(&l).unwrap_or(serde_json::Value::Null);
                let end = v["type"] == "end";
                line(std::time::Instant::now(), v);
                if end {
                    return;
                }
            }
            closed();
        }
    })
}

/// A process a test started, killed and reaped when dropped, so a test that fails half-way
/// leaves nothing running (one that ended is unaffected: its kill fails, its wait returns).
pub struct Reap(pub Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits up to `limit` (looking every 10 ms) for `f` to hold; whether it did.
pub fn wait_for(limit: std::time::Duration, mut f: impl FnMut() -> bool) -> bool {
    let t = std::time::Instant::now();
    while t.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    f()
}

/// Runs `cargo build --locked <args>` in this test build's profile and returns `file` from
/// the folder of the zcpipe binary under test (`target/<profile>/`).
fn build(args: &[&str], file: &str) -> PathBuf {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root()).args(["build", "--locked"]).args(args);
    // Without the variables cargo sets for a test process (CARGO_PKG_NAME, CARGO_MANIFEST_DIR,
    // ...): build scripts that read them (ring's) would see them change, run again, and make
    // this build and every later one from a shell rebuild ring, rustls and zcpipe in turn.
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        const SET: [&str; 7] = [
            "CARGO_MANIFEST_DIR",
            "CARGO_MANIFEST_PATH",
            "CARGO_MANIFEST_LINKS",
            "CARGO_CRATE_NAME",
            "CARGO_PRIMARY_PACKAGE",
            "CARGO_TARGET_TMPDIR",
            "OUT_DIR",
        ];
        let set_by_cargo = k.starts_with("CARGO_PKG_") || k.starts_with("CARGO_BIN_") || SET.contains(&k.as_str());
        if set_by_cargo {
            c.env_remove(&k);
        }
    }
    if !cfg!(debug_assertions) {
        c.arg("--release");
    }
    let st = c.status().unwrap_or_else(|e| panic!("running cargo build {args:?}: {e}"));
    assert!(st.success(), "cargo build {args:?} failed: {st}");
    let lib = Path::new(env!("CARGO_BIN_EXE_zcpipe")).parent().unwrap().join(file);
    assert!(lib.exists(), "{} missing after the build", lib.display());
    lib
}

/// `target/<profile>/librga.so`, the fake librga. Built alone: it depends on libc only, so
/// a source change elsewhere never makes a test rebuild zcpipe.
pub fn fake_librga() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| build(&["-p", "zcpipe-fake-librga"], "librga.so"))
}

/// `target/<profile>/librockchip_mpp.so`, the fake librockchip_mpp. Built alone, like the
/// fake librga: it depends on libc only (its decoder is an `ffmpeg` child process).
pub fn fake_librockchip_mpp() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| build(&["-p", "zcpipe-fake-librockchip-mpp"], "librockchip_mpp.so"))
}

/// `target/<profile>/librknnrt.so`, the fake librknnrt (a no-op cargo call when `make test`
/// has just built it). Built with zcpipe's library (`--lib`, which leaves the binary under
/// test alone), so its dependencies get zcpipe's features and tract is compiled once for
/// both.
pub fn fake_librknnrt() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| build(&["--lib", "-p", "zcpipe", "-p", "zcpipe-fake-librknnrt"], "librknnrt.so"))
}

/// A fake library's call log (one line per call) from where it stood when a test began. A
/// fake is one shared library per test process, so the tests using it take turns: holding
/// this value is the turn.
pub struct LogSince {
    path: &'static Path,
    from: usize,
    _turn: MutexGuard<'static, ()>,
}

impl LogSince {
    /// Waits for `turn`, then notes the end of the log at `path` (which may not exist yet).
    pub fn begin(turn: &'static Mutex<()>, path: &'static Path) -> LogSince {
        let turn = turn.lock().unwrap_or_else(|e| e.into_inner());
        let from = std::fs::read_to_string(path).map(|s| s.len()).unwrap_or(0);
        LogSince { path, from, _turn: turn }
    }

    /// The lines written since [`LogSince::begin`].
    pub fn lines(&self) -> Vec<String> {
        let s = std::fs::read_to_string(self.path).unwrap_or_default();
        s[self.from..].lines().map(str::to_string).collect()
    }

    /// The lines of call `name`: the first word after an optional `pid=N`.
    pub fn calls(&self, name: &str) -> Vec<String> {
        self.lines().into_iter().filter(|l| l.split(' ').find(|w| !w.starts_with("pid=")) == Some(name)).collect()
    }
}

/// The value of `key=` in a fake's log line (up to a space or `]`).
pub fn log_field<'a>(line: &'a str, key: &str) -> &'a str {
    let pat = format!(" {key}=");
    let i = line.find(&pat).unwrap_or_else(|| panic!("no {key}= in {line}")) + pat.len();
    line[i..].split([' ', ']']).next().unwrap()
}

/// A picture as the capture stage's image source makes it (NV12, 16-byte rows) in a sealed
/// memfd, with the buffer spec a service client registers it under.
pub fn nv12_memfd(image: &Path) -> (std::os::fd::OwnedFd, zcpipe::core::service::BufferSpec) {
    use zcpipe::core::service::{BufferSpec, PixelFormat, PlaneSpec};
    let rgb = zcpipe::capture::image::decode_rgb8(image).unwrap();
    let (l, bytes) = zcpipe::capture::image::rgb8_to_nv12(rgb.as_raw(), rgb.width(), rgb.height()).unwrap();
    let planes = l.planes().iter().map(|p| PlaneSpec { offset: p.offset, bytesperline: p.bytesperline }).collect();
    let spec =
        BufferSpec { format: PixelFormat::Nv12, width: l.width, height: l.height, planes, size: bytes.len() as u64 };
    (zcpipe::core::service::client::memfd_with(&bytes).unwrap(), spec)
}

/// `zcpipe compare` of one round of `testsrc:SOURCE` (`WxH@FPS`), `frames` frames, no
/// detector, its report drawn to `svg`, its runs' sockets under `dir`: the table on stdout.
/// Fails the test if it does not succeed.
pub fn compare_one_round(dir: &Path, source: &str, frames: u32, svg: &Path) -> String {
    let out = zcpipe()
        .env("XDG_RUNTIME_DIR", dir)
        .args(["compare", "--source", &format!("testsrc:{source}"), "--frames", &frames.to_string()])
        .args(["--infer", "none", "--rounds", "1", "--report"])
        .arg(svg)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A tmpfs of `size` (`16k`, `700k`) mounted on `dir` (made if missing) for a full-disk
/// test, unmounted when dropped; `None` where this process may not mount (not root, no
/// CAP_SYS_ADMIN), said on stderr: the test then skips.
pub fn small_tmpfs(dir: &Path, size: &str) -> Option<Unmount> {
    std::fs::create_dir_all(dir).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "zcpipe-test-full"])
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped: cannot mount a tmpfs here (not root, or no CAP_SYS_ADMIN)");
        return None;
    }
    Some(Unmount(dir.to_path_buf()))
}

/// A mount point unmounted on drop.
pub struct Unmount(pub PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// The web view over plain HTTP (tests of the outputs and of the pipeline).
/// Writes `GET path HTTP/1.0` and reads the response head: status, headers (names
/// lower-case); the reader is left at the body.
pub fn http_request(addr: SocketAddr, path: &str) -> (u16, BTreeMap<String, String>, BufReader<TcpStream>) {
    let mut s = TcpStream::connect(addr).unwrap();
    // A guard against a test hanging forever, not a timed assertion.
    s.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut r = BufReader::new(s);
    let mut status = String::new();
    r.read_line(&mut status).unwrap();
    let code: u16 =
        status.split(' ').nth(1).unwrap_or_else(|| panic!("{path}: status line {status:?}")).parse().unwrap();
    let mut headers = BTreeMap::new();
    loop {
        let mut l = String::new();
        r.read_line(&mut l).unwrap();
        let l = l.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':').unwrap();
        headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
    }
    (code, headers, r)
}

/// A whole response: status, headers, body.
pub fn http_get(addr: SocketAddr, path: &str) -> (u16, BTreeMap<String, String>, Vec<u8>) {
    let (code, headers, mut r) = http_request(addr, path);
    let mut body = vec![];
    r.read_to_end(&mut body).unwrap();
    (code, headers, body)
}

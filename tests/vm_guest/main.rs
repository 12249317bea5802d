//! Tests that need a real kernel: V4L2 capture from vivid (single- and multi-planar, MMAP +
//! EXPBUF and imported dma-bufs), dma-buf heaps, udmabuf and `DMA_BUF_IOCTL_SYNC`, and the
//! whole pipeline on a camera. They run inside the qemu guest that `make vm-test` boots
//! (vm/README.md), which exports the device paths (`VIVID_SP`, `VIVID_MP`, `VIM2M`, ...)
//! and `ZCPIPE_BIN` (the static zcpipe); elsewhere they are ignored.
//!
//! Consumers run in a child process (this binary again, with a role in its environment), so
//! every frame crosses a process boundary as a dma-buf fd, as in the pipeline. Each test
//! prints `EVIDENCE ...` lines with what it measured.

use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;
use zcpipe::capture::v4l2::{format_name, CaptureIo, Next, V4l2Capture, V4l2Config, V4l2Stats};
use zcpipe::core::channel::Recv;
use zcpipe::core::config::Choice;
use zcpipe::core::dmabuf::{Allocator, HeapChoice, MemoryKind};
use zcpipe::core::frame::{Fourcc, FrameDesc, FrameLayout, Letterbox, Placement};
use zcpipe::core::link::{Conn, ControlMsg, Listener, WaitMode};
use zcpipe::core::pool::{HopSpec, PoolConsumer, PoolProducer, PoolStats};
use zcpipe::core::ring::{RingCounters, RingPolicy};

mod capture;
mod display;
mod doctor;
mod m2m;
mod pipeline;

static NEVER: AtomicBool = AtomicBool::new(false);

/// vivid's default test pattern, "75% Colorbar" (v4l2-tpg), as BT.601 limited-range
/// Y'CbCr, left to right: white, yellow, cyan, green, magenta, red, blue, black.
const BARS_Y: [f64; 8] = [180.0, 162.0, 131.0, 112.0, 84.0, 65.0, 35.0, 16.0];
const BARS_CB: [f64; 8] = [128.0, 44.0, 156.0, 72.0, 184.0, 100.0, 212.0, 128.0];
const BARS_CR: [f64; 8] = [128.0, 142.0, 44.0, 58.0, 198.0, 212.0, 114.0, 128.0];
/// How far a bar's mean may be from the table. vivid (6.12) gives Y 179,160,130,111,83,64,34,16,
/// Cb 128,44,156,72,183,99,211,128 and Cr 128,141,44,58,197,211,114,128: within 2.
const BAR_TOLERANCE: f64 = 4.0;

fn dev(var: &str) -> PathBuf {
    let v = std::env::var(var).unwrap_or_default();
    assert!(!v.is_empty(), "${var} is not set: run these tests in the VM (make vm-test)");
    PathBuf::from(v)
}

fn zcpipe_bin() -> PathBuf {
    let p = dev("ZCPIPE_BIN");
    assert!(p.is_file(), "ZCPIPE_BIN={} is not a file", p.display());
    p
}

// ---------------------------------------------------------------------------------------------
// The consumer process
// ---------------------------------------------------------------------------------------------

/// Mean Y, Cb, Cr of each of the 8 colour bars, sampled in the lower half of the frame
/// (vivid prints its text at the top left), away from the bar edges.
fn bar_means(layout: &FrameLayout, bufs: &[&[u8]]) -> [[f64; 8]; 3] {
    let (w, h) = (layout.width as usize, layout.height as usize);
    let mut out = [[0.0; 8]; 3];
    for (k, bar) in (0..8).map(|k| (k, k * w / 8)) {
        let (x0, x1) = ((bar + w / 32) & !1, (bar + w / 8 - w / 32) & !1);
        let mut sum = [0u64; 3];
        let mut n = 0u64;
        for y in (h / 2..h * 7 / 8).step_by((h / 32).max(1)) {
            for x in (x0..x1).step_by(2) {
                let (yv, cb, cr) = match layout.fourcc {
                    Fourcc::NV12 | Fourcc::NV12M => {
                        let (p0, p1) = (layout.planes[0], layout.planes[1]);
                        let luma = bufs[p0.fd_index as usize][p0.offset as usize + y * p0.bytesperline as usize + x];
                        let c = p1.offset as usize + (y / 2) * p1.bytesperline as usize + x;
                        let cbuf = bufs[p1.fd_index as usize];
                        (luma, cbuf[c], cbuf[c + 1])
                    }
                    Fourcc::YUYV => {
                        let p0 = layout.planes[0];
                        let i = p0.offset as usize + y * p0.bytesperline as usize + x * 2;
                        let b = bufs[p0.fd_index as usize];
                        (b[i], b[i + 1], b[i + 3])
                    }
                    f => panic!("bar_means: {f} not handled"),
                };
                sum[0] += yv as u64;
                sum[1] += cb as u64;
                sum[2] += cr as u64;
                n += 1;
            }
        }
        for c in 0..3 {
            out[c][k] = sum[c] as f64 / n as f64;
        }
    }
    out
}

fn bars_ok(m: &[[f64; 8]; 3]) -> bool {
    [BARS_Y, BARS_CB, BARS_CR]
        .iter()
        .zip(m)
        .all(|(want, got)| want.iter().zip(got).all(|(a, b)| (a - b).abs() <= BAR_TOLERANCE))
}

fn fmt_bars(v: &[f64; 8]) -> String {
    v.iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join(",")
}

/// Consumer role: join the hop at `sock`, read every frame through the sync guard, check
/// vivid's bars, hold each frame `delay_ms`, print one `CONSUMER` line.
fn consumer_role(sock: &str, delay_ms: u64) {
    let conn = Conn::connect_retry(Path::new(sock), "test producer", &NEVER, Duration::from_secs(20)).unwrap();
    let hello =
        ControlMsg::Hello { stage: "vm-test-consumer".into(), accept: vec![], want: None, wait: WaitMode::Eventfd };
    let c = PoolConsumer::join(conn, &hello, WaitMode::Eventfd, "producer").unwrap();
    let (mut got, mut bad, mut gaps) = (0u64, 0u64, 0u64);
    let (mut first, mut last) = (None::<u64>, None::<u64>);
    let mut first_means = None;
    let mut kinds = String::new();
    loop {
        match c.recv(Duration::from_secs(20)).unwrap() {
            Recv::Item(f) => {
                if kinds.is_empty() {
                    kinds = f.buffers().iter().map(|b| b.kind().to_string()).collect::<Vec<_>>().join("+");
                }
                let means = {
                    let guards = f.read().expect("DMA_BUF_IOCTL_SYNC START on the received buffers");
                    let bytes: Vec<&[u8]> = guards.iter().map(|g| g.bytes()).collect();
                    bar_means(&f.desc().layout, &bytes)
                };
                if !bars_ok(&means) {
                    bad += 1;
                }
                first_means.get_or_insert(means);
                let s = f.desc().seq;
                if let Some(l) = last {
                    assert!(s > l, "sequence must increase: {l} then {s}");
                    gaps += s - l - 1;
                }
                first.get_or_insert(s);
                last = Some(s);
                got += 1;
                drop(f);
                std::thread::sleep(Duration::from_millis(delay_ms));
            }
            Recv::Eos => break,
            Recv::Hangup => panic!("producer hung up"),
            Recv::Idle => panic!("no frame within 20 s"),
        }
    }
    let m = first_means.unwrap_or([[0.0; 8]; 3]);
    println!(
        "\nCONSUMER pid={} got={got} bad={bad} gaps={gaps} first={} last={} kind={kinds} y={} cb={} cr={}",
        std::process::id(),
        first.unwrap_or(0),
        last.unwrap_or(0),
        fmt_bars(&m[0]),
        fmt_bars(&m[1]),
        fmt_bars(&m[2])
    );
}

fn role() -> Option<(String, u64)> {
    let s = std::env::var("ZCPIPE_VM_CONSUMER").ok()?;
    let d = std::env::var("ZCPIPE_VM_DELAY_MS").ok()?.parse().ok()?;
    Some((s, d))
}

fn field<'a>(line: &'a str, k: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(k).and_then(|r| r.strip_prefix('=')))
        .unwrap_or_else(|| panic!("{k} missing in {line:?}"))
}

fn num(line: &str, k: &str) -> u64 {
    field(line, k).parse().unwrap_or_else(|_| panic!("{k} not a number in {line:?}"))
}

// ---------------------------------------------------------------------------------------------
// The zcpipe binary in the guest
// ---------------------------------------------------------------------------------------------

fn zcpipe() -> Command {
    let mut c = Command::new(zcpipe_bin());
    c.env("RUST_BACKTRACE", "1").env_remove("RUST_LOG").stdin(Stdio::null());
    c
}

/// `zcpipe run` args for a private run dir and socket under `dir`.
fn run_args(dir: &Path, source: &str) -> Vec<String> {
    [
        "run",
        "--source",
        source,
        "--infer",
        "none",
        "--run-dir",
        &dir.join("run").display().to_string(),
        "--publish",
        &dir.join("detections.sock").display().to_string(),
        "--summary-json",
        &dir.join("summary.json").display().to_string(),
        "--stats-interval",
        "0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Runs `cmd` to completion, killing it after `limit`.
fn output_within(mut cmd: Command, limit: Duration) -> Output {
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id() as i32;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(o) => o.unwrap(),
        Err(_) => {
            // SAFETY: plain kill(2) of our own child's pid.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("command did not finish within {limit:?}: {cmd:?}");
        }
    }
}

/// A zcpipe started in the background whose stderr lines arrive on a channel.
struct Background {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Background {
    fn start(args: &[String]) -> Background {
        let mut child = zcpipe().args(args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        let err = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(|l| l.ok()) {
                eprintln!("  [bg] {l}");
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Background { child, lines, seen: vec![] }
    }

    /// Waits until a stderr line contains `what`.
    fn wait_for(&mut self, what: &str, limit: Duration) {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if let Ok(l) = self.lines.recv_timeout(Duration::from_millis(200)) {
                let hit = l.contains(what);
                self.seen.push(l);
                if hit {
                    return;
                }
            }
        }
        panic!("no \"{what}\" from zcpipe within {limit:?}; got: {:#?}", self.seen);
    }

    /// SIGTERM (if `term`), then waits; returns the exit code and every stderr line.
    fn finish(mut self, term: bool, limit: Duration) -> (i32, Vec<String>) {
        if term {
            // SAFETY: plain kill(2) of our own child's pid.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        }
        let Some(status) = self.wait_within(limit) else {
            let _ = self.child.kill();
            panic!("zcpipe did not exit within {limit:?}; stderr: {:#?}", self.seen);
        };
        std::thread::sleep(Duration::from_millis(200));
        while let Ok(l) = self.lines.try_recv() {
            self.seen.push(l);
        }
        (status.code().unwrap_or(-1), std::mem::take(&mut self.seen))
    }

    /// Polls every 50 ms until the child exits (its status) or `limit` passes (`None`).
    fn wait_within(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let end = Instant::now() + limit;
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            if Instant::now() > end {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A test that fails half-way must not leave its zcpipe streaming: it would hold the vivid
/// node and fail every later test with EBUSY. SIGTERM first (so the supervisor stops its
/// stages and the driver gets its buffers back), SIGKILL if that takes over 20 s.
impl Drop for Background {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        // SAFETY: plain kill(2) of our own child's pid, not yet reaped (try_wait above).
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        if self.wait_within(Duration::from_secs(20)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn summary(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("summary.json")).expect("summary.json written");
    serde_json::from_str(&text).unwrap()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// `VIDIOC_S_CTRL`'s argument, `struct v4l2_control` (include/uapi/linux/videodev2.h).
#[repr(C)]
struct V4l2Control {
    id: u32,
    value: i32,
}
nix::ioctl_readwrite!(vidioc_s_ctrl, b'V', 28, V4l2Control);
/// vivid's "Disconnect" button (drivers/media/test-drivers/vivid/vivid-ctrls.c:
/// `VIVID_CID_VIVID_BASE + 65`): the driver behaves as if the device was unplugged.
const VIVID_CID_DISCONNECT: u32 = 0x00f0_f000 + 65;

#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn zz_camera_unplugged_ends_the_stream_cleanly() {
    let mp = dev("VIVID_MP");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Multi-planar, NV12M, buffers from the dma-buf heap imported by the driver: the other
    // corner of the matrix from the pipeline test.
    let mut args = run_args(d, &format!("v4l2:{}", mp.display()));
    args.extend(
        ["--format", "NV12M", "--size", "640x480", "--fps", "30", "--capture-io", "dmabuf", "--heap", "system"]
            .map(String::from),
    );
    let mut bg = Background::start(&args);
    bg.wait_for("streaming from", Duration::from_secs(120));
    std::thread::sleep(Duration::from_secs(2));
    {
        let f = std::fs::OpenOptions::new().read(true).write(true).open(&mp).unwrap();
        let mut c = V4l2Control { id: VIVID_CID_DISCONNECT, value: 0 };
        // SAFETY: `f` is open for the call; `c` is a valid `struct v4l2_control` the kernel
        // reads and writes, of the size encoded in the request.
        unsafe { vidioc_s_ctrl(f.as_raw_fd(), &mut c) }.expect("VIDIOC_S_CTRL vivid Disconnect");
    }
    let (code, lines) = bg.finish(false, Duration::from_secs(120));
    let stderr = lines.join("\n");
    assert_eq!(code, 0, "an unplugged camera ends the stream, it does not crash it:\n{stderr}");
    assert!(stderr.contains("camera unplugged"), "{stderr}");
    let s = summary(d);
    let x = &s["stages"]["capture"]["extra"];
    assert_eq!(x["end_reason"], "camera unplugged", "{x}");
    assert_eq!(
        (x["format"].as_str(), x["capture_io"].as_str(), u(&x["dmabuf_fds"])),
        (Some("NV12M"), Some("dmabuf"), 8),
        "{x}"
    );
    assert!(u(&s["stages"]["publish"]["frames_out"]) > 0, "frames flowed before the unplug");
    assert_eq!(u(&x["buffers_still_out"]), 0, "no leaked buffer: {x}");
    assert_eq!(u(&x["buffers_home"]), u(&x["buffers"]), "{x}");
    for stage in ["capture", "scale", "infer", "publish"] {
        let e = &s["stages"][stage]["extra"];
        assert_eq!(u(&e["open_fds_setup"]), u(&e["open_fds_exit"]), "{stage}: {e}");
    }
    let line = lines.iter().find(|l| l.contains("camera unplugged")).unwrap();
    println!("EVIDENCE unplug: {line}");
    println!(
        "EVIDENCE unplug: {} NV12M frames (dmabuf I/O, 8 imported fds) before ENODEV, {} published; buffers home {}/{}",
        u(&s["stages"]["capture"]["frames_out"]),
        u(&s["stages"]["publish"]["frames_out"]),
        u(&x["buffers_home"]),
        u(&x["buffers"])
    );
    // Bring vivid back for whatever runs next.
    let mut ok = false;
    for _ in 0..50 {
        if Command::new("rmmod").arg("vivid").status().map(|s| s.success()).unwrap_or(false) {
            ok = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(ok, "rmmod vivid");
    let st = Command::new("insmod").args(["/lib/modules/vivid.ko", "n_devs=2", "multiplanar=1,2"]).status().unwrap();
    assert!(st.success(), "insmod vivid");
    let end = Instant::now() + Duration::from_secs(10);
    while !mp.exists() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(mp.exists(), "vivid is back at {}", mp.display());
}

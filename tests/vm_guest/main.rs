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
// The producer side: a V4L2 capture into a pool shared with the consumer process
// ---------------------------------------------------------------------------------------------

struct CaptureRun {
    cam_label: String,
    granted: zcpipe::capture::v4l2::Granted,
    layout: FrameLayout,
    descs: Vec<FrameDesc>,
    /// The driver's own buffer timestamps (descriptors may carry them clamped).
    driver_ts: Vec<u64>,
    stats: V4l2Stats,
    counters: RingCounters,
    pool: PoolStats,
    n_bufs: usize,
    n_fds: usize,
    returned: usize,
    still_out: usize,
    held: usize,
    memory: String,
    consumer: String,
}

/// Captures `frames` frames from `cfg`'s node into a pool lent to a consumer process
/// (holding each frame `delay_ms`), then drains and stops the stream.
fn capture_run(test: &str, cfg: &V4l2Config, alloc: Option<Allocator>, frames: usize, delay_ms: u64) -> CaptureRun {
    let mut cam = V4l2Capture::open(cfg).unwrap_or_else(|e| panic!("open {cfg:?}: {e:#}"));
    let pool = cam.allocate(cfg.buffers, alloc.as_ref()).unwrap_or_else(|e| panic!("allocate: {e:#}"));
    let (n_bufs, n_fds) = (pool.len(), pool.iter().map(|b| b.len()).sum::<usize>());
    for b in pool.iter().flatten() {
        let want = if alloc.is_some() { b.kind() != &MemoryKind::DmaBuf } else { b.kind() == &MemoryKind::DmaBuf };
        assert!(want, "buffer kind {} for {:?}", b.kind(), cfg.io);
    }
    let memory = alloc.as_ref().map(|a| a.describe()).unwrap_or_else(|| "EXPBUF".into());
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("hop.sock");
    let listener = Listener::bind(&sock).unwrap();
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--ignored", "--test-threads=1"])
        .env("ZCPIPE_VM_CONSUMER", &sock)
        .env("ZCPIPE_VM_DELAY_MS", delay_ms.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let conn = listener.accept(&NEVER).unwrap();
    assert_eq!(conn.peer_pid as u32, child.id(), "SO_PEERCRED names the consumer process");
    let _hello = conn.recv().unwrap();
    let layout = cam.layout();
    let spec = HopSpec {
        policy: RingPolicy::DropOldest,
        capacity: (n_bufs as u32 - 1).max(1),
        memory: memory.clone(),
        layout: Some(layout),
        fps: cam.granted().fps(),
        description: cam.describe(),
        copy_mode: false,
    };
    let mut prod = PoolProducer::offer(conn, pool, spec).unwrap();
    cam.start(&mut prod).unwrap();
    let (mut descs, mut driver_ts) = (vec![], vec![]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while descs.len() < frames {
        assert!(Instant::now() < deadline, "only {} of {frames} frames in 60 s: {:?}", descs.len(), cam.stats());
        match cam.next_frame(&mut prod, &NEVER, Duration::from_millis(200)).unwrap() {
            Next::Frame(d, b) => {
                descs.push(d);
                driver_ts.push(b.timestamp_ns);
                assert!(b.monotonic, "the driver stamps CLOCK_MONOTONIC");
            }
            Next::Idle => {}
            Next::Unplugged => panic!("vivid unplugged?"),
        }
    }
    let (returned, still_out) = prod.finish(Duration::from_secs(20)).unwrap();
    let held = cam.stream_off(&mut prod).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "consumer failed: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let consumer =
        text.find("CONSUMER").map(|i| text[i..].lines().next().unwrap_or("").to_string()).unwrap_or_default();
    assert!(!consumer.is_empty(), "no CONSUMER line in {text:?}");
    CaptureRun {
        cam_label: cam.node().label(),
        granted: cam.granted().clone(),
        layout,
        descs,
        driver_ts,
        stats: cam.stats(),
        counters: prod.counters(),
        pool: prod.stats(),
        n_bufs,
        n_fds,
        returned,
        still_out,
        held,
        memory,
        consumer,
    }
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

/// Captures from `node` in each format and size and checks timing, sequence, layout,
/// pattern and buffer accounting.
fn capture_matrix(test: &str, node: &Path, io: CaptureIo, heap: Option<HeapChoice>, formats: &[Fourcc]) {
    for &fourcc in formats {
        for size in [(640, 480), (1280, 720)] {
            let cfg = V4l2Config {
                device: Some(node.into()),
                format: Some(fourcc),
                size: Some(size),
                fps: Some(30.0),
                buffers: 4,
                io,
            };
            let alloc = heap.map(|h| {
                Allocator::open(h, Path::new("/dev/dma_heap"), Path::new("/dev/udmabuf"), Path::new("/dev/dri"))
                    .unwrap()
            });
            let r = capture_run(test, &cfg, alloc, 24, 0);
            let what = format!("{} {} {}x{} {}", node.display(), format_name(fourcc), size.0, size.1, io.name());
            // What the driver granted, and the layout built from it.
            assert_eq!((r.granted.fourcc, r.granted.width, r.granted.height), (fourcc, size.0, size.1), "{what}");
            let planes = if fourcc == Fourcc::NV12M { 2 } else { 1 };
            assert_eq!(r.granted.planes.len(), planes, "{what}: {:?}", r.granted);
            assert_eq!(r.layout.planes[0].bytesperline, r.granted.planes[0].0, "{what}: stride from bytesperline");
            if fourcc == Fourcc::NV12 {
                assert_eq!(
                    r.layout.planes[1].offset,
                    r.granted.planes[0].0 * size.1,
                    "{what}: CbCr at bytesperline x height"
                );
            }
            assert_eq!(r.n_fds, r.n_bufs * planes, "{what}: one dma-buf per plane");
            // Timing: the driver's buffer timestamps, CLOCK_MONOTONIC, at the granted interval.
            let interval_ns = r.granted.interval.numerator as f64 * 1e9 / r.granted.interval.denominator as f64;
            assert!((interval_ns - 1e9 / 30.0).abs() < 1e5, "{what}: granted {:?}", r.granted.interval);
            let ts = r.driver_ts.clone();
            let desc_ts: Vec<u64> = r.descs.iter().map(|d| d.timestamp_ns).collect();
            assert!(desc_ts.windows(2).all(|w| w[1] >= w[0]), "{what}: descriptor timestamps never go back");
            assert!(
                desc_ts.iter().zip(&ts).all(|(d, t)| d <= t),
                "{what}: descriptors carry the driver's stamp or, if it was ahead, the dequeue time"
            );
            assert!(ts.windows(2).all(|w| w[1] > w[0]), "{what}: timestamps must increase: {ts:?}");
            let now = zcpipe::core::frame::monotonic_ns();
            assert!(now.abs_diff(ts[ts.len() - 1]) < 10_000_000_000, "{what}: timestamps are CLOCK_MONOTONIC");
            let med = median(ts.windows(2).map(|w| w[1] - w[0]).collect());
            let dev = (med as f64 - interval_ns).abs() / interval_ns;
            assert!(
                dev <= 0.20,
                "{what}: median interval {:.2} ms vs granted {:.2} ms",
                med as f64 / 1e6,
                interval_ns / 1e6
            );
            let seqs: Vec<u64> = r.descs.iter().map(|d| d.seq).collect();
            assert!(seqs.windows(2).all(|w| w[1] > w[0]), "{what}: sequence numbers must increase: {seqs:?}");
            assert_eq!(r.stats.bad_timestamps, 0, "{what}");
            // Pixels, as the consumer process read them through the sync guard.
            let c = &r.consumer;
            println!("{what}: {c}; {:?}", r.stats);
            assert!(num(c, "got") > 0, "{what}: {c}");
            assert_eq!(num(c, "bad"), 0, "{what}: every frame shows vivid's 75% colour bars: {c}");
            assert!(
                field(c, "kind").split('+').all(|k| k == "dma-buf"),
                "{what}: the consumer maps real dma-bufs: {c}"
            );
            // Buffers: all home.
            let k = r.counters;
            assert_eq!(k.produced, r.descs.len() as u64, "{what}");
            assert_eq!(k.produced, k.consumed + k.dropped + k.rejected + k.in_flight, "{what}: {k:?}");
            assert_eq!(num(c, "got"), k.consumed, "{what}: {c}");
            assert_eq!(r.still_out, 0, "{what}: every buffer came back");
            assert_eq!(r.n_bufs - r.still_out, r.n_bufs);
            assert_eq!(r.pool.bad_returns, 0, "{what}");
            println!(
                "EVIDENCE exported {} dma-buf fds ({} buffers x {} planes, {}) from {} and passed them to consumer pid {}",
                r.n_fds,
                r.n_bufs,
                planes,
                r.memory,
                r.cam_label,
                field(c, "pid")
            );
            println!("EVIDENCE granted {what}: {}", r.granted.describe());
            println!(
                "EVIDENCE timing {what}: median interval between driver timestamps {:.2} ms (granted {:.2} ms, {:.1}% off), sequence {}..{}, {} driver drops, {} frames, {} stamped ahead of dequeue (max {} µs)",
                med as f64 / 1e6,
                interval_ns / 1e6,
                dev * 100.0,
                seqs[0],
                seqs[seqs.len() - 1],
                r.stats.driver_drops,
                r.descs.len(),
                r.stats.timestamps_ahead,
                r.stats.max_ahead_us
            );
            println!(
                "EVIDENCE pattern {what}: consumer pid {} read {} frames through DMA_BUF_IOCTL_SYNC, 0 off-pattern; bar Y [{}] Cb [{}] Cr [{}] (want Y [{}] within {BAR_TOLERANCE})",
                field(c, "pid"),
                num(c, "got"),
                field(c, "y"),
                field(c, "cb"),
                field(c, "cr"),
                fmt_bars(&BARS_Y)
            );
            println!(
                "EVIDENCE buffers returned {}/{} ({what}): {} from the consumer at end of stream, {} from the driver at STREAMOFF",
                r.n_bufs - r.still_out,
                r.n_bufs,
                r.returned,
                r.held
            );
        }
    }
}

#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn capture_vivid_single_planar_mmap() {
    if let Some((s, d)) = role() {
        return consumer_role(&s, d);
    }
    capture_matrix(
        "capture_vivid_single_planar_mmap",
        &dev("VIVID_SP"),
        CaptureIo::Mmap,
        None,
        &[Fourcc::NV12, Fourcc::YUYV],
    );
}

#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn capture_vivid_single_planar_dmabuf_system_heap() {
    if let Some((s, d)) = role() {
        return consumer_role(&s, d);
    }
    capture_matrix(
        "capture_vivid_single_planar_dmabuf_system_heap",
        &dev("VIVID_SP"),
        CaptureIo::Dmabuf,
        Some(HeapChoice::System),
        &[Fourcc::NV12, Fourcc::YUYV],
    );
}

#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn capture_vivid_single_planar_dmabuf_drm_dumb_buffers() {
    if let Some((s, d)) = role() {
        return consumer_role(&s, d);
    }
    // vivid (vb2-vmalloc) imports vkms's dumb buffers, exported as dma-bufs, and fills them.
    capture_matrix(
        "capture_vivid_single_planar_dmabuf_drm_dumb_buffers",
        &dev("VIVID_SP"),
        CaptureIo::Dmabuf,
        Some(HeapChoice::Drm),
        &[Fourcc::NV12, Fourcc::YUYV],
    );
}

#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn capture_vivid_multi_planar_mmap() {
    if let Some((s, d)) = role() {
        return consumer_role(&s, d);
    }
    capture_matrix(
        "capture_vivid_multi_planar_mmap",
        &dev("VIVID_MP"),
        CaptureIo::Mmap,
        None,
        &[Fourcc::NV12, Fourcc::NV12M, Fourcc::YUYV],
    );
}

#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn capture_vivid_multi_planar_dmabuf_udmabuf() {
    if let Some((s, d)) = role() {
        return consumer_role(&s, d);
    }
    capture_matrix(
        "capture_vivid_multi_planar_dmabuf_udmabuf",
        &dev("VIVID_MP"),
        CaptureIo::Dmabuf,
        Some(HeapChoice::Udmabuf),
        &[Fourcc::NV12, Fourcc::NV12M, Fourcc::YUYV],
    );
}

#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn slow_consumer_costs_no_driver_drops() {
    if let Some((s, d)) = role() {
        return consumer_role(&s, d);
    }
    let cfg = V4l2Config {
        device: Some(dev("VIVID_SP")),
        format: Some(Fourcc::NV12),
        size: Some((640, 480)),
        fps: Some(30.0),
        buffers: 4,
        io: CaptureIo::Mmap,
    };
    // The consumer holds each frame 100 ms: it keeps up with a third of the 30 fps.
    let r = capture_run("slow_consumer_costs_no_driver_drops", &cfg, None, 60, 100);
    let (s, k, c) = (r.stats, r.counters, &r.consumer);
    let span = (s.last_sequence.unwrap() - s.first_sequence.unwrap()) as u64 + 1;
    println!("slow consumer: {c}; {s:?}");
    // Every DQBUF left the driver at least one queued buffer (min 2 after each refill), so
    // no frame was lost for want of a buffer: what zcpipe would cause by holding them.
    assert_eq!(s.driver_starved, 0, "zcpipe always left the driver a buffer: {s:?}");
    // Accounting is exact: every sequence number was dequeued or counted as a driver drop.
    assert_eq!(s.dequeued + s.driver_drops, span + s.sequence_repeats, "{s:?}");
    // vivid itself skips a number now and then when its thread wakes late (jiffies rounding
    // under TCG); a starved driver would lose about two frames in three here.
    assert!(s.driver_drops * 20 <= span, "at most 5% driver drops: {s:?}");
    assert_eq!(k.produced, 60, "{k:?}");
    assert!(k.dropped > 0, "a slow consumer makes zcpipe drop (counted) frames: {k:?}");
    assert_eq!(k.produced, k.consumed + k.dropped + k.rejected + k.in_flight, "{k:?}");
    assert_eq!(k.in_flight, 0, "{k:?}");
    assert_eq!(num(c, "got"), k.consumed, "{c}");
    assert_eq!(
        num(c, "gaps"),
        k.dropped + s.driver_drops,
        "the frames the consumer missed are exactly the counted drops (zcpipe's + the driver's): {c} {k:?} {s:?}"
    );
    assert_eq!(num(c, "bad"), 0, "{c}");
    assert_eq!(r.still_out, 0);
    println!(
        "EVIDENCE slow consumer (100 ms/frame) on {}: driver sequence {}..{} = {span} frames, {} dequeued, {} driver drops (vivid's own), driver never left without a buffer ({} starved); ring produced {} = consumed {} + dropped {} + rejected {} + in flight {}; consumer saw {} frames and {} gaps",
        r.cam_label,
        s.first_sequence.unwrap(),
        s.last_sequence.unwrap(),
        s.dequeued,
        s.driver_drops,
        s.driver_starved,
        k.produced,
        k.consumed,
        k.dropped,
        k.rejected,
        k.in_flight,
        num(c, "got"),
        num(c, "gaps")
    );
    println!(
        "EVIDENCE buffers returned {}/{} (slow consumer): {} at end of stream, {} at STREAMOFF",
        r.n_bufs - r.still_out,
        r.n_bufs,
        r.returned,
        r.held
    );
}

// ---------------------------------------------------------------------------------------------
// Allocators and DMA_BUF_IOCTL_SYNC on a real kernel
// ---------------------------------------------------------------------------------------------

#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn dma_heap_udmabuf_and_sync_work() {
    let heap_dir = Path::new("/dev/dma_heap");
    let udmabuf = Path::new("/dev/udmabuf");
    let dri = Path::new("/dev/dri");
    assert!(dev("DMA_HEAP_SYSTEM").exists() && dev("UDMABUF").exists() && dev("DRM_CARD").exists());
    for choice in [HeapChoice::System, HeapChoice::Udmabuf, HeapChoice::Drm, HeapChoice::Auto] {
        let a = Allocator::open(choice, heap_dir, udmabuf, dri).unwrap();
        if choice == HeapChoice::Auto {
            assert_eq!(a.describe(), "dma-heap /dev/dma_heap/system", "auto picks the system heap when present");
        }
        if choice == HeapChoice::Drm {
            assert_eq!(a.describe(), format!("drm dumb buffers of {} (vkms)", dev("DRM_CARD").display()));
        }
        let mut pool = a.allocate_pool(3, 1 << 20).unwrap();
        for (i, b) in pool.iter_mut().enumerate() {
            assert!(b.kind().needs_sync());
            if choice == HeapChoice::Drm {
                assert_eq!(b.kind(), &MemoryKind::DrmDumb(dev("DRM_CARD")));
                // A dma-buf of the dumb buffer's size: 1 MiB = 1024 x 256 x 32 bpp, exactly.
                let end = nix::unistd::lseek(b.fd().as_raw_fd(), 0, nix::unistd::Whence::SeekEnd).unwrap();
                assert_eq!(end, 1 << 20, "the dma-buf's size");
            }
            // Not a memfd: a real dma-buf (F_GET_SEALS fails on it).
            assert!(
                nix::fcntl::fcntl(b.fd().as_raw_fd(), nix::fcntl::FcntlArg::F_GET_SEALS).is_err(),
                "{} is a dma-buf",
                a.describe()
            );
            let mut w = b.write().unwrap();
            for (j, x) in w.iter_mut().enumerate() {
                *x = (j * 7 + i) as u8;
            }
        }
        for (i, b) in pool.iter().enumerate() {
            let r = b.read().unwrap();
            assert!(r.iter().enumerate().all(|(j, x)| *x == (j * 7 + i) as u8));
        }
        // The raw ioctl, both ends and all directions.
        use zcpipe::sys::dmabuf::*;
        for dir in [DMA_BUF_SYNC_READ, DMA_BUF_SYNC_WRITE, DMA_BUF_SYNC_RW] {
            sync(pool[0].fd(), DMA_BUF_SYNC_START | dir).unwrap();
            sync(pool[0].fd(), DMA_BUF_SYNC_END | dir).unwrap();
        }
        println!(
            "EVIDENCE allocator {:?}: {} gave 3 x 1 MiB dma-bufs; write/read through DMA_BUF_IOCTL_SYNC guards match",
            choice,
            a.describe()
        );
    }
    let e = Allocator::open(HeapChoice::Cma, heap_dir, udmabuf, dri).unwrap_err().to_string();
    assert!(e.contains("--heap cma") && e.contains("heaps found: system"), "{e}");
    // A DRM dumb buffer received by another process is a plain dma-buf to it.
    let drm = Allocator::open(HeapChoice::Drm, heap_dir, udmabuf, dri).unwrap();
    let b = drm.allocate(5000).unwrap();
    assert_eq!(b.size(), 8192);
    let peer = zcpipe::core::dmabuf::DmaBuf::from_peer(b.fd().try_clone_to_owned().unwrap(), 8192).unwrap();
    assert_eq!(peer.kind(), &MemoryKind::DmaBuf);
    // Buffers a V4L2 driver exports (MMAP + EXPBUF) take the sync ioctl too.
    let cfg = V4l2Config {
        device: Some(dev("VIVID_SP")),
        format: Some(Fourcc::NV12),
        size: Some((640, 480)),
        buffers: 2,
        ..Default::default()
    };
    let mut cam = V4l2Capture::open(&cfg).unwrap();
    let mut pool = cam.allocate(2, None).unwrap();
    for b in pool.iter_mut().flatten() {
        assert_eq!(b.kind(), &MemoryKind::DmaBuf);
        let n = b.read().unwrap().len();
        let mut w = b.read_write().unwrap();
        w[0] = w[0].wrapping_add(1);
        assert!(n as u64 >= cam.layout().bytes_needed());
    }
    println!(
        "EVIDENCE sync on {} EXPBUF dma-bufs of {}: DMA_BUF_IOCTL_SYNC START/END read and read-write ok",
        pool.len(),
        cam.node().label()
    );
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

#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn pipeline_from_vivid_to_a_watch_client() {
    let sp = dev("VIVID_SP");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut args = run_args(d, &format!("v4l2:{}", sp.display()));
    args.extend(
        ["--format", "NV12", "--size", "640x480", "--fps", "30", "--frames", "150", "--scaler", "cpu", "--no-print"]
            .map(String::from),
    );
    let mut bg = Background::start(&args);
    bg.wait_for("streaming from", Duration::from_secs(120));
    let sock = d.join("detections.sock");
    let mut w = zcpipe();
    w.arg("watch").arg(&sock).args(["--json", "--count", "20"]);
    let watch = output_within(w, Duration::from_secs(120));
    let (code, lines) = bg.finish(false, Duration::from_secs(120));
    let stderr = lines.join("\n");
    assert!(watch.status.success(), "watch: {watch:?}");
    let frames: Vec<Value> =
        String::from_utf8_lossy(&watch.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(frames.len(), 20, "the watch client got 20 frames");
    let seqs: Vec<u64> = frames.iter().map(|f| u(&f["seq"])).collect();
    assert!(seqs.windows(2).all(|w| w[1] > w[0]), "{seqs:?}");
    for f in &frames {
        assert_eq!((u(&f["width"]), u(&f["height"])), (640, 480), "{f}");
        assert!(f["latency_us"]["total"].as_f64().unwrap() > 0.0, "{f}");
        assert!(f["detections"].as_array().unwrap().is_empty(), "--infer none detects nothing: {f}");
    }
    assert_eq!(code, 0, "zcpipe run exit code; stderr:\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let s = summary(d);
    for (stage, c) in s["exit_codes"].as_object().unwrap() {
        assert_eq!(c, 0, "{stage} exit code");
    }
    let st = &s["stages"];
    let cap = &st["capture"];
    assert_eq!(u(&cap["frames_out"]), 150, "{cap}");
    let x = &cap["extra"];
    assert_eq!(x["device"], sp.display().to_string());
    assert_eq!((x["format"].as_str().unwrap(), u(&x["width"]), u(&x["height"])), ("NV12", 640, 480));
    assert_eq!(u(&x["buffers_still_out"]), 0, "{x}");
    assert_eq!(u(&x["buffers_home"]), u(&x["buffers"]), "{x}");
    assert_eq!(x["end_reason"], "frame limit");
    assert!(u(&x["dequeued"]) >= 150);
    assert_eq!(u(&x["driver_starved"]), 0, "zcpipe always left the driver a buffer: {x}");
    for stage in ["capture", "scale", "infer", "publish"] {
        let e = &st[stage]["extra"];
        assert_eq!(
            u(&e["open_fds_setup"]),
            u(&e["open_fds_exit"]),
            "{stage}: open fds after set-up and before exit: {e}"
        );
    }
    // Counters add up, hop by hop.
    for (up, down) in [("capture", "scale"), ("scale", "infer"), ("infer", "publish")] {
        let k = &st[up]["output_ring"];
        assert_eq!(
            u(&k["produced"]),
            u(&k["consumed"]) + u(&k["dropped"]) + u(&k["rejected"]) + u(&k["in_flight"]),
            "{up}: {k}"
        );
        assert_eq!(u(&k["in_flight"]), 0, "{up}: {k}");
        assert_eq!(u(&k["rejected"]), 0, "{up}: {k}");
        assert_eq!(u(&st[down]["frames_in"]), u(&k["consumed"]), "{down} took what {up}'s ring says it consumed");
    }
    assert_eq!(u(&st["capture"]["output_ring"]["produced"]), 150);
    let evidence: Vec<&String> = lines
        .iter()
        .filter(|l| {
            l.contains("passed") && l.contains("dma-buf fds") || l.contains("buffers home") || l.contains("granted")
        })
        .collect();
    assert!(lines.iter().any(|l| l.contains("4/4 buffers home")), "{stderr}");
    for l in evidence {
        println!("EVIDENCE pipeline: {l}");
    }
    let k = &st["capture"]["output_ring"];
    println!(
        "EVIDENCE pipeline counters: captured {} (dequeued {}, driver drops {}, driver starved {}), capture->scale consumed {} dropped {}, scaled {}, inferred {}, published {}; watch got seq {}..{}",
        u(&cap["frames_out"]),
        u(&x["dequeued"]),
        u(&x["driver_drops"]),
        u(&x["driver_starved"]),
        u(&k["consumed"]),
        u(&k["dropped"]),
        u(&st["scale"]["frames_out"]),
        u(&st["infer"]["frames_out"]),
        u(&st["publish"]["frames_out"]),
        seqs[0],
        seqs[seqs.len() - 1]
    );
    for stage in ["capture", "scale", "infer", "publish"] {
        let e = &st[stage]["extra"];
        println!(
            "EVIDENCE open fds {stage}: {} after set-up, {} before exit",
            u(&e["open_fds_setup"]),
            u(&e["open_fds_exit"])
        );
    }
}

#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn pipeline_with_drm_dumb_buffers() {
    // `--heap drm`: vivid captures into vkms's dumb buffers (DMABUF import), and the scale
    // stage's output pool is dumb buffers too; every frame crosses three processes as dma-bufs.
    let sp = dev("VIVID_SP");
    let card = dev("DRM_CARD");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut args = run_args(d, &format!("v4l2:{}", sp.display()));
    args.extend(
        [
            "--format",
            "NV12",
            "--size",
            "640x480",
            "--fps",
            "30",
            "--frames",
            "60",
            "--scaler",
            "cpu",
            "--no-print",
            "--capture-io",
            "dmabuf",
            "--heap",
            "drm",
        ]
        .map(String::from),
    );
    let mut c = zcpipe();
    c.args(&args);
    let o = output_within(c, Duration::from_secs(180));
    let stderr = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "zcpipe run --heap drm; stderr:\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let dumb = format!("drm dumb buffers of {} (vkms)", card.display());
    let imported = format!("{dumb} imported by vivid (V4L2_MEMORY_DMABUF)");
    assert!(stderr.contains(&imported), "capture's pool: want \"{imported}\" in\n{stderr}");
    let s = summary(d);
    for (stage, c) in s["exit_codes"].as_object().unwrap() {
        assert_eq!(c, 0, "{stage} exit code");
    }
    let st = &s["stages"];
    let x = &st["capture"]["extra"];
    assert_eq!(u(&st["capture"]["frames_out"]), 60, "{}", st["capture"]);
    assert_eq!(u(&x["buffers_still_out"]), 0, "{x}");
    assert_eq!(u(&x["buffers_home"]), u(&x["buffers"]), "{x}");
    assert_eq!(u(&st["publish"]["frames_in"]), u(&st["infer"]["output_ring"]["consumed"]));
    assert!(u(&st["scale"]["frames_out"]) > 0 && u(&st["publish"]["frames_out"]) > 0, "{st}");
    let pool_lines: Vec<&str> = stderr.lines().filter(|l| l.contains(&dumb)).collect();
    for l in &pool_lines {
        println!("EVIDENCE --heap drm: {l}");
    }
    println!(
        "EVIDENCE --heap drm pipeline: vivid captured {} frames into {dumb} (DMABUF import), scaled {}, inferred {}, published {}; {} of {} buffers home",
        u(&st["capture"]["frames_out"]),
        u(&st["scale"]["frames_out"]),
        u(&st["infer"]["frames_out"]),
        u(&st["publish"]["frames_out"]),
        u(&x["buffers_home"]),
        u(&x["buffers"])
    );
}

/// Runs zcpipe with `args`, expecting it to fail with one error line containing every
/// string of `want`; returns that line.
fn fails_cleanly(what: &str, args: &[String], want: &[&str]) -> String {
    let mut c = zcpipe();
    c.args(args);
    let o = output_within(c, Duration::from_secs(120));
    let stderr = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(!o.status.success(), "{what}: zcpipe must fail; stderr:\n{stderr}");
    assert!(!stderr.contains("panicked"), "{what}: no panic:\n{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("error:")).collect();
    assert_eq!(errors.len(), 1, "{what}: exactly one error line:\n{stderr}");
    for w in want {
        assert!(errors[0].contains(w), "{what}: {:?} should mention {w:?}", errors[0]);
    }
    println!("EVIDENCE bad input ({what}): exit {:?}: {}", o.status.code(), errors[0]);
    errors[0].to_string()
}

#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn bad_input_fails_with_one_clear_line() {
    let (sp, m2m) = (dev("VIVID_SP"), dev("VIM2M"));
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let args = |src: String, extra: &[&str]| {
        let mut a = run_args(d, &src);
        a.extend(extra.iter().map(|s| s.to_string()));
        a.extend(["--frames", "5"].map(String::from));
        a
    };
    let m2m_s = m2m.display().to_string();
    fails_cleanly(
        "a mem2mem node",
        &args(format!("v4l2:{m2m_s}"), &[]),
        &[&m2m_s, "vim2m", "cannot capture", "VIDEO_M2M", "zcpipe doctor"],
    );
    fails_cleanly(
        "a missing node",
        &args("v4l2:/dev/video99".into(), &[]),
        &["/dev/video99 does not exist", "capture nodes here"],
    );
    fails_cleanly(
        "an unsupported format",
        &args(format!("v4l2:{}", sp.display()), &["--format", "NV12M"]),
        &["does not offer NV12M", "it offers", "zcpipe reads NV12, NV16, YUYV, RGB24, BGR24", "--format"],
    );
    fails_cleanly(
        "an absent heap",
        &args(format!("v4l2:{}", sp.display()), &["--heap", "cma"]),
        &["--heap cma", "heaps found: system"],
    );
    fails_cleanly(
        "an absent heap, dmabuf I/O",
        &args(format!("v4l2:{}", sp.display()), &["--heap", "cma", "--capture-io", "dmabuf"]),
        &["--heap cma"],
    );

    fails_cleanly(
        "a mem2mem scaler that cannot take the capture format",
        &args(format!("v4l2:{}", sp.display()), &["--format", "NV12", "--scaler", &format!("v4l2m2m:{m2m_s}")]),
        &[&m2m_s, "cannot convert capture's NV12", "OUTPUT queue", "RGB24", "--format"],
    );
    fails_cleanly(
        "a capture node as the mem2mem scaler",
        &args(format!("v4l2:{}", sp.display()), &["--scaler", &format!("v4l2m2m:{}", sp.display())]),
        &["not a mem2mem device", &m2m_s],
    );

    // A busy device: a second zcpipe on the node the first one streams from.
    let first_dir = tempfile::tempdir().unwrap();
    let mut first = Background::start(&run_args(first_dir.path(), &format!("v4l2:{}", sp.display())));
    first.wait_for("streaming from", Duration::from_secs(120));
    fails_cleanly(
        "a busy device",
        &args(format!("v4l2:{}", sp.display()), &[]),
        &["in use by another process", &sp.display().to_string()],
    );
    let (code, lines) = first.finish(true, Duration::from_secs(60));
    assert_eq!(code, 0, "the first zcpipe stops cleanly on SIGTERM: {lines:#?}");
    assert!(lines.iter().any(|l| l.contains("4/4 buffers home")), "{lines:#?}");
}

/// `zcpipe run --dry-run` with no flags in the guest: the first vivid node is the camera,
/// and vim2m (not mainline `rockchip-rga`) is not a scaler auto picks: the CPU scales.
#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn plan_picks_the_camera_and_the_cpu_scaler() {
    let (sp, mp, m2m) = (dev("VIVID_SP"), dev("VIVID_MP"), dev("VIM2M"));
    let mut c = zcpipe();
    c.args(["run", "--dry-run", "--infer", "none"]);
    let o = output_within(c, Duration::from_secs(120));
    let (stdout, stderr) =
        (String::from_utf8_lossy(&o.stdout).to_string(), String::from_utf8_lossy(&o.stderr).to_string());
    assert_eq!(o.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let line = stdout.lines().next().unwrap_or_default();
    let first = std::cmp::min_by_key(sp.clone(), mp.clone(), |p| {
        p.display().to_string()[10..].parse::<u32>().unwrap_or(u32::MAX)
    });
    assert!(line.starts_with(&format!("plan: v4l2:{} (vivid) ", first.display())), "{stdout}");
    assert!(line.contains("(mmap, EXPBUF) -> cpu -> "), "{stdout}");
    let scaler = stdout.lines().find_map(|l| l.strip_prefix("  scaler: ")).unwrap_or_default();
    assert!(scaler.contains(&format!("{} (vim2m)", m2m.display())) && scaler.contains("rockchip-rga"), "{stdout}");
    println!("EVIDENCE plan in the guest: {line}");
}

/// The formats of `queue` (`capture` or `output`) of a `zcpipe doctor --json` node.
fn doctor_formats<'a>(node: &'a Value, queue: &str) -> Vec<&'a Value> {
    node["queues"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|q| q["queue"] == queue)
        .flat_map(|q| q["formats"].as_array().unwrap())
        .collect()
}

fn doctor_format_names(node: &Value, queue: &str) -> Vec<String> {
    doctor_formats(node, queue).iter().map(|f| f["name"].as_str().unwrap().to_string()).collect()
}

#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn doctor_lists_vivid_vim2m_and_heaps() {
    let (sp, mp, m2m) = (dev("VIVID_SP"), dev("VIVID_MP"), dev("VIM2M"));
    let mut c = zcpipe();
    c.args(["doctor", "--json"]);
    let o = output_within(c, Duration::from_secs(120));
    let stderr = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(0), "doctor --json; stderr:\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let r: Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    let nodes = r["nodes"].as_array().unwrap();
    let node = |p: &Path| -> &Value {
        nodes
            .iter()
            .find(|n| n["path"] == p.display().to_string())
            .unwrap_or_else(|| panic!("doctor does not list {}: {nodes:#?}", p.display()))
    };
    // Every /dev/video* node of the guest, in numeric order.
    let mut want: Vec<(u32, String)> = std::fs::read_dir("/dev")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            Some((name.strip_prefix("video")?.parse().ok()?, format!("/dev/{name}")))
        })
        .collect();
    want.sort();
    let listed: Vec<&str> = nodes.iter().map(|n| n["path"].as_str().unwrap()).collect();
    assert_eq!(listed, want.iter().map(|(_, p)| p.as_str()).collect::<Vec<_>>());

    // vivid, single-planar: a camera with NV12 and YUYV, and frame sizes with rates.
    let n = node(&sp);
    assert_eq!(
        (n["driver"].as_str(), n["role"].as_str(), n["streaming"].as_bool()),
        (Some("vivid"), Some("capture"), Some(true)),
        "{n}"
    );
    assert_eq!(n["usage"], format!("--source v4l2:{}", sp.display()));
    let sp_formats = doctor_format_names(n, "capture");
    assert!(sp_formats.iter().any(|f| f == "NV12") && sp_formats.iter().any(|f| f == "YUYV"), "{sp_formats:?}");
    assert!(!sp_formats.iter().any(|f| f == "NV12M"), "the single-planar node has no NV12M: {sp_formats:?}");
    let nv12 = doctor_formats(n, "capture").into_iter().find(|f| f["name"] == "NV12").unwrap();
    assert_eq!(nv12["zcpipe"], true);
    assert_eq!(nv12["sizes"]["type"], "discrete", "{nv12}");
    let sizes = nv12["sizes"]["sizes"].as_array().unwrap();
    let size = |w: u64, h: u64| {
        sizes.iter().find(|s| s["width"] == w && s["height"] == h).unwrap_or_else(|| panic!("no {w}x{h} in {nv12}"))
    };
    for (w, h) in [(640, 480), (1280, 720)] {
        assert!(!size(w, h)["fps"].as_array().unwrap().is_empty(), "{w}x{h} has frame rates: {nv12}");
    }

    // vivid, multi-planar.
    let n = node(&mp);
    assert_eq!((n["driver"].as_str(), n["role"].as_str()), (Some("vivid"), Some("capture-mplane")), "{n}");
    assert!(n["caps_names"].as_str().unwrap().contains("VIDEO_CAPTURE_MPLANE"), "{n}");
    let mp_formats = doctor_format_names(n, "capture");
    assert!(mp_formats.iter().any(|f| f == "NV12M"), "{mp_formats:?}");

    // vim2m: mem2mem, RGB24 on its OUTPUT queue, listed for --scaler.
    let n = node(&m2m);
    assert_eq!(n["driver"], "vim2m", "{n}");
    assert!(n["role"].as_str().unwrap().starts_with("mem2mem"), "{n}");
    assert_eq!(n["usage"], format!("--scaler v4l2m2m:{}", m2m.display()));
    let queues: Vec<&str> = n["queues"].as_array().unwrap().iter().map(|q| q["queue"].as_str().unwrap()).collect();
    assert_eq!(queues, ["output", "capture"]);
    let (m2m_out, m2m_cap) = (doctor_format_names(n, "output"), doctor_format_names(n, "capture"));
    assert!(m2m_out.iter().any(|f| f == "RGB24"), "{m2m_out:?}");
    assert!(!m2m_cap.is_empty(), "{n}");

    // Heaps and udmabuf.
    let heaps = r["heaps"].as_array().unwrap();
    let system = heaps.iter().find(|h| h["path"] == "/dev/dma_heap/system").unwrap_or_else(|| panic!("{heaps:#?}"));
    assert_eq!((system["openable"].as_bool(), system["read_write"].as_bool()), (Some(true), Some(true)), "{system}");
    assert_eq!(
        (system["choice"].as_str(), system["used_by_choice"].as_bool()),
        (Some("system"), Some(true)),
        "{system}"
    );
    assert_eq!(r["heap_auto"]["allocator"], "dma-heap /dev/dma_heap/system");
    assert_eq!(r["heap_auto"]["dma_buf"], true);
    let u = &r["udmabuf"];
    assert_eq!((u["present"].as_bool(), u["openable"].as_bool()), (Some(true), Some(true)), "{u}");
    // No device tree in the x86 guest; nothing else is wrong with it.
    assert!(r["soc"]["soc"].is_null(), "{}", r["soc"]);
    assert_eq!(r["problems"], serde_json::json!([]), "the guest has everything zcpipe needs");

    // The text report, for the record.
    let mut c = zcpipe();
    c.arg("doctor");
    let o = output_within(c, Duration::from_secs(120));
    assert_eq!(o.status.code(), Some(0));
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(text.lines().any(|l| l.trim() == "no problems found"), "{text}");
    for l in text.lines() {
        let t = l.trim_start();
        println!("  | {l}");
        let keep = t.starts_with("==")
            || t.starts_with("/dev/video")
            || t.starts_with("role:")
            || t.starts_with("OUTPUT queue")
            || t.starts_with("CAPTURE queue")
            || t.starts_with("NV12")
            || t.starts_with("YUYV")
            || t.starts_with("RGB24")
            || t.starts_with("/dev/dma_heap/")
            || t.starts_with("/dev/dri/")
            || t.starts_with("--display")
            || t.starts_with("--heap drm")
            || t.starts_with("--heap auto")
            || t.starts_with("present,")
            || t.starts_with("lib")
            || t.starts_with("SoC:")
            || t == "no problems found";
        if keep {
            println!("EVIDENCE doctor: {t}");
        }
    }
    println!(
        "EVIDENCE doctor: {} video nodes; {} ({} formats) capture with NV12 and YUYV; {} ({} formats) capture-mplane with NV12M; {} mem2mem, OUTPUT {:?}, CAPTURE {:?}; heaps {:?}; --heap auto: {}; udmabuf openable, size_limit_mb {}; {} problems",
        nodes.len(),
        sp.display(),
        sp_formats.len(),
        mp.display(),
        mp_formats.len(),
        m2m.display(),
        m2m_out,
        m2m_cap,
        heaps.iter().map(|h| h["name"].as_str().unwrap()).collect::<Vec<_>>(),
        r["heap_auto"]["allocator"].as_str().unwrap(),
        u["size_limit_mb"],
        r["problems"].as_array().unwrap().len()
    );
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

/// Runs last (tests run in name order): it unplugs vivid's multi-planar instance, then
/// reloads the vivid module so later tests find it again.
#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn doctor_lists_vkms_connectors_planes_and_verdicts() {
    let card = dev("DRM_CARD");
    let mut c = zcpipe();
    c.args(["doctor", "--json"]);
    let o = output_within(c, Duration::from_secs(120));
    assert_eq!(o.status.code(), Some(0), "doctor --json; stderr:\n{}", String::from_utf8_lossy(&o.stderr));
    let r: Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    let d = &r["drm"];
    assert_eq!(d["dir"], "/dev/dri");
    let cards = d["cards"].as_array().unwrap();
    assert_eq!(cards.len(), 1, "vkms is the guest's one card: {d:#}");
    let k = &cards[0];
    assert_eq!(k["path"], card.display().to_string());
    assert_eq!(
        (k["driver"].as_str(), k["dumb_buffers"].as_bool(), k["atomic"].as_bool()),
        (Some("vkms"), Some(true), Some(true)),
        "{k}"
    );
    assert_eq!(k["master_free"], true, "nothing else holds the guest's display: {k}");
    assert!(k["error"].is_null() && k["kms_error"].is_null(), "{k}");
    // Connectors: Virtual-1 connected with modes, 1024x768 preferred (vkms's default); the
    // writeback connector (enable_writeback=1), shown with DRM_CLIENT_CAP_WRITEBACK_CONNECTORS.
    let conns = k["connectors"].as_array().unwrap();
    let virt = conns.iter().find(|c| c["name"] == "Virtual-1").unwrap_or_else(|| panic!("no Virtual-1: {conns:#?}"));
    assert_eq!((virt["state"].as_str(), virt["writeback"].as_bool()), (Some("connected"), Some(false)), "{virt}");
    let modes = virt["modes"].as_array().unwrap();
    assert!(modes.len() > 10, "{virt}");
    let preferred: Vec<(u64, u64)> =
        modes.iter().filter(|m| m["preferred"] == true).map(|m| (u(&m["width"]), u(&m["height"]))).collect();
    assert_eq!(preferred, [(1024, 768)], "{virt}");
    assert!(modes.iter().any(|m| u(&m["width"]) == 1920 && u(&m["height"]) == 1080), "{virt}");
    let wb: Vec<&Value> = conns.iter().filter(|c| c["writeback"] == true).collect();
    assert_eq!(wb.len(), 1, "{conns:#?}");
    assert_eq!(wb[0]["name"], "Writeback-1");
    // One CRTC; planes: one primary, overlays (enable_overlay=1), one cursor, all on it,
    // with XR24 and AR24.
    let crtcs = k["crtcs"].as_array().unwrap();
    assert_eq!(crtcs.len(), 1, "{k}");
    let crtc_id = u(&crtcs[0]["id"]);
    let planes = k["planes"].as_array().unwrap();
    let count = |kind: &str| planes.iter().filter(|p| p["kind"] == kind).count();
    assert_eq!((count("primary"), count("cursor")), (1, 1), "{planes:#?}");
    assert!(count("overlay") >= 1, "{planes:#?}");
    assert_eq!(
        count("primary") + count("overlay") + count("cursor"),
        planes.len(),
        "every plane has a known type: {planes:#?}"
    );
    for p in planes {
        assert_eq!(p["crtcs"], serde_json::json!([crtc_id]), "{p}");
        let f = strings_of(&p["formats"]);
        assert!(f.contains(&"XR24".to_string()) && f.contains(&"AR24".to_string()), "{p}");
    }
    // The verdicts.
    assert_eq!(d["display"]["can_work"], true, "{}", d["display"]);
    assert!(
        d["display"]["why"].as_str().unwrap().contains("Virtual-1 connected, preferred mode 1024x768@60"),
        "{}",
        d["display"]
    );
    assert_eq!(
        d["heap_drm"],
        serde_json::json!({"can_work": true, "why": format!("drm dumb buffers of {} (vkms)", card.display()), "fix": null})
    );
    // The text.
    let mut c = zcpipe();
    c.arg("doctor");
    let o = output_within(c, Duration::from_secs(120));
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let section: Vec<&str> =
        text.lines().skip_while(|l| !l.starts_with("== DRM cards")).take_while(|l| !l.is_empty()).collect();
    assert_eq!(section.first().copied(), Some("== DRM cards (/dev/dri/card*): 1 =="), "{text}");
    assert!(
        section.iter().any(|l| l.trim_start().starts_with("connector Virtual-1 ")
            && l.contains(": connected: ")
            && l.contains("1024x768@60 (preferred)")),
        "{section:#?}"
    );
    assert!(section.iter().any(|l| l.contains("connector Writeback-1") && l.contains("(writeback")), "{section:#?}");
    assert!(
        section.iter().any(|l| l.trim_start().starts_with("plane ") && l.contains(" primary ") && l.contains("XR24")),
        "{section:#?}"
    );
    assert!(section.iter().any(|l| l.trim_start().starts_with("--display: can work: ")), "{section:#?}");
    assert!(
        section.iter().any(|l| l.trim_start().starts_with("--heap drm: can work: drm dumb buffers of")),
        "{section:#?}"
    );
    for l in &section {
        println!("EVIDENCE doctor DRM: {l}");
    }
}

fn strings_of(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect()
}

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

/// RGB of eight vertical bars, left to right (bar `k` spans columns `80k..80k+80` of a
/// 640-wide frame); buffer 1 uses them right to left, so a mixed-up index shows.
const M2M_BARS: [[u8; 3]; 8] = [
    [250, 250, 250],
    [250, 250, 10],
    [10, 250, 250],
    [10, 250, 10],
    [250, 10, 250],
    [250, 10, 10],
    [10, 10, 250],
    [10, 10, 10],
];

#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn v4l2m2m_scaler_letterboxes_rgb24_into_bgr_on_vim2m() {
    use zcpipe::scale::v4l2m2m::V4l2M2mScaler;
    let m2m = dev("VIM2M");
    let alloc = Allocator::open(
        HeapChoice::System,
        Path::new("/dev/dma_heap"),
        Path::new("/dev/udmabuf"),
        Path::new("/dev/dri"),
    )
    .unwrap();
    let src_layout = FrameLayout::packed24(Fourcc::RGB24, 640, 480, 1920);
    let dst_layout = FrameLayout::packed24(Fourcc::BGR24, 416, 416, 1248);
    let mut src = vec![];
    for b in 0..2usize {
        let mut d = alloc.allocate(src_layout.bytes_needed()).unwrap();
        {
            let mut w = d.write().unwrap();
            for row in w.chunks_exact_mut(1920) {
                for (x, px) in row.chunks_exact_mut(3).enumerate() {
                    let k = if b == 0 { x / 80 } else { 7 - x / 80 };
                    px.copy_from_slice(&M2M_BARS[k]);
                }
            }
        }
        src.push(vec![d]);
    }
    let mut dst = alloc.allocate_pool(2, dst_layout.bytes_needed()).unwrap();
    let mut m = V4l2M2mScaler::open(&m2m).unwrap();
    m.bind_pools(&src, &src_layout, &mut dst, &dst_layout, Letterbox::new(Placement::TopLeft, 114)).unwrap();
    // Source buffer 0 into pool buffer 1 and source 1 into pool 0: indices are kept apart.
    let lb0 = m.scale_index(0, 1).unwrap();
    let lb1 = m.scale_index(1, 0).unwrap();
    assert_eq!((lb0.resized_w, lb0.resized_h, lb0.src_w, lb0.src_h), (416, 312, 640, 480), "{lb0:?}");
    assert_eq!(lb0, lb1);
    assert!((lb0.scale - 0.65).abs() < 1e-6, "{lb0:?}");
    let again = m.scale_index(0, 1).unwrap();
    assert_eq!(again, lb0);
    drop(m);
    for (j, bars_reversed) in [(1usize, false), (0usize, true)] {
        let r = dst[j].read().unwrap();
        let px =
            |x: usize, y: usize| -> [u8; 3] { [r[y * 1248 + x * 3], r[y * 1248 + x * 3 + 1], r[y * 1248 + x * 3 + 2]] };
        let mut seen = vec![];
        for k in 0..8usize {
            // The middle of bar k in the 416-wide image: 52 px per bar.
            let x = k * 52 + 26;
            let want_rgb = M2M_BARS[if bars_reversed { 7 - k } else { k }];
            for y in [0usize, 156, 311] {
                let got = px(x, y);
                assert_eq!(got, [want_rgb[2], want_rgb[1], want_rgb[0]], "pool buffer {j}, bar {k} at ({x},{y}): BGR");
            }
            seen.push(format!("{:?}", px(x, 156)));
        }
        let pad_rows = &r[312 * 1248..416 * 1248];
        assert!(pad_rows.iter().all(|&v| v == 114), "pool buffer {j}: rows 312..416 are the pad value");
        println!(
            "EVIDENCE v4l2m2m: pool buffer {j} (from source {}): bar centres BGR {} ; rows 312..416 all 114",
            if bars_reversed { 1 } else { 0 },
            seen.join(" ")
        );
    }
    println!("EVIDENCE v4l2m2m: {} RGB24 640x480 -> BGR24 416x312 in a 416x416 letterbox, 3 frames, dma-bufs from /dev/dma_heap/system imported on both queues", m2m.display());

    // NV12 in: vim2m's OUTPUT queue takes RGB only; the error names both sides.
    let nv12 = FrameLayout::nv12(640, 480, 16);
    let nsrc = vec![vec![alloc.allocate(nv12.bytes_needed()).unwrap()]];
    let mut m = V4l2M2mScaler::open(&m2m).unwrap();
    let e = format!(
        "{:#}",
        m.bind_pools(&nsrc, &nv12, &mut dst, &dst_layout, Letterbox::new(Placement::TopLeft, 114)).unwrap_err()
    );
    assert!(e.contains("cannot convert capture's NV12 into the model's BGR24") && e.contains("RGB24"), "{e}");
    println!("EVIDENCE v4l2m2m refuses NV12: {e}");
    drop(m);

    // A centred letterbox (Ultralytics, YOLOv5) of this 4:3 frame needs pad rows above the
    // picture: the COMPOSE rectangle, which vim2m does not offer (no selection ioctls).
    // Refused at start-up, naming the fix.
    let rgb_layout = FrameLayout::packed24(Fourcc::RGB24, 416, 416, 1248);
    let mut m = V4l2M2mScaler::open(&m2m).unwrap();
    let e = format!(
        "{:#}",
        m.bind_pools(&src, &src_layout, &mut dst, &rgb_layout, Letterbox::new(Placement::Center, 114)).unwrap_err()
    );
    assert!(
        e.contains("cannot centre the picture")
            && e.contains("COMPOSE")
            && e.contains("--letterbox top-left")
            && e.contains("--scaler cpu"),
        "{e}"
    );
    assert!(!e.contains('\n'), "one line: {e}");
    println!("EVIDENCE v4l2m2m refuses a centred letterbox on vim2m: {e}");
    drop(m);

    // RGB24 out (the order Ultralytics and YOLOv5 models take), top-left: the bars in RGB.
    let mut m = V4l2M2mScaler::open(&m2m).unwrap();
    m.bind_pools(&src, &src_layout, &mut dst, &rgb_layout, Letterbox::new(Placement::TopLeft, 114)).unwrap();
    m.scale_index(0, 0).unwrap();
    drop(m);
    let r = dst[0].read().unwrap();
    for (k, bar) in M2M_BARS.iter().enumerate() {
        let at = 156 * 1248 + (k * 52 + 26) * 3;
        assert_eq!(&r[at..at + 3], bar, "RGB24 bar {k}");
    }
    assert!(r[312 * 1248..416 * 1248].iter().all(|&v| v == 114), "RGB24: rows 312..416 are the pad value");
    println!("EVIDENCE v4l2m2m: RGB24 640x480 -> RGB24 416x312 top-left on vim2m, bars in RGB order");
}

#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn pipeline_vivid_rgb24_through_vim2m() {
    let (sp, m2m) = (dev("VIVID_SP"), dev("VIM2M"));
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut args = run_args(d, &format!("v4l2:{}", sp.display()));
    let scaler = format!("v4l2m2m:{}", m2m.display());
    args.extend(
        ["--format", "RGB24", "--size", "640x480", "--fps", "10", "--frames", "40", "--scaler", &scaler, "--no-print"]
            .map(String::from),
    );
    let mut bg = Background::start(&args);
    bg.wait_for("streaming from", Duration::from_secs(120));
    let sock = d.join("detections.sock");
    let mut w = zcpipe();
    w.arg("watch").arg(&sock).args(["--json", "--count", "10"]);
    let watch = output_within(w, Duration::from_secs(120));
    let (code, lines) = bg.finish(false, Duration::from_secs(120));
    let stderr = lines.join("\n");
    assert!(watch.status.success(), "watch: {watch:?}");
    assert_eq!(code, 0, "zcpipe run exit code; stderr:\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let frames: Vec<Value> =
        String::from_utf8_lossy(&watch.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(frames.len(), 10, "the watch client got 10 frames");
    for f in &frames {
        assert_eq!((u(&f["width"]), u(&f["height"])), (640, 480), "{f}");
    }
    let bind = lines
        .iter()
        .find(|l| l.contains("v4l2m2m:") && l.contains("imports"))
        .unwrap_or_else(|| panic!("no v4l2m2m bind line:\n{stderr}"));
    assert!(
        bind.contains("imports 4 capture buffers (4 dma-bufs)") && bind.contains("imports 3 pool buffers"),
        "{bind}"
    );
    assert!(bind.contains("BGR24 416x312 bytesperline 1248"), "{bind}");
    let s = summary(d);
    let st = &s["stages"];
    for (stage, c) in s["exit_codes"].as_object().unwrap() {
        assert_eq!(c, 0, "{stage} exit code");
    }
    assert_eq!(u(&st["capture"]["frames_out"]), 40);
    for (up, down) in [("capture", "scale"), ("scale", "infer"), ("infer", "publish")] {
        let k = &st[up]["output_ring"];
        assert_eq!(
            u(&k["produced"]),
            u(&k["consumed"]) + u(&k["dropped"]) + u(&k["rejected"]) + u(&k["in_flight"]),
            "{up}: {k}"
        );
        assert_eq!(u(&st[down]["frames_in"]), u(&k["consumed"]), "{down} took what {up}'s ring says it consumed");
    }
    let x = &st["capture"]["extra"];
    assert_eq!(x["format"], "RGB24", "{x}");
    assert_eq!(u(&x["buffers_home"]), u(&x["buffers"]), "{x}");
    for stage in ["capture", "scale", "infer", "publish"] {
        let e = &st[stage]["extra"];
        assert_eq!(u(&e["open_fds_setup"]), u(&e["open_fds_exit"]), "{stage}: {e}");
    }
    println!("EVIDENCE pipeline through vim2m: {bind}");
    println!(
        "EVIDENCE pipeline through vim2m: captured {} RGB24 640x480, scaled {} on {}, published {}, capture->scale dropped {}; buffers home {}/{}",
        u(&st["capture"]["frames_out"]),
        u(&st["scale"]["frames_out"]),
        m2m.display(),
        u(&st["publish"]["frames_out"]),
        u(&st["capture"]["output_ring"]["dropped"]),
        u(&x["buffers_home"]),
        u(&x["buffers"])
    );
}

// ---------------------------------------------------------------------------------------------
// The display on vkms
// ---------------------------------------------------------------------------------------------

/// The detections line the fake publisher sends: one `person` box in 640x480 frame pixels.
const DISPLAY_BOX: [f32; 4] = [100.0, 50.0, 300.0, 250.0];

/// A replay file (`--infer replay:FILE`) whose one frame line, looped, puts [`DISPLAY_BOX`]
/// (a person) on every 640x480 frame: the boxes the display draws come out of the whole
/// pipeline (infer -> publish -> the detections socket), as a detector's would.
fn display_replay(dir: &Path) -> PathBuf {
    let b = DISPLAY_BOX;
    let p = dir.join("boxes.jsonl");
    std::fs::write(&p, format!("{{\"type\":\"frame\",\"width\":640,\"height\":480,\"detections\":[{{\"class_id\":0,\"label\":\"person\",\"score\":0.9,\"box\":[{},{},{},{}]}}]}}\n", b[0], b[1], b[2], b[3])).unwrap();
    p
}

/// `args` (from [`run_args`]) with `--infer replay:FILE` in place of `--infer none`.
fn with_replay(mut args: Vec<String>, file: &Path) -> Vec<String> {
    let i = args.iter().position(|a| a == "--infer").unwrap();
    args[i + 1] = format!("replay:{}", file.display());
    args
}

/// A PPM (P6, 8 bits) as (width, height, RGB bytes).
fn read_ppm(path: &Path) -> (usize, usize, Vec<u8>) {
    let b = std::fs::read(path).unwrap();
    let mut fields = vec![];
    let mut i = 0;
    while fields.len() < 4 {
        while b[i].is_ascii_whitespace() {
            i += 1;
        }
        let s = i;
        while !b[i].is_ascii_whitespace() {
            i += 1;
        }
        fields.push(String::from_utf8_lossy(&b[s..i]).to_string());
    }
    assert_eq!(fields[0], "P6");
    let (w, h): (usize, usize) = (fields[1].parse().unwrap(), fields[2].parse().unwrap());
    let px = b[i + 1..].to_vec();
    assert_eq!(px.len(), w * h * 3, "{}", path.display());
    (w, h, px)
}

/// vivid's 75% bars in RGB, as high (true) or low per channel: white, yellow, cyan, green,
/// magenta, red, blue, black.
const BARS_RGB: [[bool; 3]; 8] = [
    [true; 3],
    [true, true, false],
    [false, true, true],
    [false, true, false],
    [true, false, true],
    [true, false, false],
    [false, false, true],
    [false; 3],
];

/// Checks a writeback picture against its sidecar and what the test expects: the picture
/// at `want_pic` (x, y, w, h) on the mode, black outside it, vivid's bars inside it (lower
/// half, below the box), and the box's outline pure green along its edges at `want_box`.
/// Returns one line of evidence.
fn check_writeback(dir: &Path, want_way: &str, want_pic: [u64; 4], want_box: [f32; 4]) -> String {
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("wb-000.json")).expect("wb-000.json written")).unwrap();
    let (w, h, px) = read_ppm(&dir.join("wb-000.ppm"));
    assert_eq!(meta["way"], want_way, "{meta}");
    let pic = &meta["picture"];
    assert_eq!([u(&pic["x"]), u(&pic["y"]), u(&pic["w"]), u(&pic["h"])], want_pic, "{meta}");
    let at = |x: usize, y: usize| [px[(y * w + x) * 3], px[(y * w + x) * 3 + 1], px[(y * w + x) * 3 + 2]];
    let [px0, py0, pw, ph] = want_pic.map(|v| v as usize);
    // Black around the picture (where there is any).
    if px0 > 0 {
        assert_eq!(at(px0 / 2, h / 2), [0, 0, 0], "left of the picture");
        assert_eq!(at(w - 1 - px0 / 2, h / 2), [0, 0, 0], "right of the picture");
    }
    if py0 > 0 {
        assert_eq!(at(w / 2, py0 / 2), [0, 0, 0], "above the picture");
    }
    // The bars: each one's centre column, rows in the picture's lower quarter (below the box).
    let mut got = vec![];
    for (k, want) in BARS_RGB.iter().enumerate() {
        let x = px0 + (2 * k + 1) * pw / 16;
        let mut sum = [0u64; 3];
        let rows: Vec<usize> = (py0 + ph * 3 / 4..py0 + ph * 7 / 8).step_by(4).collect();
        for &y in &rows {
            for (s, v) in sum.iter_mut().zip(at(x, y)) {
                *s += v as u64;
            }
        }
        let mean = sum.map(|s| s / rows.len() as u64);
        got.push(format!("{mean:?}"));
        for c in 0..3 {
            let ok = if want[c] { mean[c] >= 150 } else { mean[c] <= 40 };
            assert!(ok, "bar {k} at x {x}: mean RGB {mean:?}, want {want:?} (high >= 150, low <= 40); all: {got:?}");
        }
    }
    // The box: pure green on each edge (3 px inside it), not green just outside it.
    let [x1, y1, x2, y2] = want_box.map(|v| v.round() as usize);
    let (mx, my) = ((x1 + x2) / 2, (y1 + y2) / 2);
    for (x, y, edge) in [(x1 + 1, my, "left"), (x2 - 2, my, "right"), (mx, y1 + 1, "top"), (mx, y2 - 2, "bottom")] {
        assert_eq!(at(x, y), [0, 255, 0], "the box's {edge} edge at ({x}, {y})");
    }
    assert_ne!(at(x1 + 8, my), [0, 255, 0], "inside the box: the camera");
    let b = &meta["boxes"][0];
    let sidecar: Vec<f64> = (0..4).map(|i| b[i].as_f64().unwrap()).collect();
    assert_eq!(sidecar, want_box.map(|v| v as f64), "{meta}");
    format!(
        "{want_way}: {w}x{h} written back, picture {want_pic:?}, bars {}, box {want_box:?} green on all 4 edges",
        got.join(" ")
    )
}

/// vivid -> `zcpipe run` (capture `format`, no display, boxes replayed from a file) and
/// `zcpipe stage display` on vkms beside it (the capture pool's tap; boxes from the run's
/// detections socket), writing back 2 frames; returns (the display's stderr, the writeback
/// folder's parent).
fn display_beside_a_run(test: &str, format: &str, extra: &[&str]) -> (Vec<String>, tempfile::TempDir) {
    let sp = dev("VIVID_SP");
    let card = dev("DRM_CARD");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut args = with_replay(run_args(d, &format!("v4l2:{}", sp.display())), &display_replay(d));
    args.extend(
        [
            "--format",
            format,
            "--size",
            "640x480",
            "--fps",
            "30",
            "--frames",
            "240",
            "--buffers",
            "6",
            "--scaler",
            "cpu",
            "--no-print",
        ]
        .map(String::from),
    );
    let mut run = Background::start(&args);
    run.wait_for("streaming from", Duration::from_secs(120));
    let mut dargs: Vec<String> = [
        "stage",
        "display",
        "--display",
        &card.display().to_string(),
        "--run-dir",
        &d.join("run").display().to_string(),
        "--detections",
        &d.join("detections.sock").display().to_string(),
        "--display-writeback",
        &d.join("wb").display().to_string(),
        "--display-writeback-frames",
        "2",
        "--stats-interval",
        "0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    dargs.extend(extra.iter().map(|s| s.to_string()));
    // The kernel's atomic checks say why they refuse a state (drm.debug 0x10: DRM_UT_ATOMIC, plus KMS 0x04).
    let _ = std::fs::write("/sys/module/drm/parameters/debug", "0x14");
    let _ = Command::new("dmesg").arg("-c").output();
    let disp = Background::start(&dargs);
    // The display ends with the capture's stream (its 240 frames).
    let (dcode, dlines) = disp.finish(false, Duration::from_secs(180));
    let (code, lines) = run.finish(false, Duration::from_secs(120));
    let dstderr = dlines.join("\n");
    let _ = std::fs::write("/sys/module/drm/parameters/debug", "0");
    if dstderr.contains("not shown") || dstderr.contains("refused") {
        let k =
            Command::new("dmesg").output().map(|o| String::from_utf8_lossy(&o.stdout).to_string()).unwrap_or_default();
        // What the kernel said around the first lines that name the writeback connector.
        let lines: Vec<&str> = k.lines().collect();
        let hits: Vec<usize> = lines
            .iter()
            .enumerate()
            .filter(|(_, l)| l.contains("Writeback-1] state") && l.contains("to [CRTC"))
            .map(|(i, _)| i)
            .take(2)
            .collect();
        for i in hits {
            println!(
                "dmesg (drm) lines {}..{}:\n{}",
                i.saturating_sub(10),
                i + 50,
                lines[i.saturating_sub(10)..(i + 50).min(lines.len())].join("\n")
            );
        }
    }
    assert_eq!(dcode, 0, "{test}: display exit code; stderr:\n{dstderr}");
    assert_eq!(code, 0, "{test}: run exit code; stderr:\n{}", lines.join("\n"));
    assert!(!dstderr.contains("panicked"), "{dstderr}");
    let s = summary(d);
    let x = &s["stages"]["capture"]["extra"];
    assert_eq!(u(&x["buffers_still_out"]), 0, "{x}");
    let pool = &s["stages"]["capture"]["pool"];
    assert!(
        u(&pool["taps_joined"]) >= 1 && u(&pool["tap_frames"]) > 0,
        "the display's tap joined the capture pool: {pool}"
    );
    println!(
        "EVIDENCE {test} capture pool: {} tap frames, {} tap drops, {} taps joined; capture buffers still out {}",
        u(&pool["tap_frames"]),
        u(&pool["tap_dropped"]),
        u(&pool["taps_joined"]),
        u(&x["buffers_still_out"])
    );
    (dlines, dir)
}

/// The frames shown, buffers imported and frames composed the display said at its end
/// (`... after N frames shown (I buffers imported, C composed, S skipped, W writebacks)`).
fn display_end(lines: &[String]) -> (u64, u64, u64, u64) {
    let l = lines.iter().find(|l| l.contains("frames shown (")).unwrap_or_else(|| panic!("no end line: {lines:#?}"));
    let nums: Vec<u64> =
        l.split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty()).map(|s| s.parse().unwrap()).collect();
    let k = nums.len();
    println!("EVIDENCE display end: {l}");
    (nums[k - 5], nums[k - 4], nums[k - 3], nums[k - 1])
}

#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn display_scans_xr24_out_zero_copy_on_vkms_with_boxes() {
    let (lines, dir) = display_beside_a_run("display zero-copy", "XR24", &[]);
    let all = lines.join("\n");
    let found = lines.iter().find(|l| l.contains("Virtual-1")).unwrap_or_else(|| panic!("{all}"));
    println!("EVIDENCE display: {found}");
    assert!(
        found.contains("vkms") && found.contains("overlay plane") && found.contains("writeback connector"),
        "{found}"
    );
    let way = lines.iter().find(|l| l.contains("zero-copy scanout")).unwrap_or_else(|| panic!("not zero-copy: {all}"));
    println!("EVIDENCE display: {way}");
    assert!(way.contains("XR24 640x480") && way.contains("640x480+192+144 on 1024x768"), "{way}");
    let (shown, imports, composed, writebacks) = display_end(&lines);
    assert!(shown >= 30, "{shown} frames shown");
    assert_eq!(composed, 0, "nothing composed by the CPU");
    assert!((1..=8).contains(&imports), "each capture buffer imported once ({imports} imports for a pool of 6 + 2)");
    assert_eq!(writebacks, 2);
    assert!(all.contains("frames held went back"), "{all}");
    // vkms does not scale: the 640x480 frame at its own size, centred on 1024x768.
    let box_on_screen =
        [192.0 + DISPLAY_BOX[0], 144.0 + DISPLAY_BOX[1], 192.0 + DISPLAY_BOX[2], 144.0 + DISPLAY_BOX[3]];
    let ev = check_writeback(&dir.path().join("wb"), "zero-copy", [192, 144, 640, 480], box_on_screen);
    println!("EVIDENCE display writeback {ev}");
}

#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn display_composes_nv12_with_the_cpu_on_vkms() {
    let (lines, dir) = display_beside_a_run("display composition", "NV12", &[]);
    let all = lines.join("\n");
    let way = lines.iter().find(|l| l.contains("CPU composition")).unwrap_or_else(|| panic!("{all}"));
    println!("EVIDENCE display: {way}");
    assert!(way.contains("vkms has no plane for NV12"), "{way}");
    let (shown, imports, composed, writebacks) = display_end(&lines);
    assert!(shown >= 30 && composed >= shown, "{shown} shown, {composed} composed");
    assert_eq!((imports, writebacks), (0, 2));
    // The CPU scales: 640x480 fills 1024x768, the box x1.6.
    let s = 1.6;
    let ev = check_writeback(&dir.path().join("wb"), "composition", [0, 0, 1024, 768], DISPLAY_BOX.map(|v| v * s));
    println!("EVIDENCE display writeback {ev}");
}

/// vivid (XR24 or NV12 at 640x480, 30 fps, `frames` frames) -> `zcpipe run --display CARD`
/// with `extra` flags; asserts it exited 0 and every capture buffer came home; returns the
/// summary and the run's stderr.
fn run_with_display(format: &str, frames: u32, extra: &[&str]) -> (Value, String) {
    let sp = dev("VIVID_SP");
    let card = dev("DRM_CARD");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut args = run_args(d, &format!("v4l2:{}", sp.display()));
    args.extend(
        [
            "--format",
            format,
            "--size",
            "640x480",
            "--fps",
            "30",
            "--frames",
            &frames.to_string(),
            "--scaler",
            "cpu",
            "--no-print",
            "--display",
            &card.display().to_string(),
        ]
        .map(String::from),
    );
    args.extend(extra.iter().map(|s| s.to_string()));
    let bg = Background::start(&args);
    let (code, lines) = bg.finish(false, Duration::from_secs(240));
    let stderr = lines.join("\n");
    assert_eq!(code, 0, "{stderr}");
    let s = summary(d);
    for (stage, c) in s["exit_codes"].as_object().unwrap() {
        assert_eq!(c, 0, "{stage} exit code: {stderr}");
    }
    assert_eq!(u(&s["stages"]["capture"]["extra"]["buffers_still_out"]), 0, "{}", s["stages"]["capture"]);
    (s, stderr)
}

#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn run_with_a_display_is_a_fifth_process_and_buffers_come_home() {
    let (s, stderr) = run_with_display("XR24", 150, &[]);
    let disp = &s["stages"]["display"];
    let x = &disp["extra"]["display"];
    assert_eq!(x["way"], "zero-copy scanout", "{x}");
    assert!(u(&x["counters"]["shown"]) >= 20, "{x}");
    assert_eq!(u(&disp["extra"]["open_fds_setup"]), u(&disp["extra"]["open_fds_exit"]), "{disp}");
    let cap = &s["stages"]["capture"]["extra"];
    assert_eq!(u(&cap["buffers"]), 6, "the capture pool got the display's 2 buffers on top of 4: {cap}");
    assert_eq!(u(&cap["buffers_still_out"]), 0, "{cap}");
    assert_eq!(u(&s["stages"]["capture"]["frames_out"]), 150);
    let line = stderr
        .lines()
        .find(|l| l.contains("display: /dev/dri") && l.contains("shown"))
        .unwrap_or_else(|| panic!("no display line in the summary: {stderr}"));
    println!("EVIDENCE run --display summary:{line}");
    println!(
        "EVIDENCE run --display: fps shown {}, fps captured {}, skipped {}, imports {}",
        x["fps_shown"], x["fps_captured"], x["counters"]["skipped"], x["counters"]["imports"]
    );
}

#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn run_with_a_display_in_copy_mode_composes_a_copy_of_each_frame() {
    let (s, _) = run_with_display("XR24", 90, &["--copy-mode"]);
    let disp = &s["stages"]["display"];
    let x = &disp["extra"]["display"];
    // The same XR24 frames that zero-copy scans out are copies here, so the CPU composes them.
    assert!(x["way"].as_str().unwrap_or("").starts_with("CPU composition (--copy-mode"), "{x}");
    let c = &x["counters"];
    assert_eq!(u(&c["imports"]), 0, "nothing imported in copy mode: {x}");
    assert!(u(&c["shown"]) >= 20 && u(&c["composed"]) >= u(&c["shown"]), "{x}");
    assert_eq!(
        u(&c["composed_bytes"]),
        u(&c["composed"]) * 1024 * 768 * 4,
        "each composition writes a whole 1024x768 XRGB8888 dumb buffer: {x}"
    );
    let ci = &disp["copy_in"];
    let frame = 640 * 480 * 4;
    assert!(u(&ci["frames"]) >= u(&c["received"]) && u(&ci["frames"]) > 0, "{disp}");
    assert!(u(&ci["socket_bytes"]) >= u(&ci["frames"]) * frame, "each frame came over the tap's data socket: {disp}");
    println!("EVIDENCE run --display --copy-mode: {}; {} frames over the socket ({} bytes, {} copied), {} composed ({} bytes)", x["way"], u(&ci["frames"]), u(&ci["socket_bytes"]), u(&ci["copied_bytes"]), u(&c["composed"]), u(&c["composed_bytes"]));
}

#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn run_with_a_display_on_legacy_modesetting_flips_composed_frames() {
    let (s, _) = run_with_display("NV12", 90, &["--display-legacy"]);
    let disp = &s["stages"]["display"];
    let x = &disp["extra"]["display"];
    assert_eq!(x["atomic"], false, "{x}");
    assert_eq!(x["way"], "CPU composition (--display-legacy: legacy modesetting, one plane)", "{x}");
    let c = &x["counters"];
    // Every frame shown is a PAGE_FLIP whose event came back.
    assert!(u(&c["shown"]) >= 20 && u(&c["composed"]) >= u(&c["shown"]) && u(&c["imports"]) == 0, "{x}");
    assert_eq!(u(&c["errors"]), 0, "{x}");
    println!(
        "EVIDENCE run --display --display-legacy: {}; {} shown at {:.1} fps, {} composed, {} errors",
        x["way"],
        u(&c["shown"]),
        x["fps_shown"].as_f64().unwrap_or(0.0),
        u(&c["composed"]),
        u(&c["errors"])
    );
}

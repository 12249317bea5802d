//! V4L2 capture from vivid into pools shared with a consumer process, and dma-buf heaps. Shared helpers: main.rs.

use super::*;

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
        .args(["--exact", &format!("capture::{test}"), "--nocapture", "--ignored", "--test-threads=1"])
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

//! The zero-copy core across real processes: a producer in the test process, a consumer in
//! a child process (this same test binary re-run with a role in its environment).

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use zcpipe::core::channel::Recv;
use zcpipe::core::dmabuf::{Allocator, HeapChoice};
use zcpipe::core::frame::{Fourcc, FrameDesc, FrameLayout};
use zcpipe::core::link::{Conn, ControlMsg, Listener, WaitMode};
use zcpipe::core::pool::{HopSpec, PoolConsumer, PoolProducer};
use zcpipe::core::ring::RingPolicy;

static NEVER: AtomicBool = AtomicBool::new(false);
const W: u32 = 64;
const H: u32 = 48;

fn pattern(seq: u64, i: usize) -> u8 {
    ((seq as usize * 31 + i * 7) % 251) as u8
}

fn layout() -> FrameLayout {
    FrameLayout::packed24(Fourcc::BGR24, W, H, W * 3)
}

/// Consumer role: join the hop at `sock`, read every frame through the sync guard, check
/// the producer's bytes, sleep `delay_ms` per frame, print counts.
fn consumer_role(sock: &str, delay_ms: u64) {
    let conn = Conn::connect_retry(Path::new(sock), "test producer", &NEVER, Duration::from_secs(10)).unwrap();
    let hello = ControlMsg::Hello { stage: "test".into(), accept: vec![], want: None, wait: WaitMode::Eventfd };
    let c = PoolConsumer::join(conn, &hello, WaitMode::Eventfd, "producer").unwrap();
    let (mut got, mut bad, mut last_seq) = (0u64, 0u64, None::<u64>);
    loop {
        match c.recv(Duration::from_secs(5)).unwrap() {
            Recv::Item(f) => {
                let g = f.read().unwrap();
                let n = (W * H * 3) as usize;
                if (0..n).any(|i| g[0][i] != pattern(f.desc().seq, i)) {
                    bad += 1;
                }
                assert!(last_seq.is_none_or(|s| f.desc().seq > s), "sequence must increase");
                last_seq = Some(f.desc().seq);
                got += 1;
                drop(g);
                drop(f);
                std::thread::sleep(Duration::from_millis(delay_ms));
            }
            Recv::Eos => break,
            Recv::Hangup => panic!("producer hung up"),
            Recv::Idle => panic!("no frame within 5 s"),
        }
    }
    println!("\nCONSUMER got={got} bad={bad} consumed={}", c.counters().consumed);
}

fn spawn_consumer(test: &str, sock: &Path, delay_ms: u64) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &format!("ipc::{test}"), "--nocapture", "--test-threads=1"])
        .env("ZCPIPE_TEST_CONSUMER", sock)
        .env("ZCPIPE_TEST_DELAY_MS", delay_ms.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

fn role() -> Option<(String, u64)> {
    let s = std::env::var("ZCPIPE_TEST_CONSUMER").ok()?;
    let d = std::env::var("ZCPIPE_TEST_DELAY_MS").ok()?.parse().ok()?;
    Some((s, d))
}

/// Produces `frames` frames as fast as the policy allows; returns the producer and the
/// child's output line.
fn produce(test: &str, policy: RingPolicy, frames: u64, delay_ms: u64) -> (PoolProducer, String) {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("p.sock");
    let listener = Listener::bind(&sock).unwrap();
    let child = spawn_consumer(test, &sock, delay_ms);
    let conn = listener.accept(&NEVER).unwrap();
    assert_eq!(conn.peer_pid as u32, child.id(), "SO_PEERCRED names the consumer process");
    let _hello = conn.recv().unwrap();
    let alloc =
        Allocator::open(HeapChoice::Auto, Path::new("/dev/dma_heap"), Path::new("/dev/udmabuf"), Path::new("/dev/dri"))
            .unwrap();
    let pool = alloc.allocate_pool(4, layout().bytes_needed()).unwrap();
    let spec = HopSpec {
        policy,
        capacity: 3,
        memory: alloc.describe(),
        layout: Some(layout()),
        fps: 0.0,
        description: "test".into(),
        copy_mode: false,
    };
    let mut prod = PoolProducer::offer(conn, pool.into_iter().map(|b| vec![b]).collect(), spec).unwrap();
    for seq in 0..frames {
        let mut loan = prod.acquire(&NEVER).unwrap().unwrap();
        {
            let mut g = loan.buffers_mut()[0].write().unwrap();
            for (i, b) in g.iter_mut().take((W * H * 3) as usize).enumerate() {
                *b = pattern(seq, i);
            }
        }
        loan.publish(FrameDesc { seq, layout: layout(), ..Default::default() }, &NEVER).unwrap();
    }
    let (_, still_out) = prod.finish(Duration::from_secs(30)).unwrap();
    assert_eq!(still_out, 0, "every buffer came back");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "consumer failed: {out:?}");
    // libtest may print "test name ... " on the same line before the child's output.
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let line = text.find("CONSUMER").map(|i| text[i..].lines().next().unwrap_or("").to_string()).unwrap_or_default();
    (prod, line)
}

fn field(line: &str, k: &str) -> u64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{k}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{k} missing in {line:?}"))
}

#[test]
fn fd_passing_across_processes() {
    if let Some((s, d)) = role() {
        return consumer_role(&s, d);
    }
    let (prod, line) = produce("fd_passing_across_processes", RingPolicy::Block, 20, 0);
    assert_eq!(field(&line, "got"), 20, "{line}");
    assert_eq!(field(&line, "bad"), 0, "the consumer read exactly the bytes the producer wrote: {line}");
    let k = prod.counters();
    assert_eq!((k.produced, k.consumed, k.dropped, k.rejected, k.in_flight), (20, 20, 0, 0, 0));
    assert_eq!(prod.stats().returned, 20);
    eprintln!("EVIDENCE fd passing: {line}; producer counters {k:?}");
}

#[test]
fn slow_consumer_never_blocks_the_producer() {
    if let Some((s, d)) = role() {
        return consumer_role(&s, d);
    }
    let (prod, line) = produce("slow_consumer_never_blocks_the_producer", RingPolicy::DropOldest, 40, 200);
    let k = prod.counters();
    let st = prod.stats();
    assert_eq!(k.produced, 40, "every frame the source emitted was queued");
    assert_eq!(st.waits, 0, "the producer never waited: {st:?}");
    assert_eq!(field(&line, "got"), k.consumed, "{line}");
    assert_eq!(field(&line, "bad"), 0, "{line}");
    assert!(k.dropped > 0, "a slow consumer must cause drops: {k:?}");
    assert_eq!(k.produced, k.consumed + k.dropped + k.rejected + k.in_flight, "{k:?}");
    assert_eq!(k.in_flight, 0);
    eprintln!("EVIDENCE slow consumer (200 ms/frame): {line}; producer waits {}, counters {k:?}", st.waits);
}

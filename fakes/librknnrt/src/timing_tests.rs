//! Timing mode (`ZCPIPE_FAKE_RKNN_RUN_US`) through the exported functions, as a caller of
//! librknnrt.so would drive it: contexts on distinct cores overlap, contexts on one core
//! serialize, AUTO spreads, a mask of 7 holds every core, and a run costs almost no CPU.
//!
//! The variable is read once per process and the NPU's cores are shared by the process, so
//! every check lives in one test, phase after phase, and no other test of this crate makes a
//! context.

use super::context::rknn_init;
use super::mem::{rknn_create_mem_from_fd, rknn_destroy_mem, rknn_set_io_mem};
use super::outputs::{rknn_outputs_get, rknn_outputs_release};
use super::run::{rknn_inputs_set, rknn_run, rknn_set_core_mask};
use super::*;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Each run occupies its core for this long.
const RUN_US: u64 = 20_000;
const RUN: Duration = Duration::from_micros(RUN_US);

/// A context of `models/yolox_nano.onnx` with a packed input set, on `mask` when given.
fn context(mask: Option<u32>) -> RknnContext {
    let mut ctx: RknnContext = 0;
    let mut model = [0u8; 16];
    // SAFETY: `ctx` is writable; `model` holds 16 bytes.
    let r = unsafe { rknn_init(&mut ctx, model.as_mut_ptr().cast(), 16, 0, std::ptr::null_mut()) };
    assert_eq!(r, RKNN_SUCC, "rknn_init");
    if let Some(m) = mask {
        assert_eq!(rknn_set_core_mask(ctx, m), RKNN_SUCC, "mask {m}");
    }
    let net = state().ctxs[&ctx].net.clone();
    let (w, h) = (net.w, net.h);
    let mut bytes = vec![0u8; w * h * 3];
    let mut input = Input {
        index: 0,
        buf: bytes.as_mut_ptr().cast(),
        size: bytes.len() as u32,
        pass_through: 0,
        type_: TENSOR_UINT8,
        fmt: FMT_NHWC,
    };
    // SAFETY: one entry whose `buf` holds `size` bytes.
    assert_eq!(unsafe { rknn_inputs_set(ctx, 1, &mut input) }, RKNN_SUCC);
    ctx
}

/// The calling thread's CPU time so far (getrusage(RUSAGE_THREAD), user + system).
fn thread_cpu() -> Duration {
    // SAFETY: a zeroed rusage is a valid value for getrusage to fill.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_THREAD with a writable rusage.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) }, 0);
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// One rknn_run as its caller saw it.
#[derive(Debug)]
struct Seen {
    code: c_int,
    /// When rknn_run was entered and when it returned.
    began: Instant,
    ended: Instant,
    /// Wall time inside rknn_run.
    took: Duration,
    /// The calling thread's CPU time inside rknn_run.
    cpu: Duration,
}

fn run_once(ctx: RknnContext) -> Seen {
    let (cpu0, t0) = (thread_cpu(), Instant::now());
    // SAFETY: a live context; a null extend.
    let code = unsafe { rknn_run(ctx, std::ptr::null_mut()) };
    let ended = Instant::now();
    Seen { code, began: t0, ended, took: ended - t0, cpu: thread_cpu() - cpu0 }
}

/// One run of each context, each on a thread of its own, released together; and the wall
/// time from the first one's entry to the last one's return.
fn run_together(ctxs: &[RknnContext]) -> (Vec<Seen>, Duration) {
    let go = Arc::new(std::sync::Barrier::new(ctxs.len() + 1));
    let threads: Vec<_> = ctxs
        .iter()
        .map(|&c| {
            let go = go.clone();
            std::thread::spawn(move || {
                go.wait();
                run_once(c)
            })
        })
        .collect();
    go.wait();
    let seen: Vec<Seen> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let first = seen.iter().map(|s| s.began).min().unwrap();
    let last = seen.iter().map(|s| s.ended).max().unwrap();
    (seen, last - first)
}

/// `key=value` pairs of the log's lines named `name`.
fn lines(log: &Path, name: &str) -> Vec<HashMap<String, String>> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter(|l| l.split(' ').nth(1) == Some(name))
        .map(|l| l.split(' ').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.into(), v.into())).collect())
        .collect()
}

/// Where and when the NPU ran context `ctx`'s last run, from its `rknn_run_end` line.
#[derive(Debug, Clone, PartialEq)]
struct Ran {
    code: String,
    core: String,
    start_us: u64,
    end_us: u64,
}

fn ran(log: &Path, ctx: RknnContext) -> Ran {
    let ends = lines(log, "rknn_run_end");
    let e = ends.iter().rev().find(|m| m["ctx"] == ctx.to_string()).unwrap_or_else(|| panic!("no end of {ctx}"));
    let num = |k: &str| e.get(k).map_or(0, |v| v.parse().unwrap());
    Ran {
        code: e["code"].clone(),
        core: e.get("core").cloned().unwrap_or_default(),
        start_us: num("start_us"),
        end_us: num("end_us"),
    }
}

fn overlap(a: &Ran, b: &Ran) -> bool {
    a.start_us < b.end_us && b.start_us < a.end_us
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// Three contexts pinned to cores 0, 1, 2, released together (and held by the barrier
/// until all three are in progress): they overlap, each on its core for the full run time.
fn three_cores_overlap(log: &Path) {
    std::env::set_var("ZCPIPE_FAKE_RKNN_RUN_BARRIER", "3");
    let ctxs = [context(Some(1)), context(Some(2)), context(Some(4))];
    let (seen, wall) = run_together(&ctxs);
    std::env::remove_var("ZCPIPE_FAKE_RKNN_RUN_BARRIER");
    let took: Vec<String> = seen.iter().map(|s| ms(s.took)).collect();
    let cpu: Vec<String> = seen.iter().map(|s| format!("{} us", s.cpu.as_micros())).collect();
    eprintln!("cores 0,1,2: wall {}, runs took {took:?}, CPU per run {cpu:?}", ms(wall));
    assert!(seen.iter().all(|s| s.code == RKNN_SUCC), "{seen:?}");
    assert!(seen.iter().all(|s| s.took >= RUN), "each run holds its core for the full run time: {seen:?}");
    assert!(wall < 2 * RUN, "three cores work in parallel: {wall:?}");
    for s in &seen {
        assert!(s.cpu < Duration::from_millis(1), "a run costs (almost) no host CPU: {s:?}");
    }
    let r: Vec<Ran> = ctxs.iter().map(|&c| ran(log, c)).collect();
    eprintln!("cores 0,1,2 in the log: {r:?}");
    assert_eq!(r.iter().map(|x| x.core.as_str()).collect::<Vec<_>>(), ["0", "1", "2"]);
    assert!(r.iter().all(|x| x.end_us - x.start_us == RUN_US), "{r:?}");
    assert!(r.iter().all(|a| r.iter().all(|b| overlap(a, b))), "all three at once: {r:?}");
    assert!(lines(log, "rknn_run_barrier_timeout").is_empty());

    // The outputs of a timed run are zeros (fp16 here, handed over as float32).
    let n = state().ctxs[&ctxs[0]].net.outputs[0].elems();
    let mut out = Output { want_float: 1, is_prealloc: 0, index: 0, buf: std::ptr::null_mut(), size: 0 };
    // SAFETY: one entry, not pre-allocated.
    assert_eq!(unsafe { rknn_outputs_get(ctxs[0], 1, &mut out, std::ptr::null_mut()) }, RKNN_SUCC);
    assert_eq!(out.size as usize, 4 * n);
    // SAFETY: rknn_outputs_get allocated `size` bytes of float32 at `buf`.
    let values = unsafe { std::slice::from_raw_parts(out.buf as *const f32, n) };
    assert!(values.iter().all(|&v| v == 0.0));
    // SAFETY: the entry rknn_outputs_get filled.
    assert_eq!(unsafe { rknn_outputs_release(ctxs[0], 1, &mut out) }, RKNN_SUCC);
}

/// Two contexts pinned to core 0 at the same time: the second waits for the first (its
/// job queued behind it), so their NPU time does not overlap and the pair takes two runs.
fn one_core_serializes(log: &Path) {
    let ctxs = [context(Some(1)), context(Some(1))];
    let (seen, wall) = run_together(&ctxs);
    let r: Vec<Ran> = ctxs.iter().map(|&c| ran(log, c)).collect();
    let took: Vec<String> = seen.iter().map(|s| ms(s.took)).collect();
    eprintln!("two contexts on core 0: wall {}, runs took {took:?}, log {r:?}", ms(wall));
    assert!(seen.iter().all(|s| s.code == RKNN_SUCC), "{seen:?}");
    assert!(wall >= 2 * RUN, "{wall:?}");
    assert!(r.iter().all(|x| x.core == "0"), "{r:?}");
    assert!(!overlap(&r[0], &r[1]), "one core runs one job at a time: {r:?}");
}

/// Three AUTO contexts (never set, 0, 0xffff) at the same time: each goes to the core that
/// frees first, so they spread over the three cores and overlap.
fn auto_spreads(log: &Path) {
    let ctxs = [context(None), context(Some(0)), context(Some(0xffff))];
    let (seen, wall) = run_together(&ctxs);
    let r: Vec<Ran> = ctxs.iter().map(|&c| ran(log, c)).collect();
    eprintln!("three AUTO contexts: wall {}, log {r:?}", ms(wall));
    assert!(seen.iter().all(|s| s.code == RKNN_SUCC), "{seen:?}");
    let mut cores: Vec<&str> = r.iter().map(|x| x.core.as_str()).collect();
    cores.sort();
    assert_eq!(cores, ["0", "1", "2"], "{r:?}");
    assert!(wall < 2 * RUN, "{wall:?}");
    assert!(r.iter().all(|a| r.iter().all(|b| overlap(a, b))), "{r:?}");
}

/// A context on mask 7 (cores 0_1_2) and two pinned to cores 0 and 2, at the same time: the
/// mask-7 run holds all three cores, so it overlaps neither of the others.
fn mask_7_blocks_every_core(log: &Path) {
    let ctxs = [context(Some(7)), context(Some(1)), context(Some(4))];
    let (seen, wall) = run_together(&ctxs);
    let r: Vec<Ran> = ctxs.iter().map(|&c| ran(log, c)).collect();
    eprintln!("mask 7 with cores 0 and 2: wall {}, log {r:?}", ms(wall));
    assert!(seen.iter().all(|s| s.code == RKNN_SUCC), "{seen:?}");
    assert_eq!((r[0].core.as_str(), r[1].core.as_str(), r[2].core.as_str()), ("0,1,2", "0", "2"));
    assert!(!overlap(&r[0], &r[1]) && !overlap(&r[0], &r[2]), "{r:?}");
    assert!(wall >= 2 * RUN, "{wall:?}");
}

/// Timing mode reads no input: a bound dma-buf whose fd is closed before the run (which
/// the ONNX mode could not map) still runs.
fn bound_input_is_not_read(log: &Path) {
    let ctx = context(Some(2));
    let net = state().ctxs[&ctx].net.clone();
    let (w, h) = (net.w, net.h);
    let size = w * h * 3;
    // SAFETY: a fresh memfd, sized below, closed at the end of this test.
    let fd = unsafe { libc::memfd_create(c"fake-rknn-timing".as_ptr(), 0) };
    assert!(fd >= 0);
    // SAFETY: our own fd.
    assert_eq!(unsafe { libc::ftruncate(fd, size as i64) }, 0);
    // SAFETY: plain values; `virt` is null.
    let mem = unsafe { rknn_create_mem_from_fd(ctx, fd, std::ptr::null_mut(), size as u32, 0) };
    assert!(!mem.is_null());
    // SAFETY: TensorAttr is plain integers and arrays, for which zero is valid.
    let mut attr: TensorAttr = unsafe { std::mem::zeroed() };
    (attr.n_dims, attr.type_, attr.fmt, attr.w_stride) = (4, TENSOR_UINT8, FMT_NHWC, w as u32);
    // SAFETY: a live mem of `ctx` and a valid attribute.
    assert_eq!(unsafe { rknn_set_io_mem(ctx, mem, &mut attr) }, RKNN_SUCC);
    // SAFETY: our own fd, closed once.
    unsafe { libc::close(fd) };
    let seen = run_once(ctx);
    assert_eq!(seen.code, RKNN_SUCC, "{seen:?}");
    let begin = lines(log, "rknn_run").into_iter().rev().find(|m| m["ctx"] == ctx.to_string()).unwrap();
    assert_eq!((begin["input"].as_str(), begin["input_hash"].as_str()), ("mem", "unread"));
    // SAFETY: the mem made above, destroyed once.
    assert_eq!(unsafe { rknn_destroy_mem(ctx, mem) }, RKNN_SUCC);
}

/// One context entered from a second thread while its run is in progress is refused, as in
/// the ONNX mode.
fn concurrent_use_is_refused(log: &Path) {
    let ctx = context(Some(1));
    let first = std::thread::spawn(move || run_once(ctx));
    let t0 = Instant::now();
    let key = format!("{ctx}");
    while !lines(log, "rknn_run").iter().any(|m| m["ctx"] == key) {
        assert!(t0.elapsed() < Duration::from_secs(5), "the first run never began");
        std::thread::sleep(Duration::from_micros(200));
    }
    let second = run_once(ctx);
    assert_eq!(second.code, RKNN_ERR_CTX_INVALID, "{second:?}");
    assert_eq!(first.join().unwrap().code, RKNN_SUCC);
    assert!(lines(log, "rknn_run_concurrent_use").iter().any(|m| m["ctx"] == key));
}

/// `ZCPIPE_FAKE_RKNN_FAIL_RUN` fails the chosen run at once, occupying no core.
fn fail_run_still_fails(log: &Path) {
    let last: u64 = lines(log, "rknn_run").iter().map(|m| m["run"].parse::<u64>().unwrap()).max().unwrap();
    std::env::set_var("ZCPIPE_FAKE_RKNN_FAIL_RUN", (last + 1).to_string());
    let ctx = context(Some(1));
    let seen = run_once(ctx);
    std::env::remove_var("ZCPIPE_FAKE_RKNN_FAIL_RUN");
    assert_eq!(seen.code, RKNN_ERR_TIMEOUT, "{seen:?}");
    assert!(seen.took < RUN, "{seen:?}");
    assert_eq!(ran(log, ctx), Ran { code: RKNN_ERR_TIMEOUT.to_string(), core: String::new(), start_us: 0, end_us: 0 });
}

#[test]
fn timing_mode_occupies_npu_cores_without_running_the_model() {
    let log: PathBuf = std::env::temp_dir().join(format!("zcpipe-fake-rknn-timing-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let onnx = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/yolox_nano.onnx");
    std::env::set_var("ZCPIPE_FAKE_RKNN_ONNX", &onnx);
    std::env::set_var("ZCPIPE_FAKE_RKNN_RUN_US", RUN_US.to_string());
    std::env::set_var("ZCPIPE_FAKE_RKNN_LOG", &log);
    for k in [
        "ZCPIPE_FAKE_RKNN_CORES",
        "ZCPIPE_FAKE_RKNN_OUTPUT",
        "ZCPIPE_FAKE_RKNN_W_STRIDE",
        "ZCPIPE_FAKE_RKNN_RUN_BARRIER",
        "ZCPIPE_FAKE_RKNN_FAIL_RUN",
        "ZCPIPE_FAKE_RKNN_DMABUF_ONLY",
    ] {
        std::env::remove_var(k);
    }
    three_cores_overlap(&log);
    one_core_serializes(&log);
    auto_spreads(&log);
    mask_7_blocks_every_core(&log);
    bound_input_is_not_read(&log);
    concurrent_use_is_refused(&log);
    fail_run_still_fails(&log);
    let init = lines(&log, "rknn_init");
    assert!(init.iter().all(|m| m["run_us"] == RUN_US.to_string()), "{init:?}");
    let _ = std::fs::remove_file(&log);
}

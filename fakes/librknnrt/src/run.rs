//! Running a context: `rknn_inputs_set`, `rknn_set_core_mask`, reading a bound dma-buf input
//! as NCHW, the gate that makes concurrent runs observable, `rknn_run` and the inference (or,
//! in timing mode, the NPU core occupation of `timing`).

use std::ffi::{c_int, c_void};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use tract_onnx::prelude::tract_ndarray::Array4;
use tract_onnx::prelude::*;

use super::*;

/// `int rknn_inputs_set(rknn_context, uint32_t n_inputs, rknn_input inputs[])`: takes a
/// packed uint8 NHWC copy.
///
/// # Safety
/// `inputs` holds `n_inputs` entries whose `buf` holds `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn rknn_inputs_set(context: RknnContext, n_inputs: u32, inputs: *mut Input) -> c_int {
    guarded("rknn_inputs_set", || {
        if inputs.is_null() || n_inputs != 1 {
            return RKNN_ERR_PARAM_INVALID;
        }
        // SAFETY: checked non-null; one entry.
        let inp = unsafe { &*inputs };
        log(format!(
            "rknn_inputs_set ctx={context} index={} size={} type={} fmt={} pass_through={}",
            inp.index, inp.size, inp.type_, inp.fmt, inp.pass_through
        ));
        let mut st = state();
        let Some(c) = st.ctxs.get_mut(&context) else { return RKNN_ERR_CTX_INVALID };
        let need = c.net.w * c.net.h * 3;
        if inp.index != 0
            || inp.type_ != TENSOR_UINT8
            || inp.fmt != FMT_NHWC
            || inp.pass_through != 0
            || inp.size as usize != need
            || inp.buf.is_null()
        {
            return fail(
                format!("rknn_inputs_set: the fake takes input 0 as {need} bytes of UINT8 NHWC, pass_through 0"),
                RKNN_ERR_INPUT_INVALID,
            );
        }
        // SAFETY: the caller's `size` bytes at `buf`.
        let bytes = unsafe { std::slice::from_raw_parts(inp.buf as *const u8, inp.size as usize) }.to_vec();
        c.input = InputSrc::Packed(bytes);
        RKNN_SUCC
    })
}

/// `int rknn_set_core_mask(rknn_context, rknn_core_mask)`: AUTO (0, 0xffff) or a mask of
/// the fake SoC's cores (`ZCPIPE_FAKE_RKNN_CORES`) that RK3588 names (1, 2, 4, 3, 7); kept
/// in the context for timing mode.
#[no_mangle]
pub extern "C" fn rknn_set_core_mask(context: RknnContext, mask: u32) -> c_int {
    guarded("rknn_set_core_mask", || {
        let all = (1u32 << timing::soc_cores().min(16)) - 1;
        let ok = mask == 0 || mask == 0xffff || (mask & !all == 0 && matches!(mask, 1 | 2 | 4 | 3 | 7));
        log(format!("rknn_set_core_mask ctx={context} mask={mask} ok={ok}"));
        let mut st = state();
        let Some(c) = st.ctxs.get_mut(&context) else { return RKNN_ERR_CTX_INVALID };
        if ok {
            c.core_mask = mask;
            RKNN_SUCC
        } else {
            RKNN_ERR_PARAM_INVALID
        }
    })
}

/// Reads `net`'s uint8 NHWC input (H rows of `stride` bytes) into float32 NCHW, keeping the
/// channel order, each value divided by the model's `std` (1: raw 0..255).
fn to_nchw(src: &[u8], stride: usize, net: &Net) -> Vec<f32> {
    let (h, w) = (net.h, net.w);
    let hw = h * w;
    let mut out = vec![0f32; 3 * hw];
    for y in 0..h {
        let row = &src[y * stride..y * stride + 3 * w];
        for (x, px) in row.chunks_exact(3).enumerate() {
            for c in 0..3 {
                out[c * hw + y * w + x] = px[c] as f32 / net.std;
            }
        }
    }
    out
}

pub(super) fn dma_sync(fd: i32, flags: u64) -> std::io::Result<()> {
    let arg: u64 = flags;
    // SAFETY: DMA_BUF_IOCTL_SYNC reads one `struct dma_buf_sync { __u64 flags; }`.
    let r = unsafe { libc::ioctl(fd, DMA_BUF_IOCTL_SYNC as _, &arg as *const u64) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Maps the bound buffer read-only, brackets the read with DMA_BUF_IOCTL_SYNC (ENOTTY from
/// a memfd is tolerated) and converts it for `net`.
fn read_bound(b: &Bound, w_stride: usize, net: &Net) -> Result<Vec<f32>, String> {
    let len = b.offset as usize + b.size as usize;
    // SAFETY: a fresh shared read-only mapping of `len` bytes of the caller's fd; we check
    // the result and unmap it below.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, b.fd, 0) };
    if p == libc::MAP_FAILED {
        return Err(format!("mmap of fd {} ({len} bytes): {}", b.fd, std::io::Error::last_os_error()));
    }
    let sync = |flags| match dma_sync(b.fd, flags) {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOTTY) => Ok(false),
        Err(e) => Err(format!("DMA_BUF_IOCTL_SYNC on fd {}: {e}", b.fd)),
    };
    let result = sync(DMA_BUF_SYNC_READ).and_then(|synced| {
        // SAFETY: the mapping is `len` bytes; rows were checked to fit at set_io_mem.
        let bytes = unsafe { std::slice::from_raw_parts((p as *const u8).add(b.offset as usize), b.size as usize) };
        let v = to_nchw(bytes, w_stride * 3, net);
        if synced {
            sync(DMA_BUF_SYNC_READ | DMA_BUF_SYNC_END)?;
        }
        Ok(v)
    });
    // SAFETY: the mapping made above.
    unsafe { libc::munmap(p, len) };
    result
}

/// Runs in progress, for the concurrency checks and the barrier of [`rknn_run`].
struct Gate {
    /// Contexts inside rknn_run now.
    running: Vec<u64>,
    /// rknn_run calls so far in this process (the current one included).
    started: u64,
    /// The barrier has let runs through (or timed out) and stays open.
    open: bool,
}

static GATE: Mutex<Gate> = Mutex::new(Gate { running: Vec::new(), started: 0, open: false });
static GATE_CV: Condvar = Condvar::new();

/// How long a run waits at the barrier before it gives up and proceeds: 5 s.
const BARRIER_TIMEOUT: Duration = Duration::from_secs(5);

fn gate() -> std::sync::MutexGuard<'static, Gate> {
    GATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// `$ZCPIPE_FAKE_RKNN_RUN_BARRIER` (runs to wait for) and `$ZCPIPE_FAKE_RKNN_FAIL_RUN`
/// (the 1-based run to fail); `None` when unset, empty or not a number.
fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// The barrier: the first runs of the process wait until `n` runs are inside rknn_run at
/// once; then (or after [`BARRIER_TIMEOUT`], logged as `rknn_run_barrier_timeout`) it opens
/// for good. So with `n = 2` two runs overlap if and only if the caller runs two contexts
/// at the same time; a caller that runs one frame at a time pays the timeout once.
fn barrier(n: usize, context: RknnContext, run: u64) {
    let mut g = gate();
    if g.open || n <= 1 {
        return;
    }
    if g.running.len() >= n {
        g.open = true;
        GATE_CV.notify_all();
        return;
    }
    let t0 = Instant::now();
    while !g.open {
        let waited = t0.elapsed();
        if waited >= BARRIER_TIMEOUT {
            g.open = true;
            drop(g);
            log(format!("rknn_run_barrier_timeout ctx={context} run={run} waited_ms={}", waited.as_millis()));
            return;
        }
        g = GATE_CV.wait_timeout(g, BARRIER_TIMEOUT - waited).unwrap_or_else(|p| p.into_inner()).0;
    }
}

/// The calling thread's id (gettid(2)).
pub(super) fn tid() -> i32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() }
}

/// FNV-1a 64 of the input as the model sees it (float32 NCHW, stride padding left out):
/// tells which image a run was given.
fn input_hash(nchw: &[f32]) -> u64 {
    nchw.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, v| (h ^ v.to_bits() as u64).wrapping_mul(0x0000_0100_0000_01b3))
}

/// What a run does once it is let through: the ONNX model on the input, or (timing mode)
/// the NPU cores for a while.
enum Work {
    Infer(Vec<f32>),
    Timed { mask: u32, run_us: u64 },
}

/// The context's net, what the run does and how its input is described in the log (`input=..
/// input_hash=..`). The input is read here, unless in timing mode; `Err` is the code to return.
fn prepare(context: RknnContext) -> Result<(Arc<Net>, Work, String), c_int> {
    let run_us = timing::run_us().map_err(|e| fail(e, RKNN_ERR_PARAM_INVALID))?;
    let (input, net, w_stride, mask, what) = {
        let st = state();
        let Some(c) = st.ctxs.get(&context) else { return Err(RKNN_ERR_CTX_INVALID) };
        let (input, what) = match &c.input {
            InputSrc::None => {
                return Err(fail(
                    "rknn_run: no input set (rknn_inputs_set or rknn_set_io_mem)".into(),
                    RKNN_ERR_INPUT_INVALID,
                ))
            }
            InputSrc::Mem(b) => (Err(*b), format!("input=mem mem={} fd={}", b.mem, b.fd)),
            InputSrc::Packed(_) if run_us.is_some() => (Ok(Vec::new()), "input=copy".to_string()),
            InputSrc::Packed(v) => (Ok(to_nchw(v, c.net.w * 3, &c.net)), "input=copy".to_string()),
        };
        (input, c.net.clone(), c.w_stride, c.core_mask, what)
    };
    if let Some(run_us) = run_us {
        return Ok((net, Work::Timed { mask, run_us }, format!("{what} input_hash=unread")));
    }
    let nchw = match input {
        Ok(v) => v,
        Err(b) => read_bound(&b, w_stride, &net).map_err(|e| fail(format!("rknn_run: {e}"), RKNN_ERR_INPUT_INVALID))?,
    };
    let what = format!("{what} input_hash={:016x}", input_hash(&nchw));
    Ok((net, Work::Infer(nchw), what))
}

/// `int rknn_run(rknn_context, rknn_run_extend*)`.
///
/// Reads the bound input, then logs `rknn_run ctx=.. input=.. input_hash=.. run=..` (the
/// run begins), waits at the barrier (`ZCPIPE_FAKE_RKNN_RUN_BARRIER`), runs the ONNX model
/// and logs `rknn_run_end ctx=.. run=.. code=..`. In timing mode (`ZCPIPE_FAKE_RKNN_RUN_US`)
/// it reads no input (`input_hash=unread`), occupies the NPU core(s) of the context's core
/// mask instead of running the model, leaves all-zero outputs, and the end line adds
/// `core=.. start_us=.. end_us=..`. A context already inside rknn_run on another thread is
/// refused (`RKNN_ERR_CTX_INVALID`, logged as `rknn_run_concurrent_use`): the real runtime
/// forbids using one context from two threads at once. Run number
/// `ZCPIPE_FAKE_RKNN_FAIL_RUN` (1-based, per process) fails with `RKNN_ERR_TIMEOUT`, as a
/// hung NPU job would (without occupying a core in timing mode).
///
/// # Safety
/// `extend` is null or valid (ignored).
#[no_mangle]
pub unsafe extern "C" fn rknn_run(context: RknnContext, _extend: *mut c_void) -> c_int {
    guarded("rknn_run", || {
        let (net, work, what) = match prepare(context) {
            Ok(p) => p,
            Err(code) => return code,
        };
        let run = {
            let mut g = gate();
            if g.running.contains(&context) {
                drop(g);
                log(format!("rknn_run_concurrent_use ctx={context}"));
                return fail(
                    format!("rknn_run: context {context} is already running on another thread"),
                    RKNN_ERR_CTX_INVALID,
                );
            }
            g.running.push(context);
            g.started += 1;
            g.started
        };
        log(format!("rknn_run ctx={context} {what} run={run}"));
        barrier(env_number("ZCPIPE_FAKE_RKNN_RUN_BARRIER").unwrap_or(0) as usize, context, run);
        let (code, slot) = if env_number("ZCPIPE_FAKE_RKNN_FAIL_RUN") == Some(run) {
            (fail(format!("rknn_run: run {run} fails (ZCPIPE_FAKE_RKNN_FAIL_RUN)"), RKNN_ERR_TIMEOUT), String::new())
        } else {
            match work {
                Work::Infer(nchw) => (infer(context, &net, nchw), String::new()),
                Work::Timed { mask, run_us } => occupy(context, &net, mask, run_us),
            }
        };
        gate().running.retain(|&c| c != context);
        log(format!("rknn_run_end ctx={context} run={run} code={code}{slot}"));
        code
    })
}

/// Timing mode: books the core(s) `mask` gives the run for `run_us`, sleeps until the run's
/// end and stores all-zero outputs in `context`. Returns the code and the end line's
/// ` core=.. start_us=.. end_us=..`.
fn occupy(context: RknnContext, net: &Net, mask: u32, run_us: u64) -> (c_int, String) {
    let slot = timing::reserve(mask, Duration::from_micros(run_us));
    timing::sleep_until(slot.end);
    let zeros = net.outputs.iter().map(|o| vec![0f32; o.elems()]).collect();
    (store_outputs(context, zeros), slot.log_fields())
}

/// Runs `net` on `nchw` and stores its outputs, as float32, in `context`.
fn infer(context: RknnContext, net: &Net, nchw: Vec<f32>) -> c_int {
    let run = || -> TractResult<Vec<Vec<f32>>> {
        let t = Array4::from_shape_vec((1, 3, net.h, net.w), nchw)?.into_tensor();
        let outs = net.plan.run(tvec!(t.into_tvalue()))?;
        outs.iter().map(|o| Ok(o.cast_to::<f32>()?.try_as_plain_ram()?.as_slice::<f32>()?.to_vec())).collect()
    };
    let values = match run() {
        Ok(v) => v,
        Err(e) => return fail(format!("rknn_run: tract: {e}"), RKNN_ERR_FAIL),
    };
    let sizes: Vec<usize> = values.iter().map(Vec::len).collect();
    if sizes != net.outputs.iter().map(NetOutput::elems).collect::<Vec<_>>() {
        return fail(
            format!("rknn_run: the ONNX model gave outputs of {sizes:?} values, not the shapes it declares"),
            RKNN_ERR_OUTPUT_INVALID,
        );
    }
    store_outputs(context, values)
}

/// Keeps a run's outputs (float32, one vector per output) for rknn_outputs_get.
fn store_outputs(context: RknnContext, values: Vec<Vec<f32>>) -> c_int {
    let mut st = state();
    let Some(c) = st.ctxs.get_mut(&context) else { return RKNN_ERR_CTX_INVALID };
    c.output = Some(values);
    RKNN_SUCC
}

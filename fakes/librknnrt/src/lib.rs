//! A test-only fake of Rockchip's `librknnrt.so` (RKNPU2 runtime 2.x), built as
//! `target/<profile>/librknnrt.so` and opened by zcpipe through `ZCPIPE_LIBRKNNRT`. Never
//! shipped.
//!
//! ABI: the exported functions, struct layouts and enum values follow `rknn_api.h` of the
//! RKNPU2 runtime 2.x (`airockchip/rknn-toolkit2`,
//! `rknpu2/runtime/Linux/librknn_api/include/rknn_api.h`), written here independently of
//! zcpipe's binding (`src/sys/rknn.rs`) so the two check each other; this file's tests
//! assert the same hand-computed sizes and offsets.
//!
//! Behaviour: `rknn_init` records the model's length and ignores its bytes; the "NPU" is the
//! ONNX model named by `ZCPIPE_FAKE_RKNN_ONNX` at `rknn_init` (a sidecar of the `.rknn`:
//! `models/yolox_nano.onnx`, or a test model of `scripts/models/make_test_models.py`), run
//! with tract, loaded once per process and path; a context keeps the model it was made with.
//! Everything the fake reports comes from that ONNX model:
//! - input: its float32 `[1,3,H,W]` input becomes one uint8 NHWC `[1,H,W,3]` input of the
//!   same name, with rows of `w_stride * 3` bytes (`ZCPIPE_FAKE_RKNN_W_STRIDE`, default W),
//!   read from the dma-buf bound with `rknn_create_mem_from_fd` + `rknn_set_io_mem` (mapped
//!   read-only and bracketed with `DMA_BUF_IOCTL_SYNC` START/END; a memfd answers ENOTTY,
//!   which is tolerated) or from `rknn_inputs_set`'s packed copy. Channels pass through in
//!   the caller's order (zcpipe's scaler writes the family's). The real `.rknn` has the
//!   normalisation inside; the fake divides each byte by the model's metadata
//!   `rknn_fake_std` (e.g. `255` for a model that takes 0..1), or feeds raw 0..255 without
//!   it (YOLOX);
//! - outputs: every ONNX output, in order, with its name and shape (`fmt` NCHW for a 4-D
//!   output, UNDEFINED otherwise; the native output attributes are the same, never
//!   NC1HWC2), in float16 (default, like the shipped YOLOX `.rknn`), float32 or int8 affine
//!   by `ZCPIPE_FAKE_RKNN_OUTPUT=fp16|fp32|int8` (read at `rknn_init`). int8's per-output
//!   scale and zero point come from the metadata `rknn_fake_quant` (JSON `[[scale, zp], ...]`,
//!   one pair per output, as `make_test_models.py` calibrates them), else scale 0.0229 and
//!   zero point -31 for every output (about what a w8a8 build of YOLOX-Nano reports).
//!   `rknn_outputs_get` hands over any of them, one or several per call.
//!
//! `rknn_set_core_mask` accepts the masks of a 3-core NPU (RK3588), or of
//! `ZCPIPE_FAKE_RKNN_CORES` cores, and keeps the mask in the context (a fresh or duplicated
//! context is AUTO). With `ZCPIPE_FAKE_RKNN_DMABUF_ONLY=1`,
//! `rknn_create_mem_from_fd` refuses fds that are not dma-bufs (as the real runtime does
//! with a memfd), returning NULL.
//!
//! Concurrency: contexts may be used from any thread, one thread per context at a time (a
//! second thread entering `rknn_run` on a busy context is refused and logged). Each run
//! logs a begin line (`rknn_run ctx=.. input=.. input_hash=.. run=N`: the hash tells which
//! image it was given) and an end line (`rknn_run_end ctx=.. run=N code=..`).
//! `ZCPIPE_FAKE_RKNN_RUN_BARRIER=N` holds the first runs until N runs are in progress at
//! once (5 s timeout, then `rknn_run_barrier_timeout`), which makes overlap deterministic
//! for a caller that runs contexts concurrently; `ZCPIPE_FAKE_RKNN_FAIL_RUN=K` makes the
//! K-th run of the process fail with `RKNN_ERR_TIMEOUT`.
//!
//! Timing mode: `ZCPIPE_FAKE_RKNN_RUN_US=N` (read once per process; unset or empty: the
//! ONNX model runs as above; not a positive integer: `rknn_init` fails with the reason
//! logged) makes each `rknn_run` occupy an NPU core of the fake SoC for N microseconds
//! without spending host CPU on a model:
//! - the SoC has `ZCPIPE_FAKE_RKNN_CORES` cores (default 3), working in parallel, shared by
//!   every context of the process; each core has a "busy until" instant under a mutex. A run
//!   on core c starts at `max(now, busy_until[c])`, sets `busy_until[c] = start + N`, and its
//!   thread sleeps until that end (an absolute deadline, no CPU spent). So contexts on
//!   different cores overlap, and two contexts on one core serialize: the second one's job is
//!   queued behind the first, which is what several contexts per core buy on a board;
//! - the context's core mask decides the core: a single-core mask (1, 2, 4) runs on that
//!   core; AUTO (0, 0xffff, or never set) on whichever core frees first (the lowest on a
//!   tie), as the runtime's automatic choice does; a multi-core mask (3 = 0_1, 7 = 0_1_2)
//!   occupies every core in it for the full N. That last one is the conservative model of
//!   what was measured: one context spread over three RK3588 cores gains almost nothing over
//!   one core (~60 ms either way for a 640x640 YOLO, while three detectors on separate cores
//!   were reported at ~45 fps; with the three-core mask one core was 30% busy and the two
//!   others 15%: Frigate PR #8382, "Initial support for rockchip boards", comments of
//!   2023-11-07);
//! - the run reads no input (neither the dma-buf nor the packed copy; the begin line says
//!   `input_hash=unread`) and runs no model: every output is 0 in the output type (fp16/fp32
//!   0.0, int8 the zero point), so a YOLO head decodes no detection. The ONNX model still
//!   gives the input and output shapes, so `ZCPIPE_FAKE_RKNN_ONNX` is still needed;
//! - `rknn_init` logs `run_us=N`; the end line adds `core=C start_us=.. end_us=..`
//!   (`core=0,1,2` for a multi-core mask; microseconds since the process's first timed run),
//!   from which a test reads overlap and serialization. The concurrent-use check, the barrier
//!   and `ZCPIPE_FAKE_RKNN_FAIL_RUN` work as above (a failed run occupies no core and its end
//!   line has no `core=`).
//!
//! Choosing N: rknn_model_zoo's published rates (README "Model performance benchmark (FPS)",
//! v2.3.2, commit bad6c73 of 2025-04-08, RKNPU2 / rknn-toolkit2 2.3.2; INT8, input
//! `[1,3,640,640]`, maximum NPU frequency, inference only, pre- and post-processing not
//! included; RK3588 and RK3576 on one core), as N = 1e6 / fps:
//!
//! | model (640x640 INT8) | RK3588, one core     | RK3576, one core     | RK3566/RK3568        |
//! |----------------------|----------------------|----------------------|----------------------|
//! | yolov8n              | 73.5 fps = 13 605 us | 90.2 fps = 11 086 us | 34.0 fps = 29 412 us |
//! | yolov8s              | 38.0 fps = 26 316 us | 40.8 fps = 24 510 us | 15.1 fps = 66 225 us |
//! | yolov5n              | 82.5 fps = 12 121 us | 112.7 fps = 8 873 us | 39.7 fps = 25 189 us |
//! | yolox_s              | 37.1 fps = 26 954 us | 41.5 fps = 24 096 us | 15.2 fps = 65 789 us |
//! | yolox_m              | 16.0 fps = 62 500 us | 17.6 fps = 56 818 us | 6.6 fps = 151 515 us |
//!
//! YOLOX-Nano (zcpipe's shipped model, 416x416) is not in that table: no published figure
//! (not verified). A smaller network on a smaller input than yolov8n at 640x640, it is
//! presumably faster, so yolov8n's ~13.6 ms per RK3588 core is a conservative choice (an
//! assumption, not a measurement). RK3566/RK3568 have a one-core NPU (Rockchip's product
//! data; the table does not say so, not verified here): set `ZCPIPE_FAKE_RKNN_CORES=1` too.
//!
//! Every call is appended as one line (`pid=.. name key=value ... tid=..`) to the file named by
//! `ZCPIPE_FAKE_RKNN_LOG`, with one `write(2)` on an `O_APPEND` fd, so processes and threads
//! do not interleave lines.

use std::collections::{HashMap, HashSet};
use std::ffi::{c_int, c_void};
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock};

mod context;
mod mem;
mod network;
mod outputs;
mod query;
mod run;
mod timing;

use network::*;
use run::*;

/// `rknn_context` on LP64.
pub type RknnContext = u64;

const RKNN_SUCC: c_int = 0;
const RKNN_ERR_FAIL: c_int = -1;
const RKNN_ERR_TIMEOUT: c_int = -2;
const RKNN_ERR_PARAM_INVALID: c_int = -5;
const RKNN_ERR_MODEL_INVALID: c_int = -6;
const RKNN_ERR_CTX_INVALID: c_int = -7;
const RKNN_ERR_INPUT_INVALID: c_int = -8;
const RKNN_ERR_OUTPUT_INVALID: c_int = -9;

const QUERY_IN_OUT_NUM: u32 = 0;
const QUERY_INPUT_ATTR: u32 = 1;
const QUERY_OUTPUT_ATTR: u32 = 2;
const QUERY_SDK_VERSION: u32 = 5;
const QUERY_NATIVE_INPUT_ATTR: u32 = 8;
const QUERY_NATIVE_OUTPUT_ATTR: u32 = 9;
const QUERY_NATIVE_NHWC_INPUT_ATTR: u32 = 10;
const QUERY_NATIVE_NHWC_OUTPUT_ATTR: u32 = 11;

const TENSOR_FLOAT32: u32 = 0;
const TENSOR_FLOAT16: u32 = 1;
const TENSOR_INT8: u32 = 2;
const TENSOR_UINT8: u32 = 3;
const QNT_NONE: u32 = 0;
const QNT_AFFINE: u32 = 2;
const FMT_NCHW: u32 = 0;
const FMT_NHWC: u32 = 1;
const FMT_UNDEFINED: u32 = 3;
const MEM_FLAGS_FROM_FD: u32 = 2;

/// Quantisation of every int8 output of a model without `rknn_fake_quant` metadata (a plain
/// w8a8 build of YOLOX-Nano reports about this).
const INT8_SCALE: f32 = 0.0229;
const INT8_ZP: i32 = -31;
/// ONNX metadata (`metadata_props`) keys the fake reads: per-output int8 quantisation, and
/// the divisor of the uint8 input (tract exposes them as `onnx.metadata_props.<key>`).
const QUANT_KEY: &str = "rknn_fake_quant";
const STD_KEY: &str = "rknn_fake_std";
/// `DMA_BUF_IOCTL_SYNC` = `_IOW('b', 0, struct dma_buf_sync)` (include/uapi/linux/dma-buf.h).
const DMA_BUF_IOCTL_SYNC: u64 = (1 << 30) | (8 << 16) | ((b'b' as u64) << 8);
const DMA_BUF_SYNC_READ: u64 = 1;
const DMA_BUF_SYNC_END: u64 = 4;

/// `rknn_input_output_num`.
#[repr(C)]
pub struct InputOutputNum {
    n_input: u32,
    n_output: u32,
}

/// `rknn_tensor_attr` (376 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct TensorAttr {
    index: u32,
    n_dims: u32,
    dims: [u32; 16],
    name: [u8; 256],
    n_elems: u32,
    size: u32,
    fmt: u32,
    type_: u32,
    qnt_type: u32,
    fl: i8,
    zp: i32,
    scale: f32,
    w_stride: u32,
    size_with_stride: u32,
    pass_through: u8,
    h_stride: u32,
}

/// `rknn_sdk_version` (512 bytes).
#[repr(C)]
pub struct SdkVersion {
    api_version: [u8; 256],
    drv_version: [u8; 256],
}

/// `rknn_tensor_mem` (40 bytes).
#[repr(C)]
pub struct TensorMem {
    virt_addr: *mut c_void,
    phys_addr: u64,
    fd: i32,
    offset: i32,
    size: u32,
    flags: u32,
    priv_data: *mut c_void,
}

/// `rknn_input` (32 bytes).
#[repr(C)]
pub struct Input {
    index: u32,
    buf: *mut c_void,
    size: u32,
    pass_through: u8,
    type_: u32,
    fmt: u32,
}

/// `rknn_output` (24 bytes).
#[repr(C)]
pub struct Output {
    want_float: u8,
    is_prealloc: u8,
    index: u32,
    buf: *mut c_void,
    size: u32,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum OutType {
    F16,
    F32,
    I8,
}

impl OutType {
    fn from_env() -> Result<OutType, String> {
        match std::env::var("ZCPIPE_FAKE_RKNN_OUTPUT").as_deref() {
            Err(_) | Ok("") | Ok("fp16") => Ok(OutType::F16),
            Ok("fp32") => Ok(OutType::F32),
            Ok("int8") => Ok(OutType::I8),
            Ok(other) => Err(format!("ZCPIPE_FAKE_RKNN_OUTPUT={other}: use fp16, fp32 or int8")),
        }
    }
    fn rknn_type(self) -> u32 {
        match self {
            OutType::F16 => TENSOR_FLOAT16,
            OutType::F32 => TENSOR_FLOAT32,
            OutType::I8 => TENSOR_INT8,
        }
    }
    fn elem_size(self) -> usize {
        match self {
            OutType::F16 => 2,
            OutType::F32 => 4,
            OutType::I8 => 1,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Bound {
    mem: usize,
    fd: i32,
    offset: i32,
    size: u32,
}

enum InputSrc {
    None,
    Mem(Bound),
    Packed(Vec<u8>),
}

struct Context {
    model_len: usize,
    /// The ONNX model this context runs (the one `ZCPIPE_FAKE_RKNN_ONNX` named at rknn_init).
    net: Arc<Net>,
    out_type: OutType,
    w_stride: usize,
    /// `rknn_set_core_mask`'s mask (0 = AUTO until set; a duplicate starts at AUTO too).
    core_mask: u32,
    input: InputSrc,
    /// The last run's outputs as float32, one vector per output.
    output: Option<Vec<Vec<f32>>>,
}

/// One output of the ONNX model as the fake reports it.
struct NetOutput {
    name: String,
    /// The ONNX shape (`n_dims`/`dims` of its attribute).
    dims: Vec<usize>,
    /// int8 quantisation: `q = round(v / scale) + zp`, clamped to -128..=127.
    scale: f32,
    zp: i32,
}

impl NetOutput {
    fn elems(&self) -> usize {
        self.dims.iter().product()
    }
}

/// The ONNX model standing in for the `.rknn`, and what the fake reports of it.
struct Net {
    plan: Plan,
    /// The ONNX input's name, height and width.
    input: String,
    h: usize,
    w: usize,
    outputs: Vec<NetOutput>,
    /// Each input byte is divided by this before the model sees it (`rknn_fake_std`; 1 = raw).
    std: f32,
}

#[derive(Default)]
struct State {
    next_ctx: u64,
    next_mem: usize,
    ctxs: HashMap<u64, Context>,
    /// Live mems: id -> owning context.
    mems: HashMap<usize, u64>,
    /// Buffers handed out by rknn_outputs_get with is_prealloc = 0.
    allocated: HashSet<usize>,
}

fn state() -> std::sync::MutexGuard<'static, State> {
    static S: OnceLock<Mutex<State>> = OnceLock::new();
    S.get_or_init(|| Mutex::new(State { next_ctx: 1, next_mem: 1, ..Default::default() }))
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// Appends one line to `$ZCPIPE_FAKE_RKNN_LOG` with a single write on an O_APPEND fd:
/// `pid=<process> <line> tid=<thread>`.
fn log(line: String) {
    let Some(path) = std::env::var_os("ZCPIPE_FAKE_RKNN_LOG").filter(|p| !p.is_empty()) else { return };
    let text = format!("pid={} {line} tid={}\n", std::process::id(), tid());
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = f.write_all(text.as_bytes());
    }
}

/// Runs `f`, turning a panic into `RKNN_ERR_FAIL`.
fn guarded(name: &str, f: impl FnOnce() -> c_int) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            log(format!("{name} panicked"));
            RKNN_ERR_FAIL
        }
    }
}

fn fail(msg: String, code: c_int) -> c_int {
    eprintln!("fake librknnrt: {msg}");
    log(format!("error code={code} {}", msg.replace('\n', " ")));
    code
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod timing_tests;

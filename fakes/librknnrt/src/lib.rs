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
//! `ZCPIPE_FAKE_RKNN_CORES` cores. With `ZCPIPE_FAKE_RKNN_DMABUF_ONLY=1`,
//! `rknn_create_mem_from_fd` refuses fds that are not dma-bufs (as the real runtime does
//! with a memfd), returning NULL.
//!
//! Concurrency: contexts may be used from any thread, one thread per context at a time (a
//! second thread entering `rknn_run` on a busy context is refused and logged). Each run
//! logs a begin line (`rknn_run ctx=.. input=.. input_hash=.. run=N`: the hash tells which
//! image it was given) and an end line (`rknn_run_end ctx=.. run=N code=..`). `ZCPIPE_FAKE_RKNN_RUN_BARRIER=N` holds the first runs until N runs are
//! in progress at once (5 s timeout, then `rknn_run_barrier_timeout`), which makes overlap
//! deterministic for a caller that runs contexts concurrently; `ZCPIPE_FAKE_RKNN_FAIL_RUN=K`
//! makes the K-th run of the process fail with `RKNN_ERR_TIMEOUT`.
//!
//! Every call is appended as one line (`pid=.. name key=value ... tid=..`) to the file named by
//! `ZCPIPE_FAKE_RKNN_LOG`, with one `write(2)` on an `O_APPEND` fd, so processes and threads
//! do not interleave lines.

use std::collections::{HashMap, HashSet};
use std::ffi::{c_int, c_void};
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tract_onnx::prelude::tract_ndarray::Array4;
use tract_onnx::prelude::*;
use tract_onnx::tract_hir::infer::Factoid;

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

fn w_stride_from_env(w: usize) -> Result<usize, String> {
    match std::env::var("ZCPIPE_FAKE_RKNN_W_STRIDE") {
        Err(_) => Ok(w),
        Ok(v) => match v.parse::<usize>() {
            Ok(s) if s >= w => Ok(s),
            _ => Err(format!("ZCPIPE_FAKE_RKNN_W_STRIDE={v}: use a number of pixels >= {w} (the model's width)")),
        },
    }
}

type Plan = Arc<TypedRunnableModel>;

/// The models loaded so far in this process (or why one could not be), by path.
type Nets = HashMap<PathBuf, Result<Arc<Net>, String>>;

/// The ONNX model `ZCPIPE_FAKE_RKNN_ONNX` names, loaded once per process and path.
fn net() -> Result<Arc<Net>, String> {
    static NETS: OnceLock<Mutex<Nets>> = OnceLock::new();
    let path = std::env::var_os("ZCPIPE_FAKE_RKNN_ONNX").filter(|p| !p.is_empty()).map(PathBuf::from).ok_or(
        "ZCPIPE_FAKE_RKNN_ONNX is not set: the fake librknnrt runs that ONNX model (e.g. models/yolox_nano.onnx)",
    )?;
    let mut nets = NETS.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    nets.entry(path.clone())
        .or_insert_with(|| {
            load_net(&path).map(Arc::new).map_err(|e| format!("fake librknnrt cannot use {}: {e}", path.display()))
        })
        .clone()
}

/// A string of the model's `metadata_props`.
fn metadata(model: &InferenceModel, key: &str) -> Option<String> {
    let t = model.properties.get(&format!("onnx.metadata_props.{key}"))?;
    t.try_as_plain_ram().ok()?.to_scalar::<String>().ok().cloned()
}

/// Loads the ONNX model at `path` with its input fixed to float32 `[1,3,H,W]`, and reads
/// its outputs and the fake's metadata (`rknn_fake_quant`, `rknn_fake_std`).
fn load_net(path: &Path) -> Result<Net, String> {
    let tract = |e: TractError| format!("tract: {e}");
    let model = tract_onnx::onnx().model_for_path(path).map_err(tract)?;
    let inputs = model.input_outlets().map_err(tract)?.to_vec();
    let [input] = inputs[..] else {
        return Err(format!("{} inputs; the fake runs models with one [1,3,H,W] input", inputs.len()));
    };
    let input_name = model.node(input.node).name.clone();
    let fact = model.outlet_fact(input).map_err(tract)?;
    let dims: Vec<Option<i64>> = fact.shape.dims().map(|d| d.concretize().and_then(|d| d.to_i64().ok())).collect();
    let (h, w) = match dims[..] {
        [Some(1), Some(3), Some(h), Some(w)] if h > 0 && w > 0 && !fact.shape.is_open() => (h as usize, w as usize),
        _ => {
            let text: Vec<String> = dims.iter().map(|d| d.map_or("?".to_string(), |v| v.to_string())).collect();
            return Err(format!(
                "input {input_name} is [{}]; the fake needs a fixed [1,3,H,W] input (a real .rknn has a fixed size)",
                text.join(",")
            ));
        }
    };
    let std = match metadata(&model, STD_KEY) {
        None => 1.0,
        Some(v) => match v.trim().parse::<f32>() {
            Ok(s) if s.is_finite() && s > 0.0 => s,
            _ => {
                return Err(format!(
                    "metadata {STD_KEY}={v:?}: want a positive number (255 for a model that takes 0..1)"
                ))
            }
        },
    };
    let quant = metadata(&model, QUANT_KEY);
    let typed = model
        .with_input_fact(0, InferenceFact::dt_shape(DatumType::F32, [1usize, 3, h, w]))
        .and_then(|m| m.into_optimized())
        .map_err(tract)?;
    let mut outputs = Vec::new();
    for &o in typed.output_outlets().map_err(tract)? {
        let name = typed.outlet_label(o).map(str::to_string).unwrap_or_else(|| typed.node(o.node).name.clone());
        let fact = typed.outlet_fact(o).map_err(tract)?;
        let dims = fact.shape.as_concrete().ok_or_else(|| format!("output {name} has no fixed shape"))?.to_vec();
        if dims.is_empty() || dims.len() > 16 {
            return Err(format!("output {name} has {} dims; rknn_tensor_attr holds 1 to 16", dims.len()));
        }
        outputs.push(NetOutput { name, dims, scale: INT8_SCALE, zp: INT8_ZP });
    }
    if let Some(text) = quant {
        let pairs: Vec<(f32, i32)> = serde_json::from_str(&text)
            .map_err(|e| format!("metadata {QUANT_KEY}: {e}; want [[scale, zp], ...], one pair per output"))?;
        if pairs.len() != outputs.len() {
            return Err(format!(
                "metadata {QUANT_KEY} has {} [scale, zp] pairs for {} outputs",
                pairs.len(),
                outputs.len()
            ));
        }
        for (o, (scale, zp)) in outputs.iter_mut().zip(pairs) {
            if !(scale.is_finite() && scale > 0.0 && (-128..=127).contains(&zp)) {
                return Err(format!(
                    "metadata {QUANT_KEY}: output {} has scale {scale}, zp {zp}; want scale > 0 and zp in -128..=127",
                    o.name
                ));
            }
            (o.scale, o.zp) = (scale, zp);
        }
    }
    let plan = typed.into_runnable().map_err(tract)?;
    Ok(Net { plan, input: input_name, h, w, outputs, std })
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

/// `int rknn_init(rknn_context*, void* model, uint32_t size, uint32_t flag, rknn_init_extend*)`.
///
/// # Safety
/// `context` is writable; `model` holds `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn rknn_init(
    context: *mut RknnContext,
    model: *mut c_void,
    size: u32,
    flag: u32,
    _extend: *mut c_void,
) -> c_int {
    guarded("rknn_init", || {
        if context.is_null() || model.is_null() || size == 0 {
            return fail(
                format!(
                    "rknn_init: context {context:?}, model {model:?}, size {size}: the fake takes a model in memory"
                ),
                RKNN_ERR_PARAM_INVALID,
            );
        }
        let out_type = match OutType::from_env() {
            Ok(o) => o,
            Err(e) => return fail(e, RKNN_ERR_PARAM_INVALID),
        };
        let net = match net() {
            Ok(n) => n,
            Err(e) => return fail(e, RKNN_ERR_MODEL_INVALID),
        };
        let w_stride = match w_stride_from_env(net.w) {
            Ok(w) => w,
            Err(e) => return fail(e, RKNN_ERR_PARAM_INVALID),
        };
        let (input, outputs) = (format!("{}x{}", net.w, net.h), net.outputs.len());
        let mut st = state();
        let id = st.next_ctx;
        st.next_ctx += 1;
        st.ctxs.insert(
            id,
            Context { model_len: size as usize, net, out_type, w_stride, input: InputSrc::None, output: None },
        );
        // SAFETY: checked non-null; the caller's out-pointer.
        unsafe { *context = id };
        log(format!("rknn_init ctx={id} model_len={size} flag={flag} output={out_type:?} w_stride={w_stride} input={input} outputs={outputs} platform=rk3588"));
        RKNN_SUCC
    })
}

/// `int rknn_dup_context(rknn_context* in, rknn_context* out)`.
///
/// # Safety
/// Both pointers are valid.
#[no_mangle]
pub unsafe extern "C" fn rknn_dup_context(context_in: *mut RknnContext, context_out: *mut RknnContext) -> c_int {
    guarded("rknn_dup_context", || {
        if context_in.is_null() || context_out.is_null() {
            return RKNN_ERR_PARAM_INVALID;
        }
        // SAFETY: checked non-null.
        let src = unsafe { *context_in };
        let mut st = state();
        let Some(c) = st.ctxs.get(&src) else { return RKNN_ERR_CTX_INVALID };
        let copy = Context {
            model_len: c.model_len,
            net: c.net.clone(),
            out_type: c.out_type,
            w_stride: c.w_stride,
            input: InputSrc::None,
            output: None,
        };
        let id = st.next_ctx;
        st.next_ctx += 1;
        st.ctxs.insert(id, copy);
        // SAFETY: checked non-null.
        unsafe { *context_out = id };
        log(format!("rknn_dup_context ctx={src} new_ctx={id}"));
        RKNN_SUCC
    })
}

/// `int rknn_destroy(rknn_context)`.
#[no_mangle]
pub extern "C" fn rknn_destroy(context: RknnContext) -> c_int {
    guarded("rknn_destroy", || {
        let mut st = state();
        if st.ctxs.remove(&context).is_none() {
            return RKNN_ERR_CTX_INVALID;
        }
        let live = st.mems.values().filter(|&&c| c == context).count();
        log(format!("rknn_destroy ctx={context} live_mems={live}"));
        RKNN_SUCC
    })
}

/// `name` as a NUL-terminated C string in `dst` (cut to 255 bytes, as RKNN_MAX_NAME_LEN).
fn put_name(dst: &mut [u8; 256], name: &str) {
    dst.fill(0);
    let n = name.len().min(dst.len() - 1);
    dst[..n].copy_from_slice(&name.as_bytes()[..n]);
}

/// The input as zcpipe binds it: uint8 NHWC `[1,H,W,3]` of the model's size, reported as the
/// toolkit's int8 with zero point -128 / scale 1.0 (the native attribute carries the
/// context's `w_stride`).
fn input_attr(c: &Context, native: bool) -> TensorAttr {
    let (h, w) = (c.net.h, c.net.w);
    let stride = if native { c.w_stride } else { w };
    let mut a = TensorAttr {
        index: 0,
        n_dims: 4,
        dims: [0; 16],
        name: [0; 256],
        n_elems: (h * w * 3) as u32,
        size: (h * w * 3) as u32,
        fmt: FMT_NHWC,
        type_: TENSOR_INT8,
        qnt_type: QNT_AFFINE,
        fl: 0,
        zp: -128,
        scale: 1.0,
        w_stride: stride as u32,
        size_with_stride: (stride * h * 3) as u32,
        pass_through: 0,
        h_stride: 0,
    };
    a.dims[..4].copy_from_slice(&[1, h as u32, w as u32, 3]);
    put_name(&mut a.name, &c.net.input);
    a
}

/// Output `index` of the ONNX model in the context's output type (None: no such output).
fn output_attr(c: &Context, index: u32) -> Option<TensorAttr> {
    let o = c.net.outputs.get(index as usize)?;
    let n = o.elems() as u32;
    let size = n * c.out_type.elem_size() as u32;
    let int8 = c.out_type == OutType::I8;
    let mut a = TensorAttr {
        index,
        n_dims: o.dims.len() as u32,
        dims: [0; 16],
        name: [0; 256],
        n_elems: n,
        size,
        fmt: if o.dims.len() == 4 { FMT_NCHW } else { FMT_UNDEFINED },
        type_: c.out_type.rknn_type(),
        qnt_type: if int8 { QNT_AFFINE } else { QNT_NONE },
        fl: 0,
        zp: if int8 { o.zp } else { 0 },
        scale: if int8 { o.scale } else { 1.0 },
        w_stride: 0,
        size_with_stride: size,
        pass_through: 0,
        h_stride: 0,
    };
    for (d, &v) in a.dims.iter_mut().zip(&o.dims) {
        *d = v as u32;
    }
    put_name(&mut a.name, &o.name);
    Some(a)
}

fn write_info<T>(info: *mut c_void, size: u32, value: T) -> c_int {
    if size as usize != std::mem::size_of::<T>() {
        return fail(
            format!("rknn_query: info size {size} but the struct is {} bytes", std::mem::size_of::<T>()),
            RKNN_ERR_PARAM_INVALID,
        );
    }
    // SAFETY: the caller passed `size` writable bytes at `info`, which we checked is a `T`;
    // `write_unaligned` makes no alignment assumption.
    unsafe { std::ptr::write_unaligned(info as *mut T, value) };
    RKNN_SUCC
}

/// `int rknn_query(rknn_context, rknn_query_cmd, void* info, uint32_t size)`.
///
/// # Safety
/// `info` holds `size` writable bytes; for attribute queries its `index` is set.
#[no_mangle]
pub unsafe extern "C" fn rknn_query(context: RknnContext, cmd: u32, info: *mut c_void, size: u32) -> c_int {
    guarded("rknn_query", || {
        if info.is_null() {
            return RKNN_ERR_PARAM_INVALID;
        }
        let st = state();
        let Some(c) = st.ctxs.get(&context) else { return RKNN_ERR_CTX_INVALID };
        let index = if matches!(
            cmd,
            QUERY_INPUT_ATTR
                | QUERY_OUTPUT_ATTR
                | QUERY_NATIVE_INPUT_ATTR
                | QUERY_NATIVE_OUTPUT_ATTR
                | QUERY_NATIVE_NHWC_INPUT_ATTR
                | QUERY_NATIVE_NHWC_OUTPUT_ATTR
        ) {
            if (size as usize) < 4 {
                return RKNN_ERR_PARAM_INVALID;
            }
            // SAFETY: at least 4 readable bytes: the attr's leading `index`.
            Some(unsafe { std::ptr::read_unaligned(info as *const u32) })
        } else {
            None
        };
        log(format!(
            "rknn_query ctx={context} cmd={cmd} size={size}{}",
            index.map(|i| format!(" index={i}")).unwrap_or_default()
        ));
        let index = index.unwrap_or(0);
        match cmd {
            QUERY_IN_OUT_NUM => {
                write_info(info, size, InputOutputNum { n_input: 1, n_output: c.net.outputs.len() as u32 })
            }
            QUERY_INPUT_ATTR | QUERY_NATIVE_INPUT_ATTR | QUERY_NATIVE_NHWC_INPUT_ATTR if index != 0 => {
                RKNN_ERR_PARAM_INVALID
            }
            QUERY_INPUT_ATTR => write_info(info, size, input_attr(c, false)),
            QUERY_NATIVE_INPUT_ATTR | QUERY_NATIVE_NHWC_INPUT_ATTR => write_info(info, size, input_attr(c, true)),
            QUERY_OUTPUT_ATTR | QUERY_NATIVE_OUTPUT_ATTR | QUERY_NATIVE_NHWC_OUTPUT_ATTR => match output_attr(c, index)
            {
                Some(a) => write_info(info, size, a),
                None => RKNN_ERR_PARAM_INVALID,
            },
            QUERY_SDK_VERSION => {
                let mut v = SdkVersion { api_version: [0; 256], drv_version: [0; 256] };
                put_name(&mut v.api_version, "fake 2.3.2 (zcpipe)");
                put_name(&mut v.drv_version, "fake 0.9.8 (rk3588)");
                write_info(info, size, v)
            }
            _ => RKNN_ERR_PARAM_INVALID,
        }
    })
}

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

/// `int rknn_set_core_mask(rknn_context, rknn_core_mask)`.
#[no_mangle]
pub extern "C" fn rknn_set_core_mask(context: RknnContext, mask: u32) -> c_int {
    guarded("rknn_set_core_mask", || {
        let cores: u32 = std::env::var("ZCPIPE_FAKE_RKNN_CORES").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
        let all = (1u32 << cores.min(16)) - 1;
        let ok = mask == 0 || mask == 0xffff || (mask & !all == 0 && matches!(mask, 1 | 2 | 4 | 3 | 7));
        log(format!("rknn_set_core_mask ctx={context} mask={mask} ok={ok}"));
        if !state().ctxs.contains_key(&context) {
            return RKNN_ERR_CTX_INVALID;
        }
        if ok {
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

fn dma_sync(fd: i32, flags: u64) -> std::io::Result<()> {
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
fn tid() -> i32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() }
}

/// FNV-1a 64 of the input as the model sees it (float32 NCHW, stride padding left out):
/// tells which image a run was given.
fn input_hash(nchw: &[f32]) -> u64 {
    nchw.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, v| (h ^ v.to_bits() as u64).wrapping_mul(0x0000_0100_0000_01b3))
}

/// `int rknn_run(rknn_context, rknn_run_extend*)`.
///
/// Reads the bound input, then logs `rknn_run ctx=.. input=.. input_hash=.. run=..` (the
/// run begins), waits at the barrier (`ZCPIPE_FAKE_RKNN_RUN_BARRIER`), runs the ONNX model
/// and logs `rknn_run_end ctx=.. run=.. code=..`. A context already inside
/// rknn_run on another thread is refused (`RKNN_ERR_CTX_INVALID`, logged as
/// `rknn_run_concurrent_use`): the real runtime forbids using one context from two threads
/// at once. Run number `ZCPIPE_FAKE_RKNN_FAIL_RUN` (1-based, per process) fails with
/// `RKNN_ERR_TIMEOUT`, as a hung NPU job would.
///
/// # Safety
/// `extend` is null or valid (ignored).
#[no_mangle]
pub unsafe extern "C" fn rknn_run(context: RknnContext, _extend: *mut c_void) -> c_int {
    guarded("rknn_run", || {
        let (input, net, w_stride, what) = {
            let st = state();
            let Some(c) = st.ctxs.get(&context) else { return RKNN_ERR_CTX_INVALID };
            match &c.input {
                InputSrc::None => {
                    return fail(
                        "rknn_run: no input set (rknn_inputs_set or rknn_set_io_mem)".into(),
                        RKNN_ERR_INPUT_INVALID,
                    )
                }
                InputSrc::Mem(b) => {
                    (Err(*b), c.net.clone(), c.w_stride, format!("input=mem mem={} fd={}", b.mem, b.fd))
                }
                InputSrc::Packed(v) => {
                    (Ok(to_nchw(v, c.net.w * 3, &c.net)), c.net.clone(), c.w_stride, "input=copy".to_string())
                }
            }
        };
        let nchw = match input {
            Ok(v) => v,
            Err(b) => match read_bound(&b, w_stride, &net) {
                Ok(v) => v,
                Err(e) => return fail(format!("rknn_run: {e}"), RKNN_ERR_INPUT_INVALID),
            },
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
        log(format!("rknn_run ctx={context} {what} input_hash={:016x} run={run}", input_hash(&nchw)));
        barrier(env_number("ZCPIPE_FAKE_RKNN_RUN_BARRIER").unwrap_or(0) as usize, context, run);
        let code = if env_number("ZCPIPE_FAKE_RKNN_FAIL_RUN") == Some(run) {
            fail(format!("rknn_run: run {run} fails (ZCPIPE_FAKE_RKNN_FAIL_RUN)"), RKNN_ERR_TIMEOUT)
        } else {
            infer(context, &net, nchw)
        };
        gate().running.retain(|&c| c != context);
        log(format!("rknn_run_end ctx={context} run={run} code={code}"));
        code
    })
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
    let mut st = state();
    let Some(c) = st.ctxs.get_mut(&context) else { return RKNN_ERR_CTX_INVALID };
    c.output = Some(values);
    RKNN_SUCC
}

/// An output in its native type `t` (little-endian; int8 quantised with `o`'s scale and zero
/// point, rounding half to even like numpy), or as float32 when `want_float`.
fn encode(values: &[f32], t: OutType, o: &NetOutput, want_float: bool) -> Vec<u8> {
    let native: Vec<u8> = match t {
        OutType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        OutType::F16 => values.iter().flat_map(|&v| half::f16::from_f32(v).to_bits().to_le_bytes()).collect(),
        OutType::I8 => values
            .iter()
            .map(|&v| ((v / o.scale).round_ties_even() as i32 + o.zp).clamp(-128, 127) as i8 as u8)
            .collect(),
    };
    if !want_float || t == OutType::F32 {
        return native;
    }
    match t {
        OutType::F16 => native
            .chunks_exact(2)
            .flat_map(|b| half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32().to_le_bytes())
            .collect(),
        _ => native.iter().flat_map(|&q| (((q as i8) as i32 - o.zp) as f32 * o.scale).to_le_bytes()).collect(),
    }
}

/// `int rknn_outputs_get(rknn_context, uint32_t n, rknn_output outputs[], rknn_output_extend*)`:
/// each entry gets output `index` of the last run (any of the model's outputs, one or
/// several per call), in the context's type or as float32 when `want_float`. Logged as one
/// line, lists comma-separated (`index=0,1,2 ... size=..`).
///
/// # Safety
/// `outputs` holds `n_outputs` entries; pre-allocated ones point at `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn rknn_outputs_get(
    context: RknnContext,
    n_outputs: u32,
    outputs: *mut Output,
    _extend: *mut c_void,
) -> c_int {
    guarded("rknn_outputs_get", || {
        if outputs.is_null() || n_outputs == 0 {
            return RKNN_ERR_PARAM_INVALID;
        }
        // SAFETY: checked non-null; the caller's array of n_outputs entries.
        let outs = unsafe { std::slice::from_raw_parts_mut(outputs, n_outputs as usize) };
        let mut st = state();
        let Some(c) = st.ctxs.get(&context) else { return RKNN_ERR_CTX_INVALID };
        let list = |f: fn(&Output) -> u32| outs.iter().map(|o| f(o).to_string()).collect::<Vec<_>>().join(",");
        log(format!(
            "rknn_outputs_get ctx={context} n={n_outputs} index={} want_float={} is_prealloc={} size={}",
            list(|o| o.index),
            list(|o| o.want_float.into()),
            list(|o| o.is_prealloc.into()),
            list(|o| o.size)
        ));
        let Some(values) = &c.output else {
            return fail("rknn_outputs_get before rknn_run".into(), RKNN_ERR_OUTPUT_INVALID);
        };
        // Every entry is checked before anything is written or allocated.
        let mut encoded = Vec::with_capacity(outs.len());
        for o in outs.iter() {
            let i = o.index as usize;
            let Some(spec) = c.net.outputs.get(i) else {
                return fail(
                    format!("rknn_outputs_get: output index {i}, but the model has {} outputs", c.net.outputs.len()),
                    RKNN_ERR_PARAM_INVALID,
                );
            };
            let bytes = encode(&values[i], c.out_type, spec, o.want_float != 0);
            if o.is_prealloc != 0 && (o.buf.is_null() || (o.size as usize) < bytes.len()) {
                return fail(
                    format!(
                        "rknn_outputs_get: pre-allocated buffer of {} bytes, output {i} needs {}",
                        o.size,
                        bytes.len()
                    ),
                    RKNN_ERR_PARAM_INVALID,
                );
            }
            encoded.push(bytes);
        }
        for (out, bytes) in outs.iter_mut().zip(encoded) {
            if out.is_prealloc != 0 {
                // SAFETY: the caller's `size` >= bytes.len() writable bytes (checked above).
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.buf as *mut u8, bytes.len()) };
            } else {
                // SAFETY: plain allocation, freed in rknn_outputs_release.
                let p = unsafe { libc::malloc(bytes.len()) } as *mut u8;
                if p.is_null() {
                    return RKNN_ERR_FAIL;
                }
                // SAFETY: `p` holds bytes.len() bytes.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len()) };
                out.buf = p as *mut c_void;
                st.allocated.insert(p as usize);
            }
            out.size = bytes.len() as u32;
        }
        RKNN_SUCC
    })
}

/// `int rknn_outputs_release(rknn_context, uint32_t n, rknn_output outputs[])`.
///
/// # Safety
/// `outputs` is what rknn_outputs_get filled.
#[no_mangle]
pub unsafe extern "C" fn rknn_outputs_release(context: RknnContext, n_outputs: u32, outputs: *mut Output) -> c_int {
    guarded("rknn_outputs_release", || {
        if outputs.is_null() {
            return RKNN_ERR_PARAM_INVALID;
        }
        log(format!("rknn_outputs_release ctx={context} n={n_outputs}"));
        let mut st = state();
        for i in 0..n_outputs as usize {
            // SAFETY: the caller's array of n_outputs entries.
            let out = unsafe { &mut *outputs.add(i) };
            if out.is_prealloc == 0 && st.allocated.remove(&(out.buf as usize)) {
                // SAFETY: allocated by rknn_outputs_get with malloc, released once.
                unsafe { libc::free(out.buf) };
                out.buf = std::ptr::null_mut();
            }
        }
        RKNN_SUCC
    })
}

fn inode(fd: i32) -> Option<(u64, u64)> {
    // SAFETY: fstat fills a zeroed stat for a valid fd, or fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return None;
    }
    Some((st.st_ino, st.st_size as u64))
}

/// `rknn_tensor_mem* rknn_create_mem_from_fd(rknn_context, int32_t fd, void* virt, uint32_t size, int32_t offset)`.
///
/// # Safety
/// Plain values; `virt_addr` is recorded, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn rknn_create_mem_from_fd(
    context: RknnContext,
    fd: i32,
    virt_addr: *mut c_void,
    size: u32,
    offset: i32,
) -> *mut TensorMem {
    let r = catch_unwind(AssertUnwindSafe(|| {
        let (ino, fsize) = inode(fd).unwrap_or((0, 0));
        let mut st = state();
        if !st.ctxs.contains_key(&context) || fd < 0 || offset < 0 || size == 0 {
            log(format!("rknn_create_mem_from_fd ctx={context} fd={fd} size={size} offset={offset} mem=null"));
            return std::ptr::null_mut();
        }
        // A dma-buf's size comes from lseek(SEEK_END); a memfd's st_size is the same.
        // SAFETY: lseek on the caller's fd; the position of a dma-buf/memfd does not matter to it.
        let end = unsafe { libc::lseek(fd, 0, libc::SEEK_END) };
        let actual = if end > 0 { end as u64 } else { fsize };
        if actual < offset as u64 + size as u64 {
            log(format!("rknn_create_mem_from_fd ctx={context} fd={fd} size={size} offset={offset} mem=null buffer_bytes={actual}"));
            return std::ptr::null_mut();
        }
        // Like the real runtime on a board, optionally refuse what is not a dma-buf (a memfd
        // answers DMA_BUF_IOCTL_SYNC with ENOTTY).
        if std::env::var_os("ZCPIPE_FAKE_RKNN_DMABUF_ONLY").is_some_and(|v| v == "1") {
            match dma_sync(fd, DMA_BUF_SYNC_READ) {
                Ok(()) => {
                    let _ = dma_sync(fd, DMA_BUF_SYNC_READ | DMA_BUF_SYNC_END);
                }
                Err(e) => {
                    let errno = e.raw_os_error().unwrap_or(0);
                    log(format!("rknn_create_mem_from_fd ctx={context} fd={fd} size={size} offset={offset} mem=null not_dmabuf_errno={errno}"));
                    return std::ptr::null_mut();
                }
            }
        }
        let id = st.next_mem;
        st.next_mem += 1;
        st.mems.insert(id, context);
        log(format!(
            "rknn_create_mem_from_fd ctx={context} fd={fd} ino={ino} size={size} offset={offset} virt={} mem={id}",
            !virt_addr.is_null() as u8
        ));
        Box::into_raw(Box::new(TensorMem {
            virt_addr,
            phys_addr: 0,
            fd,
            offset,
            size,
            flags: MEM_FLAGS_FROM_FD,
            priv_data: id as *mut c_void,
        }))
    }));
    r.unwrap_or(std::ptr::null_mut())
}

/// `int rknn_destroy_mem(rknn_context, rknn_tensor_mem*)`.
///
/// # Safety
/// `mem` came from rknn_create_mem_from_fd and is destroyed once.
#[no_mangle]
pub unsafe extern "C" fn rknn_destroy_mem(context: RknnContext, mem: *mut TensorMem) -> c_int {
    guarded("rknn_destroy_mem", || {
        if mem.is_null() {
            return RKNN_ERR_PARAM_INVALID;
        }
        // SAFETY: a live mem of ours (checked against the registry before it is freed).
        let id = unsafe { (*mem).priv_data } as usize;
        let mut st = state();
        if st.mems.get(&id) != Some(&context) {
            return fail(
                format!("rknn_destroy_mem: mem {id} is not a live mem of context {context}"),
                RKNN_ERR_PARAM_INVALID,
            );
        }
        st.mems.remove(&id);
        if let Some(c) = st.ctxs.get_mut(&context) {
            if matches!(&c.input, InputSrc::Mem(b) if b.mem == id) {
                c.input = InputSrc::None;
            }
        }
        // SAFETY: made by Box::into_raw in rknn_create_mem_from_fd, freed once (registry).
        drop(unsafe { Box::from_raw(mem) });
        log(format!("rknn_destroy_mem ctx={context} mem={id}"));
        RKNN_SUCC
    })
}

/// `int rknn_set_io_mem(rknn_context, rknn_tensor_mem*, rknn_tensor_attr*)`: binds an input
/// (uint8 NHWC, pass_through 0, at least `size_with_stride` bytes).
///
/// # Safety
/// `mem` is a live mem; `attr` is a valid rknn_tensor_attr.
#[no_mangle]
pub unsafe extern "C" fn rknn_set_io_mem(context: RknnContext, mem: *mut TensorMem, attr: *mut TensorAttr) -> c_int {
    guarded("rknn_set_io_mem", || {
        if mem.is_null() || attr.is_null() {
            return RKNN_ERR_PARAM_INVALID;
        }
        // SAFETY: checked non-null; the caller's valid structs.
        let (m, a) = unsafe { (&*mem, *attr) };
        let id = m.priv_data as usize;
        let mut st = state();
        log(format!(
            "rknn_set_io_mem ctx={context} mem={id} fd={} index={} type={} fmt={} pass_through={} w_stride={} size_with_stride={}",
            m.fd, a.index, a.type_, a.fmt, a.pass_through, a.w_stride, a.size_with_stride
        ));
        if st.mems.get(&id) != Some(&context) {
            return fail(
                format!("rknn_set_io_mem: mem {id} is not a live mem of context {context}"),
                RKNN_ERR_PARAM_INVALID,
            );
        }
        let Some(c) = st.ctxs.get_mut(&context) else { return RKNN_ERR_CTX_INVALID };
        let need = c.w_stride * c.net.h * 3;
        if a.index != 0 || a.n_dims != 4 {
            return fail(
                format!("rknn_set_io_mem: the fake binds input 0 only (got index {}, {} dims)", a.index, a.n_dims),
                RKNN_ERR_PARAM_INVALID,
            );
        }
        if a.type_ != TENSOR_UINT8 || a.fmt != FMT_NHWC || a.pass_through != 0 {
            return fail(
                format!(
                    "rknn_set_io_mem: input must be UINT8 NHWC pass_through 0 (got type {} fmt {} pass_through {})",
                    a.type_, a.fmt, a.pass_through
                ),
                RKNN_ERR_INPUT_INVALID,
            );
        }
        if (m.size as usize) < need || a.w_stride as usize != c.w_stride {
            return fail(
                format!(
                    "rknn_set_io_mem: buffer of {} bytes with w_stride {}; the NPU reads {need} bytes with w_stride {}",
                    m.size, a.w_stride, c.w_stride
                ),
                RKNN_ERR_INPUT_INVALID,
            );
        }
        c.input = InputSrc::Mem(Bound { mem: id, fd: m.fd, offset: m.offset, size: m.size });
        RKNN_SUCC
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layouts_match_rknn_api_h() {
        assert_eq!(size_of::<InputOutputNum>(), 8);
        assert_eq!(size_of::<TensorAttr>(), 376);
        assert_eq!(
            (offset_of!(TensorAttr, name), offset_of!(TensorAttr, fl), offset_of!(TensorAttr, zp)),
            (72, 348, 352)
        );
        assert_eq!(
            (offset_of!(TensorAttr, w_stride), offset_of!(TensorAttr, pass_through), offset_of!(TensorAttr, h_stride)),
            (360, 368, 372)
        );
        assert_eq!(size_of::<SdkVersion>(), 512);
        assert_eq!(size_of::<TensorMem>(), 40);
        assert_eq!(
            (offset_of!(TensorMem, fd), offset_of!(TensorMem, size), offset_of!(TensorMem, priv_data)),
            (16, 24, 32)
        );
        assert_eq!(size_of::<Input>(), 32);
        assert_eq!((offset_of!(Input, buf), offset_of!(Input, type_), offset_of!(Input, fmt)), (8, 24, 28));
        assert_eq!(size_of::<Output>(), 24);
        assert_eq!((offset_of!(Output, index), offset_of!(Output, buf), offset_of!(Output, size)), (4, 8, 16));
        assert_eq!(DMA_BUF_IOCTL_SYNC, 0x4008_6200);
    }

    fn output(scale: f32, zp: i32) -> NetOutput {
        NetOutput { name: "out".into(), dims: vec![1, 5], scale, zp }
    }

    #[test]
    fn int8_encoding_round_trips_within_half_a_step() {
        let v = [0.0f32, 0.5, -0.7, 1.0, 3.2];
        let o = output(INT8_SCALE, INT8_ZP);
        let q = encode(&v, OutType::I8, &o, false);
        assert_eq!(q[0] as i8, -31);
        let f = encode(&v, OutType::I8, &o, true);
        for (i, x) in v.iter().enumerate() {
            let back = f32::from_le_bytes([f[4 * i], f[4 * i + 1], f[4 * i + 2], f[4 * i + 3]]);
            assert!((back - x).abs() <= INT8_SCALE / 2.0 + 1e-6, "{x} -> {back}");
        }
    }

    #[test]
    fn int8_encoding_uses_the_outputs_own_scale_and_zero_point_rounding_half_to_even() {
        // 1.25 / 0.5 = 2.5 -> 2, 1.75 / 0.5 = 3.5 -> 4 (numpy's np.round), then + zp 3;
        // out of range clamps.
        let q = encode(&[1.25, 1.75, -100.0, 100.0], OutType::I8, &output(0.5, 3), false);
        assert_eq!(q.iter().map(|&b| b as i8).collect::<Vec<_>>(), [5, 7, -128, 127]);
    }
}

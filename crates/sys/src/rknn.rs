//! Rockchip RKNPU2 runtime (`librknnrt.so`): our own thin binding of `rknn_api.h`.
//!
//! Contract: `rknn_api.h` of the RKNPU2 runtime 2.x (`airockchip/rknn-toolkit2`,
//! `rknpu2/runtime/Linux/librknn_api/include/rknn_api.h`; the struct layouts and enum values
//! zcpipe uses are unchanged since `rockchip-linux/rknpu2` 1.4,
//! `runtime/RK3588/Linux/librknn_api/include/rknn_api.h`). Only what zcpipe calls is bound:
//! the structs below (sizes and field offsets are checked in this file's tests against values
//! worked out by hand from the header, for LP64: x86_64 and aarch64), the enum values, and 12
//! functions looked up by name in a library opened at run time with `libloading` (zcpipe never
//! links librknnrt: a host or a board without the runtime still runs every other backend).
//!
//! Library path: `$ZCPIPE_LIBRKNNRT` if set, else `librknnrt.so` through the dynamic loader's
//! search path (`/usr/lib`, `LD_LIBRARY_PATH`, ...).
//!
//! `char` arrays are bound as `u8` arrays: same size and alignment as `c_char` on every
//! target, and no sign confusion (`char` is signed on x86_64 and unsigned on aarch64).

use std::ffi::{c_int, c_void, OsString};
use std::fmt;
use std::path::PathBuf;

use anyhow::{anyhow, Result};

/// `rknn_context`: `uint64_t`, except `uint32_t` on 32-bit ARM (`#ifdef __arm__`).
#[cfg(target_arch = "arm")]
pub type RknnContext = u32;
/// `rknn_context`: `uint64_t`, except `uint32_t` on 32-bit ARM (`#ifdef __arm__`).
#[cfg(not(target_arch = "arm"))]
pub type RknnContext = u64;

/// `RKNN_MAX_DIMS`: dimensions in [`RknnTensorAttr::dims`].
pub const RKNN_MAX_DIMS: usize = 16;
/// `RKNN_MAX_NAME_LEN`: bytes in [`RknnTensorAttr::name`], NUL included.
pub const RKNN_MAX_NAME_LEN: usize = 256;

/// `RKNN_SUCC`: success.
pub const RKNN_SUCC: c_int = 0;

/// Every error code `rknn_api.h` defines, with its macro name.
pub const RKNN_ERRORS: &[(c_int, &str)] = &[
    (-1, "RKNN_ERR_FAIL"),
    (-2, "RKNN_ERR_TIMEOUT"),
    (-3, "RKNN_ERR_DEVICE_UNAVAILABLE"),
    (-4, "RKNN_ERR_MALLOC_FAIL"),
    (-5, "RKNN_ERR_PARAM_INVALID"),
    (-6, "RKNN_ERR_MODEL_INVALID"),
    (-7, "RKNN_ERR_CTX_INVALID"),
    (-8, "RKNN_ERR_INPUT_INVALID"),
    (-9, "RKNN_ERR_OUTPUT_INVALID"),
    (-10, "RKNN_ERR_DEVICE_UNMATCH"),
    (-11, "RKNN_ERR_INCOMPATILE_PRE_COMPILE_MODEL"),
    (-12, "RKNN_ERR_INCOMPATILE_OPTIMIZATION_LEVEL_VERSION"),
    (-13, "RKNN_ERR_TARGET_PLATFORM_UNMATCH"),
];
/// `RKNN_ERR_FAIL`.
pub const RKNN_ERR_FAIL: c_int = -1;
/// `RKNN_ERR_PARAM_INVALID`.
pub const RKNN_ERR_PARAM_INVALID: c_int = -5;
/// `RKNN_ERR_MODEL_INVALID`.
pub const RKNN_ERR_MODEL_INVALID: c_int = -6;
/// `RKNN_ERR_CTX_INVALID`.
pub const RKNN_ERR_CTX_INVALID: c_int = -7;
/// `RKNN_ERR_TARGET_PLATFORM_UNMATCH`.
pub const RKNN_ERR_TARGET_PLATFORM_UNMATCH: c_int = -13;

/// The macro name of an RKNN error code (`RKNN_ERR_MODEL_INVALID` for -6), or `unknown`.
pub fn error_name(code: c_int) -> &'static str {
    if code == RKNN_SUCC {
        return "RKNN_SUCC";
    }
    RKNN_ERRORS.iter().find(|(c, _)| *c == code).map_or("unknown RKNN error", |(_, n)| n)
}

// `rknn_query_cmd` (an `enum`, passed as a C `int`).
/// `RKNN_QUERY_IN_OUT_NUM`: fills [`RknnInputOutputNum`].
pub const RKNN_QUERY_IN_OUT_NUM: u32 = 0;
/// `RKNN_QUERY_INPUT_ATTR`: fills [`RknnTensorAttr`] of input `index` (the model's view).
pub const RKNN_QUERY_INPUT_ATTR: u32 = 1;
/// `RKNN_QUERY_OUTPUT_ATTR`: fills [`RknnTensorAttr`] of output `index`.
pub const RKNN_QUERY_OUTPUT_ATTR: u32 = 2;
/// `RKNN_QUERY_PERF_RUN`: `rknn_perf_run` (not bound).
pub const RKNN_QUERY_PERF_RUN: u32 = 4;
/// `RKNN_QUERY_SDK_VERSION`: fills [`RknnSdkVersion`].
pub const RKNN_QUERY_SDK_VERSION: u32 = 5;
/// `RKNN_QUERY_NATIVE_INPUT_ATTR` (= `RKNN_QUERY_NATIVE_NC1HWC2_INPUT_ATTR`): the layout the
/// NPU reads without conversion, with `w_stride` and `size_with_stride`; what
/// `rknn_set_io_mem` buffers must follow.
pub const RKNN_QUERY_NATIVE_INPUT_ATTR: u32 = 8;
/// `RKNN_QUERY_NATIVE_OUTPUT_ATTR` (= `RKNN_QUERY_NATIVE_NC1HWC2_OUTPUT_ATTR`).
pub const RKNN_QUERY_NATIVE_OUTPUT_ATTR: u32 = 9;
/// `RKNN_QUERY_NATIVE_NHWC_INPUT_ATTR`.
pub const RKNN_QUERY_NATIVE_NHWC_INPUT_ATTR: u32 = 10;
/// `RKNN_QUERY_NATIVE_NHWC_OUTPUT_ATTR`.
pub const RKNN_QUERY_NATIVE_NHWC_OUTPUT_ATTR: u32 = 11;

// `rknn_tensor_type`.
/// `RKNN_TENSOR_FLOAT32`.
pub const RKNN_TENSOR_FLOAT32: u32 = 0;
/// `RKNN_TENSOR_FLOAT16`.
pub const RKNN_TENSOR_FLOAT16: u32 = 1;
/// `RKNN_TENSOR_INT8`.
pub const RKNN_TENSOR_INT8: u32 = 2;
/// `RKNN_TENSOR_UINT8`.
pub const RKNN_TENSOR_UINT8: u32 = 3;
/// `RKNN_TENSOR_INT16`.
pub const RKNN_TENSOR_INT16: u32 = 4;
/// `RKNN_TENSOR_UINT16`.
pub const RKNN_TENSOR_UINT16: u32 = 5;
/// `RKNN_TENSOR_INT32`.
pub const RKNN_TENSOR_INT32: u32 = 6;
/// `RKNN_TENSOR_UINT32`.
pub const RKNN_TENSOR_UINT32: u32 = 7;
/// `RKNN_TENSOR_INT64`.
pub const RKNN_TENSOR_INT64: u32 = 8;
/// `RKNN_TENSOR_BOOL`.
pub const RKNN_TENSOR_BOOL: u32 = 9;
/// `RKNN_TENSOR_INT4` (2.x).
pub const RKNN_TENSOR_INT4: u32 = 10;
/// `RKNN_TENSOR_BFLOAT16` (2.x).
pub const RKNN_TENSOR_BFLOAT16: u32 = 11;

/// The header's name of a `rknn_tensor_type` (`get_type_string`: `FP16`, `INT8`, ...).
pub fn type_name(t: u32) -> &'static str {
    match t {
        RKNN_TENSOR_FLOAT32 => "FP32",
        RKNN_TENSOR_FLOAT16 => "FP16",
        RKNN_TENSOR_INT8 => "INT8",
        RKNN_TENSOR_UINT8 => "UINT8",
        RKNN_TENSOR_INT16 => "INT16",
        RKNN_TENSOR_UINT16 => "UINT16",
        RKNN_TENSOR_INT32 => "INT32",
        RKNN_TENSOR_UINT32 => "UINT32",
        RKNN_TENSOR_INT64 => "INT64",
        RKNN_TENSOR_BOOL => "BOOL",
        RKNN_TENSOR_INT4 => "INT4",
        RKNN_TENSOR_BFLOAT16 => "BF16",
        _ => "UNKNOWN",
    }
}

// `rknn_tensor_qnt_type`.
/// `RKNN_TENSOR_QNT_NONE`.
pub const RKNN_TENSOR_QNT_NONE: u32 = 0;
/// `RKNN_TENSOR_QNT_DFP`: dynamic fixed point, `value = q / 2^fl`.
pub const RKNN_TENSOR_QNT_DFP: u32 = 1;
/// `RKNN_TENSOR_QNT_AFFINE_ASYMMETRIC`: `value = (q - zp) * scale`.
pub const RKNN_TENSOR_QNT_AFFINE_ASYMMETRIC: u32 = 2;

// `rknn_tensor_format`.
/// `RKNN_TENSOR_NCHW`.
pub const RKNN_TENSOR_NCHW: u32 = 0;
/// `RKNN_TENSOR_NHWC`.
pub const RKNN_TENSOR_NHWC: u32 = 1;
/// `RKNN_TENSOR_NC1HWC2`.
pub const RKNN_TENSOR_NC1HWC2: u32 = 2;
/// `RKNN_TENSOR_UNDEFINED`.
pub const RKNN_TENSOR_UNDEFINED: u32 = 3;

/// The header's name of a `rknn_tensor_format` (`get_format_string`).
pub fn format_name(f: u32) -> &'static str {
    match f {
        RKNN_TENSOR_NCHW => "NCHW",
        RKNN_TENSOR_NHWC => "NHWC",
        RKNN_TENSOR_NC1HWC2 => "NC1HWC2",
        RKNN_TENSOR_UNDEFINED => "UNDEFINED",
        _ => "UNKNOWN",
    }
}

// `rknn_core_mask`.
/// `RKNN_NPU_CORE_AUTO`: the runtime picks a core (default).
pub const RKNN_NPU_CORE_AUTO: u32 = 0;
/// `RKNN_NPU_CORE_0`.
pub const RKNN_NPU_CORE_0: u32 = 1;
/// `RKNN_NPU_CORE_1`.
pub const RKNN_NPU_CORE_1: u32 = 2;
/// `RKNN_NPU_CORE_2`.
pub const RKNN_NPU_CORE_2: u32 = 4;
/// `RKNN_NPU_CORE_0_1`.
pub const RKNN_NPU_CORE_0_1: u32 = 3;
/// `RKNN_NPU_CORE_0_1_2`.
pub const RKNN_NPU_CORE_0_1_2: u32 = 7;
/// `RKNN_NPU_CORE_ALL` (2.x): every core of the platform.
pub const RKNN_NPU_CORE_ALL: u32 = 0xffff;

/// `RKNN_TENSOR_MEMORY_FLAGS_FROM_FD` (2.x): a [`RknnTensorMem`] made by
/// `rknn_create_mem_from_fd`.
pub const RKNN_TENSOR_MEMORY_FLAGS_FROM_FD: u32 = 2;

/// `rknn_input_output_num` (8 bytes): the answer to `RKNN_QUERY_IN_OUT_NUM`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RknnInputOutputNum {
    /// Number of input tensors.
    pub n_input: u32,
    /// Number of output tensors.
    pub n_output: u32,
}

/// `rknn_tensor_attr` (376 bytes): one tensor's shape, type, quantisation and strides; the
/// answer to the `*_ATTR` queries and the description `rknn_set_io_mem` takes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RknnTensorAttr {
    /// Tensor index: set it before `rknn_query`.
    pub index: u32,
    /// Number of valid entries in `dims`.
    pub n_dims: u32,
    /// Dimensions, in the order `fmt` says (NHWC: `[1, H, W, C]`).
    pub dims: [u32; RKNN_MAX_DIMS],
    /// Tensor name, NUL-terminated.
    pub name: [u8; RKNN_MAX_NAME_LEN],
    /// Number of elements.
    pub n_elems: u32,
    /// Size in bytes without row padding.
    pub size: u32,
    /// `rknn_tensor_format` (`RKNN_TENSOR_NHWC`, ...).
    pub fmt: u32,
    /// `rknn_tensor_type` (`RKNN_TENSOR_UINT8`, ...).
    pub type_: u32,
    /// `rknn_tensor_qnt_type`.
    pub qnt_type: u32,
    /// Fractional length for `RKNN_TENSOR_QNT_DFP`.
    pub fl: i8,
    /// Zero point for `RKNN_TENSOR_QNT_AFFINE_ASYMMETRIC`.
    pub zp: i32,
    /// Scale for `RKNN_TENSOR_QNT_AFFINE_ASYMMETRIC`.
    pub scale: f32,
    /// Row stride in **elements** (pixels for NHWC) along the width; 0 = the width. Read-only.
    pub w_stride: u32,
    /// Size in bytes with the row stride: what an `rknn_set_io_mem` buffer must hold.
    pub size_with_stride: u32,
    /// 1: the buffer goes to the NPU as is; 0: the runtime converts from `type_`/`fmt`.
    pub pass_through: u8,
    /// Height stride, write-only; 0 = the height.
    pub h_stride: u32,
}

impl Default for RknnTensorAttr {
    fn default() -> Self {
        RknnTensorAttr {
            index: 0,
            n_dims: 0,
            dims: [0; RKNN_MAX_DIMS],
            name: [0; RKNN_MAX_NAME_LEN],
            n_elems: 0,
            size: 0,
            fmt: 0,
            type_: 0,
            qnt_type: 0,
            fl: 0,
            zp: 0,
            scale: 0.0,
            w_stride: 0,
            size_with_stride: 0,
            pass_through: 0,
            h_stride: 0,
        }
    }
}

impl RknnTensorAttr {
    /// The name up to its NUL (lossy UTF-8).
    pub fn name(&self) -> String {
        let end = self.name.iter().position(|&b| b == 0).unwrap_or(RKNN_MAX_NAME_LEN);
        String::from_utf8_lossy(&self.name[..end]).into_owned()
    }

    /// The valid dimensions (`dims[..n_dims]`, at most [`RKNN_MAX_DIMS`]).
    pub fn shape(&self) -> &[u32] {
        &self.dims[..(self.n_dims as usize).min(RKNN_MAX_DIMS)]
    }

    /// One line for logs: `images NHWC [1,416,416,3] UINT8 zp -128 scale 1 w_stride 416 (519168 bytes with stride)`.
    pub fn describe(&self) -> String {
        let dims: Vec<String> = self.shape().iter().map(|d| d.to_string()).collect();
        format!(
            "{} {} [{}] {} zp {} scale {} w_stride {} ({} bytes, {} with stride)",
            self.name(),
            format_name(self.fmt),
            dims.join(","),
            type_name(self.type_),
            self.zp,
            self.scale,
            self.w_stride,
            self.size,
            self.size_with_stride
        )
    }
}

impl fmt::Debug for RknnTensorAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// `rknn_sdk_version` (512 bytes): the answer to `RKNN_QUERY_SDK_VERSION`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RknnSdkVersion {
    /// librknnrt's version, NUL-terminated (e.g. `2.3.2 (429f97ae6b@2025-04-09T09:09:27)`).
    pub api_version: [u8; 256],
    /// The NPU kernel driver's version, NUL-terminated (e.g. `0.9.8`).
    pub drv_version: [u8; 256],
}

impl Default for RknnSdkVersion {
    fn default() -> Self {
        RknnSdkVersion { api_version: [0; 256], drv_version: [0; 256] }
    }
}

/// A NUL-terminated byte array as text (lossy UTF-8, up to the first NUL).
pub fn c_text(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// `rknn_tensor_mem` (40 bytes on LP64): memory the NPU can address, made by
/// `rknn_create_mem_from_fd` (owned by the runtime; freed with `rknn_destroy_mem`).
#[repr(C)]
#[derive(Debug)]
pub struct RknnTensorMem {
    /// CPU address, or null when the caller gave none.
    pub virt_addr: *mut c_void,
    /// Physical address (0 when unknown).
    pub phys_addr: u64,
    /// The dma-buf fd.
    pub fd: i32,
    /// Offset of the tensor in the buffer, bytes.
    pub offset: i32,
    /// Size in bytes.
    pub size: u32,
    /// `RKNN_TENSOR_MEMORY_FLAGS_*`.
    pub flags: u32,
    /// The runtime's private data.
    pub priv_data: *mut c_void,
}

/// `rknn_input` (32 bytes on LP64): one input for `rknn_inputs_set` (the copying path).
#[repr(C)]
#[derive(Debug)]
pub struct RknnInput {
    /// Input index.
    pub index: u32,
    /// The data.
    pub buf: *mut c_void,
    /// Bytes at `buf`.
    pub size: u32,
    /// 1: no conversion; 0: convert from `type_`/`fmt`.
    pub pass_through: u8,
    /// `rknn_tensor_type` of `buf`.
    pub type_: u32,
    /// `rknn_tensor_format` of `buf`.
    pub fmt: u32,
}

/// `rknn_output` (24 bytes on LP64): one output for `rknn_outputs_get`.
#[repr(C)]
#[derive(Debug)]
pub struct RknnOutput {
    /// 1: convert to float32; 0: the output attr's own type.
    pub want_float: u8,
    /// 1: `buf`/`size` are ours; 0: the runtime allocates (freed by `rknn_outputs_release`).
    pub is_prealloc: u8,
    /// Output index.
    pub index: u32,
    /// The data.
    pub buf: *mut c_void,
    /// Bytes at `buf`.
    pub size: u32,
}

type InitFn = unsafe extern "C" fn(*mut RknnContext, *mut c_void, u32, u32, *mut c_void) -> c_int;
type DupFn = unsafe extern "C" fn(*mut RknnContext, *mut RknnContext) -> c_int;
type DestroyFn = unsafe extern "C" fn(RknnContext) -> c_int;
type QueryFn = unsafe extern "C" fn(RknnContext, u32, *mut c_void, u32) -> c_int;
type InputsSetFn = unsafe extern "C" fn(RknnContext, u32, *mut RknnInput) -> c_int;
type CoreMaskFn = unsafe extern "C" fn(RknnContext, u32) -> c_int;
type RunFn = unsafe extern "C" fn(RknnContext, *mut c_void) -> c_int;
type OutputsGetFn = unsafe extern "C" fn(RknnContext, u32, *mut RknnOutput, *mut c_void) -> c_int;
type OutputsReleaseFn = unsafe extern "C" fn(RknnContext, u32, *mut RknnOutput) -> c_int;
type MemFromFdFn = unsafe extern "C" fn(RknnContext, i32, *mut c_void, u32, i32) -> *mut RknnTensorMem;
type DestroyMemFn = unsafe extern "C" fn(RknnContext, *mut RknnTensorMem) -> c_int;
type SetIoMemFn = unsafe extern "C" fn(RknnContext, *mut RknnTensorMem, *mut RknnTensorAttr) -> c_int;

/// A failed RKNN call: the function and its error code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RknnError {
    /// The function (`rknn_init`, ...).
    pub call: &'static str,
    /// The code it returned (`RKNN_ERR_*`; -1 for a null pointer from `rknn_create_mem_*`).
    pub code: c_int,
}

impl fmt::Display for RknnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {} ({})", self.call, error_name(self.code), self.code)
    }
}

impl std::error::Error for RknnError {}

fn check(call: &'static str, code: c_int) -> Result<(), RknnError> {
    if code == RKNN_SUCC {
        Ok(())
    } else {
        Err(RknnError { call, code })
    }
}

/// The environment variable naming the runtime library to open instead of `librknnrt.so`.
pub const LIBRKNNRT_ENV: &str = "ZCPIPE_LIBRKNNRT";

/// The name tried through the loader's search path without [`LIBRKNNRT_ENV`].
pub const LIBRKNNRT_NAME: &str = "librknnrt.so";

/// The opened runtime: the library and the 12 functions zcpipe calls.
///
/// Every method is a direct call of the C function of the same name; the library stays
/// loaded as long as this value lives (keep it in an `Arc` next to every context made with
/// it, and destroy the contexts first).
pub struct Rknn {
    path: String,
    init: InitFn,
    dup_context: DupFn,
    destroy: DestroyFn,
    query: QueryFn,
    inputs_set: InputsSetFn,
    set_core_mask: CoreMaskFn,
    run: RunFn,
    outputs_get: OutputsGetFn,
    outputs_release: OutputsReleaseFn,
    create_mem_from_fd: MemFromFdFn,
    destroy_mem: DestroyMemFn,
    set_io_mem: SetIoMemFn,
    // Last: the function pointers above are only valid while it is loaded.
    _lib: libloading::Library,
}

impl fmt::Debug for Rknn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rknn").field("path", &self.path).finish()
    }
}

impl Rknn {
    /// Opens `$ZCPIPE_LIBRKNNRT`, or `librknnrt.so` through the loader's search path.
    /// The error is one line naming what was tried and the fix.
    pub fn open() -> Result<Rknn> {
        match std::env::var_os(LIBRKNNRT_ENV).filter(|v| !v.is_empty()) {
            Some(p) => Self::open_path(p, true),
            None => Self::open_path(OsString::from(LIBRKNNRT_NAME), false),
        }
    }

    /// Opens the library at `path` (a bare file name goes through the loader's search path).
    /// `from_env` only changes the wording of the error.
    pub fn open_path(path: OsString, from_env: bool) -> Result<Rknn> {
        let shown = PathBuf::from(&path).display().to_string();
        // SAFETY: loading a shared library runs its initialisers; librknnrt's (and the
        // fake's) are plain C/Rust static constructors with no preconditions on us.
        let lib = unsafe { libloading::Library::new(&path) }.map_err(|e| {
            let why = e.to_string().replace('\n', " ");
            if from_env {
                anyhow!("cannot load the RKNN runtime {shown} named by {LIBRKNNRT_ENV} ({why}): point {LIBRKNNRT_ENV} at a librknnrt.so (RKNPU2 runtime 2.x) or unset it")
            } else {
                anyhow!("cannot load the RKNN runtime librknnrt.so ({why}): install Rockchip's RKNPU2 runtime 2.x (librknnrt.so into /usr/lib) or set {LIBRKNNRT_ENV}=/path/to/librknnrt.so; or run on the CPU with --infer onnx --model models/yolox_nano.onnx")
            }
        })?;
        macro_rules! sym {
            ($name:literal, $t:ty) => {{
                // SAFETY: the symbol is the C function of this name in rknn_api.h, whose
                // prototype `$t` transcribes; the pointer is copied out of the `Symbol` and
                // used only while `_lib` (stored in the same struct, dropped last) is loaded.
                let s: libloading::Symbol<'_, $t> = unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|e| anyhow!("{shown} has no {} ({e}): it is not librknnrt.so 2.x; install the RKNPU2 runtime 2.x or fix {LIBRKNNRT_ENV}", $name))?;
                *s
            }};
        }
        Ok(Rknn {
            init: sym!("rknn_init", InitFn),
            dup_context: sym!("rknn_dup_context", DupFn),
            destroy: sym!("rknn_destroy", DestroyFn),
            query: sym!("rknn_query", QueryFn),
            inputs_set: sym!("rknn_inputs_set", InputsSetFn),
            set_core_mask: sym!("rknn_set_core_mask", CoreMaskFn),
            run: sym!("rknn_run", RunFn),
            outputs_get: sym!("rknn_outputs_get", OutputsGetFn),
            outputs_release: sym!("rknn_outputs_release", OutputsReleaseFn),
            create_mem_from_fd: sym!("rknn_create_mem_from_fd", MemFromFdFn),
            destroy_mem: sym!("rknn_destroy_mem", DestroyMemFn),
            set_io_mem: sym!("rknn_set_io_mem", SetIoMemFn),
            path: shown,
            _lib: lib,
        })
    }

    /// The path or name the library was opened from.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// `rknn_init(&ctx, model, size, flag, NULL)`: loads a model from memory (`size > 0`).
    /// The runtime may keep reading `model` until `rknn_destroy`: the caller keeps it mapped.
    pub fn init(&self, model: &[u8], flag: u32) -> Result<RknnContext, RknnError> {
        let size =
            u32::try_from(model.len()).map_err(|_| RknnError { call: "rknn_init", code: RKNN_ERR_MODEL_INVALID })?;
        let mut ctx: RknnContext = 0;
        // SAFETY: `ctx` is a valid out-pointer; `model` is `size` readable bytes (the runtime
        // takes `void *` but does not write the model); a null extend is allowed.
        let r = unsafe { (self.init)(&mut ctx, model.as_ptr() as *mut c_void, size, flag, std::ptr::null_mut()) };
        check("rknn_init", r).map(|_| ctx)
    }

    /// `rknn_dup_context(&ctx, &out)`: a second context sharing `ctx`'s weights.
    pub fn dup_context(&self, ctx: RknnContext) -> Result<RknnContext, RknnError> {
        let (mut inp, mut out) = (ctx, 0 as RknnContext);
        // SAFETY: both pointers are valid for one rknn_context.
        let r = unsafe { (self.dup_context)(&mut inp, &mut out) };
        check("rknn_dup_context", r).map(|_| out)
    }

    /// `rknn_destroy(ctx)`.
    pub fn destroy(&self, ctx: RknnContext) -> Result<(), RknnError> {
        // SAFETY: plain value argument; the caller does not use `ctx` afterwards.
        check("rknn_destroy", unsafe { (self.destroy)(ctx) })
    }

    /// `rknn_query(ctx, cmd, &info, sizeof info)` for a query whose answer is `T`
    /// ([`RknnInputOutputNum`], [`RknnTensorAttr`] with `index` set, [`RknnSdkVersion`]).
    pub fn query<T: QueryInfo>(&self, ctx: RknnContext, cmd: u32, info: &mut T) -> Result<(), RknnError> {
        // SAFETY: `info` is a valid, writable `T`, a `#[repr(C)]` struct of the header whose
        // size we pass; `QueryInfo` is only implemented for the structs these commands fill.
        let r = unsafe { (self.query)(ctx, cmd, info as *mut T as *mut c_void, std::mem::size_of::<T>() as u32) };
        check("rknn_query", r)
    }

    /// `rknn_inputs_set(ctx, 1, &input)` for input `index` from `data` (the copying path).
    pub fn inputs_set(&self, ctx: RknnContext, index: u32, data: &[u8], type_: u32, fmt: u32) -> Result<(), RknnError> {
        let size = u32::try_from(data.len())
            .map_err(|_| RknnError { call: "rknn_inputs_set", code: RKNN_ERR_PARAM_INVALID })?;
        let mut input = RknnInput { index, buf: data.as_ptr() as *mut c_void, size, pass_through: 0, type_, fmt };
        // SAFETY: one valid `rknn_input` whose `buf` points at `size` readable bytes; the
        // runtime copies the input before returning (rknn_api.h: inputs are set, then run).
        check("rknn_inputs_set", unsafe { (self.inputs_set)(ctx, 1, &mut input) })
    }

    /// `rknn_set_core_mask(ctx, mask)` (`RKNN_NPU_CORE_*`).
    pub fn set_core_mask(&self, ctx: RknnContext, mask: u32) -> Result<(), RknnError> {
        // SAFETY: value arguments only.
        check("rknn_set_core_mask", unsafe { (self.set_core_mask)(ctx, mask) })
    }

    /// `rknn_run(ctx, NULL)`: runs once, blocking.
    pub fn run(&self, ctx: RknnContext) -> Result<(), RknnError> {
        // SAFETY: a null extend is allowed.
        check("rknn_run", unsafe { (self.run)(ctx, std::ptr::null_mut()) })
    }

    /// `rknn_outputs_get(ctx, 1, &out, NULL)` into our own buffer (`is_prealloc = 1`), in
    /// the output's own type (`want_float = 0`), then `rknn_outputs_release`. Returns the
    /// bytes the runtime says it wrote (at most `buf.len()`).
    pub fn output_into(&self, ctx: RknnContext, index: u32, buf: &mut [u8]) -> Result<usize, RknnError> {
        let size = u32::try_from(buf.len())
            .map_err(|_| RknnError { call: "rknn_outputs_get", code: RKNN_ERR_PARAM_INVALID })?;
        let mut out = RknnOutput { want_float: 0, is_prealloc: 1, index, buf: buf.as_mut_ptr() as *mut c_void, size };
        // SAFETY: one valid `rknn_output` pointing at `size` writable bytes we own; a null
        // extend is allowed.
        check("rknn_outputs_get", unsafe { (self.outputs_get)(ctx, 1, &mut out, std::ptr::null_mut()) })?;
        let written = (out.size as usize).min(buf.len());
        // SAFETY: the same output array rknn_outputs_get filled; with is_prealloc = 1 the
        // runtime frees nothing of ours.
        check("rknn_outputs_release", unsafe { (self.outputs_release)(ctx, 1, &mut out) })?;
        Ok(written)
    }

    /// Outputs `0 .. bufs.len()` in one `rknn_outputs_get(ctx, n, outs, NULL)`, each into
    /// its own buffer (`is_prealloc = 1`, `want_float = 0`), then `rknn_outputs_release`.
    /// Returns the bytes the runtime says it wrote into each (at most its length). With one
    /// buffer this is [`Rknn::output_into`] of output 0.
    pub fn outputs_into(&self, ctx: RknnContext, bufs: &mut [&mut [u8]]) -> Result<Vec<usize>, RknnError> {
        let invalid = RknnError { call: "rknn_outputs_get", code: RKNN_ERR_PARAM_INVALID };
        if let [buf] = bufs {
            return self.output_into(ctx, 0, buf).map(|n| vec![n]);
        }
        let n = u32::try_from(bufs.len()).map_err(|_| invalid)?;
        let mut outs = bufs
            .iter_mut()
            .enumerate()
            .map(|(i, b)| {
                let size = u32::try_from(b.len()).map_err(|_| invalid)?;
                Ok(RknnOutput {
                    want_float: 0,
                    is_prealloc: 1,
                    index: i as u32,
                    buf: b.as_mut_ptr() as *mut c_void,
                    size,
                })
            })
            .collect::<Result<Vec<_>, RknnError>>()?;
        // SAFETY: `n` valid `rknn_output`s, each pointing at `size` writable bytes of a
        // buffer we own and hold borrowed for the call; a null extend is allowed.
        check("rknn_outputs_get", unsafe { (self.outputs_get)(ctx, n, outs.as_mut_ptr(), std::ptr::null_mut()) })?;
        let written = outs.iter().zip(bufs.iter()).map(|(o, b)| (o.size as usize).min(b.len())).collect();
        // SAFETY: the same output array rknn_outputs_get filled; with is_prealloc = 1 the
        // runtime frees nothing of ours.
        check("rknn_outputs_release", unsafe { (self.outputs_release)(ctx, n, outs.as_mut_ptr()) })?;
        Ok(written)
    }

    /// `rknn_create_mem_from_fd(ctx, fd, NULL, size, offset)`: imports `size` bytes at
    /// `offset` of a dma-buf. The runtime keeps its own reference to the buffer; the
    /// caller keeps `fd` open until [`Rknn::destroy_mem`] anyway.
    pub fn create_mem_from_fd(
        &self,
        ctx: RknnContext,
        fd: i32,
        size: u32,
        offset: i32,
    ) -> Result<*mut RknnTensorMem, RknnError> {
        // SAFETY: value arguments; a null virt_addr means "no CPU mapping" (rknn_api.h).
        let mem = unsafe { (self.create_mem_from_fd)(ctx, fd, std::ptr::null_mut(), size, offset) };
        if mem.is_null() {
            Err(RknnError { call: "rknn_create_mem_from_fd", code: RKNN_ERR_FAIL })
        } else {
            Ok(mem)
        }
    }

    /// `rknn_destroy_mem(ctx, mem)`.
    ///
    /// # Safety
    /// `mem` came from [`Rknn::create_mem_from_fd`] on `ctx` and is not used afterwards.
    pub unsafe fn destroy_mem(&self, ctx: RknnContext, mem: *mut RknnTensorMem) -> Result<(), RknnError> {
        // SAFETY: the caller's contract.
        check("rknn_destroy_mem", unsafe { (self.destroy_mem)(ctx, mem) })
    }

    /// `rknn_set_io_mem(ctx, mem, &attr)`: binds `mem` to the tensor `attr` describes
    /// (`attr.index`; for an input, `type_`, `fmt` and `pass_through` say how to read it).
    ///
    /// # Safety
    /// `mem` came from [`Rknn::create_mem_from_fd`] on `ctx` and is not destroyed yet.
    pub unsafe fn set_io_mem(
        &self,
        ctx: RknnContext,
        mem: *mut RknnTensorMem,
        attr: &mut RknnTensorAttr,
    ) -> Result<(), RknnError> {
        // SAFETY: the caller's contract for `mem`; `attr` is a valid rknn_tensor_attr.
        check("rknn_set_io_mem", unsafe { (self.set_io_mem)(ctx, mem, attr) })
    }
}

/// Structs `rknn_query` fills: only these may be passed to [`Rknn::query`].
pub trait QueryInfo: Sized {}
impl QueryInfo for RknnInputOutputNum {}
impl QueryInfo for RknnTensorAttr {}
impl QueryInfo for RknnSdkVersion {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    // Expected values worked out from rknn_api.h for LP64 (x86_64, aarch64): u32/enum/int/
    // float are 4 bytes aligned 4, pointers and u64 8 aligned 8, int8/uint8/char 1.

    #[test]
    fn input_output_num_layout() {
        assert_eq!(size_of::<RknnInputOutputNum>(), 8);
        assert_eq!(offset_of!(RknnInputOutputNum, n_input), 0);
        assert_eq!(offset_of!(RknnInputOutputNum, n_output), 4);
    }

    #[test]
    fn tensor_attr_layout() {
        // index 0, n_dims 4, dims 8 (16 x 4 = 64 bytes), name 72 (256), n_elems 328, size 332,
        // fmt 336, type 340, qnt_type 344, fl 348 (int8), zp 352 (int32 aligned up from 349),
        // scale 356, w_stride 360, size_with_stride 364, pass_through 368 (uint8),
        // h_stride 372 (aligned up from 369); 376 bytes, aligned 4.
        assert_eq!(size_of::<RknnTensorAttr>(), 376);
        assert_eq!(align_of::<RknnTensorAttr>(), 4);
        let o = [
            offset_of!(RknnTensorAttr, index),
            offset_of!(RknnTensorAttr, n_dims),
            offset_of!(RknnTensorAttr, dims),
            offset_of!(RknnTensorAttr, name),
            offset_of!(RknnTensorAttr, n_elems),
            offset_of!(RknnTensorAttr, size),
            offset_of!(RknnTensorAttr, fmt),
            offset_of!(RknnTensorAttr, type_),
            offset_of!(RknnTensorAttr, qnt_type),
            offset_of!(RknnTensorAttr, fl),
            offset_of!(RknnTensorAttr, zp),
            offset_of!(RknnTensorAttr, scale),
            offset_of!(RknnTensorAttr, w_stride),
            offset_of!(RknnTensorAttr, size_with_stride),
            offset_of!(RknnTensorAttr, pass_through),
            offset_of!(RknnTensorAttr, h_stride),
        ];
        assert_eq!(o, [0, 4, 8, 72, 328, 332, 336, 340, 344, 348, 352, 356, 360, 364, 368, 372]);
    }

    #[test]
    fn sdk_version_layout() {
        assert_eq!(size_of::<RknnSdkVersion>(), 512);
        assert_eq!(offset_of!(RknnSdkVersion, api_version), 0);
        assert_eq!(offset_of!(RknnSdkVersion, drv_version), 256);
    }

    #[test]
    fn tensor_mem_layout() {
        // virt_addr 0 (pointer), phys_addr 8, fd 16, offset 20, size 24, flags 28,
        // priv_data 32 (pointer); 40 bytes, aligned 8.
        assert_eq!(size_of::<RknnTensorMem>(), 40);
        assert_eq!(align_of::<RknnTensorMem>(), 8);
        let o = [
            offset_of!(RknnTensorMem, virt_addr),
            offset_of!(RknnTensorMem, phys_addr),
            offset_of!(RknnTensorMem, fd),
            offset_of!(RknnTensorMem, offset),
            offset_of!(RknnTensorMem, size),
            offset_of!(RknnTensorMem, flags),
            offset_of!(RknnTensorMem, priv_data),
        ];
        assert_eq!(o, [0, 8, 16, 20, 24, 28, 32]);
    }

    #[test]
    fn input_layout() {
        // index 0, buf 8 (pointer aligned up from 4), size 16, pass_through 20, type 24
        // (aligned up from 21), fmt 28; 32 bytes.
        assert_eq!(size_of::<RknnInput>(), 32);
        let o = [
            offset_of!(RknnInput, index),
            offset_of!(RknnInput, buf),
            offset_of!(RknnInput, size),
            offset_of!(RknnInput, pass_through),
            offset_of!(RknnInput, type_),
            offset_of!(RknnInput, fmt),
        ];
        assert_eq!(o, [0, 8, 16, 20, 24, 28]);
    }

    #[test]
    fn output_layout() {
        // want_float 0, is_prealloc 1, index 4, buf 8, size 16; 24 bytes (tail padding to 8).
        assert_eq!(size_of::<RknnOutput>(), 24);
        let o = [
            offset_of!(RknnOutput, want_float),
            offset_of!(RknnOutput, is_prealloc),
            offset_of!(RknnOutput, index),
            offset_of!(RknnOutput, buf),
            offset_of!(RknnOutput, size),
        ];
        assert_eq!(o, [0, 1, 4, 8, 16]);
    }

    #[test]
    fn context_is_64_bit_on_lp64() {
        assert_eq!(size_of::<RknnContext>(), if cfg!(target_arch = "arm") { 4 } else { 8 });
    }

    #[test]
    fn enum_values_match_the_header() {
        assert_eq!(
            [
                RKNN_QUERY_IN_OUT_NUM,
                RKNN_QUERY_INPUT_ATTR,
                RKNN_QUERY_OUTPUT_ATTR,
                RKNN_QUERY_SDK_VERSION,
                RKNN_QUERY_NATIVE_INPUT_ATTR,
                RKNN_QUERY_NATIVE_OUTPUT_ATTR,
                RKNN_QUERY_NATIVE_NHWC_INPUT_ATTR
            ],
            [0, 1, 2, 5, 8, 9, 10]
        );
        assert_eq!(
            [RKNN_TENSOR_FLOAT32, RKNN_TENSOR_FLOAT16, RKNN_TENSOR_INT8, RKNN_TENSOR_UINT8, RKNN_TENSOR_BFLOAT16],
            [0, 1, 2, 3, 11]
        );
        assert_eq!([RKNN_TENSOR_NCHW, RKNN_TENSOR_NHWC, RKNN_TENSOR_NC1HWC2, RKNN_TENSOR_UNDEFINED], [0, 1, 2, 3]);
        assert_eq!([RKNN_TENSOR_QNT_NONE, RKNN_TENSOR_QNT_DFP, RKNN_TENSOR_QNT_AFFINE_ASYMMETRIC], [0, 1, 2]);
        assert_eq!(
            [
                RKNN_NPU_CORE_AUTO,
                RKNN_NPU_CORE_0,
                RKNN_NPU_CORE_1,
                RKNN_NPU_CORE_2,
                RKNN_NPU_CORE_0_1,
                RKNN_NPU_CORE_0_1_2,
                RKNN_NPU_CORE_ALL
            ],
            [0, 1, 2, 4, 3, 7, 0xffff]
        );
    }

    #[test]
    fn error_codes_have_names() {
        assert_eq!(error_name(-6), "RKNN_ERR_MODEL_INVALID");
        assert_eq!(error_name(-13), "RKNN_ERR_TARGET_PLATFORM_UNMATCH");
        assert_eq!(error_name(0), "RKNN_SUCC");
        assert_eq!(error_name(-99), "unknown RKNN error");
        assert_eq!(RKNN_ERRORS.len(), 13);
        for (i, (code, _)) in RKNN_ERRORS.iter().enumerate() {
            assert_eq!(*code, -(i as c_int) - 1);
        }
        let e = RknnError { call: "rknn_init", code: -6 };
        assert_eq!(e.to_string(), "rknn_init failed: RKNN_ERR_MODEL_INVALID (-6)");
    }

    #[test]
    fn missing_library_names_the_env_var_and_the_fix() {
        let e = Rknn::open_path("/nonexistent/librknnrt.so".into(), true).unwrap_err().to_string();
        assert!(e.contains("ZCPIPE_LIBRKNNRT") && e.contains("/nonexistent/librknnrt.so"), "{e}");
        assert!(!e.contains('\n'), "{e}");
        let e = Rknn::open_path("librknnrt-not-here.so".into(), false).unwrap_err().to_string();
        assert!(e.contains("librknnrt.so") && e.contains("ZCPIPE_LIBRKNNRT=") && e.contains("--infer onnx"), "{e}");
    }
}

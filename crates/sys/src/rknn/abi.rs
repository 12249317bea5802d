//! `rknn_api.h` as zcpipe binds it: the context type, error codes, query commands, tensor
//! types, formats and core masks, and the C structs (`rknn_tensor_attr`, `rknn_tensor_mem`,
//! `rknn_input`, `rknn_output`, ...).

use std::ffi::{c_int, c_void};
use std::fmt;

/// `rknn_context`: `uint64_t`, except `uint32_t` on 32-bit ARM (`#ifdef __arm__`).
#[cfg(target_arch = "arm")]
pub type RknnContext = u32;
/// `rknn_context`: `uint64_t`, except `uint32_t` on 32-bit ARM (`#ifdef __arm__`).
#[cfg(not(target_arch = "arm"))]
pub type RknnContext = u64;

/// `RKNN_MAX_DIMS`: dimensions in [`RknnTensorAttr::dims`].
pub(crate) const RKNN_MAX_DIMS: usize = 16;
/// `RKNN_MAX_NAME_LEN`: bytes in [`RknnTensorAttr::name`], NUL included.
pub const RKNN_MAX_NAME_LEN: usize = 256;

/// `RKNN_SUCC`: success.
pub const RKNN_SUCC: c_int = 0;

/// Every error code `rknn_api.h` defines, with its macro name.
pub(crate) const RKNN_ERRORS: &[(c_int, &str)] = &[
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
pub(crate) fn error_name(code: c_int) -> &'static str {
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
pub(crate) const RKNN_TENSOR_INT16: u32 = 4;
/// `RKNN_TENSOR_UINT16`.
pub(crate) const RKNN_TENSOR_UINT16: u32 = 5;
/// `RKNN_TENSOR_INT32`.
pub(crate) const RKNN_TENSOR_INT32: u32 = 6;
/// `RKNN_TENSOR_UINT32`.
pub(crate) const RKNN_TENSOR_UINT32: u32 = 7;
/// `RKNN_TENSOR_INT64`.
pub const RKNN_TENSOR_INT64: u32 = 8;
/// `RKNN_TENSOR_BOOL`.
pub(crate) const RKNN_TENSOR_BOOL: u32 = 9;
/// `RKNN_TENSOR_INT4` (2.x).
pub(crate) const RKNN_TENSOR_INT4: u32 = 10;
/// `RKNN_TENSOR_BFLOAT16` (2.x).
pub(crate) const RKNN_TENSOR_BFLOAT16: u32 = 11;

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
pub(crate) struct RknnInput {
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
pub(crate) struct RknnOutput {
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

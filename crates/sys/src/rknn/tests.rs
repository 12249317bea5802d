//! Layout tests of the bound structs against `rknn_api.h` (LP64), header values, error
//! names and the missing-library error.

use super::*;
use std::ffi::c_int;

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

//! `rknn_query`: the in/out counts, tensor attributes (plain and native), the SDK version.

use std::ffi::{c_int, c_void};

use super::*;

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

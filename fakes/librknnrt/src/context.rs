//! Contexts: `rknn_init`, `rknn_dup_context` and `rknn_destroy`.

use std::ffi::{c_int, c_void};

use super::*;

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
        let run_us = match timing::run_us() {
            Ok(us) => us.map(|us| format!(" run_us={us}")).unwrap_or_default(),
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
            Context {
                model_len: size as usize,
                net,
                out_type,
                w_stride,
                core_mask: 0,
                input: InputSrc::None,
                output: None,
            },
        );
        // SAFETY: checked non-null; the caller's out-pointer.
        unsafe { *context = id };
        log(format!("rknn_init ctx={id} model_len={size} flag={flag} output={out_type:?} w_stride={w_stride} input={input} outputs={outputs} platform=rk3588{run_us}"));
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
            core_mask: 0,
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

//! Outputs: encoding a network output in its native or float type, `rknn_outputs_get` and
//! `rknn_outputs_release`.

use std::ffi::{c_int, c_void};

use super::*;

/// An output in its native type `t` (little-endian; int8 quantised with `o`'s scale and zero
/// point, rounding half to even like numpy), or as float32 when `want_float`.
pub(super) fn encode(values: &[f32], t: OutType, o: &NetOutput, want_float: bool) -> Vec<u8> {
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

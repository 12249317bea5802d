//! The network behind every context: the ONNX model named by the RKNN model's bytes, loaded
//! and planned with tract once per path, its input size and output quantisation.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use tract_onnx::prelude::*;
use tract_onnx::tract_hir::infer::Factoid;

use super::*;

pub(super) fn w_stride_from_env(w: usize) -> Result<usize, String> {
    match std::env::var("ZCPIPE_FAKE_RKNN_W_STRIDE") {
        Err(_) => Ok(w),
        Ok(v) => match v.parse::<usize>() {
            Ok(s) if s >= w => Ok(s),
            _ => Err(format!("ZCPIPE_FAKE_RKNN_W_STRIDE={v}: use a number of pixels >= {w} (the model's width)")),
        },
    }
}

pub(super) type Plan = Arc<TypedRunnableModel>;

/// The models loaded so far in this process (or why one could not be), by path.
type Nets = HashMap<PathBuf, Result<Arc<Net>, String>>;

/// The ONNX model `ZCPIPE_FAKE_RKNN_ONNX` names, loaded once per process and path.
pub(super) fn net() -> Result<Arc<Net>, String> {
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

//! The `.rknn` file and what every context of it shares: the model-file checks (an RKNN
//! header, rknn-toolkit2's `"target_platform"` trailer, a SoC this board is), the input
//! binding, outputs and decoder fixed at start-up ([`Model`]), and the outputs' description
//! for the heads ([`output_info`]).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use memmap2::Mmap;

use crate::heads::{Decoder, Dtype, OutputInfo, Quant};
use crate::InputSpec;
use zcpipe_core::frame::FrameLayout;
use zcpipe_sys::rknn::{self as sys, RknnTensorAttr};

pub use zcpipe_sys::board::compatible_socs;

/// Describes one output from its `rknn_tensor_attr` (`RKNN_QUERY_OUTPUT_ATTR`) for the heads:
/// name, shape (a 4-D `fmt = NHWC` output keeps its logical `[1, C, H, W]` and is marked
/// channels-last), element type and quantisation: float32, float16, int8/uint8 affine
/// (`(q - zp) * scale`), DFP (`q / 2^fl`: zero point 0, scale `2^-fl`) or unquantised.
/// Errors name the type or a scale that is not a positive number.
pub fn output_info(a: &RknnTensorAttr) -> Result<OutputInfo> {
    let quant = || -> Result<Quant> {
        match a.qnt_type {
            sys::RKNN_TENSOR_QNT_AFFINE_ASYMMETRIC => Quant { zp: a.zp, scale: a.scale }.check(),
            sys::RKNN_TENSOR_QNT_DFP => Ok(Quant { zp: 0, scale: 2f32.powi(-(a.fl as i32)) }),
            _ => Ok(Quant::IDENTITY),
        }
    };
    let dtype = match a.type_ {
        sys::RKNN_TENSOR_FLOAT32 => Dtype::F32,
        sys::RKNN_TENSOR_FLOAT16 => Dtype::F16,
        sys::RKNN_TENSOR_INT8 => Dtype::I8(quant().with_context(|| format!("output {}", a.name()))?),
        sys::RKNN_TENSOR_UINT8 => Dtype::U8(quant().with_context(|| format!("output {}", a.name()))?),
        t => {
            bail!("output {} type {} is not supported (float16, float32, int8, uint8 are)", a.name(), sys::type_name(t))
        }
    };
    let dims: Vec<usize> = a.shape().iter().map(|&d| d as usize).collect();
    Ok(match (a.fmt, dims.as_slice()) {
        (sys::RKNN_TENSOR_NHWC, &[n, h, w, c]) => {
            OutputInfo { channels_last: true, ..OutputInfo::new(a.name(), &[n, c, h, w], dtype) }
        }
        _ => OutputInfo::new(a.name(), &dims, dtype),
    })
}

/// The `"target_platform"` entries of a `.rknn` file (`["rk3588"]`): rknn-toolkit2 appends a
/// JSON description at the end of the file. Empty when none is found.
pub(crate) fn model_target_platforms(model: &[u8]) -> Vec<String> {
    const KEY: &[u8] = b"\"target_platform\":[";
    // The JSON is at the end; look at the last 1 MiB only.
    let tail = &model[model.len().saturating_sub(1 << 20)..];
    let Some(at) = tail.windows(KEY.len()).rposition(|w| w == KEY) else { return Vec::new() };
    let rest = &tail[at + KEY.len()..];
    let end = rest.iter().position(|&b| b == b']').unwrap_or(0).min(256);
    String::from_utf8_lossy(&rest[..end])
        .split(',')
        .map(|s| s.trim().trim_matches('"').to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect()
}

/// Whether a model built for `platform` runs on `soc`: the same name, or the same NPU
/// (RK3566/RK3568; RK3588/RK3588S; RV1103/RV1106).
pub(crate) fn platform_runs_on(platform: &str, soc: &str) -> bool {
    const SAME_NPU: &[&[&str]] = &[&["rk3566", "rk3568"], &["rk3588", "rk3588s"], &["rv1103", "rv1106"]];
    platform == soc || SAME_NPU.iter().any(|g| g.contains(&platform) && g.contains(&soc))
}

/// The shipped model for a SoC (relative to the data directory, `models/...`): what
/// `--infer auto` runs there, and what errors suggest.
pub(crate) fn shipped_model_for(soc: &str) -> Option<&'static str> {
    match soc {
        "rk3588" | "rk3588s" => Some("models/yolox_nano_416_rk3588.rknn"),
        "rk3566" | "rk3568" => Some("models/yolox_nano_416_rk3566_rk3568.rknn"),
        "rk3576" => Some("models/yolox_nano_416_rk3576.rknn"),
        _ => None,
    }
}

/// Refuses a model whose target platforms do not include this board's SoC. No compatible
/// file (hosts, containers without /proc/device-tree) skips the check.
fn check_platform(model: &Path, platforms: &[String]) -> Result<()> {
    let path = zcpipe_sys::board::path(zcpipe_sys::board::COMPATIBLE);
    let compatible = match std::fs::read(&path) {
        Ok(c) => c,
        Err(e) => {
            log::debug!("no device tree ({}: {e}): skipping the check of the model's target platform", path.display());
            return Ok(());
        }
    };
    let socs = compatible_socs(&compatible);
    if socs.is_empty() {
        log::warn!(
            "{} names no Rockchip SoC: cannot check that model {} fits this board",
            path.display(),
            model.display()
        );
        return Ok(());
    }
    if platforms.is_empty() {
        log::warn!("model {} names no target platform: cannot check it against {}", model.display(), socs.join(", "));
        return Ok(());
    }
    if platforms.iter().any(|p| socs.iter().any(|s| platform_runs_on(p, s))) {
        return Ok(());
    }
    let fix = match socs.iter().find_map(|s| shipped_model_for(s)) {
        Some(m) => format!("use {m}, or convert the ONNX model with rknn-toolkit2 target_platform='{}'", socs[0]),
        None => format!("convert the ONNX model with rknn-toolkit2 target_platform='{}'", socs[0]),
    };
    bail!(
        "model {} is built for {} but this board is {} ({}): {fix}",
        model.display(),
        platforms.join("/"),
        socs.join("/"),
        path.display()
    )
}

/// What every context of one model shares, fixed at start-up: the input binding, the
/// outputs' sizes and the decoder (head, thresholds, NaN count). Read-only once the detector
/// is open (the decoder's count is atomic), so lanes on other threads borrow it.
pub(super) struct Model {
    /// The native input attribute, rewritten to uint8 NHWC with the native `w_stride`
    /// (`RKNN_QUERY_NATIVE_INPUT_ATTR`), as passed to `rknn_set_io_mem`.
    pub(super) input_attr: RknnTensorAttr,
    /// Bytes of each output in its own type (elements x element size), in output order.
    pub(super) output_bytes: Vec<usize>,
    /// The head for the outputs, with the thresholds.
    pub(super) decoder: Decoder,
    pub(super) spec: InputSpec,
    pub(super) path: PathBuf,
}

impl Model {
    /// Checks that a frame bound in place has the layout the NPU reads: the model's fourcc
    /// and size, rows of exactly `w_stride * 3` bytes from offset 0.
    pub(super) fn check_bound_layout(&self, layout: &FrameLayout) -> Result<()> {
        let s = &self.spec;
        if layout.fourcc != s.fourcc || layout.width != s.width || layout.height != s.height {
            bail!(
                "infer input is {} {}x{} but the model `{}` wants {} {}x{}",
                layout.fourcc,
                layout.width,
                layout.height,
                s.name,
                s.fourcc,
                s.width,
                s.height
            );
        }
        let plane = layout.planes().first().context("infer input layout has no planes")?;
        if plane.offset != 0 || plane.bytesperline != s.bytesperline {
            bail!(
                "scaler frame has rows of {} bytes from offset {}, but the NPU reads rows of {} (w_stride {}) from offset 0: the scaler must honour the bytesperline the infer stage asks for",
                plane.bytesperline,
                plane.offset,
                s.bytesperline,
                self.input_attr.w_stride
            );
        }
        Ok(())
    }
}

/// Checks the `.rknn` file at `path` as [`map_model`] does (header, trailer, this board's
/// SoC) without keeping it: what `zcpipe run`'s plan checks before any stage starts.
pub(crate) fn check_model_file(path: &Path) -> Result<()> {
    map_model(path).map(|_| ())
}

/// Maps the `.rknn` file at `path` read-only and checks it before any library is loaded: the
/// `RKNN` header, rknn-toolkit2's `"target_platform"` trailer, and that this board's SoC is
/// one of those platforms ([`check_platform`]). Returns the mapping and the platforms.
pub(super) fn map_model(path: &Path) -> Result<(Mmap, Vec<String>)> {
    let file = std::fs::File::open(path).with_context(|| {
        format!(
            "cannot open RKNN model {}: pass --model with a .rknn file such as models/yolox_nano_416_rk3588.rknn",
            path.display()
        )
    })?;
    // SAFETY: a read-only private mapping of a model file zcpipe never writes; a file
    // truncated underneath by someone else would fault, as for any mapped input.
    let model = unsafe { Mmap::map(&file) }.with_context(|| format!("cannot map RKNN model {}", path.display()))?;
    if model.len() < 8 || &model[..4] != b"RKNN" {
        bail!(
            "{} is not an RKNN model (no RKNN header): convert the ONNX model with rknn-toolkit2 (models/PROVENANCE.md), or use --infer onnx for .onnx models",
            path.display()
        );
    }
    let platforms = model_target_platforms(&model);
    if platforms.is_empty() {
        // rknn-toolkit2 appends a JSON trailer naming the target platform to every model
        // it writes; a file without one was cut short or was not made by the toolkit.
        bail!(
            "RKNN model {} ({} bytes) has no rknn-toolkit2 metadata (no \"target_platform\" in its trailer): it is truncated \
             or not made by rknn-toolkit2; copy it again (sizes and sha256 in models/PROVENANCE.md) or rebuild it (make rknn-models)",
            path.display(),
            model.len()
        );
    }
    check_platform(path, &platforms)?;
    Ok((model, platforms))
}

//! `--infer auto`, `--model` left out and `--npu-cores auto`: the best detector this board
//! has, and why.
//!
//! With a model given, its extension decides (`.rknn`: rknn, `.onnx`: onnx). Without one,
//! RKNN runs when librknnrt loads and the data directory holds the bundled `.rknn` for the
//! SoC the device tree names (`models/yolox_nano_416_<soc>.rknn`,
//! [`shipped_model_for`]); else YOLOX-Nano in ONNX form on the CPU ([`DEFAULT_ONNX_MODEL`]).
//! NPU cores: every core the SoC has (three on RK3588, two on RK3576; on one-core SoCs one
//! context, as `rknn_set_core_mask` is refused there). The infer stage's options and
//! `zcpipe run`'s plan both call [`choose`], so a stage started alone decides as the plan said.

use std::path::{Path, PathBuf};

use std::io::Read as _;

use anyhow::{bail, Context as _, Result};

use zcpipe_core::data::{find_data_file, resolve_data_path};
use zcpipe_sys::board;
use zcpipe_sys::rknn::Rknn;

use super::rknn::{check_model_file, shipped_model_for};
use super::DetectorKind;

/// The model `--infer auto` runs on the CPU when no `--model` is given.
pub(crate) const DEFAULT_ONNX_MODEL: &str = "models/yolox_nano.onnx";

/// What [`choose`] picked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InferChoice {
    /// The backend (`Auto` only for a model whose extension names no backend: opening it
    /// then fails with the list of supported kinds).
    pub backend: DetectorKind,
    /// The model file, as given or as found (relative to the data directory for bundled ones).
    pub model: PathBuf,
    /// `rknn`: the NPU cores, one context each; empty: one context, the runtime's choice.
    pub npu_cores: Vec<u32>,
    /// One line: why this backend and model.
    pub reason: String,
    /// `rknn`: where it runs (`on NPU cores 0,1,2`, `on NPU core 0`, `on the runtime's choice
    /// of NPU core`); empty otherwise.
    pub cores_text: String,
    /// One line: why these NPU cores (empty unless rknn).
    pub cores_reason: String,
}

/// `on NPU cores 0,1,2`, `on NPU core 0`: for the plan.
fn cores_text(cores: &[u32]) -> String {
    match cores {
        [c] => format!("on NPU core {c}"),
        v => format!("on NPU cores {}", v.iter().map(u32::to_string).collect::<Vec<_>>().join(",")),
    }
}

/// Resolves `--infer`, `--model` (`None`: not given) and `--npu-cores` (`None`: auto) on this
/// board, and checks the model ([`check_model`]). Errors (one line, naming the fix): `--infer
/// rknn` with no model given where no bundled model fits; a model of no known kind; a model
/// that is missing, of the other backend's kind, or a `.rknn` for another SoC; an NPU core
/// the SoC does not have.
pub fn choose(backend: DetectorKind, model: Option<&Path>, npu_cores: Option<&[u32]>) -> Result<InferChoice> {
    let soc = board::socs().into_iter().next();
    let bundled = || soc.as_deref().and_then(shipped_model_for).filter(|m| find_data_file(m).is_some());
    let has_ext = |m: &Path, x: &str| m.extension().is_some_and(|e| e.eq_ignore_ascii_case(x));
    let (backend, model, reason) = match (backend, model) {
        (DetectorKind::Auto, Some(m)) if has_ext(m, "rknn") => (DetectorKind::Rknn, m.to_path_buf(), "the model is a .rknn".to_string()),
        (DetectorKind::Auto, Some(m)) if has_ext(m, "onnx") => (DetectorKind::Onnx, m.to_path_buf(), "the model is an .onnx".to_string()),
        (DetectorKind::Auto, Some(m)) => bail!(
            "--infer auto: no backend for model {} (.onnx and .rknn models are supported): pass a model such as models/yolox_nano.onnx, or use --infer none",
            m.display()
        ),
        (DetectorKind::Auto, None) => {
            let why_not = match (Rknn::open(), soc.as_deref(), bundled()) {
                (Ok(lib), Some(s), Some(m)) => {
                    let reason = format!("auto: {} loads and {m} fits {s} (device tree)", lib.path());
                    return with_cores(DetectorKind::Rknn, PathBuf::from(m), reason, npu_cores, soc.as_deref());
                }
                (Err(e), _, _) => {
                    log::debug!("infer auto: {e:#}");
                    "librknnrt.so does not load (`zcpipe doctor` says why)".to_string()
                }
                (Ok(_), None, _) => "librknnrt loads but the device tree names no Rockchip SoC".to_string(),
                (Ok(_), Some(s), None) => match shipped_model_for(s) {
                    Some(m) => format!("librknnrt loads but {m} for {s} is not in the data directory (copy models/ next to zcpipe)"),
                    None => format!("librknnrt loads but zcpipe bundles no .rknn model for {s} (pass --model X.rknn)"),
                },
            };
            (DetectorKind::Onnx, PathBuf::from(DEFAULT_ONNX_MODEL), format!("auto: {why_not}: YOLOX-Nano on the CPU (tract)"))
        }
        (DetectorKind::Rknn, None) => match bundled() {
            Some(m) => (DetectorKind::Rknn, PathBuf::from(m), format!("--infer rknn: {m} fits {} (device tree)", soc.as_deref().unwrap_or_default())),
            None => bail!(
                "--infer rknn needs a .rknn model: {}; pass --model X.rknn (converted with rknn-toolkit2 for this SoC)",
                match soc.as_deref() {
                    Some(s) => format!("zcpipe bundles none for {s}, or models/ is not next to zcpipe"),
                    None => "the device tree names no Rockchip SoC, so no bundled model fits".into(),
                }
            ),
        },
        (b, m) => (b, m.map_or_else(|| PathBuf::from(DEFAULT_ONNX_MODEL), Path::to_path_buf), format!("--infer {b}")),
    };
    check_model(backend, &model)?;
    with_cores(backend, model, reason, npu_cores, soc.as_deref())
}

/// Checks, before any stage starts, what would only fail once the stages run: the model
/// file exists, a `.rknn` for rknn has its header and fits this SoC
/// ([`check_model_file`]), an ONNX model for onnx is not an RKNN file.
fn check_model(backend: DetectorKind, model: &Path) -> Result<()> {
    let path = resolve_data_path(model);
    match backend {
        DetectorKind::Rknn => check_model_file(&path),
        DetectorKind::Onnx => {
            let mut head = [0u8; 4];
            let mut f = std::fs::File::open(&path).with_context(|| {
                format!(
                    "cannot open model {}: pass --model with an .onnx file such as models/yolox_nano.onnx",
                    path.display()
                )
            })?;
            if f.read(&mut head).is_ok_and(|n| n == 4) && &head == b"RKNN" {
                bail!("{} is an RKNN model, which the onnx backend cannot run: use --infer rknn (on a Rockchip board), or an .onnx model", path.display());
            }
            Ok(())
        }
        DetectorKind::Replay => super::replay::ReplayFile::load(&path).map(drop),
        _ => Ok(()),
    }
}

/// Adds the NPU cores: as listed (each must exist on `soc` when it is known), or (`None`,
/// auto) every core of `soc` for rknn.
fn with_cores(
    backend: DetectorKind,
    model: PathBuf,
    reason: String,
    npu_cores: Option<&[u32]>,
    soc: Option<&str>,
) -> Result<InferChoice> {
    let (npu_cores, cores_text, cores_reason) = match (backend, npu_cores) {
        (DetectorKind::Rknn, Some(list)) => {
            if let Some((s, info)) = soc.and_then(|s| Some((s, board::soc_info(s)?))) {
                if let Some(c) = list.iter().find(|&&c| c >= info.npu_cores) {
                    let have = (0..info.npu_cores).map(|c| c.to_string()).collect::<Vec<_>>().join(",");
                    bail!("--npu-cores: core {c} does not exist on {s}, which has {} NPU core(s) ({have}); leave --npu-cores out (auto: every core)", info.npu_cores);
                }
            }
            (list.to_vec(), cores_text(list), "--npu-cores".to_string())
        }
        (DetectorKind::Rknn, None) => match soc.and_then(|s| Some((s, board::soc_info(s)?))) {
            Some((s, info)) if info.npu_cores > 1 => {
                let all: Vec<u32> = (0..info.npu_cores).collect();
                let text = cores_text(&all);
                (all, text, format!("auto: every core of {s}, one context each (--npu-contexts-per-core more), a free context takes the next frame"))
            }
            Some((s, _)) => (Vec::new(), cores_text(&[0]), format!("auto: {s} has one NPU core")),
            None => (Vec::new(), "on the runtime's choice of NPU core".into(), "auto: SoC unknown".into()),
        },
        (_, list) => (list.map(<[u32]>::to_vec).unwrap_or_default(), String::new(), String::new()),
    };
    Ok(InferChoice { backend, model, npu_cores, cores_text, reason, cores_reason })
}

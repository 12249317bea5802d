//! `rknn` backend: a YOLOX `.rknn` model on Rockchip's NPU through `librknnrt.so` (RKNPU2
//! runtime 2.x, opened at run time: [`crate::sys::rknn`]).
//!
//! Start-up (once): the model file is memory-mapped read-only and handed to `rknn_init`; the
//! SDK api/driver versions (`RKNN_QUERY_SDK_VERSION`) and the model's target platform (the
//! `"target_platform"` list in the JSON the toolkit appends to a `.rknn` file) are logged; a
//! model built for another SoC than `/proc/device-tree/compatible` names is refused
//! (`$ZCPIPE_DT_COMPATIBLE` points the check at another file; no file, as on hosts, skips it).
//! The input is queried with `RKNN_QUERY_NATIVE_INPUT_ATTR` and bound as uint8 NHWC,
//! `pass_through = 0` (the runtime applies the model's zero point -128 / scale 1.0), so the
//! scaler must write rows of exactly `w_stride * 3` bytes: [`InputSpec::bytesperline`].
//!
//! Zero-copy: [`Detector::bind_pool`] imports each of the scaler's output dma-bufs once with
//! `rknn_create_mem_from_fd`; per frame [`Detector::detect_bound`] binds the current buffer
//! with `rknn_set_io_mem`, runs, and fetches the output with `rknn_outputs_get` (our own
//! buffer, `want_float = 0`) — the CPU never maps the frame. Outputs in float16, float32,
//! int8/uint8 (affine `(q - zp) * scale` or DFP `q / 2^fl`) are converted here
//! ([`output_to_f32`]) and decoded with [`yolox::postprocess`]. Without a bound pool
//! (`--copy-mode`), [`Detector::detect`] packs the rows and uses `rknn_inputs_set`.
//!
//! `--npu-cores 0,1,2`: one context per core (`rknn_dup_context` shares the weights, then
//! `rknn_set_core_mask` pins it; a single context on a multi-core mask barely helps a model
//! this small). Every context gets the scaler's buffers imported and its own output buffers,
//! and [`Detector::lanes`] lends each context to the infer stage as a lane, which runs on a
//! thread of its own: frames are dispatched round-robin and the contexts run at the same
//! time, one frame each, results re-ordered by frame sequence ([`crate::infer::stage`]). A
//! refused duplicate or mask is a warning and one context with the runtime's own core
//! choice (no lanes: frames run on the stage's thread). Called directly,
//! [`Detector::detect_bound`] and [`Detector::detect`] also go round-robin, one frame at a
//! time. On drop every mem is released with `rknn_destroy_mem`, then the duplicated
//! contexts and last the original with `rknn_destroy` (the lanes borrow the detector, so
//! they are gone by then).

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, ensure, Context, Result};
use memmap2::Mmap;

use super::{yolox, Detection, Detector, DetectorKind, DetectorLane, DetectorOptions, InputSpec, TensorLayout};
use crate::core::pool::Frame;
use crate::core::dmabuf::DmaBuf;
use crate::core::frame::{Fourcc, FrameLayout};
use crate::sys::rknn::{self as sys, Rknn, RknnContext, RknnTensorAttr, RknnTensorMem};

/// Environment variable naming the device-tree `compatible` file to check the model's
/// target platform against (default `/proc/device-tree/compatible`).
pub const DT_COMPATIBLE_ENV: &str = "ZCPIPE_DT_COMPATIBLE";
const DT_COMPATIBLE: &str = "/proc/device-tree/compatible";

/// How an output tensor's elements become float32: type and quantisation from its
/// `rknn_tensor_attr` (`RKNN_QUERY_OUTPUT_ATTR`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OutputQuant {
    /// `RKNN_TENSOR_FLOAT32`, `_FLOAT16`, `_INT8` or `_UINT8`.
    pub type_: u32,
    /// `RKNN_TENSOR_QNT_NONE`, `_DFP` or `_AFFINE_ASYMMETRIC`.
    pub qnt_type: u32,
    /// Affine zero point.
    pub zp: i32,
    /// Affine scale.
    pub scale: f32,
    /// DFP fractional length.
    pub fl: i8,
}

impl OutputQuant {
    /// Bytes per element; `None` for a type zcpipe does not convert.
    pub fn elem_size(&self) -> Option<usize> {
        match self.type_ {
            sys::RKNN_TENSOR_FLOAT32 => Some(4),
            sys::RKNN_TENSOR_FLOAT16 => Some(2),
            sys::RKNN_TENSOR_INT8 | sys::RKNN_TENSOR_UINT8 => Some(1),
            _ => None,
        }
    }

    fn dequant(&self, q: f32) -> f32 {
        match self.qnt_type {
            sys::RKNN_TENSOR_QNT_AFFINE_ASYMMETRIC => (q - self.zp as f32) * self.scale,
            sys::RKNN_TENSOR_QNT_DFP => q / 2f32.powi(self.fl as i32),
            _ => q,
        }
    }
}

/// Converts one output tensor's raw little-endian bytes (`n` elements of `q.type_`) to
/// float32 in `out` (cleared first): float16 widened, float32 as is, int8/uint8 dequantised
/// (`(q - zp) * scale` for affine, `q / 2^fl` for DFP, the integer itself for none).
pub fn output_to_f32(raw: &[u8], n: usize, q: &OutputQuant, out: &mut Vec<f32>) -> Result<()> {
    let size = q.elem_size().with_context(|| format!("RKNN output type {} is not supported", sys::type_name(q.type_)))?;
    ensure!(raw.len() >= n * size, "RKNN output holds {} bytes, {n} {} elements need {}", raw.len(), sys::type_name(q.type_), n * size);
    out.clear();
    let raw = &raw[..n * size];
    match q.type_ {
        sys::RKNN_TENSOR_FLOAT32 => out.extend(raw.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
        sys::RKNN_TENSOR_FLOAT16 => {
            out.extend(raw.chunks_exact(2).map(|b| half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()))
        }
        sys::RKNN_TENSOR_INT8 => out.extend(raw.iter().map(|&b| q.dequant(b as i8 as f32))),
        _ => out.extend(raw.iter().map(|&b| q.dequant(b as f32))),
    }
    Ok(())
}

/// The `"target_platform"` entries of a `.rknn` file (`["rk3588"]`): rknn-toolkit2 appends a
/// JSON description at the end of the file. Empty when none is found.
pub fn model_target_platforms(model: &[u8]) -> Vec<String> {
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

/// The Rockchip SoCs a device-tree `compatible` property names (`rockchip,rk3588` ->
/// `rk3588`): NUL-separated strings, vendor `rockchip`, model starting `rk` or `rv` with no
/// board suffix.
pub fn compatible_socs(compatible: &[u8]) -> Vec<String> {
    compatible
        .split(|&b| b == 0)
        .filter_map(|s| std::str::from_utf8(s).ok())
        .filter_map(|s| s.strip_prefix("rockchip,"))
        .filter(|m| (m.starts_with("rk") || m.starts_with("rv")) && m[2..].chars().all(|c| c.is_ascii_alphanumeric()))
        .map(|m| m.to_ascii_lowercase())
        .collect()
}

/// Whether a model built for `platform` runs on `soc`: the same name, or the same NPU
/// (RK3566/RK3568; RK3588/RK3588S; RV1103/RV1106).
pub fn platform_runs_on(platform: &str, soc: &str) -> bool {
    const SAME_NPU: &[&[&str]] = &[&["rk3566", "rk3568"], &["rk3588", "rk3588s"], &["rv1103", "rv1106"]];
    platform == soc || SAME_NPU.iter().any(|g| g.contains(&platform) && g.contains(&soc))
}

/// The shipped model for a SoC, for error messages.
fn shipped_model_for(soc: &str) -> Option<&'static str> {
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
    let path = std::env::var_os(DT_COMPATIBLE_ENV).filter(|p| !p.is_empty()).map(PathBuf::from).unwrap_or_else(|| PathBuf::from(DT_COMPATIBLE));
    let compatible = match std::fs::read(&path) {
        Ok(c) => c,
        Err(e) => {
            log::debug!("no device tree ({}: {e}): skipping the check of the model's target platform", path.display());
            return Ok(());
        }
    };
    let socs = compatible_socs(&compatible);
    if socs.is_empty() {
        log::warn!("{} names no Rockchip SoC: cannot check that model {} fits this board", path.display(), model.display());
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

/// Parses `--npu-cores` (`0,1,2`): distinct core numbers 0..=2.
pub fn parse_npu_cores(s: &str) -> Result<Vec<u32>, String> {
    let mut cores = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let c: u32 = part.parse().map_err(|_| format!("--npu-cores `{s}`: `{part}` is not a core number; use e.g. 0,1,2"))?;
        if c > 2 {
            return Err(format!("--npu-cores `{s}`: core {c} does not exist (RKNN has cores 0, 1, 2 at most)"));
        }
        if cores.contains(&c) {
            return Err(format!("--npu-cores `{s}`: core {c} is listed twice"));
        }
        cores.push(c);
    }
    if cores.is_empty() {
        return Err(format!("--npu-cores `{s}`: name at least one core, e.g. 0 or 0,1,2"));
    }
    Ok(cores)
}

/// What every context of one model shares, fixed at start-up: the input binding, the
/// output's type and shape, and the decoding thresholds. Read-only once the detector is
/// open, so lanes on other threads borrow it.
struct Model {
    /// The native input attribute, rewritten to uint8 NHWC with the native `w_stride`
    /// (`RKNN_QUERY_NATIVE_INPUT_ATTR`), as passed to `rknn_set_io_mem`.
    input_attr: RknnTensorAttr,
    output: OutputQuant,
    /// Bytes of output 0 in its own type (`rows * cols * element size`).
    output_bytes: usize,
    /// YOLOX head rows (anchors: 3549 for 416x416) and columns (`5 + classes`: 85).
    rows: usize,
    cols: usize,
    spec: InputSpec,
    score_threshold: f32,
    nms_iou: f32,
    path: PathBuf,
}

impl Model {
    /// Checks that a frame bound in place has the layout the NPU reads: the model's fourcc
    /// and size, rows of exactly `w_stride * 3` bytes from offset 0.
    fn check_bound_layout(&self, layout: &FrameLayout) -> Result<()> {
        let s = &self.spec;
        if layout.fourcc != s.fourcc || layout.width != s.width || layout.height != s.height {
            bail!("infer input is {} {}x{} but the model `{}` wants {} {}x{}", layout.fourcc, layout.width, layout.height, s.name, s.fourcc, s.width, s.height);
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

/// One RKNN context, the scaler buffers imported into it (index = pool buffer index) and
/// its own scratch buffers: everything one frame on this context touches, so contexts run
/// on different threads share nothing mutable.
struct Ctx {
    ctx: RknnContext,
    /// `RKNN_NPU_CORE_*` mask set on it (`RKNN_NPU_CORE_AUTO` = the runtime's choice).
    mask: u32,
    mems: Vec<*mut RknnTensorMem>,
    /// Output 0 as `rknn_outputs_get` wrote it (`Model::output_bytes`).
    raw: Vec<u8>,
    /// The output as float32, for the YOLOX decode.
    values: Vec<f32>,
    /// The packed rows for `rknn_inputs_set` (copy path only).
    packed: Vec<u8>,
}

// SAFETY: the `rknn_tensor_mem` pointers belong to this context alone; they are passed back
// to librknnrt only with this context, by whoever holds the `Ctx` (`&mut` for a frame, so
// one thread at a time), and freed once in `RknnDetector::release_mems`. librknnrt
// contexts are not tied to the thread that made them (rknn_api.h: a context must not be
// used by two threads at once, which `&mut Ctx` rules out).
unsafe impl Send for Ctx {}

impl Ctx {
    fn new(ctx: RknnContext) -> Ctx {
        Ctx { ctx, mask: sys::RKNN_NPU_CORE_AUTO, mems: Vec::new(), raw: Vec::new(), values: Vec::new(), packed: Vec::new() }
    }

    /// `RKNN context <id>` plus its core, for logs and errors.
    fn describe(&self) -> String {
        match self.mask {
            sys::RKNN_NPU_CORE_AUTO => format!("RKNN context {}", self.ctx),
            m => format!("RKNN context {} on NPU core {}", self.ctx, m.trailing_zeros()),
        }
    }

    /// Binds pool buffer `index` (imported into this context) as the input and runs it.
    fn detect_bound(&mut self, rknn: &Rknn, m: &Model, index: u32, layout: &FrameLayout) -> Result<Vec<Detection>> {
        m.check_bound_layout(layout)?;
        let mem = *self.mems.get(index as usize).with_context(|| format!("buffer index {index} was not imported into the NPU (bind_pool saw {})", self.mems.len()))?;
        let mut attr = m.input_attr;
        // SAFETY: `mem` is a live mem of this context (destroyed only in release_mems/Drop,
        // which need the whole detector, so no lane borrows it then).
        unsafe { rknn.set_io_mem(self.ctx, mem, &mut attr) }.with_context(|| format!("binding scaler buffer {index} as the NPU input"))?;
        self.run_and_decode(rknn, m)
    }

    /// Packs the rows of a CPU-mapped frame and feeds them with `rknn_inputs_set`.
    fn detect(&mut self, rknn: &Rknn, m: &Model, input: &[u8], layout: &FrameLayout) -> Result<Vec<Detection>> {
        m.spec.check_frame(input.len(), layout)?;
        let (w, h) = (m.spec.width as usize, m.spec.height as usize);
        let plane = layout.planes().first().context("infer input layout has no planes")?;
        let (off, bpl) = (plane.offset as usize, plane.bytesperline as usize);
        self.packed.clear();
        for y in 0..h {
            self.packed.extend_from_slice(&input[off + y * bpl..off + y * bpl + 3 * w]);
        }
        rknn.inputs_set(self.ctx, 0, &self.packed, sys::RKNN_TENSOR_UINT8, sys::RKNN_TENSOR_NHWC)?;
        self.run_and_decode(rknn, m)
    }

    /// Runs the current input and decodes the output (`rknn_run`, `rknn_outputs_get` into
    /// `raw`, conversion to float32, YOLOX decode and NMS).
    fn run_and_decode(&mut self, rknn: &Rknn, m: &Model) -> Result<Vec<Detection>> {
        rknn.run(self.ctx).with_context(|| format!("RKNN model {}", m.path.display()))?;
        if self.raw.len() != m.output_bytes {
            self.raw = vec![0; m.output_bytes];
        }
        let n = rknn.output_into(self.ctx, 0, &mut self.raw)?;
        ensure!(n >= m.output_bytes, "rknn_outputs_get gave {n} bytes; output {} needs {}", m.path.display(), m.output_bytes);
        output_to_f32(&self.raw, m.rows * m.cols, &m.output, &mut self.values)?;
        yolox::postprocess(&self.values, m.rows, m.cols, m.spec.width, m.spec.height, m.score_threshold, m.nms_iou)
    }
}

/// One context of an [`RknnDetector`] lent to a worker thread ([`Detector::lanes`]): it runs
/// frames on that context only, with its own output buffers.
struct RknnLane<'a> {
    rknn: &'a Rknn,
    model: &'a Model,
    ctx: &'a mut Ctx,
}

impl DetectorLane for RknnLane<'_> {
    fn describe(&self) -> String {
        self.ctx.describe()
    }

    fn detect_bound(&mut self, frame: &Frame) -> Result<Vec<Detection>> {
        self.ctx.detect_bound(self.rknn, self.model, frame.index(), &frame.desc().layout)
    }

    fn detect(&mut self, input: &[u8], layout: &FrameLayout) -> Result<Vec<Detection>> {
        self.ctx.detect(self.rknn, self.model, input, layout)
    }
}

/// A YOLOX `.rknn` model loaded into librknnrt, ready to run frames.
pub struct RknnDetector {
    rknn: Arc<Rknn>,
    /// The context `rknn_init` made first, then its duplicates (one per `--npu-cores` entry).
    ctxs: Vec<Ctx>,
    /// Round-robin cursor of [`Detector::detect`] / [`Detector::detect_bound`].
    next_ctx: usize,
    /// Duplicates of the imported fds, kept open until the mems are destroyed.
    bound_fds: Vec<OwnedFd>,
    model: Model,
    // Last: librknnrt may read the model until rknn_destroy (Drop destroys contexts first).
    _model: Mmap,
}

impl std::fmt::Debug for RknnDetector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RknnDetector")
            .field("model", &self.model.path)
            .field("contexts", &self.ctxs.len())
            .field("input", &self.model.input_attr)
            .field("output", &self.model.output)
            .finish()
    }
}

impl RknnDetector {
    /// Opens `opts.model` with `$ZCPIPE_LIBRKNNRT` (else `librknnrt.so`), checks it against
    /// what zcpipe can feed and decode (one NHWC/NCHW 3-channel input, one `[1, N, 5 + C]`
    /// YOLOX output in a supported type) and sets up one context per `opts.npu_cores` entry.
    /// Errors are one line naming the model or library and the fix.
    pub fn open(opts: &DetectorOptions) -> Result<RknnDetector> {
        Self::open_inner(opts, None)
    }

    /// [`RknnDetector::open`] with a runtime the caller opened (e.g. a fake, with
    /// [`Rknn::open_path`]) instead of `$ZCPIPE_LIBRKNNRT` / `librknnrt.so`.
    pub fn open_with(rknn: Arc<Rknn>, opts: &DetectorOptions) -> Result<RknnDetector> {
        Self::open_inner(opts, Some(rknn))
    }

    fn open_inner(opts: &DetectorOptions, rknn: Option<Arc<Rknn>>) -> Result<RknnDetector> {
        let path = opts.model.as_path();
        let file = std::fs::File::open(path).with_context(|| {
            format!("cannot open RKNN model {}: pass --model with a .rknn file such as models/yolox_nano_416_rk3588.rknn", path.display())
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
        let rknn = match rknn {
            Some(r) => r,
            None => Arc::new(Rknn::open()?),
        };
        let ctx = rknn.init(&model, 0).map_err(|e| {
            let hint = match e.code {
                -13 | -10 => "the runtime and the model disagree about the platform: convert the model for this SoC with a toolkit matching the runtime version",
                -6 => "the file may be truncated or made by a toolkit newer than this runtime: update librknnrt.so or reconvert",
                _ => "check `dmesg` for the NPU driver and that the runtime is RKNPU2 2.x",
            };
            anyhow::anyhow!("cannot load RKNN model {} with {}: {e}; {hint}", path.display(), rknn.path())
        })?;
        let mut det = RknnDetector {
            rknn: rknn.clone(),
            ctxs: vec![Ctx::new(ctx)],
            next_ctx: 0,
            bound_fds: Vec::new(),
            model: Model {
                input_attr: RknnTensorAttr::default(),
                output: OutputQuant { type_: 0, qnt_type: 0, zp: 0, scale: 1.0, fl: 0 },
                output_bytes: 0,
                rows: 0,
                cols: 0,
                spec: InputSpec { width: 0, height: 0, fourcc: Fourcc::BGR24, layout: TensorLayout::Nhwc, name: String::new(), bytesperline: 0 },
                score_threshold: opts.score_threshold,
                nms_iou: opts.nms_iou,
                path: path.to_path_buf(),
            },
            _model: model,
        };
        // From here on, Drop destroys the context on any error.
        det.describe_and_check(&platforms)?;
        det.setup_cores(&opts.npu_cores);
        Ok(det)
    }

    fn describe_and_check(&mut self, platforms: &[String]) -> Result<()> {
        let (rknn, ctx, path) = (self.rknn.clone(), self.ctxs[0].ctx, self.model.path.clone());
        let q = |what: &str, e: sys::RknnError| anyhow::anyhow!("RKNN model {}: {what}: {e}", path.display());
        let mut ver = sys::RknnSdkVersion::default();
        rknn.query(ctx, sys::RKNN_QUERY_SDK_VERSION, &mut ver).map_err(|e| q("RKNN_QUERY_SDK_VERSION", e))?;
        log::info!(
            "librknnrt {}: api {}, driver {}; model {} built for {}",
            rknn.path(),
            sys::c_text(&ver.api_version),
            sys::c_text(&ver.drv_version),
            path.display(),
            if platforms.is_empty() { "an unnamed platform".to_string() } else { platforms.join("/") }
        );
        let mut io = sys::RknnInputOutputNum::default();
        rknn.query(ctx, sys::RKNN_QUERY_IN_OUT_NUM, &mut io).map_err(|e| q("RKNN_QUERY_IN_OUT_NUM", e))?;
        if io.n_input != 1 || io.n_output != 1 {
            bail!(
                "RKNN model {} has {} inputs and {} outputs; zcpipe feeds one BGR image and decodes one YOLOX output [1,N,5+classes]: use a YOLOX model such as models/yolox_nano_416_rk3588.rknn",
                path.display(),
                io.n_input,
                io.n_output
            );
        }
        let mut a = RknnTensorAttr { index: 0, ..Default::default() };
        rknn.query(ctx, sys::RKNN_QUERY_NATIVE_INPUT_ATTR, &mut a).map_err(|e| q("RKNN_QUERY_NATIVE_INPUT_ATTR", e))?;
        if a.fmt == sys::RKNN_TENSOR_NC1HWC2 {
            // Blocked channels cannot come from a packed BGR scaler: ask for the NHWC form.
            a = RknnTensorAttr { index: 0, ..Default::default() };
            rknn.query(ctx, sys::RKNN_QUERY_NATIVE_NHWC_INPUT_ATTR, &mut a).map_err(|e| q("RKNN_QUERY_NATIVE_NHWC_INPUT_ATTR", e))?;
        }
        log::info!("RKNN native input: {}", a.describe());
        let (h, w, c) = match (a.fmt, a.shape()) {
            (sys::RKNN_TENSOR_NHWC, &[1, h, w, c]) => (h, w, c),
            (sys::RKNN_TENSOR_NCHW, &[1, c, h, w]) => (h, w, c),
            _ => bail!(
                "RKNN model {} input is {}; zcpipe feeds one 3-channel image (NHWC [1,H,W,3]): use a YOLOX model such as models/yolox_nano_416_rk3588.rknn",
                path.display(),
                a.describe()
            ),
        };
        if c != 3 || h == 0 || w == 0 || h > 16384 || w > 16384 {
            bail!("RKNN model {} input is {}; zcpipe feeds 3-channel BGR images up to 16384x16384", path.display(), a.describe());
        }
        let w_stride = if a.w_stride == 0 { w } else { a.w_stride };
        if w_stride < w {
            bail!("RKNN model {} reports w_stride {w_stride} < width {w}: the runtime's input attributes are inconsistent", path.display());
        }
        // Bind as uint8 NHWC converted by the runtime (rknn_api.h: pass_through = 0 means
        // "convert from type and fmt"); keep the native strides.
        a.type_ = sys::RKNN_TENSOR_UINT8;
        a.fmt = sys::RKNN_TENSOR_NHWC;
        a.pass_through = 0;
        a.w_stride = w_stride;
        let need = w_stride as u64 * h as u64 * 3;
        if (a.size_with_stride as u64) < need {
            a.size_with_stride = need as u32;
        }
        self.model.input_attr = a;
        self.model.spec = InputSpec { width: w, height: h, fourcc: Fourcc::BGR24, layout: TensorLayout::Nhwc, name: a.name(), bytesperline: w_stride * 3 };

        let mut o = RknnTensorAttr { index: 0, ..Default::default() };
        rknn.query(ctx, sys::RKNN_QUERY_OUTPUT_ATTR, &mut o).map_err(|e| q("RKNN_QUERY_OUTPUT_ATTR", e))?;
        log::info!("RKNN output: {}", o.describe());
        let rows = yolox::grid_rows(w, h);
        let cols = match *o.shape() {
            [1, n, c] | [1, n, c, 1] | [n, c] if n as usize == rows && c >= 6 => c as usize,
            _ => bail!(
                "RKNN model {} output is {}; zcpipe decodes the YOLOX head [1,{rows},5+classes] for a {w}x{h} input: export with decode_in_inference=False and one concatenated output (models/PROVENANCE.md)",
                path.display(),
                o.describe()
            ),
        };
        let quant = OutputQuant { type_: o.type_, qnt_type: o.qnt_type, zp: o.zp, scale: o.scale, fl: o.fl };
        let Some(es) = quant.elem_size() else {
            bail!("RKNN model {} output type {} is not supported (float16, float32, int8, uint8 are)", path.display(), sys::type_name(o.type_));
        };
        if quant.qnt_type == sys::RKNN_TENSOR_QNT_AFFINE_ASYMMETRIC && !(quant.scale.is_finite() && quant.scale > 0.0) {
            bail!("RKNN model {} output scale {} is not a positive number", path.display(), quant.scale);
        }
        self.model.output = quant;
        self.model.rows = rows;
        self.model.cols = cols;
        self.model.output_bytes = rows * cols * es;
        Ok(())
    }

    /// One context per listed core; a refused duplicate or mask falls back to one context
    /// with the runtime's automatic choice.
    fn setup_cores(&mut self, cores: &[u32]) {
        if cores.is_empty() {
            return;
        }
        let rknn = self.rknn.clone();
        let main = self.ctxs[0].ctx;
        let mut failed = None;
        for (i, &core) in cores.iter().enumerate() {
            let ctx = if i == 0 {
                main
            } else {
                match rknn.dup_context(main) {
                    Ok(c) => {
                        self.ctxs.push(Ctx::new(c));
                        c
                    }
                    Err(e) => {
                        failed = Some(format!("{e} (context for core {core})"));
                        break;
                    }
                }
            };
            let mask = 1u32 << core;
            match rknn.set_core_mask(ctx, mask) {
                Ok(()) => self.ctxs[i].mask = mask,
                Err(e) => {
                    failed = Some(format!("{e} (core {core}, mask {mask:#x})"));
                    break;
                }
            }
        }
        if let Some(why) = failed {
            log::warn!("--npu-cores: {why}; running one context with the runtime's automatic core choice (RKNN_NPU_CORE_AUTO)");
            for c in self.ctxs.drain(1..) {
                if let Err(e) = rknn.destroy(c.ctx) {
                    log::warn!("{e}");
                }
            }
            if self.ctxs[0].mask != sys::RKNN_NPU_CORE_AUTO {
                if let Err(e) = rknn.set_core_mask(main, sys::RKNN_NPU_CORE_AUTO) {
                    log::warn!("{e}");
                }
                self.ctxs[0].mask = sys::RKNN_NPU_CORE_AUTO;
            }
        } else {
            log::info!("RKNN: {} context(s) on NPU core(s) {:?}, frames dispatched round-robin", self.ctxs.len(), cores);
        }
    }

    /// Output tensor shape `[1, rows, cols]` (`[1, 3549, 85]` for YOLOX-Nano 416).
    pub fn output_shape(&self) -> [usize; 3] {
        [1, self.model.rows, self.model.cols]
    }

    /// Number of RKNN contexts (one per `--npu-cores` entry, else 1).
    pub fn contexts(&self) -> usize {
        self.ctxs.len()
    }

    /// The next context in round-robin order (the single-threaded path).
    fn next_ctx(&mut self) -> usize {
        let i = self.next_ctx % self.ctxs.len();
        self.next_ctx = self.next_ctx.wrapping_add(1);
        i
    }

    fn release_mems(&mut self) {
        let rknn = self.rknn.clone();
        for c in &mut self.ctxs {
            for mem in c.mems.drain(..) {
                // SAFETY: made by create_mem_from_fd on this context, destroyed once (drained).
                if let Err(e) = unsafe { rknn.destroy_mem(c.ctx, mem) } {
                    log::warn!("{e}");
                }
            }
        }
        self.bound_fds.clear();
    }
}

impl RknnDetector {
    /// Runs the frame held in pool buffer `index` (imported by [`Detector::bind_pool`]),
    /// laid out as `layout` says (it must match the model's input, its `bytesperline`
    /// included), on the next context in round-robin order.
    pub fn detect_index(&mut self, index: u32, layout: &FrameLayout) -> Result<Vec<Detection>> {
        let i = self.next_ctx();
        self.ctxs[i].detect_bound(&self.rknn, &self.model, index, layout)
    }
}

impl Detector for RknnDetector {
    fn kind(&self) -> DetectorKind {
        DetectorKind::Rknn
    }

    fn classes(&self) -> Option<usize> {
        self.model.cols.checked_sub(5)
    }

    fn input_spec(&self) -> &InputSpec {
        &self.model.spec
    }

    fn bind_pool(&mut self, bufs: &[&DmaBuf]) -> Result<bool> {
        self.release_mems();
        let need = self.model.input_attr.size_with_stride;
        for (i, b) in bufs.iter().enumerate() {
            if b.size() < need as u64 {
                bail!(
                    "scaler buffer {i} is {} bytes but the NPU reads {need} ({}x{} with w_stride {}): the scaler must allocate bytesperline x height",
                    b.size(),
                    self.model.spec.width,
                    self.model.spec.height,
                    self.model.input_attr.w_stride
                );
            }
        }
        let rknn = self.rknn.clone();
        let mut fds = Vec::with_capacity(bufs.len());
        for b in bufs {
            fds.push(b.fd().try_clone_to_owned().context("dup of a scaler buffer fd for the NPU")?);
        }
        for ci in 0..self.ctxs.len() {
            let ctx = self.ctxs[ci].ctx;
            for (i, fd) in fds.iter().enumerate() {
                match rknn.create_mem_from_fd(ctx, fd.as_raw_fd(), need, 0) {
                    Ok(m) => self.ctxs[ci].mems.push(m),
                    Err(e) => {
                        log::warn!(
                            "{e} for scaler buffer {i} ({} bytes, {}): the NPU cannot import it; falling back to rknn_inputs_set (one CPU copy per frame). On a board give the pool dma-bufs the NPU reaches (--heap system, dma32 or cma)",
                            bufs[i].size(),
                            bufs[i].kind()
                        );
                        self.bound_fds = fds;
                        self.release_mems();
                        return Ok(false);
                    }
                }
            }
        }
        self.bound_fds = fds;
        log::info!(
            "zero-copy: {} scaler buffers imported into {} RKNN context(s) once; the NPU reads them in place ({} bytes, w_stride {})",
            bufs.len(),
            self.ctxs.len(),
            need,
            self.model.input_attr.w_stride
        );
        Ok(true)
    }

    fn detect_bound(&mut self, frame: &Frame) -> Result<Vec<Detection>> {
        self.detect_index(frame.index(), &frame.desc().layout)
    }

    fn detect(&mut self, input: &[u8], layout: &FrameLayout) -> Result<Vec<Detection>> {
        let i = self.next_ctx();
        self.ctxs[i].detect(&self.rknn, &self.model, input, layout)
    }

    /// With more than one context (`--npu-cores`), one lane per context, in context order
    /// (the original first): each runs frames on its own context only, so the infer stage
    /// can run them on threads of their own. `None` with one context.
    fn lanes(&mut self) -> Option<Vec<Box<dyn DetectorLane + '_>>> {
        if self.ctxs.len() < 2 {
            return None;
        }
        let (rknn, model) = (&*self.rknn, &self.model);
        Some(self.ctxs.iter_mut().map(|ctx| Box::new(RknnLane { rknn, model, ctx }) as Box<dyn DetectorLane + '_>).collect())
    }
}

impl Drop for RknnDetector {
    fn drop(&mut self) {
        self.release_mems();
        // Duplicated contexts first, the one they share weights with last.
        for c in self.ctxs.drain(..).rev() {
            if let Err(e) = self.rknn.destroy(c.ctx) {
                log::warn!("{e}");
            }
        }
        log::debug!("RKNN contexts and mems released");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::frame::LetterboxParams;
    use crate::infer::yolox::read_npy_f32;

    fn golden(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/golden").join(name)
    }

    #[test]
    fn shipped_models_name_their_platform() {
        for (file, want) in [("yolox_nano_416_rk3588.rknn", "rk3588"), ("yolox_nano_416_rk3566_rk3568.rknn", "rk3566"), ("yolox_nano_416_rk3576.rknn", "rk3576")] {
            let bytes = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("models").join(file)).unwrap();
            assert_eq!(&bytes[..4], b"RKNN");
            assert_eq!(model_target_platforms(&bytes), vec![want.to_string()], "{file}");
        }
        assert!(model_target_platforms(b"RKNN no json here").is_empty());
    }

    #[test]
    fn compatible_strings_and_platforms() {
        let dt = b"radxa,rock-5b\0rockchip,rk3588\0";
        assert_eq!(compatible_socs(dt), vec!["rk3588"]);
        assert_eq!(compatible_socs(b"xunlong,orangepi-5\0rockchip,rk3588s\0"), vec!["rk3588s"]);
        assert_eq!(compatible_socs(b"rockchip,rk3566-evb\0rockchip,rk3566\0"), vec!["rk3566"]);
        assert!(compatible_socs(b"raspberrypi,5-model-b\0brcm,bcm2712\0").is_empty());
        assert!(platform_runs_on("rk3588", "rk3588s"));
        assert!(platform_runs_on("rk3566", "rk3568"));
        assert!(!platform_runs_on("rk3588", "rk3566"));
        assert!(!platform_runs_on("rk3576", "rk3588"));
    }

    #[test]
    fn npu_cores_parse() {
        assert_eq!(parse_npu_cores("0,1,2").unwrap(), vec![0, 1, 2]);
        assert_eq!(parse_npu_cores("2").unwrap(), vec![2]);
        assert!(parse_npu_cores("0,3").unwrap_err().contains("core 3 does not exist"));
        assert!(parse_npu_cores("1,1").unwrap_err().contains("twice"));
        assert!(parse_npu_cores("a").unwrap_err().contains("not a core number"));
        assert!(parse_npu_cores("").is_err());
    }

    #[test]
    fn outputs_convert_in_every_supported_type() {
        let v = [0.0f32, 0.5, -1.25, 3.0];
        let mut out = Vec::new();
        let f32q = OutputQuant { type_: sys::RKNN_TENSOR_FLOAT32, qnt_type: 0, zp: 0, scale: 1.0, fl: 0 };
        let raw: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        output_to_f32(&raw, 4, &f32q, &mut out).unwrap();
        assert_eq!(out, v);
        let f16q = OutputQuant { type_: sys::RKNN_TENSOR_FLOAT16, ..f32q };
        // 0x3800 = 0.5, 0xBD00 = -1.25, 0x4200 = 3.0 (IEEE 754 binary16).
        let raw = [0x00, 0x00, 0x00, 0x38, 0x00, 0xBD, 0x00, 0x42];
        output_to_f32(&raw, 4, &f16q, &mut out).unwrap();
        assert_eq!(out, v);
        let i8q = OutputQuant { type_: sys::RKNN_TENSOR_INT8, qnt_type: sys::RKNN_TENSOR_QNT_AFFINE_ASYMMETRIC, zp: -31, scale: 0.0229, fl: 0 };
        // (q - zp) * scale: -31 -> 0, -9 -> 22 * 0.0229 = 0.5038, -128 -> -97 * 0.0229, 127 -> 158 * 0.0229.
        output_to_f32(&[(-31i8) as u8, (-9i8) as u8, 0x80, 0x7F], 4, &i8q, &mut out).unwrap();
        let want = [0.0, 22.0 * 0.0229, -97.0 * 0.0229, 158.0 * 0.0229];
        for (a, b) in out.iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{out:?}");
        }
        let dfp = OutputQuant { type_: sys::RKNN_TENSOR_INT8, qnt_type: sys::RKNN_TENSOR_QNT_DFP, zp: 0, scale: 1.0, fl: 2 };
        output_to_f32(&[(-6i8) as u8, 5], 2, &dfp, &mut out).unwrap();
        assert_eq!(out, vec![-1.5, 1.25]);
        let u8q = OutputQuant { type_: sys::RKNN_TENSOR_UINT8, qnt_type: sys::RKNN_TENSOR_QNT_AFFINE_ASYMMETRIC, zp: 128, scale: 0.5, fl: 0 };
        output_to_f32(&[128, 130, 0], 3, &u8q, &mut out).unwrap();
        assert_eq!(out, vec![0.0, 1.0, -64.0]);
        let err = output_to_f32(&[0; 7], 4, &f16q, &mut out).unwrap_err().to_string();
        assert!(err.contains("7 bytes") && err.contains("FP16"), "{err}");
        let bad = OutputQuant { type_: sys::RKNN_TENSOR_INT64, ..f32q };
        assert!(output_to_f32(&[0; 8], 1, &bad, &mut out).unwrap_err().to_string().contains("INT64"));
    }

    /// The golden simulator output, as the NPU would hand it over in `q`'s type, decoded by
    /// our conversion and YOLOX decode; returns the detections unmapped to source pixels.
    fn golden_through(stem: &str, q: &OutputQuant) -> (Vec<Detection>, LetterboxParams) {
        let (shape, f) = read_npy_f32(&golden(&format!("{stem}_sim_output.npy"))).unwrap();
        assert_eq!(shape, vec![1, 3549, 85]);
        let raw: Vec<u8> = match q.type_ {
            sys::RKNN_TENSOR_FLOAT16 => f.iter().flat_map(|&v| half::f16::from_f32(v).to_bits().to_le_bytes()).collect(),
            sys::RKNN_TENSOR_INT8 => f.iter().map(|&v| ((v / q.scale).round() as i32 + q.zp).clamp(-128, 127) as i8 as u8).collect(),
            _ => f.iter().flat_map(|v| v.to_le_bytes()).collect(),
        };
        let mut out = Vec::new();
        output_to_f32(&raw, 3549 * 85, q, &mut out).unwrap();
        let dets = yolox::postprocess(&out, 3549, 85, 416, 416, 0.3, 0.45).unwrap();
        let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(golden(&format!("{stem}_sim_detections.json"))).unwrap()).unwrap();
        let hw = json["image_hw"].as_array().unwrap();
        let lb = LetterboxParams::top_left(hw[1].as_u64().unwrap() as u32, hw[0].as_u64().unwrap() as u32, 416, 416);
        (dets, lb)
    }

    fn golden_dets(stem: &str) -> Vec<(u32, f32, [f32; 4])> {
        let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(golden(&format!("{stem}_sim_detections.json"))).unwrap()).unwrap();
        json["detections"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                let b = d["box_xyxy_clamped"].as_array().unwrap();
                (d["class_id"].as_u64().unwrap() as u32, d["score"].as_f64().unwrap() as f32, [0, 1, 2, 3].map(|i| b[i].as_f64().unwrap() as f32))
            })
            .collect()
    }

    #[test]
    fn golden_float16_output_decodes_to_the_golden_detections() {
        // The shipped .rknn models output float16 (models/PROVENANCE.md); the goldens are the
        // simulator's output widened to float32, so narrowing them back is exact for every
        // value the simulator produced and the detections must be the golden ones.
        let q = OutputQuant { type_: sys::RKNN_TENSOR_FLOAT16, qnt_type: sys::RKNN_TENSOR_QNT_NONE, zp: 0, scale: 1.0, fl: 0 };
        for stem in ["dog", "astronaut"] {
            let (dets, lb) = golden_through(stem, &q);
            let want = golden_dets(stem);
            assert_eq!(dets.len(), want.len(), "{stem}: {dets:?}");
            for (d, (class_id, score, bx)) in dets.iter().zip(&want) {
                assert_eq!(d.class_id, *class_id, "{stem}");
                assert!((d.score - score).abs() < 1e-3, "{stem}: {} vs {score}", d.score);
                let m = lb.unmap_box(d.bbox);
                for k in 0..4 {
                    assert!((m[k] - bx[k]).abs() <= 0.5, "{stem}: {m:?} vs {bx:?}");
                }
            }
        }
    }

    #[test]
    fn golden_output_quantised_to_int8_keeps_the_detections() {
        // A w8a8 output (scale 0.0229, zero point -31, as a plain int8 YOLOX-Nano build
        // reports): every value moves by at most half a step (0.0115), so the golden objects
        // stay, scores within 0.03 and boxes within IoU 0.9.
        let q = OutputQuant { type_: sys::RKNN_TENSOR_INT8, qnt_type: sys::RKNN_TENSOR_QNT_AFFINE_ASYMMETRIC, zp: -31, scale: 0.0229, fl: 0 };
        for stem in ["dog", "astronaut"] {
            let (dets, lb) = golden_through(stem, &q);
            let want = golden_dets(stem);
            assert_eq!(dets.iter().map(|d| d.class_id).collect::<Vec<_>>(), want.iter().map(|w| w.0).collect::<Vec<_>>(), "{stem}: {dets:?}");
            for (d, (_, score, bx)) in dets.iter().zip(&want) {
                assert!((d.score - score).abs() < 0.03, "{stem}: {} vs {score}", d.score);
                let m = lb.unmap_box(d.bbox);
                assert!(crate::infer::nms::iou(&m, bx) > 0.9, "{stem}: {m:?} vs {bx:?}");
            }
        }
    }

    #[test]
    fn non_rknn_file_is_refused_before_any_library() {
        let opts = DetectorOptions { model: Path::new(env!("CARGO_MANIFEST_DIR")).join("models/yolox_nano.onnx"), ..Default::default() };
        let err = RknnDetector::open(&opts).unwrap_err().to_string();
        assert!(err.contains("yolox_nano.onnx is not an RKNN model") && err.contains("--infer onnx"), "{err}");
        let opts = DetectorOptions { model: "/nonexistent/m.rknn".into(), ..Default::default() };
        let err = RknnDetector::open(&opts).unwrap_err().to_string();
        assert!(err.contains("/nonexistent/m.rknn") && err.contains("--model"), "{err}");
    }
}

//! `rknn` backend: a detection `.rknn` model on Rockchip's NPU through `librknnrt.so` (RKNPU2
//! runtime 2.x, opened at run time: [`zcpipe_sys::rknn`]).
//!
//! Start-up (once): the model file is memory-mapped read-only and handed to `rknn_init`; the
//! SDK api/driver versions (`RKNN_QUERY_SDK_VERSION`) and the model's target platform (the
//! `"target_platform"` list in the JSON the toolkit appends to a `.rknn` file) are logged; a
//! model built for another SoC than `/proc/device-tree/compatible` names is refused
//! (read under the system root, [`zcpipe_sys::board::path`]; no file, as on hosts, skips it).
//! The input is queried with `RKNN_QUERY_NATIVE_INPUT_ATTR` and bound as uint8 NHWC,
//! `pass_through = 0` (the runtime applies the model's zero point -128 / scale 1.0), so the
//! scaler must write rows of exactly `w_stride * 3` bytes: [`InputSpec::bytesperline`].
//!
//! Zero-copy: [`Detector::bind_pool`] imports each of the scaler's output dma-bufs once with
//! `rknn_create_mem_from_fd`; per frame [`Detector::detect_bound`] binds the current buffer
//! with `rknn_set_io_mem`, runs, and fetches the output with `rknn_outputs_get` (our own
//! buffers, `want_float = 0`) — the CPU never maps the frame. The outputs (one to nine,
//! in float16, float32, int8/uint8 affine `(q - zp) * scale` or DFP `q / 2^fl`:
//! [`output_info`]) are decoded in their own type by the head recognised from their shapes
//! ([`heads`]: int8 is thresholded before anything is dequantised), then per-class NMS.
//! Without a bound pool (`--copy-mode`), [`Detector::detect`] packs the rows and uses
//! `rknn_inputs_set`.
//!
//! `--npu-cores 0,1,2`: one context per core (`rknn_dup_context` shares the weights, then
//! `rknn_set_core_mask` pins it; a single context on a multi-core mask barely helps a model
//! this small). Every context gets the scaler's buffers imported and its own output buffers,
//! and [`Detector::lanes`] lends each context to the infer stage as a lane, which runs on a
//! thread of its own and takes the frame the scheduler picks whenever it is free; the
//! contexts run at the same time, one frame each, results re-ordered by pick
//! ([`crate::stage`]). `--npu-contexts-per-core N` makes N contexts per core (all sharing
//! the model's weights), so a core has its next frame queued while one runs. A
//! refused duplicate or mask is a warning and one context with the runtime's own core
//! choice (no lanes: frames run on the stage's thread). Called directly,
//! [`Detector::detect_bound`] and [`Detector::detect`] also go round-robin, one frame at a
//! time. On drop every mem is released with `rknn_destroy_mem`, then the duplicated
//! contexts and last the original with `rknn_destroy` (the lanes borrow the detector, so
//! they are gone by then).
//!
//! The module is split along those seams: `model` (the model file's checks, what every
//! context shares, the outputs' description: [`output_info`]), `context` (one RKNN context and
//! the lane that lends it to a thread), `cores` (`--npu-cores`: [`parse_npu_cores`] and one
//! context per core); this file holds [`RknnDetector`] and its [`Detector`] impl.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use memmap2::Mmap;

use super::heads::{self, Decoder, OutputInfo};
use super::{Detection, Detector, DetectorKind, DetectorLane, DetectorOptions, InputSpec, TensorLayout};
use zcpipe_core::dmabuf::DmaBuf;
use zcpipe_core::frame::FrameLayout;
use zcpipe_core::pool::Frame;
use zcpipe_sys::rknn::{self as sys, Rknn, RknnTensorAttr};

mod context;
mod cores;
mod model;
#[cfg(test)]
mod tests;

use context::{Ctx, RknnLane};
pub use cores::parse_npu_cores;
pub use model::output_info;
pub(crate) use model::{check_model_file, shipped_model_for};
#[cfg(test)]
use model::{compatible_socs, model_target_platforms, platform_runs_on};
use model::{map_model, Model};

/// The most outputs a model may have (a head has at most 9).
const MAX_OUTPUTS: u32 = 16;

/// A detection `.rknn` model loaded into librknnrt, ready to run frames.
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
            .field("head", &self.model.decoder.head().describe())
            .finish()
    }
}

impl RknnDetector {
    /// Opens `opts.model` with `$ZCPIPE_LIBRKNNRT` (else `librknnrt.so`), checks it against
    /// what zcpipe can feed and decode (one NHWC/NCHW 3-channel input, outputs of a layout a
    /// head knows, in a supported type) and sets up one context per `opts.npu_cores` entry.
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
        let (model, platforms) = map_model(path)?;
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
        let described = match describe_and_check(&rknn, ctx, path, &platforms, opts) {
            Ok(m) => m,
            Err(e) => {
                if let Err(d) = rknn.destroy(ctx) {
                    log::warn!("{d}");
                }
                return Err(e);
            }
        };
        // From here on, Drop destroys the context on any error.
        let mut det = RknnDetector {
            rknn: rknn.clone(),
            ctxs: vec![Ctx::new(ctx)],
            next_ctx: 0,
            bound_fds: Vec::new(),
            model: described,
            _model: model,
        };
        det.setup_cores(&opts.npu_cores, opts.contexts_per_core);
        Ok(det)
    }

    /// The outputs the head decodes (`[1,3549,85] float16` for the bundled YOLOX-Nano).
    pub fn outputs(&self) -> &[OutputInfo] {
        self.model.decoder.outputs()
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
            c.release_own(&rknn);
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

/// Queries the model's input and outputs on `ctx` and checks them against what zcpipe can
/// feed and decode: one NHWC/NCHW 3-channel input (bound as uint8 NHWC with the native
/// `w_stride`), outputs of a layout a head knows ([`heads::select`]) in a supported type.
fn describe_and_check(
    rknn: &Rknn,
    ctx: sys::RknnContext,
    path: &Path,
    platforms: &[String],
    opts: &DetectorOptions,
) -> Result<Model> {
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
    if io.n_input != 1 || io.n_output == 0 || io.n_output > MAX_OUTPUTS {
        bail!(
            "RKNN model {} has {} inputs and {} outputs; zcpipe feeds one RGB or BGR image and decodes 1 to {MAX_OUTPUTS} outputs of a detection head: use a model such as models/yolox_nano_416_rk3588.rknn",
            path.display(),
            io.n_input,
            io.n_output
        );
    }
    let mut a = RknnTensorAttr { index: 0, ..Default::default() };
    rknn.query(ctx, sys::RKNN_QUERY_NATIVE_INPUT_ATTR, &mut a).map_err(|e| q("RKNN_QUERY_NATIVE_INPUT_ATTR", e))?;
    if a.fmt == sys::RKNN_TENSOR_NC1HWC2 {
        // Blocked channels cannot come from a packed RGB or BGR scaler: ask for the NHWC form.
        a = RknnTensorAttr { index: 0, ..Default::default() };
        rknn.query(ctx, sys::RKNN_QUERY_NATIVE_NHWC_INPUT_ATTR, &mut a)
            .map_err(|e| q("RKNN_QUERY_NATIVE_NHWC_INPUT_ATTR", e))?;
    }
    log::info!("RKNN native input: {}", a.describe());
    let (h, w, c) = match (a.fmt, a.shape()) {
        (sys::RKNN_TENSOR_NHWC, &[1, h, w, c]) => (h, w, c),
        (sys::RKNN_TENSOR_NCHW, &[1, c, h, w]) => (h, w, c),
        _ => bail!(
            "RKNN model {} input is {}; zcpipe feeds one 3-channel image (NHWC [1,H,W,3]): use a model such as models/yolox_nano_416_rk3588.rknn",
            path.display(),
            a.describe()
        ),
    };
    if c != 3 || h == 0 || w == 0 || h > 16384 || w > 16384 {
        bail!(
            "RKNN model {} input is {}; zcpipe feeds 3-channel RGB or BGR images up to 16384x16384",
            path.display(),
            a.describe()
        );
    }
    // An .rknn's input size is fixed when it is converted.
    opts.check_fixed_input(path, w, h)?;
    let w_stride = if a.w_stride == 0 { w } else { a.w_stride };
    if w_stride < w {
        bail!(
            "RKNN model {} reports w_stride {w_stride} < width {w}: the runtime's input attributes are inconsistent",
            path.display()
        );
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

    let mut outputs = Vec::new();
    for i in 0..io.n_output {
        let mut o = RknnTensorAttr { index: i, ..Default::default() };
        rknn.query(ctx, sys::RKNN_QUERY_OUTPUT_ATTR, &mut o).map_err(|e| q("RKNN_QUERY_OUTPUT_ATTR", e))?;
        log::info!("RKNN output: {}", o.describe());
        outputs.push(output_info(&o).map_err(|e| anyhow::anyhow!("RKNN model {}: {e:#}", path.display()))?);
    }
    let m = heads::Model { width: w, height: h, outputs: &outputs, anchors: opts.anchors.as_ref() };
    let head = heads::select(opts.head, &m).map_err(|e| anyhow::anyhow!("RKNN model {}: {e}", path.display()))?;
    log::info!("model {}: {}", path.display(), head.describe());
    // The model's normalisation is inside it (rknn-toolkit2's mean/std); the scaler gives it
    // the family's channel order and letterbox, or the ones the user chose.
    let pre = opts.preprocess(&*head);
    let spec = InputSpec {
        width: w,
        height: h,
        fourcc: pre.channel_order.fourcc(),
        letterbox: pre.letterbox(),
        layout: TensorLayout::Nhwc,
        name: a.name(),
        bytesperline: w_stride * 3,
    };
    let output_bytes = outputs.iter().map(|o| o.len() * o.dtype.size()).collect();
    Ok(Model {
        input_attr: a,
        output_bytes,
        decoder: Decoder::new(head, outputs, opts.score_threshold, opts.nms_iou),
        spec,
        path: path.to_path_buf(),
    })
}

impl RknnDetector {
    /// Runs the frame held in pool buffer `index` (imported by [`Detector::bind_pool`]),
    /// laid out as `layout` says (it must match the model's input, its `bytesperline`
    /// included), on the next context in round-robin order. This is below the pool's loans:
    /// the caller must hold the buffer. The infer stage goes through
    /// [`Detector::detect_bound`], whose `Frame` proves it; tests drive the NPU with indices.
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
        Some(self.model.decoder.head().classes())
    }

    fn head(&self) -> Option<&dyn heads::Head> {
        Some(self.model.decoder.head())
    }

    fn nonfinite_skipped(&self) -> u64 {
        self.model.decoder.nonfinite()
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

    fn detect_in(&mut self, buf: &DmaBuf, layout: &FrameLayout) -> Result<Option<Vec<Detection>>> {
        let i = self.next_ctx();
        self.ctxs[i].detect_in(&self.rknn, &self.model, buf, layout)
    }

    /// With more than one context (`--npu-cores`), one lane per context, in context order
    /// (the original first): each runs frames on its own context only, so the infer stage
    /// can run them on threads of their own. `None` with one context.
    fn last_run(&self) -> Option<(std::time::Instant, std::time::Instant)> {
        self.ctxs.iter().filter_map(|c| c.last_run).max_by_key(|r| r.1)
    }

    fn lanes(&mut self) -> Option<Vec<Box<dyn DetectorLane + '_>>> {
        if self.ctxs.len() < 2 {
            return None;
        }
        let (rknn, model) = (&*self.rknn, &self.model);
        Some(
            self.ctxs
                .iter_mut()
                .map(|ctx| Box::new(RknnLane { rknn, model, ctx }) as Box<dyn DetectorLane + '_>)
                .collect(),
        )
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

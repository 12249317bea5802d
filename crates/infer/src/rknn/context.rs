//! One RKNN context with the scaler buffers imported into it and its own scratch buffers,
//! and the lane that lends it to a worker thread.

use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Instant;

use anyhow::{ensure, Context, Result};

use super::model::Model;
use crate::heads::TensorRef;
use crate::{Detection, DetectorLane};
use zcpipe_core::dmabuf::DmaBuf;
use zcpipe_core::frame::FrameLayout;
use zcpipe_core::pool::Frame;
use zcpipe_sys::rknn::{self as sys, Rknn, RknnContext, RknnTensorMem};

/// One RKNN context, the scaler buffers imported into it (index = pool buffer index) and
/// its own scratch buffers: everything one frame on this context touches, so contexts run
/// on different threads share nothing mutable.
pub(super) struct Ctx {
    pub(super) ctx: RknnContext,
    /// `RKNN_NPU_CORE_*` mask set on it (`RKNN_NPU_CORE_AUTO` = the runtime's choice).
    pub(super) mask: u32,
    pub(super) mems: Vec<*mut RknnTensorMem>,
    /// Each output as `rknn_outputs_get` wrote it, in its own type (`Model::output_bytes`),
    /// in 4-byte words so that a float32 output can be read in place.
    raw: Vec<Vec<u32>>,
    /// The packed rows for `rknn_inputs_set` (copy path only).
    packed: Vec<u8>,
    /// When the last `rknn_run` began and returned.
    pub(super) last_run: Option<(Instant, Instant)>,
    /// A model input its caller keeps (the inference service's), imported at its first run.
    own: Option<OwnInput>,
}

/// A caller's model input imported into a context ([`Ctx::detect_in`]): the buffer's
/// identity, a duplicate of its fd (kept open while the runtime holds the memory), and the
/// memory, or `None` when the runtime could not import it.
struct OwnInput {
    id: (u64, u64),
    _fd: OwnedFd,
    mem: Option<*mut RknnTensorMem>,
}

// SAFETY: the `rknn_tensor_mem` pointers belong to this context alone; they are passed back
// to librknnrt only with this context, by whoever holds the `Ctx` (`&mut` for a frame, so
// one thread at a time), and freed once in `RknnDetector::release_mems`. librknnrt
// contexts are not tied to the thread that made them (rknn_api.h: a context must not be
// used by two threads at once, which `&mut Ctx` rules out).
unsafe impl Send for Ctx {}

impl Ctx {
    pub(super) fn new(ctx: RknnContext) -> Ctx {
        Ctx {
            ctx,
            mask: sys::RKNN_NPU_CORE_AUTO,
            mems: Vec::new(),
            raw: Vec::new(),
            packed: Vec::new(),
            last_run: None,
            own: None,
        }
    }

    /// Destroys the caller's model input memory, if any (the next [`Ctx::detect_in`]
    /// imports its buffer again).
    pub(super) fn release_own(&mut self, rknn: &Rknn) {
        if let Some(mem) = self.own.take().and_then(|o| o.mem) {
            // SAFETY: made by create_mem_from_fd on this context, destroyed once (taken).
            if let Err(e) = unsafe { rknn.destroy_mem(self.ctx, mem) } {
                log::warn!("{e}");
            }
        }
    }

    /// Runs the model input in `buf`, a buffer its caller keeps for many runs: imported into
    /// this context at its first run (`rknn_create_mem_from_fd`), bound with
    /// `rknn_set_io_mem` as a scaler buffer is, and read in place. `Ok(None)` when the
    /// runtime cannot import it (the caller maps it and uses [`Ctx::detect`]).
    pub(super) fn detect_in(
        &mut self,
        rknn: &Rknn,
        m: &Model,
        buf: &DmaBuf,
        layout: &FrameLayout,
    ) -> Result<Option<Vec<Detection>>> {
        m.check_bound_layout(layout)?;
        let st = nix::sys::stat::fstat(buf.fd().as_raw_fd()).context("fstat of the model input buffer")?;
        let id = (st.st_dev as u64, st.st_ino as u64);
        if self.own.as_ref().map(|o| o.id) != Some(id) {
            self.release_own(rknn);
            let need = m.input_attr.size_with_stride;
            let fd = buf.fd().try_clone_to_owned().context("dup of the model input buffer's fd for the NPU")?;
            let mem = match rknn.create_mem_from_fd(self.ctx, fd.as_raw_fd(), need, 0) {
                Ok(mem) if buf.size() >= u64::from(need) => Some(mem),
                Ok(mem) => {
                    // SAFETY: just made on this context, never used.
                    let _ = unsafe { rknn.destroy_mem(self.ctx, mem) };
                    None
                }
                Err(e) => {
                    log::info!(
                        "{e} for the service's model input ({}): clients' pictures go through rknn_inputs_set",
                        buf.kind()
                    );
                    None
                }
            };
            self.own = Some(OwnInput { id, _fd: fd, mem });
        }
        let Some(mem) = self.own.as_ref().and_then(|o| o.mem) else { return Ok(None) };
        let mut attr = m.input_attr;
        // SAFETY: `mem` is a live mem of this context (destroyed only by release_own, which
        // needs `&mut self`).
        unsafe { rknn.set_io_mem(self.ctx, mem, &mut attr) }.context("binding the service's model input to the NPU")?;
        self.run_and_decode(rknn, m).map(Some)
    }

    /// The core it is pinned to (`None`: the runtime's choice).
    pub(super) fn core(&self) -> Option<u32> {
        (self.mask != sys::RKNN_NPU_CORE_AUTO && self.mask.count_ones() == 1).then(|| self.mask.trailing_zeros())
    }

    /// `RKNN context <id>` plus its core, for logs and errors.
    fn describe(&self) -> String {
        match self.mask {
            sys::RKNN_NPU_CORE_AUTO => format!("RKNN context {}", self.ctx),
            m => format!("RKNN context {} on NPU core {}", self.ctx, m.trailing_zeros()),
        }
    }

    /// Binds pool buffer `index` (imported into this context) as the input and runs it.
    pub(super) fn detect_bound(
        &mut self,
        rknn: &Rknn,
        m: &Model,
        index: u32,
        layout: &FrameLayout,
    ) -> Result<Vec<Detection>> {
        m.check_bound_layout(layout)?;
        let mem = *self.mems.get(index as usize).with_context(|| {
            format!("buffer index {index} was not imported into the NPU (bind_pool saw {})", self.mems.len())
        })?;
        let mut attr = m.input_attr;
        // SAFETY: `mem` is a live mem of this context (destroyed only in release_mems/Drop,
        // which need the whole detector, so no lane borrows it then).
        unsafe { rknn.set_io_mem(self.ctx, mem, &mut attr) }
            .with_context(|| format!("binding scaler buffer {index} as the NPU input"))?;
        self.run_and_decode(rknn, m)
    }

    /// Packs the rows of a CPU-mapped frame and feeds them with `rknn_inputs_set`.
    pub(super) fn detect(
        &mut self,
        rknn: &Rknn,
        m: &Model,
        input: &[u8],
        layout: &FrameLayout,
    ) -> Result<Vec<Detection>> {
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

    /// Runs the current input and decodes the outputs (`rknn_run`, `rknn_outputs_get` of
    /// every output into `raw`, the head on them in their own types, NMS).
    fn run_and_decode(&mut self, rknn: &Rknn, m: &Model) -> Result<Vec<Detection>> {
        let start = Instant::now();
        let ran = rknn.run(self.ctx);
        self.last_run = Some((start, Instant::now()));
        ran.with_context(|| format!("RKNN model {}", m.path.display()))?;
        if self.raw.len() != m.output_bytes.len() {
            self.raw = m.output_bytes.iter().map(|n| vec![0u32; n.div_ceil(4)]).collect();
        }
        let mut bufs: Vec<&mut [u8]> = self
            .raw
            .iter_mut()
            .zip(&m.output_bytes)
            .map(|(w, &n)| &mut bytemuck::cast_slice_mut::<u32, u8>(w)[..n])
            .collect();
        let written = rknn.outputs_into(self.ctx, &mut bufs)?;
        for (i, (&n, &need)) in written.iter().zip(&m.output_bytes).enumerate() {
            ensure!(
                n >= need,
                "rknn_outputs_get gave {n} bytes for output {i}; model {} needs {need}",
                m.path.display()
            );
        }
        let tensors = self
            .raw
            .iter()
            .zip(&m.output_bytes)
            .zip(m.decoder.outputs())
            .map(|((w, &n), info)| TensorRef::from_bytes(&bytemuck::cast_slice::<u32, u8>(w)[..n], info.dtype))
            .collect::<Result<Vec<_>>>()?;
        m.decoder.decode(&tensors).with_context(|| format!("RKNN model {}", m.path.display()))
    }
}

/// One context of an [`RknnDetector`] lent to a worker thread ([`Detector::lanes`]): it runs
/// frames on that context only, with its own output buffers.
pub(super) struct RknnLane<'a> {
    pub(super) rknn: &'a Rknn,
    pub(super) model: &'a Model,
    pub(super) ctx: &'a mut Ctx,
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

    fn detect_in(&mut self, buf: &DmaBuf, layout: &FrameLayout) -> Result<Option<Vec<Detection>>> {
        self.ctx.detect_in(self.rknn, self.model, buf, layout)
    }

    fn core(&self) -> Option<u32> {
        self.ctx.core()
    }

    fn last_run(&self) -> Option<(Instant, Instant)> {
        self.ctx.last_run
    }
}

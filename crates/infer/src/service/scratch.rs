//! How a client's buffer becomes the model's input on an engine's thread (`--serve-scaler`).
//!
//! With RGA (on a board), each engine's thread has its own [`RgaJobs`] and its own model
//! input: a dma-buf from an RGA-reachable heap (dma32 or CMA where RAM lies above 4 GiB),
//! imported into RGA once and into the engine at its first run ([`DetectorLane::detect_in`]:
//! an RKNN context binds it with `rknn_set_io_mem`, as it binds a scaler buffer). A client's
//! dma-buf is imported into RGA at its first request and converted in place: no CPU touches
//! a pixel. Memory RGA cannot import (a memfd, a decoded JPEG or PNG) goes to RGA through
//! virtual addresses, into CPU memory the engine is then given (`rknn_inputs_set`). Without
//! RGA, or for a picture RGA refuses, the CPU letterboxes it as the pipeline's `cpu` scaler
//! does. Imports of buffers whose clients let them go are released at the thread's next job.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use anyhow::Context;

use zcpipe_convert::letterbox::Letterboxer;
use zcpipe_convert::rga::{rga_heap, RgaCore, RgaJobs, RgaScaler};
use zcpipe_core::dmabuf::{Allocator, DmaBuf, HeapChoice};
use zcpipe_core::frame::{FrameLayout, LetterboxParams};
use zcpipe_sys::board;
use zcpipe_sys::rga::RgaBufferHandle;

use super::conn::ClientBuf;
use super::{ServiceScaler, Totals};
use crate::{Detection, DetectorLane, InputSpec};

/// Most bytes the decoder of a client's encoded picture may allocate (a 4096x4096 RGBA
/// picture and its RGB copy fit).
const DECODE_ALLOC: u64 = 160 << 20;

/// `--serve-scaler` resolved when the service binds: whether RGA letterboxes clients'
/// buffers. `rga` without a reachable RGA is an error naming the fix; `auto` says why it
/// takes the CPU.
pub(super) fn resolve(choice: ServiceScaler) -> anyhow::Result<bool> {
    if choice == ServiceScaler::Cpu {
        log::info!("inference service: clients' pictures are letterboxed on the CPU (--serve-scaler cpu)");
        return Ok(false);
    }
    if choice == ServiceScaler::Auto {
        // As the scale stage's `--scaler auto`: RGA only where its device node opens.
        let dev = board::path("/dev/rga");
        if let Err(e) = std::fs::OpenOptions::new().read(true).write(true).open(&dev) {
            log::info!(
                "inference service: clients' pictures are letterboxed on the CPU ({} does not open: {})",
                dev.display(),
                zcpipe_sys::errno_words(&e)
            );
            return Ok(false);
        }
    }
    match RgaScaler::open(None, RgaCore::Auto) {
        Ok(_) => {
            log::info!("inference service: clients' pictures are letterboxed by RGA (dma-bufs in place, other memory by address)");
            Ok(true)
        }
        Err(e) if choice == ServiceScaler::Rga => Err(e.context("--serve-scaler rga")),
        Err(e) => {
            let why = format!("{e:#}");
            log::info!(
                "inference service: clients' pictures are letterboxed on the CPU (no RGA: {})",
                why.split(';').next().unwrap_or(&why)
            );
            Ok(false)
        }
    }
}

/// Where a job's model input ended up.
pub(super) enum Input {
    /// In [`Scratch::input`] (CPU memory).
    Cpu,
    /// In the RGA lane's model-input dma-buf.
    Device,
}

/// One client buffer RGA has seen on this thread.
struct Seen {
    buf: Weak<ClientBuf>,
    /// Its RGA handle; `None`: RGA cannot import it (a memfd), it goes by address.
    handle: Option<RgaBufferHandle>,
    /// RGA refused a job on it once (logged): the CPU letterboxes it from then on.
    refused: bool,
}

/// RGA on one engine's thread.
struct RgaLane {
    jobs: RgaJobs,
    /// The model input RGA writes and the engine reads, and its RGA handle (`None`: no
    /// buffer RGA can import here; every job goes by address).
    out: Option<(DmaBuf, RgaBufferHandle)>,
    seen: Vec<Seen>,
}

impl RgaLane {
    /// Opens RGA for this thread and makes its model input laid out as `layout`.
    fn open(layout: &FrameLayout) -> anyhow::Result<RgaLane> {
        let mut jobs = RgaJobs::new(RgaScaler::open_quietly(None, RgaCore::Auto)?);
        let out = match model_input(&mut jobs, layout) {
            Ok(o) => Some(o),
            Err(e) => {
                log::info!("inference service: {e:#}; RGA reaches clients' buffers by address");
                None
            }
        };
        Ok(RgaLane { jobs, out, seen: Vec::new() })
    }

    /// Releases the imports of buffers no client holds any more; the entry for `buf`.
    fn entry(&mut self, buf: &Arc<ClientBuf>) -> usize {
        let jobs = &mut self.jobs;
        self.seen.retain(|s| {
            let live = s.buf.strong_count() > 0;
            if let (false, Some(h)) = (live, s.handle) {
                jobs.release(h);
            }
            live
        });
        if let Some(i) = self.seen.iter().position(|s| std::ptr::eq(s.buf.as_ptr(), Arc::as_ptr(buf))) {
            return i;
        }
        // A raw frame is imported when the model input is (one job's images are all
        // handles or all addresses); the driver refuses what is not a dma-buf (a memfd).
        let handle = match (&self.out, buf.layout.is_some()) {
            (Some(_), true) => self
                .jobs
                .import_source("a client's buffer", &buf.buf)
                .map_err(|e| log::debug!("inference service: {e:#}: RGA reads this client's buffer by address"))
                .ok(),
            _ => None,
        };
        self.seen.push(Seen { buf: Arc::downgrade(buf), handle, refused: false });
        self.seen.len() - 1
    }
}

/// A model input RGA can write: allocated from the heap RGA reaches, imported into RGA.
fn model_input(jobs: &mut RgaJobs, layout: &FrameLayout) -> anyhow::Result<(DmaBuf, RgaBufferHandle)> {
    let heap_dir = board::path("/dev/dma_heap");
    let heap = rga_heap(HeapChoice::Auto, &heap_dir, false);
    let alloc = Allocator::open(heap.choice, &heap_dir, &board::path("/dev/udmabuf"), &board::path("/dev/dri"))
        .context("no heap for the service's model input")?;
    let buf = alloc.allocate(layout.bytes_needed()).context("allocating the service's model input")?;
    let h = jobs.import_output("the service's model input", &buf, layout)?;
    log::debug!("inference service: model input of {} bytes from {} imported into RGA", buf.size(), alloc.describe());
    Ok((buf, h))
}

/// What an engine's thread keeps between clients' jobs: the CPU letterbox, CPU memory for
/// a model input, and RGA when the service uses it.
#[derive(Default)]
pub(crate) struct Scratch {
    lb: Letterboxer,
    input: Vec<u8>,
    /// `None` until the first job with RGA on; `Some(None)`: RGA did not open here.
    rga: Option<Option<RgaLane>>,
}

impl Scratch {
    /// The model input's layout, the CPU buffer sized for it.
    pub(super) fn prepare(&mut self, spec: &InputSpec) -> FrameLayout {
        let bpl = if spec.bytesperline > 0 { spec.bytesperline } else { spec.width * 3 };
        let l = FrameLayout::packed24(spec.fourcc, spec.width, spec.height, bpl);
        self.input.resize(l.bytes_needed() as usize, 0);
        l
    }

    /// Runs `lane` on the model input [`Scratch::bring`] filled (`input` as
    /// [`Scratch::prepare`] laid it out). Errors are the engine's.
    pub(super) fn run(
        &mut self,
        lane: &mut (dyn DetectorLane + '_),
        at: Input,
        input: &FrameLayout,
    ) -> anyhow::Result<Vec<Detection>> {
        match at {
            Input::Cpu => lane.detect(&self.input, input),
            Input::Device => {
                let Some(Some(RgaLane { out: Some((out, _)), .. })) = &self.rga else {
                    anyhow::bail!("the service's model input is gone");
                };
                match lane.detect_in(out, input)? {
                    Some(d) => Ok(d),
                    None => {
                        let g = out.read()?;
                        lane.detect(g.bytes(), input)
                    }
                }
            }
        }
    }

    /// The client's picture into the model input: by RGA when on and it takes the picture,
    /// else on the CPU. Errors are the picture's (its client is told).
    pub(super) fn bring(
        &mut self,
        buf: &Arc<ClientBuf>,
        input: &FrameLayout,
        spec: &InputSpec,
        rga: bool,
        totals: &Totals,
    ) -> anyhow::Result<(LetterboxParams, Input)> {
        if rga {
            if self.rga.is_none() {
                self.rga = Some(
                    RgaLane::open(input)
                        .map_err(|e| {
                            log::warn!(
                                "inference service: {e:#}; this engine's clients' pictures are letterboxed on the CPU"
                            )
                        })
                        .ok(),
                );
            }
            if let Some(Some(r)) = self.rga.as_mut() {
                if let Some(done) = by_rga(r, buf, &mut self.input, input, spec, totals)? {
                    return Ok(done);
                }
            }
        }
        let lb = self.letterbox_cpu(buf, input, spec)?;
        totals.cpu_letterbox.fetch_add(1, Ordering::Relaxed);
        Ok((lb, Input::Cpu))
    }

    /// The client's picture into the model input, as the pipeline's CPU scaler does.
    fn letterbox_cpu(
        &mut self,
        buf: &ClientBuf,
        input: &FrameLayout,
        spec: &InputSpec,
    ) -> anyhow::Result<LetterboxParams> {
        let (lb, out) = (&mut self.lb, &mut self.input);
        with_frame(buf, |bytes, l| lb.scale_bytes(&[bytes], l, out, input, spec.letterbox))?
    }
}

/// Runs `f` on the client's picture as a raw frame and its layout: the buffer's bytes read
/// under its guard, or its encoded picture decoded to NV12 (the guard dropped first). The
/// error is the picture's (unreadable, undecodable); `f`'s result is returned as it is.
fn with_frame<T>(buf: &ClientBuf, f: impl FnOnce(&[u8], &FrameLayout) -> T) -> anyhow::Result<T> {
    let guard = buf.buf.read()?;
    let bytes = guard.bytes().get(..buf.spec.size as usize).unwrap_or(guard.bytes());
    match &buf.layout {
        Some(l) => Ok(f(bytes, l)),
        None => {
            let (l, nv12) = decode(bytes)?;
            drop(guard);
            Ok(f(&nv12, &l))
        }
    }
}

/// An encoded picture decoded to NV12, as the capture stage's `image:` source does.
fn decode(bytes: &[u8]) -> anyhow::Result<(FrameLayout, Vec<u8>)> {
    let rgb = zcpipe_convert::still::decode_rgb8_bytes(bytes, DECODE_ALLOC)?;
    zcpipe_convert::still::rgb8_to_nv12(rgb.as_raw(), rgb.width(), rgb.height())
}

/// One RGA job for `buf`: in place when both it and the model input are imported, else
/// by address into `cpu_input`. `Ok(None)`: RGA will not take this picture (it refused it
/// once, logged): the CPU letterboxes it. `Err`: the picture itself is bad (its client is
/// told).
fn by_rga(
    r: &mut RgaLane,
    buf: &Arc<ClientBuf>,
    cpu_input: &mut [u8],
    input: &FrameLayout,
    spec: &InputSpec,
    totals: &Totals,
) -> anyhow::Result<Option<(LetterboxParams, Input)>> {
    let i = r.entry(buf);
    if r.seen[i].refused {
        return Ok(None);
    }
    let done = match (r.seen[i].handle, buf.layout, r.out.as_mut()) {
        (Some(src), Some(l), Some((out, dst))) => {
            r.jobs.convert(src, &l, *dst, out, spec.letterbox).map(|lb| (lb, Input::Device, &totals.rga_in_place))
        }
        _ => by_address(&mut r.jobs, buf, cpu_input, input, spec)?.map(|lb| (lb, Input::Cpu, &totals.rga_by_address)),
    };
    match done {
        Ok((lb, at, counter)) => {
            counter.fetch_add(1, Ordering::Relaxed);
            Ok(Some((lb, at)))
        }
        Err(e) => {
            log::warn!(
                "inference service: RGA refused a {:?} buffer of {} bytes: {e:#}; the CPU letterboxes it",
                buf.spec.format,
                buf.spec.size
            );
            r.seen[i].refused = true;
            Ok(None)
        }
    }
}

/// RGA through virtual addresses: the client's raw frame read under its guard, or its
/// encoded picture decoded first. The outer error is the picture's, the inner one RGA's.
fn by_address(
    jobs: &mut RgaJobs,
    buf: &ClientBuf,
    cpu_input: &mut [u8],
    input: &FrameLayout,
    spec: &InputSpec,
) -> anyhow::Result<anyhow::Result<LetterboxParams>> {
    with_frame(buf, |bytes, l| jobs.convert_virtual(bytes, l, cpu_input, input, spec.letterbox))
}

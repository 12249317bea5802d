//! `--scaler rga`: Rockchip's RGA converts and resizes, through librga's im2d API.
//!
//! librga is opened at run time ([`zcpipe_sys::rga`]; `$ZCPIPE_LIBRGA`, else `librga.so`),
//! never linked, so one zcpipe binary runs on boards with and without it. The life of a
//! [`RgaScaler`] follows the scale stage's `Scaler` (a backend that binds the pools; in
//! `--copy-mode` one that maps frames, [`RgaScaler::use_virtual_addresses`]):
//! - [`RgaScaler::open`] loads librga, logs its version (`querystring(RGA_VERSION)`) and
//!   keeps the `--rga-core` choice;
//! - [`RgaScaler::bind`] imports every source buffer and every output buffer once
//!   (`importbuffer_fd`: the driver maps each dma-buf once and keeps it, so there is no
//!   `wrapbuffer_fd`/`wrapbuffer_virtualaddr` per frame, which is also what hides the 4 GiB
//!   limit until a job lands on RGA2: PITFALLS 14), builds each image's `rga_buffer_t` once
//!   (`wrapbuffer_handle_t`), validates the job with `imcheck_t` and turns a failure into one
//!   error naming the rule (8-bit YUV width stride a multiple of 16 on RGA3, even sizes and
//!   offsets for YUV, scale factor within 1/16..16: PITFALLS 8-11), pins the core
//!   (`imconfig(IM_CONFIG_SCHEDULER_CORE)`: PITFALLS 15) and fills the letterbox pad of every
//!   output buffer once through a CPU write guard (the device never writes it);
//! - [`RgaScaler::scale`] is one `improcess` per frame: NV12/NV16/YUYV/RGB24/BGR24 ->
//!   RGB24 or BGR24 (`RK_FORMAT_RGB_888` / `BGR_888`, the order the model wants; BT.601
//!   limited range for YCbCr) resized into the picture's rectangle of the model input, at
//!   the top-left or centred ([`Letterbox::params`]; librga refuses a rectangle offset of 1
//!   pixel, `rga_check_info`, so such a centred picture starts at 2 and its boxes map back
//!   through that), synchronous;
//! - drop releases every handle (`releasebuffer_handle`).
//!
//! RGA2 addresses only the first 4 GiB (PITFALLS 1): RGA-facing pools should come from a
//! dma32 or CMA heap; [`rga_heap`] picks one and says why, for the stages that allocate.
//!
//! The module is split along those seams: `core` ([`RgaCore`], `--rga-core`), `image` (how
//! a frame layout looks to RGA, and the job's rectangles), `diagnose` (an `imcheck_t` failure
//! turned into the rule it broke), `heap` ([`rga_heap`]), `jobs` ([`RgaJobs`]: one-off jobs
//! on buffers that come and go, for the inference service); this file holds [`RgaScaler`].

use std::ffi::c_int;
use std::path::Path;
use std::thread::ThreadId;

use anyhow::{anyhow, bail, Context, Result};

use crate::{fill_pad, map_frame};
use zcpipe_core::config::Choice;
use zcpipe_core::dmabuf::{DmaBuf, HeapChoice};
use zcpipe_core::frame::{Fourcc, FrameLayout, Letterbox, LetterboxParams};
use zcpipe_core::pool::{Frame, WriteLoan};
use zcpipe_sys::rga as sys;
use zcpipe_sys::rga::{ImRect, Librga, RgaBuffer, RgaBufferHandle};

mod core;
mod diagnose;
mod heap;
mod image;
mod jobs;
#[cfg(test)]
mod tests;

pub use self::core::RgaCore;
use diagnose::diagnose;
pub use heap::{rga_heap, RgaHeap};
use image::{dest_image, job_rects, source_image, whole_buffer_image, Image};
pub use jobs::RgaJobs;

/// One imported image: its handle and the `rga_buffer_t` librga built for it.
#[derive(Debug)]
struct Bound {
    buf: RgaBuffer,
}

// SAFETY: the only non-Send fields of `rga_buffer_t` are its `vir_addr`/`phy_addr`
// pointers, which [`RgaScaler::bind`] checks are null (wrapbuffer_handle_t sets neither);
// zcpipe never dereferences them and librga does not for handle-based images.
unsafe impl Send for Bound {}

/// `--scaler rga`: RGA through librga's im2d API. See the module docs for its life cycle.
pub struct RgaScaler {
    lib: Librga,
    core: RgaCore,
    /// The thread `imconfig` last ran on (librga keeps the core choice per thread).
    configured_on: Option<ThreadId>,
    version: String,
    /// Every handle imported (released on drop).
    handles: Vec<RgaBufferHandle>,
    src: Vec<Bound>,
    dst: Vec<Bound>,
    srect: ImRect,
    drect: ImRect,
    letterbox: Option<LetterboxParams>,
    /// After [`RgaScaler::bind_variable`]: the per-frame state.
    var: Option<VarState>,
    frames: u64,
    /// `--copy-mode`: RGA is fed CPU memory through virtual addresses (the model input and
    /// its letterbox kept here at bind), nothing imported.
    virtual_addresses: Option<Option<(FrameLayout, Letterbox)>>,
}

/// A source whose frames change size: each source buffer is imported at its first frame
/// (again only if a later frame needs more bytes or another format), each output buffer's
/// pad is refilled only when the picture written into it moves or changes size.
struct VarState {
    d: Image,
    dst_layout: FrameLayout,
    letterbox: Letterbox,
    /// Per source buffer: its handle and the image it was imported as.
    src: Vec<Option<(RgaBufferHandle, Image)>>,
    /// Per output buffer: the picture `(x, y, w, h)` last written (its pad matches it).
    picture: Vec<Option<(u32, u32, u32, u32)>>,
    /// The last source image `imcheck_t` accepted.
    checked: Option<Image>,
}

impl std::fmt::Debug for RgaScaler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RgaScaler")
            .field("lib", &self.lib.path())
            .field("core", &self.core)
            .field("handles", &self.handles.len())
            .finish()
    }
}

/// `querystring(RGA_VERSION)` ("RGA_api version : v1.10.3\nRGA version : RGA_2_Enhance
/// RGA_3\n") as one line: "librga v1.10.3, RGA_2_Enhance RGA_3".
fn version_line(q: &str) -> Option<String> {
    let (mut api, mut hw) = (None, None);
    for line in q.lines() {
        if let Some((k, v)) = line.split_once(':') {
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
            if k.contains("api") {
                api = Some(v.to_string());
            } else if k.contains("version") {
                hw = Some(v.to_string());
            }
        }
    }
    match (api, hw) {
        (Some(a), Some(h)) => Some(format!("librga {a}, {h}")),
        (Some(a), None) => Some(format!("librga {a}")),
        _ => None,
    }
}

impl RgaScaler {
    /// Loads librga (`library`, else `$ZCPIPE_LIBRGA`, else `librga.so` / `librga.so.2`)
    /// and keeps `core` for [`RgaScaler::bind`]. Logs the librga and RGA versions.
    /// Errors name the library tried and the fix.
    pub fn open(library: Option<&Path>, core: RgaCore) -> Result<RgaScaler> {
        RgaScaler::open_logged(library, core, log::Level::Info)
    }

    /// As [`RgaScaler::open`], the versions logged at debug level: one more instance in a
    /// process that said them once.
    pub fn open_quietly(library: Option<&Path>, core: RgaCore) -> Result<RgaScaler> {
        RgaScaler::open_logged(library, core, log::Level::Debug)
    }

    fn open_logged(library: Option<&Path>, core: RgaCore, level: log::Level) -> Result<RgaScaler> {
        let lib = Librga::open(library)?;
        // Probe the driver before anything else: librga 1.10.3's querystring() dereferences
        // a null session and crashes when /dev/rga cannot be opened (seen with its aarch64
        // build under qemu), while imcheck_t answers IM_STATUS_NO_SESSION. The probe is a
        // job RGA always accepts (64x64 RGBA8888 copy, no buffer: checks never touch one).
        let probe = RgaBuffer {
            width: 64,
            height: 64,
            wstride: 64,
            hstride: 64,
            format: sys::RK_FORMAT_RGBA_8888,
            ..RgaBuffer::default()
        };
        let whole = ImRect { x: 0, y: 0, width: 64, height: 64 };
        let st = lib.imcheck_t(probe, probe, RgaBuffer::default(), whole, whole, ImRect::default(), 0);
        if st == sys::IM_STATUS_NO_SESSION || st == sys::IM_STATUS_FAILED {
            bail!(
                "rga scaler: librga ({}) cannot reach the RGA driver: {}: {}; check that the RGA kernel driver is loaded and \
                 /dev/rga is readable and writable by this user (install udev/99-zcpipe.rules and join the zcpipe group), \
                 or use --scaler cpu",
                lib.path(),
                sys::status_name(st),
                lib.im_str_error(st).trim().trim_end_matches('.')
            );
        }
        let q = lib.querystring(sys::RGA_VERSION);
        let version = match version_line(&q) {
            Some(v) => v,
            None => {
                log::warn!(
                    "librga ({}) could not describe the RGA hardware ({:?}); is /dev/rga present and readable? \
                     (udev/99-zcpipe.rules, group zcpipe)",
                    lib.path(),
                    q.trim()
                );
                "librga, RGA unknown".to_string()
            }
        };
        log::log!(level, "rga: {} from {}; core {}", version, lib.path(), core.name());
        Ok(RgaScaler {
            lib,
            core,
            configured_on: None,
            version,
            handles: Vec::new(),
            src: Vec::new(),
            dst: Vec::new(),
            srect: ImRect::default(),
            drect: ImRect::default(),
            letterbox: None,
            var: None,
            frames: 0,
            virtual_addresses: None,
        })
    }

    /// Whether this backend can turn `src` frames into `dst` at all (formats and the model
    /// input's plane), before any buffer exists; the error names both sides.
    /// [`RgaScaler::bind`] checks the full geometry.
    pub fn check(src: Fourcc, dst: &FrameLayout) -> Result<()> {
        dest_image(dst)?;
        match src {
            Fourcc::NV12 | Fourcc::NV16 | Fourcc::YUYV | Fourcc::RGB24 | Fourcc::BGR24 => Ok(()),
            _ => {
                let l = FrameLayout { fourcc: src, ..FrameLayout::default() };
                source_image(&l).map(|_| ())
            }
        }
    }

    /// The librga opened (a path or a soname).
    pub fn library(&self) -> &str {
        self.lib.path()
    }

    /// Frames converted so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Applies `--rga-core` on the calling thread, once per thread.
    fn apply_core(&mut self) -> Result<()> {
        let Some(mask) = self.core.mask() else { return Ok(()) };
        let me = std::thread::current().id();
        if self.configured_on == Some(me) {
            return Ok(());
        }
        let s = self.lib.imconfig(sys::IM_CONFIG_SCHEDULER_CORE, mask);
        if !sys::status_ok(s) {
            bail!(
                "rga scaler: --rga-core {} (imconfig IM_CONFIG_SCHEDULER_CORE {mask:#x}) failed: {}: {}; this RGA may not have that \
                 core (RK3568/RK3566 have only rga2-core0), use --rga-core auto",
                self.core.name(),
                sys::status_name(s),
                self.lib.im_str_error(s).trim()
            );
        }
        self.configured_on = Some(me);
        Ok(())
    }

    fn release_all(&mut self) {
        for h in self.handles.drain(..) {
            let s = self.lib.releasebuffer_handle(h);
            if !sys::status_ok(s) {
                log::warn!("rga: releasebuffer_handle({h}) failed: {}", sys::status_name(s));
            }
        }
        self.src.clear();
        self.dst.clear();
        self.letterbox = None;
        self.var = None;
    }

    /// Releases one handle now (a source buffer re-imported for a larger frame).
    fn release_handle(&mut self, h: RgaBufferHandle) {
        let s = self.lib.releasebuffer_handle(h);
        if !sys::status_ok(s) {
            log::warn!("rga: releasebuffer_handle({h}) failed: {}", sys::status_name(s));
        }
        self.handles.retain(|x| *x != h);
    }

    /// `imcheck_t` of one job (no pattern, no usage flags); a failure becomes the one error
    /// `explain(status, librga's message)` names.
    fn check_job(
        &self,
        s: RgaBuffer,
        d: RgaBuffer,
        srect: ImRect,
        drect: ImRect,
        explain: impl FnOnce(sys::ImStatus, &str) -> String,
    ) -> Result<()> {
        let status = self.lib.imcheck_t(s, d, RgaBuffer::default(), srect, drect, ImRect::default(), 0);
        if !sys::status_ok(status) {
            bail!("{}", explain(status, &self.lib.im_str_error(status)));
        }
        Ok(())
    }

    /// One synchronous `improcess`; the error names the buffers and the 4 GiB fix.
    fn run_job(
        &mut self,
        s: RgaBuffer,
        d: RgaBuffer,
        srect: ImRect,
        drect: ImRect,
        src_index: u32,
        dst_index: u32,
    ) -> Result<()> {
        self.apply_core()?;
        let status = self.lib.improcess(s, d, RgaBuffer::default(), srect, drect, ImRect::default(), sys::IM_SYNC);
        if !sys::status_ok(status) {
            bail!(
                "rga scaler: improcess of source buffer {src_index} into output buffer {dst_index} failed: {}: {}; if the kernel \
                 log says \"RGA_MMU unsupported memory larger than 4G\", the pools sit above 4 GiB where RGA2 cannot reach: \
                 allocate them from a dma32 or CMA heap (--heap dma32 / cma) or pin an RGA3 core (--rga-core rga3-core0)",
                sys::status_name(status),
                self.lib.im_str_error(status).trim().trim_end_matches('.')
            );
        }
        self.frames += 1;
        Ok(())
    }

    fn bind_variable_inner(
        &mut self,
        src: &[Vec<DmaBuf>],
        dst: &mut [DmaBuf],
        dst_layout: &FrameLayout,
        letterbox: Letterbox,
    ) -> Result<()> {
        let src_count = src.len();
        let d = dest_image(dst_layout)?;
        if src_count == 0 || dst.is_empty() {
            bail!(
                "rga scaler: {src_count} source buffers and {} output buffers; both pools need at least one",
                dst.len()
            );
        }
        dst_layout.validate(&[dst[0].size()]).map_err(|e| anyhow!("rga scaler: model input: {e}"))?;
        for (j, buf) in dst.iter().enumerate() {
            let b = self.import(&format!("output buffer {j}"), buf, &d)?;
            self.dst.push(b);
        }
        // Each source buffer once, described as a whole-buffer image: each frame's geometry
        // is then set on its handle (wrapbuffer_handle_t, no ioctl).
        let mut srcs = Vec::with_capacity(src_count);
        for (i, bufs) in src.iter().enumerate() {
            let buf = bufs.first().ok_or_else(|| anyhow!("rga scaler: source buffer {i} has no dma-buf"))?;
            let img = whole_buffer_image(buf.size())
                .ok_or_else(|| anyhow!("rga scaler: source buffer {i} of {} bytes is too small", buf.size()))?;
            let b = self.import(&format!("source buffer {i}"), buf, &img)?;
            srcs.push(Some((b.buf.handle, img)));
        }
        self.apply_core()?;
        self.var = Some(VarState {
            d,
            dst_layout: *dst_layout,
            letterbox,
            src: srcs,
            picture: vec![None; dst.len()],
            checked: None,
        });
        log::info!(
            "rga: the source names no fixed frame format (host sources may change size per frame): {} output buffers ({} {}x{}) and \
             {src_count} source buffers (whole buffers) imported once; each frame's geometry is set on its handle",
            self.dst.len(),
            dst_layout.fourcc,
            d.width,
            d.height
        );
        Ok(())
    }

    /// One `improcess` of a frame of any size (after [`RgaScaler::bind_variable`]): its
    /// source buffer imported if this is its first frame (or re-imported if it needs more
    /// bytes or another format), its geometry described on the handle
    /// (`wrapbuffer_handle_t`, no ioctl), `imcheck_t` when the geometry changes, the
    /// output's pad refilled when the picture size changes.
    fn scale_frame(
        &mut self,
        src_index: u32,
        src: &[DmaBuf],
        src_layout: &FrameLayout,
        dst_index: u32,
        dst: &mut DmaBuf,
    ) -> Result<LetterboxParams> {
        let (si, di) = (src_index as usize, dst_index as usize);
        let var = self.var.as_ref().ok_or_else(|| anyhow!("rga scaler: scale_frame before bind_variable"))?;
        let (d, dst_layout, letterbox) = (var.d, var.dst_layout, var.letterbox);
        let (ns, nd) = (var.src.len(), self.dst.len());
        if si >= ns || di >= nd {
            bail!("rga scaler: buffer index out of range: source {src_index} of {ns}, output {dst_index} of {nd}");
        }
        let s = source_image(src_layout)?;
        let sizes: Vec<u64> = src.iter().map(|b| b.size()).collect();
        src_layout.validate(&sizes).map_err(|e| anyhow!("rga scaler: source {} frame: {e}", src_layout.fourcc))?;
        let buf = src.first().ok_or_else(|| anyhow!("rga scaler: source buffer {src_index} has no dma-buf"))?;
        let handle = match var.src[si] {
            // The import only sized the driver's mapping: any format fits in it.
            Some((h, img)) if img.bytes >= s.bytes => h,
            old => {
                if let Some((h, _)) = old {
                    self.release_handle(h);
                }
                let b = self.import(&format!("source buffer {src_index}"), buf, &s)?;
                let h = b.buf.handle;
                if let Some(v) = self.var.as_mut() {
                    v.src[si] = Some((h, s));
                }
                h
            }
        };
        let to_int = |v: u32| c_int::try_from(v).map_err(|_| anyhow!("rga scaler: source size {v} out of range"));
        // Describing this frame's geometry on the imported handle is a struct fill, no ioctl.
        let sbuf = self.lib.wrapbuffer_handle_t(
            handle,
            to_int(s.width)?,
            to_int(s.height)?,
            to_int(s.wstride)?,
            to_int(s.hstride)?,
            s.format,
        );
        let mut dbuf = self.dst[di].buf;
        dbuf.color_space_mode = if s.yuv { sys::IM_YUV_TO_RGB_BT601_LIMIT } else { 0 };
        let lb = rga_letterbox(letterbox, &s, &d);
        let (srect, drect) = job_rects(&s, &lb);
        if self.var.as_ref().and_then(|v| v.checked) != Some(s) {
            self.check_job(sbuf, dbuf, srect, drect, |st, msg| {
                diagnose(src_layout.fourcc, &s, dst_layout.fourcc, &d, &lb, st, msg)
            })?;
            if let Some(v) = self.var.as_mut() {
                v.checked = Some(s);
            }
        }
        let picture = lb.picture();
        if self.var.as_ref().map(|v| v.picture[di]) != Some(Some(picture)) {
            // A picture elsewhere than the last one in this buffer leaves old pixels where
            // the pad now is: refill the pad (only when the picture moves or resizes).
            let bpl = dst_layout.planes[0].bytesperline as usize;
            let mut w = dst
                .write()
                .with_context(|| format!("rga scaler: refilling the letterbox pad of output buffer {dst_index}"))?;
            fill_pad(&mut w, bpl, (d.width as usize, d.height as usize), picture, letterbox.pad);
            drop(w);
            if let Some(v) = self.var.as_mut() {
                v.picture[di] = Some(picture);
            }
        }
        self.run_job(sbuf, dbuf, srect, drect, src_index, dst_index)?;
        Ok(lb)
    }

    /// Imports `buf` as `img` and wraps it; the handle is recorded for release first.
    fn import(&mut self, what: &str, buf: &DmaBuf, img: &Image) -> Result<Bound> {
        if buf.size() < img.bytes {
            bail!(
                "rga scaler: {what} is {} bytes but its image needs {} (width stride {} x height stride {}); RGA would fail with \
                 \"Only get buffer N byte, required M\" (PITFALLS 10): size buffers from V4L2 sizeimage",
                buf.size(),
                img.bytes,
                img.wstride,
                img.hstride
            );
        }
        let h = self.lib.importbuffer_fd(buf.fd(), img.handle_param()).ok_or_else(|| {
            anyhow!(
                "rga scaler: importbuffer_fd of {what} ({}, {} bytes) failed{}",
                buf.kind(),
                buf.size(),
                if buf.kind().needs_sync() {
                    "; check the kernel log (dmesg | grep -i rga) and that /dev/rga is readable"
                } else {
                    ": sealed memfds are not dma-bufs and the RGA driver cannot import them; use --heap dma32, cma or system"
                }
            )
        })?;
        self.handles.push(h);
        let to_int = |v: u32| c_int::try_from(v).map_err(|_| anyhow!("rga scaler: {what}: size {v} out of range"));
        let b = self.lib.wrapbuffer_handle_t(
            h,
            to_int(img.width)?,
            to_int(img.height)?,
            to_int(img.wstride)?,
            to_int(img.hstride)?,
            img.format,
        );
        // A librga whose rga_buffer_t differs from ours would scramble these fields.
        let expect =
            (h, img.width as c_int, img.height as c_int, img.wstride as c_int, img.hstride as c_int, img.format);
        if (b.handle, b.width, b.height, b.wstride, b.hstride, b.format) != expect
            || !b.vir_addr.is_null()
            || !b.phy_addr.is_null()
        {
            bail!(
                "rga scaler: {} returned an rga_buffer_t zcpipe does not understand (handle {} {}x{} stride {}x{} format {:#x}, \
                 expected handle {} {}x{} stride {}x{} format {:#x}); its im2d ABI differs from librga 1.8-1.10",
                self.lib.path(),
                b.handle,
                b.width,
                b.height,
                b.wstride,
                b.hstride,
                b.format,
                expect.0,
                expect.1,
                expect.2,
                expect.3,
                expect.4,
                expect.5
            );
        }
        Ok(Bound { buf: b })
    }

    fn bind_inner(
        &mut self,
        src: &[Vec<DmaBuf>],
        src_layout: &FrameLayout,
        dst: &mut [DmaBuf],
        dst_layout: &FrameLayout,
        letterbox: Letterbox,
    ) -> Result<()> {
        let s = source_image(src_layout)?;
        let d = dest_image(dst_layout)?;
        if src.is_empty() || dst.is_empty() {
            bail!(
                "rga scaler: {} source buffers and {} output buffers; both pools need at least one",
                src.len(),
                dst.len()
            );
        }
        let sizes: Vec<u64> = src[0].iter().map(|b| b.size()).collect();
        src_layout.validate(&sizes).map_err(|e| anyhow!("rga scaler: source {} frame: {e}", src_layout.fourcc))?;
        dst_layout.validate(&[dst[0].size()]).map_err(|e| anyhow!("rga scaler: model input: {e}"))?;
        let lb = rga_letterbox(letterbox, &s, &d);
        for (i, bufs) in src.iter().enumerate() {
            let buf = bufs.first().ok_or_else(|| anyhow!("rga scaler: source buffer {i} has no dma-buf"))?;
            let b = self.import(&format!("source buffer {i}"), buf, &s)?;
            self.src.push(b);
        }
        for (j, buf) in dst.iter().enumerate() {
            let mut b = self.import(&format!("output buffer {j}"), buf, &d)?;
            if s.yuv {
                // As librga's imcvtcolor does: the conversion mode rides on the destination.
                b.buf.color_space_mode = sys::IM_YUV_TO_RGB_BT601_LIMIT;
            }
            self.dst.push(b);
        }
        (self.srect, self.drect) = job_rects(&s, &lb);
        self.check_job(self.src[0].buf, self.dst[0].buf, self.srect, self.drect, |st, msg| {
            diagnose(src_layout.fourcc, &s, dst_layout.fourcc, &d, &lb, st, msg)
        })?;
        self.apply_core()?;

        let bpl = dst_layout.planes[0].bytesperline as usize;
        for (j, buf) in dst.iter_mut().enumerate() {
            let mut w =
                buf.write().with_context(|| format!("rga scaler: filling the letterbox pad of output buffer {j}"))?;
            fill_pad(&mut w, bpl, (d.width as usize, d.height as usize), lb.picture(), letterbox.pad);
        }
        self.letterbox = Some(lb);
        let (px, py, _, _) = lb.picture();
        log::info!(
            "rga: {} {}x{} (stride {}x{}) -> {} {}x{}, picture {}x{} at ({px},{py}) ({}), pad {}; {} source and {} output buffers imported once",
            src_layout.fourcc,
            s.width,
            s.height,
            s.wstride,
            s.hstride,
            dst_layout.fourcc,
            d.width,
            d.height,
            lb.resized_w,
            lb.resized_h,
            letterbox.placement.describe(),
            letterbox.pad,
            self.src.len(),
            self.dst.len()
        );
        Ok(())
    }
}

/// The letterbox of source image `s` in output image `d` as RGA can place it: `letterbox`'s
/// geometry, except that a picture offset of exactly 1 pixel, which librga refuses
/// ("unsupported operation of images smaller than 2 pixels", `rga_check_info`: a rectangle's
/// x and y must be 0 or at least 2), becomes 2 (there is room: the pad on that axis is 2 or
/// 3 pixels). The returned parameters say where the picture is, so boxes map back exactly.
fn rga_letterbox(letterbox: Letterbox, s: &Image, d: &Image) -> LetterboxParams {
    let mut lb = letterbox.params(s.width, s.height, d.width, d.height);
    let (x, y, w, h) = lb.picture();
    let nudge = |v: u32| if v == 1 { 2 } else { v };
    lb.place(nudge(x), nudge(y), w, h);
    lb
}

impl RgaScaler {
    /// Feeds RGA CPU memory through virtual addresses from now on (`--copy-mode`, as a
    /// plain pipeline does after copying each frame into its own buffer): nothing is
    /// imported at bind, and each frame is mapped for its job.
    pub fn use_virtual_addresses(&mut self) {
        log::info!("copy mode: RGA reads and writes CPU memory through virtual addresses (wrapbuffer_virtualaddr_t), nothing imported");
        self.virtual_addresses = Some(None);
    }

    /// Imports both pools (one `importbuffer_fd` per buffer, first dma-buf of each source
    /// buffer), validates the job with `imcheck_t`, applies `--rga-core`, and fills the pad
    /// of every output buffer. Binding again releases the previous imports first. On error
    /// nothing stays imported.
    pub fn bind_pools(
        &mut self,
        src: &[Vec<DmaBuf>],
        src_layout: &FrameLayout,
        dst: &mut [DmaBuf],
        dst_layout: &FrameLayout,
        letterbox: Letterbox,
    ) -> Result<()> {
        self.release_all();
        let r = self.bind_inner(src, src_layout, dst, dst_layout, letterbox);
        if r.is_err() {
            self.release_all();
        }
        r
    }

    /// One synchronous `improcess` of source buffer `src_index` into output buffer
    /// `dst_index` (after [`RgaScaler::bind_pools`]). This is below the pools' loans: the
    /// caller must hold both buffers. The scale stage goes through [`RgaScaler::scale`], whose
    /// `Frame` and `WriteLoan` prove it; tests drive the device with indices.
    pub fn scale_index(&mut self, src_index: u32, dst_index: u32) -> Result<LetterboxParams> {
        let lb = self.letterbox.ok_or_else(|| anyhow!("rga scaler: scale before bind"))?;
        let (ns, nd) = (self.src.len(), self.dst.len());
        let (Some(s), Some(d)) = (self.src.get(src_index as usize), self.dst.get(dst_index as usize)) else {
            bail!("rga scaler: buffer index out of range: source {src_index} of {ns}, output {dst_index} of {nd}");
        };
        let (s, d) = (s.buf, d.buf);
        self.run_job(s, d, self.srect, self.drect, src_index, dst_index)?;
        Ok(lb)
    }

    /// For a source whose frames change size from frame to frame: imports the output pool
    /// now and each source buffer at its first frame. On error nothing stays imported.
    fn bind_variable(
        &mut self,
        src: &[Vec<DmaBuf>],
        dst: &mut [DmaBuf],
        dst_layout: &FrameLayout,
        letterbox: Letterbox,
    ) -> Result<()> {
        self.release_all();
        let r = self.bind_variable_inner(src, dst, dst_layout, letterbox);
        if r.is_err() {
            self.release_all();
        }
        r
    }
}

/// What the scale stage's `Scaler` trait asks of a backend (`zcpipe_scale::rga` implements
/// it with these).
impl RgaScaler {
    /// Its name in logs: the librga and RGA versions, or that it is fed virtual addresses.
    pub fn describe(&self) -> String {
        match self.virtual_addresses {
            Some(_) => "rga (virtual addresses) scaler".into(),
            None => format!("rga ({})", self.version),
        }
    }

    /// Whether it imports the pools (not in copy mode).
    pub fn binds_pools(&self) -> bool {
        self.virtual_addresses.is_none()
    }

    /// RGA2 reaches only the first 4 GiB: a dma32 or CMA heap for what it writes.
    pub fn output_heap(&self, requested: HeapChoice) -> HeapChoice {
        let h = rga_heap(requested, &zcpipe_sys::board::path("/dev/dma_heap"), self.core.is_rga3());
        log::info!("rga: output pool heap: {}", h.reason);
        h.choice
    }

    /// With imported pools: [`RgaScaler::bind_pools`] for a fixed source layout, else
    /// [`RgaScaler::bind_variable`]. With virtual addresses: checks the formats only.
    pub fn bind(
        &mut self,
        src: &[Vec<DmaBuf>],
        src_layout: Option<&FrameLayout>,
        dst: &mut [DmaBuf],
        dst_layout: &FrameLayout,
        letterbox: Letterbox,
    ) -> Result<()> {
        if let Some(v) = self.virtual_addresses.as_mut() {
            let fourcc = src_layout.map(|l| l.fourcc).unwrap_or(Fourcc::NV12);
            RgaScaler::check(fourcc, dst_layout)
                .map_err(|e| anyhow!("rga (virtual addresses) scaler cannot feed the model: {e:#}"))?;
            *v = Some((*dst_layout, letterbox));
            return Ok(());
        }
        match src_layout {
            Some(l) => self.bind_pools(src, l, dst, dst_layout, letterbox),
            None => self.bind_variable(src, dst, dst_layout, letterbox),
        }
    }

    /// The device reads the source buffer and writes the output buffer in place (no
    /// mapping, no sync here), or in copy mode both are mapped for a virtual-address job.
    pub fn scale(&mut self, src: &Frame, dst: &mut WriteLoan<'_>) -> Result<LetterboxParams> {
        if let Some(v) = self.virtual_addresses {
            let (dl, letterbox) = v.ok_or_else(|| anyhow!("rga scaler: scale before bind"))?;
            return map_frame(src, dst, |s, sl, d| self.scale_virtual(s, sl, d, &dl, letterbox));
        }
        if self.var.is_some() {
            let (si, di) = (src.index(), dst.index());
            return self.scale_frame(si, src.buffers(), &src.desc().layout, di, &mut dst.buffers_mut()[0]);
        }
        self.scale_index(src.index(), dst.index())
    }
}

impl RgaScaler {
    /// `--copy-mode` with `--scaler rga`: RGA fed CPU memory through virtual addresses
    /// (`wrapbuffer_virtualaddr_t`), as a plain pipeline does after copying each frame into
    /// its own buffer: nothing is imported, the driver pins the pages for each job. The
    /// output's pad is written by the CPU every frame (the buffer is ordinary memory here).
    fn scale_virtual(
        &mut self,
        src: &[&[u8]],
        src_layout: &FrameLayout,
        dst: &mut [u8],
        dst_layout: &FrameLayout,
        letterbox: Letterbox,
    ) -> Result<LetterboxParams> {
        let s = source_image(src_layout)?;
        let d = dest_image(dst_layout)?;
        let sbytes = src.first().ok_or_else(|| anyhow!("rga scaler: a frame without a buffer"))?;
        if (sbytes.len() as u64) < s.bytes || (dst.len() as u64) < d.bytes {
            bail!(
                "rga scaler: buffers of {} and {} bytes for images of {} and {} bytes",
                sbytes.len(),
                dst.len(),
                s.bytes,
                d.bytes
            );
        }
        let to_int = |v: u32| c_int::try_from(v).map_err(|_| anyhow!("rga scaler: size {v} out of range"));
        let lb = rga_letterbox(letterbox, &s, &d);
        fill_pad(
            dst,
            dst_layout.planes[0].bytesperline as usize,
            (d.width as usize, d.height as usize),
            lb.picture(),
            letterbox.pad,
        );
        // SAFETY: `sbytes` (>= the source image's bytes, checked above) and `dst` (>= the
        // output image's bytes) stay borrowed, valid and distinct (one shared, one unique
        // borrow) until the synchronous job below returns; only that job uses these buffers.
        let sbuf = unsafe {
            self.lib.wrapbuffer_virtualaddr_t(
                sbytes.as_ptr() as *mut std::ffi::c_void,
                to_int(s.width)?,
                to_int(s.height)?,
                to_int(s.wstride)?,
                to_int(s.hstride)?,
                s.format,
            )
        };
        // SAFETY: as above, for the destination.
        let mut dbuf = unsafe {
            self.lib.wrapbuffer_virtualaddr_t(
                dst.as_mut_ptr() as *mut std::ffi::c_void,
                to_int(d.width)?,
                to_int(d.height)?,
                to_int(d.wstride)?,
                to_int(d.hstride)?,
                d.format,
            )
        };
        if s.yuv {
            dbuf.color_space_mode = sys::IM_YUV_TO_RGB_BT601_LIMIT;
        }
        let (srect, drect) = job_rects(&s, &lb);
        self.check_job(sbuf, dbuf, srect, drect, |st, msg| {
            diagnose(src_layout.fourcc, &s, dst_layout.fourcc, &d, &lb, st, msg)
        })?;
        // `src` and `dst` stay borrowed (valid, distinct) until this synchronous job returns.
        self.run_job(sbuf, dbuf, srect, drect, 0, 0)?;
        Ok(lb)
    }
}

impl Drop for RgaScaler {
    fn drop(&mut self) {
        self.release_all();
    }
}

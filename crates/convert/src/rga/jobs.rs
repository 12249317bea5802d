//! One-off jobs on buffers the caller imports and releases itself: the inference service
//! brings a client's buffer into a model input with them, where the scale stage binds two
//! whole pools at start-up ([`RgaScaler::bind`]).
//!
//! A dma-buf is imported once (`importbuffer_fd`) and then named by its handle in each job,
//! as the pools are; memory RGA cannot import (a memfd, a decoded picture in a `Vec`) goes
//! through virtual addresses on both sides, as `--copy-mode` feeds it (librga takes a job's
//! images all by handle or all by address).

use std::collections::HashMap;
use std::ffi::c_int;

use anyhow::{anyhow, bail, Context, Result};

use super::diagnose::diagnose;
use super::image::{dest_image, job_rects, source_image, whole_buffer_image, Image};
use super::{rga_letterbox, RgaScaler};
use crate::fill_pad;
use zcpipe_core::dmabuf::DmaBuf;
use zcpipe_core::frame::{FrameLayout, Letterbox, LetterboxParams};
use zcpipe_sys::rga as sys;
use zcpipe_sys::rga::RgaBufferHandle;

/// An output imported for [`RgaJobs::convert`]: its image and the picture last written into
/// it (its letterbox pad matches that picture).
struct Output {
    image: Image,
    picture: Option<(u32, u32, u32, u32)>,
}

/// RGA for jobs whose buffers come and go: a source imported once and used by handle until
/// [`RgaJobs::release`], an output whose pad is refilled only when the picture in it moves.
/// Everything still imported is released on drop.
pub struct RgaJobs {
    rga: RgaScaler,
    /// Source handles and the bytes each import covers.
    sources: HashMap<RgaBufferHandle, u64>,
    outputs: HashMap<RgaBufferHandle, Output>,
    /// The last `(source, output)` images `imcheck_t` accepted.
    checked: Option<(Image, Image)>,
}

impl RgaJobs {
    /// Jobs on an opened RGA ([`RgaScaler::open`]) that binds no pool.
    pub fn new(rga: RgaScaler) -> RgaJobs {
        RgaJobs { rga, sources: HashMap::new(), outputs: HashMap::new(), checked: None }
    }

    /// The librga and RGA versions, for logs.
    pub fn describe(&self) -> String {
        self.rga.describe()
    }

    /// Jobs run so far.
    pub fn jobs(&self) -> u64 {
        self.rga.frames()
    }

    /// Imports `buf` as a source of frames of any layout that fits in it (the driver maps
    /// it once, whole). Fails for memory RGA cannot import (a memfd): use
    /// [`RgaJobs::convert_virtual`] for that.
    pub fn import_source(&mut self, what: &str, buf: &DmaBuf) -> Result<RgaBufferHandle> {
        let img = whole_buffer_image(buf.size())
            .ok_or_else(|| anyhow!("rga: {what} of {} bytes is too small for a picture", buf.size()))?;
        let h = self.rga.import(what, buf, &img)?.buf.handle;
        self.sources.insert(h, buf.size());
        Ok(h)
    }

    /// Imports `buf` as an output laid out as `layout` (a model input: RGB24 or BGR24).
    pub fn import_output(&mut self, what: &str, buf: &DmaBuf, layout: &FrameLayout) -> Result<RgaBufferHandle> {
        let image = dest_image(layout)?;
        layout.validate(&[buf.size()]).map_err(|e| anyhow!("rga: {what}: {e}"))?;
        let h = self.rga.import(what, buf, &image)?.buf.handle;
        self.outputs.insert(h, Output { image, picture: None });
        Ok(h)
    }

    /// Releases an import (`releasebuffer_handle`): the driver drops its reference.
    pub fn release(&mut self, h: RgaBufferHandle) {
        self.sources.remove(&h);
        self.outputs.remove(&h);
        self.rga.release_handle(h);
    }

    /// One synchronous `improcess`: the frame in source `src`, laid out as `src_layout`,
    /// converted and letterboxed into output `dst` (`out` is that output's buffer, whose pad
    /// the CPU refills when the picture moves). `imcheck_t` runs when the images change; a
    /// refusal names the rule broken.
    pub fn convert(
        &mut self,
        src: RgaBufferHandle,
        src_layout: &FrameLayout,
        dst: RgaBufferHandle,
        out: &mut DmaBuf,
        letterbox: Letterbox,
    ) -> Result<LetterboxParams> {
        let bytes = *self.sources.get(&src).ok_or_else(|| anyhow!("rga: source handle {src} is not imported"))?;
        let d = self.outputs.get(&dst).ok_or_else(|| anyhow!("rga: output handle {dst} is not imported"))?.image;
        let s = source_image(src_layout)?;
        if s.bytes > bytes {
            bail!(
                "rga: a {} {}x{} frame (width stride {} x height stride {}) needs {} bytes; its buffer has {bytes}",
                src_layout.fourcc,
                s.width,
                s.height,
                s.wstride,
                s.hstride,
                s.bytes
            );
        }
        let to_int = |v: u32| c_int::try_from(v).map_err(|_| anyhow!("rga: size {v} out of range"));
        // Describing the images on their handles is a struct fill, no ioctl.
        let lib = &self.rga.lib;
        let sbuf = lib.wrapbuffer_handle_t(
            src,
            to_int(s.width)?,
            to_int(s.height)?,
            to_int(s.wstride)?,
            to_int(s.hstride)?,
            s.format,
        );
        let mut dbuf = lib.wrapbuffer_handle_t(
            dst,
            to_int(d.width)?,
            to_int(d.height)?,
            to_int(d.wstride)?,
            to_int(d.hstride)?,
            d.format,
        );
        dbuf.color_space_mode = if s.yuv { sys::IM_YUV_TO_RGB_BT601_LIMIT } else { 0 };
        let lb = rga_letterbox(letterbox, &s, &d);
        let (srect, drect) = job_rects(&s, &lb);
        if self.checked != Some((s, d)) {
            let dst_fourcc = if d.format == sys::RK_FORMAT_RGB_888 {
                zcpipe_core::frame::Fourcc::RGB24
            } else {
                zcpipe_core::frame::Fourcc::BGR24
            };
            self.rga.check_job(sbuf, dbuf, srect, drect, |st, msg| {
                diagnose(src_layout.fourcc, &s, dst_fourcc, &d, &lb, st, msg)
            })?;
            self.checked = Some((s, d));
        }
        let picture = lb.picture();
        if self.outputs.get(&dst).and_then(|o| o.picture) != Some(picture) {
            let bpl = (d.wstride * 3) as usize;
            let mut w = out.write().context("rga: filling the letterbox pad of the model input")?;
            fill_pad(&mut w, bpl, (d.width as usize, d.height as usize), picture, letterbox.pad);
            drop(w);
            if let Some(o) = self.outputs.get_mut(&dst) {
                o.picture = Some(picture);
            }
        }
        self.rga.run_job(sbuf, dbuf, srect, drect, 0, 0)?;
        Ok(lb)
    }

    /// One synchronous `improcess` between CPU memory: `src` (laid out as `src_layout`) into
    /// `dst` (laid out as `dst_layout`), through virtual addresses: the driver pins the pages
    /// for the job. The pad is written by the CPU.
    pub fn convert_virtual(
        &mut self,
        src: &[u8],
        src_layout: &FrameLayout,
        dst: &mut [u8],
        dst_layout: &FrameLayout,
        letterbox: Letterbox,
    ) -> Result<LetterboxParams> {
        self.rga.scale_virtual(&[src], src_layout, dst, dst_layout, letterbox)
    }
}

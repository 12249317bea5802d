//! MJPEG through the task API: reading a JPEG's SOF, the fit rules MPP's JPEG decoder keeps,
//! and [`MppJpeg`], the one-whole-JPEG-per-task decoder into imported dma-bufs.

use std::ffi::{c_int, c_void};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::Arc;

use anyhow::{anyhow, bail, Result};

use super::*;

/// Where the JPEG of one [`MppJpeg::decode`] is.
#[derive(Clone, Copy, Debug)]
pub enum JpegInput<'a> {
    /// Bytes in memory: copied (a CPU copy of compressed data) into the decoder's own input
    /// buffer, an `MppBuffer` of an internal group.
    Bytes(&'a [u8]),
    /// The first `len` bytes of a dma-buf that already holds the JPEG (a V4L2 camera's
    /// EXPBUF buffer, `bytesused`): imported once per buffer (`mpp_buffer_import`, cached by
    /// inode) and read by the hardware in place.
    DmaBuf {
        /// The dma-buf.
        fd: BorrowedFd<'a>,
        /// Its size in bytes.
        size: usize,
        /// Bytes of JPEG at its start.
        len: usize,
    },
}

/// A JPEG's frame header (SOFn, ITU T.81 B.2.2), as [`jpeg_sof`] reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JpegSof {
    /// The SOF marker's second byte: `0xC0` baseline, `0xC1` extended, `0xC2` progressive, ...
    pub marker: u8,
    /// Pixels (X).
    pub width: u32,
    /// Lines (Y; 0, "defined by DNL", is refused by [`jpeg_sof`]).
    pub height: u32,
    /// Components (Nf): 1 grayscale, 3 Y Cb Cr.
    pub components: u8,
    /// (horizontal, vertical) sampling factors of the first three components ((0, 0) where absent).
    pub sampling: [(u8, u8); 3],
}

impl JpegSof {
    /// Whether MPP's JPEG decoder writes it as zcpipe takes it (`jpeg_judge_yuv_mode` in
    /// `mpp/codec/dec/jpeg/jpegd_parser.c`, which compares exact factors): baseline (SOF0, the
    /// only frame header the parser decodes), three components with Cb and Cr at 1x1 and Y at
    /// 2x2 (4:2:0, NV12) or 2x1 (4:2:2, NV12 or NV16). Not: grayscale (MPP_ERR_STREAM for
    /// YUV400 when the output format is YUV420SP: an error frame every time), 4:4:4, 4:4:0
    /// and 4:1:1 (RV1126 and others write them as YUV444SP, 3 bytes a pixel), other factors
    /// (e.g. ffmpeg's 4:2:2 as Y 2x2, chroma 1x2: MPP_ERR_STREAM), nor SOF1..SOF15.
    pub fn mpp_fit(&self) -> bool {
        self.marker == 0xC0
            && self.components == 3
            && self.sampling[1] == (1, 1)
            && self.sampling[2] == (1, 1)
            && matches!(self.sampling[0], (2, 2) | (2, 1))
    }

    /// Bytes MPP may write for it: `align16(width) * align16(height) * 2` (NV16 at 16-aligned
    /// strides; NV12 needs 3/4 of it).
    pub(crate) fn mpp_output_bytes(&self) -> u64 {
        self.width.next_multiple_of(16) as u64 * self.height.next_multiple_of(16) as u64 * 2
    }
}

/// The frame header of the JPEG at the start of `jpeg` (which starts with SOI): segments
/// are walked by their lengths up to the first SOFn (`FF C0`..`FF CF` but DHT `C4`, JPG
/// `C8`, DAC `CC`). `None`: no SOI, the bytes end before it, SOS or EOI comes first, or the
/// header is broken (no components, a zero size, shorter than its components).
pub fn jpeg_sof(jpeg: &[u8]) -> Option<JpegSof> {
    if jpeg.get(..2)? != [0xFF, 0xD8] {
        return None;
    }
    let mut i = 2;
    loop {
        while jpeg.get(i) == Some(&0xFF) && jpeg.get(i + 1) == Some(&0xFF) {
            i += 1;
        }
        let (&ff, &m) = (jpeg.get(i)?, jpeg.get(i + 1)?);
        match (ff, m) {
            (0xFF, 0x01 | 0xD0..=0xD7) => {
                i += 2;
                continue;
            }
            (0xFF, 0xD8..=0xDA) => return None,
            (0xFF, _) => {}
            _ => return None,
        }
        let len = u16::from_be_bytes([*jpeg.get(i + 2)?, *jpeg.get(i + 3)?]) as usize;
        if len < 2 {
            return None;
        }
        if (0xC0..=0xCF).contains(&m) && !matches!(m, 0xC4 | 0xC8 | 0xCC) {
            // P, Y (2 bytes), X (2 bytes), Nf, then Nf x (C, H << 4 | V, Tq).
            let seg = jpeg.get(i + 4..i + 2 + len)?;
            let (height, width, nf) = (
                u16::from_be_bytes([*seg.get(1)?, *seg.get(2)?]) as u32,
                u16::from_be_bytes([*seg.get(3)?, *seg.get(4)?]) as u32,
                *seg.get(5)?,
            );
            if nf == 0 || width == 0 || height == 0 || seg.len() < 6 + 3 * nf as usize {
                return None;
            }
            let mut sampling = [(0, 0); 3];
            for (k, s) in sampling.iter_mut().enumerate().take(nf as usize) {
                let hv = seg[6 + 3 * k + 1];
                *s = (hv >> 4, hv & 0x0F);
            }
            return Some(JpegSof { marker: m, width, height, components: nf, sampling });
        }
        i += 2 + len;
    }
}

/// Why [`MppJpeg::decode`] did not give a JPEG to MPP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JpegUnfit {
    /// No usable frame header ([`jpeg_sof`]): corrupt; skip it.
    NoFrameHeader,
    /// Bigger than the output buffer (MPP only logs "required buffer size ... larger than
    /// input buffer size" in `mpp_dec_advanced_thread` and decodes anyway: the hardware would
    /// write past it) or than the source's largest picture: skip it.
    TooBig {
        /// The header's picture size.
        width: u32,
        /// As above.
        height: u32,
        /// [`JpegSof::mpp_output_bytes`].
        need: u64,
        /// The output buffer's size.
        have: u64,
    },
    /// A JPEG MPP does not write as NV12/NV16 ([`JpegSof::mpp_fit`]): decode it on the CPU.
    CpuOnly(JpegSof),
}

impl std::fmt::Display for JpegUnfit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JpegUnfit::NoFrameHeader => write!(f, "no usable frame header (SOF) before the scan"),
            JpegUnfit::TooBig { width, height, need, have } => write!(f, "a {width}x{height} JPEG needs {need} bytes of output and the source's largest picture is smaller or the buffer has {have}"),
            JpegUnfit::CpuOnly(s) => write!(f, "SOF {:#04x} with {} components sampled {:?}: MPP would not write it as NV12/NV16", s.marker, s.components, &s.sampling[..(s.components as usize).min(3)]),
        }
    }
}

/// What one JPEG decoded into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JpegOutcome {
    /// A picture in the output buffer: `width` x `height` pixels, luma rows `hor_stride`
    /// bytes apart, chroma at `hor_stride * ver_stride` (`fmt`: [`MPP_FMT_YUV420SP`] NV12 or
    /// [`MPP_FMT_YUV422SP`] NV16).
    Picture(FrameInfo),
    /// The decoder flagged the frame (`errinfo` nonzero: a corrupt or truncated JPEG):
    /// nothing usable in the buffer; skip the frame.
    Corrupt {
        /// `mpp_frame_get_errinfo`.
        errinfo: u32,
    },
    /// Not given to MPP (its header says why); the output buffer is untouched.
    Unfit(JpegUnfit),
}

/// Runs `f` on the first `len` bytes of dma-buf `fd`, mapped read-only and bracketed by
/// `DMA_BUF_IOCTL_SYNC` READ START/END (a memfd answers ENOTTY: no sync needed).
fn with_dmabuf_bytes<R>(fd: BorrowedFd<'_>, len: usize, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
    use crate::dmabuf::{sync, DMA_BUF_SYNC_END, DMA_BUF_SYNC_READ, DMA_BUF_SYNC_START};
    // SAFETY: a fresh read-only shared mapping of `len` bytes of a live fd (the caller says the
    // buffer holds at least `len`); nothing in this process writes it while mapped.
    let map = unsafe { memmap2::MmapOptions::new().len(len).map(fd.as_raw_fd()) }.map_err(|e| {
        anyhow!("mapping {len} bytes of JPEG dma-buf fd {}: {}", fd.as_raw_fd(), crate::errno_words(&e))
    })?;
    let bracket = |flags: u64| match sync(fd, flags) {
        Err(e) if e.raw_os_error() != Some(libc::ENOTTY) => {
            Err(anyhow!("DMA_BUF_IOCTL_SYNC on JPEG dma-buf fd {}: {}", fd.as_raw_fd(), crate::errno_words(&e)))
        }
        _ => Ok(()),
    };
    bracket(DMA_BUF_SYNC_START | DMA_BUF_SYNC_READ)?;
    let r = f(&map);
    bracket(DMA_BUF_SYNC_END | DMA_BUF_SYNC_READ)?;
    Ok(r)
}

/// An MPP MJPEG decoder on the task API (the "advanced" path of Rockchip's
/// `test/mpi_dec_test.c`; `mpp_dec_advanced_thread` in `mpp/codec/mpp_dec_normal.cpp`): one
/// whole JPEG per packet, the packet backed by an `MppBuffer`, and each packet's output frame
/// attached by the caller with its own buffer, so MPP writes the picture where the caller
/// says (here: a capture pool dma-buf, imported once and cached by inode).
///
/// Per JPEG ([`MppJpeg::decode`]): `poll`/`dequeue` an input task, `mpp_task_meta_set_packet
/// (KEY_INPUT_PACKET)` + `mpp_task_meta_set_frame(KEY_OUTPUT_FRAME)`, `enqueue`; `poll`/
/// `dequeue` the output task, `mpp_task_meta_get_frame(KEY_OUTPUT_FRAME)`, `enqueue` it back;
/// `poll`/`dequeue` the input task again, take its packet back and deinit it, `enqueue` the
/// empty task (MPP's decoder thread hands it straight back: "input empty task back to mpp to
/// maintain task status"). Every poll is bounded by the timeout given at creation, so a
/// decoder that never answers is an error, not a hang. The packet's size and length are both
/// the JPEG's length (the hardware reads `size` bytes: [`MppPacketSetLengthFn`]).
///
/// Before MPP sees a JPEG its frame header is read ([`jpeg_sof`]; from a dma-buf input
/// through a read-only mapping): MPP does not refuse an output buffer that is too small
/// (`mpp_dec_advanced_thread` only logs "required buffer size ... larger than input buffer
/// size" and decodes: the hardware would write past it), so a JPEG that needs more than
/// `align16(w) * align16(h) * 2` bytes of output ([`JpegSof::mpp_output_bytes`]) or is larger
/// than the caller's `max` never reaches it ([`JpegUnfit::TooBig`]), and one MPP would not
/// write as NV12/NV16 goes back to the caller for the CPU ([`JpegUnfit::CpuOnly`]).
///
/// Output format: `MPP_DEC_SET_OUTPUT_FORMAT` asks for [`MPP_FMT_YUV420SP`] (NV12); MPP may
/// still give [`MPP_FMT_YUV422SP`] (NV16) for a 4:2:2 JPEG on chips without that conversion:
/// the outcome says which.
///
/// A failure after the input task was enqueued (e.g. the output poll timed out) leaves MPP's
/// decoder thread possibly still writing that packet's frame (`mpp_hal_hw_wait`): the packet
/// and frame are kept, not deinited, and the decoder is out of service (every later
/// [`MppJpeg::decode`] fails in one line; [`MppJpeg::poisoned`]). Dropping it calls
/// `mpp_destroy` first (which joins MPP's threads), then deinits such a frame and packet,
/// then puts every imported buffer, the input buffer and the internal group.
pub struct MppJpeg {
    lib: Arc<Libmpp>,
    syms: TaskSyms,
    ctx: MppHandle,
    api: *const MppApi,
    timeout_ms: i64,
    /// The internal group the input buffer comes from.
    group: MppHandle,
    /// The input buffer (JPEG bytes are copied into it) and its size.
    input: Option<(MppHandle, usize)>,
    /// Imported dma-bufs by (st_dev, st_ino): pool buffers (outputs) and camera buffers (inputs).
    imported: Imports,
    decoded: u64,
    /// Why the decoder is out of service (a failure after an input task was enqueued).
    poisoned: Option<String>,
    /// (packet, frame) of such a failure: MPP may still use them until `mpp_destroy`.
    stranded: Vec<(MppHandle, MppHandle)>,
}

// SAFETY: as for `Mpp`: one context used from one thread at a time (`&mut self`); MPP's
// own threads are internal, and its buffers are reference counted under its own locks.
unsafe impl Send for MppJpeg {}

impl std::fmt::Debug for MppJpeg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MppJpeg")
            .field("lib", &self.lib.path)
            .field("imported", &self.imported.len())
            .field("decoded", &self.decoded)
            .finish()
    }
}

impl MppJpeg {
    /// An MJPEG decoder: the task-API symbols resolved, `mpp_create` (the `MppApi` size
    /// checked), `mpp_init(MPP_CTX_DEC, MPP_VIDEO_CodingMJPEG)`,
    /// `control(MPP_DEC_SET_OUTPUT_FORMAT, MPP_FMT_YUV420SP)`, and an internal buffer group
    /// (`mpp_buffer_group_get(MPP_BUFFER_TYPE_DRM, MPP_BUFFER_INTERNAL)`) for the input.
    /// `timeout_ms` (1..=[`MPP_POLL_MAX`]) bounds every poll. Errors name the call and its
    /// `MPP_RET`.
    pub fn new(lib: Arc<Libmpp>, timeout_ms: i64) -> Result<MppJpeg> {
        if !(1..=MPP_POLL_MAX).contains(&timeout_ms) {
            bail!("MPP MJPEG poll timeout {timeout_ms} ms is out of range 1..={MPP_POLL_MAX} ms (a bounded wait: never block)");
        }
        let syms = TaskSyms::resolve(&lib)?;
        let (ctx, api) = lib.create()?;
        // From here on `Drop` destroys the context.
        let mut d = MppJpeg {
            lib,
            syms,
            ctx,
            api,
            timeout_ms,
            group: std::ptr::null_mut(),
            input: None,
            imported: Imports::new(usize::MAX),
            decoded: 0,
            poisoned: None,
            stranded: Vec::new(),
        };
        for (name, entry) in [
            ("poll", d.api_ptr(|a| a.poll)),
            ("dequeue", d.api_ptr(|a| a.dequeue)),
            ("enqueue", d.api_ptr(|a| a.enqueue)),
        ] {
            if entry.is_null() {
                bail!("MPP's MppApi has no {name} entry: the library at {} cannot decode MJPEG", d.lib.path);
            }
        }
        // SAFETY: the live context; plain enum arguments.
        check("mpp_init(decoder, MJPEG)", unsafe { (d.lib.mpp_init)(d.ctx, MPP_CTX_DEC, MPP_VIDEO_CODING_MJPEG) })?;
        let mut fmt: u32 = MPP_FMT_YUV420SP;
        d.control("MPP_DEC_SET_OUTPUT_FORMAT(YUV420SP)", MPP_DEC_SET_OUTPUT_FORMAT, (&mut fmt as *mut u32).cast())?;
        let mut group: MppHandle = std::ptr::null_mut();
        // SAFETY: an out-pointer to a local and two static C strings.
        check("mpp_buffer_group_get(internal, DRM)", unsafe {
            (d.lib.mpp_buffer_group_get)(
                &mut group,
                MPP_BUFFER_TYPE_DRM,
                MPP_BUFFER_INTERNAL,
                TAG.as_ptr(),
                TAG.as_ptr(),
            )
        })?;
        d.group = group;
        Ok(d)
    }

    /// The library this decoder runs on.
    pub fn lib(&self) -> &Arc<Libmpp> {
        &self.lib
    }

    /// Pictures decoded so far (corrupt ones not counted).
    pub fn decoded(&self) -> u64 {
        self.decoded
    }

    /// Distinct dma-bufs imported so far (outputs and dma-buf inputs).
    pub fn imported(&self) -> usize {
        self.imported.len()
    }

    /// Why the decoder is out of service (see [`MppJpeg`]), or `None`.
    pub fn poisoned(&self) -> Option<&str> {
        self.poisoned.as_deref()
    }

    fn api_ptr(&self, f: impl FnOnce(&MppApi) -> *const c_void) -> *const c_void {
        // SAFETY: `api` is MPP's static table (size checked on create).
        f(unsafe { &*self.api })
    }

    pub(super) fn control(&self, name: &str, cmd: MpiCmd, param: *mut c_void) -> Result<()> {
        self.lib.control(self.api, self.ctx, name, cmd, param)
    }

    /// `poll(port, timeout)` then `dequeue(port)`: a task, or an error naming the port and
    /// the `MPP_RET` (`MPP_NOK` from poll: a timeout). A dequeue that finds no task after a
    /// successful poll (`MPP_NOK`: MPP's port was woken without one) polls again with the
    /// time left, until `timeout_ms` after the first poll.
    fn take_task(&self, port: c_int) -> Result<MppHandle> {
        let name = if port == MPP_PORT_INPUT { "input" } else { "output" };
        // SAFETY: the entries were checked non-null on create; rk_mpi.h's signatures are
        // `MppPollFn`/`MppDequeueFn` (a C enum is a c_int), and the table is MPP's static one.
        let (poll, dequeue) = unsafe {
            (
                std::mem::transmute::<*const c_void, MppPollFn>((*self.api).poll),
                std::mem::transmute::<*const c_void, MppDequeueFn>((*self.api).dequeue),
            )
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(self.timeout_ms as u64);
        loop {
            let left = deadline
                .saturating_duration_since(std::time::Instant::now())
                .as_millis()
                .clamp(1, self.timeout_ms as u128) as c_int;
            // SAFETY: the live context; the timeout is in 1..=MPP_POLL_MAX (checked on create).
            let r = unsafe { poll(self.ctx, port, left) };
            if r < 0 {
                bail!(
                    "MPP poll({name} port, {} ms) failed: {} ({r}): the MJPEG decoder did not answer in time",
                    self.timeout_ms,
                    ret_name(r)
                );
            }
            let mut task: MppHandle = std::ptr::null_mut();
            // SAFETY: the live context and an out-pointer to a local.
            let d = unsafe { dequeue(self.ctx, port, &mut task) };
            if d == MPP_OK && !task.is_null() {
                return Ok(task);
            }
            if d != MPP_NOK && d != MPP_OK {
                check(&format!("dequeue({name} port)"), d)?;
            }
            if std::time::Instant::now() >= deadline {
                bail!("MPP dequeue({name} port) found no task within {} ms though poll said ready: the MJPEG decoder did not answer in time", self.timeout_ms);
            }
        }
    }

    fn give_task(&self, port: c_int, task: MppHandle) -> Result<()> {
        let name = if port == MPP_PORT_INPUT { "input" } else { "output" };
        // SAFETY: checked non-null on create; rk_mpi.h's enqueue is `MppEnqueueFn`.
        let enqueue = unsafe { std::mem::transmute::<*const c_void, MppEnqueueFn>((*self.api).enqueue) };
        // SAFETY: the live context and a task dequeued from this port.
        check(&format!("enqueue({name} port)"), unsafe { enqueue(self.ctx, port, task) })
    }

    /// The `MppBuffer` of dma-buf `fd` (`size` bytes): imported on first sight, cached by
    /// inode after ([`Imports::get`]).
    fn import(&mut self, fd: BorrowedFd<'_>, size: usize) -> Result<MppHandle> {
        self.imported.get(&self.lib, self.syms.buffer_put, fd, size)
    }

    fn put(&self, buffer: MppHandle) {
        put_buffer(self.syms.buffer_put, buffer);
    }

    /// The input buffer, at least `len` bytes (a new one, 64 KiB-rounded, when it is smaller),
    /// with `jpeg` copied to its start.
    fn input_with(&mut self, jpeg: &[u8]) -> Result<MppHandle> {
        let need = jpeg.len();
        if self.input.is_none_or(|(_, size)| size < need) {
            if let Some((b, _)) = self.input.take() {
                self.put(b);
            }
            let size = need.div_ceil(64 << 10) * (64 << 10);
            let mut b: MppHandle = std::ptr::null_mut();
            // SAFETY: the live internal group, an out-pointer to a local, static C strings.
            check(&format!("mpp_buffer_get({size} bytes)"), unsafe {
                (self.syms.buffer_get)(self.group, &mut b, size, TAG.as_ptr(), TAG.as_ptr())
            })?;
            self.input = Some((b, size));
        }
        let (b, _) = self.input.expect("just set");
        // SAFETY: a live buffer of this decoder's internal group (CPU-mapped by MPP).
        let p = unsafe { (self.syms.buffer_ptr)(b, TAG.as_ptr()) };
        if p.is_null() {
            bail!("MPP mpp_buffer_get_ptr gave no CPU address for the MJPEG input buffer");
        }
        // SAFETY: `p` maps at least `size` >= `need` bytes of the buffer MPP allocated, which
        // nothing else touches now (the decoder is idle between JPEGs).
        unsafe { std::ptr::copy_nonoverlapping(jpeg.as_ptr(), p.cast::<u8>(), need) };
        Ok(b)
    }

    /// Decodes one whole JPEG from `input` into dma-buf `output` (`output_size` bytes, e.g. a
    /// capture pool buffer: imported once, cached), as described on [`MppJpeg`]; `max`
    /// (width, height) bounds the picture ([`JpegUnfit::TooBig`] beyond it). Errors are one
    /// line (the MPP call and its `MPP_RET`); one after the input task was enqueued puts the
    /// decoder out of service ([`MppJpeg::poisoned`]): later calls fail at once.
    pub fn decode(
        &mut self,
        input: JpegInput<'_>,
        output: BorrowedFd<'_>,
        output_size: usize,
        max: (u32, u32),
    ) -> Result<JpegOutcome> {
        if let Some(why) = &self.poisoned {
            bail!("MPP's JPEG decoder is out of service since an earlier failure ({why}): decode on the CPU (--decoder cpu)");
        }
        let len = match input {
            JpegInput::Bytes(b) => b.len(),
            JpegInput::DmaBuf { size, len, .. } => len.min(size),
        };
        if len == 0 {
            bail!("an empty JPEG cannot be decoded (0 bytes)");
        }
        let sof = match input {
            JpegInput::Bytes(b) => jpeg_sof(b),
            JpegInput::DmaBuf { fd, .. } => with_dmabuf_bytes(fd, len, jpeg_sof)?,
        };
        let Some(sof) = sof else { return Ok(JpegOutcome::Unfit(JpegUnfit::NoFrameHeader)) };
        if sof.width > max.0 || sof.height > max.1 || sof.mpp_output_bytes() > output_size as u64 {
            return Ok(JpegOutcome::Unfit(JpegUnfit::TooBig {
                width: sof.width,
                height: sof.height,
                need: sof.mpp_output_bytes(),
                have: output_size as u64,
            }));
        }
        if !sof.mpp_fit() {
            return Ok(JpegOutcome::Unfit(JpegUnfit::CpuOnly(sof)));
        }
        let in_buf = match input {
            JpegInput::Bytes(b) => self.input_with(b)?,
            JpegInput::DmaBuf { fd, size, .. } => self.import(fd, size)?,
        };
        let out_buf = self.import(output, output_size)?;
        let s = self.syms;
        let mut pkt: MppHandle = std::ptr::null_mut();
        // SAFETY: an out-pointer to a local and a live buffer (the packet takes a reference).
        check("mpp_packet_init_with_buffer", unsafe { (s.packet_init_with_buffer)(&mut pkt, in_buf) })?;
        let mut frame: MppHandle = std::ptr::null_mut();
        let mut enqueued = false;
        let result = (|| {
            // SAFETY: the packet just made; length first, so that it never exceeds the size.
            unsafe { (s.packet_set_length)(pkt, len) };
            // SAFETY: as above (the hardware reads `size` bytes: see MppPacketSetLengthFn).
            unsafe { (s.packet_set_size)(pkt, len) };
            // SAFETY: an out-pointer to a local.
            check("mpp_frame_init", unsafe { (s.frame_init)(&mut frame) })?;
            // SAFETY: the frame just made and a live imported buffer (the frame takes a reference).
            unsafe { (s.frame_set_buffer)(frame, out_buf) };
            let task = self.take_task(MPP_PORT_INPUT)?;
            // SAFETY: a task dequeued from the input port; the packet and frame are live.
            check("mpp_task_meta_set_packet(KEY_INPUT_PACKET)", unsafe {
                (s.meta_set_packet)(task, KEY_INPUT_PACKET, pkt)
            })?;
            // SAFETY: as above.
            check("mpp_task_meta_set_frame(KEY_OUTPUT_FRAME)", unsafe {
                (s.meta_set_frame)(task, KEY_OUTPUT_FRAME, frame)
            })?;
            // From here MPP may hold the packet and write the frame, whatever enqueue returns.
            enqueued = true;
            self.give_task(MPP_PORT_INPUT, task)?;
            let task = self.take_task(MPP_PORT_OUTPUT)?;
            let mut out: MppHandle = std::ptr::null_mut();
            // SAFETY: a task dequeued from the output port and an out-pointer to a local.
            let got = check("mpp_task_meta_get_frame(KEY_OUTPUT_FRAME)", unsafe {
                (s.meta_get_frame)(task, KEY_OUTPUT_FRAME, &mut out)
            });
            self.give_task(MPP_PORT_OUTPUT, task)?;
            got?;
            if out != frame {
                bail!(
                    "MPP returned another frame than the one attached to the JPEG: the library at {} is broken",
                    self.lib.path
                );
            }
            // The input task comes back with the packet: take it, enqueue the empty task.
            let task = self.take_task(MPP_PORT_INPUT)?;
            let mut back: MppHandle = std::ptr::null_mut();
            // SAFETY: a task dequeued from the input port and an out-pointer to a local.
            let got = check("mpp_task_meta_get_packet(KEY_INPUT_PACKET)", unsafe {
                (s.meta_get_packet)(task, KEY_INPUT_PACKET, &mut back)
            });
            self.give_task(MPP_PORT_INPUT, task)?;
            got?;
            // SAFETY: the live frame attached above.
            let info = unsafe { self.lib.frame_info(frame, Some(output.as_raw_fd()), None) };
            if info.errinfo != 0 || info.discard != 0 {
                return Ok(JpegOutcome::Corrupt { errinfo: info.errinfo.max(info.discard) });
            }
            self.decoded += 1;
            Ok(JpegOutcome::Picture(info))
        })();
        if let (Err(e), true) = (&result, enqueued) {
            // MPP's decoder thread may still read the packet and write the frame: keep both
            // until mpp_destroy has joined it (teardown).
            let why = format!("{e:#}");
            self.stranded.push((pkt, frame));
            let msg = format!("{why}; MPP's JPEG decoder is now out of service (its frame is freed after mpp_destroy)");
            self.poisoned = Some(why);
            bail!("{msg}");
        }
        if !frame.is_null() {
            // SAFETY: the frame made above, deinited once (drops its buffer reference).
            let r = unsafe { (self.lib.mpp_frame_deinit)(&mut frame) };
            if let Err(e) = check("mpp_frame_deinit", r) {
                log::warn!("{e}");
            }
        }
        // SAFETY: the packet made above, deinited once (drops its buffer reference).
        let d = unsafe { (self.lib.mpp_packet_deinit)(&mut pkt) };
        let outcome = result?;
        check("mpp_packet_deinit", d)?;
        Ok(outcome)
    }

    fn teardown(&mut self) -> Result<()> {
        let mut first: Result<()> = Ok(());
        if !self.ctx.is_null() {
            // SAFETY: the live context, destroyed once (nulled below); it joins MPP's threads,
            // so nothing of MPP uses a stranded packet or frame after it.
            first = check("mpp_destroy", unsafe { (self.lib.mpp_destroy)(self.ctx) });
            self.ctx = std::ptr::null_mut();
        }
        for (mut pkt, mut frame) in std::mem::take(&mut self.stranded) {
            if !frame.is_null() {
                // SAFETY: a frame of a failed decode, never deinited, MPP's threads gone.
                first = first.and(check("mpp_frame_deinit", unsafe { (self.lib.mpp_frame_deinit)(&mut frame) }));
            }
            // SAFETY: as above, its packet.
            first = first.and(check("mpp_packet_deinit", unsafe { (self.lib.mpp_packet_deinit)(&mut pkt) }));
        }
        self.imported.clear(self.syms.buffer_put);
        if let Some((b, _)) = self.input.take() {
            self.put(b);
        }
        if !self.group.is_null() {
            // SAFETY: the live internal group, put once (its buffers were put above).
            first = first.and(check("mpp_buffer_group_put", unsafe { (self.lib.mpp_buffer_group_put)(self.group) }));
            self.group = std::ptr::null_mut();
        }
        first
    }

    /// `mpp_destroy`, then `mpp_frame_deinit`/`mpp_packet_deinit` of a failed decode's frame
    /// and packet, then `mpp_buffer_put` of every imported buffer and of the input buffer, then
    /// `mpp_buffer_group_put`; the first error is returned (all steps run).
    pub fn destroy(mut self) -> Result<()> {
        self.teardown()
    }
}

impl Drop for MppJpeg {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            log::warn!("{e}");
        }
    }
}

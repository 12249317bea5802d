//! The stream decoder (`decode_put_packet` / `decode_get_frame`): [`Mpp`], its options, the
//! frames it hands out, and the external buffer group that makes it decode into zcpipe's
//! dma-bufs.

use std::ffi::{c_int, c_void};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::Arc;

use anyhow::{bail, Result};

use super::*;

/// How to set up a decoder (`MPP_DEC_SET_PARSER_SPLIT_MODE`, `MPP_SET_OUTPUT_TIMEOUT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecoderOptions {
    /// Parser split mode: packets may be arbitrary chunks of an Annex-B / JPEG stream (set
    /// before `mpp_init`, as the header requires). Off: each packet is one whole frame.
    pub split_mode: bool,
    /// How long `decode_get_frame` waits for a frame: [`MPP_POLL_NON_BLOCK`] (0),
    /// [`MPP_POLL_BLOCK`] (-1) or milliseconds (1..=[`MPP_POLL_MAX`]).
    pub output_timeout_ms: i64,
}

impl Default for DecoderOptions {
    /// Split mode on, non-blocking output.
    fn default() -> Self {
        DecoderOptions { split_mode: true, output_timeout_ms: MPP_POLL_NON_BLOCK }
    }
}

/// What one `decode_get_frame` returned, as plain data (`mpp_frame.h` accessors).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameInfo {
    /// Picture width, pixels.
    pub width: u32,
    /// Picture height, rows.
    pub height: u32,
    /// Row pitch of the luma plane, bytes (= pixels for 8-bit NV12; MPP aligns it to 16 or
    /// more).
    pub hor_stride: u32,
    /// Rows from the start of the luma plane to the start of the chroma plane (e.g. 1088 for
    /// 1080-line H.264).
    pub ver_stride: u32,
    /// `MppFrameFormat` with its flag bits ([`MPP_FMT_YUV420SP`] = NV12).
    pub fmt: u32,
    /// An info-change frame: no picture; the stream's size and strides are new. Set up the
    /// buffers and call [`Mpp::info_change_ready`].
    pub info_change: bool,
    /// The end of the stream. MPP sets it on the last picture, which still has its buffer
    /// (use it: [`FrameInfo::has_picture`] does not look at `eos`), and then usually sends an
    /// empty EOS frame without a buffer; stop after the first frame with `eos`, after using
    /// its picture if it has one.
    pub eos: bool,
    /// Nonzero when the decoder met an error in this frame.
    pub errinfo: u32,
    /// Nonzero when MPP says to drop this frame (e.g. a reference was missing).
    pub discard: u32,
    /// Presentation time as set on the packets (`mpp_packet_set_pts`), in the caller's unit.
    pub pts: i64,
    /// Bytes a buffer must hold for this stream (`mpp_frame_get_buf_size`; on an info-change
    /// frame, the size to allocate each external buffer with).
    pub buf_size: usize,
    /// The dma-buf fd MPP reports for the frame's buffer (the committed fd: the binding's
    /// duplicate of the caller's, open while the [`DecodedFrame`] lives), if it has one.
    pub fd: Option<RawFd>,
    /// The buffer's index in the external group (the `index` given at commit, i.e. the
    /// position in [`Mpp::attach_external_buffers`]'s list), if it has a buffer.
    pub buffer_index: Option<i32>,
}

impl FrameInfo {
    /// Whether this frame carries a picture to use (a buffer, no info change, no error, not
    /// discarded).
    pub fn has_picture(&self) -> bool {
        self.fd.is_some() && !self.info_change && self.errinfo == 0 && self.discard == 0
    }
}

/// One frame from `decode_get_frame`, held from MPP until dropped (or [`DecodedFrame::release`]d):
/// while it lives its buffer is not reused by the decoder, and the external group's fds stay
/// open (it shares them with the [`Mpp`]), so [`FrameInfo::fd`] names the committed dma-buf
/// even after the `Mpp` is dropped. Dropping it calls `mpp_frame_deinit`, which hands the
/// buffer back, then lets go of the fds.
pub struct DecodedFrame {
    frame: MppHandle,
    info: FrameInfo,
    lib: Arc<Libmpp>,
    // Dropped after `Drop::drop` has deinited the frame.
    _fds: Option<Arc<Vec<OwnedFd>>>,
}

// SAFETY: an MppFrame is a heap object MPP's accessors only read, and `mpp_frame_deinit`
// drops the buffer reference under the buffer group's lock (`mpp_buffer_impl.cpp`): it may be
// released on a thread other than the decoding one. `DecodedFrame` is not `Sync` (no `&`
// sharing across threads is needed).
unsafe impl Send for DecodedFrame {}

impl std::fmt::Debug for DecodedFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodedFrame").field("info", &self.info).finish()
    }
}

impl DecodedFrame {
    /// The frame's fields.
    pub fn info(&self) -> &FrameInfo {
        &self.info
    }

    /// `mpp_frame_deinit`: gives the frame (and its buffer) back to MPP now.
    pub fn release(mut self) -> Result<()> {
        self.deinit()
    }

    fn deinit(&mut self) -> Result<()> {
        if self.frame.is_null() {
            return Ok(());
        }
        // SAFETY: `self.frame` is the live MppFrame decode_get_frame returned, deinited once
        // (set to null by MPP and here).
        let r = unsafe { (self.lib.mpp_frame_deinit)(&mut self.frame) };
        self.frame = std::ptr::null_mut();
        check("mpp_frame_deinit", r)
    }
}

impl Drop for DecodedFrame {
    fn drop(&mut self) {
        if let Err(e) = self.deinit() {
            log::warn!("{e}");
        }
    }
}

/// An external buffer group (`MPP_BUFFER_EXTERNAL`, `MPP_BUFFER_TYPE_EXT_DMA`) with its own
/// duplicates of the committed dma-buf fds: MPP keeps the fd numbers it was given (no dup
/// for EXT_DMA), so they stay open until the group is put and every [`DecodedFrame`] with a
/// buffer (each holds the `Arc`) is dropped.
struct ExtGroup {
    group: MppHandle,
    fds: Arc<Vec<OwnedFd>>,
}

/// One MPP decoder context on a loaded library: `mpp_create` + `mpp_init`, packets in,
/// frames out, an external buffer group of the caller's dma-bufs. Dropping it calls
/// `mpp_destroy`, then puts the buffer group, then closes the group's fds (once no
/// [`DecodedFrame`] holding a buffer is left: each keeps them open).
///
/// Buffer count: MPP keeps its reference pictures in the external group's buffers, decodes
/// only while at least one buffer is unused (`mpp_buffer_group_unused` >= 1; >= 3 with
/// deinterlace: `mpp_dec_normal.cpp`), and stops when more than 4 decoded frames wait untaken.
/// So attach at least references (up to 16 for H.264/H.265 streams, typically 3-5) + the
/// frames the consumer holds at once + 1 buffers, or the decoder stalls for good. Rockchip's
/// `test/mpi_dec_test.c` commits 24, ffmpeg-rockchip's `rkmppdec.c` 20-30: commit 24 unless
/// memory is short and the stream's reference count is known.
pub struct Mpp {
    lib: Arc<Libmpp>,
    ctx: MppHandle,
    api: *const MppApi,
    coding: MppCodingType,
    group: Option<ExtGroup>,
}

// SAFETY: one MPP context is used from one thread at a time (`&mut self` or the owner's
// thread); MPP's own threads are internal. Moving the context between threads is what MPP's
// examples do (create on one, decode on another).
unsafe impl Send for Mpp {}

impl std::fmt::Debug for Mpp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mpp").field("lib", &self.lib.path).field("coding", &coding_name(self.coding)).finish()
    }
}

impl Mpp {
    /// A decoder for `coding` ([`MPP_VIDEO_CODING_AVC`] or [`MPP_VIDEO_CODING_HEVC`];
    /// [`MPP_VIDEO_CODING_MJPEG`] is refused with [`MJPEG_REFUSED`]: use [`MppJpeg`]): `mpp_create`, the library's `MppApi` size checked against
    /// this binding's, `MPP_DEC_SET_PARSER_SPLIT_MODE` (before init, as `rk_mpi_cmd.h`
    /// says), `mpp_init(MPP_CTX_DEC, coding)`, `MPP_SET_OUTPUT_TIMEOUT`. Errors name the
    /// call and its `MPP_RET`.
    pub fn decoder(lib: Arc<Libmpp>, coding: MppCodingType, opts: DecoderOptions) -> Result<Mpp> {
        let Some(name) = coding_name(coding) else {
            bail!("MPP coding {coding} is not one zcpipe decodes: use H.264 ({MPP_VIDEO_CODING_AVC}) or H.265 ({MPP_VIDEO_CODING_HEVC})")
        };
        if coding == MPP_VIDEO_CODING_MJPEG {
            bail!("{MJPEG_REFUSED}");
        }
        if !(-1..=MPP_POLL_MAX).contains(&opts.output_timeout_ms) {
            bail!(
                "MPP output timeout {} ms is out of range: use -1 (block), 0 (non-block) or 1..={MPP_POLL_MAX} ms",
                opts.output_timeout_ms
            );
        }
        let (ctx, api) = lib.create()?;
        // From here on `Drop` destroys the context.
        let mpp = Mpp { lib, ctx, api, coding, group: None };
        let mut split: u32 = opts.split_mode.into();
        mpp.control("MPP_DEC_SET_PARSER_SPLIT_MODE", MPP_DEC_SET_PARSER_SPLIT_MODE, (&mut split as *mut u32).cast())?;
        // SAFETY: the live context; plain enum arguments.
        check(&format!("mpp_init(decoder, {name})"), unsafe { (mpp.lib.mpp_init)(mpp.ctx, MPP_CTX_DEC, coding) })?;
        // An RK_S64, as rk_mpi_cmd.h documents; mpp.cpp reads the MppPollType (a 4-byte enum)
        // at the same address, the low half on little-endian targets: the same value.
        let mut timeout: i64 = opts.output_timeout_ms;
        mpp.control("MPP_SET_OUTPUT_TIMEOUT", MPP_SET_OUTPUT_TIMEOUT, (&mut timeout as *mut i64).cast())?;
        Ok(mpp)
    }

    /// The library this context runs on.
    pub fn lib(&self) -> &Arc<Libmpp> {
        &self.lib
    }

    /// `MppApi::control(ctx, cmd, param)`; `name` is the command's name for the error.
    pub(super) fn control(&self, name: &str, cmd: MpiCmd, param: *mut c_void) -> Result<()> {
        self.lib.control(self.api, self.ctx, name, cmd, param)
    }

    /// `decode_put_packet` of `data` (an arbitrary chunk of the stream in split mode, else
    /// one whole frame) with presentation time `pts`; `eos` marks the end of the stream
    /// (`mpp_packet_set_eos`; `data` may then be empty). Returns `true` when MPP took (copied)
    /// the packet, `false` when its input queue is full (`MPP_ERR_BUFFER_FULL`): take frames
    /// out with [`Mpp::get_frame`] and put the same bytes again.
    pub fn put_packet(&self, data: &[u8], pts: i64, eos: bool) -> Result<bool> {
        let mut pkt: MppHandle = std::ptr::null_mut();
        // SAFETY: the packet only points at `data` (mpp_packet_init does not copy); MPP never
        // writes through a packet on the decode path, and the packet is deinited below, before
        // `data`'s borrow ends. The `*mut` is the header's type, not a write.
        check("mpp_packet_init", unsafe {
            (self.lib.mpp_packet_init)(&mut pkt, data.as_ptr() as *mut c_void, data.len())
        })?;
        let put = (|| {
            // SAFETY: the packet just initialised.
            unsafe { (self.lib.mpp_packet_set_pts)(pkt, pts) };
            if eos {
                // SAFETY: as above.
                check("mpp_packet_set_eos", unsafe { (self.lib.mpp_packet_set_eos)(pkt) })?;
            }
            // SAFETY: `api` is MPP's static table.
            let Some(f) = (unsafe { (*self.api).decode_put_packet }) else {
                bail!("MPP's MppApi has no decode_put_packet entry: the library at {} is broken", self.lib.path)
            };
            // SAFETY: the live context and packet; MPP copies what it accepts.
            match unsafe { f(self.ctx, pkt) } {
                MPP_OK => Ok(true),
                MPP_ERR_BUFFER_FULL => Ok(false),
                r => check("decode_put_packet", r).map(|_| false),
            }
        })();
        // SAFETY: the packet initialised above, deinited once.
        let d = unsafe { (self.lib.mpp_packet_deinit)(&mut pkt) };
        let accepted = put?;
        check("mpp_packet_deinit", d)?;
        Ok(accepted)
    }

    /// `decode_get_frame`: the next frame, an info-change frame or an EOS frame, or `None`
    /// when none is ready within the output timeout (a NULL frame, or `MPP_ERR_TIMEOUT`).
    pub fn get_frame(&self) -> Result<Option<DecodedFrame>> {
        // SAFETY: `api` is MPP's static table.
        let Some(f) = (unsafe { (*self.api).decode_get_frame }) else {
            bail!("MPP's MppApi has no decode_get_frame entry: the library at {} is broken", self.lib.path)
        };
        let mut frame: MppHandle = std::ptr::null_mut();
        // SAFETY: the live context and an out-pointer to a local.
        let r = unsafe { f(self.ctx, &mut frame) };
        if r == MPP_ERR_TIMEOUT {
            return Ok(None);
        }
        check("decode_get_frame", r)?;
        if frame.is_null() {
            return Ok(None);
        }
        let lib = &self.lib;
        // SAFETY: (every accessor below) `frame` is the live MppFrame just returned; the
        // accessors only read it.
        let buffer = unsafe { (lib.frame_buffer)(frame) };
        let (fd, buffer_index) = if buffer.is_null() {
            (None, None)
        } else {
            // SAFETY: the frame's buffer, alive while the frame holds it.
            unsafe { (Some((lib.buffer_fd)(buffer, TAG.as_ptr())), Some((lib.buffer_index)(buffer, TAG.as_ptr()))) }
        };
        // SAFETY: the live frame just returned.
        let info = unsafe { lib.frame_info(frame, fd, buffer_index) };
        let fds = info.fd.and(self.group.as_ref()).map(|g| Arc::clone(&g.fds));
        Ok(Some(DecodedFrame { frame, info, lib: Arc::clone(&self.lib), _fds: fds }))
    }

    /// `control(MPP_DEC_SET_INFO_CHANGE_READY)`: after an info-change frame, once the buffers
    /// are attached, lets the decoder go on.
    pub fn info_change_ready(&self) -> Result<()> {
        self.control("MPP_DEC_SET_INFO_CHANGE_READY", MPP_DEC_SET_INFO_CHANGE_READY, std::ptr::null_mut())
    }

    /// Makes `buffers` (dma-buf fds, each `size` bytes, at least the info-change frame's
    /// `buf_size`) the decoder's frame buffers: `mpp_buffer_group_get` (external,
    /// `MPP_BUFFER_TYPE_EXT_DMA`), one `mpp_buffer_commit` per buffer with `index` = its
    /// position in `buffers`, then `control(MPP_DEC_SET_EXT_BUF_GROUP, group)`. Each fd is
    /// duplicated and the duplicate kept open until the group is put (on drop, after
    /// `mpp_destroy`) and no [`DecodedFrame`] with a buffer is left, so MPP's fds stay valid
    /// however the caller's own are handled. Call it once, after `mpp_init`; a second call is
    /// refused.
    ///
    /// How many: at least the stream's reference pictures + the frames the consumer holds at
    /// once + 1 (see [`Mpp`]); 24 as Rockchip's `mpi_dec_test` commits is the safe choice.
    pub fn attach_external_buffers(&mut self, buffers: &[BorrowedFd<'_>], size: usize) -> Result<()> {
        if self.group.is_some() {
            bail!("MPP external buffers are already attached: zcpipe commits its buffers once per decoder");
        }
        if buffers.is_empty() || size == 0 {
            bail!(
                "MPP external buffer group needs at least one buffer of nonzero size (got {} of {size} bytes)",
                buffers.len()
            );
        }
        let mut group: MppHandle = std::ptr::null_mut();
        // SAFETY: an out-pointer to a local and two static C strings.
        check("mpp_buffer_group_get(external, EXT_DMA)", unsafe {
            (self.lib.mpp_buffer_group_get)(
                &mut group,
                MPP_BUFFER_TYPE_EXT_DMA,
                MPP_BUFFER_EXTERNAL,
                TAG.as_ptr(),
                TAG.as_ptr(),
            )
        })?;
        // From here on the group is put on every path (`ExtGroup` in `self.group` on drop).
        self.group = Some(ExtGroup { group, fds: Arc::new(Vec::with_capacity(buffers.len())) });
        let g = self.group.as_mut().expect("just set");
        for (i, fd) in buffers.iter().enumerate() {
            let (own, mut info) = ext_dma_info(*fd, size, i as c_int)?;
            // No frame exists before the group is set: the Arc is not shared yet.
            Arc::get_mut(&mut g.fds).expect("not shared before the group is set").push(own);
            // SAFETY: the group just got; `info` lives for the call (MPP copies it); NULL
            // buffer out-pointer = commit; static C strings.
            check(&format!("mpp_buffer_commit (buffer {i})"), unsafe {
                (self.lib.mpp_buffer_import_with_tag)(
                    g.group,
                    &mut info,
                    std::ptr::null_mut(),
                    TAG.as_ptr(),
                    TAG.as_ptr(),
                )
            })?;
        }
        let gp = g.group;
        self.control("MPP_DEC_SET_EXT_BUF_GROUP", MPP_DEC_SET_EXT_BUF_GROUP, gp)
    }

    /// The fds MPP was given for the external buffers, by index (duplicates of the caller's).
    pub fn external_fds(&self) -> Vec<BorrowedFd<'_>> {
        self.group.as_ref().map(|g| g.fds.iter().map(|f| f.as_fd()).collect()).unwrap_or_default()
    }

    /// `mpp_buffer_group_unused`: external buffers neither a frame nor the decoder holds now
    /// (the decoder's reference pictures are not counted: they are in use), or `None` before
    /// [`Mpp::attach_external_buffers`]. MPP decodes only while this is at least 1.
    pub fn unused_buffers(&self) -> Option<i32> {
        // SAFETY: the live group.
        self.group.as_ref().map(|g| unsafe { (self.lib.mpp_buffer_group_unused)(g.group) })
    }

    /// `MppApi::reset`: drops every queued packet and frame (e.g. before seeking).
    pub fn reset(&self) -> Result<()> {
        // SAFETY: `api` is MPP's static table.
        let Some(f) = (unsafe { (*self.api).reset }) else {
            bail!("MPP's MppApi has no reset entry: the library at {} is broken", self.lib.path)
        };
        // SAFETY: the live context.
        check("reset", unsafe { f(self.ctx) })
    }

    /// `mpp_destroy`, then `mpp_buffer_group_clear` + `mpp_buffer_group_put` of the external
    /// group, then closing its fds (unless frames still hold them); the first error is
    /// returned (all steps run).
    pub fn destroy(mut self) -> Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<()> {
        let mut first: Result<()> = Ok(());
        if !self.ctx.is_null() {
            // SAFETY: the live context, destroyed once (nulled below).
            first = check("mpp_destroy", unsafe { (self.lib.mpp_destroy)(self.ctx) });
            self.ctx = std::ptr::null_mut();
        }
        if let Some(g) = self.group.take() {
            // SAFETY: the live group; the context that used it is gone.
            let c = check("mpp_buffer_group_clear", unsafe { (self.lib.mpp_buffer_group_clear)(g.group) });
            // SAFETY: as above, put once.
            let p = check("mpp_buffer_group_put", unsafe { (self.lib.mpp_buffer_group_put)(g.group) });
            first = first.and(c).and(p);
            drop(g.fds);
        }
        first
    }
}

impl Drop for Mpp {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            log::warn!("{e}");
        }
    }
}

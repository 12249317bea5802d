//! The H.264 encoder (`encode_put_frame` / `encode_get_packet`): [`Encoder`] reads the
//! caller's NV12 dma-buf in place (imported, not copied) and gives each picture's Annex-B
//! bytes back, with whether it is an intra picture.
//!
//! The call sequence and values follow Rockchip's `test/mpi_enc_test.c`: `mpp_create`,
//! `MPP_SET_OUTPUT_TIMEOUT` (block), `mpp_init(MPP_CTX_ENC, MPP_VIDEO_CodingAVC)`, an
//! `MppEncCfg` (`mpp_enc_cfg_init`, `mpp_enc_cfg_set_s32`/`_u32` by name: `prep:*`, `rc:*`,
//! `codec:type`, `h264:*`) applied with `MPP_ENC_SET_CFG` and freed, then
//! `MPP_ENC_SET_HEADER_MODE`. Per frame: `mpp_frame_init`, its size, strides, format, pts and
//! buffer set, `encode_put_frame`, `encode_get_packet`, the packet read and deinited.

use std::ffi::{c_void, CStr};
use std::os::fd::BorrowedFd;
use std::sync::Arc;

use anyhow::{bail, Result};

use super::*;

/// `MppEncRcDropFrmMode` (`rk_venc_rc.h`) `MPP_ENC_RC_DROP_FRM_DISABLED`: the rate control
/// never drops a frame (one frame in, one packet out).
pub const MPP_ENC_RC_DROP_FRM_DISABLED: u32 = 0;
/// `MPP_ENC_MIN_BPS` (`rk_venc_rc.h`, `SZ_1K`): the lowest bit rate MPP takes.
pub const MPP_ENC_MIN_BPS: u32 = 1024;
/// `MPP_ENC_MAX_BPS` (`rk_venc_rc.h`, `SZ_1M * 200`): the highest.
pub const MPP_ENC_MAX_BPS: u32 = 200 << 20;
/// H.264 `profile_idc` of the High profile (`h264:profile`, as `mpi_enc_test.c` sets it).
pub const H264_PROFILE_HIGH: i32 = 100;
/// H.264 `level_idc` 4.0 (`h264:level`: 1080p at 30 fps, as `mpi_enc_test.c` sets it).
pub const H264_LEVEL_40: i32 = 40;

/// Imported input dma-bufs kept per encoder (a capture pool has fewer; beyond it the least
/// recently used is put).
const MAX_IMPORTS: usize = 64;

/// How to set up an [`Encoder`]: NV12 input of `width` x `height` pixels in buffers of
/// `hor_stride` x `ver_stride` (the luma plane's row pitch in bytes, i.e. the V4L2 buffer's
/// `bytesperline`, and the rows from the luma plane's start to the chroma plane's), and the
/// stream's rate control.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EncoderOptions {
    /// Picture width, pixels.
    pub width: u32,
    /// Picture height, rows.
    pub height: u32,
    /// Luma row pitch, pixels (= bytes for 8-bit NV12), at least `width`.
    pub hor_stride: u32,
    /// Rows of the luma plane in the buffer (the chroma plane starts at `hor_stride *
    /// ver_stride`), at least `height`.
    pub ver_stride: u32,
    /// Frames per second (in and out: `rc:fps_in_num` / `rc:fps_out_num`, denominators 1).
    pub fps: u32,
    /// Frames from one IDR picture to the next (`rc:gop`).
    pub gop: u32,
    /// Target bit rate, bits per second (`rc:bps_target`; CBR between 15/16 and 17/16 of
    /// it, as `mpi_enc_test.c`), [`MPP_ENC_MIN_BPS`]..=[`MPP_ENC_MAX_BPS`].
    pub bitrate: u32,
}

impl EncoderOptions {
    /// Bytes one input frame spans: `hor_stride * ver_stride * 3 / 2` (NV12: the chroma plane
    /// is half the luma plane's rows).
    pub fn frame_bytes(&self) -> usize {
        self.hor_stride as usize * self.ver_stride as usize * 3 / 2
    }

    /// Refuses options MPP would refuse or misread, in one line naming the field.
    pub(super) fn check(&self) -> Result<()> {
        let o = self;
        if o.width == 0 || o.height == 0 || !o.width.is_multiple_of(2) || !o.height.is_multiple_of(2) {
            bail!("MPP encoder size {}x{} must be nonzero and even (NV12 has 2x2 chroma)", o.width, o.height);
        }
        if o.hor_stride < o.width || o.ver_stride < o.height {
            bail!(
                "MPP encoder strides {}x{} are smaller than the picture {}x{}: hor_stride is the buffer's bytesperline, ver_stride its luma rows",
                o.hor_stride,
                o.ver_stride,
                o.width,
                o.height
            );
        }
        if o.fps == 0 || o.gop == 0 || i32::try_from(o.fps.max(o.gop).max(o.hor_stride).max(o.ver_stride)).is_err() {
            bail!("MPP encoder fps {} and gop {} must be at least 1 (and strides fit an RK_S32)", o.fps, o.gop);
        }
        if !(MPP_ENC_MIN_BPS..=MPP_ENC_MAX_BPS).contains(&o.bitrate) {
            bail!("MPP encoder bit rate {} b/s is out of MPP's range {MPP_ENC_MIN_BPS}..={MPP_ENC_MAX_BPS}", o.bitrate);
        }
        Ok(())
    }

    /// The `MppEncCfg` entries, by name, in `mpi_enc_test.c`'s order (all `RK_S32` but the
    /// drop mode).
    pub(super) fn cfg(&self) -> Vec<(&'static CStr, i32)> {
        let o = self;
        let bps = |num: u64| (u64::from(o.bitrate) * num / 16).min(i32::MAX as u64) as i32;
        vec![
            (c"prep:width", o.width as i32),
            (c"prep:height", o.height as i32),
            (c"prep:hor_stride", o.hor_stride as i32),
            (c"prep:ver_stride", o.ver_stride as i32),
            (c"prep:format", MPP_FMT_YUV420SP as i32),
            (c"rc:mode", MPP_ENC_RC_MODE_CBR),
            (c"rc:fps_in_flex", 0),
            (c"rc:fps_in_num", o.fps as i32),
            (c"rc:fps_in_denom", 1),
            (c"rc:fps_out_flex", 0),
            (c"rc:fps_out_num", o.fps as i32),
            (c"rc:fps_out_denom", 1),
            (c"rc:bps_target", bps(16)),
            (c"rc:bps_max", bps(17)),
            (c"rc:bps_min", bps(15)),
            (c"rc:gop", o.gop as i32),
            (c"codec:type", MPP_VIDEO_CODING_AVC),
            (c"h264:profile", H264_PROFILE_HIGH),
            (c"h264:level", H264_LEVEL_40),
            (c"h264:cabac_en", 1),
            (c"h264:cabac_idc", 0),
            (c"h264:trans8x8", 1),
        ]
    }
}

/// One encoded picture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodedPacket {
    /// Its Annex-B bytes (start codes, then NAL units; an IDR picture's packet starts with SPS
    /// and PPS: the header mode is `MPP_ENC_HEADER_MODE_EACH_IDR`).
    pub data: Vec<u8>,
    /// Whether it is an intra picture (a decoder can start at it): MPP's `KEY_OUTPUT_INTRA`
    /// packet meta, or, from a library that sets none, whether it holds an IDR slice.
    pub key: bool,
    /// The pts given with the frame, as MPP returns it on the packet.
    pub pts: i64,
}

/// The encoder's entry points beyond [`Libmpp`]'s, resolved from the same library when an
/// encoder is made (so a library without them still decodes).
#[derive(Clone, Copy)]
struct EncSyms {
    cfg_init: MppEncCfgInitFn,
    cfg_deinit: MppEncCfgDeinitFn,
    cfg_set_s32: MppEncCfgSetS32Fn,
    cfg_set_u32: MppEncCfgSetU32Fn,
    frame_init: MppFrameInitFn,
    frame_set_width: MppFrameSetU32Fn,
    frame_set_height: MppFrameSetU32Fn,
    frame_set_hor_stride: MppFrameSetU32Fn,
    frame_set_ver_stride: MppFrameSetU32Fn,
    frame_set_fmt: MppFrameSetU32Fn,
    frame_set_pts: MppFrameSetPtsFn,
    frame_set_buffer: MppFrameSetBufferFn,
    packet_pos: MppPacketGetPosFn,
    packet_length: MppPacketGetLengthFn,
    packet_pts: MppPacketGetPtsFn,
    packet_has_meta: MppPacketHasMetaFn,
    packet_meta: MppPacketGetMetaFn,
    meta_get_s32: MppMetaGetS32Fn,
    buffer_put: MppBufferPutFn,
}

impl EncSyms {
    fn resolve(lib: &Libmpp) -> Result<EncSyms> {
        const LACKS: &str = "it cannot encode; install Rockchip's current MPP or encode on the CPU";
        Ok(EncSyms {
            cfg_init: lib_sym!(lib, LACKS, "mpp_enc_cfg_init", MppEncCfgInitFn),
            cfg_deinit: lib_sym!(lib, LACKS, "mpp_enc_cfg_deinit", MppEncCfgDeinitFn),
            cfg_set_s32: lib_sym!(lib, LACKS, "mpp_enc_cfg_set_s32", MppEncCfgSetS32Fn),
            cfg_set_u32: lib_sym!(lib, LACKS, "mpp_enc_cfg_set_u32", MppEncCfgSetU32Fn),
            frame_init: lib_sym!(lib, LACKS, "mpp_frame_init", MppFrameInitFn),
            frame_set_width: lib_sym!(lib, LACKS, "mpp_frame_set_width", MppFrameSetU32Fn),
            frame_set_height: lib_sym!(lib, LACKS, "mpp_frame_set_height", MppFrameSetU32Fn),
            frame_set_hor_stride: lib_sym!(lib, LACKS, "mpp_frame_set_hor_stride", MppFrameSetU32Fn),
            frame_set_ver_stride: lib_sym!(lib, LACKS, "mpp_frame_set_ver_stride", MppFrameSetU32Fn),
            frame_set_fmt: lib_sym!(lib, LACKS, "mpp_frame_set_fmt", MppFrameSetU32Fn),
            frame_set_pts: lib_sym!(lib, LACKS, "mpp_frame_set_pts", MppFrameSetPtsFn),
            frame_set_buffer: lib_sym!(lib, LACKS, "mpp_frame_set_buffer", MppFrameSetBufferFn),
            packet_pos: lib_sym!(lib, LACKS, "mpp_packet_get_pos", MppPacketGetPosFn),
            packet_length: lib_sym!(lib, LACKS, "mpp_packet_get_length", MppPacketGetLengthFn),
            packet_pts: lib_sym!(lib, LACKS, "mpp_packet_get_pts", MppPacketGetPtsFn),
            packet_has_meta: lib_sym!(lib, LACKS, "mpp_packet_has_meta", MppPacketHasMetaFn),
            packet_meta: lib_sym!(lib, LACKS, "mpp_packet_get_meta", MppPacketGetMetaFn),
            meta_get_s32: lib_sym!(lib, LACKS, "mpp_meta_get_s32", MppMetaGetS32Fn),
            buffer_put: lib_sym!(lib, LACKS, "mpp_buffer_put_with_caller", MppBufferPutFn),
        })
    }
}

/// Whether Annex-B `data` holds an IDR slice (H.264 NAL unit type 5).
pub fn h264_has_idr(data: &[u8]) -> bool {
    data.windows(4).any(|w| w[..3] == [0, 0, 1] && w[3] & 0x1f == 5)
}

/// One MPP H.264 encoder context on a loaded library (see the module's documentation):
/// [`Encoder::encode`] takes an NV12 dma-buf and returns its packet. Input dma-bufs are
/// imported once and cached by inode (up to 64), each with the encoder's own duplicate of the
/// fd, which keeps the buffer allocated until the encoder is dropped (or evicts it).
/// Dropping it calls `mpp_destroy`, then puts the imported buffers and closes the duplicates.
pub struct Encoder {
    lib: Arc<Libmpp>,
    syms: EncSyms,
    ctx: MppHandle,
    api: *const MppApi,
    opts: EncoderOptions,
    imports: Imports,
    encoded: u64,
}

// SAFETY: as for `Mpp`: one context used from one thread at a time (`&mut self`); MPP's own
// threads are internal, and its buffers are reference counted under its own locks.
unsafe impl Send for Encoder {}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("lib", &self.lib.path)
            .field("opts", &self.opts)
            .field("imports", &self.imports.len())
            .field("encoded", &self.encoded)
            .finish()
    }
}

impl Encoder {
    /// An H.264 encoder: the options checked, the encoder's symbols resolved, `mpp_create`
    /// (the `MppApi` size checked), `MPP_SET_OUTPUT_TIMEOUT` = block (before init, as
    /// `mpi_enc_test.c`: `encode_get_packet` waits for the packet), `mpp_init(MPP_CTX_ENC,
    /// MPP_VIDEO_CodingAVC)`, the configuration (`mpp_enc_cfg_init`, every entry of
    /// [`EncoderOptions`] plus CBR, High profile, level 4.0, CABAC, 8x8 transform, no frame
    /// drops, `MPP_ENC_SET_CFG`, `mpp_enc_cfg_deinit`), then `MPP_ENC_SET_HEADER_MODE` =
    /// `MPP_ENC_HEADER_MODE_EACH_IDR` (SPS and PPS before every IDR picture, so a clip cut at
    /// any keyframe plays). Errors name the call and its `MPP_RET`.
    pub fn new(lib: Arc<Libmpp>, opts: &EncoderOptions) -> Result<Encoder> {
        opts.check()?;
        let syms = EncSyms::resolve(&lib)?;
        let (ctx, api) = lib.create()?;
        // From here on `Drop` destroys the context.
        let enc = Encoder { lib, syms, ctx, api, opts: *opts, imports: Imports::new(MAX_IMPORTS), encoded: 0 };
        // SAFETY: `api` is MPP's static table (size checked by `create`).
        let (put, get) = unsafe { ((*api).encode_put_frame, (*api).encode_get_packet) };
        if put.is_none() || get.is_none() {
            bail!(
                "MPP's MppApi has no encode_put_frame/encode_get_packet entry: the library at {} cannot encode",
                enc.lib.path
            );
        }
        // An RK_S64 as rk_mpi_cmd.h documents (see `Mpp::decoder`).
        let mut timeout: i64 = MPP_POLL_BLOCK;
        enc.control("MPP_SET_OUTPUT_TIMEOUT", MPP_SET_OUTPUT_TIMEOUT, (&mut timeout as *mut i64).cast())?;
        // SAFETY: the live context; plain enum arguments.
        check("mpp_init(encoder, H.264)", unsafe { (enc.lib.mpp_init)(enc.ctx, MPP_CTX_ENC, MPP_VIDEO_CODING_AVC) })?;
        enc.configure()?;
        let mut mode: std::ffi::c_int = MPP_ENC_HEADER_MODE_EACH_IDR;
        enc.control("MPP_ENC_SET_HEADER_MODE(EACH_IDR)", MPP_ENC_SET_HEADER_MODE, (&mut mode as *mut i32).cast())?;
        Ok(enc)
    }

    /// `mpp_enc_cfg_init`, the entries, `MPP_ENC_SET_CFG`, `mpp_enc_cfg_deinit` (also when a
    /// step before it failed).
    fn configure(&self) -> Result<()> {
        let mut cfg: MppHandle = std::ptr::null_mut();
        // SAFETY: an out-pointer to a local.
        check("mpp_enc_cfg_init", unsafe { (self.syms.cfg_init)(&mut cfg) })?;
        let set = (|| {
            for (name, value) in self.opts.cfg() {
                // SAFETY: the live cfg, a static C string; MPP copies the value.
                let r = unsafe { (self.syms.cfg_set_s32)(cfg, name.as_ptr(), value) };
                check(&format!("mpp_enc_cfg_set_s32({}, {value})", name.to_string_lossy()), r)?;
            }
            // SAFETY: as above; `rc:drop_mode` is an RK_U32 entry.
            let r = unsafe { (self.syms.cfg_set_u32)(cfg, c"rc:drop_mode".as_ptr(), MPP_ENC_RC_DROP_FRM_DISABLED) };
            check("mpp_enc_cfg_set_u32(rc:drop_mode, DISABLED)", r)?;
            self.control("MPP_ENC_SET_CFG", MPP_ENC_SET_CFG, cfg)
        })();
        // SAFETY: the cfg made above, freed once; MPP copied what SET_CFG applied.
        let d = check("mpp_enc_cfg_deinit", unsafe { (self.syms.cfg_deinit)(cfg) });
        set.and(d)
    }

    fn control(&self, name: &str, cmd: MpiCmd, param: *mut c_void) -> Result<()> {
        self.lib.control(self.api, self.ctx, name, cmd, param)
    }

    /// The library this encoder runs on.
    pub fn lib(&self) -> &Arc<Libmpp> {
        &self.lib
    }

    /// The options it was made with.
    pub fn options(&self) -> &EncoderOptions {
        &self.opts
    }

    /// Pictures encoded so far.
    pub fn encoded(&self) -> u64 {
        self.encoded
    }

    /// Distinct input dma-bufs imported and held now.
    pub fn imported(&self) -> usize {
        self.imports.len()
    }

    /// Encodes the NV12 picture in dma-buf `fd` (`size` bytes, at least
    /// [`EncoderOptions::frame_bytes`]; laid out at the options' strides) with presentation
    /// time `pts`; `force_idr` makes it an IDR picture (`MPP_ENC_SET_IDR_FRAME` first).
    /// The buffer is imported (cached by inode), read by the encoder in place, and its packet
    /// returned: `mpp_frame_init`, width, height, strides, format, pts and buffer set,
    /// `encode_put_frame`, `encode_get_packet` (blocking), the packet's bytes, pts and
    /// `KEY_OUTPUT_INTRA` meta read, then `mpp_packet_deinit` and `mpp_frame_deinit`.
    pub fn encode(&mut self, fd: BorrowedFd<'_>, size: usize, pts: i64, force_idr: bool) -> Result<EncodedPacket> {
        let need = self.opts.frame_bytes();
        if size < need {
            bail!(
                "MPP encoder input buffer of {size} bytes is smaller than one {}x{} NV12 frame at strides {}x{} ({need} bytes)",
                self.opts.width,
                self.opts.height,
                self.opts.hor_stride,
                self.opts.ver_stride
            );
        }
        let buffer = self.imports.get(&self.lib, self.syms.buffer_put, fd, size)?;
        if force_idr {
            self.control("MPP_ENC_SET_IDR_FRAME", MPP_ENC_SET_IDR_FRAME, std::ptr::null_mut())?;
        }
        let s = self.syms;
        let mut frame: MppHandle = std::ptr::null_mut();
        // SAFETY: an out-pointer to a local.
        check("mpp_frame_init", unsafe { (s.frame_init)(&mut frame) })?;
        let o = self.opts;
        // SAFETY: (every setter) the frame just made; plain values. `mpp_frame_set_buffer`
        // takes its own reference on the imported buffer, dropped at `mpp_frame_deinit`.
        unsafe {
            (s.frame_set_width)(frame, o.width);
            (s.frame_set_height)(frame, o.height);
            (s.frame_set_hor_stride)(frame, o.hor_stride);
            (s.frame_set_ver_stride)(frame, o.ver_stride);
            (s.frame_set_fmt)(frame, MPP_FMT_YUV420SP);
            (s.frame_set_pts)(frame, pts);
            (s.frame_set_buffer)(frame, buffer);
        }
        let packet = self.put_and_get(frame);
        // SAFETY: the frame made above, deinited once (MPP is done with it: see
        // `put_and_get`).
        let d = check("mpp_frame_deinit", unsafe { (self.lib.mpp_frame_deinit)(&mut frame) });
        let packet = packet?;
        d?;
        self.encoded += 1;
        Ok(packet)
    }

    /// `encode_put_frame(frame)` then `encode_get_packet`, the packet read and deinited.
    fn put_and_get(&self, frame: MppHandle) -> Result<EncodedPacket> {
        // SAFETY: `api` is MPP's static table; both entries were checked non-null on create.
        let (put, get) = unsafe { ((*self.api).encode_put_frame, (*self.api).encode_get_packet) };
        let (Some(put), Some(get)) = (put, get) else { bail!("MPP's MppApi lost its encode entries") };
        // SAFETY: the live context and frame. The hardware reads the frame's dma-buf from here
        // until the packet comes back: with the encoder's input timeout at its default
        // (`MPP_POLL_BLOCK`, `mpp.cpp`) `encode_put_frame` returns only once the encoder has
        // handed the input task back, and `encode_get_packet` below blocks for the packet, so
        // the whole read happens inside `Encoder::encode`, while the caller's `BorrowedFd`
        // borrow (and the cached duplicate) keep the buffer open and allocated.
        check("encode_put_frame", unsafe { put(self.ctx, frame) })?;
        let mut pkt: MppHandle = std::ptr::null_mut();
        // SAFETY: the live context and an out-pointer to a local.
        check("encode_get_packet", unsafe { get(self.ctx, &mut pkt) })?;
        if pkt.is_null() {
            bail!(
                "MPP encode_get_packet returned no packet though it blocks: the library at {} is broken",
                self.lib.path
            );
        }
        // SAFETY: the live packet just returned, read before its deinit.
        let read = unsafe { self.read_packet(pkt) };
        // SAFETY: the packet returned above (the caller's to free), deinited once.
        let d = check("mpp_packet_deinit", unsafe { (self.lib.mpp_packet_deinit)(&mut pkt) });
        let packet = read?;
        d?;
        Ok(packet)
    }

    /// A copy of `pkt`'s bytes (`pos`, `length`), its pts and whether it is intra.
    ///
    /// # Safety
    /// `pkt` is a live `MppPacket` of this library.
    unsafe fn read_packet(&self, pkt: MppHandle) -> Result<EncodedPacket> {
        let s = self.syms;
        // SAFETY: (every getter) the caller's live packet; the getters only read it.
        let (pos, len, pts) = unsafe { ((s.packet_pos)(pkt), (s.packet_length)(pkt), (s.packet_pts)(pkt)) };
        if len > 0 && pos.is_null() {
            bail!("MPP packet of {len} bytes has no data pointer: the library at {} is broken", self.lib.path);
        }
        let data = if len == 0 {
            Vec::new()
        } else {
            // SAFETY: MPP's packet holds `length` readable bytes at `pos` while it lives
            // (mpp_packet.h); copied before the packet is deinited.
            unsafe { std::slice::from_raw_parts(pos as *const u8, len) }.to_vec()
        };
        // SAFETY: the caller's live packet.
        let key = unsafe { self.packet_intra(pkt) }.unwrap_or_else(|| h264_has_idr(&data));
        Ok(EncodedPacket { data, key, pts })
    }

    /// `KEY_OUTPUT_INTRA` of `pkt`'s meta (`mpp_packet_has_meta`, `mpp_packet_get_meta`,
    /// `mpp_meta_get_s32`), or `None` when the packet has no meta or the meta no such key.
    ///
    /// # Safety
    /// `pkt` is a live `MppPacket` of this library.
    unsafe fn packet_intra(&self, pkt: MppHandle) -> Option<bool> {
        let s = self.syms;
        // SAFETY: the caller's live packet.
        if unsafe { (s.packet_has_meta)(pkt) } == 0 {
            return None;
        }
        // SAFETY: as above; the meta belongs to the packet and lives as long.
        let meta = unsafe { (s.packet_meta)(pkt) };
        if meta.is_null() {
            return None;
        }
        let mut v: i32 = 0;
        // SAFETY: the packet's live meta and an out-pointer to a local.
        (unsafe { (s.meta_get_s32)(meta, KEY_OUTPUT_INTRA, &mut v) } == MPP_OK).then_some(v != 0)
    }

    fn teardown(&mut self) -> Result<()> {
        let mut first: Result<()> = Ok(());
        if !self.ctx.is_null() {
            // SAFETY: the live context, destroyed once (nulled below); it joins MPP's threads,
            // so nothing of MPP reads an imported buffer after it.
            first = check("mpp_destroy", unsafe { (self.lib.mpp_destroy)(self.ctx) });
            self.ctx = std::ptr::null_mut();
        }
        self.imports.clear(self.syms.buffer_put);
        first
    }

    /// `mpp_destroy`, then `mpp_buffer_put` of every imported buffer and closing the
    /// encoder's duplicates of their fds; the first error is returned (all steps run).
    pub fn destroy(mut self) -> Result<()> {
        self.teardown()
    }
}

impl Drop for Encoder {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            log::warn!("{e}");
        }
    }
}

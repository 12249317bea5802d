//! MJPEG: a stream of whole JPEGs, decoded one by one into the capture pool, by MPP's
//! hardware JPEG decoder ([`zcpipe_sys::mpp::MppJpeg`]) or on the CPU (zune-jpeg).
//!
//! Two sources give MJPEG: a file or pipe (`--source video:PATH` whose first video stream
//! ffprobe names `mjpeg`: an `.mjpeg`, an `.avi` or `.mov` of JPEGs; [`MjpegSource`]) and a
//! UVC camera asked for `--format MJPG` (see [`super::v4l2`]). For a file, ffmpeg only
//! demuxes (`-c:v copy -f mjpeg pipe:1`, no decoding); [`JpegSplitter`] cuts its byte stream
//! into whole JPEGs by their markers (SOI, each segment by its length, so a thumbnail inside
//! APP1 is skipped whole, SOS then the entropy-coded data up to EOI, RST markers and stuffed
//! `FF 00` bytes inside it).
//!
//! Decoding:
//! - MPP ([`MjpegDecoder::Mpp`]): each JPEG is copied (compressed: a few tens of KiB) into
//!   the decoder's input `MppBuffer`, and MPP writes the picture straight into the pool
//!   buffer, which it imported once ([`FrameSource::fill_buffer`] is overridden: the pool
//!   buffer is never mapped). The layout comes from the decoder: `hor_stride` (16-aligned)
//!   and `ver_stride` (1080 lines are 1088 rows: the chroma plane starts at `hor_stride *
//!   ver_stride`), NV12, or NV16 when MPP keeps a 4:2:2 JPEG's chroma (chips without that
//!   conversion).
//! - CPU ([`MjpegDecoder::Cpu`]): zune-jpeg decodes into a scratch buffer of full-resolution
//!   Y, Cb, Cr; the pool buffer gets NV12 at `bytesperline = align16(even(width))`, chroma
//!   averaged over 2x2 pixels.
//!
//! Both keep the JPEG's samples as they are: full range (JFIF), as MPP's hardware writes
//! them. zcpipe's frame layout has no range field, so downstream converts them as it does
//! every NV12 (limited range): a slightly stronger contrast than the same clip decoded by
//! ffmpeg's NV12 path.
//!
//! Before MPP sees a JPEG its frame header (SOF) is read: one bigger than the pool buffer
//! or the source's size is skipped (MPP would not refuse it: its hardware would write past
//! the buffer), and one MPP would not write as NV12/NV16 (grayscale, 4:4:4, 4:4:0, 4:1:1,
//! other sampling factors, anything but baseline SOF0) is decoded on the CPU, that frame only ([`zcpipe_sys::mpp::JpegSof::mpp_fit`]).
//!
//! A corrupt or truncated JPEG (an MPP error frame, `errinfo`; no usable SOF; a zune-jpeg
//! error) is skipped with a counted warning and the next one is decoded: the run goes on.
//! Every MPP wait is bounded ([`MPP_POLL_MS`]); an MPP failure after a JPEG was handed over
//! (a timeout) destroys the MPP decoder and the rest of the stream is decoded on the CPU.

use std::io::Read;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use super::decoder::{resolve, Decoder, DecoderChoice};
use super::ffmpeg::Child;
use super::image::STRIDE_ALIGN;
use super::spec::SourceSpec;
use super::{FrameSource, SourceInfo};
use zcpipe_core::dmabuf::DmaBuf;
use zcpipe_core::frame::{align_up, Fourcc, FrameLayout, PlaneDesc, MAX_PLANES};
use zcpipe_core::stage::Extras;
use zcpipe_sys::mpp::{
    FrameInfo, JpegInput, JpegOutcome, JpegUnfit, MppJpeg, MPP_FMT_YUV420SP, MPP_FMT_YUV422SP, MPP_FRAME_FMT_MASK,
};

/// How long one MPP poll may wait for the JPEG decoder, milliseconds (a 4K JPEG takes a few
/// ms on RK3588's JPEG decoder; this only bounds a decoder that never answers).
pub(crate) const MPP_POLL_MS: i64 = 2000;

/// Largest JPEG the splitter accepts, bytes (a 4K JPEG at the highest quality is ~10 MiB):
/// a stream that never reaches EOI is an error, not unbounded memory.
pub(crate) const MAX_JPEG_BYTES: usize = 32 << 20;

/// What [`scan_jpeg`] found at the start of a buffer that begins with SOI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scan {
    /// One whole JPEG of this many bytes (through EOI).
    Complete(usize),
    /// A new SOI began at this offset before EOI: the JPEG before it is truncated.
    Truncated(usize),
    /// The buffer ends inside the JPEG: read more.
    NeedMore,
}

/// Where [`scan_jpeg_from`] stopped in a buffer that ended inside a JPEG: the scan resumes
/// there when more bytes follow (the same buffer, grown), instead of from the SOI.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ScanState {
    /// The offset the scan goes on from.
    pos: usize,
    /// Whether `pos` is inside entropy-coded data.
    entropy: bool,
    /// Where the last segment's payload began, while the byte its length lands on is unseen.
    skipped_from: Option<usize>,
}

/// Where the JPEG at the start of `b` (which starts with `FF D8`, SOI) ends:
/// [`scan_jpeg_from`] from the SOI.
#[cfg(test)]
pub(crate) fn scan_jpeg(b: &[u8]) -> Scan {
    scan_jpeg_from(b, &mut ScanState::default())
}

/// Where the JPEG at the start of `b` (which starts with `FF D8`, SOI) ends, resuming at
/// `st` (default: right after the SOI; on [`Scan::NeedMore`] `st` says where to go on once
/// `b` has grown): segments by their 2-byte big-endian length (so APP1's EXIF thumbnail, a
/// whole JPEG itself, is skipped), after SOS the entropy-coded data until a marker that is
/// not `FF 00` (stuffing) or RSTn; EOI ends the JPEG, another marker goes on with segments
/// (progressive JPEGs have several scans). Fill bytes `FF FF` before a marker are allowed
/// (ITU T.81 B.1.1.2). A segment length that lands on anything but `FF` means the JPEG was
/// cut inside that segment's header: the first SOI inside the skipped bytes (the next JPEG)
/// gives [`Scan::Truncated`] there; with none, the scan resyncs on the next marker.
pub(crate) fn scan_jpeg_from(b: &[u8], st: &mut ScanState) -> Scan {
    let mut i = st.pos.max(2);
    let mut entropy = st.entropy;
    let mut skipped_from = st.skipped_from;
    let mut need_more = |at: usize, entropy: bool, skipped_from: Option<usize>| {
        *st = ScanState { pos: at, entropy, skipped_from };
        Scan::NeedMore
    };
    loop {
        if entropy {
            // Entropy-coded data: look for the next FF that starts a marker.
            loop {
                let Some(off) = b.get(i..).and_then(|r| r.iter().position(|&x| x == 0xFF)) else {
                    return need_more(b.len().max(i), true, None);
                };
                i += off;
                let Some(&m) = b.get(i + 1) else { return need_more(i, true, None) };
                match m {
                    0x00 | 0xD0..=0xD7 => i += 2,
                    0xFF => i += 1,
                    _ => break,
                }
            }
            entropy = false;
        }
        if let Some(from) = skipped_from {
            // Where the last segment's length landed: a marker, or the JPEG was cut inside it.
            let Some(&at) = b.get(i) else { return need_more(i, false, Some(from)) };
            skipped_from = None;
            if at != 0xFF {
                if let Some(p) = b[from..i].windows(2).position(|w| w == [0xFF, 0xD8]) {
                    return Scan::Truncated(from + p);
                }
            }
        }
        // A marker at i (after any FF fill bytes).
        while b.get(i) == Some(&0xFF) && b.get(i + 1) == Some(&0xFF) {
            i += 1;
        }
        let (Some(&ff), Some(&m)) = (b.get(i), b.get(i + 1)) else { return need_more(i, false, None) };
        if ff != 0xFF {
            // Not a marker where one must be: resync on the next FF (damaged data).
            entropy = true;
            continue;
        }
        match m {
            0xD9 => return Scan::Complete(i + 2),
            0xD8 => return Scan::Truncated(i),
            0x01 | 0xD0..=0xD7 => i += 2,
            _ => {
                let (Some(&hi), Some(&lo)) = (b.get(i + 2), b.get(i + 3)) else { return need_more(i, false, None) };
                let len = (hi as usize) << 8 | lo as usize;
                if len < 2 {
                    // A broken length: treat what follows as data until the next marker.
                    i += 2;
                    entropy = true;
                    continue;
                }
                if m == 0xDA {
                    entropy = true;
                } else {
                    skipped_from = Some(i + 4);
                }
                i += 2 + len;
            }
        }
    }
}

/// Cuts a byte stream into whole JPEGs ([`scan_jpeg`]); bytes before an SOI are skipped.
pub struct JpegSplitter<R> {
    r: R,
    buf: Vec<u8>,
    /// Where the scan of the JPEG at the start of `buf` stopped (reset when `buf` is drained).
    scan: ScanState,
    eof: bool,
    /// Bytes skipped outside any JPEG.
    pub(crate) skipped_bytes: u64,
}

/// One JPEG from [`JpegSplitter::next_jpeg`].
#[derive(Debug, PartialEq, Eq)]
pub enum Piece {
    /// A whole JPEG (SOI through EOI).
    Whole(Vec<u8>),
    /// A JPEG cut short (a new SOI, or the end of the stream, came before its EOI).
    Truncated(Vec<u8>),
}

impl<R: Read> JpegSplitter<R> {
    /// A splitter reading `r`.
    pub fn new(r: R) -> JpegSplitter<R> {
        JpegSplitter { r, buf: Vec::new(), scan: ScanState::default(), eof: false, skipped_bytes: 0 }
    }

    fn fill(&mut self) -> std::io::Result<bool> {
        if self.eof {
            return Ok(false);
        }
        let old = self.buf.len();
        self.buf.resize(old + (64 << 10), 0);
        let n = loop {
            match self.r.read(&mut self.buf[old..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.buf.truncate(old);
                    return Err(e);
                }
            }
        };
        self.buf.truncate(old + n);
        self.eof = n == 0;
        Ok(n > 0)
    }

    /// The next JPEG, or `None` at the end of the stream. Errors: a read error, or a JPEG
    /// longer than [`MAX_JPEG_BYTES`].
    pub fn next_jpeg(&mut self) -> std::io::Result<Option<Piece>> {
        loop {
            // Drop bytes before the first SOI (keeping a last FF that may start one).
            match self.buf.windows(2).position(|w| w == [0xFF, 0xD8]) {
                Some(0) => {}
                Some(p) => {
                    self.skipped_bytes += p as u64;
                    self.buf.drain(..p);
                    self.scan = ScanState::default();
                }
                None => {
                    self.scan = ScanState::default();
                    let keep = usize::from(self.buf.last() == Some(&0xFF));
                    self.skipped_bytes += (self.buf.len() - keep) as u64;
                    self.buf.drain(..self.buf.len() - keep);
                    if !self.fill()? {
                        self.skipped_bytes += self.buf.len() as u64;
                        self.buf.clear();
                        return Ok(None);
                    }
                    continue;
                }
            }
            match scan_jpeg_from(&self.buf, &mut self.scan) {
                Scan::Complete(n) => {
                    self.scan = ScanState::default();
                    return Ok(Some(Piece::Whole(self.buf.drain(..n).collect())));
                }
                Scan::Truncated(n) => {
                    self.scan = ScanState::default();
                    return Ok(Some(Piece::Truncated(self.buf.drain(..n).collect())));
                }
                Scan::NeedMore => {
                    if self.buf.len() > MAX_JPEG_BYTES {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            format!("a JPEG longer than {MAX_JPEG_BYTES} bytes (no EOI): not an MJPEG stream"),
                        ));
                    }
                    if !self.fill()? {
                        self.scan = ScanState::default();
                        let rest = std::mem::take(&mut self.buf);
                        return Ok((!rest.is_empty()).then_some(Piece::Truncated(rest)));
                    }
                }
            }
        }
    }
}

/// The layout of a picture MPP decoded ([`FrameInfo`]): NV12 or NV16 at the decoder's
/// `hor_stride` (bytes a luma row) and `ver_stride` (rows before the chroma plane). Errors:
/// another format (10-bit, FBC, RGB), or strides smaller than the picture.
pub fn mpp_layout(f: &FrameInfo) -> Result<FrameLayout> {
    let (fourcc, chroma_rows) = match f.fmt & MPP_FRAME_FMT_MASK {
        MPP_FMT_YUV420SP if f.fmt & !MPP_FRAME_FMT_MASK == 0 => (Fourcc::NV12, f.ver_stride / 2),
        MPP_FMT_YUV422SP if f.fmt & !MPP_FRAME_FMT_MASK == 0 => (Fourcc::NV16, f.ver_stride),
        other => bail!("MPP decoded a JPEG into format {other:#x} (flags {:#x}); zcpipe takes YUV420SP (NV12) or YUV422SP (NV16) from MPP", f.fmt & !MPP_FRAME_FMT_MASK),
    };
    if f.width == 0 || f.height == 0 || f.hor_stride < align_up(f.width, 2) || f.ver_stride < align_up(f.height, 2) {
        bail!(
            "MPP decoded a {}x{} JPEG with strides {}x{}: strides smaller than the picture",
            f.width,
            f.height,
            f.hor_stride,
            f.ver_stride
        );
    }
    let y_len = f.hor_stride * f.ver_stride;
    let mut planes = [PlaneDesc::default(); MAX_PLANES];
    planes[0] = PlaneDesc { offset: 0, bytesperline: f.hor_stride, length: y_len, fd_index: 0 };
    planes[1] =
        PlaneDesc { offset: y_len, bytesperline: f.hor_stride, length: f.hor_stride * chroma_rows, fd_index: 0 };
    Ok(FrameLayout { fourcc, width: f.width, height: f.height, num_planes: 2, planes })
}

/// Bytes a pool buffer needs for MPP to decode a `width` x `height` JPEG: NV16 at 16-aligned
/// strides (covers NV12 too, and a 4:2:2 JPEG MPP leaves 4:2:2).
pub fn mpp_buffer_bytes(width: u32, height: u32) -> u64 {
    align_up(width, 16) as u64 * align_up(height, 16) as u64 * 2
}

/// Decodes one JPEG on the CPU (zune-jpeg) into `dst` as NV12 at `bytesperline =
/// align_up(even(width), 16)` ([`FrameLayout::nv12`]), using `scratch` for the decoded Y, Cb,
/// Cr samples. `max` (width, height) bounds the picture (a bigger one would not fit the
/// pool). Errors: the JPEG does not decode, is bigger than `max`, or `dst` is too small.
pub fn decode_cpu(jpeg: &[u8], dst: &mut [u8], scratch: &mut Vec<u8>, max: (u32, u32)) -> Result<FrameLayout> {
    use zune_jpeg::zune_core::bytestream::ZCursor;
    use zune_jpeg::zune_core::colorspace::ColorSpace;
    use zune_jpeg::zune_core::options::DecoderOptions;
    let opts = DecoderOptions::default()
        .set_strict_mode(true)
        .jpeg_set_out_colorspace(ColorSpace::YCbCr)
        .set_max_width(max.0 as usize)
        .set_max_height(max.1 as usize);
    let mut d = zune_jpeg::JpegDecoder::new_with_options(ZCursor::new(jpeg), opts);
    d.decode_headers().map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let info = d.info().context("no picture size in the JPEG")?;
    let (w, h) = (info.width as u32, info.height as u32);
    let comps = d.output_colorspace().map_or(3, |c| c.num_components());
    scratch.resize(d.output_buffer_size().context("no output size for the JPEG")?, 0);
    d.decode_into(scratch).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let l = FrameLayout::nv12(w, h, STRIDE_ALIGN);
    if (dst.len() as u64) < l.bytes_needed() {
        bail!("a {w}x{h} JPEG needs {} bytes as NV12, the pool buffer has {}", l.bytes_needed(), dst.len());
    }
    ycbcr_to_nv12(scratch, comps, &l, dst);
    Ok(l)
}

/// Writes interleaved full-resolution samples `px` (`comps` per pixel: Y, Cb, Cr; or Y
/// alone, chroma then 128) into `dst` at layout `l` (NV12): luma as is, each chroma sample
/// the rounded mean of its 2x2 block; odd edges repeat the last row/column.
fn ycbcr_to_nv12(px: &[u8], comps: usize, l: &FrameLayout, dst: &mut [u8]) {
    let (w, h) = (l.width as usize, l.height as usize);
    let (y, c) = (l.planes[0], l.planes[1]);
    for row in 0..align_up(l.height, 2) as usize {
        let sr = row.min(h - 1);
        let out = &mut dst[y.offset as usize + row * y.bytesperline as usize..][..align_up(l.width, 2) as usize];
        for (x, o) in out.iter_mut().enumerate() {
            *o = px[(sr * w + x.min(w - 1)) * comps];
        }
    }
    for cy in 0..h.div_ceil(2) {
        let out = &mut dst[c.offset as usize + cy * c.bytesperline as usize..][..2 * w.div_ceil(2)];
        for cx in 0..w.div_ceil(2) {
            if comps < 3 {
                out[2 * cx] = 128;
                out[2 * cx + 1] = 128;
                continue;
            }
            let (mut su, mut sv) = (0u32, 0u32);
            for (dy, dx) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
                let p = ((2 * cy + dy).min(h - 1) * w + (2 * cx + dx).min(w - 1)) * comps;
                su += px[p + 1] as u32;
                sv += px[p + 2] as u32;
            }
            out[2 * cx] = ((su + 2) / 4) as u8;
            out[2 * cx + 1] = ((sv + 2) / 4) as u8;
        }
    }
}

/// Who decodes an MJPEG source's JPEGs.
pub enum MjpegDecoder {
    /// MPP's JPEG decoder, writing into the pool buffers it imported; JPEGs it would not
    /// write as NV12/NV16 go to zune-jpeg (`scratch`), counted in `cpu`.
    Mpp {
        /// The decoder (boxed: much larger than the CPU variant).
        mpp: Box<MppJpeg>,
        /// zune-jpeg's scratch buffer for the JPEGs MPP does not take.
        scratch: Vec<u8>,
        /// JPEGs decoded on the CPU so far.
        cpu: u64,
    },
    /// zune-jpeg on the CPU, with its scratch buffer.
    Cpu(Vec<u8>),
}

/// Where the JPEG of one [`MjpegDecoder::decode`] is.
#[derive(Clone, Copy)]
pub enum MjpegInput<'a> {
    /// Bytes in memory.
    Bytes(&'a [u8]),
    /// The first `len` bytes of a camera's dma-buf (MPP reads it in place; the CPU through
    /// one read guard).
    Camera {
        /// The camera buffer.
        buf: &'a DmaBuf,
        /// Bytes of JPEG at its start (`bytesused`).
        len: usize,
    },
}

impl MjpegDecoder {
    /// The decoder `decoder` settled on: an [`MppJpeg`] on its library, or the CPU.
    pub fn new(decoder: &Decoder) -> Result<MjpegDecoder> {
        Ok(match decoder {
            Decoder::Mpp(lib) => MjpegDecoder::Mpp {
                mpp: Box::new(MppJpeg::new(Arc::clone(lib), MPP_POLL_MS)?),
                scratch: Vec::new(),
                cpu: 0,
            },
            Decoder::Cpu => MjpegDecoder::Cpu(Vec::new()),
        })
    }

    /// `mpp` or `cpu`.
    pub fn name(&self) -> &'static str {
        match self {
            MjpegDecoder::Mpp { .. } => "mpp",
            MjpegDecoder::Cpu(_) => "cpu",
        }
    }

    /// The facts of an MPP decoder: buffers imported, JPEGs sent to the CPU instead.
    pub fn facts(&self) -> Extras {
        match self {
            MjpegDecoder::Mpp { mpp, cpu, .. } => {
                vec![("mpp_imported_buffers", mpp.imported().into()), ("mpp_cpu_fallbacks", (*cpu).into())]
            }
            MjpegDecoder::Cpu(_) => Vec::new(),
        }
    }

    /// Decodes `input` into pool buffer `dst` (MPP: imported, never mapped; CPU: one write
    /// access), a picture at most `max` (width, height). `Ok(Err(why))`: the JPEG is corrupt
    /// or too big (skip it); `Err`: the decoder failed. When MPP fails after it took the
    /// JPEG, the MPP decoder is destroyed (which waits for its thread), this JPEG is skipped
    /// and the CPU decodes from then on.
    pub fn decode(
        &mut self,
        input: MjpegInput<'_>,
        dst: &mut DmaBuf,
        max: (u32, u32),
    ) -> Result<std::result::Result<FrameLayout, String>> {
        let (mpp, scratch, cpu) = match self {
            MjpegDecoder::Cpu(scratch) => return cpu_decode(input, dst, scratch, max),
            MjpegDecoder::Mpp { mpp, scratch, cpu } => (mpp, scratch, cpu),
        };
        let jin = match input {
            MjpegInput::Bytes(b) => JpegInput::Bytes(b),
            MjpegInput::Camera { buf, len } => JpegInput::DmaBuf { fd: buf.fd(), size: buf.size() as usize, len },
        };
        match mpp.decode(jin, dst.fd(), dst.size() as usize, max) {
            Ok(JpegOutcome::Picture(info)) => Ok(Ok(mpp_layout(&info)?)),
            Ok(JpegOutcome::Corrupt { errinfo }) => Ok(Err(format!("MPP error frame (errinfo {errinfo})"))),
            Ok(JpegOutcome::Unfit(JpegUnfit::CpuOnly(sof))) => {
                *cpu += 1;
                log::debug!("JPEG decoded on the CPU: {}", JpegUnfit::CpuOnly(sof));
                cpu_decode(input, dst, scratch, max)
            }
            Ok(JpegOutcome::Unfit(why)) => Ok(Err(why.to_string())),
            Err(e) if mpp.poisoned().is_some() => {
                log::warn!("{e:#}: destroying MPP's JPEG decoder and decoding on the CPU from now on");
                *self = MjpegDecoder::Cpu(std::mem::take(scratch));
                Ok(Err(format!("MPP failed on it ({e:#})")))
            }
            Err(e) => Err(e),
        }
    }
}

/// zune-jpeg's decode of `input` into `dst` ([`decode_cpu`]; a camera buffer through one
/// read guard, `dst` through one write guard); `Ok(Err(why))`: corrupt or too big.
fn cpu_decode(
    input: MjpegInput<'_>,
    dst: &mut DmaBuf,
    scratch: &mut Vec<u8>,
    max: (u32, u32),
) -> Result<std::result::Result<FrameLayout, String>> {
    let guard;
    let jpeg = match input {
        MjpegInput::Bytes(b) => b,
        MjpegInput::Camera { buf, len } => {
            guard = buf.read()?;
            &guard[..len.min(guard.len())]
        }
    };
    let mut bytes = dst.write()?;
    Ok(decode_cpu(jpeg, &mut bytes, scratch, max).map_err(|e| format!("{e:#}")))
}

/// `--source video:PATH` for an MJPEG file: `Some` source when `spec` is a `video:` file
/// ffprobe names `mjpeg`, decoded by the decoder `choice` resolves to
/// ([`super::decoder::resolve`]; `auto`: MPP on a Rockchip BSP kernel, else the CPU);
/// `None` for anything else (the ffmpeg source takes it).
pub(crate) fn open_if_mjpeg(
    spec: &SourceSpec,
    fps: Option<f64>,
    choice: Option<DecoderChoice>,
) -> Result<Option<Box<dyn FrameSource>>> {
    let SourceSpec::Video(path) = spec else { return Ok(None) };
    if !path.is_file() || super::mpp::file_codec(path).is_none_or(|c| c.codec != "mjpeg") {
        return Ok(None);
    }
    let (decoder, why) = resolve(choice.unwrap_or_default(), None)?;
    log::info!("decoder {} for MJPEG video:{} ({why})", decoder.name(), path.display());
    Ok(Some(Box::new(MjpegSource::open(path, fps, MjpegDecoder::new(&decoder)?)?)))
}

/// `video:PATH` of MJPEG: ffmpeg demuxes without decoding, [`JpegSplitter`] cuts whole
/// JPEGs, [`MjpegDecoder`] decodes each into the pool buffer.
pub(crate) struct MjpegSource {
    info: SourceInfo,
    path: PathBuf,
    child: Child,
    splitter: JpegSplitter<std::process::ChildStdout>,
    decoder: MjpegDecoder,
    max: (u32, u32),
    jpegs: u64,
    frames: u64,
    corrupt: u64,
    finished: bool,
}

impl MjpegSource {
    /// Probes `path` (size, rate) and starts `ffmpeg -i PATH -map 0:v:0 -c:v copy -f mjpeg
    /// pipe:1`. `fps` overrides the probed rate (30 without one).
    pub fn open(path: &Path, fps: Option<f64>, decoder: MjpegDecoder) -> Result<MjpegSource> {
        let p = super::video::probe(path)?;
        let mut args: Vec<std::ffi::OsString> =
            ["-nostdin", "-loglevel", "error", "-i"].iter().map(Into::into).collect();
        args.push(path.into());
        args.extend(["-map", "0:v:0", "-an", "-c:v", "copy", "-f", "mjpeg", "pipe:1"].iter().map(Into::into));
        let mut child = Child::spawn("ffmpeg", args)?;
        let stdout = take_stdout(&mut child)?;
        let fps = fps.unwrap_or(if p.fps > 0.0 { p.fps } else { 30.0 });
        let max_frame_bytes = match decoder {
            MjpegDecoder::Mpp { .. } => mpp_buffer_bytes(p.width, p.height),
            MjpegDecoder::Cpu(_) => FrameLayout::nv12(p.width, p.height, STRIDE_ALIGN).bytes_needed(),
        };
        let info = SourceInfo {
            description: format!(
                "video:{} {}x{} MJPEG decoded by {} into NV12 @{}fps",
                path.display(),
                p.width,
                p.height,
                decoder.name(),
                fps
            ),
            max_width: p.width,
            max_height: p.height,
            fps,
            max_frame_bytes,
        };
        Ok(MjpegSource {
            info,
            path: path.to_path_buf(),
            child,
            splitter: JpegSplitter::new(stdout),
            decoder,
            max: (p.width, p.height),
            jpegs: 0,
            frames: 0,
            corrupt: 0,
            finished: false,
        })
    }

    fn end(&mut self) -> Result<Option<FrameLayout>> {
        self.finished = true;
        let status =
            self.child.wait().with_context(|| format!("video {}: cannot wait for ffmpeg", self.path.display()))?;
        if !status.success() {
            bail!(
                "video {}: ffmpeg failed ({status}) after {} JPEGs: {}",
                self.path.display(),
                self.jpegs,
                self.child.stderr_tail()
            );
        }
        if self.corrupt > 0 {
            log::warn!(
                "video {}: {} of {} JPEGs were corrupt and skipped",
                self.path.display(),
                self.corrupt,
                self.jpegs
            );
        }
        Ok(None)
    }
}

/// The child's stdout, owned (the splitter reads it; the child keeps its process and stderr).
fn take_stdout(child: &mut Child) -> Result<std::process::ChildStdout> {
    let fd = child
        .stdout()
        .context("ffmpeg has no stdout")?
        .as_fd()
        .try_clone_to_owned()
        .context("duplicating ffmpeg's stdout")?;
    child.close_stdout();
    Ok(std::process::ChildStdout::from(fd))
}

impl FrameSource for MjpegSource {
    fn info(&self) -> &SourceInfo {
        &self.info
    }

    /// The CPU path through a mapped buffer (tests, and whoever has no dma-buf): decodes
    /// with zune-jpeg whatever the decoder (MPP needs the dma-buf: [`FrameSource::fill_buffer`]).
    fn fill(&mut self, dst: &mut [u8]) -> Result<Option<FrameLayout>> {
        let mut scratch = Vec::new();
        loop {
            if self.finished {
                return Ok(None);
            }
            let Some(piece) = self
                .splitter
                .next_jpeg()
                .with_context(|| format!("video {}: reading ffmpeg's MJPEG", self.path.display()))?
            else {
                return self.end();
            };
            self.jpegs += 1;
            let res = match piece {
                Piece::Whole(j) => decode_cpu(&j, dst, &mut scratch, self.max).map_err(|e| format!("{e:#}")),
                Piece::Truncated(j) => Err(format!("truncated JPEG ({} bytes, no EOI)", j.len())),
            };
            match res {
                Ok(l) => {
                    self.frames += 1;
                    return Ok(Some(l));
                }
                Err(why) => self.skip(&why),
            }
        }
    }

    /// Decodes the next whole JPEG into `dst`: MPP writes the dma-buf itself (no CPU
    /// mapping); the CPU decoder writes it inside one sync guard. Corrupt JPEGs are skipped.
    fn fill_buffer(&mut self, dst: &mut DmaBuf) -> Result<Option<FrameLayout>> {
        loop {
            if self.finished {
                return Ok(None);
            }
            let Some(piece) = self
                .splitter
                .next_jpeg()
                .with_context(|| format!("video {}: reading ffmpeg's MJPEG", self.path.display()))?
            else {
                return self.end();
            };
            self.jpegs += 1;
            let res = match &piece {
                // A truncated JPEG goes to the decoder too: MPP reports it (an error frame).
                Piece::Whole(j) | Piece::Truncated(j) => self
                    .decoder
                    .decode(MjpegInput::Bytes(j), dst, self.max)
                    .with_context(|| format!("video {}: JPEG {}", self.path.display(), self.jpegs))?,
            };
            match (res, &piece) {
                (Ok(l), Piece::Whole(_)) => {
                    self.frames += 1;
                    return Ok(Some(l));
                }
                (Ok(_), Piece::Truncated(j)) => self.skip(&format!("truncated JPEG ({} bytes, no EOI)", j.len())),
                (Err(why), _) => self.skip(&why),
            }
        }
    }

    fn facts(&self) -> Extras {
        let mut f: Extras = vec![
            ("decoder", self.decoder.name().into()),
            ("jpegs", self.jpegs.into()),
            ("corrupt_jpegs", self.corrupt.into()),
        ];
        f.extend(self.decoder.facts());
        f
    }
}

impl MjpegSource {
    fn skip(&mut self, why: &str) {
        self.corrupt += 1;
        // The first five, then at powers of two (as the camera path): a file of corrupt JPEGs
        // does not flood the log; the total is said at the end.
        if self.corrupt <= 5 || self.corrupt.is_power_of_two() {
            log::warn!(
                "video {}: JPEG {} skipped: {why} ({} skipped so far)",
                self.path.display(),
                self.jpegs,
                self.corrupt
            );
        }
    }
}

#[cfg(test)]
mod tests;

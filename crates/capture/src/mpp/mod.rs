//! H.264 and H.265 decoded by Rockchip MPP straight into the capture pool (`--decoder mpp`,
//! or `auto` on a board): a `video:` file or a network stream (`rtsp://`, ...).
//!
//! ffmpeg still reads and demuxes the input, but does not decode it: `ffmpeg -i INPUT -an
//! -c:v copy -f h264|hevc pipe:1` writes the elementary stream (Annex B; ffmpeg's raw muxers
//! insert `h264_mp4toannexb`/`hevc_mp4toannexb` for MP4 input) to a pipe, and zcpipe puts
//! it into MPP in chunks of up to [`CHUNK_BYTES`] (MPP's parser splits them into frames:
//! `MPP_DEC_SET_PARSER_SPLIT_MODE`). Compressed bytes are all the CPU copies.
//!
//! The capture pool is MPP's external buffer group ([`zcpipe_sys::mpp::Mpp::attach_external_buffers`]):
//! zcpipe allocates the pool from `--heap` (a heap RGA reaches on a board: the plan picks
//! dma32 or CMA when RGA2 needs it), sized from the stream's info-change frame (MPP's
//! `buf_size`, with its `hor_stride` and `ver_stride`), commits every buffer once, and offers
//! the same dma-bufs to the scale stage once. After that the buffers travel as V4L2 capture
//! buffers do ([`zcpipe_core::pool::DeviceLoan`]): every buffer no consumer holds is lent to
//! the decoder; a decoded picture's buffer (MPP names it by its commit index) is claimed
//! and published with MPP's strides (`bytesperline` = `hor_stride`, the CbCr plane at
//! `hor_stride * ver_stride`: 1080-line H.264 has 1088 rows in the buffer); the picture's
//! `MppFrame` is held until the pool has the buffer back from every consumer, then released
//! (`mpp_frame_deinit`), so MPP never writes a buffer a consumer reads. No CPU touches a
//! decoded picture in zero-copy mode; `--copy-mode` copies it out as any plain pipeline
//! would. MPP keeps its reference pictures in the same buffers, so the pool has at least
//! [`MIN_BUFFERS`] (Rockchip's `mpi_dec_test` commits 24).
//!
//! A stream whose pictures change size is re-negotiated when they still fit the pool's
//! buffers (the info change is acknowledged, and the frames' layouts carry the new size);
//! a larger one ends the stream with one line naming both sizes and the fix (`--size`).
//! A stream MPP cannot start (junk, a codec it lacks) fails at start-up within
//! [`START_LIMIT`], in one line, never hangs; corrupt pictures (`errinfo`, `discard`) are
//! dropped and counted. A network stream that drops is re-opened with back-off, as the CPU
//! path does ([`super::network`]); the decoder is reset, not re-created, so the buffers
//! consumers hold stay valid.
//!
//! Contracts: `rk_mpi.h` (call order: `mpp_create`, control, `mpp_init`, put/get), the
//! info-change protocol of `test/mpi_dec_test.c` (external group, then
//! `MPP_DEC_SET_INFO_CHANGE_READY`), `mpp_frame.h` (strides, `errinfo`, `discard`, `eos`).

mod codec;
mod input;
#[cfg(test)]
mod tests;

use codec::{check_format, probe};
pub(crate) use codec::{file_codec, layout_of, mpp_takes};

use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use super::ffmpeg::{parse_codec, parse_probe, Child, CodecProbe, VideoProbe, PROBE_ARGS};
use super::network::{
    is_rtsp, net_input, readable, RtspTransport, BACKOFF_FIRST, BACKOFF_MAX, IO_TIMEOUT, STALL_GRACE,
};
use super::spec::{redact_url, scrub_secrets};
use zcpipe_core::config::Choice;
use zcpipe_core::frame::{
    align_up, monotonic_ns, Fourcc, FrameDesc, FrameLayout, PlaneDesc, RestartMark, Stage, MAX_PLANES,
};
use zcpipe_core::pool::{DeviceLoan, PoolProducer};
use zcpipe_core::stage::Extras;
use zcpipe_sys::mpp::{self, DecodedFrame, DecoderOptions, FrameInfo, Libmpp, Mpp};

/// Bytes of the elementary stream put into MPP per packet (split mode: any cut is fine).
pub(crate) const CHUNK_BYTES: usize = 64 * 1024;
/// The fewest buffers an MPP capture pool has: MPP keeps up to 16 reference pictures of an
/// H.264/H.265 stream in them, plus the pictures consumers hold, plus one to decode into.
pub(crate) const MIN_BUFFERS: usize = 24;
/// How long the decoder may take to say the stream's size (its info-change frame) at start-up.
pub(crate) const START_LIMIT: Duration = Duration::from_secs(10);

/// Where the compressed stream comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum MppInput {
    /// A file (`video:PATH`), decoded once to its end.
    File(PathBuf),
    /// A live network stream (`rtsp://...`), re-opened when it drops.
    Network(String),
}

/// How to open an MPP capture (from the capture options).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct MppOptions {
    /// RTSP transport (`rtsp://`, `rtsps://` only).
    pub transport: RtspTransport,
    /// The largest picture the pool must hold (`--size`), beyond the stream's own.
    pub size: Option<(u32, u32)>,
}

/// The codec of a stream MPP decodes here: its MPP coding type and ffmpeg's raw muxer.
fn coding_of(codec: &str) -> Option<(mpp::MppCodingType, &'static str)> {
    match codec {
        "h264" => Some((mpp::MPP_VIDEO_CODING_AVC, "h264")),
        "hevc" => Some((mpp::MPP_VIDEO_CODING_HEVC, "hevc")),
        _ => None,
    }
}

/// Counters of an MPP capture.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct MppStats {
    /// Packets MPP took (`decode_put_packet` returned `MPP_OK`).
    pub packets: u64,
    /// Bytes of elementary stream MPP took.
    pub(crate) stream_bytes: u64,
    /// Times MPP's input queue was full (`MPP_ERR_BUFFER_FULL`): the packet waited.
    pub(crate) input_full: u64,
    /// Pictures decoded and published.
    pub pictures: u64,
    /// Pictures MPP flagged (`errinfo` or `discard`) and zcpipe dropped.
    pub(crate) error_frames: u64,
    /// Info changes after the first (re-negotiated sizes).
    pub info_changes: u64,
    /// Frames given back to MPP (`mpp_frame_deinit`) after every consumer returned them.
    pub released: u64,
    /// Times the stream came back after it dropped (network).
    pub reconnects: u64,
    /// Times the stream dropped (network).
    pub drops: u64,
    /// Frames lost in the gaps, estimated from the nominal rate.
    pub frames_lost: u64,
    /// Seconds without pictures in the gaps.
    pub gap_s: f64,
    /// Pictures of a live stream dropped to keep `--fps`.
    pub rate_dropped: u64,
    /// Times the demuxer of a file failed before its end (a file cut short).
    pub demuxer_errors: u64,
}

/// What one turn of [`MppCapture::next_frame`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum MppNext {
    /// A picture was published (its sequence number).
    Frame(u64),
    /// Nothing yet.
    Idle,
    /// The file ended: MPP's EOS (`"end of source"`), or its pictures outgrew the pool
    /// (logged once).
    End(&'static str),
}

/// The network state of the demuxer.
enum Link {
    /// ffmpeg is demuxing (and, when the camera is recorded, writing the stream's packets
    /// to `_tee`'s reader too). `ffmpeg` is dropped (killed, reaped) before `_tee` is joined.
    Up { ffmpeg: Child, since: Instant, last_data: Instant, _tee: Option<crate::record::Tee> },
    /// Waiting for `at` before re-opening.
    Down { at: Instant },
}

/// An MPP decoder fed by an ffmpeg demuxer, writing into the capture pool.
pub(crate) struct MppCapture {
    input: MppInput,
    shown: String,
    opts: MppOptions,
    muxer: &'static str,
    codec: String,
    /// The probe's answer: the stream the recorder is told of.
    probe: VideoProbe,
    /// The camera's link to the recorder, when it is recorded.
    record: Option<Arc<crate::record::Recording>>,
    mpp: Mpp,
    link: Link,
    backoff: Duration,
    /// Stream bytes read and not yet taken by MPP (`pending[pending_at..]`).
    pending: Vec<u8>,
    pending_at: usize,
    eos_put: bool,
    /// The info-change frame seen before the pool existed (acknowledged at [`MppCapture::attach`]).
    first_info: Option<FrameInfo>,
    attached: bool,
    /// Bytes of each pool buffer.
    buf_bytes: u64,
    /// The layout of the pictures now.
    layout: Option<FrameLayout>,
    /// The loans of the buffers lent to MPP, by pool index.
    at_device: Vec<Option<DeviceLoan>>,
    /// The frames of published pictures, held until their buffer is back, by pool index.
    held: Vec<Option<DecodedFrame>>,
    min_device: usize,
    fps: f64,
    seq: u64,
    /// The stream dropped at this instant, after its last picture at `.1`.
    gap: Option<(Instant, Option<Instant>)>,
    pending_gap: Option<u64>,
    last_picture: Option<Instant>,
    /// Why the file ended, once it has.
    ended: Option<&'static str>,
    /// A live stream with `--fps`: the least time between published pictures, and when the
    /// next is due.
    rate: Option<Duration>,
    next_due: Option<Instant>,
    stats: MppStats,
}

impl MppCapture {
    /// Probes `input` (its codec, size and rate), starts the MPP decoder on library `lib`
    /// and the ffmpeg demuxer, and feeds the stream until MPP says its picture size (the
    /// info-change frame), so the pool can be sized ([`MppCapture::pool_bytes`]). Errors,
    /// each one line naming the input (URL redacted): the input cannot be probed, its codec
    /// is not H.264/H.265 (use `--decoder cpu`), MPP refuses it, or no picture size within
    /// [`START_LIMIT`] (junk, or a stream MPP cannot parse). `stop` ends the wait early.
    /// With `record`, the demuxer also writes the stream's packets for the recorder.
    pub fn open(
        input: MppInput,
        lib: Arc<Libmpp>,
        opts: &MppOptions,
        fps: Option<f64>,
        stop: &AtomicBool,
        record: Option<Arc<crate::record::Recording>>,
    ) -> Result<MppCapture> {
        let shown = match &input {
            MppInput::File(p) => format!("video:{}", p.display()),
            MppInput::Network(u) => redact_url(u),
        };
        if let MppInput::File(p) = &input {
            crate::video::check_file(p)?;
        }
        let (probe, codec) = probe(&input, opts.transport, &shown, stop)?;
        mpp_takes(&codec).map_err(|why| anyhow!("{shown}: {why}; pass --decoder cpu for it"))?;
        let Some((coding, muxer)) = coding_of(&codec.codec) else {
            bail!("{shown}: its video is {}; --decoder mpp decodes H.264 and H.265 here (MJPEG through its own path): pass --decoder cpu for it", codec.codec);
        };
        let codec = codec.codec;
        let mpp = Mpp::decoder(lib, coding, DecoderOptions::default()).map_err(|e| anyhow!("{shown}: {e:#}"))?;
        // `--fps` on a live stream: MPP decodes every picture (the references need them), and
        // zcpipe publishes about `fps` of them a second.
        let rate = fps.filter(|_| matches!(input, MppInput::Network(_))).map(|f| Duration::from_secs_f64(1.0 / f));
        let fps = fps.unwrap_or(if probe.fps > 0.0 { probe.fps } else { 30.0 });
        if let Some((w, h)) = opts.size.filter(|&(w, h)| w < probe.width || h < probe.height) {
            log::info!("{shown}: --size {w}x{h} is smaller than the stream's {}x{}: the pool is sized for the stream (MPP decodes at the stream's size; the scaler scales)", probe.width, probe.height);
        }
        let mut cap = MppCapture {
            shown,
            opts: opts.clone(),
            muxer,
            codec,
            probe,
            record,
            mpp,
            link: Link::Down { at: Instant::now() },
            backoff: BACKOFF_FIRST,
            pending: Vec::new(),
            pending_at: 0,
            eos_put: false,
            first_info: None,
            attached: false,
            buf_bytes: 0,
            layout: None,
            at_device: Vec::new(),
            held: Vec::new(),
            min_device: 1,
            fps,
            seq: 0,
            gap: None,
            pending_gap: None,
            last_picture: None,
            ended: None,
            rate,
            next_due: None,
            stats: MppStats::default(),
            input,
        };
        let (ffmpeg, tee) = cap.spawn_demuxer()?;
        cap.link = Link::Up { ffmpeg, since: Instant::now(), last_data: Instant::now(), _tee: tee };
        let t = Instant::now();
        while cap.first_info.is_none() {
            if stop.load(Ordering::Relaxed) {
                bail!("{}: stopped while starting the decoder", cap.shown);
            }
            if t.elapsed() > START_LIMIT {
                bail!(
                    "{}: MPP gave no picture size within {} s of {} stream ({} bytes put; ffmpeg: {}); is it a valid {} stream? (--decoder cpu decodes with ffmpeg)",
                    cap.shown,
                    START_LIMIT.as_secs(),
                    cap.codec,
                    cap.stats.stream_bytes,
                    cap.demuxer_tail(),
                    cap.codec
                );
            }
            if let Some(f) = cap.mpp.get_frame()? {
                let i = *f.info();
                if i.info_change {
                    check_format(&i, &cap.shown)?;
                    cap.first_info = Some(i);
                    // The info-change frame carries no buffer: released now.
                    drop(f);
                    break;
                }
                if i.eos {
                    bail!(
                        "{}: the stream ended before MPP saw a picture size; is it a valid {} stream?",
                        cap.shown,
                        cap.codec
                    );
                }
                continue;
            }
            if !cap.feed()? {
                if let Link::Down { .. } = cap.link {
                    bail!("{}: the demuxer ended before MPP saw a picture size: {}", cap.shown, cap.demuxer_tail());
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        let i = cap.first_info.expect("set above");
        // The pool holds MPP's buffer for this stream and, with `--size`, a larger picture's.
        let own = i.buf_size.max(i.hor_stride as usize * i.ver_stride as usize * 3 / 2) as u64;
        let sized = opts.size.map_or(0, |(w, h)| align_up(w, 16) as u64 * align_up(h, 16) as u64 * 3 / 2);
        cap.buf_bytes = own.max(sized);
        cap.layout = Some(layout_of(&i));
        Ok(cap)
    }

    /// Bytes each pool buffer needs (MPP's `buf_size` at start-up, or `--size`'s if larger).
    pub(crate) fn pool_bytes(&self) -> u64 {
        self.buf_bytes
    }

    /// The pictures' layout now (MPP's strides).
    pub fn layout(&self) -> FrameLayout {
        self.layout.expect("known since open")
    }

    /// Nominal frames per second (`--fps`, else the probe's, else 30).
    pub fn fps(&self) -> f64 {
        self.fps
    }

    /// Counters so far.
    pub fn stats(&self) -> MppStats {
        self.stats
    }

    /// Whether the input is a live stream (not paced by the stage).
    pub fn live(&self) -> bool {
        matches!(self.input, MppInput::Network(_))
    }

    /// `video:clip.mp4 H.264 768x432 (MPP, hor_stride 768, ver_stride 432)`.
    pub fn describe(&self) -> String {
        let l = self.layout();
        let i = self.first_info.expect("known since open");
        let transport = match &self.input {
            MppInput::Network(u) if is_rtsp(u) => format!(", live, {}", self.opts.transport.name()),
            MppInput::Network(_) => ", live".into(),
            MppInput::File(_) => String::new(),
        };
        format!(
            "{} {} {}x{} NV12 (decoded by MPP{transport}; hor_stride {}, ver_stride {})",
            self.shown, self.codec, l.width, l.height, i.hor_stride, i.ver_stride
        )
    }

    /// Makes the pool's buffers (`buffers`, each [`MppCapture::pool_bytes`] bytes, in pool
    /// order) MPP's external group, committed once, and acknowledges the info change. The
    /// pool's buffers are lent to MPP at the first [`MppCapture::next_frame`].
    pub fn attach(&mut self, buffers: &[BorrowedFd<'_>]) -> Result<()> {
        self.mpp
            .attach_external_buffers(buffers, self.buf_bytes as usize)
            .map_err(|e| anyhow!("{}: {e:#}", self.shown))?;
        self.mpp.info_change_ready().map_err(|e| anyhow!("{}: {e:#}", self.shown))?;
        self.attached = true;
        self.at_device = (0..buffers.len()).map(|_| None).collect();
        self.held = (0..buffers.len()).map(|_| None).collect();
        self.min_device = (buffers.len() / 2).max(1);
        Ok(())
    }

    /// One turn of the capture loop: gives MPP every buffer no consumer holds (releasing
    /// the frames of the pictures they held), then puts stream bytes and takes frames for
    /// at most about `timeout`, publishing the first picture into `prod`.
    pub fn next_frame(&mut self, prod: &mut PoolProducer, stop: &AtomicBool, timeout: Duration) -> Result<MppNext> {
        if let Some(why) = self.ended {
            return Ok(MppNext::End(why));
        }
        self.give_back(prod)?;
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(f) = self.mpp.get_frame().map_err(|e| anyhow!("{}: {e:#}", self.shown))? {
                if let Some(next) = self.take(f, prod, stop)? {
                    return Ok(next);
                }
                continue;
            }
            if self.feed()? {
                continue;
            }
            if Instant::now() >= deadline || stop.load(Ordering::Relaxed) {
                return Ok(MppNext::Idle);
            }
            self.wait_input(deadline);
        }
    }

    /// Lends every free pool buffer to MPP; a buffer that comes back from its consumers
    /// releases the frame of the picture it held.
    fn give_back(&mut self, prod: &mut PoolProducer) -> Result<()> {
        for loan in prod.lend_free_to_device(self.min_device)? {
            let i = loan.index() as usize;
            if let Some(f) = self.held.get_mut(i).and_then(Option::take) {
                f.release().map_err(|e| anyhow!("{}: {e:#}", self.shown))?;
                self.stats.released += 1;
            }
            match self.at_device.get_mut(i) {
                Some(slot) => *slot = Some(loan),
                None => {
                    prod.device_returned([loan]);
                    bail!("{}: pool buffer {i} is not one MPP was given", self.shown);
                }
            }
        }
        Ok(())
    }

    /// Handles one frame from MPP: `Some` to end the turn.
    fn take(&mut self, f: DecodedFrame, prod: &mut PoolProducer, stop: &AtomicBool) -> Result<Option<MppNext>> {
        let i = *f.info();
        if i.info_change {
            if !self.renegotiate(&i)? {
                self.ended = Some("the stream outgrew the pool");
                return Ok(Some(MppNext::End("the stream outgrew the pool")));
            }
            return Ok(None);
        }
        if !i.has_picture() {
            if i.fd.is_some() {
                self.stats.error_frames += 1;
                if self.stats.error_frames <= 5 {
                    log::warn!(
                        "{}: MPP flagged a picture (errinfo {}, discard {}); dropped",
                        self.shown,
                        i.errinfo,
                        i.discard
                    );
                }
            }
            drop(f);
            if i.eos && !self.live() {
                self.ended = Some("end of source");
                return Ok(Some(MppNext::End("end of source")));
            }
            return Ok(None);
        }
        if let Some(iv) = self.rate {
            let now = Instant::now();
            if self.next_due.is_some_and(|d| now < d) {
                // Before its turn: back to MPP at once (its buffer was never lent out).
                self.stats.rate_dropped += 1;
                drop(f);
                return Ok(None);
            }
            // On schedule: the next is one interval after this one's due time; late by more
            // than an interval: the schedule starts again from now.
            let base = self.next_due.filter(|d| now.saturating_duration_since(*d) < iv).unwrap_or(now);
            self.next_due = Some(base + iv);
        }
        let Some(k) = i.buffer_index.map(|k| k as usize) else {
            bail!("{}: MPP gave a picture without a buffer index", self.shown)
        };
        let Some(loan) = self.at_device.get_mut(k).and_then(Option::take) else {
            bail!(
                "{}: MPP decoded into buffer {k}, which zcpipe had not lent it (a consumer holds it): a decoder bug",
                self.shown
            );
        };
        let mut layout = self.layout();
        if (layout.width, layout.height) != (i.width, i.height) {
            layout = layout_of(&i);
            self.layout = Some(layout);
        }
        let now = monotonic_ns();
        let mut desc = FrameDesc { seq: self.seq, timestamp_ns: now, layout, ..Default::default() };
        desc.stamps[2 * Stage::Capture as usize] = now;
        if let Some(lost) = self.pending_gap.take() {
            desc.flags = RestartMark::reconnect(lost).mark(desc.flags);
        }
        desc.stamp_out(Stage::Capture);
        let wl = prod.claim(loan)?;
        self.held[k] = Some(f);
        wl.publish(desc, stop)?;
        self.seq += 1;
        self.stats.pictures += 1;
        self.picture_arrived();
        if i.eos && !self.live() {
            self.ended = Some("end of source");
        }
        Ok(Some(MppNext::Frame(desc.seq)))
    }

    /// A later info change: the new size is taken if its buffers fit the pool's (`true`).
    /// A larger one: for a live stream an error (the stage exits, `zcpipe run` restarts it
    /// and the new capture sizes its pool for the stream as it is now); for a file, one
    /// warning and `false` (the file ends there: a restart would replay it from the start).
    fn renegotiate(&mut self, i: &FrameInfo) -> Result<bool> {
        check_format(i, &self.shown)?;
        let need = i.buf_size.max(i.hor_stride as usize * i.ver_stride as usize * 3 / 2) as u64;
        let old = self.layout();
        if need > self.buf_bytes {
            let what = format!(
                "{}: the stream changed from {}x{} to {}x{}, whose pictures need {need} bytes, more than the pool's {}-byte buffers",
                self.shown, old.width, old.height, i.width, i.height, self.buf_bytes
            );
            if self.live() {
                bail!("{what}; capture ends so that its restart sizes the pool for the new stream (pass --size {}x{} to size it up front)", i.width, i.height);
            }
            log::warn!(
                "{what}; the file ends here: pass --size {}x{} (or larger) to decode it whole",
                i.width,
                i.height
            );
            return Ok(false);
        }
        self.mpp.info_change_ready().map_err(|e| anyhow!("{}: {e:#}", self.shown))?;
        if (old.width, old.height) != (i.width, i.height) {
            self.stats.info_changes += 1;
            log::info!(
                "{}: the stream is now {}x{} (was {}x{}): re-negotiated, it fits the pool's {}-byte buffers (hor_stride {}, ver_stride {})",
                self.shown, i.width, i.height, old.width, old.height, self.buf_bytes, i.hor_stride, i.ver_stride
            );
        }
        self.layout = Some(layout_of(i));
        Ok(true)
    }

    /// Ends the capture after the pool's drain: releases every frame still held, takes back
    /// the loans of the buffers MPP had (into `prod`), and destroys the decoder. Returns
    /// how many frames were released here.
    pub fn finish(&mut self, prod: &mut PoolProducer) -> Result<usize> {
        let mut n = 0;
        for f in self.held.iter_mut().filter_map(Option::take) {
            drop(f);
            n += 1;
        }
        self.stats.released += n as u64;
        prod.device_returned(self.at_device.iter_mut().filter_map(Option::take));
        self.link = Link::Down { at: Instant::now() + BACKOFF_MAX };
        Ok(n)
    }

    /// Facts for the stage's reports.
    pub fn facts(&self) -> Extras {
        let s = self.stats;
        let l = self.layout();
        let i = self.first_info.expect("known since open");
        vec![
            ("decoder", "mpp".into()),
            ("mpp_library", self.mpp.lib().path().to_string().into()),
            ("codec", self.codec.clone().into()),
            ("width", l.width.into()),
            ("height", l.height.into()),
            ("hor_stride", i.hor_stride.into()),
            ("ver_stride", i.ver_stride.into()),
            ("buffer_bytes", self.buf_bytes.into()),
            ("buffers", self.at_device.len().into()),
            ("packets", s.packets.into()),
            ("stream_bytes", s.stream_bytes.into()),
            ("input_full", s.input_full.into()),
            ("pictures", s.pictures.into()),
            ("error_frames", s.error_frames.into()),
            ("info_changes", s.info_changes.into()),
            ("frames_released", s.released.into()),
            ("frames_held", self.held.iter().filter(|h| h.is_some()).count().into()),
            ("live", self.live().into()),
            ("reconnects", s.reconnects.into()),
            ("stream_drops", s.drops.into()),
            ("frames_lost", s.frames_lost.into()),
            ("rate_dropped", s.rate_dropped.into()),
            ("demuxer_errors", s.demuxer_errors.into()),
            ("gap_s", ((s.gap_s * 1000.0).round() / 1000.0).into()),
        ]
    }
}

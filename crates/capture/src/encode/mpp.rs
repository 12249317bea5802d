//! A raw camera's frames encoded by Rockchip MPP's H.264 encoder reading the capture pool's
//! dma-buf in place: no CPU copy of a pixel. The encoder takes NV12 in one dma-buf (the luma
//! plane at offset 0, the CbCr plane right after `ver_stride` rows of `bytesperline` bytes),
//! which is what the host sources and MPP's decoder write and what a V4L2 camera's
//! single-planar NV12 is; another layout is encoded on the CPU instead. Each access unit
//! (SPS and PPS before every IDR) goes into MPEG-TS by zcpipe's own muxer
//! ([`zcpipe_core::ts::TsMuxer`]) and to the recorder stamped with the frame's own capture
//! time, so the clip's timeline is the camera's.

use std::sync::Arc;

use anyhow::{bail, Context};

use zcpipe_core::frame::{Fourcc, FrameLayout};
use zcpipe_core::packets::Unit;
use zcpipe_core::pool::Frame;
use zcpipe_core::ts::{Codec, TsMuxer};
use zcpipe_sys::mpp::{Encoder, EncoderOptions, Libmpp};

use super::super::record::Recording;
use super::GOP_SECONDS;

/// The PTS of a stream's first unit, 90 kHz: the muxer's PCR runs 100 ms ahead of it.
const FIRST_PTS: u64 = 9000;

/// MPP's encoder for frames of one size, and the stream it sends.
pub(super) struct MppEncoder {
    pub(super) key: (Fourcc, u32, u32),
    enc: Encoder,
    mux: TsMuxer,
    record: Arc<Recording>,
    first_ns: Option<u64>,
}

/// MPP's stride of frames of `layout` (`hor_stride`, `ver_stride`): NV12 in one dma-buf, the
/// CbCr plane after a whole number of luma rows. Errors name what MPP cannot take.
pub(super) fn strides(layout: &FrameLayout) -> anyhow::Result<(u32, u32)> {
    let [y, uv, ..] = layout.planes;
    if layout.fourcc != Fourcc::NV12 || layout.num_planes != 2 {
        bail!("{} in {} plane(s) (MPP's encoder takes NV12 in one dma-buf)", layout.fourcc, layout.num_planes);
    }
    if y.fd_index != 0 || uv.fd_index != 0 || y.offset != 0 || y.bytesperline != uv.bytesperline {
        bail!("NV12 whose planes are not one after the other in one dma-buf");
    }
    let bpl = y.bytesperline;
    if bpl == 0 || uv.offset % bpl != 0 || uv.offset / bpl < layout.height || bpl < layout.width {
        bail!("NV12 whose CbCr plane does not follow whole luma rows (offset {}, {bpl} bytes a row)", uv.offset);
    }
    Ok((bpl, uv.offset / bpl))
}

impl MppEncoder {
    /// MPP's encoder for frames of `layout` at `fps`, and the stream announced to `record`.
    pub(super) fn start(
        lib: &Arc<Libmpp>,
        record: &Arc<Recording>,
        layout: &FrameLayout,
        fps: f64,
    ) -> anyhow::Result<MppEncoder> {
        let (hor_stride, ver_stride) = strides(layout)?;
        let fps = fps.round().clamp(1.0, 120.0) as u32;
        // About 0.07 bits a pixel: 4 Mbit/s for 1080p at 30 fps.
        let bits = (u64::from(layout.width) * u64::from(layout.height) * u64::from(fps) / 15).clamp(64_000, 100 << 20);
        let opts = EncoderOptions {
            width: layout.width,
            height: layout.height,
            hor_stride,
            ver_stride,
            fps,
            gop: ((f64::from(fps) * GOP_SECONDS) as u32).max(1),
            bitrate: bits as u32,
        };
        let enc = Encoder::new(lib.clone(), &opts).context("MPP's H.264 encoder")?;
        let mux = TsMuxer::new(Codec::H264);
        record.announce(Codec::H264, layout.width, layout.height, mux.tables());
        let key = (layout.fourcc, layout.width, layout.height);
        Ok(MppEncoder { key, enc, mux, record: record.clone(), first_ns: None })
    }

    /// Encodes `frame` (held until MPP has read it) and sends its access unit.
    pub(super) fn encode(&mut self, frame: &Frame) -> anyhow::Result<()> {
        let d = frame.desc();
        let buf = frame.buffers().first().context("a frame without a dma-buf")?;
        let first = *self.first_ns.get_or_insert(d.timestamp_ns);
        let pts = FIRST_PTS + d.timestamp_ns.saturating_sub(first) * 9 / 100_000;
        let p = self.enc.encode(buf.fd(), buf.size() as usize, pts as i64, false)?;
        let bytes = self.mux.unit(&p.data, pts, p.key);
        self.record.unit(Unit { bytes, mono_ns: d.timestamp_ns, pts: Some(pts), key: p.key, gap: false });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zcpipe_core::frame::PlaneDesc;

    #[test]
    fn mpp_takes_nv12_in_one_buffer_with_whole_luma_rows_before_its_chroma() {
        let host = FrameLayout::nv12(1279, 719, 16);
        assert_eq!(strides(&host).unwrap(), (1280, 720), "a host source's padded NV12");
        let mut cam = host;
        cam.planes[1].offset = 1280 * 721 + 5;
        assert!(strides(&cam).unwrap_err().to_string().contains("whole luma rows"));
        let mut two = host;
        two.planes[1] = PlaneDesc { fd_index: 1, offset: 0, ..two.planes[1] };
        assert!(strides(&two).is_err(), "NV12M: two dma-bufs");
        let yuyv = FrameLayout { fourcc: Fourcc::YUYV, num_planes: 1, ..host };
        assert!(strides(&yuyv).unwrap_err().to_string().starts_with("YUYV in 1 plane(s)"));
    }
}

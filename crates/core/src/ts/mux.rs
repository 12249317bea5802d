//! Packetizing encoded access units into a transport stream: [`TsMuxer`], the inverse of
//! [`TsSplitter`](super::TsSplitter), for a stream zcpipe encodes itself (MPP's H.264
//! encoder) rather than receives from ffmpeg.
//!
//! The stream is ffmpeg's layout: one program (number 1), the PMT on PID 0x1000, the video on
//! PID 0x100, which also carries the PCR. Each access unit is one PES packet (stream id 0xE0,
//! length 0 as for any video, data-alignment set, PTS and DTS = PTS: no B pictures) cut into
//! 188-byte packets; its first packet has an adaptation field with the PCR (100 ms before the
//! unit's DTS, or 0 at the stream's start) and, on a keyframe, the random-access indicator;
//! its last is stuffed to 188 bytes through the adaptation field. Each PID has its own
//! continuity counter. An access unit that does not start with an access unit delimiter gets
//! one (ISO/IEC 13818-1 2.14: every AVC access unit in a transport stream holds one; ffmpeg's
//! muxer inserts it likewise; HEVC the same), so MPP's packets, which have none, can go in as
//! they are.

use std::cell::Cell;

use super::{Codec, TS_PACKET};

/// The PMT's PID (ffmpeg's default).
pub const PMT_PID: u16 = 0x1000;
/// The video's PID (ffmpeg's default), also the PCR's.
pub const VIDEO_PID: u16 = 0x100;
/// How far the PCR runs ahead of the units' DTS, 90 kHz ticks (100 ms).
const PCR_LEAD: u64 = 9000;
/// PTS, DTS and the PCR base are 33-bit numbers.
const TS_33: u64 = (1 << 33) - 1;
/// TS payload bytes after the 4-byte header.
const PAYLOAD: usize = TS_PACKET - 4;

/// The CRC-32 of MPEG-2 sections (ISO/IEC 13818-1 Annex A): polynomial 0x04C11DB7, initial
/// value 0xFFFFFFFF, bits not reflected, no final XOR.
pub fn crc32_mpeg2(data: &[u8]) -> u32 {
    let mut crc = u32::MAX;
    for &b in data {
        crc ^= u32::from(b) << 24;
        for _ in 0..8 {
            crc = if crc & 0x8000_0000 != 0 { (crc << 1) ^ 0x04c1_1db7 } else { crc << 1 };
        }
    }
    crc
}

/// Packetizes access units into a transport stream (see the module's documentation).
#[derive(Debug)]
pub struct TsMuxer {
    codec: Codec,
    /// Continuity counters of PAT, PMT (advanced by [`TsMuxer::tables`], which takes `&self`)
    /// and video.
    cc_pat: Cell<u8>,
    cc_pmt: Cell<u8>,
    cc_video: u8,
}

impl TsMuxer {
    /// A muxer of a `codec` video stream (PMT stream type 0x1B for H.264, 0x24 for HEVC).
    pub fn new(codec: Codec) -> TsMuxer {
        TsMuxer { codec, cc_pat: Cell::new(0), cc_pmt: Cell::new(0), cc_video: 0 }
    }

    /// The codec it packetizes.
    pub fn codec(&self) -> Codec {
        self.codec
    }

    /// The program tables, what a stream (or a clip) starts with and a live stream repeats:
    /// one PAT packet and one PMT packet, each section with its CRC-32. Each call advances
    /// the tables' continuity counters.
    pub fn tables(&self) -> Vec<u8> {
        // PAT (2.4.4.3): transport_stream_id 1, version 0, current; program 1 -> the PMT.
        let mut pat = vec![0x00, 0xb0, 0, 0x00, 0x01, 0xc1, 0x00, 0x00, 0x00, 0x01];
        pat.extend_from_slice(&(0xe000 | PMT_PID).to_be_bytes());
        // PMT (2.4.4.8): program 1, PCR on the video PID, no program info, one stream.
        let stream_type = match self.codec {
            Codec::H264 => 0x1b,
            Codec::Hevc => 0x24,
        };
        let mut pmt = vec![0x02, 0xb0, 0, 0x00, 0x01, 0xc1, 0x00, 0x00];
        pmt.extend_from_slice(&(0xe000 | VIDEO_PID).to_be_bytes());
        pmt.extend_from_slice(&[0xf0, 0x00, stream_type]);
        pmt.extend_from_slice(&(0xe000 | VIDEO_PID).to_be_bytes());
        pmt.extend_from_slice(&[0xf0, 0x00]);
        let mut out = Vec::with_capacity(2 * TS_PACKET);
        for (pid, mut s, cc) in [(0, pat, &self.cc_pat), (PMT_PID, pmt, &self.cc_pmt)] {
            // section_length: the bytes after it, the CRC included.
            let len = s.len() - 3 + 4;
            s[1] |= (len >> 8) as u8 & 0x0f;
            s[2] = len as u8;
            s.extend_from_slice(&crc32_mpeg2(&s).to_be_bytes());
            let mut payload = vec![0u8]; // pointer_field
            payload.extend_from_slice(&s);
            payload.resize(PAYLOAD, 0xff);
            write_packet(&mut out, pid, true, next_cc(cc), None, &payload);
        }
        out
    }

    /// One access unit (`annexb`: its NAL units with start codes) as TS packets of the video
    /// PID: a PES packet with PTS = DTS = `pts_90k` (90 kHz, taken modulo 2^33), the PCR and,
    /// when `key`, the random-access indicator in its first packet (see the module's
    /// documentation).
    pub fn unit(&mut self, annexb: &[u8], pts_90k: u64, key: bool) -> Vec<u8> {
        let pts = pts_90k & TS_33;
        let aud: &[u8] = match self.codec {
            Codec::H264 => &[0, 0, 0, 1, 0x09, 0xf0],
            Codec::Hevc => &[0, 0, 0, 1, 0x46, 0x01, 0x50],
        };
        let has_aud = first_nal_header(annexb).is_some_and(|h| match self.codec {
            Codec::H264 => h & 0x1f == 9,
            Codec::Hevc => (h >> 1) & 0x3f == 35,
        });
        // PES header (2.4.3.6): video stream 0, unbounded length, data-aligned, PTS and DTS.
        let mut pes = vec![0, 0, 1, 0xe0, 0, 0, 0x84, 0xc0, 10];
        pes.extend_from_slice(&timestamp(0x3, pts));
        pes.extend_from_slice(&timestamp(0x1, pts));
        if !has_aud {
            pes.extend_from_slice(aud);
        }
        pes.extend_from_slice(annexb);
        let pcr = pts.saturating_sub(PCR_LEAD);
        let mut out = Vec::with_capacity((pes.len() / PAYLOAD + 2) * TS_PACKET);
        let mut rest = &pes[..];
        let mut first = true;
        while !rest.is_empty() || first {
            // The first packet's adaptation field: length, flags, the 6-byte PCR.
            let room = if first { PAYLOAD - 8 } else { PAYLOAD };
            let (chunk, tail) = rest.split_at(rest.len().min(room));
            let af = first.then_some(Adaptation { random_access: key, pcr });
            let cc = self.cc_video;
            self.cc_video = (cc + 1) & 0x0f;
            write_packet(&mut out, VIDEO_PID, first, cc, af, chunk);
            rest = tail;
            first = false;
        }
        out
    }
}

/// The next continuity counter of a PID whose counter is `cc`.
fn next_cc(cc: &Cell<u8>) -> u8 {
    let v = cc.get();
    cc.set((v + 1) & 0x0f);
    v
}

/// The header byte of the first NAL unit of Annex-B `data`.
fn first_nal_header(data: &[u8]) -> Option<u8> {
    let at = data.windows(3).position(|w| w == [0, 0, 1])?;
    data.get(at + 3).copied()
}

/// A PTS or DTS field (2.4.3.7): `prefix` (0011 PTS with DTS, 0001 DTS) in the top 4 bits,
/// then the 33 bits in three groups, each followed by a marker bit.
fn timestamp(prefix: u8, t: u64) -> [u8; 5] {
    [
        prefix << 4 | ((t >> 29) & 0x0e) as u8 | 1,
        (t >> 22) as u8,
        ((t >> 14) & 0xfe) as u8 | 1,
        (t >> 7) as u8,
        ((t << 1) & 0xfe) as u8 | 1,
    ]
}

/// What a unit's first packet carries in its adaptation field.
#[derive(Clone, Copy)]
struct Adaptation {
    random_access: bool,
    /// The PCR base (90 kHz; the 27 MHz extension is 0).
    pcr: u64,
}

/// Appends one TS packet: header (PID, unit start, continuity counter `cc`), an adaptation
/// field when `af` is given or `payload` is shorter than the packet's room (stuffed with
/// 0xFF), then `payload` (at most 184 bytes, 176 with `af`).
fn write_packet(out: &mut Vec<u8>, pid: u16, start: bool, cc: u8, af: Option<Adaptation>, payload: &[u8]) {
    let with_af = af.is_some() || payload.len() < PAYLOAD;
    out.extend_from_slice(&[
        0x47,
        u8::from(start) << 6 | (pid >> 8) as u8 & 0x1f,
        pid as u8,
        if with_af { 0x30 } else { 0x10 } | cc & 0x0f,
    ]);
    if with_af {
        // Bytes after the length byte: flags, PCR, stuffing.
        let len = PAYLOAD - 1 - payload.len();
        out.push(len as u8);
        let end = out.len() + len;
        if len > 0 {
            let a = af.unwrap_or(Adaptation { random_access: false, pcr: 0 });
            let flags = if a.random_access { 0x40 } else { 0 } | if af.is_some() { 0x10 } else { 0 };
            out.push(flags);
            if af.is_some() {
                let b = a.pcr & TS_33;
                out.extend_from_slice(&[(b >> 25) as u8, (b >> 17) as u8, (b >> 9) as u8, (b >> 1) as u8]);
                out.extend_from_slice(&[((b & 1) << 7) as u8 | 0x7e, 0x00]);
            }
        }
        out.resize(end, 0xff);
    }
    out.extend_from_slice(payload);
}

#[cfg(test)]
mod tests {
    use super::super::{AccessUnit, TsSplitter};
    use super::*;

    #[test]
    fn crc_is_mpeg2s() {
        // The CRC-32/MPEG-2 check value (the CRC of "123456789").
        assert_eq!(crc32_mpeg2(b"123456789"), 0x0376_e6e7);
    }

    /// The elementary stream bytes of a unit's TS packets (headers, adaptation fields and the
    /// PES header taken off), and the packets' continuity counters.
    fn depacketize(ts: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let (mut payload, mut ccs) = (Vec::new(), Vec::new());
        for p in ts.chunks(TS_PACKET) {
            assert_eq!((p.len(), p[0]), (TS_PACKET, 0x47));
            ccs.push(p[3] & 0x0f);
            let at = if p[3] & 0x20 != 0 { 5 + p[4] as usize } else { 4 };
            payload.extend_from_slice(&p[at..]);
        }
        let header = 9 + payload[8] as usize;
        (payload[header..].to_vec(), ccs)
    }

    #[test]
    fn units_round_trip_through_the_splitter() {
        let mut m = TsMuxer::new(Codec::H264);
        let tables = m.tables();
        assert_eq!(tables.len(), 2 * TS_PACKET);
        // Each section's CRC makes the CRC of the whole section 0.
        for p in tables.chunks(TS_PACKET) {
            let len = (usize::from(p[6] & 0x0f) << 8) | usize::from(p[7]);
            assert_eq!(crc32_mpeg2(&p[5..8 + len]), 0);
        }
        // Sizes around the packets' room (176 in the first with its PCR, 184 after, 183 and
        // 182 needing the shortest stuffing), with and without an AUD; a PTS near the wrap.
        let sizes = [10, 157, 158, 159, 165, 166, 167, 341, 342, 343, 5000];
        let mut stream = tables;
        let mut sent = Vec::new();
        for (i, n) in sizes.into_iter().enumerate() {
            let nal = if i % 4 == 0 { 0x65 } else { 0x41 };
            let mut au = if i % 3 == 0 { vec![0, 0, 0, 1, 0x09, 0xf0] } else { Vec::new() };
            au.extend_from_slice(&[0, 0, 0, 1, nal]);
            au.extend((0..n).map(|k| (k % 251) as u8 | 1));
            let pts = if i == sizes.len() - 1 { (1 << 33) + 500 } else { 126_000 + 3000 * i as u64 };
            stream.extend(m.unit(&au, pts, i % 4 == 0));
            let es = if i % 3 == 0 { au } else { [&[0, 0, 0, 1, 0x09, 0xf0][..], &au].concat() };
            sent.push((es, pts & TS_33, i % 4 == 0));
        }
        for chunk in [1, 188, 1000] {
            let mut s = TsSplitter::new();
            let mut out: Vec<AccessUnit> = Vec::new();
            for c in stream.chunks(chunk) {
                s.push(c, &mut out);
            }
            out.extend(s.finish());
            assert_eq!(s.codec(), Some(Codec::H264));
            assert_eq!(s.counters.bad_packets + s.counters.resync_bytes, 0);
            assert_eq!(out.len(), sent.len(), "chunks of {chunk}");
            let mut next_cc = 0;
            for (u, (es, pts, key)) in out.iter().zip(&sent) {
                assert_eq!((u.pts, u.key), (Some(*pts), *key));
                let (got, ccs) = depacketize(&u.bytes);
                assert_eq!(&got, es);
                for cc in ccs {
                    assert_eq!(cc, next_cc);
                    next_cc = (next_cc + 1) & 0x0f;
                }
            }
        }
        // The tables' counters advance from one call to the next.
        assert_eq!((m.tables()[3] & 0x0f, m.tables()[3] & 0x0f), (1, 2));
    }

    #[test]
    fn hevc_units_get_their_aud_and_stream_type() {
        let mut m = TsMuxer::new(Codec::Hevc);
        let mut stream = m.tables();
        // An IDR_W_RADL picture (type 19: header 0x26 0x01).
        stream.extend(m.unit(&[0, 0, 0, 1, 0x26, 0x01, 0xaf], 90_000, true));
        let mut s = TsSplitter::new();
        let mut out = Vec::new();
        s.push(&stream, &mut out);
        out.extend(s.finish());
        assert_eq!((s.codec(), out.len(), out[0].key), (Some(Codec::Hevc), 1, true));
        assert_eq!(depacketize(&out[0].bytes).0, [0, 0, 0, 1, 0x46, 0x01, 0x50, 0, 0, 0, 1, 0x26, 0x01, 0xaf]);
    }

    /// `tool args`, or `None` when the tool is not installed.
    fn run(tool: &str, args: &[&str]) -> Option<std::process::Output> {
        if !std::path::Path::new("/usr/bin").join(tool).exists() {
            return None;
        }
        let out = std::process::Command::new(tool).args(args).output().expect("running {tool}");
        assert!(out.status.success(), "{tool} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        Some(out)
    }

    #[test]
    fn ffprobe_reads_muxed_x264_frames() {
        let dir = tempfile::tempdir().unwrap();
        let (h264, ts) = (dir.path().join("in.h264"), dir.path().join("out.ts"));
        // 12 frames of testsrc, an IDR every 5, each access unit starting with its AUD.
        let made = run(
            "ffmpeg",
            &["-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=size=160x120:rate=25"]
                .into_iter()
                .chain(["-frames:v", "12", "-c:v", "libx264", "-g", "5", "-bf", "0", "-sc_threshold", "0"])
                .chain(["-x264-params", "aud=1", "-f", "h264", h264.to_str().unwrap()])
                .collect::<Vec<_>>(),
        );
        if made.is_none() {
            eprintln!("ffprobe_reads_muxed_x264_frames: SKIPPED (no /usr/bin/ffmpeg)");
            return;
        }
        let stream = std::fs::read(&h264).unwrap();
        let starts: Vec<usize> =
            stream.windows(5).enumerate().filter(|(_, w)| *w == [0, 0, 0, 1, 0x09]).map(|(i, _)| i).collect();
        assert_eq!(starts.len(), 12);
        let mut m = TsMuxer::new(Codec::H264);
        let mut out = m.tables();
        for (i, &s) in starts.iter().enumerate() {
            let au = &stream[s..starts.get(i + 1).copied().unwrap_or(stream.len())];
            let key = au.windows(4).any(|w| w[..3] == [0, 0, 1] && w[3] & 0x1f == 5);
            assert_eq!(key, i % 5 == 0, "unit {i}");
            out.extend(m.unit(au, 126_000 + 3600 * i as u64, key));
        }
        std::fs::write(&ts, &out).unwrap();
        let Some(probe) = run(
            "ffprobe",
            &["-v", "error", "-select_streams", "v", "-show_packets", "-show_entries", "packet=pts,flags"]
                .into_iter()
                .chain(["-show_entries", "stream=codec_name,width,height", "-of", "compact=p=0:nk=1"])
                .chain([ts.to_str().unwrap()])
                .collect::<Vec<_>>(),
        ) else {
            eprintln!("ffprobe_reads_muxed_x264_frames: SKIPPED (no /usr/bin/ffprobe)");
            return;
        };
        let text = String::from_utf8(probe.stdout).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let packets: Vec<(u64, bool)> = lines
            .iter()
            .filter_map(|l| l.split_once('|'))
            .filter_map(|(pts, flags)| Some((pts.parse().ok()?, flags.starts_with('K'))))
            .collect();
        let want: Vec<(u64, bool)> = (0..12).map(|i| (126_000 + 3600 * i as u64, i % 5 == 0)).collect();
        assert_eq!(packets, want, "{text}");
        assert!(lines.contains(&"h264|160|120"), "{text}");
    }
}

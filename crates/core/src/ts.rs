//! An MPEG transport stream (ISO/IEC 13818-1) cut into the access units of its video: what
//! the recorder keeps and remuxes. ffmpeg writes the camera's encoded stream as TS
//! (`-c:v copy -f mpegts`): 188-byte packets, the program tables (PAT on PID 0, then the
//! PMT it names) and the video's PES packets, one per access unit, each with its PTS and,
//! on a keyframe, the adaptation field's random-access indicator.
//!
//! [`TsSplitter`] takes the bytes as they come (any chunking), keeps the newest PAT and PMT
//! packets (a clip starts with them: [`TsSplitter::tables`]), and gives each access unit as
//! the whole TS packets of the video PID from one PES start to the next, with its PTS and
//! whether it is a keyframe (the random-access indicator, or an IDR/IRAP NAL unit in its
//! first packet). Everything read from the stream is bounds-checked: a corrupt or hostile
//! stream gives errors counted and skipped bytes, never a panic, and an access unit never
//! grows past [`MAX_ACCESS_UNIT`].
//!
//! [`TsMuxer`] does the opposite for a stream zcpipe encodes itself: access units (Annex B,
//! with their PTS and keyframe flag) into PES packets and TS packets, with the PAT and PMT.

mod mux;
pub use mux::{crc32_mpeg2, TsMuxer, PMT_PID, VIDEO_PID};

/// A TS packet's size.
pub const TS_PACKET: usize = 188;

/// The largest access unit kept, bytes (a 4K keyframe is a few MB): beyond it the unit is
/// dropped and counted.
pub const MAX_ACCESS_UNIT: usize = 16 << 20;

/// The video codecs a clip can hold (PMT stream types 0x1B and 0x24).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Codec {
    /// H.264 / AVC.
    H264,
    /// H.265 / HEVC.
    Hevc,
}

impl Codec {
    /// ffmpeg's name of it.
    pub fn name(self) -> &'static str {
        match self {
            Codec::H264 => "h264",
            Codec::Hevc => "hevc",
        }
    }

    /// The codec ffmpeg calls `name`.
    pub fn from_name(name: &str) -> Option<Codec> {
        match name {
            "h264" => Some(Codec::H264),
            "hevc" | "h265" => Some(Codec::Hevc),
            _ => None,
        }
    }

    fn from_stream_type(t: u8) -> Option<Codec> {
        match t {
            0x1b => Some(Codec::H264),
            0x24 => Some(Codec::Hevc),
            _ => None,
        }
    }
}

/// One access unit (a coded picture) as TS packets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessUnit {
    /// Its TS packets, whole (a multiple of [`TS_PACKET`] bytes).
    pub bytes: Vec<u8>,
    /// Its presentation time, 90 kHz units (33 bits), when the PES header has one.
    pub pts: Option<u64>,
    /// Whether a decoder can start at it (random-access indicator, IDR or IRAP picture).
    pub key: bool,
}

/// What went wrong in a stream, counted by [`TsSplitter`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TsCounters {
    /// Bytes skipped looking for the next sync byte (0x47).
    pub resync_bytes: u64,
    /// Packets whose headers or tables did not parse.
    pub bad_packets: u64,
    /// Access units dropped for being over [`MAX_ACCESS_UNIT`].
    pub oversized: u64,
    /// Access units given.
    pub units: u64,
}

/// Splits a transport stream into access units (see the module's documentation).
#[derive(Debug, Default)]
pub struct TsSplitter {
    /// Bytes of a packet not yet whole.
    partial: Vec<u8>,
    pat: Option<Vec<u8>>,
    pmt: Option<Vec<u8>>,
    pmt_pid: Option<u16>,
    video: Option<(u16, Codec)>,
    current: Option<AccessUnit>,
    /// The current unit went over the bound: its packets are skipped to the next start.
    skipping: bool,
    /// Counters.
    pub counters: TsCounters,
}

impl TsSplitter {
    /// A splitter at the start of a stream.
    pub fn new() -> TsSplitter {
        TsSplitter::default()
    }

    /// The video's codec, once the PMT named it.
    pub fn codec(&self) -> Option<Codec> {
        self.video.map(|(_, c)| c)
    }

    /// The newest PAT and PMT packets, what a clip starts with (`None` before both came).
    pub fn tables(&self) -> Option<Vec<u8>> {
        Some([self.pat.as_deref()?, self.pmt.as_deref()?].concat())
    }

    /// Takes `data` (the stream's next bytes) and appends each access unit it completes
    /// to `out`.
    pub fn push(&mut self, mut data: &[u8], out: &mut Vec<AccessUnit>) {
        if !self.partial.is_empty() {
            let need = TS_PACKET - self.partial.len();
            let take = need.min(data.len());
            self.partial.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.partial.len() < TS_PACKET {
                return;
            }
            let p = std::mem::take(&mut self.partial);
            self.packet(&p, out);
        }
        while !data.is_empty() {
            if data[0] != 0x47 {
                let skip = data.iter().position(|&b| b == 0x47).unwrap_or(data.len());
                self.counters.resync_bytes += skip as u64;
                data = &data[skip..];
                continue;
            }
            if data.len() < TS_PACKET {
                self.partial.extend_from_slice(data);
                return;
            }
            let (p, rest) = data.split_at(TS_PACKET);
            self.packet(p, out);
            data = rest;
        }
    }

    /// The stream ended: the last access unit, if any.
    pub fn finish(&mut self) -> Option<AccessUnit> {
        self.partial.clear();
        let au = self.current.take().filter(|_| !self.skipping);
        self.counters.units += au.is_some() as u64;
        au
    }

    fn packet(&mut self, p: &[u8], out: &mut Vec<AccessUnit>) {
        let Some(h) = Header::parse(p) else {
            self.counters.bad_packets += 1;
            return;
        };
        if h.pid == 0 {
            match pat_pmt_pid(h.payload(p)) {
                Some(pid) => {
                    self.pat = Some(p.to_vec());
                    self.pmt_pid = Some(pid);
                }
                None => self.counters.bad_packets += 1,
            }
        } else if Some(h.pid) == self.pmt_pid {
            match pmt_video(h.payload(p)) {
                Some(v) => {
                    self.pmt = Some(p.to_vec());
                    self.video = Some(v);
                }
                None => self.counters.bad_packets += 1,
            }
        } else if self.video.is_some_and(|(pid, _)| pid == h.pid) {
            self.video_packet(p, &h, out);
        }
    }

    fn video_packet(&mut self, p: &[u8], h: &Header, out: &mut Vec<AccessUnit>) {
        if h.unit_start {
            if let Some(au) = self.current.take().filter(|_| !self.skipping) {
                self.counters.units += 1;
                out.push(au);
            }
            self.skipping = false;
            let payload = h.payload(p);
            let (pts, es) = pes_header(payload).unwrap_or((None, &[][..]));
            let codec = self.codec().unwrap_or(Codec::H264);
            let key = h.random_access || has_key_nal(es, codec);
            self.current = Some(AccessUnit { bytes: p.to_vec(), pts, key });
            return;
        }
        if self.skipping {
            return;
        }
        // A continuation with no unit started (the stream joined mid-unit) is skipped.
        let Some(au) = self.current.as_mut() else { return };
        if au.bytes.len() + TS_PACKET > MAX_ACCESS_UNIT {
            self.counters.oversized += 1;
            self.skipping = true;
            self.current = None;
            return;
        }
        au.bytes.extend_from_slice(p);
    }
}

/// A TS packet's header (ISO/IEC 13818-1, 2.4.3.2) and where its payload starts.
struct Header {
    pid: u16,
    unit_start: bool,
    random_access: bool,
    /// Offset of the payload in the packet ([`TS_PACKET`]: none).
    payload_at: usize,
}

impl Header {
    fn parse(p: &[u8]) -> Option<Header> {
        if p.len() != TS_PACKET || p[0] != 0x47 || p[1] & 0x80 != 0 {
            return None;
        }
        let pid = u16::from(p[1] & 0x1f) << 8 | u16::from(p[2]);
        let unit_start = p[1] & 0x40 != 0;
        let control = (p[3] >> 4) & 0x3;
        let (mut payload_at, mut random_access) = (4, false);
        if control & 0x2 != 0 {
            let len = *p.get(4)? as usize;
            if 5 + len > TS_PACKET {
                return None;
            }
            random_access = len > 0 && p[5] & 0x40 != 0;
            payload_at = 5 + len;
        }
        if control & 0x1 == 0 {
            payload_at = TS_PACKET;
        }
        Some(Header { pid, unit_start, random_access, payload_at })
    }

    fn payload<'a>(&self, p: &'a [u8]) -> &'a [u8] {
        p.get(self.payload_at..).unwrap_or(&[])
    }
}

/// The section in a table packet's payload (after its pointer field), cut to its
/// `section_length`: `None` if it does not fit the packet.
fn section(payload: &[u8], table_id: u8) -> Option<&[u8]> {
    let pointer = *payload.first()? as usize;
    let s = payload.get(1 + pointer..)?;
    if *s.first()? != table_id {
        return None;
    }
    let len = (usize::from(*s.get(1)? & 0x0f) << 8) | usize::from(*s.get(2)?);
    // 3 header bytes, then `len` bytes ending with the 4-byte CRC.
    if len < 9 {
        return None;
    }
    s.get(..3 + len)
}

/// The PMT PID of the first program a PAT lists.
fn pat_pmt_pid(payload: &[u8]) -> Option<u16> {
    let s = section(payload, 0x00)?;
    let entries = s.get(8..s.len() - 4)?;
    entries
        .chunks_exact(4)
        .find(|e| u16::from_be_bytes([e[0], e[1]]) != 0)
        .map(|e| u16::from(e[2] & 0x1f) << 8 | u16::from(e[3]))
}

/// The first H.264 or HEVC stream a PMT lists: its PID and codec.
fn pmt_video(payload: &[u8]) -> Option<(u16, Codec)> {
    let s = section(payload, 0x02)?;
    let info = (usize::from(*s.get(10)? & 0x0f) << 8) | usize::from(*s.get(11)?);
    let mut at = 12 + info;
    let end = s.len().checked_sub(4)?;
    while at + 5 <= end {
        let (t, pid) = (s[at], u16::from(s[at + 1] & 0x1f) << 8 | u16::from(s[at + 2]));
        let es_info = (usize::from(s[at + 3] & 0x0f) << 8) | usize::from(s[at + 4]);
        if let Some(c) = Codec::from_stream_type(t) {
            return Some((pid, c));
        }
        at += 5 + es_info;
    }
    None
}

/// A PES header at the start of `payload`: its PTS (when flagged) and the elementary
/// stream bytes after it.
fn pes_header(payload: &[u8]) -> Option<(Option<u64>, &[u8])> {
    if payload.get(..3)? != [0, 0, 1] {
        return None;
    }
    let flags = *payload.get(7)?;
    let header_len = *payload.get(8)? as usize;
    let es = payload.get(9 + header_len..)?;
    let pts = if flags & 0x80 != 0 {
        let b = payload.get(9..14)?;
        Some(
            (u64::from(b[0] >> 1) & 0x7) << 30
                | u64::from(b[1]) << 22
                | u64::from(b[2] >> 1) << 15
                | u64::from(b[3]) << 7
                | u64::from(b[4] >> 1),
        )
    } else {
        None
    };
    Some((pts, es))
}

/// Whether the Annex B bytes `es` hold an IDR slice (H.264 NAL type 5) or an IRAP picture
/// (HEVC types 16 to 21) among the NAL units that start in them.
fn has_key_nal(es: &[u8], codec: Codec) -> bool {
    es.windows(4).any(|w| {
        if w[..3] != [0, 0, 1] {
            return false;
        }
        match codec {
            Codec::H264 => w[3] & 0x1f == 5,
            Codec::Hevc => (16..=21).contains(&((w[3] >> 1) & 0x3f)),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One TS packet of `pid` with `payload` (stuffed with an adaptation field to 188
    /// bytes), the unit-start flag and the random-access indicator as given.
    pub(crate) fn packet(pid: u16, start: bool, rai: bool, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0x47, (u8::from(start) << 6) | (pid >> 8) as u8, pid as u8];
        let room = TS_PACKET - 4;
        assert!(payload.len() <= room - 2 || (payload.len() == room && !rai));
        if payload.len() == room {
            p.push(0x10);
        } else {
            let af = room - payload.len() - 1;
            p.push(0x30);
            p.push(af as u8);
            if af > 0 {
                p.push(if rai { 0x40 } else { 0 });
                p.extend(std::iter::repeat_n(0xff, af - 1));
            }
        }
        p.extend_from_slice(payload);
        assert_eq!(p.len(), TS_PACKET);
        p
    }

    fn with_crc(mut s: Vec<u8>) -> Vec<u8> {
        s.extend_from_slice(&[0, 0, 0, 0]);
        let mut payload = vec![0];
        payload.append(&mut s);
        payload
    }

    pub(crate) fn pat(pmt_pid: u16) -> Vec<u8> {
        let s = vec![0x00, 0xb0, 13, 0, 1, 0xc1, 0, 0, 0, 1, 0xe0 | (pmt_pid >> 8) as u8, pmt_pid as u8];
        packet(0, true, false, &with_crc(s))
    }

    pub(crate) fn pmt(pmt_pid: u16, video_pid: u16, stream_type: u8) -> Vec<u8> {
        let s = vec![
            0x02,
            0xb0,
            18,
            0,
            1,
            0xc1,
            0,
            0,
            0xe0 | (video_pid >> 8) as u8,
            video_pid as u8,
            0xf0,
            0,
            stream_type,
            0xe0 | (video_pid >> 8) as u8,
            video_pid as u8,
            0xf0,
            0,
        ];
        packet(pmt_pid, true, false, &with_crc(s))
    }

    /// A PES start with PTS `pts` and the NAL unit header `nal`.
    pub(crate) fn pes(pts: u64, nal: u8) -> Vec<u8> {
        let b = [
            0x21 | ((pts >> 29) & 0x0e) as u8,
            (pts >> 22) as u8,
            0x01 | ((pts >> 14) & 0xfe) as u8,
            (pts >> 7) as u8,
            0x01 | ((pts << 1) & 0xfe) as u8,
        ];
        let mut v = vec![0, 0, 1, 0xe0, 0, 0, 0x80, 0x80, 5];
        v.extend_from_slice(&b);
        v.extend_from_slice(&[0, 0, 0, 1, nal, 0x88, 0x84]);
        v
    }

    #[test]
    fn units_come_whole_with_their_pts_and_keys_in_any_chunking() {
        let mut stream = [pat(0x1000), pmt(0x1000, 0x100, 0x1b)].concat();
        // An IDR flagged by the random-access indicator, a P picture of two packets, an
        // IDR seen only by its NAL type (5), and a non-IDR slice (1).
        stream.extend(packet(0x100, true, true, &pes(90_000, 0x65)));
        stream.extend(packet(0x100, true, false, &pes(93_000, 0x41)));
        stream.extend(packet(0x100, false, false, &[0xab; 100]));
        stream.extend(packet(0x11, true, false, &[1, 2, 3])); // another PID: ignored
        stream.extend(packet(0x100, true, false, &pes(96_000, 0x65)));
        stream.extend(packet(0x100, true, false, &pes((1 << 33) - 1, 0x01)));
        for chunk in [1, 7, 188, 200, 4096] {
            let mut s = TsSplitter::new();
            let mut out = vec![];
            for c in stream.chunks(chunk) {
                s.push(c, &mut out);
            }
            out.extend(s.finish());
            let got: Vec<(Option<u64>, bool, usize)> = out.iter().map(|a| (a.pts, a.key, a.bytes.len())).collect();
            assert_eq!(
                got,
                [
                    (Some(90_000), true, 188),
                    (Some(93_000), false, 376),
                    (Some(96_000), true, 188),
                    (Some((1 << 33) - 1), false, 188)
                ],
                "chunks of {chunk}"
            );
            assert_eq!(s.codec(), Some(Codec::H264));
            assert_eq!(s.tables().unwrap().len(), 2 * TS_PACKET);
            assert_eq!(s.counters, TsCounters { units: 4, ..Default::default() });
        }
    }

    #[test]
    fn hevc_irap_pictures_are_keys() {
        let mut s = TsSplitter::new();
        let mut out = vec![];
        let mut stream = [pat(0x20), pmt(0x20, 0x101, 0x24)].concat();
        // CRA (21 << 1 = 0x2a), TRAIL_R (1 << 1 = 0x02), IDR_W_RADL (19 << 1 = 0x26).
        for (pts, nal) in [(0, 0x2a), (3000, 0x02), (6000, 0x26)] {
            stream.extend(packet(0x101, true, false, &pes(pts, nal)));
        }
        s.push(&stream, &mut out);
        out.extend(s.finish());
        assert_eq!(s.codec(), Some(Codec::Hevc));
        assert_eq!(out.iter().map(|a| a.key).collect::<Vec<_>>(), [true, false, true]);
    }

    #[test]
    fn garbage_and_hostile_packets_are_counted_never_a_panic() {
        let mut s = TsSplitter::new();
        let mut out = vec![];
        s.push(&[0u8; 1000], &mut out);
        assert_eq!(s.counters.resync_bytes, 1000);
        // A PAT whose section length runs past the packet, an adaptation field longer than
        // the packet, a transport error.
        let mut bad_pat = pat(0x1000);
        // Its 17-byte payload ends the packet: pointer, table id, then the length's high bits.
        bad_pat[TS_PACKET - 17 + 2] = 0xbf;
        let mut bad_af = packet(0x100, true, true, &[0; 10]);
        bad_af[4] = 200;
        let mut error = packet(0x100, true, false, &[0; 10]);
        error[1] |= 0x80;
        s.push(&[bad_pat, bad_af, error].concat(), &mut out);
        assert_eq!(s.counters.bad_packets, 3);
        assert!(out.is_empty() && s.tables().is_none());
        // Every byte pattern, through every path, never panics.
        let mut x = 12345u32;
        let noise: Vec<u8> = (0..188 * 400)
            .map(|i| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                if i % 188 == 0 {
                    0x47
                } else {
                    (x >> 16) as u8
                }
            })
            .collect();
        s.push(&noise, &mut out);
        s.finish();
    }

    #[test]
    fn an_access_unit_over_the_bound_is_dropped_and_counted() {
        let mut s = TsSplitter::new();
        let mut out = vec![];
        s.push(&[pat(0x1000), pmt(0x1000, 0x100, 0x1b)].concat(), &mut out);
        s.push(&packet(0x100, true, true, &pes(0, 0x65)), &mut out);
        let cont = packet(0x100, false, false, &[0; TS_PACKET - 4]);
        for _ in 0..MAX_ACCESS_UNIT / TS_PACKET + 2 {
            s.push(&cont, &mut out);
        }
        s.push(&packet(0x100, true, false, &pes(3000, 0x41)), &mut out);
        out.extend(s.finish());
        assert_eq!(s.counters.oversized, 1);
        assert_eq!(out.iter().map(|a| a.pts).collect::<Vec<_>>(), [Some(3000)]);
    }
}

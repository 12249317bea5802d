//! Tests of the JPEG scanner and splitter, the MPP layout and the CPU decode.

use super::*;

/// A tiny hand-made JPEG-shaped byte string: SOI, APP1 holding a whole thumbnail JPEG
/// (SOI..EOI inside the segment), SOS with entropy data holding stuffing, RST and fill.
fn fake_jpeg(tag: u8) -> Vec<u8> {
    let thumb = [0xFF, 0xD8, 0xFF, 0xD9];
    let mut v = vec![0xFF, 0xD8, 0xFF, 0xE1, 0x00, (2 + thumb.len()) as u8];
    v.extend(thumb);
    v.extend([0xFF, 0xDB, 0x00, 0x03, tag]);
    v.extend([0xFF, 0xDA, 0x00, 0x02, 1, 2, 0xFF, 0x00, 3, 0xFF, 0xD3, 4, 0xFF, 0xFF, 0xD9]);
    v
}

/// A reader that gives at most `.1` bytes at a time.
struct Trickle(std::io::Cursor<Vec<u8>>, usize);
impl Read for Trickle {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.1);
        self.0.read(&mut buf[..n])
    }
}

#[test]
fn scan_skips_a_thumbnail_in_app1_and_stuffing_in_the_scan() {
    let j = fake_jpeg(7);
    assert_eq!(scan_jpeg(&j), Scan::Complete(j.len()));
    for cut in 1..j.len() {
        assert_eq!(scan_jpeg(&j[..cut]), Scan::NeedMore, "cut at {cut}");
    }
    // A new SOI in the entropy data before EOI: the first JPEG is truncated there.
    let mut t = j[..j.len() - 2].to_vec();
    let at = t.len();
    t.extend(fake_jpeg(8));
    assert_eq!(scan_jpeg(&t), Scan::Truncated(at));
}

#[test]
fn splitter_cuts_whole_jpegs_from_chunks_and_skips_garbage() {
    let (a, b) = (fake_jpeg(1), fake_jpeg(2));
    let mut stream = vec![0x00, 0x11, 0xFF];
    stream.extend(&a);
    stream.extend([0x42; 5]);
    stream.extend(&b);
    stream.extend(&a[..9]);
    let mut s = JpegSplitter::new(Trickle(std::io::Cursor::new(stream), 3));
    assert_eq!(s.next_jpeg().unwrap(), Some(Piece::Whole(a.clone())));
    assert_eq!(s.next_jpeg().unwrap(), Some(Piece::Whole(b)));
    assert_eq!(s.next_jpeg().unwrap(), Some(Piece::Truncated(a[..9].to_vec())));
    assert_eq!(s.next_jpeg().unwrap(), None);
    assert_eq!(s.skipped_bytes, 3 + 5);
}

#[test]
fn a_scan_resumed_byte_by_byte_ends_where_a_whole_scan_does() {
    let j = fake_jpeg(5);
    let mut st = ScanState::default();
    let mut last = 0;
    for cut in 2..j.len() {
        assert_eq!(scan_jpeg_from(&j[..cut], &mut st), Scan::NeedMore, "cut at {cut}");
        // The scan goes on from where it stopped, never back.
        assert!(st.pos >= last, "cut at {cut}: {st:?} after {last}");
        last = st.pos;
    }
    assert!(last >= j.len() - 3, "the scan reached the EOI's neighbourhood: {last} of {}", j.len());
    assert_eq!(scan_jpeg_from(&j, &mut st), Scan::Complete(j.len()));
}

#[test]
fn a_jpeg_cut_inside_a_segment_header_does_not_swallow_the_next_ones() {
    // SOI, APP1 whose length (0x40) runs past the next two JPEGs' SOIs and lands on the
    // third's EOI byte D9 (not a marker): the cut JPEG ends at the next SOI.
    let cut = [0xFF, 0xD8, 0xFF, 0xE1, 0x00, 0x40, 1, 2, 3];
    let (b, c) = (fake_jpeg(2), fake_jpeg(3));
    let mut stream = cut.to_vec();
    stream.extend(&b);
    stream.extend(&c);
    assert_eq!(stream[2 + 2 + 0x40], 0xD9);
    assert_eq!(scan_jpeg(&stream), Scan::Truncated(cut.len()));
    let mut s = JpegSplitter::new(Trickle(std::io::Cursor::new(stream), 5));
    assert_eq!(s.next_jpeg().unwrap(), Some(Piece::Truncated(cut.to_vec())));
    assert_eq!(s.next_jpeg().unwrap(), Some(Piece::Whole(b)));
    assert_eq!(s.next_jpeg().unwrap(), Some(Piece::Whole(c)));
    assert_eq!(s.next_jpeg().unwrap(), None);
}

#[test]
fn mpp_layout_takes_the_decoders_strides() {
    let mut f = FrameInfo {
        width: 1920,
        height: 1080,
        hor_stride: 1920,
        ver_stride: 1088,
        fmt: MPP_FMT_YUV420SP,
        info_change: false,
        eos: false,
        errinfo: 0,
        discard: 0,
        pts: 0,
        buf_size: 0,
        fd: Some(3),
        buffer_index: None,
    };
    let l = mpp_layout(&f).unwrap();
    assert_eq!((l.fourcc, l.width, l.height), (Fourcc::NV12, 1920, 1080));
    assert_eq!((l.planes[1].offset, l.planes[1].bytesperline, l.planes[1].length), (1920 * 1088, 1920, 1920 * 544));
    assert_eq!(l.validate(&[mpp_buffer_bytes(1920, 1080)]), Ok(()));
    f.fmt = MPP_FMT_YUV422SP;
    let l = mpp_layout(&f).unwrap();
    assert_eq!((l.fourcc, l.planes[1].length), (Fourcc::NV16, 1920 * 1088));
    assert_eq!(l.validate(&[mpp_buffer_bytes(1920, 1080)]), Ok(()));
    f.fmt = 1; // YUV420SP_10BIT
    assert!(mpp_layout(&f).unwrap_err().to_string().contains("0x1"));
    f.fmt = MPP_FMT_YUV420SP;
    f.hor_stride = 1900;
    assert!(mpp_layout(&f).is_err());
}

#[test]
fn cpu_decode_writes_nv12_at_an_aligned_stride() {
    // A 30x20 JPEG of a flat colour made with the image crate (full-range JFIF).
    let img = ::image::RgbImage::from_pixel(30, 20, ::image::Rgb([200, 40, 40]));
    let mut jpeg = Vec::new();
    ::image::codecs::jpeg::JpegEncoder::new_with_quality(&mut jpeg, 95).encode_image(&img).unwrap();
    let mut dst = vec![0u8; 32 * 20 * 3 / 2];
    let l = decode_cpu(&jpeg, &mut dst, &mut Vec::new(), (64, 64)).unwrap();
    assert_eq!((l.width, l.height, l.planes[0].bytesperline, l.planes[1].offset), (30, 20, 32, 32 * 20));
    // BT.601 full range (JFIF) of (200, 40, 40): Y 88, Cb 101, Cr 208 (within JPEG's loss).
    let (y, cb, cr) = (dst[5 * 32 + 7] as i32, dst[32 * 20 + 32 * 3 + 8] as i32, dst[32 * 20 + 32 * 3 + 9] as i32);
    assert!((y - 88).abs() <= 3 && (cb - 101).abs() <= 3 && (cr - 208).abs() <= 3, "{y} {cb} {cr}");
    // Bigger than the pool allows, or corrupt: errors.
    assert!(decode_cpu(&jpeg, &mut dst, &mut Vec::new(), (16, 16)).is_err());
    assert!(decode_cpu(&jpeg[..jpeg.len() / 2], &mut dst, &mut Vec::new(), (64, 64)).is_err());
}

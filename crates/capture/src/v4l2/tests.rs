use super::*;
use zcpipe_core::frame::{Fourcc, PlaneDesc};

fn granted(fourcc: Fourcc, w: u32, h: u32, planes: Vec<(u32, u32)>) -> Granted {
    Granted { fourcc, width: w, height: h, planes, interval: sys::Fract { numerator: 1, denominator: 30 } }
}

#[test]
fn nv12_single_buffer_layout_comes_from_bytesperline() {
    // A driver padding rows to 704 bytes and the buffer to 1088 lines' worth.
    let l = granted(Fourcc::NV12, 640, 480, vec![(704, 704 * 1088 * 3 / 2)]).layout().unwrap();
    assert_eq!(l.num_planes, 2);
    assert_eq!(l.planes[0], PlaneDesc { offset: 0, bytesperline: 704, length: 704 * 480, fd_index: 0 });
    assert_eq!(l.planes[1].offset, 704 * 480);
    assert_eq!(l.planes[1].bytesperline, 704);
    assert_eq!(l.planes[1].fd_index, 0);
    assert_eq!(l.planes[1].offset + l.planes[1].length, 704 * 1088 * 3 / 2);
    assert!(granted(Fourcc::NV12, 640, 480, vec![(640, 640 * 480)]).layout().is_err(), "sizeimage too small");
}

#[test]
fn nv12m_has_a_buffer_per_plane_and_packed_formats_one() {
    let l = granted(Fourcc::NV12M, 1280, 720, vec![(1280, 1280 * 720), (1280, 1280 * 360)]).layout().unwrap();
    assert_eq!((l.planes[0].fd_index, l.planes[1].fd_index), (0, 1));
    assert_eq!((l.planes[0].offset, l.planes[1].offset), (0, 0));
    assert_eq!(l.planes[1].length, 1280 * 360);
    let y = granted(Fourcc::YUYV, 640, 480, vec![(1280, 1280 * 480)]).layout().unwrap();
    assert_eq!((y.num_planes, y.planes[0].bytesperline, y.planes[0].length), (1, 1280, 1280 * 480));
    let n16 = granted(Fourcc::NV16, 64, 48, vec![(64, 64 * 48 * 2)]).layout().unwrap();
    assert_eq!((n16.planes[1].offset, n16.planes[1].length), (64 * 48, 64 * 48));
    assert!(granted(Fourcc::RGB24, 64, 48, vec![(100, 100 * 48)]).layout().is_err(), "bytesperline < 3 x width");
}

#[test]
fn granted_describes_what_the_driver_set() {
    let g = granted(Fourcc::NV12M, 640, 480, vec![(640, 307200), (640, 153600)]);
    assert_eq!(g.describe(), "NV12M 640x480, bytesperline 640+640, sizeimage 307200+153600, 30.00 fps (1/30 s)");
    assert_eq!(g.fps(), 30.0);
}

#[test]
fn format_and_size_flags_parse() {
    assert_eq!(parse_format("nv12m").unwrap(), Fourcc::NV12M);
    assert_eq!(parse_format("RGB24").unwrap(), Fourcc::RGB24);
    // A UVC camera's Motion JPEG, decoded into an NV12 pool (v4l2::mjpg).
    assert_eq!((parse_format("MJPG").unwrap(), parse_format("mjpeg").unwrap()), (Fourcc::MJPG, Fourcc::MJPG));
    let e = parse_format("H264").unwrap_err().to_string();
    assert!(e.contains("NV12, NV12M, NV16, YUYV, RGB24, BGR24") && e.contains("MJPG"), "{e}");
    assert_eq!(parse_size("1280x720").unwrap(), (1280, 720));
    assert!(parse_size("1280").is_err() && parse_size("0x5").is_err() && parse_size("ax5").is_err());
}

#[test]
fn sequence_gaps_are_driver_drops() {
    let mut c = SequenceCounter::default();
    let ext: Vec<u64> = [5, 6, 7, 10, 11].into_iter().map(|q| c.see(q)).collect();
    assert_eq!(ext, [5, 6, 7, 10, 11]);
    assert_eq!((c.first, c.last, c.drops), (Some(5), Some(11), 2));
    let mut w = SequenceCounter::default();
    w.see(u32::MAX - 1);
    assert_eq!(w.see(1), u32::MAX as u64 + 2, "wraps extend the sequence");
    assert_eq!(w.drops, 2, "u32::MAX and 0 were skipped");
    let mut r = SequenceCounter::default();
    let ext: Vec<u64> = [0, 0, 1, 3].into_iter().map(|q| r.see(q)).collect();
    assert_eq!(ext, [0, 1, 2, 4], "a repeated number still gives an increasing frame number");
    assert_eq!((r.repeats, r.drops), (1, 1));
}

#[test]
fn missing_node_is_one_clear_line() {
    let cfg = V4l2Config { device: Some("/dev/video-zcpipe-none".into()), buffers: 4, ..Default::default() };
    let e = V4l2Capture::open(&cfg).unwrap_err().to_string();
    assert!(e.contains("/dev/video-zcpipe-none does not exist") && e.contains("zcpipe doctor"), "{e}");
    assert!(!e.contains('\n'), "{e}");
    let cfg = V4l2Config { device: Some("/dev/null".into()), buffers: 4, ..Default::default() };
    let e = V4l2Capture::open(&cfg).unwrap_err().to_string();
    assert!(e.contains("/dev/null is not a V4L2 device"), "{e}");
}

#[test]
fn mjpg_is_compressed_one_jpeg_of_up_to_sizeimage_bytes() {
    // A UVC camera at 1080p: bytesperline 0, sizeimage its largest JPEG.
    let l = granted(Fourcc::MJPG, 1920, 1080, vec![(0, 4_147_789)]).layout().unwrap();
    assert_eq!((l.fourcc, l.width, l.height, l.num_planes), (Fourcc::MJPG, 1920, 1080, 1));
    assert_eq!(l.planes[0], PlaneDesc { offset: 0, bytesperline: 0, length: 4_147_789, fd_index: 0 });
    assert!(granted(Fourcc::MJPG, 1920, 1080, vec![(0, 0)]).layout().is_err(), "no buffer size");
    assert!(l.validate(&[4_147_789]).is_err(), "never a pixel layout to pass on");
}

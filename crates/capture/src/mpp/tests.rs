//! Tests of the MPP capture's layouts, formats and codecs.

use super::*;

#[test]
fn layout_of_takes_mpps_strides() {
    let i = FrameInfo {
        width: 1920,
        height: 1080,
        hor_stride: 1920,
        ver_stride: 1088,
        fmt: 0,
        info_change: false,
        eos: false,
        errinfo: 0,
        discard: 0,
        pts: 0,
        buf_size: 3133440,
        fd: Some(3),
        buffer_index: Some(0),
    };
    let l = layout_of(&i);
    assert_eq!((l.width, l.height, l.planes[0].bytesperline), (1920, 1080, 1920));
    assert_eq!((l.planes[1].offset, l.planes[1].length), (1920 * 1088, 1920 * 544));
    assert_eq!(l.bytes_needed(), 3133440);
    assert!(check_format(&i, "x").is_ok());
    let ten_bit = FrameInfo { fmt: mpp::MPP_FMT_YUV420SP_10BIT, ..i };
    let e = check_format(&ten_bit, "video:a.mp4").unwrap_err().to_string();
    assert!(e.contains("not 8-bit NV12") && e.contains("--decoder cpu"), "{e}");
    let fbc = FrameInfo { fmt: 0x0010_0000, ..i };
    assert!(check_format(&fbc, "x").is_err());
}

#[test]
fn only_h264_and_hevc_take_this_path() {
    assert_eq!(coding_of("h264"), Some((mpp::MPP_VIDEO_CODING_AVC, "h264")));
    assert_eq!(coding_of("hevc"), Some((mpp::MPP_VIDEO_CODING_HEVC, "hevc")));
    assert_eq!(coding_of("vp9"), None);
}

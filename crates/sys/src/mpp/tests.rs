//! Layout tests of the bound structs against the headers, header values, SOF parsing and the
//! missing-library error.

use super::*;
use std::mem::{align_of, offset_of, size_of};
use std::path::Path;

// Sizes worked out by hand from rk_mpi.h and mpp_buffer.h: LP64 (x86_64, aarch64) has
// 8-byte pointers and size_t; ILP32 (armv7) 4-byte; enums and RK_U32 are 4 bytes.
#[test]
#[cfg(target_pointer_width = "64")]
fn mpp_api_matches_rk_mpi_h() {
    // size 0, version 4, 14 function pointers at 8..120, reserv[16] at 120..184.
    assert_eq!(size_of::<MppApi>(), 184);
    assert_eq!(align_of::<MppApi>(), 8);
    assert_eq!(offset_of!(MppApi, decode), 8);
    assert_eq!(offset_of!(MppApi, decode_put_packet), 16);
    assert_eq!(offset_of!(MppApi, decode_get_frame), 24);
    assert_eq!(offset_of!(MppApi, poll), 80);
    assert_eq!(offset_of!(MppApi, reset), 104);
    assert_eq!(offset_of!(MppApi, control), 112);
    assert_eq!(offset_of!(MppApi, reserv), 120);
}

#[test]
#[cfg(target_pointer_width = "32")]
fn mpp_api_matches_rk_mpi_h() {
    assert_eq!(size_of::<MppApi>(), 128);
    assert_eq!(offset_of!(MppApi, control), 60);
    assert_eq!(offset_of!(MppApi, reserv), 64);
}

#[test]
#[cfg(target_pointer_width = "64")]
fn mpp_buffer_info_matches_mpp_buffer_h() {
    // type 0, (pad), size 8, ptr 16, hnd 24, fd 32, index 36; 40 bytes, 8-aligned.
    assert_eq!(size_of::<MppBufferInfo>(), 40);
    assert_eq!(align_of::<MppBufferInfo>(), 8);
    assert_eq!(
        (offset_of!(MppBufferInfo, size), offset_of!(MppBufferInfo, ptr), offset_of!(MppBufferInfo, hnd)),
        (8, 16, 24)
    );
    assert_eq!((offset_of!(MppBufferInfo, fd), offset_of!(MppBufferInfo, index)), (32, 36));
}

#[test]
#[cfg(target_pointer_width = "32")]
fn mpp_buffer_info_matches_mpp_buffer_h() {
    assert_eq!(size_of::<MppBufferInfo>(), 24);
    assert_eq!((offset_of!(MppBufferInfo, fd), offset_of!(MppBufferInfo, index)), (16, 20));
}

#[test]
fn enum_values_match_headers() {
    assert_eq!((MPP_VIDEO_CODING_AVC, MPP_VIDEO_CODING_MJPEG, MPP_VIDEO_CODING_HEVC), (7, 8, 16777220));
    assert_eq!((MPP_SET_INPUT_TIMEOUT, MPP_SET_OUTPUT_TIMEOUT), (0x200006, 0x200007));
    assert_eq!(
        (MPP_DEC_SET_EXT_BUF_GROUP, MPP_DEC_SET_INFO_CHANGE_READY, MPP_DEC_SET_PARSER_SPLIT_MODE),
        (0x310002, 0x310003, 0x310005)
    );
    assert_eq!((MPP_DEC_SET_OUTPUT_FORMAT, MPP_DEC_SET_IMMEDIATE_OUT), (0x31000a, 0x31000c));
    assert_eq!((MPP_BUFFER_TYPE_ION, MPP_BUFFER_TYPE_EXT_DMA, MPP_BUFFER_TYPE_DRM, MPP_BUFFER_EXTERNAL), (1, 2, 3, 1));
    assert_eq!((MPP_ERR_BUFFER_FULL, MPP_ERR_TIMEOUT, MPP_ERR_INIT), (-1012, -8, -1002));
    assert_eq!(ret_name(MPP_ERR_BUFFER_FULL), "MPP_ERR_BUFFER_FULL");
    assert_eq!(coding_name(MPP_VIDEO_CODING_HEVC), Some("H.265"));
}

#[test]
fn task_api_values_match_mpp_task_h_and_mpp_meta_h() {
    // FOURCC_META('i','p','k','t') and ('o','f','r','m'), worked out by hand.
    assert_eq!((KEY_INPUT_PACKET, KEY_OUTPUT_FRAME), (0x6970_6b74, 0x6f66_726d));
    assert_eq!((MPP_PORT_INPUT, MPP_PORT_OUTPUT), (0, 1));
    assert_eq!((MPP_FMT_YUV420SP, MPP_FMT_YUV422SP, MPP_BUFFER_INTERNAL), (0, 2, 0));
    // poll/dequeue/enqueue keep their places in MppApi (after isp_get_frame).
    #[cfg(target_pointer_width = "64")]
    assert_eq!((offset_of!(MppApi, poll), offset_of!(MppApi, dequeue), offset_of!(MppApi, enqueue)), (80, 88, 96));
    #[cfg(target_pointer_width = "32")]
    assert_eq!((offset_of!(MppApi, poll), offset_of!(MppApi, dequeue), offset_of!(MppApi, enqueue)), (44, 48, 52));
    assert!(MJPEG_REFUSED.contains("MppJpeg") && !MJPEG_REFUSED.contains('\n'));
}

#[test]
fn jpeg_sof_reads_size_and_sampling_past_other_segments() {
    // SOI, APP0 (len 4), fill FF, SOF0 (len 17): 8-bit, 1080 lines, 1920 px, 3 components.
    let sof = |y: u8, nf: u8| {
        let mut v = vec![
            0xFF,
            0xD8,
            0xFF,
            0xE0,
            0x00,
            0x04,
            9,
            9,
            0xFF,
            0xFF,
            0xC0,
            0x00,
            8 + 3 * nf,
            8,
            0x04,
            0x38,
            0x07,
            0x80,
            nf,
        ];
        for k in 0..nf {
            v.extend([k + 1, if k == 0 { y } else { 0x11 }, 0]);
        }
        v.extend([0xFF, 0xDA, 0x00, 0x02]);
        v
    };
    let s = jpeg_sof(&sof(0x22, 3)).unwrap();
    assert_eq!(
        (s.marker, s.width, s.height, s.components, s.sampling),
        (0xC0, 1920, 1080, 3, [(2, 2), (1, 1), (1, 1)])
    );
    assert!(s.mpp_fit());
    assert_eq!(s.mpp_output_bytes(), 1920 * 1088 * 2);
    assert!(jpeg_sof(&sof(0x21, 3)).unwrap().mpp_fit(), "4:2:2");
    for (y, nf) in [(0x11, 3), (0x12, 3), (0x41, 3), (0x11, 1), (0x44, 3)] {
        assert!(!jpeg_sof(&sof(y, nf)).unwrap().mpp_fit(), "Y {y:#x}, {nf} components: the CPU's");
    }
    // No components, cut short, or SOS first: no frame header.
    assert_eq!(jpeg_sof(&sof(0x22, 0)), None);
    assert_eq!(jpeg_sof(&sof(0x22, 3)[..20]), None);
    assert_eq!(jpeg_sof(&[0xFF, 0xD8, 0xFF, 0xDA, 0x00, 0x02]), None);
}

#[test]
fn missing_library_is_a_clear_error() {
    let e = Libmpp::open(Some(Path::new("/nonexistent/librockchip_mpp.so"))).unwrap_err().to_string();
    assert!(e.contains("/nonexistent/librockchip_mpp.so") && e.contains(LIBMPP_ENV), "{e}");
    assert!(!e.contains('\n'), "{e}");
}

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
fn encoder_values_match_rk_mpi_cmd_h_rk_venc_cmd_h_rk_venc_rc_h_and_mpp_meta_h() {
    // MPP_ENC_CMD_BASE = CMD_MODULE_CODEC | CMD_CTX_ID_ENC = 0x320000: SET_CFG + 1, GET_CFG + 2,
    // SET_IDR_FRAME + 9; MPP_ENC_CFG_MISC = 0x320000 | CMD_ENC_CFG_MISC (0x8000): HEADER_MODE + 1.
    assert_eq!((MPP_ENC_SET_CFG, MPP_ENC_GET_CFG, MPP_ENC_SET_IDR_FRAME), (0x320001, 0x320002, 0x320009));
    assert_eq!(MPP_ENC_SET_HEADER_MODE, 0x328001);
    assert_eq!((MPP_ENC_HEADER_MODE_DEFAULT, MPP_ENC_HEADER_MODE_EACH_IDR), (0, 1));
    assert_eq!((MPP_ENC_RC_MODE_VBR, MPP_ENC_RC_MODE_CBR, MPP_ENC_RC_MODE_FIXQP, MPP_ENC_RC_MODE_AVBR), (0, 1, 2, 3));
    assert_eq!(MPP_ENC_RC_DROP_FRM_DISABLED, 0);
    // SZ_1K and SZ_1M * 200 (osal's mpp_common.h).
    assert_eq!((MPP_ENC_MIN_BPS, MPP_ENC_MAX_BPS), (1024, 209_715_200));
    // FOURCC_META('o','i','d','r'), worked out by hand.
    assert_eq!(KEY_OUTPUT_INTRA, 0x6f69_6472);
    // encode_put_frame and encode_get_packet: the 5th and 6th function pointers after the two
    // RK_U32 (a nullable fn pointer is a plain pointer).
    assert_eq!(size_of::<Option<unsafe extern "C" fn(MppHandle, MppHandle) -> MppRet>>(), size_of::<*const u8>());
    #[cfg(target_pointer_width = "64")]
    assert_eq!((offset_of!(MppApi, encode_put_frame), offset_of!(MppApi, encode_get_packet)), (40, 48));
    #[cfg(target_pointer_width = "32")]
    assert_eq!((offset_of!(MppApi, encode_put_frame), offset_of!(MppApi, encode_get_packet)), (24, 28));
}

fn enc_opts() -> EncoderOptions {
    EncoderOptions { width: 320, height: 240, hor_stride: 336, ver_stride: 240, fps: 30, gop: 10, bitrate: 1_000_000 }
}

#[test]
fn encoder_options_make_mpi_enc_tests_configuration() {
    let o = enc_opts();
    assert_eq!(o.frame_bytes(), 336 * 240 * 3 / 2);
    let cfg = o.cfg();
    let get = |k: &str| cfg.iter().find(|(n, _)| n.to_str() == Ok(k)).map(|(_, v)| *v);
    assert_eq!((get("prep:width"), get("prep:hor_stride"), get("prep:ver_stride")), (Some(320), Some(336), Some(240)));
    assert_eq!((get("prep:format"), get("rc:mode"), get("rc:gop")), (Some(0), Some(MPP_ENC_RC_MODE_CBR), Some(10)));
    // CBR's narrow bound, as mpi_enc_test.c: 15/16 and 17/16 of the target.
    assert_eq!(
        (get("rc:bps_min"), get("rc:bps_target"), get("rc:bps_max")),
        (Some(937_500), Some(1_000_000), Some(1_062_500))
    );
    assert_eq!((get("rc:fps_in_num"), get("rc:fps_out_num"), get("rc:fps_out_denom")), (Some(30), Some(30), Some(1)));
    assert_eq!((get("codec:type"), get("h264:profile"), get("h264:level")), (Some(7), Some(100), Some(40)));
    assert!(o.check().is_ok());
    for (bad, what) in [
        (EncoderOptions { hor_stride: 318, ..o }, "strides"),
        (EncoderOptions { ver_stride: 200, ..o }, "strides"),
        (EncoderOptions { width: 0, ..o }, "size"),
        (EncoderOptions { width: 321, ..o }, "even"),
        (EncoderOptions { fps: 0, ..o }, "fps"),
        (EncoderOptions { gop: 0, ..o }, "gop"),
        (EncoderOptions { bitrate: 100, ..o }, "bit rate"),
    ] {
        let e = bad.check().unwrap_err().to_string();
        assert!(e.contains(what) && !e.contains('\n'), "{what}: {e}");
    }
}

#[test]
fn idr_slices_are_found_in_annex_b() {
    // SPS (7), PPS (8), IDR slice (0x65: type 5), with 4- and 3-byte start codes.
    assert!(h264_has_idr(&[0, 0, 0, 1, 0x67, 1, 2, 0, 0, 1, 0x68, 3, 0, 0, 1, 0x65, 0x88]));
    // A non-IDR slice (0x41: type 1), and bytes that only look like a type-5 header.
    assert!(!h264_has_idr(&[0, 0, 0, 1, 0x41, 0x9a, 0x05, 0x65]));
    assert!(!h264_has_idr(&[]));
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

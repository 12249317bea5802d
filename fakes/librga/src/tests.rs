//! Layout tests of the exported structs against `im2d_type.h` / `rga.h`, and the fake's own
//! checks.

use super::buffers::wrap;
use super::job::convert;
use super::*;

use std::mem::{offset_of, size_of};

#[test]
fn layouts_match_im2d_type_h() {
    assert_eq!(size_of::<RgaBuffer>(), 96);
    assert_eq!(offset_of!(RgaBuffer, fd), 16);
    assert_eq!(offset_of!(RgaBuffer, format), 36);
    assert_eq!(offset_of!(RgaBuffer, colorkey_range), 56);
    assert_eq!(offset_of!(RgaBuffer, handle), 92);
    assert_eq!(size_of::<ImRect>(), 16);
    assert_eq!(size_of::<ImHandleParam>(), 12);
}

#[test]
fn yuv_stride_rule() {
    let b = wrap(640, 480, 650, 480, 0xa00);
    let e = check(
        &b,
        &wrap(416, 312, 416, 416, 0x700),
        &RgaBuffer::zeroed(),
        &ImRect::default(),
        &ImRect { x: 0, y: 0, width: 416, height: 312 },
        0,
    )
    .unwrap_err();
    assert_eq!(e.0, IM_STATUS_NOT_SUPPORTED);
    assert!(e.1.contains("should be 16 aligned"), "{}", e.1);
}

#[test]
fn grey_converts_to_grey() {
    // 4x2 NV12 of Y=126 Cb=Cr=128 -> RGB 128 everywhere.
    let mut s = vec![126u8; 16 * 2 + 16];
    s[32..].fill(128);
    let mut d = vec![0u8; 4 * 2 * 3];
    convert(
        &s,
        Kind::Nv12,
        16,
        2,
        ImRect { x: 0, y: 0, width: 4, height: 2 },
        &mut d,
        Kind::Bgr,
        4,
        ImRect { x: 0, y: 0, width: 4, height: 2 },
    );
    assert!(d.iter().all(|&v| v == 128), "{d:?}");
}

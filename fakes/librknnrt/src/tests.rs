//! Layout tests of the exported structs against `rknn_api.h`, and the fake's own checks.

use super::outputs::encode;
use super::*;

use std::mem::{offset_of, size_of};

#[test]
fn layouts_match_rknn_api_h() {
    assert_eq!(size_of::<InputOutputNum>(), 8);
    assert_eq!(size_of::<TensorAttr>(), 376);
    assert_eq!((offset_of!(TensorAttr, name), offset_of!(TensorAttr, fl), offset_of!(TensorAttr, zp)), (72, 348, 352));
    assert_eq!(
        (offset_of!(TensorAttr, w_stride), offset_of!(TensorAttr, pass_through), offset_of!(TensorAttr, h_stride)),
        (360, 368, 372)
    );
    assert_eq!(size_of::<SdkVersion>(), 512);
    assert_eq!(size_of::<TensorMem>(), 40);
    assert_eq!(
        (offset_of!(TensorMem, fd), offset_of!(TensorMem, size), offset_of!(TensorMem, priv_data)),
        (16, 24, 32)
    );
    assert_eq!(size_of::<Input>(), 32);
    assert_eq!((offset_of!(Input, buf), offset_of!(Input, type_), offset_of!(Input, fmt)), (8, 24, 28));
    assert_eq!(size_of::<Output>(), 24);
    assert_eq!((offset_of!(Output, index), offset_of!(Output, buf), offset_of!(Output, size)), (4, 8, 16));
    assert_eq!(DMA_BUF_IOCTL_SYNC, 0x4008_6200);
}

fn output(scale: f32, zp: i32) -> NetOutput {
    NetOutput { name: "out".into(), dims: vec![1, 5], scale, zp }
}

#[test]
fn int8_encoding_round_trips_within_half_a_step() {
    let v = [0.0f32, 0.5, -0.7, 1.0, 3.2];
    let o = output(INT8_SCALE, INT8_ZP);
    let q = encode(&v, OutType::I8, &o, false);
    assert_eq!(q[0] as i8, -31);
    let f = encode(&v, OutType::I8, &o, true);
    for (i, x) in v.iter().enumerate() {
        let back = f32::from_le_bytes([f[4 * i], f[4 * i + 1], f[4 * i + 2], f[4 * i + 3]]);
        assert!((back - x).abs() <= INT8_SCALE / 2.0 + 1e-6, "{x} -> {back}");
    }
}

#[test]
fn int8_encoding_uses_the_outputs_own_scale_and_zero_point_rounding_half_to_even() {
    // 1.25 / 0.5 = 2.5 -> 2, 1.75 / 0.5 = 3.5 -> 4 (numpy's np.round), then + zp 3;
    // out of range clamps.
    let q = encode(&[1.25, 1.75, -100.0, 100.0], OutType::I8, &output(0.5, 3), false);
    assert_eq!(q.iter().map(|&b| b as i8).collect::<Vec<_>>(), [5, 7, -128, 127]);
}

//! Frame descriptors: the bytes of one ring slot a producer wrote (untrusted), checked
//! against the pool the offer announced ([`FrameDesc::validate`], what
//! `PoolConsumer::recv` calls before lending a frame).
//!
//! Input: 192 bytes of descriptor, as in the ring slot (`FrameDesc` is plain data, so any
//! bytes are a descriptor), then the pool: a byte for the number of buffers (1..=8) and,
//! for each buffer, a byte for its number of dma-bufs (1..=3) and 8 bytes (little-endian)
//! for each dma-buf's size; missing bytes read as 0. Invariant: the validator accepts
//! exactly the descriptors that name a buffer of the pool, a known format with its planes
//! and a size in 1..=16384, and planes whose every row lies inside their dma-buf and whose
//! length covers their rows (the row sizes of each V4L2 format are stated here
//! independently). So an accepted descriptor never leads a consumer outside a buffer.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcpipe_core::frame::{Fourcc, FrameDesc};

/// Bytes of a descriptor in a ring slot.
const DESC: usize = std::mem::size_of::<FrameDesc>();

fuzz_target!(|data: &[u8]| {
    if data.len() < DESC {
        return;
    }
    let desc: FrameDesc = bytemuck::pod_read_unaligned(&data[..DESC]);
    let mut rest = data[DESC..].iter().copied();
    let mut byte = || rest.next().unwrap_or(0);
    let n_bufs = 1 + byte() as usize % 8;
    let pool: Vec<Vec<u64>> = (0..n_bufs)
        .map(|_| {
            let n_fds = 1 + byte() as usize % 3;
            (0..n_fds).map(|_| u64::from_le_bytes(std::array::from_fn(|_| byte()))).collect()
        })
        .collect();
    let verdict = desc.validate(&pool);
    assert_eq!(verdict.is_ok(), expected(&desc, &pool), "validate gave {verdict:?} for {desc:?} in pool {pool:?}");
});

/// Whether `d` may be used with `pool`, stated from the V4L2 formats.
fn expected(d: &FrameDesc, pool: &[Vec<u64>]) -> bool {
    let Some(sizes) = pool.get(d.buffer_index as usize) else { return false };
    let l = &d.layout;
    let (w, h) = (l.width as u128, l.height as u128);
    if !(1..=16384).contains(&w) || !(1..=16384).contains(&h) {
        return false;
    }
    let even_w = w.div_ceil(2) * 2;
    // (bytes of pixels in a row, rows) of each plane.
    let planes: &[(u128, u128)] = match l.fourcc {
        Fourcc::NV12 | Fourcc::NV12M => &[(w, h), (even_w, h.div_ceil(2))],
        Fourcc::NV16 => &[(w, h), (even_w, h)],
        Fourcc::YUYV => &[(even_w * 2, h)],
        Fourcc::RGB24 | Fourcc::BGR24 => &[(w * 3, h)],
        // V4L2_PIX_FMT_XBGR32 (`XR24`, DRM_FORMAT_XRGB8888's bytes): 4 bytes a pixel, one plane.
        Fourcc::XR24 => &[(w * 4, h)],
        _ => return false,
    };
    if l.num_planes as usize != planes.len() {
        return false;
    }
    planes.iter().zip(&l.planes).all(|(&(row, rows), p)| {
        let (offset, bpl, length) = (p.offset as u128, p.bytesperline as u128, p.length as u128);
        let last_row_end = offset + (rows - 1) * bpl + row;
        bpl >= row
            && length >= last_row_end - offset
            && sizes
                .get(p.fd_index as usize)
                .is_some_and(|&size| offset + length <= size as u128 && last_row_end <= size as u128)
    })
}

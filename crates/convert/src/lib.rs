//! Pixels converted, for the stages that need the same picture the same way: a still image
//! decoded and turned into NV12 ([`still`]: the capture stage's `image:` source, the
//! inference service's `jpeg` and `png` buffers), and the letterbox into a model's input on
//! the CPU ([`letterbox`]) or on Rockchip's RGA ([`rga`], librga loaded at run time). The
//! scale stage makes its `cpu` and `rga` scalers of them; the inference service brings a
//! client's buffer to the model with them. It opens no socket and no stage's state: the CPU
//! code touches only the slices it is given (the caller maps buffers inside their sync
//! guards), and RGA only the buffers it is handed.

pub mod letterbox;
pub mod rga;
pub mod still;

use anyhow::Result;
use zcpipe_core::frame::FrameLayout;
use zcpipe_core::pool::{Frame, WriteLoan};

/// For converters that map frames: runs `f(source planes' bytes, source layout, output
/// bytes)` with `src` mapped through read guards and the output through a write guard
/// (DMA_BUF_IOCTL_SYNC START on the way in, END on the way out).
pub fn map_frame<T>(
    src: &Frame,
    dst: &mut WriteLoan<'_>,
    f: impl FnOnce(&[&[u8]], &FrameLayout, &mut [u8]) -> Result<T>,
) -> Result<T> {
    let guards = src.read()?;
    let srcs: Vec<&[u8]> = guards.iter().map(|g| g.bytes()).collect();
    let mut out = dst.buffers_mut()[0].write()?;
    f(&srcs, &src.desc().layout, &mut out)
}

/// Fills the letterbox area of a packed 3-byte-per-pixel image with `pad`: the part of
/// each of the first `dh` rows of `dst` (rows of `bpl` bytes, `dw` pixels used) that lies
/// outside the picture `(x, y, w, h)` (`LetterboxParams::picture`). Bytes past `dw * 3`
/// in a row (stride padding) are not touched.
pub fn fill_pad(dst: &mut [u8], bpl: usize, (dw, dh): (usize, usize), (x, y, w, h): (u32, u32, u32, u32), pad: u8) {
    let (x, y, w, h) = (x as usize, y as usize, w as usize, h as usize);
    let row_len = dw * 3;
    for (r, row) in dst.chunks_mut(bpl).take(dh).enumerate() {
        let used = row_len.min(row.len());
        let row = &mut row[..used];
        if (y..y + h).contains(&r) {
            let (left, right) = ((x * 3).min(row.len()), ((x + w) * 3).min(row.len()));
            row[..left].fill(pad);
            row[right..].fill(pad);
        } else {
            row.fill(pad);
        }
    }
}

//! Pixels on the CPU, for the stages that need the same picture the same way: a still image
//! decoded and turned into NV12 ([`still`]: the capture stage's `image:` source, the
//! inference service's `jpeg` and `png` buffers) and the letterbox into a model's input
//! ([`letterbox`]: the scale stage's `cpu` scaler, and the inference service bringing a
//! client's buffer to the model). A pure library: it opens no device or socket and
//! touches only the slices it is given (the caller maps buffers inside their sync guards).

pub mod letterbox;
pub mod still;

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

//! The CPU composition: a frame converted to RGB (through the read guard,
//! [`zcpipe_core::tap::frame_to_rgb`]) and written into an XRGB8888 picture of the mode's
//! size (a DRM dumb buffer), scaled to its place (nearest pixel) with black around it. The
//! path where no plane takes the camera's format or size, where the driver has no
//! atomic modesetting, and in copy mode (the frame is a copy already: it is copied once more,
//! as a plain viewer would).

use super::Rect;
use zcpipe_core::draw::Canvas;

/// Writes `rgb` (tight RGB24 rows of a `size` frame) into `canvas` at `pic` (scaled to it,
/// nearest pixel), every other pixel black; XRGB8888 words (in memory B, G, R, X with X
/// 0xff). A `pic` partly outside the canvas is clipped.
pub(crate) fn rgb_into(rgb: &[u8], size: (u32, u32), canvas: &mut Canvas<'_>, pic: Rect) {
    let (sw, sh) = (size.0 as usize, size.1 as usize);
    if sw == 0 || sh == 0 || rgb.len() < sw * sh * 3 || pic.w == 0 || pic.h == 0 {
        canvas.fill(0, 0, canvas.width as i64, canvas.height as i64, [0, 0, 0]);
        return;
    }
    // Source column of each picture column, computed once.
    let cols: Vec<usize> = (0..pic.w as usize).map(|x| (x * sw / pic.w as usize).min(sw - 1)).collect();
    let (cw, ch) = (canvas.width as usize, canvas.height as usize);
    for y in 0..ch {
        let row = &mut canvas.bytes[y * canvas.pitch..y * canvas.pitch + cw * 4];
        let py = y as i64 - pic.y as i64;
        if py < 0 || py >= pic.h as i64 {
            fill_black(row);
            continue;
        }
        let src = &rgb[(py as usize * sh / pic.h as usize).min(sh - 1) * sw * 3..][..sw * 3];
        let (x0, x1) = ((pic.x as usize).min(cw), (pic.x as usize + pic.w as usize).min(cw));
        fill_black(&mut row[..x0 * 4]);
        for (dst, &sx) in row[x0 * 4..x1 * 4].chunks_exact_mut(4).zip(&cols) {
            dst.copy_from_slice(&[src[sx * 3 + 2], src[sx * 3 + 1], src[sx * 3], 0xff]);
        }
        fill_black(&mut row[x1 * 4..]);
    }
}

fn fill_black(px: &mut [u8]) {
    for p in px.chunks_exact_mut(4) {
        p.copy_from_slice(&[0, 0, 0, 0xff]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_is_letterboxed_into_the_picture_scaled_and_black_around() {
        // A 4x2 frame: left half red, right half blue; shown at (2, 1) in 8x4 (scaled x2) on 12x6.
        let mut rgb = vec![];
        for _ in 0..2 {
            for x in 0..4 {
                rgb.extend_from_slice(if x < 2 { &[255, 0, 0] } else { &[0, 0, 255] });
            }
        }
        let pitch = 12 * 4 + 8;
        let mut bytes = vec![0x55u8; pitch * 6];
        let mut c = Canvas::argb8888(&mut bytes, pitch, 12, 6);
        rgb_into(&rgb, (4, 2), &mut c, Rect { x: 2, y: 1, w: 8, h: 4 });
        let at = |x: usize, y: usize| &bytes[y * pitch + x * 4..y * pitch + x * 4 + 4];
        assert_eq!(at(0, 0), [0, 0, 0, 255], "black outside");
        assert_eq!(at(2, 1), [0, 0, 255, 255], "red, as B G R X");
        assert_eq!(at(5, 4), [0, 0, 255, 255]);
        assert_eq!(at(6, 1), [255, 0, 0, 255], "blue");
        assert_eq!(at(9, 4), [255, 0, 0, 255]);
        assert_eq!(at(10, 2), [0, 0, 0, 255], "black right of the picture");
        assert_eq!(at(3, 5), [0, 0, 0, 255], "black below it");
        assert!(bytes.chunks(pitch).all(|r| r[48..].iter().all(|&b| b == 0x55)), "stride padding untouched");
    }
}

//! Still images: a PNG or JPEG decoded to RGB (upright by its EXIF orientation) and turned
//! into NV12, as the capture stage's `image:` source and the inference service's `jpeg` and
//! `png` buffers both do, so that one picture gives the same model input whichever way it
//! came in.

use anyhow::bail;
use std::path::Path;

use image::ImageDecoder;
use yuv::{BufferStoreMut, YuvBiPlanarImageMut, YuvConversionMode, YuvRange, YuvStandardMatrix};
use zcpipe_core::frame::FrameLayout;

/// The largest width or height of a frame, pixels.
pub const MAX_DIMENSION: u32 = 16384;

/// bytesperline alignment of the NV12 frames made here, in bytes.
pub const STRIDE_ALIGN: u32 = 16;

/// Most bytes a decoder may allocate for an image file read by the capture stage (the image
/// crate's own default).
pub const FILE_DECODE_ALLOC: u64 = 512 << 20;

/// Decodes a PNG or JPEG file (format guessed from the content) as [`decode_rgb8_bytes`]
/// does. Errors read `cannot read image PATH: CAUSE`.
pub fn decode_rgb8(path: &Path) -> anyhow::Result<image::RgbImage> {
    let bytes = std::fs::read(path).map_err(|e| anyhow::anyhow!("cannot read image {}: {e}", path.display()))?;
    decode_rgb8_bytes(&bytes, FILE_DECODE_ALLOC)
        .map_err(|e| anyhow::anyhow!("cannot read image {}: {e}", path.display()))
}

/// Decodes a PNG or JPEG image held in memory into 8-bit RGB (format guessed from the
/// content), turned upright by its EXIF orientation as `cv2.imread` does (the reference
/// letterbox was made with it). Alpha is dropped, grey is replicated. The size the header
/// claims is checked against [`MAX_DIMENSION`] and `max_alloc` (bytes the decoder may
/// allocate) before anything is decoded, so a small file claiming a huge picture is
/// refused, not allocated.
pub fn decode_rgb8_bytes(bytes: &[u8], max_alloc: u64) -> anyhow::Result<image::RgbImage> {
    let mut limits = image::Limits::default();
    limits.max_image_width = Some(MAX_DIMENSION);
    limits.max_image_height = Some(MAX_DIMENSION);
    limits.max_alloc = Some(max_alloc);
    let decode = || -> image::ImageResult<image::DynamicImage> {
        let mut reader = image::ImageReader::new(std::io::Cursor::new(bytes))
            .with_guessed_format()
            .map_err(image::ImageError::IoError)?;
        reader.limits(limits);
        let mut decoder = reader.into_decoder()?;
        let orientation = decoder.orientation()?;
        let mut img = image::DynamicImage::from_decoder(decoder)?;
        img.apply_orientation(orientation);
        Ok(img)
    };
    // The image crate's errors say their cause in their own text: one line, not a chain.
    let img = decode().map_err(|e| match e {
        image::ImageError::Limits(_) => anyhow::anyhow!(
            "the picture is over the decoder's limits ({MAX_DIMENSION} pixels a side, {} MiB decoded)",
            max_alloc >> 20
        ),
        _ => anyhow::anyhow!("{e}"),
    })?;
    Ok(img.to_rgb8())
}

/// Converts a packed RGB24 image (`width x height`, rows of `3 * width` bytes) to NV12 in
/// the layout [`FrameLayout::nv12`]`(width, height, 16)` returns, BT.601 limited range
/// (what V4L2 calls `V4L2_YCBCR_ENC_601` + `V4L2_QUANTIZATION_LIM_RANGE`).
///
/// Odd sizes are padded to even by replicating the last column / row, so 2x2 chroma blocks
/// on the edge see real pixels; the layout keeps the true size. Bytes past the padded
/// width in each row (stride padding) are zero. Returns the layout and its
/// `bytes_needed()` bytes.
pub fn rgb8_to_nv12(rgb: &[u8], width: u32, height: u32) -> anyhow::Result<(FrameLayout, Vec<u8>)> {
    if width == 0 || height == 0 || width > MAX_DIMENSION || height > MAX_DIMENSION {
        bail!("image size {width}x{height} out of range 1..={MAX_DIMENSION}");
    }
    let (w, h) = (width as usize, height as usize);
    if rgb.len() < w * h * 3 {
        bail!("RGB buffer of {} bytes is too small for {width}x{height}", rgb.len());
    }
    let layout = FrameLayout::nv12(width, height, STRIDE_ALIGN);
    let (w2, h2) = (w.div_ceil(2) * 2, h.div_ceil(2) * 2);

    // Edge replication to even size: nothing in yuv / image does this, so copy by hand.
    let padded;
    let src: &[u8] = if (w2, h2) == (w, h) {
        &rgb[..w * h * 3]
    } else {
        let mut buf = vec![0u8; w2 * h2 * 3];
        for y in 0..h2 {
            let sy = y.min(h - 1);
            let row = &mut buf[y * w2 * 3..(y + 1) * w2 * 3];
            row[..w * 3].copy_from_slice(&rgb[sy * w * 3..(sy + 1) * w * 3]);
            for x in w..w2 {
                row.copy_within((w - 1) * 3..w * 3, x * 3);
            }
        }
        padded = buf;
        &padded
    };

    let mut nv12 = vec![0u8; layout.bytes_needed() as usize];
    let (y_plane, uv_plane) = nv12.split_at_mut(layout.planes[1].offset as usize);
    let bpl = layout.planes[0].bytesperline;
    let mut img = YuvBiPlanarImageMut {
        y_plane: BufferStoreMut::Borrowed(y_plane),
        y_stride: bpl,
        uv_plane: BufferStoreMut::Borrowed(uv_plane),
        uv_stride: layout.planes[1].bytesperline,
        width: w2 as u32,
        height: h2 as u32,
    };
    yuv::rgb_to_yuv_nv12(
        &mut img,
        src,
        (w2 * 3) as u32,
        YuvRange::Limited,
        YuvStandardMatrix::Bt601,
        YuvConversionMode::Balanced,
    )
    .map_err(|e| anyhow::anyhow!("RGB to NV12 conversion failed: {e:?}"))?;
    Ok((layout, nv12))
}

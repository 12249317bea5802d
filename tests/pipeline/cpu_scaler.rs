//! The CPU scaler (`zcpipe::scale::cpu`) fed by the image source's code (`zcpipe::capture::image`):
//! one decoded picture in every source format gives the same BGR, and the dog photo through
//! the pipeline's path (JPEG -> NV12 -> scaler) matches the cv2 letterbox golden. These were
//! unit tests of `scale::cpu`; they live here because a stage does not name another stage.

use std::path::{Path, PathBuf};

use yuv::{
    BufferStoreMut, YuvBiPlanarImageMut, YuvChromaSubsampling, YuvConversionMode, YuvPackedImageMut, YuvPlanarImageMut,
    YuvRange, YuvStandardMatrix,
};
use zcpipe::capture::image::{decode_rgb8, rgb8_to_nv12};
use zcpipe::core::frame::{Fourcc, FrameLayout, Letterbox, Placement, PlaneDesc, MAX_PLANES};
use zcpipe::scale::cpu::{CpuScaler, YOLOX_PAD};

/// YOLOX's letterbox (top-left, pad 114), what these goldens were made with.
const TOP_LEFT: Letterbox = Letterbox::new(Placement::TopLeft, YOLOX_PAD);

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(rel)
}

fn model_input(bpl: u32) -> (FrameLayout, Vec<u8>) {
    let l = FrameLayout::packed24(Fourcc::BGR24, 416, 416, bpl);
    (l, vec![0xEEu8; l.bytes_needed() as usize])
}

/// The same RGB picture in every source format, each with its own odd stride.
fn all_formats(rgb: &[u8], w: u32, h: u32) -> Vec<(FrameLayout, Vec<Vec<u8>>)> {
    let (wu, hu) = (w as usize, h as usize);
    let (cw, ch) = (wu.div_ceil(2), hu.div_ceil(2));
    let mut out = Vec::new();
    let layout = |fourcc, planes: &[PlaneDesc]| {
        let mut p = [PlaneDesc::default(); MAX_PLANES];
        p[..planes.len()].copy_from_slice(planes);
        FrameLayout { fourcc, width: w, height: h, num_planes: planes.len() as u32, planes: p }
    };

    // NV12 as the image source writes it.
    let (l, nv12) = rgb8_to_nv12(rgb, w, h).unwrap();
    out.push((l, vec![nv12.clone()]));

    // NV12M: luma and CbCr in two buffers at odd offsets and a wider stride.
    let (ybpl, off) = (wu + 40, 7usize);
    let mut b0 = vec![0u8; off + ybpl * hu];
    let mut b1 = vec![0u8; off + ybpl * ch];
    for r in 0..hu {
        b0[off + r * ybpl..][..wu].copy_from_slice(&nv12[r * l.planes[0].bytesperline as usize..][..wu]);
    }
    for r in 0..ch {
        b1[off + r * ybpl..][..cw * 2]
            .copy_from_slice(&nv12[l.planes[1].offset as usize + r * l.planes[1].bytesperline as usize..][..cw * 2]);
    }
    let m = layout(
        Fourcc::NV12M,
        &[
            PlaneDesc { offset: off as u32, bytesperline: ybpl as u32, length: (ybpl * hu) as u32, fd_index: 0 },
            PlaneDesc { offset: off as u32, bytesperline: ybpl as u32, length: (ybpl * ch) as u32, fd_index: 1 },
        ],
    );
    out.push((m, vec![b0, b1]));

    // NV16 at bytesperline w + 6 (even, not 16-aligned).
    let bpl = (cw * 2 + 6) as u32;
    let mut nv16 = vec![0u8; bpl as usize * hu * 2];
    let (y, uv) = nv16.split_at_mut(bpl as usize * hu);
    let mut img = YuvBiPlanarImageMut {
        y_plane: BufferStoreMut::Borrowed(y),
        y_stride: bpl,
        uv_plane: BufferStoreMut::Borrowed(uv),
        uv_stride: bpl,
        width: w,
        height: h,
    };
    yuv::rgb_to_yuv_nv16(
        &mut img,
        rgb,
        w * 3,
        YuvRange::Limited,
        YuvStandardMatrix::Bt601,
        YuvConversionMode::Balanced,
    )
    .unwrap();
    let l16 = layout(
        Fourcc::NV16,
        &[
            PlaneDesc { offset: 0, bytesperline: bpl, length: bpl * h, fd_index: 0 },
            PlaneDesc { offset: bpl * h, bytesperline: bpl, length: bpl * h, fd_index: 0 },
        ],
    );
    out.push((l16, vec![nv16]));

    // YUYV at bytesperline 2*even(w) + 10.
    let mut planar = YuvPlanarImageMut::<u8>::alloc(w, h, YuvChromaSubsampling::Yuv422);
    yuv::rgb_to_yuv422(
        &mut planar,
        rgb,
        w * 3,
        YuvRange::Limited,
        YuvStandardMatrix::Bt601,
        YuvConversionMode::Balanced,
    )
    .unwrap();
    let ybpl = (cw * 4 + 10) as u32;
    let mut yuyv = vec![0u8; ybpl as usize * hu];
    let mut packed =
        YuvPackedImageMut { yuy: BufferStoreMut::Borrowed(&mut yuyv), yuy_stride: ybpl, width: w, height: h };
    yuv::yuv422_to_yuyv422(&mut packed, &planar.to_fixed()).unwrap();
    // The buffer ends right after the last row's pixels (no stride padding after it).
    let len = ybpl * (h - 1) + cw as u32 * 4;
    yuyv.truncate(len as usize);
    out.push((
        layout(Fourcc::YUYV, &[PlaneDesc { offset: 0, bytesperline: ybpl, length: len, fd_index: 0 }]),
        vec![yuyv],
    ));

    // RGB24 and BGR24 at bytesperline 3w + 1 (not a whole number of pixels).
    let bpl = w * 3 + 1;
    let mut rgb24 = vec![0u8; (bpl * h) as usize];
    let mut bgr24 = vec![0u8; (bpl * h) as usize];
    for r in 0..hu {
        let s = &rgb[r * wu * 3..][..wu * 3];
        rgb24[r * bpl as usize..][..wu * 3].copy_from_slice(s);
        for (d, p) in bgr24[r * bpl as usize..][..wu * 3].chunks_exact_mut(3).zip(s.chunks_exact(3)) {
            d.copy_from_slice(&[p[2], p[1], p[0]]);
        }
    }
    let pd = [PlaneDesc { offset: 0, bytesperline: bpl, length: bpl * h, fd_index: 0 }];
    out.push((layout(Fourcc::RGB24, &pd), vec![rgb24]));
    out.push((layout(Fourcc::BGR24, &pd), vec![bgr24]));
    out
}

fn mean_abs_diff(a: &[u8], b: &[u8]) -> f64 {
    a.iter().zip(b).map(|(&x, &y)| (x as i32 - y as i32).unsigned_abs() as u64).sum::<u64>() as f64 / a.len() as f64
}

#[test]
fn scaler_every_source_format_gives_same_bgr() {
    let img = decode_rgb8(&data("chelsea.png")).unwrap();
    let (w, h) = img.dimensions();
    let (dl, _) = model_input(416 * 3);
    let mut s = CpuScaler::new();
    let mut results = Vec::new();
    for (l, bufs) in all_formats(img.as_raw(), w, h) {
        let mut dst = vec![0u8; dl.bytes_needed() as usize];
        let refs: Vec<&[u8]> = bufs.iter().map(|b| b.as_slice()).collect();
        s.scale_bytes(&refs, &l, &mut dst, &dl, TOP_LEFT).unwrap();
        results.push((l.fourcc, dst));
    }
    let reference = &results.iter().find(|(f, _)| *f == Fourcc::RGB24).unwrap().1;
    for (f, dst) in &results {
        let mad = mean_abs_diff(dst, reference);
        let max = dst.iter().zip(reference).map(|(&a, &b)| (a as i32 - b as i32).abs()).max().unwrap();
        println!("{f} vs RGB24: mean abs diff {mad:.3}, max {max}");
        assert!(mad < 2.0, "{f}: {mad}");
        assert_eq!(&dst[(300 * 416) * 3..], &reference[(300 * 416) * 3..], "{f}: pad rows");
    }
    let bgr = &results.iter().find(|(f, _)| *f == Fourcc::BGR24).unwrap().1;
    assert_eq!(bgr, reference, "RGB24 and BGR24 sources must match exactly");
}

fn golden_dog() -> Vec<u8> {
    let p = data("golden/dog_input_u8_nhwc_bgr_416.bin");
    let g = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    assert_eq!(g.len(), 416 * 416 * 3);
    g
}

#[test]
fn scaler_dog_matches_cv2_letterbox_golden() {
    let golden = golden_dog();
    let img = decode_rgb8(&data("dog.jpg")).unwrap();
    let (w, h) = img.dimensions();
    let (dl, _) = model_input(416 * 3);
    let mut s = CpuScaler::new();

    // image -> NV12 -> scaler (the pipeline's path).
    let mut src = zcpipe::capture::image::ImageSource::open(&data("dog.jpg"), None).unwrap();
    use zcpipe::capture::FrameSource;
    let mut nv12 = vec![0u8; src.info().max_frame_bytes as usize];
    let sl = src.fill(&mut nv12).unwrap().unwrap();
    let mut out = vec![0u8; dl.bytes_needed() as usize];
    let lb = s.scale_bytes(&[&nv12], &sl, &mut out, &dl, TOP_LEFT).unwrap();
    assert_eq!((lb.resized_w, lb.resized_h), (416, 312));
    let mad_nv12 = mean_abs_diff(&out, &golden);
    let mad_nv12_picture = mean_abs_diff(&out[..416 * 312 * 3], &golden[..416 * 312 * 3]);

    // RGB24 -> scaler (isolates the resize from the YCbCr round trip and JPEG decoder).
    let pd = [
        PlaneDesc { offset: 0, bytesperline: w * 3, length: w * h * 3, fd_index: 0 },
        PlaneDesc::default(),
        PlaneDesc::default(),
    ];
    let rl = FrameLayout { fourcc: Fourcc::RGB24, width: w, height: h, num_planes: 1, planes: pd };
    let mut out_rgb = vec![0u8; dl.bytes_needed() as usize];
    s.scale_bytes(&[img.as_raw()], &rl, &mut out_rgb, &dl, TOP_LEFT).unwrap();
    let mad_rgb = mean_abs_diff(&out_rgb[..416 * 312 * 3], &golden[..416 * 312 * 3]);

    println!("dog.jpg vs cv2 golden: NV12 path mean abs diff {mad_nv12:.3} (whole input), {mad_nv12_picture:.3} (picture area); RGB24 path {mad_rgb:.3} (picture area)");
    assert_eq!(&out[416 * 312 * 3..], &golden[416 * 312 * 3..], "pad rows are 114 in both");
    assert!(mad_nv12_picture < 6.0, "{mad_nv12_picture}");
    assert!(mad_rgb < 2.0, "{mad_rgb}");
}

use super::heap::rga_heap_with_ram;
use super::image::stride_align;
use super::*;
use zcpipe_core::dmabuf::HeapChoice;
use zcpipe_core::frame::{PlaneDesc, MAX_PLANES};
use zcpipe_sys::board::RamAbove4g;

fn nv12_with_bpl(w: u32, h: u32, bpl: u32) -> FrameLayout {
    let mut p = [PlaneDesc::default(); MAX_PLANES];
    p[0] = PlaneDesc { offset: 0, bytesperline: bpl, length: bpl * h, fd_index: 0 };
    p[1] = PlaneDesc { offset: bpl * h, bytesperline: bpl, length: bpl * h / 2, fd_index: 0 };
    FrameLayout { fourcc: Fourcc::NV12, width: w, height: h, num_planes: 2, planes: p }
}

#[test]
fn nv12_maps_to_ycbcr_420_sp_with_pitch_in_pixels() {
    let s = source_image(&FrameLayout::nv12(640, 480, 16)).unwrap();
    assert_eq!((s.format, s.wstride, s.hstride, s.bytes), (sys::RK_FORMAT_YCBCR_420_SP, 640, 480, 640 * 480 * 3 / 2));
    // 1088-row vertical stride (PITFALLS 10): hstride from the chroma offset.
    let mut l = FrameLayout::nv12(1920, 1080, 16);
    l.planes[1].offset = 1920 * 1088;
    let s = source_image(&l).unwrap();
    assert_eq!((s.hstride, s.bytes), (1088, 1920 * 1088 * 3 / 2));
    let d = dest_image(&FrameLayout::packed24(Fourcc::BGR24, 416, 416, 424 * 3)).unwrap();
    assert_eq!((d.format, d.wstride, d.hstride), (sys::RK_FORMAT_BGR_888, 424, 416));
}

#[test]
fn unusable_layouts_are_named() {
    let mut m = FrameLayout::nv12(640, 480, 16);
    m.fourcc = Fourcc::NV12M;
    m.planes[1].fd_index = 1;
    let e = source_image(&m).unwrap_err().to_string();
    assert!(e.contains("NV12M") && e.contains("--format NV12"), "{e}");
    let mut o = FrameLayout::nv12(640, 480, 16);
    o.planes[1].offset += 7;
    assert!(source_image(&o).unwrap_err().to_string().contains("CbCr plane starts at byte"));
    let e = dest_image(&FrameLayout::packed24(Fourcc::BGR24, 416, 416, 1249)).unwrap_err().to_string();
    assert!(e.contains("multiple of 3"), "{e}");
    let e = RgaScaler::check(Fourcc::NV12, &FrameLayout::packed24(Fourcc::new(b"XR24"), 416, 416, 1664))
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot produce XR24"), "{e}");
    RgaScaler::check(Fourcc::YUYV, &FrameLayout::packed24(Fourcc::BGR24, 416, 416, 1248)).unwrap();
}

#[test]
fn diagnosis_names_the_rule() {
    let d = dest_image(&FrameLayout::packed24(Fourcc::BGR24, 416, 416, 1248)).unwrap();
    let s = source_image(&nv12_with_bpl(640, 480, 650)).unwrap();
    let lb = LetterboxParams::top_left(640, 480, 416, 416);
    let e = diagnose(Fourcc::NV12, &s, Fourcc::BGR24, &d, &lb, sys::IM_STATUS_NOT_SUPPORTED, "x");
    assert!(e.contains("width stride 650 px is not a multiple of 16"), "{e}");
    let s = source_image(&nv12_with_bpl(642, 481, 656)).unwrap();
    let e = diagnose(
        Fourcc::NV12,
        &s,
        Fourcc::BGR24,
        &d,
        &LetterboxParams::top_left(642, 481, 416, 416),
        sys::IM_STATUS_INVALID_PARAM,
        "",
    );
    assert!(e.contains("even sizes"), "{e}");
    let s = source_image(&nv12_with_bpl(16, 16, 16)).unwrap();
    let e = diagnose(
        Fourcc::NV12,
        &s,
        Fourcc::BGR24,
        &d,
        &LetterboxParams::top_left(16, 16, 416, 416),
        sys::IM_STATUS_NOT_SUPPORTED,
        "",
    );
    assert!(e.contains("1/16..16"), "{e}");
    assert_eq!((stride_align(8), stride_align(16), stride_align(24)), (16, 8, 16));
}

#[test]
fn version_line_reads_querystring() {
    let q = "RGA_api version       : v1.10.3_[1]\nRGA version           : RGA_2_Enhance RGA_3 \n";
    assert_eq!(version_line(q).unwrap(), "librga v1.10.3_[1], RGA_2_Enhance RGA_3");
    assert_eq!(version_line("get info failed"), None);
}

fn ram(above: bool) -> Option<RamAbove4g> {
    Some(RamAbove4g {
        above,
        evidence: if above {
            "System RAM ends at 0x200000000 (/proc/iomem)".into()
        } else {
            "System RAM ends at 0xf0000000 (/proc/iomem)".into()
        },
    })
}

#[test]
fn heap_prefers_dma32_then_cma_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let r = rga_heap_with_ram(HeapChoice::Auto, dir.path(), ram(true), false);
    assert_eq!(r.choice, HeapChoice::Auto);
    assert!(r.reason.contains("heaps found: none") && r.reason.contains("0x200000000"), "{}", r.reason);
    let r = rga_heap_with_ram(HeapChoice::Auto, dir.path(), ram(false), false);
    assert!(r.reason.contains("all RAM is below 4 GiB"), "{}", r.reason);
    std::fs::write(dir.path().join("system"), b"").unwrap();
    std::fs::write(dir.path().join("linux,cma"), b"").unwrap();
    let r = rga_heap_with_ram(HeapChoice::Auto, dir.path(), ram(true), false);
    assert_eq!(r.choice, HeapChoice::Cma);
    assert!(r.reason.contains("linux,cma") && r.reason.contains("4 GiB"), "{}", r.reason);
    // Below 4 GiB, or on an RGA3 core, nothing special is needed.
    assert_eq!(rga_heap_with_ram(HeapChoice::Auto, dir.path(), ram(false), false).choice, HeapChoice::Auto);
    let r = rga_heap_with_ram(HeapChoice::Auto, dir.path(), ram(true), true);
    assert_eq!(r.choice, HeapChoice::Auto);
    assert!(r.reason.contains("RGA3"), "{}", r.reason);
    std::fs::write(dir.path().join("system-dma32"), b"").unwrap();
    // An unknown RAM map takes the safe heap.
    assert_eq!(rga_heap_with_ram(HeapChoice::Auto, dir.path(), None, false).choice, HeapChoice::Dma32);
    let r = rga_heap_with_ram(HeapChoice::System, dir.path(), ram(true), false);
    assert_eq!(r.choice, HeapChoice::System);
    assert!(r.reason.contains("--heap system") && r.reason.contains("RGA_MMU"), "{}", r.reason);
    // DRM dumb buffers may be IOMMU-mapped pages anywhere in RAM: kept, with the warning.
    let r = rga_heap_with_ram(HeapChoice::Drm, dir.path(), ram(true), false);
    assert_eq!(r.choice, HeapChoice::Drm);
    assert!(
        r.reason.starts_with("--heap drm as asked; RAM lies above 4 GiB") && r.reason.contains("RGA_MMU"),
        "{}",
        r.reason
    );
    assert_eq!(rga_heap_with_ram(HeapChoice::Drm, dir.path(), ram(false), false).reason, "--heap drm as asked");
    assert!(rga_heap_with_ram(HeapChoice::Memfd, dir.path(), None, false).reason.contains("cannot import"));
}

#[test]
fn whole_buffer_image_covers_the_buffer_without_passing_it() {
    // 768x576 NV12 (the dog photo's capture buffer): 663,552 bytes = 6,912 rows of 96.
    let i = whole_buffer_image(663_552).unwrap();
    assert_eq!((i.width, i.height, i.wstride, i.hstride, i.bytes), (64, 6912, 64, 6912, 663_552));
    let j = whole_buffer_image(1000).unwrap();
    assert_eq!((j.height, j.bytes), (10, 960), "even rows, never past the buffer");
    assert!(whole_buffer_image(191).is_none());
}

#[test]
fn fill_pad_leaves_picture_and_stride() {
    let (bpl, dw, dh) = (5 * 3 + 2, 5usize, 4usize);
    let mut b = vec![7u8; bpl * dh];
    fill_pad(&mut b, bpl, (dw, dh), (0, 0, 3, 2), 114);
    for r in 0..dh {
        for x in 0..dw {
            let v = b[r * bpl + x * 3];
            assert_eq!(v, if x < 3 && r < 2 { 7 } else { 114 }, "({x},{r})");
        }
        assert_eq!(&b[r * bpl + 15..r * bpl + 17], &[7, 7]);
    }
}

#[test]
fn fill_pad_around_a_centred_picture() {
    // 6x5 image, picture 2x3 at (2, 1): pad on all four sides, stride bytes kept.
    let (bpl, dw, dh) = (6 * 3 + 1, 6usize, 5usize);
    let mut b = vec![7u8; bpl * dh];
    fill_pad(&mut b, bpl, (dw, dh), (2, 1, 2, 3), 114);
    for r in 0..dh {
        for x in 0..dw {
            let inside = (2..4).contains(&x) && (1..4).contains(&r);
            assert_eq!(&b[r * bpl + x * 3..r * bpl + x * 3 + 3], &[if inside { 7 } else { 114 }; 3], "({x},{r})");
        }
        assert_eq!(b[r * bpl + 18], 7, "stride byte of row {r}");
    }
}

#[test]
fn a_one_pixel_offset_moves_to_two_for_librga() {
    use zcpipe_core::frame::Placement;
    let d = dest_image(&FrameLayout::packed24(Fourcc::RGB24, 416, 416, 1248)).unwrap();
    // 414x416 centred in 416x416: (416-414)/2 = 1 column of pad on the left, which librga
    // refuses as a rectangle x; the picture starts at 2 and says so.
    let s = source_image(&FrameLayout::packed24(Fourcc::RGB24, 414, 416, 414 * 3)).unwrap();
    let lb = rga_letterbox(Letterbox::new(Placement::Center, 114), &s, &d);
    assert_eq!(lb.picture(), (2, 0, 414, 416));
    let (_, drect) = job_rects(&s, &lb);
    assert_eq!((drect.x, drect.y, drect.width, drect.height), (2, 0, 414, 416));
    // Centred 640x480 in 416x416: 52 rows above, unchanged; top-left stays at 0.
    let s = source_image(&FrameLayout::nv12(640, 480, 16)).unwrap();
    assert_eq!(rga_letterbox(Letterbox::new(Placement::Center, 114), &s, &d).picture(), (0, 52, 416, 312));
    assert_eq!(rga_letterbox(Letterbox::new(Placement::TopLeft, 114), &s, &d).picture(), (0, 0, 416, 312));
}

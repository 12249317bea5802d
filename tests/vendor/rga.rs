//! `--scaler rga` against the ABI fake of librga (`fakes/librga`, built here as
//! `target/release/librga.so`): memfd-backed pools, the fake's call log
//! (`$ZCPIPE_FAKE_RGA_LOG`) and its CPU conversion checked against zcpipe's CPU scaler.
//!
//! The fake is one shared library per test process, so the tests take turns (a mutex) and
//! each reads only the log lines written since it started.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use zcpipe::core::dmabuf::{Allocator, DmaBuf, HeapChoice};
use zcpipe::core::frame::{Fourcc, FrameLayout, Letterbox, Placement, PlaneDesc, MAX_PLANES};
use zcpipe::scale::cpu::CpuScaler;
use zcpipe::scale::rga::{RgaCore, RgaJobs, RgaScaler};
use zcpipe::scale::Scaler;

use crate::common;
use common::log_field as field;

struct Fake {
    lib: PathBuf,
    log: PathBuf,
}

/// The fake (built once, [`common::fake_librga`]), its log pointed at a file under the
/// target's tmp dir.
fn fake() -> &'static Fake {
    static FAKE: OnceLock<Fake> = OnceLock::new();
    FAKE.get_or_init(|| {
        let lib = common::fake_librga().to_path_buf();
        let log = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("zcpipe-fake-rga-{}.log", std::process::id()));
        let _ = std::fs::remove_file(&log);
        std::env::set_var("ZCPIPE_FAKE_RGA_LOG", &log);
        Fake { lib, log }
    })
}

/// One test at a time, with the log lines it caused.
struct Session {
    fake: &'static Fake,
    log: common::LogSince,
}

fn session() -> Session {
    static TURN: Mutex<()> = Mutex::new(());
    let fake = fake();
    Session { fake, log: common::LogSince::begin(&TURN, &fake.log) }
}

impl Session {
    fn calls(&self, name: &str) -> Vec<String> {
        self.log.calls(name)
    }
    /// `imcheck_t` calls of binds (not the driver probe of `open`, which names no buffer).
    fn bind_checks(&self) -> Vec<String> {
        self.calls("imcheck_t").into_iter().filter(|l| !l.contains("src[handle=0 ")).collect()
    }
    fn open(&self, core: RgaCore) -> RgaScaler {
        RgaScaler::open(Some(&self.fake.lib), core).expect("opening the fake librga")
    }
}

fn memfd_pool(n: usize, size: u64) -> Vec<DmaBuf> {
    let a = Allocator::open(
        HeapChoice::Memfd,
        Path::new("/nonexistent"),
        Path::new("/nonexistent"),
        Path::new("/nonexistent"),
    )
    .unwrap();
    a.allocate_pool(n, size).unwrap()
}

/// 640x480 RGB: eight vertical colour bars of 80 px, in reverse order in the bottom half
/// (so a row or buffer mix-up shows).
fn colour_bars(w: usize, h: usize, reverse: bool) -> Vec<u8> {
    const BARS: [[u8; 3]; 8] = [
        [255, 255, 255],
        [255, 255, 0],
        [0, 255, 255],
        [0, 255, 0],
        [255, 0, 255],
        [255, 0, 0],
        [0, 0, 255],
        [0, 0, 0],
    ];
    let mut rgb = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        for x in 0..w {
            let mut i = x * 8 / w;
            if (y >= h / 2) != reverse {
                i = 7 - i;
            }
            rgb.extend_from_slice(&BARS[i]);
        }
    }
    rgb
}

/// BT.601 limited range RGB -> Y, Cb, Cr.
fn ycbcr(p: &[u8]) -> [u8; 3] {
    let (r, g, b) = (p[0] as f32, p[1] as f32, p[2] as f32);
    let y = 16.0 + (65.481 * r + 128.553 * g + 24.966 * b) / 255.0;
    let cb = 128.0 + (-37.797 * r - 74.203 * g + 112.0 * b) / 255.0;
    let cr = 128.0 + (112.0 * r - 93.786 * g - 18.214 * b) / 255.0;
    [y, cb, cr].map(|v| v.round().clamp(0.0, 255.0) as u8)
}

fn layout(fourcc: Fourcc, w: u32, h: u32, planes: &[PlaneDesc]) -> FrameLayout {
    let mut p = [PlaneDesc::default(); MAX_PLANES];
    p[..planes.len()].copy_from_slice(planes);
    FrameLayout { fourcc, width: w, height: h, num_planes: planes.len() as u32, planes: p }
}

/// NV12 at a given bytesperline (CbCr right after `h` luma rows).
fn nv12(rgb: &[u8], w: usize, h: usize, bpl: usize) -> (FrameLayout, Vec<u8>) {
    let mut buf = vec![0u8; bpl * h * 3 / 2];
    for y in 0..h {
        for x in 0..w {
            buf[y * bpl + x] = ycbcr(&rgb[(y * w + x) * 3..])[0];
        }
    }
    for y in 0..h / 2 {
        for x in 0..w / 2 {
            let c = ycbcr(&rgb[(2 * y * w + 2 * x) * 3..]);
            buf[bpl * h + y * bpl + 2 * x] = c[1];
            buf[bpl * h + y * bpl + 2 * x + 1] = c[2];
        }
    }
    let (b, hh) = (bpl as u32, h as u32);
    let l = layout(
        Fourcc::NV12,
        w as u32,
        hh,
        &[
            PlaneDesc { offset: 0, bytesperline: b, length: b * hh, fd_index: 0 },
            PlaneDesc { offset: b * hh, bytesperline: b, length: b * hh / 2, fd_index: 0 },
        ],
    );
    (l, buf)
}

/// NV16 (bytesperline = w) and YUYV (bytesperline = 2w) of an RGB picture.
fn nv16_and_yuyv(rgb: &[u8], w: usize, h: usize) -> [(FrameLayout, Vec<u8>); 2] {
    let mut nv16 = vec![0u8; w * h * 2];
    let mut yuyv = vec![0u8; w * h * 2];
    for y in 0..h {
        for x in (0..w).step_by(2) {
            let (a, b) = (ycbcr(&rgb[(y * w + x) * 3..]), ycbcr(&rgb[(y * w + x + 1) * 3..]));
            nv16[y * w + x] = a[0];
            nv16[y * w + x + 1] = b[0];
            nv16[w * h + y * w + x] = a[1];
            nv16[w * h + y * w + x + 1] = a[2];
            yuyv[y * w * 2 + x * 2..][..4].copy_from_slice(&[a[0], a[1], b[0], a[2]]);
        }
    }
    let (ww, hh) = (w as u32, h as u32);
    [
        (
            layout(
                Fourcc::NV16,
                ww,
                hh,
                &[
                    PlaneDesc { offset: 0, bytesperline: ww, length: ww * hh, fd_index: 0 },
                    PlaneDesc { offset: ww * hh, bytesperline: ww, length: ww * hh, fd_index: 0 },
                ],
            ),
            nv16,
        ),
        (
            layout(
                Fourcc::YUYV,
                ww,
                hh,
                &[PlaneDesc { offset: 0, bytesperline: ww * 2, length: ww * hh * 2, fd_index: 0 }],
            ),
            yuyv,
        ),
    ]
}

fn source_pool(frames: &[&[u8]]) -> Vec<Vec<DmaBuf>> {
    let mut pool = memfd_pool(frames.len(), frames[0].len() as u64);
    for (b, f) in pool.iter_mut().zip(frames) {
        b.write().unwrap()[..f.len()].copy_from_slice(f);
    }
    pool.into_iter().map(|b| vec![b]).collect()
}

fn model_input() -> FrameLayout {
    FrameLayout::packed24(Fourcc::BGR24, 416, 416, 416 * 3)
}

fn output_pool(n: usize, dl: &FrameLayout) -> Vec<DmaBuf> {
    let mut pool = memfd_pool(n, dl.bytes_needed());
    for b in &mut pool {
        b.write().unwrap().fill(0xEE);
    }
    pool
}

/// YOLOX's letterbox: top-left, pad 114.
const TOP_LEFT: Letterbox = Letterbox::new(Placement::TopLeft, 114);
/// Ultralytics' letterbox: centred, pad 114.
const CENTER: Letterbox = Letterbox::new(Placement::Center, 114);

fn cpu_reference(src: &[u8], sl: &FrameLayout, dl: &FrameLayout, letterbox: Letterbox) -> Vec<u8> {
    let mut out = vec![0xEEu8; dl.bytes_needed() as usize];
    CpuScaler::new().scale_bytes(&[src], sl, &mut out, dl, letterbox).unwrap();
    out
}

fn mean_abs_diff(a: &[u8], b: &[u8]) -> f64 {
    a.iter().zip(b).map(|(&x, &y)| (x as i32 - y as i32).unsigned_abs() as u64).sum::<u64>() as f64 / a.len() as f64
}

/// Picture area (`x, y, w, h`) close to the CPU scaler's, pad exactly `pad`, nothing left
/// unwritten.
fn assert_letterbox(
    got: &[u8],
    want: &[u8],
    bpl: usize,
    (x0, y0, rw, rh): (usize, usize, usize, usize),
    pad: u8,
    what: &str,
) {
    let mut pic_got = Vec::new();
    let mut pic_want = Vec::new();
    for y in 0..416 {
        let (g, w) = (&got[y * bpl..][..416 * 3], &want[y * bpl..][..416 * 3]);
        for x in 0..416 {
            let px = &g[x * 3..x * 3 + 3];
            if (x0..x0 + rw).contains(&x) && (y0..y0 + rh).contains(&y) {
                pic_got.extend_from_slice(px);
                pic_want.extend_from_slice(&w[x * 3..x * 3 + 3]);
            } else {
                assert_eq!(px, [pad; 3], "{what}: pad at ({x},{y})");
            }
        }
    }
    let mad = mean_abs_diff(&pic_got, &pic_want);
    let far = pic_got.iter().zip(&pic_want).filter(|(&a, &b)| (a as i32 - b as i32).abs() > 8).count();
    println!(
        "{what}: picture {rw}x{rh}, mean abs diff vs the CPU scaler {mad:.3}, {far} of {} bytes differ by more than 8",
        pic_got.len()
    );
    assert!(mad < 2.0, "{what}: mean abs diff {mad}");
    // Bar edges differ (the CPU resize widens its filter when shrinking; the fake samples 2x2).
    assert!((far as f64) < pic_got.len() as f64 * 0.05, "{what}: {far} bytes far off");
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

#[test]
fn nv12_640x480_to_416x416_imports_once_and_matches_cpu() {
    let s = session();
    let (w, h) = (640, 480);
    let (sl, frame_a) = nv12(&colour_bars(w, h, false), w, h, w);
    let (_, frame_b) = nv12(&colour_bars(w, h, true), w, h, w);
    let dl = model_input();
    let src = source_pool(&[&frame_a, &frame_b, &frame_a]);
    let mut dst = output_pool(2, &dl);
    let fds_before = open_fds();

    let mut rga = s.open(RgaCore::Rga3Core0);
    let name = Scaler::name(&rga);
    assert!(name.contains("librga v1.10.3_[1]-zcpipe-fake"), "{name}");
    rga.bind_pools(&src, &sl, &mut dst, &dl, TOP_LEFT).unwrap();
    let mut lbs = Vec::new();
    for (i, j) in [(0u32, 0u32), (1, 1)] {
        lbs.push(rga.scale_index(i, j).unwrap());
    }
    let lb = lbs[0];
    assert_eq!((lb.resized_w, lb.resized_h, lb.src_w, lb.src_h), (416, 312, 640, 480));
    assert_eq!((lb.pad_x, lb.pad_y), (0.0, 0.0));
    let got_a = dst[0].read().unwrap().to_vec();
    let got_b = dst[1].read().unwrap().to_vec();
    assert_letterbox(
        &got_a,
        &cpu_reference(&frame_a, &sl, &dl, TOP_LEFT),
        416 * 3,
        (0, 0, 416, 312),
        114,
        "NV12 bars, buffer 0",
    );
    assert_letterbox(
        &got_b,
        &cpu_reference(&frame_b, &sl, &dl, TOP_LEFT),
        416 * 3,
        (0, 0, 416, 312),
        114,
        "NV12 reversed bars, buffer 1",
    );
    // The top-left picture pixel is white's BGR, the first bottom-half row (156) black's.
    assert!(got_a[..3].iter().all(|&v| v >= 250), "{:?}", &got_a[..3]);
    assert!(got_a[160 * 1248..][..3].iter().all(|&v| v <= 5), "{:?}", &got_a[160 * 1248..][..3]);
    for (i, j) in [(2u32, 0u32), (0, 1), (1, 0)] {
        rga.scale_index(i, j).unwrap();
    }
    assert_eq!(rga.frames(), 5);
    let e = rga.scale_index(3, 0).unwrap_err().to_string();
    assert!(e.contains("source 3 of 3"), "{e}");
    drop(rga);
    assert_eq!(open_fds(), fds_before, "the fake's duplicated fds are all closed once every handle is released");

    let imports = s.calls("importbuffer_fd");
    println!("{}", imports.join("\n"));
    assert_eq!(imports.len(), 5, "one importbuffer_fd per pool buffer (3 source + 2 output)");
    let fds: HashSet<&str> = imports.iter().map(|l| field(l, "fd")).collect();
    assert_eq!(fds.len(), 5, "distinct fds: {fds:?}");
    assert_eq!(
        imports.iter().filter(|l| field(l, "format") == "0xa00").count(),
        3,
        "sources imported as RK_FORMAT_YCbCr_420_SP"
    );
    assert!(imports[..3].iter().all(|l| field(l, "width") == "640" && field(l, "height") == "480"));
    assert!(imports[3..].iter().all(|l| field(l, "format") == "0x700" && field(l, "width") == "416"));
    let handles: HashSet<String> = imports.iter().map(|l| field(l, "handle").to_string()).collect();
    assert_eq!(handles.len(), 5);
    assert_eq!(s.calls("wrapbuffer_handle_t").len(), 5, "each image wrapped once, at bind");
    let checks = s.bind_checks();
    assert_eq!(checks.len(), 1);
    assert_eq!(field(&checks[0], "status"), "2", "{}", checks[0]);
    assert_eq!(s.calls("imcheck_t").len(), 2, "plus one driver probe at open");
    assert_eq!(s.calls("imconfig"), vec!["imconfig name=0 value=0x1 status=1".to_string()]);
    let jobs = s.calls("improcess");
    assert_eq!(jobs.len(), 5, "one improcess per frame");
    for j in &jobs {
        assert_eq!(field(j, "status"), "1", "{j}");
        assert_eq!(field(j, "core"), "0x1", "{j}");
        assert_eq!(field(j, "drect"), "0,0,416,312", "{j}");
        assert_eq!(field(j, "csc"), "0", "source untouched: {j}");
        assert!(j.contains("dst[handle=") && j.contains("csc=1]"), "BT.601 limited on the destination: {j}");
    }
    for name in [
        "wrapbuffer_virtualaddr_t",
        "importbuffer_virtualaddr",
        "wrapbuffer_fd_t",
        "importbuffer_physicaladdr",
        "wrapbuffer_physicaladdr_t",
    ] {
        assert!(s.calls(name).is_empty(), "{name} called");
    }
    assert!(jobs.iter().all(|j| j.contains("va=0x0")), "no CPU address in any job");
    let released: HashSet<String> = s
        .calls("releasebuffer_handle")
        .iter()
        .map(|l| {
            assert_eq!(field(l, "status"), "1", "{l}");
            field(l, "handle").to_string()
        })
        .collect();
    assert_eq!(released, handles, "every imported handle released at drop");
}

#[test]
fn nv16_and_yuyv_portrait_pad_on_the_right() {
    let s = session();
    let (w, h) = (480, 640);
    let rgb = colour_bars(w, h, false);
    let dl = model_input();
    for (sl, frame) in nv16_and_yuyv(&rgb, w, h) {
        let src = source_pool(&[&frame, &frame]);
        let mut dst = output_pool(2, &dl);
        let mut rga = s.open(RgaCore::Auto);
        rga.bind_pools(&src, &sl, &mut dst, &dl, TOP_LEFT).unwrap();
        let lb = rga.scale_index(1, 1).unwrap();
        assert_eq!((lb.resized_w, lb.resized_h), (312, 416));
        let got = dst[1].read().unwrap().to_vec();
        assert_letterbox(
            &got,
            &cpu_reference(&frame, &sl, &dl, TOP_LEFT),
            416 * 3,
            (0, 0, 312, 416),
            114,
            &format!("{} 480x640", sl.fourcc),
        );
        // Buffer 0 was never scaled into: pad filled at bind, picture untouched (0xEE).
        let untouched = dst[0].read().unwrap().to_vec();
        assert_eq!(&untouched[..3], &[0xEE; 3]);
        assert_eq!(&untouched[312 * 3..313 * 3], &[114; 3]);
    }
    assert!(s.calls("imconfig").is_empty(), "--rga-core auto configures nothing");
    let f: Vec<String> = s.calls("importbuffer_fd").iter().map(|l| field(l, "format").to_string()).collect();
    assert_eq!(f, ["0x800", "0x800", "0x700", "0x700", "0x1c00", "0x1c00", "0x700", "0x700"]);
}

#[test]
fn width_stride_650_is_refused_naming_16() {
    let s = session();
    let (w, h) = (640, 480);
    let (sl, frame) = nv12(&colour_bars(w, h, false), w, h, 650);
    let src = source_pool(&[&frame, &frame]);
    let dl = model_input();
    let mut dst = output_pool(2, &dl);
    let mut rga = s.open(RgaCore::Auto);
    let e = rga.bind_pools(&src, &sl, &mut dst, &dl, TOP_LEFT).unwrap_err().to_string();
    println!("{e}");
    assert!(e.contains("width stride 650 px is not a multiple of 16"), "{e}");
    assert!(e.contains("IM_STATUS_NOT_SUPPORTED") && e.contains("should be 16 aligned"), "librga's own words too: {e}");
    let checks = s.bind_checks();
    assert_eq!(checks.len(), 1);
    assert_eq!(field(&checks[0], "status"), "-1");
    // Nothing stays imported after a failed bind, and no job ran.
    let imported: HashSet<String> = s.calls("importbuffer_fd").iter().map(|l| field(l, "handle").to_string()).collect();
    let released: HashSet<String> =
        s.calls("releasebuffer_handle").iter().map(|l| field(l, "handle").to_string()).collect();
    assert_eq!(imported.len(), 4);
    assert_eq!(imported, released);
    assert!(s.calls("improcess").is_empty());
    // The pad was not written either: the output pool is as it was.
    assert!(dst[0].read().unwrap().iter().all(|&b| b == 0xEE));
    let e = rga.scale_index(0, 0).unwrap_err().to_string();
    assert!(e.contains("before bind"), "{e}");
}

#[test]
fn odd_size_scale_range_and_layouts_are_named() {
    let s = session();
    let dl = model_input();
    // An odd width (641, pitch 656): YUV needs even sizes.
    let (sl, frame) = nv12(&colour_bars(641, 480, false), 641, 480, 656);
    let mut dst = output_pool(1, &dl);
    let e = s
        .open(RgaCore::Auto)
        .bind_pools(&source_pool(&[&frame]), &sl, &mut dst, &dl, TOP_LEFT)
        .unwrap_err()
        .to_string();
    println!("{e}");
    assert!(e.contains("even sizes") && e.contains("IM_STATUS_INVALID_PARAM"), "{e}");
    // 16x16 -> 416x416 is 26x: beyond 16x.
    let (sl, frame) = nv12(&colour_bars(16, 16, false), 16, 16, 16);
    let e = s
        .open(RgaCore::Auto)
        .bind_pools(&source_pool(&[&frame]), &sl, &mut dst, &dl, TOP_LEFT)
        .unwrap_err()
        .to_string();
    println!("{e}");
    assert!(e.contains("1/16..16") && e.contains("26.0000"), "{e}");
    // NV12M: one dma-buf per plane is not something RGA reads; refused before any import.
    let (mut m, frame) = nv12(&colour_bars(64, 48, false), 64, 48, 64);
    m.fourcc = Fourcc::NV12M;
    let e =
        s.open(RgaCore::Auto).bind_pools(&source_pool(&[&frame]), &m, &mut dst, &dl, TOP_LEFT).unwrap_err().to_string();
    assert!(e.contains("NV12M") && e.contains("--format NV12"), "{e}");
    // A 488-row vertical stride whose buffer ends right after 240 chroma rows: the layout
    // fits, but RGA's image (wstride x hstride x 3/2 = 468480 bytes) does not (PITFALLS 10).
    let tight = layout(
        Fourcc::NV12,
        640,
        480,
        &[
            PlaneDesc { offset: 0, bytesperline: 640, length: 640 * 480, fd_index: 0 },
            PlaneDesc { offset: 640 * 488, bytesperline: 640, length: 640 * 240, fd_index: 0 },
        ],
    );
    let frame = vec![16u8; 640 * 488 + 640 * 240];
    let e = s
        .open(RgaCore::Auto)
        .bind_pools(&source_pool(&[&frame]), &tight, &mut dst, &dl, TOP_LEFT)
        .unwrap_err()
        .to_string();
    println!("{e}");
    assert!(e.contains("Only get buffer") && e.contains("468480"), "{e}");
    // RGB24 into an RGB24 model input works too.
    let rgb = colour_bars(64, 48, false);
    let rl =
        layout(Fourcc::RGB24, 64, 48, &[PlaneDesc { offset: 0, bytesperline: 192, length: 192 * 48, fd_index: 0 }]);
    let rdl = FrameLayout::packed24(Fourcc::RGB24, 416, 416, 1248);
    let mut rdst = output_pool(1, &rdl);
    let mut rga = s.open(RgaCore::Rga2Core0);
    rga.bind_pools(&source_pool(&[&rgb]), &rl, &mut rdst, &rdl, Letterbox::new(Placement::TopLeft, 0)).unwrap();
    rga.scale_index(0, 0).unwrap();
    let out = rdst[0].read().unwrap().to_vec();
    assert_eq!(&out[..3], &[255, 255, 255], "white bar, RGB order");
    assert_eq!(&out[(10 * 416 + 410) * 3..][..3], &[0, 0, 0], "black bar at the right");
    assert_eq!(&out[(400 * 416) * 3..][..3], &[0, 0, 0], "pad 0 below the 416x312 picture");
    drop(rga);
    assert!(s.calls("imconfig").iter().any(|l| l == "imconfig name=0 value=0x4 status=1"));
    assert_eq!(s.calls("importbuffer_fd").len(), s.calls("releasebuffer_handle").len(), "every import released");
}

#[test]
fn missing_library_names_the_fix() {
    let _s = session();
    let e = RgaScaler::open(Some(Path::new("/nonexistent/librga.so")), RgaCore::Auto).unwrap_err().to_string();
    assert!(e.contains("/nonexistent/librga.so") && e.contains("ZCPIPE_LIBRGA") && e.contains("librga2"), "{e}");
}

#[test]
fn no_rga_device_is_refused_before_querystring() {
    let s = session();
    // As librga 1.10.3 behaves where /dev/rga cannot be opened; its querystring() would crash
    // (the fake aborts the process), so this test also proves open() never calls it then.
    std::env::set_var("ZCPIPE_FAKE_RGA_NO_DEVICE", "1");
    let r = RgaScaler::open(Some(&s.fake.lib), RgaCore::Auto);
    std::env::remove_var("ZCPIPE_FAKE_RGA_NO_DEVICE");
    let e = r.unwrap_err().to_string();
    println!("{e}");
    assert!(e.contains("IM_STATUS_NO_SESSION") && e.contains("/dev/rga") && e.contains("udev/99-zcpipe.rules"), "{e}");
    assert!(s.calls("querystring").is_empty());

    // A job that fails after a good bind (here: the session goes away) is an error naming
    // both buffers and librga's status, with the 4 GiB hint (PITFALLS 1).
    let (sl, frame) = nv12(&colour_bars(64, 48, false), 64, 48, 64);
    let dl = model_input();
    let mut dst = output_pool(1, &dl);
    let mut rga = s.open(RgaCore::Auto);
    rga.bind_pools(&source_pool(&[&frame]), &sl, &mut dst, &dl, TOP_LEFT).unwrap();
    std::env::set_var("ZCPIPE_FAKE_RGA_NO_DEVICE", "1");
    let r = rga.scale_index(0, 0);
    std::env::remove_var("ZCPIPE_FAKE_RGA_NO_DEVICE");
    let e = r.unwrap_err().to_string();
    println!("{e}");
    assert!(
        e.contains("improcess of source buffer 0 into output buffer 0 failed: IM_STATUS_NO_SESSION")
            && e.contains("--heap dma32"),
        "{e}"
    );
    assert_eq!(rga.frames(), 0);
}

/// What Ultralytics and YOLOv5 models are fed: RGB24, the picture centred. RGA writes it
/// into the job's destination rectangle (the fake logs it), the pad is filled around it on
/// all sides, and the picture is the CPU scaler's, for a landscape NV12 frame (pad rows
/// above and below) and a portrait YUYV one (pad columns left and right).
#[test]
fn rgb24_centred_letterbox_matches_cpu() {
    let s = session();
    let dl = FrameLayout::packed24(Fourcc::RGB24, 416, 416, 416 * 3);
    let (sl, nv12_frame) = nv12(&colour_bars(640, 480, false), 640, 480, 640);
    let [_, (yl, yuyv_frame)] = nv16_and_yuyv(&colour_bars(480, 640, false), 480, 640);
    for ((sl, frame), picture, drect) in [
        ((sl, nv12_frame), (0usize, 52usize, 416usize, 312usize), "0,52,416,312"),
        ((yl, yuyv_frame), (52, 0, 312, 416), "52,0,312,416"),
    ] {
        let src = source_pool(&[&frame]);
        let mut dst = output_pool(1, &dl);
        let mut rga = s.open(RgaCore::Auto);
        rga.bind_pools(&src, &sl, &mut dst, &dl, CENTER).unwrap();
        let lb = rga.scale_index(0, 0).unwrap();
        assert_eq!(lb.picture(), (picture.0 as u32, picture.1 as u32, picture.2 as u32, picture.3 as u32), "{lb:?}");
        // The picture's corners map back to the frame's.
        let (x, y, w, h) = (picture.0 as f32, picture.1 as f32, picture.2 as f32, picture.3 as f32);
        let back = lb.unmap_box([x, y, x + w, y + h]);
        let whole = [0.0, 0.0, sl.width as f32, sl.height as f32];
        assert!(back.iter().zip(whole).all(|(a, b)| (a - b).abs() < 0.01), "{back:?} vs {whole:?}");
        let got = dst[0].read().unwrap().to_vec();
        let what = format!("{} {}x{} -> RGB24 centred", sl.fourcc, sl.width, sl.height);
        assert_letterbox(&got, &cpu_reference(&frame, &sl, &dl, CENTER), 416 * 3, picture, 114, &what);
        // White first (top-left of the picture), in RGB order either way.
        let first = &got[(picture.1 * 416 + picture.0) * 3..][..3];
        assert!(first.iter().all(|&v| v >= 250), "{what}: {first:?}");
        let jobs = s.calls("improcess");
        let last = jobs.last().unwrap();
        assert_eq!(field(last, "drect"), drect, "{last}");
        assert_eq!(field(last, "status"), "1", "{last}");
        println!("{what}: improcess drect={drect}");
    }
    let f: Vec<String> = s.calls("importbuffer_fd").iter().map(|l| field(l, "format").to_string()).collect();
    assert!(f.iter().filter(|x| *x == "0x200").count() == 2, "the model input imported as RK_FORMAT_RGB_888: {f:?}");
}

/// The inference service's jobs: a source imported once and used for frames of two sizes,
/// the pad refilled only when the picture moves, the same pixels by address, and the
/// handles released.
#[test]
fn one_off_jobs_import_once_refill_the_pad_and_release() {
    let s = session();
    let dl = model_input();
    let (l1, f1) = nv12(&colour_bars(640, 480, false), 640, 480, 640);
    let (l2, f2) = nv12(&colour_bars(640, 360, true), 640, 360, 640);
    let mut src = source_pool(&[&f1]).remove(0).remove(0);
    let mut out = output_pool(1, &dl).remove(0);
    let mut jobs = RgaJobs::new(s.open(RgaCore::Auto));
    let sh = jobs.import_source("a client's buffer", &src).unwrap();
    let oh = jobs.import_output("the model input", &out, &dl).unwrap();
    let lb = jobs.convert(sh, &l1, oh, &mut out, TOP_LEFT).unwrap();
    assert_eq!(lb.picture(), (0, 0, 416, 312));
    let got = out.read().unwrap().to_vec();
    assert_letterbox(
        &got,
        &cpu_reference(&f1, &l1, &dl, TOP_LEFT),
        416 * 3,
        (0, 0, 416, 312),
        114,
        "jobs NV12 640x480",
    );
    // By address, into CPU memory: the same bytes.
    let mut cpu = vec![0xEEu8; dl.bytes_needed() as usize];
    jobs.convert_virtual(&f1, &l1, &mut cpu, &dl, TOP_LEFT).unwrap();
    let diff: Vec<usize> = got.iter().zip(&cpu).enumerate().filter(|(_, (a, b))| a != b).map(|(i, _)| i).collect();
    assert!(
        diff.is_empty(),
        "by handle and by address: the same pixels; {} differ, first {:?}",
        diff.len(),
        &diff[..diff.len().min(10)]
    );
    // A wider frame in the same buffer: the picture shrinks, the old pixels become pad.
    src.write().unwrap()[..f2.len()].copy_from_slice(&f2);
    let lb = jobs.convert(sh, &l2, oh, &mut out, TOP_LEFT).unwrap();
    assert_eq!(lb.picture(), (0, 0, 416, 234));
    let got = out.read().unwrap().to_vec();
    assert_letterbox(
        &got,
        &cpu_reference(&f2, &l2, &dl, TOP_LEFT),
        416 * 3,
        (0, 0, 416, 234),
        114,
        "jobs NV12 640x360",
    );
    // Another client's portrait frame: the pad moves to the right.
    let (l3, f3) = nv12(&colour_bars(480, 640, false), 480, 640, 480);
    let src3 = source_pool(&[&f3]).remove(0).remove(0);
    let sh3 = jobs.import_source("another client's buffer", &src3).unwrap();
    let lb = jobs.convert(sh3, &l3, oh, &mut out, TOP_LEFT).unwrap();
    assert_eq!(lb.picture(), (0, 0, 312, 416));
    let got = out.read().unwrap().to_vec();
    let want = cpu_reference(&f3, &l3, &dl, TOP_LEFT);
    assert_letterbox(&got, &want, 416 * 3, (0, 0, 312, 416), 114, "jobs NV12 480x640");
    // A frame larger than the buffer imported is refused before RGA sees it.
    let big = FrameLayout::nv12(1920, 1080, 16);
    let e = jobs.convert(sh, &big, oh, &mut out, TOP_LEFT).unwrap_err().to_string();
    assert!(e.contains(&format!("needs 3110400 bytes; its buffer has {}", src.size())), "{e}");
    assert_eq!(jobs.jobs(), 4);
    let imports = s.calls("importbuffer_fd");
    assert_eq!(imports.len(), 3, "each buffer imported once: {imports:?}");
    jobs.release(sh);
    jobs.release(sh3);
    drop(jobs);
    let released: HashSet<String> =
        s.calls("releasebuffer_handle").iter().map(|l| field(l, "handle").to_string()).collect();
    let handles: HashSet<String> = imports.iter().map(|l| field(l, "handle").to_string()).collect();
    assert_eq!(released, handles, "every handle released (the sources by release, the output on drop)");
}

//! zcpipe's MPP H.264 encoder (`Encoder`, crates/sys/src/mpp/encoder.rs) against the ABI fake
//! of librockchip_mpp (`fakes/librockchip_mpp`, which encodes with an ffmpeg libx264 child):
//! 30 NV12 frames of a moving pattern, written into memfd buffers at 320x240 (strides 320 and
//! 240, then a 336-byte row pitch with garbage in the padding), encoded in place, come back as
//! 30 packets with their pts, an IDR picture first and every GOP-th (and where one is forced),
//! SPS and PPS in each IDR's packet; the packets concatenated are an H.264 stream ffprobe
//! reads as 30 High-profile 320x240 frames, and blocks of ffmpeg's decode have the luma
//! written. The fake's call log shows each buffer imported once and put after
//! `mpp_destroy`, and no violation of MPP's rules.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use zcpipe::core::dmabuf::{Allocator, DmaBuf, HeapChoice};
use zcpipe::sys::mpp::{EncodedPacket, Encoder, EncoderOptions, Libmpp};

use crate::common;

const W: usize = 320;
const H: usize = 240;
const FRAMES: usize = 30;
const GOP: u32 = 10;
/// The bright square's side and luma, over a gradient background.
const SQUARE: usize = 48;
const SQUARE_LUMA: u8 = 220;

/// Luma of pixel (`x`, `y`) of frame `i`: a diagonal gradient moving right, and a square
/// moving down-right.
fn luma_at(i: usize, x: usize, y: usize) -> u8 {
    let (sx, sy) = (20 + 6 * i, 30 + 3 * i);
    if (sx..sx + SQUARE).contains(&x) && (sy..sy + SQUARE).contains(&y) {
        SQUARE_LUMA
    } else {
        (40 + (x + y / 2 + 2 * i) % 128) as u8
    }
}

/// Frame `i` as NV12 at `hor` x `ver`: grey chroma, and 0xEE in the row padding (never to be
/// seen in the picture).
fn nv12(i: usize, hor: usize, ver: usize) -> Vec<u8> {
    let mut b = vec![0xEE; hor * ver * 3 / 2];
    for y in 0..H {
        for x in 0..W {
            b[y * hor + x] = luma_at(i, x, y);
        }
    }
    for y in 0..H / 2 {
        b[hor * ver + y * hor..hor * ver + y * hor + W].fill(128);
    }
    b
}

/// Mean luma of the `n` x `n` block at (`x`, `y`) of a `W`-wide luma plane.
fn mean(luma: &[u8], x: usize, y: usize, n: usize) -> f64 {
    let sum: u64 = (y..y + n).flat_map(|r| &luma[r * W + x..r * W + x + n]).map(|v| u64::from(*v)).sum();
    sum as f64 / (n * n) as f64
}

fn tool(name: &str, args: &[&str]) -> Vec<u8> {
    let out =
        Command::new(name).args(args).output().unwrap_or_else(|e| panic!("running {name}: {e} (apt install ffmpeg)"));
    assert!(out.status.success(), "{name} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// NAL unit types of Annex-B `data`, in order.
fn nal_types(data: &[u8]) -> Vec<u8> {
    data.windows(4).filter(|w| w[..3] == [0, 0, 1]).map(|w| w[3] & 0x1f).collect()
}

/// Encodes the `FRAMES` frames at row pitch `hor` through 4 rotating memfd buffers
/// (`force_idr` on frame `force`), checks the packets and the decoded stream, and returns the
/// fake's log lines.
fn encode_and_check(hor: usize, force: Option<usize>) -> Vec<String> {
    let _turn = common::FAKE_MPP_IN_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    let log = tempfile::NamedTempFile::new().unwrap();
    std::env::set_var("ZCPIPE_FAKE_MPP_LOG", log.path());
    let lib = Arc::new(Libmpp::open(Some(common::fake_librockchip_mpp())).unwrap());
    let opts = EncoderOptions {
        width: W as u32,
        height: H as u32,
        hor_stride: hor as u32,
        ver_stride: H as u32,
        fps: 30,
        gop: GOP,
        bitrate: 2_000_000,
    };
    let alloc = Allocator::open(
        HeapChoice::Memfd,
        Path::new("/nonexistent"),
        Path::new("/nonexistent"),
        Path::new("/nonexistent"),
    )
    .unwrap();
    let mut pool: Vec<DmaBuf> = alloc.allocate_pool(4, opts.frame_bytes() as u64).unwrap();
    let mut enc = Encoder::new(lib, &opts).expect("an encoder on the fake");
    let mut packets: Vec<EncodedPacket> = Vec::new();
    for i in 0..FRAMES {
        let buf = &mut pool[i % 4];
        let frame = nv12(i, hor, H);
        buf.write().unwrap()[..frame.len()].copy_from_slice(&frame);
        let pts = 90_000 + 3000 * i as i64;
        packets.push(enc.encode(buf.fd(), buf.size() as usize, pts, force == Some(i)).unwrap());
    }
    assert_eq!((enc.encoded(), enc.imported()), (FRAMES as u64, 4));
    enc.destroy().unwrap();

    for (i, p) in packets.iter().enumerate() {
        let key = i % GOP as usize == 0 || force == Some(i);
        if force.is_none_or(|f| i <= f + 4) {
            assert_eq!(p.key, key, "packet {i}: {:?}", nal_types(&p.data));
        }
        assert_eq!(p.pts, 90_000 + 3000 * i as i64);
        let types = nal_types(&p.data);
        // SPS and PPS before every IDR slice (MPP_ENC_HEADER_MODE_EACH_IDR); no AUD (MPP writes none).
        assert_eq!(p.key, types.contains(&5), "packet {i}: {types:?}");
        assert_eq!(p.key, types.starts_with(&[7, 8]), "packet {i}: {types:?}");
        assert!(!types.contains(&9), "packet {i}: {types:?}");
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("out.h264");
    std::fs::write(&file, packets.iter().flat_map(|p| p.data.clone()).collect::<Vec<u8>>()).unwrap();
    let f = file.to_str().unwrap();
    let probe = tool(
        "ffprobe",
        &["-v", "error", "-select_streams", "v", "-count_frames", "-show_entries"]
            .into_iter()
            .chain(["stream=codec_name,profile,width,height,nb_read_frames", "-of", "csv=p=0", "-f", "h264", f])
            .collect::<Vec<_>>(),
    );
    assert_eq!(String::from_utf8_lossy(&probe).trim(), format!("h264,High,{W},{H},{FRAMES}"));
    // yuv420p as coded (`gray` would stretch the limited-range luma to full range).
    let raw =
        tool("ffmpeg", &["-v", "error", "-f", "h264", "-i", f, "-f", "rawvideo", "-pix_fmt", "yuv420p", "pipe:1"]);
    assert_eq!(raw.len(), FRAMES * W * H * 3 / 2);
    for (i, picture) in raw.chunks(W * H * 3 / 2).enumerate() {
        let luma = &picture[..W * H];
        // Inside the square, a background block, and the right edge (where a wrong row pitch
        // would shear the picture or show the padding's 0xEE).
        let (sx, sy) = (20 + 6 * i, 30 + 3 * i);
        let written: Vec<u8> = (0..H).flat_map(|r| (0..W).map(move |c| luma_at(i, c, r))).collect();
        for (x, y, n) in [(sx + 8, sy + 8, 32), (8, 200, 24), (W - 24, 100, 24)] {
            let (got, want) = (mean(luma, x, y, n), mean(&written, x, y, n));
            assert!(
                (got - want).abs() <= 3.0,
                "frame {i} block ({x},{y}): decoded mean luma {got:.1}, written {want:.1}"
            );
        }
    }
    std::fs::read_to_string(log.path()).unwrap().lines().map(String::from).collect()
}

/// The log lines of call `name`.
fn calls<'a>(log: &'a [String], name: &str) -> Vec<&'a String> {
    log.iter().filter(|l| l.split(' ').nth(1) == Some(name)).collect()
}

#[test]
fn mpp_encoder_encodes_nv12_dma_bufs_in_place_into_h264() {
    let log = encode_and_check(W, None);
    assert!(!log.iter().any(|l| l.contains("violation")), "{log:#?}");
    assert_eq!(calls(&log, "encode_put_frame").len(), FRAMES);
    assert_eq!(calls(&log, "encode_get_packet").len(), FRAMES);
    // Each of the 4 buffers imported once, every import put back after mpp_destroy.
    let imports = calls(&log, "mpp_buffer_import");
    assert_eq!(imports.len(), 4, "{imports:#?}");
    let destroy = log.iter().position(|l| l.split(' ').nth(1) == Some("mpp_destroy")).expect("mpp_destroy");
    assert!(log[destroy].contains("frames_in=30 packets_out=30 packets_not_taken=0"), "{}", log[destroy]);
    let puts: Vec<usize> =
        log.iter().enumerate().filter(|(_, l)| l.split(' ').nth(1) == Some("mpp_buffer_put")).map(|(i, _)| i).collect();
    assert!(puts.len() == 4 && puts.iter().all(|p| *p > destroy), "puts at {puts:?}, mpp_destroy at {destroy}");
    let cfg = calls(&log, "control").into_iter().find(|l| l.contains("MPP_ENC_SET_CFG")).expect("MPP_ENC_SET_CFG");
    for want in
        ["width=320", "hor_stride=320", "ver_stride=240", "fps=30/1", "gop=10", "rc_mode=1", "profile=100", "level=40"]
    {
        assert!(cfg.contains(want), "{want} in {cfg}");
    }
    assert!(calls(&log, "control")
        .iter()
        .any(|l| l.contains("MPP_ENC_SET_HEADER_MODE") && l.contains("value=1 ret=0")));
}

#[test]
fn mpp_encoder_reads_rows_at_the_buffers_pitch_and_forces_an_idr() {
    let log = encode_and_check(336, Some(15));
    assert!(!log.iter().any(|l| l.contains("violation")), "{log:#?}");
    assert!(calls(&log, "encode_put_frame").iter().all(|l| l.contains("hor_stride=336")));
    assert_eq!(calls(&log, "control").iter().filter(|l| l.contains("MPP_ENC_SET_IDR_FRAME")).count(), 1);
}

//! The whole pipeline with the hardware decoder: an H.264 file through `--decoder mpp
//! --scaler rga --infer rknn`, against the ABI fakes of librockchip_mpp, librga and librknnrt
//! (their call logs are the evidence), compared with the same run decoded by ffmpeg on the
//! CPU (`--decoder cpu`). The RTSP case is in tests/pipeline/rtsp.rs (it needs the RTSP server).
//!
//! What zero-copy means here, checked from the logs: every capture buffer is committed to
//! MPP once and imported by RGA once; the buffer MPP wrote picture k into (its inode) is the
//! one RGA read for frame k; no CPU access to a decoded picture (the capture stage's
//! `cpu_accesses` is 0; the scale stage's are the letterbox pad fills of its own output
//! buffers at set-up); every MPP frame and buffer is released by the end; detections equal
//! the CPU decoder's.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{
    assert_no_orphans, fake_librga, fake_librknnrt, fake_librockchip_mpp, log_field, root, zcpipe, zcpipe_run,
};
use serde_json::Value;

const CLIP: &str = "tests/data/one-by-one-person-detection.mp4";
const FRAMES: usize = 20;

/// Encodes 2 s of the bundled clip (from 7 s on: the person is in view) at 640x360 (360 rows:
/// MPP's ver_stride is 368, so the CbCr plane is not right after the picture's rows) with
/// `codec` (`libx264`), 10 fps; `None` if this ffmpeg lacks the encoder.
fn clip(dir: &Path, codec: &str, name: &str) -> Option<PathBuf> {
    let enc = Command::new("ffmpeg").args(["-hide_banner", "-encoders"]).output().unwrap();
    if !String::from_utf8_lossy(&enc.stdout).contains(codec) {
        return None;
    }
    let out = dir.join(name);
    let st = Command::new("ffmpeg")
        .args(["-nostdin", "-loglevel", "error", "-y", "-ss", "7", "-t", "2", "-i"])
        .arg(root().join(CLIP))
        .args(["-vf", "scale=640:360", "-r", "10", "-c:v", codec, "-g", "10", "-pix_fmt", "yuv420p", "-an"])
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success(), "ffmpeg could not make {name}");
    Some(out)
}

/// What one run left: its exit, stderr, frame lines and summary, and the fakes' logs.
struct Ran {
    ok: bool,
    err: String,
    frames: Vec<Value>,
    summary: Value,
    mpp: String,
    rga: String,
}

/// `zcpipe run` of `source` with the fakes, `--decoder decoder`, every frame pushed through
/// (`--ring-policy block`), plus `extra`.
fn run(dir: &Path, source: &str, decoder: &str, extra: &[&str]) -> Ran {
    let out = zcpipe_run(dir)
        .env("ZCPIPE_LIBMPP", fake_librockchip_mpp())
        .env("ZCPIPE_FAKE_MPP_LOG", dir.join("mpp.log"))
        .env("ZCPIPE_LIBRGA", fake_librga())
        .env("ZCPIPE_FAKE_RGA_LOG", dir.join("rga.log"))
        .env("ZCPIPE_LIBRKNNRT", fake_librknnrt())
        .env("ZCPIPE_FAKE_RKNN_LOG", dir.join("rknn.log"))
        .env("ZCPIPE_FAKE_RKNN_ONNX", root().join("models/yolox_nano.onnx"))
        .args([
            "--source",
            source,
            "--decoder",
            decoder,
            "--scaler",
            "rga",
            "--infer",
            "rknn",
            "--model",
            "models/yolox_nano_416_rk3588.rknn",
        ])
        .args(["--fps", "20", "--ring-policy", "block", "--json", "--stats-interval", "0"])
        .args(extra)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    let frames = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "frame")
        .collect();
    let summary = std::fs::read(dir.join("summary.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null);
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
    Ran { ok: out.status.success(), err, frames, summary, mpp: read("mpp.log"), rga: read("rga.log") }
}

/// The lines of call `name` in a fake's log (the first word after an optional `pid=N`).
fn calls<'a>(log: &'a str, name: &str) -> Vec<&'a str> {
    log.lines().filter(|l| l.split(' ').find(|w| !w.starts_with("pid=")) == Some(name)).collect()
}

/// The `handle=` of `side` (`src`, `dst`) in the fake librga's `improcess` line.
fn handle_of<'a>(line: &'a str, side: &str) -> &'a str {
    let at =
        line.find(&format!("{side}[handle=")).unwrap_or_else(|| panic!("no {side} handle in {line}")) + side.len() + 8;
    line[at..].split([' ', ']']).next().unwrap()
}

/// A frame line's detections as (label, score, box).
fn detections(f: &Value) -> Vec<(String, f64, Vec<f64>)> {
    f["detections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["label"].as_str().unwrap().to_string(),
                d["score"].as_f64().unwrap(),
                d["box"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect(),
            )
        })
        .collect()
}

/// The same detections within a pixel and 0.02 of score, frame by frame.
fn assert_same_detections(a: &[Value], b: &[Value]) -> usize {
    assert_eq!(a.len(), b.len());
    let mut n = 0;
    for (fa, fb) in a.iter().zip(b) {
        let (da, db) = (detections(fa), detections(fb));
        assert_eq!(da.len(), db.len(), "frame {}: {da:?} vs {db:?}", fa["seq"]);
        for (x, y) in da.iter().zip(&db) {
            assert_eq!(x.0, y.0, "frame {}", fa["seq"]);
            assert!((x.1 - y.1).abs() <= 0.02, "frame {}: score {} vs {}", fa["seq"], x.1, y.1);
            for (p, q) in x.2.iter().zip(&y.2) {
                assert!((p - q).abs() <= 1.0, "frame {}: box {:?} vs {:?}", fa["seq"], x.2, y.2);
            }
            n += 1;
        }
    }
    n
}

/// An H.264 file decoded by (the fake) MPP into the capture pool, scaled by (the fake) RGA
/// from the same dma-bufs and detected by (the fake) RKNN: zero-copy from decoder to NPU,
/// every buffer released, the same detections as ffmpeg's CPU decode.
#[test]
fn an_h264_file_goes_from_mpp_to_rga_to_rknn_without_a_copy() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(file) = clip(tmp.path(), "libx264", "clip.mp4") else {
        eprintln!("SKIP: this ffmpeg has no libx264");
        return;
    };
    let source = format!("video:{}", file.display());
    let (dm, dc) = (tmp.path().join("mpp"), tmp.path().join("cpu"));
    std::fs::create_dir_all(&dm).unwrap();
    std::fs::create_dir_all(&dc).unwrap();
    let m = run(&dm, &source, "mpp", &[]);
    assert!(m.ok, "{}", m.err);
    assert_no_orphans(&dm);
    assert!(m.err.contains("decoder: --decoder mpp:") && m.err.contains("decoded by MPP"), "{}", m.err);
    assert_eq!(m.frames.len(), FRAMES, "{}", m.err);
    for f in &m.frames {
        assert_eq!((f["width"].as_u64(), f["height"].as_u64()), (Some(640), Some(360)), "{f}");
    }

    // MPP: 24 buffers committed once each (distinct inodes), 20 pictures with their strides.
    let commits: BTreeMap<String, String> = calls(&m.mpp, "mpp_buffer_commit")
        .iter()
        .map(|l| (log_field(l, "index").to_string(), log_field(l, "ino").to_string()))
        .collect();
    assert_eq!(calls(&m.mpp, "mpp_buffer_commit").len(), 24, "{}", m.mpp);
    assert_eq!(commits.values().collect::<BTreeSet<_>>().len(), 24, "distinct inodes: {commits:?}");
    let pictures: Vec<&str> = calls(&m.mpp, "decode_get_frame")
        .into_iter()
        .filter(|l| l.contains(" info_change=0") && !l.contains(" index=-1"))
        .collect();
    assert_eq!(pictures.len(), FRAMES, "{}", m.mpp);
    for p in &pictures {
        assert_eq!((log_field(p, "hor_stride"), log_field(p, "ver_stride")), ("640", "368"), "{p}");
    }
    let mpp_inos: Vec<&String> = pictures.iter().map(|p| &commits[log_field(p, "index")]).collect();

    // RGA: each capture buffer imported once; frame k read from the inode MPP wrote picture k into.
    let imports = calls(&m.rga, "importbuffer_fd");
    let handle_ino: BTreeMap<&str, &str> =
        imports.iter().map(|l| (log_field(l, "handle"), log_field(l, "ino"))).collect();
    let capture_imports = imports.iter().filter(|l| commits.values().any(|c| c == log_field(l, "ino"))).count();
    assert_eq!(capture_imports, 24, "every capture buffer imported by RGA once: {}", m.rga);
    let src_inos: Vec<&str> = calls(&m.rga, "improcess").iter().map(|l| handle_ino[handle_of(l, "src")]).collect();
    assert_eq!(src_inos.len(), FRAMES, "{}", m.rga);
    for (k, (a, b)) in mpp_inos.iter().zip(&src_inos).enumerate() {
        assert_eq!(a.as_str(), *b, "frame {k}: MPP wrote inode {a}, RGA read inode {b}");
    }

    // No CPU access to a decoded picture; everything released.
    let st = &m.summary["stages"];
    let cap = &st["capture"]["extra"];
    assert_eq!(cap["cpu_accesses"], 0, "capture touched a decoded picture: {cap}");
    let scale_dst: BTreeSet<&str> = calls(&m.rga, "improcess").iter().map(|l| handle_of(l, "dst")).collect();
    assert_eq!(
        st["scale"]["extra"]["cpu_accesses"].as_u64(),
        Some(scale_dst.len() as u64),
        "the scale stage's only CPU accesses are the pad fills of its {} output buffers",
        scale_dst.len()
    );
    assert_eq!(
        (
            cap["decoder"].as_str(),
            cap["codec"].as_str(),
            cap["pictures"].as_u64(),
            cap["frames_released"].as_u64(),
            cap["frames_held"].as_u64()
        ),
        (Some("mpp"), Some("h264"), Some(FRAMES as u64), Some(FRAMES as u64), Some(0)),
        "{cap}"
    );
    let destroy = calls(&m.mpp, "mpp_destroy");
    let destroy =
        destroy.iter().find(|l| l.contains(&format!(" frames_out={FRAMES}"))).unwrap_or_else(|| panic!("{}", m.mpp));
    assert_eq!((log_field(destroy, "unreleased_frames"), log_field(destroy, "buffers_held")), ("0", "0"), "{destroy}");
    assert!(!m.mpp.contains("violation"), "{}", m.mpp);

    // The CPU decoder's run: the same detections.
    let c = run(&dc, &source, "cpu", &[]);
    assert!(c.ok, "{}", c.err);
    assert!(c.mpp.is_empty(), "--decoder cpu never loads MPP: {}", c.mpp);
    assert!(
        c.summary["stages"]["capture"]["extra"]["cpu_accesses"].as_u64().unwrap() >= FRAMES as u64,
        "the CPU decoder writes each frame through a CPU access"
    );
    let n = assert_same_detections(&m.frames, &c.frames);
    assert!(n >= 10, "only {n} detections to compare");
    eprintln!(
        "EVIDENCE mpp file: {FRAMES} pictures 640x360 (hor_stride 640, ver_stride 368) in 24 committed buffers; RGA imported each once and read frame k from MPP's inode for picture k; capture cpu_accesses 0, scale {}; {n} detections equal to --decoder cpu's",
        scale_dst.len()
    );
}

/// Recorded while MPP decodes: the demuxer that feeds MPP also writes the stream's packets
/// for the recorder, so the clip is the file's own H.264 (its profile, no re-encode).
#[test]
fn a_camera_decoded_by_mpp_is_recorded_from_its_own_packets() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(file) = clip(tmp.path(), "libx264", "clip.mp4") else {
        eprintln!("SKIP: this ffmpeg has no libx264");
        return;
    };
    let clips = tmp.path().join("clips");
    let d = tmp.path().join("run");
    std::fs::create_dir_all(&d).unwrap();
    let source = format!("video:{}", file.display());
    let flags = ["--record-dir", clips.to_str().unwrap(), "--record-pre", "0", "--record-post", "0"];
    let m = run(&d, &source, "mpp", &flags);
    assert!(m.ok, "{}", m.err);
    assert!(m.err.contains("decoded by MPP"), "{}", m.err);
    let rows = zcpipe_record::index::Index::open_read(&clips).unwrap().list(None, 10).unwrap();
    assert_eq!(rows.len(), 1, "the person's clip: {rows:?}\n{}", m.err);
    let probe = |f: &Path| {
        let out = Command::new("ffprobe")
            .args(["-v", "error", "-select_streams", "v:0", "-show_entries", "stream=codec_name,profile,width,height"])
            .args(["-of", "csv=p=0"])
            .arg(f)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let (got, want) = (probe(&clips.join(&rows[0].path)), probe(&file));
    assert_eq!(got, want, "the file's own stream, not re-encoded");
    assert!(got.starts_with("h264,High,640,360"), "{got}");
    assert!(!calls(&m.mpp, "decode_put_packet").is_empty(), "MPP decoded the frames");
}

/// `--copy-mode` with the hardware decoder: each decoded picture is copied out over the socket
/// (one CPU access per frame in capture), RGA imports none of the capture buffers, and MPP's
/// frames are all released.
#[test]
fn copy_mode_copies_the_decoded_pictures() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(file) = clip(tmp.path(), "libx264", "clip.mp4") else {
        eprintln!("SKIP: this ffmpeg has no libx264");
        return;
    };
    let m = run(tmp.path(), &format!("video:{}", file.display()), "mpp", &["--copy-mode"]);
    assert!(m.ok, "{}", m.err);
    assert_eq!(m.frames.len(), FRAMES, "{}", m.err);
    let cap = &m.summary["stages"]["capture"];
    assert_eq!(cap["extra"]["cpu_accesses"].as_u64(), Some(FRAMES as u64), "one read per copied picture: {cap}");
    assert_eq!(cap["copy_out"]["frames"].as_u64(), Some(FRAMES as u64), "{cap}");
    let commits: BTreeSet<&str> = calls(&m.mpp, "mpp_buffer_commit").iter().map(|l| log_field(l, "ino")).collect();
    assert!(
        calls(&m.rga, "importbuffer_fd").iter().all(|l| !commits.contains(log_field(l, "ino"))),
        "copy mode: RGA imports no capture buffer"
    );
    let destroy = calls(&m.mpp, "mpp_destroy");
    assert!(destroy.iter().any(|l| l.contains(" unreleased_frames=0 buffers_held=0")), "{}", m.mpp);
}

/// Bad input through `--decoder mpp`: a codec MPP does not decode here, a file that is not
/// video, and a stream corrupted in the middle. Each ends cleanly: the first two in one line
/// naming the file and the fix, the third decodes what it can.
#[test]
fn bad_streams_fail_in_one_line_or_decode_what_they_can() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let Some(h264) = clip(d, "libx264", "clip.mp4") else {
        eprintln!("SKIP: this ffmpeg has no libx264");
        return;
    };
    let err_of = |args: &[&str]| {
        let out = zcpipe()
            .env("ZCPIPE_LIBMPP", fake_librockchip_mpp())
            .args(["stage", "capture"])
            .args(args)
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).to_string())
    };
    // MPEG-4 Part 2 (ffmpeg's own encoder, always there): MPP does not take it here.
    let m4v = d.join("clip.avi");
    let st = Command::new("ffmpeg")
        .args(["-nostdin", "-loglevel", "error", "-y", "-i"])
        .arg(&h264)
        .args(["-c:v", "mpeg4"])
        .arg(&m4v)
        .status()
        .unwrap();
    assert!(st.success());
    let run_dir = d.join("run");
    let rd = run_dir.display().to_string();
    let (code, e) = err_of(&["--run-dir", &rd, "--source", &format!("video:{}", m4v.display()), "--decoder", "mpp"]);
    assert_eq!(code, Some(1), "{e}");
    assert!(e.contains("its video is mpeg4") && e.contains("--decoder cpu"), "{e}");
    // Not a video at all.
    let junk = d.join("junk.h264");
    std::fs::write(&junk, vec![0x5au8; 100_000]).unwrap();
    let (code, e) = err_of(&["--run-dir", &rd, "--source", &format!("video:{}", junk.display()), "--decoder", "mpp"]);
    assert_eq!(code, Some(1), "{e}");
    assert!(e.contains("junk.h264") && e.lines().filter(|l| l.contains("error:")).count() == 1, "{e}");
    // 10-bit H.265 (when this ffmpeg has libx265): MPP would decode it to YUV420SP_10BIT.
    let enc = Command::new("ffmpeg").args(["-hide_banner", "-encoders"]).output().unwrap();
    if String::from_utf8_lossy(&enc.stdout).contains("libx265") {
        let ten = d.join("ten.mp4");
        let st = Command::new("ffmpeg")
            .args(["-nostdin", "-loglevel", "error", "-y", "-i"])
            .arg(&h264)
            .args(["-frames:v", "3", "-c:v", "libx265", "-pix_fmt", "yuv420p10le", "-x265-params", "log-level=error"])
            .arg(&ten)
            .status()
            .unwrap();
        assert!(st.success());
        let (code, e) =
            err_of(&["--run-dir", &rd, "--source", &format!("video:{}", ten.display()), "--decoder", "mpp"]);
        assert_eq!(code, Some(1), "{e}");
        assert!(e.contains("its video is hevc yuv420p10le") && e.contains("--decoder cpu"), "{e}");
    }
    // An MP4 cut short (70 % of it): decoded to where it ends, with one warning.
    let cut = d.join("cut.mp4");
    let st = Command::new("ffmpeg")
        .args(["-nostdin", "-loglevel", "error", "-y", "-i"])
        .arg(&h264)
        .args(["-c:v", "copy", "-movflags", "+faststart"])
        .arg(&cut)
        .status()
        .unwrap();
    assert!(st.success());
    let whole = std::fs::read(&cut).unwrap();
    std::fs::write(&cut, &whole[..whole.len() * 7 / 10]).unwrap();
    let c = d.join("cut");
    std::fs::create_dir_all(&c).unwrap();
    let r = run(&c, &format!("video:{}", cut.display()), "mpp", &[]);
    assert!(r.ok, "a file cut short ends cleanly: {}", r.err);
    let cap = &r.summary["stages"]["capture"]["extra"];
    let cut_pictures = cap["pictures"].as_u64().unwrap();
    assert!(cut_pictures >= 5 && cut_pictures < FRAMES as u64, "{cap}");
    assert_eq!(cap["demuxer_errors"], 1, "{cap}");
    assert_eq!(r.err.lines().filter(|l| l.contains("decoding what came (a file cut short?)")).count(), 1, "{}", r.err);
    // A corrupt middle: 4 KiB of the elementary stream overwritten.
    let es = d.join("clip.h264");
    let st = Command::new("ffmpeg")
        .args(["-nostdin", "-loglevel", "error", "-y", "-i"])
        .arg(&h264)
        .args(["-c:v", "copy", "-f", "h264"])
        .arg(&es)
        .status()
        .unwrap();
    assert!(st.success());
    let mut bytes = std::fs::read(&es).unwrap();
    let mid = bytes.len() / 2;
    for b in &mut bytes[mid..mid + 4096] {
        *b = 0xa5;
    }
    std::fs::write(&es, &bytes).unwrap();
    let c = d.join("corrupt");
    std::fs::create_dir_all(&c).unwrap();
    let r = run(&c, &format!("video:{}", es.display()), "mpp", &[]);
    assert!(r.ok, "a corrupt stream ends cleanly: {}", r.err);
    let cap = &r.summary["stages"]["capture"]["extra"];
    let pictures = cap["pictures"].as_u64().unwrap();
    assert!(pictures >= 10 && pictures <= FRAMES as u64 + 2, "{cap}");
    assert!(
        calls(&r.mpp, "mpp_destroy").iter().any(|l| l.contains(" unreleased_frames=0 buffers_held=0")),
        "{}",
        r.mpp
    );
    eprintln!("EVIDENCE mpp bad input: mpeg4 and 10-bit H.265 refused in one line; junk refused in one line; an MP4 cut at 70 % gave {cut_pictures} pictures, one warning, exit 0; a stream with 4 KiB overwritten gave {pictures} pictures and ended 0");
}

/// An elementary H.264 stream of `frames` frames of the bundled clip at `size` (`W:H`).
fn es(dir: &Path, name: &str, size: &str, frames: u32) -> PathBuf {
    let out = dir.join(name);
    let st = Command::new("ffmpeg")
        .args(["-nostdin", "-loglevel", "error", "-y", "-ss", "7", "-i"])
        .arg(root().join(CLIP))
        .args([
            "-frames:v",
            &frames.to_string(),
            "-vf",
            &format!("scale={size}"),
            "-c:v",
            "libx264",
            "-g",
            "5",
            "-pix_fmt",
            "yuv420p",
            "-an",
            "-f",
            "h264",
        ])
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success(), "ffmpeg could not make {name}");
    out
}

/// A stream whose pictures change size mid-way (two H.264 streams one after the other):
/// smaller pictures are re-negotiated (the info change acknowledged, frames go on at the new
/// size in the same buffers); larger ones end the file with one warning naming `--size`,
/// with which the whole stream decodes.
#[test]
fn a_size_change_mid_stream_is_renegotiated_or_named() {
    let enc = Command::new("ffmpeg").args(["-hide_banner", "-encoders"]).output().unwrap();
    if !String::from_utf8_lossy(&enc.stdout).contains("libx264") {
        eprintln!("SKIP: this ffmpeg has no libx264");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (big, small) = (es(d, "big.h264", "640:360", 10), es(d, "small.h264", "320:180", 10));
    let cat = |name: &str, parts: [&Path; 2]| {
        let p = d.join(name);
        std::fs::write(&p, [std::fs::read(parts[0]).unwrap(), std::fs::read(parts[1]).unwrap()].concat()).unwrap();
        p
    };
    let shrinks = cat("shrinks.h264", [&big, &small]);
    let grows = cat("grows.h264", [&small, &big]);
    let go = |name: &str, file: &Path, extra: &[&str]| {
        let dir = d.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let out = zcpipe_run(&dir)
            .env("ZCPIPE_LIBMPP", fake_librockchip_mpp())
            .env("ZCPIPE_FAKE_MPP_LOG", dir.join("mpp.log"))
            .args([
                "--source",
                &format!("video:{}", file.display()),
                "--decoder",
                "mpp",
                "--scaler",
                "cpu",
                "--infer",
                "none",
                "--fps",
                "30",
                "--ring-policy",
                "block",
                "--json",
                "--stats-interval",
                "0",
            ])
            .args(extra)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{name}: {err}");
        assert_no_orphans(&dir);
        let sizes: Vec<(u64, u64)> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["type"] == "frame")
            .map(|v| (v["width"].as_u64().unwrap(), v["height"].as_u64().unwrap()))
            .collect();
        let summary: Value = serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap();
        let mpp = std::fs::read_to_string(dir.join("mpp.log")).unwrap();
        assert!(
            calls(&mpp, "mpp_destroy").iter().any(|l| l.contains(" unreleased_frames=0 buffers_held=0")),
            "{name}: {mpp}"
        );
        (err, sizes, summary["stages"]["capture"]["extra"].clone())
    };
    // Smaller: re-negotiated in the same buffers.
    let (err, sizes, cap) = go("shrinks", &shrinks, &[]);
    assert_eq!(sizes.iter().filter(|s| **s == (640, 360)).count(), 10, "{sizes:?}");
    assert_eq!(sizes.iter().filter(|s| **s == (320, 180)).count(), 10, "{sizes:?}");
    assert_eq!(cap["info_changes"], 1, "{cap}");
    assert!(err.contains("the stream is now 320x180 (was 640x360): re-negotiated"), "{err}");
    // Larger: the file ends there, one warning naming the fix.
    let (err, sizes, cap) = go("grows", &grows, &[]);
    assert_eq!(sizes, vec![(320, 180); 10], "{err}");
    let warned: Vec<&str> = err.lines().filter(|l| l.contains("the stream changed from 320x180 to 640x360")).collect();
    assert_eq!(warned.len(), 1, "{err}");
    assert!(warned[0].contains("pass --size 640x360"), "{}", warned[0]);
    assert_eq!(cap["end_reason"], "the stream outgrew the pool", "{cap}");
    // With --size for the larger pictures: the whole stream.
    let (_, sizes, cap) = go("sized", &grows, &["--size", "640x360"]);
    assert_eq!(sizes.len(), 20, "{sizes:?}");
    assert_eq!((sizes[0], sizes[19]), ((320, 180), (640, 360)));
    assert_eq!(cap["info_changes"], 1, "{cap}");
    eprintln!("EVIDENCE mpp size change: 640x360 then 320x180 re-negotiated (20 frames, 1 info change); 320x180 then 640x360 ends after 10 frames with `{}`; with --size 640x360 all 20 frames", warned[0].trim());
}

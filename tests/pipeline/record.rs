//! Recording (`--record-dir`): event clips of the camera's own H.264 packets, remuxed into
//! fragmented MP4 by the record stage, checked with ffprobe against the source and the
//! tracker's events; the index in SQLite; a recorder killed mid-clip; a full disk;
//! retention.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::Value;

/// The bundled clip's keyframe interval (a keyframe every 10 frames at 10 fps).
const KEYINT_MS: i64 = 1000;

/// What ffprobe says of a clip: codec, profile, duration, the first frame a keyframe, and
/// the largest step between two presentation times in order.
#[derive(Debug)]
struct Probe {
    codec: String,
    profile: String,
    duration_s: f64,
    first_key: bool,
    frames: usize,
    largest_step_s: f64,
}

fn probe(path: &Path) -> Probe {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "v:0", "-show_streams", "-show_format", "-show_frames"])
        .args(["-show_entries", "stream=codec_name,profile:format=duration:frame=key_frame,pts_time", "-of", "json"])
        .arg(path)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("ffprobe {}: {e}", path.display()));
    let frames = v["frames"].as_array().cloned().unwrap_or_default();
    let mut pts: Vec<f64> = frames.iter().filter_map(|f| f["pts_time"].as_str()?.parse().ok()).collect();
    pts.sort_by(f64::total_cmp);
    Probe {
        codec: v["streams"][0]["codec_name"].as_str().unwrap_or("").into(),
        profile: v["streams"][0]["profile"].as_str().unwrap_or("").into(),
        duration_s: v["format"]["duration"].as_str().and_then(|d| d.parse().ok()).unwrap_or(0.0),
        first_key: frames.first().is_some_and(|f| f["key_frame"] == 1),
        frames: frames.len(),
        largest_step_s: pts.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max),
    }
}

/// The clip index's rows, newest first, read through the recorder's own types.
fn clips(dir: &Path) -> Vec<zcpipe_record::index::Clip> {
    zcpipe_record::index::Index::open_read(dir).unwrap().list(None, 1000).unwrap()
}

/// CLOCK_MONOTONIC now, ms, and the Unix time now, ms: their difference turns the events'
/// monotonic times into the index's wall times.
fn mono_to_wall_ms() -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let mono = ts.tv_sec * 1000 + ts.tv_nsec / 1_000_000;
    let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    wall - mono
}

fn summary(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap()
}

/// One clip per person on the bundled clip: 250 frames (two people: the first in view from
/// 6.6 s to 19.5 s, the second from 23 s to the end), 2 s before and after.
#[test]
fn each_person_is_one_clip_of_the_sources_own_packets_covering_the_event() {
    let dir = tempfile::tempdir().unwrap();
    let clips_dir = dir.path().join("clips");
    let out = zcpipe_run(dir.path())
        .args(["--instance", "rec-a", "--frames", "250", "--json", "--ring-policy", "block"])
        .args(["--record-dir", clips_dir.to_str().unwrap(), "--record-pre", "2", "--record-post", "2"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let offset = mono_to_wall_ms();
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "event")
        .collect();
    let ms = |v: &Value| v.as_u64().unwrap() as i64 / 1_000_000 + offset;
    let people: Vec<(u64, i64, i64)> = events
        .iter()
        .filter(|e| e["event"] == "end" && e["label"] == "person")
        .map(|e| (e["track_id"].as_u64().unwrap(), ms(&e["first_seen_ns"]), ms(&e["last_seen_ns"])))
        .collect();
    assert_eq!(people.len(), 2, "two people in 250 frames: {events:?}");
    let mut rows = clips(&clips_dir);
    rows.reverse();
    assert_eq!(rows.len(), 2, "one clip per person: {rows:?}");
    let source = probe(&root().join("tests/data/one-by-one-person-detection.mp4"));
    for (k, (row, (track, first, last))) in rows.iter().zip(&people).enumerate() {
        assert_eq!(row.state, zcpipe_record::index::State::Complete, "{row:?}");
        assert_eq!((row.tracks.as_slice(), row.labels.as_slice()), (&[*track][..], &["person".to_string()][..]));
        assert_eq!((row.codec.as_deref(), row.width, row.height), (Some("h264"), Some(768), Some(432)));
        // It starts at the keyframe at or before 2 s before the person was first seen, and
        // ends 2 s after they were last seen (or with the stream): within a keyframe
        // interval, and a little for the frames' way through the pipeline.
        let want_start = first - 2000;
        assert!(
            row.start_ms <= want_start + 300 && row.start_ms >= want_start - KEYINT_MS - 300,
            "clip of #{track} starts at {} for {want_start}",
            row.start_ms
        );
        // The last person is in view until the stream ends: their clip ends with it.
        let want_end = if k + 1 == people.len() { *last } else { last + 2000 };
        let end = row.end_ms.unwrap();
        assert!(end >= want_end - 300 && end <= want_end + 500, "clip of #{track} ends at {end} for {want_end}");
        let file = clips_dir.join(&row.path);
        assert_eq!(std::fs::metadata(&file).unwrap().len(), row.bytes);
        // Its thumbnail, the picture at the event, beside it.
        let thumb = std::fs::read(file.with_extension("jpg")).unwrap_or_default();
        assert!(thumb.starts_with(&[0xff, 0xd8]) && thumb.len() > 1000, "a JPEG thumbnail: {} bytes", thumb.len());
        let p = probe(&file);
        assert_eq!(
            (p.codec.as_str(), p.profile.as_str()),
            (source.codec.as_str(), source.profile.as_str()),
            "not re-encoded"
        );
        assert!(p.first_key, "a clip starts at a keyframe: {p:?}");
        assert!(p.largest_step_s <= 0.11, "no gap in the timestamps (10 fps): {p:?}\n{stderr}");
        let wall_s = (end - row.start_ms) as f64 / 1000.0;
        // The index's times are the units' arrivals, which a busy machine delays by up to a
        // few hundred ms; the clip's own duration is its timestamps'.
        assert!((p.duration_s - wall_s).abs() < 1.0, "{p:?} for {wall_s} s of the run");
        println!(
            "EVIDENCE record clip of person #{track}: {} {} {} frames {:.1} s, first frame a keyframe, starts {} ms before first seen (asked 2000), ends {} ms after last seen",
            p.codec,
            p.profile,
            p.frames,
            p.duration_s,
            first - row.start_ms,
            end - last
        );
    }
    let r = &summary(dir.path())["stages"]["record"]["extra"]["record"];
    assert_eq!(
        (r["clips"].as_u64(), r["complete"].as_u64(), r["incomplete"].as_u64()),
        (Some(2), Some(2), Some(0)),
        "{r}"
    );
    let sent = &summary(dir.path())["stages"]["capture"]["extra"]["record"];
    assert_eq!(sent["units_dropped"], 0, "{sent}");
    assert!(
        stderr.contains(&format!("  record: {}: 2 clips (2 complete, 0 incomplete)", clips_dir.display())),
        "{stderr}"
    );
    // The first clip closed while the stream went on: the publish stage announced it on the
    // detections socket (read from the index), with its file.
    let announced: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "clip")
        .collect();
    let first = &rows[0];
    assert!(!announced.is_empty(), "the first clip's line: {stderr}");
    let line = &announced[0];
    assert_eq!((line["id"].as_i64(), line["camera"].as_str()), (Some(first.id), Some("cam0")), "{line}");
    assert_eq!(line["path"], clips_dir.join(&first.path).display().to_string(), "{line}");
    assert_eq!((line["tracks"][0].as_u64(), line["complete"].as_bool()), (Some(people[0].0), Some(true)), "{line}");
    assert!(line.get("url").is_none(), "no web view, no URL: {line}");
    assert_no_orphans(dir.path());
}

/// A raw source (a still image with a person, NV12 in the capture pool) is recorded: its
/// frames encoded to H.264 on the CPU by a tap of the capture pool; the clip plays, starts
/// with a keyframe and covers the run. `--record-dir` after one camera's `--source` records
/// that camera only, with its own rules.
#[test]
fn a_raw_cameras_frames_are_encoded_into_its_clip() {
    let dir = tempfile::tempdir().unwrap();
    let clips_dir = dir.path().join("clips");
    let image = root().join("tests/data/person.jpg");
    let other = dir.path().join("person-again.jpg");
    std::fs::copy(&image, &other).unwrap();
    let out = zcpipe_run(dir.path())
        .args(["--instance", "rec-raw", "--frames", "60", "--fps", "10", "--json"])
        .args(["--source", &format!("door=image:{}", image.display())])
        .args(["--record-dir", clips_dir.to_str().unwrap(), "--record-pre", "1", "--record-post", "1"])
        .args(["--source", &format!("yard=image:{}", other.display())])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("of door; door: 1 s before, 1 s after"), "the plan says which camera: {stderr}");
    let rows = clips(&clips_dir);
    assert_eq!(rows.len(), 1, "one clip of the person at the door, none of the yard: {rows:?}\n{stderr}");
    assert!(!clips_dir.join("yard").exists(), "the yard is not recorded");
    let row = &rows[0];
    assert_eq!(row.camera, "door");
    assert_eq!(row.state, zcpipe_record::index::State::Complete, "{row:?}");
    assert_eq!((row.codec.as_deref(), row.width, row.height), (Some("h264"), Some(640), Some(424)), "{row:?}");
    assert!(row.labels.iter().any(|l| l == "person"), "{row:?}");
    let p = probe(&clips_dir.join(&row.path));
    assert_eq!(p.codec, "h264", "{p:?}");
    assert!(p.first_key, "a clip starts at a keyframe: {p:?}");
    // The person is there from the first frames to the end: the clip is most of the 6 s run.
    assert!(p.frames >= 35 && p.duration_s >= 3.5 && p.duration_s <= 7.0, "{p:?}");
    assert!(p.largest_step_s <= 0.35, "frames come every 0.1 s, none lost: {p:?}");
    println!(
        "EVIDENCE raw source encoded: {} {} {} frames {:.1} s, first frame a keyframe",
        p.codec, p.profile, p.frames, p.duration_s
    );
    let sent = &summary(dir.path())["stages"]["capture@door"]["extra"]["record"];
    assert!(sent["units_sent"].as_u64().unwrap_or(0) >= 40, "{sent}");
    assert!(stderr.contains("encoded to H.264 on the CPU"), "{stderr}");
    assert_no_orphans(dir.path());
}

/// On a board a raw camera's frames are encoded by MPP reading the pool's dma-bufs in place
/// (`--encoder mpp`, here the ABI fake of librockchip_mpp, which really encodes): each
/// pool buffer is imported once, every frame goes through `encode_put_frame`, and the clip
/// is MPP's High-profile H.264 starting with a keyframe.
#[test]
fn a_raw_camera_is_encoded_by_mpp_reading_the_pool_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let clips_dir = dir.path().join("clips");
    let log = dir.path().join("mpp.log");
    let image = root().join("tests/data/person.jpg");
    let out = zcpipe_run(dir.path())
        .env("ZCPIPE_LIBMPP", common::fake_librockchip_mpp())
        .env("ZCPIPE_FAKE_MPP_LOG", &log)
        .args(["--instance", "rec-mpp", "--source", &format!("image:{}", image.display())])
        .args(["--frames", "60", "--fps", "10", "--no-print", "--encoder", "mpp", "--buffers", "4"])
        .args(["--record-dir", clips_dir.to_str().unwrap(), "--record-pre", "1", "--record-post", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("encoded to H.264 by MPP's encoder in place"), "{stderr}");
    let rows = clips(&clips_dir);
    assert_eq!(rows.len(), 1, "{rows:?}\n{stderr}");
    let p = probe(&clips_dir.join(&rows[0].path));
    assert_eq!((p.codec.as_str(), p.profile.as_str()), ("h264", "High"), "{p:?}");
    assert!(p.first_key && p.frames >= 35, "{p:?}");
    let calls = std::fs::read_to_string(&log).unwrap();
    let count = |name: &str| calls.lines().filter(|l| l.split_whitespace().nth(1) == Some(name)).count();
    let (put, imported) = (count("encode_put_frame"), count("mpp_buffer_import"));
    assert!(put >= 45, "every frame through MPP: {put}");
    // 4 buffers, and 1 more for the recorder's tap.
    assert!(imported <= 5, "each pool buffer imported once, never a copy per frame: {imported}");
    assert!(!calls.contains("violation"), "{calls}");
    println!("EVIDENCE MPP encode in place: {put} frames encoded from {imported} imported dma-bufs; clip {p:?}");
}

/// `--record-continuous`: besides event clips, the whole stream in segments from keyframe
/// to keyframe, each one following the last with no picture between them (a test pattern,
/// encoded on the CPU with a keyframe every 2 s: 6 s segments of a 15 s run).
#[test]
fn continuous_segments_cover_the_stream_one_after_the_other() {
    let dir = tempfile::tempdir().unwrap();
    let clips_dir = dir.path().join("clips");
    let out = zcpipe_run(dir.path())
        .args(["--instance", "rec-cont", "--source", "testsrc:320x240@20", "--frames", "300", "--no-print"])
        .args(["--record-dir", clips_dir.to_str().unwrap(), "--record-continuous", "6"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let mut rows = clips(&clips_dir);
    rows.reverse();
    let segs: Vec<_> = rows.iter().filter(|c| c.kind == zcpipe_record::index::Kind::Segment).collect();
    assert!(segs.len() >= 2 && segs.len() <= 4, "{rows:?}\n{stderr}");
    for (a, b) in segs.iter().zip(segs.iter().skip(1)) {
        let (end, next) = (a.end_ms.unwrap(), b.start_ms);
        // The next starts with the picture after the last one: one frame (50 ms) later.
        assert!(next > end && next - end <= 250, "{a:?} then {b:?}");
        let len = end - a.start_ms;
        assert!((5_500..=8_500).contains(&len), "a segment ends at the first keyframe after 6 s: {a:?}");
    }
    for s in &segs {
        assert_eq!(s.state, zcpipe_record::index::State::Complete, "{s:?}");
        assert!(s.path.starts_with("cam0/segments/"), "{s:?}");
        let p = probe(&clips_dir.join(&s.path));
        assert!(p.first_key && p.codec == "h264", "{p:?}");
    }
    let total: i64 = segs.iter().map(|s| s.end_ms.unwrap() - s.start_ms).sum();
    assert!(total >= 13_000, "the segments cover the 15 s run: {total} ms in {segs:?}");
    assert!(stderr.contains("continuous segments"), "{stderr}");
}

/// The recorder killed with SIGKILL mid-clip: the run goes on, the recorder comes back,
/// its clip is `incomplete` in the index and plays up to its last fragment; the restarted
/// recorder goes on recording the person still in view; the next person is a clip of its own. Retention by size removes the oldest.
#[test]
fn a_killed_recorder_leaves_a_playable_clip_marked_incomplete_and_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let clips_dir = dir.path().join("clips");
    let mut run = zcpipe_run(dir.path())
        .args(["--instance", "rec-kill", "--frames", "300", "--no-print", "--ring-policy", "block"])
        .args(["--record-dir", clips_dir.to_str().unwrap(), "--record-pre", "1", "--record-post", "1"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Person 1 is in view from 6.6 s: kill the recorder 4 s into their clip.
    let index = clips_dir.join("index.sqlite3");
    // (The recorder makes the index's tables just after the file: a read before fails.)
    let recording = || {
        zcpipe_record::index::Index::open_read(&clips_dir)
            .and_then(|ix| ix.list(None, 10))
            .is_ok_and(|rows| rows.iter().any(|c| c.state == zcpipe_record::index::State::Recording))
    };
    assert!(wait_for(Duration::from_secs(40), || index.exists() && recording()), "no clip began");
    std::thread::sleep(Duration::from_secs(4));
    let pid = stage_pid(dir.path(), "record").expect("the record stage runs");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    let out = run.wait_with_output_timeout();
    let stderr = String::from_utf8_lossy(&out.1);
    assert!(out.0.success(), "{stderr}");
    assert!(stderr.contains("the record stage (pid") && stderr.contains("restarting it"), "{stderr}");
    assert!(
        stderr.contains("frames: captured 300, scaled 300, inferred 300, published 300"),
        "detection went on: {stderr}"
    );
    let mut rows = clips(&clips_dir);
    rows.reverse();
    // The cut clip; person 1 again, taken up by the restarted recorder from the frame lines
    // (it missed their `new`); person 2.
    assert_eq!(rows.len(), 3, "{rows:?}");
    let killed = &rows[0];
    assert_eq!(killed.state, zcpipe_record::index::State::Incomplete, "{killed:?}");
    assert_eq!(killed.reason.as_deref(), Some("the recorder stopped before the clip ended"));
    let p = probe(&clips_dir.join(&killed.path));
    assert!(p.first_key && p.frames >= 20, "the cut clip plays up to its last fragment: {p:?}");
    let (resumed, next) = (&rows[1], &rows[2]);
    assert_eq!(
        (resumed.state, resumed.tracks.as_slice()),
        (zcpipe_record::index::State::Complete, &[1][..]),
        "{resumed:?}"
    );
    assert!(resumed.start_ms - killed.start_ms < 12_000, "person 1's video goes on soon after the kill: {rows:?}");
    assert_eq!((next.state, next.tracks.as_slice()), (zcpipe_record::index::State::Complete, &[2][..]), "{next:?}");
    assert!(stderr.contains("clips a recorder that stopped left unfinished are marked incomplete"), "{stderr}");
    println!(
        "EVIDENCE record kill -9: the cut clip has {} frames ({:.1} s), first a keyframe; the next clip complete",
        p.frames, p.duration_s
    );
}

/// Retention by size: with room for one clip, each new clip removes the oldest, file and row.
#[test]
fn retention_keeps_the_clips_under_their_size() {
    let dir = tempfile::tempdir().unwrap();
    let clips_dir = dir.path().join("clips");
    let out = zcpipe_run(dir.path())
        .args(["--instance", "rec-keep", "--frames", "250", "--no-print", "--fps", "30", "--ring-policy", "block"])
        .args(["--record-dir", clips_dir.to_str().unwrap(), "--record-pre", "0", "--record-post", "0"])
        .args(["--record-max-gb", "0.0001"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let rows = clips(&clips_dir);
    let r = &summary(dir.path())["stages"]["record"]["extra"]["record"];
    assert_eq!(r["clips"], 2, "{r}");
    assert_eq!(r["removed"], 1, "{r}");
    assert_eq!(rows.len(), 1, "{rows:?}");
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(clips_dir.join("cam0")).unwrap().flatten().map(|e| e.path()).collect();
    files.sort();
    // The clip kept and its thumbnail; the removed clip's thumbnail went with it.
    let kept = clips_dir.join(&rows[0].path);
    assert_eq!(files, [kept.with_extension("jpg"), kept], "the index and the folder agree");
    assert!(stderr.contains("1 old clips removed"), "{stderr}");
}

/// A full disk (a 700 KiB tmpfs): the clip being written is cut, marked incomplete with the
/// reason, and plays up to its last fragment; recording stops with one warning; detection
/// and the run go on to their end.
#[test]
fn a_full_disk_stops_recording_never_detection() {
    let dir = tempfile::tempdir().unwrap();
    let clips_dir = dir.path().join("full");
    let Some(_u) = small_tmpfs(&clips_dir, "700k") else { return };
    let out = zcpipe_run(dir.path())
        .args(["--instance", "rec-full", "--frames", "300", "--no-print", "--fps", "30", "--ring-policy", "block"])
        .args(["--record-dir", clips_dir.to_str().unwrap(), "--record-pre", "5", "--record-post", "5"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("frames: captured 300, scaled 300, inferred 300, published 300"), "{stderr}");
    let warn: Vec<&str> = stderr.lines().filter(|l| l.contains("the disk is full")).collect();
    assert!(
        warn.iter()
            .any(|l| l.contains("recording stops until there is room again (detection and every other output go on)")),
        "{stderr}"
    );
    let rows = clips(&clips_dir);
    let cut =
        rows.iter().find(|c| c.state == zcpipe_record::index::State::Incomplete).unwrap_or_else(|| panic!("{rows:?}"));
    assert_eq!(cut.reason.as_deref(), Some("the disk is full"), "{cut:?}");
    let p = probe(&clips_dir.join(&cut.path));
    assert!(p.first_key && p.frames > 0, "{p:?}");
    let r = &summary(dir.path())["stages"]["record"]["extra"]["record"];
    assert!(r["disk_full"].as_u64() >= Some(1), "{r}");
    println!("EVIDENCE record full disk: {}; the cut clip plays {} frames; {r}", warn[0], p.frames);
}

/// `--record-dir` on an RTSP camera (a real RTSP server, as `rtsp.rs` runs it): the clip is the stream's own H.264 (the server sends
/// the file's packets as they are), remuxed: the same codec and profile as the file, a
/// keyframe first, no gap in its timestamps.
#[cfg(feature = "onnx")]
#[test]
fn an_rtsp_cameras_clip_is_its_own_packets_remuxed() {
    if let Some(why) = crate::rtsp::gst_missing() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    use crate::rtsp::{free_port, Run, Server, CLIP};
    let port = free_port();
    let _server = Server::start(port, &root().join(CLIP));
    let dir = tempfile::tempdir().unwrap();
    let clips = dir.path().join("clips");
    let url = format!("rtsp://127.0.0.1:{port}/cam");
    let mut run = Run::start(
        dir.path(),
        &["--source", &url, "--frames", "120", "--json", "--record-dir", clips.to_str().unwrap(), "--record-post", "1"],
    );
    let (status, err, lines) = run.finish();
    assert!(status.success(), "{status}: {err}");
    assert!(lines.iter().any(|v| v["type"] == "event" && v["event"] == "new"), "a person came: {err}");
    let rows = zcpipe_record::index::Index::open_read(&clips).unwrap().list(None, 10).unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}: {err}");
    let probe = |p: &Path| {
        let out = Command::new("ffprobe")
            .args(["-v", "error", "-select_streams", "v:0", "-show_entries", "stream=codec_name,profile,width,height"])
            .args(["-show_entries", "frame=key_frame", "-read_intervals", "%+#1", "-of", "json"])
            .arg(p)
            .output()
            .unwrap();
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let clip = probe(&clips.join(&rows[0].path));
    let file = probe(&root().join(CLIP));
    for k in ["codec_name", "profile", "width", "height"] {
        assert_eq!(clip["streams"][0][k], file["streams"][0][k], "{k}: {clip}");
    }
    assert_eq!(clip["frames"][0]["key_frame"], 1, "{clip}");
    eprintln!(
        "EVIDENCE rtsp record: {} {} {}x{}, first frame a keyframe, {} bytes, state {:?}",
        clip["streams"][0]["codec_name"],
        clip["streams"][0]["profile"],
        clip["streams"][0]["width"],
        clip["streams"][0]["height"],
        rows[0].bytes,
        rows[0].state
    );
}

trait WaitOutput {
    fn wait_with_output_timeout(&mut self) -> (std::process::ExitStatus, Vec<u8>);
}

impl WaitOutput for std::process::Child {
    fn wait_with_output_timeout(&mut self) -> (std::process::ExitStatus, Vec<u8>) {
        use std::io::Read;
        let mut err = vec![];
        if let Some(mut e) = self.stderr.take() {
            let _ = e.read_to_end(&mut err);
        }
        (self.wait().unwrap(), err)
    }
}

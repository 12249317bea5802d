//! Snapshots (`--snapshot-dir`): JPEGs of the camera with its boxes, on each new tracked
//! object and every `--snapshot-every` seconds, the newest `--snapshot-keep` kept, and a
//! full disk a warning that never stops the pipeline.

use crate::common;

use std::path::Path;
use std::process::Stdio;

use common::*;
use serde_json::Value;

fn jpgs(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.ends_with(".jpg")).collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn run(dir: &Path, instance: &str, extra: &[&str]) -> (Value, String) {
    let out = zcpipe_run(dir)
        // The clip's first person comes at frame 61; every frame is inferred (block), as
        // fast as the CPU goes.
        .args(["--instance", instance, "--no-print", "--frames", "90", "--fps", "max", "--ring-policy", "block"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let s: Value = serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap();
    (s["stages"]["publish"]["extra"]["snapshots"].clone(), stderr)
}

#[test]
fn snapshots_on_new_objects_and_every_n_seconds_with_boxes_drawn_and_the_oldest_removed() {
    let dir = tempfile::tempdir().unwrap();
    let snaps = dir.path().join("snaps");
    let (c, _) = run(dir.path(), "snap-a", &["--snapshot-dir", snaps.to_str().unwrap(), "--snapshot-every", "1"]);
    let files = jpgs(&snaps.join("cam0"));
    assert_eq!(c["written"].as_u64().unwrap(), files.len() as u64, "{c} {files:?}");
    assert_eq!((c["failed"].as_u64(), c["removed"].as_u64()), (Some(0), Some(0)), "{c}");
    // The clip starts with a person in view: the tracker's first track is a person.
    let new = files
        .iter()
        .find(|f| f.contains("-new-person-1."))
        .unwrap_or_else(|| panic!("a snapshot of new person #1: {files:?}"));
    assert!(
        files.iter().filter(|f| f.ends_with("-every.jpg")).count() >= 2,
        "one a second over a run of several seconds: {files:?}"
    );
    // Names sort by time: 13-digit Unix milliseconds first.
    assert!(files.iter().all(|f| f[..13].bytes().all(|b| b.is_ascii_digit()) && &f[13..14] == "-"), "{files:?}");
    let img = image::open(snaps.join("cam0").join(new)).unwrap().to_rgb8();
    assert_eq!(img.dimensions(), (768, 432));
    // The person's box is drawn in the person colour (0,255,0), a few hundred pixels of it
    // (a 3-px outline), on the clip's own pixels (not a flat canvas).
    let green = img.pixels().filter(|p| p[1] > 200 && p[0] < 90 && p[2] < 90).count();
    assert!(green > 300, "a drawn person box: {green} green pixels");
    let mut lum: Vec<u8> = img.pixels().step_by(101).map(|p| p[1]).collect();
    lum.sort_unstable();
    assert!(lum[lum.len() * 9 / 10] - lum[lum.len() / 10] > 40, "the clip's pixels, not a blank canvas");

    // Keep 2: the oldest go, counted.
    let dir2 = tempfile::tempdir().unwrap();
    let snaps2 = dir2.path().join("snaps");
    let (c, _) = run(
        dir2.path(),
        "snap-b",
        &["--snapshot-dir", snaps2.to_str().unwrap(), "--snapshot-every", "1", "--snapshot-keep", "2"],
    );
    let files = jpgs(&snaps2.join("cam0"));
    assert_eq!(files.len(), 2, "{files:?}");
    assert_eq!(c["removed"].as_u64().unwrap(), c["written"].as_u64().unwrap() - 2, "{c}");
    assert_no_orphans(dir.path());
    assert_no_orphans(dir2.path());
}

/// A disk with no room (a 16 KiB tmpfs, where the test may mount one: as root) is a
/// warning and a count; the run goes on and ends normally.
#[test]
fn a_full_disk_is_a_warning_and_the_pipeline_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let snaps = dir.path().join("full");
    let Some(_u) = small_tmpfs(&snaps, "16k") else { return };
    let (c, stderr) =
        run(dir.path(), "snap-full", &["--snapshot-dir", snaps.to_str().unwrap(), "--snapshot-every", "1"]);
    assert!(c["failed"].as_u64().unwrap() >= 1, "{c}");
    assert_eq!(c["written"].as_u64(), Some(0), "{c}");
    let warn: Vec<&str> = stderr.lines().filter(|l| l.contains("writing snapshot")).collect();
    // Said once: every failure after the first is of the same kind (and fewer than 100).
    assert!(
        warn.len() == 1 && warn[0].contains("free space") && warn[0].contains("No space left on device"),
        "{stderr}"
    );
    // No half-written file is left behind.
    assert!(std::fs::read_dir(snaps.join("cam0")).unwrap().next().is_none());
}

#[test]
fn a_snapshot_dir_that_is_a_file_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("file");
    std::fs::write(&f, b"x").unwrap();
    let out = zcpipe().args(["run", "--dry-run", "--snapshot-dir"]).arg(&f).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("exists and is not a folder"), "{stderr}");
}

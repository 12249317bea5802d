//! Tracking end to end: the bundled clip through the four stages with the default tracker
//! (ByteTrack), unpaced with `--ring-policy block` so that no frame is dropped. Every
//! person gets `new` and `end` events on the socket, the number of person tracks is the
//! hand-made ground truth's (tests/data/track/, README there) within a tolerance, each
//! ground-truth person gets at most two track ids, and a zone's counts agree with its
//! events. Then the bad inputs: one line each.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use common::{root, zcpipe, zcpipe_run};
use serde_json::Value;
use zcpipe::core::detections::iou;

/// The ground truth of the bundled clip: `(frame, id, [x1, y1, x2, y2])`, MOTChallenge
/// frames (seq + 1).
fn ground_truth() -> Vec<(u64, u64, [f32; 4])> {
    let text = std::fs::read_to_string(root().join("tests/data/track/person.gt.txt")).unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Vec<f32> = l.split(',').map(|x| x.trim().parse().unwrap()).collect();
            (v[0] as u64, v[1] as u64, [v[2], v[3], v[2] + v[4], v[3] + v[5]])
        })
        .collect()
}

fn bbox(v: &Value) -> [f32; 4] {
    let b: Vec<f32> = v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
    [b[0], b[1], b[2], b[3]]
}

/// How far the count of person tracks may be from the ground truth's count of people: a
/// person the detector loses for longer than the keep-alive (1 s) comes back as a new
/// track, and a false detection that lasts three frames is confirmed.
const TOLERANCE: usize = 3;

#[test]
fn every_person_of_the_bundled_clip_is_one_track_with_its_events() {
    let dir = tempfile::tempdir().unwrap();
    // The door zone: the left half of the frame (768x432).
    let out = zcpipe_run(dir.path())
        .args([
            "--instance",
            "track-clip",
            "--fps",
            "max",
            "--ring-policy",
            "block",
            "--scaler",
            "cpu",
            "--json",
            "--stats-interval",
            "5",
        ])
        .args(["--zone", "left=0,0,384,0,384,432,0,432"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let frames: Vec<&Value> = lines.iter().filter(|v| v["type"] == "frame").collect();
    assert_eq!(frames.len(), 1394, "every frame of the clip, none dropped");
    let events: Vec<&Value> = lines.iter().filter(|v| v["type"] == "event").collect();

    // Every track is confirmed once (`new`, ids 1, 2, ... in order) and ends once (`end`).
    let ids_of = |kind: &str| -> Vec<u64> {
        events.iter().filter(|e| e["event"] == kind).map(|e| e["track_id"].as_u64().unwrap()).collect()
    };
    let new = ids_of("new");
    let mut ended = ids_of("end");
    assert_eq!(new, (1..=new.len() as u64).collect::<Vec<_>>(), "ids from 1 in order of confirmation");
    ended.sort_unstable();
    assert_eq!(ended, new, "every track ends once");
    for e in &events {
        assert_eq!(e["camera"], "cam0");
        assert!(e["first_seen_ns"].as_u64().unwrap() <= e["last_seen_ns"].as_u64().unwrap(), "{e}");
        assert!(e["score"].as_f64().unwrap() >= 0.5, "a confirmed track's best score is high: {e}");
    }
    let person_tracks: BTreeSet<u64> = events
        .iter()
        .filter(|e| e["event"] == "new" && e["label"] == "person")
        .map(|e| e["track_id"].as_u64().unwrap())
        .collect();

    // Against the ground truth: the count of people, and at most two ids per person.
    let gt = ground_truth();
    let people: BTreeSet<u64> = gt.iter().map(|g| g.1).collect();
    assert!(
        person_tracks.len().abs_diff(people.len()) <= TOLERANCE,
        "{} person tracks for {} people (tolerance {TOLERANCE})",
        person_tracks.len(),
        people.len()
    );
    let mut ids_per_person: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
    for (frame, person, b) in &gt {
        let f = frames.iter().find(|f| f["seq"].as_u64().unwrap() + 1 == *frame).unwrap();
        if let Some(d) = f["detections"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["label"] == "person" && iou(&bbox(&d["box"]), b) >= 0.5)
            .max_by(|x, y| iou(&bbox(&x["box"]), b).total_cmp(&iou(&bbox(&y["box"]), b)))
        {
            if let Some(id) = d["track_id"].as_u64() {
                ids_per_person.entry(*person).or_default().insert(id);
            }
        }
    }
    eprintln!(
        "{} person tracks for {} people; track ids per person: {ids_per_person:?}",
        person_tracks.len(),
        people.len()
    );
    for (person, ids) in &ids_per_person {
        assert!(ids.len() <= 2, "ground-truth person {person} got track ids {ids:?}");
    }
    assert!(
        ids_per_person.len() + 1 >= people.len(),
        "nearly every person was tracked: {ids_per_person:?} of {people:?}"
    );

    let entries = check_zone_counts(&lines);

    let s: Value = serde_json::from_slice(&std::fs::read(dir.path().join("summary.json")).unwrap()).unwrap();
    let t = &s["stages"]["publish"]["extra"]["tracking"];
    assert_eq!(t["tracker"], "bytetrack", "{s}");
    assert_eq!(t["events"]["new"].as_u64().unwrap() as usize, new.len());
    assert_eq!(t["live_tracks"], 0);
    let line = format!(
        "  tracking: bytetrack: {} tracks confirmed, {} ended; zones: {entries} entries, {entries} exits; ",
        new.len(),
        new.len()
    );
    assert!(stderr.contains(&line), "the text summary's tracking line ({line}): {stderr}");
    // The ids the publish stage kept for a successor went with the run directory.
    common::assert_no_orphans(dir.path());
}

/// The zone `left` of the run's JSON lines: entries and exits pair up per track, and each
/// frame's count is what its events leave. Returns the number of entries.
fn check_zone_counts(lines: &[Value]) -> usize {
    // The zone: entries and exits pair up per track, and each frame's count is what its
    // events leave (a frame's line comes before its events, which carry its timestamp; an
    // `end` with another timestamp came while no frame did).
    let mut inside: BTreeSet<u64> = BTreeSet::new();
    let mut entries = 0;
    let mut pending: Option<(u64, usize, u64)> = None;
    let check = |pending: &mut Option<(u64, usize, u64)>, inside: &BTreeSet<u64>| {
        if let Some((_, n, seq)) = pending.take() {
            assert_eq!(n, inside.len(), "frame {seq}: {n} in the zone, {} by the events", inside.len());
        }
    };
    for v in lines {
        if v["type"] == "frame" {
            check(&mut pending, &inside);
            let n: u64 = v["zones"]["left"].as_object().unwrap().values().map(|c| c.as_u64().unwrap()).sum();
            pending = Some((v["timestamp_ns"].as_u64().unwrap(), n as usize, v["seq"].as_u64().unwrap()));
            continue;
        }
        if v["type"] != "event" {
            continue;
        }
        if pending.is_some_and(|p| p.0 != v["timestamp_ns"].as_u64().unwrap()) {
            check(&mut pending, &inside);
        }
        match v["event"].as_str().unwrap() {
            "entered_zone" => {
                assert_eq!(v["zone"], "left");
                assert!(inside.insert(v["track_id"].as_u64().unwrap()), "entered twice: {v}");
                entries += 1;
            }
            "left_zone" => assert!(inside.remove(&v["track_id"].as_u64().unwrap()), "left without entering: {v}"),
            _ => assert!(v["zone"].is_null(), "{v}"),
        }
    }
    check(&mut pending, &inside);
    assert!(inside.is_empty(), "every entry has its exit by the end");
    assert!(entries >= 2, "people walk through the left half: {entries} entries");
    entries
}

#[test]
fn tracker_none_gives_no_ids_and_no_events() {
    let dir = tempfile::tempdir().unwrap();
    let out = zcpipe_run(dir.path())
        .args([
            "--instance",
            "track-none",
            "--frames",
            "40",
            "--fps",
            "max",
            "--ring-policy",
            "block",
            "--scaler",
            "cpu",
            "--json",
            "--tracker",
            "none",
            "--score-threshold",
            "0.2",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("\"detections\":[{"),
        "the clip has detections (a tv at 0.26 in its first frames): {stdout}"
    );
    assert!(!stdout.contains("track_id") && !stdout.contains("\"type\":\"event\""), "{stdout}");
}

#[test]
fn bad_tracking_options_are_one_line_each() {
    for (args, says) in [
        (&["--tracker", "deepsort"][..], "invalid value 'deepsort' for '--tracker <TRACKER>'"),
        (&["--zone", "door=1,2,3,4"], "a zone needs at least three"),
        (&["--zone", "door=0,0,9,0,9,9", "--zone", "door=1,1,5,1,5,5"], "camera cam0 already has a zone named door"),
        (&["--zone", "side:door=0,0,9,0,9,9"], "no camera named side (cameras: cam0)"),
        (&["--tracker", "none", "--zone", "door=0,0,9,0,9,9"], "--zone needs a tracker"),
        (&["--line", "door=5,5"], "--line door=5,5: 1 point(s); a line needs at least two"),
        (&["--line", "door=5,5,5,5"], "the line has no length"),
        (&["--tracker", "none", "--line", "door=0,0,9,9"], "--line needs a tracker"),
        (&["--loiter", "gate=30"], "--loiter gate: camera cam0 has no zone named gate (its zones: none)"),
        (&["--mask", "0,0,5,5,10,10"], "--mask 0,0,5,5,10,10: the polygon encloses no area"),
        (&["--filter", "person:min_area=9,max_area=1"], "min_area=9 is above max_area=1; nothing would pass"),
        (&["--filter", "person:size=3"], "unknown key `size`"),
        (&["--calibration", "0,0,10,0,20,0,0,10=4,20"], "collinear"),
    ] {
        let out = zcpipe().args(["run", "--dry-run"]).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // A zone outside the frame is known at the first frame: one error line, and the run goes on without it.
    let dir = tempfile::tempdir().unwrap();
    let out = zcpipe_run(dir.path())
        .args([
            "--instance",
            "track-outside",
            "--frames",
            "10",
            "--fps",
            "max",
            "--scaler",
            "cpu",
            "--json",
            "--zone",
            "far=700,0,900,0,900,100",
            "--line",
            "wide=0,10,900,10",
            "--mask",
            "0,0,800,0,800,50",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let said: Vec<&str> = err.lines().filter(|l| l.contains("outside camera cam0's 768x432 frame")).collect();
    assert_eq!(said.len(), 3, "the zone, the line, the mask: {err}");
    let said: Vec<&str> = said.into_iter().filter(|l| l.contains("--zone")).collect();
    assert!(said[0].contains("--zone far: point (900, 0)") && said[0].contains("zone far is left out"), "{err}");
    // Lines and masks outside the frame alike: one line each, left out, the run goes on.
    assert!(
        err.lines()
            .any(|l| l.contains("--line wide: point (900, 10) is outside") && l.contains("line wide is left out")),
        "{err}"
    );
    assert!(
        err.lines().any(|l| l.contains("--mask: point (800, 0) is outside") && l.contains("masks are left out")),
        "{err}"
    );
}

/// `zcpipe eval track` that fails leaves no half-written results file behind, but never
/// removes what is not a regular file it could have written: `--mot` naming a device (as
/// `/dev/null` would) stays.
#[test]
fn a_failed_eval_removes_only_a_regular_results_file() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"type\":\"frame\"}\n").unwrap();
    let file = dir.path().join("out.txt");
    let device = dir.path().join("null");
    let have_device = nix::sys::stat::mknod(
        &device,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o666),
        nix::sys::stat::makedev(1, 3),
    )
    .is_ok();
    for (mot, stays) in [(&file, false), (&device, true)] {
        if mot == &device && !have_device {
            eprintln!("SKIPPED: cannot make a device node here (not root)");
            continue;
        }
        let out = zcpipe().args(["eval", "track", "--detections"]).arg(&bad).arg("--mot").arg(mot).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("not a detections-socket line"), "{err}");
        assert_eq!(mot.exists(), stays, "{}", mot.display());
    }
}

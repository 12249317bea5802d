//! Synthetic tracks with exact expected ids and events: objects moving, crossing, occluded
//! for a few frames, leaving and coming back, standing still, walking through a zone.

use super::*;

/// 10 frames per second.
const FRAME_NS: u64 = 100_000_000;

fn person(x: f32, y: f32, score: f32) -> Observation {
    Observation { class_id: 0, score, bbox: [x, y, x + 40.0, y + 100.0] }
}

/// An event as the tests write it: `(frame, kind, track id, zone)`.
type Ev = (usize, &'static str, u64, Option<usize>);

/// Runs `frames` (detections per frame, 10 fps) through a tracker: each frame's ids, and
/// the events.
fn run(params: TrackParams, zones: Vec<Zone>, frames: &[Vec<Observation>]) -> (Vec<Vec<Option<u64>>>, Vec<Ev>) {
    let mut t = Tracker::new(params, zones);
    let mut ids = vec![];
    let mut evs = vec![];
    for (i, dets) in frames.iter().enumerate() {
        let mut e = vec![];
        ids.push(t.update(i as u64 * FRAME_NS, dets, &mut e));
        evs.extend(e.into_iter().map(|e| (i, e.kind.name(), e.track_id, e.zone)));
    }
    let mut e = vec![];
    t.finish(frames.len() as u64 * FRAME_NS, &mut e);
    evs.extend(e.into_iter().map(|e| (frames.len(), e.kind.name(), e.track_id, e.zone)));
    (ids, evs)
}

fn kinds(k: TrackerKind) -> TrackParams {
    TrackParams { kind: k, ..TrackParams::default() }
}

#[test]
fn confirmed_after_three_frames_then_ended_after_the_keepalive() {
    for k in [TrackerKind::ByteTrack, TrackerKind::Sort, TrackerKind::Iou] {
        // Seen in frames 0..10, then nothing until frame 30.
        let frames: Vec<Vec<Observation>> =
            (0..30).map(|i| if i < 10 { vec![person(100.0 + 2.0 * i as f32, 50.0, 0.9)] } else { vec![] }).collect();
        let (ids, evs) = run(kinds(k), vec![], &frames);
        assert_eq!(ids[0..4], [vec![None], vec![None], vec![Some(1)], vec![Some(1)]], "{k:?}");
        // Last seen at frame 9 (0.9 s); 1 s later is 1.9 s: ended at the first frame after, 2.0 s.
        assert_eq!(evs, vec![(2, "new", 1, None), (20, "end", 1, None)], "{k:?}");
    }
}

#[test]
fn none_tracks_nothing() {
    let frames: Vec<Vec<Observation>> = (0..5).map(|_| vec![person(10.0, 10.0, 0.9)]).collect();
    let (ids, evs) = run(kinds(TrackerKind::None), vec![], &frames);
    assert!(ids.iter().all(|f| f == &vec![None]) && evs.is_empty());
}

#[test]
fn two_people_crossing_keep_their_ids_with_a_motion_model() {
    // A walks right, B walks left at the same height, 12 px a frame; their boxes overlap
    // for several frames around frame 10 (same class: only motion tells them apart).
    let frames: Vec<Vec<Observation>> = (0..21)
        .map(|i| {
            let i = i as f32;
            vec![person(40.0 + 12.0 * i, 50.0, 0.9), person(280.0 - 12.0 * i, 54.0, 0.85)]
        })
        .collect();
    for k in [TrackerKind::ByteTrack, TrackerKind::Sort] {
        let (ids, evs) = run(kinds(k), vec![], &frames);
        for (f, got) in ids.iter().enumerate().skip(2) {
            assert_eq!(got, &vec![Some(1), Some(2)], "{k:?} frame {f}");
        }
        assert_eq!(
            evs,
            vec![(2, "new", 1, None), (2, "new", 2, None), (21, "end", 1, None), (21, "end", 2, None)],
            "{k:?}"
        );
    }
}

#[test]
fn an_occlusion_of_a_few_frames_keeps_the_id() {
    // Walking right at 8 px a frame; frames 10..14 unseen (0.4 s), then seen again further on.
    let frames: Vec<Vec<Observation>> = (0..25)
        .map(|i| if (10..14).contains(&i) { vec![] } else { vec![person(20.0 + 8.0 * i as f32, 60.0, 0.9)] })
        .collect();
    for k in [TrackerKind::ByteTrack, TrackerKind::Sort] {
        let (ids, evs) = run(kinds(k), vec![], &frames);
        assert_eq!(ids[14], vec![Some(1)], "{k:?}: found again after the gap");
        assert_eq!(evs, vec![(2, "new", 1, None), (25, "end", 1, None)], "{k:?}");
    }
    // Without a motion model the box has moved 32 px past the last one (IoU < 0.5): a new track.
    let (ids, evs) = run(kinds(TrackerKind::Iou), vec![], &frames);
    assert_eq!(ids[14..17], [vec![None], vec![None], vec![Some(2)]]);
    assert_eq!(evs, vec![(2, "new", 1, None), (16, "new", 2, None), (20, "end", 1, None), (25, "end", 2, None)]);
}

#[test]
fn bytetrack_keeps_a_track_through_low_score_boxes() {
    // Half occluded in frames 8..14: the detector still sees it, at 0.35 (below 0.5).
    let frames: Vec<Vec<Observation>> = (0..30)
        .map(|i| vec![person(20.0 + 4.0 * i as f32, 60.0, if (8..14).contains(&i) { 0.35 } else { 0.9 })])
        .collect();
    let (ids, evs) = run(kinds(TrackerKind::ByteTrack), vec![], &frames);
    assert!(ids[8..14].iter().all(|f| f == &vec![Some(1)]), "{:?}", &ids[8..14]);
    assert_eq!(evs, vec![(2, "new", 1, None), (30, "end", 1, None)]);
    // SORT ignores them: the track is lost meanwhile (still found again within the keep-alive).
    let (ids, _) = run(kinds(TrackerKind::Sort), vec![], &frames);
    assert!(ids[8..14].iter().all(|f| f == &vec![None]) && ids[14] == vec![Some(1)], "{ids:?}");
}

#[test]
fn leaving_and_coming_back_after_the_keepalive_is_a_new_track() {
    let frames: Vec<Vec<Observation>> =
        (0..40).map(|i| if (10..25).contains(&i) { vec![] } else { vec![person(100.0, 60.0, 0.9)] }).collect();
    let (ids, evs) = run(kinds(TrackerKind::ByteTrack), vec![], &frames);
    assert_eq!(ids[25..28], [vec![None], vec![None], vec![Some(2)]]);
    assert_eq!(evs, vec![(2, "new", 1, None), (20, "end", 1, None), (27, "new", 2, None), (40, "end", 2, None)]);
}

#[test]
fn classes_are_tracked_apart() {
    // A person and a dog with the same box: two tracks, never swapped.
    let frames: Vec<Vec<Observation>> = (0..10)
        .map(|i| {
            let b = person(10.0 + i as f32, 10.0, 0.9).bbox;
            vec![Observation { class_id: 16, score: 0.8, bbox: b }, Observation { class_id: 0, score: 0.9, bbox: b }]
        })
        .collect();
    let (ids, _) = run(kinds(TrackerKind::ByteTrack), vec![], &frames);
    assert!(ids[2..].iter().all(|f| f == &vec![Some(1), Some(2)]), "{ids:?}");
}

#[test]
fn a_zone_is_entered_and_left_by_the_feet() {
    // The door zone spans x 200..300, y 100..200. Feet: (x + 20, 160) walking right 10 px a
    // frame from x = 100: inside while 200 <= x + 20 <= 300 (an edge counts as inside),
    // frames 8..=18.
    let door =
        Zone { name: "door".into(), points: vec![(200.0, 100.0), (300.0, 100.0), (300.0, 200.0), (200.0, 200.0)] };
    let frames: Vec<Vec<Observation>> = (0..25).map(|i| vec![person(100.0 + 10.0 * i as f32, 60.0, 0.9)]).collect();
    let mut t = Tracker::new(kinds(TrackerKind::ByteTrack), vec![door]);
    let mut evs = vec![];
    for (i, d) in frames.iter().enumerate() {
        let mut e = vec![];
        t.update(i as u64 * FRAME_NS, d, &mut e);
        if i == 12 {
            assert_eq!(t.zone_counts(), vec![(0, 0, 1)], "one person in the door zone");
        }
        evs.extend(e.into_iter().map(|e| (i, e.kind.name(), e.zone)));
    }
    assert_eq!(t.zone_counts(), vec![]);
    assert_eq!(evs, vec![(2, "new", None), (8, "entered_zone", Some(0)), (19, "left_zone", Some(0))]);
    // A track confirmed inside a zone has entered it; one ending inside leaves it first.
    let inside: Vec<Vec<Observation>> = (0..5).map(|_| vec![person(220.0, 60.0, 0.9)]).collect();
    let door =
        Zone { name: "door".into(), points: vec![(200.0, 100.0), (300.0, 100.0), (300.0, 200.0), (200.0, 200.0)] };
    let (_, evs) = run(kinds(TrackerKind::ByteTrack), vec![door], &inside);
    assert_eq!(
        evs,
        vec![(2, "new", 1, None), (2, "entered_zone", 1, Some(0)), (5, "left_zone", 1, Some(0)), (5, "end", 1, None)]
    );
}

#[test]
fn frames_lost_by_a_restarted_stage_do_not_end_tracks() {
    // Seen in frames 0..10; frames 10..25 lost by a restarting infer stage (1.5 s); the
    // tracker is told (pause) before frame 25, in which the person is seen again.
    let mut t = Tracker::new(kinds(TrackerKind::ByteTrack), vec![]);
    let mut ev = vec![];
    for i in 0..10u64 {
        t.update(i * FRAME_NS, &[person(100.0, 60.0, 0.9)], &mut ev);
    }
    t.pause(25 * FRAME_NS);
    let ids = t.update(25 * FRAME_NS, &[person(100.0, 60.0, 0.9)], &mut ev);
    assert_eq!(ids, vec![Some(1)], "the same track");
    assert_eq!(ev.iter().map(|e| e.kind.name()).collect::<Vec<_>>(), ["new"]);
    // Without the pause the same gap ends it, and the person is a new track.
    let mut t = Tracker::new(kinds(TrackerKind::ByteTrack), vec![]).first_id(7);
    let mut ev = vec![];
    for i in 0..10u64 {
        t.update(i * FRAME_NS, &[person(100.0, 60.0, 0.9)], &mut ev);
    }
    t.update(25 * FRAME_NS, &[person(100.0, 60.0, 0.9)], &mut ev);
    assert_eq!(ev.iter().map(|e| (e.kind.name(), e.track_id)).collect::<Vec<_>>(), [("new", 7), ("end", 7)]);
    assert_eq!(t.next_id(), 8, "ids go on from the first one given");
}

#[test]
fn a_high_threshold_above_0_85_still_starts_tracks() {
    // --track-high 0.9: ByteTrack's start threshold is capped at 0.95, so a 0.96 box starts one.
    let frames: Vec<Vec<Observation>> = (0..4).map(|_| vec![person(10.0, 10.0, 0.96)]).collect();
    let (ids, _) = run(TrackParams { high_score: 0.9, ..kinds(TrackerKind::ByteTrack) }, vec![], &frames);
    assert_eq!(ids[2], vec![Some(1)]);
}

#[test]
fn events_report_the_detections_box() {
    let frames: Vec<Vec<Observation>> = (0..3).map(|i| vec![person(10.0 + 5.0 * i as f32, 0.0, 0.9)]).collect();
    let mut t = Tracker::new(kinds(TrackerKind::ByteTrack), vec![]);
    let mut ev = vec![];
    for (i, f) in frames.iter().enumerate() {
        t.update(i as u64 * FRAME_NS, f, &mut ev);
    }
    assert_eq!(ev[0].bbox, [20.0, 0.0, 60.0, 100.0], "the detection's box, not the filter's");
}

#[test]
fn standing_still_for_ten_seconds_is_stationary() {
    // Still (1 px of jitter, under 2% of the 108 px diagonal) from frame 0 for 12 s, then walks.
    let frames: Vec<Vec<Observation>> = (0..140)
        .map(|i| {
            let x = if i < 120 { 100.0 + (i % 2) as f32 } else { 100.0 + 10.0 * (i - 119) as f32 };
            vec![person(x, 60.0, 0.9)]
        })
        .collect();
    let (_, evs) = run(kinds(TrackerKind::ByteTrack), vec![], &frames);
    // Confirmed at frame 2 (0.2 s): still since then, stationary 10 s later, once.
    assert_eq!(evs, vec![(2, "new", 1, None), (102, "stationary", 1, None), (140, "end", 1, None)]);
}

#[test]
fn fifty_objects_keep_fifty_ids() {
    // A 10 x 5 grid of people all walking right: every one keeps its id for 100 frames.
    let frames: Vec<Vec<Observation>> = (0..100)
        .map(|i| {
            (0..50)
                .map(|k| person(10.0 + 60.0 * (k % 10) as f32 + 0.5 * i as f32, 10.0 + 120.0 * (k / 10) as f32, 0.9))
                .collect()
        })
        .collect();
    let (ids, evs) = run(kinds(TrackerKind::ByteTrack), vec![], &frames);
    let want: Vec<Option<u64>> = (1..=50).map(Some).collect();
    assert!(ids[2..].iter().all(|f| f == &want));
    assert_eq!(evs.iter().filter(|e| e.1 == "new").count(), 50);
}

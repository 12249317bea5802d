//! Synthetic scenes for what tracks mean: line crossings (through the tracker: confirmed
//! tracks, lost and found ones, counts by class), loitering once per visit, ground speed.

use super::*;

const FRAME_NS: u64 = 100_000_000;

/// A 40x100 person whose feet are at `(x, y)`.
fn feet(x: f32, y: f32) -> Observation {
    Observation { class_id: 0, score: 0.9, bbox: [x - 20.0, y - 100.0, x + 20.0, y] }
}

/// Runs the frames (10 fps) through a ByteTrack tracker of `scene`; the events as `(frame,
/// kind, track, detail)` (detail: `line:direction`, `zone`, or `zone:seconds`) and the tracker.
fn run(scene: Scene, frames: &[Vec<Observation>]) -> (Vec<(usize, &'static str, u64, String)>, Tracker) {
    let mut t = Tracker::with_scene(TrackParams::default(), scene);
    let mut out = vec![];
    for (i, dets) in frames.iter().enumerate() {
        let mut e = vec![];
        t.update(i as u64 * FRAME_NS, dets, &mut e);
        for e in e {
            let detail = match (e.line, e.zone, e.duration_ns) {
                (Some((l, d)), _, _) => format!("{l}:{}", d.name()),
                (_, Some(z), Some(ns)) => format!("{z}:{:.1}", ns as f64 / 1e9),
                (_, Some(z), None) => format!("{z}"),
                _ => String::new(),
            };
            out.push((i, e.kind.name(), e.track_id, detail));
        }
    }
    (out.into_iter().filter(|e| e.1 != "new").collect(), t)
}

fn door() -> Line {
    LineSpec::parse("door=0,200,400,200").unwrap().line
}

#[test]
fn a_person_walking_down_through_a_door_line_is_counted_in_once() {
    // Feet from y = 150 down 10 px a frame: past the 5 px band below the line at y = 210 (frame 6).
    let frames: Vec<Vec<Observation>> = (0..12).map(|i| vec![feet(100.0, 150.0 + 10.0 * i as f32)]).collect();
    let (ev, t) = run(Scene { lines: vec![door()], ..Scene::default() }, &frames);
    assert_eq!(ev, vec![(6, "crossed_line", 1, "0:in".to_string())]);
    assert_eq!(t.line_counts(), [LineCount { line: 0, class_id: 0, counts: [1, 0] }]);
}

#[test]
fn a_track_that_crosses_and_comes_back_is_in_then_out() {
    let ys = [150.0, 170.0, 190.0, 210.0, 230.0, 250.0, 230.0, 210.0, 190.0, 170.0];
    let frames: Vec<Vec<Observation>> = ys.iter().map(|&y| vec![feet(100.0, y)]).collect();
    let (ev, t) = run(Scene { lines: vec![door()], ..Scene::default() }, &frames);
    assert_eq!(ev, vec![(3, "crossed_line", 1, "0:in".to_string()), (8, "crossed_line", 1, "0:out".to_string())]);
    assert_eq!(t.line_counts()[0].counts, [1, 1]);
}

#[test]
fn a_crossing_while_tentative_counts_at_confirmation() {
    // Confirmed at frame 2 (three frames), already below the line by then.
    let frames: Vec<Vec<Observation>> = (0..4).map(|i| vec![feet(100.0, 180.0 + 20.0 * i as f32)]).collect();
    let (ev, _) = run(Scene { lines: vec![door()], ..Scene::default() }, &frames);
    assert_eq!(ev, vec![(2, "crossed_line", 1, "0:in".to_string())]);
}

#[test]
fn an_occlusion_across_the_line_is_one_crossing_when_the_track_is_found() {
    // Seen above, hidden for 4 frames while crossing (lost, kept by the keep-alive), found below.
    let frames: Vec<Vec<Observation>> = (0..12)
        .map(|i| if (5..9).contains(&i) { vec![] } else { vec![feet(100.0, 130.0 + 12.0 * i as f32)] })
        .collect();
    let (ev, t) = run(Scene { lines: vec![door()], ..Scene::default() }, &frames);
    assert_eq!(ev, vec![(9, "crossed_line", 1, "0:in".to_string())]);
    assert_eq!(t.live(), 1, "the same track");
}

#[test]
fn jitter_on_the_line_through_the_tracker_is_not_counted() {
    let frames: Vec<Vec<Observation>> =
        (0..30).map(|i| vec![feet(100.0, if i % 2 == 0 { 197.0 } else { 203.0 })]).collect();
    let (ev, t) = run(Scene { lines: vec![door()], ..Scene::default() }, &frames);
    assert_eq!(ev, vec![]);
    assert!(t.line_counts().is_empty());
}

#[test]
fn counts_are_by_line_and_class() {
    let car = |x: f32, y: f32| Observation { class_id: 2, score: 0.9, bbox: [x - 40.0, y - 60.0, x + 40.0, y] };
    let gate = LineSpec::parse("gate=200,0,200,400").unwrap().line;
    // A person walks down through the door; a car drives right through the gate (drawn
    // downward: moving right is from its right-hand side to its left: out).
    let frames: Vec<Vec<Observation>> =
        (0..10).map(|i| vec![feet(100.0, 150.0 + 12.0 * i as f32), car(120.0 + 20.0 * i as f32, 350.0)]).collect();
    let (_, t) = run(Scene { lines: vec![door(), gate], ..Scene::default() }, &frames);
    assert_eq!(
        t.line_counts(),
        [LineCount { line: 0, class_id: 0, counts: [1, 0] }, LineCount { line: 1, class_id: 2, counts: [0, 1] }]
    );
}

#[test]
fn loitering_once_per_visit_with_its_duration_and_the_time_in_the_zone_at_exit() {
    let gate = Zone { name: "gate".into(), points: vec![(0.0, 0.0), (200.0, 0.0), (200.0, 300.0), (0.0, 300.0)] };
    // Stands in the zone (x = 150) until frame 40, walks out past x = 200 (frame 45) and back
    // in (frame 54, on the edge), then stands again; loitering after 2.5 s.
    let x = |i: usize| match i {
        0..40 => 150.0,
        40..50 => 150.0 + 10.0 * (i - 39) as f32,
        50..60 => 250.0 - 10.0 * (i - 49) as f32,
        _ => 150.0,
    };
    let frames: Vec<Vec<Observation>> = (0..90).map(|i| vec![feet(x(i), 200.0 + (i % 2) as f32)]).collect();
    let scene = Scene { zones: vec![gate], loiter_ns: vec![Some(2_500_000_000)], ..Scene::default() };
    let (ev, _) = run(scene, &frames);
    let want = [
        (2, "entered_zone", "0"),
        (27, "loitering", "0:2.5"),
        (45, "left_zone", "0:4.3"),
        (54, "entered_zone", "0"),
        (79, "loitering", "0:2.5"),
    ];
    assert_eq!(ev, want.iter().map(|&(f, k, d)| (f, k, 1, d.to_string())).collect::<Vec<_>>());
}

#[test]
fn feet_jittering_on_a_zones_edge_enter_once_and_loiter() {
    // The zone's top edge is y = 250; the feet stand on it, 3 px above and below in turn,
    // for 6 s (a 5 px band: 5% of the 100 px box).
    let gate =
        Zone { name: "gate".into(), points: vec![(150.0, 250.0), (500.0, 250.0), (500.0, 432.0), (150.0, 432.0)] };
    let frames: Vec<Vec<Observation>> =
        (0..60).map(|i| vec![feet(300.0, if i % 2 == 0 { 253.0 } else { 247.0 })]).collect();
    let scene = Scene { zones: vec![gate], loiter_ns: vec![Some(3_000_000_000)], ..Scene::default() };
    let (ev, _) = run(scene, &frames);
    assert_eq!(ev, vec![(2, "entered_zone", 1, "0".to_string()), (32, "loitering", 1, "0:3.0".to_string())]);
}

#[test]
fn a_calibrated_camera_gives_each_track_its_ground_speed() {
    // Top-down: 100 px = 1 m; the person walks 15 px a frame at 10 fps: 1.5 m/s, 5.4 km/h.
    let c = speed::CalibrationSpec::parse("0,0,100,0,100,100,0,100=1,1").unwrap().calibration();
    let mut t = Tracker::with_scene(TrackParams::default(), Scene { calibration: Some(c), ..Scene::default() });
    let mut ev = vec![];
    for i in 0..20u64 {
        t.update(i * FRAME_NS, &[feet(100.0 + 15.0 * i as f32, 300.0)], &mut ev);
    }
    let v = t.speed_kmh(1).unwrap();
    assert!((v - 5.4).abs() < 0.05, "{v}");
    // Without a calibration there is no speed.
    let mut t = Tracker::with_scene(TrackParams::default(), Scene::default());
    for i in 0..20u64 {
        t.update(i * FRAME_NS, &[feet(100.0 + 15.0 * i as f32, 300.0)], &mut ev);
    }
    assert_eq!(t.speed_kmh(1), None);
}

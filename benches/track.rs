//! Tracker cost per frame (`cargo bench --bench track`): the time `Tracker::update` takes
//! on one frame of 1, 10 and 50 objects, for each tracker; and the whole analytics step the
//! publish stage takes per frame (masks and filters over the detections, then ByteTrack with
//! zones, loitering times, lines and a calibration: `bytetrack + scene`).
//!
//! The scene is synthetic and deterministic: N people on a grid, each walking its own way
//! at 1-4 px a frame with a pixel of jitter, one detection in ten missing and one in ten at
//! a low score (ByteTrack's second association), plus one false detection a frame that
//! never persists, 10 fps. A run is 300 frames after 30 of warm-up (tracks confirmed);
//! prints a markdown table of the median and minimum µs per frame over
//! `ZCPIPE_BENCH_ROUNDS` rounds (default 15).

use std::time::Instant;

use zcpipe::publish::track::filter::{per_camera, FilterSpec, Gate, MaskSpec};
use zcpipe::publish::track::speed::CalibrationSpec;
use zcpipe::publish::track::{LineSpec, Observation, Scene, TrackParams, Tracker, TrackerKind, Zone};

/// A small linear congruential generator: the same scene every run.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// `frames` frames of `n` objects.
fn scene(n: usize, frames: usize) -> Vec<Vec<Observation>> {
    let mut r = Lcg(42);
    let starts: Vec<(f32, f32, f32, f32)> = (0..n)
        .map(|k| {
            (40.0 + 150.0 * (k % 10) as f32, 40.0 + 200.0 * (k / 10) as f32, r.next() * 4.0 - 2.0, r.next() * 4.0 - 2.0)
        })
        .collect();
    (0..frames)
        .map(|f| {
            let mut dets: Vec<Observation> = starts
                .iter()
                .filter_map(|&(x, y, vx, vy)| {
                    let roll = r.next();
                    if roll < 0.1 {
                        return None;
                    }
                    let (x, y) = (x + vx * f as f32 + r.next() - 0.5, y + vy * f as f32 + r.next() - 0.5);
                    Some(Observation {
                        class_id: 0,
                        score: if roll < 0.2 { 0.35 } else { 0.9 },
                        bbox: [x, y, x + 50.0, y + 120.0],
                    })
                })
                .collect();
            let (x, y) = (r.next() * 1800.0, r.next() * 1000.0);
            dets.push(Observation { class_id: 0, score: 0.55, bbox: [x, y, x + 30.0, y + 60.0] });
            dets
        })
        .collect()
}

/// A busy camera's scene: 4 zones (2 with a loitering time), 4 lines (2 polylines), a
/// calibration; and its gate: 4 masks and a filter of the objects' label.
fn busy_scene() -> (Scene, Gate) {
    let zones: Vec<Zone> = (0..4)
        .map(|k| {
            let x = 450.0 * k as f32;
            Zone { name: format!("z{k}"), points: vec![(x, 0.0), (x + 400.0, 0.0), (x + 400.0, 1080.0), (x, 1080.0)] }
        })
        .collect();
    let lines = ["a=0,300,1920,300", "b=0,700,1920,700", "c=300,0,300,500,600,1080", "d=1500,0,1200,540,1500,1080"]
        .iter()
        .map(|l| LineSpec::parse(l).unwrap().line)
        .collect();
    let calibration = Some(CalibrationSpec::parse("600,400,1300,400,1900,1000,0,1000=8,20").unwrap().calibration());
    let scene =
        Scene { zones, loiter_ns: vec![Some(30_000_000_000), None, Some(5_000_000_000), None], lines, calibration };
    let masks: Vec<MaskSpec> =
        ["0,0,200,0,200,100", "1700,0,1920,0,1920,80", "900,0,1000,0,1000,40,900,40", "0,1000,100,1080,0,1080"]
            .iter()
            .map(|m| MaskSpec::parse(m).unwrap())
            .collect();
    let filter = [FilterSpec::parse("person:min_area=500,max_area=200000,min_score=0.3,max_ratio=3").unwrap()];
    let gate = per_camera(&masks, &filter, &["cam0".to_string()]).unwrap().remove(0);
    (scene, gate)
}

fn main() {
    let rounds: usize = std::env::var("ZCPIPE_BENCH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(15);
    let zone = Zone { name: "door".into(), points: vec![(0.0, 0.0), (900.0, 0.0), (900.0, 1080.0), (0.0, 1080.0)] };
    println!("| objects | tracker | µs/frame median (min) | tracks confirmed |");
    println!("|--:|---|--:|--:|");
    for n in [1usize, 10, 50] {
        let frames = scene(n, 330);
        for kind in [TrackerKind::Iou, TrackerKind::Sort, TrackerKind::ByteTrack] {
            let mut per_frame = vec![];
            let mut confirmed = 0;
            for _ in 0..rounds {
                let mut t = Tracker::new(TrackParams { kind, ..TrackParams::default() }, vec![zone.clone()]);
                let mut events = vec![];
                for (i, f) in frames[..30].iter().enumerate() {
                    t.update(i as u64 * 100_000_000, f, &mut events);
                }
                let start = Instant::now();
                for (i, f) in frames[30..].iter().enumerate() {
                    std::hint::black_box(t.update((30 + i) as u64 * 100_000_000, f, &mut events));
                }
                per_frame.push(start.elapsed().as_secs_f64() * 1e6 / 300.0);
                confirmed = events.iter().filter(|e| e.kind == zcpipe::publish::track::EventKind::New).count();
            }
            per_frame.sort_by(f64::total_cmp);
            let name = match kind {
                TrackerKind::Iou => "iou",
                TrackerKind::Sort => "sort",
                TrackerKind::ByteTrack => "bytetrack",
                TrackerKind::None => "none",
            };
            println!("| {n} | {name} | {:.1} ({:.1}) | {confirmed} |", per_frame[per_frame.len() / 2], per_frame[0]);
        }
        let (scene, gate) = busy_scene();
        let mut per_frame = vec![];
        let mut confirmed = 0;
        for _ in 0..rounds {
            let mut t = Tracker::with_scene(TrackParams::default(), scene.clone());
            let mut events = vec![];
            let step = |t: &mut Tracker, i: usize, f: &[Observation], events: &mut Vec<_>| {
                let kept: Vec<Observation> =
                    f.iter().filter(|o| gate.judge("person", o.score, &o.bbox).is_none()).copied().collect();
                t.update(i as u64 * 100_000_000, &kept, events)
            };
            for (i, f) in frames[..30].iter().enumerate() {
                step(&mut t, i, f, &mut events);
            }
            let start = Instant::now();
            for (i, f) in frames[30..].iter().enumerate() {
                std::hint::black_box(step(&mut t, 30 + i, f, &mut events));
            }
            per_frame.push(start.elapsed().as_secs_f64() * 1e6 / 300.0);
            confirmed = events.iter().filter(|e| e.kind == zcpipe::publish::track::EventKind::New).count();
        }
        per_frame.sort_by(f64::total_cmp);
        println!(
            "| {n} | bytetrack + scene | {:.1} ({:.1}) | {confirmed} |",
            per_frame[per_frame.len() / 2],
            per_frame[0]
        );
    }
}

//! `zcpipe eval track`: a recorded detections stream through a tracker, written as
//! MOTChallenge results (Milan et al. 2016, "MOT16: A Benchmark for Multi-Object Tracking",
//! section 3.3: one line per box, `frame,id,bb_left,bb_top,bb_width,bb_height,conf,x,y,z`,
//! frames from 1), for scoring against a hand-made ground truth (`benches/track_eval.py`).

use std::io::{BufRead, Write};

use anyhow::{bail, Context, Result};

use super::{Observation, TrackParams, Tracker};
use zcpipe_core::schema::SocketLine;

/// What to replay, and how.
#[derive(Clone, Debug)]
pub struct Replay {
    /// The tracker.
    pub params: TrackParams,
    /// Only detections with these labels go to the tracker (empty: all).
    pub labels: Vec<String>,
    /// Only this camera's frames (`None`: the first camera seen).
    pub camera: Option<String>,
    /// Frame times from the sequence number at this rate (`seq / fps`) instead of the
    /// lines' capture timestamps: a clip decoded faster than its rate (`--fps max`) has
    /// timestamps closer together than the scene's, which would stretch the keep-alive.
    pub fps: Option<f64>,
    /// Lines whose crossings are reported ([`ReplayStats::crossings`]).
    pub lines: Vec<super::Line>,
}

/// One crossing of a line in a replay (`zcpipe eval track --crossings FILE`, one JSON line
/// each): scored against hand-made crossings by `benches/track_eval.py`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Crossing {
    /// The frame it happened in, MOTChallenge's 1-based number (`seq + 1`).
    pub frame: u64,
    /// The track.
    pub track_id: u64,
    /// The line's name.
    pub line: String,
    /// Its direction.
    pub direction: super::Direction,
    /// The track's label.
    pub label: String,
}

/// What a replay counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayStats {
    /// Frame lines of the camera read.
    pub frames: u64,
    /// Detections given to the tracker.
    pub detections: u64,
    /// Result lines written (detections of confirmed tracks).
    pub boxes: u64,
    /// Confirmed tracks (ids given).
    pub tracks: u64,
    /// The lines' crossings, in order.
    pub crossings: Vec<Crossing>,
}

/// Reads the frame lines of `input` (a detections stream as `zcpipe run --json` prints it;
/// other lines are skipped), tracks them as `r` says, and writes one MOTChallenge line per
/// detection of a confirmed track to `out`: `seq + 1,track_id,x,y,w,h,score,-1,-1,-1`
/// (pixels, one decimal). Errors: an unreadable line (with its line number), frames of the
/// camera out of order, no frame of the camera.
pub fn replay(input: impl BufRead, mut out: impl Write, r: &Replay) -> Result<ReplayStats> {
    let scene = super::Scene { lines: r.lines.clone(), ..super::Scene::default() };
    let mut tracker = Tracker::with_scene(r.params.clone(), scene);
    let mut label_of: std::collections::BTreeMap<u32, String> = Default::default();
    let mut st = ReplayStats::default();
    let mut camera = r.camera.clone();
    let mut last_seq: Option<u64> = None;
    let mut events = vec![];
    let mut seen: std::collections::BTreeSet<String> = Default::default();
    for (n, line) in input.lines().enumerate() {
        let line = line.context("reading the detections")?;
        if line.trim().is_empty() {
            continue;
        }
        let f =
            match SocketLine::parse(&line).with_context(|| format!("line {}: not a detections-socket line", n + 1))? {
                SocketLine::Frame(f) => f,
                _ => continue,
            };
        if camera.get_or_insert_with(|| f.camera.clone()) != &f.camera {
            continue;
        }
        if last_seq.is_some_and(|s| f.seq <= s) {
            bail!(
                "line {}: frame {} of camera {} after frame {}: frames must be in order",
                n + 1,
                f.seq,
                f.camera,
                last_seq.unwrap_or(0)
            );
        }
        if last_seq.is_none() {
            // A line off the picture would count nothing, silently: say so now.
            for l in &r.lines {
                l.check_inside(&f.camera, f.width, f.height)?;
            }
        }
        last_seq = Some(f.seq);
        st.frames += 1;
        let t_ns = match r.fps {
            Some(fps) => (f.seq as f64 / fps * 1e9) as u64,
            None => f.timestamp_ns,
        };
        seen.extend(f.detections.iter().map(|d| d.label.clone()));
        for d in &f.detections {
            label_of.entry(d.class_id).or_insert_with(|| d.label.clone());
        }
        let dets: Vec<&zcpipe_core::schema::DetectionJson> =
            f.detections.iter().filter(|d| r.labels.is_empty() || r.labels.contains(&d.label)).collect();
        let obs: Vec<Observation> =
            dets.iter().map(|d| Observation { class_id: d.class_id, score: d.score, bbox: d.bbox }).collect();
        st.detections += obs.len() as u64;
        events.clear();
        let ids = tracker.update(t_ns, &obs, &mut events);
        st.tracks += events.iter().filter(|e| e.kind == super::EventKind::New).count() as u64;
        st.crossings.extend(events.iter().filter_map(|e| {
            let (line, direction) = e.line?;
            Some(Crossing {
                frame: f.seq + 1,
                track_id: e.track_id,
                line: r.lines[line].name.clone(),
                direction,
                label: label_of.get(&e.class_id).cloned().unwrap_or_default(),
            })
        }));
        for (d, id) in dets.iter().zip(ids) {
            let Some(id) = id else { continue };
            let [x1, y1, x2, y2] = d.bbox;
            writeln!(
                out,
                "{},{id},{:.1},{:.1},{:.1},{:.1},{:.3},-1,-1,-1",
                f.seq + 1,
                x1,
                y1,
                x2 - x1,
                y2 - y1,
                d.score
            )?;
            st.boxes += 1;
        }
    }
    if st.frames == 0 {
        bail!(
            "no frame line{} in the input: record one with `zcpipe run --json --tracker none ... > FILE`",
            camera.map(|c| format!(" of camera {c}")).unwrap_or_default()
        );
    }
    let missing: Vec<&String> = r.labels.iter().filter(|l| !seen.contains(*l)).collect();
    if !missing.is_empty() {
        let seen: Vec<&str> = seen.iter().map(String::as_str).collect();
        let names: Vec<&str> = missing.iter().map(|s| s.as_str()).collect();
        let msg = format!(
            "--labels: no detection labelled {} in the input (labels seen: {})",
            names.join(", "),
            if seen.is_empty() { "none".to_string() } else { seen.join(", ") }
        );
        if st.detections == 0 {
            bail!("{msg}");
        }
        log::warn!("{msg}");
    }
    Ok(st)
}

#[cfg(test)]
mod tests {
    use super::*;
    use zcpipe_core::schema::{DetectionJson, FrameJson};

    fn line(seq: u64, x: f32) -> String {
        let d = DetectionJson {
            class_id: 0,
            label: "person".into(),
            score: 0.9,
            bbox: [x, 10.0, x + 20.0, 60.0],
            track_id: None,
            ..Default::default()
        };
        let cat = DetectionJson {
            class_id: 15,
            label: "cat".into(),
            score: 0.9,
            bbox: [300.0, 10.0, 340.0, 60.0],
            track_id: None,
            ..Default::default()
        };
        SocketLine::Frame(FrameJson {
            camera: "cam0".into(),
            seq,
            timestamp_ns: seq,
            width: 640,
            height: 480,
            latency_us: Default::default(),
            detections: vec![d, cat],
            zones: None,
            skipped: None,
            npu: Default::default(),
            ..Default::default()
        })
        .to_line()
        .unwrap()
    }

    #[test]
    fn writes_motchallenge_lines_of_confirmed_tracks() {
        let input: String = (0..4).map(|s| line(s, 100.0 + 2.0 * s as f32)).collect();
        let r = Replay {
            params: TrackParams::default(),
            labels: vec!["person".into()],
            camera: None,
            fps: Some(10.0),
            lines: vec![],
        };
        let mut out = Vec::new();
        let st = replay(input.as_bytes(), &mut out, &r).unwrap();
        assert_eq!(st, ReplayStats { frames: 4, detections: 4, boxes: 2, tracks: 1, crossings: vec![] });
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "3,1,104.0,10.0,20.0,50.0,0.900,-1,-1,-1\n4,1,106.0,10.0,20.0,50.0,0.900,-1,-1,-1\n"
        );
        let e = replay(format!("{}{}", line(1, 0.0), line(0, 0.0)).as_bytes(), Vec::new(), &r).unwrap_err();
        assert_eq!(format!("{e:#}"), "line 2: frame 0 of camera cam0 after frame 1: frames must be in order");
        let e = replay("{\"type\":\"frame\"}\n".as_bytes(), Vec::new(), &r).unwrap_err();
        assert!(format!("{e:#}").starts_with("line 1: not a detections-socket line"), "{e:#}");
        assert!(format!("{:#}", replay("".as_bytes(), Vec::new(), &r).unwrap_err())
            .starts_with("no frame line in the input"));
        let typo = Replay { labels: vec!["persn".into()], ..r.clone() };
        assert_eq!(
            format!("{:#}", replay(input.as_bytes(), Vec::new(), &typo).unwrap_err()),
            "--labels: no detection labelled persn in the input (labels seen: cat, person)"
        );
        // A line off the 640x480 picture is refused at the first frame; one on it gives its crossings.
        let off = Replay { lines: vec![super::super::LineSpec::parse("off=700,0,700,480").unwrap().line], ..r.clone() };
        assert_eq!(
            format!("{:#}", replay(input.as_bytes(), Vec::new(), &off).unwrap_err()),
            "--line off: point (700, 0) is outside camera cam0's 640x480 frame; points are source pixels"
        );
        // The person walks right 10 px a frame (feet at x = 20, 30, ...): across x = 45 at seq 3;
        // the line drawn downward, walking right is `out`.
        let walk: String = (0..10).map(|i| line(i, 10.0 + 10.0 * i as f32)).collect();
        let across =
            Replay { lines: vec![super::super::LineSpec::parse("mid=45,0,45,480").unwrap().line], ..r.clone() };
        let st = replay(walk.as_bytes(), Vec::new(), &across).unwrap();
        assert_eq!(
            st.crossings,
            [Crossing {
                frame: 4,
                track_id: 1,
                line: "mid".into(),
                direction: super::super::Direction::Out,
                label: "person".into()
            }]
        );
    }
}

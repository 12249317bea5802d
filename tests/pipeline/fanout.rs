//! Fan-out of the capture pool across processes: a tap (`core::tap::TapClient`, what the
//! web view uses) joins a running capture stage, gets its frames from the same dma-bufs
//! (memfds here) and reads their pixels through the read guard, while the pipeline goes
//! on; a tap that holds its frame for ever costs the pipeline nothing but its own frames.

use crate::common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;
use zcpipe::capture::testsrc::BAR_COLOURS_RGB;
use zcpipe::core::tap::{frame_to_rgb, TapClient};

#[test]
fn taps_see_the_capture_pools_frames_and_a_stuck_tap_does_not_hold_the_pipeline() {
    let dir = tempfile::tempdir().unwrap();
    let run = zcpipe_run(dir.path())
        .args([
            "--instance",
            "fanout",
            "--source",
            "testsrc:320x240@30",
            "--frames",
            "240",
            "--infer",
            "none",
            "--scaler",
            "cpu",
            "--no-print",
            "--watchdog",
            "0",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let sock = dir.path().join("run/capture.sock");
    // A live tap: joins (retrying while the pipeline sets up), reads frames, converts them.
    let mut view = TapClient::new(sock.clone(), "view", "capture");
    let mut seqs = vec![];
    let mut rgb = vec![];
    let t0 = Instant::now();
    let mut bars_ok = 0;
    while seqs.len() < 20 && t0.elapsed() < Duration::from_secs(60) {
        if let Some(f) = view.next(Duration::from_millis(200)).unwrap() {
            seqs.push(f.desc().seq);
            let (w, h) = frame_to_rgb(&f, &mut rgb).unwrap();
            assert_eq!((w, h, rgb.len()), (320, 240, 320 * 240 * 3));
            // The eight bars, each at its centre, on a row the moving 90-px box is not on
            // (it covers one of rows 5 and 235 at most).
            let px = |x: u32, y: u32| -> [u8; 3] {
                let i = (y * 320 + x) as usize * 3;
                [rgb[i], rgb[i + 1], rgb[i + 2]]
            };
            let near = |a: [u8; 3], b: [u8; 3]| a.iter().zip(b).all(|(&p, q)| (p as i32 - q as i32).abs() <= 12);
            let ok = BAR_COLOURS_RGB.iter().enumerate().all(|(k, &c)| {
                let x = 20 + 40 * k as u32;
                near(px(x, 5), c) || near(px(x, 235), c)
            });
            bars_ok += ok as usize;
        }
    }
    assert_eq!(seqs.len(), 20, "the tap got 20 frames within 60 s");
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "newest first, never backwards: {seqs:?}");
    assert_eq!(bars_ok, 20, "every frame the tap read shows the eight colour bars where testsrc draws them");
    // A stuck tap: takes one frame and never gives it back.
    let mut stuck = TapClient::new(sock, "stuck", "capture");
    let held = loop {
        if let Some(f) = stuck.next(Duration::from_millis(200)).unwrap() {
            break f;
        }
    };
    let out = run.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    drop(held);
    let s: Value = serde_json::from_slice(&std::fs::read(dir.path().join("summary.json")).unwrap()).unwrap();
    let cap = &s["stages"]["capture"];
    assert_eq!(cap["frames_out"], 240, "{cap}");
    let pool = &cap["pool"];
    assert_eq!(pool["taps_joined"], 2, "{pool}");
    assert_eq!(pool["bad_returns"], 0, "{pool}");
    assert!(pool["tap_frames"].as_u64().unwrap() >= 21, "{pool}");
    assert!(pool["tap_dropped"].as_u64().unwrap() > 0, "the stuck tap missed frames: {pool}");
    // Every buffer came home: the taps were let go at the end of the stream.
    assert_eq!(cap["extra"]["buffers_still_out"], 0, "{cap}");
    // Scale got every frame the stuck tap did not stop it from getting: all of them that
    // drop-oldest kept (its drops are its own ring's, not the tap's).
    let scale_in = s["stages"]["scale"]["frames_in"].as_u64().unwrap();
    assert!(scale_in > 120, "scale kept going: {scale_in} frames in");
    assert_no_orphans(dir.path());
}

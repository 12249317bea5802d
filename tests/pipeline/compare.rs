//! `zcpipe compare` and `--copy-mode`: structure and invariants of their output (no speed
//! is asserted anywhere).

use serde_json::Value;

use crate::common;
use common::zcpipe;

/// 320x240 NV12 with bytesperline 320: 115,200 bytes; the model input 416x416x3: 519,168.
const NV12_320X240: f64 = 115_200.0;
const BGR_416: f64 = 519_168.0;

#[test]
fn compare_runs_both_modes_and_counts_copies_exactly() {
    let out = zcpipe()
        .args([
            "compare",
            "--source",
            "testsrc:320x240@200",
            "--frames",
            "20",
            "--infer",
            "none",
            "--rounds",
            "1",
            "--json",
            "--ring-policy",
            "block",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let c: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(c["frames"], serde_json::json!([20, 20]), "both modes ran the same frame count");
    let rows = c["rows"].as_array().unwrap();
    let row = |m: &str| rows.iter().find(|r| r["metric"] == m).unwrap_or_else(|| panic!("no row {m}"));
    for r in rows {
        for k in ["metric", "zero_copy", "copy_mode", "zero_copy_spread", "copy_mode_spread"] {
            assert!(!r[k].is_null(), "row {r} lacks {k}");
        }
    }
    let cap = row("copied bytes/frame capture->scale");
    assert_eq!(cap["zero_copy"], 0.0, "zero-copy copies nothing");
    assert_eq!(cap["copy_mode"].as_f64().unwrap(), 2.0 * NV12_320X240, "copy mode: 2 x frame size per frame per hop");
    let sc = row("copied bytes/frame scale->infer");
    assert_eq!(sc["copy_mode"].as_f64().unwrap(), 2.0 * BGR_416);
    assert_eq!(row("socket bytes/frame capture->scale")["zero_copy"], 0.0);
    assert!(row("socket bytes/frame capture->scale")["copy_mode"].as_f64().unwrap() >= 2.0 * NV12_320X240);
    for r in c["runs"].as_array().unwrap() {
        let st = &r["stages"];
        let frames = st["capture"]["frames_out"].as_f64().unwrap();
        if let Some(copied) = st["capture"]["copy_out"]["copied_bytes"].as_f64() {
            let total = copied + st["scale"]["copy_in"]["copied_bytes"].as_f64().unwrap();
            assert_eq!(
                total,
                2.0 * frames * NV12_320X240,
                "copy mode counted 2 x frames x frame size on the first hop"
            );
        } else {
            assert!(st["scale"]["copy_in"].is_null(), "zero-copy mode has no copy counters");
        }
    }
}

/// Compare with two cameras: each round runs both, and the capture stages of the cameras
/// are summed into one capture row (frames, copies).
#[test]
fn compare_takes_several_cameras() {
    let out = zcpipe()
        .args(["compare", "--frames", "15", "--infer", "none", "--rounds", "1", "--json", "--ring-policy", "block"])
        .args(["--source", "a=testsrc:320x240@200", "--source", "b=testsrc:320x240@200"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let c: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(c["frames"], serde_json::json!([30, 30]), "15 frames of each camera in both modes");
    let rows = c["rows"].as_array().unwrap();
    let row = |m: &str| rows.iter().find(|r| r["metric"] == m).unwrap_or_else(|| panic!("no row {m}"));
    let cap = row("copied bytes/frame capture->scale");
    assert_eq!((cap["zero_copy"].as_f64().unwrap(), cap["copy_mode"].as_f64().unwrap()), (0.0, 2.0 * NV12_320X240));
    for r in c["runs"].as_array().unwrap() {
        assert_eq!(r["cameras"]["a"]["published"], 15, "{}", r["cameras"]);
        assert_eq!(r["cameras"]["b"]["published"], 15, "{}", r["cameras"]);
    }
}

#[test]
fn compare_table_and_report_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("report.svg");
    let text = common::compare_one_round(dir.path(), "160x120@200", 10, &svg);
    assert!(text.contains("| metric | zero-copy | copy mode | copy / zero |"), "{text}");
    assert!(text.lines().filter(|l| l.contains("| latency p50")).count() >= 5, "{text}");
    // The headline first: end-to-end latency, then what a frame costs in all.
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("| ") && !l.starts_with("| part")).collect();
    assert!(rows[0].starts_with("| headline | latency p50 total (µs) |"), "{text}");
    assert!(rows[3].starts_with("| headline | copied bytes/frame, all hops |"), "{text}");
    let decimal_zero =
        |t: &str| t.len() > 2 && t.ends_with(".0") && t[..t.len() - 2].chars().all(|c| c.is_ascii_digit());
    let cells = text.lines().skip(1).flat_map(|l| l.split(['|', ' '])).flat_map(|c| c.split(".."));
    let mut cells = cells;
    assert!(!cells.any(decimal_zero), "whole numbers print without decimals: {text}");
    let s = std::fs::read_to_string(&svg).unwrap();
    assert!(s.starts_with("<svg") && s.contains("zero-copy") && s.contains("copy mode"), "{}", &s[..s.len().min(200)]);
}

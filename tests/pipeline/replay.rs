//! `--infer replay:FILE.jsonl`: the whole pipeline publishes the file's detections, frame by
//! frame, at the file's boxes (the infer stage places them in the model input through each
//! frame's letterbox and maps them back, as for a model's), with the file's labels; a bad
//! file is one line before any stage starts.

use crate::common;

use common::zcpipe_run;
use serde_json::Value;

#[test]
fn replayed_detections_come_out_where_the_file_puts_them() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("rec.jsonl");
    // Recorded at 640x360 (half the camera's 1280x720): boxes double. Three lines, seq 0..2,
    // with an event line between (skipped); seq 1 has none.
    std::fs::write(
        &rec,
        "{\"type\":\"frame\",\"seq\":0,\"width\":640,\"height\":360,\"detections\":[{\"class_id\":0,\"label\":\"person\",\"score\":0.9,\"box\":[10,20,110,220]}]}\n\
         {\"type\":\"event\",\"event\":\"new\",\"camera\":\"x\"}\n\
         {\"type\":\"frame\",\"seq\":1,\"width\":640,\"height\":360,\"detections\":[]}\n\
         {\"type\":\"frame\",\"seq\":2,\"width\":640,\"height\":360,\"detections\":[{\"class_id\":2,\"label\":\"car\",\"score\":0.6,\"box\":[300,100,500,300]},{\"class_id\":0,\"label\":\"person\",\"score\":0.2,\"box\":[0,0,5,5]}]}\n",
    )
    .unwrap();
    let out = zcpipe_run(dir.path())
        .args([
            "--instance",
            "replay",
            "--source",
            "testsrc:1280x720",
            "--frames",
            "9",
            "--fps",
            "max",
            "--ring-policy",
            "block",
            "--scaler",
            "cpu",
            "--tracker",
            "none",
            "--json",
        ])
        .arg(format!("--infer=replay:{}", rec.display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("replay"), "the plan names the replay file: {stderr}");
    let frames: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["type"] == "frame")
        .collect();
    assert_eq!(frames.len(), 9, "{stderr}");
    for f in &frames {
        let seq = f["seq"].as_u64().unwrap();
        let dets = f["detections"].as_array().unwrap();
        // (label, score, box in 1280x720 pixels); score 0.2 is under the default threshold 0.3.
        let want: &[(&str, f64, [f64; 4])] = match seq % 3 {
            0 => &[("person", 0.9, [20.0, 40.0, 220.0, 440.0])],
            1 => &[],
            _ => &[("car", 0.6, [600.0, 200.0, 1000.0, 600.0])],
        };
        assert_eq!(dets.len(), want.len(), "frame {seq}: {f}");
        for (d, (label, score, b)) in dets.iter().zip(want) {
            assert_eq!(d["label"], *label, "frame {seq}: {f}");
            assert!((d["score"].as_f64().unwrap() - score).abs() < 1e-3, "frame {seq}: {f}");
            let got: Vec<f64> = d["box"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
            for (g, w) in got.iter().zip(b) {
                assert!((g - w).abs() < 0.05, "frame {seq}: box {got:?}, file says {b:?}");
            }
        }
    }
}

#[test]
fn a_bad_replay_file_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("bad.jsonl");
    std::fs::write(&rec, "{\"detections\":[]}\n{\"detections\":[{\"class_id\":0,\"box\":[9,0,1,1]}]}\n").unwrap();
    for (infer, says) in [
        (format!("replay:{}", rec.display()), format!("replay file {} line 2: box", rec.display())),
        ("replay:/nonexistent/rec.jsonl".to_string(), "cannot read replay file /nonexistent/rec.jsonl".to_string()),
        ("replay".to_string(), "--infer replay needs a file: --infer replay:FILE.jsonl".to_string()),
    ] {
        let out = zcpipe_run(dir.path())
            .args(["--instance", "replay-bad", "--source", "testsrc", "--frames", "2", "--scaler", "cpu"])
            .arg(format!("--infer={infer}"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{infer}: {stderr}");
        assert_eq!(stderr.matches("error:").count(), 1, "one line: {stderr}");
        assert!(stderr.contains(&says), "{infer}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

//! `zcpipe bench ipc` end to end, through the built binary: the shape of its JSON and
//! markdown output and its refusal of bad flags. Never asserts on speed.

use std::process::{Command, Output};
use std::sync::Mutex;

/// Measurements pin processes to CPUs: run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Every transport of a default run (`iceoryx2` only in builds with that cargo feature).
#[cfg(not(feature = "iceoryx2"))]
const TRANSPORTS: [&str; 12] = [
    "none",
    "pipe",
    "pipe-1m",
    "mq",
    "unix",
    "tcp",
    "shm-copy",
    "shm-inplace",
    "shm-spin",
    "ring",
    "ring-desc",
    "ring-spin",
];
#[cfg(feature = "iceoryx2")]
const TRANSPORTS: [&str; 13] = [
    "none",
    "pipe",
    "pipe-1m",
    "mq",
    "unix",
    "tcp",
    "shm-copy",
    "shm-inplace",
    "shm-spin",
    "ring",
    "ring-desc",
    "ring-spin",
    "iceoryx2",
];
const SMALL: [&str; 6] = ["bench", "ipc", "--sizes", "64,4K", "--rounds", "2"];

fn zcpipe(args: &[&str]) -> Output {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    Command::new(env!("CARGO_BIN_EXE_zcpipe")).args(args).env("RUST_LOG", "warn").output().expect("running zcpipe")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn json_and_markdown_have_every_row() {
    let mut args = SMALL.to_vec();
    args.extend(["--iters", "50", "--json"]);
    let out = zcpipe(&args);
    assert!(out.status.success(), "exit {:?}\nstderr:\n{}", out.status, text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", text(&out.stdout)));
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), TRANSPORTS.len() * 2, "one row per transport and size");
    for bytes in [64u64, 4096] {
        for t in TRANSPORTS {
            let r = rows
                .iter()
                .find(|r| r["transport"] == t && r["size_bytes"].as_u64() == Some(bytes))
                .unwrap_or_else(|| panic!("no row for {t} at {bytes} B"));
            match r["status"].as_str() {
                Some("ok") => {
                    let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{t} {bytes}: {k} missing: {r}"));
                    let (med, lo, hi) = (f("median_us"), f("min_us"), f("max_us"));
                    assert!(lo > 0.0 && lo <= med && med <= hi, "{t} {bytes}: min {lo} median {med} max {hi}");
                    assert_eq!(r["runs_us"].as_array().map(|a| a.len()), Some(2), "{t} {bytes}: two runs");
                    assert!(f("ratio_to_none") > 0.0, "{t} {bytes}: ratio");
                }
                Some("skipped") => {
                    let why = r["reason"].as_str().unwrap_or("");
                    assert!(!why.is_empty(), "{t} {bytes}: skipped without a reason");
                }
                other => panic!("{t} {bytes}: status {other:?}: {}", r["reason"]),
            }
        }
    }
    for t in ["none", "ring", "ring-desc", "unix", "shm-inplace"] {
        assert!(
            rows.iter().filter(|r| r["transport"] == t).all(|r| r["status"] == "ok"),
            "{t} must be measured at every size here"
        );
    }
    assert_eq!(v["goals"].as_array().map(|g| g.len()), Some(4), "the three goals of issue 5 and issue 18's are listed");

    // The same run as a markdown table: the header, then one line per row.
    let mut args = SMALL.to_vec();
    args.extend(["--iters", "20"]);
    let out = zcpipe(&args);
    assert!(out.status.success(), "exit {:?}\nstderr:\n{}", out.status, text(&out.stderr));
    let md = text(&out.stdout);
    let lines: Vec<&str> = md.lines().filter(|l| l.starts_with("| ")).collect();
    assert_eq!(lines.first().copied(), Some("| transport | size | median µs | min µs | max µs | vs none |"), "{md}");
    assert!(md.contains("\n|---|---|---:|---:|---:|---:|\n"), "{md}");
    assert_eq!(lines.len() - 1, rows.len(), "one table line per row:\n{md}");
    for size in ["64 B", "4 KiB"] {
        for t in TRANSPORTS {
            let prefix = format!("| {t} | {size} | ");
            assert_eq!(lines.iter().filter(|l| l.starts_with(&prefix)).count(), 1, "{prefix}\n{md}");
        }
    }
}

#[test]
fn baseline_is_always_measured() {
    let out = zcpipe(&[
        "bench",
        "ipc",
        "--sizes",
        "1K",
        "--rounds",
        "1",
        "--iters",
        "10",
        "--transports",
        "ring-desc",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = v["rows"].as_array().unwrap().iter().map(|r| r["transport"].as_str().unwrap()).collect();
    assert_eq!(names, ["none", "ring-desc"]);
}

#[test]
fn bad_flags_are_clear_errors() {
    for (args, says) in [
        (&["--sizes", "12q"][..], "unknown suffix"),
        (&["--sizes", "64k"], "64K"),
        (&["--sizes", "0"], "1 byte"),
        (&["--sizes", "1G"], "unknown suffix"),
        (&["--rounds", "0"], "--rounds"),
        (&["--iters", "x"], "--iters"),
        (&["--transports", "carrier-pigeon"], "possible values"),
        (&["--cold", "0"], "--cold"),
        (&["--cpus", "0"], "two CPU numbers"),
        (&["--cpus", "0,0"], "two different CPUs"),
        (&["--cpus", "0,4095"], "affinity mask"),
    ] {
        let mut a = vec!["bench", "ipc"];
        a.extend_from_slice(args);
        let out = zcpipe(&a);
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(err.contains(says), "{args:?}: stderr should mention {says:?}:\n{err}");
        assert!(!err.contains("panicked"), "{args:?} panicked:\n{err}");
        assert!(out.stdout.is_empty(), "{args:?} printed a table anyway");
    }
}

/// Without the `iceoryx2` feature, asking for its row is a one-line error saying how to
/// rebuild, and no table is printed.
#[cfg(not(feature = "iceoryx2"))]
#[test]
fn iceoryx2_needs_its_feature() {
    let out = zcpipe(&["bench", "ipc", "--sizes", "64", "--transports", "ring,iceoryx2"]);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "should fail:\n{err}");
    assert!(err.contains("built without the iceoryx2 feature") && err.contains("--features iceoryx2"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(out.stdout.is_empty(), "printed a table anyway");
}

/// With the `iceoryx2` feature: the iceoryx2 row is measured like every other row (a 1080p
/// NV12 frame included), next to the baseline and zcpipe's ring, in JSON and markdown.
/// Structure only, no timing.
#[cfg(feature = "iceoryx2")]
#[test]
fn iceoryx2_row_is_measured() {
    let frame = 3_110_400u64; // 1080p NV12
    let base =
        ["bench", "ipc", "--sizes", "64,1080p", "--rounds", "2", "--iters", "20", "--transports", "iceoryx2,ring"];
    let mut args = base.to_vec();
    args.push("--json");
    let out = zcpipe(&args);
    assert!(out.status.success(), "exit {:?}\nstderr:\n{}", out.status, text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", text(&out.stdout)));
    let rows = v["rows"].as_array().expect("rows");
    let names: Vec<&str> = rows.iter().map(|r| r["transport"].as_str().unwrap_or("")).collect();
    assert_eq!(names, ["none", "ring", "iceoryx2", "none", "ring", "iceoryx2"], "table order, sizes outermost");
    for bytes in [64u64, frame] {
        let r = rows
            .iter()
            .find(|r| r["transport"] == "iceoryx2" && r["size_bytes"].as_u64() == Some(bytes))
            .unwrap_or_else(|| panic!("no iceoryx2 row at {bytes} B"));
        assert_eq!(r["status"], "ok", "iceoryx2 at {bytes} B: {}", r["reason"]);
        let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("iceoryx2 {bytes}: {k} missing: {r}"));
        let (med, lo, hi) = (f("median_us"), f("min_us"), f("max_us"));
        assert!(lo > 0.0 && lo <= med && med <= hi, "iceoryx2 {bytes}: min {lo} median {med} max {hi}");
        assert_eq!(r["runs_us"].as_array().map(|a| a.len()), Some(2), "iceoryx2 {bytes}: two runs");
        assert_eq!(r["iters"].as_u64(), Some(20), "iceoryx2 {bytes}: --iters applies");
        assert!(f("ratio_to_none") > 0.0, "iceoryx2 {bytes}: ratio");
    }
    let notes = v["notes"].as_array().expect("notes");
    assert!(
        notes.iter().any(|n| n.as_str().is_some_and(|n| n.starts_with("iceoryx2: iceoryx2 0.10"))),
        "legend: {notes:?}"
    );
    assert!(!notes.iter().any(|n| n.as_str().is_some_and(|n| n.contains("not measured"))), "{notes:?}");
    let ctx = v["context"].as_array().expect("context");
    assert!(
        ctx.iter().any(|c| c["name"].as_str().is_some_and(|n| n.starts_with("iceoryx2 / ring at 1080p"))
            && c["value"].as_f64().is_some()),
        "context has iceoryx2 / ring at 1080p: {ctx:?}"
    );

    let out = zcpipe(&base);
    assert!(out.status.success(), "exit {:?}\nstderr:\n{}", out.status, text(&out.stderr));
    let md = text(&out.stdout);
    for size in ["64 B", "1080p (3110400 B)"] {
        let prefix = format!("| iceoryx2 | {size} | ");
        assert_eq!(md.lines().filter(|l| l.starts_with(&prefix)).count(), 1, "{prefix}\n{md}");
    }
}

//! `--display` on a machine where it cannot work (this host has no DRM): a missing card, no
//! card at all, or a node that is no KMS device is one clear line, and `zcpipe run` goes on
//! without a display; `zcpipe stage display` alone fails with one `zcpipe display: error:`
//! line. The
//! display itself runs on vkms in `make vm-test` (tests/vm_guest/).

use crate::common;

use common::{zcpipe, zcpipe_run};
use serde_json::Value;

fn summary(dir: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn a_run_with_a_missing_card_says_so_once_and_runs_without_a_display() {
    let dir = tempfile::tempdir().unwrap();
    let out = zcpipe_run(dir.path())
        .args([
            "--instance",
            "disp-missing",
            "--source",
            "testsrc:320x240",
            "--frames",
            "10",
            "--fps",
            "max",
            "--ring-policy",
            "block",
            "--infer",
            "none",
            "--no-print",
            "--display",
            "/dev/dri/card9",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let said: Vec<&str> = stderr.lines().filter(|l| l.contains("/dev/dri/card9")).collect();
    assert!(
        said.iter().any(|l| l.contains("does not exist") && l.contains("the pipeline runs without a display")),
        "{stderr}"
    );
    let s = summary(dir.path());
    assert!(s["stages"].get("display").is_none(), "no display stage: {}", s["stages"]);
    assert_eq!(s["stages"]["capture"]["frames_out"], 10);
    assert!(s["exit_codes"].as_object().unwrap().values().all(|c| c == 0), "{}", s["exit_codes"]);
}

#[test]
fn auto_on_a_machine_without_dri_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("dev")).unwrap();
    let out = zcpipe_run(dir.path())
        .env("ZCPIPE_TEST_ROOT", &root)
        .args([
            "--instance",
            "disp-auto",
            "--source",
            "testsrc:320x240",
            "--frames",
            "5",
            "--fps",
            "max",
            "--ring-policy",
            "block",
            "--infer",
            "none",
            "--no-print",
            "--display",
            "auto",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stderr.lines().filter(|l| l.contains("display: no DRM card")).count(), 1, "{stderr}");
    assert!(summary(dir.path())["stages"].get("display").is_none());
}

#[test]
fn the_display_stage_on_a_node_that_is_no_kms_device_is_one_error_line() {
    let dir = tempfile::tempdir().unwrap();
    // A regular file where a card should be: opens, but DRM_IOCTL_MODE_GETRESOURCES fails.
    let node = dir.path().join("card0");
    std::fs::write(&node, b"").unwrap();
    let out = zcpipe()
        .args(["stage", "display", "--instance", "disp-node", "--run-dir"])
        .arg(dir.path().join("run"))
        .arg("--display")
        .arg(&node)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("zcpipe display: error:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(errors[0].contains(&node.display().to_string()) && errors[0].contains("not a KMS device"), "{}", errors[0]);
    assert!(!stderr.contains("panicked"), "{stderr}");
    // `--display none` has nothing to do: said, with what to pass instead.
    let out = zcpipe().args(["stage", "display", "--display", "none"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--display none") && stderr.contains("--display auto"), "{stderr}");
}

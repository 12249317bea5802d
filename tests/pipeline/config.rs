//! The configuration file through the binary: `zcpipe config check` on good and bad files
//! (its exact lines and exit codes), `zcpipe config print` with a variable set on the child
//! (precedence flag > env > file > default), `zcpipe run --config FILE --dry-run` (the
//! file's cameras in the plan), and the example `deploy/zcpipe.toml` the package installs.
//! Every file is in a private temporary folder; the child's environment is its own.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common;

/// `text` as `zcpipe.toml` in a fresh temporary folder.
fn file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("zcpipe.toml");
    std::fs::write(&p, text).unwrap();
    (dir, p)
}

/// `zcpipe ARGS` with `env` set on the child (and no ZCPIPE_CONFIG inherited from the caller).
fn zcpipe(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let mut c = common::zcpipe();
    c.args(args).env_remove("ZCPIPE_CONFIG");
    for (k, v) in env {
        c.env(k, v);
    }
    let out: Output = c.output().unwrap();
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(!stderr.contains("panicked"), "{stderr}");
    (out.status.code(), stdout, stderr)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn check_says_ok_or_names_the_line() {
    let (_d, good) = file("scaler = \"cpu\"\njson = true\nzone = [\"door=0,0,9,0,9,9\"]\n\n[camera.front]\nsource = \"testsrc:64x48\"\nfps = 5\n\n[camera.back]\nsource = \"testsrc:32x32\"\n");
    let (code, out, err) = zcpipe(&["config", "check", s(&good)], &[]);
    assert_eq!((code, out, err), (Some(0), format!("{}: ok (6 keys, 2 cameras)\n", good.display()), String::new()));

    let bad = [
        ("# settings\nfps = 10\nfsp = 5\n", "3: unknown key `fsp`: did you mean `fps`? (`zcpipe config print` lists every key)"),
        ("\njson = \"yes\"\n", "2: json = \"yes\": expected true or false, found a string"),
        ("restart-max = 5000\n", "1: restart-max = 5000: invalid value '5000' for '--restart-max <RESTART_MAX>': 5000 is not in 0..=1000"),
        ("[camera.front]\nsource = \"testsrc\"\nbuffers = 3\n", "3: [camera.front] `buffers` cannot differ per camera: put it at the top of the file (a camera's keys: source, fps, size, format, capture-io, record-dir, record-continuous, record-pre, record-post, record-labels, record-zones, record-keep-days, record-max-gb, zone, line, loiter, mask, filter, calibration)"),
    ];
    for (text, want) in bad {
        let (_d, p) = file(text);
        let (code, out, err) = zcpipe(&["config", "check", s(&p)], &[]);
        assert_eq!(
            (code, out.as_str(), err),
            (Some(2), "", format!("zcpipe config: error: {}:{want}\n", p.display())),
            "{text}"
        );
    }
    // The whole file together: a V4L2 option on a test pattern names the camera.
    let (_d, p) = file("[camera.front]\nsource = \"testsrc\"\nformat = \"NV12\"\n");
    let (code, _, err) = zcpipe(&["config", "check", s(&p)], &[]);
    assert_eq!(code, Some(2));
    assert!(err.starts_with(&format!("zcpipe config: error: {}: camera front: --format", p.display())), "{err}");
    // A file that is not there.
    let (code, _, err) = zcpipe(&["config", "check", "/nonexistent/zcpipe.toml"], &[]);
    assert_eq!(code, Some(2));
    assert!(err.starts_with("zcpipe config: error: /nonexistent/zcpipe.toml: cannot read: "), "{err}");
}

#[test]
fn print_shows_the_precedence_with_a_variable_set() {
    let (_d, p) = file("restart-max = 7\nrestart-window = 30\nwatchdog = 2\n");
    let (code, out, err) =
        zcpipe(&["config", "print", "--config", s(&p), "--watchdog", "9"], &[("ZCPIPE_RESTART_WINDOW", "45")]);
    assert_eq!(code, Some(0), "{err}");
    for want in [
        format!("# file: {}\n", p.display()),
        "\nrestart-max = 7  # file:1\n".into(),
        "\nrestart-window = 45  # env ZCPIPE_RESTART_WINDOW\n".into(),
        "\nwatchdog = 9  # flag\n".into(),
        "\nrestart-reset = 60  # default\n".into(),
    ] {
        assert!(out.contains(&want), "{want:?} in:\n{out}");
    }
    // A bad variable names itself.
    let (code, _, err) = zcpipe(&["config", "print", "--config", s(&p)], &[("ZCPIPE_WATCHDOG", "soon")]);
    assert_eq!(code, Some(2));
    assert!(
        err.starts_with("zcpipe config: error: ZCPIPE_WATCHDOG=soon: invalid value 'soon' for '--watchdog <WATCHDOG>'"),
        "{err}"
    );
    // And `zcpipe run` refuses it the same way, before anything starts.
    let (code, _, err) = zcpipe(&["run", "--config", s(&p), "--dry-run"], &[("ZCPIPE_WATCHDOG", "soon")]);
    assert_eq!(code, Some(2));
    assert!(err.starts_with("zcpipe: error: ZCPIPE_WATCHDOG=soon: invalid value 'soon'"), "{err}");
}

#[test]
fn run_dry_run_plans_the_files_cameras() {
    let dir = tempfile::tempdir().unwrap();
    let (_d, p) = file("scaler = \"cpu\"\ninfer = \"none\"\nheap = \"memfd\"\n\n[camera.front]\nsource = \"testsrc:64x48\"\nfps = 5\n\n[camera.door]\nsource = \"testsrc:32x32\"\n");
    let rt = dir.path().to_str().unwrap();
    let (code, out, err) = zcpipe(&["run", "--config", s(&p), "--dry-run"], &[("XDG_RUNTIME_DIR", rt)]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("front: testsrc:64x48@30 paced at 5 fps (--fps)"), "{out}");
    assert!(out.contains("camera front: testsrc:64x48@30 (its own capture stage, capture@front)\ncamera door: testsrc:32x32@30 (its own capture stage, capture@door)\n"), "{out}");
    // A --source on the command line replaces the file's cameras.
    let (code, out, err) =
        zcpipe(&["run", "--config", s(&p), "--dry-run", "--source", "testsrc:16x16"], &[("XDG_RUNTIME_DIR", rt)]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("testsrc:16x16") && !out.contains("camera front"), "{out}");
    // The default file is not read when ZCPIPE_CONFIG is empty (and --config none reads none).
    let (code, out, _) = zcpipe(
        &["run", "--config", "none", "--dry-run", "--scaler", "cpu", "--infer", "none", "--source", "testsrc:8x8"],
        &[("XDG_RUNTIME_DIR", rt)],
    );
    assert_eq!(code, Some(0));
    assert!(!out.contains("camera front"), "{out}");
    // A bad file stops `zcpipe run` with its line, exit 2.
    let (_d2, bad) = file("scaler = \"cpu\"\nfps = \"fast\"\n");
    let (code, _, err) = zcpipe(&["run", "--config", s(&bad), "--dry-run"], &[("XDG_RUNTIME_DIR", rt)]);
    assert_eq!(code, Some(2));
    assert!(
        err.starts_with(&format!(
            "zcpipe: error: {}:2: fps = \"fast\": invalid value 'fast' for '--fps <FPS>'",
            bad.display()
        )),
        "{err}"
    );
}

#[test]
fn the_example_config_passes_its_check() {
    let example = common::root().join("deploy/zcpipe.toml");
    let (code, out, err) = zcpipe(&["config", "check", s(&example)], &[]);
    assert_eq!((code, err.as_str()), (Some(0), ""), "{out}");
    assert!(out.starts_with(&format!("{}: ok (", example.display())) && out.ends_with(" 2 cameras)\n"), "{out}");
}

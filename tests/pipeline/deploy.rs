//! The systemd units in `deploy/` keep their hardening (systemd.exec(5)), each allows the
//! devices its stage opens and no others, and where `systemd-analyze` is installed, its
//! offline security score (`systemd-analyze security --offline=true`, systemd >= 252) is at
//! most 2.0 ("OK"; the units scored 9.2 "UNSAFE" before the hardening).

use std::process::Command;

use crate::common;

const UNITS: [&str; 5] = ["capture", "scale", "infer", "publish", "record"];

fn unit(stage: &str) -> (std::path::PathBuf, String) {
    let p = common::root().join(format!("deploy/zcpipe-{stage}.service"));
    let text = std::fs::read_to_string(&p).unwrap();
    (p, text)
}

/// `systemd-analyze security --offline=true` of unit file `p`: its score and its line
/// (`None`: systemd-analyze is not installed).
fn exposure(p: &std::path::Path) -> Option<(f64, String)> {
    Command::new("systemd-analyze").arg("--version").output().ok()?;
    let out =
        Command::new("systemd-analyze").args(["security", "--offline=true", "--no-pager"]).arg(p).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let line =
        text.lines().find(|l| l.contains("Overall exposure level")).unwrap_or_else(|| panic!("no score in:\n{text}"));
    let score = line.split(": ").nth(1).and_then(|s| s.split_whitespace().next()).and_then(|s| s.parse().ok());
    eprintln!("EVIDENCE {}: {line}", p.file_name().unwrap().to_string_lossy());
    Some((score.unwrap_or_else(|| panic!("{line}")), line.to_string()))
}

/// The values of `key=` lines in the [Service] section.
fn values<'a>(text: &'a str, key: &str) -> Vec<&'a str> {
    text.lines().filter_map(|l| l.strip_prefix(key)?.strip_prefix('=')).collect()
}

#[test]
fn every_unit_keeps_its_hardening() {
    for stage in UNITS {
        let (_, t) = unit(stage);
        for (key, want) in [
            ("NoNewPrivileges", "yes"),
            ("CapabilityBoundingSet", ""),
            ("ProtectSystem", "strict"),
            ("ProtectHome", "yes"),
            ("PrivateTmp", "yes"),
            ("PrivateNetwork", "yes"),
            ("RestrictAddressFamilies", "AF_UNIX"),
            ("DevicePolicy", "closed"),
            ("SystemCallArchitectures", "native"),
            ("UMask", "0077"),
            ("Restart", "always"),
        ] {
            assert_eq!(values(&t, key), [want], "{stage}: {key}");
        }
        assert!(values(&t, "SystemCallFilter").contains(&"@system-service"), "{stage}");
    }
}

#[test]
fn each_stage_may_open_its_devices_only() {
    let want: [(&str, &[&str]); 5] = [
        ("capture", &["char-video4linux rw", "char-dma_heap rw", "/dev/udmabuf rw"]),
        ("scale", &["/dev/rga rw", "char-video4linux rw", "char-dma_heap rw", "/dev/udmabuf rw"]),
        ("infer", &["char-drm rw", "char-dma_heap rw"]),
        ("publish", &[]),
        ("record", &[]),
    ];
    for (stage, devices) in want {
        let (_, t) = unit(stage);
        assert_eq!(values(&t, "DeviceAllow"), devices, "{stage}");
    }
    // The infer unit names no model: the stage's auto picks the .rknn for the SoC.
    let (_, t) = unit("infer");
    let exec = values(&t, "ExecStart")[0];
    assert!(exec.contains("--infer auto") && !exec.contains("--model"), "{exec}");
    // The record unit writes its clips into its state directory, and its command line is
    // one zcpipe accepts (clap reads every option before it acts on --help).
    let (_, t) = unit("record");
    assert_eq!(values(&t, "StateDirectory"), ["zcpipe"]);
    let exec = values(&t, "ExecStart")[0];
    assert!(exec.contains("--record-dir /var/lib/zcpipe/clips"), "{exec}");
    let out = common::zcpipe().args(exec.split_whitespace().skip(1)).arg("--help").output().unwrap();
    assert!(out.status.success(), "{exec}: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn systemd_analyze_scores_every_unit_ok() {
    if Command::new("systemd-analyze").arg("--version").output().is_err() {
        eprintln!("systemd-analyze is not installed: the scores are not checked here");
        return;
    }
    for stage in UNITS {
        let (p, _) = unit(stage);
        let (score, line) = exposure(&p).unwrap();
        assert!(score <= 2.0, "{stage}: {line}");
    }
}

/// The capture template (`zcpipe-capture@NAME`, one camera of several) keeps the single
/// capture unit's hardening and devices, with the network opened for IP cameras only: the
/// two files differ in exactly those lines and the camera's own ones.
#[test]
fn the_capture_template_is_the_capture_unit_with_a_camera_and_the_network() {
    let (_, single) = unit("capture");
    let (_, t) = unit("capture@");
    let exec = values(&t, "ExecStart")[0];
    // The source comes from the environment file (ZCPIPE_SOURCE), never the command line.
    assert!(exec.contains("--camera %i") && !exec.contains("--source") && !exec.contains("ZCPIPE_SOURCE"), "{exec}");
    assert_eq!(values(&t, "EnvironmentFile"), ["/etc/zcpipe/camera-%i.env"]);
    assert_eq!(values(&t, "PrivateNetwork"), ["no"]);
    assert_eq!(values(&t, "RestrictAddressFamilies"), ["AF_UNIX AF_INET AF_INET6"]);
    let settings = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| !l.starts_with('#') && l.contains('='))
            .filter(|l| {
                !["ExecStart=", "EnvironmentFile=", "PrivateNetwork=", "RestrictAddressFamilies=", "Description="]
                    .iter()
                    .any(|k| l.starts_with(k))
            })
            .map(String::from)
            .collect()
    };
    assert_eq!(settings(&t), settings(&single), "every other setting is the single capture unit's");
    // Its command line, as systemd expands it for an IP camera, is one zcpipe accepts:
    // every option parses (clap reads them all before it acts on the --help at the end).
    let argv = exec.replace("%i", "front").replace("$ZCPIPE_CAPTURE_ARGS", "--fps 15 --wait-for-camera");
    let out = common::zcpipe()
        .args(argv.split_whitespace().skip(1))
        .arg("--help")
        .env("ZCPIPE_SOURCE", "rtsp://viewer:secret@127.0.0.1/stream1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{argv}: {}", String::from_utf8_lossy(&out.stderr));
    // Its offline score, as an instance (`systemd-analyze` scores units, not templates).
    let dir = tempfile::tempdir().unwrap();
    let inst = dir.path().join("zcpipe-capture@front.service");
    std::fs::write(&inst, &t).unwrap();
    if let Some((score, line)) = exposure(&inst) {
        assert!(score <= 2.0, "{line}");
    }
}

/// The pipeline under one supervisor (`zcpipe.service`, `zcpipe run` with its control socket):
/// the per-stage units' hardening, every stage's devices and the network; `systemctl reload`
/// is `zcpipe ctl reload` on its run directory; it and `zcpipe.target` never run together;
/// both command lines are ones zcpipe accepts.
#[test]
fn the_supervised_unit_reloads_with_zcpipe_ctl() {
    let p = common::root().join("deploy/zcpipe.service");
    let t = std::fs::read_to_string(&p).unwrap();
    for (key, want) in [
        ("NoNewPrivileges", "yes"),
        ("CapabilityBoundingSet", ""),
        ("ProtectSystem", "strict"),
        ("PrivateTmp", "yes"),
        ("PrivateNetwork", "no"),
        ("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6"),
        ("DevicePolicy", "closed"),
        ("UMask", "0077"),
        ("Restart", "always"),
        ("Conflicts", "zcpipe.target"),
    ] {
        assert_eq!(values(&t, key), [want], "{key}");
    }
    assert_eq!(
        values(&t, "DeviceAllow"),
        ["char-video4linux rw", "char-dma_heap rw", "/dev/udmabuf rw", "/dev/rga rw", "char-drm rw"]
    );
    let target = std::fs::read_to_string(common::root().join("deploy/zcpipe.target")).unwrap();
    assert_eq!(values(&target, "Conflicts"), ["zcpipe.service"]);
    let (exec, reload) = (values(&t, "ExecStart")[0], values(&t, "ExecReload")[0]);
    assert!(exec.starts_with("/usr/bin/zcpipe run ") && exec.contains("--run-dir /run/zcpipe/default"), "{exec}");
    assert_eq!(reload, "/usr/bin/zcpipe ctl --run-dir /run/zcpipe/default reload");
    for argv in [exec, reload] {
        let out = common::zcpipe().args(argv.split_whitespace().skip(1)).arg("--help").output().unwrap();
        assert!(out.status.success(), "{argv}: {}", String::from_utf8_lossy(&out.stderr));
    }
    if let Some((score, line)) = exposure(&p) {
        assert!(score <= 2.0, "{line}");
    }
}

/// Every unit runs the binary where the package puts it (`scripts/deb.sh`: `/usr/bin/zcpipe`),
/// and the infer unit finds the models where the package puts them (`/usr/share/zcpipe`, which
/// `core::data` also searches by itself).
#[test]
fn every_unit_runs_the_packaged_binary() {
    for stage in UNITS.iter().copied().chain(["capture@"]) {
        let (_, t) = unit(stage);
        let exec = values(&t, "ExecStart");
        assert_eq!(exec.len(), 1, "{stage}: {exec:?}");
        assert!(
            exec[0].starts_with(&format!("/usr/bin/zcpipe stage {} ", stage.trim_end_matches('@'))),
            "{stage}: {}",
            exec[0]
        );
    }
    let (_, t) = unit("infer");
    assert_eq!(
        values(&t, "Environment").iter().filter(|e| e.starts_with("ZCPIPE_DATA_DIR=")).collect::<Vec<_>>(),
        [&"ZCPIPE_DATA_DIR=/usr/share/zcpipe"]
    );
}

//! The whole pipeline on a vivid camera, bad input, and the plan in the guest. Shared helpers: main.rs.

use super::*;

#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn pipeline_from_vivid_to_a_watch_client() {
    let sp = dev("VIVID_SP");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut args = run_args(d, &format!("v4l2:{}", sp.display()));
    args.extend(
        ["--format", "NV12", "--size", "640x480", "--fps", "30", "--frames", "150", "--scaler", "cpu", "--no-print"]
            .map(String::from),
    );
    let mut bg = Background::start(&args);
    bg.wait_for("streaming from", Duration::from_secs(120));
    let sock = d.join("detections.sock");
    let mut w = zcpipe();
    w.arg("watch").arg(&sock).args(["--json", "--count", "20"]);
    let watch = output_within(w, Duration::from_secs(120));
    let (code, lines) = bg.finish(false, Duration::from_secs(120));
    let stderr = lines.join("\n");
    assert!(watch.status.success(), "watch: {watch:?}");
    let frames: Vec<Value> =
        String::from_utf8_lossy(&watch.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(frames.len(), 20, "the watch client got 20 frames");
    let seqs: Vec<u64> = frames.iter().map(|f| u(&f["seq"])).collect();
    assert!(seqs.windows(2).all(|w| w[1] > w[0]), "{seqs:?}");
    for f in &frames {
        assert_eq!((u(&f["width"]), u(&f["height"])), (640, 480), "{f}");
        assert!(f["latency_us"]["total"].as_f64().unwrap() > 0.0, "{f}");
        assert!(f["detections"].as_array().unwrap().is_empty(), "--infer none detects nothing: {f}");
    }
    assert_eq!(code, 0, "zcpipe run exit code; stderr:\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let s = summary(d);
    for (stage, c) in s["exit_codes"].as_object().unwrap() {
        assert_eq!(c, 0, "{stage} exit code");
    }
    let st = &s["stages"];
    let cap = &st["capture"];
    assert_eq!(u(&cap["frames_out"]), 150, "{cap}");
    let x = &cap["extra"];
    assert_eq!(x["device"], sp.display().to_string());
    assert_eq!((x["format"].as_str().unwrap(), u(&x["width"]), u(&x["height"])), ("NV12", 640, 480));
    assert_eq!(u(&x["buffers_still_out"]), 0, "{x}");
    assert_eq!(u(&x["buffers_home"]), u(&x["buffers"]), "{x}");
    assert_eq!(x["end_reason"], "frame limit");
    assert!(u(&x["dequeued"]) >= 150);
    assert_eq!(u(&x["driver_starved"]), 0, "zcpipe always left the driver a buffer: {x}");
    for stage in ["capture", "scale", "infer", "publish"] {
        let e = &st[stage]["extra"];
        assert_eq!(
            u(&e["open_fds_setup"]),
            u(&e["open_fds_exit"]),
            "{stage}: open fds after set-up and before exit: {e}"
        );
    }
    // Counters add up, hop by hop.
    for (up, down) in [("capture", "scale"), ("scale", "infer"), ("infer", "publish")] {
        let k = &st[up]["output_ring"];
        assert_eq!(
            u(&k["produced"]),
            u(&k["consumed"]) + u(&k["dropped"]) + u(&k["rejected"]) + u(&k["in_flight"]),
            "{up}: {k}"
        );
        assert_eq!(u(&k["in_flight"]), 0, "{up}: {k}");
        assert_eq!(u(&k["rejected"]), 0, "{up}: {k}");
        assert_eq!(u(&st[down]["frames_in"]), u(&k["consumed"]), "{down} took what {up}'s ring says it consumed");
    }
    assert_eq!(u(&st["capture"]["output_ring"]["produced"]), 150);
    let evidence: Vec<&String> = lines
        .iter()
        .filter(|l| {
            l.contains("passed") && l.contains("dma-buf fds") || l.contains("buffers home") || l.contains("granted")
        })
        .collect();
    assert!(lines.iter().any(|l| l.contains("4/4 buffers home")), "{stderr}");
    for l in evidence {
        println!("EVIDENCE pipeline: {l}");
    }
    let k = &st["capture"]["output_ring"];
    println!(
        "EVIDENCE pipeline counters: captured {} (dequeued {}, driver drops {}, driver starved {}), capture->scale consumed {} dropped {}, scaled {}, inferred {}, published {}; watch got seq {}..{}",
        u(&cap["frames_out"]),
        u(&x["dequeued"]),
        u(&x["driver_drops"]),
        u(&x["driver_starved"]),
        u(&k["consumed"]),
        u(&k["dropped"]),
        u(&st["scale"]["frames_out"]),
        u(&st["infer"]["frames_out"]),
        u(&st["publish"]["frames_out"]),
        seqs[0],
        seqs[seqs.len() - 1]
    );
    for stage in ["capture", "scale", "infer", "publish"] {
        let e = &st[stage]["extra"];
        println!(
            "EVIDENCE open fds {stage}: {} after set-up, {} before exit",
            u(&e["open_fds_setup"]),
            u(&e["open_fds_exit"])
        );
    }
}

#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn pipeline_with_drm_dumb_buffers() {
    // `--heap drm`: vivid captures into vkms's dumb buffers (DMABUF import), and the scale
    // stage's output pool is dumb buffers too; every frame crosses three processes as dma-bufs.
    let sp = dev("VIVID_SP");
    let card = dev("DRM_CARD");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut args = run_args(d, &format!("v4l2:{}", sp.display()));
    args.extend(
        [
            "--format",
            "NV12",
            "--size",
            "640x480",
            "--fps",
            "30",
            "--frames",
            "60",
            "--scaler",
            "cpu",
            "--no-print",
            "--capture-io",
            "dmabuf",
            "--heap",
            "drm",
        ]
        .map(String::from),
    );
    let mut c = zcpipe();
    c.args(&args);
    let o = output_within(c, Duration::from_secs(180));
    let stderr = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "zcpipe run --heap drm; stderr:\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let dumb = format!("drm dumb buffers of {} (vkms)", card.display());
    let imported = format!("{dumb} imported by vivid (V4L2_MEMORY_DMABUF)");
    assert!(stderr.contains(&imported), "capture's pool: want \"{imported}\" in\n{stderr}");
    let s = summary(d);
    for (stage, c) in s["exit_codes"].as_object().unwrap() {
        assert_eq!(c, 0, "{stage} exit code");
    }
    let st = &s["stages"];
    let x = &st["capture"]["extra"];
    assert_eq!(u(&st["capture"]["frames_out"]), 60, "{}", st["capture"]);
    assert_eq!(u(&x["buffers_still_out"]), 0, "{x}");
    assert_eq!(u(&x["buffers_home"]), u(&x["buffers"]), "{x}");
    assert_eq!(u(&st["publish"]["frames_in"]), u(&st["infer"]["output_ring"]["consumed"]));
    assert!(u(&st["scale"]["frames_out"]) > 0 && u(&st["publish"]["frames_out"]) > 0, "{st}");
    let pool_lines: Vec<&str> = stderr.lines().filter(|l| l.contains(&dumb)).collect();
    for l in &pool_lines {
        println!("EVIDENCE --heap drm: {l}");
    }
    println!(
        "EVIDENCE --heap drm pipeline: vivid captured {} frames into {dumb} (DMABUF import), scaled {}, inferred {}, published {}; {} of {} buffers home",
        u(&st["capture"]["frames_out"]),
        u(&st["scale"]["frames_out"]),
        u(&st["infer"]["frames_out"]),
        u(&st["publish"]["frames_out"]),
        u(&x["buffers_home"]),
        u(&x["buffers"])
    );
}

/// Runs zcpipe with `args`, expecting it to fail with one error line containing every
/// string of `want`; returns that line.
fn fails_cleanly(what: &str, args: &[String], want: &[&str]) -> String {
    let mut c = zcpipe();
    c.args(args);
    let o = output_within(c, Duration::from_secs(120));
    let stderr = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(!o.status.success(), "{what}: zcpipe must fail; stderr:\n{stderr}");
    assert!(!stderr.contains("panicked"), "{what}: no panic:\n{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("error:")).collect();
    assert_eq!(errors.len(), 1, "{what}: exactly one error line:\n{stderr}");
    for w in want {
        assert!(errors[0].contains(w), "{what}: {:?} should mention {w:?}", errors[0]);
    }
    println!("EVIDENCE bad input ({what}): exit {:?}: {}", o.status.code(), errors[0]);
    errors[0].to_string()
}

#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn bad_input_fails_with_one_clear_line() {
    let (sp, m2m) = (dev("VIVID_SP"), dev("VIM2M"));
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let args = |src: String, extra: &[&str]| {
        let mut a = run_args(d, &src);
        a.extend(extra.iter().map(|s| s.to_string()));
        a.extend(["--frames", "5"].map(String::from));
        a
    };
    let m2m_s = m2m.display().to_string();
    fails_cleanly(
        "a mem2mem node",
        &args(format!("v4l2:{m2m_s}"), &[]),
        &[&m2m_s, "vim2m", "cannot capture", "VIDEO_M2M", "zcpipe doctor"],
    );
    fails_cleanly(
        "a missing node",
        &args("v4l2:/dev/video99".into(), &[]),
        &["/dev/video99 does not exist", "capture nodes here"],
    );
    fails_cleanly(
        "an unsupported format",
        &args(format!("v4l2:{}", sp.display()), &["--format", "NV12M"]),
        &["does not offer NV12M", "it offers", "zcpipe reads NV12, NV16, YUYV, RGB24, BGR24", "--format"],
    );
    fails_cleanly(
        "an absent heap",
        &args(format!("v4l2:{}", sp.display()), &["--heap", "cma"]),
        &["--heap cma", "heaps found: system"],
    );
    fails_cleanly(
        "an absent heap, dmabuf I/O",
        &args(format!("v4l2:{}", sp.display()), &["--heap", "cma", "--capture-io", "dmabuf"]),
        &["--heap cma"],
    );

    fails_cleanly(
        "a mem2mem scaler that cannot take the capture format",
        &args(format!("v4l2:{}", sp.display()), &["--format", "NV12", "--scaler", &format!("v4l2m2m:{m2m_s}")]),
        &[&m2m_s, "cannot convert capture's NV12", "OUTPUT queue", "RGB24", "--format"],
    );
    fails_cleanly(
        "a capture node as the mem2mem scaler",
        &args(format!("v4l2:{}", sp.display()), &["--scaler", &format!("v4l2m2m:{}", sp.display())]),
        &["not a mem2mem device", &m2m_s],
    );

    // A busy device: a second zcpipe on the node the first one streams from.
    let first_dir = tempfile::tempdir().unwrap();
    let mut first = Background::start(&run_args(first_dir.path(), &format!("v4l2:{}", sp.display())));
    first.wait_for("streaming from", Duration::from_secs(120));
    fails_cleanly(
        "a busy device",
        &args(format!("v4l2:{}", sp.display()), &[]),
        &["in use by another process", &sp.display().to_string()],
    );
    let (code, lines) = first.finish(true, Duration::from_secs(60));
    assert_eq!(code, 0, "the first zcpipe stops cleanly on SIGTERM: {lines:#?}");
    assert!(lines.iter().any(|l| l.contains("4/4 buffers home")), "{lines:#?}");
}

/// `zcpipe run --dry-run` with no flags in the guest: the first vivid node is the camera,
/// and vim2m (not mainline `rockchip-rga`) is not a scaler auto picks: the CPU scales.
#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn plan_picks_the_camera_and_the_cpu_scaler() {
    let (sp, mp, m2m) = (dev("VIVID_SP"), dev("VIVID_MP"), dev("VIM2M"));
    let mut c = zcpipe();
    c.args(["run", "--dry-run", "--infer", "none"]);
    let o = output_within(c, Duration::from_secs(120));
    let (stdout, stderr) =
        (String::from_utf8_lossy(&o.stdout).to_string(), String::from_utf8_lossy(&o.stderr).to_string());
    assert_eq!(o.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let line = stdout.lines().next().unwrap_or_default();
    let first = std::cmp::min_by_key(sp.clone(), mp.clone(), |p| {
        p.display().to_string()[10..].parse::<u32>().unwrap_or(u32::MAX)
    });
    assert!(line.starts_with(&format!("plan: v4l2:{} (vivid) ", first.display())), "{stdout}");
    assert!(line.contains("(mmap, EXPBUF) -> cpu -> "), "{stdout}");
    let scaler = stdout.lines().find_map(|l| l.strip_prefix("  scaler: ")).unwrap_or_default();
    assert!(scaler.contains(&format!("{} (vim2m)", m2m.display())) && scaler.contains("rockchip-rga"), "{stdout}");
    println!("EVIDENCE plan in the guest: {line}");
}

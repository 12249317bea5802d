//! `zcpipe doctor` on vivid, vim2m, the heaps and vkms. Shared helpers: main.rs.

use super::*;

/// The formats of `queue` (`capture` or `output`) of a `zcpipe doctor --json` node.
fn doctor_formats<'a>(node: &'a Value, queue: &str) -> Vec<&'a Value> {
    node["queues"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|q| q["queue"] == queue)
        .flat_map(|q| q["formats"].as_array().unwrap())
        .collect()
}

fn doctor_format_names(node: &Value, queue: &str) -> Vec<String> {
    doctor_formats(node, queue).iter().map(|f| f["name"].as_str().unwrap().to_string()).collect()
}

#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn doctor_lists_vivid_vim2m_and_heaps() {
    let (sp, mp, m2m) = (dev("VIVID_SP"), dev("VIVID_MP"), dev("VIM2M"));
    let mut c = zcpipe();
    c.args(["doctor", "--json"]);
    let o = output_within(c, Duration::from_secs(120));
    let stderr = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(0), "doctor --json; stderr:\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let r: Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    let nodes = r["nodes"].as_array().unwrap();
    let node = |p: &Path| -> &Value {
        nodes
            .iter()
            .find(|n| n["path"] == p.display().to_string())
            .unwrap_or_else(|| panic!("doctor does not list {}: {nodes:#?}", p.display()))
    };
    // Every /dev/video* node of the guest, in numeric order.
    let mut want: Vec<(u32, String)> = std::fs::read_dir("/dev")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            Some((name.strip_prefix("video")?.parse().ok()?, format!("/dev/{name}")))
        })
        .collect();
    want.sort();
    let listed: Vec<&str> = nodes.iter().map(|n| n["path"].as_str().unwrap()).collect();
    assert_eq!(listed, want.iter().map(|(_, p)| p.as_str()).collect::<Vec<_>>());

    // vivid, single-planar: a camera with NV12 and YUYV, and frame sizes with rates.
    let n = node(&sp);
    assert_eq!(
        (n["driver"].as_str(), n["role"].as_str(), n["streaming"].as_bool()),
        (Some("vivid"), Some("capture"), Some(true)),
        "{n}"
    );
    assert_eq!(n["usage"], format!("--source v4l2:{}", sp.display()));
    let sp_formats = doctor_format_names(n, "capture");
    assert!(sp_formats.iter().any(|f| f == "NV12") && sp_formats.iter().any(|f| f == "YUYV"), "{sp_formats:?}");
    assert!(!sp_formats.iter().any(|f| f == "NV12M"), "the single-planar node has no NV12M: {sp_formats:?}");
    let nv12 = doctor_formats(n, "capture").into_iter().find(|f| f["name"] == "NV12").unwrap();
    assert_eq!(nv12["zcpipe"], true);
    assert_eq!(nv12["sizes"]["type"], "discrete", "{nv12}");
    let sizes = nv12["sizes"]["sizes"].as_array().unwrap();
    let size = |w: u64, h: u64| {
        sizes.iter().find(|s| s["width"] == w && s["height"] == h).unwrap_or_else(|| panic!("no {w}x{h} in {nv12}"))
    };
    for (w, h) in [(640, 480), (1280, 720)] {
        assert!(!size(w, h)["fps"].as_array().unwrap().is_empty(), "{w}x{h} has frame rates: {nv12}");
    }

    // vivid, multi-planar.
    let n = node(&mp);
    assert_eq!((n["driver"].as_str(), n["role"].as_str()), (Some("vivid"), Some("capture-mplane")), "{n}");
    assert!(n["caps_names"].as_str().unwrap().contains("VIDEO_CAPTURE_MPLANE"), "{n}");
    let mp_formats = doctor_format_names(n, "capture");
    assert!(mp_formats.iter().any(|f| f == "NV12M"), "{mp_formats:?}");

    // vim2m: mem2mem, RGB24 on its OUTPUT queue, listed for --scaler.
    let n = node(&m2m);
    assert_eq!(n["driver"], "vim2m", "{n}");
    assert!(n["role"].as_str().unwrap().starts_with("mem2mem"), "{n}");
    assert_eq!(n["usage"], format!("--scaler v4l2m2m:{}", m2m.display()));
    let queues: Vec<&str> = n["queues"].as_array().unwrap().iter().map(|q| q["queue"].as_str().unwrap()).collect();
    assert_eq!(queues, ["output", "capture"]);
    let (m2m_out, m2m_cap) = (doctor_format_names(n, "output"), doctor_format_names(n, "capture"));
    assert!(m2m_out.iter().any(|f| f == "RGB24"), "{m2m_out:?}");
    assert!(!m2m_cap.is_empty(), "{n}");

    let (heaps, u) = (r["heaps"].as_array().unwrap(), &r["udmabuf"]);
    check_heaps_and_udmabuf(&r);
    doctor_text_report();
    println!(
        "EVIDENCE doctor: {} video nodes; {} ({} formats) capture with NV12 and YUYV; {} ({} formats) capture-mplane with NV12M; {} mem2mem, OUTPUT {:?}, CAPTURE {:?}; heaps {:?}; --heap auto: {}; udmabuf openable, size_limit_mb {}; {} problems",
        nodes.len(),
        sp.display(),
        sp_formats.len(),
        mp.display(),
        mp_formats.len(),
        m2m.display(),
        m2m_out,
        m2m_cap,
        heaps.iter().map(|h| h["name"].as_str().unwrap()).collect::<Vec<_>>(),
        r["heap_auto"]["allocator"].as_str().unwrap(),
        u["size_limit_mb"],
        r["problems"].as_array().unwrap().len()
    );
}

/// `zcpipe doctor --json`'s heaps, udmabuf, SoC and problems in the guest.
fn check_heaps_and_udmabuf(r: &Value) {
    // Heaps and udmabuf.
    let heaps = r["heaps"].as_array().unwrap();
    let system = heaps.iter().find(|h| h["path"] == "/dev/dma_heap/system").unwrap_or_else(|| panic!("{heaps:#?}"));
    assert_eq!((system["openable"].as_bool(), system["read_write"].as_bool()), (Some(true), Some(true)), "{system}");
    assert_eq!(
        (system["choice"].as_str(), system["used_by_choice"].as_bool()),
        (Some("system"), Some(true)),
        "{system}"
    );
    assert_eq!(r["heap_auto"]["allocator"], "dma-heap /dev/dma_heap/system");
    assert_eq!(r["heap_auto"]["dma_buf"], true);
    let u = &r["udmabuf"];
    assert_eq!((u["present"].as_bool(), u["openable"].as_bool()), (Some(true), Some(true)), "{u}");
    // No device tree in the x86 guest; nothing else is wrong with it.
    assert!(r["soc"]["soc"].is_null(), "{}", r["soc"]);
    assert_eq!(r["problems"], serde_json::json!([]), "the guest has everything zcpipe needs");
}

/// `zcpipe doctor`'s text report: no problems, and its lines printed for the record.
fn doctor_text_report() {
    // The text report, for the record.
    let mut c = zcpipe();
    c.arg("doctor");
    let o = output_within(c, Duration::from_secs(120));
    assert_eq!(o.status.code(), Some(0));
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(text.lines().any(|l| l.trim() == "no problems found"), "{text}");
    for l in text.lines() {
        let t = l.trim_start();
        println!("  | {l}");
        let keep = t.starts_with("==")
            || t.starts_with("/dev/video")
            || t.starts_with("role:")
            || t.starts_with("OUTPUT queue")
            || t.starts_with("CAPTURE queue")
            || t.starts_with("NV12")
            || t.starts_with("YUYV")
            || t.starts_with("RGB24")
            || t.starts_with("/dev/dma_heap/")
            || t.starts_with("/dev/dri/")
            || t.starts_with("--display")
            || t.starts_with("--heap drm")
            || t.starts_with("--heap auto")
            || t.starts_with("present,")
            || t.starts_with("lib")
            || t.starts_with("SoC:")
            || t == "no problems found";
        if keep {
            println!("EVIDENCE doctor: {t}");
        }
    }
}

/// Runs last (tests run in name order): it unplugs vivid's multi-planar instance, then
/// reloads the vivid module so later tests find it again.
#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn doctor_lists_vkms_connectors_planes_and_verdicts() {
    let card = dev("DRM_CARD");
    let mut c = zcpipe();
    c.args(["doctor", "--json"]);
    let o = output_within(c, Duration::from_secs(120));
    assert_eq!(o.status.code(), Some(0), "doctor --json; stderr:\n{}", String::from_utf8_lossy(&o.stderr));
    let r: Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    let d = &r["drm"];
    assert_eq!(d["dir"], "/dev/dri");
    let cards = d["cards"].as_array().unwrap();
    assert_eq!(cards.len(), 1, "vkms is the guest's one card: {d:#}");
    let k = &cards[0];
    assert_eq!(k["path"], card.display().to_string());
    assert_eq!(
        (k["driver"].as_str(), k["dumb_buffers"].as_bool(), k["atomic"].as_bool()),
        (Some("vkms"), Some(true), Some(true)),
        "{k}"
    );
    assert_eq!(k["master_free"], true, "nothing else holds the guest's display: {k}");
    assert!(k["error"].is_null() && k["kms_error"].is_null(), "{k}");
    // Connectors: Virtual-1 connected with modes, 1024x768 preferred (vkms's default); the
    // writeback connector (enable_writeback=1), shown with DRM_CLIENT_CAP_WRITEBACK_CONNECTORS.
    let conns = k["connectors"].as_array().unwrap();
    let virt = conns.iter().find(|c| c["name"] == "Virtual-1").unwrap_or_else(|| panic!("no Virtual-1: {conns:#?}"));
    assert_eq!((virt["state"].as_str(), virt["writeback"].as_bool()), (Some("connected"), Some(false)), "{virt}");
    let modes = virt["modes"].as_array().unwrap();
    assert!(modes.len() > 10, "{virt}");
    let preferred: Vec<(u64, u64)> =
        modes.iter().filter(|m| m["preferred"] == true).map(|m| (u(&m["width"]), u(&m["height"]))).collect();
    assert_eq!(preferred, [(1024, 768)], "{virt}");
    assert!(modes.iter().any(|m| u(&m["width"]) == 1920 && u(&m["height"]) == 1080), "{virt}");
    let wb: Vec<&Value> = conns.iter().filter(|c| c["writeback"] == true).collect();
    assert_eq!(wb.len(), 1, "{conns:#?}");
    assert_eq!(wb[0]["name"], "Writeback-1");
    // One CRTC; planes: one primary, overlays (enable_overlay=1), one cursor, all on it,
    // with XR24 and AR24.
    let crtcs = k["crtcs"].as_array().unwrap();
    assert_eq!(crtcs.len(), 1, "{k}");
    let crtc_id = u(&crtcs[0]["id"]);
    let planes = k["planes"].as_array().unwrap();
    let count = |kind: &str| planes.iter().filter(|p| p["kind"] == kind).count();
    assert_eq!((count("primary"), count("cursor")), (1, 1), "{planes:#?}");
    assert!(count("overlay") >= 1, "{planes:#?}");
    assert_eq!(
        count("primary") + count("overlay") + count("cursor"),
        planes.len(),
        "every plane has a known type: {planes:#?}"
    );
    for p in planes {
        assert_eq!(p["crtcs"], serde_json::json!([crtc_id]), "{p}");
        let f = strings_of(&p["formats"]);
        assert!(f.contains(&"XR24".to_string()) && f.contains(&"AR24".to_string()), "{p}");
    }
    // The verdicts.
    assert_eq!(d["display"]["can_work"], true, "{}", d["display"]);
    assert!(
        d["display"]["why"].as_str().unwrap().contains("Virtual-1 connected, preferred mode 1024x768@60"),
        "{}",
        d["display"]
    );
    assert_eq!(
        d["heap_drm"],
        serde_json::json!({"can_work": true, "why": format!("drm dumb buffers of {} (vkms)", card.display()), "fix": null})
    );
    // The text.
    let mut c = zcpipe();
    c.arg("doctor");
    let o = output_within(c, Duration::from_secs(120));
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let section: Vec<&str> =
        text.lines().skip_while(|l| !l.starts_with("== DRM cards")).take_while(|l| !l.is_empty()).collect();
    assert_eq!(section.first().copied(), Some("== DRM cards (/dev/dri/card*): 1 =="), "{text}");
    assert!(
        section.iter().any(|l| l.trim_start().starts_with("connector Virtual-1 ")
            && l.contains(": connected: ")
            && l.contains("1024x768@60 (preferred)")),
        "{section:#?}"
    );
    assert!(section.iter().any(|l| l.contains("connector Writeback-1") && l.contains("(writeback")), "{section:#?}");
    assert!(
        section.iter().any(|l| l.trim_start().starts_with("plane ") && l.contains(" primary ") && l.contains("XR24")),
        "{section:#?}"
    );
    assert!(section.iter().any(|l| l.trim_start().starts_with("--display: can work: ")), "{section:#?}");
    assert!(
        section.iter().any(|l| l.trim_start().starts_with("--heap drm: can work: drm dumb buffers of")),
        "{section:#?}"
    );
    for l in &section {
        println!("EVIDENCE doctor DRM: {l}");
    }
}

fn strings_of(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect()
}

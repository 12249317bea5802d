//! Doctor's unit tests: each section against files made in a temporary directory.

use std::fs::File;
use std::path::Path;

use super::access::{access_fix, group_members_in, holders, id_name_in};
use super::drm::{display_verdict, heap_verdict};
use super::heaps::{heaps_section, udmabuf_section};
use super::nodes::fps_of;
use super::text::{drm_text, modes_text, wrapped};
use super::vendor::{npu_section, soc_section};
use super::*;
use zcpipe_sys::v4l2::{self as sys, fourcc_chars};

fn tmp_paths(dir: &Path) -> Paths {
    Paths {
        heap_dir: dir.join("dma_heap"),
        udmabuf: dir.join("udmabuf"),
        dri_dir: dir.join("dri"),
        udmabuf_params: dir.join("params"),
        compatible: dir.join("compatible"),
        model: dir.join("model"),
        npu_version: vec![dir.join("debug-version"), dir.join("proc-version")],
        libraries: vec![],
        mpp_service: dir.join("mpp_service"),
    }
}

#[test]
fn the_mpp_service_node_is_a_problem_only_on_a_rockchip_board() {
    let dir = tempfile::tempdir().unwrap();
    let paths = tmp_paths(dir.path());
    let mut problems = vec![];
    // Absent: expected off a board, a problem (with the kernel to use) on one.
    let r = super::vendor::mpp_service_section(&paths, false, &mut problems);
    assert!(!r.present && problems.is_empty());
    let r = super::vendor::mpp_service_section(&paths, true, &mut problems);
    assert!(!r.present && !r.openable);
    assert_eq!(problems.len(), 1);
    assert!(
        problems[0].what.contains("hardware decoding is unavailable") && problems[0].fix.contains("BSP kernel"),
        "{:?}",
        problems[0]
    );
    // Present and openable (a plain file stands in for the node): no problem, its mode said.
    std::fs::write(&paths.mpp_service, b"").unwrap();
    problems.clear();
    let r = super::vendor::mpp_service_section(&paths, true, &mut problems);
    assert!(r.present && r.openable && r.error.is_none() && problems.is_empty(), "{r:?}");
    assert!(r.file.is_some());
}

#[test]
fn the_rules_file_names_the_zcpipe_group() {
    assert_eq!(rules_group(), "zcpipe");
}

#[test]
fn roles_come_from_device_caps() {
    use sys::*;
    assert_eq!(Role::from_caps(V4L2_CAP_VIDEO_CAPTURE | V4L2_CAP_STREAMING), Role::Capture);
    assert_eq!(Role::from_caps(V4L2_CAP_VIDEO_CAPTURE_MPLANE | V4L2_CAP_STREAMING), Role::CaptureMplane);
    assert_eq!(Role::from_caps(V4L2_CAP_VIDEO_M2M | V4L2_CAP_STREAMING), Role::Mem2mem);
    assert_eq!(Role::from_caps(V4L2_CAP_VIDEO_M2M_MPLANE | V4L2_CAP_STREAMING), Role::Mem2memMplane);
    assert_eq!(Role::from_caps(V4L2_CAP_VIDEO_CAPTURE | V4L2_CAP_VIDEO_OUTPUT), Role::Mem2mem, "old-style m2m");
    assert_eq!(Role::from_caps(V4L2_CAP_VIDEO_OUTPUT_MPLANE), Role::Output);
    assert_eq!(Role::from_caps(V4L2_CAP_META_CAPTURE | V4L2_CAP_STREAMING), Role::Metadata);
    assert_eq!(Role::from_caps(0x10), Role::Other, "VBI capture");
    assert_eq!(Role::Mem2memMplane.queues(), &[("output", 10), ("capture", 9)]);
    assert_eq!(Role::Capture.queues(), &[("capture", 1)]);
    assert!(Role::Output.queues().is_empty());
}

#[test]
fn fourccs_rates_and_sizes_read_as_v4l2_tools_print_them() {
    assert_eq!(fourcc_chars(sys::V4L2_PIX_FMT_NV12M), "NM12");
    assert_eq!(fourcc_chars(u32::from_le_bytes(*b"Y16 ") | 0x8000_0000), "Y16 -BE");
    assert_eq!(fourcc_chars(u32::from_le_bytes(*b"GREY")), "GREY");
    assert_eq!(fourcc_chars(u32::from_le_bytes([b'A', 0, b'B', 0x10])), "A?B?");
    assert_eq!(fmt_fps(30.0), "30");
    assert_eq!(fmt_fps(30000.0 / 1001.0), "29.97");
    assert_eq!(fmt_fps(7.5), "7.5");
    assert_eq!(fps_of(sys::Fract { numerator: 2, denominator: 25 }), Some(12.5));
    assert_eq!(fps_of(sys::Fract { numerator: 0, denominator: 25 }), None);
    let d = Sizes::Discrete {
        sizes: vec![
            SizeReport { width: 320, height: 180, fps: vec![1.0, 30.0, 60.0] },
            SizeReport { width: 640, height: 480, fps: vec![30.0] },
            SizeReport { width: 1920, height: 1080, fps: vec![] },
        ],
        truncated: false,
    };
    assert_eq!(sizes_text(&d), "320x180 (1-60 fps), 640x480 (30 fps), 1920x1080");
    let many = Sizes::Discrete {
        sizes: (1..=10).map(|i| SizeReport { width: i, height: i, fps: vec![] }).collect(),
        truncated: false,
    };
    assert_eq!(sizes_text(&many), "1x1, 2x2, 3x3, 4x4, 5x5, 6x6, 7x7, 8x8, ... (10 sizes)");
    let step = Sizes::Stepwise { min: [32, 32], max: [640, 480], step: [8, 8], continuous: false };
    assert_eq!(sizes_text(&step), "32x32 to 640x480 in steps of 8x8");
    let cont = Sizes::Stepwise { min: [1, 1], max: [4096, 2160], step: [1, 1], continuous: true };
    assert_eq!(sizes_text(&cont), "any size from 1x1 to 4096x2160");
}

#[test]
fn long_format_lists_wrap_without_trailing_spaces() {
    let items: Vec<String> = (0..40).map(|i| format!("F{i:03}")).collect();
    let w = wrapped(&items, "  ");
    let lines: Vec<&str> = w.lines().collect();
    assert!(lines.len() > 1, "{w}");
    assert!(lines.iter().all(|l| l.len() <= 100 && !l.ends_with(' ')), "{w}");
    assert!(lines[1].starts_with("  F0") && lines[0].ends_with(','), "{w}");
    assert_eq!(w.replace(",\n  ", ", "), items.join(", "));
}

#[test]
fn passwd_and_group_files_are_read() {
    let passwd = "root:x:0:0:root:/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/bash\n";
    assert_eq!(id_name_in(passwd, 1000).as_deref(), Some("alice"));
    assert_eq!(id_name_in(passwd, 7), None);
    let group = "video:x:44:alice,bob\nzcpipe:x:990:\n";
    assert_eq!(id_name_in(group, 990).as_deref(), Some("zcpipe"));
    assert_eq!(group_members_in(group, "video"), ["alice", "bob"]);
    assert!(group_members_in(group, "zcpipe").is_empty());
}

#[test]
fn no_heap_dir_is_a_problem_naming_the_heaps_and_the_kernel_options() {
    let d = tempfile::tempdir().unwrap();
    let paths = tmp_paths(d.path());
    let mut problems = vec![];
    let (heaps, choices, auto) = heaps_section(&paths, &mut problems);
    assert!(heaps.is_empty());
    assert!(choices.iter().all(|c| c.heap.is_none()));
    assert_eq!(problems.len(), 1, "{problems:?}");
    let p = &problems[0];
    assert_eq!(p.about, paths.heap_dir.display().to_string());
    for name in [
        "does not exist",
        "system (--heap system)",
        "system-dma32 or dma32 (--heap dma32)",
        "linux,cma or cma or reserved (--heap cma)",
    ] {
        assert!(p.what.contains(name), "{}", p.what);
    }
    assert!(p.fix.contains("CONFIG_DMABUF_HEAPS=y") && p.fix.contains("CONFIG_DMABUF_HEAPS_SYSTEM=y"), "{}", p.fix);
    assert_eq!((auto.allocator.as_deref(), auto.dma_buf), (Some("memfd"), false));
    // And without udmabuf either, that is a second problem.
    let u = udmabuf_section(&paths, false, &mut problems);
    assert!(!u.present);
    assert_eq!(problems.len(), 2);
    assert!(
        problems[1].fix.contains("modprobe udmabuf") && problems[1].fix.contains("CONFIG_UDMABUF"),
        "{:?}",
        problems[1]
    );
    // With a usable heap, a missing udmabuf is not a problem.
    let mut none = vec![];
    udmabuf_section(&paths, true, &mut none);
    assert!(none.is_empty());
}

#[test]
fn heaps_map_to_their_heap_choice_and_auto_takes_system() {
    let d = tempfile::tempdir().unwrap();
    let paths = tmp_paths(d.path());
    std::fs::create_dir(&paths.heap_dir).unwrap();
    for n in ["system", "linux,cma", "reserved", "vendor-secure"] {
        std::fs::write(paths.heap_dir.join(n), b"").unwrap();
    }
    let mut problems = vec![];
    let (heaps, choices, auto) = heaps_section(&paths, &mut problems);
    assert!(problems.is_empty(), "{problems:?}");
    let names: Vec<&str> = heaps.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, ["linux,cma", "reserved", "system", "vendor-secure"]);
    let by = |n: &str| heaps.iter().find(|h| h.name == n).unwrap();
    assert_eq!((by("system").choice.as_deref(), by("system").used_by_choice), (Some("system"), true));
    assert_eq!((by("linux,cma").choice.as_deref(), by("linux,cma").used_by_choice), (Some("cma"), true));
    assert_eq!((by("reserved").choice.as_deref(), by("reserved").used_by_choice), (Some("cma"), false));
    assert_eq!(by("vendor-secure").choice, None);
    assert!(heaps.iter().all(|h| h.openable && h.read_write));
    let c: Vec<(&str, Option<&str>)> = choices.iter().map(|c| (c.choice.as_str(), c.heap.as_deref())).collect();
    assert_eq!(c, [("system", Some("system")), ("dma32", None), ("cma", Some("linux,cma"))]);
    assert_eq!(auto.allocator, Some(format!("dma-heap {}", paths.heap_dir.join("system").display())));
    assert!(auto.dma_buf);
    // Only an unknown name: a problem.
    std::fs::remove_dir_all(&paths.heap_dir).unwrap();
    std::fs::create_dir(&paths.heap_dir).unwrap();
    std::fs::write(paths.heap_dir.join("vendor-secure"), b"").unwrap();
    let mut problems = vec![];
    heaps_section(&paths, &mut problems);
    assert_eq!(problems.len(), 1);
    assert!(problems[0].what.contains("it has vendor-secure"), "{:?}", problems[0]);
}

#[test]
fn permission_fixes_name_the_group_to_join_or_the_udev_rules() {
    let mode = |group: &str, gid: u32, bits: u32| FileMode {
        owner: "root".into(),
        group: group.into(),
        mode: format!("{bits:04o}"),
        char_device: true,
        gid,
        bits,
    };
    let p = Path::new("/dev/video9");
    // Group root: never "join root", but the rules or root.
    let fix = access_fix(p, Some(&mode("root", 0, 0o660)));
    assert!(
        fix.contains("belongs to group root") && fix.contains("udev/99-zcpipe.rules") && !fix.contains("-aG root"),
        "{fix}"
    );
    // The group may not open it: only the rules help.
    let fix = access_fix(p, Some(&mode("video", 54321, 0o600)));
    assert!(
        fix.contains("its group video may not read and write it (mode 0600)") && fix.contains("usermod -aG zcpipe"),
        "{fix}"
    );
    // A group that may open it (and that this process is not in): join it, or use the rules.
    let fix = access_fix(p, Some(&mode("camgrp54321", 54321, 0o660)));
    assert!(
        fix.starts_with("join its group: sudo usermod -aG camgrp54321 $USER") && fix.contains("udev/99-zcpipe.rules"),
        "{fix}"
    );
    // Already the rules' group: joining it is the whole fix.
    let fix = access_fix(p, Some(&mode("zcpipe", 54322, 0o660)));
    assert_eq!(fix, "join its group: sudo usermod -aG zcpipe $USER, then log in again; or run as root");
}

#[test]
fn soc_and_npu_version_come_from_their_files() {
    let d = tempfile::tempdir().unwrap();
    let paths = tmp_paths(d.path());
    let s = soc_section(&paths);
    assert_eq!((s.soc.as_ref(), s.is_rockchip()), (None, false));
    assert!(s.error.as_deref().unwrap().contains("does not exist: no device tree"), "{s:?}");
    std::fs::write(&paths.compatible, b"radxa,rock-5b\0rockchip,rk3588\0").unwrap();
    std::fs::write(&paths.model, b"Radxa ROCK 5B\0").unwrap();
    let s = soc_section(&paths);
    assert_eq!(s.compatible, ["radxa,rock-5b", "rockchip,rk3588"]);
    assert_eq!(
        (s.soc.as_deref(), s.model.as_deref(), s.is_rockchip()),
        (Some("rockchip,rk3588"), Some("Radxa ROCK 5B"), true)
    );
    let n = npu_section(&paths);
    assert!(n.version.is_none() && n.error.as_deref().unwrap().contains("debug-version"), "{n:?}");
    std::fs::write(&paths.npu_version[1], "RKNPU driver: v0.9.6\n").unwrap();
    let n = npu_section(&paths);
    assert_eq!(n.version.as_deref(), Some("RKNPU driver: v0.9.6"));
    assert_eq!(n.path, Some(paths.npu_version[1].display().to_string()));
}

#[test]
fn dlopen_finds_libc_and_names_what_it_cannot_find() {
    let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<String>>();
    // The first name is absent, the second (libc itself) loads.
    let ok = check_library(&names(&["libzcpipe-absent.so", "libc.so.6"]));
    assert!(ok.loaded && ok.error.is_none(), "{ok:?}");
    assert_eq!((ok.name.as_str(), ok.loaded_as.as_deref()), ("libzcpipe-absent.so", Some("libc.so.6")));
    assert!(ok.path.as_deref().is_some_and(|p| p.contains("/libc.so")), "{ok:?}");
    let no = check_library(&names(&["libzcpipe-absent.so", "libzcpipe-absent.so.2"]));
    assert!(!no.loaded && no.path.is_none() && no.loaded_as.is_none());
    let e = no.error.as_deref().unwrap();
    assert!(e.contains("libzcpipe-absent.so: cannot open") && e.contains("libzcpipe-absent.so.2: cannot open"), "{e}");
}

#[test]
fn holders_of_a_file_are_found_in_proc() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("held");
    let _open = File::create(&f).unwrap();
    let me = std::process::id();
    assert!(holders(&f, None)
        .contains(&format!("pid {me} ({})", std::fs::read_to_string("/proc/self/comm").unwrap().trim())));
    assert!(holders(&f, Some(me)).is_empty());
}

#[test]
fn the_text_puts_each_fix_under_its_problem() {
    let d = tempfile::tempdir().unwrap();
    let mut paths = tmp_paths(d.path());
    paths.libraries = vec![vec!["libzcpipe-absent.so".into()]];
    let r = gather(&paths);
    let t = text(&r);
    let lines: Vec<&str> = t.lines().collect();
    let n = lines.iter().filter(|l| l.starts_with("problem: ")).count();
    assert_eq!(n, r.problems.len(), "{t}");
    for (i, l) in lines.iter().enumerate() {
        if l.starts_with("problem: ") {
            assert!(lines[i + 1].starts_with("fix: "), "{t}");
        }
    }
    assert!(t.contains("== dma-buf heaps") && t.contains("== udmabuf") && t.contains("== vendor libraries =="), "{t}");
    assert!(
        t.contains("libzcpipe-absent.so: does not load (libzcpipe-absent.so: cannot open shared object file"),
        "{t}"
    );
    assert!(t.contains("--heap auto uses: memfd"), "{t}");
}

fn mode(w: u32, h: u32, hz: u32, preferred: bool) -> DrmModeReport {
    DrmModeReport { name: format!("{w}x{h}"), width: w, height: h, refresh_hz: hz, preferred }
}

/// A card as vkms (enable_overlay=1 enable_writeback=1) shows it: Virtual-1 connected with
/// 1024x768 preferred, a writeback connector, one CRTC, primary, overlay and cursor planes.
fn vkms_like() -> DrmCardReport {
    let modes = vec![mode(4096, 2160, 60, false), mode(1920, 1080, 60, false), mode(1024, 768, 60, true)];
    DrmCardReport {
        path: "/dev/dri/card0".into(),
        file: None,
        error: None,
        permission_denied: false,
        driver: Some("vkms".into()),
        dumb_buffers: true,
        atomic: true,
        master_free: true,
        holders: vec![],
        connectors: vec![
            DrmConnectorReport { id: 35, name: "Virtual-1".into(), state: "connected".into(), writeback: false, modes },
            DrmConnectorReport {
                id: 37,
                name: "Writeback-1".into(),
                state: "unknown".into(),
                writeback: true,
                modes: vec![],
            },
        ],
        crtcs: vec![DrmCrtcReport { id: 33, index: 0, mode: None }],
        planes: vec![
            DrmPlaneReport {
                id: 31,
                kind: "primary".into(),
                crtcs: vec![33],
                formats: vec!["XR24".into(), "AR24".into()],
            },
            DrmPlaneReport {
                id: 40,
                kind: "overlay".into(),
                crtcs: vec![33],
                formats: vec!["XR24".into(), "AR24".into()],
            },
            DrmPlaneReport { id: 41, kind: "cursor".into(), crtcs: vec![33], formats: vec!["AR24".into()] },
        ],
        kms_error: None,
    }
}

fn no_fix(p: &str) -> String {
    format!("(access fix for {p})")
}

#[test]
fn display_verdict_names_the_card_or_why_not_with_the_fix() {
    let v = display_verdict("/dev/dri", &[], no_fix);
    assert_eq!(v, Verdict::cannot("no DRM card in /dev/dri", super::drm::NO_CARD_FIX));
    let card = vkms_like();
    assert_eq!(
        display_verdict("/dev/dri", std::slice::from_ref(&card), no_fix),
        Verdict::can("/dev/dri/card0 (vkms): Virtual-1 connected, preferred mode 1024x768@60; 1 CRTC(s), atomic")
    );
    // Nothing plugged in: the connectors are listed; writeback does not count.
    let mut unplugged = card.clone();
    unplugged.connectors[0].state = "disconnected".into();
    let v = display_verdict("/dev/dri", &[unplugged.clone()], no_fix);
    assert!(!v.can_work);
    assert_eq!(v.why, "/dev/dri/card0 (vkms): no connected connector with modes (connectors: Virtual-1 disconnected, Writeback-1 unknown (writeback))");
    assert!(v.fix.as_deref().unwrap().starts_with("plug a display in"), "{v:?}");
    // A desktop holds the master role.
    let mut held = card.clone();
    held.master_free = false;
    held.holders = vec!["pid 812 (Xorg)".into()];
    let v = display_verdict("/dev/dri", &[held], no_fix);
    assert_eq!(v.why, "/dev/dri/card0 (vkms): another process is the DRM master (pid 812 (Xorg) has it open), so zcpipe cannot set modes");
    assert!(v.fix.as_deref().unwrap().contains("display-manager"), "{v:?}");
    // Root-only nodes: the fix is the access fix; a later usable card still wins.
    let denied = DrmCardReport {
        path: "/dev/dri/card1".into(),
        error: Some("Permission denied".into()),
        permission_denied: true,
        driver: None,
        ..vkms_like()
    };
    let v = display_verdict("/dev/dri", std::slice::from_ref(&denied), no_fix);
    assert_eq!(
        v,
        Verdict::cannot("/dev/dri/card1: cannot open it: Permission denied", "(access fix for /dev/dri/card1)")
    );
    assert!(display_verdict("/dev/dri", &[denied.clone(), card.clone()], no_fix).can_work);
    // The reason given is the card that got furthest.
    let v = display_verdict("/dev/dri", &[denied, unplugged], no_fix);
    assert!(v.why.starts_with("/dev/dri/card0 (vkms): no connected connector"), "{v:?}");
}

#[test]
fn heap_verdict_follows_open_drm() {
    let v = heap_verdict("/dev/dri", &[], no_fix);
    assert!(
        !v.can_work
            && v.why == "no DRM card in /dev/dri"
            && v.fix.as_deref().unwrap().ends_with("or use another --heap"),
        "{v:?}"
    );
    assert_eq!(
        heap_verdict("/dev/dri", &[vkms_like()], no_fix),
        Verdict::can("drm dumb buffers of /dev/dri/card0 (vkms)")
    );
    let render_only = DrmCardReport { dumb_buffers: false, driver: Some("panfrost".into()), ..vkms_like() };
    let denied = DrmCardReport {
        path: "/dev/dri/card1".into(),
        error: Some("Permission denied".into()),
        permission_denied: true,
        driver: None,
        ..vkms_like()
    };
    let v = heap_verdict("/dev/dri", &[render_only, denied], no_fix);
    assert_eq!(
        v,
        Verdict::cannot(
            "no DRM card with dumb buffers in /dev/dri: /dev/dri/card0 (panfrost): no dumb buffers (DRM_CAP_DUMB_BUFFER is 0); /dev/dri/card1: Permission denied",
            "(access fix for /dev/dri/card1)"
        )
    );
}

#[test]
fn drm_text_lists_connectors_modes_planes_and_verdicts() {
    assert_eq!(modes_text(&[]), "no modes");
    let many: Vec<DrmModeReport> = (0..8).map(|i| mode(640 + i * 10, 480, 60, i == 7)).collect();
    assert_eq!(
        modes_text(&many),
        "640x480@60, 650x480@60, 660x480@60, 670x480@60, 680x480@60, 690x480@60, 710x480@60 (preferred), ... (8 modes)"
    );
    let card = vkms_like();
    let d = DrmReport {
        dir: "/dev/dri".into(),
        display: display_verdict("/dev/dri", std::slice::from_ref(&card), no_fix),
        heap_drm: heap_verdict("/dev/dri", std::slice::from_ref(&card), no_fix),
        cards: vec![card],
    };
    let mut out = String::new();
    drm_text(&mut out, &d, &[], &mut []);
    assert_eq!(
        out,
        "\n== DRM cards (/dev/dri/card*): 1 ==\n\
         \x20 /dev/dri/card0: driver vkms, mode unknown; dumb buffers: yes, atomic: yes, DRM master: free\n\
         \x20   connector Virtual-1 (id 35): connected: 4096x2160@60, 1920x1080@60, 1024x768@60 (preferred)\n\
         \x20   connector Writeback-1 (id 37): unknown (writeback: writes the picture to memory)\n\
         \x20   CRTC 33 (index 0): inactive\n\
         \x20   plane 31 primary (CRTCs 33): 2 format(s): XR24, AR24\n\
         \x20   plane 40 overlay (CRTCs 33): 2 format(s): XR24, AR24\n\
         \x20   plane 41 cursor (CRTCs 33): 1 format(s): AR24\n\
         \x20 --display: can work: /dev/dri/card0 (vkms): Virtual-1 connected, preferred mode 1024x768@60; 1 CRTC(s), atomic\n\
         \x20 --heap drm: can work: drm dumb buffers of /dev/dri/card0 (vkms)\n"
    );
}

#[test]
fn no_dri_directory_is_a_clear_line_not_a_problem() {
    let d = tempfile::tempdir().unwrap();
    let paths = tmp_paths(d.path());
    let r = gather(&paths);
    assert!(r.drm.cards.is_empty());
    assert!(!r.drm.display.can_work && !r.drm.heap_drm.can_work);
    assert!(r.problems.iter().all(|p| !p.about.contains("dri")), "{:?}", r.problems);
    let t = text(&r);
    let dri = paths.dri_dir.display();
    assert!(t.contains(&format!("== DRM cards ({dri}/card*): 0 ==\n  no DRM devices (no {dri}/card*): the kernel has no display driver loaded\n  --display: cannot: no DRM card in {dri}\n    fix: load the board's display driver")), "{t}");
    assert!(t.contains(&format!("  --heap drm: cannot: no DRM card in {dri}\n")), "{t}");
    let j = serde_json::to_value(&r).unwrap();
    assert_eq!(j["drm"]["cards"], serde_json::json!([]));
    assert_eq!(j["drm"]["display"]["can_work"], false);
    assert_eq!(j["drm"]["heap_drm"]["why"], format!("no DRM card in {dri}"));
}

//! `zcpipe doctor` on this machine: what it reports must be what the machine has. The
//! expected values are read here from /dev independently of zcpipe's code (on the CI host:
//! no video node, no dma-buf heap, no udmabuf).

use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::common;

fn doctor(args: &[&str]) -> Output {
    let out = common::zcpipe().arg("doctor").args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "doctor exits 0 whatever it finds; stderr:\n{stderr}");
    out
}

/// `/dev/video<N>` paths, in numeric order (what `ls -v /dev/video*` lists).
fn video_nodes() -> Vec<String> {
    let mut v: Vec<(u32, String)> = std::fs::read_dir("/dev")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let n = name.strip_prefix("video")?.parse().ok()?;
            Some((n, format!("/dev/{name}")))
        })
        .collect();
    v.sort();
    v.into_iter().map(|(_, p)| p).collect()
}

/// The entries of /dev/dma_heap, sorted (empty if it does not exist).
fn heaps() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/dev/dma_heap")
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect()
}

#[test]
fn json_lists_exactly_the_nodes_heaps_and_udmabuf_present() {
    let out = doctor(&["--json"]);
    let r: Value = serde_json::from_slice(&out.stdout).expect("--json prints one JSON object");
    let nodes: Vec<String> =
        r["nodes"].as_array().unwrap().iter().map(|n| n["path"].as_str().unwrap().to_string()).collect();
    assert_eq!(nodes, video_nodes());
    let heap_names: Vec<String> =
        r["heaps"].as_array().unwrap().iter().map(|h| h["name"].as_str().unwrap().to_string()).collect();
    assert_eq!(heap_names, heaps());
    assert_eq!(r["heap_dir"], "/dev/dma_heap");
    let udmabuf = Path::new("/dev/udmabuf").exists();
    assert_eq!(r["udmabuf"]["present"], udmabuf);
    assert_eq!(r["udmabuf"]["path"], "/dev/udmabuf");

    // Every problem has a fix.
    let problems = r["problems"].as_array().unwrap();
    for p in problems {
        assert!(!p["what"].as_str().unwrap().is_empty() && !p["fix"].as_str().unwrap().is_empty(), "{p}");
    }
    let about = |a: &str| problems.iter().find(|p| p["about"] == a);
    if video_nodes().is_empty() {
        let p = about("/dev/video*").expect("no video node is a problem");
        assert!(p["what"].as_str().unwrap().contains("/dev/video* does not exist"), "{p}");
        assert!(p["fix"].as_str().unwrap().contains("modprobe vivid"), "{p}");
    }
    if heaps().is_empty() {
        // The problem names every heap zcpipe looks for, and the kernel options that make them.
        let p = about("/dev/dma_heap").expect("no heap is a problem");
        let what = p["what"].as_str().unwrap();
        for name in ["system", "system-dma32", "dma32", "linux,cma", "cma", "reserved"] {
            assert!(what.contains(name), "the problem names heap {name}: {what}");
        }
        let fix = p["fix"].as_str().unwrap();
        assert!(fix.contains("CONFIG_DMABUF_HEAPS=y") && fix.contains("CONFIG_DMABUF_HEAPS_SYSTEM=y"), "{fix}");
        for c in r["heap_choices"].as_array().unwrap() {
            assert!(c["heap"].is_null(), "{c}");
        }
        let want = if udmabuf { "udmabuf" } else { "memfd" };
        assert_eq!(r["heap_auto"]["allocator"], want, "--heap auto falls back to {want}");
        assert_eq!(r["heap_auto"]["dma_buf"], udmabuf);
        if !udmabuf {
            let p = about("/dev/udmabuf").expect("no heap and no udmabuf is a problem");
            assert!(p["fix"].as_str().unwrap().contains("modprobe udmabuf"), "{p}");
        }
    }

    // DRM: every /dev/dri/card*, in numeric order; without any, neither --display nor
    // --heap drm can work, and that is no problem (most PCs and boards run headless).
    let mut cards: Vec<(u32, String)> = std::fs::read_dir("/dev/dri")
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| {
                    Some((e.file_name().to_str()?.strip_prefix("card")?.parse().ok()?, e.path().display().to_string()))
                })
                .collect()
        })
        .unwrap_or_default();
    cards.sort();
    let listed: Vec<String> =
        r["drm"]["cards"].as_array().unwrap().iter().map(|c| c["path"].as_str().unwrap().to_string()).collect();
    assert_eq!(listed, cards.into_iter().map(|(_, p)| p).collect::<Vec<_>>());
    assert_eq!(r["drm"]["dir"], "/dev/dri");
    if listed.is_empty() {
        for v in ["display", "heap_drm"] {
            assert_eq!(r["drm"][v]["can_work"], false, "{}", r["drm"]);
            assert_eq!(r["drm"][v]["why"], "no DRM card in /dev/dri", "{}", r["drm"]);
            assert!(r["drm"][v]["fix"].as_str().unwrap().contains("modprobe vkms"), "{}", r["drm"]);
        }
        assert!(problems.iter().all(|p| !p["about"].as_str().unwrap().starts_with("/dev/dri")), "{problems:?}");
    }

    // Vendor libraries: all three are asked for; the SoC comes from the device tree or is absent.
    let libs: Vec<String> =
        r["libraries"].as_array().unwrap().iter().map(|l| l["name"].as_str().unwrap().to_string()).collect();
    assert_eq!(libs, ["librga.so", "librknnrt.so", "librockchip_mpp.so"]);
    assert_eq!(
        r["mpp_service"]["present"].as_bool(),
        Some(Path::new("/dev/mpp_service").exists()),
        "{}",
        r["mpp_service"]
    );
    let compatible = Path::new("/proc/device-tree/compatible");
    if compatible.exists() {
        let want: Vec<String> = std::fs::read(compatible)
            .unwrap()
            .split(|&b| b == 0)
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect();
        assert_eq!(strings(&r["soc"]["compatible"]), want);
        assert_eq!(r["soc"]["soc"].as_str(), want.last().map(String::as_str));
    } else {
        assert!(r["soc"]["soc"].is_null());
        assert!(
            r["soc"]["error"].as_str().unwrap().contains("/proc/device-tree/compatible does not exist"),
            "{}",
            r["soc"]
        );
    }
    let uid = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:").map(|r| r.split_whitespace().next().unwrap().parse::<u64>().unwrap()))
        .unwrap();
    assert_eq!(r["user"]["uid"], uid);
}

#[test]
fn text_has_a_section_per_item_and_a_fix_under_each_problem() {
    let out = doctor(&[]);
    let t = String::from_utf8(out.stdout).unwrap();
    let json: Value = serde_json::from_slice(&doctor(&["--json"]).stdout).unwrap();
    let n_problems = json["problems"].as_array().unwrap().len();
    let lines: Vec<&str> = t.lines().collect();
    for section in [
        format!("== V4L2 video nodes (/dev/video*): {} ==", video_nodes().len()),
        format!("== dma-buf heaps (/dev/dma_heap): {} ==", heaps().len()),
        "== udmabuf (/dev/udmabuf) ==".to_string(),
        format!("== DRM cards (/dev/dri/card*): {} ==", json["drm"]["cards"].as_array().unwrap().len()),
        "== vendor libraries ==".to_string(),
    ] {
        assert!(lines.contains(&section.as_str()), "no line {section:?} in:\n{t}");
    }
    let problem_lines: Vec<usize> = (0..lines.len()).filter(|&i| lines[i].starts_with("problem: ")).collect();
    assert_eq!(problem_lines.len(), n_problems, "text and JSON report the same problems:\n{t}");
    for i in problem_lines {
        assert!(lines[i + 1].starts_with("fix: "), "line after {:?} is {:?}", lines[i], lines[i + 1]);
    }
    // The report ends with the plan; the problem count is the line before its heading.
    let plan_at = lines
        .iter()
        .position(|l| *l == "== the plan `zcpipe run` would use (no flags given) ==")
        .unwrap_or_else(|| panic!("no plan section:\n{t}"));
    assert!(lines[plan_at + 1].starts_with("plan: ") && lines[plan_at + 1].contains(" -> "), "{t}");
    let last = lines[..plan_at].iter().rev().find(|l| !l.is_empty()).unwrap();
    match n_problems {
        0 => assert_eq!(*last, "no problems found"),
        1 => assert_eq!(*last, "1 problem found (its fix is under it)"),
        n => assert_eq!(*last, format!("{n} problems found (each fix is under its problem)")),
    }
    if video_nodes().is_empty() {
        assert!(t.contains("problem: no V4L2 video node: /dev/video* does not exist"), "{t}");
    }
    if heaps().is_empty() {
        assert!(t.contains("problem: no dma-buf heap: /dev/dma_heap "), "{t}");
    }
    if json["drm"]["cards"].as_array().unwrap().is_empty() {
        assert!(
            lines.contains(&"  no DRM devices (no /dev/dri/card*): the kernel has no display driver loaded"),
            "{t}"
        );
        assert!(
            lines.contains(&"  --display: cannot: no DRM card in /dev/dri")
                && lines.contains(&"  --heap drm: cannot: no DRM card in /dev/dri"),
            "{t}"
        );
    }
    // The allocator's own log line is not repeated on stderr: the report says it.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("heap:"), "{stderr}");
}

/// With the ABI fakes standing in for the board's libraries, doctor reports what each says
/// of itself (librga's querystring; librknnrt's SDK version through a context of the
/// bundled model) and, when the RGA device is missing, a problem with the fix.
#[cfg(feature = "onnx")]
#[test]
fn vendor_library_versions_come_from_the_libraries() {
    let (rga, rknn, mpp) = (common::fake_librga(), common::fake_librknnrt(), common::fake_librockchip_mpp());
    let root = common::root();
    let run = |no_rga_device: bool| -> Value {
        let mut c = common::zcpipe();
        c.args(["doctor", "--json"])
            .env("ZCPIPE_LIBRGA", rga)
            .env("ZCPIPE_LIBRKNNRT", rknn)
            .env("ZCPIPE_LIBMPP", mpp)
            .env("ZCPIPE_FAKE_RKNN_ONNX", root.join("models/yolox_nano.onnx"));
        if no_rga_device {
            c.env("ZCPIPE_FAKE_RGA_NO_DEVICE", "1");
        } else {
            c.env_remove("ZCPIPE_FAKE_RGA_NO_DEVICE");
        }
        let o = c.output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let j = run(false);
    let libs = j["libraries"].as_array().unwrap();
    let lib = |n: &str| libs.iter().find(|l| l["name"] == n).unwrap_or_else(|| panic!("{n} in {libs:?}")).clone();
    let (g, k) = (lib("librga.so"), lib("librknnrt.so"));
    assert_eq!((g["loaded"].as_bool(), k["loaded"].as_bool()), (Some(true), Some(true)), "{libs:?}");
    assert_eq!(g["path"].as_str(), Some(rga.to_str().unwrap()), "where the loader found it");
    assert!(g["version"].as_str().unwrap().starts_with("librga v1.10.3"), "{g}");
    let kv = k["version"].as_str().unwrap();
    assert!(
        kv.starts_with("api fake 2.3.2 (zcpipe), driver fake 0.9.8") && kv.contains("yolox_nano_416_rk3588.rknn"),
        "{k}"
    );
    assert!(
        j["problems"].as_array().unwrap().iter().all(|p| p["about"] != "librga.so" && p["about"] != "librknnrt.so"),
        "{j}"
    );
    // librockchip_mpp: its own version string (get_mpp_version); this host has no MPP
    // service node, which is no problem off a Rockchip board.
    let m = lib("librockchip_mpp.so");
    assert_eq!(m["loaded"].as_bool(), Some(true), "{m}");
    assert_eq!(m["version"].as_str(), Some("zcpipe fake librockchip_mpp 0.1.0 (ffmpeg decoder and encoder)"), "{m}");
    assert_eq!(
        (j["mpp_service"]["path"].as_str(), j["mpp_service"]["present"].as_bool()),
        (Some("/dev/mpp_service"), Some(false)),
        "{}",
        j["mpp_service"]
    );
    assert!(
        j["problems"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["about"] != "librockchip_mpp.so" && p["about"] != "/dev/mpp_service"),
        "{j}"
    );

    let j = run(true);
    let g = j["libraries"].as_array().unwrap().iter().find(|l| l["name"] == "librga.so").unwrap().clone();
    assert!(g["version"].is_null(), "{g}");
    let e = g["version_error"].as_str().unwrap();
    assert!(e.contains("/dev/rga"), "{e}");
    let p = j["problems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["about"] == "librga.so")
        .expect("a problem for librga")
        .clone();
    assert!(p["fix"].as_str().unwrap().contains("/dev/rga"), "{p}");
    println!(
        "EVIDENCE doctor with the fakes: librga {:?}; librknnrt {kv:?}; librockchip_mpp {:?}; without /dev/rga: {e}",
        g["name"], m["version"]
    );
}

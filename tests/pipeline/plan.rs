//! The plan on fake boards: `zcpipe run --dry-run` and `zcpipe doctor` under a fake system
//! root (`$ZCPIPE_TEST_ROOT`: a device tree `compatible`, `/dev/rga`, dma-buf heaps and
//! `/proc/iomem` as plain files), with the ABI fakes of librga and librknnrt standing in for
//! the vendor libraries. No flag is given: what `auto` picks is what a board owner gets from
//! `zcpipe run` alone. The camera's part of the plan (vivid, vim2m) is tested in the VM
//! (tests/vm_guest/).

use std::path::Path;
use std::process::Output;

use tempfile::TempDir;

use crate::common;

/// System RAM of an 8 GiB RK3588 or RK3566 as root reads `/proc/iomem`: part of it above 4 GiB.
const IOMEM_8G: &str = "00200000-083fffff : System RAM\n  00210000-0197ffff : Kernel code\n09400000-efffffff : System RAM\nf0000000-f0ffffff : f0000000.pcie\n100000000-3fbffffff : System RAM\n4f0000000-4ffffffff : System RAM\n";
/// A 4 GiB board with all of its RAM below 4 GiB.
const IOMEM_LOW: &str = "00200000-083fffff : System RAM\n09400000-efffffff : System RAM\n";

/// A fake root: the device tree names `compatible` (NUL-separated), `/dev/rga` exists, the
/// heaps `heaps` exist under `/dev/dma_heap`, `/proc/iomem` is `iomem`.
fn board(compatible: &str, heaps: &[&str], iomem: &str) -> TempDir {
    let root = tempfile::tempdir().unwrap();
    let p = |rel: &str| {
        let f = root.path().join(rel);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        f
    };
    std::fs::write(p("proc/device-tree/compatible"), compatible.replace(" ", "\0") + "\0").unwrap();
    std::fs::write(p("proc/device-tree/model"), "Fake board\0").unwrap();
    std::fs::write(p("proc/iomem"), iomem).unwrap();
    std::fs::write(p("dev/rga"), b"").unwrap();
    for h in heaps {
        std::fs::write(p(&format!("dev/dma_heap/{h}")), b"").unwrap();
    }
    root
}

/// `zcpipe ARGS` on the fake root, with the fake vendor libraries (`rknn: false`: no
/// librknnrt, as on a board without the NPU runtime).
fn zcpipe_on(root: &Path, args: &[&str], rknn: bool) -> Output {
    let mut c = common::zcpipe();
    c.args(args)
        .env("ZCPIPE_TEST_ROOT", root)
        .env("ZCPIPE_LIBRGA", common::fake_librga())
        .env("ZCPIPE_LIBRKNNRT", if rknn { common::fake_librknnrt() } else { Path::new("/nonexistent/librknnrt.so") })
        .env("XDG_RUNTIME_DIR", root);
    let out = c.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    out
}

/// `zcpipe run --dry-run ARGS`: exits 0, and its stdout (the plan) is returned.
fn dry_run(root: &Path, args: &[&str], rknn: bool) -> String {
    let mut a = vec!["run", "--dry-run"];
    a.extend_from_slice(args);
    let out = zcpipe_on(root, &a, rknn);
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert_eq!(out.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.starts_with("plan: "), "{stdout}");
    // Nothing started: no stage logged, no run directory made.
    assert!(!stderr.contains("joined") && !root.join("zcpipe").exists(), "a dry run started something:\n{stderr}");
    stdout
}

fn line(plan: &str) -> &str {
    plan.lines().next().unwrap()
}

/// The `  NAME: why` line of the plan.
fn why<'a>(plan: &'a str, name: &str) -> &'a str {
    let prefix = format!("  {name}: ");
    plan.lines().find_map(|l| l.strip_prefix(prefix.as_str())).unwrap_or_else(|| panic!("no {name} line in:\n{plan}"))
}

#[test]
fn rk3588_with_no_flags_plans_rga_rknn_its_model_and_three_cores() {
    let root = board("radxa,rock-5b rockchip,rk3588", &["system", "system-dma32", "cma"], IOMEM_8G);
    let plan = dry_run(root.path(), &[], true);
    let l = line(&plan);
    assert!(l.contains(" -> rga (rga3-core0) -> "), "{plan}");
    assert!(l.contains(" -> rknn models/yolox_nano_416_rk3588.rknn on NPU cores 0,1,2 -> "), "{plan}");
    // No camera on the fake root: the bundled clip.
    assert!(l.starts_with("plan: bundled clip one-by-one-person-detection.mp4 -> "), "{plan}");
    // An RGA3 core reaches all memory: the usual heap order (system first).
    assert!(l.ends_with(&format!("; heap dma-heap {}", root.path().join("dev/dma_heap/system").display())), "{plan}");
    assert!(
        why(&plan, "scaler").contains("/dev/rga opens") && why(&plan, "scaler").contains("rk3588 has RGA3 cores"),
        "{plan}"
    );
    assert!(
        why(&plan, "infer").contains("fits rk3588") && why(&plan, "infer").contains("every core of rk3588"),
        "{plan}"
    );
    assert!(why(&plan, "heap").contains("RGA3"), "{plan}");
}

#[test]
fn rk3566_with_ram_above_4g_plans_rga2_a_dma32_heap_and_one_core() {
    let root = board("rockchip,rk3566-evb rockchip,rk3566", &["system", "system-dma32"], IOMEM_8G);
    let plan = dry_run(root.path(), &[], true);
    let l = line(&plan);
    assert!(l.contains(" -> rga (any) -> "), "{plan}");
    assert!(l.contains(" -> rknn models/yolox_nano_416_rk3566_rk3568.rknn on NPU core 0 -> "), "{plan}");
    assert!(
        l.ends_with(&format!("; heap dma-heap {}", root.path().join("dev/dma_heap/system-dma32").display())),
        "{plan}"
    );
    let heap = why(&plan, "heap");
    assert!(heap.contains("RGA2 reaches only the first 4 GiB") && heap.contains("0x500000000"), "{plan}");
    assert!(why(&plan, "infer").contains("rk3566 has one NPU core"), "{plan}");

    // The same SoC with all RAM below 4 GiB needs no special heap.
    let low = board("rockchip,rk3566-evb rockchip,rk3566", &["system", "system-dma32"], IOMEM_LOW);
    let plan = dry_run(low.path(), &[], true);
    assert!(line(&plan).ends_with("dev/dma_heap/system"), "{plan}");
    assert!(why(&plan, "heap").contains("all RAM is below 4 GiB"), "{plan}");
}

#[test]
fn a_board_without_the_npu_library_plans_onnx_on_the_cpu() {
    let root = board("radxa,rock-5b rockchip,rk3588", &["system"], IOMEM_8G);
    let plan = dry_run(root.path(), &[], false);
    assert!(line(&plan).contains(" -> rga (rga3-core0) -> onnx models/yolox_nano.onnx (tract, CPU) -> "), "{plan}");
    assert!(why(&plan, "infer").contains("librknnrt.so does not load"), "{plan}");
}

#[test]
fn flags_win_over_auto() {
    let root = board("radxa,rock-5b rockchip,rk3588", &["system"], IOMEM_8G);
    let plan =
        dry_run(root.path(), &["--scaler", "cpu", "--model", "models/yolox_nano.onnx", "--npu-cores", "0"], true);
    assert!(line(&plan).contains(" -> cpu -> onnx models/yolox_nano.onnx (tract, CPU) -> "), "{plan}");
    let plan = dry_run(root.path(), &["--rga-core", "any", "--npu-cores", "1,2"], true);
    assert!(
        line(&plan).contains(" -> rga (any) -> rknn models/yolox_nano_416_rk3588.rknn on NPU cores 1,2 -> "),
        "{plan}"
    );
    // A .rknn for this board through --infer rknn without --model: the bundled one.
    let plan = dry_run(root.path(), &["--infer", "rknn"], true);
    assert!(line(&plan).contains("rknn models/yolox_nano_416_rk3588.rknn"), "{plan}");
}

#[test]
fn no_rga_device_node_means_the_cpu_scaler_and_says_why() {
    let root = board("radxa,rock-5b rockchip,rk3588", &["system"], IOMEM_8G);
    std::fs::remove_file(root.path().join("dev/rga")).unwrap();
    let plan = dry_run(root.path(), &[], true);
    assert!(line(&plan).contains(" -> cpu -> "), "{plan}");
    let w = why(&plan, "scaler");
    assert!(w.contains("/dev/rga does not open") && w.contains("rockchip-rga"), "{plan}");
}

#[test]
fn infer_rknn_on_a_soc_without_a_bundled_model_is_one_line() {
    let root = board("pine64,quartz64 rockchip,rk3399", &["system"], IOMEM_LOW);
    let out = zcpipe_on(root.path(), &["run", "--dry-run", "--infer", "rknn"], true);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--infer rknn needs a .rknn model") && stderr.contains("rk3399") && stderr.contains("--model"),
        "{stderr}"
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
}

#[test]
fn doctor_ends_with_the_plan_run_would_use() {
    let root = board("radxa,rock-5b rockchip,rk3588", &["system"], IOMEM_8G);
    let out = zcpipe_on(root.path(), &["doctor"], true);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    let tail = text
        .split("== the plan `zcpipe run` would use (no flags given) ==\n")
        .nth(1)
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        tail.starts_with("plan: ") && tail.contains("rga (rga3-core0)") && tail.contains("on NPU cores 0,1,2"),
        "{tail}"
    );
    // The same in --json.
    let out = zcpipe_on(root.path(), &["doctor", "--json"], true);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["plan"]["scaler"]["what"], "rga (rga3-core0)", "{}", v["plan"]);
    assert_eq!(
        v["plan"]["infer"]["what"], "rknn models/yolox_nano_416_rk3588.rknn on NPU cores 0,1,2",
        "{}",
        v["plan"]
    );
    assert_eq!(v["soc"]["compatible"][1], "rockchip,rk3588", "{}", v["soc"]);
}

/// `zcpipe run` with no flag but `--frames` on the fake RK3588 (no heaps, so pools are
/// memfds, which the fakes import): the plan printed is the plan run. RGA scales on RGA3
/// core 0, and three RKNN contexts, one per core, run the bundled RK3588 model.
#[test]
fn the_plan_is_what_runs_on_the_fake_rk3588() {
    let root = board("radxa,rock-5b rockchip,rk3588", &[], IOMEM_8G);
    let dir = tempfile::tempdir().unwrap();
    let (rga_log, rknn_log) = (dir.path().join("rga.log"), dir.path().join("rknn.log"));
    let out = common::zcpipe_run(dir.path())
        .env("ZCPIPE_TEST_ROOT", root.path())
        .env("ZCPIPE_LIBRGA", common::fake_librga())
        .env("ZCPIPE_FAKE_RGA_LOG", &rga_log)
        .env("ZCPIPE_LIBRKNNRT", common::fake_librknnrt())
        .env("ZCPIPE_FAKE_RKNN_LOG", &rknn_log)
        .env("ZCPIPE_FAKE_RKNN_ONNX", common::root().join("models/yolox_nano.onnx"))
        .args(["--frames", "6", "--ring-policy", "block", "--no-print", "--stats-interval", "0"])
        .output()
        .unwrap();
    common::assert_no_orphans(dir.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // Printed before the first frame, as log lines (`-q` hides it).
    let plan =
        stderr.lines().find(|l| l.starts_with("zcpipe: plan: ")).unwrap_or_else(|| panic!("no plan line:\n{stderr}"));
    assert!(
        plan.contains("-> rga (rga3-core0) -> rknn models/yolox_nano_416_rk3588.rknn on NPU cores 0,1,2 ->"),
        "{plan}"
    );
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["stages"]["infer"]["frames_out"], 6, "{}", summary["stages"]["infer"]);
    let rknn = std::fs::read_to_string(&rknn_log).unwrap();
    let masks: Vec<&str> = rknn
        .lines()
        .filter(|l| l.contains(" rknn_set_core_mask "))
        .filter_map(|l| l.split_whitespace().find_map(|kv| kv.strip_prefix("mask=")))
        .collect();
    assert_eq!(masks, ["1", "2", "4"], "{rknn}");
    // The bundled RK3588 model is what the runtime was given.
    let len = std::fs::metadata(common::root().join("models/yolox_nano_416_rk3588.rknn")).unwrap().len();
    let inits: Vec<&str> = rknn.lines().filter(|l| l.contains(" rknn_init ")).collect();
    assert!(inits.len() == 1 && inits[0].contains(&format!(" model_len={len} ")), "{rknn}");
    let rga = std::fs::read_to_string(&rga_log).unwrap();
    // IM_SCHEDULER_RGA3_CORE0 = 0x1 (im2d_type.h), set with imconfig(IM_CONFIG_SCHEDULER_CORE).
    assert!(
        rga.lines().any(|l| l.starts_with("imconfig name=0 value=0x1 status=1")),
        "the core is pinned with imconfig:\n{rga}"
    );
}

/// What the plan decides reaches every stage: on an RK3566 with RAM above 4 GiB the dma32
/// heap is in every stage's command line (`-v` logs them), and with three NPU cores the
/// scaler gets a buffer per core and one more.
#[test]
fn the_stages_are_started_with_the_plans_values() {
    let root = board("rockchip,rk3566-evb rockchip,rk3566", &["system", "system-dma32"], IOMEM_8G);
    let dir = tempfile::tempdir().unwrap();
    // The heaps of a fake root are plain files, so the stages fail to allocate: this run
    // is only for the command lines.
    let out = common::zcpipe_run(dir.path())
        .env("ZCPIPE_TEST_ROOT", root.path())
        .env("ZCPIPE_LIBRGA", common::fake_librga())
        .env("ZCPIPE_LIBRKNNRT", common::fake_librknnrt())
        .args(["-v", "--frames", "1"])
        .output()
        .unwrap();
    common::assert_no_orphans(dir.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let started: Vec<&str> = stderr.lines().filter(|l| l.contains("starting: ") && l.contains(" stage ")).collect();
    assert_eq!(started.len(), 4, "{stderr}");
    assert!(started.iter().all(|l| l.contains(" --heap=dma32")), "{started:#?}");
    assert!(
        started
            .iter()
            .any(|l| l.contains(" stage scale ") && l.contains(" --scaler=rga ") && l.contains(" --rga-core=any")),
        "{started:#?}"
    );
    assert!(
        started.iter().any(|l| l.contains(" stage infer ")
            && l.contains(" --infer=rknn ")
            && l.contains("--model=models/yolox_nano_416_rk3566_rk3568.rknn")),
        "{started:#?}"
    );

    let root = board("radxa,rock-5b rockchip,rk3588", &[], IOMEM_8G);
    let plan_run = common::zcpipe_run(dir.path())
        .env("ZCPIPE_TEST_ROOT", root.path())
        .env("ZCPIPE_LIBRGA", common::fake_librga())
        .env("ZCPIPE_LIBRKNNRT", common::fake_librknnrt())
        .env("ZCPIPE_FAKE_RKNN_ONNX", common::root().join("models/yolox_nano.onnx"))
        .args(["-v", "--frames", "1", "--no-print"])
        .output()
        .unwrap();
    common::assert_no_orphans(dir.path());
    let stderr = String::from_utf8_lossy(&plan_run.stderr);
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("starting: ") && l.contains(" stage scale ") && l.contains(" --scale-buffers=5 ")),
        "{stderr}"
    );
}

/// What would only fail once the stages run is refused by the plan, in one line, before
/// anything starts (and `--dry-run` exits 1 for it).
#[test]
fn a_plan_that_cannot_run_is_one_line() {
    let rk3566 = board("rockchip,rk3566-evb rockchip,rk3566", &["system"], IOMEM_LOW);
    let rk3588 = board("radxa,rock-5b rockchip,rk3588", &["system"], IOMEM_LOW);
    let cases: &[(&Path, &[&str], &[&str])] = &[
        (rk3566.path(), &["--rga-core", "rga3-core0"], &["--rga-core rga3-core0", "rk3566 has no RGA3 core"]),
        (rk3566.path(), &["--npu-cores", "0,1,2"], &["core 1 does not exist on rk3566", "1 NPU core(s) (0)"]),
        (
            rk3588.path(),
            &["--model", "models/yolox_nano_416_rk3566_rk3568.rknn"],
            &["is built for rk3566", "this board is rk3588"],
        ),
        (
            rk3588.path(),
            &["--infer", "rknn", "--model", "models/yolox_nano.onnx"],
            &["yolox_nano.onnx is not an RKNN model"],
        ),
        (
            rk3588.path(),
            &["--infer", "onnx", "--model", "models/yolox_nano_416_rk3588.rknn"],
            &["is an RKNN model", "--infer rknn"],
        ),
        (rk3588.path(), &["--model", "models/coco80.txt"], &["no backend for model models/coco80.txt"]),
        (rk3588.path(), &["--model", "/nonexistent/x.onnx"], &["cannot open model /nonexistent/x.onnx"]),
        (rk3588.path(), &["--heap", "dma32"], &["--heap dma32"]),
    ];
    for (root, args, needles) in cases {
        let mut a = vec!["run", "--dry-run"];
        a.extend_from_slice(args);
        let out = zcpipe_on(root, &a, true);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: one line:\n{stderr}");
        for n in *needles {
            assert!(stderr.contains(n), "{args:?}: {n:?} missing from {stderr}");
        }
    }
}

#[test]
fn dry_run_json_is_the_plan_as_one_object() {
    let root = board("radxa,rock-5b rockchip,rk3588", &["system"], IOMEM_8G);
    let out = zcpipe_on(root.path(), &["run", "--dry-run", "--json"], true);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["scaler"]["what"], "rga (rga3-core0)", "{v}");
    assert_eq!(v["sources"][0]["what"], "bundled clip one-by-one-person-detection.mp4", "{v}");
}

/// `--decoder auto` picks MPP for a compressed source when librockchip_mpp loads (here the
/// fake) and `/dev/mpp_service` exists, else ffmpeg on the CPU; the plan says which and why,
/// and the capture stage is started with what it says.
#[test]
fn the_plan_names_the_decoder_of_a_compressed_source() {
    let root = board("radxa,rock-5b rockchip,rk3588", &["system", "system-dma32"], IOMEM_8G);
    let clip = common::root().join("tests/data/one-by-one-person-detection.mp4");
    let src = format!("video:{}", clip.display());
    let plan = |args: &[&str]| {
        let out = common::zcpipe()
            .args(["run", "--dry-run"])
            .args(args)
            .env("ZCPIPE_TEST_ROOT", root.path())
            .env("ZCPIPE_LIBRGA", common::fake_librga())
            .env("ZCPIPE_LIBRKNNRT", common::fake_librknnrt())
            .env("ZCPIPE_LIBMPP", common::fake_librockchip_mpp())
            .env("XDG_RUNTIME_DIR", root.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let p = plan(&["--source", &src]);
    assert!(line(&p).contains("one-by-one-person-detection.mp4 decoded by ffmpeg on the CPU -> "), "{p}");
    assert!(why(&p, "source").contains("auto: no /dev/mpp_service"), "{p}");
    std::fs::write(root.path().join("dev/mpp_service"), b"").unwrap();
    let p = plan(&["--source", &src]);
    assert!(line(&p).contains("one-by-one-person-detection.mp4 decoded by MPP into the pool -> "), "{p}");
    assert!(why(&p, "source").contains("librockchip_mpp.so loads and /dev/mpp_service exists"), "{p}");
    let p = plan(&["--source", &src, "--decoder", "cpu"]);
    assert!(line(&p).contains("decoded by ffmpeg on the CPU"), "{p}");
    let p = plan(&["--source", "rtsp://127.0.0.1:1/x", "--wait-for-camera"]);
    assert!(line(&p).contains("rtsp://127.0.0.1:1/x decoded by ffmpeg on the CPU"), "{p}");
    assert!(
        why(&p, "source").contains("--wait-for-camera: the pool cannot be sized from a camera not there yet"),
        "{p}"
    );
    let p = plan(&["--source", "testsrc"]);
    assert!(!line(&p).contains("decoded by"), "a test pattern has no decoder: {p}");
    eprintln!("EVIDENCE plan decoder: {}", line(&plan(&["--source", &src])));
}

/// A reader that goes away (`zcpipe run --dry-run | head -0`) is no panic: what it did not
/// want is not written, and the exit code is 0.
#[test]
fn a_plan_printed_to_a_closed_pipe_is_no_panic() {
    for args in [&["run", "--dry-run", "--instance", "closed-pipe"][..], &["config", "print"]] {
        let mut child = common::zcpipe()
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && !err.contains("panicked"), "{args:?}: {}: {err}", out.status);
    }
}

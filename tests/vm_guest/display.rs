//! The display on vkms. Shared helpers: main.rs.

use super::*;

// ---------------------------------------------------------------------------------------------
// The display on vkms
// ---------------------------------------------------------------------------------------------

/// The detections line the fake publisher sends: one `person` box in 640x480 frame pixels.
const DISPLAY_BOX: [f32; 4] = [100.0, 50.0, 300.0, 250.0];

/// A zone of the 640x480 frame away from the box and the bars the checks read:
/// `--zone` of the display stage.
const DISPLAY_ZONE: &str = "gate=400,40,600,40,600,200,400,200";

/// Checks the zone [`DISPLAY_ZONE`] on a writeback picture (`at`: a pixel's RGB) whose
/// picture is at (`x0`, `y0`) scaled by `s`: amber on its right and bottom edges, the
/// camera inside it, and its outline in the sidecar.
fn check_zone(at: &dyn Fn(usize, usize) -> [u8; 3], meta: &Value, x0: f32, y0: f32, s: f32) -> String {
    let amber = [255, 176, 0];
    let sx = |x: f32| (x0 + x * s).round() as usize;
    let sy = |y: f32| (y0 + y * s).round() as usize;
    for (x, y, edge) in
        [(sx(600.0), sy(120.0), "right"), (sx(500.0), sy(200.0), "bottom"), (sx(400.0), sy(120.0), "left")]
    {
        assert_eq!(at(x, y), amber, "the zone's {edge} edge at ({x}, {y})");
    }
    assert_ne!(at(sx(500.0), sy(120.0)), amber, "inside the zone: the camera");
    let z = &meta["zones"][0];
    assert_eq!(z["text"], "gate", "{meta}");
    let p: Vec<f64> = z["points"][2].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert_eq!(p, [(x0 + 600.0 * s) as f64, (y0 + 200.0 * s) as f64], "{meta}");
    format!("zone gate amber on 3 edges at x {}..{}", sx(400.0), sx(600.0))
}

/// A replay file (`--infer replay:FILE`) whose one frame line, looped, puts [`DISPLAY_BOX`]
/// (a person) on every 640x480 frame: the boxes the display draws come out of the whole
/// pipeline (infer -> publish -> the detections socket), as a detector's would.
fn display_replay(dir: &Path) -> PathBuf {
    let b = DISPLAY_BOX;
    let p = dir.join("boxes.jsonl");
    std::fs::write(&p, format!("{{\"type\":\"frame\",\"width\":640,\"height\":480,\"detections\":[{{\"class_id\":0,\"label\":\"person\",\"score\":0.9,\"box\":[{},{},{},{}]}}]}}\n", b[0], b[1], b[2], b[3])).unwrap();
    p
}

/// `args` (from [`run_args`]) with `--infer replay:FILE` in place of `--infer none`.
fn with_replay(mut args: Vec<String>, file: &Path) -> Vec<String> {
    let i = args.iter().position(|a| a == "--infer").unwrap();
    args[i + 1] = format!("replay:{}", file.display());
    args
}

/// A PPM (P6, 8 bits) as (width, height, RGB bytes).
fn read_ppm(path: &Path) -> (usize, usize, Vec<u8>) {
    let b = std::fs::read(path).unwrap();
    let mut fields = vec![];
    let mut i = 0;
    while fields.len() < 4 {
        while b[i].is_ascii_whitespace() {
            i += 1;
        }
        let s = i;
        while !b[i].is_ascii_whitespace() {
            i += 1;
        }
        fields.push(String::from_utf8_lossy(&b[s..i]).to_string());
    }
    assert_eq!(fields[0], "P6");
    let (w, h): (usize, usize) = (fields[1].parse().unwrap(), fields[2].parse().unwrap());
    let px = b[i + 1..].to_vec();
    assert_eq!(px.len(), w * h * 3, "{}", path.display());
    (w, h, px)
}

/// vivid's 75% bars in RGB, as high (true) or low per channel: white, yellow, cyan, green,
/// magenta, red, blue, black.
const BARS_RGB: [[bool; 3]; 8] = [
    [true; 3],
    [true, true, false],
    [false, true, true],
    [false, true, false],
    [true, false, true],
    [true, false, false],
    [false, false, true],
    [false; 3],
];

/// Checks a writeback picture against its sidecar and what the test expects: the picture
/// at `want_pic` (x, y, w, h) on the mode, black outside it, vivid's bars inside it (lower
/// half, below the box), the box's outline pure green along its edges at `want_box`, and
/// the zone ([`check_zone`]). Returns one line of evidence.
fn check_writeback(dir: &Path, want_way: &str, want_pic: [u64; 4], want_box: [f32; 4]) -> String {
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("wb-000.json")).expect("wb-000.json written")).unwrap();
    let (w, h, px) = read_ppm(&dir.join("wb-000.ppm"));
    assert_eq!(meta["way"], want_way, "{meta}");
    let pic = &meta["picture"];
    assert_eq!([u(&pic["x"]), u(&pic["y"]), u(&pic["w"]), u(&pic["h"])], want_pic, "{meta}");
    let at = |x: usize, y: usize| [px[(y * w + x) * 3], px[(y * w + x) * 3 + 1], px[(y * w + x) * 3 + 2]];
    let [px0, py0, pw, ph] = want_pic.map(|v| v as usize);
    // Black around the picture (where there is any).
    if px0 > 0 {
        assert_eq!(at(px0 / 2, h / 2), [0, 0, 0], "left of the picture");
        assert_eq!(at(w - 1 - px0 / 2, h / 2), [0, 0, 0], "right of the picture");
    }
    if py0 > 0 {
        assert_eq!(at(w / 2, py0 / 2), [0, 0, 0], "above the picture");
    }
    // The bars: each one's centre column, rows in the picture's lower quarter (below the box).
    let mut got = vec![];
    for (k, want) in BARS_RGB.iter().enumerate() {
        let x = px0 + (2 * k + 1) * pw / 16;
        let mut sum = [0u64; 3];
        let rows: Vec<usize> = (py0 + ph * 3 / 4..py0 + ph * 7 / 8).step_by(4).collect();
        for &y in &rows {
            for (s, v) in sum.iter_mut().zip(at(x, y)) {
                *s += v as u64;
            }
        }
        let mean = sum.map(|s| s / rows.len() as u64);
        got.push(format!("{mean:?}"));
        for c in 0..3 {
            let ok = if want[c] { mean[c] >= 150 } else { mean[c] <= 40 };
            assert!(ok, "bar {k} at x {x}: mean RGB {mean:?}, want {want:?} (high >= 150, low <= 40); all: {got:?}");
        }
    }
    // The box: pure green on each edge (3 px inside it), not green just outside it.
    let [x1, y1, x2, y2] = want_box.map(|v| v.round() as usize);
    let (mx, my) = ((x1 + x2) / 2, (y1 + y2) / 2);
    for (x, y, edge) in [(x1 + 1, my, "left"), (x2 - 2, my, "right"), (mx, y1 + 1, "top"), (mx, y2 - 2, "bottom")] {
        assert_eq!(at(x, y), [0, 255, 0], "the box's {edge} edge at ({x}, {y})");
    }
    assert_ne!(at(x1 + 8, my), [0, 255, 0], "inside the box: the camera");
    let b = &meta["boxes"][0];
    let sidecar: Vec<f64> = (0..4).map(|i| b[i].as_f64().unwrap()).collect();
    assert_eq!(sidecar, want_box.map(|v| v as f64), "{meta}");
    let scale = pw as f32 / 640.0;
    let zone = check_zone(&at, &meta, px0 as f32, py0 as f32, scale);
    format!(
        "{want_way}: {w}x{h} written back, picture {want_pic:?}, bars {}, box {want_box:?} green on all 4 edges, {zone}",
        got.join(" ")
    )
}

/// vivid -> `zcpipe run` (capture `format`, no display, boxes replayed from a file) and
/// `zcpipe stage display` on vkms beside it (the capture pool's tap; boxes from the run's
/// detections socket), writing back 2 frames; returns (the display's stderr, the writeback
/// folder's parent).
fn display_beside_a_run(test: &str, format: &str, extra: &[&str]) -> (Vec<String>, tempfile::TempDir) {
    let sp = dev("VIVID_SP");
    let card = dev("DRM_CARD");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut args = with_replay(run_args(d, &format!("v4l2:{}", sp.display())), &display_replay(d));
    args.extend(
        [
            "--format",
            format,
            "--size",
            "640x480",
            "--fps",
            "30",
            "--frames",
            "240",
            "--buffers",
            "6",
            "--scaler",
            "cpu",
            "--no-print",
        ]
        .map(String::from),
    );
    let mut run = Background::start(&args);
    run.wait_for("streaming from", Duration::from_secs(120));
    let mut dargs: Vec<String> = [
        "stage",
        "display",
        "--display",
        &card.display().to_string(),
        "--run-dir",
        &d.join("run").display().to_string(),
        "--detections",
        &d.join("detections.sock").display().to_string(),
        "--display-writeback",
        &d.join("wb").display().to_string(),
        "--display-writeback-frames",
        "2",
        "--stats-interval",
        "0",
        "--zone",
        DISPLAY_ZONE,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    dargs.extend(extra.iter().map(|s| s.to_string()));
    // The kernel's atomic checks say why they refuse a state (drm.debug 0x10: DRM_UT_ATOMIC, plus KMS 0x04).
    let _ = std::fs::write("/sys/module/drm/parameters/debug", "0x14");
    let _ = Command::new("dmesg").arg("-c").output();
    let disp = Background::start(&dargs);
    // The display ends with the capture's stream (its 240 frames).
    let (dcode, dlines) = disp.finish(false, Duration::from_secs(180));
    let (code, lines) = run.finish(false, Duration::from_secs(120));
    let dstderr = dlines.join("\n");
    let _ = std::fs::write("/sys/module/drm/parameters/debug", "0");
    if dstderr.contains("not shown") || dstderr.contains("refused") {
        let k =
            Command::new("dmesg").output().map(|o| String::from_utf8_lossy(&o.stdout).to_string()).unwrap_or_default();
        // What the kernel said around the first lines that name the writeback connector.
        let lines: Vec<&str> = k.lines().collect();
        let hits: Vec<usize> = lines
            .iter()
            .enumerate()
            .filter(|(_, l)| l.contains("Writeback-1] state") && l.contains("to [CRTC"))
            .map(|(i, _)| i)
            .take(2)
            .collect();
        for i in hits {
            println!(
                "dmesg (drm) lines {}..{}:\n{}",
                i.saturating_sub(10),
                i + 50,
                lines[i.saturating_sub(10)..(i + 50).min(lines.len())].join("\n")
            );
        }
    }
    assert_eq!(dcode, 0, "{test}: display exit code; stderr:\n{dstderr}");
    assert_eq!(code, 0, "{test}: run exit code; stderr:\n{}", lines.join("\n"));
    assert!(!dstderr.contains("panicked"), "{dstderr}");
    let s = summary(d);
    let x = &s["stages"]["capture"]["extra"];
    assert_eq!(u(&x["buffers_still_out"]), 0, "{x}");
    let pool = &s["stages"]["capture"]["pool"];
    assert!(
        u(&pool["taps_joined"]) >= 1 && u(&pool["tap_frames"]) > 0,
        "the display's tap joined the capture pool: {pool}"
    );
    println!(
        "EVIDENCE {test} capture pool: {} tap frames, {} tap drops, {} taps joined; capture buffers still out {}",
        u(&pool["tap_frames"]),
        u(&pool["tap_dropped"]),
        u(&pool["taps_joined"]),
        u(&x["buffers_still_out"])
    );
    (dlines, dir)
}

/// The frames shown, buffers imported and frames composed the display said at its end
/// (`... after N frames shown (I buffers imported, C composed, S skipped, W writebacks)`).
fn display_end(lines: &[String]) -> (u64, u64, u64, u64) {
    let l = lines.iter().find(|l| l.contains("frames shown (")).unwrap_or_else(|| panic!("no end line: {lines:#?}"));
    let nums: Vec<u64> =
        l.split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty()).map(|s| s.parse().unwrap()).collect();
    let k = nums.len();
    println!("EVIDENCE display end: {l}");
    (nums[k - 5], nums[k - 4], nums[k - 3], nums[k - 1])
}

#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn display_scans_xr24_out_zero_copy_on_vkms_with_boxes() {
    let (lines, dir) = display_beside_a_run("display zero-copy", "XR24", &[]);
    let all = lines.join("\n");
    let found = lines.iter().find(|l| l.contains("Virtual-1")).unwrap_or_else(|| panic!("{all}"));
    println!("EVIDENCE display: {found}");
    assert!(
        found.contains("vkms") && found.contains("overlay plane") && found.contains("writeback connector"),
        "{found}"
    );
    let way = lines.iter().find(|l| l.contains("zero-copy scanout")).unwrap_or_else(|| panic!("not zero-copy: {all}"));
    println!("EVIDENCE display: {way}");
    assert!(way.contains("XR24 640x480") && way.contains("640x480+192+144 on 1024x768"), "{way}");
    let (shown, imports, composed, writebacks) = display_end(&lines);
    assert!(shown >= 30, "{shown} frames shown");
    assert_eq!(composed, 0, "nothing composed by the CPU");
    assert!((1..=8).contains(&imports), "each capture buffer imported once ({imports} imports for a pool of 6 + 2)");
    assert_eq!(writebacks, 2);
    assert!(all.contains("frames held went back"), "{all}");
    // vkms does not scale: the 640x480 frame at its own size, centred on 1024x768.
    let box_on_screen =
        [192.0 + DISPLAY_BOX[0], 144.0 + DISPLAY_BOX[1], 192.0 + DISPLAY_BOX[2], 144.0 + DISPLAY_BOX[3]];
    let ev = check_writeback(&dir.path().join("wb"), "zero-copy", [192, 144, 640, 480], box_on_screen);
    println!("EVIDENCE display writeback {ev}");
}

#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn display_composes_nv12_with_the_cpu_on_vkms() {
    let (lines, dir) = display_beside_a_run("display composition", "NV12", &[]);
    let all = lines.join("\n");
    let way = lines.iter().find(|l| l.contains("CPU composition")).unwrap_or_else(|| panic!("{all}"));
    println!("EVIDENCE display: {way}");
    assert!(way.contains("vkms has no plane for NV12"), "{way}");
    let (shown, imports, composed, writebacks) = display_end(&lines);
    assert!(shown >= 30 && composed >= shown, "{shown} shown, {composed} composed");
    assert_eq!((imports, writebacks), (0, 2));
    // The CPU scales: 640x480 fills 1024x768, the box x1.6.
    let s = 1.6;
    let ev = check_writeback(&dir.path().join("wb"), "composition", [0, 0, 1024, 768], DISPLAY_BOX.map(|v| v * s));
    println!("EVIDENCE display writeback {ev}");
}

/// vivid (XR24 or NV12 at 640x480, 30 fps, `frames` frames) -> `zcpipe run --display CARD`
/// with `extra` flags; asserts it exited 0 and every capture buffer came home; returns the
/// summary and the run's stderr.
fn run_with_display(format: &str, frames: u32, extra: &[&str]) -> (Value, String) {
    let sp = dev("VIVID_SP");
    let card = dev("DRM_CARD");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut args = run_args(d, &format!("v4l2:{}", sp.display()));
    args.extend(
        [
            "--format",
            format,
            "--size",
            "640x480",
            "--fps",
            "30",
            "--frames",
            &frames.to_string(),
            "--scaler",
            "cpu",
            "--no-print",
            "--display",
            &card.display().to_string(),
        ]
        .map(String::from),
    );
    args.extend(extra.iter().map(|s| s.to_string()));
    let bg = Background::start(&args);
    let (code, lines) = bg.finish(false, Duration::from_secs(240));
    let stderr = lines.join("\n");
    assert_eq!(code, 0, "{stderr}");
    let s = summary(d);
    for (stage, c) in s["exit_codes"].as_object().unwrap() {
        assert_eq!(c, 0, "{stage} exit code: {stderr}");
    }
    assert_eq!(u(&s["stages"]["capture"]["extra"]["buffers_still_out"]), 0, "{}", s["stages"]["capture"]);
    (s, stderr)
}

#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn run_with_a_display_is_a_fifth_process_and_buffers_come_home() {
    let (s, stderr) = run_with_display("XR24", 150, &["--zone", DISPLAY_ZONE]);
    // `zcpipe run` hands the camera's zones to the display stage.
    assert!(stderr.contains("display: drawn with the boxes: zones gate; lines none; 0 masks"), "{stderr}");
    let disp = &s["stages"]["display"];
    let x = &disp["extra"]["display"];
    assert_eq!(x["way"], "zero-copy scanout", "{x}");
    assert!(u(&x["counters"]["shown"]) >= 20, "{x}");
    assert_eq!(u(&disp["extra"]["open_fds_setup"]), u(&disp["extra"]["open_fds_exit"]), "{disp}");
    let cap = &s["stages"]["capture"]["extra"];
    assert_eq!(u(&cap["buffers"]), 6, "the capture pool got the display's 2 buffers on top of 4: {cap}");
    assert_eq!(u(&cap["buffers_still_out"]), 0, "{cap}");
    assert_eq!(u(&s["stages"]["capture"]["frames_out"]), 150);
    let line = stderr
        .lines()
        .find(|l| l.contains("display: /dev/dri") && l.contains("shown"))
        .unwrap_or_else(|| panic!("no display line in the summary: {stderr}"));
    println!("EVIDENCE run --display summary:{line}");
    println!(
        "EVIDENCE run --display: fps shown {}, fps captured {}, skipped {}, imports {}",
        x["fps_shown"], x["fps_captured"], x["counters"]["skipped"], x["counters"]["imports"]
    );
}

#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn run_with_a_display_in_copy_mode_composes_a_copy_of_each_frame() {
    let (s, _) = run_with_display("XR24", 90, &["--copy-mode"]);
    let disp = &s["stages"]["display"];
    let x = &disp["extra"]["display"];
    // The same XR24 frames that zero-copy scans out are copies here, so the CPU composes them.
    assert!(x["way"].as_str().unwrap_or("").starts_with("CPU composition (--copy-mode"), "{x}");
    let c = &x["counters"];
    assert_eq!(u(&c["imports"]), 0, "nothing imported in copy mode: {x}");
    assert!(u(&c["shown"]) >= 20 && u(&c["composed"]) >= u(&c["shown"]), "{x}");
    assert_eq!(
        u(&c["composed_bytes"]),
        u(&c["composed"]) * 1024 * 768 * 4,
        "each composition writes a whole 1024x768 XRGB8888 dumb buffer: {x}"
    );
    let ci = &disp["copy_in"];
    let frame = 640 * 480 * 4;
    assert!(u(&ci["frames"]) >= u(&c["received"]) && u(&ci["frames"]) > 0, "{disp}");
    assert!(u(&ci["socket_bytes"]) >= u(&ci["frames"]) * frame, "each frame came over the tap's data socket: {disp}");
    println!("EVIDENCE run --display --copy-mode: {}; {} frames over the socket ({} bytes, {} copied), {} composed ({} bytes)", x["way"], u(&ci["frames"]), u(&ci["socket_bytes"]), u(&ci["copied_bytes"]), u(&c["composed"]), u(&c["composed_bytes"]));
}

#[test]
#[ignore = "runs in the VM guest: make vm-test"]
fn run_with_a_display_on_legacy_modesetting_flips_composed_frames() {
    let (s, _) = run_with_display("NV12", 90, &["--display-legacy"]);
    let disp = &s["stages"]["display"];
    let x = &disp["extra"]["display"];
    assert_eq!(x["atomic"], false, "{x}");
    assert_eq!(x["way"], "CPU composition (--display-legacy: legacy modesetting, one plane)", "{x}");
    let c = &x["counters"];
    // Every frame shown is a PAGE_FLIP whose event came back.
    assert!(u(&c["shown"]) >= 20 && u(&c["composed"]) >= u(&c["shown"]) && u(&c["imports"]) == 0, "{x}");
    assert_eq!(u(&c["errors"]), 0, "{x}");
    println!(
        "EVIDENCE run --display --display-legacy: {}; {} shown at {:.1} fps, {} composed, {} errors",
        x["way"],
        u(&c["shown"]),
        x["fps_shown"].as_f64().unwrap_or(0.0),
        u(&c["composed"]),
        u(&c["errors"])
    );
}

//! Tests of the configuration file, the environment and `zcpipe config`.

use super::*;

fn os(v: &[&str]) -> Vec<OsString> {
    v.iter().map(OsString::from).collect()
}

/// A config file in a private temporary directory.
fn file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("zcpipe.toml");
    std::fs::write(&p, text).unwrap();
    (dir, p)
}

fn env(v: &[(&str, &str)]) -> BTreeMap<String, String> {
    v.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

const NO_DEFAULT: &str = "/nonexistent/zcpipe.toml";

fn run_with(p: &Path, extra: &[&str], e: &[(&str, &str)]) -> Result<(super::super::run::RunArgs, Layered), String> {
    let mut argv = os(&["zcpipe", "run", "--config", p.to_str().unwrap()]);
    argv.extend(os(extra));
    parse_run(argv, &env(e), Path::new(NO_DEFAULT))
}

#[test]
fn precedence_default_file_env_flag_on_one_key() {
    let (_d, p) = file("restart-max = 7\n");
    let (none, _) = parse_run(os(&["zcpipe", "run"]), &env(&[]), Path::new(NO_DEFAULT)).unwrap();
    assert_eq!(none.restart_max, 5, "default");
    let (a, l) = run_with(&p, &[], &[]).unwrap();
    assert_eq!((a.restart_max, l.origins.get("restart_max")), (7, Some(&Origin::File(1))));
    let (a, l) = run_with(&p, &[], &[("ZCPIPE_RESTART_MAX", "9")]).unwrap();
    assert_eq!((a.restart_max, l.origins.get("restart_max")), (9, Some(&Origin::Env("ZCPIPE_RESTART_MAX".into()))));
    let (a, l) = run_with(&p, &["--restart-max", "11"], &[("ZCPIPE_RESTART_MAX", "9")]).unwrap();
    assert_eq!((a.restart_max, l.origins.get("restart_max")), (11, None));
    // The default file is read only when present; ZCPIPE_CONFIG names another; empty: none.
    let (a, _) = parse_run(os(&["zcpipe", "run"]), &env(&[]), &p).unwrap();
    assert_eq!(a.restart_max, 7);
    let (a, _) = parse_run(os(&["zcpipe", "run"]), &env(&[("ZCPIPE_CONFIG", "")]), &p).unwrap();
    assert_eq!(a.restart_max, 5);
    let (a, _) = parse_run(os(&["zcpipe", "run", "--config", "none"]), &env(&[]), &p).unwrap();
    assert_eq!(a.restart_max, 5);
    let (a, _) =
        parse_run(os(&["zcpipe", "run"]), &env(&[("ZCPIPE_CONFIG", p.to_str().unwrap())]), Path::new(NO_DEFAULT))
            .unwrap();
    assert_eq!(a.restart_max, 7);
    let e = parse_run(os(&["zcpipe", "run", "--config", "/nonexistent/x.toml"]), &env(&[]), Path::new(NO_DEFAULT))
        .unwrap_err();
    assert_eq!(e, "--config /nonexistent/x.toml: no such file (give a TOML file, or `none` for no file)");
    // Switches: the environment turns a file's `true` off.
    let (_d, p) = file("json = true\n");
    assert!(run_with(&p, &[], &[]).unwrap().0.json);
    assert!(!run_with(&p, &[], &[("ZCPIPE_JSON", "false")]).unwrap().0.json);
    // A flag conflicting with a file key wins over it (no clap conflict).
    assert!(run_with(&p, &["--no-print"], &[]).unwrap().0.no_print);
}

/// The stage command lines of a `zcpipe run` (everything `run` starts), host-only options.
fn stages(a: &super::super::run::RunArgs) -> Vec<(String, Vec<String>)> {
    let c = a.config().unwrap();
    c.stage_flags
        .into_iter()
        .map(|(n, f)| (n.to_string(), f.into_iter().filter(|f| !f.starts_with("--run-dir=")).collect()))
        .collect()
}

#[test]
fn camera_sections_are_the_same_run_as_the_command_line() {
    let (_d, p) = file(
        "scaler = \"cpu\"\ninfer = \"none\"\nfps = 10\nzone = [\"all=0,0,10,0,10,10\"]\n\n[camera.front]\nsource = \"testsrc:64x48\"\nfps = 5\nzone = \"door=0,0,9,0,9,9\"\n\n[camera.back]\nsource = \"testsrc:32x32\"\nfps = 2.5\n",
    );
    let (from_file, l) = run_with(&p, &[], &[]).unwrap();
    assert_eq!(l.cameras, Some(Origin::File(6)));
    let (typed, _) = parse_run(
        os(&[
            "zcpipe",
            "run",
            "--scaler",
            "cpu",
            "--infer",
            "none",
            "--fps",
            "10",
            "--zone",
            "all=0,0,10,0,10,10",
            "--zone",
            "front:door=0,0,9,0,9,9",
            "--source",
            "front=testsrc:64x48",
            "--fps",
            "5",
            "--source",
            "back=testsrc:32x32",
            "--fps",
            "2.5",
        ]),
        &env(&[]),
        Path::new(NO_DEFAULT),
    )
    .unwrap();
    assert_eq!(from_file.pipeline.cameras, typed.pipeline.cameras);
    assert_eq!(stages(&from_file), stages(&typed));
    let cams: Vec<(String, Option<f64>)> =
        from_file.pipeline.cams().unwrap().into_iter().map(|(n, c)| (n, c.fps)).collect();
    assert_eq!(cams, vec![("front".to_string(), Some(5.0)), ("back".to_string(), Some(2.5))]);
    // A --source on the command line replaces the file's cameras; its options stay.
    let (a, l) = run_with(&p, &["--source", "testsrc:16x16"], &[]).unwrap();
    assert_eq!(
        a.pipeline.cams().unwrap().iter().map(|(n, c)| (n.as_str(), c.source.as_str(), c.fps)).collect::<Vec<_>>(),
        vec![("cam0", "testsrc:16x16", Some(10.0))]
    );
    assert_eq!(l.cameras, None);
    // And ZCPIPE_SOURCE too.
    let (a, l) = run_with(&p, &[], &[("ZCPIPE_SOURCE", "testsrc:8x8")]).unwrap();
    assert_eq!(a.pipeline.cams().unwrap()[0].1.source, "testsrc:8x8");
    assert_eq!(l.cameras, Some(Origin::Env("ZCPIPE_SOURCE".into())));
}

#[test]
fn a_camera_sections_lines_masks_and_filters_are_its_own() {
    let (_d, p) = file(
        "line = [\"all=0,5,9,5\"]\n[camera.front]\nsource = \"testsrc\"\nline = [\"door=0,0,9,9\"]\nmask = \"0,0,5,0,5,5\"\nfilter = [\"person:min_score=0.6\"]\nzone = [\"gate=0,0,9,0,9,9\"]\nloiter = [\"gate=30\"]\ncalibration = \"0,0,9,0,9,9,0,9=2,3\"\n",
    );
    let (a, _) = run_with(&p, &[], &[]).unwrap();
    let s = &a.track.scene;
    let lines: Vec<(Option<String>, String)> =
        s.lines.iter().map(|l| (l.spec.camera.clone(), l.spec.line.name.clone())).collect();
    assert_eq!(lines, [(None, "all".to_string()), (Some("front".to_string()), "door".to_string())]);
    assert_eq!(s.masks[0].spec.camera.as_deref(), Some("front"));
    assert_eq!(
        (s.filters[0].spec.camera.as_deref(), s.filters[0].spec.filter.label.as_str()),
        (Some("front"), "person")
    );
    assert_eq!(s.loiter[0].spec.camera.as_deref(), Some("front"));
    assert_eq!(s.calibrations[0].spec.camera.as_deref(), Some("front"));
    let c = a.track.config(&["front".to_string()]).unwrap();
    assert_eq!((c.lines[0].len(), c.gates[0].masks.len(), c.loiter_ns[0][0]), (2, 1, Some(30_000_000_000)));
    // A bad one names the file, its line and the key.
    let (_d, p) = file("[camera.front]\nsource = \"testsrc\"\nline = [\"door=1,1\"]\n");
    let e = run_with(&p, &[], &[]).unwrap_err();
    assert!(e.contains(":3: line = \"door=1,1\": --line front:door=1,1: 1 point(s); a line needs at least two"), "{e}");
}

#[test]
fn repeated_flags_are_arrays() {
    let (_d, p) = file("zone = [\"a=0,0,9,0,9,9\", \"front:b=1,1,8,1,8,8\"]\n");
    let (a, _) = run_with(&p, &[], &[]).unwrap();
    assert_eq!(
        a.track.zones.iter().map(|z| (z.camera.clone(), z.zone.name.clone())).collect::<Vec<_>>(),
        vec![(None, "a".to_string()), (Some("front".to_string()), "b".to_string())]
    );
    // One string is one zone; the flag replaces the file's whole list; the environment's are `;`-separated.
    let (_d1, p1) = file("zone = \"a=0,0,9,0,9,9\"\n");
    assert_eq!(run_with(&p1, &[], &[]).unwrap().0.track.zones.len(), 1);
    let (a, _) = run_with(&p, &["--zone", "c=0,0,5,0,5,5"], &[]).unwrap();
    assert_eq!(a.track.zones.iter().map(|z| z.zone.name.as_str()).collect::<Vec<_>>(), vec!["c"]);
    let (a, _) = run_with(&p, &[], &[("ZCPIPE_ZONE", "x=0,0,5,0,5,5; y=0,0,6,0,6,6")]).unwrap();
    assert_eq!(a.track.zones.iter().map(|z| z.zone.name.as_str()).collect::<Vec<_>>(), vec!["x", "y"]);
}

#[test]
fn errors_name_the_file_and_line() {
    let err = |text: &str| {
        let (_d, p) = file(text);
        let e = load(&p).unwrap_err();
        e.strip_prefix(&format!("{}:", p.display())).unwrap_or_else(|| panic!("{e}")).to_string()
    };
    assert_eq!(
        err("# zcpipe\nfps = 10\nfsp = 5\n"),
        "3: unknown key `fsp`: did you mean `fps`? (`zcpipe config print` lists every key)"
    );
    assert_eq!(
        err("restart_max = 5\n"),
        "1: unknown key `restart_max`: did you mean `restart-max`? (`zcpipe config print` lists every key)"
    );
    assert_eq!(err("\n\nqqqqqqqq = 1\n"), "3: unknown key `qqqqqqqq` (`zcpipe config print` lists every key)");
    assert_eq!(err("json = \"yes\"\n"), "1: json = \"yes\": expected true or false, found a string");
    assert_eq!(err("\nfps = true\n"), "2: fps = true: expected a string or a number, found a boolean");
    assert_eq!(err("buffers = [1, 2]\n"), "1: buffers = [...]: --buffers takes one value, not an array");
    let e = err("# a\n\nrestart-max = 5000\n");
    assert!(
        e.starts_with(
            "3: restart-max = 5000: invalid value '5000' for '--restart-max <RESTART_MAX>': 5000 is not in 0..=1000"
        ),
        "{e}"
    );
    let e = err("fps = \"fast\"\n");
    assert!(e.starts_with("1: fps = \"fast\": invalid value 'fast' for '--fps <FPS>'"), "{e}");
    let e = err("tracker = \"deepsort\"\n");
    assert!(
        e.starts_with("1: tracker = \"deepsort\": invalid value 'deepsort' for '--tracker <TRACKER>'")
            && e.contains("possible values: bytetrack, sort, iou, none"),
        "{e}"
    );
    let e = err("[camera.front]\nsource = \"testsrc\"\nfps = \"x\"\n");
    assert!(e.starts_with("3: fps = \"x\": invalid value 'x' for '--fps <FPS>'"), "{e}");
    assert_eq!(err("[camera.front]\nsource = \"testsrc\"\nbuffers = 3\n"), "3: [camera.front] `buffers` cannot differ per camera: put it at the top of the file (a camera's keys: source, fps, size, format, capture-io, record-dir, record-continuous, record-pre, record-post, record-labels, record-zones, record-keep-days, record-max-gb, zone, line, loiter, mask, filter, calibration)");
    assert_eq!(err("x = 1\n[camera.front]\nfps = 3\n"), "1: unknown key `x` (`zcpipe config print` lists every key)");
    assert_eq!(
        err("[camera.front]\nfps = 3\n"),
        "1: [camera.front] has no source: add source = \"...\" (as --source takes it)"
    );
    assert!(err("\n[camera.Front]\nsource = \"testsrc\"\n").starts_with("2: [camera.Front]: "));
    assert!(err("fps = \n").starts_with("1: "), "a TOML syntax error names its line");
    let e = err("\n\nsource = 5\n");
    assert_eq!(e, "3: source = 5: expected a string (a source, as --source takes it), found an integer");
    // A password in a refused value is masked, in the value shown and in clap's message.
    let e = err("rtsp-transport = \"rtsp://u:secret@h/x\"\n");
    assert!(
        e.starts_with(
            "1: rtsp-transport = \"rtsp://u:***@h/x\": invalid value 'rtsp://u:***@h/x' for '--rtsp-transport"
        ),
        "{e}"
    );
    assert!(!e.contains("secret"), "{e}");
}

#[test]
fn a_bad_environment_value_names_the_variable() {
    let (_d, p) = file("fps = 10\n");
    let e = run_with(&p, &[], &[("ZCPIPE_FPS", "fast")]).unwrap_err();
    assert!(e.starts_with("ZCPIPE_FPS=fast: invalid value 'fast' for '--fps <FPS>'"), "{e}");
    let e = run_with(&p, &[], &[("ZCPIPE_JSON", "maybe")]).unwrap_err();
    assert_eq!(e, "ZCPIPE_JSON=maybe: --json is a switch: expected true or false (1/0, yes/no, on/off)");
    // Variables of flags given on the command line are not read at all.
    assert!(run_with(&p, &["--fps", "3"], &[("ZCPIPE_FPS", "fast")]).is_ok());
    // Other ZCPIPE_ variables (not flags) are not ours to refuse.
    assert!(run_with(&p, &[], &[("ZCPIPE_LIBRGA", "x"), ("ZCPIPE_TEST_ROOT", "/")]).is_ok());
}

#[test]
fn print_shows_each_origin() {
    let (_d, p) =
        file("# c\nbuffers = 6\nrestart-max = 7\n\n[camera.front]\nsource = \"rtsp://u:secret@h/x\"\nfps = 5\n");
    let argv = os(&["zcpipe", "run", "--config", p.to_str().unwrap(), "--watchdog", "9"]);
    let t = print(argv, &env(&[("ZCPIPE_RESTART_MAX", "8")]), Path::new(NO_DEFAULT)).unwrap();
    for want in [
        "\nbuffers = 6  # file:2\n",
        "\nrestart-max = 8  # env ZCPIPE_RESTART_MAX\n",
        "\nwatchdog = 9  # flag\n",
        "\nrestart-window = 60  # default\n",
        "\njson = false  # default\n",
        "\n# format  # unset\n",
        "\n[camera.front]\nsource = \"rtsp://u:***@h/x\"  # file:5\nfps = 5  # file:7\n",
    ] {
        assert!(t.contains(want), "{want:?} in:\n{t}");
    }
    assert!(!t.contains("secret"));
    // A switch turned off by the environment says so.
    let (_d, p) = file("json = true\n");
    let t = print(
        os(&["zcpipe", "run", "--config", p.to_str().unwrap()]),
        &env(&[("ZCPIPE_JSON", "no")]),
        Path::new(NO_DEFAULT),
    )
    .unwrap();
    assert!(t.contains("\njson = false  # env ZCPIPE_JSON\n"), "{t}");
}

#[test]
fn every_flag_of_run_is_a_key() {
    let k: Vec<String> = keys(&run_command()).into_iter().map(|k| k.long).collect();
    for want in ["fps", "source", "zone", "restart-max", "json", "scaler", "stats-interval", "track-high"] {
        assert!(k.contains(&want.to_string()), "{want}: {k:?}");
    }
    for not in ["config", "dry-run", "camera", "report-fd", "help"] {
        assert!(!k.contains(&not.to_string()), "{not}");
    }
}

#[test]
fn a_config_file_too_big_or_not_a_file_is_refused_before_it_is_read() {
    let (_d, p) = file(&format!("# {}\n", "x".repeat(file::MAX_FILE_BYTES as usize)));
    let e = file::load(&p).err().unwrap();
    assert!(
        e.ends_with(&format!(
            "not a configuration file ({} bytes); give a TOML file of at most 1024 KiB",
            file::MAX_FILE_BYTES + 3
        )),
        "{e}"
    );
    let e = file::load(Path::new("/dev/zero")).err().unwrap();
    assert_eq!(e, "/dev/zero: not a configuration file (not a regular file); give a TOML file of at most 1024 KiB");
}

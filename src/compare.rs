//! `zcpipe compare`: the same source through the same stages in zero-copy mode and in
//! `--copy-mode`, alternating A B A B for R rounds so drift (thermal, other load) hits both
//! alike, then one side-by-side table of medians, their ratio and their spread.
//!
//! Each round runs `zcpipe run ... --summary-json` as a child and reads its summary, so what
//! is compared is exactly what a user's `zcpipe run` does.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use zcpipe_core::copy::CopyCounters;
use zcpipe_core::frame::Stage;
use zcpipe_core::id::{Role, StageId};
use zcpipe_core::metrics::{median, FrameSpan, ProcessStats, StageReport};
use zcpipe_core::ring::RingCounters;
use zcpipe_display::report::DisplayFacts;

use crate::supervise::run::RunSummary;

/// A checked `zcpipe compare` (built by the command line).
#[derive(Clone, Debug)]
pub struct CompareConfig {
    /// The flags of each round's `zcpipe run` (each round adds `--copy-mode` or not).
    pub run_flags: Vec<String>,
    /// Rounds of A (zero-copy) then B (copy mode), 1..=50.
    pub rounds: u32,
    /// Print the comparison as JSON on stdout instead of a table.
    pub json: bool,
    /// Also draw the report (SVG) here; its folder exists.
    pub report: Option<PathBuf>,
    /// Whether the user gave `--copy-mode` (which compare ignores, and says so).
    pub copy_mode_given: bool,
}

/// One metric in both modes: medians over rounds, spread (min..max), ratio copy / zero-copy.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Metric name (`latency p50 total (µs)`, `copied bytes/frame capture->scale`, ...).
    pub metric: String,
    /// Median over the zero-copy rounds.
    pub zero_copy: f64,
    /// Median over the copy-mode rounds.
    pub copy_mode: f64,
    /// `copy_mode / zero_copy` (None when zero-copy is 0).
    pub ratio: Option<f64>,
    /// Min and max over the zero-copy rounds.
    pub zero_copy_spread: [f64; 2],
    /// Min and max over the copy-mode rounds.
    pub copy_mode_spread: [f64; 2],
}

/// What `compare --json` prints.
#[derive(Debug, Serialize)]
pub struct Comparison {
    /// The `zcpipe run` flags both modes used.
    pub run_flags: Vec<String>,
    /// Rounds of each mode.
    pub rounds: u32,
    /// Frames each run captured (must match across all runs).
    pub frames: Vec<u64>,
    /// The metrics.
    pub rows: Vec<Row>,
    /// Every run's summary, in the order run (A, B, A, B, ...).
    pub runs: Vec<RunSummary>,
}

/// Runs one round: `zcpipe run` with `flags` (and `--copy-mode` if `copy`), its summary
/// read back as the [`RunSummary`] it wrote.
fn one_run(flags: &[String], copy: bool, dir: &Path, i: usize) -> Result<RunSummary> {
    let summary = dir.join(format!("summary-{i}.json"));
    let exe = std::env::current_exe()?;
    // The run's options (a camera's URL with its password among them) in a sealed memfd, not
    // on its command line; the fd is inherited by this child alone (made inheritable just
    // for the spawn, closed after it).
    use crate::cli::stage_args::{sealed, StageArgs, VERSION};
    let memfd = sealed(&StageArgs { version: VERSION, stage: "run".into(), args: flags.to_vec() })?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&memfd);
    nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()))?;
    let out = Command::new(exe)
        .arg("run")
        .arg(format!("--args-fd={fd}"))
        .args(copy.then_some("--copy-mode"))
        .args(["--no-print", "--stats-interval=0", "--quiet"])
        .arg(format!("--run-dir={}", dir.join(format!("run-{i}")).display()))
        .arg(format!("--publish={}", dir.join(format!("d-{i}.sock")).display()))
        .arg(format!("--summary-json={}", summary.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .context("starting zcpipe run");
    drop(memfd);
    let out = out?;
    if !out.status.success() {
        bail!(
            "zcpipe run{} failed: {}",
            if copy { " --copy-mode" } else { "" },
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = std::fs::read_to_string(&summary).with_context(|| format!("reading {}", summary.display()))?;
    let mut s: RunSummary =
        serde_json::from_str(&text).with_context(|| format!("{}: not a run summary", summary.display()))?;
    merge_cameras(&mut s);
    Ok(s)
}

/// With several cameras a run's summary has one capture stage per camera
/// (`stages["capture@NAME"]`): this adds their sum as `stages["capture"]` (frames, bytes
/// copied, drops, CPU time, context switches, memory; the frame span from the first camera's
/// first frame to the last one's last, its frames all cameras'), so the comparison reads
/// one capture stage, as with one camera. A summary with a `capture` stage is left as it is.
pub fn merge_cameras(summary: &mut RunSummary) {
    let capture = StageId::from(Stage::Capture);
    if summary.stages.contains_key(&capture) {
        return;
    }
    let cams: Vec<&StageReport> = summary.stages.iter().filter(|(k, _)| k.is(Stage::Capture)).map(|(_, r)| r).collect();
    if cams.is_empty() {
        return;
    }
    let sum = |f: &dyn Fn(&StageReport) -> u64| cams.iter().map(|r| f(r)).sum::<u64>();
    let ring = |f: fn(&RingCounters) -> u64| sum(&|r| r.output_ring.as_ref().map_or(0, f));
    let process = |f: fn(&ProcessStats) -> u64| sum(&|r| r.process.as_ref().map_or(0, f));
    let spans: Vec<FrameSpan> = cams.iter().filter_map(|r| r.out_span).collect();
    let merged = StageReport {
        stage: capture.clone(),
        frames_in: sum(&|r| r.frames_in),
        frames_out: sum(&|r| r.frames_out),
        copy_out: Some(cams.iter().filter_map(|r| r.copy_out).fold(CopyCounters::default(), CopyCounters::plus)),
        output_ring: Some(RingCounters {
            produced: ring(|c| c.produced),
            consumed: ring(|c| c.consumed),
            dropped: ring(|c| c.dropped),
            ..Default::default()
        }),
        process: Some(ProcessStats {
            user_us: process(|p| p.user_us),
            system_us: process(|p| p.system_us),
            voluntary_ctx: process(|p| p.voluntary_ctx),
            involuntary_ctx: process(|p| p.involuntary_ctx),
            rss_kib: process(|p| p.rss_kib),
            pss_kib: process(|p| p.pss_kib),
        }),
        out_span: (!spans.is_empty()).then(|| FrameSpan {
            frames: spans.iter().map(|s| s.frames).sum(),
            first_s: spans.iter().map(|s| s.first_s).fold(f64::INFINITY, f64::min),
            last_s: spans.iter().map(|s| s.last_s).fold(f64::NEG_INFINITY, f64::max),
        }),
        ..Default::default()
    };
    summary.stages.insert(capture, merged);
}

/// The metrics compared, from one run summary.
pub fn metrics(s: &RunSummary) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    let get = |st: Stage| s.stages.get(&st.into());
    let publish = get(Stage::Publish);
    for series in zcpipe_core::metrics::SERIES {
        let l = publish.and_then(|p| p.latency.get(series)).cloned().unwrap_or_default();
        m.insert(format!("latency p50 {series} (µs)"), l.p50_us);
        m.insert(format!("latency p99 {series} (µs)"), l.p99_us);
        m.insert(format!("latency max {series} (µs)"), l.max_us);
    }
    // First to last frame out, as `zcpipe run`'s summary (N frames span N-1 intervals).
    let fps = |r: Option<&StageReport>| r.and_then(|r| r.out_span).and_then(|s| s.fps()).unwrap_or(0.0);
    m.insert("fps published".into(), fps(publish));
    m.insert("fps captured".into(), fps(get(Stage::Capture)));
    for (up, down) in [(Stage::Capture, Stage::Scale), (Stage::Scale, Stage::Infer)] {
        let (u, d) = (get(up), get(down));
        let out = u.and_then(|r| r.copy_out).unwrap_or_default();
        let inn = d.and_then(|r| r.copy_in).unwrap_or_default();
        let frames = u.map_or(0, |r| r.frames_out).max(1) as f64;
        let name = format!("{}->{}", up.name(), down.name());
        m.insert(format!("copied bytes/frame {name}"), (out.copied_bytes + inn.copied_bytes) as f64 / frames);
        m.insert(format!("socket bytes/frame {name}"), (out.socket_bytes + inn.socket_bytes) as f64 / frames);
        m.insert(format!("dropped {name}"), u.and_then(|r| r.output_ring).map_or(0, |c| c.dropped) as f64);
    }
    for stage in Stage::ALL {
        let r = get(stage);
        let n = r.map_or(0, |r| r.frames_in).max(1) as f64;
        let p = r.and_then(|r| r.process).unwrap_or_default();
        let name = stage.name();
        m.insert(format!("cpu µs/frame {name}"), (p.user_us + p.system_us) as f64 / n);
        m.insert(format!("voluntary ctx switches/frame {name}"), p.voluntary_ctx as f64 / n);
        m.insert(format!("involuntary ctx switches/frame {name}"), p.involuntary_ctx as f64 / n);
        m.insert(format!("RSS MiB {name}"), p.rss_kib as f64 / 1024.0);
        m.insert(format!("Pss MiB {name}"), p.pss_kib as f64 / 1024.0);
    }
    if let Some(d) = s.stages.get(&Role::Display.into()) {
        display_metrics(&mut m, d);
    }
    // The headline's sums: what a frame costs in all.
    let sum = |m: &BTreeMap<String, f64>, prefix: &str| {
        m.iter().filter(|(k, _)| k.starts_with(prefix)).map(|(_, v)| v).sum::<f64>()
    };
    let cpu = sum(&m, "cpu µs/frame ");
    let copied = sum(&m, "copied bytes/frame ");
    let pss = sum(&m, "Pss MiB ");
    m.insert("cpu µs/frame, all stages".into(), cpu);
    m.insert("copied bytes/frame, all hops".into(), copied);
    m.insert("Pss MiB, all stages".into(), pss);
    m
}

/// The headline rows, first in the table, in this order.
const HEADLINE: [&str; 7] = [
    "latency p50 total (µs)",
    "latency p99 total (µs)",
    "cpu µs/frame, all stages",
    "copied bytes/frame, all hops",
    "Pss MiB, all stages",
    "fps published",
    "fps captured",
];

/// Where `metric` goes in the table: its rank (the headline first, then each stage and the
/// hop after it in the frame's order) and the part it belongs to.
fn part_of(metric: &str) -> (usize, &'static str) {
    if let Some(i) = HEADLINE.iter().position(|h| *h == metric) {
        return (i, "headline");
    }
    const PARTS: [&str; 8] =
        ["capture->scale", "scale->infer", "capture->display", "capture", "scale", "infer", "publish", "display"];
    const ORDER: [usize; 8] = [2, 4, 8, 1, 3, 5, 6, 7];
    for (name, rank) in PARTS.iter().zip(ORDER) {
        // A hop is named as such; a stage is its name's last word (`cpu µs/frame infer`).
        let hit = if name.contains("->") {
            metric.contains(name)
        } else {
            metric.ends_with(name) || metric.contains(&format!(" {name} "))
        };
        if hit {
            return (HEADLINE.len() + rank, name);
        }
    }
    (HEADLINE.len() + 9, "end to end")
}

/// A value as the table shows it: to one decimal, and a whole number without one.
fn number(v: f64) -> String {
    let r = (v * 10.0).round() / 10.0;
    if r.fract() == 0.0 && r.abs() < 1e15 {
        format!("{r:.0}")
    } else {
        format!("{r:.1}")
    }
}

/// With `--display`: what showing the camera costs in each mode (zero-copy scanout imports
/// the camera's buffers; copy mode gets a copy of each frame over a socket and composes it
/// with the CPU, as a plain viewer would).
fn display_metrics(m: &mut BTreeMap<String, f64>, d: &StageReport) {
    let n = d.frames_in.max(1) as f64;
    let p = d.process.unwrap_or_default();
    let c = d.extra.view::<DisplayFacts>().display.map(|r| r.counters).unwrap_or_default();
    let copy_in = d.copy_in.unwrap_or_default();
    m.insert("fps shown display".into(), d.out_span.and_then(|s| s.fps()).unwrap_or(0.0));
    m.insert("cpu µs/frame display".into(), (p.user_us + p.system_us) as f64 / n);
    m.insert("copied bytes/frame capture->display".into(), (copy_in.copied_bytes + c.composed_bytes) as f64 / n);
    m.insert("socket bytes/frame capture->display".into(), copy_in.socket_bytes as f64 / n);
    m.insert("frames composed by the CPU display".into(), c.composed as f64);
    m.insert("buffers imported display".into(), c.imports as f64);
    m.insert("RSS MiB display".into(), p.rss_kib as f64 / 1024.0);
}

/// Runs the comparison; returns the exit code.
pub fn compare(a: CompareConfig, stop: &AtomicBool) -> Result<i32> {
    if a.copy_mode_given {
        log::warn!("--copy-mode has no effect on compare: it runs every round in both modes");
    }
    let flags = a.run_flags.clone();
    let dir = tempfile::Builder::new()
        .prefix("zcpipe-compare-")
        .tempdir()
        .context("creating a temporary directory for the rounds' summaries")?;
    let mut runs = vec![];
    let mut per_mode: [Vec<BTreeMap<String, f64>>; 2] = [vec![], vec![]];
    for round in 0..a.rounds {
        for (k, copy) in [false, true].into_iter().enumerate() {
            if stop.load(Ordering::Relaxed) {
                bail!("stopped");
            }
            log::info!("round {} of {}: {}", round + 1, a.rounds, if copy { "copy mode" } else { "zero-copy" });
            let s = one_run(&flags, copy, dir.path(), runs.len())?;
            per_mode[k].push(metrics(&s));
            runs.push(s);
        }
    }
    let capture = StageId::from(Stage::Capture);
    let frames: Vec<u64> = runs.iter().map(|s| s.stages.get(&capture).map_or(0, |r| r.frames_out)).collect();
    if frames.iter().any(|f| *f != frames[0]) {
        bail!("runs captured different frame counts {frames:?}: use a finite source with --frames");
    }
    let mut keys: Vec<String> = per_mode[0][0].keys().cloned().collect();
    keys.sort_by_key(|k| part_of(k).0);
    let rows: Vec<Row> = keys
        .iter()
        .map(|k| {
            let mut z: Vec<f64> = per_mode[0].iter().map(|m| m[k]).collect();
            let mut c: Vec<f64> = per_mode[1].iter().map(|m| m[k]).collect();
            let spread = |v: &[f64]| {
                [v.iter().cloned().fold(f64::INFINITY, f64::min), v.iter().cloned().fold(f64::NEG_INFINITY, f64::max)]
            };
            let (zs, cs) = (spread(&z), spread(&c));
            let (zm, cm) = (median(&mut z), median(&mut c));
            Row {
                metric: k.clone(),
                zero_copy: zm,
                copy_mode: cm,
                ratio: (zm != 0.0).then(|| cm / zm),
                zero_copy_spread: zs,
                copy_mode_spread: cs,
            }
        })
        .collect();
    // Shown in the table, the report and the JSON: a camera's password masked.
    let shown = crate::cli::stage_args::shown(&flags);
    let cmp = Comparison { run_flags: shown, rounds: a.rounds, frames, rows, runs };
    if let Some(path) = &a.report {
        draw(&cmp, path)?;
        log::info!("report drawn to {}", path.display());
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&cmp)?);
    } else {
        print!("{}", table(&cmp));
    }
    Ok(0)
}

/// The side-by-side table (markdown).
pub fn table(c: &Comparison) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "zcpipe compare: {} rounds of zero-copy vs --copy-mode, {} frames each; `zcpipe run {}`",
        c.rounds,
        c.frames.first().unwrap_or(&0),
        c.run_flags.join(" ")
    );
    let _ = writeln!(o, "\n| part | metric | zero-copy | copy mode | copy / zero | zero-copy spread | copy spread |");
    let _ = writeln!(o, "|---|---|---:|---:|---:|---|---|");
    for r in &c.rows {
        let ratio = r.ratio.map(|x| format!("{x:.2}x")).unwrap_or_else(|| "-".into());
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {ratio} | {}..{} | {}..{} |",
            part_of(&r.metric).1,
            r.metric,
            number(r.zero_copy),
            number(r.copy_mode),
            number(r.zero_copy_spread[0]),
            number(r.zero_copy_spread[1]),
            number(r.copy_mode_spread[0]),
            number(r.copy_mode_spread[1])
        );
    }
    o
}

fn draw(c: &Comparison, path: &Path) -> Result<()> {
    use plotters::prelude::*;
    let get =
        |name: &str| c.rows.iter().find(|r| r.metric == name).map(|r| (r.zero_copy, r.copy_mode)).unwrap_or((0.0, 0.0));
    let stages = ["capture", "scale", "infer", "publish", "total"];
    let bars: Vec<(f64, f64)> = stages.iter().map(|s| get(&format!("latency p50 {s} (µs)"))).collect();
    let dist: Vec<(f64, f64)> = ["p50", "p99"].iter().map(|q| get(&format!("latency {q} total (µs)"))).collect();
    let root = SVGBackend::new(path, (960, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let (left, right) = root.split_horizontally(620);
    pair_chart(&left, "p50 latency per stage (µs)", &stages, &bars, true)?;
    pair_chart(&right, "end-to-end latency (µs)", &["p50", "p99"], &dist, false)?;
    root.present().map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    Ok(())
}

/// One chart of `(zero-copy, copy mode)` bar pairs, one pair per label, on `area`, its y
/// axis in µs; with a legend if `legend`. Each pair's label is drawn under it (the mesh's own
/// x labels are off: plotters would place them at round tick values, not under the pairs).
fn pair_chart(
    area: &plotters::drawing::DrawingArea<plotters::backend::SVGBackend<'_>, plotters::coord::Shift>,
    caption: &str,
    labels: &[&str],
    pairs: &[(f64, f64)],
    legend: bool,
) -> Result<()> {
    use plotters::prelude::*;
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    let err = |e: &dyn std::fmt::Display| anyhow::anyhow!("{e}");
    let ymax = pairs.iter().flat_map(|(a, b)| [*a, *b]).fold(1.0, f64::max) * 1.25;
    let mut ch = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..labels.len() as f64, 0f64..ymax)
        .map_err(|e| err(&e))?;
    ch.configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("latency (µs)")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(|e| err(&e))?;
    for (i, (z, cp)) in pairs.iter().enumerate() {
        let x = i as f64;
        ch.draw_series([Rectangle::new([(x + 0.1, 0.0), (x + 0.48, *z)], BLUE.filled())]).map_err(|e| err(&e))?;
        ch.draw_series([Rectangle::new([(x + 0.52, 0.0), (x + 0.9, *cp)], RED.filled())]).map_err(|e| err(&e))?;
    }
    // The labels under the pairs, in the area's own pixels.
    let base = area.get_base_pixel();
    let style = ("sans-serif", 15).into_font().color(&BLACK).pos(Pos::new(HPos::Center, VPos::Top));
    for (i, label) in labels.iter().enumerate() {
        let (px, py) = ch.backend_coord(&(i as f64 + 0.5, 0.0));
        area.draw(&Text::new(label.to_string(), (px - base.0, py - base.1 + 8), style.clone())).map_err(|e| err(&e))?;
    }
    if legend {
        for (name, colour) in [("zero-copy", BLUE), ("copy mode", RED)] {
            ch.draw_series([Rectangle::new([(0.0, 0.0), (0.0, 0.0)], colour.filled())])
                .map_err(|e| err(&e))?
                .label(name)
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled()));
        }
        ch.configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .border_style(BLACK)
            .background_style(WHITE)
            .draw()
            .map_err(|e| err(&e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run with a display: its rows come from the display stage's report (CPU per frame
    /// received, the copy-mode bytes it took from the socket plus what its CPU composed).
    #[test]
    fn a_display_stage_has_its_rows() {
        let s: RunSummary = serde_json::from_value(serde_json::json!({"elapsed_s": 4.0, "exit_codes": {}, "stages": {
            "capture": {"stage": "capture", "frames_out": 100, "out_span": {"frames": 100, "first_s": 0.0, "last_s": 3.3}},
            "display": {"stage": "display", "frames_in": 100, "frames_out": 90, "out_span": {"frames": 91, "first_s": 1.0, "last_s": 4.0},
                "copy_in": {"frames": 100, "copied_bytes": 46_080_000u64, "socket_bytes": 46_080_000u64},
                "process": {"user_us": 150_000, "system_us": 50_000, "voluntary_ctx": 0, "involuntary_ctx": 0, "rss_kib": 2048, "pss_kib": 0},
                "extra": {"display": {"counters": {"composed": 90, "composed_bytes": 90 * 1024 * 768 * 4, "imports": 0}}}}
        }}))
        .unwrap();
        let m = metrics(&s);
        assert_eq!(m["fps shown display"], 30.0);
        assert_eq!(m["cpu µs/frame display"], 2000.0);
        assert_eq!(m["copied bytes/frame capture->display"], (46_080_000.0 + 90.0 * 1024.0 * 768.0 * 4.0) / 100.0);
        assert_eq!(m["socket bytes/frame capture->display"], 460_800.0);
        assert_eq!(
            (m["frames composed by the CPU display"], m["buffers imported display"], m["RSS MiB display"]),
            (90.0, 0.0, 2.0)
        );
        // Without a display: no display rows.
        let none: RunSummary = serde_json::from_value(
            serde_json::json!({"elapsed_s": 1.0, "exit_codes": {}, "stages": {"capture": {"stage": "capture"}}}),
        )
        .unwrap();
        let none = metrics(&none);
        assert!(!none.keys().any(|k| k.contains("display")), "{none:?}");
    }

    #[test]
    fn the_table_leads_with_the_headline_then_goes_stage_by_stage() {
        let mut names: Vec<&str> = vec![
            "RSS MiB publish",
            "copied bytes/frame capture->scale",
            "latency p50 total (µs)",
            "cpu µs/frame capture",
            "latency p50 infer (µs)",
            "dropped scale->infer",
            "copied bytes/frame, all hops",
            "latency max total (µs)",
        ];
        names.sort_by_key(|k| part_of(k).0);
        assert_eq!(
            names,
            [
                "latency p50 total (µs)",
                "copied bytes/frame, all hops",
                "cpu µs/frame capture",
                "copied bytes/frame capture->scale",
                "dropped scale->infer",
                "latency p50 infer (µs)",
                "RSS MiB publish",
                "latency max total (µs)",
            ]
        );
        assert_eq!(
            (number(6_220_800.0), number(12.34), number(12.04), number(0.0)),
            ("6220800".into(), "12.3".into(), "12".into(), "0".into())
        );
    }
}

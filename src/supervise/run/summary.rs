//! The run's words: the periodic stats line and the summary text printed at the end (from the
//! stages' latest reports and the [`RunSummary`]).

use super::*;

/// A rate for people: `30.0`, or `-` when there is none (fewer than 2 frames).
pub(super) fn rate(fps: Option<f64>) -> String {
    fps.map(|f| format!("{f:.1}")).unwrap_or_else(|| "-".into())
}

/// A stage's frame rate over its whole run: between its first and last frame out
/// ([`zcpipe_core::metrics::FrameSpan`]); from `elapsed_s` for a report without a span.
pub(super) fn fps(r: &StageReport) -> Option<f64> {
    match r.out_span {
        Some(s) => s.fps(),
        None => (r.elapsed_s > 0.0 && r.frames_out >= 2).then(|| r.frames_out as f64 / r.elapsed_s),
    }
}

pub(super) fn drops(latest: &BTreeMap<String, StageReport>, stage: &str) -> u64 {
    if stage == "capture" {
        return captures(latest).filter_map(|r| r.output_ring).map(|c| c.dropped).sum();
    }
    latest.get(stage).and_then(|r| r.output_ring).map(|c| c.dropped).unwrap_or(0)
}

/// The capture stages' reports: `capture`, or `capture@NAME` of each camera of several.
pub(super) fn captures(latest: &BTreeMap<String, StageReport>) -> impl Iterator<Item = &StageReport> {
    latest.iter().filter(|(k, _)| is_capture(k)).map(|(_, r)| r)
}

/// Whether a stage name is a capture stage's: `capture`, or `capture@NAME` of a camera of several.
pub(super) fn is_capture(stage: &str) -> bool {
    stage == "capture" || stage_camera(stage).is_some()
}

/// The periodic stats lines. Stages report on their own clocks; a line is printed once
/// every live stage has reported since the previous line (or, if one is stuck, after two
/// intervals with at least one new report), so no line repeats stale counts. Its rates are
/// over the frames since the previous line.
#[derive(Default)]
pub(super) struct StatsLines {
    /// Stages that reported since the last line.
    pub(super) fresh: std::collections::BTreeSet<String>,
    pub(super) last: Option<Instant>,
    /// Capture's and publish's frame spans at the last line.
    before: BTreeMap<String, zcpipe_core::metrics::FrameSpan>,
}

impl StatsLines {
    /// The next line, if one is due now.
    pub(super) fn due(
        &mut self,
        every: Duration,
        live: &[&str],
        latest: &BTreeMap<String, StageReport>,
        cameras: &[String],
        carried: &Carried,
    ) -> Option<String> {
        let since = self.last.map(|t| t.elapsed()).unwrap_or(every);
        let all_fresh = !live.is_empty() && live.iter().all(|s| self.fresh.contains(*s));
        let ready = since >= every && (all_fresh || (since >= 2 * every && !self.fresh.is_empty()));
        if !ready || captures(latest).next().is_none() {
            return None;
        }
        self.fresh.clear();
        self.last = Some(Instant::now());
        let mut part = |stage: &str| {
            let r = latest.get(stage);
            let span = r.and_then(|r| r.out_span);
            let fps = match (span, self.before.get(stage)) {
                (Some(now), Some(b)) => now.fps_since(b),
                (Some(now), None) => now.fps(),
                (None, _) => r.and_then(fps),
            };
            if let Some(s) = span {
                self.before.insert(stage.to_string(), s);
            }
            (r.map(|r| r.frames_out).unwrap_or(0), rate(fps))
        };
        if !cameras.is_empty() {
            // Several cameras: each one's count, rate and drops, then the total.
            let mut per = vec![];
            let (mut total, mut total_fps) = (0, 0.0);
            for n in cameras {
                let stage = camera_stage(n);
                let (frames, fps) = part(&stage);
                // Over the whole run: a restarted camera's earlier processes too.
                let frames = frames + carried.frames(&stage);
                total += frames;
                total_fps += fps.parse::<f64>().unwrap_or(0.0);
                let dropped = camera_dropped(latest, n);
                per.push(format!("{n} captured {frames} at {fps} fps, dropped {dropped}"));
            }
            let (publ, publ_fps) = part("publish");
            let publ = publ + carried.frames("publish");
            let line = stats_line(total, &format!("{total_fps:.1}"), publ, &publ_fps, latest);
            return Some(format!("{line} | cameras: {}", per.join(", ")));
        }
        let (cap, cap_fps) = part("capture");
        let (publ, publ_fps) = part("publish");
        // Capture's report may be older than publish's: it captured at least what came out.
        let cap = cap.max(publ);
        Some(stats_line(cap, &cap_fps, publ, &publ_fps, latest))
    }
}

/// The periodic stats line: frames so far, rates since the previous line, drops so far.
pub(super) fn stats_line(
    cap: u64,
    cap_fps: &str,
    publ: u64,
    publ_fps: &str,
    latest: &BTreeMap<String, StageReport>,
) -> String {
    format!(
        "stats: capture {cap} frames {cap_fps} fps | published {publ} frames {publ_fps} fps | dropped capture->scale {}, scale->infer {}, infer->publish {}",
        drops(latest, "capture"),
        drops(latest, "scale"),
        drops(latest, "infer"),
    )
}

/// The stage processes of a run, in pipeline order: its exit codes' names (every process
/// started), else the four stages.
pub(super) fn stage_names(s: &RunSummary) -> Vec<String> {
    if s.exit_codes.is_empty() {
        return Stage::ALL.iter().map(|st| st.name().to_string()).collect();
    }
    let order = |n: &str| {
        Stage::ALL.iter().position(|st| n == st.name() || n.starts_with(&format!("{}@", st.name()))).unwrap_or(4)
    };
    let mut v: Vec<String> = s.exit_codes.keys().cloned().collect();
    v.sort_by_key(|n| order(n));
    v
}

/// The end-of-run summary, as printed on stderr.
pub fn summary_text(s: &RunSummary) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(o, "zcpipe summary ({:.1} s):", s.elapsed_s);
    let get = |n: &str| s.stages.get(n);
    let _ = writeln!(
        o,
        "  frames: captured {}, scaled {}, inferred {}, published {}",
        captures(&s.stages).map(|r| r.frames_out).sum::<u64>(),
        get("scale").map(|r| r.frames_out).unwrap_or(0),
        get("infer").map(|r| r.frames_out).unwrap_or(0),
        get("publish").map(|r| r.frames_out).unwrap_or(0),
    );
    let cams: Vec<(String, String)> =
        s.stages.keys().filter_map(|k| stage_camera(k).map(|n| (k.clone(), format!("{n}->scale")))).collect();
    let rings = cams.iter().map(|(k, n)| (k.as_str(), n.as_str())).chain([
        ("capture", "capture->scale"),
        ("scale", "scale->infer"),
        ("infer", "infer->publish"),
    ]);
    for (stage, name) in rings {
        if let Some(c) = get(stage).and_then(|r| r.output_ring) {
            let _ = writeln!(
                o,
                "  ring {name:<15} produced {:>6}  consumed {:>6}  dropped {:>6}  rejected {}  in flight {}",
                c.produced, c.consumed, c.dropped, c.rejected, c.in_flight
            );
        }
    }
    if let (Some(c), Some(p)) = (get("capture"), get("publish")) {
        let _ = writeln!(o, "  fps: captured {}, published {} (first to last frame)", rate(fps(c)), rate(fps(p)));
    }
    if let Some(line) = get("display").and_then(|r| r.extra.view::<DisplayFacts>().summary_line()) {
        let _ = writeln!(o, "{line}");
    }
    // Each part of the publish stage (its clients, each output) writes its own line.
    for line in get("publish").map(|p| p.extra.view::<PublishFacts>().summary_lines()).unwrap_or_default() {
        let _ = writeln!(o, "{line}");
    }
    for (up, down, name) in [("capture", "scale", "capture->scale"), ("scale", "infer", "scale->infer")] {
        // Several cameras: their capture stages' copies together.
        let u = if up == "capture" {
            captures(&s.stages).filter_map(|r| r.copy_out).reduce(zcpipe_core::copy::CopyCounters::plus)
        } else {
            get(up).and_then(|r| r.copy_out)
        };
        let d = get(down).and_then(|r| r.copy_in);
        if let (Some(u), Some(d)) = (u, d) {
            let per = (u.copied_bytes + d.copied_bytes).checked_div(u.frames).unwrap_or(0);
            let _ = writeln!(
                o,
                "  copies {name:<15} zcpipe {} bytes ({per} per frame), socket calls {} bytes",
                u.copied_bytes + d.copied_bytes,
                u.socket_bytes + d.socket_bytes
            );
        }
    }
    let cpu: Vec<String> = stage_names(s)
        .iter()
        .filter_map(|st| {
            let r = get(st)?;
            let p = r.process?;
            let n = r.frames_in.max(1);
            Some(format!("{st} {:.0} µs/frame {} MiB", (p.user_us + p.system_us) as f64 / n as f64, p.pss_kib / 1024))
        })
        .collect();
    if !cpu.is_empty() {
        let _ = writeln!(o, "  cpu and Pss: {}", cpu.join(", "));
    }
    // Network cameras that dropped and came back (the capture stage kept running).
    for (stage, r) in s.stages.iter().filter(|(k, _)| is_capture(k)) {
        let who = stage_camera(stage).map(|c| format!("camera {c}")).unwrap_or_else(|| "the camera".into());
        if let Some(line) = r.extra.view::<ReconnectFacts>().summary_line(&who) {
            let _ = writeln!(o, "{line}");
        }
    }
    if !s.restarts.is_empty() {
        let r: Vec<String> = s.restarts.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ =
            writeln!(o, "  restarts: {} (each restarted alone; the counts above are the last process's)", r.join(", "));
    }
    let names = stage_names(s);
    let unreported: Vec<&str> =
        names.iter().map(String::as_str).filter(|n| !get(n).is_some_and(|r| r.final_report)).collect();
    if !unreported.is_empty() {
        let _ = writeln!(
            o,
            "  no final report from: {} (the counts above are their last periodic ones, if any)",
            unreported.join(", ")
        );
    }
    if !s.cameras.is_empty() {
        let _ =
            writeln!(o, "  camera          captured  dropped  published  fps in  fps out  p50 ms  p99 ms  restarts");
        let f = |v: Option<f64>, div: f64| v.map(|x| format!("{:.1}", x / div)).unwrap_or_else(|| "-".into());
        let (mut c, mut d, mut p) = (0, 0, 0);
        for (name, cs) in s.camera_order.iter().filter_map(|n| s.cameras.get(n).map(|c| (n, c))) {
            let _ = writeln!(
                o,
                "    {name:<14}{:>8} {:>8} {:>10} {:>7} {:>8} {:>7} {:>7} {:>9}",
                cs.captured,
                cs.dropped,
                cs.published,
                f(cs.fps_captured, 1.0),
                f(cs.fps_published, 1.0),
                f(cs.latency_p50_us, 1000.0),
                f(cs.latency_p99_us, 1000.0),
                cs.restarts
            );
            (c, d, p) = (c + cs.captured, d + cs.dropped, p + cs.published);
        }
        let _ = writeln!(o, "    {:<14}{c:>8} {d:>8} {p:>10}", "total");
    }
    if let Some(p) = get("publish") {
        let _ = writeln!(o, "  latency (µs)        p50        p99        max");
        for k in zcpipe_core::metrics::SERIES {
            if let Some(l) = p.latency.get(k) {
                let _ = writeln!(o, "    {k:<10} {:>10.0} {:>10.0} {:>10.0}", l.p50_us, l.p99_us, l.max_us);
            }
        }
    }
    o
}

//! The run's words: the periodic stats line and the summary text printed at the end (from the
//! stages' latest reports and the [`RunSummary`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use zcpipe_core::frame::Stage;
use zcpipe_core::id::{Role, StageId};
use zcpipe_core::metrics::StageReport;

use super::{
    camera_dropped, camera_lines, Carried, DisplayFacts, InferFacts, PublishFacts, ReconnectFacts, RunSummary,
    ScaleFacts,
};

/// The latest reports, by stage process.
type Latest = BTreeMap<StageId, StageReport>;

/// The report of single stage `stage` (`scale`, `publish`; a single camera's `capture`).
pub(super) fn of(latest: &Latest, stage: impl Into<StageId>) -> Option<&StageReport> {
    latest.get(&stage.into())
}

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

/// Frames dropped in the output ring of `stage` (every camera's, for capture).
fn drops(latest: &Latest, stage: Stage) -> u64 {
    if stage == Stage::Capture {
        return captures(latest).filter_map(|r| r.output_ring).map(|c| c.dropped).sum();
    }
    of(latest, stage).and_then(|r| r.output_ring).map(|c| c.dropped).unwrap_or(0)
}

/// The capture stages' reports: `capture`, or `capture@NAME` of each camera of several.
fn captures(latest: &Latest) -> impl Iterator<Item = &StageReport> {
    latest.iter().filter(|(k, _)| k.is(Stage::Capture)).map(|(_, r)| r)
}

/// The periodic stats lines. Stages report on their own clocks; a line is printed once
/// every live stage has reported since the previous line (or, if one is stuck, after two
/// intervals with at least one new report), so no line repeats stale counts. Its rates are
/// over the frames since the previous line.
#[derive(Default)]
pub(super) struct StatsLines {
    /// Stages that reported since the last line.
    pub(super) fresh: std::collections::BTreeSet<StageId>,
    pub(super) last: Option<Instant>,
    /// Capture's and publish's frame spans at the last line.
    before: BTreeMap<StageId, zcpipe_core::metrics::FrameSpan>,
}

impl StatsLines {
    /// The next line, if one is due now.
    pub(super) fn due(
        &mut self,
        every: Duration,
        live: &[&StageId],
        latest: &Latest,
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
        let mut part = |stage: &StageId| {
            let r = latest.get(stage);
            let span = r.and_then(|r| r.out_span);
            let fps = match (span, self.before.get(stage)) {
                (Some(now), Some(b)) => now.fps_since(b),
                (Some(now), None) => now.fps(),
                (None, _) => r.and_then(fps),
            };
            if let Some(s) = span {
                self.before.insert(stage.clone(), s);
            }
            (r.map(|r| r.frames_out).unwrap_or(0), rate(fps))
        };
        if !cameras.is_empty() {
            // Several cameras: each one's count, rate and drops, then the total.
            let mut per = vec![];
            let (mut total, mut total_fps) = (0, 0.0);
            for n in cameras {
                let stage = StageId::camera(n);
                let (frames, fps) = part(&stage);
                // Over the whole run: a restarted camera's earlier processes too.
                let frames = frames + carried.frames(&stage);
                total += frames;
                total_fps += fps.parse::<f64>().unwrap_or(0.0);
                let dropped = camera_dropped(latest, n);
                per.push(format!("{n} captured {frames} at {fps} fps,{} dropped {dropped}", npu_of_camera(latest, n)));
            }
            let publish = StageId::from(Stage::Publish);
            let (publ, publ_fps) = part(&publish);
            let publ = publ + carried.frames(&publish);
            // The cameras' reports may be older than publish's: they captured at least that.
            let total = total.max(publ);
            let line = stats_line(total, &format!("{total_fps:.1}"), publ, &publ_fps, latest);
            return Some(format!("{line} | cameras: {}", per.join(", ")));
        }
        let (cap, cap_fps) = part(&Stage::Capture.into());
        let (publ, publ_fps) = part(&Stage::Publish.into());
        // Capture's report may be older than publish's: it captured at least what came out.
        let cap = cap.max(publ);
        Some(stats_line(cap, &cap_fps, publ, &publ_fps, latest))
    }
}

/// A camera's NPU part of a stats line: frames inferred, their wait for an engine (p99) and
/// the frames skipped on purpose (by rate, as still, for age); empty before infer reports.
fn npu_of_camera(latest: &Latest, n: &str) -> String {
    let (scale, Some(c)) = camera_lines(latest, n) else { return String::new() };
    let skipped = scale.skipped_rate + scale.skipped_still + c.counts.expired + c.counts.replaced;
    let wait = c.wait_p99_us.map_or_else(|| "-".into(), |us| format!("{:.1}", us / 1000.0));
    format!(" inferred {} (wait p99 {wait} ms), skipped {skipped},", c.counts.inferred)
}

/// The NPU's part of a stats line: each core's busy fraction and the frames the scheduler
/// passed over (by rate, by age), when there is anything to say.
fn npu_part(latest: &Latest) -> String {
    let Some(f) = of(latest, Stage::Infer).map(|r| r.extra.view::<InferFacts>()) else { return String::new() };
    let (rate, still) = of(latest, Stage::Scale).map_or((0, 0), |r| {
        let f = r.extra.view::<ScaleFacts>();
        (f.skipped_rate, f.skipped_still)
    });
    let age: u64 = f.cameras.values().map(|c| c.counts.expired).sum();
    let busy: Vec<String> =
        f.cores.iter().filter(|c| c.core.is_some()).map(|c| format!("{:.0}%", c.busy * 100.0)).collect();
    let mut v = vec![];
    if !busy.is_empty() {
        v.push(format!("npu busy {}", busy.join(" ")));
    }
    if rate + still + age > 0 {
        v.push(format!("skipped rate {rate}, still {still}, age {age}"));
    }
    if let Some(svc) = f.service.as_ref().filter(|s| s.connections > 0) {
        v.push(format!("service: {} clients, {} requests, {} answered", svc.clients, svc.requests, svc.answered));
    }
    if v.is_empty() {
        String::new()
    } else {
        format!(" | {}", v.join(", "))
    }
}

/// The periodic stats line: frames so far, rates since the previous line, drops so far.
fn stats_line(cap: u64, cap_fps: &str, publ: u64, publ_fps: &str, latest: &Latest) -> String {
    format!(
        "stats: capture {cap} frames {cap_fps} fps | published {publ} frames {publ_fps} fps | dropped capture->scale {}, scale->infer {}, infer->publish {}",
        drops(latest, Stage::Capture),
        drops(latest, Stage::Scale),
        drops(latest, Stage::Infer),
    ) + &npu_part(latest)
}

/// The NPU scheduler's table: per camera what ran and what was passed over, and per NPU
/// core how busy it was.
fn scheduler(o: &mut String, s: &RunSummary) {
    let Some(f) = of(&s.stages, Stage::Infer).map(|r| r.extra.view::<InferFacts>()) else { return };
    service(o, &f);
    if f.cameras.values().all(|c| c.counts.admitted == 0) && f.service.as_ref().is_none_or(|s| s.per_client.is_empty())
    {
        return;
    }
    let scale = of(&s.stages, Stage::Scale).map(|r| r.extra.view::<ScaleFacts>()).unwrap_or_default();
    let ms = |v: Option<f64>| v.map(|x| format!("{:.2}", x / 1000.0)).unwrap_or_else(|| "-".into());
    let _ =
        writeln!(o, "  scheduler       weight  inferred  fps  skipped: rate  still   age  newer  wait p50 ms  p99 ms");
    for (name, c) in &f.cameras {
        let one = f.cameras.len() == 1;
        let (by_rate, still) =
            scale.cameras.get(name).map_or(if one { (scale.skipped_rate, scale.skipped_still) } else { (0, 0) }, |c| {
                (c.skipped_rate, c.skipped_still)
            });
        let _ = writeln!(
            o,
            "    {name:<14}{:>6} {:>9} {:>5} {:>13} {:>6} {:>5} {:>6} {:>12} {:>7}",
            c.weight,
            c.counts.inferred,
            rate(c.inferred_fps),
            by_rate,
            still,
            c.counts.expired,
            c.counts.replaced,
            ms(c.wait_p50_us),
            ms(c.wait_p99_us)
        );
    }
    for (name, c) in f.service.iter().flat_map(|s| &s.per_client) {
        let _ = writeln!(
            o,
            "    {name:<14}{:>6} {:>9} {:>5} {:>13} {:>6} {:>5} {:>6} {:>12} {:>7}  (service client: {} busy)",
            c.weight,
            c.inferred,
            rate(c.inferred_fps),
            c.rate,
            "-",
            c.age,
            c.newer,
            ms(c.wait_p50_us),
            ms(c.wait_p99_us),
            c.busy
        );
    }
    let cores: Vec<String> = f
        .cores
        .iter()
        .map(|c| {
            let which = c.core.map_or_else(|| "engine".to_string(), |k| format!("core {k}"));
            format!(
                "{which} {:.1}% busy ({} context{}, {} runs)",
                c.busy * 100.0,
                c.engines,
                if c.engines == 1 { "" } else { "s" },
                c.runs
            )
        })
        .collect();
    if !cores.is_empty() {
        let _ = writeln!(o, "  engines: {}", cores.join(", "));
    }
    if let Some(us) = scale.motion_us {
        let _ =
            writeln!(o, "  motion check (--motion): up to {us:.1} µs per frame checked (the costliest camera's mean)");
    }
}

/// The inference service's line: its socket and what its clients did.
fn service(o: &mut String, f: &InferFacts) {
    let Some(s) = &f.service else { return };
    let _ = writeln!(
        o,
        "  inference service at {}: {} connections ({} refused), {} requests: {} answered, {} busy, {} over their rate, {} replaced by a newer one, {} too old, {} not run (stop, client gone); {} answers lost (client not reading), {} messages refused",
        s.socket,
        s.connections,
        s.refused_peers,
        s.requests,
        s.answered,
        s.busy,
        s.dropped_rate,
        s.dropped_newer,
        s.dropped_age,
        s.dropped_stopping,
        s.answers_lost,
        s.refused_messages
    );
    if s.answered > 0 {
        let _ = writeln!(
            o,
            "  clients' pictures letterboxed ({}): {} by RGA in place (dma-buf to the NPU), {} by RGA by address, {} on the CPU",
            if s.scaler.is_empty() { "cpu" } else { &s.scaler },
            s.rga_in_place,
            s.rga_by_address,
            s.cpu_letterbox
        );
    }
}

/// The stage processes of a run, in pipeline order: its exit codes' ids (every process
/// started), else the four stages.
fn stage_ids(s: &RunSummary) -> Vec<StageId> {
    if s.exit_codes.is_empty() {
        return Stage::ALL.iter().map(|st| StageId::from(*st)).collect();
    }
    let order = |id: &StageId| match id.role {
        Role::Stage(st) => st as usize,
        Role::Display => Stage::ALL.len(),
        Role::Record => Stage::ALL.len() + 1,
    };
    let mut v: Vec<StageId> = s.exit_codes.keys().cloned().collect();
    v.sort_by_key(order);
    v
}

/// The end-of-run summary, as printed on stderr.
pub fn summary_text(s: &RunSummary) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "zcpipe summary ({:.1} s):", s.elapsed_s);
    frames_and_rings(&mut o, s);
    if let (Some(c), Some(p)) = (of(&s.stages, Stage::Capture), of(&s.stages, Stage::Publish)) {
        let _ = writeln!(o, "  fps: captured {}, published {} (first to last frame)", rate(fps(c)), rate(fps(p)));
    }
    if let Some(line) = of(&s.stages, Role::Display).and_then(|r| r.extra.view::<DisplayFacts>().summary_line()) {
        let _ = writeln!(o, "{line}");
    }
    if let Some(line) =
        of(&s.stages, Role::Record).and_then(|r| r.extra.view::<zcpipe_record::report::RecordFacts>().summary_line())
    {
        let _ = writeln!(o, "{line}");
    }
    // Each part of the publish stage (its clients, each output) writes its own line.
    for line in
        of(&s.stages, Stage::Publish).map(|p| p.extra.view::<PublishFacts>().summary_lines()).unwrap_or_default()
    {
        let _ = writeln!(o, "{line}");
    }
    copies(&mut o, s);
    scheduler(&mut o, s);
    processes(&mut o, s);
    if !s.cameras.is_empty() {
        cameras(&mut o, s);
    }
    if let Some(p) = of(&s.stages, Stage::Publish) {
        let _ = writeln!(o, "  latency (µs)        p50        p99        max");
        for k in zcpipe_core::metrics::SERIES {
            if let Some(l) = p.latency.get(k) {
                let _ = writeln!(o, "    {k:<10} {:>10.0} {:>10.0} {:>10.0}", l.p50_us, l.p99_us, l.max_us);
            }
        }
    }
    o
}

/// The summary's frame counts and each ring's counters (one per camera of several).
fn frames_and_rings(o: &mut String, s: &RunSummary) {
    let get = |st: Stage| of(&s.stages, st);
    let _ = writeln!(
        o,
        "  frames: captured {}, scaled {}, inferred {}, published {}",
        captures(&s.stages).map(|r| r.frames_out).sum::<u64>(),
        get(Stage::Scale).map(|r| r.frames_out).unwrap_or(0),
        get(Stage::Infer).map(|r| r.frames_out).unwrap_or(0),
        get(Stage::Publish).map(|r| r.frames_out).unwrap_or(0),
    );
    let cams: Vec<(StageId, String)> =
        s.stages.keys().filter_map(|k| k.camera.as_ref().map(|n| (k.clone(), format!("{n}->scale")))).collect();
    let rings = cams.into_iter().chain([
        (Stage::Capture.into(), "capture->scale".to_string()),
        (Stage::Scale.into(), "scale->infer".to_string()),
        (Stage::Infer.into(), "infer->publish".to_string()),
    ]);
    for (stage, name) in rings {
        if let Some(c) = s.stages.get(&stage).and_then(|r| r.output_ring) {
            let _ = writeln!(
                o,
                "  ring {name:<15} produced {:>6}  consumed {:>6}  dropped {:>6}  rejected {}  in flight {}",
                c.produced, c.consumed, c.dropped, c.rejected, c.in_flight
            );
        }
    }
}

/// The bytes copied at each hop (`--copy-mode`; several cameras' capture stages together).
fn copies(o: &mut String, s: &RunSummary) {
    for (up, down, name) in
        [(Stage::Capture, Stage::Scale, "capture->scale"), (Stage::Scale, Stage::Infer, "scale->infer")]
    {
        let u = if up == Stage::Capture {
            captures(&s.stages).filter_map(|r| r.copy_out).reduce(zcpipe_core::copy::CopyCounters::plus)
        } else {
            of(&s.stages, up).and_then(|r| r.copy_out)
        };
        let d = of(&s.stages, down).and_then(|r| r.copy_in);
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
}

/// Each process's CPU time and memory, the cameras that reconnected, the restarts and
/// the processes that sent no final report.
fn processes(o: &mut String, s: &RunSummary) {
    let ids = stage_ids(s);
    let cpu: Vec<String> = ids
        .iter()
        .filter_map(|st| {
            let r = s.stages.get(st)?;
            let p = r.process?;
            let n = r.frames_in.max(1);
            Some(format!("{st} {:.0} µs/frame {} MiB", (p.user_us + p.system_us) as f64 / n as f64, p.pss_kib / 1024))
        })
        .collect();
    if !cpu.is_empty() {
        let _ = writeln!(o, "  cpu and Pss: {}", cpu.join(", "));
    }
    // Network cameras that dropped and came back (the capture stage kept running).
    for (stage, r) in s.stages.iter().filter(|(k, _)| k.is(Stage::Capture)) {
        let who = stage.camera.as_ref().map(|c| format!("camera {c}")).unwrap_or_else(|| "the camera".into());
        if let Some(line) = r.extra.view::<ReconnectFacts>().summary_line(&who) {
            let _ = writeln!(o, "{line}");
        }
    }
    if !s.restarts.is_empty() {
        let r: Vec<String> = s.restarts.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ =
            writeln!(o, "  restarts: {} (each restarted alone; the counts above are the last process's)", r.join(", "));
    }
    let unreported: Vec<String> =
        ids.iter().filter(|n| !s.stages.get(n).is_some_and(|r| r.final_report)).map(|n| n.to_string()).collect();
    if !unreported.is_empty() {
        let _ = writeln!(
            o,
            "  no final report from: {} (the counts above are their last periodic ones, if any)",
            unreported.join(", ")
        );
    }
}

/// The table of cameras (several cameras), with their total.
fn cameras(o: &mut String, s: &RunSummary) {
    let _ = writeln!(o, "  camera          captured  dropped  published  fps in  fps out  p50 ms  p99 ms  restarts");
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

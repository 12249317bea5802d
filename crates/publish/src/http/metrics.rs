//! `/metrics`: the view's counters in the Prometheus text exposition format, version 0.0.4
//! (Prometheus' "Exposition formats" document: a `# HELP` and a `# TYPE` line per metric
//! family, then one `name{label="value",...} value` line per series; a histogram is its
//! cumulative `_bucket{le="..."}` series ending in `le="+Inf"`, then `_sum` and `_count`).
//!
//! Counters start at 0 when the publish stage starts (a restarted publish stage is a counter
//! reset, which Prometheus' `rate()` handles).

use std::fmt::Write as _;

use super::stats::{Buckets, Stats, LATENCY_BUCKETS_S};
use zcpipe_core::metrics::SERIES;

/// The `Content-Type` of `/metrics`.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The server's own counters shown beside the stream's.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ServerCounts {
    /// Clients of `/api/detections` now.
    pub(crate) sse_clients: u64,
    /// Clients of `/stream/<camera>.mjpg` now.
    pub(crate) mjpeg_clients: u64,
    /// Lines dropped for SSE clients that did not keep up (oldest first).
    pub(crate) sse_dropped: u64,
    /// Requests answered.
    pub requests: u64,
}

/// A label value escaped as the format wants: `\` as `\\`, `"` as `\"`, a newline as `\n`.
pub fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn family(o: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(o, "# HELP {name} {help}");
    let _ = writeln!(o, "# TYPE {name} {kind}");
}

/// One histogram's series: cumulative `_bucket`s ending in `+Inf`, `_sum`, `_count`.
fn histogram(o: &mut String, name: &str, labels: &str, b: &Buckets) {
    let mut cumulative = 0;
    for (le, n) in LATENCY_BUCKETS_S.iter().zip(&b.counts) {
        cumulative += n;
        let _ = writeln!(o, "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
    }
    let _ = writeln!(o, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", b.count);
    let _ = writeln!(o, "{name}_sum{{{labels}}} {}", b.sum);
    let _ = writeln!(o, "{name}_count{{{labels}}} {}", b.count);
}

/// The inference service's families, appended to `o` (from its numbers, asked at this
/// scrape): totals, and per connected client (a client's counters start when it connects).
pub fn service(o: &mut String, st: &zcpipe_core::service::ServiceStats) {
    family(o, "zcpipe_service_clients", "gauge", "Clients of the inference service connected now.");
    let _ = writeln!(o, "zcpipe_service_clients {}", st.clients);
    family(o, "zcpipe_service_connections_total", "counter", "Connections the inference service accepted.");
    let _ = writeln!(o, "zcpipe_service_connections_total {}", st.connections);
    family(
        o,
        "zcpipe_service_refused_total",
        "counter",
        "Peers (another user, too many) and messages the inference service refused.",
    );
    let _ = writeln!(o, "zcpipe_service_refused_total{{what=\"peer\"}} {}", st.refused_peers);
    let _ = writeln!(o, "zcpipe_service_refused_total{{what=\"message\"}} {}", st.refused_messages);
    family(
        o,
        "zcpipe_service_letterbox_total",
        "counter",
        "Clients' pictures brought to the model's input: by RGA in place (a dma-buf into the NPU's input), by RGA by address, on the CPU.",
    );
    for (path, n) in
        [("rga-in-place", st.rga_in_place), ("rga-by-address", st.rga_by_address), ("cpu", st.cpu_letterbox)]
    {
        let _ = writeln!(o, "zcpipe_service_letterbox_total{{path=\"{path}\"}} {n}");
    }
    family(
        o,
        "zcpipe_service_requests_total",
        "counter",
        "A connected client's requests by fate: inferred, or not (newer: replaced by its newer video request; age: older than --max-age; rate: over its detect_fps; busy: its queue was full).",
    );
    for (name, c) in &st.per_client {
        let n = escape(name);
        for (result, v) in
            [("inferred", c.inferred), ("newer", c.newer), ("age", c.age), ("rate", c.rate), ("busy", c.busy)]
        {
            let _ = writeln!(o, "zcpipe_service_requests_total{{client=\"{n}\",result=\"{result}\"}} {v}");
        }
    }
    family(
        o,
        "zcpipe_service_answers_lost_total",
        "counter",
        "Answers a connected client did not read in time (dropped, never buffered).",
    );
    for (name, c) in &st.per_client {
        let _ = writeln!(o, "zcpipe_service_answers_lost_total{{client=\"{}\"}} {}", escape(name), c.answers_lost);
    }
    family(o, "zcpipe_service_inferred_fps", "gauge", "A connected client's requests run per second.");
    for (name, c) in &st.per_client {
        let _ =
            writeln!(o, "zcpipe_service_inferred_fps{{client=\"{}\"}} {}", escape(name), c.inferred_fps.unwrap_or(0.0));
    }
    family(
        o,
        "zcpipe_service_wait_seconds",
        "gauge",
        "A connected client's requests' wait for an NPU engine, median and 99th percentile.",
    );
    for (name, c) in &st.per_client {
        for (q, v) in [("0.5", c.wait_p50_us), ("0.99", c.wait_p99_us)] {
            if let Some(us) = v {
                let _ = writeln!(
                    o,
                    "zcpipe_service_wait_seconds{{client=\"{}\",quantile=\"{q}\"}} {}",
                    escape(name),
                    us / 1e6
                );
            }
        }
    }
}

/// The recorder's families, appended to `o` (read from the record folder's index at this
/// scrape): each camera's clips in the folder and their bytes, and the recorder's counters
/// since it started.
pub fn recording(o: &mut String, ix: &zcpipe_clips::Index) -> anyhow::Result<()> {
    let totals = ix.totals_by_camera()?;
    let stats = ix.camera_stats()?;
    family(
        o,
        "zcpipe_clips",
        "gauge",
        "Recorded clips in the record folder now, per camera and kind (event, segment).",
    );
    for (camera, k, n, _) in &totals {
        let _ = writeln!(o, "zcpipe_clips{{camera=\"{}\",kind=\"{}\"}} {n}", escape(camera), k.name());
    }
    family(
        o,
        "zcpipe_clip_bytes",
        "gauge",
        "Bytes of the recorded clips in the record folder now, per camera and kind.",
    );
    for (camera, k, _, bytes) in &totals {
        let _ = writeln!(o, "zcpipe_clip_bytes{{camera=\"{}\",kind=\"{}\"}} {bytes}", escape(camera), k.name());
    }
    for (name, help, get) in [
        (
            "zcpipe_record_units_total",
            "Access units (pictures) the recorder received, per camera.",
            (|c: &zcpipe_clips::CameraStats| c.units) as fn(&zcpipe_clips::CameraStats) -> u64,
        ),
        (
            "zcpipe_record_gaps_total",
            "Units the capture stage dropped before the recorder took them, per camera.",
            |c| c.gaps,
        ),
        (
            "zcpipe_record_dropped_units_total",
            "Units a clip dropped because ffmpeg or the disk was too slow, per camera.",
            |c| c.drops,
        ),
    ] {
        family(o, name, "counter", help);
        for c in &stats {
            let _ = writeln!(o, "{name}{{camera=\"{}\"}} {}", escape(&c.camera), get(c));
        }
    }
    Ok(())
}

/// What masks, filters and lines counted, per camera: `zcpipe_dropped_detections_total`
/// and `zcpipe_line_crossings_total` (from the latest frame line's counts).
fn analytics(o: &mut String, s: &Stats) {
    family(
        o,
        "zcpipe_dropped_detections_total",
        "counter",
        "Detections dropped before tracking, per camera and reason: mask (--mask), filter (--filter).",
    );
    for c in &s.cameras {
        for (reason, n) in [("mask", c.masked), ("filter", c.filtered)] {
            let _ = writeln!(
                o,
                "zcpipe_dropped_detections_total{{camera=\"{}\",reason=\"{reason}\"}} {n}",
                escape(&c.name)
            );
        }
    }
    family(
        o,
        "zcpipe_line_crossings_total",
        "counter",
        "Tracked objects that crossed a line (--line) since the run started, per camera, line, label and direction.",
    );
    for c in &s.cameras {
        let Some(lines) = c.latest.as_ref().and_then(|f| f.lines.as_ref()) else { continue };
        for (line, labels) in lines {
            for (label, n) in labels {
                for (dir, v) in [("in", n.into), ("out", n.out)] {
                    let _ = writeln!(
                        o,
                        "zcpipe_line_crossings_total{{camera=\"{}\",line=\"{}\",label=\"{}\",direction=\"{dir}\"}} {v}",
                        escape(&c.name),
                        escape(line),
                        escape(label)
                    );
                }
            }
        }
    }
}

/// The whole `/metrics` text.
pub fn render(s: &Stats, server: &ServerCounts) -> String {
    let mut o = String::new();
    family(&mut o, "zcpipe_frames_total", "counter", "Frames published, per camera.");
    for c in &s.cameras {
        let _ = writeln!(o, "zcpipe_frames_total{{camera=\"{}\"}} {}", escape(&c.name), c.frames);
    }
    family(
        &mut o,
        "zcpipe_dropped_frames_total",
        "counter",
        "Frames captured that never reached publish (gaps in the capture sequence numbers, less the frames skipped on purpose), per camera.",
    );
    for c in &s.cameras {
        let _ = writeln!(o, "zcpipe_dropped_frames_total{{camera=\"{}\"}} {}", escape(&c.name), c.drops);
    }
    family(
        &mut o,
        "zcpipe_skipped_frames_total",
        "counter",
        "Frames passed over on purpose, per camera and reason: rate (--detect-fps), still (--motion), age (waited past --max-age for the NPU), newer (replaced by a newer frame while waiting).",
    );
    for c in &s.cameras {
        for (reason, n) in
            [("rate", c.skipped.rate), ("still", c.skipped.still), ("age", c.skipped.age), ("newer", c.skipped.newer)]
        {
            let _ =
                writeln!(o, "zcpipe_skipped_frames_total{{camera=\"{}\",reason=\"{reason}\"}} {n}", escape(&c.name));
        }
    }
    family(&mut o, "zcpipe_events_total", "counter", "Tracking events published, per camera.");
    for c in &s.cameras {
        let _ = writeln!(o, "zcpipe_events_total{{camera=\"{}\"}} {}", escape(&c.name), c.events);
    }
    analytics(&mut o, s);
    family(
        &mut o,
        "zcpipe_fps",
        "gauge",
        "Frames per second published over the last 30 frames, per camera (0 when none came for 2 s).",
    );
    for c in &s.cameras {
        let _ = writeln!(o, "zcpipe_fps{{camera=\"{}\"}} {:.3}", escape(&c.name), c.fps());
    }
    family(
        &mut o,
        "zcpipe_stage_restarts_total",
        "counter",
        "Times a stage of the pipeline died and was restarted, from the restart notices.",
    );
    for (stage, n) in &s.restarts {
        let _ = writeln!(o, "zcpipe_stage_restarts_total{{stage=\"{}\"}} {n}", escape(stage));
    }
    family(
        &mut o,
        "zcpipe_config_changes_total",
        "counter",
        "Changes made to the running pipeline (zcpipe ctl, a reload), from the config_changed notices.",
    );
    let _ = writeln!(o, "zcpipe_config_changes_total {}", s.config_changes);
    family(&mut o, "zcpipe_latency_seconds", "histogram", "Latency of each stage (from the previous stage's exit, its input wait included) and in total (from capture), per camera.");
    for c in &s.cameras {
        for (series, b) in SERIES.iter().zip(&c.buckets) {
            let labels = format!("stage=\"{series}\",camera=\"{}\"", escape(&c.name));
            histogram(&mut o, "zcpipe_latency_seconds", &labels, b);
        }
    }
    family(
        &mut o,
        "zcpipe_npu_wait_seconds",
        "histogram",
        "Time a frame waited in the infer stage for an NPU engine (the scheduler's queue), per camera.",
    );
    for c in &s.cameras {
        histogram(&mut o, "zcpipe_npu_wait_seconds", &format!("camera=\"{}\"", escape(&c.name)), &c.npu_wait);
    }
    family(
        &mut o,
        "zcpipe_npu_busy_seconds_total",
        "counter",
        "Time each NPU core had a frame running (rate() of it is the core's busy fraction), per core in use.",
    );
    for (core, us) in s.npu_busy_us.iter().enumerate().filter(|(_, us)| **us > 0) {
        let _ = writeln!(o, "zcpipe_npu_busy_seconds_total{{core=\"{core}\"}} {}", *us as f64 / 1e6);
    }
    family(&mut o, "zcpipe_http_clients", "gauge", "Web view clients connected now, by endpoint kind.");
    let _ = writeln!(o, "zcpipe_http_clients{{kind=\"sse\"}} {}", server.sse_clients);
    let _ = writeln!(o, "zcpipe_http_clients{{kind=\"mjpeg\"}} {}", server.mjpeg_clients);
    family(
        &mut o,
        "zcpipe_http_sse_dropped_lines_total",
        "counter",
        "Lines dropped for /api/detections clients that did not keep up.",
    );
    let _ = writeln!(o, "zcpipe_http_sse_dropped_lines_total {}", server.sse_dropped);
    family(&mut o, "zcpipe_http_requests_total", "counter", "HTTP requests answered by the web view.");
    let _ = writeln!(o, "zcpipe_http_requests_total {}", server.requests);
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use zcpipe_core::schema::{NoticeJson, SocketLine};

    #[test]
    fn line_crossings_and_dropped_detections_are_counted() {
        use zcpipe_core::schema::{CrossingsJson, DroppedJson};
        let mut s = Stats::new(&["cam0".into()]);
        for (seq, masked) in [(0, 2), (1, 1)] {
            let SocketLine::Frame(mut f) = super::super::stats::tests_support::frame("cam0", seq, 1000.0) else {
                unreachable!()
            };
            f.dropped = Some(DroppedJson { masked, filtered: 1 });
            f.lines = Some(
                [("exit".to_string(), [("person".to_string(), CrossingsJson { into: seq, out: 4 })].into())].into(),
            );
            s.line(&SocketLine::Frame(f));
        }
        let t = render(&s, &ServerCounts::default());
        for l in [
            "# TYPE zcpipe_line_crossings_total counter",
            "zcpipe_line_crossings_total{camera=\"cam0\",line=\"exit\",label=\"person\",direction=\"in\"} 1",
            "zcpipe_line_crossings_total{camera=\"cam0\",line=\"exit\",label=\"person\",direction=\"out\"} 4",
            "zcpipe_dropped_detections_total{camera=\"cam0\",reason=\"mask\"} 3",
            "zcpipe_dropped_detections_total{camera=\"cam0\",reason=\"filter\"} 2",
        ] {
            assert!(t.lines().any(|x| x == l), "{l} in:\n{t}");
        }
    }

    #[test]
    fn the_text_has_every_family_and_cumulative_buckets() {
        let mut s = Stats::new(&["cam0".into(), "door \"b\"".into()]);
        for (seq, total) in [(0, 3000.0), (1, 3000.0), (3, 70_000.0)] {
            s.line(&super::super::stats::tests_support::frame("cam0", seq, total));
        }
        s.line(&SocketLine::Notice(NoticeJson {
            stage: "scale".into(),
            camera: String::new(),
            event: "restarted".into(),
            frames_lost: 2,
            seq: 3,
            gap_s: None,
            change: None,
        }));
        let t = render(&s, &ServerCounts { sse_clients: 1, mjpeg_clients: 2, sse_dropped: 0, requests: 9 });
        for l in [
            "# TYPE zcpipe_frames_total counter",
            "zcpipe_frames_total{camera=\"cam0\"} 3",
            "zcpipe_frames_total{camera=\"door \\\"b\\\"\"} 0",
            "zcpipe_dropped_frames_total{camera=\"cam0\"} 1",
            "zcpipe_stage_restarts_total{stage=\"scale\"} 1",
            "zcpipe_stage_restarts_total{stage=\"capture\"} 0",
            "# TYPE zcpipe_latency_seconds histogram",
            "zcpipe_latency_seconds_bucket{stage=\"total\",camera=\"cam0\",le=\"0.0025\"} 0",
            "zcpipe_latency_seconds_bucket{stage=\"total\",camera=\"cam0\",le=\"0.005\"} 2",
            "zcpipe_latency_seconds_bucket{stage=\"total\",camera=\"cam0\",le=\"0.1\"} 3",
            "zcpipe_latency_seconds_bucket{stage=\"total\",camera=\"cam0\",le=\"+Inf\"} 3",
            "zcpipe_latency_seconds_count{stage=\"total\",camera=\"cam0\"} 3",
            "zcpipe_http_clients{kind=\"mjpeg\"} 2",
            "zcpipe_http_requests_total 9",
        ] {
            assert!(t.lines().any(|x| x == l), "{l} in:\n{t}");
        }
        assert!(t.ends_with('\n'));
        let mut svc = String::new();
        let mut st = zcpipe_core::service::ServiceStats {
            clients: 1,
            connections: 3,
            refused_peers: 1,
            rga_in_place: 5,
            ..Default::default()
        };
        st.per_client.insert(
            "robot pid 7".into(),
            zcpipe_core::service::ClientStats {
                inferred: 40,
                busy: 2,
                wait_p50_us: Some(1500.0),
                ..Default::default()
            },
        );
        service(&mut svc, &st);
        for l in [
            "zcpipe_service_clients 1",
            "zcpipe_service_refused_total{what=\"peer\"} 1",
            "zcpipe_service_letterbox_total{path=\"rga-in-place\"} 5",
            "zcpipe_service_letterbox_total{path=\"cpu\"} 0",
            "zcpipe_service_requests_total{client=\"robot pid 7\",result=\"inferred\"} 40",
            "zcpipe_service_requests_total{client=\"robot pid 7\",result=\"busy\"} 2",
            "zcpipe_service_wait_seconds{client=\"robot pid 7\",quantile=\"0.5\"} 0.0015",
        ] {
            assert!(svc.lines().any(|x| x == l), "{l} in:\n{svc}");
        }
        let sum: f64 = t
            .lines()
            .find_map(|l| l.strip_prefix("zcpipe_latency_seconds_sum{stage=\"total\",camera=\"cam0\"} "))
            .unwrap()
            .parse()
            .unwrap();
        assert!((sum - 0.076).abs() < 1e-12, "{sum}");
        // Every sample line's metric has had its TYPE line before it.
        let mut typed = vec![];
        for l in t.lines() {
            if let Some(rest) = l.strip_prefix("# TYPE ") {
                typed.push(rest.split(' ').next().unwrap().to_string());
            } else if !l.starts_with('#') {
                let name = l.split(['{', ' ']).next().unwrap();
                assert!(
                    typed.iter().any(|f| name == f
                        || name.strip_prefix(f.as_str()).is_some_and(|s| ["_bucket", "_sum", "_count"].contains(&s))),
                    "{l}"
                );
            }
        }
    }
}

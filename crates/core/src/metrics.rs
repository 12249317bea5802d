//! Measurement: per-stage latency histograms, stage reports and the run summary.
//!
//! Every stage stamps frames on entry and exit (CLOCK_MONOTONIC ns, [`crate::frame`]).
//! Latency of a stage is the time from the previous stage's exit to its own exit (so it
//! includes waiting in its input ring), and the stages add up to the end-to-end total:
//! `capture = capture_out - timestamp`, `scale = scale_out - capture_out`, ...,
//! `total = publish_out - timestamp`. Histograms are hdrhistogram, in µs.
//!
//! Stages send [`StageReport`] JSON lines to the supervisor on `--report-fd` every
//! `--stats-interval` seconds and once at exit.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::fd::{FromRawFd, RawFd};
use std::sync::Mutex;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::frame::{Stage, StageStamps};
use crate::pool::PoolStats;
use crate::ring::RingCounters;

/// Names of the latency series, in order: the four stages, then `total`.
pub const SERIES: [&str; 5] = ["capture", "scale", "infer", "publish", "total"];

/// Per-stage and end-to-end latency of one frame in µs, from its stamps; `None` where a
/// stamp is missing.
pub fn latencies_us(timestamp_ns: u64, s: &StageStamps) -> [Option<f64>; 5] {
    let out = |st: Stage| s[2 * st as usize + 1];
    let d = |a: u64, b: u64| if a != 0 && b >= a { Some((b - a) as f64 / 1000.0) } else { None };
    [
        d(timestamp_ns, out(Stage::Capture)),
        d(out(Stage::Capture), out(Stage::Scale)),
        d(out(Stage::Scale), out(Stage::Infer)),
        d(out(Stage::Infer), out(Stage::Publish)),
        d(timestamp_ns, out(Stage::Publish)),
    ]
}

/// p50 / p99 / max of one series, in µs, and how many samples.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct LatencySummary {
    /// Samples recorded.
    pub count: u64,
    /// Median, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// Maximum, µs.
    pub max_us: f64,
    /// Mean, µs.
    pub mean_us: f64,
}

/// One hdrhistogram per series (1 µs .. 60 s, 3 significant digits).
pub struct LatencySet {
    hists: Vec<Histogram<u64>>,
}

impl Default for LatencySet {
    fn default() -> Self {
        LatencySet {
            hists: SERIES
                .iter()
                .map(|_| Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds"))
                .collect(),
        }
    }
}

impl LatencySet {
    /// Records one frame's latencies (µs).
    pub fn record(&mut self, l: &[Option<f64>; 5]) {
        for (h, v) in self.hists.iter_mut().zip(l) {
            if let Some(v) = v {
                h.saturating_record((v.round() as u64).max(1));
            }
        }
    }
    /// Summaries keyed by series name.
    pub fn summary(&self) -> BTreeMap<String, LatencySummary> {
        SERIES
            .iter()
            .zip(&self.hists)
            .filter(|(_, h)| !h.is_empty())
            .map(|(n, h)| {
                (
                    n.to_string(),
                    LatencySummary {
                        count: h.len(),
                        p50_us: h.value_at_quantile(0.5) as f64,
                        p99_us: h.value_at_quantile(0.99) as f64,
                        max_us: h.max() as f64,
                        mean_us: h.mean(),
                    },
                )
            })
            .collect()
    }
}

/// What a stage tells the supervisor (one JSON line, one message on its report socket), and what a run's
/// summary keeps of each stage. Fields a sender left out read as their defaults.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StageReport {
    /// Which process sent it (`capture`, `capture@front`, ..., `display` in the JSON).
    pub stage: crate::id::StageId,
    /// Process id.
    pub pid: u32,
    /// Last report before exit.
    pub final_report: bool,
    /// Seconds since the stage started its main loop.
    pub elapsed_s: f64,
    /// Frames taken from the input ring (or produced by the source, for capture).
    pub frames_in: u64,
    /// Frames handed to the output ring (or to clients, for publish).
    pub frames_out: u64,
    /// Counters of the ring this stage produces into.
    pub output_ring: Option<RingCounters>,
    /// Buffer traffic of this stage's pool.
    pub pool: Option<PoolStats>,
    /// Latency summaries (publish only: it sees every stage's stamps).
    pub latency: BTreeMap<String, LatencySummary>,
    /// Stage-specific facts (`end_reason`, `open_fds_setup`, `open_fds_exit`,
    /// `buffers_returned_at_end`, a camera's `driver_drops`, ...): written from the stage's
    /// typed report structs and read back as them ([`Facts`]).
    pub extra: Facts,
    /// Copy-mode counters of the output hop (`None`: zero-copy, nothing copied).
    #[serde(default)]
    pub copy_out: Option<crate::copy::CopyCounters>,
    /// Copy-mode counters of the input hop.
    #[serde(default)]
    pub copy_in: Option<crate::copy::CopyCounters>,
    /// CPU time, context switches and memory of the stage process (filled by [`Reporter`]).
    #[serde(default)]
    pub process: Option<ProcessStats>,
    /// When the frames counted in `frames_out` went out (for [`FrameSpan::fps`]).
    #[serde(default)]
    pub out_span: Option<FrameSpan>,
}

/// A stage's own facts, the `extra` object of its report: each stage writes its typed report
/// structs into it ([`Facts::put`]) and the supervisor reads them back as the same types
/// ([`Facts::view`]), never by key. On the wire and in the summary JSON it is one flat object
/// (the fields of every struct put, side by side), so a consumer of the JSON sees the same keys.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(transparent)]
pub struct Facts(serde_json::Map<String, serde_json::Value>);

impl Facts {
    /// Adds the fields of `facts` (a struct that serializes to an object; anything else is
    /// ignored), replacing facts of the same name.
    pub fn put<T: Serialize>(&mut self, facts: &T) {
        match serde_json::to_value(facts) {
            Ok(serde_json::Value::Object(m)) => self.0.extend(m),
            Ok(_) => log::debug!("report facts that are not an object are left out"),
            Err(e) => log::warn!("report facts: {e}"),
        }
    }

    /// The facts read back as `T` (a struct whose fields default, so facts a stage did not
    /// send read as their defaults, and facts `T` does not name are ignored); `T::default()`
    /// if they do not fit `T`.
    pub fn view<T: serde::de::DeserializeOwned + Default>(&self) -> T {
        T::deserialize(serde_json::Value::Object(self.0.clone())).unwrap_or_default()
    }

    /// Whether there are no facts.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds every fact of `other`, replacing facts of the same name.
    pub fn extend_from(&mut self, other: Facts) {
        self.0.extend(other.0);
    }

    /// Adds one untyped fact (a stage's own counter no other process reads).
    pub fn push(&mut self, (key, value): (&'static str, serde_json::Value)) {
        self.0.insert(key.to_string(), value);
    }
}

impl Extend<(&'static str, serde_json::Value)> for Facts {
    fn extend<I: IntoIterator<Item = (&'static str, serde_json::Value)>>(&mut self, pairs: I) {
        self.0.extend(pairs.into_iter().map(|(k, v)| (k.to_string(), v)));
    }
}

impl From<crate::stage::Extras> for Facts {
    fn from(pairs: crate::stage::Extras) -> Facts {
        Facts(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
    }
}

/// The facts every stage reports at its end ([`crate::stage::StageCtx::close`]).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub(crate) struct EndFacts {
    /// Open file descriptors after set-up.
    pub open_fds_setup: usize,
    /// Open file descriptors before exit.
    pub open_fds_exit: usize,
    /// Why the frame loop ended (`"end of stream"`, `"signal"`, an error).
    pub end_reason: String,
    /// CPU accesses to dma-bufs ([`crate::dmabuf::cpu_accesses`]).
    pub cpu_accesses: u64,
}

/// When a stage's first and last frames went out, in seconds since the stage's `start`: the
/// frame rate over that span does not depend on set-up time, nor on when a report is sent
/// (N frames span N-1 intervals).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct FrameSpan {
    /// Frames that went out.
    pub frames: u64,
    /// When the first went out, s since `start`.
    pub first_s: f64,
    /// When the last went out, s since `start`.
    pub last_s: f64,
}

impl FrameSpan {
    /// Counts one frame going out now.
    pub fn tick(&mut self, start: std::time::Instant) {
        let t = start.elapsed().as_secs_f64();
        if self.frames == 0 {
            self.first_s = t;
        }
        self.last_s = t;
        self.frames += 1;
    }

    /// Frames per second between the first and the last frame: `(frames - 1) / (last - first)`;
    /// `None` for fewer than 2 frames.
    pub fn fps(&self) -> Option<f64> {
        let span = self.last_s - self.first_s;
        (self.frames >= 2 && span > 0.0).then(|| (self.frames - 1) as f64 / span)
    }

    /// Frames per second between an earlier snapshot of this span and now (for the periodic
    /// stats line); `None` if no frame went out in between.
    pub fn fps_since(&self, before: &FrameSpan) -> Option<f64> {
        if before.frames == 0 {
            return self.fps();
        }
        let span = self.last_s - before.last_s;
        (self.frames > before.frames && span > 0.0).then(|| (self.frames - before.frames) as f64 / span)
    }
}

/// Resource use of one process: getrusage(2) `RUSAGE_SELF` and /proc/self/smaps_rollup
/// (proc(5)).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ProcessStats {
    /// User CPU time, µs.
    pub user_us: u64,
    /// System CPU time, µs.
    pub system_us: u64,
    /// Voluntary context switches (waits).
    pub voluntary_ctx: u64,
    /// Involuntary context switches (preemptions).
    pub involuntary_ctx: u64,
    /// Resident set size, KiB.
    pub rss_kib: u64,
    /// Proportional set size (shared pages divided among their users), KiB.
    pub pss_kib: u64,
}

/// This process's CPU time so far, user + system, µs (getrusage(2) alone; 0 if it fails).
pub fn cpu_us() -> u64 {
    let p = process_stats_rusage();
    p.user_us + p.system_us
}

/// Reads this process's [`ProcessStats`].
pub(crate) fn process_stats() -> ProcessStats {
    let mut st = process_stats_rusage();
    if let Ok(text) = std::fs::read_to_string("/proc/self/smaps_rollup") {
        for line in text.lines() {
            let mut it = line.split_whitespace();
            let (k, v) = (it.next(), it.next().and_then(|v| v.parse::<u64>().ok()));
            match (k, v) {
                (Some("Rss:"), Some(v)) => st.rss_kib = v,
                (Some("Pss:"), Some(v)) => st.pss_kib = v,
                _ => {}
            }
        }
    }
    st
}

/// The getrusage(2) part of [`ProcessStats`]: CPU times and context switches.
fn process_stats_rusage() -> ProcessStats {
    let mut st = ProcessStats::default();
    if let Ok(u) = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF) {
        let us = |t: nix::sys::time::TimeVal| t.tv_sec() as u64 * 1_000_000 + t.tv_usec() as u64;
        st.user_us = us(u.user_time());
        st.system_us = us(u.system_time());
        st.voluntary_ctx = u.voluntary_context_switches() as u64;
        st.involuntary_ctx = u.involuntary_context_switches() as u64;
    }
    st
}

/// Where reports go: a socket inherited from the supervisor, or nowhere.
pub struct Reporter {
    out: Option<Mutex<std::fs::File>>,
}

impl Reporter {
    /// Reports to `fd` (inherited from `zcpipe run`), or only to the debug log if `None`.
    pub fn new(fd: Option<RawFd>) -> Reporter {
        let out = fd.and_then(|fd| {
            // Keep it out of our own children (e.g. ffmpeg), or the supervisor never sees EOF.
            if fd <= 2 || nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC)).is_err()
            {
                log::warn!("--report-fd {fd} is not an open descriptor we may own; reports go to the debug log only");
                return None;
            }
            // SAFETY: `--report-fd` names a socket the supervisor placed in our fd table for us
            // to own (checked open above, and not stdio); nothing else here uses that number.
            Some(Mutex::new(unsafe { std::fs::File::from_raw_fd(fd) }))
        });
        Reporter { out }
    }

    /// Sends one report (a JSON line). Failures are logged, never fatal.
    pub fn send(&self, r: &StageReport) {
        let mut r = r.clone();
        r.process = Some(process_stats());
        let mut line = match serde_json::to_string(&r) {
            Ok(l) => l,
            Err(e) => return log::warn!("report: {e}"),
        };
        log::debug!("report {line}");
        line.push('\n');
        if let Some(m) = &self.out {
            let mut f = m.lock().unwrap_or_else(|p| p.into_inner());
            // The supervisor's report channel is a SOCK_SEQPACKET socket: one write(2) is one
            // message, whole, however long, so the stages sharing it never interleave.
            if let Err(e) = f.write_all(line.as_bytes()) {
                log::debug!("report socket: {e}");
            }
        }
    }
}

/// Sorts `v` in place (ascending, by `f64::total_cmp`) and returns its median: the middle
/// value, or the mean of the two middle ones; 0 for an empty slice. Used by `zcpipe compare`
/// (medians over rounds) and `zcpipe bench ipc` (over round trips and runs).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Number of open file descriptors of this process (entries of /proc/self/fd, minus the
/// one used to read it).
pub fn open_fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count().saturating_sub(1)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_span_counts_intervals_not_frames() {
        let mut s = FrameSpan::default();
        assert_eq!(s.fps(), None);
        s = FrameSpan { frames: 1, first_s: 0.5, last_s: 0.5 };
        assert_eq!(s.fps(), None, "one frame has no rate");
        // 31 frames paced at 30 fps span exactly 1 s.
        s = FrameSpan { frames: 31, first_s: 0.5, last_s: 1.5 };
        assert!((s.fps().unwrap() - 30.0).abs() < 1e-9);
        let later = FrameSpan { frames: 61, first_s: 0.5, last_s: 2.5 };
        assert!((later.fps_since(&s).unwrap() - 30.0).abs() < 1e-9);
        assert_eq!(later.fps_since(&later), None, "nothing new");
        let t0 = std::time::Instant::now();
        let mut t = FrameSpan::default();
        t.tick(t0);
        t.tick(t0);
        assert_eq!(t.frames, 2);
        assert!(t.last_s >= t.first_s);
    }

    #[test]
    fn stage_latencies_add_up() {
        let mut s = [0u64; 8];
        s[1] = 1_000_000 + 50_000; // capture out
        s[3] = 1_000_000 + 2_050_000; // scale out
        s[5] = 1_000_000 + 72_050_000; // infer out
        s[7] = 1_000_000 + 72_150_000; // publish out
        let l = latencies_us(1_000_000, &s);
        assert_eq!(l, [Some(50.0), Some(2000.0), Some(70000.0), Some(100.0), Some(72150.0)]);
        let mut set = LatencySet::default();
        set.record(&l);
        let sum = set.summary();
        assert_eq!(sum["total"].count, 1);
        assert!((sum["infer"].p50_us - 70000.0).abs() / 70000.0 < 0.001);
    }
}

//! The NPU's scheduler: which waiting frame of which camera an engine runs next.
//!
//! Frames come in from the scale stage (already thinned to each camera's `--detect-fps`
//! there, so a frame the NPU will not see is never scaled) and wait here, per camera. When an
//! engine (an NPU context, or the CPU) is free it asks for the next frame ([`Scheduler::pick`]):
//! - a frame older than `--max-age` (capture stamp to now) is dropped, counted, never run late;
//! - among the cameras with a frame waiting, the one with the least weighted service runs
//!   (weighted fair queueing: each frame run adds `1 / weight` to its camera's virtual time;
//!   a camera that was idle keeps at most one frame's credit, so it gets no burst), ties to
//!   the older frame. With equal weights and more demand than the NPU serves,
//!   every camera gets the same inferred rate.
//! - video keeps only the newest frame of a camera: a frame still waiting when a newer one of
//!   the same camera comes in is dropped (counted as `replaced`). With `--ring-policy block`
//!   every frame waits its turn, in order, and none is dropped for age.
//!
//! The scheduler holds the frames (their pool loans); the caller bounds how many it takes
//! from the ring, so the scaler always has a buffer to write.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// The scheduler's settings (`--cameras`, `--weight`, `--max-age`), checked by the command line.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedConfig {
    /// The cameras' names, by camera index (empty: one camera, `cam0`).
    pub cameras: Vec<String>,
    /// Each camera's weight (one value: every camera's; none: 1 each).
    pub weights: Vec<f64>,
    /// Frames older than this when an engine is free are dropped (`None`: never).
    pub max_age: Option<Duration>,
}

impl Default for SchedConfig {
    fn default() -> Self {
        SchedConfig { cameras: vec![], weights: vec![], max_age: Some(DEFAULT_MAX_AGE) }
    }
}

/// `--max-age` by default: a frame a second old is no use to a tracker or an alarm.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(1);

impl SchedConfig {
    fn name(&self, i: usize) -> String {
        self.cameras.get(i).cloned().unwrap_or_else(|| format!("cam{i}"))
    }

    fn weight(&self, i: usize) -> f64 {
        let w = zcpipe_core::config::per_camera(&self.weights, i, 1.0);
        if w.is_finite() && w > 0.0 {
            w
        } else {
            1.0
        }
    }
}

/// A frame waiting for an engine.
struct Waiting<T> {
    item: T,
    /// Capture stamp, CLOCK_MONOTONIC ns.
    ts_ns: u64,
    /// When the stage took it from the ring, CLOCK_MONOTONIC ns.
    arrived_ns: u64,
    /// Video: replaced by a newer one of its source, dropped past `--max-age`.
    newest: bool,
}

/// One camera's queue and counters.
struct Source<T> {
    name: String,
    weight: f64,
    queue: VecDeque<Waiting<T>>,
    /// Weighted service so far (frames run / weight), in the scheduler's virtual time.
    vtime: f64,
    counts: SourceCounts,
    /// Taken from the ring to picked, µs.
    wait: Histogram<u64>,
    /// Capture stamps of the first and last frame run (for the inferred rate).
    first_last_ns: Option<(u64, u64)>,
    /// A client of the inference service (not a camera): `Some(open)`.
    client: Option<bool>,
}

/// What happened to one camera's frames in the scheduler.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SourceCounts {
    /// Frames taken in.
    pub admitted: u64,
    /// Frames given to an engine.
    pub inferred: u64,
    /// Frames dropped because a newer frame of the same camera came in while they waited.
    pub replaced: u64,
    /// Frames dropped because they were older than `--max-age` when an engine was free.
    pub expired: u64,
}

/// One camera's line in the infer stage's report.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CameraSched {
    /// Its weight.
    pub weight: f64,
    /// Its frames' fate.
    #[serde(flatten)]
    pub counts: SourceCounts,
    /// Frames run per second of capture time, first to last (`None`: fewer than 2).
    pub inferred_fps: Option<f64>,
    /// Wait for an engine (taken from the ring to picked), µs: median.
    pub wait_p50_us: Option<f64>,
    /// Wait for an engine, µs: 99th percentile.
    pub wait_p99_us: Option<f64>,
}

/// A frame picked to run: its camera, the frame, and how long it waited.
pub struct Picked<T> {
    /// The camera index.
    pub camera: usize,
    /// The frame.
    pub item: T,
    /// Taken from the ring to picked.
    pub waited: Duration,
}

/// The scheduler over the cameras' waiting frames; `T` is what a frame is (its loan).
pub struct Scheduler<T> {
    cfg: SchedConfig,
    sources: Vec<Source<T>>,
    /// Video: a camera keeps only its newest waiting frame, and `max_age` applies.
    newest_wins: bool,
    /// The virtual time of the last frame picked: where a camera that was idle starts.
    vclock: f64,
    /// Every camera's waits together, µs.
    wait_all: Histogram<u64>,
}

impl<T> Scheduler<T> {
    /// A scheduler for `cfg`'s cameras (more join as their frames come); `newest_wins`:
    /// video (drop-oldest), else every frame in order with no age limit.
    pub fn new(cfg: SchedConfig, newest_wins: bool) -> Scheduler<T> {
        let wait_all = Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds");
        let mut s = Scheduler { cfg, sources: Vec::new(), newest_wins, vclock: 0.0, wait_all };
        for i in 0..s.cfg.cameras.len().max(1) {
            s.source(i);
        }
        s
    }

    fn source(&mut self, i: usize) -> &mut Source<T> {
        while self.sources.len() <= i {
            let k = self.sources.len();
            self.sources.push(Source {
                name: self.cfg.name(k),
                weight: self.cfg.weight(k),
                queue: VecDeque::new(),
                vtime: self.vclock,
                counts: SourceCounts::default(),
                wait: Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds"),
                first_last_ns: None,
                client: None,
            });
        }
        &mut self.sources[i]
    }

    /// The cameras' names, by camera index (empty: one unnamed camera).
    pub fn cameras(&self) -> &[String] {
        &self.cfg.cameras
    }

    /// The run's cameras from now on (`names`, each with its weight in `weights`): a
    /// camera's weight applies from its next frame; a camera new to the run starts level
    /// with the others (at the scheduler's clock), with no credit for the time before.
    pub fn set_cameras(&mut self, names: Vec<String>, weights: Vec<f64>) {
        self.cfg.cameras = names;
        self.cfg.weights = weights;
        for i in 0..self.cfg.cameras.len() {
            let (name, weight) = (self.cfg.name(i), self.cfg.weight(i));
            let s = self.source(i);
            s.name = name;
            s.weight = weight;
        }
    }

    /// Takes in frame `item` of camera `camera`, captured at `ts_ns`, taken from the ring at
    /// `now_ns`. Returns the frame it replaced (video: the camera's older waiting frame), for
    /// the caller to give back.
    pub fn admit(&mut self, camera: usize, item: T, ts_ns: u64, now_ns: u64) -> Option<T> {
        self.admit_as(camera, item, ts_ns, now_ns, self.newest_wins)
    }

    /// [`Scheduler::admit`] with the item's own policy: `newest_wins` (video: it replaces
    /// the source's waiting video item, and `--max-age` applies) or not (it waits its turn
    /// behind the others, whatever its age: a client's `request`).
    pub fn admit_as(&mut self, source: usize, item: T, ts_ns: u64, now_ns: u64, newest_wins: bool) -> Option<T> {
        let vclock = self.vclock;
        let s = self.source(source);
        s.counts.admitted += 1;
        if s.queue.is_empty() {
            // Idle until now: at most one frame's credit for the time it had nothing to run
            // (a camera whose frame arrives just after a pick keeps its turn; one that was
            // away gets no burst).
            s.vtime = s.vtime.max(vclock - 1.0 / s.weight);
        }
        let old = if newest_wins { s.queue.iter().position(|w| w.newest) } else { None };
        let replaced = old.and_then(|k| s.queue.remove(k)).map(|w| w.item);
        if replaced.is_some() {
            s.counts.replaced += 1;
        }
        s.queue.push_back(Waiting { item, ts_ns, arrived_ns: now_ns, newest: newest_wins });
        replaced
    }

    /// Opens source `i` for a client of the inference service named `name`, with its
    /// weight: fresh counters and queue (a slot a client that left used before).
    pub fn open_client(&mut self, i: usize, name: String, weight: f64) {
        let vclock = self.vclock;
        let s = self.source(i);
        s.name = name;
        s.weight = if weight.is_finite() && weight > 0.0 { weight } else { 1.0 };
        s.queue.clear();
        s.vtime = vclock;
        s.counts = SourceCounts::default();
        s.wait.reset();
        s.first_last_ns = None;
        s.client = Some(true);
    }

    /// Closes client source `i` (the client left): its waiting items, for the caller to
    /// give back.
    pub fn close_client(&mut self, i: usize) -> Vec<T> {
        match self.sources.get_mut(i) {
            Some(s) if s.client.is_some() => {
                s.client = Some(false);
                s.queue.drain(..).map(|w| w.item).collect()
            }
            _ => Vec::new(),
        }
    }

    /// The frame to run now (`None`: nothing waits). Frames past `--max-age` at `now_ns`
    /// go to `expired` first (video only), for the caller to give back.
    pub fn pick(&mut self, now_ns: u64, expired: &mut Vec<T>) -> Option<Picked<T>> {
        if let Some(max) = self.cfg.max_age {
            let max = max.as_nanos() as u64;
            for s in &mut self.sources {
                while let Some(k) = s.queue.iter().position(|w| w.newest && now_ns.saturating_sub(w.ts_ns) > max) {
                    if let Some(w) = s.queue.remove(k) {
                        s.counts.expired += 1;
                        expired.push(w.item);
                    }
                }
            }
        }
        let camera = self
            .sources
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.queue.front().map(|w| (i, s.vtime, w.ts_ns)))
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.2.cmp(&b.2)))?
            .0;
        let s = &mut self.sources[camera];
        let w = s.queue.pop_front()?;
        self.vclock = s.vtime;
        s.vtime += 1.0 / s.weight;
        s.counts.inferred += 1;
        let waited = Duration::from_nanos(now_ns.saturating_sub(w.arrived_ns));
        s.wait.saturating_record((waited.as_micros() as u64).max(1));
        self.wait_all.saturating_record((waited.as_micros() as u64).max(1));
        s.first_last_ns = Some(s.first_last_ns.map_or((w.ts_ns, w.ts_ns), |(f, _)| (f, w.ts_ns)));
        Some(Picked { camera, item: w.item, waited })
    }

    /// Frames waiting now.
    pub fn held(&self) -> usize {
        self.sources.iter().map(|s| s.queue.len()).sum()
    }

    /// Every waiting frame, taken out (at the end: their loans go back unrun).
    pub fn drain(&mut self) -> Vec<T> {
        self.sources.iter_mut().flat_map(|s| s.queue.drain(..).map(|w| w.item)).collect()
    }

    /// The counters summed over the cameras.
    pub fn totals(&self) -> SourceCounts {
        self.sources.iter().fold(SourceCounts::default(), |a, s| SourceCounts {
            admitted: a.admitted + s.counts.admitted,
            inferred: a.inferred + s.counts.inferred,
            replaced: a.replaced + s.counts.replaced,
            expired: a.expired + s.counts.expired,
        })
    }

    /// Every camera's waits together, µs: median and 99th percentile (`None`: none picked).
    pub fn wait_all(&self) -> (Option<f64>, Option<f64>) {
        let q = |p: f64| (!self.wait_all.is_empty()).then(|| self.wait_all.value_at_quantile(p) as f64);
        (q(0.5), q(0.99))
    }

    /// Each camera's line for the report, by name (cameras that never sent a frame beyond
    /// the configured ones are left out).
    pub fn facts(&self) -> BTreeMap<String, CameraSched> {
        let configured = self.cfg.cameras.len().max(1);
        self.lines(|i, s| s.client.is_none() && (i < configured || s.counts.admitted > 0))
    }

    /// Each connected client's line, by name.
    pub fn client_facts(&self) -> BTreeMap<String, CameraSched> {
        self.lines(|_, s| s.client == Some(true))
    }

    fn lines(&self, keep: impl Fn(usize, &Source<T>) -> bool) -> BTreeMap<String, CameraSched> {
        self.sources
            .iter()
            .enumerate()
            .filter(|(i, s)| keep(*i, s))
            .map(|(_, s)| {
                let q = |p: f64| (!s.wait.is_empty()).then(|| s.wait.value_at_quantile(p) as f64);
                let fps = s
                    .first_last_ns
                    .filter(|(f, l)| l > f && s.counts.inferred > 1)
                    .map(|(f, l)| (s.counts.inferred - 1) as f64 / ((l - f) as f64 / 1e9));
                let line = CameraSched {
                    weight: s.weight,
                    counts: s.counts,
                    inferred_fps: fps,
                    wait_p50_us: q(0.5),
                    wait_p99_us: q(0.99),
                };
                (s.name.clone(), line)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn cfg(n: usize, weights: Vec<f64>, max_age_ms: Option<u64>) -> SchedConfig {
        SchedConfig {
            cameras: (0..n).map(|i| format!("c{i}")).collect(),
            weights,
            max_age: max_age_ms.map(Duration::from_millis),
        }
    }

    /// Every camera has a new frame every tick; `runs` frames are picked per tick. Returns
    /// each camera's inferred count after `ticks`.
    fn overload(s: &mut Scheduler<(usize, u64)>, n: usize, runs: usize, ticks: u64) -> Vec<u64> {
        let mut done = vec![0; n];
        for t in 0..ticks {
            let now = 1_000 * MS + t * 33 * MS;
            for c in 0..n {
                s.admit(c, (c, t), now, now);
            }
            for _ in 0..runs {
                let mut exp = vec![];
                if let Some(p) = s.pick(now, &mut exp) {
                    done[p.camera] += 1;
                    assert_eq!(p.item.0, p.camera);
                }
            }
        }
        done
    }

    #[test]
    fn equal_weights_share_an_overloaded_npu_equally() {
        let mut s = Scheduler::new(cfg(8, vec![], Some(1000)), true);
        // 8 cameras at 30 fps, 3 frames run per frame time: 11.25 fps each.
        let done = overload(&mut s, 8, 3, 300);
        let (min, max) = (done.iter().min().unwrap(), done.iter().max().unwrap());
        assert!(max - min <= 1, "{done:?}");
        assert_eq!(done.iter().sum::<u64>(), 900);
        let t = s.totals();
        assert_eq!(t.admitted, 2400);
        assert_eq!(t.inferred + t.replaced + s.held() as u64, 2400, "every frame accounted for: {t:?}");
    }

    #[test]
    fn weights_divide_the_npu_in_their_ratio() {
        let mut s = Scheduler::new(cfg(3, vec![2.0, 1.0, 1.0], Some(1000)), true);
        let done = overload(&mut s, 3, 2, 400);
        assert_eq!(done, vec![400, 200, 200]);
    }

    #[test]
    fn an_idle_camera_gets_no_burst_of_credit() {
        let mut s = Scheduler::new(cfg(2, vec![], None), true);
        let mut exp = vec![];
        // Camera 0 alone for 100 runs.
        for t in 0..100u64 {
            s.admit(0, (0, t), t * MS, t * MS);
            s.pick(t * MS, &mut exp).unwrap();
        }
        // Then both: they alternate from the start rather than camera 1 running 100 in a row.
        let mut order = vec![];
        for t in 100..110u64 {
            s.admit(0, (0, t), t * MS, t * MS);
            s.admit(1, (1, t), t * MS, t * MS);
            order.push(s.pick(t * MS, &mut exp).unwrap().camera);
        }
        let ones = order.iter().filter(|&&c| c == 1).count();
        assert!((4..=6).contains(&ones), "{order:?}");
    }

    #[test]
    fn video_keeps_the_newest_frame_and_drops_old_ones() {
        let mut s = Scheduler::new(cfg(1, vec![], Some(100)), true);
        assert!(s.admit(0, 1, 0, 0).is_none());
        assert_eq!(s.admit(0, 2, 33 * MS, 33 * MS), Some(1), "the older waiting frame goes back");
        let mut exp = vec![];
        // 150 ms after its capture: past --max-age 100 ms, dropped, never run late.
        assert!(s.pick(183 * MS, &mut exp).is_none());
        assert_eq!(exp, vec![2]);
        let c = s.facts().remove("c0").unwrap().counts;
        assert_eq!(c, SourceCounts { admitted: 2, inferred: 0, replaced: 1, expired: 1 });
    }

    #[test]
    fn block_runs_every_frame_in_order_whatever_its_age() {
        let mut s = Scheduler::new(cfg(1, vec![], Some(10)), false);
        for k in 0..5u64 {
            assert!(s.admit(0, k, k, k).is_none());
        }
        let mut exp = vec![];
        let got: Vec<u64> = (0..5).map(|_| s.pick(10_000 * MS, &mut exp).unwrap().item).collect();
        assert_eq!(got, vec![0, 1, 2, 3, 4]);
        assert!(exp.is_empty());
    }

    #[test]
    fn a_camera_added_gets_its_name_and_weight_and_starts_level() {
        let cfg = SchedConfig { cameras: vec!["a".into(), "b".into()], weights: vec![1.0, 1.0], max_age: None };
        let mut s: Scheduler<u32> = Scheduler::new(cfg, true);
        for t in 0..10u64 {
            s.admit(0, 1, t, t);
            s.admit(1, 2, t, t);
            let mut expired = vec![];
            while s.pick(t, &mut expired).is_some() {}
        }
        s.set_cameras(vec!["a".into(), "b".into(), "c".into()], vec![1.0, 1.0, 2.0]);
        assert_eq!(s.cameras(), ["a", "b", "c"]);
        // From now on c has twice the share of a or b, and no credit for the time before.
        let mut ran = [0u32; 3];
        for t in 10..130u64 {
            for cam in 0..3 {
                s.admit(cam, cam as u32, t, t);
            }
            let mut expired = vec![];
            let p = s.pick(t, &mut expired).expect("a frame waits");
            ran[p.camera] += 1;
        }
        assert_eq!(ran, [30, 30, 60], "weights 1:1:2");
        let f = s.facts();
        assert_eq!(f["c"].weight, 2.0);
        assert!(!f.contains_key("cam2"), "the new camera is named");
    }

    #[test]
    fn a_client_source_mixes_requests_and_video() {
        let mut s = Scheduler::new(cfg(1, vec![], Some(100)), true);
        s.open_client(20, "robot pid 9".into(), 1.0);
        // Two requests wait their turn; the video frame is replaced by the newer one.
        assert!(s.admit_as(20, 1, 0, 0, false).is_none());
        assert!(s.admit_as(20, 2, 0, 0, true).is_none());
        assert!(s.admit_as(20, 3, 0, 0, false).is_none());
        assert_eq!(s.admit_as(20, 4, 10 * MS, 10 * MS, true), Some(2));
        let mut exp = vec![];
        // 500 ms later the video frame is past --max-age; the requests are not.
        let got: Vec<u64> = std::iter::from_fn(|| s.pick(500 * MS, &mut exp).map(|p| p.item)).collect();
        assert_eq!(got, vec![1, 3]);
        assert_eq!(exp, vec![4]);
        let f = s.client_facts();
        assert_eq!(f.len(), 1);
        assert_eq!(f["robot pid 9"].counts, SourceCounts { admitted: 4, inferred: 2, replaced: 1, expired: 1 });
        assert!(!s.facts().contains_key("robot pid 9"), "a client is not a camera");
        assert!(!s.facts().contains_key("cam19"), "the sources below a client's are not cameras");
        s.admit_as(20, 5, 0, 0, false);
        assert_eq!(s.close_client(20), vec![5]);
        assert!(s.client_facts().is_empty());
    }

    #[test]
    fn the_report_has_rates_and_waits() {
        let mut s = Scheduler::new(cfg(1, vec![], None), true);
        let mut exp = vec![];
        for k in 0..11u64 {
            let ts = 1000 * MS + k * 100 * MS;
            s.admit(0, k, ts, ts + MS);
            s.pick(ts + 3 * MS, &mut exp).unwrap();
        }
        let f = s.facts().remove("c0").unwrap();
        assert_eq!(f.inferred_fps, Some(10.0));
        assert_eq!(f.wait_p50_us, Some(2000.0));
        assert_eq!(f.weight, 1.0);
    }
}

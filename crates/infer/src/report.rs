//! The infer stage's report, typed: the scheduler's per-camera numbers and each NPU core's
//! busy time, written by the stage and read back by `zcpipe run` (the summary, `/metrics`
//! and the stats line).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub use crate::sched::{CameraSched, SourceCounts};
pub use zcpipe_core::service::{ClientStats, ServiceStats};

/// The infer stage's own facts in its report (`extra`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct InferFacts {
    /// Each camera's scheduling, by name.
    pub cameras: BTreeMap<String, CameraSched>,
    /// Each engine's core and how busy it was.
    pub cores: Vec<CoreBusy>,
    /// Engines (contexts) per NPU core.
    pub contexts_per_core: u32,
    /// The infer process's CPU time (user + system) per frame run, µs, over its frame loop
    /// (the model's load left out): the host's glue around each inference.
    pub cpu_us_per_frame: Option<f64>,
    /// Every camera's frames' wait for an engine, µs: median.
    pub wait_p50_us: Option<f64>,
    /// Every camera's frames' wait for an engine, µs: 99th percentile.
    pub wait_p99_us: Option<f64>,
    /// The inference service's numbers, each connected client's with them (`None`: off).
    pub service: Option<ServiceStats>,
}

/// How busy one NPU core (or, for an engine not pinned to a core, that engine) was.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct CoreBusy {
    /// The NPU core (`None`: an engine the runtime places, or the CPU).
    pub core: Option<u32>,
    /// Engines on it.
    pub engines: u32,
    /// Runs on it.
    pub runs: u64,
    /// Time with at least one run on it, seconds.
    pub busy_s: f64,
    /// `busy_s` over the time since the first run started.
    pub busy: f64,
}

/// Adds up each core's busy time from the runs' start and end: the union of the runs'
/// intervals, so runs queued on one core by several contexts count once.
#[derive(Debug, Default)]
pub struct BusyMeter {
    cores: Vec<(CoreBusy, Option<Instant>)>,
    since: Option<Instant>,
}

impl BusyMeter {
    /// A meter for engines on `cores` (one entry per engine).
    pub fn new(engines: &[Option<u32>]) -> BusyMeter {
        let mut cores: Vec<(CoreBusy, Option<Instant>)> = Vec::new();
        for &core in engines {
            match cores.iter_mut().find(|(c, _)| c.core == core && core.is_some()) {
                Some((c, _)) => c.engines += 1,
                None => cores.push((CoreBusy { core, engines: 1, ..Default::default() }, None)),
            }
        }
        BusyMeter { cores, since: None }
    }

    /// A run of engine `engine` (an index into the list given to [`BusyMeter::new`]) on
    /// `core` from `start` to `end`, added when it ended.
    pub fn ran(&mut self, core: Option<u32>, engine: usize, start: Instant, end: Instant) {
        self.since = Some(self.since.map_or(start, |s| s.min(start)));
        let at = match core {
            Some(_) => self.cores.iter().position(|(c, _)| c.core == core),
            None => self.cores.iter().enumerate().filter(|(_, (c, _))| c.core.is_none()).nth(engine).map(|(i, _)| i),
        };
        let Some((c, covered)) = self.cores.get_mut(at.unwrap_or(0)) else { return };
        c.runs += 1;
        let from = covered.map_or(start, |u| u.max(start));
        if end > from {
            c.busy_s += (end - from).as_secs_f64();
            *covered = Some(end);
        }
    }

    /// Each NPU core's busy time so far, µs (core k at index k, cores 0..4; engines not pinned
    /// to a core are not an NPU core's).
    pub fn busy_us(&self) -> [u64; 4] {
        let mut v = [0u64; 4];
        for (c, _) in &self.cores {
            if let Some(slot) = c.core.and_then(|k| v.get_mut(k as usize)) {
                *slot = (c.busy_s * 1e6) as u64;
            }
        }
        v
    }

    /// Each core's line, with its busy fraction of the time since the first run.
    pub fn lines(&self) -> Vec<CoreBusy> {
        let span = self.since.map_or(Duration::ZERO, |s| s.elapsed()).as_secs_f64();
        self.cores
            .iter()
            .map(|(c, _)| CoreBusy { busy: if span > 0.0 { (c.busy_s / span).min(1.0) } else { 0.0 }, ..c.clone() })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_queued_on_one_core_count_once() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut m = BusyMeter::new(&[Some(0), Some(0), Some(1)]);
        // Two contexts on core 0: the second run queued behind the first (0-10, 1-20).
        m.ran(Some(0), 0, t0, t0 + ms(10));
        m.ran(Some(0), 1, t0 + ms(1), t0 + ms(20));
        m.ran(Some(1), 2, t0, t0 + ms(5));
        let l = m.lines();
        assert_eq!(l.len(), 2);
        assert_eq!((l[0].core, l[0].engines, l[0].runs), (Some(0), 2, 2));
        assert!((l[0].busy_s - 0.020).abs() < 1e-9, "{l:?}");
        assert!((l[1].busy_s - 0.005).abs() < 1e-9, "{l:?}");
    }
}

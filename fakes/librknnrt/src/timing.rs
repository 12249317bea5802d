//! Timing mode (`ZCPIPE_FAKE_RKNN_RUN_US`): the fake SoC's NPU cores as a shared, timed
//! resource. A run occupies the core(s) its context's core mask gives it for the configured
//! time and sleeps until its end; it reads no input and runs no model (lib.rs's module doc
//! has the model and the calibration).

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// `RKNN_NPU_CORE_AUTO` and `RKNN_NPU_CORE_ALL`: the runtime chooses the core.
const MASK_AUTO: u32 = 0;
const MASK_ALL: u32 = 0xffff;
/// The most cores the fake SoC can have (masks are 16 bits).
const MAX_CORES: u32 = 16;

/// Parses `ZCPIPE_FAKE_RKNN_RUN_US`: unset or empty is `None` (the ONNX model runs), a
/// positive integer is the run time in microseconds, anything else is refused.
pub(super) fn parse_run_us(value: Option<&str>) -> Result<Option<u64>, String> {
    match value {
        None | Some("") => Ok(None),
        Some(v) => match v.parse::<u64>() {
            Ok(us) if us > 0 => Ok(Some(us)),
            _ => Err(format!(
                "ZCPIPE_FAKE_RKNN_RUN_US={v}: use a positive number of microseconds per run \
                 (e.g. 13600), or leave it unset"
            )),
        },
    }
}

/// `ZCPIPE_FAKE_RKNN_RUN_US`, read once per process (rknn_init refuses a bad value).
pub(super) fn run_us() -> Result<Option<u64>, String> {
    static RUN_US: OnceLock<Result<Option<u64>, String>> = OnceLock::new();
    RUN_US
        .get_or_init(|| {
            let v = std::env::var_os("ZCPIPE_FAKE_RKNN_RUN_US");
            parse_run_us(v.as_ref().map(|v| v.to_str().unwrap_or("(not UTF-8)")))
        })
        .clone()
}

/// The fake SoC's NPU cores: `ZCPIPE_FAKE_RKNN_CORES`, default 3 (RK3588); not a number is 3.
pub(super) fn soc_cores() -> u32 {
    std::env::var("ZCPIPE_FAKE_RKNN_CORES").ok().and_then(|v| v.parse().ok()).unwrap_or(3)
}

/// Per core, the instant it is busy until (in the past: idle).
static BUSY_UNTIL: Mutex<Vec<Instant>> = Mutex::new(Vec::new());
/// The process's first timed run: the origin of the logged `start_us` / `end_us`.
static EPOCH: OnceLock<Instant> = OnceLock::new();

/// Where and when a run goes on the NPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Slot {
    /// The cores it occupies, ascending.
    pub cores: Vec<usize>,
    pub start: Instant,
    pub end: Instant,
}

impl Slot {
    /// ` core=C start_us=.. end_us=..` for the `rknn_run_end` line (cores comma-separated for
    /// a multi-core mask), in microseconds since the process's first timed run.
    pub fn log_fields(&self) -> String {
        let epoch = *EPOCH.get().unwrap_or(&self.start);
        let us = |t: Instant| t.saturating_duration_since(epoch).as_micros();
        let cores: Vec<String> = self.cores.iter().map(usize::to_string).collect();
        format!(" core={} start_us={} end_us={}", cores.join(","), us(self.start), us(self.end))
    }
}

/// The cores a run of a context with `mask` occupies on a SoC whose cores are free at
/// `free` (each core's `max(now, busy_until)`): AUTO (0, 0xffff) takes the core that frees
/// first (the lowest on a tie), any other mask every core in it.
fn cores_for(mask: u32, free: &[Instant]) -> Vec<usize> {
    let listed: Vec<usize> = (0..free.len()).filter(|&c| mask & (1 << c) != 0).collect();
    if mask == MASK_AUTO || mask == MASK_ALL || listed.is_empty() {
        let first = (0..free.len()).min_by_key(|&c| (free[c], c)).unwrap_or(0);
        return vec![first];
    }
    listed
}

/// Books a run of `run` on the cores `mask` gives it: it starts when all of them are free
/// (and not before now), and holds them until `start + run`.
pub(super) fn reserve(mask: u32, run: Duration) -> Slot {
    let epoch = *EPOCH.get_or_init(Instant::now);
    let n = soc_cores().clamp(1, MAX_CORES) as usize;
    let mut busy = BUSY_UNTIL.lock().unwrap_or_else(|p| p.into_inner());
    let now = Instant::now();
    if busy.len() < n {
        busy.resize(n, epoch);
    }
    let free: Vec<Instant> = busy[..n].iter().map(|&b| b.max(now)).collect();
    let cores = cores_for(mask, &free);
    let start = cores.iter().map(|&c| free[c]).max().unwrap_or(now);
    let end = start + run;
    for &c in &cores {
        busy[c] = end;
    }
    Slot { cores, start, end }
}

/// Sleeps until `deadline` (std::thread::sleep, no CPU spent; woken early, sleeps again).
pub(super) fn sleep_until(deadline: Instant) {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        std::thread::sleep(deadline - now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_us_takes_a_positive_integer_or_nothing() {
        assert_eq!(parse_run_us(None), Ok(None));
        assert_eq!(parse_run_us(Some("")), Ok(None));
        assert_eq!(parse_run_us(Some("13600")), Ok(Some(13600)));
        for bad in ["0", "-5", "1.5", "20ms", " 20"] {
            let e = parse_run_us(Some(bad)).unwrap_err();
            assert!(e.starts_with(&format!("ZCPIPE_FAKE_RKNN_RUN_US={bad}: use a positive number")), "{e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }

    #[test]
    fn auto_takes_the_core_that_frees_first_and_a_mask_takes_its_cores() {
        let t = Instant::now();
        let ms = |m| t + Duration::from_millis(m);
        assert_eq!(cores_for(0, &[t, t, t]), [0], "all free: the lowest");
        assert_eq!(cores_for(0, &[ms(5), t, t]), [1]);
        assert_eq!(cores_for(0xffff, &[ms(5), ms(9), ms(2)]), [2]);
        assert_eq!(cores_for(4, &[t, t, t]), [2]);
        assert_eq!(cores_for(3, &[t, t, t]), [0, 1]);
        assert_eq!(cores_for(7, &[t, t, t]), [0, 1, 2]);
        assert_eq!(cores_for(8, &[ms(1), t, t]), [1], "no listed core on this SoC: as AUTO");
    }
}

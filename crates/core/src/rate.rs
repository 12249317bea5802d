//! A camera's detection rate (`--detect-fps`): which frames go on to the NPU.
//!
//! The gate decides from the frames' capture stamps alone, so it gives the same answer
//! wherever it runs. The scale stage asks it before it scales a frame (a frame the NPU will
//! not see costs no scaler time: on a board, RGA time); a frame it passes over still reached
//! every tap of its capture pool (the display, the web view's pictures).

/// Passes frames at most at one rate, measured on their capture stamps (ns).
///
/// Frames are due on a grid of the clock: one every interval, shifted by the gate's phase.
/// A frame passes when it comes at most half an interval before the next due point, which
/// then moves one interval on, so the long-run rate is the asked one exactly while the
/// frames come faster than it, whatever their spacing (a 25 fps camera at 10 passes 10 a
/// second, not every second frame's 12.5), and jitter costs no frame. The first frame
/// passes at once; after a gap of more than an interval (a camera that stalled) the next
/// frame passes and the gate takes the grid up again from it: no burst to catch up.
///
/// The phase is what keeps cameras apart: capture stamps are CLOCK_MONOTONIC in every
/// process, so cameras at one rate given phases spread over the interval (the scale stage
/// gives camera `k` of `n` the phase `k / n`) send their frames to the NPU one after
/// another instead of all at once, and none waits for the others'.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateGate {
    interval_ns: u64,
    /// The grid's offset, ns (less than an interval).
    phase_ns: u64,
    /// The next due point (`None`: the first frame passes).
    due_ns: Option<u64>,
}

impl RateGate {
    /// A gate at `fps` frames per second with phase 0; `None` for 0 (every frame passes)
    /// or a value that is not a positive finite number.
    pub fn new(fps: f64) -> Option<RateGate> {
        RateGate::with_phase(fps, 0.0)
    }

    /// A gate at `fps` whose due points are shifted by `phase` (a fraction of the interval,
    /// taken modulo 1).
    pub fn with_phase(fps: f64, phase: f64) -> Option<RateGate> {
        if !(fps.is_finite() && fps > 0.0) {
            return None;
        }
        let interval_ns = (1e9 / fps).round().max(1.0) as u64;
        let phase_ns = (phase.rem_euclid(1.0) * interval_ns as f64) as u64 % interval_ns;
        Some(RateGate { interval_ns, phase_ns, due_ns: None })
    }

    /// The first due point at or after `t`.
    fn grid_from(&self, t: u64) -> u64 {
        let i = self.interval_ns;
        let k = t.saturating_sub(self.phase_ns).div_ceil(i);
        k.saturating_mul(i).saturating_add(self.phase_ns)
    }

    /// Whether the frame captured at `ts_ns` passes (and, if so, the next due point moves on).
    pub fn admit(&mut self, ts_ns: u64) -> bool {
        let i = self.interval_ns;
        let due = match self.due_ns {
            // The first frame, or one after a stall: the grid's point nearest it.
            None => self.grid_from(ts_ns.saturating_sub(i / 2)),
            Some(due) if ts_ns > due.saturating_add(i) => self.grid_from(ts_ns.saturating_sub(i / 2)),
            Some(due) if ts_ns.saturating_add(i / 2) < due => return false,
            Some(due) => due,
        };
        self.due_ns = Some(due.saturating_add(i));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames passed in `secs` seconds of a camera at `cam_fps`, gate at `fps`.
    fn passed(cam_fps: f64, fps: f64, secs: f64) -> usize {
        let mut g = RateGate::new(fps).unwrap();
        let n = (cam_fps * secs) as u64;
        (0..n).filter(|k| g.admit((*k as f64 * 1e9 / cam_fps) as u64 + 1_000_000_000)).count()
    }

    /// `secs` seconds hold `fps * secs` due points, give or take one at the ends.
    #[test]
    fn the_long_run_rate_is_the_asked_one() {
        let about = |n: usize, want: usize| assert!((want - 1..=want + 1).contains(&n), "{n} passed, want {want}");
        about(passed(30.0, 5.0, 10.0), 50);
        about(passed(30.0, 10.0, 10.0), 100);
        assert_eq!(passed(30.0, 30.0, 10.0), 300, "a gate at the camera's rate passes every frame");
        assert_eq!(passed(30.0, 60.0, 10.0), 300, "above the camera's rate: every frame");
        // 25 fps at 10: the spacing does not divide; still 10 a second, not 12.5.
        about(passed(25.0, 10.0, 10.0), 100);
        about(passed(29.97, 7.5, 100.0), 750);
        about(passed(30.0, 5.0, 1000.0), 5000);
    }

    #[test]
    fn jitter_does_not_cost_frames_at_the_camera_rate() {
        let mut g = RateGate::new(30.0).unwrap();
        let period = 33_333_333u64;
        // Each frame up to 8 ms early or late.
        let passed =
            (0..300u64).filter(|k| g.admit(1_000_000_000 + k * period + (k % 3) * 8_000_000 - 8_000_000)).count();
        assert_eq!(passed, 300);
    }

    /// Four cameras at 30 fps, stamps aligned, at 5 fps with phases 0, 1/4, 2/4, 3/4: their
    /// frames pass in different frame slots, never two at once.
    #[test]
    fn phases_keep_cameras_at_one_rate_apart() {
        let mut gates: Vec<RateGate> = (0..4).map(|k| RateGate::with_phase(5.0, k as f64 / 4.0).unwrap()).collect();
        let mut slots: Vec<Vec<u64>> = vec![vec![]; 4];
        for f in 0..300u64 {
            let ts = 1_000_000_000 + f * 1_000_000_000 / 30;
            for (k, g) in gates.iter_mut().enumerate() {
                if g.admit(ts) {
                    slots[k].push(f);
                }
            }
        }
        for k in 0..4 {
            assert!((49..=51).contains(&slots[k].len()), "{k}: {}", slots[k].len());
            for j in 0..k {
                let clash = slots[k].iter().skip(1).filter(|f| slots[j].contains(f)).count();
                assert_eq!(clash, 0, "cameras {j} and {k} pass the same frame slots: {:?} {:?}", slots[j], slots[k]);
            }
        }
    }

    #[test]
    fn a_stall_restarts_the_schedule_without_a_burst() {
        let mut g = RateGate::new(5.0).unwrap();
        assert!(g.admit(1_000_000_000));
        // 10 s with no frame, then 30 fps again: the first passes, the next only 200 ms later.
        assert!(g.admit(11_000_000_000));
        assert!(!g.admit(11_033_000_000));
        assert!(!g.admit(11_066_000_000));
        assert!(g.admit(11_200_000_000));
    }

    #[test]
    fn zero_or_nonsense_is_no_gate() {
        assert_eq!(RateGate::new(0.0), None);
        assert_eq!(RateGate::new(-1.0), None);
        assert_eq!(RateGate::new(f64::NAN), None);
        assert!(RateGate::new(0.5).is_some());
    }
}

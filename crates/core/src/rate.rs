//! A camera's detection rate (`--detect-fps`): which frames go on to the NPU.
//!
//! The gate decides from the frames' capture stamps alone, so it gives the same answer
//! wherever it runs. The scale stage asks it before it scales a frame (a frame the NPU will
//! not see costs no scaler time: on a board, RGA time); a frame it passes over still reached
//! every tap of its capture pool (the display, the web view's pictures).

/// Passes frames at most at one rate, measured on their capture stamps (ns).
///
/// A frame is due one interval after the previous one was due, with half an interval of
/// slack, so the long-run rate is the asked one exactly while the frames come faster than
/// it, whatever their spacing (a 25 fps camera at 10 passes 10 a second, not every second
/// frame's 12.5). After a gap of more than an interval (a camera that stalled), the next
/// frame passes and the schedule starts again from it: no burst to catch up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateGate {
    interval_ns: u64,
    /// When the next frame is due (`None`: the first frame passes).
    due_ns: Option<u64>,
}

impl RateGate {
    /// A gate at `fps` frames per second; `None` for 0 (every frame passes) or a value
    /// that is not a positive finite number.
    pub fn new(fps: f64) -> Option<RateGate> {
        (fps.is_finite() && fps > 0.0)
            .then(|| RateGate { interval_ns: (1e9 / fps).round().max(1.0) as u64, due_ns: None })
    }

    /// Whether the frame captured at `ts_ns` passes (and, if so, the next one's due time moves on).
    pub fn admit(&mut self, ts_ns: u64) -> bool {
        let i = self.interval_ns;
        let next = match self.due_ns {
            None => ts_ns.saturating_add(i),
            Some(due) if ts_ns.saturating_add(i / 2) < due => return false,
            // Behind by more than an interval (a stall, or stamps that jumped): start again.
            Some(due) if ts_ns > due.saturating_add(i) => ts_ns.saturating_add(i),
            Some(due) => due.saturating_add(i),
        };
        self.due_ns = Some(next);
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

    /// The frames of `secs` seconds end just before the next due time; the last one passes
    /// if it is within half an interval of it, so one more than `fps * secs` may pass.
    #[test]
    fn the_long_run_rate_is_the_asked_one() {
        let about = |n: usize, want: usize| assert!((want..=want + 1).contains(&n), "{n} passed, want {want}");
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

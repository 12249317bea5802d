//! The motion model of the `sort` and `bytetrack` trackers: a constant-velocity Kalman
//! filter on a box's centre, aspect ratio and height, `(cx, cy, a = w/h, h)` and their
//! velocities, one step per frame, with the noise of DeepSORT and ByteTrack (Wojke et al.
//! 2017, "Simple Online and Realtime Tracking with a Deep Association Metric", section 2.1;
//! Zhang et al. 2022, "ByteTrack", section 4.1 uses the same filter): process and measurement
//! standard deviations proportional to the box height (1/20 of it for positions, 1/160 for
//! velocities; 1e-2 and 1e-5 for the aspect ratio, 1e-1 for its measurement).
//!
//! The transition `[I, I; 0, I]` couples each coordinate only with its own velocity, the
//! measurement picks the four positions, and every noise matrix is diagonal, so the 8x8
//! covariance stays block-diagonal: the filter is exactly four independent two-state
//! filters (position, velocity), which is what this is. No matrix library is needed, and a
//! step costs a few dozen flops.

/// Positions' noise: this fraction of the box height (one standard deviation).
const STD_POSITION: f32 = 1.0 / 20.0;
/// Velocities' noise: this fraction of the box height per frame.
const STD_VELOCITY: f32 = 1.0 / 160.0;

/// One coordinate: its position and velocity (per frame), and their covariance.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Axis {
    p: f32,
    v: f32,
    /// Covariance `[[pp, pv], [pv, vv]]`.
    pp: f32,
    pv: f32,
    vv: f32,
}

impl Axis {
    fn new(p: f32, std_p: f32, std_v: f32) -> Axis {
        Axis { p, v: 0.0, pp: std_p * std_p, pv: 0.0, vv: std_v * std_v }
    }

    /// One frame ahead: `x = F x`, `P = F P Fᵀ + Q` with `F = [1, 1; 0, 1]`.
    fn predict(&mut self, q_p: f32, q_v: f32) {
        self.p += self.v;
        self.pp += 2.0 * self.pv + self.vv + q_p * q_p;
        self.pv += self.vv;
        self.vv += q_v * q_v;
    }

    /// Corrects with a measurement `z` of the position whose standard deviation is `r`.
    fn update(&mut self, z: f32, r: f32) {
        let s = self.pp + r * r;
        if s.is_nan() || s <= 0.0 || !z.is_finite() {
            return;
        }
        let (k0, k1) = (self.pp / s, self.pv / s);
        let y = z - self.p;
        self.p += k0 * y;
        self.v += k1 * y;
        let (pp, pv) = (self.pp, self.pv);
        self.pp = (1.0 - k0) * pp;
        self.pv = (1.0 - k0) * pv;
        self.vv -= k1 * pv;
    }
}

/// The filter of one track: `(cx, cy, a, h)` in source pixels (a: width / height).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Kalman {
    axes: [Axis; 4],
}

/// `[x1, y1, x2, y2]` to `(cx, cy, a, h)`; a box of zero height gets height 1e-3 (no NaN).
fn to_xyah(b: [f32; 4]) -> [f32; 4] {
    let h = (b[3] - b[1]).max(1e-3);
    [(b[0] + b[2]) / 2.0, (b[1] + b[3]) / 2.0, (b[2] - b[0]) / h, h]
}

impl Kalman {
    /// A filter started at box `b` (`[x1, y1, x2, y2]`, pixels), at rest, uncertain in its
    /// velocity.
    pub fn new(b: [f32; 4]) -> Kalman {
        let m = to_xyah(b);
        let h = m[3];
        let (sp, sv) = (2.0 * STD_POSITION * h, 10.0 * STD_VELOCITY * h);
        Kalman {
            axes: [
                Axis::new(m[0], sp, sv),
                Axis::new(m[1], sp, sv),
                Axis::new(m[2], 1e-2, 1e-5),
                Axis::new(m[3], sp, sv),
            ],
        }
    }

    /// One frame ahead. `lost`: the track was not seen last frame, so its height stops
    /// changing (ByteTrack's rule: a lost box keeps its size while it drifts).
    pub(crate) fn predict(&mut self, lost: bool) {
        if lost {
            self.axes[3].v = 0.0;
        }
        let h = self.axes[3].p.max(1e-3);
        let (qp, qv) = (STD_POSITION * h, STD_VELOCITY * h);
        self.axes[0].predict(qp, qv);
        self.axes[1].predict(qp, qv);
        self.axes[2].predict(1e-2, 1e-5);
        self.axes[3].predict(qp, qv);
    }

    /// Corrects with a detected box `b` (`[x1, y1, x2, y2]`, pixels).
    pub fn update(&mut self, b: [f32; 4]) {
        let z = to_xyah(b);
        let r = STD_POSITION * self.axes[3].p.max(1e-3);
        self.axes[0].update(z[0], r);
        self.axes[1].update(z[1], r);
        self.axes[2].update(z[2], 1e-1);
        self.axes[3].update(z[3], r);
    }

    /// The filter's box, `[x1, y1, x2, y2]` in pixels.
    pub fn bbox(&self) -> [f32; 4] {
        let [cx, cy, a, h] = self.axes.map(|a| a.p);
        let h = h.max(0.0);
        let w = (a * h).max(0.0);
        [cx - w / 2.0, cy - h / 2.0, cx + w / 2.0, cy + h / 2.0]
    }

    /// The centre's velocity, pixels per frame.
    #[cfg(test)]
    pub(crate) fn velocity(&self) -> (f32, f32) {
        (self.axes[0].v, self.axes[1].v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_a_box_moving_at_constant_speed() {
        let mut k = Kalman::new([100.0, 100.0, 150.0, 200.0]);
        assert_eq!(k.bbox(), [100.0, 100.0, 150.0, 200.0]);
        for i in 1..=30 {
            k.predict(false);
            let x = 100.0 + 5.0 * i as f32;
            k.update([x, 100.0, x + 50.0, 200.0]);
        }
        let (vx, vy) = k.velocity();
        assert!((vx - 5.0).abs() < 0.2 && vy.abs() < 0.1, "velocity {vx},{vy}");
        // Three frames unseen: the prediction carries on at the learnt speed.
        for _ in 0..3 {
            k.predict(true);
        }
        let b = k.bbox();
        assert!(
            (b[0] - 265.0).abs() < 2.0 && (b[2] - b[0] - 50.0).abs() < 1.0 && (b[3] - b[1] - 100.0).abs() < 1.0,
            "{b:?}"
        );
    }

    #[test]
    fn a_degenerate_box_gives_no_nan() {
        let mut k = Kalman::new([10.0, 10.0, 10.0, 10.0]);
        k.predict(false);
        k.update([10.0, 10.0, 12.0, 10.0]);
        k.update([f32::NAN, 0.0, 1.0, 1.0]);
        assert!(k.bbox().iter().all(|v| v.is_finite()), "{:?}", k.bbox());
    }
}

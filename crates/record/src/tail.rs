//! Where a clip may end: a stream with B pictures sends them after the picture they are
//! shown before (decode order `I P B B B P …`, shown `I B B B P …`), so a clip cut after
//! an arbitrary unit can end with a P picture whose B pictures never came, a jump in the
//! clip's last timestamps. [`Tail`] holds back the units after the last point where every
//! picture shown before the newest one is there (a unit whose PTS is after all before it
//! starts a new group and so completes the one before), and says at a clip's end which of
//! them may still go in.
//!
//! PTS are the stream's 90 kHz, 33-bit timestamps (compared across their wrap); units
//! without one are written as they come.

use std::sync::Arc;

use zcpipe_core::packets::Unit;

/// Units held at most: past it a group is taken as complete (a stream whose timestamps
/// never settle must not hold a clip's end open).
pub const MAX_HELD: usize = 16;

const WRAP: u64 = 1 << 33;

/// `a` comes after `b` (33-bit PTS, across the wrap).
fn after(a: u64, b: u64) -> bool {
    let d = a.wrapping_sub(b) & (WRAP - 1);
    d != 0 && d < WRAP / 2
}

/// `a - b` across the wrap, for `a` after `b`.
fn distance(a: u64, b: u64) -> u64 {
    a.wrapping_sub(b) & (WRAP - 1)
}

/// See the module's documentation.
#[derive(Debug, Default)]
pub struct Tail {
    /// The units since the last complete point, in decode order.
    held: Vec<Arc<Unit>>,
    /// The newest PTS of everything taken.
    max_pts: Option<u64>,
    /// The newest PTS of what was let through.
    let_through: Option<u64>,
    /// The previous unit's PTS.
    prev_pts: Option<u64>,
    /// The smallest step between two units' PTS seen: the frame interval.
    step: Option<u64>,
}

impl Tail {
    /// Whether a clip ending before `u` ends complete: nothing is held, or `u` starts a
    /// new group (a keyframe, a PTS after all before it, none), or too much is held.
    pub fn boundary(&self, u: &Unit) -> bool {
        self.held.is_empty()
            || u.key
            || self.held.len() >= MAX_HELD
            || match (u.pts, self.max_pts) {
                (Some(p), Some(m)) => after(p, m),
                _ => true,
            }
    }

    /// Takes the next unit; returns the units now known complete, to be written.
    pub fn push(&mut self, u: Arc<Unit>) -> Vec<Arc<Unit>> {
        let out = if self.boundary(&u) { self.release() } else { vec![] };
        if let Some(p) = u.pts {
            if let Some(q) = self.prev_pts {
                let d = if after(p, q) { distance(p, q) } else { distance(q, p) };
                if d > 0 {
                    self.step = Some(self.step.map_or(d, |s| s.min(d)));
                }
            }
            self.prev_pts = Some(p);
            if self.max_pts.is_none_or(|m| after(p, m)) {
                self.max_pts = Some(p);
            }
        }
        self.held.push(u);
        out
    }

    /// Everything held, as complete (the clip ends at a boundary).
    pub fn release(&mut self) -> Vec<Arc<Unit>> {
        if !self.held.is_empty() {
            self.let_through = self.max_pts;
        }
        std::mem::take(&mut self.held)
    }

    /// Forgets what is held (units were lost before it: a gap); returns how many.
    pub fn clear(&mut self) -> u64 {
        let n = self.held.len() as u64;
        self.held.clear();
        self.max_pts = self.let_through;
        self.prev_pts = None;
        n
    }

    /// At a clip's end with no unit after it (the stream ended or went quiet): the held
    /// units if they leave no picture out, from the last one let through on, by the frame
    /// interval; else none (their B pictures never came).
    pub fn finish(&mut self) -> Vec<Arc<Unit>> {
        let (Some(step), Some(from)) = (self.step, self.let_through) else { return self.release() };
        let mut pts: Vec<u64> = self.held.iter().filter_map(|u| u.pts).map(|p| distance(p, from)).collect();
        pts.sort_unstable();
        let mut last = 0;
        for p in pts {
            if p > last + step + step / 2 {
                self.held.clear();
                return vec![];
            }
            last = last.max(p);
        }
        self.release()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A unit at PTS `tenths` of a second (90 kHz).
    fn unit(tenths: u64, key: bool) -> Arc<Unit> {
        Arc::new(Unit { bytes: vec![], mono_ns: 0, pts: Some(tenths * 9000 + 1000), key, gap: false })
    }

    fn tenths(units: &[Arc<Unit>]) -> Vec<u64> {
        units.iter().map(|u| (u.pts.unwrap() - 1000) / 9000).collect()
    }

    /// The bundled clip's order: I B B B P B B B P P a second, sent I P B B B P B B B P.
    fn bundled() -> Vec<Arc<Unit>> {
        [0, 4, 1, 2, 3, 8, 5, 6, 7, 9, 10, 14, 11, 12, 13, 18, 15].into_iter().map(|t| unit(t, t % 10 == 0)).collect()
    }

    #[test]
    fn a_p_picture_waits_for_its_b_pictures() {
        let mut t = Tail::default();
        let mut out = vec![];
        for u in bundled() {
            out.extend(t.push(u));
        }
        // P 1.8 came and only B 1.5 of its three: held, with it.
        assert_eq!(tenths(&out), vec![0, 4, 1, 2, 3, 8, 5, 6, 7, 9, 10, 14, 11, 12, 13]);
        // The stream ends here: 1.6 and 1.7 never came, so 1.8 and 1.5 stay out.
        assert!(t.finish().is_empty());
    }

    #[test]
    fn a_group_whose_b_pictures_all_came_goes_in_at_the_end() {
        let mut t = Tail::default();
        let mut out = vec![];
        for u in bundled().into_iter().take(9) {
            out.extend(t.push(u));
        }
        assert_eq!(tenths(&out), vec![0, 4, 1, 2, 3]);
        // 8, 5, 6, 7 held: complete from 4 on by the 0.1 s step.
        assert_eq!(tenths(&t.finish()), vec![8, 5, 6, 7]);
    }

    #[test]
    fn a_boundary_is_where_a_new_group_starts() {
        let mut t = Tail::default();
        let all = bundled();
        for u in &all[..6] {
            t.push(u.clone());
        }
        // Held: P 0.8. B 0.5 is shown before it: not a boundary; P 0.9 (after 0.8) is.
        assert!(!t.boundary(&all[6]));
        assert!(t.boundary(&all[9]));
        assert!(t.boundary(&unit(20, true)));
    }

    #[test]
    fn without_b_pictures_every_unit_completes_the_one_before() {
        let mut t = Tail::default();
        let mut out = vec![];
        for k in 0..5 {
            out.extend(t.push(unit(k, k == 0)));
        }
        assert_eq!(tenths(&out), vec![0, 1, 2, 3]);
        assert_eq!(tenths(&t.finish()), vec![4]);
    }

    #[test]
    fn a_gap_forgets_the_held_group() {
        let mut t = Tail::default();
        for u in bundled().into_iter().take(7) {
            t.push(u);
        }
        assert_eq!(t.clear(), 2);
        assert!(t.held.is_empty());
    }

    #[test]
    fn timestamps_compare_across_their_wrap() {
        assert!(after(5, WRAP - 5));
        assert!(!after(WRAP - 5, 5));
        assert_eq!(distance(5, WRAP - 5), 10);
        let mut t = Tail::default();
        let near = |d: u64, key| Arc::new(Unit { bytes: vec![], mono_ns: 0, pts: Some(d % WRAP), key, gap: false });
        let base = WRAP - 9000;
        let mut out = t.push(near(base, true));
        out.extend(t.push(near(base + 9000, false)));
        out.extend(t.push(near(base + 18000, false)));
        assert_eq!(out.len(), 2);
        assert_eq!(t.finish().len(), 1);
    }

    #[test]
    fn units_without_timestamps_go_through() {
        let mut t = Tail::default();
        let bare = Arc::new(Unit { bytes: vec![], mono_ns: 0, pts: None, key: false, gap: false });
        assert!(t.push(bare.clone()).is_empty());
        assert_eq!(t.push(bare).len(), 1);
        assert_eq!(t.finish().len(), 1);
    }
}

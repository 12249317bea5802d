//! A camera's newest access units, bounded in bytes: where a clip's pre-roll comes from.
//!
//! The buffer always starts at a keyframe (units before the first keyframe it holds could
//! not be decoded), drops its oldest when over its bound, and starts over after a gap (units
//! the capture stage dropped, a reconnect): what follows a gap does not continue what came
//! before. [`PreRoll::since`] gives the units from the last keyframe at or before a time.

use std::collections::VecDeque;
use std::sync::Arc;

use zcpipe_core::packets::Unit;

/// See the module's documentation.
#[derive(Debug)]
pub struct PreRoll {
    units: VecDeque<Arc<Unit>>,
    bytes: usize,
    limit: usize,
    /// Units dropped (over the bound, or before a first keyframe).
    pub dropped: u64,
}

impl PreRoll {
    /// An empty buffer of at most `limit` bytes.
    pub fn new(limit: usize) -> PreRoll {
        PreRoll { units: VecDeque::new(), bytes: 0, limit, dropped: 0 }
    }

    /// Takes the next unit.
    pub fn push(&mut self, u: Arc<Unit>) {
        if u.gap {
            self.clear();
        }
        if self.units.is_empty() && !u.key {
            self.dropped += 1;
            return;
        }
        self.bytes += u.bytes.len();
        self.units.push_back(u);
        while self.bytes > self.limit && self.units.len() > 1 {
            self.pop_front();
            // A buffer never starts mid-group of pictures.
            while self.units.front().is_some_and(|u| !u.key) {
                self.pop_front();
            }
        }
    }

    fn pop_front(&mut self) {
        if let Some(u) = self.units.pop_front() {
            self.bytes -= u.bytes.len();
            self.dropped += 1;
        }
    }

    /// Forgets everything (a new stream).
    pub fn clear(&mut self) {
        self.units.clear();
        self.bytes = 0;
    }

    /// The units from the last keyframe that arrived at or before `t_ns` to the newest, and
    /// whether the buffer reached back that far (`false`: they start at its oldest
    /// keyframe, after `t_ns`).
    pub fn since(&self, t_ns: u64) -> (Vec<Arc<Unit>>, bool) {
        let at = self.units.iter().rposition(|u| u.key && u.mono_ns <= t_ns);
        let from = at.unwrap_or(0);
        (self.units.iter().skip(from).cloned().collect(), at.is_some())
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Units held.
    pub fn len(&self) -> usize {
        self.units.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.units.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(t: u64, key: bool, size: usize) -> Arc<Unit> {
        Arc::new(Unit { bytes: vec![0; size], mono_ns: t, pts: Some(t), key, gap: false })
    }

    #[test]
    fn a_clip_starts_at_the_last_keyframe_at_or_before_its_start() {
        let mut p = PreRoll::new(1 << 20);
        // Units before the first keyframe cannot start anything.
        p.push(unit(5, false, 10));
        for t in 10..40 {
            p.push(unit(t, t % 10 == 0, 10));
        }
        assert_eq!((p.len(), p.dropped), (30, 1));
        let (u, reached) = p.since(25);
        assert_eq!((u[0].mono_ns, u.len(), reached), (20, 20, true));
        let (u, _) = p.since(30);
        assert_eq!(u[0].mono_ns, 30);
        // Before the buffer's first keyframe: from it, said.
        let (u, reached) = p.since(3);
        assert_eq!((u[0].mono_ns, reached), (10, false));
    }

    #[test]
    fn the_bound_holds_and_the_buffer_still_starts_at_a_keyframe() {
        let mut p = PreRoll::new(250);
        for t in 0..40 {
            p.push(unit(t, t % 10 == 0, 10));
        }
        assert!(p.bytes() <= 250, "{}", p.bytes());
        assert!(p.since(0).0[0].key);
        assert_eq!(p.since(0).0[0].mono_ns, 20, "groups 0 and 10 went whole");
        // A keyframe bigger than the bound is kept alone (the newest is always kept).
        p.push(unit(40, true, 1000));
        assert_eq!((p.len(), p.bytes()), (1, 1000));
        // A gap starts over, at the next keyframe.
        p.push(Arc::new(Unit { bytes: vec![0; 10], mono_ns: 41, pts: None, key: false, gap: true }));
        assert!(p.is_empty());
        p.push(unit(42, true, 10));
        assert_eq!(p.since(100).0.len(), 1);
    }
}

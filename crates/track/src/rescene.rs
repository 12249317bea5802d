//! A camera's scene changed while it runs ([`Tracker::set_scene`]): its zones, lines and
//! loitering times replaced, its tracks kept. What a track had in a zone or line of the same
//! name it keeps (inside, since when, loitered; its side of the line); in a new one it starts
//! afresh (a track already standing in a new zone enters it at its next frame); a removed
//! one is forgotten without events. Each line's crossings go on under its name, so counters
//! fed from them never go back.

use super::{line, zone, LineCount, Scene, Tracker};

/// For each item of `new`, the index of the item of the same name in `old`.
fn same_names(old: &[&str], new: &[&str]) -> Vec<Option<usize>> {
    new.iter().map(|n| old.iter().position(|o| o == n)).collect()
}

impl Tracker {
    /// Replaces the camera's zones, loitering times and lines with `scene`'s (its
    /// calibration stays); see the module's documentation.
    pub fn set_scene(&mut self, mut scene: Scene) {
        scene.zones.truncate(zone::MAX_ZONES);
        scene.lines.truncate(line::MAX_LINES);
        scene.loiter_ns.resize(scene.zones.len(), None);
        let old_zones: Vec<&str> = self.zones.iter().map(|z| z.name.as_str()).collect();
        let new_zones: Vec<&str> = scene.zones.iter().map(|z| z.name.as_str()).collect();
        let zmap = same_names(&old_zones, &new_zones);
        let old_lines: Vec<&str> = self.scene.lines.iter().map(|l| l.name.as_str()).collect();
        let new_lines: Vec<&str> = scene.lines.iter().map(|l| l.name.as_str()).collect();
        let lmap = same_names(&old_lines, &new_lines);
        let bit = |mask: u64, i: usize| mask & (1u64 << i) != 0;
        for t in &mut self.tracks {
            let (mut zones, mut loitered) = (0u64, 0u64);
            let mut since = vec![0; zmap.len()];
            for (i, o) in zmap.iter().enumerate() {
                let Some(o) = *o else { continue };
                zones |= u64::from(bit(t.zones, o)) << i;
                loitered |= u64::from(bit(t.loitered, o)) << i;
                since[i] = t.zone_since.get(o).copied().unwrap_or(0);
            }
            (t.zones, t.loitered, t.zone_since) = (zones, loitered, since);
            t.lines = lmap.iter().map(|o| o.and_then(|o| t.lines.get(o).cloned()).unwrap_or_default()).collect();
        }
        let mut counts: Vec<LineCount> = self
            .line_counts
            .iter()
            .filter_map(|c| lmap.iter().position(|o| *o == Some(c.line)).map(|line| LineCount { line, ..*c }))
            .collect();
        counts.sort_by_key(|c| (c.line, c.class_id));
        self.line_counts = counts;
        self.zones = std::mem::take(&mut scene.zones);
        self.scene.loiter_ns = scene.loiter_ns;
        self.scene.lines = scene.lines;
    }
}

#[cfg(test)]
mod tests {
    use super::super::{EventKind, Observation, Scene, TrackParams, Tracker, Zone};
    use crate::line::LineSpec;

    fn zone(name: &str, x0: f32, x1: f32) -> Zone {
        Zone { name: name.into(), points: vec![(x0, 0.0), (x1, 0.0), (x1, 100.0), (x0, 100.0)] }
    }

    fn walk(t: &mut Tracker, from: u64, to: u64, x: impl Fn(u64) -> f32) -> Vec<EventKind> {
        let mut ev = vec![];
        for i in from..to {
            let x = x(i);
            let o = Observation { bbox: [x, 40.0, x + 10.0, 90.0], score: 0.9, class_id: 0 };
            t.update(i * 100_000_000, &[o], &mut ev);
        }
        ev.into_iter().map(|e| e.kind).collect()
    }

    #[test]
    fn a_track_keeps_what_it_had_in_a_zone_or_line_of_the_same_name_and_counts_go_on() {
        let exit = LineSpec::parse("exit=50,0,50,100").unwrap().line;
        let scene = Scene { zones: vec![zone("left", 0.0, 40.0)], lines: vec![exit.clone()], ..Scene::default() };
        let mut t = Tracker::with_scene(TrackParams::default(), scene);
        // Left to right across the line at x=50: one crossing.
        let ev = walk(&mut t, 0, 20, |i| i as f32 * 5.0);
        assert_eq!(ev.iter().filter(|k| **k == EventKind::CrossedLine).count(), 1, "{ev:?}");
        assert_eq!(t.line_counts()[0].counts, [0, 1], "out: from its right-hand side to its left");
        // A zone added in front of the line, the old zone gone, the line kept under its name
        // but redrawn further right.
        let moved = LineSpec::parse("exit=150,0,150,100").unwrap().line;
        t.set_scene(Scene { zones: vec![zone("right", 110.0, 300.0)], lines: vec![moved], ..Scene::default() });
        assert_eq!(t.zones().iter().map(|z| z.name.as_str()).collect::<Vec<_>>(), ["right"]);
        let ev = walk(&mut t, 20, 40, |i| i as f32 * 5.0);
        assert_eq!(ev.iter().filter(|k| **k == EventKind::EnteredZone).count(), 1, "{ev:?}");
        assert_eq!(ev.iter().filter(|k| **k == EventKind::LeftZone).count(), 0, "{ev:?}");
        assert_eq!(ev.iter().filter(|k| **k == EventKind::New).count(), 0, "the track went on: {ev:?}");
        // The line's count went on from 1.
        assert_eq!(t.line_counts()[0].counts, [0, 2]);
        // The line removed: its count goes with it.
        t.set_scene(Scene { zones: vec![zone("right", 110.0, 300.0)], ..Scene::default() });
        assert!(t.line_counts().is_empty() && t.lines().is_empty());
    }
}

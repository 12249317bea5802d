//! What a seen track's box means for the camera's zones (entered, left, loitering), lines
//! (crossed, counted) and ground speed: one frame's step for one track.

use crate::line::Direction;
use crate::{EventKind, LineCount, Scene, Track, TrackEvent, Zone};

/// The camera's side of the step: its zones and scene, and its line counters.
pub(crate) struct Seen<'a> {
    pub zones: &'a [Zone],
    pub scene: &'a Scene,
    pub counts: &'a mut Vec<LineCount>,
}

impl Seen<'_> {
    /// Track `tr`, confirmed, was seen at `t_ns` with box `b` (`confirmed_now`: in this very
    /// frame): appends its events (zones entered and left, loitering, lines crossed).
    pub fn observe(
        &mut self,
        tr: &mut Track,
        t_ns: u64,
        b: &[f32; 4],
        confirmed_now: bool,
        events: &mut Vec<TrackEvent>,
    ) {
        if let Some(c) = &self.scene.calibration {
            if let Some(g) = c.ground(crate::geom::RefPoint::Bottom.of(b)) {
                tr.speed_kmh = tr.odometer.update(t_ns, g).or(tr.speed_kmh);
            }
        }
        let foot = ((b[0] + b[2]) / 2.0, b[3]);
        // A track in a zone leaves it only once its feet are farther out than the band
        // lines use: feet jittering on a zone's edge are not a stream of entries and exits.
        let band = (crate::line::BAND_OF_HEIGHT * (b[3] - b[1])).max(crate::line::MIN_BAND);
        for (z, zone) in self.zones.iter().enumerate() {
            let bit = 1u64 << z;
            let was = tr.zones & bit != 0;
            let inside =
                zone.contains(foot.0, foot.1) || (was && crate::geom::polygon_distance(&zone.points, foot) <= band);
            if inside != was {
                tr.zones ^= bit;
                let mut e = tr.event(if inside { EventKind::EnteredZone } else { EventKind::LeftZone }, Some(z), t_ns);
                if inside {
                    tr.zone_since[z] = t_ns;
                } else {
                    e.duration_ns = Some(t_ns.saturating_sub(tr.zone_since[z]));
                    tr.loitered &= !bit;
                }
                events.push(e);
            }
            let stayed = t_ns.saturating_sub(tr.zone_since[z]);
            let watch = self.scene.loiter_ns.get(z).copied().flatten();
            if inside && tr.loitered & bit == 0 && watch.is_some_and(|after| stayed >= after) {
                tr.loitered |= bit;
                let mut e = tr.event(EventKind::Loitering, Some(z), t_ns);
                e.duration_ns = Some(stayed);
                events.push(e);
            }
        }
        for (i, line) in self.scene.lines.iter().enumerate() {
            // A track confirmed now starts from its first detection: a crossing while it was
            // tentative counts now.
            if confirmed_now {
                line.step(&mut tr.lines[i], &tr.first_box);
            }
            let Some(dir) = line.step(&mut tr.lines[i], b) else { continue };
            let k = match self.counts.iter().position(|c| c.line == i && c.class_id == tr.class_id) {
                Some(k) => k,
                None => {
                    let at = self.counts.partition_point(|c| (c.line, c.class_id) < (i, tr.class_id));
                    self.counts.insert(at, LineCount { line: i, class_id: tr.class_id, counts: [0, 0] });
                    at
                }
            };
            self.counts[k].counts[(dir == Direction::Out) as usize] += 1;
            let mut e = tr.event(EventKind::CrossedLine, None, t_ns);
            e.line = Some((i, dir));
            events.push(e);
        }
    }
}

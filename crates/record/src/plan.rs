//! When a camera's clip starts and ends, from the tracker's events.
//!
//! A track *counts* when its label passes `--record-labels` and, with `--record-zones`,
//! once it entered one of those zones (its `entered_zone` event), else from its `new`
//! event. The first counting track opens a clip starting `pre` before it was first seen
//! (for a zone: before it entered); while any counting track lives, the clip goes on; when
//! the last one ends, the clip is due to close `post` after that track was last seen, unless
//! another counting track comes first (then it goes on: overlapping events are one clip).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use zcpipe_core::schema::EventJson;

/// What an event asks of the camera's recording.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Open a clip starting at this time (CLOCK_MONOTONIC ns).
    Open {
        /// Where the clip starts (before the pre-roll's keyframe alignment).
        from_ns: u64,
    },
    /// The clip now ends at this time, unless another track comes.
    CloseAt {
        /// When.
        end_ns: u64,
    },
}

/// Which events record (`--record-labels`, `--record-zones`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Filters {
    /// Only these labels (`None`: all).
    pub labels: Option<BTreeSet<String>>,
    /// Only tracks in one of these zones (`None`: no zone needed).
    pub zones: Option<BTreeSet<String>>,
}

pub use zcpipe_clips::ClipMeta;

/// One camera's plan (see the module's documentation).
#[derive(Debug)]
pub struct Planner {
    pre_ns: u64,
    post_ns: u64,
    /// Counting tracks alive, by id.
    live: BTreeMap<u64, ()>,
    /// A clip is open.
    open: bool,
    /// When the open clip ends (its last counting track ended).
    close_at: Option<u64>,
    /// The open clip's tracks, labels and zones.
    pub meta: ClipMeta,
}

impl Planner {
    /// A camera's plan with `pre` and `post`.
    pub fn new(pre: Duration, post: Duration) -> Planner {
        Planner {
            pre_ns: pre.as_nanos() as u64,
            post_ns: post.as_nanos() as u64,
            live: BTreeMap::new(),
            open: false,
            close_at: None,
            meta: ClipMeta::default(),
        }
    }

    /// Takes one event of the camera.
    pub fn event(&mut self, e: &EventJson, f: &Filters) -> Option<Action> {
        let label_ok = f.labels.as_ref().is_none_or(|l| l.contains(&e.label));
        let counting = self.live.contains_key(&e.track_id);
        match e.event.as_str() {
            "new" if label_ok && f.zones.is_none() => self.start(e, e.first_seen_ns),
            "entered_zone" => {
                let zone = e.zone.clone().unwrap_or_default();
                let zone_ok = f.zones.as_ref().is_none_or(|z| z.contains(&zone));
                if counting {
                    self.meta.zones.insert(zone);
                    None
                } else if label_ok && f.zones.is_some() && zone_ok {
                    let a = self.start(e, e.timestamp_ns);
                    self.meta.zones.insert(zone);
                    a
                } else {
                    None
                }
            }
            "end" if counting => {
                self.live.remove(&e.track_id);
                if self.live.is_empty() {
                    let end_ns = e.last_seen_ns.saturating_add(self.post_ns);
                    self.close_at = Some(end_ns);
                    return Some(Action::CloseAt { end_ns });
                }
                None
            }
            _ => None,
        }
    }

    fn start(&mut self, e: &EventJson, at_ns: u64) -> Option<Action> {
        self.live.insert(e.track_id, ());
        self.close_at = None;
        self.meta.labels.insert(e.label.clone());
        self.meta.tracks.insert(e.track_id);
        if self.open {
            return None;
        }
        self.open = true;
        Some(Action::Open { from_ns: at_ns.saturating_sub(self.pre_ns) })
    }

    /// Whether the open clip's end has come, given the newest unit's time.
    pub fn due(&self, now_ns: u64) -> bool {
        self.close_at.is_some_and(|c| now_ns >= c)
    }

    /// The clip closed (due, or cut short): its metadata; the next counting track opens a
    /// new one. Tracks still alive (a clip cut short by a new stream) start the next one.
    pub fn closed(&mut self) -> ClipMeta {
        self.open = false;
        self.close_at = None;
        std::mem::take(&mut self.meta)
    }

    /// After a clip was cut (a new stream): whether tracks still count, and so a new clip
    /// goes on for them (opened by the caller).
    pub fn resume(&mut self) -> bool {
        self.open = !self.live.is_empty();
        self.open
    }

    /// Whether a clip is open.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Forgets every track (the camera's stream ended).
    pub fn reset(&mut self) {
        self.live.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: &str, track: u64, label: &str, zone: Option<&str>, first: u64, last: u64) -> EventJson {
        EventJson {
            event: event.into(),
            camera: "cam0".into(),
            track_id: track,
            label: label.into(),
            class_id: 0,
            score: 0.9,
            zone: zone.map(String::from),
            first_seen_ns: first,
            last_seen_ns: last,
            timestamp_ns: last,
            seq: None,
            bbox: [0.0; 4],
            ..Default::default()
        }
    }

    const S: u64 = 1_000_000_000;

    #[test]
    fn overlapping_tracks_are_one_clip_from_pre_before_the_first_to_post_after_the_last() {
        let mut p = Planner::new(Duration::from_secs(5), Duration::from_secs(5));
        let f = Filters::default();
        assert_eq!(p.event(&ev("new", 1, "person", None, 20 * S, 20 * S), &f), Some(Action::Open { from_ns: 15 * S }));
        assert_eq!(p.event(&ev("new", 2, "car", None, 25 * S, 25 * S), &f), None);
        assert_eq!(p.event(&ev("end", 1, "person", None, 20 * S, 30 * S), &f), None);
        assert_eq!(p.event(&ev("end", 2, "car", None, 25 * S, 32 * S), &f), Some(Action::CloseAt { end_ns: 37 * S }));
        assert!(!p.due(36 * S) && p.due(37 * S));
        // A track before the end keeps the clip going.
        assert_eq!(p.event(&ev("new", 3, "person", None, 35 * S, 35 * S), &f), None);
        assert!(!p.due(40 * S));
        p.event(&ev("end", 3, "person", None, 35 * S, 36 * S), &f);
        assert!(p.due(41 * S));
        let meta = p.closed();
        assert_eq!(meta.tracks.into_iter().collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(meta.labels.into_iter().collect::<Vec<_>>(), ["car", "person"]);
        // The next track opens the next clip.
        assert_eq!(p.event(&ev("new", 4, "person", None, 60 * S, 60 * S), &f), Some(Action::Open { from_ns: 55 * S }));
    }

    #[test]
    fn labels_and_zones_choose_what_records() {
        let f = Filters { labels: Some(["person".to_string()].into()), zones: Some(["door".to_string()].into()) };
        let mut p = Planner::new(Duration::from_secs(2), Duration::from_secs(1));
        assert_eq!(p.event(&ev("new", 1, "person", None, 10 * S, 10 * S), &f), None, "not in the zone yet");
        assert_eq!(p.event(&ev("entered_zone", 2, "car", Some("door"), 10 * S, 11 * S), &f), None, "not a person");
        assert_eq!(p.event(&ev("entered_zone", 1, "person", Some("yard"), 10 * S, 11 * S), &f), None, "another zone");
        assert_eq!(
            p.event(&ev("entered_zone", 1, "person", Some("door"), 10 * S, 12 * S), &f),
            Some(Action::Open { from_ns: 10 * S }),
            "pre-roll before it entered"
        );
        p.event(&ev("entered_zone", 1, "person", Some("yard"), 10 * S, 13 * S), &f);
        assert_eq!(p.event(&ev("end", 2, "car", None, 10 * S, 14 * S), &f), None, "a track that never counted");
        assert_eq!(
            p.event(&ev("end", 1, "person", None, 10 * S, 14 * S), &f),
            Some(Action::CloseAt { end_ns: 15 * S })
        );
        let meta = p.closed();
        assert_eq!(meta.zones.into_iter().collect::<Vec<_>>(), ["door", "yard"]);
    }
}

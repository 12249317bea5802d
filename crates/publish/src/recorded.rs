//! The recorder's clips announced: with `--clips DIR` (the recorder's `--record-dir`; `zcpipe
//! run` passes it), the publish stage reads the record folder's index about once a second
//! ([`POLL`]) and sends a `clip` line ([`ClipJson`]) for each clip that closed: to the
//! detections socket's clients (`zcpipe watch --events` prints its path), to MQTT (the
//! camera's events topic, so Home Assistant's event entity gets its id and URL) and to the
//! web view's `/metrics`. The index is the contract between the two processes: the
//! recorder writes each clip's row when it opens and when it closes ([`zcpipe_clips`]), and
//! this reader only reads (a read-only connection; a recorder not started yet is looked for
//! again at the next poll). Clips closed before the publish stage started are not
//! announced.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use zcpipe_clips::{Clip, Index, Kind, State};
use zcpipe_core::schema::ClipJson;

/// How often the index is read.
pub const POLL: Duration = Duration::from_secs(1);

/// How long the stream's end waits for the clips being recorded to close (under the
/// supervisor's 5 s watchdog).
pub const LAST_WAIT: Duration = Duration::from_secs(4);

/// Rows read at one look at most (more wait for the next).
const BATCH: u32 = 256;

/// The reader of the record folder's index (see the module's documentation).
pub struct ClipWatch {
    dir: PathBuf,
    /// The web view serves the clips: each line carries its `/clips/<id>.mp4`.
    urls: bool,
    index: Option<Index>,
    /// The highest id looked at (`None` before the first look).
    seen: Option<i64>,
    /// Clips seen recording: announced when they close.
    open: BTreeSet<i64>,
    next: Instant,
    /// The last failure said (said once until another).
    said: Option<String>,
}

impl ClipWatch {
    /// A reader of the index in `dir`; `urls`: the web view serves the clips.
    pub fn new(dir: PathBuf, urls: bool) -> ClipWatch {
        ClipWatch { dir, urls, index: None, seen: None, open: BTreeSet::new(), next: Instant::now(), said: None }
    }

    /// The clips that closed since the last look, oldest first (nothing when the last look
    /// was under [`POLL`] ago). Never fails: a problem with the index is said once and the
    /// next poll tries again.
    pub fn poll(&mut self) -> Vec<ClipJson> {
        if Instant::now() < self.next {
            return vec![];
        }
        self.next = Instant::now() + POLL;
        match self.look() {
            Ok(v) => {
                self.said = None;
                v
            }
            Err(e) => {
                let why = format!("{e:#}");
                if self.said.as_deref() != Some(why.as_str()) {
                    log::info!("clips: cannot read the recorder's index yet ({why}); looking again every second");
                    self.said = Some(why);
                }
                self.index = None;
                vec![]
            }
        }
    }

    /// At the stream's end: the clips that closed, waiting up to [`LAST_WAIT`] for those
    /// still being recorded (the recorder closes a camera's clip when its stream ends, just
    /// before), so a run's last clip is announced too.
    pub fn last(&mut self) -> Vec<ClipJson> {
        let until = Instant::now() + LAST_WAIT;
        let mut out = vec![];
        loop {
            self.next = Instant::now();
            out.extend(self.poll());
            if self.open.is_empty() || Instant::now() >= until {
                return out;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn look(&mut self) -> anyhow::Result<Vec<ClipJson>> {
        if self.index.is_none() {
            if !self.dir.join(zcpipe_clips::FILE).exists() {
                anyhow::bail!("{} is not there", self.dir.join(zcpipe_clips::FILE).display());
            }
            self.index = Some(Index::open_read(&self.dir)?);
        }
        let Some(ix) = &self.index else { return Ok(vec![]) };
        // Worked on copies: a read that fails leaves the state as it was, for the next poll.
        let (mut seen, mut open, mut closed) = (self.seen, self.open.clone(), vec![]);
        match seen {
            None => {
                // The first look: what is recording now is announced when it closes.
                let (max, recording) = ix.watermark()?;
                seen = Some(max);
                open.extend(recording);
            }
            Some(last) => {
                let new = ix.after(last, BATCH)?;
                seen = Some(new.iter().map(|c| c.id).max().unwrap_or(last));
                // Continuous segments are not announced (one a minute says nothing).
                for c in new.into_iter().filter(|c| c.kind == Kind::Event) {
                    if c.state == State::Recording {
                        open.insert(c.id);
                    } else {
                        closed.push(c);
                    }
                }
            }
        }
        for id in open.clone() {
            match ix.get(id)? {
                Some(c) if c.state == State::Recording => {}
                Some(c) => {
                    open.remove(&id);
                    closed.push(c);
                }
                // Removed (retention, or a rebuilt index) before it was seen closed.
                None => {
                    open.remove(&id);
                }
            }
        }
        (self.seen, self.open) = (seen, open);
        closed.sort_by_key(|c| c.id);
        Ok(closed.into_iter().map(|c| self.line(c)).collect())
    }

    fn line(&self, c: Clip) -> ClipJson {
        ClipJson {
            camera: c.camera,
            id: c.id,
            start_ms: c.start_ms,
            end_ms: c.end_ms.unwrap_or(c.start_ms),
            complete: c.state == State::Complete,
            reason: c.reason,
            labels: c.labels,
            tracks: c.tracks,
            zones: c.zones,
            bytes: c.bytes,
            path: self.dir.join(&c.path).display().to_string(),
            url: self.urls.then(|| format!("/clips/{}.mp4", c.id)),
            thumbnail: (self.urls && self.dir.join(&c.path).with_extension("jpg").exists())
                .then(|| format!("/clips/{}.jpg", c.id)),
        }
    }
}

/// A clip's line for people: `clip front/2026-...mp4 (12.4 s, 3.1 MB; person #3, car #4)`.
pub fn human_clip(c: &ClipJson) -> String {
    let what = if c.labels.is_empty() { String::new() } else { format!("; {}", c.labels.join(", ")) };
    let tracks: Vec<String> = c.tracks.iter().map(|t| format!("#{t}")).collect();
    let tracks = if tracks.is_empty() { String::new() } else { format!(" {}", tracks.join(" ")) };
    let cut = c.reason.as_ref().map(|r| format!(", incomplete: {r}")).unwrap_or_default();
    format!(
        "clip {} ({:.1} s, {:.1} MB{what}{tracks}{cut})",
        c.path,
        (c.end_ms - c.start_ms).max(0) as f64 / 1000.0,
        c.bytes as f64 / 1e6
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use zcpipe_clips::{ClipMeta, Closed, NewClip};

    fn open(ix: &mut Index, dir: &std::path::Path, cam: &str, start: i64) -> i64 {
        let path = format!("{cam}/{}", zcpipe_clips::file_name(start));
        std::fs::create_dir_all(dir.join(cam)).unwrap();
        std::fs::write(dir.join(&path), b"0123").unwrap();
        ix.open_clip(&NewClip {
            camera: cam,
            start_ms: start,
            path: &path,
            codec: "h264",
            size: (64, 48),
            kind: zcpipe_clips::Kind::Event,
        })
        .unwrap()
    }

    fn close(ix: &mut Index, id: i64, end: i64) {
        let meta = ClipMeta { labels: ["person".to_string()].into(), tracks: [3].into(), zones: Default::default() };
        ix.close_clip(id, &Closed { end_ms: end, state: State::Complete, reason: None, bytes: 4, meta }).unwrap();
    }

    #[test]
    fn each_clip_is_announced_once_when_it_closes_never_one_closed_before_the_start() {
        let d = tempfile::tempdir().unwrap();
        let mut w = ClipWatch::new(d.path().to_path_buf(), true);
        assert!(w.poll().is_empty(), "no index yet");
        let (mut ix, _) = Index::open(d.path()).unwrap();
        let old = open(&mut ix, d.path(), "cam0", 1_000);
        close(&mut ix, old, 2_000);
        let live = open(&mut ix, d.path(), "cam0", 3_000);
        w.next = Instant::now();
        assert!(w.poll().is_empty(), "the first look announces nothing");
        let other = open(&mut ix, d.path(), "cam1", 4_000);
        close(&mut ix, other, 9_500);
        w.next = Instant::now();
        let got = w.poll();
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].id, got[0].camera.as_str(), got[0].end_ms), (other, "cam1", 9_500));
        assert_eq!(got[0].url.as_deref(), Some(format!("/clips/{other}.mp4").as_str()));
        assert!(got[0].path.starts_with(d.path().to_str().unwrap()) && got[0].path.ends_with(".mp4"));
        assert!(human_clip(&got[0]).contains("(5.5 s, 0.0 MB; person #3)"), "{}", human_clip(&got[0]));
        close(&mut ix, live, 8_000);
        w.next = Instant::now();
        let got: Vec<i64> = w.poll().iter().map(|c| c.id).collect();
        assert_eq!(got, [live], "the clip that was recording at the first look, once closed");
        w.next = Instant::now();
        assert!(w.poll().is_empty(), "nothing twice");
    }
}

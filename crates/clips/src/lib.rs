//! The index of recorded clips: an SQLite database, `DIR/index.sqlite3`, one row per clip,
//! written by the recorder (`zcpipe stage record`) and read by the web view.
//!
//! A clip's row is written when the clip opens (`state` `recording`, its path, camera and
//! start) and again when it closes (`complete`, or `incomplete` with the reason: the disk
//! filled, the camera's stream was cut), each in a transaction. The database runs in WAL
//! mode with `synchronous=NORMAL`, which SQLite keeps consistent through a crash or a power
//! cut (a transaction is there whole or not at all). At start-up ([`Index::open`]):
//! - rows still `recording` are clips a recorder that died left: they become `incomplete`
//!   ("the recorder stopped before the clip ended") with the bytes their file has (a
//!   fragmented MP4 plays up to its last whole fragment);
//! - a database that does not open or fails SQLite's `quick_check` is moved aside
//!   (`index.sqlite3.corrupt-UNIXMS`, said in one line) and rebuilt from the clip files,
//!   each an `incomplete` row ("recovered from its file").
//!
//! Retention ([`Index::retain`]) removes the oldest clips by age and by total size, file
//! first, then its row (a file without a row is never left; a row without its file is
//! removed with it).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rusqlite::{params, Connection, OptionalExtension};

/// The database's name in the record folder.
pub const FILE: &str = "index.sqlite3";

/// The schema's version (`PRAGMA user_version`).
const SCHEMA_VERSION: i64 = 2;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS clips (
    id       INTEGER PRIMARY KEY,
    camera   TEXT NOT NULL,
    start_ms INTEGER NOT NULL,
    end_ms   INTEGER,
    state    TEXT NOT NULL CHECK (state IN ('recording', 'complete', 'incomplete')),
    reason   TEXT,
    labels   TEXT NOT NULL DEFAULT '[]',
    tracks   TEXT NOT NULL DEFAULT '[]',
    zones    TEXT NOT NULL DEFAULT '[]',
    bytes    INTEGER NOT NULL DEFAULT 0,
    path     TEXT NOT NULL UNIQUE,
    codec    TEXT,
    width    INTEGER,
    height   INTEGER,
    kind     TEXT NOT NULL DEFAULT 'event' CHECK (kind IN ('event', 'segment'))
);
CREATE INDEX IF NOT EXISTS clips_by_camera ON clips (camera, start_ms);
CREATE INDEX IF NOT EXISTS clips_by_start ON clips (start_ms);
CREATE TABLE IF NOT EXISTS cameras (
    camera     TEXT PRIMARY KEY,
    units      INTEGER NOT NULL DEFAULT 0,
    gaps       INTEGER NOT NULL DEFAULT 0,
    drops      INTEGER NOT NULL DEFAULT 0,
    updated_ms INTEGER NOT NULL
);
";

/// A camera's recording counters, as the recorder last wrote them (`cameras` table; since
/// the recorder started).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CameraStats {
    /// The camera.
    pub camera: String,
    /// Access units received from its capture stage.
    pub units: u64,
    /// Units its capture stage dropped before they came (the recorder was slow or away).
    pub gaps: u64,
    /// Units a clip dropped (ffmpeg or the disk too slow).
    pub drops: u64,
}

/// What a clip is: an event's (from the tracker's events, with pre- and post-roll) or a
/// continuous recording's segment (`--record-continuous`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// An event clip.
    #[default]
    Event,
    /// A segment of continuous recording.
    Segment,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Event => "event",
            Kind::Segment => "segment",
        }
    }
}

/// The columns a [`Clip`] is read from, in [`row`]'s order.
const COLUMNS: &str =
    "id, camera, start_ms, end_ms, state, reason, labels, tracks, zones, bytes, path, codec, width, height, kind";

/// A clip's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Being written.
    Recording,
    /// Closed as planned.
    Complete,
    /// Cut short (the reason says why); its file plays up to its last fragment.
    Incomplete,
}

impl State {
    fn name(self) -> &'static str {
        match self {
            State::Recording => "recording",
            State::Complete => "complete",
            State::Incomplete => "incomplete",
        }
    }

    fn from_name(s: &str) -> State {
        match s {
            "recording" => State::Recording,
            "complete" => State::Complete,
            _ => State::Incomplete,
        }
    }
}

/// One clip's row.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Clip {
    /// Its id.
    pub id: i64,
    /// Its camera.
    pub camera: String,
    /// Its first picture, Unix ms.
    pub start_ms: i64,
    /// Its last picture, Unix ms (`None` while recording).
    pub end_ms: Option<i64>,
    /// Its state.
    pub state: State,
    /// Why it is incomplete.
    pub reason: Option<String>,
    /// The labels of its tracks.
    pub labels: Vec<String>,
    /// Its tracks' ids.
    pub tracks: Vec<u64>,
    /// The zones its tracks entered.
    pub zones: Vec<String>,
    /// Its file's size.
    pub bytes: u64,
    /// Its file, relative to the record folder (`CAMERA/NAME.mp4`).
    pub path: String,
    /// Its codec (`h264`, `hevc`).
    pub codec: Option<String>,
    /// Its picture size.
    pub width: Option<u32>,
    /// Its picture size.
    pub height: Option<u32>,
    /// An event's clip or a continuous segment.
    #[serde(default)]
    pub kind: Kind,
}

/// Which cameras' clips [`Index::retain`] looks at.
#[derive(Clone, Copy, Debug)]
pub enum Scope<'a> {
    /// Every camera's.
    All,
    /// One camera's.
    Camera(&'a str),
    /// Every camera's but these (those with rules of their own).
    AllBut(&'a [String]),
}

impl Scope<'_> {
    fn holds(&self, camera: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Camera(c) => *c == camera,
            Scope::AllBut(v) => !v.iter().any(|c| c == camera),
        }
    }
}

/// What a clip is when it opens.
#[derive(Clone, Debug, PartialEq)]
pub struct NewClip<'a> {
    /// Its camera.
    pub camera: &'a str,
    /// Its first picture, Unix ms.
    pub start_ms: i64,
    /// Its file, relative to the record folder.
    pub path: &'a str,
    /// Its codec.
    pub codec: &'a str,
    /// Its picture size.
    pub size: (u32, u32),
    /// An event's clip or a continuous segment.
    pub kind: Kind,
}

/// What a clip is when it closes.
#[derive(Clone, Debug, PartialEq)]
pub struct Closed {
    /// Its last picture, Unix ms.
    pub end_ms: i64,
    /// `Complete`, or `Incomplete` with `reason`.
    pub state: State,
    /// Why it is incomplete.
    pub reason: Option<String>,
    /// Its file's size.
    pub bytes: u64,
    /// Its tracks' labels, ids and zones.
    pub meta: ClipMeta,
}

/// What a clip holds: its tracks' labels, ids and the zones they entered.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClipMeta {
    /// The labels of its tracks.
    pub labels: std::collections::BTreeSet<String>,
    /// Its tracks' ids.
    pub tracks: std::collections::BTreeSet<u64>,
    /// The zones its tracks entered.
    pub zones: std::collections::BTreeSet<String>,
}

/// Why a clip's row could not be written.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Another row has this path.
    #[error("the clip file {0} is another clip's")]
    NameTaken(String),
    /// The database refused (a full disk, a read-only folder).
    #[error("the index: {0}")]
    Db(#[from] rusqlite::Error),
}

/// What [`Index::open`] found and did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Opened {
    /// Clips a recorder that died left `recording`, now `incomplete`.
    pub interrupted: u64,
    /// Where a corrupt database was moved, and how many clips were recovered from files.
    pub rebuilt: Option<(PathBuf, u64)>,
}

/// The index (see the module's documentation).
pub struct Index {
    db: Connection,
    dir: PathBuf,
}

impl Index {
    /// Opens (or makes) the index of the record folder `dir`: recovers what a recorder that
    /// died left, rebuilds a corrupt database from the files. Errors: the folder cannot be
    /// written (named, with the fix).
    pub fn open(dir: &Path) -> Result<(Index, Opened)> {
        let path = dir.join(FILE);
        let mut opened = Opened::default();
        let db = match connect(&path) {
            Ok(db) => db,
            Err(Connect::Failed(e)) => return Err(e),
            Err(Connect::Damaged(e)) => {
                let aside = dir.join(format!("{FILE}.corrupt-{}", unix_ms()));
                std::fs::rename(&path, &aside).with_context(|| {
                    format!("{}: {e}; and it cannot be moved aside: check the folder's permissions", path.display())
                })?;
                for ext in ["-wal", "-shm"] {
                    let side = dir.join(format!("{FILE}{ext}"));
                    let _ = std::fs::rename(&side, dir.join(format!("{}{ext}", aside.display())));
                }
                log::warn!(
                    "record: the index {} is damaged ({e}); moved aside to {} and rebuilt from the clip files",
                    path.display(),
                    aside.display()
                );
                let db = connect(&path).map_err(|c| match c {
                    Connect::Damaged(e) => anyhow::anyhow!("{e}"),
                    Connect::Failed(e) => e,
                })?;
                let mut ix = Index { db, dir: dir.to_path_buf() };
                let n = ix.rebuild()?;
                opened.rebuilt = Some((aside, n));
                return Ok((ix, opened));
            }
        };
        let ix = Index { db, dir: dir.to_path_buf() };
        opened.interrupted = ix.interrupted()?;
        Ok((ix, opened))
    }

    /// The index of `dir` opened to read only (the web view, tools, tests): no recovery, no
    /// schema change; a missing or damaged database is an error.
    pub fn open_read(dir: &Path) -> Result<Index> {
        let path = dir.join(FILE);
        let db = Connection::open_with_flags(
            &path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .with_context(|| format!("opening the index {}", path.display()))?;
        db.busy_timeout(std::time::Duration::from_secs(5))?;
        Ok(Index { db, dir: dir.to_path_buf() })
    }

    /// Rows left `recording` become `incomplete` with their file's size.
    fn interrupted(&self) -> Result<u64> {
        let rows: Vec<(i64, String)> = {
            let mut q = self.db.prepare("SELECT id, path FROM clips WHERE state = 'recording'")?;
            let r = q.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<rusqlite::Result<_>>()?;
            r
        };
        for (id, path) in &rows {
            let bytes = std::fs::metadata(self.dir.join(path)).map_or(0, |m| m.len());
            self.db.execute(
                "UPDATE clips SET state = 'incomplete', reason = 'the recorder stopped before the clip ended', bytes = ?1 WHERE id = ?2",
                params![bytes as i64, id],
            )?;
        }
        Ok(rows.len() as u64)
    }

    /// A row per clip file (`CAMERA/*.mp4`) with what its name and size tell.
    fn rebuild(&mut self) -> Result<u64> {
        let mut n = 0;
        let tx = self.db.transaction()?;
        for cam in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            if !cam.path().is_dir() {
                continue;
            }
            let camera = cam.file_name().to_string_lossy().into_owned();
            for f in std::fs::read_dir(cam.path()).into_iter().flatten().flatten() {
                let name = f.file_name().to_string_lossy().into_owned();
                let Some(start_ms) = start_of(&name) else { continue };
                let bytes = f.metadata().map_or(0, |m| m.len());
                tx.execute(
                    "INSERT OR IGNORE INTO clips (camera, start_ms, state, reason, bytes, path) VALUES (?1, ?2, 'incomplete', 'recovered from its file after the index was lost', ?3, ?4)",
                    params![camera, start_ms, bytes as i64, format!("{camera}/{name}")],
                )?;
                n += 1;
            }
        }
        tx.commit()?;
        Ok(n)
    }

    /// A clip opened: its row, `recording`. Returns its id. Errors: its path is another
    /// row's ([`OpenError::NameTaken`]: name it again), or the database's (a full disk).
    pub fn open_clip(&mut self, c: &NewClip<'_>) -> std::result::Result<i64, OpenError> {
        let tx = self.db.transaction()?;
        match tx.execute(
            "INSERT INTO clips (camera, start_ms, state, path, codec, width, height, kind) VALUES (?1, ?2, 'recording', ?3, ?4, ?5, ?6, ?7)",
            params![c.camera, c.start_ms, c.path, c.codec, c.size.0, c.size.1, c.kind.name()],
        ) {
            Err(rusqlite::Error::SqliteFailure(f, _)) if f.code == rusqlite::ErrorCode::ConstraintViolation => {
                return Err(OpenError::NameTaken(c.path.to_string()));
            }
            r => r?,
        };
        let id = tx.last_insert_rowid();
        tx.commit()?;
        Ok(id)
    }

    /// Clip `id` closed.
    pub fn close_clip(&mut self, id: i64, c: &Closed) -> Result<()> {
        let json = |v: Vec<serde_json::Value>| serde_json::Value::Array(v).to_string();
        let tx = self.db.transaction()?;
        tx.execute(
            "UPDATE clips SET end_ms = ?1, state = ?2, reason = ?3, bytes = ?4, labels = ?5, tracks = ?6, zones = ?7 WHERE id = ?8",
            params![
                c.end_ms,
                c.state.name(),
                c.reason,
                c.bytes as i64,
                json(c.meta.labels.iter().map(|l| l.as_str().into()).collect()),
                json(c.meta.tracks.iter().map(|&t| t.into()).collect()),
                json(c.meta.zones.iter().map(|z| z.as_str().into()).collect()),
                id
            ],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Clips, newest first: of `camera` (every camera with `None`), at most `limit`.
    pub fn list(&self, camera: Option<&str>, limit: u32) -> Result<Vec<Clip>> {
        let mut q = self.db.prepare(&format!(
            "SELECT {COLUMNS} FROM clips WHERE (?1 IS NULL OR camera = ?1) ORDER BY start_ms DESC, id DESC LIMIT ?2"
        ))?;
        let rows = q.query_map(params![camera, limit], row)?.collect::<rusqlite::Result<Vec<Clip>>>()?;
        Ok(rows)
    }

    /// Clips whose id is above `id`, lowest first, at most `limit`: what came since a
    /// reader last looked.
    pub fn after(&self, id: i64, limit: u32) -> Result<Vec<Clip>> {
        let mut q = self.db.prepare(&format!("SELECT {COLUMNS} FROM clips WHERE id > ?1 ORDER BY id ASC LIMIT ?2"))?;
        let rows = q.query_map(params![id, limit], row)?.collect::<rusqlite::Result<Vec<Clip>>>()?;
        Ok(rows)
    }

    /// Writes each camera's counters (one transaction).
    pub fn put_camera_stats(&mut self, stats: &[CameraStats]) -> Result<()> {
        let now = unix_ms();
        let tx = self.db.transaction()?;
        for c in stats {
            tx.execute(
                "INSERT INTO cameras (camera, units, gaps, drops, updated_ms) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (camera) DO UPDATE SET units = ?2, gaps = ?3, drops = ?4, updated_ms = ?5",
                params![c.camera, c.units as i64, c.gaps as i64, c.drops as i64, now],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Per camera: its clips in the folder now and their bytes, by camera name.
    pub fn totals_by_camera(&self) -> Result<Vec<(String, u64, u64)>> {
        let mut q = self
            .db
            .prepare("SELECT camera, COUNT(*), COALESCE(SUM(bytes), 0) FROM clips GROUP BY camera ORDER BY camera")?;
        let rows = q
            .query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64, r.get::<_, i64>(2)? as u64)))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// Each camera's counters as the recorder last wrote them, by camera name (none from an
    /// index written before the table existed).
    pub fn camera_stats(&self) -> Result<Vec<CameraStats>> {
        let mut q = match self.db.prepare("SELECT camera, units, gaps, drops FROM cameras ORDER BY camera") {
            Ok(q) => q,
            Err(rusqlite::Error::SqliteFailure(_, Some(m))) if m.contains("no such table") => return Ok(vec![]),
            Err(e) => return Err(e.into()),
        };
        let rows = q
            .query_map([], |r| {
                Ok(CameraStats {
                    camera: r.get(0)?,
                    units: r.get::<_, i64>(1)? as u64,
                    gaps: r.get::<_, i64>(2)? as u64,
                    drops: r.get::<_, i64>(3)? as u64,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// One clip.
    pub fn get(&self, id: i64) -> Result<Option<Clip>> {
        let mut q = self.db.prepare(&format!("SELECT {COLUMNS} FROM clips WHERE id = ?1"))?;
        Ok(q.query_row(params![id], row).optional()?)
    }

    /// Removes the oldest closed clips of `scope`: those that started before `before_ms`,
    /// then, while the scope's clips take more than `max_bytes`, the oldest but the newest
    /// closed one. A file is removed before its row. Returns (clips removed, their bytes).
    pub fn retain(&mut self, scope: Scope<'_>, before_ms: Option<i64>, max_bytes: Option<u64>) -> Result<(u64, u64)> {
        let mut victims: Vec<(i64, String, i64)> = vec![];
        {
            let mut q = self
                .db
                .prepare("SELECT id, path, bytes, start_ms, camera, state FROM clips ORDER BY start_ms ASC, id ASC")?;
            let rows: Vec<(i64, String, i64, i64, String, String)> = q
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)))?
                .collect::<rusqlite::Result<_>>()?;
            let rows: Vec<_> = rows.into_iter().filter(|r| scope.holds(&r.4)).collect();
            let mut left: i64 = rows.iter().map(|r| r.2).sum();
            let closed: Vec<_> = rows.into_iter().filter(|r| r.5 != State::Recording.name()).collect();
            let newest = closed.len().saturating_sub(1);
            for (k, (id, path, bytes, start, _, _)) in closed.into_iter().enumerate() {
                let old = before_ms.is_some_and(|b| start < b);
                // The newest clip stays, even alone over the bound: a bound smaller than one
                // clip keeps the latest event, never none.
                let over = k < newest && max_bytes.is_some_and(|m| left > m as i64);
                if !old && !over {
                    break;
                }
                left -= bytes;
                victims.push((id, path, bytes));
            }
        }
        let mut removed = (0, 0);
        for (id, path, bytes) in victims {
            match std::fs::remove_file(self.dir.join(&path)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    log::warn!("record: cannot remove old clip {}: {e}; it stays in the index", path);
                    continue;
                }
            }
            self.db.execute("DELETE FROM clips WHERE id = ?1", params![id])?;
            removed.0 += 1;
            removed.1 += bytes as u64;
        }
        Ok(removed)
    }

    /// Bytes of every clip.
    pub fn total_bytes(&self) -> Result<u64> {
        let t: i64 = self.db.query_row("SELECT COALESCE(SUM(bytes), 0) FROM clips", [], |r| r.get(0))?;
        Ok(t as u64)
    }
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Clip> {
    let list = |i: usize| -> rusqlite::Result<Vec<serde_json::Value>> {
        let s: String = r.get(i)?;
        Ok(serde_json::from_str(&s).unwrap_or_default())
    };
    let state: String = r.get(4)?;
    Ok(Clip {
        id: r.get(0)?,
        camera: r.get(1)?,
        start_ms: r.get(2)?,
        end_ms: r.get(3)?,
        state: State::from_name(&state),
        reason: r.get(5)?,
        labels: list(6)?.into_iter().filter_map(|v| v.as_str().map(String::from)).collect(),
        tracks: list(7)?.into_iter().filter_map(|v| v.as_u64()).collect(),
        zones: list(8)?.into_iter().filter_map(|v| v.as_str().map(String::from)).collect(),
        bytes: r.get::<_, i64>(9)? as u64,
        path: r.get(10)?,
        codec: r.get(11)?,
        width: r.get(12)?,
        height: r.get(13)?,
        kind: if r.get::<_, String>(14)? == "segment" { Kind::Segment } else { Kind::Event },
    })
}

/// Why the database could not be opened: damaged (it is rebuilt), or anything else (an
/// error: a folder that cannot be written, a newer zcpipe's schema, a busy or full disk).
enum Connect {
    Damaged(String),
    Failed(anyhow::Error),
}

/// `e` from SQLite while doing `what`: damage (corrupt, not a database) or another failure.
fn classify(e: rusqlite::Error, what: &str) -> Connect {
    match &e {
        rusqlite::Error::SqliteFailure(f, _)
            if matches!(f.code, rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase) =>
        {
            Connect::Damaged(format!("{what}: {e}"))
        }
        _ => Connect::Failed(anyhow::Error::new(e).context(what.to_string())),
    }
}

/// Opens the database at `path` in WAL mode, checks it (`quick_check`) and makes the schema.
fn connect(path: &Path) -> std::result::Result<Connection, Connect> {
    let what = format!("opening the index {}", path.display());
    let db = Connection::open(path).map_err(|e| classify(e, &what))?;
    db.busy_timeout(std::time::Duration::from_secs(5)).map_err(|e| classify(e, &what))?;
    let check: String = db.query_row("PRAGMA quick_check", [], |r| r.get(0)).map_err(|e| classify(e, &what))?;
    if check != "ok" {
        return Err(Connect::Damaged(format!("SQLite's quick_check says: {check}")));
    }
    db.pragma_update(None, "journal_mode", "WAL").map_err(|e| classify(e, &what))?;
    db.pragma_update(None, "synchronous", "NORMAL").map_err(|e| classify(e, &what))?;
    let version: i64 = db.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(|e| classify(e, &what))?;
    if version > SCHEMA_VERSION {
        return Err(Connect::Failed(anyhow::anyhow!(
            "the index {} was written by a newer zcpipe (schema {version}, this one reads {SCHEMA_VERSION}): use that zcpipe, or another --record-dir",
            path.display()
        )));
    }
    if version == 1 {
        // Version 2 adds continuous segments: every clip of a version 1 index is an event's.
        db.execute_batch(
            "ALTER TABLE clips ADD COLUMN kind TEXT NOT NULL DEFAULT 'event' CHECK (kind IN ('event', 'segment'))",
        )
        .map_err(|e| classify(e, "adding the kind of clip to the index"))?;
    }
    db.execute_batch(SCHEMA).map_err(|e| classify(e, "making the index's tables"))?;
    db.pragma_update(None, "user_version", SCHEMA_VERSION).map_err(|e| classify(e, &what))?;
    Ok(db)
}

/// The start of a clip file named `YYYY-MM-DDTHH-MM-SS.mmmZ.mp4` ([`file_name`]), Unix ms.
pub fn start_of(name: &str) -> Option<i64> {
    let stem = name.strip_suffix(".mp4")?;
    let (date, time) = stem.split_once('T')?;
    let time = time.strip_suffix('Z')?;
    let (hms, ms) = time.split_once('.')?;
    let iso = format!("{date}T{}.{ms}Z", hms.replace('-', ":"));
    let ts: jiff::Timestamp = iso.parse().ok()?;
    Some(ts.as_millisecond())
}

/// A clip's file name from its start (Unix ms): `2026-12-06T05-12-33.123Z.mp4`, in UTC,
/// sorting by time, with no `:` (which some file systems and tools refuse).
pub fn file_name(start_ms: i64) -> String {
    let ts = jiff::Timestamp::from_millisecond(start_ms).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    format!("{}.mp4", ts.strftime("%Y-%m-%dT%H-%M-%S.%3fZ"))
}

/// The time now, Unix ms.
pub fn unix_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_clip(ix: &mut Index, dir: &Path, cam: &str, start: i64, size: usize) -> i64 {
        let path = format!("{cam}/{}", file_name(start));
        std::fs::create_dir_all(dir.join(cam)).unwrap();
        std::fs::write(dir.join(&path), vec![0u8; size]).unwrap();
        ix.open_clip(&NewClip {
            camera: cam,
            start_ms: start,
            path: &path,
            codec: "h264",
            size: (768, 432),
            kind: Kind::Event,
        })
        .unwrap()
    }

    fn closed(end_ms: i64, bytes: u64) -> Closed {
        let meta = ClipMeta {
            labels: ["person".to_string()].into(),
            tracks: [3, 4].into(),
            zones: ["door".to_string()].into(),
        };
        Closed { end_ms, state: State::Complete, reason: None, bytes, meta }
    }

    #[test]
    fn names_carry_the_start_and_read_back() {
        assert_eq!(file_name(1_796_224_363_099), "2026-12-02T15-12-43.099Z.mp4");
        assert_eq!(start_of("2026-12-02T15-12-43.099Z.mp4"), Some(1_796_224_363_099));
        assert_eq!(start_of("holiday.mp4"), None);
        assert_eq!(start_of("2026-12-02T13-52-43.099Z.mkv"), None);
    }

    #[test]
    fn a_clip_is_recording_then_complete_and_a_dead_recorders_clip_becomes_incomplete() {
        let d = tempfile::tempdir().unwrap();
        let (mut ix, o) = Index::open(d.path()).unwrap();
        assert_eq!(o, Opened::default());
        let a = new_clip(&mut ix, d.path(), "cam0", 1_000_000, 100);
        assert_eq!(ix.get(a).unwrap().unwrap().state, State::Recording);
        ix.close_clip(a, &closed(1_010_000, 100)).unwrap();
        let c = ix.get(a).unwrap().unwrap();
        assert_eq!(
            (c.state, c.end_ms, c.labels.clone(), c.tracks.clone(), c.zones.clone(), c.bytes),
            (State::Complete, Some(1_010_000), vec!["person".to_string()], vec![3, 4], vec!["door".to_string()], 100)
        );
        // Killed mid-clip: the next start marks it, with its file's size then.
        let b = new_clip(&mut ix, d.path(), "cam0", 2_000_000, 4096);
        drop(ix);
        let (ix, o) = Index::open(d.path()).unwrap();
        assert_eq!(o.interrupted, 1);
        let c = ix.get(b).unwrap().unwrap();
        assert_eq!((c.state, c.bytes), (State::Incomplete, 4096));
        assert_eq!(c.reason.as_deref(), Some("the recorder stopped before the clip ended"));
        assert_eq!(ix.list(Some("cam0"), 10).unwrap().iter().map(|c| c.id).collect::<Vec<_>>(), [b, a]);
    }

    #[test]
    fn a_damaged_index_is_moved_aside_and_rebuilt_from_the_files() {
        let d = tempfile::tempdir().unwrap();
        let (mut ix, _) = Index::open(d.path()).unwrap();
        let a = new_clip(&mut ix, d.path(), "front", 1_796_224_363_099, 300);
        ix.close_clip(a, &closed(1_796_224_373_099, 300)).unwrap();
        drop(ix);
        for ext in ["-wal", "-shm"] {
            let _ = std::fs::remove_file(d.path().join(format!("{FILE}{ext}")));
        }
        std::fs::write(d.path().join(FILE), b"this is not a database, it is a file that lost its head").unwrap();
        let (ix, o) = Index::open(d.path()).unwrap();
        let (aside, n) = o.rebuilt.unwrap();
        assert_eq!(n, 1);
        assert!(aside.file_name().unwrap().to_string_lossy().starts_with("index.sqlite3.corrupt-"));
        let c = &ix.list(None, 10).unwrap()[0];
        assert_eq!(
            (c.camera.as_str(), c.start_ms, c.bytes, c.state),
            ("front", 1_796_224_363_099, 300, State::Incomplete)
        );
    }

    #[test]
    fn retention_removes_the_oldest_by_age_then_by_size_file_and_row_together() {
        let d = tempfile::tempdir().unwrap();
        let (mut ix, _) = Index::open(d.path()).unwrap();
        let mut ids = vec![];
        for k in 0..5 {
            let id = new_clip(&mut ix, d.path(), "cam0", 1000 * (k + 1), 100);
            ix.close_clip(id, &closed(1000 * (k + 1) + 500, 100)).unwrap();
            ids.push(id);
        }
        let live = new_clip(&mut ix, d.path(), "cam0", 9000, 100);
        // By age: the two that started before 3000.
        assert_eq!(ix.retain(Scope::All, Some(3000), None).unwrap(), (2, 200));
        // By size: 300 bytes of closed clips (the one being recorded counts once it closes),
        // at most 150: the two oldest go; the clip being recorded never does.
        assert_eq!(ix.retain(Scope::All, None, Some(150)).unwrap(), (2, 200));
        let left: Vec<i64> = ix.list(None, 10).unwrap().iter().map(|c| c.id).collect();
        assert_eq!(left, [live, ids[4]]);
        assert_eq!(ix.total_bytes().unwrap(), 100, "the closed clip left; the live one counts at its close");
        let files = std::fs::read_dir(d.path().join("cam0")).unwrap().count();
        assert_eq!(files, 2, "each removed row's file went with it");
    }

    #[test]
    fn a_reader_sees_what_came_after_its_last_id_and_each_camera_s_counters() {
        let d = tempfile::tempdir().unwrap();
        let (mut ix, _) = Index::open(d.path()).unwrap();
        let a = new_clip(&mut ix, d.path(), "cam0", 1000, 10);
        let b = new_clip(&mut ix, d.path(), "cam1", 2000, 10);
        ix.close_clip(b, &closed(2500, 10)).unwrap();
        let reader = Index::open_read(d.path()).unwrap();
        let got: Vec<(i64, State)> = reader.after(0, 10).unwrap().iter().map(|c| (c.id, c.state)).collect();
        assert_eq!(got, [(a, State::Recording), (b, State::Complete)]);
        assert!(reader.after(b, 10).unwrap().is_empty());
        assert_eq!(reader.camera_stats().unwrap(), []);
        let s = |camera: &str, units| CameraStats { camera: camera.into(), units, gaps: 1, drops: 2 };
        ix.put_camera_stats(&[s("cam1", 5), s("cam0", 7)]).unwrap();
        ix.put_camera_stats(&[s("cam0", 9)]).unwrap();
        assert_eq!(reader.camera_stats().unwrap(), [s("cam0", 9), s("cam1", 5)]);
        assert_eq!(reader.totals_by_camera().unwrap(), [("cam0".into(), 1, 0), ("cam1".into(), 1, 10)]);
    }

    #[test]
    fn retention_by_camera_touches_only_its_scope_and_keeps_the_newest_clip() {
        let d = tempfile::tempdir().unwrap();
        let (mut ix, _) = Index::open(d.path()).unwrap();
        for (k, cam) in ["door", "yard", "door", "yard"].iter().enumerate() {
            let start = 1000 * (k as i64 + 1);
            let id = new_clip(&mut ix, d.path(), cam, start, 100);
            ix.close_clip(id, &closed(start + 500, 100)).unwrap();
        }
        // Everything is old for the door: its newest is not spared by age, both go.
        assert_eq!(ix.retain(Scope::Camera("door"), Some(10_000), None).unwrap(), (2, 200));
        // A bound under one clip: the yard keeps its newest.
        assert_eq!(ix.retain(Scope::AllBut(&["door".into()]), None, Some(10)).unwrap(), (1, 100));
        let left: Vec<(String, i64)> = ix.list(None, 10).unwrap().into_iter().map(|c| (c.camera, c.start_ms)).collect();
        assert_eq!(left, [("yard".to_string(), 4000)]);
    }

    #[test]
    fn a_version_1_index_gains_the_kind_of_clip_and_keeps_its_rows() {
        let d = tempfile::tempdir().unwrap();
        {
            let db = Connection::open(d.path().join(FILE)).unwrap();
            db.execute_batch(
                "CREATE TABLE clips (id INTEGER PRIMARY KEY, camera TEXT NOT NULL, start_ms INTEGER NOT NULL, end_ms INTEGER,
                 state TEXT NOT NULL, reason TEXT, labels TEXT NOT NULL DEFAULT '[]', tracks TEXT NOT NULL DEFAULT '[]',
                 zones TEXT NOT NULL DEFAULT '[]', bytes INTEGER NOT NULL DEFAULT 0, path TEXT NOT NULL UNIQUE, codec TEXT,
                 width INTEGER, height INTEGER);
                 INSERT INTO clips (camera, start_ms, end_ms, state, path) VALUES ('cam0', 1000, 2000, 'complete', 'cam0/a.mp4');
                 PRAGMA user_version = 1;",
            )
            .unwrap();
        }
        let (mut ix, _) = Index::open(d.path()).unwrap();
        assert_eq!(ix.list(None, 10).unwrap()[0].kind, Kind::Event);
        let seg = NewClip {
            camera: "cam0",
            start_ms: 3000,
            path: "cam0/b.mp4",
            codec: "h264",
            size: (8, 8),
            kind: Kind::Segment,
        };
        let id = ix.open_clip(&seg).unwrap();
        assert_eq!(ix.get(id).unwrap().unwrap().kind, Kind::Segment);
        let v: i64 = ix.db.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(v, 2);
    }
}

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

/// The clips table's columns (its schema 2), for [`SCHEMA`] and [`MIGRATE_V1`].
macro_rules! clips_columns {
    () => {
        "(
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
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
)"
    };
}

const SCHEMA: &str = concat!(
    "
CREATE TABLE IF NOT EXISTS clips ",
    clips_columns!(),
    ";
CREATE INDEX IF NOT EXISTS clips_by_camera ON clips (camera, start_ms);
CREATE INDEX IF NOT EXISTS clips_by_start ON clips (start_ms);
CREATE TABLE IF NOT EXISTS cameras (
    camera     TEXT PRIMARY KEY,
    units      INTEGER NOT NULL DEFAULT 0,
    gaps       INTEGER NOT NULL DEFAULT 0,
    drops      INTEGER NOT NULL DEFAULT 0,
    updated_ms INTEGER NOT NULL
);
"
);

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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// An event clip.
    #[default]
    Event,
    /// A segment of continuous recording.
    Segment,
}

impl Kind {
    /// Its name in the index (and in `/metrics`): `event`, `segment`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Event => "event",
            Kind::Segment => "segment",
        }
    }

    fn from_name(s: &str) -> Kind {
        if s == Kind::Segment.name() {
            Kind::Segment
        } else {
            Kind::Event
        }
    }
}

/// The columns a [`Clip`] is read from, in [`row`]'s order.
const COLUMNS: &str =
    "id, camera, start_ms, end_ms, state, reason, labels, tracks, zones, bytes, path, codec, width, height, kind";
/// The same from a version 1 index (read-only: a recorder that upgrades it is not there),
/// whose clips are all events'.
const COLUMNS_V1: &str =
    "id, camera, start_ms, end_ms, state, reason, labels, tracks, zones, bytes, path, codec, width, height, 'event' AS kind";

/// Version 1 to 2, in one transaction: continuous segments (`kind`), and ids never reused
/// (`AUTOINCREMENT`: a clip's id, and so its URL, is never another clip's after retention
/// removed the newest). The table is made again, as SQLite adds neither in place.
const MIGRATE_V1: &str = concat!("
BEGIN;
ALTER TABLE clips RENAME TO clips_v1;
DROP INDEX IF EXISTS clips_by_camera;
DROP INDEX IF EXISTS clips_by_start;
CREATE TABLE clips ", clips_columns!(), ";
INSERT INTO clips (id, camera, start_ms, end_ms, state, reason, labels, tracks, zones, bytes, path, codec, width, height)
    SELECT id, camera, start_ms, end_ms, state, reason, labels, tracks, zones, bytes, path, codec, width, height FROM clips_v1;
DROP TABLE clips_v1;
PRAGMA user_version = 2;
COMMIT;
");

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
    /// Clips found in the folder when its index was missing (deleted), now indexed.
    pub found: u64,
}

/// The index (see the module's documentation).
pub struct Index {
    db: Connection,
    dir: PathBuf,
    /// [`COLUMNS`], or [`COLUMNS_V1`] for a version 1 index opened to read.
    columns: &'static str,
}

impl Index {
    /// Opens (or makes) the index of the record folder `dir`: recovers what a recorder that
    /// died left, rebuilds a corrupt database from the files. Errors: the folder cannot be
    /// written (named, with the fix).
    pub fn open(dir: &Path) -> Result<(Index, Opened)> {
        let path = dir.join(FILE);
        let mut opened = Opened::default();
        let missing = !path.exists();
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
                let mut ix = Index { db, dir: dir.to_path_buf(), columns: COLUMNS };
                let n = ix.rebuild()?;
                opened.rebuilt = Some((aside, n));
                return Ok((ix, opened));
            }
        };
        let mut ix = Index { db, dir: dir.to_path_buf(), columns: COLUMNS };
        opened.interrupted = ix.interrupted()?;
        if missing {
            // An index deleted by hand: the folder's clips are indexed again.
            opened.found = ix.rebuild()?;
        }
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
        let has_kind: i64 =
            db.query_row("SELECT COUNT(*) FROM pragma_table_info('clips') WHERE name = 'kind'", [], |r| r.get(0))?;
        let columns = if has_kind > 0 { COLUMNS } else { COLUMNS_V1 };
        Ok(Index { db, dir: dir.to_path_buf(), columns })
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
        let mut found = vec![];
        for cam in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            if !cam.path().is_dir() {
                continue;
            }
            let camera = cam.file_name().to_string_lossy().into_owned();
            // Its event clips, then its continuous segments.
            for (sub, kind) in [("", Kind::Event), ("segments/", Kind::Segment)] {
                for f in std::fs::read_dir(cam.path().join(sub)).into_iter().flatten().flatten() {
                    let name = f.file_name().to_string_lossy().into_owned();
                    let Some(start_ms) = start_of(&name) else { continue };
                    let bytes = f.metadata().map_or(0, |m| m.len());
                    found.push((start_ms, format!("{camera}/{sub}{name}"), camera.clone(), bytes, kind));
                }
            }
        }
        // Ids in the order of time, as the recorder gave them.
        found.sort();
        let tx = self.db.transaction()?;
        for (start_ms, rel, camera, bytes, kind) in &found {
            tx.execute(
                "INSERT OR IGNORE INTO clips (camera, start_ms, state, reason, bytes, path, kind) VALUES (?1, ?2, 'incomplete', 'recovered from its file after the index was lost', ?3, ?4, ?5)",
                params![camera, start_ms, *bytes as i64, rel, kind.name()],
            )?;
        }
        tx.commit()?;
        Ok(found.len() as u64)
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
        self.list_kind(camera, None, limit)
    }

    /// [`Index::list`] of one kind (`None`: both).
    pub fn list_kind(&self, camera: Option<&str>, kind: Option<Kind>, limit: u32) -> Result<Vec<Clip>> {
        let mut q = self.db.prepare(&format!(
            "SELECT * FROM (SELECT {} FROM clips) WHERE (?1 IS NULL OR camera = ?1) AND (?2 IS NULL OR kind = ?2)
             ORDER BY start_ms DESC, id DESC LIMIT ?3",
            self.columns
        ))?;
        let rows =
            q.query_map(params![camera, kind.map(Kind::name), limit], row)?.collect::<rusqlite::Result<Vec<Clip>>>()?;
        Ok(rows)
    }

    /// The highest id given so far (0: none), and the ids of the event clips being recorded:
    /// where a reader of new clips starts.
    pub fn watermark(&self) -> Result<(i64, Vec<i64>)> {
        let max: i64 = self.db.query_row("SELECT COALESCE(MAX(id), 0) FROM clips", [], |r| r.get(0))?;
        let mut q = self.db.prepare(&format!(
            "SELECT id FROM (SELECT {} FROM clips) WHERE state = 'recording' AND kind = 'event' ORDER BY id",
            self.columns
        ))?;
        let open = q.query_map([], |r| r.get(0))?.collect::<rusqlite::Result<Vec<i64>>>()?;
        Ok((max, open))
    }

    /// Clips whose id is above `id`, lowest first, at most `limit`: what came since a
    /// reader last looked.
    pub fn after(&self, id: i64, limit: u32) -> Result<Vec<Clip>> {
        let mut q =
            self.db.prepare(&format!("SELECT {} FROM clips WHERE id > ?1 ORDER BY id ASC LIMIT ?2", self.columns))?;
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

    /// Per camera and kind: its clips in the folder now and their bytes, by camera name.
    pub fn totals_by_camera(&self) -> Result<Vec<(String, Kind, u64, u64)>> {
        let mut q = self.db.prepare(&format!(
            "SELECT camera, kind, COUNT(*), COALESCE(SUM(bytes), 0) FROM (SELECT {} FROM clips)
             GROUP BY camera, kind ORDER BY camera, kind",
            self.columns
        ))?;
        let rows = q
            .query_map([], |r| {
                let kind = Kind::from_name(&r.get::<_, String>(1)?);
                Ok((r.get(0)?, kind, r.get::<_, i64>(2)? as u64, r.get::<_, i64>(3)? as u64))
            })?
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
        let mut q = self.db.prepare(&format!("SELECT {} FROM clips WHERE id = ?1", self.columns))?;
        Ok(q.query_row(params![id], row).optional()?)
    }

    /// Removes the oldest closed clips of `scope`: those that started before `before_ms`,
    /// then, while the scope's clips take more than `max_bytes`, the oldest but the newest
    /// closed one. A file is removed before its row. Returns (clips removed, their bytes).
    pub fn retain(&mut self, scope: Scope<'_>, before_ms: Option<i64>, max_bytes: Option<u64>) -> Result<(u64, u64)> {
        let mut victims: Vec<(i64, String, i64)> = vec![];
        {
            let mut q = self.db.prepare(
                "SELECT id, path, bytes, start_ms, camera, state, kind FROM clips ORDER BY start_ms ASC, id ASC",
            )?;
            #[allow(clippy::type_complexity)]
            let rows: Vec<(i64, String, i64, i64, String, String, String)> = q
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?)))?
                .collect::<rusqlite::Result<_>>()?;
            let rows: Vec<_> = rows.into_iter().filter(|r| scope.holds(&r.4)).collect();
            let mut left: i64 = rows.iter().map(|r| r.2).sum();
            let closed: Vec<_> = rows.into_iter().filter(|r| r.5 != State::Recording.name()).collect();
            // The newest event clip (else the newest clip) is the one a size bound spares.
            let newest =
                closed.iter().rposition(|r| r.6 == Kind::Event.name()).unwrap_or(closed.len().saturating_sub(1));
            for (k, (id, path, bytes, start, _, _, _)) in closed.into_iter().enumerate() {
                let old = before_ms.is_some_and(|b| start < b);
                // The newest clip stays, even alone over the bound: a bound smaller than one
                // clip keeps the latest event, never none.
                let over = k != newest && max_bytes.is_some_and(|m| left > m as i64);
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
                Ok(()) => {
                    // Its thumbnail, if it has one.
                    let _ = std::fs::remove_file(self.dir.join(&path).with_extension("jpg"));
                }
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
        kind: Kind::from_name(&r.get::<_, String>(14)?),
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
        db.execute_batch(MIGRATE_V1).map_err(|e| {
            let _ = db.execute_batch("ROLLBACK");
            classify(e, "upgrading the index to schema 2")
        })?;
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
mod tests;

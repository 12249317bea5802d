//! The index's tests: its life cycle, recovery, retention, readers and schema upgrade.
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
    let meta =
        ClipMeta { labels: ["person".to_string()].into(), tracks: [3, 4].into(), zones: ["door".to_string()].into() };
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
    assert_eq!((c.camera.as_str(), c.start_ms, c.bytes, c.state), ("front", 1_796_224_363_099, 300, State::Incomplete));
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
    assert_eq!(
        reader.totals_by_camera().unwrap(),
        [("cam0".into(), Kind::Event, 1, 0), ("cam1".into(), Kind::Event, 1, 10)]
    );
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
    // An id is never given twice, even once its row is gone.
    ix.db.execute("DELETE FROM clips WHERE id = ?1", params![id]).unwrap();
    let again = ix.open_clip(&NewClip { path: "cam0/c.mp4", ..seg }).unwrap();
    assert!(again > id, "{again} after {id}");
    // A version 1 index opened to read (no recorder upgraded it): its clips are events.
    let old = tempfile::tempdir().unwrap();
    {
        let db = Connection::open(old.path().join(FILE)).unwrap();
        db.execute_batch("CREATE TABLE clips (id INTEGER PRIMARY KEY, camera TEXT NOT NULL, start_ms INTEGER NOT NULL, end_ms INTEGER, state TEXT NOT NULL, reason TEXT, labels TEXT NOT NULL DEFAULT '[]', tracks TEXT NOT NULL DEFAULT '[]', zones TEXT NOT NULL DEFAULT '[]', bytes INTEGER NOT NULL DEFAULT 0, path TEXT NOT NULL UNIQUE, codec TEXT, width INTEGER, height INTEGER); INSERT INTO clips (camera, start_ms, state, path) VALUES ('cam0', 1, 'complete', 'cam0/x.mp4'); PRAGMA user_version = 1;").unwrap();
    }
    let r = Index::open_read(old.path()).unwrap();
    assert_eq!(r.list_kind(None, Some(Kind::Event), 10).unwrap().len(), 1);
}

#[test]
fn a_deleted_index_is_made_again_from_the_folder_s_clips_in_time_order() {
    let d = tempfile::tempdir().unwrap();
    {
        let (mut ix, _) = Index::open(d.path()).unwrap();
        for start in [5_000, 1_000] {
            let id = new_clip(&mut ix, d.path(), "cam0", start, 10);
            ix.close_clip(id, &closed(start + 500, 10)).unwrap();
        }
    }
    for ext in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(d.path().join(format!("{FILE}{ext}")));
    }
    let (ix, opened) = Index::open(d.path()).unwrap();
    assert_eq!(opened.found, 2);
    let mut rows: Vec<(i64, i64)> = ix.list(None, 10).unwrap().iter().map(|c| (c.id, c.start_ms)).collect();
    rows.sort();
    assert_eq!(rows, [(1, 1_000), (2, 5_000)], "ids follow the clips' times");
}

use super::*;
use crate::mqtt::fleet::{BoardStatus, CameraStatus};

fn status(board: &str, session: &str, cameras: usize) -> Vec<u8> {
    let s = BoardStatus {
        v: WIRE_VERSION,
        board: board.into(),
        session: session.into(),
        prefix: format!("zcpipe/{board}"),
        every_s: 1,
        cameras: (0..cameras).map(|i| (format!("cam{i}"), CameraStatus::default())).collect(),
        ..Default::default()
    };
    serde_json::to_vec(&s).unwrap()
}

fn event(board: &str, camera: &str, track: u64, time_ms: u64) -> Vec<u8> {
    let id = crate::mqtt::fleet::event_id(board, camera, track, "new", None, time_ms);
    serde_json::to_vec(&serde_json::json!({
        "v": WIRE_VERSION, "event_id": id, "board": board, "camera": camera, "event": "new",
        "time_ms": time_ms, "track_id": track, "label": "person", "score": 0.5
    }))
    .unwrap()
}

#[test]
fn each_event_is_taken_once_and_order_is_checked_per_camera() {
    let mut f = Fleet::new(Limits::default());
    let t = "zcpipe/b1/cam0/events";
    assert_eq!(
        f.event(t, Some("b1"), &event("b1", "cam0", 1, 1000)).unwrap(),
        (true, Some(Notice::Unknown { board: "b1".into() }))
    );
    assert_eq!(f.event(t, Some("b1"), &event("b1", "cam0", 1, 1000)).unwrap(), (false, None), "a copy");
    assert_eq!(f.event(t, Some("b1"), &event("b1", "cam0", 2, 2000)).unwrap(), (true, None));
    // Another camera keeps its own order; an older event of cam0 is counted.
    assert!(f.event("zcpipe/b1/cam1/events", Some("b1"), &event("b1", "cam1", 1, 1500)).unwrap().0);
    assert!(f.event(t, Some("b1"), &event("b1", "cam0", 3, 1900)).unwrap().0);
    let b = &f.boards()["b1"];
    assert_eq!((b.events, b.duplicates, b.out_of_order), (4, 1, 1));
    assert_eq!(f.recent().len(), 4);
    assert_eq!(f.recent().back().unwrap().track_id, Some(3));
    // The notice of a snapshot of track 1, taken later, carries track 1's `new` time: an
    // event of its own (once per id), outside the order.
    let snap = serde_json::to_vec(&serde_json::json!({
        "v": WIRE_VERSION, "event_id": "b1/cam0/1/snapshot/1000", "board": "b1", "camera": "cam0",
        "event": "snapshot", "time_ms": 1000, "track_id": 1, "label": "person", "of_event": "b1/cam0/1/new/1000"
    }))
    .unwrap();
    assert_eq!(f.event(t, Some("b1"), &snap).unwrap(), (true, None));
    assert_eq!(f.event(t, Some("b1"), &snap).unwrap(), (false, None), "a copy");
    let b = &f.boards()["b1"];
    assert_eq!((b.events, b.duplicates, b.out_of_order), (5, 2, 1));
}

#[test]
fn the_bounds_hold_and_forget_the_oldest() {
    let limits = Limits { max_boards: 2, max_cameras: 3, max_payload: 2000, recent_events: 3, seen_ids: 4 };
    let mut f = Fleet::new(limits);
    for i in 0..6 {
        f.event("zcpipe/b1/cam0/events", Some("b1"), &event("b1", "cam0", i, 1000 + i)).unwrap();
    }
    assert_eq!(f.recent().len(), 3);
    assert_eq!((f.seen.len(), f.seen_order.len()), (4, 4));
    // The oldest id was forgotten: its copy is taken again (the bound's price), a recent one is not.
    assert!(f.event("zcpipe/b1/cam0/events", Some("b1"), &event("b1", "cam0", 0, 1000)).unwrap().0);
    assert!(!f.event("zcpipe/b1/cam0/events", Some("b1"), &event("b1", "cam0", 5, 1005)).unwrap().0);
    f.status("zcpipe/b2/status", Some("b2"), &status("b2", "s", 3), Instant::now()).unwrap();
    let e = f.status("zcpipe/b3/status", Some("b3"), &status("b3", "s", 1), Instant::now()).unwrap_err();
    assert_eq!(e.to_string(), "board b3: the fleet view already keeps 2 boards: not taken (raise --max-boards)");
    let e = f.status("zcpipe/b2/status", Some("b2"), &status("b2", "s", 4), Instant::now()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "board b2: a status with 4 cameras, over the 3 the fleet view keeps per board: not taken"
    );
    let big = vec![b' '; 2001];
    let e = f.status("zcpipe/b2/status", Some("b2"), &big, Instant::now()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "zcpipe/b2/status: a payload of 2001 bytes, over the 2000 the fleet view reads: not taken"
    );
    assert_eq!(f.rejected, BTreeMap::from([("too_big", 1), ("too_many_boards", 1), ("too_many_cameras", 1)]));
}

#[test]
fn bad_messages_are_refused_one_line_each_and_the_rest_goes_on() {
    let mut f = Fleet::new(Limits::default());
    let now = Instant::now();
    let e = f.status("zcpipe/b1/status", Some("b1"), b"{\"v\":1,\"board\":", now).unwrap_err();
    assert!(e.to_string().starts_with("zcpipe/b1/status: not a zcpipe status (EOF while parsing"), "{e}");
    let e = f.event("zcpipe/b1/c/events", Some("b1"), b"{\"v\":7}").unwrap_err();
    assert_eq!(e.to_string(), "zcpipe/b1/c/events: message version 7, this fleet view reads version 1: not taken; run the same zcpipe version on the boards and the fleet view");
    let e = f.event("zcpipe/b1/cam0/events", Some("b1"), &event("b2", "cam0", 1, 1)).unwrap_err();
    assert!(
        e.to_string().starts_with("zcpipe/b1/cam0/events: says board \"b2\", which is not the board of its topic"),
        "{e}"
    );
    let e = f.available("zcpipe/a b/available", "a b", true).unwrap_err();
    assert_eq!(e.reason(), "wrong_board");
    assert!(f.boards().is_empty(), "nothing kept of them");
    f.status("zcpipe/b1/status", Some("b1"), &status("b1", "s1", 2), now).unwrap();
    assert_eq!(f.rejected.values().sum::<u64>(), 4);
    assert_eq!(f.boards()["b1"].status.as_ref().unwrap().cameras.len(), 2);
}

#[test]
fn two_boards_with_one_id_are_found_once_a_restart_is_not() {
    let mut f = Fleet::new(Limits::default());
    let now = Instant::now();
    let t = "zcpipe/b1/status";
    // A restart: a new session takes over.
    for s in ["a", "a", "b", "b"] {
        assert_eq!(f.status(t, Some("b1"), &status("b1", s, 1), now).unwrap(), None);
    }
    assert!(!f.boards()["b1"].clash);
    // The old session speaks again: two processes claim b1; said once.
    let n = f.status(t, Some("b1"), &status("b1", "a", 1), now).unwrap();
    assert_eq!(n, Some(Notice::Clash { board: "b1".into(), sessions: ("b".into(), "a".into()) }));
    assert_eq!(f.status(t, Some("b1"), &status("b1", "b", 1), now).unwrap(), None);
    assert!(f.boards()["b1"].clash);
    assert_eq!(f.clashes, 1);
}

#[test]
fn a_board_is_offline_when_it_says_so_its_bridge_is_down_or_its_status_is_stale() {
    let mut f = Fleet::new(Limits::default());
    let t0 = Instant::now();
    f.status("zcpipe/b1/status", Some("b1"), &status("b1", "s", 1), t0).unwrap();
    let b = |f: &Fleet, at: Instant| f.boards()["b1"].online(at);
    assert!(b(&f, t0 + Duration::from_millis(2900)));
    assert!(!b(&f, t0 + Duration::from_secs(3)), "three periods of 1 s without a status");
    let down = Some(Notice::Bridge { board: "b1".into(), up: false });
    assert_eq!(f.bridge("zcpipe/b1/bridge", "b1", false).unwrap(), down, "said once, when it goes down");
    assert_eq!(f.bridge("zcpipe/b1/bridge", "b1", false).unwrap(), None);
    assert!(!b(&f, t0));
    assert_eq!(
        f.bridge("zcpipe/b1/bridge", "b1", true).unwrap(),
        Some(Notice::Bridge { board: "b1".into(), up: true })
    );
    f.available("zcpipe/b1/available", "b1", false).unwrap();
    assert!(!b(&f, t0));
    f.available("zcpipe/b1/available", "b1", true).unwrap();
    assert!(b(&f, t0));
}

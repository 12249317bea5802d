//! What the fleet view knows: each board's latest status and availability (all of it
//! rebuilt from the broker's retained messages), a bounded list of recent events, the event
//! ids already seen (bounded), and counters. Pure: messages in, no I/O, times given.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::mqtt::fleet::{BoardStatus, EventMsg, MAX_BOARD_ID, WIRE_VERSION};

/// The bounds of the fleet's state, each checked before anything is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Boards kept (more are refused, one line each).
    pub max_boards: usize,
    /// Cameras in one board's status (a status with more is refused).
    pub max_cameras: usize,
    /// The largest payload read, bytes.
    pub max_payload: usize,
    /// Recent events kept for the page and `/api/fleet`.
    pub recent_events: usize,
    /// Event ids remembered to drop copies (the oldest forgotten first).
    pub seen_ids: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_boards: 1000, max_cameras: 64, max_payload: 64 << 10, recent_events: 200, seen_ids: 200_000 }
    }
}

/// A message the fleet did not take, with the one line that says why.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Rejected {
    /// Over [`Limits::max_payload`].
    #[error("{topic}: a payload of {bytes} bytes, over the {max} the fleet view reads: not taken")]
    TooBig {
        /// The topic.
        topic: String,
        /// Its size.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// Not the JSON the topic carries.
    #[error("{topic}: not a zcpipe {what} ({why}): not taken; is a board older than the fleet view, or is something else publishing there?")]
    Malformed {
        /// The topic.
        topic: String,
        /// `status` or `event`.
        what: &'static str,
        /// serde's words.
        why: String,
    },
    /// A version the fleet view does not know.
    #[error("{topic}: message version {v}, this fleet view reads version {WIRE_VERSION}: not taken; run the same zcpipe version on the boards and the fleet view")]
    Version {
        /// The topic.
        topic: String,
        /// The message's version.
        v: u32,
    },
    /// The payload's board is not the topic's, or not a board id.
    #[error("{topic}: says board {board:?}, which is not the board of its topic or not a board id: not taken (a board publishing under another's prefix?)")]
    WrongBoard {
        /// The topic.
        topic: String,
        /// The board named in the payload.
        board: String,
    },
    /// [`Limits::max_boards`] reached.
    #[error("board {board}: the fleet view already keeps {max} boards: not taken (raise --max-boards)")]
    TooManyBoards {
        /// The board.
        board: String,
        /// The limit.
        max: usize,
    },
    /// A status with more than [`Limits::max_cameras`].
    #[error("board {board}: a status with {n} cameras, over the {max} the fleet view keeps per board: not taken")]
    TooManyCameras {
        /// The board.
        board: String,
        /// Cameras in the status.
        n: usize,
        /// The limit.
        max: usize,
    },
}

impl Rejected {
    /// A short name for `/metrics` (`reason` label).
    pub fn reason(&self) -> &'static str {
        match self {
            Rejected::TooBig { .. } => "too_big",
            Rejected::Malformed { .. } => "malformed",
            Rejected::Version { .. } => "version",
            Rejected::WrongBoard { .. } => "wrong_board",
            Rejected::TooManyBoards { .. } => "too_many_boards",
            Rejected::TooManyCameras { .. } => "too_many_cameras",
        }
    }
}

/// Something worth one line in the log that is not a refusal.
#[derive(Debug, PartialEq, Eq)]
pub enum Notice {
    /// Two sessions alternate under one board id: two boards have one id.
    Clash {
        /// The board id.
        board: String,
        /// The sessions.
        sessions: (String, String),
    },
    /// An event of a board that sent no status yet.
    Unknown {
        /// The board id.
        board: String,
    },
    /// A board's bridge to this broker went down (`false`) or came back (`true`).
    Bridge {
        /// The board id.
        board: String,
        /// Up or down.
        up: bool,
    },
}

/// One board as the fleet knows it.
#[derive(Debug, Serialize)]
pub struct Board {
    /// Its id.
    pub id: String,
    /// Its latest status.
    pub status: Option<BoardStatus>,
    /// Its `available` topic's latest word (`online` / `offline`: `offline` is its last will).
    pub available: Option<bool>,
    /// Its bridge's notification, where the bridge is set to send one (`1` up, `0` down).
    pub bridge: Option<bool>,
    /// Events taken (each id once).
    pub events: u64,
    /// Copies of events already taken, dropped.
    pub duplicates: u64,
    /// Events older than the newest of their camera taken before (a tracker's events and
    /// clips: a snapshot's notice carries its `new` event's time, and comes later).
    pub out_of_order: u64,
    /// Two boards use this id.
    pub clash: bool,
    /// When its last status came (not serialised).
    #[serde(skip)]
    status_at: Option<Instant>,
    /// Its sessions seen, newest last (at most [`SESSIONS`]).
    #[serde(skip)]
    sessions: VecDeque<String>,
    /// The newest event time of each camera, Unix ms.
    #[serde(skip)]
    newest: BTreeMap<String, u64>,
}

/// Sessions remembered per board for the clash check.
const SESSIONS: usize = 4;

/// A board is taken as gone after this many status periods without one.
const STALE_PERIODS: u32 = 3;

impl Board {
    fn new(id: &str) -> Board {
        Board {
            id: id.to_string(),
            status: None,
            available: None,
            bridge: None,
            events: 0,
            duplicates: 0,
            out_of_order: 0,
            clash: false,
            status_at: None,
            sessions: VecDeque::new(),
            newest: BTreeMap::new(),
        }
    }

    /// Online at `now`: it said `online` (or nothing yet), its bridge is not down, and its
    /// last status is younger than three of its periods (at least 3 s).
    pub fn online(&self, now: Instant) -> bool {
        let every = self.status.as_ref().map_or(10, |s| s.every_s.max(1));
        let fresh = self.status_at.is_some_and(|t| now.duration_since(t) < Duration::from_secs(every) * STALE_PERIODS);
        fresh && self.available != Some(false) && self.bridge != Some(false)
    }
}

/// The fleet's state.
#[derive(Debug)]
pub struct Fleet {
    limits: Limits,
    boards: BTreeMap<String, Board>,
    /// Newest last.
    recent: VecDeque<EventMsg>,
    seen: HashSet<String>,
    seen_order: VecDeque<String>,
    /// Refusals by reason.
    pub rejected: BTreeMap<&'static str, u64>,
    /// Board id clashes found.
    pub clashes: u64,
}

impl Fleet {
    /// An empty fleet bounded by `limits`.
    pub fn new(limits: Limits) -> Fleet {
        Fleet {
            limits,
            boards: BTreeMap::new(),
            recent: VecDeque::new(),
            seen: HashSet::new(),
            seen_order: VecDeque::new(),
            rejected: BTreeMap::new(),
            clashes: 0,
        }
    }

    /// The boards, by id.
    pub fn boards(&self) -> &BTreeMap<String, Board> {
        &self.boards
    }

    /// The recent events, newest last.
    pub fn recent(&self) -> &VecDeque<EventMsg> {
        &self.recent
    }

    /// Counts a refusal and hands it back.
    fn refuse<T>(&mut self, r: Rejected) -> Result<T, Rejected> {
        *self.rejected.entry(r.reason()).or_default() += 1;
        Err(r)
    }

    /// The board `id`, made if there is room.
    fn board(&mut self, id: &str) -> Result<&mut Board, Rejected> {
        if !self.boards.contains_key(id) {
            if self.boards.len() >= self.limits.max_boards {
                let max = self.limits.max_boards;
                return self.refuse(Rejected::TooManyBoards { board: id.to_string(), max });
            }
            self.boards.insert(id.to_string(), Board::new(id));
        }
        Ok(self.boards.get_mut(id).expect("inserted above"))
    }

    fn check_size(&mut self, topic: &str, payload: &[u8]) -> Result<(), Rejected> {
        if payload.len() > self.limits.max_payload {
            let (bytes, max) = (payload.len(), self.limits.max_payload);
            return self.refuse(Rejected::TooBig { topic: topic.to_string(), bytes, max });
        }
        Ok(())
    }

    fn parse<T: serde::de::DeserializeOwned>(
        &mut self,
        topic: &str,
        what: &'static str,
        payload: &[u8],
    ) -> Result<T, Rejected> {
        self.check_size(topic, payload)?;
        // The version first, so a newer board's message is refused for what it is.
        #[derive(serde::Deserialize)]
        struct Versioned {
            v: u32,
        }
        match serde_json::from_slice::<Versioned>(payload) {
            Ok(Versioned { v }) if v != WIRE_VERSION => {
                return self.refuse(Rejected::Version { topic: topic.into(), v })
            }
            _ => {}
        }
        serde_json::from_slice(payload)
            .or_else(|e| self.refuse(Rejected::Malformed { topic: topic.to_string(), what, why: e.to_string() }))
    }

    /// Checks that `board` is a board id, and the one of `topic`'s board level (`topic_board`).
    fn check_board(&mut self, topic: &str, topic_board: Option<&str>, board: &str) -> Result<(), Rejected> {
        let valid = crate::mqtt::fleet::check_board_id(board).is_ok() && board.len() <= MAX_BOARD_ID;
        if !valid || topic_board.is_some_and(|b| b != board) {
            return self.refuse(Rejected::WrongBoard { topic: topic.to_string(), board: board.to_string() });
        }
        Ok(())
    }

    /// A status on `topic` (whose board level is `topic_board`, if its prefix has one),
    /// received at `now`. A clash is a notice.
    pub fn status(
        &mut self,
        topic: &str,
        topic_board: Option<&str>,
        payload: &[u8],
        now: Instant,
    ) -> Result<Option<Notice>, Rejected> {
        let s: BoardStatus = self.parse(topic, "status", payload)?;
        self.check_board(topic, topic_board, &s.board)?;
        if s.cameras.len() > self.limits.max_cameras {
            let (n, max) = (s.cameras.len(), self.limits.max_cameras);
            return self.refuse(Rejected::TooManyCameras { board: s.board, n, max });
        }
        let b = self.board(&s.board)?;
        let mut notice = None;
        if b.sessions.back() != Some(&s.session) {
            // A session seen before coming back after another: two processes alternate.
            if let Some(other) = b.sessions.back().filter(|_| b.sessions.contains(&s.session)) {
                if !b.clash {
                    notice =
                        Some(Notice::Clash { board: s.board.clone(), sessions: (other.clone(), s.session.clone()) });
                }
                b.clash = true;
            }
            b.sessions.retain(|x| x != &s.session);
            b.sessions.push_back(s.session.clone());
            if b.sessions.len() > SESSIONS {
                b.sessions.pop_front();
            }
        }
        b.status = Some(s);
        b.status_at = Some(now);
        if notice.is_some() {
            self.clashes += 1;
        }
        Ok(notice)
    }

    /// A board's `available` word (`online`, `offline`) on `topic`.
    pub fn available(&mut self, topic: &str, board: &str, online: bool) -> Result<(), Rejected> {
        self.check_board(topic, None, board)?;
        self.board(board)?.available = Some(online);
        Ok(())
    }

    /// A board's bridge notification (`1`, `0`) on `topic`.
    pub fn bridge(&mut self, topic: &str, board: &str, up: bool) -> Result<Option<Notice>, Rejected> {
        self.check_board(topic, None, board)?;
        let b = self.board(board)?;
        // Said when it changes (a retained `0` read at start is a change from unknown).
        let changed = b.bridge != Some(up) && (b.bridge.is_some() || !up);
        b.bridge = Some(up);
        Ok(changed.then(|| Notice::Bridge { board: board.to_string(), up }))
    }

    /// An events message on `topic`: taken once per id (a copy is counted, not kept).
    /// Returns whether it was new, and a notice for a board never seen before.
    pub fn event(
        &mut self,
        topic: &str,
        topic_board: Option<&str>,
        payload: &[u8],
    ) -> Result<(bool, Option<Notice>), Rejected> {
        let e: EventMsg = self.parse(topic, "event", payload)?;
        self.check_board(topic, topic_board, &e.board)?;
        let known = self.boards.contains_key(&e.board);
        let copy = self.seen.contains(&e.event_id);
        let max_cameras = self.limits.max_cameras;
        let b = self.board(&e.board)?;
        let notice = (!known).then(|| Notice::Unknown { board: e.board.clone() });
        if copy {
            b.duplicates += 1;
            return Ok((false, notice));
        }
        b.events += 1;
        // A snapshot's notice carries its `new` event's time but follows the picture, taken
        // up to seconds later: the order is the tracker's events' and the clips'.
        if e.event != "snapshot" {
            let newest = b.newest.entry(e.camera.clone()).or_default();
            if e.time_ms < *newest {
                b.out_of_order += 1;
            }
            *newest = (*newest).max(e.time_ms);
        }
        if b.newest.len() > max_cameras {
            // Bounded like the cameras of a status: the first name goes.
            b.newest.pop_first();
        }
        if self.seen_order.len() >= self.limits.seen_ids {
            if let Some(old) = self.seen_order.pop_front() {
                self.seen.remove(&old);
            }
        }
        self.seen.insert(e.event_id.clone());
        self.seen_order.push_back(e.event_id.clone());
        if self.recent.len() >= self.limits.recent_events {
            self.recent.pop_front();
        }
        self.recent.push_back(e);
        Ok((true, notice))
    }
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;

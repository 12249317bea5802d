//! Buffer pools shared across a hop: who owns which buffer, and how it comes back.
//!
//! The producer ([`PoolProducer`]) owns the pool: a buffer is `Free`, lent to the producer
//! for writing, lent to a device that fills it, or `Queued` (in the ring or lent to the
//! consumer). Ownership is in the types, as iceoryx2's `SampleMut -> Sample`: only a
//! [`WriteLoan`] (from [`PoolProducer::acquire`] or [`PoolProducer::claim`]) gives write
//! access to a buffer, and [`WriteLoan::publish`] consumes it, so a published buffer cannot
//! be written; dropping an unpublished loan gives the buffer back. A buffer lent to a
//! device is a [`DeviceLoan`], a token the device's queue holds until the device hands the
//! buffer back. The consumer receives the fds once, at
//! set-up, and gets each frame as a [`Frame`], a read-only loan: dropping it sends the
//! buffer's token (`seq << 32 | index`) back through the ring's return queue. The producer
//! accepts a token only for a buffer it has queued under that sequence number, so a broken
//! or hostile consumer cannot make it hand out one buffer twice. A frame dropped by
//! drop-oldest goes back to the free list at once. When the consumer dies, every buffer
//! lent to it is free again.

use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytemuck::Pod;

use super::channel::{Doorbell, Sender, Sent};
use super::copy::{CopyCounters, CopySender};
use super::dmabuf::{CpuAccess, DmaBuf, Read};
use super::frame::{FrameDesc, RestartMark, Stage};
use super::link::{Conn, ControlMsg, Offer, Payload, PeerGone};
use super::ring::{RingCorrupt, RingCounters, RingPolicy, RingProducer};

mod consumer;
#[cfg(test)]
mod tests;
mod upstream;

pub use consumer::{join, offer_items, Frame, PoolConsumer};
pub use upstream::{Upstream, OFFER_TIMEOUT};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BufState {
    Free,
    /// Lent to a device that fills it (a V4L2 driver's queue): a [`DeviceLoan`] is out.
    Device,
    /// Lent to the producer for writing: a [`WriteLoan`] is out.
    Writing,
    /// Published under this sequence number (low 32 bits): in the ring or with the consumer.
    Queued(u32),
    /// Back from the consumer (or dropped from its ring) while a tap still holds it: free
    /// when the last tap gives it back.
    Tapped,
}

/// A process-wide number for each pool made, so a [`DeviceLoan`] is only ever taken back by
/// the pool that lent it.
fn next_pool_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

fn token(desc: &FrameDesc) -> u64 {
    (desc.seq << 32) | desc.buffer_index as u64
}

/// Ring slots for a pool of `buffers` under `policy`. Drop-oldest: `buffers - 1` (at least
/// 1), so one buffer is always outside the ring for the producer to write while the ring is
/// full. Block: `buffers`, so the ring is never full while a buffer is free, and a producer
/// that outruns its consumer sleeps once per frame (for a returned buffer) instead of twice
/// (for ring space, then for a buffer).
pub fn ring_capacity(policy: RingPolicy, buffers: usize) -> u32 {
    let n = buffers.clamp(1, 4096) as u32;
    match policy {
        RingPolicy::DropOldest => (n - 1).max(1),
        RingPolicy::Block => n,
    }
}

/// What the producer tells the consumer about a frame hop besides the fds (kept, so a
/// consumer that re-joins gets the same offer).
#[derive(Clone, Debug)]
pub struct HopSpec {
    /// Full-ring policy.
    pub policy: RingPolicy,
    /// Ring slots.
    pub capacity: u32,
    /// Allocator description.
    pub memory: String,
    /// Nominal layout.
    pub layout: Option<super::frame::FrameLayout>,
    /// Nominal fps.
    pub fps: f64,
    /// What is produced.
    pub description: String,
    /// `--copy-mode`: send frames as bytes over a data socket instead of sharing buffers.
    pub copy_mode: bool,
}

/// Counts of buffer traffic on the producer side.
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct PoolStats {
    /// Buffers in the pool.
    pub buffers: usize,
    /// Tokens accepted back from the consumer.
    pub returned: u64,
    /// Buffers reclaimed from the ring by drop-oldest.
    pub reclaimed: u64,
    /// Tokens refused (unknown index or stale sequence).
    pub bad_returns: u64,
    /// Buffers not free right now.
    pub outstanding: usize,
    /// Times the producer had to wait (for a free buffer, or for ring space under block).
    pub waits: u64,
    /// Times the consumer hung up while the stage kept serving ([`PoolProducer::keep_serving`]).
    #[serde(default)]
    pub consumers_lost: u64,
    /// Frames published while no consumer was there (dropped at once, counted in the ring
    /// counters' `produced` and `dropped` too).
    #[serde(default)]
    pub dropped_away: u64,
    /// Times a consumer held every buffer for [`LEASE_TIMEOUT`] and was killed for it.
    #[serde(default)]
    pub leases_expired: u64,
    /// Consumers hung up on for corrupting the ring's shared indices
    /// ([`super::ring::RingCorrupt`]; counted in `consumers_lost` too).
    #[serde(default)]
    pub consumers_dropped: u64,
    /// Taps ([`PoolProducer::add_tap`]) served now.
    #[serde(default)]
    pub taps: usize,
    /// Taps that joined so far.
    #[serde(default)]
    pub taps_joined: u64,
    /// Taps that hung up, or were hung up on (a broken ring, a stalled copy socket).
    #[serde(default)]
    pub taps_lost: u64,
    /// Frames handed to taps (all taps).
    #[serde(default)]
    pub tap_frames: u64,
    /// Frames a tap did not get because it still held its last one, or that were taken
    /// back from its ring unread (all taps): a slow tap drops its own frames.
    #[serde(default)]
    pub tap_dropped: u64,
}

/// The most taps ([`PoolProducer::add_tap`]) a pool serves at once; one more is refused.
pub const MAX_TAPS: usize = 4;

/// The most buffers one tap may hold at once (in its ring or in its hands): it takes the
/// newest frame, and while it holds as many as it asked for (1 by default; a display asks
/// for 2, the frame on screen and the one queued to replace it:
/// [`crate::link::tap_hello_holding`], capped at this) it is given no other. So
/// `MAX_TAPS` taps hold at most `MAX_TAPS * TAP_MAX_HELD` buffers, and a tap that never
/// returns its frames costs the pool those buffers, never the pipeline's frames.
pub const TAP_MAX_HELD: usize = 2;

/// How long a copy-mode tap may take to read one frame's bytes before it is hung up on
/// (it joins again): a tap never stalls its producer for longer.
pub const TAP_COPY_TIMEOUT: Duration = Duration::from_millis(500);

/// A secondary consumer of a pool ([`PoolProducer::add_tap`]).
struct Tap {
    /// Its name (from its hello: `view`, `display`).
    name: String,
    link: Link,
    /// Per buffer: the sequence number (low 32 bits) under which the tap holds it.
    held: Vec<Option<u32>>,
    /// The most it holds at once (1..=[`TAP_MAX_HELD`], as its hello asked).
    max_held: usize,
}

impl Tap {
    fn holding(&self) -> usize {
        self.held.iter().filter(|h| h.is_some()).count()
    }
}

/// How long a consumer may hold every buffer the producer could write (returning none)
/// before its lease expires: the producer kills it (SIGKILL; it runs as the same user,
/// checked with SO_PEERCRED), sees the hang-up, takes every buffer back, and serves it again
/// when it is restarted. Only for a producer that keeps serving
/// ([`PoolProducer::keep_serving`]). A live consumer returns a buffer per frame; one that
/// holds them all for this long is stuck.
pub const LEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// The producer's end of a frame hop: the pool, its ownership states and the ring.
pub struct PoolProducer {
    /// Tells this pool's [`DeviceLoan`]s from another's.
    id: u64,
    sender: Link,
    bufs: Vec<Vec<DmaBuf>>,
    state: Vec<BufState>,
    free: VecDeque<u32>,
    policy: RingPolicy,
    stats: PoolStats,
    /// The offer, for a consumer that re-joins.
    spec: HopSpec,
    /// Whether a consumer's hang-up leaves the stage serving ([`PoolProducer::keep_serving`]).
    keep_serving: bool,
    /// When the consumer hung up and the frames dropped since, while it is away.
    away: Option<(Instant, u64)>,
    /// The counters of the rings of consumers that hung up, and the frames dropped while away.
    carried: RingCounters,
    /// The notice the next published frame carries (set when a consumer re-joins), and the
    /// camera whose next frame must carry it (a notice carried over from a dropped frame of
    /// that camera); `None`: the next frame of any camera.
    mark: Option<(RestartMark, Option<usize>)>,
    /// Frames dropped from this hop (drop-oldest, or nobody there to take them), per camera
    /// ([`crate::frame::camera_of`] of their flags).
    dropped_by_camera: [u64; crate::frame::MAX_CAMERAS],
    /// Since when the producer has found no buffer to write (the consumer holds them all).
    starved_since: Option<Instant>,
    /// Secondary consumers, each on its own drop-oldest ring ([`PoolProducer::add_tap`]).
    taps: Vec<Tap>,
}

/// How a producer's frames travel: descriptors in a ring, or bytes over a socket; or
/// nowhere, while the consumer is away (a stage that keeps serving after its hang-up).
enum Link {
    Ring(Sender<FrameDesc>),
    Copy { data: CopySender, conn: Conn },
    Away,
}

impl Link {
    fn pop_return(&mut self) -> Result<Option<u64>> {
        match self {
            Link::Ring(s) => s.pop_return(),
            Link::Copy { .. } | Link::Away => Ok(None),
        }
    }
    fn take_oldest(&mut self) -> Result<Option<FrameDesc>> {
        match self {
            Link::Ring(s) => s.take_oldest(),
            Link::Copy { .. } | Link::Away => Ok(None),
        }
    }
    fn wait_for_returns(&mut self, timeout: Duration) -> Result<()> {
        match self {
            Link::Ring(s) => s.wait_for_returns(timeout),
            Link::Copy { conn, .. } => {
                std::thread::sleep(timeout.min(Duration::from_millis(20)));
                if conn.peer_gone() {
                    return Err(PeerGone::new(format!("downstream (pid {}) hung up", conn.peer_pid)).into());
                }
                Ok(())
            }
            Link::Away => {
                std::thread::sleep(timeout.min(Duration::from_millis(20)));
                Ok(())
            }
        }
    }
    fn pace(&mut self, timeout: Duration) -> Result<()> {
        match self {
            Link::Ring(s) => s.pace(timeout),
            Link::Copy { conn, .. } => {
                std::thread::sleep(timeout);
                if conn.peer_gone() {
                    return Err(PeerGone::new(format!("downstream (pid {}) hung up", conn.peer_pid)).into());
                }
                Ok(())
            }
            Link::Away => {
                std::thread::sleep(timeout);
                Ok(())
            }
        }
    }
    fn send(&mut self, desc: FrameDesc, stop: &AtomicBool) -> Result<Sent<FrameDesc>> {
        match self {
            Link::Ring(s) => s.send(desc, stop),
            Link::Copy { .. } => bail!("copy-mode frames are sent by PoolProducer::publish"),
            Link::Away => bail!("no consumer: frames are dropped by PoolProducer::publish"),
        }
    }
    fn counters(&self) -> RingCounters {
        match self {
            Link::Ring(s) => s.counters(),
            // A stream socket is lossless: what was sent is consumed (or still in the socket).
            Link::Copy { data, .. } => {
                RingCounters { produced: data.counters.frames, consumed: data.counters.frames, ..Default::default() }
            }
            Link::Away => RingCounters::default(),
        }
    }
    fn waits(&self) -> u64 {
        match self {
            Link::Ring(s) => s.waits(),
            Link::Copy { .. } | Link::Away => 0,
        }
    }
    fn conn(&self) -> Option<&Conn> {
        match self {
            Link::Ring(s) => Some(s.conn()),
            Link::Copy { conn, .. } => Some(conn),
            Link::Away => None,
        }
    }
    fn finish(&mut self) {
        match self {
            Link::Ring(s) => s.finish(),
            Link::Copy { data, .. } => data.finish(),
            Link::Away => {}
        }
    }
    /// Makes the link of a hop on `conn` and sends the offer: a fresh ring and doorbells
    /// with every buffer's fds, or in copy mode a data socket.
    fn offer(conn: Conn, bufs: &[Vec<DmaBuf>], spec: &HopSpec) -> Result<Link> {
        let n = bufs.len();
        let max_frame_bytes = bufs.iter().map(|b| b.iter().map(|d| d.size()).sum::<u64>()).max().unwrap_or(0);
        if spec.copy_mode {
            let (ours, theirs) =
                std::os::unix::net::UnixStream::pair().context("socketpair for the copy-mode data socket")?;
            let offer = Offer {
                payload: Payload::Frames,
                ring: super::ring::RingGeometry { capacity: 1, slot_bytes: 8, ret_capacity: 1 },
                policy: spec.policy,
                buffers: vec![],
                memory: spec.memory.clone(),
                layout: spec.layout,
                fps: spec.fps,
                description: spec.description.clone(),
                labels: vec![],
                copy_mode: true,
                max_frame_bytes,
            };
            conn.send(&ControlMsg::Offer(offer), &[theirs.as_fd()])
                .context("sending the data socket to the consumer")?;
            drop(theirs);
            log::info!("copy mode: frames go to pid {} as bytes over a Unix stream socket", conn.peer_pid);
            return Ok(Link::Copy { data: CopySender::new(ours), conn });
        }
        let ring = RingProducer::<FrameDesc>::create(spec.capacity.max(1), n.next_power_of_two().max(2) as u32)?;
        let (bell, back) = (Doorbell::new()?, Doorbell::new()?);
        let offer = Offer {
            payload: Payload::Frames,
            ring: ring.geometry(),
            policy: spec.policy,
            buffers: bufs.iter().map(|b| b.iter().map(|d| d.size()).collect()).collect(),
            memory: spec.memory.clone(),
            layout: spec.layout,
            fps: spec.fps,
            description: spec.description.clone(),
            labels: vec![],
            copy_mode: false,
            max_frame_bytes,
        };
        let mut fds = ring_fds(&ring, &bell, &back);
        fds.extend(bufs.iter().flatten().map(|d| d.fd()));
        conn.send(&ControlMsg::Offer(offer), &fds).context("sending the pool to the consumer")?;
        log::debug!("offered {n} buffers ({} fds) to pid {}", fds.len(), conn.peer_pid);
        Ok(Link::Ring(Sender::new(ring, bell, back, conn, spec.policy)?))
    }
}

fn ring_fds<'a, T: Pod>(ring: &'a RingProducer<T>, bell: &'a Doorbell, back: &'a Doorbell) -> Vec<BorrowedFd<'a>> {
    vec![ring.fd().as_fd(), bell.as_fd(), back.as_fd()]
}

impl PoolProducer {
    /// Offers `bufs` (each a list of fds: one per plane for multi-planar formats) to the
    /// consumer on `conn`, sending every fd once with SCM_RIGHTS (in copy mode, a data
    /// socket instead).
    pub fn offer(conn: Conn, bufs: Vec<Vec<DmaBuf>>, spec: HopSpec) -> Result<PoolProducer> {
        let n = bufs.len();
        if n == 0 || n > 64 {
            bail!("pool of {n} buffers: need 1..=64");
        }
        let sender = Link::offer(conn, &bufs, &spec)?;
        Ok(PoolProducer {
            id: next_pool_id(),
            sender,
            state: vec![BufState::Free; n],
            free: (0..n as u32).collect(),
            bufs,
            policy: spec.policy,
            stats: PoolStats { buffers: n, ..Default::default() },
            spec,
            keep_serving: false,
            away: None,
            carried: RingCounters::default(),
            mark: None,
            dropped_by_camera: [0; crate::frame::MAX_CAMERAS],
            starved_since: None,
            taps: Vec::new(),
        })
    }

    /// The producer found no buffer to write: after [`LEASE_TIMEOUT`] of that, the
    /// consumer that holds them is killed (see there).
    fn starving(&mut self) {
        let since = *self.starved_since.get_or_insert_with(Instant::now);
        if !self.keep_serving || since.elapsed() < LEASE_TIMEOUT {
            return;
        }
        self.starved_since = None;
        if let Some(pid) = self.consumer_pid() {
            let held = self.state.iter().filter(|s| matches!(s, BufState::Queued(_))).count();
            log::warn!(
                "the consumer (pid {pid}) has held {held} of {} buffers for {:.0} s without giving one back: its lease expired; killing it (it is restarted, and its buffers come back)",
                self.bufs.len(),
                LEASE_TIMEOUT.as_secs_f64()
            );
            self.stats.leases_expired += 1;
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }

    /// From now on a consumer's hang-up does not end this hop: every buffer it held or had
    /// queued is free again at once, frames published while it is away are dropped and
    /// counted ([`PoolStats::dropped_away`]), and a consumer that connects again gets the
    /// same pool on a fresh ring ([`PoolProducer::reoffer`]). Without it a hang-up is a
    /// [`PeerGone`] error (tests, `zcpipe bench`).
    pub fn keep_serving(&mut self) {
        self.keep_serving = true;
    }

    /// Whether the consumer is away (hung up, not re-joined yet).
    pub fn is_away(&self) -> bool {
        matches!(self.sender, Link::Away)
    }

    /// The pid of the consumer served now (SO_PEERCRED), `None` while it is away.
    pub fn consumer_pid(&self) -> Option<i32> {
        self.sender.conn().map(|c| c.peer_pid)
    }

    /// The pid of the consumer served now, after a look (one poll(2)) at whether it hung up;
    /// a hop that keeps serving goes away then, and this is `None`.
    pub fn live_consumer(&mut self) -> Option<i32> {
        if let Some(pid) =
            self.consumer_pid().filter(|_| self.keep_serving && self.sender.conn().is_some_and(|c| c.peer_gone()))
        {
            self.go_away(&PeerGone::new(format!("downstream (pid {pid}) hung up")).into());
        }
        self.consumer_pid()
    }

    /// Whether the consumer is gone for good: it hung up and this hop does not keep
    /// serving. A hop that keeps serving never is (it waits for the consumer to re-join).
    pub fn consumer_gone(&self) -> bool {
        !self.keep_serving && self.sender.conn().is_none_or(|c| c.peer_gone())
    }

    /// Serves a consumer that (re-)joined on `conn` after the previous one hung up: the same
    /// pool, on a fresh ring and doorbells (nothing of the dead consumer's ring is reused).
    /// The next frame published carries a [`RestartMark`] for `consumer`, counting the
    /// frames lost while it was away (those dropped and those it held). Errors if the offer
    /// cannot be sent (the hop stays away then) or a consumer is still served.
    pub fn reoffer(&mut self, conn: Conn, consumer: Stage) -> Result<()> {
        let Some((since, lost)) = self.away else { bail!("this hop still serves pid {:?}", self.consumer_pid()) };
        let peer = conn.peer();
        self.sender = Link::offer(conn, &self.bufs, &self.spec)?;
        self.away = None;
        self.mark = Some((RestartMark { stage: consumer, lost: lost.min(u32::MAX as u64) as u32 }, None));
        log::info!(
            "the {} stage ({peer}) joined again after {:.1} s: offered the same {} buffers on a fresh ring; {lost} frames lost meanwhile",
            consumer.name(),
            since.elapsed().as_secs_f64(),
            self.bufs.len()
        );
        Ok(())
    }

    /// Turns a consumer's hang-up (`r` failed with [`PeerGone`]), or a consumer that
    /// corrupted the ring ([`RingCorrupt`]: it is hung up on), into the away state when this
    /// hop keeps serving: `Ok(None)`. Anything else passes through.
    fn absorb<T>(&mut self, r: Result<T>) -> Result<Option<T>> {
        match r {
            Ok(v) => Ok(Some(v)),
            Err(e) if self.keep_serving && PeerGone::is_in(&e) => {
                self.go_away(&e);
                Ok(None)
            }
            Err(e) if self.keep_serving && RingCorrupt::is_in(&e) => {
                // A broken or hostile consumer: hung up on (the connection closes with the
                // ring), and the hop waits for a consumer that follows the protocol.
                let who = self
                    .sender
                    .conn()
                    .map_or_else(|| "the consumer".to_string(), |c| format!("the consumer ({})", c.peer()));
                self.stats.consumers_dropped += 1;
                self.go_away(&e.context(format!("dropped {who}")));
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// The consumer hung up: everything it held or had queued is free again, and frames
    /// are dropped (counted) until one re-joins.
    fn go_away(&mut self, why: &anyhow::Error) {
        let held = self.state.iter().filter(|s| matches!(s, BufState::Queued(_))).count() as u64;
        self.carried = self.carried.then(RingCounters { in_flight: 0, ..self.sender.counters() });
        self.reclaim_from_dead_consumer();
        self.sender = Link::Away;
        self.away = Some((Instant::now(), held));
        self.stats.consumers_lost += 1;
        log::warn!(
            "{why:#}: the {held} buffers it held or had queued are back; frames are dropped until it joins again"
        );
    }

    /// Copy counters of this hop's producer side (`None` in zero-copy mode: nothing copied).
    pub fn copy_counters(&self) -> Option<CopyCounters> {
        match &self.sender {
            Link::Copy { data, .. } => Some(data.counters),
            Link::Ring(_) | Link::Away => None,
        }
    }

    fn release(&mut self, i: u32, seq: u64) -> bool {
        match self.state.get(i as usize) {
            Some(BufState::Queued(s)) if *s == seq as u32 => {
                self.free_buffer(i);
                true
            }
            _ => false,
        }
    }

    /// The producer or its consumer is done with buffer `i`: free, unless a tap still
    /// holds it ([`BufState::Tapped`]; free when the last tap gives it back).
    fn free_buffer(&mut self, i: u32) {
        if self.taps.iter().any(|t| t.held[i as usize].is_some()) {
            self.state[i as usize] = BufState::Tapped;
            return;
        }
        self.state[i as usize] = BufState::Free;
        self.free.push_back(i);
    }

    /// Serves a tap, a secondary consumer (the web view, a display) that said its hello on
    /// `conn` ([`crate::link::tap_hello`]): the same pool's fds once, with SCM_RIGHTS,
    /// and a drop-oldest ring of one slot of its own (in copy mode, a data socket). From
    /// then on every frame published goes to it too, unless it still holds `hold` frames
    /// (1 ..= [`TAP_MAX_HELD`]; more is capped); a buffer is free again when the consumer and every tap gave it
    /// back. A tap never slows the producer nor the consumer: it only loses frames of its
    /// own (counted in [`PoolStats::tap_dropped`]). Errors: [`MAX_TAPS`] taps already, or
    /// the offer could not be sent (the connection is dropped).
    pub fn add_tap(&mut self, conn: Conn, name: &str, hold: usize) -> Result<()> {
        if self.taps.len() >= MAX_TAPS {
            let why = format!("this pool already serves {MAX_TAPS} taps");
            let _ = conn.send(&ControlMsg::Refuse { error: why.clone() }, &[]);
            bail!("{why}");
        }
        let peer = conn.peer();
        let spec = HopSpec { policy: RingPolicy::DropOldest, capacity: 1, ..self.spec.clone() };
        let link = Link::offer(conn, &self.bufs, &spec)?;
        if let Link::Copy { data, .. } = &link {
            // A stalled copy-mode tap must not stall the producer: a frame it cannot take
            // within this long ends it (it joins again).
            let _ = data.set_write_timeout(Some(TAP_COPY_TIMEOUT));
        }
        let max_held = hold.clamp(1, TAP_MAX_HELD);
        self.taps.push(Tap { name: name.to_string(), link, held: vec![None; self.bufs.len()], max_held });
        self.stats.taps_joined += 1;
        log::info!(
            "tap `{name}` ({peer}) joined: {} buffers offered, one-slot drop-oldest ring, holds up to {max_held}",
            self.bufs.len()
        );
        Ok(())
    }

    /// Lets go of taps that hung up (one poll(2) each): whatever they held is theirs no
    /// more. Called every [`crate::stage::REJOIN_EVERY`] by a stage that serves taps.
    pub fn check_taps(&mut self) {
        let mut k = 0;
        while k < self.taps.len() {
            if self.taps[k].link.conn().is_none_or(|c| c.peer_gone()) {
                self.drop_tap(k, "hung up");
            } else {
                k += 1;
            }
        }
    }

    /// Ends tap `k` (`why`: it hung up, or broke its ring): every buffer it held is
    /// released.
    fn drop_tap(&mut self, k: usize, why: &str) {
        let tap = self.taps.remove(k);
        self.stats.taps_lost += 1;
        let who = tap.link.conn().map_or_else(String::new, |c| format!(" ({})", c.peer()));
        log::info!("tap `{}`{who} {why}; the {} buffers it held are released", tap.name, tap.holding());
        for (i, h) in tap.held.iter().enumerate() {
            if h.is_some() {
                self.untap(i as u32);
            }
        }
    }

    /// A tap gave buffer `i` back (its hold is already cleared): free if the consumer is
    /// done with it and no other tap holds it.
    fn untap(&mut self, i: u32) {
        if self.state[i as usize] == BufState::Tapped && !self.taps.iter().any(|t| t.held[i as usize].is_some()) {
            self.state[i as usize] = BufState::Free;
            self.free.push_back(i);
        }
    }

    /// Tap `k` gives back buffer `i` it held under sequence number `seq`; `false` for a
    /// token it did not hold (refused, counted as a bad return).
    fn tap_release(&mut self, k: usize, i: u32, seq: u64) -> bool {
        match self.taps[k].held.get(i as usize) {
            Some(Some(s)) if *s == seq as u32 => {
                self.taps[k].held[i as usize] = None;
                self.untap(i);
                true
            }
            _ => false,
        }
    }

    /// Tokens the taps sent back; a tap whose ring is broken or that hung up is let go.
    fn reclaim_tap_returns(&mut self) {
        let mut k = 0;
        while k < self.taps.len() {
            match self.taps[k].link.pop_return() {
                Ok(Some(tok)) => {
                    let (i, seq) = ((tok & 0xffff_ffff) as u32, tok >> 32);
                    if !self.tap_release(k, i, seq) {
                        self.stats.bad_returns += 1;
                    }
                }
                Ok(None) => k += 1,
                Err(e) => self.drop_tap(k, &format!("{e:#}")),
            }
        }
    }

    /// Takes frames back from the taps' rings that they have not read yet (drop-oldest
    /// for taps): `true` if a buffer became free.
    fn reclaim_tap_queued(&mut self) -> bool {
        let before = self.free.len();
        let mut k = 0;
        while k < self.taps.len() {
            match self.taps[k].link.take_oldest() {
                Ok(Some(d)) => {
                    self.stats.tap_dropped += 1;
                    self.tap_release(k, d.buffer_index, d.seq);
                }
                Ok(None) => k += 1,
                Err(e) => self.drop_tap(k, &format!("{e:#}")),
            }
        }
        self.free.len() > before
    }

    /// Hands the frame in buffer `index` (described by `desc`) to every tap that holds
    /// nothing now (after taking its unread frame back): on its ring, or in copy mode as a
    /// copy. Never waits: a tap that still holds its last frame misses this one.
    fn publish_to_taps(&mut self, index: u32, desc: &FrameDesc, stop: &AtomicBool) {
        let mut k = 0;
        while k < self.taps.len() {
            if self.taps[k].holding() >= self.taps[k].max_held {
                // Its last frame unread in its ring: the newer one replaces it.
                match self.taps[k].link.take_oldest() {
                    Ok(Some(d)) => {
                        self.stats.tap_dropped += 1;
                        self.tap_release(k, d.buffer_index, d.seq);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        self.drop_tap(k, &format!("{e:#}"));
                        continue;
                    }
                }
            }
            if self.taps[k].holding() >= self.taps[k].max_held {
                self.stats.tap_dropped += 1;
                k += 1;
                continue;
            }
            let sent = match &mut self.taps[k].link {
                Link::Copy { data, .. } => {
                    if !data.writable() {
                        self.stats.tap_dropped += 1;
                        k += 1;
                        continue;
                    }
                    match self.bufs[index as usize]
                        .iter()
                        .map(|b| b.read())
                        .collect::<Result<Vec<CpuAccess<'_, Read>>>>()
                    {
                        Ok(guards) => data.send(desc, &guards).map(|()| None),
                        Err(e) => Err(e),
                    }
                }
                link => link.send(*desc, stop).map(Some),
            };
            match sent {
                Ok(Some(Sent::Queued)) => {
                    self.taps[k].held[index as usize] = Some(desc.seq as u32);
                    self.stats.tap_frames += 1;
                }
                Ok(Some(Sent::Dropped(d))) => {
                    // (Not with an empty one-slot ring, but a ring is a ring.)
                    self.taps[k].held[index as usize] = Some(desc.seq as u32);
                    self.stats.tap_frames += 1;
                    self.stats.tap_dropped += 1;
                    self.tap_release(k, d.buffer_index, d.seq);
                }
                Ok(None) => self.stats.tap_frames += 1,
                Err(e) => {
                    self.drop_tap(k, &format!("{e:#}"));
                    continue;
                }
            }
            k += 1;
        }
    }

    fn reclaim_returns(&mut self) -> Result<()> {
        if !self.taps.is_empty() {
            self.reclaim_tap_returns();
        }
        loop {
            let r = self.sender.pop_return();
            let Some(Some(tok)) = self.absorb(r)? else { return Ok(()) };
            let (i, seq) = ((tok & 0xffff_ffff) as u32, tok >> 32);
            if self.release(i, seq) {
                self.stats.returned += 1;
            } else {
                self.stats.bad_returns += 1;
                if self.stats.bad_returns <= 5 {
                    let who = self.sender.conn().map_or_else(String::new, |c| format!(" ({})", c.peer()));
                    log::warn!(
                        "the consumer{who} returned token {tok:#x} for a buffer it does not hold; ignored ({} so far)",
                        self.stats.bad_returns
                    );
                }
            }
        }
    }

    /// Takes the oldest queued frame back from the ring (drop-oldest), freeing its buffer;
    /// `false` if the ring was empty.
    fn reclaim_oldest(&mut self) -> Result<bool> {
        let r = self.sender.take_oldest();
        let Some(taken) = self.absorb(r)? else { return Ok(true) };
        Ok(match taken {
            Some(d) => {
                self.carry_mark(&d);
                if self.release(d.buffer_index, d.seq) {
                    self.stats.reclaimed += 1;
                }
                true
            }
            None => false,
        })
    }

    /// Lends a free buffer for writing; `Ok(None)` if `stop` was set while waiting.
    /// Drop-oldest takes the oldest queued frame back when none is free and so never waits
    /// unless the consumer holds every buffer; block waits for a return. Errors if the
    /// consumer died ([`PeerGone`]) or corrupted the ring.
    pub fn acquire(&mut self, stop: &AtomicBool) -> Result<Option<WriteLoan<'_>>> {
        self.acquire_within(stop, None)
    }

    /// [`PoolProducer::acquire`], giving up (`Ok(None)`) once `timeout` has passed without a
    /// buffer, so a stage's loop turns (and reports: its heartbeat) while a consumer keeps
    /// every buffer. `None` waits for ever.
    pub fn acquire_within(&mut self, stop: &AtomicBool, timeout: Option<Duration>) -> Result<Option<WriteLoan<'_>>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            self.reclaim_returns()?;
            if let Some(i) = self.free.pop_front() {
                self.starved_since = None;
                self.state[i as usize] = BufState::Writing;
                return Ok(Some(WriteLoan { pool: self, index: i }));
            }
            if self.policy == RingPolicy::DropOldest && self.reclaim_oldest()? {
                continue;
            }
            if self.reclaim_tap_queued() {
                continue;
            }
            let now = Instant::now();
            if stop.load(std::sync::atomic::Ordering::Relaxed) || deadline.is_some_and(|d| now >= d) {
                return Ok(None);
            }
            self.starving();
            self.stats.waits += 1;
            let r = self.sender.wait_for_returns(
                deadline.map_or(Duration::from_millis(200), |d| (d - now).min(Duration::from_millis(200))),
            );
            self.absorb(r)?;
        }
    }

    /// For pools a device fills (V4L2 capture): lends every free buffer to the device,
    /// after collecting returns, so the caller can queue them (QBUF) with the loans. Under
    /// drop-oldest, if fewer than `min_device` buffers would be with the device, the oldest
    /// queued frames are taken back first, so a slow consumer makes zcpipe drop frames
    /// (counted) rather than starve the driver (which would drop them uncounted).
    pub fn lend_free_to_device(&mut self, min_device: usize) -> Result<Vec<DeviceLoan>> {
        self.reclaim_returns()?;
        if self.policy == RingPolicy::DropOldest {
            let at_device = self.state.iter().filter(|s| **s == BufState::Device).count();
            while at_device + self.free.len() < min_device && self.reclaim_oldest()? {}
        }
        let pool = self.id;
        if self.free.is_empty() && !self.state.contains(&BufState::Device) {
            // Nothing for the device to fill: the consumer holds every buffer.
            self.starving();
        } else {
            self.starved_since = None;
        }
        let v: Vec<DeviceLoan> = self.free.drain(..).map(|index| DeviceLoan { pool, index }).collect();
        for l in &v {
            self.state[l.index as usize] = BufState::Device;
        }
        Ok(v)
    }

    /// Turns a buffer the device handed back filled (DQBUF) into a [`WriteLoan`]: next,
    /// publish it or drop the loan to give it back. Errors if the pool does not have that
    /// buffer at a device (a loan of another pool).
    pub fn claim(&mut self, loan: DeviceLoan) -> Result<WriteLoan<'_>> {
        let i = loan.index;
        if loan.pool != self.id {
            bail!("device returned buffer {i} of another pool");
        }
        match self.state.get(i as usize) {
            Some(BufState::Device) => {
                self.state[i as usize] = BufState::Writing;
                Ok(WriteLoan { pool: self, index: i })
            }
            other => bail!("device returned buffer {i}, which it did not hold ({other:?})"),
        }
    }

    /// Takes back buffers the device gave up without filling them (after STREAMOFF, which
    /// returns every queued buffer): they are free again.
    pub fn device_returned(&mut self, loans: impl IntoIterator<Item = DeviceLoan>) {
        for l in loans {
            if l.pool == self.id && self.state.get(l.index as usize) == Some(&BufState::Device) {
                self.free_buffer(l.index);
            }
        }
    }

    /// The dma-bufs of the buffer `loan` lends to a device, to hand to it with the loan
    /// (QBUF of a `V4L2_MEMORY_DMABUF` queue). Errors for a loan of another pool.
    pub fn device_buffers(&self, loan: &DeviceLoan) -> Result<&[DmaBuf]> {
        if loan.pool != self.id {
            bail!("device loan of buffer {} belongs to another pool", loan.index);
        }
        Ok(&self.bufs[loan.index as usize])
    }

    /// Publishes the buffer of `loan`, described by `desc` (whose `buffer_index` is set to
    /// the loan's). Under drop-oldest the displaced frame's buffer is freed at once. In copy
    /// mode the frame is copied out now and the buffer is free again at once.
    fn publish(&mut self, index: u32, mut desc: FrameDesc, stop: &AtomicBool) -> Result<()> {
        let i = index as usize;
        desc.buffer_index = index;
        let camera = crate::frame::camera_of(desc.flags);
        let mut marked = false;
        if let Some((m, _)) = self.mark.filter(|(_, only)| only.is_none_or(|c| c == camera)) {
            desc.flags = m.mark(desc.flags);
            marked = true;
        }
        if !self.taps.is_empty() {
            self.publish_to_taps(index, &desc, stop);
        }
        if let Link::Away = self.sender {
            // Nobody to take it: dropped now, counted.
            self.free_buffer(index);
            self.drop_away();
            self.dropped_by_camera[camera] += 1;
            return Ok(());
        }
        if let Link::Copy { data, .. } = &mut self.sender {
            let guards: Vec<CpuAccess<'_, Read>> = self.bufs[i].iter().map(|b| b.read()).collect::<Result<_>>()?;
            let sent = data.send(&desc, &guards);
            drop(guards);
            self.free_buffer(index);
            if self.absorb(sent)?.is_none() {
                self.drop_away();
                self.dropped_by_camera[camera] += 1;
            } else if marked {
                self.mark = None;
            }
            return Ok(());
        }
        self.state[i] = BufState::Queued(desc.seq as u32);
        let sent = self.sender.send(desc, stop);
        if sent.is_err() {
            // Not queued: the buffer is ours again.
            self.free_buffer(index);
        }
        match self.absorb(sent)? {
            Some(Sent::Dropped(d)) => {
                if marked {
                    self.mark = None;
                }
                self.carry_mark(&d);
                if self.release(d.buffer_index, d.seq) {
                    self.stats.reclaimed += 1;
                }
            }
            Some(Sent::Queued) if marked => self.mark = None,
            Some(Sent::Queued) => {}
            None => {
                self.drop_away();
                self.dropped_by_camera[camera] += 1;
            }
        }
        Ok(())
    }

    /// A frame dropped from the ring (drop-oldest): counted for its camera, and a restart
    /// notice it carried goes to the next frame published of the same camera, so a notice
    /// is never dropped with its frame nor moved to another camera's.
    fn carry_mark(&mut self, dropped: &FrameDesc) {
        let camera = crate::frame::camera_of(dropped.flags);
        self.dropped_by_camera[camera] += 1;
        if self.mark.is_none() {
            self.mark = RestartMark::from_flags(dropped.flags).map(|m| (m, Some(camera)));
        }
    }

    /// Frames dropped from this hop so far, per camera index (drop-oldest, or no consumer).
    pub fn dropped_per_camera(&self) -> [u64; crate::frame::MAX_CAMERAS] {
        self.dropped_by_camera
    }

    /// Counts a frame dropped because no consumer is there.
    fn drop_away(&mut self) {
        self.stats.dropped_away += 1;
        self.carried.produced += 1;
        self.carried.dropped += 1;
        if let Some((_, lost)) = &mut self.away {
            *lost += 1;
        }
    }

    /// Sleeps up to `timeout` between frames (a source's pacing), waking early if the
    /// consumer hangs up (an error, [`PeerGone`]) or a signal arrives: one syscall for the
    /// sleep and the liveness check ([`Sender::pace`]).
    pub fn pace(&mut self, timeout: Duration) -> Result<()> {
        let r = self.sender.pace(timeout);
        self.absorb(r).map(drop)
    }

    /// Frees every buffer queued to or held by a consumer that is gone (its process is
    /// dead, so nothing it mapped can be in use any more).
    fn reclaim_from_dead_consumer(&mut self) {
        for i in 0..self.state.len() as u32 {
            if matches!(self.state[i as usize], BufState::Queued(_)) {
                self.free_buffer(i);
            }
        }
    }

    /// Ring counters, over every ring this hop has had (a consumer that re-joins gets a
    /// fresh one) and the frames dropped while no consumer was there.
    pub fn counters(&self) -> RingCounters {
        self.carried.then(self.sender.counters())
    }

    /// Buffer traffic counts.
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            outstanding: self.state.iter().filter(|s| !matches!(s, BufState::Free | BufState::Device)).count(),
            waits: self.stats.waits + self.sender.waits(),
            taps: self.taps.len(),
            ..self.stats
        }
    }

    /// Ends this hop after the stage's frame loop: a clean end (`clean`) is an end of stream
    /// drained as [`PoolProducer::finish`] does; after an error nothing is sent, so the
    /// consumer sees this stage hang up (and waits for it to be restarted, see
    /// [`Upstream`]). Returns (buffers back during the drain, buffers still out); on
    /// an error path or a failed drain, (0, those out now) with the drain's error, if any.
    pub fn end(&mut self, clean: bool, timeout: Duration) -> ((usize, usize), Result<()>) {
        // No WriteLoan can be alive here (each borrows the pool), so every buffer being
        // written when the loop ended is already free again.
        let drained = if clean {
            self.finish(timeout)
        } else if self.sender.conn().is_none_or(|c| c.peer_gone()) {
            // The consumer is dead: whatever it held or had queued is ours again.
            let out = self.stats().outstanding;
            self.reclaim_from_dead_consumer();
            Ok((out - self.stats().outstanding, self.stats().outstanding))
        } else {
            Ok((0, self.stats().outstanding))
        };
        match drained {
            Ok(counts) => (counts, Ok(())),
            Err(e) => ((0, self.stats().outstanding), Err(e)),
        }
    }

    /// Ends the stream and waits (up to `timeout`) until every buffer is back or the
    /// consumer hung up (which frees whatever it held). Returns how many buffers came back
    /// from the consumer during the drain and how many are still out.
    pub fn finish(&mut self, timeout: Duration) -> Result<(usize, usize)> {
        self.sender.finish();
        // Taps end with the stream too, and are let go at once: nothing is written into
        // the pool any more, so what a tap still reads stays as it is, and the end never
        // waits for a tap.
        for t in &mut self.taps {
            t.link.finish();
        }
        let lost = self.stats.taps_lost;
        while !self.taps.is_empty() {
            self.drop_tap(0, "ends with the stream");
        }
        self.stats.taps_lost = lost;
        let start = Instant::now();
        let out_before = self.stats().outstanding;
        loop {
            self.reclaim_returns()?;
            let out = self.stats().outstanding;
            if out == 0 {
                return Ok((out_before, 0));
            }
            if self.sender.conn().is_none_or(|c| c.peer_gone()) {
                // The consumer is gone: nothing it held can be in use any more.
                self.reclaim_returns()?;
                let still = self.stats().outstanding;
                self.reclaim_from_dead_consumer();
                return Ok((out_before - still, still));
            }
            if start.elapsed() > timeout {
                return Ok((out_before - out, out));
            }
            let _ = self.sender.wait_for_returns(Duration::from_millis(100));
        }
    }
}

/// A pool buffer lent to the producer for writing: the only way to write a buffer of a
/// [`PoolProducer`]. [`WriteLoan::publish`] consumes it (the buffer goes to the consumer and
/// can no longer be written); dropping it unpublished gives the buffer back to the pool.
///
/// It borrows the pool, so a producer holds one at a time, and nothing else can change
/// the pool while it is out. Writing a published buffer does not compile:
///
/// ```compile_fail,E0382
/// # use zcpipe::core::{pool::PoolProducer, frame::FrameDesc};
/// # fn f(prod: &mut PoolProducer, stop: &std::sync::atomic::AtomicBool) -> anyhow::Result<()> {
/// let mut loan = prod.acquire(stop)?.unwrap();
/// loan.publish(FrameDesc::default(), stop)?;
/// let _ = loan.buffers_mut(); // error: `loan` was moved by `publish`
/// # Ok(()) }
/// ```
///
/// while the same lines in order do:
///
/// ```
/// # use zcpipe::core::{pool::PoolProducer, frame::FrameDesc};
/// # fn f(prod: &mut PoolProducer, stop: &std::sync::atomic::AtomicBool) -> anyhow::Result<()> {
/// let mut loan = prod.acquire(stop)?.unwrap();
/// let _ = loan.buffers_mut();
/// loan.publish(FrameDesc::default(), stop)?;
/// # Ok(()) }
/// ```
#[must_use = "dropping a WriteLoan gives the buffer back unpublished"]
pub struct WriteLoan<'p> {
    pool: &'p mut PoolProducer,
    index: u32,
}

impl WriteLoan<'_> {
    /// The buffer's index in the pool (what a device that imported the pool at set-up
    /// knows it by).
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The buffer's dma-bufs (one per `fd_index`), writable through their CPU guards
    /// ([`DmaBuf::write`]).
    pub fn buffers_mut(&mut self) -> &mut [DmaBuf] {
        &mut self.pool.bufs[self.index as usize]
    }

    /// Hands the written buffer to the consumer, described by `desc` (its `buffer_index`
    /// is set to this loan's). Errors if the consumer died ([`PeerGone`]) or corrupted
    /// the ring; the buffer is back in the pool then.
    pub fn publish(self, desc: FrameDesc, stop: &AtomicBool) -> Result<()> {
        // The buffer leaves the `Writing` state here (queued, or free again), so the drop
        // that follows gives nothing back.
        self.pool.publish(self.index, desc, stop)
    }
}

impl Drop for WriteLoan<'_> {
    /// An unpublished loan gives its buffer back (for example at end of stream).
    fn drop(&mut self) {
        if self.pool.state[self.index as usize] == BufState::Writing {
            self.pool.free_buffer(self.index);
        }
    }
}

/// A pool buffer lent to a device that fills it (a V4L2 driver's queue): held by whoever
/// queued it, turned back into a [`WriteLoan`] with [`PoolProducer::claim`] when the device
/// hands it back filled (DQBUF), or returned with [`PoolProducer::device_returned`] when
/// the device gives it up (STREAMOFF). The pool's state records who holds each buffer; the
/// loan is the token the holder keeps (a V4L2 queue keeps one per queued buffer), and it
/// names its pool, so another pool refuses it.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a DeviceLoan dropped without device_returned leaves its buffer lent for good"]
pub struct DeviceLoan {
    /// The [`PoolProducer`] that lent it (its `id`).
    pool: u64,
    index: u32,
}

impl DeviceLoan {
    /// The buffer's index in the pool (the V4L2 buffer index it is queued as).
    pub fn index(&self) -> u32 {
        self.index
    }
}

//! [`PoolProducer`], the producer's end of a hop: the pool's ownership states, acquiring and
//! publishing, device loans, reclaiming returns, a consumer that goes away and comes back, and
//! the end of the hop.

use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use crate::channel::Sent;
use crate::copy::CopyCounters;
use crate::dmabuf::{CpuAccess, DmaBuf, Read};
use crate::frame::{FrameDesc, RestartMark, Stage};
use crate::link::Conn;

use super::*;

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
    pub(super) sender: Link,
    pub(super) bufs: Vec<Vec<DmaBuf>>,
    pub(super) state: Vec<BufState>,
    pub(super) free: VecDeque<u32>,
    policy: RingPolicy,
    pub(super) stats: PoolStats,
    /// The offer, for a consumer that re-joins.
    pub(super) spec: HopSpec,
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
    pub(super) taps: Vec<Tap>,
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
    /// [`crate::Error::PeerGone`] error (tests, `zcpipe bench`).
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
            self.go_away(&crate::Error::downstream_gone(pid));
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
        self.mark = Some((RestartMark::restart(consumer, lost), None));
        log::info!(
            "the {} stage ({peer}) joined again after {:.1} s: offered the same {} buffers on a fresh ring; {lost} frames lost meanwhile",
            consumer.name(),
            since.elapsed().as_secs_f64(),
            self.bufs.len()
        );
        Ok(())
    }

    /// Turns a consumer's hang-up (`r` failed with [`crate::Error::PeerGone`]), or a consumer that
    /// corrupted the ring ([`crate::Error::RingCorrupt`]: it is hung up on), into the away state when this
    /// hop keeps serving: `Ok(None)`. Anything else passes through.
    fn absorb<T>(&mut self, r: crate::Result<T>) -> crate::Result<Option<T>> {
        match r {
            Ok(v) => Ok(Some(v)),
            Err(e @ crate::Error::PeerGone { .. }) if self.keep_serving => {
                self.go_away(&e);
                Ok(None)
            }
            Err(e @ crate::Error::RingCorrupt { .. }) if self.keep_serving => {
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
    fn go_away(&mut self, why: &crate::Error) {
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
    pub(super) fn free_buffer(&mut self, i: u32) {
        if self.taps.iter().any(|t| t.held[i as usize].is_some()) {
            self.state[i as usize] = BufState::Tapped;
            return;
        }
        self.state[i as usize] = BufState::Free;
        self.free.push_back(i);
    }

    pub(super) fn reclaim_returns(&mut self) -> crate::Result<()> {
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
    fn reclaim_oldest(&mut self) -> crate::Result<bool> {
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
    /// consumer died ([`crate::Error::PeerGone`]) or corrupted the ring.
    pub fn acquire(&mut self, stop: &AtomicBool) -> crate::Result<Option<WriteLoan<'_>>> {
        self.acquire_within(stop, None)
    }

    /// [`PoolProducer::acquire`], giving up (`Ok(None)`) once `timeout` has passed without a
    /// buffer, so a stage's loop turns (and reports: its heartbeat) while a consumer keeps
    /// every buffer. `None` waits for ever.
    pub fn acquire_within(
        &mut self,
        stop: &AtomicBool,
        timeout: Option<Duration>,
    ) -> crate::Result<Option<WriteLoan<'_>>> {
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
    pub fn lend_free_to_device(&mut self, min_device: usize) -> crate::Result<Vec<DeviceLoan>> {
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
    pub(super) fn publish(&mut self, index: u32, mut desc: FrameDesc, stop: &AtomicBool) -> crate::Result<()> {
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
    /// consumer hangs up (an error, [`crate::Error::PeerGone`]) or a signal arrives: one syscall for the
    /// sleep and the liveness check ([`Sender::pace`]).
    pub fn pace(&mut self, timeout: Duration) -> crate::Result<()> {
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

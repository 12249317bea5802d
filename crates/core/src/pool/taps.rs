//! Taps: secondary consumers (the web view, a display) served from the same pool, each on a
//! drop-oldest ring of its own, and the producer's side of adding, feeding and dropping them.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{bail, Result};

use crate::channel::Sent;
use crate::dmabuf::{CpuAccess, Read};
use crate::frame::FrameDesc;
use crate::link::{Conn, ControlMsg};

use super::*;

/// The most taps ([`PoolProducer::add_tap`]) a pool serves at once; one more is refused.
pub(crate) const MAX_TAPS: usize = 4;

/// The most buffers one tap may hold at once (in its ring or in its hands): it takes the
/// newest frame, and while it holds as many as it asked for (1 by default; a display asks
/// for 2, the frame on screen and the one queued to replace it:
/// [`crate::link::tap_hello_holding`], capped at this) it is given no other. So
/// `MAX_TAPS` taps hold at most `MAX_TAPS * TAP_MAX_HELD` buffers, and a tap that never
/// returns its frames costs the pool those buffers, never the pipeline's frames.
pub(crate) const TAP_MAX_HELD: usize = 2;

/// How long a copy-mode tap may take to read one frame's bytes before it is hung up on
/// (it joins again): a tap never stalls its producer for longer.
pub(crate) const TAP_COPY_TIMEOUT: Duration = Duration::from_millis(500);

/// A secondary consumer of a pool ([`PoolProducer::add_tap`]).
pub(super) struct Tap {
    /// Its name (from its hello: `view`, `display`).
    name: String,
    pub(super) link: Link,
    /// Per buffer: the sequence number (low 32 bits) under which the tap holds it.
    pub(super) held: Vec<Option<u32>>,
    /// The most it holds at once (1..=[`TAP_MAX_HELD`], as its hello asked).
    max_held: usize,
}

impl Tap {
    pub(super) fn holding(&self) -> usize {
        self.held.iter().filter(|h| h.is_some()).count()
    }
}

impl PoolProducer {
    /// Serves a tap, a secondary consumer (the web view, a display) that said its hello on
    /// `conn` ([`crate::link::tap_hello_holding`]): the same pool's fds once, with SCM_RIGHTS,
    /// and a drop-oldest ring of one slot of its own (in copy mode, a data socket). From
    /// then on every frame published goes to it too, unless it still holds `hold` frames
    /// (1 ..= [`TAP_MAX_HELD`]; more is capped); a buffer is free again when the consumer and every tap gave it
    /// back. A tap never slows the producer nor the consumer: it only loses frames of its
    /// own (counted in [`PoolStats::tap_dropped`]). Errors: [`MAX_TAPS`] taps already, or
    /// the offer could not be sent (the connection is dropped).
    pub(crate) fn add_tap(&mut self, conn: Conn, name: &str, hold: usize) -> Result<()> {
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
    pub(crate) fn check_taps(&mut self) {
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
    pub(super) fn drop_tap(&mut self, k: usize, why: &str) {
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
    pub(super) fn reclaim_tap_returns(&mut self) {
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
    pub(super) fn reclaim_tap_queued(&mut self) -> bool {
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
    pub(super) fn publish_to_taps(&mut self, index: u32, desc: &FrameDesc, stop: &AtomicBool) {
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
                        Err(e) => Err(crate::Error::Other(e)),
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
}

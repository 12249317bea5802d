//! A hop between two stages: a ring ([`super::ring`]) plus two eventfd doorbells and the
//! control connection used to notice a dead peer.
//!
//! The doorbell (producer -> consumer) is rung only when the consumer announced it is going
//! to sleep; the back doorbell (consumer -> producer) only when the producer did. So a busy
//! pipeline makes no wake-up syscalls at all, and an idle one sleeps in poll(2) (eventfd(2)).
//! With `--wait spin` the consumer never sleeps and the producer never rings.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytemuck::Pod;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};

use super::link::{Conn, PeerGone, WaitMode};
use super::ring::{Pop, Push, RingConsumer, RingCounters, RingPolicy, RingProducer};

/// An eventfd used as a doorbell (eventfd(2)); nonblocking, close-on-exec.
#[derive(Debug)]
pub struct Doorbell(OwnedFd);

impl Doorbell {
    /// Creates a new doorbell (eventfd(2) with EFD_CLOEXEC | EFD_NONBLOCK).
    pub fn new() -> Result<Doorbell> {
        let efd = EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK).context("eventfd")?;
        Ok(Doorbell(OwnedFd::from(efd)))
    }
    /// Adopts a doorbell fd received from a peer.
    pub fn from_fd(fd: OwnedFd) -> Doorbell {
        Doorbell(fd)
    }
    /// Rings: adds 1 to the counter (a full counter already means "rung").
    pub fn ring(&self) {
        let _ = nix::unistd::write(&self.0, &1u64.to_ne_bytes());
    }
    /// Clears pending rings.
    pub fn drain(&self) {
        let mut b = [0u8; 8];
        let _ = nix::unistd::read(self.0.as_raw_fd(), &mut b);
    }
}

impl AsFd for Doorbell {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// Waits up to `timeout` for `bell` to ring or `conn`'s peer to hang up. Returns
/// `Ok(true)` if the peer is gone.
fn wait_bell(bell: &Doorbell, conn: &Conn, timeout: Duration) -> Result<bool> {
    let ms = timeout.as_millis().min(u16::MAX as u128) as u16;
    let mut p = [PollFd::new(bell.as_fd(), PollFlags::POLLIN), PollFd::new(conn.as_fd(), PollFlags::POLLIN)];
    match poll(&mut p, PollTimeout::from(ms)) {
        Ok(_) | Err(nix::errno::Errno::EINTR) => {}
        Err(e) => bail!("poll: {e}"),
    }
    bell.drain();
    let r = p[1].revents().unwrap_or(PollFlags::empty());
    Ok(r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLIN) && conn.peer_gone())
}

/// What a send did.
#[derive(Debug)]
pub enum Sent<T> {
    /// Queued.
    Queued,
    /// Queued; the oldest queued item was dropped to make room and is returned here.
    Dropped(T),
}

/// The producer's end of a hop.
pub struct Sender<T: Pod> {
    ring: RingProducer<T>,
    doorbell: Doorbell,
    backbell: Doorbell,
    conn: Conn,
    policy: RingPolicy,
    waits: u64,
}

impl<T: Pod> Sender<T> {
    /// Wraps a ring and its doorbells after the offer went out.
    pub fn new(ring: RingProducer<T>, doorbell: Doorbell, backbell: Doorbell, conn: Conn, policy: RingPolicy) -> Sender<T> {
        Sender { ring, doorbell, backbell, conn, policy, waits: 0 }
    }

    /// The control connection (for liveness).
    pub fn conn(&self) -> &Conn {
        &self.conn
    }

    /// Ring counters.
    pub fn counters(&self) -> RingCounters {
        self.ring.counters()
    }

    /// Queues `item`. Drop-oldest never waits; block waits for space (checking `stop` and
    /// the peer's liveness). Errors if the consumer died or corrupted the ring.
    pub fn send(&mut self, item: T, stop: &AtomicBool) -> Result<Sent<T>> {
        // Drop-oldest never waits, so without this a producer would go on feeding a ring
        // nobody reads (one poll(2) with a zero timeout: no sleep, no wake-up).
        if self.conn.peer_gone() {
            return Err(PeerGone::new(format!("downstream (pid {}) hung up", self.conn.peer_pid)).into());
        }
        loop {
            match self.ring.push(item, self.policy == RingPolicy::DropOldest)? {
                Push::Queued => {
                    self.wake();
                    return Ok(Sent::Queued);
                }
                Push::QueuedDropped(d) => {
                    self.wake();
                    return Ok(Sent::Dropped(d));
                }
                Push::Full => {
                    if stop.load(Ordering::Relaxed) {
                        bail!("stopped while waiting for ring space");
                    }
                    self.waits += 1;
                    let cap = self.ring.geometry().capacity as u64;
                    self.wait_back(|r| r.len().map(|n| n < cap).unwrap_or(true), Duration::from_millis(200))?;
                }
            }
        }
    }

    fn wake(&self) {
        if self.ring.consumer_sleeping() {
            self.doorbell.ring();
        }
    }

    /// Waits (up to `timeout`) on the back doorbell until `ready` holds. Errors if the
    /// consumer hung up.
    pub fn wait_back(&mut self, ready: impl Fn(&RingProducer<T>) -> bool, timeout: Duration) -> Result<()> {
        self.ring.set_sleeping(true);
        if ready(&self.ring) {
            self.ring.set_sleeping(false);
            return Ok(());
        }
        let gone = wait_bell(&self.backbell, &self.conn, timeout);
        self.ring.set_sleeping(false);
        if gone? {
            return Err(PeerGone::new(format!("downstream (pid {}) hung up", self.conn.peer_pid)).into());
        }
        Ok(())
    }

    /// Times `send` waited for space (block policy).
    pub fn waits(&self) -> u64 {
        self.waits
    }

    /// Takes back the oldest queued item (counted as dropped).
    pub fn take_oldest(&mut self) -> Result<Option<T>> {
        self.ring.take_oldest()
    }

    /// Next value from the return queue (unchecked).
    pub fn pop_return(&mut self) -> Result<Option<u64>> {
        self.ring.pop_return()
    }

    /// Signals end of stream and wakes the consumer.
    pub fn finish(&self) {
        self.ring.set_eos();
        self.doorbell.ring();
    }
}

/// What a receive found.
#[derive(Debug)]
pub enum Recv<T> {
    /// The next item.
    Item(T),
    /// The producer finished and everything queued was taken.
    Eos,
    /// The producer died (its control socket hung up).
    Hangup,
    /// Nothing arrived within the timeout (check stop flags, print stats, try again).
    Idle,
}

/// The consumer's end of a hop.
pub struct Receiver<T: Pod> {
    ring: RingConsumer<T>,
    doorbell: Doorbell,
    backbell: Doorbell,
    conn: Conn,
    wait: WaitMode,
    rejected_logged: u64,
}

impl<T: Pod> Receiver<T> {
    /// Wraps an attached ring and its doorbells.
    pub fn new(ring: RingConsumer<T>, doorbell: Doorbell, backbell: Doorbell, conn: Conn, wait: WaitMode) -> Receiver<T> {
        Receiver { ring, doorbell, backbell, conn, wait, rejected_logged: 0 }
    }

    /// The control connection.
    pub fn conn(&self) -> &Conn {
        &self.conn
    }

    /// Ring counters.
    pub fn counters(&self) -> RingCounters {
        self.ring.counters()
    }

    /// Takes the next valid item, waiting up to `timeout`. Items failing `validate` are
    /// counted, logged (rate-limited) and handed to `salvage` (e.g. to return their buffer).
    pub fn recv(
        &mut self,
        validate: &dyn Fn(&T) -> std::result::Result<(), String>,
        salvage: &mut dyn FnMut(&mut Self, Option<T>),
        timeout: Duration,
    ) -> Result<Recv<T>> {
        let deadline = Instant::now() + timeout;
        let mut spins = 0u32;
        let mut hung_up = false;
        loop {
            match self.ring.pop(validate) {
                Pop::Item(t) => {
                    if self.ring.producer_sleeping() {
                        self.backbell.ring();
                    }
                    return Ok(Recv::Item(t));
                }
                Pop::Rejected { item, reason } => {
                    self.rejected_logged += 1;
                    if self.rejected_logged <= 5 || self.rejected_logged.is_power_of_two() {
                        log::warn!("rejected a slot from upstream pid {} ({} so far): {reason}", self.conn.peer_pid, self.rejected_logged);
                    }
                    salvage(self, item);
                    continue;
                }
                Pop::Empty => {}
            }
            if self.ring.eos() {
                // EOS is set after the last push: one more look closes the race.
                if let Pop::Empty = self.ring.pop(|_: &T| Err("after eos".to_string())) {
                    return Ok(Recv::Eos);
                }
                continue;
            }
            if hung_up {
                // Checked only once the ring is empty and has no EOS: a producer that ended
                // its stream and exited still gets all its frames delivered.
                return Ok(Recv::Hangup);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Recv::Idle);
            }
            match self.wait {
                WaitMode::Spin => {
                    spins += 1;
                    if spins.is_multiple_of(4096) && self.conn.peer_gone() {
                        hung_up = true;
                    }
                    std::hint::spin_loop();
                }
                WaitMode::Eventfd => {
                    self.ring.set_sleeping(true);
                    if let Pop::Item(t) = self.ring.pop(validate) {
                        self.ring.set_sleeping(false);
                        if self.ring.producer_sleeping() {
                            self.backbell.ring();
                        }
                        return Ok(Recv::Item(t));
                    }
                    let gone = wait_bell(&self.doorbell, &self.conn, deadline - now);
                    self.ring.set_sleeping(false);
                    hung_up = gone?;
                }
            }
        }
    }

    /// Sends a value (a buffer token) back to the producer and wakes it if it sleeps.
    pub fn push_return(&mut self, v: u64) -> Result<()> {
        self.ring.push_return(v)?;
        if self.ring.producer_sleeping() {
            self.backbell.ring();
        }
        Ok(())
    }

    #[doc(hidden)]
    pub fn ring_for_tests(&self) -> &RingConsumer<T> {
        &self.ring
    }
}

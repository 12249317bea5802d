//! A hop between two stages: a ring ([`super::ring`]) plus two eventfd doorbells and the
//! control connection used to notice a dead peer.
//!
//! The doorbell (producer -> consumer) is rung only when the consumer announced it is going
//! to sleep; the back doorbell (consumer -> producer) only when the producer did, and only
//! for what it sleeps for ([`BackWait`]: ring space after a pop, or a returned buffer), so
//! a producer waiting for a buffer is woken once per buffer, not also per pop. A busy
//! pipeline makes no syscall per item on either side, and an idle one sleeps.
//!
//! What a hop costs in syscalls (counted by `benches/syscalls.sh`):
//! - a consumer that finds the next item in the ring: none;
//! - a consumer that sleeps: one `epoll_wait(2)`, on an epoll set holding its doorbell
//!   (edge-triggered: the eventfd is never read, so every ring is a new edge; its counter
//!   only grows, by one per ring) and the control socket (hang-up only: EPOLLRDHUP, with
//!   EPOLLHUP always reported, epoll(7)), so a wake-up and a dead producer are seen by the
//!   same call;
//! - a producer: one eventfd write, only when the consumer sleeps; it looks for a dead
//!   consumer (a zero-timeout poll(2) of the control socket) only when the ring is full
//!   (a drop, or a buffer taken back) and otherwise at most every [`PEER_CHECK_EVERY`]: a
//!   consumer that dies stops emptying the ring, so under drop-oldest the ring is full
//!   within `capacity` frames, and under block the producer waits on the back doorbell,
//!   whose epoll set watches the hang-up too.
//!
//! With `--wait spin` the consumer never sleeps and the producer never rings.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytemuck::Pod;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};

use super::link::{Conn, WaitMode};
use super::ring::{BackWait, OwnCounts, Pop, Push, RingConsumer, RingCounters, RingPolicy, RingProducer};

/// How often, at most, a producer whose ring has room polls its consumer's control socket
/// for a hang-up (a full ring is checked at once, at most every [`PEER_CHECK_FULL_EVERY`]).
pub(crate) const PEER_CHECK_EVERY: Duration = Duration::from_millis(100);

/// How often, at most, a drop-oldest producer whose ring is full (every send drops a
/// frame, or it takes buffers back) polls its consumer's control socket.
pub(crate) const PEER_CHECK_FULL_EVERY: Duration = Duration::from_millis(1);

/// An eventfd used as a doorbell (eventfd(2)); nonblocking, close-on-exec. The ringing side
/// writes 1; the sleeping side never reads it, but waits for the edge ([`Sleeper`]).
#[derive(Debug)]
pub struct Doorbell(OwnedFd);

impl Doorbell {
    /// Creates a new doorbell (eventfd(2) with EFD_CLOEXEC | EFD_NONBLOCK).
    pub fn new() -> Result<Doorbell> {
        let efd = EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK).context("eventfd")?;
        Ok(Doorbell(OwnedFd::from(efd)))
    }
    /// Adopts a doorbell fd received from a peer: it must be an eventfd (its
    /// `/proc/self/fd` link reads `anon_inode:[eventfd]`, proc(5)), so that ringing it never
    /// blocks and waiting on it works; it is made nonblocking here whatever the peer set.
    pub fn from_peer(fd: OwnedFd) -> Result<Doorbell> {
        let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        if link != "anon_inode:[eventfd]" {
            bail!("the doorbell fd is not an eventfd ({})", if link.is_empty() { "unreadable" } else { &link });
        }
        let flags = nix::fcntl::OFlag::from_bits_truncate(
            nix::fcntl::fcntl(fd.as_raw_fd(), nix::fcntl::FcntlArg::F_GETFL).context("F_GETFL on the doorbell")?,
        );
        nix::fcntl::fcntl(fd.as_raw_fd(), nix::fcntl::FcntlArg::F_SETFL(flags | nix::fcntl::OFlag::O_NONBLOCK))
            .context("F_SETFL on the doorbell")?;
        Ok(Doorbell(fd))
    }
    /// Rings: adds 1 to the counter. The counter is never read, so it would refuse a write
    /// (EAGAIN) only after 2^64 - 2 rings.
    pub fn ring(&self) {
        let _ = nix::unistd::write(&self.0, &1u64.to_ne_bytes());
    }
}

impl AsFd for Doorbell {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// One side's way to sleep: an epoll set (epoll(7)) with the doorbell this side is woken
/// by, edge-triggered, and the control socket to its peer, for the hang-up only. One
/// `epoll_wait` per sleep, nothing to drain after it.
struct Sleeper {
    ep: Epoll,
}

/// `EpollEvent` data of the doorbell and of the control socket.
const EV_BELL: u64 = 0;
const EV_CONN: u64 = 1;

impl Sleeper {
    fn new(bell: &Doorbell, conn: &Conn) -> Result<Sleeper> {
        let ep = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).context("epoll_create1")?;
        ep.add(bell, EpollEvent::new(EpollFlags::EPOLLIN | EpollFlags::EPOLLET, EV_BELL))
            .context("adding the doorbell to the epoll set")?;
        ep.add(conn, EpollEvent::new(EpollFlags::EPOLLRDHUP, EV_CONN))
            .context("adding the control socket to the epoll set")?;
        Ok(Sleeper { ep })
    }

    /// Sleeps up to `timeout` (rounded up to whole ms, as epoll_wait(2) counts) for a ring
    /// or the peer's hang-up; a signal ends the sleep early. Returns whether the peer is
    /// gone (its control socket hung up: [`Conn::peer_gone`] confirms).
    fn sleep(&self, conn: &Conn, timeout: Duration) -> Result<bool> {
        let ms = timeout.as_micros().div_ceil(1000).min(u16::MAX as u128) as u16;
        let mut ev = [EpollEvent::empty(); 2];
        let n = match self.ep.wait(&mut ev, EpollTimeout::from(ms)) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => 0,
            Err(e) => bail!("epoll_wait: {e}"),
        };
        Ok(ev[..n].iter().any(|e| e.data() == EV_CONN) && conn.peer_gone())
    }

    /// Takes whatever the epoll set holds ready without waiting (`epoll_wait` with timeout
    /// 0), so that after a wait on several consumers ([`wait_any`]) an old doorbell edge
    /// does not wake the next wait again.
    fn drain(&self) {
        let mut ev = [EpollEvent::empty(); 2];
        let _ = self.ep.wait(&mut ev, EpollTimeout::ZERO);
    }
}

/// One consumer of a wait on several ([`wait_any`]): what it polls and how it says it sleeps.
pub trait Waitable {
    /// Says this consumer sleeps (its producer rings the doorbell from now on); returns
    /// whether something is already there to take (an item, the end of the stream), in
    /// which case the caller does not sleep.
    fn arm(&self) -> bool;
    /// Says this consumer is awake again, and forgets wake-ups already seen.
    fn disarm(&self);
    /// The fd that becomes readable (poll(2) `POLLIN`) when this consumer has something:
    /// its epoll set (epoll(7): an epoll fd is readable while it holds ready events), or
    /// the socket its frames come over.
    fn wait_fd(&self) -> BorrowedFd<'_>;
}

/// Sleeps up to `timeout` until one of `waiters` has something to take (or its producer
/// hangs up), the way one consumer sleeps in [`Receiver::recv`] but over several hops: each
/// says it sleeps ([`Waitable::arm`]), then one poll(2) on their fds. Returns at once if
/// one already has something; a signal ends the sleep early. The caller then takes from
/// each with a zero timeout. Errors only if poll(2) fails for another reason than EINTR.
pub fn wait_any(waiters: &[&dyn Waitable], timeout: Duration) -> Result<()> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut armed = 0;
    let mut ready = false;
    for w in waiters {
        armed += 1;
        if w.arm() {
            ready = true;
            break;
        }
    }
    if !ready && !waiters.is_empty() {
        let mut fds: Vec<PollFd<'_>> = waiters.iter().map(|w| PollFd::new(w.wait_fd(), PollFlags::POLLIN)).collect();
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
        match poll(&mut fds, PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => {
                waiters[..armed].iter().for_each(|w| w.disarm());
                bail!("poll on {} upstream hops: {e}", waiters.len());
            }
        }
    } else if waiters.is_empty() {
        std::thread::sleep(timeout);
    }
    waiters[..armed].iter().for_each(|w| w.disarm());
    Ok(())
}

impl<T: Pod> Waitable for Receiver<T> {
    fn arm(&self) -> bool {
        self.ring.set_sleeping(true);
        !self.ring.is_empty() || self.ring.eos()
    }

    fn disarm(&self) {
        self.ring.set_sleeping(false);
        self.sleeper.drain();
    }

    fn wait_fd(&self) -> BorrowedFd<'_> {
        self.sleeper.ep.0.as_fd()
    }
}

/// Rejected slots a [`Receiver`] logs one by one; after these, only the powers of two.
pub(crate) const REJECTS_LOGGED: u64 = 10;

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
    sleeper: Sleeper,
    conn: Conn,
    policy: RingPolicy,
    waits: u64,
    /// When the consumer's control socket was last polled for a hang-up.
    checked: Instant,
}

impl<T: Pod> Sender<T> {
    /// Wraps a ring and its doorbells after the offer went out. Errors if the epoll set
    /// the producer sleeps in cannot be made.
    pub fn new(
        ring: RingProducer<T>,
        doorbell: Doorbell,
        backbell: Doorbell,
        conn: Conn,
        policy: RingPolicy,
    ) -> Result<Sender<T>> {
        let sleeper = Sleeper::new(&backbell, &conn)?;
        Ok(Sender { ring, doorbell, sleeper, conn, policy, waits: 0, checked: Instant::now() })
    }

    /// The control connection (for liveness).
    pub fn conn(&self) -> &Conn {
        &self.conn
    }

    /// Ring counters.
    pub fn counters(&self) -> RingCounters {
        self.ring.counters()
    }

    fn gone(&self) -> crate::Error {
        crate::Error::downstream_gone(self.conn.peer_pid)
    }

    /// Polls the consumer's control socket for a hang-up (one zero-timeout poll(2)) if the
    /// last look is older than `every`. A dead consumer is a [`crate::Error::PeerGone`] error.
    fn check_peer(&mut self, every: Duration) -> crate::Result<()> {
        let now = Instant::now();
        if now.duration_since(self.checked) < every {
            return Ok(());
        }
        self.checked = now;
        if self.conn.peer_gone() {
            return Err(self.gone());
        }
        Ok(())
    }

    /// Queues `item`. Drop-oldest never waits; block waits for space (checking `stop` and
    /// the peer's liveness). Errors if the consumer died or corrupted the ring. A dead
    /// consumer is noticed at the latest [`PEER_CHECK_EVERY`] after its death, or at the
    /// first drop once the ring it no longer empties is full.
    pub fn send(&mut self, item: T, stop: &AtomicBool) -> crate::Result<Sent<T>> {
        // Drop-oldest never waits, so without this a producer would go on feeding a ring
        // nobody reads. The look is rate-limited, so a busy hop makes no syscall for it,
        // and made before the push, so an item is never queued to a dead consumer.
        // (Under block a full ring makes the producer sleep on the back doorbell, whose
        // epoll set sees the hang-up: only drop-oldest needs the quicker look.)
        let cap = self.ring.geometry().capacity as u64;
        let dropping = self.policy == RingPolicy::DropOldest && self.ring.len()? >= cap;
        self.check_peer(if dropping { PEER_CHECK_FULL_EVERY } else { PEER_CHECK_EVERY })?;
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
                        return Err(crate::Error::other("stopped while waiting for ring space"));
                    }
                    self.waits += 1;
                    self.wait_back(
                        BackWait::Space,
                        |r| r.len().map(|n| n < cap).unwrap_or(true),
                        Duration::from_millis(200),
                    )?;
                }
            }
        }
    }

    fn wake(&self) {
        if self.ring.consumer_sleeping() {
            self.doorbell.ring();
        }
    }

    /// Sleeps (up to `timeout`) on the back doorbell for `what`, unless `ready` already
    /// holds once the consumer can see we sleep (so a wake-up is never lost). Errors if the
    /// consumer hung up.
    fn wait_back(
        &mut self,
        what: BackWait,
        ready: impl Fn(&RingProducer<T>) -> bool,
        timeout: Duration,
    ) -> crate::Result<()> {
        self.ring.set_sleeping(Some(what));
        if ready(&self.ring) {
            self.ring.set_sleeping(None);
            return Ok(());
        }
        let gone = self.sleeper.sleep(&self.conn, timeout);
        self.ring.set_sleeping(None);
        if gone? {
            return Err(self.gone());
        }
        Ok(())
    }

    /// Sleeps up to `timeout` (a pacing wait: nothing to wait for but the clock), waking
    /// early only if the consumer hangs up (an error, [`crate::Error::PeerGone`]) or a signal arrives.
    /// One ppoll(2) of the control socket asking for no event: POLLHUP and POLLERR are
    /// reported all the same (poll(2)), and a Unix socket whose peer closed is POLLHUP. The
    /// sleep and the liveness check are one syscall.
    pub fn pace(&mut self, timeout: Duration) -> crate::Result<()> {
        let mut p = [nix::poll::PollFd::new(self.conn.as_fd(), nix::poll::PollFlags::empty())];
        let ts = nix::sys::time::TimeSpec::from_duration(timeout);
        match nix::poll::ppoll(&mut p, Some(ts), None) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => Ok(()),
            Ok(_) if self.conn.peer_gone() => Err(self.gone()),
            Ok(_) => Ok(()),
            Err(e) => Err(crate::Error::other(format!("ppoll: {e}"))),
        }
    }

    /// Sleeps (up to `timeout`) until the consumer returns a value (a buffer), unless one
    /// is already waiting. Errors if the consumer hung up.
    pub(crate) fn wait_for_returns(&mut self, timeout: Duration) -> crate::Result<()> {
        self.wait_back(BackWait::Return, |r| r.returns_pending(), timeout)
    }

    /// Times `send` waited for space (block policy).
    pub fn waits(&self) -> u64 {
        self.waits
    }

    /// Takes back the oldest queued item (counted as dropped): the pool is exhausted, so
    /// the ring is full, or the consumer holds the rest. Errors if the consumer died
    /// (looked for at most every [`PEER_CHECK_FULL_EVERY`]) or corrupted the ring.
    pub(crate) fn take_oldest(&mut self) -> crate::Result<Option<T>> {
        self.check_peer(PEER_CHECK_FULL_EVERY)?;
        self.ring.take_oldest()
    }

    /// Next value from the return queue (unchecked).
    pub(crate) fn pop_return(&mut self) -> crate::Result<Option<u64>> {
        self.ring.pop_return()
    }

    /// Signals end of stream and wakes the consumer.
    pub fn finish(&self) {
        self.ring.set_eos();
        self.doorbell.ring();
    }

    #[cfg(test)]
    pub(crate) fn consumer_sleeping_for_tests(&self) -> bool {
        self.ring.consumer_sleeping()
    }

    #[cfg(test)]
    pub(crate) fn ring_for_tests(&self) {
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
    sleeper: Sleeper,
    backbell: Doorbell,
    conn: Conn,
    wait: WaitMode,
    rejected_logged: u64,
    /// Spin budget before sleeping ([`Receiver::set_spin`]); zero: never spin.
    spin: Duration,
    /// How long the last item took to come once the ring was found empty (zero if it was
    /// waiting): spinning is tried only while this is within the budget.
    last_gap: Duration,
}

impl<T: Pod> Receiver<T> {
    /// Wraps an attached ring and its doorbells. Errors if the epoll set the consumer
    /// sleeps in cannot be made (or the doorbell is not an fd epoll can watch: a peer that
    /// sent a directory, say).
    pub fn new(
        ring: RingConsumer<T>,
        doorbell: Doorbell,
        backbell: Doorbell,
        conn: Conn,
        wait: WaitMode,
    ) -> Result<Receiver<T>> {
        let sleeper = Sleeper::new(&doorbell, &conn)?;
        Ok(Receiver {
            ring,
            sleeper,
            backbell,
            conn,
            wait,
            rejected_logged: 0,
            spin: Duration::ZERO,
            last_gap: Duration::MAX,
        })
    }

    /// With `--wait eventfd`, spin up to `budget` looking at the ring before sleeping, but
    /// only while items have lately come within the budget (adaptive: a consumer whose
    /// items come at a camera's pace never spins; one fed back to back, or answering a
    /// ping-pong, skips the wake-up). Zero (the default) never spins. A spin costs CPU that
    /// another stage on the same core may need: `benches/` measure where it pays.
    pub fn set_spin(&mut self, budget: Duration) {
        self.spin = budget;
    }

    /// The control connection.
    pub fn conn(&self) -> &Conn {
        &self.conn
    }

    /// Ring counters.
    pub fn counters(&self) -> RingCounters {
        self.ring.counters()
    }

    /// What this receiver took and rejected, counted in its own memory (exact whatever
    /// the producer writes into the shared counters).
    pub fn own_counts(&self) -> OwnCounts {
        self.ring.own_counts()
    }

    /// Whether [`Receiver::recv`] sleeps on the eventfd without spinning first (`--wait
    /// eventfd` and no `--spin-us`): then a caller may as well sleep in [`wait_any`] and take
    /// with a zero timeout, which is the same wait.
    pub fn sleeps_plainly(&self) -> bool {
        matches!(self.wait, WaitMode::Eventfd) && self.spin.is_zero()
    }

    /// Takes the next valid item, waiting up to `timeout`. Items failing `validate` are
    /// counted, logged with the producer's pid and uid (the first [`REJECTS_LOGGED`], then
    /// at powers of two) and handed to `salvage` (e.g. to return their buffer).
    pub fn recv(
        &mut self,
        validate: &dyn Fn(&T) -> std::result::Result<(), String>,
        salvage: &mut dyn FnMut(&mut Self, Option<T>),
        timeout: Duration,
    ) -> crate::Result<Recv<T>> {
        let deadline = Instant::now() + timeout;
        let mut spins = 0u32;
        let mut hung_up = false;
        let mut spun = false;
        let mut empty_since: Option<Instant> = None;
        loop {
            match self.ring.pop(validate) {
                Pop::Item(t) => {
                    if self.ring.producer_waits_for(BackWait::Space) {
                        self.backbell.ring();
                    }
                    self.last_gap = empty_since.map_or(Duration::ZERO, |t| t.elapsed());
                    return Ok(Recv::Item(t));
                }
                Pop::Rejected { item, reason } => {
                    self.rejected_logged += 1;
                    if self.rejected_logged <= REJECTS_LOGGED || self.rejected_logged.is_power_of_two() {
                        log::warn!(
                            "rejected a slot from upstream {} ({} so far): {reason}",
                            self.conn.peer(),
                            self.rejected_logged
                        );
                    }
                    salvage(self, item);
                    continue;
                }
                Pop::Empty => {}
            }
            if self.ring.eos() {
                // EOS is set after the last push: one more look (without taking anything)
                // closes the race.
                if self.ring.is_empty() {
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
                // Nothing came within the whole timeout: no spinning until items come fast
                // again (a stalled upstream must not cost a spin per idle turn).
                self.last_gap = Duration::MAX;
                // A look without a wait (a consumer of several hops, after `wait_any`)
                // never sleeps, where a hang-up is otherwise seen: one zero-timeout poll.
                if timeout.is_zero() && self.conn.peer_gone() {
                    // What it queued before it went (its end of stream) is taken first.
                    if !self.ring.is_empty() || self.ring.eos() {
                        continue;
                    }
                    return Ok(Recv::Hangup);
                }
                return Ok(Recv::Idle);
            }
            // An item found after this counts its gap from here (for the adaptive spin).
            empty_since.get_or_insert(now);
            match self.wait {
                WaitMode::Spin => {
                    spins += 1;
                    if spins.is_multiple_of(4096) && self.conn.peer_gone() {
                        hung_up = true;
                    }
                    std::hint::spin_loop();
                }
                WaitMode::Eventfd if !spun && !self.spin.is_zero() && self.last_gap <= self.spin => {
                    spun = true;
                    let until = now + self.spin.min(deadline - now);
                    while self.ring.is_empty() && !self.ring.eos() && Instant::now() < until {
                        std::hint::spin_loop();
                    }
                }
                WaitMode::Eventfd => {
                    self.ring.set_sleeping(true);
                    if let Pop::Item(t) = self.ring.pop(validate) {
                        self.ring.set_sleeping(false);
                        if self.ring.producer_waits_for(BackWait::Space) {
                            self.backbell.ring();
                        }
                        return Ok(Recv::Item(t));
                    }
                    let gone = self.sleeper.sleep(&self.conn, deadline - now);
                    self.ring.set_sleeping(false);
                    hung_up = gone?;
                }
            }
        }
    }

    /// Sends a value (a buffer token) back to the producer and wakes it if it sleeps.
    pub fn push_return(&mut self, v: u64) -> Result<()> {
        self.ring.push_return(v)?;
        if self.ring.producer_waits_for(BackWait::Return) {
            self.backbell.ring();
        }
        Ok(())
    }

    #[doc(hidden)]
    pub fn ring_for_tests(&self) -> &RingConsumer<T> {
        &self.ring
    }
}

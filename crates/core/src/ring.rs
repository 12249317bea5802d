//! The frame ring: a lock-free single-producer single-consumer queue of plain-data slots in
//! a sealed memfd shared by two processes, plus a return queue of buffer indices flowing
//! back from the consumer to the producer.
//!
//! Policy `drop-oldest` never blocks the producer: when the ring is full the producer takes
//! the oldest slot back (a compare-and-swap on `head`, the same word the consumer advances),
//! so the consumer always gets the newest frames, and the dropped slot's buffer goes straight
//! back to the producer. Policy `block` makes the producer wait for space instead.
//!
//! The consumer copies a slot out and then claims it with a CAS on `head`; if the producer
//! dropped that slot meanwhile the CAS fails and the (possibly torn) copy is discarded.
//! Slots are arrays of `AtomicU64` accessed with relaxed loads and stores, so concurrent
//! access is never a data race; ordering comes from `head`/`tail` (acquire/release) and the
//! sleeping flags (seq-cst, Dekker style, so a wake-up is never lost).
//!
//! Nothing read from shared memory is trusted: the consumer uses the capacity it was told at
//! set-up (never re-read), indexes slots modulo it, rejects `tail - head > capacity`, and
//! hands every slot to a validator before use. Counters are exact:
//! `produced = consumed + rejected + dropped + in flight`.

use std::marker::PhantomData;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{bail, Context, Result};
use bytemuck::Pod;
use memmap2::{MmapOptions, MmapRaw};
use nix::fcntl::{fcntl, FcntlArg, SealFlag};

use super::dmabuf::sealed_memfd;

const MAGIC: u64 = u64::from_le_bytes(*b"zcpipeRG");
const VERSION: u64 = 1;

// Word indices of the header (each u64). Hot words sit on their own 64-byte lines.
const W_MAGIC: usize = 0;
const W_VERSION: usize = 1;
const W_CAPACITY: usize = 2;
const W_SLOT_WORDS: usize = 3;
const W_RET_CAPACITY: usize = 4;
const W_HEAD: usize = 8;
const W_TAIL: usize = 16;
const W_PRODUCED: usize = 24;
const W_DROPPED: usize = 25;
const W_EOS: usize = 26;
const W_PRODUCER_SLEEPING: usize = 27;
const W_CONSUMED: usize = 32;
const W_REJECTED: usize = 33;
const W_CONSUMER_SLEEPING: usize = 34;
const W_RET_HEAD: usize = 40;
const W_RET_TAIL: usize = 48;
const W_SLOTS: usize = 56;

/// What a sleeping producer waits for (the word the consumer reads to decide whether to
/// ring the back doorbell).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub(crate) enum BackWait {
    /// A free slot in the ring (block policy, ring full).
    Space = 1,
    /// A buffer back in the return queue (pool exhausted, or draining at the end).
    Return = 2,
}

/// What to do when the ring is full (`--ring-policy`; spellings in [`super::config::Choice`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RingPolicy {
    /// Video: the producer never waits; the oldest queued frame is dropped and counted.
    DropOldest,
    /// Commands: the producer waits for the consumer.
    Block,
}

/// Geometry of a ring, fixed at creation and sent to the consumer at set-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RingGeometry {
    /// Number of slots.
    pub capacity: u32,
    /// Bytes per slot (a multiple of 8).
    pub slot_bytes: u32,
    /// Entries in the return queue (>= the pool size, so returns never wait).
    pub ret_capacity: u32,
}

impl RingGeometry {
    /// Total bytes of shared memory: header, slots, return queue.
    pub fn shm_bytes(&self) -> u64 {
        ((W_SLOTS + self.capacity as usize * (self.slot_bytes as usize / 8) + self.ret_capacity as usize) * 8) as u64
    }
    /// Checks a geometry a peer announced: 1..=4096 slots and return entries, slots a
    /// multiple of 8 bytes in 8..=1 MiB (so [`RingGeometry::shm_bytes`] is at most ~4 GiB).
    /// Errors name the field out of range.
    pub fn check(&self) -> Result<()> {
        if self.capacity == 0 || self.capacity > 4096 || self.ret_capacity == 0 || self.ret_capacity > 4096 {
            bail!("ring geometry out of range: {self:?}");
        }
        if self.slot_bytes == 0 || !self.slot_bytes.is_multiple_of(8) || self.slot_bytes > 1 << 20 {
            bail!("ring slot size {} is not a multiple of 8 in 8..=1MiB", self.slot_bytes);
        }
        Ok(())
    }
}

/// Exact counters of one ring, read from shared memory (for stats; not trusted for control).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RingCounters {
    /// Slots pushed by the producer.
    pub produced: u64,
    /// Slots taken and accepted by the consumer.
    pub consumed: u64,
    /// Slots the producer took back because the ring was full (drop-oldest).
    pub dropped: u64,
    /// Slots the consumer took but refused (failed validation: a corrupt or hostile peer).
    pub rejected: u64,
    /// Slots in the ring now (`tail - head`).
    pub in_flight: u64,
}

impl RingCounters {
    /// These counts and `later`'s (a hop's earlier rings and its current one, after a
    /// consumer re-joined): sums, with `later`'s frames in flight.
    pub fn then(self, later: RingCounters) -> RingCounters {
        RingCounters {
            produced: self.produced.saturating_add(later.produced),
            consumed: self.consumed.saturating_add(later.consumed),
            dropped: self.dropped.saturating_add(later.dropped),
            rejected: self.rejected.saturating_add(later.rejected),
            in_flight: later.in_flight,
        }
    }
}

struct Shm {
    map: MmapRaw,
    words: usize,
}

impl Shm {
    fn map(fd: &OwnedFd, bytes: u64) -> Result<Shm> {
        let map = MmapOptions::new().len(bytes as usize).map_raw(fd.as_raw_fd()).context("mmap of ring memfd")?;
        Ok(Shm { words: bytes as usize / 8, map })
    }
    fn w(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.words, "ring word {i} out of {}", self.words);
        // SAFETY: the mapping is `words * 8` bytes, page-aligned (so 8-aligned), lives as long
        // as `self`, and is only ever accessed through atomics by every process sharing it.
        unsafe { &*(self.map.as_ptr().add(i * 8) as *const AtomicU64) }
    }
}

fn slot_words<T>() -> usize {
    std::mem::size_of::<T>().div_ceil(8)
}

/// The producer's end of a ring. Creates the memfd; only it writes `tail` and the slots.
pub struct RingProducer<T: Pod> {
    shm: Shm,
    fd: OwnedFd,
    geo: RingGeometry,
    tail: u64,
    ret_head: u64,
    /// What we wrote in each slot, so a dropped slot is known without trusting shared memory.
    shadow: Vec<T>,
    /// Slots taken back (drop-oldest), counted here too: exact whatever the consumer writes
    /// into the shared counters (as `tail` is the count of slots pushed).
    dropped: u64,
}

/// What a push did.
#[derive(Debug)]
pub enum Push<T> {
    /// Queued; nothing dropped.
    Queued,
    /// Queued after taking back the oldest queued item (drop-oldest), returned here.
    QueuedDropped(T),
    /// The ring is full and dropping was not allowed: nothing was queued (block policy).
    Full,
}

impl<T: Pod> RingProducer<T> {
    /// Creates a ring of `capacity` slots of `T` and a return queue of `ret_capacity`
    /// entries in a new memfd sealed against shrinking and growing.
    pub fn create(capacity: u32, ret_capacity: u32) -> Result<RingProducer<T>> {
        let geo = RingGeometry { capacity, slot_bytes: (slot_words::<T>() * 8) as u32, ret_capacity };
        geo.check()?;
        let fd = sealed_memfd("zcpipe-ring", geo.shm_bytes(), true)?;
        let shm = Shm::map(&fd, geo.shm_bytes())?;
        shm.w(W_CAPACITY).store(capacity as u64, Ordering::Relaxed);
        shm.w(W_SLOT_WORDS).store(slot_words::<T>() as u64, Ordering::Relaxed);
        shm.w(W_RET_CAPACITY).store(ret_capacity as u64, Ordering::Relaxed);
        shm.w(W_VERSION).store(VERSION, Ordering::Relaxed);
        shm.w(W_MAGIC).store(MAGIC, Ordering::Release);
        Ok(RingProducer {
            shm,
            fd,
            geo,
            tail: 0,
            ret_head: 0,
            shadow: vec![T::zeroed(); capacity as usize],
            dropped: 0,
        })
    }

    /// The memfd to send to the consumer (once, with SCM_RIGHTS).
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// The geometry to send along with the fd.
    pub fn geometry(&self) -> RingGeometry {
        self.geo
    }

    fn head_checked(&self) -> Result<u64, crate::Error> {
        let head = self.shm.w(W_HEAD).load(Ordering::Acquire);
        let used = self.tail.wrapping_sub(head);
        if used > self.geo.capacity as u64 {
            return Err(crate::Error::ring_corrupt(format!(
                "consumer corrupted the ring: head {head}, tail {}, capacity {}",
                self.tail, self.geo.capacity
            )));
        }
        Ok(head)
    }

    /// Items queued now, by our tail and the consumer's head (checked).
    pub fn len(&self) -> Result<u64, crate::Error> {
        Ok(self.tail - self.head_checked()?)
    }

    /// No items are queued (checked as [`RingProducer::len`]).
    pub fn is_empty(&self) -> Result<bool, crate::Error> {
        Ok(self.len()? == 0)
    }

    /// Queues `item`. With `allow_drop`, a full ring gives back its oldest item instead of
    /// refusing. Errors only if the consumer corrupted `head`.
    pub fn push(&mut self, item: T, allow_drop: bool) -> Result<Push<T>, crate::Error> {
        let cap = self.geo.capacity as u64;
        let mut dropped = None;
        loop {
            let head = self.head_checked()?;
            if self.tail - head < cap {
                break;
            }
            if !allow_drop {
                return Ok(Push::Full);
            }
            if self.shm.w(W_HEAD).compare_exchange(head, head + 1, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                dropped = Some(self.shadow[(head % cap) as usize]);
                self.shm.w(W_DROPPED).fetch_add(1, Ordering::Relaxed);
                self.dropped += 1;
                break;
            }
            // The consumer took it first: there is room now.
        }
        let slot = (self.tail % cap) as usize;
        let sw = self.geo.slot_bytes as usize / 8;
        // Word by word, straight from the item: no allocation on the per-frame path.
        for (k, chunk) in bytemuck::bytes_of(&item).chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.shm.w(W_SLOTS + slot * sw + k).store(u64::from_ne_bytes(w), Ordering::Relaxed);
        }
        self.shadow[slot] = item;
        self.tail += 1;
        self.shm.w(W_TAIL).store(self.tail, Ordering::SeqCst);
        self.shm.w(W_PRODUCED).fetch_add(1, Ordering::Relaxed);
        Ok(match dropped {
            Some(d) => Push::QueuedDropped(d),
            None => Push::Queued,
        })
    }

    /// Takes back the oldest queued item, if any (drop-oldest reclaiming a buffer when the
    /// pool is exhausted). Counted as dropped.
    pub(crate) fn take_oldest(&mut self) -> Result<Option<T>, crate::Error> {
        loop {
            let head = self.head_checked()?;
            if head == self.tail {
                return Ok(None);
            }
            if self.shm.w(W_HEAD).compare_exchange(head, head + 1, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                self.shm.w(W_DROPPED).fetch_add(1, Ordering::Relaxed);
                self.dropped += 1;
                return Ok(Some(self.shadow[(head % self.geo.capacity as u64) as usize]));
            }
        }
    }

    /// Whether the consumer said it is about to sleep on its doorbell (read after a push;
    /// seq-cst pairs with [`RingConsumer::set_sleeping`] so no wake-up is lost).
    pub(crate) fn consumer_sleeping(&self) -> bool {
        self.shm.w(W_CONSUMER_SLEEPING).load(Ordering::SeqCst) != 0
    }

    /// Announces what the producer will sleep on its back doorbell for (`None`: it no
    /// longer sleeps): the consumer rings it only for that, so a producer waiting for a
    /// buffer is not woken by ring space, nor one waiting for space by a returned buffer.
    pub(crate) fn set_sleeping(&self, waits_for: Option<BackWait>) {
        self.shm.w(W_PRODUCER_SLEEPING).store(waits_for.map_or(0, |w| w as u64), Ordering::SeqCst);
    }

    /// Whether the consumer has returned values not yet taken with
    /// [`RingProducer::pop_return`] (takes nothing; a corrupt queue reads as `true`, and
    /// the pop reports it).
    pub(crate) fn returns_pending(&self) -> bool {
        self.shm.w(W_RET_TAIL).load(Ordering::Acquire) != self.ret_head
    }

    /// Marks end of stream: the consumer drains what is queued, then sees EOS.
    pub(crate) fn set_eos(&self) {
        self.shm.w(W_EOS).store(1, Ordering::SeqCst);
    }

    /// Takes the next returned value from the return queue (a buffer index, unchecked:
    /// the caller validates it). Errors only if the consumer corrupted the queue indices.
    pub(crate) fn pop_return(&mut self) -> Result<Option<u64>, crate::Error> {
        let rt = self.shm.w(W_RET_TAIL).load(Ordering::Acquire);
        let n = rt.wrapping_sub(self.ret_head);
        if n == 0 {
            return Ok(None);
        }
        if n > self.geo.ret_capacity as u64 {
            return Err(crate::Error::ring_corrupt(format!(
                "consumer corrupted the return queue: head {}, tail {rt}, capacity {}",
                self.ret_head, self.geo.ret_capacity
            )));
        }
        let ret_base = W_SLOTS + self.geo.capacity as usize * (self.geo.slot_bytes as usize / 8);
        let v = self.shm.w(ret_base + (self.ret_head % self.geo.ret_capacity as u64) as usize).load(Ordering::Relaxed);
        self.ret_head += 1;
        self.shm.w(W_RET_HEAD).store(self.ret_head, Ordering::Release);
        Ok(Some(v))
    }

    /// The ring's counters: `produced` and `dropped` as this producer counted them itself
    /// (exact whatever the consumer writes into the shared region), `consumed` and
    /// `rejected` as the consumer reports them there.
    pub fn counters(&self) -> RingCounters {
        RingCounters { produced: self.tail, dropped: self.dropped, ..counters(&self.shm, Some(self.tail)) }
    }
}

fn counters(shm: &Shm, tail: Option<u64>) -> RingCounters {
    let head = shm.w(W_HEAD).load(Ordering::Acquire);
    let tail = tail.unwrap_or_else(|| shm.w(W_TAIL).load(Ordering::Acquire));
    RingCounters {
        produced: shm.w(W_PRODUCED).load(Ordering::Relaxed),
        consumed: shm.w(W_CONSUMED).load(Ordering::Relaxed),
        dropped: shm.w(W_DROPPED).load(Ordering::Relaxed),
        rejected: shm.w(W_REJECTED).load(Ordering::Relaxed),
        in_flight: tail.wrapping_sub(head),
    }
}

/// The consumer's end of a ring.
pub struct RingConsumer<T: Pod> {
    shm: Shm,
    geo: RingGeometry,
    ret_tail: u64,
    own: OwnCounts,
    _t: PhantomData<T>,
}

/// What a consumer counted itself, in its own memory: exact whatever a peer writes into the
/// shared counters (which live in the memfd the peer can scribble on).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OwnCounts {
    /// Items taken and accepted by the validator.
    pub consumed: u64,
    /// Pops rejected (by the validator, or for corrupt indices).
    pub rejected: u64,
}

/// What a pop found.
#[derive(Debug)]
pub enum Pop<T> {
    /// The oldest queued item, validated.
    Item(T),
    /// Nothing queued.
    Empty,
    /// A slot failed validation (counted as rejected). `item` is what was read, for the
    /// caller to salvage (e.g. return a buffer whose index is still valid).
    Rejected {
        /// The slot as read (may be garbage).
        item: Option<T>,
        /// Why it was refused.
        reason: String,
    },
}

impl<T: Pod> RingConsumer<T> {
    /// Maps a ring received from a producer. `geo` is what the producer announced; it must
    /// match `T`, the memfd must be sealed against shrinking and big enough, and the header
    /// must agree. From then on the local geometry is used, never the shared header.
    pub fn attach(fd: OwnedFd, geo: RingGeometry) -> Result<RingConsumer<T>> {
        geo.check()?;
        if geo.slot_bytes as usize != slot_words::<T>() * 8 {
            bail!("ring slots are {} bytes, expected {}", geo.slot_bytes, slot_words::<T>() * 8);
        }
        let seals = SealFlag::from_bits_truncate(
            fcntl(fd.as_raw_fd(), FcntlArg::F_GET_SEALS).context("ring fd is not a sealed memfd")?,
        );
        if !seals.contains(SealFlag::F_SEAL_SHRINK) {
            bail!("ring memfd is not sealed against shrinking; refusing to map it");
        }
        let size = nix::sys::stat::fstat(fd.as_raw_fd()).context("fstat ring memfd")?.st_size as u64;
        if size < geo.shm_bytes() {
            bail!("ring memfd is {size} bytes, geometry needs {}", geo.shm_bytes());
        }
        let shm = Shm::map(&fd, geo.shm_bytes())?;
        let hdr =
            [W_MAGIC, W_VERSION, W_CAPACITY, W_SLOT_WORDS, W_RET_CAPACITY].map(|w| shm.w(w).load(Ordering::Acquire));
        let want = [MAGIC, VERSION, geo.capacity as u64, geo.slot_bytes as u64 / 8, geo.ret_capacity as u64];
        if hdr != want {
            bail!("ring header {hdr:x?} does not match the announced geometry {want:x?}");
        }
        let ret_tail = shm.w(W_RET_TAIL).load(Ordering::Acquire);
        Ok(RingConsumer { shm, geo, ret_tail, own: OwnCounts::default(), _t: PhantomData })
    }

    /// Takes the oldest item, checking it with `validate` first.
    pub fn pop(&mut self, validate: impl Fn(&T) -> std::result::Result<(), String>) -> Pop<T> {
        let cap = self.geo.capacity as u64;
        let sw = self.geo.slot_bytes as usize / 8;
        let head_w = self.shm.w(W_HEAD);
        loop {
            let head = head_w.load(Ordering::Acquire);
            let tail = self.shm.w(W_TAIL).load(Ordering::Acquire);
            let n = tail.wrapping_sub(head);
            if n == 0 {
                return Pop::Empty;
            }
            if n > cap {
                // Garbage indices: skip everything queued, count one rejection.
                if head_w.compare_exchange(head, tail, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                    self.shm.w(W_REJECTED).fetch_add(1, Ordering::Relaxed);
                    self.own.rejected += 1;
                    return Pop::Rejected {
                        item: None,
                        reason: format!("ring indices corrupt: head {head}, tail {tail}, capacity {cap}"),
                    };
                }
                continue;
            }
            let slot = (head % cap) as usize;
            let mut item = T::zeroed();
            for (k, chunk) in bytemuck::bytes_of_mut(&mut item).chunks_mut(8).enumerate() {
                let w = self.shm.w(W_SLOTS + slot * sw + k).load(Ordering::Relaxed).to_ne_bytes();
                chunk.copy_from_slice(&w[..chunk.len()]);
            }
            if head_w.compare_exchange(head, head + 1, Ordering::AcqRel, Ordering::Acquire).is_err() {
                continue; // the producer dropped this slot while we read it
            }
            return match validate(&item) {
                Ok(()) => {
                    self.shm.w(W_CONSUMED).fetch_add(1, Ordering::Relaxed);
                    self.own.consumed += 1;
                    Pop::Item(item)
                }
                Err(reason) => {
                    self.shm.w(W_REJECTED).fetch_add(1, Ordering::Relaxed);
                    self.own.rejected += 1;
                    Pop::Rejected { item: Some(item), reason }
                }
            };
        }
    }

    /// Whether nothing is queued (by `head` and `tail`; takes nothing, validates nothing:
    /// garbage indices read as not empty, and the next pop rejects them).
    pub fn is_empty(&self) -> bool {
        self.shm.w(W_HEAD).load(Ordering::Acquire) == self.shm.w(W_TAIL).load(Ordering::Acquire)
    }

    /// Whether the producer marked end of stream.
    pub fn eos(&self) -> bool {
        self.shm.w(W_EOS).load(Ordering::SeqCst) != 0
    }

    /// Announces that the consumer will (or no longer will) sleep on its doorbell. After
    /// setting it, check the ring once more before sleeping.
    pub(crate) fn set_sleeping(&self, sleeping: bool) {
        self.shm.w(W_CONSUMER_SLEEPING).store(sleeping as u64, Ordering::SeqCst);
    }

    /// Whether the producer sleeps on its back doorbell waiting for `what` (read after a
    /// pop, for [`BackWait::Space`], or a return, for [`BackWait::Return`]; seq-cst pairs
    /// with [`RingProducer::set_sleeping`] so no wake-up is lost).
    pub(crate) fn producer_waits_for(&self, what: BackWait) -> bool {
        self.shm.w(W_PRODUCER_SLEEPING).load(Ordering::SeqCst) == what as u64
    }

    /// Queues a value (a buffer index) back to the producer. Never waits: the queue holds at
    /// least as many entries as the pool has buffers. Errors if the producer corrupted it.
    pub fn push_return(&mut self, v: u64) -> Result<()> {
        let rh = self.shm.w(W_RET_HEAD).load(Ordering::Acquire);
        let used = self.ret_tail.wrapping_sub(rh);
        if used >= self.geo.ret_capacity as u64 {
            bail!(
                "return queue full or corrupt: head {rh}, tail {}, capacity {}",
                self.ret_tail,
                self.geo.ret_capacity
            );
        }
        let ret_base = W_SLOTS + self.geo.capacity as usize * (self.geo.slot_bytes as usize / 8);
        self.shm.w(ret_base + (self.ret_tail % self.geo.ret_capacity as u64) as usize).store(v, Ordering::Relaxed);
        self.ret_tail += 1;
        self.shm.w(W_RET_TAIL).store(self.ret_tail, Ordering::SeqCst);
        Ok(())
    }

    /// The ring's counters.
    pub fn counters(&self) -> RingCounters {
        counters(&self.shm, None)
    }

    /// What this consumer counted itself (exact even when a peer scribbles the shared
    /// counters).
    pub fn own_counts(&self) -> OwnCounts {
        self.own
    }

    /// Raw access for tests that play a hostile peer: stores `v` at word `i` (modulo the
    /// region's size) of the shared region.
    #[doc(hidden)]
    pub fn scribble_word(&self, i: usize, v: u64) {
        self.shm.w(i % self.shm.words).store(v, Ordering::Relaxed);
    }

    /// Raw access for tests that play a hostile peer: overwrites the whole shared region
    /// with `fill(word_index)`.
    #[doc(hidden)]
    pub fn scribble(&self, mut fill: impl FnMut(usize) -> u64) {
        for i in 0..self.shm.words {
            self.shm.w(i).store(fill(i), Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn pair(cap: u32) -> (RingProducer<[u64; 3]>, RingConsumer<[u64; 3]>) {
        let p = RingProducer::<[u64; 3]>::create(cap, 8).unwrap();
        let fd = p.fd().as_fd().try_clone_to_owned().unwrap();
        let c = RingConsumer::attach(fd, p.geometry()).unwrap();
        (p, c)
    }
    fn ok(_: &[u64; 3]) -> std::result::Result<(), String> {
        Ok(())
    }
    fn check_invariant(c: &RingCounters) {
        assert_eq!(c.produced, c.consumed + c.rejected + c.dropped + c.in_flight, "{c:?}");
    }

    /// Asserts (produced, consumed, dropped, in flight) and the counters' invariant.
    fn assert_counts(k: RingCounters, want: (u64, u64, u64, u64)) {
        assert_eq!((k.produced, k.consumed, k.dropped, k.in_flight), want);
        check_invariant(&k);
    }

    #[test]
    fn order_and_wraparound() {
        let (mut p, mut c) = pair(4);
        let mut next = 0u64;
        for round in 0..10u64 {
            for i in 0..3 {
                assert!(matches!(p.push([round * 3 + i, 7, 9], false).unwrap(), Push::Queued));
            }
            for _ in 0..3 {
                match c.pop(ok) {
                    Pop::Item(v) => {
                        assert_eq!(v, [next, 7, 9]);
                        next += 1;
                    }
                    other => panic!("{other:?}"),
                }
            }
            assert!(matches!(c.pop(ok), Pop::Empty));
        }
        assert_counts(p.counters(), (30, 30, 0, 0));
    }

    #[test]
    fn drop_oldest_keeps_newest_and_counts_exactly() {
        let (mut p, mut c) = pair(4);
        let mut dropped = vec![];
        for i in 0..10u64 {
            if let Push::QueuedDropped(d) = p.push([i, 0, 0], true).unwrap() {
                dropped.push(d[0]);
            }
        }
        assert_eq!(dropped, vec![0, 1, 2, 3, 4, 5]);
        let got: Vec<u64> = std::iter::from_fn(|| match c.pop(ok) {
            Pop::Item(v) => Some(v[0]),
            _ => None,
        })
        .collect();
        assert_eq!(got, vec![6, 7, 8, 9]);
        assert_counts(c.counters(), (10, 4, 6, 0));
    }

    #[test]
    fn block_policy_refuses_when_full() {
        let (mut p, mut c) = pair(2);
        assert!(matches!(p.push([1, 0, 0], false).unwrap(), Push::Queued));
        assert!(matches!(p.push([2, 0, 0], false).unwrap(), Push::Queued));
        assert!(matches!(p.push([3, 0, 0], false).unwrap(), Push::Full));
        assert!(matches!(c.pop(ok), Pop::Item([1, 0, 0])));
        assert!(matches!(p.push([3, 0, 0], false).unwrap(), Push::Queued));
        let k = p.counters();
        assert_eq!((k.produced, k.dropped, k.in_flight), (3, 0, 2));
        check_invariant(&k);
    }

    #[test]
    fn returns_flow_back() {
        let (mut p, mut c) = pair(4);
        for i in 0..8 {
            c.push_return(i).unwrap();
        }
        assert!(c.push_return(99).is_err(), "return queue holds 8");
        let got: Vec<u64> = std::iter::from_fn(|| p.pop_return().unwrap()).collect();
        assert_eq!(got, (0..8).collect::<Vec<_>>());
    }

    #[test]
    fn validator_rejects_and_counts() {
        let (mut p, mut c) = pair(4);
        p.push([1, 0, 0], false).unwrap();
        p.push([666, 0, 0], false).unwrap();
        let v = |x: &[u64; 3]| if x[0] == 666 { Err("bad".to_string()) } else { Ok(()) };
        assert!(matches!(c.pop(v), Pop::Item(_)));
        assert!(matches!(c.pop(v), Pop::Rejected { item: Some([666, 0, 0]), .. }));
        let k = c.counters();
        assert_eq!((k.consumed, k.rejected), (1, 1));
        check_invariant(&k);
    }

    #[test]
    fn hostile_scribbles_never_panic() {
        let (mut p, mut c) = pair(4);
        // xorshift for repeatable garbage
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let v = |x: &[u64; 3]| if x[1] == 7 { Ok(()) } else { Err(format!("bad marker {:#x}", x[1])) };
        let mut rejected = 0;
        for _ in 0..200 {
            let _ = p.push([1, 7, 0], true);
            c.scribble(|_| rnd());
            for _ in 0..6 {
                match c.pop(v) {
                    Pop::Rejected { .. } => rejected += 1,
                    Pop::Empty => break,
                    Pop::Item(_) => {}
                }
            }
            let _ = c.push_return(rnd());
            let _ = p.pop_return();
        }
        // The counters live in the scribbled region too, so only what we saw is certain.
        assert!(rejected > 0);
        eprintln!("EVIDENCE ring: 200 rounds of a peer scribbling random bytes over the whole ring: {rejected} pops rejected, no panic, no out-of-bounds access");
    }

    /// 10^6 random words written at random places of the shared region (indices, counters,
    /// slots, the return queue) while frames flow: no panic, no out-of-bounds access, and
    /// the consumer's own counts equal what it was handed, whatever the shared counters say.
    #[test]
    // 13 s natively; under qemu-user (make test-aarch64) minutes: the x86_64 run covers it.
    #[cfg_attr(target_arch = "aarch64", ignore = "slow under qemu-user; run natively")]
    fn a_million_random_writes_leave_the_consumers_own_counts_exact() {
        let (mut p, mut c) = pair(8);
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let v = |x: &[u64; 3]| if x[1] == 7 { Ok(()) } else { Err(format!("bad marker {:#x}", x[1])) };
        let (mut items, mut rejected, mut pushed, mut dropped) = (0u64, 0u64, 0u64, 0u64);
        for n in 0..1_000_000u64 {
            let r = rnd();
            c.scribble_word((r >> 32) as usize, rnd());
            match p.push([n, 7, 0], true) {
                Ok(Push::QueuedDropped(_)) => (pushed, dropped) = (pushed + 1, dropped + 1),
                Ok(_) => pushed += 1,
                Err(_) => {}
            }
            match c.pop(v) {
                Pop::Item(_) => items += 1,
                Pop::Rejected { .. } => rejected += 1,
                Pop::Empty => {}
            }
            let _ = c.push_return(r & 0xff);
            let _ = p.pop_return();
        }
        assert_eq!(c.own_counts(), OwnCounts { consumed: items, rejected });
        assert!(items > 0 && rejected > 0, "items {items}, rejected {rejected}");
        // The producer's own counts too: what it pushed and took back, whatever was written.
        assert_eq!((p.counters().produced, p.counters().dropped), (pushed, dropped));
        eprintln!("EVIDENCE ring: 10^6 random writes over the shared region while frames flowed: {items} items taken, {rejected} pops rejected, own counts exact, shared counters say {:?}", c.counters());
    }

    /// A peer that rewrites the descriptors in the slots (not the indices): every such frame
    /// is rejected by the validator, counted exactly, and the counters still add up.
    #[test]
    fn scribbled_descriptors_are_rejected_and_counted_exactly() {
        let (mut p, mut c) = pair(4);
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let v = |x: &[u64; 3]| if x[1] == 7 { Ok(()) } else { Err(format!("bad marker {:#x}", x[1])) };
        let (words, slot_words) =
            (c.geo.capacity as usize * (c.geo.slot_bytes as usize / 8), c.geo.slot_bytes as usize / 8);
        let (mut rejected, mut good) = (0u64, 0u64);
        for round in 0..100u64 {
            p.push([round, 7, 0], false).unwrap();
            if round % 4 != 3 {
                // Every slot word random, never the marker.
                for i in W_SLOTS..W_SLOTS + words {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    c.shm.w(i).store(if (i - W_SLOTS) % slot_words == 1 && s == 7 { 8 } else { s }, Ordering::Relaxed);
                }
            }
            match c.pop(v) {
                Pop::Rejected { .. } => rejected += 1,
                Pop::Item(x) => {
                    assert_eq!(x, [round, 7, 0], "an untouched frame arrives intact");
                    good += 1
                }
                Pop::Empty => panic!("round {round}: the frame vanished"),
            }
        }
        let k = c.counters();
        assert_eq!((rejected, good), (75, 25));
        assert_eq!((k.produced, k.consumed, k.rejected, k.dropped, k.in_flight), (100, 25, 75, 0, 0));
        check_invariant(&k);
        eprintln!("EVIDENCE ring: 100 frames, 75 descriptors scribbled by the peer: rejected {}, consumed {}, produced {} = consumed + rejected + dropped {} + in flight {}", k.rejected, k.consumed, k.produced, k.dropped, k.in_flight);
    }

    #[test]
    fn attach_refuses_mismatched_geometry() {
        let p = RingProducer::<[u64; 3]>::create(4, 8).unwrap();
        let fd = p.fd().as_fd().try_clone_to_owned().unwrap();
        let mut g = p.geometry();
        g.capacity = 8;
        assert!(RingConsumer::<[u64; 3]>::attach(fd, g).is_err());
        let fd = p.fd().as_fd().try_clone_to_owned().unwrap();
        assert!(RingConsumer::<[u64; 5]>::attach(fd, p.geometry()).is_err());
    }
}

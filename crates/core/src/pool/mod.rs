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

use super::frame::FrameDesc;
use super::ring::{RingCounters, RingPolicy, RingProducer};

mod consumer;
mod link;
mod loan;
mod producer;
mod taps;
#[cfg(test)]
mod tests;
mod upstream;

pub use consumer::{join, offer_items, Frame, PoolConsumer};
use link::{ring_fds, Link};
pub use loan::{DeviceLoan, WriteLoan};
pub use producer::{PoolProducer, LEASE_TIMEOUT};
use taps::Tap;
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
    pub(crate) reclaimed: u64,
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
    pub(crate) dropped_away: u64,
    /// Times a consumer held every buffer for [`LEASE_TIMEOUT`] and was killed for it.
    #[serde(default)]
    pub leases_expired: u64,
    /// Consumers hung up on for corrupting the ring's shared indices
    /// ([`crate::Error::RingCorrupt`]; counted in `consumers_lost` too).
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
    pub(crate) taps_lost: u64,
    /// Frames handed to taps (all taps).
    #[serde(default)]
    pub tap_frames: u64,
    /// Frames a tap did not get because it still held its last one, or that were taken
    /// back from its ring unread (all taps): a slow tap drops its own frames.
    #[serde(default)]
    pub tap_dropped: u64,
}

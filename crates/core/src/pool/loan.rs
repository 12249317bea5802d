//! The loans a [`PoolProducer`] hands out: [`WriteLoan`] (write access to one buffer until it
//! is published or dropped) and [`DeviceLoan`] (a buffer lent to a device).

use std::sync::atomic::AtomicBool;

use crate::dmabuf::DmaBuf;
use crate::frame::FrameDesc;

use super::*;

/// A pool buffer lent to the producer for writing: the only way to write a buffer of a
/// [`PoolProducer`]. [`WriteLoan::publish`] consumes it (the buffer goes to the consumer and
/// can no longer be written); dropping it unpublished gives the buffer back to the pool.
///
/// It borrows the pool, so a producer holds one at a time, and nothing else can change
/// the pool while it is out. Writing a published buffer does not compile:
///
/// ```compile_fail,E0382
/// # use zcpipe_core::{pool::PoolProducer, frame::FrameDesc};
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
/// # use zcpipe_core::{pool::PoolProducer, frame::FrameDesc};
/// # fn f(prod: &mut PoolProducer, stop: &std::sync::atomic::AtomicBool) -> anyhow::Result<()> {
/// let mut loan = prod.acquire(stop)?.unwrap();
/// let _ = loan.buffers_mut();
/// loan.publish(FrameDesc::default(), stop)?;
/// # Ok(()) }
/// ```
#[must_use = "dropping a WriteLoan gives the buffer back unpublished"]
pub struct WriteLoan<'p> {
    pub(super) pool: &'p mut PoolProducer,
    pub(super) index: u32,
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
    /// is set to this loan's). Errors if the consumer died ([`crate::Error::PeerGone`]) or corrupted
    /// the ring; the buffer is back in the pool then.
    pub fn publish(self, desc: FrameDesc, stop: &AtomicBool) -> crate::Result<()> {
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
    pub(super) pool: u64,
    pub(super) index: u32,
}

impl DeviceLoan {
    /// The buffer's index in the pool (the V4L2 buffer index it is queued as).
    pub fn index(&self) -> u32 {
        self.index
    }
}

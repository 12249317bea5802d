//! Buffer pools shared across a hop: who owns which buffer, and how it comes back.
//!
//! The producer ([`PoolProducer`]) owns the pool: a buffer is `Free`, being `Writing`, or
//! `Queued` (in the ring or lent to the consumer). The consumer receives the fds once, at
//! set-up, and gets each frame as a [`Frame`], a read-only loan: dropping it sends the
//! buffer's token (`seq << 32 | index`) back through the ring's return queue. The producer
//! accepts a token only for a buffer it has queued under that sequence number, so a broken
//! or hostile consumer cannot make it hand out one buffer twice. A frame dropped by
//! drop-oldest goes back to the free list at once. When the consumer dies, every buffer
//! lent to it is free again.

use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use bytemuck::Pod;

use super::channel::{Doorbell, Receiver, Recv, Sender, Sent};
use super::dmabuf::{CpuAccess, DmaBuf, Read};
use super::frame::FrameDesc;
use super::link::{Conn, ControlMsg, Offer, Payload, WaitMode};
use super::ring::{RingConsumer, RingCounters, RingPolicy, RingProducer};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BufState {
    Free,
    Writing,
    Queued(u32),
}

fn token(desc: &FrameDesc) -> u64 {
    (desc.seq << 32) | desc.buffer_index as u64
}

/// What the producer tells the consumer about a frame hop besides the fds.
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
}

/// The producer's end of a frame hop: the pool, its ownership states and the ring.
pub struct PoolProducer {
    sender: Sender<FrameDesc>,
    bufs: Vec<Vec<DmaBuf>>,
    state: Vec<BufState>,
    free: VecDeque<u32>,
    policy: RingPolicy,
    stats: PoolStats,
}

fn ring_fds<'a, T: Pod>(ring: &'a RingProducer<T>, bell: &'a Doorbell, back: &'a Doorbell) -> Vec<BorrowedFd<'a>> {
    vec![ring.fd().as_fd(), bell.as_fd(), back.as_fd()]
}

impl PoolProducer {
    /// Offers `bufs` (each a list of fds: one per plane for multi-planar formats) to the
    /// consumer on `conn`, sending every fd once with SCM_RIGHTS.
    pub fn offer(conn: Conn, bufs: Vec<Vec<DmaBuf>>, spec: HopSpec) -> Result<PoolProducer> {
        let n = bufs.len();
        if n == 0 || n > 64 {
            bail!("pool of {n} buffers: need 1..=64");
        }
        let ring = RingProducer::<FrameDesc>::create(spec.capacity.max(1), n.next_power_of_two().max(2) as u32)?;
        let (bell, back) = (Doorbell::new()?, Doorbell::new()?);
        let offer = Offer {
            payload: Payload::Frames,
            ring: ring.geometry(),
            policy: spec.policy,
            buffers: bufs.iter().map(|b| b.iter().map(|d| d.size()).collect()).collect(),
            memory: spec.memory,
            layout: spec.layout,
            fps: spec.fps,
            description: spec.description,
            labels: vec![],
        };
        let mut fds = ring_fds(&ring, &bell, &back);
        fds.extend(bufs.iter().flatten().map(|d| d.fd()));
        conn.send(&ControlMsg::Offer(offer), &fds).context("sending the pool to the consumer")?;
        log::debug!("offered {n} buffers ({} fds) to pid {}", fds.len(), conn.peer_pid);
        let sender = Sender::new(ring, bell, back, conn, spec.policy);
        Ok(PoolProducer {
            sender,
            state: vec![BufState::Free; n],
            free: (0..n as u32).collect(),
            bufs,
            policy: spec.policy,
            stats: PoolStats { buffers: n, ..Default::default() },
        })
    }

    /// Pool size.
    pub fn len(&self) -> usize {
        self.bufs.len()
    }

    /// Whether the pool is empty (never, once offered).
    pub fn is_empty(&self) -> bool {
        self.bufs.is_empty()
    }

    /// The fds of buffer `i`, for writing (only while it is `Writing`, i.e. acquired).
    pub fn buffer_mut(&mut self, i: u32) -> &mut [DmaBuf] {
        debug_assert_eq!(self.state[i as usize], BufState::Writing);
        &mut self.bufs[i as usize]
    }

    /// The fds of buffer `i` (for devices importing them).
    pub fn buffer(&self, i: u32) -> &[DmaBuf] {
        &self.bufs[i as usize]
    }

    fn release(&mut self, i: u32, seq: u64) -> bool {
        match self.state.get(i as usize) {
            Some(BufState::Queued(s)) if *s == seq as u32 => {
                self.state[i as usize] = BufState::Free;
                self.free.push_back(i);
                true
            }
            _ => false,
        }
    }

    fn reclaim_returns(&mut self) -> Result<()> {
        while let Some(tok) = self.sender.pop_return()? {
            let (i, seq) = ((tok & 0xffff_ffff) as u32, tok >> 32);
            if self.release(i, seq) {
                self.stats.returned += 1;
            } else {
                self.stats.bad_returns += 1;
                if self.stats.bad_returns <= 5 {
                    log::warn!("consumer returned token {tok:#x} for a buffer it does not hold; ignored");
                }
            }
        }
        Ok(())
    }

    /// Gets a free buffer to write, returning its index; `Ok(None)` if `stop` was set
    /// while waiting. Drop-oldest takes the oldest queued frame back when none is free and
    /// so never waits unless the consumer holds every buffer; block waits for a return.
    /// Errors if the consumer died or corrupted the ring.
    pub fn acquire(&mut self, stop: &AtomicBool) -> Result<Option<u32>> {
        loop {
            self.reclaim_returns()?;
            if let Some(i) = self.free.pop_front() {
                self.state[i as usize] = BufState::Writing;
                return Ok(Some(i));
            }
            if self.policy == RingPolicy::DropOldest {
                if let Some(d) = self.sender.take_oldest()? {
                    if self.release(d.buffer_index, d.seq) {
                        self.stats.reclaimed += 1;
                    }
                    continue;
                }
            }
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                return Ok(None);
            }
            self.stats.waits += 1;
            self.sender.wait_back(|_| false, Duration::from_millis(200))?;
        }
    }

    /// Gives back an acquired buffer without publishing it (e.g. at end of stream).
    pub fn abandon(&mut self, i: u32) {
        if self.state[i as usize] == BufState::Writing {
            self.state[i as usize] = BufState::Free;
            self.free.push_back(i);
        }
    }

    /// Publishes a written buffer described by `desc` (its `buffer_index` must be the
    /// acquired one). Under drop-oldest the displaced frame's buffer is freed at once.
    pub fn publish(&mut self, desc: FrameDesc, stop: &AtomicBool) -> Result<()> {
        let i = desc.buffer_index as usize;
        if self.state.get(i) != Some(&BufState::Writing) {
            bail!("publishing buffer {i}, which was not acquired");
        }
        self.state[i] = BufState::Queued(desc.seq as u32);
        if let Sent::Dropped(d) = self.sender.send(desc, stop)? {
            if self.release(d.buffer_index, d.seq) {
                self.stats.reclaimed += 1;
            }
        }
        Ok(())
    }

    /// Ring counters.
    pub fn counters(&self) -> RingCounters {
        self.sender.counters()
    }

    /// Buffer traffic counts.
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            outstanding: self.state.iter().filter(|s| **s != BufState::Free).count(),
            waits: self.stats.waits + self.sender.waits(),
            ..self.stats
        }
    }

    /// The control connection.
    pub fn conn(&self) -> &Conn {
        self.sender.conn()
    }

    /// Ends the stream and waits (up to `timeout`) until every buffer is back or the
    /// consumer hung up (which frees whatever it held). Returns how many buffers came back
    /// from the consumer during the drain and how many are still out.
    pub fn finish(&mut self, timeout: Duration) -> Result<(usize, usize)> {
        self.sender.finish();
        let start = Instant::now();
        let out_before = self.stats().outstanding;
        loop {
            self.reclaim_returns()?;
            let out = self.stats().outstanding;
            if out == 0 {
                return Ok((out_before, 0));
            }
            if self.sender.conn().peer_gone() {
                // The consumer is gone: nothing it held can be in use any more.
                self.reclaim_returns()?;
                let still = self.stats().outstanding;
                for i in 0..self.state.len() {
                    if self.state[i] != BufState::Free {
                        self.state[i] = BufState::Free;
                        self.free.push_back(i as u32);
                    }
                }
                return Ok((out_before - still, still));
            }
            if start.elapsed() > timeout {
                return Ok((out_before - out, out));
            }
            let _ = self.sender.wait_back(|_| false, Duration::from_millis(100));
        }
    }
}

/// Offers a pool-less hop carrying `T` (e.g. detection results) on `conn`.
pub fn offer_items<T: Pod>(conn: Conn, capacity: u32, policy: RingPolicy, description: String, labels: Vec<String>) -> Result<Sender<T>> {
    let ring = RingProducer::<T>::create(capacity, 2)?;
    let (bell, back) = (Doorbell::new()?, Doorbell::new()?);
    let offer = Offer {
        payload: Payload::Detections,
        ring: ring.geometry(),
        policy,
        buffers: vec![],
        memory: "none".into(),
        layout: None,
        fps: 0.0,
        description,
        labels,
    };
    let fds = ring_fds(&ring, &bell, &back);
    conn.send(&ControlMsg::Offer(offer), &fds)?;
    Ok(Sender::new(ring, bell, back, conn, policy))
}

/// Joins an upstream's hop: sends `hello`, receives the offer (or its refusal, returned as
/// the error) and maps the ring. Returns the offer, the receiver and the pool's buffers
/// (`buffers[i][fd_index]`), each checked with [`DmaBuf::from_peer`].
pub fn join<T: Pod>(conn: Conn, hello: &ControlMsg, wait: WaitMode, upstream: &str) -> Result<(Offer, Receiver<T>, Vec<Vec<DmaBuf>>)> {
    conn.send(hello, &[])?;
    let (msg, fds) = conn.recv().with_context(|| format!("waiting for {upstream}'s offer"))?;
    let offer = match msg {
        ControlMsg::Offer(o) => o,
        ControlMsg::Refuse { error } => return Err(anyhow!("{upstream} refused: {error}")),
        other => bail!("{upstream} sent {other:?} instead of an offer"),
    };
    let want_fds = 3 + offer.buffers.iter().map(|b| b.len()).sum::<usize>();
    if fds.len() != want_fds {
        bail!("{upstream} sent {} fds, its offer needs {want_fds}", fds.len());
    }
    let mut it = fds.into_iter();
    let mut next = || it.next().ok_or_else(|| anyhow!("fd list ended early"));
    let ring_fd: OwnedFd = next()?;
    let bell = Doorbell::from_fd(next()?);
    let back = Doorbell::from_fd(next()?);
    let ring = RingConsumer::<T>::attach(ring_fd, offer.ring).with_context(|| format!("mapping {upstream}'s ring"))?;
    let mut bufs = Vec::with_capacity(offer.buffers.len());
    for (i, sizes) in offer.buffers.iter().enumerate() {
        let mut b = Vec::with_capacity(sizes.len());
        for &size in sizes {
            b.push(DmaBuf::from_peer(next()?, size).with_context(|| format!("{upstream}'s buffer {i}"))?);
        }
        bufs.push(b);
    }
    Ok((offer, Receiver::new(ring, bell, back, conn, wait), bufs))
}

/// The consumer's end of a frame hop.
pub struct PoolConsumer {
    rx: Arc<Mutex<Receiver<FrameDesc>>>,
    bufs: Arc<Vec<Vec<DmaBuf>>>,
    sizes: Vec<Vec<u64>>,
    /// What the producer offered.
    pub offer: Offer,
}

/// A frame lent by the upstream stage: read-only access to its buffer. Dropping it gives
/// the buffer back.
pub struct Frame {
    /// The validated descriptor.
    pub desc: FrameDesc,
    bufs: Arc<Vec<Vec<DmaBuf>>>,
    rx: Arc<Mutex<Receiver<FrameDesc>>>,
}

impl Frame {
    /// The dma-bufs of this frame's buffer (index = plane `fd_index`).
    pub fn buffers(&self) -> &[DmaBuf] {
        &self.bufs[self.desc.buffer_index as usize]
    }

    /// Begins a CPU read of every dma-buf of the frame (DMA_BUF_IOCTL_SYNC START|READ).
    pub fn read(&self) -> Result<Vec<CpuAccess<'_, Read>>> {
        self.buffers().iter().map(|b| b.read()).collect()
    }
}

impl Drop for Frame {
    fn drop(&mut self) {
        let mut rx = self.rx.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = rx.push_return(token(&self.desc)) {
            log::warn!("could not return buffer {} upstream: {e}", self.desc.buffer_index);
        }
    }
}

impl PoolConsumer {
    /// Joins the frame hop offered on `conn` (see [`join`]).
    pub fn join(conn: Conn, hello: &ControlMsg, wait: WaitMode, upstream: &str) -> Result<PoolConsumer> {
        let (offer, rx, bufs) = join::<FrameDesc>(conn, hello, wait, upstream)?;
        if offer.payload != Payload::Frames {
            bail!("{upstream} offered {:?}, expected frames", offer.payload);
        }
        Ok(PoolConsumer { sizes: offer.buffers.clone(), rx: Arc::new(Mutex::new(rx)), bufs: Arc::new(bufs), offer })
    }

    /// Waits up to `timeout` for the next frame. Descriptors are validated against the pool
    /// (index in range, every plane inside its buffer) before use; a refused one whose
    /// buffer index is valid is returned upstream at once.
    pub fn recv(&self, timeout: Duration) -> Result<Recv<Frame>> {
        let sizes = &self.sizes;
        let validate = |d: &FrameDesc| -> std::result::Result<(), String> {
            let s = sizes.get(d.buffer_index as usize).ok_or_else(|| format!("buffer index {} out of {}", d.buffer_index, sizes.len()))?;
            d.layout.validate(s)
        };
        let n = sizes.len();
        let mut salvage = |rx: &mut Receiver<FrameDesc>, item: Option<FrameDesc>| {
            if let Some(d) = item.filter(|d| (d.buffer_index as usize) < n) {
                let _ = rx.push_return(token(&d));
            }
        };
        let r = self.rx.lock().unwrap_or_else(|p| p.into_inner()).recv(&validate, &mut salvage, timeout)?;
        Ok(match r {
            Recv::Item(desc) => Recv::Item(Frame { desc, bufs: self.bufs.clone(), rx: self.rx.clone() }),
            Recv::Eos => Recv::Eos,
            Recv::Hangup => Recv::Hangup,
            Recv::Idle => Recv::Idle,
        })
    }

    /// Ring counters.
    pub fn counters(&self) -> RingCounters {
        self.rx.lock().unwrap_or_else(|p| p.into_inner()).counters()
    }

    /// Pool buffers (e.g. to import into a device once at start-up).
    pub fn buffers(&self) -> &[Vec<DmaBuf>] {
        &self.bufs
    }

    /// Whether the upstream's control socket hung up.
    pub fn upstream_gone(&self) -> bool {
        self.rx.lock().unwrap_or_else(|p| p.into_inner()).conn().peer_gone()
    }
}

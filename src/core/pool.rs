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
use super::copy::{CopyCounters, CopyRecv, CopyReceiver, CopySender};
use super::dmabuf::{sealed_memfd, CpuAccess, DmaBuf, MemoryKind, Read};
use super::frame::FrameDesc;
use super::link::{Conn, ControlMsg, Offer, Payload, WaitMode};
use super::ring::{RingConsumer, RingCounters, RingPolicy, RingProducer};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BufState {
    Free,
    /// Lent to a device that fills it (a V4L2 driver's queue): see [`PoolProducer::take_free`].
    Device,
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
}

/// The producer's end of a frame hop: the pool, its ownership states and the ring.
pub struct PoolProducer {
    sender: Link,
    bufs: Vec<Vec<DmaBuf>>,
    state: Vec<BufState>,
    free: VecDeque<u32>,
    policy: RingPolicy,
    stats: PoolStats,
}

/// How a producer's frames travel: descriptors in a ring, or bytes over a socket.
enum Link {
    Ring(Sender<FrameDesc>),
    Copy { data: CopySender, conn: Conn },
}

impl Link {
    fn pop_return(&mut self) -> Result<Option<u64>> {
        match self {
            Link::Ring(s) => s.pop_return(),
            Link::Copy { .. } => Ok(None),
        }
    }
    fn take_oldest(&mut self) -> Result<Option<FrameDesc>> {
        match self {
            Link::Ring(s) => s.take_oldest(),
            Link::Copy { .. } => Ok(None),
        }
    }
    fn wait_back(&mut self, ready: impl Fn(&RingProducer<FrameDesc>) -> bool, timeout: Duration) -> Result<()> {
        match self {
            Link::Ring(s) => s.wait_back(ready, timeout),
            Link::Copy { conn, .. } => {
                std::thread::sleep(timeout.min(Duration::from_millis(20)));
                if conn.peer_gone() {
                    bail!("downstream (pid {}) hung up", conn.peer_pid);
                }
                Ok(())
            }
        }
    }
    fn send(&mut self, desc: FrameDesc, stop: &AtomicBool) -> Result<Sent<FrameDesc>> {
        match self {
            Link::Ring(s) => s.send(desc, stop),
            Link::Copy { .. } => bail!("copy-mode frames are sent by PoolProducer::publish"),
        }
    }
    fn counters(&self) -> RingCounters {
        match self {
            Link::Ring(s) => s.counters(),
            // A stream socket is lossless: what was sent is consumed (or still in the socket).
            Link::Copy { data, .. } => RingCounters { produced: data.counters.frames, consumed: data.counters.frames, ..Default::default() },
        }
    }
    fn waits(&self) -> u64 {
        match self {
            Link::Ring(s) => s.waits(),
            Link::Copy { .. } => 0,
        }
    }
    fn conn(&self) -> &Conn {
        match self {
            Link::Ring(s) => s.conn(),
            Link::Copy { conn, .. } => conn,
        }
    }
    fn finish(&mut self) {
        match self {
            Link::Ring(s) => s.finish(),
            Link::Copy { data, .. } => data.finish(),
        }
    }
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
        if spec.copy_mode {
            return Self::offer_copy(conn, bufs, spec);
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
            copy_mode: false,
            max_frame_bytes: bufs.iter().map(|b| b.iter().map(|d| d.size()).sum::<u64>()).max().unwrap_or(0),
        };
        let mut fds = ring_fds(&ring, &bell, &back);
        fds.extend(bufs.iter().flatten().map(|d| d.fd()));
        conn.send(&ControlMsg::Offer(offer), &fds).context("sending the pool to the consumer")?;
        log::debug!("offered {n} buffers ({} fds) to pid {}", fds.len(), conn.peer_pid);
        let sender = Link::Ring(Sender::new(ring, bell, back, conn, spec.policy));
        Ok(PoolProducer {
            sender,
            state: vec![BufState::Free; n],
            free: (0..n as u32).collect(),
            bufs,
            policy: spec.policy,
            stats: PoolStats { buffers: n, ..Default::default() },
        })
    }

    fn offer_copy(conn: Conn, bufs: Vec<Vec<DmaBuf>>, spec: HopSpec) -> Result<PoolProducer> {
        let n = bufs.len();
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().context("socketpair for the copy-mode data socket")?;
        let offer = Offer {
            payload: Payload::Frames,
            ring: super::ring::RingGeometry { capacity: 1, slot_bytes: 8, ret_capacity: 1 },
            policy: spec.policy,
            buffers: vec![],
            memory: spec.memory,
            layout: spec.layout,
            fps: spec.fps,
            description: spec.description,
            labels: vec![],
            copy_mode: true,
            max_frame_bytes: bufs.iter().map(|b| b.iter().map(|d| d.size()).sum::<u64>()).max().unwrap_or(0),
        };
        conn.send(&ControlMsg::Offer(offer), &[theirs.as_fd()]).context("sending the data socket to the consumer")?;
        drop(theirs);
        log::info!("copy mode: frames go to pid {} as bytes over a Unix stream socket", conn.peer_pid);
        Ok(PoolProducer {
            sender: Link::Copy { data: CopySender::new(ours), conn },
            state: vec![BufState::Free; n],
            free: (0..n as u32).collect(),
            bufs,
            policy: spec.policy,
            stats: PoolStats { buffers: n, ..Default::default() },
        })
    }

    /// Copy counters of this hop's producer side (`None` in zero-copy mode: nothing copied).
    pub fn copy_counters(&self) -> Option<CopyCounters> {
        match &self.sender {
            Link::Copy { data, .. } => Some(data.counters),
            Link::Ring(_) => None,
        }
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

    /// For pools a device fills (V4L2 capture): takes every free buffer, after collecting
    /// returns, marking them as lent to the device, so the caller can queue them (QBUF).
    /// Under drop-oldest, if fewer than `min_device` buffers would be with the device, the
    /// oldest queued frames are taken back first, so a slow consumer makes zcpipe drop
    /// frames (counted) rather than starve the driver (which would drop them uncounted).
    pub fn take_free(&mut self, min_device: usize) -> Result<Vec<u32>> {
        self.reclaim_returns()?;
        let at_device = self.state.iter().filter(|s| **s == BufState::Device).count();
        if self.policy == RingPolicy::DropOldest {
            while at_device + self.free.len() < min_device {
                match self.sender.take_oldest()? {
                    Some(d) => {
                        if self.release(d.buffer_index, d.seq) {
                            self.stats.reclaimed += 1;
                        }
                    }
                    None => break,
                }
            }
        }
        let v: Vec<u32> = self.free.drain(..).collect();
        for &i in &v {
            self.state[i as usize] = BufState::Device;
        }
        Ok(v)
    }

    /// Marks a buffer the device handed back filled (DQBUF) as being written: next, publish
    /// it or give it back with [`PoolProducer::abandon`]. Errors if the device was not
    /// holding it.
    pub fn claim(&mut self, i: u32) -> Result<()> {
        match self.state.get(i as usize) {
            Some(BufState::Device) => {
                self.state[i as usize] = BufState::Writing;
                Ok(())
            }
            other => bail!("device returned buffer {i}, which it did not hold ({other:?})"),
        }
    }

    /// Buffers currently lent to the device.
    pub fn at_device(&self) -> usize {
        self.state.iter().filter(|s| **s == BufState::Device).count()
    }

    /// Marks every buffer lent to the device as free (after STREAMOFF, which returns them).
    pub fn device_released_all(&mut self) {
        for i in 0..self.state.len() {
            if self.state[i] == BufState::Device {
                self.state[i] = BufState::Free;
                self.free.push_back(i as u32);
            }
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
        if let Link::Copy { data, .. } = &mut self.sender {
            // Copy mode: copy the frame out now; the buffer is free again right after.
            let guards: Vec<CpuAccess<'_, Read>> = self.bufs[i].iter().map(|b| b.read()).collect::<Result<_>>()?;
            data.send(&desc, &guards)?;
            drop(guards);
            self.state[i] = BufState::Free;
            self.free.push_back(i as u32);
            return Ok(());
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
            outstanding: self.state.iter().filter(|s| !matches!(s, BufState::Free | BufState::Device)).count(),
            waits: self.stats.waits + self.sender.waits(),
            ..self.stats
        }
    }

    /// The control connection.
    pub fn conn(&self) -> &Conn {
        self.sender.conn()
    }

    /// Ends this hop after the stage's frame loop: a clean end (`clean`) is an end of stream
    /// drained as [`PoolProducer::finish`] does; after an error nothing is sent, so the
    /// consumer sees this stage hang up and exits 3 (EXIT_PEER_GONE), a failure that the
    /// systemd units restart. Returns (buffers back during the drain, buffers still out); on
    /// an error path or a failed drain, (0, those out now) with the drain's error, if any.
    pub fn end(&mut self, clean: bool, timeout: Duration) -> ((usize, usize), Result<()>) {
        // A buffer being written when the loop ended was never published: it is free again.
        for i in 0..self.len() as u32 {
            self.abandon(i);
        }
        let drained = if clean { self.finish(timeout) } else { Ok((0, self.stats().outstanding)) };
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
                    if !matches!(self.state[i], BufState::Free | BufState::Device) {
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
        copy_mode: false,
        max_frame_bytes: 0,
    };
    let fds = ring_fds(&ring, &bell, &back);
    conn.send(&ControlMsg::Offer(offer), &fds)?;
    Ok(Sender::new(ring, bell, back, conn, policy))
}

/// Joins an upstream's hop: sends `hello`, receives the offer (or its refusal, returned as
/// the error) and maps the ring. Returns the offer, the receiver and the pool's buffers
/// (`buffers[i][fd_index]`), each checked with [`DmaBuf::from_peer`].
pub fn join<T: Pod>(conn: Conn, hello: &ControlMsg, wait: WaitMode, upstream: &str) -> Result<(Offer, Receiver<T>, Vec<Vec<DmaBuf>>)> {
    let (offer, fds) = request_offer(&conn, hello, upstream)?;
    let (rx, bufs) = attach(conn, &offer, fds, wait, upstream)?;
    Ok((offer, rx, bufs))
}

/// Sends `hello` and returns the upstream's offer with its fds; a refusal is the error.
fn request_offer(conn: &Conn, hello: &ControlMsg, upstream: &str) -> Result<(Offer, Vec<OwnedFd>)> {
    conn.send(hello, &[])?;
    let (msg, fds) = match conn.recv() {
        Ok(m) => m,
        // It failed during its own set-up and says why itself: ours is secondary.
        Err(_) if conn.peer_gone() => {
            return Err(crate::cli::PeerGone(format!("{upstream} (pid {}) hung up before offering its frames", conn.peer_pid)).into())
        }
        Err(e) => return Err(e.context(format!("waiting for {upstream}'s offer"))),
    };
    match msg {
        ControlMsg::Offer(o) => Ok((o, fds)),
        // The refusing stage prints this error itself: ours is secondary, reported quietly
        // (exit code 3) so the user sees the cause once.
        ControlMsg::Refuse { error } => Err(crate::cli::PeerGone(format!("{upstream} refused: {error}")).into()),
        other => bail!("{upstream} sent {other:?} instead of an offer"),
    }
}

/// Maps what an offer's fds carry: ring memfd, doorbells, then the pool's buffers.
fn attach<T: Pod>(conn: Conn, offer: &Offer, fds: Vec<OwnedFd>, wait: WaitMode, upstream: &str) -> Result<(Receiver<T>, Vec<Vec<DmaBuf>>)> {
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
    Ok((Receiver::new(ring, bell, back, conn, wait), bufs))
}

/// Where a consumed frame's buffer goes back to when the [`Frame`] is dropped.
trait ReturnPath: Send + Sync {
    fn give_back(&self, desc: &FrameDesc);
}

impl ReturnPath for Mutex<Receiver<FrameDesc>> {
    fn give_back(&self, desc: &FrameDesc) {
        let mut rx = self.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = rx.push_return(token(desc)) {
            log::warn!("could not return buffer {} upstream: {e}", desc.buffer_index);
        }
    }
}

/// The free list of a consumer's own copy-mode pool.
struct LocalFree(Mutex<VecDeque<u32>>);

impl ReturnPath for LocalFree {
    fn give_back(&self, desc: &FrameDesc) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push_back(desc.buffer_index);
    }
}

enum ConsumerLink {
    Ring(Arc<Mutex<Receiver<FrameDesc>>>),
    Copy { rx: Mutex<CopyReceiver>, free: Arc<LocalFree>, conn: Conn },
}

/// The consumer's end of a frame hop.
pub struct PoolConsumer {
    link: ConsumerLink,
    bufs: Arc<Vec<Vec<DmaBuf>>>,
    sizes: Vec<Vec<u64>>,
    /// What the producer offered.
    pub offer: Offer,
}

/// A frame lent by the upstream stage: read-only access to its buffer. Dropping it gives
/// the buffer back (to the upstream's pool, or in copy mode to our own).
pub struct Frame {
    /// The validated descriptor.
    pub desc: FrameDesc,
    bufs: Arc<Vec<Vec<DmaBuf>>>,
    ret: Arc<dyn ReturnPath>,
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
        self.ret.give_back(&self.desc);
    }
}

/// Buffers in a consumer's own pool in copy mode.
const COPY_POOL: usize = 3;

impl PoolConsumer {
    /// Joins the frame hop offered on `conn` (see [`join`]); in copy mode, maps nothing
    /// shared and allocates its own pool instead.
    pub fn join(conn: Conn, hello: &ControlMsg, wait: WaitMode, upstream: &str) -> Result<PoolConsumer> {
        let (offer, fds) = request_offer(&conn, hello, upstream)?;
        if offer.payload != Payload::Frames {
            bail!("{upstream} offered {:?}, expected frames", offer.payload);
        }
        if offer.copy_mode {
            let [fd]: [OwnedFd; 1] = fds.try_into().map_err(|v: Vec<OwnedFd>| anyhow!("{upstream} sent {} fds for copy mode, expected 1", v.len()))?;
            let sock = std::os::unix::net::UnixStream::from(fd);
            let size = offer.max_frame_bytes.clamp(1, 1 << 30);
            let bufs = (0..COPY_POOL)
                .map(|_| Ok(vec![DmaBuf::new(sealed_memfd("zcpipe-copy", size, true)?, size, MemoryKind::Memfd)]))
                .collect::<Result<Vec<_>>>()?;
            log::info!("copy mode: frames arrive as bytes and are copied into our own {COPY_POOL} buffers");
            return Ok(PoolConsumer {
                sizes: vec![vec![size]; COPY_POOL],
                link: ConsumerLink::Copy { rx: Mutex::new(CopyReceiver::new(sock, size)), free: Arc::new(LocalFree(Mutex::new((0..COPY_POOL as u32).collect()))), conn },
                bufs: Arc::new(bufs),
                offer,
            });
        }
        let (rx, bufs) = attach::<FrameDesc>(conn, &offer, fds, wait, upstream)?;
        Ok(PoolConsumer { sizes: offer.buffers.clone(), link: ConsumerLink::Ring(Arc::new(Mutex::new(rx))), bufs: Arc::new(bufs), offer })
    }

    /// Waits up to `timeout` for the next frame. Descriptors are validated against the pool
    /// (index in range, every plane inside its buffer) before use; a refused one whose
    /// buffer index is valid is returned upstream at once.
    pub fn recv(&self, timeout: Duration) -> Result<Recv<Frame>> {
        let rx = match &self.link {
            ConsumerLink::Ring(rx) => rx,
            ConsumerLink::Copy { rx, free, conn } => {
                let mut rx = rx.lock().unwrap_or_else(|p| p.into_inner());
                let mut desc = match rx.recv(timeout)? {
                    CopyRecv::Frame(d) => d,
                    CopyRecv::Eos => return Ok(Recv::Eos),
                    CopyRecv::Idle => return Ok(if conn.peer_gone() { Recv::Hangup } else { Recv::Idle }),
                    CopyRecv::Hangup => return Ok(Recv::Hangup),
                };
                let idx = free.0.lock().unwrap_or_else(|p| p.into_inner()).pop_front().ok_or_else(|| anyhow!("every copy-mode buffer is still held"))?;
                let n = rx.scratch.len();
                {
                    // SAFETY: `idx` came off our free list, so no Frame (the only other holder of
                    // guards on these buffers) refers to this buffer now.
                    let mut g = unsafe { self.bufs[idx as usize][0].write_exclusive()? };
                    g[..n].copy_from_slice(&rx.scratch);
                }
                rx.count_copy(n);
                desc.buffer_index = idx;
                let ret: Arc<dyn ReturnPath> = free.clone();
                return Ok(Recv::Item(Frame { desc, bufs: self.bufs.clone(), ret }));
            }
        };
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
        let r = rx.lock().unwrap_or_else(|p| p.into_inner()).recv(&validate, &mut salvage, timeout)?;
        Ok(match r {
            Recv::Item(desc) => {
                let ret: Arc<dyn ReturnPath> = rx.clone();
                Recv::Item(Frame { desc, bufs: self.bufs.clone(), ret })
            }
            Recv::Eos => Recv::Eos,
            Recv::Hangup => Recv::Hangup,
            Recv::Idle => Recv::Idle,
        })
    }

    /// Ring counters (zero in copy mode, which has no ring).
    pub fn counters(&self) -> RingCounters {
        match &self.link {
            ConsumerLink::Ring(rx) => rx.lock().unwrap_or_else(|p| p.into_inner()).counters(),
            ConsumerLink::Copy { .. } => RingCounters::default(),
        }
    }

    /// Copy counters of this consumer (`None` in zero-copy mode).
    pub fn copy_counters(&self) -> Option<CopyCounters> {
        match &self.link {
            ConsumerLink::Copy { rx, .. } => Some(rx.lock().unwrap_or_else(|p| p.into_inner()).counters),
            ConsumerLink::Ring(_) => None,
        }
    }

    /// Pool buffers (e.g. to import into a device once at start-up).
    pub fn buffers(&self) -> &[Vec<DmaBuf>] {
        &self.bufs
    }

    /// Whether the upstream's control socket hung up.
    pub fn upstream_gone(&self) -> bool {
        match &self.link {
            ConsumerLink::Ring(rx) => rx.lock().unwrap_or_else(|p| p.into_inner()).conn().peer_gone(),
            ConsumerLink::Copy { conn, .. } => conn.peer_gone(),
        }
    }
}

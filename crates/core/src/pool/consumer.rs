//! The consumer's end of a hop: joining the upstream's offer, and [`Frame`], the read-only
//! loan of one buffer that goes back when dropped.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use bytemuck::Pod;

use super::super::channel::{Doorbell, Receiver, Recv, Sender, Waitable};
use super::super::copy::{CopyCounters, CopyReceiver, CopyRecv};
use super::super::dmabuf::{sealed_memfd, CpuAccess, DmaBuf, MemoryKind, Read};
use super::super::frame::FrameDesc;
use super::super::link::{Conn, ControlMsg, Offer, Payload, WaitMode};
use super::super::ring::{OwnCounts, RingConsumer, RingCounters, RingPolicy, RingProducer};
use super::{ring_fds, token};

/// Offers a pool-less hop carrying `T` (e.g. detection results) on `conn`.
pub fn offer_items<T: Pod>(
    conn: Conn,
    capacity: u32,
    policy: RingPolicy,
    description: String,
    labels: Vec<String>,
) -> Result<Sender<T>> {
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
    Sender::new(ring, bell, back, conn, policy)
}

/// Joins an upstream's hop: sends `hello`, receives the offer (or its refusal, returned as
/// the error) and maps the ring. Returns the offer, the receiver and the pool's buffers
/// (`buffers[i][fd_index]`), each checked with [`DmaBuf::from_peer`].
pub fn join<T: Pod>(
    conn: Conn,
    hello: &ControlMsg,
    wait: WaitMode,
    upstream: &str,
) -> crate::Result<(Offer, Receiver<T>, Vec<Vec<DmaBuf>>)> {
    let (offer, fds) = request_offer(&conn, hello, upstream)?;
    let (rx, bufs) = attach(conn, &offer, fds, wait, upstream)?;
    Ok((offer, rx, bufs))
}

/// Sends `hello` and returns the upstream's offer with its fds; a refusal is the error.
fn request_offer(conn: &Conn, hello: &ControlMsg, upstream: &str) -> crate::Result<(Offer, Vec<OwnedFd>)> {
    conn.send(hello, &[])?;
    let (msg, fds) = match conn.recv() {
        Ok(m) => m,
        // It failed during its own set-up and says why itself: ours is secondary. (A
        // malformed answer stays an error even if the peer closed right after it.)
        Err(crate::Error::PeerGone { .. }) => {
            return Err(crate::Error::peer_gone(format!(
                "{upstream} (pid {}) hung up before offering its frames",
                conn.peer_pid
            )))
        }
        Err(e) => return Err(e.context(format!("waiting for {upstream}'s offer"))),
    };
    match msg {
        ControlMsg::Offer(o) => Ok((o, fds)),
        // The refusing stage prints this error itself: ours is secondary, reported quietly
        // (exit code 3) so the user sees the cause once.
        ControlMsg::Refuse { error } => Err(crate::Error::peer_gone(format!("{upstream} refused: {error}"))),
        other => Err(crate::Error::other(format!(
            "{upstream} sent {} instead of an offer (with {} fds, closed)",
            super::super::link::kind(&other),
            fds.len()
        ))),
    }
}

/// Maps what an offer's fds carry: ring memfd, doorbells, then the pool's buffers.
fn attach<T: Pod>(
    conn: Conn,
    offer: &Offer,
    fds: Vec<OwnedFd>,
    wait: WaitMode,
    upstream: &str,
) -> Result<(Receiver<T>, Vec<Vec<DmaBuf>>)> {
    offer.check(fds.len()).map_err(|e| anyhow!("{upstream} {e:#}"))?;
    let mut it = fds.into_iter();
    let mut next = || it.next().ok_or_else(|| anyhow!("fd list ended early"));
    let ring_fd: OwnedFd = next()?;
    let bell = Doorbell::from_peer(next()?).with_context(|| format!("{upstream}'s doorbell"))?;
    let back = Doorbell::from_peer(next()?).with_context(|| format!("{upstream}'s back doorbell"))?;
    let ring = RingConsumer::<T>::attach(ring_fd, offer.ring).with_context(|| format!("mapping {upstream}'s ring"))?;
    let mut bufs = Vec::with_capacity(offer.buffers.len());
    for (i, sizes) in offer.buffers.iter().enumerate() {
        let mut b = Vec::with_capacity(sizes.len());
        for &size in sizes {
            b.push(DmaBuf::from_peer(next()?, size).with_context(|| format!("{upstream}'s buffer {i}"))?);
        }
        bufs.push(b);
    }
    Ok((Receiver::new(ring, bell, back, conn, wait)?, bufs))
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

/// A frame lent by the upstream stage: read-only access to its buffer and its validated
/// descriptor. Dropping it gives the buffer back (to the upstream's pool, or in copy mode
/// to our own). Neither the pixels nor the descriptor can be changed through it:
///
/// ```compile_fail,E0616
/// # fn f(frame: &mut zcpipe_core::pool::Frame) {
/// frame.desc.buffer_index = 3; // error: `desc` is private; the loan's buffer is fixed
/// # }
/// ```
///
/// ```compile_fail,E0596
/// # fn f(frame: &zcpipe_core::pool::Frame) -> anyhow::Result<()> {
/// let _ = frame.buffers()[0].write()?; // error: the frame's dma-bufs are lent read-only
/// # Ok(()) }
/// ```
///
/// while reading both does compile (so the two above fail for the reason they show):
///
/// ```
/// # fn f(frame: &zcpipe_core::pool::Frame) -> anyhow::Result<()> {
/// let _index = frame.desc().buffer_index;
/// let _pixels = frame.buffers()[0].read()?;
/// # Ok(()) }
/// ```
pub struct Frame {
    desc: FrameDesc,
    bufs: Arc<Vec<Vec<DmaBuf>>>,
    ret: Arc<dyn ReturnPath>,
}

impl Frame {
    /// The validated descriptor (a copy of it is the start of the next hop's).
    pub fn desc(&self) -> &FrameDesc {
        &self.desc
    }

    /// The buffer's index in the upstream's pool (what a device that imported the pool at
    /// set-up knows it by).
    pub fn index(&self) -> u32 {
        self.desc.buffer_index
    }

    /// The dma-bufs of this frame's buffer (index = plane `fd_index`).
    pub fn buffers(&self) -> &[DmaBuf] {
        &self.bufs[self.desc.buffer_index as usize]
    }

    /// Begins a CPU read of every dma-buf of the frame (DMA_BUF_IOCTL_SYNC START|READ).
    pub fn read(&self) -> Result<Vec<CpuAccess<'_, Read>>> {
        self.buffers().iter().map(|b| b.read()).collect()
    }
}

impl Frame {
    /// Puts a restart notice on this frame's descriptor (unless it carries one already).
    pub(super) fn mark(&mut self, m: crate::frame::RestartMark) {
        self.desc.flags = m.mark(self.desc.flags);
    }
}

impl Drop for Frame {
    fn drop(&mut self) {
        self.ret.give_back(&self.desc);
    }
}

/// Buffers in a consumer's own pool in copy mode.
const COPY_POOL: usize = 3;

/// A consumer of several hops waits on them all at once ([`super::super::channel::wait_any`]).
impl Waitable for PoolConsumer {
    fn arm(&self) -> bool {
        match &self.link {
            ConsumerLink::Ring(rx) => rx.lock().unwrap_or_else(|p| p.into_inner()).arm(),
            // Frames come over the data socket: poll(2) sees them.
            ConsumerLink::Copy { .. } => false,
        }
    }

    fn disarm(&self) {
        if let ConsumerLink::Ring(rx) = &self.link {
            rx.lock().unwrap_or_else(|p| p.into_inner()).disarm();
        }
    }

    fn wait_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsRawFd;
        let fd = match &self.link {
            ConsumerLink::Ring(rx) => rx.lock().unwrap_or_else(|p| p.into_inner()).wait_fd().as_raw_fd(),
            ConsumerLink::Copy { rx, .. } => rx.lock().unwrap_or_else(|p| p.into_inner()).socket_fd().as_raw_fd(),
        };
        // SAFETY: the fd belongs to the receiver `self.link` owns (its epoll set, or its data
        // socket), which is never replaced and lives as long as `self`, which the returned
        // borrow cannot outlive.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }
    }
}

impl PoolConsumer {
    /// Joins the frame hop offered on `conn` (see [`join`]); in copy mode, maps nothing
    /// shared and allocates its own pool instead.
    pub fn join(conn: Conn, hello: &ControlMsg, wait: WaitMode, upstream: &str) -> crate::Result<PoolConsumer> {
        let (offer, fds) = request_offer(&conn, hello, upstream)?;
        if offer.payload != Payload::Frames {
            return Err(crate::Error::other(format!("{upstream} offered {:?}, expected frames", offer.payload)));
        }
        if offer.copy_mode {
            let [fd]: [OwnedFd; 1] = fds
                .try_into()
                .map_err(|v: Vec<OwnedFd>| anyhow!("{upstream} sent {} fds for copy mode, expected 1", v.len()))?;
            let sock = std::os::unix::net::UnixStream::from(fd);
            let size = offer.max_frame_bytes.clamp(1, 1 << 30);
            let bufs = (0..COPY_POOL)
                .map(|_| Ok(vec![DmaBuf::new(sealed_memfd("zcpipe-copy", size, true)?, size, MemoryKind::Memfd)]))
                .collect::<Result<Vec<_>>>()?;
            log::info!("copy mode: frames arrive as bytes and are copied into our own {COPY_POOL} buffers");
            return Ok(PoolConsumer {
                sizes: vec![vec![size]; COPY_POOL],
                link: ConsumerLink::Copy {
                    rx: Mutex::new(CopyReceiver::new(sock, size)),
                    free: Arc::new(LocalFree(Mutex::new((0..COPY_POOL as u32).collect()))),
                    conn,
                },
                bufs: Arc::new(bufs),
                offer,
            });
        }
        let (rx, bufs) = attach::<FrameDesc>(conn, &offer, fds, wait, upstream)?;
        Ok(PoolConsumer {
            sizes: offer.buffers.clone(),
            link: ConsumerLink::Ring(Arc::new(Mutex::new(rx))),
            bufs: Arc::new(bufs),
            offer,
        })
    }

    /// Waits up to `timeout` for the next frame. Descriptors are validated against the pool
    /// (index in range, every plane inside its buffer) before use; a refused one whose
    /// buffer index is valid is returned upstream at once.
    pub fn recv(&self, timeout: Duration) -> crate::Result<Recv<Frame>> {
        let rx = match &self.link {
            ConsumerLink::Ring(rx) => rx,
            ConsumerLink::Copy { rx, free, conn } => {
                let mut rx = rx.lock().unwrap_or_else(|p| p.into_inner());
                let mut looked_again = false;
                let mut desc = loop {
                    match rx.recv(if looked_again { Duration::ZERO } else { timeout })? {
                        CopyRecv::Frame(d) => break d,
                        CopyRecv::Eos => return Ok(Recv::Eos),
                        CopyRecv::Idle if !conn.peer_gone() => return Ok(Recv::Idle),
                        // Gone since the data socket was polled: what it sent before it
                        // went (its end of stream) is in the socket, and is read first.
                        CopyRecv::Idle if !looked_again => looked_again = true,
                        CopyRecv::Idle | CopyRecv::Hangup => return Ok(Recv::Hangup),
                    }
                };
                let idx = free
                    .0
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .pop_front()
                    .ok_or_else(|| anyhow!("every copy-mode buffer is still held"))?;
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
        let validate = |d: &FrameDesc| d.validate(sizes);
        let n = sizes.len();
        let mut salvage = |rx: &mut Receiver<FrameDesc>, item: Option<FrameDesc>| {
            if let Some(d) = item.filter(|d| (d.buffer_index as usize) < n) {
                let _ = rx.push_return(token(&d));
            }
        };
        let lock = || rx.lock().unwrap_or_else(|p| p.into_inner());
        let plain = !timeout.is_zero() && lock().sleeps_plainly();
        let r = if plain {
            // The receiver's lock is not held while sleeping: a frame given back meanwhile (a
            // worker thread dropping its loan) takes the same lock, and would wait for the
            // whole sleep. So: look, sleep on the doorbell unlocked ([`wait_any`]), look again.
            let deadline = std::time::Instant::now() + timeout;
            loop {
                let r = lock().recv(&validate, &mut salvage, Duration::ZERO)?;
                let now = std::time::Instant::now();
                match r {
                    Recv::Idle if now < deadline => super::super::channel::wait_any(&[self], deadline - now)?,
                    r => break r,
                }
            }
        } else {
            lock().recv(&validate, &mut salvage, timeout)?
        };
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

    /// Sets the spin budget of the ring's receiver ([`Receiver::set_spin`]); nothing in
    /// copy mode, whose frames come over a socket.
    pub fn set_spin(&self, budget: Duration) {
        if let ConsumerLink::Ring(rx) = &self.link {
            rx.lock().unwrap_or_else(|p| p.into_inner()).set_spin(budget);
        }
    }

    /// Ring counters (zero in copy mode, which has no ring).
    pub fn counters(&self) -> RingCounters {
        match &self.link {
            ConsumerLink::Ring(rx) => rx.lock().unwrap_or_else(|p| p.into_inner()).counters(),
            ConsumerLink::Copy { .. } => RingCounters::default(),
        }
    }

    /// What this consumer took and rejected from its ring, counted in its own memory
    /// ([`Receiver::own_counts`]); in copy mode, nothing (frames come over a socket).
    pub fn own_counts(&self) -> OwnCounts {
        match &self.link {
            ConsumerLink::Ring(rx) => rx.lock().unwrap_or_else(|p| p.into_inner()).own_counts(),
            ConsumerLink::Copy { .. } => OwnCounts::default(),
        }
    }

    /// Copy counters of this consumer (`None` in zero-copy mode).
    pub fn copy_counters(&self) -> Option<CopyCounters> {
        match &self.link {
            ConsumerLink::Copy { rx, .. } => Some(rx.lock().unwrap_or_else(|p| p.into_inner()).counters),
            ConsumerLink::Ring(_) => None,
        }
    }

    fn with_conn<R>(&self, f: impl FnOnce(&Conn) -> R) -> R {
        match &self.link {
            ConsumerLink::Ring(rx) => f(rx.lock().unwrap_or_else(|p| p.into_inner()).conn()),
            ConsumerLink::Copy { conn, .. } => f(conn),
        }
    }

    /// The upstream's pid (SO_PEERCRED).
    pub fn peer_pid(&self) -> i32 {
        self.with_conn(|c| c.peer_pid)
    }

    /// Bounds receives on the control connection ([`Conn::set_recv_timeout`]).
    pub fn set_recv_timeout(&self, timeout: Option<Duration>) -> Result<()> {
        self.with_conn(|c| c.set_recv_timeout(timeout))
    }

    /// Pool buffers (e.g. to import into a device once at start-up).
    pub fn buffers(&self) -> &[Vec<DmaBuf>] {
        &self.bufs
    }
}

//! The transports `zcpipe bench ipc` compares, each as the two ends of a ping-pong.
//!
//! Every transport is set up before the fork ([`prepare`]); then each process takes its own
//! end ([`Pair::parent`], [`Pair::child`]), closing what belongs to the other. An end sends
//! message `k` by writing all of it (every byte, `marker(k)`) and handing it over, and
//! receives message `k` by waiting for it and reading one byte in 64 of it, as a consumer
//! touching a frame would; its first and last bytes are checked, so a transport that hands
//! over stale data fails instead of looking fast.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use memmap2::{MmapOptions, MmapRaw};
use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use nix::unistd::pipe2;

use super::ipc::{MsgSize, Transport};
use super::proc::{abort_check, ABORT};
use zcpipe_core::channel::Recv;
use zcpipe_core::dmabuf::{sealed_memfd, Allocator, DmaBuf};
use zcpipe_core::frame::{monotonic_ns, FrameDesc, FrameLayout};
use zcpipe_core::link::{Conn, ControlMsg, Listener, WaitMode};
use zcpipe_core::pool::{HopSpec, PoolConsumer, PoolProducer};
use zcpipe_core::ring::RingPolicy;

/// One side of a ping-pong.
pub(crate) trait Endpoint {
    /// Writes message `k` (all of it) and hands it to the peer.
    fn send(&mut self, k: u64) -> Result<()>;
    /// Waits for message `k` from the peer, reads one byte in 64 of it and checks it.
    fn recv(&mut self, k: u64) -> Result<()>;
}

/// A transport set up before the fork; each process takes one end.
pub(crate) trait Pair {
    /// The timing process's end (closes the echo process's resources).
    fn parent(self: Box<Self>) -> Result<Box<dyn Endpoint>>;
    /// The echo process's end (closes the timing process's resources).
    fn child(self: Box<Self>) -> Result<Box<dyn Endpoint>>;
}

/// What [`prepare`] made.
pub(crate) enum Prepared {
    /// Ready to fork.
    Ready(Box<dyn Pair>),
    /// This transport cannot carry this size here; the reason, for the table.
    Skip(String),
}

/// What a transport needs to know to set itself up.
pub(crate) struct Ctx<'a> {
    /// The message size.
    pub size: &'a MsgSize,
    /// Buffers per direction (1, or the `--cold` pool size).
    pub buffers: usize,
    /// Both processes share one CPU: spin loops must yield.
    pub single_cpu: bool,
    /// Allocator of the frame ring's pools.
    pub alloc: &'a Allocator,
    /// Directory for the frame ring's control sockets.
    pub dir: &'a Path,
    /// Unique name of this measurement (sockets, message queues).
    pub tag: String,
}

/// Sets up `t` for one measurement.
pub(crate) fn prepare(t: Transport, ctx: &Ctx) -> Result<Prepared> {
    let len = ctx.size.bytes;
    let n = ctx.buffers;
    Ok(match t {
        Transport::None => Prepared::Ready(Box::new(NonePair { ab: bell()?, ba: bell()?, len, n })),
        Transport::Pipe | Transport::Pipe1m => {
            let (p2c_r, p2c_w) = pipe2(OFlag::O_CLOEXEC).context("pipe2")?;
            let (c2p_r, c2p_w) = pipe2(OFlag::O_CLOEXEC).context("pipe2")?;
            if t == Transport::Pipe1m {
                for p in [&p2c_w, &c2p_w] {
                    if let Err(e) = fcntl(p.as_raw_fd(), FcntlArg::F_SETPIPE_SZ(1 << 20)) {
                        let max = std::fs::read_to_string("/proc/sys/fs/pipe-max-size").unwrap_or_default();
                        return Ok(Prepared::Skip(format!(
                            "F_SETPIPE_SZ 1 MiB refused ({e}); /proc/sys/fs/pipe-max-size is {}",
                            max.trim()
                        )));
                    }
                }
            }
            Prepared::Ready(Box::new(StreamPair {
                parent: (p2c_w, c2p_r),
                child: (c2p_w, p2c_r),
                len,
                n,
                what: "pipe",
            }))
        }
        Transport::Unix => {
            let (a, b) = socketpair(AddressFamily::Unix, SockType::Stream, None, SockFlag::SOCK_CLOEXEC)
                .context("socketpair(AF_UNIX, SOCK_STREAM)")?;
            let (a2, b2) = (a.try_clone()?, b.try_clone()?);
            Prepared::Ready(Box::new(StreamPair { parent: (a, a2), child: (b, b2), len, n, what: "unix socket" }))
        }
        Transport::Tcp => {
            let l = std::net::TcpListener::bind("127.0.0.1:0").context("binding a TCP socket on 127.0.0.1")?;
            let c = std::net::TcpStream::connect(l.local_addr()?).context("connecting to 127.0.0.1")?;
            let (s, _) = l.accept().context("accept on 127.0.0.1")?;
            for x in [&c, &s] {
                x.set_nodelay(true).context("TCP_NODELAY")?;
            }
            let (a, b) = (OwnedFd::from(c), OwnedFd::from(s));
            let (a2, b2) = (a.try_clone()?, b.try_clone()?);
            Prepared::Ready(Box::new(StreamPair { parent: (a, a2), child: (b, b2), len, n, what: "TCP socket" }))
        }
        Transport::Mq => match mq_pair(ctx)? {
            Ok(p) => Prepared::Ready(Box::new(p)),
            Err(reason) => Prepared::Skip(reason),
        },
        Transport::ShmCopy | Transport::ShmInplace | Transport::ShmSpin => {
            let mode = match t {
                Transport::ShmCopy => ShmMode::Copy,
                Transport::ShmInplace => ShmMode::InPlace,
                _ => ShmMode::Spin,
            };
            Prepared::Ready(Box::new(ShmPair {
                shm: Shm::new(len, n)?,
                ab: bell()?,
                ba: bell()?,
                mode,
                spin_yield: ctx.single_cpu,
            }))
        }
        Transport::Ring | Transport::RingDesc | Transport::RingSpin => {
            let spin = if t == Transport::RingSpin { RING_SPIN } else { Duration::ZERO };
            Prepared::Ready(Box::new(RingPair::new(ctx, t == Transport::Ring, spin)?))
        }
        #[cfg(feature = "iceoryx2")]
        Transport::Iceoryx2 => Prepared::Ready(Box::new(super::iceoryx2::prepare(ctx))),
        #[cfg(not(feature = "iceoryx2"))]
        Transport::Iceoryx2 => bail!("{}", super::ipc::NO_ICEORYX2),
    })
}

// ---- the message: written whole, read one byte in 64 ----

/// The byte every position of message `k` holds (never 0 or 1, the fill of fresh buffers).
pub(crate) fn marker(k: u64) -> u8 {
    (k % 251) as u8 + 2
}

fn write_message(buf: &mut [u8], k: u64) {
    buf.fill(marker(k));
}

/// Reads one byte in 64, and the last one.
#[inline(never)]
fn touch(b: &[u8]) -> u8 {
    let mut acc = 0u8;
    for x in b.iter().step_by(64) {
        acc ^= *x;
    }
    acc ^ b[b.len() - 1]
}

/// Reads one byte in 64 of message `k` (and its last byte); with `check`, errors unless its
/// first and last bytes are `marker(k)`.
pub(crate) fn read_message(b: &[u8], k: u64, check: bool) -> Result<()> {
    std::hint::black_box(touch(b));
    let (m, first, last) = (marker(k), b[0], b[b.len() - 1]);
    if check && (first != m || last != m) {
        bail!("message {k}: expected bytes {m:#04x}, found {first:#04x} first and {last:#04x} last: the transport handed over stale or torn data");
    }
    Ok(())
}

/// Private buffers of one side, `n` of them used in turn (message `k` uses `k % n`).
struct Private {
    bufs: Vec<Vec<u8>>,
}

impl Private {
    fn new(len: usize, n: usize) -> Private {
        // Filled with 1 (not calloc'd zeros) so that every page is really there, not the
        // shared zero page.
        Private { bufs: (0..n).map(|_| vec![1u8; len]).collect() }
    }
    fn get(&mut self, k: u64) -> &mut [u8] {
        let n = self.bufs.len() as u64;
        &mut self.bufs[(k % n) as usize]
    }
}

// ---- syscalls that retry on EINTR unless the measurement must end ----

fn write_all(fd: &OwnedFd, mut b: &[u8], what: &str) -> Result<()> {
    while !b.is_empty() {
        match nix::unistd::write(fd, b) {
            Ok(0) => bail!("{what}: write(2) wrote nothing"),
            Ok(n) => b = &b[n..],
            Err(Errno::EINTR) => abort_check()?,
            Err(e) => bail!("{what}: write(2): {e}"),
        }
    }
    Ok(())
}

fn read_exact(fd: &OwnedFd, b: &mut [u8], what: &str) -> Result<()> {
    let mut off = 0;
    while off < b.len() {
        match nix::unistd::read(fd.as_raw_fd(), &mut b[off..]) {
            Ok(0) => bail!("{what}: the peer closed it"),
            Ok(n) => off += n,
            Err(Errno::EINTR) => abort_check()?,
            Err(e) => bail!("{what}: read(2): {e}"),
        }
    }
    Ok(())
}

/// A blocking eventfd: the minimal wake-up (eventfd(2)).
struct Bell(EventFd);

fn bell() -> Result<Bell> {
    Ok(Bell(EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC).context("eventfd")?))
}

impl Bell {
    fn ring(&self) -> Result<()> {
        loop {
            match self.0.write(1) {
                Ok(_) => return Ok(()),
                Err(Errno::EINTR) => abort_check()?,
                Err(e) => bail!("eventfd write: {e}"),
            }
        }
    }
    fn wait(&self) -> Result<()> {
        loop {
            match self.0.read() {
                Ok(_) => return Ok(()),
                Err(Errno::EINTR) => abort_check()?,
                Err(e) => bail!("eventfd read: {e}"),
            }
        }
    }
}

// ---- none: the baseline ----

struct NonePair {
    ab: Bell,
    ba: Bell,
    len: usize,
    n: usize,
}

/// One side of the baseline. Each side has its own buffers (as many as a shared-memory
/// transport has per direction, so both use the same memory in all): receiving message `k`
/// reads this side's buffer `k % n`, which this side itself wrote last, so no byte moves
/// between the processes; sending `k` writes the same buffer.
struct NoneEnd {
    tx: Bell,
    rx: Bell,
    bufs: Private,
}

impl Pair for NonePair {
    fn parent(self: Box<Self>) -> Result<Box<dyn Endpoint>> {
        Ok(Box::new(NoneEnd { tx: self.ab, rx: self.ba, bufs: Private::new(self.len, self.n) }))
    }
    fn child(self: Box<Self>) -> Result<Box<dyn Endpoint>> {
        Ok(Box::new(NoneEnd { tx: self.ba, rx: self.ab, bufs: Private::new(self.len, self.n) }))
    }
}

impl Endpoint for NoneEnd {
    fn send(&mut self, k: u64) -> Result<()> {
        write_message(self.bufs.get(k), k);
        self.tx.ring()
    }
    fn recv(&mut self, k: u64) -> Result<()> {
        self.rx.wait()?;
        read_message(self.bufs.get(k), k, false)
    }
}

// ---- byte streams: pipes, Unix and TCP sockets ----

struct StreamPair {
    /// (write end, read end) of the timing process.
    parent: (OwnedFd, OwnedFd),
    /// (write end, read end) of the echo process.
    child: (OwnedFd, OwnedFd),
    len: usize,
    n: usize,
    what: &'static str,
}

struct StreamEnd {
    tx: OwnedFd,
    rx: OwnedFd,
    send: Private,
    recv: Private,
    what: &'static str,
}

impl Pair for StreamPair {
    fn parent(self: Box<Self>) -> Result<Box<dyn Endpoint>> {
        let s = *self;
        drop(s.child);
        Ok(Box::new(StreamEnd {
            tx: s.parent.0,
            rx: s.parent.1,
            send: Private::new(s.len, s.n),
            recv: Private::new(s.len, s.n),
            what: s.what,
        }))
    }
    fn child(self: Box<Self>) -> Result<Box<dyn Endpoint>> {
        let s = *self;
        drop(s.parent);
        Ok(Box::new(StreamEnd {
            tx: s.child.0,
            rx: s.child.1,
            send: Private::new(s.len, s.n),
            recv: Private::new(s.len, s.n),
            what: s.what,
        }))
    }
}

impl Endpoint for StreamEnd {
    fn send(&mut self, k: u64) -> Result<()> {
        let b = self.send.get(k);
        write_message(b, k);
        write_all(&self.tx, b, self.what)
    }
    fn recv(&mut self, k: u64) -> Result<()> {
        let b = self.recv.get(k);
        read_exact(&self.rx, b, self.what)?;
        read_message(b, k, true)
    }
}

// ---- POSIX message queues ----

/// An open message queue descriptor (mq_overview(7)); closed on drop.
struct Mq(libc::mqd_t);

impl Drop for Mq {
    fn drop(&mut self) {
        // SAFETY: `self.0` is a descriptor mq_open returned and nothing else closes it.
        unsafe { libc::mq_close(self.0) };
    }
}

impl Mq {
    /// Creates a queue of one message of `len` bytes and unlinks its name at once (the
    /// descriptor, inherited over fork, keeps it alive).
    fn create(name: &str, len: usize) -> std::result::Result<Mq, Errno> {
        let cname = std::ffi::CString::new(name).map_err(|_| Errno::EINVAL)?;
        // SAFETY: mq_attr is plain integers (and padding); all-zero is a valid value.
        let mut attr: libc::mq_attr = unsafe { std::mem::zeroed() };
        attr.mq_maxmsg = 1;
        attr.mq_msgsize = len as libc::c_long;
        // SAFETY: `cname` is a valid C string; with O_CREAT mq_open reads a mode_t and a
        // pointer to `attr`, which lives across the call.
        let d = unsafe {
            libc::mq_open(
                cname.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
                0o600 as libc::mode_t,
                &attr as *const libc::mq_attr,
            )
        };
        if d < 0 {
            return Err(Errno::last());
        }
        // SAFETY: `cname` is a valid C string.
        unsafe { libc::mq_unlink(cname.as_ptr()) };
        Ok(Mq(d))
    }

    fn send(&self, b: &[u8]) -> Result<()> {
        loop {
            // SAFETY: `b` is valid for `b.len()` bytes, which is the queue's message size.
            let r = unsafe { libc::mq_send(self.0, b.as_ptr() as *const libc::c_char, b.len(), 0) };
            if r == 0 {
                return Ok(());
            }
            match Errno::last() {
                Errno::EINTR => abort_check()?,
                e => bail!("mq_send: {e}"),
            }
        }
    }

    fn receive(&self, b: &mut [u8]) -> Result<()> {
        loop {
            let mut prio = 0u32;
            // SAFETY: `b` is writable for `b.len()` bytes (the queue's message size, which
            // mq_receive requires as a minimum); `prio` is a valid u32.
            let r = unsafe { libc::mq_receive(self.0, b.as_mut_ptr() as *mut libc::c_char, b.len(), &mut prio) };
            if r >= 0 {
                if r as usize != b.len() {
                    bail!("mq_receive: {r} bytes, expected {}", b.len());
                }
                return Ok(());
            }
            match Errno::last() {
                Errno::EINTR => abort_check()?,
                e => bail!("mq_receive: {e}"),
            }
        }
    }
}

/// The kernel's limit on a message queue's message size, for users without
/// CAP_SYS_RESOURCE (mq_overview(7)).
pub(crate) fn mq_msgsize_max() -> Option<usize> {
    std::fs::read_to_string("/proc/sys/fs/mqueue/msgsize_max").ok()?.trim().parse().ok()
}

struct MqPair {
    p2c: Mq,
    c2p: Mq,
    len: usize,
    n: usize,
}

struct MqEnd {
    tx: Mq,
    rx: Mq,
    send: Private,
    recv: Private,
}

/// Opens the two queues, or says why this size is skipped.
fn mq_pair(ctx: &Ctx) -> Result<std::result::Result<MqPair, String>> {
    let len = ctx.size.bytes;
    let Some(max) = mq_msgsize_max() else {
        return Ok(Err(
            "no POSIX message queues here (/proc/sys/fs/mqueue missing: kernel without CONFIG_POSIX_MQUEUE?)".into(),
        ));
    };
    if len > max {
        // Root could go past it (CAP_SYS_RESOURCE); the table keeps to what any user gets.
        return Ok(Err(format!("{len} B > /proc/sys/fs/mqueue/msgsize_max ({max} B); raise it (sysctl fs.mqueue.msgsize_max) to include this size")));
    }
    let open = |dir: &str| -> Result<std::result::Result<Mq, String>> {
        match Mq::create(&format!("/zcpipe-bench-{}-{}-{dir}", std::process::id(), ctx.tag), len) {
            Ok(q) => Ok(Ok(q)),
            Err(Errno::EMFILE) => {
                Ok(Err(format!("mq_open: EMFILE: two queues of {len} B exceed RLIMIT_MSGQUEUE (ulimit -q)")))
            }
            Err(Errno::ENOSYS) => Ok(Err("mq_open: ENOSYS: kernel without POSIX message queues".into())),
            Err(e) => Err(anyhow!("mq_open of a {len}-byte queue: {e}")),
        }
    };
    let p2c = match open("a")? {
        Ok(q) => q,
        Err(r) => return Ok(Err(r)),
    };
    let c2p = match open("b")? {
        Ok(q) => q,
        Err(r) => return Ok(Err(r)),
    };
    Ok(Ok(MqPair { p2c, c2p, len, n: ctx.buffers }))
}

impl Pair for MqPair {
    fn parent(self: Box<Self>) -> Result<Box<dyn Endpoint>> {
        Ok(Box::new(MqEnd {
            tx: self.p2c,
            rx: self.c2p,
            send: Private::new(self.len, self.n),
            recv: Private::new(self.len, self.n),
        }))
    }
    fn child(self: Box<Self>) -> Result<Box<dyn Endpoint>> {
        Ok(Box::new(MqEnd {
            tx: self.c2p,
            rx: self.p2c,
            send: Private::new(self.len, self.n),
            recv: Private::new(self.len, self.n),
        }))
    }
}

impl Endpoint for MqEnd {
    fn send(&mut self, k: u64) -> Result<()> {
        let b = self.send.get(k);
        write_message(b, k);
        self.tx.send(b)
    }
    fn recv(&mut self, k: u64) -> Result<()> {
        let b = self.recv.get(k);
        self.rx.receive(b)?;
        read_message(b, k, true)
    }
}

// ---- shared memory ----

const SHM_DATA: usize = 4096;
const PAGE: usize = 4096;

/// A shared memfd mapped before the fork (both processes see the same pages): two sequence
/// words on their own cache lines, then `n` regions per direction.
struct Shm {
    _fd: OwnedFd,
    map: MmapRaw,
    stride: usize,
    n: usize,
    len: usize,
}

impl Shm {
    fn new(len: usize, n: usize) -> Result<Shm> {
        let stride = len.div_ceil(PAGE) * PAGE;
        let total = SHM_DATA + 2 * n * stride;
        let fd = sealed_memfd("zcpipe-bench-shm", total as u64, true)?;
        let map = MmapOptions::new().len(total).map_raw(fd.as_raw_fd()).context("mmap of the shared memfd")?;
        let mut shm = Shm { _fd: fd, map, stride, n, len };
        for dir in 0..2 {
            for k in 0..n as u64 {
                shm.region_mut(dir, k).fill(1);
            }
        }
        Ok(shm)
    }

    fn offset(&self, dir: usize, k: u64) -> usize {
        SHM_DATA + (dir * self.n + (k % self.n as u64) as usize) * self.stride
    }

    fn seq(&self, dir: usize) -> &AtomicU64 {
        // SAFETY: offsets 0 and 128 are inside the mapping's first page, 8-aligned; these
        // words are only ever accessed as atomics, by both processes.
        unsafe { &*(self.map.as_ptr().add(dir * 128) as *const AtomicU64) }
    }

    fn region(&self, dir: usize, k: u64) -> &[u8] {
        // SAFETY: the region lies inside the mapping, which lives as long as `self`. The
        // turn-taking protocol keeps the peer from writing it while we read: a region is
        // written only by its direction's sender before a hand-off and next written only
        // after the receiver has answered.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(self.offset(dir, k)), self.len) }
    }

    fn region_mut(&mut self, dir: usize, k: u64) -> &mut [u8] {
        // SAFETY: as in `region`; `&mut self` makes this the only view in this process, and
        // the protocol keeps the peer from touching it until we hand it over.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_mut_ptr().add(self.offset(dir, k)), self.len) }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ShmMode {
    /// Fill a private buffer, memcpy it in, ring an eventfd.
    Copy,
    /// Fill the shared region, ring an eventfd.
    InPlace,
    /// Fill the shared region, publish a sequence word the reader spins on.
    Spin,
}

struct ShmPair {
    shm: Shm,
    ab: Bell,
    ba: Bell,
    mode: ShmMode,
    spin_yield: bool,
}

struct ShmEnd {
    shm: Shm,
    tx_dir: usize,
    tx: Bell,
    rx: Bell,
    mode: ShmMode,
    spin_yield: bool,
    src: Private,
}

impl ShmPair {
    fn end(self, tx_dir: usize) -> Box<dyn Endpoint> {
        let (tx, rx) = if tx_dir == 0 { (self.ab, self.ba) } else { (self.ba, self.ab) };
        let src = Private::new(
            if self.mode == ShmMode::Copy { self.shm.len } else { 0 },
            if self.mode == ShmMode::Copy { self.shm.n } else { 1 },
        );
        Box::new(ShmEnd { shm: self.shm, tx_dir, tx, rx, mode: self.mode, spin_yield: self.spin_yield, src })
    }
}

impl Pair for ShmPair {
    fn parent(self: Box<Self>) -> Result<Box<dyn Endpoint>> {
        Ok(self.end(0))
    }
    fn child(self: Box<Self>) -> Result<Box<dyn Endpoint>> {
        Ok(self.end(1))
    }
}

impl Endpoint for ShmEnd {
    fn send(&mut self, k: u64) -> Result<()> {
        let d = self.tx_dir;
        if self.mode == ShmMode::Copy {
            let p = self.src.get(k);
            write_message(p, k);
            self.shm.region_mut(d, k).copy_from_slice(p);
        } else {
            write_message(self.shm.region_mut(d, k), k);
        }
        if self.mode == ShmMode::Spin {
            self.shm.seq(d).store(k + 1, Ordering::Release);
            Ok(())
        } else {
            self.tx.ring()
        }
    }
    fn recv(&mut self, k: u64) -> Result<()> {
        let d = 1 - self.tx_dir;
        if self.mode == ShmMode::Spin {
            let seq = self.shm.seq(d);
            let mut spins = 0u32;
            while seq.load(Ordering::Acquire) != k + 1 {
                if self.spin_yield {
                    let _ = nix::sched::sched_yield();
                } else {
                    std::hint::spin_loop();
                }
                spins = spins.wrapping_add(1);
                if spins.is_multiple_of(4096) {
                    abort_check()?;
                }
            }
        } else {
            self.rx.wait()?;
        }
        read_message(self.shm.region(d, k), k, true)
    }
}

// ---- zcpipe's frame ring ----

/// The layout a message of this size travels under: the named NV12 frame, or one plane of
/// packed 24-bit pixels in rows of at most 12288 bytes covering the message.
pub(crate) fn layout_for(size: &MsgSize) -> FrameLayout {
    if let Some(f) = size.frame {
        return FrameLayout::nv12(f.width, f.height, 16);
    }
    let bpl = size.bytes.clamp(3, 12288) as u32;
    let rows = size.bytes.div_ceil(bpl as usize).max(1) as u32;
    FrameLayout::packed24(zcpipe_sys::fourcc::Fourcc::BGR24, bpl / 3, rows, bpl)
}

/// Two frame hops, one per direction, each owned by its producer: the timing process
/// produces into hop A (its socket `<tag>-a.sock`), the echo process into hop B.
struct RingPair {
    listener_a: Listener,
    sock_b: PathBuf,
    pool_a: Vec<DmaBuf>,
    pool_b: Vec<DmaBuf>,
    layout: FrameLayout,
    len: usize,
    pixels: bool,
    memory: String,
    spin: Duration,
}

/// The `ring-spin` row's spin budget (`--spin-us 50`).
const RING_SPIN: Duration = Duration::from_micros(50);

impl RingPair {
    fn new(ctx: &Ctx, pixels: bool, spin: Duration) -> Result<RingPair> {
        let layout = layout_for(ctx.size);
        let bytes = layout.bytes_needed().max(ctx.size.bytes as u64);
        let pool = || ctx.alloc.allocate_pool(ctx.buffers, bytes);
        let listener_a = Listener::bind(&ctx.dir.join(format!("{}-a.sock", ctx.tag)))?;
        Ok(RingPair {
            listener_a,
            sock_b: ctx.dir.join(format!("{}-b.sock", ctx.tag)),
            pool_a: pool()?,
            pool_b: pool()?,
            layout,
            len: ctx.size.bytes,
            pixels,
            memory: ctx.alloc.describe(),
            spin,
        })
    }
}

fn hello() -> ControlMsg {
    ControlMsg::Hello { stage: "bench".into(), accept: vec![], want: None, wait: WaitMode::Eventfd }
}

fn spec(layout: FrameLayout, memory: String) -> HopSpec {
    HopSpec {
        policy: RingPolicy::DropOldest,
        capacity: 4,
        memory,
        layout: Some(layout),
        fps: 0.0,
        copy_mode: false,
        description: "zcpipe bench ipc".into(),
    }
}

/// Producer side of a hop: takes the consumer's hello, offers the pool.
fn offer(conn: Conn, pool: Vec<DmaBuf>, layout: FrameLayout, memory: String) -> Result<PoolProducer> {
    match conn.recv()? {
        (ControlMsg::Hello { .. }, _) => {}
        (other, _) => bail!("expected a hello, got {other:?}"),
    }
    PoolProducer::offer(conn, pool.into_iter().map(|b| vec![b]).collect(), spec(layout, memory))
}

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

impl Pair for RingPair {
    fn parent(self: Box<Self>) -> Result<Box<dyn Endpoint>> {
        let RingPair { listener_a, sock_b, pool_a, pool_b, layout, len, pixels, memory, spin } = *self;
        drop(pool_b); // the echo process owns that pool
        let conn = listener_a.accept(&ABORT)?;
        let tx = offer(conn, pool_a, layout, memory)?;
        let conn = Conn::connect_retry(&sock_b, "the echo process's ring", &ABORT, CONNECT_TIMEOUT)?;
        let rx = PoolConsumer::join(conn, &hello(), WaitMode::Eventfd, "echo process")?;
        rx.set_spin(spin);
        Ok(Box::new(RingEnd { tx, rx, layout, len, pixels, _listener: Some(listener_a) }))
    }

    fn child(self: Box<Self>) -> Result<Box<dyn Endpoint>> {
        let RingPair { listener_a, sock_b, pool_a, pool_b, layout, len, pixels, memory, spin } = *self;
        drop(pool_a); // the timing process owns that pool; we get it through SCM_RIGHTS
        let conn = Conn::connect_retry(listener_a.path(), "the timing process's ring", &ABORT, CONNECT_TIMEOUT)?;
        // Our inherited copy of the timing process's listener must not unlink its path.
        std::mem::forget(listener_a);
        let rx = PoolConsumer::join(conn, &hello(), WaitMode::Eventfd, "timing process")?;
        rx.set_spin(spin);
        let listener_b = Listener::bind(&sock_b)?;
        let conn = listener_b.accept(&ABORT)?;
        let tx = offer(conn, pool_b, layout, memory)?;
        Ok(Box::new(RingEnd { tx, rx, layout, len, pixels, _listener: Some(listener_b) }))
    }
}

struct RingEnd {
    tx: PoolProducer,
    rx: PoolConsumer,
    layout: FrameLayout,
    len: usize,
    pixels: bool,
    _listener: Option<Listener>,
}

impl Endpoint for RingEnd {
    fn send(&mut self, k: u64) -> Result<()> {
        let Some(mut loan) = self.tx.acquire(&ABORT)? else {
            abort_check()?;
            bail!("stopped while waiting for a free buffer");
        };
        if self.pixels {
            let mut g = loan.buffers_mut()[0].write()?;
            write_message(&mut g[..self.len], k);
        }
        let desc = FrameDesc { seq: k, timestamp_ns: monotonic_ns(), layout: self.layout, ..Default::default() };
        Ok(loan.publish(desc, &ABORT)?)
    }

    fn recv(&mut self, k: u64) -> Result<()> {
        loop {
            match self.rx.recv(Duration::from_millis(200))? {
                Recv::Item(f) => {
                    if f.desc().seq != k {
                        bail!("frame ring: got frame {}, expected {k}", f.desc().seq);
                    }
                    if self.pixels {
                        let g = f.read()?;
                        read_message(&g[0][..self.len], k, true)?;
                    }
                    return Ok(());
                }
                Recv::Idle => abort_check()?,
                Recv::Eos | Recv::Hangup => bail!("frame ring: the peer hung up"),
            }
        }
    }
}

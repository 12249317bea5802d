//! The capture pool and its traffic with the driver: REQBUFS (and VIDIOC_EXPBUF in `mmap`
//! mode, dma-buf heap buffers in `dmabuf` mode), QBUF of every buffer no one downstream holds
//! (its [`DeviceLoan`] kept in the driver slot), `poll()` and DQBUF.

use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::{is_enodev, CamError, CaptureIo, V4l2Capture};
use zcpipe_core::config::Choice;
use zcpipe_core::dmabuf::{Allocator, DmaBuf, MemoryKind};
use zcpipe_core::frame::MAX_PLANES;
use zcpipe_core::pool::{DeviceLoan, PoolProducer};
use zcpipe_sys::v4l2 as sys;

/// One buffer back from the driver.
#[derive(Clone, Copy, Debug)]
pub struct Dequeued {
    /// Buffer index.
    pub index: u32,
    /// Driver's sequence number.
    pub sequence: u32,
    /// Capture time, CLOCK_MONOTONIC ns (when the driver says its clock is monotonic).
    pub timestamp_ns: u64,
    /// Whether the timestamp is CLOCK_MONOTONIC.
    pub monotonic: bool,
    /// Bytes of data per plane.
    pub bytesused: [u32; MAX_PLANES],
    /// `V4L2_BUF_FLAG_ERROR`.
    pub error: bool,
}

impl V4l2Capture {
    /// Makes the pool: REQBUFS for `buffers`, then for `mmap` VIDIOC_EXPBUF of each plane
    /// (read-write) or for `dmabuf` one buffer per plane of `sizeimage` bytes from `alloc`.
    /// Returns `pool[buffer][plane]`, as [`PoolProducer::offer`] takes it.
    pub fn allocate(&mut self, buffers: usize, alloc: Option<&Allocator>) -> Result<Vec<Vec<DmaBuf>>> {
        if self.io == CaptureIo::Dmabuf {
            match alloc {
                None => bail!("--capture-io dmabuf needs an allocator"),
                Some(Allocator::Memfd) => bail!(
                    "--capture-io dmabuf: the allocator is memfd, which a V4L2 driver cannot import; use --heap system|dma32|cma|udmabuf (where present) or --capture-io mmap"
                ),
                Some(_) => {}
            }
        }
        let mut rb = sys::RequestBuffers {
            count: buffers as u32,
            type_: self.buf_type,
            memory: self.memory,
            ..Default::default()
        };
        if let Err(e) = sys::reqbufs(self.fd(), &mut rb) {
            if e.raw_os_error() == Some(libc::EBUSY) {
                return Err(self.busy_error("VIDIOC_REQBUFS"));
            }
            if e.raw_os_error() == Some(libc::EINVAL) {
                let other = if self.io == CaptureIo::Mmap { "dmabuf" } else { "mmap" };
                bail!(
                    "v4l2: {} refuses {} buffers (VIDIOC_REQBUFS: {e}); try --capture-io {other}",
                    self.node.label(),
                    self.io.name()
                );
            }
            bail!("v4l2: VIDIOC_REQBUFS {} x{buffers} on {}: {e}", self.io.name(), self.node.label());
        }
        if rb.count < 2 {
            bail!("v4l2: {} granted {} buffers; zcpipe needs at least 2", self.node.label(), rb.count);
        }
        if rb.count as usize > 64 {
            bail!("v4l2: {} insists on {} buffers; zcpipe pools hold at most 64", self.node.label(), rb.count);
        }
        if rb.count as usize != buffers {
            log::info!("v4l2: asked {} for {buffers} buffers, it granted {}", self.node.label(), rb.count);
        }
        self.count = rb.count;
        self.at_driver = (0..rb.count).map(|_| None).collect();
        self.min_device = (rb.count as usize / 2).max(1);
        let nplanes = self.granted.planes.len();
        let mut pool = Vec::with_capacity(rb.count as usize);
        for index in 0..rb.count {
            let mut bufs = Vec::with_capacity(nplanes);
            match self.io {
                CaptureIo::Mmap => {
                    let mut b = sys::Buffer::new(self.buf_type, self.memory, index);
                    let mut planes = vec![sys::Plane::default(); nplanes];
                    sys::querybuf(self.fd(), &mut b, &mut planes)
                        .with_context(|| format!("v4l2: VIDIOC_QUERYBUF {index} on {}", self.node.label()))?;
                    let lengths: Vec<u32> =
                        if self.mplane() { planes.iter().map(|p| p.length).collect() } else { vec![b.length] };
                    for (plane, len) in lengths.into_iter().enumerate() {
                        let mut x = sys::ExportBuffer {
                            type_: self.buf_type,
                            index,
                            plane: plane as u32,
                            flags: libc::O_RDWR as u32,
                            ..Default::default()
                        };
                        let fd = sys::expbuf(self.fd(), &mut x).map_err(|e| {
                            anyhow!(
                                "v4l2: VIDIOC_EXPBUF buffer {index} plane {plane} on {}: {e} \
                                 (the driver cannot export dma-bufs; try --capture-io dmabuf)",
                                self.node.label()
                            )
                        })?;
                        bufs.push(DmaBuf::new(fd, len as u64, MemoryKind::DmaBuf));
                    }
                }
                CaptureIo::Dmabuf => {
                    let alloc = alloc.expect("checked above");
                    for (plane, &(_, size)) in self.granted.planes.iter().enumerate() {
                        bufs.push(
                            alloc
                                .allocate(size as u64)
                                .with_context(|| format!("capture buffer {index} plane {plane}"))?,
                        );
                    }
                }
            }
            let sizes: Vec<u64> = bufs.iter().map(|b| b.size()).collect();
            // MJPG buffers hold a JPEG of up to sizeimage bytes, not pixels.
            if self.layout.fourcc != zcpipe_sys::fourcc::Fourcc::MJPG {
                self.layout
                    .validate(&sizes)
                    .map_err(|e| anyhow!("v4l2: buffer {index} of {} does not hold a frame: {e}", self.node.label()))?;
            }
            pool.push(bufs);
        }
        Ok(pool)
    }

    /// Hands the buffer of `loan` (its dma-bufs `bufs`) to the driver (VIDIOC_QBUF); the
    /// driver's queue holds the loan until DQBUF or STREAMOFF.
    fn queue(&mut self, loan: DeviceLoan, bufs: &[DmaBuf]) -> Result<(), CamError> {
        let index = loan.index();
        let mut b = sys::Buffer::new(self.buf_type, self.memory, index);
        let mut planes = vec![sys::Plane::default(); self.granted.planes.len()];
        if self.memory == sys::V4L2_MEMORY_DMABUF {
            if self.mplane() {
                for (p, d) in planes.iter_mut().zip(bufs) {
                    p.set_fd(d.fd());
                    p.length = d.size() as u32;
                }
            } else {
                b.set_fd(bufs[0].fd());
                b.length = bufs[0].size() as u32;
            }
        }
        let slot = self.at_driver.get_mut(index as usize).filter(|s| s.is_none());
        let Some(slot) = slot else {
            self.not_queued.push(loan);
            return Err(anyhow!(
                "v4l2: buffer {index} is not one of the {} buffers of {}, or is queued already",
                self.count,
                self.node.label()
            )
            .into());
        };
        match sys::qbuf(self.file.as_fd(), &mut b, &mut planes) {
            Ok(()) => {
                *slot = Some(loan);
                self.stats.queued += 1;
                Ok(())
            }
            Err(e) => {
                self.not_queued.push(loan);
                if is_enodev(&e) {
                    Err(CamError::Unplugged)
                } else {
                    Err(anyhow!("v4l2: VIDIOC_QBUF {index} on {}: {e}", self.node.label()).into())
                }
            }
        }
    }

    /// Queues every buffer no one downstream holds ([`PoolProducer::lend_free_to_device`]).
    pub(super) fn refill(&mut self, prod: &mut PoolProducer) -> Result<(), CamError> {
        for loan in prod.lend_free_to_device(self.min_device).map_err(|e| CamError::Failed(e.into_anyhow()))? {
            let bufs = prod.device_buffers(&loan)?;
            self.queue(loan, bufs)?;
        }
        Ok(())
    }

    /// Queues every free buffer and starts streaming (VIDIOC_STREAMON).
    pub fn start(&mut self, prod: &mut PoolProducer) -> Result<()> {
        self.refill(prod)?;
        sys::streamon(self.fd(), self.buf_type).map_err(|e| {
            if e.raw_os_error() == Some(libc::EBUSY) {
                self.busy_error("VIDIOC_STREAMON")
            } else {
                anyhow!("v4l2: VIDIOC_STREAMON on {}: {e}", self.node.label())
            }
        })?;
        self.streaming = true;
        log::info!("v4l2: streaming from {} ({} buffers queued)", self.node.label(), self.at_driver());
        Ok(())
    }

    /// Waits up to `timeout` for a filled buffer (`poll()` POLLIN). `Ok(true)`: try DQBUF.
    pub(super) fn wait(&self, timeout: Duration) -> Result<bool> {
        let ms = timeout.as_millis().min(u16::MAX as u128) as u16;
        let mut p = [PollFd::new(self.fd(), PollFlags::POLLIN)];
        match poll(&mut p, PollTimeout::from(ms)) {
            Ok(0) => Ok(false),
            // POLLERR/POLLHUP: DQBUF says why (ENODEV when unplugged).
            Ok(_) => Ok(true),
            Err(nix::errno::Errno::EINTR) => Ok(false),
            Err(e) => Err(anyhow!("v4l2: poll on {}: {e}", self.node.label())),
        }
    }

    /// Takes one filled buffer back (VIDIOC_DQBUF, non-blocking) with the loan it was
    /// queued with: `Ok(None)` if none is ready; [`CamError::Unplugged`] on ENODEV.
    pub(super) fn dequeue(&mut self) -> Result<Option<(DeviceLoan, Dequeued)>, CamError> {
        let mut b = sys::Buffer::new(self.buf_type, self.memory, 0);
        let mut planes = vec![sys::Plane::default(); self.granted.planes.len()];
        match sys::dqbuf(self.fd(), &mut b, &mut planes) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) if is_enodev(&e) => return Err(CamError::Unplugged),
            Err(e) => return Err(anyhow!("v4l2: VIDIOC_DQBUF on {}: {e}", self.node.label()).into()),
        }
        let Some(loan) = self.at_driver.get_mut(b.index as usize).and_then(Option::take) else {
            return Err(anyhow!(
                "v4l2: {} returned buffer {} of {}, which it did not hold",
                self.node.label(),
                b.index,
                self.count
            )
            .into());
        };
        self.stats.dequeued += 1;
        let mut bytesused = [0u32; MAX_PLANES];
        if self.mplane() {
            for (u, p) in bytesused.iter_mut().zip(&planes) {
                *u = p.bytesused;
            }
        } else {
            bytesused[0] = b.bytesused;
        }
        Ok(Some((
            loan,
            Dequeued {
                index: b.index,
                sequence: b.sequence,
                timestamp_ns: b.timestamp_ns().max(0) as u64,
                monotonic: b.timestamp_is_monotonic(),
                bytesused,
                error: b.is_error(),
            },
        )))
    }
}

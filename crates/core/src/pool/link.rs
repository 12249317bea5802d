//! How a producer's frames leave it: [`Link`], a ring of descriptors, a copy-mode socket or
//! nobody (the consumer away), and the offer that sets one up.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{Context, Result};
use bytemuck::Pod;

use crate::channel::{Doorbell, Sender, Sent};
use crate::copy::CopySender;
use crate::dmabuf::DmaBuf;
use crate::frame::FrameDesc;
use crate::link::{Conn, ControlMsg, Offer, Payload};

use super::*;

/// How a producer's frames travel: descriptors in a ring, or bytes over a socket; or
/// nowhere, while the consumer is away (a stage that keeps serving after its hang-up).
pub(super) enum Link {
    Ring(Sender<FrameDesc>),
    Copy { data: CopySender, conn: Conn },
    Away,
}

impl Link {
    pub(super) fn pop_return(&mut self) -> crate::Result<Option<u64>> {
        match self {
            Link::Ring(s) => s.pop_return(),
            Link::Copy { .. } | Link::Away => Ok(None),
        }
    }
    pub(super) fn take_oldest(&mut self) -> crate::Result<Option<FrameDesc>> {
        match self {
            Link::Ring(s) => s.take_oldest(),
            Link::Copy { .. } | Link::Away => Ok(None),
        }
    }
    pub(super) fn wait_for_returns(&mut self, timeout: Duration) -> crate::Result<()> {
        match self {
            Link::Ring(s) => s.wait_for_returns(timeout),
            Link::Copy { conn, .. } => {
                std::thread::sleep(timeout.min(Duration::from_millis(20)));
                if conn.peer_gone() {
                    return Err(crate::Error::downstream_gone(conn.peer_pid));
                }
                Ok(())
            }
            Link::Away => {
                std::thread::sleep(timeout.min(Duration::from_millis(20)));
                Ok(())
            }
        }
    }
    pub(super) fn pace(&mut self, timeout: Duration) -> crate::Result<()> {
        match self {
            Link::Ring(s) => s.pace(timeout),
            Link::Copy { conn, .. } => {
                std::thread::sleep(timeout);
                if conn.peer_gone() {
                    return Err(crate::Error::downstream_gone(conn.peer_pid));
                }
                Ok(())
            }
            Link::Away => {
                std::thread::sleep(timeout);
                Ok(())
            }
        }
    }
    pub(super) fn send(&mut self, desc: FrameDesc, stop: &AtomicBool) -> crate::Result<Sent<FrameDesc>> {
        match self {
            Link::Ring(s) => s.send(desc, stop),
            Link::Copy { .. } => Err(crate::Error::other("copy-mode frames are sent by PoolProducer::publish")),
            Link::Away => Err(crate::Error::other("no consumer: frames are dropped by PoolProducer::publish")),
        }
    }
    pub(super) fn counters(&self) -> RingCounters {
        match self {
            Link::Ring(s) => s.counters(),
            // A stream socket is lossless: what was sent is consumed (or still in the socket).
            Link::Copy { data, .. } => {
                RingCounters { produced: data.counters.frames, consumed: data.counters.frames, ..Default::default() }
            }
            Link::Away => RingCounters::default(),
        }
    }
    pub(super) fn waits(&self) -> u64 {
        match self {
            Link::Ring(s) => s.waits(),
            Link::Copy { .. } | Link::Away => 0,
        }
    }
    pub(super) fn conn(&self) -> Option<&Conn> {
        match self {
            Link::Ring(s) => Some(s.conn()),
            Link::Copy { conn, .. } => Some(conn),
            Link::Away => None,
        }
    }
    pub(super) fn finish(&mut self) {
        match self {
            Link::Ring(s) => s.finish(),
            Link::Copy { data, .. } => data.finish(),
            Link::Away => {}
        }
    }
    /// Makes the link of a hop on `conn` and sends the offer: a fresh ring and doorbells
    /// with every buffer's fds, or in copy mode a data socket.
    pub(super) fn offer(conn: Conn, bufs: &[Vec<DmaBuf>], spec: &HopSpec) -> Result<Link> {
        let n = bufs.len();
        let max_frame_bytes = bufs.iter().map(|b| b.iter().map(|d| d.size()).sum::<u64>()).max().unwrap_or(0);
        if spec.copy_mode {
            let (ours, theirs) =
                std::os::unix::net::UnixStream::pair().context("socketpair for the copy-mode data socket")?;
            let offer = Offer {
                payload: Payload::Frames,
                ring: crate::ring::RingGeometry { capacity: 1, slot_bytes: 8, ret_capacity: 1 },
                policy: spec.policy,
                buffers: vec![],
                memory: spec.memory.clone(),
                layout: spec.layout,
                fps: spec.fps,
                description: spec.description.clone(),
                labels: vec![],
                copy_mode: true,
                max_frame_bytes,
            };
            conn.send(&ControlMsg::Offer(offer), &[theirs.as_fd()])
                .context("sending the data socket to the consumer")?;
            drop(theirs);
            log::info!("copy mode: frames go to pid {} as bytes over a Unix stream socket", conn.peer_pid);
            return Ok(Link::Copy { data: CopySender::new(ours), conn });
        }
        let ring = RingProducer::<FrameDesc>::create(spec.capacity.max(1), n.next_power_of_two().max(2) as u32)?;
        let (bell, back) = (Doorbell::new()?, Doorbell::new()?);
        let offer = Offer {
            payload: Payload::Frames,
            ring: ring.geometry(),
            policy: spec.policy,
            buffers: bufs.iter().map(|b| b.iter().map(|d| d.size()).collect()).collect(),
            memory: spec.memory.clone(),
            layout: spec.layout,
            fps: spec.fps,
            description: spec.description.clone(),
            labels: vec![],
            copy_mode: false,
            max_frame_bytes,
        };
        let mut fds = ring_fds(&ring, &bell, &back);
        fds.extend(bufs.iter().flatten().map(|d| d.fd()));
        conn.send(&ControlMsg::Offer(offer), &fds).context("sending the pool to the consumer")?;
        log::debug!("offered {n} buffers ({} fds) to pid {}", fds.len(), conn.peer_pid);
        Ok(Link::Ring(Sender::new(ring, bell, back, conn, spec.policy)?))
    }
}

pub(super) fn ring_fds<'a, T: Pod>(
    ring: &'a RingProducer<T>,
    bell: &'a Doorbell,
    back: &'a Doorbell,
) -> Vec<BorrowedFd<'a>> {
    vec![ring.fd().as_fd(), bell.as_fd(), back.as_fd()]
}

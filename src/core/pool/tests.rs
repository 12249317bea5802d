//! The pool's ownership state machine, driven by a consumer in the same process: every
//! return a broken or hostile consumer can make is refused and counted, and no buffer is
//! ever lent twice.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};

use super::*;
use crate::core::channel::{Receiver, Recv};
use crate::core::dmabuf::{Allocator, HeapChoice};
use crate::core::frame::FrameLayout;
use crate::core::link::WaitMode;

static NEVER: AtomicBool = AtomicBool::new(false);

/// A producer of `n` memfd buffers and the raw receiver of its ring (so the test can return
/// whatever tokens it likes).
fn hop(n: usize, policy: RingPolicy) -> (PoolProducer, Receiver<FrameDesc>) {
    let (a, b) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC).unwrap();
    let alloc = Allocator::open(HeapChoice::Memfd, Path::new("/nonexistent"), Path::new("/nonexistent")).unwrap();
    let bufs = alloc.allocate_pool(n, 4096).unwrap().into_iter().map(|b| vec![b]).collect();
    let spec = HopSpec { policy, capacity: n as u32, memory: alloc.describe(), layout: None, fps: 0.0, description: "test".into(), copy_mode: false };
    let prod = PoolProducer::offer(Conn::from_fd(a).unwrap(), bufs, spec).unwrap();
    let hello = ControlMsg::Hello { stage: "test".into(), accept: vec![], want: None, wait: WaitMode::Eventfd };
    let (_, rx, _) = join::<FrameDesc>(Conn::from_fd(b).unwrap(), &hello, WaitMode::Eventfd, "test producer").unwrap();
    // The producer takes the hello as a stage's accept would (anything unread on its control
    // socket means the consumer is gone).
    prod.conn().recv().unwrap();
    (prod, rx)
}

fn desc(seq: u64) -> FrameDesc {
    FrameDesc { seq, layout: FrameLayout::default(), ..Default::default() }
}

fn publish(prod: &mut PoolProducer, seq: u64) -> u32 {
    let loan = prod.acquire(&NEVER).unwrap().expect("a free buffer");
    let i = loan.index();
    loan.publish(desc(seq), &NEVER).unwrap();
    i
}

fn take(rx: &mut Receiver<FrameDesc>) -> FrameDesc {
    match rx.recv(&|_| Ok(()), &mut |_, _| {}, Duration::from_secs(1)).unwrap() {
        Recv::Item(d) => d,
        other => panic!("expected a frame, got {other:?}"),
    }
}

#[test]
fn bad_returns_are_refused_and_counted_and_no_buffer_is_lent_twice() {
    let (mut prod, mut rx) = hop(2, RingPolicy::Block);
    assert_eq!((publish(&mut prod, 0), publish(&mut prod, 1)), (0, 1));
    let (d0, d1) = (take(&mut rx), take(&mut rx));
    assert_eq!((d0.buffer_index, d1.buffer_index), (0, 1));
    // (The return queue holds as many tokens as the pool has buffers: two at a time here.)
    rx.push_return(token(&d0)).unwrap();
    rx.push_return(token(&d0)).unwrap(); // the same buffer twice
    // Buffer 0 is back, buffer 1 is still the consumer's: only 0 may be lent.
    assert_eq!(publish(&mut prod, 2), 0);
    let s = prod.stats();
    assert_eq!((s.returned, s.bad_returns, s.outstanding), (1, 1, 2));
    rx.push_return((7 << 32) | 1).unwrap(); // buffer 1 under a sequence number it was never sent with
    rx.push_return(5).unwrap(); // an index out of range
    let stop = AtomicBool::new(true);
    assert!(prod.acquire(&stop).unwrap().is_none(), "every buffer is out: nothing to lend");
    assert_eq!(prod.stats().bad_returns, 3);
    // The consumer gives buffer 1 back properly: now it can be lent.
    rx.push_return(token(&d1)).unwrap();
    assert_eq!(prod.acquire(&NEVER).unwrap().unwrap().index(), 1);
    let s = prod.stats();
    assert_eq!((s.returned, s.bad_returns), (2, 3));
}

#[test]
fn an_unpublished_loan_gives_its_buffer_back() {
    let (mut prod, _rx) = hop(2, RingPolicy::DropOldest);
    let first = prod.acquire(&NEVER).unwrap().unwrap().index();
    assert_eq!(prod.stats().outstanding, 0, "the dropped loan's buffer is free again");
    let again: Vec<u32> = (0..2).map(|k| publish(&mut prod, k)).collect();
    assert!(again.contains(&first));
    assert_eq!(prod.stats().outstanding, 2);
}

#[test]
fn drop_oldest_reclaims_a_queued_buffer_never_one_the_consumer_holds() {
    let (mut prod, mut rx) = hop(2, RingPolicy::DropOldest);
    publish(&mut prod, 0);
    let held = take(&mut rx); // the consumer holds buffer 0
    publish(&mut prod, 1); // buffer 1 queued
    // No buffer is free: the oldest queued frame (seq 1, buffer 1) is taken back, never 0.
    assert_eq!(publish(&mut prod, 2), 1);
    assert_eq!(prod.stats().reclaimed, 1);
    assert_eq!(prod.counters().dropped, 1);
    assert_eq!(take(&mut rx).seq, 2);
    rx.push_return(token(&held)).unwrap();
    assert_eq!(prod.acquire(&NEVER).unwrap().unwrap().index(), 0);
}

#[test]
fn device_loans_come_back_as_write_loans_or_at_streamoff() {
    let (mut prod, mut rx) = hop(3, RingPolicy::DropOldest);
    let mut lent = prod.lend_free_to_device(2).unwrap();
    assert_eq!(lent.iter().map(DeviceLoan::index).collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!(prod.stats().outstanding, 0, "buffers at the device are not out downstream");
    assert!(prod.lend_free_to_device(2).unwrap().is_empty(), "nothing is free: every buffer is at the device");
    // The device fills buffer 1 (DQBUF): it becomes a write loan and is published.
    let filled = lent.remove(1);
    prod.claim(filled).unwrap().publish(desc(0), &NEVER).unwrap();
    assert_eq!(take(&mut rx).buffer_index, 1);
    // Another pool's loan of buffer 0 is refused, though this pool's buffer 0 is at a device
    // too: neither its buffers nor a write loan come from it.
    let (mut other, _orx) = hop(3, RingPolicy::DropOldest);
    let foreign = other.lend_free_to_device(1).unwrap().remove(0);
    assert_eq!(foreign.index(), lent[0].index());
    assert!(prod.device_buffers(&foreign).err().unwrap().to_string().contains("another pool"));
    let e = prod.claim(foreign).err().unwrap().to_string();
    assert!(e.contains("another pool"), "{e}");
    assert_eq!(prod.device_buffers(&lent[0]).unwrap().len(), 1);
    // STREAMOFF: the device gives the rest back.
    prod.device_returned(lent);
    // Buffers 0 and 2 are free again and buffer 1 is with the consumer: only 0 and 2 are lent.
    let mut again: Vec<u32> = prod.lend_free_to_device(0).unwrap().iter().map(DeviceLoan::index).collect();
    again.sort();
    assert_eq!(again, [0, 2]);
}

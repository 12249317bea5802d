//! The pool's ownership state machine, driven by a consumer in the same process: every
//! return a broken or hostile consumer can make is refused and counted, and no buffer is
//! ever lent twice.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};

use super::taps::{MAX_TAPS, TAP_MAX_HELD};
use super::*;
use crate::channel::{Receiver, Recv};
use crate::dmabuf::{Allocator, HeapChoice};
use crate::frame::FrameLayout;
use crate::frame::{RestartMark, Stage};
use crate::link::WaitMode;
use crate::link::{Conn, ControlMsg};
use crate::ring::RingPolicy;

static NEVER: AtomicBool = AtomicBool::new(false);

/// A producer of `n` memfd buffers and the raw receiver of its ring (so the test can return
/// whatever tokens it likes).
fn hop(n: usize, policy: RingPolicy) -> (PoolProducer, Receiver<FrameDesc>) {
    let (a, b) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC).unwrap();
    let alloc = Allocator::open(
        HeapChoice::Memfd,
        Path::new("/nonexistent"),
        Path::new("/nonexistent"),
        Path::new("/nonexistent"),
    )
    .unwrap();
    let bufs = alloc.allocate_pool(n, 4096).unwrap().into_iter().map(|b| vec![b]).collect();
    let spec = HopSpec {
        policy,
        capacity: n as u32,
        memory: alloc.describe(),
        layout: None,
        fps: 0.0,
        description: "test".into(),
        copy_mode: false,
    };
    let prod = PoolProducer::offer(Conn::from_fd(a).unwrap(), bufs, spec).unwrap();
    let hello = ControlMsg::Hello { stage: "test".into(), accept: vec![], want: None, wait: WaitMode::Eventfd };
    let (_, rx, _) = join::<FrameDesc>(Conn::from_fd(b).unwrap(), &hello, WaitMode::Eventfd, "test producer").unwrap();
    // The producer takes the hello as a stage's accept would (anything unread on its control
    // socket means the consumer is gone).
    prod.sender.conn().unwrap().recv().unwrap();
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

/// The consumer sleeps in one epoll_wait on its doorbell (edge-triggered, never read): a
/// ring made while it slept wakes it, and rings that pile up while it was busy wake it at
/// most once, spuriously, never forever (the counter is not drained, so a level-triggered
/// wait would return at once every time).
#[test]
fn a_sleeping_consumer_wakes_on_a_ring_and_rings_never_pile_up_into_busy_wakes() {
    let (mut prod, mut rx) = hop(4, RingPolicy::DropOldest);
    let consumer = std::thread::spawn(move || {
        let d = take(&mut rx); // sleeps: nothing is queued yet
        (d.seq, rx)
    });
    // Publish only once the consumer says it sleeps, so the ring really wakes it.
    let t = std::time::Instant::now();
    while !prod_sees_consumer_sleeping(&prod) {
        assert!(t.elapsed() < Duration::from_secs(10), "the consumer never went to sleep");
        std::thread::yield_now();
    }
    publish(&mut prod, 7);
    let (seq, mut rx) = consumer.join().unwrap();
    assert_eq!(seq, 7);
    // Rings that nobody waited for (as when a producer rings just before the consumer wakes).
    for _ in 0..5 {
        match &prod.sender {
            Link::Ring(s) => s.ring_for_tests(),
            Link::Copy { .. } | Link::Away => unreachable!(),
        }
    }
    // Idle with nothing queued: each receive waits its whole timeout (Idle), however many
    // rings came before, instead of returning at once.
    for _ in 0..3 {
        let t = std::time::Instant::now();
        assert!(matches!(rx.recv(&|_| Ok(()), &mut |_, _| {}, Duration::from_millis(30)).unwrap(), Recv::Idle));
        assert!(t.elapsed() >= Duration::from_millis(25), "an idle receive returned after {:?}", t.elapsed());
    }
}

fn prod_sees_consumer_sleeping(prod: &PoolProducer) -> bool {
    match &prod.sender {
        Link::Ring(s) => s.consumer_sleeping_for_tests(),
        Link::Copy { .. } | Link::Away => false,
    }
}

/// A sleeping consumer learns of the producer's death from the same epoll_wait (the
/// control socket's hang-up), not from a timeout: it gets `Hangup` long before its timeout.
#[test]
fn a_sleeping_consumer_sees_the_producer_die() {
    let (prod, mut rx) = hop(2, RingPolicy::DropOldest);
    let consumer = std::thread::spawn(move || {
        let t = std::time::Instant::now();
        let r = rx.recv(&|_| Ok(()), &mut |_, _| {}, Duration::from_secs(30)).unwrap();
        (matches!(r, Recv::Hangup), t.elapsed())
    });
    std::thread::sleep(Duration::from_millis(50));
    drop(prod); // closes the control socket, as a dead process would
    let (hung_up, took) = consumer.join().unwrap();
    assert!(hung_up);
    assert!(took < Duration::from_secs(30), "the hang-up was seen only at the timeout");
}

/// A producer does not poll its consumer on every send, but a dead consumer is still
/// noticed: under drop-oldest its ring fills, and the first send into a full ring polls.
/// Nothing is queued to the dead consumer after that, and every buffer is accounted for.
#[test]
fn a_producer_notices_a_dead_consumer_once_its_ring_is_full() {
    let (mut prod, rx) = hop(3, RingPolicy::DropOldest);
    drop(rx);
    let mut sent = 0u64;
    let err = loop {
        let loan = match prod.acquire(&NEVER) {
            Ok(l) => l.expect("a buffer"),
            Err(e) => break e,
        };
        match loan.publish(desc(sent), &NEVER) {
            Ok(()) => sent += 1,
            Err(e) => break e,
        }
        assert!(sent < 10_000_000, "a dead consumer was never noticed");
    };
    assert!(matches!(err, crate::Error::PeerGone { .. }), "{err:#}");
    // The ring (capacity 3) holds what was queued; nothing is lost from the counts.
    let k = prod.counters();
    assert_eq!(k.produced, sent);
    assert_eq!(k.produced, k.consumed + k.dropped + k.rejected + k.in_flight);
    assert_eq!(k.consumed, 0);
}

/// A doorbell from a peer must be an eventfd: a pipe (which could block a ring, or never
/// wake anyone) is refused with the reason.
#[test]
fn a_doorbell_that_is_not_an_eventfd_is_refused() {
    let (r, _w) = nix::unistd::pipe().unwrap();
    let e = crate::channel::Doorbell::from_peer(r).unwrap_err().to_string();
    assert!(e.contains("not an eventfd") && e.contains("pipe:"), "{e}");
    let ok = crate::channel::Doorbell::new().unwrap();
    let fd = std::os::fd::AsFd::as_fd(&ok).try_clone_to_owned().unwrap();
    crate::channel::Doorbell::from_peer(fd).unwrap();
}

/// After its consumer died, a producer ending on an error (not a clean end of stream) still
/// gets every buffer back: what was queued and what the dead consumer held.
#[test]
fn a_dead_consumers_buffers_are_home_after_an_unclean_end() {
    let (mut prod, mut rx) = hop(3, RingPolicy::DropOldest);
    publish(&mut prod, 0);
    publish(&mut prod, 1);
    let _held = take(&mut rx); // the consumer holds one, one is queued
    assert_eq!(prod.stats().outstanding, 2);
    drop(rx); // the consumer dies (its control socket closes)
    let ((back, still), r) = prod.end(false, Duration::from_secs(1));
    r.unwrap();
    assert_eq!((back, still, prod.stats().outstanding), (2, 0, 0));
}

/// The adaptive spin stops after a receive that timed out: a stalled upstream costs no spin
/// per idle turn (measured as this thread's CPU time over an idle receive).
#[test]
fn the_spin_stops_once_nothing_comes() {
    use nix::sys::resource::{getrusage, UsageWho};
    let cpu = || {
        let u = getrusage(UsageWho::RUSAGE_THREAD).unwrap();
        let us = |t: nix::sys::time::TimeVal| t.tv_sec() as u64 * 1_000_000 + t.tv_usec() as u64;
        Duration::from_micros(us(u.user_time()) + us(u.system_time()))
    };
    let (mut prod, mut rx) = hop(2, RingPolicy::DropOldest);
    rx.set_spin(Duration::from_millis(40));
    publish(&mut prod, 0);
    let d = take(&mut rx); // found at once: the spin is on
    rx.push_return(token(&d)).unwrap();
    let idle = |rx: &mut Receiver<FrameDesc>| {
        let before = cpu();
        assert!(matches!(rx.recv(&|_| Ok(()), &mut |_, _| {}, Duration::from_millis(60)).unwrap(), Recv::Idle));
        cpu() - before
    };
    let first = idle(&mut rx); // spins its 40 ms, then sleeps
    let second = idle(&mut rx); // nothing came last time: sleeps at once
                                // (Not asserted: how much CPU a 40 ms spin gets depends on what else runs.)
    eprintln!("EVIDENCE spin: an idle receive after a fast item used {first:?} of CPU (spinning), the next {second:?}");
    assert!(second < Duration::from_millis(10), "a stalled upstream still costs a spin: {second:?} of CPU");
}

/// A producer that keeps serving: its consumer's death frees every buffer it held or had
/// queued, frames published meanwhile are dropped and counted, and a new consumer gets the
/// same pool on a fresh ring, its first frame carrying the restart notice with the loss.
#[test]
fn a_producer_that_keeps_serving_frees_a_dead_consumers_buffers_and_serves_the_next_one() {
    let (mut prod, mut rx) = hop(4, RingPolicy::DropOldest);
    prod.keep_serving();
    publish(&mut prod, 0);
    publish(&mut prod, 1);
    let held = take(&mut rx); // the consumer holds one, one stays queued
    assert_eq!(held.seq, 0);
    drop(rx); // it dies
    assert_eq!(prod.live_consumer(), None, "the hang-up is seen");
    assert!(prod.is_away());
    assert_eq!(prod.stats().outstanding, 0, "both buffers are home");
    for seq in 2..5 {
        publish(&mut prod, seq); // nobody to take them: dropped, counted
    }
    let s = prod.stats();
    assert_eq!((s.consumers_lost, s.dropped_away, s.outstanding), (1, 3, 0));
    assert_eq!(prod.counters().produced, 5);
    assert_eq!(prod.counters().dropped, 3);
    // A new consumer joins: the same four buffers, a fresh ring.
    let (a, b) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC).unwrap();
    let hello = ControlMsg::Hello { stage: "scale".into(), accept: vec![], want: None, wait: WaitMode::Eventfd };
    let consumer = std::thread::spawn(move || {
        join::<FrameDesc>(Conn::from_fd(b).unwrap(), &hello, WaitMode::Eventfd, "capture").unwrap()
    });
    let conn = Conn::from_fd(a).unwrap();
    conn.recv().unwrap();
    prod.reoffer(conn, Stage::Scale).unwrap();
    let (offer, mut rx, bufs) = consumer.join().unwrap();
    assert_eq!((bufs.len(), offer.buffers.len()), (4, 4));
    assert!(!prod.is_away());
    publish(&mut prod, 5);
    publish(&mut prod, 6);
    let first = take(&mut rx);
    // Lost: the queued frame and the held one at the death (2), and the 3 dropped since.
    assert_eq!((first.seq, RestartMark::from_flags(first.flags)), (5, Some(RestartMark::restart(Stage::Scale, 5))));
    let second = take(&mut rx);
    assert_eq!((second.seq, second.flags), (6, 0), "only the first frame carries the notice");
    assert_eq!(prod.counters().produced, 7);
    assert!(
        prod.reoffer(
            Conn::from_fd(
                socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC).unwrap().0
            )
            .unwrap(),
            Stage::Scale
        )
        .is_err(),
        "a served hop takes no second consumer"
    );
}

/// A consumer that writes ring indices no consumer following the protocol can (`head` far
/// past `tail`) is hung up on by a producer that keeps serving: its buffers come back, the
/// hop waits for the next consumer, and nothing is an error of the producer. Without
/// `keep_serving` it stays an error.
#[test]
fn a_consumer_that_corrupts_the_ring_is_dropped_by_a_producer_that_keeps_serving() {
    let (mut prod, rx) = hop(4, RingPolicy::DropOldest);
    prod.keep_serving();
    publish(&mut prod, 0);
    rx.ring_for_tests().scribble_word(8, 7_777_777); // the ring's `head` (ring.rs W_HEAD)
    publish(&mut prod, 1);
    assert!(prod.is_away(), "the consumer was dropped");
    let s = prod.stats();
    assert_eq!((s.consumers_dropped, s.consumers_lost, s.outstanding), (1, 1, 0));
    assert!(rx.conn().peer_gone(), "its connection was closed");
    publish(&mut prod, 2);
    assert_eq!((prod.stats().dropped_away, prod.counters().produced), (2, 3));

    let (mut prod, rx) = hop(4, RingPolicy::DropOldest);
    publish(&mut prod, 0);
    rx.ring_for_tests().scribble_word(8, 7_777_777);
    let loan = prod.acquire(&NEVER).unwrap().expect("a free buffer");
    let e = loan.publish(desc(1), &NEVER).unwrap_err();
    assert!(matches!(e, crate::Error::RingCorrupt { .. }), "{e:#}");
}

/// A consumer of several hops sleeps on all of them at once: `wait_any` returns as soon as
/// any one of them has a frame (not after its timeout), at once when one already has one,
/// and a zero-timeout receive on a hop whose producer is gone sees the hang-up.
#[test]
fn wait_any_wakes_for_whichever_hop_has_a_frame() {
    use crate::channel::{wait_any, Waitable};
    let (mut p1, mut r1) = hop(2, RingPolicy::DropOldest);
    let (mut p2, r2) = hop(2, RingPolicy::DropOldest);
    // Nothing anywhere: the whole timeout passes.
    let t = std::time::Instant::now();
    wait_any(&[&r1 as &dyn Waitable, &r2], Duration::from_millis(50)).unwrap();
    assert!(t.elapsed() >= Duration::from_millis(45), "{:?}", t.elapsed());
    // A frame already there: no sleep at all.
    publish(&mut p1, 0);
    let t = std::time::Instant::now();
    wait_any(&[&r1 as &dyn Waitable, &r2], Duration::from_secs(10)).unwrap();
    assert!(t.elapsed() < Duration::from_secs(5));
    assert_eq!(take(&mut r1).seq, 0);
    // A frame on the second hop while asleep: the doorbell of that hop wakes the wait.
    let producer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        publish(&mut p2, 7);
        p2
    });
    let t = std::time::Instant::now();
    wait_any(&[&r1 as &dyn Waitable, &r2], Duration::from_secs(20)).unwrap();
    assert!(t.elapsed() < Duration::from_secs(10), "woken by the doorbell, not the timeout: {:?}", t.elapsed());
    let p2 = producer.join().unwrap();
    // A wake-up seen once does not wake the next wait again.
    let mut r2 = r2;
    assert_eq!(take(&mut r2).seq, 7);
    let t = std::time::Instant::now();
    wait_any(&[&r1 as &dyn Waitable, &r2], Duration::from_millis(50)).unwrap();
    assert!(t.elapsed() >= Duration::from_millis(45), "an old edge woke the wait: {:?}", t.elapsed());
    // The producer dies: a look without a wait says so.
    drop(p2);
    drop(p1);
    let r = r2.recv(&|_| Ok(()), &mut |_, _| {}, Duration::ZERO).unwrap();
    assert!(matches!(r, Recv::Hangup), "{r:?}");
}

/// A tap on `prod` (as [`crate::stage::serve_pool`] makes one): the raw receiver of its ring.
fn tap(prod: &mut PoolProducer, name: &str) -> Receiver<FrameDesc> {
    tap_holding(prod, name, None)
}

/// [`tap`] with a hello that asks to hold `hold` frames ([`crate::link::tap_hello_holding`]).
fn tap_holding(prod: &mut PoolProducer, name: &str, hold: Option<usize>) -> Receiver<FrameDesc> {
    let (a, b) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC).unwrap();
    let theirs = Conn::from_fd(b).unwrap();
    let hello = crate::link::tap_hello_holding(name, hold.unwrap_or(1));
    assert_eq!(hello.tap().map(|t| t.name.as_str()), Some(name));
    let joining =
        std::thread::spawn(move || join::<FrameDesc>(theirs, &hello, WaitMode::Eventfd, "test producer").unwrap());
    // The producer reads the hello (as the stage's listener does), then offers.
    let ours = Conn::from_fd(a).unwrap();
    let (h, _) = ours.recv().unwrap();
    let t = h.tap().unwrap();
    prod.add_tap(ours, &t.name, t.hold()).unwrap();
    let (offer, rx, bufs) = joining.join().unwrap();
    assert_eq!((offer.ring.capacity, offer.policy, bufs.len()), (1, RingPolicy::DropOldest, prod.bufs.len()));
    rx
}

#[test]
fn a_tap_gets_the_frames_too_and_a_buffer_is_free_only_when_both_gave_it_back() {
    let (mut prod, mut rx) = hop(3, RingPolicy::DropOldest);
    let mut view = tap(&mut prod, "view");
    assert_eq!(prod.stats().taps, 1);
    let i = publish(&mut prod, 0);
    let (mine, theirs) = (take(&mut rx), take(&mut view));
    assert_eq!((mine.buffer_index, theirs.buffer_index, theirs.seq), (i, i, 0));
    // The consumer gives it back; the tap still holds it: not free.
    rx.push_return(token(&mine)).unwrap();
    let stop = AtomicBool::new(true);
    let lent: Vec<u32> = (0..2).map(|_| prod.acquire(&stop).unwrap().map(|l| l.index())).map(Option::unwrap).collect();
    assert!(!lent.contains(&i), "buffer {i} is lent while the tap holds it: {lent:?}");
    assert_eq!(prod.stats().outstanding, 1);
    // A token the tap never got is refused; its own frees the buffer.
    view.push_return((9 << 32) | i as u64).unwrap();
    view.push_return(token(&theirs)).unwrap();
    prod.reclaim_returns().unwrap();
    assert!(prod.free.contains(&i), "buffer {i} is free once both gave it back");
    let s = prod.stats();
    assert_eq!((s.outstanding, s.bad_returns, s.tap_frames, s.tap_dropped), (0, 1, 1, 0));
}

#[test]
fn a_tap_that_never_gives_a_frame_back_costs_one_buffer_and_only_its_own_frames() {
    let (mut prod, mut rx) = hop(3, RingPolicy::DropOldest);
    let mut view = tap(&mut prod, "view");
    publish(&mut prod, 0);
    let kept = take(&mut view); // the tap holds frame 0 for ever
    let mut seen = vec![];
    for seq in 0..20 {
        if seq > 0 {
            publish(&mut prod, seq);
        }
        let d = take(&mut rx);
        seen.push(d.seq);
        rx.push_return(token(&d)).unwrap();
    }
    assert_eq!(seen, (0..20).collect::<Vec<u64>>(), "the consumer got every frame");
    prod.reclaim_returns().unwrap();
    let s = prod.stats();
    assert_eq!(
        (s.tap_frames, s.tap_dropped, s.outstanding),
        (1, 19, 1),
        "the tap got one frame, missed 19, holds one buffer: {s:?}"
    );
    assert_ne!(prod.acquire(&NEVER).unwrap().unwrap().index(), kept.buffer_index);
}

#[test]
fn a_tap_that_does_not_read_has_its_queued_frame_replaced_by_the_newest() {
    let (mut prod, mut rx) = hop(3, RingPolicy::DropOldest);
    let mut view = tap(&mut prod, "view");
    for seq in 0..5 {
        publish(&mut prod, seq);
        let d = take(&mut rx);
        rx.push_return(token(&d)).unwrap();
    }
    // Each newer frame took the unread one's place: the tap reads the newest.
    assert_eq!(take(&mut view).seq, 4);
    let s = prod.stats();
    assert_eq!((s.tap_frames, s.tap_dropped), (5, 4));
}

#[test]
fn a_tap_that_hangs_up_releases_what_it_held_and_the_next_one_is_served() {
    let (mut prod, mut rx) = hop(2, RingPolicy::DropOldest);
    let mut view = tap(&mut prod, "view");
    publish(&mut prod, 0);
    let d = take(&mut rx);
    let held = take(&mut view);
    rx.push_return(token(&d)).unwrap();
    drop(view);
    prod.check_taps();
    prod.reclaim_returns().unwrap();
    let s = prod.stats();
    assert_eq!((s.taps, s.taps_lost, s.outstanding), (0, 1, 0), "{s:?}");
    assert!(prod.free.contains(&held.buffer_index));
    let mut again = tap(&mut prod, "view");
    publish(&mut prod, 1);
    assert_eq!(take(&mut again).seq, 1);
    assert_eq!(prod.stats().taps_joined, 2);
}

#[test]
fn taps_beyond_the_limit_are_refused() {
    let (mut prod, _rx) = hop(2, RingPolicy::DropOldest);
    let _taps: Vec<_> = (0..MAX_TAPS).map(|k| tap(&mut prod, &format!("t{k}"))).collect();
    let (a, _b) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC).unwrap();
    let e = prod.add_tap(Conn::from_fd(a).unwrap(), "one-too-many", 1).unwrap_err().to_string();
    assert!(e.contains(&format!("already serves {MAX_TAPS} taps")), "{e}");
}

#[test]
fn a_tap_that_asks_to_hold_two_gets_a_new_frame_while_it_shows_the_last_and_never_more_than_two() {
    let (mut prod, mut rx) = hop(5, RingPolicy::DropOldest);
    let mut display = tap_holding(&mut prod, "display", Some(2));
    let pass = |prod: &mut PoolProducer, rx: &mut Receiver<FrameDesc>, seq: u64| {
        publish(prod, seq);
        let d = take(rx);
        rx.push_return(token(&d)).unwrap();
    };
    pass(&mut prod, &mut rx, 0);
    let on_screen = take(&mut display);
    // Holding one (on screen), it is still given the next.
    pass(&mut prod, &mut rx, 1);
    let queued = take(&mut display);
    assert_eq!((on_screen.seq, queued.seq), (0, 1));
    // Holding two, it misses frames, and holds no third buffer.
    pass(&mut prod, &mut rx, 2);
    pass(&mut prod, &mut rx, 3);
    prod.reclaim_returns().unwrap();
    let s = prod.stats();
    assert_eq!((s.tap_frames, s.tap_dropped, s.outstanding), (2, 2, 2), "{s:?}");
    // The flip completed: the old frame goes back, and the newest comes next.
    display.push_return(token(&on_screen)).unwrap();
    prod.reclaim_returns().unwrap();
    pass(&mut prod, &mut rx, 4);
    assert_eq!(take(&mut display).seq, 4);
    // A hello asking for more than TAP_MAX_HELD is capped; one that says nothing holds one.
    let hello = crate::link::tap_hello_holding("greedy", 9);
    assert_eq!(hello.tap().map(|t| (t.name.as_str(), t.hold())), Some(("greedy", 9)));
    let mut greedy = tap_holding(&mut prod, "greedy", Some(9));
    for seq in 5..9 {
        pass(&mut prod, &mut rx, seq);
        if seq < 7 {
            take(&mut greedy); // kept: never given back
        }
    }
    prod.reclaim_returns().unwrap();
    assert_eq!(prod.taps[1].holding(), TAP_MAX_HELD);
    let view = crate::link::tap_hello_holding("view", 1);
    assert_eq!(view.tap().map(|t| (t.name.as_str(), t.hold())), Some(("view", 1)));
    assert_eq!(
        crate::link::ControlMsg::decode(br#"{"type":"tap_hello","name":"d","hold":0}"#)
            .unwrap()
            .tap()
            .map(|t| t.hold()),
        Some(1),
        "a hold of 0 reads as 1"
    );
}

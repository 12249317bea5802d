//! Control messages: one datagram a neighbouring stage sent on its control socket, as
//! `Conn::recv` decodes it ([`ControlMsg::decode`]), then what the receiver checks before
//! using it: an offer against the fds that came with it ([`Offer::check`], as the
//! consumer's `attach` does), a hello's wanted input as the layout the scale stage would
//! allocate ([`WantedInput::layout`]).
//!
//! Input: the first byte is the number of fds received with the datagram, the rest is the
//! datagram. Invariants: decoding never panics; a decoded message encodes, and that decodes
//! and encodes to the same bytes; `Offer::check` accepts exactly the offers whose fd count
//! and ring geometry are right (stated here independently); `WantedInput::layout` accepts
//! exactly the requests in range, and what it returns is a layout of that size and format,
//! within 1 GiB, that validates against a buffer of its own size.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcpipe_core::frame::Fourcc;
use zcpipe_core::link::{ControlMsg, Offer, WantedInput};

fuzz_target!(|data: &[u8]| {
    let Some((&n_fds, bytes)) = data.split_first() else { return };
    let Ok(msg) = ControlMsg::decode(bytes) else { return };
    let once = msg.encode().expect("a decoded message encodes");
    let back =
        ControlMsg::decode(&once).unwrap_or_else(|e| panic!("{} does not decode: {e}", String::from_utf8_lossy(&once)));
    assert_eq!(
        String::from_utf8_lossy(&back.encode().unwrap()),
        String::from_utf8_lossy(&once),
        "decode(encode(m)) re-encodes differently"
    );
    match &msg {
        ControlMsg::Offer(o) => offer(o, n_fds as usize),
        ControlMsg::Hello { want: Some(w), .. } => wanted(w),
        _ => {}
    }
});

fn offer(o: &Offer, n_fds: usize) {
    let need: u128 = 3 + o.buffers.iter().map(|b| b.len() as u128).sum::<u128>();
    let g = o.ring;
    let geometry_ok = (1..=4096).contains(&g.capacity)
        && (1..=4096).contains(&g.ret_capacity)
        && g.slot_bytes.is_multiple_of(8)
        && (8..=1 << 20).contains(&g.slot_bytes);
    let ok = o.check(n_fds).is_ok();
    assert_eq!(ok, n_fds as u128 == need && geometry_ok, "Offer::check({n_fds}) on {o:?}");
    if ok {
        // The shared memory it maps: header, slots, return queue; never more than ~4 GiB.
        let slots = g.capacity as u64 * g.slot_bytes as u64 + g.ret_capacity as u64 * 8;
        assert!(g.shm_bytes() > slots && g.shm_bytes() <= slots + 4096, "shm_bytes {} for {g:?}", g.shm_bytes());
    }
}

fn wanted(w: &WantedInput) {
    let fourcc = Fourcc(w.fourcc);
    let align = (w.stride_align.max(1) as u64).next_power_of_two();
    let bpl = if w.bytesperline != 0 { w.bytesperline as u64 } else { (w.width as u64 * 3).div_ceil(align) * align };
    let in_range = (fourcc == Fourcc::RGB24 || fourcc == Fourcc::BGR24)
        && (1..=16384).contains(&w.width)
        && (1..=16384).contains(&w.height)
        && w.stride_align <= 4096
        && bpl >= w.width as u64 * 3
        && bpl * w.height as u64 <= 1 << 30;
    match w.layout() {
        Ok(l) => {
            assert!(in_range, "accepted {w:?}");
            assert_eq!((l.fourcc, l.width, l.height, l.num_planes), (fourcc, w.width, w.height, 1), "{w:?}");
            let p = l.planes[0];
            assert_eq!(
                (p.offset, p.bytesperline as u64, p.length as u64, p.fd_index),
                (0, bpl, bpl * w.height as u64, 0),
                "{w:?}"
            );
            assert!(l.bytes_needed() <= 1 << 30);
            l.validate(&[l.bytes_needed()])
                .unwrap_or_else(|e| panic!("{w:?} gives a layout that does not fit its own buffer: {e}"));
        }
        Err(e) => assert!(!in_range, "refused {w:?}: {e}"),
    }
}

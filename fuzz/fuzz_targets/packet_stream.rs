//! A camera's encoded stream as the recorder reads it: the packet messages a capture stage
//! sends on `record.sock` ([`zcpipe_core::packets::Message::read`], untrusted: another
//! process, however checked its uid) and the MPEG-TS they carry
//! ([`zcpipe_core::ts::TsSplitter`], bytes ffmpeg wrote from a camera's stream).
//!
//! Input: any bytes, read as messages until one fails, and pushed through the TS splitter
//! in chunks whose sizes the input's first byte chooses. Invariants: nothing panics; a
//! message read is at most its bound (a header never makes the reader allocate more); every
//! access unit given is whole TS packets, each starting with the sync byte, within
//! `MAX_ACCESS_UNIT`; a message re-encoded reads back equal.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcpipe_core::packets::{Message, MAX_BODY};
use zcpipe_core::ts::{TsSplitter, MAX_ACCESS_UNIT, TS_PACKET};

fuzz_target!(|data: &[u8]| {
    let mut r = data;
    while let Ok(m) = Message::read(&mut r) {
        let body = match &m {
            Message::Hello(_) => 0,
            Message::Tables(t) => t.len(),
            Message::Unit(u) => u.bytes.len(),
        };
        assert!(body <= MAX_BODY);
        let again = Message::read(&mut &m.encode()[..]).expect("a message re-encoded reads back");
        assert_eq!(again, m);
    }
    let chunk = 1 + data.first().copied().unwrap_or(0) as usize * 3;
    let mut ts = TsSplitter::new();
    let mut out = vec![];
    for c in data.chunks(chunk) {
        ts.push(c, &mut out);
    }
    out.extend(ts.finish());
    for au in &out {
        assert!(au.bytes.len().is_multiple_of(TS_PACKET) && au.bytes.len() <= MAX_ACCESS_UNIT);
        assert!(au.bytes.chunks(TS_PACKET).all(|p| p[0] == 0x47));
    }
    if let Some(t) = ts.tables() {
        assert_eq!(t.len(), 2 * TS_PACKET);
    }
});

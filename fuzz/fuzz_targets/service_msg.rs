//! The inference service's messages: one packet a client sent on `npu.sock`, as the infer
//! stage's service reads it ([`decode`], with the number of fds that came in the packet),
//! then every buffer a register message names as the service maps it
//! ([`BufferSpec::layout`]); and the same bytes as an answer of the service, as a client reads
//! it ([`decode_reply`]).
//!
//! Input: the first byte, modulo 32, is the number of fds received with the packet; the rest
//! is the packet. Invariants: neither decoder panics; an accepted request is of this
//! protocol's version and carries exactly as many fds as it names buffers; an accepted
//! register names 1 to `MAX_REGISTER` buffers, each of whose layout is accepted again and
//! fits the buffer's size (a raw one: its format, size and planes; an encoded one: no
//! layout); an accepted hello's name and rate are in range; an accepted register, detect or stats
//! encodes to bytes that decode to the same request; an accepted answer encodes to JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcpipe_core::service::{decode, decode_reply, BufferSpec, Request, MAX_NAME, MAX_REGISTER, VERSION};

fuzz_target!(|data: &[u8]| {
    let Some((&first, packet)) = data.split_first() else { return };
    let n_fds = (first % 32) as usize;
    if let Ok(req) = decode(packet, n_fds) {
        request(&req, n_fds);
    }
    if let Ok(reply) = decode_reply(packet) {
        let bytes = reply.to_bytes();
        serde_json::from_slice::<serde_json::Value>(&bytes)
            .unwrap_or_else(|e| panic!("{reply:?} encodes to bytes that are not JSON: {e}"));
    }
});

fn request(req: &Request, n_fds: usize) {
    match req {
        Request::Hello { v, name, detect_fps } => {
            assert_eq!((*v, n_fds), (VERSION, 0), "{req:?}");
            assert!(name.len() <= MAX_NAME && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)));
            assert!(detect_fps.is_finite() && (0.0..=1000.0).contains(detect_fps), "{req:?}");
            // A rate may come back one ulp off (JSON floats); the rest exactly.
            match decode(&serde_json::to_vec(req).unwrap(), 0) {
                Ok(Request::Hello { v: v2, name: n2, .. }) => assert_eq!((v2, &n2), (*v, name)),
                other => panic!("{req:?} re-encoded reads as {other:?}"),
            }
        }
        Request::Register { v, buffers } => {
            assert_eq!(*v, VERSION);
            assert!((1..=MAX_REGISTER).contains(&buffers.len()), "{} buffers", buffers.len());
            assert_eq!(n_fds, buffers.len(), "fds against buffers");
            buffers.iter().for_each(buffer);
            roundtrip(req, n_fds);
        }
        Request::Detect { v, .. } | Request::Stats { v } => {
            assert_eq!((*v, n_fds), (VERSION, 0), "{req:?}");
            roundtrip(req, n_fds);
        }
    }
}

fn buffer(b: &BufferSpec) {
    let layout = b.layout().unwrap_or_else(|e| panic!("{b:?} was accepted, then its layout refused: {e}"));
    match (b.format.fourcc(), layout) {
        (Some(fourcc), Some(l)) => {
            assert_eq!(
                (l.fourcc, l.width, l.height, l.num_planes as usize),
                (fourcc, b.width, b.height, b.planes.len())
            );
            assert!(l.bytes_needed() <= b.size, "{b:?}: needs {} bytes", l.bytes_needed());
            for (p, s) in l.planes().iter().zip(&b.planes) {
                assert_eq!((p.offset, p.bytesperline), (s.offset, s.bytesperline), "{b:?}");
            }
            l.validate(&[b.size]).unwrap_or_else(|e| panic!("{b:?}: its layout does not fit its size: {e}"));
        }
        (None, None) => assert!(b.width == 0 && b.height == 0 && b.planes.is_empty(), "{b:?}"),
        (f, l) => panic!("{b:?}: fourcc {f:?} but layout {l:?}"),
    }
}

fn roundtrip(req: &Request, n_fds: usize) {
    let bytes = serde_json::to_vec(req).unwrap();
    match decode(&bytes, n_fds) {
        Ok(back) => assert_eq!(&back, req, "decode(encode(m)) differs"),
        Err(e) => panic!("{} does not decode: {e}", String::from_utf8_lossy(&bytes)),
    }
}

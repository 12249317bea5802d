//! The detections-socket reader of `zcpipe watch` ([`print_stream`], fed the bytes a
//! publisher sent): each line read as a [`SocketLine`] and printed raw (`--json`) or
//! readable (frames and notices), until the end line, `--count` frames, or EOF.
//!
//! Input: the first byte is the options (bit 0: `--json`; bit 1: a `--count` of bits 2..7),
//! the rest is the stream. Invariants: it never panics; what it prints and how it ends are
//! exactly what the contract says, line by line (an error only for a line that is not
//! UTF-8); every line it reads as a socket line writes back (`to_line`) to one that reads
//! as the same value.
#![no_main]

use std::io::Write as _;
use std::sync::atomic::AtomicBool;

use libfuzzer_sys::fuzz_target;
use zcpipe_core::schema::SocketLine;
use zcpipe_publish::recorded::human_clip;
use zcpipe_publish::stage::human_line;
use zcpipe_publish::tracking::human_event;
use zcpipe_publish::watch::{notice_line, print_stream, StreamEnd};

static NEVER: AtomicBool = AtomicBool::new(false);

fuzz_target!(|data: &[u8]| {
    let Some((&opts, stream)) = data.split_first() else { return };
    let json = opts & 1 != 0;
    let count = (opts & 2 != 0).then_some((opts >> 2) as u64);
    let mut out = Vec::new();
    let mut frames = 0u64;
    let got = print_stream(stream, &mut out, json, count, &mut frames, &NEVER);

    // The contract, line by line (lines as BufRead::lines splits them: up to each \n, which
    // is dropped with a \r before it; then what follows the last \n, if anything).
    let mut want = Vec::new();
    let mut lines = stream.split_inclusive(|&b| b == b'\n').map(|l| match l.strip_suffix(b"\n") {
        Some(l) => l.strip_suffix(b"\r").unwrap_or(l),
        None => l,
    });
    let mut n = 0u64;
    let end = loop {
        let Some(line) = lines.next() else { break Some(StreamEnd::Eof) };
        let Ok(line) = std::str::from_utf8(line) else { break None };
        let parsed = SocketLine::parse(line);
        if let Ok(v) = &parsed {
            let again = v.to_line().expect("a socket line serialises");
            let back = SocketLine::parse(&again).unwrap_or_else(|e| {
                panic!("{line:?} reads as {v:?}, written back as {again:?}, which does not read: {e}")
            });
            assert_eq!(&back, v, "{line:?} written back as {again:?}");
        }
        let is_frame = matches!(parsed, Ok(SocketLine::Frame(_)));
        match parsed {
            Ok(SocketLine::End(_)) => break Some(StreamEnd::EndLine),
            _ if json => writeln!(want, "{line}"),
            Ok(SocketLine::Frame(f)) if f.camera.is_empty() => writeln!(want, "{}", human_line(&f)),
            Ok(SocketLine::Frame(f)) => writeln!(want, "{}: {}", f.camera, human_line(&f)),
            Ok(SocketLine::Notice(x)) => writeln!(want, "{}", notice_line(&x)),
            Ok(SocketLine::Event(e)) if e.camera.is_empty() => writeln!(want, "{}", human_event(&e)),
            Ok(SocketLine::Event(e)) => writeln!(want, "{}: {}", e.camera, human_event(&e)),
            Ok(SocketLine::Clip(c)) => writeln!(want, "{}: {}", c.camera, human_clip(&c)),
            Err(_) => Ok(()),
        }
        .unwrap();
        if is_frame {
            n += 1;
            if count.is_some_and(|c| n >= c) {
                break Some(StreamEnd::Count);
            }
        }
    };
    match (end, &got) {
        (Some(e), Ok(g)) => assert_eq!(*g, e),
        (None, Err(_)) => {}
        _ => panic!("expected {end:?}, got {got:?}"),
    }
    assert_eq!(String::from_utf8_lossy(&out), String::from_utf8_lossy(&want));
    assert_eq!(frames, n, "frames counted");
});

//! The control API of a running pipeline: one datagram a client sent on `control.sock` (as
//! `zcpipe ctl` or the web view's control route sends it), read as the supervisor reads it
//! ([`control::parse_ask`]), and one the supervisor sent on the publish stage's control
//! socket, read as the publish stage reads it.
//!
//! Input: the first byte picks the socket (even: the run's, odd: the publish stage's), the
//! rest is the datagram. Invariants: reading never panics; a request read back is the
//! request re-encoded (an `Ask` round-trips); a refusal is one line of at most 300
//! characters, of kind `malformed` or `version`, and quotes nothing the request gave (a
//! camera URL's password may be in it).
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcpipe_core::control::{self, Ask, Refusal, Reply, StageAsk, VERSION};

fuzz_target!(|data: &[u8]| {
    let Some((&which, bytes)) = data.split_first() else { return };
    if which % 2 == 1 {
        if let Ok(a) = serde_json::from_slice::<StageAsk>(bytes) {
            let again = serde_json::to_vec(&a).expect("a stage request encodes");
            assert_eq!(serde_json::from_slice::<StageAsk>(&again).expect("and reads back"), a);
        }
        return;
    }
    match control::parse_ask(bytes) {
        Ok(request) => {
            let again = serde_json::to_vec(&Ask { version: VERSION, request: request.clone() }).expect("encodes");
            assert_eq!(control::parse_ask(&again), Ok(request), "{}", String::from_utf8_lossy(&again));
        }
        Err(Reply::Refused { error, message }) => {
            assert!(matches!(error, Refusal::Malformed | Refusal::Version), "{error:?}: {message}");
            assert!(!message.contains('\n') && message.chars().count() <= 300, "{message:?}");
            // Nothing the request gave is quoted back: serde's quoted values are left out,
            // only what the contract expected stays.
            // (The contract's own field names may be named, in backticks.)
            let given = message.split(", expected ").next().unwrap_or("");
            let names_only =
                given.split('`').skip(1).step_by(2).all(|w| w.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
            assert!(names_only && !given.contains('"') && !given.contains("://"), "the request came back: {message}");
        }
        Err(other) => panic!("parse_ask refused with {other:?}"),
    }
});

//! The control API of a running pipeline: one datagram a client sent on `control.sock` (as
//! `zcpipe ctl` or the web view's control route sends it), read as the supervisor reads it
//! ([`control::parse_ask`]), and one the supervisor sent on the publish stage's control
//! socket, read as the publish stage reads it.
//!
//! Input: the first byte picks the socket (even: the run's, odd: the publish stage's), the
//! rest is the datagram. Invariants: reading never panics; a request read back is the
//! request re-encoded (an `Ask` round-trips); a refusal is one line of at most 300
//! characters, of kind `malformed` or `version`, and never carries a camera URL's password
//! given in the request.
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
            let text = String::from_utf8_lossy(bytes);
            if let Some(pw) = text.split("://").nth(1).and_then(|r| r.split('@').next()).and_then(|u| u.split_once(':')) {
                assert!(pw.1.len() < 4 || !message.contains(pw.1), "a password came back: {message}");
            }
        }
        Err(other) => panic!("parse_ask refused with {other:?}"),
    }
});

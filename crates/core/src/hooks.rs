//! Test hooks, read once at start-up into configuration: never from the environment on a hot
//! path.
//!
//! The fault-injection tests start the binary with [`FAULT_ENV`] set; [`fault`] reads it the
//! first time it is asked (while a stage sets up) and keeps the answer for the process's
//! life. Unset (always, in use), no fault is injected.

use std::sync::OnceLock;

/// The environment variable that injects a fault for the fault-injection tests:
/// `hold-frames:<stage>` makes that stage's [`crate::pool::Upstream`] keep every frame it
/// takes (the producer's lease timeout then kills it). Never set in production.
pub(crate) const FAULT_ENV: &str = "ZCPIPE_FAULT";

/// A fault a test injects ([`FAULT_ENV`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// `hold-frames:<stage>`: the named stage keeps every frame it takes, as a stuck
    /// consumer would.
    HoldFrames(String),
}

impl Fault {
    /// Parses [`FAULT_ENV`]'s value; `None` for one this build does not know.
    pub fn parse(v: &str) -> Option<Fault> {
        v.strip_prefix("hold-frames:").map(|s| Fault::HoldFrames(s.to_string()))
    }

    /// Whether stage `me` (its hello name) keeps every frame it takes.
    pub(crate) fn holds_frames(&self, me: &str) -> bool {
        matches!(self, Fault::HoldFrames(s) if s == me)
    }
}

/// The injected fault, read from [`FAULT_ENV`] once (the first call), or `None`.
pub fn fault() -> Option<&'static Fault> {
    static FAULT: OnceLock<Option<Fault>> = OnceLock::new();
    FAULT.get_or_init(|| std::env::var(FAULT_ENV).ok().as_deref().and_then(Fault::parse)).as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse() {
        let f = Fault::parse("hold-frames:infer").unwrap();
        assert!(f.holds_frames("infer"));
        assert!(!f.holds_frames("publish"));
        assert_eq!(Fault::parse("nonsense"), None);
    }
}

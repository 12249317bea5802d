//! The capture stage's report, typed where another process reads it: a network camera's
//! reconnects, read back by `zcpipe run` for its summary line.

use serde::{Deserialize, Serialize};
use zcpipe_core::stage::Extras;

/// A network camera's gaps: how often it came back, how long it was away, and what it lost.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct ReconnectFacts {
    /// Times the stream came back after it dropped.
    pub reconnects: u64,
    /// Frames lost in the gaps, estimated from the nominal rate.
    pub frames_lost: u64,
    /// Seconds without frames in the gaps (to the millisecond).
    pub gap_s: f64,
}

impl ReconnectFacts {
    /// Its facts, for a source's list (the same names [`ReconnectFacts`] reads back).
    pub fn pairs(&self) -> Extras {
        vec![
            ("reconnects", self.reconnects.into()),
            ("frames_lost", self.frames_lost.into()),
            ("gap_s", ((self.gap_s * 1000.0).round() / 1000.0).into()),
        ]
    }

    /// Its line of the end-of-run summary (`who`: `the camera`, `camera front`); none for a
    /// camera that never came back after a drop.
    pub fn summary_line(&self, who: &str) -> Option<String> {
        (self.reconnects > 0).then(|| {
            format!(
                "  reconnects: {who} {} time(s), {:.1} s without frames, ~{} frames lost",
                self.reconnects, self.gap_s, self.frames_lost
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zcpipe_core::metrics::Facts;

    #[test]
    fn pairs_read_back_as_the_type() {
        let r = ReconnectFacts { reconnects: 2, frames_lost: 31, gap_s: 1.25 };
        let f = Facts::from(r.pairs());
        assert_eq!(f.view::<ReconnectFacts>(), r);
        assert_eq!(
            r.summary_line("the camera").as_deref(),
            Some("  reconnects: the camera 2 time(s), 1.2 s without frames, ~31 frames lost")
        );
    }
}

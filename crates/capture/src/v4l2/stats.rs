//! What the capture loop counts: [`V4l2Stats`] and the driver's sequence numbers
//! ([`SequenceCounter`]).

/// Counts of what the driver handed back.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct V4l2Stats {
    /// Buffers dequeued (good and flagged).
    pub dequeued: u64,
    /// Frames published downstream.
    pub published: u64,
    /// Frames the driver skipped (gaps in its sequence numbers).
    pub driver_drops: u64,
    /// Buffers the driver flagged `V4L2_BUF_FLAG_ERROR` (requeued, not published).
    pub(crate) error_frames: u64,
    /// Buffers queued with QBUF.
    pub queued: u64,
    /// Frames whose timestamp went backwards or was not CLOCK_MONOTONIC.
    pub bad_timestamps: u64,
    /// Frames the driver stamped later than their dequeue (clamped to the dequeue time).
    pub timestamps_ahead: u64,
    /// The most a stamp was ahead of its dequeue, µs.
    pub max_ahead_us: u64,
    /// Buffers whose sequence number repeated or went back (given the next frame number).
    pub sequence_repeats: u64,
    /// Dequeues that left the driver without a queued buffer: a frame arriving before the
    /// next QBUF would be lost for want of a buffer (zcpipe's fault, not the driver's).
    pub driver_starved: u64,
    /// Sequence number of the first buffer dequeued.
    pub first_sequence: Option<u32>,
    /// Sequence number of the last buffer dequeued.
    pub last_sequence: Option<u32>,
}

/// Follows a driver's u32 sequence numbers: gaps are frames the driver dropped.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SequenceCounter {
    /// First sequence number seen.
    pub first: Option<u32>,
    /// Last sequence number seen.
    pub last: Option<u32>,
    /// Numbers skipped between consecutive buffers.
    pub drops: u64,
    /// Buffers whose number did not move forward.
    pub repeats: u64,
    ext: u64,
}

impl SequenceCounter {
    /// Records the sequence number of the next buffer; returns a frame number that always
    /// increases: the sequence extended to 64 bits (wraps counted), or, when the driver
    /// repeats a number or goes back, one more than the last (counted in `repeats`).
    pub fn see(&mut self, seq: u32) -> u64 {
        match self.last {
            None => {
                self.first = Some(seq);
                self.ext = seq as u64;
            }
            Some(last) => {
                let step = seq.wrapping_sub(last);
                if step == 0 || step > u32::MAX / 2 {
                    self.repeats += 1;
                    self.ext += 1;
                } else {
                    self.drops += (step - 1) as u64;
                    self.ext += step as u64;
                }
            }
        }
        self.last = Some(seq);
        self.ext
    }
}

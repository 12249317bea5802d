//! The MQTT messages' wall-clock times: the socket's lines carry CLOCK_MONOTONIC stamps;
//! a message says Unix ms.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Now as Unix time, ms.
pub(crate) fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// The wall-clock time (Unix ms) of CLOCK_MONOTONIC time `mono_ns` (the socket's lines
/// carry only CLOCK_MONOTONIC): `mono_ns` plus the clocks' offset, which is read at most
/// every 10 s (so a clock set by NTP is followed) and is the same between. One line's
/// time reads the same wherever it is shown: the latest answers are remembered, so an
/// output asking after another (the snapshot of a `new` event names the event's id, which
/// holds its time) gets the same even across a new read of the offset.
pub(crate) fn wall_ms(mono_ns: u64) -> u64 {
    use std::sync::{Mutex, OnceLock};
    struct Clock {
        offset: Option<(Instant, i128)>,
        recent: [(u64, u64); 16],
        next: usize,
    }
    static CLOCK: OnceLock<Mutex<Clock>> = OnceLock::new();
    let mut c = CLOCK
        .get_or_init(|| Mutex::new(Clock { offset: None, recent: [(0, 0); 16], next: 0 }))
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(&(_, ms)) = c.recent.iter().find(|(ns, _)| *ns == mono_ns && mono_ns != 0) {
        return ms;
    }
    let offset = match c.offset {
        Some((at, off)) if at.elapsed() < Duration::from_secs(10) => off,
        _ => {
            let unix_ns = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i128);
            let off = unix_ns - zcpipe_core::frame::monotonic_ns() as i128;
            c.offset = Some((Instant::now(), off));
            off
        }
    };
    // A time after now (another clock's read) is now.
    let ms = (((mono_ns as i128 + offset).max(0) / 1_000_000) as u64).min(unix_ms());
    let i = c.next;
    c.recent[i] = (mono_ns, ms);
    c.next = (i + 1) % c.recent.len();
    ms
}

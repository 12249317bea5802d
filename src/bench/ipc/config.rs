//! What `zcpipe bench ipc` measures: the transports ([`Transport`]), the message sizes
//! ([`MsgSize`], [`parse_size`]) and the whole request ([`IpcConfig`]).

use zcpipe_core::config::Choice;
use zcpipe_core::dmabuf::HeapChoice;
use zcpipe_core::frame::FrameLayout;

/// A transport under test (`--transports`). What each one measures: its [`Choice`] entry
/// (one line, the `--transports` help) and [`Transport::legend`] (under the table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// `none`: the no-transfer baseline.
    None,
    /// `pipe`: pipe(2), default capacity.
    Pipe,
    /// `pipe-1m`: pipe(2) enlarged to 1 MiB.
    Pipe1m,
    /// `mq`: POSIX message queue.
    Mq,
    /// `unix`: Unix stream socket.
    Unix,
    /// `tcp`: TCP over the loopback.
    Tcp,
    /// `shm-copy`: shared memory, copied in.
    ShmCopy,
    /// `shm-inplace`: shared memory written in place, eventfd wake-up.
    ShmInplace,
    /// `shm-spin`: shared memory written in place, the reader spinning.
    ShmSpin,
    /// `ring`: zcpipe's frame hop.
    Ring,
    /// `ring-desc`: zcpipe's frame hop, descriptor only.
    RingDesc,
    /// `ring-spin`: `ring-desc` with the consumer's adaptive spin before sleeping.
    RingSpin,
    /// `iceoryx2`: iceoryx2 0.10 (only with the `iceoryx2` cargo feature).
    Iceoryx2,
}

/// The error for `--transports iceoryx2` in a build without the feature.
pub const NO_ICEORYX2: &str =
    "zcpipe was built without the iceoryx2 feature; rebuild with `cargo build --release --features iceoryx2` (needs libclang-dev)";

/// The `--transports` spellings, each with what it measures in one line (the help text).
/// Every transport zcpipe knows, in table order, `iceoryx2` last: `--transports` accepts it
/// in every build, and a build without the feature refuses it with [`NO_ICEORYX2`].
impl Choice for Transport {
    const ALL: &'static [(Self, &'static str, &'static str)] = &[
        (
            Transport::None,
            "none",
            "No transfer (the baseline): each side reads one byte in 64 of its own private buffer, then writes the \
             whole next message into it; turn-taking by two eventfds",
        ),
        (Transport::Pipe, "pipe", "pipe(2), one per direction, default capacity"),
        (Transport::Pipe1m, "pipe-1m", "pipe(2) enlarged to 1 MiB with F_SETPIPE_SZ"),
        (Transport::Mq, "mq", "POSIX message queue (mq_open), where the size fits msgsize_max"),
        (Transport::Unix, "unix", "Unix stream socket (socketpair, SOCK_STREAM)"),
        (Transport::Tcp, "tcp", "TCP over 127.0.0.1 (TCP_NODELAY)"),
        (Transport::ShmCopy, "shm-copy", "Shared memory: the writer memcpys from a private buffer into it; eventfd wake-up"),
        (Transport::ShmInplace, "shm-inplace", "Shared memory written in place; eventfd wake-up"),
        (Transport::ShmSpin, "shm-spin", "Shared memory written in place; the reader spins on a sequence word"),
        (Transport::Ring, "ring", "zcpipe's frame hop: a FrameDesc through the ring, pixels written in place into a pool buffer"),
        (Transport::RingDesc, "ring-desc", "zcpipe's frame hop carrying the descriptor only (no pixel written or read)"),
        (Transport::RingSpin, "ring-spin", "ring-desc with each consumer spinning up to 50 µs before it sleeps (--spin-us 50, adaptive)"),
        (
            Transport::Iceoryx2,
            "iceoryx2",
            "iceoryx2 0.10: zero-copy publish-subscribe (slice loaned and written in place) plus its event service for \
             the wake-up. Only in builds with the `iceoryx2` cargo feature",
        ),
    ];
}

impl Transport {
    /// Every transport this build can measure, in table order: all of [`Choice::ALL`] but
    /// `iceoryx2` in a build without the `iceoryx2` cargo feature.
    pub fn measurable() -> Vec<Transport> {
        Self::ALL.iter().map(|(t, ..)| *t).filter(|t| cfg!(feature = "iceoryx2") || *t != Transport::Iceoryx2).collect()
    }

    /// What exactly is measured, for the legend under the table.
    pub fn legend(self) -> &'static str {
        match self {
            Transport::None => {
                "no transfer (baseline): the same work with nothing crossing: each side has a private buffer of the \
                 message size; on its turn it reads one byte in 64 of it, writes the whole next message into it and wakes \
                 the other through a pair of eventfds (blocking read/write); the same memory in all as shm-inplace"
            }
            Transport::Pipe => "pipe(2) per direction, default capacity; write(2) from a private buffer, read(2) into one",
            Transport::Pipe1m => "the same with both pipes enlarged to 1 MiB (F_SETPIPE_SZ)",
            Transport::Mq => "POSIX message queue per direction (mq_open, maxmsg 1, msgsize = the message); mq_send / mq_receive",
            Transport::Unix => "Unix stream socket (socketpair, SOCK_STREAM, default buffers); write(2) / read(2)",
            Transport::Tcp => "TCP over 127.0.0.1 (TCP_NODELAY, default buffers); write(2) / read(2)",
            Transport::ShmCopy => {
                "shared memfd mapped by both; the writer fills a private buffer and memcpys it in, rings an eventfd; \
                 the reader reads in place"
            }
            Transport::ShmInplace => "shared memfd written in place; eventfd wake-up; read in place",
            Transport::ShmSpin => {
                "shared memfd written in place; the reader spins on a sequence word in the same memory \
                 (release/acquire, no syscall, no futex)"
            }
            Transport::Ring => {
                "zcpipe's frame hop (core::pool over core::ring, eventfd wait): PoolProducer::acquire, frame written in \
                 place into a pool buffer through the CpuAccess write guard, FrameDesc published into the ring (doorbell \
                 rung because the peer sleeps); PoolConsumer::recv validates it, reads through the read guard, the drop \
                 returns the buffer"
            }
            Transport::RingDesc => "the same hop carrying only the FrameDesc: no pixel written or read",
            Transport::RingSpin => {
                "ring-desc with the receivers' adaptive spin (Receiver::set_spin, 50 µs): a consumer whose last frame came \
                 within the budget looks at the ring for up to 50 µs before it sleeps, so a prompt answer skips the wake-up"
            }
            Transport::Iceoryx2 => {
                "iceoryx2 0.10 (ipc::Service), one publish-subscribe service of [u8] slices (1 publisher, 1 subscriber, \
                 queue 1, no history) and one event service per direction: loan_slice_uninit, message written in place \
                 into the publisher's shared-memory segment, send, notify; the peer blocks in Listener::timed_wait (its \
                 event: a Unix datagram socket), receives the sample, reads it in place and drops it; iceoryx2 picks the \
                 sample slots itself, so --cold does not apply to it"
            }
        }
    }

    /// Whether a round trip touches the message's bytes (sets the default run length).
    fn touches_data(self) -> bool {
        !matches!(self, Transport::RingDesc | Transport::RingSpin)
    }
}

/// An NV12 frame size that `--sizes` knows by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NamedFrame {
    /// `480p`, `720p`, `1080p`, `4k`.
    pub name: &'static str,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
}

/// The frames `--sizes` knows by name (NV12, bytesperline aligned to 16).
pub const NAMED_FRAMES: [NamedFrame; 4] = [
    NamedFrame { name: "480p", width: 640, height: 480 },
    NamedFrame { name: "720p", width: 1280, height: 720 },
    NamedFrame { name: "1080p", width: 1920, height: 1080 },
    NamedFrame { name: "4k", width: 3840, height: 2160 },
];

impl NamedFrame {
    /// Bytes of one NV12 frame.
    pub fn bytes(&self) -> usize {
        FrameLayout::nv12(self.width, self.height, 16).bytes_needed() as usize
    }
}

/// Largest message `--sizes` accepts.
pub const MAX_SIZE: usize = 64 << 20;

/// A message size: bytes, and the NV12 frame it is if it is one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MsgSize {
    /// Bytes per message.
    pub bytes: usize,
    /// The named NV12 frame of exactly this many bytes, if any.
    pub frame: Option<NamedFrame>,
}

impl MsgSize {
    /// A size of `bytes`, recognised as a named frame when it is one.
    pub fn from_bytes(bytes: usize) -> MsgSize {
        MsgSize { bytes, frame: NAMED_FRAMES.iter().copied().find(|f| f.bytes() == bytes) }
    }

    /// Short label: `64 B`, `4 KiB`, `1 MiB`, `1080p`.
    pub fn label(&self) -> String {
        if let Some(f) = self.frame {
            return f.name.to_string();
        }
        let b = self.bytes;
        if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
            format!("{} MiB", b >> 20)
        } else if b >= 1024 && b.is_multiple_of(1024) {
            format!("{} KiB", b >> 10)
        } else {
            format!("{b} B")
        }
    }

    pub(super) fn table_label(&self) -> String {
        match self.frame {
            Some(f) => format!("{} ({} B)", f.name, self.bytes),
            None => self.label(),
        }
    }
}

/// Parses one `--sizes` entry: a byte count with an optional suffix (`K`, `KB`, `KiB` =
/// 1024; `M`, `MB`, `MiB` = 1048576), or an NV12 frame name (`480p`, `720p`, `1080p`,
/// `2160p`; `4k` in lower case is the 3840x2160 frame, `4K` is 4096 bytes).
pub fn parse_size(s: &str) -> std::result::Result<MsgSize, String> {
    let t = s.trim();
    let names = "480p, 720p, 1080p, 4k";
    if t == "4k" || t.eq_ignore_ascii_case("2160p") || t.eq_ignore_ascii_case("uhd") {
        return Ok(MsgSize::from_bytes(NAMED_FRAMES[3].bytes()));
    }
    if let Some(f) = NAMED_FRAMES.iter().find(|f| f.name != "4k" && t.eq_ignore_ascii_case(f.name)) {
        return Ok(MsgSize::from_bytes(f.bytes()));
    }
    let split = t.find(|c: char| !c.is_ascii_digit() && c != '_').unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let num = num.replace('_', "");
    if num.is_empty() {
        return Err(format!("'{s}' is not a size: give bytes (64, 4K, 64K, 1M) or a frame name ({names})"));
    }
    let mult: usize = match suffix {
        "" => 1,
        "k" => {
            return Err(format!(
                "'{s}': write {num}K for {num} KiB (upper-case K); lower-case 4k names a 3840x2160 NV12 frame"
            ))
        }
        // Lower-case "k" alone was refused above, so "k" here came from "K".
        _ => match suffix.to_ascii_lowercase().as_str() {
            "b" => 1,
            "k" | "kb" | "kib" => 1 << 10,
            "m" | "mb" | "mib" => 1 << 20,
            _ => return Err(format!("'{s}': unknown suffix '{suffix}' (use K or M, or a frame name: {names})")),
        },
    };
    let n: usize = num.parse().map_err(|_| format!("'{s}': {num} is not a whole number"))?;
    let bytes = n.checked_mul(mult).filter(|&b| (1..=MAX_SIZE).contains(&b));
    match bytes {
        Some(b) => Ok(MsgSize::from_bytes(b)),
        None => Err(format!("'{s}': sizes go from 1 byte to {} MiB", MAX_SIZE >> 20)),
    }
}

/// What to measure: built from `zcpipe bench ipc`'s flags by `cli`, or by code.
#[derive(Clone, Debug)]
pub struct IpcConfig {
    /// Message sizes, in order, without duplicates.
    pub sizes: Vec<MsgSize>,
    /// Transports, in table order; always starts with `none`.
    pub transports: Vec<Transport>,
    /// Timed runs per row.
    pub rounds: u32,
    /// Round trips per run (`None`: chosen per size).
    pub iters: Option<u32>,
    /// Buffers cycled per direction (`None`: one, hot).
    pub cold: Option<u32>,
    /// CPUs to pin to (`None`: the first two allowed).
    pub cpus: Option<[usize; 2]>,
    /// Allocator of the frame ring's pools.
    pub heap: HeapChoice,
}

impl IpcConfig {
    /// Round trips per run for `t` at `bytes`.
    pub fn iters_for(&self, t: Transport, bytes: usize) -> u32 {
        let auto = || if t.touches_data() { ((128usize << 20) / bytes.max(1)).clamp(32, 2000) as u32 } else { 2000 };
        self.iters.unwrap_or_else(auto).max(1)
    }
}

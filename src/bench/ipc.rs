//! `zcpipe bench ipc`: one-way latency between two processes, per transport and message
//! size, next to a no-transfer baseline — the table that shows where shared memory starts
//! to pay on a given board.
//!
//! Method: a timing process and an echo process (forked for each run), pinned to two CPUs,
//! play ping-pong. Each side writes the whole message, then the other reads one byte in 64
//! of it (as a consumer touching a frame would) and answers with a message of the same
//! size. A run is `iters` round trips after a warm-up; its one-way latency is half its
//! median round trip (so a preemption by another process does not count). Each row gives
//! the median, min and max of `rounds` runs, and the median's ratio to the `none` baseline
//! of the same size (same work, nothing crosses between the processes). Rounds are
//! interleaved across rows, so slow drifts of the machine weigh on every row alike.
//!
//! The `iceoryx2` row (iceoryx2 0.10 zero-copy publish-subscribe plus its event wake-up, as
//! a peer to compare zcpipe's ring against) exists only in builds with the cargo feature
//! `iceoryx2`, which needs libclang to build and is not part of CI; without it,
//! `--transports iceoryx2` is refused with how to rebuild.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use serde::Serialize;

use super::proc::{self, AffinityRestore, Placement, SignalGuard};
use super::transports::{self, Ctx, Prepared};
use crate::core::dmabuf::{Allocator, HeapChoice};
use crate::core::frame::FrameLayout;

/// A transport under test (`--transports`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Transport {
    /// No transfer (the baseline): each side reads one byte in 64 of its own private buffer,
    /// then writes the whole next message into it; turn-taking by two eventfds.
    None,
    /// pipe(2), one per direction, default capacity.
    Pipe,
    /// pipe(2) enlarged to 1 MiB with F_SETPIPE_SZ.
    #[value(name = "pipe-1m")]
    Pipe1m,
    /// POSIX message queue (mq_open), where the size fits msgsize_max.
    Mq,
    /// Unix stream socket (socketpair, SOCK_STREAM).
    Unix,
    /// TCP over 127.0.0.1 (TCP_NODELAY).
    Tcp,
    /// Shared memory: the writer memcpys from a private buffer into it; eventfd wake-up.
    ShmCopy,
    /// Shared memory written in place; eventfd wake-up.
    ShmInplace,
    /// Shared memory written in place; the reader spins on a sequence word.
    ShmSpin,
    /// zcpipe's frame hop: a FrameDesc through the ring, pixels written in place into a pool buffer.
    Ring,
    /// zcpipe's frame hop carrying the descriptor only (no pixel written or read).
    RingDesc,
    /// iceoryx2 0.10: zero-copy publish-subscribe (slice loaned and written in place) plus
    /// its event service for the wake-up. Only in builds with the `iceoryx2` cargo feature.
    Iceoryx2,
}

/// The error for `--transports iceoryx2` in a build without the feature.
pub const NO_ICEORYX2: &str =
    "zcpipe was built without the iceoryx2 feature; rebuild with `cargo build --release --features iceoryx2` (needs libclang-dev)";

impl Transport {
    /// Every transport zcpipe knows, in table order; `iceoryx2` last.
    const EVERY: [Transport; 12] = [
        Transport::None,
        Transport::Pipe,
        Transport::Pipe1m,
        Transport::Mq,
        Transport::Unix,
        Transport::Tcp,
        Transport::ShmCopy,
        Transport::ShmInplace,
        Transport::ShmSpin,
        Transport::Ring,
        Transport::RingDesc,
        Transport::Iceoryx2,
    ];

    /// Every transport this build can measure, in table order (`iceoryx2` only with the
    /// `iceoryx2` cargo feature).
    pub const ALL: &'static [Transport] = if cfg!(feature = "iceoryx2") { &Self::EVERY } else { Self::EVERY.split_at(11).0 };

    /// The name used on the command line and in the table.
    pub fn name(self) -> &'static str {
        match self {
            Transport::None => "none",
            Transport::Pipe => "pipe",
            Transport::Pipe1m => "pipe-1m",
            Transport::Mq => "mq",
            Transport::Unix => "unix",
            Transport::Tcp => "tcp",
            Transport::ShmCopy => "shm-copy",
            Transport::ShmInplace => "shm-inplace",
            Transport::ShmSpin => "shm-spin",
            Transport::Ring => "ring",
            Transport::RingDesc => "ring-desc",
            Transport::Iceoryx2 => "iceoryx2",
        }
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
        self != Transport::RingDesc
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

    fn table_label(&self) -> String {
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

/// `zcpipe bench ipc`: one-way latency between two processes, per transport and size.
#[derive(Args, Debug, Clone)]
pub struct IpcArgs {
    /// Message sizes, comma-separated: bytes with an optional K or M suffix (4K = 4096 B),
    /// or NV12 frame names 480p, 720p, 1080p, 4k (lower-case 4k: 3840x2160).
    #[arg(long, value_delimiter = ',', value_parser = parse_size, default_value = "64,4K,64K,1M,1080p")]
    pub sizes: Vec<MsgSize>,
    /// Transports to measure, comma-separated (default: all). The `none` baseline is always
    /// measured, since every ratio refers to it.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub transports: Vec<Transport>,
    /// Timed runs per transport and size; the table gives their median, min and max.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub rounds: u32,
    /// Round trips per run [default: 2000, fewer for big messages: about 128 MiB per run, at least 32].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub iters: Option<u32>,
    /// Cycle through a pool of N buffers per direction (N defaults to 8), as a camera does,
    /// so the caches are cold.
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "8", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub cold: Option<u32>,
    /// Print JSON instead of the markdown table.
    #[arg(long)]
    pub json: bool,
    /// The two CPUs to pin the timing and echo processes to, e.g. 4,5 [default: the first
    /// two this process may use].
    #[arg(long, value_name = "A,B", value_delimiter = ',')]
    pub cpus: Option<Vec<usize>>,
    /// Where the frame ring's pool buffers come from (as the pipeline's --heap).
    #[arg(long, value_parser = crate::cli::common::choice::<HeapChoice>(), default_value = "auto")]
    pub heap: HeapChoice,
}

/// What to measure (the parsed command line; also usable from code).
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
    /// Checks and normalises the command line.
    pub fn from_args(a: &IpcArgs) -> Result<IpcConfig> {
        let mut sizes: Vec<MsgSize> = vec![];
        for s in &a.sizes {
            if !sizes.iter().any(|x| x.bytes == s.bytes) {
                sizes.push(s.clone());
            }
        }
        if sizes.is_empty() {
            anyhow::bail!("--sizes: give at least one size");
        }
        if !cfg!(feature = "iceoryx2") && a.transports.contains(&Transport::Iceoryx2) {
            anyhow::bail!("{NO_ICEORYX2}");
        }
        let want: Vec<Transport> = if a.transports.is_empty() { Transport::ALL.to_vec() } else { a.transports.clone() };
        let transports = Transport::ALL.iter().copied().filter(|t| *t == Transport::None || want.contains(t)).collect();
        let cpus = match a.cpus.as_deref() {
            None => None,
            Some([x, y]) => Some([*x, *y]),
            Some(v) => anyhow::bail!("--cpus takes two CPU numbers, e.g. --cpus 0,1 (got {})", v.len()),
        };
        Ok(IpcConfig { sizes, transports, rounds: a.rounds.max(1), iters: a.iters, cold: a.cold, cpus, heap: a.heap })
    }

    /// Round trips per run for `t` at `bytes`.
    pub fn iters_for(&self, t: Transport, bytes: usize) -> u32 {
        let auto = || if t.touches_data() { ((128usize << 20) / bytes.max(1)).clamp(32, 2000) as u32 } else { 2000 };
        self.iters.unwrap_or_else(auto).max(1)
    }
}

/// How a row ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Measured.
    Ok,
    /// Not measured, for a reason of this machine (a kernel limit); see `reason`.
    Skipped,
    /// The measurement failed; see `reason`.
    Failed,
}

/// One transport at one size.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Transport name.
    pub transport: String,
    /// Size label (`64 B`, `4 KiB`, `1080p`).
    pub size: String,
    /// Bytes per message.
    pub size_bytes: usize,
    /// Measured, skipped or failed.
    pub status: Status,
    /// Why it was skipped or failed.
    pub reason: Option<String>,
    /// Round trips per run.
    pub iters: u32,
    /// Median of the runs' one-way latencies, µs.
    pub median_us: Option<f64>,
    /// Fastest run, µs.
    pub min_us: Option<f64>,
    /// Slowest run, µs.
    pub max_us: Option<f64>,
    /// `median_us` over the `none` baseline's median at this size.
    pub ratio_to_none: Option<f64>,
    /// Every run's one-way latency (half its median round trip), µs, in order.
    pub runs_us: Vec<f64>,
    /// Every run's mean one-way latency (half its mean round trip), µs: includes the
    /// round trips other processes' preemptions stretched.
    pub runs_mean_us: Vec<f64>,
}

impl Row {
    fn new(t: Transport, size: &MsgSize, iters: u32) -> Row {
        Row {
            transport: t.name().into(),
            size: size.label(),
            size_bytes: size.bytes,
            status: Status::Ok,
            reason: None,
            iters,
            median_us: None,
            min_us: None,
            max_us: None,
            ratio_to_none: None,
            runs_us: vec![],
            runs_mean_us: vec![],
        }
    }
}

/// One of issue 5's goals, evaluated on this run.
#[derive(Clone, Debug, Serialize)]
pub struct Goal {
    /// What is compared.
    pub name: String,
    /// The measured ratio, if both rows were measured.
    pub value: Option<f64>,
    /// The target, as text.
    pub target: String,
    /// Whether it was met.
    pub met: Option<bool>,
    /// What to add to evaluate it, when `value` is missing.
    pub missing: Option<String>,
}

/// The machine, for reading the numbers.
#[derive(Clone, Debug, Serialize)]
pub struct Host {
    /// `uname -sr`.
    pub kernel: String,
    /// `uname -m`.
    pub machine: String,
    /// CPUs online.
    pub cpus_online: usize,
    /// /proc/loadavg when the bench started.
    pub loadavg: String,
    /// Scheduling policy of the two processes (`SCHED_OTHER`, or `SCHED_FIFO 10` under
    /// `chrt -f 10`; the echo process inherits it).
    pub scheduling: String,
}

/// Everything `zcpipe bench ipc` measured.
#[derive(Clone, Debug, Serialize)]
pub struct IpcReport {
    /// What each number is.
    pub metric: String,
    /// Unit of every latency.
    pub unit: &'static str,
    /// Timed runs per row.
    pub rounds: u32,
    /// `--iters`, if given (each row has its own `iters`).
    pub iters: Option<u32>,
    /// `--cold` pool size, if given.
    pub cold_buffers: Option<u32>,
    /// Where the processes ran.
    pub placement: PlacementReport,
    /// The frame ring's pool allocator.
    pub ring_memory: String,
    /// The machine.
    pub host: Host,
    /// One row per size and transport, sizes outermost.
    pub rows: Vec<Row>,
    /// Issue 5's goals.
    pub goals: Vec<Goal>,
    /// Ratios that explain the goals (not goals themselves).
    pub context: Vec<Goal>,
    /// Transport legend and remarks.
    pub notes: Vec<String>,
}

/// Where the two processes ran.
#[derive(Clone, Debug, Serialize)]
pub struct PlacementReport {
    /// CPUs this process could use.
    pub allowed: Vec<usize>,
    /// The timing process's CPU (`null`: unpinned).
    pub timing_cpu: Option<usize>,
    /// The echo process's CPU (`null`: unpinned).
    pub echo_cpu: Option<usize>,
    /// The same, in words.
    pub description: String,
}

/// A directory for the frame ring's sockets, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn create() -> Result<TempDir> {
        let base = std::env::temp_dir();
        for i in 0..100u32 {
            let p = base.join(format!("zcpipe-bench-{}-{i}", std::process::id()));
            match std::fs::create_dir(&p) {
                Ok(()) => return Ok(TempDir(p)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e).with_context(|| format!("creating {}", p.display())),
            }
        }
        anyhow::bail!("cannot create a fresh directory under {}", base.display())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `zcpipe bench ipc`; exit code 1 if any row failed.
pub fn run(args: IpcArgs) -> Result<i32> {
    let cfg = IpcConfig::from_args(&args)?;
    let report = measure(&cfg)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.markdown());
    }
    Ok(if report.rows.iter().any(|r| r.status == Status::Failed) { 1 } else { 0 })
}

/// Measures every transport of `cfg` at every size. Errors only on set-up problems or
/// Ctrl-C; a failing transport becomes a `failed` row.
pub fn measure(cfg: &IpcConfig) -> Result<IpcReport> {
    let placement = Placement::plan(cfg.cpus)?;
    let alloc = Allocator::open(cfg.heap, Path::new("/dev/dma_heap"), Path::new("/dev/udmabuf"))?;
    let host = host_info();
    let _signals = SignalGuard::install()?;
    let _affinity = AffinityRestore::save()?;
    if let Some(c) = placement.timing_cpu {
        proc::pin_self(c)?;
    }
    let dir = TempDir::create()?;
    log::info!(
        "measuring {} transports x {} sizes, {} runs each; {}",
        cfg.transports.len(),
        cfg.sizes.len(),
        cfg.rounds,
        placement.describe()
    );
    // Rounds are interleaved: round r of every row runs before round r+1 of any, so a
    // machine whose state drifts (other load, clocks, where a VM's vCPUs sit) weighs on
    // every row alike, and each row's median is taken across the whole bench.
    let mut rows: Vec<(Transport, &MsgSize, Row)> = vec![];
    for size in &cfg.sizes {
        for &t in &cfg.transports {
            rows.push((t, size, Row::new(t, size, cfg.iters_for(t, size.bytes))));
        }
    }
    let mut seq = 0u32;
    for round in 0..cfg.rounds {
        log::info!("round {} of {}", round + 1, cfg.rounds);
        for (t, size, row) in rows.iter_mut() {
            if row.status != Status::Ok {
                continue;
            }
            seq += 1;
            let ctx = Ctx {
                size,
                buffers: cfg.cold.unwrap_or(1) as usize,
                single_cpu: placement.single_cpu,
                alloc: &alloc,
                dir: &dir.0,
                tag: format!("{}-{seq}", t.name()),
            };
            match run_once(*t, &ctx, row.iters, &placement) {
                Ok(Run::Measured { median_us, mean_us }) => {
                    log::debug!("{} {}: {median_us:.2} µs", row.transport, row.size);
                    row.runs_us.push(median_us);
                    row.runs_mean_us.push(mean_us);
                }
                Ok(Run::Skipped(reason)) => {
                    row.status = Status::Skipped;
                    row.reason = Some(reason);
                }
                Err(e) => {
                    if proc::interrupted() {
                        return Err(e);
                    }
                    log::warn!("{} at {}: {e:#}", row.transport, row.size);
                    row.status = Status::Failed;
                    row.reason = Some(format!("{e:#}"));
                }
            }
        }
    }
    let mut rows: Vec<Row> = rows.into_iter().map(|(_, _, r)| r).collect();
    for row in rows.iter_mut().filter(|r| r.status == Status::Ok && !r.runs_us.is_empty()) {
        let mut sorted = row.runs_us.clone();
        row.median_us = Some(median(&mut sorted));
        row.min_us = sorted.first().copied();
        row.max_us = sorted.last().copied();
    }
    for i in 0..rows.len() {
        let base = rows.iter().find(|b| b.transport == "none" && b.size_bytes == rows[i].size_bytes).and_then(|b| b.median_us);
        rows[i].ratio_to_none = match (rows[i].median_us, base) {
            (Some(m), Some(b)) if b > 0.0 => Some(m / b),
            _ => None,
        };
    }
    let goals = goals(&rows);
    let context = context(&rows);
    let notes = notes(cfg, &rows);
    Ok(IpcReport {
        metric: "one-way latency between two processes: half a ping-pong round trip (each side writes the whole message, \
                 the other reads one byte in 64); each run's value is half the median of its `iters` round trips (after a \
                 warm-up); each row gives the median, min and max of `rounds` runs, run round by round across all rows"
            .into(),
        unit: "us",
        rounds: cfg.rounds,
        iters: cfg.iters,
        cold_buffers: cfg.cold,
        placement: PlacementReport {
            allowed: placement.allowed.clone(),
            timing_cpu: placement.timing_cpu,
            echo_cpu: placement.echo_cpu,
            description: placement.describe(),
        },
        ring_memory: alloc.describe(),
        host,
        rows,
        goals,
        context,
        notes,
    })
}

/// What one run of one row gave.
enum Run {
    /// Half the median and half the mean round trip, µs.
    Measured { median_us: f64, mean_us: f64 },
    /// The transport cannot carry this size here.
    Skipped(String),
}

/// One run: sets `t` up, forks the echo process, warms up, times `iters` round trips.
fn run_once(t: Transport, ctx: &Ctx, iters: u32, placement: &Placement) -> Result<Run> {
    let pair = match transports::prepare(t, ctx)? {
        Prepared::Ready(p) => p,
        Prepared::Skip(reason) => return Ok(Run::Skipped(reason)),
    };
    let warmup = (iters / 10).max(2 * ctx.buffers as u32).max(2) as u64;
    let messages = warmup + iters as u64;
    // Generous: 2 ms plus 40 ns a byte per message, and 30 s for set-up.
    let limit = Duration::from_secs(30) + Duration::from_secs_f64(messages as f64 * (2e-3 + ctx.size.bytes as f64 * 40e-9));
    proc::with_echo(pair, placement.echo_cpu, messages, limit, |ep| {
        for k in 0..warmup {
            ep.send(k)?;
            ep.recv(k)?;
        }
        // One clock read per round trip (the end of one is the start of the next).
        let mut rtt_ns = vec![0f64; iters as usize];
        let start = Instant::now();
        let mut last = start;
        for (k, slot) in (warmup..).zip(rtt_ns.iter_mut()) {
            ep.send(k)?;
            ep.recv(k)?;
            let now = Instant::now();
            *slot = (now - last).as_nanos() as f64;
            last = now;
        }
        Ok(Run::Measured {
            median_us: median(&mut rtt_ns) / 2e3,
            mean_us: (last - start).as_secs_f64() * 1e6 / (2.0 * iters as f64),
        })
    })
}

/// Sorts `v` and returns its median.
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn median_of(rows: &[Row], t: Transport, bytes: usize) -> Option<f64> {
    rows.iter().find(|r| r.transport == t.name() && r.size_bytes == bytes).and_then(|r| r.median_us)
}

/// Issue 5's goals: the ring hop close to the no-transfer floor at 1080p, far ahead of a
/// Unix socket, and a descriptor hop whose cost does not depend on the frame size.
fn goals(rows: &[Row]) -> Vec<Goal> {
    let p1080 = NAMED_FRAMES[2].bytes();
    let (p480, p4k) = (NAMED_FRAMES[0].bytes(), NAMED_FRAMES[3].bytes());
    let goal = |name: &str, target: &str, v: Option<f64>, ok: fn(f64) -> bool, missing: &str| Goal {
        name: name.into(),
        value: v,
        target: target.into(),
        met: v.map(ok),
        missing: v.is_none().then(|| missing.to_string()),
    };
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    vec![
        goal(
            "ring (in place) / none at 1080p",
            "<= 1.15x",
            ratio(median_of(rows, Transport::Ring, p1080), median_of(rows, Transport::None, p1080)),
            |v| v <= 1.15,
            "needs size 1080p and transport ring",
        ),
        goal(
            "unix / ring at 1080p (how many times faster the ring is)",
            ">= 6x",
            ratio(median_of(rows, Transport::Unix, p1080), median_of(rows, Transport::Ring, p1080)),
            |v| v >= 6.0,
            "needs size 1080p and transports ring, unix",
        ),
        goal(
            "ring-desc 4k / ring-desc 480p",
            "within 1.1x",
            ratio(median_of(rows, Transport::RingDesc, p4k), median_of(rows, Transport::RingDesc, p480)),
            |v| (1.0 / 1.1..=1.1).contains(&v),
            "needs sizes 480p and 4k (--sizes ...,480p,4k) and transport ring-desc",
        ),
    ]
}

/// What zcpipe's hop adds over the bare mechanism with the same data movement (shared
/// memory written in place, eventfd wake-up), and that bare hand-off over the baseline (the
/// cost of moving the cache lines between the CPUs, which no transport avoids).
fn context(rows: &[Row]) -> Vec<Goal> {
    let p1080 = NAMED_FRAMES[2].bytes();
    let ring = median_of(rows, Transport::Ring, p1080);
    let bare = median_of(rows, Transport::ShmInplace, p1080);
    let none = median_of(rows, Transport::None, p1080);
    let item = |name: &str, a: Option<f64>, b: Option<f64>, missing: &str| {
        let value = match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        };
        Goal { name: name.into(), value, target: "for context".into(), met: None, missing: value.is_none().then(|| missing.into()) }
    };
    let mut v = vec![
        item("ring / shm-inplace at 1080p (zcpipe's hop over a bare in-place hand-off)", ring, bare, "needs size 1080p and transports ring, shm-inplace"),
        item("shm-inplace / none at 1080p (moving the frame's cache lines between the CPUs)", bare, none, "needs size 1080p and transport shm-inplace"),
    ];
    if cfg!(feature = "iceoryx2") {
        let iox = median_of(rows, Transport::Iceoryx2, p1080);
        v.push(item("iceoryx2 / ring at 1080p (the iceoryx2 peer's hop over zcpipe's)", iox, ring, "needs size 1080p and transports iceoryx2, ring"));
    }
    v
}

fn notes(cfg: &IpcConfig, rows: &[Row]) -> Vec<String> {
    let mut v = vec![];
    for t in &cfg.transports {
        v.push(format!("{}: {}", t.name(), t.legend()));
    }
    if let Some(max) = transports::mq_msgsize_max() {
        if cfg.transports.contains(&Transport::Mq) && rows.iter().any(|r| r.transport == "mq" && r.status == Status::Skipped) {
            v.push(format!(
                "mq runs only where the message fits /proc/sys/fs/mqueue/msgsize_max ({max} B here); larger sizes are skipped"
            ));
        }
    }
    match cfg.cold {
        Some(n) => v.push(format!("--cold: every buffer (private, shared, pool) cycles through {n} per direction, as a camera's queue does")),
        None => v.push("hot caches: one buffer per direction and side, reused every round trip (--cold N cycles N)".into()),
    }
    v.push(
        "on a busy machine other processes preempt both sides (a message that needs many wake-ups, like a pipe's, \
         suffers most): run on an idle board, or under `chrt -f 10` (the echo process inherits the policy)"
            .into(),
    );
    if !cfg!(feature = "iceoryx2") {
        v.push(
            "iceoryx2 is not measured: this zcpipe was built without the `iceoryx2` cargo feature \
             (`cargo build --release --features iceoryx2`, needs libclang-dev)"
                .into(),
        );
    }
    v
}

fn host_info() -> Host {
    let uts = nix::sys::utsname::uname().ok();
    let s = |f: fn(&nix::sys::utsname::UtsName) -> &std::ffi::OsStr| uts.as_ref().map(|u| f(u).to_string_lossy().into_owned()).unwrap_or_default();
    Host {
        kernel: format!("{} {}", s(|u| u.sysname()), s(|u| u.release())),
        machine: s(|u| u.machine()),
        cpus_online: nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_ONLN).ok().flatten().unwrap_or(0) as usize,
        loadavg: std::fs::read_to_string("/proc/loadavg").map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" ")).unwrap_or_default(),
        scheduling: scheduling(),
    }
}

/// This process's scheduling policy and real-time priority, from /proc/self/stat (fields
/// 40 `rt_priority` and 41 `policy`, proc(5)).
fn scheduling() -> String {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    // `rest` starts at field 3 (state).
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<i64>().ok());
    match (field(41), field(40)) {
        (Some(0), _) => "SCHED_OTHER".into(),
        (Some(1), Some(p)) => format!("SCHED_FIFO {p}"),
        (Some(2), Some(p)) => format!("SCHED_RR {p}"),
        (Some(3), _) => "SCHED_BATCH".into(),
        (Some(5), _) => "SCHED_IDLE".into(),
        (Some(6), _) => "SCHED_DEADLINE".into(),
        _ => "unknown".into(),
    }
}

fn fmt_us(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.2}")
    } else if v < 1000.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

impl IpcReport {
    /// The report as markdown: a few lines on how it was measured, the table (columns:
    /// transport, size, median µs, min µs, max µs, ratio to `none`), the goals, the legend.
    pub fn markdown(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "# zcpipe bench ipc\n");
        let _ = writeln!(
            o,
            "One-way latency between two processes, µs: half a ping-pong round trip; each side writes the whole message, \
             the other reads one byte in 64. A run is {} round trips and counts half their median; the table gives the \
             median, min and max of {} runs (interleaved: round 1 of every row, then round 2, ...); `vs none` is the \
             median over the no-transfer baseline of the same size.\n",
            match self.iters {
                Some(n) => n.to_string(),
                None => "2000 (fewer for big messages: about 128 MiB per run, at least 32)".into(),
            },
            self.rounds
        );
        let _ = writeln!(o, "- CPUs: {}", self.placement.description);
        let _ = writeln!(
            o,
            "- host: {} {}, {} CPUs online, load average {} at start; scheduling {}",
            self.host.kernel, self.host.machine, self.host.cpus_online, self.host.loadavg, self.host.scheduling
        );
        let _ = writeln!(o, "- frame ring pool: {}", self.ring_memory);
        let _ = writeln!(
            o,
            "- buffers: {}",
            match self.cold_buffers {
                Some(n) => format!("cold, {n} per direction cycled"),
                None => "hot, one per direction".into(),
            }
        );
        let _ = writeln!(o);
        let _ = writeln!(o, "| transport | size | median µs | min µs | max µs | vs none |");
        let _ = writeln!(o, "|---|---|---:|---:|---:|---:|");
        for r in &self.rows {
            let size = MsgSize::from_bytes(r.size_bytes).table_label();
            match (r.status, r.median_us, r.min_us, r.max_us) {
                (Status::Ok, Some(m), Some(lo), Some(hi)) => {
                    let ratio = r.ratio_to_none.map(|x| format!("{x:.2}x")).unwrap_or_else(|| "–".into());
                    let _ = writeln!(o, "| {} | {size} | {} | {} | {} | {ratio} |", r.transport, fmt_us(m), fmt_us(lo), fmt_us(hi));
                }
                (s, ..) => {
                    let what = if s == Status::Failed { "FAILED" } else { "skipped" };
                    let why = r.reason.as_deref().unwrap_or("").replace('|', "/");
                    let _ = writeln!(o, "| {} | {size} | {what}: {why} | | | |", r.transport);
                }
            }
        }
        let _ = writeln!(o, "\nGoals (issue 5):\n");
        for g in &self.goals {
            match (g.value, g.met) {
                (Some(v), Some(met)) => {
                    let _ = writeln!(o, "- {}: {v:.2}x (goal {}): {}", g.name, g.target, if met { "met" } else { "MISSED" });
                }
                _ => {
                    let _ = writeln!(o, "- {}: not measured ({})", g.name, g.missing.as_deref().unwrap_or(""));
                }
            }
        }
        for c in self.context.iter().filter(|c| c.value.is_some()) {
            let _ = writeln!(o, "- for context: {}: {:.2}x", c.name, c.value.unwrap_or_default());
        }
        let _ = writeln!(o, "\nNotes:\n");
        for n in &self.notes {
            let _ = writeln!(o, "- {n}");
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        let b = |s: &str| parse_size(s).map(|m| m.bytes);
        assert_eq!(b("64"), Ok(64));
        assert_eq!(b("4K"), Ok(4096));
        assert_eq!(b("4KiB"), Ok(4096));
        assert!(b("64k").is_err());
        assert_eq!(b("1M"), Ok(1 << 20));
        assert_eq!(b("1m"), Ok(1 << 20));
        assert_eq!(b("1080p"), Ok(3_110_400));
        assert_eq!(b("3110400").map(|_| parse_size("3110400").unwrap().label()), Ok("1080p".into()));
        assert_eq!(b("480p"), Ok(460_800));
        assert_eq!(b("4k"), Ok(12_441_600));
        assert_eq!(b("2160p"), Ok(12_441_600));
        assert!(b("0").is_err());
        assert!(b("65M").is_err());
        assert!(b("12q").is_err());
        assert!(b("").is_err());
        assert!(b("K").is_err());
        assert_eq!(parse_size("64K").unwrap().label(), "64 KiB");
        assert_eq!(parse_size("100").unwrap().label(), "100 B");
    }

    #[test]
    fn layouts_validate() {
        for s in ["1", "64", "4K", "64K", "1M", "480p", "1080p", "4k", "12345", "64M"] {
            let m = parse_size(s).unwrap();
            let l = transports::layout_for(&m);
            let need = l.bytes_needed().max(m.bytes as u64);
            assert!(l.bytes_needed() >= m.bytes as u64, "{s}");
            l.validate(&[need.div_ceil(4096) * 4096]).unwrap_or_else(|e| panic!("{s}: {e}"));
        }
    }
}

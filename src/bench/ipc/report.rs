//! What `zcpipe bench ipc` reports: one [`Row`] per transport and size, the goals of issue 5
//! and their context, the notes, and the machine; as JSON ([`IpcReport`]) or markdown
//! ([`IpcReport::markdown`]).

use std::fmt::Write as _;

use serde::Serialize;

use super::transports;
use super::{IpcConfig, MsgSize, Transport, NAMED_FRAMES};
use zcpipe_core::config::Choice;

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
    pub(super) fn new(t: Transport, size: &MsgSize, iters: u32) -> Row {
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

fn median_of(rows: &[Row], t: Transport, bytes: usize) -> Option<f64> {
    rows.iter().find(|r| r.transport == t.name() && r.size_bytes == bytes).and_then(|r| r.median_us)
}

/// Issue 5's goals: the ring hop close to the no-transfer floor at 1080p, far ahead of a
/// Unix socket, and a descriptor hop whose cost does not depend on the frame size; issue
/// 18's: the descriptor hop within 1.1x of a Unix socket at 64 B.
pub(super) fn goals(rows: &[Row]) -> Vec<Goal> {
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
            "ring-desc / unix at 64 B (a descriptor hop as cheap as a socket's send and receive)",
            "<= 1.1x",
            ratio(median_of(rows, Transport::RingDesc, 64), median_of(rows, Transport::Unix, 64)),
            |v| v <= 1.1,
            "needs size 64 and transports ring-desc, unix",
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
pub(super) fn context(rows: &[Row]) -> Vec<Goal> {
    let p1080 = NAMED_FRAMES[2].bytes();
    let ring = median_of(rows, Transport::Ring, p1080);
    let bare = median_of(rows, Transport::ShmInplace, p1080);
    let none = median_of(rows, Transport::None, p1080);
    let item = |name: &str, a: Option<f64>, b: Option<f64>, missing: &str| {
        let value = match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        };
        Goal {
            name: name.into(),
            value,
            target: "for context".into(),
            met: None,
            missing: value.is_none().then(|| missing.into()),
        }
    };
    let mut v = vec![
        item(
            "ring-spin / ring-desc at 64 B (what the adaptive 50 µs spin saves on a ping-pong)",
            median_of(rows, Transport::RingSpin, 64),
            median_of(rows, Transport::RingDesc, 64),
            "needs size 64 and transports ring-spin, ring-desc",
        ),
        item(
            "ring / shm-inplace at 1080p (zcpipe's hop over a bare in-place hand-off)",
            ring,
            bare,
            "needs size 1080p and transports ring, shm-inplace",
        ),
        item(
            "shm-inplace / none at 1080p (moving the frame's cache lines between the CPUs)",
            bare,
            none,
            "needs size 1080p and transport shm-inplace",
        ),
    ];
    if cfg!(feature = "iceoryx2") {
        let iox = median_of(rows, Transport::Iceoryx2, p1080);
        v.push(item(
            "iceoryx2 / ring at 1080p (the iceoryx2 peer's hop over zcpipe's)",
            iox,
            ring,
            "needs size 1080p and transports iceoryx2, ring",
        ));
    }
    v
}

pub(super) fn notes(cfg: &IpcConfig, rows: &[Row]) -> Vec<String> {
    let mut v = vec![];
    for t in &cfg.transports {
        v.push(format!("{}: {}", t.name(), t.legend()));
    }
    if let Some(max) = transports::mq_msgsize_max() {
        if cfg.transports.contains(&Transport::Mq)
            && rows.iter().any(|r| r.transport == "mq" && r.status == Status::Skipped)
        {
            v.push(format!(
                "mq runs only where the message fits /proc/sys/fs/mqueue/msgsize_max ({max} B here); larger sizes are skipped"
            ));
        }
    }
    match cfg.cold {
        Some(n) => v.push(format!(
            "--cold: every buffer (private, shared, pool) cycles through {n} per direction, as a camera's queue does"
        )),
        None => {
            v.push("hot caches: one buffer per direction and side, reused every round trip (--cold N cycles N)".into())
        }
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

pub(super) fn host_info() -> Host {
    let uts = nix::sys::utsname::uname().ok();
    let s = |f: fn(&nix::sys::utsname::UtsName) -> &std::ffi::OsStr| {
        uts.as_ref().map(|u| f(u).to_string_lossy().into_owned()).unwrap_or_default()
    };
    Host {
        kernel: format!("{} {}", s(|u| u.sysname()), s(|u| u.release())),
        machine: s(|u| u.machine()),
        cpus_online: nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_ONLN).ok().flatten().unwrap_or(0)
            as usize,
        loadavg: std::fs::read_to_string("/proc/loadavg")
            .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .unwrap_or_default(),
        scheduling: scheduling(),
    }
}

/// This process's scheduling policy and real-time priority, from /proc/self/stat (fields
/// 40 `rt_priority` and 41 `policy`, proc(5)).
fn scheduling() -> String {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> =
        stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
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
                    let _ = writeln!(
                        o,
                        "| {} | {size} | {} | {} | {} | {ratio} |",
                        r.transport,
                        fmt_us(m),
                        fmt_us(lo),
                        fmt_us(hi)
                    );
                }
                (s, ..) => {
                    let what = if s == Status::Failed { "FAILED" } else { "skipped" };
                    let why = r.reason.as_deref().unwrap_or("").replace('|', "/");
                    let _ = writeln!(o, "| {} | {size} | {what}: {why} | | | |", r.transport);
                }
            }
        }
        let _ = writeln!(o, "\nGoals:\n");
        for g in &self.goals {
            match (g.value, g.met) {
                (Some(v), Some(met)) => {
                    let _ = writeln!(
                        o,
                        "- {}: {v:.2}x (goal {}): {}",
                        g.name,
                        g.target,
                        if met { "met" } else { "MISSED" }
                    );
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

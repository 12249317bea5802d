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
//!
//! Files: `config.rs` (what to measure: transports, message sizes, [`IpcConfig`]), this one
//! (running the measurements), `report.rs` (the rows, goals and notes, as JSON or markdown).
//! The command line (`zcpipe bench ipc`) is in `cli`, which builds the [`IpcConfig`].

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::proc::{self, AffinityRestore, Placement, SignalGuard};
use super::transports::{self, Ctx, Prepared};
use zcpipe_core::config::Choice;
use zcpipe_core::dmabuf::Allocator;

mod config;
mod report;

pub use config::*;
pub use report::*;

/// Runs `zcpipe bench ipc`: measures `cfg` and prints the report on stdout, JSON if `json`
/// else markdown; exit code 1 if any row failed.
pub fn run(cfg: &IpcConfig, json: bool) -> Result<i32> {
    let report = measure(cfg)?;
    if json {
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
    let alloc =
        Allocator::open(cfg.heap, Path::new("/dev/dma_heap"), Path::new("/dev/udmabuf"), Path::new("/dev/dri"))?;
    let host = report::host_info();
    let _signals = SignalGuard::install()?;
    let _affinity = AffinityRestore::save()?;
    if let Some(c) = placement.timing_cpu {
        proc::pin_self(c)?;
    }
    // The frame ring's sockets: a private directory, removed on drop.
    let dir = tempfile::Builder::new()
        .prefix("zcpipe-bench-")
        .tempdir()
        .context("creating a directory for the frame ring's sockets")?;
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
                dir: dir.path(),
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
        row.median_us = Some(zcpipe_core::metrics::median(&mut sorted));
        row.min_us = sorted.first().copied();
        row.max_us = sorted.last().copied();
    }
    for i in 0..rows.len() {
        let base =
            rows.iter().find(|b| b.transport == "none" && b.size_bytes == rows[i].size_bytes).and_then(|b| b.median_us);
        rows[i].ratio_to_none = match (rows[i].median_us, base) {
            (Some(m), Some(b)) if b > 0.0 => Some(m / b),
            _ => None,
        };
    }
    let goals = report::goals(&rows);
    let context = report::context(&rows);
    let notes = report::notes(cfg, &rows);
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
    let limit =
        Duration::from_secs(30) + Duration::from_secs_f64(messages as f64 * (2e-3 + ctx.size.bytes as f64 * 40e-9));
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
            median_us: zcpipe_core::metrics::median(&mut rtt_ns) / 2e3,
            mean_us: (last - start).as_secs_f64() * 1e6 / (2.0 * iters as f64),
        })
    })
}

#[cfg(test)]
mod tests;

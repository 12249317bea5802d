//! `zcpipe bench`'s command line, turned into [`crate::bench::BenchConfig`]: flag shapes and
//! ranges are checked by clap, the rest (duplicate sizes, `--cpus` count, a transport this
//! build cannot measure, the service's socket) here, once.

use anyhow::{bail, Result};
use clap::{Args, Subcommand};

use super::common::choice;
use super::detect::ServiceTarget;
use crate::bench::ipc::{parse_size, IpcConfig, MsgSize, Transport, NO_ICEORYX2};
use crate::bench::service::ServiceConfig;
use crate::bench::BenchConfig;
use zcpipe_core::dmabuf::HeapChoice;

/// `zcpipe bench`: which benchmark to run.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// The benchmark.
    #[command(subcommand)]
    pub cmd: BenchCmd,
}

/// The benchmarks.
#[derive(Subcommand, Debug, Clone)]
pub enum BenchCmd {
    /// One-way latency between two processes, per transport and message size.
    Ipc(IpcArgs),
    /// A running pipeline's inference service: a client's round trip per request, minus the
    /// engine's run and the letterbox (the service's own cost); `--hold` keeps a client
    /// connected to measure its memory.
    Service(ServiceArgs),
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
    #[arg(long, value_parser = choice::<Transport>(), value_delimiter = ',')]
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
    #[arg(long, value_parser = choice::<HeapChoice>(), default_value = "auto")]
    pub heap: HeapChoice,
}

impl BenchArgs {
    /// The benchmark to run, checked ([`IpcArgs::config`]).
    pub fn config(&self) -> Result<BenchConfig> {
        match &self.cmd {
            BenchCmd::Ipc(a) => Ok(BenchConfig::Ipc { config: a.config()?, json: a.json }),
            BenchCmd::Service(a) => Ok(BenchConfig::Service(a.config()?)),
        }
    }
}

impl IpcArgs {
    /// What to measure: sizes without duplicates (at least one), the transports asked for in
    /// table order with the `none` baseline first, `--cpus` as exactly two CPUs. Errors name
    /// the flag: an empty `--sizes`, `--cpus` with other than two numbers, `--transports
    /// iceoryx2` in a build without the `iceoryx2` feature.
    pub fn config(&self) -> Result<IpcConfig> {
        let mut sizes: Vec<MsgSize> = vec![];
        for s in &self.sizes {
            if !sizes.iter().any(|x| x.bytes == s.bytes) {
                sizes.push(s.clone());
            }
        }
        if sizes.is_empty() {
            bail!("--sizes: give at least one size");
        }
        if !cfg!(feature = "iceoryx2") && self.transports.contains(&Transport::Iceoryx2) {
            bail!("{NO_ICEORYX2}");
        }
        let measurable = Transport::measurable();
        let want: Vec<Transport> =
            if self.transports.is_empty() { measurable.clone() } else { self.transports.clone() };
        let transports = measurable.into_iter().filter(|t| *t == Transport::None || want.contains(t)).collect();
        let cpus = match self.cpus.as_deref() {
            None => None,
            Some([x, y]) => Some([*x, *y]),
            Some(v) => bail!("--cpus takes two CPU numbers, e.g. --cpus 0,1 (got {})", v.len()),
        };
        Ok(IpcConfig {
            sizes,
            transports,
            rounds: self.rounds.max(1),
            iters: self.iters,
            cold: self.cold,
            cpus,
            heap: self.heap,
        })
    }
}

/// `zcpipe bench service`: requests to a running pipeline's inference service, timed.
#[derive(Args, Debug, Clone)]
pub struct ServiceArgs {
    /// The service to ask.
    #[command(flatten)]
    pub target: ServiceTarget,
    /// The registered NV12 picture's size, WxH (each 2 to 4096).
    #[arg(long, value_name = "WxH", value_parser = parse_wxh, default_value = "640x480")]
    pub size: (u32, u32),
    /// Requests measured, one after another (after 10 warm-up requests).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub requests: u32,
    /// Measure nothing: connect, register, run 10 requests, then keep the connection open
    /// this many seconds (to measure a client's memory) and exit 0.
    #[arg(long, value_name = "SECONDS")]
    pub hold: Option<f64>,
    /// Print one JSON object instead of the markdown table.
    #[arg(long)]
    pub json: bool,
}

/// `WxH`, each side 2..=4096.
fn parse_wxh(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("{s:?}: use WxH, e.g. 640x480, each side 2 to 4096");
    let (w, h) = s.split_once(['x', 'X']).ok_or_else(bad)?;
    let (w, h): (u32, u32) = (w.trim().parse().map_err(|_| bad())?, h.trim().parse().map_err(|_| bad())?);
    if !(2..=4096).contains(&w) || !(2..=4096).contains(&h) {
        return Err(bad());
    }
    Ok((w, h))
}

impl ServiceArgs {
    /// The socket and the wait ([`ServiceTarget::resolve`]), and the range clap does not
    /// check: `--hold`.
    pub fn config(&self) -> Result<ServiceConfig> {
        let (socket, timeout) = self.target.resolve()?;
        if let Some(h) = self.hold {
            if !(0.0..=86_400.0).contains(&h) {
                bail!("--hold {h}: use seconds from 0 up to 86400");
            }
        }
        Ok(ServiceConfig {
            socket,
            size: self.size,
            requests: self.requests,
            hold: self.hold,
            timeout,
            json: self.json,
        })
    }
}

#[cfg(test)]
mod service_tests {
    use super::parse_wxh;

    #[test]
    fn wxh() {
        assert_eq!(parse_wxh("640x480"), Ok((640, 480)));
        assert_eq!(parse_wxh("2X2"), Ok((2, 2)));
        for bad in ["640", "0x480", "640x4097", "axb", "640x480x3", ""] {
            assert!(parse_wxh(bad).is_err(), "{bad}");
        }
    }
}

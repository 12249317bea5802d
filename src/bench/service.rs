//! `zcpipe bench service`: what the inference service of a running pipeline adds to a
//! client's request, beyond the model's own run.
//!
//! Method: one client connects to the service's socket, registers one raw NV12 picture of
//! `--size` (a sealed memfd holding gradients and a few blocks, so the letterbox reads a real
//! picture), runs [`WARMUP`] requests that are not counted, then `--requests` `request`-kind
//! requests one after another ([`Client::detect`]), each timed on the client with the
//! monotonic clock from before its send to its answer read. Each answer says how long the
//! service's engine ran (`latency_us.infer`), its letterbox on the CPU (`latency_us.scale`)
//! and the request's wait for a free engine (`latency_us.capture`). The report gives, over
//! the requests, p50 and p99 of the round trip, of the engine, of the letterbox, of the wait,
//! of the round trip minus the engine, and of the service's glue: the round trip minus the
//! engine and the letterbox (the sockets, the JSON both ways, the scheduler, the wake-ups;
//! with a pipeline running, also any wait behind its own frames).
//!
//! `--hold SECONDS` measures nothing: it connects, registers the picture, runs
//! [`WARMUP`] requests, prints one `holding` line on stdout and keeps the connection open
//! for SECONDS (for `benches/npu_service.sh` to read a client's memory), then exits 0.
//!
//! Touches only its own connection; never the pipeline. Errors are one line (the client's
//! [`ClientError`] text).

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;

use super::proc::{self, SignalGuard};
use zcpipe_core::service::client::{memfd_with, Client, ClientError};
use zcpipe_core::service::BufferSpec;

/// Requests run before the measured ones (and in `--hold` mode, before holding).
pub const WARMUP: u32 = 10;

/// What `zcpipe bench service` does, as the command line asked.
#[derive(Clone, Debug)]
pub struct ServiceConfig {
    /// The service's socket.
    pub socket: PathBuf,
    /// The registered picture's width and height, pixels.
    pub size: (u32, u32),
    /// Requests measured.
    pub requests: u32,
    /// `Some(seconds)`: hold the connection open that long instead of measuring.
    pub hold: Option<f64>,
    /// How long one answer may take.
    pub timeout: Duration,
    /// Print JSON instead of the markdown table.
    pub json: bool,
}

/// p50 and p99 of one quantity over the requests, µs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Percentiles {
    /// The median.
    pub p50: f64,
    /// The 99th percentile.
    pub p99: f64,
}

impl Percentiles {
    /// Nearest-rank p50 and p99 of `v` (zeros when empty).
    pub fn of(v: &[f64]) -> Percentiles {
        let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
        if s.is_empty() {
            return Percentiles::default();
        }
        s.sort_by(f64::total_cmp);
        let rank = |q: f64| s[((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1];
        Percentiles { p50: round1(rank(0.50)), p99: round1(rank(0.99)) }
    }
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// What one measurement found (the JSON of `--json`).
#[derive(Clone, Debug, Serialize)]
pub struct ServiceReport {
    /// The service's socket.
    pub socket: String,
    /// The client's name as the service gave it.
    pub client: String,
    /// The service's detector (`onnx`, `rknn`, `none`, ...).
    pub detector: String,
    /// The model's input, pixels.
    pub model_input: [u32; 2],
    /// The registered picture: `WxH NV12`, memfd.
    pub picture: String,
    /// Requests measured (after the warm-up).
    pub requests: u32,
    /// Requests run before them, not counted.
    pub warmup: u32,
    /// Client round trip: from before the request's send to its answer read, µs.
    pub round_trip_us: Percentiles,
    /// The engine's run (`latency_us.infer`), µs.
    pub engine_us: Percentiles,
    /// The letterbox on the CPU (`latency_us.scale`), µs.
    pub letterbox_us: Percentiles,
    /// The request's wait for a free engine (`latency_us.capture`), µs.
    pub wait_us: Percentiles,
    /// Round trip minus engine, µs.
    pub minus_engine_us: Percentiles,
    /// Round trip minus engine minus letterbox: the service's glue, µs.
    pub glue_us: Percentiles,
}

/// Runs `zcpipe bench service` with `cfg`; prints the report (or, with `--hold`, one line)
/// on stdout. Exit code 0; errors are one line.
pub fn run(cfg: &ServiceConfig) -> Result<i32> {
    let _signals = SignalGuard::install()?;
    let (mut client, index) = connect(cfg).map_err(anyhow::Error::new)?;
    if let Some(secs) = cfg.hold {
        return hold(&mut client, index, secs);
    }
    let report = measure(cfg, &mut client, index)?;
    if cfg.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", markdown(&report));
    }
    Ok(0)
}

/// Connects, registers the picture and runs the warm-up; returns the client and the
/// picture's buffer index.
fn connect(cfg: &ServiceConfig) -> Result<(Client, u32), ClientError> {
    let spec = BufferSpec::nv12(cfg.size.0, cfg.size.1);
    spec.layout().map_err(|e| ClientError::Other(format!("--size {}x{}: {e}", cfg.size.0, cfg.size.1)))?;
    let fd = memfd_with(&picture(&spec))?;
    let mut client = Client::connect_within(&cfg.socket, "zcpipe-bench", 0.0, cfg.timeout)?;
    let index = client.register(&[(&fd, spec)])?;
    drop(fd); // the service holds its own reference
    for _ in 0..WARMUP {
        client.detect(index)?;
    }
    Ok((client, index))
}

/// `--hold`: says so on stdout, then keeps the connection open `secs` seconds (or until
/// SIGINT or SIGTERM).
fn hold(client: &mut Client, index: u32, secs: f64) -> Result<i32> {
    println!("holding: {} (buffer {index}, {WARMUP} requests answered) for {secs} s", client.welcome().client);
    std::io::stdout().flush()?;
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while !proc::interrupted() {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
    Ok(0)
}

/// The measured requests.
fn measure(cfg: &ServiceConfig, client: &mut Client, index: u32) -> Result<ServiceReport> {
    let n = cfg.requests as usize;
    let (mut rt, mut engine, mut lb, mut wait, mut minus_engine, mut glue) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..n {
        let t = Instant::now();
        let frame = client.detect(index).map_err(anyhow::Error::new)?;
        let us = t.elapsed().as_secs_f64() * 1e6;
        let l = &frame.latency_us;
        rt.push(us);
        engine.push(l.infer);
        lb.push(l.scale);
        wait.push(l.capture);
        minus_engine.push(us - l.infer);
        glue.push(us - l.infer - l.scale);
    }
    let w = client.welcome();
    Ok(ServiceReport {
        socket: cfg.socket.display().to_string(),
        client: w.client.clone(),
        detector: w.detector.clone(),
        model_input: w.input,
        picture: format!("{}x{} NV12, sealed memfd", cfg.size.0, cfg.size.1),
        requests: cfg.requests,
        warmup: WARMUP,
        round_trip_us: Percentiles::of(&rt),
        engine_us: Percentiles::of(&engine),
        letterbox_us: Percentiles::of(&lb),
        wait_us: Percentiles::of(&wait),
        minus_engine_us: Percentiles::of(&minus_engine),
        glue_us: Percentiles::of(&glue),
    })
}

/// The report as a small markdown table.
pub fn markdown(r: &ServiceReport) -> String {
    let mut s = format!(
        "\n### Inference service at {}: detector {} ({}x{} input); {}; {} requests one after \
         another after {} warm-up; client {}\n\n",
        r.socket, r.detector, r.model_input[0], r.model_input[1], r.picture, r.requests, r.warmup, r.client
    );
    s.push_str("| µs per request | p50 | p99 |\n|---|---|---|\n");
    let rows = [
        ("round trip (client, CLOCK_MONOTONIC)", r.round_trip_us),
        ("engine (latency_us.infer)", r.engine_us),
        ("letterbox on the CPU (latency_us.scale)", r.letterbox_us),
        ("wait for an engine (latency_us.capture)", r.wait_us),
        ("round trip - engine", r.minus_engine_us),
        ("glue: round trip - engine - letterbox", r.glue_us),
    ];
    for (name, p) in rows {
        s.push_str(&format!("| {name} | {:.1} | {:.1} |\n", p.p50, p.p99));
    }
    s
}

/// A picture that is not flat: luma gradients with a few blocks, chroma gradients.
fn picture(spec: &BufferSpec) -> Vec<u8> {
    let (w, h) = (spec.width as usize, spec.height as usize);
    let mut bytes = vec![0u8; spec.size as usize];
    let (y, uv) = (spec.planes[0], spec.planes[1]);
    for row in 0..h {
        for col in 0..w {
            let block = (row / 64 + col / 64) % 3 == 0;
            let v = if block { 235 - (row * 200 / h) } else { 16 + (col + row) * 219 / (w + h) };
            bytes[y.offset as usize + row * y.bytesperline as usize + col] = v as u8;
        }
    }
    for row in 0..h.div_ceil(2) {
        for col in 0..w.div_ceil(2) {
            let at = uv.offset as usize + row * uv.bytesperline as usize + 2 * col;
            bytes[at] = (64 + col * 2 * 128 / w.max(1)) as u8;
            bytes[at + 1] = (192 - row * 2 * 128 / h.max(1)) as u8;
        }
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(Percentiles::of(&v), Percentiles { p50: 50.0, p99: 99.0 });
        assert_eq!(Percentiles::of(&[]), Percentiles::default());
        assert_eq!(Percentiles::of(&[3.0]), Percentiles { p50: 3.0, p99: 3.0 });
    }

    #[test]
    fn picture_fits_its_buffer() {
        for (w, h) in [(640, 480), (17, 9), (2, 2)] {
            let spec = BufferSpec::nv12(w, h);
            let p = picture(&spec);
            assert_eq!(p.len() as u64, spec.size);
            assert!(p.iter().any(|&b| b != p[0]));
        }
    }
}

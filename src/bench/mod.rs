//! `zcpipe bench`: measurements a user runs on their own board.
//!
//! `zcpipe bench ipc` ([`ipc`]) times one message between two processes pinned to two CPUs
//! for every transport a pipeline could use (pipe, POSIX message queue, Unix and TCP
//! sockets, shared memory three ways, zcpipe's own frame ring, and iceoryx2 with the
//! `iceoryx2` cargo feature) at message sizes from 64 B
//! to a video frame, next to a no-transfer baseline, so the table shows where shared memory
//! starts to pay on that machine.
//!
//! `zcpipe bench service` ([`service`]) times a client's requests to a running pipeline's
//! inference service and subtracts the engine's and the letterbox's own times, leaving what
//! the service's glue costs; `--hold` keeps one client connected, to measure its memory.
//!
//! This module owns its measuring processes (a fork per transport and size) and nothing
//! else: it never touches a running pipeline (`service` is only one client of its inference
//! service), and it removes every socket, message queue and temporary directory it made. It
//! takes a plain [`BenchConfig`] (the command line is in `cli`) and keeps its own signal
//! flags (`proc`), set by its own handlers for the duration of a measurement.

#[cfg(feature = "iceoryx2")]
mod iceoryx2;
pub mod ipc;
mod proc;
pub mod service;
mod transports;

/// A benchmark to run and how to print it: what `zcpipe bench ...` asks for, built by `cli`.
#[derive(Clone, Debug)]
pub enum BenchConfig {
    /// `zcpipe bench ipc`: what to measure, and JSON (`true`) or the markdown table.
    Ipc {
        /// Transports, sizes, rounds, CPUs, heap.
        config: ipc::IpcConfig,
        /// Print JSON instead of the markdown table.
        json: bool,
    },
    /// `zcpipe bench service`: the socket, the picture, the requests or the hold.
    Service(service::ServiceConfig),
}

/// Runs a benchmark; returns the process exit code. Ctrl-C (SIGINT or SIGTERM during a
/// measurement) ends it with exit code 0 and no report: the user asked it to stop, which is
/// not an error (the error is logged at debug level).
pub fn run(bench: BenchConfig) -> anyhow::Result<i32> {
    let r = match &bench {
        BenchConfig::Ipc { config, json } => ipc::run(config, *json),
        BenchConfig::Service(config) => service::run(config),
    };
    match r {
        Err(e) if proc::interrupted() => {
            log::debug!("stopped: {e:#}");
            Ok(0)
        }
        r => r,
    }
}

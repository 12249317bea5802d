//! `zcpipe bench`: measurements a user runs on their own board.
//!
//! `zcpipe bench ipc` ([`ipc`]) times one message between two processes pinned to two CPUs
//! for every transport a pipeline could use (pipe, POSIX message queue, Unix and TCP
//! sockets, shared memory three ways, zcpipe's own frame ring, and iceoryx2 with the
//! `iceoryx2` cargo feature) at message sizes from 64 B
//! to a video frame, next to a no-transfer baseline, so the table shows where shared memory
//! starts to pay on that machine.
//!
//! This module owns its measuring processes (a fork per transport and size) and nothing
//! else: it never touches a running pipeline, and it removes every socket, message queue
//! and temporary directory it made.

#[cfg(feature = "iceoryx2")]
mod iceoryx2;
pub mod ipc;
mod proc;
mod transports;

use clap::{Args, Subcommand};

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
    Ipc(ipc::IpcArgs),
}

/// Runs `zcpipe bench ...`; returns the process exit code.
pub fn run(args: BenchArgs) -> anyhow::Result<i32> {
    match args.cmd {
        BenchCmd::Ipc(a) => ipc::run(a),
    }
}

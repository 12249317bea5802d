//! zcpipe: camera frames to an NPU without copying them, and a measurement of what that saves.
//!
//! This is the application crate: the command line ([`cli`]), `zcpipe run` ([`supervise`]),
//! what a run will use on this machine ([`plan`]), `zcpipe doctor` ([`doctor`]),
//! `zcpipe compare` ([`compare`]) and `zcpipe bench` ([`bench`]). The pipeline itself lives in
//! the workspace's lower crates (ARCHITECTURE.md draws the graph): `zcpipe-sys` (kernel and
//! vendor bindings), `zcpipe-core` (buffers, pools, rings, links, the stage skeleton, stage
//! reports), `zcpipe-track` (the trackers), and one crate per stage (`zcpipe-capture`,
//! `zcpipe-scale`, `zcpipe-infer`, `zcpipe-publish`, `zcpipe-display`).
//!
//! The re-exports below keep the crates reachable under one name for the integration tests,
//! the benches and the fakes (`zcpipe::core::frame`, `zcpipe::infer::heads`, ...).

pub mod bench;
pub mod cli;
pub mod compare;
pub mod doctor;
pub mod plan;
pub mod supervise;

pub use zcpipe_capture as capture;
pub use zcpipe_core as core;
pub use zcpipe_core::{metrics, stage};
pub use zcpipe_display as display;
pub use zcpipe_infer as infer;
pub use zcpipe_publish as publish;
pub use zcpipe_scale as scale;
pub use zcpipe_sys as sys;

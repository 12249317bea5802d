//! zcpipe: camera frames to an NPU without copying them, and a measurement of what that saves.
//!
//! The pipeline is four processes: [`capture`] -> [`scale`] -> [`infer`] -> [`publish`].
//! Pixels stay in dma-bufs allocated once at start-up ([`core::dmabuf`]); each buffer's fd
//! crosses a process boundary once, with SCM_RIGHTS ([`core::fdpass`]); after that a frame is
//! a small descriptor ([`core::frame`]) in a drop-oldest ring in a sealed memfd
//! ([`core::ring`]) with an eventfd doorbell. [`stage`] is the skeleton every stage process shares; [`supervise`] starts the four
//! stages; [`cli`] is the command-line front; [`doctor`] reports what a machine offers zcpipe; [`plan`] is what
//! `zcpipe run` will use on it.

pub mod bench;
pub mod capture;
pub mod cli;
pub mod core;
pub mod display;
pub mod doctor;
pub mod infer;
pub mod metrics;
pub mod plan;
pub mod publish;
pub mod scale;
pub mod stage;
pub mod supervise;
pub mod sys;
#[cfg(test)]
mod testing;

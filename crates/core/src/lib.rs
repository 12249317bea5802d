//! The zero-copy core: buffers, descriptors, rings, fd passing and stage links.
//!
//! Owns every piece of shared state between stage processes. It never touches pixels
//! except through [`dmabuf::CpuAccess`] guards, never puts an address in shared memory, and
//! never trusts anything a peer wrote there.

pub mod channel;
pub mod config;
pub mod control;
pub mod copy;
pub mod data;
pub mod detections;
pub mod dmabuf;
pub mod draw;
mod error;
pub mod fdpass;
pub mod frame;
pub mod hooks;
pub mod id;
pub mod link;
pub mod metrics;
pub mod packets;
pub mod pool;
pub mod rate;
pub mod ring;
pub mod schema;
pub mod secret;
pub mod service;
pub mod stage;
pub mod tap;
pub mod ts;

#[doc(hidden)]
pub use anyhow as __anyhow;
pub use error::{Error, Result};
#[cfg(any(test, feature = "testing"))]
pub mod testing;

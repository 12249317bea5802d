//! Thin, typed wrappers over the kernel interfaces zcpipe calls directly: one file per
//! subsystem, each ioctl wrapped once, each struct checked against its uapi header's size
//! and ioctl number in a test (run on x86_64 and aarch64). All `unsafe` for ioctls lives here.

pub mod dmabuf;
pub mod rga;
pub mod rknn;
pub mod udmabuf;
pub mod v4l2;

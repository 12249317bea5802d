//! Thin, typed wrappers over the kernel interfaces and vendor libraries zcpipe calls
//! directly: one module per subsystem (`dmabuf`, `udmabuf`, `v4l2` with its constants,
//! formats, buffers, stream parameters, ioctls and node probing; `rga` and `rknn` for librga
//! and librknnrt, loaded at run time with libloading), each ioctl or vendor call wrapped once,
//! each struct checked against its header's size (and each ioctl's number) in a test run on
//! x86_64 and aarch64. All `unsafe` for ioctls and vendor calls lives here; nothing here
//! makes a policy decision or knows a stage.

pub mod dmabuf;
pub mod rga;
pub mod rknn;
pub mod udmabuf;
pub mod v4l2;

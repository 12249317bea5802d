//! Thin, typed wrappers over the kernel interfaces and vendor libraries zcpipe calls
//! directly: one module per subsystem (`dmabuf`, `udmabuf`, `v4l2` with its constants,
//! formats, buffers, stream parameters, ioctls and node probing; `rga`, `rknn` and `mpp` for
//! librga, librknnrt and librockchip_mpp, loaded at run time with libloading), each ioctl or vendor call wrapped once,
//! each struct checked against its header's size (and each ioctl's number) in a test run on
//! x86_64 and aarch64. Every ioctl's `unsafe` lives here, and every vendor call has its
//! wrapper here; the few vendor calls whose contract the caller must keep are `unsafe fn`s
//! (librga's virtual-address images, librknnrt's `rknn_set_io_mem`), called with their
//! `SAFETY` line where the buffers live (and `zcpipe doctor` opens the libraries itself to
//! report whether they load). Nothing here makes a policy decision or knows a stage.

/// An I/O error in words, without Rust's ` (os error N)` suffix (`No such file or
/// directory`): for messages that go on to name the fix.
pub fn errno_words(e: &std::io::Error) -> String {
    let s = e.to_string();
    s.split(" (os error").next().unwrap_or_default().to_string()
}

pub mod board;
pub mod dmabuf;
pub mod drm;
pub mod mpp;
pub mod rga;
pub mod rknn;
pub mod udmabuf;
pub mod v4l2;

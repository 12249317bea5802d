//! Rockchip MPP (`librockchip_mpp.so`, the video decoder/encoder library of Rockchip's BSP):
//! our own thin binding of its C API, opened at run time, never linked.
//!
//! Contract: the public headers of rockchip-linux/mpp (`inc/rk_type.h`, `inc/rk_mpi.h`,
//! `inc/rk_mpi_cmd.h`, `inc/mpp_err.h`, `inc/mpp_frame.h`, `inc/mpp_packet.h`,
//! `inc/mpp_buffer.h`; read at commit ee946af0 of 2024-03, the layouts and values used here
//! date from 2018 or earlier). Only what a decoder into zcpipe's own dma-bufs needs is bound:
//! `mpp_create`/`mpp_init`/`mpp_destroy`, the [`MppApi`] table (`decode_put_packet`,
//! `decode_get_frame`, `reset`, `control`), packet and frame accessors, and the external
//! buffer group calls. Several of the header's names are macros over the exported function
//! with caller strings: `mpp_buffer_commit(group, info)` is
//! `mpp_buffer_import_with_tag(group, info, NULL, MODULE_TAG, __FUNCTION__)`,
//! `mpp_buffer_group_get_external(group, type)` is `mpp_buffer_group_get(group, type,
//! MPP_BUFFER_EXTERNAL, MODULE_TAG, __FUNCTION__)`, `mpp_buffer_get_fd(buffer)` is
//! `mpp_buffer_get_fd_with_caller(buffer, __FUNCTION__)`: the exported functions are bound,
//! with zcpipe's tag and caller strings.
//!
//! Struct layouts are checked in `tests.rs` against sizes worked out by hand from the
//! headers for LP64 (x86_64, aarch64) and ILP32; `make test-aarch64` runs them on aarch64.
//!
//! The library path is `$ZCPIPE_LIBMPP` if set, else `librockchip_mpp.so.1`, then
//! `librockchip_mpp.so` (Debian/Ubuntu for Rockchip ship the versioned name in
//! `librockchip-mpp1`; the plain one comes with `-dev`).

mod abi;
pub use abi::*;
mod library;
pub use library::*;
mod decoder;
pub use decoder::*;
mod task;
pub use task::*;
mod jpeg;
pub use jpeg::*;

#[cfg(test)]
mod tests;

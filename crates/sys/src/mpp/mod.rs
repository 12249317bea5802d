//! Rockchip MPP (`librockchip_mpp.so`, the video decoder/encoder library of Rockchip's BSP):
//! our own thin binding of its C API, opened at run time, never linked.
//!
//! Contract: the public headers of rockchip-linux/mpp (`inc/rk_type.h`, `inc/rk_mpi.h`,
//! `inc/rk_mpi_cmd.h`, `inc/mpp_err.h`, `inc/mpp_frame.h`, `inc/mpp_packet.h`,
//! `inc/mpp_buffer.h`, `inc/mpp_meta.h`, `inc/mpp_task.h`, `inc/rk_venc_cmd.h`,
//! `inc/rk_venc_cfg.h`, `inc/rk_venc_rc.h`; read at commit ee946af0 of 2024-03, the layouts
//! and values used here date from 2018 or earlier, the encoder's configuration API
//! (`mpp_enc_cfg_*`) from 2019-2020). Bound:
//! - the stream decoder into zcpipe's own dma-bufs ([`Mpp`]): `mpp_create`/`mpp_init`/
//!   `mpp_destroy`, the [`MppApi`] table (`decode_put_packet`, `decode_get_frame`, `reset`,
//!   `control`), packet and frame accessors, and the external buffer group calls;
//! - the MJPEG decoder on the task API ([`MppJpeg`]: `poll`/`dequeue`/`enqueue`, task meta,
//!   `mpp_buffer_import`);
//! - the H.264 encoder reading the caller's NV12 dma-buf in place ([`Encoder`]:
//!   `mpp_enc_cfg_*`, `MPP_ENC_SET_CFG`/`SET_HEADER_MODE`/`SET_IDR_FRAME`, the frame setters,
//!   `encode_put_frame`/`encode_get_packet`, the packet's `KEY_OUTPUT_INTRA` meta).
//!
//! Several of the header's names are macros over the exported function
//! with caller strings: `mpp_buffer_commit(group, info)` is
//! `mpp_buffer_import_with_tag(group, info, NULL, MODULE_TAG, __FUNCTION__)`,
//! `mpp_buffer_import(buffer, info)` is `mpp_buffer_import_with_tag(NULL, info, buffer, ...)`,
//! `mpp_buffer_group_get_external(group, type)` is `mpp_buffer_group_get(group, type,
//! MPP_BUFFER_EXTERNAL, MODULE_TAG, __FUNCTION__)`, `mpp_buffer_get_fd(buffer)` is
//! `mpp_buffer_get_fd_with_caller(buffer, __FUNCTION__)`, `mpp_buffer_put(buffer)` is
//! `mpp_buffer_put_with_caller(buffer, __FUNCTION__)`: the exported functions are bound,
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
mod import;
use import::*;
mod encoder;
pub use encoder::*;

#[cfg(test)]
mod tests;

//! Rockchip RKNPU2 runtime (`librknnrt.so`): our own thin binding of `rknn_api.h`.
//!
//! Contract: `rknn_api.h` of the RKNPU2 runtime 2.x (`airockchip/rknn-toolkit2`,
//! `rknpu2/runtime/Linux/librknn_api/include/rknn_api.h`; the struct layouts and enum values
//! zcpipe uses are unchanged since `rockchip-linux/rknpu2` 1.4,
//! `runtime/RK3588/Linux/librknn_api/include/rknn_api.h`). Only what zcpipe calls is bound:
//! the structs of `abi.rs` (sizes and field offsets are checked in `tests.rs` against values
//! worked out by hand from the header, for LP64: x86_64 and aarch64), the enum values, and 12
//! functions looked up by name in a library opened at run time with `libloading` (zcpipe never
//! links librknnrt: a host or a board without the runtime still runs every other backend).
//!
//! Library path: `$ZCPIPE_LIBRKNNRT` if set, else `librknnrt.so` through the dynamic loader's
//! search path (`/usr/lib`, `LD_LIBRARY_PATH`, ...).
//!
//! `char` arrays are bound as `u8` arrays: same size and alignment as `c_char` on every
//! target, and no sign confusion (`char` is signed on x86_64 and unsigned on aarch64).

mod abi;
pub use abi::*;
mod runtime;
pub use runtime::*;

#[cfg(test)]
mod tests;

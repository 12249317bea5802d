//! V4L2 video capture: formats, buffer queues (MMAP + `VIDIOC_EXPBUF`, DMABUF import) and
//! streaming, single- and multi-planar.
//!
//! Contract: `include/uapi/linux/videodev2.h` and the V4L2 userspace API,
//! `Documentation/userspace-api/media/v4l/` (`io.rst`, `mmap.rst`, `dmabuf.rst` and one
//! `vidioc-*.rst` page per ioctl, cited on each wrapper below). Struct and field names follow
//! the header (`type` is spelled `type_`); every struct is `repr(C)` with the kernel's size,
//! field offsets and alignment on LP64 Linux, checked in the tests against literals taken from
//! the header with a C compiler on x86_64 and aarch64.
//!
//! Soundness rules kept by the safe wrappers here (the kernel dereferences some user
//! pointers that a struct carries, which safe Rust must not be able to aim):
//! - `VIDIOC_QUERYBUF`/`QBUF`/`DQBUF` on a multi-planar queue take the plane array as a
//!   slice and set `m.planes` and `length` themselves ([`querybuf`], [`qbuf`], [`dqbuf`]);
//! - `VIDIOC_QBUF` with `V4L2_MEMORY_USERPTR` is refused (the device would DMA into memory
//!   that Rust code owns); zcpipe uses MMAP and DMABUF only;
//! - the format ioctls refuse the two overlay buffer types, whose `struct v4l2_window` holds
//!   `clips`/`bitmap` pointers.
//!
//! One file per seam: `consts.rs` (`V4L2_*` constants, fourccs and their names), `format.rs`
//! (capabilities, formats, sizes, intervals), `buffer.rs` (buffer queues), `parm.rs` (frame
//! interval), `ioctl.rs` (the request numbers and one safe wrapper per ioctl), all
//! re-exported here (`sys::v4l2::Format`, `sys::v4l2::s_fmt`), and [`node`] (finding and
//! naming `/dev/video*` nodes).

/// Implements `Default` as all-zero bytes, which is how the V4L2 spec asks applications to
/// initialise every argument struct ("reserved fields must be zeroed").
macro_rules! zeroed_default {
    ($($t:ty),* $(,)?) => {$(
        impl Default for $t {
            fn default() -> Self {
                // SAFETY: the type is `repr(C)` and made only of integers, arrays of integers,
                // raw pointers and unions of those, for all of which all-zero bytes are valid.
                unsafe { std::mem::zeroed() }
            }
        }
    )*};
}

mod buffer;
mod consts;
mod format;
mod ioctl;
pub mod node;
mod parm;

pub use buffer::*;
pub use consts::*;
pub use format::*;
pub use ioctl::*;
pub use parm::*;

#[cfg(test)]
mod tests;

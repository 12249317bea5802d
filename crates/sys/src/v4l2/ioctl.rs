//! The V4L2 ioctls zcpipe issues: each request number (checked against the uapi header in
//! the tests) and one safe wrapper per ioctl, which keeps the soundness rules listed in the
//! module above. All `unsafe` ioctl calls of V4L2 live here.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::buffer::{Buffer, BufferM, ExportBuffer, Plane, RequestBuffers};
use super::consts::*;
use super::format::{Capability, FmtDesc, Format, FrmIvalEnum, FrmSizeEnum, Selection};
use super::parm::StreamParm;

/// Declares one V4L2 ioctl ('V' type) from a single line: its `pub const` request number,
/// computed with nix's `request_code_*!` exactly as the `nix::ioctl_*!` raw call beside it
/// computes the number it passes to `ioctl(2)`, so the tested constant and the issued number
/// cannot drift apart.
macro_rules! v4l2_ioctl {
    (read, $raw:ident, $req:ident, $nr:literal, $ty:ty, $doc:literal) => {
        #[doc = $doc]
        pub const $req: u64 = nix::request_code_read!(b'V', $nr, size_of::<$ty>()) as u64;
        nix::ioctl_read!($raw, b'V', $nr, $ty);
    };
    (readwrite, $raw:ident, $req:ident, $nr:literal, $ty:ty, $doc:literal) => {
        #[doc = $doc]
        pub const $req: u64 = nix::request_code_readwrite!(b'V', $nr, size_of::<$ty>()) as u64;
        nix::ioctl_readwrite!($raw, b'V', $nr, $ty);
    };
    (write, $raw:ident, $req:ident, $nr:literal, $ty:ty, $doc:literal) => {
        #[doc = $doc]
        pub const $req: u64 = nix::request_code_write!(b'V', $nr, size_of::<$ty>()) as u64;
        nix::ioctl_write_ptr!($raw, b'V', $nr, $ty);
    };
}

/// The raw `unsafe` calls (private); the constants are re-exported below.
mod raw {
    use super::*;

    v4l2_ioctl!(
        read,
        querycap,
        VIDIOC_QUERYCAP,
        0,
        Capability,
        "`VIDIOC_QUERYCAP`: `_IOR('V', 0, struct v4l2_capability)`."
    );
    v4l2_ioctl!(
        readwrite,
        enum_fmt,
        VIDIOC_ENUM_FMT,
        2,
        FmtDesc,
        "`VIDIOC_ENUM_FMT`: `_IOWR('V', 2, struct v4l2_fmtdesc)`."
    );
    v4l2_ioctl!(readwrite, g_fmt, VIDIOC_G_FMT, 4, Format, "`VIDIOC_G_FMT`: `_IOWR('V', 4, struct v4l2_format)`.");
    v4l2_ioctl!(readwrite, s_fmt, VIDIOC_S_FMT, 5, Format, "`VIDIOC_S_FMT`: `_IOWR('V', 5, struct v4l2_format)`.");
    v4l2_ioctl!(
        readwrite,
        reqbufs,
        VIDIOC_REQBUFS,
        8,
        RequestBuffers,
        "`VIDIOC_REQBUFS`: `_IOWR('V', 8, struct v4l2_requestbuffers)`."
    );
    v4l2_ioctl!(
        readwrite,
        querybuf,
        VIDIOC_QUERYBUF,
        9,
        Buffer,
        "`VIDIOC_QUERYBUF`: `_IOWR('V', 9, struct v4l2_buffer)`."
    );
    v4l2_ioctl!(readwrite, qbuf, VIDIOC_QBUF, 15, Buffer, "`VIDIOC_QBUF`: `_IOWR('V', 15, struct v4l2_buffer)`.");
    v4l2_ioctl!(
        readwrite,
        expbuf,
        VIDIOC_EXPBUF,
        16,
        ExportBuffer,
        "`VIDIOC_EXPBUF`: `_IOWR('V', 16, struct v4l2_exportbuffer)`."
    );
    v4l2_ioctl!(readwrite, dqbuf, VIDIOC_DQBUF, 17, Buffer, "`VIDIOC_DQBUF`: `_IOWR('V', 17, struct v4l2_buffer)`.");
    v4l2_ioctl!(write, streamon, VIDIOC_STREAMON, 18, libc::c_int, "`VIDIOC_STREAMON`: `_IOW('V', 18, int)`.");
    v4l2_ioctl!(write, streamoff, VIDIOC_STREAMOFF, 19, libc::c_int, "`VIDIOC_STREAMOFF`: `_IOW('V', 19, int)`.");
    v4l2_ioctl!(
        readwrite,
        g_parm,
        VIDIOC_G_PARM,
        21,
        StreamParm,
        "`VIDIOC_G_PARM`: `_IOWR('V', 21, struct v4l2_streamparm)`."
    );
    v4l2_ioctl!(
        readwrite,
        s_parm,
        VIDIOC_S_PARM,
        22,
        StreamParm,
        "`VIDIOC_S_PARM`: `_IOWR('V', 22, struct v4l2_streamparm)`."
    );
    v4l2_ioctl!(
        readwrite,
        try_fmt,
        VIDIOC_TRY_FMT,
        64,
        Format,
        "`VIDIOC_TRY_FMT`: `_IOWR('V', 64, struct v4l2_format)`."
    );
    v4l2_ioctl!(
        readwrite,
        enum_framesizes,
        VIDIOC_ENUM_FRAMESIZES,
        74,
        FrmSizeEnum,
        "`VIDIOC_ENUM_FRAMESIZES`: `_IOWR('V', 74, struct v4l2_frmsizeenum)`."
    );
    v4l2_ioctl!(
        readwrite,
        enum_frameintervals,
        VIDIOC_ENUM_FRAMEINTERVALS,
        75,
        FrmIvalEnum,
        "`VIDIOC_ENUM_FRAMEINTERVALS`: `_IOWR('V', 75, struct v4l2_frmivalenum)`."
    );
    v4l2_ioctl!(
        readwrite,
        s_selection,
        VIDIOC_S_SELECTION,
        95,
        Selection,
        "`VIDIOC_S_SELECTION`: `_IOWR('V', 95, struct v4l2_selection)`."
    );
}

pub use raw::{
    VIDIOC_DQBUF, VIDIOC_ENUM_FMT, VIDIOC_ENUM_FRAMEINTERVALS, VIDIOC_ENUM_FRAMESIZES, VIDIOC_EXPBUF, VIDIOC_G_FMT,
    VIDIOC_G_PARM, VIDIOC_QBUF, VIDIOC_QUERYBUF, VIDIOC_QUERYCAP, VIDIOC_REQBUFS, VIDIOC_STREAMOFF, VIDIOC_STREAMON,
    VIDIOC_S_FMT, VIDIOC_S_PARM, VIDIOC_S_SELECTION, VIDIOC_TRY_FMT,
};

/// Runs one raw ioctl, retrying `EINTR` (a blocking DQBUF can be interrupted by a signal).
/// `EAGAIN` is returned, not retried: it is DQBUF's "no buffer ready" on a non-blocking fd.
fn retry_eintr(mut call: impl FnMut() -> nix::Result<libc::c_int>) -> io::Result<()> {
    loop {
        match call() {
            Ok(_) => return Ok(()),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(io::Error::from(e)),
        }
    }
}

fn invalid(msg: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

// ---------------------------------------------------------------------------------------------
// Safe wrappers
// ---------------------------------------------------------------------------------------------

/// `VIDIOC_QUERYCAP`: fills `arg` with the driver's identity and capabilities.
/// Documentation/userspace-api/media/v4l/vidioc-querycap.rst. `ENOTTY`: not a V4L2 node.
pub fn querycap(fd: BorrowedFd<'_>, arg: &mut Capability) -> io::Result<()> {
    // SAFETY: `fd` is live for the call; `arg` is a valid, exclusively borrowed
    // `struct v4l2_capability` of the size encoded in the request, which the kernel writes.
    retry_eintr(|| unsafe { raw::querycap(fd.as_raw_fd(), arg) })
}

/// `VIDIOC_ENUM_FMT`: fills format `arg.index` of queue `arg.type_`; `EINVAL` past the last.
/// Documentation/userspace-api/media/v4l/vidioc-enum-fmt.rst.
pub fn enum_fmt(fd: BorrowedFd<'_>, arg: &mut FmtDesc) -> io::Result<()> {
    // SAFETY: `fd` is live; `arg` is a valid, exclusively borrowed `struct v4l2_fmtdesc`
    // (no pointers inside) that the kernel reads and writes.
    retry_eintr(|| unsafe { raw::enum_fmt(fd.as_raw_fd(), arg) })
}

/// Refuses the buffer types whose format is a `struct v4l2_window`, which carries user
/// pointers (`clips`, `bitmap`) that the kernel may follow.
fn check_fmt_type(type_: u32) -> io::Result<()> {
    if type_ == V4L2_BUF_TYPE_VIDEO_OVERLAY || type_ == V4L2_BUF_TYPE_VIDEO_OUTPUT_OVERLAY {
        return Err(invalid("v4l2: overlay formats (struct v4l2_window) are not supported"));
    }
    Ok(())
}

/// `VIDIOC_G_FMT`: reads the current format of queue `arg.type_` into `arg`.
/// Documentation/userspace-api/media/v4l/vidioc-g-fmt.rst. Overlay types are refused
/// (`InvalidInput`).
pub fn g_fmt(fd: BorrowedFd<'_>, arg: &mut Format) -> io::Result<()> {
    check_fmt_type(arg.type_)?;
    // SAFETY: `fd` is live; `arg` is a valid, exclusively borrowed `struct v4l2_format` of the
    // encoded size; overlay types (the only ones with pointers in `fmt`) were refused above.
    retry_eintr(|| unsafe { raw::g_fmt(fd.as_raw_fd(), arg) })
}

/// `VIDIOC_S_FMT`: asks for format `arg`; the driver adjusts `arg` to what it set
/// (always read it back: sizes, `bytesperline` and `sizeimage` change).
/// Documentation/userspace-api/media/v4l/vidioc-g-fmt.rst. `EBUSY` while buffers are
/// allocated.
pub fn s_fmt(fd: BorrowedFd<'_>, arg: &mut Format) -> io::Result<()> {
    check_fmt_type(arg.type_)?;
    // SAFETY: as in `g_fmt`.
    retry_eintr(|| unsafe { raw::s_fmt(fd.as_raw_fd(), arg) })
}

/// `VIDIOC_S_SELECTION`: asks for rectangle `arg.r` of target `arg.target` (e.g.
/// `V4L2_SEL_TGT_COMPOSE`) on queue `arg.type_`; the driver writes back the rectangle it
/// set (always read it back). Documentation/userspace-api/media/v4l/vidioc-g-selection.rst.
/// `ENOTTY`: the driver has no selection API (vim2m); `EINVAL`: not this target or type.
pub fn s_selection(fd: BorrowedFd<'_>, arg: &mut Selection) -> io::Result<()> {
    // SAFETY: `fd` is live; `arg` is a valid, exclusively borrowed `struct v4l2_selection`
    // of the encoded size (no pointers inside) that the kernel reads and writes.
    retry_eintr(|| unsafe { raw::s_selection(fd.as_raw_fd(), arg) })
}

/// `VIDIOC_TRY_FMT`: like [`s_fmt`] without changing the device.
/// Documentation/userspace-api/media/v4l/vidioc-g-fmt.rst.
pub fn try_fmt(fd: BorrowedFd<'_>, arg: &mut Format) -> io::Result<()> {
    check_fmt_type(arg.type_)?;
    // SAFETY: as in `g_fmt`.
    retry_eintr(|| unsafe { raw::try_fmt(fd.as_raw_fd(), arg) })
}

/// `VIDIOC_REQBUFS`: allocates (MMAP) or prepares (DMABUF) `arg.count` buffers, or frees
/// them with `count = 0`; the driver writes back the count it allocated and
/// `V4L2_BUF_CAP_*`. Documentation/userspace-api/media/v4l/vidioc-reqbufs.rst.
pub fn reqbufs(fd: BorrowedFd<'_>, arg: &mut RequestBuffers) -> io::Result<()> {
    // SAFETY: `fd` is live; `arg` is a valid, exclusively borrowed
    // `struct v4l2_requestbuffers` (no pointers inside).
    retry_eintr(|| unsafe { raw::reqbufs(fd.as_raw_fd(), arg) })
}

/// For a multi-planar buffer type, aims `buf.m.planes`/`buf.length` at `planes`
/// (1..=`VIDEO_MAX_PLANES` elements); single-planar types ignore `planes`.
fn attach_planes(buf: &mut Buffer, planes: &mut [Plane]) -> io::Result<()> {
    if is_multiplanar(buf.type_) {
        if planes.is_empty() || planes.len() > VIDEO_MAX_PLANES {
            return Err(invalid("v4l2: a multi-planar buffer needs 1..=8 planes"));
        }
        buf.m = BufferM { planes: planes.as_mut_ptr() };
        buf.length = planes.len() as u32;
    }
    Ok(())
}

/// Undoes [`attach_planes`]: the pointer must not outlive the borrow of the slice.
fn detach_planes(buf: &mut Buffer) {
    if is_multiplanar(buf.type_) {
        buf.m = BufferM { planes: std::ptr::null_mut() };
    }
}

/// `VIDIOC_QUERYBUF`: fills buffer `buf.index` of queue `buf.type_`: for MMAP its `mmap()`
/// offset(s) and length(s). Multi-planar types take the plane array in `planes` (its length
/// is passed as `buf.length`; on return `buf.length` is the buffer's plane count);
/// single-planar types ignore `planes` (pass `&mut []`).
/// Documentation/userspace-api/media/v4l/vidioc-querybuf.rst.
pub fn querybuf(fd: BorrowedFd<'_>, buf: &mut Buffer, planes: &mut [Plane]) -> io::Result<()> {
    attach_planes(buf, planes)?;
    // SAFETY: `fd` is live; `buf` is a valid, exclusively borrowed `struct v4l2_buffer`; for
    // multi-planar types `m.planes` points at `planes`, exclusively borrowed for this call,
    // with `length == planes.len()`, which bounds what the kernel reads and writes there.
    let r = retry_eintr(|| unsafe { raw::querybuf(fd.as_raw_fd(), buf) });
    detach_planes(buf);
    r
}

/// `VIDIOC_QBUF`: hands buffer `buf.index` to the driver. For DMABUF set the fd(s) with
/// [`Buffer::set_fd`] / [`Plane::set_fd`] (and, for output, `bytesused`). Planes as in
/// [`querybuf`]. `V4L2_MEMORY_USERPTR` is refused (`InvalidInput`): the device would write
/// into memory that Rust code owns. Documentation/userspace-api/media/v4l/vidioc-qbuf.rst.
pub fn qbuf(fd: BorrowedFd<'_>, buf: &mut Buffer, planes: &mut [Plane]) -> io::Result<()> {
    if buf.memory == V4L2_MEMORY_USERPTR {
        return Err(invalid("v4l2: QBUF with V4L2_MEMORY_USERPTR is not supported"));
    }
    attach_planes(buf, planes)?;
    // SAFETY: as in `querybuf`; with USERPTR refused above, the kernel follows no other user
    // pointer (MMAP memory is the driver's, DMABUF fds are validated by the kernel).
    let r = retry_eintr(|| unsafe { raw::qbuf(fd.as_raw_fd(), buf) });
    detach_planes(buf);
    r
}

/// `VIDIOC_DQBUF`: takes a filled buffer back from the driver into `buf` (index, bytesused,
/// flags, timestamp, sequence); planes as in [`querybuf`]. Blocks unless the fd is
/// `O_NONBLOCK`, in which case "none ready" is `WouldBlock` (`EAGAIN`). A buffer with
/// [`Buffer::is_error`] must still be requeued.
/// Documentation/userspace-api/media/v4l/vidioc-qbuf.rst.
pub fn dqbuf(fd: BorrowedFd<'_>, buf: &mut Buffer, planes: &mut [Plane]) -> io::Result<()> {
    attach_planes(buf, planes)?;
    // SAFETY: as in `querybuf`.
    let r = retry_eintr(|| unsafe { raw::dqbuf(fd.as_raw_fd(), buf) });
    detach_planes(buf);
    r
}

/// `VIDIOC_EXPBUF`: exports plane `arg.plane` of MMAP buffer `arg.index` as a dma-buf and
/// returns its fd. `O_CLOEXEC` is always added to `arg.flags`; the access mode is the
/// caller's (`O_RDONLY` is 0, so ask for `O_RDWR` to `mmap` it writable). `arg.fd` is set
/// to -1 on return: the fd is owned by the returned `OwnedFd` only.
/// Documentation/userspace-api/media/v4l/vidioc-expbuf.rst. `EINVAL`: not MMAP, or bad
/// index/plane/flags.
pub fn expbuf(fd: BorrowedFd<'_>, arg: &mut ExportBuffer) -> io::Result<OwnedFd> {
    arg.flags |= libc::O_CLOEXEC as u32;
    arg.fd = -1;
    // SAFETY: `fd` is live; `arg` is a valid, exclusively borrowed `struct v4l2_exportbuffer`
    // (no pointers inside).
    retry_eintr(|| unsafe { raw::expbuf(fd.as_raw_fd(), arg) })?;
    let raw_fd = std::mem::replace(&mut arg.fd, -1);
    if raw_fd < 0 {
        return Err(io::Error::other("v4l2: VIDIOC_EXPBUF succeeded without returning an fd"));
    }
    // SAFETY: on success the driver installed a new dma-buf fd in our table and wrote it to
    // `arg.fd`; nothing else owns it (the struct's copy was just cleared).
    Ok(unsafe { OwnedFd::from_raw_fd(raw_fd) })
}

/// `VIDIOC_STREAMON`: starts streaming on queue `buf_type` (queue buffers first for capture).
/// Documentation/userspace-api/media/v4l/vidioc-streamon.rst.
pub fn streamon(fd: BorrowedFd<'_>, buf_type: u32) -> io::Result<()> {
    let arg = buf_type as libc::c_int;
    // SAFETY: `fd` is live; `arg` is an `int` the kernel only reads.
    retry_eintr(|| unsafe { raw::streamon(fd.as_raw_fd(), &arg) })
}

/// `VIDIOC_STREAMOFF`: stops streaming on queue `buf_type` and returns every buffer to the
/// application (dequeued state). Documentation/userspace-api/media/v4l/vidioc-streamon.rst.
pub fn streamoff(fd: BorrowedFd<'_>, buf_type: u32) -> io::Result<()> {
    let arg = buf_type as libc::c_int;
    // SAFETY: `fd` is live; `arg` is an `int` the kernel only reads.
    retry_eintr(|| unsafe { raw::streamoff(fd.as_raw_fd(), &arg) })
}

/// `VIDIOC_G_PARM`: reads the streaming parameters (frame interval) of queue `arg.type_`.
/// Documentation/userspace-api/media/v4l/vidioc-g-parm.rst.
pub fn g_parm(fd: BorrowedFd<'_>, arg: &mut StreamParm) -> io::Result<()> {
    // SAFETY: `fd` is live; `arg` is a valid, exclusively borrowed `struct v4l2_streamparm`
    // (no pointers inside).
    retry_eintr(|| unsafe { raw::g_parm(fd.as_raw_fd(), arg) })
}

/// `VIDIOC_S_PARM`: sets the streaming parameters; the driver writes back what it chose.
/// Documentation/userspace-api/media/v4l/vidioc-g-parm.rst.
pub fn s_parm(fd: BorrowedFd<'_>, arg: &mut StreamParm) -> io::Result<()> {
    // SAFETY: as in `g_parm`.
    retry_eintr(|| unsafe { raw::s_parm(fd.as_raw_fd(), arg) })
}

/// `VIDIOC_ENUM_FRAMESIZES`: fills frame size `arg.index` of `arg.pixel_format`; `EINVAL`
/// past the last. Documentation/userspace-api/media/v4l/vidioc-enum-framesizes.rst.
pub fn enum_framesizes(fd: BorrowedFd<'_>, arg: &mut FrmSizeEnum) -> io::Result<()> {
    // SAFETY: `fd` is live; `arg` is a valid, exclusively borrowed `struct v4l2_frmsizeenum`
    // (no pointers inside).
    retry_eintr(|| unsafe { raw::enum_framesizes(fd.as_raw_fd(), arg) })
}

/// `VIDIOC_ENUM_FRAMEINTERVALS`: fills frame interval `arg.index` of `arg.pixel_format` at
/// `arg.width`x`arg.height`; `EINVAL` past the last.
/// Documentation/userspace-api/media/v4l/vidioc-enum-frameintervals.rst.
pub fn enum_frameintervals(fd: BorrowedFd<'_>, arg: &mut FrmIvalEnum) -> io::Result<()> {
    // SAFETY: `fd` is live; `arg` is a valid, exclusively borrowed `struct v4l2_frmivalenum`
    // (no pointers inside).
    retry_eintr(|| unsafe { raw::enum_frameintervals(fd.as_raw_fd(), arg) })
}

//! Buffer queues: `struct v4l2_requestbuffers`, `v4l2_buffer` and its `v4l2_plane`s,
//! `v4l2_exportbuffer` (videodev2.h; `vidioc-reqbufs.rst`, `vidioc-qbuf.rst`,
//! `vidioc-expbuf.rst`, `buffer.rst`).

use std::fmt;
use std::os::fd::{AsRawFd, BorrowedFd};

use super::consts::*;

/// `struct v4l2_requestbuffers` (20 bytes): the argument of `VIDIOC_REQBUFS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RequestBuffers {
    /// Buffers wanted (in) / allocated (out); 0 frees them.
    pub count: u32,
    /// `enum v4l2_buf_type`.
    pub type_: u32,
    /// `enum v4l2_memory`.
    pub memory: u32,
    /// `V4L2_BUF_CAP_*` (set by the driver).
    pub capabilities: u32,
    /// `V4L2_MEMORY_FLAG_*`.
    pub flags: u8,
    /// Zero.
    pub reserved: [u8; 3],
}

/// `struct v4l2_timecode` (16 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Timecode {
    /// `V4L2_TC_TYPE_*`.
    pub type_: u32,
    /// `V4L2_TC_FLAG_*`.
    pub flags: u32,
    /// Frames.
    pub frames: u8,
    /// Seconds.
    pub seconds: u8,
    /// Minutes.
    pub minutes: u8,
    /// Hours.
    pub hours: u8,
    /// User bits.
    pub userbits: [u8; 4],
}

/// The `m` union of `struct v4l2_plane` (8 bytes on 64-bit).
#[repr(C)]
#[derive(Clone, Copy)]
pub union PlaneM {
    /// `V4L2_MEMORY_MMAP`: the `mmap()` offset of this plane (set by the driver).
    pub mem_offset: u32,
    /// `V4L2_MEMORY_USERPTR`: the user address.
    pub userptr: libc::c_ulong,
    /// `V4L2_MEMORY_DMABUF`: the dma-buf fd of this plane (set by the application).
    pub fd: i32,
}

/// `struct v4l2_plane` (64 bytes on 64-bit): one plane of a multi-planar buffer.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Plane {
    /// Bytes of data in the plane, including `data_offset`.
    pub bytesused: u32,
    /// Size of the plane's buffer in bytes.
    pub length: u32,
    /// Where the plane's memory is: read with [`Plane::mem_offset`] / [`Plane::fd`].
    pub m: PlaneM,
    /// Offset of the data from the start of the plane's buffer.
    pub data_offset: u32,
    /// Zero.
    pub reserved: [u32; 11],
}

impl Plane {
    /// `m.mem_offset` (MMAP planes, after QUERYBUF).
    pub(crate) fn mem_offset(&self) -> u32 {
        // SAFETY: the low 4 bytes of `m` are initialised whichever member was written last
        // (all members start at offset 0 and are at least 4 bytes), and any u32 is valid.
        unsafe { self.m.mem_offset }
    }
    /// `m.fd` (DMABUF planes).
    pub fn fd(&self) -> i32 {
        // SAFETY: as in `mem_offset`.
        unsafe { self.m.fd }
    }
    /// Sets `m.fd`, for a DMABUF plane to queue. Clears the other bytes of `m`.
    pub fn set_fd(&mut self, fd: BorrowedFd<'_>) {
        self.m = PlaneM { userptr: 0 };
        self.m.fd = fd.as_raw_fd();
    }
}

impl fmt::Debug for Plane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plane")
            .field("bytesused", &self.bytesused)
            .field("length", &self.length)
            .field("m.mem_offset/fd", &self.mem_offset())
            .field("data_offset", &self.data_offset)
            .finish()
    }
}

/// The `m` union of `struct v4l2_buffer` (8 bytes on 64-bit).
#[repr(C)]
#[derive(Clone, Copy)]
pub union BufferM {
    /// Single-planar `V4L2_MEMORY_MMAP`: the `mmap()` offset (set by the driver).
    pub offset: u32,
    /// Single-planar `V4L2_MEMORY_USERPTR`: the user address.
    pub userptr: libc::c_ulong,
    /// Multi-planar: the `struct v4l2_plane` array, `length` elements. The wrappers here set
    /// it from a slice for the duration of the ioctl and reset it to null after.
    pub planes: *mut Plane,
    /// Single-planar `V4L2_MEMORY_DMABUF`: the dma-buf fd (set by the application).
    pub fd: i32,
}

/// `struct v4l2_buffer` (88 bytes on 64-bit): the argument of `VIDIOC_QUERYBUF`/`QBUF`/`DQBUF`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Buffer {
    /// Buffer index, 0..count of REQBUFS.
    pub index: u32,
    /// `enum v4l2_buf_type`.
    pub type_: u32,
    /// Single-planar: bytes of data (multi-planar: see each [`Plane`]).
    pub bytesused: u32,
    /// `V4L2_BUF_FLAG_*`.
    pub flags: u32,
    /// `enum v4l2_field`.
    pub field: u32,
    /// Capture time; clock given by `flags & V4L2_BUF_FLAG_TIMESTAMP_MASK`.
    pub timestamp: libc::timeval,
    /// Timecode (if `V4L2_BUF_FLAG_TIMECODE`).
    pub timecode: Timecode,
    /// Frame counter set by the driver; gaps mean dropped frames.
    pub sequence: u32,
    /// `enum v4l2_memory`.
    pub memory: u32,
    /// Where the memory is (see [`BufferM`]).
    pub m: BufferM,
    /// Single-planar: buffer size in bytes. Multi-planar: number of elements of `m.planes`
    /// (in), number of planes of the buffer (out).
    pub length: u32,
    /// Zero.
    pub reserved2: u32,
    /// Media request fd with `V4L2_BUF_FLAG_REQUEST_FD` (a union with `reserved`).
    pub request_fd: i32,
}

// SAFETY: the only non-Send/Sync member is the `m.planes` pointer, which nothing in
// `sys::v4l2` dereferences; the wrappers (ioctl.rs) aim it at a caller's slice only for the
// duration of one ioctl (with that slice mutably borrowed) and reset it to null afterwards.
unsafe impl Send for Buffer {}
// SAFETY: as above; `&Buffer` gives no access to the pointee.
unsafe impl Sync for Buffer {}
// SAFETY: same argument as for `Buffer`: the union is plain data here.
unsafe impl Send for BufferM {}
// SAFETY: as above.
unsafe impl Sync for BufferM {}

impl Buffer {
    /// An all-zero buffer with `type_`, `memory` and `index` set (for QUERYBUF/QBUF/DQBUF).
    pub fn new(type_: u32, memory: u32, index: u32) -> Buffer {
        Buffer { type_, memory, index, ..Buffer::default() }
    }
    /// `m.offset` (single-planar MMAP, after QUERYBUF).
    pub fn offset(&self) -> u32 {
        // SAFETY: the low 4 bytes of `m` are initialised whichever member was written last
        // (all members start at offset 0 and are at least 4 bytes), and any u32 is valid.
        unsafe { self.m.offset }
    }
    /// `m.fd` (single-planar DMABUF).
    pub fn fd(&self) -> i32 {
        // SAFETY: as in `offset`.
        unsafe { self.m.fd }
    }
    /// Sets `m.fd`, for a single-planar DMABUF buffer to queue. Clears the rest of `m`.
    pub fn set_fd(&mut self, fd: BorrowedFd<'_>) {
        self.m = BufferM { userptr: 0 };
        self.m.fd = fd.as_raw_fd();
    }
    /// The timestamp in nanoseconds of the clock named by [`Buffer::timestamp_is_monotonic`].
    // `time_t`/`suseconds_t` are i64 on x86_64 and aarch64 but i32 on 32-bit ABIs.
    #[allow(clippy::useless_conversion)]
    pub fn timestamp_ns(&self) -> i64 {
        i64::from(self.timestamp.tv_sec) * 1_000_000_000 + i64::from(self.timestamp.tv_usec) * 1_000
    }
    /// The timestamp is `CLOCK_MONOTONIC` (`V4L2_BUF_FLAG_TIMESTAMP_MONOTONIC`).
    pub fn timestamp_is_monotonic(&self) -> bool {
        self.flags & V4L2_BUF_FLAG_TIMESTAMP_MASK == V4L2_BUF_FLAG_TIMESTAMP_MONOTONIC
    }
    /// The driver flagged the data as possibly corrupt (`V4L2_BUF_FLAG_ERROR`).
    pub fn is_error(&self) -> bool {
        self.flags & V4L2_BUF_FLAG_ERROR != 0
    }
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer")
            .field("index", &self.index)
            .field("type_", &self.type_)
            .field("bytesused", &self.bytesused)
            .field("flags", &format_args!("{:#x}", self.flags))
            .field("field", &self.field)
            .field("timestamp", &format_args!("{}.{:06}", self.timestamp.tv_sec, self.timestamp.tv_usec))
            .field("sequence", &self.sequence)
            .field("memory", &self.memory)
            .field("m.offset/fd", &self.offset())
            .field("length", &self.length)
            .finish()
    }
}

/// `struct v4l2_exportbuffer` (64 bytes): the argument of `VIDIOC_EXPBUF`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ExportBuffer {
    /// `enum v4l2_buf_type` of the queue.
    pub type_: u32,
    /// Buffer index.
    pub index: u32,
    /// Plane index (0 for single-planar).
    pub plane: u32,
    /// `O_CLOEXEC` and an access mode (`O_RDONLY` = 0, `O_WRONLY`, `O_RDWR`) for the new fd.
    pub flags: u32,
    /// The new dma-buf fd (set by the driver; [`expbuf`](super::expbuf) returns it as an `OwnedFd`).
    pub fd: i32,
    /// Zero.
    pub reserved: [u32; 11],
}

zeroed_default!(Plane, Buffer);

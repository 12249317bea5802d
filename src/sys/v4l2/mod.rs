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

use std::borrow::Cow;
use std::fmt;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::core::frame::Fourcc;

pub mod node;

// ---------------------------------------------------------------------------------------------
// Constants
// ---------------------------------------------------------------------------------------------

/// Most planes a multi-planar format or buffer can have (`VIDEO_MAX_PLANES`).
pub const VIDEO_MAX_PLANES: usize = 8;

/// `enum v4l2_buf_type`: single-planar video capture.
pub const V4L2_BUF_TYPE_VIDEO_CAPTURE: u32 = 1;
/// `enum v4l2_buf_type`: single-planar video output.
pub const V4L2_BUF_TYPE_VIDEO_OUTPUT: u32 = 2;
/// `enum v4l2_buf_type`: video overlay (format is a `struct v4l2_window`; refused here).
pub const V4L2_BUF_TYPE_VIDEO_OVERLAY: u32 = 3;
/// `enum v4l2_buf_type`: video output overlay (format is a `struct v4l2_window`; refused here).
pub const V4L2_BUF_TYPE_VIDEO_OUTPUT_OVERLAY: u32 = 8;
/// `enum v4l2_buf_type`: multi-planar video capture.
pub const V4L2_BUF_TYPE_VIDEO_CAPTURE_MPLANE: u32 = 9;
/// `enum v4l2_buf_type`: multi-planar video output.
pub const V4L2_BUF_TYPE_VIDEO_OUTPUT_MPLANE: u32 = 10;

/// `V4L2_TYPE_IS_MULTIPLANAR(type)`: the buffer type uses `v4l2_pix_format_mplane` and a
/// `struct v4l2_plane` array.
pub const fn is_multiplanar(buf_type: u32) -> bool {
    buf_type == V4L2_BUF_TYPE_VIDEO_CAPTURE_MPLANE || buf_type == V4L2_BUF_TYPE_VIDEO_OUTPUT_MPLANE
}

/// `enum v4l2_memory`: buffers allocated by the driver, mapped with `mmap()` and exportable
/// with `VIDIOC_EXPBUF`.
pub const V4L2_MEMORY_MMAP: u32 = 1;
/// `enum v4l2_memory`: buffers in user memory (not queueable through [`qbuf`]).
pub const V4L2_MEMORY_USERPTR: u32 = 2;
/// `enum v4l2_memory`: buffers imported as dma-buf fds.
pub const V4L2_MEMORY_DMABUF: u32 = 4;

/// `V4L2_CAP_VIDEO_CAPTURE`: single-planar video capture.
pub const V4L2_CAP_VIDEO_CAPTURE: u32 = 0x0000_0001;
/// `V4L2_CAP_VIDEO_OUTPUT`: single-planar video output.
pub const V4L2_CAP_VIDEO_OUTPUT: u32 = 0x0000_0002;
/// `V4L2_CAP_VIDEO_CAPTURE_MPLANE`: multi-planar video capture.
pub const V4L2_CAP_VIDEO_CAPTURE_MPLANE: u32 = 0x0000_1000;
/// `V4L2_CAP_VIDEO_OUTPUT_MPLANE`: multi-planar video output.
pub const V4L2_CAP_VIDEO_OUTPUT_MPLANE: u32 = 0x0000_2000;
/// `V4L2_CAP_VIDEO_M2M_MPLANE`: multi-planar memory-to-memory device (e.g. a scaler).
pub const V4L2_CAP_VIDEO_M2M_MPLANE: u32 = 0x0000_4000;
/// `V4L2_CAP_VIDEO_M2M`: single-planar memory-to-memory device.
pub const V4L2_CAP_VIDEO_M2M: u32 = 0x0000_8000;
/// `V4L2_CAP_READWRITE`: `read()`/`write()` I/O.
pub const V4L2_CAP_READWRITE: u32 = 0x0100_0000;
/// `V4L2_CAP_STREAMING`: the streaming I/O ioctls (REQBUFS, QBUF, ...).
pub const V4L2_CAP_STREAMING: u32 = 0x0400_0000;
/// `V4L2_CAP_DEVICE_CAPS`: the `device_caps` field is valid.
pub const V4L2_CAP_DEVICE_CAPS: u32 = 0x8000_0000;

/// `enum v4l2_field`: the driver chooses.
pub const V4L2_FIELD_ANY: u32 = 0;
/// `enum v4l2_field`: progressive (no fields).
pub const V4L2_FIELD_NONE: u32 = 1;
/// `enum v4l2_field`: top field only.
pub const V4L2_FIELD_TOP: u32 = 2;
/// `enum v4l2_field`: bottom field only.
pub const V4L2_FIELD_BOTTOM: u32 = 3;
/// `enum v4l2_field`: both fields interlaced.
pub const V4L2_FIELD_INTERLACED: u32 = 4;
/// `enum v4l2_field`: both fields sequential, top first.
pub const V4L2_FIELD_SEQ_TB: u32 = 5;
/// `enum v4l2_field`: both fields sequential, bottom first.
pub const V4L2_FIELD_SEQ_BT: u32 = 6;
/// `enum v4l2_field`: fields alternate between buffers.
pub const V4L2_FIELD_ALTERNATE: u32 = 7;
/// `enum v4l2_field`: interlaced, top field first and transmitted first.
pub const V4L2_FIELD_INTERLACED_TB: u32 = 8;
/// `enum v4l2_field`: interlaced, top field first, bottom transmitted first.
pub const V4L2_FIELD_INTERLACED_BT: u32 = 9;

/// `V4L2_BUF_FLAG_MAPPED`: the buffer is mmap'ed.
pub const V4L2_BUF_FLAG_MAPPED: u32 = 0x0000_0001;
/// `V4L2_BUF_FLAG_QUEUED`: the buffer is in the driver's incoming queue.
pub const V4L2_BUF_FLAG_QUEUED: u32 = 0x0000_0002;
/// `V4L2_BUF_FLAG_DONE`: the buffer is in the driver's outgoing queue.
pub const V4L2_BUF_FLAG_DONE: u32 = 0x0000_0004;
/// `V4L2_BUF_FLAG_ERROR`: dequeued, but the data may be corrupted (still requeue it).
pub const V4L2_BUF_FLAG_ERROR: u32 = 0x0000_0040;
/// `V4L2_BUF_FLAG_TIMESTAMP_MASK`: the timestamp-type bits of `flags`.
pub const V4L2_BUF_FLAG_TIMESTAMP_MASK: u32 = 0x0000_e000;
/// `V4L2_BUF_FLAG_TIMESTAMP_UNKNOWN`: timestamp clock unknown.
pub const V4L2_BUF_FLAG_TIMESTAMP_UNKNOWN: u32 = 0x0000_0000;
/// `V4L2_BUF_FLAG_TIMESTAMP_MONOTONIC`: timestamp is `CLOCK_MONOTONIC`.
pub const V4L2_BUF_FLAG_TIMESTAMP_MONOTONIC: u32 = 0x0000_2000;
/// `V4L2_BUF_FLAG_TIMESTAMP_COPY`: timestamp copied from the output buffer (m2m).
pub const V4L2_BUF_FLAG_TIMESTAMP_COPY: u32 = 0x0000_4000;
/// `V4L2_BUF_FLAG_TSTAMP_SRC_MASK`: the timestamp-source bits of `flags`.
pub const V4L2_BUF_FLAG_TSTAMP_SRC_MASK: u32 = 0x0007_0000;
/// `V4L2_BUF_FLAG_TSTAMP_SRC_EOF`: timestamp taken at end of frame.
pub const V4L2_BUF_FLAG_TSTAMP_SRC_EOF: u32 = 0x0000_0000;
/// `V4L2_BUF_FLAG_TSTAMP_SRC_SOE`: timestamp taken at start of exposure.
pub const V4L2_BUF_FLAG_TSTAMP_SRC_SOE: u32 = 0x0001_0000;
/// `V4L2_BUF_FLAG_LAST`: last buffer of a stream (m2m drain).
pub const V4L2_BUF_FLAG_LAST: u32 = 0x0010_0000;

/// `V4L2_BUF_CAP_SUPPORTS_MMAP` in `v4l2_requestbuffers.capabilities`.
pub const V4L2_BUF_CAP_SUPPORTS_MMAP: u32 = 0x0000_0001;
/// `V4L2_BUF_CAP_SUPPORTS_USERPTR` in `v4l2_requestbuffers.capabilities`.
pub const V4L2_BUF_CAP_SUPPORTS_USERPTR: u32 = 0x0000_0002;
/// `V4L2_BUF_CAP_SUPPORTS_DMABUF` in `v4l2_requestbuffers.capabilities`.
pub const V4L2_BUF_CAP_SUPPORTS_DMABUF: u32 = 0x0000_0004;
/// `V4L2_BUF_CAP_SUPPORTS_ORPHANED_BUFS`: REQBUFS(0) works while buffers are still mapped
/// or exported.
pub const V4L2_BUF_CAP_SUPPORTS_ORPHANED_BUFS: u32 = 0x0000_0010;

/// `V4L2_FMT_FLAG_COMPRESSED` in `v4l2_fmtdesc.flags`.
pub const V4L2_FMT_FLAG_COMPRESSED: u32 = 0x0001;
/// `V4L2_FMT_FLAG_EMULATED` in `v4l2_fmtdesc.flags` (libv4l software conversion).
pub const V4L2_FMT_FLAG_EMULATED: u32 = 0x0002;

/// `enum v4l2_frmsizetypes`: one discrete size.
pub const V4L2_FRMSIZE_TYPE_DISCRETE: u32 = 1;
/// `enum v4l2_frmsizetypes`: any size in a range (step 1).
pub const V4L2_FRMSIZE_TYPE_CONTINUOUS: u32 = 2;
/// `enum v4l2_frmsizetypes`: sizes in a range with a step.
pub const V4L2_FRMSIZE_TYPE_STEPWISE: u32 = 3;
/// `enum v4l2_frmivaltypes`: one discrete interval.
pub const V4L2_FRMIVAL_TYPE_DISCRETE: u32 = 1;
/// `enum v4l2_frmivaltypes`: any interval in a range.
pub const V4L2_FRMIVAL_TYPE_CONTINUOUS: u32 = 2;
/// `enum v4l2_frmivaltypes`: intervals in a range with a step.
pub const V4L2_FRMIVAL_TYPE_STEPWISE: u32 = 3;

/// `V4L2_CAP_TIMEPERFRAME` in `v4l2_captureparm.capability`: `timeperframe` can be set.
pub const V4L2_CAP_TIMEPERFRAME: u32 = 0x1000;

/// `V4L2_PIX_FMT_NV12` (`NV12`).
pub const V4L2_PIX_FMT_NV12: u32 = v4l2_fourcc(b"NV12");
/// `V4L2_PIX_FMT_NV12M` (`NM12`): NV12 with one buffer per plane.
pub const V4L2_PIX_FMT_NV12M: u32 = v4l2_fourcc(b"NM12");
/// `V4L2_PIX_FMT_NV16` (`NV16`).
pub const V4L2_PIX_FMT_NV16: u32 = v4l2_fourcc(b"NV16");
/// `V4L2_PIX_FMT_YUYV` (`YUYV`).
pub const V4L2_PIX_FMT_YUYV: u32 = v4l2_fourcc(b"YUYV");
/// `V4L2_PIX_FMT_RGB24` (`RGB3`).
pub const V4L2_PIX_FMT_RGB24: u32 = v4l2_fourcc(b"RGB3");
/// `V4L2_PIX_FMT_BGR24` (`BGR3`).
pub const V4L2_PIX_FMT_BGR24: u32 = v4l2_fourcc(b"BGR3");

/// `v4l2_fourcc(a, b, c, d)`: the four characters, little-endian.
pub const fn v4l2_fourcc(code: &[u8; 4]) -> u32 {
    u32::from_le_bytes(*code)
}

/// A V4L2 `pixelformat`/`pixel_format` field as zcpipe's [`Fourcc`] (same encoding).
pub const fn fourcc_from_v4l2(pixelformat: u32) -> Fourcc {
    Fourcc(pixelformat)
}

/// A [`Fourcc`] as the V4L2 `pixelformat` value (same encoding).
pub const fn fourcc_to_v4l2(fourcc: Fourcc) -> u32 {
    fourcc.0
}

/// The user-facing name of a fourcc: the suffix of its `V4L2_PIX_FMT_*` name where that
/// differs from the code (`NV12M` for `NM12`, `RGB24` for `RGB3`, `BGR24` for `BGR3`), else
/// the four characters (`NV12`).
pub fn format_name(f: Fourcc) -> String {
    match f {
        Fourcc::NV12M => "NV12M".into(),
        Fourcc::RGB24 => "RGB24".into(),
        Fourcc::BGR24 => "BGR24".into(),
        f => f.to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// Structs
// ---------------------------------------------------------------------------------------------

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

/// Bytes of a fixed-size C string field up to its first NUL, as text.
fn c_str(bytes: &[u8]) -> Cow<'_, str> {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end])
}

/// `struct v4l2_capability` (104 bytes), filled by `VIDIOC_QUERYCAP`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Capability {
    /// Driver module name, NUL-terminated (`__u8`, not `char`: see [`Capability::driver`]).
    pub driver: [u8; 16],
    /// Device name, NUL-terminated.
    pub card: [u8; 32],
    /// Bus location, NUL-terminated (`platform:...`, `usb-...`).
    pub bus_info: [u8; 32],
    /// `KERNEL_VERSION` of the driver.
    pub version: u32,
    /// `V4L2_CAP_*` of the physical device as a whole.
    pub capabilities: u32,
    /// `V4L2_CAP_*` of this device node (valid when `capabilities` has `V4L2_CAP_DEVICE_CAPS`).
    pub device_caps: u32,
    /// Zero.
    pub reserved: [u32; 3],
}

impl Capability {
    /// The driver name (`"uvcvideo"`, `"rkisp1"`, ...).
    pub fn driver(&self) -> Cow<'_, str> {
        c_str(&self.driver)
    }
    /// The device name.
    pub fn card(&self) -> Cow<'_, str> {
        c_str(&self.card)
    }
    /// The bus location.
    pub fn bus_info(&self) -> Cow<'_, str> {
        c_str(&self.bus_info)
    }
    /// The capabilities of this node: `device_caps` when the driver sets
    /// `V4L2_CAP_DEVICE_CAPS` (every driver since Linux 3.4 must), else `capabilities`.
    pub fn caps(&self) -> u32 {
        if self.capabilities & V4L2_CAP_DEVICE_CAPS != 0 {
            self.device_caps
        } else {
            self.capabilities
        }
    }
    /// This node captures video (single- or multi-planar). Memory-to-memory devices, which
    /// report `V4L2_CAP_VIDEO_M2M*` instead, are not capture devices here: see [`Self::is_m2m`].
    pub fn is_capture(&self) -> bool {
        self.caps() & (V4L2_CAP_VIDEO_CAPTURE | V4L2_CAP_VIDEO_CAPTURE_MPLANE) != 0
    }
    /// This node is a memory-to-memory device (scaler, codec).
    pub fn is_m2m(&self) -> bool {
        self.caps() & (V4L2_CAP_VIDEO_M2M | V4L2_CAP_VIDEO_M2M_MPLANE) != 0
    }
    /// This node uses the multi-planar API (capture, output or m2m).
    pub fn is_mplane(&self) -> bool {
        self.caps() & (V4L2_CAP_VIDEO_CAPTURE_MPLANE | V4L2_CAP_VIDEO_OUTPUT_MPLANE | V4L2_CAP_VIDEO_M2M_MPLANE) != 0
    }
    /// This node supports streaming I/O (REQBUFS/QBUF/DQBUF).
    pub fn has_streaming(&self) -> bool {
        self.caps() & V4L2_CAP_STREAMING != 0
    }
    /// The buffer type to capture with: `VIDEO_CAPTURE_MPLANE` if the node supports it, else
    /// `VIDEO_CAPTURE`, else `None`.
    pub fn capture_buf_type(&self) -> Option<u32> {
        let caps = self.caps();
        if caps & V4L2_CAP_VIDEO_CAPTURE_MPLANE != 0 {
            Some(V4L2_BUF_TYPE_VIDEO_CAPTURE_MPLANE)
        } else if caps & V4L2_CAP_VIDEO_CAPTURE != 0 {
            Some(V4L2_BUF_TYPE_VIDEO_CAPTURE)
        } else {
            None
        }
    }
}

/// `struct v4l2_pix_format` (48 bytes): a single-planar image format.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PixFormat {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Fourcc (`V4L2_PIX_FMT_*`).
    pub pixelformat: u32,
    /// `enum v4l2_field`.
    pub field: u32,
    /// Bytes per line of the first plane (0: the driver chooses).
    pub bytesperline: u32,
    /// Bytes of one image (set by the driver).
    pub sizeimage: u32,
    /// `enum v4l2_colorspace`.
    pub colorspace: u32,
    /// Must be 0, or `V4L2_PIX_FMT_PRIV_MAGIC` to make the fields after it valid.
    pub priv_: u32,
    /// `V4L2_PIX_FMT_FLAG_*`.
    pub flags: u32,
    /// `enum v4l2_ycbcr_encoding` (a union with `hsv_enc` in the header).
    pub ycbcr_enc: u32,
    /// `enum v4l2_quantization`.
    pub quantization: u32,
    /// `enum v4l2_xfer_func`.
    pub xfer_func: u32,
}

impl PixFormat {
    /// `pixelformat` as a [`Fourcc`].
    pub fn fourcc(&self) -> Fourcc {
        fourcc_from_v4l2(self.pixelformat)
    }
    /// Sets `pixelformat`.
    pub fn set_fourcc(&mut self, fourcc: Fourcc) {
        self.pixelformat = fourcc_to_v4l2(fourcc);
    }
}

/// `struct v4l2_plane_pix_format` (20 bytes, `__attribute__((packed))`): one plane of a
/// multi-planar format. Packed: copy fields out (`let b = p.bytesperline;`), don't borrow them.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PlanePixFormat {
    /// Bytes of this plane for one image.
    pub sizeimage: u32,
    /// Bytes per line of this plane.
    pub bytesperline: u32,
    /// Zero.
    pub reserved: [u16; 6],
}

/// `struct v4l2_pix_format_mplane` (192 bytes, `__attribute__((packed))`): a multi-planar
/// image format. Packed: copy fields out, don't borrow them (`plane_fmt` itself can be
/// borrowed, its elements have alignment 1).
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PixFormatMplane {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Fourcc (`V4L2_PIX_FMT_*`).
    pub pixelformat: u32,
    /// `enum v4l2_field`.
    pub field: u32,
    /// `enum v4l2_colorspace`.
    pub colorspace: u32,
    /// Per-plane layout; the first `num_planes` are valid.
    pub plane_fmt: [PlanePixFormat; VIDEO_MAX_PLANES],
    /// Number of planes (buffers) of this format.
    pub num_planes: u8,
    /// `V4L2_PIX_FMT_FLAG_*`.
    pub flags: u8,
    /// `enum v4l2_ycbcr_encoding` (a union with `hsv_enc` in the header).
    pub ycbcr_enc: u8,
    /// `enum v4l2_quantization`.
    pub quantization: u8,
    /// `enum v4l2_xfer_func`.
    pub xfer_func: u8,
    /// Zero.
    pub reserved: [u8; 7],
}

impl PixFormatMplane {
    /// `pixelformat` as a [`Fourcc`].
    pub fn fourcc(&self) -> Fourcc {
        fourcc_from_v4l2(self.pixelformat)
    }
    /// Sets `pixelformat`.
    pub fn set_fourcc(&mut self, fourcc: Fourcc) {
        self.pixelformat = fourcc_to_v4l2(fourcc);
    }
}

/// The `fmt` union of `struct v4l2_format` (200 bytes). Its alignment is a pointer's, as in
/// the kernel, where the `struct v4l2_window win` member holds pointers: 8 on 64-bit, which
/// puts `fmt` at offset 8 and makes `v4l2_format` 208 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub union FormatUnion {
    /// For `VIDEO_CAPTURE`/`VIDEO_OUTPUT`.
    pub pix: PixFormat,
    /// For `VIDEO_CAPTURE_MPLANE`/`VIDEO_OUTPUT_MPLANE`.
    pub pix_mp: PixFormatMplane,
    /// The whole area (`raw_data` in the header).
    pub raw_data: [u8; 200],
    /// Stands for `struct v4l2_window`'s pointers: gives the union their alignment.
    _align: [usize; 200 / size_of::<usize>()],
}

/// `struct v4l2_format` (208 bytes on 64-bit): the argument of `VIDIOC_G_FMT`/`S_FMT`/`TRY_FMT`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Format {
    /// `enum v4l2_buf_type`: selects the member of `fmt`.
    pub type_: u32,
    /// The format; read it with [`Format::pix`] or [`Format::pix_mp`].
    pub fmt: FormatUnion,
}

impl Format {
    /// An all-zero format of buffer type `type_`, ready for `VIDIOC_G_FMT`.
    pub fn new(type_: u32) -> Format {
        Format { type_, ..Format::default() }
    }
    /// `fmt.pix` (meaningful for single-planar types).
    pub fn pix(&self) -> &PixFormat {
        // SAFETY: every member of the union is plain integers with no invalid bit patterns,
        // and `Format` is always fully initialised (built zeroed, then written by the kernel).
        unsafe { &self.fmt.pix }
    }
    /// `fmt.pix`, mutable.
    pub fn pix_mut(&mut self) -> &mut PixFormat {
        // SAFETY: as in `pix`; any bytes written through it are a valid union content.
        unsafe { &mut self.fmt.pix }
    }
    /// `fmt.pix_mp` (meaningful for multi-planar types).
    pub fn pix_mp(&self) -> &PixFormatMplane {
        // SAFETY: as in `pix`; `PixFormatMplane` has alignment 1, so the reference is aligned.
        unsafe { &self.fmt.pix_mp }
    }
    /// `fmt.pix_mp`, mutable.
    pub fn pix_mp_mut(&mut self) -> &mut PixFormatMplane {
        // SAFETY: as in `pix_mp`.
        unsafe { &mut self.fmt.pix_mp }
    }
    /// The format's fourcc, from `pix` or `pix_mp` according to `type_`.
    pub fn fourcc(&self) -> Fourcc {
        if is_multiplanar(self.type_) {
            self.pix_mp().fourcc()
        } else {
            self.pix().fourcc()
        }
    }
}

impl fmt::Debug for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Format");
        d.field("type_", &self.type_);
        if is_multiplanar(self.type_) {
            d.field("pix_mp", self.pix_mp());
        } else {
            d.field("pix", self.pix());
        }
        d.finish()
    }
}

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
    pub fn mem_offset(&self) -> u32 {
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

// SAFETY: the only non-Send/Sync member is the `m.planes` pointer, which nothing in this
// module dereferences; the wrappers aim it at a caller's slice only for the duration of one
// ioctl (with that slice mutably borrowed) and reset it to null afterwards.
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
    /// The new dma-buf fd (set by the driver; [`expbuf`] returns it as an `OwnedFd`).
    pub fd: i32,
    /// Zero.
    pub reserved: [u32; 11],
}

/// `struct v4l2_fract` (8 bytes): a rational number, e.g. a frame interval in seconds.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fract {
    /// Numerator.
    pub numerator: u32,
    /// Denominator.
    pub denominator: u32,
}

/// `struct v4l2_captureparm` (40 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CaptureParm {
    /// `V4L2_CAP_TIMEPERFRAME` if `timeperframe` can be set.
    pub capability: u32,
    /// `V4L2_MODE_HIGHQUALITY` or 0.
    pub capturemode: u32,
    /// Frame interval in seconds (1/30 for 30 fps).
    pub timeperframe: Fract,
    /// Driver-specific.
    pub extendedmode: u32,
    /// Buffers for `read()`.
    pub readbuffers: u32,
    /// Zero.
    pub reserved: [u32; 4],
}

/// `struct v4l2_outputparm` (40 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct OutputParm {
    /// `V4L2_CAP_TIMEPERFRAME` if `timeperframe` can be set.
    pub capability: u32,
    /// `V4L2_MODE_HIGHQUALITY` or 0.
    pub outputmode: u32,
    /// Frame interval in seconds.
    pub timeperframe: Fract,
    /// Driver-specific.
    pub extendedmode: u32,
    /// Buffers for `write()`.
    pub writebuffers: u32,
    /// Zero.
    pub reserved: [u32; 4],
}

/// The `parm` union of `struct v4l2_streamparm` (200 bytes, alignment 4: no pointers).
#[repr(C)]
#[derive(Clone, Copy)]
pub union StreamParmUnion {
    /// For capture types.
    pub capture: CaptureParm,
    /// For output types.
    pub output: OutputParm,
    /// The whole area.
    pub raw_data: [u8; 200],
}

/// `struct v4l2_streamparm` (204 bytes): the argument of `VIDIOC_G_PARM`/`S_PARM`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct StreamParm {
    /// `enum v4l2_buf_type`.
    pub type_: u32,
    /// Read with [`StreamParm::capture`] / [`StreamParm::output`].
    pub parm: StreamParmUnion,
}

impl StreamParm {
    /// An all-zero `v4l2_streamparm` of buffer type `type_`, ready for `VIDIOC_G_PARM`.
    pub fn new(type_: u32) -> StreamParm {
        StreamParm { type_, ..StreamParm::default() }
    }
    /// `parm.capture`.
    pub fn capture(&self) -> &CaptureParm {
        // SAFETY: every member is plain integers (no invalid bit patterns, same alignment 4)
        // and the struct is always fully initialised (zeroed, then written by the kernel).
        unsafe { &self.parm.capture }
    }
    /// `parm.capture`, mutable.
    pub fn capture_mut(&mut self) -> &mut CaptureParm {
        // SAFETY: as in `capture`.
        unsafe { &mut self.parm.capture }
    }
    /// `parm.output`.
    pub fn output(&self) -> &OutputParm {
        // SAFETY: as in `capture`.
        unsafe { &self.parm.output }
    }
    /// `parm.output`, mutable.
    pub fn output_mut(&mut self) -> &mut OutputParm {
        // SAFETY: as in `capture`.
        unsafe { &mut self.parm.output }
    }
}

impl fmt::Debug for StreamParm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamParm").field("type_", &self.type_).field("capture", self.capture()).finish()
    }
}

/// `struct v4l2_fmtdesc` (64 bytes): the argument of `VIDIOC_ENUM_FMT`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FmtDesc {
    /// Format number (in), 0.. until `EINVAL`.
    pub index: u32,
    /// `enum v4l2_buf_type` (in).
    pub type_: u32,
    /// `V4L2_FMT_FLAG_*`.
    pub flags: u32,
    /// Human-readable name, NUL-terminated.
    pub description: [u8; 32],
    /// Fourcc.
    pub pixelformat: u32,
    /// Media bus code filter (in, with `V4L2_CAP_IO_MC`), else 0.
    pub mbus_code: u32,
    /// Zero.
    pub reserved: [u32; 3],
}

impl FmtDesc {
    /// `pixelformat` as a [`Fourcc`].
    pub fn fourcc(&self) -> Fourcc {
        fourcc_from_v4l2(self.pixelformat)
    }
    /// The description text.
    pub fn description(&self) -> Cow<'_, str> {
        c_str(&self.description)
    }
}

/// `struct v4l2_frmsize_discrete` (8 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrmSizeDiscrete {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
}

/// `struct v4l2_frmsize_stepwise` (24 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrmSizeStepwise {
    /// Minimum width.
    pub min_width: u32,
    /// Maximum width.
    pub max_width: u32,
    /// Width step.
    pub step_width: u32,
    /// Minimum height.
    pub min_height: u32,
    /// Maximum height.
    pub max_height: u32,
    /// Height step.
    pub step_height: u32,
}

/// The anonymous union of `struct v4l2_frmsizeenum` (24 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub union FrmSizeUnion {
    /// `V4L2_FRMSIZE_TYPE_DISCRETE`.
    pub discrete: FrmSizeDiscrete,
    /// `V4L2_FRMSIZE_TYPE_CONTINUOUS`/`STEPWISE`.
    pub stepwise: FrmSizeStepwise,
}

/// `struct v4l2_frmsizeenum` (44 bytes): the argument of `VIDIOC_ENUM_FRAMESIZES`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FrmSizeEnum {
    /// Size number (in), 0.. until `EINVAL`.
    pub index: u32,
    /// Fourcc (in).
    pub pixel_format: u32,
    /// `V4L2_FRMSIZE_TYPE_*` (out).
    pub type_: u32,
    /// Read with [`FrmSizeEnum::discrete`] / [`FrmSizeEnum::stepwise`].
    pub size: FrmSizeUnion,
    /// Zero.
    pub reserved: [u32; 2],
}

impl FrmSizeEnum {
    /// An all-zero query for size `index` of `fourcc`.
    pub fn new(fourcc: Fourcc, index: u32) -> FrmSizeEnum {
        FrmSizeEnum { index, pixel_format: fourcc_to_v4l2(fourcc), ..FrmSizeEnum::default() }
    }
    /// The union as `discrete` (valid when `type_` is `V4L2_FRMSIZE_TYPE_DISCRETE`).
    pub fn discrete(&self) -> FrmSizeDiscrete {
        // SAFETY: both members are plain u32s and the union is fully initialised (zeroed, then
        // written by the kernel), so any member read is a valid value.
        unsafe { self.size.discrete }
    }
    /// The union as `stepwise` (valid for `CONTINUOUS` and `STEPWISE`).
    pub fn stepwise(&self) -> FrmSizeStepwise {
        // SAFETY: as in `discrete`.
        unsafe { self.size.stepwise }
    }
}

impl fmt::Debug for FrmSizeEnum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("FrmSizeEnum");
        d.field("index", &self.index).field("pixel_format", &fourcc_from_v4l2(self.pixel_format)).field("type_", &self.type_);
        if self.type_ == V4L2_FRMSIZE_TYPE_DISCRETE {
            d.field("discrete", &self.discrete());
        } else {
            d.field("stepwise", &self.stepwise());
        }
        d.finish()
    }
}

/// `struct v4l2_frmival_stepwise` (24 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrmIvalStepwise {
    /// Minimum interval in seconds.
    pub min: Fract,
    /// Maximum interval in seconds.
    pub max: Fract,
    /// Interval step in seconds.
    pub step: Fract,
}

/// The anonymous union of `struct v4l2_frmivalenum` (24 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub union FrmIvalUnion {
    /// `V4L2_FRMIVAL_TYPE_DISCRETE`.
    pub discrete: Fract,
    /// `V4L2_FRMIVAL_TYPE_CONTINUOUS`/`STEPWISE`.
    pub stepwise: FrmIvalStepwise,
}

/// `struct v4l2_frmivalenum` (52 bytes): the argument of `VIDIOC_ENUM_FRAMEINTERVALS`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FrmIvalEnum {
    /// Interval number (in), 0.. until `EINVAL`.
    pub index: u32,
    /// Fourcc (in).
    pub pixel_format: u32,
    /// Width (in).
    pub width: u32,
    /// Height (in).
    pub height: u32,
    /// `V4L2_FRMIVAL_TYPE_*` (out).
    pub type_: u32,
    /// Read with [`FrmIvalEnum::discrete`] / [`FrmIvalEnum::stepwise`].
    pub interval: FrmIvalUnion,
    /// Zero.
    pub reserved: [u32; 2],
}

impl FrmIvalEnum {
    /// An all-zero query for interval `index` of `fourcc` at `width`x`height`.
    pub fn new(fourcc: Fourcc, width: u32, height: u32, index: u32) -> FrmIvalEnum {
        FrmIvalEnum { index, pixel_format: fourcc_to_v4l2(fourcc), width, height, ..FrmIvalEnum::default() }
    }
    /// The union as `discrete` (valid when `type_` is `V4L2_FRMIVAL_TYPE_DISCRETE`).
    pub fn discrete(&self) -> Fract {
        // SAFETY: both members are plain u32s and the union is fully initialised (zeroed, then
        // written by the kernel), so any member read is a valid value.
        unsafe { self.interval.discrete }
    }
    /// The union as `stepwise` (valid for `CONTINUOUS` and `STEPWISE`).
    pub fn stepwise(&self) -> FrmIvalStepwise {
        // SAFETY: as in `discrete`.
        unsafe { self.interval.stepwise }
    }
}

impl fmt::Debug for FrmIvalEnum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("FrmIvalEnum");
        d.field("index", &self.index)
            .field("pixel_format", &fourcc_from_v4l2(self.pixel_format))
            .field("width", &self.width)
            .field("height", &self.height)
            .field("type_", &self.type_);
        if self.type_ == V4L2_FRMIVAL_TYPE_DISCRETE {
            d.field("discrete", &self.discrete());
        } else {
            d.field("stepwise", &self.stepwise());
        }
        d.finish()
    }
}

zeroed_default!(Format, Plane, Buffer, StreamParm, FrmSizeEnum, FrmIvalEnum);

// ---------------------------------------------------------------------------------------------
// ioctl numbers and raw calls
// ---------------------------------------------------------------------------------------------

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

    v4l2_ioctl!(read, querycap, VIDIOC_QUERYCAP, 0, Capability, "`VIDIOC_QUERYCAP`: `_IOR('V', 0, struct v4l2_capability)`.");
    v4l2_ioctl!(readwrite, enum_fmt, VIDIOC_ENUM_FMT, 2, FmtDesc, "`VIDIOC_ENUM_FMT`: `_IOWR('V', 2, struct v4l2_fmtdesc)`.");
    v4l2_ioctl!(readwrite, g_fmt, VIDIOC_G_FMT, 4, Format, "`VIDIOC_G_FMT`: `_IOWR('V', 4, struct v4l2_format)`.");
    v4l2_ioctl!(readwrite, s_fmt, VIDIOC_S_FMT, 5, Format, "`VIDIOC_S_FMT`: `_IOWR('V', 5, struct v4l2_format)`.");
    v4l2_ioctl!(readwrite, reqbufs, VIDIOC_REQBUFS, 8, RequestBuffers, "`VIDIOC_REQBUFS`: `_IOWR('V', 8, struct v4l2_requestbuffers)`.");
    v4l2_ioctl!(readwrite, querybuf, VIDIOC_QUERYBUF, 9, Buffer, "`VIDIOC_QUERYBUF`: `_IOWR('V', 9, struct v4l2_buffer)`.");
    v4l2_ioctl!(readwrite, qbuf, VIDIOC_QBUF, 15, Buffer, "`VIDIOC_QBUF`: `_IOWR('V', 15, struct v4l2_buffer)`.");
    v4l2_ioctl!(readwrite, expbuf, VIDIOC_EXPBUF, 16, ExportBuffer, "`VIDIOC_EXPBUF`: `_IOWR('V', 16, struct v4l2_exportbuffer)`.");
    v4l2_ioctl!(readwrite, dqbuf, VIDIOC_DQBUF, 17, Buffer, "`VIDIOC_DQBUF`: `_IOWR('V', 17, struct v4l2_buffer)`.");
    v4l2_ioctl!(write, streamon, VIDIOC_STREAMON, 18, libc::c_int, "`VIDIOC_STREAMON`: `_IOW('V', 18, int)`.");
    v4l2_ioctl!(write, streamoff, VIDIOC_STREAMOFF, 19, libc::c_int, "`VIDIOC_STREAMOFF`: `_IOW('V', 19, int)`.");
    v4l2_ioctl!(readwrite, g_parm, VIDIOC_G_PARM, 21, StreamParm, "`VIDIOC_G_PARM`: `_IOWR('V', 21, struct v4l2_streamparm)`.");
    v4l2_ioctl!(readwrite, s_parm, VIDIOC_S_PARM, 22, StreamParm, "`VIDIOC_S_PARM`: `_IOWR('V', 22, struct v4l2_streamparm)`.");
    v4l2_ioctl!(readwrite, try_fmt, VIDIOC_TRY_FMT, 64, Format, "`VIDIOC_TRY_FMT`: `_IOWR('V', 64, struct v4l2_format)`.");
    v4l2_ioctl!(readwrite, enum_framesizes, VIDIOC_ENUM_FRAMESIZES, 74, FrmSizeEnum, "`VIDIOC_ENUM_FRAMESIZES`: `_IOWR('V', 74, struct v4l2_frmsizeenum)`.");
    v4l2_ioctl!(readwrite, enum_frameintervals, VIDIOC_ENUM_FRAMEINTERVALS, 75, FrmIvalEnum, "`VIDIOC_ENUM_FRAMEINTERVALS`: `_IOWR('V', 75, struct v4l2_frmivalenum)`.");
}

pub use raw::{
    VIDIOC_DQBUF, VIDIOC_ENUM_FMT, VIDIOC_ENUM_FRAMEINTERVALS, VIDIOC_ENUM_FRAMESIZES, VIDIOC_EXPBUF, VIDIOC_G_FMT,
    VIDIOC_G_PARM, VIDIOC_QBUF, VIDIOC_QUERYBUF, VIDIOC_QUERYCAP, VIDIOC_REQBUFS, VIDIOC_STREAMOFF, VIDIOC_STREAMON,
    VIDIOC_S_FMT, VIDIOC_S_PARM, VIDIOC_TRY_FMT,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of};

    // Every literal below was printed by a C program including <linux/videodev2.h>
    // (linux-libc-dev 6.1) built with gcc for x86_64, and the same values were checked as
    // `_Static_assert`s compiled with aarch64-linux-gnu-gcc against the arm64 uapi headers.

    #[test]
    fn struct_sizes_match_uapi() {
        // Pointer-free structs: the same on every Linux ABI.
        assert_eq!(size_of::<Capability>(), 104);
        assert_eq!(size_of::<PixFormat>(), 48);
        assert_eq!((size_of::<PlanePixFormat>(), align_of::<PlanePixFormat>()), (20, 1));
        assert_eq!((size_of::<PixFormatMplane>(), align_of::<PixFormatMplane>()), (192, 1));
        assert_eq!(size_of::<RequestBuffers>(), 20);
        assert_eq!(size_of::<Timecode>(), 16);
        assert_eq!(size_of::<ExportBuffer>(), 64);
        assert_eq!(size_of::<Fract>(), 8);
        assert_eq!(size_of::<CaptureParm>(), 40);
        assert_eq!(size_of::<OutputParm>(), 40);
        assert_eq!((size_of::<StreamParm>(), align_of::<StreamParm>()), (204, 4));
        assert_eq!(size_of::<FmtDesc>(), 64);
        assert_eq!(size_of::<FrmSizeDiscrete>(), 8);
        assert_eq!(size_of::<FrmSizeStepwise>(), 24);
        assert_eq!(size_of::<FrmSizeEnum>(), 44);
        assert_eq!(size_of::<FrmIvalStepwise>(), 24);
        assert_eq!(size_of::<FrmIvalEnum>(), 52);
        assert_eq!(size_of::<FormatUnion>(), 200);
        assert_eq!(size_of::<StreamParmUnion>(), 200);
    }

    #[cfg(target_pointer_width = "64")]
    #[test]
    fn pointer_sized_structs_match_uapi_lp64() {
        assert_eq!((size_of::<Format>(), align_of::<Format>()), (208, 8));
        assert_eq!((size_of::<Plane>(), align_of::<Plane>()), (64, 8));
        assert_eq!((size_of::<Buffer>(), align_of::<Buffer>()), (88, 8));
        assert_eq!(size_of::<libc::timeval>(), 16);
        assert_eq!(offset_of!(Format, fmt), 8);
        assert_eq!(offset_of!(Plane, m), 8);
        assert_eq!(offset_of!(Plane, data_offset), 16);
        assert_eq!(offset_of!(Plane, reserved), 20);
        assert_eq!(offset_of!(Buffer, field), 16);
        assert_eq!(offset_of!(Buffer, timestamp), 24);
        assert_eq!(offset_of!(Buffer, timecode), 40);
        assert_eq!(offset_of!(Buffer, sequence), 56);
        assert_eq!(offset_of!(Buffer, memory), 60);
        assert_eq!(offset_of!(Buffer, m), 64);
        assert_eq!(offset_of!(Buffer, length), 72);
        assert_eq!(offset_of!(Buffer, reserved2), 76);
        assert_eq!(offset_of!(Buffer, request_fd), 80);
    }

    #[test]
    fn field_offsets_match_uapi() {
        assert_eq!(offset_of!(Capability, card), 16);
        assert_eq!(offset_of!(Capability, bus_info), 48);
        assert_eq!(offset_of!(Capability, version), 80);
        assert_eq!(offset_of!(Capability, capabilities), 84);
        assert_eq!(offset_of!(Capability, device_caps), 88);
        assert_eq!(offset_of!(Capability, reserved), 92);
        assert_eq!(offset_of!(PixFormat, pixelformat), 8);
        assert_eq!(offset_of!(PixFormat, bytesperline), 16);
        assert_eq!(offset_of!(PixFormat, sizeimage), 20);
        assert_eq!(offset_of!(PixFormat, flags), 32);
        assert_eq!(offset_of!(PixFormat, ycbcr_enc), 36);
        assert_eq!(offset_of!(PixFormat, xfer_func), 44);
        assert_eq!(offset_of!(PlanePixFormat, bytesperline), 4);
        assert_eq!(offset_of!(PlanePixFormat, reserved), 8);
        assert_eq!(offset_of!(PixFormatMplane, colorspace), 16);
        assert_eq!(offset_of!(PixFormatMplane, plane_fmt), 20);
        assert_eq!(offset_of!(PixFormatMplane, num_planes), 180);
        assert_eq!(offset_of!(PixFormatMplane, flags), 181);
        assert_eq!(offset_of!(PixFormatMplane, ycbcr_enc), 182);
        assert_eq!(offset_of!(PixFormatMplane, quantization), 183);
        assert_eq!(offset_of!(PixFormatMplane, xfer_func), 184);
        assert_eq!(offset_of!(PixFormatMplane, reserved), 185);
        assert_eq!(offset_of!(RequestBuffers, memory), 8);
        assert_eq!(offset_of!(RequestBuffers, capabilities), 12);
        assert_eq!(offset_of!(RequestBuffers, flags), 16);
        assert_eq!(offset_of!(RequestBuffers, reserved), 17);
        assert_eq!(offset_of!(Timecode, frames), 8);
        assert_eq!(offset_of!(Timecode, userbits), 12);
        assert_eq!(offset_of!(ExportBuffer, plane), 8);
        assert_eq!(offset_of!(ExportBuffer, flags), 12);
        assert_eq!(offset_of!(ExportBuffer, fd), 16);
        assert_eq!(offset_of!(ExportBuffer, reserved), 20);
        assert_eq!(offset_of!(CaptureParm, timeperframe), 8);
        assert_eq!(offset_of!(CaptureParm, extendedmode), 16);
        assert_eq!(offset_of!(CaptureParm, readbuffers), 20);
        assert_eq!(offset_of!(CaptureParm, reserved), 24);
        assert_eq!(offset_of!(OutputParm, timeperframe), 8);
        assert_eq!(offset_of!(OutputParm, writebuffers), 20);
        assert_eq!(offset_of!(StreamParm, parm), 4);
        assert_eq!(offset_of!(FmtDesc, flags), 8);
        assert_eq!(offset_of!(FmtDesc, description), 12);
        assert_eq!(offset_of!(FmtDesc, pixelformat), 44);
        assert_eq!(offset_of!(FmtDesc, mbus_code), 48);
        assert_eq!(offset_of!(FmtDesc, reserved), 52);
        assert_eq!(offset_of!(FrmSizeEnum, type_), 8);
        assert_eq!(offset_of!(FrmSizeEnum, size), 12);
        assert_eq!(offset_of!(FrmSizeEnum, reserved), 36);
        assert_eq!(offset_of!(FrmIvalEnum, type_), 16);
        assert_eq!(offset_of!(FrmIvalEnum, interval), 20);
        assert_eq!(offset_of!(FrmIvalEnum, reserved), 44);
    }

    // The 'V' ioctl numbers (asm-generic encoding, used by x86_64 and aarch64).
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    #[test]
    fn ioctl_numbers_match_uapi() {
        assert_eq!(VIDIOC_QUERYCAP, 0x8068_5600);
        assert_eq!(VIDIOC_ENUM_FMT, 0xc040_5602);
        assert_eq!(VIDIOC_G_FMT, 0xc0d0_5604);
        assert_eq!(VIDIOC_S_FMT, 0xc0d0_5605);
        assert_eq!(VIDIOC_TRY_FMT, 0xc0d0_5640);
        assert_eq!(VIDIOC_REQBUFS, 0xc014_5608);
        assert_eq!(VIDIOC_QUERYBUF, 0xc058_5609);
        assert_eq!(VIDIOC_QBUF, 0xc058_560f);
        assert_eq!(VIDIOC_DQBUF, 0xc058_5611);
        assert_eq!(VIDIOC_EXPBUF, 0xc040_5610);
        assert_eq!(VIDIOC_STREAMON, 0x4004_5612);
        assert_eq!(VIDIOC_STREAMOFF, 0x4004_5613);
        assert_eq!(VIDIOC_G_PARM, 0xc0cc_5615);
        assert_eq!(VIDIOC_S_PARM, 0xc0cc_5616);
        assert_eq!(VIDIOC_ENUM_FRAMESIZES, 0xc02c_564a);
        assert_eq!(VIDIOC_ENUM_FRAMEINTERVALS, 0xc034_564b);
    }

    #[test]
    fn constants_match_uapi() {
        assert_eq!(V4L2_PIX_FMT_NV12, 0x3231_564e);
        assert_eq!(V4L2_PIX_FMT_NV12M, 0x3231_4d4e);
        assert_eq!(V4L2_PIX_FMT_NV16, 0x3631_564e);
        assert_eq!(V4L2_PIX_FMT_YUYV, 0x5659_5559);
        assert_eq!(V4L2_PIX_FMT_RGB24, 0x3342_4752);
        assert_eq!(V4L2_PIX_FMT_BGR24, 0x3352_4742);
        assert_eq!(fourcc_from_v4l2(V4L2_PIX_FMT_NV12), Fourcc::NV12);
        assert_eq!(fourcc_from_v4l2(V4L2_PIX_FMT_NV12M), Fourcc::NV12M);
        assert_eq!(fourcc_from_v4l2(V4L2_PIX_FMT_NV16), Fourcc::NV16);
        assert_eq!(fourcc_from_v4l2(V4L2_PIX_FMT_YUYV), Fourcc::YUYV);
        assert_eq!(fourcc_to_v4l2(Fourcc::RGB24), V4L2_PIX_FMT_RGB24);
        assert_eq!(fourcc_to_v4l2(Fourcc::BGR24), V4L2_PIX_FMT_BGR24);
        assert_eq!(V4L2_BUF_FLAG_TIMESTAMP_MASK, 0xe000);
        assert_eq!(V4L2_BUF_FLAG_TIMESTAMP_MONOTONIC, 0x2000);
        assert_eq!(V4L2_BUF_FLAG_ERROR, 0x40);
        assert_eq!(V4L2_CAP_DEVICE_CAPS, 0x8000_0000);
        assert!(is_multiplanar(V4L2_BUF_TYPE_VIDEO_CAPTURE_MPLANE) && is_multiplanar(V4L2_BUF_TYPE_VIDEO_OUTPUT_MPLANE));
        assert!(!is_multiplanar(V4L2_BUF_TYPE_VIDEO_CAPTURE) && !is_multiplanar(V4L2_BUF_TYPE_VIDEO_OUTPUT));
    }

    #[test]
    fn format_accessors_alias_the_raw_area() {
        let mut f = Format::new(V4L2_BUF_TYPE_VIDEO_CAPTURE_MPLANE);
        f.pix_mp_mut().width = 1920;
        f.pix_mp_mut().set_fourcc(Fourcc::NV12M);
        f.pix_mp_mut().num_planes = 2;
        f.pix_mp_mut().plane_fmt[1].bytesperline = 2048;
        // SAFETY: the union is fully initialised (zeroed by `Format::new`).
        let raw = unsafe { f.fmt.raw_data };
        assert_eq!(raw[0..4], 1920u32.to_le_bytes());
        assert_eq!(raw[8..12], V4L2_PIX_FMT_NV12M.to_le_bytes());
        assert_eq!(raw[180], 2);
        assert_eq!(raw[20 + 20 + 4..20 + 20 + 8], 2048u32.to_le_bytes());
        assert_eq!(f.fourcc(), Fourcc::NV12M);
        let mut p = Format::new(V4L2_BUF_TYPE_VIDEO_CAPTURE);
        p.pix_mut().set_fourcc(Fourcc::YUYV);
        assert_eq!(p.fourcc(), Fourcc::YUYV);
        assert!(format!("{p:?}").contains("pix: PixFormat"));
    }

    #[test]
    fn capability_strings_and_caps() {
        let mut c = Capability::default();
        c.driver[..5].copy_from_slice(b"vivid");
        c.card[..3].copy_from_slice(b"\xe9ab"); // not UTF-8: lossy, never a panic
        c.capabilities = V4L2_CAP_DEVICE_CAPS | V4L2_CAP_VIDEO_CAPTURE | V4L2_CAP_VIDEO_CAPTURE_MPLANE;
        c.device_caps = V4L2_CAP_VIDEO_CAPTURE_MPLANE | V4L2_CAP_STREAMING;
        assert_eq!(c.driver(), "vivid");
        assert_eq!(c.card(), "\u{fffd}ab");
        assert!(c.is_capture() && c.is_mplane() && c.has_streaming() && !c.is_m2m());
        assert_eq!(c.capture_buf_type(), Some(V4L2_BUF_TYPE_VIDEO_CAPTURE_MPLANE));
        c.device_caps = V4L2_CAP_VIDEO_M2M_MPLANE | V4L2_CAP_STREAMING;
        assert!(!c.is_capture() && c.is_m2m() && c.is_mplane());
        assert_eq!(c.capture_buf_type(), None);
    }

    #[test]
    fn buffer_helpers() {
        let mut b = Buffer::new(V4L2_BUF_TYPE_VIDEO_CAPTURE, V4L2_MEMORY_DMABUF, 3);
        let file = std::fs::File::open("/dev/null").unwrap();
        b.set_fd(std::os::fd::AsFd::as_fd(&file));
        assert_eq!(b.fd(), file.as_raw_fd());
        b.timestamp = libc::timeval { tv_sec: 2, tv_usec: 5 };
        b.flags = V4L2_BUF_FLAG_TIMESTAMP_MONOTONIC | V4L2_BUF_FLAG_ERROR;
        assert_eq!(b.timestamp_ns(), 2_000_005_000);
        assert!(b.timestamp_is_monotonic() && b.is_error());
    }

    #[test]
    fn wrappers_report_enotty_on_a_non_v4l2_fd() {
        use std::os::fd::AsFd;
        let null = std::fs::File::open("/dev/null").unwrap();
        let fd = null.as_fd();
        let enotty = Some(libc::ENOTTY);
        assert_eq!(querycap(fd, &mut Capability::default()).unwrap_err().raw_os_error(), enotty);
        assert_eq!(g_fmt(fd, &mut Format::new(V4L2_BUF_TYPE_VIDEO_CAPTURE)).unwrap_err().raw_os_error(), enotty);
        assert_eq!(streamon(fd, V4L2_BUF_TYPE_VIDEO_CAPTURE).unwrap_err().raw_os_error(), enotty);
        let mut e = ExportBuffer { type_: V4L2_BUF_TYPE_VIDEO_CAPTURE, ..Default::default() };
        assert_eq!(expbuf(fd, &mut e).unwrap_err().raw_os_error(), enotty);
        let mut planes = [Plane::default(); 2];
        let mut b = Buffer::new(V4L2_BUF_TYPE_VIDEO_CAPTURE_MPLANE, V4L2_MEMORY_MMAP, 0);
        assert_eq!(querybuf(fd, &mut b, &mut planes).unwrap_err().raw_os_error(), enotty);
        assert_eq!(b.length, 2);
        // SAFETY: reading the pointer member's bits only (it was written by `detach_planes`).
        assert!(unsafe { b.m.planes }.is_null(), "the plane pointer must not outlive the call");
    }

    #[test]
    fn unsound_arguments_are_refused_before_the_ioctl() {
        use std::os::fd::AsFd;
        let null = std::fs::File::open("/dev/null").unwrap();
        let fd = null.as_fd();
        let kind = |r: io::Result<()>| r.unwrap_err().kind();
        let mut b = Buffer::new(V4L2_BUF_TYPE_VIDEO_CAPTURE, V4L2_MEMORY_USERPTR, 0);
        assert_eq!(kind(qbuf(fd, &mut b, &mut [])), io::ErrorKind::InvalidInput);
        let mut b = Buffer::new(V4L2_BUF_TYPE_VIDEO_CAPTURE_MPLANE, V4L2_MEMORY_DMABUF, 0);
        assert_eq!(kind(qbuf(fd, &mut b, &mut [])), io::ErrorKind::InvalidInput);
        assert_eq!(kind(dqbuf(fd, &mut b, &mut [Plane::default(); 9])), io::ErrorKind::InvalidInput);
        let mut f = Format::new(V4L2_BUF_TYPE_VIDEO_OVERLAY);
        assert_eq!(kind(s_fmt(fd, &mut f)), io::ErrorKind::InvalidInput);
    }
}

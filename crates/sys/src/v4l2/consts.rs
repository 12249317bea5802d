//! `V4L2_*` constants of `include/uapi/linux/videodev2.h` that zcpipe uses, the fourcc
//! conversions, and the names fourccs are shown by.

use crate::fourcc::Fourcc;

/// Most planes a multi-planar format or buffer can have (`VIDEO_MAX_PLANES`).
pub(crate) const VIDEO_MAX_PLANES: usize = 8;

/// `enum v4l2_buf_type`: single-planar video capture.
pub const V4L2_BUF_TYPE_VIDEO_CAPTURE: u32 = 1;
/// `enum v4l2_buf_type`: single-planar video output.
pub const V4L2_BUF_TYPE_VIDEO_OUTPUT: u32 = 2;
/// `enum v4l2_buf_type`: video overlay (format is a `struct v4l2_window`; refused here).
pub(crate) const V4L2_BUF_TYPE_VIDEO_OVERLAY: u32 = 3;
/// `enum v4l2_buf_type`: video output overlay (format is a `struct v4l2_window`; refused here).
pub(crate) const V4L2_BUF_TYPE_VIDEO_OUTPUT_OVERLAY: u32 = 8;
/// `enum v4l2_buf_type`: multi-planar video capture.
pub const V4L2_BUF_TYPE_VIDEO_CAPTURE_MPLANE: u32 = 9;
/// `enum v4l2_buf_type`: multi-planar video output.
pub const V4L2_BUF_TYPE_VIDEO_OUTPUT_MPLANE: u32 = 10;

/// `V4L2_TYPE_IS_MULTIPLANAR(type)`: the buffer type uses `v4l2_pix_format_mplane` and a
/// `struct v4l2_plane` array.
pub const fn is_multiplanar(buf_type: u32) -> bool {
    buf_type == V4L2_BUF_TYPE_VIDEO_CAPTURE_MPLANE || buf_type == V4L2_BUF_TYPE_VIDEO_OUTPUT_MPLANE
}

/// `V4L2_SEL_TGT_COMPOSE` (`v4l2-common.h`): where on a capture buffer the device writes
/// the picture (a mem2mem scaler's destination rectangle).
pub const V4L2_SEL_TGT_COMPOSE: u32 = 0x0100;

/// `enum v4l2_memory`: buffers allocated by the driver, mapped with `mmap()` and exportable
/// with `VIDIOC_EXPBUF`.
pub const V4L2_MEMORY_MMAP: u32 = 1;
/// `enum v4l2_memory`: buffers in user memory (not queueable through [`qbuf`](super::qbuf)).
pub(crate) const V4L2_MEMORY_USERPTR: u32 = 2;
/// `enum v4l2_memory`: buffers imported as dma-buf fds.
pub const V4L2_MEMORY_DMABUF: u32 = 4;

/// `V4L2_CAP_VIDEO_CAPTURE`: single-planar video capture.
pub const V4L2_CAP_VIDEO_CAPTURE: u32 = 0x0000_0001;
/// `V4L2_CAP_VIDEO_OUTPUT`: single-planar video output.
pub const V4L2_CAP_VIDEO_OUTPUT: u32 = 0x0000_0002;
/// `V4L2_CAP_VIDEO_OVERLAY`: video overlay.
pub(crate) const V4L2_CAP_VIDEO_OVERLAY: u32 = 0x0000_0004;
/// `V4L2_CAP_VBI_CAPTURE`: raw VBI capture.
pub(crate) const V4L2_CAP_VBI_CAPTURE: u32 = 0x0000_0010;
/// `V4L2_CAP_VBI_OUTPUT`: raw VBI output.
pub(crate) const V4L2_CAP_VBI_OUTPUT: u32 = 0x0000_0020;
/// `V4L2_CAP_VIDEO_CAPTURE_MPLANE`: multi-planar video capture.
pub const V4L2_CAP_VIDEO_CAPTURE_MPLANE: u32 = 0x0000_1000;
/// `V4L2_CAP_VIDEO_OUTPUT_MPLANE`: multi-planar video output.
pub const V4L2_CAP_VIDEO_OUTPUT_MPLANE: u32 = 0x0000_2000;
/// `V4L2_CAP_VIDEO_M2M_MPLANE`: multi-planar memory-to-memory device (e.g. a scaler).
pub const V4L2_CAP_VIDEO_M2M_MPLANE: u32 = 0x0000_4000;
/// `V4L2_CAP_VIDEO_M2M`: single-planar memory-to-memory device.
pub const V4L2_CAP_VIDEO_M2M: u32 = 0x0000_8000;
/// `V4L2_CAP_SDR_CAPTURE`: software-defined radio capture.
pub(crate) const V4L2_CAP_SDR_CAPTURE: u32 = 0x0010_0000;
/// `V4L2_CAP_META_CAPTURE`: metadata capture.
pub const V4L2_CAP_META_CAPTURE: u32 = 0x0080_0000;
/// `V4L2_CAP_META_OUTPUT`: metadata output.
pub const V4L2_CAP_META_OUTPUT: u32 = 0x0800_0000;
/// `V4L2_CAP_READWRITE`: `read()`/`write()` I/O.
pub(crate) const V4L2_CAP_READWRITE: u32 = 0x0100_0000;
/// `V4L2_CAP_STREAMING`: the streaming I/O ioctls (REQBUFS, QBUF, ...).
pub const V4L2_CAP_STREAMING: u32 = 0x0400_0000;
/// `V4L2_CAP_DEVICE_CAPS`: the `device_caps` field is valid.
pub(crate) const V4L2_CAP_DEVICE_CAPS: u32 = 0x8000_0000;

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
pub(crate) const V4L2_BUF_FLAG_TIMESTAMP_MASK: u32 = 0x0000_e000;
/// `V4L2_BUF_FLAG_TIMESTAMP_UNKNOWN`: timestamp clock unknown.
pub const V4L2_BUF_FLAG_TIMESTAMP_UNKNOWN: u32 = 0x0000_0000;
/// `V4L2_BUF_FLAG_TIMESTAMP_MONOTONIC`: timestamp is `CLOCK_MONOTONIC`.
pub(crate) const V4L2_BUF_FLAG_TIMESTAMP_MONOTONIC: u32 = 0x0000_2000;
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
pub(crate) const fn fourcc_from_v4l2(pixelformat: u32) -> Fourcc {
    Fourcc(pixelformat)
}

/// A [`Fourcc`] as the V4L2 `pixelformat` value (same encoding).
pub(crate) const fn fourcc_to_v4l2(fourcc: Fourcc) -> u32 {
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

/// Formats for messages: their [`format_name`]s joined with `, `, or `empty` when there are
/// none (`"none"`, `"nothing"`).
pub fn format_list(v: &[Fourcc], empty: &str) -> String {
    if v.is_empty() {
        return empty.into();
    }
    v.iter().map(|f| format_name(*f)).collect::<Vec<_>>().join(", ")
}

/// A raw `pixelformat` as V4L2 tools print it ([`Fourcc`]'s spelling: `Y16 -BE`);
/// [`format_name`] gives zcpipe's names.
pub fn fourcc_chars(pixelformat: u32) -> String {
    Fourcc(pixelformat).to_string()
}

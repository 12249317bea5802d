//! Streaming parameters: `struct v4l2_fract` and `v4l2_streamparm`, which carries the frame
//! interval (videodev2.h; `vidioc-g-parm.rst`).

use std::fmt;

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
}

impl fmt::Debug for StreamParm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamParm").field("type_", &self.type_).field("capture", self.capture()).finish()
    }
}

zeroed_default!(StreamParm);

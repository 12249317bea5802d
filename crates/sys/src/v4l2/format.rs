//! Capabilities and formats: `struct v4l2_capability`, `v4l2_format` (single- and
//! multi-planar), `v4l2_fmtdesc`, and the frame size and interval enumerations
//! (videodev2.h; `vidioc-querycap.rst`, `vidioc-g-fmt.rst`, `vidioc-enum-fmt.rst`,
//! `vidioc-enum-framesizes.rst`, `vidioc-enum-frameintervals.rst`).

use std::borrow::Cow;
use std::fmt;
use std::mem::size_of;

use super::consts::*;
use super::parm::Fract;
use crate::fourcc::Fourcc;

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
    pub(crate) fn set_fourcc(&mut self, fourcc: Fourcc) {
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
    pub(crate) fn set_fourcc(&mut self, fourcc: Fourcc) {
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
    pub(crate) fn pix_mut(&mut self) -> &mut PixFormat {
        // SAFETY: as in `pix`; any bytes written through it are a valid union content.
        unsafe { &mut self.fmt.pix }
    }
    /// `fmt.pix_mp` (meaningful for multi-planar types).
    pub fn pix_mp(&self) -> &PixFormatMplane {
        // SAFETY: as in `pix`; `PixFormatMplane` has alignment 1, so the reference is aligned.
        unsafe { &self.fmt.pix_mp }
    }
    /// `fmt.pix_mp`, mutable.
    pub(crate) fn pix_mp_mut(&mut self) -> &mut PixFormatMplane {
        // SAFETY: as in `pix_mp`.
        unsafe { &mut self.fmt.pix_mp }
    }
    /// A `VIDIOC_S_FMT` request for buffer type `type_`: `width x height` `fourcc`,
    /// progressive (`V4L2_FIELD_NONE`), in `pix_mp` or `pix` according to `type_`. `planes`
    /// gives each plane's `(bytesperline, sizeimage)` to ask for; empty lets the driver
    /// choose (the V4L2 spec, "Single- and multi-planar APIs").
    pub fn request(type_: u32, fourcc: Fourcc, width: u32, height: u32, planes: &[(u32, u32)]) -> Format {
        let mut f = Format::new(type_);
        if is_multiplanar(type_) {
            let p = f.pix_mp_mut();
            p.width = width;
            p.height = height;
            p.set_fourcc(fourcc);
            p.field = V4L2_FIELD_NONE;
            if !planes.is_empty() {
                p.num_planes = planes.len().min(VIDEO_MAX_PLANES) as u8;
                for (pf, &(bpl, size)) in p.plane_fmt.iter_mut().zip(planes) {
                    pf.bytesperline = bpl;
                    pf.sizeimage = size;
                }
            }
        } else {
            let p = f.pix_mut();
            p.width = width;
            p.height = height;
            p.set_fourcc(fourcc);
            p.field = V4L2_FIELD_NONE;
            if let Some(&(bpl, size)) = planes.first() {
                p.bytesperline = bpl;
                p.sizeimage = size;
            }
        }
        f
    }

    /// What a driver granted (after `VIDIOC_G_FMT`/`S_FMT`), from `pix_mp` or `pix`
    /// according to `type_`: width and height in pixels, fourcc, each plane's
    /// `(bytesperline, sizeimage)` in bytes (1..=`VIDEO_MAX_PLANES` of them), and the field order.
    pub fn granted(&self) -> (u32, u32, Fourcc, Vec<(u32, u32)>, u32) {
        if is_multiplanar(self.type_) {
            let p = *self.pix_mp();
            let n = (p.num_planes as usize).clamp(1, VIDEO_MAX_PLANES);
            (
                p.width,
                p.height,
                p.fourcc(),
                p.plane_fmt[..n].iter().map(|pf| (pf.bytesperline, pf.sizeimage)).collect(),
                p.field,
            )
        } else {
            let p = *self.pix();
            (p.width, p.height, p.fourcc(), vec![(p.bytesperline, p.sizeimage)], p.field)
        }
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

/// `struct v4l2_rect` (16 bytes): a rectangle in pixels.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rect {
    /// Left edge, pixels.
    pub left: i32,
    /// Top edge, pixels.
    pub top: i32,
    /// Width, pixels.
    pub width: u32,
    /// Height, pixels.
    pub height: u32,
}

/// `struct v4l2_selection` (64 bytes): the argument of `VIDIOC_S_SELECTION`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Selection {
    /// `enum v4l2_buf_type` (in): the single-planar type even for a multi-planar queue
    /// (vidioc-g-selection.rst: since Linux 4.13 drivers take both, before only some did).
    pub type_: u32,
    /// `V4L2_SEL_TGT_*` (in).
    pub target: u32,
    /// `V4L2_SEL_FLAG_*` (in): how the driver may adjust the rectangle; 0 = nearest.
    pub flags: u32,
    /// The rectangle asked for (in) and the one set (out).
    pub r: Rect,
    /// Zero.
    pub reserved: [u32; 9],
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
        d.field("index", &self.index)
            .field("pixel_format", &fourcc_from_v4l2(self.pixel_format))
            .field("type_", &self.type_);
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

zeroed_default!(Format, FrmSizeEnum, FrmIvalEnum);

//! The four-character code of a pixel format, shared by the kernel's V4L2 and DRM
//! interfaces and every stage: a plain type at the bottom of the crate graph.

use bytemuck::{Pod, Zeroable};

/// A V4L2/DRM four-character code, little-endian as `v4l2_fourcc()` builds it
/// (`include/uapi/linux/videodev2.h`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Pod, Zeroable, Default, serde::Serialize, serde::Deserialize)]
#[repr(transparent)]
#[serde(transparent)]
pub struct Fourcc(pub u32);

impl Fourcc {
    /// Builds a fourcc from its four ASCII characters, as `v4l2_fourcc(a, b, c, d)`.
    pub const fn new(code: &[u8; 4]) -> Self {
        Fourcc(code[0] as u32 | (code[1] as u32) << 8 | (code[2] as u32) << 16 | (code[3] as u32) << 24)
    }
    /// Y plane then interleaved CbCr plane at half width and half height (`V4L2_PIX_FMT_NV12`).
    pub const NV12: Fourcc = Fourcc::new(b"NV12");
    /// NV12 with each plane in its own buffer (`V4L2_PIX_FMT_NV12M`).
    pub const NV12M: Fourcc = Fourcc::new(b"NM12");
    /// Y plane then interleaved CbCr plane at half width, full height (`V4L2_PIX_FMT_NV16`).
    pub const NV16: Fourcc = Fourcc::new(b"NV16");
    /// Packed Y0 Cb Y1 Cr, 2 bytes per pixel (`V4L2_PIX_FMT_YUYV`).
    pub const YUYV: Fourcc = Fourcc::new(b"YUYV");
    /// Packed R G B, 3 bytes per pixel (`V4L2_PIX_FMT_RGB24`).
    pub const RGB24: Fourcc = Fourcc::new(b"RGB3");
    /// Packed B G R, 3 bytes per pixel (`V4L2_PIX_FMT_BGR24`); the YOLOX model input.
    pub const BGR24: Fourcc = Fourcc::new(b"BGR3");
    /// Packed B G R X, 4 bytes per pixel (`V4L2_PIX_FMT_XBGR32`, `'XR24'`): the same bytes
    /// as DRM's `DRM_FORMAT_XRGB8888` (`[31:0] x:R:G:B` little-endian, drm_fourcc.h), so a
    /// display scans it out as it is.
    pub const XR24: Fourcc = Fourcc::new(b"XR24");
    /// Motion JPEG (`V4L2_PIX_FMT_MJPEG`, `'MJPG'`): one compressed JPEG per buffer, its
    /// length the buffer's `bytesused`. Never a frame layout zcpipe passes on (no planes):
    /// a UVC camera's MJPG buffers are decoded into an NV12 pool (`capture::v4l2::mjpg`).
    pub const MJPG: Fourcc = Fourcc::new(b"MJPG");

    /// The code as V4L2 tools print it, for messages (`NV12`, `BGR3`, `Y16 -BE`): four
    /// characters, spaces kept, other unprintable bytes as `?`, and `-BE` when bit 31 (the
    /// big-endian flag of `v4l2_fourcc_be`, videodev2.h) is set. The one speller of codes;
    /// zcpipe's own names (`NV12M`, `RGB24`) are `sys::v4l2::format_name`.
    pub fn to_string_lossy(self) -> String {
        let s: String = (self.0 & 0x7fff_ffff)
            .to_le_bytes()
            .iter()
            .map(|&b| if (0x20..0x7f).contains(&b) { b as char } else { '?' })
            .collect();
        if self.0 & 0x8000_0000 != 0 {
            format!("{s}-BE")
        } else {
            s
        }
    }

    /// Parses a user-facing format name (`NV12`, `NV16`, `NV12M`, `YUYV`, `RGB24`, `BGR24`, `XR24`)
    /// or a raw four-character code.
    pub fn parse(name: &str) -> Option<Fourcc> {
        Some(match name.to_ascii_uppercase().as_str() {
            "NV12" => Self::NV12,
            "NV12M" | "NM12" => Self::NV12M,
            "NV16" => Self::NV16,
            "YUYV" => Self::YUYV,
            "RGB24" | "RGB3" => Self::RGB24,
            "BGR24" | "BGR3" => Self::BGR24,
            "XR24" | "XBGR32" => Self::XR24,
            _ => return None,
        })
    }

    /// Number of planes of this format (1 for packed formats, 2 for NV12/NV16), or `None`
    /// for a fourcc zcpipe does not handle.
    pub fn num_planes(self) -> Option<usize> {
        match self {
            Self::NV12 | Self::NV12M | Self::NV16 => Some(2),
            Self::YUYV | Self::RGB24 | Self::BGR24 | Self::XR24 => Some(1),
            _ => None,
        }
    }
}

impl std::fmt::Debug for Fourcc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.to_string_lossy())
    }
}
impl std::fmt::Display for Fourcc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.to_string_lossy())
    }
}

//! Struct sizes, field offsets and ioctl numbers against the uapi header (x86_64 and
//! aarch64), and the wrappers' refusals.

use std::io;
use std::mem::{align_of, offset_of, size_of};
use std::os::fd::AsRawFd;

use super::*;
use crate::fourcc::Fourcc;

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
    assert_eq!(size_of::<Rect>(), 16);
    assert_eq!(size_of::<Selection>(), 64);
    assert_eq!((offset_of!(Selection, r), offset_of!(Selection, reserved)), (12, 28));
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
    assert_eq!(VIDIOC_S_SELECTION, 0xc040_565f);
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

//! Layout tests of the exported structs against `rk_mpi.h` and `mpp_buffer.h`, and the
//! fake's own checks.

use super::*;
use std::ffi::c_int;
use std::sync::atomic::AtomicU32;

use std::mem::{align_of, offset_of, size_of};

#[test]
fn layouts_match_rk_mpi_h_and_mpp_buffer_h() {
    // Worked out by hand from the headers for LP64, as zcpipe's src/sys/mpp.rs tests do.
    assert_eq!(size_of::<MppApi>(), 184);
    assert_eq!(align_of::<MppApi>(), 8);
    assert_eq!((offset_of!(MppApi, decode_put_packet), offset_of!(MppApi, decode_get_frame)), (16, 24));
    assert_eq!((offset_of!(MppApi, reset), offset_of!(MppApi, control), offset_of!(MppApi, reserv)), (104, 112, 120));
    assert_eq!((offset_of!(MppApi, poll), offset_of!(MppApi, dequeue), offset_of!(MppApi, enqueue)), (80, 88, 96));
    assert_eq!((offset_of!(MppApi, encode_put_frame), offset_of!(MppApi, encode_get_packet)), (40, 48));
    assert_eq!(size_of::<MppBufferInfo>(), 40);
    assert_eq!((offset_of!(MppBufferInfo, fd), offset_of!(MppBufferInfo, index)), (32, 36));
    assert_eq!(API.size, 184);
}

#[test]
fn ext_buf_group_before_init_is_refused_as_mpp_does() {
    let (mut ctx, mut api, mut grp): (Opaque, *const MppApi, Opaque) =
        (std::ptr::null_mut(), std::ptr::null(), std::ptr::null_mut());
    // SAFETY: out-pointers to locals; the handles come from the fake's own registries.
    unsafe {
        assert_eq!(mpp_create(&mut ctx, &mut api), MPP_OK);
        assert_eq!(
            mpp_buffer_group_get(&mut grp, MPP_BUFFER_TYPE_EXT_DMA, MPP_BUFFER_EXTERNAL, c"t".as_ptr(), c"t".as_ptr()),
            MPP_OK
        );
        assert_eq!(((*api).control)(ctx, MPP_DEC_SET_EXT_BUF_GROUP, grp), MPP_NOK);
        assert_eq!(mpp_destroy(ctx), MPP_OK);
        assert_eq!(mpp_buffer_group_put(grp), MPP_OK);
    }
}

fn memfd(size: usize) -> c_int {
    // SAFETY: a plain memfd_create call with a static name.
    let fd = unsafe { libc::memfd_create(c"t".as_ptr(), 0) };
    assert!(fd >= 0);
    // SAFETY: our own fd.
    assert_eq!(unsafe { libc::ftruncate(fd, size as i64) }, 0);
    fd
}

fn committed(fd: c_int, size: usize) -> Buffer {
    Buffer {
        group: 0,
        index: 0,
        fd,
        size,
        inode: inode(fd).unwrap(),
        holders: AtomicU32::new(0),
        refs: AtomicU32::new(0),
        dead: AtomicU32::new(0),
        refcount: AtomicU32::new(0),
        mem: 0,
    }
}

#[test]
fn a_closed_or_reused_fd_number_is_caught() {
    let (a, other) = (memfd(64), memfd(64));
    let b = committed(a, 64);
    assert_eq!(still_committed(&b), Ok(()));
    // The fd number now names another file (what a user closing and reopening gets).
    // SAFETY: our own fds.
    assert_eq!(unsafe { libc::dup2(other, a) }, a);
    assert_eq!(still_committed(&b), Err(inode(other).unwrap().1.to_string()));
    // SAFETY: our own fds, closed once.
    unsafe { libc::close(a) };
    assert!(still_committed(&b).unwrap_err().contains("Bad_file_descriptor"), "{:?}", still_committed(&b));
    // SAFETY: as above.
    unsafe { libc::close(other) };
}

#[test]
fn nv12_layout_pads_rows_and_places_chroma_at_ver_stride() {
    // A 4x2 I420 picture into an 16x16 NV12 buffer (a memfd).
    let size = 16 * 16 * 3 / 2;
    let fd = memfd(size);
    let b = committed(fd, size);
    let pic = [1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 20, 21];
    write_nv12(&b, &pic, 4, 2, 16, 16).unwrap();
    let mut got = vec![0u8; size];
    // SAFETY: reading into our own buffer from our own fd.
    assert_eq!(unsafe { libc::pread(fd, got.as_mut_ptr().cast(), size, 0) }, size as isize);
    assert_eq!(&got[0..4], &[1, 2, 3, 4]);
    assert_eq!(&got[16..20], &[5, 6, 7, 8]);
    assert_eq!(&got[256..260], &[10, 20, 11, 21]);
    // SAFETY: our own fd, closed once.
    unsafe { libc::close(fd) };
}

#[test]
fn mpjpeg_parts_come_back_whole_and_aud_and_headers_are_stripped() {
    // Two parts as ffmpeg's mpjpeg muxer writes them, then its trailer.
    let au1 = [0, 0, 0, 1, 0x09, 0xf0, 0, 0, 0, 1, 0x67, 0x64, 0, 0, 0, 1, 0x68, 0xee, 0, 0, 1, 0x65, 0x88, 0x80];
    let au2 = [0, 0, 0, 1, 0x09, 0x30, 0, 0, 0, 1, 0x41, 0x9a, 0x00, 0x00];
    let mut out = Vec::new();
    for au in [&au1[..], &au2[..]] {
        out.extend(format!("--ffmpeg\r\nContent-type: image/jpeg\r\nContent-length: {}\r\n\r\n", au.len()).bytes());
        out.extend_from_slice(au);
        out.extend(b"\r\n");
    }
    out.extend(b"--ffmpeg--\r\n");
    let mut r = std::io::Cursor::new(out);
    assert_eq!(encode::read_part(&mut r).unwrap().as_deref(), Some(&au1[..]));
    assert_eq!(encode::read_part(&mut r).unwrap().as_deref(), Some(&au2[..]));
    assert_eq!(encode::read_part(&mut r).unwrap(), None);
    // The AUD goes; SPS and PPS stay, or go when the header mode keeps them for the first picture.
    let (au, aud, idr) = encode::access_unit(&au1, false);
    assert!(aud && idr);
    assert_eq!(au, [0, 0, 0, 1, 0x67, 0x64, 0, 0, 0, 1, 0x68, 0xee, 0, 0, 0, 1, 0x65, 0x88, 0x80]);
    assert_eq!(encode::access_unit(&au1, true).0, [0, 0, 0, 1, 0x65, 0x88, 0x80]);
    // Trailing zero bytes belong to no NAL unit.
    let (au, aud, idr) = encode::access_unit(&au2, false);
    assert_eq!((au, aud, idr), (vec![0, 0, 0, 1, 0x41, 0x9a], true, false));
}

#[test]
fn nv12_is_cropped_from_its_strides() {
    // 4x2 picture in an 8x4 buffer: luma rows at 0 and 8, chroma row at 32.
    let mut src = vec![0u8; 8 * 4 * 3 / 2];
    src[0..4].copy_from_slice(&[1, 2, 3, 4]);
    src[8..12].copy_from_slice(&[5, 6, 7, 8]);
    src[32..36].copy_from_slice(&[10, 20, 11, 21]);
    assert_eq!(encode::crop_nv12(&src, 4, 2, 8, 4), [1, 2, 3, 4, 5, 6, 7, 8, 10, 20, 11, 21]);
}

#[test]
fn enc_cfg_takes_mpps_entries_and_refuses_others() {
    let mut cfg: Opaque = std::ptr::null_mut();
    let mut v = 0i32;
    // SAFETY: an out-pointer to a local and static C strings; the cfg comes from the fake.
    unsafe {
        assert_eq!(mpp_enc_cfg_init(&mut cfg), MPP_OK);
        assert_eq!(mpp_enc_cfg_set_s32(cfg, c"prep:width".as_ptr(), 320), MPP_OK);
        assert_eq!(mpp_enc_cfg_set_u32(cfg, c"rc:drop_mode".as_ptr(), 0), MPP_OK);
        assert_eq!(mpp_enc_cfg_set_s32(cfg, c"prep:widht".as_ptr(), 320), MPP_NOK);
        assert_eq!(mpp_enc_cfg_set_s64(cfg, c"rc:bps_target".as_ptr(), 1), MPP_NOK);
        assert_eq!(mpp_enc_cfg_get_s32(cfg, c"prep:width".as_ptr(), &mut v), MPP_OK);
        assert_eq!(v, 320);
        assert_eq!(mpp_enc_cfg_deinit(cfg), MPP_OK);
        assert_eq!(mpp_enc_cfg_deinit(cfg), MPP_ERR_NULL_PTR);
    }
}

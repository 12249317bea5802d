//! zcpipe's MPP binding (`src/sys/mpp.rs`) against the ABI fake of librockchip_mpp
//! (`fakes/librockchip_mpp`, built here as `target/<profile>/librockchip_mpp.so` and loaded
//! through `$ZCPIPE_LIBMPP`): small H.264 and H.265 clips made with ffmpeg's testsrc at test time,
//! fed in fixed-size chunks (parser split mode), decoded into an external group of memfd
//! buffers, each picture's luma compared with ffmpeg's own NV12 decode of the same file, and
//! the fake's call log (`$ZCPIPE_FAKE_MPP_LOG`) checked for MPP's rules. MJPEG is refused by
//! the stream API (MPP decodes it only through the task API: `MppJpeg`, tests/vendor/mjpeg.rs).
//!
//! The fake is one shared library per test process, so the tests take turns (a mutex) and
//! each reads only the log lines written since it started. They need `ffmpeg` with libx264
//! and libx265.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

use zcpipe::core::dmabuf::{Allocator, DmaBuf, HeapChoice};
use zcpipe::sys::mpp::{
    DecodedFrame, DecoderOptions, Libmpp, Mpp, MppApi, MppCodingType, MppCreateFn, MppDestroyFn, MppHandle, MppInitFn,
    MppPacketDeinitFn, MppPacketInitFn, MJPEG_REFUSED, MPP_CTX_DEC, MPP_ERR_BUFFER_FULL, MPP_FMT_YUV420SP, MPP_OK,
    MPP_VIDEO_CODING_AVC, MPP_VIDEO_CODING_HEVC, MPP_VIDEO_CODING_MJPEG,
};

use zcpipe::sys::mpp::{
    MppBufferGetPtrFn, MppBufferGetWithTagFn, MppBufferGroupFn, MppBufferGroupGetFn, MppBufferImportWithTagFn,
    MppBufferInfo, MppBufferPutFn, MppDequeueFn, MppEnqueueFn, MppFrameDeinitFn, MppFrameGetU32Fn, MppFrameInitFn,
    MppFrameSetBufferFn, MppPacketInitWithBufferFn, MppPacketSetLengthFn, MppPollFn, MppTaskMetaGetFn,
    MppTaskMetaSetFn, KEY_INPUT_PACKET, KEY_OUTPUT_FRAME, MPP_BUFFER_INTERNAL, MPP_BUFFER_TYPE_DRM,
    MPP_BUFFER_TYPE_EXT_DMA, MPP_DEC_SET_OUTPUT_FORMAT, MPP_NOK, MPP_PORT_INPUT, MPP_PORT_OUTPUT,
};

use crate::common;
use common::log_field as field;

const W: usize = 320;
const H: usize = 240;
const FRAMES: usize = 10;
/// Bytes per packet: not a divisor of anything, so packets split NAL units anywhere.
const CHUNK: usize = 997;

struct Fake {
    log: PathBuf,
}

/// A test clip: the coded stream and ffmpeg's own NV12 decode of it.
struct Clip {
    stream: Vec<u8>,
    reference: Vec<u8>,
}

fn ffmpeg(args: &[&str]) {
    let out = Command::new("ffmpeg")
        .args(["-hide_banner", "-loglevel", "error", "-y"])
        .args(args)
        .output()
        .expect("running ffmpeg (install it: apt install ffmpeg)");
    assert!(out.status.success(), "ffmpeg {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// The fake (built once) named by `ZCPIPE_LIBMPP`, its log under the target's tmp dir.
fn fake() -> &'static Fake {
    static FAKE: OnceLock<Fake> = OnceLock::new();
    FAKE.get_or_init(|| {
        let lib = common::fake_librockchip_mpp().to_path_buf();
        let log = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("zcpipe-fake-mpp-{}.log", std::process::id()));
        let _ = std::fs::remove_file(&log);
        std::env::set_var("ZCPIPE_LIBMPP", &lib);
        // ZCPIPE_FAKE_MPP_LOG is set by `session`, under the turn: set here, before the turn,
        // it would take the log lines of another module's test that holds the turn.
        std::env::remove_var("ZCPIPE_FAKE_MPP_INPUT_SLOTS");
        // The fake's default: the last 3 pictures stay the decoder's references.
        std::env::remove_var("ZCPIPE_FAKE_MPP_REFS");
        Fake { log }
    })
}

/// `FRAMES` frames of ffmpeg's testsrc at `W`x`H` coded as `format` (`h264`, `hevc`:
/// an ffmpeg muxer and demuxer name) with `codec`'s options, and ffmpeg's NV12 decode of them;
/// made once per format, in a temporary folder (no video is committed).
fn clip(format: &'static str) -> &'static Clip {
    static CLIPS: Mutex<Vec<(&'static str, &'static Clip)>> = Mutex::new(Vec::new());
    let mut clips = CLIPS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, c)) = clips.iter().find(|(f, _)| *f == format) {
        return c;
    }
    let codec: &[&str] = match format {
        "h264" => &["-c:v", "libx264", "-pix_fmt", "yuv420p", "-bsf:v", "h264_mp4toannexb"],
        _ => &["-c:v", "libx265", "-pix_fmt", "yuv420p", "-x265-params", "log-level=error"],
    };
    let dir = tempfile::tempdir().unwrap();
    let coded = dir.path().join(format!("out.{format}"));
    let nv12 = dir.path().join("ref.nv12");
    let (coded_s, nv12_s) = (coded.to_str().unwrap(), nv12.to_str().unwrap());
    let (size, frames) = (format!("testsrc=size={W}x{H}:rate=10"), FRAMES.to_string());
    ffmpeg(&[&["-f", "lavfi", "-i", &size, "-frames:v", &frames], codec, &["-f", format, coded_s]].concat());
    ffmpeg(&["-f", format, "-i", coded_s, "-f", "rawvideo", "-pix_fmt", "nv12", nv12_s]);
    let c: &'static Clip =
        Box::leak(Box::new(Clip { stream: std::fs::read(&coded).unwrap(), reference: std::fs::read(&nv12).unwrap() }));
    assert_eq!(c.reference.len(), FRAMES * W * H * 3 / 2, "ffmpeg's reference decode of the {format} clip");
    clips.push((format, c));
    c
}

/// One test at a time, with the log lines it caused.
struct Session {
    log: common::LogSince,
}

fn session() -> Session {
    let fake = fake();
    let log = common::LogSince::begin(&common::FAKE_MPP_IN_PROCESS, &fake.log);
    // mjpeg's binding tests point the in-process fake's log elsewhere during their turn.
    std::env::set_var("ZCPIPE_FAKE_MPP_LOG", &fake.log);
    Session { log }
}

impl Session {
    fn calls(&self, name: &str) -> Vec<String> {
        self.log.calls(name)
    }
    fn decoder(&self, coding: MppCodingType) -> Mpp {
        let lib = Arc::new(Libmpp::open(None).expect("opening the fake librockchip_mpp through ZCPIPE_LIBMPP"));
        Mpp::decoder(lib, coding, DecoderOptions { split_mode: true, output_timeout_ms: 50 })
            .expect("a decoder on the fake")
    }
}

fn memfd_pool(n: usize, size: usize) -> Vec<DmaBuf> {
    let a = Allocator::open(
        HeapChoice::Memfd,
        Path::new("/nonexistent"),
        Path::new("/nonexistent"),
        Path::new("/nonexistent"),
    )
    .unwrap();
    a.allocate_pool(n, size as u64).unwrap()
}

/// The stream's packets in order, then the EOS packet, fed until each is taken; frames taken
/// out between refusals go to `on_frame`, which says whether to go on. Returns the number of
/// refusals (`MPP_ERR_BUFFER_FULL`).
struct Feeder<'a> {
    chunks: Vec<&'a [u8]>,
    next: usize,
    eos_put: bool,
    refusals: usize,
}

impl<'a> Feeder<'a> {
    fn new(stream: &'a [u8]) -> Feeder<'a> {
        Feeder { chunks: stream.chunks(CHUNK).collect(), next: 0, eos_put: false, refusals: 0 }
    }
    /// Puts packets until one is refused or all (and EOS) are in.
    fn feed(&mut self, mpp: &Mpp) {
        while !self.eos_put {
            let (data, eos) = match self.chunks.get(self.next) {
                Some(c) => (*c, false),
                None => (&[][..], true),
            };
            if !mpp.put_packet(data, self.next as i64, eos).unwrap() {
                self.refusals += 1;
                return;
            }
            self.next += 1;
            self.eos_put = eos;
        }
    }
}

/// The luma plane of `buf` (NV12 at `hor` x `ver`) without its row padding.
fn luma(buf: &DmaBuf, hor: usize) -> Vec<u8> {
    let g = buf.read().unwrap();
    let b = g.bytes();
    (0..H).flat_map(|r| b[r * hor..r * hor + W].to_vec()).collect()
}

fn attach(mpp: &mut Mpp, f: &DecodedFrame, n: usize) -> Vec<DmaBuf> {
    let i = f.info();
    assert!(i.info_change && i.fd.is_none(), "{i:?}");
    assert_eq!(
        (i.width, i.height, i.hor_stride, i.ver_stride, i.fmt),
        (W as u32, H as u32, 320, 240, MPP_FMT_YUV420SP)
    );
    assert_eq!(i.buf_size, W * H * 3 / 2);
    let pool = memfd_pool(n, i.buf_size);
    let fds: Vec<BorrowedFd<'_>> = pool.iter().map(|b| b.fd()).collect();
    mpp.attach_external_buffers(&fds, i.buf_size).unwrap();
    mpp.info_change_ready().unwrap();
    pool
}

/// The fake decoder's reference pictures (its default `ZCPIPE_FAKE_MPP_REFS`).
const REFS: usize = 3;
/// External buffers for the decode tests: references + 2 frames held + 1, and some spare.
const BUFFERS: usize = 8;

/// Decodes `clip` in `CHUNK`-byte packets into `BUFFERS` memfd buffers, holding two frames
/// at a time, and checks each picture against ffmpeg's decode and the fake's log against MPP's
/// rules.
fn decodes_like_ffmpeg(coding: MppCodingType, clip: &Clip) {
    let s = session();
    let mut mpp = s.decoder(coding);
    let mut feed = Feeder::new(&clip.stream);
    let mut pool = Vec::new();
    let mut info_changes = 0;
    let mut pictures = Vec::new();
    let mut held: Vec<DecodedFrame> = Vec::new();
    let mut eos = false;
    for _ in 0..20_000 {
        feed.feed(&mpp);
        let Some(f) = mpp.get_frame().unwrap() else { continue };
        let i = *f.info();
        if i.info_change {
            info_changes += 1;
            pool = attach(&mut mpp, &f, BUFFERS);
            continue;
        }
        if i.eos && i.fd.is_none() {
            eos = true;
            break;
        }
        assert!(i.has_picture(), "{i:?}");
        // As MPP: the last picture carries eos (with its buffer), an empty EOS frame follows.
        assert_eq!(i.eos, pictures.len() == FRAMES - 1, "picture {} of {FRAMES}: {i:?}", pictures.len());
        assert_eq!(
            (i.width, i.height, i.hor_stride, i.ver_stride, i.fmt),
            (320, 240, 320, 240, MPP_FMT_YUV420SP),
            "frame {}",
            pictures.len()
        );
        let idx = i.buffer_index.expect("a committed buffer's index") as usize;
        assert!(idx < pool.len(), "{i:?}");
        // MPP reports the fd it was given at commit: the binding's duplicate of pool[idx].
        assert_eq!(i.fd, Some(mpp.external_fds()[idx].as_raw_fd()));
        assert!(
            held.iter().all(|h| h.info().buffer_index != Some(idx as i32)),
            "buffer {idx} reused while a frame holds it"
        );
        assert!(
            !pictures.iter().rev().take(REFS).any(|p| *p == idx),
            "buffer {idx} reused while a reference: {pictures:?}"
        );
        let k = pictures.len();
        let want = &clip.reference[k * W * H * 3 / 2..][..W * H];
        let got = luma(&pool[idx], i.hor_stride as usize);
        let worst = got.iter().zip(want).map(|(a, b)| a.abs_diff(*b)).max().unwrap();
        assert!(worst <= 2, "frame {k}: luma differs from ffmpeg's decode by up to {worst}");
        pictures.push(idx);
        // Hold two frames at a time, releasing the oldest.
        held.push(f);
        if held.len() > 2 {
            held.remove(0).release().unwrap();
        }
    }
    assert!(eos, "no EOS frame: {} pictures", pictures.len());
    drop(held);
    assert_eq!(info_changes, 1);
    assert_eq!(pictures.len(), FRAMES);
    assert!(feed.refusals > 0, "the fake's 4-slot input queue never refused a packet");
    // The EOS frame flushed the references: every buffer is unused again.
    assert_eq!(mpp.unused_buffers(), Some(BUFFERS as i32));
    mpp.destroy().unwrap();

    let commits = s.calls("mpp_buffer_commit");
    assert_eq!(commits.len(), BUFFERS, "{commits:?}");
    let mut inodes: Vec<&str> = commits.iter().map(|l| field(l, "ino")).collect();
    inodes.sort();
    inodes.dedup();
    assert_eq!(inodes.len(), BUFFERS, "a buffer committed twice: {commits:?}");
    let indices: Vec<String> = commits.iter().map(|l| field(l, "index").to_string()).collect();
    assert_eq!(indices, (0..BUFFERS).map(|i| i.to_string()).collect::<Vec<_>>());
    let refused = s.calls("decode_put_packet").iter().filter(|l| l.contains(" ret=-1012 ")).count();
    assert_eq!(refused, feed.refusals);
    let given =
        s.calls("decode_get_frame").iter().filter(|l| l.contains(" ret=0") && !l.contains("frame=null")).count();
    assert_eq!(given, FRAMES + 2, "pictures + info change + EOS");
    assert_eq!(s.calls("mpp_frame_deinit").len(), FRAMES + 2, "every frame released");
    let violations = s.calls("violation");
    assert!(violations.is_empty(), "{violations:?}");
    let destroy = s.calls("mpp_destroy");
    assert_eq!(destroy.len(), 1);
    assert_eq!(
        (field(&destroy[0], "frames_out"), field(&destroy[0], "unreleased_frames"), field(&destroy[0], "buffers_held")),
        ("10", "0", "0")
    );
    let put = s.calls("mpp_buffer_group_put");
    assert_eq!((put.len(), field(&put[0], "held")), (1, "0"));
    let init = s.calls("mpp_init");
    assert_eq!((field(&init[0], "coding"), field(&init[0], "split")), (coding.to_string().as_str(), "1"));
}

#[test]
fn decodes_h264_chunks_into_committed_memfds_like_ffmpeg() {
    decodes_like_ffmpeg(MPP_VIDEO_CODING_AVC, clip("h264"));
}

#[test]
fn decodes_h265_chunks_into_committed_memfds_like_ffmpeg() {
    decodes_like_ffmpeg(MPP_VIDEO_CODING_HEVC, clip("hevc"));
}

#[test]
fn mjpeg_is_refused_with_one_line_and_the_fake_refuses_plain_mjpeg_packets() {
    let s = session();
    let lib = Arc::new(Libmpp::open(None).unwrap());
    let e = Mpp::decoder(Arc::clone(&lib), MPP_VIDEO_CODING_MJPEG, DecoderOptions::default()).unwrap_err().to_string();
    assert_eq!(e, MJPEG_REFUSED);
    assert!(!e.contains('\n') && e.contains("task API") && e.contains("decode MJPEG on the CPU"), "{e}");
    assert!(s.calls("mpp_create").is_empty(), "refused before any MPP call");

    // What the binding spares its users, through the raw C API: MPP (and the fake) accept
    // mpp_init for MJPEG, then refuse every plain packet as if the queue were full.
    // SAFETY: the fake built for this test, opened by path; its symbols have the signatures
    // of rk_mpi.h and mpp_packet.h that zcpipe's binding declares.
    unsafe {
        let raw = libloading::Library::new(common::fake_librockchip_mpp()).unwrap();
        let create: libloading::Symbol<'_, MppCreateFn> = raw.get(b"mpp_create\0").unwrap();
        let init: libloading::Symbol<'_, MppInitFn> = raw.get(b"mpp_init\0").unwrap();
        let destroy: libloading::Symbol<'_, MppDestroyFn> = raw.get(b"mpp_destroy\0").unwrap();
        let packet_init: libloading::Symbol<'_, MppPacketInitFn> = raw.get(b"mpp_packet_init\0").unwrap();
        let packet_deinit: libloading::Symbol<'_, MppPacketDeinitFn> = raw.get(b"mpp_packet_deinit\0").unwrap();
        let (mut ctx, mut api): (MppHandle, *const MppApi) = (std::ptr::null_mut(), std::ptr::null());
        assert_eq!(create(&mut ctx, &mut api), MPP_OK);
        assert_eq!(init(ctx, MPP_CTX_DEC, MPP_VIDEO_CODING_MJPEG), MPP_OK);
        let jpeg = [0xffu8, 0xd8, 0xff, 0xd9];
        let mut pkt: MppHandle = std::ptr::null_mut();
        assert_eq!(packet_init(&mut pkt, jpeg.as_ptr() as *mut _, jpeg.len()), MPP_OK);
        let put = (*api).decode_put_packet.unwrap();
        for _ in 0..3 {
            assert_eq!(put(ctx, pkt), MPP_ERR_BUFFER_FULL);
        }
        assert_eq!(packet_deinit(&mut pkt), MPP_OK);
        assert_eq!(destroy(ctx), MPP_OK);
    }
    let refused = s.calls("decode_put_packet");
    assert!(
        refused.len() == 3 && refused.iter().all(|l| l.contains("ret=-1012 reason=mjpeg-needs-task-api")),
        "{refused:?}"
    );
    assert!(s.calls("violation").is_empty());
}

/// An H.264 decoder with a feeder of the H.264 clip.
fn h264(s: &Session) -> (&'static Clip, Mpp, Feeder<'static>) {
    let clip = clip("h264");
    (clip, s.decoder(MPP_VIDEO_CODING_AVC), Feeder::new(&clip.stream))
}

/// Feeds packets and takes frames until a picture comes out, attaching `n` buffers (into
/// `pool`) at the info change.
fn next_picture(mpp: &mut Mpp, feed: &mut Feeder<'_>, pool: &mut Vec<DmaBuf>, n: usize) -> DecodedFrame {
    for _ in 0..20_000 {
        feed.feed(mpp);
        let Some(f) = mpp.get_frame().unwrap() else { continue };
        if f.info().info_change {
            *pool = attach(mpp, &f, n);
            continue;
        }
        return f;
    }
    panic!("no picture in 20 000 tries");
}

#[test]
fn held_frames_and_references_stall_the_decoder_and_leaks_are_logged() {
    let s = session();
    let (clip, mut mpp, mut feed) = h264(&s);
    let mut pool = Vec::new();
    let mut held: Vec<DecodedFrame> = Vec::new();
    // Five buffers, every picture held: after five pictures the fake must say it has no free
    // buffer (the last three are references as well).
    let n = REFS + 2;
    let stalled = |s: &Session| s.calls("decode_get_frame").iter().any(|l| l.contains("reason=no-free-buffer"));
    for _ in 0..20_000 {
        if stalled(&s) {
            break;
        }
        feed.feed(&mpp);
        let Some(f) = mpp.get_frame().unwrap() else { continue };
        if f.info().info_change {
            pool = attach(&mut mpp, &f, n);
            continue;
        }
        assert!(f.info().has_picture(), "{:?}", f.info());
        held.push(f);
        assert!(held.len() <= n, "a picture while every buffer is held");
    }
    assert!(stalled(&s), "the fake never ran out of buffers");
    assert_eq!(held.len(), n);
    assert_eq!(mpp.unused_buffers(), Some(0));
    assert!(mpp.get_frame().unwrap().is_none(), "a picture with every buffer held");
    let stall = s.calls("decode_get_frame").into_iter().find(|l| l.contains("reason=no-free-buffer")).unwrap();
    assert_eq!((field(&stall, "references"), field(&stall, "held_by_frames")), ("3", "5"), "{stall}");
    // Releasing the newest frame frees nothing: its buffer is still a reference.
    held.pop().unwrap().release().unwrap();
    assert_eq!(mpp.unused_buffers(), Some(0), "a reference's buffer counted as unused");
    assert!(mpp.get_frame().unwrap().is_none(), "a picture into a reference's buffer");
    // Releasing the oldest (no longer a reference) frees its buffer, and the next picture
    // goes there.
    let first = held.remove(0);
    let freed = first.info().buffer_index;
    first.release().unwrap();
    assert_eq!(mpp.unused_buffers(), Some(1));
    let next = next_picture(&mut mpp, &mut feed, &mut pool, n);
    assert_eq!(next.info().buffer_index, freed);
    assert_eq!(luma(&pool[freed.unwrap() as usize], 320), clip.reference[n * W * H * 3 / 2..][..W * H], "picture {n}");
    held.push(next);
    // Destroying the decoder while four frames are held: the fake counts them, and putting
    // the group (which the binding does right after mpp_destroy) is a violation.
    mpp.destroy().unwrap();
    let destroy = s.calls("mpp_destroy");
    assert_eq!((field(&destroy[0], "unreleased_frames"), field(&destroy[0], "buffers_held")), ("4", "4"));
    let violations = s.calls("violation");
    assert!(
        violations.len() == 2
            && violations.iter().any(|v| v.contains("what=group-clear-while-held"))
            && violations.iter().any(|v| v.contains("what=group-put-while-held")),
        "{violations:?}"
    );
    drop(held);
    assert_eq!(
        s.calls("mpp_frame_deinit").len(),
        7,
        "info change, the newest and the oldest picture, then the four held at the end"
    );
}

/// The (device, inode) an fd of this process refers to, or `None` when it is closed.
fn fd_inode(fd: i32) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/self/fd/{fd}")).ok().map(|m| (m.dev(), m.ino()))
}

#[test]
fn a_frame_keeps_its_fd_open_after_the_decoder_is_dropped() {
    let s = session();
    let (clip, mut mpp, mut feed) = h264(&s);
    let mut pool = Vec::new();
    let picture = next_picture(&mut mpp, &mut feed, &mut pool, BUFFERS);
    let (fd, idx) = (picture.info().fd.unwrap(), picture.info().buffer_index.unwrap() as usize);
    let committed = fd_inode(pool[idx].fd().as_raw_fd()).unwrap();
    assert_eq!(fd_inode(fd), Some(committed));
    // The decoder goes first (mpp_destroy, group put): the frame's fd must still be the
    // committed dma-buf, not a closed or recycled number.
    drop(mpp);
    assert_eq!(fd_inode(fd), Some(committed), "fd {fd} closed or reused while its frame lives");
    assert_eq!(luma(&pool[idx], 320), clip.reference[..W * H], "first picture");
    drop(picture);
    // Now it is closed (or, if another thread reused the number, names another file).
    assert_ne!(fd_inode(fd), Some(committed), "fd {fd} still open after the last frame");
    let violations = s.calls("violation");
    assert!(
        violations.len() == 2 && violations.iter().all(|v| v.contains("-while-held")),
        "the binding puts the group while the frame is held: {violations:?}"
    );
}

/// Real MPP gives no frame at all for a stream it cannot parse (no EOS frame either), so a
/// caller must bound its own wait; the fake does the same and logs ffmpeg's message.
#[test]
fn a_stream_the_decoder_cannot_read_gives_no_frame_and_get_frame_returns() {
    let s = session();
    let mpp = s.decoder(MPP_VIDEO_CODING_AVC);
    // Bytes with no start code: not H.264 at all.
    let junk: Vec<u8> = (0..20_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 | 1).collect();
    let mut feed = Feeder::new(&junk);
    let failed = |s: &Session| s.calls("decode_get_frame").iter().any(|l| l.contains("decoder-error="));
    let mut tries = 0;
    while !failed(&s) {
        tries += 1;
        assert!(tries <= 20_000, "the fake's decoder never gave up on junk");
        feed.feed(&mpp);
        // Each call returns (after the 50 ms output timeout at most) with no frame.
        let f = mpp.get_frame().unwrap();
        assert!(f.is_none(), "a frame from junk: {:?}", f.map(|f| *f.info()));
    }
    for _ in 0..5 {
        assert!(mpp.get_frame().unwrap().is_none(), "a frame after the decoder failed");
    }
    mpp.destroy().unwrap();
    assert_eq!(
        s.calls("decode_get_frame").iter().filter(|l| l.contains("decoder-error=")).count(),
        1,
        "the fake says why, once"
    );
    assert!(s.calls("violation").is_empty());
}

/// A symbol of the library `$lib` as a function pointer of type `$t` (unsafe: `$t` must be
/// the symbol's type).
macro_rules! sym {
    ($lib:ident, $n:literal, $t:ty) => {
        *$lib.get::<$t>(concat!($n, "\0").as_bytes()).unwrap()
    };
}

/// The fake's task API keeps real MPP's rules for MJPEG, through the raw C API (what
/// `MppJpeg` spares its users): `MPP_DEC_SET_OUTPUT_FORMAT` before `mpp_init` fails (no
/// decoder yet); poll gives `MPP_OK` (0) for a ready port and `MPP_NOK` for an empty one;
/// a meta key of the wrong type is `MPP_NOK`; a grayscale JPEG is an error frame (YUV400
/// with a YUV420SP output); while the user holds the one output task the next JPEG waits;
/// an output buffer too small is decoded by real MPP anyway, so the fake logs a violation
/// (and writes nothing).
#[test]
fn the_task_api_keeps_mpps_rules_for_mjpeg() {
    let s = session();
    let (gray, color) = gray_and_color_jpegs();
    let pool = memfd_pool(2, 64 * 48 * 3 / 2);
    let small = memfd_pool(1, 64 * 48);
    let tag = c"zcpipe-test".as_ptr();
    // SAFETY: the fake built for this test, opened by path; its symbols have the signatures
    // of rk_mpi.h, mpp_task.h, mpp_frame.h, mpp_packet.h and mpp_buffer.h that zcpipe's
    // binding declares; every handle passed is one the fake gave.
    unsafe {
        let raw = libloading::Library::new(common::fake_librockchip_mpp()).unwrap();
        let create = sym!(raw, "mpp_create", MppCreateFn);
        let init = sym!(raw, "mpp_init", MppInitFn);
        let destroy = sym!(raw, "mpp_destroy", MppDestroyFn);
        let group_get = sym!(raw, "mpp_buffer_group_get", MppBufferGroupGetFn);
        let group_put = sym!(raw, "mpp_buffer_group_put", MppBufferGroupFn);
        let buffer_get = sym!(raw, "mpp_buffer_get_with_tag", MppBufferGetWithTagFn);
        let buffer_ptr = sym!(raw, "mpp_buffer_get_ptr_with_caller", MppBufferGetPtrFn);
        let buffer_put = sym!(raw, "mpp_buffer_put_with_caller", MppBufferPutFn);
        let import = sym!(raw, "mpp_buffer_import_with_tag", MppBufferImportWithTagFn);
        let packet_init = sym!(raw, "mpp_packet_init_with_buffer", MppPacketInitWithBufferFn);
        let set_length = sym!(raw, "mpp_packet_set_length", MppPacketSetLengthFn);
        let set_size = sym!(raw, "mpp_packet_set_size", MppPacketSetLengthFn);
        let packet_deinit = sym!(raw, "mpp_packet_deinit", MppPacketDeinitFn);
        let frame_init = sym!(raw, "mpp_frame_init", MppFrameInitFn);
        let frame_set_buffer = sym!(raw, "mpp_frame_set_buffer", MppFrameSetBufferFn);
        let frame_errinfo = sym!(raw, "mpp_frame_get_errinfo", MppFrameGetU32Fn);
        let frame_deinit = sym!(raw, "mpp_frame_deinit", MppFrameDeinitFn);
        let set_packet = sym!(raw, "mpp_task_meta_set_packet", MppTaskMetaSetFn);
        let set_frame = sym!(raw, "mpp_task_meta_set_frame", MppTaskMetaSetFn);
        let get_packet = sym!(raw, "mpp_task_meta_get_packet", MppTaskMetaGetFn);
        let get_frame = sym!(raw, "mpp_task_meta_get_frame", MppTaskMetaGetFn);
        let null = std::ptr::null_mut;
        let (mut ctx, mut api): (MppHandle, *const MppApi) = (null(), std::ptr::null());
        assert_eq!(create(&mut ctx, &mut api), MPP_OK);
        let a = &*api;
        let control = a.control.unwrap();
        let poll = std::mem::transmute::<*const std::ffi::c_void, MppPollFn>(a.poll);
        let dequeue = std::mem::transmute::<*const std::ffi::c_void, MppDequeueFn>(a.dequeue);
        let enqueue = std::mem::transmute::<*const std::ffi::c_void, MppEnqueueFn>(a.enqueue);
        let mut fmt = MPP_FMT_YUV420SP;
        assert_eq!(
            control(ctx, MPP_DEC_SET_OUTPUT_FORMAT, (&mut fmt as *mut u32).cast()),
            MPP_NOK,
            "no decoder before mpp_init"
        );
        assert_eq!(init(ctx, MPP_CTX_DEC, MPP_VIDEO_CODING_MJPEG), MPP_OK);
        assert_eq!(control(ctx, MPP_DEC_SET_OUTPUT_FORMAT, (&mut fmt as *mut u32).cast()), MPP_OK);
        assert_eq!((poll(ctx, MPP_PORT_INPUT, 0), poll(ctx, MPP_PORT_OUTPUT, 0)), (MPP_OK, MPP_NOK));

        let mut group = null();
        assert_eq!(group_get(&mut group, MPP_BUFFER_TYPE_DRM, MPP_BUFFER_INTERNAL, tag, tag), MPP_OK);
        // A job: the JPEG in an internal buffer, the output an imported memfd.
        let job = |jpeg: &[u8], out: BorrowedFd<'_>, out_size: usize| {
            let mut b = null();
            assert_eq!(buffer_get(group, &mut b, 64 << 10, tag, tag), MPP_OK);
            std::ptr::copy_nonoverlapping(jpeg.as_ptr(), buffer_ptr(b, tag).cast::<u8>(), jpeg.len());
            let mut info = MppBufferInfo {
                type_: MPP_BUFFER_TYPE_EXT_DMA,
                size: out_size,
                ptr: null(),
                hnd: null(),
                fd: out.as_raw_fd(),
                index: 0,
            };
            let mut ob = null();
            assert_eq!(import(null(), &mut info, &mut ob, tag, tag), MPP_OK);
            let (mut pkt, mut frm) = (null(), null());
            assert_eq!(packet_init(&mut pkt, b), MPP_OK);
            set_length(pkt, jpeg.len());
            set_size(pkt, jpeg.len());
            assert_eq!(frame_init(&mut frm), MPP_OK);
            frame_set_buffer(frm, ob);
            (b, ob, pkt, frm)
        };
        let take = |port| {
            let mut t = null();
            assert_eq!(dequeue(ctx, port, &mut t), MPP_OK);
            t
        };
        let j1 = job(&gray, pool[0].fd(), pool[0].size() as usize);
        let t = take(MPP_PORT_INPUT);
        assert_eq!(set_packet(t, KEY_OUTPUT_FRAME, j1.2), MPP_NOK, "a packet under a frame key");
        assert_eq!(set_frame(t, KEY_INPUT_PACKET, j1.3), MPP_NOK, "a frame under a packet key");
        assert_eq!((set_packet(t, KEY_INPUT_PACKET, j1.2), set_frame(t, KEY_OUTPUT_FRAME, j1.3)), (MPP_OK, MPP_OK));
        assert_eq!(enqueue(ctx, MPP_PORT_INPUT, t), MPP_OK);
        // The grayscale JPEG: an error frame. The user keeps the output task for now.
        assert_eq!(poll(ctx, MPP_PORT_OUTPUT, 10), MPP_OK);
        let out1 = take(MPP_PORT_OUTPUT);
        let mut f = null();
        assert_eq!(get_frame(out1, KEY_OUTPUT_FRAME, &mut f), MPP_OK);
        assert_eq!((f, frame_errinfo(f)), (j1.3, 1));
        let t = take(MPP_PORT_INPUT);
        let mut p = null();
        assert_eq!(get_packet(t, KEY_INPUT_PACKET, &mut p), MPP_OK);
        assert_eq!(enqueue(ctx, MPP_PORT_INPUT, t), MPP_OK);
        // The next JPEG, into a buffer too small: it waits while the output task is held.
        let j2 = job(&color, small[0].fd(), 64 * 48);
        let t = take(MPP_PORT_INPUT);
        assert_eq!((set_packet(t, KEY_INPUT_PACKET, j2.2), set_frame(t, KEY_OUTPUT_FRAME, j2.3)), (MPP_OK, MPP_OK));
        assert_eq!(enqueue(ctx, MPP_PORT_INPUT, t), MPP_OK);
        assert_eq!(s.calls("task_decode").len(), 1, "decoded while the output task is held");
        assert_eq!(poll(ctx, MPP_PORT_OUTPUT, 10), MPP_NOK);
        assert_eq!(enqueue(ctx, MPP_PORT_OUTPUT, out1), MPP_OK);
        let out2 = take(MPP_PORT_OUTPUT);
        assert_eq!(get_frame(out2, KEY_OUTPUT_FRAME, &mut f), MPP_OK);
        assert_eq!((f, frame_errinfo(f)), (j2.3, 1));
        assert_eq!(enqueue(ctx, MPP_PORT_OUTPUT, out2), MPP_OK);
        let t = take(MPP_PORT_INPUT);
        assert_eq!(get_packet(t, KEY_INPUT_PACKET, &mut p), MPP_OK);
        assert_eq!(enqueue(ctx, MPP_PORT_INPUT, t), MPP_OK);
        for (b, ob, mut pkt, mut frm) in [j1, j2] {
            assert_eq!((frame_deinit(&mut frm), packet_deinit(&mut pkt)), (MPP_OK, MPP_OK));
            assert_eq!((buffer_put(b, tag), buffer_put(ob, tag)), (MPP_OK, MPP_OK));
        }
        assert_eq!(destroy(ctx), MPP_OK);
        assert_eq!(group_put(group), MPP_OK);
    }
    check_task_log(&s, gray.len());
}

/// A 1-component (grayscale) and a 3-component JPEG, 64x48.
fn gray_and_color_jpegs() -> (Vec<u8>, Vec<u8>) {
    let (mut gray, mut color) = (Vec::new(), Vec::new());
    ::image::codecs::jpeg::JpegEncoder::new_with_quality(&mut gray, 90)
        .encode_image(&::image::GrayImage::from_pixel(64, 48, ::image::Luma([90])))
        .unwrap();
    ::image::codecs::jpeg::JpegEncoder::new_with_quality(&mut color, 90)
        .encode_image(&::image::RgbImage::from_pixel(64, 48, ::image::Rgb([200, 40, 40])))
        .unwrap();
    assert_eq!(
        (zcpipe::sys::mpp::jpeg_sof(&gray).unwrap().components, zcpipe::sys::mpp::jpeg_sof(&color).unwrap().components),
        (1, 3)
    );
    (gray, color)
}

/// The fake's log of the task API test: two decodes (the first a grayscale JPEG of
/// `gray_len` bytes), its two violations, and every buffer back at the group's put.
fn check_task_log(s: &Session, gray_len: usize) {
    let decodes = s.calls("task_decode");
    assert_eq!(decodes.len(), 2, "{decodes:?}");
    assert!(
        field(&decodes[0], "reason") == "yuv400-with-yuv420sp-output"
            && field(&decodes[0], "size") == gray_len.to_string(),
        "{}",
        decodes[0]
    );
    let violations = s.calls("violation");
    assert!(violations.len() == 2 && violations[0].contains("what=output-format-before-init"), "{violations:?}");
    assert!(
        violations[1].contains("what=output-buffer-too-small") && violations[1].contains("size=3072 need=4608"),
        "{violations:?}"
    );
    assert_eq!(field(&s.calls("mpp_buffer_group_put")[0], "all_live"), "0");
}
